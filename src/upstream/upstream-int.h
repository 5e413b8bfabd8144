/* upstream-int.h — private to upstream/: the state workers share. */
#ifndef VSR_UPSTREAM_INT_H
#define VSR_UPSTREAM_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <sys/socket.h>

#include "upstream/policy.h"
#include "upstream/upstream.h"

typedef struct health_check_s health_check_t;

/* A cluster's state shared by every worker and by every configuration
 * version whose model has the same identity (name and, in order, each
 * endpoint's host, port and TLS): health, ejection, load, breaker and
 * resolved addresses survive a reload that leaves them alone.  Lives in a
 * process-wide registry; refs counts the snapshots' shared states and the
 * workers' clusters that hold it, snap_refs the snapshots only (at 0 the
 * workers drop their pools for it). */
typedef struct shared_cluster_s shared_cluster_t;
struct shared_cluster_s {
    shared_cluster_t *reg_next;         /* registry list, under the registry lock */
    uint64_t hash;                      /* of the identity */
    char *name;                         /* identity: the model's name ... */
    char **hosts;                       /* ... and each endpoint's host, port and TLS */
    uint16_t *ports;
    uint8_t *tls;
    size_t n_eps;
    atomic_uint refs;
    atomic_uint snap_refs;
    struct vsr_tls_ctx_s *tls_ctx;      /* a reference when some endpoint speaks TLS */
    vsr_endpoint_state_t *eps;          /* one per backend */
    vsr_endpoint_state_t **ep_ptrs;
    struct sockaddr_storage *addrs;     /* resolved at warm-up; names again by dns.c: read through
                                         * vsr__upstream_addr() (under addr_mu) */
    uint8_t *named;                     /* endpoint j's host is a DNS name (not an IP literal) */
    pthread_mutex_t addr_mu;
    atomic_uint active_requests;        /* calls in flight, all workers */
    atomic_uint active_retries;
    atomic_uint pending;                /* attempts waiting for a connection */
    atomic_uint connections;            /* upstream connections open, all workers */
    vsr_breaker_t breaker;              /* cross-model fallback's circuit breaker of this model */
};

typedef struct health_set_s health_set_t;
typedef struct dns_set_s dns_set_t;

/* One configuration's view: clusters[i] is the registry's state for
 * cfg->models[i] (a reference), reused from whatever earlier version had the
 * same identity. */
struct vsr_upstream_shared_s {
    const vsr_config_t *cfg;
    shared_cluster_t **clusters;
    size_t n_clusters;
    size_t n_reused;                     /* clusters found in the registry rather than created */
    health_set_t *health;                /* the running active health checks, or NULL */
    dns_set_t *dns;                      /* the running re-resolution, or NULL */
    struct vsr_tls_ctx_s *tls_ctx;       /* when some endpoint speaks TLS (a reference) */
};

/* The identity of a provider model's cluster, and whether sc has it. */
uint64_t vsr__upstream_identity_hash(const vsr_model_conf_t *m);
int vsr__upstream_identity_eq(const shared_cluster_t *sc, const vsr_model_conf_t *m);
/* The registry's cluster for m's identity with a reference taken, or NULL
 * when no live configuration has that identity. */
shared_cluster_t *vsr__upstream_registry_find(const vsr_model_conf_t *m);
/* The model of a version's cluster i: the provider models, then the
 * external models (global.model_catalog.external[]), then the plugins'
 * endpoints (cfg->plugin_models). */
static inline const vsr_model_conf_t *vsr__upstream_cluster_model(const vsr_config_t *cfg, size_t i)
{
    if (i < cfg->n_models)
        return &cfg->models[i];
    i -= cfg->n_models;
    return i < cfg->n_externals ? &cfg->externals[i].model : cfg->plugin_models[i - cfg->n_externals];
}
void vsr__upstream_cluster_unref(shared_cluster_t *sc);

int vsr__upstream_resolve(const vsr_backend_conf_t *b, struct sockaddr_storage *out, vsr_buf_t *err);
/* A copy of the address *addr (one of sc->addrs) for a connect: the
 * resolver may be replacing it on the control thread.  Any thread.  An
 * address never resolved has ss_family 0. */
void vsr__upstream_addr(shared_cluster_t *sc, const struct sockaddr_storage *addr, struct sockaddr_storage *out);
/* Takes a reference on sc (the caller holds one already). */
void vsr__upstream_cluster_ref(shared_cluster_t *sc);

/* ---- re-resolution of host names (dns.c) ----
 * Envoy's LOGICAL_DNS: each named endpoint's host is looked up again on the
 * control thread's loop (uv_getaddrinfo: the lookup itself runs on libuv's
 * thread pool), every VSR_DNS_RETRY_MS while it has not resolved, every
 * VSR_DNS_REFRESH_MS once it has; a failed lookup keeps the last address. */
