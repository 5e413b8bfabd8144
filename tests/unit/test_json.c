/* test_json.c — strict parsing, token layout, lookup and string decoding. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <cmocka.h>

#include <math.h>

#include "json/json.h"

/* ---- helpers ------------------------------------------------------------ */

static int parse_str(vsr_json_t *j, const char *s)
{
    return vsr_json_parse(j, s, strlen(s), NULL);
}

/* Expected token layout in a compact form, one word per token:
 *   o<count>/<next>  object      a<count>/<next>  array
 *   s string  e escaped string  n number  t true  f false  z null
 * Scalars implicitly have count 0 and next = index + 1. */
static void check_layout(const vsr_json_t *j, const char *doc, const char *layout)
{
    const char *p = layout;
    uint32_t i = 0;
    while (*p) {
        while (*p == ' ')
            p++;
        if (!*p)
            break;
        if (i >= j->ntoks)
            fail_msg("doc %s: fewer tokens (%u) than layout '%s'", doc, j->ntoks, layout);
        const vsr_json_tok_t *t = &j->toks[i];
        char c = *p++;
        uint32_t count = 0, next = i + 1;
        if (c == 'o' || c == 'a') {
            char *e;
            count = (uint32_t)strtoul(p, &e, 10);
            if (*e != '/')
                fail_msg("bad layout '%s'", layout);
            next = (uint32_t)strtoul(e + 1, &e, 10);
            p = e;
        }
        vsr_json_type_t want;
        uint8_t esc = 0;
        switch (c) {
        case 'o': want = VSR_JSON_OBJECT; break;
        case 'a': want = VSR_JSON_ARRAY; break;
        case 's': want = VSR_JSON_STRING; break;
        case 'e': want = VSR_JSON_STRING; esc = 1; break;
        case 'n': want = VSR_JSON_NUMBER; break;
        case 't': want = VSR_JSON_TRUE; break;
        case 'f': want = VSR_JSON_FALSE; break;
        case 'z': want = VSR_JSON_NULL; break;
        default: fail_msg("bad layout char '%c'", c); return;
        }
        if (t->type != want || t->count != count || t->next != next || t->escaped != esc)
            fail_msg("doc %s tok %u: type %u count %u next %u esc %u, want %u %u %u %u", doc, i,
                     t->type, t->count, t->next, t->escaped, want, count, next, esc);
        /* The span must cover exactly the token's text. */
        assert_true(t->start < t->end && t->end <= j->len);
        char first = j->src[t->start], last = j->src[t->end - 1];
        switch (want) {
        case VSR_JSON_OBJECT: assert_int_equal(first, '{'); assert_int_equal(last, '}'); break;
        case VSR_JSON_ARRAY: assert_int_equal(first, '['); assert_int_equal(last, ']'); break;
        case VSR_JSON_STRING: assert_int_equal(first, '"'); assert_int_equal(last, '"'); break;
        case VSR_JSON_NUMBER: assert_true(first == '-' || (first >= '0' && first <= '9'));
                              assert_true(last >= '0' && last <= '9'); break;
        case VSR_JSON_TRUE: assert_memory_equal(j->src + t->start, "true", 4); break;
        case VSR_JSON_FALSE: assert_memory_equal(j->src + t->start, "false", 5); break;
        case VSR_JSON_NULL: assert_memory_equal(j->src + t->start, "null", 4); break;
        }
        i++;
    }
    if (i != j->ntoks)
        fail_msg("doc %s: %u tokens, layout '%s' has %u", doc, j->ntoks, layout, i);
}

/* ---- valid documents ------------------------------------------------------ */

static const struct {
    const char *doc;
    size_t len; /* 0: strlen */
    const char *layout;
} valid_docs[] = {
    {"0", 0, "n"},
    {"-0", 0, "n"},
    {"-1.5e+10", 0, "n"},
    {"1E-2", 0, "n"},
    {"0.0", 0, "n"},
    {"1e5", 0, "n"},
    {"123456789012345678901234567890", 0, "n"},
    {"true", 0, "t"},
    {"false", 0, "f"},
    {"null", 0, "z"},
    {"\"\"", 0, "s"},
    {" \t\r\n{}\n ", 0, "o0/1"},
    {"[]", 0, "a0/1"},
    {"[ ]", 0, "a0/1"},
    {"[1,2,3]", 0, "a3/4 n n n"},
    {"{\"a\":1}", 0, "o1/3 s n"},
    {"{ \"a\" : 1 , \"b\" :2 }", 0, "o2/5 s n s n"},
    {"{\"a\":[1,{\"b\":null}],\"c\":\"d\"}", 0, "o2/9 s a2/7 n o1/7 s z s s"},
    {"[[[]]]", 0, "a1/3 a1/3 a0/3"},
    {"[{},[],\"\",0,true,false,null]", 0, "a7/8 o0/2 a0/3 s n t f z"},
    {"{\"\":\"\"}", 0, "o1/3 s s"},
    {"[[1,[2]],3]", 0, "a2/6 a2/5 n a1/5 n n"},
    {"{\"a\":{},\"b\":[]}", 0, "o2/5 s o0/3 s a0/5"},
    {"\"\\\"\\\\\\/\\b\\f\\n\\r\\t\\u00e9\\uD83D\\uDE00\"", 0, "e"},
    {"{\"k\\n\":\"v\"}", 0, "o1/3 e s"},
    {"\"h\xc3\xa9llo\"", 0, "s"},
    {"\"\xff\xfe\xc3(\"", 0, "s"},     /* invalid UTF-8 is kept */
    {"\"\x7f\"", 0, "s"},              /* DEL is not a control byte for JSON */
    {"\"a\\u0000b\"", 0, "e"},
    {"[\"x\", -0.5e-3, {\"y\": [true]}]", 0, "a3/7 s n o1/7 s a1/7 t"},
    {"\"0123456789abcdef0123456789abcdef\\\"0123456789abcdef\"", 0, "e"},
};

