/* gs_hook_qos.c — see gs_hook_qos.h. */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "gs_hook.h"
#include "gs_hook_conn.h"
#include "gs_hook_qos.h"
#include "gs_hook_qos_est.h"
#include "gs_hook_qos_foresee.h"
#include "gs_hook_qos_lc.h"
#include "gs_hook_qos_ring.h"

int gs_qos_active;

/* Written by the hook's thread under gs_conn.mu, read by any thread. */
static struct gs_qos_board *g_board; /* atomic; a board once mapped stays mapped */
static uint32_t g_cls, g_cap;        /* atomic */
static uint64_t g_gen = UINT64_MAX;  /* gs_conn.reconnects when last asked */
static uint32_t g_seen;              /* gs_shm.qos when last asked */
static ino_t g_board_ino;
static dev_t g_board_dev;

static unsigned long long g_held, g_held_ns; /* atomic */
static unsigned long long g_launches;        /* atomic: launches through the gate */
static unsigned long long g_launches_told;   /* gs_conn.mu: the last count published */
static int g_pub_busy;                       /* gs_conn.mu: the last publish saw new launches */
static int g_pub_sleeping;                   /* atomic: the thread sleeps until woken (no launches) */
static void (*g_wake_fn)(void);              /* wakes the hook's thread (gs_qos_set_wake_fn) */

/* GPU time of the launches QoS timed (gs_shm.qos_gpu_ns): written under
 * g_mu (a load and a store), read by the hook's thread. */
static unsigned long long g_gpu_ns; /* atomic */

void gs_qos_set_wake_fn(void (*fn)(void))
{
        g_wake_fn = fn;
}
static uint32_t g_duty; /* atomic: the agent's duty for our weight (gs_shm.qos_share) */

/* The weight among its class (gs_qos_weight; written as g_cls). */
static uint32_t g_weight = GS_QOS_WEIGHT_DEFAULT; /* atomic: 1..GS_QOS_WEIGHT_MAX */

static void qos_child(void);
static pthread_once_t g_fork_once = PTHREAD_ONCE_INIT;

static void qos_fork_register(void)
{
        (void)pthread_atfork(NULL, NULL, qos_child);
}

/* The real driver (gs_hook.h's table; all NULL without one: every caller
 * checks its members). */
static const struct gs_cu *qos_cu(void)
{
        static const struct gs_cu none;
        const struct gs_cu *c = gs_cu_get();

        pthread_once(&g_fork_once, qos_fork_register);
        return c ? c : &none;
}

/* ---- the board ---- */

/* Whether a board stamp at is within ms before now.  A stamp in the
 * future (past a millisecond: it may have been stamped since we read the
 * clock) is not, nor is 0 (never stamped). */
static int stamp_within(uint64_t at, uint64_t now, uint32_t ms)
{
        return at && at <= now + 1000000u && (at > now || now - at < (uint64_t)ms * 1000000u);
}

/* Whether a latency-critical process other than us has work in flight. */
static int lc_busy(const struct gs_qos_board *b, uint64_t now)
{
        uint32_t mine = gs_qos_lc_slot();

        for (uint32_t i = 0; i < GS_QOS_SLOTS; i++) {
                const struct gs_qos_slot *s = &b->slot[i];
                uint64_t at;

                if (i == mine || !__atomic_load_n(&s->up, __ATOMIC_ACQUIRE))
                        continue;
                at = __atomic_load_n(&s->stamp_ns, __ATOMIC_RELAXED);
                if (stamp_within(at, now, GS_QOS_STALE_MS)) /* else stale: ignored */
                        return 1;
        }
        return 0;
}

/* What slot s foresees (gs_hook_qos_foresee.h), each word on its own. */
static void slot_foreseen(const struct gs_qos_slot *s, struct gs_foresee_next *ret)
{
        ret->next_ns = __atomic_load_n(&s->fs_next_ns, __ATOMIC_ACQUIRE);
        ret->period_us = __atomic_load_n(&s->fs_period_us, __ATOMIC_RELAXED);
        ret->lead_us = __atomic_load_n(&s->fs_lead_us, __ATOMIC_RELAXED);
}

