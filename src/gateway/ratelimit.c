/*
 * ratelimit.c — global.services.ratelimit's local limiter (docs/tenancy.md).
 *
 * One table for the whole process (every worker), under one mutex: a bucket
 * per rule and subject (the user, group and model the rule's match names),
 * counting requests and tokens in a fixed window aligned to the rule's unit
 * (second, minute, hour, day).  A request is admitted when every rule that
 * matches it has room; it then counts one request in each of their buckets.
 * Tokens (prompt + completion) are charged when the answer is over, so a
 * token limit refuses the requests that start after it is spent.
 *
 * Bounded: RL_SLOTS buckets, probed at most RL_PROBE deep; a bucket of a
 * window that has passed is reused.  A request whose bucket finds no room
 * in the table is a check that could not be made: fail_open decides.
 *
 * The rules of a provider with `redis` (vsr extension) keep their buckets in
 * Redis instead, shared by every replica: one EVALSHA of one Lua script per
 * check (EVAL when Redis does not know it yet) checks every shared bucket
 * and counts the request in all of them atomically.  The check is a
 * blocking exchange on the worker's thread, bounded by redis.timeout (dial
 * and reply together); a Redis that is down, slow or answers nonsense is a
 * check that could not be made.  Connections are pooled (RL_POOL).
 */
#include "gateway/gateway-int.h"

#include <errno.h>
#include <openssl/sha.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define RL_SLOTS 16384
#define RL_PROBE 64
#define RL_KEY 192

typedef struct {
    uint64_t hash;  /* 0 = free */
    uint64_t window;
    uint32_t unit_s;
    uint64_t requests, tokens;
    char key[RL_KEY];
} rl_bucket_t;

#define RL_POOL 32
#define RL_MAX_SHARED 16      /* shared rules one check may carry */
#define RL_REPLY_MAX 4096

struct vsr__ratelimit_s {
    pthread_mutex_t mu;
    rl_bucket_t *slots;
    pthread_mutex_t grpc_mu;  /* the idle clients of Envoy's rate limit service (one thread each while in use) */
    vsr_grpc_client_t *grpc[RL_POOL];
    size_t n_grpc;
    char grpc_addr[300];
    pthread_mutex_t pool_mu; /* the idle Redis connections */
    int pool[RL_POOL];
    size_t n_pool;
    char pool_addr[300];     /* the address they were dialled to */
};

/* KEYS: the shared buckets; ARGV: per bucket its request limit, token limit
 * (0 = none) and seconds to live.  {i, requests, tokens} when bucket i is
 * spent (nothing counted), else {0, requests_1, tokens_1, ...} after
 * counting one request in each. */
static const char script[] =
    "local n = #KEYS\n"
    "for i = 1, n do\n"
    "  local v = redis.call('HMGET', KEYS[i], 'r', 't')\n"
    "  local r = tonumber(v[1]) or 0\n"
    "  local t = tonumber(v[2]) or 0\n"
    "  local lr = tonumber(ARGV[3 * i - 2])\n"
    "  local lt = tonumber(ARGV[3 * i - 1])\n"
    "  if (lr > 0 and r >= lr) or (lt > 0 and t >= lt) then return {i, r, t} end\n"
    "end\n"
    "local out = {0}\n"
    "for i = 1, n do\n"
    "  local r = redis.call('HINCRBY', KEYS[i], 'r', 1)\n"
    "  redis.call('EXPIRE', KEYS[i], ARGV[3 * i])\n"
    "  out[#out + 1] = r\n"
    "  out[#out + 1] = tonumber(redis.call('HGET', KEYS[i], 't')) or 0\n"
    "end\n"
    "return out\n";
static char script_sha[41];
static pthread_once_t script_once = PTHREAD_ONCE_INIT;

static void script_sha_init(void)
{
    unsigned char md[SHA_DIGEST_LENGTH];
    SHA1((const unsigned char *)script, sizeof(script) - 1, md);
    for (size_t i = 0; i < SHA_DIGEST_LENGTH; i++)
        snprintf(script_sha + 2 * i, 3, "%02x", md[i]);
}