static void test_valid_documents(void **state)
{
    VSR_UNUSED(state);
    for (size_t i = 0; i < VSR_ARRAY_LEN(valid_docs); i++) {
        vsr_json_t j;
        const char *doc = valid_docs[i].doc;
        size_t len = valid_docs[i].len ? valid_docs[i].len : strlen(doc);
        int rc = vsr_json_parse(&j, doc, len, NULL);
        if (rc != VSR_OK)
            fail_msg("valid doc #%zu '%s' rejected: %d at %zu (%s)", i, doc, rc, j.err_offset,
                     j.err_msg);
        check_layout(&j, doc, valid_docs[i].layout);
        vsr_json_free(&j);
    }
}

static void test_spans(void **state)
{
    VSR_UNUSED(state);
    const char *doc = " {\"a\" : [ 10 , \"x\\ny\" ] , \"b\":null } ";
    vsr_json_t j;
    assert_int_equal(parse_str(&j, doc), VSR_OK);
    assert_int_equal(j.ntoks, 7);
    static const char *raw[] = {
        "{\"a\" : [ 10 , \"x\\ny\" ] , \"b\":null }", "\"a\"", "[ 10 , \"x\\ny\" ]", "10",
        "\"x\\ny\"", "\"b\"", "null",
    };
    for (uint32_t i = 0; i < j.ntoks; i++) {
        vsr_slice_t r = vsr_json_raw(&j, i);
        assert_true(vsr_slice_eq_cstr(r, raw[i]));
    }
    assert_int_equal(j.toks[0].start, 1);
    assert_int_equal(j.toks[0].end, strlen(doc) - 1);
    vsr_json_free(&j);
}

/* ---- invalid documents ---------------------------------------------------- */

static const struct {
    const char *doc;
    size_t len; /* 0: strlen */
    int code;
    size_t off;
} invalid_docs[] = {
    {"", 0, VSR_ERR_INVALID, 0},
    {"   ", 0, VSR_ERR_INVALID, 3},
    {"[1,]", 0, VSR_ERR_INVALID, 3},
    {"{\"a\":1,}", 0, VSR_ERR_INVALID, 7},
    {"[1,,2]", 0, VSR_ERR_INVALID, 3},
    {"[,1]", 0, VSR_ERR_INVALID, 1},
    {"{,}", 0, VSR_ERR_INVALID, 1},
    {"// c\n1", 0, VSR_ERR_INVALID, 0},
    {"/* c */ 1", 0, VSR_ERR_INVALID, 0},
    {"[1 /* c */]", 0, VSR_ERR_INVALID, 3},
    {"'a'", 0, VSR_ERR_INVALID, 0},
    {"{'a':1}", 0, VSR_ERR_INVALID, 1},
    {"01", 0, VSR_ERR_INVALID, 1},
    {"-01", 0, VSR_ERR_INVALID, 2},
    {"[00]", 0, VSR_ERR_INVALID, 2},
    {"-", 0, VSR_ERR_INVALID, 1},
    {"[-]", 0, VSR_ERR_INVALID, 2},
    {"1.", 0, VSR_ERR_INVALID, 2},
    {"1.e5", 0, VSR_ERR_INVALID, 2},
    {".5", 0, VSR_ERR_INVALID, 0},
    {"1e", 0, VSR_ERR_INVALID, 2},
    {"1e+", 0, VSR_ERR_INVALID, 3},
    {"1e5.0", 0, VSR_ERR_INVALID, 3},
    {"+1", 0, VSR_ERR_INVALID, 0},
    {"0x10", 0, VSR_ERR_INVALID, 1},
    {"NaN", 0, VSR_ERR_INVALID, 0},
    {"Infinity", 0, VSR_ERR_INVALID, 0},
    {"-Infinity", 0, VSR_ERR_INVALID, 1},
    {"[nan]", 0, VSR_ERR_INVALID, 1},
    {"\"a\x01" "b\"", 0, VSR_ERR_INVALID, 2},
    {"\"\t\"", 0, VSR_ERR_INVALID, 1},
    {"\"a\nb\"", 0, VSR_ERR_INVALID, 2},
    {"\"0123456789abcdef0123\x1f\"", 0, VSR_ERR_INVALID, 21}, /* past the first SIMD block */
    {"\"a\0b\"", 5, VSR_ERR_INVALID, 2},
    {"\"\\x\"", 0, VSR_ERR_INVALID, 1},
    {"\"\\a\"", 0, VSR_ERR_INVALID, 1},
    {"\"\\'\"", 0, VSR_ERR_INVALID, 1},
    {"\"\\u12G4\"", 0, VSR_ERR_INVALID, 1},
    {"\"\\uG123\"", 0, VSR_ERR_INVALID, 1},
    {"\"\\u123G\"", 0, VSR_ERR_INVALID, 1},
    {"\"\\u123\"", 0, VSR_ERR_INVALID, 1},
    {"\"\\u12\"", 0, VSR_ERR_INVALID, 6},
    {"\"\\u 123\"", 0, VSR_ERR_INVALID, 1},
    {"\"\\U0041\"", 0, VSR_ERR_INVALID, 1},
    {"\"abc", 0, VSR_ERR_INVALID, 4},
    {"\"abc\\", 0, VSR_ERR_INVALID, 5},
    {"\"\\\"", 0, VSR_ERR_INVALID, 3},
    {"\"0123456789abcdef0123456789", 0, VSR_ERR_INVALID, 27},
    {"[1,2", 0, VSR_ERR_INVALID, 4},
    {"[1,2,", 0, VSR_ERR_INVALID, 5},
    {"[", 0, VSR_ERR_INVALID, 1},
    {"{", 0, VSR_ERR_INVALID, 1},
    {"{\"a\":1", 0, VSR_ERR_INVALID, 6},
    {"{\"a\"", 0, VSR_ERR_INVALID, 4},
    {"{\"a\":", 0, VSR_ERR_INVALID, 5},
    {"]", 0, VSR_ERR_INVALID, 0},
    {"}", 0, VSR_ERR_INVALID, 0},
    {"[1 2]", 0, VSR_ERR_INVALID, 3},
    {"{\"a\" 1}", 0, VSR_ERR_INVALID, 5},
    {"{\"a\":1 \"b\":2}", 0, VSR_ERR_INVALID, 7},
    {"{1:2}", 0, VSR_ERR_INVALID, 1},
    {"{\"a\":}", 0, VSR_ERR_INVALID, 5},
    {"[}", 0, VSR_ERR_INVALID, 1},
    {"{]", 0, VSR_ERR_INVALID, 1},
    {"[1}", 0, VSR_ERR_INVALID, 2},
    {"{\"a\":1]", 0, VSR_ERR_INVALID, 6},
    {"1 2", 0, VSR_ERR_INVALID, 2},
    {"{}x", 0, VSR_ERR_INVALID, 2},
    {"[]]", 0, VSR_ERR_INVALID, 2},
    {"{}{}", 0, VSR_ERR_INVALID, 2},
    {"\"a\"\"b\"", 0, VSR_ERR_INVALID, 3},
    {"tru", 0, VSR_ERR_INVALID, 0},
    {"nul", 0, VSR_ERR_INVALID, 0},
    {"fals", 0, VSR_ERR_INVALID, 0},
    {"truex", 0, VSR_ERR_INVALID, 4},
    {"True", 0, VSR_ERR_INVALID, 0},
    {"[nulL]", 0, VSR_ERR_INVALID, 1},
    {"\"a\"\0", 4, VSR_ERR_INVALID, 3},
    {"\f1", 0, VSR_ERR_INVALID, 0},           /* form feed is not JSON whitespace */
    {"1\v", 0, VSR_ERR_INVALID, 1},
    {"\xc2\xa0" "1", 0, VSR_ERR_INVALID, 0},  /* NBSP */
    {"\xef\xbb\xbf{}", 0, VSR_ERR_INVALID, 0}, /* BOM, rejected as Go does */
    {"{\"a\":1,\"b\"}", 0, VSR_ERR_INVALID, 10},
};

