/* The Kubernetes source's document: the file with the IntelligentPool's and
 * IntelligentRoute's routing in place of its own (vsr_admin_k8s_document). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "admin/admin.h"
#include "config/config.h"

#define BASE_HEAD                                                                                                    \
    "version: v0.3\n"                                                                                                \
    "listeners: [{name: main, address: 127.0.0.1, port: 8899}]\n"                                                    \
    "providers:\n"                                                                                                   \
    "  defaults: {model: m1, reasoning_effort: low}\n"                                                               \
    "  models:\n"                                                                                                    \
    "    - {name: m1, backend_refs: [{name: a, endpoint: '127.0.0.1:18000'}]}\n"                                     \
    "    - {name: m2, backend_refs: [{name: b, endpoint: '127.0.0.1:18001'}]}\n"
#define BASE_ROUTING                                                                                                 \
    "routing:\n"                                                                                                     \
    "  signals: {keywords: [{name: old, operator: OR, keywords: [zzz]}]}\n"                                          \
    "  decisions: [{name: from-file, rules: {operator: AND, conditions: [{type: keyword, name: old}]},\n"            \
    "               modelRefs: [{model: m1}]}]\n"
#define BASE_TAIL "global: {router: {config_source: kubernetes}}\n"

static const char *POOL =
    "{\"apiVersion\":\"vllm.ai/v1alpha1\",\"kind\":\"IntelligentPool\","
    "\"metadata\":{\"name\":\"pool\",\"generation\":2},"
    "\"spec\":{\"defaultModel\":\"m2\",\"models\":[{\"name\":\"m1\"},"
    "{\"name\":\"m2\",\"loras\":[{\"name\":\"fix\",\"description\":\"bug fixes\"}]}]}}";

static const char *ROUTE =
    "{\"metadata\":{\"name\":\"main\",\"generation\":7},\"spec\":{"
    "\"signals\":{\"keywords\":[{\"name\":\"k\",\"operator\":\"OR\",\"keywords\":[\"urgent\"],\"caseSensitive\":true}],"
    "\"contextRules\":[{\"name\":\"long\",\"minTokens\":\"1K\"}]},"
    "\"decisions\":[{\"name\":\"d\",\"priority\":5,"
    "\"signals\":{\"operator\":\"OR\",\"conditions\":[{\"type\":\"keyword\",\"name\":\"k\"},"
    "{\"type\":\"context\",\"name\":\"long\"}]},"
    "\"modelRefs\":[{\"model\":\"m2\",\"loraName\":\"fix\",\"useReasoning\":false}],"
    "\"plugins\":[{\"type\":\"header_mutation\","
    "\"configuration\":{\"add\":[{\"name\":\"x-someHeader\",\"value\":\"v\"}]}}]"
    "}]}}";

static char *document(const char *base, const char *pool, const char *route, int expect_rc, vsr_buf_t *err)
{
    vsr_buf_t out;
    vsr_buf_init(&out, 1 << 20);
    vsr_buf_init(err, 1 << 16);
    int rc = vsr_admin_k8s_document("config.yaml", base, strlen(base), pool, route, &out, err);
    if (rc != expect_rc)
        fprintf(stderr, "rc %d:\n%.*s", rc, (int)err->len, err->data ? err->data : "");
    assert_int_equal(rc, expect_rc);
    char *s = vsr_strndup(out.data ? out.data : "", out.len);
    vsr_buf_free(&out);
    return s;
}

static void load_ok(const char *doc)
{
    vsr_buf_t err;
    vsr_buf_init(&err, 1 << 16);
    vsr_config_t *c = NULL;
    int rc = vsr_config_load_string("kubernetes", doc, strlen(doc), &c, &err);
    if (rc != VSR_OK)
        fprintf(stderr, "%s\n%.*s", doc, (int)err.len, err.data ? err.data : "");
    assert_int_equal(rc, VSR_OK);
    assert_int_equal(c->config_source_kubernetes, 1);
    vsr_config_free(c);
    vsr_buf_free(&err);
}

/* The resources' modelCards, signals and decisions replace the file's;
 * keys are respelled, a decision's signals are its rules, plugin
 * configuration is kept as it is, the default model is the pool's. */
