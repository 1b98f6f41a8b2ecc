/* gs_ctlsrv.c — see gs_ctlsrv.h. */
#include "gs_ctlsrv.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "gs_allocs.h"
#include "gs_claims.h"
#include "gs_ctl.h"
#include "gs_gpu.h"
#include "gs_log.h"
#include "gs_proc.h"

struct client {
        struct client *next;
        struct gs_ev ev;
        int fd;
        uint32_t events;        /* as registered with epoll */
        uint8_t *in;
        size_t in_len, in_cap;
        uint8_t *out;
        size_t out_off, out_len, out_cap;
        bool watching;
        bool closing;           /* close once out is flushed */
};

struct gs_ctlsrv {
        struct gs_agent *ag;
        int fd;
        struct gs_ev ev;
        char path[PATH_MAX];
        struct client *clients;
        uint32_t nclients;
};

/* ---- reply building: every piece from one arena, freed after packing ---- */

struct arena {
        void **p;
        size_t n, cap;
        bool failed;
};

static void *arena_alloc(struct arena *a, size_t size)
{
        void *m;

        if (a->n == a->cap) {
                size_t cap = a->cap ? a->cap * 2 : 64;
                void **np = realloc(a->p, cap * sizeof(*np));
                if (!np) {
                        a->failed = true;
                        return NULL;
                }
                a->p = np;
                a->cap = cap;
        }
        m = calloc(1, size ? size : 1);
        if (!m) {
                a->failed = true;
                return NULL;
        }
        a->p[a->n++] = m;
        return m;
}

static char *arena_str(struct arena *a, const char *s)
{
        size_t l = strlen(s) + 1;
        char *d = arena_alloc(a, l);

        if (d)
                memcpy(d, s, l);
        return d ? d : (char *)"";
}

static void arena_free(struct arena *a)
{
        for (size_t i = 0; i < a->n; i++)
                free(a->p[i]);
        free(a->p);
}

#define NEW(a, type, init)                                             \
        ({                                                             \
                type *m_ = arena_alloc(a, sizeof(type));               \
                if (m_)                                                \
                        *m_ = (type)init;                              \
                m_;                                                    \
        })

static Gshare__Ctl__V1__Gpu *gpu_msg(struct arena *ar, struct gs_gpu *g)
{
        Gshare__Ctl__V1__Gpu *m = NEW(ar, Gshare__Ctl__V1__Gpu, GSHARE__CTL__V1__GPU__INIT);
        struct gs_pool_stats st = { 0 };

        if (!m)
                return NULL;
        if (g->pool) {
                pthread_mutex_lock(&g->lock);
                gs_pool_stats(g->pool, &st);
                pthread_mutex_unlock(&g->lock);
        }
        m->index = g->index;
        m->uuid = arena_str(ar, g->uuid);
        m->name = arena_str(ar, g->name);
        m->numa_node = g->numa_node;
        m->total_bytes = g->total_bytes;
        m->reserve_bytes = g->reserve_bytes;
        m->chunk_bytes = g->chunk_bytes;
        m->chunks_total = st.nchunks;
        m->chunks_free = st.chunks_free;
        m->unit_bytes = g->unit_bytes;
        m->units_total = g->units_total;
        m->units_allocated = gs_gpu_units_allocated(g);
        m->units_lent = gs_gpu_units_lent(g);
        m->healthy = g->healthy;
        m->pci_bus_id = arena_str(ar, g->pci_bus_id);
        m->health_reason = arena_str(ar, g->healthy ? "" : g->health_reason);
        for (uint32_t u = 0; u < g->units_total; u++)
                if (g->unit_owner && g->unit_owner[u] && gs_allocs_draining(g->unit_owner[u]))
                        m->n_units_draining++;
        if (m->n_units_draining) {
                size_t k = 0;
                m->units_draining = arena_alloc(ar, m->n_units_draining * sizeof(uint32_t));
                if (!m->units_draining) {
                        m->n_units_draining = 0;
                        return m;
                }
                for (uint32_t u = 0; u < g->units_total; u++)
                        if (g->unit_owner && g->unit_owner[u] && gs_allocs_draining(g->unit_owner[u]))
                                m->units_draining[k++] = u;
        }
        if (g->units_total && g->agent->pending) {
                m->units_restoring = arena_alloc(ar, g->units_total * sizeof(*m->units_restoring));
                if (!m->units_restoring)
                        return NULL;
                m->n_units_restoring = gs_allocs_units_pending(g->agent, g, m->units_restoring, g->units_total);
        }
        return m;
}

