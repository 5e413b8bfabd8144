/* tracing.c — the gateway's side of tracing: a request's W3C trace context,
 * the traceparent each upstream attempt carries, and the spans built from the
 * request's evidence when it ends.  Spans carry methods, paths, statuses,
 * names of routes and models, never prompt text, header values other than
 * x-request-id and user-agent, or credentials. */
#include "gateway/gateway-int.h"

#include <stdio.h>

void vsr__trace_begin(req_trace_t *t, vsr_tracer_t *tracer, const vsr_http_head_t *h)
{
    if (tracer == NULL)
        return; /* t stays as the request was allocated: zeroed, off */
    memset(t, 0, sizeof(*t));
    t->on = 1;
    t->route_start_us = vsr_now_us();
    vsr_slice_t v;
    if (vsr_http_head_get(h, "traceparent", &v) && vsr_traceparent_parse(v, &t->tp) == VSR_OK) {
        t->sampled = (t->tp.flags & VSR_TRACE_SAMPLED) != 0; /* parent-based */
        /* several tracestate fields are one list (RFC 9110 §5.3); more than
         * 512 bytes of it, the most W3C asks to propagate, is dropped whole */
        size_t n = 0;
        int fits = 1;
        for (size_t i = 0; i < h->num_headers && fits; i++) {
            if (!vsr_slice_case_eq_cstr(h->headers[i].name, "tracestate"))
                continue;
            vsr_slice_t ts = h->headers[i].value;
            if (n + (n > 0) + ts.len > sizeof(t->tracestate)) {
                fits = 0;
                break;
            }
            if (n > 0)
                t->tracestate[n++] = ',';
            memcpy(t->tracestate + n, ts.p, ts.len);
            n += ts.len;
        }
        if (fits && n > 0 && vsr_tracestate_valid(vsr_slice(t->tracestate, n)))
            t->tracestate_len = n;
    } else {
        /* no (valid) parent: a new trace; its tracestate means nothing now */
        memset(&t->tp, 0, sizeof(t->tp));
        vsr_trace_new_trace_id(t->tp.trace_id);
        t->sampled = vsr_trace_sample_root(vsr_tracer_ratio(tracer), t->tp.trace_id);
    }
    vsr_trace_new_span_id(t->root);
}

int vsr__trace_owns(const req_trace_t *t, vsr_slice_t name)
{
    return t->on && (vsr_slice_case_eq_cstr(name, "traceparent") || vsr_slice_case_eq_cstr(name, "tracestate"));
}

void vsr__trace_attempt_headers(req_trace_t *t, unsigned index, vsr_buf_t *head)
{
    if (!t->on)
        return;
    uint8_t span[8];
    vsr_trace_new_span_id(span);
    if (index < VSR_UPSTREAM_MAX_ATTEMPTS)
        memcpy(t->attempts[index], span, 8);
    char tp[56];
    vsr_traceparent_format(t->tp.trace_id, span, t->sampled ? VSR_TRACE_SAMPLED : 0, tp);
    vsr_buf_append_cstr(head, "traceparent: ");
    vsr_buf_append(head, tp, VSR_TRACEPARENT_LEN);
    vsr_buf_append(head, "\r\n", 2);
    if (t->tracestate_len) {
        vsr_buf_append_cstr(head, "tracestate: ");
        vsr_buf_append(head, t->tracestate, t->tracestate_len);
        vsr_buf_append(head, "\r\n", 2);
    }
}

static uint64_t wall_ns(const req_trace_end_t *e, uint64_t mono_us)
{
    int64_t d = (int64_t)(mono_us - e->start_us);
    double ns = e->start_wall * 1e9 + (double)d * 1e3;
    return ns > 0 ? (uint64_t)ns : 0;
}

static vsr_span_attr_t attr_s(const char *key, vsr_slice_t v)
{
    return (vsr_span_attr_t){.key = key, .str = v};
}

static vsr_span_attr_t attr_n(const char *key, int64_t v)
{
    return (vsr_span_attr_t){.key = key, .num = v, .is_num = 1};
}

static vsr_slice_t cs(const char *s)
{
    return s ? vsr_slice_cstr(s) : VSR_SLICE_NULL;
}

/* A child of the request's root span, in its trace; the caller sets the span
 * id (or draws one), the times and the attributes. */
