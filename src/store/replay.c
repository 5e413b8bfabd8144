/*
 * replay.c — the router_replay plugin's record store (store.h, "router
 * replay records"): memory (one list under a mutex) or redis (a writer
 * thread with a bounded queue; reads on a connection of their own).
 */
#include <errno.h>
#include <hiredis/hiredis.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

#include "store-int.h"

#define MAX_ID 128
#define MAX_PREFIX 64
#define BACKOFF_MS 1000

typedef struct rec_s {
    struct rec_s *prev, *next; /* newest first */
    uint64_t ts_ms, stored_ms;
    size_t id_len, sum_len, rec_len;
    size_t max_records;        /* redis queue: the put's bound */
    char *id, *sum, *rec;      /* one allocation after the struct */
} rec_t;

struct vsr_replay_store_s {
    atomic_uint refs;
    vsr_replay_config_t cfg;
    char *address, *password, *prefix;
    char **cluster;            /* cluster mode: the node addresses */
    size_t ncluster;
    pthread_mutex_t mu;
    /* memory: the records; redis: the queue (oldest first from head) */
    rec_t head;                /* sentinel */
    size_t n, bytes;
    /* redis */
    pthread_cond_t cv;
    pthread_t writer;
    int has_writer, stop;
    redisContext *wc;          /* the writer's connection */
    uint64_t retry_at_ms;      /* no connect before this (monotonic) */
};

static uint64_t wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void count(vsr_replay_store_t *st, const char *result)
{
    if (st->cfg.count)
        st->cfg.count(st->cfg.count_ud, result);
}

void vsr_replay_config_init(vsr_replay_config_t *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->backend = VSR_STORE_MEMORY;
    cfg->ttl_ms = 86400000;
    cfg->max_records = 1000000;
    cfg->max_bytes = (size_t)256 << 20;
    cfg->max_record_bytes = (size_t)32 << 20;
    cfg->timeout_ms = 250;
    cfg->max_queue = 1024;
    cfg->max_queue_bytes = (size_t)64 << 20;
}

static rec_t *rec_new(vsr_slice_t id, uint64_t ts_ms, vsr_slice_t sum, vsr_slice_t rec, size_t max_records)
{
    rec_t *r = vsr_malloc(sizeof(*r) + id.len + sum.len + rec.len + 3);
    char *p = (char *)(r + 1);
    r->prev = r->next = NULL;
    r->ts_ms = ts_ms;
    r->stored_ms = wall_ms();
    r->max_records = max_records;
    r->id = p;
    memcpy(p, id.p, id.len);
    p[id.len] = 0;
    p += id.len + 1;
    r->sum = p;
    if (sum.len)
        memcpy(p, sum.p, sum.len);
    p[sum.len] = 0;
    p += sum.len + 1;
    r->rec = p;
    if (rec.len)
        memcpy(p, rec.p, rec.len);
    p[rec.len] = 0;
    r->id_len = id.len;
    r->sum_len = sum.len;
    r->rec_len = rec.len;
    return r;
}

static size_t rec_bytes(const rec_t *r)
{
    return sizeof(*r) + r->id_len + r->sum_len + r->rec_len;
}

static void unlink_rec(vsr_replay_store_t *st, rec_t *r)
{
    r->prev->next = r->next;
    r->next->prev = r->prev;
    st->n--;
    st->bytes -= rec_bytes(r);
}

/* ---- memory ---- */

static int expired(const vsr_replay_store_t *st, const rec_t *r, uint64_t now)
{
    return st->cfg.ttl_ms && now >= r->stored_ms + st->cfg.ttl_ms;
}

/* Under mu: the oldest while the bounds are passed or they are dead. */
static void mem_trim(vsr_replay_store_t *st, size_t max_records)
{
    uint64_t now = wall_ms();
    while (st->n > 0) {
        rec_t *old = st->head.prev;
        int over = st->n > max_records || st->n > st->cfg.max_records || st->bytes > st->cfg.max_bytes;
        if (!over && !expired(st, old, now))
            break;
        unlink_rec(st, old);
        if (over)
            count(st, "evicted");
        vsr_free(old);
    }
}

static rec_t *mem_find(vsr_replay_store_t *st, vsr_slice_t id)
{
    uint64_t now = wall_ms();
    for (rec_t *r = st->head.next; r != &st->head; r = r->next)
        if (r->id_len == id.len && memcmp(r->id, id.p, id.len) == 0)
            return expired(st, r, now) ? NULL : r;
    return NULL;
}

/* ---- redis ---- */