static void test_invalid_documents(void **state)
{
    VSR_UNUSED(state);
    for (size_t i = 0; i < VSR_ARRAY_LEN(invalid_docs); i++) {
        vsr_json_t j;
        const char *doc = invalid_docs[i].doc;
        size_t len = invalid_docs[i].len ? invalid_docs[i].len : strlen(doc);
        int rc = vsr_json_parse(&j, doc, len, NULL);
        if (rc != invalid_docs[i].code)
            fail_msg("invalid doc #%zu '%s': rc %d, want %d", i, doc, rc, invalid_docs[i].code);
        if (j.err_offset != invalid_docs[i].off)
            fail_msg("invalid doc #%zu '%s': err_offset %zu (%s), want %zu", i, doc, j.err_offset,
                     j.err_msg, invalid_docs[i].off);
        assert_non_null(j.err_msg);
        assert_int_equal(j.ntoks, 0);
        vsr_json_free(&j);
        vsr_json_free(&j); /* twice is harmless */
    }
}

/* The same garbage placed deep inside a long document must be reported
 * where it is, not where the enclosing value started. */
static void test_error_offset_deep(void **state)
{
    VSR_UNUSED(state);
    size_t pad = 100000;
    size_t n = pad + 64;
    char *doc = malloc(n);
    size_t w = 0;
    w += (size_t)sprintf(doc + w, "{\"prompt\":\"");
    memset(doc + w, 'p', pad);
    w += pad;
    size_t bad = w;
    doc[w++] = '\x02';
    w += (size_t)sprintf(doc + w, "\"}");
    vsr_json_t j;
    assert_int_equal(vsr_json_parse(&j, doc, w, NULL), VSR_ERR_INVALID);
    assert_int_equal(j.err_offset, bad);
    vsr_json_free(&j);

    doc[bad] = 'q';
    assert_int_equal(vsr_json_parse(&j, doc, w, NULL), VSR_OK);
    vsr_json_free(&j);
    free(doc);
}

/* ---- limits --------------------------------------------------------------- */

static char *nested_arrays(size_t depth, size_t *len)
{
    char *s = malloc(2 * depth + 1);
    memset(s, '[', depth);
    memset(s + depth, ']', depth);
    s[2 * depth] = '\0';
    *len = 2 * depth;
    return s;
}