/* Whether a latency-critical process other than us launched (or had work
 * in flight) within GS_QOS_LC_RECENT_MS, or foresees a request within as
 * long: while one did, our queue is kept short for its next request; once
 * none did, nothing bounds it (a server gone idle costs its neighbours
 * nothing).  The switch is logged. */
static int lc_recent(const struct gs_qos_board *b, uint64_t now)
{
        static int was = -1; /* atomic: the last answer, for its log */
        uint32_t mine = gs_qos_lc_slot();
        struct gs_foresee_next pub;
        int recent = 0;

        for (uint32_t i = 0; i < GS_QOS_SLOTS && !recent; i++) {
                if (i == mine)
                        continue;
                recent =
                        stamp_within(__atomic_load_n(&b->slot[i].stamp_ns, __ATOMIC_RELAXED), now, GS_QOS_LC_RECENT_MS);
                if (!recent) { /* the stamp first: the foresight words only for a slot that is not */
                        slot_foreseen(&b->slot[i], &pub);
                        recent = gs_foresee_soon(&pub, now, (uint64_t)GS_QOS_LC_RECENT_MS * 1000000);
                }
        }
        if (__atomic_load_n(&was, __ATOMIC_RELAXED) != recent &&
            __atomic_exchange_n(&was, recent, __ATOMIC_RELAXED) != recent)
                gs_hook_debug(
                        recent ? "compute: latency-critical work on our GPU: our queue kept short"
                               : "compute: no latency-critical work on our GPU lately: our queue no longer kept short");
        return recent;
}

/* ---- admission: a bounded process's waits (its launches in flight:
 * gs_hook_qos_ring.h) ---- */

/* g_mu: one launch admitted at a time (its events, gs_hook_qos_ring.h,
 * recorded in launch order). */
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static uint64_t g_cur_est; /* the launch being admitted's (between before and after) */
static uint64_t g_cur_hi;
static int g_end_pending; /* the cap's events around the last capped launch */
static int64_t g_tokens_ns, g_refill_ns;

/* Only the forking thread lives on in the child: a launch another thread
 * was admitting held g_mu. */
static void qos_child(void)
{
        pthread_mutex_init(&g_mu, NULL);
        /* What the parent counted is the parent's (the child reports its
         * own, once it registers). */
        __atomic_store_n(&g_held, 0, __ATOMIC_RELAXED);
        __atomic_store_n(&g_held_ns, 0, __ATOMIC_RELAXED);
        __atomic_store_n(&g_gpu_ns, 0, __ATOMIC_RELAXED);
}

/* pre: g_mu.  ns more of GPU time counted (saturating). */
static void gpu_add(uint64_t ns)
{
        unsigned long long t = __atomic_load_n(&g_gpu_ns, __ATOMIC_RELAXED);

        __atomic_store_n(&g_gpu_ns, t + ns < t ? ULLONG_MAX : t + ns, __ATOMIC_RELAXED);
}

/* pre: g_mu.  The cap: the last launch's GPU time charged, then a wait
 * until the bucket is not in debt. */
static void cap_wait(const struct gs_cu *c, uint32_t cap)
{
        int64_t now = gs_mono_ns(), full = (int64_t)GS_QOS_CAP_WINDOW_MS * 1000000 * cap / 100;
        float ms = 0;

        if (g_end_pending) {
                /* Its measure needs it complete; a launch that never ends is
                 * not waited for past a second (fail open). */
                gs_qos_wait_event(c, gs_qos_ring_cap_end(), now + 1000000000);
                if (c->event_elapsed_time(&ms, gs_qos_ring_cap_start(), gs_qos_ring_cap_end()) == CUDA_SUCCESS &&
                    ms > 0) {
                        g_tokens_ns -= (int64_t)(ms * 1e6);
                        gpu_add((uint64_t)(ms * 1e6));
                }
                g_end_pending = 0;
                now = gs_mono_ns();
        }
        if (g_refill_ns == 0)
                g_tokens_ns = 0, g_refill_ns = now;
        g_tokens_ns += (now - g_refill_ns) * cap / 100;
        g_refill_ns = now;
        if (g_tokens_ns > full)
                g_tokens_ns = full;
        if (g_tokens_ns < 0) {
                int64_t need = -g_tokens_ns * 100 / cap;
                struct timespec ts = { need / 1000000000, need % 1000000000 };
                nanosleep(&ts, NULL);
                __atomic_add_fetch(&g_held, 1, __ATOMIC_RELAXED);
                __atomic_add_fetch(&g_held_ns, (unsigned long long)need, __ATOMIC_RELAXED);
                now = gs_mono_ns();
                g_tokens_ns += (now - g_refill_ns) * cap / 100;
                g_refill_ns = now;
        }
}