static redisContext *connect_redis(vsr_replay_store_t *st)
{
    uint64_t t = st->cfg.timeout_ms < 100 ? 100 : st->cfg.timeout_ms;
    struct timeval tv = {(time_t)(t / 1000), (suseconds_t)(t % 1000) * 1000};
    redisContext *c;
    if (st->cluster) /* the node of the store's one slot, authenticated */
        return vsr__rcl_sync_connect((const char *const *)st->cluster, st->ncluster,
                                     vsr__rcl_slot(vsr_slice_cstr(st->prefix)), t, st->password);
    if (strncmp(st->address, "unix:", 5) == 0) {
        c = redisConnectUnixWithTimeout(st->address + 5, tv);
    } else {
        char host[256];
        int port = 6379;
        const char *colon = strrchr(st->address, ':');
        size_t hl = colon ? (size_t)(colon - st->address) : strlen(st->address);
        if (hl >= sizeof(host))
            return NULL;
        memcpy(host, st->address, hl);
        host[hl] = 0;
        if (colon)
            port = atoi(colon + 1);
        c = redisConnectWithTimeout(host, port, tv);
    }
    if (c == NULL)
        return NULL;
    if (c->err || redisSetTimeout(c, tv) != REDIS_OK) {
        redisFree(c);
        return NULL;
    }
    redisReply *r = NULL;
    if (st->password) {
        r = redisCommand(c, "AUTH %s", st->password);
        if (r == NULL || r->type == REDIS_REPLY_ERROR)
            goto fail;
        freeReplyObject(r);
    }
    if (st->cfg.db) {
        r = redisCommand(c, "SELECT %u", st->cfg.db);
        if (r == NULL || r->type == REDIS_REPLY_ERROR)
            goto fail;
        freeReplyObject(r);
    }
    return c;
fail:
    if (r)
        freeReplyObject(r);
    redisFree(c);
    return NULL;
}

/* Reads n replies of pipelined commands; 0 when all came and none is an error. */
static int drain_replies(redisContext *c, int n)
{
    int bad = 0;
    for (int i = 0; i < n; i++) {
        void *r = NULL;
        if (redisGetReply(c, &r) != REDIS_OK)
            return -1;
        if (((redisReply *)r)->type == REDIS_REPLY_ERROR)
            bad = 1;
        freeReplyObject(r);
    }
    return bad ? -1 : 0;
}

static int write_one(vsr_replay_store_t *st, redisContext *c, const rec_t *r)
{
    unsigned long long ttl_s = st->cfg.ttl_ms ? (st->cfg.ttl_ms + 999) / 1000 : 0;
    const char *p = st->prefix;
    char score[32];
    snprintf(score, sizeof(score), "%llu", (unsigned long long)r->ts_ms);
    if (ttl_s) {
        redisAppendCommand(c, "SET %sr:%b %b EX %llu", p, r->id, r->id_len, r->rec, r->rec_len, ttl_s);
        redisAppendCommand(c, "SET %ss:%b %b EX %llu", p, r->id, r->id_len, r->sum, r->sum_len, ttl_s);
    } else {
        redisAppendCommand(c, "SET %sr:%b %b", p, r->id, r->id_len, r->rec, r->rec_len);
        redisAppendCommand(c, "SET %ss:%b %b", p, r->id, r->id_len, r->sum, r->sum_len);
    }
    redisAppendCommand(c, "ZADD %sindex %s %b", p, score, r->id, r->id_len);
    int n = 3;
    if (ttl_s) {
        char cut[32];
        snprintf(cut, sizeof(cut), "(%llu", (unsigned long long)(wall_ms() - ttl_s * 1000));
        redisAppendCommand(c, "ZREMRANGEBYSCORE %sindex -inf %s", p, cut);
        n++;
    }
    if (drain_replies(c, n) != 0)
        return -1;
    /* the index past max_records: the oldest go, their records with them */
    redisReply *z = redisCommand(c, "ZCARD %sindex", p);
    if (z == NULL)
        return -1;
    long long card = z->type == REDIS_REPLY_INTEGER ? z->integer : 0;
    freeReplyObject(z);
    if (card <= (long long)r->max_records)
        return 0;
    long long extra = card - (long long)r->max_records;
    if (extra > 1000)
        extra = 1000; /* bounded work per write: the next writes go on trimming */
    redisReply *old = redisCommand(c, "ZRANGE %sindex 0 %lld", p, extra - 1);
    if (old == NULL)
        return -1;
    int rc = 0;
    if (old->type == REDIS_REPLY_ARRAY) {
        for (size_t i = 0; i < old->elements; i++) {
            redisReply *e = old->element[i];
            if (e->type != REDIS_REPLY_STRING)
                continue;
            redisAppendCommand(c, "DEL %sr:%b %ss:%b", p, e->str, e->len, p, e->str, e->len);
            redisAppendCommand(c, "ZREM %sindex %b", p, e->str, e->len);
        }
        if (drain_replies(c, (int)old->elements * 2) != 0)
            rc = -1;
        else
            for (size_t i = 0; i < old->elements; i++)
                count(st, "evicted");
    }
    freeReplyObject(old);
    return rc;
}

