/* gs_gpu.h — one GPU of the node: its primary context, identity, and the
 * pool of GSM chunks the agent carves from its free memory.
 *
 * At open, (free - reserve) / chunk_bytes chunks are created with
 * cuMemCreate (POSIX file-descriptor handle type) and each is exported once;
 * the fd is kept and sent to every process granted the chunk.  From then on
 * a process that bypasses the hook finds only the reserve free.
 *
 * Recycling: when a chunk that was granted goes back to the system free
 * list, its memory is released and a fresh chunk created and exported in its
 * place, since the process it was granted to may have kept the old fd; the
 * fresh memory cannot be reached through it.  If that fails the chunk is
 * retired (the pool shrinks by one chunk).
 *
 * struct gs_gpu is its identity and pool here, and parts, each owned by
 * its header and files (gs_gpu_int.h gives the files' order):
 *
 *   chunk records   g->chunks[], nchunks ...  gs_gpu_chunk.h    gs_gpu_chunk.c
 *   scrubbing       g->scrub                  gs_gpu_scrubber.h gs_gpu_scrub.c, gs_gpu_scrubber.c
 *   moves (spill)   g->moves                  gs_gpu_spill.h    gs_gpu_spill.c
 *   spill record    g->spillrec               gs_gpu_spillrec.h gs_gpu_spillrec.c
 *   restarts        g->restart (ledger, the   gs_gpu_restart.h  gs_gpu_restart.c,
 *                   handover's phase)         gs_gpu_phase.h    gs_gpu_phase.c
 *   the lock        g->lock                   gs_gpu_lock.h     gs_gpu_lock.c
 *
 * One lock covers them all: g->lock.  "Under g->lock" below: the caller took it with gs_gpu_lock
 * (gs_gpu_lock.h), which also made g->ctx current on its thread; each
 * such function asserts it (gs_gpu_assert_locked).  "Takes g->lock": the
 * function takes it itself, the caller must not hold it. */
#ifndef GS_GPU_H
#define GS_GPU_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "gs_node.h"
#include "gs_cuda.h"
#include "gs_devid.h"
#include "gs_gpu_lock.h"
#include "gs_ledger.h"
#include "gs_pool.h"
#include "gs_wire.h"
/* The parts. */
#include "gs_gpu_chunk.h"
#include "gs_gpu_restart.h"
#include "gs_gpu_scrubber.h"
#include "gs_gpu_spill.h"
#include "gs_gpu_spillrec.h"

struct gs_allocation;
struct gs_gsm;

struct gs_gpu {
        struct gs_node *node;
        uint32_t index; /* CUDA ordinal */
        CUdevice dev;
        CUcontext ctx; /* primary context, retained */
        uint8_t uuid_raw[16];
        char uuid[GS_UUID_STR_LEN + 1];
        char name[256];
        char pci_bus_id[32];
        int numa_node;
        uint64_t total_bytes;
        uint64_t reserve_bytes;
        uint64_t chunk_bytes;
        uint64_t unit_bytes;
        uint32_t nchunks; /* chunks created at start */
        uint32_t units_total;
        uint32_t chunks_retired;
        uint32_t chunks_pending; /* retired for now: re-created when the driver has room */
        uint64_t ctx_promised;   /* under lock: charged for contexts not created yet */
        struct gs_chunk *chunks;
        struct gs_pool *pool;
        /* Serializes every call on pool, every access to chunks[] and to
         * the parts below: taken only through gs_gpu_lock (gs_gpu_lock.h). */
        struct gs_gpu_lock lock;
        bool healthy;
        char health_reason[160];
        /* units_total entries: the allocation holding each unit, or NULL.
         * Main thread only. */
        struct gs_allocation **unit_owner;
        uint32_t last_borrowed; /* under lock: for lending-change events */
        /* Outside memory (gs_outside.h), under lock: what the outside sets
         * released to the driver, and what the last scan measured the
         * charged processes using outside the pool. */
        uint64_t outside_held;
        uint64_t outside_measured;
        /* A context's expected size, charged when a process is about to
         * create one (config contextSize, else measured at start). */
        uint64_t ctx_expect_bytes;
        void *nvml_dev; /* NVML's device, NULL until found */
        bool ctx_ready; /* gs_gpu_open_ctx done: a pool may be built */
        /* Chunk records (gs_gpu_chunk.h) beside chunks[] above, under lock. */
        uint64_t memid_next;           /* the last memid given */
        uint32_t chunks_made_at_start; /* at open, with memory; the rest stood for memory held */
        /* The parts, each in its own header and files, each under the
         * lock unless its header says otherwise: */
        struct gs_gpu_scrubber scrub;    /* gs_gpu_scrubber.h: zeroing, the scrubber thread */
        struct gs_gpu_moves moves;       /* gs_gpu_spill.h: spares, moves to host memory and back */
        struct gs_gpu_spillrec spillrec; /* gs_gpu_spillrec.h: spilled data for a restarted agent */
        struct gs_gpu_restart restart;   /* gs_gpu_restart.h: ledger, what was before, handover phase */
};

