/* check_fakecuda.c — tests of the fake driver itself (test/fakecuda).
 *
 * Each test runs in its own forked process (CK_FORK) with its own state
 * file, so cross-process accounting starts from zero. */
#include <check.h>

#include "../gs_check.h"
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <pthread.h>
#include <time.h>
#include <unistd.h>

#include "../../hook/gs_cudadecl.h"
#include "fc_state.h"

/* The fake driver's test functions (fakecuda.c's top comment). */
CUfunction fakecuda_fill_kernel(void);
void fakecuda_hold_work(int hold);
uint64_t fakecuda_work_pending(void);
uint64_t fakecuda_launched(void);
uint64_t fakecuda_host_bytes(void);
CUresult CUDAAPI cuLaunchKernel_ptsz(CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,
                                     unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,
                                     unsigned int sharedMemBytes, CUstream hStream, void **kernelParams, void **extra);

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

/* The state and the model of GPU time's file beside it (fc_engine.h). */
static void teardown_state(void)
{
        char eng[160];

        snprintf(eng, sizeof(eng), "%s-engine", g_state);
        unlink(g_state);
        unlink(eng);
}

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
        ck_assert_int_eq(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
                         CUDA_SUCCESS);
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
                ok = ok && cuMemGetAllocationPropertiesFromHandle(&got, ih) == CUDA_SUCCESS && got.location.id == 0 &&
                     got.type == CU_MEM_ALLOCATION_TYPE_PINNED;
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

/* ---- helpers for the children of a test (no ck_assert there) ------- */

#define FD_TYPE CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR

static int send_fd(int sock, int fd)
{
        char c = 'f';
        struct iovec iov = { &c, 1 };
        union {
                struct cmsghdr h;
                char buf[CMSG_SPACE(sizeof(int))];
        } u;
        struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof(u.buf) };
        struct cmsghdr *h;

        memset(&u, 0, sizeof(u));
        h = CMSG_FIRSTHDR(&m);
        h->cmsg_level = SOL_SOCKET;
        h->cmsg_type = SCM_RIGHTS;
        h->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(h), &fd, sizeof(int));
        return sendmsg(sock, &m, MSG_NOSIGNAL) == 1 ? 0 : -1;
}

/* The fd of one message of send_fd, or -1. */
static int recv_fd(int sock)
{
        char c;
        struct iovec iov = { &c, 1 };
        union {
                struct cmsghdr h;
                char buf[CMSG_SPACE(sizeof(int))];
        } u;
        struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof(u.buf) };
        struct cmsghdr *h;
        int fd = -1;

        if (recvmsg(sock, &m, MSG_CMSG_CLOEXEC) != 1)
                return -1;
        h = CMSG_FIRSTHDR(&m);
        if (h && h->cmsg_level == SOL_SOCKET && h->cmsg_type == SCM_RIGHTS && h->cmsg_len == CMSG_LEN(sizeof(int)))
                memcpy(&fd, CMSG_DATA(h), sizeof(int));
        return fd;
}

