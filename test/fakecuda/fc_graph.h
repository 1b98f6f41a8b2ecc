/* fc_graph.h — the fake driver's CUDA graphs: what stream capture records
 * (the kernels launched into it, in order) and what cuGraphLaunch replays
 * on a stream.  A graph and its executable graph are both a node list. */
#ifndef FC_GRAPH_H
#define FC_GRAPH_H

#include <stddef.h>
#include <stdint.h>

/* One launch of a fake kernel, its parameters read. */
struct fc_kernel {
        int spin;      /* fakecuda_spin_kernel (else fakecuda_fill_kernel) */
        uint32_t us;   /* spin: its duration; fill: its delay_us */
        uintptr_t dst; /* fill: [dst, dst+bytes) := value */
        size_t bytes;
        uint32_t value;
};

#define FC_GRAPH_MAGIC 0x48505247u /* "GRPH" */
#define FC_GRAPH_MAX_NODES 65536

struct fc_graph {
        uint32_t magic; /* first, as every object of fakecuda.c's registry */
        int exec;       /* an executable graph (cuGraphInstantiate) */
        size_t n, cap;
        struct fc_kernel *nodes;
};

struct fc_graph *fc_graph_new(int exec);
/* Appends k; -1 when out of memory or FC_GRAPH_MAX_NODES. */
int fc_graph_add(struct fc_graph *g, const struct fc_kernel *k);
/* An executable copy of g, NULL when out of memory. */
struct fc_graph *fc_graph_instantiate(const struct fc_graph *g);
void fc_graph_free(struct fc_graph *g);

#endif