#define VSR_DNS_RETRY_MS 5000u
#define VSR_DNS_REFRESH_MS 30000u
dns_set_t *vsr__dns_start(vsr_upstream_shared_t *sh, uv_loop_t *loop); /* NULL when no host is a name */
void vsr__dns_stop(dns_set_t *set); /* on the loop's thread; accepts NULL; memory goes with the last callback */

/* ---- HTTP/2 to backends (h2_client.c) ----
 * A pool per worker and endpoint of connections that each multiplex many
 * calls' attempts as streams.  upstream.c keeps everything that decides
 * (policy, timeouts, retries, evidence); h2_client.c moves one attempt's request
 * and response over a stream and reports back through the vsr__call_h2_*
 * functions below.  Loop thread only. */
typedef struct vsr_h2_pool_s vsr_h2_pool_t;
typedef struct vsr_h2_stream_s vsr_h2_stream_t;
struct vsr_tls_ctx_s;

/* host, addr and tls_ctx belong to sc (the endpoint's shared cluster): a
 * pool outlives no configuration version, and each of its connections holds
 * a reference on sc until its handles are closed. */
vsr_h2_pool_t *vsr__h2_pool_new(vsr_upstream_t *up, uv_loop_t *loop, const char *host, int tls,
                                const struct sockaddr_storage *addr, struct vsr_tls_ctx_s *tls_ctx,
                                shared_cluster_t *sc);
/* Closes every connection (their streams must have been detached). */
void vsr__h2_pool_free(vsr_h2_pool_t *pool);
/* 0 once a TLS server answered ALPN with http/1.1: calls go over HTTP/1.1. */
int vsr__h2_pool_usable(const vsr_h2_pool_t *pool);
/* A new upstream connection to sc for the call's attempt, against the
 * connection and pending limits of the call's version (a cluster outlives
 * versions that may set them differently; reliability.max_connections and
 * max_pending_requests, 1024 each): NULL when admitted, sc's counts taken;
 * else which limit refused it. */
const char *vsr__call_admit_connection(const vsr_upstream_call_t *call, shared_cluster_t *sc);
/* Starts the attempt's stream on a connection with room (opening one when
 * none has; the cluster's connection and pending limits apply).  head: the
 * serialized HTTP/1.1 request head, turned into HTTP/2 fields; body: the
 * pieces, borrowed until detach.  The stream reports through vsr__call_h2_*
 * (never from inside this function).  NULL with *overflow set when a
 * circuit-breaker limit refused the new connection. */
vsr_h2_stream_t *vsr__h2_start(vsr_h2_pool_t *pool, vsr_upstream_call_t *call, const char *head, size_t head_len,
                               const uv_buf_t *body, size_t n_body, int head_request, uint64_t connect_ms,
                               const char **overflow);
/* The call lets go of the stream: no more reports; an open stream is reset
 * (CANCEL).  The stream's memory goes when the connection is done with it. */
void vsr__h2_stream_detach(vsr_h2_stream_t *s);
/* Backpressure: while paused, the stream's DATA is held (at most its flow
 * control window) and not acknowledged, so the server stops sending. */
void vsr__h2_pause(vsr_h2_stream_t *s);
void vsr__h2_resume(vsr_h2_stream_t *s);

/* Reports of a stream to its call (upstream.c).  After each, the stream may
 * have been detached. */
void vsr__call_h2_sent(vsr_upstream_call_t *call);      /* the connection is up: the request is going out */
void vsr__call_h2_head(vsr_upstream_call_t *call, const vsr_http_head_t *head);
void vsr__call_h2_body(vsr_upstream_call_t *call, const char *p, size_t n, vsr_rbuf_t *owner);
void vsr__call_h2_complete(vsr_upstream_call_t *call);
/* The stream ended without a complete response: before the head, an
 * attempt that ended with outcome o (err, detail for the report); after it,
 * the response is aborted. */
void vsr__call_h2_failed(vsr_upstream_call_t *call, vsr_outcome_t o, vsr_upstream_error_t err, const char *detail);
/* ALPN chose http/1.1: the attempt goes over HTTP/1.1 instead (no retry). */
void vsr__call_h2_downgrade(vsr_upstream_call_t *call);
/* The stream was refused for exceeding a concurrency limit the server had
 * not announced yet when it was sent: the attempt starts its stream again
 * (not a retry; repeated refusals fail it as refused-stream). */
void vsr__call_h2_resend(vsr_upstream_call_t *call);
/* Keeps the worker's upstream alive while h2 handles close. */
void vsr__upstream_hold(vsr_upstream_t *up);
void vsr__upstream_put(vsr_upstream_t *up);

#endif
