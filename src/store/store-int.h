/*
 * store-int.h — private to src/store: the memory table (hash + LRU list +
 * semantic index) that is the memory backend and, with empty values, the
 * redis backend's local index; the counters; the operation record.
 */
#ifndef VSR_STORE_INT_H
#define VSR_STORE_INT_H

#include <stdatomic.h>

#include "store/store.h"

/* counters: one writer (the loop thread), readers anywhere */
typedef struct {
    _Atomic uint64_t hits, misses, errors, evictions, expired, rejected, timeouts, reconnects, index_loaded,
        index_bad;
} vsr__store_ctr_t;

static inline void vsr__ctr_inc(_Atomic uint64_t *c)
{
    atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + 1, memory_order_relaxed);
}

typedef struct vsr__lru_s {
    struct vsr__lru_s *prev, *next; /* the LRU list, most recent first */
} vsr__lru_t;

/* LFU: the entries with one read count, in a list of counts ascending */
typedef struct vsr__fbucket_s {
    struct vsr__fbucket_s *prev, *next;
    uint64_t count;
    vsr__lru_t list; /* sentinel: its entries, most recent first */
} vsr__fbucket_t;

typedef struct vsr__mentry_s {
    vsr__lru_t lru;                     /* first: a link is its entry (LFU: in its bucket's list) */
    vsr__fbucket_t *fb;                 /* LFU: its count's bucket */
    struct vsr__mentry_s *hnext;        /* hash chain */
    uint64_t hash;
    uint64_t expiry;                    /* clock ms; dead when <= now */
    size_t cost;                        /* bytes accounted */
    int64_t row;                        /* index row, -1 = none */
    uint32_t klen, vlen;
    uint8_t slen, plen;
    char data[];                        /* key, value, scope, partition */
} vsr__mentry_t;

static inline vsr_slice_t vsr__me_key(const vsr__mentry_t *e) { return vsr_slice(e->data, e->klen); }
static inline vsr_slice_t vsr__me_value(const vsr__mentry_t *e) { return vsr_slice(e->data + e->klen, e->vlen); }
static inline vsr_slice_t vsr__me_scope(const vsr__mentry_t *e)
{
    return vsr_slice(e->data + e->klen + e->vlen, e->slen);
}
static inline vsr_slice_t vsr__me_part(const vsr__mentry_t *e)
{
    return vsr_slice(e->data + e->klen + e->vlen + e->slen, e->plen);
}

typedef struct {
    vsr__mentry_t **buckets;
    size_t nbuckets; /* power of two */
    vsr__lru_t lru; /* sentinel: lru.next = most recent, lru.prev = least (FIFO: newest put, oldest) */
    vsr__fbucket_t fb; /* LFU: sentinel of the count buckets, fb.next = the lowest count */
    vsr_store_eviction_t policy;
    size_t n, bytes, max_entries, max_bytes;
    uint64_t seed;
    /* the semantic index: rows x VSR_STORE_DIM floats, contiguous */
    float *mat;
    int8_t *qmat; /* the rows quantised (kernel INT8 only) */
    vsr__mentry_t **row_entry;
    uint64_t *row_expiry;
    uint64_t *row_tag; /* hash of (scope, partition) */
    float *scores;     /* scratch for the BLAS kernel */
    size_t rows, row_cap;
    vsr_store_kernel_t kernel;
    vsr__store_ctr_t *ctr;
} vsr__mtab_t;

void vsr__mtab_init(vsr__mtab_t *t, size_t max_entries, size_t max_bytes, vsr_store_kernel_t kernel,
                    vsr_store_eviction_t policy, vsr__store_ctr_t *ctr);
void vsr__mtab_free(vsr__mtab_t *t);
/* The live entry for key (now touched: the most recent, or one more read) or
 * NULL; an expired one is dropped (counted) and NULL returned. */
vsr__mentry_t *vsr__mtab_get(vsr__mtab_t *t, vsr_slice_t key, uint64_t now);
/* VSR_OK or VSR_ERR_TOO_BIG (can never fit); evicts by the policy to make
 * room (counted). */
int vsr__mtab_put(vsr__mtab_t *t, vsr_slice_t key, vsr_slice_t value, uint64_t expiry, const float *emb,
                  vsr_slice_t scope, vsr_slice_t part, uint64_t now);
int vsr__mtab_del(vsr__mtab_t *t, vsr_slice_t key); /* 1 when there was one */
/* The best live entry of (scope, part) with similarity >= threshold, or NULL. */
vsr__mentry_t *vsr__mtab_search(vsr__mtab_t *t, const float *q, vsr_slice_t scope, vsr_slice_t part,
                                float threshold, uint64_t now, float *sim);
/* The record size of an entry (what max_bytes counts). */
size_t vsr__mtab_cost(size_t klen, size_t vlen, size_t slen, size_t plen, int has_emb);

/* the redis index stream's record (store_redis.c): version 1, expiry
 * (wall-clock ms), key length (u16), scope length, partition length, then the
 * key, scope, partition and VSR_STORE_DIM floats, in host byte order.
 * Decoding gives slices into rec and copies the floats out; VSR_OK, or
 * VSR_ERR_INVALID for a wrong version, length or non-finite float. */
