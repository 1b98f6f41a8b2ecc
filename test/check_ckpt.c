/* check_ckpt.c — the allocations checkpoint's format and file (gs_ckpt.h):
 * v3 lines round-trip; v1 and v2 lines read as the device plugin's; v2's
 * claims file folded into its allocations' lines; lines that do not parse
 * kept byte for byte; a file past the bounds or unreadable refused whole. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gs_check.h"
#include "gs_ckpt.h"

#define U "GPU-00000000-0000-0000-0000-000000000001"
#define U2 "GPU-00000000-0000-0000-0000-000000000002"
#define CLAIM1 "11111111-1111-1111-1111-111111111111"
#define CLAIM2 "22222222-2222-2222-2222-222222222222"
#define CLAIM3 "33333333-3333-3333-3333-333333333333"

static void write_file(const char *path, const char *s, size_t len)
{
        FILE *f = fopen(path, "we");

        ck_assert_ptr_nonnull(f);
        ck_assert_uint_eq(fwrite(s, 1, len, f), len);
        ck_assert_int_eq(fclose(f), 0);
}

/* What gs_ckpt_put writes for every record of c, into buf; its length. */
static size_t put_all(const struct gs_ckpt *c, char *buf, size_t cap)
{
        FILE *f = fmemopen(buf, cap, "w");
        long n;

        ck_assert_ptr_nonnull(f);
        for (size_t i = 0; i < c->n; i++)
                gs_ckpt_put(f, &c->recs[i]);
        fflush(f);
        n = ftell(f);
        fclose(f);
        return (size_t)n;
}

static void state_dir(char *dir)
{
        ck_assert_ptr_nonnull(mkdtemp(dir));
}

static void state_done(const char *dir)
{
        char p[300];

        snprintf(p, sizeof(p), "%s/%s", dir, GS_CKPT_NAME);
        (void)unlink(p);
        snprintf(p, sizeof(p), "%s/%s", dir, GS_CKPT_CLAIMS_NAME);
        (void)unlink(p);
        ck_assert_int_eq(rmdir(dir), 0);
}

START_TEST(test_v3_round_trip)
{
        static const char text[] =
                "0123456789abcdef 1700000000 2 " U "-u0 " U "-u1 dir=0123456789abcdef-00c0ffee\n"
                "fedcba9876543210 1700000001 claim " CLAIM1 " ml train-gpu " U " 2,3,10 dir=fedcba9876543210-0badf00d\n"
                /* with a burst limit (docs/burst.md) */
                "1111111111111111 1700000002 1 " U "-u5 dir=1111111111111111-00000001 burst=4294967296\n"
                "2222222222222222 1700000003 claim " CLAIM2 " ml b " U
                " 7 dir=2222222222222222-00000002 burst=1073741824\n";
        char dir[] = "/tmp/gsckptXXXXXX", path[300], out[1024], err[512] = "";
        struct gs_ckpt c;
        const struct gs_ckpt_rec *d, *k;

        state_dir(dir);
        snprintf(path, sizeof(path), "%s/%s", dir, GS_CKPT_NAME);
        write_file(path, GS_CKPT_HEADER, strlen(GS_CKPT_HEADER));
        FILE *f = fopen(path, "ae");
        fputs(text, f);
        fclose(f);
        ck_assert_int_eq(gs_ckpt_read(dir, &c, err, sizeof(err)), 0);
        ck_assert_uint_eq(c.n, 4);
        ck_assert(!c.claims_file);
        ck_assert_uint_eq(c.recs[0].burst_bytes, 0);
        ck_assert_uint_eq(c.recs[1].burst_bytes, 0);
        ck_assert_int_eq(c.recs[2].kind, GS_OWNER_DEVICES);
        ck_assert_uint_eq(c.recs[2].burst_bytes, UINT64_C(4294967296));
        ck_assert_str_eq(c.recs[2].dir, "1111111111111111-00000001");
        ck_assert_int_eq(c.recs[3].kind, GS_OWNER_CLAIM);
        ck_assert_uint_eq(c.recs[3].burst_bytes, UINT64_C(1073741824));
        ck_assert_uint_eq(c.recs[3].units[0], 7);
        d = &c.recs[0];
        k = &c.recs[1];
        ck_assert_int_eq(d->kind, GS_OWNER_DEVICES);
        ck_assert_str_eq(d->id, "0123456789abcdef");
        ck_assert_uint_eq(d->created_unix, 1700000000u);
        ck_assert_uint_eq(d->nids, 2);
        ck_assert_str_eq(d->ids[1], U "-u1");
        ck_assert_str_eq(d->dir, "0123456789abcdef-00c0ffee");
        ck_assert_int_eq(k->kind, GS_OWNER_CLAIM);
        ck_assert_str_eq(k->claim.uid, CLAIM1);
        ck_assert_str_eq(k->claim.ns, "ml");
        ck_assert_str_eq(k->claim.name, "train-gpu");
        ck_assert_str_eq(k->claim.gpu_uuid, U);
        ck_assert_uint_eq(k->claim.units, 3);
        ck_assert_uint_eq(k->units[2], 10);
        ck_assert_str_eq(k->dir, "fedcba9876543210-0badf00d");
        /* Written back, the same text. */
        ck_assert_uint_eq(put_all(&c, out, sizeof(out)), strlen(text));
        ck_assert(memcmp(out, text, strlen(text)) == 0);
        gs_ckpt_free(&c);
        state_done(dir);
}
END_TEST

