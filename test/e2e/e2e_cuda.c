/* e2e_cuda.c — an ordinary CUDA driver-API program for the end-to-end
 * tests and the demo.  Linked against libcuda the usual way; run under
 * LD_PRELOAD=libgshare.so (with GSHARE_SOCKET set) it exercises the hook
 * and the agent, run without it it is a process bypassing gshare.
 *
 *   e2e_cuda fill [BLOCK_MIB]   allocate until out of memory; print
 *                               "obtained N MiB limit L MiB"
 *   e2e_cuda bypass MIB         one cuMemAlloc of MIB: must fail with OOM
 *   e2e_cuda meminfo            print "free F total T" (bytes)
 *   e2e_cuda data MIB           allocate MIB in one block, write and read
 *                               all of it; check fresh memory holds no
 *                               "E2E-SECRET" left by anyone else
 *   e2e_cuda threads N MIB      N threads allocate 1 MiB blocks at once
 *                               until OOM; print the total
 *   e2e_cuda hold MIB           allocate, print "held", sleep until killed
 *   e2e_cuda peer               two devices of one allocation: a block on
 *                               device 0 is copied into one on device 1
 *                               with device 1's context current, and read
 *                               back from there (peer access, as natively);
 *                               print "peer ok"
 *   e2e_cuda grow MIB           allocate MIB (0: nothing), print "held F T"
 *                               (cuMemGetInfo), then commands on stdin:
 *                               "module N" (the fake driver's
 *                               fakecuda_module_load of N MiB: memory outside
 *                               the pool, as lazily loaded modules; print
 *                               "module ok|oom F T"), "alloc N" (cuMemAlloc
 *                               of N MiB, kept; print "alloc ok" or "alloc
 *                               CUDA_ERROR_..."), "busy N" (N calls of
 *                               cuMemGetInfo 1 ms apart; print "busy
 *                               done"), "free" (free every block;
 *                               print "free ok"), "exit"
 *   e2e_cuda vmm MIB PIECE_MIB  cuMemCreate pieces of 2 MiB and PIECE_MIB
 *                               in turn, up to MIB or out of memory, map
 *                               them back to back in one reserved range,
 *                               write and read all of it; check the next
 *                               cuMemCreate fails with OUT_OF_MEMORY; unmap
 *                               and release all; check cuMemGetInfo shows
 *                               all free again; print "vmm obtained N MiB"
 *   e2e_cuda ipc-export MIB     allocate a 1 MiB block and a MIB block with
 *                               a pattern, print "handle HEX" (the MIB
 *                               block's cuIpcGetMemHandle); check opening it
 *                               in this process fails; then commands on
 *                               stdin: "check" (print "seen-ok" if every
 *                               byte is the pattern + 1), "free" (free the
 *                               block, print "freed"), "reset" (write the
 *                               pattern again, print "reset"), "alloc"
 *                               (allocate and free 1 MiB: a memory call,
 *                               which reconnects to a new agent; print
 *                               "alloc ok"), "exit"
 *   e2e_cuda ipc-import HEX MIB open the handle, check its range and the
 *                               pattern, add 1 to every byte, open it again
 *                               (same address), close twice; a third close
 *                               must fail
 *   e2e_cuda ipc-open HEX       open must fail with INVALID_VALUE
 *   e2e_cuda capture            stream capture: cuMemAllocAsync and
 *                               cuMemFreeAsync inside it succeed and leave
 *                               the capture valid; the block freed inside
 *                               stays allocated (owned by the graph); a
 *                               free outside a capture still frees
 *   e2e_cuda vmm-export         cuMemCreate 4 MiB, write a pattern,
 *                               cuMemExportToShareableHandle (POSIX fd),
 *                               import the fd and map it elsewhere: the
 *                               pattern must be there (PyTorch's expandable
 *                               segments share tensors this way)
 *   e2e_cuda blocks N           cuMemAlloc 256 B blocks until N or an
 *                               error, print "blocks COUNT RESULT"; after an
 *                               error free one and allocate again, print
 *                               "again RESULT"; free all once stdin closes
 *   e2e_cuda paths BLOCK PIECE  cuMemAlloc BLOCK MiB blocks until out of
 *                               memory, free them; cuMemCreate PIECE MiB
 *                               pieces until out of memory, release them;
 *                               cuMemAlloc again: prints the MiB of each
 *   e2e_cuda mark MIB           allocate up to MIB in 1 MiB blocks, fill
 *                               them with a marker word (cuMemsetD32),
 *                               free them; print "marked N MiB"
 *   e2e_cuda marks MIB          allocate up to MIB in 1 MiB blocks, read
 *                               them back; print "N marker words in M MiB";
 *                               exit 1 if any (memory granted to a process
 *                               must hold no other process's data)
 * Exit 0 when the mode's own check holds. */