vsr__ratelimit_t *vsr__ratelimit_new(void)
{
    vsr__ratelimit_t *rl = vsr_calloc(1, sizeof(*rl));
    pthread_mutex_init(&rl->mu, NULL);
    pthread_mutex_init(&rl->pool_mu, NULL);
    pthread_mutex_init(&rl->grpc_mu, NULL);
    rl->slots = vsr_calloc(RL_SLOTS, sizeof(rl_bucket_t));
    pthread_once(&script_once, script_sha_init);
    return rl;
}

void vsr__ratelimit_free(vsr__ratelimit_t *rl)
{
    if (rl == NULL)
        return;
    for (size_t i = 0; i < rl->n_pool; i++)
        close(rl->pool[i]);
    pthread_mutex_destroy(&rl->pool_mu);
    for (size_t i = 0; i < rl->n_grpc; i++)
        vsr_grpc_client_free(rl->grpc[i]);
    pthread_mutex_destroy(&rl->grpc_mu);
    pthread_mutex_destroy(&rl->mu);
    vsr_free(rl->slots);
    vsr_free(rl);
}

static int has_group(vsr_slice_t groups, const char *g)
{
    vsr_slice_t rest = groups;
    while (rest.p) {
        vsr_slice_t one = vsr_slice_trim(vsr_slice_split(rest, ',', &rest));
        if (one.len && vsr_slice_eq_cstr(one, g))
            return 1;
    }
    return 0;
}

static uint64_t fnv(uint64_t h, vsr_slice_t v)
{
    for (size_t i = 0; i < v.len; i++)
        h = (h ^ (unsigned char)v.p[i]) * 1099511628211ull;
    return (h ^ 0x1f) * 1099511628211ull;
}

/* The bucket key of rule r for this request and its hash (over the whole
 * values: the key keeps at most 48 bytes of each), or 0 when r does not
 * match the request. */
static int subject(const vsr_ratelimit_rule_conf_t *r, const vsr__rl_subject_t *s, char *key, size_t cap,
                   uint64_t *hash)
{
    vsr_slice_t user = VSR_SLICE_NULL, group = VSR_SLICE_NULL, model = VSR_SLICE_NULL;
    if (r->match_user) {
        if (s->user.len == 0 || (strcmp(r->match_user, "*") != 0 && !vsr_slice_eq_cstr(s->user, r->match_user)))
            return 0;
        user = s->user;
    }
    if (r->match_group) {
        if (strcmp(r->match_group, "*") == 0) {
            group = vsr_slice_trim(vsr_slice_split(s->groups, ',', NULL)); /* the first group's bucket */
            if (group.len == 0)
                return 0;
        } else if (!has_group(s->groups, r->match_group)) {
            return 0;
        } else {
            group = vsr_slice_cstr(r->match_group);
        }
    }
    if (r->match_model) {
        if (s->model.len == 0 || (strcmp(r->match_model, "*") != 0 && !vsr_slice_eq_cstr(s->model, r->match_model)))
            return 0;
        model = s->model;
    }
    snprintf(key, cap, "%s\x1f%.*s\x1f%.*s\x1f%.*s", r->name, (int)VSR_MIN(user.len, 48), user.p ? user.p : "",
             (int)VSR_MIN(group.len, 48), group.p ? group.p : "", (int)VSR_MIN(model.len, 48),
             model.p ? model.p : "");
    uint64_t h = fnv(fnv(fnv(fnv(1469598103934665603ull, vsr_slice_cstr(r->name)), user), group), model);
    *hash = h ? h : 1;
    return 1;
}

/* The bucket of key in its current window (reset when its window passed); NULL when the table has no room. */
static rl_bucket_t *bucket(vsr__ratelimit_t *rl, const char *key, uint64_t h, uint32_t unit_s, uint64_t now_s)
{
    uint64_t window = now_s / unit_s;
    rl_bucket_t *reuse = NULL;
    for (size_t i = 0; i < RL_PROBE; i++) {
        rl_bucket_t *b = &rl->slots[(h + i) % RL_SLOTS];
        if (b->hash == h && b->unit_s == unit_s && strcmp(b->key, key) == 0) {
            if (b->window != window) {
                b->window = window;
                b->requests = b->tokens = 0;
            }
            return b;
        }
        if (reuse == NULL && (b->hash == 0 || (b->window + 1) * b->unit_s <= now_s))
            reuse = b; /* free, or its window is over */
    }
    if (reuse == NULL)
        return NULL;
    reuse->hash = h;
    reuse->unit_s = unit_s;
    reuse->window = window;
    reuse->requests = reuse->tokens = 0;
    snprintf(reuse->key, sizeof(reuse->key), "%s", key);
    return reuse;
}

