/*
 * store_replay.c — the router_replay plugin's record store (store.h, "router
 * replay records"): memory (one list under a mutex), redis or postgres (a
 * writer thread with a bounded queue; reads on a connection of their own).
 */
#include <ctype.h>
#include <errno.h>
#include <hiredis/hiredis.h>
#include <libpq-fe.h>
#include <openssl/crypto.h>
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
#define PG_TABLE_MAX 48           /* idx_<table>_created_at stays within 63 bytes */
#define PG_BACKOFF_MIN_MS 100
#define PG_BACKOFF_MAX_MS 2000
#define PG_CONNECT_TIMEOUT "2"    /* seconds (libpq's least) */
#define PG_STATEMENT_MS 5000
#define PG_TTL_EVERY_MS 1000      /* the writer deletes expired rows at most this often */
#define PG_TRIM_MAX 1000          /* rows one trim deletes at most: the next writes go on */

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
    /* postgres */
    char *pg_host, *pg_port, *pg_database, *pg_user, *pg_ssl_mode, *pg_table; /* copies: cfg's go with its version */
    PGconn *pc;                /* the writer's connection */
    uint64_t pc_born_ms, pg_backoff_ms, ttl_at_ms;
    int pg_down_logged;
};

/* the writer threads still running, of every store (vsr_replay_wait_writers) */
static pthread_mutex_t g_writers_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_writers_cv = PTHREAD_COND_INITIALIZER;
static unsigned g_writers;

static unsigned writers_exit_wait(void *arg, uint64_t timeout_ms)
{
    VSR_UNUSED(arg);
    return vsr_replay_wait_writers(timeout_ms);
}

/* on the process's exit list (base.h) from the first writer on */
static pthread_once_t g_writers_listed = PTHREAD_ONCE_INIT;

static void writers_list(void)
{
    if (vsr_exit_wait_add("router replay store writer(s)", writers_exit_wait, NULL) != VSR_OK)
        vsr_log_warn("store", "router replay: the exit list is full: the writers are not waited for at exit");
}

static void writers_add(int d)
{
    if (d > 0)
        pthread_once(&g_writers_listed, writers_list);
    pthread_mutex_lock(&g_writers_mu);
    g_writers += (unsigned)d;
    if (g_writers == 0)
        pthread_cond_broadcast(&g_writers_cv);
    pthread_mutex_unlock(&g_writers_mu);
}

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

/* ---- postgres ---- */

/* A table name vsr writes into SQL as it is: [A-Za-z_][A-Za-z0-9_]*, at most
 * PG_TABLE_MAX bytes (PostgreSQL folds it to lower case, as the reference's
 * unquoted name is). */
static int pg_table_ok(const char *t)
{
    size_t n = strlen(t);
    if (n == 0 || n > PG_TABLE_MAX || !(isalpha((unsigned char)t[0]) || t[0] == '_'))
        return 0;
    for (size_t i = 1; i < n; i++)
        if (!(isalnum((unsigned char)t[i]) || t[i] == '_'))
            return 0;
    return 1;
}

static void pg_quiet(void *arg, const char *message)
{
    VSR_UNUSED(arg);
    VSR_UNUSED(message); /* "relation already exists, skipping" and the like */
}

/* A connection, or NULL with libpq's reason in why (when not NULL).  Every
 * wait on it is bounded: the connect, each statement, and unacknowledged
 * data (tcp_user_timeout).  Its clock is UTC, so LOCALTIMESTAMP and the
 * stored times agree whatever the server's zone. */
static PGconn *connect_pg(vsr_replay_store_t *st, char *why, size_t why_cap)
{
    char opts[96];
    snprintf(opts, sizeof(opts), "-c statement_timeout=%d -c TimeZone=UTC", PG_STATEMENT_MS);
    /* gssencmode: the reference's driver has no GSSAPI encryption either */
    const char *keys[] = {"host",    "port",          "dbname",          "user",
                          "password", "sslmode",      "options",         "connect_timeout",
                          "tcp_user_timeout", "application_name", "gssencmode", NULL};
    const char *vals[] = {st->pg_host,  st->pg_port,     st->pg_database, st->pg_user,
                          st->password, st->pg_ssl_mode, opts,            PG_CONNECT_TIMEOUT,
                          "5000",       "vsr",           "disable",       NULL};
    PGconn *c = PQconnectdbParams(keys, vals, 0);
    if (c == NULL) {
        if (why)
            snprintf(why, why_cap, "out of memory");
        return NULL;
    }
    if (PQstatus(c) != CONNECTION_OK) {
        if (why) {
            snprintf(why, why_cap, "%s", PQerrorMessage(c));
            why[strcspn(why, "\n")] = 0;
        }
        PQfinish(c);
        return NULL;
    }
    PQsetNoticeProcessor(c, pg_quiet, NULL);
    return c;
}