/* h mapped read-write at a fresh address, or 0. */
static CUdeviceptr try_map(CUmemGenericAllocationHandle h, size_t size)
{
        CUmemAccessDesc acc = { { CU_MEM_LOCATION_TYPE_DEVICE, 0 }, CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
        CUdeviceptr va;

        if (cuMemAddressReserve(&va, size, 0, 0, 0) != CUDA_SUCCESS)
                return 0;
        if (cuMemMap(va, size, 0, h, 0) != CUDA_SUCCESS || cuMemSetAccess(va, size, &acc, 1) != CUDA_SUCCESS)
                return 0;
        return va;
}

/* New VMM memory of size bytes on device 0, mapped here and filled with
 * fill: an exported fd of it, or -1.  Its handle and mapping stay. */
static int create_exported(size_t size, int fill)
{
        CUmemAllocationProp prop = { 0 };
        CUmemGenericAllocationHandle h;
        CUdeviceptr va;
        int fd = -1;

        prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
        prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        prop.requestedHandleTypes = FD_TYPE;
        if (cuMemCreate(&h, size, &prop, 0) != CUDA_SUCCESS ||
            cuMemExportToShareableHandle(&fd, h, FD_TYPE, 0) != CUDA_SUCCESS)
                return -1;
        va = try_map(h, size);
        if (!va)
                return -1;
        memset((void *)va, fill, size);
        return fd;
}

/* Sends command cmd to a child over sock; 1 if it answers 'y'. */
static int ask(int sock, char cmd)
{
        char c = 0;

        return write(sock, &cmd, 1) == 1 && read(sock, &c, 1) == 1 && c == 'y';
}

/* The real driver refuses to export an imported handle again
 * (CUDA_ERROR_INVALID_VALUE), also once the exporter has exited, while the
 * imported memory stays valid: used, readable and writable. */
START_TEST(test_vmm_reexport_refused)
{
        CUmemGenericAllocationHandle ih, rh;
        CUdeviceptr q;
        unsigned char in[64], out[64];
        int sv[2], fd, efd = -1, status;
        pid_t pid;

        setup_state("64Mi", "1");
        make_ctx(0);
        ck_assert_int_eq(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv), 0);
        pid = fork();
        ck_assert_int_ge(pid, 0);
        if (pid == 0) {
                /* The exporter: 4 MiB of 0x3c, sent to the parent; it exits
                 * when told, releasing nothing. */
                char c;
                int xfd = create_exported(4 * MiB, 0x3c);

                if (xfd < 0 || send_fd(sv[1], xfd) < 0)
                        _exit(1);
                (void)!read(sv[1], &c, 1);
                _exit(0);
        }
        close(sv[1]);
        fd = recv_fd(sv[0]);
        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(cuMemImportFromShareableHandle(&ih, (void *)(intptr_t)fd, FD_TYPE), CUDA_SUCCESS);
        ck_assert_int_eq(cuMemExportToShareableHandle(&efd, ih, FD_TYPE, 0), CUDA_ERROR_INVALID_VALUE);
        q = map_handle(ih, 4 * MiB);
        ck_assert_int_eq(((unsigned char *)q)[4 * MiB - 1], 0x3c);
        ck_assert_uint_eq(used_bytes(), 4 * MiB);

        ck_assert_int_eq(write(sv[0], "x", 1), 1);
        ck_assert_int_eq(waitpid(pid, &status, 0), pid);
        ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
        ck_assert_int_eq(cuMemExportToShareableHandle(&efd, ih, FD_TYPE, 0), CUDA_ERROR_INVALID_VALUE);
        /* Nor through a handle retained from the mapping, nor a new import. */
        ck_assert_int_eq(cuMemRetainAllocationHandle(&rh, (void *)q), CUDA_SUCCESS);
        ck_assert_int_eq(cuMemExportToShareableHandle(&efd, rh, FD_TYPE, 0), CUDA_ERROR_INVALID_VALUE);
        ck_assert_int_eq(cuMemRelease(rh), CUDA_SUCCESS);
        ck_assert_int_eq(cuMemImportFromShareableHandle(&rh, (void *)(intptr_t)fd, FD_TYPE), CUDA_SUCCESS);
        ck_assert_int_eq(cuMemExportToShareableHandle(&efd, rh, FD_TYPE, 0), CUDA_ERROR_INVALID_VALUE);
        ck_assert_int_eq(cuMemRelease(rh), CUDA_SUCCESS);
        ck_assert_int_eq(efd, -1);

        /* The memory is still there, and still used, as on a GPU. */
        ck_assert_int_eq(((unsigned char *)q)[0], 0x3c);
        memset(in, 0xa5, sizeof(in));
        ck_assert_int_eq(cuMemcpyHtoD_v2(q + 4096, in, sizeof(in)), CUDA_SUCCESS);
        ck_assert_int_eq(cuMemcpyDtoH_v2(out, q + 4096, sizeof(out)), CUDA_SUCCESS);
        ck_assert(memcmp(in, out, sizeof(in)) == 0);
        ck_assert_uint_eq(used_bytes(), 4 * MiB);
        close(fd);
        ck_assert_int_eq(cuMemUnmap(q, 4 * MiB), CUDA_SUCCESS);
        ck_assert_uint_eq(used_bytes(), 4 * MiB); /* the handle holds it */
        ck_assert_int_eq(cuMemRelease(ih), CUDA_SUCCESS);
        ck_assert_uint_eq(used_bytes(), 0);
        close(sv[0]);
        teardown_state();
}
END_TEST