/* ---- Redis: a blocking exchange with a deadline ---- */

/* A worker thread caches its clock between loop ticks (vsr_clock_cache):
 * the deadline waits below must read the clock itself. */
static void exact_clock(int on)
{
    vsr_clock_cache(!on);
    vsr_clock_tick();
}

static int conn_take(vsr__ratelimit_t *rl, const vsr_config_t *cfg, uint64_t deadline)
{
    char addr[sizeof(rl->pool_addr)];
    snprintf(addr, sizeof(addr), "%s:%s", cfg->ratelimit_redis_host, cfg->ratelimit_redis_port);
    pthread_mutex_lock(&rl->pool_mu);
    if (strcmp(addr, rl->pool_addr) != 0) { /* a new address: the old connections go */
        for (size_t i = 0; i < rl->n_pool; i++)
            close(rl->pool[i]);
        rl->n_pool = 0;
        snprintf(rl->pool_addr, sizeof(rl->pool_addr), "%s", addr);
    }
    int fd = rl->n_pool ? rl->pool[--rl->n_pool] : -1;
    pthread_mutex_unlock(&rl->pool_mu);
    return fd >= 0 ? fd : vsr_tcp_dial(cfg->ratelimit_redis_host, cfg->ratelimit_redis_port, deadline);
}

static void conn_give(vsr__ratelimit_t *rl, int fd)
{
    pthread_mutex_lock(&rl->pool_mu);
    if (rl->n_pool < RL_POOL) {
        rl->pool[rl->n_pool++] = fd;
        fd = -1;
    }
    pthread_mutex_unlock(&rl->pool_mu);
    if (fd >= 0)
        close(fd);
}

static int send_all(int fd, const char *p, size_t n, uint64_t deadline)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w > 0) {
            p += w;
            n -= (size_t)w;
        } else if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
            if (vsr_fd_wait(fd, POLLOUT, deadline) != 0)
                return -1;
        } else {
            return -1;
        }
    }
    return 0;
}

/* One RESP reply at p: its length when complete (integers, and arrays of
 * them, go to ints, at most max), 0 when more is needed, -1 for an error
 * reply or anything else. */
static long resp_parse(const char *p, size_t n, int64_t *ints, size_t *n_ints, size_t max, int *noscript)
{
    const char *eol = n ? memchr(p, '\n', n) : NULL;
    if (eol == NULL)
        return 0;
    size_t line = (size_t)(eol - p) + 1;
    char num[32];
    size_t nl = VSR_MIN(line - 1, sizeof(num) - 1);
    memcpy(num, p + 1, nl);
    num[nl] = '\0';
    long long v = strtoll(num, NULL, 10);
    switch (p[0]) {
    case ':':
        if (*n_ints < max)
            ints[(*n_ints)++] = v;
        return (long)line;
    case '+':
        return (long)line;
    case '-':
        if (noscript && line > 9 && memcmp(p, "-NOSCRIPT", 9) == 0)
            *noscript = 1;
        return -1;
    case '$':
        if (v < 0)
            return (long)line;
        if (v > RL_REPLY_MAX)
            return -1; /* never the script's reply */
        return n >= line + (size_t)v + 2 ? (long)(line + (size_t)v + 2) : 0;
    case '*': {
        size_t off = line;
        for (long long i = 0; i < v; i++) {
            long r = resp_parse(p + off, n - off, ints, n_ints, max, NULL);
            if (r <= 0)
                return r;
            off += (size_t)r;
        }
        return (long)off;
    }
    default:
        return -1;
    }
}

