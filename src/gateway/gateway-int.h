/* gateway-int.h — private to the gateway module. */
#ifndef VSR_GATEWAY_INT_H
#define VSR_GATEWAY_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <uv.h>

#include "gateway/gateway.h"
#include "http/http.h"
#include "json/json.h"
#include "upstream/upstream.h"

typedef struct worker_s worker_t;
typedef struct conn_s conn_t;

typedef struct {
    uv_tcp_t tcp;
    worker_t *w;
    const vsr_listener_conf_t *conf;
    atomic_uint *active; /* connections on this listener, all workers together */
    int bound;
} listener_t;

struct worker_s {
    vsr_gateway_t *gw;
    unsigned id;
    pthread_t thread;
    uv_loop_t loop;
    uv_async_t stop_async;
    vsr_upstream_t *up;
    listener_t *listeners;
    size_t n_listeners;
    conn_t *conns;         /* every open client connection, for shutdown */
    void *wop_free;        /* free list of write operations */
    char readbuf[VSR_RBUF_SIZE]; /* client reads are consumed inside read_cb */
    int start_rc;
    vsr_buf_t start_err;
};

struct vsr_gateway_s {
    const vsr_config_t *cfg;
    worker_t **workers;
    unsigned n_workers;
    atomic_uint *listener_active; /* per listener */
    atomic_int ready;
    uint64_t started_at;   /* wall-clock seconds, for /v1/models `created` */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    unsigned n_started;
};

/* conn.c */
void vsr__gateway_on_connection(uv_stream_t *server, int status);
void vsr__gateway_close_all(worker_t *w);
void vsr__gateway_worker_cleanup(worker_t *w);

#endif
