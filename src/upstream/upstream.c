/*
 * upstream.c — clusters, endpoints, keep-alive pools and the HTTP/1.1
 * exchange of one call.
 *
 * A connection (uconn) is in one of four states: CONNECTING, ACTIVE (serving
 * a call), IDLE (pooled, still read so that a close by the peer is noticed)
 * and CLOSING.  One timer per connection serves whichever deadline its state
 * has: connect, first byte, stream idle, or pooled-idle expiry.  A call is
 * freed before its final callback runs, so the callback may do anything,
 * including starting the next call.
 */
#include "upstream/upstream.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <stdio.h>

#define POOL_IDLE_TIMEOUT_MS 60000
#define POOL_MAX_IDLE 256

typedef struct uconn_s uconn_t;

typedef struct {
    const vsr_backend_conf_t *conf;
    struct sockaddr_storage addr;
    int64_t cur_weight; /* smooth weighted round robin */
    uconn_t *idle;      /* LIFO: the most recently used connection is the warmest */
    unsigned n_idle;
} endpoint_t;

typedef struct {
    const vsr_model_conf_t *conf;
    endpoint_t *eps;
    size_t n_eps;
    int64_t total_weight;
} cluster_t;

struct vsr_upstream_s {
    uv_loop_t *loop;
    const vsr_config_t *cfg;
    cluster_t *clusters;
    size_t n_clusters;
    vsr_upstream_stats_t stats;
    unsigned live_conns;
    int freeing;
};

typedef enum { UC_CONNECTING, UC_ACTIVE, UC_IDLE, UC_CLOSING } uc_state_t;

struct uconn_s {
    uv_tcp_t tcp;
    uv_timer_t timer;
    uv_connect_t connect_req;
    uv_write_t write_req;
    vsr_upstream_t *up;
    endpoint_t *ep;
    uconn_t *next_idle;
    vsr_upstream_call_t *call;
    vsr_http_parser_t parser;
    vsr_rbuf_t *cur_rbuf; /* the buffer being parsed, inside read_cb */
    uc_state_t state;
    int pending_closes;
    unsigned reused : 1;
    unsigned writing : 1;
    unsigned interim : 1;    /* the message being parsed is a 1xx */
    unsigned completed : 1;  /* the call's response ended inside this read */
    unsigned reusable : 1;
};

struct vsr_upstream_call_s {
    vsr_upstream_t *up;
    endpoint_t *ep;
    uconn_t *uc;
    const vsr_upstream_callbacks_t *cb;
    void *ud;
    vsr_buf_t head;     /* the serialized request head, kept for a retry */
    uv_buf_t *bufs;     /* head + body pieces */
    unsigned n_bufs;
    int head_request;
    uint64_t connect_timeout_ms;
    uint64_t first_byte_timeout_ms;
    uint64_t idle_timeout_ms;
    int pending_err;    /* a failure to report from the timer (never synchronously) */
    const char *pending_detail;
    unsigned got_head : 1;
    unsigned got_bytes : 1;
    unsigned written : 1;
    unsigned write_failed : 1;
    unsigned retried : 1;
    unsigned paused : 1;
};

/* ---- errors ---- */

const char *vsr_upstream_error_reason(vsr_upstream_error_t e)
{
    switch (e) {
    case VSR_UPSTREAM_E_CONNECT: return "connection failure";
    case VSR_UPSTREAM_E_RESET: return "connection termination";
    case VSR_UPSTREAM_E_PROTOCOL: return "protocol error";
    case VSR_UPSTREAM_E_TIMEOUT: return "upstream request timeout";
    case VSR_UPSTREAM_E_IDLE: return "stream idle timeout";
    case VSR_UPSTREAM_E_ABORTED: return "upstream reset mid-response";
    }
    return "unknown";
}

/* ---- construction ---- */