/* The holder of test_vmm_killed_creator: gets two fds from peer, then
 * does what ctl says, answering 'y' (done, all as expected) or 'n'. */
static int holder(int ctl, int peer)
{
        CUmemGenericAllocationHandle ih;
        CUdeviceptr q = 0;
        unsigned char *m = MAP_FAILED;
        int fd = recv_fd(peer), fd2 = recv_fd(peer), efd = -1, ok;
        char cmd;

        /* 'h': holds the two fds, nothing else. */
        ok = fd >= 0 && fd2 >= 0;
        if (read(ctl, &cmd, 1) != 1 || cmd != 'h' || write(ctl, ok ? "y" : "n", 1) != 1)
                return 1;
        /* 'm': the 6 MiB through the driver, the creator dead: its data is
         * there, it can be written, not exported again; then drops the
         * 2 MiB and holds the 6 MiB by a plain mapping only. */
        if (read(ctl, &cmd, 1) != 1 || cmd != 'm')
                return 1;
        ok = cuMemImportFromShareableHandle(&ih, (void *)(intptr_t)fd, FD_TYPE) == CUDA_SUCCESS &&
             cuMemExportToShareableHandle(&efd, ih, FD_TYPE, 0) == CUDA_ERROR_INVALID_VALUE &&
             (q = try_map(ih, 6 * MiB)) != 0;
        ok = ok && ((unsigned char *)q)[6 * MiB - 1] == 0x5a;
        if (ok)
                ((unsigned char *)q)[0] = 0x11;
        m = mmap(NULL, 6 * MiB, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        ok = ok && m != MAP_FAILED && m[0] == 0x11 && m[1] == 0x5a;
        ok = ok && close(fd) == 0 && close(fd2) == 0 && cuMemUnmap(q, 6 * MiB) == CUDA_SUCCESS &&
             cuMemRelease(ih) == CUDA_SUCCESS;
        if (write(ctl, ok ? "y" : "n", 1) != 1)
                return 1;
        /* 'u': unmaps it: holds nothing any more. */
        if (read(ctl, &cmd, 1) != 1 || cmd != 'u')
                return 1;
        ok = m != MAP_FAILED && munmap(m, 6 * MiB) == 0;
        if (write(ctl, ok ? "y" : "n", 1) != 1)
                return 1;
        /* 'x': exits. */
        return read(ctl, &cmd, 1) == 1 && cmd == 'x' ? 0 : 1;
}

/* The creator of test_vmm_killed_creator: 6 and 2 MiB exported to the
 * holder, 4 MiB exported to nobody, 2 MiB of cuMemAlloc; then says 'r' and
 * waits to be killed. */
static int creator(int ctl, int peer)
{
        CUdeviceptr p;
        int fd = create_exported(6 * MiB, 0x5a), fd2 = create_exported(2 * MiB, 0x22);
        int fd3 = create_exported(4 * MiB, 0x44);
        char c;

        if (fd < 0 || fd2 < 0 || fd3 < 0 || cuMemAlloc_v2(&p, 2 * MiB) != CUDA_SUCCESS || send_fd(peer, fd) < 0 ||
            send_fd(peer, fd2) < 0)
                return 1;
        close(fd);
        close(fd2);
        close(fd3);
        if (write(ctl, "r", 1) != 1)
                return 1;
        (void)!read(ctl, &c, 1); /* until SIGKILL */
        return 1;
}

/* As on a GPU, memory stays used while any process maps it or holds an fd
 * of it, also after its creator was killed (kill -9); it is free once
 * nobody holds it.  Seen from a third process. */
START_TEST(test_vmm_killed_creator)
{
        int ta[2], tb[2], ab[2], status;
        pid_t a, b;
        char c = 0;

        setup_state("64Mi", "1");
        make_ctx(0);
        ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, ta), 0);
        ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, tb), 0);
        ck_assert_int_eq(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, ab), 0);
        b = fork();
        ck_assert_int_ge(b, 0);
        if (b == 0) {
                close(ta[0]);
                close(ta[1]);
                close(tb[0]);
                close(ab[0]);
                _exit(holder(tb[1], ab[1]));
        }
        a = fork();
        ck_assert_int_ge(a, 0);
        if (a == 0) {
                close(tb[0]);
                close(tb[1]);
                close(ta[0]);
                close(ab[1]);
                _exit(creator(ta[1], ab[0]));
        }
        close(ta[1]);
        close(tb[1]);
        close(ab[0]);
        close(ab[1]);
        ck_assert_int_eq(read(ta[0], &c, 1), 1);
        ck_assert_int_eq(c, 'r');
        ck_assert(ask(tb[0], 'h'));
        ck_assert_uint_eq(used_bytes(), 14 * MiB);

        ck_assert_int_eq(kill(a, SIGKILL), 0);
        ck_assert_int_eq(waitpid(a, &status, 0), a);
        ck_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
        /* What the holder holds (by fds) stays used; the rest is free. */
        ck_assert_uint_eq(used_bytes(), 8 * MiB);
        ck_assert(ask(tb[0], 'm'));
        ck_assert_uint_eq(used_bytes(), 6 * MiB); /* a plain mapping holds it */
        ck_assert(ask(tb[0], 'u'));
        ck_assert_uint_eq(used_bytes(), 0);
        ck_assert_int_eq(write(tb[0], "x", 1), 1);
        ck_assert_int_eq(waitpid(b, &status, 0), b);
        ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
        ck_assert_uint_eq(used_bytes(), 0);
        ck_assert_int_eq(cuMemAlloc_v2(&(CUdeviceptr){ 0 }, 64 * MiB), CUDA_SUCCESS);
        close(ta[0]);
        close(tb[0]);
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
        ck_assert_int_ne(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
                         CUDA_SUCCESS);
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
        ck_assert_int_eq(
                cuGetProcAddress_v2("cuMemAllocAsync", &fn, 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &st),
                CUDA_SUCCESS);
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
        /* The agent's scrub stream and events (gs_gpu_scrubber.c). */
        int least = 1, greatest = 1;
        CUevent e;
        uint32_t *buf = malloc(4096);
        ck_assert_int_eq(cuCtxGetStreamPriorityRange(&least, &greatest), CUDA_SUCCESS);
        ck_assert_int_ge(least, greatest);
        ck_assert_int_eq(cuStreamCreateWithPriority(&s, CU_STREAM_NON_BLOCKING, least), CUDA_SUCCESS);
        ck_assert_int_eq(cuEventCreate(&e, CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING), CUDA_SUCCESS);
        memset(buf, 0xff, 4096);
        ck_assert_int_eq(cuMemsetD32Async((CUdeviceptr)buf, 0, 1024, s), CUDA_SUCCESS);
        ck_assert_int_eq(cuEventRecord(e, s), CUDA_SUCCESS);
        ck_assert_int_eq(cuEventSynchronize(e), CUDA_SUCCESS);
        ck_assert_uint_eq(buf[0] | buf[1023], 0);
        ck_assert_int_eq(cuEventRecord(e, (CUstream)&d), CUDA_ERROR_INVALID_HANDLE);
        ck_assert_int_eq(cuEventDestroy_v2(e), CUDA_SUCCESS);
        ck_assert_int_eq(cuEventSynchronize(e), CUDA_ERROR_INVALID_HANDLE);
        ck_assert_int_eq(cuEventCreate(&e, 0x80), CUDA_ERROR_INVALID_VALUE);
        ck_assert_int_eq(cuStreamDestroy_v2(s), CUDA_SUCCESS);
        free(buf);
        ck_assert_int_eq(cuCtxPopCurrent_v2(&popped), CUDA_SUCCESS);
        ck_assert_ptr_eq(popped, c);
        ck_assert_int_eq(cuCtxGetDevice(&d), CUDA_ERROR_INVALID_CONTEXT);
        ck_assert_int_eq(cuCtxPushCurrent_v2(c), CUDA_SUCCESS);
        ck_assert_int_eq(cuCtxDestroy_v2(c), CUDA_SUCCESS);
        ck_assert_int_eq(cuCtxDestroy_v2(c), CUDA_ERROR_INVALID_CONTEXT);
        teardown_state();
}
END_TEST

