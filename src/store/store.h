/*
 * store — the response cache's stores: a key/value store with per-entry
 * expiry and an in-process semantic index over the entries' embeddings.
 * Two backends behind one contract: "memory" (per worker, LRU, LFU or FIFO,
 * bounded by entries and bytes) and "redis" (hiredis on the worker's libuv loop; the
 * replicas of a deployment share one cache).  Depends on base, libuv and
 * hiredis only.
 *
 * Threads: one store per worker loop.  Every call and every callback happens
 * on that loop's thread; nothing blocks.  The counters (vsr_store_stats) may
 * be read from another thread (relaxed atomic loads, single writer).
 *
 * Entries: key (bytes, 1..VSR_STORE_MAX_KEY) -> value (bytes, may be empty),
 * an expiry (ttl_ms after the put; 0 = the store's default_ttl_ms), an
 * optional embedding of VSR_STORE_DIM floats (a unit vector: similarity is
 * the dot product), a scope (e.g. a user id hash; "" = global) and a partition
 * (the cache's revision/model key).  A put of an existing key replaces it.
 * An expired entry is never returned: expiry is checked on every read, and
 * there is no timer per entry.
 *
 * Operations and completion (the same for both backends):
 *   - Each operation takes a callback done(ud, status, hit).  It is called
 *     exactly once, on the loop thread, unless the operation is cancelled or
 *     the store closed first.  `hit` (NULL unless status is VSR_OK for get
 *     and search) and every slice in it are valid only during the callback.
 *   - The return value says when: VSR_OK = the callback has already run,
 *     before the call returned (the memory backend always; the redis backend
 *     for failures it knows at once: not connected, too many commands in
 *     flight); VSR_AGAIN = it runs later, and *handle (when handle is not
 *     NULL) names the operation for vsr_store_cancel until then.
 *     VSR_ERR_INVALID = bad arguments (empty or too long key, scope or
 *     partition, embedding missing where required, NULL callback): nothing
 *     happened and the callback is not called.
 *   - Statuses: VSR_OK (found / stored / deleted), VSR_ERR_NOT_FOUND (miss;
 *     del of an absent key is VSR_OK), VSR_ERR_TOO_BIG (the entry can never
 *     fit: larger than max_bytes or max_value_bytes; or, redis, more than
 *     max_inflight commands in flight), VSR_ERR_IO (the backend failed:
 *     disconnected, timed out, an error reply).  The caller treats every
 *     error as a miss and goes on; the store counts it.
 *
 * Semantic search: the best live entry (by dot product) with the same scope
 * and partition whose similarity is >= threshold; the hit carries its key,
 * value and similarity.  Brute force over a contiguous float32 matrix
 * (bounded by max_entries), so it stays one pass of memory bandwidth however
 * the entries were written.  With redis, each store keeps its own index,
 * filled by its own puts and by polling the shared index stream every
 * poll_interval_ms (and at start): an entry another replica wrote is visible
 * to this one's semantic search within one poll interval (exact gets see it at
 * once).  A search hit then GETs the value from redis; if the key is gone
 * (deleted, evicted by redis) the index forgets it and the answer is a miss.
 * See docs/internals/store.md.
 */
#ifndef VSR_STORE_H
#define VSR_STORE_H

#include "base/base.h"

#include <stdint.h>

struct uv_loop_s;

#define VSR_STORE_DIM 512          /* floats in an embedding */
#define VSR_STORE_MAX_KEY 1024     /* bytes in a key */
#define VSR_STORE_MAX_TAG 255      /* bytes in a scope or a partition */

/* POSTGRES: router replay records only (vsr_replay_*) */
typedef enum { VSR_STORE_MEMORY = 0, VSR_STORE_REDIS = 1, VSR_STORE_POSTGRES = 2 } vsr_store_backend_t;

/* How the semantic index computes its dot products (bench/store_bench.c
 * measures them; AUTO is the fastest there).  LOOP and BLAS scan float32
 * rows.  INT8 scans rows quantised to int8 (a quarter of the bytes) and
 * rescores the few within 0.02 of the threshold on their float32 rows: the
 * similarity reported and compared with the threshold is always the
 * float32 one, so a hit is never false; a true hit whose int8 estimate is
 * off by more than 0.02 (not seen in the benchmark's data) would be a miss. */
