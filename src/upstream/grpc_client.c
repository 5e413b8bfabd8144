/*
 * grpc_client.c — a blocking unary gRPC client for background threads (the
 * OTLP/gRPC trace exporter): one HTTP/2 connection over nghttp2, h2c or TLS
 * through the sans-IO TLS object (ALPN h2), kept alive between calls.
 *
 * Every step waits with poll() against the call's deadline, so a slow or
 * dead server costs the calling thread time, never more than the deadline.
 * One call at a time: the request is the 5-byte gRPC prefix and the
 * message, sent with te: trailers and a grpc-timeout; the answer is
 * :status, the response message (at most VSR_GRPC_CLIENT_MAX_ANSWER bytes)
 * and grpc-status / grpc-message in the trailers (or in the headers of a
 * trailers-only answer).
 */
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <nghttp2/nghttp2.h>
#include <poll.h>
#include <stdio.h>
#include <sys/socket.h>
#include <unistd.h>

#include "upstream/tls.h"
#include "upstream/upstream-int.h"

#define IO_CHUNK 16384

struct vsr_grpc_client_s {
    char host[256];
    char authority[300];
    uint16_t port;
    int tls;
    vsr_tls_ctx_t *tls_ctx;
    /* the connection */
    int fd;
    vsr_tls_t *conn_tls;
    nghttp2_session *sess;
    int broken; /* a transport error or a GOAWAY: the connection goes after this call */
    uint64_t deadline;
    /* the call in flight */
    int32_t stream_id;
    int closed;
    uint32_t reset_code;
    const uint8_t *body;
    size_t body_len, body_off;
    int http_status;
    char grpc_status[16];
    size_t grpc_status_len;
    int have_grpc_status;
    char grpc_message[VSR_GRPC_CLIENT_MAX_MESSAGE];
    size_t grpc_message_len;
    vsr_buf_t data; /* the response DATA, bounded */
    int data_too_big;
    char why[VSR_GRPC_CLIENT_MAX_MESSAGE]; /* a failure's reason that outlives the connection */
};

/* ---- the answer's parts (what the server sends back) ---- */

int vsr_grpc_status_parse(vsr_slice_t v)
{
    /* 1*DIGIT; the codes are 0..16, an unknown one is UNKNOWN (2) */
    if (v.len == 0 || v.len > 3)
        return -1;
    int x = 0;
    for (size_t i = 0; i < v.len; i++) {
        if (v.p[i] < '0' || v.p[i] > '9')
            return -1;
        x = x * 10 + (v.p[i] - '0');
    }
    return x <= 16 ? x : 2;
}

static int hexdigit(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

size_t vsr_grpc_message_decode(vsr_slice_t v, char *out, size_t cap)
{
    /* percent-decoded; bytes outside printable ASCII become '?' so the
     * message is safe to log; at most cap-1 bytes and a NUL */
    size_t n = 0;
    if (cap == 0)
        return 0;
    for (size_t i = 0; i < v.len && n + 1 < cap; i++) {
        unsigned char c = (unsigned char)v.p[i];
        if (c == '%' && i + 2 < v.len && hexdigit(v.p[i + 1]) >= 0 && hexdigit(v.p[i + 2]) >= 0) {
            c = (unsigned char)(hexdigit(v.p[i + 1]) << 4 | hexdigit(v.p[i + 2]));
            i += 2;
        }
        out[n++] = c >= 0x20 && c < 0x7f ? (char)c : '?';
    }
    out[n] = '\0';
    return n;
}

int vsr_grpc_unary_answer(const uint8_t *data, size_t len, const uint8_t **msg, size_t *msg_len)
{
    /* no message at all (a trailers-only answer), or exactly one, uncompressed */
    *msg = NULL;
    *msg_len = 0;
    if (len == 0)
        return VSR_OK;
    if (len < 5 || data[0] != 0)
        return VSR_ERR_INVALID;
    size_t need = (size_t)data[1] << 24 | (size_t)data[2] << 16 | (size_t)data[3] << 8 | (size_t)data[4];
    if (need != len - 5)
        return VSR_ERR_INVALID;
    *msg = data + 5;
    *msg_len = need;
    return VSR_OK;
}

/* ---- the socket ---- */

static int tcp_connect(const char *host, uint16_t port, uint64_t deadline)
{
    char ps[8];
    snprintf(ps, sizeof(ps), "%u", port);
    return vsr_tcp_dial(host, ps, deadline);
}

static int send_raw(int fd, const char *p, size_t n, uint64_t deadline)
{
    while (n > 0) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w > 0) {
            p += w;
            n -= (size_t)w;
        } else if (w < 0 && errno == EINTR) {
            continue;
        } else if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            if (vsr_fd_wait(fd, POLLOUT, deadline) != 0)
                return -1;
        } else {
            return -1;
        }
    }
    return 0;
}

