/* gs_agentcli.c — see gs_agentcli.h. */
#include "gs_agentcli.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gs_log.h"

void gs_agentcli_init(struct gs_agentcli *c, const char *socket, int timeout_ms)
{
        c->socket = socket;
        c->timeout_ms = timeout_ms;
        pthread_mutex_init(&c->mu, NULL);
        c->fd = -1;
}

void gs_agentcli_free(struct gs_agentcli *c)
{
        gs_closep(&c->fd);
        pthread_mutex_destroy(&c->mu);
}

/* Whether the kept connection can carry a request: nothing to read on it.
 * One the agent closed reads EOF; anything else would be taken for the
 * answer to our request. */
static bool conn_idle(int fd)
{
        struct pollfd p = { .fd = fd, .events = POLLIN };

        return poll(&p, 1, 0) == 0;
}

static int exchange(int fd, const GsCtlRequest *req, int timeout_ms, GsCtlReply **ret)
{
        int r = gs_ctl_send(fd, &req->base, timeout_ms);

        return r < 0 ? r : gs_ctl_recv_reply(fd, timeout_ms, ret);
}

/* One request, one reply: on the kept connection if it is free, else on a
 * connection of this call's own. */
static int call(struct gs_agentcli *c, const GsCtlRequest *req, int timeout_ms, GsCtlReply **ret)
{
        int r = -EIO;

        if (pthread_mutex_trylock(&c->mu) != 0) {
                int fd = gs_ctl_connect(c->socket);

                if (fd < 0)
                        return fd;
                r = exchange(fd, req, timeout_ms, ret);
                close(fd);
                return r;
        }
        if (c->fd >= 0 && !conn_idle(c->fd))
                gs_closep(&c->fd);
        for (int tries = c->fd >= 0 ? 2 : 1; tries-- > 0;) {
                if (c->fd < 0) {
                        r = gs_ctl_connect(c->socket);
                        if (r < 0)
                                break;
                        c->fd = r;
                        tries = 0; /* a new connection is not tried twice */
                }
                r = exchange(c->fd, req, timeout_ms, ret);
                if (r == 0)
                        break;
                gs_closep(&c->fd); /* its answer may still come: never read it as another's */
                /* A kept connection that the agent closed as we sent (a
                 * restart, an upgrade's handover) is tried once more on a
                 * new one, where a call of its own would have gone. */
                if (r != -ECONNRESET && r != -EPIPE)
                        break;
        }
        pthread_mutex_unlock(&c->mu);
        return r;
}

/* Whether r says no agent serves the socket now (a restart, an upgrade):
 * the file is missing or nobody listens on it. */
static bool agent_away(int r)
{
        return r == -ENOENT || r == -ECONNREFUSED;
}

/* call, and while the agent is away, again: 50 ms apart, doubling to 1 s,
 * until wait_ms have passed (0: once). */
static int call_waiting(struct gs_agentcli *c, const GsCtlRequest *req, int timeout_ms, int wait_ms, const char *what,
                        GsCtlReply **ret)
{
        int64_t until = gs_mono_ms() + (wait_ms > 0 ? wait_ms : 0);
        long nap = 50;
        int r;

        while (agent_away(r = call(c, req, timeout_ms, ret)) && gs_mono_ms() + nap < until) {
                struct timespec ts = { nap / 1000, (nap % 1000) * 1000000 };

                if (nap == 50)
                        log_info("%s: the gshare agent at %s is away (%s): waiting up to %d ms for it", what, c->socket,
                                 strerror(-r), wait_ms);
                nanosleep(&ts, NULL);
                nap = nap * 2 > 1000 ? 1000 : nap * 2;
        }
        return r;
}

/* Sends req and checks the reply's body; what describes it for e->msg.
 * wait_ms: how long to wait for an agent that is away. */