typedef enum {
    VSR_STORE_KERNEL_AUTO = 0,
    VSR_STORE_KERNEL_LOOP,
    VSR_STORE_KERNEL_BLAS,
    VSR_STORE_KERNEL_INT8
} vsr_store_kernel_t;

/* The clock, in milliseconds.  Default: monotonic for the memory backend;
 * wall clock (CLOCK_REALTIME) for redis, whose index entries carry absolute
 * expiry times that every replica must read alike. */
typedef uint64_t (*vsr_store_clock_fn)(void *ud);

/* Which entry goes when a put needs room (the dead go first whatever the
 * policy when they are the victim).  LRU: the least recently read or written.
 * LFU: the fewest reads since its put; among equals, the one that reached
 * that count first.  FIFO: the oldest put; reads change nothing.  Memory:
 * the entries themselves, O(1) per operation.  Redis: LRU leaves eviction to
 * the server's maxmemory-policy, as before; LFU and FIFO keep a sorted set per
 * key prefix (<prefix>ev) that bounds the entries to max_entries (see
 * store_redis.c). */
typedef enum { VSR_STORE_EVICT_LRU = 0, VSR_STORE_EVICT_LFU, VSR_STORE_EVICT_FIFO } vsr_store_eviction_t;

typedef struct {
    vsr_store_backend_t backend;
    /* bounds (0 = the default in brackets) */
    size_t max_entries;       /* entries in memory; entries in the index [10000] */
    size_t max_bytes;         /* memory: key+value+tags+embedding+overhead [64 MiB] */
    size_t max_value_bytes;   /* a value larger than this is refused [4 MiB] */
    uint64_t default_ttl_ms;  /* a put with ttl_ms 0 [3600000] */
    vsr_store_kernel_t kernel;
    vsr_store_eviction_t eviction; /* [LRU] */
    vsr_store_clock_fn clock; /* NULL = the default above */
    void *clock_ud;

    /* redis only */
    const char *address;         /* "host:port" or "unix:/path" [127.0.0.1:6379] */
    const char *password;        /* NULL = no AUTH */
    const char *username;        /* with password: AUTH username password (ACL) */
    unsigned db;                 /* SELECT db when > 0 */
    const char *key_prefix;      /* ["vsr:rc:"]; at most 64 bytes */
    /* Redis Cluster: the addresses ("host:port"; a name is looked up off
     * the loop) of some of its nodes; the rest come from CLUSTER SLOTS.  address and db are then unused (db must
     * be 0).  Keys spread over the slots; MOVED and ASK are followed. */
    int cluster;
    const char *const *cluster_addresses;
    size_t n_cluster_addresses;
    unsigned max_inflight;       /* operations waiting for redis [1024] */
    uint64_t command_timeout_ms; /* per operation [250] */
    uint64_t connect_timeout_ms; /* [1000] */
    uint64_t reconnect_min_ms;   /* back-off after a failure, doubling [100] */
    uint64_t reconnect_max_ms;   /* [5000] */
    uint64_t poll_interval_ms;   /* the index stream [500] */
    unsigned poll_batch;         /* index records per poll command [1000] */
} vsr_store_config_t;

/* Fills the defaults above (backend memory). */
void vsr_store_config_init(vsr_store_config_t *cfg);

typedef struct {
    vsr_slice_t key;
    vsr_slice_t value;
    float similarity; /* 1 for an exact get */
} vsr_store_hit_t;

typedef void (*vsr_store_done_fn)(void *ud, int status, const vsr_store_hit_t *hit);

typedef struct vsr_store_s vsr_store_t;
typedef struct vsr_store_op_s vsr_store_op_t;

/* Counters since the store opened.  hits/misses count get and search
 * answers; errors count every operation answered VSR_ERR_IO or refused for
 * the in-flight bound (also in `rejected`); evictions count entries dropped
 * to make room (memory, and the index of either backend); expired counts
 * entries found dead on read. */