static void store_free(vsr_replay_store_t *st);

static void *writer_main(void *arg)
{
    vsr_replay_store_t *st = arg;
    pthread_mutex_lock(&st->mu);
    for (;;) {
        while (!st->stop && st->n == 0)
            pthread_cond_wait(&st->cv, &st->mu);
        if (st->stop)
            break;
        rec_t *r = st->head.next; /* the oldest queued */
        unlink_rec(st, r);
        pthread_mutex_unlock(&st->mu);
        int ok = 0;
        if (st->wc == NULL && vsr_now_ms() >= st->retry_at_ms) {
            st->wc = connect_redis(st);
            if (st->wc == NULL)
                st->retry_at_ms = vsr_now_ms() + BACKOFF_MS;
        }
        if (st->wc) {
            ok = write_one(st, st->wc, r) == 0;
            if (!ok && (st->wc->err || st->cluster)) { /* cluster: the slot may have moved (MOVED) */
                redisFree(st->wc);
                st->wc = NULL;
                st->retry_at_ms = vsr_now_ms() + BACKOFF_MS / 4;
            }
        }
        count(st, ok ? "written" : "failed");
        vsr_free(r);
        pthread_mutex_lock(&st->mu);
    }
    pthread_mutex_unlock(&st->mu);
    store_free(st); /* the last reference is gone: the writer closes the store, nobody waits for it */
    return NULL;
}

/* ---- the contract ---- */

vsr_replay_store_t *vsr_replay_open(const vsr_replay_config_t *cfg, vsr_buf_t *err)
{
    const char *prefix = cfg->key_prefix ? cfg->key_prefix : "vsr:replay:";
    if (strlen(prefix) > MAX_PREFIX) {
        if (err)
            vsr_buf_printf(err, "router replay store: key_prefix is longer than %d bytes", MAX_PREFIX);
        return NULL;
    }
    vsr_replay_store_t *st = vsr_calloc(1, sizeof(*st));
    atomic_init(&st->refs, 1);
    st->cfg = *cfg;
    st->address = vsr_strdup(cfg->address ? cfg->address : "127.0.0.1:6379");
    st->password = cfg->password ? vsr_strdup(cfg->password) : NULL;
    if (cfg->cluster) {
        if (cfg->n_cluster_addresses == 0 || cfg->db) {
            if (err)
                vsr_buf_printf(err, "router replay store: cluster mode needs cluster_addresses and db 0");
            vsr_free(st->address);
            vsr_free(st->password);
            vsr_free(st);
            return NULL;
        }
        st->cluster = vsr_calloc(cfg->n_cluster_addresses, sizeof(char *));
        for (size_t i = 0; i < cfg->n_cluster_addresses; i++)
            st->cluster[i] = vsr_strdup(cfg->cluster_addresses[i]);
        st->ncluster = cfg->n_cluster_addresses;
        st->cfg.cluster_addresses = NULL;
    }
    const char *open = strchr(prefix, '{'), *close = open ? strchr(open + 1, '}') : NULL;
    if (cfg->cluster && !(close && close > open + 1)) { /* one slot for every key: "{prefix}" */
        size_t n = strlen(prefix) + 3;
        st->prefix = vsr_malloc(n);
        snprintf(st->prefix, n, "{%s}", prefix);
    } else {
        st->prefix = vsr_strdup(prefix);
    }
    st->head.next = st->head.prev = &st->head;
    pthread_mutex_init(&st->mu, NULL);
    pthread_cond_init(&st->cv, NULL);
    if (cfg->backend == VSR_STORE_REDIS) {
        if (pthread_create(&st->writer, NULL, writer_main, st) != 0) {
            if (err)
                vsr_buf_printf(err, "router replay store: cannot start its writer: %s", strerror(errno));
            store_free(st);
            return NULL;
        }
        pthread_detach(st->writer);
        st->has_writer = 1;
    }
    return st;
}

vsr_replay_store_t *vsr_replay_ref(vsr_replay_store_t *st)
{
    if (st)
        atomic_fetch_add(&st->refs, 1);
    return st;
}

