/* test_session_cache.c — the routing core's side of the response cache with
 * fake ports: what it asks the store (key, scope, partition, embedding,
 * threshold), a hit answered at once or later, a miss going on to the model,
 * the answer stored only when it ended whole, and a client that leaves while
 * the lookup or the embedding is pending (the wait is cancelled, resume
 * never comes); the exact key over the whole request, and a client's TTL
 * under the configured one. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "routing/routing-int.h"

static const char *DOC_FMT =
    "version: v0.3\n"
    "listeners: [{name: l, address: 127.0.0.1, port: 8899}]\n"
    "providers:\n"
    "  defaults: {model: m}\n"
    "  models: [{name: m, backend_refs: [{endpoint: \"127.0.0.1:9\"}]}]\n"
    "routing:\n"
    "  signals: {keywords: [{name: k, keywords: [cacheme]}]}\n"
    "  decisions:\n"
    "    - name: d\n"
    "      rules: {type: keyword, name: k}\n"
    "      modelRefs: [{model: m}]\n"
    "      plugins: [{type: semantic-cache, configuration: {mode: %s, ttl_seconds: 7, request_controls: {enabled: true}}}]\n";

typedef struct {
    vsr_config_t *cfg;
    vsr_engine_t *engine;
} doc_t;

static void doc_init(doc_t *d, const char *mode)
{
    char yaml[2048];
    snprintf(yaml, sizeof(yaml), DOC_FMT, mode);
    vsr_buf_t err;
    vsr_buf_init(&err, 0);
    assert_int_equal(vsr_config_load_string("c.yaml", yaml, strlen(yaml), &d->cfg, &err), VSR_OK);
    d->engine = vsr_engine_new(d->cfg, 1, &err);
    assert_non_null(d->engine);
    vsr_buf_free(&err);
}

static void doc_free(doc_t *d)
{
    vsr_engine_unref(d->engine);
    vsr_config_free(d->cfg);
}

/* ---- fake ports ---- */

typedef struct {
    int later;                 /* lookups and embeddings answer later (else at once) */
    int hit;                   /* the lookup finds `value` */
    const char *value;
    int lookups, stores, cancels, embeds, rt_cancels, resumes;
    char key[128], partition[256], stored[4096];
    int exact, had_embedding;
    double threshold;
    uint64_t ttl;
    vsr_cache_done_fn done;
    void *done_ud;
    vsr_runtime_done_fn rt_done;
    void *rt_ud;
    int handle, rt_handle;
    int resumed_status;
} fake_t;

static void answer_lookup(fake_t *f)
{
    vsr_cache_done_fn done = f->done;
    f->done = NULL;
    done(f->done_ud, f->hit ? VSR_OK : VSR_ERR_NOT_FOUND, f->hit ? vsr_slice_cstr(f->value) : VSR_SLICE_NULL,
         f->hit ? 1.0 : 0.0);
}

static void *fake_lookup(void *ud, const vsr_cache_query_t *q, vsr_cache_done_fn done, void *done_ud)
{
    fake_t *f = ud;
    f->lookups++;
    snprintf(f->key, sizeof(f->key), "%.*s", (int)q->key.len, q->key.p);
    snprintf(f->partition, sizeof(f->partition), "%.*s", (int)q->partition.len, q->partition.p);
    f->exact = q->exact;
    f->had_embedding = q->embedding != NULL;
    f->threshold = q->threshold;
    f->done = done;
    f->done_ud = done_ud;
    if (!f->later) {
        answer_lookup(f);
        return NULL;
    }
    return &f->handle;
}

static void fake_lookup_cancel(void *ud, void *h)
{
    fake_t *f = ud;
    assert_ptr_equal(h, &f->handle);
    f->done = NULL;
    f->cancels++;
}

static void fake_store(void *ud, const vsr_cache_query_t *q, vsr_slice_t value)
{
    fake_t *f = ud;
    f->stores++;
    f->ttl = q->ttl_ms;
    snprintf(f->stored, sizeof(f->stored), "%.*s", (int)value.len, value.p);
}

static void answer_embed(fake_t *f)
{
    char vec[512 * 3 + 64];
    size_t n = (size_t)snprintf(vec, sizeof(vec), "{\"embeddings\":[[");
    for (int i = 0; i < 512; i++)
        n += (size_t)snprintf(vec + n, sizeof(vec) - n, "%s1", i ? "," : "");
    snprintf(vec + n, sizeof(vec) - n, "]]}");
    vsr_runtime_result_t r = {"rc", VSR_OK, vsr_slice_cstr(vec)};
    vsr_runtime_done_fn done = f->rt_done;
    f->rt_done = NULL;
    done(f->rt_ud, VSR_OK, &r, 1);
}

