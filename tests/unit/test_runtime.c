/* test_runtime.c — the model runtime's pieces without sockets: the bundle
 * request parser, the embedding cache (LRU, both bounds, threads), the hash
 * test embedder, the base64 writer and the compute pool's batches. */
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "runtime/runtime-int.h"
#include "runtime/runtime.h"

static int parse(const char *body, size_t max, vsr_pool_t *pool, vsr_rt_bundle_t *b, const char **code)
{
    const char *msg = NULL;
    int st = vsr_rt_bundle_parse(body, strlen(body), max, pool, b, code, &msg);
    if (st != VSR_OK)
        assert_non_null(msg);
    return st;
}

static void test_bundle_tasks(void **state)
{
    (void)state;
    vsr_pool_t pool;
    vsr_pool_init(&pool);
    vsr_rt_bundle_t b;
    const char *code;
    const char *body = "{\"tasks\":[{\"id\":\"q\",\"embed\":{\"input\":[\"a\\u00e9\",\"b\"],\"model\":\"m\"}},"
                       "{\"id\":\"c\",\"classify\":{}},{\"id\":\"x\",\"translate\":{}},{\"id\":\"n\"},"
                       "{\"id\":\"k\",\"classify\":{\"model\":\"pii\",\"text\":\"a\\u00e9\",\"x\":1}},"
                       "{\"id\":\"r\",\"rerank\":{}},{\"id\":\"ke\",\"classify\":{\"model\":\"pii\",\"text\":\"\"}},"
                       "{\"id\":\"two\",\"embed\":{\"input\":\"x\"},\"classify\":{}},"
                       "{\"id\":\"e\",\"embed\":{\"input\":[\"\"]}}],\"options\":{\"deadline_ms\":250.7}}";
    assert_int_equal(parse(body, 64, &pool, &b, &code), VSR_OK);
    assert_int_equal(b.n_tasks, 9);
    assert_int_equal(b.deadline_ms, 250);
    assert_int_equal(b.tasks[0].kind, VSR_RT_TASK_EMBED);
    assert_true(vsr_slice_eq_cstr(b.tasks[0].id, "q"));
    assert_true(vsr_slice_eq_cstr(b.tasks[0].model, "m"));
    assert_int_equal(b.tasks[0].n_inputs, 2);
    assert_true(vsr_slice_eq_cstr(b.tasks[0].inputs[0], "a\xc3\xa9"));
    assert_int_equal(b.tasks[1].kind, VSR_RT_TASK_INVALID); /* classify without a model */
    assert_true(vsr_slice_eq_cstr(b.tasks[1].type, "classify"));
    assert_non_null(strstr(b.tasks[1].error, "model"));
    assert_int_equal(b.tasks[2].kind, VSR_RT_TASK_UNKNOWN);
    assert_int_equal(b.tasks[3].kind, VSR_RT_TASK_INVALID);
    assert_int_equal(b.tasks[4].kind, VSR_RT_TASK_CLASSIFY);
    assert_true(vsr_slice_eq_cstr(b.tasks[4].model, "pii"));
    assert_int_equal(b.tasks[4].n_inputs, 1);
    assert_true(vsr_slice_eq_cstr(b.tasks[4].inputs[0], "a\xc3\xa9"));
    assert_true(vsr_slice_eq_cstr(b.tasks[4].payload, "{\"model\":\"pii\",\"text\":\"a\\u00e9\",\"x\":1}"));
    assert_int_equal(b.tasks[5].kind, VSR_RT_TASK_UNSUPPORTED);
    assert_int_equal(b.tasks[6].kind, VSR_RT_TASK_INVALID);
    assert_non_null(strstr(b.tasks[6].error, "empty"));
    assert_int_equal(b.tasks[7].kind, VSR_RT_TASK_INVALID);
    assert_int_equal(b.tasks[8].kind, VSR_RT_TASK_INVALID);
    assert_non_null(strstr(b.tasks[8].error, "empty"));
    /* no options: no deadline; a lone string input */
    assert_int_equal(parse("{\"tasks\":[{\"id\":\"a\",\"embed\":{\"input\":\"x\"}}]}", 64, &pool, &b, &code), VSR_OK);
    assert_int_equal(b.deadline_ms, -1);
    assert_null(b.tasks[0].model.p);
    vsr_pool_free(&pool);
}

