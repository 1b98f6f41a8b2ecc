/* fakecuda.c — a fake libcuda.so.1 for tests (nothing ships it).
 *
 * "Device memory" is host memory: a device pointer is an address in the
 * process, cuMemcpy* is memcpy.  VMM allocations are sealed memfds, so they
 * can be exported as POSIX fds and mapped by other processes, exactly the
 * path gshare's agent and hook use on a real GPU.
 *
 * Device-memory accounting is shared by every process using the same state
 * file ($GSHARE_FAKECUDA_STATE, default /dev/shm/gshare-fakecuda-<uid>):
 * cuMemAlloc* and cuMemCreate charge it, and fail with
 * CUDA_ERROR_OUT_OF_MEMORY beyond $GSHARE_FAKECUDA_MEM per device (default
 * 16Gi) on $GSHARE_FAKECUDA_DEVICES devices (default 1).  Charges are kept
 * per pid and pid namespace; those of pids that no longer exist are dropped
 * when the state is opened, on cuMemGetInfo and when memory runs short, so a
 * crashed test does not poison the next (a pid of another namespace, a
 * pod's on a real cluster, is judged only from the initial namespace:
 * fc_slot_dead).  The config is fixed by whoever creates the state file.
 *
 * As on a GPU, memory lives while any process holds it: exported memory
 * (cuMemExportToShareableHandle) that another process still has an fd or a
 * mapping of outlives its creator's release, and its creator's death, as a
 * zombie (fc_state.h): still used until nobody holds it.  Who holds what is
 * read from /proc, in one pass per reap.
 *
 * An imported handle cannot be exported again (CUDA_ERROR_INVALID_VALUE),
 * as with the real driver.
 *
 * Legacy entry points with 32-bit device pointers exist (as in the real
 * driver) but return CUDA_ERROR_NOT_SUPPORTED: no fake address fits.
 *
 * Host-located VMM memory: cuMemCreate with CU_MEM_LOCATION_TYPE_HOST_NUMA,
 * id 0 (as on an H100 with driver 580) is host memory that is exported and
 * imported as a POSIX fd, mapped at a device address (cuMemMap,
 * cuMemSetAccess) and read and written there like device memory.  It is
 * charged to no device (cuMemGetInfo, NVML's per-process memory);
 * fakecuda_host_bytes() says how much of it this process holds,
 * fakecuda_host_bytes_in(base, size) how much is mapped in a range.
 * fakecuda_fail_maps(mask) makes cuMemMap calls fail on purpose: bit i
 * set, the i-th call from now (0 the next) returns
 * CUDA_ERROR_OUT_OF_MEMORY and maps nothing (for tests of failure paths).
 *
 * The fake kernels.  There are no modules; the CUfunctions are
 * fakecuda_fill_kernel(), fakecuda_spin_kernel() and fakecuda_nccl_kernel()
 * (the spin kernel under an NCCL kernel's name; cuFuncGetName names each).
 * cuLaunchKernel(_ptsz)
 * of the fill kernel takes any grid and
 * block (no dimension 0), extra == NULL, and kernelParams pointing to
 *   CUdeviceptr dst, size_t bytes, uint32_t value, uint32_t delay_us
 * (bytes and dst multiples of 4, delay_us <= 10 s).  The launch checks the
 * range is reachable from the current context's device and queues the
 * kernel on the stream; it runs asynchronously on the process's worker
 * thread, in launch order: it sleeps delay_us, then writes value to every
 * 32-bit word of [dst, dst+bytes).  cuStreamSynchronize waits for the
 * stream's kernels, cuCtxSynchronize (and a default stream's synchronize)
 * for every stream's; synchronous copies and memsets, cuMemsetD32Async
 * and cuLaunchHostFunc wait for them too, so every stream stays in order.
 * fakecuda_hold_work(1) holds queued kernels back until
 * fakecuda_hold_work(0); fakecuda_work_pending() and fakecuda_launched()
 * count them (see "asynchronous work" below).
 *
 * GPU time (fc_engine.h, docs/fakecuda.md).  The spin kernel's one
 * parameter is uint32_t duration_us (at most 10 s): it takes that much
 * time on its device's engine, which every process shares and which
 * time-slices contexts as the driver does (GSHARE_FAKECUDA_TIMESLICE_US,
 * default 2000); fakecuda_engine_stats() says what each context got.  It
 * is queued on the worker like the fill kernel, in stream order, and
 * completes when the engine has run it.  The fill kernel and copies take
 * no engine time.  cuEventRecord is asynchronous: the event completes
 * after the work queued before it (cuEventQuery: CUDA_ERROR_NOT_READY
 * until then; cuEventSynchronize waits), at the model's time, so
 * cuEventElapsedTime(_v2) measures modelled GPU time; cuStreamQuery says
 * whether a stream's work is done.  fakecuda_event_calls() counts the
 * process's event records and queries (the hook's too).  Stream capture records the kernels
 * launched into it in a graph (fc_graph.h) that cuGraphInstantiate and
 * cuGraphLaunch(_ptsz) replay, each spin kernel charged its duration.
 *
 * cuMemcpyDtoDAsync_v2 is queued on its stream as a kernel is (the same
 * worker, in order; fakecuda_work_pending counts it, fakecuda_launched
 * only kernels), and copies when it runs; both ranges must be reachable from the current context's device,
 * at the call and when it runs (else, as a kernel, a fault the next
 * synchronisation reports).  fakecuda_fail_copies(mask, at_run): bit i
 * set, the i-th cuMemcpyDtoDAsync_v2 call from now fails: at the call
 * (at_run 0: CUDA_ERROR_OUT_OF_MEMORY, nothing queued) or when it runs
 * (at_run 1: nothing copied, the next synchronisation returns
 * CUDA_ERROR_ILLEGAL_ADDRESS). */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../../hook/gs_cudadecl.h"
#include "fc_engine.h"
#include "fc_graph.h"
#include "fc_state.h"

#define FC_GRAN (2u << 20)
#define FC_PAGE 4096u
#define FC_MAX_HANDLES 8192
#define FC_VERSION_DRIVER 13000

/* A charge: which process slot paid for it (so a fork child freeing the
 * parent's memory uncharges the parent). */
struct fc_charge {
        int slot;
        int32_t pid;
        int dev;
        uint64_t bytes;
};

struct fc_alloc { /* cuMemAlloc family */
        struct fc_alloc *next;
        uintptr_t base;
        size_t size, mapped;
        struct fc_charge ch;
};

struct fc_handle { /* cuMemCreate / import */
        int used;
        uint32_t gen;
        int fd;
        size_t size;
        int dev;
        int hrefs;           /* handle references (create/import/retain) */
        int maps;            /* mappings; the memory lives while either is > 0 */
        uint64_t htypes;     /* requestedHandleTypes */
        int imported;        /* from cuMemImportFromShareableHandle */
        int exported;        /* an fd of it was handed out: others may hold it */
        int ex;              /* its entry in g_sh->exports[] + 1, 0 if none */
        int host;            /* host-located (HOST_NUMA 0): never charged */
        struct fc_charge ch; /* bytes == 0: not charged (import, host) */
};

struct fc_resv {
        struct fc_resv *next;
        uintptr_t base;
        size_t size;
};

struct fc_map {
        struct fc_map *next;
        uintptr_t addr;
        size_t size;
        int hidx;
        uint32_t access; /* devices cuMemSetAccess let reach it (bit per device) */
};

#define FC_CTX_MAGIC 0x43545846u
struct fc_ctx {
        uint32_t magic;
        int dev;
        int primary;
        int refs;
        struct fc_charge ch;
};

struct fc_stream {
        uint32_t magic;
        struct fc_ctx *ctx;
        int capture;            /* CUstreamCaptureStatus: NONE, ACTIVE, INVALIDATED */
        int capture_mode;       /* CUstreamCaptureMode of the capture (g_lock) */
        pthread_t capture_by;   /* the thread that began it (g_lock) */
        struct fc_graph *graph; /* what the capture records (g_lock) */
        uint64_t last;          /* the number of its last launch (g_wlock) */
};
#define FC_STREAM_MAGIC 0x53545246u
static void fc_capture_track(struct fc_stream *s, int in);

struct fc_event {
        uint32_t magic;
        struct fc_ctx *ctx;
        unsigned flags;
        int recorded;
        uint64_t widx; /* the work item of its last record (complete once finished) (g_wlock) */
        int pending;   /* work items of its records not yet run (g_wlock) */
        uint64_t t_ns; /* when it completed, in the model's time (g_wlock) */
};
#define FC_EVENT_MAGIC 0x54564546u

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static int g_inited;
static struct fc_shared *g_sh;
static int32_t g_slot_pid;
static int g_slot = -1;
static struct fc_alloc *g_allocs;
static struct fc_resv *g_resvs;
static struct fc_map *g_maps;
static struct fc_handle g_handles[FC_MAX_HANDLES];
static struct fc_ctx g_primary[FC_MAX_DEV];
static uint64_t g_ctx_bytes;
/* Bytes of host-located allocations this process holds (created or
 * imported, until the last handle and mapping go): fakecuda_host_bytes. */
static uint64_t g_host_bytes;

/* Live contexts and streams, so a bad handle is an error, not a crash. */
#define FC_MAX_OBJS 1024
static void *g_objs[FC_MAX_OBJS];

static __thread struct fc_ctx *t_stack[32];
static __thread int t_depth;

/* The work queue (fake kernels; below, before the copies). */
static CUresult fc_work_wait(struct fc_stream *s, int all);
static CUresult fc_work_wait_all(void);
static CUresult fc_work_wait_stream(CUstream h);

/* ---- shared accounting ---------------------------------------------- */

static int fc_parse_size(const char *s, uint64_t *ret)
{
        char *end;
        unsigned long long v;
        uint64_t mul = 1;

        if (!s || !isdigit((unsigned char)*s))
                return -EINVAL;
        errno = 0;
        v = strtoull(s, &end, 10);
        if (errno)
                return -EINVAL;
        if (!strcmp(end, "Ki"))
                mul = 1ull << 10;
        else if (!strcmp(end, "Mi"))
                mul = 1ull << 20;
        else if (!strcmp(end, "Gi"))
                mul = 1ull << 30;
        else if (!strcmp(end, "Ti"))
                mul = 1ull << 40;
        else if (*end)
                return -EINVAL;
        if (v > UINT64_MAX / mul)
                return -ERANGE;
        *ret = v * mul;
        return 0;
}

/* The inode of this process's pid namespace, 0 if unknown.  A process
 * never changes it (unshare and setns move only its children), so it is
 * looked up once per process: fc_reap asks for it for every slot. */
static uint32_t fc_my_pidns(void)
{
        static __thread pid_t pid;
        static __thread uint32_t ns;
        struct stat st;

        if (pid != getpid()) {
                ns = stat("/proc/self/ns/pid", &st) == 0 ? (uint32_t)st.st_ino : 0;
                pid = getpid();
        }
        return ns;
}

/* The kernel's initial pid namespace (PROC_PID_INIT_INO): from it every
 * process, in every namespace, is visible in /proc. */
#define FC_INIT_PIDNS 0xEFFFFFFCu

/* 1 if a process of pid namespace ns has pid `pid` there (/proc/<p>/status
 * NSpid ends with it).  Only meaningful from the initial namespace. */
static int fc_nspid_alive(uint32_t ns, int32_t pid)
{
        DIR *proc = opendir("/proc");
        struct dirent *d;
        int alive = 0;

        if (!proc)
                return 1; /* cannot tell: keep it */
        while (!alive && (d = readdir(proc))) {
                char path[300], line[256];
                struct stat st;
                FILE *f;

                if (d->d_name[0] < '0' || d->d_name[0] > '9')
                        continue;
                snprintf(path, sizeof(path), "/proc/%s/ns/pid", d->d_name);
                if (stat(path, &st) < 0 || (uint32_t)st.st_ino != ns)
                        continue;
                snprintf(path, sizeof(path), "/proc/%s/status", d->d_name);
                f = fopen(path, "re");
                while (f && fgets(line, sizeof(line), f))
                        if (strncmp(line, "NSpid:", 6) == 0) {
                                char *last = strrchr(line, '\t');
                                alive = last && atoi(last + 1) == pid;
                                break;
                        }
                if (f)
                        fclose(f);
        }
        closedir(proc);
        return alive;
}

/* Whether the process of slot i is gone.  A pid of another pid namespace
 * (a pod's, on a real cluster) means nothing to kill() here: it is judged
 * only from the initial namespace, which sees every process, and otherwise
 * kept. */
static int fc_slot_dead(int i, int32_t pid)
{
        uint32_t ns, mine;

        if (pid <= 0)
                return 0;
        ns = __atomic_load_n(&g_sh->procs[i].pidns, __ATOMIC_SEQ_CST);
        mine = fc_my_pidns();
        if (ns == 0 || ns == mine)
                return kill(pid, 0) < 0 && errno == ESRCH;
        return mine == FC_INIT_PIDNS && !fc_nspid_alive(ns, pid);
}

/* *p -= v, not below 0: a process killed between the two steps of an update
 * (a few instructions) must not make the figures wrap round. */
