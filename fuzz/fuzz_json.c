/*
 * fuzz_json.c — vsr_json_parse over arbitrary bytes.
 *
 * Checks, beyond memory safety:
 *  - acceptance agrees with a small, obviously-correct recursive reference
 *    validator (same grammar, same depth limit), and so does the token count;
 *  - every token's span, links and child counts are consistent;
 *  - every string decodes, never grows, and compares equal to its decoding;
 *  - every object key is found by vsr_json_object_get, with last-wins;
 *  - vsr_json_find_duplicate_key agrees with a pairwise comparison of the
 *    unescaped names of each object;
 *  - tighter limits only ever turn success into VSR_ERR_TOO_BIG.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json/json.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                              \
    do {                                                                         \
        if (!(cond)) {                                                           \
            fprintf(stderr, "fuzz_json: check failed: %s (line %d)\n", #cond, __LINE__); \
            abort();                                                             \
        }                                                                        \
    } while (0)

/* ---- reference validator: recursive, byte at a time -------------------- */

typedef struct {
    const uint8_t *s;
    size_t len, pos;
    uint32_t ntoks;
    int too_deep;
} ref_t;

static void ref_ws(ref_t *r)
{
    while (r->pos < r->len && strchr(" \t\n\r", r->s[r->pos]) && r->s[r->pos])
        r->pos++;
}

static int ref_digit(ref_t *r)
{
    return r->pos < r->len && r->s[r->pos] >= '0' && r->s[r->pos] <= '9';
}

static int ref_string(ref_t *r)
{
    r->pos++; /* opening quote */
    for (;;) {
        if (r->pos >= r->len)
            return 0;
        uint8_t c = r->s[r->pos++];
        if (c == '"')
            return 1;
        if (c < 0x20)
            return 0;
        if (c != '\\')
            continue;
        if (r->pos >= r->len)
            return 0;
        c = r->s[r->pos++];
        if (c == 'u') {
            for (int i = 0; i < 4; i++) {
                if (r->pos >= r->len || !strchr("0123456789abcdefABCDEF", r->s[r->pos]) ||
                    !r->s[r->pos])
                    return 0;
                r->pos++;
            }
        } else if (!c || !strchr("\"\\/bfnrt", c)) {
            return 0;
        }
    }
}

static int ref_value(ref_t *r, uint32_t depth)
{
    ref_ws(r);
    if (r->pos >= r->len)
        return 0;
    uint8_t c = r->s[r->pos];
    r->ntoks++;
    if (c == '{' || c == '[') {
        if (depth >= 512) {
            r->too_deep = 1;
            return 0;
        }
        uint8_t close = c == '{' ? '}' : ']';
        r->pos++;
        ref_ws(r);
        if (r->pos < r->len && r->s[r->pos] == close) {
            r->pos++;
            return 1;
        }
        for (;;) {
            if (c == '{') {
                ref_ws(r);
                if (r->pos >= r->len || r->s[r->pos] != '"')
                    return 0;
                r->ntoks++;
                if (!ref_string(r))
                    return 0;
                ref_ws(r);
                if (r->pos >= r->len || r->s[r->pos] != ':')
                    return 0;
                r->pos++;
            }
            if (!ref_value(r, depth + 1))
                return 0;
            ref_ws(r);
            if (r->pos >= r->len)
                return 0;
            if (r->s[r->pos] == close) {
                r->pos++;
                return 1;
            }
            if (r->s[r->pos] != ',')
                return 0;
            r->pos++;
        }
    }
    if (c == '"')
        return ref_string(r);
    if (c == '-' || (c >= '0' && c <= '9')) {
        if (c == '-')
            r->pos++;
        if (!ref_digit(r))
            return 0;
        if (r->s[r->pos] == '0') {
            r->pos++;
        } else {
            while (ref_digit(r))
                r->pos++;
        }
        if (r->pos < r->len && r->s[r->pos] == '.') {
            r->pos++;
            if (!ref_digit(r))
                return 0;
            while (ref_digit(r))
                r->pos++;
        }
        if (r->pos < r->len && (r->s[r->pos] == 'e' || r->s[r->pos] == 'E')) {
            r->pos++;
            if (r->pos < r->len && (r->s[r->pos] == '+' || r->s[r->pos] == '-'))
                r->pos++;
            if (!ref_digit(r))
                return 0;
            while (ref_digit(r))
                r->pos++;
        }
        return 1;
    }
    static const char *const lits[] = {"true", "false", "null"};
    for (size_t i = 0; i < 3; i++) {
        size_t n = strlen(lits[i]);
        if (r->len - r->pos >= n && memcmp(r->s + r->pos, lits[i], n) == 0) {
            r->pos += n;
            return 1;
        }
    }
    return 0;
}

