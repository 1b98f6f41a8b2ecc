/* check_dra.c — the DRA plugin's parts that need no kubelet: quantities and
 * ResourceClaims (gs_claim), the ResourceSlice's JSON and the driver version
 * (gs_slice), the container spec (gs_ctrspec) and CDI specs (gs_cdi).  The
 * plugin as a whole: test/dra/test_dra.py. */
#include <check.h>

#include "gs_check.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <dirent.h>
#include <yaml.h>

#include "gs_cdi.h"
#include "gs_claim.h"
#include "gs_config.h"
#include "gs_ctrspec.h"
#include "gs_slice.h"

/* Whether s (len bytes) is one well-formed JSON/YAML document. */
static int parses(const char *s, size_t len)
{
        yaml_parser_t p;
        yaml_document_t d;
        int ok;

        ck_assert(yaml_parser_initialize(&p));
        yaml_parser_set_input_string(&p, (const unsigned char *)s, len);
        ok = yaml_parser_load(&p, &d) && yaml_document_get_root_node(&d) != NULL;
        if (ok)
                yaml_document_delete(&d);
        yaml_parser_delete(&p);
        return ok;
}

static size_t count(const char *hay, const char *needle)
{
        size_t n = 0;

        for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle))
                n++;
        return n;
}

START_TEST(test_quantity)
{
        static const struct {
                const char *s;
                uint64_t v;
        } good[] = { { "8Gi", 8ull << 30 },   { "2048Mi", 2048ull << 20 },
                     { "8G", 8000000000ull }, { "1e9", 1000000000ull },
                     { "123", 123 },          { "0", 0 },
                     { "64Ki", 65536 },       { "1Ti", 1ull << 40 },
                     { "5k", 5000 } };
        static const char *const bad[] = { "", "-1", "1.5Gi", "1m", "Gi", "1Xi", "1 Gi", "0x10", "1e", "1e-3", " 1" };
        uint64_t v;

        for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
                ck_assert_int_eq(gs_claim_quantity(good[i].s, &v), 0);
                ck_assert_uint_eq(v, good[i].v);
        }
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
                ck_assert_msg(gs_claim_quantity(bad[i], &v) == -EINVAL, "'%s' accepted", bad[i]);
        ck_assert_int_eq(gs_claim_quantity("99999999999999999999", &v), -ERANGE);
        ck_assert_int_eq(gs_claim_quantity("20000000Ti", &v), -ERANGE);
        ck_assert_int_eq(gs_claim_quantity("1e20", &v), -EINVAL);
}
END_TEST

#define CLAIM_HEAD                                                                                               \
        "{\"apiVersion\":\"resource.k8s.io/v1\",\"kind\":\"ResourceClaim\",\"metadata\":{\"name\":\"c\\u003c\"," \
        "\"namespace\":\"ns\",\"uid\":\"aaaa-1\"},"

