/*
 * rcache.c — the worker's side of the response cache port (routing.h,
 * vsr_ports_t.cache_*): the worker's store (store/store.h), opened on first
 * use from global.stores.response_cache of the version the request runs,
 * and opened anew when a later version changes that block.  The memory
 * backend is one store for all workers (each call completes synchronously
 * under the gateway's recursive rc_mu), so a hit does not depend on the
 * worker a connection landed on; redis stores are per worker (the server
 * is the shared part).  A lookup is
 * the exact get (when asked), then, on a miss and with an embedding, the
 * semantic search.  Every failure of the store is a miss for the request
 * and one count of vsr_response_cache_total{result="error"}.
 */
#include <stdio.h>
#include <string.h>

#include "gateway/gateway-int.h"

struct vsr__rc_lookup_s {
    worker_t *w;
    vsr_store_t *st;   /* the store it runs on (the shared memory one, or the worker's) */
    vsr_store_op_t *op;
    vsr_cache_done_fn done;
    void *done_ud;
    int has_vec;
    float vec[VSR_CACHE_DIM];
    char scope[VSR_STORE_MAX_TAG + 1], partition[VSR_STORE_MAX_TAG + 1];
    size_t scope_len, partition_len;
    float threshold;
    int in_call, finished;
};

/* The store settings of a version, as one string: equal strings, same store. */
static void store_signature(const vsr_config_t *cfg, char *out, size_t cap)
{
    snprintf(out, cap, "%d|%llu|%llu|%s|%s|%llu|%s|%llu", cfg->rc_store.redis,
             (unsigned long long)cfg->rc_store.max_entries, (unsigned long long)cfg->rc_store.max_bytes,
             cfg->rc_store.redis_address ? cfg->rc_store.redis_address : "",
             cfg->rc_store.redis_password ? cfg->rc_store.redis_password : "",
             (unsigned long long)cfg->rc_store.redis_db,
             cfg->rc_store.redis_key_prefix ? cfg->rc_store.redis_key_prefix : "",
             (unsigned long long)cfg->rc_store.redis_timeout_ms);
}

static void open_config(const vsr_config_t *cfg, vsr_store_config_t *sc)
{
    vsr_store_config_init(sc);
    sc->backend = cfg->rc_store.redis ? VSR_STORE_REDIS : VSR_STORE_MEMORY;
    sc->max_entries = (size_t)cfg->rc_store.max_entries;
    sc->max_bytes = (size_t)cfg->rc_store.max_bytes;
    sc->default_ttl_ms = cfg->rc_store.ttl_seconds * 1000;
    sc->address = cfg->rc_store.redis_address;
    sc->password = cfg->rc_store.redis_password;
    sc->db = (unsigned)cfg->rc_store.redis_db;
    sc->key_prefix = cfg->rc_store.redis_key_prefix;
    sc->command_timeout_ms = cfg->rc_store.redis_timeout_ms;
}

void vsr__gateway_cache_init(vsr_gateway_t *gw)
{
    pthread_mutexattr_t a;
    pthread_mutexattr_init(&a);
    pthread_mutexattr_settype(&a, PTHREAD_MUTEX_RECURSIVE);
    pthread_mutex_init(&gw->rc_mu, &a);
    pthread_mutexattr_destroy(&a);
}

void vsr__gateway_cache_free(vsr_gateway_t *gw)
{
    vsr_store_close(gw->rc_mem); /* no handles: the memory backend frees at once */
    gw->rc_mem = NULL;
    pthread_mutex_destroy(&gw->rc_mu);
}

/* The memory store, under rc_mu (held by the caller). */
static vsr_store_t *shared_store(vsr_gateway_t *gw, const vsr_config_t *cfg, const char *sig)
{
    if (gw->rc_mem && strcmp(sig, gw->rc_mem_sig) == 0)
        return gw->rc_mem;
    vsr_store_close(gw->rc_mem);
    vsr_store_config_t sc;
    open_config(cfg, &sc);
    vsr_buf_t err;
    vsr_buf_init(&err, 4096);
    gw->rc_mem = vsr_store_open(NULL, &sc, &err);
    if (gw->rc_mem == NULL)
        vsr_log_warn("gateway", "response cache store: %.*s", (int)err.len, err.data ? err.data : "");
    vsr_buf_free(&err);
    snprintf(gw->rc_mem_sig, sizeof(gw->rc_mem_sig), "%s", sig);
    return gw->rc_mem;
}

static vsr_store_t *worker_store(worker_t *w, const vsr_config_t *cfg)
{
    if (w->torn_down)
        return NULL;
    char sig[sizeof(w->rc_sig)];
    store_signature(cfg, sig, sizeof(sig));
    if (!cfg->rc_store.redis)
        return shared_store(w->gw, cfg, sig);
    if (w->rc_store && strcmp(sig, w->rc_sig) == 0)
        return w->rc_store;
    vsr_store_close(w->rc_store); /* operations in flight are dropped: their requests see misses */
    w->rc_store = NULL;
    vsr_store_config_t sc;
    open_config(cfg, &sc);
    vsr_buf_t err;
    vsr_buf_init(&err, 4096);
    w->rc_store = vsr_store_open(&w->loop, &sc, &err);
    if (w->rc_store == NULL)
        vsr_log_warn("gateway", "response cache store: %.*s", (int)err.len, err.data ? err.data : "");
    vsr_buf_free(&err);
    snprintf(w->rc_sig, sizeof(w->rc_sig), "%s", sig);
    return w->rc_store;
}

