/* gs_proc_int.h — internals of the processes' sessions (gs_proc.h) shared
 * by their files, never included elsewhere:
 *
 *   gs_proc_conn.c     accept, the socket's events by state, deadlines
 *   gs_proc_hello.c    HELLO checked, the segment, WELCOME
 *   gs_proc_reclaim.c  a reconnecting process reclaims what it holds
 *   gs_proc_restore.c  the previous agent's processes, from its ledger
 *   gs_proc.c          the record: its GPU parts, connection end and exit,
 *                      what is done to every process at once
 *
 * Each file calls only those listed below it.  All of it on the main
 * thread. */
#ifndef GS_PROC_INT_H
#define GS_PROC_INT_H

#include "gs_proc.h"

/* ---- gs_proc.c ---- */

/* Ends p's connection (the process may live on). */
void gs_proc_close_conn(struct gs_agent *ag, struct gs_proc *p);
/* The process is gone: frees everything it had (why: for the log, NULL
 * for none). */
void gs_proc_destroy(struct gs_agent *ag, struct gs_proc *p, const char *why);
/* The loop's callback for p's pidfd (data p): the process exited. */
void gs_proc_on_pidfd(void *data, uint32_t events);
/* The allocation's id as the ledger keeps it. */
uint64_t gs_proc_alloc_num(const struct gs_allocation *a);
/* One gs_pproc per GPU of p's allocation, with their ledger tags.  0 or a
 * negative errno with err set (p->ngpus says how many were made). */
int gs_proc_gpus_init(struct gs_agent *ag, struct gs_proc *p, char *err, size_t errlen);

/* ---- gs_proc_hello.c ---- */

/* p's socket is readable in GS_PROC_HELLO: its HELLO registers it.  1
 * (nothing yet), 0, or a negative errno with err set (it is refused). */
int gs_proc_on_hello(struct gs_agent *ag, struct gs_proc *p, char *err, size_t errlen);

/* ---- gs_proc_reclaim.c ---- */

/* A reclaiming process p: a closed record of the same process hands p
 * everything it holds, and goes. */
void gs_proc_take_over_closed(struct gs_agent *ag, struct gs_proc *p);
/* p's socket is readable in GS_PROC_RECLAIM: one reclaim message.  1 for
 * more to come, 0 once p is served, or a negative errno with err set (its
 * connection ends; it keeps what it holds). */
int gs_proc_on_reclaim(struct gs_agent *ag, struct gs_proc *p, char *err, size_t errlen);

#endif
