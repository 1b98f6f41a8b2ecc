/* check_spill.c — the mover's move (hook/gs_hook_spill.h) on the fake
 * driver: a slot's data moved to host memory at the same address and
 * back, a full batch both ways, the wait for work launched before the
 * move and the gate held closed during it, a failure (also in the middle
 * of a batch: an import, a copy, a mapping) leaving the slots it did not
 * move as they were, and the application's contexts the mover
 * synchronizes (gs_hook_ctx.c).
 *
 * Linked with the hook's objects, as check_gate is (gs_spill_move and
 * gs_conn are hidden in libgshare.so).  No agent: the test stands for
 * WELCOME (one GPU, 2 MiB chunks, 4 slots, 64 for full batches) and for
 * the agent's chunks (device and host memory it makes and exports with
 * the real driver). */
#include <check.h>

#include "../gs_check.h"
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "gs_hook_gate.h"
#include "gs_hook_space.h"
#include "gs_hook_spill.h"

/* The fake driver's test functions (test/fakecuda/fakecuda.c). */
CUfunction fakecuda_fill_kernel(void);
void fakecuda_hold_work(int hold);
uint64_t fakecuda_work_pending(void);
uint64_t fakecuda_launched(void);
uint64_t fakecuda_host_bytes(void);
void fakecuda_fail_maps(uint64_t mask);
void fakecuda_fail_copies(uint64_t mask, int at_run);

#define CHUNK (2u << 20)
#define SLOTS 4u
#define WORDS (CHUNK / 4)
/* Slots of the range in tests of full batches. */
#define BIG_SLOTS (2u * GS_MOVE_MAX)

static char g_state[128];
static const struct gs_cu *cu;
static struct gs_hook_gpu *g;

/* A range of nslots slots of CHUNK bytes. */
static void setup_n(uint32_t nslots)
{
        CUcontext c = NULL;
        CUuuid u;

        snprintf(g_state, sizeof(g_state), "/tmp/gshare-spill-check-%d", (int)getpid());
        unlink(g_state);
        setenv("GSHARE_FAKECUDA_STATE", g_state, 1);
        setenv("GSHARE_FAKECUDA_MEM", "256Mi", 1);
        setenv("GSHARE_FAKECUDA_DEVICES", "1", 1);
        /* No agent: cuInit says so once. */
        setenv("GSHARE_SOCKET", "/nonexistent/gshare-check-spill.sock", 1);
        ck_assert_int_eq(cuInit(0), CUDA_SUCCESS);
        ck_assert_int_eq(cuDevicePrimaryCtxRetain(&c, 0), CUDA_SUCCESS);
        ck_assert_int_eq(cuCtxSetCurrent(c), CUDA_SUCCESS);
        cu = gs_cu_get();
        ck_assert_ptr_nonnull(cu);
        /* What WELCOME would have said. */
        pthread_mutex_lock(&gs_conn.mu);
        ck_assert_int_eq(cu->device_get_uuid_v2(&u, 0), CUDA_SUCCESS);
        gs_conn.ngpus = 1;
        g = &gs_conn.gpus[0];
        memset(g, 0, sizeof(*g));
        memcpy(g->uuid, u.bytes, 16);
        g->chunk = CHUNK;
        g->max_slots = nslots;
        for (int d = 0; d < GS_MAX_DEVICES; d++)
                gs_conn.devmap[d] = -2;
        ck_assert_int_eq(gs_space_reserve(cu, g), 0);
        pthread_mutex_unlock(&gs_conn.mu);
}

static void setup(void)
{
        setup_n(SLOTS);
}

static void teardown(void)
{
        unlink(g_state);
}

static CUdeviceptr slot_at(uint32_t s)
{
        return g->va_base + (CUdeviceptr)s * CHUNK;
}

/* A new chunk of the agent's, as the fd it would send: device memory of
 * device 0 or host memory; *keep (if not NULL) keeps the creator's handle. */
