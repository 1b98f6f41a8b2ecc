/* gs_handover_codec.h — the handover's messages (gs_handover.h): one
 * frame per message on the SOCK_SEQPACKET socket, a chunk's fd with it
 * (SCM_RIGHTS), and what the new agent builds from those the old one
 * sends: the snapshot of every chunk's fd (PREPARE's answer) and each
 * GPU's chunks (TAKE's).  Every frame is checked as hostile: a frame that
 * is cut short, of another magic or version, of an unexpected type, with
 * a count past its bound or fds that do not match it is refused
 * (-EPROTO) and the fds that came with it are closed; an entry that names
 * no chunk of ours, or one already given, is dropped and its fd closed.
 * No fd is left behind either way.  Pure: the socket is the caller's. */
#ifndef GS_HANDOVER_CODEC_H
#define GS_HANDOVER_CODEC_H

#include <stddef.h>
#include <stdint.h>

#include "gs_gpu.h"

#define GS_HO_MAGIC 0x4f485347u /* "GSHO" */
#define GS_HO_VERSION 1u
#define GS_HO_MAX_FDS 250u /* entries (and fds) per CHUNKS; SCM_MAX_FD is 253 */
/* GPU messages a snapshot may hold (a node's GPUs, with room). */
#define GS_HO_MAX_GPUS 64u

enum gs_ho_type {
        GS_HO_PREPARE = 1,
        GS_HO_ROOM,
        GS_HO_TAKE,
        GS_HO_GPU,
        GS_HO_CHUNKS,
        GS_HO_SENT,
        GS_HO_READY,
        GS_HO_FAIL
};

#define GS_HO_WRITTEN 1u /* a process may have written it */
#define GS_HO_FD 2u      /* its fd comes with this message (else: sent at PREPARE) */

struct gs_ho_ent {
        uint32_t chunk;
        uint32_t flags;
        uint64_t memid; /* gs_chunk.memid: the memory, whichever chunk holds it */
};

struct gs_ho_msg {
        uint32_t magic;
        uint16_t version, type;
        uint32_t n;       /* CHUNKS: entries (and fds) */
        uint32_t nchunks; /* GPU: the pool's size */
        uint64_t arg;     /* PREPARE: bytes wanted per GPU; GPU: chunk bytes */
        uint8_t uuid[16]; /* GPU */
        struct gs_ho_ent ent[GS_HO_MAX_FDS];
};

/* The bytes of m on the wire: its header, and a CHUNKS' entries. */
size_t gs_ho_msg_len(const struct gs_ho_msg *m);
/* m (magic and version set here) with nfds fds.  0, a negative errno, or
 * -EPROTO if it went out short. */
int gs_ho_send(int fd, struct gs_ho_msg *m, const int *fds, uint32_t nfds) GS_WUR;
/* One message of type (any if 0) within timeout_ms, with at most
 * GS_HO_MAX_FDS fds into fds (nfds set; fds NULL: any fd is closed).  Only
 * a CHUNKS carries fds, exactly one per entry flagged GS_HO_FD.  0;
 * -ETIMEDOUT, -ECONNRESET (the peer went), -ECANCELED (it sent FAIL),
 * -EPROTO (refused), or recvmsg's error; on any error no fd is kept. */
int gs_ho_recv(int fd, struct gs_ho_msg *m, uint16_t type, int *fds, uint32_t *nfds, int timeout_ms) GS_WUR;

/* The chunks' fds the old agent sent at PREPARE, per GPU, by memid. */
struct gs_ho_snap {
        uint8_t uuid[16];
        uint64_t *memid;
        int *fd;
        size_t n, cap;
};
struct gs_ho_snapset {
        struct gs_ho_snap *snap;
        size_t n;
};
/* One message of PREPARE's answer (before SENT): a GPU, then CHUNKS each
 * with an fd per entry (at most GS_LEDGER_MAX_CHUNKS per GPU).  The fds
 * are the set's or closed.  0, -EPROTO, -ENOMEM. */
int gs_ho_snap_add(struct gs_ho_snapset *s, const struct gs_ho_msg *m, const int *fds, uint32_t nfds) GS_WUR;
/* The fd the set holds for memid on the GPU uuid (taken out), or -1. */
int gs_ho_snap_take(struct gs_ho_snapset *s, const uint8_t uuid[16], uint64_t memid);
/* Closes what is left and frees; the set is empty after. */
void gs_ho_snap_free(struct gs_ho_snapset *s);

/* TAKE's answer into inh (one entry per GPU of gpus, zeroed by the
 * caller): a GPU message names which of ours the next CHUNKS are for (one
 * whose context is ready, not named before, of 1 to GS_LEDGER_MAX_CHUNKS
 * chunks of chunk_bytes; else they are dropped); each entry's fd is the
 * one that came with it, or the snapshot's for its memid. */
struct gs_ho_take {
        struct gs_gpu_inherit *inh;
        const struct gs_gpu *gpus;
        uint32_t ngpus;
        uint64_t chunk_bytes;
        struct gs_ho_snapset *snap; /* NULL: none */
        struct gs_gpu_inherit *cur; /* the GPU the CHUNKS are for, or NULL */
        uint8_t uuid[16];
};
/* One message of TAKE's answer (before SENT).  The fds are inh's or
 * closed.  0, -EPROTO (neither GPU nor CHUNKS), -ENOMEM. */
int gs_ho_take_msg(struct gs_ho_take *t, const struct gs_ho_msg *m, const int *fds, uint32_t nfds) GS_WUR;

#endif
