/*
 * json — a strict, zero-copy JSON view over a request body.
 *
 * vsr_json_parse() validates the whole document (RFC 8259: no comments, no
 * trailing commas, no leading zeros, no raw control bytes in strings, one
 * top-level value followed only by whitespace) in a single pass and records a
 * flat array of tokens in document order.  Tokens point into the source by
 * offset; nothing is copied.  Objects are key, value, key, value ...; each
 * token knows where its subtree ends (`next`), so siblings are walked in
 * O(1) each.  Invalid UTF-8 is accepted and kept as-is (as Go's decoder
 * does), so a body the reference router accepts is accepted here.
 */
#ifndef VSR_JSON_H
#define VSR_JSON_H

#include "base/base.h"

typedef enum {
    VSR_JSON_OBJECT = 1,
    VSR_JSON_ARRAY,
    VSR_JSON_STRING,
    VSR_JSON_NUMBER,
    VSR_JSON_TRUE,
    VSR_JSON_FALSE,
    VSR_JSON_NULL,
} vsr_json_type_t;

typedef struct {
    uint32_t start;  /* offset of the first byte (strings: the opening quote) */
    uint32_t end;    /* offset one past the last byte (strings: past the closing quote) */
    uint32_t next;   /* index of the token after this one's subtree */
    uint32_t count;  /* objects: members; arrays: elements; else 0 */
    uint8_t type;    /* vsr_json_type_t */
    uint8_t escaped; /* strings: contains a backslash escape */
} vsr_json_tok_t;

typedef struct {
    uint32_t max_depth;  /* 0 → the default, 512 */
    uint32_t max_tokens; /* 0 = unlimited */
} vsr_json_limits_t;

typedef struct {
    const char *src;
    size_t len;
    vsr_json_tok_t *toks;
    uint32_t ntoks;
    uint32_t _cap;
    size_t err_offset;   /* after VSR_ERR_INVALID / VSR_ERR_TOO_BIG: where */
    const char *err_msg; /* ... and why (static string) */
} vsr_json_t;

/* Parses src[0..len) (borrowed: it must outlive the view).  limits may be
 * NULL.  Returns VSR_OK, VSR_ERR_INVALID (malformed) or VSR_ERR_TOO_BIG
 * (depth, token count, or len >= 4 GiB).  Call vsr_json_free() in every case. */
int vsr_json_parse(vsr_json_t *j, const char *src, size_t len, const vsr_json_limits_t *limits);
void vsr_json_free(vsr_json_t *j);

static inline vsr_json_type_t vsr_json_type(const vsr_json_t *j, uint32_t t)
{
    return (vsr_json_type_t)j->toks[t].type;
}
/* The raw bytes of token t (strings include their quotes). */
static inline vsr_slice_t vsr_json_raw(const vsr_json_t *j, uint32_t t)
{
    return vsr_slice(j->src + j->toks[t].start, j->toks[t].end - j->toks[t].start);
}

/* Object member lookup by key, comparing unescaped keys.  On duplicate keys
 * the last one wins (as in Go's encoding/json).  Returns VSR_OK with *value
 * the value token, or VSR_ERR_NOT_FOUND (also when obj is not an object). */
int vsr_json_object_get(const vsr_json_t *j, uint32_t obj, const char *key, uint32_t *value);

/* Iteration: the first child of an object/array is t + 1 (objects: a key);
 * the sibling after child c is toks[c].next.  A container holds toks[t].count
 * children (objects: count keys, each followed by its value). */

/* The unescaped content of string token t.  Without escapes this is a slice
 * of the source (zero copy); with escapes the result is written into pool.
 * \u escapes become UTF-8; a lone surrogate becomes U+FFFD.  VSR_OK or
 * VSR_ERR_INVALID (t is not a string). */
int vsr_json_string(const vsr_json_t *j, uint32_t t, vsr_pool_t *pool, vsr_slice_t *out);
/* True when string token t equals s after unescaping (no allocation). */
int vsr_json_string_eq(const vsr_json_t *j, uint32_t t, vsr_slice_t s);
/* Boolean value of a true/false token: 1, 0, or VSR_ERR_INVALID. */
int vsr_json_bool(const vsr_json_t *j, uint32_t t);
/* Number token as double (strtod semantics on the token's bytes). */
int vsr_json_number(const vsr_json_t *j, uint32_t t, double *out);

#endif /* VSR_JSON_H */