static void test_bundle_request_errors(void **state)
{
    (void)state;
    static const struct {
        const char *body;
        int status;
        const char *code;
    } cases[] = {
        {"", 400, "invalid_json"},
        {"{\"tasks\":[", 400, "invalid_json"},
        {"{\"tasks\":[],\"tasks\":[]}", 400, "invalid_json"},
        {"[]", 400, "invalid_request"},
        {"{}", 400, "invalid_request"},
        {"{\"tasks\":[]}", 400, "invalid_request"},
        {"{\"tasks\":[1]}", 400, "invalid_request"},
        {"{\"tasks\":[{\"embed\":{}}]}", 400, "invalid_request"},
        {"{\"tasks\":[{\"id\":7}]}", 400, "invalid_request"},
        {"{\"tasks\":[{\"id\":\"\"}]}", 400, "invalid_request"},
        {"{\"tasks\":[{\"id\":\"a\"},{\"id\":\"a\"}]}", 400, "invalid_request"},
        {"{\"tasks\":[{\"id\":\"a\"}],\"options\":3}", 400, "invalid_request"},
        {"{\"tasks\":[{\"id\":\"a\"}],\"options\":{\"deadline_ms\":\"5\"}}", 400, "invalid_request"},
        {"{\"tasks\":[{\"id\":\"a\"}],\"options\":{\"deadline_ms\":-1}}", 422, "invalid_input"},
        {"{\"tasks\":[{\"id\":\"a\"},{\"id\":\"b\"},{\"id\":\"c\"}]}", 413, "too_many_tasks"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        vsr_pool_t pool;
        vsr_pool_init(&pool);
        vsr_rt_bundle_t b;
        const char *code = NULL;
        int st = parse(cases[i].body, 2, &pool, &b, &code);
        if (st != cases[i].status || strcmp(code, cases[i].code) != 0)
            fail_msg("case %zu (%s): got %d %s", i, cases[i].body, st, code ? code : "-");
        assert_int_equal(b.n_tasks, 0);
        vsr_pool_free(&pool);
    }
    /* 2048 inputs in a bundle's embed tasks together, not more */
    {
        vsr_buf_t big;
        vsr_buf_init(&big, 0);
        for (int extra = 0; extra < 2; extra++) {
            vsr_buf_reset(&big);
            vsr_buf_append_cstr(&big, "{\"tasks\":[");
            for (int t = 0; t < 2; t++) {
                vsr_buf_printf(&big, "%s{\"id\":\"t%d\",\"embed\":{\"input\":[", t ? "," : "", t);
                for (int i = 0; i < 1024 + extra * t; i++)
                    vsr_buf_append_cstr(&big, i ? ",\"x\"" : "\"x\"");
                vsr_buf_append_cstr(&big, "]}}");
            }
            vsr_buf_append_cstr(&big, "]}");
            vsr_buf_append(&big, "", 1);
            vsr_pool_t pool;
            vsr_pool_init(&pool);
            vsr_rt_bundle_t b;
            const char *code = NULL;
            int st = parse(big.data, 2, &pool, &b, &code);
            if (extra) {
                assert_int_equal(st, 413);
                assert_string_equal(code, "too_many_inputs");
            } else {
                assert_int_equal(st, VSR_OK);
            }
            vsr_pool_free(&pool);
        }
        vsr_buf_free(&big);
    }
    /* an id of 256 bytes is fine, 257 is not */
    char body[700];
    char id[258];
    memset(id, 'i', 257);
    id[257] = '\0';
    vsr_pool_t pool;
    vsr_pool_init(&pool);
    vsr_rt_bundle_t b;
    const char *code;
    snprintf(body, sizeof body, "{\"tasks\":[{\"id\":\"%s\"}]}", id);
    assert_int_equal(parse(body, 2, &pool, &b, &code), 400);
    id[256] = '\0';
    snprintf(body, sizeof body, "{\"tasks\":[{\"id\":\"%s\"}]}", id);
    assert_int_equal(parse(body, 2, &pool, &b, &code), VSR_OK);
    vsr_pool_free(&pool);
}

static void test_cache_lru_and_bounds(void **state)
{
    (void)state;
    assert_null(vsr_emb_cache_new(0, 1000));
    assert_null(vsr_emb_cache_new(10, 0));
    float v[4] = {1, 2, 3, 4}, out[4];
    vsr_emb_cache_t *c = vsr_emb_cache_new(2, 1 << 20);
    vsr_slice_t m = VSR_SLICE_LIT("m"), m2 = VSR_SLICE_LIT("m2");
    assert_int_equal(vsr_emb_cache_get(c, m, VSR_SLICE_LIT("a"), out, 4), 0);
    vsr_emb_cache_put(c, m, VSR_SLICE_LIT("a"), v, 4);
    v[0] = 9;
    vsr_emb_cache_put(c, m, VSR_SLICE_LIT("b"), v, 4);
    assert_int_equal(vsr_emb_cache_get(c, m, VSR_SLICE_LIT("a"), out, 4), 1); /* a is now the most recent */
    assert_true(out[0] == 1 && out[3] == 4);
    assert_int_equal(vsr_emb_cache_get(c, m2, VSR_SLICE_LIT("a"), out, 4), 0); /* keyed by model too */
    assert_int_equal(vsr_emb_cache_get(c, m, VSR_SLICE_LIT("ab"), out, 4), 0);
    vsr_emb_cache_put(c, m, VSR_SLICE_LIT("c"), v, 4); /* evicts b */
    assert_int_equal(vsr_emb_cache_get(c, m, VSR_SLICE_LIT("b"), out, 4), 0);
    assert_int_equal(vsr_emb_cache_get(c, m, VSR_SLICE_LIT("c"), out, 4), 1);
    vsr_emb_cache_stats_t st;
    vsr_emb_cache_stats(c, &st);
    assert_int_equal(st.entries, 2);
    assert_int_equal(st.evictions, 1);
    assert_int_equal(st.hits, 2);
    assert_int_equal(st.misses, 4);
    vsr_emb_cache_free(c);

    /* the byte bound: room for about three 64-float entries */
    float big[64] = {0};
    c = vsr_emb_cache_new(100, 3 * (64 * 4 + 100));
    char k[8];
    for (int i = 0; i < 10; i++) {
        snprintf(k, sizeof k, "k%d", i);
        vsr_emb_cache_put(c, m, vsr_slice_cstr(k), big, 64);
    }
    vsr_emb_cache_stats(c, &st);
    assert_true(st.entries >= 1 && st.entries <= 3);
    assert_true(st.bytes <= 3 * (64 * 4 + 100));
    /* an entry bigger than the bound is not stored */
    float huge[1024] = {0};
    vsr_emb_cache_put(c, m, VSR_SLICE_LIT("huge"), huge, 1024);
    assert_int_equal(vsr_emb_cache_get(c, m, VSR_SLICE_LIT("huge"), huge, 1024), 0);
    vsr_emb_cache_free(c);
    /* a NULL cache misses and stores nothing */
    assert_int_equal(vsr_emb_cache_get(NULL, m, m, out, 4), 0);
    vsr_emb_cache_put(NULL, m, m, out, 4);
}

static void *hammer(void *arg)
{
    vsr_emb_cache_t *c = arg;
    float v[8], out[8];
    char k[16];
    for (int i = 0; i < 20000; i++) {
        snprintf(k, sizeof k, "t%d", i % 97);
        for (int d = 0; d < 8; d++)
            v[d] = (float)(i % 97);
        if (!vsr_emb_cache_get(c, VSR_SLICE_LIT("m"), vsr_slice_cstr(k), out, 8))
            vsr_emb_cache_put(c, VSR_SLICE_LIT("m"), vsr_slice_cstr(k), v, 8);
        else if (out[0] != (float)(i % 97) || out[7] != out[0])
            return (void *)1;
    }
    return NULL;
}

static void test_cache_threads(void **state)
{
    (void)state;
    vsr_emb_cache_t *c = vsr_emb_cache_new(50, 1 << 20);
    pthread_t t[4];
    for (int i = 0; i < 4; i++)
        pthread_create(&t[i], NULL, hammer, c);
    for (int i = 0; i < 4; i++) {
        void *r;
        pthread_join(t[i], &r);
        assert_null(r);
    }
    vsr_emb_cache_stats_t st;
    vsr_emb_cache_stats(c, &st);
    assert_true(st.entries <= 50);
    assert_int_equal(st.hits + st.misses, 80000);
    vsr_emb_cache_free(c);
}

static void test_hash_embedder(void **state)
{
    (void)state;
    vsr_embedder_t *e = vsr_embedder_hash_new();
    assert_int_equal(e->dim, 512);
    vsr_slice_t in[4] = {VSR_SLICE_LIT("Hello, World"), VSR_SLICE_LIT("hello world"), VSR_SLICE_LIT("   "),
                         VSR_SLICE_LIT("\xe6\x97\xa5\xe6\x9c\xac")};
    static float out[4 * 512];
    uint64_t tokens = 0;
    vsr_buf_t err;
    vsr_buf_init(&err, 256);
    assert_int_equal(e->ops->embed(e, in, 4, out, &tokens, &err), VSR_OK);
    assert_int_equal(tokens, 2 + 2 + 1 + 1);
    assert_memory_equal(out, out + 512, 512 * sizeof(float));
    for (int t = 0; t < 4; t++) {
        double ss = 0;
        for (int i = 0; i < 512; i++)
            ss += (double)out[t * 512 + i] * out[t * 512 + i];
        assert_true(fabs(ss - 1) < 1e-5);
    }
    vsr_slice_t empty = VSR_SLICE_LIT("");
    assert_int_equal(e->ops->embed(e, &empty, 1, out, NULL, &err), VSR_ERR_INVALID);
    assert_true(err.len > 0);
    vsr_buf_free(&err);
    vsr_embedder_free(e);
}

static void test_remote_refuses_bad_urls(void **state)
{
    (void)state;
    vsr_buf_t err;
    vsr_buf_init(&err, 256);
    assert_null(vsr_embedder_remote_new("https://x/v1", "m", NULL, 8, 100, &err));
    assert_non_null(strstr(err.data, "https"));
    vsr_buf_reset(&err);
    assert_null(vsr_embedder_remote_new("ftp://x", "m", NULL, 8, 100, &err));
    vsr_buf_reset(&err);
    assert_null(vsr_embedder_remote_new("http://u@x/v1", "m", NULL, 8, 100, &err));
    vsr_buf_reset(&err);
    assert_null(vsr_embedder_remote_new("http://x/v1", "", NULL, 8, 100, &err));
    vsr_buf_reset(&err);
    assert_null(vsr_embedder_remote_new("http://x/v1", "m", "sk-1\r\nx-injected: 1", 8, 100, &err));
    vsr_buf_reset(&err);
    /* a given dimension needs no probe: nothing is contacted here */
    vsr_embedder_t *e = vsr_embedder_remote_new("http://127.0.0.1:9/v1/", "m", "k", 8, 100, &err);
    assert_non_null(e);
    assert_int_equal(e->dim, 8);
    assert_string_equal(e->name, "m");
    vsr_embedder_free(e);
    vsr_buf_free(&err);
}

/* ---- the compute pool's batches ----
 * One thread, held busy by a blocker until every item is queued, so what it
 * takes together afterwards is decided by the queue alone. */
typedef struct {
    vsr_rt_work_t w;
    int id;
    int ran, done;
    int prepared_with;   /* the id of the first item of the batch that prepared it, 0: none */
    size_t batch_n;      /* that batch's size */
} pitem_t;

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_cv = PTHREAD_COND_INITIALIZER;
static int g_release, g_blocked;
static int g_order[64], g_n_order, g_n_done;

static void blocker_run(vsr_rt_work_t *w)
{
    (void)w;
    pthread_mutex_lock(&g_mu);
    g_blocked = 1;
    pthread_cond_broadcast(&g_cv);
    while (!g_release)
        pthread_cond_wait(&g_cv, &g_mu);
    pthread_mutex_unlock(&g_mu);
}

static void item_run(vsr_rt_work_t *w)
{
    pitem_t *it = (pitem_t *)w;
    it->ran = 1;
    g_order[g_n_order++] = it->id; /* one pool thread: no race */
}

static void item_prepare(vsr_rt_work_t **items, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        pitem_t *it = (pitem_t *)items[i];
        it->prepared_with = ((pitem_t *)items[0])->id;
        it->batch_n = n;
    }
}

