/* test_tls.c — the upstream TLS client against an OpenSSL server, both over
 * memory BIOs with the bytes pumped by hand: certificate and host checks
 * (names, IP literals, untrusted issuers, verification off), the CA bundle
 * taken from SSL_CERT_FILE, ALPN and SNI, application data both ways (1 MiB
 * too, and the feed bound), close_notify, post-handshake messages (TLS 1.3
 * session tickets and key updates, a TLS 1.2 renegotiation) and the TLS 1.2
 * floor.  The CAs and certificates are made here with the OpenSSL API. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "upstream/tls.h"

/* ---- certificates ---- */

static EVP_PKEY *ca1_key, *ca2_key, *srv_key;
static X509 *ca1, *ca2;
static X509 *cert_name;  /* DNS:localhost, DNS:*.example.test, by ca1 */
static X509 *cert_ip;    /* IP:127.0.0.1, IP:::1, by ca1 */
static X509 *cert_other; /* DNS:localhost, by ca2 (not trusted by default) */
static X509 *cert_partial; /* DNS:api*.example.test, by ca1 */
static char tmpdir[64];
static char ca1_file[128], ca2_file[128], empty_dir[128];

static void add_ext(X509 *cert, X509 *issuer, int nid, const char *value)
{
    X509V3_CTX v3;
    X509V3_set_ctx_nodb(&v3);
    X509V3_set_ctx(&v3, issuer, cert, NULL, NULL, 0);
    X509_EXTENSION *ex = X509V3_EXT_conf_nid(NULL, &v3, nid, value);
    assert_non_null(ex);
    assert_int_equal(X509_add_ext(cert, ex, -1), 1);
    X509_EXTENSION_free(ex);
}

/* A CA when issuer is NULL (self-signed), else a server certificate. */
static X509 *make_cert(EVP_PKEY *key, const char *cn, X509 *issuer, EVP_PKEY *issuer_key,
                       const char *san)
{
    static long serial = 1;
    X509 *c = X509_new();
    assert_non_null(c);
    X509_set_version(c, 2);
    ASN1_INTEGER_set(X509_get_serialNumber(c), serial++);
    X509_gmtime_adj(X509_getm_notBefore(c), -3600);
    X509_gmtime_adj(X509_getm_notAfter(c), 86400);
    X509_set_pubkey(c, key);
    X509_NAME *name = X509_get_subject_name(c);
    X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, (const unsigned char *)cn, -1, -1, 0);
    X509_set_issuer_name(c, issuer ? X509_get_subject_name(issuer) : name);
    add_ext(c, issuer ? issuer : c, NID_subject_key_identifier, "hash");
    if (issuer == NULL) {
        add_ext(c, c, NID_basic_constraints, "critical,CA:TRUE");
        add_ext(c, c, NID_key_usage, "critical,keyCertSign,cRLSign");
    } else {
        add_ext(c, issuer, NID_authority_key_identifier, "keyid:always");
        add_ext(c, issuer, NID_basic_constraints, "critical,CA:FALSE");
        add_ext(c, issuer, NID_key_usage, "critical,digitalSignature");
        add_ext(c, issuer, NID_ext_key_usage, "serverAuth");
        add_ext(c, issuer, NID_subject_alt_name, san);
    }
    assert_true(X509_sign(c, issuer_key ? issuer_key : key, EVP_sha256()) > 0);
    return c;
}

static void write_pem(const char *path, X509 *cert)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    assert_int_equal(PEM_write_X509(f, cert), 1);
    fclose(f);
}

static void use_ca_file(const char *path)
{
    /* SSL_CERT_DIR at an empty directory: only the file counts. */
    setenv("SSL_CERT_FILE", path, 1);
    setenv("SSL_CERT_DIR", empty_dir, 1);
}

