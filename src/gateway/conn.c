/*
 * conn.c — one client connection and the requests on it.
 *
 * Requests on a connection are answered strictly in order: when a request's
 * head and body are in, the parser is paused and any pipelined bytes wait in
 * `pending` (bounded; reading stops when it is full) until the response has
 * been handed to the socket.  Request bodies are buffered (bounded by the
 * listener's body limit) because routing needs the whole JSON document.
 * Responses stream: upstream body bytes are written to the client straight
 * from the upstream's receive buffers, and a client that reads slowly pauses
 * the upstream read (high/low watermarks), so memory stays bounded.
 */
#include "gateway/gateway-int.h"

#include <stdio.h>

#define PENDING_MAX (1024 * 1024)   /* pipelined bytes held while a request is in flight */
#define WQ_HIGH (1024 * 1024)       /* pause the upstream above this many queued bytes */
#define WQ_LOW (256 * 1024)         /* ... and resume below this */
#define LINGER_MS 5000              /* how long unread input is drained after a final reply */

typedef struct request_s request_t;

struct conn_s {
    uv_tcp_t tcp;
    uv_timer_t timer;
    uv_shutdown_t shutdown_req;
    worker_t *w;
    listener_t *l;
    conn_t *prev, *next;
    vsr_http_parser_t parser;
    vsr_buf_t pending;
    request_t *req;
    size_t wq_bytes;
    int pending_closes;
    unsigned closing : 1;
    unsigned reading : 1;
    unsigned busy : 1;             /* a request is complete and being answered */
    unsigned close_after_write : 1;
    unsigned doomed : 1;           /* a write failed to start: closed from the timer */
    unsigned lingering : 1;        /* the last reply is out: draining input until EOF */
};

struct request_s {
    conn_t *c;
    vsr_pool_t pool;
    vsr_http_head_t *head;         /* the parser's head: valid until the parser resumes */
    vsr_buf_t body;
    vsr_json_t json;
    int has_json;
    int keep_alive;
    int is_head;
    /* upstream */
    vsr_upstream_call_t *call;
    vsr_http_header_t *fwd;
    size_t n_fwd;
    vsr_slice_t pieces[3];
    size_t n_pieces;
    unsigned head_sent : 1;
    unsigned resp_chunked : 1;
    unsigned resp_no_body : 1;
};

typedef struct wop_s {
    uv_write_t w;
    struct wop_s *next_free;
    conn_t *c;
    vsr_rbuf_t *rb;   /* a relayed body slice's buffer, unref'd when written */
    char *heap;       /* a head or local reply built for this write, freed when written */
    size_t bytes;
    char chunk[24];
} wop_t;

static void conn_close(conn_t *c);
static void conn_process(conn_t *c);
static void request_finish(request_t *req);

/* ---- write operations ---- */

static wop_t *wop_get(conn_t *c)
{
    worker_t *w = c->w;
    wop_t *op = w->wop_free;
    if (op)
        w->wop_free = op->next_free;
    else
        op = vsr_malloc(sizeof(*op));
    op->w.data = op;
    op->c = c;
    op->rb = NULL;
    op->heap = NULL;
    op->bytes = 0;
    return op;
}

static void wop_put(worker_t *w, wop_t *op)
{
    vsr_rbuf_unref(op->rb);
    vsr_free(op->heap);
    op->next_free = w->wop_free;
    w->wop_free = op;
}

static void linger_timeout_cb(uv_timer_t *t)
{
    conn_close(t->data);
}

static void shutdown_cb(uv_shutdown_t *req, int status)
{
    conn_t *c = req->data;
    if (status < 0 && !c->closing)
        conn_close(c);
}

static void set_reading(conn_t *c, int on);

/* The final reply is written: send FIN and drain what the client still sends
 * (the rest of a rejected body) until it closes or LINGER_MS pass.  Closing
 * with unread input would make the kernel answer with RST, and the client
 * could lose the reply it has not read yet (nginx's lingering close). */
