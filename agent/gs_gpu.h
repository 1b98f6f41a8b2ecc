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
 * retired (the pool shrinks by one chunk). */
#ifndef GS_GPU_H
#define GS_GPU_H

#include "gs_agent.h"

/* Opens CUDA device `ordinal` into *g (zeroed by the caller, g->agent set).
 * A GPU whose pool cannot be built is still opened, unhealthy, with the
 * reason in g->health_reason and no units.  Returns a negative errno with a
 * message in err only if the device cannot be used at all. */
int gs_gpu_open(struct gs_gpu *g, int ordinal, const struct gs_config *cfg, char *err,
                size_t errlen) GS_WUR;
/* Frees the pool, releases every chunk, releases the context.  A zeroed or
 * half-opened g is fine. */
void gs_gpu_close(struct gs_gpu *g);

/* Units' worth of chunks lent by ballooning (rounded up: a partly lent unit
 * cannot be handed out).  Takes g->lock. */
uint32_t gs_gpu_units_lent(struct gs_gpu *g);

/* Reads /sys/bus/pci/devices/<bus id, lower case>/numa_node under sysfs
 * (normally "/sys"); -1 if absent or unreadable. */
int gs_gpu_numa_node(const char *sysfs, const char *pci_bus_id);

#endif
