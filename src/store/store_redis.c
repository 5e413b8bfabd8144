/*
 * store_redis.c — the redis backend: hiredis's async client on the worker's
 * libuv loop.
 *
 * Keys: <prefix>k:<key> holds the value (SET ... PX ttl).  Entries with an
 * embedding are also appended to the stream <prefix>ix (XADD MAXLEN ~
 * max_entries) as one binary record (expiry in wall-clock ms, key, scope,
 * partition, the floats); every store polls the stream from the last id it
 * read and loads the live records into its in-process index (store_mem.c,
 * values empty).  A semantic hit GETs the value.
 *
 * Failures: commands are FIFO on one connection, so the oldest operation's
 * deadline is the only one to watch: past it, the connection is dropped,
 * which fails every operation on it (hiredis calls each back with no reply),
 * and a reconnect follows after a back-off that doubles from
 * reconnect_min_ms to reconnect_max_ms.  While down, operations fail at once.
 * Past max_inflight operations, new ones fail at once.
 *
 * Records are written in the host's byte order; vsr runs on little-endian
 * hosts (x86-64, arm64), so replicas agree.
 */
#include <arpa/inet.h>
#include <math.h>
#include <hiredis/adapters/libuv.h>
#include <hiredis/async.h>
#include <hiredis/hiredis.h>
#include <stdio.h>
#include <uv.h>

#include "store-int.h"

enum { ST_DOWN, ST_CONNECTING, ST_UP };
enum { OP_GET, OP_PUT, OP_DEL, OP_SEARCH, OP_POLL, OP_SETUP, OP_TRIM };

typedef struct oplink_s {
    struct oplink_s *prev, *next; /* the in-flight list, oldest first */
} oplink_t;

struct vsr_store_op_s {
    oplink_t link; /* first: a link is its operation */
    vsr_store_t *s;
    uint64_t deadline;                  /* monotonic ms */
    vsr_store_done_fn done;
    void *ud;
    int kind, pending, status, cancelled, timed_out;
    float sim;
    size_t klen;
    char key[]; /* OP_SEARCH: the hit's key (forgotten when redis lost it) */
};

struct vsr__redis_s {
    uv_loop_t *loop;
    redisAsyncContext *ac;
    int state, closing, open_handles, ever_up, polling;
    uv_timer_t t_op, t_conn, t_poll;
    oplink_t ops; /* sentinel */
    unsigned inflight;          /* user operations */
    uint64_t backoff_ms;
    uint64_t last_ms, last_seq; /* the last stream id read */
    char host[64];
    int port;
    int resolve;                /* host is a name: resolved before each connect (uv_getaddrinfo) */
    int resolving;              /* a lookup is in flight (it holds an open_handles count) */
    uv_getaddrinfo_t gai;
    char *unix_path, *password, *username, *prefix;
    vsr_buf_t kbuf, rec;
    vsr__rcl_t *cl; /* cluster mode: the slot map and its connections (ac unused) */
};

#define REC_VERSION 1
#define REC_HEAD 13 /* version, expiry u64, key length u16, scope length, partition length */
#define REC_SIZE(k, s, p) (REC_HEAD + (k) + (s) + (p) + VSR_STORE_DIM * sizeof(float))

static void schedule_reconnect(vsr_store_t *s);
static void poll_send(vsr_store_t *s);
static void poll_timer_cb(uv_timer_t *t);
static void conn_timer_cb(uv_timer_t *t);
static void evict_touch(vsr_store_t *s, vsr_slice_t key);
static void handle_trim(vsr_store_t *s, const redisReply *rep);

int vsr__redis_connected(const vsr_store_t *s)
{
    return s->redis && s->redis->state == ST_UP;
}

/* ---- the key and the index record ---- */

static vsr_slice_t data_key(vsr__redis_t *r, vsr_slice_t key)
{
    vsr_buf_reset(&r->kbuf);
    vsr_buf_append_cstr(&r->kbuf, r->prefix);
    vsr_buf_append_cstr(&r->kbuf, "k:");
    vsr_buf_append_slice(&r->kbuf, key);
    return vsr_buf_slice(&r->kbuf);
}

void vsr__store_encode_record(vsr_buf_t *out, vsr_slice_t key, uint64_t expiry, vsr_slice_t scope, vsr_slice_t part,
                              const float *emb)
{
    vsr_buf_reset(out);
    uint8_t h[REC_HEAD];
    uint16_t kl = (uint16_t)key.len;
    h[0] = REC_VERSION;
    memcpy(h + 1, &expiry, 8);
    memcpy(h + 9, &kl, 2);
    h[11] = (uint8_t)scope.len;
    h[12] = (uint8_t)part.len;
    vsr_buf_append(out, h, sizeof(h));
    vsr_buf_append_slice(out, key);
    vsr_buf_append_slice(out, scope);
    vsr_buf_append_slice(out, part);
    vsr_buf_append(out, emb, VSR_STORE_DIM * sizeof(float));
}