static void conn_linger(conn_t *c)
{
    if (c->closing || c->lingering)
        return;
    c->lingering = 1;
    c->shutdown_req.data = c;
    if (uv_shutdown(&c->shutdown_req, (uv_stream_t *)&c->tcp, shutdown_cb) < 0) {
        conn_close(c);
        return;
    }
    uv_timer_start(&c->timer, linger_timeout_cb, LINGER_MS, 0);
    set_reading(c, 1);
}

static void write_cb(uv_write_t *uw, int status)
{
    wop_t *op = uw->data;
    conn_t *c = op->c;
    c->wq_bytes -= op->bytes;
    wop_put(c->w, op);
    if (c->closing)
        return;
    if (status < 0) {
        conn_close(c); /* the client went away: cancels the upstream call */
        return;
    }
    if (c->req && c->req->call && c->wq_bytes < WQ_LOW)
        vsr_upstream_call_resume(c->req->call);
    if (c->close_after_write && c->wq_bytes == 0)
        conn_linger(c);
}

static void doomed_cb(uv_timer_t *t)
{
    conn_close(t->data);
}

/* Queues a write.  Never closes the connection synchronously, so callers may
 * go on using the request after it; a failure closes it from the timer. */
static void conn_write(conn_t *c, wop_t *op, uv_buf_t *bufs, unsigned n)
{
    for (unsigned i = 0; i < n; i++)
        op->bytes += bufs[i].len;
    if (c->closing || c->doomed || uv_write(&op->w, (uv_stream_t *)&c->tcp, bufs, n, write_cb) < 0) {
        wop_put(c->w, op);
        if (!c->closing && !c->doomed) {
            c->doomed = 1;
            uv_timer_start(&c->timer, doomed_cb, 0, 0);
        }
        return;
    }
    c->wq_bytes += op->bytes;
}

/* Writes a buffer whose memory passes to the write (freed when written). */
static void conn_write_buf(conn_t *c, vsr_buf_t *b)
{
    wop_t *op = wop_get(c);
    op->heap = b->data;
    uv_buf_t ub = uv_buf_init(b->data, (unsigned)b->len);
    b->data = NULL;
    b->len = b->alloc = 0;
    conn_write(c, op, &ub, 1);
}

/* ---- local replies ---- */

static void reply(conn_t *c, int status, const char *ctype, vsr_slice_t body, const char *extra_headers,
                  int is_head, int close)
{
    vsr_buf_t b;
    vsr_buf_init(&b, 0);
    vsr_http_write_status_line(&b, status, VSR_SLICE_NULL);
    vsr_buf_printf(&b, "content-type: %s\r\ncontent-length: %zu\r\n", ctype, body.len);
    if (extra_headers)
        vsr_buf_append_cstr(&b, extra_headers);
    if (close)
        vsr_buf_append_cstr(&b, "connection: close\r\n");
    vsr_http_write_end_head(&b);
    if (!is_head)
        vsr_buf_append_slice(&b, body);
    conn_write_buf(c, &b);
    if (close)
        c->close_after_write = 1;
}

/* An OpenAI-style error: {"error":{"message":M,"type":T,"code":C}} where C
 * is the numeric status, or the string `code` when given. */
static void reply_error(conn_t *c, int status, const char *type, const char *code, vsr_slice_t msg,
                        const char *extra_headers, int is_head, int close)
{
    vsr_buf_t b;
    vsr_buf_init(&b, 0);
    vsr_buf_append_cstr(&b, "{\"error\":{\"message\":");
    vsr_buf_append_json_string(&b, msg);
    vsr_buf_append_cstr(&b, ",\"type\":");
    vsr_buf_append_json_string(&b, vsr_slice_cstr(type));
    vsr_buf_append_cstr(&b, ",\"code\":");
    if (code)
        vsr_buf_append_json_string(&b, vsr_slice_cstr(code));
    else
        vsr_buf_printf(&b, "%d", status);
    vsr_buf_append_cstr(&b, "}}");
    reply(c, status, "application/json", vsr_buf_slice(&b), extra_headers, is_head, close);
    vsr_buf_free(&b);
}

