/* alloc_mem — the agent's own memory per live block (issue 10, item 5).
 *
 * One process of one allocation (256 MiB chunks, a 64 GiB pool) allocates
 * 10^6 blocks of 256 B and keeps them live; the heap bytes the allocator
 * took meanwhile (glibc's mallinfo2: in-use arena bytes plus mmapped
 * blocks, so large tables count too), divided by the live blocks, is the
 * figure.  Counted from before the process is created, so its fixed
 * structures are in it.  The same with a 1 B-4 KiB mix (16 slab classes),
 * with one live 256 B block left in each slab (the worst case of slabs:
 * every other slot freed) and with 64 KiB+1 buddy blocks (the worst case
 * of the buddy per byte: each leaves its 63.75 KiB tail as eight free
 * pieces).  Prints one RESULT line. */
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>

#include "gs_pool.h"

#define CHUNK (256 * GS_MiB)
#define NCHUNKS 256
#define NBLOCKS 1000000u

static void die(const char *what, int r)
{
        fprintf(stderr, "alloc_mem: %s: %d\n", what, r);
        exit(1);
}

static size_t heap_bytes(void)
{
        struct mallinfo2 mi = mallinfo2();

        return mi.uordblks + mi.hblkhd;
}

/* Bytes of agent heap per live block after n blocks of lo..hi bytes, of
 * which every keep-th is kept live and the others freed. */
static double per_block(uint64_t lo, uint64_t hi, unsigned n, unsigned keep)
{
        struct gs_pool *pool = gs_pool_new(NCHUNKS, CHUNK);
        struct gs_palloc *a;
        struct gs_pproc *p;
        struct gs_grant g[NCHUNKS];
        struct gs_pproc_stats st;
        struct gs_release rel;
        uint32_t ng;
        uint64_t *off = malloc(n * sizeof(*off));
        int r;

        if (!pool || !off)
                die("setup", -ENOMEM);
        if ((r = gs_palloc_new(pool, NCHUNKS, 0, &a)) < 0)
                die("setup", r);
        size_t before = heap_bytes();
        if ((r = gs_pproc_new(a, NCHUNKS, &p)) < 0)
                die("setup", r);
        for (unsigned i = 0; i < n; i++)
                /* sizes spread over lo..hi by a multiplicative step */
                if ((r = gs_pproc_malloc(p, lo + (i * UINT64_C(2654435761)) % (hi - lo + 1), &off[i], g, NCHUNKS,
                                         &ng)) < 0)
                        die("malloc", r);
        for (unsigned i = 0; i < n; i++)
                if (i % keep && (r = gs_pproc_free(p, off[i], &rel)) < 0)
                        die("free", r);
        size_t after = heap_bytes();
        gs_pproc_stats(p, &st);
        if (st.nblocks != (n + keep - 1) / keep)
                die("count", -EUCLEAN);
        gs_pproc_del(p);
        if (gs_palloc_del(a) < 0)
                die("palloc_del", -EBUSY);
        gs_pool_free(pool);
        free(off);
        return (double)(after - before) / (double)st.nblocks;
}

int main(void)
{
        double b256 = per_block(256, 256, NBLOCKS, 1);
        printf("10^6 live 256 B blocks:             %.2f B of agent heap per block\n", b256);
        double mix = per_block(1, 4 * GS_KiB, NBLOCKS, 1);
        printf("10^6 live 1 B-4 KiB blocks:         %.2f B per block\n", mix);
        double sparse = per_block(256, 256, 128 * 8000, 128);
        printf("8000 256 B blocks, one per slab:    %.2f B per block\n", sparse);
        double buddy = per_block(64 * GS_KiB + 1, 64 * GS_KiB + 1, 100000, 1);
        printf("10^5 live 64 KiB+1 buddy blocks:    %.2f B per block\n", buddy);
        printf("RESULT agent_bytes_per_block=%.2f agent_bytes_per_mixed_block=%.2f "
               "agent_bytes_per_sparse_slab_block=%.2f agent_bytes_per_buddy_block=%.2f\n",
               b256, mix, sparse, buddy);
        return 0;
}
