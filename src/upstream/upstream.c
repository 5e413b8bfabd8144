/*
 * upstream.c — clusters, endpoints, keep-alive pools and the HTTP/1.1
 * exchange of one call.
 *
 * A connection (uconn) is in one of four states: CONNECTING, ACTIVE (serving
 * a call), IDLE (pooled, still read so that a close by the peer is noticed)
 * and CLOSING.  One timer per connection serves whichever deadline its state
 * has: connect, first byte, stream idle, or pooled-idle expiry.  A call is
 * freed before its final callback runs, so the callback may do anything,
 * including starting the next call.
 */
#include "upstream/upstream.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <pthread.h>
#include <stdio.h>

#include "upstream/tls.h"
#include "upstream/upstream-int.h"

#define POOL_IDLE_TIMEOUT_MS 60000
#define POOL_MAX_IDLE 256

typedef struct uconn_s uconn_t;

typedef struct {
    const struct sockaddr_storage *addr; /* shared */
    vsr_endpoint_state_t *state;         /* shared */
    uconn_t *idle;                       /* LIFO: the most recently used connection is the warmest */
    unsigned n_idle;
    uconn_t *connecting;                 /* connects whose call was cancelled (through next_idle): pooled when done */
    vsr_h2_pool_t *h2;                   /* protocol h2: the HTTP/2 connections (h2_client.c) */
} endpoint_t;

typedef struct cluster_s cluster_t;
struct cluster_s {
    cluster_t *next;               /* hash bucket, or the dead list */
    vsr_upstream_t *up;
    shared_cluster_t *sc;          /* a reference */
    unsigned users;                /* calls on it */
    unsigned n_conns;              /* connections not yet closed */
    int dead;                      /* no configuration has it any more */
    endpoint_t *eps;
    size_t n_eps;
    vsr_endpoint_state_t **states; /* for the balancer */
    uint32_t *weights;
    int64_t *cur;                  /* smooth weighted round robin, this worker's */
};

struct vsr_upstream_s {
    uv_loop_t *loop;
    cluster_t **buckets;           /* UP_BUCKETS chains, by identity hash */
    cluster_t *dead;               /* dropped clusters still in use */
    unsigned gen;                  /* the registry generation last swept at */
    vsr_rng_t rng;
    unsigned live; /* connections and calls whose handles are not closed yet */
    int freeing;
    /* failure lines at info: at most FAIL_LOG_PER_S a second on this worker */
    uint64_t fail_log_window_ms;
    unsigned fail_log_lines, fail_log_suppressed;
};

#define FAIL_LOG_PER_S 10

typedef enum { UC_CONNECTING, UC_ACTIVE, UC_IDLE, UC_CLOSING } uc_state_t;

#define CALL_INLINE_BUFS 8 /* a call's head and body pieces kept in the call itself (a rewritten body is a few) */

/* An attempt's waits on one lazy timer (upstream.h): a deadline (connect,
 * first byte, per try; the pool's idle timeout), then the response's
 * stream-idle clock, each later than the last. */
typedef struct {
    uint64_t due;         /* loop time the timer is wanted at, 0 = not wanted */
    uint64_t idle_ms;     /* nonzero: the wait is the stream-idle clock (waits_progress) ... */
    uint64_t progress_at; /* ... and the loop time of the last progress */
} waits_t;

struct uconn_s {
    uv_tcp_t tcp;
    uv_timer_t timer;
    waits_t waits;               /* what the timer is wanted for (arm, idle_progress) */
    uv_connect_t connect_req;
    uv_write_t write_req;
    vsr_upstream_t *up;
    endpoint_t *ep;
    cluster_t *cl;
    uconn_t *next_idle;
    vsr_upstream_call_t *call;
    vsr_http_parser_t parser;
    vsr_rbuf_t *cur_rbuf; /* the buffer being parsed, inside read_cb */
    uc_state_t state;
    int pending_closes;
    unsigned reused : 1;
    unsigned orphan : 1;     /* on ep->connecting */
    unsigned writing : 1;
    unsigned interim : 1;    /* the message being parsed is a 1xx */
    unsigned completed : 1;  /* the call's response ended inside this read */
    unsigned reusable : 1;
    unsigned counted_pending : 1;
    unsigned tls_ready : 1;  /* the TLS handshake is done */
    unsigned counted_conn : 1; /* in the cluster's open connections */
    vsr_tls_t *tls;          /* NULL for plain HTTP */
};

struct vsr_upstream_call_s {
    vsr_upstream_t *up;
    cluster_t *cl;
    const vsr_model_conf_t *model; /* the request's configuration: policy, credentials, paths */
    endpoint_t *ep;
    int ep_idx;
    uconn_t *uc;
    const vsr_upstream_callbacks_t *cb;
    void *ud;
    vsr_upstream_request_t req;  /* headers and body borrowed until the end */
    vsr_h2_stream_t *h2s;        /* the attempt's HTTP/2 stream (instead of uc) */
    vsr_policy_t pol;
    vsr_buf_t head;              /* the serialized request head of the current attempt */
    uv_buf_t *bufs;              /* head + body pieces: bufs_inline when they fit */
    uv_buf_t bufs_inline[CALL_INLINE_BUFS];
    unsigned n_bufs;
    uv_timer_t timer;            /* back-off waits and deferred failures */
    uint64_t deadline_ms;        /* absolute, 0 = none */
    uint64_t attempt_start_ms;
    uint64_t attempt_start_us;
    uint64_t tried;              /* endpoints tried (bit i) */
    unsigned attempt;            /* 1-based, current */
    int pending_err;             /* a failure to report from the timer (never synchronously) */
    const char *pending_detail;
    uint64_t retry_after_ms;     /* from the last response's Retry-After */
    unsigned ended : 1;
    unsigned holds_active : 1;   /* counted in the endpoint's active requests */
    unsigned counted_retry : 1;  /* counted in the cluster's active retries */
    unsigned got_head : 1;
    unsigned got_bytes : 1;
    unsigned written : 1;
    unsigned write_failed : 1;
    unsigned stale_retried : 1;
    unsigned paused : 1;
    unsigned starting : 1;       /* inside vsr_upstream_call_start: failures are deferred */
    unsigned h2_sent : 1;        /* the h2 stream's connection is up: past connecting */
    waits_t h2_waits;            /* an h2 attempt's waits on the call's timer (h2_arm, h2_idle_progress) */
    unsigned bound_by_deadline : 1; /* the attempt's timer waits for the total deadline */
    unsigned deadline_hit : 1;   /* that timer fired: the total deadline is over */
};

/* The endpoint's configuration in the call's version (the cluster's
 * identity fixes the endpoints' order). */
#define CALL_BACKEND(call) (&(call)->model->backends[(call)->ep_idx])

/* ---- errors ---- */

const char *vsr_upstream_error_reason(vsr_upstream_error_t e)
{
    switch (e) {
    case VSR_UPSTREAM_E_CONNECT: return "connection failure";
    case VSR_UPSTREAM_E_RESET: return "connection termination";
    case VSR_UPSTREAM_E_PROTOCOL: return "protocol error";
    case VSR_UPSTREAM_E_TIMEOUT: return "upstream request timeout";
    case VSR_UPSTREAM_E_IDLE: return "stream idle timeout";
    case VSR_UPSTREAM_E_ABORTED: return "upstream reset mid-response";
    case VSR_UPSTREAM_E_OVERFLOW: return "overflow";
    }
    return "unknown";
}

/* ---- shared state ---- */

int vsr__upstream_resolve(const vsr_backend_conf_t *b, struct sockaddr_storage *out, vsr_buf_t *err)
{
    memset(out, 0, sizeof(*out));
    struct sockaddr_in *v4 = (struct sockaddr_in *)out;
    struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)out;
    if (inet_pton(AF_INET, b->host, &v4->sin_addr) == 1) {
        v4->sin_family = AF_INET;
        v4->sin_port = htons(b->port);
        return VSR_OK;
    }
    if (inet_pton(AF_INET6, b->host, &v6->sin6_addr) == 1) {
        v6->sin6_family = AF_INET6;
        v6->sin6_port = htons(b->port);
        return VSR_OK;
    }
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    char port[8];
    snprintf(port, sizeof(port), "%u", (unsigned)b->port);
    int rc = getaddrinfo(b->host, port, &hints, &res);
    if (rc != 0 || res == NULL) {
        vsr_buf_printf(err, "backend %s: cannot resolve host \"%s\": %s\n", b->name, b->host, gai_strerror(rc));
        return VSR_ERR;
    }
    memcpy(out, res->ai_addr, res->ai_addrlen);
    freeaddrinfo(res);
    return VSR_OK;
}

/* The registry: every shared cluster some configuration version or some
 * worker still holds, so that the next version finds the state of an
 * unchanged model (health, ejection, breaker, resolved addresses) and each
 * worker its warm connections.  The lock is taken when a version is built
 * or freed, and by a worker the first time it meets a cluster. */
static pthread_mutex_t reg_mu = PTHREAD_MUTEX_INITIALIZER;
static shared_cluster_t *reg_head;
static atomic_uint reg_gen;        /* bumped when a cluster leaves its last configuration */
static vsr_tls_ctx_t *reg_tls;     /* one TLS context for every version, while one needs it */
static unsigned reg_tls_refs;

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
    const unsigned char *s = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ s[i]) * 1099511628211ull;
    return h;
}

/* An endpoint's transport, part of its identity: a change of protocol gets
 * new pools.  Bit 0: TLS, bit 1: HTTP/2. */
static uint8_t ep_transport(const vsr_backend_conf_t *b)
{
    return (uint8_t)((b->tls != 0) | (b->h2 != 0) << 1);
}

