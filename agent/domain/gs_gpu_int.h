/* gs_gpu_int.h — internals of one GPU (gs_gpu.h) shared by its files,
 * never included elsewhere.  struct gs_gpu is made of parts, each with
 * its header (what the rest of the agent calls) and files; each file calls
 * only those listed below it (test/test_layers.py checks that no files
 * call each other in a circle):
 *
 *   gs_gpu.c           identity, context, opening and closing the pool,
 *                      units (gs_gpu.h)
 *   gs_gpu_restart.c   ledgers, a handed-over pool (gs_gpu_restart.h)
 *   gs_gpu_scrubber.c  the background scrubber thread (gs_gpu_scrubber.h)
 *   gs_gpu_spill.c     moves' books: spares, host memory made ahead, moves
 *                      (gs_gpu_spill.h)
 *   gs_gpu_chunk.c     the chunk records: device memory, the chunks'
 *                      memory, chunks trading memory, lending's pokes
 *                      (gs_gpu_chunk.h)
 *   gs_gpu_scrub.c     zeroing: the agent's mappings, the scrub stream, the
 *                      scrubber's batch in flight and its kick, a grant's
 *                      scrub (gs_gpu_scrubber.h)
 *   gs_gpu_spillrec.c  the spill record (gs_gpu_spillrec.h)
 *   gs_gpu_phase.c     the handover's phase (gs_gpu_phase.h)
 *   gs_gpu_lock.c      the lock (gs_gpu_lock.h)
 *
 * All of it under g->lock (asserted) unless said otherwise. */
#ifndef GS_GPU_INT_H
#define GS_GPU_INT_H

#include "gs_gpu.h"

/* ---- gs_gpu_chunk.c ---- */

/* The properties of every chunk's memory on g (exported as a POSIX fd).
 * Reads nothing the lock covers. */
void gs_gpu_chunk_prop(const struct gs_gpu *g, CUmemAllocationProp *prop);
/* Exports h as a POSIX fd, close-on-exec, into *ret_fd.  0 or a negative
 * errno (err set; nothing left open).  With or without the lock (host
 * memory for spills is exported without it, gs_gpu_spill_prepare_work). */
int gs_gpu_mem_export(struct gs_gpu *g, CUmemGenericAllocationHandle h, int *ret_fd, char *err, size_t errlen);
/* Creates and exports the memory of chunk record c, zeroed and mapped for
 * the agent.  0 or a negative errno (err set). */
int gs_chunk_make(struct gs_gpu *g, struct gs_chunk *c, char *err, size_t errlen);
/* Releases c's memory and the agent's mapping of it (fd -1). */
void gs_chunk_drop(struct gs_gpu *g, struct gs_chunk *c);
/* gs_pool_return_fn of g's pool (ctx g): a granted chunk back on the
 * system list gets fresh memory, or goes pending. */
int gs_gpu_chunk_recycle(void *ctx, uint32_t chunk);

/* ---- gs_gpu_scrub.c ---- */

/* Queues the zeroing of [va, va + size) on the scrub stream;
 * gs_gpu_scrub_sync waits for everything queued so far. */
int gs_gpu_scrub_queue(struct gs_gpu *g, CUdeviceptr va, uint64_t size, char *err, size_t errlen);
int gs_gpu_scrub_sync(struct gs_gpu *g, char *err, size_t errlen);
/* Maps size bytes of h at a fresh address of the agent's, read-write on
 * g; gs_gpu_unmap_va undoes it. */
int gs_gpu_map_new(struct gs_gpu *g, CUmemGenericAllocationHandle h, uint64_t size, CUdeviceptr *ret_va, char *err,
                   size_t errlen);
void gs_gpu_unmap_va(struct gs_gpu *g, CUdeviceptr va, uint64_t size);
/* An inherited chunk's handle, imported from its fd on first need. */
int gs_chunk_handle(struct gs_gpu *g, struct gs_chunk *c, char *err, size_t errlen);
/* The scrubber's batch in flight completed (ok) or failed (why). */
void gs_gpu_batch_done(struct gs_gpu *g, bool ok, const char *why);
/* Waits for the scrubber's batch in flight, if any, keeping the lock. */
void gs_gpu_batch_wait(struct gs_gpu *g);
/* The agent's mapping of c's memory, made on first need; gone with
 * gs_chunk_unmap once no memset of the scrubber's batch may use it. */
