/*
 * store.c — the contract's front: configuration defaults and checks,
 * argument checks, and the memory backend (which answers every operation
 * before returning).  The redis backend is store_redis.c.
 */
#include <math.h>
#include <time.h>

#include "store-int.h"

void vsr_store_config_init(vsr_store_config_t *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->backend = VSR_STORE_MEMORY;
    cfg->max_entries = 10000;
    cfg->max_bytes = 64u << 20;
    cfg->max_value_bytes = 4u << 20;
    cfg->default_ttl_ms = 3600000;
    cfg->address = "127.0.0.1:6379";
    cfg->key_prefix = "vsr:rc:";
    cfg->max_inflight = 1024;
    cfg->command_timeout_ms = 250;
    cfg->connect_timeout_ms = 1000;
    cfg->reconnect_min_ms = 100;
    cfg->reconnect_max_ms = 5000;
    cfg->poll_interval_ms = 500;
    cfg->poll_batch = 1000;
}

static uint64_t mono_ms(void *ud)
{
    VSR_UNUSED(ud);
    return vsr_now_ms();
}

static uint64_t wall_ms(void *ud)
{
    VSR_UNUSED(ud);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

#define MAX_ENTRIES_LIMIT ((size_t)16 << 20)

vsr_store_t *vsr_store_open(struct uv_loop_s *loop, const vsr_store_config_t *cfg, vsr_buf_t *err)
{
    vsr_buf_t scratch;
    vsr_buf_init(&scratch, 1024);
    if (!err)
        err = &scratch;
    vsr_store_t *s = NULL;
    if (cfg->backend != VSR_STORE_MEMORY && cfg->backend != VSR_STORE_REDIS) {
        vsr_buf_printf(err, "store: unknown backend %d", (int)cfg->backend);
        goto out;
    }
    if (cfg->eviction != VSR_STORE_EVICT_LRU && cfg->eviction != VSR_STORE_EVICT_LFU &&
        cfg->eviction != VSR_STORE_EVICT_FIFO) {
        vsr_buf_printf(err, "store: unknown eviction policy %d", (int)cfg->eviction);
        goto out;
    }
    if (cfg->kernel != VSR_STORE_KERNEL_AUTO && cfg->kernel != VSR_STORE_KERNEL_LOOP &&
        cfg->kernel != VSR_STORE_KERNEL_BLAS && cfg->kernel != VSR_STORE_KERNEL_INT8) {
        vsr_buf_printf(err, "store: unknown index kernel %d", (int)cfg->kernel);
        goto out;
    }
    s = vsr_calloc(1, sizeof(*s));
    s->backend = cfg->backend;
    s->cfg = *cfg;
    if (!s->cfg.max_entries)
        s->cfg.max_entries = 10000;
    if (s->cfg.max_entries > MAX_ENTRIES_LIMIT) {
        vsr_buf_printf(err, "store: max_entries %zu is over %zu", s->cfg.max_entries, MAX_ENTRIES_LIMIT);
        vsr_free(s);
        s = NULL;
        goto out;
    }
    if (!s->cfg.max_bytes)
        s->cfg.max_bytes = 64u << 20;
    if (!s->cfg.max_value_bytes)
        s->cfg.max_value_bytes = 4u << 20;
    if (s->cfg.max_value_bytes > (512u << 20)) { /* redis's own limit for a string */
        vsr_buf_printf(err, "store: max_value_bytes %zu is over 512 MiB", s->cfg.max_value_bytes);
        vsr_free(s);
        s = NULL;
        goto out;
    }
    if (!s->cfg.default_ttl_ms)
        s->cfg.default_ttl_ms = 3600000;
    /* int8 scans a quarter of the bytes: 2.7x faster than float32 at 100k
     * rows, even at 1k (docs/performance.md, notes) */
    vsr_store_kernel_t kernel = cfg->kernel == VSR_STORE_KERNEL_AUTO ? VSR_STORE_KERNEL_INT8 : cfg->kernel;
    s->clock = cfg->clock ? cfg->clock : (cfg->backend == VSR_STORE_REDIS ? wall_ms : mono_ms);
    s->clock_ud = cfg->clock_ud;
    if (s->backend == VSR_STORE_MEMORY) {
        vsr__mtab_init(&s->tab, s->cfg.max_entries, s->cfg.max_bytes, kernel, cfg->eviction, &s->ctr);
    } else {
        /* the index holds no values: its bound is the entry count */
        vsr__mtab_init(&s->tab, s->cfg.max_entries, SIZE_MAX, kernel, VSR_STORE_EVICT_LRU, &s->ctr);
        if (vsr__redis_open(s, loop, &s->cfg, err) != VSR_OK) {
            vsr__mtab_free(&s->tab);
            vsr_free(s);
            s = NULL;
        }
    }
out:
    if (err == &scratch && scratch.len)
        vsr_log_error("store", "%.*s", (int)scratch.len, scratch.data);
    vsr_buf_free(&scratch);
    return s;
}

void vsr_store_close(vsr_store_t *s)
{
    if (!s)
        return;
    if (s->backend == VSR_STORE_REDIS) {
        vsr__redis_close(s); /* frees s when its handles are closed */
        return;
    }
    vsr__mtab_free(&s->tab);
    vsr_free(s);
}

static int key_ok(vsr_slice_t key)
{
    return key.len >= 1 && key.len <= VSR_STORE_MAX_KEY && key.p;
}

static int tag_ok(vsr_slice_t t)
{
    return t.len <= VSR_STORE_MAX_TAG && (t.len == 0 || t.p);
}

static int emb_ok(const float *e)
{
    for (size_t i = 0; i < VSR_STORE_DIM; i++)
        if (!isfinite(e[i]))
            return 0;
    return 1;
}

static int done_now(vsr_store_done_fn done, void *ud, int status, const vsr_store_hit_t *hit)
{
    done(ud, status, hit);
    return VSR_OK;
}

int vsr_store_get(vsr_store_t *s, vsr_slice_t key, vsr_store_done_fn done, void *ud, vsr_store_op_t **handle)
{
    if (handle)
        *handle = NULL;
    if (!s || !done || !key_ok(key))
        return VSR_ERR_INVALID;
    if (s->backend == VSR_STORE_REDIS)
        return vsr__redis_get(s, key, done, ud, handle);
    vsr__mentry_t *e = vsr__mtab_get(&s->tab, key, vsr__store_now(s));
    if (!e) {
        vsr__ctr_inc(&s->ctr.misses);
        return done_now(done, ud, VSR_ERR_NOT_FOUND, NULL);
    }
    vsr__ctr_inc(&s->ctr.hits);
    vsr_store_hit_t hit = {vsr__me_key(e), vsr__me_value(e), 1.0f};
    return done_now(done, ud, VSR_OK, &hit);
}

int vsr_store_put(vsr_store_t *s, vsr_slice_t key, vsr_slice_t value, uint64_t ttl_ms, const float *embedding,
                  vsr_slice_t scope, vsr_slice_t partition, vsr_store_done_fn done, void *ud,
                  vsr_store_op_t **handle)
{
    if (handle)
        *handle = NULL;
    if (!s || !done || !key_ok(key) || !tag_ok(scope) || !tag_ok(partition) || (value.len && !value.p))
        return VSR_ERR_INVALID;
    if (embedding && !emb_ok(embedding))
        return VSR_ERR_INVALID;
    if (value.len > s->cfg.max_value_bytes)
        return done_now(done, ud, VSR_ERR_TOO_BIG, NULL);
    if (!ttl_ms)
        ttl_ms = s->cfg.default_ttl_ms;
    if (s->backend == VSR_STORE_REDIS)
        return vsr__redis_put(s, key, value, ttl_ms, embedding, scope, partition, done, ud, handle);
    uint64_t now = vsr__store_now(s);
    int rc = vsr__mtab_put(&s->tab, key, value, now + ttl_ms, embedding, scope, partition, now);
    return done_now(done, ud, rc, NULL);
}

int vsr_store_del(vsr_store_t *s, vsr_slice_t key, vsr_store_done_fn done, void *ud, vsr_store_op_t **handle)
{
    if (handle)
        *handle = NULL;
    if (!s || !done || !key_ok(key))
        return VSR_ERR_INVALID;
    if (s->backend == VSR_STORE_REDIS)
        return vsr__redis_del(s, key, done, ud, handle);
    vsr__mtab_del(&s->tab, key);
    return done_now(done, ud, VSR_OK, NULL);
}

int vsr_store_search(vsr_store_t *s, const float *embedding, vsr_slice_t scope, vsr_slice_t partition,
                     float threshold, vsr_store_done_fn done, void *ud, vsr_store_op_t **handle)
{
    if (handle)
        *handle = NULL;
    if (!s || !done || !embedding || !tag_ok(scope) || !tag_ok(partition) || !(threshold >= -1.0f) ||
        !(threshold <= 1.0f) || !emb_ok(embedding))
        return VSR_ERR_INVALID;
    if (s->backend == VSR_STORE_REDIS)
        return vsr__redis_search(s, embedding, scope, partition, threshold, done, ud, handle);
    float sim = 0;
    vsr__mentry_t *e = vsr__mtab_search(&s->tab, embedding, scope, partition, threshold, vsr__store_now(s), &sim);
    if (!e) {
        vsr__ctr_inc(&s->ctr.misses);
        return done_now(done, ud, VSR_ERR_NOT_FOUND, NULL);
    }
    vsr__ctr_inc(&s->ctr.hits);
    vsr_store_hit_t hit = {vsr__me_key(e), vsr__me_value(e), sim};
    return done_now(done, ud, VSR_OK, &hit);
}

void vsr_store_cancel(vsr_store_t *s, vsr_store_op_t *op)
{
    if (s && op && s->backend == VSR_STORE_REDIS)
        vsr__redis_cancel(s, op);
}

#define LOAD(x) atomic_load_explicit(&s->ctr.x, memory_order_relaxed)
void vsr_store_stats(const vsr_store_t *s, vsr_store_stats_t *out)
{
    memset(out, 0, sizeof(*out));
    out->hits = LOAD(hits);
    out->misses = LOAD(misses);
    out->errors = LOAD(errors);
    out->evictions = LOAD(evictions);
    out->expired = LOAD(expired);
    out->rejected = LOAD(rejected);
    out->timeouts = LOAD(timeouts);
    out->reconnects = LOAD(reconnects);
    out->index_loaded = LOAD(index_loaded);
    out->index_bad = LOAD(index_bad);
    /* the table's sizes are plain words written by the loop thread: a
     * reader elsewhere gets a recent value, which is all a gauge needs */
    out->entries = s->backend == VSR_STORE_MEMORY ? s->tab.n : 0;
    out->index_entries = s->tab.rows;
    out->bytes = s->backend == VSR_STORE_MEMORY ? s->tab.bytes : 0;
    out->connected = s->backend == VSR_STORE_REDIS ? vsr__redis_connected(s) : 0;
}
