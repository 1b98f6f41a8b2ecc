/* fakenvml.c — a fake libnvidia-ml.so.1 for tests (nothing ships it).
 *
 * $GSHARE_FAKENVML_DEVICES devices (default 1, at most 8), whose UUIDs are
 * those of test/fakecuda's devices of the same index (so the hook matches
 * them to the agent's GPUs), each reporting the whole-GPU figures below:
 * numbers no gshare allocation has, so a test sees whether the hook
 * answered.  Only what the tests call: init, count, handles, UUIDs, the
 * memory queries, error strings, and the compute processes of a device,
 * which are test/fakecuda's per-process charges (its state file): what a
 * process created (contexts, its own allocations), not what it imported,
 * as on a real GPU, plus the memory whose creator released it or died (a
 * zombie, fc_state.h) that the process maps: the real driver counts that
 * to the process mapping it (test/gpu/orphan_check.py, docs/agent.md
 * "Restarts"). */
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "gs_nvmldecl.h"
#include "../fakecuda/fc_state.h"

#define FN_MAX_DEV 8
#define FN_TOTAL (80ull << 30)
#define FN_USED (1ull << 30)

struct nvmlDevice_st {
        unsigned int index;
};

static struct nvmlDevice_st g_dev[FN_MAX_DEV];
static int g_init;

static unsigned int fn_count(void)
{
        const char *e = getenv("GSHARE_FAKENVML_DEVICES");
        long n = e ? strtol(e, NULL, 10) : 1;

        return n < 1 ? 1 : n > FN_MAX_DEV ? FN_MAX_DEV : (unsigned int)n;
}

static nvmlReturn_t fn_check(nvmlDevice_t d)
{
        if (!g_init)
                return NVML_ERROR_UNINITIALIZED;
        if (!d || d < g_dev || d >= g_dev + fn_count())
                return NVML_ERROR_INVALID_ARGUMENT;
        return NVML_SUCCESS;
}

nvmlReturn_t nvmlInit_v2(void)
{
        for (unsigned int i = 0; i < FN_MAX_DEV; i++)
                g_dev[i].index = i;
        g_init++;
        return NVML_SUCCESS;
}

nvmlReturn_t nvmlShutdown(void)
{
        if (!g_init)
                return NVML_ERROR_UNINITIALIZED;
        g_init--;
        return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *deviceCount)
{
        if (!g_init)
                return NVML_ERROR_UNINITIALIZED;
        if (!deviceCount)
                return NVML_ERROR_INVALID_ARGUMENT;
        *deviceCount = fn_count();
        return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device)
{
        if (!g_init)
                return NVML_ERROR_UNINITIALIZED;
        if (!device || index >= fn_count())
                return NVML_ERROR_INVALID_ARGUMENT;
        *device = &g_dev[index];
        return NVML_SUCCESS;
}

/* The bytes of test/fakecuda's cuDeviceGetUuid, last byte = the index. */
nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length)
{
        nvmlReturn_t r = fn_check(device);

        if (r != NVML_SUCCESS)
                return r;
        if (!uuid)
                return NVML_ERROR_INVALID_ARGUMENT;
        if (length < 41)
                return NVML_ERROR_INSUFFICIENT_SIZE;
        snprintf(uuid, length, "GPU-67736872-fa4e-4be0-8000-5eed000000%02x", device->index);
        return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory)
{
        nvmlReturn_t r = fn_check(device);

        if (r != NVML_SUCCESS)
                return r;
        if (!memory)
                return NVML_ERROR_INVALID_ARGUMENT;
        *memory = (nvmlMemory_t){ .total = FN_TOTAL, .free = FN_TOTAL - FN_USED, .used = FN_USED };
        return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory)
{
        nvmlReturn_t r = fn_check(device);

        if (r != NVML_SUCCESS)
                return r;
        if (!memory)
                return NVML_ERROR_INVALID_ARGUMENT;
        if (memory->version != nvmlMemory_v2)
                return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
        *memory = (nvmlMemory_v2_t){ .version = nvmlMemory_v2,
                                     .total = FN_TOTAL,
                                     .reserved = FN_USED / 2,
                                     .free = FN_TOTAL - FN_USED,
                                     .used = FN_USED };
        return NVML_SUCCESS;
}

