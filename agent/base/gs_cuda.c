/* gs_cuda.c — see gs_cuda.h. */
#include "gs_cuda.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

/* Expands a macro argument before stringizing: cuMemGetInfo -> "cuMemGetInfo_v2". */
#define GS_STR2(x) #x
#define GS_STR(x) GS_STR2(x)

int gs_cuda_open(struct gs_cuda *cu, const char *path, char *err, size_t errlen)
{
        struct gs_cuda t = { 0 };
        const char *missing = NULL;

        memset(cu, 0, sizeof(*cu));
        t.dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
        if (!t.dl) {
                const char *e = dlerror();
                snprintf(err, errlen, "cannot load the CUDA driver '%s': %s", path, e ? e : "unknown error");
                return -ENOENT;
        }
#define GS_CUDA_LOAD(field, sym, req)                          \
        t.field = (__typeof__(sym) *)dlsym(t.dl, GS_STR(sym)); \
        if (!t.field && (req) && !missing)                     \
                missing = GS_STR(sym);
        GS_CUDA_FUNCS(GS_CUDA_LOAD)
#undef GS_CUDA_LOAD
        if (missing) {
                snprintf(err, errlen, "the CUDA driver '%s' lacks %s (driver too old?)", path, missing);
                dlclose(t.dl);
                return -ENOSYS;
        }
        *cu = t;
        return 0;
}

void gs_cuda_close(struct gs_cuda *cu)
{
        if (cu && cu->dl)
                dlclose(cu->dl);
        if (cu)
                memset(cu, 0, sizeof(*cu));
}

int gs_cuda_errno(CUresult r)
{
        switch (r) {
        case CUDA_SUCCESS: return 0;
        case CUDA_ERROR_OUT_OF_MEMORY: return -ENOMEM;
        case CUDA_ERROR_INVALID_VALUE:
        case CUDA_ERROR_INVALID_HANDLE:
        case CUDA_ERROR_INVALID_CONTEXT: return -EINVAL;
        case CUDA_ERROR_NO_DEVICE:
        case CUDA_ERROR_INVALID_DEVICE:
        case CUDA_ERROR_NOT_INITIALIZED:
        case CUDA_ERROR_DEINITIALIZED: return -ENODEV;
        case CUDA_ERROR_NOT_SUPPORTED: return -EOPNOTSUPP;
        case CUDA_ERROR_NOT_PERMITTED: return -EPERM;
        case CUDA_ERROR_NOT_FOUND: return -ENOENT;
        default: return -EIO;
        }
}

int gs_cuda_check(const struct gs_cuda *cu, CUresult r, const char *what, char *err, size_t errlen)
{
        const char *name = NULL, *desc = NULL;

        if (r == CUDA_SUCCESS)
                return 0;
        if (cu && cu->get_error_name && cu->get_error_name(r, &name) != CUDA_SUCCESS)
                name = NULL;
        if (cu && cu->get_error_string && cu->get_error_string(r, &desc) != CUDA_SUCCESS)
                desc = NULL;
        if (name)
                snprintf(err, errlen, "%s: %s (%s)", what, name, desc ? desc : "no description");
        else
                snprintf(err, errlen, "%s: CUDA error %d", what, (int)r);
        return gs_cuda_errno(r);
}
