/*
 * json.c — single-pass strict validator/tokenizer and the accessors over
 * its token array.  See json.h for the contract.
 *
 * The parser is an explicit state machine over an explicit stack of open
 * containers (no recursion, so hostile nesting costs heap, bounded by
 * max_depth, never C stack).  String bodies dominate real request bodies
 * (prompts), so they are scanned 16 bytes at a time with SSE2 where
 * available and 8 bytes at a time (SWAR) elsewhere.
 */
#include "json/json.h"

#include <stdlib.h>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#define JSON_DEFAULT_MAX_DEPTH 512u
/* Initial token capacity: request bodies are mostly long strings with few
 * tokens, so start small relative to the input and cap the first
 * allocation; geometric growth amortizes the dense cases. */
#define JSON_INITIAL_TOKS_DIV 16u
#define JSON_INITIAL_TOKS_MIN 16u
#define JSON_INITIAL_TOKS_MAX 4096u
#define JSON_INLINE_STACK 64u


static const int8_t hex_val[256] = {
    -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
    -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
    -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
    0,  1,  2,  3,  4,  5,  6,  7,  8,  9,  -1, -1, -1, -1, -1, -1,
    -1, 10, 11, 12, 13, 14, 15, -1, -1, -1, -1, -1, -1, -1, -1, -1,
    -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
    -1, 10, 11, 12, 13, 14, 15, -1, -1, -1, -1, -1, -1, -1, -1, -1,
    -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
    -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
    -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
    -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
    -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
    -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
    -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
    -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
    -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
};

static inline int is_digit(uint8_t c)
{
    return (unsigned)(c - '0') < 10u;
}

static inline int is_ws(uint8_t c)
{
    return c == ' ' || c == '\n' || c == '\r' || c == '\t';
}

static inline size_t skip_ws(const uint8_t *s, size_t pos, size_t len)
{
    while (pos < len && is_ws(s[pos]))
        pos++;
    return pos;
}


typedef enum {
    ST_VALUE,       /* a value must come next */
    ST_AFTER_VALUE, /* a value just ended: ',' or a closer, or the end at depth 0 */
    ST_KEY,         /* an object key must come next (after ',') */
} parse_state_t;

typedef struct {
    const uint8_t *s;
    size_t len;
    vsr_json_tok_t *toks;
    uint32_t ntoks;
    uint32_t cap;
    uint32_t max_tokens;
    size_t err_offset;
    const char *err_msg;
    int err;
} parser_t;

static int fail(parser_t *p, int code, size_t off, const char *msg)
{
    p->err = code;
    p->err_offset = off;
    p->err_msg = msg;
    return code;
}

static void grow_toks(parser_t *p)
{
    uint64_t ncap = (uint64_t)p->cap * 2;
    if (ncap > UINT32_MAX)
        ncap = UINT32_MAX;
    p->toks = vsr_realloc(p->toks, (size_t)ncap * sizeof(*p->toks));
    p->cap = (uint32_t)ncap;
}

/* Appends a token; returns its index, or UINT32_MAX when the token limit
 * is hit (p->err set). */
static inline uint32_t new_tok(parser_t *p, vsr_json_type_t type, size_t start)
{
    if (VSR_UNLIKELY(p->max_tokens && p->ntoks >= p->max_tokens)) {
        fail(p, VSR_ERR_TOO_BIG, start, "too many tokens");
        return UINT32_MAX;
    }
    if (VSR_UNLIKELY(p->ntoks == p->cap))
        grow_toks(p);
    uint32_t t = p->ntoks++;
    vsr_json_tok_t *tok = &p->toks[t];
    tok->start = (uint32_t)start;
    tok->end = (uint32_t)start;
    tok->next = t + 1;
    tok->count = 0;
    tok->type = (uint8_t)type;
    tok->escaped = 0;
    return t;
}

/* Scans the string whose opening quote is at pos.  Returns the offset past
 * the closing quote, or 0 on error (p->err set). */
