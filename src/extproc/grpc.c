/*
 * grpc.c — gRPC's message framing over an HTTP/2 stream's DATA (a 5-byte
 * prefix per message: the compressed flag and a big-endian length).  The
 * grpc-timeout and grpc-message header forms are http/'s (grpc_head.c).
 */
#include <stdio.h>

#include "extproc/extproc-int.h"

void vsr__grpc_deframer_init(vsr_grpc_deframer_t *d, uint32_t max)
{
    memset(d, 0, sizeof(*d));
    d->max = max ? max : VSR_GRPC_DEFAULT_MAX;
    vsr_buf_init(&d->msg, d->max);
}

void vsr__grpc_deframer_free(vsr_grpc_deframer_t *d)
{
    vsr_buf_free(&d->msg);
}

int vsr__grpc_deframer_idle(const vsr_grpc_deframer_t *d)
{
    return d->have_prefix == 0;
}

int vsr__grpc_deframe(vsr_grpc_deframer_t *d, const uint8_t *p, size_t n,
                      int (*on_msg)(void *ud, const uint8_t *msg, size_t len, int *grpc_status), void *ud,
                      int *grpc_status)
{
    while (n > 0) {
        if (d->have_prefix < VSR_GRPC_PREFIX) {
            size_t k = VSR_MIN(n, VSR_GRPC_PREFIX - d->have_prefix);
            memcpy(d->prefix + d->have_prefix, p, k);
            d->have_prefix += k;
            p += k;
            n -= k;
            if (d->have_prefix < VSR_GRPC_PREFIX)
                return VSR_OK;
            if (d->prefix[0] > 1) {
                *grpc_status = VSR_GRPC_INTERNAL;
                return VSR_ERR_INVALID;
            }
            if (d->prefix[0] == 1) { /* no grpc-encoding was agreed: nothing may be compressed */
                *grpc_status = VSR_GRPC_UNIMPLEMENTED;
                return VSR_ERR_INVALID;
            }
            d->need = (uint32_t)d->prefix[1] << 24 | (uint32_t)d->prefix[2] << 16 | (uint32_t)d->prefix[3] << 8 |
                      (uint32_t)d->prefix[4];
            if (d->need > d->max) {
                *grpc_status = VSR_GRPC_RESOURCE_EXHAUSTED;
                return VSR_ERR_TOO_BIG;
            }
            vsr_buf_reset(&d->msg);
        }
        size_t k = VSR_MIN(n, (size_t)d->need - d->msg.len);
        if (k && vsr_buf_append(&d->msg, p, k) != VSR_OK) {
            *grpc_status = VSR_GRPC_RESOURCE_EXHAUSTED;
            return VSR_ERR_TOO_BIG;
        }
        p += k;
        n -= k;
        if (d->msg.len < d->need)
            return VSR_OK;
        d->have_prefix = 0;
        int st = VSR_GRPC_INTERNAL;
        int rc = on_msg(ud, (const uint8_t *)(d->msg.data ? d->msg.data : ""), d->msg.len, &st);
        vsr_buf_reset(&d->msg);
        d->need = 0;
        if (rc != 0) {
            *grpc_status = st;
            return rc;
        }
    }
    return VSR_OK;
}

int vsr__grpc_frame_prefix(vsr_buf_t *out, size_t len)
{
    if (len > UINT32_MAX)
        return VSR_ERR_TOO_BIG;
    uint8_t b[VSR_GRPC_PREFIX] = {0, (uint8_t)(len >> 24), (uint8_t)(len >> 16), (uint8_t)(len >> 8), (uint8_t)len};
    return vsr_buf_append(out, b, sizeof(b));
}
