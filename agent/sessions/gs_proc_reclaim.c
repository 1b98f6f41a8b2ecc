/* gs_proc_reclaim.c — a process that reconnects after an agent restart
 * or upgrade reclaims what it holds (gs_wire.h GS_HELLO_RECLAIM): a closed
 * record of it hands its memory over, its reclaim messages claim the
 * slots it maps, its live blocks there and its VMM allocations, and the
 * chunks that stood for the old agent's VMM fillers are settled. */
#include "gs_proc_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "gs_gpu.h"
#include "gs_ipc.h"
#include "gs_log.h"
#include "gs_sockmsg.h"

/* A reclaiming process p: a closed record of the same process (a ghost
 * from the ledger, or a connection it lost) hands p everything it holds. */
void gs_proc_take_over_closed(struct gs_agent *ag, struct gs_proc *p)
{
        struct gs_proc *q;

        for (q = p->alloc->procs; q; q = q->next)
                if (q != p && q->state == GS_PROC_CLOSED && q->pid == p->pid && q->start == p->start && p->start)
                        break;
        if (!q)
                return;
        for (uint32_t i = 0; i < p->ngpus && i < q->ngpus; i++) {
                struct gs_proc_gpu *pg = &p->gpus[i], *qg = &q->gpus[i];
                struct gs_gpu *g = pg->g;

                gs_gpu_lock(g);
                gs_pproc_del(pg->pp);
                pg->pp = qg->pp;
                qg->pp = NULL;
                gs_pproc_set_tag(pg->pp, &pg->tag);
                pg->vpp = qg->vpp;
                qg->vpp = NULL;
                if (pg->vpp)
                        gs_pproc_set_tag(pg->vpp, &pg->vtag);
                pg->vmm = qg->vmm;
                qg->vmm = (struct gs_vmm_set){ .pa = qg->vmm.pa, .nslots = qg->vmm.nslots };
                pg->vmm.cs.tag = &pg->vtag;
                if (pg->vmm.cs.pp)
                        gs_pproc_set_tag(pg->vmm.cs.pp, &pg->vtag);
                memcpy(pg->maybe_host, qg->maybe_host, sizeof(pg->maybe_host));
                pg->nmaybe_host = qg->nmaybe_host;
                qg->nmaybe_host = 0;
                pg->lvmm = qg->lvmm;
                pg->nlvmm = qg->nlvmm;
                pg->lvmm_bytes = qg->lvmm_bytes;
                qg->lvmm = NULL;
                qg->nlvmm = 0;
                qg->lvmm_bytes = 0;
                pg->outside_charge = qg->outside_charge;
                pg->ctx_expect = qg->ctx_expect;
                pg->outside_measured = qg->outside_measured;
                pg->ctx_promised = qg->ctx_promised;
                qg->outside_charge = qg->outside_measured = qg->ctx_promised = 0;
                /* A move it did not answer is undone; host memory it was
                 * sent (that one or earlier ones' it did not move) stays
                 * charged to it: it lives, and may keep it. */
                if (qg->nmove)
                        gs_gpu_move_end(g, (enum gs_move_dir)qg->move_dir, qg->move, qg->nmove, 0, p->alloc, p->id);
                qg->nmove = 0;
                (void)gs_gpu_spill_pass_holder(g, q->id, p->id);
                gs_gpu_unlock(g);
        }
        log_info("process %d of allocation %s reconnected: it keeps what it held (#%llu)", p->pid, p->alloc->id,
                 (unsigned long long)q->id);
        gs_proc_destroy(ag, q, NULL);
}

static void fill_shed(void *ctx, uint32_t chunk)
{
        struct gs_gpu *g = ctx;

        /* Filler memory: never exported, nobody may hold it. */
        g->chunks[chunk].owner = NULL;
        (void)gs_gpu_chunk_fill(g, chunk);
}

/* pre: the GPU's lock.  vpp keeps as many chunks as the legacy VMM
 * allocations' bytes need: more are given back (their fillers died with
 * the old agent), fewer (no ledger said so) are adopted, standing for
 * memory the process holds. */
