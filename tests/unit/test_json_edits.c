/* test_json_edits.c — rewriting a body by byte-range edits: pieces, removal
 * in every position, insertion separators, overlap rejection, and that any
 * mix of structural edits stays valid JSON. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <cmocka.h>

#include "json/json.h"

/* ---- helpers ------------------------------------------------------------ */

typedef struct {
    vsr_json_t j;
    vsr_json_edits_t ed;
    vsr_pool_t pool;
    const char *src;
} fx_t;

static void fx_open(fx_t *f, const char *src)
{
    f->src = src;
    assert_int_equal(vsr_json_parse(&f->j, src, strlen(src), NULL), VSR_OK);
    vsr_json_edits_init(&f->ed);
    vsr_pool_init(&f->pool);
}

static void fx_close(fx_t *f)
{
    vsr_json_edits_free(&f->ed);
    vsr_json_free(&f->j);
    vsr_pool_free(&f->pool);
}

/* The edited body as a NUL-terminated pool string; checks the pieces'
 * total and that source pieces are in source order. */
static const char *fx_out(fx_t *f)
{
    size_t n;
    uint64_t total;
    vsr_slice_t *p = vsr_json_edits_apply(&f->ed, f->src, strlen(f->src), &f->pool, &n, &total);
    char *s = vsr_pool_alloc(&f->pool, total + 1);
    size_t w = 0;
    const char *last_src = f->src;
    for (size_t i = 0; i < n; i++) {
        assert_true(p[i].len > 0);
        if (p[i].p >= f->src && p[i].p < f->src + strlen(f->src)) {
            assert_true(p[i].p >= last_src);
            last_src = p[i].p + p[i].len;
        }
        memcpy(s + w, p[i].p, p[i].len);
        w += p[i].len;
    }
    assert_int_equal(w, total);
    s[w] = '\0';
    return s;
}

/* Asserts the output is exactly `want` and parses as JSON. */
static void fx_expect(fx_t *f, const char *want)
{
    const char *got = fx_out(f);
    if (strcmp(got, want) != 0)
        fail_msg("source %s\n got  %s\n want %s", f->src, got, want);
    vsr_json_t j2;
    int rc = vsr_json_parse(&j2, got, strlen(got), NULL);
    vsr_json_free(&j2);
    if (rc != VSR_OK)
        fail_msg("output does not parse: %s", got);
}

/* Key token of member `key` in object obj. */
static uint32_t key_tok(const vsr_json_t *j, uint32_t obj, const char *key)
{
    uint32_t v;
    assert_int_equal(vsr_json_object_get(j, obj, key, &v), VSR_OK);
    return v - 1;
}

static uint32_t val_tok(const vsr_json_t *j, uint32_t obj, const char *key)
{
    uint32_t v;
    assert_int_equal(vsr_json_object_get(j, obj, key, &v), VSR_OK);
    return v;
}

static void rm(fx_t *f, uint32_t obj, const char *key)
{
    assert_int_equal(vsr_json_edit_remove_member(&f->ed, &f->j, obj, key_tok(&f->j, obj, key)), VSR_OK);
}

/* ---- tests -------------------------------------------------------------- */

static void test_no_edits_one_piece(void **state)
{
    (void)state;
    fx_t f;
    fx_open(&f, "{\"model\":\"a\"}");
    size_t n;
    uint64_t total;
    vsr_slice_t *p = vsr_json_edits_apply(&f.ed, f.src, strlen(f.src), &f.pool, &n, &total);
    assert_int_equal(n, 1);
    assert_ptr_equal(p[0].p, f.src);
    assert_int_equal(p[0].len, strlen(f.src));
    assert_int_equal(total, strlen(f.src));
    /* NULL edits behave the same */
    p = vsr_json_edits_apply(NULL, f.src, strlen(f.src), &f.pool, &n, &total);
    assert_int_equal(n, 1);
    assert_ptr_equal(p[0].p, f.src);
    fx_close(&f);
}

