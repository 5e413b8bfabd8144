/*
 * test_store.c — the response cache's stores: the memory backend with a fake
 * clock, and the redis backend against a real redis-server that the test
 * starts on loopback (a free port and a unix socket in a temporary
 * directory; no persistence) and kills at the end, also when a test fails.
 * A missing redis-server fails the redis tests.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include "store/store.h"
#include "store/store-int.h" /* the cluster key slot */

/* ---- helpers ---- */

typedef struct {
    int calls, status;
    char value[256];
    size_t vlen;
    char key[256];
    size_t klen;
    float sim;
} result_t;

static void on_done(void *ud, int status, const vsr_store_hit_t *hit)
{
    result_t *r = ud;
    r->calls++;
    r->status = status;
    r->vlen = r->klen = 0;
    if (hit) {
        r->vlen = VSR_MIN(hit->value.len, sizeof(r->value));
        memcpy(r->value, hit->value.p, r->vlen);
        r->klen = VSR_MIN(hit->key.len, sizeof(r->key));
        memcpy(r->key, hit->key.p, r->klen);
        r->sim = hit->similarity;
    }
}

static uint64_t fake_now = 1000000;
static uint64_t fake_clock(void *ud)
{
    VSR_UNUSED(ud);
    return fake_now;
}

static void unit(float *v, int axis)
{
    memset(v, 0, VSR_STORE_DIM * sizeof(float));
    v[axis] = 1.0f;
}

/* a unit vector at angle theta from e0 toward e1: similarity cos(theta) with e0 */
static void tilted(float *v, double cosine)
{
    memset(v, 0, VSR_STORE_DIM * sizeof(float));
    v[0] = (float)cosine;
    v[1] = (float)sqrt(1 - cosine * cosine);
}

#define S(x) vsr_slice_cstr(x)

static vsr_store_t *mem_store(size_t max_entries, size_t max_bytes, vsr_store_kernel_t kernel)
{
    vsr_store_config_t cfg;
    vsr_store_config_init(&cfg);
    cfg.max_entries = max_entries;
    cfg.max_bytes = max_bytes;
    cfg.clock = fake_clock;
    cfg.kernel = kernel;
    vsr_store_t *s = vsr_store_open(NULL, &cfg, NULL);
    assert_non_null(s);
    return s;
}

static void put(vsr_store_t *s, const char *k, const char *v, uint64_t ttl, const float *emb, const char *scope,
                const char *part, int want)
{
    result_t r = {0};
    assert_int_equal(vsr_store_put(s, S(k), S(v), ttl, emb, S(scope), S(part), on_done, &r, NULL), VSR_OK);
    assert_int_equal(r.calls, 1);
    assert_int_equal(r.status, want);
}

static result_t get(vsr_store_t *s, const char *k)
{
    result_t r = {0};
    assert_int_equal(vsr_store_get(s, S(k), on_done, &r, NULL), VSR_OK);
    assert_int_equal(r.calls, 1);
    return r;
}

static result_t search(vsr_store_t *s, const float *q, const char *scope, const char *part, float thr)
{
    result_t r = {0};
    assert_int_equal(vsr_store_search(s, q, S(scope), S(part), thr, on_done, &r, NULL), VSR_OK);
    assert_int_equal(r.calls, 1);
    return r;
}

/* ---- memory backend ---- */

static void test_mem_basic(void **state)
{
    VSR_UNUSED(state);
    vsr_store_t *s = mem_store(100, 1 << 20, VSR_STORE_KERNEL_AUTO);
    result_t r = get(s, "a");
    assert_int_equal(r.status, VSR_ERR_NOT_FOUND);
    put(s, "a", "alpha", 0, NULL, "", "", VSR_OK);
    r = get(s, "a");
    assert_int_equal(r.status, VSR_OK);
    assert_int_equal(r.vlen, 5);
    assert_memory_equal(r.value, "alpha", 5);
    assert_true(r.sim == 1.0f);
    put(s, "a", "beta", 0, NULL, "", "", VSR_OK); /* replaces */
    r = get(s, "a");
    assert_int_equal(r.vlen, 4);
    assert_memory_equal(r.value, "beta", 4);
    put(s, "empty", "", 0, NULL, "", "", VSR_OK); /* an empty value is a value */
    r = get(s, "empty");
    assert_int_equal(r.status, VSR_OK);
    assert_int_equal(r.vlen, 0);

    result_t d = {0};
    assert_int_equal(vsr_store_del(s, S("a"), on_done, &d, NULL), VSR_OK);
    assert_int_equal(d.status, VSR_OK);
    assert_int_equal(get(s, "a").status, VSR_ERR_NOT_FOUND);
    assert_int_equal(vsr_store_del(s, S("a"), on_done, &d, NULL), VSR_OK); /* absent: still OK */
    assert_int_equal(d.status, VSR_OK);

    /* bad arguments: refused, no callback */
    result_t x = {0};
    char big[VSR_STORE_MAX_KEY + 1];
    memset(big, 'k', sizeof(big));
    assert_int_equal(vsr_store_get(s, VSR_SLICE_NULL, on_done, &x, NULL), VSR_ERR_INVALID);
    assert_int_equal(vsr_store_get(s, vsr_slice(big, sizeof(big)), on_done, &x, NULL), VSR_ERR_INVALID);
    assert_int_equal(vsr_store_get(s, S("a"), NULL, &x, NULL), VSR_ERR_INVALID);
    char tag[VSR_STORE_MAX_TAG + 1];
    memset(tag, 't', sizeof(tag));
    assert_int_equal(vsr_store_put(s, S("a"), S("v"), 0, NULL, vsr_slice(tag, sizeof(tag)), S(""), on_done, &x,
                                   NULL),
                     VSR_ERR_INVALID);
    float q[VSR_STORE_DIM];
    unit(q, 0);
    q[3] = NAN;
    assert_int_equal(vsr_store_put(s, S("a"), S("v"), 0, q, S(""), S(""), on_done, &x, NULL), VSR_ERR_INVALID);
    unit(q, 0);
    assert_int_equal(vsr_store_search(s, q, S(""), S(""), 1.5f, on_done, &x, NULL), VSR_ERR_INVALID);
    assert_int_equal(vsr_store_search(s, NULL, S(""), S(""), 0.5f, on_done, &x, NULL), VSR_ERR_INVALID);
    assert_int_equal(x.calls, 0);

    vsr_store_stats_t st;
    vsr_store_stats(s, &st);
    assert_int_equal(st.hits, 3);
    assert_int_equal(st.misses, 2);
    assert_int_equal(st.entries, 1);
    vsr_store_close(s);
}

static void test_mem_ttl(void **state)
{
    VSR_UNUSED(state);
    vsr_store_t *s = mem_store(100, 1 << 20, VSR_STORE_KERNEL_AUTO);
    float e[VSR_STORE_DIM];
    unit(e, 0);
    put(s, "k", "v", 1000, e, "", "p", VSR_OK);
    put(s, "d", "v", 0, NULL, "", "", VSR_OK); /* the default TTL: an hour */
    fake_now += 999;
    assert_int_equal(get(s, "k").status, VSR_OK);
    assert_int_equal(search(s, e, "", "p", 0.9f).status, VSR_OK);
    fake_now += 1;
    assert_int_equal(search(s, e, "", "p", 0.9f).status, VSR_ERR_NOT_FOUND);
    assert_int_equal(get(s, "k").status, VSR_ERR_NOT_FOUND);
    assert_int_equal(get(s, "d").status, VSR_OK);
    fake_now += 3600000;
    assert_int_equal(get(s, "d").status, VSR_ERR_NOT_FOUND);
    vsr_store_stats_t st;
    vsr_store_stats(s, &st);
    assert_int_equal(st.expired, 2);
    assert_int_equal(st.entries, 0);
    assert_int_equal(st.index_entries, 0);
    assert_int_equal(st.bytes, 0);
    vsr_store_close(s);
}

static void test_mem_lru_count(void **state)
{
    VSR_UNUSED(state);
    vsr_store_t *s = mem_store(3, 1 << 20, VSR_STORE_KERNEL_AUTO);
    put(s, "a", "1", 0, NULL, "", "", VSR_OK);
    put(s, "b", "2", 0, NULL, "", "", VSR_OK);
    put(s, "c", "3", 0, NULL, "", "", VSR_OK);
    assert_int_equal(get(s, "a").status, VSR_OK); /* a is now the most recent: b is the least */
    put(s, "d", "4", 0, NULL, "", "", VSR_OK);
    assert_int_equal(get(s, "b").status, VSR_ERR_NOT_FOUND);
    assert_int_equal(get(s, "a").status, VSR_OK);
    assert_int_equal(get(s, "c").status, VSR_OK);
    assert_int_equal(get(s, "d").status, VSR_OK);
    /* a search hit counts as a use too */
    float e[VSR_STORE_DIM];
    unit(e, 7);
    put(s, "e", "5", 0, e, "", "", VSR_OK); /* evicts a (order now c, d after the gets above: a, c, d) */
    assert_int_equal(get(s, "a").status, VSR_ERR_NOT_FOUND);
    assert_int_equal(search(s, e, "", "", 0.5f).status, VSR_OK);
    assert_int_equal(get(s, "d").status, VSR_OK);
    put(s, "f", "6", 0, NULL, "", "", VSR_OK); /* least recent is c */
    assert_int_equal(get(s, "c").status, VSR_ERR_NOT_FOUND);
    assert_int_equal(search(s, e, "", "", 0.5f).status, VSR_OK);
    vsr_store_stats_t st;
    vsr_store_stats(s, &st);
    assert_int_equal(st.evictions, 3);
    assert_int_equal(st.entries, 3);
    vsr_store_close(s);
}