/* Sends cmd and reads one reply by deadline: 0 with its integers, -1 on any failure (fd is then closed). */
static int exchange(int fd, const vsr_buf_t *cmd, uint64_t deadline, int64_t *ints, size_t *n_ints, size_t max,
                    int *noscript)
{
    char in[RL_REPLY_MAX];
    size_t have = 0;
    *n_ints = 0;
    if (send_all(fd, cmd->data, cmd->len, deadline) != 0)
        return -1;
    for (;;) {
        ssize_t r = read(fd, in + have, sizeof(in) - have);
        if (r > 0) {
            have += (size_t)r;
            *n_ints = 0;
            long done = resp_parse(in, have, ints, n_ints, max, noscript);
            if (done < 0)
                return -1;
            if (done > 0)
                return (size_t)done == have ? 0 : -1; /* one request, one reply */
            if (have == sizeof(in))
                return -1;
        } else if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
            if (vsr_fd_wait(fd, POLLIN, deadline) != 0)
                return -1;
        } else {
            return -1;
        }
    }
}

static void arg(vsr_buf_t *b, const char *p, size_t n)
{
    vsr_buf_printf(b, "$%zu\r\n", n);
    vsr_buf_append(b, p, n);
    vsr_buf_append(b, "\r\n", 2);
}

static void arg_u64(vsr_buf_t *b, uint64_t v)
{
    char s[24];
    int n = snprintf(s, sizeof(s), "%llu", (unsigned long long)v);
    arg(b, s, (size_t)n);
}

/* The Redis key of a shared bucket in its current window. */
static void redis_key(char *out, size_t cap, const char *key, uint64_t h, const vsr_ratelimit_rule_conf_t *r,
                      uint64_t now_s)
{
    snprintf(out, cap, "vsr:rl:%s:%016llx:%llu:%llu", key, (unsigned long long)h, (unsigned long long)r->unit_s,
             (unsigned long long)(now_s / r->unit_s));
}

static int redis_check(vsr__ratelimit_t *rl, const vsr_config_t *cfg, const size_t *idx, char (*keys)[RL_KEY + 64],
                       size_t n, uint64_t now_s, vsr__rl_verdict_t *v);

/* The check of the shared rules in idx[0..n): VSR__RL_* (v filled for a refusal). */
static int redis_admit(vsr__ratelimit_t *rl, const vsr_config_t *cfg, const size_t *idx, char (*keys)[RL_KEY + 64],
                       size_t n, uint64_t now_s, vsr__rl_verdict_t *v)
{
    exact_clock(1);
    int rc = redis_check(rl, cfg, idx, keys, n, now_s, v);
    exact_clock(0);
    return rc;
}

