/* gs_hook_blocks.c — see gs_hook_blocks.h. */
#include "gs_hook_blocks.h"

#include <stdlib.h>

static size_t slot_of(uint64_t key, size_t cap)
{
        /* Offsets are multiples of 256: mix the high bits in. */
        key *= UINT64_C(0x9e3779b97f4a7c15);
        return (size_t)(key >> 32) & (cap - 1);
}

static int grow(struct gs_blocks *b)
{
        size_t cap = b->cap ? 2 * b->cap : 64;
        uint64_t *k = calloc(cap, sizeof(*k)), *s = calloc(cap, sizeof(*s));

        if (!k || !s) {
                free(k);
                free(s);
                return -1;
        }
        for (size_t i = 0; i < b->cap; i++) {
                if (!b->key[i])
                        continue;
                size_t j = slot_of(b->key[i], cap);
                while (k[j])
                        j = (j + 1) & (cap - 1);
                k[j] = b->key[i];
                s[j] = b->size[i];
        }
        free(b->key);
        free(b->size);
        b->key = k;
        b->size = s;
        b->cap = cap;
        return 0;
}

void gs_blocks_add(struct gs_blocks *b, uint64_t off, uint64_t size)
{
        uint64_t key = off + 1;
        size_t i;

        if ((b->n + 1) * 4 > b->cap * 3 && grow(b) < 0) {
                b->broken = 1;
                return;
        }
        for (i = slot_of(key, b->cap); b->key[i] && b->key[i] != key; i = (i + 1) & (b->cap - 1))
                ;
        if (!b->key[i])
                b->n++;
        b->key[i] = key;
        b->size[i] = size;
}

int gs_blocks_del(struct gs_blocks *b, uint64_t off)
{
        uint64_t key = off + 1;
        size_t i, j, mask = b->cap - 1;

        if (!b->cap)
                return 0;
        for (i = slot_of(key, b->cap); b->key[i] != key; i = (i + 1) & mask)
                if (!b->key[i])
                        return 0;
        /* Backward shift: later entries of the run move up into the hole
         * unless their home lies cyclically in (hole, their position]. */
        for (j = i;;) {
                j = (j + 1) & mask;
                if (!b->key[j])
                        break;
                size_t h = slot_of(b->key[j], b->cap);
                if ((j > i && (h <= i || h > j)) || (j < i && h <= i && h > j)) {
                        b->key[i] = b->key[j];
                        b->size[i] = b->size[j];
                        i = j;
                }
        }
        b->key[i] = 0;
        b->size[i] = 0;
        b->n--;
        return 1;
}

int gs_blocks_at(const struct gs_blocks *b, size_t i, uint64_t *ret_off, uint64_t *ret_size)
{
        if (i >= b->cap || !b->key[i])
                return 0;
        *ret_off = b->key[i] - 1;
        *ret_size = b->size[i];
        return 1;
}

int gs_blocks_meet(const struct gs_blocks *b, uint64_t lo, uint64_t hi)
{
        for (size_t i = 0; i < b->cap; i++)
                if (b->key[i] && b->key[i] - 1 < hi && b->key[i] - 1 + b->size[i] > lo)
                        return 1;
        return 0;
}

void gs_blocks_clear(struct gs_blocks *b)
{
        free(b->key);
        free(b->size);
        *b = (struct gs_blocks){ 0 };
}