START_TEST(test_claim)
{
        static const char ok[] = CLAIM_HEAD
                "\"status\":{\"allocation\":{\"devices\":{\"results\":["
                "{\"request\":\"other\",\"driver\":\"gpu.nvidia.com\",\"pool\":\"n\",\"device\":\"gpu-0\"},"
                "{\"request\":\"gpu\",\"driver\":\"gpumem.gshare.io\",\"pool\":\"node-a\",\"device\":\"gpu-1\","
                "\"shareID\":\"s-1\",\"consumedCapacity\":{\"memory\":\"3Gi\"}}]}}}}";
        static const char pending[] = CLAIM_HEAD "\"status\":{}}";
        static const char badqty[] = CLAIM_HEAD
                "\"status\":{\"allocation\":{\"devices\":{\"results\":["
                "{\"driver\":\"gpumem.gshare.io\",\"device\":\"gpu-0\",\"consumedCapacity\":{\"memory\":\"1.5Gi\"}}]}}}}";
        struct gs_claim_info ci;
        char err[256], *big;
        size_t off;

        ck_assert_int_eq(gs_claim_parse(ok, strlen(ok), "gpumem.gshare.io", &ci, err, sizeof(err)), 0);
        ck_assert_str_eq(ci.uid, "aaaa-1");
        ck_assert_int_eq(ci.allocated, 1);
        ck_assert_uint_eq(ci.nresults, 1);
        ck_assert_str_eq(ci.results[0].request, "gpu");
        ck_assert_str_eq(ci.results[0].pool, "node-a");
        ck_assert_str_eq(ci.results[0].device, "gpu-1");
        ck_assert_str_eq(ci.results[0].share_id, "s-1");
        ck_assert_uint_eq(ci.results[0].memory, 3ull << 30);
        ck_assert_int_eq(gs_claim_parse(ok, strlen(ok), "other.example.com", &ci, err, sizeof(err)), 0);
        ck_assert_uint_eq(ci.nresults, 0);
        ck_assert_int_eq(gs_claim_parse(pending, strlen(pending), "gpumem.gshare.io", &ci, err, sizeof(err)), 0);
        ck_assert_int_eq(ci.allocated, 0);
        ck_assert_int_eq(gs_claim_parse(badqty, strlen(badqty), "gpumem.gshare.io", &ci, err, sizeof(err)), -EINVAL);
        ck_assert_ptr_nonnull(strstr(err, "'1.5Gi'"));
        ck_assert_int_eq(gs_claim_parse("{\"a\":", 5, "d", &ci, err, sizeof(err)), -EINVAL);
        ck_assert_ptr_nonnull(strstr(err, "not JSON"));
        ck_assert_int_eq(gs_claim_parse("[1,2]", 5, "d", &ci, err, sizeof(err)), -EINVAL);
        ck_assert_ptr_nonnull(strstr(err, "not a JSON object"));

        /* Hostile: more results of ours than the bound, an over-long field. */
        big = malloc(1 << 16);
        ck_assert_ptr_nonnull(big);
        off = (size_t)snprintf(big, 1 << 16, "%s\"status\":{\"allocation\":{\"devices\":{\"results\":[", CLAIM_HEAD);
        for (int i = 0; i <= GS_CLAIM_MAX_RESULTS; i++)
                off += (size_t)snprintf(big + off, (1 << 16) - off, "%s{\"driver\":\"d\",\"device\":\"gpu-%d\"}",
                                        i ? "," : "", i);
        off += (size_t)snprintf(big + off, (1 << 16) - off, "]}}}}");
        ck_assert_int_eq(gs_claim_parse(big, off, "d", &ci, err, sizeof(err)), -EINVAL);
        ck_assert_ptr_nonnull(strstr(err, "more than"));
        off = (size_t)snprintf(
                big, 1 << 16, "%s\"status\":{\"allocation\":{\"devices\":{\"results\":[{\"driver\":\"d\",\"device\":\"",
                CLAIM_HEAD);
        memset(big + off, 'x', 300);
        off += 300;
        off += (size_t)snprintf(big + off, (1 << 16) - off, "\"}]}}}}");
        ck_assert_int_eq(gs_claim_parse(big, off, "d", &ci, err, sizeof(err)), -EINVAL);
        free(big);
}
END_TEST

/* A claim of request "gpu" on our driver with the config entries cfg. */
static int parse_with_config(const char *cfg, struct gs_claim_info *ci, char *err, size_t errlen)
{
        char json[2048];

        snprintf(json, sizeof(json),
                 "%s\"status\":{\"allocation\":{\"devices\":{\"results\":["
                 "{\"request\":\"gpu\",\"driver\":\"gpumem.gshare.io\",\"pool\":\"n\",\"device\":\"gpu-0\","
                 "\"consumedCapacity\":{\"memory\":\"4Gi\"}}],\"config\":[%s]}}}}",
                 CLAIM_HEAD, cfg);
        return gs_claim_parse(json, strlen(json), "gpumem.gshare.io", ci, err, errlen);
}

#define OPAQUE(reqs, params)                                                        \
        "{\"source\":\"FromClaim\",\"requests\":[" reqs "],\"opaque\":{\"driver\":" \
        "\"gpumem.gshare.io\",\"parameters\":" params "}}"