START_TEST(test_v1_v2_lines)
{
        char line[512];
        struct gs_ckpt_rec r;

        snprintf(line, sizeof(line), "0123456789abcdef 1700000000 2 X-u1 X-u0");
        ck_assert_int_eq(gs_ckpt_parse_line(line, strlen(line), &r), 0);
        ck_assert_int_eq(r.kind, GS_OWNER_DEVICES);
        ck_assert_str_eq(r.ids[0], "X-u0"); /* sorted */
        ck_assert_str_eq(r.ids[1], "X-u1");
        ck_assert_str_eq(r.dir, "0123456789abcdef"); /* v1: the directory is the id */
        gs_ckpt_rec_free(&r);
        snprintf(line, sizeof(line), "0123456789abcdef 1700000000 1 X-u0 dir=0123456789abcdef-00c0ffee");
        ck_assert_int_eq(gs_ckpt_parse_line(line, strlen(line), &r), 0);
        ck_assert_str_eq(r.dir, "0123456789abcdef-00c0ffee");
        gs_ckpt_rec_free(&r);
}
END_TEST

START_TEST(test_parse_rejects)
{
        static const char *bad[] = {
                "",
                "0123456789abcdeF 1 1 a",    /* upper case id */
                "0123456789abcde 1 1 a",     /* short id */
                "0123456789abcdef -1 1 a",   /* negative time */
                "0123456789abcdef x 1 a",    /* junk time */
                "0123456789abcdef 1 2 a",    /* fewer IDs than said */
                "0123456789abcdef 1 1 a b",  /* more IDs than said */
                "0123456789abcdef 1 0",      /* none */
                "0123456789abcdef 1 4097 a", /* over GS_ALLOCS_MAX_IDS */
                "0123456789abcdef 1 99999999999999999999999 a",
                "0123456789abcdef 1 1 a dir=../etc", /* not one hex component */
                "0123456789abcdef 1 1 a dir=",
                "0123456789abcdef 1 1 a dir=ab dir=cd",
                "0123456789abcdef 1 1 a dir=ab b",
                "0123456789abcdef 1 2 a dir=ab b",
                "0123456789abcdef 1 1 a dir=0123456789abcdef-0123456789abcdef",
                /* claims */
                "0123456789abcdef 1 claim " CLAIM1 " ml c " U " 0,1",           /* no dir= */
                "0123456789abcdef 1 claim " CLAIM1 " ml c " U " 1,0 dir=ab",    /* not ascending */
                "0123456789abcdef 1 claim " CLAIM1 " ml c " U " 1,1 dir=ab",    /* twice */
                "0123456789abcdef 1 claim " CLAIM1 " ml c " U " 100000 dir=ab", /* not a unit */
                "0123456789abcdef 1 claim " CLAIM1 " ml c " U " 1, dir=ab",
                "0123456789abcdef 1 claim " CLAIM1 " ml c " U " ,1 dir=ab",
                "0123456789abcdef 1 claim " CLAIM1 " ml c " U " -1 dir=ab",
                "0123456789abcdef 1 claim " CLAIM1 " ml c GPU-x 1 dir=ab", /* not a UUID */
                "0123456789abcdef 1 claim " CLAIM1 " ML c " U " 1 dir=ab", /* not a namespace */
                "0123456789abcdef 1 claim x/y ml c " U " 1 dir=ab",        /* not a UID */
                /* names Kubernetes refuses (common/gs_k8sname.h; main took them) */
                "0123456789abcdef 1 claim " CLAIM1 " -ml c " U " 1 dir=ab",   /* namespace starts with '-' */
                "0123456789abcdef 1 claim " CLAIM1 " ml.x c " U " 1 dir=ab",  /* a namespace has no dot */
                "0123456789abcdef 1 claim " CLAIM1 " ml c.. " U " 1 dir=ab",  /* name ends with a dot */
                "0123456789abcdef 1 claim " CLAIM1 " ml a..b " U " 1 dir=ab", /* empty label */
                "0123456789abcdef 1 claim " CLAIM1 " ml .. " U " 1 dir=ab",
                "0123456789abcdef 1 claim " CLAIM1 " ml c " U " 1 dir=ab x", /* one more */
                "0123456789abcdef 1 claim " CLAIM1 " ml " U " 1 dir=ab",     /* one less */
                /* burst= */
                "0123456789abcdef 1 1 a dir=ab burst=0",
                "0123456789abcdef 1 1 a dir=ab burst=",
                "0123456789abcdef 1 1 a dir=ab burst=-1",
                "0123456789abcdef 1 1 a dir=ab burst=1x",
                "0123456789abcdef 1 1 a dir=ab burst=99999999999999999999999",
                "0123456789abcdef 1 1 a dir=ab burst=1 burst=1",
                "0123456789abcdef 1 1 a burst=1 dir=ab",
                "0123456789abcdef 1 claim " CLAIM1 " ml c " U " 1 dir=ab burst=0",
                "0123456789abcdef 1 claim " CLAIM1 " ml c " U " 1 dir=ab burst=1 x",
        };
        char line[300];
        struct gs_ckpt_rec r;

        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                snprintf(line, sizeof(line), "%s", bad[i]);
                ck_assert_msg(gs_ckpt_parse_line(line, strlen(line), &r) == -EINVAL, "accepted '%s'", bad[i]);
                ck_assert_ptr_null(r.ids);
                ck_assert_ptr_null(r.units);
        }
        /* A NUL inside. */
        memcpy(line, "0123456789abcdef 1 1 a\0b", 25);
        ck_assert_int_eq(gs_ckpt_parse_line(line, 25, &r), -EINVAL);
}
END_TEST

