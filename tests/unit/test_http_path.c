/* test_http_path.c — request-target normalisation (vsr_http_normalize_target). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "http/http.h"

/* Normalises `in`; on success the result must equal `want` (and be stable:
 * normalising it again changes nothing). */
static void ok(const char *in, const char *want)
{
    size_t n = strlen(in);
    char *out = malloc(n ? n : 1);
    size_t len = 0;
    const char *why = "unset";
    int rc = vsr_http_normalize_target(vsr_slice(in, n), out, n, &len, NULL, &why);
    if (rc != VSR_OK)
        fail_msg("%s: refused (%s)", in, why ? why : "?");
    if (len != strlen(want) || memcmp(out, want, len) != 0)
        fail_msg("%s: got \"%.*s\", want \"%s\"", in, (int)len, out, want);
    char *again = malloc(len ? len : 1);
    size_t len2 = 0;
    assert_int_equal(vsr_http_normalize_target(vsr_slice(out, len), again, len, &len2, NULL, NULL), VSR_OK);
    assert_int_equal(len2, len);
    assert_memory_equal(again, out, len);
    free(again);
    free(out);
}

static void refused(const char *in)
{
    size_t n = strlen(in);
    char *out = malloc(n ? n : 1);
    size_t len = 0;
    const char *why = NULL;
    int rc = vsr_http_normalize_target(vsr_slice(in, n), out, n, &len, NULL, &why);
    if (rc != VSR_ERR_INVALID)
        fail_msg("%s: accepted as \"%.*s\"", in, (int)len, out);
    assert_non_null(why);
    free(out);
}

/* an encoded separator is data: kept encoded (upper-case), and flagged */
static void declined(const char *in, const char *want)
{
    size_t n = strlen(in);
    char out[256];
    size_t len = 0;
    const char *why = NULL;
    assert_int_equal(vsr_http_normalize_target(vsr_slice(in, n), out, sizeof(out), &len, NULL, &why), VSR_DECLINED);
    assert_non_null(why);
    if (len != strlen(want) || memcmp(out, want, len) != 0)
        fail_msg("%s: got \"%.*s\", want \"%s\"", in, (int)len, out, want);
}

static void test_encoded_separators(void **state)
{
    (void)state;
    declined("/v1%2fchat/completions", "/v1%2Fchat/completions");
    declined("/v1%2Fchat/completions", "/v1%2Fchat/completions");
    declined("/v1%5cchat", "/v1%5Cchat");
    declined("//v1/models/vllm-sr%2Fauto", "/v1/models/vllm-sr%2Fauto");
    declined("/a/%2e%2e/v1/models/x%2F..", "/v1/models/x%2F..");
}

static void test_unchanged(void **state)
{
    (void)state;
    ok("/", "/");
    ok("/v1/chat/completions", "/v1/chat/completions");
    ok("/v1/chat/completions/", "/v1/chat/completions/");
    ok("/v1/models?x=1&y=%2f", "/v1/models?x=1&y=%2f"); /* the query is kept as sent */
    ok("/tokenize", "/tokenize");
    ok("/a;b=c/d:e@f!$&'()*+,=", "/a;b=c/d:e@f!$&'()*+,=");
    ok("*", "*");
}

static void test_percent_decoding(void **state)
{
    (void)state;
    ok("/%76%31/chat/completions", "/v1/chat/completions");
    ok("/%76%31/%63hat/completion%73", "/v1/chat/completions");
    ok("/a%2d%2E%5f%7E", "/a-._~");
    ok("/a%20b", "/a%20b");           /* not unreserved: kept */
    ok("/a%3fb%3Fc", "/a%3Fb%3Fc");   /* upper-case hex */
    ok("/a%25%32%46", "/a%252F");     /* %25 is not decoded, so nothing is decoded twice */
    ok("/caf%c3%a9", "/caf%C3%A9");
}

static void test_slashes_and_dots(void **state)
{
    (void)state;
    ok("//v1/chat/completions", "/v1/chat/completions");
    ok("/v1//chat///completions", "/v1/chat/completions");
    ok("/v1/./chat/completions", "/v1/chat/completions");
    ok("/x/../v1/chat/completions", "/v1/chat/completions");
    ok("/x/%2e%2E/v1/chat/completions", "/v1/chat/completions");
    ok("/x/.%2e/v1/chat/completions", "/v1/chat/completions");
    ok("/v1/chat/completions/.", "/v1/chat/completions/");
    ok("/v1/chat/x/..", "/v1/chat/");
    ok("/a/b/../../c?q=/../", "/c?q=/../");
    ok("/...", "/...");
    ok("/.a/..b/a.", "/.a/..b/a.");
    ok("//", "/");
    ok("/.", "/");
    ok("/a/..", "/");
}

static void test_absolute_form(void **state)
{
    (void)state;
    ok("http://example.com/v1/chat/completions", "/v1/chat/completions");
    ok("HTTPS://example.com:8443//%76%31/models?x", "/v1/models?x");
    ok("http://h", "/");
    ok("http://h?x=1", "/?x=1");
    ok("http://[::1]:80/a", "/a");

    const char *t = "http://backend.internal:9000/v1/models";
    char out[64];
    size_t len = 0;
    vsr_slice_t auth;
    assert_int_equal(vsr_http_normalize_target(vsr_slice_cstr(t), out, sizeof(out), &len, &auth, NULL), VSR_OK);
    assert_true(vsr_slice_eq_cstr(auth, "backend.internal:9000"));
    assert_true(vsr_slice_eq_cstr(vsr_slice(out, len), "/v1/models"));
    assert_int_equal(vsr_http_normalize_target(VSR_SLICE_LIT("/v1/models"), out, sizeof(out), &len, &auth, NULL),
                     VSR_OK);
    assert_null(auth.p);
}

static void test_refused(void **state)
{
    (void)state;
    refused("");
    refused("/v1/chat%00/completions");
    refused("/v1\\chat");
    refused("/..");
    refused("/../v1/chat/completions");
    refused("/a/../../v1");
    refused("/%2e%2e/v1");
    refused("/a%");
    refused("/a%2");
    refused("/a%zz");
    refused("/a%2g");
    refused("/a#frag");
    refused("/a?b#frag");
    refused("/a b");
    refused("/a\x01");
    refused("/a?\x7f");
    refused("v1/chat");
    refused("ftp://h/a");
    refused("http://");
    refused("http:///a");
    refused("http://user@h/a");
    refused("http://h\"/a");
    refused("**");
}

static void test_buffer_too_small(void **state)
{
    (void)state;
    char out[4];
    size_t len = 0;
    assert_int_equal(vsr_http_normalize_target(VSR_SLICE_LIT("/abcde"), out, sizeof(out), &len, NULL, NULL),
                     VSR_ERR_TOO_BIG);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_unchanged),
        cmocka_unit_test(test_percent_decoding),
        cmocka_unit_test(test_slashes_and_dots),
        cmocka_unit_test(test_absolute_form),
        cmocka_unit_test(test_refused),
        cmocka_unit_test(test_encoded_separators),
        cmocka_unit_test(test_buffer_too_small),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