#include <cuda.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MiB (1024ull * 1024ull)
static const char secret[16] = "E2E-SECRET-0042";

static void die(const char *what, CUresult r)
{
        const char *n = NULL;
        cuGetErrorName(r, &n);
        fprintf(stderr, "FAIL: %s: %s\n", what, n ? n : "?");
        exit(1);
}

static void init(CUcontext *ctx)
{
        CUdevice dev;
        CUresult r;

        if ((r = cuInit(0)) != CUDA_SUCCESS)
                die("cuInit", r);
        if ((r = cuDeviceGet(&dev, 0)) != CUDA_SUCCESS)
                die("cuDeviceGet", r);
        if ((r = cuDevicePrimaryCtxRetain(ctx, dev)) != CUDA_SUCCESS)
                die("cuDevicePrimaryCtxRetain", r);
        if ((r = cuCtxSetCurrent(*ctx)) != CUDA_SUCCESS)
                die("cuCtxSetCurrent", r);
}

static int fill(uint64_t block)
{
        size_t fr = 0, total = 0;
        uint64_t got = 0;
        CUdeviceptr p;
        CUresult r;

        cuMemGetInfo(&fr, &total);
        while ((r = cuMemAlloc(&p, block)) == CUDA_SUCCESS)
                got += block;
        printf("obtained %llu MiB limit %llu MiB (%s)\n", (unsigned long long)(got / MiB),
               (unsigned long long)(total / MiB),
               r == CUDA_ERROR_OUT_OF_MEMORY ? "then CUDA_ERROR_OUT_OF_MEMORY" : "other error");
        fflush(stdout);
        return r == CUDA_ERROR_OUT_OF_MEMORY ? 0 : 1;
}

struct targ {
        uint64_t got;
};

static CUcontext g_ctx;

static void *thr(void *arg)
{
        struct targ *t = arg;
        CUdeviceptr p;

        cuCtxSetCurrent(g_ctx);
        while (cuMemAlloc(&p, MiB) == CUDA_SUCCESS)
                t->got += MiB;
        return NULL;
}

/* Writes a pattern over n bytes at p and reads it all back. */
static int roundtrip(CUdeviceptr p, size_t n)
{
        unsigned char *buf = malloc(n), *back = malloc(n);
        int bad = 0;

        if (!buf || !back)
                return 1;
        /* Fresh memory must not carry another process's secret. */
        if (cuMemcpyDtoH(back, p, n) != CUDA_SUCCESS)
                return 1;
        for (size_t i = 0; i + sizeof(secret) <= n; i += 4096)
                if (memcmp(back + i, secret, sizeof(secret)) == 0) {
                        fprintf(stderr, "FAIL: found another process's data at +%zu\n", i);
                        bad = 1;
                        break;
                }
        for (size_t i = 0; i < n; i++)
                buf[i] = (unsigned char)(i * 131 + (i >> 20));
        for (size_t i = 0; i + sizeof(secret) <= n; i += 4096)
                memcpy(buf + i, secret, sizeof(secret));
        if (cuMemcpyHtoD(p, buf, n) != CUDA_SUCCESS || cuMemcpyDtoH(back, p, n) != CUDA_SUCCESS)
                return 1;
        if (memcmp(buf, back, n) != 0) {
                fprintf(stderr, "FAIL: read back differs from what was written\n");
                bad = 1;
        }
        free(buf);
        free(back);
        return bad;
}