static void req_error(request_t *req, int status, const char *msg)
{
    reply_error(req->c, status, "invalid_request_error", NULL, vsr_slice_cstr(msg),
                "x-vsr-response-path: error\r\n", req->is_head, !req->keep_alive);
    request_finish(req);
}

/* ---- request lifecycle ---- */

static request_t *request_new(conn_t *c)
{
    request_t *req = vsr_calloc(1, sizeof(*req));
    req->c = c;
    vsr_pool_init(&req->pool);
    vsr_buf_init(&req->body, c->l->conf->max_body_bytes);
    return req;
}

static void request_free(request_t *req)
{
    if (req->call)
        vsr_upstream_call_cancel(req->call);
    if (req->has_json)
        vsr_json_free(&req->json);
    vsr_buf_free(&req->body);
    vsr_pool_free(&req->pool);
    vsr_free(req);
}

/* The response has been handed to the socket: the next request may start. */
static void request_finish(request_t *req)
{
    conn_t *c = req->c;
    int keep = req->keep_alive && !c->close_after_write;
    c->req = NULL;
    c->busy = 0;
    request_free(req);
    if (!keep) {
        c->close_after_write = 1;
        if (c->wq_bytes == 0)
            conn_linger(c);
        return;
    }
    conn_process(c);
}

/* ---- proxying ---- */

static void up_on_head(void *ud, const vsr_http_head_t *h)
{
    request_t *req = ud;
    conn_t *c = req->c;
    vsr_buf_t b;
    vsr_buf_init(&b, 0);
    vsr_http_write_status_line(&b, h->status, h->reason.len ? h->reason : VSR_SLICE_NULL);
    for (size_t i = 0; i < h->num_headers; i++) {
        vsr_slice_t name = h->headers[i].name;
        if (vsr_http_is_hop_by_hop(h, name) || vsr_slice_case_eq_cstr(name, "content-length"))
            continue;
        vsr_http_write_header(&b, name, h->headers[i].value);
    }
    if (req->is_head) {
        if (h->content_length >= 0)
            vsr_http_write_header_u64(&b, "content-length", (uint64_t)h->content_length);
        req->resp_no_body = 1;
    } else if (!h->has_body) {
        if (h->content_length >= 0)
            vsr_http_write_header_u64(&b, "content-length", (uint64_t)h->content_length);
        else if (h->status != 204 && h->status != 304)
            vsr_buf_append_cstr(&b, "content-length: 0\r\n");
        req->resp_no_body = 1;
    } else if (h->content_length >= 0 && !h->chunked) {
        vsr_http_write_header_u64(&b, "content-length", (uint64_t)h->content_length);
    } else if (req->head->version_minor >= 1) {
        vsr_buf_append_cstr(&b, "transfer-encoding: chunked\r\n");
        req->resp_chunked = 1;
    } else {
        req->keep_alive = 0; /* an HTTP/1.0 client reads to the close */
    }
    if (!req->keep_alive)
        vsr_buf_append_cstr(&b, "connection: close\r\n");
    vsr_http_write_end_head(&b);
    req->head_sent = 1;
    conn_write_buf(c, &b);
}

static void up_on_body(void *ud, const char *p, size_t n, vsr_rbuf_t *owner)
{
    request_t *req = ud;
    conn_t *c = req->c;
    if (req->resp_no_body)
        return;
    wop_t *op = wop_get(c);
    op->rb = owner;
    vsr_rbuf_ref(owner);
    if (req->resp_chunked) {
        size_t hl = vsr_http_chunk_head(op->chunk, n);
        uv_buf_t bufs[3] = {uv_buf_init(op->chunk, (unsigned)hl), uv_buf_init((char *)p, (unsigned)n),
                            uv_buf_init((char *)VSR_HTTP_CRLF, 2)};
        conn_write(c, op, bufs, 3);
    } else {
        uv_buf_t ub = uv_buf_init((char *)p, (unsigned)n);
        conn_write(c, op, &ub, 1);
    }
    if (!c->closing && req->call && c->wq_bytes > WQ_HIGH)
        vsr_upstream_call_pause(req->call);
}