static void child_span(vsr_span_t *s, const req_trace_t *t, const char *name, vsr_span_kind_t kind)
{
    memset(s, 0, sizeof(*s));
    s->name = name;
    memcpy(s->trace_id, t->tp.trace_id, 16);
    memcpy(s->parent_id, t->root, 8);
    s->kind = kind;
}

void vsr__trace_end(const req_trace_t *t, vsr_tracer_t *tracer, const req_trace_end_t *e)
{
    if (!t->on || !t->sampled || tracer == NULL)
        return;
    static const char *outcome[] = {"ok", "connect_failure", "reset", "protocol", "timeout", "idle_timeout",
                                    "aborted", "overflow"};
    enum { MAX_SPANS = 4 + VSR_UPSTREAM_MAX_ATTEMPTS + VSR_GRAPH_MAX_RECORDS, MAX_ATTRS = 8 };
    vsr_span_t spans[MAX_SPANS];
    vsr_span_attr_t attrs[MAX_SPANS][MAX_ATTRS];
    size_t n = 0;
    uint64_t now = vsr_now_us();

    /* the root: the request as the client saw it */
    vsr_span_t *r = &spans[n];
    vsr_span_attr_t *a = attrs[n++];
    size_t k = 0;
    memset(r, 0, sizeof(*r));
    r->name = "vsr.request";
    memcpy(r->trace_id, t->tp.trace_id, 16);
    memcpy(r->span_id, t->root, 8);
    memcpy(r->parent_id, t->tp.span_id, 8); /* zero for a new root */
    r->start_ns = wall_ns(e, e->start_us);
    r->end_ns = wall_ns(e, now);
    r->kind = VSR_SPAN_SERVER;
    r->status = e->status >= 500 || e->status == 0 ? VSR_SPAN_ERROR : VSR_SPAN_UNSET;
    a[k++] = attr_s("http.request.method", e->method);
    a[k++] = attr_s("url.path", vsr_slice_split(e->target, '?', NULL)); /* a query may hold secrets */
    a[k++] = attr_n("http.response.status_code", e->status);
    a[k++] = attr_s("vsr.response_flags", cs(e->flags ? e->flags : "-"));
    if (e->request_id.len)
        a[k++] = attr_s("vsr.request_id", e->request_id);
    a[k++] = attr_n("vsr.config_version", (int64_t)e->config_version);
    if (e->report)
        a[k++] = attr_n("vsr.upstream_attempts", e->report->n_attempts);
    r->attrs = a;
    r->n_attrs = k;

    /* the routing core's work */
    if (e->ev) {
        vsr_span_t *s = &spans[n];
        a = attrs[n++];
        k = 0;
        child_span(s, t, "vsr.routing", VSR_SPAN_INTERNAL);
        vsr_trace_new_span_id(s->span_id);
        s->start_ns = wall_ns(e, t->route_start_us);
        s->end_ns = wall_ns(e, t->route_start_us + e->ev->routing_us);
        if (e->ev->recipe)
            a[k++] = attr_s("vsr.recipe", cs(e->ev->recipe));
        if (e->ev->decision)
            a[k++] = attr_s("vsr.decision", cs(e->ev->decision));
        if (e->ev->algorithm)
            a[k++] = attr_s("vsr.algorithm", cs(e->ev->algorithm));
        if (e->ev->selected_model)
            a[k++] = attr_s("vsr.selected_model", cs(e->ev->selected_model));
        a[k++] = attr_n("vsr.passthrough", e->ev->passthrough);
        a[k++] = attr_n("vsr.fallbacks", e->ev->fallbacks);
        s->attrs = a;
        s->n_attrs = k;
    }

    /* the model runtime's call (the model signals' bundle) */
    if (e->ev && e->ev->runtime_start_us) {
        vsr_span_t *s = &spans[n];
        a = attrs[n++];
        k = 0;
        child_span(s, t, "vsr.runtime_call", VSR_SPAN_CLIENT);
        vsr_trace_new_span_id(s->span_id);
        s->start_ns = wall_ns(e, e->ev->runtime_start_us);
        s->end_ns = wall_ns(e, e->ev->runtime_end_us);
        s->status = e->ev->runtime_status != VSR_OK ? VSR_SPAN_ERROR : VSR_SPAN_UNSET;
        a[k++] = attr_n("vsr.tasks", e->ev->runtime_tasks);
        a[k++] = attr_s("vsr.outcome", cs(e->ev->runtime_status == VSR_OK         ? "ok"
                                          : e->ev->runtime_status == VSR_ERR_IO     ? "unreachable"
                                          : e->ev->runtime_status == VSR_ERR_TOO_BIG ? "late_or_refused"
                                          : e->ev->runtime_status == 1              ? "unanswered"
                                                                                    : "error"));
        s->attrs = a;
        s->n_attrs = k;
    }

    /* a single-call selector's choice among the decision's candidates */
    if (e->ev && e->ev->selection) {
        const vsr_selection_t *sel = e->ev->selection;
        vsr_span_t *s = &spans[n];
        a = attrs[n++];
        k = 0;
        child_span(s, t, "vsr.selection", VSR_SPAN_INTERNAL);
        vsr_trace_new_span_id(s->span_id);
        s->start_ns = wall_ns(e, sel->start_us);
        s->end_ns = wall_ns(e, sel->end_us);
        s->status = sel->chosen < 0 ? VSR_SPAN_ERROR : VSR_SPAN_UNSET;
        a[k++] = attr_s("vsr.algorithm", cs(sel->algorithm));
        if (sel->chosen >= 0)
            a[k++] = attr_s("vsr.selected_model", cs(sel->models[sel->chosen]));
        a[k++] = attr_n("vsr.candidates", (int64_t)sel->n);
        a[k++] = attr_n("vsr.probe", sel->probe);
        if (sel->warning)
            a[k++] = attr_s("vsr.warning", cs(sel->warning));
        s->attrs = a;
        s->n_attrs = k;
    }

    /* each upstream attempt, the parent of what the backend records */
    unsigned kept = e->report ? VSR_MIN(e->report->n_attempts, VSR_UPSTREAM_MAX_ATTEMPTS) : 0;
    for (unsigned i = 0; i < kept; i++) {
        const vsr_upstream_attempt_t *at = &e->report->attempts[i];
        vsr_span_t *s = &spans[n];
        a = attrs[n++];
        k = 0;
        child_span(s, t, "vsr.upstream_attempt", VSR_SPAN_CLIENT);
        memcpy(s->span_id, t->attempts[i], 8);
        if (!memcmp(s->span_id, (uint8_t[8]){0}, 8))
            vsr_trace_new_span_id(s->span_id); /* failed before its head was built */
        s->start_ns = wall_ns(e, at->start_us);
        s->end_ns = wall_ns(e, at->end_us);
        s->status = at->error || at->status >= 500 ? VSR_SPAN_ERROR : VSR_SPAN_UNSET;
        a[k++] = attr_n("vsr.attempt", i + 1);
        if (at->backend) {
            a[k++] = attr_s("server.address", cs(at->backend->authority));
            a[k++] = attr_s("vsr.endpoint", cs(at->backend->name));
        }
        if (at->status)
            a[k++] = attr_n("http.response.status_code", at->status);
        if (at->error && (size_t)at->error < VSR_ARRAY_LEN(outcome))
            a[k++] = attr_s("error.type", cs(outcome[at->error]));
        s->attrs = a;
        s->n_attrs = k;
    }
    /* each call of a request graph (its streamed final hop is an upstream attempt above) */
    const vsr_graph_outcome_t *lo = e->ev ? e->ev->looper : NULL;
    for (size_t i = 0; lo && i < lo->n_records && n < MAX_SPANS; i++) {
        const vsr_graph_call_record_t *rec = &lo->records[i];
        vsr_span_t *s = &spans[n];
        a = attrs[n++];
        k = 0;
        child_span(s, t, "vsr.graph_call", VSR_SPAN_CLIENT);
        vsr_trace_new_span_id(s->span_id);
        s->start_ns = wall_ns(e, rec->start_ms * 1000);
        s->end_ns = wall_ns(e, (rec->start_ms + rec->ms) * 1000);
        s->status = rec->status != VSR_OK ? VSR_SPAN_ERROR : VSR_SPAN_UNSET;
        a[k++] = attr_s("vsr.algorithm", cs(lo->algorithm));
        a[k++] = attr_s("vsr.node", cs(rec->node));
        a[k++] = attr_s("vsr.model", cs(rec->model));
        a[k++] = attr_n("vsr.iteration", rec->iteration);
        a[k++] = attr_n("vsr.attempts", rec->attempts);
        if (rec->http_status)
            a[k++] = attr_n("http.response.status_code", rec->http_status);
        s->attrs = a;
        s->n_attrs = k;
    }
    vsr_tracer_emit(tracer, spans, n);
}
