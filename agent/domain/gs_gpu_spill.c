/* gs_gpu_spill.c — a GPU's moves (gs_gpu.h "Moves"; docs/burst.md
 * "Giving it back"): a borrower's data moved to host memory so that the
 * device chunk under it goes to the allocation it is owed to, and moved
 * back once the GPU has a chunk to lend again.  The process's hook does
 * the copying (gs_wire.h item 8); this file says what moves where and
 * keeps the books: spare records stand for the host memory, made here
 * while a move runs and left to the process once it maps it. */
#include "gs_gpu_int.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gs_gsm.h"
#include "gs_log.h"

int gs_gpu_spill_init(struct gs_gpu *g, uint64_t spill_max_bytes, char *err, size_t errlen)
{
        uint64_t n = spill_max_bytes / g->chunk_bytes;

        if (n == 0)
                return 0;
        if (n > g->nchunks)
                n = g->nchunks; /* never more than the pool itself could lend */
        g->moves.spares = calloc(n, sizeof(*g->moves.spares));
        if (!g->moves.spares) {
                snprintf(err, errlen, "out of memory for %llu spare records", (unsigned long long)n);
                return -ENOMEM;
        }
        for (uint64_t i = 0; i < n; i++)
                g->moves.spares[i].fd = -1;
        g->moves.nspare = (uint32_t)n;
        return 0;
}

void gs_gpu_spill_fini(struct gs_gpu *g)
{
        for (uint32_t i = 0; i < g->moves.nspare; i++)
                if (g->moves.spares[i].fd >= 0)
                        gs_gpu_mem_drop(g, g->moves.spares[i].h, &g->moves.spares[i].fd);
        free(g->moves.spares);
        g->moves.spares = NULL;
        g->moves.nspare = 0;
}

/* Host memory for one chunk, exported (CU_MEM_LOCATION_TYPE_HOST_NUMA 0:
 * what the H100's driver accepts with POSIX fds; _HOST is refused). */
static int host_make(struct gs_gpu *g, struct gs_spare *s, char *err, size_t errlen)
{
        const struct gs_cuda *cu = &g->node->cu;
        CUmemAllocationProp prop;
        int r;

        gs_gpu_chunk_prop(g, &prop);
        prop.location.type = CU_MEM_LOCATION_TYPE_HOST_NUMA;
        prop.location.id = 0;
        (void)cu->ctx_set_current(g->ctx);
        r = gs_cuda_check(cu, cu->mem_create(&s->h, g->chunk_bytes, &prop, 0), "cuMemCreate (host)", err, errlen);
        if (r < 0)
                return r;
        r = gs_gpu_mem_export(g, s->h, &s->fd, err, errlen);
        if (r < 0)
                (void)cu->mem_release(s->h);
        return r;
}

/* Whether spare i is free: retired (its record held by nobody), in no
 * move, its fd kept by no process. */
static bool spare_unused(struct gs_gpu *g, uint32_t i)
{
        const struct gs_gsm *m = gs_pool_gsm(g->pool);

        return !g->moves.spares[i].busy && !g->moves.spares[i].holder && !g->moves.spares[i].prep &&
               m->chunks[g->nchunks + i].state == GS_GSM_RETIRED;
}

/* Whether spare i is free for a move, its host memory made (ready) or not. */
static bool spare_free(struct gs_gpu *g, uint32_t i, bool ready)
{
        return spare_unused(g, i) && (g->moves.spares[i].fd >= 0) == ready;
}

/* A spare prepared in process proc for its moves, not in one now, or -1. */
static int prepared_spare(struct gs_gpu *g, uint64_t proc)
{
        for (uint32_t i = 0; i < g->moves.nspare; i++)
                if (proc && g->moves.spares[i].prep == proc && !g->moves.spares[i].busy)
                        return (int)i;
        return -1;
}

/* A spare free for a move, one with its host memory made first. */
static int free_spare(struct gs_gpu *g)
{
        for (int ready = 1; ready >= 0; ready--)
                for (uint32_t i = 0; i < g->moves.nspare; i++)
                        if (spare_free(g, i, ready))
                                return (int)i;
        return -1;
}