static void test_replace_pieces(void **state)
{
    (void)state;
    fx_t f;
    fx_open(&f, "{\"model\":\"auto\",\"n\":5,\"stream\":true}");
    assert_int_equal(vsr_json_edit_replace(&f.ed, &f.j, val_tok(&f.j, 0, "stream"), VSR_SLICE_LIT("false")),
                     VSR_OK);
    /* added out of document order on purpose */
    assert_int_equal(vsr_json_edit_replace(&f.ed, &f.j, val_tok(&f.j, 0, "model"), VSR_SLICE_LIT("\"gpt-x\"")),
                     VSR_OK);
    size_t n;
    uint64_t total;
    vsr_slice_t *p = vsr_json_edits_apply(&f.ed, f.src, strlen(f.src), &f.pool, &n, &total);
    /* {"model":  "gpt-x"  ,"n":5,"stream":  false  } */
    assert_int_equal(n, 5);
    assert_ptr_equal(p[0].p, f.src);
    assert_int_equal(p[0].len, 9);
    assert_memory_equal(p[1].p, "\"gpt-x\"", 7);
    assert_ptr_equal(p[2].p, f.src + 15);
    assert_memory_equal(p[3].p, "false", 5);
    assert_ptr_equal(p[4].p, f.src + strlen(f.src) - 1);
    fx_expect(&f, "{\"model\":\"gpt-x\",\"n\":5,\"stream\":false}");
    fx_close(&f);
}

static void test_remove_positions_compact(void **state)
{
    (void)state;
    static const struct {
        const char *src, *key, *want;
    } cases[] = {
        {"{\"a\":1,\"b\":2,\"c\":3}", "a", "{\"b\":2,\"c\":3}"},
        {"{\"a\":1,\"b\":2,\"c\":3}", "b", "{\"a\":1,\"c\":3}"},
        {"{\"a\":1,\"b\":2,\"c\":3}", "c", "{\"a\":1,\"b\":2}"},
        {"{\"a\":1}", "a", "{}"},
        {"{\"a\":{\"x\":[1,2]},\"b\":\"s\"}", "a", "{\"b\":\"s\"}"},
        {"{\"a\":{\"x\":[1,2]},\"b\":\"s\"}", "b", "{\"a\":{\"x\":[1,2]}}"},
    };
    for (size_t i = 0; i < VSR_ARRAY_LEN(cases); i++) {
        fx_t f;
        fx_open(&f, cases[i].src);
        rm(&f, 0, cases[i].key);
        fx_expect(&f, cases[i].want);
        fx_close(&f);
    }
}

static void test_remove_positions_whitespace(void **state)
{
    (void)state;
    const char *pretty = "{\n  \"a\": 1,\n  \"b\": 2,\n  \"c\": 3\n}";
    static const struct {
        const char *key, *want;
    } cases[] = {
        {"a", "{\n  \"b\": 2,\n  \"c\": 3\n}"},
        {"b", "{\n  \"a\": 1,\n  \"c\": 3\n}"},
        {"c", "{\n  \"a\": 1,\n  \"b\": 2\n}"},
    };
    for (size_t i = 0; i < VSR_ARRAY_LEN(cases); i++) {
        fx_t f;
        fx_open(&f, pretty);
        rm(&f, 0, cases[i].key);
        fx_expect(&f, cases[i].want);
        fx_close(&f);
    }
    fx_t f;
    fx_open(&f, "{ \"only\" : [ 1 , 2 ] }");
    rm(&f, 0, "only");
    fx_expect(&f, "{}");
    fx_close(&f);
    /* spaces around the commas */
    fx_open(&f, "{ \"a\" : 1 , \"b\" : 2 , \"c\" : 3 }");
    rm(&f, 0, "c");
    fx_expect(&f, "{ \"a\" : 1 , \"b\" : 2 }");
    fx_close(&f);
    fx_open(&f, "{ \"a\" : 1 , \"b\" : 2 , \"c\" : 3 }");
    rm(&f, 0, "a");
    fx_expect(&f, "{ \"b\" : 2 , \"c\" : 3 }");
    fx_close(&f);
}

