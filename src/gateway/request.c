/*
 * request.c — one request's lifecycle, whatever its transport: opened on a
 * complete head (conn.c's parser callbacks for HTTP/1.x, h2.c for a stream),
 * its body taken, dispatched (the key check, vsr's own endpoints in local.c,
 * ingress hygiene, the routing session), answered (local replies here, a
 * routed answer in proxy.c) and finished: the access log, metrics and spans,
 * then its memory.  It writes only through vsr__conn_* and vsr__h2_*.
 *
 * The request's phase is one state (rq_state_t, request-int.h):
 *
 *   RECEIVING   the head is in; the body is being read
 *   ROUTING     dispatched: local endpoints, the key check, the routing
 *               session's header and body phases (which may wait on the
 *               ports: the worker serves others until port_resume)
 *   OFFLOOP     a management call or a routing preview runs off the request
 *               path (admin/'s thread, the runtime)
 *   UPSTREAM    a candidate's call is out and nothing reached the client:
 *               fallback may still send another
 *   RESPONDING  a response head is committed (sent, or held to go with the
 *               body); the body is relayed, translated or buffered
 *   RESP_EFFECT the upstream body ended; the session's last effect is awaited
 *               (STREAM, BUFFER: port_resume goes on)
 *   RESP_FINISH the client has the whole answer; the session's look at it
 *               (the response cache's copy) is awaited before the finish
 *   DONE        answered and handed to the transport (vsr__request_finish)
 *
 * Transitions (rq_moves; anything else is a bug, caught by VSR_ASSERT):
 *
 *   RECEIVING  -> ROUTING (dispatch) | DONE (rejected: a codec error, a
 *                 deadline, a body too large)
 *   ROUTING    -> OFFLOOP | UPSTREAM (proxy) | DONE (a local reply, the
 *                 routing core's own answer)
 *   OFFLOOP    -> DONE
 *   UPSTREAM   -> UPSTREAM (fallback's next candidate) | RESPONDING (the
 *                 head) | DONE (an error reply)
 *   RESPONDING -> UPSTREAM (a BUFFER answer's held head was never sent: the
 *                 upstream failed, fallback or an error reply follow)
 *                 | RESP_EFFECT | RESP_FINISH | DONE
 *   RESP_EFFECT, RESP_FINISH -> DONE
 *   DONE       -> nothing
 *
 * A request may also end in any state without reaching DONE, its client gone
 * (vsr__request_reset, a connection's close): the access log says DC.  What
 * is not the request's phase stays a flag of its own: keep_alive, is_head,
 * the response's framing (resp_chunked, resp_no_body), body_mode, observe,
 * unauth (the key check's verdict, answered at dispatch).
 */
#include "gateway/request-int.h"

#include <stdio.h>

/* The legal moves: rq_moves[from] has bit `to`. */
#define RQ_BIT(s) (1u << (s))
static const unsigned rq_moves[RQ_N_STATES] = {
    [RQ_RECEIVING] = RQ_BIT(RQ_ROUTING) | RQ_BIT(RQ_DONE),
    [RQ_ROUTING] = RQ_BIT(RQ_OFFLOOP) | RQ_BIT(RQ_UPSTREAM) | RQ_BIT(RQ_DONE),
    [RQ_OFFLOOP] = RQ_BIT(RQ_DONE),
    [RQ_UPSTREAM] = RQ_BIT(RQ_UPSTREAM) | RQ_BIT(RQ_RESPONDING) | RQ_BIT(RQ_DONE),
    [RQ_RESPONDING] = RQ_BIT(RQ_UPSTREAM) | RQ_BIT(RQ_RESP_EFFECT) | RQ_BIT(RQ_RESP_FINISH) | RQ_BIT(RQ_DONE),
    [RQ_RESP_EFFECT] = RQ_BIT(RQ_DONE),
    [RQ_RESP_FINISH] = RQ_BIT(RQ_DONE),
    [RQ_DONE] = 0,
};

int vsr__request_can_move(rq_state_t from, rq_state_t to)
{
    return (unsigned)from < RQ_N_STATES && (unsigned)to < RQ_N_STATES && (rq_moves[from] & RQ_BIT(to)) != 0;
}

void vsr__request_enter(request_t *req, rq_state_t to)
{
    VSR_ASSERT(vsr__request_can_move((rq_state_t)req->state, to));
    req->state = to;
}

/* A local reply on an HTTP/2 stream: the same fields, no framing ones.
 * extra_headers are this file's own "name: value\r\n" lines. */
