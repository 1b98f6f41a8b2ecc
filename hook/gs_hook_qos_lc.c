/* gs_hook_qos_lc.c — see gs_hook_qos_lc.h. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>

#include "gs_hook.h"
#include "gs_hook_qos_foresee.h"
#include "gs_hook_qos_lc.h"
#include "gs_util.h"

/* Written by the hook's thread under gs_conn.mu, read by any thread. */
static struct gs_qos_board *g_board;     /* atomic; a board once mapped stays mapped */
static uint32_t g_slot = GS_QOS_NO_SLOT; /* atomic */

/* The streams' last launches.  g_mu guards the table, g_launching and the
 * thread's state; the flag's words are atomics. */
struct lc_stream {
        CUcontext ctx;
        CUstream s;
        CUevent ev;
        int pending; /* ev recorded after the stream's last launch, not seen done */
};
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_cv = PTHREAD_COND_INITIALIZER;
static struct lc_stream g_st[GS_QOS_LC_STREAMS];
static unsigned g_npending;
static unsigned g_launching; /* launches between launching() and launched() */
static int g_untracked;      /* a launch whose end no event marks: lowered only by a synchronize */
static int g_thread;         /* 0 not started, 1 running, -1 cannot start */
static CUcontext g_poll_ctx; /* the poller's current context */
static int g_busy;           /* work of ours since the flag was last lowered */
static uint64_t g_down_ns;   /* when it was (0: never) */
static struct gs_foresee g_fs;
static int g_fs_on; /* the last arrival published a next one (for the log) */
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void lc_child(void)
{
        /* Only the forking thread lives on: the poller is gone, and the
         * events belong to the parent's contexts. */
        pthread_mutex_init(&g_mu, NULL);
        pthread_cond_init(&g_cv, NULL);
        memset(g_st, 0, sizeof(g_st));
        g_npending = g_launching = 0;
        g_untracked = 0;
        g_thread = 0;
        g_poll_ctx = NULL;
        g_busy = 0;
        g_down_ns = 0;
        memset(&g_fs, 0, sizeof(g_fs));
        g_fs_on = 0;
}

static void lc_fork_register(void)
{
        (void)pthread_atfork(NULL, NULL, lc_child);
}

/* The real driver (gs_hook.h's table; all NULL without one: every caller
 * checks its members). */
static const struct gs_cu *lc_cu(void)
{
        static const struct gs_cu none;
        const struct gs_cu *c = gs_cu_get();

        pthread_once(&g_once, lc_fork_register);
        return c ? c : &none;
}

static void flag(uint32_t up)
{
        struct gs_qos_board *b = __atomic_load_n(&g_board, __ATOMIC_ACQUIRE);
        uint32_t s = __atomic_load_n(&g_slot, __ATOMIC_RELAXED);

        if (!b || s >= GS_QOS_SLOTS)
                return;
        if (up)
                __atomic_store_n(&b->slot[s].stamp_ns, (uint64_t)gs_mono_ns(), __ATOMIC_RELAXED);
        if (__atomic_load_n(&b->slot[s].up, __ATOMIC_RELAXED) != up)
                __atomic_store_n(&b->slot[s].up, up, __ATOMIC_RELEASE);
}

void gs_qos_lc_set(struct gs_qos_board *b, uint32_t slot)
{
        if (slot != __atomic_load_n(&g_slot, __ATOMIC_RELAXED))
                flag(0);
        __atomic_store_n(&g_slot, slot < GS_QOS_SLOTS ? slot : GS_QOS_NO_SLOT, __ATOMIC_RELAXED);
        __atomic_store_n(&g_board, b, __ATOMIC_RELEASE);
}

int gs_qos_lc_is(void)
{
        return __atomic_load_n(&g_slot, __ATOMIC_RELAXED) < GS_QOS_SLOTS;
}

uint32_t gs_qos_lc_slot(void)
{
        return __atomic_load_n(&g_slot, __ATOMIC_RELAXED);
}

static int g_tracking = 1; /* atomic: the last answer of gs_qos_lc_tracking, for its log */

int gs_qos_lc_tracking(void)
{
        struct gs_qos_board *b = __atomic_load_n(&g_board, __ATOMIC_ACQUIRE);
        uint64_t until = b ? __atomic_load_n(&b->idle_until_ns, __ATOMIC_ACQUIRE) : 0, now;
        int track = 1;

        if (until) {
                /* A time past (the agent gone or late) or too far ahead
                 * (another clock): tracked, as without the field. */
                now = (uint64_t)gs_mono_ns();
                track = !(now < until && until - now <= 2ull * GS_QOS_IDLE_LEASE_MS * 1000000u);
        }
        if (__atomic_load_n(&g_tracking, __ATOMIC_RELAXED) != track &&
            __atomic_exchange_n(&g_tracking, track, __ATOMIC_RELAXED) != track)
                gs_hook_debug(track ? "compute: a process to hold launches on our GPU: tracking our work"
                                    : "compute: no process to hold launched on our GPU lately: our work untracked");
        return track;
}