static void *fake_rt(void *ud, const vsr_runtime_bundle_t *b, uint64_t deadline, vsr_runtime_done_fn done,
                     void *done_ud)
{
    (void)deadline;
    fake_t *f = ud;
    f->embeds++;
    assert_int_equal(b->n_tasks, 1);
    assert_string_equal(b->tasks[0].type, "embed");
    f->rt_done = done;
    f->rt_ud = done_ud;
    if (!f->later) {
        answer_embed(f);
        return NULL;
    }
    return &f->rt_handle;
}

static void fake_rt_cancel(void *ud, void *h)
{
    fake_t *f = ud;
    assert_ptr_equal(h, &f->rt_handle);
    f->rt_done = NULL;
    f->rt_cancels++;
}

static void fake_resume(void *ud, vsr_session_t *s, const vsr_effect_t *eff)
{
    (void)s;
    fake_t *f = ud;
    f->resumes++;
    f->resumed_status = eff->status;
}

static const vsr_ports_t ports = {
    .runtime_call = fake_rt,
    .runtime_cancel = fake_rt_cancel,
    .cache_lookup = fake_lookup,
    .cache_cancel = fake_lookup_cancel,
    .cache_store = fake_store,
    .resume = fake_resume,
};

static const char *BODY = "{\"model\":\"auto\",\"messages\":[{\"role\":\"user\",\"content\":\"cacheme please\"}]}";
static const char *STORED = "1700000000000\n{\"id\":\"c1\",\"object\":\"chat.completion\",\"created\":1,\"model\":\"m\","
                            "\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":\"stored answer\"},"
                            "\"finish_reason\":\"stop\"}]}";

static vsr_session_t *open_req(doc_t *d, fake_t *f, const vsr_header_t *h, size_t nh, const vsr_effect_t **eff)
{
    vsr_session_opts_t o = {.listener = &d->cfg->listeners[0], .ports = &ports, .ports_ud = f};
    vsr_session_t *s = vsr_session_open(d->engine, &o);
    vsr_session_request_headers(s, VSR_SLICE_LIT("POST"), VSR_SLICE_LIT("/v1/chat/completions"), h, nh);
    *eff = vsr_session_request_body(s, BODY, strlen(BODY));
    return s;
}

static const char *header(const vsr_header_t *h, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (vsr_slice_case_eq_cstr(h[i].name, name))
            return h[i].value.p;
    return NULL;
}

/* the upstream answer, through the response phases */
static int answer(vsr_session_t *s, int status, const char *body, int end)
{
    vsr_header_t ct = {VSR_SLICE_LIT("content-type"), VSR_SLICE_LIT("application/json")};
    const vsr_effect_t *e = vsr_session_response_headers(s, status, &ct, 1);
    int observe = e->observe;
    size_t half = strlen(body) / 2;
    vsr_session_response_body(s, body, half, 0);
    vsr_session_response_body(s, body + half, strlen(body) - half, 0);
    vsr_session_response_body(s, NULL, 0, end);
    return observe;
}

static const char *ANSWER = "{\"id\":\"x\",\"object\":\"chat.completion\",\"choices\":[{\"index\":0,\"message\":"
                            "{\"role\":\"assistant\",\"content\":\"fresh\"},\"finish_reason\":\"stop\"}]}";

static void test_exact_hit_at_once(void **state)
{
    (void)state;
    doc_t d;
    doc_init(&d, "exact");
    fake_t f = {.hit = 1, .value = STORED};
    const vsr_effect_t *e;
    vsr_session_t *s = open_req(&d, &f, NULL, 0, &e);
    assert_int_equal(f.lookups, 1);
    assert_int_equal(f.embeds, 0);            /* exact needs no embedding */
    assert_true(f.exact && !f.had_embedding);
    assert_true(strncmp(f.key, "sha256:", 7) == 0);
    assert_non_null(strstr(f.partition, "d=d|m=m"));
    assert_int_equal(e->status, 200);
    assert_non_null(strstr(e->resp_body.p, "stored answer"));
    assert_string_equal(header(e->resp_headers, e->n_resp_headers, "x-vsr-cache-hit"), "true");
    assert_string_equal(header(e->resp_headers, e->n_resp_headers, "x-vsr-response-path"), "cache");
    assert_int_equal(vsr_session_evidence(s)->cache_hit, 1);
    vsr_session_finish(s);
    doc_free(&d);
}