int vsr__store_decode_record(vsr_slice_t rec, uint64_t *expiry, vsr_slice_t *key, vsr_slice_t *scope,
                             vsr_slice_t *part, float *emb)
{
    if (rec.len < REC_HEAD || (uint8_t)rec.p[0] != REC_VERSION)
        return VSR_ERR_INVALID;
    uint16_t kl;
    memcpy(expiry, rec.p + 1, 8);
    memcpy(&kl, rec.p + 9, 2);
    size_t sl = (uint8_t)rec.p[11], pl = (uint8_t)rec.p[12];
    if (kl < 1 || kl > VSR_STORE_MAX_KEY || rec.len != REC_SIZE(kl, sl, pl))
        return VSR_ERR_INVALID;
    const char *p = rec.p + REC_HEAD;
    *key = vsr_slice(p, kl);
    *scope = vsr_slice(p + kl, sl);
    *part = vsr_slice(p + kl + sl, pl);
    memcpy(emb, p + kl + sl + pl, VSR_STORE_DIM * sizeof(float));
    for (size_t i = 0; i < VSR_STORE_DIM; i++)
        if (!isfinite(emb[i]))
            return VSR_ERR_INVALID;
    return VSR_OK;
}

/* ---- operations ---- */

static vsr_store_op_t *op_new(vsr_store_t *s, int kind, vsr_store_done_fn done, void *ud, vsr_slice_t key)
{
    vsr_store_op_t *op = vsr_calloc(1, sizeof(*op) + key.len);
    op->s = s;
    op->kind = kind;
    op->done = done;
    op->ud = ud;
    op->klen = key.len;
    if (key.len)
        memcpy(op->key, key.p, key.len);
    return op;
}

static int is_user(const vsr_store_op_t *op)
{
    return op->kind <= OP_SEARCH;
}

static void op_timer_cb(uv_timer_t *t);

/* Sends one command for op; on the first, links op in flight.  VSR_OK or
 * VSR_ERR_IO (not sent: the connection is going away). */
static int op_send(vsr_store_op_t *op, int argc, const char **argv, const size_t *lens);
static void on_reply(redisAsyncContext *ac, void *reply, void *priv);

static int op_send(vsr_store_op_t *op, int argc, const char **argv, const size_t *lens)
{
    vsr_store_t *s = op->s;
    vsr__redis_t *r = s->redis;
    if (r->cl) {
        if (vsr__rcl_command(r->cl, on_reply, op, argc, argv, lens) != VSR_OK)
            return VSR_ERR_IO;
    } else if (!r->ac || redisAsyncCommandArgv(r->ac, on_reply, op, argc, argv, lens) != REDIS_OK) {
        return VSR_ERR_IO;
    }
    if (op->pending++ == 0) {
        uint64_t now = vsr_now_ms();
        op->deadline = now + s->cfg.command_timeout_ms;
        op->link.prev = r->ops.prev;
        op->link.next = &r->ops;
        r->ops.prev->next = &op->link;
        r->ops.prev = &op->link;
        if (is_user(op))
            r->inflight++;
        if (!uv_is_active((uv_handle_t *)&r->t_op))
            uv_timer_start(&r->t_op, op_timer_cb, s->cfg.command_timeout_ms + 1, 0);
    }
    return VSR_OK;
}

static void count_answer(vsr_store_t *s, const vsr_store_op_t *op)
{
    if (!is_user(op))
        return;
    if (op->status == VSR_ERR_IO || op->status == VSR_ERR_TOO_BIG)
        vsr__ctr_inc(&s->ctr.errors);
    else if (op->kind == OP_GET || op->kind == OP_SEARCH)
        vsr__ctr_inc(op->status == VSR_OK ? &s->ctr.hits : &s->ctr.misses);
}

/* Ends an operation that never went out: its callback runs now. */
static int fail_now(vsr_store_t *s, vsr_store_op_t *op, int status)
{
    op->status = status;
    count_answer(s, op);
    if (op->done)
        op->done(op->ud, status, NULL);
    vsr_free(op);
    return VSR_OK;
}

/* The checks every user operation passes before going out: VSR_OK to go on,
 * or VSR_ERR_IO / VSR_ERR_TOO_BIG to fail it now. */
static int admit(vsr_store_t *s)
{
    vsr__redis_t *r = s->redis;
    if (r->cl ? !vsr__rcl_ready(r->cl) : (r->state == ST_DOWN || !r->ac))
        return VSR_ERR_IO;
    if (r->inflight >= s->cfg.max_inflight) {
        vsr__ctr_inc(&s->ctr.rejected);
        return VSR_ERR_TOO_BIG;
    }
    return VSR_OK;
}

