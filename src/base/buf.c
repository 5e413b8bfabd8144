/* buf.c — bounded growable byte buffers. */
#include "base/base.h"

#include <stdio.h>

void vsr_buf_init(vsr_buf_t *b, size_t cap)
{
    b->data = NULL;
    b->len = 0;
    b->alloc = 0;
    b->cap = cap ? cap : SIZE_MAX;
}

void vsr_buf_free(vsr_buf_t *b)
{
    vsr_free(b->data);
    b->data = NULL;
    b->len = b->alloc = 0;
}

void vsr_buf_reset(vsr_buf_t *b)
{
    b->len = 0;
}

int vsr_buf_reserve(vsr_buf_t *b, size_t extra)
{
    if (extra > b->cap - b->len)
        return VSR_ERR_TOO_BIG;
    size_t need = b->len + extra;
    if (need + 1 <= b->alloc)
        return VSR_OK;
    size_t n = b->alloc ? b->alloc : 256;
    while (n < need + 1)
        n = n > SIZE_MAX / 2 ? need + 1 : n * 2;
    b->data = vsr_realloc(b->data, n);
    b->alloc = n;
    return VSR_OK;
}

int vsr_buf_append(vsr_buf_t *b, const void *p, size_t n)
{
    if (vsr_buf_reserve(b, n) != VSR_OK)
        return VSR_ERR_TOO_BIG;
    if (n)
        memcpy(b->data + b->len, p, n);
    b->len += n;
    b->data[b->len] = '\0'; /* convenience for debugging; not part of the contract */
    return VSR_OK;
}

int vsr_buf_append_slice(vsr_buf_t *b, vsr_slice_t s)
{
    return vsr_buf_append(b, s.p, s.len);
}

int vsr_buf_append_cstr(vsr_buf_t *b, const char *s)
{
    return vsr_buf_append(b, s, strlen(s));
}

int vsr_buf_printf(vsr_buf_t *b, const char *fmt, ...)
{
    va_list ap;
    char small[256];
    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof(small), fmt, ap);
    va_end(ap);
    if (n < 0)
        return VSR_ERR;
    if ((size_t)n < sizeof(small))
        return vsr_buf_append(b, small, (size_t)n);
    if (vsr_buf_reserve(b, (size_t)n) != VSR_OK)
        return VSR_ERR_TOO_BIG;
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
    return VSR_OK;
}

void vsr_buf_consume(vsr_buf_t *b, size_t n)
{
    VSR_BUG_ON(n > b->len);
    if (n == b->len) {
        b->len = 0;
        return;
    }
    memmove(b->data, b->data + n, b->len - n);
    b->len -= n;
}

/* The bytes a JSON string escapes (RFC 8259): the quote, the backslash and
 * the control bytes; the writer's and the JSON scanner's. */
const uint8_t vsr__json_special[256] = {
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, /* '"' */
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, /* '\\' */
};

/* Length of the valid UTF-8 sequence at s[0..n), or 0 when it is not one
 * (overlong forms, surrogates and code points past U+10FFFF included). */
size_t vsr_utf8_seq(const unsigned char *s, size_t n)
{
    unsigned char c = s[0];
    if (c < 0x80)
        return 1;
    size_t len;
    unsigned char lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF)
        len = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        if (c == 0xE0)
            lo = 0xA0;
        else if (c == 0xED)
            hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        if (c == 0xF0)
            lo = 0x90;
        else if (c == 0xF4)
            hi = 0x8F;
    } else {
        return 0;
    }
    if (n < len)
        return 0;
    if (s[1] < lo || s[1] > hi)
        return 0;
    for (size_t i = 2; i < len; i++)
        if (s[i] < 0x80 || s[i] > 0xBF)
            return 0;
    return len;
}

int vsr_utf8_valid(vsr_slice_t s)
{
    if (s.len == 0)
        return 1; /* also an empty slice at NULL, where p + 0 is not defined */
    const unsigned char *p = (const unsigned char *)s.p, *end = p + s.len;
    while (p < end) {
        if (*p < 0x80) { /* a run of ASCII, 32 bytes at a time */
            uint64_t w[4];
            while (end - p >= 32 && (memcpy(w, p, 32), ((w[0] | w[1] | w[2] | w[3]) & 0x8080808080808080ull) == 0))
                p += 32;
            while (p < end && *p < 0x80)
                p++;
            continue;
        }
        do { /* a run of sequences, the common ones inline */
            unsigned char c = *p;
            if (c >= 0xE1 && c <= 0xEF && c != 0xED && end - p >= 3 && (p[1] & 0xC0) == 0x80 && (p[2] & 0xC0) == 0x80) {
                p += 3; /* three bytes, no surrogate or overlong form possible */
            } else if (c >= 0xC2 && c <= 0xDF && end - p >= 2 && (p[1] & 0xC0) == 0x80) {
                p += 2;
            } else {
                size_t n = vsr_utf8_seq(p, (size_t)(end - p));
                if (n == 0)
                    return 0;
                p += n;
            }
        } while (p < end && *p >= 0x80);
    }
    return 1;
}