/* Every subset of members, removed one at a time in every order and as one
 * batch, leaves exactly the others. */
static void test_remove_every_subset_every_order(void **state)
{
    (void)state;
    const char *src = "{\"a\":1,\"b\":[2],\"c\":{\"d\":3},\"e\":\"4\"}";
    static const char *names[] = {"a", "b", "c", "e"};
    static const char *members[] = {"\"a\":1", "\"b\":[2]", "\"c\":{\"d\":3}", "\"e\":\"4\""};
    int perm[24][4], np = 0;
    for (int a = 0; a < 4; a++)
        for (int b = 0; b < 4; b++)
            for (int c = 0; c < 4; c++)
                for (int d = 0; d < 4; d++)
                    if (a != b && a != c && a != d && b != c && b != d && c != d) {
                        perm[np][0] = a, perm[np][1] = b, perm[np][2] = c, perm[np][3] = d;
                        np++;
                    }
    for (unsigned mask = 0; mask < 16; mask++) {
        char want[128] = "{";
        int first = 1;
        for (int i = 0; i < 4; i++)
            if (!(mask & (1u << i))) {
                if (!first)
                    strcat(want, ",");
                strcat(want, members[i]);
                first = 0;
            }
        strcat(want, "}");
        for (int p = 0; p < np; p++) {
            fx_t f;
            fx_open(&f, src);
            for (int k = 0; k < 4; k++)
                if (mask & (1u << perm[p][k]))
                    rm(&f, 0, names[perm[p][k]]);
            fx_expect(&f, want);
            fx_close(&f);
        }
        /* batch, keys in reverse order */
        fx_t f;
        fx_open(&f, src);
        uint32_t keys[4];
        size_t nk = 0;
        for (int i = 3; i >= 0; i--)
            if (mask & (1u << i))
                keys[nk++] = key_tok(&f.j, 0, names[i]);
        assert_int_equal(vsr_json_edit_remove_members(&f.ed, &f.j, 0, keys, nk), VSR_OK);
        fx_expect(&f, want);
        /* runs are merged: one edit per run of neighbours */
        size_t runs = 0;
        for (int i = 0; i < 4; i++)
            if ((mask & (1u << i)) && (i == 0 || !(mask & (1u << (i - 1)))))
                runs++;
        assert_int_equal(f.ed.n, runs);
        fx_close(&f);
    }
}

static void test_remove_idempotent_and_errors(void **state)
{
    (void)state;
    fx_t f;
    fx_open(&f, "{\"a\":1,\"b\":{\"x\":2},\"c\":3}");
    rm(&f, 0, "b");
    rm(&f, 0, "b"); /* already removed: no-op */
    fx_expect(&f, "{\"a\":1,\"c\":3}");
    assert_int_equal(f.ed.n, 1);
    /* a key of another object */
    uint32_t b = val_tok(&f.j, 0, "b");
    assert_int_equal(vsr_json_edit_remove_member(&f.ed, &f.j, 0, key_tok(&f.j, b, "x")), VSR_ERR_INVALID);
    /* a value token is not a key */
    assert_int_equal(vsr_json_edit_remove_member(&f.ed, &f.j, 0, val_tok(&f.j, 0, "a")), VSR_ERR_INVALID);
    /* not an object */
    assert_int_equal(vsr_json_edit_remove_member(&f.ed, &f.j, val_tok(&f.j, 0, "a"), 1), VSR_ERR_INVALID);
    /* inside the removed member */
    assert_int_equal(vsr_json_edit_remove_member(&f.ed, &f.j, b, key_tok(&f.j, b, "x")), VSR_ERR_INVALID);
    assert_int_equal(vsr_json_edit_replace(&f.ed, &f.j, val_tok(&f.j, b, "x"), VSR_SLICE_LIT("0")),
                     VSR_ERR_INVALID);
    fx_expect(&f, "{\"a\":1,\"c\":3}");
    fx_close(&f);

    /* all or nothing: one bad key leaves no edit */
    fx_open(&f, "{\"a\":1,\"b\":2}");
    uint32_t keys[2] = {key_tok(&f.j, 0, "a"), val_tok(&f.j, 0, "b")};
    assert_int_equal(vsr_json_edit_remove_members(&f.ed, &f.j, 0, keys, 2), VSR_ERR_INVALID);
    assert_int_equal(f.ed.n, 0);
    /* a conflicting run leaves the earlier edits untouched */
    assert_int_equal(vsr_json_edit_replace(&f.ed, &f.j, val_tok(&f.j, 0, "b"), VSR_SLICE_LIT("7")), VSR_OK);
    rm(&f, 0, "a");
    keys[0] = key_tok(&f.j, 0, "a");
    keys[1] = key_tok(&f.j, 0, "b");
    assert_int_equal(vsr_json_edit_remove_members(&f.ed, &f.j, 0, keys, 2), VSR_ERR_INVALID);
    fx_expect(&f, "{\"b\":7}");
    fx_close(&f);
}