static void test_depth_limit(void **state)
{
    VSR_UNUSED(state);
    vsr_json_t j;
    size_t len;
    char *ok = nested_arrays(512, &len);
    assert_int_equal(vsr_json_parse(&j, ok, len, NULL), VSR_OK);
    assert_int_equal(j.ntoks, 512);
    assert_int_equal(j.toks[0].next, 512);
    assert_int_equal(j.toks[511].count, 0);
    assert_int_equal(j.toks[510].count, 1);
    assert_int_equal(j.toks[511].start, 511);
    assert_int_equal(j.toks[511].end, 513);
    vsr_json_free(&j);
    free(ok);

    char *deep = nested_arrays(513, &len);
    assert_int_equal(vsr_json_parse(&j, deep, len, NULL), VSR_ERR_TOO_BIG);
    assert_int_equal(j.err_offset, 512);
    vsr_json_free(&j);
    free(deep);

    /* Far beyond the limit: refused without recursion or huge memory. */
    char *hostile = nested_arrays(1000000, &len);
    assert_int_equal(vsr_json_parse(&j, hostile, len, NULL), VSR_ERR_TOO_BIG);
    vsr_json_free(&j);
    vsr_json_limits_t big = {.max_depth = 1000000};
    assert_int_equal(vsr_json_parse(&j, hostile, len, &big), VSR_OK);
    assert_int_equal(j.ntoks, 1000000);
    assert_int_equal(j.toks[999999].end, 1000001);
    vsr_json_free(&j);
    free(hostile);

    /* Objects count towards depth too; a zero max_depth means the default. */
    vsr_json_limits_t lim = {.max_depth = 2};
    const char *d2 = "{\"a\":[1]}";
    const char *d3 = "{\"a\":[{}]}";
    assert_int_equal(vsr_json_parse(&j, d2, strlen(d2), &lim), VSR_OK);
    vsr_json_free(&j);
    assert_int_equal(vsr_json_parse(&j, d3, strlen(d3), &lim), VSR_ERR_TOO_BIG);
    assert_int_equal(j.err_offset, 6);
    vsr_json_free(&j);
    vsr_json_limits_t zero = {0};
    assert_int_equal(vsr_json_parse(&j, d3, strlen(d3), &zero), VSR_OK);
    vsr_json_free(&j);
}

static void test_token_limit(void **state)
{
    VSR_UNUSED(state);
    vsr_json_t j;
    vsr_json_limits_t lim = {.max_tokens = 3};
    assert_int_equal(vsr_json_parse(&j, "[1,2]", 5, &lim), VSR_OK);
    assert_int_equal(j.ntoks, 3);
    vsr_json_free(&j);
    assert_int_equal(vsr_json_parse(&j, "[1,2,3]", 7, &lim), VSR_ERR_TOO_BIG);
    assert_int_equal(j.err_offset, 5);
    vsr_json_free(&j);
    /* A malformed document within the limit is still INVALID. */
    assert_int_equal(vsr_json_parse(&j, "[1,]", 4, &lim), VSR_ERR_INVALID);
    vsr_json_free(&j);
}

static void test_too_large_input(void **state)
{
    VSR_UNUSED(state);
#if SIZE_MAX > UINT32_MAX
    /* Refused up front from the length alone (offsets are 32-bit). */
    vsr_json_t j;
    assert_int_equal(vsr_json_parse(&j, "{}", (size_t)1 << 32, NULL), VSR_ERR_TOO_BIG);
    assert_non_null(j.err_msg);
    vsr_json_free(&j);
#endif
}

static void test_free_safety(void **state)
{
    VSR_UNUSED(state);
    vsr_json_t j;
    memset(&j, 0, sizeof(j));
    vsr_json_free(&j);
    assert_int_equal(parse_str(&j, "[1,2,3]"), VSR_OK);
    vsr_json_free(&j);
    assert_null(j.toks);
    assert_int_equal(j.ntoks, 0);
    vsr_json_free(&j);
    assert_int_equal(parse_str(&j, "[1,2,"), VSR_ERR_INVALID);
    vsr_json_free(&j);
    vsr_json_free(&j);
}

/* ---- object lookup -------------------------------------------------------- */

static void expect_str(const vsr_json_t *j, uint32_t t, const char *want)
{
    vsr_pool_t pool;
    vsr_pool_init(&pool);
    vsr_slice_t s;
    assert_int_equal(vsr_json_string(j, t, &pool, &s), VSR_OK);
    if (!vsr_slice_eq_cstr(s, want))
        fail_msg("string token %u = '%.*s', want '%s'", t, (int)s.len, s.p, want);
    vsr_pool_free(&pool);
}

