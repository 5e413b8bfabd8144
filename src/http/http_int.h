/*
 * http_int.h — private to src/http: byte classes of the RFC 9110/9112
 * grammar shared by the parser and the writers.
 */
#ifndef VSR_HTTP_INT_H
#define VSR_HTTP_INT_H

#include <stddef.h>
#include <stdint.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

enum {
    VSR__HTTP_TCHAR = 1,  /* token character (method, field name) */
    VSR__HTTP_VCHAR = 2,  /* field-value byte: HTAB, SP, VCHAR, obs-text */
    VSR__HTTP_TARGET = 4, /* request-target byte: VCHAR or obs-text (no SP, no CTL) */
    VSR__HTTP_HEX = 8,    /* HEXDIG */
};

extern const uint8_t vsr__http_cls[256];

static inline int vsr__http_is(unsigned char c, int cls)
{
    return (vsr__http_cls[c] & cls) != 0;
}

/* Bytes of s[0..n) before the first one that is not a field-value byte
 * (VSR__HTTP_VCHAR): n when all are.  Values are most of a head's bytes and
 * are checked wherever one is read or written, so sixteen go at a time:
 * a byte is bad when it is a control other than HTAB (unsigned <= 0x1f) or
 * DEL. */
static inline size_t vsr__http_vchar_span(const char *s, size_t n)
{
    size_t i = 0;
#if defined(__SSE2__)
    const __m128i ctl = _mm_set1_epi8(0x1f), tab = _mm_set1_epi8('\t'), del = _mm_set1_epi8(0x7f);
    for (; i + 16 <= n; i += 16) {
        __m128i x = _mm_loadu_si128((const __m128i *)(const void *)(s + i));
        __m128i low = _mm_cmpeq_epi8(_mm_min_epu8(x, ctl), x);
        __m128i bad = _mm_or_si128(_mm_andnot_si128(_mm_cmpeq_epi8(x, tab), low), _mm_cmpeq_epi8(x, del));
        unsigned m = (unsigned)_mm_movemask_epi8(bad);
        if (m)
            return i + (size_t)__builtin_ctz(m);
    }
#endif
    for (; i < n; i++)
        if (!vsr__http_is((unsigned char)s[i], VSR__HTTP_VCHAR))
            break;
    return i;
}

#endif /* VSR_HTTP_INT_H */
