/*
 * proxy.c — a routed request's way to its backend and its answer's way
 * back: plan execution (the client's fields as Envoy's header rules allow
 * an effect to change them, the body or its replacement, the attempt's
 * budget), cross-model fallback (the one authority that decides on a next
 * candidate, with the circuit breakers), and the response relay (the head
 * the client gets, the body relayed, translated or buffered as the session
 * says, the end, and a failure before or after the first byte).  A response
 * goes out through the request's transport: an HTTP/2 stream (vsr__h2_*) or
 * the HTTP/1.x connection (vsr__conn_*), never the socket itself.
 */
#include "gateway/request-int.h"

#include <stdio.h>

static void proxy(request_t *req, const vsr_plan_t *plan, const vsr_effect_t *eff);

static int breaker_allows(void *ud, const vsr_model_conf_t *m)
{
    request_t *req = ud;
    return vsr_upstream_breaker_allow(req->w->up, m, &req->fb);
}

static int fb_listed(const request_t *req, int status)
{
    for (size_t i = 0; i < req->fb.n_retryable_status_codes; i++)
        if ((int)req->fb.retryable_status_codes[i] == status)
            return 1;
    return 0;
}

/* The one fallback authority of a request: after a failed candidate (a
 * retryable status, or a failure before any response head), and before any
 * byte reached the client, the gates of ref §1.7 in order — policy enabled,
 * outcome retryable (decided by the caller), nothing sent yet, attempts
 * below max_attempts, the total deadline not passed — then the decision's
 * next candidate whose circuit is not open.  Returns 1 when a new call went
 * out (the failed one is cancelled). */
static int try_fallback(request_t *req)
{
    if (req->sess == NULL || !req->fb.enabled || vsr__request_head_sent(req))
        return 0;
    if (req->fb_attempts >= req->fb.max_attempts)
        return 0;
    if (req->fb_deadline_ms && vsr_now_ms() >= req->fb_deadline_ms)
        return 0;
    const vsr_model_conf_t *failed = vsr_session_plan(req->sess)->model;
    const vsr_effect_t *eff = vsr_session_fallback(req->sess, breaker_allows, req);
    if (eff == NULL)
        return 0;
    vsr_metrics_fallback(req->w->metrics, vsr_slice_cstr(failed->name),
                         vsr_slice_cstr(vsr_session_plan(req->sess)->model->name));
    req->flags = NULL; /* the next candidate's outcome is the one that counts */
    if (req->call) {
        vsr_upstream_call_cancel(req->call);
        req->call = NULL;
    }
    proxy(req, vsr_session_plan(req->sess), eff);
    return 1;
}

/* True when a field of this name is one an effect may not touch (Envoy's rules). */
static int protected_name(vsr_slice_t name)
{
    switch (name.len) {
    case 4:
        return vsr_slice_case_eq_cstr(name, "host");
    case 7:
        return vsr_slice_case_eq_cstr(name, ":method") || vsr_slice_case_eq_cstr(name, ":scheme");
    case 10:
        if (vsr_slice_case_eq_cstr(name, ":authority"))
            return 1;
        break;
    }
    return name.len >= 8 && (name.p[0] | 0x20) == 'x' && vsr_slice_case_eq_cstr(vsr_slice(name.p, 8), "x-envoy-");
}

/* A field the effect removes or sets (sets replace every field of the name). */
static int effect_names(const vsr_effect_t *eff, vsr_slice_t name)
{
    if (eff == NULL)
        return 0;
    for (size_t i = 0; i < eff->n_remove; i++)
        if (vsr_slice_case_eq(name, eff->remove[i]) && !protected_name(eff->remove[i]))
            return 1;
    for (size_t i = 0; i < eff->n_set; i++)
        if (vsr_slice_case_eq(name, eff->set[i].name) && !protected_name(eff->set[i].name))
            return 1;
    return 0;
}

static vsr_header_t *to_route_headers(vsr_pool_t *pool, const vsr_http_head_t *h)
{
    vsr_header_t *out = vsr_pool_alloc(pool, sizeof(*out) * (h->num_headers + 1));
    for (size_t i = 0; i < h->num_headers; i++) {
        out[i].name = h->headers[i].name;
        out[i].value = h->headers[i].value;
    }
    return out;
}


static size_t limit_fields(request_t *req, vsr_http_header_t *f);

