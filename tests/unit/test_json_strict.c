/* test_json_strict.c — duplicate member names and client text quoted in messages. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "json/json.h"

/* 1 and the duplicate's unescaped name in `name`, or 0 */
static int dup_of(const char *doc, size_t len, char *name, size_t cap)
{
    vsr_json_t j;
    assert_int_equal(vsr_json_parse(&j, doc, len, NULL), VSR_OK);
    uint32_t k = 0;
    int found = vsr_json_find_duplicate_key(&j, &k);
    if (found) {
        assert_int_equal(vsr_json_type(&j, k), VSR_JSON_STRING);
        vsr_pool_t pool;
        vsr_pool_init(&pool);
        vsr_slice_t s;
        vsr_json_string(&j, k, &pool, &s);
        snprintf(name, cap, "%.*s", (int)s.len, s.p);
        vsr_pool_free(&pool);
    }
    vsr_json_free(&j);
    return found;
}

static int dup(const char *doc, char *name)
{
    return dup_of(doc, strlen(doc), name, 64);
}

static void test_unique_keys_pass(void **state)
{
    (void)state;
    char n[64];
    assert_false(dup("{}", n));
    assert_false(dup("[]", n));
    assert_false(dup("\"model\"", n));
    assert_false(dup("{\"model\":\"a\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"},{\"role\":\"user\"}]}", n));
    assert_false(dup("{\"a\":{\"a\":{\"a\":1}},\"b\":[{\"a\":1},{\"a\":2}]}", n)); /* same name, other objects */
    assert_false(dup("{\"model\":1,\"Model\":2,\"model \":3,\"mode\":4}", n));
    assert_false(dup("{\"a\":1,\"b\":2,\"c\":3,\"d\":4,\"e\":5,\"f\":6,\"g\":7,\"h\":8,\"i\":9,\"j\":10,\"\":11}", n));
    assert_false(dup("[\"model\",\"model\"]", n)); /* array elements are no names */
    assert_false(dup("{\"k\":\"model\",\"model\":\"k\"}", n));
}

static void test_duplicates_found(void **state)
{
    (void)state;
    char n[64];
    assert_true(dup("{\"model\":\"a\",\"model\":\"b\"}", n));
    assert_string_equal(n, "model");
    assert_true(dup("{\"model\":\"a\",\"messages\":[{\"role\":\"user\",\"content\":\"x\",\"content\":\"y\"}]}", n));
    assert_string_equal(n, "content");
    /* escapes are compared unescaped */
    assert_true(dup("{\"mod\\u0065l\":\"a\",\"model\":\"b\"}", n));
    assert_string_equal(n, "model");
    assert_true(dup("{\"a\\/b\":1,\"a/b\":2}", n));
    assert_string_equal(n, "a/b");
    /* large objects take the sorted path */
    assert_true(dup("{\"a\":1,\"b\":2,\"c\":3,\"d\":4,\"e\":5,\"f\":6,\"g\":7,\"h\":8,\"i\":9,\"j\":10,\"c\":11}", n));
    assert_string_equal(n, "c");
    assert_true(dup("{\"z\":1,\"y\":2,\"x\":3,\"w\":4,\"v\":5,\"u\":6,\"t\":7,\"s\":8,\"r\":9,\"q\":10,"
                    "\"p\":{\"q\":1,\"q\":2}}", n));
    assert_string_equal(n, "q");
    assert_true(dup("{\"\":1,\"\":2}", n));
    assert_string_equal(n, "");
    /* a NUL in a name is part of it */
    char doc[] = "{\"a\\u0000b\":1,\"a\\u0000c\":2,\"a\\u0000b\":3}";
    assert_true(dup_of(doc, strlen(doc), n, sizeof(n)));
}

static void test_many_members(void **state)
{
    (void)state;
    /* 20,000 distinct names, then one repeated at the end */
    vsr_buf_t b;
    vsr_buf_init(&b, 0);
    vsr_buf_append_cstr(&b, "{");
    for (int i = 0; i < 20000; i++)
        vsr_buf_printf(&b, "%s\"k%d\":%d", i ? "," : "", i, i);
    char n[64];
    vsr_buf_append_cstr(&b, "}");
    assert_false(dup_of(b.data, b.len, n, sizeof(n)));
    b.len--;
    vsr_buf_append_cstr(&b, ",\"k12345\":0}");
    assert_true(dup_of(b.data, b.len, n, sizeof(n)));
    assert_string_equal(n, "k12345");
    vsr_buf_free(&b);
}

static char *clean(const char *s, size_t len, size_t max, size_t *out_len)
{
    vsr_buf_t b;
    vsr_buf_init(&b, 0);
    assert_int_equal(vsr_json_append_client_text(&b, vsr_slice(s, len), max), VSR_OK);
    *out_len = b.len;
    char *r = malloc(b.len + 1);
    memcpy(r, b.data ? b.data : "", b.len);
    r[b.len] = 0;
    vsr_buf_free(&b);
    return r;
}

static void expect_clean(const char *in, size_t len, size_t max, const char *want, size_t want_len)
{
    size_t n;
    char *got = clean(in, len, max, &n);
    assert_int_equal(n, want_len);
    assert_memory_equal(got, want, n);
    free(got);
}

#define EXPECT(in, max, want) expect_clean(in, sizeof(in) - 1, max, want, sizeof(want) - 1)

static void test_client_text(void **state)
{
    (void)state;
    EXPECT("gpt-4o", 200, "gpt-4o");
    EXPECT("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80", 200, "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80");
    EXPECT("a\xff" "b", 200, "a\xef\xbf\xbd" "b");
    EXPECT("a\xc3", 200, "a\xef\xbf\xbd");                    /* truncated sequence */
    EXPECT("\xc0\xaf", 200, "\xef\xbf\xbd\xef\xbf\xbd");      /* overlong */
    EXPECT("\xed\xa0\x80", 200, "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"); /* a surrogate */
    EXPECT("\xf4\x90\x80\x80", 200, "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"); /* past U+10FFFF */
    EXPECT("x\0y", 200, "x\0y");                              /* NUL kept for the writer to escape */
    EXPECT("abcdef", 4, "abcd...");
    EXPECT("abc\xc3\xa9", 4, "abc...");                       /* never cut inside a character */
    EXPECT("abc\xff", 4, "abc...");
    EXPECT("abcd", 4, "abcd");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_unique_keys_pass),
        cmocka_unit_test(test_duplicates_found),
        cmocka_unit_test(test_many_members),
        cmocka_unit_test(test_client_text),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
