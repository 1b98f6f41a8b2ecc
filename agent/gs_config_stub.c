/* gs_config_stub.c — stands in for common/gs_config.c (the device plugin
 * engineer's) until it lands; built only when that file is absent (see
 * agent.mk).  Defaults and sizes only: --config is refused. */
#include "gs_config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gs_log.h"

void gs_config_defaults(struct gs_config *c)
{
        memset(c, 0, sizeof(*c));
        snprintf(c->resource_name, sizeof(c->resource_name), "gshare.io/gpumem");
        c->unit_bytes = GS_GiB;
        c->chunk_bytes = 256 * GS_MiB;
        c->reserve_bytes = GS_GiB;
        snprintf(c->agent_socket, sizeof(c->agent_socket), "/run/gshare/agent.sock");
        snprintf(c->socket_root, sizeof(c->socket_root), "/run/gshare/alloc");
        snprintf(c->state_dir, sizeof(c->state_dir), "/var/lib/gshare");
        snprintf(c->kubelet_dir, sizeof(c->kubelet_dir), "/var/lib/kubelet/device-plugins");
        snprintf(c->hook_path, sizeof(c->hook_path), "/usr/local/lib/gshare/libgshare.so");
        snprintf(c->preload_path, sizeof(c->preload_path), "/usr/local/lib/gshare/ld.so.preload");
        snprintf(c->cuda_library, sizeof(c->cuda_library), "libcuda.so.1");
        c->log_level = GS_LOG_INFO;
}

int gs_config_load(struct gs_config *c, const char *path, char *err, size_t errlen)
{
        (void)c;
        snprintf(err, errlen, "%s: configuration files are not supported by this build", path);
        return -ENOSYS;
}

int gs_config_validate(const struct gs_config *c, char *err, size_t errlen)
{
        if (!gs_is_pow2(c->chunk_bytes) || c->chunk_bytes < 2 * GS_MiB) {
                snprintf(err, errlen, "chunkSize must be a power of two of at least 2Mi");
                return -EINVAL;
        }
        if (!c->unit_bytes || c->unit_bytes % c->chunk_bytes) {
                snprintf(err, errlen, "unitSize must be a multiple of chunkSize");
                return -EINVAL;
        }
        return 0;
}

int gs_parse_size(const char *s, uint64_t *ret_bytes)
{
        static const char *const suf[] = { "", "Ki", "Mi", "Gi", "Ti" };
        char *end;
        unsigned long long v;

        if (!s || !*s || *s == '-' || *s < '0' || *s > '9')
                return -EINVAL;
        errno = 0;
        v = strtoull(s, &end, 10);
        if (errno)
                return -ERANGE;
        for (unsigned i = 0; i < GS_ARRAY_SIZE(suf); i++)
                if (strcmp(end, suf[i]) == 0) {
                        if (i && v > (UINT64_MAX >> (10 * i)))
                                return -ERANGE;
                        *ret_bytes = (uint64_t)v << (10 * i);
                        return 0;
                }
        return -EINVAL;
}

void gs_format_size(uint64_t bytes, char *buf, size_t n)
{
        static const char *const suf[] = { "Ti", "Gi", "Mi", "Ki" };

        for (unsigned i = 0; i < GS_ARRAY_SIZE(suf); i++) {
                unsigned sh = 10 * (4 - i);
                if (bytes && bytes % (UINT64_C(1) << sh) == 0) {
                        snprintf(buf, n, "%llu%s", (unsigned long long)(bytes >> sh), suf[i]);
                        return;
                }
        }
        snprintf(buf, n, "%llu", (unsigned long long)bytes);
}