static void handle_poll(vsr_store_t *s, const redisReply *rep, int *again)
{
    vsr__redis_t *r = s->redis;
    if (rep->type != REDIS_REPLY_ARRAY)
        return;
    uint64_t now = vsr__store_now(s);
    float emb[VSR_STORE_DIM];
    for (size_t i = 0; i < rep->elements; i++) {
        const redisReply *e = rep->element[i];
        if (e->type != REDIS_REPLY_ARRAY || e->elements != 2 || e->element[0]->type != REDIS_REPLY_STRING)
            continue;
        unsigned long long ms, seq;
        char idbuf[48];
        size_t il = e->element[0]->len < sizeof(idbuf) - 1 ? e->element[0]->len : sizeof(idbuf) - 1;
        memcpy(idbuf, e->element[0]->str, il);
        idbuf[il] = 0;
        if (sscanf(idbuf, "%llu-%llu", &ms, &seq) != 2)
            continue;
        if (ms > r->last_ms || (ms == r->last_ms && seq >= r->last_seq)) {
            r->last_ms = ms;
            r->last_seq = seq;
        }
        const redisReply *f = e->element[1];
        const redisReply *rec = NULL;
        if (f->type == REDIS_REPLY_ARRAY)
            for (size_t j = 0; j + 1 < f->elements; j += 2)
                if (f->element[j]->type == REDIS_REPLY_STRING && f->element[j]->len == 1 &&
                    f->element[j]->str[0] == 'r' && f->element[j + 1]->type == REDIS_REPLY_STRING)
                    rec = f->element[j + 1];
        uint64_t expiry;
        vsr_slice_t key, scope, part;
        if (!rec || vsr__store_decode_record(vsr_slice(rec->str, rec->len), &expiry, &key, &scope, &part, emb) !=
                        VSR_OK) {
            vsr__ctr_inc(&s->ctr.index_bad);
            continue;
        }
        vsr__ctr_inc(&s->ctr.index_loaded);
        if (expiry <= now)
            continue;
        vsr__mtab_put(&s->tab, key, VSR_SLICE_NULL, expiry, emb, scope, part, now);
    }
    *again = rep->elements >= s->cfg.poll_batch;
}

static void on_reply(redisAsyncContext *ac, void *reply, void *priv)
{
    VSR_UNUSED(ac);
    vsr_store_op_t *op = priv;
    vsr_store_t *s = op->s;
    vsr__redis_t *r = s->redis;
    redisReply *rep = reply;
    int st = VSR_OK, again = 0;
    vsr_store_hit_t hit, *hp = NULL;
    const redisReply *trim_reply = NULL;
    if (rep)
        r->backoff_ms = s->cfg.reconnect_min_ms; /* the server answers */
    if (!rep) {
        st = VSR_ERR_IO;
        /* cluster: a slow node is dropped by the cluster client, so the
         * timeout is counted here, for the operation past its deadline */
        if (r->cl && is_user(op) && !op->timed_out && vsr_now_ms() >= op->deadline) {
            op->timed_out = 1;
            vsr__ctr_inc(&s->ctr.timeouts);
        }
    } else if (rep->type == REDIS_REPLY_ERROR) {
        st = VSR_ERR_IO;
        vsr_log_warn("store", "redis: %.*s", (int)VSR_MIN(rep->len, 200), rep->str);
    } else if (op->kind == OP_GET || op->kind == OP_SEARCH) {
        if (rep->type == REDIS_REPLY_NIL) {
            st = VSR_ERR_NOT_FOUND;
        } else if (rep->type == REDIS_REPLY_STRING) {
            hit.key = op->kind == OP_SEARCH ? vsr_slice(op->key, op->klen) : VSR_SLICE_NULL;
            hit.value = vsr_slice(rep->str, rep->len);
            hit.similarity = op->kind == OP_SEARCH ? op->sim : 1.0f;
            hp = &hit;
        } else {
            st = VSR_ERR_IO;
        }
    } else if (op->kind == OP_POLL) {
        handle_poll(s, rep, &again);
    } else if (op->kind == OP_TRIM) {
        trim_reply = rep;
    }
    if (op->status == VSR_OK)
        op->status = st;
    if (--op->pending > 0)
        return;
    op->link.prev->next = op->link.next;
    op->link.next->prev = op->link.prev;
    if (is_user(op))
        r->inflight--;
    if (op->kind == OP_POLL)
        r->polling = 0;
    if (op->kind == OP_SEARCH && op->status == VSR_ERR_NOT_FOUND)
        vsr__mtab_del(&s->tab, vsr_slice(op->key, op->klen)); /* gone from redis: forget it */
    if (op->kind == OP_SETUP && op->status != VSR_OK)
        vsr_log_error("store", "redis: a setup or bookkeeping command failed");
    if (hp && !r->closing && s->cfg.eviction == VSR_STORE_EVICT_LFU)
        evict_touch(s, vsr_slice(op->key, op->klen));
    count_answer(s, op);
    if (op->done && !op->cancelled && !r->closing) {
        if (op->kind == OP_GET && hp)
            hit.key = vsr_slice(op->key, op->klen);
        op->done(op->ud, op->status, op->status == VSR_OK ? hp : NULL);
    }
    vsr_free(op);
    if (trim_reply && !r->closing)
        handle_trim(s, trim_reply);
    if (again && !r->closing)
        poll_send(s);
}

/* ---- eviction_policy lfu and fifo ----
 *
 * Redis's own maxmemory-policy is server-wide, so vsr keeps the order itself:
 * the sorted set <prefix>ev holds every key put, scored by its put time in ms
 * (fifo) or by 1 + its reads, plus a fraction from its put time that orders
 * equal counts oldest first (lfu: a read is ZADD XX INCR 1).  Each put runs a
 * script that removes the lowest members past max_entries - 1 (the new key
 * is never its own victim, as in memory), then adds the key, and returns the
 * removed; their values are then deleted.  The script touches only the
 * sorted set, so it runs on one node in cluster mode too.  The set expires
 * with the longest TTL put, so an unused cache leaves nothing behind. */
