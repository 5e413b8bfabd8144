/*
 * The call log and the per-key attempt counters.
 *
 * The log is a ring of FL_LOG_CAP fixed-size records: appending copies a
 * few bounded strings into the next slot and never allocates, so the
 * benchmark path pays one uncontended mutex and a few short memcpys.  The
 * ring itself is allocated once at startup with calloc, which for a block
 * this size maps zero pages lazily: memory is touched only as slots fill.
 *
 * Keys live in a fixed table of FL_KEYS_CAP slots, found through a chained
 * hash and kept in least-recently-used order; when the table is full the
 * least recently used key is forgotten (a later request with it starts
 * counting from 1 again).
 */
#include "fakellm.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    uint64_t seq, time_ms, end_ms, attempt, conn; /* end_ms: 0 = not yet (else ms + 1) */
    uint64_t left_ms;   /* the client went away with the answer pending: 0 = not (else ms + 1) */
    int32_t status;
    uint8_t h2;
    uint16_t thread;
    uint8_t outcome, health;
    /* string lengths; -1 = absent */
    int16_t method_len, path_len, model_len, rid_len, key_len;
    char method[FL_LOG_METHOD_MAX];
    char path[FL_LOG_PATH_MAX];
    char model[FL_LOG_STR_MAX];
    char rid[FL_LOG_STR_MAX];
    char key[FL_KEY_MAX];
    /* the body essentials (has_body 0: null) */
    uint8_t has_body, has_temperature, has_sha, has_tools;
    int8_t stream, logprobs;
    int16_t last_user_len, system_len;
    int64_t top_logprobs, max_completion_tokens, max_tokens, n_messages;
    double temperature;
    uint64_t messages_sha;
    char last_user[FL_LOG_TEXT_MAX];
    char system[FL_LOG_TEXT_MAX];
} rec_t;

#define NBUCKETS 8192 /* power of two, twice FL_KEYS_CAP */

typedef struct {
    uint64_t count;
    uint32_t hash;
    int32_t hnext;      /* next slot in the same bucket, -1 = end */
    int32_t prev, next; /* LRU list: head is the most recently used */
    uint8_t len;
    char key[FL_KEY_MAX];
} key_slot_t;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static uint64_t t0_ns;

static rec_t *ring;
static size_t ring_head;       /* the slot the next entry goes to */
static size_t ring_len;        /* entries held, <= FL_LOG_CAP */
static uint64_t next_seq = 1;  /* never reset: a clear does not renumber */
static uint64_t overwritten;   /* entries pushed out since the last clear */

static key_slot_t *slots;
static int32_t buckets[NBUCKETS];
static int32_t nslots, lru_head, lru_tail;

void fl_log_init(void)
{
    t0_ns = uv_hrtime();
    ring = calloc(FL_LOG_CAP, sizeof *ring);
    slots = calloc(FL_KEYS_CAP, sizeof *slots);
    if (!ring || !slots)
        abort();
    fl_keys_clear();
}

void fl_log_free(void)
{
    free(ring);
    free(slots);
    ring = NULL;
    slots = NULL;
}

void fl_log_lock(void)
{
    pthread_mutex_lock(&mu);
}

void fl_log_unlock(void)
{
    pthread_mutex_unlock(&mu);
}

/* ---- keys ---------------------------------------------------------------- */

static uint32_t hash_key(const char *s, size_t n)
{
    uint32_t h = 2166136261u; /* FNV-1a */
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)s[i];
        h *= 16777619u;
    }
    return h;
}

static void lru_unlink(int32_t i)
{
    key_slot_t *k = &slots[i];
    if (k->prev >= 0)
        slots[k->prev].next = k->next;
    else
        lru_head = k->next;
    if (k->next >= 0)
        slots[k->next].prev = k->prev;
    else
        lru_tail = k->prev;
    k->prev = k->next = -1;
}