/* Ciphertext the TLS object holds, to the socket. */
static int flush_tls(vsr_grpc_client_t *c)
{
    char buf[IO_CHUNK];
    while (vsr__tls_pending_out(c->conn_tls) > 0) {
        size_t n = vsr__tls_take_out(c->conn_tls, buf, sizeof(buf));
        if (send_raw(c->fd, buf, n, c->deadline) != 0)
            return -1;
    }
    return 0;
}

/* Plaintext to the server. */
static int conn_send(vsr_grpc_client_t *c, const uint8_t *p, size_t n)
{
    if (!c->tls)
        return send_raw(c->fd, (const char *)p, n, c->deadline);
    if (vsr__tls_write(c->conn_tls, (const char *)p, n) != VSR_OK)
        return -1;
    return flush_tls(c);
}

/* Waits for bytes and reads them: > 0 plaintext bytes, 0 none yet (TLS
 * records still incomplete), -1 on a failure, the deadline or the end. */
static ssize_t conn_recv(vsr_grpc_client_t *c, char *out, size_t cap)
{
    if (c->tls) {
        ssize_t r = vsr__tls_read(c->conn_tls, out, cap);
        if (r != 0)
            return r > 0 ? r : -1; /* VSR_EOF at close_notify */
    }
    if (vsr_fd_wait(c->fd, POLLIN, c->deadline) != 0)
        return -1;
    char raw[IO_CHUNK];
    ssize_t r = recv(c->fd, c->tls ? raw : out, c->tls ? sizeof(raw) : cap, 0);
    if (r < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK))
        return 0;
    if (r <= 0)
        return -1;
    if (!c->tls)
        return r;
    if (vsr__tls_feed(c->conn_tls, raw, (size_t)r) != VSR_OK)
        return -1;
    r = vsr__tls_read(c->conn_tls, out, cap);
    if (flush_tls(c) != 0) /* a TLS 1.3 key update, say */
        return -1;
    return r >= 0 ? r : -1;
}

static int tls_handshake(vsr_grpc_client_t *c)
{
    for (;;) {
        int rc = vsr__tls_handshake(c->conn_tls);
        if (flush_tls(c) != 0 || rc == VSR_ERR)
            return -1;
        if (rc == VSR_OK)
            return vsr__tls_selected_h2(c->conn_tls) ? 0 : -1;
        char raw[IO_CHUNK];
        if (vsr_fd_wait(c->fd, POLLIN, c->deadline) != 0)
            return -1;
        ssize_t r = recv(c->fd, raw, sizeof(raw), 0);
        if (r < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK))
            continue;
        if (r <= 0 || vsr__tls_feed(c->conn_tls, raw, (size_t)r) != VSR_OK)
            return -1;
    }
}

/* ---- the HTTP/2 session ---- */