static void test_miss_then_store_once_whole(void **state)
{
    (void)state;
    doc_t d;
    doc_init(&d, "exact");
    fake_t f = {0};
    const vsr_effect_t *e;
    vsr_session_t *s = open_req(&d, &f, NULL, 0, &e);
    assert_int_equal(e->status, 0);           /* a miss: the call goes on */
    assert_int_equal(vsr_session_plan(s)->kind, VSR_PLAN_CALL);
    char key[128];
    snprintf(key, sizeof(key), "%s", f.key);
    assert_true(answer(s, 200, ANSWER, VSR_BODY_END)); /* the body is kept on the side */
    assert_int_equal(f.stores, 1);
    assert_int_equal(f.ttl, 7000);
    assert_non_null(strstr(f.stored, "\"fresh\""));
    vsr_session_finish(s);
    /* the same request: the same key; a cut answer or an error is not stored */
    f = (fake_t){0};
    s = open_req(&d, &f, NULL, 0, &e);
    assert_string_equal(f.key, key);
    answer(s, 200, ANSWER, VSR_BODY_CUT);
    assert_int_equal(f.stores, 0);
    vsr_session_finish(s);
    s = open_req(&d, &f, NULL, 0, &e);
    answer(s, 500, "{\"error\":{}}", VSR_BODY_END);
    assert_int_equal(f.stores, 0);
    vsr_session_finish(s);
    /* no-store */
    vsr_header_t h = {VSR_SLICE_LIT("x-vsr-cache-control"), VSR_SLICE_LIT("no-store, ttl=3")};
    s = open_req(&d, &f, &h, 1, &e);
    assert_false(answer(s, 200, ANSWER, VSR_BODY_END)); /* nothing to keep: not even observed */
    assert_int_equal(f.stores, 0);
    vsr_session_finish(s);
    vsr_header_t h2 = {VSR_SLICE_LIT("x-vsr-cache-control"), VSR_SLICE_LIT("ttl=3")};
    s = open_req(&d, &f, &h2, 1, &e);
    answer(s, 200, ANSWER, VSR_BODY_END);
    assert_int_equal(f.stores, 1);
    assert_int_equal(f.ttl, 3000);
    vsr_session_finish(s);
    doc_free(&d);
}

static void test_semantic_waits_then_hits(void **state)
{
    (void)state;
    doc_t d;
    doc_init(&d, "semantic");
    fake_t f = {.later = 1, .hit = 1, .value = STORED};
    const vsr_effect_t *e;
    vsr_session_t *s = open_req(&d, &f, NULL, 0, &e);
    assert_true(e->pending);
    assert_int_equal(f.embeds, 1);
    assert_int_equal(f.lookups, 0);
    answer_embed(&f);                          /* the embedding: then the lookup, which waits too */
    assert_int_equal(f.lookups, 1);
    assert_true(f.had_embedding && !f.exact);
    assert_true(f.threshold > 0.79 && f.threshold < 0.81); /* the store's default */
    assert_int_equal(f.resumes, 0);
    answer_lookup(&f);
    assert_int_equal(f.resumes, 1);
    assert_int_equal(f.resumed_status, 200);
    vsr_session_finish(s);
    doc_free(&d);
}

static void test_client_leaves_while_waiting(void **state)
{
    (void)state;
    doc_t d;
    doc_init(&d, "exact_then_semantic");
    fake_t f = {.later = 1};
    const vsr_effect_t *e;
    vsr_session_t *s = open_req(&d, &f, NULL, 0, &e);
    assert_true(e->pending && vsr_session_pending(s));
    vsr_session_cancel(s);                     /* during the embedding */
    assert_int_equal(f.rt_cancels, 1);
    assert_false(vsr_session_pending(s));
    vsr_session_finish(s);
    f = (fake_t){.later = 1};
    s = open_req(&d, &f, NULL, 0, &e);
    answer_embed(&f);
    assert_int_equal(f.lookups, 1);
    assert_true(f.exact && f.had_embedding);
    vsr_session_finish(s);                     /* during the lookup: finish cancels it */
    assert_int_equal(f.cancels, 1);
    assert_int_equal(f.resumes, 0);
    doc_free(&d);
}

/* ---- the Responses API's stored objects belong to an owner ---- */

static int deletes;

static void fake_delete(void *ud, const vsr_cache_query_t *q)
{
    (void)ud;
    (void)q;
    deletes++;
}

