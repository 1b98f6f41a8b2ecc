/* check_vmm.c — the application's VMM allocations (gs_vmm) on the fake
 * driver: a GPU of 1 GiB carved whole into 32 chunks of 32 MiB (no
 * reserve), so the driver has no byte free unless the agent leaves one
 * free, and every test asserts that it never does after an operation. */
#include <pthread.h>
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/wait.h>

#include "gs_check.h"
#include "gs_check_gpu.h"
#include "gs_gpu.h"
#include "gs_log.h"
#include "gs_vmm.h"

#define MiB (UINT64_C(1) << 20)
#define CHUNK (32 * MiB)
#define NCHUNKS 32u
#define QUOTA 4u /* chunks: 128 MiB */

static struct gs_node ag;
static struct gs_gpu *g;
static struct gs_palloc *pa;
static struct gs_vmm_set set;

/* The agent calls these under the GPU's lock, which its scrubber thread
 * takes too: so do the tests. */
static int vmm_release(uint64_t id)
{
        gs_gpu_lock(g);
        int r = gs_vmm_release(g, &set, id);
        gs_gpu_unlock(g);
        return r;
}

static void vmm_clear(void)
{
        gs_gpu_lock(g);
        gs_vmm_clear(g, &set);
        gs_gpu_unlock(g);
}

static void palloc_stats(struct gs_palloc_stats *st)
{
        gs_gpu_lock(g);
        gs_palloc_stats(pa, st);
        gs_gpu_unlock(g);
}
static char state[64];

/* Fault injection: the driver refuses cuMemCreate of this size, with this
 * handle type (exported: chunks and VMM allocations; not: fillers). */
static __typeof__(cuMemCreate) *real_create;
static uint64_t fail_size;
static int fail_exported = -1; /* -1: either */

static CUresult CUDAAPI create_maybe_fail(CUmemGenericAllocationHandle *h, size_t size, const CUmemAllocationProp *prop,
                                          unsigned long long flags)
{
        int exported = prop && prop->requestedHandleTypes != CU_MEM_HANDLE_TYPE_NONE;

        if (fail_size && size == fail_size && (fail_exported < 0 || fail_exported == exported))
                return CUDA_ERROR_OUT_OF_MEMORY;
        return real_create(h, size, prop, flags);
}

static void setup_quota(uint32_t quota)
{
        gs_check_fakecuda_env(state, sizeof(state), "vmm", "1Gi");
        gs_log_init("check_vmm", GS_LOG_WARN);
        gs_config_defaults(&ag.cfg);
        ag.cfg.chunk_bytes = CHUNK;
        ag.cfg.unit_bytes = 2 * CHUNK;
        ag.cfg.reserve_bytes = 0;
        gs_check_cuda_open(&ag);
        real_create = ag.cu.mem_create;
        ag.cu.mem_create = create_maybe_fail;
        g = gs_check_gpu_open(&ag, NCHUNKS);
        gs_gpu_lock(g);
        int rn = gs_palloc_new(g->pool, quota, 0, &pa);
        gs_gpu_unlock(g);
        ck_assert_int_eq(rn, 0);
        memset(&set, 0, sizeof(set));
        set.pa = pa;
        set.nslots = 2 * quota;
}

static void setup(void)
{
        setup_quota(QUOTA);
}

static void teardown(void)
{
        unlink(state);
}

static uint64_t driver_free(void)
{
        size_t fr = 0, total = 0;

        ck_assert_int_eq(ag.cu.mem_get_info(&fr, &total), CUDA_SUCCESS);
        return fr;
}

static uint32_t held(void)
{
        struct gs_palloc_stats st;

        palloc_stats(&st);
        return st.chunks_held;
}

/* After every operation: the books agree, the driver has nothing free,
 * the quota holds, the pool is sound. */
#define check_state() check_state_at(__LINE__)
static void check_state_at(int line)
{
        char why[256] = "";

        int rv, rp;

        /* Under the GPU's lock: its scrubber thread moves chunks on the
         * free lists under it. */
        gs_gpu_lock(g);
        rv = gs_vmm_validate(g, &set, why, sizeof(why));
        rp = rv == 0 ? gs_pool_validate(g->pool, why, sizeof(why)) : 0;
        gs_gpu_unlock(g);
        ck_assert_msg(rv == 0 && rp == 0, "%s", why);
        ck_assert_msg(driver_free() == 0, "line %d: %llu bytes free in the driver", line,
                      (unsigned long long)driver_free());
        ck_assert_uint_le(held(), QUOTA);
}