/* What the fake NVML reports for this process on device 0 (its charges). */
static uint64_t nvml_bytes_of_me(void)
{
        FILE *f = fopen(g_state, "rb");
        static struct fc_shared sh;
        uint64_t b = 0;

        ck_assert_ptr_nonnull(f);
        ck_assert_uint_eq(fread(&sh, sizeof(sh), 1, f), 1);
        fclose(f);
        for (int i = 0; i < FC_MAX_PROCS; i++)
                if (sh.procs[i].pid == (int32_t)getpid())
                        b += sh.procs[i].bytes[0];
        return b;
}

START_TEST(test_host_numa)
{
        CUmemGenericAllocationHandle h, bad;
        CUmemAllocationProp prop = { 0 }, got;
        size_t gran = 0, used0;
        uint64_t nvml0;
        CUdeviceptr p;
        unsigned char out[64];
        int fd = -1, status;
        pid_t pid;

        setup_state("32Mi", "1");
        make_ctx(0);
        used0 = used_bytes();
        nvml0 = nvml_bytes_of_me();
        prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
        prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
        /* Refused: HOST (as the real driver), a NUMA node other than 0. */
        prop.location.type = CU_MEM_LOCATION_TYPE_HOST;
        ck_assert_int_eq(cuMemCreate(&bad, 2 * MiB, &prop, 0), CUDA_ERROR_INVALID_VALUE);
        ck_assert_int_eq(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM),
                         CUDA_ERROR_INVALID_VALUE);
        prop.location.type = CU_MEM_LOCATION_TYPE_HOST_NUMA;
        prop.location.id = 1;
        ck_assert_int_eq(cuMemCreate(&bad, 2 * MiB, &prop, 0), CUDA_ERROR_INVALID_VALUE);
        prop.location.id = 0;
        ck_assert_int_eq(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED),
                         CUDA_SUCCESS);
        ck_assert_uint_eq(gran, 2 * MiB);
        ck_assert_uint_eq(fakecuda_host_bytes(), 0);
        /* Bigger than the device: host memory takes none of it. */
        ck_assert_int_eq(cuMemCreate(&h, 64 * MiB, &prop, 0), CUDA_SUCCESS);
        ck_assert_uint_eq(fakecuda_host_bytes(), 64 * MiB);
        ck_assert_uint_eq(used_bytes(), used0);
        ck_assert_uint_eq(nvml_bytes_of_me(), nvml0);
        ck_assert_int_eq(cuMemGetAllocationPropertiesFromHandle(&got, h), CUDA_SUCCESS);
        ck_assert_int_eq(got.location.type, CU_MEM_LOCATION_TYPE_HOST_NUMA);
        ck_assert_int_eq(got.location.id, 0);
        ck_assert_int_eq(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
                         CUDA_SUCCESS);
        ck_assert_int_ge(fd, 0);
        /* Mapped at a device address: copies, memsets, kernels reach it. */
        p = map_handle(h, 64 * MiB);
        ck_assert_int_eq(cuMemsetD8_v2(p, 0xab, 64 * MiB), CUDA_SUCCESS);
        ck_assert_int_eq(cuMemcpyHtoD_v2(p + 1000, "spilled", 8), CUDA_SUCCESS);
        ck_assert_int_eq(cuMemcpyDtoH_v2(out, p + 1000, 8), CUDA_SUCCESS);
        ck_assert_str_eq((char *)out, "spilled");
        {
                CUdeviceptr dst = p + 4096;
                size_t bytes = 64;
                uint32_t value = 0x01020304, delay = 0;
                void *params[] = { &dst, &bytes, &value, &delay };
                ck_assert_int_eq(cuLaunchKernel(fakecuda_fill_kernel(), 1, 1, 1, 32, 1, 1, 0, NULL, params, NULL),
                                 CUDA_SUCCESS);
                ck_assert_int_eq(cuCtxSynchronize(), CUDA_SUCCESS);
                ck_assert_uint_eq(((uint32_t *)p)[4096 / 4 + 15], 0x01020304);
        }
        pid = fork();
        ck_assert_int_ge(pid, 0);
        if (pid == 0) {
                CUmemGenericAllocationHandle ih;
                uint64_t before = fakecuda_host_bytes();
                int ok = cuMemImportFromShareableHandle(&ih, (void *)(intptr_t)fd,
                                                        CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) == CUDA_SUCCESS;
                close(fd);
                ok = ok && fakecuda_host_bytes() == before + 64 * MiB && used_bytes() == used0;
                ok = ok && cuMemGetAllocationPropertiesFromHandle(&got, ih) == CUDA_SUCCESS &&
                     got.location.type == CU_MEM_LOCATION_TYPE_HOST_NUMA;
                if (ok) {
                        CUdeviceptr q = map_handle(ih, 64 * MiB);
                        ok = ((unsigned char *)q)[64 * MiB - 1] == 0xab && !memcmp((char *)q + 1000, "spilled", 8);
                        ok = ok && cuMemsetD8_v2(q + 77, 0x5c, 1) == CUDA_SUCCESS;
                        ok = ok && cuMemRelease(ih) == CUDA_SUCCESS && fakecuda_host_bytes() == before + 64 * MiB;
                        ok = ok && cuMemUnmap(q, 64 * MiB) == CUDA_SUCCESS && fakecuda_host_bytes() == before;
                }
                _exit(ok ? 0 : 1);
        }
        ck_assert_int_eq(waitpid(pid, &status, 0), pid);
        ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
        ck_assert_int_eq(((unsigned char *)p)[77], 0x5c);
        close(fd);
        /* Live until the last handle and mapping go; never on the device. */
        ck_assert_int_eq(cuMemRelease(h), CUDA_SUCCESS);
        ck_assert_uint_eq(fakecuda_host_bytes(), 64 * MiB);
        ck_assert_int_eq(cuMemUnmap(p, 64 * MiB), CUDA_SUCCESS);
        ck_assert_uint_eq(fakecuda_host_bytes(), 0);
        ck_assert_uint_eq(used_bytes(), used0);
        ck_assert_uint_eq(nvml_bytes_of_me(), nvml0);
        teardown_state();
}
END_TEST

