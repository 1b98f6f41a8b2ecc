/* gs_hook_cuda.c — the real driver and the real dlsym for libgshare.so. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gs_hook.h"

static struct gs_cu g_cu;
static void *g_lib;
static pthread_once_t g_cu_once = PTHREAD_ONCE_INIT;

typedef void *(*gs_dlsym_fn)(void *, const char *);
static gs_dlsym_fn g_real_dlsym;

/* No sanitizer instrumentation: ASan's and TSan's runtimes resolve their
 * interceptors with dlsym before they are initialised (no shadow memory, no
 * thread state), and our dlsym is the one they get. */
__attribute__((no_sanitize("address", "undefined", "thread"))) void *gs_real_dlsym_fn(void)
{
        gs_dlsym_fn f = __atomic_load_n(&g_real_dlsym, __ATOMIC_ACQUIRE);

        if (!f) {
                /* glibc 2.34 moved dlsym into libc with a new version; older
                 * binaries bind the GLIBC_2.2.5 one.  Either is the real one. */
                f = (gs_dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
                if (!f)
                        f = (gs_dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
                if (!f)
                        return NULL;
                __atomic_store_n(&g_real_dlsym, f, __ATOMIC_RELEASE);
        }
        return (void *)f;
}

__attribute__((no_sanitize("address", "undefined", "thread"))) void *gs_real_dlsym(void *handle, const char *name)
{
        gs_dlsym_fn f = (gs_dlsym_fn)gs_real_dlsym_fn();

        return f ? f(handle, name) : NULL;
}

#define GS_CU_ENTRY(m, n)                     \
        {                                     \
#n, offsetof(struct gs_cu, m) \
        }
static const struct {
        const char *name;
        size_t off;
} gs_cu_entries[] = {
        GS_CU_ENTRY(init, cuInit),
        GS_CU_ENTRY(get_proc_address, cuGetProcAddress),
        GS_CU_ENTRY(get_proc_address_v2, cuGetProcAddress_v2),
        GS_CU_ENTRY(ctx_get_device, cuCtxGetDevice),
        GS_CU_ENTRY(device_get_uuid_v2, cuDeviceGetUuid_v2),
        GS_CU_ENTRY(device_get_count, cuDeviceGetCount),
        GS_CU_ENTRY(mem_address_reserve, cuMemAddressReserve),
        GS_CU_ENTRY(mem_import_from_shareable_handle, cuMemImportFromShareableHandle),
        GS_CU_ENTRY(mem_map, cuMemMap),
        GS_CU_ENTRY(mem_set_access, cuMemSetAccess),
        GS_CU_ENTRY(mem_release, cuMemRelease),
        GS_CU_ENTRY(mem_create, cuMemCreate),
        GS_CU_ENTRY(mem_unmap, cuMemUnmap),
        GS_CU_ENTRY(mem_get_address_range_v2, cuMemGetAddressRange_v2),
        GS_CU_ENTRY(stream_synchronize, cuStreamSynchronize),
        GS_CU_ENTRY(ctx_synchronize, cuCtxSynchronize),
        GS_CU_ENTRY(stream_synchronize_ptsz, cuStreamSynchronize_ptsz),
        GS_CU_ENTRY(ipc_get_mem_handle, cuIpcGetMemHandle),
        GS_CU_ENTRY(ipc_open_mem_handle_v2, cuIpcOpenMemHandle_v2),
        GS_CU_ENTRY(ipc_close_mem_handle, cuIpcCloseMemHandle),
        GS_CU_ENTRY(mem_address_free, cuMemAddressFree),
        GS_CU_ENTRY(mem_export_to_shareable_handle, cuMemExportToShareableHandle),
        GS_CU_ENTRY(stream_is_capturing, cuStreamIsCapturing),
        GS_CU_ENTRY(stream_is_capturing_ptsz, cuStreamIsCapturing_ptsz),
        GS_CU_ENTRY(device_primary_ctx_retain, cuDevicePrimaryCtxRetain),
        GS_CU_ENTRY(ctx_create, cuCtxCreate),
        GS_CU_ENTRY(ctx_create_v2, cuCtxCreate_v2),
        GS_CU_ENTRY(ctx_create_v3, cuCtxCreate_v3),
        GS_CU_ENTRY(ctx_create_v4, cuCtxCreate_v4),
        GS_CU_ENTRY(device_can_access_peer, cuDeviceCanAccessPeer),
        GS_CU_ENTRY(ctx_destroy, cuCtxDestroy),
        GS_CU_ENTRY(ctx_destroy_v2, cuCtxDestroy_v2),
        GS_CU_ENTRY(ctx_push_current_v2, cuCtxPushCurrent_v2),
        GS_CU_ENTRY(ctx_pop_current_v2, cuCtxPopCurrent_v2),
        GS_CU_ENTRY(device_primary_ctx_get_state, cuDevicePrimaryCtxGetState),
        GS_CU_ENTRY(device_primary_ctx_release_v2, cuDevicePrimaryCtxRelease_v2),
        GS_CU_ENTRY(memcpy_dtod_async_v2, cuMemcpyDtoDAsync_v2),
        GS_CU_ENTRY(stream_create, cuStreamCreate),
        GS_CU_ENTRY(stream_destroy_v2, cuStreamDestroy_v2),
        GS_CU_ENTRY(mem_retain_allocation_handle, cuMemRetainAllocationHandle),
        GS_CU_ENTRY(event_create, cuEventCreate),
        GS_CU_ENTRY(event_record, cuEventRecord),
        GS_CU_ENTRY(event_query, cuEventQuery),
        GS_CU_ENTRY(event_elapsed_time, cuEventElapsedTime),
        GS_CU_ENTRY(event_synchronize, cuEventSynchronize),
        GS_CU_ENTRY(event_destroy_v2, cuEventDestroy_v2),
        GS_CU_ENTRY(ctx_get_current, cuCtxGetCurrent),
        GS_CU_ENTRY(ctx_set_current, cuCtxSetCurrent),
        GS_CU_ENTRY(thread_exchange_stream_capture_mode, cuThreadExchangeStreamCaptureMode),
        GS_CU_ENTRY(func_get_name, cuFuncGetName),
};

static void gs_cu_load(void)
{
        const char *path = secure_getenv("GSHARE_CUDA_LIBRARY");

        if (!path || !*path)
                path = "libcuda.so.1";
        g_lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
        if (!g_lib) {
                gs_hook_debug("cannot open %s: %s", path, dlerror());
                return;
        }
        for (size_t i = 0; i < GS_ARRAY_SIZE(gs_cu_entries); i++) {
                void *p = gs_real_dlsym(g_lib, gs_cu_entries[i].name);
                /* Function pointers are data-pointer sized on every ABI
                 * glibc supports (POSIX requires it for dlsym). */
                memcpy((char *)&g_cu + gs_cu_entries[i].off, &p, sizeof(p));
        }
}

const struct gs_cu *gs_cu_get(void)
{
        pthread_once(&g_cu_once, gs_cu_load);
        return g_lib ? &g_cu : NULL;
}

void *gs_cu_real(const char *name)
{
        if (!gs_cu_get())
                return NULL;
        return gs_real_dlsym(g_lib, name);
}

/* ---- messages ------------------------------------------------------- */

static int g_said[GS_ONCE__N];

static void gs_vsay(const char *fmt, va_list ap)
{
        char buf[512];
        int n = snprintf(buf, sizeof(buf), "gshare: ");

        n += vsnprintf(buf + n, sizeof(buf) - (size_t)n, fmt, ap);
        if (n >= (int)sizeof(buf) - 1)
                n = (int)sizeof(buf) - 2;
        buf[n++] = '\n';
        /* One write(2): no stdio locks (we may run in a fork child), and the
         * line is not interleaved with other threads' output. */
        (void)!write(STDERR_FILENO, buf, (size_t)n);
}

void gs_hook_say_once(enum gs_once key, const char *fmt, ...)
{
        va_list ap;

        if (__atomic_exchange_n(&g_said[key], 1, __ATOMIC_SEQ_CST))
                return;
        va_start(ap, fmt);
        gs_vsay(fmt, ap);
        va_end(ap);
}

void gs_hook_debug(const char *fmt, ...)
{
        static int level = -1;
        va_list ap;

        if (level < 0) {
                const char *e = secure_getenv("GSHARE_HOOK_DEBUG");
                level = e && *e == '1';
        }
        if (!level)
                return;
        va_start(ap, fmt);
        gs_vsay(fmt, ap);
        va_end(ap);
}

void gs_hook_once_reset(void)
{
        for (int i = 0; i < GS_ONCE__N; i++)
                __atomic_store_n(&g_said[i], 0, __ATOMIC_SEQ_CST);
}
