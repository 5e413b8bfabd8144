/*
 * tls.c — the TLS client of the upstream connections: OpenSSL 3 driven over
 * two memory BIOs (ciphertext in, ciphertext out), so the event loop owns
 * the socket and OpenSSL only ever sees bytes.
 *
 * OpenSSL's error queue is per thread and SSL_get_error() is only reliable
 * when the queue is empty before the call, so every SSL_* I/O call below is
 * preceded by ERR_clear_error().
 */
#include <arpa/inet.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include <openssl/bio.h>
#include <openssl/buffer.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "upstream/tls.h"

/* Unread ciphertext accepted by vsr__tls_feed.  The connection code reads
 * until vsr__tls_read returns 0, which leaves at most a partial record
 * (< 17 KiB) behind; only a caller that stops reading plaintext (back
 * pressure) gets near this, and must then stop reading the socket. */
#define TLS_MAX_UNREAD (1024u * 1024u)
/* Plaintext written while a TLS 1.2 renegotiation holds the write side. */
#define TLS_MAX_HELD (4u * 1024u * 1024u)
/* A memory BIO never gives back the memory it grew to; once drained, one
 * larger than this is replaced so an idle pooled connection stays small
 * after a big request or response went through it. */
#define TLS_BIO_KEEP (64u * 1024u)

struct vsr_tls_ctx_s {
    SSL_CTX *ssl;
};

typedef enum {
    TLS_HANDSHAKE, /* SSL_do_handshake not finished yet */
    TLS_OPEN,      /* application data flows */
    TLS_CLOSED,    /* the peer sent close_notify */
    TLS_FAILED,    /* fatal: err says why; nothing more goes through */
} tls_state_t;

struct vsr_tls_s {
    SSL *ssl;            /* NULL when creation failed (state TLS_FAILED) */
    BIO *in;             /* owned by ssl: socket -> OpenSSL */
    BIO *out;            /* owned by ssl: OpenSSL -> socket */
    tls_state_t state;
    /* Plaintext SSL_write refused with WANT_READ because the peer started a
     * renegotiation; it goes out, in order, once the handshake completes. */
    vsr_buf_t held;
    char err[256];
};

/* ---- errors ---- */

/* "what: first queued OpenSSL error", then empties the queue. */
static void set_ssl_error(char *dst, size_t cap, const char *what)
{
    unsigned long e = ERR_peek_error();
    if (e != 0) {
        char detail[200];
        ERR_error_string_n(e, detail, sizeof(detail));
        /* "what: detail", cut to cap: the start says enough */
        size_t n = 0;
        for (const char *parts[] = {what, ": ", detail}, **q = parts; q < parts + 3 && n + 1 < cap; q++) {
            size_t l = strlen(*q);
            if (l > cap - 1 - n)
                l = cap - 1 - n;
            memcpy(dst + n, *q, l);
            n += l;
        }
        dst[n] = '\0';
    } else {
        snprintf(dst, cap, "%s", what);
    }
    ERR_clear_error();
}

/* Records why a handshake or I/O call failed and moves to TLS_FAILED. */
static int fail(vsr_tls_t *t, int ssl_ret, const char *what)
{
    int code = SSL_get_error(t->ssl, ssl_ret);
    long vr = SSL_get_verify_result(t->ssl);
    if (t->state == TLS_HANDSHAKE && vr != X509_V_OK &&
        (SSL_get_verify_mode(t->ssl) & SSL_VERIFY_PEER)) {
        /* The OpenSSL error says only "certificate verify failed"; the
         * verify result says which check did. */
        snprintf(t->err, sizeof(t->err), "certificate verify failed: %s",
                 X509_verify_cert_error_string(vr));
        ERR_clear_error();
    } else if (code == SSL_ERROR_SSL) {
        set_ssl_error(t->err, sizeof(t->err), what);
    } else if (code == SSL_ERROR_ZERO_RETURN) {
        snprintf(t->err, sizeof(t->err), "%s: peer closed the connection", what);
        ERR_clear_error();
    } else {
        char tmp[64];
        snprintf(tmp, sizeof(tmp), "%s (SSL error %d)", what, code);
        set_ssl_error(t->err, sizeof(t->err), tmp);
    }
    t->state = TLS_FAILED;
    return VSR_ERR;
}