static int typed_call(struct gs_agentcli *c, const GsCtlRequest *req, int timeout_ms, int wait_ms, int body,
                      const char *what, GsCtlReply **ret, struct gs_agentcli_err *e)
{
        GsCtlReply *rep = NULL;
        int r;

        e->transport = e->agent = 0;
        e->msg[0] = '\0';
        if (timeout_ms < 0)
                timeout_ms = c->timeout_ms;
        r = call_waiting(c, req, timeout_ms, wait_ms, what, &rep);
        if (r < 0) {
                e->transport = r;
                if (r == -ETIMEDOUT)
                        snprintf(e->msg, sizeof(e->msg), "gshare agent at %.200s did not answer within %d ms",
                                 c->socket, timeout_ms);
                else
                        snprintf(e->msg, sizeof(e->msg), "cannot reach the gshare agent at %.200s: %s", c->socket,
                                 strerror(-r));
                return r;
        }
        if (rep->error) {
                e->agent = rep->error < 0 ? rep->error : -EPROTO;
                snprintf(e->msg, sizeof(e->msg), "%.400s",
                         rep->message && rep->message[0] ? rep->message : strerror(-e->agent));
        } else if ((int)rep->body_case != body ||
                   (body == GSHARE__CTL__V1__REPLY__BODY_CREATE_ALLOCATION && !rep->create_allocation->allocation)) {
                e->agent = -EPROTO;
                snprintf(e->msg, sizeof(e->msg), "the agent answered %s without its result", what);
        }
        if (e->agent || !ret) {
                gs_ctl_reply_free(rep);
                return e->agent;
        }
        *ret = rep;
        return 0;
}

int gs_agentcli_list_allocations(struct gs_agentcli *c, GsCtlReply **ret, struct gs_agentcli_err *e)
{
        GsCtlRequest req = GSHARE__CTL__V1__REQUEST__INIT;
        Gshare__Ctl__V1__ListAllocationsRequest la = GSHARE__CTL__V1__LIST_ALLOCATIONS_REQUEST__INIT;

        req.op_case = GSHARE__CTL__V1__REQUEST__OP_LIST_ALLOCATIONS;
        req.list_allocations = &la;
        return typed_call(c, &req, -1, 0, GSHARE__CTL__V1__REPLY__BODY_LIST_ALLOCATIONS, "ListAllocations", ret, e);
}

int gs_agentcli_create_allocation(struct gs_agentcli *c, char *const *ids, size_t n, bool take_over, int timeout_ms,
                                  int wait_ms, GsCtlReply **ret, struct gs_agentcli_err *e)
{
        GsCtlRequest req = GSHARE__CTL__V1__REQUEST__INIT;
        Gshare__Ctl__V1__CreateAllocationRequest ca = GSHARE__CTL__V1__CREATE_ALLOCATION_REQUEST__INIT;

        req.op_case = GSHARE__CTL__V1__REQUEST__OP_CREATE_ALLOCATION;
        req.create_allocation = &ca;
        ca.n_device_ids = n;
        ca.device_ids = (char **)ids;
        ca.take_over = take_over;
        return typed_call(c, &req, timeout_ms, wait_ms, GSHARE__CTL__V1__REPLY__BODY_CREATE_ALLOCATION,
                          "CreateAllocation", ret, e);
}

int gs_agentcli_create_claim_allocation(struct gs_agentcli *c, const struct gs_agentcli_claim *cl, GsCtlReply **ret,
                                        struct gs_agentcli_err *e)
{
        GsCtlRequest req = GSHARE__CTL__V1__REQUEST__INIT;
        Gshare__Ctl__V1__CreateClaimAllocationRequest cr = GSHARE__CTL__V1__CREATE_CLAIM_ALLOCATION_REQUEST__INIT;
        Gshare__Ctl__V1__CreateAllocationRequest ca = GSHARE__CTL__V1__CREATE_ALLOCATION_REQUEST__INIT;
        Gshare__Ctl__V1__ClaimOwner owner = GSHARE__CTL__V1__CLAIM_OWNER__INIT;