static int setup(void **state)
{
    (void)state;
    ca1_key = EVP_EC_gen("P-256");
    ca2_key = EVP_EC_gen("P-256");
    srv_key = EVP_EC_gen("P-256");
    assert_true(ca1_key && ca2_key && srv_key);
    ca1 = make_cert(ca1_key, "vsr test CA 1", NULL, NULL, NULL);
    ca2 = make_cert(ca2_key, "vsr test CA 2", NULL, NULL, NULL);
    cert_name = make_cert(srv_key, "localhost", ca1, ca1_key, "DNS:localhost,DNS:*.example.test");
    cert_ip = make_cert(srv_key, "127.0.0.1", ca1, ca1_key, "IP:127.0.0.1,IP:::1");
    cert_other = make_cert(srv_key, "localhost", ca2, ca2_key, "DNS:localhost");
    cert_partial = make_cert(srv_key, "partial", ca1, ca1_key, "DNS:api*.example.test");

    strcpy(tmpdir, "/tmp/vsr_test_tls_XXXXXX");
    assert_non_null(mkdtemp(tmpdir));
    snprintf(ca1_file, sizeof(ca1_file), "%s/ca1.pem", tmpdir);
    snprintf(ca2_file, sizeof(ca2_file), "%s/ca2.pem", tmpdir);
    snprintf(empty_dir, sizeof(empty_dir), "%s/certs", tmpdir);
    write_pem(ca1_file, ca1);
    write_pem(ca2_file, ca2);
    assert_int_equal(mkdir(empty_dir, 0700), 0);
    use_ca_file(ca1_file);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    unlink(ca1_file);
    unlink(ca2_file);
    rmdir(empty_dir);
    rmdir(tmpdir);
    X509_free(ca1);
    X509_free(ca2);
    X509_free(cert_name);
    X509_free(cert_ip);
    X509_free(cert_other);
    X509_free(cert_partial);
    EVP_PKEY_free(ca1_key);
    EVP_PKEY_free(ca2_key);
    EVP_PKEY_free(srv_key);
    return 0;
}

/* ---- an OpenSSL server and a vsr client, pumped by hand ---- */

static char alpn_offer[64]; /* what the client offered, as on the wire */
static size_t alpn_offer_len;

static int alpn_select(SSL *ssl, const unsigned char **out, unsigned char *outlen,
                       const unsigned char *in, unsigned int inlen, void *arg)
{
    (void)ssl;
    (void)arg;
    alpn_offer_len = VSR_MIN(inlen, sizeof(alpn_offer));
    memcpy(alpn_offer, in, alpn_offer_len);
    return SSL_select_next_proto((unsigned char **)out, outlen, in, inlen, in, inlen) ==
                   OPENSSL_NPN_NEGOTIATED
               ? SSL_TLSEXT_ERR_OK
               : SSL_TLSEXT_ERR_NOACK;
}

/* max_version 0: the library's highest */
static SSL_CTX *server_ctx(X509 *cert, int max_version)
{
    SSL_CTX *s = SSL_CTX_new(TLS_server_method());
    assert_non_null(s);
    assert_int_equal(SSL_CTX_use_certificate(s, cert), 1);
    assert_int_equal(SSL_CTX_use_PrivateKey(s, srv_key), 1);
    if (max_version != 0)
        assert_int_equal(SSL_CTX_set_max_proto_version(s, max_version), 1);
    SSL_CTX_set_alpn_select_cb(s, alpn_select, NULL);
    return s;
}

typedef struct {
    SSL_CTX *sctx;
    SSL *srv;
    BIO *sin, *sout; /* owned by srv */
    vsr_tls_ctx_t *cctx;
    vsr_tls_t *cli;
    int srv_done;
} pair_t;

/* takes sctx */
static void pair_open_ctx(pair_t *p, SSL_CTX *sctx, int verify, const char *host)
{
    memset(p, 0, sizeof(*p));
    p->sctx = sctx;
    p->srv = SSL_new(p->sctx);
    p->sin = BIO_new(BIO_s_mem());
    p->sout = BIO_new(BIO_s_mem());
    SSL_set_bio(p->srv, p->sin, p->sout);
    SSL_set_accept_state(p->srv);
    vsr_buf_t err;
    vsr_buf_init(&err, 1024);
    p->cctx = vsr__tls_ctx_new(verify, &err);
    assert_non_null(p->cctx);
    assert_int_equal(err.len, 0);
    vsr_buf_free(&err);
    p->cli = vsr__tls_new(p->cctx, host);
    assert_non_null(p->cli);
}

static void pair_open(pair_t *p, X509 *cert, int max_version, int verify, const char *host)
{
    pair_open_ctx(p, server_ctx(cert, max_version), verify, host);
}

