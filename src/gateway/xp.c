/*
 * xp.c — the ext_proc listener's calls: an HTTP/2 stream whose request is
 * gRPC's POST /envoy.service.ext_proc.v3.ExternalProcessor/Process becomes
 * one stream of the handler the composition root lends
 * (vsr_gateway_opts_t.extproc: extproc/'s Process stream) with this
 * worker's ports (the runtime, the upstream layer for graph hops, the
 * response cache).  Its
 * answers are the stream's DATA (after a 200 with content-type
 * application/grpc), and its end the grpc-status trailers.  Anything else
 * on the listener gets gRPC's UNIMPLEMENTED.
 */
#include "gateway/gateway-int.h"

#include <stdio.h>

#define XP_PATH "/envoy.service.ext_proc.v3.ExternalProcessor/Process"

struct xp_call_s {
    conn_t *c;
    worker_t *w;
    h2_stream_t *st;
    vsr_engine_t *eng;
    void *xs;                  /* the handler's stream (gw->opts.extproc) */
    int responded, finished;
    uint64_t timeout_ms;       /* the listener's: the session's budget and the longest silence */
    uint64_t active_ms;        /* the last message byte in either direction */
    uint64_t hard_ms;          /* Envoy's grpc-timeout, as a clock time; 0 when it set none */
    double start_wall;
    uint64_t start_us;
    char id[40];               /* for the model-call port: this call's id */
};

/* ---- the h2 stream side ---- */

static void respond_once(xp_call_t *x)
{
    if (x->responded)
        return;
    x->responded = 1;
    vsr_http_header_t f[] = {{VSR_SLICE_LIT("content-type"), VSR_SLICE_LIT("application/grpc")}};
    vsr__resp_head_t rh = {.status = 200, .fields = f, .n_fields = 1, .content_length = -1};
    vsr__h2_respond(x->st, &rh, NULL, 0, 1);
}

static void end_rpc(xp_call_t *x, int grpc_status, const char *message)
{
    if (x->finished || x->st == NULL)
        return;
    x->finished = 1;
    respond_once(x);
    char code[16];
    snprintf(code, sizeof(code), "%d", grpc_status);
    vsr_buf_t msg;
    vsr_buf_init(&msg, 0);
    vsr_http_header_t t[2] = {{VSR_SLICE_LIT("grpc-status"), vsr_slice_cstr(code)}};
    size_t n = 1;
    if (grpc_status != 0 && message && message[0]) {
        vsr_grpc_message_encode(&msg, vsr_slice_cstr(message));
        t[n++] = (vsr_http_header_t){VSR_SLICE_LIT("grpc-message"), vsr_buf_slice(&msg)};
    }
    vsr__h2_trailers(x->st, t, n);
    vsr_buf_free(&msg);
}

static void io_send(void *ud, const char *p, size_t n)
{
    xp_call_t *x = ud;
    if (x->st == NULL || x->finished)
        return;
    x->active_ms = vsr_now_ms();
    respond_once(x);
    vsr__h2_body(x->st, p, n);
}

static void io_finish(void *ud, int grpc_status, const char *message)
{
    end_rpc(ud, grpc_status, message);
}

/* ---- the ports: this worker's ---- */

static void *p_runtime_call(void *ud, const vsr_runtime_bundle_t *b, uint64_t deadline_ms, vsr_runtime_done_fn done,
                            void *done_ud)
{
    xp_call_t *x = ud;
    return vsr__gateway_runtime_call(x->w, b, deadline_ms, done, done_ud);
}

static void p_runtime_cancel(void *ud, void *h)
{
    xp_call_t *x = ud;
    vsr__gateway_runtime_cancel(x->w, h);
}

static void *p_model_call(void *ud, const vsr_graph_call_t *call, uint64_t deadline_ms, vsr_graph_call_done_fn done,
                          void *done_ud)
{
    xp_call_t *x = ud;
    return vsr__gateway_model_call(x->w, x->timeout_ms, vsr_slice_cstr(x->id), call, deadline_ms, done, done_ud);
}

static void p_model_cancel(void *ud, void *h)
{
    VSR_UNUSED(ud);
    vsr__gateway_model_cancel(h);
}

static void *p_cache_lookup(void *ud, const vsr_cache_query_t *q, vsr_cache_done_fn done, void *done_ud)
{
    xp_call_t *x = ud;
    return vsr__gateway_cache_lookup(x->w, vsr_engine_config(x->eng), q, done, done_ud);
}

static void p_cache_cancel(void *ud, void *h)
{
    xp_call_t *x = ud;
    vsr__gateway_cache_cancel(x->w, h);
}