static const char trim_script[] =
    "redis.call('ZREM', KEYS[1], ARGV[1]) "
    "local n = redis.call('ZCARD', KEYS[1]) + 1 - tonumber(ARGV[3]) "
    "local v = {} "
    "if n > 0 then "
    "v = redis.call('ZRANGE', KEYS[1], 0, n - 1) "
    "redis.call('ZREMRANGEBYRANK', KEYS[1], 0, n - 1) "
    "end "
    "redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1]) "
    "if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[4]) then redis.call('PEXPIRE', KEYS[1], ARGV[4]) end "
    "return v";

/* A command whose reply only matters to the trim (OP_TRIM) or not at all
 * (OP_SETUP: failures are logged). */
static void send_internal(vsr_store_t *s, int kind, int argc, const char **argv, const size_t *lens)
{
    vsr_store_op_t *op = op_new(s, kind, NULL, NULL, VSR_SLICE_NULL);
    if (op_send(op, argc, argv, lens) != VSR_OK)
        vsr_free(op);
}

static void ev_key(vsr__redis_t *r, char *out, size_t cap)
{
    snprintf(out, cap, "%sev", r->prefix);
}

static void evict_after_put(vsr_store_t *s, vsr_slice_t key, uint64_t now, uint64_t ttl_ms)
{
    vsr__redis_t *r = s->redis;
    char ev[160], score[48], max[24], ttl[24];
    ev_key(r, ev, sizeof(ev));
    if (s->cfg.eviction == VSR_STORE_EVICT_FIFO)
        snprintf(score, sizeof(score), "%llu", (unsigned long long)now);
    else /* 1 read, then the put time's position in a ~11.6-day cycle: older first among equals */
        snprintf(score, sizeof(score), "1.%09llu", (unsigned long long)(now % 1000000000ULL));
    snprintf(max, sizeof(max), "%zu", s->cfg.max_entries);
    snprintf(ttl, sizeof(ttl), "%llu", (unsigned long long)ttl_ms);
    const char *argv[8] = {"EVAL", trim_script, "1", ev, key.len ? key.p : "", score, max, ttl};
    size_t lens[8] = {4, sizeof(trim_script) - 1, 1, strlen(ev), key.len, strlen(score), strlen(max), strlen(ttl)};
    send_internal(s, OP_TRIM, 8, argv, lens);
}

static void evict_touch(vsr_store_t *s, vsr_slice_t key)
{
    if (s->cfg.eviction != VSR_STORE_EVICT_LFU)
        return;
    char ev[160];
    ev_key(s->redis, ev, sizeof(ev));
    const char *argv[6] = {"ZADD", ev, "XX", "INCR", "1", key.p};
    size_t lens[6] = {4, strlen(ev), 2, 4, 1, key.len};
    send_internal(s, OP_SETUP, 6, argv, lens);
}

static void evict_forget(vsr_store_t *s, vsr_slice_t key)
{
    if (s->cfg.eviction == VSR_STORE_EVICT_LRU)
        return;
    char ev[160];
    ev_key(s->redis, ev, sizeof(ev));
    const char *argv[3] = {"ZREM", ev, key.p};
    size_t lens[3] = {4, strlen(ev), key.len};
    send_internal(s, OP_SETUP, 3, argv, lens);
}

/* the trim's reply: the keys that went, whose values go now */
static void handle_trim(vsr_store_t *s, const redisReply *rep)
{
    vsr__redis_t *r = s->redis;
    if (rep->type != REDIS_REPLY_ARRAY)
        return;
    for (size_t i = 0; i < rep->elements; i++) {
        const redisReply *m = rep->element[i];
        if (m->type != REDIS_REPLY_STRING || m->len < 1 || m->len > VSR_STORE_MAX_KEY)
            continue;
        vsr_slice_t key = vsr_slice(m->str, m->len);
        vsr__mtab_del(&s->tab, key);
        vsr_slice_t k = data_key(r, key);
        const char *argv[2] = {"DEL", k.p};
        size_t lens[2] = {3, k.len};
        send_internal(s, OP_SETUP, 2, argv, lens);
        vsr__ctr_inc(&s->ctr.evictions);
    }
}

/* ---- the connection ---- */

static void kill_conn(vsr_store_t *s, const char *why)
{
    vsr__redis_t *r = s->redis;
    if (r->cl) { /* the cluster client drops a slow node itself; this is the backstop (op_timer_cb) */
        if (why)
            vsr_log_warn("store", "redis cluster: dropping the connections: %s", why);
        r->polling = 0;
        vsr__rcl_drop(r->cl);
        return;
    }
    redisAsyncContext *ac = r->ac;
    r->ac = NULL;
    r->state = ST_DOWN;
    r->polling = 0;
    uv_timer_stop(&r->t_poll);
    if (why)
        vsr_log_warn("store", "redis: dropping the connection: %s", why);
    if (ac)
        redisAsyncFree(ac); /* calls every pending operation back, without a reply */
    schedule_reconnect(s);
}

