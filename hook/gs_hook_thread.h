/* gs_hook_thread.h — the hook's one thread per process, `gshare-hook`
 * (gs_hook_thread.c).  It answers the agent without waiting for the
 * application's next call: chunks without a live block given back when
 * the agent asks (gs_shm.give_back, gs_wire.h item 7), borrowed chunks
 * moved (the mover, gs_hook_spill.h), and a process whose agent went away
 * connects again and reclaims its memory as soon as an agent answers.
 *
 * Started lazily, once per process (a fork child starts its own): when
 * the process first reserves a range for chunks, or registers with an
 * agent that may lend it chunks.  Every signal blocked.  If it cannot
 * start, one stderr line says so and the process works as before (give-
 * back at its next call).
 *
 * It blocks in poll(), never naps: on the agent's notification eventfd
 * (GS_OP_NOTIFY, asked once per connection; an agent without
 * GS_FEAT_NOTIFY is looked at once a second instead), on the socket for
 * the agent's hang-up, and on its own eventfd, which gs_thread_kick
 * writes before the connection's fds are closed.  While the connection is
 * LOST it tries to connect again, 5 ms after the loss doubling to 160 ms
 * between tries within $GSHARE_AGENT_WAIT, then doubling up to 10 s.  It
 * ends when the connection is DOWN.
 *
 * It takes gs_conn.mu for everything it does (lock order: gs_hook_spill.h)
 * and lets it go while it waits. */
#ifndef GS_HOOK_THREAD_H
#define GS_HOOK_THREAD_H

/* pre: gs_conn.mu held.  Starts the thread if this process has none. */
void gs_thread_start(void);
/* pre: gs_conn.mu held.  Wakes the thread (before the connection's fds
 * are closed: it may be polling them). */
void gs_thread_kick(void);

#endif