typedef struct {
    uint64_t hits, misses, errors, evictions, expired;
    uint64_t rejected;       /* redis: over max_inflight */
    uint64_t timeouts;       /* redis: operations past command_timeout_ms */
    uint64_t reconnects;     /* redis: connections made after the first */
    uint64_t index_loaded;   /* redis: index records read from the stream */
    uint64_t index_bad;      /* redis: malformed index records skipped */
    uint64_t entries;        /* now: entries (memory) */
    uint64_t index_entries;  /* now: rows in the semantic index */
    uint64_t bytes;          /* now: bytes accounted (memory) */
    int connected;           /* redis: 1 when the connection is up */
} vsr_store_stats_t;

/* Opens a store on `loop` (the redis backend needs it; the memory backend
 * accepts NULL).  NULL with a message in err (when err is not NULL) for a bad
 * configuration.  The redis backend starts connecting at once and never
 * fails for an unreachable server: it reconnects with back-off. */
vsr_store_t *vsr_store_open(struct uv_loop_s *loop, const vsr_store_config_t *cfg, vsr_buf_t *err);

/* Closes the store: pending operations are dropped without their callbacks;
 * the memory is freed once libuv has closed the store's handles (keep running
 * the loop: uv_run returns when they are gone).  NULL is a no-op.  Not from
 * inside one of this store's callbacks. */
void vsr_store_close(vsr_store_t *s);

int vsr_store_get(vsr_store_t *s, vsr_slice_t key, vsr_store_done_fn done, void *ud, vsr_store_op_t **handle);
/* embedding NULL: the entry is not semantically searchable. */
int vsr_store_put(vsr_store_t *s, vsr_slice_t key, vsr_slice_t value, uint64_t ttl_ms, const float *embedding,
                  vsr_slice_t scope, vsr_slice_t partition, vsr_store_done_fn done, void *ud,
                  vsr_store_op_t **handle);
int vsr_store_del(vsr_store_t *s, vsr_slice_t key, vsr_store_done_fn done, void *ud, vsr_store_op_t **handle);
/* threshold in [-1, 1]. */
int vsr_store_search(vsr_store_t *s, const float *embedding, vsr_slice_t scope, vsr_slice_t partition,
                     float threshold, vsr_store_done_fn done, void *ud, vsr_store_op_t **handle);

/* The operation's callback will not be called.  Only for a handle whose
 * callback has not run yet. */
void vsr_store_cancel(vsr_store_t *s, vsr_store_op_t *op);

void vsr_store_stats(const vsr_store_t *s, vsr_store_stats_t *out);

/* ---- router replay records (the router_replay plugin) ----
 *
 * A process-wide store of replay records: id -> a whole record (JSON) and
 * its summary (the record without bodies), listed newest first.  Any thread
 * may call any function.
 *
 * memory: records under one mutex, newest first; a put evicts the oldest
 *   past the put's max_records (and past cfg.max_records or max_bytes); a
 *   record older than ttl_ms is never returned.  Every call is immediate.
 * redis: a put goes to a bounded queue (max_queue records, max_queue_bytes)
 *   that one writer thread drains over its own blocking connection (each
 *   command bounded by timeout_ms): <prefix>r:<id> and <prefix>s:<id> (SET
 *   EX ttl) and the index <prefix>index (a sorted set by time, trimmed to
 *   max_records, whose evicted records are deleted).  A put never waits: a
 *   full queue, or a server that cannot be reached (retried after a back-off
 *   of at most 1 s), fails the record, and the store counts it.  Reads
 *   (get, list, delete) block their caller on a connection of their own, at
 *   most a connect and a few commands' timeouts: call them from a thread
 *   that may block (the management API's), never from an event loop.
 * postgres: as redis, over libpq: the writer inserts into pg_table (created
 *   when missing; docs/configuration.md has its layout) and deletes the rows
 *   past the put's max_records and those older than ttl_ms; it reconnects
 *   with a back-off that doubles from 100 ms to 2 s, and after
 *   pg_max_lifetime_ms on one connection.  Reads open a connection of their
 *   own as redis's do; connect and each statement are bounded (2 s, 5 s).
 *
 * cluster: each connection asks the configured nodes for the slot map and
 *   goes to the node of the store's slot; a command answered MOVED or ASK
 *   (the slot moved) fails like any error reply, and the next connection
 *   finds the new node.
 *
 * Counts go to cfg.count(count_ud, result) with result "written", "failed"
 * or "evicted", from whichever thread did it.
 */
