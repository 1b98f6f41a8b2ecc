/* gs_hook_spill.c — the mover: what the hook's thread does when the
 * agent bumped gs_shm.spill, the GS_OP_SPILL / GS_SOCK_MOVE /
 * GS_OP_SPILL_DONE exchange, and a batch's move of slots to the memory
 * the agent sent, at the same addresses.  See gs_hook_spill.h. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gs_hook_gate.h"
#include "gs_hook_space.h"
#include "gs_hook_spill.h"
#include "gs_hook_spillprep.h"
#include "gs_ring.h"

/* The spill word when last looked at, and for which connection
 * (gs_conn.reconnects; gs_conn.mu). */
static uint32_t g_seen;
static uint64_t g_gen = UINT64_MAX;
/* Per GPU, GS_MOVE_MAX chunks of VA where a batch's new memory is mapped
 * while the data is copied (gs_conn.mu; 0 until reserved). */
static CUdeviceptr g_scratch[GS_MAX_GPUS_PER_ALLOC];
static size_t g_scratch_size[GS_MAX_GPUS_PER_ALLOC];
static pthread_once_t g_fork_once = PTHREAD_ONCE_INIT;

/* The child has no mover (only the forking thread lives on) and its own
 * driver state: it starts its own mover when it registers. */
static void gs_spill_child(void)
{
        g_seen = 0;
        g_gen = UINT64_MAX;
        memset(g_scratch, 0, sizeof(g_scratch));
        memset(g_scratch_size, 0, sizeof(g_scratch_size));
        gs_spill_prep_child();
}

static void gs_spill_fork_register(void)
{
        (void)pthread_atfork(NULL, NULL, gs_spill_child);
}

/* ---- a batch's move ------------------------------------------------- */

/* Whether the driver has everything a move calls. */
static int gs_spill_usable(const struct gs_cu *cu)
{
        return cu->mem_import_from_shareable_handle && cu->mem_map && cu->mem_unmap && cu->mem_set_access &&
               cu->mem_release && cu->mem_address_reserve && cu->mem_address_free && cu->mem_retain_allocation_handle &&
               cu->memcpy_dtod_async_v2 && cu->stream_create && cu->stream_destroy_v2 && cu->stream_synchronize &&
               cu->ctx_synchronize && cu->ctx_push_current_v2 && cu->ctx_pop_current_v2 && cu->device_get_count &&
               cu->device_primary_ctx_get_state && cu->device_primary_ctx_retain && cu->device_primary_ctx_release_v2;
}

/* Whether the driver has the events a batch's groups are waited for with
 * (without them: its whole stream). */
static bool gs_spill_usable_events(const struct gs_cu *cu)
{
        return cu->event_create && cu->event_record && cu->event_synchronize && cu->event_destroy_v2;
}

/* pre: gs_conn.mu held.  The device of GPU gi, or -1. */
static CUdevice gs_spill_dev(const struct gs_cu *cu, uint32_t gi)
{
        int count = 0;

        if (cu->device_get_count(&count) != CUDA_SUCCESS)
                return -1;
        for (CUdevice d = 0; d < count && d < GS_MAX_DEVICES; d++)
                if (gs_space_dev_gpu(cu, d) == (int)gi)
                        return d;
        return -1;
}

/* pre: gs_conn.mu held.  GPU gi's scratch range, GS_MOVE_MAX chunks of VA
 * apart from everything else (reserved on first use, again if the chunk
 * size changed: nothing is mapped there between batches), or 0. */
static CUdeviceptr gs_spill_scratch(const struct gs_cu *cu, uint32_t gi)
{
        CUdeviceptr va = 0;
        size_t chunk = gs_conn.gpus[gi].chunk, size = (size_t)GS_MOVE_MAX * chunk;

        if (g_scratch[gi] && g_scratch_size[gi] == size)
                return g_scratch[gi];
        if (g_scratch[gi])
                (void)cu->mem_address_free(g_scratch[gi], g_scratch_size[gi]);
        g_scratch[gi] = 0;
        if (chunk == 0 || cu->mem_address_reserve(&va, size, chunk, 0, 0) != CUDA_SUCCESS)
                return 0;
        g_scratch[gi] = va;
        g_scratch_size[gi] = size;
        return va;
}