static int redis_check(vsr__ratelimit_t *rl, const vsr_config_t *cfg, const size_t *idx, char (*keys)[RL_KEY + 64],
                       size_t n, uint64_t now_s, vsr__rl_verdict_t *v)
{
    uint64_t deadline = vsr_now_ms() + cfg->ratelimit_redis_timeout_ms;
    int fd = conn_take(rl, cfg, deadline);
    if (fd < 0)
        return VSR__RL_ERROR;
    vsr_buf_t cmd;
    vsr_buf_init(&cmd, 64 * 1024);
    int64_t ints[2 * RL_MAX_SHARED + 1];
    size_t n_ints = 0;
    int rc = -1;
    for (int attempt = 0; attempt < 2; attempt++) {
        int noscript = 0;
        vsr_buf_reset(&cmd);
        vsr_buf_printf(&cmd, "*%zu\r\n", 3 + 4 * n);
        if (attempt == 0) {
            arg(&cmd, "EVALSHA", 7);
            arg(&cmd, script_sha, 40);
        } else {
            arg(&cmd, "EVAL", 4);
            arg(&cmd, script, sizeof(script) - 1);
        }
        arg_u64(&cmd, n);
        for (size_t i = 0; i < n; i++)
            arg(&cmd, keys[i], strlen(keys[i]));
        for (size_t i = 0; i < n; i++) {
            const vsr_ratelimit_rule_conf_t *r = &cfg->ratelimit_rules[idx[i]];
            arg_u64(&cmd, r->requests_per_unit);
            arg_u64(&cmd, r->tokens_per_unit);
            arg_u64(&cmd, 2ull * r->unit_s);
        }
        rc = exchange(fd, &cmd, deadline, ints, &n_ints, VSR_ARRAY_LEN(ints), &noscript);
        if (rc == 0 || !noscript)
            break; /* a NOSCRIPT error leaves the connection fit for the EVAL */
    }
    vsr_buf_free(&cmd);
    if (rc != 0 || n_ints < 1) {
        close(fd);
        return VSR__RL_ERROR;
    }
    conn_give(rl, fd);
    if (ints[0] > 0 && (size_t)ints[0] <= n && n_ints >= 3) {
        const vsr_ratelimit_rule_conf_t *r = &cfg->ratelimit_rules[idx[ints[0] - 1]];
        v->rule = r->name;
        v->limit_requests = r->requests_per_unit;
        v->remaining_requests = r->requests_per_unit - VSR_MIN((uint64_t)ints[1], r->requests_per_unit);
        v->limit_tokens = r->tokens_per_unit;
        v->remaining_tokens = r->tokens_per_unit - VSR_MIN((uint64_t)ints[2], r->tokens_per_unit);
        v->reset_s = (now_s / r->unit_s + 1) * r->unit_s - now_s;
        return VSR__RL_LIMITED;
    }
    if (ints[0] != 0 || n_ints != 1 + 2 * n)
        return VSR__RL_ERROR;
    for (size_t i = 0; i < n; i++) { /* the headers report the least room left */
        const vsr_ratelimit_rule_conf_t *r = &cfg->ratelimit_rules[idx[i]];
        uint64_t left = r->requests_per_unit ? r->requests_per_unit - VSR_MIN((uint64_t)ints[1 + 2 * i],
                                                                               r->requests_per_unit)
                                             : UINT64_MAX;
        if (v->rule == NULL || left < v->remaining_requests) {
            v->rule = r->name;
            v->limit_requests = r->requests_per_unit;
            v->remaining_requests = left;
            v->limit_tokens = r->tokens_per_unit;
            v->remaining_tokens = r->tokens_per_unit
                                      ? r->tokens_per_unit - VSR_MIN((uint64_t)ints[2 + 2 * i], r->tokens_per_unit)
                                      : 0;
            v->reset_s = (now_s / r->unit_s + 1) * r->unit_s - now_s;
        }
    }
    return VSR__RL_ADMIT;
}

/* The shared rules that match s: their indexes and Redis keys; returns how many (at most RL_MAX_SHARED). */
static size_t shared_matches(const vsr_config_t *cfg, const vsr__rl_subject_t *s, uint64_t now_s, int tokens_only,
                             size_t *idx, char (*keys)[RL_KEY + 64])
{
    size_t n = 0;
    for (size_t i = 0; i < cfg->n_ratelimit_rules && n < RL_MAX_SHARED; i++) {
        const vsr_ratelimit_rule_conf_t *r = &cfg->ratelimit_rules[i];
        char key[RL_KEY];
        uint64_t h;
        if (!r->shared || (tokens_only && r->tokens_per_unit == 0) || !subject(r, s, key, sizeof(key), &h))
            continue;
        idx[n] = i;
        redis_key(keys[n], sizeof(keys[n]), key, h, r, now_s);
        n++;
    }
    return n;
}

/* ---- Envoy's rate limit service: envoy.service.ratelimit.v3 over gRPC ---- */

static void pb_varint(vsr_buf_t *b, uint64_t v)
{
    uint8_t s[10];
    size_t n = 0;
    do {
        s[n++] = (uint8_t)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
        v >>= 7;
    } while (v);
    vsr_buf_append(b, s, n);
}

static void pb_bytes(vsr_buf_t *b, unsigned field, const void *p, size_t n)
{
    pb_varint(b, (uint64_t)field << 3 | 2);
    pb_varint(b, n);
    vsr_buf_append(b, p, n);
}

static void pb_entry(vsr_buf_t *d, const char *key, vsr_slice_t value)
{
    vsr_buf_t e;
    vsr_buf_init(&e, 0);
    pb_bytes(&e, 1, key, strlen(key));
    pb_bytes(&e, 2, value.p, value.len);
    pb_bytes(d, 1, e.data, e.len);
    vsr_buf_free(&e);
}

/* Reads one field at *p (< end): its number, wire type and varint value or
 * bytes; 0, or -1 when malformed. */