/* Compute policies (gs_qos.h): the checkpoint's qos= token, and a pod's
 * policy from its priority and annotations. */
START_TEST(test_qos)
{
        static const char *const bad[] = {
                "0123456789abcdef 1 1 a dir=ab qos=",
                "0123456789abcdef 1 1 a dir=ab qos=standard", /* the default is never written */
                "0123456789abcdef 1 1 a dir=ab qos=urgent",
                "0123456789abcdef 1 1 a dir=ab qos=best-effort,cap=0",
                "0123456789abcdef 1 1 a dir=ab qos=best-effort,cap=101",
                "0123456789abcdef 1 1 a dir=ab qos=best-effort,cap=3x",
                "0123456789abcdef 1 1 a dir=ab qos=latency-critical x",
                "0123456789abcdef 1 1 a dir=ab qos=latency-critical burst=1",
                "0123456789abcdef 1 1 a dir=ab qos=latency-critical qos=latency-critical",
                "0123456789abcdef 1 1 a dir=ab qos=standard,weight=10", /* the default weight neither */
                "0123456789abcdef 1 1 a dir=ab qos=best-effort,weight=0",
                "0123456789abcdef 1 1 a dir=ab qos=best-effort,weight=101",
                "0123456789abcdef 1 1 a dir=ab qos=best-effort,weight=",
                "0123456789abcdef 1 1 a dir=ab qos=best-effort,weight=20,cap=30", /* cap first */
                "0123456789abcdef 1 1 a dir=ab qos=best-effort,cap=30,weight=20,weight=20",
                "0123456789abcdef 1 1 a dir=ab qos=best-effort,cap=30,cap=30",
                "0123456789abcdef 1 1 a dir=ab qos=best-effort,cap=30,",
                "0123456789abcdef 1 1 a dir=ab qos=best-effort,heavy=3",
        };
        static const char *const good[] = {
                "0123456789abcdef 1 1 a dir=ab qos=latency-critical",
                "0123456789abcdef 1 1 a dir=ab burst=4096 qos=standard,cap=30",
                "0123456789abcdef 1 claim " CLAIM1 " ml c " U " 1 dir=ab qos=best-effort,cap=100",
                "0123456789abcdef 1 1 a dir=ab qos=standard,weight=30",
                "0123456789abcdef 1 1 a dir=ab burst=4096 qos=best-effort,cap=30,weight=1",
                "0123456789abcdef 1 1 a dir=ab qos=latency-critical,weight=100",
        };
        struct {
                bool has;
                int64_t prio;
                const char *cls, *cap, *weight;
                int r;
                unsigned want, cap_want, weight_want;
        } pods[] = {
                { false, 0, NULL, NULL, NULL, 0, GS_QOS_STANDARD, 0, 10 },
                { true, 1000000, NULL, NULL, NULL, 0, GS_QOS_LATENCY, 0, 10 },
                { true, 999999, NULL, NULL, NULL, 0, GS_QOS_STANDARD, 0, 10 },
                { true, -1, NULL, NULL, NULL, 0, GS_QOS_BEST_EFFORT, 0, 10 },
                { true, 2000000, "best-effort", "30", "1", 0, GS_QOS_BEST_EFFORT, 30, 1 },
                { true, 2000000, "standard", NULL, "100", 0, GS_QOS_STANDARD, 0, 100 },
                /* never raised */
                { true, 0, "latency-critical", NULL, NULL, -EINVAL, GS_QOS_STANDARD, 0, 10 },
                { true, -5, "standard", NULL, NULL, -EINVAL, GS_QOS_BEST_EFFORT, 0, 10 },
                { false, 0, "urgent", "200", NULL, -EINVAL, GS_QOS_STANDARD, 0, 10 },
                { false, 0, NULL, "-3", NULL, -EINVAL, GS_QOS_STANDARD, 0, 10 },
                /* a bad weight: the default, the rest kept */
                { true, -1, NULL, "20", "0", -EINVAL, GS_QOS_BEST_EFFORT, 20, 10 },
                { false, 0, NULL, NULL, "101", -EINVAL, GS_QOS_STANDARD, 0, 10 },
                { false, 0, NULL, NULL, "heavy", -EINVAL, GS_QOS_STANDARD, 0, 10 },
                { false, 0, NULL, NULL, "", -EINVAL, GS_QOS_STANDARD, 0, 10 },
                { false, 0, "urgent", NULL, "2x", -EINVAL, GS_QOS_STANDARD, 0, 10 },
        };
        char line[300], out[512], err[512];
        struct gs_ckpt_rec r;
        struct gs_qos_policy p;

        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                snprintf(line, sizeof(line), "%s", bad[i]);
                ck_assert_msg(gs_ckpt_parse_line(line, strlen(line), &r) == -EINVAL, "accepted '%s'", bad[i]);
        }
        for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
                FILE *f = fmemopen(out, sizeof(out), "w");
                snprintf(line, sizeof(line), "%s", good[i]);
                ck_assert_msg(gs_ckpt_parse_line(line, strlen(line), &r) == 0, "refused '%s'", good[i]);
                gs_ckpt_put(f, &r);
                fclose(f);
                ck_assert_msg(strncmp(out, good[i], strlen(good[i])) == 0 && out[strlen(good[i])] == '\n',
                              "'%s' written back as '%s'", good[i], out);
                gs_ckpt_rec_free(&r);
        }
        for (size_t i = 0; i < sizeof(pods) / sizeof(pods[0]); i++) {
                struct gs_qos_pod pod = { pods[i].has, pods[i].prio, pods[i].cls, pods[i].cap, pods[i].weight };
                err[0] = '\0';
                ck_assert_int_eq(gs_qos_from_pod(&pod, 1000000, &p, err, sizeof(err)), pods[i].r);
                ck_assert_msg(p.cls == pods[i].want && p.cap == pods[i].cap_want &&
                                      gs_qos_weight_of(&p) == pods[i].weight_want,
                              "pod %zu: %u,%u,%u (%s)", i, p.cls, p.cap, gs_qos_weight_of(&p), err);
                ck_assert(pods[i].r == 0 || strstr(err, "applies") || strstr(err, "no cap"));
                /* A bad weight is named, with the default that applies. */
                uint8_t w;
                ck_assert_msg(!pods[i].weight || gs_qos_percent_parse(pods[i].weight, &w) == 0 ||
                                      (strstr(err, "annotation gshare.io/compute-weight: '") &&
                                       strstr(err, "the default 10 applies")),
                              "pod %zu: %s", i, err);
        }
        {
                /* Two policies alike but for a weight given as the
                 * default, and one that differs by its weight. */
                struct gs_qos_policy a = { .cls = GS_QOS_STANDARD }, b = a, c = a;
                b.weight = 10;
                c.weight = 30;
                ck_assert(gs_qos_same(&a, &b) && gs_qos_is_default(&b) && !gs_qos_same(&a, &c) &&
                          !gs_qos_is_default(&c));
        }
}
END_TEST