static void test_overlaps_rejected(void **state)
{
    (void)state;
    fx_t f;
    fx_open(&f, "{\"m\":[1,{\"k\":\"v\"}],\"z\":0}");
    uint32_t m = val_tok(&f.j, 0, "m");
    uint32_t inner = m + 2;
    assert_int_equal(vsr_json_type(&f.j, inner), VSR_JSON_OBJECT);
    assert_int_equal(vsr_json_edit_replace(&f.ed, &f.j, val_tok(&f.j, inner, "k"), VSR_SLICE_LIT("\"w\"")), VSR_OK);
    /* the same token, an ancestor, the member holding it */
    assert_int_equal(vsr_json_edit_replace(&f.ed, &f.j, val_tok(&f.j, inner, "k"), VSR_SLICE_LIT("1")),
                     VSR_ERR_INVALID);
    assert_int_equal(vsr_json_edit_replace(&f.ed, &f.j, m, VSR_SLICE_LIT("[]")), VSR_ERR_INVALID);
    assert_int_equal(vsr_json_edit_replace(&f.ed, &f.j, 0, VSR_SLICE_LIT("{}")), VSR_ERR_INVALID);
    assert_int_equal(vsr_json_edit_remove_member(&f.ed, &f.j, 0, key_tok(&f.j, 0, "m")), VSR_ERR_INVALID);
    assert_int_equal(vsr_json_edit_remove_member(&f.ed, &f.j, inner, key_tok(&f.j, inner, "k")), VSR_ERR_INVALID);
    /* a sibling is fine */
    assert_int_equal(vsr_json_edit_replace(&f.ed, &f.j, m + 1, VSR_SLICE_LIT("2")), VSR_OK);
    /* a later sibling too */
    assert_int_equal(vsr_json_edit_replace(&f.ed, &f.j, val_tok(&f.j, 0, "z"), VSR_SLICE_LIT("[5]")), VSR_OK);
    fx_expect(&f, "{\"m\":[2,{\"k\":\"w\"}],\"z\":[5]}");
    fx_close(&f);

    fx_open(&f, "{\"a\":{\"b\":1}}");
    uint32_t a = val_tok(&f.j, 0, "a");
    assert_int_equal(vsr_json_edit_replace(&f.ed, &f.j, a, VSR_SLICE_LIT("null")), VSR_OK);
    assert_int_equal(vsr_json_edit_insert_member(&f.ed, &f.j, a, VSR_SLICE_LIT("\"x\":1")), VSR_ERR_INVALID);
    assert_int_equal(vsr_json_edit_insert_member(&f.ed, &f.j, 0, VSR_SLICE_LIT("\"x\":1")), VSR_OK);
    fx_expect(&f, "{\"x\":1,\"a\":null}");
    fx_close(&f);

    /* raw ranges */
    vsr_json_edits_t ed;
    vsr_json_edits_init(&ed);
    assert_int_equal(vsr_json_edits_add(&ed, 10, 20, VSR_SLICE_LIT("x")), VSR_OK);
    assert_int_equal(vsr_json_edits_add(&ed, 5, 11, VSR_SLICE_LIT("x")), VSR_ERR_INVALID);
    assert_int_equal(vsr_json_edits_add(&ed, 19, 25, VSR_SLICE_LIT("x")), VSR_ERR_INVALID);
    assert_int_equal(vsr_json_edits_add(&ed, 12, 15, VSR_SLICE_LIT("x")), VSR_ERR_INVALID);
    assert_int_equal(vsr_json_edits_add(&ed, 0, 30, VSR_SLICE_LIT("x")), VSR_ERR_INVALID);
    assert_int_equal(vsr_json_edits_add(&ed, 10, 20, VSR_SLICE_LIT("x")), VSR_ERR_INVALID);
    assert_int_equal(vsr_json_edits_add(&ed, 15, 15, VSR_SLICE_LIT("x")), VSR_ERR_INVALID); /* inside */
    assert_int_equal(vsr_json_edits_add(&ed, 9, 8, VSR_SLICE_LIT("x")), VSR_ERR_INVALID);   /* backwards */
    assert_int_equal(vsr_json_edits_add(&ed, 5, 10, VSR_SLICE_LIT("x")), VSR_OK);           /* touching */
    assert_int_equal(vsr_json_edits_add(&ed, 20, 22, VSR_SLICE_LIT("x")), VSR_OK);
    assert_int_equal(vsr_json_edits_add(&ed, 10, 10, VSR_SLICE_LIT("x")), VSR_OK);           /* at a boundary */
    assert_int_equal(vsr_json_edits_add(&ed, 20, 20, VSR_SLICE_LIT("x")), VSR_OK);
    assert_int_equal(vsr_json_edits_overlaps(&ed, 21, 21), 1);
    assert_int_equal(vsr_json_edits_overlaps(&ed, 22, 22), 0);
    assert_int_equal(vsr_json_edits_overlaps(&ed, 0, 5), 0);
    assert_int_equal(vsr_json_edits_overlaps(&ed, 0, 6), 1);
    assert_int_equal(vsr_json_edits_overlaps(&ed, 22, 40), 0);
    /* sorted by position */
    for (size_t i = 1; i < ed.n; i++)
        assert_true(ed.e[i - 1].start < ed.e[i].start ||
                    (ed.e[i - 1].start == ed.e[i].start && ed.e[i - 1].end <= ed.e[i].end));
    vsr_json_edits_free(&ed);
}