static int chunk_fd(int host, CUmemGenericAllocationHandle *keep)
{
        CUmemAllocationProp p = { .type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                  .requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR };
        CUmemGenericAllocationHandle h;
        int fd = -1;

        p.location.type = host ? CU_MEM_LOCATION_TYPE_HOST_NUMA : CU_MEM_LOCATION_TYPE_DEVICE;
        p.location.id = 0;
        ck_assert_int_eq(cu->mem_create(&h, CHUNK, &p, 0), CUDA_SUCCESS);
        ck_assert_int_eq(cu->mem_export_to_shareable_handle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
                         CUDA_SUCCESS);
        if (keep)
                *keep = h;
        else
                ck_assert_int_eq(cu->mem_release(h), CUDA_SUCCESS);
        return fd;
}

/* A granted device chunk mapped at slot s, as the hook maps grants. */
static void map_slot(uint32_t s, CUmemGenericAllocationHandle *keep)
{
        int fd = chunk_fd(0, keep);

        pthread_mutex_lock(&gs_conn.mu);
        ck_assert_int_eq(gs_space_map_fd(cu, slot_at(s), CHUNK, 0, fd), 0);
        g->mapped[s] = 1;
        pthread_mutex_unlock(&gs_conn.mu);
}

/* Word i of the pattern of slot s. */
static uint32_t pattern(uint32_t s, size_t i)
{
        return (uint32_t)(0x9e3779b9u * (i + 1) ^ (s << 24));
}

static void fill(uint32_t s)
{
        uint32_t *buf = malloc(CHUNK);

        ck_assert_ptr_nonnull(buf);
        for (size_t i = 0; i < WORDS; i++)
                buf[i] = pattern(s, i);
        ck_assert_int_eq(cuMemcpyHtoD_v2(slot_at(s), buf, CHUNK), CUDA_SUCCESS);
        free(buf);
}

/* Whether slot s reads its pattern back, through the device. */
static int intact(uint32_t s)
{
        uint32_t *buf = malloc(CHUNK);
        int ok = 1;

        ck_assert_ptr_nonnull(buf);
        ck_assert_int_eq(cuMemcpyDtoH_v2(buf, slot_at(s), CHUNK), CUDA_SUCCESS);
        for (size_t i = 0; i < WORDS && ok; i++)
                ok = buf[i] == pattern(s, i);
        free(buf);
        return ok;
}

/* Mappings and fds of this process onto the fake's memfds named name. */
static int held(const char *name)
{
        char line[512], link[300], target[256];
        FILE *f = fopen("/proc/self/maps", "re");
        struct dirent *e;
        DIR *d;
        int n = 0;

        ck_assert_ptr_nonnull(f);
        while (fgets(line, sizeof(line), f))
                n += strstr(line, name) != NULL;
        fclose(f);
        d = opendir("/proc/self/fd");
        ck_assert_ptr_nonnull(d);
        while ((e = readdir(d))) {
                ssize_t k;
                snprintf(link, sizeof(link), "/proc/self/fd/%s", e->d_name);
                k = readlink(link, target, sizeof(target) - 1);
                if (k > 0) {
                        target[k] = '\0';
                        n += strstr(target, name) != NULL;
                }
        }
        closedir(d);
        return n;
}

static int fd_closed(int fd)
{
        return fcntl(fd, F_GETFD) < 0 && errno == EBADF;
}

/* In a batch, the fake driver's own fds (one per imported memory) may
 * take the numbers of fds the mover closed: an fd is gone if closed or if
 * its number names another file than ino now. */
static ino_t fd_ino(int fd)
{
        struct stat st;

        ck_assert_int_eq(fstat(fd, &st), 0);
        return st.st_ino;
}

static int fd_gone(int fd, ino_t ino)
{
        struct stat st;

        if (fstat(fd, &st) < 0)
                return errno == EBADF;
        return st.st_ino != ino;
}

static uint32_t move(const uint32_t *slots, int *fds, uint32_t k)
{
        uint32_t moved;

        pthread_mutex_lock(&gs_conn.mu);
        moved = gs_spill_move(cu, 0, slots, fds, NULL, k, NULL);
        pthread_mutex_unlock(&gs_conn.mu);
        return moved;
}

/* A device chunk's data to host memory at the same address, and back to
 * a new device chunk: the data reads the same, the memory left behind is
 * no longer held. */