/* An agent of today's main: a v2 checkpoint (and a v1 line), a claims
 * file.  Every allocation and every claim is kept, as v3 lines. */
/* Weights into duties (gs_qos_duties): the lightest held until they had
 * their share in equal turns with those still on, the rest free; nobody
 * held alone or at equal weights. */
START_TEST(test_qos_duties)
{
        static const struct {
                uint32_t n;
                uint64_t w[4];
                uint8_t want[4];
        } cases[] = {
                { 1, { 30 }, { 0 } },
                { 2, { 30, 70 }, { 60, 0 } },
                { 2, { 70, 30 }, { 0, 60 } },
                { 2, { 50, 50 }, { 0, 0 } },
                /* On for 60 % (3 sharing: 20) and 80 % (+ 20 / 2 = 30); the
                 * first told 50: it launches until 30 %, its 10 % queued
                 * drains at a third. */
                { 3, { 20, 30, 50 }, { 50, 80, 0 } },
                { 3, { 10, 30, 70 }, { 22, 64, 0 } },         /* on 27.3 % and 63.6 % */
                { 4, { 10, 20, 30, 40 }, { 27, 60, 90, 0 } }, /* on 40, 70, 90 % */
                { 4, { 40, 10, 30, 20 }, { 0, 27, 90, 60 } },
                { 3, { 10, 45, 45 }, { 24, 0, 0 } },
                { 3, { 1, 1, 98 }, { 2, 2, 0 } }, /* equal weights close together */
                { 4, { 5, 5, 20, 70 }, { 13, 13, 50, 0 } },
                { 4, { 10, 10, 10, 10 }, { 0, 0, 0, 0 } },
                { 2, { 1, 1000 }, { 1, 0 } }, /* 0.2 % rounds up to 1 */
                { 2, { 0, 10 }, { 18, 0 } },  /* a 0 counts as 1 */
                { 2, { 49, 51 }, { 98, 0 } },
        };
        uint64_t many[GS_QOS_SHARE_MAX + 8];
        uint8_t got[GS_QOS_SHARE_MAX + 8];

        for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
                uint8_t r[4] = { 77, 77, 77, 77 };

                gs_qos_duties(cases[c].n, cases[c].w, r);
                for (uint32_t i = 0; i < cases[c].n; i++)
                        ck_assert_msg(r[i] == cases[c].want[i], "case %zu: process %u got %u, want %u", c, i, r[i],
                                      cases[c].want[i]);
        }
        /* Past GS_QOS_SHARE_MAX: only the first that many are written. */
        for (size_t i = 0; i < GS_QOS_SHARE_MAX + 8; i++)
                many[i] = i + 1, got[i] = 77;
        gs_qos_duties(GS_QOS_SHARE_MAX + 8, many, got);
        ck_assert_uint_eq(got[GS_QOS_SHARE_MAX], 77);
        ck_assert_uint_ge(got[0], 1);
        ck_assert_uint_eq(got[GS_QOS_SHARE_MAX - 1], 0);
}
END_TEST