static void op_timer_cb(uv_timer_t *t)
{
    vsr_store_t *s = t->data;
    vsr__redis_t *r = s->redis;
    if (r->ops.next == &r->ops)
        return;
    vsr_store_op_t *head = (vsr_store_op_t *)r->ops.next;
    /* cluster: the client drops a slow node alone within 1.25 timeouts; this
     * drop of every node is the backstop, a timeout later */
    uint64_t now = vsr_now_ms(), grace = r->cl ? s->cfg.command_timeout_ms : 0;
    if (head->deadline + grace > now) {
        uv_timer_start(&r->t_op, op_timer_cb, head->deadline + grace - now + 1, 0);
        return;
    }
    for (oplink_t *l = &head->link; l != &r->ops && ((vsr_store_op_t *)l)->deadline + grace <= now; l = l->next)
        if (is_user((vsr_store_op_t *)l))
            vsr__ctr_inc(&s->ctr.timeouts);
    kill_conn(s, "a command timed out");
}

static void on_connect(const redisAsyncContext *ac, int status)
{
    vsr_store_t *s = ac->data;
    vsr__redis_t *r = s->redis;
    if (ac != r->ac)
        return;
    if (status != REDIS_OK) {
        vsr_log_warn("store", "redis: connect failed: %s", ac->errstr);
        r->ac = NULL; /* hiredis frees it when this returns */
        r->state = ST_DOWN;
        schedule_reconnect(s);
        return;
    }
    r->state = ST_UP; /* the back-off resets at the first reply: a server that accepts but never answers keeps it */
    uv_timer_stop(&r->t_conn);
    if (r->ever_up)
        vsr__ctr_inc(&s->ctr.reconnects);
    r->ever_up = 1;
    uv_timer_start(&r->t_poll, poll_timer_cb, s->cfg.poll_interval_ms, s->cfg.poll_interval_ms);
    poll_send(s);
}

/* cluster mode: the first slot map is known */
static void on_cluster_ready(void *ud)
{
    vsr_store_t *s = ud;
    vsr__redis_t *r = s->redis;
    r->state = ST_UP;
    r->ever_up = 1;
    uv_timer_start(&r->t_poll, poll_timer_cb, s->cfg.poll_interval_ms, s->cfg.poll_interval_ms);
    poll_send(s);
}

static void on_disconnect(const redisAsyncContext *ac, int status)
{
    VSR_UNUSED(status);
    vsr_store_t *s = ac->data;
    vsr__redis_t *r = s->redis;
    if (ac != r->ac)
        return;
    vsr_log_warn("store", "redis: connection lost%s%s", ac->errstr[0] ? ": " : "", ac->errstr);
    r->ac = NULL; /* hiredis frees it */
    r->state = ST_DOWN;
    r->polling = 0;
    uv_timer_stop(&r->t_poll);
    schedule_reconnect(s);
}

static void handle_closed(vsr_store_t *s);
static void connect_to(vsr_store_t *s, const char *ip);

/* A host name is looked up on libuv's thread pool before every connect, so
 * the loop never blocks on a resolver and a server that moved (a new pod
 * address) is found on the next reconnect.  While the lookup runs the store
 * is down: operations fail at once, as during a back-off. */
static void on_resolved(uv_getaddrinfo_t *req, int status, struct addrinfo *res)
{
    vsr_store_t *s = req->data;
    vsr__redis_t *r = s->redis;
    r->resolving = 0;
    char ip[INET6_ADDRSTRLEN] = "";
    if (status == 0 && res) {
        const void *a = res->ai_family == AF_INET6 ? (const void *)&((struct sockaddr_in6 *)res->ai_addr)->sin6_addr
                                                    : (const void *)&((struct sockaddr_in *)res->ai_addr)->sin_addr;
        if (!inet_ntop(res->ai_family, a, ip, sizeof(ip)))
            ip[0] = 0;
    }
    if (res)
        uv_freeaddrinfo(res);
    if (r->closing) {
        handle_closed(s);
        return;
    }
    r->open_handles--;
    if (!ip[0]) {
        vsr_log_warn("store", "redis: cannot resolve \"%s\": %s", r->host,
                     status ? uv_strerror(status) : "no address");
        schedule_reconnect(s);
        return;
    }
    connect_to(s, ip);
}

static void do_connect(vsr_store_t *s)
{
    vsr__redis_t *r = s->redis;
    if (r->resolve && !r->unix_path) {
        if (r->resolving)
            return;
        struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
        r->gai.data = s;
        int rc = uv_getaddrinfo(r->loop, &r->gai, on_resolved, r->host, NULL, &hints);
        if (rc != 0) {
            vsr_log_warn("store", "redis: cannot resolve \"%s\": %s", r->host, uv_strerror(rc));
            schedule_reconnect(s);
            return;
        }
        r->resolving = 1;
        r->open_handles++;
        return;
    }
    connect_to(s, r->host);
}