static void pair_close(pair_t *p)
{
    vsr__tls_free(p->cli);
    vsr__tls_ctx_free(p->cctx);
    SSL_free(p->srv);
    SSL_CTX_free(p->sctx);
    ERR_clear_error();
}

/* client -> server: every pending byte, taken in odd-sized pieces */
static size_t c2s(pair_t *p)
{
    char buf[5000];
    size_t n, total = 0;
    while ((n = vsr__tls_take_out(p->cli, buf, sizeof(buf))) > 0) {
        assert_int_equal(BIO_write(p->sin, buf, (int)n), (int)n);
        total += n;
    }
    assert_int_equal(vsr__tls_pending_out(p->cli), 0);
    return total;
}

/* server -> client: every pending byte (the caller keeps it under 1 MiB) */
static size_t s2c(pair_t *p)
{
    char buf[16384];
    int n;
    size_t total = 0;
    while ((n = BIO_read(p->sout, buf, sizeof(buf))) > 0) {
        assert_int_equal(vsr__tls_feed(p->cli, buf, (size_t)n), VSR_OK);
        total += (size_t)n;
    }
    return total;
}

/* 1 done, 0 wants more, -1 failed */
static int srv_step(pair_t *p)
{
    if (p->srv_done)
        return 1;
    int r = SSL_do_handshake(p->srv);
    if (r == 1)
        return p->srv_done = 1;
    return SSL_get_error(p->srv, r) == SSL_ERROR_WANT_READ ? 0 : -1;
}

/* The client's last handshake result.  When both ends are done, what the
 * server sent last (TLS 1.3 session tickets) is left in p->sout. */
static int pair_handshake(pair_t *p)
{
    int rc = VSR_AGAIN;
    for (int i = 0; i < 20; i++) {
        rc = vsr__tls_handshake(p->cli);
        c2s(p);
        int s = srv_step(p);
        if (rc == VSR_ERR || (rc == VSR_OK && s == 1))
            return rc;
        s2c(p);
    }
    return rc;
}

/* Reads the client's plaintext until it has none (0); returns the total,
 * appended to out (may be NULL). */
static size_t cli_drain(pair_t *p, vsr_buf_t *out)
{
    char buf[7000];
    size_t total = 0;
    for (;;) {
        ssize_t n = vsr__tls_read(p->cli, buf, sizeof(buf));
        assert_true(n >= 0);
        if (n == 0)
            return total;
        if (out != NULL)
            assert_int_equal(vsr_buf_append(out, buf, (size_t)n), VSR_OK);
        total += (size_t)n;
    }
}

static size_t srv_drain(pair_t *p, vsr_buf_t *out)
{
    char buf[9000];
    size_t total = 0, n;
    int r;
    while ((r = SSL_read_ex(p->srv, buf, sizeof(buf), &n)) == 1) {
        if (out != NULL)
            assert_int_equal(vsr_buf_append(out, buf, n), VSR_OK);
        total += n;
    }
    assert_int_equal(SSL_get_error(p->srv, r), SSL_ERROR_WANT_READ);
    return total;
}

static void srv_write(pair_t *p, const char *s, size_t n)
{
    size_t w;
    assert_int_equal(SSL_write_ex(p->srv, s, n, &w), 1);
    assert_int_equal(w, n);
}

static void open_ok(pair_t *p, X509 *cert, int max_version, int verify, const char *host)
{
    pair_open(p, cert, max_version, verify, host);
    int rc = pair_handshake(p);
    if (rc != VSR_OK)
        fail_msg("handshake with %s: %d %s", host, rc, vsr__tls_error(p->cli));
    assert_int_equal(p->srv_done, 1);
    s2c(p);
    assert_int_equal(cli_drain(p, NULL), 0); /* tickets are no data */
}

static void expect_verify_error(X509 *cert, const char *host, const char *why)
{
    pair_t p;
    pair_open(&p, cert, 0, 1, host);
    assert_int_equal(pair_handshake(&p), VSR_ERR);
    const char *e = vsr__tls_error(p.cli);
    if (strstr(e, "certificate verify failed: ") != e || strstr(e, why) == NULL)
        fail_msg("%s: error \"%s\", wanted \"%s\"", host, e, why);
    /* still failed, and nothing goes through any more */
    assert_int_equal(vsr__tls_handshake(p.cli), VSR_ERR);
    char buf[16];
    assert_int_equal(vsr__tls_read(p.cli, buf, sizeof(buf)), VSR_ERR);
    assert_int_equal(vsr__tls_write(p.cli, "x", 1), VSR_ERR);
    pair_close(&p);
}