static Gshare__Ctl__V1__ListGpusReply *gpus_msg(struct arena *ar, struct gs_agent *ag)
{
        Gshare__Ctl__V1__ListGpusReply *m =
                NEW(ar, Gshare__Ctl__V1__ListGpusReply, GSHARE__CTL__V1__LIST_GPUS_REPLY__INIT);

        if (!m)
                return NULL;
        m->gpus = arena_alloc(ar, ag->ngpus * sizeof(*m->gpus));
        if (!m->gpus)
                return NULL;
        for (uint32_t i = 0; i < ag->ngpus; i++)
                if (!(m->gpus[m->n_gpus++] = gpu_msg(ar, &ag->gpus[i])))
                        return NULL;
        m->generation = ag->generation;
        return m;
}

/* The claim fields of m, for a DRA claim's allocation.  false: out of memory. */
static bool alloc_msg_claim(struct arena *ar, struct gs_allocation *a, Gshare__Ctl__V1__Allocation *m)
{
        const struct gs_claim *c = gs_claims_of(a->agent, a);

        if (!c)
                return true;
        m->claim_uid = arena_str(ar, c->uid);
        m->claim_namespace = arena_str(ar, c->ns);
        m->claim_name = arena_str(ar, c->name);
        return m->claim_uid && m->claim_namespace && m->claim_name;
}