static void test_object_get(void **state)
{
    VSR_UNUSED(state);
    vsr_json_t j;
    uint32_t v;
    const char *doc =
        "{\"messages\":[{\"role\":\"user\",\"model\":\"nested\"}],"
        "\"opts\":{\"model\":\"deeper\",\"x\":[1,2,{\"model\":3}]},"
        "\"stream\":true,\"max_tokens\":100,\"mode\":\"m\",\"modelx\":\"mx\"}";
    assert_int_equal(parse_str(&j, doc), VSR_OK);

    /* A nested "model" is not a top-level member. */
    assert_int_equal(vsr_json_object_get(&j, 0, "model", &v), VSR_ERR_NOT_FOUND);
    assert_int_equal(vsr_json_object_get(&j, 0, "stream", &v), VSR_OK);
    assert_int_equal(vsr_json_bool(&j, v), 1);
    assert_int_equal(vsr_json_object_get(&j, 0, "max_tokens", &v), VSR_OK);
    double d;
    assert_int_equal(vsr_json_number(&j, v, &d), VSR_OK);
    assert_true(d == 100.0);
    assert_int_equal(vsr_json_object_get(&j, 0, "mode", &v), VSR_OK);
    expect_str(&j, v, "m");
    assert_int_equal(vsr_json_object_get(&j, 0, "modelx", &v), VSR_OK);
    expect_str(&j, v, "mx");
    assert_int_equal(vsr_json_object_get(&j, 0, "", &v), VSR_ERR_NOT_FOUND);

    uint32_t msgs, opts, m0;
    assert_int_equal(vsr_json_object_get(&j, 0, "messages", &msgs), VSR_OK);
    assert_int_equal(vsr_json_type(&j, msgs), VSR_JSON_ARRAY);
    assert_int_equal(j.toks[msgs].count, 1);
    m0 = msgs + 1;
    assert_int_equal(vsr_json_object_get(&j, m0, "model", &v), VSR_OK);
    expect_str(&j, v, "nested");
    assert_int_equal(vsr_json_object_get(&j, m0, "role", &v), VSR_OK);
    expect_str(&j, v, "user");

    assert_int_equal(vsr_json_object_get(&j, 0, "opts", &opts), VSR_OK);
    assert_int_equal(vsr_json_object_get(&j, opts, "model", &v), VSR_OK);
    expect_str(&j, v, "deeper");
    assert_int_equal(vsr_json_object_get(&j, opts, "stream", &v), VSR_ERR_NOT_FOUND);

    /* Not an object (array, string, out of range): not found. */
    assert_int_equal(vsr_json_object_get(&j, msgs, "model", &v), VSR_ERR_NOT_FOUND);
    assert_int_equal(vsr_json_object_get(&j, 1, "model", &v), VSR_ERR_NOT_FOUND);
    assert_int_equal(vsr_json_object_get(&j, j.ntoks, "model", &v), VSR_ERR_NOT_FOUND);
    vsr_json_free(&j);

    assert_int_equal(parse_str(&j, "{}"), VSR_OK);
    assert_int_equal(vsr_json_object_get(&j, 0, "a", &v), VSR_ERR_NOT_FOUND);
    vsr_json_free(&j);
}

static void test_object_get_escaped_and_duplicates(void **state)
{
    VSR_UNUSED(state);
    vsr_json_t j;
    uint32_t v;
    const char *doc = "{\"model\":\"first\",\"a\":{\"model\":\"inner\"},\"mod\\u0065l\":\"second\","
                      "\"q\\\"uote\":1,\"caf\\u00e9\":2,\"\\ud83d\\ude00\":3,\"tab\\t\":4,"
                      "\"sl\\/ash\":5,\"dup\":6,\"dup\":7,\"modeL\":8}";
    assert_int_equal(parse_str(&j, doc), VSR_OK);

    /* Escaped spelling matches, and as the last duplicate it wins. */
    assert_int_equal(vsr_json_object_get(&j, 0, "model", &v), VSR_OK);
    expect_str(&j, v, "second");
    assert_int_equal(vsr_json_object_get(&j, 0, "mod\\u0065l", &v), VSR_ERR_NOT_FOUND);

    double d;
    assert_int_equal(vsr_json_object_get(&j, 0, "q\"uote", &v), VSR_OK);
    assert_int_equal(vsr_json_number(&j, v, &d), VSR_OK);
    assert_true(d == 1.0);
    assert_int_equal(vsr_json_object_get(&j, 0, "caf\xc3\xa9", &v), VSR_OK);
    assert_int_equal(vsr_json_number(&j, v, &d), VSR_OK);
    assert_true(d == 2.0);
    assert_int_equal(vsr_json_object_get(&j, 0, "\xf0\x9f\x98\x80", &v), VSR_OK);
    assert_int_equal(vsr_json_number(&j, v, &d), VSR_OK);
    assert_true(d == 3.0);
    assert_int_equal(vsr_json_object_get(&j, 0, "tab\t", &v), VSR_OK);
    assert_int_equal(vsr_json_number(&j, v, &d), VSR_OK);
    assert_true(d == 4.0);
    assert_int_equal(vsr_json_object_get(&j, 0, "sl/ash", &v), VSR_OK);
    assert_int_equal(vsr_json_number(&j, v, &d), VSR_OK);
    assert_true(d == 5.0);
    assert_int_equal(vsr_json_object_get(&j, 0, "dup", &v), VSR_OK);
    assert_int_equal(vsr_json_number(&j, v, &d), VSR_OK);
    assert_true(d == 7.0);
    /* Keys compare byte-exactly (case matters), prefixes do not match. */
    assert_int_equal(vsr_json_object_get(&j, 0, "modeL", &v), VSR_OK);
    assert_int_equal(vsr_json_number(&j, v, &d), VSR_OK);
    assert_true(d == 8.0);
    assert_int_equal(vsr_json_object_get(&j, 0, "caf", &v), VSR_ERR_NOT_FOUND);
    assert_int_equal(vsr_json_object_get(&j, 0, "caf\xc3\xa9!", &v), VSR_ERR_NOT_FOUND);
    assert_int_equal(vsr_json_object_get(&j, 0, "q", &v), VSR_ERR_NOT_FOUND);
    vsr_json_free(&j);
}

static void test_iteration(void **state)
{
    VSR_UNUSED(state);
    vsr_json_t j;
    const char *doc = "[{\"a\":[1,2]},\"s\",[[],[3]],null,{\"b\":{\"c\":{}}}]";
    assert_int_equal(parse_str(&j, doc), VSR_OK);
    static const vsr_json_type_t want[] = {VSR_JSON_OBJECT, VSR_JSON_STRING, VSR_JSON_ARRAY,
                                           VSR_JSON_NULL, VSR_JSON_OBJECT};
    assert_int_equal(j.toks[0].count, 5);
    uint32_t c = 1;
    for (uint32_t i = 0; i < j.toks[0].count; i++) {
        assert_int_equal(vsr_json_type(&j, c), want[i]);
        c = j.toks[c].next;
    }
    assert_int_equal(c, j.toks[0].next);
    assert_int_equal(c, j.ntoks);
    vsr_json_free(&j);
}