static void fc_sub(uint64_t *p, uint64_t v)
{
        uint64_t o = __atomic_load_n(p, __ATOMIC_SEQ_CST);

        while (!__atomic_compare_exchange_n(p, &o, o > v ? o - v : 0, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
                ;
}

/* ---- exported memory and its holders (fc_state.h) -------------------- */

/* An entry of exports[] whose holders a scan of /proc looks for. */
struct fc_cand {
        uint64_t ino;
        uint64_t state; /* the entry's state when it was read */
        uint64_t bytes;
        int32_t dev;
        uint32_t ex; /* its index in exports[] */
        uint32_t held;
};

static int fc_cand_cmp(const void *a, const void *b)
{
        uint64_t x = ((const struct fc_cand *)a)->ino, y = ((const struct fc_cand *)b)->ino;

        return (x > y) - (x < y);
}

/* pre: c[0..n) sorted by ino.  Marks held the candidates of inode ino;
 * returns how many were not marked before. */
static size_t fc_cand_mark(struct fc_cand *c, size_t n, uint64_t ino)
{
        struct fc_cand key = { .ino = ino }, *hit = bsearch(&key, c, n, sizeof(*c), fc_cand_cmp);
        size_t lo, hi, marked = 0;

        if (!hit)
                return 0;
        for (lo = (size_t)(hit - c); lo > 0 && c[lo - 1].ino == ino; lo--)
                ;
        for (hi = (size_t)(hit - c); hi < n && c[hi].ino == ino; hi++)
                ;
        for (size_t k = lo; k < hi; k++) {
                marked += !c[k].held;
                c[k].held = 1;
        }
        return marked;
}

/* pre: c[0..n) sorted by ino.  Marks held every candidate whose memfd some
 * process has an fd or a mapping of.  One pass over /proc whatever n is,
 * ending early once all are held; if /proc cannot be read, all are held
 * (cannot tell: keep them). */
static void fc_scan_held(struct fc_cand *c, size_t n)
{
        DIR *proc = opendir("/proc");
        struct dirent *d;
        size_t left = n;

        if (!proc) {
                for (size_t k = 0; k < n; k++)
                        c[k].held = 1;
                return;
        }
        while (left && (d = readdir(proc))) {
                char path[300], line[512];
                DIR *fds;
                FILE *maps;
                struct dirent *f;
                int whole = 1;

                if (d->d_name[0] < '0' || d->d_name[0] > '9')
                        continue;
                snprintf(path, sizeof(path), "/proc/%s/fd", d->d_name);
                fds = opendir(path);
                while (fds && left && (f = readdir(fds))) {
                        struct stat st;
                        /* A memfd is a regular file with no link. */
                        if (f->d_name[0] != '.' && fstatat(dirfd(fds), f->d_name, &st, 0) == 0 && S_ISREG(st.st_mode) &&
                            st.st_nlink == 0)
                                left -= fc_cand_mark(c, n, (uint64_t)st.st_ino);
                }
                if (fds)
                        closedir(fds);
                snprintf(path, sizeof(path), "/proc/%s/maps", d->d_name);
                maps = left ? fopen(path, "re") : NULL;
                while (maps && left && fgets(line, sizeof(line), maps)) {
                        unsigned long long ino = 0;
                        /* Only the start of a line (a long path may split it). */
                        int start = whole;

                        whole = strchr(line, '\n') != NULL;
                        if (start && strstr(line, "memfd:gshare-fake") &&
                            sscanf(line, "%*s %*s %*s %*s %llu", &ino) == 1)
                                left -= fc_cand_mark(c, n, ino);
                }
                if (maps)
                        fclose(maps);
        }
        closedir(proc);
}

/* 1 if any process has an fd or a mapping of the memfd with inode ino. */
static int fc_ino_in_use(uint64_t ino)
{
        struct fc_cand c = { .ino = ino };

        fc_scan_held(&c, 1);
        return c.held != 0;
}

/* Candidates of one reap; g_lock serializes their use. */
static struct fc_cand g_cand[FC_MAX_EXPORTS];

/* pre: g_lock held.  Claims exports[] entry j (free) for the creator of
 * charge c, or returns -1. */
static int fc_ex_claim(const struct fc_charge *c)
{
        uint64_t mine = fc_ex_state(FC_EX_WRITING, (uint32_t)c->slot, (uint32_t)c->pid);

        for (uint32_t j = 0; j < FC_MAX_EXPORTS; j++) {
                uint64_t zero = 0;
                uint32_t hwm;

                if (__atomic_load_n(&g_sh->exports[j].state, __ATOMIC_SEQ_CST) ||
                    !__atomic_compare_exchange_n(&g_sh->exports[j].state, &zero, mine, 0, __ATOMIC_SEQ_CST,
                                                 __ATOMIC_SEQ_CST))
                        continue;
                hwm = __atomic_load_n(&g_sh->ex_hwm, __ATOMIC_SEQ_CST);
                while (hwm <= j &&
                       !__atomic_compare_exchange_n(&g_sh->ex_hwm, &hwm, j + 1, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
                        ;
                return (int)j;
        }
        return -1;
}

/* pre: g_lock held.  Exported memory of charge c, memfd ino: entered in
 * exports[] as on the books of c's payer, so that it outlives the payer
 * while others hold it.  Its index + 1, or 0 if not entered (the table is
 * full, or the payer is gone). */
static int fc_ex_enter(const struct fc_charge *c, uint64_t ino)
{
        struct fc_export *x;
        int j;

        if (!c->bytes || __atomic_load_n(&g_sh->procs[c->slot].pid, __ATOMIC_SEQ_CST) != c->pid)
                return 0;
        j = fc_ex_claim(c);
        if (j < 0)
                return 0;
        x = &g_sh->exports[j];
        x->ino = ino;
        x->bytes = c->bytes;
        x->dev = c->dev;
        __atomic_store_n(&x->state, fc_ex_state(FC_EX_OWNED, (uint32_t)c->slot, (uint32_t)c->pid), __ATOMIC_SEQ_CST);
        return j + 1;
}

/* pre: g_lock held.  The charge c of memfd ino, not in exports[], outlives
 * its creator's last handle: move it from the creator to a zombie entry
 * (still used).  0, or -1 if the table is full (then it is simply
 * released). */
static int fc_zombify(struct fc_charge *c, uint64_t ino)
{
        int j = fc_ex_claim(c);
        struct fc_export *x;

        if (j < 0)
                return -1;
        x = &g_sh->exports[j];
        x->ino = ino;
        x->bytes = c->bytes;
        x->dev = c->dev;
        /* Off the creator's books, still in the device's used. */
        if (__atomic_load_n(&g_sh->procs[c->slot].pid, __ATOMIC_SEQ_CST) == c->pid)
                fc_sub(&g_sh->procs[c->slot].bytes[c->dev], c->bytes);
        else
                __atomic_add_fetch(&g_sh->used[c->dev], c->bytes, __ATOMIC_SEQ_CST);
        c->bytes = 0;
        __atomic_store_n(&x->state, fc_ex_state(FC_EX_ZOMBIE, 0, (uint32_t)ino), __ATOMIC_SEQ_CST);
        return 0;
}

/* pre: g_lock held.  The creator's handle e of exported memory (memfd ino)
 * lost its last reference and mapping.  Another process may hold the memory
 * through a kept fd or a mapping: then it stays used, as on a GPU. */
static void fc_unexport(struct fc_handle *e, uint64_t ino)
{
        struct fc_charge *c = &e->ch;
        uint64_t owned;
        struct fc_export *x;

        if (!c->bytes || !e->exported || !ino)
                return;
        if (!e->ex) { /* the table was full at export */
                if (fc_ino_in_use(ino))
                        (void)fc_zombify(c, ino);
                return;
        }
        x = &g_sh->exports[e->ex - 1];
        owned = fc_ex_state(FC_EX_OWNED, (uint32_t)c->slot, (uint32_t)c->pid);
        if (fc_ino_in_use(ino)) {
                if (__atomic_compare_exchange_n(&x->state, &owned, fc_ex_state(FC_EX_ZOMBIE, 0, (uint32_t)ino), 0,
                                                __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST) &&
                    __atomic_load_n(&g_sh->procs[c->slot].pid, __ATOMIC_SEQ_CST) == c->pid)
                        fc_sub(&g_sh->procs[c->slot].bytes[c->dev], c->bytes);
                /* Else the payer died (we are its fork child) and its reaper
                 * made this a zombie or freed it: not ours either way. */
                c->bytes = 0;
        } else if (!__atomic_compare_exchange_n(&x->state, &owned, 0, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
                c->bytes = 0; /* the payer's reaper took it */
        }
        /* Not held and the entry is free: the caller uncharges c. */
}

/* pre: g_lock held.  Drops slot i of a dead process pid, after its entries
 * in exports[] (c[0..n), scanned): memory another process holds becomes a
 * zombie (still used), the rest is freed with the slot's charges. */
static void fc_drop_slot(int i, int32_t pid, struct fc_cand *c, size_t n)
{
        struct fc_proc *p = &g_sh->procs[i];
        uint64_t owned = fc_ex_state(FC_EX_OWNED, (uint32_t)i, (uint32_t)pid);
        uint64_t writing = fc_ex_state(FC_EX_WRITING, (uint32_t)i, (uint32_t)pid);

        /* Claim the slot first: only one process may subtract its charges. */
        if (!__atomic_compare_exchange_n(&p->pid, &pid, -1, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
                return;
        for (size_t k = 0; k < n; k++) {
                uint64_t st = c[k].state;

                if (st == owned && c[k].held) {
                        if (__atomic_compare_exchange_n(&g_sh->exports[c[k].ex].state, &st,
                                                        fc_ex_state(FC_EX_ZOMBIE, 0, (uint32_t)c[k].ino), 0,
                                                        __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
                                fc_sub(&p->bytes[c[k].dev], c[k].bytes); /* off its books, still used */
                } else if (st == owned || st == writing) {
                        /* Nobody holds it, or it was never finished. */
                        (void)__atomic_compare_exchange_n(&g_sh->exports[c[k].ex].state, &st, 0, 0, __ATOMIC_SEQ_CST,
                                                          __ATOMIC_SEQ_CST);
                }
        }
        for (unsigned d = 0; d < FC_MAX_DEV; d++) {
                uint64_t b = __atomic_exchange_n(&p->bytes[d], 0, __ATOMIC_SEQ_CST);
                if (b)
                        fc_sub(&g_sh->used[d], b);
        }
        __atomic_store_n(&p->pidns, 0, __ATOMIC_SEQ_CST);
        __atomic_store_n(&p->pid, 0, __ATOMIC_SEQ_CST);
}

/* pre: g_lock held.  Drops the slots of dead processes (dead[i]: the pid
 * slot i had, 0 if it is alive) and frees zombie memory nobody holds any
 * more.  The cost is a walk of exports[] up to its high-water mark and at
 * most one pass over /proc, none when no exported memory needs judging. */
static void fc_reap_dead(const int32_t *dead)
{
        uint32_t hwm = __atomic_load_n(&g_sh->ex_hwm, __ATOMIC_SEQ_CST);
        size_t n = 0;

        if (hwm > FC_MAX_EXPORTS)
                hwm = FC_MAX_EXPORTS;
        for (uint32_t j = 0; j < hwm; j++) {
                struct fc_export *x = &g_sh->exports[j];
                uint64_t st = __atomic_load_n(&x->state, __ATOMIC_SEQ_CST);
                unsigned kind = fc_ex_kind(st);
                uint32_t slot = (uint32_t)(st >> 32) & 0xffffffu;
                int32_t pid = (int32_t)(uint32_t)st;
                struct fc_cand *c = &g_cand[n];

                if (kind != FC_EX_ZOMBIE && (kind == 0 || slot >= FC_MAX_PROCS || pid <= 0 || dead[slot] != pid))
                        continue;
                c->ino = __atomic_load_n(&x->ino, __ATOMIC_SEQ_CST);
                c->bytes = __atomic_load_n(&x->bytes, __ATOMIC_SEQ_CST);
                c->dev = __atomic_load_n(&x->dev, __ATOMIC_SEQ_CST);
                c->state = st;
                c->ex = j;
                c->held = 0;
                /* Taken only if unchanged while read; a half-written entry
                 * (kind WRITING) is dropped whatever it says. */
                if (__atomic_load_n(&x->state, __ATOMIC_SEQ_CST) != st)
                        continue;
                if (kind != FC_EX_WRITING && (c->dev < 0 || (uint32_t)c->dev >= g_sh->ndev))
                        continue;
                n++;
        }
        if (n) {
                qsort(g_cand, n, sizeof(*g_cand), fc_cand_cmp);
                fc_scan_held(g_cand, n);
        }
        for (int i = 0; i < FC_MAX_PROCS; i++)
                if (dead[i])
                        fc_drop_slot(i, dead[i], g_cand, n);
        /* A zombie's holders are gone for good once none is left: no one
         * can reach its memfd any more. */
        for (size_t k = 0; k < n; k++) {
                uint64_t st = g_cand[k].state;

                if (fc_ex_kind(st) == FC_EX_ZOMBIE && !g_cand[k].held &&
                    __atomic_compare_exchange_n(&g_sh->exports[g_cand[k].ex].state, &st, 0, 0, __ATOMIC_SEQ_CST,
                                                __ATOMIC_SEQ_CST))
                        fc_sub(&g_sh->used[g_cand[k].dev], g_cand[k].bytes);
        }
}

/* pre: g_lock held. */
static void fc_reap(void)
{
        int32_t dead[FC_MAX_PROCS];

        for (int i = 0; i < FC_MAX_PROCS; i++) {
                int32_t pid = __atomic_load_n(&g_sh->procs[i].pid, __ATOMIC_SEQ_CST);
                dead[i] = fc_slot_dead(i, pid) ? pid : 0;
        }
        fc_reap_dead(dead);
}

/* pre: g_lock held.  The slot of this process (a fork child gets its own). */
static int fc_my_slot(void)
{
        int32_t me = (int32_t)getpid();

        if (g_slot >= 0 && g_slot_pid == me)
                return g_slot;
        /* A slot already carrying our pid belongs to a dead process whose pid
         * we reuse: its charges are not ours. */
        for (int i = 0; i < FC_MAX_PROCS; i++)
                if (__atomic_load_n(&g_sh->procs[i].pid, __ATOMIC_SEQ_CST) == me &&
                    __atomic_load_n(&g_sh->procs[i].pidns, __ATOMIC_SEQ_CST) == fc_my_pidns()) {
                        int32_t dead[FC_MAX_PROCS] = { 0 };

                        dead[i] = me;
                        fc_reap_dead(dead);
                }
        for (int pass = 0; pass < 2; pass++) {
                for (int i = 0; i < FC_MAX_PROCS; i++) {
                        int32_t zero = 0;
                        if (__atomic_compare_exchange_n(&g_sh->procs[i].pid, &zero, me, 0, __ATOMIC_SEQ_CST,
                                                        __ATOMIC_SEQ_CST)) {
                                __atomic_store_n(&g_sh->procs[i].pidns, fc_my_pidns(), __ATOMIC_SEQ_CST);
                                g_slot = i;
                                g_slot_pid = me;
                                return i;
                        }
                }
                fc_reap();
        }
        return -1;
}

/* pre: g_lock held. */
static CUresult fc_charge(int dev, uint64_t bytes, struct fc_charge *ret)
{
        int slot = fc_my_slot();

        if (slot < 0)
                return CUDA_ERROR_OUT_OF_MEMORY;
        for (int pass = 0; pass < 2; pass++) {
                uint64_t u = __atomic_load_n(&g_sh->used[dev], __ATOMIC_SEQ_CST);
                while (u <= g_sh->total[dev] && bytes <= g_sh->total[dev] - u) {
                        if (__atomic_compare_exchange_n(&g_sh->used[dev], &u, u + bytes, 0, __ATOMIC_SEQ_CST,
                                                        __ATOMIC_SEQ_CST)) {
                                __atomic_add_fetch(&g_sh->procs[slot].bytes[dev], bytes, __ATOMIC_SEQ_CST);
                                ret->slot = slot;
                                ret->pid = g_slot_pid;
                                ret->dev = dev;
                                ret->bytes = bytes;
                                return CUDA_SUCCESS;
                        }
                }
                fc_reap();
        }
        return CUDA_ERROR_OUT_OF_MEMORY;
}

static void fc_uncharge(struct fc_charge *c)
{
        struct fc_proc *p;

        if (!c->bytes)
                return;
        p = &g_sh->procs[c->slot];
        /* If the payer is gone its charges were dropped already. */
        if (__atomic_load_n(&p->pid, __ATOMIC_SEQ_CST) == c->pid) {
                fc_sub(&p->bytes[c->dev], c->bytes);
                fc_sub(&g_sh->used[c->dev], c->bytes);
        }
        c->bytes = 0;
}

static CUresult fc_open_state(void)
{
        char defpath[64];
        const char *path = fc_state_path(defpath, sizeof(defpath));
        uint64_t ndev = 1, mem = 16ull << 30, ctxb = 0;
        struct stat st;
        struct fc_shared *sh = MAP_FAILED;
        CUresult r = CUDA_ERROR_OPERATING_SYSTEM;
        int fd;

        if (fc_parse_size(secure_getenv("GSHARE_FAKECUDA_DEVICES") ?: "1", &ndev) < 0 || ndev < 1 ||
            ndev > FC_MAX_DEV || fc_parse_size(secure_getenv("GSHARE_FAKECUDA_MEM") ?: "16Gi", &mem) < 0 ||
            fc_parse_size(secure_getenv("GSHARE_FAKECUDA_CTX_BYTES") ?: "0", &ctxb) < 0) {
                fprintf(stderr, "fakecuda: bad GSHARE_FAKECUDA_DEVICES/_MEM/_CTX_BYTES\n");
                return CUDA_ERROR_INVALID_VALUE;
        }
        fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (fd < 0) {
                fprintf(stderr, "fakecuda: cannot open state %s: %s\n", path, strerror(errno));
                return CUDA_ERROR_OPERATING_SYSTEM;
        }
        if (flock(fd, LOCK_EX) < 0 || fstat(fd, &st) < 0)
                goto fail;
        if (st.st_size == 0 && ftruncate(fd, sizeof(*sh)) < 0)
                goto fail;
        if (st.st_size != 0 && st.st_size != (off_t)sizeof(*sh)) {
                fprintf(stderr, "fakecuda: state %s has the wrong size; remove it\n", path);
                goto fail;
        }
        sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (sh == MAP_FAILED)
                goto fail;
        if (sh->magic != FC_MAGIC) {
                sh->version = FC_VERSION;
                sh->ndev = (uint32_t)ndev;
                for (unsigned d = 0; d < ndev; d++)
                        sh->total[d] = mem;
                __atomic_store_n(&sh->magic, FC_MAGIC, __ATOMIC_SEQ_CST);
        } else if (sh->version != FC_VERSION || sh->ndev < 1 || sh->ndev > FC_MAX_DEV) {
                fprintf(stderr, "fakecuda: state %s is corrupt; remove it\n", path);
                munmap(sh, sizeof(*sh));
                goto fail;
        }
        g_sh = sh;
        g_ctx_bytes = ctxb;
        fc_reap();
        r = CUDA_SUCCESS;
fail:
        /* Unlock explicitly: the mapping keeps the open file alive, and a
         * flock lives as long as the open file, so close() alone would keep
         * every other process out of cuInit for as long as we run. */
        (void)flock(fd, LOCK_UN);
        close(fd);
        return r;
}

/* ---- object registry ------------------------------------------------ */

static int fc_obj_add(void *o)
{
        for (int i = 0; i < FC_MAX_OBJS; i++)
                if (!g_objs[i]) {
                        g_objs[i] = o;
                        return 0;
                }
        return -ENOSPC;
}

static int fc_obj_has(const void *o)
{
        if (!o)
                return 0;
        for (int i = 0; i < FC_MAX_OBJS; i++)
                if (g_objs[i] == o)
                        return 1;
        return 0;
}

static void fc_obj_del(const void *o)
{
        for (int i = 0; i < FC_MAX_OBJS; i++)
                if (g_objs[i] == o)
                        g_objs[i] = NULL;
}

static int fc_ctx_valid(const struct fc_ctx *c)
{
        if (!c)
                return 0;
        for (int d = 0; d < FC_MAX_DEV; d++)
                if (c == &g_primary[d])
                        return 1;
        return fc_obj_has(c) && c->magic == FC_CTX_MAGIC;
}

/* ---- entry checks --------------------------------------------------- */

#define FC_INIT_CHECK()                                            \
        do {                                                       \
                if (!__atomic_load_n(&g_inited, __ATOMIC_ACQUIRE)) \
                        return CUDA_ERROR_NOT_INITIALIZED;         \
        } while (0)

static CUresult fc_dev_check(CUdevice dev)
{
        if (!__atomic_load_n(&g_inited, __ATOMIC_ACQUIRE))
                return CUDA_ERROR_NOT_INITIALIZED;
        if (dev < 0 || (unsigned)dev >= g_sh->ndev)
                return CUDA_ERROR_INVALID_DEVICE;
        return CUDA_SUCCESS;
}

static struct fc_ctx *fc_current(void)
{
        return t_depth > 0 ? t_stack[t_depth - 1] : NULL;
}

/* The current context's device, or an error. */
static CUresult fc_cur_dev(int *ret_dev)
{
        struct fc_ctx *c = fc_current();

        if (!__atomic_load_n(&g_inited, __ATOMIC_ACQUIRE))
                return CUDA_ERROR_NOT_INITIALIZED;
        if (!c)
                return CUDA_ERROR_INVALID_CONTEXT;
        *ret_dev = c->dev;
        return CUDA_SUCCESS;
}

/* ---- init, errors, devices ------------------------------------------ */

CUresult CUDAAPI cuInit(unsigned int Flags)
{
        CUresult r = CUDA_SUCCESS;

        if (Flags != 0)
                return CUDA_ERROR_INVALID_VALUE;
        pthread_mutex_lock(&g_lock);
        if (!g_inited) {
                r = fc_open_state();
                if (r == CUDA_SUCCESS)
                        __atomic_store_n(&g_inited, 1, __ATOMIC_RELEASE);
        }
        pthread_mutex_unlock(&g_lock);
        return r;
}

CUresult CUDAAPI cuDriverGetVersion(int *driverVersion)
{
        if (!driverVersion)
                return CUDA_ERROR_INVALID_VALUE;
        *driverVersion = FC_VERSION_DRIVER;
        return CUDA_SUCCESS;
}

struct fc_error {
        CUresult r;
        const char *name, *str;
};

static const struct fc_error fc_errors[] = {
        { CUDA_SUCCESS, "CUDA_SUCCESS", "no error" },
        { CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument" },
        { CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory" },
        { CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED", "initialization error" },
        { CUDA_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected" },
        { CUDA_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal" },
        { CUDA_ERROR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context" },
        { CUDA_ERROR_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle" },
        { CUDA_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND", "named symbol not found" },
        { CUDA_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported" },
        { CUDA_ERROR_NOT_PERMITTED, "CUDA_ERROR_NOT_PERMITTED", "operation not permitted" },
        { CUDA_ERROR_OPERATING_SYSTEM, "CUDA_ERROR_OPERATING_SYSTEM",
          "OS call failed or operation not supported on this OS" },
        { CUDA_ERROR_ALREADY_MAPPED, "CUDA_ERROR_ALREADY_MAPPED", "resource already mapped" },
        { CUDA_ERROR_UNKNOWN, "CUDA_ERROR_UNKNOWN", "unknown error" },
};

/* The table entry for error, or NULL. */
static const struct fc_error *fc_error_find(CUresult error)
{
        for (size_t i = 0; i < sizeof(fc_errors) / sizeof(fc_errors[0]); i++)
                if (fc_errors[i].r == error)
                        return &fc_errors[i];
        return NULL;
}

CUresult CUDAAPI cuGetErrorString(CUresult error, const char **pStr)
{
        const struct fc_error *e = fc_error_find(error);

        if (!pStr)
                return CUDA_ERROR_INVALID_VALUE;
        *pStr = e ? e->str : NULL;
        return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult CUDAAPI cuGetErrorName(CUresult error, const char **pStr)
{
        const struct fc_error *e = fc_error_find(error);

        if (!pStr)
                return CUDA_ERROR_INVALID_VALUE;
        *pStr = e ? e->name : NULL;
        return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult CUDAAPI cuDeviceGetCount(int *count)
{
        FC_INIT_CHECK();
        if (!count)
                return CUDA_ERROR_INVALID_VALUE;
        *count = (int)g_sh->ndev;
        return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGet(CUdevice *device, int ordinal)
{
        CUresult r = fc_dev_check(ordinal);

        if (r != CUDA_SUCCESS)
                return r;
        if (!device)
                return CUDA_ERROR_INVALID_VALUE;
        *device = ordinal;
        return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetName(char *name, int len, CUdevice dev)
{
        CUresult r = fc_dev_check(dev);

        if (r != CUDA_SUCCESS)
                return r;
        if (!name || len <= 0)
                return CUDA_ERROR_INVALID_VALUE;
        snprintf(name, (size_t)len, "gshare fake GPU %d", dev);
        return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice dev)
{
        static const unsigned char base[16] = { 'g',  's',  'h',  'r',  0xfa, 0x4e, 0x4b, 0xe0,
                                                0x80, 0x00, 0x5e, 0xed, 0x00, 0x00, 0x00, 0x00 };
        CUresult r = fc_dev_check(dev);

        if (r != CUDA_SUCCESS)
                return r;
        if (!uuid)
                return CUDA_ERROR_INVALID_VALUE;
        memcpy(uuid->bytes, base, 16);
        uuid->bytes[15] = (char)dev;
        return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetUuid(CUuuid *uuid, CUdevice dev)
{
        return cuDeviceGetUuid_v2(uuid, dev);
}

CUresult CUDAAPI cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
        CUresult r = fc_dev_check(dev);

        if (r != CUDA_SUCCESS)
                return r;
        if (!bytes)
                return CUDA_ERROR_INVALID_VALUE;
        *bytes = g_sh->total[dev];
        return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceTotalMem(unsigned int *bytes, CUdevice dev)
{
        size_t b = 0;
        CUresult r = cuDeviceTotalMem_v2(&b, dev);

        if (r == CUDA_SUCCESS)
                *bytes = b > UINT_MAX ? UINT_MAX : (unsigned)b;
        return r;
}

CUresult CUDAAPI cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev)
{
        CUresult r = fc_dev_check(dev);

        if (r != CUDA_SUCCESS)
                return r;
        if (!pi)
                return CUDA_ERROR_INVALID_VALUE;
        switch (attrib) {
        case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID: *pi = dev + 1; break;
        case CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID: *pi = 0; break;
        case CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID: *pi = 0; break;
        case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *pi = 9; break;
        case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *pi = 0; break;
        case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: *pi = 132; break;
        case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED:
        case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED:
        case CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED:
        case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING:
        case CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY: *pi = 1; break;
        default: *pi = 0; break;
        }
        return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetPCIBusId(char *pciBusId, int len, CUdevice dev)
{
        CUresult r = fc_dev_check(dev);

        if (r != CUDA_SUCCESS)
                return r;
        if (!pciBusId || len < 13)
                return CUDA_ERROR_INVALID_VALUE;
        snprintf(pciBusId, (size_t)len, "0000:%02x:00.0", (unsigned)dev + 1);
        return CUDA_SUCCESS;
}

/* ---- contexts and streams ------------------------------------------- */

CUresult CUDAAPI cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
        CUresult r = fc_dev_check(dev);
        struct fc_ctx *c;

        if (r != CUDA_SUCCESS)
                return r;
        if (!pctx)
                return CUDA_ERROR_INVALID_VALUE;
        pthread_mutex_lock(&g_lock);
        c = &g_primary[dev];
        if (c->refs == 0) {
                c->magic = FC_CTX_MAGIC;
                c->dev = dev;
                c->primary = 1;
                if (g_ctx_bytes)
                        r = fc_charge(dev, g_ctx_bytes, &c->ch);
        }
        if (r == CUDA_SUCCESS) {
                c->refs++;
                *pctx = (CUcontext)c;
        }
        pthread_mutex_unlock(&g_lock);
        return r;
}

CUresult CUDAAPI cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
        CUresult r = fc_dev_check(dev);

        if (r != CUDA_SUCCESS)
                return r;
        pthread_mutex_lock(&g_lock);
        if (g_primary[dev].refs <= 0)
                r = CUDA_ERROR_INVALID_CONTEXT;
        else if (--g_primary[dev].refs == 0)
                fc_uncharge(&g_primary[dev].ch);
        pthread_mutex_unlock(&g_lock);
        return r;
}

CUresult CUDAAPI cuDevicePrimaryCtxRelease(CUdevice dev)
{
        return cuDevicePrimaryCtxRelease_v2(dev);
}

/* Active while retained; no flags are kept. */
CUresult CUDAAPI cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int *flags, int *active)
{
        CUresult r = fc_dev_check(dev);

        if (r != CUDA_SUCCESS)
                return r;
        if (!flags || !active)
                return CUDA_ERROR_INVALID_VALUE;
        pthread_mutex_lock(&g_lock);
        *flags = 0;
        *active = g_primary[dev].refs > 0;
        pthread_mutex_unlock(&g_lock);
        return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDevicePrimaryCtxReset_v2(CUdevice dev)
{
        return fc_dev_check(dev);
}

CUresult CUDAAPI cuDevicePrimaryCtxReset(CUdevice dev)
{
        return cuDevicePrimaryCtxReset_v2(dev);
}

static CUresult fc_ctx_create(CUcontext *pctx, CUdevice dev)
{
        CUresult r = fc_dev_check(dev);
        struct fc_ctx *c;

        if (r != CUDA_SUCCESS)
                return r;
        if (!pctx || t_depth >= (int)(sizeof(t_stack) / sizeof(t_stack[0])))
                return CUDA_ERROR_INVALID_VALUE;
        c = calloc(1, sizeof(*c));
        if (!c)
                return CUDA_ERROR_OUT_OF_MEMORY;
        c->magic = FC_CTX_MAGIC;
        c->dev = dev;
        pthread_mutex_lock(&g_lock);
        if (fc_obj_add(c) < 0)
                r = CUDA_ERROR_OUT_OF_MEMORY;
        else if (g_ctx_bytes && (r = fc_charge(dev, g_ctx_bytes, &c->ch)) != CUDA_SUCCESS)
                fc_obj_del(c);
        pthread_mutex_unlock(&g_lock);
        if (r != CUDA_SUCCESS) {
                free(c);
                return r;
        }
        t_stack[t_depth++] = c;
        *pctx = (CUcontext)c;
        return CUDA_SUCCESS;
}

/* Not a driver function: what lazily loaded module images do on a real GPU.
 * Charges bytes to this process on the current context's device until it
 * exits, outside any allocation (NVML counts it, as it counts contexts). */
CUresult fakecuda_module_load(size_t bytes);
CUresult fakecuda_module_load(size_t bytes)
{
        struct fc_charge ch;
        CUresult r;
        int dev;

        if ((r = fc_cur_dev(&dev)) != CUDA_SUCCESS)
                return r;
        pthread_mutex_lock(&g_lock);
        r = fc_charge(dev, bytes, &ch);
        pthread_mutex_unlock(&g_lock);
        return r;
}

CUresult CUDAAPI cuCtxCreate(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
        (void)flags;
        return fc_ctx_create(pctx, dev);
}

CUresult CUDAAPI cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
        (void)flags;
        return fc_ctx_create(pctx, dev);
}

CUresult CUDAAPI cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *ctxCreateParams, unsigned int flags, CUdevice dev)
{
        (void)flags;
        if (ctxCreateParams && (ctxCreateParams->execAffinityParams || ctxCreateParams->cigParams))
                return CUDA_ERROR_NOT_SUPPORTED;
        return fc_ctx_create(pctx, dev);
}

CUresult CUDAAPI cuCtxDestroy_v2(CUcontext ctx)
{
        struct fc_ctx *c = (struct fc_ctx *)ctx;
        CUresult r = CUDA_SUCCESS;

        FC_INIT_CHECK();
        pthread_mutex_lock(&g_lock);
        if (!fc_obj_has(c) || c->magic != FC_CTX_MAGIC) {
                r = CUDA_ERROR_INVALID_CONTEXT;
        } else {
                fc_obj_del(c);
                fc_uncharge(&c->ch);
                c->magic = 0;
        }
        pthread_mutex_unlock(&g_lock);
        if (r != CUDA_SUCCESS)
                return r;
        /* Only this thread's stack is visible here; as in the real driver,
         * other threads must not use a destroyed context. */
        for (int i = 0; i < t_depth; i++)
                if (t_stack[i] == c) {
                        memmove(&t_stack[i], &t_stack[i + 1], sizeof(t_stack[0]) * (size_t)(t_depth - i - 1));
                        t_depth--;
                        i--;
                }
        free(c);
        return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxDestroy(CUcontext ctx)
{
        return cuCtxDestroy_v2(ctx);
}

CUresult CUDAAPI cuCtxSetCurrent(CUcontext ctx)
{
        struct fc_ctx *c = (struct fc_ctx *)ctx;
        int ok;

        FC_INIT_CHECK();
        if (!c) {
                if (t_depth > 0)
                        t_depth--;
                return CUDA_SUCCESS;
        }
        pthread_mutex_lock(&g_lock);
        ok = fc_ctx_valid(c);
        pthread_mutex_unlock(&g_lock);
        if (!ok)
                return CUDA_ERROR_INVALID_CONTEXT;
        if (t_depth == 0)
                t_depth = 1;
        t_stack[t_depth - 1] = c;
        return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxGetCurrent(CUcontext *pctx)
{
        FC_INIT_CHECK();
        if (!pctx)
                return CUDA_ERROR_INVALID_VALUE;
        *pctx = (CUcontext)fc_current();
        return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxGetDevice(CUdevice *device)
{
        int dev = 0;
        CUresult r = fc_cur_dev(&dev);

        if (r != CUDA_SUCCESS)
                return r;
        if (!device)
                return CUDA_ERROR_INVALID_VALUE;
        *device = dev;
        return CUDA_SUCCESS;
}

/* Waits for the work of every stream of the process (a superset of the
 * context's). */
CUresult CUDAAPI cuCtxSynchronize(void)
{
        int dev;
        CUresult r = fc_cur_dev(&dev);

        return r != CUDA_SUCCESS ? r : fc_work_wait_all();
}

CUresult CUDAAPI cuCtxPushCurrent_v2(CUcontext ctx)
{
        struct fc_ctx *c = (struct fc_ctx *)ctx;
        int ok;

        FC_INIT_CHECK();
        pthread_mutex_lock(&g_lock);
        ok = fc_ctx_valid(c);
        pthread_mutex_unlock(&g_lock);
        if (!ok)
                return CUDA_ERROR_INVALID_CONTEXT;
        if (t_depth >= (int)(sizeof(t_stack) / sizeof(t_stack[0])))
                return CUDA_ERROR_INVALID_VALUE;
        t_stack[t_depth++] = c;
        return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxPushCurrent(CUcontext ctx)
{
        return cuCtxPushCurrent_v2(ctx);
}

CUresult CUDAAPI cuCtxPopCurrent_v2(CUcontext *pctx)
{
        FC_INIT_CHECK();
        if (t_depth == 0)
                return CUDA_ERROR_INVALID_CONTEXT;
        t_depth--;
        if (pctx)
                *pctx = (CUcontext)t_stack[t_depth];
        return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxPopCurrent(CUcontext *pctx)
{
        return cuCtxPopCurrent_v2(pctx);
}

CUresult CUDAAPI cuStreamCreate(CUstream *phStream, unsigned int Flags)
{
        struct fc_stream *s;
        int dev, rc;
        CUresult r = fc_cur_dev(&dev);

        (void)Flags;
        if (r != CUDA_SUCCESS)
                return r;
        if (!phStream)
                return CUDA_ERROR_INVALID_VALUE;
        s = calloc(1, sizeof(*s));
        if (!s)
                return CUDA_ERROR_OUT_OF_MEMORY;
        s->magic = FC_STREAM_MAGIC;
        s->ctx = fc_current();
        pthread_mutex_lock(&g_lock);
        rc = fc_obj_add(s);
        pthread_mutex_unlock(&g_lock);
        if (rc < 0) {
                free(s);
                return CUDA_ERROR_OUT_OF_MEMORY;
        }
        *phStream = (CUstream)s;
        return CUDA_SUCCESS;
}

/* NULL and the two special default streams are always valid. */
static CUresult fc_stream_check(CUstream h)
{
        int ok;

        FC_INIT_CHECK();
        if (h == NULL || h == CU_STREAM_LEGACY || h == CU_STREAM_PER_THREAD)
                return CUDA_SUCCESS;
        pthread_mutex_lock(&g_lock);
        ok = fc_obj_has(h) && ((struct fc_stream *)h)->magic == FC_STREAM_MAGIC;
        pthread_mutex_unlock(&g_lock);
        return ok ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

CUresult CUDAAPI cuStreamDestroy_v2(CUstream hStream)
{
        struct fc_stream *s = (struct fc_stream *)hStream;
        CUresult r = CUDA_SUCCESS;

        FC_INIT_CHECK();
        pthread_mutex_lock(&g_lock);
        if (!fc_obj_has(s) || s->magic != FC_STREAM_MAGIC)
                r = CUDA_ERROR_INVALID_HANDLE;
        pthread_mutex_unlock(&g_lock);
        if (r != CUDA_SUCCESS)
                return r;
        /* Its queued work refers to it: done first (the real driver
         * returns at once and frees the stream after its work). */
        (void)fc_work_wait(s, 0);
        pthread_mutex_lock(&g_lock);
        if (!fc_obj_has(s) || s->magic != FC_STREAM_MAGIC)
                r = CUDA_ERROR_INVALID_HANDLE;
        else {
                fc_obj_del(s);
                fc_capture_track(s, 0);
        }
        pthread_mutex_unlock(&g_lock);
        if (r == CUDA_SUCCESS) {
                fc_graph_free(s->graph);
                free(s);
        }
        return r;
}

CUresult CUDAAPI cuStreamDestroy(CUstream hStream)
{
        return cuStreamDestroy_v2(hStream);
}

/* Waits for the stream's launched kernels (everything else in the fake
 * runs synchronously); a default stream waits for every stream, as the
 * legacy one does.  As in the real driver, synchronizing a stream that is
 * being captured is refused and invalidates the capture. */
CUresult CUDAAPI cuStreamSynchronize(CUstream hStream)
{
        CUresult r = fc_stream_check(hStream);
        struct fc_stream *s = (struct fc_stream *)hStream;

        if (r != CUDA_SUCCESS)
                return r;
        if (hStream == NULL || hStream == CU_STREAM_LEGACY || hStream == CU_STREAM_PER_THREAD)
                return fc_work_wait_stream(hStream);
        pthread_mutex_lock(&g_lock);
        if (s->capture != CU_STREAM_CAPTURE_STATUS_NONE) {
                s->capture = CU_STREAM_CAPTURE_STATUS_INVALIDATED;
                r = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
        }
        pthread_mutex_unlock(&g_lock);
        return r != CUDA_SUCCESS ? r : fc_work_wait_stream(hStream);
}

CUresult CUDAAPI cuStreamSynchronize_ptsz(CUstream hStream)
{
        return cuStreamSynchronize(hStream);
}

/* Priorities: the range an H100 reports (0 the default and least, -5 the
 * greatest); a stream's is accepted and ignored (work runs at once). */
CUresult CUDAAPI cuCtxGetStreamPriorityRange(int *leastPriority, int *greatestPriority)
{
        int dev;
        CUresult r = fc_cur_dev(&dev);

        if (r != CUDA_SUCCESS)
                return r;
        if (leastPriority)
                *leastPriority = 0;
        if (greatestPriority)
                *greatestPriority = -5;
        return CUDA_SUCCESS;
}

CUresult CUDAAPI cuStreamCreateWithPriority(CUstream *phStream, unsigned int flags, int priority)
{
        (void)priority; /* out of range is clamped by the real driver: any is fine */
        return cuStreamCreate(phStream, flags);
}

/* Stream capture records the fake kernels launched into it, in order, in
 * a graph (fc_graph.h); cuGraphLaunch queues them on its stream as if
 * launched there, spin kernels charging their durations to the engine. */
static CUresult fc_capture_stream(CUstream h, struct fc_stream **ret)
{
        CUresult r = fc_stream_check(h);

        if (r != CUDA_SUCCESS)
                return r;
        if (h == NULL || h == CU_STREAM_LEGACY || h == CU_STREAM_PER_THREAD)
                return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
        *ret = (struct fc_stream *)h;
        return CUDA_SUCCESS;
}

/* Capture modes, as the real driver has them: while a thread captures in
 * GLOBAL mode (the default), a "potentially unsafe" call from any thread
 * whose own mode (cuThreadExchangeStreamCaptureMode, GLOBAL at start) is
 * not RELAXED is refused with CUDA_ERROR_STREAM_CAPTURE_IMPLICIT and
 * invalidates the capture; a THREAD_LOCAL capture forbids them to its own
 * thread only.  The unsafe calls modelled: cuEventQuery and
 * cuEventSynchronize (on an H200, a thread of the hook querying an event
 * while PyTorch captured a graph made the capture fail). */
static __thread int fc_thread_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;
#define FC_CAPTURES_MAX 64
static struct fc_stream *g_captures[FC_CAPTURES_MAX]; /* streams capturing (g_lock) */

CUresult CUDAAPI cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode *mode)
{
        int old;

        if (!mode || *mode < CU_STREAM_CAPTURE_MODE_GLOBAL || *mode > CU_STREAM_CAPTURE_MODE_RELAXED)
                return CUDA_ERROR_INVALID_VALUE;
        old = fc_thread_mode;
        fc_thread_mode = (int)*mode;
        *mode = (CUstreamCaptureMode)old;
        return CUDA_SUCCESS;
}

/* A potentially unsafe call: refused, and the captures it breaks
 * invalidated, as above. */
static CUresult fc_unsafe_call(void)
{
        CUresult r = CUDA_SUCCESS;

        if (fc_thread_mode == CU_STREAM_CAPTURE_MODE_RELAXED)
                return r;
        pthread_mutex_lock(&g_lock);
        for (unsigned i = 0; i < FC_CAPTURES_MAX; i++) {
                struct fc_stream *s = g_captures[i];

                if (!s || s->capture != CU_STREAM_CAPTURE_STATUS_ACTIVE)
                        continue;
                if (s->capture_mode == CU_STREAM_CAPTURE_MODE_GLOBAL ||
                    (s->capture_mode == CU_STREAM_CAPTURE_MODE_THREAD_LOCAL &&
                     pthread_equal(s->capture_by, pthread_self()))) {
                        s->capture = CU_STREAM_CAPTURE_STATUS_INVALIDATED;
                        r = CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
                }
        }
        pthread_mutex_unlock(&g_lock);
        return r;
}

/* pre: g_lock.  s in or out of g_captures. */
static void fc_capture_track(struct fc_stream *s, int in)
{
        for (unsigned i = 0; i < FC_CAPTURES_MAX; i++)
                if (g_captures[i] == (in ? NULL : s)) {
                        g_captures[i] = in ? s : NULL;
                        return;
                }
}

CUresult CUDAAPI cuStreamBeginCapture_v2(CUstream hStream, CUstreamCaptureMode mode)
{
        struct fc_stream *s;
        CUresult r = fc_capture_stream(hStream, &s);

        if (r != CUDA_SUCCESS)
                return r;
        if (mode < CU_STREAM_CAPTURE_MODE_GLOBAL || mode > CU_STREAM_CAPTURE_MODE_RELAXED)
                return CUDA_ERROR_INVALID_VALUE;
        pthread_mutex_lock(&g_lock);
        if (s->capture != CU_STREAM_CAPTURE_STATUS_NONE)
                r = CUDA_ERROR_ILLEGAL_STATE;
        else if (!(s->graph = fc_graph_new(0)))
                r = CUDA_ERROR_OUT_OF_MEMORY;
        else {
                s->capture = CU_STREAM_CAPTURE_STATUS_ACTIVE;
                s->capture_mode = (int)mode;
                s->capture_by = pthread_self();
                fc_capture_track(s, 1);
        }
        pthread_mutex_unlock(&g_lock);
        return r;
}

CUresult CUDAAPI cuStreamEndCapture(CUstream hStream, CUgraph *phGraph)
{
        struct fc_graph *g = NULL;
        struct fc_stream *s;
        CUresult r = fc_capture_stream(hStream, &s);

        if (r != CUDA_SUCCESS)
                return r;
        if (!phGraph)
                return CUDA_ERROR_INVALID_VALUE;
        pthread_mutex_lock(&g_lock);
        if (s->capture == CU_STREAM_CAPTURE_STATUS_NONE)
                r = CUDA_ERROR_ILLEGAL_STATE;
        else if (s->capture == CU_STREAM_CAPTURE_STATUS_INVALIDATED)
                r = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
        else if (fc_obj_add(s->graph) < 0)
                r = CUDA_ERROR_OUT_OF_MEMORY;
        else
                g = s->graph;
        if (!g)
                fc_graph_free(s->graph);
        s->graph = NULL;
        s->capture = CU_STREAM_CAPTURE_STATUS_NONE;
        fc_capture_track(s, 0);
        pthread_mutex_unlock(&g_lock);
        *phGraph = (CUgraph)g;
        return r;
}

CUresult CUDAAPI cuStreamIsCapturing(CUstream hStream, CUstreamCaptureStatus *captureStatus)
{
        CUresult r = fc_stream_check(hStream);

        if (r != CUDA_SUCCESS)
                return r;
        if (!captureStatus)
                return CUDA_ERROR_INVALID_VALUE;
        *captureStatus = CU_STREAM_CAPTURE_STATUS_NONE;
        if (hStream != NULL && hStream != CU_STREAM_LEGACY && hStream != CU_STREAM_PER_THREAD) {
                pthread_mutex_lock(&g_lock);
                *captureStatus = (CUstreamCaptureStatus)((struct fc_stream *)hStream)->capture;
                pthread_mutex_unlock(&g_lock);
        }
        return CUDA_SUCCESS;
}

CUresult CUDAAPI cuStreamIsCapturing_ptsz(CUstream hStream, CUstreamCaptureStatus *captureStatus)
{
        return cuStreamIsCapturing(hStream, captureStatus);
}

CUresult CUDAAPI cuLaunchHostFunc(CUstream hStream, CUhostFn fn, void *userData)
{
        CUresult r = fc_stream_check(hStream);

        if (r != CUDA_SUCCESS)
                return r;
        if (!fn)
                return CUDA_ERROR_INVALID_VALUE;
        /* In stream order: after the stream's kernels. */
        if ((r = fc_work_wait_stream(hStream)) != CUDA_SUCCESS)
                return r;
        fn(userData);
        return CUDA_SUCCESS;
}

/* ---- cuMemAlloc family ---------------------------------------------- */

static CUresult fc_alloc(CUdeviceptr *dptr, size_t bytesize)
{
        struct fc_alloc *a;
        void *p;
        int dev = 0;
        CUresult r = fc_cur_dev(&dev);

        if (r != CUDA_SUCCESS)
                return r;
        if (!dptr || bytesize == 0)
                return CUDA_ERROR_INVALID_VALUE;
        if (bytesize > (1ull << 46))
                return CUDA_ERROR_OUT_OF_MEMORY;
        a = calloc(1, sizeof(*a));
        if (!a)
                return CUDA_ERROR_OUT_OF_MEMORY;
        a->size = bytesize;
        a->mapped = (bytesize + FC_PAGE - 1) & ~(size_t)(FC_PAGE - 1);
        pthread_mutex_lock(&g_lock);
        r = fc_charge(dev, a->mapped, &a->ch);
        pthread_mutex_unlock(&g_lock);
        if (r != CUDA_SUCCESS) {
                free(a);
                return r;
        }
        /* Shared anonymous memory: shmem, like a memfd. */
        p = mmap(NULL, a->mapped, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        pthread_mutex_lock(&g_lock);
        if (p == MAP_FAILED) {
                fc_uncharge(&a->ch);
                pthread_mutex_unlock(&g_lock);
                free(a);
                return CUDA_ERROR_OUT_OF_MEMORY;
        }
        a->base = (uintptr_t)p;
        a->next = g_allocs;
        g_allocs = a;
        pthread_mutex_unlock(&g_lock);
        *dptr = (CUdeviceptr)a->base;
        return CUDA_SUCCESS;
}

static CUresult fc_free(CUdeviceptr dptr)
{
        struct fc_alloc **pp, *a = NULL;

        FC_INIT_CHECK();
        if (dptr == 0)
                return CUDA_SUCCESS;
        pthread_mutex_lock(&g_lock);
        for (pp = &g_allocs; *pp; pp = &(*pp)->next)
                if ((*pp)->base == dptr) {
                        a = *pp;
                        *pp = a->next;
                        fc_uncharge(&a->ch);
                        break;
                }
        pthread_mutex_unlock(&g_lock);
        if (!a)
                return CUDA_ERROR_INVALID_VALUE;
        munmap((void *)a->base, a->mapped);
        free(a);
        return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
        return fc_alloc(dptr, bytesize);
}
CUresult CUDAAPI cuMemFree_v2(CUdeviceptr dptr)
{
        return fc_free(dptr);
}

CUresult CUDAAPI cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes, size_t Height,
                                    unsigned int ElementSizeBytes)
{
        size_t pitch;

        FC_INIT_CHECK();
        if (!pPitch || WidthInBytes == 0 || Height == 0 ||
            (ElementSizeBytes != 4 && ElementSizeBytes != 8 && ElementSizeBytes != 16))
                return CUDA_ERROR_INVALID_VALUE;
        if (WidthInBytes > (1ull << 40) || Height > (1ull << 40))
                return CUDA_ERROR_INVALID_VALUE;
        pitch = (WidthInBytes + 511) & ~(size_t)511;
        if (Height > (1ull << 46) / pitch)
                return CUDA_ERROR_OUT_OF_MEMORY;
        CUresult r = fc_alloc(dptr, pitch * Height);
        if (r == CUDA_SUCCESS)
                *pPitch = pitch;
        return r;
}

CUresult CUDAAPI cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags)
{
        if (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST)
                return CUDA_ERROR_INVALID_VALUE;
        return fc_alloc(dptr, bytesize);
}

CUresult CUDAAPI cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
        CUresult r = fc_stream_check(hStream);

        return r != CUDA_SUCCESS ? r : fc_alloc(dptr, bytesize);
}

CUresult CUDAAPI cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream)
{
        CUresult r = fc_stream_check(hStream);

        return r != CUDA_SUCCESS ? r : fc_free(dptr);
}

CUresult CUDAAPI cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
        return cuMemAllocAsync(dptr, bytesize, hStream);
}

CUresult CUDAAPI cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream)
{
        return cuMemFreeAsync(dptr, hStream);
}

CUresult CUDAAPI cuMemGetInfo_v2(size_t *free_bytes, size_t *total)
{
        int dev = 0;
        CUresult r = fc_cur_dev(&dev);
        uint64_t u;

        if (r != CUDA_SUCCESS)
                return r;
        if (!free_bytes || !total)
                return CUDA_ERROR_INVALID_VALUE;
        pthread_mutex_lock(&g_lock);
        fc_reap();
        pthread_mutex_unlock(&g_lock);
        u = __atomic_load_n(&g_sh->used[dev], __ATOMIC_SEQ_CST);
        *total = g_sh->total[dev];
        *free_bytes = u >= *total ? 0 : *total - u;
        return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemGetInfo(unsigned int *free_bytes, unsigned int *total)
{
        size_t f = 0, t = 0;
        CUresult r = cuMemGetInfo_v2(&f, &t);

        if (r == CUDA_SUCCESS) {
                *free_bytes = f > UINT_MAX ? UINT_MAX : (unsigned)f;
                *total = t > UINT_MAX ? UINT_MAX : (unsigned)t;
        }
        return r;
}

CUresult CUDAAPI cuMemGetAddressRange_v2(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr)
{
        CUresult r = CUDA_ERROR_NOT_FOUND;

        FC_INIT_CHECK();
        pthread_mutex_lock(&g_lock);
        for (struct fc_alloc *a = g_allocs; a; a = a->next)
                if (dptr >= a->base && dptr < a->base + a->size) {
                        if (pbase)
                                *pbase = a->base;
                        if (psize)
                                *psize = a->size;
                        r = CUDA_SUCCESS;
                        break;
                }
        for (struct fc_map *m = g_maps; r != CUDA_SUCCESS && m; m = m->next)
                if (dptr >= m->addr && dptr < m->addr + m->size) {
                        if (pbase)
                                *pbase = m->addr;
                        if (psize)
                                *psize = m->size;
                        r = CUDA_SUCCESS;
                }
        pthread_mutex_unlock(&g_lock);
        return r;
}

/* ---- asynchronous work: the fake kernel ------------------------------ */

/* One worker thread per process (started by the first launch) runs the
 * launched kernels one at a time in launch order, so each stream's work is
 * in order (streams do not overlap one another, unlike on a GPU).  Launches
 * are numbered; each stream keeps the number of its last, and waiting for
 * a stream (or for everything) is waiting until the worker has finished
 * that number (or the last one queued at the call), so a waiter is not
 * starved by launches made after it.  A kernel that
 * finds its range unreachable when it runs (unmapped, or no access for its
 * device) writes nothing and makes the next synchronisation (stream,
 * context, or a synchronous copy) return CUDA_ERROR_ILLEGAL_ADDRESS, once:
 * unlike a GPU, the context survives.  Work queued before a fork does not
 * run in the child.  A spin kernel enters the engine at its launch (so the
 * engine knows the context's whole queue) and its item here waits for the
 * engine to have run it; a launch finding its context's engine queue full
 * waits for the worker to finish some (a full push buffer).  An event's
 * record is an item too, stamped with the model's time when it runs. */
struct fc_work {
        struct fc_work *next;
        struct fc_stream *s; /* NULL: the default streams */
        int dev;
        uintptr_t dst;
        size_t bytes;
        uint32_t value, delay_us;
        uintptr_t src;    /* a copy (cuMemcpyDtoDAsync_v2) from src; 0: the fill kernel */
        int fail;         /* fakecuda_fail_copies: faults when it runs */
        int kind;         /* FC_W_* */
        uint32_t spin_us; /* FC_W_SPIN: its duration, its context, its kernel in the engine */
        uint64_t ctx;
        struct fc_eng_ticket t;
        struct fc_event *ev; /* FC_W_EVENT: the event recorded, when (model time), its number */
        uint64_t rec_ns, idx;
};

enum {
        FC_W_FILL,  /* the fill kernel or a copy: runs on the worker */
        FC_W_SPIN,  /* a kernel with a duration: runs on the engine (fc_engine.h) */
        FC_W_EVENT, /* an event's record: completes after what was queued before it */
};

static pthread_mutex_t g_wlock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_wcond = PTHREAD_COND_INITIALIZER; /* work queued, hold lifted */
static pthread_cond_t g_wdone = PTHREAD_COND_INITIALIZER; /* work finished */
static struct fc_work *g_whead, **g_wtail = &g_whead;
static uint64_t g_wqueued;   /* work (kernels, copies) queued since the start (atomic writes, under g_wlock) */
static uint64_t g_wfinished; /* of those, finished (in order: one worker) (same) */
static uint64_t g_wkernels;  /* of those, kernels (not copies): fakecuda_launched (g_wlock) */
static int g_whold;          /* fakecuda_hold_work */
static int g_wfault;         /* CUresult of a faulted kernel, for the next sync (atomic) */
static uint64_t g_wlast_ns;  /* when the last spin kernel the worker saw completed, model time (g_wlock) */
static int g_wstarted;
static pthread_once_t g_wfork_once = PTHREAD_ONCE_INIT;

/* pre: g_lock held.  Whether the current mappings let device dev reach
 * [ptr, ptr+n): every byte inside a reservation mapped, and every mapping
 * there accessible to dev (cuMemSetAccess).  Memory outside reservations
 * (cuMemAlloc, host) is always reachable. */
static CUresult fc_reach_locked(int dev, uintptr_t ptr, size_t n)
{
        size_t in_resv = 0, in_maps = 0;

        if (n == 0)
                return CUDA_SUCCESS;
        for (struct fc_map *m = g_maps; m; m = m->next)
                if (m->addr < ptr + n && ptr < m->addr + m->size) {
                        if (!(m->access & (1u << dev)))
                                return CUDA_ERROR_ILLEGAL_ADDRESS;
                        in_maps += (m->addr + m->size < ptr + n ? m->addr + m->size : ptr + n) -
                                   (m->addr > ptr ? m->addr : ptr);
                }
        for (struct fc_resv *v = g_resvs; v; v = v->next)
                if (v->base < ptr + n && ptr < v->base + v->size)
                        in_resv += (v->base + v->size < ptr + n ? v->base + v->size : ptr + n) -
                                   (v->base > ptr ? v->base : ptr);
        return in_maps == in_resv ? CUDA_SUCCESS : CUDA_ERROR_ILLEGAL_ADDRESS;
}

/* A spin kernel: waits for the engine to run it (fc_engine.h). */
static void fc_work_spin(struct fc_work *w)
{
        uint64_t done = 0;
        int rc = fc_engine_wait(&w->t, &done);

        pthread_mutex_lock(&g_wlock);
        if (rc == 0 && done > g_wlast_ns)
                g_wlast_ns = done;
        if (rc != 0)
                __atomic_store_n(&g_wfault, (int)CUDA_ERROR_LAUNCH_FAILED, __ATOMIC_RELAXED);
        pthread_mutex_unlock(&g_wlock);
}

/* An event completes after everything queued before it: at its record, or
 * when the last spin kernel before it completed, whichever is later. */
static void fc_work_event(struct fc_work *w)
{
        pthread_mutex_lock(&g_wlock);
        if (w->ev->widx == w->idx) /* else recorded again since */
                w->ev->t_ns = w->rec_ns > g_wlast_ns ? w->rec_ns : g_wlast_ns;
        w->ev->pending--;
        pthread_mutex_unlock(&g_wlock);
}

static void fc_work_run(struct fc_work *w)
{
        struct timespec ts = { .tv_sec = w->delay_us / 1000000, .tv_nsec = (long)(w->delay_us % 1000000) * 1000 };
        CUresult r;

        if (w->kind == FC_W_SPIN) {
                fc_work_spin(w);
                return;
        }
        if (w->kind == FC_W_EVENT) {
                fc_work_event(w);
                return;
        }
        while (w->delay_us && nanosleep(&ts, &ts) < 0 && errno == EINTR)
                ;
        /* Under g_lock: the range cannot be remapped while it is written. */
        pthread_mutex_lock(&g_lock);
        r = w->fail ? CUDA_ERROR_ILLEGAL_ADDRESS : fc_reach_locked(w->dev, w->dst, w->bytes);
        if (r == CUDA_SUCCESS && w->src)
                r = fc_reach_locked(w->dev, w->src, w->bytes);
        if (r == CUDA_SUCCESS && w->src)
                memmove((void *)w->dst, (const void *)w->src, w->bytes);
        else if (r == CUDA_SUCCESS)
                for (size_t i = 0; i < w->bytes / 4; i++)
                        ((uint32_t *)w->dst)[i] = w->value;
        pthread_mutex_unlock(&g_lock);
        if (r != CUDA_SUCCESS) {
                pthread_mutex_lock(&g_wlock);
                __atomic_store_n(&g_wfault, (int)r, __ATOMIC_RELAXED);
                pthread_mutex_unlock(&g_wlock);
        }
}

static void *fc_worker(void *arg)
{
        (void)arg;
        pthread_mutex_lock(&g_wlock);
        for (;;) {
                struct fc_work *w;

                while (!g_whead || g_whold)
                        pthread_cond_wait(&g_wcond, &g_wlock);
                w = g_whead;
                g_whead = w->next;
                if (!g_whead)
                        g_wtail = &g_whead;
                pthread_mutex_unlock(&g_wlock);
                fc_work_run(w);
                pthread_mutex_lock(&g_wlock);
                __atomic_add_fetch(&g_wfinished, 1, __ATOMIC_RELEASE);
                pthread_cond_broadcast(&g_wdone);
                free(w);
        }
        return NULL;
}

/* The worker writes under g_lock: a fork waits for that to end, so the
 * child's g_lock is not left held by a thread it does not have.  (Neither
 * lock is taken while holding the other.) */
static void fc_work_prepare(void)
{
        pthread_mutex_lock(&g_lock);
        pthread_mutex_lock(&g_wlock);
}

static void fc_work_parent(void)
{
        pthread_mutex_unlock(&g_wlock);
        pthread_mutex_unlock(&g_lock);
}

/* The parent's worker does not exist here: its queue is dropped. */
static void fc_work_child(void)
{
        while (g_whead) {
                struct fc_work *w = g_whead;
                g_whead = w->next;
                free(w);
        }
        g_wtail = &g_whead;
        for (int i = 0; i < FC_MAX_OBJS; i++)
                if (g_objs[i] && ((struct fc_stream *)g_objs[i])->magic == FC_STREAM_MAGIC)
                        ((struct fc_stream *)g_objs[i])->last = 0;
        g_wqueued = g_wfinished = g_wkernels = g_wlast_ns = 0;
        for (int i = 0; i < FC_MAX_OBJS; i++)
                if (g_objs[i] && ((struct fc_event *)g_objs[i])->magic == FC_EVENT_MAGIC)
                        ((struct fc_event *)g_objs[i])->widx = ((struct fc_event *)g_objs[i])->pending = 0;
        g_wstarted = g_whold = g_wfault = 0;
        pthread_mutex_init(&g_wlock, NULL);
        pthread_cond_init(&g_wcond, NULL);
        pthread_cond_init(&g_wdone, NULL);
        pthread_mutex_unlock(&g_lock);
}

static void fc_work_fork_register(void)
{
        (void)pthread_atfork(fc_work_prepare, fc_work_parent, fc_work_child);
}

/* The stream's own record, NULL for a default stream. */
static struct fc_stream *fc_stream_of(CUstream h)
{
        return h == NULL || h == CU_STREAM_LEGACY || h == CU_STREAM_PER_THREAD ? NULL : (struct fc_stream *)h;
}

static CUresult fc_work_queue(struct fc_work *w)
{
        pthread_attr_t attr;
        pthread_t t;
        int rc = 0;

        pthread_once(&g_wfork_once, fc_work_fork_register);
        pthread_mutex_lock(&g_wlock);
        if (!g_wstarted) {
                pthread_attr_init(&attr);
                pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
                rc = pthread_create(&t, &attr, fc_worker, NULL);
                pthread_attr_destroy(&attr);
                g_wstarted = rc == 0;
        }
        /* A spin kernel enters the engine now, in launch order: a full
         * queue waits for the worker to finish some of it. */
        while (rc == 0 && w->kind == FC_W_SPIN) {
                int er = fc_engine_submit(w->dev, w->ctx, w->spin_us, &w->t);

                if (er != -EAGAIN) {
                        rc = -er;
                        break;
                }
                pthread_cond_wait(&g_wdone, &g_wlock);
        }
        if (rc == 0) {
                *g_wtail = w;
                g_wtail = &w->next;
                __atomic_add_fetch(&g_wqueued, 1, __ATOMIC_RELEASE);
                g_wkernels += w->kind == FC_W_SPIN || (w->kind == FC_W_FILL && w->src == 0);
                if (w->s)
                        w->s->last = g_wqueued;
                if (w->kind == FC_W_EVENT) {
                        w->idx = w->ev->widx = g_wqueued;
                        w->ev->pending++;
                }
                pthread_cond_broadcast(&g_wcond);
        }
        pthread_mutex_unlock(&g_wlock);
        if (rc != 0) {
                free(w);
                return CUDA_ERROR_OUT_OF_MEMORY;
        }
        return CUDA_SUCCESS;
}

/* Waits until the work queued so far on stream s (all: on every stream)
 * is done, then hands out a kernel's fault once. */
static CUresult fc_work_wait(struct fc_stream *s, int all)
{
        uint64_t target;
        CUresult r;

        if (all && __atomic_load_n(&g_wfinished, __ATOMIC_ACQUIRE) == __atomic_load_n(&g_wqueued, __ATOMIC_ACQUIRE) &&
            __atomic_load_n(&g_wfault, __ATOMIC_RELAXED) == 0)
                return CUDA_SUCCESS;
        pthread_mutex_lock(&g_wlock);
        target = all || !s ? g_wqueued : s->last;
        while (g_wfinished < target)
                pthread_cond_wait(&g_wdone, &g_wlock);
        r = (CUresult)__atomic_exchange_n(&g_wfault, 0, __ATOMIC_RELAXED);
        pthread_mutex_unlock(&g_wlock);
        return r;
}

/* What a synchronous copy or memset waits for: all work (the legacy
 * default stream waits for every blocking stream). */
static CUresult fc_work_wait_all(void)
{
        return fc_work_wait(NULL, 1);
}

/* A stream's work; a default stream's is every stream's, as the legacy
 * default stream's is. */
static CUresult fc_work_wait_stream(CUstream h)
{
        struct fc_stream *s = fc_stream_of(h);

        return fc_work_wait(s, s == NULL);
}

/* Not driver functions: the fake kernel (see fakecuda_fill_kernel) and
 * what tests observe of the work queue.  fakecuda_hold_work(1) keeps the
 * worker from starting queued work until fakecuda_hold_work(0), so a test
 * can hold a launch in flight without timing; fakecuda_work_pending is the
 * number of launches, async copies and event records queued or running
 * (a spin kernel until the engine has run it), fakecuda_launched
 * the number of launches queued since the start. */
static const char fc_fill_kernel_obj = 'k';
CUfunction fakecuda_fill_kernel(void);
CUfunction fakecuda_fill_kernel(void)
{
        return (CUfunction)(uintptr_t)&fc_fill_kernel_obj;
}
/* The kernel with a duration: one parameter, uint32_t duration_us (at
 * most 10 s), run by the engine (fc_engine.h). */
static const char fc_spin_kernel_obj = 's';
CUfunction fakecuda_spin_kernel(void);
CUfunction fakecuda_spin_kernel(void)
{
        return (CUfunction)(uintptr_t)&fc_spin_kernel_obj;
}
/* The spin kernel under the name of one of NCCL's (cuFuncGetName): what a
 * hook must recognize as a rank's part of a collective. */
static const char fc_nccl_kernel_obj = 'n';
CUfunction fakecuda_nccl_kernel(void);
CUfunction fakecuda_nccl_kernel(void)
{
        return (CUfunction)(uintptr_t)&fc_nccl_kernel_obj;
}

/* As the driver's (CUDA 12.3 and later): the function's name, a string
 * that lives as long as the library. */
CUresult CUDAAPI cuFuncGetName(const char **name, CUfunction hfunc)
{
        if (!name || !hfunc)
                return CUDA_ERROR_INVALID_VALUE;
        if (hfunc == fakecuda_spin_kernel())
                *name = "fakecuda_spin";
        else if (hfunc == fakecuda_fill_kernel())
                *name = "fakecuda_fill";
        else if (hfunc == fakecuda_nccl_kernel())
                *name = "ncclDevKernel_AllReduce_Sum_f32_RING_LL";
        else
                return CUDA_ERROR_INVALID_HANDLE;
        return CUDA_SUCCESS;
}

void fakecuda_hold_work(int hold);
void fakecuda_hold_work(int hold)
{
        pthread_mutex_lock(&g_wlock);
        g_whold = hold != 0;
        pthread_cond_broadcast(&g_wcond);
        pthread_mutex_unlock(&g_wlock);
}

uint64_t fakecuda_work_pending(void);
uint64_t fakecuda_work_pending(void)
{
        uint64_t n;

        pthread_mutex_lock(&g_wlock);
        n = g_wqueued - g_wfinished;
        pthread_mutex_unlock(&g_wlock);
        return n;
}

uint64_t fakecuda_launched(void);
uint64_t fakecuda_launched(void)
{
        uint64_t n;

        pthread_mutex_lock(&g_wlock);
        n = g_wkernels;
        pthread_mutex_unlock(&g_wlock);
        return n;
}

/* Bytes of host-located memory (cuMemCreate HOST_NUMA) this process holds:
 * created or imported, until its last handle and mapping are gone. */
uint64_t fakecuda_host_bytes(void);
uint64_t fakecuda_host_bytes(void)
{
        return __atomic_load_n(&g_host_bytes, __ATOMIC_SEQ_CST);
}

/* Of that, the bytes mapped within [base, base + size) of this process's
 * addresses (what of a range is in host memory now). */
uint64_t fakecuda_host_bytes_in(CUdeviceptr base, size_t size);
uint64_t fakecuda_host_bytes_in(CUdeviceptr base, size_t size)
{
        uint64_t n = 0;

        pthread_mutex_lock(&g_lock);
        for (struct fc_map *m = g_maps; m; m = m->next) {
                uintptr_t lo = m->addr > base ? m->addr : base;
                uintptr_t hi = m->addr + m->size < base + size ? m->addr + m->size : base + size;
                if (lo < hi && g_handles[m->hidx].host)
                        n += hi - lo;
        }
        pthread_mutex_unlock(&g_lock);
        return n;
}

/* The longest delay_us a fake kernel may ask for. */
#define FC_MAX_DELAY_US 10000000u

/* Reads a launch of a fake kernel into *k. */
static CUresult fc_kernel_read(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                               unsigned bz, void **kernelParams, void **extra, struct fc_kernel *k)
{
        memset(k, 0, sizeof(*k));
        k->spin = f == fakecuda_spin_kernel() || f == fakecuda_nccl_kernel();
        if (!k->spin && f != fakecuda_fill_kernel())
                return CUDA_ERROR_INVALID_HANDLE;
        if (!gx || !gy || !gz || !bx || !by || !bz || !kernelParams || extra)
                return CUDA_ERROR_INVALID_VALUE;
        for (int i = 0; i < (k->spin ? 1 : 4); i++)
                if (!kernelParams[i])
                        return CUDA_ERROR_INVALID_VALUE;
        if (k->spin) {
                k->us = *(uint32_t *)kernelParams[0];
                return k->us > FC_ENG_MAX_US ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
        }
        k->dst = (uintptr_t) * (CUdeviceptr *)kernelParams[0];
        k->bytes = *(size_t *)kernelParams[1];
        k->value = *(uint32_t *)kernelParams[2];
        k->us = *(uint32_t *)kernelParams[3];
        if ((k->bytes && !k->dst) || k->dst % 4 || k->bytes % 4 || k->bytes > UINTPTR_MAX - k->dst ||
            k->us > FC_MAX_DELAY_US)
                return CUDA_ERROR_INVALID_VALUE;
        return CUDA_SUCCESS;
}

/* Queues kernel k on stream s (of device dev). */
static CUresult fc_kernel_queue(const struct fc_kernel *k, int dev, struct fc_stream *s)
{
        struct fc_work *w = calloc(1, sizeof(*w));

        if (!w)
                return CUDA_ERROR_OUT_OF_MEMORY;
        w->s = s;
        w->dev = dev;
        if (k->spin) {
                w->kind = FC_W_SPIN;
                w->spin_us = k->us;
                w->ctx = (uint64_t)(uintptr_t)(s ? s->ctx : fc_current());
        } else {
                w->dst = k->dst;
                w->bytes = k->bytes;
                w->value = k->value;
                w->delay_us = k->us;
        }
        return fc_work_queue(w);
}

/* pre: g_lock held.  Whether s is capturing; if so k is recorded in its
 * graph instead of running (*r: CUDA_ERROR_OUT_OF_MEMORY if it could not
 * be). */
static int fc_capture_add(struct fc_stream *s, const struct fc_kernel *k, CUresult *r)
{
        if (!s || s->capture == CU_STREAM_CAPTURE_STATUS_NONE)
                return 0;
        if (s->capture == CU_STREAM_CAPTURE_STATUS_ACTIVE && fc_graph_add(s->graph, k) < 0)
                *r = CUDA_ERROR_OUT_OF_MEMORY;
        return 1;
}

static CUresult fc_launch(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                          CUstream hStream, void **kernelParams, void **extra)
{
        struct fc_stream *s = fc_stream_of(hStream);
        struct fc_kernel k;
        int dev, captured = 0;
        CUresult r = fc_cur_dev(&dev);

        if (r != CUDA_SUCCESS)
                return r;
        if ((r = fc_kernel_read(f, gx, gy, gz, bx, by, bz, kernelParams, extra, &k)) != CUDA_SUCCESS)
                return r;
        if ((r = fc_stream_check(hStream)) != CUDA_SUCCESS)
                return r;
        pthread_mutex_lock(&g_lock);
        r = fc_reach_locked(dev, k.dst, k.bytes);
        if (r == CUDA_SUCCESS)
                captured = fc_capture_add(s, &k, &r);
        pthread_mutex_unlock(&g_lock);
        if (r != CUDA_SUCCESS || captured)
                return r;
        return fc_kernel_queue(&k, dev, s);
}

CUresult CUDAAPI cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,
                                unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,
                                unsigned int sharedMemBytes, CUstream hStream, void **kernelParams, void **extra)
{
        (void)sharedMemBytes;
        return fc_launch(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, hStream, kernelParams,
                         extra);
}

CUresult CUDAAPI cuLaunchKernel_ptsz(CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,
                                     unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,
                                     unsigned int sharedMemBytes, CUstream hStream, void **kernelParams, void **extra);
CUresult CUDAAPI cuLaunchKernel_ptsz(CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,
                                     unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,
                                     unsigned int sharedMemBytes, CUstream hStream, void **kernelParams, void **extra)
{
        (void)sharedMemBytes;
        return fc_launch(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, hStream, kernelParams,
                         extra);
}

/* ---- events: a record completes after the work queued before it on the
 * process's worker (fc_work_event); its time is the model's
 * (fc_engine.h), so cuEventElapsedTime measures GPU time as modelled --- */

static CUresult fc_event_check(CUevent h)
{
        int ok;

        FC_INIT_CHECK();
        pthread_mutex_lock(&g_lock);
        ok = fc_obj_has(h) && ((struct fc_event *)h)->magic == FC_EVENT_MAGIC;
        pthread_mutex_unlock(&g_lock);
        return ok ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

CUresult CUDAAPI cuEventCreate(CUevent *phEvent, unsigned int Flags)
{
        struct fc_event *e;
        int dev, rc;
        CUresult r = fc_cur_dev(&dev);

        if (r != CUDA_SUCCESS)
                return r;
        if (!phEvent || (Flags & ~(unsigned)(CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS)))
                return CUDA_ERROR_INVALID_VALUE;
        e = calloc(1, sizeof(*e));
        if (!e)
                return CUDA_ERROR_OUT_OF_MEMORY;
        e->magic = FC_EVENT_MAGIC;
        e->ctx = fc_current();
        e->flags = Flags;
        pthread_mutex_lock(&g_lock);
        rc = fc_obj_add(e);
        pthread_mutex_unlock(&g_lock);
        if (rc < 0) {
                free(e);
                return CUDA_ERROR_OUT_OF_MEMORY;
        }
        *phEvent = (CUevent)e;
        return CUDA_SUCCESS;
}

/* Calls of cuEventRecord and cuEventQuery with a valid event, in this
 * process (whoever made them: the application or the hook): a test sees
 * from them what work a hook does per launch. */
static uint64_t g_ev_records, g_ev_queries; /* atomic */

void fakecuda_event_calls(uint64_t *records, uint64_t *queries);
void fakecuda_event_calls(uint64_t *records, uint64_t *queries)
{
        *records = __atomic_load_n(&g_ev_records, __ATOMIC_RELAXED);
        *queries = __atomic_load_n(&g_ev_queries, __ATOMIC_RELAXED);
}

CUresult CUDAAPI cuEventRecord(CUevent hEvent, CUstream hStream)
{
        struct fc_event *e = (struct fc_event *)hEvent;
        struct fc_stream *s = fc_stream_of(hStream);
        struct fc_work *w;
        uint64_t target;
        CUresult r = fc_event_check(hEvent);

        if (r == CUDA_SUCCESS)
                r = fc_stream_check(hStream);
        if (r != CUDA_SUCCESS)
                return r;
        __atomic_add_fetch(&g_ev_records, 1, __ATOMIC_RELAXED);
        pthread_mutex_lock(&g_wlock);
        target = s ? s->last : g_wqueued;
        e->recorded = 1;
        if (g_wfinished >= target) {
                /* Nothing before it: complete now. */
                e->widx = 0;
                e->t_ns = fc_engine_now_ns();
                pthread_mutex_unlock(&g_wlock);
                return CUDA_SUCCESS;
        }
        pthread_mutex_unlock(&g_wlock);
        if (!(w = calloc(1, sizeof(*w))))
                return CUDA_ERROR_OUT_OF_MEMORY;
        w->kind = FC_W_EVENT;
        w->s = s;
        w->ev = e;
        w->rec_ns = fc_engine_now_ns();
        return fc_work_queue(w);
}

CUresult CUDAAPI cuEventRecord_ptsz(CUevent hEvent, CUstream hStream);
CUresult CUDAAPI cuEventRecord_ptsz(CUevent hEvent, CUstream hStream)
{
        return cuEventRecord(hEvent, hStream);
}

/* pre: g_wlock held. */
static int fc_event_done(const struct fc_event *e)
{
        return g_wfinished >= e->widx;
}

CUresult CUDAAPI cuEventQuery(CUevent hEvent)
{
        CUresult r = fc_event_check(hEvent);

        if (r == CUDA_SUCCESS)
                __atomic_add_fetch(&g_ev_queries, 1, __ATOMIC_RELAXED);
        if (r == CUDA_SUCCESS)
                r = fc_unsafe_call();
        if (r != CUDA_SUCCESS)
                return r;
        pthread_mutex_lock(&g_wlock);
        r = fc_event_done((struct fc_event *)hEvent) ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
        pthread_mutex_unlock(&g_wlock);
        return r;
}

/* Waits for the record; then hands out a kernel's fault once, as a
 * stream's synchronize does. */
CUresult CUDAAPI cuEventSynchronize(CUevent hEvent)
{
        CUresult r = fc_event_check(hEvent);

        if (r == CUDA_SUCCESS)
                r = fc_unsafe_call();
        if (r != CUDA_SUCCESS)
                return r;
        pthread_mutex_lock(&g_wlock);
        while (!fc_event_done((struct fc_event *)hEvent))
                pthread_cond_wait(&g_wdone, &g_wlock);
        r = (CUresult)__atomic_exchange_n(&g_wfault, 0, __ATOMIC_RELAXED);
        pthread_mutex_unlock(&g_wlock);
        return r;
}

/* Model time between two completed records, in ms. */
CUresult CUDAAPI cuEventElapsedTime_v2(float *pMilliseconds, CUevent hStart, CUevent hEnd)
{
        struct fc_event *a = (struct fc_event *)hStart, *b = (struct fc_event *)hEnd;
        CUresult r = fc_event_check(hStart);

        if (r == CUDA_SUCCESS)
                r = fc_event_check(hEnd);
        if (r != CUDA_SUCCESS)
                return r;
        if (!pMilliseconds)
                return CUDA_ERROR_INVALID_VALUE;
        pthread_mutex_lock(&g_wlock);
        if (!a->recorded || !b->recorded || ((a->flags | b->flags) & CU_EVENT_DISABLE_TIMING))
                r = CUDA_ERROR_INVALID_HANDLE;
        else if (!fc_event_done(a) || !fc_event_done(b))
                r = CUDA_ERROR_NOT_READY;
        else
                *pMilliseconds = (float)(((double)b->t_ns - (double)a->t_ns) / 1e6);
        pthread_mutex_unlock(&g_wlock);
        return r;
}

#undef cuEventElapsedTime
CUresult CUDAAPI cuEventElapsedTime(float *pMilliseconds, CUevent hStart, CUevent hEnd);
CUresult CUDAAPI cuEventElapsedTime(float *pMilliseconds, CUevent hStart, CUevent hEnd)
{
        return cuEventElapsedTime_v2(pMilliseconds, hStart, hEnd);
}

CUresult CUDAAPI cuEventDestroy_v2(CUevent hEvent)
{
        struct fc_event *e = (struct fc_event *)hEvent;
        CUresult r = fc_event_check(hEvent);

        if (r != CUDA_SUCCESS)
                return r;
        /* A pending record refers to it: done first (the real driver
         * returns at once and frees the event after). */
        pthread_mutex_lock(&g_wlock);
        while (e->pending)
                pthread_cond_wait(&g_wdone, &g_wlock);
        pthread_mutex_unlock(&g_wlock);
        pthread_mutex_lock(&g_lock);
        if (!fc_obj_has(e) || e->magic != FC_EVENT_MAGIC)
                r = CUDA_ERROR_INVALID_HANDLE;
        else
                fc_obj_del(e);
        pthread_mutex_unlock(&g_lock);
        if (r == CUDA_SUCCESS)
                free(e);
        return r;
}

/* Whether a stream's work is done (CUDA_ERROR_NOT_READY while any of it
 * is queued or running; a default stream's: every stream's). */
CUresult CUDAAPI cuStreamQuery(CUstream hStream)
{
        struct fc_stream *s = fc_stream_of(hStream);
        CUresult r = fc_stream_check(hStream);

        if (r != CUDA_SUCCESS)
                return r;
        pthread_mutex_lock(&g_wlock);
        r = g_wfinished >= (s ? s->last : g_wqueued) ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
        pthread_mutex_unlock(&g_wlock);
        return r;
}

CUresult CUDAAPI cuStreamQuery_ptsz(CUstream hStream);
CUresult CUDAAPI cuStreamQuery_ptsz(CUstream hStream)
{
        return cuStreamQuery(hStream);
}

/* ---- graphs (fc_graph.h) --------------------------------------------- */

/* pre: g_lock held.  h as a graph (exec 0) or an executable graph. */
static struct fc_graph *fc_graph_of(const void *h, int exec)
{
        struct fc_graph *g = (struct fc_graph *)h;

        return fc_obj_has(g) && g->magic == FC_GRAPH_MAGIC && g->exec == exec ? g : NULL;
}

CUresult CUDAAPI cuGraphInstantiateWithFlags(CUgraphExec *phGraphExec, CUgraph hGraph, unsigned long long flags)
{
        struct fc_graph *g, *x = NULL;
        CUresult r = CUDA_SUCCESS;

        (void)flags;
        FC_INIT_CHECK();
        if (!phGraphExec)
                return CUDA_ERROR_INVALID_VALUE;
        pthread_mutex_lock(&g_lock);
        if (!(g = fc_graph_of(hGraph, 0)))
                r = CUDA_ERROR_INVALID_HANDLE;
        else if (!(x = fc_graph_instantiate(g)) || fc_obj_add(x) < 0)
                r = CUDA_ERROR_OUT_OF_MEMORY;
        pthread_mutex_unlock(&g_lock);
        if (r != CUDA_SUCCESS) {
                fc_graph_free(x);
                return r;
        }
        *phGraphExec = (CUgraphExec)x;
        return CUDA_SUCCESS;
}

/* Queues the graph's kernels on the stream, in order (into its graph if
 * the stream is capturing). */
CUresult CUDAAPI cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream)
{
        struct fc_stream *s = fc_stream_of(hStream);
        struct fc_graph *x;
        int dev, captured = 0;
        CUresult r = fc_cur_dev(&dev);

        if (r == CUDA_SUCCESS)
                r = fc_stream_check(hStream);
        if (r != CUDA_SUCCESS)
                return r;
        pthread_mutex_lock(&g_lock);
        if (!(x = fc_graph_of(hGraphExec, 1)))
                r = CUDA_ERROR_INVALID_HANDLE;
        for (size_t i = 0; x && i < x->n && r == CUDA_SUCCESS; i++)
                captured = fc_capture_add(s, &x->nodes[i], &r);
        pthread_mutex_unlock(&g_lock);
        for (size_t i = 0; x && !captured && i < x->n && r == CUDA_SUCCESS; i++)
                r = fc_kernel_queue(&x->nodes[i], dev, s);
        return r;
}

CUresult CUDAAPI cuGraphLaunch_ptsz(CUgraphExec hGraphExec, CUstream hStream);
CUresult CUDAAPI cuGraphLaunch_ptsz(CUgraphExec hGraphExec, CUstream hStream)
{
        return cuGraphLaunch(hGraphExec, hStream);
}

static CUresult fc_graph_destroy(const void *h, int exec)
{
        struct fc_graph *g;

        FC_INIT_CHECK();
        pthread_mutex_lock(&g_lock);
        if ((g = fc_graph_of(h, exec)))
                fc_obj_del(g);
        pthread_mutex_unlock(&g_lock);
        if (!g)
                return CUDA_ERROR_INVALID_HANDLE;
        fc_graph_free(g);
        return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphDestroy(CUgraph hGraph)
{
        return fc_graph_destroy(hGraph, 0);
}
CUresult CUDAAPI cuGraphExecDestroy(CUgraphExec hGraphExec)
{
        return fc_graph_destroy(hGraphExec, 1);
}

/* ---- copies and sets (host memory underneath) ----------------------- */

/* A copy or memset issued from the current context touches [ptr, ptr+n):
 * where that is VMM memory the context's device must have been given
 * access (cuMemSetAccess), or a GPU faults.  cuMemAlloc memory: any. */
static CUresult fc_reach(CUdeviceptr ptr, size_t n)
{
        CUresult r;
        int dev = 0;

        if (fc_cur_dev(&dev) != CUDA_SUCCESS || n == 0)
                return CUDA_SUCCESS;
        pthread_mutex_lock(&g_lock);
        r = fc_reach_locked(dev, ptr, n);
        pthread_mutex_unlock(&g_lock);
        return r;
}

CUresult CUDAAPI cuDeviceCanAccessPeer(int *canAccessPeer, CUdevice dev, CUdevice peerDev)
{
        CUresult r = fc_dev_check(dev);

        if (r == CUDA_SUCCESS)
                r = fc_dev_check(peerDev);
        if (r != CUDA_SUCCESS)
                return r;
        if (!canAccessPeer)
                return CUDA_ERROR_INVALID_VALUE;
        *canAccessPeer = dev != peerDev;
        return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemcpyHtoD_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount)
{
        CUresult r;

        FC_INIT_CHECK();
        if ((r = fc_work_wait_all()) != CUDA_SUCCESS)
                return r;
        if (!dstDevice || (!srcHost && ByteCount))
                return CUDA_ERROR_INVALID_VALUE;
        if (fc_reach(dstDevice, ByteCount) != CUDA_SUCCESS)
                return CUDA_ERROR_ILLEGAL_ADDRESS;
        memcpy((void *)dstDevice, srcHost, ByteCount);
        return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemcpyDtoH_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount)
{
        CUresult r;

        FC_INIT_CHECK();
        if ((r = fc_work_wait_all()) != CUDA_SUCCESS)
                return r;
        if (!srcDevice || (!dstHost && ByteCount))
                return CUDA_ERROR_INVALID_VALUE;
        if (fc_reach(srcDevice, ByteCount) != CUDA_SUCCESS)
                return CUDA_ERROR_ILLEGAL_ADDRESS;
        memcpy(dstHost, (const void *)srcDevice, ByteCount);
        return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemcpyDtoD_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount)
{
        CUresult r;

        FC_INIT_CHECK();
        if ((r = fc_work_wait_all()) != CUDA_SUCCESS)
                return r;
        if (!dstDevice || !srcDevice)
                return CUDA_ERROR_INVALID_VALUE;
        if (fc_reach(dstDevice, ByteCount) != CUDA_SUCCESS || fc_reach(srcDevice, ByteCount) != CUDA_SUCCESS)
                return CUDA_ERROR_ILLEGAL_ADDRESS;
        memmove((void *)dstDevice, (const void *)srcDevice, ByteCount);
        return CUDA_SUCCESS;
}

/* fakecuda_fail_copies: the calls to fail (bit 0 the next), and whether
 * when they run (atomic). */
static uint64_t g_fail_copies;
static int g_fail_copies_run;

void fakecuda_fail_copies(uint64_t mask, int at_run);
void fakecuda_fail_copies(uint64_t mask, int at_run)
{
        __atomic_store_n(&g_fail_copies_run, at_run != 0, __ATOMIC_SEQ_CST);
        __atomic_store_n(&g_fail_copies, mask, __ATOMIC_SEQ_CST);
}

/* Queued on the stream, in order with its kernels; copies when it runs. */
CUresult CUDAAPI cuMemcpyDtoDAsync_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream)
{
        struct fc_stream *s = fc_stream_of(hStream);
        struct fc_work *w;
        int dev, capturing = 0, fail_run = 0;
        uint64_t fail;
        CUresult r = fc_cur_dev(&dev);

        if (r != CUDA_SUCCESS || (r = fc_stream_check(hStream)) != CUDA_SUCCESS)
                return r;
        do
                fail = __atomic_load_n(&g_fail_copies, __ATOMIC_SEQ_CST);
        while (fail &&
               !__atomic_compare_exchange_n(&g_fail_copies, &fail, fail >> 1, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST));
        if (fail & 1) {
                if (!__atomic_load_n(&g_fail_copies_run, __ATOMIC_SEQ_CST))
                        return CUDA_ERROR_OUT_OF_MEMORY;
                fail_run = 1;
        }
        if (!dstDevice || !srcDevice || ByteCount > UINTPTR_MAX - dstDevice || ByteCount > UINTPTR_MAX - srcDevice)
                return CUDA_ERROR_INVALID_VALUE;
        pthread_mutex_lock(&g_lock);
        r = fc_reach_locked(dev, dstDevice, ByteCount);
        if (r == CUDA_SUCCESS)
                r = fc_reach_locked(dev, srcDevice, ByteCount);
        if (s)
                capturing = s->capture != CU_STREAM_CAPTURE_STATUS_NONE;
        pthread_mutex_unlock(&g_lock);
        if (r != CUDA_SUCCESS || capturing || ByteCount == 0)
                return r; /* into a capture: recorded, not run */
        w = calloc(1, sizeof(*w));
        if (!w)
                return CUDA_ERROR_OUT_OF_MEMORY;
        w->s = s;
        w->dev = dev;
        w->dst = (uintptr_t)dstDevice;
        w->src = (uintptr_t)srcDevice;
        w->bytes = ByteCount;
        w->fail = fail_run;
        return fc_work_queue(w);
}

CUresult CUDAAPI cuMemsetD8_v2(CUdeviceptr dstDevice, unsigned char uc, size_t N)
{
        CUresult r;

        FC_INIT_CHECK();
        if ((r = fc_work_wait_all()) != CUDA_SUCCESS)
                return r;
        if (!dstDevice)
                return CUDA_ERROR_INVALID_VALUE;
        memset((void *)dstDevice, uc, N);
        return CUDA_SUCCESS;
}

/* Zeroes [ptr, ptr+n) if it is one whole cuMemMap mapping, by punching the
 * memfd's pages out: what the agent's scrub of a chunk does, without
 * making hundreds of MiB of test memory resident per scrub (a GPU memset
 * costs nothing comparable).  Returns 1 if done, 0 if not such a range. */
static int fc_zero_mapped(CUdeviceptr ptr, size_t n)
{
        int done = 0;

        pthread_mutex_lock(&g_lock);
        for (struct fc_map *m = g_maps; m; m = m->next)
                if (m->addr == ptr && m->size == n) {
                        done = fallocate(g_handles[m->hidx].fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0,
                                         (off_t)n) == 0;
                        break;
                }
        pthread_mutex_unlock(&g_lock);
        return done;
}

CUresult CUDAAPI cuMemsetD32_v2(CUdeviceptr dstDevice, unsigned int ui, size_t N)
{
        uint32_t *p = (uint32_t *)dstDevice;
        CUresult r;

        FC_INIT_CHECK();
        if ((r = fc_work_wait_all()) != CUDA_SUCCESS)
                return r;
        if (!dstDevice || (dstDevice & 3))
                return CUDA_ERROR_INVALID_VALUE;
        if (ui == 0 && fc_zero_mapped(dstDevice, N * sizeof(*p)))
                return CUDA_SUCCESS;
        for (size_t i = 0; i < N; i++)
                p[i] = ui;
        return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemsetD32Async(CUdeviceptr dstDevice, unsigned int ui, size_t N, CUstream hStream)
{
        CUresult r = fc_stream_check(hStream);

        /* In stream order: after the stream's kernels (cuMemsetD32_v2
         * waits for every stream's). */
        return r != CUDA_SUCCESS ? r : cuMemsetD32_v2(dstDevice, ui, N);
}

/* Legacy 32-bit-pointer entry points: no fake address fits in 32 bits. */
CUresult CUDAAPI cuMemAlloc(gs_cudeviceptr_v1 *dptr, unsigned int bytesize)
{
        (void)dptr, (void)bytesize;
        return CUDA_ERROR_NOT_SUPPORTED;
}
CUresult CUDAAPI cuMemAllocPitch(gs_cudeviceptr_v1 *dptr, unsigned int *pPitch, unsigned int WidthInBytes,
                                 unsigned int Height, unsigned int ElementSizeBytes)
{
        (void)dptr, (void)pPitch, (void)WidthInBytes, (void)Height, (void)ElementSizeBytes;
        return CUDA_ERROR_NOT_SUPPORTED;
}
CUresult CUDAAPI cuMemFree(gs_cudeviceptr_v1 dptr)
{
        (void)dptr;
        return CUDA_ERROR_NOT_SUPPORTED;
}
CUresult CUDAAPI cuMemGetAddressRange(gs_cudeviceptr_v1 *pbase, unsigned int *psize, gs_cudeviceptr_v1 dptr)
{
        (void)pbase, (void)psize, (void)dptr;
        return CUDA_ERROR_NOT_SUPPORTED;
}
CUresult CUDAAPI cuMemcpyHtoD(gs_cudeviceptr_v1 dstDevice, const void *srcHost, unsigned int ByteCount)
{
        (void)dstDevice, (void)srcHost, (void)ByteCount;
        return CUDA_ERROR_NOT_SUPPORTED;
}
CUresult CUDAAPI cuMemcpyDtoH(void *dstHost, gs_cudeviceptr_v1 srcDevice, unsigned int ByteCount)
{
        (void)dstHost, (void)srcDevice, (void)ByteCount;
        return CUDA_ERROR_NOT_SUPPORTED;
}
CUresult CUDAAPI cuMemcpyDtoD(gs_cudeviceptr_v1 dstDevice, gs_cudeviceptr_v1 srcDevice, unsigned int ByteCount)
{
        (void)dstDevice, (void)srcDevice, (void)ByteCount;
        return CUDA_ERROR_NOT_SUPPORTED;
}
CUresult CUDAAPI cuMemsetD8(gs_cudeviceptr_v1 dstDevice, unsigned char uc, unsigned int N)
{
        (void)dstDevice, (void)uc, (void)N;
        return CUDA_ERROR_NOT_SUPPORTED;
}
CUresult CUDAAPI cuMemsetD32(gs_cudeviceptr_v1 dstDevice, unsigned int ui, unsigned int N)
{
        (void)dstDevice, (void)ui, (void)N;
        return CUDA_ERROR_NOT_SUPPORTED;
}

/* ---- legacy IPC: not supported -------------------------------------- */

CUresult CUDAAPI cuIpcGetMemHandle(CUipcMemHandle *pHandle, CUdeviceptr dptr)
{
        (void)pHandle, (void)dptr;
        FC_INIT_CHECK();
        return CUDA_ERROR_NOT_SUPPORTED;
}

CUresult CUDAAPI cuIpcOpenMemHandle_v2(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int Flags)
{
        (void)pdptr, (void)handle, (void)Flags;
        FC_INIT_CHECK();
        return CUDA_ERROR_NOT_SUPPORTED;
}

CUresult CUDAAPI cuIpcOpenMemHandle(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int Flags)
{
        return cuIpcOpenMemHandle_v2(pdptr, handle, Flags);
}

CUresult CUDAAPI cuIpcCloseMemHandle(CUdeviceptr dptr)
{
        (void)dptr;
        FC_INIT_CHECK();
        return CUDA_ERROR_NOT_SUPPORTED;
}

/* ---- VMM ------------------------------------------------------------ */

/* Device memory of a device, or host memory of NUMA node 0
 * (CU_MEM_LOCATION_TYPE_HOST_NUMA id 0: what the H100's driver 580 accepts,
 * exportable as a POSIX fd and mappable at a device address).  The real
 * driver refuses CU_MEM_LOCATION_TYPE_HOST for cuMemCreate; which code it
 * gives was not recorded, so the fake says CUDA_ERROR_INVALID_VALUE, as it
 * does for a HOST_NUMA node other than 0 (the fake host has one node) and
 * for HOST_NUMA_CURRENT (not measured).  *ret_host: 1 for host memory. */
static CUresult fc_prop_check(const CUmemAllocationProp *prop, int *ret_host)
{
        if (!prop || prop->type != CU_MEM_ALLOCATION_TYPE_PINNED)
                return CUDA_ERROR_INVALID_VALUE;
        if (prop->location.type == CU_MEM_LOCATION_TYPE_HOST_NUMA) {
                if (prop->location.id != 0)
                        return CUDA_ERROR_INVALID_VALUE;
                *ret_host = 1;
        } else if (prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE) {
                if (prop->location.id < 0 || (unsigned)prop->location.id >= g_sh->ndev)
                        return CUDA_ERROR_INVALID_DEVICE;
                *ret_host = 0;
        } else {
                return CUDA_ERROR_INVALID_VALUE;
        }
        if (prop->requestedHandleTypes & ~(uint64_t)CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
                return CUDA_ERROR_NOT_SUPPORTED;
        return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemGetAllocationGranularity(size_t *granularity, const CUmemAllocationProp *prop,
                                               CUmemAllocationGranularity_flags option)
{
        CUresult r;
        int host;

        FC_INIT_CHECK();
        if (!granularity ||
            (option != CU_MEM_ALLOC_GRANULARITY_MINIMUM && option != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED))
                return CUDA_ERROR_INVALID_VALUE;
        r = fc_prop_check(prop, &host);
        if (r != CUDA_SUCCESS)
                return r;
        *granularity = FC_GRAN;
        return CUDA_SUCCESS;
}

/* pre: g_lock held.  Handle values carry a generation so a stale one fails. */
static struct fc_handle *fc_handle_get(CUmemGenericAllocationHandle h, int *ret_idx)
{
        uint64_t idx = (h & 0xffffffffu);
        struct fc_handle *e;

        if (idx == 0 || idx > FC_MAX_HANDLES)
                return NULL;
        e = &g_handles[idx - 1];
        if (!e->used || e->gen != (uint32_t)(h >> 32) || e->hrefs <= 0)
                return NULL;
        if (ret_idx)
                *ret_idx = (int)idx - 1;
        return e;
}

/* pre: g_lock held. */
static int fc_handle_new(void)
{
        for (int i = 0; i < FC_MAX_HANDLES; i++)
                if (!g_handles[i].used) {
                        uint32_t gen = g_handles[i].gen + 1;
                        memset(&g_handles[i], 0, sizeof(g_handles[i]));
                        g_handles[i].used = 1;
                        g_handles[i].gen = gen;
                        g_handles[i].fd = -1;
                        g_handles[i].hrefs = 1;
                        return i;
                }
        return -1;
}

static CUmemGenericAllocationHandle fc_handle_value(int idx)
{
        return ((uint64_t)g_handles[idx].gen << 32) | (uint64_t)(idx + 1);
}

/* pre: g_lock held.  Drops a handle reference (map = 0) or a mapping. */
static void fc_handle_unref(int idx, int map)
{
        struct fc_handle *e = &g_handles[idx];

        if (map)
                e->maps--;
        else
                e->hrefs--;
        if (e->hrefs > 0 || e->maps > 0)
                return;
        if (e->fd >= 0) {
                struct stat st;
                uint64_t ino = fstat(e->fd, &st) == 0 ? (uint64_t)st.st_ino : 0;
                close(e->fd);
                fc_unexport(e, ino);
        }
        fc_uncharge(&e->ch);
        if (e->host)
                __atomic_sub_fetch(&g_host_bytes, e->size, __ATOMIC_SEQ_CST);
        e->fd = -1;
        e->used = 0;
}

CUresult CUDAAPI cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop,
                             unsigned long long flags)
{
        char name[32];
        int idx, fd = -1, host = 0;
        struct fc_charge ch = { 0 };
        CUresult r;

        FC_INIT_CHECK();
        if (!handle || flags != 0 || size == 0 || size % FC_GRAN || size > (1ull << 46))
                return CUDA_ERROR_INVALID_VALUE;
        r = fc_prop_check(prop, &host);
        if (r != CUDA_SUCCESS)
                return r;
        pthread_mutex_lock(&g_lock);
        /* Host memory takes none of the device's. */
        if (!host && (r = fc_charge(prop->location.id, size, &ch)) != CUDA_SUCCESS)
                goto out;
        if (host)
                snprintf(name, sizeof(name), "gshare-fake-host%d", prop->location.id);
        else
                snprintf(name, sizeof(name), "gshare-fake-dev%d", prop->location.id);
        fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
        if (fd < 0 || ftruncate(fd, (off_t)size) < 0 ||
            fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0) {
                r = CUDA_ERROR_OUT_OF_MEMORY;
                goto out;
        }
        idx = fc_handle_new();
        if (idx < 0) {
                r = CUDA_ERROR_OUT_OF_MEMORY;
                goto out;
        }
        g_handles[idx].fd = fd;
        g_handles[idx].size = size;
        g_handles[idx].dev = prop->location.id;
        g_handles[idx].host = host;
        g_handles[idx].htypes = (uint64_t)prop->requestedHandleTypes;
        g_handles[idx].ch = ch;
        if (host)
                __atomic_add_fetch(&g_host_bytes, size, __ATOMIC_SEQ_CST);
        *handle = fc_handle_value(idx);
        fd = -1;
        ch.bytes = 0;
out:
        fc_uncharge(&ch);
        if (fd >= 0)
                close(fd);
        pthread_mutex_unlock(&g_lock);
        return r;
}

CUresult CUDAAPI cuMemRelease(CUmemGenericAllocationHandle handle)
{
        int idx;
        CUresult r = CUDA_SUCCESS;

        FC_INIT_CHECK();
        pthread_mutex_lock(&g_lock);
        if (!fc_handle_get(handle, &idx))
                r = CUDA_ERROR_INVALID_VALUE;
        else
                fc_handle_unref(idx, 0);
        pthread_mutex_unlock(&g_lock);
        return r;
}

CUresult CUDAAPI cuMemExportToShareableHandle(void *shareableHandle, CUmemGenericAllocationHandle handle,
                                              CUmemAllocationHandleType handleType, unsigned long long flags)
{
        struct fc_handle *e;
        struct stat st;
        CUresult r = CUDA_SUCCESS;
        int fd;

        FC_INIT_CHECK();
        if (!shareableHandle || flags != 0)
                return CUDA_ERROR_INVALID_VALUE;
        if (handleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
                return CUDA_ERROR_NOT_SUPPORTED;
        pthread_mutex_lock(&g_lock);
        e = fc_handle_get(handle, NULL);
        if (!e || e->imported) {
                /* An imported handle cannot be exported again: the real
                 * driver (580, H100) says CUDA_ERROR_INVALID_VALUE, also once
                 * the exporter has exited (the memory stays usable here). */
                r = CUDA_ERROR_INVALID_VALUE;
        } else if (!(e->htypes & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)) {
                r = CUDA_ERROR_NOT_PERMITTED;
        } else {
                fd = fcntl(e->fd, F_DUPFD_CLOEXEC, 0);
                if (fd < 0) {
                        r = CUDA_ERROR_OPERATING_SYSTEM;
                } else {
                        *(int *)shareableHandle = fd;
                        /* Others may hold it from now on, also after we die
                         * (device memory only: host memory is not counted). */
                        if (!e->exported && !e->host && fstat(e->fd, &st) == 0)
                                e->ex = fc_ex_enter(&e->ch, (uint64_t)st.st_ino);
                        e->exported = 1;
                }
        }
        pthread_mutex_unlock(&g_lock);
        return r;
}

/* The device of an exported fd, from the memfd's name; *ret_host = 1 and
 * the NUMA node for host memory. */
static int fc_fd_device(int fd, int *ret_host)
{
        char link[64], target[128];
        ssize_t n;
        int dev;

        snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
        n = readlink(link, target, sizeof(target) - 1);
        if (n <= 0)
                return -1;
        target[n] = '\0';
        *ret_host = 0;
        if (sscanf(target, "/memfd:gshare-fake-host%d", &dev) == 1 && dev == 0) {
                *ret_host = 1;
                return dev;
        }
        if (sscanf(target, "/memfd:gshare-fake-dev%d", &dev) != 1 || dev < 0 || (unsigned)dev >= g_sh->ndev)
                return -1;
        return dev;
}

CUresult CUDAAPI cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *handle, void *osHandle,
                                                CUmemAllocationHandleType shHandleType)
{
        int fd = (int)(intptr_t)osHandle, dev, idx, nfd = -1, host = 0;
        struct stat st;
        CUresult r = CUDA_SUCCESS;

        FC_INIT_CHECK();
        if (!handle)
                return CUDA_ERROR_INVALID_VALUE;
        if (shHandleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
                return CUDA_ERROR_NOT_SUPPORTED;
        if (fd < 0 || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size <= 0 || st.st_size % FC_GRAN)
                return CUDA_ERROR_INVALID_VALUE;
        dev = fc_fd_device(fd, &host);
        if (dev < 0)
                return CUDA_ERROR_INVALID_VALUE;
        nfd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
        if (nfd < 0)
                return CUDA_ERROR_OPERATING_SYSTEM;
        pthread_mutex_lock(&g_lock);
        idx = fc_handle_new();
        if (idx < 0) {
                r = CUDA_ERROR_OUT_OF_MEMORY;
                close(nfd);
        } else {
                g_handles[idx].fd = nfd;
                g_handles[idx].size = (size_t)st.st_size;
                g_handles[idx].dev = dev;
                g_handles[idx].host = host;
                g_handles[idx].htypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
                g_handles[idx].imported = 1;
                if (host)
                        __atomic_add_fetch(&g_host_bytes, (uint64_t)st.st_size, __ATOMIC_SEQ_CST);
                *handle = fc_handle_value(idx);
        }
        pthread_mutex_unlock(&g_lock);
        return r;
}

CUresult CUDAAPI cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr,
                                     unsigned long long flags)
{
        struct fc_resv *v;
        uintptr_t base;
        void *p;
        size_t span;

        (void)addr; /* a hint only */
        FC_INIT_CHECK();
        if (!ptr || size == 0 || size % FC_GRAN || flags != 0 || size > (1ull << 46))
                return CUDA_ERROR_INVALID_VALUE;
        if (alignment == 0)
                alignment = FC_GRAN;
        if (alignment & (alignment - 1) || alignment > (1ull << 40))
                return CUDA_ERROR_INVALID_VALUE;
        span = size + alignment;
        p = mmap(NULL, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (p == MAP_FAILED)
                return CUDA_ERROR_OUT_OF_MEMORY;
        base = ((uintptr_t)p + alignment - 1) & ~(uintptr_t)(alignment - 1);
        if (base > (uintptr_t)p)
                munmap(p, base - (uintptr_t)p);
        if ((uintptr_t)p + span > base + size)
                munmap((void *)(base + size), (uintptr_t)p + span - (base + size));
        v = calloc(1, sizeof(*v));
        if (!v) {
                munmap((void *)base, size);
                return CUDA_ERROR_OUT_OF_MEMORY;
        }
        v->base = base;
        v->size = size;
        pthread_mutex_lock(&g_lock);
        v->next = g_resvs;
        g_resvs = v;
        pthread_mutex_unlock(&g_lock);
        *ptr = (CUdeviceptr)base;
        return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemAddressFree(CUdeviceptr ptr, size_t size)
{
        struct fc_resv **pp, *v = NULL;
        CUresult r = CUDA_SUCCESS;

        FC_INIT_CHECK();
        pthread_mutex_lock(&g_lock);
        for (pp = &g_resvs; *pp; pp = &(*pp)->next)
                if ((*pp)->base == ptr && (*pp)->size == size)
                        break;
        if (!*pp) {
                r = CUDA_ERROR_INVALID_VALUE;
        } else {
                for (struct fc_map *m = g_maps; m; m = m->next)
                        if (m->addr >= ptr && m->addr < ptr + size)
                                r = CUDA_ERROR_INVALID_VALUE; /* still mapped */
                if (r == CUDA_SUCCESS) {
                        v = *pp;
                        *pp = v->next;
                }
        }
        pthread_mutex_unlock(&g_lock);
        if (v) {
                munmap((void *)v->base, v->size);
                free(v);
        }
        return r;
}

/* pre: g_lock held. */
static int fc_in_resv(uintptr_t a, size_t size)
{
        for (struct fc_resv *v = g_resvs; v; v = v->next)
                if (a >= v->base && a - v->base <= v->size && size <= v->size - (a - v->base))
                        return 1;
        return 0;
}

/* fakecuda_fail_maps: the calls to fail, bit 0 the next (atomic). */
static uint64_t g_fail_maps;

void fakecuda_fail_maps(uint64_t mask);
void fakecuda_fail_maps(uint64_t mask)
{
        __atomic_store_n(&g_fail_maps, mask, __ATOMIC_SEQ_CST);
}

CUresult CUDAAPI cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                          unsigned long long flags)
{
        struct fc_handle *e;
        struct fc_map *m;
        CUresult r = CUDA_SUCCESS;
        uint64_t fail;
        int idx;

        FC_INIT_CHECK();
        do
                fail = __atomic_load_n(&g_fail_maps, __ATOMIC_SEQ_CST);
        while (fail &&
               !__atomic_compare_exchange_n(&g_fail_maps, &fail, fail >> 1, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST));
        if (fail & 1)
                return CUDA_ERROR_OUT_OF_MEMORY;
        if (size == 0 || size % FC_GRAN || ptr % FC_GRAN || offset != 0 || flags != 0)
                return CUDA_ERROR_INVALID_VALUE;
        m = calloc(1, sizeof(*m));
        if (!m)
                return CUDA_ERROR_OUT_OF_MEMORY;
        pthread_mutex_lock(&g_lock);
        e = fc_handle_get(handle, &idx);
        if (!e || size > e->size || !fc_in_resv(ptr, size)) {
                r = CUDA_ERROR_INVALID_VALUE;
                goto out;
        }
        for (struct fc_map *o = g_maps; o; o = o->next)
                if (ptr < o->addr + o->size && o->addr < ptr + size) {
                        r = CUDA_ERROR_ALREADY_MAPPED;
                        goto out;
                }
        /* No access until cuMemSetAccess, as on a real device. */
        if (mmap((void *)ptr, size, PROT_NONE, MAP_SHARED | MAP_FIXED, e->fd, 0) == MAP_FAILED) {
                r = CUDA_ERROR_OUT_OF_MEMORY;
                goto out;
        }
        m->addr = ptr;
        m->size = size;
        m->hidx = idx;
        m->next = g_maps;
        g_maps = m;
        m = NULL;
        e->maps++;
out:
        pthread_mutex_unlock(&g_lock);
        free(m);
        return r;
}

CUresult CUDAAPI cuMemUnmap(CUdeviceptr ptr, size_t size)
{
        CUresult r = CUDA_SUCCESS;
        size_t covered = 0;

        FC_INIT_CHECK();
        if (size == 0 || size % FC_GRAN || ptr % FC_GRAN)
                return CUDA_ERROR_INVALID_VALUE;
        pthread_mutex_lock(&g_lock);
        /* The range must consist of whole mappings. */
        for (struct fc_map *m = g_maps; m; m = m->next) {
                if (m->addr >= ptr && m->addr - ptr < size) {
                        if (m->size > size - (m->addr - ptr)) {
                                r = CUDA_ERROR_INVALID_VALUE;
                                goto out;
                        }
                        covered += m->size;
                } else if (ptr > m->addr && ptr < m->addr + m->size) {
                        r = CUDA_ERROR_INVALID_VALUE;
                        goto out;
                }
        }
        if (covered != size) {
                r = CUDA_ERROR_INVALID_VALUE;
                goto out;
        }
        for (struct fc_map **pp = &g_maps; *pp;) {
                struct fc_map *m = *pp;
                if (m->addr >= ptr && m->addr - ptr < size) {
                        /* Back to a reserved, inaccessible range. */
                        (void)mmap((void *)m->addr, m->size, PROT_NONE,
                                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
                        fc_handle_unref(m->hidx, 1);
                        *pp = m->next;
                        free(m);
                } else {
                        pp = &m->next;
                }
        }
out:
        pthread_mutex_unlock(&g_lock);
        return r;
}

CUresult CUDAAPI cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count)
{
        CUresult r = CUDA_SUCCESS;
        size_t covered = 0;
        int prot = PROT_NONE;

        FC_INIT_CHECK();
        if (!desc || count == 0 || size == 0 || size % FC_GRAN || ptr % FC_GRAN)
                return CUDA_ERROR_INVALID_VALUE;
        for (size_t i = 0; i < count; i++) {
                if (desc[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE || desc[i].location.id < 0 ||
                    (unsigned)desc[i].location.id >= g_sh->ndev)
                        return CUDA_ERROR_INVALID_DEVICE;
                if (desc[i].flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
                        prot = PROT_READ | PROT_WRITE;
                else if (desc[i].flags == CU_MEM_ACCESS_FLAGS_PROT_READ && prot == PROT_NONE)
                        prot = PROT_READ;
                else if (desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_NONE &&
                         desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_READ)
                        return CUDA_ERROR_INVALID_VALUE;
        }
        pthread_mutex_lock(&g_lock);
        for (struct fc_map *m = g_maps; m; m = m->next)
                if (m->addr < ptr + size && ptr < m->addr + m->size) {
                        uintptr_t lo = m->addr > ptr ? m->addr : ptr;
                        uintptr_t hi = m->addr + m->size < ptr + size ? m->addr + m->size : ptr + size;
                        covered += hi - lo;
                }
        if (covered != size)
                r = CUDA_ERROR_INVALID_VALUE; /* not all of it mapped */
        else if (mprotect((void *)ptr, size, prot) < 0)
                r = CUDA_ERROR_OPERATING_SYSTEM;
        if (r == CUDA_SUCCESS)
                for (struct fc_map *m = g_maps; m; m = m->next)
                        if (m->addr < ptr + size && ptr < m->addr + m->size) {
                                m->access = 0;
                                for (size_t i = 0; i < count; i++)
                                        if (desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_NONE)
                                                m->access |= 1u << desc[i].location.id;
                        }
        pthread_mutex_unlock(&g_lock);
        return r;
}

CUresult CUDAAPI cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *handle, void *addr)
{
        CUresult r = CUDA_ERROR_INVALID_VALUE;
        uintptr_t a = (uintptr_t)addr;

        FC_INIT_CHECK();
        if (!handle)
                return CUDA_ERROR_INVALID_VALUE;
        pthread_mutex_lock(&g_lock);
        for (struct fc_map *m = g_maps; m; m = m->next)
                if (a >= m->addr && a < m->addr + m->size) {
                        g_handles[m->hidx].hrefs++;
                        *handle = fc_handle_value(m->hidx);
                        r = CUDA_SUCCESS;
                        break;
                }
        pthread_mutex_unlock(&g_lock);
        return r;
}

CUresult CUDAAPI cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp *prop, CUmemGenericAllocationHandle handle)
{
        struct fc_handle *e;
        CUresult r = CUDA_SUCCESS;

        FC_INIT_CHECK();
        if (!prop)
                return CUDA_ERROR_INVALID_VALUE;
        pthread_mutex_lock(&g_lock);
        e = fc_handle_get(handle, NULL);
        if (!e) {
                r = CUDA_ERROR_INVALID_VALUE;
        } else {
                memset(prop, 0, sizeof(*prop));
                prop->type = CU_MEM_ALLOCATION_TYPE_PINNED;
                prop->requestedHandleTypes = (CUmemAllocationHandleType)e->htypes;
                prop->location.type = e->host ? CU_MEM_LOCATION_TYPE_HOST_NUMA : CU_MEM_LOCATION_TYPE_DEVICE;
                prop->location.id = e->dev;
        }
        pthread_mutex_unlock(&g_lock);
        return r;
}

/* ---- cuGetProcAddress ----------------------------------------------- */

#define FC_SYM(n)               \
        {                       \
#n, (void *)(n) \
        }
static const struct {
        const char *name;
        void *fn;
} fc_syms[] = {
        FC_SYM(cuInit),
        FC_SYM(cuDriverGetVersion),
        FC_SYM(cuGetErrorString),
        FC_SYM(cuGetErrorName),
        FC_SYM(cuDeviceGetCount),
        FC_SYM(cuDeviceGet),
        FC_SYM(cuDeviceGetName),
        FC_SYM(cuDeviceGetUuid),
        FC_SYM(cuDeviceGetUuid_v2),
        FC_SYM(cuDeviceTotalMem),
        FC_SYM(cuDeviceTotalMem_v2),
        FC_SYM(cuDeviceGetAttribute),
        FC_SYM(cuDeviceGetPCIBusId),
        FC_SYM(cuDevicePrimaryCtxRetain),
        FC_SYM(cuDevicePrimaryCtxRelease),
        FC_SYM(cuDevicePrimaryCtxRelease_v2),
        FC_SYM(cuDevicePrimaryCtxGetState),
        FC_SYM(cuDevicePrimaryCtxReset),
        FC_SYM(cuDevicePrimaryCtxReset_v2),
        FC_SYM(cuCtxCreate),
        FC_SYM(cuCtxCreate_v2),
        FC_SYM(cuCtxCreate_v4),
        FC_SYM(cuCtxDestroy),
        FC_SYM(cuCtxDestroy_v2),
        FC_SYM(cuCtxSetCurrent),
        FC_SYM(cuCtxGetCurrent),
        FC_SYM(cuCtxGetDevice),
        FC_SYM(cuCtxSynchronize),
        FC_SYM(cuCtxPushCurrent),
        FC_SYM(cuCtxPushCurrent_v2),
        FC_SYM(cuCtxPopCurrent),
        FC_SYM(cuCtxPopCurrent_v2),
        FC_SYM(cuStreamCreate),
        FC_SYM(cuStreamDestroy),
        FC_SYM(cuStreamDestroy_v2),
        FC_SYM(cuStreamSynchronize),
        FC_SYM(cuStreamSynchronize_ptsz),
        FC_SYM(cuStreamBeginCapture_v2),
        FC_SYM(cuStreamEndCapture),
        FC_SYM(cuStreamIsCapturing),
        FC_SYM(cuThreadExchangeStreamCaptureMode),
        FC_SYM(cuStreamIsCapturing_ptsz),
        FC_SYM(cuCtxGetStreamPriorityRange),
        FC_SYM(cuStreamCreateWithPriority),
        FC_SYM(cuEventCreate),
        FC_SYM(cuEventRecord),
        FC_SYM(cuEventRecord_ptsz),
        FC_SYM(cuEventSynchronize),
        FC_SYM(cuEventDestroy_v2),
        FC_SYM(cuEventQuery),
        FC_SYM(cuEventElapsedTime),
        FC_SYM(cuEventElapsedTime_v2),
        FC_SYM(cuStreamQuery),
        FC_SYM(cuStreamQuery_ptsz),
        FC_SYM(cuGraphInstantiateWithFlags),
        FC_SYM(cuGraphLaunch),
        FC_SYM(cuGraphLaunch_ptsz),
        FC_SYM(cuGraphDestroy),
        FC_SYM(cuFuncGetName),
        FC_SYM(cuGraphExecDestroy),
        FC_SYM(cuMemsetD32Async),
        FC_SYM(cuLaunchHostFunc),
        FC_SYM(cuLaunchKernel),
        FC_SYM(cuLaunchKernel_ptsz),
        FC_SYM(cuMemGetInfo),
        FC_SYM(cuMemGetInfo_v2),
        FC_SYM(cuMemAlloc),
        FC_SYM(cuMemAlloc_v2),
        FC_SYM(cuMemAllocPitch),
        FC_SYM(cuMemAllocPitch_v2),
        FC_SYM(cuMemFree),
        FC_SYM(cuMemFree_v2),
        FC_SYM(cuMemGetAddressRange),
        FC_SYM(cuMemGetAddressRange_v2),
        FC_SYM(cuMemAllocAsync),
        FC_SYM(cuMemAllocAsync_ptsz),
        FC_SYM(cuMemFreeAsync),
        FC_SYM(cuMemFreeAsync_ptsz),
        FC_SYM(cuMemAllocManaged),
        FC_SYM(cuMemcpyHtoD),
        FC_SYM(cuMemcpyHtoD_v2),
        FC_SYM(cuMemcpyDtoH),
        FC_SYM(cuMemcpyDtoH_v2),
        FC_SYM(cuMemcpyDtoD),
        FC_SYM(cuMemcpyDtoD_v2),
        FC_SYM(cuMemcpyDtoDAsync_v2),
        FC_SYM(cuMemsetD8),
        FC_SYM(cuMemsetD8_v2),
        FC_SYM(cuMemsetD32),
        FC_SYM(cuMemsetD32_v2),
        FC_SYM(cuMemGetAllocationGranularity),
        FC_SYM(cuMemCreate),
        FC_SYM(cuMemRelease),
        FC_SYM(cuMemExportToShareableHandle),
        FC_SYM(cuMemImportFromShareableHandle),
        FC_SYM(cuMemAddressReserve),
        FC_SYM(cuMemAddressFree),
        FC_SYM(cuMemMap),
        FC_SYM(cuMemUnmap),
        FC_SYM(cuMemSetAccess),
        FC_SYM(cuMemRetainAllocationHandle),
        FC_SYM(cuMemGetAllocationPropertiesFromHandle),
        FC_SYM(cuIpcGetMemHandle),
        FC_SYM(cuIpcOpenMemHandle),
        FC_SYM(cuIpcOpenMemHandle_v2),
        FC_SYM(cuIpcCloseMemHandle),
        FC_SYM(cuGetProcAddress),
        FC_SYM(cuGetProcAddress_v2),
};

/* Which versioned symbol a base name resolves to, from which CUDA version
 * (the real driver's table, for the names the fake has). */
static const struct {
        const char *base, *suffix;
        int since;
} fc_versions[] = {
        { "cuCtxCreate", "_v4", 12050 },
        { "cuCtxCreate", "_v2", 3020 },
        { "cuMemAlloc", "_v2", 3020 },
        { "cuMemAllocPitch", "_v2", 3020 },
        { "cuMemFree", "_v2", 3020 },
        { "cuMemGetAddressRange", "_v2", 3020 },
        { "cuMemGetInfo", "_v2", 3020 },
        { "cuDeviceTotalMem", "_v2", 3020 },
        { "cuMemcpyHtoD", "_v2", 3020 },
        { "cuMemcpyDtoH", "_v2", 3020 },
        { "cuMemcpyDtoD", "_v2", 3020 },
        { "cuMemcpyDtoDAsync", "_v2", 3020 },
        { "cuMemsetD8", "_v2", 3020 },
        { "cuMemsetD32", "_v2", 3020 },
        { "cuCtxDestroy", "_v2", 4000 },
        { "cuCtxPushCurrent", "_v2", 4000 },
        { "cuCtxPopCurrent", "_v2", 4000 },
        { "cuStreamDestroy", "_v2", 4000 },
        { "cuEventDestroy", "_v2", 4000 },
        { "cuDevicePrimaryCtxRelease", "_v2", 11000 },
        { "cuDevicePrimaryCtxReset", "_v2", 11000 },
        { "cuDeviceGetUuid", "_v2", 11040 },
        { "cuIpcOpenMemHandle", "_v2", 11000 },
        { "cuStreamBeginCapture", "_v2", 10010 },
        { "cuEventElapsedTime", "_v2", 12080 },
        { "cuGraphInstantiate", "WithFlags", 12000 },
        { "cuGetProcAddress", "_v2", 12000 },
};

static void *fc_sym(const char *name)
{
        for (size_t i = 0; i < sizeof(fc_syms) / sizeof(fc_syms[0]); i++)
                if (!strcmp(fc_syms[i].name, name))
                        return fc_syms[i].fn;
        return NULL;
}

CUresult CUDAAPI cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                                     CUdriverProcAddressQueryResult *symbolStatus)
{
        char name[128];
        void *fn = NULL;

        if (symbolStatus)
                *symbolStatus = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
        if (!symbol || !pfn || strlen(symbol) > 100)
                return CUDA_ERROR_INVALID_VALUE;
        *pfn = NULL;
        snprintf(name, sizeof(name), "%s", symbol);
        for (size_t i = 0; i < sizeof(fc_versions) / sizeof(fc_versions[0]); i++)
                if (!strcmp(fc_versions[i].base, symbol) && cudaVersion >= fc_versions[i].since) {
                        snprintf(name, sizeof(name), "%s%s", symbol, fc_versions[i].suffix);
                        break;
                }
        if (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) {
                char pt[140];
                snprintf(pt, sizeof(pt), "%s_ptsz", name);
                fn = fc_sym(pt);
                if (!fn) {
                        snprintf(pt, sizeof(pt), "%s_ptds", name);
                        fn = fc_sym(pt);
                }
        }
        if (!fn)
                fn = fc_sym(name);
        if (!fn)
                return CUDA_ERROR_NOT_FOUND;
        *pfn = fn;
        if (symbolStatus)
                *symbolStatus = CU_GET_PROC_ADDRESS_SUCCESS;
        return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags)
{
        return cuGetProcAddress_v2(symbol, pfn, cudaVersion, flags, NULL);
}
