/* gs_ring.h — operations on the SPSC rings of gs_wire.h.  Header-only,
 * libc-only (the hook includes it).
 *
 * Each side keeps its own index in private memory (ret_/priv_ arguments) and
 * only publishes it to the shared segment: a hostile peer can scribble on the
 * shared copy but cannot make us read outside the ring or re-read a slot. */
#ifndef GS_RING_H
#define GS_RING_H

#include <errno.h>
#include <linux/futex.h>
#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "gs_wire.h"

#define GS_RING_MASK (GS_RING_SLOTS - 1u)

/* Producer: copies *m into the ring.  *priv_head is the producer's private
 * head.  Returns 0, or -EAGAIN if the ring is full, or -EPROTO if the
 * consumer's published tail is impossible (hostile or corrupt peer). */
static inline int gs_ring_push(struct gs_ring *r, uint32_t *priv_head, const struct gs_ring_msg *m)
{
        /* acquire: the consumer's reads of the slot we are about to reuse
         * happen-before our overwrite of it. */
        uint32_t tail = __atomic_load_n(&r->tail, __ATOMIC_ACQUIRE);
        uint32_t fill = *priv_head - tail;

        if (fill > GS_RING_SLOTS)
                return -EPROTO;
        if (fill == GS_RING_SLOTS)
                return -EAGAIN;
        memcpy(&r->msg[*priv_head & GS_RING_MASK], m, sizeof(*m));
        (*priv_head)++;
        /* release: the slot's contents are visible before the new head. */
        __atomic_store_n(&r->head, *priv_head, __ATOMIC_RELEASE);
        return 0;
}

/* Consumer: copies the next message out into *ret_m (so later writes by the
 * peer cannot change what we validate).  *priv_tail is the consumer's
 * private tail.  Returns 1 with a message, 0 if empty, -EPROTO if the
 * producer's published head is impossible. */
static inline int gs_ring_pop(struct gs_ring *r, uint32_t *priv_tail, struct gs_ring_msg *ret_m)
{
        /* acquire: pairs with the producer's release of head, so the slot's
         * contents are visible once we see the new head. */
        uint32_t head = __atomic_load_n(&r->head, __ATOMIC_ACQUIRE);
        uint32_t fill = head - *priv_tail;

        if (fill > GS_RING_SLOTS)
                return -EPROTO;
        if (fill == 0)
                return 0;
        memcpy(ret_m, &r->msg[*priv_tail & GS_RING_MASK], sizeof(*ret_m));
        (*priv_tail)++;
        /* release: our copy-out completes before the producer may reuse it. */
        __atomic_store_n(&r->tail, *priv_tail, __ATOMIC_RELEASE);
        return 1;
}

/* Non-empty check for a consumer, without consuming. */
static inline int gs_ring_ready(const struct gs_ring *r, uint32_t priv_tail)
{
        return __atomic_load_n(&r->head, __ATOMIC_ACQUIRE) != priv_tail;
}

/* Waits while *word == expected, for at most timeout_ns (0: forever).
 * Returns 0 on wake-up or value change, -ETIMEDOUT, or -EINTR. */
static inline int gs_futex_wait(uint32_t *word, uint32_t expected, uint64_t timeout_ns)
{
        struct timespec ts, *tsp = NULL;
        long r;

        if (timeout_ns) {
                ts.tv_sec = (time_t)(timeout_ns / 1000000000u);
                ts.tv_nsec = (long)(timeout_ns % 1000000000u);
                tsp = &ts;
        }
        r = syscall(SYS_futex, word, FUTEX_WAIT, expected, tsp, NULL, 0);
        if (r == 0 || errno == EAGAIN)
                return 0;
        return errno == ETIMEDOUT ? -ETIMEDOUT : -errno;
}

static inline void gs_futex_wake(uint32_t *word)
{
        (void)syscall(SYS_futex, word, FUTEX_WAKE, 1, NULL, NULL, 0);
}

/* Producer side of the doorbell: bump the consumer's word, and make the
 * syscall only if the consumer said it is (about to be) asleep.  seq_cst
 * on both sides orders "publish head; read sleeping" against the consumer's
 * "set sleeping; re-check head", so a wake-up cannot be lost. */
static inline void gs_doorbell_ring(uint32_t *word, uint32_t *sleeping)
{
        __atomic_add_fetch(word, 1, __ATOMIC_SEQ_CST);
        if (__atomic_load_n(sleeping, __ATOMIC_SEQ_CST))
                gs_futex_wake(word);
}

/* Producer side of a doorbell whose consumer waits in epoll: as
 * gs_doorbell_ring, but the wake-up is a write to the consumer's eventfd. */
static inline void gs_doorbell_ring_fd(uint32_t *word, uint32_t *sleeping, int efd)
{
        __atomic_add_fetch(word, 1, __ATOMIC_SEQ_CST);
        if (__atomic_load_n(sleeping, __ATOMIC_SEQ_CST)) {
                uint64_t one = 1;
                /* EAGAIN: the counter is full, a wake-up is pending anyway. */
                if (write(efd, &one, sizeof(one)) < 0) {
                }
        }
}

/* Consumer side: sleep on the doorbell unless the ring has work.  Returns as
 * gs_futex_wait does; 0 also when work was already there. */
static inline int gs_doorbell_sleep(struct gs_ring *r, uint32_t priv_tail, uint32_t *word, uint32_t *sleeping,
                                    uint64_t timeout_ns)
{
        uint32_t seen = __atomic_load_n(word, __ATOMIC_SEQ_CST);
        int rc = 0;

        __atomic_store_n(sleeping, 1, __ATOMIC_SEQ_CST);
        if (!gs_ring_ready(r, priv_tail))
                rc = gs_futex_wait(word, seen, timeout_ns);
        __atomic_store_n(sleeping, 0, __ATOMIC_SEQ_CST);
        return rc;
}

static inline void gs_shm_init(struct gs_shm *s)
{
        memset(s, 0, sizeof(*s));
        s->magic = GS_WIRE_MAGIC;
        s->version = GS_WIRE_VERSION;
        s->size = (uint32_t)sizeof(*s);
        s->ring_slots = GS_RING_SLOTS;
}

#endif
