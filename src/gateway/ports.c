/*
 * ports.c — the worker's side of the routing core's ports: what a session
 * waiting on model work is lent (vsr_ports_t).  The request layer (conn.c)
 * owns the resume side; this file owns "call the runtime", which goes to
 * the worker's runtime port lent by the composition root
 * (vsr_gateway_opts_t.runtime).  Without one, every runtime call fails at
 * once (VSR_ERR_IO, as a runtime that cannot be reached): a phase never
 * waits and each signal that needed a task is unknown (its on_error
 * decides).  A document without model-backed signals never calls the port.
 */
#include "gateway/gateway-int.h"

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
