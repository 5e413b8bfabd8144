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
 *
 * A codec's open (its limits' defaults, the parse and the checks of its
 * document, each codec wording its own errors) and a translating stream's
 * skeleton (its states, feed and finish, the error event its own) are here
 * too, once.
 */
#ifndef VSR_PROTO_INT_H
#define VSR_PROTO_INT_H

#include "json/json.h"
#include "proto/sse.h"

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

/* ---- a codec's document and limits ---- */
/* A codec's limits: a caller's (NULL: none), each 0 made the codec's default
 * (P: the header's prefix, VSR_ANTHROPIC or VSR_RESPONSES) for the fields
 * every codec has; a codec fills its own after. */
#define LIMITS_FILL(l, in, P)                                                                                     \
    do {                                                                                                          \
        if (in)                                                                                                   \
            *(l) = *(in);                                                                                         \
        else                                                                                                      \
            memset((l), 0, sizeof(*(l)));                                                                         \
        if ((l)->max_input == 0)                                                                                  \
            (l)->max_input = P##_MAX_INPUT;                                                                       \
        if ((l)->max_depth == 0)                                                                                  \
            (l)->max_depth = P##_MAX_DEPTH;                                                                       \
        if ((l)->max_items == 0)                                                                                  \
            (l)->max_items = P##_MAX_ITEMS;                                                                       \
        if ((l)->max_event == 0)                                                                                  \
            (l)->max_event = P##_MAX_EVENT;                                                                       \
    } while (0)

/* Why an input is no document a codec reads (each codec words its own error). */
typedef enum {
    DOC_OK = 0,
    DOC_DEEP,       /* nested deeper than max_depth */
    DOC_MALFORMED,  /* not JSON: j->err_msg, j->err_offset say where */
    DOC_NOT_OBJECT, /* JSON, but no object at the top */
    DOC_DUPLICATE,  /* an object with a member twice: *dup is the second key's token */
} doc_rc_t;

/* The input parsed into j (freed by the caller, vsr_json_free, whatever the
 * result), its stray bytes first made U+FFFD (repair, in pool). */
static inline doc_rc_t doc_parse(vsr_json_t *j, vsr_pool_t *pool, const char *body, size_t len, uint32_t max_depth,
                                 int repair, uint32_t *dup)
{
    if (repair)
        utf8_repair_in(pool, &body, &len);
    vsr_json_limits_t jl = {.max_depth = max_depth, .max_tokens = 0};
    int rc = vsr_json_parse(j, body, len, &jl);
    if (rc == VSR_ERR_TOO_BIG)
        return DOC_DEEP;
    if (rc != VSR_OK)
        return DOC_MALFORMED;
    if (vsr_json_type(j, 0) != VSR_JSON_OBJECT)
        return DOC_NOT_OBJECT;
    if (vsr_json_find_duplicate_key(j, dup))
        return DOC_DUPLICATE;
    return DOC_OK;
}

/* ---- a translating stream (anthropic.c, responses.c) ----
 * Both read an upstream event stream (proto/sse.h) event by event and write
 * another; they share the states and the skeleton of feed and finish around
 * their own events.  Each stream struct has the same private fields (sse,
 * out, cb_rc, state): STREAM_CORE(s) names them. */
enum { ST_START = 0, ST_OPEN, ST_DONE, ST_FAILED };

typedef struct {
    vsr_sse_parser_t *sse;
    vsr_buf_t **out;  /* feed's out, for the events during the call */
    int *cb_rc;       /* an event's failure */
    int *state;
    void *s;          /* the stream, for the codec's own steps */
    /* writes the error event of the output's format and sets ST_FAILED */
    int (*fail)(void *s, w_t *w, int rc, const char *message);
} stream_core_t;
#define STREAM_CORE(st, fail_fn) ((stream_core_t){&(st)->sse, &(st)->out, &(st)->cb_rc, &(st)->state, (st), (fail_fn)})

/* An event's data without the blanks and line ends around it. */
static inline vsr_slice_t event_data(vsr_slice_t data)
{
    vsr_slice_t d = vsr_slice_trim(data);
    while (d.len && (d.p[d.len - 1] == '\n' || d.p[d.len - 1] == '\r'))
        d.len--;
    while (d.len && (d.p[0] == '\n' || d.p[0] == '\r'))
        d.p++, d.len--;
    return d;
}

/* An event of the upstream stream, to the codec's dispatch; what follows
 * the end is ignored. */
static inline int stream_event(stream_core_t k, vsr_slice_t data, int (*dispatch)(void *s, vsr_slice_t data,
                                                                                   vsr_buf_t *out))
{
    if (*k.state == ST_DONE || *k.state == ST_FAILED)
        return VSR_OK;
    int rc = dispatch(k.s, data, *k.out);
    if (rc != VSR_OK)
        *k.cb_rc = rc;
    return rc;
}

/* Upstream bytes in, translated events out; a line or an event past the
 * event limit fails the stream. */
static inline int stream_feed(stream_core_t k, const char *p, size_t n, vsr_buf_t *out)
{
    if (*k.state == ST_FAILED)
        return VSR_ERR_INVALID;
    if (*k.state == ST_DONE)
        return VSR_OK; /* what follows the end is ignored */
    *k.out = out;
    int rc = vsr_sse_feed(k.sse, p, n);
    *k.out = NULL;
    if (rc != VSR_OK && *k.cb_rc != VSR_OK)
        return *k.cb_rc; /* an event failed the stream */
    if (*k.state == ST_DONE)
        return VSR_OK;
    if (rc != VSR_OK) {
        w_t w = {out, VSR_OK};
        rc = k.fail(k.s, &w, VSR_ERR_TOO_BIG, "upstream sent an event larger than the limit");
        return w.rc != VSR_OK ? w.rc : rc;
    }
    return *k.state == ST_FAILED ? VSR_ERR_INVALID : VSR_OK;
}

/* The upstream stream ended: the codec's end (end_seen: its end event came;
 * end writes the last events and returns), else the stream fails. */
static inline int stream_finish(stream_core_t k, vsr_buf_t *out, int end_seen, int (*end)(void *s, w_t *w))
{
    if (*k.state == ST_DONE)
        return VSR_OK;
    if (*k.state == ST_FAILED)
        return VSR_ERR_INVALID;
    w_t w = {out, VSR_OK};
    if (end_seen)
        return end(k.s, &w);
    int rc = k.fail(k.s, &w, VSR_ERR_INVALID, "upstream stream ended before its end");
    return w.rc != VSR_OK ? w.rc : rc;
}

#endif /* VSR_PROTO_INT_H */