size_t vsr_utf8_repair(const char *s, size_t n, char *out)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        size_t k = p[i] < 0x80 ? 1 : vsr_utf8_seq(p + i, n - i);
        memcpy(out + o, k ? s + i : "\xEF\xBF\xBD", k ? k : 3);
        o += k ? k : 3;
        i += k ? k : 1;
    }
    return o;
}

/* The bytes the escape of c adds to it: \" \\ \n \r \t \b \f add one,
 * other controls (\u00XX) five. */
static inline size_t escape_extra(unsigned char c)
{
    return (c == '"' || c == '\\' || c == '\n' || c == '\r' || c == '\t' || c == '\b' || c == '\f') ? 1 : 5;
}

/* The escape of a byte vsr__json_special marks, written at d. */
static char *put_escape(char *d, unsigned char c)
{
    static const char hex[] = "0123456789abcdef";
    *d++ = '\\';
    switch (c) {
    case '"': *d++ = '"'; break;
    case '\\': *d++ = '\\'; break;
    case '\n': *d++ = 'n'; break;
    case '\r': *d++ = 'r'; break;
    case '\t': *d++ = 't'; break;
    case '\b': *d++ = 'b'; break;
    case '\f': *d++ = 'f'; break;
    default:
        d[0] = 'u', d[1] = '0', d[2] = '0', d[3] = hex[c >> 4], d[4] = hex[c & 15];
        d += 5;
    }
    return d;
}

/* A string that is not UTF-8, written with U+FFFD for each byte outside a
 * valid sequence (the slow path: a backend's or a client's broken bytes). */
static const char fffd[3] = {(char)0xEF, (char)0xBF, (char)0xBD};

static size_t repaired_size(vsr_slice_t s)
{
    const unsigned char *p = (const unsigned char *)s.p;
    size_t n = 2;
    for (size_t i = 0; i < s.len;) {
        if (p[i] >= 0x80) {
            size_t k = vsr_utf8_seq(p + i, s.len - i);
            n += k ? k : 3;
            i += k ? k : 1;
            continue;
        }
        n += 1 + (vsr__json_special[p[i]] ? escape_extra(p[i]) : 0);
        i++;
    }
    return n;
}

static char *repaired_put(char *d, vsr_slice_t s)
{
    const unsigned char *p = (const unsigned char *)s.p;
    *d++ = '"';
    for (size_t i = 0; i < s.len;) {
        if (p[i] >= 0x80) {
            size_t k = vsr_utf8_seq(p + i, s.len - i);
            memcpy(d, k ? s.p + i : fffd, k ? k : 3);
            d += k ? k : 3;
            i += k ? k : 1;
            continue;
        }
        if (vsr__json_special[p[i]])
            d = put_escape(d, p[i]);
        else
            *d++ = (char)p[i];
        i++;
    }
    *d++ = '"';
    return d;
}

/* The writer for valid UTF-8: the escapes alone. */
static size_t valid_size(vsr_slice_t s)
{
    const uint8_t *p = (const uint8_t *)s.p;
    size_t n = s.len + 2;
    for (size_t i = vsr_json_find_special(p, 0, s.len); i < s.len; i = vsr_json_find_special(p, i + 1, s.len))
        n += escape_extra(p[i]);
    return n;
}

static char *valid_put(char *d, vsr_slice_t s)
{
    const uint8_t *p = (const uint8_t *)s.p;
    *d++ = '"';
    size_t start = 0;
    for (size_t i = vsr_json_find_special(p, 0, s.len); i < s.len; i = vsr_json_find_special(p, i + 1, s.len)) {
        unsigned char c = p[i];
        memcpy(d, s.p + start, i - start);
        d += i - start;
        start = i + 1;
        d = put_escape(d, c);
    }
    if (s.len > start) { /* s may be VSR_SLICE_NULL */
        memcpy(d, s.p + start, s.len - start);
        d += s.len - start;
    }
    *d++ = '"';
    return d;
}

size_t vsr_json_string_size(vsr_slice_t s)
{
    return vsr_utf8_valid(s) ? valid_size(s) : repaired_size(s);
}

char *vsr_json_string_put(char *d, vsr_slice_t s)
{
    return vsr_utf8_valid(s) ? valid_put(d, s) : repaired_put(d, s);
}

int vsr_buf_append_json_string(vsr_buf_t *b, vsr_slice_t s)
{
    int valid = vsr_utf8_valid(s); /* once for both passes */
    size_t n = valid ? valid_size(s) : repaired_size(s);
    if (vsr_buf_reserve(b, n) != VSR_OK)
        return VSR_ERR_TOO_BIG;
    char *end = valid ? valid_put(b->data + b->len, s) : repaired_put(b->data + b->len, s);
    VSR_BUG_ON((size_t)(end - (b->data + b->len)) != n);
    b->len += n;
    b->data[b->len] = '\0'; /* as vsr_buf_append does */
    return VSR_OK;
}