static void connect_to(vsr_store_t *s, const char *ip)
{
    vsr__redis_t *r = s->redis;
    redisAsyncContext *ac = r->unix_path ? redisAsyncConnectUnix(r->unix_path) : redisAsyncConnect(ip, r->port);
    if (!ac || ac->err) {
        vsr_log_warn("store", "redis: connect failed: %s", ac ? ac->errstr : "out of memory");
        if (ac)
            redisAsyncFree(ac);
        schedule_reconnect(s);
        return;
    }
    ac->data = s;
    if (redisLibuvAttach(ac, r->loop) != REDIS_OK) {
        redisAsyncFree(ac);
        schedule_reconnect(s);
        return;
    }
    redisAsyncSetConnectCallback(ac, on_connect);
    redisAsyncSetDisconnectCallback(ac, on_disconnect);
    r->ac = ac;
    r->state = ST_CONNECTING;
    uv_timer_start(&r->t_conn, conn_timer_cb, s->cfg.connect_timeout_ms, 0);
    if (r->password) {
        vsr_store_op_t *op = op_new(s, OP_SETUP, NULL, NULL, VSR_SLICE_NULL);
        const char *argv[3] = {"AUTH", r->username ? r->username : r->password, r->password};
        size_t lens[3] = {4, strlen(argv[1]), strlen(r->password)};
        if (op_send(op, r->username ? 3 : 2, argv, lens) != VSR_OK)
            vsr_free(op);
    }
    if (s->cfg.db) {
        char db[16];
        int n = snprintf(db, sizeof(db), "%u", s->cfg.db);
        vsr_store_op_t *op = op_new(s, OP_SETUP, NULL, NULL, VSR_SLICE_NULL);
        const char *argv[2] = {"SELECT", db};
        size_t lens[2] = {6, (size_t)n};
        if (op_send(op, 2, argv, lens) != VSR_OK)
            vsr_free(op);
    }
}

/* t_conn: the back-off before a connect, then the connect's deadline */
static void conn_timer_cb(uv_timer_t *t)
{
    vsr_store_t *s = t->data;
    vsr__redis_t *r = s->redis;
    if (r->state == ST_CONNECTING)
        kill_conn(s, "connect timed out");
    else if (r->state == ST_DOWN)
        do_connect(s);
}

static void schedule_reconnect(vsr_store_t *s)
{
    vsr__redis_t *r = s->redis;
    if (r->closing)
        return;
    uint64_t d = r->backoff_ms;
    uint64_t next = r->backoff_ms * 2;
    r->backoff_ms = next > s->cfg.reconnect_max_ms ? s->cfg.reconnect_max_ms : next;
    uv_timer_start(&r->t_conn, conn_timer_cb, d, 0);
}

static void poll_send(vsr_store_t *s)
{
    vsr__redis_t *r = s->redis;
    if (r->state != ST_UP || r->polling)
        return;
    char start[48], count[24], ix[160];
    uint64_t ms = r->last_ms, seq = r->last_seq + 1;
    if (seq == 0)
        ms++; /* seq wrapped */
    if (r->last_ms == 0 && r->last_seq == 0)
        seq = 0; /* nothing read yet: from the beginning */
    snprintf(start, sizeof(start), "%llu-%llu", (unsigned long long)ms, (unsigned long long)seq);
    snprintf(count, sizeof(count), "%u", s->cfg.poll_batch);
    snprintf(ix, sizeof(ix), "%six", r->prefix);
    const char *argv[6] = {"XRANGE", ix, start, "+", "COUNT", count};
    size_t lens[6] = {6, strlen(ix), strlen(start), 1, 5, strlen(count)};
    vsr_store_op_t *op = op_new(s, OP_POLL, NULL, NULL, VSR_SLICE_NULL);
    if (op_send(op, 6, argv, lens) != VSR_OK) {
        vsr_free(op);
        return;
    }
    r->polling = 1;
}

static void poll_timer_cb(uv_timer_t *t)
{
    poll_send(t->data);
}

/* ---- open and close ---- */

static int parse_address(vsr__redis_t *r, const char *addr, vsr_buf_t *err)
{
    if (!strncmp(addr, "unix:", 5)) {
        if (!addr[5] || strlen(addr + 5) >= 108) {
            vsr_buf_printf(err, "store: redis address \"%s\": a unix socket path of 1..107 bytes", addr);
            return VSR_ERR_INVALID;
        }
        r->unix_path = vsr_strdup(addr + 5);
        return VSR_OK;
    }
    const char *colon = strrchr(addr, ':');
    uint64_t port;
    if (!colon || colon == addr ||
        vsr_slice_to_u64(vsr_slice_cstr(colon + 1), 65535, &port) != VSR_OK || port == 0) {
        vsr_buf_printf(err, "store: redis address \"%s\": want host:port or unix:/path", addr);
        return VSR_ERR_INVALID;
    }
    size_t hl = (size_t)(colon - addr);
    if (addr[0] == '[' && hl >= 2 && addr[hl - 1] == ']') {
        addr++;
        hl -= 2;
    }
    if (hl >= sizeof(r->host)) {
        vsr_buf_printf(err, "store: redis address \"%s\": host too long", addr);
        return VSR_ERR_INVALID;
    }
    memcpy(r->host, addr, hl);
    r->host[hl] = 0;
    if (!strcmp(r->host, "localhost"))
        strcpy(r->host, "127.0.0.1");
    /* a name is looked up before each connect (do_connect): hiredis would
     * resolve it itself, blocking the loop */
    unsigned char a[16];
    r->resolve = inet_pton(AF_INET, r->host, a) != 1 && inet_pton(AF_INET6, r->host, a) != 1;
    if (r->resolve && hl == 0) {
        vsr_buf_printf(err, "store: redis address \"%s\": want host:port or unix:/path", addr);
        return VSR_ERR_INVALID;
    }
    r->port = (int)port;
    return VSR_OK;
}

