/*
 * ports.c — the routing core's ports (vsr_ports_t) as the gateway lends
 * them: what a session waiting on model work, the response cache, router
 * replay or a request graph's hops calls, each run on the request's worker,
 * and the resume side (port_resume) that carries a request on once a phase
 * that waited is over.  "Call the runtime" goes to the worker's runtime
 * port lent by the composition root (vsr_gateway_opts_t.runtime).  Without
 * one, every runtime call fails at once (VSR_ERR_IO, as a runtime that
 * cannot be reached): a phase never waits and each signal that needed a task
 * is unknown (its on_error decides).  A document without model-backed
 * signals never calls the port.
 */
#include "gateway/request-int.h"

void *vsr__gateway_runtime_call(worker_t *w, const vsr_runtime_bundle_t *bundle, uint64_t deadline_ms,
                                vsr_runtime_done_fn done, void *done_ud)
{
    const vsr_gateway_runtime_t *rt = &w->gw->opts.runtime;
    if (rt->call == NULL || w->rt_port == NULL || w->torn_down) {
        done(done_ud, VSR_ERR_IO, NULL, 0);
        return NULL;
    }
    return rt->call(rt->ud, w->rt_port, bundle, deadline_ms, done, done_ud);
}

void vsr__gateway_runtime_cancel(worker_t *w, void *handle)
{
    const vsr_gateway_runtime_t *rt = &w->gw->opts.runtime;
    if (rt->cancel && w->rt_port && handle)
        rt->cancel(rt->ud, w->rt_port, handle);
}

int vsr__gateway_runtime_ready(const vsr_gateway_t *gw)
{
    return gw->opts.runtime.ready == NULL || gw->opts.runtime.ready(gw->opts.runtime.ud);
}

/* ---- the table a request lends its session (ports_ud: the request) ---- */

static void *port_runtime_call(void *ud, const vsr_runtime_bundle_t *b, uint64_t deadline_ms, vsr_runtime_done_fn done,
                               void *done_ud)
{
    request_t *req = ud;
    return vsr__gateway_runtime_call(req->w, b, deadline_ms, done, done_ud);
}

static void port_runtime_cancel(void *ud, void *handle)
{
    request_t *req = ud;
    vsr__gateway_runtime_cancel(req->w, handle);
}

static void *port_model_call(void *ud, const vsr_graph_call_t *call, uint64_t deadline_ms, vsr_graph_call_done_fn done,
                             void *done_ud)
{
    request_t *req = ud;
    return vsr__gateway_model_call(req->w, req->l->conf->timeout_ms, vsr__request_id(req), call, deadline_ms, done,
                                   done_ud);
}

static void port_model_cancel(void *ud, void *handle)
{
    VSR_UNUSED(ud);
    vsr__gateway_model_cancel(handle);
}

/* A phase that waited is over: the request goes on from the port's
 * callback — the request body phase's routing, or the response body's end. */
static void port_resume(void *ud, vsr_session_t *s, const vsr_effect_t *eff)
{
    VSR_UNUSED(s);
    request_t *req = ud;
    conn_t *c = req->c;
    int h2 = req->st != NULL;
    unsigned state = req->state;
    if (state == RQ_RESP_FINISH) {
        if (h2)
            vsr__h2_end(req->st);
        if (h2 || !vsr__conn_closing(c))
            vsr__request_finish(req);
    } else if (state == RQ_RESP_EFFECT) {
        vsr__proxy_response_end(req, eff);
    } else {
        vsr__proxy_routed(req, eff);
    }
    if (h2)
        vsr__conn_flush_soon(c); /* not from a read: nothing else flushes the stream's frames */
}

static void *port_cache_lookup(void *ud, const vsr_cache_query_t *q, vsr_cache_done_fn done, void *done_ud)
{
    request_t *req = ud;
    return vsr__gateway_cache_lookup(req->w, vsr_engine_config(req->eng), q, done, done_ud);
}

static void port_cache_cancel(void *ud, void *handle)
{
    request_t *req = ud;
    vsr__gateway_cache_cancel(req->w, handle);
}

static void port_cache_store(void *ud, const vsr_cache_query_t *q, vsr_slice_t value)
{
    request_t *req = ud;
    vsr__gateway_cache_store(req->w, vsr_engine_config(req->eng), q, value);
}

static void port_cache_delete(void *ud, const vsr_cache_query_t *q)
{
    request_t *req = ud;
    vsr__gateway_cache_delete(req->w, vsr_engine_config(req->eng), q);
}

static void port_replay_store(void *ud, const vsr_replay_record_t *r)
{
    request_t *req = ud;
    vsr__gateway_replay_put(vsr_engine_config(req->eng), r);
}

static const vsr_model_stats_t *port_model_stats(void *ud)
{
    request_t *req = ud;
    return req->w->gw->model_stats;
}

const vsr_ports_t vsr__gateway_ports = {
    .runtime_call = port_runtime_call,
    .runtime_cancel = port_runtime_cancel,
    .cache_lookup = port_cache_lookup,
    .cache_cancel = port_cache_cancel,
    .cache_store = port_cache_store,
    .cache_delete = port_cache_delete,
    .replay_store = port_replay_store,
    .model_call = port_model_call,
    .model_cancel = port_model_cancel,
    .resume = port_resume,
    .model_stats = port_model_stats,
};
