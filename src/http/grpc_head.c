/*
 * grpc_head.c — gRPC's header forms over HTTP/2 (see http.h): the
 * grpc-timeout a client sets and the grpc-message a server answers with.
 */
#include "http/http.h"

int vsr_grpc_timeout_ms(vsr_slice_t v, uint64_t *ms)
{
    /* TimeoutValue: 1 to 8 ASCII digits; TimeoutUnit: one letter */
    if (v.len < 2 || v.len > 9)
        return VSR_ERR_INVALID;
    uint64_t x = 0;
    for (size_t i = 0; i + 1 < v.len; i++) {
        if (v.p[i] < '0' || v.p[i] > '9')
            return VSR_ERR_INVALID;
        x = x * 10 + (uint64_t)(v.p[i] - '0');
    }
    static const uint64_t day_ms = 24ull * 3600 * 1000;
    uint64_t out;
    switch (v.p[v.len - 1]) {
    case 'H': out = x * 3600 * 1000; break;
    case 'M': out = x * 60 * 1000; break;
    case 'S': out = x * 1000; break;
    case 'm': out = x; break;
    case 'u': out = (x + 999) / 1000; break;
    case 'n': out = (x + 999999) / 1000000; break;
    default: return VSR_ERR_INVALID;
    }
    *ms = VSR_MIN(out, day_ms);
    return VSR_OK;
}

void vsr_grpc_message_encode(vsr_buf_t *out, vsr_slice_t msg)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t start = out->len;
    for (size_t i = 0; i < msg.len && out->len - start + 3 <= 1024; i++) {
        unsigned char c = (unsigned char)msg.p[i];
        if (c >= 0x20 && c <= 0x7e && c != '%') {
            vsr_buf_append(out, &msg.p[i], 1);
        } else {
            char e[3] = {'%', hex[c >> 4], hex[c & 15]};
            vsr_buf_append(out, e, 3);
        }
    }
}