/* ---- tests ---- */

static void test_handshake_trusted_name(void **state)
{
    (void)state;
    pair_t p;
    alpn_offer_len = 0;
    open_ok(&p, cert_name, 0, 1, "localhost");
    assert_int_equal(SSL_version(p.srv), TLS1_3_VERSION);
    /* SNI sent for a name; ALPN offers exactly http/1.1 */
    const char *sni = SSL_get_servername(p.srv, TLSEXT_NAMETYPE_host_name);
    assert_non_null(sni);
    assert_string_equal(sni, "localhost");
    assert_int_equal(alpn_offer_len, 9);
    assert_memory_equal(alpn_offer, "\x08http/1.1", 9);
    assert_string_equal(vsr__tls_error(p.cli), "");
    /* done is done */
    assert_int_equal(vsr__tls_handshake(p.cli), VSR_OK);
    pair_close(&p);

    /* a wildcard name, a trailing dot */
    open_ok(&p, cert_name, 0, 1, "api.example.test");
    pair_close(&p);
    open_ok(&p, cert_name, 0, 1, "localhost.");
    assert_string_equal(SSL_get_servername(p.srv, TLSEXT_NAMETYPE_host_name), "localhost");
    pair_close(&p);
}

static void test_host_mismatch(void **state)
{
    (void)state;
    expect_verify_error(cert_name, "example.com", "hostname mismatch");
    /* a wildcard covers one label only */
    expect_verify_error(cert_name, "a.b.example.test", "hostname mismatch");
    expect_verify_error(cert_name, "example.test", "hostname mismatch");
    /* and only as the whole label */
    expect_verify_error(cert_partial, "api1.example.test", "hostname mismatch");
    /* an IP literal is not checked against DNS names */
    expect_verify_error(cert_name, "127.0.0.1", "IP address mismatch");
}

static void test_untrusted_ca(void **state)
{
    (void)state;
    expect_verify_error(cert_other, "localhost", "unable to get local issuer certificate");
}

static void test_ip_literal(void **state)
{
    (void)state;
    pair_t p;
    open_ok(&p, cert_ip, 0, 1, "127.0.0.1");
    assert_null(SSL_get_servername(p.srv, TLSEXT_NAMETYPE_host_name)); /* no SNI */
    pair_close(&p);
    open_ok(&p, cert_ip, 0, 1, "::1");
    assert_null(SSL_get_servername(p.srv, TLSEXT_NAMETYPE_host_name));
    pair_close(&p);
    open_ok(&p, cert_ip, 0, 1, "[::1]");
    pair_close(&p);
    expect_verify_error(cert_ip, "127.0.0.2", "IP address mismatch");
    expect_verify_error(cert_ip, "::2", "IP address mismatch");
    /* a name is not checked against IP SANs */
    expect_verify_error(cert_ip, "localhost", "hostname mismatch");
}

static void test_verify_off(void **state)
{
    (void)state;
    pair_t p;
    open_ok(&p, cert_other, 0, 0, "example.com");
    /* and the connection works */
    srv_write(&p, "hi", 2);
    s2c(&p);
    char buf[8];
    assert_int_equal(vsr__tls_read(p.cli, buf, sizeof(buf)), 2);
    assert_memory_equal(buf, "hi", 2);
    pair_close(&p);
}

/* The trust store is read from SSL_CERT_FILE when the context is made. */
static void test_cert_file_env(void **state)
{
    (void)state;
    use_ca_file(ca2_file);
    pair_t p;
    open_ok(&p, cert_other, 0, 1, "localhost");
    pair_close(&p);
    expect_verify_error(cert_name, "localhost", "unable to get local issuer certificate");
    use_ca_file(ca1_file);
    expect_verify_error(cert_other, "localhost", "unable to get local issuer certificate");
}