static void test_insertion_order_and_boundaries(void **state)
{
    (void)state;
    fx_t f;
    fx_open(&f, "[\"x\",\"y\"]");
    uint32_t x = 1;
    /* three insertions at one offset keep their order; an insertion at the
     * start of a replaced range lands before its text, at the end after */
    uint32_t at = f.j.toks[x].start;
    assert_int_equal(vsr_json_edits_add(&f.ed, at, at, VSR_SLICE_LIT("1,")), VSR_OK);
    assert_int_equal(vsr_json_edit_replace(&f.ed, &f.j, x, VSR_SLICE_LIT("\"X\"")), VSR_OK);
    assert_int_equal(vsr_json_edits_add(&f.ed, at, at, VSR_SLICE_LIT("2,")), VSR_OK);
    assert_int_equal(vsr_json_edits_add(&f.ed, f.j.toks[x].end, f.j.toks[x].end, VSR_SLICE_LIT(",4")), VSR_OK);
    assert_int_equal(vsr_json_edits_add(&f.ed, at, at, VSR_SLICE_LIT("3,")), VSR_OK);
    fx_expect(&f, "[1,2,3,\"X\",4,\"y\"]");
    fx_close(&f);
}

static void test_insert_member_and_element(void **state)
{
    (void)state;
    static const struct {
        const char *src;
        int n_ins;
        const char *want;
    } objs[] = {
        {"{}", 1, "{\"i0\":0}"},
        {"{ }", 1, "{\"i0\":0 }"},
        {"{}", 3, "{\"i0\":0,\"i1\":1,\"i2\":2}"},
        {"{\"a\":1}", 1, "{\"i0\":0,\"a\":1}"},
        {"{\n \"a\": 1\n}", 2, "{\"i0\":0,\"i1\":1,\n \"a\": 1\n}"},
    };
    static const char *members[] = {"\"i0\":0", "\"i1\":1", "\"i2\":2"};
    for (size_t i = 0; i < VSR_ARRAY_LEN(objs); i++) {
        fx_t f;
        fx_open(&f, objs[i].src);
        for (int k = 0; k < objs[i].n_ins; k++)
            assert_int_equal(vsr_json_edit_insert_member(&f.ed, &f.j, 0, vsr_slice_cstr(members[k])), VSR_OK);
        fx_expect(&f, objs[i].want);
        fx_close(&f);
    }
    static const struct {
        const char *src;
        int n_ins;
        const char *want;
    } arrs[] = {
        {"[]", 1, "[{\"role\":\"system\"}]"},
        {"[]", 2, "[{\"role\":\"system\"},7]"},
        {"[1]", 1, "[{\"role\":\"system\"},1]"},
        {"[ 1 , 2 ]", 2, "[{\"role\":\"system\"},7, 1 , 2 ]"},
    };
    static const char *elems[] = {"{\"role\":\"system\"}", "7"};
    for (size_t i = 0; i < VSR_ARRAY_LEN(arrs); i++) {
        fx_t f;
        fx_open(&f, arrs[i].src);
        for (int k = 0; k < arrs[i].n_ins; k++)
            assert_int_equal(vsr_json_edit_insert_element(&f.ed, &f.j, 0, vsr_slice_cstr(elems[k])), VSR_OK);
        fx_expect(&f, arrs[i].want);
        fx_close(&f);
    }
    fx_t f;
    fx_open(&f, "{\"a\":[]}");
    assert_int_equal(vsr_json_edit_insert_element(&f.ed, &f.j, 0, VSR_SLICE_LIT("1")), VSR_ERR_INVALID);
    assert_int_equal(vsr_json_edit_insert_member(&f.ed, &f.j, 1, VSR_SLICE_LIT("\"x\":1")), VSR_ERR_INVALID);
    fx_close(&f);
}