static vsr_store_t *mem_store_policy(size_t max_entries, size_t max_bytes, vsr_store_eviction_t policy)
{
    vsr_store_config_t cfg;
    vsr_store_config_init(&cfg);
    cfg.max_entries = max_entries;
    cfg.max_bytes = max_bytes;
    cfg.clock = fake_clock;
    cfg.eviction = policy;
    vsr_store_t *s = vsr_store_open(NULL, &cfg, NULL);
    assert_non_null(s);
    return s;
}

static void test_mem_fifo(void **state)
{
    VSR_UNUSED(state);
    vsr_store_t *s = mem_store_policy(3, 1 << 20, VSR_STORE_EVICT_FIFO);
    put(s, "a", "1", 0, NULL, "", "", VSR_OK);
    put(s, "b", "2", 0, NULL, "", "", VSR_OK);
    put(s, "c", "3", 0, NULL, "", "", VSR_OK);
    for (int i = 0; i < 5; i++) /* reads change nothing: a stays the oldest */
        assert_int_equal(get(s, "a").status, VSR_OK);
    put(s, "d", "4", 0, NULL, "", "", VSR_OK);
    assert_int_equal(get(s, "a").status, VSR_ERR_NOT_FOUND);
    float e[VSR_STORE_DIM];
    unit(e, 3);
    put(s, "b", "2'", 0, e, "", "", VSR_OK); /* a put again is a new entry: c is the oldest now */
    assert_int_equal(search(s, e, "", "", 0.5f).status, VSR_OK);
    put(s, "f", "6", 0, NULL, "", "", VSR_OK);
    assert_int_equal(get(s, "c").status, VSR_ERR_NOT_FOUND);
    put(s, "g", "7", 0, NULL, "", "", VSR_OK); /* then d, whatever was read */
    assert_int_equal(get(s, "d").status, VSR_ERR_NOT_FOUND);
    assert_int_equal(get(s, "b").status, VSR_OK);
    assert_int_equal(get(s, "f").status, VSR_OK);
    assert_int_equal(get(s, "g").status, VSR_OK);
    vsr_store_stats_t st;
    vsr_store_stats(s, &st);
    assert_int_equal(st.evictions, 3);
    assert_int_equal(st.entries, 3);
    vsr_store_close(s);
}

static void test_mem_lfu(void **state)
{
    VSR_UNUSED(state);
    vsr_store_t *s = mem_store_policy(3, 1 << 20, VSR_STORE_EVICT_LFU);
    put(s, "a", "1", 0, NULL, "", "", VSR_OK);
    put(s, "b", "2", 0, NULL, "", "", VSR_OK);
    put(s, "c", "3", 0, NULL, "", "", VSR_OK);
    assert_int_equal(get(s, "a").status, VSR_OK); /* a: 2, b: 1, c: 1 (b older) */
    assert_int_equal(get(s, "a").status, VSR_OK); /* a: 3 */
    assert_int_equal(get(s, "c").status, VSR_OK); /* c: 2 */
    put(s, "d", "4", 0, NULL, "", "", VSR_OK);   /* the fewest reads: b */
    assert_int_equal(get(s, "b").status, VSR_ERR_NOT_FOUND);
    put(s, "e", "5", 0, NULL, "", "", VSR_OK); /* a 3, c 2, d 1: d goes */
    assert_int_equal(get(s, "d").status, VSR_ERR_NOT_FOUND);
    /* a tie: e and f both at 1 read; e reached it first and goes first */
    put(s, "f", "6", 0, NULL, "", "", VSR_OK); /* evicts e (1) rather than c (2) */
    assert_int_equal(get(s, "e").status, VSR_ERR_NOT_FOUND);
    assert_int_equal(get(s, "c").status, VSR_OK);
    assert_int_equal(get(s, "a").status, VSR_OK);
    /* a search hit counts as a read */
    float e[VSR_STORE_DIM];
    unit(e, 9);
    put(s, "g", "7", 0, e, "", "", VSR_OK); /* evicts f (1): a 4, c 3 */
    assert_int_equal(get(s, "f").status, VSR_ERR_NOT_FOUND);
    for (int i = 0; i < 6; i++)
        assert_int_equal(search(s, e, "", "", 0.5f).status, VSR_OK); /* g: 7 */
    put(s, "h", "8", 0, NULL, "", "", VSR_OK); /* evicts c (3), not g (7) */
    assert_int_equal(get(s, "c").status, VSR_ERR_NOT_FOUND);
    assert_int_equal(search(s, e, "", "", 0.5f).status, VSR_OK);
    vsr_store_stats_t st;
    vsr_store_stats(s, &st);
    assert_int_equal(st.evictions, 5);
    assert_int_equal(st.entries, 3);
    vsr_store_close(s);
}

/* LFU and FIFO against a plain model, over random puts, gets, deletes and
 * expiries: the same entries survive */
static void test_mem_policy_model(void **state)
{
    VSR_UNUSED(state);
    enum { N = 8, KEYS = 24, OPS = 20000 };
    for (int pol = VSR_STORE_EVICT_LFU; pol <= VSR_STORE_EVICT_FIFO; pol++) {
        vsr_store_t *s = mem_store_policy(N, 1 << 20, (vsr_store_eviction_t)pol);
        struct { int live; uint64_t count, seq, expiry; } m[KEYS] = {{0}};
        uint64_t seq = 0, rnd = 88172645463325252ULL;
        for (int i = 0; i < OPS; i++) {
            rnd ^= rnd << 13, rnd ^= rnd >> 7, rnd ^= rnd << 17;
            int k = (int)(rnd % KEYS), op = (int)((rnd >> 20) % 10);
            char key[8];
            snprintf(key, sizeof(key), "k%d", k);
            fake_now += 1;
            if (op < 4) {
                uint64_t ttl = (rnd >> 30) % 7 == 0 ? 5 : 100000;
                int n = 0, victim = -1;
                for (int j = 0; j < KEYS; j++)
                    n += m[j].live && j != k;
                if (n >= N) /* the model's victim: fewest reads, then the earliest there (LFU); oldest (FIFO) */
                    for (int j = 0; j < KEYS; j++) {
                        if (!m[j].live || j == k)
                            continue;
                        if (victim < 0 ||
                            (pol == VSR_STORE_EVICT_LFU &&
                             (m[j].count < m[victim].count ||
                              (m[j].count == m[victim].count && m[j].seq < m[victim].seq))) ||
                            (pol == VSR_STORE_EVICT_FIFO && m[j].seq < m[victim].seq))
                            victim = j;
                    }
                if (victim >= 0)
                    m[victim].live = 0;
                put(s, key, "v", ttl, NULL, "", "", VSR_OK);
                m[k].live = 1;
                m[k].count = 1;
                m[k].seq = ++seq;
                m[k].expiry = fake_now + ttl;
            } else if (op < 9) {
                int want = m[k].live && m[k].expiry > fake_now;
                if (m[k].live && !want)
                    m[k].live = 0; /* found dead on read */
                assert_int_equal(get(s, key).status, want ? VSR_OK : VSR_ERR_NOT_FOUND);
                if (want && pol == VSR_STORE_EVICT_LFU) {
                    m[k].count++;
                    m[k].seq = ++seq; /* reached the new count now */
                }
            } else {
                result_t r = {0};
                assert_int_equal(vsr_store_del(s, S(key), on_done, &r, NULL), VSR_OK);
                m[k].live = 0;
            }
        }
        vsr_store_close(s);
    }
}

static void test_mem_lru_bytes(void **state)
{
    VSR_UNUSED(state);
    char v[1000];
    memset(v, 'x', sizeof(v) - 1);
    v[sizeof(v) - 1] = 0;
    /* room for two 1000-byte values with their keys, not three */
    vsr_store_t *s = mem_store(100, 2600, VSR_STORE_KERNEL_AUTO);
    put(s, "a", v, 0, NULL, "", "", VSR_OK);
    put(s, "b", v, 0, NULL, "", "", VSR_OK);
    vsr_store_stats_t st;
    vsr_store_stats(s, &st);
    assert_int_equal(st.entries, 2);
    assert_true(st.bytes <= 2600);
    put(s, "c", v, 0, NULL, "", "", VSR_OK);
    assert_int_equal(get(s, "a").status, VSR_ERR_NOT_FOUND);
    assert_int_equal(get(s, "b").status, VSR_OK);
    assert_int_equal(get(s, "c").status, VSR_OK);
    vsr_store_stats(s, &st);
    assert_int_equal(st.evictions, 1);
    assert_true(st.bytes <= 2600);
    /* an entry that can never fit is refused and evicts nothing */
    char huge[3000];
    memset(huge, 'y', sizeof(huge) - 1);
    huge[sizeof(huge) - 1] = 0;
    put(s, "h", huge, 0, NULL, "", "", VSR_ERR_TOO_BIG);
    assert_int_equal(get(s, "b").status, VSR_OK);
    assert_int_equal(get(s, "c").status, VSR_OK);
    vsr_store_close(s);
}