/* The burst limit from the claim's opaque configuration (docs/burst.md). */
START_TEST(test_claim_burst)
{
        struct gs_claim_info ci;
        char err[256];

        ck_assert_int_eq(parse_with_config("", &ci, err, sizeof(err)), 0);
        ck_assert_uint_eq(ci.burst, 0);
        ck_assert_int_eq(parse_with_config(OPAQUE("", "{\"burst\":\"40Gi\"}"), &ci, err, sizeof(err)), 0);
        ck_assert_uint_eq(ci.burst, 40ull << 30);
        /* For our request by name, with apiVersion and kind; another
         * driver's and another request's ignored. */
        ck_assert_int_eq(
                parse_with_config(
                        OPAQUE("\"gpu\"",
                               "{\"apiVersion\":\"gshare.io/v1\",\"kind\":\"Config\","
                               "\"burst\":\"8Gi\"}") "," OPAQUE("\"other\"",
                                                                "{\"burst\":\"1Gi\"}") ","
                                                                                       "{\"opaque\":{\"driver\":\"gpu.nvidia.com\",\"parameters\":{\"x\":1}}}",
                        &ci, err, sizeof(err)),
                0);
        ck_assert_uint_eq(ci.burst, 8ull << 30);
        /* Refused, naming the problem. */
        ck_assert_int_eq(parse_with_config(OPAQUE("", "{\"burst\":\"lots\"}"), &ci, err, sizeof(err)), -EINVAL);
        ck_assert_ptr_nonnull(strstr(err, "burst 'lots' is not a quantity of bytes"));
        ck_assert_int_eq(parse_with_config(OPAQUE("", "{\"burst\":\"0\"}"), &ci, err, sizeof(err)), -EINVAL);
        ck_assert_int_eq(parse_with_config(OPAQUE("", "{\"brust\":\"8Gi\"}"), &ci, err, sizeof(err)), -EINVAL);
        ck_assert_ptr_nonnull(strstr(err, "parameter 'brust'; known: burst"));
        ck_assert_int_eq(parse_with_config(OPAQUE("", "\"8Gi\""), &ci, err, sizeof(err)), -EINVAL);
        ck_assert_ptr_nonnull(strstr(err, "no parameters object"));
        ck_assert_int_eq(
                parse_with_config(OPAQUE("", "{\"burst\":\"8Gi\"}") "," OPAQUE("\"gpu\"", "{\"burst\":\"9Gi\"}"), &ci,
                                  err, sizeof(err)),
                -EINVAL);
        ck_assert_ptr_nonnull(strstr(err, "two bursts"));
}
END_TEST

/* A claim of request "gpu" on our driver consuming compute comp ("": no
 * entry) with the config entries cfg. */
static int parse_compute(const char *comp, const char *cfg, struct gs_claim_info *ci, char *err, size_t errlen)
{
        char json[2048], cc[96] = "";

        if (comp[0])
                snprintf(cc, sizeof(cc), ",\"compute\":\"%s\"", comp);
        snprintf(json, sizeof(json),
                 "%s\"status\":{\"allocation\":{\"devices\":{\"results\":["
                 "{\"request\":\"gpu\",\"driver\":\"gpumem.gshare.io\",\"pool\":\"n\",\"device\":\"gpu-0\","
                 "\"consumedCapacity\":{\"memory\":\"4Gi\"%s}}],\"config\":[%s]}}}}",
                 CLAIM_HEAD, cc, cfg);
        return gs_claim_parse(json, strlen(json), "gpumem.gshare.io", ci, err, errlen);
}

#define FROM_CLASS(params) \
        "{\"source\":\"FromClass\",\"opaque\":{\"driver\":\"gpumem.gshare.io\",\"parameters\":" params "}}"

/* Compute as a consumable capacity, and computeWeight (docs/compute.md):
 * the consumed compute is the cap unless 0 or 100, a computeCap lowers it;
 * of several configurations the smallest weight wins. */