static void test_bad_host(void **state)
{
    (void)state;
    vsr_tls_ctx_t *ctx = vsr__tls_ctx_new(1, NULL);
    assert_non_null(ctx);
    const char *bad[] = {"", ".", "[]", "a%b"};
    for (size_t i = 0; i < VSR_ARRAY_LEN(bad); i++) {
        vsr_tls_t *t = vsr__tls_new(ctx, bad[i]);
        assert_non_null(t);
        assert_int_equal(vsr__tls_handshake(t), VSR_ERR);
        assert_true(strlen(vsr__tls_error(t)) > 0);
        assert_int_equal(vsr__tls_pending_out(t), 0);
        assert_int_equal(vsr__tls_feed(t, "x", 1), VSR_OK);
        vsr__tls_free(t);
    }
    /* a zone is dropped: still an IP literal, so no SNI */
    vsr_tls_t *t = vsr__tls_new(ctx, "fe80::1%eth0");
    assert_int_equal(vsr__tls_handshake(t), VSR_AGAIN);
    assert_true(vsr__tls_pending_out(t) > 0);
    vsr__tls_free(t);
    vsr__tls_free(NULL);
    vsr__tls_ctx_free(ctx);
}

static void test_garbage_from_server(void **state)
{
    (void)state;
    vsr_tls_ctx_t *ctx = vsr__tls_ctx_new(1, NULL);
    vsr_tls_t *t = vsr__tls_new(ctx, "localhost");
    assert_int_equal(vsr__tls_handshake(t), VSR_AGAIN);
    assert_true(vsr__tls_pending_out(t) > 0);
    char buf[16];
    /* before the handshake: no data, and no writing */
    assert_int_equal(vsr__tls_read(t, buf, sizeof(buf)), 0);
    assert_int_equal(vsr__tls_write(t, "x", 1), VSR_ERR);
    const char *http = "HTTP/1.1 400 Bad Request\r\n\r\n";
    assert_int_equal(vsr__tls_feed(t, http, strlen(http)), VSR_OK);
    assert_int_equal(vsr__tls_handshake(t), VSR_ERR);
    const char *e = vsr__tls_error(t);
    assert_non_null(strstr(e, "TLS handshake failed: "));
    assert_non_null(strstr(e, "wrong version number"));
    vsr__tls_free(t);
    vsr__tls_ctx_free(ctx);
}

static void fill_pattern(char *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (char)((i * 131 + seed + (i >> 11)) & 0xff);
}

static void test_data_both_ways(void **state)
{
    (void)state;
    pair_t p;
    open_ok(&p, cert_name, 0, 1, "localhost");

    /* small */
    assert_int_equal(vsr__tls_write(p.cli, "GET / HTTP/1.1\r\n\r\n", 18), VSR_OK);
    assert_int_equal(vsr__tls_write(p.cli, "", 0), VSR_OK);
    assert_true(vsr__tls_pending_out(p.cli) > 18); /* encrypted, framed */
    c2s(&p);
    vsr_buf_t got;
    vsr_buf_init(&got, 0);
    assert_int_equal(srv_drain(&p, &got), 18);
    assert_memory_equal(got.data, "GET / HTTP/1.1\r\n\r\n", 18);
    vsr_buf_reset(&got);
    srv_write(&p, "HTTP/1.1 200 OK\r\n", 17);
    s2c(&p);
    /* a small out buffer takes it piecewise */
    char small[5];
    ssize_t n;
    while ((n = vsr__tls_read(p.cli, small, sizeof(small))) > 0)
        vsr_buf_append(&got, small, (size_t)n);
    assert_int_equal(n, 0);
    assert_int_equal(got.len, 17);
    assert_memory_equal(got.data, "HTTP/1.1 200 OK\r\n", 17);
    assert_int_equal(vsr__tls_read(p.cli, small, 0), 0);

    /* 1 MiB + a bit, client to server, in uneven pieces */
    const size_t big = 1024 * 1024 + 12345;
    char *data = vsr_malloc(big);
    fill_pattern(data, big, 7);
    static const size_t pieces[] = {1, 7, 1000, 16384, 16385, 70000, 3};
    size_t off = 0;
    vsr_buf_reset(&got);
    for (size_t i = 0; off < big; i++) {
        size_t k = VSR_MIN(pieces[i % VSR_ARRAY_LEN(pieces)], big - off);
        assert_int_equal(vsr__tls_write(p.cli, data + off, k), VSR_OK);
        off += k;
        if (i % 5 == 0) {
            c2s(&p);
            srv_drain(&p, &got);
        }
    }
    c2s(&p);
    srv_drain(&p, &got);
    assert_int_equal(got.len, big);
    assert_memory_equal(got.data, data, big);

    /* server to client: more than 1 MiB of ciphertext cannot wait unread */
    fill_pattern(data, big, 99);
    srv_write(&p, data, big);
    vsr_buf_reset(&got);
    char chunk[65536];
    int k, refused = 0;
    size_t fed_before_refusal = 0;
    while ((k = BIO_read(p.sout, chunk, sizeof(chunk))) > 0) {
        int rc = vsr__tls_feed(p.cli, chunk, (size_t)k);
        if (rc == VSR_ERR_TOO_BIG) {
            if (!refused)
                assert_true(fed_before_refusal <= 1024 * 1024 &&
                            fed_before_refusal + (size_t)k > 1024 * 1024);
            refused++;
            cli_drain(&p, &got); /* read first, then it fits */
            rc = vsr__tls_feed(p.cli, chunk, (size_t)k);
        }
        assert_int_equal(rc, VSR_OK);
        fed_before_refusal += (size_t)k;
    }
    cli_drain(&p, &got);
    assert_int_equal(refused, 1);
    assert_int_equal(got.len, big);
    assert_memory_equal(got.data, data, big);

    /* the connection still works after its buffers were swapped for small ones */
    assert_int_equal(vsr__tls_write(p.cli, "ping", 4), VSR_OK);
    c2s(&p);
    vsr_buf_reset(&got);
    assert_int_equal(srv_drain(&p, &got), 4);
    srv_write(&p, "pong", 4);
    s2c(&p);
    vsr_buf_reset(&got);
    assert_int_equal(cli_drain(&p, &got), 4);
    assert_memory_equal(got.data, "pong", 4);

    vsr_free(data);
    vsr_buf_free(&got);
    pair_close(&p);
}