static void search_cases(vsr_store_kernel_t kernel)
{
    vsr_store_t *s = mem_store(1000, 64 << 20, kernel);
    float q[VSR_STORE_DIM], v[VSR_STORE_DIM];
    tilted(v, 0.95);
    put(s, "near", "N", 0, v, "", "m1", VSR_OK);
    tilted(v, 0.80);
    put(s, "far", "F", 0, v, "", "m1", VSR_OK);
    tilted(v, 0.99);
    put(s, "user", "U", 0, v, "u42", "m1", VSR_OK);
    put(s, "other-part", "O", 0, v, "", "m2", VSR_OK);
    put(s, "plain", "P", 0, NULL, "", "m1", VSR_OK); /* no embedding: never a search hit */
    for (int i = 10; i < 300; i++) { /* noise on other axes */
        char k[16];
        snprintf(k, sizeof(k), "n%d", i);
        unit(v, i);
        put(s, k, "n", 0, v, "", "m1", VSR_OK);
    }
    unit(q, 0);
    result_t r = search(s, q, "", "m1", 0.9f);
    assert_int_equal(r.status, VSR_OK);
    assert_int_equal(r.klen, 4);
    assert_memory_equal(r.key, "near", 4);
    assert_memory_equal(r.value, "N", 1);
    assert_float_equal(r.sim, 0.95f, 1e-4);
    assert_int_equal(search(s, q, "", "m1", 0.96f).status, VSR_ERR_NOT_FOUND); /* threshold */
    r = search(s, q, "", "m1", 0.7f); /* the best wins, not the first above */
    assert_memory_equal(r.key, "near", 4);
    r = search(s, q, "u42", "m1", 0.9f); /* scope: only the user's */
    assert_int_equal(r.status, VSR_OK);
    assert_memory_equal(r.key, "user", 4);
    assert_int_equal(search(s, q, "u43", "m1", 0.5f).status, VSR_ERR_NOT_FOUND);
    r = search(s, q, "", "m2", 0.5f); /* partition */
    assert_memory_equal(r.key, "other-part", 10);
    assert_int_equal(search(s, q, "", "m3", -1.0f).status, VSR_ERR_NOT_FOUND);
    /* delete and replace take the row out of the index */
    result_t d = {0};
    vsr_store_del(s, S("near"), on_done, &d, NULL);
    r = search(s, q, "", "m1", 0.7f);
    assert_memory_equal(r.key, "far", 3);
    put(s, "far", "F2", 0, NULL, "", "m1", VSR_OK);
    assert_int_equal(search(s, q, "", "m1", 0.7f).status, VSR_ERR_NOT_FOUND);
    unit(q, 150);
    r = search(s, q, "", "m1", 0.99f);
    assert_memory_equal(r.key, "n150", 4);
    /* expired entries are never returned, and leave the index */
    tilted(v, 0.97);
    put(s, "short", "S", 10, v, "", "m1", VSR_OK);
    unit(q, 0);
    assert_int_equal(search(s, q, "", "m1", 0.9f).status, VSR_OK);
    fake_now += 10;
    assert_int_equal(search(s, q, "", "m1", 0.9f).status, VSR_ERR_NOT_FOUND);
    vsr_store_stats_t st;
    vsr_store_stats(s, &st);
    assert_int_equal(st.index_entries, 292); /* user, other-part, 290 noise */
    vsr_store_close(s);
}

static void test_mem_search_loop(void **state)
{
    VSR_UNUSED(state);
    search_cases(VSR_STORE_KERNEL_LOOP);
}

static void test_mem_search_blas(void **state)
{
    VSR_UNUSED(state);
    search_cases(VSR_STORE_KERNEL_BLAS);
}

static void test_mem_search_int8(void **state)
{
    VSR_UNUSED(state);
    search_cases(VSR_STORE_KERNEL_INT8);
}

/* int8 estimates pick candidates; the float32 similarity decides: the same
 * answers as the float32 scan on random data, similarity for similarity */
static void test_mem_int8_agrees(void **state)
{
    VSR_UNUSED(state);
    vsr_store_t *a = mem_store(3000, 256 << 20, VSR_STORE_KERNEL_LOOP);
    vsr_store_t *b = mem_store(3000, 256 << 20, VSR_STORE_KERNEL_INT8);
    static float vecs[2000][VSR_STORE_DIM];
    uint64_t x = 12345;
    for (int i = 0; i < 2000; i++) {
        double n = 0;
        for (int j = 0; j < VSR_STORE_DIM; j++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            vecs[i][j] = (float)((double)(x >> 11) / 9007199254740992.0 - 0.5);
            n += (double)vecs[i][j] * vecs[i][j];
        }
        for (int j = 0; j < VSR_STORE_DIM; j++)
            vecs[i][j] = (float)(vecs[i][j] / sqrt(n));
        char k[16];
        snprintf(k, sizeof(k), "r%d", i);
        put(a, k, "v", 0, vecs[i], "", "", VSR_OK);
        put(b, k, "v", 0, vecs[i], "", "", VSR_OK);
    }
    int hits = 0;
    for (int i = 0; i < 300; i++) {
        float q[VSR_STORE_DIM];
        const float *base = vecs[(i * 7) % 2000];
        for (int j = 0; j < VSR_STORE_DIM; j++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            q[j] = base[j] + (float)(((double)(x >> 11) / 9007199254740992.0 - 0.5) * 0.02 * (i % 5));
        }
        double n = 0;
        for (int j = 0; j < VSR_STORE_DIM; j++)
            n += (double)q[j] * q[j];
        for (int j = 0; j < VSR_STORE_DIM; j++)
            q[j] = (float)(q[j] / sqrt(n));
        result_t ra = search(a, q, "", "", 0.9f), rb = search(b, q, "", "", 0.9f);
        assert_int_equal(ra.status, rb.status);
        if (ra.status == VSR_OK) {
            hits++;
            assert_int_equal(ra.klen, rb.klen);
            assert_memory_equal(ra.key, rb.key, ra.klen);
            assert_true(ra.sim == rb.sim);
        }
    }
    assert_true(hits > 100 && hits < 300); /* both hits and misses were tried */
    vsr_store_close(a);
    vsr_store_close(b);
}

static void test_mem_index_bound(void **state)
{
    VSR_UNUSED(state);
    vsr_store_t *s = mem_store(50, 64 << 20, VSR_STORE_KERNEL_AUTO);
    float v[VSR_STORE_DIM];
    for (int i = 0; i < 200; i++) {
        char k[16];
        snprintf(k, sizeof(k), "k%d", i);
        unit(v, i);
        put(s, k, "v", 0, v, "", "", VSR_OK);
    }
    vsr_store_stats_t st;
    vsr_store_stats(s, &st);
    assert_int_equal(st.entries, 50);
    assert_int_equal(st.index_entries, 50);
    assert_int_equal(st.evictions, 150);
    unit(v, 199);
    assert_int_equal(search(s, v, "", "", 0.9f).status, VSR_OK);
    unit(v, 100);
    assert_int_equal(search(s, v, "", "", 0.9f).status, VSR_ERR_NOT_FOUND);
    vsr_store_close(s);
}

/* Redis Cluster's key slots: CRC16/XMODEM mod 16384, hash tags honoured
 * (the values are redis's own: CLUSTER KEYSLOT) */
static void test_cluster_slot(void **state)
{
    VSR_UNUSED(state);
    assert_int_equal(vsr__rcl_crc16("123456789", 9), 0x31C3);
    assert_int_equal(vsr__rcl_slot(S("foo")), 12182);
    assert_int_equal(vsr__rcl_slot(S("bar")), 5061);
    assert_int_equal(vsr__rcl_slot(S("{user1000}.following")), vsr__rcl_slot(S("{user1000}.followers")));
    assert_int_equal(vsr__rcl_slot(S("{user1000}.following")), vsr__rcl_slot(S("user1000")));
    assert_int_equal(vsr__rcl_slot(S("foo{}{bar}")), vsr__rcl_slot(S("foo{}{bar}"))); /* empty tag: whole key */
    assert_int_not_equal(vsr__rcl_slot(S("foo{}{bar}")), vsr__rcl_slot(S("bar")));
    assert_int_equal(vsr__rcl_slot(S("foo{{bar}}zap")), vsr__rcl_slot(S("{bar")));
    assert_int_equal(vsr__rcl_slot(S("foo{bar}{zap}")), vsr__rcl_slot(S("bar")));
    assert_int_equal(vsr__rcl_slot(S("{trp:}index")), vsr__rcl_slot(S("trp:")));
}

static void test_config_errors(void **state)
{
    VSR_UNUSED(state);
    vsr_store_config_t cfg;
    vsr_buf_t err;
    vsr_buf_init(&err, 1024);
    uv_loop_t loop;
    uv_loop_init(&loop);
    const char *bad[] = {"nohost", "1.2.3.4:0", "1.2.3.4:65536", "unix:", ":6379", "[]:6379"};
    for (size_t i = 0; i < VSR_ARRAY_LEN(bad); i++) {
        vsr_store_config_init(&cfg);
        cfg.backend = VSR_STORE_REDIS;
        cfg.address = bad[i];
        vsr_buf_reset(&err);
        assert_null(vsr_store_open(&loop, &cfg, &err));
        assert_true(err.len > 0);
    }
    vsr_store_config_init(&cfg);
    cfg.backend = VSR_STORE_REDIS;
    assert_null(vsr_store_open(NULL, &cfg, &err)); /* redis needs a loop */
    vsr_store_config_init(&cfg);
    cfg.max_entries = (size_t)1 << 40;
    assert_null(vsr_store_open(NULL, &cfg, &err));
    vsr_buf_free(&err);
    assert_int_equal(uv_loop_close(&loop), 0);
}

/* ---- redis ---- */

static pid_t redis_pid = -1;
static char redis_dir[64];
static char redis_sock[100];
static int redis_port;

static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    socklen_t l = sizeof(a);
    getsockname(fd, (struct sockaddr *)&a, &l);
    close(fd);
    return ntohs(a.sin_port);
}