bool gs_gpu_spill_prepare_pick(struct gs_gpu *g, struct gs_spill_job *j)
{
        uint32_t ready = 0, target, i;

        gs_gpu_assert_locked(g);
        if (!g->moves.nspare || !g->pool || !gs_gpu_makes_memory(g))
                return false;
        /* What is owed (wanted back or not), less what moves now, and
         * GS_PREP_MARGIN more while anything is: an owner takes back more
         * than it is owed when its contexts need room outside the pool, or
         * a borrower takes freed chunks again (measured on the H200: 15 to
         * 47 chunks past what was owed, each made on the owner's path at
         * 30 to 56 ms). */
        target = gs_pool_owed(g->pool);
        if (target)
                target += GS_PREP_MARGIN;
        target = target > g->moves.moving_out ? target - g->moves.moving_out : 0;
        if (target > g->moves.nspare)
                target = g->moves.nspare;
        /* Prepared in a process counts as made ahead (it is). */
        for (i = 0; i < g->moves.nspare; i++)
                ready += spare_free(g, i, true) || (g->moves.spares[i].prep && !g->moves.spares[i].busy);
        if (ready == target)
                return false;
        for (i = 0; i < g->moves.nspare && !spare_free(g, i, ready > target); i++)
                ;
        if (i == g->moves.nspare)
                return false;
        /* Made or dropped without the lock: pinning 64 MiB takes about
         * 11 ms (measured on an H200), the workers serve on meanwhile. */
        *j = (struct gs_spill_job){ .spare = i, .drop = ready > target };
        g->moves.spares[i].busy = true;
        g->moves.spares[i].working = true;
        return true;
}

void gs_gpu_spill_prepare_work(struct gs_gpu *g, struct gs_spill_job *j)
{
        struct gs_spare *s = &g->moves.spares[j->spare];

        if (j->drop)
                gs_gpu_mem_drop(g, s->h, &s->fd);
        else
                j->r = host_make(g, s, j->err, sizeof(j->err));
}

bool gs_gpu_spill_prepare_end(struct gs_gpu *g, const struct gs_spill_job *j)
{
        gs_gpu_assert_locked(g);
        g->moves.spares[j->spare].busy = false;
        g->moves.spares[j->spare].working = false;
        if (j->r < 0) {
                log_warn("GPU %u: host memory for spills not made ahead: %s", g->index, j->err);
                return false;
        }
        if (!j->drop)
                gs_node_poke(g->node); /* borrowers may prepare it (gs_gpu_spill_prep_plan) */
        return true;
}

/* Whether slot is one of the n moves of e. */
static bool in_moves(const struct gs_move_ent *e, uint32_t n, uint32_t slot)
{
        for (uint32_t i = 0; i < n; i++)
                if (e[i].slot == slot)
                        return true;
        return false;
}

/* gs_gpu_move_plan to host memory, passing over the slots of the nbusy
 * moves busy (a batch in flight, not settled yet). */
static int plan_out(struct gs_gpu *g, struct gs_pproc *pp, const struct gs_move_ent *busy, uint32_t nbusy,
                    struct gs_move_ent *e, uint32_t max, uint64_t proc, char *err, size_t errlen)
{
        uint32_t slots[2 * GS_MOVE_MAX], n = 0, k = 0, want;