START_TEST(test_claim_compute)
{
        static const struct {
                const char *comp, *cfg;
                uint32_t consumed, cap, weight;
        } ok[] = {
                { "", "", 0, 0, 0 },
                { "30", "", 30, 30, 0 },
                { "0", "", 0, 0, 0 },
                { "100", "", 100, 0, 0 }, /* all of it: no cap */
                { "30", OPAQUE("", "{\"computeCap\":\"20\"}"), 30, 20, 0 },
                { "30", OPAQUE("", "{\"computeCap\":\"50\"}"), 30, 30, 0 }, /* never raised */
                { "", OPAQUE("", "{\"computeCap\":\"50\"}"), 0, 50, 0 },
                { "100", OPAQUE("", "{\"computeCap\":\"50\"}"), 100, 50, 0 },
                { "", OPAQUE("", "{\"computeWeight\":\"30\"}"), 0, 0, 30 },
                { "", FROM_CLASS("{\"computeWeight\":\"5\"}") "," OPAQUE("", "{\"computeWeight\":\"30\"}"), 0, 0, 5 },
                { "", FROM_CLASS("{\"computeWeight\":\"50\"}") "," OPAQUE("", "{\"computeWeight\":\"30\"}"), 0, 0, 30 },
        };
        static const struct {
                const char *comp, *cfg, *want;
        } bad[] = {
                { "101", "", "consumedCapacity.compute '101' of device gpu-0 is not a percent (0 to 100)" },
                { "1k", "", "consumedCapacity.compute '1k'" },
                { "0.5", "", "consumedCapacity.compute '0.5'" },
                { "", OPAQUE("", "{\"computeWeight\":\"0\"}"), "computeWeight '0' is not a weight (1 to 100)" },
                { "", OPAQUE("", "{\"computeWeight\":\"101\"}"), "computeWeight '101' is not a weight" },
                { "", OPAQUE("", "{\"computeWeight\":\"heavy\"}"), "computeWeight 'heavy' is not a weight" },
                { "", OPAQUE("", "{\"computeWeigth\":\"3\"}"),
                  "parameter 'computeWeigth'; known: burst, computeClass, computeCap, computeWeight" },
        };
        struct gs_claim_info ci;
        char err[256];

        for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
                err[0] = '\0';
                ck_assert_msg(parse_compute(ok[i].comp, ok[i].cfg, &ci, err, sizeof(err)) == 0, "%zu: %s", i, err);
                ck_assert_uint_eq(ci.nresults, 1);
                ck_assert_msg(ci.results[0].compute == ok[i].consumed &&
                                      gs_claim_compute_cap(&ci, &ci.results[0]) == ok[i].cap &&
                                      ci.compute_weight == ok[i].weight,
                              "%zu: consumed %u, cap %u, weight %u", i, ci.results[0].compute,
                              gs_claim_compute_cap(&ci, &ci.results[0]), ci.compute_weight);
        }
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                err[0] = '\0';
                ck_assert_int_eq(parse_compute(bad[i].comp, bad[i].cfg, &ci, err, sizeof(err)), -EINVAL);
                ck_assert_msg(strstr(err, bad[i].want), "%zu: %s", i, err);
        }
}
END_TEST

/* A claim as Kubernetes 1.36's scheduler allocated it from the slice
 * gs_slice_json writes (recorded on ../shared/kubelet136: compute "25.5"
 * requested, 25500m, rounded up by the policy's step to 26; beside claims
 * of 30 and 0, a fourth asking for 80 stayed Pending). */
