/*
 * health.c — active health checks (ref §1.5, §5.3): for every endpoint of a
 * model with health_check_path, a GET of that path every
 * health_check_interval (10 s) on the control thread's loop, bounded by
 * health_check_timeout (2 s).  A 2xx answer is a success; anything else, a
 * refused or reset connection, or the timeout is a failure.  Three failures
 * in a row make the endpoint unhealthy, one success healthy again; the
 * balancer skips unhealthy endpoints (unless more than half are).  Never an
 * inference request: nothing billable is sent.
 *
 * A `protocol: h2` endpoint is checked over HTTP/2 (prior knowledge in
 * cleartext, ALPN h2 over TLS; HTTP/1.1 when the TLS server picks it), one
 * stream on a connection of its own.
 */
#include "upstream/tls.h"
#include "upstream/upstream-int.h"

#include <nghttp2/nghttp2.h>
#include <stdio.h>

/* The checks of one configuration version.  Stopping closes every handle;
 * the memory goes with the last close callback, so the version itself may
 * be freed right after vsr_upstream_health_stop(). */
struct health_set_s {
    health_check_t *checks;
    size_t n;
    unsigned closing;        /* close callbacks still to come */
    int stopped;
};

struct health_check_s {
    health_set_t *set;
    vsr_endpoint_state_t *state;
    const vsr_backend_conf_t *backend;
    const struct sockaddr_storage *addr;
    shared_cluster_t *sc;    /* addr's owner (the version holds it while checks run) */
    const char *path;
    uint64_t interval_ms;
    uint64_t timeout_ms;
    uv_timer_t tick;
    uv_timer_t deadline;
    uv_tcp_t tcp;
    uv_connect_t connect_req;
    uv_write_t write_req;
    vsr_http_parser_t parser;
    char request[512];
    size_t request_len;
    char readbuf[4096];
    int in_flight;
    int tcp_open;
    int status;
    int stopping;
    vsr_tls_ctx_t *tls_ctx;  /* TLS endpoints are checked over TLS */
    vsr_tls_t *tls;
    int tls_ready;
    char plain[4096];
    nghttp2_session *h2;     /* the check is speaking HTTP/2 */
    int h2_status;
};

static void set_put(health_set_t *set)
{
    if (--set->closing == 0 && set->stopped) {
        vsr_free(set->checks);
        vsr_free(set);
    }
}

static void timer_closed(uv_handle_t *h)
{
    health_check_t *hc = h->data;
    set_put(hc->set);
}

static void tcp_closed(uv_handle_t *h)
{
    health_check_t *hc = h->data;
    hc->tcp_open = 0;
    set_put(hc->set);
}

static void close_tcp(health_check_t *hc)
{
    hc->set->closing++;
    uv_close((uv_handle_t *)&hc->tcp, tcp_closed);
}

static void check_done(health_check_t *hc, int ok)
{
    if (!hc->in_flight)
        return;
    hc->in_flight = 0;
    uv_timer_stop(&hc->deadline);
    vsr__tls_free(hc->tls);
    hc->tls = NULL;
    nghttp2_session_del(hc->h2);
    hc->h2 = NULL;
    if (hc->tcp_open && !uv_is_closing((uv_handle_t *)&hc->tcp))
        close_tcp(hc);
    if (vsr__health_record(hc->state, ok))
        vsr_log_warn("upstream", "endpoint %s (%s:%u) is now %s", hc->backend->name, hc->backend->host,
                     (unsigned)hc->backend->port, ok ? "healthy" : "unhealthy");
}

static int on_head(void *ud, vsr_http_head_t *head)
{
    health_check_t *hc = ud;
    if (head->status < 200)
        return VSR_OK;
    hc->status = head->status;
    return VSR_PAUSED;
}

static const vsr_http_callbacks_t callbacks = {on_head, NULL, NULL};

static void alloc_cb(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    health_check_t *hc = h->data;
    *buf = uv_buf_init(hc->readbuf, sizeof(hc->readbuf));
}

static void write_cb(uv_write_t *w, int status)
{
    health_check_t *hc = w->data;
    if (status < 0)
        check_done(hc, 0);
}

typedef struct {
    uv_write_t w;
    health_check_t *hc;
    char data[];
} hc_write_t;

static void tls_write_cb(uv_write_t *w, int status)
{
    hc_write_t *hw = (hc_write_t *)w;
    if (status < 0 && hw->hc->in_flight)
        check_done(hw->hc, 0);
    vsr_free(hw);
}

