/* test_rag.c — the rag plugin's retrieval (src/routing/rag_retrieve.c) with fake
 * ports: an answer at once or later, a hybrid's sequential fallback and
 * parallel preference, a late answer, a cancelled retrieval (done never
 * comes, nothing leaks), the result cache (hit, TTL, scope per plugin). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "routing/routing-int.h"

#define MAX_CALLS 8

typedef struct {
    vsr_graph_call_done_fn done;
    void *ud;
    int backend;
    int cancelled, answered;
    char path[128];
    char body[512];
} call_t;

typedef struct {
    int later;                      /* answer later (else at once) */
    int status[2];                  /* per backend (0 primary, 1 fallback): HTTP status to answer */
    const char *answer[2];
    int n_calls;
    call_t calls[MAX_CALLS];
    uint64_t now;
} fake_t;

static fake_t F;
static int done_count;

static void on_done(void *ud)
{
    VSR_UNUSED(ud);
    done_count++;
}

static void answer(int i)
{
    assert_true(i < F.n_calls);
    int b = F.calls[i].backend;
    F.calls[i].answered = 1;
    const char *a = F.answer[b] ? F.answer[b] : "";
    F.calls[i].done(F.calls[i].ud, VSR_OK, F.status[b], vsr_slice(a, strlen(a)), 1);
}

static void *fake_model_call(void *ud, const vsr_graph_call_t *call, uint64_t deadline_ms, vsr_graph_call_done_fn done,
                             void *done_ud)
{
    VSR_UNUSED(ud);
    VSR_UNUSED(deadline_ms);
    assert_true(F.n_calls < MAX_CALLS);
    int i = F.n_calls++;
    F.calls[i].done = done;
    F.calls[i].ud = done_ud;
    snprintf(F.calls[i].path, sizeof(F.calls[i].path), "%.*s", (int)call->path.len, call->path.p);
    snprintf(F.calls[i].body, sizeof(F.calls[i].body), "%.*s", (int)call->body.len, call->body.p);
    F.calls[i].backend = strstr(F.calls[i].path, "fallback") != NULL;
    if (!F.later) {
        answer(i);
        return NULL;
    }
    return &F.calls[i];
}

static void fake_model_cancel(void *ud, void *handle)
{
    VSR_UNUSED(ud);
    ((call_t *)handle)->cancelled = 1;
}

static uint64_t fake_now(void *ud)
{
    VSR_UNUSED(ud);
    return F.now;
}

static const vsr_ports_t PORTS = {.model_call = fake_model_call, .model_cancel = fake_model_cancel, .now_ms = fake_now};

static const char *ES_HITS = "{\"hits\":{\"hits\":[{\"_source\":{\"content\":\"one\"}},{\"_source\":{\"text\":\"two\"}}]}}";
static const char *ES_NONE = "{\"hits\":{\"hits\":[]}}";

static vsr_config_t *load(const char *plugin_conf)
{
    char yaml[2048];
    snprintf(yaml, sizeof(yaml),
             "version: v0.3\n"
             "listeners: [{name: l, address: 127.0.0.1, port: 8899}]\n"
             "providers:\n"
             "  defaults: {model: m}\n"
             "  models: [{name: m, backend_refs: [{endpoint: \"127.0.0.1:9\"}]}]\n"
             "routing:\n"
             "  signals: {keywords: [{name: k, keywords: [x]}]}\n"
             "  decisions:\n"
             "    - name: d\n"
             "      rules: {type: keyword, name: k}\n"
             "      modelRefs: [{model: m}]\n"
             "      plugins: [{type: rag, configuration: %s}]\n",
             plugin_conf);
    vsr_buf_t err;
    vsr_buf_init(&err, 0);
    vsr_config_t *c = NULL;
    int rc = vsr_config_load_string("c.yaml", yaml, strlen(yaml), &c, &err);
    if (rc != VSR_OK)
        fprintf(stderr, "%.*s\n", (int)err.len, err.data);
    assert_int_equal(rc, VSR_OK);
    vsr_buf_free(&err);
    return c;
}