START_TEST(test_claim_k136)
{
        static const char claim[] =
                "{\"apiVersion\":\"resource.k8s.io/v1\",\"kind\":\"ResourceClaim\",\"metadata\":{\"creationT"
                "imestamp\":\"2026-11-28T17:39:10Z\",\"finalizers\":[\"resource.kubernetes.io/delete-pr"
                "otection\"],\"name\":\"c25\",\"namespace\":\"default\",\"resourceVersion\":\"315\",\"uid\":\"806"
                "f523c-32c6-475e-952a-9f91efab714b\"},\"spec\":{\"devices\":{\"requests\":[{\"exactly\":{\""
                "allocationMode\":\"ExactCount\",\"capacity\":{\"requests\":{\"compute\":\"25500m\",\"memory\""
                ":\"1Gi\"}},\"count\":1,\"deviceClassName\":\"gpumem.gshare.io\"},\"name\":\"gpu\"}]}},\"statu"
                "s\":{\"allocation\":{\"allocationTimestamp\":\"2026-11-28T17:39:10Z\",\"devices\":{\"resul"
                "ts\":[{\"consumedCapacity\":{\"compute\":\"26\",\"memory\":\"1Gi\"},\"device\":\"gpu-0\",\"drive"
                "r\":\"gpumem.gshare.io\",\"pool\":\"k134node\",\"request\":\"gpu\",\"shareID\":\"9a825e15-66c6"
                "-40ee-b6d4-8d3819758662\"}]},\"nodeSelector\":{\"nodeSelectorTerms\":[{\"matchFields\":"
                "[{\"key\":\"metadata.name\",\"operator\":\"In\",\"values\":[\"k134node\"]}]}]}},\"reservedFor"
                "\":[{\"name\":\"pod-c25\",\"resource\":\"pods\",\"uid\":\"0ea70cd6-a4b0-4611-9340-ccb9f3ab2e"
                "54\"}]}}";
        struct gs_claim_info ci;
        char err[256];

        ck_assert_int_eq(gs_claim_parse(claim, strlen(claim), "gpumem.gshare.io", &ci, err, sizeof(err)), 0);
        ck_assert_uint_eq(ci.nresults, 1);
        ck_assert_uint_eq(ci.results[0].memory, 1ull << 30);
        ck_assert_uint_eq(ci.results[0].compute, 26);
        ck_assert_uint_eq(gs_claim_compute_cap(&ci, &ci.results[0]), 26);
}
END_TEST

START_TEST(test_slice_json)
{
        struct gs_slice_gpu g[2] = {
                { .index = 0,
                  .uuid = "GPU-00000000-1111-2222-3333-444444444444",
                  .name = "H100 \"80GB\"",
                  .numa_node = -1,
                  .total_bytes = 85899345920ull,
                  .capacity_bytes = 78ull << 30,
                  .unit_bytes = 1ull << 30 },
                { .index = 1,
                  .uuid = "GPU-00000000-1111-2222-3333-555555555555",
                  .name = "H100",
                  .numa_node = 1,
                  .total_bytes = 85899345920ull,
                  .capacity_bytes = 39ull << 31,
                  .unit_bytes = 2ull << 30 },
        };
        char *buf = NULL, name[300];
        size_t len = 0;
        FILE *f = open_memstream(&buf, &len);

        ck_assert_ptr_nonnull(f);
        ck_assert_int_eq(gs_slice_json(f, "gpumem.gshare.io", "node-a", 7, g, 2, "535.104.5"), 0);
        fclose(f);
        ck_assert(parses(buf, len));
        ck_assert_ptr_nonnull(strstr(buf, "\"metadata\":{\"name\":\"node-a-gpumem.gshare.io\"}"));
        ck_assert_ptr_nonnull(strstr(buf, "\"pool\":{\"name\":\"node-a\",\"generation\":7,\"resourceSliceCount\":1}"));
        ck_assert_uint_eq(count(buf, "\"allowMultipleAllocations\":true"), 2);
        ck_assert_ptr_nonnull(strstr(buf, "\"productName\":{\"string\":\"H100 \\\"80GB\\\"\"}"));
        ck_assert_uint_eq(count(buf, "\"numaNode\""), 1);
        ck_assert_ptr_nonnull(strstr(buf, "\"numaNode\":{\"int\":1}"));
        ck_assert_uint_eq(count(buf, "\"driverVersion\":{\"version\":\"535.104.5\"}"), 2);
        ck_assert_ptr_nonnull(strstr(buf, "\"value\":\"83751862272\",\"requestPolicy\":{\"default\":\"1073741824\","
                                          "\"validRange\":{\"min\":\"1073741824\",\"step\":\"1073741824\"}}"));
        ck_assert_ptr_nonnull(strstr(buf, "\"name\":\"gpu-1\""));
        ck_assert_ptr_nonnull(strstr(buf, "\"step\":\"2147483648\""));
        /* Compute beside memory: 100 % of each GPU's time, none unless
         * asked for, whole percents up to all of it. */
        ck_assert_uint_eq(count(buf, "\"compute\":{\"value\":\"100\",\"requestPolicy\":{\"default\":\"0\","
                                     "\"validRange\":{\"min\":\"0\",\"max\":\"100\",\"step\":\"1\"}}}"),
                          2);
        free(buf);
        buf = NULL;
        f = open_memstream(&buf, &len);
        ck_assert_int_eq(gs_slice_json(f, "d.io", "n", 1, g, 0, ""), 0);
        fclose(f);
        ck_assert(parses(buf, len));
        ck_assert_ptr_nonnull(strstr(buf, "\"devices\":[]"));
        ck_assert_ptr_null(strstr(buf, "driverVersion"));
        free(buf);
        memset(name, 'a', 250);
        name[250] = '\0';
        ck_assert_int_eq(gs_slice_name((char[300]){ 0 }, 300, name, "gpumem.gshare.io"), -ENAMETOOLONG);
}
END_TEST