/* ---- context ---- */

/* The end of a context constructor: ssl wrapped, or (failed: why != NULL)
 * freed with the reason appended to err. */
static vsr_tls_ctx_t *ctx_done(SSL_CTX *ssl, const char *why, vsr_buf_t *err)
{
    if (why != NULL) {
        SSL_CTX_free(ssl);
        if (err != NULL)
            vsr_buf_append_cstr(err, why);
        return NULL;
    }
    vsr_tls_ctx_t *ctx = vsr_calloc(1, sizeof(*ctx));
    ctx->ssl = ssl;
    return ctx;
}

vsr_tls_ctx_t *vsr__tls_ctx_new(int verify, vsr_buf_t *err)
{
    char msg[256];
    SSL_CTX *ssl = SSL_CTX_new(TLS_client_method());
    if (ssl == NULL) {
        set_ssl_error(msg, sizeof(msg), "SSL_CTX_new");
        goto fail;
    }
    if (!SSL_CTX_set_min_proto_version(ssl, TLS1_2_VERSION)) {
        set_ssl_error(msg, sizeof(msg), "cannot require TLS 1.2");
        goto fail;
    }
    /* Reads SSL_CERT_FILE / SSL_CERT_DIR now, once per context. */
    if (!SSL_CTX_set_default_verify_paths(ssl)) {
        set_ssl_error(msg, sizeof(msg), "cannot load the default CA certificates");
        goto fail;
    }
    static const unsigned char alpn[] = "\x08http/1.1";
    if (SSL_CTX_set_alpn_protos(ssl, alpn, sizeof(alpn) - 1) != 0) { /* 0 is success */
        set_ssl_error(msg, sizeof(msg), "cannot set ALPN");
        goto fail;
    }
    SSL_CTX_set_verify(ssl, verify ? SSL_VERIFY_PEER : SSL_VERIFY_NONE, NULL);
    /* The held plaintext lives in a vsr_buf that may be reallocated between
     * an SSL_write that wanted to read and its retry. */
    SSL_CTX_set_mode(ssl, SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);

    return ctx_done(ssl, NULL, err);

fail:
    return ctx_done(ssl, msg, err);
}

void vsr__tls_ctx_free(vsr_tls_ctx_t *ctx)
{
    if (ctx == NULL)
        return;
    SSL_CTX_free(ctx->ssl);
    vsr_free(ctx);
}

/* ---- connection ---- */

/* Fills name (NUL-terminated) with host as the certificate and SNI want it:
 * brackets of "[v6]" and a trailing dot dropped.  *is_ip tells an IP literal
 * (an IPv6 zone "%eth0" is dropped too: certificates do not carry it). */
static int normalise_host(const char *host, char *name, size_t cap, int *is_ip)
{
    size_t n = strlen(host);
    if (n >= 2 && host[0] == '[' && host[n - 1] == ']') {
        host++;
        n -= 2;
    }
    if (n > 0 && host[n - 1] == '.')
        n--;
    if (n == 0 || n >= cap)
        return -1;
    memcpy(name, host, n);
    name[n] = '\0';

    unsigned char addr[16];
    char *zone = strchr(name, '%');
    if (zone != NULL) {
        *zone = '\0';
        if (inet_pton(AF_INET6, name, addr) != 1)
            return -1; /* '%' belongs in no host name */
    }
    *is_ip = inet_pton(AF_INET, name, addr) == 1 || inet_pton(AF_INET6, name, addr) == 1;
    return 0;
}

/* A connection in TLS_FAILED until its caller finishes setting it up. */
static vsr_tls_t *tls_alloc(void)
{
    vsr_tls_t *t = vsr_calloc(1, sizeof(*t));
    vsr_buf_init(&t->held, TLS_MAX_HELD);
    t->state = TLS_FAILED;
    return t;
}

/* The SSL object and its memory BIOs; on failure t->ssl stays NULL and
 * t->err says why. */
static int tls_attach(vsr_tls_t *t, vsr_tls_ctx_t *ctx)
{
    ERR_clear_error();
    t->ssl = SSL_new(ctx->ssl);
    t->in = BIO_new(BIO_s_mem());
    t->out = BIO_new(BIO_s_mem());
    if (t->ssl == NULL || t->in == NULL || t->out == NULL) {
        set_ssl_error(t->err, sizeof(t->err), "cannot create a TLS connection");
        BIO_free(t->in);
        BIO_free(t->out);
        SSL_free(t->ssl);
        t->ssl = NULL;
        return VSR_ERR;
    }
    SSL_set_bio(t->ssl, t->in, t->out);
    return VSR_OK;
}

