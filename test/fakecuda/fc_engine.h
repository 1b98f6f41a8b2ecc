/* fc_engine.h — the fake driver's model of GPU time: one engine per fake
 * device, shared by every process, that time-slices contexts the way the
 * real driver does without MPS (docs/fakecuda.md "GPU time").
 *
 * The model.  A kernel with a duration (fakecuda_spin_kernel()) is an item
 * of its context's queue; a context is (process, CUcontext).  The engine
 * runs one context at a time: the context whose turn it is gets a time
 * slice of $GSHARE_FAKECUDA_TIMESLICE_US (default 2000 µs: on the H100 a
 * 0.53 ms inference step beside a saturating trainer took 2.8 ms at p99,
 * about one slice of ~2 ms waited; docs/design.md "Measured on an H100"),
 * during which it runs its queued kernels in launch order, one after
 * another.  When the slice ends and another context has work, the running
 * kernel is preempted
 * (it keeps what it has done and resumes in its context's next turn) and
 * the context goes to the back of the line; a lone context keeps the
 * engine.  A context whose queue empties gives the engine up at once.
 * Contexts are served in the order they got work (then in the order their
 * slices ended): round robin, no priority, weight or limit, as the driver.
 * Within a process the fake's one worker thread still runs all streams'
 * work in launch order, so a context's kernels run in order per stream
 * (and, unlike a GPU, streams never overlap).
 *
 * Time.  The model's clock is CLOCK_MONOTONIC minus the time it was held
 * (fakecuda_engine_hold): a kernel submitted at model time t joins the
 * queue at t, and the schedule from there is computed exactly, lazily,
 * whenever any process submits, waits or reads the accounting (so it does
 * not matter when the OS runs the processes: only when they launch).  A
 * fully virtual clock cannot work across processes (nobody knows whether
 * another process is about to launch), so tests that need a schedule
 * independent of the OS hold the clock, queue their work from every
 * process, and let it go: all of it then starts at the same model time
 * and the result is the same on an idle and on a loaded machine.
 *
 * Waiting.  A waiter computes when its kernel completes if nothing new
 * arrives (new arrivals can only delay it), sleeps that long on a futex of
 * the shared state (woken early when the clock is let go or a dead
 * process's work is dropped), and looks again: it never spins.
 *
 * Sharing and failure.  The state is a file next to the fake's state file
 * ($GSHARE_FAKECUDA_STATE with "-engine" appended), guarded by a robust
 * process-shared mutex.  Each process that submits registers and keeps a
 * second robust mutex locked from a thread of its own for as long as it
 * lives; when its owner dies (kill -9 included) that mutex reports it, and
 * the process's queued kernels are dropped (counted as dropped) and its
 * hold let go, so a dead process never wedges the others.  A dead
 * context's accounting stays readable until its entry is needed again. */
#ifndef FC_ENGINE_H
#define FC_ENGINE_H

#include <stdint.h>

#define FC_ENG_DEFAULT_SLICE_US 2000u
#define FC_ENG_MAX_US 10000000u /* the longest spin kernel: 10 s */

/* One context's accounting (fakecuda_engine_stats).  Times in ns of the
 * model's clock. */
struct fakecuda_engine_stat {
        int32_t pid;             /* the process (its pid where it registered) */
        uint32_t live;           /* 0: its process died (its queue was dropped) */
        uint64_t ctx;            /* the CUcontext's value in that process */
        uint64_t gpu_ns;         /* engine time received */
        uint64_t contended_ns;   /* of it, while another context had work queued */
        uint64_t wait_ns;        /* time it had work queued while another ran */
        uint64_t kernels;        /* kernels completed */
        uint64_t queued;         /* kernels queued now (the running one included) */
        uint64_t dropped;        /* kernels dropped when its process died */
        uint64_t turns;          /* slices it was given */
        uint64_t preempted;      /* slices that ended with its work unfinished */
        uint64_t latency_max_ns; /* longest submit-to-completion of a kernel */
};

/* Exported by the fake libcuda for tests (declare them there). */
/* The contexts of device dev (up to max of them into out, live and dead),
 * after advancing the model to now; returns how many there are, or -1. */
int fakecuda_engine_stats(int dev, struct fakecuda_engine_stat *out, int max);
/* The sum over process pid's contexts on device dev (pid, live: any,
 * latency_max_ns: the longest, ctx: how many); returns that number (0:
 * none), or -1. */
int fakecuda_engine_pid_stat(int dev, int32_t pid, struct fakecuda_engine_stat *out);
/* The model's clock, ns. */
uint64_t fakecuda_engine_now(void);
/* hold != 0: stops the model's clock (nothing runs, nothing completes)
 * until this process calls it with 0 or dies; holds of several processes
 * add up.  Returns 0, or -1 if the engine cannot be opened. */
int fakecuda_engine_hold(int hold);
/* The time slice, µs. */
uint32_t fakecuda_engine_timeslice_us(void);

/* Used by fakecuda.c. */
struct fc_eng_ticket {
        int dev, idx;
        uint64_t gen, seq;
};

/* Queues a kernel of dur_us on device dev for context ctx of this
 * process.  Returns 0, -EAGAIN when the context's queue is full (wait for
 * one of its kernels to be retired), or another -errno. */
int fc_engine_submit(int dev, uint64_t ctx, uint32_t dur_us, struct fc_eng_ticket *t);
/* Blocks until the kernel completes; *done_ns: when, in model time.  Frees
 * its entry.  Returns 0, or -ESRCH if the kernel was dropped. */
int fc_engine_wait(const struct fc_eng_ticket *t, uint64_t *done_ns);
/* Model time now (CLOCK_MONOTONIC if the engine cannot be opened). */
uint64_t fc_engine_now_ns(void);

#endif
