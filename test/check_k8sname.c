/* check_k8sname.c — common/gs_k8sname.h: Kubernetes' own rules for
 * namespaces (DNS-1123 labels), pod, claim and node names (DNS-1123
 * subdomains) and claim UIDs; every edge: the longest allowed and one more,
 * each bad character, bad ends, empty labels, bytes past the end. */
#include <stdio.h>
#include <string.h>

#include "gs_check.h"
#include "gs_k8sname.h"
#include "gs_util.h"

static char *rep(char *buf, char c, size_t n)
{
        memset(buf, c, n);
        buf[n] = '\0';
        return buf;
}

START_TEST(test_label)
{
        static const char *const good[] = { "a", "0", "default", "kube-system", "a-b-c", "9lives", "x--y" };
        static const char *const bad[] = { "",    "-a", "a-", "A",   "kube_system", "a.b", "a b",
                                           "a/b", "..", "é",  "a\n", "ns%2f",       "a\\b" };
        char buf[128];

        for (size_t i = 0; i < GS_ARRAY_SIZE(good); i++)
                ck_assert_msg(gs_k8s_label_ok(good[i]), "%s", good[i]);
        for (size_t i = 0; i < GS_ARRAY_SIZE(bad); i++)
                ck_assert_msg(!gs_k8s_label_ok(bad[i]), "%s", bad[i]);
        ck_assert(gs_k8s_label_ok(rep(buf, 'a', GS_K8S_LABEL_MAX)));
        ck_assert(!gs_k8s_label_ok(rep(buf, 'a', GS_K8S_LABEL_MAX + 1)));
        /* Every byte but [a-z0-9-] refused, inside a label too. */
        for (int c = 1; c < 256; c++) {
                bool want = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-';
                snprintf(buf, sizeof(buf), "a%cb", c);
                ck_assert_msg(gs_k8s_label_ok(buf) == want, "byte %d", c);
        }
}
END_TEST

START_TEST(test_subdomain)
{
        static const char *const good[] = { "a",         "pod-1",   "web-0.web", "node1.example.com",
                                            "gshare.io", "a.b.c.d", "0.0",       "my-claim-abc12" };
        static const char *const bad[] = { "",    ".",   "a.",     ".a",  "a..b", "-a",  "a-", "a.-b", "a-.b", "A.b",
                                           "a_b", "a/b", "../etc", "a b", "a\tb", "a\n", "ü",  "a%2e", "*.a",  "a:b" };
        char buf[512];

        for (size_t i = 0; i < GS_ARRAY_SIZE(good); i++)
                ck_assert_msg(gs_k8s_subdomain_ok(good[i]), "%s", good[i]);
        for (size_t i = 0; i < GS_ARRAY_SIZE(bad); i++)
                ck_assert_msg(!gs_k8s_subdomain_ok(bad[i]), "%s", bad[i]);
        ck_assert(gs_k8s_subdomain_ok(rep(buf, 'a', GS_K8S_SUBDOMAIN_MAX)));
        ck_assert(!gs_k8s_subdomain_ok(rep(buf, 'a', GS_K8S_SUBDOMAIN_MAX + 1)));
        ck_assert(!gs_k8s_subdomain_ok(rep(buf, 'a', sizeof(buf) - 1)));
        /* Kubernetes does not bound a subdomain's labels at 63. */
        rep(buf, 'a', 100);
        strcat(buf, ".b");
        ck_assert(gs_k8s_subdomain_ok(buf));
        /* 253 with dots; the last one cut makes it end with a dot. */
        for (size_t i = 0; i < GS_K8S_SUBDOMAIN_MAX; i++)
                buf[i] = i % 2 ? '.' : 'a';
        buf[GS_K8S_SUBDOMAIN_MAX] = '\0';
        ck_assert(gs_k8s_subdomain_ok(buf));
        buf[GS_K8S_SUBDOMAIN_MAX - 1] = '\0';
        ck_assert(!gs_k8s_subdomain_ok(buf));
        for (int c = 1; c < 256; c++) {
                bool want = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '.';
                snprintf(buf, sizeof(buf), "a%cb", c);
                ck_assert_msg(gs_k8s_subdomain_ok(buf) == want, "byte %d", c);
        }
}
END_TEST

START_TEST(test_uid)
{
        char buf[64];

        ck_assert(gs_k8s_uid_ok("0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"));
        ck_assert(gs_k8s_uid_ok("ABCDEF01-2345-6789-ABCD-EF0123456789"));
        ck_assert(gs_k8s_uid_ok("uid1") == false); /* 'u', 'i' are no hex digits */
        ck_assert(gs_k8s_uid_ok("c1"));
        ck_assert(!gs_k8s_uid_ok(""));
        ck_assert(!gs_k8s_uid_ok("0f1e2d3c 4b5a"));
        ck_assert(!gs_k8s_uid_ok("../../x"));
        ck_assert(gs_k8s_uid_ok(rep(buf, 'a', GS_K8S_UID_MAX)));
        ck_assert(!gs_k8s_uid_ok(rep(buf, 'a', GS_K8S_UID_MAX + 1)));
}
END_TEST

static Suite *suite(void)
{
        Suite *s = suite_create("k8sname");
        TCase *tc = tcase_create("core");

        tcase_add_test(tc, test_label);
        tcase_add_test(tc, test_subdomain);
        tcase_add_test(tc, test_uid);
        suite_add_tcase(s, tc);
        return s;
}

int main(void)
{
        return gs_check_run(suite());
}
