/* gs_proc_hello.c — a connection's registration (gs_proc.h "Life of a
 * process"): its HELLO checked, the sealed segment with the rings made,
 * WELCOME sent with the segment and the doorbell, and the worker pool
 * given the connection (a reclaiming one first sends its reclaim,
 * gs_proc_reclaim.c). */
#include "gs_proc_int.h"
#include "gs_serve_spill.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <unistd.h>

#include "gs_gpu.h"
#include "gs_log.h"
#include "gs_ring.h"
#include "gs_sockmsg.h"

#ifndef F_SEAL_SEAL
#define F_SEAL_SEAL 0x0001
#define F_SEAL_SHRINK 0x0002
#define F_SEAL_GROW 0x0004
#endif

int gs_proc_check_hello(const void *buf, size_t n, char *err, size_t errlen)
{
        struct gs_sock_hello h;

        if (n != sizeof(h)) {
                snprintf(err, errlen, "HELLO of %zu bytes, expected %zu", n, sizeof(h));
                return -EPROTO;
        }
        memcpy(&h, buf, sizeof(h));
        if (h.h.magic != GS_WIRE_MAGIC) {
                snprintf(err, errlen, "bad magic 0x%08x", h.h.magic);
                return -EPROTO;
        }
        if (h.h.version != GS_WIRE_VERSION) {
                snprintf(err, errlen, "protocol version %u, this agent speaks %u", h.h.version, GS_WIRE_VERSION);
                return -EPROTO;
        }
        if (h.h.type != GS_SOCK_HELLO || h.h.len != sizeof(h) || h.h.reserved) {
                snprintf(err, errlen, "not a HELLO (type %u, len %u)", h.h.type, h.h.len);
                return -EPROTO;
        }
        if (h.flags & ~GS_HELLO_RECLAIM) {
                snprintf(err, errlen, "HELLO flags 0x%x, this agent knows 0x%x", h.flags, GS_HELLO_RECLAIM);
                return -EPROTO;
        }
        return 0;
}

static int make_segment(struct gs_proc *p, char *err, size_t errlen)
{
        int fd, r;
        void *m;

        fd = memfd_create("gshare-rings", MFD_CLOEXEC | MFD_ALLOW_SEALING);
        if (fd < 0 || ftruncate(fd, sizeof(struct gs_shm)) < 0) {
                r = gs_neg_errno();
                snprintf(err, errlen, "memfd: %s", strerror(-r));
                goto fail;
        }
        m = mmap(NULL, sizeof(struct gs_shm), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (m == MAP_FAILED) {
                r = gs_neg_errno();
                snprintf(err, errlen, "mmap: %s", strerror(-r));
                goto fail;
        }
        gs_shm_init(m);
        /* Fixed size for good: a peer that could shrink it would SIGBUS us. */
        if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0) {
                r = gs_neg_errno();
                snprintf(err, errlen, "sealing the segment: %s", strerror(-r));
                munmap(m, sizeof(struct gs_shm));
                goto fail;
        }
        p->shm = m;
        p->shmfd = fd;
        return 0;
fail:
        gs_closep(&fd);
        return r;
}

