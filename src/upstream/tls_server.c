/*
 * tls_server.c — the public face of tls.c's server role, for the gateway's
 * listeners (upstream.h).  Thin: the TLS code itself lives in tls.c once.
 */
#include "upstream/tls.h"
#include "upstream/upstream.h"

vsr_tls_ctx_t *vsr_tls_server_ctx_new(const char *cert_file, const char *key_file, vsr_buf_t *err)
{
    return vsr__tls_server_ctx_new(cert_file, key_file, err);
}

void vsr_tls_server_ctx_free(vsr_tls_ctx_t *ctx)
{
    vsr__tls_ctx_free(ctx);
}

vsr_tls_t *vsr_tls_server_new(vsr_tls_ctx_t *ctx)
{
    return vsr__tls_server_new(ctx);
}

void vsr_tls_conn_free(vsr_tls_t *t)
{
    vsr__tls_free(t);
}

int vsr_tls_conn_feed(vsr_tls_t *t, const char *p, size_t n)
{
    return vsr__tls_feed(t, p, n);
}

ssize_t vsr_tls_conn_read(vsr_tls_t *t, char *out, size_t cap)
{
    return vsr__tls_read(t, out, cap);
}

int vsr_tls_conn_handshake(vsr_tls_t *t)
{
    return vsr__tls_handshake(t);
}

int vsr_tls_conn_write(vsr_tls_t *t, const char *p, size_t n)
{
    return vsr__tls_write(t, p, n);
}

size_t vsr_tls_conn_pending_out(const vsr_tls_t *t)
{
    return vsr__tls_pending_out(t);
}

size_t vsr_tls_conn_take_out(vsr_tls_t *t, char *out, size_t cap)
{
    return vsr__tls_take_out(t, out, cap);
}

int vsr_tls_conn_alpn_h2(const vsr_tls_t *t)
{
    return vsr__tls_selected_h2(t);
}

const char *vsr_tls_conn_error(const vsr_tls_t *t)
{
    return vsr__tls_error(t);
}