static CUresult fill(CUstream s, void *dst, size_t bytes, uint32_t value, uint32_t delay_us)
{
        CUdeviceptr d = (CUdeviceptr)(uintptr_t)dst;
        void *params[] = { &d, &bytes, &value, &delay_us };

        return cuLaunchKernel(fakecuda_fill_kernel(), 2, 1, 1, 128, 1, 1, 0, s, params, NULL);
}

static void *release_work_later(void *arg)
{
        struct timespec ts = { 0, 50 * 1000 * 1000 };

        (void)arg;
        nanosleep(&ts, NULL);
        fakecuda_hold_work(0);
        return NULL;
}

static int all_words(const uint32_t *p, size_t n, uint32_t v)
{
        for (size_t i = 0; i < n; i++)
                if (p[i] != v)
                        return 0;
        return 1;
}

START_TEST(test_launch_async)
{
        static uint32_t buf[1024], other[256];
        CUstream s, s2;
        pthread_t t;
        void *fn = NULL;
        uint64_t launched0;

        setup_state("64Mi", "1");
        ck_assert_int_eq(fill(NULL, buf, sizeof(buf), 1, 0), CUDA_ERROR_INVALID_CONTEXT);
        make_ctx(0);
        ck_assert_int_eq(cuStreamCreate(&s, 0), CUDA_SUCCESS);
        ck_assert_int_eq(cuStreamCreate(&s2, 0), CUDA_SUCCESS);
        launched0 = fakecuda_launched();

        /* Held back: in flight until cuStreamSynchronize, which waits. */
        fakecuda_hold_work(1);
        ck_assert_int_eq(fill(s, buf, sizeof(buf), 0xa5a5a5a5, 0), CUDA_SUCCESS);
        ck_assert_uint_eq(fakecuda_work_pending(), 1);
        ck_assert_uint_eq(fakecuda_launched(), launched0 + 1);
        ck_assert_uint_eq(buf[0], 0);
        ck_assert_int_eq(pthread_create(&t, NULL, release_work_later, NULL), 0);
        ck_assert_int_eq(cuStreamSynchronize(s), CUDA_SUCCESS);
        ck_assert(all_words(buf, 1024, 0xa5a5a5a5));
        ck_assert_uint_eq(fakecuda_work_pending(), 0);
        pthread_join(t, NULL);

        /* cuCtxSynchronize waits for every stream's kernels. */
        ck_assert_int_eq(fill(s, buf, sizeof(buf), 7, 100000), CUDA_SUCCESS);
        ck_assert_int_eq(fill(s2, other, sizeof(other), 8, 100000), CUDA_SUCCESS);
        ck_assert_int_eq(cuCtxSynchronize(), CUDA_SUCCESS);
        ck_assert(all_words(buf, 1024, 7) && all_words(other, 256, 8));

        /* Stream order: a memset, a host function, a synchronous copy and
         * an event come after the kernels queued before them. */
        ck_assert_int_eq(fill(s, buf, sizeof(buf), 9, 50000), CUDA_SUCCESS);
        ck_assert_int_eq(cuMemsetD32Async((CUdeviceptr)buf, 10, 512, s), CUDA_SUCCESS);
        ck_assert_uint_eq(buf[0], 10);
        ck_assert_uint_eq(buf[1023], 9);
        ck_assert_int_eq(fill(s2, other, sizeof(other), 11, 50000), CUDA_SUCCESS);
        {
                uint32_t v = 0;
                ck_assert_int_eq(cuMemcpyDtoH_v2(&v, (CUdeviceptr)&other[255], 4), CUDA_SUCCESS);
                ck_assert_uint_eq(v, 11);
        }
        ck_assert_int_eq(fill(s, buf, sizeof(buf), 12, 50000), CUDA_SUCCESS);
        ck_assert_int_eq(cuStreamDestroy_v2(s), CUDA_SUCCESS); /* waits for its work */
        ck_assert(all_words(buf, 1024, 12));

        /* The per-thread-stream form, also through cuGetProcAddress. */
        ck_assert_int_eq(
                cuGetProcAddress_v2("cuLaunchKernel", &fn, 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, NULL),
                CUDA_SUCCESS);
        ck_assert_ptr_eq(fn, (void *)cuLaunchKernel_ptsz);
        {
                CUdeviceptr d = (CUdeviceptr)(uintptr_t)buf;
                size_t bytes = sizeof(buf), odd = 6;
                uint32_t value = 13, delay = 0;
                void *params[] = { &d, &bytes, &value, &delay };
                void *oddp[] = { &d, &odd, &value, &delay };
                void *extra[] = { NULL };
                ck_assert_int_eq(cuLaunchKernel_ptsz(fakecuda_fill_kernel(), 1, 1, 1, 1, 1, 1, 0, CU_STREAM_PER_THREAD,
                                                     params, NULL),
                                 CUDA_SUCCESS);
                ck_assert_int_eq(cuStreamSynchronize(CU_STREAM_PER_THREAD), CUDA_SUCCESS);
                ck_assert(all_words(buf, 1024, 13));
                /* Refused: another function, extra, odd sizes, a zero grid,
                 * a bad stream. */
                ck_assert_int_eq(cuLaunchKernel((CUfunction)buf, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL),
                                 CUDA_ERROR_INVALID_HANDLE);
                ck_assert_int_eq(cuLaunchKernel(fakecuda_fill_kernel(), 1, 1, 1, 1, 1, 1, 0, NULL, params, extra),
                                 CUDA_ERROR_INVALID_VALUE);
                ck_assert_int_eq(cuLaunchKernel(fakecuda_fill_kernel(), 1, 1, 1, 1, 1, 1, 0, NULL, oddp, NULL),
                                 CUDA_ERROR_INVALID_VALUE);
                ck_assert_int_eq(cuLaunchKernel(fakecuda_fill_kernel(), 0, 1, 1, 1, 1, 1, 0, NULL, params, NULL),
                                 CUDA_ERROR_INVALID_VALUE);
                ck_assert_int_eq(
                        cuLaunchKernel(fakecuda_fill_kernel(), 1, 1, 1, 1, 1, 1, 0, (CUstream)other, params, NULL),
                        CUDA_ERROR_INVALID_HANDLE);
        }
        ck_assert_int_eq(cuStreamDestroy_v2(s2), CUDA_SUCCESS);
        teardown_state();
}
END_TEST