static void version_of(const char *text, char *out, size_t cap)
{
        char path[] = "/tmp/gsverXXXXXX";
        int fd = mkstemp(path);

        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
        close(fd);
        gs_slice_driver_version(path, out, cap);
        unlink(path);
}

START_TEST(test_driver_version)
{
        char v[64];

        version_of("NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 01:15:15 UTC 2023\n"
                   "GCC version:  gcc version 12.2.0\n",
                   v, sizeof(v));
        ck_assert_str_eq(v, "535.104.5");
        version_of("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159  Release Build\n", v, sizeof(v));
        ck_assert_str_eq(v, "580.159.0");
        version_of("no version here\n", v, sizeof(v));
        ck_assert_str_eq(v, "");
        version_of("", v, sizeof(v));
        ck_assert_str_eq(v, "");
        gs_slice_driver_version("/nonexistent/version", v, sizeof(v));
        ck_assert_str_eq(v, "");
}
END_TEST

static Gshare__Ctl__V1__Allocation *alloc_of(const char *dir, size_t nparts)
{
        static Gshare__Ctl__V1__AllocationPart part[2];
        static Gshare__Ctl__V1__AllocationPart *parts[2];
        static Gshare__Ctl__V1__Allocation a;

        gshare__ctl__v1__allocation__init(&a);
        for (size_t i = 0; i < 2; i++) {
                gshare__ctl__v1__allocation_part__init(&part[i]);
                part[i].gpu_uuid = (char *)(i ? "GPU-b" : "GPU-a");
                part[i].quota_bytes = (i + 2) << 30;
                parts[i] = &part[i];
        }
        a.id = (char *)"0123456789abcdef";
        a.socket_dir = (char *)dir;
        a.parts = parts;
        a.n_parts = nparts;
        return &a;
}

