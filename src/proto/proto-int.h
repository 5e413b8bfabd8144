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

#endif /* VSR_PROTO_INT_H */