static Gshare__Ctl__V1__Allocation *alloc_msg(struct arena *ar, struct gs_allocation *a)
{
        struct gs_agent *ag = a->agent;
        Gshare__Ctl__V1__Allocation *m =
                NEW(ar, Gshare__Ctl__V1__Allocation, GSHARE__CTL__V1__ALLOCATION__INIT);
        size_t nproc = 0;

        if (!m)
                return NULL;
        m->id = arena_str(ar, a->id);
        m->device_ids = arena_alloc(ar, a->ndevice_ids * sizeof(char *));
        m->parts = arena_alloc(ar, a->nparts * sizeof(*m->parts));
        m->processes = arena_alloc(ar, (size_t)a->nprocs * a->nparts * sizeof(*m->processes) + 1);
        if (!m->device_ids || !m->parts || !m->processes)
                return NULL;
        for (size_t i = 0; i < a->ndevice_ids; i++)
                m->device_ids[m->n_device_ids++] = arena_str(ar, a->device_ids[i]);
        for (uint32_t i = 0; i < a->nparts; i++) {
                struct gs_gpu *g = &ag->gpus[a->parts[i].gpu];
                struct gs_palloc_stats st;
                Gshare__Ctl__V1__AllocationPart *pm = NEW(ar, Gshare__Ctl__V1__AllocationPart,
                                                          GSHARE__CTL__V1__ALLOCATION_PART__INIT);
                if (!pm)
                        return NULL;
                pthread_mutex_lock(&g->lock);
                gs_palloc_stats(a->parts[i].pa, &st);
                pm->outside_bytes = a->parts[i].out.charged;
                pthread_mutex_unlock(&g->lock);
                pm->used_bytes = (uint64_t)st.chunks_held * g->chunk_bytes;
                pm->gpu_index = g->index;
                pm->gpu_uuid = arena_str(ar, g->uuid);
                pm->units = a->parts[i].units;
                pm->quota_bytes = (uint64_t)a->parts[i].quota_chunks * g->chunk_bytes;
                pm->bytes_requested = st.bytes_requested;
                pm->bytes_in_chunks = ((uint64_t)st.chunks_free + st.chunks_held) * g->chunk_bytes;
                pm->chunks_quota = st.quota_chunks;
                pm->chunks_free = st.chunks_free;
                pm->chunks_borrowed = st.chunks_borrowed;
                m->parts[m->n_parts++] = pm;
        }
        for (struct gs_proc *p = a->procs; p; p = p->next) {
                if (p->state == GS_PROC_HELLO)
                        continue;
                for (uint32_t i = 0; i < p->ngpus && nproc < (size_t)a->nprocs * a->nparts; i++) {
                        struct gs_pproc_stats st;
                        Gshare__Ctl__V1__Process *pm =
                                NEW(ar, Gshare__Ctl__V1__Process, GSHARE__CTL__V1__PROCESS__INIT);
                        if (!pm)
                                return NULL;
                        pthread_mutex_lock(&p->gpus[i].g->lock);
                        gs_pproc_stats(p->gpus[i].pp, &st);
                        gs_vmm_stats(&p->gpus[i].vmm, &st);
                        pm->outside_bytes = p->gpus[i].outside_charge;
                        pthread_mutex_unlock(&p->gpus[i].g->lock);
                        pm->id = p->id;
                        pm->pid = p->pid;
                        pm->comm = arena_str(ar, p->comm);
                        pm->gpu_index = p->gpus[i].g->index;
                        pm->bytes_requested = st.bytes_requested;
                        pm->bytes_in_blocks = st.bytes_in_blocks;
                        pm->chunks_held = st.chunks_held;
                        m->processes[nproc++] = pm;
                }
        }
        m->n_processes = nproc;
        m->socket_dir = arena_str(ar, a->socket_dir);
        m->created_unix = a->created_unix;
        if (a->pod_name[0]) {
                m->pod_namespace = arena_str(ar, a->pod_namespace);
                m->pod_name = arena_str(ar, a->pod_name);
                m->container_name = arena_str(ar, a->container_name);
        }
        if (!alloc_msg_claim(ar, a, m))
                return NULL;
        return m;
}

/* ---- request handlers ---- */

static void do_create(struct gs_ctlsrv *s, struct arena *ar, const GsCtlRequest *req,
                      GsCtlReply *rep, char *err, size_t errlen)
{
        const Gshare__Ctl__V1__CreateAllocationRequest *c = req->create_allocation;
        Gshare__Ctl__V1__CreateAllocationReply *m;
        struct gs_allocation *a;
        bool created = false;
        int r;

        r = c->take_over ? gs_allocs_take_over(s->ag, (const char *const *)c->device_ids,
                                               c->n_device_ids, err, errlen)
                         : 0;
        if (r == 0)
                r = gs_allocs_create(s->ag, (const char *const *)c->device_ids, c->n_device_ids, 0, NULL,
                                     true, &a, &created, err, errlen);
        if (r < 0) {
                rep->error = r;
                return;
        }
        if (created) {
                log_info("allocation %s created: %zu units, socket %s", a->id, a->ndevice_ids,
                         a->socket_path);
                gs_agent_changed(s->ag);
        }
        m = NEW(ar, Gshare__Ctl__V1__CreateAllocationReply,
                GSHARE__CTL__V1__CREATE_ALLOCATION_REPLY__INIT);
        if (!m || !(m->allocation = alloc_msg(ar, a)))
                return;
        m->created = created;
        rep->body_case = GSHARE__CTL__V1__REPLY__BODY_CREATE_ALLOCATION;
        rep->create_allocation = m;
}