static int pb_next(const uint8_t **p, const uint8_t *end, unsigned *field, uint64_t *v, vsr_slice_t *bytes)
{
    uint64_t key = 0, x = 0;
    for (int pass = 0; pass < 2; pass++) {
        uint64_t *out = pass ? &x : &key;
        *out = 0;
        for (unsigned shift = 0;; shift += 7) {
            if (*p >= end || shift > 63)
                return -1;
            uint8_t c = *(*p)++;
            *out |= (uint64_t)(c & 0x7f) << shift;
            if (!(c & 0x80))
                break;
        }
        if (pass == 0 && (key & 7) != 0 && (key & 7) != 2)
            return -1; /* none of these messages has fixed-width fields */
    }
    *field = (unsigned)(key >> 3);
    *v = x;
    if ((key & 7) == 2) {
        if (x > (uint64_t)(end - *p))
            return -1;
        *bytes = vsr_slice((const char *)*p, (size_t)x);
        *p += x;
    }
    return 0;
}

/* A DescriptorStatus: code, current_limit.requests_per_unit, limit_remaining, duration_until_reset.seconds. */
static int pb_status(vsr_slice_t s, uint64_t *code, uint64_t *limit, uint64_t *remaining, uint64_t *reset)
{
    const uint8_t *p = (const uint8_t *)s.p, *end = p + s.len;
    while (p < end) {
        unsigned f;
        uint64_t v;
        vsr_slice_t b = VSR_SLICE_NULL;
        if (pb_next(&p, end, &f, &v, &b) != 0)
            return -1;
        if (f == 1)
            *code = v;
        else if (f == 3)
            *remaining = v;
        else if (f == 2 || f == 4) {
            const uint8_t *q = (const uint8_t *)b.p, *qe = q + b.len;
            while (q < qe) {
                unsigned g;
                uint64_t w;
                vsr_slice_t c;
                if (pb_next(&q, qe, &g, &w, &c) != 0)
                    return -1;
                if (g == 1)
                    *(f == 2 ? limit : reset) = w; /* RateLimit.requests_per_unit, Duration.seconds */
            }
        }
    }
    return 0;
}

static vsr_grpc_client_t *grpc_take(vsr__ratelimit_t *rl, const vsr_config_t *cfg)
{
    char addr[sizeof(rl->grpc_addr)];
    snprintf(addr, sizeof(addr), "%s:%u", cfg->ratelimit_envoy_host, cfg->ratelimit_envoy_port);
    vsr_grpc_client_t *c = NULL;
    pthread_mutex_lock(&rl->grpc_mu);
    if (strcmp(addr, rl->grpc_addr) != 0) {
        for (size_t i = 0; i < rl->n_grpc; i++)
            vsr_grpc_client_free(rl->grpc[i]);
        rl->n_grpc = 0;
        snprintf(rl->grpc_addr, sizeof(rl->grpc_addr), "%s", addr);
    }
    if (rl->n_grpc)
        c = rl->grpc[--rl->n_grpc];
    pthread_mutex_unlock(&rl->grpc_mu);
    return c ? c : vsr_grpc_client_new(cfg->ratelimit_envoy_host, cfg->ratelimit_envoy_port, 0, NULL);
}

static void grpc_give(vsr__ratelimit_t *rl, vsr_grpc_client_t *c)
{
    pthread_mutex_lock(&rl->grpc_mu);
    if (rl->n_grpc < RL_POOL) {
        rl->grpc[rl->n_grpc++] = c;
        c = NULL;
    }
    pthread_mutex_unlock(&rl->grpc_mu);
    vsr_grpc_client_free(c);
}