static int create(uint64_t size, uint64_t *ret_id)
{
        int fd = -1, r;

        gs_gpu_lock(g);
        r = gs_vmm_create(g, &set, size, ret_id, &fd);
        gs_gpu_unlock(g);

        if (r == 0)
                ck_assert_int_ge(fd, 0);
        return r;
}

/* Mixed 2 and 20 MiB pieces (PyTorch's expandable segments, XLA): fill to
 * out of memory, release a random half, refill, many rounds.  Returns the
 * lowest fill reached, in bytes. */
static uint64_t mixed_rounds(unsigned seed, int rounds)
{
        static uint64_t ids[256], sizes[256];
        uint64_t live = 0, lowest = UINT64_MAX;
        unsigned n = 0;

        srand(seed);
        for (int round = 0; round < rounds; round++) {
                for (;;) {
                        uint64_t size = rand() % 2 ? 20 * MiB : 2 * MiB;
                        int r = create(size, &ids[n]);
                        if (r == -ENOMEM && size > 2 * MiB)
                                r = create(size = 2 * MiB, &ids[n]);
                        if (r == -ENOMEM)
                                break;
                        ck_assert_int_eq(r, 0);
                        ck_assert_uint_lt(n, 255);
                        sizes[n++] = size;
                        live += size;
                        check_state();
                }
                check_state();
                if (live < lowest)
                        lowest = live;
                for (unsigned i = 0; i < n;) {
                        if (rand() % 2) {
                                i++;
                                continue;
                        }
                        ck_assert_int_eq(vmm_release(ids[i]), 0);
                        live -= sizes[i];
                        ids[i] = ids[--n];
                        sizes[i] = sizes[n];
                        check_state();
                }
        }
        return lowest;
}

START_TEST(test_mixed_sizes_reach_the_quota)
{
        const uint64_t quota = (uint64_t)QUOTA * CHUNK;
        uint64_t lowest = UINT64_MAX;

        for (unsigned seed = 1; seed <= 4; seed++) {
                uint64_t l = mixed_rounds(seed, 25);
                if (l < lowest)
                        lowest = l;
                vmm_clear();
                check_state();
                ck_assert_uint_eq(held(), 0);
        }
        printf("check_vmm: mixed 2/20 MiB pieces, 100 fill/free-half/refill rounds: lowest fill "
               "%llu of %llu MiB (%.1f%%)\n",
               (unsigned long long)(lowest / MiB), (unsigned long long)(quota / MiB),
               100.0 * (double)lowest / (double)quota);
        ck_assert_msg(lowest * 100 >= quota * 95, "lowest fill %llu MiB of %llu", (unsigned long long)(lowest / MiB),
                      (unsigned long long)(quota / MiB));
}
END_TEST

START_TEST(test_released_space_reused_and_given_back)
{
        uint64_t a, b, c, d;

        /* 20 + 2 + 2 + 2 in one chunk; releasing the 20 lets a 20 in again,
         * without a second chunk. */
        ck_assert_int_eq(create(20 * MiB, &a), 0);
        ck_assert_int_eq(create(2 * MiB, &b), 0);
        ck_assert_int_eq(create(2 * MiB, &c), 0);
        ck_assert_int_eq(create(2 * MiB, &d), 0);
        ck_assert_uint_eq(held(), 1);
        ck_assert_int_eq(vmm_release(a), 0);
        check_state();
        ck_assert_uint_eq(held(), 1);
        ck_assert_int_eq(create(20 * MiB, &a), 0);
        ck_assert_uint_eq(held(), 1);
        /* Scattered 2 MiB holes make a 6 MiB piece. */
        ck_assert_int_eq(vmm_release(b), 0);
        ck_assert_int_eq(vmm_release(d), 0);
        ck_assert_int_eq(create(6 * MiB, &b), 0);
        ck_assert_uint_eq(held(), 1);
        check_state();
        /* A piece over the free bytes takes chunks for the difference only. */
        ck_assert_int_eq(create(40 * MiB, &d), 0);
        ck_assert_uint_eq(held(), 3);
        check_state();
        /* Two chunks' worth free: one chunk goes back. */
        ck_assert_int_eq(vmm_release(d), 0);
        check_state();
        ck_assert_uint_eq(held(), 2);
        /* Nothing live: every chunk goes back. */
        ck_assert_int_eq(vmm_release(a), 0);
        ck_assert_int_eq(vmm_release(b), 0);
        ck_assert_int_eq(vmm_release(c), 0);
        check_state();
        ck_assert_uint_eq(held(), 0);
        ck_assert_uint_eq(set.nfillers, 0);
        vmm_clear();
}
END_TEST