uint64_t vsr__upstream_identity_hash(const vsr_model_conf_t *m)
{
    uint64_t h = fnv(1469598103934665603ull, m->name, strlen(m->name) + 1);
    for (size_t j = 0; j < m->n_backends; j++) {
        const vsr_backend_conf_t *b = &m->backends[j];
        uint8_t t = ep_transport(b);
        h = fnv(h, b->host, strlen(b->host) + 1);
        h = fnv(h, &b->port, sizeof(b->port));
        h = fnv(h, &t, 1);
    }
    return h;
}

int vsr__upstream_identity_eq(const shared_cluster_t *sc, const vsr_model_conf_t *m)
{
    if (sc->n_eps != m->n_backends || strcmp(sc->name, m->name) != 0)
        return 0;
    for (size_t j = 0; j < sc->n_eps; j++)
        if (sc->ports[j] != m->backends[j].port || sc->tls[j] != ep_transport(&m->backends[j]) ||
            strcmp(sc->hosts[j], m->backends[j].host) != 0)
            return 0;
    return 1;
}

/* Under reg_mu. */
static shared_cluster_t *reg_lookup(const vsr_model_conf_t *m, uint64_t h)
{
    for (shared_cluster_t *sc = reg_head; sc; sc = sc->reg_next)
        if (sc->hash == h && vsr__upstream_identity_eq(sc, m))
            return sc;
    return NULL;
}

static vsr_tls_ctx_t *reg_tls_ref(vsr_buf_t *err)
{
    if (reg_tls == NULL && (reg_tls = vsr__tls_ctx_new(1, err)) == NULL)
        return NULL;
    reg_tls_refs++;
    return reg_tls;
}

static void reg_tls_unref(vsr_tls_ctx_t *ctx)
{
    if (ctx == NULL)
        return;
    if (--reg_tls_refs == 0) {
        vsr__tls_ctx_free(reg_tls);
        reg_tls = NULL;
    }
}

static void cluster_unref_locked(shared_cluster_t *sc);

/* The cluster's limit of requests in flight: reliability.max_requests, else
 * 1024, 4096 once retries or ejection are enabled.  Read from the call's version, since a cluster
 * outlives versions that may set it differently. */
static uint32_t max_requests_for(const vsr_model_conf_t *m)
{
    const vsr_reliability_conf_t *r = m->has_reliability ? &m->reliability : NULL;
    if (r && r->has_max_requests)
        return r->max_requests;
    int enhanced = r && ((r->has_retry_count && r->retry_count > 0) || (r->has_consecutive_5xx && r->consecutive_5xx > 0));
    return enhanced ? 4096 : 1024;
}

/* Under reg_mu: a new cluster for m, in the registry with one reference. */
static shared_cluster_t *reg_create(const vsr_model_conf_t *m, uint64_t h, vsr_buf_t *err)
{
    shared_cluster_t *sc = vsr_calloc(1, sizeof(*sc));
    size_t n = m->n_backends;
    sc->hash = h;
    sc->name = vsr_strdup(m->name);
    sc->n_eps = n;
    sc->hosts = vsr_calloc(n ? n : 1, sizeof(char *));
    sc->ports = vsr_calloc(n ? n : 1, sizeof(uint16_t));
    sc->tls = vsr_calloc(n ? n : 1, 1);
    sc->eps = vsr_calloc(n ? n : 1, sizeof(vsr_endpoint_state_t));
    sc->ep_ptrs = vsr_calloc(n ? n : 1, sizeof(vsr_endpoint_state_t *));
    sc->addrs = vsr_calloc(n ? n : 1, sizeof(struct sockaddr_storage));
    sc->named = vsr_calloc(n ? n : 1, 1);
    pthread_mutex_init(&sc->addr_mu, NULL);
    int ok = 1, tls = 0;
    for (size_t j = 0; j < n; j++) {
        const vsr_backend_conf_t *b = &m->backends[j];
        sc->hosts[j] = vsr_strdup(b->host);
        sc->ports[j] = b->port;
        sc->tls[j] = ep_transport(b);
        tls |= sc->tls[j] & 1;
        vsr__endpoint_state_init(&sc->eps[j]);
        sc->ep_ptrs[j] = &sc->eps[j];
        unsigned char bin[16];
        sc->named[j] = inet_pton(AF_INET, b->host, bin) != 1 && inet_pton(AF_INET6, b->host, bin) != 1;
        /* a name that does not resolve yet (a Kubernetes service, host.docker.internal) does not stop the
         * version: the endpoint stays out of rotation until the resolver finds it (dns.c) */
        vsr_buf_t why;
        vsr_buf_init(&why, 512);
        if (vsr__upstream_resolve(b, &sc->addrs[j], &why) != VSR_OK) {
            atomic_store(&sc->eps[j].unresolved, 1);
            vsr_log_warn("upstream", "model %s: %.*s; the endpoint is unavailable until it resolves (retried every "
                         "%u s)", m->name, (int)(why.len ? why.len - 1 : 0), why.data ? why.data : "",
                         VSR_DNS_RETRY_MS / 1000);
        }
        vsr_buf_free(&why);
    }
    if (ok && tls && (sc->tls_ctx = reg_tls_ref(err)) == NULL)
        ok = 0;
    vsr__breaker_init(&sc->breaker);
    atomic_init(&sc->refs, 1);
    atomic_init(&sc->snap_refs, 0);
    sc->reg_next = reg_head;
    reg_head = sc;
    if (!ok) {
        cluster_unref_locked(sc);
        return NULL;
    }
    return sc;
}

/* Under reg_mu. */
static void cluster_unref_locked(shared_cluster_t *sc)
{
    if (atomic_fetch_sub(&sc->refs, 1) != 1)
        return;
    for (shared_cluster_t **pp = &reg_head; *pp; pp = &(*pp)->reg_next) {
        if (*pp == sc) {
            *pp = sc->reg_next;
            break;
        }
    }
    for (size_t j = 0; j < sc->n_eps; j++)
        vsr_free(sc->hosts[j]);
    reg_tls_unref(sc->tls_ctx);
    vsr_free(sc->hosts);
    vsr_free(sc->ports);
    vsr_free(sc->tls);
    vsr_free(sc->eps);
    vsr_free(sc->ep_ptrs);
    vsr_free(sc->addrs);
    vsr_free(sc->named);
    pthread_mutex_destroy(&sc->addr_mu);
    vsr_free(sc->name);
    vsr_free(sc);
}

void vsr__upstream_cluster_ref(shared_cluster_t *sc)
{
    atomic_fetch_add(&sc->refs, 1);
}

void vsr__upstream_addr(shared_cluster_t *sc, const struct sockaddr_storage *addr, struct sockaddr_storage *out)
{
    pthread_mutex_lock(&sc->addr_mu);
    memcpy(out, addr, sizeof(*out));
    pthread_mutex_unlock(&sc->addr_mu);
}

void vsr__upstream_cluster_unref(shared_cluster_t *sc)
{
    pthread_mutex_lock(&reg_mu);
    cluster_unref_locked(sc);
    pthread_mutex_unlock(&reg_mu);
}

shared_cluster_t *vsr__upstream_registry_find(const vsr_model_conf_t *m)
{
    uint64_t h = vsr__upstream_identity_hash(m);
    pthread_mutex_lock(&reg_mu);
    shared_cluster_t *sc = reg_lookup(m, h);
    if (sc)
        atomic_fetch_add(&sc->refs, 1);
    pthread_mutex_unlock(&reg_mu);
    return sc;
}

vsr_upstream_shared_t *vsr_upstream_shared_new(const vsr_config_t *cfg, vsr_buf_t *err)
{
    vsr_upstream_shared_t *sh = vsr_calloc(1, sizeof(*sh));
    sh->cfg = cfg;
    /* the provider models, then the external models (remote classifiers) the router calls itself:
     * clusters[i] is models[i] for i < n_models */
    size_t total = cfg->n_models + cfg->n_externals + cfg->n_plugin_models;
    sh->clusters = vsr_calloc(total ? total : 1, sizeof(shared_cluster_t *));
    int ok = 1;
    pthread_mutex_lock(&reg_mu);
    for (size_t i = 0; ok && i < total; i++) {
        const vsr_model_conf_t *m = vsr__upstream_cluster_model(cfg, i);
        uint64_t h = vsr__upstream_identity_hash(m);
        shared_cluster_t *sc = reg_lookup(m, h);
        if (sc) {
            atomic_fetch_add(&sc->refs, 1);
            sh->n_reused++;
        } else if ((sc = reg_create(m, h, err)) == NULL) {
            ok = 0;
            break;
        }
        atomic_fetch_add(&sc->snap_refs, 1);
        sh->clusters[sh->n_clusters++] = sc;
    }
    if (ok) {
        for (size_t i = 0; i < sh->n_clusters && sh->tls_ctx == NULL; i++)
            if (sh->clusters[i]->tls_ctx)
                sh->tls_ctx = reg_tls_ref(err);
    }
    pthread_mutex_unlock(&reg_mu);
    if (!ok) {
        vsr_upstream_shared_free(sh);
        return NULL;
    }
    return sh;
}

size_t vsr_upstream_shared_reused(const vsr_upstream_shared_t *sh)
{
    return sh->n_reused;
}

void vsr_upstream_shared_free(vsr_upstream_shared_t *sh)
{
    if (sh == NULL)
        return;
    VSR_BUG_ON(sh->health != NULL); /* vsr_upstream_health_stop() first */
    pthread_mutex_lock(&reg_mu);
    for (size_t i = 0; i < sh->n_clusters; i++) {
        if (atomic_fetch_sub(&sh->clusters[i]->snap_refs, 1) == 1)
            atomic_fetch_add(&reg_gen, 1); /* workers may now drop their pools for it */
        cluster_unref_locked(sh->clusters[i]);
    }
    reg_tls_unref(sh->tls_ctx);
    pthread_mutex_unlock(&reg_mu);
    vsr_free(sh->clusters);
    vsr_free(sh);
}