#define VMM_MAX 1024
static int vmm(uint64_t limit, uint64_t piece)
{
        static CUmemGenericAllocationHandle h[VMM_MAX];
        static uint64_t sz[VMM_MAX];
        CUmemAllocationProp prop = { 0 };
        CUmemAccessDesc acc = { { CU_MEM_LOCATION_TYPE_DEVICE, 0 }, CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
        CUdeviceptr va = 0, at;
        uint64_t got = 0;
        size_t fr0 = 0, fr = 0, total = 0;
        unsigned char *buf;
        int n = 0;
        CUresult r = CUDA_SUCCESS;

        prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
        prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        prop.location.id = 0;
        prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
        cuMemGetInfo(&fr0, &total);
        while (n < VMM_MAX) {
                uint64_t s = (n % 2 ? piece : 2) * MiB;
                if (got + s > limit)
                        s = 2 * MiB;
                if (got + s > limit)
                        break;
                r = cuMemCreate(&h[n], s, &prop, 0);
                if (r != CUDA_SUCCESS)
                        break;
                sz[n++] = s;
                got += s;
        }
        if (r == CUDA_SUCCESS) {
                CUmemGenericAllocationHandle x;
                r = cuMemCreate(&x, 2 * MiB, &prop, 0);
        }
        if (r != CUDA_ERROR_OUT_OF_MEMORY)
                die("cuMemCreate past the quota should be out of memory", r);
        if (n == 0)
                die("no VMM allocation at all", r);
        if ((r = cuMemAddressReserve(&va, got, 2 * MiB, 0, 0)) != CUDA_SUCCESS)
                die("cuMemAddressReserve", r);
        at = va;
        for (int i = 0; i < n; i++) {
                if ((r = cuMemMap(at, sz[i], 0, h[i], 0)) != CUDA_SUCCESS)
                        die("cuMemMap", r);
                at += sz[i];
        }
        if ((r = cuMemSetAccess(va, got, &acc, 1)) != CUDA_SUCCESS)
                die("cuMemSetAccess", r);
        buf = malloc(got);
        if (!buf)
                die("malloc", CUDA_ERROR_OUT_OF_MEMORY);
        for (uint64_t i = 0; i < got; i++)
                buf[i] = (unsigned char)(i * 7 + (i >> 20));
        if ((r = cuMemcpyHtoD(va, buf, got)) != CUDA_SUCCESS)
                die("cuMemcpyHtoD", r);
        memset(buf, 0, got);
        if ((r = cuMemcpyDtoH(buf, va, got)) != CUDA_SUCCESS)
                die("cuMemcpyDtoH", r);
        for (uint64_t i = 0; i < got; i++)
                if (buf[i] != (unsigned char)(i * 7 + (i >> 20))) {
                        fprintf(stderr, "FAIL: byte %llu read back wrong\n", (unsigned long long)i);
                        return 1;
                }
        free(buf);
        at = va;
        for (int i = 0; i < n; i++) {
                if ((r = cuMemUnmap(at, sz[i])) != CUDA_SUCCESS)
                        die("cuMemUnmap", r);
                if ((r = cuMemRelease(h[i])) != CUDA_SUCCESS)
                        die("cuMemRelease", r);
                at += sz[i];
        }
        (void)cuMemAddressFree(va, got);
        cuMemGetInfo(&fr, &total);
        if (fr != fr0) {
                fprintf(stderr, "FAIL: free %zu after release, %zu before\n", fr, fr0);
                return 1;
        }
        printf("vmm obtained %llu MiB in %d pieces\n", (unsigned long long)(got / MiB), n);
        return 0;
}

static unsigned char pat(uint64_t i)
{
        return (unsigned char)(i * 7 + (i >> 20));
}

static void to_hex(const CUipcMemHandle *h, char out[129])
{
        for (int i = 0; i < 64; i++)
                sprintf(out + 2 * i, "%02x", (unsigned char)h->reserved[i]);
}

static int from_hex(const char *s, CUipcMemHandle *h)
{
        if (strlen(s) != 128)
                return -1;
        for (int i = 0; i < 64; i++) {
                unsigned v;
                if (sscanf(s + 2 * i, "%2x", &v) != 1)
                        return -1;
                h->reserved[i] = (char)v;
        }
        return 0;
}

/* Compares n bytes at p with pat(i) + add. */
static int check_pat(CUdeviceptr p, size_t n, int add)
{
        unsigned char *b = malloc(n);
        int bad = 0;

        if (!b || cuMemcpyDtoH(b, p, n) != CUDA_SUCCESS)
                return 1;
        for (size_t i = 0; i < n && !bad; i++)
                if (b[i] != (unsigned char)(pat(i) + add)) {
                        fprintf(stderr, "FAIL: byte %zu is %u, expected %u\n", i, b[i], (unsigned char)(pat(i) + add));
                        bad = 1;
                }
        free(b);
        return bad;
}

static int put_pat(CUdeviceptr p, size_t n, int add)
{
        unsigned char *b = malloc(n);
        int bad;

        if (!b)
                return 1;
        for (size_t i = 0; i < n; i++)
                b[i] = (unsigned char)(pat(i) + add);
        bad = cuMemcpyHtoD(p, b, n) != CUDA_SUCCESS;
        free(b);
        return bad;
}

static int ipc_export(size_t n)
{
        CUdeviceptr small, p, x;
        CUipcMemHandle h, h2;
        char hex[129], line[64];
        CUresult r;

        if ((r = cuMemAlloc(&small, MiB)) != CUDA_SUCCESS || (r = cuMemAlloc(&p, n)) != CUDA_SUCCESS)
                die("cuMemAlloc", r);
        if (put_pat(p, n, 0) || put_pat(small, MiB, 99))
                die("write", CUDA_ERROR_UNKNOWN);
        if ((r = cuIpcGetMemHandle(&h, p)) != CUDA_SUCCESS)
                die("cuIpcGetMemHandle", r);
        /* An inner pointer names the same block. */
        if ((r = cuIpcGetMemHandle(&h2, p + n / 2)) != CUDA_SUCCESS)
                die("cuIpcGetMemHandle of an inner pointer", r);
        if (memcmp(&h, &h2, sizeof(h)) != 0) {
                fprintf(stderr, "FAIL: two handles for one block differ\n");
                return 1;
        }
        if ((r = cuIpcOpenMemHandle(&x, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS)) != CUDA_ERROR_INVALID_VALUE) {
                fprintf(stderr, "FAIL: opening its own handle did not fail with INVALID_VALUE\n");
                return 1;
        }
        to_hex(&h, hex);
        printf("handle %s\n", hex);
        fflush(stdout);
        while (fgets(line, sizeof(line), stdin)) {
                if (strncmp(line, "check", 5) == 0) {
                        printf("%s\n", check_pat(p, n, 1) || check_pat(small, MiB, 99) ? "seen-bad" : "seen-ok");
                } else if (strncmp(line, "free", 4) == 0) {
                        if ((r = cuMemFree(p)) != CUDA_SUCCESS)
                                die("cuMemFree", r);
                        printf("freed\n");
                } else if (strncmp(line, "reset", 5) == 0) {
                        printf("%s\n", put_pat(p, n, 0) ? "reset-bad" : "reset");
                } else if (strncmp(line, "alloc", 5) == 0) {
                        if ((r = cuMemAlloc(&x, MiB)) != CUDA_SUCCESS || (r = cuMemFree(x)) != CUDA_SUCCESS)
                                die("cuMemAlloc after the handle", r);
                        printf("alloc ok\n");
                } else if (strncmp(line, "exit", 4) == 0) {
                        return 0;
                }
                fflush(stdout);
        }
        return 0;
}

static int ipc_import(const char *hex, size_t n)
{
        CUipcMemHandle h;
        CUdeviceptr p, p2, base = 0;
        size_t size = 0;
        CUresult r;

        if (from_hex(hex, &h) < 0)
                return 2;
        if ((r = cuIpcOpenMemHandle(&p, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS)) != CUDA_SUCCESS)
                die("cuIpcOpenMemHandle", r);
        if ((r = cuMemGetAddressRange(&base, &size, p + n - 1)) != CUDA_SUCCESS)
                die("cuMemGetAddressRange of the opened block", r);
        if (base != p || size != n) {
                fprintf(stderr, "FAIL: opened block's range is %zu bytes\n", size);
                return 1;
        }
        if (check_pat(p, n, 0))
                return 1;
        if (put_pat(p, n, 1))
                die("write", CUDA_ERROR_UNKNOWN);
        if ((r = cuIpcOpenMemHandle(&p2, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS)) != CUDA_SUCCESS || p2 != p)
                die("second cuIpcOpenMemHandle", r);
        if ((r = cuMemFree(p)) != CUDA_ERROR_INVALID_VALUE) {
                fprintf(stderr, "FAIL: cuMemFree of an opened block did not fail\n");
                return 1;
        }
        if ((r = cuIpcCloseMemHandle(p)) != CUDA_SUCCESS || (r = cuIpcCloseMemHandle(p)) != CUDA_SUCCESS)
                die("cuIpcCloseMemHandle", r);
        if (cuIpcCloseMemHandle(p) == CUDA_SUCCESS) {
                fprintf(stderr, "FAIL: a third close succeeded\n");
                return 1;
        }
        printf("import ok: %zu bytes read, written, closed\n", n);
        return 0;
}

static int ipc_open_fails(const char *hex)
{
        CUipcMemHandle h;
        CUdeviceptr p;
        const char *name = NULL;
        CUresult r;

        if (from_hex(hex, &h) < 0)
                return 2;
        r = cuIpcOpenMemHandle(&p, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
        cuGetErrorName(r, &name);
        printf("open: %s\n", name ? name : "?");
        return r == CUDA_ERROR_INVALID_VALUE ? 0 : 1;
}

static int capture(void)
{
        CUstream s;
        CUgraph graph = NULL;
        CUdeviceptr p, q, base;
        size_t size;
        CUresult r;

        if ((r = cuStreamCreate(&s, CU_STREAM_NON_BLOCKING)) != CUDA_SUCCESS)
                die("cuStreamCreate", r);
        if ((r = cuMemAllocAsync(&p, MiB, s)) != CUDA_SUCCESS)
                die("cuMemAllocAsync", r);
        if ((r = cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL)) != CUDA_SUCCESS)
                die("cuStreamBeginCapture", r);
        if ((r = cuMemAllocAsync(&q, 2 * MiB, s)) != CUDA_SUCCESS)
                die("cuMemAllocAsync inside a capture", r);
        if ((r = cuMemFreeAsync(q, s)) != CUDA_SUCCESS)
                die("cuMemFreeAsync inside a capture", r);
        if ((r = cuStreamEndCapture(s, &graph)) != CUDA_SUCCESS || !graph)
                die("cuStreamEndCapture (the capture must still be valid)", r);
        if ((r = cuMemGetAddressRange(&base, &size, q)) != CUDA_SUCCESS || base != q || size != 2 * MiB)
                die("the block freed inside the capture must stay allocated", r);
        if ((r = cuMemFreeAsync(p, s)) != CUDA_SUCCESS)
                die("cuMemFreeAsync", r);
        if (cuMemGetAddressRange(&base, &size, p) == CUDA_SUCCESS) {
                fprintf(stderr, "FAIL: a block freed outside a capture is still allocated\n");
                return 1;
        }
        printf("capture ok\n");
        return 0;
}

static int vmm_export(void)
{
        CUmemAllocationProp prop = { 0 };
        CUmemAccessDesc acc = { { CU_MEM_LOCATION_TYPE_DEVICE, 0 }, CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
        CUmemGenericAllocationHandle h, h2;
        CUdeviceptr va = 0;
        size_t n = 4 * MiB;
        int fd = -1, fd2 = -1;
        CUresult r;

        prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
        prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        /* Only POSIX fds can share the agent's memory: PyTorch asks for
         * FABRIC first and must be told no, or its IPC fails later. */
        prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_FABRIC;
        if ((r = cuMemCreate(&h, n, &prop, 0)) != CUDA_ERROR_NOT_SUPPORTED)
                die("cuMemCreate with the FABRIC handle type should be NOT_SUPPORTED", r);
        prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
        if ((r = cuMemCreate(&h, n, &prop, 0)) != CUDA_SUCCESS)
                die("cuMemCreate", r);
        if ((r = cuMemAddressReserve(&va, 2 * n, 2 * MiB, 0, 0)) != CUDA_SUCCESS)
                die("cuMemAddressReserve", r);
        if ((r = cuMemMap(va, n, 0, h, 0)) != CUDA_SUCCESS || (r = cuMemSetAccess(va, n, &acc, 1)) != CUDA_SUCCESS)
                die("cuMemMap", r);
        if (put_pat(va, n, 3))
                die("write", CUDA_ERROR_UNKNOWN);
        if ((r = cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0)) != CUDA_SUCCESS)
                die("cuMemExportToShareableHandle", r);
        if ((r = cuMemExportToShareableHandle(&fd2, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0)) != CUDA_SUCCESS ||
            fd2 == fd)
                die("second cuMemExportToShareableHandle", r);
        if ((r = cuMemImportFromShareableHandle(&h2, (void *)(intptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)) !=
            CUDA_SUCCESS)
                die("cuMemImportFromShareableHandle", r);
        if ((r = cuMemMap(va + n, n, 0, h2, 0)) != CUDA_SUCCESS ||
            (r = cuMemSetAccess(va + n, n, &acc, 1)) != CUDA_SUCCESS)
                die("cuMemMap of the import", r);
        if (check_pat(va + n, n, 3))
                return 1;
        close(fd);
        close(fd2);
        (void)cuMemUnmap(va + n, n);
        (void)cuMemUnmap(va, n);
        (void)cuMemRelease(h2);
        if ((r = cuMemRelease(h)) != CUDA_SUCCESS)
                die("cuMemRelease", r);
        (void)cuMemAddressFree(va, 2 * n);
        printf("vmm-export ok\n");
        return 0;
}

static int peer(CUcontext ctx0)
{
        enum { N = 4 << 20 };
        unsigned char *host = malloc(N), *back = malloc(N);
        CUcontext ctx1;
        CUdevice d1;
        CUdeviceptr a, b;
        CUresult r;

        if (!host || !back)
                return 1;
        for (size_t i = 0; i < N; i++)
                host[i] = (unsigned char)(i * 7 + 3);
        if ((r = cuCtxSetCurrent(ctx0)) != CUDA_SUCCESS || (r = cuMemAlloc(&a, N)) != CUDA_SUCCESS ||
            (r = cuMemcpyHtoD(a, host, N)) != CUDA_SUCCESS)
                die("device 0 block", r);
        if ((r = cuDeviceGet(&d1, 1)) != CUDA_SUCCESS || (r = cuDevicePrimaryCtxRetain(&ctx1, d1)) != CUDA_SUCCESS ||
            (r = cuCtxSetCurrent(ctx1)) != CUDA_SUCCESS || (r = cuMemAlloc(&b, N)) != CUDA_SUCCESS)
                die("device 1 block", r);
        if ((r = cuMemcpyDtoD(b, a, N)) != CUDA_SUCCESS)
                die("copy from device 0's memory with device 1's context", r);
        if ((r = cuMemcpyDtoH(back, a, N)) != CUDA_SUCCESS)
                die("read device 0's memory with device 1's context", r);
        if (memcmp(back, host, N) != 0)
                die("device 0's memory read from device 1", CUDA_ERROR_UNKNOWN);
        memset(back, 0, N);
        if ((r = cuMemcpyDtoH(back, b, N)) != CUDA_SUCCESS || memcmp(back, host, N) != 0)
                die("the copy on device 1", r);
        printf("peer ok\n");
        free(host);
        free(back);
        return 0;
}

static int grow(uint64_t mib)
{
        CUresult (*load)(size_t) = (CUresult(*)(size_t))dlsym(RTLD_DEFAULT, "fakecuda_module_load");
        size_t fr = 0, total = 0;
        char line[64];
        CUdeviceptr p = 0, held[64];
        unsigned nheld = 0;
        CUresult r;

        if (mib && (r = cuMemAlloc(&p, mib * MiB)) != CUDA_SUCCESS)
                die("cuMemAlloc", r);
        cuMemGetInfo(&fr, &total);
        printf("held %zu %zu\n", fr, total);
        fflush(stdout);
        while (fgets(line, sizeof(line), stdin)) {
                unsigned long long n;
                if (sscanf(line, "module %llu", &n) == 1) {
                        r = load ? load(n * MiB) : CUDA_ERROR_NOT_SUPPORTED;
                        cuMemGetInfo(&fr, &total);
                        printf("module %s %zu %zu\n", r == CUDA_SUCCESS ? "ok" : "oom", fr, total);
                        fflush(stdout);
                } else if (sscanf(line, "alloc %llu", &n) == 1) {
                        CUdeviceptr q;
                        r = cuMemAlloc(&q, n * MiB);
                        if (r == CUDA_SUCCESS && nheld < 64)
                                held[nheld++] = q;
                        printf("alloc %s\n", r == CUDA_SUCCESS               ? "ok"
                                             : r == CUDA_ERROR_OUT_OF_MEMORY ? "CUDA_ERROR_OUT_OF_MEMORY"
                                                                             : "other-error");
                        fflush(stdout);
                } else if (sscanf(line, "busy %llu", &n) == 1) {
                        struct timespec ms = { 0, 1000000 };
                        for (unsigned long long i = 0; i < n; i++) {
                                cuMemGetInfo(&fr, &total);
                                nanosleep(&ms, NULL);
                        }
                        printf("busy done\n");
                        fflush(stdout);
                } else if (strncmp(line, "free", 4) == 0) {
                        r = CUDA_SUCCESS;
                        if (mib) {
                                r = cuMemFree(p);
                                mib = 0;
                        }
                        while (r == CUDA_SUCCESS && nheld)
                                r = cuMemFree(held[--nheld]);
                        printf("free %s\n", r == CUDA_SUCCESS ? "ok" : "error");
                        fflush(stdout);
                } else if (strncmp(line, "exit", 4) == 0) {
                        break;
                }
        }
        return 0;
}

static int blocks(unsigned long n)
{
        CUdeviceptr *p = calloc(n ? n : 1, sizeof(*p));
        CUresult r = CUDA_SUCCESS;
        unsigned long i;

        if (!p)
                return 1;
        for (i = 0; i < n; i++)
                if ((r = cuMemAlloc(&p[i], 256)) != CUDA_SUCCESS)
                        break;
        printf("blocks %lu %d\n", i, (int)r);
        if (r != CUDA_SUCCESS && i > 0) {
                if (cuMemFree(p[i - 1]) != CUDA_SUCCESS)
                        return 1;
                printf("again %d\n", (int)cuMemAlloc(&p[i - 1], 256));
        }
        fflush(stdout);
        while (getchar() != EOF)
                ;
        while (i-- > 0)
                (void)cuMemFree(p[i]);
        free(p);
        return 0;
}

#define MARKER 0x5ec12e7au

/* mark / marks: see the top of the file. */
static int markers(size_t mib, int write)
{
        CUdeviceptr *blocks = calloc(mib ? mib : 1, sizeof(*blocks));
        uint32_t *host = malloc(MiB);
        size_t n = 0, found = 0;
        CUresult r;

        if (!blocks || !host)
                return 1;
        while (n < mib && cuMemAlloc(&blocks[n], MiB) == CUDA_SUCCESS)
                n++;
        for (size_t i = 0; i < n; i++) {
                if (write) {
                        if ((r = cuMemsetD32(blocks[i], MARKER, MiB / 4)) != CUDA_SUCCESS)
                                die("cuMemsetD32", r);
                        continue;
                }
                if ((r = cuMemcpyDtoH(host, blocks[i], MiB)) != CUDA_SUCCESS)
                        die("cuMemcpyDtoH", r);
                for (size_t k = 0; k < MiB / 4; k++)
                        found += host[k] == MARKER;
        }
        if ((r = cuCtxSynchronize()) != CUDA_SUCCESS)
                die("cuCtxSynchronize", r);
        for (size_t i = 0; i < n; i++)
                if ((r = cuMemFree(blocks[i])) != CUDA_SUCCESS)
                        die("cuMemFree", r);
        if (write)
                printf("marked %zu MiB\n", n);
        else
                printf("%zu marker words in %zu MiB\n", found, n);
        free(blocks);
        free(host);
        return n == 0 || (!write && found);
}

/* Fills with cuMemAlloc of blocks of block bytes until out of memory, and
 * frees them all: the MiB obtained. */
static uint64_t fill_free(uint64_t block)
{
        static CUdeviceptr ptr[65536];
        uint64_t n = 0;

        while (n < 65536 && cuMemAlloc(&ptr[n], block) == CUDA_SUCCESS)
                n++;
        for (uint64_t i = 0; i < n; i++)
                if (cuMemFree(ptr[i]) != CUDA_SUCCESS)
                        die("cuMemFree", CUDA_ERROR_UNKNOWN);
        return n * block / MiB;
}

/* The same with cuMemCreate of piece bytes, released. */
static uint64_t vmm_fill_release(uint64_t piece)
{
        static CUmemGenericAllocationHandle h[65536];
        CUmemAllocationProp prop = { 0 };
        uint64_t n = 0;

        prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
        prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
        while (n < 65536 && cuMemCreate(&h[n], piece, &prop, 0) == CUDA_SUCCESS)
                n++;
        for (uint64_t i = 0; i < n; i++)
                if (cuMemRelease(h[i]) != CUDA_SUCCESS)
                        die("cuMemRelease", CUDA_ERROR_UNKNOWN);
        return n * piece / MiB;
}

/* Memory freed on one path, obtained on the other (issue 19): cuMemAlloc
 * fill and free, cuMemCreate fill and release, cuMemAlloc again. */
static int paths(uint64_t block, uint64_t piece)
{
        uint64_t a = fill_free(block);
        uint64_t v = vmm_fill_release(piece);
        uint64_t a2 = fill_free(block);

        printf("paths: alloc %llu MiB, then vmm %llu MiB, then alloc %llu MiB\n", (unsigned long long)a,
               (unsigned long long)v, (unsigned long long)a2);
        return 0;
}

int main(int argc, char **argv)
{
        CUcontext ctx;
        CUdeviceptr p;
        CUresult r;

        if (argc < 2) {
                fprintf(stderr, "usage: e2e_cuda fill|bypass|meminfo|data|threads|hold ...\n");
                return 2;
        }
        init(&ctx);
        g_ctx = ctx;
        if (strcmp(argv[1], "blocks") == 0 && argc == 3)
                return blocks(strtoul(argv[2], NULL, 0));
        if (strcmp(argv[1], "fill") == 0)
                return fill((argc > 2 ? strtoull(argv[2], NULL, 0) : 1) * MiB);
        if (strcmp(argv[1], "bypass") == 0 && argc == 3) {
                r = cuMemAlloc(&p, strtoull(argv[2], NULL, 0) * MiB);
                printf("bypass cuMemAlloc of %s MiB: %s\n", argv[2],
                       r == CUDA_SUCCESS               ? "succeeded"
                       : r == CUDA_ERROR_OUT_OF_MEMORY ? "CUDA_ERROR_OUT_OF_MEMORY"
                                                       : "other error");
                return r == CUDA_ERROR_OUT_OF_MEMORY ? 0 : 1;
        }
        if (strcmp(argv[1], "meminfo") == 0) {
                size_t fr = 0, total = 0, dt = 0;
                CUdevice dev;
                if ((r = cuMemGetInfo(&fr, &total)) != CUDA_SUCCESS)
                        die("cuMemGetInfo", r);
                cuDeviceGet(&dev, 0);
                cuDeviceTotalMem(&dt, dev);
                printf("free %zu total %zu devicetotal %zu\n", fr, total, dt);
                return 0;
        }
        if (strcmp(argv[1], "data") == 0 && argc == 3) {
                size_t n = strtoull(argv[2], NULL, 0) * MiB;
                CUdeviceptr base = 0;
                size_t size = 0;
                if ((r = cuMemAlloc(&p, n)) != CUDA_SUCCESS)
                        die("cuMemAlloc", r);
                if (p % 256) {
                        fprintf(stderr, "FAIL: pointer not 256-byte aligned\n");
                        return 1;
                }
                if ((r = cuMemGetAddressRange(&base, &size, p + n - 1)) != CUDA_SUCCESS)
                        die("cuMemGetAddressRange", r);
                if (base != p || size != n) {
                        fprintf(stderr, "FAIL: range of the last byte is %llx+%zu\n", (unsigned long long)base, size);
                        return 1;
                }
                if (roundtrip(p, n))
                        return 1;
                if ((r = cuMemFree(p)) != CUDA_SUCCESS)
                        die("cuMemFree", r);
                printf("data: %llu MiB written and read back in one block\n", (unsigned long long)(n / MiB));
                return 0;
        }
        if (strcmp(argv[1], "threads") == 0 && argc == 3) {
                int n = atoi(argv[2]);
                pthread_t t[64];
                struct targ a[64];
                uint64_t sum = 0;
                size_t fr = 0, total = 0;
                if (n < 1 || n > 64)
                        return 2;
                cuMemGetInfo(&fr, &total);
                memset(a, 0, sizeof(a));
                for (int i = 0; i < n; i++)
                        pthread_create(&t[i], NULL, thr, &a[i]);
                for (int i = 0; i < n; i++) {
                        pthread_join(t[i], NULL);
                        sum += a[i].got;
                }
                printf("threads: %d threads obtained %llu MiB, limit %llu MiB\n", n, (unsigned long long)(sum / MiB),
                       (unsigned long long)(total / MiB));
                return sum <= total ? 0 : 1;
        }
        if (strcmp(argv[1], "vmm") == 0 && argc == 4)
                return vmm(strtoull(argv[2], NULL, 0) * MiB, strtoull(argv[3], NULL, 0));
        if (strcmp(argv[1], "ipc-export") == 0 && argc == 3)
                return ipc_export(strtoull(argv[2], NULL, 0) * MiB);
        if (strcmp(argv[1], "ipc-import") == 0 && argc == 4)
                return ipc_import(argv[2], strtoull(argv[3], NULL, 0) * MiB);
        if ((strcmp(argv[1], "mark") == 0 || strcmp(argv[1], "marks") == 0) && argc == 3)
                return markers(strtoull(argv[2], NULL, 0), argv[1][4] == '\0');
        if (strcmp(argv[1], "capture") == 0)
                return capture();
        if (strcmp(argv[1], "vmm-export") == 0)
                return vmm_export();
        if (strcmp(argv[1], "ipc-open") == 0 && argc == 3)
                return ipc_open_fails(argv[2]);
        if (strcmp(argv[1], "peer") == 0)
                return peer(ctx);
        if (strcmp(argv[1], "paths") == 0 && argc == 4)
                return paths(strtoull(argv[2], NULL, 0) * MiB, strtoull(argv[3], NULL, 0) * MiB);
        if (strcmp(argv[1], "grow") == 0 && argc == 3)
                return grow(strtoull(argv[2], NULL, 0));
        if (strcmp(argv[1], "hold") == 0 && argc == 3) {
                if ((r = cuMemAlloc(&p, strtoull(argv[2], NULL, 0) * MiB)) != CUDA_SUCCESS)
                        die("cuMemAlloc", r);
                printf("held\n");
                fflush(stdout);
                for (;;)
                        pause();
        }
        fprintf(stderr, "e2e_cuda: bad arguments\n");
        return 2;
}
