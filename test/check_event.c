/* check_event.c — the JSON body of an Event on a pod or a claim (gs_event.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gs_check.h"
#include "gs_event.h"

/* An Event's JSON: the pod, the reason, the message escaped. */
START_TEST(test_event_json)
{
        char buf[2048];
        int n = gs_event_json(buf, sizeof(buf), GS_EVENT_WARNING, GS_EVENT_POD, "team-a", "trainer-0",
                              "0b5e7c1a-2f3d-4e5f-8a9b-0c1d2e3f4a5b", "GPUMemoryOverQuota", "over \"quota\"\\\n",
                              "node-1", 0);

        ck_assert_int_gt(n, 0);
        ck_assert_ptr_nonnull(strstr(buf, "\"involvedObject\":{\"apiVersion\":\"v1\",\"kind\":\"Pod\","
                                          "\"namespace\":\"team-a\",\"name\":\"trainer-0\","
                                          "\"uid\":\"0b5e7c1a-2f3d-4e5f-8a9b-0c1d2e3f4a5b\"}"));
        ck_assert_ptr_nonnull(strstr(buf, "\"message\":\"over \\\"quota\\\"\\\\\\u000a\""));
        ck_assert_ptr_nonnull(strstr(buf, "\"firstTimestamp\":\"1970-01-01T00:00:00Z\""));
        ck_assert_ptr_nonnull(strstr(buf, "\"type\":\"Warning\""));
        /* no uid: no uid field */
        n = gs_event_json(buf, sizeof(buf), GS_EVENT_WARNING, GS_EVENT_POD, "ns", "p", "", "R", "m", "n", 0);
        ck_assert_int_gt(n, 0);
        ck_assert_ptr_null(strstr(buf, "\"uid\""));
        ck_assert_int_eq(gs_event_json(buf, 64, GS_EVENT_WARNING, GS_EVENT_POD, "ns", "p", "", "R", "m", "n", 0),
                         -ENOSPC);
        /* A DRA claim's allocation: the Event is on the ResourceClaim. */
        n = gs_event_json(buf, sizeof(buf), GS_EVENT_NORMAL, GS_EVENT_CLAIM, "team-b", "gpu-claim-x",
                          "aaaaaaaa-0000-4000-8000-000000000001", "GPUMemoryOverQuota", "m", "n", 0);
        ck_assert_int_gt(n, 0);
        ck_assert_ptr_nonnull(strstr(buf,
                                     "\"involvedObject\":{\"apiVersion\":\"resource.k8s.io/v1\","
                                     "\"kind\":\"ResourceClaim\",\"namespace\":\"team-b\","
                                     "\"name\":\"gpu-claim-x\",\"uid\":\"aaaaaaaa-0000-4000-8000-000000000001\"}"));
        /* Borrowing (docs/burst.md) is not a warning. */
        ck_assert_ptr_nonnull(strstr(buf, "\"type\":\"Normal\""));
        ck_assert_ptr_null(strstr(buf, "Warning"));
}
END_TEST

int main(void)
{
        Suite *s = suite_create("event");
        TCase *t = tcase_create("event");

        tcase_add_test(t, test_event_json);
        suite_add_tcase(s, t);
        return gs_check_run(s);
}
