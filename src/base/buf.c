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

/* The bytes the escape of c adds to it: \" \\ \n \r \t \b \f add one,
 * other controls (\u00XX) five. */
static inline size_t escape_extra(unsigned char c)
{
    return (c == '"' || c == '\\' || c == '\n' || c == '\r' || c == '\t' || c == '\b' || c == '\f') ? 1 : 5;
}

size_t vsr_json_string_size(vsr_slice_t s)
{
    const uint8_t *p = (const uint8_t *)s.p;
    size_t n = s.len + 2;
    for (size_t i = vsr_json_find_special(p, 0, s.len); i < s.len; i = vsr_json_find_special(p, i + 1, s.len))
        n += escape_extra(p[i]);
    return n;
}

char *vsr_json_string_put(char *d, vsr_slice_t s)
{
    static const char hex[] = "0123456789abcdef";
    const uint8_t *p = (const uint8_t *)s.p;
    *d++ = '"';
    size_t start = 0;
    for (size_t i = vsr_json_find_special(p, 0, s.len); i < s.len; i = vsr_json_find_special(p, i + 1, s.len)) {
        unsigned char c = p[i];
        memcpy(d, s.p + start, i - start);
        d += i - start;
        start = i + 1;
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
    }
    if (s.len > start) { /* s may be VSR_SLICE_NULL */
        memcpy(d, s.p + start, s.len - start);
        d += s.len - start;
    }
    *d++ = '"';
    return d;
}

int vsr_buf_append_json_string(vsr_buf_t *b, vsr_slice_t s)
{
    size_t n = vsr_json_string_size(s);
    if (vsr_buf_reserve(b, n) != VSR_OK)
        return VSR_ERR_TOO_BIG;
    char *end = vsr_json_string_put(b->data + b->len, s);
    VSR_BUG_ON((size_t)(end - (b->data + b->len)) != n);
    b->len += n;
    b->data[b->len] = '\0'; /* as vsr_buf_append does */
    return VSR_OK;
}