        want = g->moves.spill_want > g->moves.moving_out ? g->moves.spill_want - g->moves.moving_out : 0;
        if (want > max)
                want = max;
        if (want) {
                uint32_t got = gs_pproc_move_slots(pp, false, slots, want + nbusy);
                for (uint32_t i = 0; i < got && k < want; i++)
                        if (!in_moves(busy, nbusy, slots[i]))
                                slots[k++] = slots[i];
        }
        for (uint32_t i = 0; i < k; i++) {
                int s = prepared_spare(g, proc);
                if (s < 0)
                        s = free_spare(g);
                if (s < 0) {
                        /* Said at 1, 2, 4, ... refusals. */
                        uint64_t nref = ++g->moves.st.refused;
                        if (!(nref & (nref - 1)))
                                snprintf(err, errlen,
                                         "spillMax reached: no host memory left for spilled "
                                         "chunks (%llu spills refused)",
                                         (unsigned long long)g->moves.st.refused);
                        break;
                }
                int r = g->moves.spares[s].fd >= 0 ? 0 : host_make(g, &g->moves.spares[s], err, errlen);
                if (r < 0) {
                        g->moves.st.refused++;
                        break;
                }
                g->moves.spares[s].busy = true;
                e[n] = (struct gs_move_ent){ .slot = slots[i],
                                             .from = gs_pproc_slot_chunk(pp, slots[i]),
                                             .to = g->nchunks + (uint32_t)s,
                                             .fd = g->moves.spares[s].fd,
                                             .prep = g->moves.spares[s].prep != 0 };
                n++;
        }
        g->moves.moving_out += n;
        if (n && !g->moves.tb.start_ns)
                g->moves.tb.start_ns = gs_mono_ns();
        gs_gpu_spillrec_moving(g, gs_pproc_tag(pp), GS_MOVE_TO_HOST, e, n);
        return (int)n;
}

int gs_gpu_move_plan_next(struct gs_gpu *g, struct gs_pproc *pp, const struct gs_move_ent *busy, uint32_t nbusy,
                          struct gs_move_ent *e, uint32_t max, uint64_t proc, char *err, size_t errlen)
{
        gs_gpu_assert_locked(g);
        if (!g->moves.nspare || !pp || nbusy > GS_MOVE_MAX)
                return 0;
        return plan_out(g, pp, busy, nbusy, e, max < GS_MOVE_MAX ? max : GS_MOVE_MAX, proc, err, errlen);
}

int gs_gpu_move_plan(struct gs_gpu *g, struct gs_pproc *pp, enum gs_move_dir dir, struct gs_move_ent *e, uint32_t max,
                     struct gs_allocation *owner, uint64_t proc, char *err, size_t errlen)
{
        gs_gpu_assert_locked(g);
        uint32_t slots[GS_MOVE_MAX], n = 0;

        if (!g->moves.nspare || !pp)
                return 0;
        if (max > GS_MOVE_MAX)
                max = GS_MOVE_MAX;
        if (dir == GS_MOVE_TO_HOST)
                return plan_out(g, pp, NULL, 0, e, max, proc, err, errlen);
        /* Back only while nobody wants a chunk back, nor did a moment ago. */
        if (g->moves.spill_want || gs_mono_ms() - g->moves.last_want_ms < g->moves.move_back_quiet_ms)
                return 0;
        uint32_t k = gs_pproc_move_slots(pp, true, slots, max), skip[GS_MOVE_MAX], nskip = 0;
        for (uint32_t i = 0; i < k && nskip < GS_MOVE_MAX;) {
                uint32_t d;
                if (gs_pool_reserve(g->pool, &d) < 0)
                        break;
                /* A chunk whose memory went to a context (gs_outside.h)
                 * is made anew once the driver has it free again; till
                 * then it is passed over (kept aside until the end, so the
                 * next reserve finds another). */
                if (d < g->nchunks && g->chunks[d].fd < 0 && g->chunks[d].state != GS_CHUNK_PENDING &&
                    gs_gpu_chunk_remake(g, d, err, errlen) == 0)
                        err[0] = '\0';
                if (d >= g->nchunks || g->chunks[d].fd < 0 || g->chunks[d].state == GS_CHUNK_PENDING) {
                        log_debug("GPU %u: chunk %u cannot take a spilled chunk back yet: %s", g->index, d,
                                  err[0] ? err : "no memory");
                        skip[nskip++] = d;
                        continue;
                }
                e[n] = (struct gs_move_ent){
                        .slot = slots[i], .from = gs_pproc_slot_chunk(pp, slots[i]), .to = d, .fd = g->chunks[d].fd
                };
                n++;
                i++;
        }
        while (nskip)
                if (gs_pool_unretire_chunk(g->pool, skip[--nskip]) < 0)
                        log_error("GPU %u: chunk %u lost from the system list", g->index, skip[nskip]);
        /* As a grant: zeroed first if another process wrote it (an idle
         * owner's free chunk may hold its data). */
        struct gs_grant gr[GS_MOVE_MAX];
        int fds[GS_MOVE_MAX];
        for (uint32_t i = 0; i < n; i++)
                gr[i] = (struct gs_grant){ .chunk = e[i].to, .slot = e[i].slot };
        if (n && gs_gpu_chunks_hand_out(g, gr, n, owner, proc, fds, err, errlen) < 0) {
                for (uint32_t i = 0; i < n; i++)
                        if (gs_pool_unretire_chunk(g->pool, e[i].to) < 0)
                                log_error("GPU %u: chunk %u lost from the system list", g->index, e[i].to);
                return 0;
        }
        for (uint32_t i = 0; i < n; i++)
                e[i].fd = fds[i];
        g->moves.moving_back += n;
        gs_gpu_spillrec_moving(g, gs_pproc_tag(pp), dir, e, n);
        return (int)n;
}

