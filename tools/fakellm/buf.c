#include "fakellm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void *fl_xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "fakellm: out of memory (%zu bytes)\n", n);
        abort();
    }
    return p;
}

void *fl_xrealloc(void *p, size_t n)
{
    void *q = realloc(p, n ? n : 1);
    if (!q) {
        fprintf(stderr, "fakellm: out of memory (%zu bytes)\n", n);
        abort();
    }
    return q;
}

void fl_buf_reserve_exact(fl_buf_t *b, size_t cap)
{
    if (b->cap >= cap)
        return;
    b->p = fl_xrealloc(b->p, cap);
    b->cap = cap;
}

void fl_buf_reserve(fl_buf_t *b, size_t extra)
{
    size_t need = b->len + extra;
    if (need <= b->cap)
        return;
    size_t cap = b->cap ? b->cap * 2 : 256;
    if (cap < need)
        cap = need;
    fl_buf_reserve_exact(b, cap);
}

void fl_buf_add(fl_buf_t *b, const void *p, size_t n)
{
    if (!n)
        return;
    fl_buf_reserve(b, n);
    memcpy(b->p + b->len, p, n);
    b->len += n;
}

void fl_buf_adds(fl_buf_t *b, const char *s)
{
    fl_buf_add(b, s, strlen(s));
}

void fl_buf_addc(fl_buf_t *b, char c)
{
    fl_buf_reserve(b, 1);
    b->p[b->len++] = c;
}

void fl_buf_addu(fl_buf_t *b, uint64_t v)
{
    char tmp[24];
    size_t i = sizeof tmp;
    do {
        tmp[--i] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    fl_buf_add(b, tmp + i, sizeof tmp - i);
}

void fl_buf_addi(fl_buf_t *b, int64_t v)
{
    if (v < 0) {
        fl_buf_addc(b, '-');
        fl_buf_addu(b, (uint64_t)0 - (uint64_t)v);
    } else {
        fl_buf_addu(b, (uint64_t)v);
    }
}

void fl_buf_addhex(fl_buf_t *b, uint64_t v)
{
    static const char hx[] = "0123456789abcdef";
    char tmp[16];
    size_t i = sizeof tmp;
    do {
        tmp[--i] = hx[v & 15];
        v >>= 4;
    } while (v);
    fl_buf_add(b, tmp + i, sizeof tmp - i);
}

void fl_buf_addf(fl_buf_t *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(b->p ? b->p + b->len : NULL, b->cap - b->len, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if ((size_t)n >= b->cap - b->len) {
        fl_buf_reserve(b, (size_t)n + 1);
        va_start(ap, fmt);
        vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
        va_end(ap);
    }
    b->len += (size_t)n;
}

void fl_buf_free(fl_buf_t *b)
{
    free(b->p);
    b->p = NULL;
    b->len = b->cap = 0;
}

void fl_buf_shrink(fl_buf_t *b, size_t keep)
{
    if (b->len == 0 && b->cap > keep)
        fl_buf_free(b);
}

/* Length of the well-formed UTF-8 sequence at s (RFC 3629 table), or 0. */
static size_t utf8_seq(const unsigned char *s, size_t n)
{
    unsigned char c = s[0];
    if (c >= 0xC2 && c <= 0xDF)
        return (n >= 2 && (s[1] & 0xC0) == 0x80) ? 2 : 0;
    if (c >= 0xE0 && c <= 0xEF) {
        if (n < 3 || (s[2] & 0xC0) != 0x80)
            return 0;
        unsigned char lo = 0x80, hi = 0xBF;
        if (c == 0xE0)
            lo = 0xA0;
        else if (c == 0xED)
            hi = 0x9F; /* no UTF-16 surrogates */
        return (s[1] >= lo && s[1] <= hi) ? 3 : 0;
    }
    if (c >= 0xF0 && c <= 0xF4) {
        if (n < 4 || (s[2] & 0xC0) != 0x80 || (s[3] & 0xC0) != 0x80)
            return 0;
        unsigned char lo = 0x80, hi = 0xBF;
        if (c == 0xF0)
            lo = 0x90;
        else if (c == 0xF4)
            hi = 0x8F;
        return (s[1] >= lo && s[1] <= hi) ? 4 : 0;
    }
    return 0;
}

int fl_json_esc(fl_buf_t *b, const char *str, size_t n)
{
    static const char hx[] = "0123456789abcdef";
    const unsigned char *s = (const unsigned char *)str;
    int lossy = 0;
    size_t i = 0;
    fl_buf_reserve(b, n + 2);
    while (i < n) {
        size_t j = i;
        while (j < n && s[j] >= 0x20 && s[j] < 0x80 && s[j] != '"' && s[j] != '\\')
            j++;
        if (j > i) {
            fl_buf_add(b, s + i, j - i);
            i = j;
            if (i == n)
                break;
        }
        unsigned char c = s[i];
        if (c < 0x80) {
            char e[6] = {'\\', 0, 0, 0, 0, 0};
            size_t el = 2;
            switch (c) {
            case '"': e[1] = '"'; break;
            case '\\': e[1] = '\\'; break;
            case '\n': e[1] = 'n'; break;
            case '\r': e[1] = 'r'; break;
            case '\t': e[1] = 't'; break;
            case '\b': e[1] = 'b'; break;
            case '\f': e[1] = 'f'; break;
            default:
                e[1] = 'u';
                e[2] = '0';
                e[3] = '0';
                e[4] = hx[c >> 4];
                e[5] = hx[c & 15];
                el = 6;
            }
            fl_buf_add(b, e, el);
            i++;
            continue;
        }
        size_t l = utf8_seq(s + i, n - i);
        if (l) {
            fl_buf_add(b, s + i, l);
            i += l;
        } else {
            fl_buf_add(b, "\\ufffd", 6);
            lossy = 1;
            i++;
        }
    }
    return lossy;
}

int fl_json_str(fl_buf_t *b, const char *s, size_t n)
{
    fl_buf_addc(b, '"');
    int lossy = fl_json_esc(b, s, n);
    fl_buf_addc(b, '"');
    return lossy;
}

void fl_base64(fl_buf_t *b, const void *data, size_t n)
{
    static const char tb[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    const unsigned char *s = data;
    fl_buf_reserve(b, (n + 2) / 3 * 4);
    char *o = b->p + b->len;
    size_t i = 0;
    for (; i + 3 <= n; i += 3) {
        uint32_t v = (uint32_t)s[i] << 16 | (uint32_t)s[i + 1] << 8 | s[i + 2];
        *o++ = tb[v >> 18];
        *o++ = tb[(v >> 12) & 63];
        *o++ = tb[(v >> 6) & 63];
        *o++ = tb[v & 63];
    }
    if (i < n) {
        uint32_t v = (uint32_t)s[i] << 16;
        if (i + 1 < n)
            v |= (uint32_t)s[i + 1] << 8;
        *o++ = tb[v >> 18];
        *o++ = tb[(v >> 12) & 63];
        *o++ = i + 1 < n ? tb[(v >> 6) & 63] : '=';
        *o++ = '=';
    }
    b->len = (size_t)(o - b->p);
}
