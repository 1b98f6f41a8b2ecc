/* check_fakecuda.c — tests of the fake driver itself (test/fakecuda).
 *
 * Each test runs in its own forked process (CK_FORK) with its own state
 * file, so cross-process accounting starts from zero. */
#include <check.h>

#include "../gs_check.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../../hook/gs_cudadecl.h"

#define MiB (1ull << 20)

static char g_state[128];

static void setup_state(const char *mem, const char *ndev)
{
        snprintf(g_state, sizeof(g_state), "/tmp/gshare-fakecuda-check-%d", (int)getpid());
        unlink(g_state);
        setenv("GSHARE_FAKECUDA_STATE", g_state, 1);
        setenv("GSHARE_FAKECUDA_MEM", mem, 1);
        setenv("GSHARE_FAKECUDA_DEVICES", ndev, 1);
        ck_assert_int_eq(cuInit(0), CUDA_SUCCESS);
}

static void teardown_state(void) { unlink(g_state); }

static CUcontext make_ctx(int dev)
{
        CUcontext c = NULL;
        ck_assert_int_eq(cuDevicePrimaryCtxRetain(&c, dev), CUDA_SUCCESS);
        ck_assert_int_eq(cuCtxSetCurrent(c), CUDA_SUCCESS);
        return c;
}

static size_t used_bytes(void)
{
        size_t f = 0, t = 0;
        ck_assert_int_eq(cuMemGetInfo_v2(&f, &t), CUDA_SUCCESS);
        return t - f;
}

START_TEST(test_not_initialized)
{
        int n = 0;
        CUdeviceptr p;
        ck_assert_int_eq(cuDeviceGetCount(&n), CUDA_ERROR_NOT_INITIALIZED);
        ck_assert_int_eq(cuMemAlloc_v2(&p, 4096), CUDA_ERROR_NOT_INITIALIZED);
}
END_TEST

START_TEST(test_devices)
{
        int n = 0, bus = -1;
        CUuuid u0, u1;
        char pci[32], name[64];
        size_t total = 0;

        setup_state("1Gi", "2");
        ck_assert_int_eq(cuDeviceGetCount(&n), CUDA_SUCCESS);
        ck_assert_int_eq(n, 2);
        ck_assert_int_eq(cuDeviceGetUuid_v2(&u0, 0), CUDA_SUCCESS);
        ck_assert_int_eq(cuDeviceGetUuid_v2(&u1, 1), CUDA_SUCCESS);
        ck_assert(memcmp(u0.bytes, u1.bytes, 16) != 0);
        ck_assert_int_eq(cuDeviceGetUuid(&u1, 0), CUDA_SUCCESS);
        ck_assert(memcmp(u0.bytes, u1.bytes, 16) == 0);
        ck_assert_int_eq(cuDeviceGetPCIBusId(pci, sizeof(pci), 1), CUDA_SUCCESS);
        ck_assert_str_eq(pci, "0000:02:00.0");
        ck_assert_int_eq(cuDeviceGetAttribute(&bus, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, 1), CUDA_SUCCESS);
        ck_assert_int_eq(bus, 2);
        ck_assert_int_eq(cuDeviceGetName(name, sizeof(name), 0), CUDA_SUCCESS);
        ck_assert(strstr(name, "gshare fake GPU") != NULL);
        ck_assert_int_eq(cuDeviceTotalMem_v2(&total, 1), CUDA_SUCCESS);
        ck_assert_uint_eq(total, 1ull << 30);
        ck_assert_int_eq(cuDeviceTotalMem_v2(&total, 2), CUDA_ERROR_INVALID_DEVICE);
        teardown_state();
}
END_TEST

START_TEST(test_alloc_needs_context)
{
        CUdeviceptr p;
        setup_state("64Mi", "1");
        ck_assert_int_eq(cuMemAlloc_v2(&p, 4096), CUDA_ERROR_INVALID_CONTEXT);
        teardown_state();
}
END_TEST