static void lru_push_front(int32_t i)
{
    key_slot_t *k = &slots[i];
    k->prev = -1;
    k->next = lru_head;
    if (lru_head >= 0)
        slots[lru_head].prev = i;
    lru_head = i;
    if (lru_tail < 0)
        lru_tail = i;
}

static void bucket_unlink(int32_t i)
{
    int32_t *pp = &buckets[slots[i].hash & (NBUCKETS - 1)];
    while (*pp != i)
        pp = &slots[*pp].hnext;
    *pp = slots[i].hnext;
}

uint64_t fl_keys_attempt_locked(const char *key, size_t len)
{
    uint32_t h = hash_key(key, len);
    int32_t *bucket = &buckets[h & (NBUCKETS - 1)];
    for (int32_t i = *bucket; i >= 0; i = slots[i].hnext) {
        key_slot_t *k = &slots[i];
        if (k->hash == h && k->len == len && !memcmp(k->key, key, len)) {
            if (lru_head != i) {
                lru_unlink(i);
                lru_push_front(i);
            }
            return ++k->count;
        }
    }
    int32_t i;
    if (nslots < FL_KEYS_CAP) {
        i = nslots++;
    } else {
        i = lru_tail;
        lru_unlink(i);
        bucket_unlink(i);
    }
    key_slot_t *k = &slots[i];
    k->hash = h;
    k->len = (uint8_t)len;
    memcpy(k->key, key, len);
    k->count = 1;
    k->hnext = *bucket;
    *bucket = i;
    lru_push_front(i);
    return 1;
}

uint64_t fl_keys_clear(void)
{
    fl_log_lock();
    uint64_t n = (uint64_t)nslots;
    for (size_t i = 0; i < NBUCKETS; i++)
        buckets[i] = -1;
    nslots = 0;
    lru_head = lru_tail = -1;
    fl_log_unlock();
    return n;
}

/* ---- the log ------------------------------------------------------------- */

/* Copy at most max bytes, cutting at a UTF-8 character boundary so that a
 * truncated field does not end in a broken sequence. */
static int16_t copy_field(char *dst, size_t max, fl_str_t s)
{
    if (!s.p)
        return -1;
    size_t n = s.len;
    if (n > max) {
        n = max;
        while (n > 0 && ((unsigned char)s.p[n] & 0xC0) == 0x80)
            n--;
    }
    memcpy(dst, s.p, n);
    return (int16_t)n;
}

static uint64_t now_ms(void)
{
    return (uv_hrtime() - t0_ns) / 1000000u;
}

uint64_t fl_log_append_locked(const fl_call_t *call)
{
    rec_t *r = &ring[ring_head];
    r->seq = next_seq++;
    r->time_ms = now_ms();
    r->end_ms = 0;
    r->left_ms = 0;
    r->attempt = call->attempt;
    r->status = call->status;
    r->thread = (uint16_t)call->thread;
    r->conn = call->conn;
    r->h2 = (uint8_t)(call->h2 != 0);
    r->outcome = (uint8_t)call->outcome;
    r->health = (uint8_t)(call->health != 0);
    r->method_len = copy_field(r->method, sizeof r->method, call->method);
    r->path_len = copy_field(r->path, sizeof r->path, call->path);
    r->model_len = copy_field(r->model, sizeof r->model, call->model);
    r->rid_len = copy_field(r->rid, sizeof r->rid, call->request_id);
    r->key_len = copy_field(r->key, sizeof r->key, call->key);
    const fl_body_t *bd = call->body;
    r->has_body = bd != NULL;
    if (bd) {
        r->stream = (int8_t)bd->stream;
        r->logprobs = (int8_t)bd->logprobs;
        r->has_tools = (uint8_t)(bd->has_tools != 0);
        r->top_logprobs = bd->top_logprobs;
        r->max_completion_tokens = bd->max_completion_tokens;
        r->max_tokens = bd->max_tokens;
        r->n_messages = bd->n_messages;
        r->has_temperature = (uint8_t)(bd->has_temperature != 0);
        r->temperature = bd->temperature;
        r->has_sha = (uint8_t)(bd->has_sha != 0);
        r->messages_sha = bd->messages_sha;
        r->last_user_len = copy_field(r->last_user, sizeof r->last_user, bd->last_user);
        r->system_len = copy_field(r->system, sizeof r->system, bd->system);
    }
    uint64_t seq = r->seq;
    ring_head = (ring_head + 1) % FL_LOG_CAP;
    if (ring_len < FL_LOG_CAP)
        ring_len++;
    else
        overwritten++;
    return seq;
}