START_TEST(test_hostile_ops)
{
        const uint64_t quota = (uint64_t)QUOTA * CHUNK;
        uint64_t id = 0, big;

        ck_assert_int_eq(create(0, &id), -EINVAL);
        ck_assert_int_eq(create(MiB, &id), -EINVAL);
        ck_assert_int_eq(create(UINT64_MAX, &id), -EINVAL);
        ck_assert_int_eq(create(UINT64_MAX - 2 * MiB + 1, &id), -ENOMEM);
        ck_assert_int_eq(create((uint64_t)set.nslots * CHUNK + 2 * MiB, &id), -ENOMEM);
        ck_assert_int_eq(create(quota + 2 * MiB, &id), -ENOMEM);
        ck_assert_int_eq(vmm_release(0), -ENOENT);
        ck_assert_int_eq(vmm_release(UINT64_MAX), -ENOENT);
        check_state();
        ck_assert_uint_eq(held(), 0);
        /* Exactly the quota, then nothing more, and a refused create
         * changes nothing. */
        ck_assert_int_eq(create(quota - 2 * MiB, &big), 0);
        ck_assert_int_eq(create(2 * MiB, &id), 0);
        ck_assert_int_eq(create(2 * MiB, &id), -ENOMEM);
        ck_assert_int_eq(create(quota, &id), -ENOMEM);
        check_state();
        ck_assert_uint_eq(held(), QUOTA);
        ck_assert_int_eq(vmm_release(big), 0);
        ck_assert_int_eq(vmm_release(big), -ENOENT);
        check_state();
        vmm_clear();
        check_state();
        ck_assert_uint_eq(held(), 0);
}
END_TEST

/* A chunk that cannot be re-created while the process runs stays in the
 * set (its bytes covered by fillers) and goes back on a later operation. */
START_TEST(test_remake_fails_then_retried)
{
        uint64_t a;

        ck_assert_int_eq(create(2 * MiB, &a), 0);
        fail_size = CHUNK;
        fail_exported = 1;
        ck_assert_int_eq(vmm_release(a), 0);
        check_state();
        ck_assert_uint_eq(held(), 1);
        fail_size = 0;
        ck_assert_int_eq(create(2 * MiB, &a), 0);
        ck_assert_int_eq(vmm_release(a), 0);
        check_state();
        ck_assert_uint_eq(held(), 0);
        ck_assert_uint_eq(g->chunks_retired, 0);
}
END_TEST

/* Every operation retries a chunk that cannot be re-created: the warning
 * is logged once, not at every retry (issue 28: six times in a
 * millisecond per GPU), and its count when the chunk goes back at last. */
START_TEST(test_remake_fails_logged_once)
{
        int fd = gs_check_capture_stderr();
        uint64_t a;

        ck_assert_int_eq(create(2 * MiB, &a), 0);
        fail_size = CHUNK;
        fail_exported = 1;
        ck_assert_int_eq(vmm_release(a), 0);
        for (int i = 0; i < 6; i++) {
                ck_assert_int_eq(create(2 * MiB, &a), 0);
                ck_assert_int_eq(vmm_release(a), 0);
        }
        check_state();
        ck_assert_uint_eq(held(), 1);
        ck_assert_int_eq(gs_check_log_count(fd, "behind VMM allocations not re-created yet"), 1);
        fail_size = 0;
        ck_assert_int_eq(create(2 * MiB, &a), 0);
        ck_assert_int_eq(vmm_release(a), 0);
        ck_assert_uint_eq(held(), 0);
        ck_assert_int_eq(gs_check_log_count(fd, "behind VMM allocations not re-created yet"), 2);
        ck_assert_int_eq(gs_check_log_count(fd, "(retried later): "), 2);
        ck_assert_int_eq(gs_check_log_count(fd, ") (repeated "), 1); /* the count, when it went back */
        close(fd);
}
END_TEST

/* The application still maps what it released: the filler for it fails.
 * The bytes stay "pending" (a real driver still has them) and are covered
 * by the next operation once the driver lets go of them. */