static int resolve(const vsr_backend_conf_t *b, struct sockaddr_storage *out, vsr_buf_t *err)
{
    memset(out, 0, sizeof(*out));
    struct sockaddr_in *v4 = (struct sockaddr_in *)out;
    struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)out;
    if (inet_pton(AF_INET, b->host, &v4->sin_addr) == 1) {
        v4->sin_family = AF_INET;
        v4->sin_port = htons(b->port);
        return VSR_OK;
    }
    if (inet_pton(AF_INET6, b->host, &v6->sin6_addr) == 1) {
        v6->sin6_family = AF_INET6;
        v6->sin6_port = htons(b->port);
        return VSR_OK;
    }
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    char port[8];
    snprintf(port, sizeof(port), "%u", (unsigned)b->port);
    int rc = getaddrinfo(b->host, port, &hints, &res);
    if (rc != 0 || res == NULL) {
        vsr_buf_printf(err, "backend %s: cannot resolve host \"%s\": %s\n", b->name, b->host,
                       gai_strerror(rc));
        return VSR_ERR;
    }
    memcpy(out, res->ai_addr, res->ai_addrlen);
    freeaddrinfo(res);
    return VSR_OK;
}

vsr_upstream_t *vsr_upstream_new(uv_loop_t *loop, const vsr_config_t *cfg, vsr_buf_t *err)
{
    vsr_upstream_t *up = vsr_calloc(1, sizeof(*up));
    up->loop = loop;
    up->cfg = cfg;
    up->n_clusters = cfg->n_models;
    up->clusters = vsr_calloc(cfg->n_models, sizeof(cluster_t));
    for (size_t i = 0; i < cfg->n_models; i++) {
        cluster_t *cl = &up->clusters[i];
        cl->conf = &cfg->models[i];
        cl->n_eps = cl->conf->n_backends;
        cl->eps = vsr_calloc(cl->n_eps, sizeof(endpoint_t));
        for (size_t j = 0; j < cl->n_eps; j++) {
            cl->eps[j].conf = &cl->conf->backends[j];
            cl->total_weight += cl->conf->backends[j].weight;
            if (resolve(cl->eps[j].conf, &cl->eps[j].addr, err) != VSR_OK) {
                up->freeing = 1;
                vsr_upstream_free(up);
                return NULL;
            }
        }
    }
    return up;
}

static void upstream_release(vsr_upstream_t *up)
{
    for (size_t i = 0; i < up->n_clusters; i++)
        vsr_free(up->clusters[i].eps);
    vsr_free(up->clusters);
    vsr_free(up);
}

static void uconn_close(uconn_t *uc);

void vsr_upstream_free(vsr_upstream_t *up)
{
    if (up == NULL)
        return;
    up->freeing = 1;
    for (size_t i = 0; i < up->n_clusters; i++) {
        for (size_t j = 0; j < up->clusters[i].n_eps; j++) {
            endpoint_t *ep = &up->clusters[i].eps[j];
            while (ep->idle)
                uconn_close(ep->idle); /* unlinks itself */
        }
    }
    if (up->live_conns == 0)
        upstream_release(up);
}

void vsr_upstream_get_stats(const vsr_upstream_t *up, vsr_upstream_stats_t *out)
{
    *out = up->stats;
}

/* ---- endpoint choice: smooth weighted round robin (as nginx) ---- */

static cluster_t *find_cluster(vsr_upstream_t *up, const vsr_model_conf_t *model)
{
    for (size_t i = 0; i < up->n_clusters; i++)
        if (up->clusters[i].conf == model)
            return &up->clusters[i];
    return NULL;
}

static endpoint_t *pick_endpoint(cluster_t *cl)
{
    endpoint_t *best = NULL;
    for (size_t i = 0; i < cl->n_eps; i++) {
        endpoint_t *ep = &cl->eps[i];
        ep->cur_weight += ep->conf->weight;
        if (best == NULL || ep->cur_weight > best->cur_weight)
            best = ep;
    }
    best->cur_weight -= cl->total_weight;
    return best;
}

/* ---- connection life ---- */

static void uconn_close_cb(uv_handle_t *h)
{
    uconn_t *uc = h->data;
    if (--uc->pending_closes > 0)
        return;
    vsr_upstream_t *up = uc->up;
    vsr_http_parser_free(&uc->parser);
    vsr_free(uc);
    up->live_conns--;
    if (up->freeing && up->live_conns == 0)
        upstream_release(up);
}