/* ShouldRateLimit with one descriptor: entries user, group (the first), model, those the request has. */
static int envoy_check(vsr__ratelimit_t *rl, const vsr_config_t *cfg, const vsr__rl_subject_t *s,
                       vsr__rl_verdict_t *v)
{
    vsr_buf_t d, msg;
    vsr_buf_init(&d, 0);
    vsr_buf_init(&msg, 0);
    vsr_slice_t group = vsr_slice_trim(vsr_slice_split(s->groups, ',', NULL));
    if (s->user.len)
        pb_entry(&d, "user", s->user);
    if (group.len)
        pb_entry(&d, "group", group);
    if (s->model.len)
        pb_entry(&d, "model", s->model);
    pb_bytes(&msg, 1, cfg->ratelimit_envoy_domain, strlen(cfg->ratelimit_envoy_domain));
    pb_bytes(&msg, 2, d.data ? d.data : "", d.len);
    pb_varint(&msg, 3 << 3 | 0); /* hits_addend: 1 */
    pb_varint(&msg, 1);
    exact_clock(1);
    int verdict = VSR__RL_ERROR;
    vsr_grpc_client_t *c = grpc_take(rl, cfg);
    vsr_grpc_client_result_t res;
    if (c && vsr_grpc_client_call(c, "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit", msg.data,
                                  msg.len, vsr_now_ms() + cfg->ratelimit_envoy_timeout_ms, &res) == VSR_OK &&
        res.http_status == 200 && res.grpc_status == 0) {
        const uint8_t *p = res.answer, *end = p + res.answer_len;
        uint64_t overall = 0, code = 0, limit = 0, remaining = 0, reset = 0;
        int ok = 1, have = 0;
        while (ok && p < end) {
            unsigned f;
            uint64_t x;
            vsr_slice_t b = VSR_SLICE_NULL;
            if (pb_next(&p, end, &f, &x, &b) != 0) {
                ok = 0;
            } else if (f == 1) {
                overall = x;
            } else if (f == 2 && (!have || code != 2)) { /* the first status over its limit, else the first */
                code = limit = remaining = reset = 0;
                ok = pb_status(b, &code, &limit, &remaining, &reset) == 0;
                have = 1;
            }
        }
        if (ok && (overall == 1 || overall == 2)) {
            v->rule = "envoy-ratelimit";
            v->limit_requests = limit;
            v->remaining_requests = remaining;
            v->reset_s = reset;
            verdict = overall == 2 ? VSR__RL_LIMITED : VSR__RL_ADMIT;
        }
        grpc_give(rl, c);
    } else {
        vsr_grpc_client_free(c); /* a failed call's connection is not kept */
    }
    exact_clock(0);
    if (verdict == VSR__RL_ERROR)
        v->rule = "envoy-ratelimit";
    vsr_buf_free(&d);
    vsr_buf_free(&msg);
    return verdict;
}

int vsr__ratelimit_admit(vsr__ratelimit_t *rl, const vsr_config_t *cfg, const vsr__rl_subject_t *s, uint64_t now_s,
                         vsr__rl_verdict_t *v)
{
    memset(v, 0, sizeof(*v));
    if (cfg->ratelimit_envoy_host) {
        int r = envoy_check(rl, cfg, s, v);
        if (r != VSR__RL_ADMIT || cfg->n_ratelimit_rules == 0)
            return r;
        memset(v, 0, sizeof(*v)); /* the local rules' room is what the answer reports */
    }
    if (cfg->n_ratelimit_rules == 0)
        return VSR__RL_ADMIT;
    if (cfg->ratelimit_redis_host) {
        /* the shared buckets first: a request they refuse counts nowhere */
        size_t idx[RL_MAX_SHARED];
        char keys[RL_MAX_SHARED][RL_KEY + 64];
        size_t ns = shared_matches(cfg, s, now_s, 0, idx, keys);
        if (ns) {
            int r = redis_admit(rl, cfg, idx, keys, ns, now_s, v);
            if (r != VSR__RL_ADMIT) {
                if (r == VSR__RL_ERROR)
                    v->rule = cfg->ratelimit_rules[idx[0]].name;
                return r;
            }
        }
    }
    size_t n = cfg->n_ratelimit_rules;
    rl_bucket_t **hit = vsr_calloc(n, sizeof(*hit));
    int verdict = VSR__RL_ADMIT;
    pthread_mutex_lock(&rl->mu);
    for (size_t i = 0; i < n && verdict == VSR__RL_ADMIT; i++) {
        const vsr_ratelimit_rule_conf_t *r = &cfg->ratelimit_rules[i];
        char key[RL_KEY];
        uint64_t h;
        if (r->shared || !subject(r, s, key, sizeof(key), &h))
            continue;
        rl_bucket_t *b = bucket(rl, key, h, r->unit_s, now_s);
        if (b == NULL) {
            v->rule = r->name;
            verdict = VSR__RL_ERROR;
            break;
        }
        hit[i] = b;
        uint64_t reset = (b->window + 1) * r->unit_s - now_s;
        int over = (r->requests_per_unit && b->requests >= r->requests_per_unit) ||
                   (r->tokens_per_unit && b->tokens >= r->tokens_per_unit);
        /* the headers report the tightest rule: the one refusing, else the least room left */
        uint64_t left = r->requests_per_unit ? r->requests_per_unit - VSR_MIN(b->requests, r->requests_per_unit)
                                             : UINT64_MAX;
        if (over || v->rule == NULL || left < v->remaining_requests) {
            v->rule = r->name;
            v->limit_requests = r->requests_per_unit;
            v->remaining_requests = left;
            v->limit_tokens = r->tokens_per_unit;
            v->remaining_tokens = r->tokens_per_unit ? r->tokens_per_unit - VSR_MIN(b->tokens, r->tokens_per_unit) : 0;
            v->reset_s = reset;
        }
        if (over)
            verdict = VSR__RL_LIMITED;
    }
    if (verdict == VSR__RL_ADMIT)
        for (size_t i = 0; i < n; i++)
            if (hit[i]) {
                hit[i]->requests++;
                if (v->rule && v->remaining_requests && v->remaining_requests != UINT64_MAX &&
                    strcmp(v->rule, cfg->ratelimit_rules[i].name) == 0)
                    v->remaining_requests--;
            }
    pthread_mutex_unlock(&rl->mu);
    vsr_free(hit);
    return verdict;
}

