/* check_metrics.c — agent/services/gs_metrics: the request parser, the address
 * parser, and the exposition text of a small agent state (label escaping,
 * HELP/TYPE lines, figures). */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>

#include "gs_check.h"
#include "gs_allocs.h"
#include "gs_metrics.h"

static int req(const char *s, bool *head)
{
        return gs_metrics_parse_request(s, strlen(s), head);
}

START_TEST(test_parse_request)
{
        bool head;
        char big[GS_METRICS_MAX_REQUEST];

        ck_assert_int_eq(req("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", &head), 200);
        ck_assert(!head);
        ck_assert_int_eq(req("GET /metrics?x=1 HTTP/1.0\n\n", &head), 200);
        ck_assert_int_eq(req("HEAD /metrics HTTP/1.1\r\n\r\n", &head), 200);
        ck_assert(head);
        /* Incomplete: wait for more. */
        ck_assert_int_eq(req("", &head), 0);
        ck_assert_int_eq(req("GET /metr", &head), 0);
        ck_assert_int_eq(req("GET /metrics HTTP/1.1\r\nHost: x\r\n", &head), 0);
        /* Other paths and methods. */
        ck_assert_int_eq(req("GET / HTTP/1.1\r\n\r\n", &head), 404);
        ck_assert_int_eq(req("GET /metricsx HTTP/1.1\r\n\r\n", &head), 404);
        ck_assert_int_eq(req("POST /metrics HTTP/1.1\r\n\r\n", &head), 405);
        ck_assert_int_eq(req("DELETE /x HTTP/1.1\r\n\r\n", &head), 405);
        /* Malformed request lines: judged as soon as the line is whole. */
        ck_assert_int_eq(req("GET /metrics\r\n", &head), 400);
        ck_assert_int_eq(req("GET /metrics HTTP/2.0\r\n", &head), 400);
        ck_assert_int_eq(req("GET  /metrics HTTP/1.1\r\n", &head), 400);
        ck_assert_int_eq(req("get /metrics HTTP/1.1\r\n", &head), 400);
        ck_assert_int_eq(req("GET metrics HTTP/1.1\r\n", &head), 400);
        ck_assert_int_eq(req("GET /a\x01 HTTP/1.1\r\n", &head), 400);
        ck_assert_int_eq(req("\x01garbage\r\n", &head), 400);
        ck_assert_int_eq(gs_metrics_parse_request("GET /\0 HTTP/1.1\r\n\r\n", 20, &head), 400);
        /* The size bound. */
        memset(big, 'a', sizeof(big));
        ck_assert_int_eq(gs_metrics_parse_request(big, sizeof(big), &head), 431);
        ck_assert_int_eq(gs_metrics_parse_request(big, sizeof(big) - 1, &head), 0);
        memcpy(big, "GET /metrics HTTP/1.1\r\nX: ", 26);
        ck_assert_int_eq(gs_metrics_parse_request(big, sizeof(big), &head), 431);
}
END_TEST

START_TEST(test_parse_address)
{
        struct sockaddr_storage ss;
        socklen_t len;
        const struct sockaddr_in *s4 = (const struct sockaddr_in *)&ss;
        const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)&ss;

        ck_assert_int_eq(gs_metrics_parse_address("127.0.0.1:9400", &ss, &len), 0);
        ck_assert_int_eq(ss.ss_family, AF_INET);
        ck_assert_int_eq(len, sizeof(*s4));
        ck_assert_int_eq(ntohs(s4->sin_port), 9400);
        ck_assert_uint_eq(ntohl(s4->sin_addr.s_addr), 0x7f000001u);
        ck_assert_int_eq(gs_metrics_parse_address("[::1]:65535", &ss, &len), 0);
        ck_assert_int_eq(ss.ss_family, AF_INET6);
        ck_assert_int_eq(ntohs(s6->sin6_port), 65535);
        ck_assert(IN6_IS_ADDR_LOOPBACK(&s6->sin6_addr));
        ck_assert_int_eq(gs_metrics_parse_address("[::]:1", &ss, &len), 0);
        static const char *const bad[] = {
                "",
                "9400",
                ":9400",
                "1.2.3.4",
                "1.2.3.4:",
                "1.2.3.4:0",
                "1.2.3.4:65536",
                "1.2.3.4:94x",
                "1.2.3.4:-1",
                "localhost:9400",
                "::1:9400",
                "[::1:9400",
                "[1.2.3.4]:9400",
                "1.2.3.4.5:9400",
                "[0000:0000:0000:0000:0000:0000:0000:0000:0000:0000:0000:0000:0000]:1",
        };
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
                ck_assert_msg(gs_metrics_parse_address(bad[i], &ss, &len) == -EINVAL, "%s", bad[i]);
}
END_TEST

/* An agent with no GPU and two allocations of no part: the agent-wide and
 * per-allocation lines, with label values that need escaping. */
