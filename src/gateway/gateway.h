/*
 * gateway — the standalone frontend: N worker threads, each with its own
 * libuv loop, its own SO_REUSEPORT listening socket per listener and its own
 * upstream pools.  A connection, and every request on it, stays on the worker
 * that accepted it.  Serves /health and /ready, the OpenAI-compatible /v1
 * endpoints, and forwards any other path to the default model's backend.
 *
 * Only cmd/ includes this header.
 */
#ifndef VSR_GATEWAY_H
#define VSR_GATEWAY_H

#include <uv.h>

#include "admin/admin.h"
#include "base/base.h"
#include "config/config.h"
#include "obs/obs.h"
#include "routing/routing.h"
#include "upstream/upstream.h"

typedef struct vsr_gateway_s vsr_gateway_t;

/* Starts `workers` threads (0 → the number of usable cores) serving every
 * listener of cfg, and the management listener when enabled, routing with
 * engine, the first configuration version (the gateway takes its own
 * reference; cfg is read during the call only: the listeners' settings are
 * copied).  Every engine given to the gateway carries its version's
 * vsr_upstream_shared_t as its part (vsr_engine_adopt).  Returns once all
 * listeners are bound on every worker, or NULL with a message appended to err
 * (nothing left running) when any of them fails.  Before any worker binds,
 * every address is probed without SO_REUSEPORT: one another process listens
 * on fails the start (see addr_in_use). */
/* The model runtime, as the composition root lends it (no runtime type
 * appears here).  open runs on each worker's thread before it serves, with
 * that worker's loop, and returns the worker's port (e.g. a runtime client
 * of its own; NULL: that worker has no runtime); close runs on the same
 * thread when the worker tears down, after its connections are closed (the
 * handles it closes are run out by the worker's loop).  call and cancel
 * follow the rules of vsr_ports_t.runtime_call / runtime_cancel on that
 * worker's thread.  ready (may be NULL: always) is read from any thread by
 * /ready: 0 while the runtime cannot serve.  Every function gets ud. */
typedef struct {
    void *(*open)(void *ud, uv_loop_t *loop, unsigned worker);
    void (*close)(void *ud, void *port);
    void *(*call)(void *ud, void *port, const vsr_runtime_bundle_t *bundle, uint64_t deadline_ms,
                  vsr_runtime_done_fn done, void *done_ud);
    void (*cancel)(void *ud, void *port, void *handle);
    int (*ready)(void *ud);
    void *ud;
} vsr_gateway_runtime_t;

/* The ext_proc stream handler, as the composition root lends it for
 * --gateway extproc (the gateway names no extproc type): each Process call
 * on the ext_proc listener opens one stream.  open routes with engine e
 * (the stream pins it) under the session's options (ports and their ud are
 * borrowed: they outlive the stream), taking ProcessingRequest messages of
 * at most max_message bytes, and answers through io: send gets the framed
 * answers for the call's DATA, finish the call's end (a VSR_GRPC_* status,
 * and a message when not OK), once, from the stream's calls or a port's
 * callback.  data feeds the call's DATA, end says the client closed its
 * side, free cancels what is still waiting and frees (not from an io
 * callback).  session and info are read for the access log and metrics
 * (valid until free).  All run on the worker's thread; open gets ud. */
typedef struct {
    void (*send)(void *ud, const char *p, size_t n);
    void (*finish)(void *ud, int grpc_status, const char *message);
    void *ud;
} vsr_gateway_xp_io_t;

/* What the stream saw of its HTTP request (slices valid until free; empty
 * when not seen). */
typedef struct {
    vsr_slice_t method, path, request_id, user_agent;
    int status;              /* the client's status as vsr answered it; 0 before any */
    uint64_t request_bytes;  /* the request body */
    uint64_t response_bytes; /* the response body as vsr answered it */
    int answered;            /* every message got its answer and the call ended OK */
} vsr_gateway_xp_info_t;

typedef struct {
    void *(*open)(void *ud, vsr_engine_t *e, const vsr_session_opts_t *session, uint32_t max_message,
                  const vsr_gateway_xp_io_t *io);
    void (*data)(void *stream, const uint8_t *p, size_t n);
    void (*end)(void *stream);
    void (*free)(void *stream);
    vsr_session_t *(*session)(const void *stream);
    void (*info)(const void *stream, vsr_gateway_xp_info_t *out);
    void *ud;
} vsr_gateway_xp_t;

typedef struct {
    unsigned workers;            /* 0 = the number of usable cores */
    vsr_gateway_runtime_t runtime; /* all NULL: no runtime (every runtime call fails at once, VSR_ERR_IO) */
    const char *metrics_address; /* the metrics listener (GET /metrics): address and port; port 0 = none */
    uint16_t metrics_port;
    vsr_metrics_t *metrics;      /* required: one shard per worker */
    vsr_access_log_t *access_log; /* NULL = no access log */
    vsr_tracer_t *tracer;        /* NULL = no tracing (traceparent passes through untouched) */
    vsr_admin_t *admin;          /* serves /api/v1/config* on the management listener; NULL = none */
    int *addr_in_use;            /* optional, out: set to 1 when the start failed because another
                                    process already listens on one of the addresses */
    /* --gateway extproc: serve Envoy's ext_proc (gRPC over HTTP/2 cleartext)
     * on this address and port instead of the configuration's listeners
     * (Envoy serves those); port 0 = standalone */
    const char *extproc_address; /* NULL = 0.0.0.0 */
    uint16_t extproc_port;
    vsr_gateway_xp_t extproc;    /* required with extproc_port: the Process calls' stream handler */
} vsr_gateway_opts_t;

vsr_gateway_t *vsr_gateway_start(const vsr_config_t *cfg, vsr_engine_t *engine, const vsr_gateway_opts_t *opts,
                                 vsr_buf_t *err);
/* Activation: from now on every new request pins `engine` (the gateway takes
 * a reference and drops the one on the version it replaces; requests in
 * flight finish on the version they pinned).  One atomic swap, from any
 * thread.  The listeners' restart-only settings must be those of the first
 * version (vsr_config_restart_required). */
void vsr_gateway_publish(vsr_gateway_t *gw, vsr_engine_t *engine);
/* The version new requests pin now, with a reference for the caller. */
vsr_engine_t *vsr_gateway_current(vsr_gateway_t *gw);
/* Graceful drain: /ready turns 503 at once, the listening sockets close (new
 * connections are refused), requests in flight finish (each reply closes its
 * connection), then each worker ends; after timeout_ms whatever is left is
 * closed.  on_drained runs on `loop` (the caller's) once every worker has
 * ended; then call vsr_gateway_stop().  Call from the thread that started it. */
void vsr_gateway_drain(vsr_gateway_t *gw, uv_loop_t *loop, uint64_t timeout_ms, void (*on_drained)(void *ud),
                       void *ud);
/* Closes the listeners and every connection at once (also in the middle of a
 * drain), stops and joins the workers, and frees the gateway.  Call from the
 * thread that started it. */
void vsr_gateway_stop(vsr_gateway_t *gw);
unsigned vsr_gateway_workers(const vsr_gateway_t *gw);

#endif /* VSR_GATEWAY_H */