static void test_close_notify(void **state)
{
    (void)state;
    pair_t p;
    open_ok(&p, cert_name, 0, 1, "localhost");
    srv_write(&p, "by", 2);
    SSL_shutdown(p.srv);
    s2c(&p);
    char buf[16];
    /* the data, then close_notify: an end no caller can read as a byte count */
    assert_int_equal(vsr__tls_read(p.cli, buf, sizeof(buf)), 2);
    assert_memory_equal(buf, "by", 2);
    assert_false(vsr__tls_peer_closed(p.cli));
    assert_int_equal(vsr__tls_read(p.cli, buf, sizeof(buf)), VSR_EOF);
    assert_true(vsr__tls_peer_closed(p.cli));
    assert_int_equal(vsr__tls_read(p.cli, buf, sizeof(buf)), VSR_EOF);
    assert_int_equal(vsr__tls_write(p.cli, "x", 1), VSR_ERR);
    pair_close(&p);
}

static void test_truncated_record_is_not_data(void **state)
{
    (void)state;
    pair_t p;
    open_ok(&p, cert_name, 0, 1, "localhost");
    srv_write(&p, "0123456789", 10);
    char wire[256];
    int n = BIO_read(p.sout, wire, sizeof(wire));
    assert_true(n > 10);
    /* byte by byte: nothing until the record is whole */
    char buf[32];
    for (int i = 0; i < n - 1; i++) {
        assert_int_equal(vsr__tls_feed(p.cli, wire + i, 1), VSR_OK);
        assert_int_equal(vsr__tls_read(p.cli, buf, sizeof(buf)), 0);
    }
    assert_int_equal(vsr__tls_feed(p.cli, wire + n - 1, 1), VSR_OK);
    assert_int_equal(vsr__tls_read(p.cli, buf, sizeof(buf)), 10);
    assert_memory_equal(buf, "0123456789", 10);

    /* a flipped bit: the record fails authentication */
    srv_write(&p, "abc", 3);
    n = BIO_read(p.sout, wire, sizeof(wire));
    wire[n - 2] ^= 1;
    assert_int_equal(vsr__tls_feed(p.cli, wire, (size_t)n), VSR_OK);
    assert_int_equal(vsr__tls_read(p.cli, buf, sizeof(buf)), VSR_ERR);
    assert_non_null(strstr(vsr__tls_error(p.cli), "TLS read failed: "));
    assert_int_equal(vsr__tls_read(p.cli, buf, sizeof(buf)), VSR_ERR);
    pair_close(&p);
}