static int on_header(nghttp2_session *sess, const nghttp2_frame *f, const uint8_t *name, size_t namelen,
                     const uint8_t *value, size_t valuelen, uint8_t flags, void *ud)
{
    (void)sess;
    (void)flags;
    vsr_grpc_client_t *c = ud;
    if (f->hd.type != NGHTTP2_HEADERS || f->hd.stream_id != c->stream_id)
        return 0;
    vsr_slice_t n = vsr_slice((const char *)name, namelen), v = vsr_slice((const char *)value, valuelen);
    if (vsr_slice_eq_cstr(n, ":status")) {
        uint64_t st;
        c->http_status = vsr_slice_to_u64(v, 999, &st) == VSR_OK ? (int)st : 0;
    } else if (vsr_slice_eq_cstr(n, "grpc-status")) {
        c->grpc_status_len = VSR_MIN(valuelen, sizeof(c->grpc_status));
        memcpy(c->grpc_status, value, c->grpc_status_len);
        c->have_grpc_status = 1;
    } else if (vsr_slice_eq_cstr(n, "grpc-message")) {
        c->grpc_message_len = vsr_grpc_message_decode(v, c->grpc_message, sizeof(c->grpc_message));
    }
    return 0;
}

static int on_data_chunk(nghttp2_session *sess, uint8_t flags, int32_t id, const uint8_t *data, size_t len, void *ud)
{
    (void)sess;
    (void)flags;
    vsr_grpc_client_t *c = ud;
    if (id != c->stream_id)
        return 0;
    if (vsr_buf_append(&c->data, data, len) != VSR_OK) {
        c->data_too_big = 1;
        nghttp2_submit_rst_stream(sess, NGHTTP2_FLAG_NONE, id, NGHTTP2_CANCEL);
    }
    return 0;
}

static int on_stream_close(nghttp2_session *sess, int32_t id, uint32_t error_code, void *ud)
{
    (void)sess;
    vsr_grpc_client_t *c = ud;
    if (id == c->stream_id) {
        c->closed = 1;
        c->reset_code = error_code;
    }
    return 0;
}

static int on_frame_recv(nghttp2_session *sess, const nghttp2_frame *f, void *ud)
{
    (void)sess;
    vsr_grpc_client_t *c = ud;
    if (f->hd.type == NGHTTP2_GOAWAY) {
        c->broken = 1;
        if (c->stream_id > f->goaway.last_stream_id && !c->closed) { /* not processed: it failed */
            c->closed = 1;
            c->reset_code = NGHTTP2_REFUSED_STREAM;
        }
    }
    return 0;
}

static ssize_t read_body(nghttp2_session *sess, int32_t id, uint8_t *buf, size_t length, uint32_t *flags,
                         nghttp2_data_source *src, void *ud)
{
    (void)sess;
    (void)id;
    (void)src;
    vsr_grpc_client_t *c = ud;
    size_t n = VSR_MIN(length, c->body_len - c->body_off);
    memcpy(buf, c->body + c->body_off, n);
    c->body_off += n;
    if (c->body_off == c->body_len)
        *flags |= NGHTTP2_DATA_FLAG_EOF;
    return (ssize_t)n;
}

static void conn_drop(vsr_grpc_client_t *c)
{
    if (c->sess)
        nghttp2_session_del(c->sess);
    c->sess = NULL;
    vsr__tls_free(c->conn_tls);
    c->conn_tls = NULL;
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
    c->broken = 0;
}