START_TEST(test_released_but_still_mapped)
{
        uint64_t a, b;

        ck_assert_int_eq(create(20 * MiB, &a), 0);
        ck_assert_int_eq(create(2 * MiB, &b), 0);
        fail_size = 20 * MiB; /* the filler of the 20 MiB hole */
        fail_exported = 0;
        ck_assert_int_eq(vmm_release(a), 0);
        ck_assert_uint_eq(set.pending, 20 * MiB);
        /* 20 MiB really are free in the driver here: the fake's memory
         * goes with the handle.  A real driver would still hold them. */
        fail_size = 0;
        ck_assert_int_eq(create(2 * MiB, &a), 0);
        check_state();
        ck_assert_uint_eq(set.pending, 0);
        ck_assert_uint_eq(held(), 1);
        vmm_clear();
        check_state();
}
END_TEST

static uint32_t chunks_with_memory(void)
{
        uint32_t n = 0;

        for (uint32_t i = 0; i < g->nchunks; i++)
                n += g->chunks[i].fd >= 0;
        return n;
}

/* The process keeps the fd of what it released (a hostile process, issue
 * 28): its bytes stay pending, charged to the set while the process lives,
 * whatever comes next.  A create is served from the known-free bytes and
 * new chunks of the quota only, never from the released bytes (the driver
 * still has them), and the set gives back no chunk for them. */
/* A process other than the agent holds fd (as one the fd was sent to)
 * until let_go: a shell holding nothing else (a fork alone would keep
 * every mapping of the agent's). */
static pid_t holder;
static int holder_pipe = -1;

static void hold_fd(int fd)
{
        int p[2], q[2];
        char b;

        ck_assert_int_eq(pipe2(p, O_CLOEXEC), 0);
        ck_assert_int_eq(pipe2(q, O_CLOEXEC), 0);
        holder = fork();
        ck_assert_int_ge(holder, 0);
        if (holder == 0) {
                /* stdin: the pipe; fd 3: the memory, kept across exec. */
                if (dup2(p[0], 0) < 0 || dup2(q[1], 1) < 0 || dup2(fd, 3) < 0)
                        _exit(1);
                execl("/bin/sh", "sh", "-c", "echo; read x", (char *)NULL);
                _exit(1);
        }
        close(p[0]);
        close(q[1]);
        ck_assert_int_eq(read(q[0], &b, 1), 1); /* it holds the memory now */
        close(q[0]);
        holder_pipe = p[1];
}

static void let_go(void)
{
        int st;

        close(holder_pipe);
        ck_assert_int_eq(waitpid(holder, &st, 0), holder);
}

START_TEST(test_released_but_fd_kept)
{
        const uint64_t half = (uint64_t)QUOTA / 2 * CHUNK;
        uint64_t a, b, id;
        int fd = -1;

        gs_gpu_lock(g);
        ck_assert_int_eq(gs_vmm_create(g, &set, half, &a, &fd), 0);
        gs_gpu_unlock(g);
        hold_fd(fd);
        ck_assert_int_eq(vmm_release(a), 0);
        check_state();
        ck_assert_uint_eq(set.pending, half);
        ck_assert_uint_eq(held(), QUOTA / 2); /* nothing given back for it */
        /* The same size again: from new chunks of the quota. */
        ck_assert_int_eq(create(half, &b), 0);
        check_state();
        ck_assert_uint_eq(held(), QUOTA);
        ck_assert_uint_eq(set.pending, half);
        /* The quota is spent: released bytes do not serve a create. */
        ck_assert_int_eq(create(2 * MiB, &id), -ENOMEM);
        ck_assert_int_eq(vmm_release(b), 0);
        check_state();
        ck_assert_uint_eq(held(), QUOTA / 2);
        ck_assert_int_eq(create(half, &b), 0);
        ck_assert_int_eq(create(2 * MiB, &id), -ENOMEM);
        check_state();
        /* Once the fd is closed the bytes are free: the next operation
         * covers them and they serve again. */
        let_go();
        ck_assert_int_eq(vmm_release(b), 0);
        check_state();
        ck_assert_uint_eq(set.pending, 0);
        ck_assert_uint_eq(held(), 0);
        ck_assert_int_eq(create((uint64_t)QUOTA * CHUNK, &a), 0);
        check_state();
        vmm_clear();
        check_state();
        ck_assert_uint_eq(held(), 0);
        ck_assert_uint_eq(chunks_with_memory(), NCHUNKS);
}
END_TEST