void gs_gpu_move_end(struct gs_gpu *g, enum gs_move_dir dir, const struct gs_move_ent *e, uint32_t n, uint32_t moved,
                     struct gs_allocation *owner, uint64_t proc)
{
        gs_gpu_assert_locked(g);
        if (moved > n)
                moved = n; /* a count from a process: never more than planned */
        gs_gpu_spillrec_moved(g, dir, e, n, moved, proc != 0);
        for (uint32_t i = 0; i < n; i++) {
                if (dir == GS_MOVE_TO_HOST) {
                        struct gs_spare *s = &g->moves.spares[e[i].to - g->nchunks];
                        /* The process maps the host memory now, or had
                         * its fd and may keep it (moved or not): the agent
                         * keeps none of it.  What was not moved stays
                         * charged (held) until its process is gone. */
                        gs_gpu_mem_drop(g, s->h, &s->fd);
                        s->busy = false;
                        s->prep = 0;
                        s->holder = i < moved ? 0 : proc;
                        if (i < moved && gs_pool_exchange(g->pool, e[i].from, e[i].to) < 0)
                                log_error("GPU %u: spill of chunk %u not recorded", g->index, e[i].from);
                        if (i < moved && g->moves.spill_want)
                                g->moves.spill_want--;
                        if (i < moved)
                                g->moves.spill_want_ms = g->moves.spill_want ? gs_mono_ms() : 0; /* progress */
                } else if (i < moved) {
                        if (gs_pool_exchange(g->pool, e[i].from, e[i].to) < 0)
                                log_error("GPU %u: chunk %u back not recorded", g->index, e[i].to);
                        g->chunks[e[i].to].owner = owner;
                        g->chunks[e[i].to].writer = proc;
                } else {
                        /* The process had its fd: made anew before anyone
                         * gets it (pending if the driver has no room). */
                        if (gs_gpu_chunk_recycle(g, e[i].to) == 0 && gs_pool_unretire_chunk(g->pool, e[i].to) < 0)
                                log_error("GPU %u: chunk %u lost from the system list", g->index, e[i].to);
                }
        }
        if (dir == GS_MOVE_TO_HOST) {
                g->moves.moving_out -= n;
                g->moves.st.chunks_out += moved;
        } else {
                g->moves.moving_back -= n;
                g->moves.st.chunks_back += moved;
        }
        gs_gpu_check_lending(g);
}

const char *const gs_move_phase_names[GS_PHASE_N] = { "plan", "sync", "prepare", "copy", "remap", "wire", "settle" };