void vsr_upstream_endpoint_state(vsr_upstream_shared_t *sh, size_t model, size_t backend, int *healthy, int *ejected)
{
    vsr_endpoint_state_t *e = &sh->clusters[model]->eps[backend];
    *healthy = atomic_load(&e->healthy);
    *ejected = vsr__outlier_ejected(e, vsr_now_ms());
}

/* ---- a worker's clusters ---- */

/* A worker's clusters live in a hash table keyed by identity, created the
 * first time a request of any version needs one, and kept across versions:
 * a configuration change that leaves a model's endpoints alone finds its
 * warm connections here.  A cluster that no live version has any more is
 * dropped once nothing of it is in use. */
#define UP_BUCKETS 1024

vsr_upstream_t *vsr_upstream_new(uv_loop_t *loop, const vsr_config_t *cfg, vsr_upstream_shared_t *sh)
{
    VSR_UNUSED(cfg);
    VSR_UNUSED(sh);
    vsr_upstream_t *up = vsr_calloc(1, sizeof(*up));
    up->loop = loop;
    up->buckets = vsr_calloc(UP_BUCKETS, sizeof(cluster_t *));
    up->gen = atomic_load(&reg_gen);
    vsr__rng_seed(&up->rng, vsr_now_us() ^ (uint64_t)(uintptr_t)up);
    return up;
}

static void cluster_free(cluster_t *cl)
{
    for (size_t j = 0; j < cl->n_eps; j++)
        vsr__h2_pool_free(cl->eps[j].h2); /* no stream left: the cluster had no users */
    vsr__upstream_cluster_unref(cl->sc);
    vsr_free(cl->eps);
    vsr_free(cl->weights);
    vsr_free(cl->cur);
    vsr_free(cl);
}

static void upstream_release(vsr_upstream_t *up)
{
    for (size_t b = 0; b < UP_BUCKETS; b++) {
        while (up->buckets[b]) {
            cluster_t *cl = up->buckets[b];
            up->buckets[b] = cl->next;
            cluster_free(cl);
        }
    }
    while (up->dead) {
        cluster_t *cl = up->dead;
        up->dead = cl->next;
        cluster_free(cl);
    }
    vsr_free(up->buckets);
    vsr_free(up);
}

static void uconn_close(uconn_t *uc);

/* Closes the idle HTTP/1.1 connections; with h2 also the HTTP/2 pools
 * (their streams must be gone: only when the worker's upstream goes). */
static void close_idle(cluster_t *cl, int h2)
{
    for (size_t j = 0; j < cl->n_eps; j++) {
        endpoint_t *ep = &cl->eps[j];
        while (ep->idle)
            uconn_close(ep->idle); /* unlinks itself */
        while (ep->connecting)
            uconn_close(ep->connecting);
        if (h2) {
            vsr__h2_pool_free(ep->h2);
            ep->h2 = NULL;
        }
    }
}

void vsr_upstream_free(vsr_upstream_t *up)
{
    if (up == NULL)
        return;
    up->freeing = 1;
    for (size_t b = 0; b < UP_BUCKETS; b++)
        for (cluster_t *cl = up->buckets[b]; cl; cl = cl->next)
            close_idle(cl, 1);
    for (cluster_t *cl = up->dead; cl; cl = cl->next)
        close_idle(cl, 1);
    if (up->live == 0)
        upstream_release(up);
}

static void live_put(vsr_upstream_t *up)
{
    up->live--;
    if (up->freeing && up->live == 0)
        upstream_release(up);
}

/* A dead cluster goes once its last call and connection are gone. */
static void cluster_put(cluster_t *cl)
{
    if (!cl->dead || cl->users || cl->n_conns || cl->up->freeing)
        return;
    vsr_upstream_t *up = cl->up;
    for (cluster_t **pp = &up->dead; *pp; pp = &(*pp)->next) {
        if (*pp == cl) {
            *pp = cl->next;
            break;
        }
    }
    cluster_free(cl);
}

/* Drops the clusters no configuration has any more (their idle connections
 * close; one still in use goes when its last call ends). */
static void sweep(vsr_upstream_t *up)
{
    for (size_t b = 0; b < UP_BUCKETS; b++) {
        for (cluster_t **pp = &up->buckets[b]; *pp;) {
            cluster_t *cl = *pp;
            if (atomic_load(&cl->sc->snap_refs) != 0) {
                pp = &cl->next;
                continue;
            }
            *pp = cl->next;
            cl->dead = 1;
            cl->next = up->dead;
            up->dead = cl;
            close_idle(cl, 0);
            cluster_put(cl);
        }
    }
}

void vsr__upstream_hold(vsr_upstream_t *up)
{
    up->live++;
}

void vsr__upstream_put(vsr_upstream_t *up)
{
    live_put(up);
}

static cluster_t *find_cluster(vsr_upstream_t *up, const vsr_model_conf_t *model)
{
    unsigned gen = atomic_load(&reg_gen);
    if (gen != up->gen) {
        up->gen = gen;
        sweep(up);
    }
    uint64_t h = vsr__upstream_identity_hash(model);
    cluster_t **bucket = &up->buckets[h % UP_BUCKETS];
    for (cluster_t *cl = *bucket; cl; cl = cl->next)
        if (cl->sc->hash == h && vsr__upstream_identity_eq(cl->sc, model))
            return cl;
    shared_cluster_t *sc = vsr__upstream_registry_find(model);
    if (sc == NULL)
        return NULL;
    cluster_t *cl = vsr_calloc(1, sizeof(*cl));
    cl->up = up;
    cl->sc = sc;
    cl->n_eps = sc->n_eps;
    cl->eps = vsr_calloc(cl->n_eps ? cl->n_eps : 1, sizeof(endpoint_t));
    cl->weights = vsr_calloc(cl->n_eps ? cl->n_eps : 1, sizeof(uint32_t));
    cl->cur = vsr_calloc(cl->n_eps ? cl->n_eps : 1, sizeof(int64_t));
    cl->states = sc->ep_ptrs;
    for (size_t j = 0; j < cl->n_eps; j++) {
        cl->eps[j].addr = &sc->addrs[j];
        cl->eps[j].state = &sc->eps[j];
        cl->weights[j] = model->backends[j].weight;
        if (model->backends[j].h2)
            cl->eps[j].h2 = vsr__h2_pool_new(up, up->loop, sc->hosts[j], sc->tls[j] & 1, &sc->addrs[j], sc->tls_ctx,
                                             sc);
    }
    cl->next = *bucket;
    *bucket = cl;
    return cl;
}

/* ---- connection life ---- */

static void uconn_close_cb(uv_handle_t *h)
{
    uconn_t *uc = h->data;
    if (--uc->pending_closes > 0)
        return;
    vsr_upstream_t *up = uc->up;
    cluster_t *cl = uc->cl;
    if (uc->counted_conn)
        atomic_fetch_sub(&cl->sc->connections, 1);
    vsr_http_parser_free(&uc->parser);
    vsr__tls_free(uc->tls);
    vsr_free(uc);
    cl->n_conns--;
    cluster_put(cl);
    live_put(up);
}

static void idle_unlink(uconn_t *uc)
{
    endpoint_t *ep = uc->ep;
    for (uconn_t **pp = &ep->idle; *pp; pp = &(*pp)->next_idle) {
        if (*pp == uc) {
            *pp = uc->next_idle;
            ep->n_idle--;
            break;
        }
    }
    uc->next_idle = NULL;
}

static void orphan_unlink(uconn_t *uc)
{
    if (!uc->orphan)
        return;
    uc->orphan = 0;
    for (uconn_t **pp = &uc->ep->connecting; *pp; pp = &(*pp)->next_idle) {
        if (*pp == uc) {
            *pp = uc->next_idle;
            break;
        }
    }
    uc->next_idle = NULL;
}

static void uncount_pending(uconn_t *uc)
{
    if (uc->counted_pending) {
        uc->counted_pending = 0;
        atomic_fetch_sub(&uc->cl->sc->pending, 1);
    }
}

static void uconn_close(uconn_t *uc)
{
    if (uc->state == UC_CLOSING)
        return;
    if (uc->state == UC_IDLE)
        idle_unlink(uc);
    orphan_unlink(uc);
    uncount_pending(uc);
    uc->state = UC_CLOSING;
    uc->call = NULL;
    uc->pending_closes = 2;
    uv_close((uv_handle_t *)&uc->tcp, uconn_close_cb);
    uv_close((uv_handle_t *)&uc->timer, uconn_close_cb);
}

static int on_resp_head(void *ud, vsr_http_head_t *head);
static int on_resp_body(void *ud, const char *p, size_t n);
static int on_resp_complete(void *ud);

static const vsr_http_callbacks_t resp_callbacks = {on_resp_head, on_resp_body, on_resp_complete};

static uconn_t *uconn_new(vsr_upstream_t *up, cluster_t *cl, endpoint_t *ep)
{
    uconn_t *uc = vsr_calloc(1, sizeof(*uc));
    uc->up = up;
    uc->cl = cl;
    uc->ep = ep;
    cl->n_conns++;
    uc->state = UC_CONNECTING;
    uv_tcp_init(up->loop, &uc->tcp);
    uv_timer_init(up->loop, &uc->timer);
    uc->tcp.data = uc;
    uc->timer.data = uc;
    uc->connect_req.data = uc;
    uc->write_req.data = uc;
    vsr_http_parser_init(&uc->parser, VSR_HTTP_RESPONSE, NULL, &resp_callbacks, uc);
    up->live++;
    return uc;
}

static void uc_timer_cb(uv_timer_t *t);

/* The timer, wanted for a deadline ms from now (0: not at all). */
static void waits_arm(waits_t *wt, uv_timer_t *t, uv_timer_cb cb, uint64_t ms)
{
    wt->idle_ms = 0;
    if (ms == 0)
        wt->due = 0;
    else
        vsr_timer_want(t, cb, &wt->due, ms);
}

/* Progress on a response: its stream-idle clock (ms; 0 stops it) restarts.
 * Moving the timer on every read is a heap update each (a third of a paced
 * stream's cost per event), so only the time of the progress is noted. */