static inline size_t scan_string(parser_t *p, size_t pos, uint8_t *escaped)
{
    const uint8_t *s = p->s;
    size_t len = p->len;
    pos++;
    for (;;) {
        pos = vsr_json_find_special(s, pos, len);
        if (VSR_UNLIKELY(pos >= len)) {
            fail(p, VSR_ERR_INVALID, len, "unterminated string");
            return 0;
        }
        uint8_t c = s[pos];
        if (VSR_LIKELY(c == '"'))
            return pos + 1;
        if (c == '\\') {
            *escaped = 1;
            if (pos + 1 >= len) {
                fail(p, VSR_ERR_INVALID, len, "unterminated string");
                return 0;
            }
            switch (s[pos + 1]) {
            case '"': case '\\': case '/': case 'b': case 'f': case 'n': case 'r': case 't':
                pos += 2;
                continue;
            case 'u':
                if (len - pos < 6) {
                    fail(p, VSR_ERR_INVALID, len, "unterminated string");
                    return 0;
                }
                if ((hex_val[s[pos + 2]] | hex_val[s[pos + 3]] | hex_val[s[pos + 4]] |
                     hex_val[s[pos + 5]]) < 0) {
                    fail(p, VSR_ERR_INVALID, pos, "invalid \\u escape");
                    return 0;
                }
                pos += 6;
                continue;
            default:
                fail(p, VSR_ERR_INVALID, pos, "invalid escape");
                return 0;
            }
        }
        fail(p, VSR_ERR_INVALID, pos, "control character in string");
        return 0;
    }
}

/* Scans the number starting at pos (a '-' or a digit).  Returns the offset
 * past it, or 0 on error (p->err set). */
static inline size_t scan_number(parser_t *p, size_t pos)
{
    const uint8_t *s = p->s;
    size_t len = p->len;
    if (s[pos] == '-')
        pos++;
    if (pos >= len || !is_digit(s[pos])) {
        fail(p, VSR_ERR_INVALID, pos, "expected a digit");
        return 0;
    }
    if (s[pos] == '0') {
        pos++;
        if (pos < len && is_digit(s[pos])) {
            fail(p, VSR_ERR_INVALID, pos, "leading zero in number");
            return 0;
        }
    } else {
        while (pos < len && is_digit(s[pos]))
            pos++;
    }
    if (pos < len && s[pos] == '.') {
        pos++;
        if (pos >= len || !is_digit(s[pos])) {
            fail(p, VSR_ERR_INVALID, pos, "expected a digit after '.'");
            return 0;
        }
        while (pos < len && is_digit(s[pos]))
            pos++;
    }
    if (pos < len && (s[pos] == 'e' || s[pos] == 'E')) {
        pos++;
        if (pos < len && (s[pos] == '+' || s[pos] == '-'))
            pos++;
        if (pos >= len || !is_digit(s[pos])) {
            fail(p, VSR_ERR_INVALID, pos, "expected a digit in exponent");
            return 0;
        }
        while (pos < len && is_digit(s[pos]))
            pos++;
    }
    return pos;
}

/* Matches the literal lit (true/false/null) at pos.  Returns the offset
 * past it, or 0 on error. */
static inline size_t scan_literal(parser_t *p, size_t pos, const char *lit, size_t n)
{
    if (p->len - pos < n || memcmp(p->s + pos, lit, n) != 0) {
        fail(p, VSR_ERR_INVALID, pos, "invalid literal");
        return 0;
    }
    return pos + n;
}