static const vsr_plugin_rag_conf_t *rag_of(const vsr_config_t *c)
{
    return c->recipes[0].decisions[0].plugins[0].u.rag;
}

static const vsr__rag_vars_t VARS = {{"d", 1}, {"", 0}, {"", 0}};

static void *start(vsr_pool_t *pool, const vsr_plugin_rag_conf_t *conf, const char *query, vsr_rag_result_t *out)
{
    return vsr__rag_start(pool, conf, vsr_slice_cstr(query), &VARS, &PORTS, NULL, F.now + 60000, out, on_done, NULL);
}

static int setup(void **state)
{
    VSR_UNUSED(state);
    memset(&F, 0, sizeof(F));
    F.now = 1000;
    F.status[0] = F.status[1] = 200;
    F.answer[0] = F.answer[1] = ES_HITS;
    done_count = 0;
    vsr__rag_cache_clear();
    return 0;
}

static void test_answer_at_once_and_later(void **state)
{
    VSR_UNUSED(state);
    vsr_config_t *c = load("{backend: external_api, top_k: 2, backend_config: {endpoint: 'http://127.0.0.1:9/i/_search',"
                           " request_format: elasticsearch}}");
    assert_int_equal(c->n_plugin_models, 1); /* the endpoint is a cluster of the snapshot */
    vsr_pool_t pool;
    vsr_pool_init(&pool);
    vsr_rag_result_t out;
    assert_null(start(&pool, rag_of(c), "q \"1\"", &out)); /* answered at once: no handle */
    assert_int_equal(done_count, 1);
    assert_int_equal(out.status, VSR_RAG_OK);
    assert_string_equal(F.calls[0].path, "/i/_search");
    assert_string_equal(F.calls[0].body, "{\"query\":{\"match\":{\"content\":\"q \\\"1\\\"\"}},\"size\":2}");
    assert_int_equal(out.context.len, strlen("one\n\n---\n\ntwo"));
    assert_memory_equal(out.context.p, "one\n\n---\n\ntwo", out.context.len);

    F.later = 1;
    void *h = start(&pool, rag_of(c), "q", &out);
    assert_non_null(h);
    assert_int_equal(done_count, 1);
    F.answer[0] = ES_NONE; /* no hits: a failure for Elasticsearch */
    answer(1);
    assert_int_equal(done_count, 2);
    assert_int_equal(out.status, VSR_RAG_FAILED);
    assert_memory_equal(out.error.p, "external_api: no content found in Elasticsearch hits", out.error.len);
    vsr_pool_free(&pool);
    vsr_config_free(c);
}

static void test_late_answer_and_cancel(void **state)
{
    VSR_UNUSED(state);
    vsr_config_t *c = load("{backend: external_api, backend_config: {endpoint: 'http://127.0.0.1:9/s',"
                           " request_format: elasticsearch, timeout_seconds: 2}}");
    vsr_pool_t pool;
    vsr_pool_init(&pool);
    vsr_rag_result_t out;
    F.later = 1;
    assert_non_null(start(&pool, rag_of(c), "q", &out));
    F.now += 2001; /* past timeout_seconds */
    answer(0);
    assert_int_equal(out.status, VSR_RAG_FAILED);
    assert_memory_equal(out.error.p, "external_api: no answer in time", out.error.len);
    /* cancelled: the call is cancelled, done never comes */
    void *h = start(&pool, rag_of(c), "q", &out);
    vsr__rag_cancel(h);
    assert_int_equal(F.calls[1].cancelled, 1);
    assert_int_equal(done_count, 1);
    vsr_pool_free(&pool);
    vsr_config_free(c);
}