/* The table and its indexes when missing (docs/configuration.md has the
 * layout).  The columns vsr reads are added to a table the reference made;
 * an advisory lock keeps two replicas' first connections from racing on
 * the catalog.  0, or -1 with the reason in why. */
static int pg_ensure_table(vsr_replay_store_t *st, PGconn *c, char *why, size_t why_cap)
{
    const char *t = st->pg_table;
    vsr_buf_t q;
    vsr_buf_init(&q, 1024);
    vsr_buf_printf(&q,
                   "BEGIN; SELECT pg_advisory_xact_lock(hashtext('vsr router_replay %s'));"
                   "CREATE TABLE IF NOT EXISTS %s (id VARCHAR(255) PRIMARY KEY, timestamp TIMESTAMP NOT NULL,"
                   " summary TEXT, record TEXT, created_at TIMESTAMP DEFAULT LOCALTIMESTAMP);"
                   "ALTER TABLE %s ADD COLUMN IF NOT EXISTS summary TEXT;"
                   "ALTER TABLE %s ADD COLUMN IF NOT EXISTS record TEXT;"
                   "CREATE INDEX IF NOT EXISTS idx_%s_timestamp ON %s (timestamp DESC);"
                   "CREATE INDEX IF NOT EXISTS idx_%s_created_at ON %s (created_at);"
                   "COMMIT;",
                   t, t, t, t, t, t, t, t);
    vsr_buf_append(&q, "", 1);
    PGresult *res = PQexec(c, q.data);
    vsr_buf_free(&q);
    int ok = res && PQresultStatus(res) == PGRES_COMMAND_OK && PQtransactionStatus(c) == PQTRANS_IDLE;
    if (!ok && why) {
        snprintf(why, why_cap, "cannot create table %s: %s", t, PQerrorMessage(c));
        why[strcspn(why, "\n")] = 0;
    }
    PQclear(res);
    return ok ? 0 : -1;
}

/* "<table> WHERE record IS NOT NULL AND created_at is within the TTL": the
 * rows a read sees (rows of the reference's own, without a record, are
 * not vsr's). */
static void pg_live_rows(const vsr_replay_store_t *st, vsr_buf_t *q)
{
    vsr_buf_printf(q, "%s WHERE record IS NOT NULL", st->pg_table);
    if (st->cfg.ttl_ms)
        vsr_buf_printf(q, " AND created_at >= LOCALTIMESTAMP - make_interval(secs => %llu.%03llu)",
                       (unsigned long long)(st->cfg.ttl_ms / 1000), (unsigned long long)(st->cfg.ttl_ms % 1000));
}

/* A statement with text parameters; the result, or NULL (freed) when it
 * failed.  *missing is set when the table does not exist (yet). */
static PGresult *pg_run(PGconn *c, vsr_buf_t *q, int n, const char *const *params, ExecStatusType want, int *missing)
{
    vsr_buf_append(q, "", 1);
    PGresult *res = PQexecParams(c, q->data, n, NULL, params, NULL, NULL, 0);
    if (res && PQresultStatus(res) == want)
        return res;
    if (missing) {
        const char *state = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;
        *missing = state && strcmp(state, "42P01") == 0;
    }
    PQclear(res);
    return NULL;
}

static uint64_t affected(PGresult *res)
{
    return (uint64_t)strtoull(PQcmdTuples(res), NULL, 10);
}

/* One record: the row (a second put of an id replaces it), then the rows
 * past max_records (counted evicted) and, at most once a second, the
 * expired ones.  0, or -1 when the insert failed. */