START_TEST(test_to_host_and_back)
{
        uint64_t host0;
        uint32_t slots[1] = { 1 };
        int fds[1], fd;

        setup();
        map_slot(1, NULL);
        fill(1);
        host0 = fakecuda_host_bytes();
        ck_assert_int_gt(held("gshare-fake-dev0"), 0);
        ck_assert_int_eq(held("gshare-fake-host0"), 0);

        fd = fds[0] = chunk_fd(1, NULL);
        ck_assert_uint_eq(fakecuda_host_bytes(), host0);
        ck_assert_uint_eq(move(slots, fds, 1), 1);
        ck_assert(fd_closed(fd));
        ck_assert(intact(1));
        ck_assert_uint_eq(fakecuda_host_bytes(), host0 + CHUNK);
        ck_assert_int_eq(held("gshare-fake-dev0"), 0);
        ck_assert_int_gt(held("gshare-fake-host0"), 0);
        ck_assert(g->mapped[1]);
        /* The slot is still the device's to use. */
        ck_assert_int_eq(cuMemsetD32_v2(slot_at(1) + CHUNK - 4, 0x5a5a5a5a, 1), CUDA_SUCCESS);
        ck_assert_uint_eq(*(volatile uint32_t *)(uintptr_t)(slot_at(1) + CHUNK - 4), 0x5a5a5a5a);
        fill(1);

        fd = fds[0] = chunk_fd(0, NULL);
        ck_assert_uint_eq(move(slots, fds, 1), 1);
        ck_assert(fd_closed(fd));
        ck_assert(intact(1));
        ck_assert_uint_eq(fakecuda_host_bytes(), host0);
        ck_assert_int_eq(held("gshare-fake-host0"), 0);
        ck_assert_int_gt(held("gshare-fake-dev0"), 0);
        ck_assert_int_eq(gs_conn.state, GS_CONN_DOWN); /* no agent; the move did not touch it */
        teardown();
}
END_TEST

/* Several slots in one batch, each to its own memory. */
START_TEST(test_batch)
{
        uint32_t slots[3] = { 3, 0, 2 };
        int fds[3];
        uint64_t host0;

        setup();
        for (uint32_t s = 0; s < SLOTS; s++) {
                map_slot(s, NULL);
                fill(s);
        }
        host0 = fakecuda_host_bytes();
        for (int i = 0; i < 3; i++)
                fds[i] = chunk_fd(1, NULL);
        ck_assert_uint_eq(move(slots, fds, 3), 3);
        ck_assert_uint_eq(fakecuda_host_bytes(), host0 + 3 * CHUNK);
        for (uint32_t s = 0; s < SLOTS; s++)
                ck_assert(intact(s));
        teardown();
}
END_TEST

static double ms_since(const struct timespec *t0)
{
        struct timespec t1;

        clock_gettime(CLOCK_MONOTONIC, &t1);
        return (double)(t1.tv_sec - t0->tv_sec) * 1e3 + (double)(t1.tv_nsec - t0->tv_nsec) / 1e6;
}

/* A full batch (GS_MOVE_MAX slots) to host memory and back, the way back
 * in an order of several runs of consecutive slots: every slot reads its
 * own data at each step, the memory left behind is no longer held.  The
 * time of each batch is printed (info, no assertion). */