/* pre: g_mu.  Looks at the pending events: lowers the flag when all is
 * done, stamps it again while work is left.  The number still pending.
 * own: on the poller's thread, which makes each event's context current
 * first (never done to an application's thread). */
static unsigned lc_look(int own)
{
        const struct gs_cu *c = lc_cu();
        for (unsigned i = 0; i < GS_QOS_LC_STREAMS && g_npending; i++) {
                if (!g_st[i].pending)
                        continue;
                if (own && g_poll_ctx != g_st[i].ctx && c->ctx_set_current &&
                    c->ctx_set_current(g_st[i].ctx) == CUDA_SUCCESS)
                        g_poll_ctx = g_st[i].ctx;
                if (c->event_query(g_st[i].ev) != CUDA_ERROR_NOT_READY) {
                        g_st[i].pending = 0;
                        g_npending--;
                }
        }
        if (g_npending || g_launching) {
                flag(1);
        } else if (!g_untracked) {
                flag(0);
                if (g_busy) {
                        g_busy = 0;
                        g_down_ns = (uint64_t)gs_mono_ns();
                }
        }
        return g_npending;
}

/* pre: g_mu.  lc_look on an application's thread, in relaxed capture
 * mode for the time of it (another thread may be capturing). */
static void lc_look_relaxed(void)
{
        const struct gs_cu *c = lc_cu();
        CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;

        if (c->thread_exchange_stream_capture_mode)
                (void)c->thread_exchange_stream_capture_mode(&mode);
        lc_look(0);
        if (c->thread_exchange_stream_capture_mode)
                (void)c->thread_exchange_stream_capture_mode(&mode);
}

static void *lc_main(void *arg)
{
        const struct gs_cu *c = lc_cu();
        struct timespec nap = { 0, GS_QOS_LC_POLL_US * 1000 };

        (void)arg;
        (void)pthread_setname_np(pthread_self(), "gshare-qos");
        /* Its naps are GS_QOS_LC_POLL_US, not that plus the default 50 µs
         * of timer slack (this thread's own setting). */
        (void)prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
        /* Its event queries are not "unsafe" calls to another thread's
         * capture: in the default (global) mode, an H200 invalidated the
         * CUDA graph PyTorch was capturing meanwhile. */
        if (c->thread_exchange_stream_capture_mode) {
                CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
                (void)c->thread_exchange_stream_capture_mode(&mode);
        }
        pthread_mutex_lock(&g_mu);
        for (;;) {
                while (!g_npending)
                        pthread_cond_wait(&g_cv, &g_mu);
                lc_look(1);
                pthread_mutex_unlock(&g_mu);
                nanosleep(&nap, NULL);
                pthread_mutex_lock(&g_mu);
        }
        return NULL;
}

/* pre: g_mu.  The poller, once. */
static void lc_start(void)
{
        sigset_t all, old;
        pthread_attr_t attr;
        pthread_t t;
        int rc;

        if (g_thread)
                return;
        g_thread = -1;
        sigfillset(&all);
        pthread_sigmask(SIG_SETMASK, &all, &old); /* signals are the application's */
        rc = pthread_attr_init(&attr);
        if (rc == 0) {
                (void)pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
                rc = pthread_create(&t, &attr, lc_main, NULL);
                pthread_attr_destroy(&attr);
        }
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        if (rc == 0)
                g_thread = 1;
        else
                gs_hook_debug("compute: cannot start the latency-critical poller (%s): the flag comes down at "
                              "synchronize calls or goes stale",
                              strerror(rc));
}

/* pre: g_mu.  The entry for (ctx, s): its own, a free one (its event made
 * in ctx), or one whose work is done; NULL when all are pending. */
static struct lc_stream *lc_entry(CUcontext ctx, CUstream s)
{
        const struct gs_cu *c = lc_cu();
        struct lc_stream *idle = NULL;