/* At exit a chunk that cannot be re-created goes back to the allocation
 * without memory: nothing is retired (the pool keeps every chunk), and it is
 * re-created when next granted or recycled, once the driver has room. */
START_TEST(test_exit_remake_fails_retires)
{
        struct gs_pool_stats ps;
        struct gs_palloc_stats st;
        uint64_t a;
        char err[256];

        ck_assert_int_eq(create(60 * MiB, &a), 0);
        ck_assert_uint_eq(held(), 2);
        fail_size = CHUNK;
        fail_exported = 1;
        vmm_clear();
        fail_size = 0;
        ck_assert_uint_eq(held(), 0);
        ck_assert_uint_eq(g->chunks_retired, 0);
        gs_pool_stats(g->pool, &ps);
        ck_assert_uint_eq(ps.nchunks, NCHUNKS);
        ck_assert_uint_eq(chunks_with_memory(), NCHUNKS - 2);
        palloc_stats(&st);
        ck_assert_uint_eq(st.chunks_free, QUOTA);
        /* The injected failure stands for memory somebody else held; now
         * the fake has it free again: the chunks are re-created on demand. */
        ck_assert_uint_eq(driver_free(), 2 * CHUNK);
        for (uint32_t i = 0; i < g->nchunks; i++)
                if (g->chunks[i].fd < 0) {
                        gs_gpu_lock(g);
                        int rr = gs_gpu_chunk_remake(g, i, err, sizeof(err));
                        gs_gpu_unlock(g);
                        ck_assert_int_eq(rr, 0);
                }
        ck_assert_uint_eq(chunks_with_memory(), NCHUNKS);
}
END_TEST

/* No free pool chunk to take memory from (the allocation holds the whole
 * pool): the chunk goes back without memory; deleting the allocation
 * recycles it (re-created, or retired if that fails again). */
/* A GPU whose spill record never opened (no state dir) closes without
 * closing descriptor 0: the record's fd started as 0 in a zeroed gs_gpu. */
START_TEST(test_close_leaves_fd0)
{
        int fd0 = open("/dev/null", O_RDONLY | O_CLOEXEC);

        ck_assert_int_ge(fd0, 0);
        if (fd0 != 0) { /* make descriptor 0 ours to watch */
                ck_assert_int_eq(dup2(fd0, 0), 0);
                close(fd0);
        }
        gs_gpu_close(g);
        ck_assert_msg(fcntl(0, F_GETFD) != -1, "gs_gpu_close closed descriptor 0");
}
END_TEST

START_TEST(test_exit_remake_fails_no_free_chunk)
{
        uint64_t a;

        ck_assert_int_eq(create(2 * MiB, &a), 0);
        fail_size = CHUNK;
        fail_exported = 1;
        vmm_clear();
        ck_assert_uint_eq(chunks_with_memory(), NCHUNKS - 1);
        ck_assert_uint_eq(g->chunks_retired, 0);
        fail_size = 0;
        gs_gpu_lock(g);
        int rd = gs_palloc_del(pa);
        gs_gpu_unlock(g);
        ck_assert_int_eq(rd, 0);
        ck_assert_uint_eq(chunks_with_memory(), NCHUNKS);
        ck_assert_uint_eq(g->chunks_retired, 0);
        ck_assert_uint_eq(driver_free(), 0);
}
END_TEST

static void setup_whole_pool(void)
{
        setup_quota(NCHUNKS);
}

int main(void)
{
        Suite *s = suite_create("vmm");
        TCase *t = tcase_create("vmm");
        TCase *w = tcase_create("whole pool");

        tcase_add_checked_fixture(t, setup, teardown);
        tcase_set_timeout(t, 60);
        tcase_add_test(t, test_mixed_sizes_reach_the_quota);
        tcase_add_test(t, test_released_space_reused_and_given_back);
        tcase_add_test(t, test_hostile_ops);
        tcase_add_test(t, test_remake_fails_then_retried);
        tcase_add_test(t, test_remake_fails_logged_once);
        tcase_add_test(t, test_released_but_still_mapped);
        tcase_add_test(t, test_released_but_fd_kept);
        tcase_add_test(t, test_exit_remake_fails_retires);
        tcase_add_test(t, test_close_leaves_fd0);
        suite_add_tcase(s, t);
        tcase_add_checked_fixture(w, setup_whole_pool, teardown);
        tcase_add_test(w, test_exit_remake_fails_no_free_chunk);
        suite_add_tcase(s, w);
        return gs_check_run(s);
}