START_TEST(test_full_batch_both_ways)
{
        /* Runs: 5-7, 0, 20-31, 1-4, 8-19. */
        static const uint32_t back_order[GS_MOVE_MAX] = { 5, 6, 7, 0, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31,
                                                          1, 2, 3, 4, 8,  9,  10, 11, 12, 13, 14, 15, 16, 17, 18, 19 };
        uint32_t slots[GS_MOVE_MAX];
        int fds[GS_MOVE_MAX], copy[GS_MOVE_MAX];
        ino_t ino[GS_MOVE_MAX];
        struct timespec t0;
        uint64_t host0;
        double ms;

        setup_n(BIG_SLOTS);
        for (uint32_t s = 0; s < GS_MOVE_MAX; s++) {
                map_slot(s, NULL);
                fill(s);
                slots[s] = s;
        }
        host0 = fakecuda_host_bytes();
        for (uint32_t i = 0; i < GS_MOVE_MAX; i++) {
                copy[i] = fds[i] = chunk_fd(1, NULL);
                ino[i] = fd_ino(fds[i]);
        }
        clock_gettime(CLOCK_MONOTONIC, &t0);
        ck_assert_uint_eq(move(slots, fds, GS_MOVE_MAX), GS_MOVE_MAX);
        ms = ms_since(&t0);
        printf("info: a batch of %u chunks of %u MiB to host memory: %.1f ms\n", GS_MOVE_MAX, CHUNK >> 20, ms);
        for (uint32_t i = 0; i < GS_MOVE_MAX; i++) {
                ck_assert(fd_gone(copy[i], ino[i]));
                ck_assert(g->mapped[i]);
                ck_assert(intact(i));
        }
        ck_assert_uint_eq(fakecuda_host_bytes(), host0 + GS_MOVE_MAX * CHUNK);
        ck_assert_int_eq(held("gshare-fake-dev0"), 0);

        for (uint32_t i = 0; i < GS_MOVE_MAX; i++) {
                copy[i] = fds[i] = chunk_fd(0, NULL);
                ino[i] = fd_ino(fds[i]);
        }
        clock_gettime(CLOCK_MONOTONIC, &t0);
        ck_assert_uint_eq(move(back_order, fds, GS_MOVE_MAX), GS_MOVE_MAX);
        ms = ms_since(&t0);
        printf("info: a batch of %u chunks of %u MiB back to device memory: %.1f ms\n", GS_MOVE_MAX, CHUNK >> 20, ms);
        for (uint32_t i = 0; i < GS_MOVE_MAX; i++) {
                ck_assert(fd_gone(copy[i], ino[i]));
                ck_assert(intact(i));
        }
        ck_assert_uint_eq(fakecuda_host_bytes(), host0);
        ck_assert_int_eq(held("gshare-fake-host0"), 0);
        ck_assert_int_gt(held("gshare-fake-dev0"), 0);
        /* Still the device's to use. */
        ck_assert_int_eq(cuMemsetD32_v2(slot_at(31), 0x5a5a5a5a, WORDS), CUDA_SUCCESS);
        ck_assert_uint_eq(*(volatile uint32_t *)(uintptr_t)(slot_at(31) + CHUNK - 4), 0x5a5a5a5a);
        teardown();
}
END_TEST

struct mover {
        pthread_t t;
        uint32_t slot;
        int fd;
        uint32_t moved;
        int done;
};

static void *mover_thread(void *arg)
{
        struct mover *m = arg;
        uint32_t moved = move(&m->slot, &m->fd, 1);

        m->moved = moved;
        __atomic_store_n(&m->done, 1, __ATOMIC_SEQ_CST);
        return NULL;
}

/* Passes the gate again and again until it finds it closed: then it
 * waits there (gs_gate_waiting), which tells the test the gate closed. */
static int g_probe_stop;
static void *probe_thread(void *arg)
{
        (void)arg;
        while (!__atomic_load_n(&g_probe_stop, __ATOMIC_SEQ_CST))
                gs_gate_leave(gs_gate_enter());
        return NULL;
}

struct launcher {
        pthread_t t;
        CUcontext ctx;
        CUdeviceptr dst;
        uint32_t value;
        CUresult r;
};

static CUresult fill_kernel_delayed(CUdeviceptr dst, size_t bytes, uint32_t value, uint32_t delay_us)
{
        void *params[] = { &dst, &bytes, &value, &delay_us };

        return cuLaunchKernel(fakecuda_fill_kernel(), 1, 1, 1, 64, 1, 1, 0, NULL, params, NULL);
}

static CUresult fill_kernel(CUdeviceptr dst, size_t bytes, uint32_t value)
{
        return fill_kernel_delayed(dst, bytes, value, 0);
}

static void *launch_thread(void *arg)
{
        struct launcher *l = arg;

        cuCtxSetCurrent(l->ctx);
        l->r = fill_kernel(l->dst, 4096, l->value);
        if (l->r == CUDA_SUCCESS)
                l->r = cuCtxSynchronize();
        return NULL;
}

static void wait_for_waiting(int n)
{
        struct timespec ms = { 0, 1000000 };

        for (int i = 0; i < 20000 && gs_gate_waiting() != n; i++)
                nanosleep(&ms, NULL);
        ck_assert_int_eq(gs_gate_waiting(), n);
}

/* With the gate armed: a kernel launched before the move writes the old
 * memory before the copy (the move waits for it), and a launch made while
 * the move runs waits at the gate and writes the new memory after it. */