static void redis_kill(void)
{
    if (redis_pid > 0) {
        kill(redis_pid, SIGCONT);
        kill(redis_pid, SIGKILL);
        waitpid(redis_pid, NULL, 0);
        redis_pid = -1;
    }
}

static int sock_ready(void)
{
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    snprintf(a.sun_path, sizeof(a.sun_path), "%s", redis_sock);
    int ok = connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0;
    close(fd);
    return ok;
}

static void redis_start(void)
{
    char port[16];
    snprintf(port, sizeof(port), "%d", redis_port);
    unlink(redis_sock);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        int null = open("/dev/null", O_WRONLY);
        dup2(null, 1);
        execlp("redis-server", "redis-server", "--port", port, "--bind", "127.0.0.1", "--unixsocket", redis_sock,
               "--save", "", "--appendonly", "no", "--dir", redis_dir, (char *)NULL);
        fprintf(stderr, "test_store: cannot run redis-server: %s (install it: scripts/setup-deps)\n",
                strerror(errno));
        _exit(127);
    }
    redis_pid = pid;
    for (int i = 0; i < 500 && !sock_ready(); i++) {
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid) {
            redis_pid = -1;
            fail_msg("redis-server exited at start (status %d)", st);
        }
        usleep(10000);
    }
    assert_true(sock_ready());
}

static void cleanup_at_exit(void)
{
    redis_kill();
    if (redis_dir[0]) {
        unlink(redis_sock);
        rmdir(redis_dir);
    }
}

static int redis_group_setup(void **state)
{
    VSR_UNUSED(state);
    snprintf(redis_dir, sizeof(redis_dir), "/tmp/vsr-store-test-XXXXXX");
    if (!mkdtemp(redis_dir))
        return -1;
    snprintf(redis_sock, sizeof(redis_sock), "%s/redis.sock", redis_dir);
    redis_port = free_port();
    atexit(cleanup_at_exit);
    return 0;
}

static int redis_group_teardown(void **state)
{
    VSR_UNUSED(state);
    cleanup_at_exit();
    return 0;
}

static int redis_test_setup(void **state)
{
    VSR_UNUSED(state);
    if (redis_pid < 0)
        redis_start();
    return 0;
}

static uv_loop_t loop;
static int deadline_hit;

static void on_deadline(uv_timer_t *t)
{
    VSR_UNUSED(t);
    deadline_hit = 1;
}

/* Runs the loop until *flag (or, flag NULL, for ms).  Fails past ms. */
static void run_until(const int *flag, uint64_t ms)
{
    uv_timer_t t;
    uv_timer_init(&loop, &t);
    deadline_hit = 0;
    uv_timer_start(&t, on_deadline, ms, 0);
    while (!deadline_hit && !(flag && *flag))
        uv_run(&loop, UV_RUN_ONCE);
    uv_close((uv_handle_t *)&t, NULL);
    uv_run(&loop, UV_RUN_NOWAIT);
    if (flag)
        assert_true(*flag);
}

static vsr_store_t *redis_store_ex(const char *prefix, int tcp, vsr_store_eviction_t eviction, size_t max_entries)
{
    vsr_store_config_t cfg;
    vsr_store_config_init(&cfg);
    cfg.backend = VSR_STORE_REDIS;
    cfg.eviction = eviction;
    if (max_entries)
        cfg.max_entries = max_entries;
    char addr[160];
    if (tcp)
        snprintf(addr, sizeof(addr), "127.0.0.1:%d", redis_port);
    else
        snprintf(addr, sizeof(addr), "unix:%s", redis_sock);
    cfg.address = addr;
    cfg.key_prefix = prefix;
    cfg.poll_interval_ms = 100;
    cfg.command_timeout_ms = 300;
    cfg.reconnect_min_ms = 50;
    cfg.reconnect_max_ms = 200;
    cfg.max_inflight = 4;
    vsr_buf_t err;
    vsr_buf_init(&err, 1024);
    vsr_store_t *s = vsr_store_open(&loop, &cfg, &err);
    vsr_buf_free(&err);
    assert_non_null(s);
    return s;
}

static vsr_store_t *redis_store(const char *prefix, int tcp)
{
    return redis_store_ex(prefix, tcp, VSR_STORE_EVICT_LRU, 0);
}

static void wait_connected(vsr_store_t *s)
{
    vsr_store_stats_t st;
    for (int i = 0; i < 300; i++) {
        vsr_store_stats(s, &st);
        if (st.connected)
            return;
        run_until(NULL, 10);
    }
    fail_msg("the store did not connect");
}

static result_t rput(vsr_store_t *s, const char *k, const char *v, uint64_t ttl, const float *emb,
                     const char *scope, const char *part)
{
    result_t r = {0};
    int rc = vsr_store_put(s, S(k), S(v), ttl, emb, S(scope), S(part), on_done, &r, NULL);
    assert_true(rc == VSR_OK || rc == VSR_AGAIN);
    run_until(&r.calls, 2000);
    assert_int_equal(r.calls, 1);
    return r;
}

static result_t rget(vsr_store_t *s, const char *k)
{
    result_t r = {0};
    int rc = vsr_store_get(s, S(k), on_done, &r, NULL);
    assert_true(rc == VSR_OK || rc == VSR_AGAIN);
    run_until(&r.calls, 2000);
    assert_int_equal(r.calls, 1);
    return r;
}

static result_t rsearch(vsr_store_t *s, const float *q, const char *scope, const char *part, float thr)
{
    result_t r = {0};
    int rc = vsr_store_search(s, q, S(scope), S(part), thr, on_done, &r, NULL);
    assert_true(rc == VSR_OK || rc == VSR_AGAIN);
    run_until(&r.calls, 2000);
    assert_int_equal(r.calls, 1);
    return r;
}

static void close_store(vsr_store_t *s)
{
    vsr_store_close(s);
}

static void loop_open(void)
{
    assert_int_equal(uv_loop_init(&loop), 0);
}

static void loop_done(void)
{
    uv_run(&loop, UV_RUN_DEFAULT); /* the stores' handles close */
    assert_int_equal(uv_loop_close(&loop), 0);
}

static void test_redis_roundtrip(void **state)
{
    VSR_UNUSED(state);
    loop_open();
    vsr_store_t *s = redis_store("t1:", 0);
    wait_connected(s);
    result_t r = {0};
    vsr_store_op_t *h = NULL;
    assert_int_equal(vsr_store_put(s, S("key 1"), S("value one"), 60000, NULL, S(""), S(""), on_done, &r, &h),
                     VSR_AGAIN);
    assert_non_null(h);
    assert_int_equal(r.calls, 0);
    run_until(&r.calls, 2000);
    assert_int_equal(r.status, VSR_OK);
    r = rget(s, "key 1");
    assert_int_equal(r.status, VSR_OK);
    assert_int_equal(r.vlen, 9);
    assert_memory_equal(r.value, "value one", 9);
    assert_int_equal(rget(s, "key 2").status, VSR_ERR_NOT_FOUND);
    /* binary keys and values */
    result_t b = {0};
    const char bin[] = {'a', 0, 'b', '\r', '\n'};
    vsr_store_put(s, vsr_slice(bin, 5), vsr_slice(bin, 5), 60000, NULL, S(""), S(""), on_done, &b, NULL);
    run_until(&b.calls, 2000);
    result_t g = {0};
    vsr_store_get(s, vsr_slice(bin, 5), on_done, &g, NULL);
    run_until(&g.calls, 2000);
    assert_int_equal(g.vlen, 5);
    assert_memory_equal(g.value, bin, 5);
    /* the same keys over TCP, from another store */
    vsr_store_t *t = redis_store("t1:", 1);
    wait_connected(t);
    assert_int_equal(rget(t, "key 1").status, VSR_OK);
    /* another prefix is another namespace */
    vsr_store_t *u = redis_store("t1b:", 1);
    wait_connected(u);
    assert_int_equal(rget(u, "key 1").status, VSR_ERR_NOT_FOUND);
    result_t d = {0};
    vsr_store_del(s, S("key 1"), on_done, &d, NULL);
    run_until(&d.calls, 2000);
    assert_int_equal(d.status, VSR_OK);
    assert_int_equal(rget(t, "key 1").status, VSR_ERR_NOT_FOUND);
    /* cancel: the callback never runs */
    result_t c = {0};
    h = NULL;
    assert_int_equal(vsr_store_get(s, S("key 1"), on_done, &c, &h), VSR_AGAIN);
    vsr_store_cancel(s, h);
    run_until(NULL, 100);
    assert_int_equal(c.calls, 0);
    /* the in-flight bound (4): the fifth fails at once, counted */
    result_t many[5] = {{0}};
    for (int i = 0; i < 4; i++)
        assert_int_equal(vsr_store_get(s, S("x"), on_done, &many[i], NULL), VSR_AGAIN);
    assert_int_equal(vsr_store_get(s, S("x"), on_done, &many[4], NULL), VSR_OK);
    assert_int_equal(many[4].calls, 1);
    assert_int_equal(many[4].status, VSR_ERR_TOO_BIG);
    run_until(&many[3].calls, 2000);
    vsr_store_stats_t st;
    vsr_store_stats(s, &st);
    assert_int_equal(st.rejected, 1);
    assert_int_equal(st.errors, 1);
    assert_int_equal(st.hits, 2);
    /* closing with operations in flight: no callback, nothing leaks */
    result_t late = {0};
    vsr_store_get(s, S("x"), on_done, &late, NULL);
    close_store(s);
    close_store(t);
    close_store(u);
    loop_done();
    assert_int_equal(late.calls, 0);
}