void gs_gpu_move_timed(struct gs_gpu *g, enum gs_move_dir dir, const uint64_t ns[GS_PHASE_N], uint32_t moved)
{
        gs_gpu_assert_locked(g);
        struct gs_gpu_takeback *tb = &g->moves.tb;
        char parts[GS_PHASE_N * 24];
        size_t at = 0;

        if (dir != GS_MOVE_TO_HOST)
                return;
        for (int i = 0; i < GS_PHASE_N; i++) {
                g->moves.st.spill_ns[i] += ns[i];
                tb->ns[i] += ns[i];
        }
        tb->batches++;
        tb->chunks += moved;
        if (g->moves.spill_want || g->moves.moving_out)
                return;
        for (int i = 0; i < GS_PHASE_N && at < sizeof(parts); i++)
                at += (size_t)snprintf(parts + at, sizeof(parts) - at, "%s%s %.1f", i ? ", " : "",
                                       gs_move_phase_names[i], tb->ns[i] / 1e6);
        log_info(
                "GPU %u: taken back: %u chunks moved to host memory in %u batches, %.1f ms from the first planned to the "
                "last settled; by phase, summed over the batches (ms): %s",
                g->index, tb->chunks, tb->batches, tb->start_ns ? (gs_mono_ns() - tb->start_ns) / 1e6 : 0.0, parts);
        memset(tb, 0, sizeof(*tb));
}

void gs_gpu_spill_kick(struct gs_gpu *g)
{
        gs_gpu_assert_locked(g);
        if (g->scrub.started)
                gs_gpu_scrub_kick(g);
}

/* Process proc's prepared and held spares on g, in all. */
static uint32_t spares_of(const struct gs_gpu *g, uint64_t proc)
{
        uint32_t n = 0;

        for (uint32_t i = 0; i < g->moves.nspare; i++)
                n += g->moves.spares[i].prep == proc || g->moves.spares[i].holder == proc;
        return n;
}

/* How many more spares proc's mover may have prepared now (0: none, or
 * *ret_release when it borrows nothing and has some prepared). */
static uint32_t prep_room(struct gs_gpu *g, struct gs_pproc *pp, uint64_t proc, bool *ret_release)
{
        uint32_t slots[GS_PREP_MAX], prep = 0, mine, dev, host;

        *ret_release = false;
        if (!g->moves.nspare || !pp || !proc || !g->pool)
                return 0;
        for (uint32_t i = 0; i < g->moves.nspare; i++)
                prep += g->moves.spares[i].prep == proc;
        dev = gs_pproc_move_slots(pp, false, slots, GS_PREP_MAX);
        host = gs_pproc_move_slots(pp, true, slots, 1);
        if (!dev && !host) {
                *ret_release = prep != 0;
                return 0;
        }
        mine = spares_of(g, proc);
        /* Ahead of need only: while owners want memory back, the movers
         * move with what they have and fds sent with the moves. */
        if (!gs_pool_owed(g->pool) || g->moves.spill_want > g->moves.moving_out || dev <= prep || mine >= GS_PREP_MAX)
                return 0;
        return dev - prep < GS_PREP_MAX - mine ? dev - prep : GS_PREP_MAX - mine;
}

bool gs_gpu_spill_prep_due(struct gs_gpu *g, struct gs_pproc *pp, uint64_t proc)
{
        gs_gpu_assert_locked(g);
        bool release;
        uint32_t room = prep_room(g, pp, proc, &release);

        if (release)
                return true;
        for (uint32_t i = 0; i < g->moves.nspare && room; i++)
                if (spare_free(g, i, true))
                        return true;
        return false;
}

uint32_t gs_gpu_spill_prep_plan(struct gs_gpu *g, struct gs_pproc *pp, uint64_t proc, uint32_t *ids, int *fds,
                                uint32_t max, bool *ret_release)
{
        gs_gpu_assert_locked(g);
        uint32_t room = prep_room(g, pp, proc, ret_release), n = 0;

        if (*ret_release) {
                /* Not needed: the process lets it go, but may keep it. */
                for (uint32_t i = 0; i < g->moves.nspare; i++) {
                        struct gs_spare *s = &g->moves.spares[i];
                        if (s->prep != proc || s->busy)
                                continue;
                        gs_gpu_mem_drop(g, s->h, &s->fd);
                        s->prep = 0;
                        s->holder = proc;
                }
                return 0;
        }
        if (room > max)
                room = max;
        for (uint32_t i = 0; i < g->moves.nspare && n < room; i++) {
                /* A copy of the fd: sent without the lock, while the
                 * spare's own may be dropped (a reconnection). */
                if (!spare_free(g, i, true) || (fds[n] = fcntl(g->moves.spares[i].fd, F_DUPFD_CLOEXEC, 0)) < 0)
                        continue;
                g->moves.spares[i].prep = proc;
                ids[n] = i;
                n++;
        }
        return n;
}