static void test_resources_replace_the_routing(void **state)
{
    (void)state;
    vsr_buf_t err;
    char *doc = document(BASE_HEAD BASE_ROUTING BASE_TAIL, POOL, ROUTE, VSR_OK, &err);
    assert_null(strstr(doc, "from-file"));
    assert_null(strstr(doc, "zzz"));
    assert_non_null(strstr(doc, "\"modelCards\":[{\"name\":\"m1\"},{\"name\":\"m2\",\"loras\":[{\"name\":\"fix\","
                                "\"description\":\"bug fixes\"}]}]"));
    assert_non_null(strstr(doc, "\"case_sensitive\":true"));
    assert_non_null(strstr(doc, "\"context\":[{\"name\":\"long\",\"min_tokens\":\"1K\"}]"));
    assert_non_null(strstr(doc, "\"rules\":{\"operator\":\"OR\""));
    assert_non_null(
        strstr(doc, "\"modelRefs\":[{\"model\":\"m2\",\"lora_name\":\"fix\",\"use_reasoning\":false}]"));
    assert_non_null(strstr(doc, "\"x-someHeader\"")); /* configuration: as it is */
    assert_non_null(strstr(doc, "\"defaults\":{\"reasoning_effort\":\"low\",\"model\":\"m2\"}"));
    assert_non_null(strstr(doc, "\"config_source\":\"kubernetes\""));
    load_ok(doc);
    vsr_free(doc);
    vsr_buf_free(&err);

    /* a file without routing (or providers.defaults) gets them */
    doc = document("version: v0.3\n"
                   "listeners: [{name: main, address: 127.0.0.1, port: 8899}]\n"
                   "providers:\n"
                   "  models:\n"
                   "    - {name: m1, backend_refs: [{name: a, endpoint: '127.0.0.1:18000'}]}\n"
                   "    - {name: m2, backend_refs: [{name: b, endpoint: '127.0.0.1:18001'}]}\n" BASE_TAIL,
                   POOL, ROUTE, VSR_OK, &err);
    assert_non_null(strstr(doc, "\"defaults\":{\"model\":\"m2\"}"));
    assert_non_null(strstr(doc, "\"routing\":{\"modelCards\""));
    load_ok(doc);
    vsr_free(doc);
    vsr_buf_free(&err);
}

/* A base written for the reference names no provider models (they come
 * from the pool): the pool's models become providers.models, by name. */
static void test_base_without_models(void **state)
{
    (void)state;
    vsr_buf_t err;
    const char *base = "version: v0.3\n"
                       "listeners: [{name: main, address: 127.0.0.1, port: 8899}]\n"
                       "providers:\n"
                       "  defaults: {reasoning_effort: low}\n" BASE_TAIL;
    char *doc = document(base, POOL, ROUTE, VSR_OK, &err);
    assert_non_null(strstr(doc, "\"models\":[{\"name\":\"m1\"},{\"name\":\"m2\"}]"));
    assert_non_null(strstr(doc, "\"defaults\":{\"reasoning_effort\":\"low\",\"model\":\"m2\"}"));
    load_ok(doc);
    vsr_free(doc);
    vsr_buf_free(&err);
    /* no defaultModel in the pool, no defaults in the file */
    static const char *POOL_NO_DEFAULT = "{\"metadata\":{\"name\":\"pool\",\"generation\":1},"
                                         "\"spec\":{\"models\":[{\"name\":\"m2\"}]}}";
    doc = document("version: v0.3\nproviders: {}\n" BASE_TAIL, POOL_NO_DEFAULT,
                   "{\"metadata\":{\"name\":\"main\"},\"spec\":{\"decisions\":[{\"name\":\"d\","
                   "\"modelRefs\":[{\"model\":\"m2\"}]}]}}",
                   VSR_OK, &err);
    assert_non_null(strstr(doc, "\"providers\":{\"models\":[{\"name\":\"m2\"}],\"defaults\":{}}"));
    load_ok(doc);
    vsr_free(doc);
    vsr_buf_free(&err);
}

/* What vsr does not map is refused by name, never dropped. */
static void test_unmapped_fields_are_refused(void **state)
{
    (void)state;
    vsr_buf_t err;
    char *doc = document(BASE_HEAD BASE_TAIL,
                         "{\"metadata\":{\"name\":\"pool\"},\"spec\":{\"defaultModel\":\"m1\","
                         "\"models\":[{\"name\":\"m1\",\"pricing\":{\"inputTokenPrice\":1}}]}}",
                         ROUTE, VSR_ERR_INVALID, &err);
    assert_non_null(strstr(err.data, "IntelligentPool pool: spec.models[0].pricing is not supported yet"));
    vsr_free(doc);
    vsr_buf_free(&err);

    doc = document(BASE_HEAD BASE_TAIL, POOL, "{\"metadata\":{\"name\":\"main\"}}", VSR_ERR_INVALID, &err);
    assert_non_null(strstr(err.data, "IntelligentRoute main has no spec"));
    vsr_free(doc);
    vsr_buf_free(&err);

    doc = document(BASE_HEAD BASE_TAIL, POOL, "{\"metadata\":", VSR_ERR_INVALID, &err);
    assert_non_null(strstr(err.data, "not valid JSON"));
    vsr_free(doc);
    vsr_buf_free(&err);

    /* a field the loader does not know is its error (the respelled name) */
    doc = document(BASE_HEAD BASE_TAIL, POOL,
                   "{\"metadata\":{\"name\":\"main\"},\"spec\":{\"decisions\":[{\"name\":\"d\",\"modelRefs\":"
                   "[{\"model\":\"m1\"}],\"signals\":{\"operator\":\"AND\",\"conditions\":[]},\"bogusField\":1}]}}",
                   VSR_OK, &err);
    vsr_buf_t lerr;
    vsr_buf_init(&lerr, 1 << 16);
    vsr_config_t *c = NULL;
    assert_int_not_equal(vsr_config_load_string("kubernetes", doc, strlen(doc), &c, &lerr), VSR_OK);
    assert_non_null(strstr(lerr.data, "bogus_field"));
    vsr_buf_free(&lerr);
    vsr_free(doc);
    vsr_buf_free(&err);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_resources_replace_the_routing),
        cmocka_unit_test(test_base_without_models),
        cmocka_unit_test(test_unmapped_fields_are_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
