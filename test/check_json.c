/* check_json.c — the bounded JSON reader (common/gs_json.h): values found
 * at their paths and only there, every malformed or hostile input refused,
 * truncation reported as absence. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "gs_check.h"
#include "gs_json.h"

static int extract(const char *s, struct gs_json_want *w, size_t n)
{
        return gs_json_extract(s, strlen(s), w, n);
}

START_TEST(test_paths)
{
        char type[16], name[32], rv[16], code[8];
        struct gs_json_want w[] = {
                { "type", type, sizeof(type), false },
                { "object.metadata.name", name, sizeof(name), false },
                { "object.metadata.resourceVersion", rv, sizeof(rv), false },
                { "object.code", code, sizeof(code), false },
        };
        const char *ev = " {\"type\":\"DELETED\",\"object\":{\"kind\":\"Pod\",\"metadata\":"
                         "{\"name\":\"p\\\"1\\n\",\"resourceVersion\":\"42\",\"labels\":{\"name\":\"x\"}},"
                         "\"status\":{\"phase\":\"Running\"},\"spec\":{\"containers\":[{\"name\":\"c\"}]},"
                         "\"code\":410,\"n\":-1.5e3,\"b\":true,\"z\":null}} \n";

        ck_assert_int_eq(extract(ev, w, 4), 0);
        ck_assert(w[0].found && strcmp(type, "DELETED") == 0);
        ck_assert(w[1].found && strcmp(name, "p\"1\n") == 0); /* escapes decoded */
        ck_assert(w[2].found && strcmp(rv, "42") == 0);
        ck_assert(w[3].found && strcmp(code, "410") == 0); /* a number, as text */
}
END_TEST

START_TEST(test_not_found_and_arrays)
{
        char v[16];
        struct gs_json_want w[] = { { "a.b", v, sizeof(v), false } };

        /* A value in an array is never matched, nor the same key elsewhere. */
        ck_assert_int_eq(extract("{\"a\":[{\"b\":\"x\"}],\"b\":\"y\",\"c\":{\"a\":{\"b\":\"z\"}}}", w, 1), 0);
        ck_assert(!w[0].found);
        ck_assert_str_eq(v, "");
        ck_assert_int_eq(extract("{\"a\":{\"b\":\"ok\"}}", w, 1), 0);
        ck_assert(w[0].found);
        ck_assert_str_eq(v, "ok");
        /* Found before, absent now: reset by each call. */
        ck_assert_int_eq(extract("{}", w, 1), 0);
        ck_assert(!w[0].found);
        ck_assert_str_eq(v, "");
}
END_TEST

START_TEST(test_truncated_is_absent)
{
        char v[4];
        struct gs_json_want w[] = { { "k", v, sizeof(v), false } };

        ck_assert_int_eq(extract("{\"k\":\"abc\"}", w, 1), 0);
        ck_assert(w[0].found);
        ck_assert_int_eq(extract("{\"k\":\"abcd\"}", w, 1), 0);
        ck_assert(!w[0].found);
        ck_assert_str_eq(v, "");
        ck_assert_int_eq(extract("{\"k\":12345}", w, 1), 0);
        ck_assert(!w[0].found);
}
END_TEST

START_TEST(test_malformed)
{
        static const char *const bad[] = {
                "",
                "   ",
                "[]",
                "\"s\"",
                "1",
                "{",
                "}",
                "{\"a\"}",
                "{\"a\":}",
                "{\"a\":1,}",
                "{\"a\":1 \"b\":2}",
                "{a:1}",
                "{\"a\":tru}",
                "{\"a\":nul}",
                "{\"a\":1x}",
                "{\"a\":\"\\q\"}",
                "{\"a\":\"\\u12\"}",
                "{\"a\":\"unterminated}",
                "{\"a\":1}{}",
                "{\"a\":1} x",
                "{\"a\":[1,]}",
                "{\"a\":[1 2]}",
                "{\"a\":\"ctl\x01\"}",
        };
        char v[8];
        struct gs_json_want w[] = { { "a", v, sizeof(v), false } };

        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
                ck_assert_msg(extract(bad[i], w, 1) == -EINVAL, "accepted: %s", bad[i]);
}
END_TEST

START_TEST(test_depth_and_length)
{
        char doc[4096], v[8];
        struct gs_json_want w[] = { { "a", v, sizeof(v), false } };
        size_t n = 0;

        /* GS_JSON_MAX_DEPTH nested arrays inside the object: refused. */
        n += (size_t)snprintf(doc + n, sizeof(doc) - n, "{\"a\":");
        for (int i = 0; i < GS_JSON_MAX_DEPTH; i++)
                doc[n++] = '[';
        for (int i = 0; i < GS_JSON_MAX_DEPTH; i++)
                doc[n++] = ']';
        doc[n++] = '}';
        ck_assert_int_eq(gs_json_extract(doc, n, w, 1), -EINVAL);
        /* One level less fits. */
        n = 0;
        n += (size_t)snprintf(doc + n, sizeof(doc) - n, "{\"a\":");
        for (int i = 0; i < GS_JSON_MAX_DEPTH - 2; i++)
                doc[n++] = '[';
        for (int i = 0; i < GS_JSON_MAX_DEPTH - 2; i++)
                doc[n++] = ']';
        doc[n++] = '}';
        ck_assert_int_eq(gs_json_extract(doc, n, w, 1), 0);
        /* The length is what counts, not a NUL: the same text cut short. */
        ck_assert_int_eq(gs_json_extract("{\"a\":\"x\"}", 8, w, 1), -EINVAL);
        /* A NUL inside a string is a control character. */
        ck_assert_int_eq(gs_json_extract("{\"a\":\"x\0\"}", 9, w, 1), -EINVAL);
}
END_TEST

START_TEST(test_write_str)
{
        char *buf = NULL, v[32];
        size_t len = 0;
        FILE *f = open_memstream(&buf, &len);
        struct gs_json_want w[] = { { "k", v, sizeof(v), false } };
        char doc[128];

        ck_assert_ptr_nonnull(f);
        gs_json_write_str(f, "a\"b\\c\n\x01"
                             "d");
        fclose(f);
        ck_assert_str_eq(buf, "\"a\\\"b\\\\c\\u000a\\u0001d\"");
        /* What it writes reads back (control characters as the reader reads \u escapes). */
        snprintf(doc, sizeof(doc), "{\"k\":%s}", buf);
        ck_assert_int_eq(extract(doc, w, 1), 0);
        ck_assert_str_eq(v, "a\"b\\c??d"); /* control characters: \u escapes, read as '?' */
        free(buf);
}
END_TEST

static Suite *suite(void)
{
        Suite *s = suite_create("json");
        TCase *tc = tcase_create("core");

        tcase_add_test(tc, test_paths);
        tcase_add_test(tc, test_not_found_and_arrays);
        tcase_add_test(tc, test_truncated_is_absent);
        tcase_add_test(tc, test_malformed);
        tcase_add_test(tc, test_depth_and_length);
        tcase_add_test(tc, test_write_str);
        suite_add_tcase(s, tc);
        return s;
}

int main(void)
{
        return gs_check_run(suite());
}