void vsr_replay_unref(vsr_replay_store_t *st)
{
    if (st == NULL || atomic_fetch_sub(&st->refs, 1) != 1)
        return;
    if (st->has_writer) { /* the writer frees it once its command in flight is over */
        pthread_mutex_lock(&st->mu);
        st->stop = 1;
        pthread_cond_signal(&st->cv);
        pthread_mutex_unlock(&st->mu);
        return;
    }
    store_free(st);
}

static void store_free(vsr_replay_store_t *st)
{
    int queued = st->cfg.backend == VSR_STORE_REDIS;
    while (st->head.next != &st->head) {
        rec_t *r = st->head.next;
        unlink_rec(st, r);
        if (queued)
            count(st, "failed");
        vsr_free(r);
    }
    if (st->wc)
        redisFree(st->wc);
    pthread_cond_destroy(&st->cv);
    pthread_mutex_destroy(&st->mu);
    vsr_free(st->address);
    vsr_free(st->password);
    vsr_free(st->prefix);
    for (size_t i = 0; i < st->ncluster; i++)
        vsr_free(st->cluster[i]);
    vsr_free(st->cluster);
    vsr_free(st);
}

int vsr_replay_put(vsr_replay_store_t *st, vsr_slice_t id, uint64_t ts_ms, vsr_slice_t summary, vsr_slice_t record,
                   size_t max_records)
{
    if (id.len == 0 || id.len > MAX_ID) {
        count(st, "failed");
        return VSR_ERR_INVALID;
    }
    if (record.len + summary.len > st->cfg.max_record_bytes) {
        count(st, "failed");
        return VSR_ERR_TOO_BIG;
    }
    if (max_records == 0)
        max_records = 1;
    rec_t *r = rec_new(id, ts_ms, summary, record, max_records);
    pthread_mutex_lock(&st->mu);
    if (st->cfg.backend == VSR_STORE_MEMORY) {
        r->next = st->head.next;
        r->prev = &st->head;
        st->head.next->prev = r;
        st->head.next = r;
        st->n++;
        st->bytes += rec_bytes(r);
        mem_trim(st, max_records);
        pthread_mutex_unlock(&st->mu);
        count(st, "written");
        return VSR_OK;
    }
    if (st->n >= st->cfg.max_queue || st->bytes + rec_bytes(r) > st->cfg.max_queue_bytes) {
        pthread_mutex_unlock(&st->mu);
        vsr_free(r);
        count(st, "failed");
        return VSR_ERR_TOO_BIG;
    }
    /* the queue: oldest at head.next, newest at head.prev */
    r->prev = st->head.prev;
    r->next = &st->head;
    st->head.prev->next = r;
    st->head.prev = r;
    st->n++;
    st->bytes += rec_bytes(r);
    pthread_cond_signal(&st->cv);
    pthread_mutex_unlock(&st->mu);
    return VSR_OK;
}

int vsr_replay_get(vsr_replay_store_t *st, vsr_slice_t id, vsr_buf_t *out)
{
    if (id.len == 0 || id.len > MAX_ID)
        return VSR_ERR_NOT_FOUND;
    if (st->cfg.backend == VSR_STORE_MEMORY) {
        pthread_mutex_lock(&st->mu);
        rec_t *r = mem_find(st, id);
        int rc = r ? vsr_buf_append(out, r->rec, r->rec_len) : VSR_ERR_NOT_FOUND;
        pthread_mutex_unlock(&st->mu);
        return rc;
    }
    redisContext *c = connect_redis(st);
    if (c == NULL)
        return VSR_ERR_IO;
    redisReply *r = redisCommand(c, "GET %sr:%b", st->prefix, id.p, id.len);
    int rc = r == NULL                          ? VSR_ERR_IO
             : r->type == REDIS_REPLY_STRING    ? vsr_buf_append(out, r->str, r->len)
             : r->type == REDIS_REPLY_NIL       ? VSR_ERR_NOT_FOUND
                                                : VSR_ERR_IO;
    if (r)
        freeReplyObject(r);
    redisFree(c);
    return rc;
}