static void do_create_claim(struct gs_ctlsrv *s, struct arena *ar, const GsCtlRequest *req,
                            GsCtlReply *rep, char *err, size_t errlen)
{
        const Gshare__Ctl__V1__CreateClaimAllocationRequest *c = req->create_claim_allocation;
        Gshare__Ctl__V1__CreateAllocationReply *m;
        struct gs_allocation *a;
        bool created = false;
        int r;

        r = gs_claims_create(s->ag, c->claim_uid, c->claim_namespace, c->claim_name, c->gpu_uuid, c->units,
                             &a, &created, err, errlen);
        if (r < 0) {
                rep->error = r;
                return;
        }
        if (created) {
                log_info("allocation %s created for claim %s (%s/%s): %u units of GPU %s, socket %s", a->id,
                         c->claim_uid, c->claim_namespace, c->claim_name, c->units, c->gpu_uuid,
                         a->socket_path);
                gs_agent_changed(s->ag);
        }
        m = NEW(ar, Gshare__Ctl__V1__CreateAllocationReply,
                GSHARE__CTL__V1__CREATE_ALLOCATION_REPLY__INIT);
        if (!m || !(m->allocation = alloc_msg(ar, a)))
                return;
        m->created = created;
        rep->body_case = GSHARE__CTL__V1__REPLY__BODY_CREATE_ALLOCATION;
        rep->create_allocation = m;
}

static void do_release(struct gs_ctlsrv *s, struct arena *ar, const GsCtlRequest *req,
                       GsCtlReply *rep, char *err, size_t errlen)
{
        const Gshare__Ctl__V1__ReleaseAllocationRequest *c = req->release_allocation;
        struct gs_allocation *a = NULL;
        int r;

        if (c->claim_uid && c->claim_uid[0]) {
                r = gs_claims_release(s->ag, c->claim_uid, err, errlen);
                goto done;
        }
        if (c->id && c->id[0])
                a = gs_allocs_find(s->ag, c->id);
        else if (c->n_device_ids)
                a = gs_allocs_find_ids(s->ag, (const char *const *)c->device_ids, c->n_device_ids);
        if (!a || a->releasing) {
                /* Perhaps a checkpoint line waiting to be restored. */
                r = gs_allocs_release_pending(s->ag, c->id, (const char *const *)c->device_ids,
                                              c->n_device_ids, err, errlen);
                if (r == -ENOENT)
                        snprintf(err, errlen, "no allocation %s%.64s",
                                 c->id && c->id[0] ? "" : "for these device IDs", c->id ? c->id : "");
        } else {
                r = gs_allocs_release(s->ag, a, err, errlen);
        }
done:
        if (r < 0) {
                rep->error = r;
                return;
        }
        gs_agent_changed(s->ag);
        rep->body_case = GSHARE__CTL__V1__REPLY__BODY_RELEASE_ALLOCATION;
        rep->release_allocation = NEW(ar, Gshare__Ctl__V1__ReleaseAllocationReply,
                                      GSHARE__CTL__V1__RELEASE_ALLOCATION_REPLY__INIT);
}

static void do_list_allocs(struct gs_ctlsrv *s, struct arena *ar, GsCtlReply *rep)
{
        Gshare__Ctl__V1__ListAllocationsReply *m = NEW(ar, Gshare__Ctl__V1__ListAllocationsReply,
                                                       GSHARE__CTL__V1__LIST_ALLOCATIONS_REPLY__INIT);

        if (!m || !(m->allocations = arena_alloc(ar, s->ag->nallocs * sizeof(*m->allocations))))
                return;
        for (struct gs_allocation *a = s->ag->allocs; a; a = a->next)
                if (m->n_allocations < s->ag->nallocs &&
                    !(m->allocations[m->n_allocations++] = alloc_msg(ar, a)))
                        return;
        rep->body_case = GSHARE__CTL__V1__REPLY__BODY_LIST_ALLOCATIONS;
        rep->list_allocations = m;
}

/* ---- connection handling ---- */

static void set_events(struct gs_ctlsrv *s, struct client *c)
{
        uint32_t want = EPOLLIN | EPOLLRDHUP | (c->out_len > c->out_off ? EPOLLOUT : 0);
        struct epoll_event e = { .events = want, .data.ptr = &c->ev };

        if (want != c->events && epoll_ctl(s->ag->epfd, EPOLL_CTL_MOD, c->fd, &e) == 0)
                c->events = want;
}