static void p_cache_store(void *ud, const vsr_cache_query_t *q, vsr_slice_t v)
{
    xp_call_t *x = ud;
    vsr__gateway_cache_store(x->w, vsr_engine_config(x->eng), q, v);
}

static void p_cache_delete(void *ud, const vsr_cache_query_t *q)
{
    xp_call_t *x = ud;
    vsr__gateway_cache_delete(x->w, vsr_engine_config(x->eng), q);
}

static void p_resume(void *ud, vsr_session_t *s, const vsr_effect_t *eff)
{
    VSR_UNUSED(ud);
    VSR_UNUSED(s);
    VSR_UNUSED(eff); /* the xp stream takes the session's resume itself */
}

static const vsr_ports_t xp_ports = {
    .runtime_call = p_runtime_call,
    .runtime_cancel = p_runtime_cancel,
    .model_call = p_model_call,
    .model_cancel = p_model_cancel,
    .cache_lookup = p_cache_lookup,
    .cache_cancel = p_cache_cancel,
    .cache_store = p_cache_store,
    .cache_delete = p_cache_delete,
    .resume = p_resume,
};

/* ---- the call ---- */

xp_call_t *vsr__xp_call_open(conn_t *c, worker_t *w, const vsr_listener_conf_t *lc, h2_stream_t *st,
                             const vsr_http_head_t *head)
{
    xp_call_t *x = vsr_calloc(1, sizeof(*x));
    x->c = c;
    x->w = w;
    x->st = st;
    x->timeout_ms = lc->timeout_ms;
    static atomic_uint_fast64_t seq;
    snprintf(x->id, sizeof(x->id), "xp-%u-%llu", w->id, (unsigned long long)atomic_fetch_add(&seq, 1) + 1);
    vsr_slice_t ct;
    int grpc = vsr_slice_eq_cstr(head->method, "POST") && vsr_slice_eq_cstr(head->target, XP_PATH) &&
               vsr_http_head_get(head, "content-type", &ct) &&
               vsr_slice_starts_with(ct, VSR_SLICE_LIT("application/grpc"));
    if (!grpc) {
        end_rpc(x, VSR_GRPC_UNIMPLEMENTED, "vsr serves envoy.service.ext_proc.v3.ExternalProcessor/Process only");
        return x;
    }
    vsr_slice_t enc;
    if (vsr_http_head_get(head, "grpc-encoding", &enc) && !vsr_slice_eq_cstr(enc, "identity")) {
        end_rpc(x, VSR_GRPC_UNIMPLEMENTED, "no grpc-encoding but identity");
        return x;
    }
    x->eng = vsr__gateway_pin(w->gw);
    x->start_wall = vsr_wall_time();
    x->start_us = vsr_now_us();
    vsr_metrics_active_requests(w->metrics, 1);
    vsr_session_opts_t so = {0};
    so.ports = &xp_ports;
    so.ports_ud = x;
    /* Envoy's identity fields (x-authz-user-id, set by its authorization
     * filter) count as the listener's identity settings say for this peer */
    so.identity_trusted = vsr__conn_identity_trusted(c);
    /* the session's waits end by the listener's timeout, or by Envoy's
     * grpc-timeout when it sets a shorter one */
    uint64_t budget = lc->timeout_ms, gt;
    vsr_slice_t tv;
    x->active_ms = x->start_us / 1000;
    if (vsr_http_head_get(head, "grpc-timeout", &tv) && vsr_grpc_timeout_ms(tv, &gt) == VSR_OK) {
        x->hard_ms = x->active_ms + gt;
        if (gt < budget)
            budget = gt;
    }
    so.deadline_ms = x->active_ms + budget;
    uint32_t max_message = (uint32_t)VSR_MIN(lc->max_body_bytes + (1u << 20), (uint64_t)UINT32_MAX);
    vsr_gateway_xp_io_t io = {.send = io_send, .finish = io_finish, .ud = x};
    const vsr_gateway_xp_t *h = &w->gw->opts.extproc;
    x->xs = h->open(h->ud, x->eng, &so, max_message, &io);
    return x;
}

void vsr__xp_call_data(xp_call_t *x, const char *p, size_t n)
{
    if (x->xs && !x->finished) {
        x->active_ms = vsr_now_ms();
        x->w->gw->opts.extproc.data(x->xs, (const uint8_t *)p, n);
    }
}

void vsr__xp_call_end(xp_call_t *x)
{
    if (x->xs && !x->finished)
        x->w->gw->opts.extproc.end(x->xs);
    else if (!x->finished)
        end_rpc(x, VSR_GRPC_OK, NULL);
}