static void idle_unlink(uconn_t *uc)
{
    endpoint_t *ep = uc->ep;
    for (uconn_t **pp = &ep->idle; *pp; pp = &(*pp)->next_idle) {
        if (*pp == uc) {
            *pp = uc->next_idle;
            ep->n_idle--;
            break;
        }
    }
    uc->next_idle = NULL;
}

static void uconn_close(uconn_t *uc)
{
    if (uc->state == UC_CLOSING)
        return;
    if (uc->state == UC_IDLE)
        idle_unlink(uc);
    uc->state = UC_CLOSING;
    uc->call = NULL;
    uc->pending_closes = 2;
    uv_close((uv_handle_t *)&uc->tcp, uconn_close_cb);
    uv_close((uv_handle_t *)&uc->timer, uconn_close_cb);
}

static int on_resp_head(void *ud, vsr_http_head_t *head);
static int on_resp_body(void *ud, const char *p, size_t n);
static int on_resp_complete(void *ud);

static const vsr_http_callbacks_t resp_callbacks = {on_resp_head, on_resp_body, on_resp_complete};

static uconn_t *uconn_new(vsr_upstream_t *up, endpoint_t *ep)
{
    uconn_t *uc = vsr_calloc(1, sizeof(*uc));
    uc->up = up;
    uc->ep = ep;
    uc->state = UC_CONNECTING;
    uv_tcp_init(up->loop, &uc->tcp);
    uv_timer_init(up->loop, &uc->timer);
    uc->tcp.data = uc;
    uc->timer.data = uc;
    uc->connect_req.data = uc;
    uc->write_req.data = uc;
    vsr_http_parser_init(&uc->parser, VSR_HTTP_RESPONSE, NULL, &resp_callbacks, uc);
    up->live_conns++;
    up->stats.connections_opened++;
    return uc;
}

/* ---- finishing a call ---- */

static void call_free(vsr_upstream_call_t *call)
{
    vsr_buf_free(&call->head);
    vsr_free(call->bufs);
    vsr_free(call);
}

/* Detaches the call from its connection (closing the connection), frees it
 * and reports err.  Safe from any callback. */
static void call_fail(vsr_upstream_call_t *call, vsr_upstream_error_t err, const char *detail)
{
    const vsr_upstream_callbacks_t *cb = call->cb;
    void *ud = call->ud;
    if (call->uc) {
        call->uc->call = NULL;
        uconn_close(call->uc);
    }
    call_free(call);
    if (cb && cb->on_error)
        cb->on_error(ud, err, detail);
}

static void timer_cb(uv_timer_t *t);

static void arm(uconn_t *uc, uint64_t ms)
{
    if (ms)
        uv_timer_start(&uc->timer, timer_cb, ms, 0);
    else
        uv_timer_stop(&uc->timer);
}

static void uconn_make_idle(uconn_t *uc)
{
    endpoint_t *ep = uc->ep;
    if (uc->up->freeing || ep->n_idle >= POOL_MAX_IDLE) {
        uconn_close(uc);
        return;
    }
    uc->state = UC_IDLE;
    uc->call = NULL;
    uc->next_idle = ep->idle;
    ep->idle = uc;
    ep->n_idle++;
    arm(uc, POOL_IDLE_TIMEOUT_MS);
}

/* ---- sending ---- */

static void alloc_cb(uv_handle_t *h, size_t suggested, uv_buf_t *buf);
static void read_cb(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf);
static int call_connect(vsr_upstream_call_t *call);

static void write_cb(uv_write_t *w, int status)
{
    uconn_t *uc = w->data;
    uc->writing = 0;
    if (uc->state == UC_CLOSING || uc->call == NULL)
        return;
    if (status < 0) {
        /* The read side reports the failure (EOF or reset follows); an
         * early answer from the backend may still arrive and is relayed. */
        uc->call->write_failed = 1;
        return;
    }
    uc->call->written = 1;
}