static void reply_h2(request_t *req, int status, const char *ctype, vsr_slice_t body, const char *extra_headers,
                     int is_head, const char *replay_id)
{
    vsr_http_header_t f[8];
    size_t n = 0;
    char ver[24];
    f[n++] = (vsr_http_header_t){VSR_SLICE_LIT("content-type"), vsr_slice_cstr(ctype)};
    if (req->head)
        f[n++] = (vsr_http_header_t){VSR_SLICE_LIT("x-request-id"), vsr__request_id(req)};
    if (req->eng)
        f[n++] = (vsr_http_header_t){VSR_SLICE_LIT("x-vsr-config-version"),
                                     vsr_slice(ver, (size_t)snprintf(ver, sizeof(ver), "%llu",
                                                                     (unsigned long long)vsr_engine_version(req->eng)))};
    if (replay_id)
        f[n++] = (vsr_http_header_t){VSR_SLICE_LIT("x-vsr-replay-id"), vsr_slice_cstr(replay_id)};
    vsr_slice_t rest = extra_headers ? vsr_slice_cstr(extra_headers) : VSR_SLICE_NULL;
    while (rest.len > 2 && n < VSR_ARRAY_LEN(f)) {
        vsr_slice_t line = vsr_slice_split(rest, '\n', &rest);
        vsr_slice_t value;
        vsr_slice_t name = vsr_slice_split(line, ':', &value);
        value = vsr_slice_trim(value);
        if (value.len && value.p[value.len - 1] == '\r')
            value.len--;
        f[n++] = (vsr_http_header_t){name, value};
    }
    vsr__resp_head_t rh = {.status = status, .fields = f, .n_fields = n, .content_length = (int64_t)body.len};
    if (!is_head)
        req->bytes_sent += body.len;
    vsr__h2_respond(req->st, &rh, is_head ? NULL : body.p, is_head ? 0 : body.len, 0);
}

static void reply_on(conn_t *c, request_t *req, int status, const char *ctype, vsr_slice_t body,
                     const char *extra_headers, int is_head, int close)
{
    if (req) {
        req->resp_status = status;
        if (req->flags == NULL)
            req->flags = "LR"; /* a local reply */
    }
    /* a router_replay record of the request takes this answer, and names itself */
    const char *replay_id = req ? vsr_session_local_reply(req->sess, status, body) : NULL;
    if (req && req->st) {
        reply_h2(req, status, ctype, body, extra_headers, is_head, replay_id);
        return;
    }
    vsr_buf_t b;
    vsr_buf_init(&b, 0);
    vsr_http_write_status_line(&b, status, VSR_SLICE_NULL);
    vsr_buf_printf(&b, "content-type: %s\r\ncontent-length: %zu\r\n", ctype, body.len);
    if (req && req->eng) {
        vsr_buf_printf(&b, "x-vsr-config-version: %llu\r\n", (unsigned long long)vsr_engine_version(req->eng));
    } else { /* a codec error before any request: the version in force */
        vsr_engine_t *e = vsr__gateway_pin(vsr__conn_worker(c)->gw);
        vsr_buf_printf(&b, "x-vsr-config-version: %llu\r\n", (unsigned long long)vsr_engine_version(e));
        vsr_engine_unref(e);
    }
    if (req && req->head)
        vsr_http_write_header(&b, VSR_SLICE_LIT("x-request-id"), vsr__request_id(req));
    if (replay_id)
        vsr_http_write_header(&b, VSR_SLICE_LIT("x-vsr-replay-id"), vsr_slice_cstr(replay_id));
    if (extra_headers)
        vsr_buf_append_cstr(&b, extra_headers);
    if (close)
        vsr_buf_append_cstr(&b, "connection: close\r\n");
    vsr_http_write_end_head(&b);
    if (!is_head)
        vsr_buf_append_slice(&b, body);
    vsr__conn_send(c, &b);
    if (close)
        vsr__conn_close_after_write(c, 1);
}

void vsr__request_reply(request_t *req, int status, const char *ctype, vsr_slice_t body, const char *extra_headers,
                        int is_head, int close)
      {
    reply_on(req->c, req, status, ctype, body, extra_headers, is_head, close);
}

/* Anthropic's API: /v1/messages and every path under it (the query aside). */
static int messages_target(vsr_slice_t target)
{
    vsr_slice_t path = vsr_slice_split(target, '?', NULL);
    return vsr_slice_eq_cstr(path, "/v1/messages") || vsr_slice_starts_with(path, VSR_SLICE_LIT("/v1/messages/"));
}

/* An OpenAI-style error: {"error":{"message":M,"type":T,"code":C}} where C
 * is the string `code` when given, else null (OpenAI's convention: a code is
 * a string or null, never a number); Anthropic's shape on /v1/messages paths,
 * before routing has looked at the request too (`messages`). */
static void reply_error_as(conn_t *c, request_t *req, int messages, int status, const char *type, const char *code,
                           vsr_slice_t msg, const char *extra_headers, int is_head, int close)
{
    vsr_buf_t b;
    vsr_buf_init(&b, 0);
    if ((req == NULL || req->sess == NULL) && messages)
        vsr_anthropic_error_body(&b, vsr_anthropic_error_type(status), msg);
    else
        vsr_session_error_body(req ? req->sess : NULL, status, type, code, msg, &b); /* Anthropic's for /v1/messages */
    reply_on(c, req, status, "application/json", vsr_buf_slice(&b), extra_headers, is_head, close);
    vsr_buf_free(&b);
}