START_TEST(test_ctrspec)
{
        struct gs_config c;
        struct gs_ctrspec s;
        char err[256];

        gs_config_defaults(&c);
        ck_assert_int_eq(gs_ctrspec_build(&c, alloc_of("/run/gshare/alloc/x-1", 2), &s, err, sizeof(err)), 0);
        ck_assert_uint_eq(s.nenv, 5);
        ck_assert_str_eq(s.env[4].name, "GSHARE_AGENT_WAIT");
        ck_assert_str_eq(s.env[4].value, "30.000");
        ck_assert_str_eq(s.env[0].name, "GSHARE_MEM_LIMIT");
        ck_assert_str_eq(s.env[0].value, "2147483648,3221225472");
        ck_assert_str_eq(s.env[1].value, "GPU-a,GPU-b");
        ck_assert_str_eq(s.env[3].name, "NVIDIA_VISIBLE_DEVICES");
        ck_assert_uint_eq(s.nmounts, 3);
        ck_assert_str_eq(s.mounts[1].ctr, "/etc/ld.so.preload");
        ck_assert_str_eq(s.mounts[2].host, "/run/gshare/alloc/x-1");
        ck_assert_str_eq(s.mounts[2].ctr, "/var/run/gshare");
        ck_assert(s.mounts[0].ro && s.mounts[1].ro && s.mounts[2].ro);
        c.inject = GS_INJECT_ENV;
        ck_assert_int_eq(gs_ctrspec_build(&c, alloc_of("/run/gshare/alloc/x-1", 1), &s, err, sizeof(err)), 0);
        ck_assert_uint_eq(s.nenv, 6);
        ck_assert_str_eq(s.env[4].name, "LD_PRELOAD");
        c.agent_wait_ms = 1500;
        ck_assert_int_eq(gs_ctrspec_build(&c, alloc_of("/run/gshare/alloc/x-1", 1), &s, err, sizeof(err)), 0);
        ck_assert_str_eq(s.env[5].value, "1.500");
        ck_assert_uint_eq(s.nmounts, 2);
        ck_assert_int_eq(gs_ctrspec_build(&c, alloc_of("/run/x", 0), &s, err, sizeof(err)), -EINVAL);
        ck_assert_int_eq(gs_ctrspec_build(&c, alloc_of("relative/dir", 1), &s, err, sizeof(err)), -EINVAL);
        ck_assert_ptr_nonnull(strstr(err, "unusable allocation"));
}
END_TEST

START_TEST(test_cdi)
{
        char dir[] = "/tmp/gscdiXXXXXX", sub[64], path[128], err[256], buf[4096];
        const char *uid = "aaaaaaaa-0000-4000-8000-000000000001";
        struct gs_config c;
        struct gs_ctrspec s;
        struct dirent *e;
        size_t n, files = 0;
        FILE *f;
        DIR *dd;

        ck_assert_ptr_nonnull(mkdtemp(dir));
        snprintf(sub, sizeof(sub), "%s/cdi", dir); /* created by the write */
        gs_config_defaults(&c);
        ck_assert_int_eq(gs_ctrspec_build(&c, alloc_of("/run/gshare/alloc/a \"q\"", 1), &s, err, sizeof(err)), 0);
        ck_assert_int_eq(gs_cdi_write(sub, GS_CDI_KIND, uid, &s, err, sizeof(err)), 0);
        ck_assert_int_eq(gs_cdi_write(sub, GS_CDI_KIND, uid, &s, err, sizeof(err)), 0); /* again: same file */
        snprintf(path, sizeof(path), "%s/gshare.io-gpumem_%s.json", sub, uid);
        f = fopen(path, "r");
        ck_assert_ptr_nonnull(f);
        n = fread(buf, 1, sizeof(buf) - 1, f);
        buf[n] = '\0';
        fclose(f);
        ck_assert(parses(buf, n));
        ck_assert_ptr_nonnull(strstr(buf, "\"kind\":\"gshare.io/gpumem\""));
        ck_assert_ptr_nonnull(strstr(buf, "\"name\":\"aaaaaaaa-0000-4000-8000-000000000001\""));
        ck_assert_ptr_nonnull(strstr(buf, "\"GSHARE_MEM_LIMIT=2147483648\""));
        ck_assert_ptr_nonnull(strstr(buf, "\"hostPath\":\"/run/gshare/alloc/a \\\"q\\\"\""));
        ck_assert_uint_eq(count(buf, "\"options\":[\"ro\",\"bind\",\"nosuid\",\"nodev\"]"), 3);
        dd = opendir(sub);
        while ((e = readdir(dd)))
                files += e->d_name[0] != '.';
        closedir(dd);
        ck_assert_uint_eq(files, 1); /* no temporary left */
        ck_assert_int_eq(gs_cdi_write(sub, GS_CDI_KIND, "../x", &s, err, sizeof(err)), -EINVAL);
        ck_assert_int_eq(gs_cdi_write(sub, GS_CDI_KIND, ".hidden", &s, err, sizeof(err)), -EINVAL);
        ck_assert_int_eq(gs_cdi_remove(sub, GS_CDI_KIND, uid), 0);
        ck_assert_int_ne(access(path, F_OK), 0);
        ck_assert_int_eq(gs_cdi_remove(sub, GS_CDI_KIND, uid), 0); /* idempotent */
        ck_assert_int_eq(gs_cdi_remove(sub, GS_CDI_KIND, "a/b"), -EINVAL);
        ck_assert_int_eq(rmdir(sub), 0);
        ck_assert_int_eq(rmdir(dir), 0);
}
END_TEST