/* Every sequence (order matters) of distinct operations among: remove a,
 * remove b, remove c, insert x, insert y.  Inserted members come first in
 * insertion order, then the surviving originals; separators always right. */
static void test_insert_remove_sequences(void **state)
{
    (void)state;
    static const char *srcs[] = {"{\"a\":1,\"b\":2,\"c\":3}", "{ \"a\" : 1 ,\n \"b\" : 2 ,\n \"c\" : 3 }"};
    static const char *orig[] = {"\"a\":1", "\"b\":2", "\"c\":3"};
    static const char *names[] = {"a", "b", "c"};
    static const char *ins[] = {"\"x\":true", "\"y\":null"};
    int seq[5];
    unsigned count = 0;
    /* enumerate sequences of length 0..5 over 5 ops without repeats */
    for (int len = 0; len <= 5; len++) {
        int idx[5] = {0};
        for (;;) {
            int ok = 1;
            for (int a = 0; a < len && ok; a++)
                for (int b = a + 1; b < len; b++)
                    if (idx[a] == idx[b])
                        ok = 0;
            if (ok) {
                memcpy(seq, idx, sizeof(seq));
                for (size_t s = 0; s < VSR_ARRAY_LEN(srcs); s++) {
                    fx_t f;
                    fx_open(&f, srcs[s]);
                    int removed[3] = {0}, inserted[2], n_ins = 0;
                    for (int k = 0; k < len; k++) {
                        int op = seq[k];
                        if (op < 3) {
                            rm(&f, 0, names[op]);
                            removed[op] = 1;
                        } else {
                            assert_int_equal(
                                vsr_json_edit_insert_member(&f.ed, &f.j, 0, vsr_slice_cstr(ins[op - 3])), VSR_OK);
                            inserted[n_ins++] = op - 3;
                        }
                    }
                    const char *got = fx_out(&f);
                    if (s == 0) {
                        char want[128] = "{";
                        int first = 1;
                        for (int k = 0; k < n_ins; k++) {
                            if (!first)
                                strcat(want, ",");
                            strcat(want, ins[inserted[k]]);
                            first = 0;
                        }
                        for (int k = 0; k < 3; k++)
                            if (!removed[k]) {
                                if (!first)
                                    strcat(want, ",");
                                strcat(want, orig[k]);
                                first = 0;
                            }
                        strcat(want, "}");
                        if (strcmp(got, want) != 0)
                            fail_msg("got %s want %s", got, want);
                    }
                    /* either way: valid, with the expected members */
                    vsr_json_t j2;
                    if (vsr_json_parse(&j2, got, strlen(got), NULL) != VSR_OK)
                        fail_msg("invalid output %s", got);
                    assert_int_equal(j2.toks[0].count, (uint32_t)(n_ins + 3 - removed[0] - removed[1] - removed[2]));
                    vsr_json_free(&j2);
                    fx_close(&f);
                    count++;
                }
            }
            int p = len - 1;
            while (p >= 0 && ++idx[p] == 5)
                idx[p--] = 0;
            if (p < 0)
                break;
        }
    }
    assert_int_equal(count, 2 * 326);
}