/* Spares whose host memory is made (fd), held by a process, prepared in
 * one. */
enum spare_is { SPARE_MADE, SPARE_HELD, SPARE_PREP };

static uint32_t spares_that(const struct gs_gpu *g, enum spare_is is)
{
        gs_gpu_assert_locked(g);
        uint32_t n = 0;

        for (uint32_t i = 0; i < g->moves.nspare; i++) {
                const struct gs_spare *s = &g->moves.spares[i];
                /* One the scrubber works on is not made yet (its fd is
                 * the scrubber's to write without the lock). */
                n += is == SPARE_MADE ? !s->working && s->fd >= 0 : is == SPARE_HELD ? s->holder != 0 : s->prep != 0;
        }
        return n;
}

uint32_t gs_gpu_spill_prepared(const struct gs_gpu *g)
{
        return spares_that(g, SPARE_PREP);
}

uint32_t gs_gpu_spill_ready(const struct gs_gpu *g)
{
        return spares_that(g, SPARE_MADE);
}

uint32_t gs_gpu_spill_held(const struct gs_gpu *g)
{
        return spares_that(g, SPARE_HELD);
}

uint32_t gs_gpu_spill_pass_holder(struct gs_gpu *g, uint64_t proc, uint64_t to)
{
        gs_gpu_assert_locked(g);
        uint32_t n = 0;
        bool kicked = false;

        if (!proc)
                return 0;
        for (uint32_t i = 0; i < g->moves.nspare; i++) {
                struct gs_spare *s = &g->moves.spares[i];
                if (s->prep == proc && !s->busy) {
                        /* Gone: its import with it, the agent's memory is
                         * ready again.  Reconnected: its mover lets go of
                         * it, but may keep it: held. */
                        s->prep = 0;
                        if (to)
                                gs_gpu_mem_drop(g, s->h, &s->fd);
                        s->holder = to;
                        kicked |= !to;
                        continue;
                }
                if (s->holder == proc) {
                        s->holder = to;
                        if (!to) /* the same process otherwise: its record entry stands */
                                gs_gpu_spillrec_hold(g, i, NULL, 0, false);
                        n++;
                }
        }
        if ((n || kicked) && !to)
                gs_gpu_spill_kick(g); /* host memory ahead again, if owed */
        return n;
}

uint32_t gs_gpu_spill_release_holder(struct gs_gpu *g, uint64_t proc)
{
        gs_gpu_assert_locked(g);
        return gs_gpu_spill_pass_holder(g, proc, 0);
}

int gs_gpu_spill_hold_adopted(struct gs_gpu *g, uint64_t proc, const struct gs_ledger_tag *t, uint32_t slot)
{
        gs_gpu_assert_locked(g);
        uint32_t r = gs_gpu_spare_record_free(g);

        if (r == UINT32_MAX || !proc)
                return -ENOSPC;
        struct gs_spare *s = &g->moves.spares[r - g->nchunks];
        if (s->fd >= 0)
                gs_gpu_mem_drop(g, s->h, &s->fd); /* the process has its own */
        s->holder = proc;
        gs_gpu_spillrec_hold(g, r - g->nchunks, t, slot, true);
        return 0;
}

uint32_t gs_gpu_spare_record_free(struct gs_gpu *g)
{
        gs_gpu_assert_locked(g);
        if (!g->pool)
                return UINT32_MAX;
        for (uint32_t i = 0; i < g->moves.nspare; i++)
                if (spare_unused(g, i))
                        return g->nchunks + i;
        return UINT32_MAX;
}

uint32_t gs_gpu_spilled(struct gs_gpu *g)
{
        gs_gpu_assert_locked(g);
        struct gs_pool_stats st = { 0 };

        if (g->pool)
                gs_pool_stats(g->pool, &st);
        return st.chunks_spilled;
}