static int tls_flush(health_check_t *hc)
{
    size_t n = vsr__tls_pending_out(hc->tls);
    if (n == 0)
        return VSR_OK;
    hc_write_t *hw = vsr_malloc(sizeof(*hw) + n);
    hw->hc = hc;
    uv_buf_t b = uv_buf_init(hw->data, (unsigned)vsr__tls_take_out(hc->tls, hw->data, n));
    if (uv_write(&hw->w, (uv_stream_t *)&hc->tcp, &b, 1, tls_write_cb) < 0) {
        vsr_free(hw);
        return VSR_ERR;
    }
    return VSR_OK;
}

/* Plaintext to the endpoint: through TLS, or a write of its own. */
static int send_plain(health_check_t *hc, const char *p, size_t n)
{
    if (hc->tls)
        return vsr__tls_write(hc->tls, p, n) == VSR_OK ? tls_flush(hc) : VSR_ERR;
    hc_write_t *hw = vsr_malloc(sizeof(*hw) + n);
    hw->hc = hc;
    memcpy(hw->data, p, n);
    uv_buf_t b = uv_buf_init(hw->data, (unsigned)n);
    if (uv_write(&hw->w, (uv_stream_t *)&hc->tcp, &b, 1, tls_write_cb) < 0) {
        vsr_free(hw);
        return VSR_ERR;
    }
    return VSR_OK;
}

/* ---- HTTP/2 ---- */

static int h2_on_header(nghttp2_session *sess, const nghttp2_frame *f, const uint8_t *name, size_t namelen,
                        const uint8_t *value, size_t valuelen, uint8_t flags, void *ud)
{
    VSR_UNUSED(sess);
    VSR_UNUSED(flags);
    health_check_t *hc = ud;
    uint64_t st;
    if (f->hd.type == NGHTTP2_HEADERS && namelen == 7 && memcmp(name, ":status", 7) == 0 &&
        vsr_slice_to_u64(vsr_slice((const char *)value, valuelen), 999, &st) == VSR_OK)
        hc->h2_status = (int)st;
    return 0;
}

static int h2_on_frame_recv(nghttp2_session *sess, const nghttp2_frame *f, void *ud)
{
    VSR_UNUSED(sess);
    health_check_t *hc = ud;
    if (f->hd.type == NGHTTP2_HEADERS && hc->h2_status >= 200 && hc->status == 0)
        hc->status = hc->h2_status; /* the final head decides; 1xx are skipped */
    return 0;
}

static int h2_on_stream_close(nghttp2_session *sess, int32_t id, uint32_t code, void *ud)
{
    VSR_UNUSED(sess);
    VSR_UNUSED(id);
    VSR_UNUSED(code);
    health_check_t *hc = ud;
    if (hc->status == 0)
        hc->status = -1; /* reset, or ended without an answer */
    return 0;
}

static int h2_send(health_check_t *hc)
{
    const uint8_t *data;
    ssize_t n;
    vsr_buf_t out;
    vsr_buf_init(&out, 0);
    while ((n = nghttp2_session_mem_send(hc->h2, &data)) > 0)
        vsr_buf_append(&out, (const char *)data, (size_t)n);
    int rc = n < 0 ? VSR_ERR : out.len ? send_plain(hc, out.data, out.len) : VSR_OK;
    vsr_buf_free(&out);
    return rc;
}

static int h2_start(health_check_t *hc)
{
    nghttp2_session_callbacks *cbs;
    nghttp2_session_callbacks_new(&cbs);
    nghttp2_session_callbacks_set_on_header_callback(cbs, h2_on_header);
    nghttp2_session_callbacks_set_on_frame_recv_callback(cbs, h2_on_frame_recv);
    nghttp2_session_callbacks_set_on_stream_close_callback(cbs, h2_on_stream_close);
    int rc = nghttp2_session_client_new(&hc->h2, cbs, hc);
    nghttp2_session_callbacks_del(cbs);
    if (rc != 0)
        return VSR_ERR;
    hc->h2_status = 0;
    const char *scheme = hc->tls ? "https" : "http";
    const char *auth = hc->backend->authority;
    nghttp2_nv nv[] = {
        {(uint8_t *)":method", (uint8_t *)"GET", 7, 3, NGHTTP2_NV_FLAG_NONE},
        {(uint8_t *)":scheme", (uint8_t *)scheme, 7, strlen(scheme), NGHTTP2_NV_FLAG_NONE},
        {(uint8_t *)":path", (uint8_t *)hc->path, 5, strlen(hc->path), NGHTTP2_NV_FLAG_NONE},
        {(uint8_t *)":authority", (uint8_t *)auth, 10, strlen(auth), NGHTTP2_NV_FLAG_NONE},
        {(uint8_t *)"user-agent", (uint8_t *)"vsr-health-check", 10, 16, NGHTTP2_NV_FLAG_NONE},
    };
    nghttp2_submit_settings(hc->h2, NGHTTP2_FLAG_NONE, NULL, 0);
    if (nghttp2_submit_request(hc->h2, NULL, nv, VSR_ARRAY_LEN(nv), NULL, NULL) < 0)
        return VSR_ERR;
    return h2_send(hc);
}