static void reply_error_on(conn_t *c, request_t *req, int status, const char *type, const char *code, vsr_slice_t msg,
                           const char *extra_headers, int is_head, int close)
{
    reply_error_as(c, req, req && req->head && messages_target(req->head->target), status, type, code, msg,
                   extra_headers, is_head, close);
}

void vsr__request_reply_error(request_t *req, int status, const char *type, const char *code, vsr_slice_t msg,
                              const char *extra_headers, int is_head, int close)
      {
    reply_error_on(req->c, req, status, type, code, msg, extra_headers, is_head, close);
}

void vsr__request_error(request_t *req, int status, const char *msg)
{
    vsr__request_reply_error(req, status, "invalid_request_error", NULL, vsr_slice_cstr(msg),
                             "x-vsr-response-path: error\r\n", req->is_head, !req->keep_alive);
    vsr__request_finish(req);
}

/* ---- request lifecycle ---- */

static request_t *request_new(conn_t *c)
{
    _Static_assert(sizeof(request_t) <= VSR_BLOCK_MAX, "a request is one block");
    request_t *req = vsr_block_calloc(sizeof(*req));
    req->c = c;
    req->w = vsr__conn_worker(c);
    req->l = vsr__conn_listener(c);
    req->start_wall = vsr_wall_time();
    req->start_us = vsr_now_us();
    req->eng = vsr__gateway_pin(req->w->gw);
    if (!req->l->metrics) /* scrapes are not requests: they would count themselves */
        vsr_metrics_active_requests(req->w->metrics, 1);
    vsr_pool_init(&req->pool);
    vsr_buf_init(&req->body, req->l->conf->max_body_bytes);
    return req;
}

static vsr_slice_t header_value(const request_t *req, const char *name)
{
    vsr_slice_t v = VSR_SLICE_NULL;
    if (req->head)
        vsr_http_head_get(req->head, name, &v);
    return v;
}

/* The request's id: the client's x-request-id when it sent one, else a
 * UUIDv4 made once (the one the backend gets, the log's and the client's). */
vsr_slice_t vsr__request_id(request_t *req)
{
    if (req->request_id.len == 0) {
        req->request_id = header_value(req, "x-request-id");
        if (req->request_id.len == 0) {
            char *id = vsr_pool_alloc(&req->pool, 37);
            vsr_uuid4(id);
            req->request_id = vsr_slice(id, 36);
            req->id_made = 1; /* the one the backend gets too */
        }
    }
    return req->request_id;
}

/* The models a call went to, in order (the session's list without a first
 * choice skipped for its open circuit). */
const vsr_model_conf_t *const *vsr__request_models_called(const request_t *req, size_t *n)
{
    size_t n_tried = 0;
    const vsr_model_conf_t *const *tried = req->sess ? vsr_session_tried(req->sess, &n_tried) : NULL;
    if (tried && req->first_skipped && n_tried > 0) {
        tried++;
        n_tried--;
    }
    *n = n_tried;
    return tried;
}

/* Attempts made by model m (those past the report's array are the latest
 * ones: they count for the last model called). */
unsigned vsr__request_attempts_of(const request_t *req, const vsr_model_conf_t *m)
{
    const vsr_upstream_report_t *rep = &req->report;
    unsigned kept = VSR_MIN(rep->n_attempts, VSR_UPSTREAM_MAX_ATTEMPTS), n = 0;
    for (unsigned i = 0; i < kept; i++)
        n += rep->attempts[i].model == m;
    if (rep->n_attempts > kept && kept && rep->attempts[kept - 1].model == m)
        n += rep->n_attempts - kept;
    return n;
}

/* The live statistics of the model the request went to last: out of
 * flight, and what its call took.  TTFT is the time to its response head
 * (an event stream's head comes with its first event); TPOT, of a stream,
 * the time after it over the completion tokens (usage, else the events
 * relayed) less one; cost from the model's pricing and the usage. */
static void account_model_stats(request_t *req)
{
    const vsr_model_conf_t *m = req->ms_model;
    if (m == NULL)
        return;
    vsr_model_stats_t *ms = req->w->gw->model_stats;
    vsr_slice_t name = vsr_slice_cstr(m->name);
    vsr_model_stats_inflight(ms, req->w->id, name, -1);
    uint64_t now = vsr_now_us();
    vsr_model_obs_t o = {.ttft_ms = -1, .tpot_ms = -1, .latency_ms = (double)(now - req->ms_sent_us) / 1000.0};
    int answered = req->served == m && req->ms_head_us != 0;
    o.error = !answered || req->resp_status >= 500 || req->resp_status == 429;
    if (answered)
        o.ttft_ms = (double)(req->ms_head_us - req->ms_sent_us) / 1000.0;
    if (answered && req->usage) {
        uint64_t tokens = req->usage->has_usage ? req->usage->completion_tokens : req->usage->parser.events;
        if (tokens > 1 && req->state == RQ_DONE)
            o.tpot_ms = (double)(now - req->ms_head_us) / 1000.0 / (double)(tokens - 1);
        if (req->usage->has_usage) {
            o.prompt_tokens = req->usage->prompt_tokens;
            o.completion_tokens = req->usage->completion_tokens;
            o.cost = ((double)o.prompt_tokens * m->prompt_per_1m + (double)o.completion_tokens * m->completion_per_1m) /
                     1e6;
        }
    }
    vsr_model_stats_observe(ms, req->w->id, name, &o);
    req->ms_model = NULL;
}