static void up_on_head(void *ud, const vsr_http_head_t *h)
{
    request_t *req = ud;
    conn_t *c = req->c;
    if (req->sess && req->fb.enabled) {
        /* the circuit of the model that answered, whether or not a next
         * candidate follows: client errors are not its failures */
        vsr_upstream_breaker_record(req->w->up, vsr_session_plan(req->sess)->model, &req->fb,
                                    !(h->status >= 500 || fb_listed(req, h->status)));
        if (fb_listed(req, h->status) && try_fallback(req))
            return; /* the next candidate answers instead */
    }
    req->served = req->sess ? vsr_session_plan(req->sess)->model : NULL;
    req->ms_head_us = vsr_now_us();
    const vsr_effect_t *eff = NULL;
    req->resp_status = h->status;
    if (req->sess)
        eff = vsr_session_response_headers(req->sess, h->status, to_route_headers(&req->pool, h), h->num_headers);
    vsr_slice_t ctype;
    if (req->sess && vsr_http_head_get(h, "content-type", &ctype) &&
        vsr_slice_starts_with(ctype, VSR_SLICE_LIT("text/event-stream"))) {
        vsr_metrics_ttfb(req->w->metrics, vsr__slice_or_empty(vsr_session_evidence(req->sess)->selected_model),
                         (double)(vsr_now_us() - req->start_us) / 1e6);
        if (req->usage == NULL && !req->is_head)
            req->usage = vsr__usage_new();
    }
    /* the fields that go to the client, whatever the transport */
    vsr_http_header_t *f = vsr_pool_alloc(&req->pool, sizeof(*f) * (h->num_headers + (eff ? eff->n_set : 0) + 10));
    size_t nf = 0;
    int own_limits = req->rl_counted && req->rl_verdict.rule; /* vsr's limits replace the backend's */
    for (size_t i = 0; i < h->num_headers; i++) {
        vsr_slice_t name = h->headers[i].name;
        if (vsr_http_is_hop_by_hop(h, name) || vsr_slice_case_eq_cstr(name, "content-length") ||
            effect_names(eff, name) || vsr_slice_case_eq_cstr(name, "x-request-id") ||
            (own_limits && vsr_slice_starts_with(vsr_slice(name.p, VSR_MIN(name.len, 12)),
                                                 VSR_SLICE_LIT("x-ratelimit-"))))
            continue;
        f[nf++] = h->headers[i];
    }
    size_t n_backend = h->fields_checked ? nf : 0; /* the backend's own fields, checked by the parser */
    if (!effect_names(eff, VSR_SLICE_LIT("x-request-id"))) /* the request's own, as the backend got it */
        f[nf++] = (vsr_http_header_t){VSR_SLICE_LIT("x-request-id"), vsr__request_id(req)};
    for (size_t i = 0; eff && i < eff->n_set; i++)
        if (!protected_name(eff->set[i].name))
            f[nf++] = (vsr_http_header_t){eff->set[i].name, eff->set[i].value};
    if (!effect_names(eff, VSR_SLICE_LIT("x-vsr-config-version"))) { /* the default route's answers too */
        char *v = vsr_pool_alloc(&req->pool, VSR_U64_DIGITS);
        f[nf++] = (vsr_http_header_t){VSR_SLICE_LIT("x-vsr-config-version"),
                                      vsr_slice(v, vsr_fmt_u64(v, vsr_engine_version(req->eng), 0))};
    }
    if (own_limits)
        nf += limit_fields(req, f + nf);
    if (req->sess) {
        char *n = vsr_pool_alloc(&req->pool, VSR_U64_DIGITS);
        /* the attempts of the model that answered; the fallback path names
         * the models called (not one skipped for its open circuit) */
        f[nf++] = (vsr_http_header_t){VSR_SLICE_LIT("x-vsr-upstream-attempts"),
                                      vsr_slice(n, vsr_fmt_u64(n, vsr__request_attempts_of(req, req->served), 0))};
        size_t n_tried;
        const vsr_model_conf_t *const *tried = vsr__request_models_called(req, &n_tried);
        if (n_tried > 1) {
            vsr_buf_t path;
            vsr_buf_init(&path, 0);
            for (size_t i = 0; i < n_tried; i++)
                vsr_buf_printf(&path, "%s%s", i ? "," : "", tried[i]->name);
            f[nf++] = (vsr_http_header_t){VSR_SLICE_LIT("x-vsr-fallback-path"),
                                          vsr_pool_dup_slice(&req->pool, vsr_buf_slice(&path))};
            vsr_buf_free(&path);
        }
    }
    vsr__request_enter(req, RQ_RESPONDING);
    int no_body = req->is_head || !h->has_body;
    /* 204 never has a content-length (RFC 9110 §8.6); a 304's is optional and
     * describes a body that is not there: neither is relayed */
    int no_length = h->status == 204 || h->status == 304;
    req->body_mode = eff && !no_body ? eff->body_mode : VSR_BODY_RELAY;
    req->observe = eff && !no_body && eff->observe && req->body_mode == VSR_BODY_RELAY;
    /* a translated stream is framed here: the upstream's length is not its length */
    int chunked = h->chunked || req->body_mode == VSR_BODY_STREAM;
    req->usage_of_output = req->body_mode == VSR_BODY_STREAM && req->served && req->served->messages_api;
    if (req->usage_of_output && req->usage && req->usage_up == NULL) /* the client may not have asked for usage */
        req->usage_up = vsr__usage_new();
    if (req->body_mode == VSR_BODY_BUFFER) {
        /* the answer is translated whole: its head goes out with it */
        req->held_status = h->status;
        req->held_fields = f;
        req->n_held_fields = nf;
        return;
    }
    if (req->st) {
        vsr__resp_head_t rh = {.status = h->status, .fields = f, .n_fields = nf,
                               .content_length = chunked || no_length ? -1 : h->content_length};
        if (!req->is_head && !h->has_body && h->content_length < 0 && h->status != 204 && h->status != 304)
            rh.content_length = 0;
        req->resp_no_body = no_body;
        /* ends the stream at once when no body follows */
        vsr__h2_respond(req->st, &rh, NULL, 0, !no_body);
        return;
    }
    vsr_buf_t b;
    vsr_buf_init(&b, 0);
    size_t room = 96 + h->reason.len; /* status line, framing, the end */
    for (size_t i = 0; i < nf; i++)
        room += f[i].name.len + f[i].value.len + 4;
    vsr_buf_reserve(&b, room); /* one allocation for the whole head */
    vsr_http_write_status_line(&b, h->status, h->reason.len ? h->reason : VSR_SLICE_NULL);
    for (size_t i = 0; i < nf; i++)
        (i < n_backend ? vsr_http_write_checked_header : vsr_http_write_header)(&b, f[i].name, f[i].value);
    if (req->is_head) {
        if (h->content_length >= 0 && !no_length)
            vsr_http_write_header_u64(&b, "content-length", (uint64_t)h->content_length);
        req->resp_no_body = 1;
    } else if (!h->has_body) {
        if (h->content_length >= 0 && !no_length)
            vsr_http_write_header_u64(&b, "content-length", (uint64_t)h->content_length);
        else if (h->status != 204 && h->status != 304)
            vsr_buf_append_cstr(&b, "content-length: 0\r\n");
        req->resp_no_body = 1;
    } else if (h->content_length >= 0 && !chunked) {
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
    /* held: it goes out with body bytes or the end that arrive in the same
     * read (one write), or else from a zero timer once this callback is over
     * (conn_post): the client has the head when the backend has sent it,
     * even when the body is slow to follow */
    vsr__conn_hold_head(c, &b);
}

/* Sends the session's bytes of a translated answer (copied: the session
 * reuses its buffer), with the held head when it is still held. */
static void send_translated(request_t *req, const vsr_effect_t *eff)
{
    conn_t *c = req->c;
    if (req->usage && req->usage_of_output)
        for (size_t i = 0; i < eff->n_body; i++)
            vsr__usage_feed(req->usage, eff->body[i].p, eff->body[i].len);
    if (req->st) {
        for (size_t i = 0; i < eff->n_body; i++)
            vsr__h2_body(req->st, eff->body[i].p, eff->body[i].len);
        req->bytes_sent += eff->body_len;
        return;
    }
    int held = vsr__conn_head_held(c);
    if (eff->body_len == 0 && !held)
        return;
    vsr_buf_t b;
    vsr_buf_init(&b, 0);
    if (held)
        vsr__conn_take_head(c, &b);
    if (eff->body_len) {
        char hl[24];
        if (req->resp_chunked)
            vsr_buf_append(&b, hl, vsr_http_chunk_head(hl, (size_t)eff->body_len));
        for (size_t i = 0; i < eff->n_body; i++)
            vsr_buf_append_slice(&b, eff->body[i]);
        if (req->resp_chunked)
            vsr_buf_append(&b, VSR_HTTP_CRLF, 2);
    }
    vsr__conn_send(c, &b);
}

/* BUFFER: the whole translated answer, with the head held for it. */
static void send_buffered(request_t *req, const vsr_effect_t *eff)
{
    int status = eff->status ? eff->status : req->held_status;
    req->resp_status = status;
    size_t nf = 0;
    vsr_http_header_t *f = vsr_pool_alloc(&req->pool, sizeof(*f) * (req->n_held_fields + eff->n_resp_headers + 1));
    for (size_t i = 0; i < req->n_held_fields; i++) {
        int replaced = 0;
        for (size_t k = 0; k < eff->n_resp_headers && !replaced; k++)
            replaced = vsr_slice_case_eq(req->held_fields[i].name, eff->resp_headers[k].name);
        if (!replaced)
            f[nf++] = req->held_fields[i];
    }
    for (size_t k = 0; k < eff->n_resp_headers; k++)
        f[nf++] = (vsr_http_header_t){eff->resp_headers[k].name, eff->resp_headers[k].value};
    vsr_buf_t body;
    vsr_buf_init(&body, 0);
    for (size_t i = 0; i < eff->n_body; i++)
        vsr_buf_append_slice(&body, eff->body[i]);
    if (req->st) {
        vsr__resp_head_t rh = {.status = status, .fields = f, .n_fields = nf, .content_length = (int64_t)body.len};
        req->bytes_sent += body.len;
        vsr__h2_respond(req->st, &rh, body.data, body.len, 0);
        vsr_buf_free(&body);
        return;
    }
    vsr_buf_t b;
    vsr_buf_init(&b, 0);
    vsr_http_write_status_line(&b, status, VSR_SLICE_NULL);
    for (size_t i = 0; i < nf; i++)
        vsr_http_write_header(&b, f[i].name, f[i].value);
    vsr_http_write_header_u64(&b, "content-length", body.len);
    if (!req->keep_alive)
        vsr_buf_append_cstr(&b, "connection: close\r\n");
    vsr_http_write_end_head(&b);
    vsr_buf_append(&b, body.data ? body.data : "", body.len);
    vsr_buf_free(&body);
    vsr__conn_send(req->c, &b);
    if (!req->keep_alive)
        vsr__conn_close_after_write(req->c, 0);
}

static void up_on_body(void *ud, const char *p, size_t n, vsr_rbuf_t *owner)
{
    request_t *req = ud;
    conn_t *c = req->c;
    if (req->resp_no_body)
        return;
    if (req->rl_tokens && req->usage == NULL && req->rl_body.len + n <= req->rl_body.cap)
        vsr_buf_append(&req->rl_body, p, n); /* for its usage; a longer answer is not charged */
    if (req->body_mode != VSR_BODY_RELAY) {
        const vsr_effect_t *eff = vsr_session_response_body(req->sess, p, n, 0);
        if (req->usage && !req->usage_of_output)
            vsr__usage_feed(req->usage, p, n);
        if (req->usage_up) {
            vsr__usage_feed(req->usage_up, p, n);
            if (req->usage_up->has_usage) { /* the output's usage chunk, when it has one, says the same */
                req->usage->prompt_tokens = req->usage_up->prompt_tokens;
                req->usage->completion_tokens = req->usage_up->completion_tokens;
                req->usage->has_usage = 1;
            }
        }
        if (req->body_mode == VSR_BODY_STREAM) {
            send_translated(req, eff);
            if (req->call && req->st && vsr__h2_queued(req->st) > VSR__H2_QUEUE_HIGH)
                vsr_upstream_call_pause(req->call);
            else if (!req->st)
                vsr__conn_backpressure(c, req->call);
        }
        return;
    }
    if (req->observe)
        vsr_session_response_body(req->sess, p, n, 0);
    if (req->usage)
        vsr__usage_feed(req->usage, p, n);
    if (req->st) {
        vsr__h2_body(req->st, p, n);
        req->bytes_sent += n;
        if (req->call && vsr__h2_queued(req->st) > VSR__H2_QUEUE_HIGH)
            vsr_upstream_call_pause(req->call);
        return;
    }
    vsr__conn_relay(c, p, n, owner, req->resp_chunked);
    vsr__conn_backpressure(c, req->call);
}

/* The end of the answer: the session's last effect (STREAM, BUFFER; NULL
 * for RELAY) goes out, then the stream's end. */
void vsr__proxy_response_end(request_t *req, const vsr_effect_t *eff)
{
    conn_t *c = req->c;
    if (req->body_mode != VSR_BODY_RELAY) {
        if (req->body_mode == VSR_BODY_BUFFER) {
            send_buffered(req, eff);
            if (req->st || !vsr__conn_closing(c))
                vsr__request_finish(req);
            return;
        }
        send_translated(req, eff);
    }
    if (req->st) {
        vsr__h2_end(req->st);
        vsr__request_finish(req);
        return;
    }
    vsr__conn_relay_end(c, req->resp_chunked, 1); /* the end goes out with the last pieces */
    if (!vsr__conn_closing(c))
        vsr__request_finish(req);
}

static void up_on_complete(void *ud)
{
    request_t *req = ud;
    conn_t *c = req->c;
    req->call = NULL;
    if (req->observe) {
        const vsr_effect_t *eff = vsr_session_response_body(req->sess, NULL, 0, VSR_BODY_END);
        if (eff->pending) {
            /* the client has the whole answer; the request ends when the session has looked at it */
            req->body_mode = VSR_BODY_RELAY;
            vsr__request_enter(req, RQ_RESP_FINISH);
            if (req->st)
                return; /* the stream's end waits (ending it would close it under the request) */
            vsr__conn_relay_end(c, req->resp_chunked, 0);
            return;
        }
    }
    const vsr_effect_t *eff = NULL;
    if (req->body_mode != VSR_BODY_RELAY) {
        eff = vsr_session_response_body(req->sess, NULL, 0, VSR_BODY_END);
        if (eff->pending) {
            vsr__request_enter(req, RQ_RESP_EFFECT); /* port_resume goes on */
            return;
        }
    }
    vsr__proxy_response_end(req, eff);
}

static void up_on_error(void *ud, vsr_upstream_error_t err, const char *detail, int retried)
{
    request_t *req = ud;
    conn_t *c = req->c;
    req->call = NULL;
    static const char *flags[] = {"-", "UF", "UC", "UPE", "UT", "UT", "UC", "UO"};
    req->flags = flags[err];
    if (err == VSR_UPSTREAM_E_OVERFLOW && req->sess)
        vsr_metrics_overflow(req->w->metrics, vsr__slice_or_empty(vsr_session_evidence(req->sess)->selected_model));
    if (req->sess && req->fb.enabled && !vsr__request_head_sent(req)) /* every failed candidate, the last one too */
        vsr_upstream_breaker_record(req->w->up, vsr_session_plan(req->sess)->model, &req->fb, 0);
    /* connection failures, resets, protocol errors, timeouts and overflow are
     * all retryable classes for fallback; the local reply is the last resort */
    if (vsr__request_head_sent(req) && req->body_mode == VSR_BODY_BUFFER) {
        vsr__request_enter(req, RQ_UPSTREAM); /* held, never sent: the client gets an answer of its own */
        req->body_mode = VSR_BODY_RELAY;
    }
    if (!vsr__request_head_sent(req) && try_fallback(req))
        return;
    if (vsr__request_head_sent(req) && req->body_mode == VSR_BODY_STREAM && (req->st || req->resp_chunked)) {
        /* a translated stream ends in its protocol's error event (the
         * translator says the answer was cut), then ends as a stream */
        vsr_log_debug("gateway", "upstream failed mid-response: %s (%s)", vsr_upstream_error_reason(err),
                      detail ? detail : "");
        send_translated(req, vsr_session_response_body(req->sess, NULL, 0, VSR_BODY_CUT));
        req->body_mode = VSR_BODY_RELAY;
        if (req->st) {
            vsr__h2_end(req->st);
            vsr__request_finish(req);
            return;
        }
        vsr__conn_relay_end(c, 1, 0);
        if (!vsr__conn_closing(c))
            vsr__request_finish(req);
        return;
    }
    if (vsr__request_head_sent(req)) {
        /* Bytes already reached the client: end the stream visibly (no
         * terminating chunk, no second status) by dropping the connection. */
        vsr_log_debug("gateway", "upstream failed mid-response: %s (%s)", vsr_upstream_error_reason(err),
                      detail ? detail : "");
        if (req->st) {
            /* over HTTP/2 only this stream ends: RST_STREAM, its siblings go on */
            vsr__h2_reset(req->st);
            vsr__h2_detach(req->st);
            vsr__request_free(req);
            return;
        }
        vsr__conn_abort(c); /* what came before the failure goes out first */
        return;
    }
    char msg[256];
    int status = 503;
    if (err == VSR_UPSTREAM_E_TIMEOUT) {
        status = 504;
        snprintf(msg, sizeof(msg), "upstream request timeout");
    } else {
        snprintf(msg, sizeof(msg), "upstream connect error or disconnect/reset before headers. %sreset reason: %s",
                 retried ? "retried and the latest " : "", vsr_upstream_error_reason(err));
    }
    vsr_log_debug("gateway", "upstream failed: %s (%s)", msg, detail ? detail : "");
    vsr__request_reply_error(req, status, "server_error", NULL, vsr_slice_cstr(msg),
                             err == VSR_UPSTREAM_E_OVERFLOW ? "x-envoy-overloaded: true\r\n" : NULL, req->is_head,
                             !req->keep_alive);
    vsr__request_finish(req);
}

/* The pieces of one backend read go out in one write. */
static void up_on_read_end(void *ud)
{
    request_t *req = ud;
    if (!req->st)
        vsr__conn_read_end(req->c, req);
}

static const vsr_upstream_callbacks_t up_callbacks = {up_on_head, up_on_body, up_on_complete, up_on_error,
                                                      up_on_read_end};

static void trace_attempt_headers(void *ud, unsigned index, vsr_buf_t *head)
{
    vsr__trace_attempt_headers(&((request_t *)ud)->trace, index, head);
}

/* Sends the request as the routing core planned it: the client's fields
 * minus hop-by-hop ones, host and content-length (the upstream writes its
 * own), with the effect's removals and then its sets applied, an
 * x-request-id when there is none, and the body or its replacement. */
static void proxy(request_t *req, const vsr_plan_t *plan, const vsr_effect_t *eff)
{
    vsr__request_enter(req, RQ_UPSTREAM);
    const vsr_http_head_t *h = req->head;
    req->n_fwd = 0;
    req->fwd = vsr_pool_alloc(&req->pool, sizeof(vsr_http_header_t) * (req->n_hdrs + (eff ? eff->n_set : 0) + 1));
    int has_id = 0;
    for (size_t i = 0; i < req->n_hdrs; i++) {
        vsr_slice_t name = req->hdrs[i].name;
        if (vsr_http_is_hop_by_hop(h, name) || vsr_slice_case_eq_cstr(name, "host") ||
            vsr_slice_case_eq_cstr(name, "content-length") || vsr_slice_case_eq_cstr(name, "expect") ||
            effect_names(eff, name) || vsr__trace_owns(&req->trace, name))
            continue;
        if (vsr_slice_case_eq_cstr(name, "x-request-id")) {
            has_id = 1;
            req->request_id = req->hdrs[i].value;
        }
        req->fwd[req->n_fwd].name = name;
        req->fwd[req->n_fwd].value = req->hdrs[i].value;
        req->n_fwd++;
    }
    req->n_fwd_checked = h->fields_checked ? req->n_fwd : 0; /* the client's own fields, as parsed */
    for (size_t i = 0; eff && i < eff->n_set; i++) {
        if (protected_name(eff->set[i].name))
            continue;
        if (vsr_slice_case_eq_cstr(eff->set[i].name, "x-request-id")) {
            has_id = 1;
            req->request_id = eff->set[i].value;
        }
        req->fwd[req->n_fwd].name = eff->set[i].name;
        req->fwd[req->n_fwd].value = eff->set[i].value;
        req->n_fwd++;
    }
    if (!has_id) {
        if (!req->id_made) { /* vsr's own, the same for every fallback candidate */
            char *id = vsr_pool_alloc(&req->pool, 37);
            vsr_uuid4(id);
            req->request_id = vsr_slice(id, 36);
            req->id_made = 1;
        }
        req->fwd[req->n_fwd].name = VSR_SLICE_LIT("x-request-id");
        req->fwd[req->n_fwd].value = req->request_id;
        req->n_fwd++;
    }
    const vsr_slice_t *body = NULL;
    size_t n_body = 0;
    vsr_slice_t whole = vsr_buf_slice(&req->body);
    if (eff && eff->body_replaced) {
        body = eff->body;
        n_body = eff->n_body;
    } else if (whole.len > 0) {
        body = &whole;
        n_body = 1;
        req->pieces[0] = whole;
        body = req->pieces;
    }

    uint64_t budget = req->l->conf->timeout_ms;
    uint64_t cap = 0;
    if (req->sess && req->fb.enabled) {
        /* each candidate's attempt: min(per_attempt_timeout, what is left of total_timeout) */
        uint64_t now = vsr_now_ms();
        if (req->fb_attempts == 0 && req->fb.total_timeout_ms)
            req->fb_deadline_ms = now + req->fb.total_timeout_ms;
        cap = req->fb.per_attempt_timeout_ms;
        if (req->fb_deadline_ms)
            cap = VSR_MIN(cap ? cap : UINT64_MAX, req->fb_deadline_ms > now ? req->fb_deadline_ms - now : 1);
    }
    req->fb_attempts++;
    vsr_upstream_request_t ur = {
        .method = h->method,
        .path = eff && eff->path.len ? eff->path : h->target, /* a translated body goes to its protocol's path */
        .rewrite_prefix = plan->rewrite_prefix,
        .headers = req->fwd,
        .n_headers = req->n_fwd,
        .n_checked_headers = req->n_fwd_checked,
        .body = body,
        .n_body = n_body,
        .send_length = h->has_body || vsr_slice_eq_cstr(h->method, "POST") || vsr_slice_eq_cstr(h->method, "PUT"),
        .head_request = req->is_head,
        .with_credentials = plan->rewrite_prefix,
        .listener_timeout_ms = budget,
        .override = plan->reliability,
        .report = &req->report,
        .max_total_ms = cap,
        .attempt_headers = req->trace.on ? trace_attempt_headers : NULL,
    };
    if (req->sess && req->fb_attempts == 1) /* the first candidate's request: one copy, whatever fallbacks follow */
        vsr__shadow_start(req, ur.path, body, n_body);
    if (req->sess && req->ms_model != plan->model) { /* in flight: the model this call goes to */
        vsr_model_stats_t *ms = req->w->gw->model_stats;
        if (req->ms_model)
            vsr_model_stats_inflight(ms, req->w->id, vsr_slice_cstr(req->ms_model->name), -1);
        vsr_model_stats_inflight(ms, req->w->id, vsr_slice_cstr(plan->model->name), 1);
        req->ms_model = plan->model;
    }
    req->ms_sent_us = vsr_now_us();
    req->ms_head_us = 0;
    req->call = vsr_upstream_call_start(req->w->up, plan->model, &ur, &up_callbacks, req);
}

/* An immediate answer from the routing core. */
void vsr__proxy_reply_effect(request_t *req, const vsr_effect_t *eff)
{
    req->resp_status = eff->status;
    req->flags = "LR";
    if (req->st) {
        vsr_http_header_t *f = vsr_pool_alloc(&req->pool, sizeof(*f) * (eff->n_resp_headers + 1));
        for (size_t i = 0; i < eff->n_resp_headers; i++)
            f[i] = (vsr_http_header_t){eff->resp_headers[i].name, eff->resp_headers[i].value};
        f[eff->n_resp_headers] = (vsr_http_header_t){VSR_SLICE_LIT("x-request-id"), vsr__request_id(req)};
        vsr__resp_head_t rh = {.status = eff->status, .fields = f, .n_fields = eff->n_resp_headers + 1,
                               .content_length = (int64_t)eff->resp_body.len};
        if (!req->is_head)
            req->bytes_sent += eff->resp_body.len;
        vsr__h2_respond(req->st, &rh, eff->resp_body.p, req->is_head ? 0 : eff->resp_body.len, 0);
        vsr__request_finish(req);
        return;
    }
    vsr_buf_t b;
    vsr_buf_init(&b, 0);
    vsr_http_write_status_line(&b, eff->status, VSR_SLICE_NULL);
    for (size_t i = 0; i < eff->n_resp_headers; i++)
        vsr_http_write_header(&b, eff->resp_headers[i].name, eff->resp_headers[i].value);
    vsr_http_write_header(&b, VSR_SLICE_LIT("x-request-id"), vsr__request_id(req));
    vsr_http_write_header_u64(&b, "content-length", eff->resp_body.len);
    if (!req->keep_alive)
        vsr_buf_append_cstr(&b, "connection: close\r\n");
    vsr_http_write_end_head(&b);
    if (!req->is_head)
        vsr_buf_append_slice(&b, eff->resp_body);
    vsr__conn_send(req->c, &b);
    if (!req->keep_alive)
        vsr__conn_close_after_write(req->c, 0);
    vsr__request_finish(req);
}

/* The body phase's effect is in: an answer, or the upstream call. */
static vsr_slice_t pool_u64_slice(request_t *req, uint64_t v, const char *suffix)
{
    char *s = vsr_pool_alloc(&req->pool, VSR_U64_DIGITS + 2);
    size_t n = vsr_fmt_u64(s, v, 0);
    for (; *suffix; suffix++)
        s[n++] = *suffix;
    return vsr_slice(s, n);
}

/* An admitted answer's x-ratelimit-* (OpenAI's names): the room its tightest rule had left; returns how many (<= 6). */
static size_t limit_fields(request_t *req, vsr_http_header_t *f)
{
    const vsr__rl_verdict_t *v = &req->rl_verdict;
    size_t n = 0;
    if (v->limit_requests) {
        f[n++] = (vsr_http_header_t){VSR_SLICE_LIT("x-ratelimit-limit-requests"), pool_u64_slice(req, v->limit_requests, "")};
        f[n++] = (vsr_http_header_t){VSR_SLICE_LIT("x-ratelimit-remaining-requests"),
                                     pool_u64_slice(req, v->remaining_requests, "")};
        f[n++] = (vsr_http_header_t){VSR_SLICE_LIT("x-ratelimit-reset-requests"), pool_u64_slice(req, v->reset_s, "s")};
    }
    if (v->limit_tokens) {
        f[n++] = (vsr_http_header_t){VSR_SLICE_LIT("x-ratelimit-limit-tokens"), pool_u64_slice(req, v->limit_tokens, "")};
        f[n++] = (vsr_http_header_t){VSR_SLICE_LIT("x-ratelimit-remaining-tokens"),
                                     pool_u64_slice(req, v->remaining_tokens, "")};
        f[n++] = (vsr_http_header_t){VSR_SLICE_LIT("x-ratelimit-reset-tokens"), pool_u64_slice(req, v->reset_s, "s")};
    }
    return n;
}

static vsr_slice_t routed_header(const request_t *req, const char *name)
{
    for (size_t i = 0; i < req->n_hdrs; i++)
        if (vsr_slice_case_eq_cstr(req->hdrs[i].name, name))
            return vsr_slice_trim(req->hdrs[i].value);
    return VSR_SLICE_NULL;
}

/* global.services.ratelimit: 1 when the request was answered (429, or 503
 * when the check could not be made and fail_open is false). */
static int rate_limited(request_t *req)
{
    const vsr_config_t *cfg = vsr_engine_config(req->eng);
    if (cfg->n_ratelimit_rules == 0 && cfg->ratelimit_envoy_host == NULL)
        return 0;
    /* identity fields left in the routed request are trusted ones, or the key's (ingress removed the rest) */
    vsr__rl_subject_t *s = &req->rl_subject;
    s->user = routed_header(req, cfg->authz_user_id_header ? cfg->authz_user_id_header : "x-authz-user-id");
    s->groups = routed_header(req, cfg->authz_user_groups_header ? cfg->authz_user_groups_header
                                                                 : "x-authz-user-groups");
    const vsr_plan_t *plan = vsr_session_plan(req->sess);
    s->model = plan && plan->model ? vsr_slice_cstr(plan->model->name)
                                   : vsr__slice_or_empty(vsr_session_evidence(req->sess)->selected_model);
    vsr__rl_verdict_t v;
    int r = vsr__ratelimit_admit(req->w->gw->ratelimit, cfg, s, (uint64_t)vsr_wall_time(), &v);
    if (r == VSR__RL_ADMIT) {
        req->rl_counted = 1;
        req->rl_verdict = v;
        for (size_t i = 0; i < cfg->n_ratelimit_rules && !req->rl_tokens; i++)
            req->rl_tokens = cfg->ratelimit_rules[i].tokens_per_unit > 0;
        vsr_buf_init(&req->rl_body, VSR__RL_BODY_MAX);
        return 0;
    }
    if (r == VSR__RL_ERROR) {
        vsr_metrics_ratelimit(req->w->metrics, v.rule, cfg->ratelimit_fail_open ? "error_open" : "error_closed");
        if (cfg->ratelimit_fail_open)
            return 0;
        vsr__request_reply_error(req, 503, "server_error", "rate_limit_unavailable",
                                 VSR_SLICE_LIT("the rate limit check could not be made"),
                                 "x-vsr-response-path: error\r\n", req->is_head, !req->keep_alive);
        vsr__request_finish(req);
        return 1;
    }
    vsr_metrics_ratelimit(req->w->metrics, v.rule, "limited");
    char hdrs[512], msg[256];
    uint64_t retry = v.reset_s ? v.reset_s : 1;
    int n = snprintf(hdrs, sizeof(hdrs), "retry-after: %llu\r\nx-vsr-response-path: rate_limited\r\n",
                     (unsigned long long)retry);
    if (v.limit_requests)
        n += snprintf(hdrs + n, sizeof(hdrs) - (size_t)n,
                      "x-ratelimit-limit-requests: %llu\r\nx-ratelimit-remaining-requests: %llu\r\n"
                      "x-ratelimit-reset-requests: %llus\r\n",
                      (unsigned long long)v.limit_requests, (unsigned long long)v.remaining_requests,
                      (unsigned long long)v.reset_s);
    if (v.limit_tokens)
        snprintf(hdrs + n, sizeof(hdrs) - (size_t)n,
                 "x-ratelimit-limit-tokens: %llu\r\nx-ratelimit-remaining-tokens: %llu\r\n"
                 "x-ratelimit-reset-tokens: %llus\r\n",
                 (unsigned long long)v.limit_tokens, (unsigned long long)v.remaining_tokens,
                 (unsigned long long)v.reset_s);
    snprintf(msg, sizeof(msg), "Rate limit reached (rule %s): try again in %llus", v.rule, (unsigned long long)retry);
    vsr__request_reply_error(req, 429, "rate_limit_error", "rate_limit_exceeded", vsr_slice_cstr(msg), hdrs,
                             req->is_head, !req->keep_alive);
    vsr__request_finish(req);
    return 1;
}

void vsr__proxy_routed(request_t *req, const vsr_effect_t *eff)
{
    if (eff->status) {
        vsr__proxy_reply_effect(req, eff);
        return;
    }
    if (rate_limited(req))
        return;
    /* a first choice whose circuit is open is skipped like any candidate (ref §1.7) */
    /* fallback is the decision's: passthrough and default-route requests have none */
    if (vsr_session_evidence(req->sess)->decision)
        vsr_session_fallback_policy(req->sess, &req->fb);
    if (req->fb.enabled && !breaker_allows(req, vsr_session_plan(req->sess)->model)) {
        req->first_skipped = 1;
        eff = vsr_session_fallback(req->sess, breaker_allows, req);
        if (eff == NULL) {
            vsr__request_reply_error(req, 503, "server_error", "circuit_open",
                                     VSR_SLICE_LIT("every candidate model's circuit is open"), NULL, req->is_head,
                                     !req->keep_alive);
            vsr__request_finish(req);
            return;
        }
    }
    proxy(req, vsr_session_plan(req->sess), eff);
}
