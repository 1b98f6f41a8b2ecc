/* gs_ipc_table.h — an allocation's CUDA IPC exports (the allocation owns
 * the table, gs_allocs.h; the sessions make and resolve exports, since an
 * export names a block of one process: gs_ipc.h). */
#ifndef GS_IPC_TABLE_H
#define GS_IPC_TABLE_H

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Live exports per allocation, all processes together. */
#define GS_IPC_MAX_EXPORTS 65536u

struct gs_ipc_export;

struct gs_ipc_table {
        pthread_mutex_t lock;
        struct gs_ipc_export *v;
        uint32_t n, cap;
};

static inline void gs_ipc_table_init(struct gs_ipc_table *t)
{
        memset(t, 0, sizeof(*t));
        pthread_mutex_init(&t->lock, NULL);
}

static inline void gs_ipc_table_fini(struct gs_ipc_table *t)
{
        free(t->v);
        t->v = NULL;
        t->n = t->cap = 0;
        pthread_mutex_destroy(&t->lock);
}

#endif