void vsr__ratelimit_charge(vsr__ratelimit_t *rl, const vsr_config_t *cfg, const vsr__rl_subject_t *s, uint64_t now_s,
                           uint64_t tokens)
{
    if (tokens == 0)
        return;
    if (cfg->ratelimit_redis_host) {
        size_t idx[RL_MAX_SHARED];
        char keys[RL_MAX_SHARED][RL_KEY + 64];
        size_t ns = shared_matches(cfg, s, now_s, 1, idx, keys);
        exact_clock(1);
        uint64_t deadline = vsr_now_ms() + cfg->ratelimit_redis_timeout_ms;
        int fd = ns ? conn_take(rl, cfg, deadline) : -1;
        if (fd >= 0) {
            vsr_buf_t cmd;
            vsr_buf_init(&cmd, 64 * 1024);
            int ok = 1;
            for (size_t i = 0; i < ns && ok; i++) { /* HINCRBY: the bucket's tokens; a lost charge is not retried */
                int64_t ints[1];
                size_t n_ints;
                vsr_buf_reset(&cmd);
                vsr_buf_printf(&cmd, "*4\r\n");
                arg(&cmd, "HINCRBY", 7);
                arg(&cmd, keys[i], strlen(keys[i]));
                arg(&cmd, "t", 1);
                arg_u64(&cmd, tokens);
                ok = exchange(fd, &cmd, deadline, ints, &n_ints, 1, NULL) == 0;
                vsr_buf_reset(&cmd); /* a window that began since the check: its key must expire too */
                vsr_buf_printf(&cmd, "*3\r\n");
                arg(&cmd, "EXPIRE", 6);
                arg(&cmd, keys[i], strlen(keys[i]));
                arg_u64(&cmd, 2ull * cfg->ratelimit_rules[idx[i]].unit_s);
                ok = ok && exchange(fd, &cmd, deadline, ints, &n_ints, 1, NULL) == 0;
            }
            vsr_buf_free(&cmd);
            if (ok)
                conn_give(rl, fd);
            else
                close(fd);
        }
        exact_clock(0);
    }
    pthread_mutex_lock(&rl->mu);
    for (size_t i = 0; i < cfg->n_ratelimit_rules; i++) {
        const vsr_ratelimit_rule_conf_t *r = &cfg->ratelimit_rules[i];
        char key[RL_KEY];
        uint64_t h;
        if (r->shared || r->tokens_per_unit == 0 || !subject(r, s, key, sizeof(key), &h))
            continue;
        rl_bucket_t *b = bucket(rl, key, h, r->unit_s, now_s);
        if (b)
            b->tokens += tokens;
    }
    pthread_mutex_unlock(&rl->mu);
}
