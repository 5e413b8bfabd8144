/*
 * Server-side TLS over OpenSSL memory BIOs.  OpenSSL never sees a socket:
 * server.c feeds it the ciphertext libuv read and writes out the ciphertext
 * it produced, so the loop stays non-blocking and the plain-HTTP code paths
 * are unchanged.  One SSL_CTX serves every thread (OpenSSL 3 makes its use
 * from several threads safe); each SSL object stays on its connection's
 * thread.
 */
#include "fakellm.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/err.h>
#include <openssl/ssl.h>

#define TLS_WRITE_PIECE (1u << 20) /* SSL_write takes an int length */
#define TLS_ERR_MAX 200

typedef enum {
    TLS_HANDSHAKE,
    TLS_OPEN,
    TLS_FAILED, /* a fatal error: no more SSL calls except SSL_free */
} fl_tls_state_t;

struct fl_tls {
    SSL *ssl;
    BIO *rbio, *wbio; /* owned by ssl */
    fl_tls_state_t state;
};

static SSL_CTX *g_ctx;
static pthread_mutex_t g_err_mu = PTHREAD_MUTEX_INITIALIZER;
static char g_last_err[TLS_ERR_MAX];

/* The reason of the first queued OpenSSL error ("http request", "no shared
 * cipher", "tlsv1 alert unknown ca"), which is what a test wants to see;
 * the queue is emptied so the next connection on this thread starts clean. */
static void error_text(char *out, size_t cap, const char *fallback)
{
    unsigned long e = ERR_peek_error();
    if (e) {
        const char *r = ERR_reason_error_string(e);
        if (r)
            snprintf(out, cap, "%s", r);
        else
            snprintf(out, cap, "openssl error %lx", e);
    } else {
        snprintf(out, cap, "%s", fallback);
    }
    ERR_clear_error();
}

static void fail(fl_tls_t *t, int ssl_err)
{
    char reason[TLS_ERR_MAX - 16], msg[TLS_ERR_MAX];
    error_text(reason, sizeof reason, ssl_err == SSL_ERROR_SYSCALL ? "transport error" : "protocol error");
    snprintf(msg, sizeof msg, "%s%s", t->state == TLS_HANDSHAKE ? "handshake: " : "", reason);
    t->state = TLS_FAILED;
    atomic_fetch_add(&fl_stats.tls_errors, 1);
    pthread_mutex_lock(&g_err_mu);
    memcpy(g_last_err, msg, sizeof g_last_err);
    pthread_mutex_unlock(&g_err_mu);
}

/* HTTP/2 and HTTP/1.1 are spoken.  A client that offers ALPN with neither
 * gets the no_application_protocol alert RFC 7301 asks for rather than a
 * silent downgrade it did not ask for; a client that offers no ALPN at all
 * is served (HTTP/1.1, or HTTP/2 if it opens with the preface). */
static int alpn_select(SSL *ssl, const unsigned char **out, unsigned char *outlen,
                       const unsigned char *in, unsigned int inlen, void *arg)
{
    (void)ssl;
    (void)arg;
    /* h2 when offered (the client's order aside), else http/1.1 */
    const unsigned char *h1 = NULL;
    unsigned int i = 0;
    while (i < inlen) {
        unsigned int n = in[i];
        if (n == 0 || n > inlen - i - 1)
            break;
        if (n == 2 && !memcmp(in + i + 1, "h2", 2)) {
            *out = in + i + 1;
            *outlen = 2;
            return SSL_TLSEXT_ERR_OK;
        }
        if (n == 8 && !memcmp(in + i + 1, "http/1.1", 8))
            h1 = in + i + 1;
        i += 1 + n;
    }
    if (h1) {
        *out = h1;
        *outlen = 8;
        return SSL_TLSEXT_ERR_OK;
    }
    return SSL_TLSEXT_ERR_ALERT_FATAL;
}

int fl_tls_setup(const char *cert_file, const char *key_file)
{
    char msg[TLS_ERR_MAX];
    SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
    if (!ctx) {
        error_text(msg, sizeof msg, "unknown error");
        fprintf(stderr, "fakellm: cannot set up TLS: %s\n", msg);
        return -1;
    }
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_CIPHER_SERVER_PREFERENCE);
    if (SSL_CTX_use_certificate_chain_file(ctx, cert_file) != 1) {
        error_text(msg, sizeof msg, "unknown error");
        fprintf(stderr, "fakellm: cannot load certificate %s: %s\n", cert_file, msg);
        goto fail;
    }
    if (SSL_CTX_use_PrivateKey_file(ctx, key_file, SSL_FILETYPE_PEM) != 1) {
        error_text(msg, sizeof msg, "unknown error");
        fprintf(stderr, "fakellm: cannot load private key %s: %s\n", key_file, msg);
        goto fail;
    }
    if (SSL_CTX_check_private_key(ctx) != 1) {
        error_text(msg, sizeof msg, "unknown error");
        fprintf(stderr, "fakellm: private key %s does not match certificate %s: %s\n", key_file,
                cert_file, msg);
        goto fail;
    }
    SSL_CTX_set_alpn_select_cb(ctx, alpn_select, NULL);
    g_ctx = ctx;
    return 0;