/* eviction_policy fifo and lfu with redis: vsr's sorted set bounds the
 * values to max_entries, in the policy's order */
static void test_redis_eviction(void **state)
{
    VSR_UNUSED(state);
    loop_open();
    vsr_store_t *s = redis_store_ex("tfifo:", 0, VSR_STORE_EVICT_FIFO, 3);
    wait_connected(s);
    rput(s, "a", "1", 60000, NULL, "", "");
    rput(s, "b", "2", 60000, NULL, "", "");
    rput(s, "c", "3", 60000, NULL, "", "");
    for (int i = 0; i < 3; i++)
        assert_int_equal(rget(s, "a").status, VSR_OK); /* reads change nothing for fifo */
    rput(s, "d", "4", 60000, NULL, "", "");
    run_until(NULL, 100); /* the trim's reply, then the DEL */
    assert_int_equal(rget(s, "a").status, VSR_ERR_NOT_FOUND);
    assert_int_equal(rget(s, "b").status, VSR_OK);
    result_t r = {0};
    assert_int_equal(vsr_store_del(s, S("b"), on_done, &r, NULL), VSR_AGAIN); /* leaves the order too */
    run_until(&r.calls, 2000);
    rput(s, "e", "5", 60000, NULL, "", ""); /* c, d, e: room without evicting */
    run_until(NULL, 100);
    assert_int_equal(rget(s, "c").status, VSR_OK);
    rput(s, "f", "6", 60000, NULL, "", ""); /* c is the oldest */
    run_until(NULL, 100);
    assert_int_equal(rget(s, "c").status, VSR_ERR_NOT_FOUND);
    assert_int_equal(rget(s, "d").status, VSR_OK);
    vsr_store_stats_t st;
    vsr_store_stats(s, &st);
    assert_int_equal(st.evictions, 2);
    close_store(s);

    s = redis_store_ex("tlfu:", 0, VSR_STORE_EVICT_LFU, 3);
    wait_connected(s);
    rput(s, "a", "1", 60000, NULL, "", "");
    rput(s, "b", "2", 60000, NULL, "", "");
    rput(s, "c", "3", 60000, NULL, "", "");
    assert_int_equal(rget(s, "a").status, VSR_OK);
    assert_int_equal(rget(s, "a").status, VSR_OK);
    assert_int_equal(rget(s, "c").status, VSR_OK);
    run_until(NULL, 50); /* the reads' counts */
    rput(s, "d", "4", 60000, NULL, "", ""); /* b has the fewest reads */
    run_until(NULL, 100);
    assert_int_equal(rget(s, "b").status, VSR_ERR_NOT_FOUND);
    rput(s, "e", "5", 60000, NULL, "", ""); /* a 3, c 2, d 1: d, never the new key */
    run_until(NULL, 100);
    assert_int_equal(rget(s, "d").status, VSR_ERR_NOT_FOUND);
    assert_int_equal(rget(s, "e").status, VSR_OK);
    assert_int_equal(rget(s, "a").status, VSR_OK);
    assert_int_equal(rget(s, "c").status, VSR_OK);
    vsr_store_stats(s, &st);
    assert_int_equal(st.evictions, 2);
    close_store(s);
    loop_done();
}

static void test_redis_ttl(void **state)
{
    VSR_UNUSED(state);
    loop_open();
    vsr_store_t *s = redis_store("t2:", 0);
    wait_connected(s);
    float e[VSR_STORE_DIM];
    unit(e, 3);
    assert_int_equal(rput(s, "short", "v", 600, e, "", "p").status, VSR_OK);
    assert_int_equal(rput(s, "long", "v", 60000, NULL, "", "").status, VSR_OK);
    assert_int_equal(rget(s, "short").status, VSR_OK);
    assert_int_equal(rsearch(s, e, "", "p", 0.9f).status, VSR_OK);
    run_until(NULL, 800);
    assert_int_equal(rget(s, "short").status, VSR_ERR_NOT_FOUND);
    assert_int_equal(rsearch(s, e, "", "p", 0.9f).status, VSR_ERR_NOT_FOUND);
    assert_int_equal(rget(s, "long").status, VSR_OK);
    /* a store opened now does not load the expired record */
    vsr_store_t *t = redis_store("t2:", 0);
    wait_connected(t);
    run_until(NULL, 200);
    vsr_store_stats_t st;
    vsr_store_stats(t, &st);
    assert_int_equal(st.index_loaded, 1);
    assert_int_equal(st.index_entries, 0);
    close_store(s);
    close_store(t);
    loop_done();
}

static void test_redis_replicas(void **state)
{
    VSR_UNUSED(state);
    loop_open();
    vsr_store_t *a = redis_store("t3:", 0);
    vsr_store_t *b = redis_store("t3:", 1);
    wait_connected(a);
    wait_connected(b);
    float e[VSR_STORE_DIM], q[VSR_STORE_DIM];
    tilted(e, 0.96);
    unit(q, 0);
    assert_int_equal(rput(a, "shared", "from A", 60000, e, "user7", "rev1").status, VSR_OK);
    /* exact: at once */
    result_t r = rget(b, "shared");
    assert_int_equal(r.status, VSR_OK);
    assert_memory_equal(r.value, "from A", 6);
    /* semantic: after B's next poll */
    run_until(NULL, 300);
    r = rsearch(b, q, "user7", "rev1", 0.9f);
    assert_int_equal(r.status, VSR_OK);
    assert_int_equal(r.klen, 6);
    assert_memory_equal(r.key, "shared", 6);
    assert_memory_equal(r.value, "from A", 6);
    assert_float_equal(r.sim, 0.96f, 1e-4);
    assert_int_equal(rsearch(b, q, "user8", "rev1", 0.5f).status, VSR_ERR_NOT_FOUND);
    assert_int_equal(rsearch(b, q, "user7", "rev2", 0.5f).status, VSR_ERR_NOT_FOUND);
    assert_int_equal(rsearch(b, q, "user7", "rev1", 0.97f).status, VSR_ERR_NOT_FOUND);
    /* many entries from B reach A in batches */
    for (int i = 0; i < 40; i++) {
        char k[16];
        snprintf(k, sizeof(k), "b%d", i);
        unit(e, 10 + i);
        assert_int_equal(rput(b, k, "from B", 60000, e, "", "rev1").status, VSR_OK);
    }
    run_until(NULL, 300);
    unit(q, 49);
    r = rsearch(a, q, "", "rev1", 0.99f);
    assert_int_equal(r.status, VSR_OK);
    assert_memory_equal(r.key, "b39", 3);
    vsr_store_stats_t st;
    vsr_store_stats(a, &st);
    assert_int_equal(st.index_entries, 41);
    /* A deletes: B's index still has it, the GET misses and B forgets it */
    result_t d = {0};
    vsr_store_del(a, S("shared"), on_done, &d, NULL);
    run_until(&d.calls, 2000);
    unit(q, 0);
    vsr_store_stats(b, &st);
    uint64_t before = st.index_entries;
    assert_int_equal(rsearch(b, q, "user7", "rev1", 0.9f).status, VSR_ERR_NOT_FOUND);
    vsr_store_stats(b, &st);
    assert_int_equal(st.index_entries, before - 1);
    close_store(a);
    close_store(b);
    loop_done();
}

/* sends RESP commands to the test server on a plain blocking socket and
 * returns the first reply line (enough for +OK / -ERR) */
static void raw_command(const char *resp, char *reply, size_t cap)
{
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    snprintf(a.sun_path, sizeof(a.sun_path), "%s", redis_sock);
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    assert_int_equal(write(fd, resp, strlen(resp)), (ssize_t)strlen(resp));
    ssize_t n = read(fd, reply, cap - 1);
    assert_true(n > 0);
    reply[n] = 0;
    close(fd);
}

static void test_redis_auth(void **state)
{
    VSR_UNUSED(state);
    char reply[256];
    raw_command("*4\r\n$6\r\nCONFIG\r\n$3\r\nSET\r\n$11\r\nrequirepass\r\n$6\r\nsecret\r\n", reply,
                sizeof(reply));
    assert_string_equal(reply, "+OK\r\n");
    loop_open();
    vsr_store_t *anon = redis_store("t6:", 0);
    wait_connected(anon);
    assert_int_equal(rput(anon, "k", "v", 60000, NULL, "", "").status, VSR_ERR_IO); /* NOAUTH */
    vsr_store_config_t cfg;
    vsr_store_config_init(&cfg);
    cfg.backend = VSR_STORE_REDIS;
    char addr[160];
    snprintf(addr, sizeof(addr), "127.0.0.1:%d", redis_port);
    cfg.address = addr;
    cfg.key_prefix = "t6:";
    cfg.password = "secret";
    cfg.db = 2;
    vsr_store_t *auth = vsr_store_open(&loop, &cfg, NULL);
    wait_connected(auth);
    assert_int_equal(rput(auth, "k", "v", 60000, NULL, "", "").status, VSR_OK);
    assert_int_equal(rget(auth, "k").status, VSR_OK);
    cfg.db = 0; /* another database: another namespace */
    vsr_store_t *db0 = vsr_store_open(&loop, &cfg, NULL);
    wait_connected(db0);
    assert_int_equal(rget(db0, "k").status, VSR_ERR_NOT_FOUND);
    close_store(anon);
    close_store(auth);
    close_store(db0);
    loop_done();
    raw_command("*2\r\n$4\r\nAUTH\r\n$6\r\nsecret\r\n*4\r\n$6\r\nCONFIG\r\n$3\r\nSET\r\n$11\r\nrequirepass\r\n$0\r\n\r\n",
                reply, sizeof(reply));
    assert_true(!strncmp(reply, "+OK\r\n", 5));
}