START_TEST(test_render)
{
        struct gs_agent ag = { 0 };
        struct gs_allocation a = { 0 }, b = { 0 };
        char *text = NULL, *s;
        size_t len = 0;

        strcpy(a.id, "00000000000000aa");
        strcpy(a.pod_namespace, "ns");
        strcpy(a.pod_name, "we\"ird\\pod\nname");
        strcpy(a.container_name, "c");
        strcpy(b.id, "00000000000000bb");
        a.next = &b;
        ag.node.allocs = &a;
        ag.node.nallocs = 2;
        ck_assert_int_eq(gs_metrics_render(&ag, &text, &len), 0);
        s = strndup(text, len);
        ck_assert_ptr_nonnull(s);
        ck_assert_ptr_nonnull(strstr(s, "# HELP gshare_allocations "));
        ck_assert_ptr_nonnull(strstr(s, "# TYPE gshare_allocations gauge\ngshare_allocations 2\n"));
        ck_assert_ptr_nonnull(strstr(s, "gshare_processes 0\n"));
        ck_assert_ptr_nonnull(strstr(s, "gshare_allocation_processes{allocation=\"00000000000000aa\","
                                        "namespace=\"ns\",pod=\"we\\\"ird\\\\pod\\nname\",container=\"c\"} 0\n"));
        /* Unknown pod: no pod labels. */
        ck_assert_ptr_nonnull(strstr(s, "gshare_allocation_processes{allocation=\"00000000000000bb\"} 0\n"));
        ck_assert_ptr_nonnull(strstr(s, "# TYPE gshare_gpu_chunks_free gauge\n"));
        ck_assert_ptr_null(strstr(s, "gshare_gpu_chunks_free{"));
        /* Every line ends; no raw newline inside a sample. */
        ck_assert_int_eq(s[len - 1], '\n');
        for (char *l = s; *l; l = strchr(l, '\n') + 1)
                ck_assert_msg(l[0] == '#' || strncmp(l, "gshare_", 7) == 0, "line: %.40s", l);
        free(s);
        free(text);
}
END_TEST

/* Buckets are inclusive upper bounds, cumulative when read; the rest is
 * above them all; the exposition has _bucket per bound and +Inf, _sum in
 * seconds, _count. */
START_TEST(test_hist)
{
        struct gs_agent ag = { 0 };
        struct gs_hist h = { 0 };
        struct gs_hist_snap sn;
        char *text = NULL, *s;
        size_t len = 0;

        gs_hist_observe(&h, &gs_hist_seconds, 0);
        gs_hist_observe(&h, &gs_hist_seconds, 1000); /* 1 us: the first bound */
        gs_hist_observe(&h, &gs_hist_seconds, 1001);
        gs_hist_observe(&h, &gs_hist_seconds, 20000000000ull); /* 20 s: above 10 s */
        gs_hist_read(&h, &gs_hist_seconds, &sn);
        ck_assert_uint_eq(sn.cum[0], 2);
        ck_assert_uint_eq(sn.cum[1], 3);
        ck_assert_uint_eq(sn.cum[gs_hist_seconds.n - 1], 3);
        ck_assert_uint_eq(sn.count, 4);
        ck_assert_uint_eq(sn.sum, 20000002001ull);
        for (uint32_t i = 1; i < gs_hist_bytes.n; i++)
                ck_assert(gs_hist_bytes.le[i] > gs_hist_bytes.le[i - 1]);
        for (uint32_t i = 1; i < gs_hist_seconds.n; i++)
                ck_assert(gs_hist_seconds.le[i] > gs_hist_seconds.le[i - 1]);

        ag.node.hists.request[GS_OP_ALLOC] = h;
        gs_hist_observe(&ag.node.hists.grant_bytes[GS_HIST_GRANT_ALLOC], &gs_hist_bytes, 5u << 20);
        ck_assert_int_eq(gs_metrics_render(&ag, &text, &len), 0);
        s = strndup(text, len);
        ck_assert_ptr_nonnull(s);
        ck_assert_ptr_nonnull(strstr(s, "# TYPE gshare_request_duration_seconds histogram\n"));
        ck_assert_ptr_nonnull(strstr(s, "gshare_request_duration_seconds_bucket{op=\"alloc\",le=\"1e-06\"} 2\n"));
        ck_assert_ptr_nonnull(strstr(s, "gshare_request_duration_seconds_bucket{op=\"alloc\",le=\"+Inf\"} 4\n"));
        ck_assert_ptr_nonnull(strstr(s, "gshare_request_duration_seconds_sum{op=\"alloc\"} 20.000002001\n"));
        ck_assert_ptr_nonnull(strstr(s, "gshare_request_duration_seconds_count{op=\"alloc\"} 4\n"));
        ck_assert_ptr_nonnull(strstr(s, "gshare_request_duration_seconds_count{op=\"free\"} 0\n"));
        ck_assert_ptr_nonnull(strstr(s, "gshare_grant_bytes_bucket{op=\"alloc\",le=\"4194304\"} 0\n"));
        ck_assert_ptr_nonnull(strstr(s, "gshare_grant_bytes_bucket{op=\"alloc\",le=\"16777216\"} 1\n"));
        ck_assert_ptr_nonnull(strstr(s, "gshare_grant_bytes_sum{op=\"alloc\"} 5242880\n"));
        ck_assert_ptr_nonnull(strstr(s, "gshare_scrub_duration_seconds_count 0\n"));
        ck_assert_ptr_nonnull(strstr(s, "gshare_reconcile_duration_seconds_count{phase=\"list\"} 0\n"));
        free(s);
        free(text);
}
END_TEST

int main(void)
{
        Suite *s = suite_create("metrics");
        TCase *t = tcase_create("metrics");

        tcase_add_test(t, test_parse_request);
        tcase_add_test(t, test_parse_address);
        tcase_add_test(t, test_render);
        tcase_add_test(t, test_hist);
        suite_add_tcase(s, t);
        return gs_check_run(s);
}