        if (cl->burst || (cl->compute_class && cl->compute_class[0]) || cl->compute_cap || cl->compute_weight) {
                req.op_case = GSHARE__CTL__V1__REQUEST__OP_CREATE_ALLOCATION;
                req.create_allocation = &ca;
                ca.owner_case = GSHARE__CTL__V1__CREATE_ALLOCATION_REQUEST__OWNER_CLAIM;
                ca.claim = &owner;
                ca.burst_bytes = cl->burst;
                ca.compute_class = (char *)(cl->compute_class ? cl->compute_class : "");
                ca.compute_cap = cl->compute_cap;
                ca.compute_weight = cl->compute_weight;
                owner.uid = (char *)cl->uid;
                owner.namespace_ = (char *)cl->namespace_;
                owner.name = (char *)cl->name;
                owner.gpu_uuid = (char *)cl->gpu_uuid;
                owner.units = cl->units;
                return typed_call(c, &req, -1, cl->wait_ms, GSHARE__CTL__V1__REPLY__BODY_CREATE_ALLOCATION,
                                  "CreateAllocation", ret, e);
        }
        req.op_case = GSHARE__CTL__V1__REQUEST__OP_CREATE_CLAIM_ALLOCATION;
        req.create_claim_allocation = &cr;
        cr.claim_uid = (char *)cl->uid;
        cr.claim_namespace = (char *)cl->namespace_;
        cr.claim_name = (char *)cl->name;
        cr.gpu_uuid = (char *)cl->gpu_uuid;
        cr.units = cl->units;
        /* The agent answers a claim's allocation as CreateAllocation's. */
        return typed_call(c, &req, -1, cl->wait_ms, GSHARE__CTL__V1__REPLY__BODY_CREATE_ALLOCATION,
                          "CreateClaimAllocation", ret, e);
}

int gs_agentcli_release(struct gs_agentcli *c, const char *id, const char *claim_uid, struct gs_agentcli_err *e)
{
        GsCtlRequest req = GSHARE__CTL__V1__REQUEST__INIT;
        Gshare__Ctl__V1__ReleaseAllocationRequest rel = GSHARE__CTL__V1__RELEASE_ALLOCATION_REQUEST__INIT;

        req.op_case = GSHARE__CTL__V1__REQUEST__OP_RELEASE_ALLOCATION;
        req.release_allocation = &rel;
        if (id)
                rel.id = (char *)id;
        else
                rel.claim_uid = (char *)claim_uid;
        return typed_call(c, &req, -1, 0, GSHARE__CTL__V1__REPLY__BODY_RELEASE_ALLOCATION, "ReleaseAllocation", NULL,
                          e);
}

int gs_agentcli_watch_open(struct gs_agentcli *c)
{
        GsCtlRequest req = GSHARE__CTL__V1__REQUEST__INIT;
        Gshare__Ctl__V1__WatchRequest w = GSHARE__CTL__V1__WATCH_REQUEST__INIT;
        int fd = gs_ctl_connect(c->socket), r;

        if (fd < 0)
                return fd;
        req.op_case = GSHARE__CTL__V1__REQUEST__OP_WATCH;
        req.watch = &w;
        r = gs_ctl_send(fd, &req.base, c->timeout_ms);
        if (r < 0) {
                close(fd);
                return r;
        }
        return fd;
}

int gs_agentcli_watch_next(struct gs_agentcli *c, int fd, int wait_ms, GsCtlReply **ret)
{
        struct pollfd p = { .fd = fd, .events = POLLIN };
        GsCtlReply *rep = NULL;
        int r;

        do
                r = poll(&p, 1, wait_ms);
        while (r < 0 && errno == EINTR);
        if (r < 0)
                return gs_neg_errno();
        if (r == 0)
                return -ETIMEDOUT;
        r = gs_ctl_recv_reply(fd, c->timeout_ms, &rep);
        if (r == -ETIMEDOUT) {
                log_debug("the agent's Watch message stopped midway for %d ms", c->timeout_ms);
                return -EIO; /* not "none came": the stream is out of step */
        }
        if (r < 0)
                return r;
        if (rep->error) {
                log_warn("agent refused Watch: %s", rep->message);
                r = -EPROTO;
        } else if (rep->body_case != GSHARE__CTL__V1__REPLY__BODY_LIST_GPUS) {
                log_warn("the agent's Watch stream sent something other than a GPU list (%d)", (int)rep->body_case);
                r = -EPROTO;
        }
        if (r < 0) {
                gs_ctl_reply_free(rep);
                return r;
        }
        *ret = rep;
        return 0;
}