static void client_close(struct gs_ctlsrv *s, struct client *c)
{
        for (struct client **pp = &s->clients; *pp; pp = &(*pp)->next)
                if (*pp == c) {
                        *pp = c->next;
                        s->nclients--;
                        break;
                }
        gs_agent_unwatch(s->ag, c->fd);
        gs_closep(&c->fd);
        free(c->in);
        free(c->out);
        c->ev.dead = true;
        gs_agent_defer_free(s->ag, c);
}

/* Queues one framed message.  Returns 0 or -ENOBUFS (queue limit). */
static int queue_msg(struct client *c, const ProtobufCMessage *msg)
{
        size_t len = protobuf_c_message_get_packed_size(msg), need;

        if (len > GS_CTL_MAX_MSG)
                return -EMSGSIZE;
        if (c->out_off == c->out_len)
                c->out_off = c->out_len = 0;
        need = c->out_len + 4 + len;
        if (need > GS_CTLSRV_MAX_QUEUED)
                return -ENOBUFS;
        if (need > c->out_cap) {
                size_t cap = need * 2 > GS_CTLSRV_MAX_QUEUED ? GS_CTLSRV_MAX_QUEUED : need * 2;
                uint8_t *p = realloc(c->out, cap);
                if (!p)
                        return -ENOMEM;
                c->out = p;
                c->out_cap = cap;
        }
        c->out[c->out_len] = (uint8_t)len;
        c->out[c->out_len + 1] = (uint8_t)(len >> 8);
        c->out[c->out_len + 2] = (uint8_t)(len >> 16);
        c->out[c->out_len + 3] = (uint8_t)(len >> 24);
        protobuf_c_message_pack(msg, c->out + c->out_len + 4);
        c->out_len += 4 + len;
        return 0;
}

/* Writes what the socket takes.  Returns 0, or < 0 if the client is gone. */
static int flush(struct gs_ctlsrv *s, struct client *c)
{
        int r = gs_agent_send_pending(c->fd, c->out, c->out_len, &c->out_off);

        if (r < 0)
                return r;
        if (c->out_off == c->out_len && c->closing)
                return -ECONNRESET;
        set_events(s, c);
        return 0;
}

static void reply_error(struct client *c, int err, const char *msg)
{
        GsCtlReply rep = GSHARE__CTL__V1__REPLY__INIT;

        rep.error = err;
        rep.message = (char *)msg;
        (void)queue_msg(c, &rep.base);
}