/* What the latency-critical processes other than us foresee for a launch
 * of est ns with inflight ns of ours on the GPU (gs_foresee_decide): the
 * most any says (HOLD over DRAIN over ADMIT over NONE; ADMIT and NONE
 * both leave the plain bound).  The first hold is logged. */
static enum gs_foresee_do foresee(const struct gs_qos_board *b, uint64_t now, uint64_t inflight, uint64_t est)
{
        static int logged; /* atomic */
        enum gs_foresee_do worst = GS_FORESEE_NONE;
        uint32_t mine = gs_qos_lc_slot();
        struct gs_foresee_next pub;

        for (uint32_t i = 0; i < GS_QOS_SLOTS; i++) {
                enum gs_foresee_do d;

                if (i == mine)
                        continue;
                slot_foreseen(&b->slot[i], &pub);
                d = gs_foresee_decide(&pub, now, inflight, est);
                if (d > worst)
                        worst = d;
        }
        if (worst == GS_FORESEE_HOLD && !__atomic_load_n(&logged, __ATOMIC_RELAXED) &&
            !__atomic_exchange_n(&logged, 1, __ATOMIC_RELAXED))
                gs_hook_debug("compute: a latency-critical request foreseen: our launches make way before it");
        return worst;
}

/* pre: g_mu.  Beside a latency-critical process (b): the launch running
 * and, queued behind it, what fills queue_us of GPU time with this launch
 * (est ns), by each launch's measured time (its kind's: the GEMMs of a
 * training step take a hundred times its elementwise kernels, so a count
 * of launches bounds nothing); nothing that may still run (hi ns, the
 * high estimates) when its next request is foreseen; none new while its
 * flag is up (bounded).  Without one (a duty, the backlog bound): the
 * same by time, as a count of launches bounds nothing either (a duty's
 * queue of 63 launches at the least time any took held a training step's
 * GEMMs for about 10 ms: it drained past the duty's window and the
 * weight-30 trainer of two had 46 % on an H200). */
static void lc_wait(const struct gs_cu *c, const struct gs_qos_board *b, uint64_t queue_us, uint64_t est, uint64_t hi)
{
        int64_t t0 = gs_mono_ns(), deadline = t0 + (int64_t)GS_QOS_MAX_WAIT_MS * 1000000;
        int held = 0;

        for (;;) {
                uint64_t now;
                enum gs_foresee_do d;
                int full;

                gs_qos_ring_done(c);
                /* A sample as soon as its launch is seen done (not
                 * after a request we then held for). */
                gs_qos_ring_sample(c);
                now = (uint64_t)gs_mono_ns();
                if ((int64_t)now >= deadline)
                        break;
                full = gs_qos_ring_full();
                /* A request foreseen: nothing that would not end
                 * before it; what would, within the plain bound. */
                d = full ? GS_FORESEE_DRAIN : b ? foresee(b, now, gs_qos_ring_inflight_hi(now), hi) : GS_FORESEE_NONE;
                if (d == GS_FORESEE_HOLD) {
                        held = 1;
                        gs_qos_nap_us(GS_QOS_POLL_US);
                        continue;
                }
                if (d != GS_FORESEE_DRAIN && (gs_qos_ring_idle() || gs_qos_ring_queued_ns() + est <= queue_us * 1000))
                        break;
                gs_qos_ring_wait_oldest(c, deadline);
        }
        while (b && lc_busy(b, (uint64_t)gs_mono_ns()) && gs_mono_ns() < deadline) {
                held = 1;
                gs_qos_nap_us(GS_QOS_POLL_US);
                gs_qos_ring_sample(c);
        }
        if (held) {
                __atomic_add_fetch(&g_held, 1, __ATOMIC_RELAXED);
                __atomic_add_fetch(&g_held_ns, (unsigned long long)(gs_mono_ns() - t0), __ATOMIC_RELAXED);
        }
}