static int parse(parser_t *p, uint32_t max_depth)
{
    const uint8_t *s = p->s;
    const size_t len = p->len;
    uint32_t inline_stack[JSON_INLINE_STACK];
    uint32_t *stack = inline_stack;
    uint32_t stack_cap = JSON_INLINE_STACK;
    uint32_t depth = 0;
    int in_object = 0; /* the innermost open container is an object */
    parse_state_t st = ST_VALUE;
    size_t pos = 0;
    uint32_t t;

    for (;;) {
        switch (st) {
        case ST_VALUE:
            pos = skip_ws(s, pos, len);
            if (VSR_UNLIKELY(pos >= len)) {
                fail(p, VSR_ERR_INVALID, len, depth ? "unexpected end of input, expected a value"
                                                    : "empty document");
                goto out;
            }
            if (depth && !in_object)
                p->toks[stack[depth - 1]].count++;
            switch (s[pos]) {
            case '"':
                if ((t = new_tok(p, VSR_JSON_STRING, pos)) == UINT32_MAX)
                    goto out;
                if ((pos = scan_string(p, pos, &p->toks[t].escaped)) == 0)
                    goto out;
                p->toks[t].end = (uint32_t)pos;
                st = ST_AFTER_VALUE;
                break;
            case '-': case '0': case '1': case '2': case '3': case '4':
            case '5': case '6': case '7': case '8': case '9':
                if ((t = new_tok(p, VSR_JSON_NUMBER, pos)) == UINT32_MAX)
                    goto out;
                if ((pos = scan_number(p, pos)) == 0)
                    goto out;
                p->toks[t].end = (uint32_t)pos;
                st = ST_AFTER_VALUE;
                break;
            case 't':
                if ((t = new_tok(p, VSR_JSON_TRUE, pos)) == UINT32_MAX)
                    goto out;
                if ((pos = scan_literal(p, pos, "true", 4)) == 0)
                    goto out;
                p->toks[t].end = (uint32_t)pos;
                st = ST_AFTER_VALUE;
                break;
            case 'f':
                if ((t = new_tok(p, VSR_JSON_FALSE, pos)) == UINT32_MAX)
                    goto out;
                if ((pos = scan_literal(p, pos, "false", 5)) == 0)
                    goto out;
                p->toks[t].end = (uint32_t)pos;
                st = ST_AFTER_VALUE;
                break;
            case 'n':
                if ((t = new_tok(p, VSR_JSON_NULL, pos)) == UINT32_MAX)
                    goto out;
                if ((pos = scan_literal(p, pos, "null", 4)) == 0)
                    goto out;
                p->toks[t].end = (uint32_t)pos;
                st = ST_AFTER_VALUE;
                break;
            case '{':
            case '[': {
                int obj = s[pos] == '{';
                if (VSR_UNLIKELY(depth >= max_depth)) {
                    fail(p, VSR_ERR_TOO_BIG, pos, "nesting too deep");
                    goto out;
                }
                if ((t = new_tok(p, obj ? VSR_JSON_OBJECT : VSR_JSON_ARRAY, pos)) == UINT32_MAX)
                    goto out;
                if (VSR_UNLIKELY(depth == stack_cap)) {
                    uint32_t ncap = stack_cap * 2;
                    if (stack == inline_stack) {
                        stack = vsr_malloc(ncap * sizeof(*stack));
                        memcpy(stack, inline_stack, sizeof(inline_stack));
                    } else {
                        stack = vsr_realloc(stack, ncap * sizeof(*stack));
                    }
                    stack_cap = ncap;
                }
                stack[depth++] = t;
                in_object = obj;
                pos = skip_ws(s, pos + 1, len);
                if (pos < len && s[pos] == (obj ? '}' : ']')) {
                    p->toks[t].end = (uint32_t)(pos + 1);
                    p->toks[t].next = p->ntoks;
                    pos++;
                    depth--;
                    in_object = depth && p->toks[stack[depth - 1]].type == VSR_JSON_OBJECT;
                    st = ST_AFTER_VALUE;
                } else {
                    st = obj ? ST_KEY : ST_VALUE;
                }
                break;
            }
            default:
                fail(p, VSR_ERR_INVALID, pos, "expected a value");
                goto out;
            }
            break;

        case ST_KEY:
            pos = skip_ws(s, pos, len);
            if (VSR_UNLIKELY(pos >= len)) {
                fail(p, VSR_ERR_INVALID, len, "unterminated object");
                goto out;
            }
            if (VSR_UNLIKELY(s[pos] != '"')) {
                fail(p, VSR_ERR_INVALID, pos, "expected a string key");
                goto out;
            }
            p->toks[stack[depth - 1]].count++;
            if ((t = new_tok(p, VSR_JSON_STRING, pos)) == UINT32_MAX)
                goto out;
            if ((pos = scan_string(p, pos, &p->toks[t].escaped)) == 0)
                goto out;
            p->toks[t].end = (uint32_t)pos;
            pos = skip_ws(s, pos, len);
            if (VSR_UNLIKELY(pos >= len || s[pos] != ':')) {
                fail(p, VSR_ERR_INVALID, pos, "expected ':' after object key");
                goto out;
            }
            pos++;
            st = ST_VALUE;
            break;

        case ST_AFTER_VALUE:
            if (depth == 0) {
                pos = skip_ws(s, pos, len);
                if (pos != len)
                    fail(p, VSR_ERR_INVALID, pos, "unexpected data after the top-level value");
                goto out;
            }
            pos = skip_ws(s, pos, len);
            if (VSR_UNLIKELY(pos >= len)) {
                fail(p, VSR_ERR_INVALID, len, in_object ? "unterminated object" : "unterminated array");
                goto out;
            }
            if (s[pos] == ',') {
                pos++;
                st = in_object ? ST_KEY : ST_VALUE;
            } else if (s[pos] == (in_object ? '}' : ']')) {
                t = stack[--depth];
                p->toks[t].end = (uint32_t)(pos + 1);
                p->toks[t].next = p->ntoks;
                pos++;
                in_object = depth && p->toks[stack[depth - 1]].type == VSR_JSON_OBJECT;
            } else {
                fail(p, VSR_ERR_INVALID, pos, in_object ? "expected ',' or '}'" : "expected ',' or ']'");
                goto out;
            }
            break;
        }
    }
out:
    if (stack != inline_stack)
        vsr_free(stack);
    return p->err;
}