typedef struct vsr_replay_store_s vsr_replay_store_t;

typedef struct {
    vsr_store_backend_t backend;
    uint64_t ttl_ms;          /* [86400000] */
    size_t max_records;       /* memory: at most, whatever the puts ask [1000000] */
    size_t max_bytes;         /* memory: record and summary bytes kept [256 MiB] */
    size_t max_record_bytes;  /* a larger record is refused (failed) [32 MiB] */
    /* redis only */
    const char *address;      /* "host:port" or "unix:/path" [127.0.0.1:6379] */
    const char *password;     /* NULL = no AUTH */
    unsigned db;
    const char *key_prefix;   /* ["vsr:replay:"]; at most 64 bytes */
    uint64_t timeout_ms;      /* per command, and connect (at least 100) [250] */
    /* postgres only (password above) */
    const char *pg_host;      /* ["localhost"]; a name, an address, or a socket's directory (/...) */
    unsigned pg_port;         /* [5432] */
    const char *pg_database, *pg_user; /* both required */
    const char *pg_ssl_mode;  /* libpq's sslmode ["disable"] */
    const char *pg_table;     /* an identifier, or schema.identifier ["router_replay_records"] */
    uint64_t pg_max_lifetime_ms; /* the writer reconnects after this; 0 = never [300000] */
    /* redis and postgres */
    size_t max_queue;         /* records waiting for the writer [1024] */
    size_t max_queue_bytes;   /* [64 MiB] */
    /* Redis Cluster: "host:port" of some nodes (address and db unused).  Every
     * key of the store shares one slot (the prefix becomes a hash tag,
     * "{vsr:replay:}", unless it holds a non-empty one already), so its multi-key commands run on
     * one node; the connections go to that slot's node. */
    int cluster;
    const char *const *cluster_addresses;
    size_t n_cluster_addresses;
    void (*count)(void *ud, const char *result);
    void *count_ud;
} vsr_replay_config_t;

void vsr_replay_config_init(vsr_replay_config_t *cfg);
/* NULL with a message in err for a bad configuration; an unreachable redis
 * is not one (the writer retries).  The store has one reference. */
vsr_replay_store_t *vsr_replay_open(const vsr_replay_config_t *cfg, vsr_buf_t *err);
vsr_replay_store_t *vsr_replay_ref(vsr_replay_store_t *st);
/* The last reference closes the store without waiting: the redis writer
 * stops after its command in flight (bounded by the timeout), drops what is
 * queued (counted failed) and frees the store itself; a memory store goes at
 * once.  NULL is a no-op. */
void vsr_replay_unref(vsr_replay_store_t *st);
/* At the process's end: waits at most timeout_ms for the writer threads of
 * closed stores to finish (their command in flight, closing their
 * connection).  The number still running.  The first writer started puts
 * this on the process's exit list (base.h). */
unsigned vsr_replay_wait_writers(uint64_t timeout_ms);
/* Keeps one record (copied): id 1..128 bytes, ts_ms its wall-clock time (the
 * list's order).  VSR_OK (stored, or queued for redis), or an error when it
 * was refused at once (counted failed). */
int vsr_replay_put(vsr_replay_store_t *st, vsr_slice_t id, uint64_t ts_ms, vsr_slice_t summary, vsr_slice_t record,
                   size_t max_records);
/* The whole record appended to out: VSR_OK, VSR_ERR_NOT_FOUND, VSR_ERR_IO (redis, postgres). */
int vsr_replay_get(vsr_replay_store_t *st, vsr_slice_t id, vsr_buf_t *out);
/* A JSON array of at most `limit` summaries, newest first, appended to out:
 * VSR_OK or VSR_ERR_IO.  *total gets the records kept (redis: in the index; postgres: in the table). */
int vsr_replay_list(vsr_replay_store_t *st, size_t limit, vsr_buf_t *out, uint64_t *total);
/* VSR_OK, VSR_ERR_NOT_FOUND or VSR_ERR_IO. */
int vsr_replay_delete(vsr_replay_store_t *st, vsr_slice_t id);

#endif /* VSR_STORE_H */