/* A weight's duty d (gs_shm.qos_share): the process is to have work on
 * the GPU d % of each GS_QOS_DUTY_PERIOD_MS P (of CLOCK_MONOTONIC), so that
 * the others it competes with run alone the rest of it.  What it queued
 * drains after it stops launching, at the speed of one context among two
 * (the driver's equal turns): it keeps at most Q = min(GS_QOS_DUTY_QUEUE_US,
 * dP / 4) queued and launches only in the first dP - 2Q of the period, so
 * that its work is on the GPU about dP of it. */
static uint64_t duty_queue_us(uint32_t duty)
{
        uint64_t us = (uint64_t)GS_QOS_DUTY_PERIOD_MS * 1000 * duty / 100 / 4;

        return us < GS_QOS_DUTY_QUEUE_US ? us : GS_QOS_DUTY_QUEUE_US;
}

/* pre: g_mu.  Waits for the next period if the launch window is past. */
static void duty_wait(uint32_t duty)
{
        int64_t period = (int64_t)GS_QOS_DUTY_PERIOD_MS * 1000000, now = gs_mono_ns();
        int64_t phase = now % period, wait = period - phase;
        int64_t window = period * duty / 100 - 2 * (int64_t)duty_queue_us(duty) * 1000;
        struct timespec ts = { 0, wait };

        if (phase < window)
                return;
        nanosleep(&ts, NULL);
        __atomic_add_fetch(&g_held, 1, __ATOMIC_RELAXED);
        __atomic_add_fetch(&g_held_ns, (unsigned long long)wait, __ATOMIC_RELAXED);
}

/* Cookies: what after has to do. */
enum { QC_NONE = 0, QC_LC = 1, QC_RING = 2, QC_CAP = 4 };