static void item_done(vsr_rt_work_t *w)
{
    ((pitem_t *)w)->done = 1;
    g_n_done++;
}

static void test_pool_batches(void **state)
{
    (void)state;
    uv_loop_t loop;
    uv_loop_init(&loop);
    vsr_rt_pool_t *p = vsr__rt_pool_new(&loop, 1, 64, 4, 0);
    assert_non_null(p);
    static int key_a, key_b;
    pitem_t blocker = {.w = {.run = blocker_run, .done = item_done}, .id = 100};
    /* ids 1..9: A A B A(weight 3) A A A(expired) A A */
    pitem_t it[10];
    memset(it, 0, sizeof it);
    const void *keys[10] = {NULL, &key_a, &key_a, &key_b, &key_a, &key_a, &key_a, &key_a, &key_a, &key_a};
    for (int i = 1; i <= 9; i++) {
        it[i].id = i;
        it[i].w.run = item_run;
        it[i].w.done = item_done;
        it[i].w.prepare = item_prepare;
        it[i].w.batch_key = keys[i];
    }
    it[4].w.batch_weight = 3;
    it[7].w.deadline_us = 1; /* long past */
    vsr_rt_work_t *b = &blocker.w;
    assert_int_equal(vsr__rt_pool_submit(p, &b, 1), VSR_OK);
    pthread_mutex_lock(&g_mu);
    while (!g_blocked)
        pthread_cond_wait(&g_cv, &g_mu);
    pthread_mutex_unlock(&g_mu);
    vsr_rt_work_t *items[9];
    for (int i = 0; i < 9; i++)
        items[i] = &it[i + 1].w;
    assert_int_equal(vsr__rt_pool_submit(p, items, 9), VSR_OK);
    assert_int_equal(vsr__rt_pool_depth(p), 9);
    pthread_mutex_lock(&g_mu);
    g_release = 1;
    pthread_cond_broadcast(&g_cv);
    pthread_mutex_unlock(&g_mu);
    while (g_n_done < 10)
        uv_run(&loop, UV_RUN_ONCE);
    /* 1 takes 2 along; 4 (weight 3) does not fit beside them (5 in all) and
     * 3 is another key; the expired 7 is left for its own turn.  Then B
     * alone, then 4 with 5 (weight 4 in all), then 6 with 8 and 9; 7
     * expires. */
    int with[10] = {0, 1, 1, 0, 4, 4, 6, 0, 6, 6};
    size_t size[10] = {0, 2, 2, 0, 2, 2, 3, 0, 3, 3};
    for (int i = 1; i <= 9; i++) {
        assert_int_equal(it[i].prepared_with, with[i]);
        assert_int_equal(it[i].batch_n, size[i]);
    }
    assert_true(it[7].w.expired);
    assert_false(it[7].ran);
    int want[] = {1, 2, 3, 4, 5, 6, 8, 9};
    assert_int_equal(g_n_order, 8);
    for (int i = 0; i < 8; i++)
        assert_int_equal(g_order[i], want[i]);
    for (int i = 1; i <= 9; i++)
        assert_true(it[i].done);
    uint64_t batches, batched;
    vsr__rt_pool_batches(p, &batches, &batched);
    assert_int_equal(batches, 3);
    assert_int_equal(batched, 7);
    vsr__rt_pool_free(p);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(&loop), 0);
}

