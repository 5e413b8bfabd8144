/*
 * ports_cache.c — the worker's side of the response cache port (routing.h,
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
    const char *metric_op; /* lookup, or revalidate (no-cache) */
    int in_call, finished;
};

/* One store's settings, from either block of the document. */
typedef struct {
    int redis;
    uint64_t max_entries, max_bytes, ttl_seconds, db, timeout_ms;
    const char *address, *password, *prefix;
    int eviction; /* vsr_store_eviction_t */
    int cluster;
    const vsr_strlist_conf_t *cluster_addresses;
} settings_t;

/* The response cache's eviction_policy: unset, fifo in memory (the
 * reference's default) and lru with redis (the server's own eviction). */
static int rc_eviction(const vsr_config_t *cfg)
{
    if (cfg->rc_store.has_eviction)
        return cfg->rc_store.eviction;
    return cfg->rc_store.redis ? VSR_STORE_EVICT_LRU : VSR_STORE_EVICT_FIFO;
}

static const vsr_strlist_conf_t no_cluster;

/* 0 the response cache, 1 the Responses API's store, 2 memory's */
static int which_store(const vsr_cache_query_t *q)
{
    return q->memory ? 2 : q->responses != 0;
}

static settings_t settings(const vsr_config_t *cfg, int which)
{
    if (which == 0)
        return (settings_t){cfg->rc_store.redis, cfg->rc_store.max_entries, cfg->rc_store.max_bytes,
                            cfg->rc_store.ttl_seconds, cfg->rc_store.redis_db, cfg->rc_store.redis_timeout_ms,
                            cfg->rc_store.redis_address, cfg->rc_store.redis_password, cfg->rc_store.redis_key_prefix,
                            rc_eviction(cfg), cfg->rc_store.redis_cluster, &cfg->rc_store.redis_cluster_addresses};
    if (which == 2) {
        /* memory: one entry per user (its whole bounded set), never expiring; the host's name as an address */
        static __thread char addr[300];
        snprintf(addr, sizeof(addr), "%s:%llu", cfg->mem_store.redis_host ? cfg->mem_store.redis_host : "localhost",
                 (unsigned long long)(cfg->mem_store.redis_port ? cfg->mem_store.redis_port : 6379));
        return (settings_t){cfg->mem_store.redis, 100000, (uint64_t)256 << 20, 10ull * 365 * 86400,
                            cfg->mem_store.redis_db,
                            cfg->mem_store.redis_timeout_ms ? cfg->mem_store.redis_timeout_ms : 250, addr,
                            cfg->mem_store.redis_password,
                            cfg->mem_store.redis_key_prefix ? cfg->mem_store.redis_key_prefix : "mem:",
                            VSR_STORE_EVICT_LRU, 0, &no_cluster};
    }
    return (settings_t){cfg->resp_store.redis, cfg->resp_store.max_responses, (uint64_t)256 << 20,
                        cfg->resp_store.ttl_seconds, cfg->resp_store.redis_db, cfg->resp_store.redis_timeout_ms,
                        cfg->resp_store.redis_address, cfg->resp_store.redis_password,
                        cfg->resp_store.redis_key_prefix, VSR_STORE_EVICT_LRU, cfg->resp_store.redis_cluster,
                        &cfg->resp_store.redis_cluster_addresses};
}

/* The store settings of a version, as one string: equal strings, same store. */
static void store_signature(const settings_t *c, char *out, size_t cap)
{
    snprintf(out, cap, "%d|%llu|%llu|%s|%s|%llu|%s|%llu|%d", c->redis, (unsigned long long)c->max_entries,
             (unsigned long long)c->max_bytes, c->address ? c->address : "", c->password ? c->password : "",
             (unsigned long long)c->db, c->prefix ? c->prefix : "", (unsigned long long)c->timeout_ms, c->eviction);
    if (c->cluster) /* cluster mode: its addresses too (address and db are unused) */
        for (size_t i = 0; i < c->cluster_addresses->n; i++) {
            size_t used = strlen(out);
            snprintf(out + used, cap - used, "|c:%s", c->cluster_addresses->items[i]);
        }
}