static void h2_input(health_check_t *hc, const char *p, size_t n)
{
    if (nghttp2_session_mem_recv(hc->h2, (const uint8_t *)p, n) < 0 || hc->status < 0)
        check_done(hc, 0);
    else if (hc->status)
        check_done(hc, hc->status >= 200 && hc->status < 300);
    else if (h2_send(hc) != VSR_OK) /* SETTINGS ACK, window updates */
        check_done(hc, 0);
}

static void parse(health_check_t *hc, const char *p, size_t n)
{
    if (hc->h2) {
        h2_input(hc, p, n);
        return;
    }
    if (vsr_http_parser_execute(&hc->parser, p, n) < 0)
        check_done(hc, 0);
    else if (hc->status)
        check_done(hc, hc->status >= 200 && hc->status < 300);
}

static void read_cb(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    health_check_t *hc = s->data;
    if (!hc->in_flight)
        return;
    if (nread < 0) {
        check_done(hc, 0);
        return;
    }
    if (hc->tls == NULL) {
        parse(hc, buf->base, (size_t)nread);
        return;
    }
    if (vsr__tls_feed(hc->tls, buf->base, (size_t)nread) != VSR_OK) {
        check_done(hc, 0);
        return;
    }
    if (!hc->tls_ready) {
        int rc = vsr__tls_handshake(hc->tls);
        if (rc == VSR_ERR || tls_flush(hc) != VSR_OK) {
            check_done(hc, 0);
            return;
        }
        if (rc != VSR_OK)
            return;
        hc->tls_ready = 1;
        if (hc->backend->h2 && vsr__tls_selected_h2(hc->tls)) {
            if (h2_start(hc) != VSR_OK) {
                check_done(hc, 0);
                return;
            }
        } else if (vsr__tls_write(hc->tls, hc->request, hc->request_len) != VSR_OK || tls_flush(hc) != VSR_OK) {
            check_done(hc, 0);
            return;
        }
    }
    ssize_t n = 0;
    while (hc->in_flight && (n = vsr__tls_read(hc->tls, hc->plain, sizeof(hc->plain))) > 0)
        parse(hc, hc->plain, (size_t)n);
    if (hc->in_flight && n < 0)
        check_done(hc, 0);
}

static void connect_cb(uv_connect_t *req, int status)
{
    health_check_t *hc = req->data;
    if (status == UV_ECANCELED || !hc->in_flight)
        return;
    if (status < 0) {
        check_done(hc, 0);
        return;
    }
    if (hc->tls_ctx) {
        hc->tls = vsr__tls_new(hc->tls_ctx, hc->backend->host);
        hc->tls_ready = 0;
        if ((hc->backend->h2 && vsr__tls_offer_h2(hc->tls) != VSR_OK) || vsr__tls_handshake(hc->tls) == VSR_ERR || tls_flush(hc) != VSR_OK ||
            uv_read_start((uv_stream_t *)&hc->tcp, alloc_cb, read_cb) < 0)
            check_done(hc, 0);
        return;
    }
    if (hc->backend->h2) {
        if (h2_start(hc) != VSR_OK || uv_read_start((uv_stream_t *)&hc->tcp, alloc_cb, read_cb) < 0)
            check_done(hc, 0);
        return;
    }
    uv_buf_t b = uv_buf_init(hc->request, (unsigned)hc->request_len);
    if (uv_write(&hc->write_req, (uv_stream_t *)&hc->tcp, &b, 1, write_cb) < 0 ||
        uv_read_start((uv_stream_t *)&hc->tcp, alloc_cb, read_cb) < 0)
        check_done(hc, 0);
}

static void deadline_cb(uv_timer_t *t)
{
    check_done(t->data, 0);
}