START_TEST(test_migrate_v2_claims)
{
        static const char ckpt[] =
                "# gshare-agent allocations v2\n"
                "aaaaaaaaaaaaaaaa 1700000000 1 " U "-u0 dir=aaaaaaaaaaaaaaaa-00000001\n"
                "bbbbbbbbbbbbbbbb 1700000001 3 " U "-u9 " U "-u10 " U "-u2 dir=bbbbbbbbbbbbbbbb-00000002\n"
                "cccccccccccccccc 1700000002 1 " U "-u3\n" /* v1 */
                "dddddddddddddddd 1700000003 2 " U "-u4 " U2 "-u5 dir=dddddddddddddddd-00000004\n";
        static const char claims_bad[] = "not a claim\0 at all";
        char claims[2048];
        size_t nclaims;
        static const char want[] =
                "aaaaaaaaaaaaaaaa 1700000000 1 " U "-u0 dir=aaaaaaaaaaaaaaaa-00000001\n"
                "bbbbbbbbbbbbbbbb 1700000001 claim " CLAIM1 " ml train " U " 2,9,10 dir=bbbbbbbbbbbbbbbb-00000002\n"
                "cccccccccccccccc 1700000002 1 " U "-u3 dir=cccccccccccccccc\n";
        char dir[] = "/tmp/gsckptXXXXXX", path[300], out[4096], err[512] = "";
        struct gs_ckpt c;
        size_t n, wl = strlen(want);

        state_dir(dir);
        snprintf(path, sizeof(path), "%s/%s", dir, GS_CKPT_NAME);
        write_file(path, ckpt, strlen(ckpt));
        nclaims = (size_t)snprintf(claims, sizeof(claims),
                                   "# gshare-agent claims v1\n" CLAIM1 " bbbbbbbbbbbbbbbb " U " 3 ml train\n" CLAIM2
                                   " eeeeeeeeeeeeeeee " U " 1 ml gone\n"              /* no allocation: dropped */
                                   CLAIM3 " dddddddddddddddd " U " 2 ml two-gpus\n"); /* not its GPU's: kept */
        memcpy(claims + nclaims, claims_bad, sizeof(claims_bad) - 1);
        nclaims += sizeof(claims_bad) - 1;
        claims[nclaims++] = '\n';
        snprintf(path, sizeof(path), "%s/%s", dir, GS_CKPT_CLAIMS_NAME);
        write_file(path, claims, nclaims);

        ck_assert_int_eq(gs_ckpt_read(dir, &c, err, sizeof(err)), 0);
        ck_assert(c.claims_file);
        ck_assert_uint_eq(c.claims_migrated, 1);
        ck_assert_uint_eq(c.claims_dropped, 1);
        /* a, b (now claim 1's), c, d (still the device plugin's), then the
         * two claims lines kept. */
        ck_assert_uint_eq(c.n, 6);
        n = put_all(&c, out, sizeof(out));
        ck_assert(n > wl && memcmp(out, want, wl) == 0);
        ck_assert(strncmp(out + wl, "dddddddddddddddd 1700000003 2 ", 30) == 0);
        ck_assert_ptr_nonnull(c.recs[4].kept);
        ck_assert_str_eq(c.recs[4].kept, "not a claim"); /* NUL and all: */
        ck_assert_uint_eq(c.recs[4].kept_len, sizeof(claims_bad) - 1);
        ck_assert(memcmp(c.recs[4].kept, claims_bad, sizeof(claims_bad) - 1) == 0);
        ck_assert(strncmp(c.recs[5].kept, CLAIM3 " dddddddddddddddd", 53) == 0);
        gs_ckpt_free(&c);

        /* Written as v3 and the claims file left (an upgrade killed before
         * removing it): read again, the same, the claim not made twice. */
        snprintf(path, sizeof(path), "%s/%s", dir, GS_CKPT_NAME);
        {
                char v3[4096];
                size_t h = strlen(GS_CKPT_HEADER);
                memcpy(v3, GS_CKPT_HEADER, h);
                memcpy(v3 + h, out, n);
                write_file(path, v3, h + n);
        }
        snprintf(path, sizeof(path), "%s/%s", dir, GS_CKPT_CLAIMS_NAME);
        write_file(path, claims, nclaims - sizeof(claims_bad));
        ck_assert_int_eq(gs_ckpt_read(dir, &c, err, sizeof(err)), 0);
        ck_assert_uint_eq(c.claims_migrated, 1);
        ck_assert_int_eq(c.recs[1].kind, GS_OWNER_CLAIM);
        ck_assert_str_eq(c.recs[1].claim.uid, CLAIM1);
        gs_ckpt_free(&c);
        state_done(dir);
}
END_TEST