int vsr_json_parse(vsr_json_t *j, const char *src, size_t len, const vsr_json_limits_t *limits)
{
    memset(j, 0, sizeof(*j));
    j->src = src;
    j->len = len;
    if ((uint64_t)len >= ((uint64_t)1 << 32)) {
        j->err_offset = 0;
        j->err_msg = "document too large";
        return VSR_ERR_TOO_BIG;
    }

    uint32_t max_depth = limits && limits->max_depth ? limits->max_depth : JSON_DEFAULT_MAX_DEPTH;
    parser_t p;
    memset(&p, 0, sizeof(p));
    p.s = (const uint8_t *)src;
    p.len = len;
    p.max_tokens = limits ? limits->max_tokens : 0;

    size_t cap = len / JSON_INITIAL_TOKS_DIV + JSON_INITIAL_TOKS_MIN;
    if (cap > JSON_INITIAL_TOKS_MAX)
        cap = JSON_INITIAL_TOKS_MAX;
    if (p.max_tokens && cap > p.max_tokens)
        cap = p.max_tokens;
    p.cap = (uint32_t)cap;
    p.toks = vsr_malloc(cap * sizeof(*p.toks));

    int rc = parse(&p, max_depth);
    if (rc != VSR_OK) {
        /* Partial tokens have unfinished links: never expose them. */
        vsr_free(p.toks);
        j->err_offset = p.err_offset;
        j->err_msg = p.err_msg;
        return rc;
    }
    j->toks = p.toks;
    j->ntoks = p.ntoks;
    j->_cap = p.cap;
    return VSR_OK;
}

void vsr_json_free(vsr_json_t *j)
{
    if (j == NULL)
        return;
    vsr_free(j->toks);
    j->toks = NULL;
    j->ntoks = 0;
    j->_cap = 0;
}

/* ---- accessors ----------------------------------------------------------- */

