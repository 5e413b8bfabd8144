/*
 * ports.c — the worker's side of the routing core's ports: what a session
 * waiting on model work is lent (vsr_ports_t).  The request layer (conn.c)
 * owns the resume side; this file owns "call the runtime".
 *
 * No model runtime is attached yet: every runtime call fails at once
 * (VSR_ERR_IO, as a runtime that cannot be reached), so a phase never
 * waits and each signal that needed a task is unknown (its on_error
 * decides).  A document without model-backed signals never calls the port.
 */
#include "gateway/gateway-int.h"

void *vsr__gateway_runtime_call(worker_t *w, const vsr_runtime_bundle_t *bundle, uint64_t deadline_ms,
                                vsr_runtime_done_fn done, void *done_ud)
{
    VSR_UNUSED(w);
    VSR_UNUSED(bundle);
    VSR_UNUSED(deadline_ms);
    done(done_ud, VSR_ERR_IO, NULL, 0);
    return NULL;
}

void vsr__gateway_runtime_cancel(worker_t *w, void *handle)
{
    VSR_UNUSED(w);
    VSR_UNUSED(handle); /* no call is ever in flight */
}