static const vsr_ports_t resp_ports = {
    .cache_lookup = fake_lookup,
    .cache_cancel = fake_lookup_cancel,
    .cache_store = fake_store,
    .cache_delete = fake_delete,
    .resume = fake_resume,
};

#define OWNER_A "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
#define OWNER_B "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"

/* `method` /v1/responses/resp_1 as `owner`, the store holding `record`: the status. */
static int stored_call(const char *owner, const char *method, const char *record, fake_t *f)
{
    static const char *yaml = "version: v0.3\n"
                              "listeners: [{name: l, address: 127.0.0.1, port: 8899}]\n"
                              "providers:\n"
                              "  defaults: {model: m}\n"
                              "  models: [{name: m, backend_refs: [{endpoint: \"127.0.0.1:9\"}]}]\n"
                              "global: {services: {response_api: {enabled: true}}}\n";
    doc_t d;
    vsr_buf_t err;
    vsr_buf_init(&err, 0);
    assert_int_equal(vsr_config_load_string("c.yaml", yaml, strlen(yaml), &d.cfg, &err), VSR_OK);
    d.engine = vsr_engine_new(d.cfg, 1, &err);
    assert_non_null(d.engine);
    vsr_buf_free(&err);
    *f = (fake_t){.hit = 1, .value = record};
    vsr_session_opts_t o = {.listener = &d.cfg->listeners[0], .ports = &resp_ports, .ports_ud = f,
                            .owner = vsr_slice_cstr(owner)};
    vsr_session_t *s = vsr_session_open(d.engine, &o);
    const vsr_effect_t *e = vsr_session_request_headers(s, vsr_slice_cstr(method), VSR_SLICE_LIT("/v1/responses/resp_1"),
                                                        NULL, 0);
    assert_int_equal(e->status, 0);
    e = vsr_session_request_body(s, NULL, 0);
    int status = e->status;
    if (status == 404)
        assert_non_null(strstr(e->resp_body.p, "Response with id 'resp_1' not found."));
    vsr_session_finish(s);
    doc_free(&d);
    return status;
}

static void test_stored_response_owner(void **state)
{
    (void)state;
    const char *rec_a = "{\"owner\":\"" OWNER_A "\",\"response\":{\"id\":\"resp_1\"},\"conv\":[],\"items\":[]}";
    const char *rec_shared = "{\"owner\":\"\",\"response\":{\"id\":\"resp_1\"},\"conv\":[],\"items\":[]}";
    const char *rec_before = "{\"response\":{\"id\":\"resp_1\"},\"conv\":[],\"items\":[]}";
    fake_t f;
    /* the key names the owner; the record is checked too */
    assert_int_equal(stored_call(OWNER_A, "GET", rec_a, &f), 200);
    assert_string_equal(f.key, "resp:" OWNER_A ":resp_1");
    assert_int_equal(stored_call(OWNER_B, "GET", rec_a, &f), 404);
    assert_string_equal(f.key, "resp:" OWNER_B ":resp_1");
    assert_int_equal(stored_call("", "GET", rec_a, &f), 404);
    assert_string_equal(f.key, "resp:resp_1");
    /* the shared owner (no key), and records kept before owners were, are the shared owner's */
    assert_int_equal(stored_call("", "GET", rec_shared, &f), 200);
    assert_int_equal(stored_call("", "GET", rec_before, &f), 200);
    assert_int_equal(stored_call(OWNER_A, "GET", rec_shared, &f), 404);
    assert_int_equal(stored_call(OWNER_A, "GET", rec_before, &f), 404);
    /* delete: only the owner's, and another's is not touched */
    deletes = 0;
    assert_int_equal(stored_call(OWNER_B, "DELETE", rec_a, &f), 404);
    assert_int_equal(deletes, 0);
    assert_int_equal(stored_call(OWNER_A, "DELETE", rec_a, &f), 200);
    assert_int_equal(deletes, 1);
}

/* The key of a body (and header fields); ctx gets the semantic context. */
static void key_of(const char *body, int last_user, const vsr_header_t *h, size_t nh, char key[VSR_CONFIG_HASH_LEN],
                   char ctx[VSR_CONFIG_HASH_LEN])
{
    vsr_json_t j;
    assert_int_equal(vsr_json_parse(&j, body, strlen(body), NULL), VSR_OK);
    vsr__rc_key(&j, last_user, h, nh, VSR_SLICE_LIT("auto"), VSR_SLICE_LIT("d=d"), VSR_SLICE_NULL, VSR_SLICE_NULL, key, ctx);
    vsr_json_free(&j);
}