static void call_send(vsr_upstream_call_t *call)
{
    uconn_t *uc = call->uc;
    uc->state = UC_ACTIVE;
    vsr_http_parser_set_head_request(&uc->parser, call->head_request);
    call->bufs[0] = uv_buf_init(call->head.data, (unsigned)call->head.len);
    uc->writing = 1;
    int rc = uv_write(&uc->write_req, (uv_stream_t *)&uc->tcp, call->bufs, call->n_bufs, write_cb);
    if (rc < 0) {
        uc->writing = 0;
        call->write_failed = 1;
    }
    if (!call->paused)
        uv_read_start((uv_stream_t *)&uc->tcp, alloc_cb, read_cb);
    arm(uc, call->first_byte_timeout_ms);
}

static void connect_cb(uv_connect_t *req, int status)
{
    uconn_t *uc = req->data;
    if (uc->state == UC_CLOSING || status == UV_ECANCELED)
        return;
    vsr_upstream_call_t *call = uc->call;
    if (status < 0) {
        call_fail(call, VSR_UPSTREAM_E_CONNECT, uv_strerror(status));
        return;
    }
    uv_tcp_nodelay(&uc->tcp, 1);
    call_send(call);
}

/* Opens a fresh connection for the call.  VSR_OK or a libuv error code. */
static int call_connect(vsr_upstream_call_t *call)
{
    uconn_t *uc = uconn_new(call->up, call->ep);
    uc->call = call;
    call->uc = uc;
    int rc = uv_tcp_connect(&uc->connect_req, &uc->tcp, (const struct sockaddr *)&call->ep->addr, connect_cb);
    if (rc < 0) {
        /* reported from the timer, never from inside call_start */
        call->pending_err = VSR_UPSTREAM_E_CONNECT;
        call->pending_detail = uv_strerror(rc);
        uv_timer_start(&uc->timer, timer_cb, 0, 0);
        return rc;
    }
    arm(uc, call->connect_timeout_ms);
    return VSR_OK;
}

static int build_head(vsr_upstream_call_t *call, const vsr_upstream_request_t *req)
{
    const vsr_backend_conf_t *b = call->ep->conf;
    vsr_buf_t *h = &call->head;
    vsr_slice_t path = req->path;
    uint64_t body_len = 0;
    for (size_t i = 0; i < req->n_body; i++)
        body_len += req->body[i].len;

    int rc = vsr_buf_append_slice(h, req->method);
    rc |= vsr_buf_append(h, " ", 1);
    if (req->rewrite_prefix && b->path_prefix && b->has_base_url && vsr_slice_starts_with(path, VSR_SLICE_LIT("/v1")) &&
        (path.len == 3 || path.p[3] == '/' || path.p[3] == '?')) {
        rc |= vsr_buf_append_cstr(h, b->path_prefix);
        vsr_slice_t rest = vsr_slice(path.p + 3, path.len - 3);
        if (rest.len == 0 || rest.p[0] == '?')
            rc |= vsr_buf_append(h, "/", 1);
        rc |= vsr_buf_append_slice(h, rest);
    } else {
        rc |= vsr_buf_append_slice(h, path);
    }
    rc |= vsr_buf_append_cstr(h, " HTTP/1.1\r\nhost: ");
    rc |= vsr_buf_append_cstr(h, b->authority);
    rc |= vsr_buf_append(h, "\r\n", 2);
    for (size_t i = 0; i < req->n_headers; i++)
        rc |= vsr_http_write_header(h, req->headers[i].name, req->headers[i].value);
    if (body_len > 0 || req->send_length)
        rc |= vsr_http_write_header_u64(h, "content-length", body_len);
    rc |= vsr_http_write_end_head(h);
    return rc == VSR_OK ? VSR_OK : VSR_ERR;
}