int vsr_replay_list(vsr_replay_store_t *st, size_t limit, vsr_buf_t *out, uint64_t *total)
{
    *total = 0;
    int first = 1;
    if (st->cfg.backend == VSR_STORE_MEMORY) {
        pthread_mutex_lock(&st->mu);
        mem_trim(st, SIZE_MAX);
        *total = st->n;
        vsr_buf_append_cstr(out, "[");
        size_t k = 0;
        for (rec_t *r = st->head.next; r != &st->head && k < limit; r = r->next, k++) {
            if (!first)
                vsr_buf_append_cstr(out, ",");
            first = 0;
            vsr_buf_append(out, r->sum, r->sum_len);
        }
        pthread_mutex_unlock(&st->mu);
        return vsr_buf_append_cstr(out, "]");
    }
    redisContext *c = connect_redis(st);
    if (c == NULL)
        return VSR_ERR_IO;
    int rc = VSR_ERR_IO;
    redisReply *card = NULL, *ids = NULL, *sums = NULL;
    if (st->cfg.ttl_ms) {
        redisReply *t = redisCommand(c, "ZREMRANGEBYSCORE %sindex -inf (%llu", st->prefix,
                                     (unsigned long long)(wall_ms() - st->cfg.ttl_ms));
        if (t == NULL)
            goto out;
        freeReplyObject(t);
    }
    card = redisCommand(c, "ZCARD %sindex", st->prefix);
    if (card == NULL || card->type != REDIS_REPLY_INTEGER)
        goto out;
    *total = (uint64_t)card->integer;
    vsr_buf_append_cstr(out, "[");
    if (limit > 0) {
        ids = redisCommand(c, "ZREVRANGE %sindex 0 %llu", st->prefix, (unsigned long long)(limit - 1));
        if (ids == NULL || ids->type != REDIS_REPLY_ARRAY)
            goto out;
        if (ids->elements > 0) {
            /* one MGET of the summaries: argv "MGET", <prefix>s:<id>... */
            size_t n = ids->elements + 1, plen = strlen(st->prefix);
            const char **argv = vsr_malloc(n * sizeof(*argv));
            size_t *lens = vsr_malloc(n * sizeof(*lens));
            vsr_buf_t keys;
            vsr_buf_init(&keys, 0);
            size_t *offs = vsr_malloc(n * sizeof(*offs));
            argv[0] = "MGET";
            lens[0] = 4;
            for (size_t i = 0; i < ids->elements; i++) {
                redisReply *e = ids->element[i];
                offs[i + 1] = keys.len;
                vsr_buf_append(&keys, st->prefix, plen);
                vsr_buf_append(&keys, "s:", 2);
                if (e->type == REDIS_REPLY_STRING)
                    vsr_buf_append(&keys, e->str, e->len);
                lens[i + 1] = keys.len - offs[i + 1];
            }
            for (size_t i = 1; i < n; i++)
                argv[i] = keys.data + offs[i];
            sums = redisCommandArgv(c, (int)n, argv, lens);
            vsr_free(argv);
            vsr_free(lens);
            vsr_free(offs);
            vsr_buf_free(&keys);
            if (sums == NULL || sums->type != REDIS_REPLY_ARRAY)
                goto out;
            for (size_t i = 0; i < sums->elements; i++) {
                redisReply *v = sums->element[i];
                if (v->type != REDIS_REPLY_STRING)
                    continue; /* expired, or deleted meanwhile */
                if (!first)
                    vsr_buf_append_cstr(out, ",");
                first = 0;
                vsr_buf_append(out, v->str, v->len);
            }
        }
    }
    rc = vsr_buf_append_cstr(out, "]");
out:
    if (card)
        freeReplyObject(card);
    if (ids)
        freeReplyObject(ids);
    if (sums)
        freeReplyObject(sums);
    redisFree(c);
    return rc;
}

int vsr_replay_delete(vsr_replay_store_t *st, vsr_slice_t id)
{
    if (id.len == 0 || id.len > MAX_ID)
        return VSR_ERR_NOT_FOUND;
    if (st->cfg.backend == VSR_STORE_MEMORY) {
        pthread_mutex_lock(&st->mu);
        rec_t *r = mem_find(st, id);
        int found = r != NULL;
        if (r)
            unlink_rec(st, r);
        pthread_mutex_unlock(&st->mu);
        vsr_free(r);
        return found ? VSR_OK : VSR_ERR_NOT_FOUND;
    }
    redisContext *c = connect_redis(st);
    if (c == NULL)
        return VSR_ERR_IO;
    redisReply *r = redisCommand(c, "DEL %sr:%b %ss:%b", st->prefix, id.p, id.len, st->prefix, id.p, id.len);
    int rc = r == NULL || r->type != REDIS_REPLY_INTEGER ? VSR_ERR_IO : r->integer > 0 ? VSR_OK : VSR_ERR_NOT_FOUND;
    if (r)
        freeReplyObject(r);
    if (rc != VSR_ERR_IO) {
        r = redisCommand(c, "ZREM %sindex %b", st->prefix, id.p, id.len);
        if (r)
            freeReplyObject(r);
    }
    redisFree(c);
    return rc;
}