START_TEST(test_alloc_copy_free)
{
        CUdeviceptr p, base = 0;
        size_t size = 0;
        char in[1000], out[1000];

        setup_state("64Mi", "1");
        make_ctx(0);
        ck_assert_int_eq(cuMemAlloc_v2(&p, sizeof(in)), CUDA_SUCCESS);
        ck_assert_uint_eq(p % 256, 0);
        memset(in, 'x', sizeof(in));
        ck_assert_int_eq(cuMemcpyHtoD_v2(p, in, sizeof(in)), CUDA_SUCCESS);
        ck_assert_int_eq(cuMemcpyDtoH_v2(out, p, sizeof(out)), CUDA_SUCCESS);
        ck_assert(memcmp(in, out, sizeof(in)) == 0);
        ck_assert_int_eq(cuMemsetD8_v2(p, 7, 10), CUDA_SUCCESS);
        ck_assert_int_eq(((unsigned char *)p)[9], 7);
        ck_assert_int_eq(cuMemGetAddressRange_v2(&base, &size, p + 500), CUDA_SUCCESS);
        ck_assert_uint_eq(base, p);
        ck_assert_uint_eq(size, sizeof(in));
        ck_assert_int_eq(cuMemFree_v2(p + 8), CUDA_ERROR_INVALID_VALUE);
        ck_assert_int_eq(cuMemFree_v2(p), CUDA_SUCCESS);
        ck_assert_int_eq(cuMemFree_v2(p), CUDA_ERROR_INVALID_VALUE);
        ck_assert_uint_eq(used_bytes(), 0);
        teardown_state();
}
END_TEST

START_TEST(test_oom_at_limit)
{
        CUdeviceptr a, b;
        CUmemGenericAllocationHandle h;
        CUmemAllocationProp prop = { 0 };

        setup_state("64Mi", "1");
        make_ctx(0);
        ck_assert_int_eq(cuMemAlloc_v2(&a, 48 * MiB), CUDA_SUCCESS);
        ck_assert_int_eq(cuMemAlloc_v2(&b, 32 * MiB), CUDA_ERROR_OUT_OF_MEMORY);
        prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
        prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        ck_assert_int_eq(cuMemCreate(&h, 32 * MiB, &prop, 0), CUDA_ERROR_OUT_OF_MEMORY);
        ck_assert_int_eq(cuMemCreate(&h, 16 * MiB, &prop, 0), CUDA_SUCCESS);
        ck_assert_uint_eq(used_bytes(), 64 * MiB);
        ck_assert_int_eq(cuMemRelease(h), CUDA_SUCCESS);
        ck_assert_int_eq(cuMemFree_v2(a), CUDA_SUCCESS);
        ck_assert_int_eq(cuMemAlloc_v2(&b, 32 * MiB), CUDA_SUCCESS);
        ck_assert_uint_eq(used_bytes(), 32 * MiB);
        teardown_state();
}
END_TEST