/* A batch in progress: slot i's new memory (hn[i], mapped at scratch
 * chunk i) and, once retained, its old (ho[i]).  Its slots go in groups
 * of GS_SPILL_GROUP: a group's copies are issued as soon as its new
 * memory is mapped (the next group is prepared while they run) and its
 * slots are remapped as soon as its copies are done (ev[group]), while
 * the later groups' copies run. */
#define GS_SPILL_GROUP 4u

/* What a batch leaves to let go once it is over: the new memories mapped
 * at the scratch (unmapped, released: a moved slot's own mapping keeps
 * its memory) and the prepared ones it named (gs_spill_prep_forget).  No
 * copy writes them any more; nothing of the process's slots is touched,
 * so it is done while the agent settles the batch (gs_spill_tidy). */
struct gs_spill_left {
        uint32_t gi, n, nprep;
        size_t chunk;
        CUdeviceptr at[GS_MOVE_MAX];
        CUmemGenericAllocationHandle h[GS_MOVE_MAX];
        uint32_t prep[GS_MOVE_MAX];
};
#define GS_SPILL_GROUPS ((GS_MOVE_MAX + GS_SPILL_GROUP - 1) / GS_SPILL_GROUP)
struct gs_spill_batch {
        const struct gs_cu *cu;
        struct gs_hook_gpu *g;
        CUdevice dev;
        CUdeviceptr scratch;
        uint32_t gi;
        const uint32_t *slots;
        int *fds;
        const uint32_t *prep; /* prep[i]: slot i's prepared memory's id, or UINT32_MAX; NULL: none */
        uint32_t k;
        CUmemGenericAllocationHandle hn[GS_MOVE_MAX], ho[GS_MOVE_MAX];
        CUdeviceptr tmp[GS_MOVE_MAX]; /* where slot i's new memory is mapped while its data is copied */
        CUevent ev[GS_SPILL_GROUPS];  /* NULL: none (waited for with the stream) */
        uint32_t nmap;                /* new memories imported and mapped at the scratch */
        uint32_t nold;                /* old memories retained */
        uint32_t n;                   /* slots that may move: [0, n) */
        uint32_t ncopy;               /* copies issued: [0, ncopy) */
        struct gs_spill_times *t;
        struct gs_spill_left *left;
};

static CUdeviceptr gs_spill_at(const struct gs_spill_batch *b, uint32_t i)
{
        return b->g->va_base + (CUdeviceptr)b->slots[i] * b->g->chunk;
}

static CUdeviceptr gs_spill_tmp(const struct gs_spill_batch *b, uint32_t i)
{
        return b->tmp[i];
}

static bool gs_spill_prepared(const struct gs_spill_batch *b, uint32_t i)
{
        return b->prep && b->prep[i] != UINT32_MAX;
}

/* Access to the scratch chunks of slots [a, e) that were not prepared
 * ahead (theirs has it), run by run of consecutive ones: 0, or -EIO at
 * the first slot of a run that failed (*ret_at). */
static int gs_spill_scratch_access(struct gs_spill_batch *b, uint32_t a, uint32_t e, uint32_t *ret_at)
{
        for (uint32_t i = a; i < e;) {
                uint32_t j = i;

                if (gs_spill_prepared(b, i)) {
                        i++;
                        continue;
                }
                while (j < e && !gs_spill_prepared(b, j))
                        j++;
                if (gs_space_access(b->cu, gs_spill_tmp(b, i), (size_t)(j - i) * b->g->chunk, b->dev) < 0) {
                        *ret_at = i;
                        return -EIO;
                }
                i = j;
        }
        return 0;
}