static void open_config(const settings_t *c, vsr_store_config_t *sc)
{
    vsr_store_config_init(sc);
    sc->backend = c->redis ? VSR_STORE_REDIS : VSR_STORE_MEMORY;
    sc->max_entries = (size_t)c->max_entries;
    sc->max_bytes = (size_t)c->max_bytes;
    sc->default_ttl_ms = c->ttl_seconds * 1000;
    sc->address = c->address;
    sc->password = c->password;
    sc->db = (unsigned)c->db;
    sc->key_prefix = c->prefix;
    sc->command_timeout_ms = c->timeout_ms;
    sc->eviction = (vsr_store_eviction_t)c->eviction;
    sc->cluster = c->cluster;
    sc->cluster_addresses = (const char *const *)c->cluster_addresses->items;
    sc->n_cluster_addresses = c->cluster_addresses->n;
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
    for (int i = 0; i < 3; i++) {
        vsr_store_close(gw->rc_mem[i]); /* no handles: the memory backend frees at once */
        gw->rc_mem[i] = NULL;
    }
    pthread_mutex_destroy(&gw->rc_mu);
}

static const char *const store_names[3] = {"response cache store", "Responses API store", "memory store"};

/* A memory store, under rc_mu (held by the caller). */
static vsr_store_t *shared_store(vsr_gateway_t *gw, int which, const settings_t *c, const char *sig)
{
    if (gw->rc_mem[which] && strcmp(sig, gw->rc_mem_sig[which]) == 0)
        return gw->rc_mem[which];
    vsr_store_close(gw->rc_mem[which]);
    vsr_store_config_t sc;
    open_config(c, &sc);
    vsr_buf_t err;
    vsr_buf_init(&err, 4096);
    gw->rc_mem[which] = vsr_store_open(NULL, &sc, &err);
    if (gw->rc_mem[which] == NULL)
        vsr_log_warn("gateway", "%s: %.*s", store_names[which], (int)err.len, err.data ? err.data : "");
    vsr_buf_free(&err);
    snprintf(gw->rc_mem_sig[which], sizeof(gw->rc_mem_sig[which]), "%s", sig);
    return gw->rc_mem[which];
}

static vsr_store_t *worker_store(worker_t *w, const vsr_config_t *cfg, int which)
{
    if (w->torn_down)
        return NULL;
    settings_t c = settings(cfg, which);
    char sig[sizeof(w->rc_sig[0])];
    store_signature(&c, sig, sizeof(sig));
    if (!c.redis)
        return shared_store(w->gw, which, &c, sig);
    if (w->rc_store[which] && strcmp(sig, w->rc_sig[which]) == 0)
        return w->rc_store[which];
    vsr_store_close(w->rc_store[which]); /* operations in flight are dropped: their requests see misses */
    w->rc_store[which] = NULL;
    vsr_store_config_t sc;
    open_config(&c, &sc);
    vsr_buf_t err;
    vsr_buf_init(&err, 4096);
    w->rc_store[which] = vsr_store_open(&w->loop, &sc, &err);
    if (w->rc_store[which] == NULL)
        vsr_log_warn("gateway", "%s: %.*s", store_names[which], (int)err.len, err.data ? err.data : "");
    vsr_buf_free(&err);
    snprintf(w->rc_sig[which], sizeof(w->rc_sig[which]), "%s", sig);
    return w->rc_store[which];
}

static int is_shared(const vsr_config_t *cfg, int which)
{
    if (which == 2)
        return !cfg->mem_store.redis;
    return which ? !cfg->resp_store.redis : !cfg->rc_store.redis;
}