/* A file that cannot be read whole gives nothing, and says which. */
START_TEST(test_unreadable_and_bounds)
{
        char dir[] = "/tmp/gsckptXXXXXX", path[300], cpath[300], err[512] = "";
        size_t cap = GS_CKPT_LINE_MAX + 64, n = 0;
        char *file = malloc(cap);
        struct gs_ckpt c;

        ck_assert_ptr_nonnull(file);
        state_dir(dir);
        snprintf(path, sizeof(path), "%s/%s", dir, GS_CKPT_NAME);
        snprintf(cpath, sizeof(cpath), "%s/%s", dir, GS_CKPT_CLAIMS_NAME);
        /* No files: no records. */
        ck_assert_int_eq(gs_ckpt_read(dir, &c, err, sizeof(err)), 0);
        ck_assert_uint_eq(c.n, 0);

        ck_assert_int_eq(mkdir(path, 0700), 0);
        ck_assert_int_eq(gs_ckpt_read(dir, &c, err, sizeof(err)), -EISDIR);
        ck_assert_msg(strstr(err, path), "err: %s", err);
        ck_assert_ptr_null(c.recs);
        ck_assert_int_eq(rmdir(path), 0);

        /* A good checkpoint but an unreadable claims file: nothing. */
        write_file(path, "aaaaaaaaaaaaaaaa 1 1 " U "-u0\n", strlen("aaaaaaaaaaaaaaaa 1 1 " U "-u0\n"));
        ck_assert_int_eq(symlink(GS_CKPT_CLAIMS_NAME, cpath), 0);
        ck_assert_int_eq(gs_ckpt_read(dir, &c, err, sizeof(err)), -ELOOP);
        ck_assert_msg(strstr(err, cpath), "err: %s", err);
        ck_assert_uint_eq(c.n, 0);
        ck_assert_int_eq(unlink(cpath), 0);

        for (unsigned i = 0; i <= GS_CKPT_KEPT_MAX; i++)
                n += (size_t)snprintf(file + n, cap - n, "bad line %u\n", i);
        write_file(path, file, n);
        ck_assert_int_eq(gs_ckpt_read(dir, &c, err, sizeof(err)), -EFBIG);
        ck_assert_msg(strstr(err, "lines that do not parse"), "err: %s", err);
        /* The same count across both files. */
        write_file(path, file, n - strlen("bad line 64\n"));
        write_file(cpath, "bad\n", 4);
        ck_assert_int_eq(gs_ckpt_read(dir, &c, err, sizeof(err)), -EFBIG);
        ck_assert_int_eq(unlink(cpath), 0);
        ck_assert_int_eq(gs_ckpt_read(dir, &c, err, sizeof(err)), 0);
        ck_assert_uint_eq(c.n, GS_CKPT_KEPT_MAX);
        gs_ckpt_free(&c);

        memset(file, 'x', GS_CKPT_LINE_MAX + 1);
        file[GS_CKPT_LINE_MAX + 1] = '\n';
        write_file(path, file, GS_CKPT_LINE_MAX + 2);
        ck_assert_int_eq(gs_ckpt_read(dir, &c, err, sizeof(err)), -EFBIG);
        ck_assert_msg(strstr(err, "longer than"), "err: %s", err);
        /* At the bound it reads (kept: it does not parse). */
        write_file(path, file, GS_CKPT_LINE_MAX);
        ck_assert_int_eq(gs_ckpt_read(dir, &c, err, sizeof(err)), 0);
        ck_assert_uint_eq(c.n, 1);
        ck_assert_uint_eq(c.recs[0].kept_len, GS_CKPT_LINE_MAX);
        gs_ckpt_free(&c);
        free(file);
        state_done(dir);
}
END_TEST

int main(void)
{
        Suite *s = suite_create("ckpt");
        TCase *t = tcase_create("ckpt");

        tcase_add_test(t, test_v3_round_trip);
        tcase_add_test(t, test_v1_v2_lines);
        tcase_add_test(t, test_parse_rejects);
        tcase_add_test(t, test_qos);
        tcase_add_test(t, test_qos_duties);
        tcase_add_test(t, test_migrate_v2_claims);
        tcase_add_test(t, test_unreadable_and_bounds);
        suite_add_tcase(s, t);
        return gs_check_run(s);
}