/* The request is over, one way or another: one access-log line, metrics. */
static void request_account(request_t *req)
{
    worker_t *w = req->w;
    const vsr_evidence_t *ev = req->sess ? vsr_session_evidence(req->sess) : NULL;
    double total = (double)(vsr_now_us() - req->start_us) / 1e6;
    if (req->state != RQ_DONE && req->flags == NULL)
        req->flags = "DC"; /* the client went away first */
    vsr_slice_t model = vsr__slice_or_empty(ev ? ev->selected_model : NULL);
    vsr_slice_t decision = vsr__slice_or_empty(ev ? ev->decision : NULL);
    const vsr_upstream_report_t *rep = &req->report;
    unsigned kept = VSR_MIN(rep->n_attempts, VSR_UPSTREAM_MAX_ATTEMPTS);
    double upstream = 0;
    unsigned retries_kept = 0;
    for (unsigned i = 0; i < kept; i++) {
        const vsr_upstream_attempt_t *a = &rep->attempts[i];
        static const char *err_outcome[] = {"ok", "connect_failure", "reset", "protocol", "timeout", "timeout",
                                            "reset", "overflow"};
        const char *outcome = a->error ? err_outcome[a->error] : a->status >= 500 ? "5xx" : a->status >= 400 ? "4xx" : "ok";
        vsr_slice_t am = a->model ? vsr_slice_cstr(a->model->name) : model; /* the model it was sent to */
        vsr_metrics_attempt(w->metrics, am, outcome);
        if (a->retry && retries_kept < rep->retries) {
            vsr_metrics_retry(w->metrics, am);
            retries_kept++;
        }
        upstream += (double)a->duration_ms / 1000.0;
    }
    for (unsigned i = retries_kept; i < rep->retries; i++) /* past the array: the latest model's */
        vsr_metrics_retry(w->metrics, kept && rep->attempts[kept - 1].model
                                          ? vsr_slice_cstr(rep->attempts[kept - 1].model->name)
                                          : model);
    if (req->usage && req->usage->has_usage)
        vsr_metrics_tokens(w->metrics, model, req->usage->prompt_tokens, req->usage->completion_tokens);
    account_model_stats(req);
    if (req->rl_counted) { /* a streamed answer's usage, else a whole JSON answer's */
        uint64_t pt = 0, ct = 0;
        int has = req->usage && req->usage->has_usage;
        if (has) {
            pt = req->usage->prompt_tokens;
            ct = req->usage->completion_tokens;
        } else if (req->rl_body.len) {
            has = vsr__usage_of_json(req->rl_body.data, req->rl_body.len, &pt, &ct);
        }
        if (has)
            vsr__ratelimit_charge(w->gw->ratelimit, vsr_engine_config(req->eng), &req->rl_subject,
                                  (uint64_t)vsr_wall_time(), pt + ct);
    }
    if (ev && ev->looper) /* a request graph's calls (its streamed final hop is an attempt above) */
        for (size_t i = 0; i < ev->looper->n_records; i++) {
            const vsr_graph_call_record_t *rec = &ev->looper->records[i];
            vsr_metrics_looper_call(w->metrics, ev->looper->algorithm, rec->node, vsr_slice_cstr(rec->model),
                                    rec->status == VSR_OK, (double)rec->ms / 1000.0);
        }
    if (ev && ev->tools_selection)
        vsr_metrics_tool_selection(w->metrics, ev->tools_selection == 1 ? "semantic" : "unavailable");
    if (ev && ev->memory)
        vsr_metrics_memory(w->metrics, "request", ev->memory);
    if (ev && ev->rag)
        vsr_metrics_rag(w->metrics, ev->rag_backend ? ev->rag_backend : "none", ev->rag);
    /* -1: not observed (no routing, no upstream attempt) — not a zero-length one */
    if (!req->l->metrics) {
        vsr_metrics_request(w->metrics, req->resp_status, model, decision, total,
                            ev && ev->routing_us ? (double)ev->routing_us / 1e6 : -1, kept ? upstream : -1);
        for (size_t i = 0; ev && i < ev->n_family_times; i++)
            vsr_metrics_signal_family(w->metrics, vsr_slice_cstr(ev->family_times[i].family),
                                      (double)ev->family_times[i].us / 1e6);
        vsr_metrics_active_requests(w->metrics, -1);
        if (ev && ev->response_guard)
            vsr_metrics_response_guard(w->metrics, ev->response_guard);
        if (ev && ev->hallucination)
            vsr_metrics_hallucination(w->metrics, ev->hallucination);
        if (ev) {
            vsr_metrics_remote_classifier(w->metrics, "ok", ev->remote_ok);
            vsr_metrics_remote_classifier(w->metrics, "failed", ev->remote_failed);
            vsr_metrics_remote_classifier(w->metrics, "invalid", ev->remote_invalid);
        }
    }
    if (req->trace.on) {
        req_trace_end_t te = {req->start_wall, req->start_us, req->head ? req->head->method : VSR_SLICE_NULL,
                              req->head ? req->head->target : VSR_SLICE_NULL, req->resp_status, req->flags,
                              header_value(req, "x-request-id"), ev, vsr_engine_version(req->eng), rep};
        vsr__trace_end(&req->trace, w->gw->opts.tracer, &te);
    }

    vsr_access_log_t *log = w->gw->opts.access_log;
    if (log == NULL || req->head == NULL)
        return;
    char fallback[512] = "";
    const char *fam_names[VSR_EVIDENCE_MAX_FAMILIES];
    uint64_t fam_us[VSR_EVIDENCE_MAX_FAMILIES];
    size_t n_fam = ev ? VSR_MIN(ev->n_family_times, (size_t)VSR_EVIDENCE_MAX_FAMILIES) : 0;
    for (size_t i = 0; i < n_fam; i++) {
        fam_names[i] = ev->family_times[i].family;
        fam_us[i] = ev->family_times[i].us;
    }
    size_t n_called = 0, n_tried = 0;
    const vsr_model_conf_t *const *called = vsr__request_models_called(req, &n_called);
    const vsr_model_conf_t *const *tried = req->sess ? vsr_session_tried(req->sess, &n_tried) : NULL;
    for (size_t i = 0, off = 0; n_called > 1 && i < n_called && off < sizeof(fallback) - 1; i++)
        off += (size_t)snprintf(fallback + off, sizeof(fallback) - off, "%s%s", i ? "," : "", called[i]->name);
    vsr_access_entry_t e = {
        .start_time = req->start_wall,
        .method = req->head->method,
        .path = req->head->target,
        .protocol = req->st ? VSR_SLICE_LIT("HTTP/2") : req->head->version_minor ? VSR_SLICE_LIT("HTTP/1.1") : VSR_SLICE_LIT("HTTP/1.0"),
        .status = req->resp_status,
        .response_flags = vsr_slice_cstr(req->flags ? req->flags : "-"),
        .bytes_received = req->body.len,
        .bytes_sent = req->bytes_sent,
        .duration_ms = (vsr_now_us() - req->start_us) / 1000,
        .upstream_host = kept ? vsr_slice_cstr(rep->attempts[kept - 1].backend->authority) : VSR_SLICE_NULL,
        .request_id = vsr__request_id(req),
        .user_agent = header_value(req, "user-agent"),
        .recipe = vsr__slice_or_empty(ev ? ev->recipe : NULL),
        .decision = decision,
        .selected_model = n_tried ? vsr_slice_cstr(tried[0]->name) : model, /* the routing's choice */
        .served_model = req->served ? vsr_slice_cstr(req->served->name) : VSR_SLICE_NULL,
        .fallback_path = vsr_slice_cstr(fallback),
        .attempts = rep->n_attempts,
        .config_version = vsr_engine_version(req->eng),
        .routing_ms = ev ? (double)ev->routing_us / 1000.0 : 0,
        .family_names = fam_names,
        .family_us = fam_us,
        .n_families = n_fam,
        .streamed = req->usage != NULL,
        .stream_events = req->usage ? req->usage->parser.events : 0,
        .has_usage = req->usage && req->usage->has_usage,
        .prompt_tokens = req->usage ? req->usage->prompt_tokens : 0,
        .completion_tokens = req->usage ? req->usage->completion_tokens : 0,
    };
    if (ev && ev->cache_hit >= 0)
        e.cache = ev->cache_hit ? VSR_SLICE_LIT("hit") : VSR_SLICE_LIT("miss");
    if (ev && ev->response_guard)
        e.response_guard = vsr_slice_cstr(ev->response_guard);
    if (req->sess) {
        int client_a = vsr_session_client_anthropic(req->sess);
        int up_a = req->served && req->served->messages_api;
        if (client_a != up_a && req->served) {
            e.client_protocol = client_a ? VSR_SLICE_LIT("anthropic") : VSR_SLICE_LIT("openai");
            e.upstream_protocol = up_a ? VSR_SLICE_LIT("anthropic") : VSR_SLICE_LIT("openai");
        }
    }
    if (ev && ev->looper) {
        e.looper_algorithm = ev->looper->algorithm;
        e.looper_calls = ev->looper->iterations;
        e.looper_models = vsr_slice_cstr(ev->looper->models_used);
        e.looper_prompt_tokens = ev->looper->prompt_tokens;
        e.looper_completion_tokens = ev->looper->completion_tokens;
    }
    vsr_access_log_write(log, &e);
}