void vsr__store_encode_record(vsr_buf_t *out, vsr_slice_t key, uint64_t expiry, vsr_slice_t scope, vsr_slice_t part,
                              const float *emb);
int vsr__store_decode_record(vsr_slice_t rec, uint64_t *expiry, vsr_slice_t *key, vsr_slice_t *scope,
                             vsr_slice_t *part, float *emb);

/* Redis Cluster (store_redis_cluster.c): the slot map and a connection per
 * node on a loop (async), or one blocking connection to the node of one slot */
typedef struct vsr__rcl_s vsr__rcl_t;
struct redisAsyncContext;
struct redisContext;
uint16_t vsr__rcl_crc16(const char *p, size_t n);
unsigned vsr__rcl_slot(vsr_slice_t key); /* with hash tags */
/* "host:port" (or "[v6]:port"; localhost = 127.0.0.1): VSR_OK or VSR_ERR_INVALID */
int vsr__rcl_parse_addr(const char *addr, char *host, size_t cap, int *port);
/* addrs: host:port of some of the nodes (names resolved off the loop).
 * timeout_ms bounds each command from its first send, per node: a node with
 * a command past it is dropped (its commands fail), the others go on.  on_ready runs once, when the first
 * map is known; until then commands go to a node being asked for it (and
 * follow its MOVED). */
vsr__rcl_t *vsr__rcl_open(struct uv_loop_s *loop, const char *const *addrs, size_t n, const char *password,
                          const char *username, uint64_t timeout_ms, void (*on_ready)(void *ud), void *ud,
                          vsr_buf_t *err);
/* Sends a command to its key's node, following redirects; fn runs once with
 * the final reply, or NULL when a connection failed (hiredis's callback
 * type).  VSR_ERR_IO: not sent (the node is unreachable or in its retry interval), fn
 * will not run. */
int vsr__rcl_command(vsr__rcl_t *cl, void (*fn)(struct redisAsyncContext *, void *, void *), void *priv, int argc,
                     const char **argv, const size_t *lens);
/* 1 when a command can be sent: the map is known, or a node is connecting */
int vsr__rcl_ready(const vsr__rcl_t *cl);
/* Drops every node's connection (their commands fail); they reconnect on use. */
void vsr__rcl_drop(vsr__rcl_t *cl);
/* Frees the client once its timer closes (keep running the loop); pending
 * commands are called back without a reply first. */
void vsr__rcl_close(vsr__rcl_t *cl);
/* Blocking: a connection to the node that serves `slot`, found by asking
 * the addresses for CLUSTER SLOTS in turn (each connect and command bounded
 * by timeout_ms), authenticated when password is set; NULL when none answers. */
struct redisContext *vsr__rcl_sync_connect(const char *const *addrs, size_t n, unsigned slot, uint64_t timeout_ms,
                                           const char *password);

/* the redis backend (store_redis.c) */
typedef struct vsr__redis_s vsr__redis_t;
int vsr__redis_open(vsr_store_t *s, struct uv_loop_s *loop, const vsr_store_config_t *cfg, vsr_buf_t *err);
void vsr__redis_close(vsr_store_t *s);
int vsr__redis_get(vsr_store_t *s, vsr_slice_t key, vsr_store_done_fn done, void *ud, vsr_store_op_t **h);
int vsr__redis_put(vsr_store_t *s, vsr_slice_t key, vsr_slice_t value, uint64_t ttl_ms, const float *emb,
                   vsr_slice_t scope, vsr_slice_t part, vsr_store_done_fn done, void *ud, vsr_store_op_t **h);
int vsr__redis_del(vsr_store_t *s, vsr_slice_t key, vsr_store_done_fn done, void *ud, vsr_store_op_t **h);
int vsr__redis_search(vsr_store_t *s, const float *q, vsr_slice_t scope, vsr_slice_t part, float threshold,
                      vsr_store_done_fn done, void *ud, vsr_store_op_t **h);
void vsr__redis_cancel(vsr_store_t *s, vsr_store_op_t *op);
int vsr__redis_connected(const vsr_store_t *s);

struct vsr_store_s {
    vsr_store_backend_t backend;
    vsr_store_config_t cfg; /* strings not kept: see the redis state */
    vsr_store_clock_fn clock;
    void *clock_ud;
    vsr__store_ctr_t ctr;
    vsr__mtab_t tab; /* memory: the entries; redis: the index (values empty) */
    vsr__redis_t *redis;
};

static inline uint64_t vsr__store_now(const vsr_store_t *s)
{
    return s->clock(s->clock_ud);
}

/* FNV-1a, 64 bits, from a seed */
static inline uint64_t vsr__store_hash(uint64_t h, vsr_slice_t s)
{
    for (size_t i = 0; i < s.len; i++) {
        h ^= (unsigned char)s.p[i];
        h *= 0x100000001b3ULL;
    }
    return h;
}

#endif /* VSR_STORE_INT_H */