static void waits_progress(waits_t *wt, uv_timer_t *t, uv_timer_cb cb, uint64_t ms)
{
    if (ms == 0) {
        waits_arm(wt, t, cb, 0);
        return;
    }
    wt->progress_at = uv_now(t->loop);
    if (wt->idle_ms == ms && wt->due && uv_is_active((uv_handle_t *)t))
        return;
    waits_arm(wt, t, cb, ms);
    wt->idle_ms = ms;
}

/* In the timer's callback: 1 when the wait is over (its deadline, or the
 * stream idle that long); 0 when nothing is wanted, or the timer fired early
 * and is armed again for what is left. */
static int waits_over(const waits_t *wt, uv_timer_t *t, uv_timer_cb cb)
{
    if (wt->due == 0 || !vsr_timer_due(t, cb, wt->due))
        return 0;
    return wt->idle_ms == 0 || vsr_timer_idle(t, cb, wt->progress_at, wt->idle_ms);
}

/* The connection's timer: a request's connect, first-byte and idle timeouts
 * and the pool's idle timeout after it cost no timer-heap update. */
static void arm(uconn_t *uc, uint64_t ms)
{
    waits_arm(&uc->waits, &uc->timer, uc_timer_cb, ms);
}

static void idle_progress(uconn_t *uc, uint64_t ms)
{
    waits_progress(&uc->waits, &uc->timer, uc_timer_cb, ms);
}

static void uconn_make_idle(uconn_t *uc)
{
    endpoint_t *ep = uc->ep;
    if (uc->up->freeing || uc->cl->dead || ep->n_idle >= POOL_MAX_IDLE) {
        uconn_close(uc);
        return;
    }
    uc->state = UC_IDLE;
    uc->call = NULL;
    uc->next_idle = ep->idle;
    ep->idle = uc;
    ep->n_idle++;
    arm(uc, POOL_IDLE_TIMEOUT_MS);
}

/* ---- the call's end ---- */

static void call_close_cb(uv_handle_t *h)
{
    vsr_upstream_call_t *call = h->data;
    vsr_upstream_t *up = call->up;
    cluster_t *cl = call->cl;
    vsr_free(call);
    cl->users--;
    cluster_put(cl);
    live_put(up);
}

static void release_attempt(vsr_upstream_call_t *call)
{
    if (call->holds_active) {
        call->holds_active = 0;
        atomic_fetch_sub(&call->ep->state->active, 1);
    }
}

/* Ends the call: counters released, connection detached (and closed unless
 * `keep`), memory gone once the call's timer has closed.  The caller runs the
 * final callback afterwards, so that callback may start the next call. */
static void call_end(vsr_upstream_call_t *call)
{
    VSR_BUG_ON(call->ended);
    call->ended = 1;
    release_attempt(call);
    if (call->counted_retry)
        atomic_fetch_sub(&call->cl->sc->active_retries, 1);
    atomic_fetch_sub(&call->cl->sc->active_requests, 1);
    if (call->uc) {
        call->uc->call = NULL;
        uconn_close(call->uc);
        call->uc = NULL;
    }
    vsr__h2_stream_detach(call->h2s);
    call->h2s = NULL;
    vsr_buf_free(&call->head);
    if (call->bufs != call->bufs_inline)
        vsr_free(call->bufs);
    call->bufs = NULL;
    uv_close((uv_handle_t *)&call->timer, call_close_cb);
}

static void fail_later(vsr_upstream_call_t *call, vsr_upstream_error_t err, const char *detail);

static void call_fail(vsr_upstream_call_t *call, vsr_upstream_error_t err, const char *detail)
{
    if (call->starting) {
        fail_later(call, err, detail); /* never report from inside call_start */
        return;
    }
    const vsr_upstream_callbacks_t *cb = call->cb;
    void *ud = call->ud;
    int retried = call->attempt > 1;
    call_end(call);
    if (cb && cb->on_error)
        cb->on_error(ud, err, detail, retried);
}

static void record_attempt(vsr_upstream_call_t *call, int status, vsr_upstream_error_t err)
{
    vsr_upstream_report_t *r = call->req.report;
    if (r == NULL)
        return;
    if (r->n_attempts < VSR_UPSTREAM_MAX_ATTEMPTS) {
        vsr_upstream_attempt_t *a = &r->attempts[r->n_attempts];
        a->model = call->model;
        a->backend = CALL_BACKEND(call);
        a->retry = call->attempt > 1;
        a->status = status;
        a->error = err;
        uint64_t end_us = vsr_now_us();
        a->duration_ms = end_us / 1000u - call->attempt_start_ms;
        a->start_us = call->attempt_start_us;
        a->end_us = end_us;
    }
    r->n_attempts++;
}

/* ---- attempts ---- */

static void alloc_cb(uv_handle_t *h, size_t suggested, uv_buf_t *buf);
static void read_cb(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf);
static void attempt_start(vsr_upstream_call_t *call);
static void call_h2_start(vsr_upstream_call_t *call);
static void h2_arm(vsr_upstream_call_t *call, uint64_t ms);
static void h2_idle_progress(vsr_upstream_call_t *call, uint64_t ms);
static int build_head(vsr_upstream_call_t *call);

static void call_timer_cb(uv_timer_t *t)
{
    vsr_upstream_call_t *call = t->data;
    if (call->ended)
        return;
    if (call->pending_err) {
        call_fail(call, (vsr_upstream_error_t)call->pending_err, call->pending_detail);
        return;
    }
    attempt_start(call); /* the back-off is over */
}

/* Fails the call from the loop, never from inside the caller's stack. */
static void fail_later(vsr_upstream_call_t *call, vsr_upstream_error_t err, const char *detail)
{
    call->pending_err = err;
    call->pending_detail = detail;
    uv_timer_start(&call->timer, call_timer_cb, 0, 0);
}

static uint64_t remaining_ms(const vsr_upstream_call_t *call, uint64_t now)
{
    if (call->deadline_ms == 0)
        return 0;
    return call->deadline_ms > now ? call->deadline_ms - now : 1;
}

static uint64_t min_nonzero(uint64_t a, uint64_t b)
{
    return a == 0 ? b : b == 0 ? a : VSR_MIN(a, b);
}

/* An attempt failed: one info line naming model, endpoint and reason, at
 * most FAIL_LOG_PER_S a second per worker (the rest are counted and the
 * next line says how many were left out). */
static void log_attempt_failure(vsr_upstream_call_t *call, int status, vsr_upstream_error_t err, const char *detail,
                                uint64_t now)
{
    vsr_upstream_t *up = call->up;
    if (now - up->fail_log_window_ms >= 1000) {
        up->fail_log_window_ms = now;
        up->fail_log_lines = 0;
    }
    if (up->fail_log_lines >= FAIL_LOG_PER_S) {
        up->fail_log_suppressed++;
        return;
    }
    up->fail_log_lines++;
    const vsr_backend_conf_t *b = CALL_BACKEND(call);
    char why[96];
    if (status)
        snprintf(why, sizeof(why), "status %d", status);
    else
        snprintf(why, sizeof(why), "%s", vsr_upstream_error_reason(err));
    char more[64] = "";
    if (up->fail_log_suppressed) {
        snprintf(more, sizeof(more), " (%u similar lines left out)", up->fail_log_suppressed);
        up->fail_log_suppressed = 0;
    }
    vsr_log_info("upstream", "model %s endpoint %s (%s:%u) attempt %u failed: %s%s%s%s", call->model->name, b->name, b->host, (unsigned)b->port, call->attempt, why,
                 detail && *detail && !status ? " (" : "", detail && !status ? detail : "",
                 detail && *detail && !status ? ")" : "");
    if (more[0])
        vsr_log_info("upstream", "%s", more + 1);
}

/* An attempt's wait before its response head: the smallest of `own` (its
 * connect, first-byte or per-try timeout; 0 = none) and what is left of the
 * total deadline.  libuv counts a timer from the loop's cached time, the
 * deadline is on vsr_now_ms(): after long work in one loop iteration the
 * cached time lags, and a timer armed for the rest of the deadline would
 * fire that much early, seen as a per-try timeout with time left, so one
 * more attempt would start.  So the loop time is refreshed first, and the
 * call remembers when the deadline is what the timer waits for: when it
 * fires, the deadline is over whatever the clocks say. */
static uint64_t attempt_wait(vsr_upstream_call_t *call, uint64_t own)
{
    uv_update_time(call->up->loop);
    uint64_t left = remaining_ms(call, vsr_now_ms());
    uint64_t ms = min_nonzero(own, left);
    call->bound_by_deadline = left != 0 && ms == left;
    return ms;
}

/* An attempt ended before its response was delivered: record it, then retry
 * (after the back-off, on another endpoint when there is one) or fail. */
