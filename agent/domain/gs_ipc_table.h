/* gs_ipc_table.h — an allocation's CUDA IPC exports (the allocation owns
 * the table, gs_allocs.h; the sessions make and resolve exports, since an
 * export names a block of one process: gs_ipc.h). */
#ifndef GS_IPC_TABLE_H
#define GS_IPC_TABLE_H

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gs_util.h"

/* Live exports per allocation, all processes together (and per process:
 * GS_IPC_MAX_EXPORTS_PER_PROC, gs_wire.h). */
#define GS_IPC_MAX_EXPORTS 65536u

struct gs_proc; /* the sessions' process: the table only points at it */
struct gs_ipc_export;

/* Memory a reclaiming exporter maps under its exports: its fd (at most one
 * per process, GPU and slot it holds). */
struct gs_ipc_mem {
        struct gs_proc *p;
        uint32_t gpu, slot;
        int fd;
};

struct gs_ipc_table {
        pthread_mutex_t lock;
        struct gs_ipc_export *v;
        uint32_t n, cap;
        struct gs_ipc_mem *mem;
        uint32_t nmem, capmem;
};

static inline void gs_ipc_table_init(struct gs_ipc_table *t)
{
        memset(t, 0, sizeof(*t));
        pthread_mutex_init(&t->lock, NULL);
}

static inline void gs_ipc_table_fini(struct gs_ipc_table *t)
{
        for (uint32_t i = 0; i < t->nmem; i++)
                gs_closep(&t->mem[i].fd);
        free(t->mem);
        t->mem = NULL;
        t->nmem = t->capmem = 0;
        free(t->v);
        t->v = NULL;
        t->n = t->cap = 0;
        pthread_mutex_destroy(&t->lock);
}

#endif