vsr_tls_t *vsr__tls_new(vsr_tls_ctx_t *ctx, const char *host)
{
    vsr_tls_t *t = tls_alloc();

    char name[256];
    int is_ip = 0;
    if (host == NULL || normalise_host(host, name, sizeof(name), &is_ip) != 0) {
        snprintf(t->err, sizeof(t->err), "invalid TLS host name");
        return t;
    }
    if (tls_attach(t, ctx) != VSR_OK)
        return t;
    SSL_set_connect_state(t->ssl);

    int ok;
    if (is_ip) {
        /* No SNI for addresses (RFC 6066 §3); the IP SAN is checked. */
        ok = X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(t->ssl), name);
    } else {
        SSL_set_hostflags(t->ssl, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
        ok = SSL_set1_host(t->ssl, name) && SSL_set_tlsext_host_name(t->ssl, name);
    }
    if (!ok) {
        set_ssl_error(t->err, sizeof(t->err), "cannot set the TLS host name");
        return t;
    }
    t->state = TLS_HANDSHAKE;
    return t;
}

int vsr__tls_offer_h2(vsr_tls_t *t)
{
    static const unsigned char alpn[] = "\x02h2\x08http/1.1";
    if (t->ssl == NULL || t->state != TLS_HANDSHAKE)
        return VSR_ERR;
    return SSL_set_alpn_protos(t->ssl, alpn, sizeof(alpn) - 1) == 0 ? VSR_OK : VSR_ERR; /* 0 is success */
}

int vsr__tls_selected_h2(const vsr_tls_t *t)
{
    const unsigned char *p = NULL;
    unsigned int n = 0;
    if (t->ssl == NULL)
        return 0;
    SSL_get0_alpn_selected(t->ssl, &p, &n);
    return n == 2 && memcmp(p, "h2", 2) == 0;
}

void vsr__tls_free(vsr_tls_t *t)
{
    if (t == NULL)
        return;
    SSL_free(t->ssl); /* frees both BIOs */
    vsr_buf_free(&t->held);
    vsr_free(t);
}

int vsr__tls_feed(vsr_tls_t *t, const char *p, size_t n)
{
    if (t->ssl == NULL || n == 0)
        return VSR_OK; /* a failed connection reports itself on the next call */
    size_t unread = BIO_ctrl_pending(t->in);
    if (n > TLS_MAX_UNREAD || unread > TLS_MAX_UNREAD - n)
        return VSR_ERR_TOO_BIG; /* nothing of p taken */
    while (n > 0) {
        int chunk = n > INT_MAX ? INT_MAX : (int)n;
        int w = BIO_write(t->in, p, chunk);
        VSR_BUG_ON(w != chunk); /* a memory BIO takes everything or is out of memory */
        p += w;
        n -= (size_t)w;
    }
    return VSR_OK;
}

int vsr__tls_handshake(vsr_tls_t *t)
{
    switch (t->state) {
    case TLS_HANDSHAKE:
        break;
    case TLS_OPEN:
    case TLS_CLOSED: /* closed after a complete handshake */
        return VSR_OK;
    case TLS_FAILED:
        return VSR_ERR;
    }
    ERR_clear_error();
    int r = SSL_do_handshake(t->ssl);
    if (r == 1) {
        t->state = TLS_OPEN;
        return VSR_OK;
    }
    int code = SSL_get_error(t->ssl, r);
    if (code == SSL_ERROR_WANT_READ || code == SSL_ERROR_WANT_WRITE)
        return VSR_AGAIN;
    return fail(t, r, "TLS handshake failed");
}

/* Swaps a drained memory BIO that grew past TLS_BIO_KEEP for a new one. */
static void shrink_in(vsr_tls_t *t)
{
    BUF_MEM *m = NULL;
    if (BIO_ctrl_pending(t->in) != 0 || BIO_get_mem_ptr(t->in, &m) <= 0 || m == NULL ||
        m->max <= TLS_BIO_KEEP)
        return;
    BIO *fresh = BIO_new(BIO_s_mem());
    if (fresh == NULL)
        return; /* keep the big one: it still works */
    SSL_set0_rbio(t->ssl, fresh); /* frees the old one */
    t->in = fresh;
}