static void attempt_failed(vsr_upstream_call_t *call, vsr_outcome_t o, int status, vsr_upstream_error_t err,
                           const char *detail)
{
    uint64_t now = vsr_now_ms();
    cluster_t *cl = call->cl;
    const vsr_reliability_conf_t *rel = call->model->has_reliability ? &call->model->reliability : NULL;
    int is_5xx = o != VSR_OUTCOME_STATUS || status >= 500;
    log_attempt_failure(call, o == VSR_OUTCOME_STATUS ? status : 0, err, detail, now);
    if (rel && vsr__outlier_record(call->ep->state, is_5xx, rel, cl->states, cl->n_eps, now))
        vsr_log_info("upstream", "model %s endpoint %s (%s:%u) ejected: %u consecutive failures", call->model->name,
                     CALL_BACKEND(call)->name,
                     CALL_BACKEND(call)->host, (unsigned)CALL_BACKEND(call)->port, (unsigned)rel->consecutive_5xx);
    record_attempt(call, status, o == VSR_OUTCOME_STATUS ? 0 : err);
    release_attempt(call);
    if (call->uc) {
        call->uc->call = NULL;
        uconn_close(call->uc);
        call->uc = NULL;
    }
    vsr__h2_stream_detach(call->h2s);
    call->h2s = NULL;
    int deadline_passed = call->deadline_ms && (now >= call->deadline_ms || call->deadline_hit);
    int retry = !deadline_passed && call->attempt <= call->pol.retry_count &&
                vsr__policy_retriable(&call->pol, o, status);
    if (retry && !call->counted_retry) {
        uint32_t active = atomic_load(&cl->sc->active_requests);
        uint32_t retries = atomic_load(&cl->sc->active_retries);
        retry = vsr__budget_allows(active, retries, &call->pol);
        if (retry) {
            call->counted_retry = 1;
            atomic_fetch_add(&cl->sc->active_retries, 1);
        }
    }
    if (!retry) {
        if (deadline_passed)
            call_fail(call, VSR_UPSTREAM_E_TIMEOUT, "total timeout");
        else
            call_fail(call, err, detail);
        return;
    }
    if (call->req.report)
        call->req.report->retries++;
    /* the backend's Retry-After, when honoured, replaces the back-off */
    uint64_t wait = call->retry_after_ms ? call->retry_after_ms : vsr__backoff_ms(&call->pol, call->attempt, &call->up->rng);
    if (o == VSR_OUTCOME_REFUSED_STREAM)
        wait = 0; /* the server did nothing with it: at once (ref §5.3) */
    call->retry_after_ms = 0;
    if (call->deadline_ms && now + wait >= call->deadline_ms) {
        call_fail(call, VSR_UPSTREAM_E_TIMEOUT, "total timeout");
        return;
    }
    uv_timer_start(&call->timer, call_timer_cb, wait, 0);
}

static void write_cb(uv_write_t *w, int status)
{
    uconn_t *uc = w->data;
    uc->writing = 0;
    if (uc->state == UC_CLOSING || uc->call == NULL)
        return;
    if (status < 0) {
        /* The read side reports the failure (EOF or reset follows); an
         * early answer from the backend may still arrive and is relayed. */
        uc->call->write_failed = 1;
        return;
    }
    uc->call->written = 1;
}

static int tls_flush(uconn_t *uc, int carries_request);

/* Writes the request: what the socket takes at once without a write request
 * (a queued one's completion makes libuv drop POLLOUT: an epoll_ctl per
 * request even when the write never waited), the rest queued from where the
 * socket stopped.  Returns < 0 when the write could not be queued. */
static int send_bufs(uconn_t *uc, vsr_upstream_call_t *call, const uv_buf_t *bufs, unsigned n)
{
    uv_stream_t *s = (uv_stream_t *)&uc->tcp;
    uv_buf_t small[8], *rest = NULL;
    size_t skip = 0;
    if (s->write_queue_size == 0) {
        int k = uv_try_write(s, bufs, n);
        if (k >= 0) {
            skip = (size_t)k;
            while (n > 0 && skip >= bufs[0].len) {
                skip -= bufs[0].len;
                bufs++;
                n--;
            }
            if (n == 0) {
                call->written = 1;
                return 0;
            }
        }
    }
    if (skip) {
        rest = n <= 8 ? small : vsr_malloc(n * sizeof(*bufs));
        memcpy(rest, bufs, n * sizeof(*bufs));
        rest[0].base += skip;
        rest[0].len -= skip;
        bufs = rest;
    }
    uc->writing = 1;
    int rc = uv_write(&uc->write_req, s, bufs, n, write_cb);
    if (rest != small)
        vsr_free(rest);
    if (rc < 0)
        uc->writing = 0;
    return rc;
}


static void call_send(vsr_upstream_call_t *call)
{
    uconn_t *uc = call->uc;
    uc->state = UC_ACTIVE;
    vsr_http_parser_set_head_request(&uc->parser, call->req.head_request);
    call->bufs[0] = uv_buf_init(call->head.data, (unsigned)call->head.len);
    if (uc->tls) {
        /* encrypt head and body; the ciphertext goes out in one write */
        int ok = 1;
        for (unsigned i = 0; i < call->n_bufs && ok; i++)
            if (call->bufs[i].len)
                ok = vsr__tls_write(uc->tls, call->bufs[i].base, call->bufs[i].len) == VSR_OK;
        if (!ok || tls_flush(uc, 1) != VSR_OK)
            call->write_failed = 1;
    } else if (send_bufs(uc, call, call->bufs, call->n_bufs) < 0) {
        call->write_failed = 1;
    }
    if (!call->paused)
        uv_read_start((uv_stream_t *)&uc->tcp, alloc_cb, read_cb);
    arm(uc, attempt_wait(call, min_nonzero(call->pol.first_byte_ms, call->pol.per_try_ms)));
}

static void connect_cb(uv_connect_t *req, int status)
{
    uconn_t *uc = req->data;
    if (uc->state == UC_CLOSING || status == UV_ECANCELED)
        return;
    uncount_pending(uc);
    vsr_upstream_call_t *call = uc->call;
    if (call == NULL) {
        /* its call was cancelled while connecting, nothing sent: the
         * connection is as good as a pooled one */
        orphan_unlink(uc);
        if (status < 0) {
            uconn_close(uc);
        } else {
            uv_tcp_nodelay(&uc->tcp, 1);
            uconn_make_idle(uc);
        }
        return;
    }
    if (status < 0) {
        attempt_failed(call, VSR_OUTCOME_CONNECT_FAILURE, 0, VSR_UPSTREAM_E_CONNECT, uv_strerror(status));
        return;
    }
    uv_tcp_nodelay(&uc->tcp, 1);
    if (CALL_BACKEND(call)->tls) {
        uc->tls = vsr__tls_new(call->cl->sc->tls_ctx, CALL_BACKEND(call)->host);
        if (uc->tls == NULL || vsr__tls_handshake(uc->tls) == VSR_ERR || tls_flush(uc, 0) != VSR_OK) {
            attempt_failed(call, VSR_OUTCOME_CONNECT_FAILURE, 0, VSR_UPSTREAM_E_CONNECT, "TLS setup failed");
            return;
        }
        uc->state = UC_ACTIVE;
        uv_read_start((uv_stream_t *)&uc->tcp, alloc_cb, read_cb);
        arm(uc, attempt_wait(call, call->pol.connect_ms)); /* the handshake counts as connecting */
        return;
    }
    call_send(call);
}

const char *vsr__call_admit_connection(const vsr_upstream_call_t *call, shared_cluster_t *sc)
{
    const vsr_reliability_conf_t *r = call->model->has_reliability ? &call->model->reliability : NULL;
    unsigned max_connections = r && r->has_max_connections ? r->max_connections : 1024;
    unsigned max_pending = r && r->has_max_pending_requests ? r->max_pending_requests : 1024;
    if (atomic_fetch_add(&sc->connections, 1) >= max_connections) {
        atomic_fetch_sub(&sc->connections, 1);
        return "connection overflow";
    }
    if (atomic_fetch_add(&sc->pending, 1) >= max_pending) {
        atomic_fetch_sub(&sc->pending, 1);
        atomic_fetch_sub(&sc->connections, 1);
        return "pending overflow";
    }
    return NULL;
}

/* Opens a fresh connection for the call's current attempt. */
static void call_connect(vsr_upstream_call_t *call)
{
    cluster_t *cl = call->cl;
    const char *overflow = vsr__call_admit_connection(call, cl->sc);
    if (overflow) {
        call_fail(call, VSR_UPSTREAM_E_OVERFLOW, overflow);
        return;
    }
    uconn_t *uc = uconn_new(call->up, cl, call->ep);
    uc->counted_conn = 1;
    uc->counted_pending = 1;
    uc->call = call;
    call->uc = uc;
    struct sockaddr_storage addr;
    vsr__upstream_addr(cl->sc, call->ep->addr, &addr);
    int rc = addr.ss_family == 0 ? UV_EAI_NONAME : uv_tcp_connect(&uc->connect_req, &uc->tcp,
                                                                  (const struct sockaddr *)&addr, connect_cb);
    if (rc < 0) {
        attempt_failed(call, VSR_OUTCOME_CONNECT_FAILURE, 0, VSR_UPSTREAM_E_CONNECT, uv_strerror(rc));
        return;
    }
    arm(uc, attempt_wait(call, call->pol.connect_ms));
}

/* One attempt: choose an endpoint (one not tried yet when there is one),
 * build the head for it, and send on a pooled or a new connection. */
static void attempt_start(vsr_upstream_call_t *call)
{
    cluster_t *cl = call->cl;
    uint64_t now_us = vsr_now_us(), now = now_us / 1000u; /* one clock read: vsr_now_ms() is this */
    if (call->deadline_ms && now >= call->deadline_ms) {
        call_fail(call, VSR_UPSTREAM_E_TIMEOUT, "total timeout");
        return;
    }
    call->attempt++;
    call->attempt_start_ms = now;
    call->attempt_start_us = now_us;
    call->written = call->write_failed = call->got_bytes = 0;
    int idx = vsr__lb_pick(cl->states, cl->weights, cl->cur, cl->n_eps, call->pol.least_request, call->tried, now,
                           &call->up->rng);
    VSR_BUG_ON(idx < 0);
    call->ep_idx = idx;
    call->ep = &cl->eps[idx];
    if (idx < 64)
        call->tried |= 1ull << idx;
    call->holds_active = 1;
    atomic_fetch_add(&call->ep->state->active, 1);
    vsr_buf_reset(&call->head);
    build_head(call);
    endpoint_t *ep = call->ep;
    if (ep->h2 && vsr__h2_pool_usable(ep->h2)) {
        call_h2_start(call);
        return;
    }
    if (ep->idle) {
        uconn_t *uc = ep->idle;
        idle_unlink(uc);
        uc->state = UC_ACTIVE;
        uc->reused = 1;
        uc->call = call;
        call->uc = uc;
        call_send(call);
    } else {
        call_connect(call);
    }
}