void vsr__request_free(request_t *req)
{
    if (req->admin_job)
        vsr__local_abandon(req->admin_job); /* its answer has nobody to go to */
    request_account(req);
    vsr__usage_free(req->usage);
    vsr__usage_free(req->usage_up);
    vsr_buf_free(&req->rl_body);
    if (req->call)
        vsr_upstream_call_cancel(req->call);
    vsr_preview_cancel(req->preview); /* the client is gone: so is the runtime call it waits on */
    vsr_buf_free(&req->preview_out);
    if (req->has_json)
        vsr_json_free(&req->json);
    vsr_session_finish(req->sess); /* ... and the session's, likewise */
    vsr_engine_unref(req->eng); /* the version may drain now */
    vsr_buf_free(&req->body);
    vsr_pool_free(&req->pool);
    vsr_block_free(req);
}

/* The response has been handed to the socket: the next request may start. */
void vsr__request_finish(request_t *req)
{
    vsr__request_enter(req, RQ_DONE);
    if (req->st) {
        /* an HTTP/2 stream: the connection goes on with its other streams */
        vsr__h2_detach(req->st);
        vsr__gateway_drain_poke(req->w);
        vsr__request_free(req);
        return;
    }
    vsr__conn_request_done(req->c, req, req->keep_alive); /* frees the request, takes the next */
}