int gs_chunk_map(struct gs_gpu *g, struct gs_chunk *c, char *err, size_t errlen);
void gs_chunk_unmap(struct gs_gpu *g, struct gs_chunk *c);
/* Before chunk c goes to process proc: zeroing queued (*queued set) if
 * another process may have written it; gs_gpu_grant_wait waits for what
 * was queued. */
int gs_gpu_grant_prepare(struct gs_gpu *g, struct gs_chunk *c, uint64_t proc, bool *queued, char *err, size_t errlen);
int gs_gpu_grant_wait(struct gs_gpu *g, char *err, size_t errlen);

/* ---- gs_gpu_scrubber.c ---- */

/* Tells the scrubber there may be work (gs_gsm's kick; ctx g). */
void gs_gpu_scrub_kick(void *ctx);
/* The scrub stream and events, once the context is current (without the
 * lock): 0, or a negative errno (logged) and every scrub synchronous. */
int gs_gpu_scrub_setup(struct gs_gpu *g);
/* The scrubber thread, once the pool exists; stopped before the pool and
 * the context go.  Both without the lock (they take it). */
void gs_gpu_scrub_start(struct gs_gpu *g);
void gs_gpu_scrub_stop(struct gs_gpu *g);

/* ---- gs_gpu_restart.c ---- */

/* gs_gsm_hold_fn of g's pool (ctx g): chunk moves into the ledger. */
void gs_gpu_chunk_hold(void *ctx, uint32_t chunk, const void *tag, uint32_t slot, int held);
/* At open: the previous agent's ledger into g->restart.held_before; its chunk
 * count, or 0 if there is none or it is not usable. */
uint32_t gs_gpu_read_ledger(struct gs_gpu *g, const struct gs_config *cfg);
/* At a restart's start: whether the driver has one more chunk above the
 * reserve. */
bool gs_gpu_room_at_start(struct gs_gpu *g);
/* At open: the chunks a previous agent handed over (inh), as they were. */
int gs_gpu_open_inherited(struct gs_gpu *g, const struct gs_config *cfg, const struct gs_gpu_inherit *inh, char *err,
                          size_t errlen);

/* ---- gs_gpu_spillrec.c ---- */

/* At open, with the previous agent's ledger: its spill record into
 * g->spillrec.before (nothing if there is none or it is not usable). */
void gs_gpu_spillrec_read(struct gs_gpu *g, const struct gs_config *cfg);
/* This agent's record under state_dir (beside its ledger), committed,
 * paused or resumed (a takeover), and closed with it.  start and commit
 * run without the lock, as the ledger's (gs_gpu_ledger_start, _commit:
 * main thread, opening the file / renaming it over the old one); pause
 * and close under it (gs_gpu_ledger_pause, _stop), close also at
 * gs_gpu_close. */
void gs_gpu_spillrec_start(struct gs_gpu *g, const char *state_dir);
void gs_gpu_spillrec_commit(struct gs_gpu *g);
void gs_gpu_spillrec_pause(struct gs_gpu *g, bool pause);
void gs_gpu_spillrec_close(struct gs_gpu *g);
/* gs_gpu_chunk_hold for a spare record (chunk >= g->nchunks). */
void gs_gpu_spillrec_hold(struct gs_gpu *g, uint32_t spare, const struct gs_ledger_tag *t, uint32_t slot, bool held);
/* A batch planned (e[0..n), tag the process's): each slot marked in a
 * move; and ended: what did not move as it was before, but a spare the
 * process keeps (kept: its fd went to a live process) GS_LEDGER_HELD. */
void gs_gpu_spillrec_moving(struct gs_gpu *g, const struct gs_ledger_tag *t, enum gs_move_dir dir,
                            const struct gs_move_ent *e, uint32_t n);
void gs_gpu_spillrec_moved(struct gs_gpu *g, enum gs_move_dir dir, const struct gs_move_ent *e, uint32_t n,
                           uint32_t moved, bool kept);
/* The allocations' debts written where they changed (gs_gpu_check_lending). */
void gs_gpu_spillrec_debts(struct gs_gpu *g);

#endif
