/*
 * tls.h — private to upstream/: a sans-IO TLS client over OpenSSL memory
 * BIOs.  The connection code moves bytes between the socket and this object;
 * OpenSSL never touches a file descriptor, so the event loop stays in charge.
 *
 * Defaults: TLS 1.2 or later, the system CA bundle (OpenSSL's default verify
 * paths, so SSL_CERT_FILE / SSL_CERT_DIR are honoured), peer verification on,
 * host name checked against the certificate, SNI sent for host names (not for
 * IP literals, whose certificate IP SAN is checked instead), ALPN http/1.1.
 */
#ifndef VSR_UPSTREAM_TLS_H
#define VSR_UPSTREAM_TLS_H

#include "base/base.h"

typedef struct vsr_tls_ctx_s vsr_tls_ctx_t; /* one per process (an SSL_CTX); thread-safe */
typedef struct vsr_tls_s vsr_tls_t;         /* one per connection; one thread */

/* verify 0 turns peer verification off (tests only).  NULL with a message in
 * err when OpenSSL cannot be set up. */
vsr_tls_ctx_t *vsr__tls_ctx_new(int verify, vsr_buf_t *err);
void vsr__tls_ctx_free(vsr_tls_ctx_t *ctx);

/* A client connection to `host` (a name or an IP literal) */
vsr_tls_t *vsr__tls_new(vsr_tls_ctx_t *ctx, const char *host);
void vsr__tls_free(vsr_tls_t *t); /* accepts NULL */
/* Before the handshake: offer ALPN "h2,http/1.1" instead of http/1.1 alone.
 * VSR_OK or VSR_ERR. */
int vsr__tls_offer_h2(vsr_tls_t *t);
/* After the handshake: 1 when ALPN settled on h2 (either role). */
int vsr__tls_selected_h2(const vsr_tls_t *t);

/* Ciphertext received from the socket.  VSR_OK, or VSR_ERR_TOO_BIG when more
 * than 1 MiB of it is waiting unread (the caller should read first). */
int vsr__tls_feed(vsr_tls_t *t, const char *p, size_t n);
/* Drives the handshake: VSR_OK when done, VSR_AGAIN while it needs the
 * peer's bytes (send what vsr__tls_take_out() has first), VSR_ERR on failure
 * (vsr__tls_error() says why: e.g. "certificate verify failed: ..."). */
int vsr__tls_handshake(vsr_tls_t *t);
/* Decrypted application data: > 0 bytes written into out, 0 when none is
 * available yet, VSR_ERR on failure, VSR_EOF at (and after) the peer's close_notify. */
ssize_t vsr__tls_read(vsr_tls_t *t, char *out, size_t cap);
/* Encrypts application data (after the handshake).  VSR_OK or VSR_ERR. */
int vsr__tls_write(vsr_tls_t *t, const char *p, size_t n);
/* Ciphertext waiting for the socket: how much, and take up to cap of it. */
size_t vsr__tls_pending_out(const vsr_tls_t *t);
size_t vsr__tls_take_out(vsr_tls_t *t, char *out, size_t cap);
const char *vsr__tls_error(const vsr_tls_t *t);
/* 1 once the peer's close_notify was read (vsr__tls_read answers VSR_EOF). */
int vsr__tls_peer_closed(const vsr_tls_t *t);

/* ---- server side (the gateway's listeners, through upstream.h) ----
 * The same sans-IO object in the accepting role: TLS 1.2 or later, the
 * certificate chain and key from PEM files, ALPN "h2" preferred over
 * "http/1.1" when the client offers both (none when it offers neither). */
vsr_tls_ctx_t *vsr__tls_server_ctx_new(const char *cert_file, const char *key_file, vsr_buf_t *err);
vsr_tls_t *vsr__tls_server_new(vsr_tls_ctx_t *ctx);

#endif