static void up_on_complete(void *ud)
{
    request_t *req = ud;
    conn_t *c = req->c;
    req->call = NULL;
    if (req->resp_chunked) {
        wop_t *op = wop_get(c);
        uv_buf_t ub = uv_buf_init((char *)VSR_HTTP_LAST_CHUNK, 5);
        conn_write(c, op, &ub, 1);
    }
    if (!c->closing)
        request_finish(req);
}

static void up_on_error(void *ud, vsr_upstream_error_t err, const char *detail)
{
    request_t *req = ud;
    conn_t *c = req->c;
    req->call = NULL;
    if (req->head_sent) {
        /* Bytes already reached the client: end the stream visibly (no
         * terminating chunk, no second status) by dropping the connection. */
        vsr_log_debug("gateway", "upstream failed mid-response: %s (%s)", vsr_upstream_error_reason(err),
                      detail ? detail : "");
        conn_close(c);
        return;
    }
    char msg[256];
    int status = 503;
    if (err == VSR_UPSTREAM_E_TIMEOUT) {
        status = 504;
        snprintf(msg, sizeof(msg), "upstream request timeout");
    } else {
        snprintf(msg, sizeof(msg), "upstream connect error or disconnect/reset before headers. reset reason: %s",
                 vsr_upstream_error_reason(err));
    }
    vsr_log_debug("gateway", "upstream failed: %s (%s)", msg, detail ? detail : "");
    reply_error(c, status, "server_error", NULL, vsr_slice_cstr(msg), NULL, req->is_head, !req->keep_alive);
    request_finish(req);
}

static const vsr_upstream_callbacks_t up_callbacks = {up_on_head, up_on_body, up_on_complete, up_on_error};

/* Sends the request to `model`'s backend: client fields minus hop-by-hop
 * ones, host and content-length (the upstream writes its own), and an
 * x-request-id when the client sent none. */
static void proxy(request_t *req, const vsr_model_conf_t *model, int rewrite_prefix)
{
    const vsr_http_head_t *h = req->head;
    req->fwd = vsr_pool_alloc(&req->pool, sizeof(vsr_http_header_t) * (h->num_headers + 1));
    int has_id = 0;
    for (size_t i = 0; i < h->num_headers; i++) {
        vsr_slice_t name = h->headers[i].name;
        if (vsr_http_is_hop_by_hop(h, name) || vsr_slice_case_eq_cstr(name, "host") ||
            vsr_slice_case_eq_cstr(name, "content-length") || vsr_slice_case_eq_cstr(name, "expect"))
            continue;
        if (vsr_slice_case_eq_cstr(name, "x-request-id"))
            has_id = 1;
        req->fwd[req->n_fwd++] = h->headers[i];
    }
    if (!has_id) {
        char *id = vsr_pool_alloc(&req->pool, 37);
        vsr_uuid4(id);
        req->fwd[req->n_fwd].name = VSR_SLICE_LIT("x-request-id");
        req->fwd[req->n_fwd].value = vsr_slice(id, 36);
        req->n_fwd++;
    }
    if (req->n_pieces == 0 && req->body.len > 0)
        req->pieces[req->n_pieces++] = vsr_buf_slice(&req->body);

    uint64_t budget = req->c->l->conf->timeout_ms;
    vsr_upstream_request_t ur = {
        .method = h->method,
        .path = h->target,
        .rewrite_prefix = rewrite_prefix,
        .headers = req->fwd,
        .n_headers = req->n_fwd,
        .body = req->pieces,
        .n_body = req->n_pieces,
        .send_length = h->has_body || vsr_slice_eq_cstr(h->method, "POST") || vsr_slice_eq_cstr(h->method, "PUT"),
        .head_request = req->is_head,
        .first_byte_timeout_ms = budget,
        .idle_timeout_ms = budget,
    };
    req->call = vsr_upstream_call_start(req->c->w->up, model, &ur, &up_callbacks, req);
}

