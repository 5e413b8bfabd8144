/*
 * proto-int.h — private to proto/: what the format codecs share.
 *
 * The writer: output appended to a caller's buffer, the first error kept
 * (w->rc) and every later write skipped, so a codec writes a whole document
 * and checks once.
 *
 * Reading: the codecs' short spellings of json.h's member helpers
 * (vsr_json_member, vsr_json_is, vsr_json_absent, vsr_json_str_is) and of
 * a token's bytes, over a codec's context c holding its parsed document in
 * c->j and its writer in c->w.  One definition for the codecs.
 */
#ifndef VSR_PROTO_INT_H
#define VSR_PROTO_INT_H

#include "json/json.h"

/* ---- the writer ---- */
typedef struct {
    vsr_buf_t *b;
    int rc;
} w_t;

static inline void put(w_t *w, const char *p, size_t n)
{
    if (w->rc == VSR_OK && n > 0)
        w->rc = vsr_buf_append(w->b, p, n);
}
/* lit must be a string literal ("" lit refuses anything else) */
#define PUT(w, lit) put((w), "" lit, sizeof(lit) - 1)

static inline void put_slice(w_t *w, vsr_slice_t s)
{
    put(w, s.p, s.len);
}

/* s as a JSON string literal */
static inline void put_str(w_t *w, vsr_slice_t s)
{
    if (w->rc == VSR_OK)
        w->rc = vsr_buf_append_json_string(w->b, s);
}

static inline void put_u64(w_t *w, uint64_t v)
{
    char tmp[VSR_U64_DIGITS];
    put(w, tmp, vsr_fmt_u64(tmp, v, 0));
}

/* ---- reading c->j ---- */
#define get(c, t, key) vsr_json_member(&(c)->j, (t), (key))
#define is(c, t, type) vsr_json_is(&(c)->j, (t), (type))
#define absent(c, t) vsr_json_absent(&(c)->j, (t))
#define str_is(c, t, s) vsr_json_str_is(&(c)->j, (t), (s))
/* token t's bytes, as they are, to c->w */
#define raw(c, t) put_slice(&(c)->w, vsr_json_raw(&(c)->j, (t)))
#define next_sib(c, t) ((c)->j.toks[(t)].next)
/* The raw body of string token t, without its quotes. */
static inline vsr_slice_t str_inner(const vsr_json_t *j, uint32_t t)
{
    vsr_slice_t r = vsr_json_raw(j, t);
    return vsr_slice(r.p + 1, r.len - 2);
}
#define inner(c, t) str_inner(&(c)->j, (t))

/* A non-negative integer value (at most 9e15), or -1. */
static inline int64_t int_value(const vsr_json_t *j, uint32_t t)
{
    double d;
    if (!vsr_json_is(j, t, VSR_JSON_NUMBER) || vsr_json_number(j, t, &d) != VSR_OK || !(d >= 0) || d > 9.0e15 ||
        d != (double)(int64_t)d)
        return -1;
    return (int64_t)d;
}
#define int_of(c, t) int_value(&(c)->j, (t))

/* ---- inputs and error messages ---- */
/* JSON is UTF-8 (RFC 8259 §8.1): what a translation writes must be too, so
 * each stray byte of an input that is not becomes U+FFFD (it can only be
 * inside a string, or the parse fails as it would have); *body and *len then
 * name the repaired copy, in pool. */
static inline void utf8_repair_in(vsr_pool_t *pool, const char **body, size_t *len)
{
    if (vsr_utf8_valid(vsr_slice(*body, *len)))
        return;
    char *fixed = vsr_pool_alloc(pool, 3 * *len + 1);
    *len = vsr_utf8_repair(*body, *len, fixed);
    *body = fixed;
}

/* String token t quoted in an error message: valid UTF-8, at most 40 bytes,
 * in pool, its control bytes, '"' and the bytes of also (NULL: none) made
 * '?'; "?" when t is not a string. */
static inline const char *client_quote(const vsr_json_t *j, uint32_t t, vsr_pool_t *pool, const char *also)
{
    vsr_slice_t s = VSR_SLICE_NULL;
    if (vsr_json_type(j, t) != VSR_JSON_STRING || vsr_json_string(j, t, pool, &s) != VSR_OK)
        return "?";
    vsr_buf_t b;
    vsr_buf_init(&b, 64);
    vsr_json_append_client_text(&b, s, 40);
    char *r = vsr_pool_strndup(pool, b.data ? b.data : "", b.len);
    vsr_buf_free(&b);
    for (char *q = r; *q; q++)
        if ((unsigned char)*q < 0x20 || *q == '"' || (also && strchr(also, *q)))
            *q = '?';
    return r;
}

#endif /* VSR_PROTO_INT_H */