static void test_key_is_the_whole_request(void **state)
{
    (void)state;
    char k0[VSR_CONFIG_HASH_LEN], c0[VSR_CONFIG_HASH_LEN], k[VSR_CONFIG_HASH_LEN], c[VSR_CONFIG_HASH_LEN];
    const char *base = "{\"model\":\"auto\",\"messages\":[{\"role\":\"system\",\"content\":\"S\"},"
                       "{\"role\":\"user\",\"content\":\"Q\"}],\"temperature\":0}";
    key_of(base, 1, NULL, 0, k0, c0);
    /* the same request: members in another order, stream, user, neutral header fields */
    key_of("{\"temperature\":0,\"stream\":true,\"user\":\"u\",\"messages\":[{\"role\":\"system\",\"content\":"
           "\"S\"},{\"role\":\"user\",\"content\":\"Q\"}],\"model\":\"auto\",\"stream_options\":{}}",
           1, NULL, 0, k, c);
    assert_string_equal(k, k0);
    vsr_header_t neutral[] = {{VSR_SLICE_LIT("X-Request-Id"), VSR_SLICE_LIT("r1")},
                              {VSR_SLICE_LIT("user-agent"), VSR_SLICE_LIT("sdk")},
                              {VSR_SLICE_LIT("x-stainless-retry-count"), VSR_SLICE_LIT("2")},
                              {VSR_SLICE_LIT("authorization"), VSR_SLICE_LIT("Bearer k")}};
    key_of(base, 1, neutral, VSR_ARRAY_LEN(neutral), k, c);
    assert_string_equal(k, k0);
    /* a member nobody listed, or a header field a backend may act on: another key */
    key_of("{\"model\":\"auto\",\"messages\":[{\"role\":\"system\",\"content\":\"S\"},"
           "{\"role\":\"user\",\"content\":\"Q\"}],\"temperature\":0,\"guided_choice\":[\"a\"]}",
           1, NULL, 0, k, c);
    assert_string_not_equal(k, k0);
    assert_string_not_equal(c, c0);
    vsr_header_t opt = {VSR_SLICE_LIT("X-Backend-Option"), VSR_SLICE_LIT("v")};
    char k1[VSR_CONFIG_HASH_LEN];
    key_of(base, 1, &opt, 1, k1, c);
    assert_string_not_equal(k1, k0);
    vsr_header_t opt2 = {VSR_SLICE_LIT("x-backend-option"), VSR_SLICE_LIT(" v ")}; /* names in any case */
    key_of(base, 1, &opt2, 1, k, c);
    assert_string_equal(k, k1);
    /* the context leaves the last user message out, and only it */
    key_of("{\"model\":\"auto\",\"messages\":[{\"role\":\"system\",\"content\":\"S\"},"
           "{\"role\":\"user\",\"content\":\"Q2\"}],\"temperature\":0}", 1, NULL, 0, k, c);
    assert_string_not_equal(k, k0);
    assert_string_equal(c, c0);
    key_of("{\"model\":\"auto\",\"messages\":[{\"role\":\"system\",\"content\":\"T\"},"
           "{\"role\":\"user\",\"content\":\"Q\"}],\"temperature\":0}", 1, NULL, 0, k, c);
    assert_string_not_equal(c, c0);
}

static void test_client_ttl_capped(void **state)
{
    (void)state;
    doc_t d;
    doc_init(&d, "exact");
    fake_t f = {0};
    const vsr_effect_t *e;
    vsr_header_t h = {VSR_SLICE_LIT("x-vsr-cache-control"), VSR_SLICE_LIT("ttl=31536000")};
    vsr_session_t *s = open_req(&d, &f, &h, 1, &e);
    answer(s, 200, ANSWER, VSR_BODY_END);
    assert_int_equal(f.stores, 1);
    assert_int_equal(f.ttl, 7000); /* ttl_seconds: 7 */
    vsr_session_finish(s);
    doc_free(&d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exact_hit_at_once),
        cmocka_unit_test(test_miss_then_store_once_whole),
        cmocka_unit_test(test_semantic_waits_then_hits),
        cmocka_unit_test(test_client_leaves_while_waiting),
        cmocka_unit_test(test_stored_response_owner),
        cmocka_unit_test(test_key_is_the_whole_request),
        cmocka_unit_test(test_client_ttl_capped),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