/* ---- the OpenAI-compatible endpoints ---- */

/* Routes an inference request by its `model` field and rewrites that field
 * to the provider's model id by splicing the body: the client's bytes are
 * relayed unchanged around the one value that changes. */
static void handle_inference(request_t *req, int is_chat)
{
    vsr_gateway_t *gw = req->c->w->gw;
    vsr_json_t *j = &req->json;
    req->has_json = 1;
    if (vsr_json_parse(j, req->body.data ? req->body.data : "", req->body.len, NULL) != VSR_OK ||
        vsr_json_type(j, 0) != VSR_JSON_OBJECT) {
        req_error(req, 400, "malformed JSON body");
        return;
    }
    uint32_t t;
    if (is_chat) {
        if (vsr_json_object_get(j, 0, "messages", &t) != VSR_OK) {
            req_error(req, 400, "messages field is required");
            return;
        }
        if (vsr_json_type(j, t) != VSR_JSON_ARRAY) {
            req_error(req, 400, "messages field must be an array");
            return;
        }
    }
    const vsr_model_conf_t *model;
    vsr_slice_t name = VSR_SLICE_NULL;
    int have_model = vsr_json_object_get(j, 0, "model", &t) == VSR_OK;
    if (have_model && vsr_json_type(j, t) != VSR_JSON_STRING) {
        req_error(req, 400, "model field must be a string");
        return;
    }
    if (have_model)
        vsr_json_string(j, t, &req->pool, &name);
    if (name.len == 0) {
        model = vsr_config_default_model(gw->cfg);
        if (model == NULL) {
            req_error(req, 400, "unable to route request: no model selected and no default model configured");
            return;
        }
    } else {
        model = vsr_config_find_model(gw->cfg, name);
        if (model == NULL) {
            vsr_buf_t m;
            vsr_buf_init(&m, 0);
            vsr_buf_printf(&m, "model \"" VSR_SLICE_FMT "\" is not available", VSR_SLICE_ARG(name));
            req_error(req, 400, m.data);
            vsr_buf_free(&m);
            return;
        }
    }

    vsr_slice_t id = vsr_slice_cstr(model->provider_model_id);
    const char *src = req->body.data;
    if (have_model && !(vsr_slice_eq(name, id) && !j->toks[t].escaped)) {
        vsr_buf_t lit;
        vsr_buf_init(&lit, 0);
        vsr_buf_append_json_string(&lit, id);
        req->pieces[0] = vsr_slice(src, j->toks[t].start);
        req->pieces[1] = vsr_pool_dup_slice(&req->pool, vsr_buf_slice(&lit));
        req->pieces[2] = vsr_slice(src + j->toks[t].end, req->body.len - j->toks[t].end);
        req->n_pieces = 3;
        vsr_buf_free(&lit);
    } else if (!have_model) {
        vsr_buf_t ins;
        vsr_buf_init(&ins, 0);
        vsr_buf_append_cstr(&ins, "\"model\":");
        vsr_buf_append_json_string(&ins, id);
        if (j->toks[0].count > 0)
            vsr_buf_append(&ins, ",", 1);
        uint32_t open = j->toks[0].start + 1;
        req->pieces[0] = vsr_slice(src, open);
        req->pieces[1] = vsr_pool_dup_slice(&req->pool, vsr_buf_slice(&ins));
        req->pieces[2] = vsr_slice(src + open, req->body.len - open);
        req->n_pieces = 3;
        vsr_buf_free(&ins);
    }
    proxy(req, model, 1);
}