static void lookup_finish(vsr__rc_lookup_t *l, int status, const vsr_store_hit_t *hit)
{
    if (status == VSR_OK)
        vsr_metrics_cache(l->w->metrics, "lookup", "hit");
    else if (status == VSR_ERR_NOT_FOUND)
        vsr_metrics_cache(l->w->metrics, "lookup", "miss");
    else
        vsr_metrics_cache(l->w->metrics, "lookup", "error");
    l->done(l->done_ud, status, status == VSR_OK ? hit->value : VSR_SLICE_NULL,
            status == VSR_OK ? (double)hit->similarity : 0.0);
    l->finished = 1;
    if (!l->in_call)
        vsr_free(l);
}

static void search_done(void *ud, int status, const vsr_store_hit_t *hit)
{
    vsr__rc_lookup_t *l = ud;
    l->op = NULL;
    lookup_finish(l, status, hit);
}

static void start_search(vsr__rc_lookup_t *l)
{
    int rc = vsr_store_search(l->st, l->vec, vsr_slice(l->scope, l->scope_len),
                              vsr_slice(l->partition, l->partition_len), l->threshold, search_done, l, &l->op);
    if (rc == VSR_ERR_INVALID)
        lookup_finish(l, VSR_ERR_INVALID, NULL);
}

static void get_done(void *ud, int status, const vsr_store_hit_t *hit)
{
    vsr__rc_lookup_t *l = ud;
    l->op = NULL;
    if (status != VSR_OK && l->has_vec)
        start_search(l); /* exact_then_semantic: the exact key missed */
    else
        lookup_finish(l, status, hit);
}

void *vsr__gateway_cache_lookup(worker_t *w, const vsr_config_t *cfg, const vsr_cache_query_t *q, vsr_cache_done_fn done,
                                void *done_ud)
{
    int shared = !cfg->rc_store.redis;
    if (shared)
        pthread_mutex_lock(&w->gw->rc_mu);
    vsr_store_t *st = worker_store(w, cfg);
    if (st == NULL || q->scope.len > VSR_STORE_MAX_TAG || q->partition.len > VSR_STORE_MAX_TAG ||
        (!q->exact && q->embedding == NULL)) {
        if (shared)
            pthread_mutex_unlock(&w->gw->rc_mu);
        vsr_metrics_cache(w->metrics, "lookup", "error");
        done(done_ud, VSR_ERR_IO, VSR_SLICE_NULL, 0);
        return NULL;
    }
    vsr__rc_lookup_t *l = vsr_calloc(1, sizeof(*l));
    l->w = w;
    l->st = st;
    l->done = done;
    l->done_ud = done_ud;
    l->threshold = (float)q->threshold;
    if (q->scope.len)
        memcpy(l->scope, q->scope.p, q->scope.len);
    l->scope_len = q->scope.len;
    if (q->partition.len)
        memcpy(l->partition, q->partition.p, q->partition.len);
    l->partition_len = q->partition.len;
    if (q->embedding) {
        memcpy(l->vec, q->embedding, sizeof(l->vec));
        l->has_vec = 1;
    }
    l->in_call = 1;
    int rc = q->exact ? vsr_store_get(st, q->key, get_done, l, &l->op) : VSR_OK;
    if (!q->exact)
        start_search(l);
    else if (rc == VSR_ERR_INVALID)
        lookup_finish(l, VSR_ERR_INVALID, NULL);
    l->in_call = 0;
    if (shared)
        pthread_mutex_unlock(&w->gw->rc_mu);
    if (l->finished) {
        vsr_free(l);
        return NULL;
    }
    VSR_BUG_ON(shared); /* the memory backend has answered */
    return l;
}

void vsr__gateway_cache_cancel(worker_t *w, void *handle)
{
    vsr__rc_lookup_t *l = handle;
    if (l == NULL)
        return;
    VSR_UNUSED(w);
    if (l->op)
        vsr_store_cancel(l->st, l->op);
    vsr_free(l);
}

static void put_done(void *ud, int status, const vsr_store_hit_t *hit)
{
    VSR_UNUSED(hit);
    worker_t *w = ud;
    vsr_metrics_cache(w->metrics, "store", status == VSR_OK ? "stored" : status == VSR_ERR_TOO_BIG ? "skipped" : "error");
}

void vsr__gateway_cache_store(worker_t *w, const vsr_config_t *cfg, const vsr_cache_query_t *q, vsr_slice_t value)
{
    int shared = !cfg->rc_store.redis;
    if (shared)
        pthread_mutex_lock(&w->gw->rc_mu);
    vsr_store_t *st = worker_store(w, cfg);
    /* fire and forget: the worker outlives the operation, the request need not */
    if (st == NULL)
        vsr_metrics_cache(w->metrics, "store", "error");
    else if (vsr_store_put(st, q->key, value, q->ttl_ms, q->embedding, q->scope, q->partition, put_done, w, NULL) ==
             VSR_ERR_INVALID)
        vsr_metrics_cache(w->metrics, "store", "skipped");
    if (shared)
        pthread_mutex_unlock(&w->gw->rc_mu);
}

void vsr__gateway_cache_close(worker_t *w)
{
    vsr_store_close(w->rc_store);
    w->rc_store = NULL;
}