static int pg_write_one(vsr_replay_store_t *st, PGconn *c, const rec_t *r)
{
    char ts[32], keep[32];
    snprintf(ts, sizeof(ts), "%llu", (unsigned long long)r->ts_ms);
    vsr_buf_t q;
    vsr_buf_init(&q, 512);
    vsr_buf_printf(&q,
                   "INSERT INTO %s (id, timestamp, summary, record, created_at)"
                   " VALUES ($1, to_timestamp($2::bigint / 1000.0) AT TIME ZONE 'UTC', $3, $4, LOCALTIMESTAMP)"
                   " ON CONFLICT (id) DO UPDATE SET timestamp = EXCLUDED.timestamp, summary = EXCLUDED.summary,"
                   " record = EXCLUDED.record, created_at = EXCLUDED.created_at",
                   st->pg_table);
    const char *ins[] = {r->id, ts, r->sum, r->rec};
    PGresult *res = pg_run(c, &q, 4, ins, PGRES_COMMAND_OK, NULL);
    if (res == NULL) {
        vsr_buf_free(&q);
        return -1;
    }
    PQclear(res);
    vsr_buf_reset(&q);
    snprintf(keep, sizeof(keep), "%zu", r->max_records);
    vsr_buf_printf(&q,
                   "DELETE FROM %s WHERE id IN (SELECT id FROM %s WHERE record IS NOT NULL"
                   " ORDER BY timestamp DESC, id DESC OFFSET $1::bigint LIMIT %d)",
                   st->pg_table, st->pg_table, PG_TRIM_MAX);
    const char *trim[] = {keep};
    res = pg_run(c, &q, 1, trim, PGRES_COMMAND_OK, NULL);
    if (res) {
        for (uint64_t i = affected(res); i > 0; i--)
            count(st, "evicted");
        PQclear(res);
    }
    uint64_t now = vsr_now_ms();
    if (st->cfg.ttl_ms && now >= st->ttl_at_ms) {
        st->ttl_at_ms = now + PG_TTL_EVERY_MS;
        vsr_buf_reset(&q);
        vsr_buf_printf(&q,
                       "DELETE FROM %s WHERE record IS NOT NULL"
                       " AND created_at < LOCALTIMESTAMP - make_interval(secs => %llu.%03llu)",
                       st->pg_table, (unsigned long long)(st->cfg.ttl_ms / 1000),
                       (unsigned long long)(st->cfg.ttl_ms % 1000));
        PQclear(pg_run(c, &q, 0, NULL, PGRES_COMMAND_OK, NULL));
    }
    vsr_buf_free(&q);
    return 0;
}

static void pg_drop(vsr_replay_store_t *st)
{
    PQfinish(st->pc);
    st->pc = NULL;
}

/* The writer's connection, opened when there is none and the back-off
 * allows: 1 when there is one (*fresh: opened just now).  A server that
 * went away is retried after a back-off that doubles up to
 * PG_BACKOFF_MAX_MS. */
static int pg_connected(vsr_replay_store_t *st, int *fresh)
{
    uint64_t now = vsr_now_ms();
    *fresh = 0;
    if (st->pc && st->cfg.pg_max_lifetime_ms && now >= st->pc_born_ms + st->cfg.pg_max_lifetime_ms)
        pg_drop(st); /* conn_max_lifetime */
    if (st->pc)
        return 1;
    if (now < st->retry_at_ms)
        return 0;
    char why[256];
    st->pc = connect_pg(st, why, sizeof(why));
    if (st->pc && pg_ensure_table(st, st->pc, why, sizeof(why)) != 0)
        pg_drop(st);
    if (st->pc == NULL) {
        st->pg_backoff_ms = st->pg_backoff_ms ? VSR_MIN(2 * st->pg_backoff_ms, PG_BACKOFF_MAX_MS) : PG_BACKOFF_MIN_MS;
        st->retry_at_ms = vsr_now_ms() + st->pg_backoff_ms;
        if (!st->pg_down_logged)
            vsr_log_warn("store", "router replay: postgres %s:%s: %s (records are dropped and counted until it "
                                  "answers)", st->pg_host, st->pg_port, why);
        st->pg_down_logged = 1;
        return 0;
    }
    if (st->pg_down_logged)
        vsr_log_info("store", "router replay: postgres %s:%s answers again", st->pg_host, st->pg_port);
    st->pg_down_logged = 0;
    st->pg_backoff_ms = 0;
    st->pc_born_ms = vsr_now_ms();
    *fresh = 1;
    return 1;
}

/* The writer's turn for one record: 1 when it was written.  While the
 * server is away records fail at once (counted), so the queue never waits
 * on a dead server.  A connection found broken (the server restarted) is
 * replaced at once and the record tried on the new one, once. */