/* HELLO arrived (or not): registers the process. */
int gs_proc_on_hello(struct gs_agent *ag, struct gs_proc *p, char *err, size_t errlen)
{
        struct gs_allocation *a = p->alloc;
        char buf[sizeof(struct gs_sock_hello) + 64];
        struct gs_sock_welcome w;
        struct gs_sock_hello h;
        bool trunc;
        ssize_t n;
        int r;

        n = gs_sockmsg_recv(p->sock, buf, sizeof(buf), &trunc);
        if (n == -EAGAIN)
                return 1; /* spurious */
        if (n <= 0) {
                snprintf(err, errlen, "closed before HELLO");
                return -ECONNRESET;
        }
        if (trunc) {
                snprintf(err, errlen, "oversized HELLO");
                return -EPROTO;
        }
        r = gs_proc_check_hello(buf, (size_t)n, err, errlen);
        if (r < 0)
                return r;
        memcpy(&h, buf, sizeof(h));
        for (size_t i = 0; i < sizeof(h.comm) && h.comm[i]; i++)
                p->comm[i] = (h.comm[i] >= 0x20 && h.comm[i] < 0x7f) ? h.comm[i] : '?';
        p->comm[sizeof(h.comm)] = '\0';
        if (!p->comm[0])
                snprintf(p->comm, sizeof(p->comm), "?");

        r = make_segment(p, err, errlen);
        if (r < 0)
                return r;
        memset(&w, 0, sizeof(w));
        gs_sockmsg_hdr(&w.h, GS_SOCK_WELCOME, sizeof(w));
        w.h.reserved = GS_FEAT_RECLAIM | GS_FEAT_GIVEBACK | GS_FEAT_IPC_KEEP | GS_FEAT_NOTIFY | GS_FEAT_HOST_SLOTS |
                       GS_FEAT_QOS;
        p->move_feature = gs_spill_feature(ag, a);
        if (p->move_feature)
                w.h.reserved |= GS_FEAT_SPILL | GS_FEAT_SPILL_PREP | GS_FEAT_SPILL_CHAIN;
        w.ngpus = a->nparts;
        w.shm_bytes = sizeof(struct gs_shm);
        w.proc_id = p->id;
        r = gs_proc_gpus_init(ag, p, err, errlen);
        if (r < 0)
                return r;
        p->max_grants = 1;
        for (uint32_t i = 0; i < a->nparts; i++) {
                struct gs_proc_gpu *pg = &p->gpus[i];

                memcpy(w.gpus[i].uuid, pg->g->uuid_raw, 16);
                w.gpus[i].quota_bytes = pg->quota_bytes;
                w.gpus[i].chunk_bytes = pg->g->chunk_bytes;
                w.gpus[i].max_slots = pg->nslots;
                if (pg->nslots > p->max_grants)
                        p->max_grants = pg->nslots;
        }
        if (h.flags & GS_HELLO_RECLAIM)
                gs_proc_take_over_closed(ag, p);
        if (p->max_grants > GS_MAX_GRANTS_PER_REPLY)
                p->max_grants = GS_MAX_GRANTS_PER_REPLY;
        p->grants = calloc(p->max_grants, sizeof(*p->grants));
        p->grant_fds = calloc(p->max_grants, sizeof(*p->grant_fds));
        if (!p->grants || !p->grant_fds) {
                snprintf(err, errlen, "out of memory");
                return -ENOMEM;
        }
        p->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        p->notify_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        if (p->wake_fd < 0 || p->notify_fd < 0) {
                r = gs_neg_errno();
                snprintf(err, errlen, "eventfd: %s", strerror(-r));
                return r;
        }
        /* WELCOME only for a connection that will be served. */
        /* Asleep from the start: the first request rings the doorbell. */
        __atomic_store_n(&p->shm->agent_sleeping, 1, __ATOMIC_SEQ_CST);
        if (!(h.flags & GS_HELLO_RECLAIM)) {
                r = gs_workers_add(ag->workers, &p->went, p, &a->wgroup, p->wake_fd, &p->stop);
                if (r < 0) {
                        snprintf(err, errlen, "no worker slot: %s", strerror(-r));
                        return r;
                }
        }
        {
                const int fds[2] = { p->shmfd, p->wake_fd };
                r = gs_sockmsg_send_fds(p->sock, &w, sizeof(w), fds, 2, NULL);
        }
        if (r < 0) {
                snprintf(err, errlen, "sending WELCOME: %s", strerror(-r));
                return -ECONNRESET;
        }
        if (h.flags & GS_HELLO_RECLAIM) {
                p->state = GS_PROC_RECLAIM;
                p->hello_deadline_ms = gs_mono_ms() + GS_PROC_RECLAIM_MS;
                gs_loop_timer_arm(&ag->hello_timer, p->hello_deadline_ms);
                return 0;
        }
        p->state = GS_PROC_ACTIVE;
        gs_agent_want_scan(ag);
        log_info("process %d (%s, uid %u) registered on allocation %s as #%llu", p->pid, p->comm, (unsigned)p->uid,
                 a->id, (unsigned long long)p->id);
        return 0;
}