/* ---- strings -------------------------------------------------------------- */

static void test_string_zero_copy(void **state)
{
    VSR_UNUSED(state);
    vsr_json_t j;
    vsr_pool_t pool;
    vsr_pool_init(&pool);
    const char *doc = "[\"plain text\",\"\"]";
    assert_int_equal(parse_str(&j, doc), VSR_OK);
    vsr_slice_t s;
    assert_int_equal(vsr_json_string(&j, 1, &pool, &s), VSR_OK);
    assert_ptr_equal(s.p, doc + 2);
    assert_int_equal(s.len, 10);
    assert_int_equal(vsr_json_string(&j, 2, &pool, &s), VSR_OK);
    assert_int_equal(s.len, 0);
    /* Not a string. */
    assert_int_equal(vsr_json_string(&j, 0, &pool, &s), VSR_ERR_INVALID);
    assert_int_equal(vsr_json_string(&j, 99, &pool, &s), VSR_ERR_INVALID);
    vsr_json_free(&j);
    vsr_pool_free(&pool);
}

static const struct {
    const char *json; /* a JSON string literal */
    size_t json_len;  /* 0: strlen */
    const char *want;
    size_t want_len; /* 0: strlen */
} string_cases[] = {
    {"\"\\\"\\\\\\/\\b\\f\\n\\r\\t\"", 0, "\"\\/\b\f\n\r\t", 0},
    {"\"a\\nb\"", 0, "a\nb", 0},
    {"\"\\u0041\\u0062c\"", 0, "Abc", 0},
    {"\"\\u00e9\\u00C9\"", 0, "\xc3\xa9\xc3\x89", 0},
    {"\"\\u07ff\\u0800\"", 0, "\xdf\xbf\xe0\xa0\x80", 0},
    {"\"\\u20ac\"", 0, "\xe2\x82\xac", 0},
    {"\"\\uffff\"", 0, "\xef\xbf\xbf", 0},
    {"\"\\uD83D\\uDE00\"", 0, "\xf0\x9f\x98\x80", 0},
    {"\"\\ud83d\\ude00!\"", 0, "\xf0\x9f\x98\x80!", 0},
    {"\"\\uDBFF\\uDFFF\"", 0, "\xf4\x8f\xbf\xbf", 0},
    {"\"\\uD800\\uDC00\"", 0, "\xf0\x90\x80\x80", 0},
    /* lone or mismatched surrogates become U+FFFD, like Go */
    {"\"\\uD800\"", 0, "\xef\xbf\xbd", 0},
    {"\"\\uDC00\"", 0, "\xef\xbf\xbd", 0},
    {"\"x\\uD800y\"", 0, "x\xef\xbf\xbdy", 0},
    {"\"\\uD800\\u0041\"", 0, "\xef\xbf\xbd" "A", 0},
    {"\"\\uD800\\n\"", 0, "\xef\xbf\xbd\n", 0},
    {"\"\\uD800\\uD83D\\uDE00\"", 0, "\xef\xbf\xbd\xf0\x9f\x98\x80", 0},
    {"\"\\uDE00\\uD83D\"", 0, "\xef\xbf\xbd\xef\xbf\xbd", 0},
    {"\"\\uD83D\\uD83D\"", 0, "\xef\xbf\xbd\xef\xbf\xbd", 0},
    {"\"\\uD83D\\\\uDE00\"", 0, "\xef\xbf\xbd\\uDE00", 0},
    /* NUL via escape survives (slices are not NUL-terminated) */
    {"\"a\\u0000b\"", 0, "a\0b", 3},
    /* invalid UTF-8 passes through unchanged, with or without escapes */
    {"\"\xff\xfe\xc3(\"", 0, "\xff\xfe\xc3(", 0},
    {"\"\xff\\n\xfe\"", 0, "\xff\n\xfe", 0},
    {"\"\xed\xa0\x80\\t\"", 0, "\xed\xa0\x80\t", 0},
    {"\"0123456789abcdef0123456789abcdef\\n0123456789abcdef\"", 0,
     "0123456789abcdef0123456789abcdef\n0123456789abcdef", 0},
};

static void test_string_decoding(void **state)
{
    VSR_UNUSED(state);
    vsr_pool_t pool;
    vsr_pool_init(&pool);
    for (size_t i = 0; i < VSR_ARRAY_LEN(string_cases); i++) {
        vsr_json_t j;
        const char *src = string_cases[i].json;
        size_t len = string_cases[i].json_len ? string_cases[i].json_len : strlen(src);
        size_t wlen = string_cases[i].want_len ? string_cases[i].want_len : strlen(string_cases[i].want);
        int rc = vsr_json_parse(&j, src, len, NULL);
        if (rc != VSR_OK)
            fail_msg("string case #%zu rejected at %zu: %s", i, j.err_offset, j.err_msg);
        assert_int_equal(j.ntoks, 1);
        vsr_slice_t s;
        assert_int_equal(vsr_json_string(&j, 0, &pool, &s), VSR_OK);
        if (s.len != wlen || memcmp(s.p, string_cases[i].want, wlen) != 0)
            fail_msg("string case #%zu: got %zu bytes, want %zu", i, s.len, wlen);
        /* string_eq agrees with the decoder, and rejects near misses. */
        assert_true(vsr_json_string_eq(&j, 0, vsr_slice(string_cases[i].want, wlen)));
        assert_false(vsr_json_string_eq(&j, 0, vsr_slice(string_cases[i].want, wlen - 1)));
        char *longer = malloc(wlen + 1);
        memcpy(longer, string_cases[i].want, wlen);
        longer[wlen] = 'x';
        assert_false(vsr_json_string_eq(&j, 0, vsr_slice(longer, wlen + 1)));
        longer[wlen - 1] ^= 1;
        assert_false(vsr_json_string_eq(&j, 0, vsr_slice(longer, wlen)));
        free(longer);
        vsr_json_free(&j);
    }
    vsr_pool_free(&pool);
}