/* The fake driver's state, or NULL if no process has opened it yet. */
static const struct fc_shared *fn_state(void)
{
        static const struct fc_shared *sh;
        char buf[64];
        struct fc_shared *m;
        int fd;

        if (sh)
                return sh;
        fd = open(fc_state_path(buf, sizeof(buf)), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
        if (fd < 0)
                return NULL;
        m = mmap(NULL, sizeof(*m), PROT_READ, MAP_SHARED, fd, 0);
        close(fd);
        if (m == MAP_FAILED)
                return NULL;
        if (__atomic_load_n(&m->magic, __ATOMIC_SEQ_CST) != FC_MAGIC || m->version != FC_VERSION) {
                munmap(m, sizeof(*m));
                return NULL;
        }
        sh = m;
        return sh;
}

#define FN_MAX_SEEN 256

struct fn_seen {
        unsigned int pid;
        uint64_t bytes;
};

/* Adds b bytes to pid in v[0..*n) (a new entry if need be). */
static void fn_add(struct fn_seen *v, unsigned *n, unsigned int pid, uint64_t b)
{
        unsigned k;

        for (k = 0; k < *n && v[k].pid != pid; k++)
                ;
        if (k == *n) {
                if (*n == FN_MAX_SEEN)
                        return;
                v[(*n)++] = (struct fn_seen){ .pid = pid };
        }
        v[k].bytes += b;
}

/* The bytes of zombie memory of device dev whose memfd has inode ino, or 0. */
static uint64_t fn_zombie_bytes(const struct fc_shared *sh, int dev, uint64_t ino)
{
        uint32_t hwm = __atomic_load_n(&sh->ex_hwm, __ATOMIC_SEQ_CST);

        for (uint32_t j = 0; j < hwm && j < FC_MAX_EXPORTS; j++) {
                const struct fc_export *x = &sh->exports[j];
                uint64_t st = __atomic_load_n(&x->state, __ATOMIC_SEQ_CST);

                if (fc_ex_kind(st) == FC_EX_ZOMBIE && x->ino == ino && x->dev == dev)
                        return x->bytes;
        }
        return 0;
}

/* Each process's mappings of zombie memory of device dev (/proc/<pid>/maps:
 * each memfd counted once per process), added to v. */
static void fn_add_zombies(const struct fc_shared *sh, int dev, struct fn_seen *v, unsigned *n)
{
        DIR *proc = opendir("/proc");
        struct dirent *d;

        while (proc && (d = readdir(proc))) {
                char path[300], line[512];
                uint64_t seen[64];
                unsigned nseen = 0;
                int whole = 1;
                FILE *maps;

                if (d->d_name[0] < '1' || d->d_name[0] > '9')
                        continue;
                snprintf(path, sizeof(path), "/proc/%s/maps", d->d_name);
                if (!(maps = fopen(path, "re")))
                        continue;
                while (fgets(line, sizeof(line), maps)) {
                        unsigned long long ino = 0;
                        int start = whole;
                        unsigned k;

                        whole = strchr(line, '\n') != NULL;
                        if (!start || !strstr(line, "memfd:gshare-fake") ||
                            sscanf(line, "%*s %*s %*s %*s %llu", &ino) != 1)
                                continue;
                        for (k = 0; k < nseen && seen[k] != ino; k++)
                                ;
                        if (k < nseen)
                                continue;
                        if (nseen < 64)
                                seen[nseen++] = ino;
                        uint64_t b = fn_zombie_bytes(sh, dev, ino);
                        if (b)
                                fn_add(v, n, (unsigned int)strtoul(d->d_name, NULL, 10), b);
                }
                fclose(maps);
        }
        if (proc)
                closedir(proc);
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int *infoCount,
                                                     nvmlProcessInfo_t *infos)
{
        nvmlReturn_t r = fn_check(device);
        const struct fc_shared *sh;
        unsigned int n = 0, cap;

        if (r != NVML_SUCCESS)
                return r;
        if (!infoCount)
                return NVML_ERROR_INVALID_ARGUMENT;
        cap = *infoCount;
        sh = fn_state();
        struct fn_seen v[FN_MAX_SEEN];
        unsigned nv = 0;
        for (int i = 0; sh && i < FC_MAX_PROCS; i++) {
                int32_t pid = __atomic_load_n(&sh->procs[i].pid, __ATOMIC_SEQ_CST);
                uint64_t b = __atomic_load_n(&sh->procs[i].bytes[device->index], __ATOMIC_SEQ_CST);

                if (pid <= 0 || b == 0 || (kill(pid, 0) < 0 && errno == ESRCH))
                        continue;
                fn_add(v, &nv, (unsigned int)pid, b);
        }
        if (sh)
                fn_add_zombies(sh, (int)device->index, v, &nv);
        for (unsigned k = 0; k < nv; k++) {
                if (n < cap && infos)
                        infos[n] = (nvmlProcessInfo_t){ .pid = v[k].pid, .usedGpuMemory = v[k].bytes };
                n++;
        }
        *infoCount = n;
        return n > cap ? NVML_ERROR_INSUFFICIENT_SIZE : NVML_SUCCESS;
}

const char *nvmlErrorString(nvmlReturn_t result)
{
        switch (result) {
        case NVML_SUCCESS: return "Success";
        case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
        case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
        case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
        case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
        case NVML_ERROR_ARGUMENT_VERSION_MISMATCH: return "Argument Version Mismatch";
        case NVML_ERROR_UNKNOWN: return "Unknown Error";
        default: return "Unknown Error (fake NVML)";
        }
}