/* Two processes share one device's accounting; a dead process's charges go. */
START_TEST(test_accounting_across_processes)
{
        CUdeviceptr a;
        int pfd[2], cfd[2], status;
        char c;
        pid_t pid;

        setup_state("64Mi", "1");
        make_ctx(0);
        ck_assert_int_eq(cuMemAlloc_v2(&a, 16 * MiB), CUDA_SUCCESS);
        ck_assert_int_eq(pipe(pfd), 0);
        ck_assert_int_eq(pipe(cfd), 0);
        pid = fork();
        ck_assert_int_ge(pid, 0);
        if (pid == 0) {
                CUdeviceptr b;
                int ok = used_bytes() == 16 * MiB && cuMemAlloc_v2(&b, 40 * MiB) == CUDA_SUCCESS &&
                         cuMemAlloc_v2(&b, 16 * MiB) == CUDA_ERROR_OUT_OF_MEMORY;
                c = ok ? 'y' : 'n';
                (void)!write(cfd[1], &c, 1);
                (void)!read(pfd[0], &c, 1); /* hold the memory until told */
                _exit(0);                   /* without freeing: a "crash" */
        }
        ck_assert_int_eq(read(cfd[0], &c, 1), 1);
        ck_assert_int_eq(c, 'y');
        ck_assert_uint_eq(used_bytes(), 56 * MiB);
        ck_assert_int_eq(cuMemAlloc_v2(&a, 16 * MiB), CUDA_ERROR_OUT_OF_MEMORY);
        ck_assert_int_eq(write(pfd[1], "x", 1), 1);
        ck_assert_int_eq(waitpid(pid, &status, 0), pid);
        /* The child's 40 MiB are dropped once it no longer exists. */
        ck_assert_uint_eq(used_bytes(), 16 * MiB);
        ck_assert_int_eq(cuMemAlloc_v2(&a, 40 * MiB), CUDA_SUCCESS);
        teardown_state();
}
END_TEST

static CUdeviceptr map_handle(CUmemGenericAllocationHandle h, size_t size)
{
        CUdeviceptr va;
        CUmemAccessDesc acc = { { CU_MEM_LOCATION_TYPE_DEVICE, 0 }, CU_MEM_ACCESS_FLAGS_PROT_READWRITE };

        ck_assert_int_eq(cuMemAddressReserve(&va, size * 2, size * 2, 0, 0), CUDA_SUCCESS);
        ck_assert_uint_eq(va % (size * 2), 0);
        ck_assert_int_eq(cuMemMap(va + size, size, 0, h, 0), CUDA_SUCCESS);
        ck_assert_int_eq(cuMemSetAccess(va + size, size, &acc, 1), CUDA_SUCCESS);
        return va + size;
}

START_TEST(test_vmm_export_import_across_processes)
{
        CUmemGenericAllocationHandle h;
        CUmemAllocationProp prop = { 0 };
        size_t gran = 0;
        CUdeviceptr p;
        int fd = -1, status;
        pid_t pid;

        setup_state("64Mi", "1");
        make_ctx(0);
        prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
        prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
        ck_assert_int_eq(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM), CUDA_SUCCESS);
        ck_assert_uint_eq(gran, 2 * MiB);
        ck_assert_int_eq(cuMemCreate(&h, 3 * MiB, &prop, 0), CUDA_ERROR_INVALID_VALUE);
        ck_assert_int_eq(cuMemCreate(&h, 4 * MiB, &prop, 0), CUDA_SUCCESS);
        ck_assert_int_eq(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0), CUDA_SUCCESS);
        ck_assert_int_ge(fd, 0);
        p = map_handle(h, 4 * MiB);
        memset((void *)p, 0xab, 4 * MiB);
        pid = fork();
        ck_assert_int_ge(pid, 0);
        if (pid == 0) {
                CUmemGenericAllocationHandle ih;
                CUmemAllocationProp got;
                size_t before = used_bytes();
                int ok = cuMemImportFromShareableHandle(&ih, (void *)(intptr_t)fd,
                                                        CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) == CUDA_SUCCESS;
                close(fd);
                ok = ok && used_bytes() == before; /* imports do not charge */
                ok = ok && cuMemGetAllocationPropertiesFromHandle(&got, ih) == CUDA_SUCCESS &&
                     got.location.id == 0 && got.type == CU_MEM_ALLOCATION_TYPE_PINNED;
                if (ok) {
                        CUdeviceptr q = map_handle(ih, 4 * MiB);
                        ok = ((unsigned char *)q)[4 * MiB - 1] == 0xab;
                        ((unsigned char *)q)[12345] = 0x5c;
                        ok = ok && cuMemRelease(ih) == CUDA_SUCCESS && cuMemUnmap(q, 4 * MiB) == CUDA_SUCCESS;
                }
                _exit(ok ? 0 : 1);
        }
        ck_assert_int_eq(waitpid(pid, &status, 0), pid);
        ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
        ck_assert_int_eq(((unsigned char *)p)[12345], 0x5c);
        ck_assert_uint_eq(used_bytes(), 4 * MiB);
        close(fd);
        /* The mapping keeps the memory alive after the handle is released. */
        ck_assert_int_eq(cuMemRelease(h), CUDA_SUCCESS);
        ck_assert_uint_eq(used_bytes(), 4 * MiB);
        ck_assert_int_eq(cuMemRelease(h), CUDA_ERROR_INVALID_VALUE);
        ck_assert_int_eq(cuMemUnmap(p, 4 * MiB), CUDA_SUCCESS);
        ck_assert_uint_eq(used_bytes(), 0);
        teardown_state();
}
END_TEST