static void handle_models(request_t *req)
{
    const vsr_config_t *cfg = req->c->w->gw->cfg;
    vsr_buf_t b;
    vsr_buf_init(&b, 0);
    vsr_buf_append_cstr(&b, "{\"object\":\"list\",\"data\":[");
    for (size_t i = 0; i < cfg->n_models; i++) {
        if (i)
            vsr_buf_append(&b, ",", 1);
        vsr_buf_append_cstr(&b, "{\"id\":");
        vsr_buf_append_json_string(&b, vsr_slice_cstr(cfg->models[i].name));
        vsr_buf_printf(&b, ",\"object\":\"model\",\"created\":%llu,\"owned_by\":\"upstream-endpoint\"}",
                       (unsigned long long)req->c->w->gw->started_at);
    }
    vsr_buf_append_cstr(&b, "]}");
    reply(req->c, 200, "application/json", vsr_buf_slice(&b), NULL, req->is_head, !req->keep_alive);
    vsr_buf_free(&b);
    request_finish(req);
}

typedef enum { EP_CHAT, EP_COMPLETIONS, EP_RESPONSES, EP_MODELS } endpoint_kind_t;

static const struct {
    const char *path;
    const char *method;
    endpoint_kind_t kind;
} endpoints[] = {
    {"/v1/chat/completions", "POST", EP_CHAT},
    {"/v1/completions", "POST", EP_COMPLETIONS},
    {"/v1/responses", "POST", EP_RESPONSES},
    {"/v1/models", "GET", EP_MODELS},
};

static void dispatch(request_t *req)
{
    conn_t *c = req->c;
    const vsr_http_head_t *h = req->head;
    vsr_slice_t path = vsr_slice_split(h->target, '?', NULL);
    while (path.len > 1 && path.p[path.len - 1] == '/')
        path.len--; /* trailing slashes and the query do not take part in matching */
    int get_like = vsr_slice_eq_cstr(h->method, "GET") || req->is_head;

    if (vsr_slice_eq_cstr(path, "/health") && get_like) {
        reply(c, 200, "application/json", VSR_SLICE_LIT("{\"status\":\"ok\"}"), NULL, req->is_head,
              !req->keep_alive);
        request_finish(req);
        return;
    }
    if (vsr_slice_eq_cstr(path, "/ready") && get_like) {
        int ready = atomic_load(&c->w->gw->ready);
        reply(c, ready ? 200 : 503, "application/json",
              ready ? VSR_SLICE_LIT("{\"status\":\"ready\"}") : VSR_SLICE_LIT("{\"status\":\"not ready\"}"), NULL,
              req->is_head, !req->keep_alive);
        request_finish(req);
        return;
    }
    if (vsr_slice_eq_cstr(path, "/v1") || vsr_slice_starts_with(path, VSR_SLICE_LIT("/v1/"))) {
        for (size_t i = 0; i < VSR_ARRAY_LEN(endpoints); i++) {
            if (!vsr_slice_eq_cstr(path, endpoints[i].path))
                continue;
            int method_ok = vsr_slice_eq_cstr(h->method, endpoints[i].method) ||
                            (req->is_head && endpoints[i].kind == EP_MODELS);
            if (!method_ok) {
                char allow[64];
                snprintf(allow, sizeof(allow), "allow: %s\r\n", endpoints[i].method);
                reply_error(c, 405, "invalid_request_error", NULL, VSR_SLICE_LIT("method not allowed"), allow,
                            req->is_head, !req->keep_alive);
                request_finish(req);
                return;
            }
            if (endpoints[i].kind == EP_MODELS)
                handle_models(req);
            else
                handle_inference(req, endpoints[i].kind == EP_CHAT);
            return;
        }
        req_error(req, 404, "endpoint not found");
        return;
    }
    /* Envoy's default route: anything else goes to the default model's backend as it is. */
    const vsr_model_conf_t *model = vsr_config_default_model(c->w->gw->cfg);
    if (model == NULL) {
        req_error(req, 404, "endpoint not found");
        return;
    }
    proxy(req, model, 0);
}

/* ---- parsing the client's bytes ---- */

static int on_req_head(void *ud, vsr_http_head_t *head)
{
    conn_t *c = ud;
    request_t *req = request_new(c);
    c->req = req;
    req->head = head;
    req->keep_alive = head->keep_alive;
    req->is_head = vsr_slice_eq_cstr(head->method, "HEAD");
    if (head->content_length > 0)
        vsr_buf_reserve(&req->body, (size_t)head->content_length);
    if (head->expect_continue && head->has_body && head->version_minor >= 1) {
        wop_t *op = wop_get(c);
        uv_buf_t ub = uv_buf_init((char *)"HTTP/1.1 100 Continue\r\n\r\n", 25);
        conn_write(c, op, &ub, 1);
    }
    return VSR_OK;
}