static void shrink_out(vsr_tls_t *t)
{
    BUF_MEM *m = NULL;
    if (BIO_ctrl_pending(t->out) != 0 || BIO_get_mem_ptr(t->out, &m) <= 0 || m == NULL ||
        m->max <= TLS_BIO_KEEP)
        return;
    BIO *fresh = BIO_new(BIO_s_mem());
    if (fresh == NULL)
        return;
    SSL_set0_wbio(t->ssl, fresh);
    t->out = fresh;
}

/* Retries the plaintext held back by a renegotiation.  VSR_OK (sent, or
 * still held because the handshake goes on) or VSR_ERR. */
static int flush_held(vsr_tls_t *t)
{
    if (t->held.len == 0)
        return VSR_OK;
    size_t w = 0;
    ERR_clear_error();
    int r = SSL_write_ex(t->ssl, t->held.data, t->held.len, &w);
    if (r == 1) {
        VSR_ASSERT(w == t->held.len); /* no partial writes: the mode is off */
        vsr_buf_free(&t->held); /* rare: do not keep its memory */
        return VSR_OK;
    }
    int code = SSL_get_error(t->ssl, r);
    if (code == SSL_ERROR_WANT_READ || code == SSL_ERROR_WANT_WRITE)
        return VSR_OK;
    return fail(t, r, "TLS write failed");
}

ssize_t vsr__tls_read(vsr_tls_t *t, char *out, size_t cap)
{
    if (t->state == TLS_HANDSHAKE) {
        int hs = vsr__tls_handshake(t);
        if (hs != VSR_OK)
            return hs == VSR_AGAIN ? 0 : VSR_ERR;
    }
    if (t->state == TLS_FAILED)
        return VSR_ERR;
    if (t->state == TLS_CLOSED)
        return VSR_EOF;
    if (cap == 0)
        return 0;
    if (flush_held(t) != VSR_OK)
        return VSR_ERR;

    /* SSL_read consumes post-handshake messages (TLS 1.3 session tickets
     * and KeyUpdate, a TLS 1.2 HelloRequest) itself and keeps going; what
     * they call for (a KeyUpdate reply, a renegotiation's ClientHello) is
     * queued for the socket, and when no application data follows the
     * result is WANT_READ, i.e. 0 here. */
    size_t got = 0;
    ERR_clear_error();
    int r = SSL_read_ex(t->ssl, out, cap, &got);
    if (r == 1) {
        /* A renegotiation may just have completed while reading. */
        if (flush_held(t) != VSR_OK)
            return VSR_ERR;
        return (ssize_t)got;
    }
    switch (SSL_get_error(t->ssl, r)) {
    case SSL_ERROR_WANT_READ:
    case SSL_ERROR_WANT_WRITE:
        if (flush_held(t) != VSR_OK)
            return VSR_ERR;
        shrink_in(t);
        return 0;
    case SSL_ERROR_ZERO_RETURN:
        t->state = TLS_CLOSED;
        return VSR_EOF;
    default:
        return fail(t, r, "TLS read failed");
    }
}

int vsr__tls_write(vsr_tls_t *t, const char *p, size_t n)
{
    if (t->state != TLS_OPEN) {
        if (t->state != TLS_FAILED) {
            snprintf(t->err, sizeof(t->err), "TLS write %s",
                     t->state == TLS_HANDSHAKE ? "before the handshake" : "after close_notify");
        }
        return VSR_ERR;
    }
    if (n == 0)
        return VSR_OK;
    if (t->held.len > 0) {
        /* Order: behind what is already held. */
        if (vsr_buf_append(&t->held, p, n) != VSR_OK) {
            snprintf(t->err, sizeof(t->err), "TLS write: too much data held during renegotiation");
            t->state = TLS_FAILED;
            return VSR_ERR;
        }
        return flush_held(t);
    }
    size_t w = 0;
    ERR_clear_error();
    int r = SSL_write_ex(t->ssl, p, n, &w);
    if (r == 1) {
        VSR_ASSERT(w == n);
        return VSR_OK;
    }
    int code = SSL_get_error(t->ssl, r);
    if (code == SSL_ERROR_WANT_READ || code == SSL_ERROR_WANT_WRITE) {
        /* A renegotiation holds the write side until the peer answers; no
         * byte of p went out, so all of it waits its turn. */
        if (vsr_buf_append(&t->held, p, n) != VSR_OK) {
            snprintf(t->err, sizeof(t->err), "TLS write: too much data held during renegotiation");
            t->state = TLS_FAILED;
            return VSR_ERR;
        }
        return VSR_OK;
    }
    return fail(t, r, "TLS write failed");
}