static size_t utf8_encode(uint32_t cp, char out[4])
{
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xc0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xe0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        out[2] = (char)(0x80 | (cp & 0x3f));
        return 3;
    }
    out[0] = (char)(0xf0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
    out[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

static uint32_t hex4(const char *p)
{
    const uint8_t *u = (const uint8_t *)p;
    return (uint32_t)(hex_val[u[0]] << 12 | hex_val[u[1]] << 8 | hex_val[u[2]] << 4 | hex_val[u[3]]);
}

/* Decodes the escape at p (a backslash) inside an already validated string
 * body ending at end.  Writes 1..4 bytes to out, sets *n, and returns how
 * many source bytes it consumed.  Surrogates follow Go's encoding/json: a
 * high surrogate escape immediately followed by a low one forms a pair;
 * any other surrogate becomes U+FFFD and the next escape stands alone. */
static size_t decode_escape(const char *p, const char *end, char out[4], size_t *n)
{
    switch (p[1]) {
    case 'b': out[0] = '\b'; break;
    case 'f': out[0] = '\f'; break;
    case 'n': out[0] = '\n'; break;
    case 'r': out[0] = '\r'; break;
    case 't': out[0] = '\t'; break;
    case 'u': {
        uint32_t cp = hex4(p + 2);
        size_t used = 6;
        if (cp >= 0xd800 && cp <= 0xdfff) {
            uint32_t lo;
            if (cp < 0xdc00 && end - (p + 6) >= 6 && p[6] == '\\' && p[7] == 'u' &&
                (lo = hex4(p + 8)) >= 0xdc00 && lo <= 0xdfff) {
                cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
                used = 12;
            } else {
                cp = 0xfffd;
            }
        }
        *n = utf8_encode(cp, out);
        return used;
    }
    default: /* '"', '\\', '/' */
        out[0] = p[1];
        break;
    }
    *n = 1;
    return 2;
}

static inline int is_string_tok(const vsr_json_t *j, uint32_t t)
{
    return j->toks && t < j->ntoks && j->toks[t].type == VSR_JSON_STRING;
}

/* Whether the unescaped body of string token t equals s[0..n). */
static int string_eq(const vsr_json_t *j, uint32_t t, const char *s, size_t n)
{
    const vsr_json_tok_t *tok = &j->toks[t];
    const char *p = j->src + tok->start + 1;
    const char *end = j->src + tok->end - 1;
    size_t raw = (size_t)(end - p);
    if (!tok->escaped)
        return raw == n && (n == 0 || memcmp(p, s, n) == 0);
    if (n > raw) /* unescaping never lengthens */
        return 0;
    size_t k = 0;
    while (p < end) {
        const char *bs = memchr(p, '\\', (size_t)(end - p));
        size_t run = (size_t)((bs ? bs : end) - p);
        if (run > n - k || (run && memcmp(p, s + k, run) != 0))
            return 0;
        k += run;
        p += run;
        if (p == end)
            break;
        char buf[4];
        size_t m;
        p += decode_escape(p, end, buf, &m);
        if (m > n - k || memcmp(buf, s + k, m) != 0)
            return 0;
        k += m;
    }
    return k == n;
}

int vsr__json_object_get_n(const vsr_json_t *j, uint32_t obj, const char *key, size_t klen, uint32_t *value)
{
    if (j->toks == NULL || obj >= j->ntoks || j->toks[obj].type != VSR_JSON_OBJECT)
        return VSR_ERR_NOT_FOUND;
    uint32_t n = j->toks[obj].count;
    uint32_t c = obj + 1;
    int found = 0;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t v = c + 1;
        if (string_eq(j, c, key, klen)) {
            *value = v;
            found = 1; /* keep going: the last duplicate wins */
        }
        c = j->toks[v].next;
    }
    return found ? VSR_OK : VSR_ERR_NOT_FOUND;
}

int vsr_json_string(const vsr_json_t *j, uint32_t t, vsr_pool_t *pool, vsr_slice_t *out)
{
    if (!is_string_tok(j, t))
        return VSR_ERR_INVALID;
    const vsr_json_tok_t *tok = &j->toks[t];
    const char *p = j->src + tok->start + 1;
    const char *end = j->src + tok->end - 1;
    if (!tok->escaped) {
        *out = vsr_slice(p, (size_t)(end - p));
        return VSR_OK;
    }
    char *dst = vsr_pool_alloc(pool, (size_t)(end - p) + 1);
    size_t w = 0;
    while (p < end) {
        const char *bs = memchr(p, '\\', (size_t)(end - p));
        size_t run = (size_t)((bs ? bs : end) - p);
        memcpy(dst + w, p, run);
        w += run;
        p += run;
        if (p == end)
            break;
        size_t m;
        p += decode_escape(p, end, dst + w, &m);
        w += m;
    }
    dst[w] = '\0';
    *out = vsr_slice(dst, w);
    return VSR_OK;
}

int vsr_json_string_eq(const vsr_json_t *j, uint32_t t, vsr_slice_t s)
{
    if (!is_string_tok(j, t))
        return 0;
    return string_eq(j, t, s.p, s.len);
}

int vsr_json_bool(const vsr_json_t *j, uint32_t t)
{
    if (j->toks == NULL || t >= j->ntoks)
        return VSR_ERR_INVALID;
    switch (j->toks[t].type) {
    case VSR_JSON_TRUE:
        return 1;
    case VSR_JSON_FALSE:
        return 0;
    default:
        return VSR_ERR_INVALID;
    }
}

int vsr_json_number(const vsr_json_t *j, uint32_t t, double *out)
{
    if (j->toks == NULL || t >= j->ntoks || j->toks[t].type != VSR_JSON_NUMBER)
        return VSR_ERR_INVALID;
    const vsr_json_tok_t *tok = &j->toks[t];
    size_t n = tok->end - tok->start;
    /* The source is not NUL-terminated (and the byte after the token may
     * be past the buffer), so strtod needs a terminated copy. */
    char small[64];
    char *buf = n < sizeof(small) ? small : vsr_malloc(n + 1);
    memcpy(buf, j->src + tok->start, n);
    buf[n] = '\0';
    *out = strtod(buf, NULL);
    if (buf != small)
        vsr_free(buf);
    return VSR_OK;
}