static int on_req_body(void *ud, const char *p, size_t n)
{
    conn_t *c = ud;
    if (vsr_buf_append(&c->req->body, p, n) != VSR_OK)
        return VSR_ERR_TOO_BIG; /* the parser's max_body catches this first */
    return VSR_OK;
}

static int on_req_complete(void *ud)
{
    conn_t *c = ud;
    c->busy = 1;
    return VSR_PAUSED;
}

static const vsr_http_callbacks_t req_callbacks = {on_req_head, on_req_body, on_req_complete};

static void parse_error(conn_t *c)
{
    vsr_http_parser_t *p = &c->parser;
    int status = p->error_status ? p->error_status : 400;
    if (c->req) {
        request_free(c->req);
        c->req = NULL;
    }
    if (status == 413) {
        reply_error(c, 413, "invalid_request_error", "request_too_large",
                    VSR_SLICE_LIT("The request body is too large."), NULL, 0, 1);
        return;
    }
    char msg[160];
    snprintf(msg, sizeof(msg), "%s: %s",
             status == 431 ? "request header fields too large"
             : status == 501 ? "not implemented"
             : status == 505 ? "HTTP version not supported"
                             : "malformed HTTP request",
             p->error_msg ? p->error_msg : "invalid");
    reply_error(c, status, "invalid_request_error", NULL, vsr_slice_cstr(msg), NULL, 0, 1);
}

/* Feeds bytes to the parser until they run out or a request is complete;
 * returns how many were consumed, or -1 when the connection is done for. */
static ssize_t feed(conn_t *c, const char *data, size_t len)
{
    size_t off = 0;
    while (off < len && !c->busy) {
        ssize_t n = vsr_http_parser_execute(&c->parser, data + off, len - off);
        if (n < 0) {
            parse_error(c);
            return -1;
        }
        if (n == 0 && !c->busy)
            break; /* nothing more will be taken now; the rest waits in pending */
        off += (size_t)n;
    }
    return (ssize_t)off;
}

static void alloc_cb(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    conn_t *c = h->data;
    *buf = uv_buf_init(c->w->readbuf, sizeof(c->w->readbuf));
}

static void read_cb(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf);

static void set_reading(conn_t *c, int on)
{
    if (c->lingering)
        on = 1;
    if (on && !c->reading && !c->closing)
        uv_read_start((uv_stream_t *)&c->tcp, alloc_cb, read_cb);
    else if (!on && c->reading)
        uv_read_stop((uv_stream_t *)&c->tcp);
    c->reading = on && !c->closing;
}

static void idle_timer_cb(uv_timer_t *t)
{
    conn_t *c = t->data;
    if (!c->busy)
        conn_close(c); /* the client said nothing for the listener's timeout */
}

/* Parses what is pending and answers the next complete request, if any. */
static void conn_process(conn_t *c)
{
    if (c->closing || c->close_after_write || c->doomed)
        return;
    if (c->pending.len) {
        ssize_t n = feed(c, c->pending.data, c->pending.len);
        if (n < 0)
            return;
        vsr_buf_consume(&c->pending, (size_t)n);
    }
    if (c->busy) {
        uv_timer_stop(&c->timer);
        dispatch(c->req);
        return;
    }
    uv_timer_start(&c->timer, idle_timer_cb, c->l->conf->timeout_ms, 0);
    set_reading(c, 1);
}