/* What bounds a request's waits: its start plus the listener's timeout. */
uint64_t vsr__request_deadline(const request_t *req)
{
    return req->start_us / 1000 + req->l->conf->timeout_ms;
}

/* The request-target as routing and the backend see it, normalised once
 * (vsr_http_normalize_target); an absolute-form authority replaces Host.
 * 0 when it cannot be normalised safely: answered 400.  An encoded '/' is
 * refused but in `/v1/models/{id}` (the OpenAI SDK encodes "org/model"),
 * which vsr answers itself. */
static int normalize_target(request_t *req)
{
    vsr_http_head_t *h = req->head;
    char *out = vsr_pool_alloc(&req->pool, h->target.len + 1);
    size_t len = 0;
    vsr_slice_t auth;
    const char *why = NULL;
    int rc = vsr_http_normalize_target(h->target, out, h->target.len + 1, &len, &auth, &why);
    /* an encoded separator only where vsr answers itself and forwards nothing: a model id */
    if (rc == VSR_DECLINED && vsr_slice_starts_with(vsr_slice(out, len), VSR_SLICE_LIT("/v1/models/")) &&
        memchr(out + 11, '/', len - 11) == NULL)
        rc = VSR_OK;
    if (rc != VSR_OK) {
        char msg[96];
        snprintf(msg, sizeof(msg), "invalid request path: %s", why ? why : "malformed");
        vsr__request_error(req, 400, msg);
        return 0;
    }
    h->target = vsr_slice(out, len);
    if (auth.p) {
        size_t i = 0;
        while (i < h->num_headers && !vsr_slice_case_eq_cstr(h->headers[i].name, "host"))
            i++;
        if (i == h->num_headers && i < VSR_HTTP_MAX_HEADERS)
            h->headers[h->num_headers++].name = VSR_SLICE_LIT("host");
        if (i < h->num_headers)
            h->headers[i].value = auth;
    }
    return 1;
}

/* The listener settings that change live (api_keys, models): the request's version has them. */
static const vsr_listener_conf_t *live_listener(const request_t *req)
{
    const listener_t *l = req->l;
    const vsr_config_t *cfg = vsr_engine_config(req->eng);
    return l->index >= 0 && (size_t)l->index < cfg->n_listeners ? &cfg->listeners[l->index] : l->conf;
}

static int is_probe(const vsr_http_head_t *h)
{
    vsr_slice_t path = vsr_slice_split(h->target, '?', NULL);
    while (path.len > 1 && path.p[path.len - 1] == '/')
        path.len--;
    return (vsr_slice_eq_cstr(path, "/health") || vsr_slice_eq_cstr(path, "/ready")) &&
           (vsr_slice_eq_cstr(h->method, "GET") || vsr_slice_eq_cstr(h->method, "HEAD"));
}

/* The key check on the head alone, for a request with a body still to come:
 * a client without the key never makes vsr read (or buffer) its body.
 * VSR__AUTH_OK when the body may be read. */
static int early_auth(const request_t *req)
{
    const listener_t *l = req->l;
    if (l->management || l->metrics || is_probe(req->head))
        return VSR__AUTH_OK;
    return vsr__ingress_auth(live_listener(req), req->w->gw->keystore, req->head, NULL);
}