int vsr__xp_call_done(const xp_call_t *x)
{
    return x->finished;
}

uint64_t vsr__xp_call_check(xp_call_t *x, uint64_t now)
{
    if (x->finished || x->xs == NULL)
        return UINT64_MAX;
    uint64_t idle_end = x->active_ms + x->timeout_ms;
    char msg[96];
    if (x->hard_ms && now >= x->hard_ms) {
        snprintf(msg, sizeof(msg), "the call's grpc-timeout of %llu ms passed",
                 (unsigned long long)(x->hard_ms - x->start_us / 1000));
    } else if (now >= idle_end) {
        snprintf(msg, sizeof(msg), "no message on the stream for %llu ms", (unsigned long long)x->timeout_ms);
    } else {
        uint64_t end = x->hard_ms && x->hard_ms < idle_end ? x->hard_ms : idle_end;
        return end - now;
    }
    end_rpc(x, VSR_GRPC_DEADLINE_EXCEEDED, msg);
    return 0;
}

static vsr_slice_t or_empty(const char *s)
{
    return s ? vsr_slice_cstr(s) : VSR_SLICE_NULL;
}

/* The call is over: one access-log line and the request metrics, as a
 * standalone request has (no upstream attempt: Envoy made it). */
static void account(xp_call_t *x)
{
    const vsr_gateway_xp_t *h = &x->w->gw->opts.extproc;
    vsr_gateway_xp_info_t in;
    h->info(x->xs, &in);
    if (in.method.len == 0)
        return; /* not an HTTP request's stream (refused, or cut before its headers) */
    const vsr_evidence_t *ev = vsr_session_evidence(h->session(x->xs));
    double total = (double)(vsr_now_us() - x->start_us) / 1e6;
    vsr_slice_t model = or_empty(ev->selected_model), decision = or_empty(ev->decision);
    vsr_metrics_request(x->w->metrics, in.status, model, decision, total,
                        ev->routing_us ? (double)ev->routing_us / 1e6 : -1, -1);
    for (size_t i = 0; i < ev->n_family_times; i++)
        vsr_metrics_signal_family(x->w->metrics, vsr_slice_cstr(ev->family_times[i].family),
                                  (double)ev->family_times[i].us / 1e6);
    vsr_metrics_remote_classifier(x->w->metrics, "ok", ev->remote_ok);
    vsr_metrics_remote_classifier(x->w->metrics, "failed", ev->remote_failed);
    vsr_metrics_remote_classifier(x->w->metrics, "invalid", ev->remote_invalid);
    vsr_access_log_t *log = x->w->gw->opts.access_log;
    if (log == NULL)
        return;
    const char *fam_names[VSR_EVIDENCE_MAX_FAMILIES];
    uint64_t fam_us[VSR_EVIDENCE_MAX_FAMILIES];
    size_t n_fam = VSR_MIN(ev->n_family_times, (size_t)VSR_EVIDENCE_MAX_FAMILIES);
    for (size_t i = 0; i < n_fam; i++) {
        fam_names[i] = ev->family_times[i].family;
        fam_us[i] = ev->family_times[i].us;
    }
    vsr_access_entry_t e = {
        .start_time = x->start_wall,
        .method = in.method,
        .path = in.path,
        .protocol = VSR_SLICE_LIT("ext_proc"),
        .status = in.status,
        .response_flags = in.answered ? VSR_SLICE_LIT("-") : VSR_SLICE_LIT("DC"),
        .bytes_received = in.request_bytes,
        .bytes_sent = in.response_bytes,
        .duration_ms = (vsr_now_us() - x->start_us) / 1000,
        .request_id = in.request_id,
        .user_agent = in.user_agent,
        .recipe = or_empty(ev->recipe),
        .decision = decision,
        .selected_model = model,
        .served_model = model,
        .config_version = vsr_engine_version(x->eng),
        .routing_ms = (double)ev->routing_us / 1000.0,
        .family_names = fam_names,
        .family_us = fam_us,
        .n_families = n_fam,
    };
    if (ev->cache_hit >= 0)
        e.cache = ev->cache_hit ? VSR_SLICE_LIT("hit") : VSR_SLICE_LIT("miss");
    vsr_access_log_write(log, &e);
}

void vsr__xp_call_free(xp_call_t *x)
{
    if (x == NULL)
        return;
    x->st = NULL; /* the stream is gone: nothing more is sent */
    if (x->xs) {
        account(x);
        vsr_metrics_active_requests(x->w->metrics, -1);
    }
    if (x->xs)
        x->w->gw->opts.extproc.free(x->xs);
    vsr_engine_unref(x->eng);
    vsr_free(x);
}