static int conn_open(vsr_grpc_client_t *c, const char **why)
{
    c->fd = tcp_connect(c->host, c->port, c->deadline);
    if (c->fd < 0) {
        *why = "cannot connect";
        return -1;
    }
    if (c->tls) {
        c->conn_tls = vsr__tls_new(c->tls_ctx, c->host);
        if (c->conn_tls == NULL || vsr__tls_offer_h2(c->conn_tls) != VSR_OK || tls_handshake(c) != 0) {
            /* copied: the TLS object goes with the connection */
            const char *e = c->conn_tls ? vsr__tls_error(c->conn_tls) : NULL;
            snprintf(c->why, sizeof(c->why), "TLS: %s",
                     e && e[0] ? e : "the handshake failed, or the server did not choose h2");
            *why = c->why;
            return -1;
        }
    }
    nghttp2_session_callbacks *cb;
    nghttp2_session_callbacks_new(&cb);
    nghttp2_session_callbacks_set_on_header_callback(cb, on_header);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, on_data_chunk);
    nghttp2_session_callbacks_set_on_stream_close_callback(cb, on_stream_close);
    nghttp2_session_callbacks_set_on_frame_recv_callback(cb, on_frame_recv);
    int rc = nghttp2_session_client_new(&c->sess, cb, c);
    nghttp2_session_callbacks_del(cb);
    if (rc != 0) {
        *why = "cannot start an HTTP/2 session";
        return -1;
    }
    nghttp2_settings_entry iv[] = {{NGHTTP2_SETTINGS_ENABLE_PUSH, 0},
                                   {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, 16}};
    nghttp2_submit_settings(c->sess, NGHTTP2_FLAG_NONE, iv, VSR_ARRAY_LEN(iv));
    return 0;
}

/* Sends what the session has; reads until the stream closes. */
static int pump(vsr_grpc_client_t *c)
{
    char in[IO_CHUNK];
    while (!c->closed) {
        if (vsr_now_ms() >= c->deadline)
            return -1;
        for (;;) {
            const uint8_t *out;
            ssize_t n = nghttp2_session_mem_send(c->sess, &out);
            if (n < 0)
                return -1;
            if (n == 0)
                break;
            if (conn_send(c, out, (size_t)n) != 0)
                return -1;
        }
        if (c->closed)
            break;
        if (!nghttp2_session_want_read(c->sess))
            return -1;
        ssize_t r = conn_recv(c, in, sizeof(in));
        if (r < 0)
            return -1;
        if (r > 0 && nghttp2_session_mem_recv(c->sess, (const uint8_t *)in, (size_t)r) < 0)
            return -1;
    }
    /* acknowledgements (SETTINGS, WINDOW_UPDATE) go out now, not with the next call */
    const uint8_t *out;
    ssize_t n;
    while ((n = nghttp2_session_mem_send(c->sess, &out)) > 0)
        if (conn_send(c, out, (size_t)n) != 0)
            return -1;
    return n < 0 ? -1 : 0;
}

static void call_reset(vsr_grpc_client_t *c)
{
    c->stream_id = -1;
    c->closed = 0;
    c->reset_code = 0;
    c->body_off = 0;
    c->http_status = 0;
    c->have_grpc_status = 0;
    c->grpc_status_len = 0;
    c->grpc_message_len = 0;
    c->grpc_message[0] = '\0';
    vsr_buf_reset(&c->data);
    c->data_too_big = 0;
}

/* One try on the connection there is (or a new one).  0 when the server
 * answered (res filled), -1 on a transport failure (*why says it). */
static int try_call(vsr_grpc_client_t *c, const char *path, vsr_grpc_client_result_t *res, const char **why)
{
    if (c->sess == NULL && conn_open(c, why) != 0) {
        conn_drop(c);
        return -1;
    }
    call_reset(c);
    char timeout[24];
    uint64_t now = vsr_now_ms();
    /* TimeoutValue is at most 8 digits */
    snprintf(timeout, sizeof(timeout), "%llum",
             (unsigned long long)VSR_MIN(c->deadline > now ? c->deadline - now : 1, 99999999ull));
#define NV(n, v) {(uint8_t *)(n), (uint8_t *)(v), sizeof(n) - 1, strlen(v), NGHTTP2_NV_FLAG_NONE}
    nghttp2_nv nv[] = {NV(":method", "POST"),
                       NV(":scheme", c->tls ? "https" : "http"),
                       NV(":path", path),
                       NV(":authority", c->authority),
                       NV("content-type", "application/grpc"),
                       NV("te", "trailers"),
                       NV("grpc-timeout", timeout),
                       NV("user-agent", "vsr")};
#undef NV
    nghttp2_data_provider dp = {.read_callback = read_body};
    c->stream_id = nghttp2_submit_request(c->sess, NULL, nv, VSR_ARRAY_LEN(nv), &dp, NULL);
    if (c->stream_id < 0) {
        *why = "cannot start a stream";
        conn_drop(c);
        return -1;
    }
    if (pump(c) != 0) {
        *why = vsr_now_ms() >= c->deadline ? "deadline exceeded" : "the connection failed";
        conn_drop(c);
        return -1;
    }
    if (c->data_too_big) {
        *why = "the answer is too big";
        return -1;
    }
    if (c->reset_code != 0) {
        *why = c->reset_code == NGHTTP2_REFUSED_STREAM ? "the stream was refused" : "the stream was reset";
        return -1;
    }
    res->http_status = c->http_status;
    res->grpc_status = c->have_grpc_status ? vsr_grpc_status_parse(vsr_slice(c->grpc_status, c->grpc_status_len))
                                           : -1;
    memcpy(res->message, c->grpc_message, c->grpc_message_len + 1);
    if (vsr_grpc_unary_answer((const uint8_t *)c->data.data, c->data.len, &res->answer, &res->answer_len) != VSR_OK) {
        *why = "the answer is not one gRPC message";
        return -1;
    }
    return 0;
}