static void tick_cb(uv_timer_t *t)
{
    health_check_t *hc = t->data;
    if (hc->in_flight || hc->tcp_open || hc->stopping)
        return; /* the previous check has not finished closing */
    hc->in_flight = 1;
    hc->status = 0;
    vsr_http_parser_free(&hc->parser);
    vsr_http_parser_init(&hc->parser, VSR_HTTP_RESPONSE, NULL, &callbacks, hc);
    uv_tcp_init(t->loop, &hc->tcp);
    hc->tcp.data = hc;
    hc->tcp_open = 1;
    uv_timer_start(&hc->deadline, deadline_cb, hc->timeout_ms, 0);
    struct sockaddr_storage addr;
    vsr__upstream_addr(hc->sc, hc->addr, &addr);
    if (addr.ss_family == 0 ||
        uv_tcp_connect(&hc->connect_req, &hc->tcp, (const struct sockaddr *)&addr, connect_cb) < 0)
        check_done(hc, 0);
}

void vsr_upstream_health_start(vsr_upstream_shared_t *sh, uv_loop_t *loop)
{
    const vsr_config_t *cfg = sh->cfg;
    size_t n = 0;
    for (size_t i = 0; i < sh->n_clusters; i++) {
        const vsr_model_conf_t *m = vsr__upstream_cluster_model(cfg, i);
        if (m->has_reliability && m->reliability.health_check_path)
            n += m->n_backends;
    }
    health_set_t *set = vsr_calloc(1, sizeof(*set));
    set->checks = vsr_calloc(n ? n : 1, sizeof(health_check_t));
    sh->health = set;
    sh->dns = vsr__dns_start(sh, loop);
    for (size_t i = 0; i < sh->n_clusters; i++) {
        shared_cluster_t *sc = sh->clusters[i];
        const vsr_model_conf_t *m = vsr__upstream_cluster_model(cfg, i);
        const vsr_reliability_conf_t *r = &m->reliability;
        if (!m->has_reliability || r->health_check_path == NULL)
            continue;
        for (size_t j = 0; j < m->n_backends; j++) {
            health_check_t *hc = &set->checks[set->n++];
            hc->set = set;
            hc->state = &sc->eps[j];
            hc->backend = &m->backends[j];
            hc->addr = &sc->addrs[j];
            hc->sc = sc;
            hc->path = r->health_check_path;
            hc->tls_ctx = hc->backend->tls ? sc->tls_ctx : NULL;
            hc->interval_ms = r->has_health_check_interval ? r->health_check_interval_ms : 10000;
            hc->timeout_ms = r->has_health_check_timeout ? r->health_check_timeout_ms : 2000;
            int len = snprintf(hc->request, sizeof(hc->request),
                               "GET %s HTTP/1.1\r\nhost: %s\r\nuser-agent: vsr-health-check\r\nconnection: close\r\n\r\n",
                               hc->path, hc->backend->authority);
            hc->request_len = len > 0 && (size_t)len < sizeof(hc->request) ? (size_t)len : 0;
            hc->connect_req.data = hc;
            hc->write_req.data = hc;
            vsr_http_parser_init(&hc->parser, VSR_HTTP_RESPONSE, NULL, &callbacks, hc);
            uv_timer_init(loop, &hc->tick);
            uv_timer_init(loop, &hc->deadline);
            hc->tick.data = hc->deadline.data = hc;
            /* the first check at once, then every interval */
            uv_timer_start(&hc->tick, tick_cb, 0, hc->interval_ms ? hc->interval_ms : 10000);
        }
    }
}

void vsr_upstream_health_stop(vsr_upstream_shared_t *sh)
{
    vsr__dns_stop(sh->dns);
    sh->dns = NULL;
    health_set_t *set = sh->health;
    if (set == NULL)
        return;
    sh->health = NULL;
    set->stopped = 1;
    set->closing++; /* held while closing, so that nothing frees the set under this loop */
    for (size_t i = 0; i < set->n; i++) {
        health_check_t *hc = &set->checks[i];
        hc->stopping = 1;
        hc->in_flight = 0;
        set->closing += 2;
        uv_close((uv_handle_t *)&hc->tick, timer_closed);
        uv_close((uv_handle_t *)&hc->deadline, timer_closed);
        if (hc->tcp_open && !uv_is_closing((uv_handle_t *)&hc->tcp))
            close_tcp(hc);
        vsr_http_parser_free(&hc->parser);
        vsr__tls_free(hc->tls);
        hc->tls = NULL;
        nghttp2_session_del(hc->h2);
        hc->h2 = NULL;
    }
    set_put(set);
}
