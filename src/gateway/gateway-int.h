/* gateway-int.h — private to the gateway module. */
#ifndef VSR_GATEWAY_INT_H
#define VSR_GATEWAY_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <uv.h>

#include "gateway/gateway.h"
#include "http/http.h"
#include "json/json.h"
#include "routing/routing.h"
#include "upstream/upstream.h"

typedef struct worker_s worker_t;
typedef struct conn_s conn_t;

typedef struct {
    uv_tcp_t tcp;
    worker_t *w;
    const vsr_listener_conf_t *conf; /* the restart-only settings (a copy the gateway owns) */
    long index;          /* position in the configuration's listeners (api_keys and models are read from the
                          * request's version there); -1 for the management and metrics listeners */
    atomic_uint *active; /* connections on this listener, all workers together */
    int bound;
    int management;      /* the management API listener */
    int metrics;         /* the metrics listener */
} listener_t;

struct worker_s {
    vsr_gateway_t *gw;
    unsigned id;
    pthread_t thread;
    uv_loop_t loop;
    uv_async_t stop_async;
    vsr_upstream_t *up;
    vsr_metrics_shard_t *metrics;
    listener_t *listeners;
    size_t n_listeners;
    conn_t *conns;         /* every open client connection, for shutdown */
    void *wop_free;        /* free list of write operations */
    char readbuf[VSR_RBUF_SIZE]; /* client reads are consumed inside read_cb */
    int start_rc;
    vsr_buf_t start_err;
    /* commands from the control thread through stop_async */
    atomic_int cmd;              /* CMD_DRAIN or CMD_STOP */
    pthread_mutex_t async_mu;    /* guards async_closed against a send racing the close */
    int async_closed;
    /* graceful drain */
    int draining;
    int torn_down;
    uint64_t drain_started_ms;
    uv_timer_t drain_deadline;   /* the drain timeout: then whatever is left is closed */
    uv_timer_t drain_check;      /* a zero timer: "is anything still in flight?" */
};

enum { CMD_NONE = 0, CMD_DRAIN = 1, CMD_STOP = 2 };

struct vsr_gateway_s {
    vsr_listener_conf_t *listeners; /* copies of the first version's listeners (restart-only settings) */
    size_t n_listeners;
    int management_enabled;
    pthread_mutex_t snap_mu;       /* guards `current` against a swap between its load and its ref */
    vsr_engine_t *current;         /* the version new requests pin (a reference) */
    vsr_listener_conf_t mgmt;      /* the management listener, when enabled */
    vsr_listener_conf_t metrics_listener; /* GET /metrics, when enabled */
    vsr_gateway_opts_t opts;
    worker_t **workers;
    unsigned n_workers;
    atomic_uint *listener_active; /* per listener */
    atomic_int ready;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    unsigned n_started;
    /* drain: each worker reports on the control thread's loop when it is done */
    uint64_t drain_timeout_ms;
    uv_async_t *drained_async;
    atomic_uint n_drained;
    void (*on_drained)(void *ud);
    void *drained_ud;
};

/* ingress.c: a client field that must not pass the edge */
int vsr__ingress_drop(const vsr_listener_conf_t *l, const vsr_config_t *cfg, int identity_trusted, vsr_slice_t name);
/* 1 when the listener needs no key or the request carries a configured one */
int vsr__ingress_api_key_ok(const vsr_listener_conf_t *l, const vsr_http_head_t *h);
/* identity headers are trusted from this peer (identity.trust_headers, trusted_peers) */
int vsr__ingress_identity_trusted(const vsr_listener_conf_t *l, const struct sockaddr_storage *peer);

/* gateway.c: the active version with a reference (a request's pin) */
vsr_engine_t *vsr__gateway_pin(vsr_gateway_t *gw);

/* conn.c */
void vsr__gateway_on_connection(uv_stream_t *server, int status);
void vsr__gateway_close_all(worker_t *w);
/* 1 while some connection of the worker has a request or a reply in flight */
int vsr__gateway_busy(worker_t *w);
/* While draining: check soon whether the worker is done (safe from any callback). */
void vsr__gateway_drain_poke(worker_t *w);
void vsr__gateway_worker_cleanup(worker_t *w);

#endif
