/*
 * http_int.h — private to src/http: byte classes of the RFC 9110/9112
 * grammar shared by the parser and the writers.
 */
#ifndef VSR_HTTP_INT_H
#define VSR_HTTP_INT_H

#include <stdint.h>

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

#endif /* VSR_HTTP_INT_H */