vsr_upstream_call_t *vsr_upstream_call_start(vsr_upstream_t *up, const vsr_model_conf_t *model,
                                             const vsr_upstream_request_t *req,
                                             const vsr_upstream_callbacks_t *cb, void *ud)
{
    cluster_t *cl = find_cluster(up, model);
    VSR_BUG_ON(cl == NULL || cl->n_eps == 0);
    vsr_upstream_call_t *call = vsr_calloc(1, sizeof(*call));
    call->up = up;
    call->cb = cb;
    call->ud = ud;
    call->ep = pick_endpoint(cl);
    call->head_request = req->head_request;
    call->connect_timeout_ms = req->connect_timeout_ms ? req->connect_timeout_ms : VSR_DEFAULT_CONNECT_TIMEOUT_MS;
    call->first_byte_timeout_ms = req->first_byte_timeout_ms;
    call->idle_timeout_ms = req->idle_timeout_ms;
    vsr_buf_init(&call->head, 0);
    build_head(call, req);
    call->n_bufs = (unsigned)req->n_body + 1;
    call->bufs = vsr_malloc(sizeof(uv_buf_t) * call->n_bufs);
    for (size_t i = 0; i < req->n_body; i++)
        call->bufs[i + 1] = uv_buf_init((char *)req->body[i].p, (unsigned)req->body[i].len);
    up->stats.calls++;

    endpoint_t *ep = call->ep;
    if (ep->idle) {
        uconn_t *uc = ep->idle;
        idle_unlink(uc);
        uc->state = UC_ACTIVE;
        uc->reused = 1;
        uc->call = call;
        call->uc = uc;
        up->stats.connections_reused++;
        call_send(call);
    } else {
        call_connect(call);
    }
    return call;
}

/* A reused connection that the peer had already closed: nothing of the
 * request can have been processed, so it is sent again, once, on a fresh
 * connection (as HTTP clients commonly do for a stale keep-alive). */
static int call_retry_stale(vsr_upstream_call_t *call)
{
    uconn_t *uc = call->uc;
    if (!uc->reused || call->got_bytes || call->retried)
        return 0;
    call->retried = 1;
    call->written = 0;
    call->write_failed = 0;
    uc->call = NULL;
    uconn_close(uc);
    call->uc = NULL;
    call_connect(call);
    return 1;
}

/* ---- receiving ---- */

static void alloc_cb(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    uconn_t *uc = h->data;
    VSR_BUG_ON(uc->cur_rbuf != NULL);
    uc->cur_rbuf = vsr_rbuf_get();
    *buf = uv_buf_init(uc->cur_rbuf->data, VSR_RBUF_SIZE);
}

static void read_cb(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    uconn_t *uc = s->data;
    vsr_upstream_call_t *call = uc->call;

    if (uc->state == UC_IDLE || call == NULL) {
        /* the pooled connection was closed by the peer, or spoke out of turn */
        if (nread != 0 && uc->state != UC_CLOSING)
            uconn_close(uc);
        goto out;
    }
    if (nread == 0)
        goto out;
    if (nread < 0) {
        if (nread == UV_EOF && call->got_head && vsr_http_parser_finish(&uc->parser) == VSR_OK &&
            uc->completed)
            goto done;
        if (call->got_head) {
            call_fail(call, VSR_UPSTREAM_E_ABORTED, uv_strerror((int)nread));
        } else if (!call_retry_stale(call)) {
            call_fail(call, VSR_UPSTREAM_E_RESET, nread == UV_EOF ? "connection termination" : "remote reset");
        }
        goto out;
    }

    call->got_bytes = 1;
    ssize_t used = vsr_http_parser_execute(&uc->parser, buf->base, (size_t)nread);
    if (uc->call != call)
        goto out; /* cancelled from a callback: the connection is closing */
    if (used < 0) {
        if (call->got_head)
            call_fail(call, VSR_UPSTREAM_E_ABORTED, uc->parser.error_msg);
        else
            call_fail(call, VSR_UPSTREAM_E_PROTOCOL, uc->parser.error_msg);
        goto out;
    }
    if (uc->completed) {
        /* bytes past the end of the response cannot belong to anything */
        if ((size_t)used < (size_t)nread)
            uc->reusable = 0;
        goto done;
    }
    if (call->got_head && !call->paused)
        arm(uc, call->idle_timeout_ms); /* progress: restart the stream-idle clock */
    goto out;

done: {
        const vsr_upstream_callbacks_t *cb = call->cb;
        void *ud = call->ud;
        int reusable = uc->reusable && call->written && !call->write_failed;
        uc->call = NULL;
        uc->completed = 0;
        uc->reusable = 0;
        call_free(call);
        if (reusable)
            uconn_make_idle(uc);
        else
            uconn_close(uc);
        if (cb && cb->on_complete)
            cb->on_complete(ud);
    }
out:
    if (uc->cur_rbuf) {
        vsr_rbuf_unref(uc->cur_rbuf);
        uc->cur_rbuf = NULL;
    }
}