int gs_qos_before_slow(CUstream s, CUfunction f, uint64_t shape)
{
        const struct gs_qos_board *b = __atomic_load_n(&g_board, __ATOMIC_ACQUIRE);
        uint32_t cap = __atomic_load_n(&g_cap, __ATOMIC_RELAXED), duty = __atomic_load_n(&g_duty, __ATOMIC_RELAXED);
        const struct gs_cu *c;
        CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
        CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
        int ck = 0, ring = 0, lc, reg, backlog;
        uint32_t cls;
        size_t h;

        __atomic_add_fetch(&g_launches, 1, __ATOMIC_RELAXED);
        /* The first launch after a quiet spell wakes the thread, which
         * then publishes the count while launches go on. */
        if (__atomic_load_n(&g_pub_sleeping, __ATOMIC_RELAXED) &&
            __atomic_exchange_n(&g_pub_sleeping, 0, __ATOMIC_RELAXED) && g_wake_fn)
                g_wake_fn();
        if (duty >= 100)
                duty = 0;
        if (gs_qos_lc_is()) {
                /* Nobody to protect it from: nothing to track. */
                if (!gs_qos_lc_tracking())
                        return QC_NONE;
                c = qos_cu();
                /* Work captured into a graph does not run now. */
                if (c->stream_is_capturing && c->stream_is_capturing(s, &st) == CUDA_SUCCESS &&
                    st != CU_STREAM_CAPTURE_STATUS_NONE)
                        return QC_NONE;
                gs_qos_lc_launching();
                return QC_LC;
        }
        cls = __atomic_load_n(&g_cls, __ATOMIC_RELAXED);
        /* The backlog: a best-effort process, and any a latency-critical
         * one may hold while one is registered, keep what they queue
         * within GS_QOS_BACKLOG_US, as what is queued when a latency-critical
         * request comes cannot be taken back (docs/compute.md "The
         * backlog"); beside one that launched lately, GS_QOS_QUEUE_US. */
        reg = b && cls != GS_QOS_LATENCY && __atomic_load_n(&b->nlc, __ATOMIC_ACQUIRE) > 0;
        backlog = reg || cls == GS_QOS_BEST_EFFORT;
        lc = reg && lc_recent(b, (uint64_t)gs_mono_ns());
        ring = lc || duty || backlog;
        if (!ring && !cap)
                return QC_NONE;
        c = qos_cu();
        /* Work captured into a graph does not run now: never held. */
        if (c->stream_is_capturing && c->stream_is_capturing(s, &st) == CUDA_SUCCESS &&
            st != CU_STREAM_CAPTURE_STATUS_NONE)
                return QC_NONE;
        pthread_mutex_lock(&g_mu);
        h = gs_qos_est_kind(c, f, shape);
        if (gs_qos_est_nccl(h)) {
                pthread_mutex_unlock(&g_mu);
                return QC_NONE;
        }
        /* Our event calls must not break another thread's global capture. */
        if (c->thread_exchange_stream_capture_mode)
                (void)c->thread_exchange_stream_capture_mode(&mode);
        if (!gs_qos_ring_ready(c)) {
                if (c->thread_exchange_stream_capture_mode)
                        (void)c->thread_exchange_stream_capture_mode(&mode);
                pthread_mutex_unlock(&g_mu);
                return QC_NONE;
        }
        if (cap) {
                cap_wait(c, cap);
                if (c->event_record(gs_qos_ring_cap_start(), s) == CUDA_SUCCESS)
                        ck |= QC_CAP;
        }
        if (duty)
                duty_wait(duty);
        if (ring) {
                /* Beside latency-critical work: GS_QOS_QUEUE_US queued;
                 * for a duty only, enough for the driver's turns. */
                g_cur_est = gs_qos_est_ns(h);
                g_cur_hi = gs_qos_est_hi(h);
                lc_wait(c, lc ? b : NULL,
                        lc     ? GS_QOS_QUEUE_US
                        : duty ? duty_queue_us(duty)
                               : GS_QOS_BACKLOG_US,
                        g_cur_est, g_cur_hi);
                ck |= QC_RING;
                gs_qos_ring_sample_before(c, s, h, f, shape);
        }
        if (c->thread_exchange_stream_capture_mode)
                (void)c->thread_exchange_stream_capture_mode(&mode);
        /* g_mu stays held until after: the events are recorded in launch
         * order. */
        if (!ck)
                pthread_mutex_unlock(&g_mu);
        return ck;
}

void gs_qos_after_slow(int ck, CUstream s, CUresult r)
{
        const struct gs_cu *c;
        CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;

        if (ck == QC_LC) {
                gs_qos_lc_launched(s, r);
                return;
        }
        c = qos_cu();
        if (c->thread_exchange_stream_capture_mode)
                (void)c->thread_exchange_stream_capture_mode(&mode);
        if (r == CUDA_SUCCESS && (ck & QC_RING) && gs_qos_ring_record(c, s, g_cur_est, g_cur_hi)) {
                /* A capped launch's own measure is counted by cap_wait. */
                if (!(ck & QC_CAP))
                        gpu_add(g_cur_est);
        }
        if (r == CUDA_SUCCESS && (ck & QC_CAP))
                g_end_pending = c->event_record(gs_qos_ring_cap_end(), s) == CUDA_SUCCESS;
        if (c->thread_exchange_stream_capture_mode)
                (void)c->thread_exchange_stream_capture_mode(&mode);
        pthread_mutex_unlock(&g_mu);
}

/* ---- synchronize: a latency-critical process's work is done ---- */

GS_HOOK_API CUresult CUDAAPI cuStreamSynchronize(CUstream s)
{
        const struct gs_cu *c = qos_cu();
        CUresult r = c->stream_synchronize ? c->stream_synchronize(s) : CUDA_ERROR_NOT_SUPPORTED;

        if (r == CUDA_SUCCESS)
                gs_qos_lc_synced();
        return r;
}

GS_HOOK_API CUresult CUDAAPI cuStreamSynchronize_ptsz(CUstream s)
{
        const struct gs_cu *c = qos_cu();
        CUresult r = c->stream_synchronize_ptsz ? c->stream_synchronize_ptsz(s) : CUDA_ERROR_NOT_SUPPORTED;

        if (r == CUDA_SUCCESS)
                gs_qos_lc_synced();
        return r;
}