START_TEST(test_waits_for_work_and_holds_launches)
{
        const uint32_t v1 = 0x11111111, v2 = 0x22222222;
        CUmemGenericAllocationHandle h;
        struct mover m = { .slot = 0 };
        struct launcher l = { .value = v2, .r = CUDA_ERROR_UNKNOWN };
        pthread_t probe;
        CUdeviceptr view = 0;
        CUmemAccessDesc acc = { { CU_MEM_LOCATION_TYPE_DEVICE, 0 }, CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
        uint64_t host0, launched;

        setup();
        gs_gate_arm();
        map_slot(0, &h);
        /* The old memory, seen from elsewhere after the move. */
        ck_assert_int_eq(cu->mem_address_reserve(&view, CHUNK, CHUNK, 0, 0), CUDA_SUCCESS);
        ck_assert_int_eq(cu->mem_map(view, CHUNK, 0, h, 0), CUDA_SUCCESS);
        ck_assert_int_eq(cu->mem_set_access(view, CHUNK, &acc, 1), CUDA_SUCCESS);
        host0 = fakecuda_host_bytes();

        fakecuda_hold_work(1);
        ck_assert_int_eq(fill_kernel(slot_at(0), 4096, v1), CUDA_SUCCESS);
        ck_assert_uint_eq(fakecuda_work_pending(), 1);
        m.fd = chunk_fd(1, NULL);
        __atomic_store_n(&g_probe_stop, 0, __ATOMIC_SEQ_CST);
        ck_assert_int_eq(pthread_create(&probe, NULL, probe_thread, NULL), 0);
        ck_assert_int_eq(pthread_create(&m.t, NULL, mover_thread, &m), 0);
        wait_for_waiting(1); /* the probe: the gate is closed */
        ck_assert_int_eq(cuCtxGetCurrent(&l.ctx), CUDA_SUCCESS);
        l.dst = slot_at(0) + 4096;
        launched = fakecuda_launched();
        ck_assert_int_eq(pthread_create(&l.t, NULL, launch_thread, &l), 0);
        wait_for_waiting(2);
        /* The kernel is held: the move cannot have copied yet. */
        ck_assert(!__atomic_load_n(&m.done, __ATOMIC_SEQ_CST));
        ck_assert_uint_eq(fakecuda_launched(), launched);
        __atomic_store_n(&g_probe_stop, 1, __ATOMIC_SEQ_CST);
        fakecuda_hold_work(0);

        ck_assert_int_eq(pthread_join(m.t, NULL), 0);
        ck_assert_uint_eq(m.moved, 1);
        ck_assert_int_eq(pthread_join(l.t, NULL), 0);
        ck_assert_int_eq(l.r, CUDA_SUCCESS);
        ck_assert_int_eq(pthread_join(probe, NULL), 0);
        ck_assert_uint_eq(fakecuda_launched(), launched + 1);
        ck_assert_uint_eq(fakecuda_host_bytes(), host0 + CHUNK);
        for (size_t i = 0; i < 1024; i++) {
                /* The kernel wrote the old memory, before the copy ... */
                ck_assert_uint_eq(((uint32_t *)(uintptr_t)view)[i], v1);
                ck_assert_uint_eq(((uint32_t *)(uintptr_t)slot_at(0))[i], v1);
                /* ... the later launch only the new. */
                ck_assert_uint_eq(((uint32_t *)(uintptr_t)view)[1024 + i], 0);
                ck_assert_uint_eq(((uint32_t *)(uintptr_t)slot_at(0))[1024 + i], v2);
        }
        ck_assert_int_eq(gs_gate_waiting(), 0);
        teardown();
}
END_TEST

/* Setup, and slots 0 and 1 mapped and filled: the host bytes and device
 * mappings held then. */
static void setup_two_slots(uint64_t *host0, int *devs)
{
        setup();
        for (uint32_t s = 0; s < 2; s++) {
                map_slot(s, NULL);
                fill(s);
        }
        *host0 = fakecuda_host_bytes();
        *devs = held("gshare-fake-dev0");
}

/* A fd that is no CUDA export: nothing moves, the slot keeps its memory
 * and data; in a batch, what came before it moved (a prefix). */
START_TEST(test_bad_fd)
{
        uint32_t slots[2] = { 0, 1 };
        int fds[2], bad, good, devs;
        uint64_t host0;

        setup_two_slots(&host0, &devs);

        bad = fds[0] = memfd_create("not-cuda", MFD_CLOEXEC);
        ck_assert_int_ge(bad, 0);
        ck_assert_int_eq(ftruncate(bad, CHUNK), 0);
        ck_assert_uint_eq(move(slots, fds, 1), 0);
        ck_assert(fd_closed(bad));
        ck_assert(intact(0));
        ck_assert_int_eq(held("gshare-fake-dev0"), devs);
        ck_assert_uint_eq(fakecuda_host_bytes(), host0);
        ck_assert(g->mapped[0]);

        good = fds[0] = chunk_fd(1, NULL);
        bad = fds[1] = memfd_create("not-cuda", MFD_CLOEXEC);
        ck_assert_int_eq(ftruncate(bad, CHUNK), 0);
        ck_assert_uint_eq(move(slots, fds, 2), 1);
        ck_assert(fd_closed(good) && fd_closed(bad));
        ck_assert(intact(0) && intact(1));
        ck_assert_uint_eq(fakecuda_host_bytes(), host0 + CHUNK);

        /* A slot that maps nothing is not moved. */
        slots[0] = 2;
        good = fds[0] = chunk_fd(1, NULL);
        ck_assert_uint_eq(move(slots, fds, 1), 0);
        ck_assert(fd_closed(good));
        ck_assert_uint_eq(fakecuda_host_bytes(), host0 + CHUNK);
        ck_assert_int_ne(gs_conn.state, GS_CONN_UP);
        teardown();
}
END_TEST

/* The new memory cannot be mapped at the slot (a batch of two maps both
 * new memories at the scratch first: cuMemMap calls 0 and 1, then slot 0's
 * new memory: call 2): the old memory is mapped back, data intact,
 * nothing moved, nothing of the new memory held.  If even that fails (a
 * batch of one: scratch 0, the slot 1, the old memory back 2), the slot
 * is unmapped and the connection dropped (fail closed). */
START_TEST(test_map_back)
{
        uint32_t slots[2] = { 0, 1 };
        int fds[2], devs;
        uint64_t host0;

        setup_two_slots(&host0, &devs);
        fds[0] = chunk_fd(1, NULL);
        fds[1] = chunk_fd(1, NULL);
        fakecuda_fail_maps(4);
        ck_assert_uint_eq(move(slots, fds, 2), 0);
        ck_assert(fd_closed(fds[0]) && fd_closed(fds[1]));
        ck_assert(intact(0) && intact(1));
        ck_assert(g->mapped[0]);
        ck_assert_uint_eq(fakecuda_host_bytes(), host0);
        ck_assert_int_eq(held("gshare-fake-dev0"), devs);
        ck_assert_int_eq(held("gshare-fake-host0"), 0);

        pthread_mutex_lock(&gs_conn.mu);
        gs_conn.state = GS_CONN_UP; /* as if registered: the failure drops it */
        pthread_mutex_unlock(&gs_conn.mu);
        fds[0] = chunk_fd(1, NULL);
        fakecuda_fail_maps(6);
        ck_assert_uint_eq(move(slots, fds, 1), 0);
        ck_assert(fd_closed(fds[0]));
        ck_assert(!g->mapped[0]);
        ck_assert_int_eq(gs_conn.state, GS_CONN_DOWN);
        ck_assert(intact(1));
        ck_assert_uint_eq(fakecuda_host_bytes(), host0);
        teardown();
}
END_TEST

/* A batch of n slots (mapped, filled; 4: one group of the pipeline, 12:
 * three) to host memory, failing at slot at: its memory is no CUDA export,
 * its copy is refused or faults when it runs, or its memory cannot be
 * mapped at the slot (cuMemMap calls 0..n-1 map the scratch, n.. the
 * slots).  A prefix of lo..hi slots moves (whole groups if lo < hi), the
 * rest keep their device memory, all their data; every fd is closed. */
enum fault { BAD_IMPORT, COPY_REFUSED, COPY_FAULT, MAP_FAILS };

static void batch_with(enum fault f, uint32_t n, uint32_t at, uint32_t lo, uint32_t hi)
{
        uint32_t slots[GS_MOVE_MAX], want;
        int fds[GS_MOVE_MAX], devs;
        ino_t ino[GS_MOVE_MAX];
        uint64_t host0;

        setup_n(n <= SLOTS ? SLOTS : BIG_SLOTS);
        for (uint32_t s = 0; s < n; s++) {
                map_slot(s, NULL);
                fill(s);
                slots[s] = s;
        }
        host0 = fakecuda_host_bytes();
        devs = held("gshare-fake-dev0");
        for (uint32_t i = 0; i < n; i++)
                fds[i] = chunk_fd(1, NULL);
        if (f == BAD_IMPORT) {
                close(fds[at]);
                fds[at] = memfd_create("not-cuda", MFD_CLOEXEC);
                ck_assert_int_ge(fds[at], 0);
                ck_assert_int_eq(ftruncate(fds[at], CHUNK), 0);
        }
        for (uint32_t i = 0; i < n; i++)
                ino[i] = fd_ino(fds[i]);
        if (f == COPY_REFUSED || f == COPY_FAULT)
                fakecuda_fail_copies(1ull << at, f == COPY_FAULT);
        if (f == MAP_FAILS)
                fakecuda_fail_maps(1ull << (n + at));

        want = move(slots, fds, n);
        ck_assert_uint_ge(want, lo);
        ck_assert_uint_le(want, hi);
        ck_assert(lo == hi || want % 4 == 0);
        for (uint32_t i = 0; i < n; i++) {
                ck_assert(fd_gone(fds[i], ino[i]));
                ck_assert(g->mapped[i]);
                ck_assert(intact(i));
        }
        ck_assert_uint_eq(fakecuda_host_bytes(), host0 + want * CHUNK);
        ck_assert_int_eq(held("gshare-fake-host0") == 0, want == 0);
        if (want == 0)
                ck_assert_int_eq(held("gshare-fake-dev0"), devs);
        ck_assert_int_eq(gs_gate_waiting(), 0);
        ck_assert_uint_eq(fakecuda_work_pending(), 0);
        teardown();
}

/* batch_with's cases: fault f at slot `at` of a batch of n; a prefix of
 * lo..hi slots moves. */
static const struct {
        enum fault f;
        uint32_t n, at, lo, hi;
} batch_cases[] = {
        /* In a batch of four (one group): */
        { BAD_IMPORT, 4, 2, 2, 2 },   /* the first two move */
        { COPY_REFUSED, 4, 2, 2, 2 }, /* the two copies issued before are waited for: their slots move */
        { COPY_FAULT, 4, 2, 0, 0 },   /* the one wait fails: no copy is known good, nothing moves */
        { MAP_FAILS, 4, 2, 2, 2 },    /* in a run of four: the two before stay moved, the third gets its old */
        /* Three groups, the third slot of the third failing: the two groups
         * before it move (remapped while the third copied), and its first
         * two; a copy fault is seen at a wait after it: none of its group. */
        { COPY_REFUSED, 12, 10, 10, 10 },
        { MAP_FAILS, 12, 10, 10, 10 },
        { COPY_FAULT, 12, 10, 0, 8 },
};

/* One case per run (fork mode: a setup's slot flags never leak into the
 * next case's). */
START_TEST(test_batch_fault)
{
        batch_with(batch_cases[_i].f, batch_cases[_i].n, batch_cases[_i].at, batch_cases[_i].lo, batch_cases[_i].hi);
}
END_TEST

/* The contexts are synchronized before anything moves: a move that
 * copies nothing (its first fd is bad) still returns only once the kernel
 * launched before it (on another slot; 300 ms long) is done. */
START_TEST(test_syncs_first)
{
        uint32_t slot = 0;
        int fd;

        setup();
        map_slot(0, NULL);
        map_slot(1, NULL);
        ck_assert_int_eq(fill_kernel_delayed(slot_at(1), 4096, 0x33333333, 300000), CUDA_SUCCESS);
        fd = memfd_create("not-cuda", MFD_CLOEXEC);
        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(ftruncate(fd, CHUNK), 0);
        ck_assert_uint_eq(move(&slot, &fd, 1), 0);
        ck_assert_uint_eq(fakecuda_work_pending(), 0);
        ck_assert_uint_eq(((uint32_t *)(uintptr_t)slot_at(1))[1023], 0x33333333);
        teardown();
}
END_TEST

/* The contexts the application makes are the mover's to synchronize
 * until destroyed; past GS_CTX_MAX the mover moves nothing. */
START_TEST(test_contexts)
{
        CUcontext c[GS_CTX_MAX + 1], list[GS_CTX_MAX], popped;
        CUdevice devs[GS_CTX_MAX];
        uint32_t slot = 0;
        int fd;

        setup();
        map_slot(0, NULL);
        fill(0);
        for (int i = 0; i < GS_CTX_MAX + 1; i++) {
                ck_assert_int_eq(cuCtxCreate_v2(&c[i], 0, 0), CUDA_SUCCESS);
                ck_assert_int_eq(cuCtxPopCurrent_v2(&popped), CUDA_SUCCESS);
                ck_assert_ptr_eq(popped, c[i]);
        }
        gs_ctx_lock();
        ck_assert_int_eq(gs_ctx_list(list, devs, GS_CTX_MAX), -1);
        gs_ctx_unlock();
        fd = chunk_fd(1, NULL);
        ck_assert_uint_eq(move(&slot, &fd, 1), 0);
        ck_assert(intact(0));

        ck_assert_int_eq(cuCtxDestroy_v2(c[GS_CTX_MAX]), CUDA_SUCCESS);
        gs_ctx_lock();
        ck_assert_int_eq(gs_ctx_list(list, devs, GS_CTX_MAX), GS_CTX_MAX);
        gs_ctx_unlock();
        fd = chunk_fd(1, NULL);
        ck_assert_uint_eq(move(&slot, &fd, 1), 1);
        ck_assert(intact(0));

        for (int i = 0; i < GS_CTX_MAX; i++)
                ck_assert_int_eq(i % 2 ? cuCtxDestroy(c[i]) : cuCtxDestroy_v2(c[i]), CUDA_SUCCESS);
        gs_ctx_lock();
        ck_assert_int_eq(gs_ctx_list(list, devs, GS_CTX_MAX), 0);
        gs_ctx_unlock();
        /* A destroyed context is no context: the driver says so. */
        ck_assert_int_eq(cuCtxDestroy_v2(c[0]), CUDA_ERROR_INVALID_CONTEXT);
        teardown();
}
END_TEST

/* Without the primary context, the application's context on the device
 * is the one the copies run in. */
START_TEST(test_app_context_only)
{
        CUcontext c, popped;
        uint32_t slot = 1;
        int fd;

        setup();
        map_slot(1, NULL);
        fill(1);
        ck_assert_int_eq(cuDevicePrimaryCtxRelease_v2(0), CUDA_SUCCESS);
        fd = chunk_fd(1, NULL);
        ck_assert_uint_eq(move(&slot, &fd, 1), 0); /* no context at all */
        ck_assert_int_eq(cuCtxCreate_v2(&c, 0, 0), CUDA_SUCCESS);
        fd = chunk_fd(1, NULL);
        ck_assert_uint_eq(move(&slot, &fd, 1), 1);
        ck_assert(intact(1));
        ck_assert_int_eq(cuCtxPopCurrent_v2(&popped), CUDA_SUCCESS);
        ck_assert_int_eq(cuCtxDestroy_v2(c), CUDA_SUCCESS);
        teardown();
}
END_TEST

int main(void)
{
        Suite *s = suite_create("spill");
        TCase *tc = tcase_create("move");

        tcase_set_timeout(tc, 60);
        tcase_add_test(tc, test_to_host_and_back);
        tcase_add_test(tc, test_batch);
        tcase_add_test(tc, test_full_batch_both_ways);
        tcase_add_test(tc, test_waits_for_work_and_holds_launches);
        tcase_add_test(tc, test_bad_fd);
        tcase_add_test(tc, test_syncs_first);
        tcase_add_test(tc, test_map_back);
        tcase_add_loop_test(tc, test_batch_fault, 0, (int)(sizeof(batch_cases) / sizeof(batch_cases[0])));
        tcase_add_test(tc, test_contexts);
        tcase_add_test(tc, test_app_context_only);
        suite_add_tcase(s, tc);
        return gs_check_run(s);
}