static const char *auth_header_name(const vsr_backend_conf_t *b)
{
    return b->resolved_api_key && b->resolved_api_key[0] ? (b->auth_header ? b->auth_header : "authorization") : NULL;
}

/* True when the endpoint sets this field itself (credentials, extra_headers):
 * the request's own field of that name is not forwarded. */
static int endpoint_sets(const vsr_backend_conf_t *b, vsr_slice_t name)
{
    const char *auth = auth_header_name(b);
    if (auth && vsr_slice_case_eq_cstr(name, auth))
        return 1;
    for (size_t i = 0; i < b->n_extra_headers; i++)
        if (vsr_slice_case_eq_cstr(name, b->extra_headers[i].name))
            return 1;
    return 0;
}

/* Provider credentials and extra headers of the endpoint. */
static int write_endpoint_headers(vsr_buf_t *h, const vsr_backend_conf_t *b)
{
    int rc = VSR_OK;
    const char *auth = auth_header_name(b);
    if (auth) {
        const char *prefix = b->has_auth_prefix ? (b->auth_prefix ? b->auth_prefix : "") : "Bearer";
        rc |= vsr_buf_append_cstr(h, auth);
        rc |= vsr_buf_append(h, ": ", 2);
        if (prefix[0]) {
            rc |= vsr_buf_append_cstr(h, prefix);
            rc |= vsr_buf_append(h, " ", 1);
        }
        rc |= vsr_buf_append_cstr(h, b->resolved_api_key);
        rc |= vsr_buf_append(h, "\r\n", 2);
    }
    for (size_t i = 0; i < b->n_extra_headers; i++)
        rc |= vsr_http_write_header(h, vsr_slice_cstr(b->extra_headers[i].name),
                                    vsr_slice_cstr(b->extra_headers[i].value));
    return rc;
}

static int build_head(vsr_upstream_call_t *call)
{
    const vsr_upstream_request_t *req = &call->req;
    const vsr_backend_conf_t *b = CALL_BACKEND(call);
    vsr_buf_t *h = &call->head;
    vsr_slice_t path = req->path;
    uint64_t body_len = 0;
    for (size_t i = 0; i < req->n_body; i++)
        body_len += req->body[i].len;
    /* the head's size, roughly and from above: one allocation, not one per
     * doubling from the buffer's first 256 bytes */
    size_t est = req->method.len + path.len + strlen(b->authority) + 512;
    for (size_t i = 0; i < req->n_headers; i++)
        est += req->headers[i].name.len + req->headers[i].value.len + 4;
    vsr_buf_reserve(h, est); /* a failure shows in the appends below */

    int rc = vsr_buf_append_slice(h, req->method);
    rc |= vsr_buf_append(h, " ", 1);
    vsr_slice_t query = VSR_SLICE_NULL;
    vsr_slice_t route = vsr_slice_split(path, '?', &query);
    int v1 = vsr_slice_eq_cstr(route, "/v1") || vsr_slice_starts_with(route, VSR_SLICE_LIT("/v1/"));
    if (req->rewrite_prefix && v1 && (b->has_base_url || b->chat_path)) {
        /* base_url's path replaces "/v1"; chat_path replaces the chat route */
        rc |= vsr_buf_append_cstr(h, b->has_base_url ? b->path_prefix : "/v1");
        vsr_slice_t rest = vsr_slice(route.p + 3, route.len - 3);
        if (b->chat_path && vsr_slice_eq_cstr(rest, "/chat/completions"))
            rest = vsr_slice_cstr(b->chat_path);
        if (rest.len == 0)
            rest = VSR_SLICE_LIT("/");
        rc |= vsr_buf_append_slice(h, rest);
    } else {
        rc |= vsr_buf_append_slice(h, route);
    }
    if (query.p) {
        rc |= vsr_buf_append(h, "?", 1);
        rc |= vsr_buf_append_slice(h, query);
    }
    if (req->rewrite_prefix && b->api_version) /* Azure-style: the API version rides in the query */
        rc |= vsr_buf_printf(h, "%capi-version=%s", query.p ? '&' : '?', b->api_version);
    rc |= vsr_buf_append_cstr(h, " HTTP/1.1\r\nhost: ");
    rc |= vsr_buf_append_cstr(h, b->authority);
    rc |= vsr_buf_append(h, "\r\n", 2);
    for (size_t i = 0; i < req->n_headers; i++)
        if (!req->with_credentials || !endpoint_sets(b, req->headers[i].name))
            rc |= (i < req->n_checked_headers ? vsr_http_write_checked_header
                                              : vsr_http_write_header)(h, req->headers[i].name, req->headers[i].value);
    if (req->attempt_headers)
        req->attempt_headers(call->ud, req->report ? req->report->n_attempts : call->attempt - 1, h);
    if (req->with_credentials)
        rc |= write_endpoint_headers(h, b);
    if (body_len > 0 || req->send_length)
        rc |= vsr_http_write_header_u64(h, "content-length", body_len);
    rc |= vsr_http_write_end_head(h);
    return rc == VSR_OK ? VSR_OK : VSR_ERR;
}

vsr_upstream_call_t *vsr_upstream_call_start(vsr_upstream_t *up, const vsr_model_conf_t *model,
                                             const vsr_upstream_request_t *req,
                                             const vsr_upstream_callbacks_t *cb, void *ud)
{
    cluster_t *cl = find_cluster(up, model);
    VSR_BUG_ON(cl == NULL || cl->n_eps == 0);
    /* malloc and memset, not calloc: glibc's calloc bypasses the thread
     * cache, one trip through its bins per request */
    vsr_upstream_call_t *call = vsr_malloc(sizeof(*call));
    memset(call, 0, sizeof(*call));
    call->up = up;
    call->cl = cl;
    call->model = model;
    cl->users++;
    /* weights may change without changing the cluster's identity */
    for (size_t j = 0; j < cl->n_eps; j++)
        cl->weights[j] = model->backends[j].weight;
    call->cb = cb;
    call->ud = ud;
    call->req = *req;
    uv_timer_init(up->loop, &call->timer);
    call->timer.data = call;
    up->live++;
    vsr__policy_init(&call->pol, req->listener_timeout_ms);
    if (model->has_reliability)
        vsr__policy_merge(&call->pol, &model->reliability);
    if (req->override)
        vsr__policy_merge_decision(&call->pol, req->override);
    uint64_t now = vsr_now_ms();
    if (req->max_total_ms)
        call->pol.total_ms = call->pol.total_ms ? VSR_MIN(call->pol.total_ms, req->max_total_ms) : req->max_total_ms;
    call->deadline_ms = call->pol.total_ms ? now + call->pol.total_ms : 0;
    vsr_buf_init(&call->head, 0);
    call->n_bufs = (unsigned)req->n_body + 1;
    call->bufs = call->n_bufs <= CALL_INLINE_BUFS ? call->bufs_inline : vsr_malloc(sizeof(uv_buf_t) * call->n_bufs);
    for (size_t i = 0; i < req->n_body; i++)
        call->bufs[i + 1] = uv_buf_init((char *)req->body[i].p, (unsigned)req->body[i].len);

    /* circuit breaking: the cluster's requests in flight, all workers */
    if (atomic_fetch_add(&cl->sc->active_requests, 1) >= max_requests_for(model)) {
        call->ep = &cl->eps[0];
        fail_later(call, VSR_UPSTREAM_E_OVERFLOW, "request overflow");
        return call;
    }
    call->starting = 1;
    attempt_start(call);
    call->starting = 0;
    return call;
}

/* A reused connection that the peer had already closed: nothing of the
 * request can have been processed, so it is sent again, once, on a fresh
 * connection to the same endpoint (as HTTP clients commonly do for a stale
 * keep-alive); this is not an attempt of the retry policy. */
static int call_retry_stale(vsr_upstream_call_t *call)
{
    uconn_t *uc = call->uc;
    if (!uc->reused || call->got_bytes || call->stale_retried)
        return 0;
    call->stale_retried = 1;
    call->written = 0;
    call->write_failed = 0;
    uc->call = NULL;
    uconn_close(uc);
    call->uc = NULL;
    call_connect(call);
    return 1;
}

/* ---- receiving ---- */

static void alloc_cb(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    uconn_t *uc = h->data;
    VSR_BUG_ON(uc->cur_rbuf != NULL);
    uc->cur_rbuf = vsr_rbuf_get();
    *buf = uv_buf_init(uc->cur_rbuf->data, VSR_RBUF_SIZE);
}

static void finish_ok(uconn_t *uc, vsr_upstream_call_t *call)
{
    const vsr_upstream_callbacks_t *cb = call->cb;
    void *ud = call->ud;
    int reusable = uc->reusable && call->written && !call->write_failed;
    uc->completed = 0;
    uc->reusable = 0;
    call->uc = NULL;
    uc->call = NULL;
    call_end(call);
    if (reusable)
        uconn_make_idle(uc);
    else
        uconn_close(uc);
    if (cb && cb->on_complete)
        cb->on_complete(ud);
}

/* The end of the byte stream (EOF or an error) for the call in flight. */
static void handle_eof(uconn_t *uc, vsr_upstream_call_t *call, ssize_t nread)
{
    if (nread == UV_EOF && call->got_head && vsr_http_parser_finish(&uc->parser) == VSR_OK && uc->completed) {
        finish_ok(uc, call);
        return;
    }
    if (call->got_head) {
        call_fail(call, VSR_UPSTREAM_E_ABORTED, uv_strerror((int)nread));
    } else if (!call_retry_stale(call)) {
        vsr_outcome_t o = !call->written && !call->got_bytes ? VSR_OUTCOME_RESET_BEFORE_REQUEST : VSR_OUTCOME_RESET;
        attempt_failed(call, o, 0, VSR_UPSTREAM_E_RESET, nread == UV_EOF ? "connection termination" : "remote reset");
    }
}

/* Response bytes (plaintext) for the call in flight: 0 to go on, 1 when the
 * call ended or moved on (stop feeding). */