START_TEST(test_vmm_checks)
{
        CUmemGenericAllocationHandle h, h2;
        CUmemAllocationProp prop = { 0 };
        CUmemAccessDesc acc = { { CU_MEM_LOCATION_TYPE_DEVICE, 0 }, CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
        CUdeviceptr va;
        int fd;

        setup_state("64Mi", "1");
        make_ctx(0);
        prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
        prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        ck_assert_int_eq(cuMemCreate(&h, 2 * MiB, &prop, 0), CUDA_SUCCESS);
        /* Not created with the POSIX fd type: no export. */
        ck_assert_int_ne(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0), CUDA_SUCCESS);
        ck_assert_int_eq(cuMemAddressReserve(&va, 8 * MiB, 0, 0, 0), CUDA_SUCCESS);
        ck_assert_int_eq(cuMemMap(va, 2 * MiB, 4096, h, 0), CUDA_ERROR_INVALID_VALUE);
        ck_assert_int_eq(cuMemMap(va, 4 * MiB, 0, h, 0), CUDA_ERROR_INVALID_VALUE);
        ck_assert_int_eq(cuMemMap(va + 8 * MiB, 2 * MiB, 0, h, 0), CUDA_ERROR_INVALID_VALUE);
        ck_assert_int_eq(cuMemSetAccess(va, 2 * MiB, &acc, 1), CUDA_ERROR_INVALID_VALUE);
        ck_assert_int_eq(cuMemMap(va, 2 * MiB, 0, h, 0), CUDA_SUCCESS);
        ck_assert_int_eq(cuMemMap(va, 2 * MiB, 0, h, 0), CUDA_ERROR_ALREADY_MAPPED);
        ck_assert_int_eq(cuMemSetAccess(va, 2 * MiB, &acc, 1), CUDA_SUCCESS);
        ck_assert_int_eq(cuMemRetainAllocationHandle(&h2, (void *)(va + 100)), CUDA_SUCCESS);
        ck_assert_uint_eq(h2, h);
        ck_assert_int_eq(cuMemRelease(h2), CUDA_SUCCESS);
        ck_assert_int_eq(cuMemAddressFree(va, 8 * MiB), CUDA_ERROR_INVALID_VALUE); /* still mapped */
        ck_assert_int_eq(cuMemUnmap(va, 4 * MiB), CUDA_ERROR_INVALID_VALUE);
        ck_assert_int_eq(cuMemUnmap(va, 2 * MiB), CUDA_SUCCESS);
        ck_assert_int_eq(cuMemRelease(h), CUDA_SUCCESS);
        ck_assert_int_eq(cuMemAddressFree(va, 8 * MiB), CUDA_SUCCESS);
        prop.type = CU_MEM_ALLOCATION_TYPE_MANAGED;
        ck_assert_int_ne(cuMemCreate(&h, 2 * MiB, &prop, 0), CUDA_SUCCESS);
        teardown_state();
}
END_TEST