/* the index is bounded on both sides: the local rows by max_entries, the
 * stream by MAXLEN ~ max_entries (approximate: redis trims whole nodes) */
static void test_redis_index_bound(void **state)
{
    VSR_UNUSED(state);
    loop_open();
    vsr_store_config_t cfg;
    vsr_store_config_init(&cfg);
    cfg.backend = VSR_STORE_REDIS;
    char addr[160];
    snprintf(addr, sizeof(addr), "unix:%s", redis_sock);
    cfg.address = addr;
    cfg.key_prefix = "t5:";
    cfg.max_entries = 10;
    cfg.poll_interval_ms = 50;
    cfg.poll_batch = 4; /* several polls in a row */
    vsr_store_t *a = vsr_store_open(&loop, &cfg, NULL);
    assert_non_null(a);
    wait_connected(a);
    float e[VSR_STORE_DIM];
    for (int i = 0; i < 300; i++) {
        char k[16];
        snprintf(k, sizeof(k), "x%d", i);
        unit(e, i);
        assert_int_equal(rput(a, k, "v", 60000, e, "", "").status, VSR_OK);
    }
    vsr_store_stats_t st;
    vsr_store_stats(a, &st);
    assert_int_equal(st.index_entries, 10);
    vsr_store_t *b = vsr_store_open(&loop, &cfg, NULL);
    wait_connected(b);
    run_until(NULL, 400);
    vsr_store_stats(b, &st);
    assert_int_equal(st.index_entries, 10);
    assert_true(st.index_loaded >= 10 && st.index_loaded < 300); /* the stream was trimmed */
    unit(e, 299); /* the newest is there */
    result_t r = rsearch(b, e, "", "", 0.9f);
    assert_int_equal(r.status, VSR_OK);
    assert_memory_equal(r.key, "x299", 4);
    close_store(a);
    close_store(b);
    loop_done();
}

/* A host name is looked up before each connect, off the loop: a name of
 * this machine's that resolves to the loopback reaches the server; one that
 * resolves to nothing leaves the store down (every operation an error, at
 * once) and closes cleanly, with or without a lookup in flight. */
static void test_redis_hostname(void **state)
{
    VSR_UNUSED(state);
    loop_open();
    vsr_store_config_t cfg;
    vsr_store_config_init(&cfg);
    cfg.backend = VSR_STORE_REDIS;
    cfg.reconnect_min_ms = 20;
    cfg.reconnect_max_ms = 50;
    vsr_buf_t err;
    vsr_buf_init(&err, 1024);
    char addr[320];
    cfg.address = "no-such-host.invalid:6379";
    vsr_store_t *s = vsr_store_open(&loop, &cfg, &err);
    assert_non_null(s);
    run_until(NULL, 200); /* lookups fail, reconnects are scheduled */
    assert_int_equal(rget(s, "k").status, VSR_ERR_IO);
    vsr_store_stats_t st;
    vsr_store_stats(s, &st);
    assert_int_equal(st.connected, 0);
    close_store(s);
    s = vsr_store_open(&loop, &cfg, &err); /* closed with its first lookup in flight */
    assert_non_null(s);
    close_store(s);
    loop_done();
    char host[256] = "";
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *res = NULL;
    int loopback = gethostname(host, sizeof(host) - 1) == 0 && host[0] && getaddrinfo(host, NULL, &hints, &res) == 0 &&
                   res && ((struct sockaddr_in *)res->ai_addr)->sin_addr.s_addr == htonl(INADDR_LOOPBACK);
    if (res)
        freeaddrinfo(res);
    if (!loopback) {
        vsr_buf_free(&err);
        skip(); /* no name of this machine resolves to 127.0.0.1 */
    }
    loop_open();
    snprintf(addr, sizeof(addr), "%s:%d", host, redis_port);
    cfg.address = addr;
    cfg.key_prefix = "th:";
    s = vsr_store_open(&loop, &cfg, &err);
    assert_non_null(s);
    wait_connected(s);
    assert_int_equal(rput(s, "k", "by name", 60000, NULL, "", "").status, VSR_OK);
    result_t r = rget(s, "k");
    assert_int_equal(r.status, VSR_OK);
    assert_memory_equal(r.value, "by name", 7);
    close_store(s);
    loop_done();
    vsr_buf_free(&err);
}

static void test_redis_down(void **state)
{
    VSR_UNUSED(state);
    loop_open();
    vsr_store_t *s = redis_store("t4:", 0);
    wait_connected(s);
    float e[VSR_STORE_DIM];
    unit(e, 5);
    assert_int_equal(rput(s, "k", "v", 60000, e, "", "").status, VSR_OK);
    /* killed with an operation in flight */
    result_t r = {0};
    int rc = vsr_store_get(s, S("k"), on_done, &r, NULL);
    assert_true(rc == VSR_AGAIN);
    redis_kill();
    run_until(&r.calls, 2000);
    assert_int_equal(r.status, VSR_ERR_IO);
    /* while down: every operation still answers, as an error */
    assert_int_equal(rget(s, "k").status, VSR_ERR_IO);
    assert_int_equal(rput(s, "k2", "v", 60000, NULL, "", "").status, VSR_ERR_IO);
    assert_int_equal(rsearch(s, e, "", "", 0.9f).status, VSR_ERR_IO); /* the index hits, the GET fails */
    vsr_store_stats_t st;
    vsr_store_stats(s, &st);
    assert_int_equal(st.errors, 4);
    assert_int_equal(st.connected, 0);
    run_until(NULL, 300); /* a few failed reconnects */
    /* back: it reconnects by itself */
    redis_start();
    wait_connected(s);
    assert_int_equal(rput(s, "k", "again", 60000, NULL, "", "").status, VSR_OK);
    r = rget(s, "k");
    assert_int_equal(r.status, VSR_OK);
    assert_memory_equal(r.value, "again", 5);
    vsr_store_stats(s, &st);
    assert_true(st.reconnects >= 1);
    /* a server that stops answering: the operation times out, no hang */
    kill(redis_pid, SIGSTOP);
    result_t t = {0};
    assert_int_equal(vsr_store_get(s, S("k"), on_done, &t, NULL), VSR_AGAIN);
    run_until(&t.calls, 2000);
    assert_int_equal(t.status, VSR_ERR_IO);
    vsr_store_stats(s, &st);
    assert_true(st.timeouts >= 1);
    kill(redis_pid, SIGCONT);
    wait_connected(s);
    assert_int_equal(rget(s, "k").status, VSR_OK);
    close_store(s);
    loop_done();
}

/* ---- redis cluster ----
 *
 * Three redis-server nodes with --cluster-enabled yes on free loopback ports
 * (their bus ports too), joined by redis-cli --cluster create with no
 * replicas, killed at the end.  cluster-require-full-coverage is off, so the
 * nodes left serve their slots when one dies. */

#define CL_NODES 3
static pid_t cl_pid[CL_NODES] = {-1, -1, -1};
static int cl_port[CL_NODES];
static char cl_dir[64];