static int handle_bytes(uconn_t *uc, vsr_upstream_call_t *call, const char *p, size_t n)
{
    call->got_bytes = 1;
    ssize_t used = vsr_http_parser_execute(&uc->parser, p, n);
    if (uc->call != call)
        return 1; /* cancelled, or retried, from a callback: the connection is closing */
    if (used < 0) {
        if (call->got_head)
            call_fail(call, VSR_UPSTREAM_E_ABORTED, uc->parser.error_msg);
        else
            attempt_failed(call, VSR_OUTCOME_PROTOCOL, 0, VSR_UPSTREAM_E_PROTOCOL, uc->parser.error_msg);
        return 1;
    }
    if (uc->completed) {
        /* bytes past the end of the response cannot belong to anything */
        if ((size_t)used < n)
            uc->reusable = 0;
        finish_ok(uc, call);
        return 1;
    }
    if (call->got_head && !call->paused)
        idle_progress(uc, call->pol.idle_ms); /* progress: restart the stream-idle clock */
    return 0;
}

static void tls_read(uconn_t *uc, ssize_t nread, const uv_buf_t *buf);

static void read_cb(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    uconn_t *uc = s->data;
    vsr_upstream_call_t *call = uc->call;

    vsr_clock_tick(); /* a response's times are its own (base.h: the cached clock) */
    if (uc->state == UC_IDLE || call == NULL) {
        /* the pooled connection was closed by the peer, or spoke out of turn */
        if (nread != 0 && uc->state != UC_CLOSING)
            uconn_close(uc);
        goto out;
    }
    if (uc->tls) {
        tls_read(uc, nread, buf);
        goto out;
    }
    if (nread == 0)
        goto out;
    if (nread < 0) {
        handle_eof(uc, call, nread);
        goto out;
    }
    if (handle_bytes(uc, call, buf->base, (size_t)nread) == 0 && call->cb && call->cb->on_read_end)
        call->cb->on_read_end(call->ud);
out:
    if (uc->cur_rbuf) {
        vsr_rbuf_unref(uc->cur_rbuf);
        uc->cur_rbuf = NULL;
    }
}

/* ---- TLS: ciphertext in and out of the connection ---- */

typedef struct {
    uv_write_t w;
    uconn_t *uc;
    int carries_request; /* this write holds the end of the request */
    char data[];
} tls_write_t;

static void tls_write_cb(uv_write_t *w, int status)
{
    tls_write_t *tw = (tls_write_t *)w;
    uconn_t *uc = tw->uc;
    if (tw->carries_request && uc->state != UC_CLOSING && uc->call) {
        if (status < 0)
            uc->call->write_failed = 1;
        else
            uc->call->written = 1;
    }
    vsr_free(tw);
}

/* Sends whatever ciphertext the TLS object has ready.  VSR_OK or VSR_ERR. */
static int tls_flush(uconn_t *uc, int carries_request)
{
    size_t n = vsr__tls_pending_out(uc->tls);
    if (n == 0) {
        if (carries_request && uc->call)
            uc->call->written = 1;
        return VSR_OK;
    }
    tls_write_t *tw = vsr_malloc(sizeof(*tw) + n);
    tw->uc = uc;
    tw->carries_request = carries_request;
    size_t got = vsr__tls_take_out(uc->tls, tw->data, n);
    uv_buf_t b = uv_buf_init(tw->data, (unsigned)got);
    if (uv_write(&tw->w, (uv_stream_t *)&uc->tcp, &b, 1, tls_write_cb) < 0) {
        vsr_free(tw);
        return VSR_ERR;
    }
    return VSR_OK;
}

static void tls_read(uconn_t *uc, ssize_t nread, const uv_buf_t *buf)
{
    vsr_upstream_call_t *call = uc->call;
    if (nread > 0 && vsr__tls_feed(uc->tls, buf->base, (size_t)nread) != VSR_OK) {
        attempt_failed(call, VSR_OUTCOME_PROTOCOL, 0, VSR_UPSTREAM_E_PROTOCOL, "TLS input overflow");
        return;
    }
    if (uc->cur_rbuf) { /* the ciphertext is consumed: its buffer goes back */
        vsr_rbuf_unref(uc->cur_rbuf);
        uc->cur_rbuf = NULL;
    }
    if (!uc->tls_ready) {
        if (nread < 0) {
            attempt_failed(call, VSR_OUTCOME_CONNECT_FAILURE, 0, VSR_UPSTREAM_E_CONNECT,
                           "TLS handshake: connection closed");
            return;
        }
        int rc = vsr__tls_handshake(uc->tls);
        if (rc == VSR_ERR || tls_flush(uc, 0) != VSR_OK) {
            vsr_log_warn("upstream", "TLS to %s: %s", CALL_BACKEND(call)->host, vsr__tls_error(uc->tls));
            attempt_failed(call, VSR_OUTCOME_CONNECT_FAILURE, 0, VSR_UPSTREAM_E_CONNECT, "TLS handshake failed");
            return;
        }
        if (rc == VSR_OK) {
            uc->tls_ready = 1;
            call_send(call);
        }
        return;
    }
    for (;;) {
        vsr_rbuf_t *pt = vsr_rbuf_get();
        ssize_t n = vsr__tls_read(uc->tls, pt->data, VSR_RBUF_SIZE);
        if (n <= 0) {
            vsr_rbuf_unref(pt);
            if (n == VSR_EOF)
                nread = UV_EOF; /* close_notify: the end of the stream */
            else if (n < 0)
                nread = UV_ECONNRESET;
            break;
        }
        uc->cur_rbuf = pt; /* relayed body slices reference the plaintext */
        int stop = handle_bytes(uc, call, pt->data, (size_t)n);
        vsr_rbuf_unref(pt);
        uc->cur_rbuf = NULL;
        if (stop)
            return;
    }
    if (uc->call == call && tls_flush(uc, 0) != VSR_OK)
        nread = UV_ECONNRESET;
    if (nread < 0 && uc->call == call)
        handle_eof(uc, call, nread);
    else if (uc->call == call && call->cb && call->cb->on_read_end)
        call->cb->on_read_end(call->ud);
}

/* A final response head: a retriable answer is not delivered, the next
 * attempt's is (returns 1: the attempt has failed over). */
static int head_retried(vsr_upstream_call_t *call, const vsr_http_head_t *head)
{
    if (call->attempt <= call->pol.retry_count &&
        vsr__policy_retriable(&call->pol, VSR_OUTCOME_STATUS, head->status)) {
        vsr_slice_t ra;
        call->retry_after_ms = 0;
        if (call->pol.retry_after_max_ms && vsr_http_head_get(head, "retry-after", &ra))
            vsr__retry_after_ms(ra, vsr_wall_time(), call->pol.retry_after_max_ms, &call->up->rng, &call->retry_after_ms);
        attempt_failed(call, VSR_OUTCOME_STATUS, head->status, VSR_UPSTREAM_E_RESET, "retriable status");
        return 1;
    }
    return 0;
}

/* The head is the call's answer: evidence, then the safety boundary. */
static void head_accepted(vsr_upstream_call_t *call, const vsr_http_head_t *head)
{
    const vsr_reliability_conf_t *rel = call->model->has_reliability ? &call->model->reliability : NULL;
    if (rel && vsr__outlier_record(call->ep->state, head->status >= 500, rel, call->cl->states, call->cl->n_eps,
                                   vsr_now_ms()))
        vsr_log_info("upstream", "model %s endpoint %s (%s:%u) ejected: %u consecutive 5xx", call->model->name,
                     CALL_BACKEND(call)->name, CALL_BACKEND(call)->host, (unsigned)CALL_BACKEND(call)->port,
                     (unsigned)rel->consecutive_5xx);
    uint64_t now = vsr_now_ms();
    if (rel && vsr__outlier_ttft(call->ep->state, now - call->attempt_start_ms, rel, call->cl->states,
                                 call->cl->n_eps, now))
        vsr_log_info("upstream", "model %s endpoint %s (%s:%u) ejected: time to first byte p%u above %llums",
                     call->model->name, CALL_BACKEND(call)->name, CALL_BACKEND(call)->host,
                     (unsigned)CALL_BACKEND(call)->port,
                     (unsigned)(rel->has_ttft_ejection_percentile ? rel->ttft_ejection_percentile : 95),
                     (unsigned long long)rel->ttft_ejection_threshold_ms);
    record_attempt(call, head->status, 0);
    call->got_head = 1;
}

static int on_resp_head(void *ud, vsr_http_head_t *head)
{
    uconn_t *uc = ud;
    vsr_upstream_call_t *call = uc->call;
    if (head->status < 200) {
        if (head->status == 101)
            return VSR_ERR_INVALID; /* no protocol switch on a proxied call */
        uc->interim = 1;
        return VSR_OK;
    }
    if (head_retried(call, head))
        return VSR_ERR; /* stop parsing: this connection is closing */
    head_accepted(call, head);
    arm(uc, call->paused ? 0 : call->pol.idle_ms);
    if (call->cb && call->cb->on_head)
        call->cb->on_head(call->ud, head);
    return uc->call == call ? VSR_OK : VSR_ERR; /* stop parsing if cancelled */
}

static int on_resp_body(void *ud, const char *p, size_t n)
{
    uconn_t *uc = ud;
    vsr_upstream_call_t *call = uc->call;
    if (call->cb && call->cb->on_body)
        call->cb->on_body(call->ud, p, n, uc->cur_rbuf);
    return uc->call == call ? VSR_OK : VSR_ERR;
}

static int on_resp_complete(void *ud)
{
    uconn_t *uc = ud;
    if (uc->interim) {
        uc->interim = 0;
        return VSR_OK; /* the final response follows */
    }
    uc->completed = 1;
    uc->reusable = uc->parser.head.keep_alive && !uc->parser.head.until_close;
    return VSR_PAUSED;
}

/* ---- timers ---- */