static void read_cb(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    conn_t *c = s->data;
    if (nread == 0 || c->closing)
        return;
    if (c->lingering || c->close_after_write) {
        /* the last reply is queued or out: input is discarded */
        if (nread < 0) {
            if (c->lingering)
                conn_close(c);
            else
                set_reading(c, 0); /* write_cb lingers, which sees the EOF again */
        }
        return;
    }
    if (nread < 0) {
        /* EOF or error: whatever was in flight is abandoned; an upstream call
         * is cancelled (its connection closed) with the request. */
        conn_close(c);
        return;
    }
    if (!c->busy && c->pending.len == 0) {
        ssize_t n = feed(c, buf->base, (size_t)nread);
        if (n < 0)
            return;
        if ((size_t)n < (size_t)nread && vsr_buf_append(&c->pending, buf->base + n, (size_t)nread - (size_t)n) != VSR_OK) {
            conn_close(c);
            return;
        }
        if (c->busy) {
            uv_timer_stop(&c->timer);
            dispatch(c->req);
        } else {
            uv_timer_start(&c->timer, idle_timer_cb, c->l->conf->timeout_ms, 0);
        }
        return;
    }
    /* a request is being answered: hold pipelined bytes, within bounds */
    if (vsr_buf_append(&c->pending, buf->base, (size_t)nread) != VSR_OK) {
        conn_close(c);
        return;
    }
    if (c->pending.len >= PENDING_MAX)
        set_reading(c, 0);
}

/* ---- accept and close ---- */

static void conn_close_cb(uv_handle_t *h)
{
    conn_t *c = h->data;
    if (--c->pending_closes > 0)
        return;
    atomic_fetch_sub(c->l->active, 1);
    vsr_http_parser_free(&c->parser);
    vsr_buf_free(&c->pending);
    vsr_free(c);
}

static void conn_close(conn_t *c)
{
    if (c->closing)
        return;
    c->closing = 1;
    if (c->req) {
        request_free(c->req);
        c->req = NULL;
    }
    if (c->prev)
        c->prev->next = c->next;
    else
        c->w->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    c->pending_closes = 2;
    uv_close((uv_handle_t *)&c->tcp, conn_close_cb);
    uv_close((uv_handle_t *)&c->timer, conn_close_cb);
}

static void reject_close_cb(uv_handle_t *h)
{
    vsr_free(h);
}

void vsr__gateway_on_connection(uv_stream_t *server, int status)
{
    listener_t *l = server->data;
    worker_t *w = l->w;
    if (status < 0)
        return;
    if (atomic_fetch_add(l->active, 1) >= l->conf->max_connections) {
        /* over the limit: refuse this one without touching the others */
        atomic_fetch_sub(l->active, 1);
        uv_tcp_t *t = vsr_malloc(sizeof(*t));
        uv_tcp_init(&w->loop, t);
        if (uv_accept(server, (uv_stream_t *)t) == 0)
            uv_tcp_close_reset(t, reject_close_cb);
        else
            uv_close((uv_handle_t *)t, reject_close_cb);
        return;
    }
    conn_t *c = vsr_calloc(1, sizeof(*c));
    c->w = w;
    c->l = l;
    uv_tcp_init(&w->loop, &c->tcp);
    uv_timer_init(&w->loop, &c->timer);
    c->tcp.data = c;
    c->timer.data = c;
    vsr_buf_init(&c->pending, PENDING_MAX + VSR_RBUF_SIZE);
    vsr_http_limits_t lim = {.max_head_size = 64 * 1024, .max_headers = 100, .max_body = l->conf->max_body_bytes};
    vsr_http_parser_init(&c->parser, VSR_HTTP_REQUEST, &lim, &req_callbacks, c);
    c->next = w->conns;
    if (w->conns)
        w->conns->prev = c;
    w->conns = c;
    if (uv_accept(server, (uv_stream_t *)&c->tcp) != 0) {
        conn_close(c);
        return;
    }
    uv_tcp_nodelay(&c->tcp, 1);
    conn_process(c);
}

void vsr__gateway_close_all(worker_t *w)
{
    while (w->conns)
        conn_close(w->conns);
}

void vsr__gateway_worker_cleanup(worker_t *w)
{
    while (w->wop_free) {
        wop_t *op = w->wop_free;
        w->wop_free = op->next_free;
        vsr_free(op);
    }
}