static void redis_free(vsr_store_t *s)
{
    vsr__redis_t *r = s->redis;
    vsr_free(r->unix_path);
    vsr_free(r->password);
    vsr_free(r->username);
    vsr_free(r->prefix);
    vsr_buf_free(&r->kbuf);
    vsr_buf_free(&r->rec);
    vsr_free(r);
    s->redis = NULL;
}

int vsr__redis_open(vsr_store_t *s, struct uv_loop_s *loop, const vsr_store_config_t *cfg, vsr_buf_t *err)
{
    if (!loop) {
        vsr_buf_printf(err, "store: the redis backend needs a loop");
        return VSR_ERR_INVALID;
    }
    const char *prefix = cfg->key_prefix ? cfg->key_prefix : "vsr:rc:";
    if (strlen(prefix) > 64) {
        vsr_buf_printf(err, "store: key_prefix is over 64 bytes");
        return VSR_ERR_INVALID;
    }
    if (cfg->cluster && cfg->db) {
        vsr_buf_printf(err, "store: redis cluster mode has only db 0");
        return VSR_ERR_INVALID;
    }
    vsr__redis_t *r = vsr_calloc(1, sizeof(*r));
    s->redis = r;
    if (!cfg->cluster && parse_address(r, cfg->address ? cfg->address : "127.0.0.1:6379", err) != VSR_OK) {
        redis_free(s);
        return VSR_ERR_INVALID;
    }
    if (cfg->username && !cfg->password) {
        vsr_buf_printf(err, "store: a redis username needs a password");
        redis_free(s);
        return VSR_ERR_INVALID;
    }
    vsr_store_config_t *c = &s->cfg;
    if (!c->max_inflight)
        c->max_inflight = 1024;
    if (!c->command_timeout_ms)
        c->command_timeout_ms = 250;
    if (!c->connect_timeout_ms)
        c->connect_timeout_ms = 1000;
    if (!c->reconnect_min_ms)
        c->reconnect_min_ms = 100;
    if (c->reconnect_max_ms < c->reconnect_min_ms)
        c->reconnect_max_ms = VSR_MAX(c->reconnect_min_ms, 5000);
    if (!c->poll_interval_ms)
        c->poll_interval_ms = 500;
    if (!c->poll_batch)
        c->poll_batch = 1000;
    if (cfg->cluster) {
        r->cl = vsr__rcl_open(loop, cfg->cluster_addresses, cfg->n_cluster_addresses, cfg->password, cfg->username,
                              c->command_timeout_ms, on_cluster_ready, s, err);
        if (!r->cl) {
            redis_free(s);
            return VSR_ERR_INVALID;
        }
    }
    r->password = cfg->password ? vsr_strdup(cfg->password) : NULL;
    r->username = cfg->username ? vsr_strdup(cfg->username) : NULL;
    r->prefix = vsr_strdup(prefix);
    c->address = NULL; /* not kept: the caller's strings (cfg may be c itself) */
    c->password = c->username = c->key_prefix = NULL;
    c->cluster_addresses = NULL;
    c->n_cluster_addresses = 0;
    vsr_buf_init(&r->kbuf, 0);
    vsr_buf_init(&r->rec, 0);
    r->loop = loop;
    r->ops.next = r->ops.prev = &r->ops;
    r->backoff_ms = c->reconnect_min_ms;
    uv_timer_t *timers[3] = {&r->t_op, &r->t_conn, &r->t_poll};
    for (int i = 0; i < 3; i++) {
        uv_timer_init(loop, timers[i]);
        timers[i]->data = s;
    }
    r->open_handles = 3;
    if (!r->cl)
        do_connect(s);
    return VSR_OK;
}

static void handle_closed(vsr_store_t *s)
{
    if (--s->redis->open_handles > 0)
        return;
    redis_free(s);
    vsr__mtab_free(&s->tab);
    vsr_free(s);
}

static void on_timer_closed(uv_handle_t *h)
{
    handle_closed(h->data);
}

void vsr__redis_close(vsr_store_t *s)
{
    vsr__redis_t *r = s->redis;
    r->closing = 1;
    redisAsyncContext *ac = r->ac;
    r->ac = NULL;
    r->state = ST_DOWN;
    if (ac)
        redisAsyncFree(ac); /* the pending operations end, without their callbacks */
    if (r->cl)
        vsr__rcl_close(r->cl); /* likewise; it frees itself */
    r->cl = NULL;
    if (r->resolving)
        uv_cancel((uv_req_t *)&r->gai); /* its callback still runs (UV_EAI_CANCELED or done) and frees */
    uv_close((uv_handle_t *)&r->t_op, on_timer_closed);
    uv_close((uv_handle_t *)&r->t_conn, on_timer_closed);
    uv_close((uv_handle_t *)&r->t_poll, on_timer_closed);
}

/* ---- the operations ---- */