static void handle(struct gs_ctlsrv *s, struct client *c, const uint8_t *buf, size_t len)
{
        GsCtlReply rep = GSHARE__CTL__V1__REPLY__INIT;
        struct arena ar = { 0 };
        char err[512] = "";
        GsCtlRequest *req;

        req = gshare__ctl__v1__request__unpack(NULL, len, buf);
        if (!req) {
                reply_error(c, -EBADMSG, "malformed request: not a gshare.ctl.v1.Request");
                c->closing = true;
                return;
        }
        switch (req->op_case) {
        case GSHARE__CTL__V1__REQUEST__OP_CREATE_ALLOCATION:
                do_create(s, &ar, req, &rep, err, sizeof(err));
                break;
        case GSHARE__CTL__V1__REQUEST__OP_RELEASE_ALLOCATION:
                do_release(s, &ar, req, &rep, err, sizeof(err));
                break;
        case GSHARE__CTL__V1__REQUEST__OP_CREATE_CLAIM_ALLOCATION:
                do_create_claim(s, &ar, req, &rep, err, sizeof(err));
                break;
        case GSHARE__CTL__V1__REQUEST__OP_LIST_GPUS:
                rep.list_gpus = gpus_msg(&ar, s->ag);
                rep.body_case = GSHARE__CTL__V1__REPLY__BODY_LIST_GPUS;
                break;
        case GSHARE__CTL__V1__REQUEST__OP_LIST_ALLOCATIONS:
                do_list_allocs(s, &ar, &rep);
                break;
        case GSHARE__CTL__V1__REQUEST__OP_WATCH:
                rep.list_gpus = gpus_msg(&ar, s->ag);
                rep.body_case = GSHARE__CTL__V1__REPLY__BODY_LIST_GPUS;
                c->watching = true;
                break;
        default:
                rep.error = -EOPNOTSUPP;
                snprintf(err, sizeof(err), "unknown request (op %d)", (int)req->op_case);
                break;
        }
        if (ar.failed) {
                rep = (GsCtlReply)GSHARE__CTL__V1__REPLY__INIT;
                rep.error = -ENOMEM;
                snprintf(err, sizeof(err), "agent out of memory building the reply");
        } else if (rep.error == 0 && rep.body_case == GSHARE__CTL__V1__REPLY__BODY__NOT_SET) {
                rep.error = -EIO;
                snprintf(err, sizeof(err), "internal error");
        }
        rep.message = err;
        if (rep.error)
                rep.body_case = GSHARE__CTL__V1__REPLY__BODY__NOT_SET;
        if (queue_msg(c, &rep.base) < 0)
                c->closing = true;
        arena_free(&ar);
        gshare__ctl__v1__request__free_unpacked(req, NULL);
}

void gs_ctlsrv_on_client(struct gs_ctlsrv *s, struct gs_ev *ev, uint32_t events)
{
        struct client *c = ev->obj;

        if (events & EPOLLIN) {
                for (;;) {
                        size_t want;
                        ssize_t n;

                        if (c->closing) {
                                uint8_t junk[256];
                                n = recv(c->fd, junk, sizeof(junk), MSG_DONTWAIT);
                        } else {
                                if (c->in_len == c->in_cap) {
                                        size_t cap = c->in_cap ? c->in_cap * 2 : 4096;
                                        uint8_t *p;
                                        if (cap > GS_CTL_MAX_MSG + 4)
                                                cap = GS_CTL_MAX_MSG + 4;
                                        p = realloc(c->in, cap);
                                        if (!p) {
                                                client_close(s, c);
                                                return;
                                        }
                                        c->in = p;
                                        c->in_cap = cap;
                                }
                                want = c->in_cap - c->in_len;
                                n = recv(c->fd, c->in + c->in_len, want, MSG_DONTWAIT);
                        }
                        if (n == 0) {
                                client_close(s, c);
                                return;
                        }
                        if (n < 0) {
                                if (errno == EINTR)
                                        continue;
                                if (errno == EAGAIN || errno == EWOULDBLOCK)
                                        break;
                                client_close(s, c);
                                return;
                        }
                        if (c->closing)
                                continue;
                        c->in_len += (size_t)n;
                        /* Serve every whole frame received. */
                        while (c->in_len >= 4 && !c->closing) {
                                uint32_t len = (uint32_t)c->in[0] | (uint32_t)c->in[1] << 8 |
                                               (uint32_t)c->in[2] << 16 | (uint32_t)c->in[3] << 24;
                                if (len == 0 || len > GS_CTL_MAX_MSG) {
                                        reply_error(c, -EMSGSIZE, "frame length out of range");
                                        c->closing = true;
                                        break;
                                }
                                if (c->in_len < 4 + (size_t)len)
                                        break;
                                if (c->watching) {
                                        /* A watch stream takes no more requests. */
                                        reply_error(c, -EINVAL, "no requests after watch");
                                        c->closing = true;
                                        break;
                                }
                                handle(s, c, c->in + 4, len);
                                memmove(c->in, c->in + 4 + len, c->in_len - 4 - len);
                                c->in_len -= 4 + (size_t)len;
                        }
                }
        }
        if ((events & (EPOLLHUP | EPOLLERR)) && !(events & EPOLLIN)) {
                client_close(s, c);
                return;
        }
        if (flush(s, c) < 0)
                client_close(s, c);
}

