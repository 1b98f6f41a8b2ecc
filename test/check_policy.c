/* check_policy.c — the device plugin's placement policy (plugin/gs_policy:
 * GetPreferredAllocation's units) on a mirror of fake GPUs: packing onto
 * the best-fitting GPU, spreading over the fewest GPUs when none fits,
 * must-include units, units the kubelet does not offer (unhealthy, lent),
 * and the bounds of a request.  The plugin as a whole:
 * test/plugin/plugin-test.sh. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gs_check.h"
#include "gs_devid.h"
#include "gs_mirror.h"
#include "gs_policy.h"

#define MAXG 4
#define MAXU 16

static struct gs_mirror m;
static struct gs_mirror_gpu gpus[MAXG];
static char ids[MAXG][MAXU][GS_DEVID_MAX + 1];

/* A mirror of n GPUs of units[i] units each, all healthy. */
static void mirror(size_t n, const uint32_t *units)
{
        memset(&m, 0, sizeof(m));
        memset(gpus, 0, sizeof(gpus));
        for (size_t g = 0; g < n; g++) {
                snprintf(gpus[g].uuid, sizeof(gpus[g].uuid), "GPU-%08x-1111-2222-3333-%012x", 0x5eed0000u + (unsigned)g,
                         (unsigned)g);
                gpus[g].index = (uint32_t)g;
                gpus[g].units = units[g];
                gpus[g].healthy = true;
                gpus[g].numa = -1;
                for (uint32_t u = 0; u < MAXU; u++)
                        ck_assert_int_eq(gs_devid_format(ids[g][u], sizeof(ids[g][u]), gpus[g].uuid, u), 0);
        }
        m.gpus = gpus;
        m.ngpus = n;
}

/* "g:u" of a chosen ID, or "?" */
static const char *where(const char *id)
{
        static char buf[MAXG * MAXU][8];
        static size_t next;
        char *b = buf[next++ % (MAXG * MAXU)];

        for (size_t g = 0; g < MAXG; g++)
                for (uint32_t u = 0; u < MAXU; u++)
                        if (id == ids[g][u] || strcmp(id, ids[g][u]) == 0) {
                                snprintf(b, 8, "%zu:%u", g, u);
                                return b;
                        }
        return "?";
}

struct req {
        char *avail[MAXG * MAXU * 2];
        size_t navail;
        char *must[MAXG * MAXU];
        size_t nmust;
};

/* Offers unit u of GPU g. */
static void offer(struct req *r, size_t g, uint32_t u)
{
        r->avail[r->navail++] = ids[g][u];
}

static void offer_range(struct req *r, size_t g, uint32_t from, uint32_t to)
{
        for (uint32_t u = from; u < to; u++)
                offer(r, g, u);
}

static void must(struct req *r, size_t g, uint32_t u)
{
        r->must[r->nmust++] = ids[g][u];
        offer(r, g, u); /* the kubelet offers must-include units as available too */
}

/* Runs the policy for size units; the chosen IDs as "g:u g:u ..." into got
 * (sorted as chosen), the status returned, msg on failure. */
static grpc_status_code prefer(struct req *r, int size, char *got, size_t gotlen, char *msg, size_t msglen)
{
        V1beta1__ContainerPreferredAllocationRequest cr = V1BETA1__CONTAINER_PREFERRED_ALLOCATION_REQUEST__INIT;
        const char *out[MAXG * MAXU + 1] = { 0 };
        grpc_status_code code;

        cr.available_deviceids = r->avail;
        cr.n_available_deviceids = r->navail;
        cr.must_include_deviceids = r->must;
        cr.n_must_include_deviceids = r->nmust;
        cr.allocation_size = size;
        msg[0] = got[0] = '\0';
        code = gs_policy_prefer(&m, "gshare.io/gpumem", &cr, out, msg, msglen);
        if (code != GRPC_STATUS_OK)
                return code;
        for (int i = 0; i < size; i++) {
                size_t l = strlen(got);
                ck_assert_msg(out[i] != NULL, "only %d of %d IDs chosen", i, size);
                for (int j = 0; j < i; j++)
                        ck_assert_msg(strcmp(out[i], out[j]) != 0, "%s chosen twice", out[i]);
                snprintf(got + l, gotlen - l, "%s%s", i ? " " : "", where(out[i]));
        }
        return code;
}

#define EXPECT(r, size, want)                                                                  \
        do {                                                                                   \
                char got_[512], msg_[256];                                                     \
                grpc_status_code c_ = prefer(r, size, got_, sizeof(got_), msg_, sizeof(msg_)); \
                ck_assert_msg(c_ == GRPC_STATUS_OK, "status %d: %s", (int)c_, msg_);           \
                ck_assert_str_eq(got_, want);                                                  \
        } while (0)

