/* check_slab.c — the slab level over a buddy (agent/alloc/gs_slab.h). */
#include <check.h>

#include "gs_check.h"
#include <stdlib.h>

#include "gs_slab.h"

#define CHUNK_SHIFT 22u
#define CHUNK (UINT64_C(1) << CHUNK_SHIFT)

static struct gs_buddy b;
static struct gs_slab_cache sc;

static void setup(void)
{
        ck_assert_int_eq(gs_buddy_init(&b, CHUNK_SHIFT), 0);
        gs_slab_init(&sc, &b);
}

static void teardown(void)
{
        gs_slab_fini(&sc);
        gs_buddy_fini(&b);
}

static void valid(void)
{
        char why[256] = "";
        int r = gs_buddy_validate(&b, why, sizeof(why));
        ck_assert_msg(r == 0, "buddy: %s", why);
        r = gs_slab_validate(&sc, why, sizeof(why));
        ck_assert_msg(r == 0, "%s", why);
}

START_TEST(test_block_bytes)
{
        ck_assert_uint_eq(gs_slab_block_bytes(256, 28), 128 * 256);   /* at most 128 slots */
        ck_assert_uint_eq(gs_slab_block_bytes(2304, 28), 113 * 2304); /* about 256 KiB */
        ck_assert_uint_eq(gs_slab_block_bytes(65536, 28), 4 * 65536); /* at least 4 slots */
        ck_assert_uint_eq(gs_slab_block_bytes(65536, 17), 2 * 65536); /* capped by the chunk */
        for (uint32_t s = 256; s <= GS_SLAB_MAX; s += 256) {
                uint64_t bb = gs_slab_block_bytes(s, 28);
                ck_assert_uint_ge(bb / s, GS_SLAB_MIN_SLOTS);
                ck_assert_uint_le(bb / s, GS_SLAB_MAX_SLOTS);
                ck_assert_uint_eq(bb % s, 0); /* exactly its slots */
                ck_assert_uint_le(bb, GS_SLAB_BLOCK_TARGET + s);
        }
}
END_TEST

START_TEST(test_threshold)
{
        ck_assert_int_eq(gs_slab_wants(&sc, 2049), 0); /* first of a size */
        gs_slab_note(&sc, 2049);
        ck_assert_int_eq(gs_slab_wants(&sc, 2049), 1);
        ck_assert_int_eq(gs_slab_wants(&sc, 2304), 1); /* same class */
        ck_assert_int_eq(gs_slab_wants(&sc, 2305), 0);
        ck_assert_int_eq(gs_slab_wants(&sc, GS_SLAB_MAX + 1), 0);
        ck_assert_int_eq(gs_slab_wants(&sc, 0), 0);
}
END_TEST

/* Frees the live slot at off, found as gs_pproc_free finds it. */
static int free_at(uint64_t off, uint64_t *e)
{
        struct gs_slab *s = gs_slab_find(&sc, off);
        unsigned i;
        ck_assert_ptr_nonnull(s);
        ck_assert_int_eq(gs_slab_slot(s, off, &i), 0);
        ck_assert_uint_eq(gs_slab_slot_off(s, i), off);
        return gs_slab_free(&sc, s, i, e);
}

static void usage_is(uint64_t slots, uint64_t req, uint64_t bytes)
{
        uint64_t n, q, by;
        gs_slab_usage(&sc, &n, &q, &by);
        ck_assert_uint_eq(n, slots);
        ck_assert_uint_eq(q, req);
        ck_assert_uint_eq(by, bytes);
}

START_TEST(test_slots_2049)
{
        uint64_t x[120];
        uint64_t e;
        size_t recs = b.tab_n;
        ck_assert_int_eq(gs_slab_alloc(&sc, 2049, &x[0]), -ENOSPC); /* no chunk yet */
        valid();
        ck_assert_int_eq(gs_buddy_add_chunk(&b, CHUNK), 0);
        for (int i = 0; i < 120; i++) {
                ck_assert_int_eq(gs_slab_alloc(&sc, 2049, &x[i]), 0);
                ck_assert_uint_eq(x[i] % 256, 0);
                valid();
        }
        usage_is(120, 120 * 2049, 120 * 2304);
        /* 113 slots per block of exactly 113 * 2304 B: the 114th opened a
         * second slab, aligned to the power of two above (256 KiB) */
        ck_assert_uint_eq(sc.nslabs, 2);
        ck_assert_uint_eq(x[1] - x[0], 2304);
        ck_assert_uint_eq(x[113] % 262144, 0);
        ck_assert_uint_eq(b.bytes_used, 2 * 113 * 2304);
        /* Slots have no records: the hash holds the chunk's blocks only
         * (2 slab blocks and their free pieces), not 120 more. */
        ck_assert_uint_lt(b.tab_n, recs + 1 + 2 * GS_BUDDY_OP_RECS);
        for (int i = 113; i < 120; i++) {
                ck_assert_int_eq(free_at(x[i], &e), 0);
                valid();
        }
        ck_assert_uint_eq(sc.nslabs, 1); /* the emptied slab went back */
        for (int i = 0; i < 112; i++)
                ck_assert_int_eq(free_at(x[i], &e), 0);
        ck_assert_uint_eq(e, UINT64_MAX);
        ck_assert_int_eq(free_at(x[112], &e), 0);
        ck_assert_uint_eq(e, CHUNK); /* the chunk is wholly free again */
        ck_assert_uint_eq(sc.nslabs, 0);
        ck_assert_uint_eq(b.nchunks_empty, 1);
        usage_is(0, 0, 0);
        valid();
}
END_TEST