GS_HOOK_API CUresult CUDAAPI cuCtxSynchronize(void)
{
        const struct gs_cu *c = qos_cu();
        CUresult r = c->ctx_synchronize ? c->ctx_synchronize() : CUDA_ERROR_NOT_SUPPORTED;

        if (r == CUDA_SUCCESS)
                gs_qos_lc_synced();
        return r;
}

GS_HOOK_API CUresult CUDAAPI cuEventSynchronize(CUevent e)
{
        const struct gs_cu *c = qos_cu();
        CUresult r = c->event_synchronize ? c->event_synchronize(e) : CUDA_ERROR_NOT_SUPPORTED;

        if (r == CUDA_SUCCESS)
                gs_qos_lc_synced();
        return r;
}

/* ---- the policy, from the agent ---- */

/* pre: gs_conn.mu.  Maps the board fd (size bytes), writable if w; the
 * board we have if it is the same file. */
static struct gs_qos_board *board_map(int fd, uint64_t size, int w)
{
        struct gs_qos_board *cur = __atomic_load_n(&g_board, __ATOMIC_ACQUIRE), *b;
        struct stat st;

        if (size != sizeof(struct gs_qos_board) || fstat(fd, &st) < 0 || (uint64_t)st.st_size < size)
                return NULL;
        if (cur && st.st_ino == g_board_ino && st.st_dev == g_board_dev && (!w || gs_qos_lc_is()))
                return cur;
        b = mmap(NULL, sizeof(*b), PROT_READ | (w ? PROT_WRITE : 0), MAP_SHARED, fd, 0);
        if (b == MAP_FAILED)
                return NULL;
        if (b->magic != GS_QOS_MAGIC || b->nslots != GS_QOS_SLOTS) {
                munmap(b, sizeof(*b));
                return NULL;
        }
        /* The board we had stays mapped: another thread may be reading
         * it.  A new one comes only with a new agent or class. */
        g_board_ino = st.st_ino;
        g_board_dev = st.st_dev;
        return b;
}

void gs_qos_serve(void)
{
        struct gs_ring_msg rep;
        struct gs_sock_grant m;
        struct gs_qos_board *b;
        uint32_t seen;
        ssize_t n;
        uint32_t weight;
        int fd = -1, w;

        if (!(gs_conn.features & GS_FEAT_QOS) || !gs_conn.shm || gs_conn.ngpus == 0)
                return;
        seen = __atomic_load_n(&gs_conn.shm->qos, __ATOMIC_ACQUIRE);
        if (g_gen == gs_conn.reconnects && seen == g_seen)
                return;
        g_gen = gs_conn.reconnects;
        g_seen = seen;
        if (gs_conn_call(GS_OP_QOS, 0, 0, 0, &rep) < 0)
                return; /* the connection is gone */
        if (rep.status != 0) {
                gs_hook_debug("the agent refused GS_OP_QOS: %d", rep.status);
                return;
        }
        n = gs_conn_recv_fd(&m, sizeof(m), &fd);
        if (n < 0 || !gs_msg_hdr_ok(&m.h, GS_SOCK_QOS, sizeof(m), n) || fd < 0 || m.seq != rep.seq) {
                if (fd >= 0)
                        close(fd);
                gs_conn_lost("malformed compute policy");
                return;
        }
        w = rep.arg[2] < GS_QOS_SLOTS;
        b = board_map(fd, rep.arg[3], w);
        close(fd);
        if (!b || rep.arg[0] > GS_QOS_BEST_EFFORT || rep.arg[1] > 100) {
                gs_hook_debug("the agent's compute policy is unusable: running without QoS");
                return;
        }
        /* The weight: the agent is trusted, but whatever it sends stays
         * in 1..GS_QOS_WEIGHT_MAX (0: an agent that does not send it). */
        weight = rep.ret4 >= 1 && rep.ret4 <= GS_QOS_WEIGHT_MAX ? (uint32_t)rep.ret4 : GS_QOS_WEIGHT_DEFAULT;
        if (rep.ret4 > GS_QOS_WEIGHT_MAX)
                gs_hook_debug("the agent's compute weight %llu is out of range: %u applies",
                              (unsigned long long)rep.ret4, GS_QOS_WEIGHT_DEFAULT);
        /* A slot we leave is lowered first. */
        gs_qos_lc_set(b, w ? (uint32_t)rep.arg[2] : GS_QOS_NO_SLOT);
        __atomic_store_n(&g_board, b, __ATOMIC_RELEASE);
        __atomic_store_n(&g_cls, (uint32_t)rep.arg[0], __ATOMIC_RELAXED);
        __atomic_store_n(&g_cap, (uint32_t)rep.arg[1], __ATOMIC_RELAXED);
        __atomic_store_n(&g_weight, weight, __ATOMIC_RELAXED);
        __atomic_store_n(&gs_qos_active, 1, __ATOMIC_RELAXED);
        gs_hook_debug("compute: class %u, cap %u, weight %u, slot %d", (unsigned)rep.arg[0], (unsigned)rep.arg[1],
                      weight, w ? (int)rep.arg[2] : -1);
}