/* A kernel that finds its range unmapped when it runs writes nothing and
 * faults the next synchronisation, once; a launch onto an unmapped range
 * is refused at once. */
START_TEST(test_launch_fault)
{
        CUmemAllocationProp prop = { .type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                     .location = { CU_MEM_LOCATION_TYPE_DEVICE, 0 } };
        CUmemGenericAllocationHandle h;
        CUdeviceptr p;

        setup_state("64Mi", "1");
        make_ctx(0);
        ck_assert_int_eq(cuMemCreate(&h, 2 * MiB, &prop, 0), CUDA_SUCCESS);
        p = map_handle(h, 2 * MiB);
        fakecuda_hold_work(1);
        ck_assert_int_eq(fill(NULL, (void *)p, 4096, 1, 0), CUDA_SUCCESS);
        ck_assert_int_eq(cuMemUnmap(p, 2 * MiB), CUDA_SUCCESS);
        fakecuda_hold_work(0);
        ck_assert_int_eq(cuCtxSynchronize(), CUDA_ERROR_ILLEGAL_ADDRESS);
        ck_assert_int_eq(cuCtxSynchronize(), CUDA_SUCCESS);
        ck_assert_int_eq(fill(NULL, (void *)p, 4096, 1, 0), CUDA_ERROR_ILLEGAL_ADDRESS);
        ck_assert_uint_eq(fakecuda_work_pending(), 0);
        ck_assert_int_eq(cuMemRelease(h), CUDA_SUCCESS);
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
        tcase_add_test(tc, test_vmm_reexport_refused);
        tcase_add_test(tc, test_vmm_killed_creator);
        tcase_add_test(tc, test_vmm_checks);
        tcase_add_test(tc, test_get_proc_address);
        tcase_add_test(tc, test_contexts_streams);
        tcase_add_test(tc, test_host_numa);
        tcase_add_test(tc, test_launch_async);
        tcase_add_test(tc, test_launch_fault);
        suite_add_tcase(s, tc);
        return gs_check_run(s);
}