int vsr_grpc_client_call(vsr_grpc_client_t *c, const char *path, const void *msg, size_t len, uint64_t deadline_ms,
                         vsr_grpc_client_result_t *res)
{
    memset(res, 0, sizeof(*res));
    res->grpc_status = -1;
    if (len > UINT32_MAX) {
        snprintf(res->message, sizeof(res->message), "the message is too big");
        return VSR_ERR_TOO_BIG;
    }
    vsr_buf_t body;
    vsr_buf_init(&body, 0);
    uint8_t prefix[5] = {0, (uint8_t)(len >> 24), (uint8_t)(len >> 16), (uint8_t)(len >> 8), (uint8_t)len};
    vsr_buf_append(&body, prefix, sizeof(prefix));
    vsr_buf_append(&body, msg, len);
    c->body = (const uint8_t *)body.data;
    c->body_len = body.len;
    c->deadline = deadline_ms;
    int rc = VSR_ERR;
    for (int tries = 0; tries < 2; tries++) {
        int reused = c->sess != NULL;
        const char *why = "failed";
        if (try_call(c, path, res, &why) == 0) {
            rc = VSR_OK;
            break;
        }
        snprintf(res->message, sizeof(res->message), "%s", why);
        /* a kept-alive connection the server closed meanwhile: once more on a new one */
        if (!reused || c->deadline <= vsr_now_ms())
            break;
    }
    if (c->broken)
        conn_drop(c);
    c->body = NULL;
    vsr_buf_free(&body);
    return rc;
}

vsr_grpc_client_t *vsr_grpc_client_new(const char *host, uint16_t port, int tls, vsr_buf_t *err)
{
    if (host == NULL || strlen(host) >= sizeof(((vsr_grpc_client_t *)0)->host)) {
        if (err)
            vsr_buf_append_cstr(err, "bad host");
        return NULL;
    }
    vsr_grpc_client_t *c = vsr_calloc(1, sizeof(*c));
    strcpy(c->host, host);
    c->port = port;
    c->tls = tls;
    c->fd = -1;
    int v6 = strchr(host, ':') != NULL;
    snprintf(c->authority, sizeof(c->authority), "%s%s%s:%u", v6 ? "[" : "", host, v6 ? "]" : "", port);
    vsr_buf_init(&c->data, VSR_GRPC_CLIENT_MAX_ANSWER);
    if (tls && (c->tls_ctx = vsr__tls_ctx_new(1, err)) == NULL) {
        vsr_grpc_client_free(c);
        return NULL;
    }
    return c;
}

void vsr_grpc_client_free(vsr_grpc_client_t *c)
{
    if (c == NULL)
        return;
    conn_drop(c);
    vsr__tls_ctx_free(c->tls_ctx);
    vsr_buf_free(&c->data);
    vsr_free(c);
}