START_TEST(test_get_proc_address)
{
        void *fn = NULL;
        CUdriverProcAddressQueryResult st;

        ck_assert_int_eq(cuGetProcAddress_v2("cuMemAlloc", &fn, 12000, 0, &st), CUDA_SUCCESS);
        ck_assert_ptr_eq(fn, (void *)cuMemAlloc_v2);
        ck_assert_int_eq(st, CU_GET_PROC_ADDRESS_SUCCESS);
        ck_assert_int_eq(cuGetProcAddress_v2("cuMemAlloc", &fn, 3000, 0, &st), CUDA_SUCCESS);
        ck_assert_ptr_eq(fn, (void *)cuMemAlloc);
        ck_assert_int_eq(cuGetProcAddress_v2("cuMemAllocAsync", &fn, 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM,
                                             &st), CUDA_SUCCESS);
        ck_assert_ptr_eq(fn, (void *)cuMemAllocAsync_ptsz);
        ck_assert_int_eq(cuGetProcAddress("cuGetProcAddress", &fn, 12000, 0), CUDA_SUCCESS);
        ck_assert_ptr_eq(fn, (void *)cuGetProcAddress_v2);
        ck_assert_int_eq(cuGetProcAddress_v2("cuNoSuchThing", &fn, 12000, 0, &st), CUDA_ERROR_NOT_FOUND);
        ck_assert_int_eq(st, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
}
END_TEST

START_TEST(test_contexts_streams)
{
        CUcontext c = NULL, cur = NULL, popped = NULL;
        CUdevice d = -1;
        CUstream s;

        setup_state("64Mi", "2");
        ck_assert_int_eq(cuCtxCreate_v2(&c, 0, 1), CUDA_SUCCESS);
        ck_assert_int_eq(cuCtxGetCurrent(&cur), CUDA_SUCCESS);
        ck_assert_ptr_eq(cur, c);
        ck_assert_int_eq(cuCtxGetDevice(&d), CUDA_SUCCESS);
        ck_assert_int_eq(d, 1);
        ck_assert_int_eq(cuStreamCreate(&s, 0), CUDA_SUCCESS);
        ck_assert_int_eq(cuStreamSynchronize(s), CUDA_SUCCESS);
        ck_assert_int_eq(cuStreamDestroy_v2(s), CUDA_SUCCESS);
        ck_assert_int_eq(cuStreamSynchronize((CUstream)&d), CUDA_ERROR_INVALID_HANDLE);
        ck_assert_int_eq(cuCtxPopCurrent_v2(&popped), CUDA_SUCCESS);
        ck_assert_ptr_eq(popped, c);
        ck_assert_int_eq(cuCtxGetDevice(&d), CUDA_ERROR_INVALID_CONTEXT);
        ck_assert_int_eq(cuCtxPushCurrent_v2(c), CUDA_SUCCESS);
        ck_assert_int_eq(cuCtxDestroy_v2(c), CUDA_SUCCESS);
        ck_assert_int_eq(cuCtxDestroy_v2(c), CUDA_ERROR_INVALID_CONTEXT);
        teardown_state();
}
END_TEST

int main(void)
{
        Suite *s = suite_create("fakecuda");
        TCase *tc = tcase_create("core");

        tcase_set_timeout(tc, 30);
        tcase_add_test(tc, test_not_initialized);
        tcase_add_test(tc, test_devices);
        tcase_add_test(tc, test_alloc_needs_context);
        tcase_add_test(tc, test_alloc_copy_free);
        tcase_add_test(tc, test_oom_at_limit);
        tcase_add_test(tc, test_accounting_across_processes);
        tcase_add_test(tc, test_vmm_export_import_across_processes);
        tcase_add_test(tc, test_vmm_checks);
        tcase_add_test(tc, test_get_proc_address);
        tcase_add_test(tc, test_contexts_streams);
        suite_add_tcase(s, tc);
        return gs_check_run(s);
}
