/* gs_proc_int.h — internals of the processes' sessions (gs_proc.h) shared
 * by their files, never included elsewhere:
 *
 *   gs_proc_conn.c     accept, the socket's events by state, deadlines
 *   gs_proc_hello.c    HELLO checked, the segment, WELCOME
 *   gs_proc_reclaim.c  a reconnecting process reclaims what it holds
 *   gs_proc_adopt.c  the previous agent's processes, from its ledger
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

/* ---- gs_proc_spillrest.c: spilled data across restarts ---- */
/* The live allocation of number num with a part on GPU gpu (*ret_part),
 * or NULL (gs_proc_adopt.c). */
struct gs_allocation *gs_proc_alloc_by_num(struct gs_agent *ag, uint64_t num, uint32_t gpu, uint32_t *ret_part);
/* The closed record of e's process on a (made if it lives), or NULL. */
struct gs_proc *gs_proc_ghost(struct gs_agent *ag, struct gs_allocation *a, const struct gs_ledger_ent *e);
/* Before g's ledger entries are adopted: the debts of the previous agent. */
void gs_proc_adopt_debts(struct gs_agent *ag, struct gs_gpu *g);
/* After: the slots that were in host memory adopt spares, those in a
 * move are marked (maybe_host); the debts' hints end. */
void gs_proc_adopt_spilled(struct gs_agent *ag, struct gs_gpu *g);
/* The previous agent's record entry i as a device entry to adopt (a move
 * back in flight: the slot is charged as device memory unless the process
 * says otherwise), in *ret; false if it is none. */
bool gs_proc_spill_entry_as_device(const struct gs_gpu *g, uint32_t i, struct gs_ledger_ent *ret);
/* A reclaiming process's GS_RECLAIM_HOST message: each slot of pg it
 * names that was in a move gives its device chunk back for a spare. */
void gs_proc_reclaim_host(struct gs_proc *p, struct gs_proc_gpu *pg, const uint64_t *slots, uint32_t n);

#endif