/* 401: a missing or wrong key, or several different ones (`auth` says which). */
static void reply_unauthorized(request_t *req, int auth, int close)
{
    vsr_metrics_edge_refusal(req->w->metrics, auth == VSR__AUTH_CONFLICT ? "conflicting_api_keys" : "invalid_api_key");
    int conflict = auth == VSR__AUTH_CONFLICT;
    if (messages_target(req->head->target)) {
        /* an Anthropic client reads Anthropic's error shape */
        vsr__request_reply(
            req, 401, "application/json",
            conflict ? VSR_SLICE_LIT("{\"type\":\"error\",\"error\":{\"type\":\"authentication_error\",\"message\":"
                                     "\"Unauthorized: the request carries more than one API key\"}}")
                     : VSR_SLICE_LIT("{\"type\":\"error\",\"error\":{\"type\":\"authentication_error\",\"message\":"
                                     "\"Unauthorized: missing or invalid API key\"}}"),
            "www-authenticate: Bearer realm=\"vllm-semantic-router\"\r\n", req->is_head, close);
        vsr__request_finish(req);
        return;
    }
    vsr__request_reply(
        req, 401, "application/json",
        conflict ? VSR_SLICE_LIT("{\"error\":{\"message\":\"Unauthorized: the request carries more than one API key\","
                                 "\"type\":\"authentication_error\",\"code\":\"invalid_api_key\"}}")
                 : VSR_SLICE_LIT("{\"error\":{\"message\":\"Unauthorized: missing or invalid API key\","
                                 "\"type\":\"authentication_error\",\"code\":\"invalid_api_key\"}}"),
        "www-authenticate: Bearer realm=\"vllm-semantic-router\"\r\n", req->is_head, close);
    vsr__request_finish(req);
}

static void dispatch(request_t *req)
{
    conn_t *c = req->c;
    const vsr_http_head_t *h = req->head;
    if (req->unauth) {
        /* refused on its head: the body was never read; over HTTP/1.1 the
         * connection closes (lingering, so the client reads the 401) */
        req->keep_alive = 0;
        reply_unauthorized(req, req->unauth, 1);
        return;
    }
    if (!req->st && h->upgrade && vsr__conn_upgrade_h2c(c, req, h, req->is_head))
        return; /* answered as stream 1 of the new HTTP/2 session */
    if (req->w->draining)
        req->keep_alive = 0; /* while draining, every reply closes its connection */
    if (!normalize_target(req))
        return;
    vsr_slice_t path = vsr_slice_split(h->target, '?', NULL);
    while (path.len > 1 && path.p[path.len - 1] == '/')
        path.len--;
    if (vsr__local_serve(req, path))
        return; /* an endpoint vsr answers itself */
    /* api_keys and models change live: the request's version has them */
    const vsr_config_t *cfg = vsr_engine_config(req->eng);
    const vsr_listener_conf_t *lc = live_listener(req);
    vsr_slice_t key;
    int auth = vsr__ingress_auth(lc, req->w->gw->keystore, h, &key);
    if (auth != VSR__AUTH_OK) {
        reply_unauthorized(req, auth, !req->keep_alive);
        return;
    }
    /* what this client stores is its key's, and only its key's (only the
     * Responses API stores: other requests skip the digest) */
    char *owner = vsr_pool_alloc(&req->pool, VSR_SESSION_MAX_OWNER + 1);
    vsr__ingress_owner(vsr_slice_starts_with(path, VSR_SLICE_LIT("/v1/responses")) ? key : VSR_SLICE_NULL, owner);

    /* a key with identity names the user and groups: the client's own identity fields never count then */
    const vsr_api_key_conf_t *ke = vsr__ingress_key_entry(lc, key);
    const char *key_user = ke ? ke->user : NULL, *key_groups = ke ? ke->groups : NULL;
    if (ke == NULL && vsr__ingress_has_keys(lc)) /* a stored key's, copied: it may be revoked meanwhile */
        vsr__keystore_match(req->w->gw->keystore, key, &req->pool, &key_user, &key_groups);
    int key_identity = key_user || key_groups;
    int identity_trusted = !key_identity && vsr__conn_identity_trusted(c);

    /* ingress hygiene: what a client may not send never reaches routing or a backend */
    req->hdrs = vsr_pool_alloc(&req->pool, sizeof(vsr_header_t) * (h->num_headers + 3));
    for (size_t i = 0; i < h->num_headers; i++) {
        if (vsr__ingress_drop(lc, cfg, identity_trusted, h->headers[i].name))
            continue;
        req->hdrs[req->n_hdrs].name = h->headers[i].name;
        req->hdrs[req->n_hdrs].value = h->headers[i].value;
        req->n_hdrs++;
    }
    if (key_identity) {
        if (key_user)
            req->hdrs[req->n_hdrs++] = (vsr_header_t){
                vsr_slice_cstr(cfg->authz_user_id_header ? cfg->authz_user_id_header : "x-authz-user-id"),
                vsr_slice_cstr(key_user)};
        if (key_groups)
            req->hdrs[req->n_hdrs++] = (vsr_header_t){
                vsr_slice_cstr(cfg->authz_user_groups_header ? cfg->authz_user_groups_header : "x-authz-user-groups"),
                vsr_slice_cstr(key_groups)};
        identity_trusted = 1; /* vsr set these fields itself */
    }
    vsr__trace_begin(&req->trace, req->w->gw->opts.tracer, h);
    vsr_session_opts_t opts = {.listener = lc, .identity_trusted = identity_trusted, .api_key = key,
                               .ports = &vsr__gateway_ports, .ports_ud = req, .deadline_ms = vsr__request_deadline(req),
                               .request_id = vsr__request_id(req), .owner = vsr_slice_cstr(owner)};
    req->sess = vsr_session_open(req->eng, &opts);
    const vsr_effect_t *eff = vsr_session_request_headers(req->sess, h->method, h->target, req->hdrs, req->n_hdrs);
    if (eff->status) {
        vsr__proxy_reply_effect(req, eff);
        return;
    }
    eff = vsr_session_request_body(req->sess, req->body.data, req->body.len);
    if (!eff->pending)
        vsr__proxy_routed(req, eff); /* else the worker serves others until port_resume */
}