static void test_session_tickets(void **state)
{
    (void)state;
    pair_t p;
    pair_open(&p, cert_name, 0, 1, "localhost");
    SSL_CTX_set_num_tickets(p.sctx, 2); /* already the default; say it */
    assert_int_equal(pair_handshake(&p), VSR_OK);
    assert_int_equal(SSL_version(p.srv), TLS1_3_VERSION);
    /* the server's tickets follow its side of the handshake */
    assert_true(s2c(&p) > 0);
    char buf[64];
    assert_int_equal(vsr__tls_read(p.cli, buf, sizeof(buf)), 0);
    assert_string_equal(vsr__tls_error(p.cli), "");

    /* a ticket sent later, in front of data */
    assert_int_equal(SSL_new_session_ticket(p.srv), 1);
    srv_write(&p, "after-ticket", 12);
    s2c(&p);
    assert_int_equal(vsr__tls_read(p.cli, buf, sizeof(buf)), 12);
    assert_memory_equal(buf, "after-ticket", 12);
    assert_int_equal(vsr__tls_read(p.cli, buf, sizeof(buf)), 0);
    /* a ticket alone */
    assert_int_equal(SSL_new_session_ticket(p.srv), 1);
    assert_int_equal(SSL_do_handshake(p.srv), 1);
    assert_true(s2c(&p) > 0);
    assert_int_equal(vsr__tls_read(p.cli, buf, sizeof(buf)), 0);
    pair_close(&p);
}

static int key_updates_seen; /* KeyUpdate messages the server received */

static void count_key_updates(int write_p, int version, int content_type, const void *buf,
                              size_t len, SSL *ssl, void *arg)
{
    (void)version;
    (void)ssl;
    (void)arg;
    if (!write_p && content_type == SSL3_RT_HANDSHAKE && len > 0 &&
        ((const unsigned char *)buf)[0] == SSL3_MT_KEY_UPDATE)
        key_updates_seen++;
}

static void test_key_update(void **state)
{
    (void)state;
    pair_t p;
    open_ok(&p, cert_name, 0, 1, "localhost");
    /* the server rekeys and asks the client to do the same */
    assert_int_equal(SSL_key_update(p.srv, SSL_KEY_UPDATE_REQUESTED), 1);
    srv_write(&p, "rekeyed", 7);
    s2c(&p);
    char buf[64];
    assert_int_equal(vsr__tls_read(p.cli, buf, sizeof(buf)), 7);
    assert_memory_equal(buf, "rekeyed", 7);
    /* the client's own KeyUpdate goes out ahead of its next data */
    key_updates_seen = 0;
    SSL_set_msg_callback(p.srv, count_key_updates);
    assert_int_equal(vsr__tls_write(p.cli, "after", 5), VSR_OK);
    c2s(&p);
    vsr_buf_t got;
    vsr_buf_init(&got, 0);
    assert_int_equal(srv_drain(&p, &got), 5);
    assert_memory_equal(got.data, "after", 5);
    assert_int_equal(key_updates_seen, 1);

    /* a key update with no data behind it */
    assert_int_equal(SSL_key_update(p.srv, SSL_KEY_UPDATE_NOT_REQUESTED), 1);
    assert_int_equal(SSL_do_handshake(p.srv), 1);
    assert_true(s2c(&p) > 0);
    assert_int_equal(vsr__tls_read(p.cli, buf, sizeof(buf)), 0);
    srv_write(&p, "more", 4);
    s2c(&p);
    assert_int_equal(vsr__tls_read(p.cli, buf, sizeof(buf)), 4);
    vsr_buf_free(&got);
    pair_close(&p);
}

