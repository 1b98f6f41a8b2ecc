/* gs_agentcli.h — the plugins' client of the agent: typed calls of the
 * control protocol (proto/gshare.proto, framed by gs_ctl.h) for the device
 * plugin and the DRA plugin.
 *
 * One connection is kept open and reused call after call (the agent serves
 * any number of requests on a connection).  A call that finds it in use by
 * another thread opens a connection of its own for that one call, so
 * concurrent calls never wait behind one another or behind a slow answer.
 * The kept connection is dropped after any failed exchange (a late answer
 * must not be read as the next call's) and when the agent closed it (a
 * restart): the next call connects again.  A call whose kept connection the
 * agent closes as it is sent (-ECONNRESET, -EPIPE) is tried once more on a
 * new one, as a connection of its own would have reached the new agent.
 *
 * Every call returns 0, or a negative errno with e saying what went wrong:
 * e->transport when the exchange itself failed (the agent unreachable, or
 * silent for the timeout), e->agent when the agent answered with an error.
 * A reply is returned only when it carries the body the call asks for. */
#ifndef GS_AGENTCLI_H
#define GS_AGENTCLI_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gs_ctl.h"
#include "gs_util.h"

struct gs_agentcli {
        const char *socket; /* the agent's control socket; outlives the client */
        int timeout_ms;     /* the default bound on one call */
        pthread_mutex_t mu; /* held by the call using fd */
        int fd;             /* the kept connection, -1 when none */
};

struct gs_agentcli_err {
        int transport; /* negative errno: nothing (usable) came back */
        int agent;     /* the agent's Reply.error */
        char msg[512]; /* the problem, naming the socket or quoting the agent */
};

/* The claim of a DRA ResourceClaim's allocation (CreateClaimAllocation). */
struct gs_agentcli_claim {
        const char *uid, *namespace_, *name;
        const char *gpu_uuid;
        uint32_t units;
        uint64_t burst;            /* bytes (docs/burst.md); 0: none */
        const char *compute_class; /* docs/compute.md; NULL or "": none */
        uint32_t compute_cap;      /* percent; 0: none */
        uint32_t compute_weight;   /* 1..100; 0: the default */
        int wait_ms;               /* an agent away (restarting) is waited for this long */
};

void gs_agentcli_init(struct gs_agentcli *c, const char *socket, int timeout_ms);
/* Closes the kept connection; no call may be running. */
void gs_agentcli_free(struct gs_agentcli *c);

/* ListAllocations: (*ret)->list_allocations is set; free with
 * gs_ctl_reply_free. */
int gs_agentcli_list_allocations(struct gs_agentcli *c, GsCtlReply **ret, struct gs_agentcli_err *e) GS_WUR;

/* The two creates below still send this release's deprecated forms
 * (CreateAllocationRequest.device_ids, CreateClaimAllocation), on purpose:
 * during a surge upgrade the new pod's plugin may reach the old pod's agent
 * through the node's control socket, and an agent of the previous release
 * ignores the owner oneof (an unknown field) and would refuse the request.
 * This release's agent serves both forms with the same code; the next
 * release sends the owner oneof (docs/agent.md "Control socket").
 *
 * CreateAllocation of the n device IDs (take_over: see gshare.proto),
 * bounded by timeout_ms (< 0: the client's); while no agent serves the
 * socket (a restart or an upgrade: missing, refused) it tries again for up
 * to wait_ms (0: fails at once).  (*ret)->create_allocation and its
 * allocation are set. */
int gs_agentcli_create_allocation(struct gs_agentcli *c, char *const *ids, size_t n, bool take_over, int timeout_ms,
                                  int wait_ms, GsCtlReply **ret, struct gs_agentcli_err *e) GS_WUR;

/* The allocation of a DRA claim: the one place that asks the agent for it.
 * (*ret)->create_allocation and its allocation are set.  Sent in the old
 * form (CreateClaimAllocation), which every agent knows, unless the claim
 * has a burst: CreateAllocation with the owner claim and burst_bytes, which
 * an agent before this release refuses (it ignores the owner), so such a
 * claim is prepared once the node's agent is upgraded. */
int gs_agentcli_create_claim_allocation(struct gs_agentcli *c, const struct gs_agentcli_claim *cl, GsCtlReply **ret,
                                        struct gs_agentcli_err *e) GS_WUR;

/* ReleaseAllocation by allocation ID, or (id NULL) by claim UID. */
int gs_agentcli_release(struct gs_agentcli *c, const char *id, const char *claim_uid, struct gs_agentcli_err *e) GS_WUR;

/* Opens a Watch stream on a connection of its own (the agent takes no other
 * request on it).  Returns its fd, or a negative errno. */
int gs_agentcli_watch_open(struct gs_agentcli *c) GS_WUR;
/* The stream's next GPU list, waiting at most wait_ms for it to begin (a
 * list begun is read whole within the client's timeout): 0 with *ret
 * ((*ret)->list_gpus set), -ETIMEDOUT when none came, -EPROTO when the
 * agent refused the stream (logged), or another negative errno when the
 * stream broke. */
int gs_agentcli_watch_next(struct gs_agentcli *c, int fd, int wait_ms, GsCtlReply **ret) GS_WUR;

#endif