static void test_hybrid(void **state)
{
    VSR_UNUSED(state);
    const char *doc = "{backend: hybrid, backend_config: {primary: external_api, strategy: %s,"
                      " primary_config: {endpoint: 'http://127.0.0.1:9/primary', request_format: elasticsearch},"
                      " fallback: external_api,"
                      " fallback_config: {endpoint: 'http://127.0.0.1:9/fallback', request_format: custom,"
                      " request_template: '{\"q\":\"${user_content}\"}'}}}";
    char conf[1024];
    snprintf(conf, sizeof(conf), doc, "sequential");
    vsr_config_t *c = load(conf);
    assert_int_equal(c->n_plugin_models, 2);
    vsr_pool_t pool;
    vsr_pool_init(&pool);
    vsr_rag_result_t out;
    /* sequential: the fallback only when the primary fails */
    start(&pool, rag_of(c), "q", &out);
    assert_int_equal(F.n_calls, 1);
    assert_int_equal(out.status, VSR_RAG_OK);
    F.status[0] = 503;
    F.answer[1] = "{\"content\":\"from the fallback\"}";
    start(&pool, rag_of(c), "q", &out);
    assert_int_equal(F.n_calls, 3);
    assert_string_equal(F.calls[2].body, "{\"q\":\"q\"}");
    assert_int_equal(out.status, VSR_RAG_OK);
    assert_memory_equal(out.context.p, "from the fallback", out.context.len);
    F.status[1] = 500; /* both fail */
    start(&pool, rag_of(c), "q", &out);
    assert_int_equal(out.status, VSR_RAG_FAILED);
    assert_memory_equal(out.error.p, "both backends failed: primary=external_api: API returned status 503, "
                                     "fallback=external_api: API returned status 500", out.error.len);
    vsr_config_free(c);

    /* parallel: both asked at once, the primary preferred whichever answers first */
    snprintf(conf, sizeof(conf), doc, "parallel");
    c = load(conf);
    F.n_calls = 0;
    F.status[0] = F.status[1] = 200;
    F.later = 1;
    int before = done_count;
    void *h = start(&pool, rag_of(c), "q", &out);
    assert_non_null(h);
    assert_int_equal(F.n_calls, 2);
    answer(1);
    assert_int_equal(done_count, before); /* waits for the primary */
    answer(0);
    assert_int_equal(done_count, before + 1);
    assert_memory_equal(out.context.p, "one\n\n---\n\ntwo", out.context.len);
    /* cancelled with both in flight */
    h = start(&pool, rag_of(c), "q", &out);
    answer(2);
    vsr__rag_cancel(h);
    assert_int_equal(F.calls[3].cancelled, 1);
    assert_int_equal(done_count, before + 1);
    vsr_pool_free(&pool);
    vsr_config_free(c);
}

static void test_cache(void **state)
{
    VSR_UNUSED(state);
    const char *fmt = "{backend: external_api, cache_results: true, cache_ttl_seconds: 10,"
                      " backend_config: {endpoint: 'http://127.0.0.1:9/%s', request_format: elasticsearch}}";
    char conf[512];
    snprintf(conf, sizeof(conf), fmt, "a");
    vsr_config_t *a = load(conf);
    snprintf(conf, sizeof(conf), fmt, "b");
    vsr_config_t *b = load(conf);
    vsr_pool_t pool;
    vsr_pool_init(&pool);
    vsr_rag_result_t out;
    start(&pool, rag_of(a), "q", &out);
    assert_int_equal(F.n_calls, 1);
    assert_int_equal(out.cached, 0);
    assert_null(start(&pool, rag_of(a), "q", &out)); /* a hit: answered at once, no call */
    assert_int_equal(F.n_calls, 1);
    assert_int_equal(out.cached, 1);
    assert_memory_equal(out.context.p, "one\n\n---\n\ntwo", out.context.len);
    start(&pool, rag_of(a), "other", &out); /* another query */
    assert_int_equal(F.n_calls, 2);
    start(&pool, rag_of(b), "q", &out); /* another backend: its own entry */
    assert_int_equal(F.n_calls, 3);
    assert_int_equal(out.cached, 0);
    F.now += 10001; /* past the TTL */
    start(&pool, rag_of(a), "q", &out);
    assert_int_equal(F.n_calls, 4);
    assert_int_equal(out.cached, 0);
    vsr_pool_free(&pool);
    vsr_config_free(a);
    vsr_config_free(b);
    vsr__rag_cache_clear();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_answer_at_once_and_later, setup),
        cmocka_unit_test_setup(test_late_answer_and_cancel, setup),
        cmocka_unit_test_setup(test_hybrid, setup),
        cmocka_unit_test_setup(test_cache, setup),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