static void test_string_eq(void **state)
{
    VSR_UNUSED(state);
    vsr_json_t j;
    const char *doc = "[\"gpt-4o\",\"gpt\\u002d4o\",\"\",1]";
    assert_int_equal(parse_str(&j, doc), VSR_OK);
    assert_true(vsr_json_string_eq(&j, 1, VSR_SLICE_LIT("gpt-4o")));
    assert_false(vsr_json_string_eq(&j, 1, VSR_SLICE_LIT("gpt-4")));
    assert_false(vsr_json_string_eq(&j, 1, VSR_SLICE_LIT("GPT-4o")));
    assert_true(vsr_json_string_eq(&j, 2, VSR_SLICE_LIT("gpt-4o")));
    assert_false(vsr_json_string_eq(&j, 2, VSR_SLICE_LIT("gpt\\u002d4o")));
    assert_true(vsr_json_string_eq(&j, 3, VSR_SLICE_LIT("")));
    assert_true(vsr_json_string_eq(&j, 3, VSR_SLICE_NULL));
    assert_false(vsr_json_string_eq(&j, 3, VSR_SLICE_LIT("a")));
    /* Non-string tokens never compare equal. */
    assert_false(vsr_json_string_eq(&j, 0, VSR_SLICE_LIT("")));
    assert_false(vsr_json_string_eq(&j, 4, VSR_SLICE_LIT("1")));
    vsr_json_free(&j);
}

/* ---- scalars -------------------------------------------------------------- */

static void test_bool_and_number(void **state)
{
    VSR_UNUSED(state);
    vsr_json_t j;
    /* 70 significant digits: longer than any small stack buffer */
    const char *doc = "[true,false,null,0,-0,-1.5e3,1E2,0.25,1e400,-1e400,1e-400,"
                      "1234567890123456789012345678901234567890123456789012345678901234567890,"
                      "\"1\"]";
    assert_int_equal(parse_str(&j, doc), VSR_OK);
    assert_int_equal(vsr_json_bool(&j, 1), 1);
    assert_int_equal(vsr_json_bool(&j, 2), 0);
    assert_int_equal(vsr_json_bool(&j, 3), VSR_ERR_INVALID);
    assert_int_equal(vsr_json_bool(&j, 0), VSR_ERR_INVALID);
    assert_int_equal(vsr_json_bool(&j, 999), VSR_ERR_INVALID);

    double d = -7;
    assert_int_equal(vsr_json_number(&j, 4, &d), VSR_OK);
    assert_true(d == 0.0);
    assert_int_equal(vsr_json_number(&j, 5, &d), VSR_OK);
    assert_true(d == 0.0 && signbit(d));
    assert_int_equal(vsr_json_number(&j, 6, &d), VSR_OK);
    assert_true(d == -1500.0);
    assert_int_equal(vsr_json_number(&j, 7, &d), VSR_OK);
    assert_true(d == 100.0);
    assert_int_equal(vsr_json_number(&j, 8, &d), VSR_OK);
    assert_true(d == 0.25);
    assert_int_equal(vsr_json_number(&j, 9, &d), VSR_OK);
    assert_true(isinf(d) && d > 0);
    assert_int_equal(vsr_json_number(&j, 10, &d), VSR_OK);
    assert_true(isinf(d) && d < 0);
    assert_int_equal(vsr_json_number(&j, 11, &d), VSR_OK);
    assert_true(d == 0.0);
    assert_int_equal(vsr_json_number(&j, 12, &d), VSR_OK);
    assert_true(d > 1.2345678e69 && d < 1.2345679e69);
    assert_int_equal(vsr_json_number(&j, 13, &d), VSR_ERR_INVALID);
    assert_int_equal(vsr_json_number(&j, 1, &d), VSR_ERR_INVALID);
    vsr_json_free(&j);

    /* A number at the very end of the buffer, followed by digits that are
     * not part of the document: only the token's bytes are converted. */
    const char buf[] = "42999";
    assert_int_equal(vsr_json_parse(&j, buf, 2, NULL), VSR_OK);
    assert_int_equal(vsr_json_number(&j, 0, &d), VSR_OK);
    assert_true(d == 42.0);
    vsr_json_free(&j);
}

/* ---- large documents ------------------------------------------------------ */