/* Two threads over batchable work: however they share it out (the share
 * depends on which is idle when), every item is run and done once, in
 * exactly one batch or alone. */
static int g_started;
static void share_run(vsr_rt_work_t *w)
{
    (void)w;
    pthread_mutex_lock(&g_mu);
    g_started++;
    pthread_cond_broadcast(&g_cv);
    pthread_mutex_unlock(&g_mu);
}

static void test_pool_two_threads_run_each_item_once(void **state)
{
    (void)state;
    uv_loop_t loop;
    uv_loop_init(&loop);
    vsr_rt_pool_t *p = vsr__rt_pool_new(&loop, 2, 64, 16, 0);
    assert_non_null(p);
    static int key;
    pitem_t it[8];
    memset(it, 0, sizeof it);
    vsr_rt_work_t *items[8];
    for (int i = 0; i < 8; i++) {
        it[i].id = i + 1;
        it[i].w.run = share_run;
        it[i].w.done = item_done;
        it[i].w.prepare = item_prepare;
        it[i].w.batch_key = &key;
        items[i] = &it[i].w;
    }
    g_n_done = 0;
    assert_int_equal(vsr__rt_pool_submit(p, items, 8), VSR_OK);
    while (g_n_done < 8)
        uv_run(&loop, UV_RUN_ONCE);
    size_t total = 0;
    for (int i = 0; i < 8; i++) {
        assert_true(it[i].done);
        if (it[i].prepared_with == it[i].id)
            total += it[i].batch_n;
        else if (it[i].prepared_with == 0)
            total++;
    }
    assert_int_equal(total, 8);
    assert_int_equal(g_started, 8);
    vsr__rt_pool_free(p);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(&loop), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bundle_tasks),
        cmocka_unit_test(test_bundle_request_errors),
        cmocka_unit_test(test_cache_lru_and_bounds),
        cmocka_unit_test(test_cache_threads),
        cmocka_unit_test(test_hash_embedder),
        cmocka_unit_test(test_remote_refuses_bad_urls),
        cmocka_unit_test(test_pool_batches),
        cmocka_unit_test(test_pool_two_threads_run_each_item_once),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