static int on_resp_head(void *ud, vsr_http_head_t *head)
{
    uconn_t *uc = ud;
    vsr_upstream_call_t *call = uc->call;
    if (head->status < 200) {
        if (head->status == 101)
            return VSR_ERR_INVALID; /* no protocol switch on a proxied call */
        uc->interim = 1;
        return VSR_OK;
    }
    call->got_head = 1;
    arm(uc, call->paused ? 0 : call->idle_timeout_ms);
    if (call->cb && call->cb->on_head)
        call->cb->on_head(call->ud, head);
    return uc->call == call ? VSR_OK : VSR_ERR; /* stop parsing if cancelled */
}

static int on_resp_body(void *ud, const char *p, size_t n)
{
    uconn_t *uc = ud;
    vsr_upstream_call_t *call = uc->call;
    if (call->cb && call->cb->on_body)
        call->cb->on_body(call->ud, p, n, uc->cur_rbuf);
    return uc->call == call ? VSR_OK : VSR_ERR;
}

static int on_resp_complete(void *ud)
{
    uconn_t *uc = ud;
    if (uc->interim) {
        uc->interim = 0;
        return VSR_OK; /* the final response follows */
    }
    uc->completed = 1;
    uc->reusable = uc->parser.head.keep_alive && !uc->parser.head.until_close;
    return VSR_PAUSED;
}

/* ---- timers ---- */

static void timer_cb(uv_timer_t *t)
{
    uconn_t *uc = t->data;
    vsr_upstream_call_t *call = uc->call;
    if (uc->state == UC_CLOSING)
        return;
    if (uc->state == UC_IDLE || call == NULL) {
        uconn_close(uc);
        return;
    }
    if (call->pending_err) {
        call_fail(call, (vsr_upstream_error_t)call->pending_err, call->pending_detail);
        return;
    }
    if (uc->state == UC_CONNECTING)
        call_fail(call, VSR_UPSTREAM_E_CONNECT, "connection timeout");
    else if (!call->got_head)
        call_fail(call, VSR_UPSTREAM_E_TIMEOUT, "first byte timeout");
    else
        call_fail(call, VSR_UPSTREAM_E_IDLE, "stream idle timeout");
}

/* ---- flow control and cancellation ---- */

void vsr_upstream_call_pause(vsr_upstream_call_t *call)
{
    if (call->paused)
        return;
    call->paused = 1;
    uconn_t *uc = call->uc;
    if (uc && uc->state == UC_ACTIVE) {
        uv_read_stop((uv_stream_t *)&uc->tcp);
        if (call->got_head)
            arm(uc, 0); /* a slow client is not an idle upstream */
    }
}

void vsr_upstream_call_resume(vsr_upstream_call_t *call)
{
    if (!call->paused)
        return;
    call->paused = 0;
    uconn_t *uc = call->uc;
    if (uc && uc->state == UC_ACTIVE) {
        uv_read_start((uv_stream_t *)&uc->tcp, alloc_cb, read_cb);
        arm(uc, call->got_head ? call->idle_timeout_ms : call->first_byte_timeout_ms);
    }
}

void vsr_upstream_call_cancel(vsr_upstream_call_t *call)
{
    if (call == NULL)
        return;
    if (call->uc) {
        call->uc->call = NULL;
        uconn_close(call->uc);
    }
    call_free(call);
}

const vsr_backend_conf_t *vsr_upstream_call_backend(const vsr_upstream_call_t *call)
{
    return call->ep->conf;
}
