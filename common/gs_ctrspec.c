/* gs_ctrspec.c — see gs_ctrspec.h. */
#include "gs_ctrspec.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "gs_log.h"
#include "gs_wire.h"

static void add_env(struct gs_ctrspec *s, const char *name, const char *value)
{
        snprintf(s->env[s->nenv].name, sizeof(s->env[0].name), "%s", name);
        snprintf(s->env[s->nenv].value, sizeof(s->env[0].value), "%s", value);
        s->nenv++;
}

static void add_mount(struct gs_ctrspec *s, const char *host, const char *ctr)
{
        snprintf(s->mounts[s->nmounts].host, sizeof(s->mounts[0].host), "%s", host);
        snprintf(s->mounts[s->nmounts].ctr, sizeof(s->mounts[0].ctr), "%s", ctr);
        /* Read-only everywhere: connecting to a unix socket does not write
         * the file system, and the container must not plant files there. */
        s->mounts[s->nmounts].ro = true;
        s->nmounts++;
}

int gs_ctrspec_build(const struct gs_config *c, const Gshare__Ctl__V1__Allocation *al, struct gs_ctrspec *ret,
                     char *err, size_t errlen)
{
        char limits[GS_CTRSPEC_VALUE_MAX] = "", uuids[GS_CTRSPEC_VALUE_MAX] = "";

        if (al->n_parts == 0 || al->n_parts > GS_MAX_GPUS_PER_ALLOC || !al->socket_dir || al->socket_dir[0] != '/' ||
            strlen(al->socket_dir) >= PATH_MAX) {
                snprintf(err, errlen, "agent returned an unusable allocation '%.40s' (%zu parts, socket dir '%.200s')",
                         al->id, al->n_parts, al->socket_dir ? al->socket_dir : "");
                return -EINVAL;
        }
        memset(ret, 0, sizeof(*ret));
        for (size_t i = 0; i < al->n_parts; i++) {
                size_t l = strlen(limits), u = strlen(uuids);
                snprintf(limits + l, sizeof(limits) - l, "%s%llu", i ? "," : "",
                         (unsigned long long)al->parts[i]->quota_bytes);
                snprintf(uuids + u, sizeof(uuids) - u, "%s%.40s", i ? "," : "", al->parts[i]->gpu_uuid);
        }
        add_env(ret, "GSHARE_MEM_LIMIT", limits);
        add_env(ret, "GSHARE_GPU", uuids);
        add_env(ret, "GSHARE_SOCKET", GS_CTR_SOCKET_DIR "/" GS_SOCKET_NAME);
        add_env(ret, "NVIDIA_VISIBLE_DEVICES", uuids);
        if (c->inject == GS_INJECT_ENV)
                add_env(ret, "LD_PRELOAD", GS_CTR_HOOK);
        char wait[32];
        snprintf(wait, sizeof(wait), "%u.%03u", c->agent_wait_ms / 1000, c->agent_wait_ms % 1000);
        add_env(ret, "GSHARE_AGENT_WAIT", wait);
        add_mount(ret, c->hook_path, GS_CTR_HOOK);
        if (c->inject == GS_INJECT_PRELOAD)
                add_mount(ret, c->preload_path, GS_CTR_PRELOAD);
        add_mount(ret, al->socket_dir, GS_CTR_SOCKET_DIR);
        return 0;
}

/* A GPU's device minor from the driver's /proc entry, or -1. */
static int device_minor(const char *nvidia_proc, const char *pci)
{
        char path[PATH_MAX], line[256];
        FILE *f;
        int minor = -1;

        if (!*pci || strchr(pci, '/') || strlen(nvidia_proc) + strlen(pci) + 20 >= sizeof(path))
                return -1;
        snprintf(path, sizeof(path), "%s/gpus/%s/information", nvidia_proc, pci);
        f = fopen(path, "re");
        if (!f)
                return -1;
        while (fgets(line, sizeof(line), f))
                if (sscanf(line, "Device Minor: %d", &minor) == 1)
                        break;
        fclose(f);
        return minor >= 0 && minor < 256 ? minor : -1;
}

void gs_ctrspec_add_devices(struct gs_ctrspec *s, const char *nvidia_proc, const char *const *pci, size_t n)
{
        static const char *const ctl[] = { "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools" };

        for (size_t i = 0; i < GS_ARRAY_SIZE(ctl) && s->ndevs < GS_CTRSPEC_MAX_DEVS; i++)
                snprintf(s->devs[s->ndevs++], sizeof(s->devs[0]), "%s", ctl[i]);
        for (size_t i = 0; i < n && s->ndevs < GS_CTRSPEC_MAX_DEVS; i++) {
                int minor = device_minor(nvidia_proc, pci[i]);

                if (minor < 0) {
                        log_warn("no device minor for the GPU at PCI '%s' under %s/gpus: its /dev/nvidiaN not passed",
                                 pci[i], nvidia_proc);
                        continue;
                }
                snprintf(s->devs[s->ndevs++], sizeof(s->devs[0]), "/dev/nvidia%d", minor);
        }
}