static void lookup_finish(vsr__rc_lookup_t *l, int status, const vsr_store_hit_t *hit)
{
    if (l->metric_op == NULL)
        ; /* memory's store: the plugin counts its own outcome */
    else if (status == VSR_OK)
        vsr_metrics_cache(l->w->metrics, l->metric_op, "hit");
    else if (status == VSR_ERR_NOT_FOUND)
        vsr_metrics_cache(l->w->metrics, l->metric_op, "miss");
    else
        vsr_metrics_cache(l->w->metrics, l->metric_op, "error");
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
    int which = which_store(q), shared = is_shared(cfg, which);
    if (shared)
        pthread_mutex_lock(&w->gw->rc_mu);
    vsr_store_t *st = worker_store(w, cfg, which);
    if (st == NULL || q->scope.len > VSR_STORE_MAX_TAG || q->partition.len > VSR_STORE_MAX_TAG ||
        (!q->exact && q->embedding == NULL)) {
        if (shared)
            pthread_mutex_unlock(&w->gw->rc_mu);
        if (!q->memory)
            vsr_metrics_cache(w->metrics, q->revalidate ? "revalidate" : "lookup", "error");
        done(done_ud, VSR_ERR_IO, VSR_SLICE_NULL, 0);
        return NULL;
    }
    vsr__rc_lookup_t *l = vsr_calloc(1, sizeof(*l));
    l->w = w;
    l->st = st;
    l->done = done;
    l->done_ud = done_ud;
    l->threshold = (float)q->threshold;
    l->metric_op = q->memory ? NULL : q->revalidate ? "revalidate" : "lookup";
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

static void mem_put_done(void *ud, int status, const vsr_store_hit_t *hit)
{
    VSR_UNUSED(hit);
    vsr_metrics_memory(((worker_t *)ud)->metrics, "write", status == VSR_OK ? "stored" : "error");
}

void vsr__gateway_cache_store(worker_t *w, const vsr_config_t *cfg, const vsr_cache_query_t *q, vsr_slice_t value)
{
    int which = which_store(q), shared = is_shared(cfg, which);
    if (shared)
        pthread_mutex_lock(&w->gw->rc_mu);
    vsr_store_t *st = worker_store(w, cfg, which);
    /* fire and forget: the worker outlives the operation, the request need not */
    if (st == NULL && q->memory)
        vsr_metrics_memory(w->metrics, "write", "error");
    else if (st == NULL)
        vsr_metrics_cache(w->metrics, "store", "error");
    else if (q->memory)
        vsr_store_put(st, q->key, value, q->ttl_ms, NULL, q->scope, q->partition, mem_put_done, w, NULL);
    else if (vsr_store_put(st, q->key, value, q->ttl_ms, q->embedding, q->scope, q->partition, put_done, w, NULL) ==
             VSR_ERR_INVALID)
        vsr_metrics_cache(w->metrics, "store", "skipped");
    if (shared)
        pthread_mutex_unlock(&w->gw->rc_mu);
}

static void del_done(void *ud, int status, const vsr_store_hit_t *hit)
{
    VSR_UNUSED(hit);
    if (status != VSR_OK)
        vsr_metrics_cache(((worker_t *)ud)->metrics, "delete", "error");
}

void vsr__gateway_cache_delete(worker_t *w, const vsr_config_t *cfg, const vsr_cache_query_t *q)
{
    int which = which_store(q), shared = is_shared(cfg, which);
    if (shared)
        pthread_mutex_lock(&w->gw->rc_mu);
    vsr_store_t *st = worker_store(w, cfg, which);
    if (st)
        vsr_store_del(st, q->key, del_done, w, NULL);
    if (shared)
        pthread_mutex_unlock(&w->gw->rc_mu);
}

void vsr__gateway_cache_close(worker_t *w)
{
    for (int i = 0; i < 3; i++) {
        vsr_store_close(w->rc_store[i]);
        w->rc_store[i] = NULL;
    }
}