#define REFUSED(r, size, text)                                                                    \
        do {                                                                                      \
                char got_[512], msg_[256];                                                        \
                grpc_status_code c_ = prefer(r, size, got_, sizeof(got_), msg_, sizeof(msg_));    \
                ck_assert_int_eq(c_, GRPC_STATUS_INVALID_ARGUMENT);                               \
                ck_assert_msg(strstr(msg_, text) != NULL, "message '%s' lacks '%s'", msg_, text); \
        } while (0)

/* Packing: the GPU with the fewest available units that still holds the
 * request, its lowest-numbered units. */
START_TEST(test_packing)
{
        static const uint32_t units[] = { 8, 8, 8 };
        struct req r = { 0 };

        mirror(3, units);
        offer(&r, 0, 1), offer(&r, 0, 2), offer(&r, 0, 4), offer(&r, 0, 5), offer(&r, 0, 7), offer(&r, 0, 6);
        offer(&r, 1, 6), offer(&r, 1, 3), offer(&r, 1, 0);
        offer_range(&r, 2, 0, 8);
        EXPECT(&r, 3, "1:0 1:3 1:6");                     /* GPU 1: 3 available, an exact fit */
        EXPECT(&r, 2, "1:0 1:3");                         /* still the tightest that fits */
        EXPECT(&r, 4, "0:1 0:2 0:4 0:5");                 /* GPU 1 too small: GPU 0 (6) before GPU 2 (8) */
        EXPECT(&r, 8, "2:0 2:1 2:2 2:3 2:4 2:5 2:6 2:7"); /* a whole GPU */
}
END_TEST

/* Spreading: no GPU holds the request, so the fewest GPUs, the one with the
 * most available first. */
START_TEST(test_spreading)
{
        static const uint32_t units[] = { 8, 8, 8 };
        struct req r = { 0 };

        mirror(3, units);
        offer_range(&r, 0, 0, 3); /* 3 */
        offer_range(&r, 1, 2, 7); /* 5 */
        offer_range(&r, 2, 6, 8); /* 2 */
        EXPECT(&r, 6, "1:2 1:3 1:4 1:5 1:6 0:0");
        EXPECT(&r, 8, "1:2 1:3 1:4 1:5 1:6 0:0 0:1 0:2");
        /* over all three GPUs; of two with as many, the first */
        mirror(3, (const uint32_t[]){ 12, 8, 8 });
        r = (struct req){ 0 };
        offer_range(&r, 0, 0, 4), offer_range(&r, 1, 0, 4), offer_range(&r, 2, 0, 3);
        EXPECT(&r, 11, "0:0 0:1 0:2 0:3 1:0 1:1 1:2 1:3 2:0 2:1 2:2");
}
END_TEST

/* Must-include units are always chosen and pin the choice to their GPU when
 * it holds the request; otherwise their GPU is filled first. */
START_TEST(test_must_include)
{
        static const uint32_t units[] = { 8, 8 };
        struct req r = { 0 };

        mirror(2, units);
        offer_range(&r, 0, 0, 3); /* GPU 0: 3 available, a better fit */
        must(&r, 1, 5);
        offer(&r, 1, 2), offer(&r, 1, 6), offer(&r, 1, 7);
        EXPECT(&r, 3, "1:5 1:2 1:6"); /* pinned to GPU 1, not the best fit GPU 0 */
        EXPECT(&r, 1, "1:5");
        /* GPU 1 cannot hold 5: must first, then its GPU, then the other */
        EXPECT(&r, 5, "1:5 1:2 1:6 1:7 0:0");
        /* must-include units on two GPUs: both kept */
        r = (struct req){ 0 };
        must(&r, 0, 7), must(&r, 1, 0);
        offer_range(&r, 0, 0, 4), offer_range(&r, 1, 4, 8);
        EXPECT(&r, 4, "0:7 1:0 0:0 0:1");
        /* more must-include units than the request */
        REFUSED(&r, 1, "must_include_deviceIDs has 2 devices, more than allocation_size 1");
        /* a must-include ID offered twice counts once */
        r = (struct req){ 0 };
        must(&r, 1, 3), must(&r, 1, 3);
        offer_range(&r, 1, 0, 2);
        EXPECT(&r, 3, "1:3 1:0 1:1");
}
END_TEST

/* Units the kubelet does not offer (Unhealthy: lent, draining, restoring, a
 * GPU unhealthy) are never chosen, and a GPU is judged by what it offers,
 * not by its size. */