/* Opens CUDA device `ordinal` into *g (zeroed by the caller, g->node set).
 * A GPU whose pool cannot be built is still opened, unhealthy, with the
 * reason in g->health_reason and no units.  Returns a negative errno with a
 * message in err only if the device cannot be used at all. */
int gs_gpu_open(struct gs_gpu *g, int ordinal, const struct gs_config *cfg, char *err, size_t errlen) GS_WUR;
/* gs_gpu_open in two steps, for an upgrade (gs_handover.h): the context
 * first, while the previous agent still serves; the pool once it handed
 * its chunks over (inh; NULL: made from the driver's free memory as
 * gs_gpu_open does).  The fds of inh are the GPU's from then on. */
int gs_gpu_open_ctx(struct gs_gpu *g, int ordinal, const struct gs_config *cfg, char *err, size_t errlen) GS_WUR;
int gs_gpu_open_pool(struct gs_gpu *g, const struct gs_config *cfg, const struct gs_gpu_inherit *inh, char *err,
                     size_t errlen) GS_WUR;
/* Stops the scrubber, frees the pool, releases every chunk, releases the
 * context.  A zeroed or half-opened g is fine. */
void gs_gpu_close(struct gs_gpu *g);

/* Device memory (gs_gpu_chunk.c).  Device memory of `size` bytes (a
 * multiple of the granularity) on g, with
 * the chunks' properties; exported as a POSIX fd (close-on-exec) into
 * *ret_fd if export_fd, else *ret_fd = -1.  The caller holds g->lock and has
 * made g->ctx current.  0 or a negative errno with the reason in err. */
int gs_gpu_mem_make(struct gs_gpu *g, uint64_t size, bool export_fd, CUmemGenericAllocationHandle *ret_h, int *ret_fd,
                    char *err, size_t errlen) GS_WUR;
/* Closes *fd (if >= 0) and releases h. */
void gs_gpu_mem_drop(struct gs_gpu *g, CUmemGenericAllocationHandle h, int *fd);

/* 0 if the driver can give bytes more without its free memory falling
 * below the reserve plus what is promised to contexts being created
 * (released for them, gs_outside.h, and not created yet); else -ENOSPC (or
 * -EIO) with the figures in err.  Under g->lock with g->ctx current. */
int gs_gpu_room(struct gs_gpu *g, uint64_t bytes, char *err, size_t errlen) GS_WUR;
/* How many bytes gs_gpu_room allows now (0 if it cannot tell).  Under
 * g->lock with g->ctx current. */
uint64_t gs_gpu_room_left(struct gs_gpu *g);

/* Units' worth of chunks lent by ballooning (rounded up: a partly lent unit
 * cannot be handed out).  Takes g->lock. */
uint32_t gs_gpu_units_lent(struct gs_gpu *g);
/* Units held by allocations.  Main thread only (unit_owner). */
uint32_t gs_gpu_units_allocated(const struct gs_gpu *g);

/* Reads /sys/bus/pci/devices/<bus id, lower case>/numa_node under sysfs
 * (normally "/sys"); -1 if absent or unreadable. */
int gs_gpu_numa_node(const char *sysfs, const char *pci_bus_id);

/* After any change to the pool under g->lock: if what is lent changed,
 * tells the main thread (gs_agent_poke). */
void gs_gpu_check_lending(struct gs_gpu *g);

#endif