request_t *vsr__request_open(conn_t *c, h2_stream_t *st, vsr_http_head_t *head)
{
    request_t *req = request_new(c);
    req->st = st;
    req->head = head;
    req->keep_alive = st ? 1 : head->keep_alive; /* a stream's connection is HTTP/2's to keep */
    req->is_head = vsr_slice_eq_cstr(head->method, "HEAD");
    return req;
}

int vsr__request_body(request_t *req, const char *p, size_t n)
{
    return vsr_buf_append(&req->body, p, n) == VSR_OK ? VSR_OK : VSR_ERR_TOO_BIG;
}

void vsr__request_dispatch(request_t *req)
{
    vsr__request_enter(req, RQ_ROUTING);
    dispatch(req);
}

int vsr__request_check_key(request_t *req)
{
    int auth = early_auth(req);
    req->unauth = (unsigned)auth;
    return auth == VSR__AUTH_OK;
}

void vsr__request_reserve(request_t *req, size_t n)
{
    vsr_buf_reserve(&req->body, n);
}

void vsr__request_upgraded(request_t *req, h2_stream_t *st)
{
    req->st = st;
    req->bytes_sent = 0;
    req->keep_alive = 1;
    dispatch(req); /* routing already: the upgrade came from dispatch */
}

void vsr__request_abort(request_t *req, int status)
{
    req->resp_status = status;
    req->flags = "LR";
    vsr__request_enter(req, RQ_DONE);
    vsr__request_free(req);
}

void vsr__request_codec_error(conn_t *c, int status, const char *code, vsr_slice_t msg, vsr_slice_t target)
{
    reply_error_as(c, NULL, target.p && messages_target(target), status, "invalid_request_error", code, msg, NULL, 0,
                   1);
}

int vsr__request_peer_left(request_t *req)
{
    if (req->state != RQ_RESP_FINISH)
        return 0;
    req->keep_alive = 0;
    return 1;
}


/* The key check on the head of a request whose body is still to come: 1 when
 * the body may be read (room for a declared length is made); 0 when it must
 * not (dispatch then answers 401 at once). */
static int early_auth_reserve(request_t *req)
{
    if (!vsr__request_check_key(req))
        return 0;
    const vsr_http_head_t *head = req->head;
    if (head->content_length > 0 && (uint64_t)head->content_length <= req->l->conf->max_body_bytes)
        vsr_buf_reserve(&req->body, (size_t)head->content_length); /* only for a client with the key */
    return 1;
}

int vsr__request_admit(request_t *req, int transport_status, int has_body)
{
    const vsr_http_head_t *h = req->head;
    if (h->target.len == 0)
        return 400; /* CONNECT (no :path): vsr is no tunnel */
    if (transport_status)
        return transport_status;
    if (h->content_length > 0 && (uint64_t)h->content_length > req->l->conf->max_body_bytes)
        return 413;
    if (has_body && !early_auth_reserve(req))
        return 401; /* no key: the body is never read */
    return 0;
}

void vsr__request_refuse(request_t *req, int status)
{
    if (status == 401)
        vsr__request_dispatch(req); /* the key check's 401, in the shape of the request's API */
    else
        vsr__request_reject(req, status);
}

int vsr__request_body_whole(const request_t *req)
{
    return req->head->content_length < 0 || req->body.len == (uint64_t)req->head->content_length;
}

void vsr__request_reject(request_t *req, int status)
{
    if (status == 413) {
        vsr__request_reply_error(req, 413, "invalid_request_error", "request_too_large",
                                 VSR_SLICE_LIT("The request body is too large."), NULL, req->is_head, 0);
    } else {
        vsr__request_reply_error(req, status, "invalid_request_error", NULL,
                                 status == 431 ? VSR_SLICE_LIT("request header fields too large")
                                               : VSR_SLICE_LIT("malformed HTTP request"),
                                 NULL, req->is_head, 0);
    }
    vsr__request_finish(req);
}

void vsr__request_reset(request_t *req)
{
    vsr__request_free(req); /* not finished: the access log says DC */
}

void vsr__request_resume(request_t *req)
{
    if (req->call)
        vsr_upstream_call_resume(req->call);
}

int vsr__request_in_call(const request_t *req)
{
    return req->call != NULL;
}

int vsr__request_pause(request_t *req)
{
    if (req->call == NULL)
        return 0;
    vsr_upstream_call_pause(req->call);
    return 1;
}

void vsr__request_sent(request_t *req, uint64_t n)
{
    req->bytes_sent += n;
}
