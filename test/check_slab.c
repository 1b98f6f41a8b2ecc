/* check_slab.c — the slab level over a buddy (agent/gs_slab.h). */
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

START_TEST(test_slots_2049)
{
        struct gs_blk *x[120];
        uint64_t e;
        ck_assert_int_eq(gs_slab_alloc(&sc, 2049, &x[0]), -ENOSPC); /* no chunk yet */
        valid();
        ck_assert_int_eq(gs_buddy_add_chunk(&b, CHUNK), 0);
        for (int i = 0; i < 120; i++) {
                ck_assert_int_eq(gs_slab_alloc(&sc, 2049, &x[i]), 0);
                ck_assert_uint_eq(x[i]->size, 2304);
                ck_assert_uint_eq(x[i]->req, 2049);
                ck_assert_uint_eq(x[i]->off % 256, 0);
                valid();
        }
        /* 113 slots per block of exactly 113 * 2304 B: the 114th opened a
         * second slab, aligned to the power of two above (256 KiB) */
        ck_assert_uint_eq(sc.nslabs, 2);
        ck_assert_uint_eq(x[1]->off - x[0]->off, 2304);
        ck_assert_uint_eq(x[113]->off % 262144, 0);
        ck_assert_uint_eq(b.bytes_used, 2 * 113 * 2304);
        for (int i = 113; i < 120; i++) {
                ck_assert_int_eq(gs_slab_free(&sc, x[i], &e), 0);
                valid();
        }
        ck_assert_uint_eq(sc.nslabs, 1); /* the emptied slab went back */
        for (int i = 0; i < 112; i++)
                ck_assert_int_eq(gs_slab_free(&sc, x[i], &e), 0);
        ck_assert_uint_eq(e, UINT64_MAX);
        ck_assert_int_eq(gs_slab_free(&sc, x[112], &e), 0);
        ck_assert_uint_eq(e, CHUNK); /* the chunk is wholly free again */
        ck_assert_uint_eq(sc.nslabs, 0);
        ck_assert_uint_eq(b.nchunks_empty, 1);
        valid();
}
END_TEST

START_TEST(test_slot_reuse_lowest)
{
        struct gs_blk *x, *y, *z;
        uint64_t e, off;
        ck_assert_int_eq(gs_buddy_add_chunk(&b, 0), 0);
        ck_assert_int_eq(gs_slab_alloc(&sc, 256, &x), 0);
        ck_assert_int_eq(gs_slab_alloc(&sc, 256, &y), 0);
        off = x->off;
        ck_assert_int_eq(gs_slab_free(&sc, x, &e), 0);
        ck_assert_int_eq(gs_slab_alloc(&sc, 100, &z), 0);
        ck_assert_uint_eq(z->off, off);
        ck_assert_ptr_eq(gs_buddy_find(&b, off | GS_BLK_KEY_SLOT), z);
        /* the slab block's record and slot 0 share an offset, not a key */
        ck_assert_int_eq(gs_buddy_find(&b, off)->kind, GS_BLK_SLAB);
        valid();
        (void)y;
}
END_TEST

START_TEST(test_validate_catches)
{
        struct gs_blk *x;
        ck_assert_int_eq(gs_buddy_add_chunk(&b, 0), 0);
        ck_assert_int_eq(gs_slab_alloc(&sc, 4096, &x), 0);
        struct gs_slab *s = x->owner;
        s->freemask[0] |= 1; /* live slot marked free */
        ck_assert_int_eq(gs_slab_validate(&sc, NULL, 0), -EUCLEAN);
        s->freemask[0] &= ~UINT64_C(1);
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
        tcase_add_test(tc, test_validate_catches);
        suite_add_tcase(s, tc);
        return gs_check_run(s);
}