static void call_timed_out(vsr_upstream_call_t *call, int connecting);

static void uc_timer_cb(uv_timer_t *t)
{
    uconn_t *uc = t->data;
    vsr_upstream_call_t *call = uc->call;
    if (uc->state == UC_CLOSING || !waits_over(&uc->waits, t, uc_timer_cb))
        return; /* closing, stopped since it was armed, or moved later */
    if (uc->state == UC_IDLE || call == NULL) {
        uconn_close(uc);
        return;
    }
    call_timed_out(call, uc->state == UC_CONNECTING);
}

/* The attempt's deadline passed: which one it was decides the outcome. */
static void call_timed_out(vsr_upstream_call_t *call, int connecting)
{
    uint64_t now = vsr_now_ms();
    int total = call->deadline_ms && (now >= call->deadline_ms || (!call->got_head && call->bound_by_deadline));
    if (total && !call->got_head)
        call->deadline_hit = 1;
    if (connecting)
        attempt_failed(call, VSR_OUTCOME_CONNECT_FAILURE, 0, VSR_UPSTREAM_E_CONNECT, "connection timeout");
    else if (!call->got_head && total)
        call_fail(call, VSR_UPSTREAM_E_TIMEOUT, "total timeout");
    else if (!call->got_head)
        attempt_failed(call, VSR_OUTCOME_TIMEOUT, 0, VSR_UPSTREAM_E_TIMEOUT, "per-try timeout");
    else
        call_fail(call, VSR_UPSTREAM_E_IDLE, "stream idle timeout");
}

/* ---- flow control and cancellation ---- */

void vsr_upstream_call_pause(vsr_upstream_call_t *call)
{
    if (call->paused)
        return;
    call->paused = 1;
    if (call->h2s) {
        vsr__h2_pause(call->h2s);
        if (call->got_head)
            h2_arm(call, 0); /* a slow client is not an idle upstream */
        return;
    }
    uconn_t *uc = call->uc;
    if (uc && uc->state == UC_ACTIVE) {
        uv_read_stop((uv_stream_t *)&uc->tcp);
        if (call->got_head)
            arm(uc, 0); /* a slow client is not an idle upstream */
    }
}

void vsr_upstream_call_resume(vsr_upstream_call_t *call)
{
    if (!call->paused)
        return;
    call->paused = 0;
    if (call->h2s) {
        if (call->got_head)
            h2_idle_progress(call, call->pol.idle_ms);
        vsr__h2_resume(call->h2s); /* may deliver held bytes, and end the call */
        return;
    }
    uconn_t *uc = call->uc;
    if (uc && uc->state == UC_ACTIVE) {
        uv_read_start((uv_stream_t *)&uc->tcp, alloc_cb, read_cb);
        arm(uc, call->got_head ? call->pol.idle_ms
                               : attempt_wait(call, min_nonzero(call->pol.first_byte_ms, call->pol.per_try_ms)));
    }
}

void vsr_upstream_call_cancel(vsr_upstream_call_t *call)
{
    if (call == NULL || call->ended)
        return;
    call->cb = NULL;
    uconn_t *uc = call->uc;
    if (uc && uc->state == UC_CONNECTING && !CALL_BACKEND(call)->tls) {
        /* nothing was sent: the connection goes on connecting (within its
         * connect timeout) and then to the pool, instead of a connect and a
         * close per cancelled call (a client resetting its streams) */
        uc->call = NULL;
        call->uc = NULL;
        uc->orphan = 1;
        uc->next_idle = uc->ep->connecting;
        uc->ep->connecting = uc;
    }
    call_end(call);
}

int vsr_upstream_breaker_allow(vsr_upstream_t *up, const vsr_model_conf_t *m, const vsr_fallback_conf_t *f)
{
    cluster_t *cl = find_cluster(up, m);
    vsr_breaker_conf_t bc;
    vsr__breaker_conf_init(&bc, f);
    return cl == NULL || vsr__breaker_allow(&cl->sc->breaker, &bc, vsr_now_ms());
}

void vsr_upstream_breaker_record(vsr_upstream_t *up, const vsr_model_conf_t *m, const vsr_fallback_conf_t *f,
                                 int success)
{
    cluster_t *cl = find_cluster(up, m);
    vsr_breaker_conf_t bc;
    vsr__breaker_conf_init(&bc, f);
    int moved = cl ? vsr__breaker_record(&cl->sc->breaker, &bc, success, vsr_now_ms()) : 0;
    if (moved > 0)
        vsr_log_info("upstream", "model %s: circuit breaker open for %llu ms (%u consecutive failures)", m->name,
                     (unsigned long long)bc.cooldown_ms, (unsigned)bc.consecutive_failures);
    else if (moved < 0)
        vsr_log_info("upstream", "model %s: circuit breaker closed", m->name);
}

const char *vsr_upstream_breaker_state(vsr_upstream_t *up, const vsr_model_conf_t *m, const vsr_fallback_conf_t *f)
{
    cluster_t *cl = find_cluster(up, m);
    vsr_breaker_conf_t bc;
    vsr__breaker_conf_init(&bc, f);
    switch (cl ? vsr__breaker_state(&cl->sc->breaker, &bc, vsr_now_ms()) : VSR_BREAKER_CLOSED) {
    case VSR_BREAKER_OPEN:
        return "open";
    case VSR_BREAKER_HALF_OPEN:
        return "half_open";
    default:
        return "closed";
    }
}

/* ---- HTTP/2 attempts: the stream is h2_client.c's, the decisions stay here ----
 * The call's own timer (idle during an attempt otherwise) serves the
 * stream's deadlines: connecting, then first byte / per try, then idle. */

static void h2_timer_cb(uv_timer_t *t)
{
    vsr_upstream_call_t *call = t->data;
    if (call->ended || call->h2s == NULL || !waits_over(&call->h2_waits, t, h2_timer_cb))
        return;
    call_timed_out(call, !call->h2_sent);
}

/* The attempt's deadlines before the stream idles (connect, first byte). */
static void h2_arm(vsr_upstream_call_t *call, uint64_t ms)
{
    waits_arm(&call->h2_waits, &call->timer, h2_timer_cb, ms);
}

/* Progress on the stream: its idle clock (ms; 0 stops it) restarts from now. */
static void h2_idle_progress(vsr_upstream_call_t *call, uint64_t ms)
{
    waits_progress(&call->h2_waits, &call->timer, h2_timer_cb, ms);
}

static void call_h2_start(vsr_upstream_call_t *call)
{
    const char *overflow = NULL;
    call->h2_sent = 0;
    call->bufs[0] = uv_buf_init(call->head.data, (unsigned)call->head.len);
    /* armed first: the stream may report its connection up at once; the
     * timer is the attempt's alone from here (no back-off is pending) */
    uv_timer_stop(&call->timer);
    h2_arm(call, attempt_wait(call, call->pol.connect_ms));
    call->h2s = vsr__h2_start(call->ep->h2, call, call->head.data, call->head.len, call->bufs + 1, call->n_bufs - 1,
                              call->req.head_request, call->pol.connect_ms, &overflow);
    if (call->h2s == NULL) {
        uv_timer_stop(&call->timer);
        if (overflow)
            call_fail(call, VSR_UPSTREAM_E_OVERFLOW, overflow);
        else
            attempt_failed(call, VSR_OUTCOME_PROTOCOL, 0, VSR_UPSTREAM_E_PROTOCOL, "invalid request for HTTP/2");
    }
}

void vsr__call_h2_sent(vsr_upstream_call_t *call)
{
    call->h2_sent = 1;
    call->written = 1;
    h2_arm(call, attempt_wait(call, min_nonzero(call->pol.first_byte_ms, call->pol.per_try_ms)));
}

void vsr__call_h2_head(vsr_upstream_call_t *call, const vsr_http_head_t *head)
{
    if (head_retried(call, head))
        return;
    head_accepted(call, head);
    h2_idle_progress(call, call->paused ? 0 : call->pol.idle_ms);
    if (call->cb && call->cb->on_head)
        call->cb->on_head(call->ud, head);
}

void vsr__call_h2_body(vsr_upstream_call_t *call, const char *p, size_t n, vsr_rbuf_t *owner)
{
    call->got_bytes = 1;
    if (!call->paused)
        h2_idle_progress(call, call->pol.idle_ms); /* progress: restart the stream-idle clock */
    const vsr_upstream_callbacks_t *cb = call->cb;
    void *ud = call->ud;
    if (cb && cb->on_body)
        cb->on_body(ud, p, n, owner);
    if (cb && cb->on_read_end) /* a callback never ends the call it is called for */
        cb->on_read_end(ud);
}

void vsr__call_h2_complete(vsr_upstream_call_t *call)
{
    const vsr_upstream_callbacks_t *cb = call->cb;
    void *ud = call->ud;
    call->h2s = NULL; /* the stream let go of the call itself */
    call_end(call);
    if (cb && cb->on_complete)
        cb->on_complete(ud);
}

void vsr__call_h2_failed(vsr_upstream_call_t *call, vsr_outcome_t o, vsr_upstream_error_t err, const char *detail)
{
    call->h2s = NULL;
    if (call->got_head)
        call_fail(call, err == VSR_UPSTREAM_E_RESET ? VSR_UPSTREAM_E_ABORTED : err, detail);
    else
        attempt_failed(call, o, 0, err, detail);
}

void vsr__call_h2_resend(vsr_upstream_call_t *call)
{
    call->h2s = NULL;
    if (call->stale_retried) { /* once per call, as a stale keep-alive connection */
        attempt_failed(call, VSR_OUTCOME_REFUSED_STREAM, 0, VSR_UPSTREAM_E_RESET, "refused stream");
        return;
    }
    call->stale_retried = 1;
    call_h2_start(call);
}

void vsr__call_h2_downgrade(vsr_upstream_call_t *call)
{
    call->h2s = NULL;
    uv_timer_stop(&call->timer);
    call_connect(call);
}