size_t vsr__tls_pending_out(const vsr_tls_t *t)
{
    return t->ssl != NULL ? BIO_ctrl_pending(t->out) : 0;
}

size_t vsr__tls_take_out(vsr_tls_t *t, char *out, size_t cap)
{
    if (t->ssl == NULL || cap == 0)
        return 0;
    int want = cap > INT_MAX ? INT_MAX : (int)cap;
    int r = BIO_read(t->out, out, want);
    if (r <= 0)
        return 0;
    shrink_out(t);
    return (size_t)r;
}

const char *vsr__tls_error(const vsr_tls_t *t)
{
    return t->err;
}

int vsr__tls_peer_closed(const vsr_tls_t *t)
{
    return t->state == TLS_CLOSED;
}

/* ---- server side ---- */

/* ALPN: h2 first, then http/1.1, in the server's order of preference. */
static int select_alpn(SSL *ssl, const unsigned char **out, unsigned char *outlen, const unsigned char *in,
                       unsigned inlen, void *arg)
{
    VSR_UNUSED(ssl);
    VSR_UNUSED(arg);
    static const unsigned char prefs[] = "\x02h2\x08http/1.1";
    if (SSL_select_next_proto((unsigned char **)out, outlen, prefs, sizeof(prefs) - 1, in, inlen) ==
        OPENSSL_NPN_NEGOTIATED)
        return SSL_TLSEXT_ERR_OK;
    return SSL_TLSEXT_ERR_NOACK; /* no common protocol: go on without ALPN (HTTP/1.1) */
}

vsr_tls_ctx_t *vsr__tls_server_ctx_new(const char *cert_file, const char *key_file, vsr_buf_t *err)
{
    char msg[512];
    ERR_clear_error();
    SSL_CTX *ssl = SSL_CTX_new(TLS_server_method());
    if (ssl == NULL) {
        set_ssl_error(msg, sizeof(msg), "SSL_CTX_new");
        goto fail;
    }
    if (!SSL_CTX_set_min_proto_version(ssl, TLS1_2_VERSION)) {
        set_ssl_error(msg, sizeof(msg), "cannot require TLS 1.2");
        goto fail;
    }
    char what[300];
    if (SSL_CTX_use_certificate_chain_file(ssl, cert_file) != 1) {
        snprintf(what, sizeof(what), "cannot load certificate chain %s", cert_file);
        set_ssl_error(msg, sizeof(msg), what);
        goto fail;
    }
    if (SSL_CTX_use_PrivateKey_file(ssl, key_file, SSL_FILETYPE_PEM) != 1) {
        snprintf(what, sizeof(what), "cannot load private key %s", key_file);
        set_ssl_error(msg, sizeof(msg), what);
        goto fail;
    }
    if (SSL_CTX_check_private_key(ssl) != 1) {
        set_ssl_error(msg, sizeof(msg), "the private key does not match the certificate");
        goto fail;
    }
    SSL_CTX_set_alpn_select_cb(ssl, select_alpn, NULL);
    SSL_CTX_set_options(ssl, SSL_OP_NO_RENEGOTIATION | SSL_OP_CIPHER_SERVER_PREFERENCE);
    SSL_CTX_set_mode(ssl, SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER | SSL_MODE_RELEASE_BUFFERS);

    return ctx_done(ssl, NULL, err);

fail:
    return ctx_done(ssl, msg, err);
}

vsr_tls_t *vsr__tls_server_new(vsr_tls_ctx_t *ctx)
{
    vsr_tls_t *t = tls_alloc();
    if (tls_attach(t, ctx) != VSR_OK)
        return t;
    SSL_set_accept_state(t->ssl);
    t->state = TLS_HANDSHAKE;
    return t;
}

