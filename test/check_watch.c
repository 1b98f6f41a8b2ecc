/* check_watch.c — the pod watch's reading of the API server's bytes
 * (gs_watch.h): one watch event per line, and a list's resourceVersion. */
#include <errno.h>
#include <string.h>

#include "gs_check.h"
#include "gs_watch.h"

static int parse(const char *line, struct gs_watch_event *ev)
{
        return gs_watch_parse_event(line, strlen(line), ev);
}

START_TEST(test_event)
{
        struct gs_watch_event ev;

        ck_assert_int_eq(parse("{\"type\":\"MODIFIED\",\"object\":{\"kind\":\"Pod\",\"metadata\":"
                               "{\"name\":\"train-0\",\"resourceVersion\":\"1234\"},"
                               "\"status\":{\"phase\":\"Succeeded\"}}}",
                               &ev),
                         0);
        ck_assert_str_eq(ev.type, "MODIFIED");
        ck_assert_str_eq(ev.name, "train-0");
        ck_assert_str_eq(ev.rv, "1234");
        ck_assert_str_eq(ev.phase, "Succeeded");
        ck_assert_str_eq(ev.code, "");
        /* 410 Gone comes as an ERROR event whose object is a Status. */
        ck_assert_int_eq(parse("{\"type\":\"ERROR\",\"object\":{\"kind\":\"Status\",\"code\":410,"
                               "\"reason\":\"Expired\"}}",
                               &ev),
                         0);
        ck_assert_str_eq(ev.type, "ERROR");
        ck_assert_str_eq(ev.code, "410");
        ck_assert_str_eq(ev.name, "");
        /* A bookmark carries only a resourceVersion. */
        ck_assert_int_eq(parse("{\"type\":\"BOOKMARK\",\"object\":{\"metadata\":{\"resourceVersion\":\"99\"}}}", &ev),
                         0);
        ck_assert_str_eq(ev.rv, "99");
}
END_TEST

START_TEST(test_event_refused)
{
        struct gs_watch_event ev;
        char big[512];

        ck_assert_int_eq(parse("{\"object\":{}}", &ev), -EINVAL);        /* no type */
        ck_assert_int_eq(parse("{\"type\":\"\"}", &ev), -EINVAL);        /* empty type */
        ck_assert_int_eq(parse("{\"type\":\"ADDED\"", &ev), -EINVAL);    /* cut short */
        ck_assert_int_eq(parse("[{\"type\":\"ADDED\"}]", &ev), -EINVAL); /* not an object */
        /* A type longer than the field is as good as none. */
        memset(big, 'A', sizeof(big));
        memcpy(big, "{\"type\":\"", 9);
        memcpy(big + sizeof(big) - 3, "\"}", 3);
        ck_assert_int_eq(parse(big, &ev), -EINVAL);
}
END_TEST

START_TEST(test_list_rv)
{
        const char *list = "{\"kind\":\"PodList\",\"apiVersion\":\"v1\",\"metadata\":"
                           "{\"resourceVersion\":\"5678\",\"continue\":\"x\"},\"items\":"
                           "[{\"metadata\":{\"resourceVersion\":\"1\"}}]}";
        char rv[32];

        ck_assert_int_eq(gs_watch_parse_list_rv(list, strlen(list), rv, sizeof(rv)), 0);
        ck_assert_str_eq(rv, "5678"); /* the list's, not an item's */
        ck_assert_int_eq(gs_watch_parse_list_rv("{\"items\":[]}", 12, rv, sizeof(rv)), -EINVAL);
        ck_assert_int_eq(gs_watch_parse_list_rv("not json", 8, rv, sizeof(rv)), -EINVAL);
}
END_TEST

int main(void)
{
        Suite *s = suite_create("watch");
        TCase *t = tcase_create("watch");

        tcase_add_test(t, test_event);
        tcase_add_test(t, test_event_refused);
        tcase_add_test(t, test_list_rv);
        suite_add_tcase(s, t);
        return gs_check_run(s);
}