static void test_large_string(void **state)
{
    VSR_UNUSED(state);
    const size_t body = 5u << 20;
    const char *head = "{\"model\":\"auto\",\"messages\":[{\"role\":\"user\",\"content\":\"";
    const char *tail = "\"}],\"stream\":false}";
    size_t hl = strlen(head), tl = strlen(tail);
    size_t len = hl + body + tl;
    char *doc = malloc(len);
    memcpy(doc, head, hl);
    /* Mostly plain ASCII, with multi-byte UTF-8 and escapes sprinkled in. */
    size_t w = hl, decoded = 0;
    while (w < hl + body) {
        size_t left = hl + body - w;
        if (left >= 2 && (w % 997) == 0) {
            memcpy(doc + w, "\\n", 2);
            w += 2;
            decoded += 1;
        } else if (left >= 2 && (w % 1009) == 0) {
            memcpy(doc + w, "\xc3\xa9", 2);
            w += 2;
            decoded += 2;
        } else {
            doc[w] = (char)('a' + w % 26);
            w++;
            decoded += 1;
        }
    }
    memcpy(doc + w, tail, tl);

    vsr_json_t j;
    assert_int_equal(vsr_json_parse(&j, doc, len, NULL), VSR_OK);
    check_layout(&j, "large", "o3/12 s s s a1/10 o2/10 s s s e s f");
    assert_int_equal(j.toks[9].start, hl - 1);
    assert_int_equal(j.toks[9].end, hl + body + 1);
    uint32_t v;
    assert_int_equal(vsr_json_object_get(&j, 0, "stream", &v), VSR_OK);
    assert_int_equal(vsr_json_bool(&j, v), 0);
    assert_int_equal(vsr_json_object_get(&j, 0, "model", &v), VSR_OK);
    assert_true(vsr_json_string_eq(&j, v, VSR_SLICE_LIT("auto")));

    vsr_pool_t pool;
    vsr_pool_init(&pool);
    vsr_slice_t s;
    assert_int_equal(vsr_json_string(&j, 9, &pool, &s), VSR_OK);
    assert_int_equal(s.len, decoded);
    assert_true(vsr_json_string_eq(&j, 9, s));
    vsr_pool_free(&pool);
    vsr_json_free(&j);

    /* A control byte at the very end of the big string is still caught. */
    doc[hl + body - 1] = '\x1f';
    assert_int_equal(vsr_json_parse(&j, doc, len, NULL), VSR_ERR_INVALID);
    assert_int_equal(j.err_offset, hl + body - 1);
    vsr_json_free(&j);
    free(doc);
}

/* The string scanner steps 64 and 16 bytes at a time: a string's end, an
 * escape and a control byte are each found at every offset of strings
 * across those steps. */
static void test_string_specials_every_offset(void **state)
{
    VSR_UNUSED(state);
    char doc[160];
    for (size_t n = 0; n < 140; n++) {
        /* ["aaa...a"]: the end at offset n */
        doc[0] = '[';
        doc[1] = '"';
        memset(doc + 2, 'a', n);
        memcpy(doc + 2 + n, "\"]", 2);
        vsr_json_t j;
        assert_int_equal(vsr_json_parse(&j, doc, n + 4, NULL), VSR_OK);
        assert_int_equal(j.toks[1].end, n + 3);
        vsr_json_free(&j);
        for (size_t at = 0; at < n; at++) {
            memset(doc + 2, 'a', n);
            doc[2 + at] = '\x01'; /* a control byte: refused where it is */
            if (vsr_json_parse(&j, doc, n + 4, NULL) != VSR_ERR_INVALID || j.err_offset != 2 + at)
                fail_msg("control byte at %zu of %zu: not refused there (%zu)", at, n, j.err_offset);
            vsr_json_free(&j);
            if (at + 1 < n) {
                doc[2 + at] = '\\';
                doc[3 + at] = '"'; /* an escaped quote does not end the string */
                assert_int_equal(vsr_json_parse(&j, doc, n + 4, NULL), VSR_OK);
                assert_int_equal(j.toks[1].end, n + 3);
                assert_true(j.toks[1].escaped);
                vsr_json_free(&j);
            }
        }
    }
}

static void test_many_tokens(void **state)
{
    VSR_UNUSED(state);
    /* Dense input forces the token array to grow many times. */
    const uint32_t n = 1000000;
    size_t len = 2 * (size_t)n + 1;
    char *doc = malloc(len);
    doc[0] = '[';
    for (uint32_t i = 0; i < n; i++) {
        doc[1 + 2 * i] = (char)('0' + i % 10);
        doc[2 + 2 * i] = i + 1 < n ? ',' : ']';
    }
    vsr_json_t j;
    assert_int_equal(vsr_json_parse(&j, doc, len, NULL), VSR_OK);
    assert_int_equal(j.ntoks, n + 1);
    assert_true(j._cap >= j.ntoks);
    assert_int_equal(j.toks[0].count, n);
    assert_int_equal(j.toks[0].next, n + 1);
    assert_int_equal(j.toks[0].end, len);
    for (uint32_t i = 1; i <= n; i += 99991) {
        assert_int_equal(j.toks[i].type, VSR_JSON_NUMBER);
        assert_int_equal(j.toks[i].start, 2 * i - 1);
        assert_int_equal(j.toks[i].end, 2 * i);
        assert_int_equal(j.toks[i].next, i + 1);
    }
    vsr_json_free(&j);
    free(doc);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_valid_documents),
        cmocka_unit_test(test_spans),
        cmocka_unit_test(test_invalid_documents),
        cmocka_unit_test(test_error_offset_deep),
        cmocka_unit_test(test_depth_limit),
        cmocka_unit_test(test_token_limit),
        cmocka_unit_test(test_too_large_input),
        cmocka_unit_test(test_free_safety),
        cmocka_unit_test(test_object_get),
        cmocka_unit_test(test_object_get_escaped_and_duplicates),
        cmocka_unit_test(test_iteration),
        cmocka_unit_test(test_string_zero_copy),
        cmocka_unit_test(test_string_decoding),
        cmocka_unit_test(test_string_eq),
        cmocka_unit_test(test_bool_and_number),
        cmocka_unit_test(test_large_string),
        cmocka_unit_test(test_string_specials_every_offset),
        cmocka_unit_test(test_many_tokens),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