int vsr__redis_get(vsr_store_t *s, vsr_slice_t key, vsr_store_done_fn done, void *ud, vsr_store_op_t **h)
{
    vsr__redis_t *r = s->redis;
    vsr_store_op_t *op = op_new(s, OP_GET, done, ud, key);
    int rc = admit(s);
    if (rc != VSR_OK)
        return fail_now(s, op, rc);
    vsr_slice_t k = data_key(r, key);
    const char *argv[2] = {"GET", k.p};
    size_t lens[2] = {3, k.len};
    if (op_send(op, 2, argv, lens) != VSR_OK)
        return fail_now(s, op, VSR_ERR_IO);
    if (h)
        *h = op;
    return VSR_AGAIN;
}

int vsr__redis_put(vsr_store_t *s, vsr_slice_t key, vsr_slice_t value, uint64_t ttl_ms, const float *emb,
                   vsr_slice_t scope, vsr_slice_t part, vsr_store_done_fn done, void *ud, vsr_store_op_t **h)
{
    vsr__redis_t *r = s->redis;
    vsr_store_op_t *op = op_new(s, OP_PUT, done, ud, VSR_SLICE_NULL);
    int rc = admit(s);
    if (rc != VSR_OK)
        return fail_now(s, op, rc);
    uint64_t now = vsr__store_now(s);
    char ttl[24];
    int tl = snprintf(ttl, sizeof(ttl), "%llu", (unsigned long long)ttl_ms);
    vsr_slice_t k = data_key(r, key);
    const char *argv[8] = {"SET", k.p, value.len ? value.p : "", "PX", ttl};
    size_t lens[8] = {3, k.len, value.len, 2, (size_t)tl};
    if (op_send(op, 5, argv, lens) != VSR_OK)
        return fail_now(s, op, VSR_ERR_IO);
    if (emb) {
        char ix[160], maxlen[24];
        snprintf(ix, sizeof(ix), "%six", r->prefix);
        int ml = snprintf(maxlen, sizeof(maxlen), "%zu", s->cfg.max_entries);
        vsr__store_encode_record(&r->rec, key, now + ttl_ms, scope, part, emb);
        vsr_slice_t rec = vsr_buf_slice(&r->rec);
        const char *xv[8] = {"XADD", ix, "MAXLEN", "~", maxlen, "*", "r", rec.p};
        size_t xl[8] = {4, strlen(ix), 6, 1, (size_t)ml, 1, 1, rec.len};
        if (op_send(op, 8, xv, xl) != VSR_OK)
            op->status = VSR_ERR_IO; /* the SET's reply ends it */
        vsr__mtab_put(&s->tab, key, VSR_SLICE_NULL, now + ttl_ms, emb, scope, part, now);
    } else {
        vsr__mtab_del(&s->tab, key);
    }
    if (s->cfg.eviction != VSR_STORE_EVICT_LRU)
        evict_after_put(s, key, now, ttl_ms);
    if (h)
        *h = op;
    return VSR_AGAIN;
}

int vsr__redis_del(vsr_store_t *s, vsr_slice_t key, vsr_store_done_fn done, void *ud, vsr_store_op_t **h)
{
    vsr__redis_t *r = s->redis;
    vsr__mtab_del(&s->tab, key);
    vsr_store_op_t *op = op_new(s, OP_DEL, done, ud, VSR_SLICE_NULL);
    int rc = admit(s);
    if (rc != VSR_OK)
        return fail_now(s, op, rc);
    vsr_slice_t k = data_key(r, key);
    const char *argv[2] = {"DEL", k.p};
    size_t lens[2] = {3, k.len};
    if (op_send(op, 2, argv, lens) != VSR_OK)
        return fail_now(s, op, VSR_ERR_IO);
    evict_forget(s, key);
    if (h)
        *h = op;
    return VSR_AGAIN;
}

int vsr__redis_search(vsr_store_t *s, const float *q, vsr_slice_t scope, vsr_slice_t part, float threshold,
                      vsr_store_done_fn done, void *ud, vsr_store_op_t **h)
{
    vsr__redis_t *r = s->redis;
    float sim = 0;
    vsr__mentry_t *e = vsr__mtab_search(&s->tab, q, scope, part, threshold, vsr__store_now(s), &sim);
    if (!e) {
        vsr__ctr_inc(&s->ctr.misses);
        done(ud, VSR_ERR_NOT_FOUND, NULL);
        return VSR_OK;
    }
    vsr_store_op_t *op = op_new(s, OP_SEARCH, done, ud, vsr__me_key(e));
    op->sim = sim;
    int rc = admit(s);
    if (rc != VSR_OK)
        return fail_now(s, op, rc);
    vsr_slice_t k = data_key(r, vsr_slice(op->key, op->klen));
    const char *argv[2] = {"GET", k.p};
    size_t lens[2] = {3, k.len};
    if (op_send(op, 2, argv, lens) != VSR_OK)
        return fail_now(s, op, VSR_ERR_IO);
    if (h)
        *h = op;
    return VSR_AGAIN;
}

void vsr__redis_cancel(vsr_store_t *s, vsr_store_op_t *op)
{
    VSR_UNUSED(s);
    op->cancelled = 1; /* freed when redis answers or the connection goes */
}