static int pg_write(vsr_replay_store_t *st, const rec_t *r)
{
    for (int attempt = 0; attempt < 2; attempt++) {
        int fresh;
        if (!pg_connected(st, &fresh))
            return 0;
        int ok = pg_write_one(st, st->pc, r) == 0;
        if (PQstatus(st->pc) == CONNECTION_OK && PQtransactionStatus(st->pc) == PQTRANS_IDLE)
            return ok;
        pg_drop(st);
        if (ok || fresh)
            return ok; /* a fresh connection that broke: the server is going; the back-off decides */
    }
    return 0;
}

/* A read's connection (its own, as redis's reads have), or NULL. */
static PGconn *pg_reader(vsr_replay_store_t *st)
{
    return connect_pg(st, NULL, 0);
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
        if (st->cfg.backend == VSR_STORE_POSTGRES) {
            ok = pg_write(st, r);
        } else {
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
        }
        count(st, ok ? "written" : "failed");
        vsr_free(r);
        pthread_mutex_lock(&st->mu);
    }
    pthread_mutex_unlock(&st->mu);
    store_free(st); /* the last reference is gone: the writer closes the store, nobody waits for it */
    /* libpq's connect made OpenSSL state for this thread: free it now, not
     * in a thread-exit destructor that may run after vsr_replay_wait_writers
     * has let the process's exit clean OpenSSL up */
    OPENSSL_thread_stop();
    writers_add(-1);
    return NULL;
}