static void test_tls12_and_renegotiation(void **state)
{
    (void)state;
    pair_t p;
    open_ok(&p, cert_name, TLS1_2_VERSION, 1, "localhost");
    assert_int_equal(SSL_version(p.srv), TLS1_2_VERSION);
    char buf[64];

    /* the server asks for a renegotiation (HelloRequest) */
    assert_int_equal(SSL_renegotiate(p.srv), 1);
    assert_int_equal(SSL_renegotiate_pending(p.srv), 1);
    SSL_do_handshake(p.srv);
    assert_true(s2c(&p) > 0);
    /* the client answers with a new ClientHello; no data, no error */
    assert_int_equal(vsr__tls_read(p.cli, buf, sizeof(buf)), 0);
    assert_true(vsr__tls_pending_out(p.cli) > 0);
    /* writing while the handshake runs: accepted and held */
    assert_int_equal(vsr__tls_write(p.cli, "during", 6), VSR_OK);
    assert_int_equal(vsr__tls_write(p.cli, "-reneg", 6), VSR_OK);
    vsr_buf_t got;
    vsr_buf_init(&got, 0);
    for (int i = 0; i < 10 && SSL_renegotiate_pending(p.srv); i++) {
        c2s(&p);
        srv_drain(&p, &got);
        s2c(&p);
        assert_true(vsr__tls_read(p.cli, buf, sizeof(buf)) >= 0);
    }
    assert_int_equal(SSL_renegotiate_pending(p.srv), 0);
    assert_true(SSL_num_renegotiations(p.srv) >= 1);
    c2s(&p);
    srv_drain(&p, &got);
    assert_int_equal(got.len, 12);
    assert_memory_equal(got.data, "during-reneg", 12);

    /* and data flows on the new keys */
    srv_write(&p, "renewed", 7);
    s2c(&p);
    assert_int_equal(vsr__tls_read(p.cli, buf, sizeof(buf)), 7);
    assert_memory_equal(buf, "renewed", 7);
    vsr_buf_free(&got);
    pair_close(&p);
}

static void test_tls11_refused(void **state)
{
    (void)state;
    /* A TLS 1.1 server (security level 0, or OpenSSL 3 would not speak it
     * at all).  A plain OpenSSL client allowed the same does connect... */
    SSL_CTX *sctx = server_ctx(cert_name, TLS1_1_VERSION);
    SSL_CTX_set_security_level(sctx, 0);
    SSL_CTX *octx = SSL_CTX_new(TLS_client_method());
    SSL_CTX_set_security_level(octx, 0);
    SSL_CTX_set_min_proto_version(octx, TLS1_VERSION);
    SSL *srv = SSL_new(sctx), *cli = SSL_new(octx);
    BIO *a = NULL, *b = NULL;
    assert_int_equal(BIO_new_bio_pair(&a, 0, &b, 0), 1);
    SSL_set_bio(srv, a, a);
    SSL_set_bio(cli, b, b);
    SSL_set_accept_state(srv);
    SSL_set_connect_state(cli);
    int cdone = 0, sdone = 0;
    for (int i = 0; i < 20 && !(cdone && sdone); i++) {
        cdone = cdone || SSL_do_handshake(cli) == 1;
        sdone = sdone || SSL_do_handshake(srv) == 1;
    }
    assert_true(cdone && sdone);
    assert_int_equal(SSL_version(cli), TLS1_1_VERSION);
    SSL_free(srv);
    SSL_free(cli);
    SSL_CTX_free(octx);

    /* ...but vsr's client does not. */
    pair_t p;
    pair_open_ctx(&p, sctx, 1, "localhost");
    assert_int_equal(pair_handshake(&p), VSR_ERR);
    const char *e = vsr__tls_error(p.cli);
    if (strstr(e, "TLS handshake failed: ") == NULL || strstr(e, "protocol version") == NULL)
        fail_msg("error \"%s\"", e);
    pair_close(&p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_handshake_trusted_name),
        cmocka_unit_test(test_host_mismatch),
        cmocka_unit_test(test_untrusted_ca),
        cmocka_unit_test(test_ip_literal),
        cmocka_unit_test(test_verify_off),
        cmocka_unit_test(test_cert_file_env),
        cmocka_unit_test(test_bad_host),
        cmocka_unit_test(test_garbage_from_server),
        cmocka_unit_test(test_data_both_ways),
        cmocka_unit_test(test_close_notify),
        cmocka_unit_test(test_truncated_record_is_not_data),
        cmocka_unit_test(test_session_tickets),
        cmocka_unit_test(test_key_update),
        cmocka_unit_test(test_tls12_and_renegotiation),
        cmocka_unit_test(test_tls11_refused),
    };
    int rc = cmocka_run_group_tests(tests, setup, teardown);
    OPENSSL_cleanup();
    return rc;
}