static void legacy_vmm_settle(struct gs_proc *p, struct gs_proc_gpu *pg, uint32_t gi)
{
        struct gs_gpu *g = pg->g;
        uint32_t keep = (uint32_t)((pg->lvmm_bytes + g->chunk_bytes - 1) / g->chunk_bytes);
        struct gs_part *part = &p->alloc->parts[gi];

        if (!pg->vpp && keep == 0)
                return;
        if (!pg->vpp) {
                if (gs_pproc_new(part->pa, pg->nslots, &pg->vpp) < 0)
                        return;
                gs_pproc_set_tag(pg->vpp, &pg->vtag);
        }
        /* What goes stood for the old agent's fillers: memory it never
         * exported, free since it died and made into this agent's free
         * chunks at its start: the chunks that go back take theirs. */
        uint32_t shed = gs_pproc_legacy_shed_fill(pg->vpp, keep, fill_shed, g);
        if (shed)
                log_debug("GPU %u: %u chunks behind VMM fillers of process %d given back", g->index, shed, p->pid);
        for (uint32_t s = 0; s < pg->nslots && gs_pproc_legacy_chunks(pg->vpp) < keep; s++) {
                uint32_t chunk;
                if (gs_pproc_slot_chunk(pg->vpp, s) != UINT32_MAX)
                        continue;
                if (gs_pproc_adopt_capped(pg->vpp, s, &chunk) < 0)
                        break;
                (void)gs_gpu_chunk_orphan(g, chunk);
                g->chunks[chunk].owner = p->alloc; /* the process holds that memory */
        }
        gs_gpu_check_lending(g);
}

int gs_proc_legacy_vmm_release(struct gs_proc_gpu *pg, uint64_t id)
{
        gs_gpu_assert_locked(pg->g);
        for (uint32_t i = 0; i < pg->nlvmm; i++) {
                if (pg->lvmm[i].id != id)
                        continue;
                pg->lvmm_bytes -= pg->lvmm[i].size;
                pg->lvmm[i] = pg->lvmm[--pg->nlvmm];
                if (pg->vpp)
                        (void)gs_pproc_legacy_shed(
                                pg->vpp, (uint32_t)((pg->lvmm_bytes + pg->g->chunk_bytes - 1) / pg->g->chunk_bytes));
                return 0;
        }
        return -ENOENT;
}

/* GS_RECLAIM_IPC and _IPC_FD (GS_FEAT_IPC_KEEP): the exports p had and
 * the memory under them (fd: the one that came with the message, taken).
 * An export that cannot be taken back is dropped (its token stops
 * resolving, as before this release); the rest as gs_proc_on_reclaim. */
static int reclaim_ipc(struct gs_proc *p, const struct gs_sock_reclaim *m, int fd, char *err, size_t errlen)
{
        int r = 0;

        if (m->kind == GS_RECLAIM_IPC_FD) {
                if (m->count != 1 || fd < 0 || m->item[0] > UINT32_MAX) {
                        gs_closep(&fd);
                        r = -EINVAL;
                } else {
                        r = gs_ipc_reclaim_fd(&p->alloc->ipc, p, m->gpu, (uint32_t)m->item[0], fd);
                }
                if (r < 0) {
                        snprintf(err, errlen, "bad IPC memory for slot %llu on GPU %u: %s",
                                 (unsigned long long)m->item[0], m->gpu, strerror(-r));
                        return r == -ENOMEM ? r : -EPROTO;
                }
                return 1;
        }
        for (uint32_t k = 0; k + 2 < m->count; k += 3) {
                const uint64_t tok[2] = { m->item[k], m->item[k + 1] };
                r = gs_ipc_reclaim_export(&p->alloc->ipc, p, m->gpu, tok, m->item[k + 2]);
                if (r == -ENOMEM) {
                        snprintf(err, errlen, "out of memory");
                        return r;
                }
                if (r < 0)
                        log_warn("process %d of allocation %s: its IPC handle of offset %llu on GPU %u is not "
                                 "taken back: %s",
                                 p->pid, p->alloc->id, (unsigned long long)m->item[k + 2], p->gpus[m->gpu].g->index,
                                 r == -EEXIST ? "token in use" : strerror(-r));
        }
        return 1;
}