static void test_nested_and_model_rewrite(void **state)
{
    (void)state;
    fx_t f;
    fx_open(&f, "{\"model\":\"auto\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\",\"name\":\"u\"}],"
                "\"user\":\"bob\",\"max_tokens\":9000}");
    uint32_t msgs = val_tok(&f.j, 0, "messages");
    uint32_t m0 = msgs + 1;
    rm(&f, m0, "name");
    rm(&f, 0, "user");
    assert_int_equal(vsr_json_edit_replace(&f.ed, &f.j, val_tok(&f.j, 0, "max_tokens"), VSR_SLICE_LIT("100")), VSR_OK);
    assert_int_equal(vsr_json_edit_insert_element(&f.ed, &f.j, msgs,
                                                  VSR_SLICE_LIT("{\"role\":\"system\",\"content\":\"s\"}")),
                     VSR_OK);
    assert_int_equal(vsr_json_edit_replace(&f.ed, &f.j, val_tok(&f.j, 0, "model"), VSR_SLICE_LIT("\"m1\"")), VSR_OK);
    fx_expect(&f, "{\"model\":\"m1\",\"messages\":[{\"role\":\"system\",\"content\":\"s\"},"
                  "{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":100}");
    fx_close(&f);
}

static void test_remove_everything_source_empty_pieces(void **state)
{
    (void)state;
    /* a replacement of the whole document: pieces are just the new text */
    fx_t f;
    fx_open(&f, "[1]");
    assert_int_equal(vsr_json_edit_replace(&f.ed, &f.j, 0, VSR_SLICE_LIT("{}")), VSR_OK);
    size_t n;
    uint64_t total;
    vsr_slice_t *p = vsr_json_edits_apply(&f.ed, f.src, 3, &f.pool, &n, &total);
    assert_int_equal(n, 1);
    assert_int_equal(total, 2);
    assert_memory_equal(p[0].p, "{}", 2);
    fx_close(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_no_edits_one_piece),
        cmocka_unit_test(test_replace_pieces),
        cmocka_unit_test(test_remove_positions_compact),
        cmocka_unit_test(test_remove_positions_whitespace),
        cmocka_unit_test(test_remove_every_subset_every_order),
        cmocka_unit_test(test_remove_idempotent_and_errors),
        cmocka_unit_test(test_overlaps_rejected),
        cmocka_unit_test(test_insertion_order_and_boundaries),
        cmocka_unit_test(test_insert_member_and_element),
        cmocka_unit_test(test_insert_remove_sequences),
        cmocka_unit_test(test_nested_and_model_rewrite),
        cmocka_unit_test(test_remove_everything_source_empty_pieces),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