/* 1 valid, 0 invalid, -1 too deep */
static int ref_validate(const uint8_t *s, size_t len, uint32_t *ntoks)
{
    ref_t r = {s, len, 0, 0, 0};
    int ok = ref_value(&r, 0);
    if (r.too_deep)
        return -1;
    if (!ok)
        return 0;
    ref_ws(&r);
    *ntoks = r.ntoks;
    return r.pos == len;
}

/* ---- structural checks ---------------------------------------------------- */

static void check_tokens(const vsr_json_t *j, const uint8_t *data, size_t size)
{
    CHECK(j->ntoks >= 1 && j->ntoks <= size);
    CHECK(j->toks[0].next == j->ntoks);
    for (uint32_t i = 0; i < j->ntoks; i++) {
        const vsr_json_tok_t *t = &j->toks[i];
        CHECK(t->start < t->end && t->end <= size);
        CHECK(t->next > i && t->next <= j->ntoks);
        uint8_t first = data[t->start], last = data[t->end - 1];
        switch (t->type) {
        case VSR_JSON_OBJECT:
        case VSR_JSON_ARRAY: {
            int obj = t->type == VSR_JSON_OBJECT;
            CHECK(first == (obj ? '{' : '[') && last == (obj ? '}' : ']'));
            uint32_t n = 0, c = i + 1, prev_end = t->start + 1;
            while (c < t->next) {
                CHECK(j->toks[c].start >= prev_end);
                if (obj) {
                    CHECK(j->toks[c].type == VSR_JSON_STRING);
                    CHECK(j->toks[c].next == c + 1);
                    c++;
                    CHECK(c < t->next);
                }
                prev_end = j->toks[c].end;
                c = j->toks[c].next;
                n++;
            }
            CHECK(c == t->next);
            CHECK(n == t->count);
            CHECK(prev_end < t->end);
            break;
        }
        case VSR_JSON_STRING:
            CHECK(first == '"' && last == '"' && t->end - t->start >= 2);
            CHECK(t->next == i + 1 && t->count == 0);
            CHECK(t->escaped == (memchr(data + t->start + 1, '\\', t->end - t->start - 2) != NULL));
            break;
        case VSR_JSON_NUMBER: {
            CHECK(t->next == i + 1 && t->count == 0);
            double d;
            CHECK(vsr_json_number(j, i, &d) == VSR_OK);
            break;
        }
        case VSR_JSON_TRUE:
        case VSR_JSON_FALSE:
            CHECK(t->next == i + 1 && t->count == 0);
            CHECK(vsr_json_bool(j, i) == (t->type == VSR_JSON_TRUE));
            break;
        case VSR_JSON_NULL:
            CHECK(t->next == i + 1 && t->count == 0);
            CHECK(t->end - t->start == 4);
            break;
        default:
            CHECK(0);
        }
    }
}