/* One GS_SOCK_RECLAIM message of a reclaiming process: 1 for more to
 * come, 0 when the process is served from now on, or a negative errno
 * with err set (its connection ends; it keeps what it holds). */
int gs_proc_on_reclaim(struct gs_agent *ag, struct gs_proc *p, char *err, size_t errlen)
{
        static struct gs_sock_reclaim m; /* main thread only */
        const size_t head = offsetof(struct gs_sock_reclaim, item);
        bool trunc;
        ssize_t n;
        int r = 0, fd;

        n = gs_sockmsg_recv_fd(p->sock, &m, sizeof(m), &trunc, &fd);
        if (n == -EAGAIN)
                return 1;
        if (n <= 0) {
                snprintf(err, errlen, "closed during its reclaim");
                return -ECONNRESET;
        }
        if ((size_t)n < head || trunc || m.h.magic != GS_WIRE_MAGIC || m.h.version != GS_WIRE_VERSION ||
            m.h.type != GS_SOCK_RECLAIM || m.h.len != (size_t)n || m.count > GS_RECLAIM_MAX_ITEMS ||
            (size_t)n != head + 8 * (size_t)m.count) {
                gs_closep(&fd);
                snprintf(err, errlen, "malformed reclaim message (%zd bytes)", n);
                return -EPROTO;
        }
        if (m.gpu < p->ngpus && m.kind == GS_RECLAIM_IPC_FD)
                return reclaim_ipc(p, &m, fd, err, errlen);
        if (fd >= 0) {
                gs_closep(&fd);
                snprintf(err, errlen, "an fd with a reclaim message of kind %u", m.kind);
                return -EPROTO;
        }
        if (m.gpu < p->ngpus && m.kind == GS_RECLAIM_IPC && m.count % 3 == 0)
                return reclaim_ipc(p, &m, -1, err, errlen);
        if (m.kind == GS_RECLAIM_END) {
                for (uint32_t i = 0; i < p->ngpus; i++) {
                        struct gs_gpu *g = p->gpus[i].g;
                        gs_gpu_lock(g);
                        r = gs_pproc_legacy_seal(p->gpus[i].pp, (m.flags >> i) & 1);
                        legacy_vmm_settle(p, &p->gpus[i], i);
                        gs_gpu_unlock(g);
                        if (r < 0)
                                log_warn("process %d of allocation %s: its blocks on GPU %u are kept opaque: %s",
                                         p->pid, p->alloc->id, g->index, strerror(-r));
                }
                uint32_t nipc = gs_ipc_reclaim_end(&p->alloc->ipc, p);
                if (nipc)
                        log_info("process %d of allocation %s: %u IPC handles it exported resolve again", p->pid,
                                 p->alloc->id, nipc);
                r = gs_workers_add(ag->workers, &p->went, p, &p->alloc->wgroup, p->wake_fd, &p->stop);
                if (r < 0) {
                        snprintf(err, errlen, "no worker slot: %s", strerror(-r));
                        return r;
                }
                struct gs_sock_error done = { 0 };
                gs_sockmsg_hdr(&done.h, GS_SOCK_RECLAIM_DONE, sizeof(done));
                if (send(p->sock, &done, sizeof(done), MSG_NOSIGNAL | MSG_DONTWAIT) != (ssize_t)sizeof(done)) {
                        snprintf(err, errlen, "sending RECLAIM_DONE: %s", strerror(errno));
                        return -ECONNRESET;
                }
                p->state = GS_PROC_ACTIVE;
                gs_agent_want_scan(ag);
                log_info("process %d (%s) reclaimed its memory on allocation %s as #%llu", p->pid, p->comm,
                         p->alloc->id, (unsigned long long)p->id);
                return 0;
        }
        if (m.gpu < p->ngpus && m.kind == GS_RECLAIM_HOST) {
                gs_proc_reclaim_host(p, &p->gpus[m.gpu], m.item, m.count);
                return 1;
        }
        if (m.gpu >= p->ngpus ||
            (m.kind != GS_RECLAIM_SLOTS && m.kind != GS_RECLAIM_BLOCKS && m.kind != GS_RECLAIM_VMM) ||
            (m.kind != GS_RECLAIM_SLOTS && m.count % 2)) {
                snprintf(err, errlen, "bad reclaim message (GPU %u, kind %u, %u items)", m.gpu, m.kind, m.count);
                return -EPROTO;
        }
        struct gs_proc_gpu *pg = &p->gpus[m.gpu];
        if (m.kind == GS_RECLAIM_VMM) {
                /* Main thread; the workers do not serve p yet. */
                for (uint32_t k = 0; k + 1 < m.count; k += 2) {
                        uint64_t id = m.item[k], size = m.item[k + 1];
                        if (!size || size % GS_VMM_ALIGN || size > (uint64_t)pg->nslots * pg->g->chunk_bytes ||
                            pg->nlvmm >= GS_VMM_MAX_PER_PROC) {
                                snprintf(err, errlen, "bad reclaimed VMM allocation %llu of %llu bytes",
                                         (unsigned long long)id, (unsigned long long)size);
                                return -EPROTO;
                        }
                        if (!pg->lvmm || (pg->nlvmm >= 16 && !(pg->nlvmm & (pg->nlvmm - 1)))) {
                                struct gs_legacy_vmm *t =
                                        realloc(pg->lvmm, (pg->lvmm ? 2 * pg->nlvmm : 16) * sizeof(*t));
                                if (!t) {
                                        snprintf(err, errlen, "out of memory");
                                        return -ENOMEM;
                                }
                                pg->lvmm = t;
                        }
                        pg->lvmm[pg->nlvmm++] = (struct gs_legacy_vmm){ id, size };
                        pg->lvmm_bytes += size;
                        if (pg->vmm.next_id < id)
                                pg->vmm.next_id = id; /* new ids never meet old ones */
                }
                return 1;
        }
        gs_gpu_lock(pg->g);
        for (uint32_t k = 0; k < m.count && r == 0; k++) {
                if (m.kind == GS_RECLAIM_SLOTS) {
                        uint32_t chunk;
                        if (m.item[k] >= pg->nslots) {
                                r = -EINVAL;
                                break;
                        }
                        r = gs_pproc_legacy_claim(pg->pp, (uint32_t)m.item[k], &chunk);
                        if (r == 0 && chunk != UINT32_MAX && gs_gpu_chunk_orphan(pg->g, chunk) < 0)
                                log_warn("GPU %u: no chunk without memory to stand for slot %u of process %d",
                                         pg->g->index, (unsigned)m.item[k], p->pid);
                        if (r == 0 && chunk != UINT32_MAX)
                                pg->g->chunks[chunk].owner = p->alloc;
                        if (r == -ENOSPC || r == -ENOMEM) {
                                /* Not in the ledger: only the process says so,
                                 * and its quota cannot cover it.  Serving it
                                 * would hand that slot out again. */
                                snprintf(err, errlen,
                                         "it maps slot %u on GPU %u, which the ledger does not name and "
                                         "its quota cannot cover",
                                         (unsigned)m.item[k], pg->g->index);
                                gs_gpu_unlock(pg->g);
                                return -EDQUOT;
                        }
                } else {
                        r = gs_pproc_legacy_block(pg->pp, m.item[k], m.item[k + 1]);
                        k++;
                }
        }
        gs_gpu_check_lending(pg->g);
        gs_gpu_unlock(pg->g);
        if (r < 0) {
                snprintf(err, errlen, "reclaim on GPU %u refused: %s", m.gpu, strerror(-r));
                return r == -ENOMEM ? r : -EPROTO;
        }
        return 1;
}