START_TEST(test_unhealthy_units)
{
        static const uint32_t units[] = { 8, 8 };
        struct req r = { 0 };

        mirror(2, units);
        gpus[0].unhealthy = calloc(8, 1);
        gpus[1].unhealthy = calloc(8, 1);
        ck_assert(gpus[0].unhealthy && gpus[1].unhealthy);
        /* GPU 0: units 5-7 lent and unit 1 draining; GPU 1 unhealthy as a
         * whole: the kubelet offers only GPU 0's healthy units */
        for (uint32_t u = 0; u < 8; u++) {
                gpus[0].unhealthy[u] = u == 1 || u >= 5;
                gpus[1].unhealthy[u] = 1;
        }
        gpus[1].healthy = false;
        for (uint32_t u = 0; u < 8; u++)
                if (!gpus[0].unhealthy[u])
                        offer(&r, 0, u);
        EXPECT(&r, 4, "0:0 0:2 0:3 0:4");
        REFUSED(&r, 5, "allocation_size 5 is more than the 4 devices available");
        /* GPU 1 healthy again but 5 of its 8 units lent: the kubelet offers
         * 3 there, and GPU 1 is now the tighter fit */
        gpus[1].healthy = true;
        for (uint32_t u = 0; u < 8; u++)
                gpus[1].unhealthy[u] = u >= 3;
        for (uint32_t u = 0; u < 3; u++)
                offer(&r, 1, u);
        EXPECT(&r, 3, "1:0 1:1 1:2");
        EXPECT(&r, 4, "0:0 0:2 0:3 0:4");
        /* 5 units: no GPU offers them all; GPU 0 (4) first, then GPU 1 */
        EXPECT(&r, 5, "0:0 0:2 0:3 0:4 1:0");
        free(gpus[0].unhealthy);
        free(gpus[1].unhealthy);
        gpus[0].unhealthy = gpus[1].unhealthy = NULL;
}
END_TEST

START_TEST(test_bounds)
{
        static const uint32_t units[] = { 4, 6 };
        struct req r = { 0 };
        char other[GS_DEVID_MAX + 1];

        mirror(2, units);
        offer_range(&r, 0, 0, 4), offer_range(&r, 1, 0, 6);
        REFUSED(&r, 0, "allocation_size must be positive, got 0");
        REFUSED(&r, -3, "allocation_size must be positive, got -3");
        REFUSED(&r, 7, "a request of 7 units is larger than any GPU of this node (at most 6 units)");
        EXPECT(&r, 6, "1:0 1:1 1:2 1:3 1:4 1:5"); /* the largest GPU, whole */
        /* duplicates are dropped before counting */
        r = (struct req){ 0 };
        offer(&r, 0, 1), offer(&r, 0, 1), offer(&r, 0, 2);
        EXPECT(&r, 2, "0:1 0:2");
        REFUSED(&r, 3, "allocation_size 3 is more than the 2 devices available");
        /* IDs that are not ours */
        r = (struct req){ 0 };
        offer(&r, 0, 0);
        r.avail[r.navail++] = (char *)"not-a-device";
        REFUSED(&r, 1, "device ID 'not-a-device' is not a gshare device ID");
        r.navail = 1;
        offer(&r, 0, 4); /* unit 4 of a 4-unit GPU */
        REFUSED(&r, 1, "is not a gshare.io/gpumem device of this node");
        r.navail = 1;
        ck_assert_int_eq(gs_devid_format(other, sizeof(other), "GPU-00000000-0000-0000-0000-000000000009", 0), 0);
        r.avail[r.navail++] = other; /* a GPU that is gone */
        REFUSED(&r, 1, "is not a gshare.io/gpumem device of this node");
        r.navail = 1;
        must(&r, 1, 9); /* must-include out of range too */
        REFUSED(&r, 1, "is not a gshare.io/gpumem device of this node");
        /* no GPU at all (the agent not reachable yet) */
        mirror(0, units);
        r = (struct req){ 0 };
        REFUSED(&r, 1, "larger than any GPU of this node (at most 0 units)");
}
END_TEST

static Suite *suite(void)
{
        Suite *s = suite_create("policy");
        TCase *tc = tcase_create("prefer");

        tcase_add_test(tc, test_packing);
        tcase_add_test(tc, test_spreading);
        tcase_add_test(tc, test_must_include);
        tcase_add_test(tc, test_unhealthy_units);
        tcase_add_test(tc, test_bounds);
        suite_add_tcase(s, tc);
        return s;
}

int main(void)
{
        return gs_check_run(suite());
}