/* deviceNodes: the control nodes and the GPU's node from its minor in the
 * driver's /proc entry, in the CDI spec as containerEdits.deviceNodes. */
START_TEST(test_cdi_device_nodes)
{
        char proc[] = "/tmp/gsprocXXXXXX", p[256], err[256], buf[4096];
        const char *pcis[2] = { "0000:3b:00.0", "0000:af:00.0" }; /* the second has no entry */
        struct gs_config c;
        struct gs_ctrspec s;
        char *out = NULL;
        size_t len = 0;
        FILE *f;

        ck_assert_ptr_nonnull(mkdtemp(proc));
        snprintf(p, sizeof(p), "%s/gpus", proc);
        ck_assert_int_eq(mkdir(p, 0755), 0);
        snprintf(p, sizeof(p), "%s/gpus/%s", proc, pcis[0]);
        ck_assert_int_eq(mkdir(p, 0755), 0);
        snprintf(p, sizeof(p), "%s/gpus/%s/information", proc, pcis[0]);
        f = fopen(p, "w");
        ck_assert_ptr_nonnull(f);
        fputs("Model: \t\t Fake GPU\nDevice Minor: \t 5\n", f);
        fclose(f);
        gs_config_defaults(&c);
        ck_assert_int_eq(gs_ctrspec_build(&c, alloc_of("/run/gshare/alloc/x-1", 1), &s, err, sizeof(err)), 0);
        ck_assert_uint_eq(s.ndevs, 0);
        gs_ctrspec_add_devices(&s, proc, pcis, 2);
        ck_assert_uint_eq(s.ndevs, 4);
        ck_assert_str_eq(s.devs[0], "/dev/nvidiactl");
        ck_assert_str_eq(s.devs[3], "/dev/nvidia5");
        f = open_memstream(&out, &len);
        ck_assert_int_eq(gs_cdi_json(f, GS_CDI_KIND, "u", &s), 0);
        fclose(f);
        ck_assert(parses(out, len));
        snprintf(buf, sizeof(buf), "%s", out);
        ck_assert_ptr_nonnull(strstr(buf, "\"deviceNodes\":[{\"path\":\"/dev/nvidiactl\"},"
                                          "{\"path\":\"/dev/nvidia-uvm\"},{\"path\":\"/dev/nvidia-uvm-tools\"},"
                                          "{\"path\":\"/dev/nvidia5\"}]"));
        free(out);
        unlink(p);
        snprintf(p, sizeof(p), "%s/gpus/%s", proc, pcis[0]);
        rmdir(p);
        snprintf(p, sizeof(p), "%s/gpus", proc);
        rmdir(p);
        ck_assert_int_eq(rmdir(proc), 0);
}
END_TEST

int main(void)
{
        Suite *s = suite_create("dra");
        TCase *tc = tcase_create("dra");

        tcase_add_test(tc, test_quantity);
        tcase_add_test(tc, test_claim);
        tcase_add_test(tc, test_claim_burst);
        tcase_add_test(tc, test_claim_compute);
        tcase_add_test(tc, test_claim_k136);
        tcase_add_test(tc, test_cdi_device_nodes);
        tcase_add_test(tc, test_slice_json);
        tcase_add_test(tc, test_driver_version);
        tcase_add_test(tc, test_ctrspec);
        tcase_add_test(tc, test_cdi);
        suite_add_tcase(s, tc);
        return gs_check_run(s);
}