/* Entry `seq` if the ring still holds it, else NULL.  Locked. */
static rec_t *find_locked(uint64_t seq)
{
    /* the ring holds seqs next_seq - ring_len .. next_seq - 1, in order */
    if (seq == 0 || seq >= next_seq || next_seq - seq > ring_len)
        return NULL;
    rec_t *r = &ring[(ring_head + FL_LOG_CAP - (size_t)(next_seq - seq)) % FL_LOG_CAP];
    return r->seq == seq ? r : NULL;
}

void fl_log_end(uint64_t seq)
{
    fl_log_lock();
    rec_t *r = find_locked(seq);
    if (r && r->end_ms == 0)
        r->end_ms = now_ms() + 1;
    fl_log_unlock();
}

void fl_log_client_left(uint64_t seq)
{
    fl_log_lock();
    rec_t *r = find_locked(seq);
    if (r && r->end_ms == 0 && r->left_ms == 0)
        r->left_ms = now_ms() + 1;
    fl_log_unlock();
}

void fl_log_append(const fl_call_t *call)
{
    fl_log_lock();
    fl_log_append_locked(call);
    fl_log_unlock();
}

static void add_field(fl_buf_t *b, const char *name, const char *s, int16_t len)
{
    fl_buf_adds(b, name);
    if (len < 0)
        fl_buf_adds(b, "null");
    else
        fl_json_str(b, s, (size_t)len);
}

static void add_int(fl_buf_t *b, const char *name, int64_t v)
{
    fl_buf_adds(b, name);
    if (v == FL_NO_INT)
        fl_buf_adds(b, "null");
    else
        fl_buf_addi(b, v);
}

static void add_bool(fl_buf_t *b, const char *name, int v)
{
    fl_buf_adds(b, name);
    fl_buf_adds(b, v < 0 ? "null" : v ? "true" : "false");
}

static void render_body(fl_buf_t *b, const rec_t *r)
{
    if (!r->has_body) {
        fl_buf_adds(b, ",\"body\":null");
        return;
    }
    add_bool(b, ",\"body\":{\"stream\":", r->stream);
    add_bool(b, ",\"logprobs\":", r->logprobs);
    add_int(b, ",\"top_logprobs\":", r->top_logprobs);
    fl_buf_adds(b, ",\"temperature\":");
    if (r->has_temperature)
        fl_buf_addf(b, "%.9g", r->temperature);
    else
        fl_buf_adds(b, "null");
    add_int(b, ",\"max_completion_tokens\":", r->max_completion_tokens);
    add_int(b, ",\"max_tokens\":", r->max_tokens);
    add_int(b, ",\"n_messages\":", r->n_messages);
    add_field(b, ",\"last_user\":", r->last_user, r->last_user_len);
    add_field(b, ",\"system\":", r->system, r->system_len);
    add_bool(b, ",\"has_tools\":", r->has_tools);
    fl_buf_adds(b, ",\"messages_sha\":");
    if (r->has_sha) {
        fl_buf_addf(b, "\"%016llx\"", (unsigned long long)r->messages_sha);
    } else {
        fl_buf_adds(b, "null");
    }
    fl_buf_addc(b, '}');
}

static const char *outcome_name(uint8_t o)
{
    switch ((fl_outcome_t)o) {
    case OUT_OK: return "ok";
    case OUT_STATUS: return "status";
    case OUT_RESET: return "reset";
    case OUT_DROP: return "drop";
    case OUT_HANG: return "hang";
    case OUT_DELAY: return "delay";
    case OUT_STALL: return "stall";
    case OUT_HEALTH: return "health";
    case OUT_REFUSED: return "refused";
    case OUT_GOAWAY: return "goaway";
    }
    return "?";
}