static void check_strings_and_keys(const vsr_json_t *j)
{
    vsr_pool_t pool;
    vsr_pool_init(&pool);
    for (uint32_t i = 0; i < j->ntoks; i++) {
        const vsr_json_tok_t *t = &j->toks[i];
        if (t->type == VSR_JSON_STRING) {
            vsr_slice_t s;
            CHECK(vsr_json_string(j, i, &pool, &s) == VSR_OK);
            CHECK(s.len <= (size_t)(t->end - t->start - 2));
            if (!t->escaped)
                CHECK(s.p == j->src + t->start + 1);
            CHECK(vsr_json_string_eq(j, i, s));
            if (s.len > 0)
                CHECK(!vsr_json_string_eq(j, i, vsr_slice(s.p, s.len - 1)));
        } else if (t->type == VSR_JSON_OBJECT && t->count <= 64) {
            uint32_t c = i + 1;
            for (uint32_t k = 0; k < t->count; k++) {
                vsr_slice_t key;
                CHECK(vsr_json_string(j, c, &pool, &key) == VSR_OK);
                /* object_get takes a C string: skip keys with a NUL */
                if (memchr(key.p, '\0', key.len) == NULL) {
                    char *ks = vsr_pool_strndup(&pool, key.p, key.len);
                    uint32_t v = UINT32_MAX;
                    CHECK(vsr_json_object_get(j, i, ks, &v) == VSR_OK);
                    /* last wins: v is the value of this key or a later equal key */
                    CHECK(v >= c + 1 && v < t->next);
                    CHECK(vsr_json_string_eq(j, v - 1, key));
                }
                c = j->toks[c + 1].next;
            }
        }
    }
    vsr_pool_free(&pool);
}

/* The reference: every pair of names of every object, in document order. */
static void check_duplicates(const vsr_json_t *j)
{
    vsr_pool_t pool;
    vsr_pool_init(&pool);
    int want = 0;
    for (uint32_t i = 0; i < j->ntoks && !want; i++) {
        const vsr_json_tok_t *t = &j->toks[i];
        if (t->type != VSR_JSON_OBJECT)
            continue;
        for (uint32_t b = i + 1, nb = 0; nb < t->count && !want; nb++, b = j->toks[b + 1].next) {
            vsr_slice_t kb;
            vsr_json_string(j, b, &pool, &kb);
            for (uint32_t a = i + 1; a < b && !want; a = j->toks[a + 1].next)
                want = vsr_json_string_eq(j, a, kb);
        }
    }
    uint32_t k = UINT32_MAX;
    int got = vsr_json_find_duplicate_key(j, &k);
    CHECK(got == want);
    if (got)
        CHECK(k < j->ntoks && j->toks[k].type == VSR_JSON_STRING);
    vsr_pool_free(&pool);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    vsr_json_t j;
    int rc = vsr_json_parse(&j, (const char *)data, size, NULL);

    uint32_t ref_ntoks = 0;
    int ref = ref_validate(data, size, &ref_ntoks);
    if (ref == 1) {
        if (rc != VSR_OK)
            fprintf(stderr, "fuzz_json: rejected valid input at %zu: %s\n", j.err_offset, j.err_msg);
        CHECK(rc == VSR_OK);
        CHECK(j.ntoks == ref_ntoks);
    } else if (ref == -1) {
        CHECK(rc == VSR_ERR_TOO_BIG);
    } else {
        CHECK(rc == VSR_ERR_INVALID);
    }

    if (rc == VSR_OK) {
        check_tokens(&j, data, size);
        check_strings_and_keys(&j);
        check_duplicates(&j);
    } else {
        CHECK(j.err_msg != NULL);
        CHECK(j.err_offset <= size);
        CHECK(j.ntoks == 0);
    }

    /* Tight limits: the same answer, or TOO_BIG in place of success. */
    vsr_json_t k;
    vsr_json_limits_t lim = {.max_depth = 3, .max_tokens = 8};
    int rc2 = vsr_json_parse(&k, (const char *)data, size, &lim);
    if (rc2 == VSR_OK) {
        CHECK(rc == VSR_OK);
        CHECK(k.ntoks == j.ntoks && k.ntoks <= 8);
        for (uint32_t i = 0; i < k.ntoks; i++) {
            const vsr_json_tok_t *a = &k.toks[i], *b = &j.toks[i];
            CHECK(a->start == b->start && a->end == b->end && a->next == b->next &&
                  a->count == b->count && a->type == b->type && a->escaped == b->escaped);
        }
    } else if (rc2 == VSR_ERR_INVALID) {
        CHECK(rc == VSR_ERR_INVALID);
        CHECK(k.err_offset == j.err_offset);
    } else {
        CHECK(rc2 == VSR_ERR_TOO_BIG);
    }
    vsr_json_free(&k);
    vsr_json_free(&j);
    vsr_json_free(&j);
    return 0;
}