fail:
    SSL_CTX_free(ctx);
    return -1;
}

void fl_tls_teardown(void)
{
    SSL_CTX_free(g_ctx);
    g_ctx = NULL;
}

fl_tls_t *fl_tls_new(void)
{
    fl_tls_t *t = fl_xmalloc(sizeof *t);
    memset(t, 0, sizeof *t);
    t->ssl = SSL_new(g_ctx);
    t->rbio = BIO_new(BIO_s_mem());
    t->wbio = BIO_new(BIO_s_mem());
    if (!t->ssl || !t->rbio || !t->wbio) {
        fprintf(stderr, "fakellm: out of memory (TLS connection)\n");
        abort();
    }
    /* an empty read BIO means "retry later", not end of file */
    BIO_set_mem_eof_return(t->rbio, -1);
    SSL_set_bio(t->ssl, t->rbio, t->wbio);
    SSL_set_accept_state(t->ssl);
    t->state = TLS_HANDSHAKE;
    return t;
}

void fl_tls_free(fl_tls_t *t)
{
    if (!t)
        return;
    SSL_free(t->ssl);
    free(t);
}

void fl_tls_feed(fl_tls_t *t, const char *p, size_t n)
{
    /* a memory BIO only fails to grow on allocation failure */
    if (BIO_write(t->rbio, p, (int)n) != (int)n) {
        fprintf(stderr, "fakellm: out of memory (TLS input)\n");
        abort();
    }
}

int fl_tls_handshake(fl_tls_t *t)
{
    if (t->state == TLS_OPEN)
        return 1;
    if (t->state == TLS_FAILED)
        return -1;
    ERR_clear_error();
    int r = SSL_do_handshake(t->ssl);
    if (r == 1) {
        t->state = TLS_OPEN;
        atomic_fetch_add(&fl_stats.tls_handshakes, 1);
        return 1;
    }
    int e = SSL_get_error(t->ssl, r);
    if (e == SSL_ERROR_WANT_READ)
        return 0;
    fail(t, e);
    return -1;
}

ssize_t fl_tls_read(fl_tls_t *t, char *out, size_t cap)
{
    if (t->state != TLS_OPEN)
        return FL_TLS_ERR;
    size_t got = 0;
    ERR_clear_error();
    if (SSL_read_ex(t->ssl, out, cap, &got) == 1)
        return (ssize_t)got;
    int e = SSL_get_error(t->ssl, 0);
    if (e == SSL_ERROR_WANT_READ)
        return 0;
    if (e == SSL_ERROR_ZERO_RETURN)
        return FL_TLS_EOF;
    fail(t, e);
    return FL_TLS_ERR;
}

int fl_tls_write(fl_tls_t *t, const char *p, size_t n)
{
    if (t->state != TLS_OPEN)
        return -1;
    while (n) {
        size_t piece = n < TLS_WRITE_PIECE ? n : TLS_WRITE_PIECE, done = 0;
        ERR_clear_error();
        if (SSL_write_ex(t->ssl, p, piece, &done) != 1) {
            fail(t, SSL_get_error(t->ssl, 0));
            return -1;
        }
        p += done;
        n -= done;
    }
    return 0;
}

size_t fl_tls_pending_out(const fl_tls_t *t)
{
    return BIO_ctrl_pending(t->wbio);
}

size_t fl_tls_take_out(fl_tls_t *t, char *out, size_t cap)
{
    int n = BIO_read(t->wbio, out, cap > INT32_MAX ? INT32_MAX : (int)cap);
    return n > 0 ? (size_t)n : 0;
}

void fl_tls_close_notify(fl_tls_t *t)
{
    if (t->state != TLS_OPEN)
        return;
    ERR_clear_error();
    SSL_shutdown(t->ssl); /* queues the alert; the peer's is not waited for */
    ERR_clear_error();
}

void fl_tls_render_stats(fl_buf_t *b)
{
    char msg[TLS_ERR_MAX];
    pthread_mutex_lock(&g_err_mu);
    memcpy(msg, g_last_err, sizeof msg);
    pthread_mutex_unlock(&g_err_mu);
    fl_buf_adds(b, ",\"tls_handshakes\":");
    fl_buf_addu(b, atomic_load(&fl_stats.tls_handshakes));
    fl_buf_adds(b, ",\"tls_errors\":");
    fl_buf_addu(b, atomic_load(&fl_stats.tls_errors));
    fl_buf_adds(b, ",\"tls_last_error\":");
    if (msg[0])
        fl_json_str(b, msg, strlen(msg));
    else
        fl_buf_adds(b, "null");
}