        for (unsigned i = 0; i < GS_QOS_LC_STREAMS; i++) {
                struct lc_stream *e = &g_st[i];

                if (e->ev && e->ctx == ctx && e->s == s)
                        return e;
                if (!e->ev && !idle)
                        idle = e;
        }
        if (!idle)
                for (unsigned i = 0; i < GS_QOS_LC_STREAMS && !idle; i++)
                        if (!g_st[i].pending)
                                idle = &g_st[i];
        if (!idle)
                return NULL;
        if (idle->ev && idle->ctx != ctx) {
                (void)c->event_destroy_v2(idle->ev);
                idle->ev = NULL;
        }
        if (!idle->ev && c->event_create(&idle->ev, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) {
                idle->ev = NULL;
                return NULL;
        }
        idle->ctx = ctx;
        idle->s = s;
        return idle;
}

/* pre: g_mu, before a launch.  Whether it starts work after a pause
 * (GS_FORESEE_GAP_US with nothing of ours on the GPU): a request's
 * arrival.  g_busy is set at each launch and cleared only where the flag
 * is lowered, with nothing launching, pending or untracked. */
static int lc_is_arrival(uint64_t now)
{
        return !g_busy && (!g_down_ns || now - g_down_ns >= GS_FORESEE_GAP_US * 1000ull);
}

/* pre: g_mu, our flag raised (a reader that sees the next request moved
 * on sees the flag of this one).  A request's arrival at now, learnt; the
 * next one foreseen published in our slot (0: irregular), for the others
 * to make way. */
static void lc_arrival(uint64_t now)
{
        struct gs_qos_board *b = __atomic_load_n(&g_board, __ATOMIC_ACQUIRE);
        uint32_t s = __atomic_load_n(&g_slot, __ATOMIC_RELAXED);
        struct gs_foresee_next nx;

        gs_foresee_arrival(&g_fs, now, &nx);
        if (!b || s >= GS_QOS_SLOTS)
                return;
        /* The period and lead before the time: a reader that sees the new
         * time sees them (or, torn, a set it bounds anyway). */
        __atomic_store_n(&b->slot[s].fs_period_us, nx.period_us, __ATOMIC_RELAXED);
        __atomic_store_n(&b->slot[s].fs_lead_us, nx.lead_us, __ATOMIC_RELAXED);
        __atomic_store_n(&b->slot[s].fs_next_ns, nx.next_ns, __ATOMIC_RELEASE);
        if (!!nx.next_ns != g_fs_on) {
                g_fs_on = !!nx.next_ns;
                if (g_fs_on)
                        gs_hook_debug("compute: our requests come every %u us: the next foreseen, %u us lead",
                                      (unsigned)nx.period_us, (unsigned)nx.lead_us);
                else
                        gs_hook_debug("compute: our requests come at irregular times: nothing foreseen");
        }
}

void gs_qos_lc_launching(void)
{
        uint64_t now;
        int arrival;

        (void)lc_cu();
        pthread_mutex_lock(&g_mu);
        now = (uint64_t)gs_mono_ns();
        arrival = lc_is_arrival(now);
        g_busy = 1;
        g_launching++;
        flag(1);
        if (arrival)
                lc_arrival(now);
        pthread_mutex_unlock(&g_mu);
}

void gs_qos_lc_launched(CUstream s, CUresult r)
{
        const struct gs_cu *c = lc_cu();
        CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
        struct lc_stream *e = NULL;
        CUcontext ctx = NULL;
        int ok = 0;

        pthread_mutex_lock(&g_mu);
        if (r == CUDA_SUCCESS) {
                /* Our event calls must not break another thread's global
                 * capture. */
                if (c->thread_exchange_stream_capture_mode)
                        (void)c->thread_exchange_stream_capture_mode(&mode);
                if (c->event_create && c->event_record && c->event_query && c->ctx_get_current &&
                    c->ctx_get_current(&ctx) == CUDA_SUCCESS && ctx)
                        e = lc_entry(ctx, s);
                ok = e && c->event_record(e->ev, s) == CUDA_SUCCESS;
                if (c->thread_exchange_stream_capture_mode)
                        (void)c->thread_exchange_stream_capture_mode(&mode);
                if (ok && !e->pending) {
                        e->pending = 1;
                        g_npending++;
                }
                if (!ok)
                        g_untracked = 1;
                lc_start();
                if (g_thread < 0)
                        g_untracked = 1;
        }
        g_launching--;
        if (g_npending)
                pthread_cond_signal(&g_cv);
        else
                lc_look_relaxed();
        pthread_mutex_unlock(&g_mu);
}

/* Whether our flag is up (a relaxed load). */
static int flag_up(void)
{
        struct gs_qos_board *b = __atomic_load_n(&g_board, __ATOMIC_ACQUIRE);
        uint32_t s = __atomic_load_n(&g_slot, __ATOMIC_RELAXED);

        return b && s < GS_QOS_SLOTS && __atomic_load_n(&b->slot[s].up, __ATOMIC_RELAXED);
}

void gs_qos_lc_synced(void)
{
        /* A flag down has nothing to lower (work pending or not marked
         * keeps it up): no lock, no driver call (as while untracked). */
        if (!gs_qos_lc_is() || !flag_up())
                return;

        pthread_mutex_lock(&g_mu);
        /* A launch no event marks is taken as done by any synchronize (as
         * the first slice did for all); the events say what else is left. */
        g_untracked = 0;
        lc_look_relaxed();
        pthread_mutex_unlock(&g_mu);
}