int gs_qos_publish_ms(void)
{
        if (!__atomic_load_n(&gs_qos_active, __ATOMIC_RELAXED))
                return -1;
        if (g_pub_busy || __atomic_load_n(&g_launches, __ATOMIC_RELAXED) != g_launches_told)
                return GS_QOS_LAUNCH_PUBLISH_MS;
        __atomic_store_n(&g_pub_sleeping, 1, __ATOMIC_RELAXED);
        return gs_qos_may_hold() ? GS_QOS_PUBLISH_MS : -1;
}

int gs_qos_may_hold(void)
{
        const struct gs_qos_board *b = __atomic_load_n(&g_board, __ATOMIC_ACQUIRE);

        return __atomic_load_n(&g_cap, __ATOMIC_RELAXED) ||
               (b && __atomic_load_n(&g_cls, __ATOMIC_RELAXED) != GS_QOS_LATENCY &&
                __atomic_load_n(&b->nlc, __ATOMIC_RELAXED) > 0);
}

void gs_qos_publish(void)
{
        unsigned long long n = __atomic_load_n(&g_launches, __ATOMIC_RELAXED);

        if (!gs_conn.shm || !__atomic_load_n(&gs_qos_active, __ATOMIC_RELAXED))
                return;
        uint32_t duty = __atomic_load_n(&gs_conn.shm->qos_share, __ATOMIC_ACQUIRE);
        if (duty != __atomic_load_n(&g_duty, __ATOMIC_RELAXED))
                gs_hook_debug("compute: the agent's duty for our weight: %u %%", (unsigned)duty);
        __atomic_store_n(&g_duty, duty, __ATOMIC_RELAXED);
        __atomic_store_n(&gs_conn.shm->qos_launches, (uint64_t)n, __ATOMIC_RELAXED);
        g_pub_busy = n != g_launches_told;
        g_launches_told = n;
        __atomic_store_n(&gs_conn.shm->qos_held, (uint64_t)__atomic_load_n(&g_held, __ATOMIC_RELAXED),
                         __ATOMIC_RELAXED);
        __atomic_store_n(&gs_conn.shm->qos_held_ns, (uint64_t)__atomic_load_n(&g_held_ns, __ATOMIC_RELAXED),
                         __ATOMIC_RELAXED);
        __atomic_store_n(&gs_conn.shm->qos_gpu_ns, (uint64_t)__atomic_load_n(&g_gpu_ns, __ATOMIC_RELAXED),
                         __ATOMIC_RELAXED);
}

unsigned gs_qos_weight(void)
{
        return __atomic_load_n(&g_weight, __ATOMIC_RELAXED);
}

void gs_qos_stats(unsigned *cls, unsigned *cap, unsigned long long *held, unsigned long long *held_ns)
{
        *cls = __atomic_load_n(&g_cls, __ATOMIC_RELAXED);
        *cap = __atomic_load_n(&g_cap, __ATOMIC_RELAXED);
        *held = __atomic_load_n(&g_held, __ATOMIC_RELAXED);
        *held_ns = __atomic_load_n(&g_held_ns, __ATOMIC_RELAXED);
}
