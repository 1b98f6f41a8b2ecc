/* fc_graph.c — node lists of the fake driver's graphs (fc_graph.h). */
#include <stdlib.h>
#include <string.h>

#include "fc_graph.h"

struct fc_graph *fc_graph_new(int exec)
{
        struct fc_graph *g = calloc(1, sizeof(*g));

        if (g) {
                g->magic = FC_GRAPH_MAGIC;
                g->exec = exec;
        }
        return g;
}

int fc_graph_add(struct fc_graph *g, const struct fc_kernel *k)
{
        if (g->n == g->cap) {
                size_t cap = g->cap ? g->cap * 2 : 8;
                struct fc_kernel *nodes;

                if (cap > FC_GRAPH_MAX_NODES || !(nodes = realloc(g->nodes, cap * sizeof(*nodes))))
                        return -1;
                g->nodes = nodes;
                g->cap = cap;
        }
        g->nodes[g->n++] = *k;
        return 0;
}

struct fc_graph *fc_graph_instantiate(const struct fc_graph *g)
{
        struct fc_graph *x = fc_graph_new(1);

        if (!x)
                return NULL;
        if (g->n) {
                x->nodes = malloc(g->n * sizeof(*x->nodes));
                if (!x->nodes) {
                        free(x);
                        return NULL;
                }
                memcpy(x->nodes, g->nodes, g->n * sizeof(*x->nodes));
                x->n = x->cap = g->n;
        }
        return x;
}

void fc_graph_free(struct fc_graph *g)
{
        if (!g)
                return;
        g->magic = 0;
        free(g->nodes);
        free(g);
}