static void render_entry(fl_buf_t *b, const rec_t *r)
{
    fl_buf_adds(b, "{\"seq\":");
    fl_buf_addu(b, r->seq);
    fl_buf_adds(b, ",\"time_ms\":");
    fl_buf_addu(b, r->time_ms);
    fl_buf_adds(b, ",\"start_ms\":");
    fl_buf_addu(b, r->time_ms);
    fl_buf_adds(b, ",\"end_ms\":");
    if (r->end_ms)
        fl_buf_addu(b, r->end_ms - 1);
    else
        fl_buf_adds(b, "null");
    fl_buf_adds(b, ",\"client_left_ms\":");
    if (r->left_ms)
        fl_buf_addu(b, r->left_ms - 1);
    else
        fl_buf_adds(b, "null");
    fl_buf_adds(b, ",\"thread\":");
    fl_buf_addu(b, r->thread);
    fl_buf_adds(b, ",\"conn\":");
    fl_buf_addu(b, r->conn);
    fl_buf_adds(b, r->h2 ? ",\"protocol\":\"h2\"" : ",\"protocol\":\"http/1.1\"");
    add_field(b, ",\"method\":", r->method, r->method_len);
    add_field(b, ",\"path\":", r->path, r->path_len);
    fl_buf_adds(b, ",\"backend\":");
    fl_buf_add(b, fl_cfg.name_json.p, fl_cfg.name_json.len);
    add_field(b, ",\"model\":", r->model, r->model_len);
    add_field(b, ",\"request_id\":", r->rid, r->rid_len);
    add_field(b, ",\"key\":", r->key, r->key_len);
    fl_buf_adds(b, ",\"attempt\":");
    if (r->key_len < 0)
        fl_buf_adds(b, "null");
    else
        fl_buf_addu(b, r->attempt);
    fl_buf_adds(b, ",\"outcome\":\"");
    fl_buf_adds(b, outcome_name(r->outcome));
    if (r->outcome == OUT_STATUS) {
        fl_buf_addc(b, ':');
        fl_buf_addu(b, (uint64_t)r->status);
    }
    fl_buf_adds(b, r->health ? "\",\"health\":true" : "\",\"health\":false");
    render_body(b, r);
    fl_buf_addc(b, '}');
}

void fl_log_render(fl_buf_t *b, fl_str_t key)
{
    fl_log_lock();
    fl_buf_adds(b, "{\"backend\":");
    fl_buf_add(b, fl_cfg.name_json.p, fl_cfg.name_json.len);
    fl_buf_adds(b, ",\"capacity\":");
    fl_buf_addu(b, FL_LOG_CAP);
    fl_buf_adds(b, ",\"overwritten\":");
    fl_buf_addu(b, overwritten);
    fl_buf_adds(b, ",\"clock_zero_ns\":");
    fl_buf_addu(b, t0_ns);
    fl_buf_adds(b, ",\"entries\":[");
    size_t start = (ring_head + FL_LOG_CAP - ring_len) % FL_LOG_CAP;
    int first = 1;
    for (size_t i = 0; i < ring_len; i++) {
        const rec_t *r = &ring[(start + i) % FL_LOG_CAP];
        if (key.p && (r->key_len < 0 || (size_t)r->key_len != key.len ||
                      memcmp(r->key, key.p, key.len) != 0))
            continue;
        if (!first)
            fl_buf_addc(b, ',');
        first = 0;
        render_entry(b, r);
    }
    fl_buf_adds(b, "]}");
    fl_log_unlock();
}

uint64_t fl_log_clear(void)
{
    fl_log_lock();
    uint64_t n = ring_len;
    ring_len = 0;
    overwritten = 0;
    fl_log_unlock();
    return n;
}