/* Slots [nmap, e): a prepared one's memory is found (mapped at its own
 * scratch, with access), the others' fds imported (each closed) and
 * mapped at scratch chunk i; stopping at the first slot that is not
 * mapped or whose memory cannot be; then access to those scratch chunks
 * (gs_spill_scratch_access).  Advances nmap; n = the slots ready for
 * their copy. */
static void gs_spill_prepare(struct gs_spill_batch *b, uint32_t e)
{
        const struct gs_cu *cu = b->cu;
        uint32_t a = b->nmap, bad;

        for (; b->nmap < e; b->nmap++) {
                uint32_t i = b->nmap, slot = b->slots[i];
                CUresult r;

                if (slot >= b->g->max_slots || !b->g->mapped[slot])
                        break;
                if (gs_spill_prepared(b, i)) {
                        if (gs_spill_prep_find(b->gi, b->prep[i], &b->hn[i], &b->tmp[i]) < 0)
                                break;
                        continue;
                }
                b->tmp[i] = b->scratch + (CUdeviceptr)i * b->g->chunk;
                r = cu->mem_import_from_shareable_handle(&b->hn[i], (void *)(intptr_t)b->fds[i],
                                                         CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
                gs_closep(&b->fds[i]);
                if (r != CUDA_SUCCESS)
                        break;
                if (cu->mem_map(gs_spill_tmp(b, i), b->g->chunk, 0, b->hn[i], 0) != CUDA_SUCCESS) {
                        (void)cu->mem_release(b->hn[i]);
                        break;
                }
        }
        b->n = b->nmap;
        if (b->nmap > a && gs_spill_scratch_access(b, a, b->nmap, &bad) < 0)
                b->n = bad;
}

/* Slots [a, mapped) of a run had the old memory unmapped and map the new
 * (no access yet); [mapped, end) map nothing.  Each gets the old memory
 * back, with access: 0, or -EIO if one could not (that slot is unmapped
 * now). */
static int gs_spill_back(struct gs_spill_batch *b, uint32_t a, uint32_t mapped, uint32_t end)
{
        const struct gs_cu *cu = b->cu;
        size_t size = b->g->chunk;
        int r = 0;

        for (uint32_t j = a; j < end; j++) {
                CUdeviceptr at = gs_spill_at(b, j);

                if (j < mapped)
                        (void)cu->mem_unmap(at, size);
                if (cu->mem_map(at, size, 0, b->ho[j], 0) != CUDA_SUCCESS) {
                        b->g->mapped[b->slots[j]] = 0;
                        r = -EIO;
                } else if (gs_space_access(cu, at, size, b->dev) < 0) {
                        (void)cu->mem_unmap(at, size);
                        b->g->mapped[b->slots[j]] = 0;
                        r = -EIO;
                }
        }
        return r;
}

/* Slots [a, e) (consecutive addresses): each old memory unmapped and the
 * new mapped, then access for the run in one call.  0: all moved, *moved
 * = e.  A slot that fails gets its old memory back (gs_spill_back) and
 * those before it in the run stay moved (*moved = that slot) if their
 * access can be set, else they get theirs back too: -EAGAIN, or -EIO. */
static int gs_spill_run(struct gs_spill_batch *b, uint32_t a, uint32_t e, uint32_t *moved)
{
        const struct gs_cu *cu = b->cu;
        size_t size = b->g->chunk;
        uint32_t i, end = e;

        for (i = a; i < e; i++) {
                if (cu->mem_unmap(gs_spill_at(b, i), size) != CUDA_SUCCESS) {
                        end = i; /* slot i as it was */
                        break;
                }
                if (cu->mem_map(gs_spill_at(b, i), size, 0, b->hn[i], 0) != CUDA_SUCCESS) {
                        end = i + 1; /* slot i maps nothing */
                        break;
                }
        }
        if (i > a && gs_space_access(cu, gs_spill_at(b, a), (size_t)(i - a) * size, b->dev) == 0) {
                *moved = i;
                if (i == e)
                        return 0;
                a = i;
        }
        return gs_spill_back(b, a, i, end) < 0 ? -EIO : -EAGAIN;
}

/* Every group's new memory prepared and its copies issued on st, one
 * event recorded after each group's (none if it cannot be: then the
 * stream is waited for whole).  A slot whose import or mapping fails, or
 * whose copy cannot be issued, ends the batch before it (n, ncopy). */
static void gs_spill_issue(struct gs_spill_batch *b, CUstream st)
{
        const struct gs_cu *cu = b->cu;

        for (uint32_t gr = 0; gr * GS_SPILL_GROUP < b->k && b->ncopy == b->nmap; gr++) {
                uint32_t e = (gr + 1) * GS_SPILL_GROUP < b->k ? (gr + 1) * GS_SPILL_GROUP : b->k;
                uint64_t t0 = gs_mono_ns();
                CUevent ev;

                gs_spill_prepare(b, e);
                b->t->prepare_ns += gs_mono_ns() - t0;
                t0 = gs_mono_ns();
                while (b->ncopy < b->n && cu->memcpy_dtod_async_v2(gs_spill_tmp(b, b->ncopy), gs_spill_at(b, b->ncopy),
                                                                   b->g->chunk, st) == CUDA_SUCCESS)
                        b->ncopy++;
                b->n = b->ncopy;
                if (b->ncopy > gr * GS_SPILL_GROUP && gs_spill_usable_events(cu) &&
                    cu->event_create(&ev, CU_EVENT_DISABLE_TIMING) == CUDA_SUCCESS) {
                        if (cu->event_record(ev, st) == CUDA_SUCCESS)
                                b->ev[gr] = ev;
                        else
                                (void)cu->event_destroy_v2(ev);
                }
                b->t->copy_ns += gs_mono_ns() - t0;
                if (b->n < e)
                        break;
        }
}

/* Whether group gr's copies are done (its event, else the whole stream):
 * a failure leaves nothing of it or after it known good. */
static bool gs_spill_copied(struct gs_spill_batch *b, uint32_t gr, CUstream st)
{
        const struct gs_cu *cu = b->cu;
        uint64_t t0 = gs_mono_ns();
        bool ok = b->ev[gr] ? cu->event_synchronize(b->ev[gr]) == CUDA_SUCCESS
                            : cu->stream_synchronize(st) == CUDA_SUCCESS;

        b->t->copy_ns += gs_mono_ns() - t0;
        return ok;
}

/* pre: a context of b->dev current.  The batch: prepared and copied group
 * by group (gs_spill_issue), then, group by group as its copies are done,
 * each slot's old memory retained (to map it back if need be) and the
 * slots remapped run by run (consecutive slots), stopping at the first
 * slot that fails.  Nothing is unmapped at a slot before its copy is
 * known done.  Returns how many moved (a prefix); *r = -EIO if a slot
 * could not get its old memory back. */
static uint32_t gs_spill_batch_move(struct gs_spill_batch *b, int *r)
{
        const struct gs_cu *cu = b->cu;
        uint32_t moved = 0;
        CUstream st = NULL;

        /* The stream is the batch's (made and destroyed around its copies,
         * a few microseconds): one kept per GPU could outlive its context
         * (a primary context released to nothing, an application context
         * destroyed), and a context's handle may come back the same. */
        if (cu->stream_create(&st, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS)
                st = NULL; /* the legacy default stream: nothing else runs now */
        gs_spill_issue(b, st);
        for (uint32_t gr = 0; moved < b->n && *r == 0; gr++) {
                uint32_t e = (gr + 1) * GS_SPILL_GROUP < b->n ? (gr + 1) * GS_SPILL_GROUP : b->n;
                uint64_t t0;

                if (!gs_spill_copied(b, gr, st)) {
                        b->n = moved;
                        break;
                }
                t0 = gs_mono_ns();
                while (b->nold < e && cu->mem_retain_allocation_handle(&b->ho[b->nold],
                                                                       (void *)gs_spill_at(b, b->nold)) == CUDA_SUCCESS)
                        b->nold++;
                if (b->nold < e)
                        b->n = e = b->nold;
                while (moved < e && *r == 0) {
                        uint32_t end = moved + 1;

                        while (end < e && b->slots[end] == b->slots[end - 1] + 1)
                                end++;
                        *r = gs_spill_run(b, moved, end, &moved);
                }
                b->t->remap_ns += gs_mono_ns() - t0;
        }
        /* The scratch is unmapped below: no copy may still write it. */
        if (b->ncopy)
                (void)cu->stream_synchronize(st);
        if (st)
                (void)cu->stream_destroy_v2(st);
        uint64_t t0 = gs_mono_ns();
        for (uint32_t gr = 0; gr < GS_SPILL_GROUPS; gr++)
                if (b->ev[gr])
                        (void)cu->event_destroy_v2(b->ev[gr]);
        for (uint32_t i = 0; i < b->nold; i++)
                (void)cu->mem_release(b->ho[i]);
        for (uint32_t i = 0; i < b->nmap; i++)
                if (!gs_spill_prepared(b, i)) {
                        b->left->at[b->left->n] = gs_spill_tmp(b, i);
                        b->left->h[b->left->n++] = b->hn[i];
                }
        b->t->remap_ns += gs_mono_ns() - t0;
        gs_hook_debug("batch of %u chunk(s): %u moved; import and map %.2f ms, copy %.2f ms, remap %.2f ms", b->k,
                      moved, (double)b->t->prepare_ns / 1e6, (double)b->t->copy_ns / 1e6, (double)b->t->remap_ns / 1e6);
        return moved;
}

/* pre: gs_conn.mu held.  What the batch left let go (data: the struct
 * gs_spill_left). */
static void gs_spill_tidy(void *data)
{
        struct gs_spill_left *left = data;
        const struct gs_cu *cu = gs_cu_get();

        for (uint32_t i = 0; cu && i < left->n; i++) {
                (void)cu->mem_unmap(left->at[i], left->chunk);
                (void)cu->mem_release(left->h[i]);
        }
        for (uint32_t i = 0; cu && i < left->nprep; i++)
                gs_spill_prep_forget(cu, left->gi, left->prep[i]);
        left->n = left->nprep = 0;
}

/* gs_spill_move, what it lets go left in *left for gs_spill_tidy. */
static uint32_t gs_spill_move_left(const struct gs_cu *cu, uint32_t gi, const uint32_t *slots, int *fds,
                                   const uint32_t *prep, uint32_t k, struct gs_spill_times *ret_t,
                                   struct gs_spill_left *left)
{
        struct gs_hook_gpu *g = &gs_conn.gpus[gi];
        struct gs_spill_times t = { 0 };
        struct gs_spill_batch b;
        struct gs_ctx_set s;
        CUcontext popped;
        uint32_t moved = 0;
        int r = 0;

        memset(&b, 0, sizeof(b));
        b.cu = cu;
        b.g = g;
        b.gi = gi;
        b.slots = slots;
        b.fds = fds;
        b.prep = prep;
        b.k = k;
        b.t = &t;
        b.left = left;
        memset(left, 0, sizeof(*left));
        left->gi = gi;
        left->chunk = g->chunk;
        if (k > GS_MOVE_MAX || !gs_spill_usable(cu) || gi >= gs_conn.ngpus || !g->va_base ||
            (b.dev = gs_spill_dev(cu, gi)) < 0 || (b.scratch = gs_spill_scratch(cu, gi)) == 0)
                goto out;
        gs_ctx_lock();
        /* Every context that may run work on the allocation's devices (the
         * peers of b.dev too: they have access). */
        if (gs_ctx_collect(cu, gs_space_devices(cu), b.dev, &s) == 0) {
                uint64_t t0 = gs_mono_ns();

                gs_gate_close();
                /* Work launched before the close may still run. */
                gs_ctx_set_sync(cu, &s);
                t.sync_ns = gs_mono_ns() - t0;
                if (cu->ctx_push_current_v2(s.copy) == CUDA_SUCCESS) {
                        moved = gs_spill_batch_move(&b, &r);
                        (void)cu->ctx_pop_current_v2(&popped);
                }
                gs_gate_open();
        } else {
                gs_hook_debug("no context to move GPU %u's memory with", gi);
        }
        gs_ctx_set_release(cu, &s);
        gs_ctx_unlock();
        if (r == -EIO)
                gs_conn_lost("cannot map a chunk's memory back after a failed move");
        for (uint32_t i = 0; i < moved; i++)
                gs_hook_ipc_moved(gi, slots[i]);
out:
        for (uint32_t i = 0; i < k; i++) {
                gs_closep(&fds[i]);
                /* Named: moved (its slot maps it) or not (the agent
                 * counts it as this process's until it exits). */
                if (prep && prep[i] != UINT32_MAX && k <= GS_MOVE_MAX)
                        left->prep[left->nprep++] = prep[i];
        }
        if (ret_t)
                *ret_t = t;
        return moved;
}

uint32_t gs_spill_move(const struct gs_cu *cu, uint32_t gi, const uint32_t *slots, int *fds, const uint32_t *prep,
                       uint32_t k, struct gs_spill_times *ret_t)
{
        struct gs_spill_left left;
        uint32_t moved = gs_spill_move_left(cu, gi, slots, fds, prep, k, ret_t, &left);

        gs_spill_tidy(&left);
        return moved;
}

/* ---- the exchange with the agent ------------------------------------ */

/* pre: gs_conn.mu held.  Reads the k GS_SOCK_MOVE messages that preceded
 * the reply to request seq on GPU gi.  0, or -EPROTO with why and every
 * fd received closed. */
static int gs_spill_take(uint32_t gi, uint64_t seq, uint32_t dir, uint32_t *slots, int *fds, uint32_t *prep, uint32_t k,
                         const char **why)
{
        struct gs_hook_gpu *g = &gs_conn.gpus[gi];
        int r = 0;

        for (uint32_t i = 0; i < k; i++) {
                fds[i] = -1;
                prep[i] = UINT32_MAX;
        }
        for (uint32_t i = 0; i < k && r == 0; i++) {
                struct gs_sock_grant m;
                ssize_t n = gs_conn_recv_fd(&m, sizeof(m), &fds[i]);
                bool pre;

                if (n < 0) {
                        *why = "a promised move did not arrive";
                        r = -EPROTO;
                        break;
                }
                /* Prepared ahead (GS_SOCK_MOVE_PREP): no fd, the memory's
                 * id in chunk_bytes, to host memory only. */
                pre = (size_t)n >= sizeof(m.h) && m.h.type == GS_SOCK_MOVE_PREP;
                if ((pre ? !gs_msg_hdr_ok(&m.h, GS_SOCK_MOVE_PREP, sizeof(m), n) || fds[i] >= 0 ||
                                     m.chunk_bytes >= GS_PREP_ID_MAX || dir != GS_MOVE_TO_HOST
                         : !gs_msg_hdr_ok(&m.h, GS_SOCK_MOVE, sizeof(m), n) || fds[i] < 0 ||
                                     m.chunk_bytes != g->chunk) ||
                    m.seq != seq || m.gpu != gi || m.slot >= g->max_slots || !g->mapped[m.slot]) {
                        *why = "malformed move";
                        r = -EPROTO;
                } else if (pre) {
                        prep[i] = (uint32_t)m.chunk_bytes;
                }
                for (uint32_t j = 0; j < i && r == 0; j++)
                        if (slots[j] == m.slot) {
                                *why = "the same slot twice in one move";
                                r = -EPROTO;
                        }
                slots[i] = m.slot;
        }
        if (r < 0)
                for (uint32_t i = 0; i < k; i++)
                        gs_closep(&fds[i]);
        return r;
}

/* pre: gs_conn.mu held.  GPU gi's host memory sent ahead prepared
 * (gs_hook_spillprep.h), in a context of its device (none: not now). */
static void gs_spill_prep_gpu(const struct gs_cu *cu, uint32_t gi)
{
        struct gs_ctx_set s;
        CUcontext popped;
        CUdevice dev;

        if (!(gs_conn.features & GS_FEAT_SPILL_PREP) || !gs_spill_usable(cu) || !gs_conn.gpus[gi].va_base ||
            (dev = gs_spill_dev(cu, gi)) < 0)
                return;
        gs_ctx_lock();
        if (gs_ctx_collect(cu, gs_space_devices(cu), dev, &s) == 0 && cu->ctx_push_current_v2(s.copy) == CUDA_SUCCESS) {
                gs_spill_prep_serve(cu, gi, dev);
                (void)cu->ctx_pop_current_v2(&popped);
        }
        gs_ctx_set_release(cu, &s);
        gs_ctx_unlock();
}

/* Prepared host memories of moved slots whose scratch mappings are let
 * go once a chain of batches is over (gs_spill_gpu), not between its
 * batches: the next batch waits for none of it. */
struct gs_spill_later {
        uint32_t n;
        uint32_t id[GS_PREP_MAX];
};

/* pre: gs_conn.mu held.  What left names of prepared memory goes to
 * later (let go at the chain's end), as far as later has room. */
static void gs_spill_defer(struct gs_spill_left *left, struct gs_spill_later *later)
{
        uint32_t keep = 0;

        for (uint32_t i = 0; i < left->nprep; i++)
                if (later->n < GS_PREP_MAX)
                        later->id[later->n++] = left->prep[i];
                else
                        left->prep[keep++] = left->prep[i];
        left->nprep = keep;
}

/* pre: gs_conn.mu held.  Whether the reply rep (to GS_OP_SPILL, or to a
 * chained GS_OP_SPILL_DONE) names a batch that can be moved: 0 nothing,
 * 1 yes (k, dir), -1 the connection was lost (malformed). */
static int gs_spill_named(const struct gs_ring_msg *rep, uint32_t *k, uint32_t *dir)
{
        if (rep->arg[0] == 0)
                return 0;
        if (rep->arg[0] > GS_MOVE_MAX || (rep->arg[1] != GS_MOVE_TO_HOST && rep->arg[1] != GS_MOVE_TO_DEVICE)) {
                gs_conn_lost("malformed reply to GS_OP_SPILL");
                return -1;
        }
        *k = (uint32_t)rep->arg[0];
        *dir = (uint32_t)rep->arg[1];
        return 1;
}

/* pre: gs_conn.mu held.  GPU gi's rounds: host memory prepared ahead if
 * the agent sends some, then what the agent names is moved, until it
 * names nothing, a move fails, or GS_SPILL_ROUNDS rounds.  A batch moved
 * whole to host memory asks for the next in its GS_OP_SPILL_DONE
 * (GS_FEAT_SPILL_CHAIN): the agent settles it while this one moves. */
static void gs_spill_gpu(const struct gs_cu *cu, uint32_t gi)
{
        struct gs_hook_gpu *g = &gs_conn.gpus[gi];
        static struct gs_spill_later later; /* gs_conn.mu */
        struct gs_ring_msg rep;
        bool have = false; /* rep names a batch chained to the last */

        later.n = 0;
        gs_spill_prep_gpu(cu, gi);
        for (int round = 0; round < GS_SPILL_ROUNDS; round++) {
                uint32_t slots[GS_MOVE_MAX], prep[GS_MOVE_MAX], k = 0, dir = 0, moved;
                struct gs_spill_left left;
                struct gs_spill_times t;
                int r;
                int fds[GS_MOVE_MAX];
                struct gs_ring_msg done;
                const char *why = NULL;
                bool chain;

                if (gs_conn.state != GS_CONN_UP || !g->va_base)
                        break;
                if (!have && gs_conn_call(GS_OP_SPILL, gi, 0, 0, &rep) < 0)
                        break;
                if (rep.status != 0) {
                        gs_hook_debug("the agent refused GS_OP_SPILL on GPU %u: %d", gi, rep.status);
                        break;
                }
                have = false;
                if (gs_spill_named(&rep, &k, &dir) <= 0)
                        break;
                if (gs_spill_take(gi, rep.seq, dir, slots, fds, prep, k, &why) < 0) {
                        gs_conn_lost(why);
                        break;
                }
                moved = gs_spill_move_left(cu, gi, slots, fds, prep, k, &t, &left);
                for (uint32_t i = 0; i < moved; i++)
                        g->mapped[slots[i]] = dir == GS_MOVE_TO_HOST ? GS_MAPPED_HOST : GS_MAPPED_DEVICE;
                gs_hook_debug("moved %u of %u chunk(s) of GPU %u to %s memory", moved, k, gi,
                              dir == GS_MOVE_TO_HOST ? "host" : "device");
                if (gs_conn.state != GS_CONN_UP) {
                        gs_spill_tidy(&left);
                        break; /* the move failed closed */
                }
                /* The next batch asked for with this one's answer (not in
                 * the last round: every batch named is answered). */
                chain = (gs_conn.features & GS_FEAT_SPILL_CHAIN) && dir == GS_MOVE_TO_HOST && moved == k &&
                        round + 1 < GS_SPILL_ROUNDS;
                if (chain)
                        gs_spill_defer(&left, &later);
                /* The batch's leftovers let go while the agent settles it. */
                r = gs_conn_call_during(GS_OP_SPILL_DONE, gi, moved, dir | (chain ? GS_MOVE_CHAIN : 0),
                                        GS_MOVE_US_PACK(t.sync_ns / 1000, t.prepare_ns / 1000),
                                        GS_MOVE_US_PACK(t.copy_ns / 1000, t.remap_ns / 1000), &done, gs_spill_tidy,
                                        &left);
                gs_spill_tidy(&left); /* if it was not called */
                if (r < 0)
                        break;
                if (done.status != 0) {
                        gs_hook_debug("the agent refused GS_OP_SPILL_DONE on GPU %u: %d", gi, done.status);
                        break;
                }
                if (moved < k)
                        break; /* asked again at the next wake-up */
                if (chain && done.arg[0] > 0) {
                        rep = done;
                        have = true;
                }
        }
        for (uint32_t i = 0; i < later.n; i++)
                gs_spill_prep_forget(cu, gi, later.id[i]);
        later.n = 0;
}

void gs_spill_serve(const struct gs_cu *cu)
{
        uint32_t v;

        if (gs_conn.state != GS_CONN_UP || !gs_conn.shm)
                return;
        if (gs_conn.reconnects != g_gen) {
                /* A new agent's segment: its word starts anew; what the
                 * last connection sent ahead is let go (the agent charges
                 * it to this process until it exits all the same). */
                g_gen = gs_conn.reconnects;
                g_seen = 0;
                gs_spill_prep_drop_all(cu);
        }
        if (!(gs_conn.features & GS_FEAT_SPILL))
                return;
        v = __atomic_load_n(&gs_conn.shm->spill, __ATOMIC_ACQUIRE);
        if (v == g_seen)
                return;
        g_seen = v;
        for (uint32_t gi = 0; gi < gs_conn.ngpus && gs_conn.state == GS_CONN_UP; gi++)
                gs_spill_gpu(cu, gi);
}

void gs_spill_start(void)
{
        gs_gate_arm();
        pthread_once(&g_fork_once, gs_spill_fork_register);
}