void gs_ctlsrv_on_listen(struct gs_ctlsrv *s)
{
        for (;;) {
                struct client *c;
                int fd = accept4(s->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);

                if (fd < 0) {
                        if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
                                log_warn("control socket: accept: %m");
                        return;
                }
                if (s->nclients >= GS_CTLSRV_MAX_CLIENTS) {
                        log_warn("control socket: %u clients already, refusing one", s->nclients);
                        close(fd);
                        continue;
                }
                c = calloc(1, sizeof(*c));
                if (!c) {
                        close(fd);
                        continue;
                }
                c->fd = fd;
                c->ev = (struct gs_ev){ GS_EV_CTL_CLIENT, c, false };
                c->events = EPOLLIN | EPOLLRDHUP;
                if (gs_agent_watch(s->ag, fd, c->events, &c->ev) < 0) {
                        close(fd);
                        free(c);
                        continue;
                }
                c->next = s->clients;
                s->clients = c;
                s->nclients++;
        }
}

void gs_ctlsrv_broadcast(struct gs_ctlsrv *s)
{
        GsCtlReply rep = GSHARE__CTL__V1__REPLY__INIT;
        struct arena ar = { 0 };
        struct client *c, *nx;

        if (!s)
                return;
        for (c = s->clients; c && !c->watching; c = c->next)
                ;
        if (!c)
                return;
        rep.list_gpus = gpus_msg(&ar, s->ag);
        rep.body_case = GSHARE__CTL__V1__REPLY__BODY_LIST_GPUS;
        if (!ar.failed) {
                for (c = s->clients; c; c = nx) {
                        nx = c->next;
                        if (!c->watching || c->closing)
                                continue;
                        if (queue_msg(c, &rep.base) < 0) {
                                log_warn("control socket: a watcher is not reading; dropped");
                                client_close(s, c);
                        } else if (flush(s, c) < 0) {
                                client_close(s, c);
                        }
                }
        }
        arena_free(&ar);
}

int gs_ctlsrv_new(struct gs_agent *ag, const char *path, struct gs_ctlsrv **ret, char *err,
                  size_t errlen)
{
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        struct gs_ctlsrv *s;
        mode_t old;
        int r;

        if (strlen(path) >= sizeof(sa.sun_path)) {
                snprintf(err, errlen, "control socket path %s is too long", path);
                return -ENAMETOOLONG;
        }
        s = calloc(1, sizeof(*s));
        if (!s) {
                snprintf(err, errlen, "out of memory");
                return -ENOMEM;
        }
        s->ag = ag;
        s->fd = -1;
        snprintf(s->path, sizeof(s->path), "%s", path);
        strcpy(sa.sun_path, path);
        (void)unlink(path);
        s->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (s->fd < 0) {
                r = gs_neg_errno();
                goto fail;
        }
        /* Born 0600: no window in which others could connect. */
        old = umask(0177);
        r = bind(s->fd, (struct sockaddr *)&sa, sizeof(sa));
        umask(old);
        if (r < 0 || listen(s->fd, 64) < 0) {
                r = gs_neg_errno();
                goto fail;
        }
        s->ev = (struct gs_ev){ GS_EV_CTL_LISTEN, s, false };
        r = gs_agent_watch(ag, s->fd, EPOLLIN, &s->ev);
        if (r < 0)
                goto fail;
        *ret = s;
        return 0;
fail:
        snprintf(err, errlen, "cannot listen on %s: %s", path, strerror(-r));
        gs_closep(&s->fd);
        free(s);
        return r;
}

void gs_ctlsrv_free(struct gs_ctlsrv *s)
{
        if (!s)
                return;
        while (s->clients)
                client_close(s, s->clients);
        if (s->fd >= 0) {
                gs_agent_unwatch(s->ag, s->fd);
                close(s->fd);
                (void)unlink(s->path);
        }
        free(s);
}