/* Runs a shell command; its output (trimmed) in out.  The exit status. */
static int sh(char *out, size_t cap, const char *fmt, ...)
{
    char cmd[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof(cmd), fmt, ap);
    va_end(ap);
    FILE *f = popen(cmd, "r");
    assert_non_null(f);
    size_t n = fread(out, 1, cap - 1, f);
    out[n] = 0;
    while (n > 0 && (out[n - 1] == '\n' || out[n - 1] == '\r' || out[n - 1] == ' '))
        out[--n] = 0;
    int st = pclose(f);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void cl_kill(int i)
{
    if (cl_pid[i] > 0) {
        kill(cl_pid[i], SIGCONT); /* a stalled node's SIGKILL waits for nothing either way */
        kill(cl_pid[i], SIGKILL);
        waitpid(cl_pid[i], NULL, 0);
        cl_pid[i] = -1;
    }
}

static void cl_cleanup(void)
{
    char out[64];
    for (int i = 0; i < CL_NODES; i++)
        cl_kill(i);
    if (cl_dir[0]) {
        sh(out, sizeof(out), "rm -rf '%s'", cl_dir);
        cl_dir[0] = 0;
    }
}

static int cl_group_setup(void **state)
{
    VSR_UNUSED(state);
    snprintf(cl_dir, sizeof(cl_dir), "/tmp/vsr-store-cluster-XXXXXX");
    if (!mkdtemp(cl_dir))
        return -1;
    atexit(cl_cleanup);
    char out[4096];
    for (int i = 0; i < CL_NODES; i++) {
        cl_port[i] = free_port();
        char port[16], bus[16], conf[32];
        snprintf(port, sizeof(port), "%d", cl_port[i]);
        snprintf(bus, sizeof(bus), "%d", free_port());
        snprintf(conf, sizeof(conf), "nodes-%d.conf", i);
        pid_t pid = fork();
        if (pid < 0)
            return -1;
        if (pid == 0) {
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            int null = open("/dev/null", O_WRONLY);
            dup2(null, 1);
            execlp("redis-server", "redis-server", "--port", port, "--bind", "127.0.0.1", "--cluster-enabled", "yes",
                   "--cluster-port", bus, "--cluster-config-file", conf, "--cluster-node-timeout", "1000",
                   "--cluster-require-full-coverage", "no", "--save", "", "--appendonly", "no", "--dir", cl_dir,
                   (char *)NULL);
            _exit(127);
        }
        cl_pid[i] = pid;
    }
    for (int i = 0; i < CL_NODES; i++) {
        int ok = 0;
        for (int k = 0; k < 500 && !ok; k++) {
            ok = sh(out, sizeof(out), "redis-cli -p %d ping 2>/dev/null", cl_port[i]) == 0 && !strcmp(out, "PONG");
            if (!ok)
                usleep(10000);
        }
        if (!ok) {
            fprintf(stderr, "test_store: cluster node %d did not start\n", i);
            return -1;
        }
    }
    if (sh(out, sizeof(out),
           "redis-cli --cluster create 127.0.0.1:%d 127.0.0.1:%d 127.0.0.1:%d --cluster-replicas 0 --cluster-yes "
           "2>&1",
           cl_port[0], cl_port[1], cl_port[2]) != 0) {
        fprintf(stderr, "test_store: redis-cli --cluster create failed:\n%s\n", out);
        return -1;
    }
    for (int k = 0; k < 1000; k++) { /* every node agrees the cluster is up */
        int ok = 0;
        for (int i = 0; i < CL_NODES; i++)
            ok += sh(out, sizeof(out), "redis-cli -p %d cluster info | grep -c 'cluster_state:ok'", cl_port[i]) == 0;
        if (ok == CL_NODES)
            return 0;
        usleep(10000);
    }
    fprintf(stderr, "test_store: the cluster did not come up\n");
    return -1;
}

static int cl_group_teardown(void **state)
{
    VSR_UNUSED(state);
    cl_cleanup();
    return 0;
}

static vsr_store_t *cluster_store_at(const char *prefix, const char *const *addrs, size_t n)
{
    vsr_store_config_t cfg;
    vsr_store_config_init(&cfg);
    cfg.backend = VSR_STORE_REDIS;
    cfg.cluster = 1;
    cfg.cluster_addresses = addrs;
    cfg.n_cluster_addresses = n;
    cfg.key_prefix = prefix;
    cfg.poll_interval_ms = 100;
    cfg.command_timeout_ms = 1000;
    vsr_buf_t err;
    vsr_buf_init(&err, 1024);
    vsr_store_t *s = vsr_store_open(&loop, &cfg, &err);
    if (!s)
        fprintf(stderr, "%.*s\n", (int)err.len, err.data);
    vsr_buf_free(&err);
    assert_non_null(s);
    return s;
}

static vsr_store_t *cluster_store(const char *prefix)
{
    char a0[32];
    snprintf(a0, sizeof(a0), "127.0.0.1:%d", cl_port[0]); /* one node: the others come from the map */
    const char *addrs[1] = {a0};
    return cluster_store_at(prefix, addrs, 1);
}

/* the node (0..2) that holds a raw key, or -1 (whoever owns its slot:
 * CLUSTER GETKEYSINSLOT answers during a migration too) */
static int holder(const char *rawkey)
{
    char out[64];
    int found = -1;
    for (int i = 0; i < CL_NODES; i++)
        if (cl_pid[i] > 0 &&
            sh(out, sizeof(out),
               "redis-cli -p %d cluster getkeysinslot $(redis-cli -p %d cluster keyslot '%s') 1000 | grep -cxF '%s'",
               cl_port[i], cl_port[i], rawkey, rawkey) == 0 &&
            !strcmp(out, "1"))
            found = i;
    return found;
}

static void test_cluster_spread(void **state)
{
    VSR_UNUSED(state);
    loop_open();
    vsr_store_t *s = cluster_store("tc:");
    wait_connected(s);
    int per_node[CL_NODES] = {0};
    for (int i = 0; i < 60; i++) {
        char k[16], v[16], raw[32];
        snprintf(k, sizeof(k), "key%d", i);
        snprintf(v, sizeof(v), "value%d", i);
        assert_int_equal(rput(s, k, v, 60000, NULL, "", "").status, VSR_OK);
        snprintf(raw, sizeof(raw), "tc:k:%s", k);
        int h = holder(raw);
        assert_true(h >= 0);
        per_node[h]++;
    }
    for (int i = 0; i < CL_NODES; i++)
        assert_true(per_node[i] > 0); /* every node holds some: the store wrote to all three */
    for (int i = 0; i < 60; i++) {
        char k[16], v[16];
        snprintf(k, sizeof(k), "key%d", i);
        snprintf(v, sizeof(v), "value%d", i);
        result_t r = rget(s, k);
        assert_int_equal(r.status, VSR_OK);
        assert_int_equal(r.vlen, strlen(v));
        assert_memory_equal(r.value, v, r.vlen);
    }
    /* the semantic index's stream is one key on one node; a search finds the value on another */
    float e[VSR_STORE_DIM];
    unit(e, 5);
    assert_int_equal(rput(s, "sem", "answer", 60000, e, "", "p").status, VSR_OK);
    result_t r = rsearch(s, e, "", "p", 0.9f);
    assert_int_equal(r.status, VSR_OK);
    assert_memory_equal(r.value, "answer", 6);
    close_store(s);
    loop_done();
}

/* Configured names are looked up off the loop; one that resolves to
 * nothing is skipped; a store closes with a lookup in flight. */
static void test_cluster_hostname(void **state)
{
    VSR_UNUSED(state);
    char host[256] = "", a1[320];
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *res = NULL;
    int loopback = gethostname(host, sizeof(host) - 1) == 0 && host[0] && getaddrinfo(host, NULL, &hints, &res) == 0 &&
                   res && ((struct sockaddr_in *)res->ai_addr)->sin_addr.s_addr == htonl(INADDR_LOOPBACK);
    if (res)
        freeaddrinfo(res);
    if (!loopback)
        skip(); /* no name of this machine resolves to 127.0.0.1 */
    snprintf(a1, sizeof(a1), "%s:%d", host, cl_port[1]);
    const char *addrs[2] = {"no-such-host.invalid:7000", a1};
    loop_open();
    vsr_store_t *s = cluster_store_at("tn:", addrs, 2);
    close_store(s); /* lookups in flight */
    s = cluster_store_at("tn:", addrs, 2);
    wait_connected(s);
    assert_int_equal(rput(s, "named", "v", 60000, NULL, "", "").status, VSR_OK);
    assert_int_equal(rget(s, "named").status, VSR_OK);
    close_store(s);
    loop_done();
}

/* A slot moves from one node to another while the store runs: ASK during
 * the migration (a new key goes to the importing node; a migrated key is
 * found there), then MOVED once the slot belongs to the new node. */
static void test_cluster_migration(void **state)
{
    VSR_UNUSED(state);
    char out[4096];
    loop_open();
    vsr_store_t *s = cluster_store("tm:");
    wait_connected(s);
    /* keys of one slot: the store's keys carry a hash tag */
    assert_int_equal(rput(s, "{m}old", "v-old", 60000, NULL, "", "").status, VSR_OK);
    int src = holder("tm:k:{m}old");
    assert_true(src >= 0);
    int dst = (src + 1) % CL_NODES;
    assert_int_equal(sh(out, sizeof(out), "redis-cli -p %d cluster keyslot 'tm:k:{m}old'", cl_port[src]), 0);
    int slot = atoi(out);
    char src_id[64], dst_id[64];
    assert_int_equal(sh(src_id, sizeof(src_id), "redis-cli -p %d cluster myid", cl_port[src]), 0);
    assert_int_equal(sh(dst_id, sizeof(dst_id), "redis-cli -p %d cluster myid", cl_port[dst]), 0);
    assert_int_equal(sh(out, sizeof(out), "redis-cli -p %d cluster setslot %d importing %s", cl_port[dst], slot, src_id), 0);
    assert_string_equal(out, "OK");
    assert_int_equal(sh(out, sizeof(out), "redis-cli -p %d cluster setslot %d migrating %s", cl_port[src], slot, dst_id), 0);
    assert_string_equal(out, "OK");
    /* a key the migrating node lacks: ASK to the importing node */
    assert_int_equal(rput(s, "{m}new", "v-new", 60000, NULL, "", "").status, VSR_OK);
    assert_int_equal(holder("tm:k:{m}new"), dst);
    result_t r = rget(s, "{m}new");
    assert_int_equal(r.status, VSR_OK);
    assert_memory_equal(r.value, "v-new", 5);
    /* the old key still on the source is served there */
    assert_int_equal(rget(s, "{m}old").status, VSR_OK);
    /* moved: ASK again, to where it went */
    assert_int_equal(sh(out, sizeof(out), "redis-cli -p %d migrate 127.0.0.1 %d '' 0 5000 keys 'tm:k:{m}old'",
                        cl_port[src], cl_port[dst]), 0);
    assert_string_equal(out, "OK");
    assert_int_equal(holder("tm:k:{m}old"), dst);
    r = rget(s, "{m}old");
    assert_int_equal(r.status, VSR_OK);
    assert_memory_equal(r.value, "v-old", 5);
    /* the slot is the destination's: MOVED, and the store's map follows */
    for (int i = 0; i < CL_NODES; i++) {
        assert_int_equal(sh(out, sizeof(out), "redis-cli -p %d cluster setslot %d node %s", cl_port[i], slot, dst_id), 0);
        assert_string_equal(out, "OK");
    }
    for (int k = 0; k < 3; k++) {
        r = rget(s, "{m}old");
        assert_int_equal(r.status, VSR_OK);
        assert_memory_equal(r.value, "v-old", 5);
    }
    assert_int_equal(rput(s, "{m}third", "v3", 60000, NULL, "", "").status, VSR_OK);
    assert_int_equal(holder("tm:k:{m}third"), dst);
    vsr_store_stats_t st;
    vsr_store_stats(s, &st);
    assert_int_equal(st.errors, 0);
    close_store(s);
    loop_done();
}

static _Atomic int replay_written, replay_failed;

static void replay_count(void *ud, const char *result)
{
    VSR_UNUSED(ud);
    if (!strcmp(result, "written"))
        replay_written++;
    else if (!strcmp(result, "failed"))
        replay_failed++;
}

/* router replay records on the cluster: every key in the prefix's slot */
static void test_cluster_replay(void **state)
{
    VSR_UNUSED(state);
    char a0[32];
    snprintf(a0, sizeof(a0), "127.0.0.1:%d", cl_port[1]);
    const char *addrs[1] = {a0};
    vsr_replay_config_t cfg;
    vsr_replay_config_init(&cfg);
    cfg.backend = VSR_STORE_REDIS;
    cfg.cluster = 1;
    cfg.cluster_addresses = addrs;
    cfg.n_cluster_addresses = 1;
    cfg.key_prefix = "trp:";
    cfg.timeout_ms = 1000;
    cfg.count = replay_count;
    vsr_buf_t err;
    vsr_buf_init(&err, 256);
    vsr_replay_store_t *st = vsr_replay_open(&cfg, &err);
    assert_non_null(st);
    for (int i = 0; i < 3; i++) {
        char id[8];
        snprintf(id, sizeof(id), "r%d", i);
        assert_int_equal(vsr_replay_put(st, S(id), (uint64_t)time(NULL) * 1000 + (uint64_t)i, S("{\"s\":1}"), S("{\"r\":1}"), 100),
                         VSR_OK);
    }
    for (int i = 0; i < 500 && replay_written + replay_failed < 3; i++)
        usleep(10000);
    assert_int_equal(replay_written, 3);
    /* one slot, on the node that owns "trp:" */
    int h = holder("{trp:}index");
    assert_true(h >= 0);
    assert_int_equal(holder("{trp:}r:r1"), h);
    vsr_buf_t b;
    vsr_buf_init(&b, 256);
    assert_int_equal(vsr_replay_get(st, S("r1"), &b), VSR_OK);
    assert_memory_equal(b.data, "{\"r\":1}", 7);
    vsr_buf_reset(&b);
    uint64_t total = 0;
    assert_int_equal(vsr_replay_list(st, 10, &b, &total), VSR_OK);
    assert_int_equal(total, 3);
    assert_int_equal(vsr_replay_delete(st, S("r0")), VSR_OK);
    assert_int_equal(vsr_replay_get(st, S("r0"), &b), VSR_ERR_NOT_FOUND);
    vsr_buf_free(&b);
    vsr_buf_free(&err);
    vsr_replay_unref(st);
}

/* A node stops answering (SIGSTOP): its keys time out and only its
 * connection is dropped; the other nodes' operations all succeed meanwhile. */
static void test_cluster_node_stalled(void **state)
{
    VSR_UNUSED(state);
    loop_open();
    vsr_store_t *s = cluster_store("ts:");
    wait_connected(s);
    char k[16], raw[32];
    int on[CL_NODES] = {-1, -1, -1}, found = 0;
    for (int i = 0; i < 200 && found < CL_NODES; i++) {
        snprintf(k, sizeof(k), "key%d", i);
        assert_int_equal(rput(s, k, "v", 60000, NULL, "", "").status, VSR_OK);
        snprintf(raw, sizeof(raw), "ts:k:%s", k);
        int h = holder(raw);
        if (h >= 0 && on[h] < 0) {
            on[h] = i;
            found++;
        }
    }
    assert_int_equal(found, CL_NODES);
    int victim = 1, other = 2;
    kill(cl_pid[victim], SIGSTOP);
    /* the stalled node's get waits for the timeout (1 s); the others' go on meanwhile */
    result_t stalled = {0}, live = {0}, slow = {0};
    snprintf(k, sizeof(k), "key%d", on[victim]);
    assert_int_equal(vsr_store_get(s, S(k), on_done, &stalled, NULL), VSR_AGAIN);
    uint64_t t0 = vsr_now_ms();
    for (int round = 0; round < 4; round++) {
        snprintf(k, sizeof(k), "key%d", on[0]);
        memset(&live, 0, sizeof(live));
        assert_int_equal(vsr_store_get(s, S(k), on_done, &live, NULL), VSR_AGAIN);
        run_until(&live.calls, 2000);
        assert_int_equal(live.status, VSR_OK);
        run_until(NULL, 200);
    }
    /* another node is slow (not past its own deadline) while the first
     * one's deadline passes: only the first one's connection goes */
    run_until(NULL, 900 - VSR_MIN(900, vsr_now_ms() - t0));
    kill(cl_pid[other], SIGSTOP);
    snprintf(k, sizeof(k), "key%d", on[other]);
    assert_int_equal(vsr_store_get(s, S(k), on_done, &slow, NULL), VSR_AGAIN);
    run_until(&stalled.calls, 3000);
    assert_int_equal(stalled.status, VSR_ERR_IO);
    assert_int_equal(slow.calls, 0);
    vsr_store_stats_t st;
    vsr_store_stats(s, &st);
    assert_int_equal(st.timeouts, 1);
    kill(cl_pid[other], SIGCONT);
    run_until(&slow.calls, 2000);
    assert_int_equal(slow.status, VSR_OK);
    kill(cl_pid[victim], SIGCONT);
    for (int node = 0; node < CL_NODES; node++) { /* the node is back: all served again */
        snprintf(k, sizeof(k), "key%d", on[node]);
        result_t r = {0};
        for (int tries = 0; tries < 50; tries++) {
            r = rget(s, k);
            if (r.status == VSR_OK)
                break;
            run_until(NULL, 100);
        }
        assert_int_equal(r.status, VSR_OK);
    }
    close_store(s);
    loop_done();
}

/* A node dies: keys on the others are still served; its keys are misses
 * (an error the caller treats as one), at once, without hanging. */
static void test_cluster_node_killed(void **state)
{
    VSR_UNUSED(state);
    loop_open();
    vsr_store_t *s = cluster_store("tk:");
    wait_connected(s);
    char k[16], raw[32];
    int on[CL_NODES][2], n[CL_NODES] = {0};
    for (int i = 0; i < 200 && (n[0] < 2 || n[1] < 2 || n[2] < 2); i++) {
        snprintf(k, sizeof(k), "key%d", i);
        assert_int_equal(rput(s, k, "v", 60000, NULL, "", "").status, VSR_OK);
        snprintf(raw, sizeof(raw), "tk:k:%s", k);
        int h = holder(raw);
        if (h >= 0 && n[h] < 2)
            on[h][n[h]++] = i;
    }
    int victim = 2;
    cl_kill(victim);
    run_until(NULL, 100);
    for (int round = 0; round < 3; round++)
        for (int node = 0; node < CL_NODES; node++)
            for (int j = 0; j < 2; j++) {
                snprintf(k, sizeof(k), "key%d", on[node][j]);
                uint64_t t0 = vsr_now_ms();
                result_t r = rget(s, k);
                assert_true(vsr_now_ms() - t0 < 1500);
                if (node == victim)
                    assert_int_not_equal(r.status, VSR_OK);
                else
                    assert_int_equal(r.status, VSR_OK);
            }
    /* puts to the live nodes go on */
    snprintf(k, sizeof(k), "key%d", on[0][0]);
    assert_int_equal(rput(s, k, "v2", 60000, NULL, "", "").status, VSR_OK);
    close_store(s);
    loop_done();
}

int main(void)
{
    const struct CMUnitTest mem[] = {
        cmocka_unit_test(test_mem_basic),       cmocka_unit_test(test_mem_ttl),
        cmocka_unit_test(test_mem_lru_count),   cmocka_unit_test(test_mem_lru_bytes),
        cmocka_unit_test(test_mem_fifo),        cmocka_unit_test(test_mem_lfu),
        cmocka_unit_test(test_mem_policy_model),
        cmocka_unit_test(test_mem_search_loop), cmocka_unit_test(test_mem_search_blas),
        cmocka_unit_test(test_mem_search_int8), cmocka_unit_test(test_mem_int8_agrees),
        cmocka_unit_test(test_mem_index_bound), cmocka_unit_test(test_config_errors),
        cmocka_unit_test(test_cluster_slot),
    };
    const struct CMUnitTest redis[] = {
        cmocka_unit_test_setup(test_redis_roundtrip, redis_test_setup),
        cmocka_unit_test_setup(test_redis_ttl, redis_test_setup),
        cmocka_unit_test_setup(test_redis_eviction, redis_test_setup),
        cmocka_unit_test_setup(test_redis_replicas, redis_test_setup),
        cmocka_unit_test_setup(test_redis_index_bound, redis_test_setup),
        cmocka_unit_test_setup(test_redis_auth, redis_test_setup),
        cmocka_unit_test_setup(test_redis_down, redis_test_setup),
        cmocka_unit_test_setup(test_redis_hostname, redis_test_setup),
    };
    const struct CMUnitTest cluster[] = {
        cmocka_unit_test(test_cluster_spread),
        cmocka_unit_test(test_cluster_migration),
        cmocka_unit_test(test_cluster_hostname),
        cmocka_unit_test(test_cluster_replay),
        cmocka_unit_test(test_cluster_node_stalled),
        cmocka_unit_test(test_cluster_node_killed), /* last: it kills a node */
    };
    int fails = cmocka_run_group_tests_name("store_memory", mem, NULL, NULL);
    fails += cmocka_run_group_tests_name("store_redis", redis, redis_group_setup, redis_group_teardown);
    fails += cmocka_run_group_tests_name("store_redis_cluster", cluster, cl_group_setup, cl_group_teardown);
    return fails;
}