START_TEST(test_slot_reuse_lowest)
{
        uint64_t x, y, z, e;
        ck_assert_int_eq(gs_buddy_add_chunk(&b, 0), 0);
        ck_assert_int_eq(gs_slab_alloc(&sc, 256, &x), 0);
        ck_assert_int_eq(gs_slab_alloc(&sc, 256, &y), 0);
        ck_assert_int_eq(free_at(x, &e), 0);
        ck_assert_int_eq(gs_slab_alloc(&sc, 100, &z), 0);
        ck_assert_uint_eq(z, x);
        /* slot 0 starts where its slab's block does; the size asked for
         * is kept per slot */
        ck_assert_int_eq(gs_buddy_find(&b, z)->kind, GS_BLK_SLAB);
        usage_is(2, 100 + 256, 512);
        valid();
        (void)y;
}
END_TEST

/* Every class: the slab is found from any byte of any of its slots, the
 * size asked for comes back exactly, and nothing outside a slab is. */
START_TEST(test_find_every_class)
{
        ck_assert_int_eq(gs_buddy_add_chunk(&b, 0), 0);
        ck_assert_uint_eq(sc.lo_shift, 15); /* 128 x 256 B */
        ck_assert_uint_eq(sc.hi_shift, 18); /* up to 256 KiB */
        for (uint32_t size = 1; size <= GS_SLAB_MAX; size += 255 + (size % 7)) {
                uint64_t off, e;
                unsigned i;
                ck_assert_int_eq(gs_slab_alloc(&sc, size, &off), 0);
                struct gs_slab *s = gs_slab_find(&sc, off);
                ck_assert_ptr_nonnull(s);
                ck_assert_uint_eq(s->slot, gs_align_up(size, 256));
                ck_assert_ptr_eq(gs_slab_find(&sc, off + s->slot - 1), s);
                ck_assert_int_eq(gs_slab_slot(s, off + s->slot - 1, &i), 0);
                ck_assert_uint_eq(gs_slab_slot_off(s, i), off);
                ck_assert_uint_eq(gs_slab_slot_req(s, i), size);
                /* the next slot is free: not a live block */
                if (off + s->slot < s->base + s->blk->size)
                        ck_assert_int_eq(gs_slab_slot(s, off + s->slot, &i), -ENOENT);
                /* past the slab: another slab or none, never this one */
                ck_assert_ptr_ne(gs_slab_find(&sc, s->base + s->blk->size), s);
                valid();
                ck_assert_int_eq(free_at(off, &e), 0);
                ck_assert_ptr_null(gs_slab_find(&sc, off));
        }
        valid();
}
END_TEST

START_TEST(test_validate_catches)
{
        uint64_t x;
        ck_assert_int_eq(gs_buddy_add_chunk(&b, 0), 0);
        ck_assert_int_eq(gs_slab_alloc(&sc, 4096, &x), 0);
        struct gs_slab *s = gs_slab_find(&sc, x);
        s->freemask[0] |= 1; /* live slot marked free */
        ck_assert_int_eq(gs_slab_validate(&sc, NULL, 0), -EUCLEAN);
        s->freemask[0] &= ~UINT64_C(1);
        valid();
        s->req[1] = 3; /* a free slot with a size */
        ck_assert_int_eq(gs_slab_validate(&sc, NULL, 0), -EUCLEAN);
        s->req[1] = 0;
        valid();
        sc.slots_used++;
        ck_assert_int_eq(gs_slab_validate(&sc, NULL, 0), -EUCLEAN);
}
END_TEST

int main(void)
{
        Suite *s = suite_create("slab");
        TCase *tc = tcase_create("core");
        tcase_add_checked_fixture(tc, setup, teardown);
        tcase_add_test(tc, test_block_bytes);
        tcase_add_test(tc, test_threshold);
        tcase_add_test(tc, test_slots_2049);
        tcase_add_test(tc, test_slot_reuse_lowest);
        tcase_add_test(tc, test_find_every_class);
        tcase_add_test(tc, test_validate_catches);
        suite_add_tcase(s, tc);
        return gs_check_run(s);
}