unsigned vsr_replay_wait_writers(uint64_t timeout_ms)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += (time_t)(timeout_ms / 1000);
    until.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&g_writers_mu);
    while (g_writers > 0 && pthread_cond_timedwait(&g_writers_cv, &g_writers_mu, &until) != ETIMEDOUT)
        ;
    unsigned left = g_writers;
    pthread_mutex_unlock(&g_writers_mu);
    return left;
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
    const char *table = cfg->pg_table ? cfg->pg_table : "router_replay_records";
    if (cfg->backend == VSR_STORE_POSTGRES) {
        if (!pg_table_ok(table)) {
            if (err)
                vsr_buf_printf(err, "router replay store: table_name must be letters, digits and _ (not a digit "
                                    "first), at most %d bytes", PG_TABLE_MAX);
            return NULL;
        }
        if (cfg->pg_database == NULL || cfg->pg_user == NULL) {
            if (err)
                vsr_buf_printf(err, "router replay store: postgres needs a database and a user");
            return NULL;
        }
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
    char port[16];
    snprintf(port, sizeof(port), "%u", cfg->pg_port ? cfg->pg_port : 5432);
    st->pg_port = vsr_strdup(port);
    st->pg_table = vsr_strdup(table);
    st->pg_host = vsr_strdup(cfg->pg_host ? cfg->pg_host : "localhost");
    st->pg_database = cfg->pg_database ? vsr_strdup(cfg->pg_database) : NULL;
    st->pg_user = cfg->pg_user ? vsr_strdup(cfg->pg_user) : NULL;
    st->pg_ssl_mode = vsr_strdup(cfg->pg_ssl_mode ? cfg->pg_ssl_mode : "disable");
    st->head.next = st->head.prev = &st->head;
    pthread_mutex_init(&st->mu, NULL);
    pthread_cond_init(&st->cv, NULL);
    if (cfg->backend != VSR_STORE_MEMORY) {
        writers_add(1);
        if (pthread_create(&st->writer, NULL, writer_main, st) != 0) {
            writers_add(-1);
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
    int queued = st->cfg.backend != VSR_STORE_MEMORY;
    while (st->head.next != &st->head) {
        rec_t *r = st->head.next;
        unlink_rec(st, r);
        if (queued)
            count(st, "failed");
        vsr_free(r);
    }
    if (st->wc)
        redisFree(st->wc);
    PQfinish(st->pc);
    pthread_cond_destroy(&st->cv);
    pthread_mutex_destroy(&st->mu);
    vsr_free(st->address);
    vsr_free(st->password);
    vsr_free(st->prefix);
    vsr_free(st->pg_port);
    vsr_free(st->pg_table);
    vsr_free(st->pg_host);
    vsr_free(st->pg_database);
    vsr_free(st->pg_user);
    vsr_free(st->pg_ssl_mode);
    for (size_t i = 0; i < st->ncluster; i++)
        vsr_free(st->cluster[i]);
    vsr_free(st->cluster);
    vsr_free(st);
}

/* ---- postgres reads: on the caller's thread, a connection of their own ---- */

/* id as a NUL-terminated parameter (ids are 1..MAX_ID bytes) */
static void id_param(vsr_slice_t id, char out[MAX_ID + 1])
{
    memcpy(out, id.p, id.len);
    out[id.len] = 0;
}

static int pg_get(vsr_replay_store_t *st, vsr_slice_t id, vsr_buf_t *out)
{
    PGconn *c = pg_reader(st);
    if (c == NULL)
        return VSR_ERR_IO;
    char idz[MAX_ID + 1];
    id_param(id, idz);
    const char *params[] = {idz};
    vsr_buf_t q;
    vsr_buf_init(&q, 256);
    vsr_buf_append_cstr(&q, "SELECT record FROM ");
    pg_live_rows(st, &q);
    vsr_buf_append_cstr(&q, " AND id = $1");
    int missing = 0;
    PGresult *res = pg_run(c, &q, 1, params, PGRES_TUPLES_OK, &missing);
    int rc = res == NULL             ? (missing ? VSR_ERR_NOT_FOUND : VSR_ERR_IO)
             : PQntuples(res) == 0 ? VSR_ERR_NOT_FOUND
                                   : vsr_buf_append(out, PQgetvalue(res, 0, 0), (size_t)PQgetlength(res, 0, 0));
    PQclear(res);
    vsr_buf_free(&q);
    PQfinish(c);
    return rc;
}

static int pg_list(vsr_replay_store_t *st, size_t limit, vsr_buf_t *out, uint64_t *total)
{
    PGconn *c = pg_reader(st);
    if (c == NULL)
        return VSR_ERR_IO;
    int rc = VSR_ERR_IO, missing = 0;
    vsr_buf_t q;
    vsr_buf_init(&q, 256);
    vsr_buf_append_cstr(&q, "SELECT count(*) FROM ");
    pg_live_rows(st, &q);
    PGresult *res = pg_run(c, &q, 0, NULL, PGRES_TUPLES_OK, &missing);
    if (res == NULL) {
        if (missing) /* nothing was written yet */
            rc = vsr_buf_append_cstr(out, "[]");
        goto out;
    }
    *total = strtoull(PQgetvalue(res, 0, 0), NULL, 10);
    PQclear(res);
    vsr_buf_reset(&q);
    vsr_buf_append_cstr(&q, "SELECT summary FROM ");
    pg_live_rows(st, &q);
    vsr_buf_printf(&q, " ORDER BY timestamp DESC, id DESC LIMIT %zu", limit);
    res = pg_run(c, &q, 0, NULL, PGRES_TUPLES_OK, NULL);
    if (res == NULL)
        goto out;
    vsr_buf_append_cstr(out, "[");
    for (int i = 0, first = 1; i < PQntuples(res); i++) {
        if (PQgetisnull(res, i, 0))
            continue;
        if (!first)
            vsr_buf_append_cstr(out, ",");
        first = 0;
        vsr_buf_append(out, PQgetvalue(res, i, 0), (size_t)PQgetlength(res, i, 0));
    }
    PQclear(res);
    rc = vsr_buf_append_cstr(out, "]");
out:
    vsr_buf_free(&q);
    PQfinish(c);
    return rc;
}

static int pg_delete(vsr_replay_store_t *st, vsr_slice_t id)
{
    PGconn *c = pg_reader(st);
    if (c == NULL)
        return VSR_ERR_IO;
    char idz[MAX_ID + 1];
    id_param(id, idz);
    const char *params[] = {idz};
    vsr_buf_t q;
    vsr_buf_init(&q, 256);
    vsr_buf_append_cstr(&q, "DELETE FROM ");
    pg_live_rows(st, &q);
    vsr_buf_append_cstr(&q, " AND id = $1");
    int missing = 0;
    PGresult *res = pg_run(c, &q, 1, params, PGRES_COMMAND_OK, &missing);
    int rc = res == NULL ? (missing ? VSR_ERR_NOT_FOUND : VSR_ERR_IO) : affected(res) ? VSR_OK : VSR_ERR_NOT_FOUND;
    PQclear(res);
    vsr_buf_free(&q);
    PQfinish(c);
    return rc;
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
    if (st->cfg.backend == VSR_STORE_POSTGRES)
        return pg_get(st, id, out);
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
    if (st->cfg.backend == VSR_STORE_POSTGRES)
        return pg_list(st, limit, out, total);
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
    if (st->cfg.backend == VSR_STORE_POSTGRES)
        return pg_delete(st, id);
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
