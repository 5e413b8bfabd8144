/* test_migrate.c — vsr_config_migrate: pre-v0.3 documents → canonical v0.3. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "config/config.h"

/* ---- helpers ------------------------------------------------------------- */

/* Migrates yaml as "old.yaml"; asserts success and returns the document
 * (NUL-terminated, caller frees); the notes go to *notes when not NULL. */
static char *migrate_ok(const char *yaml, char **notes)
{
    vsr_buf_t out, err, warn;
    vsr_buf_init(&out, 0);
    vsr_buf_init(&err, 1 << 20);
    vsr_buf_init(&warn, 1 << 20);
    int rc = vsr_config_migrate("old.yaml", yaml, strlen(yaml), &out, &err, &warn);
    if (rc != VSR_OK)
        fprintf(stderr, "unexpected errors:\n%.*s", (int)err.len, err.data ? err.data : "");
    assert_int_equal(rc, VSR_OK);
    assert_int_equal(err.len, 0);
    vsr_buf_append(&out, "", 1);
    vsr_buf_append(&warn, "", 1);
    if (notes != NULL)
        *notes = strdup(warn.data);
    char *doc = strdup(out.data);
    vsr_buf_free(&out);
    vsr_buf_free(&err);
    vsr_buf_free(&warn);
    return doc;
}

static void expect_doc(const char *yaml, const char *expected)
{
    char *doc = migrate_ok(yaml, NULL);
    if (strcmp(doc, expected) != 0)
        fprintf(stderr, "got:\n%s\nexpected:\n%s\n", doc, expected);
    assert_string_equal(doc, expected);
    free(doc);
}

/* Asserts the migration fails with exactly `expected` and writes nothing. */
static void expect_errors(const char *yaml, const char *expected)
{
    vsr_buf_t out, err;
    vsr_buf_init(&out, 0);
    vsr_buf_init(&err, 1 << 20);
    int rc = vsr_config_migrate("old.yaml", yaml, strlen(yaml), &out, &err, NULL);
    assert_int_equal(rc, VSR_ERR_INVALID);
    assert_int_equal(out.len, 0);
    vsr_buf_append(&err, "", 1);
    if (strcmp(err.data, expected) != 0)
        fprintf(stderr, "got:\n%s\nexpected:\n%s\n", err.data, expected);
    assert_string_equal(err.data, expected);
    vsr_buf_free(&out);
    vsr_buf_free(&err);
}

/* The migrated document loads as v0.3. */
static vsr_config_t *migrate_and_load(const char *yaml)
{
    char *doc = migrate_ok(yaml, NULL);
    vsr_buf_t err;
    vsr_buf_init(&err, 1 << 20);
    vsr_config_t *c = NULL;
    int rc = vsr_config_load_string("new.yaml", doc, strlen(doc), &c, &err);
    if (rc != VSR_OK)
        fprintf(stderr, "the migrated document does not load:\n%s\n%.*s", doc, (int)err.len, err.data);
    assert_int_equal(rc, VSR_OK);
    vsr_buf_free(&err);
    free(doc);
    return c;
}

#define UNKNOWN " (see docs/cli.md, config migrate, for the keys it maps)\n"

/* ---- the flat layout ------------------------------------------------------- */

/* Only the first document of a stream is migrated, with a note. */
static void test_second_document_noted(void **state)
{
    (void)state;
    char *notes = NULL;
    char *doc = migrate_ok("default_model: m1\nvllm_endpoints: [{name: a, address: 10.0.0.1, port: 8000}]\n"
                           "model_config: {m1: {preferred_endpoints: [a]}}\n---\nnot: [parsed\n",
                           &notes);
    assert_non_null(strstr(notes, "old.yaml:4:1: note: a second YAML document starts here: only the first is migrated"));
    assert_null(strstr(doc, "not:"));
    free(doc);
    free(notes);
}

static void test_flat_layout(void **state)
{
    (void)state;
    expect_doc("vllm_endpoints:\n"
               "  - name: a\n"
               "    address: 10.0.0.1\n"
               "    port: 8000\n"
               "    weight: 3\n"
               "  - {name: b, address: 'fd00::1', port: 8001, protocol: https}\n"
               "model_config:\n"
               "  m1:\n"
               "    model_id: upstream-m1\n"
               "    preferred_endpoints: [a, b]\n"
               "    access_key: sk-1\n"
               "    pricing: {currency: USD, prompt_per_1m: 1}\n"
               "    param_size: 7B\n"
               "  m2:\n"
               "    preferred_endpoints: [b]\n"
               "    reasoning_family: qwen3\n"
               "default_model: m1\n"
               "default_reasoning_effort: low\n",
               "version: v0.3\n"
               "providers:\n"
               "  defaults:\n"
               "    model: m1\n"
               "    reasoning_effort: low\n"
               "  models:\n"
               "    - name: m1\n"
               "      provider_model_id: upstream-m1\n"
               "      pricing:\n"
               "        currency: USD\n"
               "        prompt_per_1m: 1\n"
               "      backend_refs:\n"
               "        - name: a\n"
               "          endpoint: \"10.0.0.1:8000\"\n"
               "          weight: 3\n"
               "          api_key: sk-1\n"
               "        - name: b\n"
               "          endpoint: \"[fd00::1]:8001\"\n"
               "          protocol: https\n"
               "          api_key: sk-1\n"
               "    - name: m2\n"
               "      reasoning_family: qwen3\n"
               "      backend_refs:\n"
               "        - name: b\n"
               "          endpoint: \"[fd00::1]:8001\"\n"
               "          protocol: https\n"
               "routing:\n"
               "  modelCards:\n"
               "    - name: m1\n"
               "      param_size: \"7B\"\n"
               "    - name: m2\n");
}

static void test_provider_profiles(void **state)
{
    (void)state;
    expect_doc("provider_profiles:\n"
               "  oai: {type: openai, base_url: 'https://api.example.com/v1', auth_prefix: ''}\n"
               "vllm_endpoints:\n"
               "  - {name: cloud, provider_profile: oai, api_key_env: OAI_KEY}\n"
               "model_config:\n"
               "  gpt: {preferred_endpoints: [cloud]}\n",
               "version: v0.3\n"
               "providers:\n"
               "  models:\n"
               "    - name: gpt\n"
               "      backend_refs:\n"
               "        - name: cloud\n"
               "          provider: openai\n"
               "          base_url: \"https://api.example.com/v1\"\n"
               "          auth_prefix: \"\"\n"
               "          api_key_env: OAI_KEY\n"
               "routing:\n"
               "  modelCards:\n"
               "    - name: gpt\n");
}

static void test_signals_decisions_and_kept_blocks(void **state)
{
    (void)state;
    expect_doc("listeners: [{name: l, port: 8899}]\n"
               "model_config: {m: {}}\n"
               "keyword_rules: [{name: k, operator: OR, keywords: [a]}]\n"
               "categories: [{name: math}]\n"
               "embedding_rules: []\n"
               "signals:\n"
               "  context: [{name: long, min_tokens: 1K}]\n"
               "decisions: [{name: d, rules: {operator: OR, conditions: [{type: keyword, name: k}]}, "
               "modelRefs: [{model: m}]}]\n"
               "entrypoints: [{model_names: [x], recipe: r}]\n"
               "recipes: [{name: r, routing: {decisions: []}}]\n",
               "version: v0.3\n"
               "listeners:\n"
               "  - name: l\n"
               "    port: 8899\n"
               "providers:\n"
               "  models:\n"
               "    - name: m\n"
               "routing:\n"
               "  modelCards:\n"
               "    - name: m\n"
               "  signals:\n"
               "    keywords:\n"
               "      - name: k\n"
               "        operator: OR\n"
               "        keywords:\n"
               "          - a\n"
               "    domains:\n"
               "      - name: math\n"
               "    context:\n"
               "      - name: long\n"
               "        min_tokens: \"1K\"\n"
               "  decisions:\n"
               "    - name: d\n"
               "      rules:\n"
               "        operator: OR\n"
               "        conditions:\n"
               "          - type: keyword\n"
               "            name: k\n"
               "      modelRefs:\n"
               "        - model: m\n"
               "entrypoints:\n"
               "  - model_names:\n"
               "      - x\n"
               "    recipe: r\n"
               "recipes:\n"
               "  - name: r\n"
               "    routing:\n"
               "      decisions: []\n");
}

static void test_global_blocks(void **state)
{
    (void)state;
    char *notes = NULL;
    char *doc = migrate_ok("model_config: {m: {}}\n"
                           "classifier:\n"
                           "  category_model: {model_id: models/cat, threshold: 0.6}\n"
                           "  pii_model: {model_id: models/pii, model_ref: mine}\n"
                           "hallucination_mitigation: {enabled: false, nli_model: {model_id: models/nli}}\n"
                           "observability: {tracing: {enabled: false}}\n"
                           "tools: {enabled: false}\n"
                           "streamed_body_mode: true\n"
                           "router: {clear_route_cache: true}\n"
                           "semantic_cache: {enabled: true, max_entries: 10}\n"
                           "prompt_guard: {model_id: models/guard, threshold: 0.7}\n"
                           "bert_model: {model_id: models/bert, threshold: 0.6}\n"
                           "auto_model_names: [auto]\n"
                           "system_models: {}\n",
                           &notes);
    const char *expected = "version: v0.3\n"
                           "providers:\n"
                           "  models:\n"
                           "    - name: m\n"
                           "routing:\n"
                           "  modelCards:\n"
                           "    - name: m\n"
                           "global:\n"
                           "  model_catalog:\n"
                           "    modules:\n"
                           "      classifier:\n"
                           "        domain:\n"
                           "          model_id: models/cat\n"
                           "          threshold: 0.6\n"
                           "          model_ref: domain_classifier\n"
                           "        pii:\n"
                           "          model_id: models/pii\n"
                           "          model_ref: mine\n"
                           "      hallucination_mitigation:\n"
                           "        enabled: false\n"
                           "        explainer:\n"
                           "          model_id: models/nli\n"
                           "          model_ref: hallucination_explainer\n"
                           "      prompt_guard:\n"
                           "        model_id: models/guard\n"
                           "        threshold: 0.7\n"
                           "        model_ref: prompt_guard\n"
                           "    embeddings:\n"
                           "      semantic:\n"
                           "        bert_model_path: models/bert\n"
                           "        embedding_config:\n"
                           "          min_score_threshold: 0.6\n"
                           "  services:\n"
                           "    observability:\n"
                           "      tracing:\n"
                           "        enabled: false\n"
                           "  integrations:\n"
                           "    tools:\n"
                           "      enabled: false\n"
                           "  router:\n"
                           "    streamed_body:\n"
                           "      enabled: true\n"
                           "    clear_route_cache: true\n"
                           "    auto_model_names:\n"
                           "      - auto\n"
                           "  stores:\n"
                           "    response_cache:\n"
                           "      max_entries: 10\n";
    if (strcmp(doc, expected) != 0)
        fprintf(stderr, "got:\n%s\n", doc);
    assert_string_equal(doc, expected);
    assert_non_null(strstr(notes, "old.yaml:10:27: note: semantic_cache.enabled is not carried"));
    free(doc);
    free(notes);
}

/* Every scalar keeps its value and type; strings that would read as
 * something else (here or in a YAML 1.1 reader) are quoted. */
static void test_scalars_round_trip(void **state)
{
    (void)state;
    expect_doc("model_selection:\n"
               "  a: 0x10\n"
               "  b: !!float 1\n"
               "  c: 1e5\n"
               "  d: -.5\n"
               "  e: \"tab\\there\"\n"
               "  f: ''\n"
               "  g: ~\n"
               "  h: 'null'\n"
               "  i: \"\\u2028x\\x85\\x01\"\n"
               "  k: 99999999999999999999\n"
               "  '12': 1\n"
               "  13: 2\n"
               "  l: 'yes'\n"
               "  m: .inf\n"
               "  n: 'a: b'\n"
               "  o: '-x'\n"
               "  p: ' lead'\n"
               "  q: !!str 5\n"
               "  r: True\n"
               "  s: |\n"
               "    two\n"
               "    lines\n"
               "  t: caf\xc3\xa9 ok\n"
               "  u: 'say \"hi\" \\ back'\n",
               "version: v0.3\n"
               "providers:\n"
               "  models: []\n"
               "global:\n"
               "  router:\n"
               "    model_selection:\n"
               "      a: 16\n"
               "      b: 1.0\n"
               "      c: 1.0e+5\n"
               "      d: -0.5\n"
               "      e: \"tab\\there\"\n"
               "      f: \"\"\n"
               "      g: null\n"
               "      h: \"null\"\n"
               "      i: \"\\u2028x\\x85\\x01\"\n"
               "      k: 99999999999999999999\n"
               "      \"12\": 1\n"
               "      13: 2\n"
               "      l: \"yes\"\n"
               "      m: .inf\n"
               "      \"n\": \"a: b\"\n"
               "      o: \"-x\"\n"
               "      p: \" lead\"\n"
               "      q: \"5\"\n"
               "      r: true\n"
               "      s: \"two\\nlines\\n\"\n"
               "      t: \"caf\xc3\xa9 ok\"\n"
               "      u: \"say \\\"hi\\\" \\\\ back\"\n");
}

/* A realistic document migrates into one the v0.3 loader accepts. */
static void test_result_loads(void **state)
{
    (void)state;
    vsr_config_t *c = migrate_and_load("vllm_endpoints:\n"
                                       "  - {name: a, address: 127.0.0.1, port: 8000, weight: 2}\n"
                                       "  - {name: b, address: 127.0.0.1, port: 8001}\n"
                                       "model_config:\n"
                                       "  small: {preferred_endpoints: [a], param_size: 8B}\n"
                                       "  big: {model_id: big-v2, preferred_endpoints: [a, b], access_key: sk-x}\n"
                                       "  coder: {preferred_endpoints: [b]}\n"
                                       "default_model: small\n"
                                       "keyword_rules: [{name: code, operator: OR, keywords: [python]}]\n"
                                       "decisions:\n"
                                       "  - name: code\n"
                                       "    rules: {operator: OR, conditions: [{type: keyword, name: code}]}\n"
                                       "    modelRefs: [{model: coder}]\n"
                                       "semantic_cache: {backend_type: memory, max_entries: 100}\n"
                                       "prompt_guard: {threshold: 0.5}\n");
    assert_int_equal(c->n_models, 3);
    assert_string_equal(c->default_model, "small");
    assert_string_equal(c->models[1].name, "big");
    assert_string_equal(c->models[1].provider_model_id, "big-v2");
    assert_int_equal(c->models[1].n_backends, 2);
    assert_string_equal(c->models[1].backends[1].api_key, "sk-x");
    assert_int_equal(c->models[0].backends[0].weight, 2);
    vsr_config_free(c);
}

/* ---- refusals ------------------------------------------------------------------ */

static void test_already_v03(void **state)
{
    (void)state;
    expect_errors("version: v0.3\nproviders: {models: []}\n",
                  "old.yaml:1:10: version is already v0.3; nothing to migrate\n");
    expect_errors("version: 'v0.3'\n", "old.yaml:1:10: version is already v0.3; nothing to migrate\n");
    char *doc = migrate_ok("version: v0.2\nmodel_config: {m: {}}\n", NULL);
    assert_non_null(strstr(doc, "version: v0.3\n"));
    free(doc);
}

static void test_malformed_yaml(void **state)
{
    (void)state;
    expect_errors("a: [1\n", "old.yaml:2:1: did not find expected ',' or ']' (while parsing a flow sequence at 1:4)\n");
    expect_errors("", "old.yaml:1:1: the document is empty: nothing to migrate\n");
    expect_errors("# only a comment\n", "old.yaml:1:1: the document is empty: nothing to migrate\n");
    expect_errors("[1, 2]\n", "old.yaml:1:1: expected a mapping at the top of the document, got a list\n");
    expect_errors("a: &x [1]\nb: *y\n", "old.yaml:2:4: undefined alias \"y\"\n");
    expect_errors("? [a]\n: 1\n", "old.yaml:1:3: top-level keys must be strings, got a list\n");
}

static void test_duplicate_keys(void **state)
{
    (void)state;
    expect_errors("model_config:\n  m: {model_id: a}\n  m: {model_id: b}\n",
                  "old.yaml:3:3: duplicate key \"m\" (first at 2:3)\n");
    expect_errors("default_model: a\ndefault_model: b\n", "old.yaml:2:1: duplicate key \"default_model\" (first at 1:1)\n");
    expect_errors("vllm_endpoints:\n  - {name: a, address: h}\n  - {name: a, address: h}\n",
                  "old.yaml:3:12: duplicate endpoint name \"a\" (first at 2:12)\n");
}

static void test_wrong_types(void **state)
{
    (void)state;
    expect_errors("model_config: [a]\nvllm_endpoints: {a: 1}\nkeyword_rules: {a: 1}\nsignals: []\ndecisions: {}\n",
                  "old.yaml:2:17: vllm_endpoints: expected a list, got a mapping\n"
                  "old.yaml:1:15: model_config: expected a mapping, got a list\n"
                  "old.yaml:3:16: keyword_rules: expected a list, got a mapping\n"
                  "old.yaml:4:10: signals: expected a mapping, got a list\n"
                  "old.yaml:5:12: decisions: expected a list, got a mapping\n");
    expect_errors("vllm_endpoints:\n"
                  "  - {name: a, address: h, port: \"80\"}\n"
                  "  - {address: h}\n"
                  "  - {name: b, address: h, port: 70000}\n"
                  "  - {name: c, port: 1}\n",
                  "old.yaml:2:33: vllm_endpoints[].port: expected a port number (1..65535), got a string \"80\"\n"
                  "old.yaml:3:5: vllm_endpoints[]: an endpoint needs a name (models name it in preferred_endpoints)\n"
                  "old.yaml:4:33: vllm_endpoints[].port: expected a port number (1..65535), got an integer \"70000\"\n"
                  "old.yaml:5:21: vllm_endpoints[].port without an address\n");
    expect_errors("model_config: {m: {preferred_endpoints: [e], access_key: 5}}\n"
                  "vllm_endpoints: [{name: e, address: h}]\n",
                  "old.yaml:1:58: model_config.m.access_key: expected a string, got an integer\n");
}

static void test_unknown_keys(void **state)
{
    (void)state;
    expect_errors("model_config:\n  m:\n    pii_policy: {allow_by_default: true}\nfoo: 1\n",
                  "old.yaml:3:5: unknown pre-v0.3 key \"pii_policy\" in model_config.m" UNKNOWN
                  "old.yaml:4:1: unknown pre-v0.3 key \"foo\"" UNKNOWN);
    expect_errors("vllm_endpoints: [{name: c, address: h, health_check_path: /h}]\n",
                  "old.yaml:1:40: unknown pre-v0.3 key \"health_check_path\" in vllm_endpoints[]" UNKNOWN);
    expect_errors("classifier: {category_model: {}, bogus: 1}\n"
                  "bert_model: {model_id: x, pooling: mean}\n"
                  "hallucination_mitigation: {x: 1}\n"
                  "provider_profiles: {p: {type: openai, region: eu}}\n",
                  "old.yaml:4:39: unknown pre-v0.3 key \"region\" in a provider_profiles entry" UNKNOWN
                  "old.yaml:1:34: unknown pre-v0.3 key \"bogus\" in classifier" UNKNOWN
                  "old.yaml:2:27: unknown pre-v0.3 key \"pooling\" in bert_model" UNKNOWN
                  "old.yaml:3:28: unknown pre-v0.3 key \"x\" in hallucination_mitigation" UNKNOWN);
    expect_errors("providers: {model_targets: {}}\n",
                  "old.yaml:1:13: providers.model_targets (the backends/auth_profiles/model_targets layout) is not "
                  "converted by vsr config migrate: write providers.models[].backend_refs\n");
}

static void test_references_and_conflicts(void **state)
{
    (void)state;
    expect_errors("model_config: {m: {preferred_endpoints: [x]}}\n",
                  "old.yaml:1:42: model \"m\" prefers endpoint \"x\", which vllm_endpoints does not declare\n");
    expect_errors("model_config:\n  m: {preferred_endpoints: [e, e]}\nvllm_endpoints: [{name: e, address: h}]\n",
                  "old.yaml:2:32: endpoint \"e\" is listed twice (first at 2:29)\n");
    expect_errors("model_config: {m: {access_key: k}}\n",
                  "old.yaml:1:32: model_config.m.access_key without preferred_endpoints: there is no backend to send "
                  "it to\n");
    expect_errors("vllm_endpoints: [{name: e, address: h, provider_profile: p}]\n",
                  "old.yaml:1:58: provider_profile \"p\" is not declared in provider_profiles\n");
    expect_errors("decisions: []\nrouting: {decisions: []}\n",
                  "old.yaml:1:1: routing.decisions is given twice (first at 2:22)\n");
    expect_errors("keyword_rules: [{name: a}]\nsignals: {keywords: []}\n",
                  "old.yaml:2:11: routing.signals.keywords is given twice (first at 1:16)\n");
    expect_errors("default_model: a\nproviders: {defaults: {default_model: b}}\n",
                  "old.yaml:1:1: providers.defaults.model is given twice (first at 2:39)\n");
    expect_errors("semantic_cache: {backend_type: memory}\nresponse_cache: {backend_type: redis}\n",
                  "old.yaml:2:18: global.stores.response_cache.backend_type is given twice (first at 1:32)\n");
    expect_errors("strategy: priority\nglobal: {router: {strategy: confidence}}\n",
                  "old.yaml:2:19: global.router.strategy is given twice (first at 1:11)\n");
}

/* providers.models[] entries with the older surface (endpoints,
 * access_key, access, card fields) are reshaped; v0.3 entries are kept. */
static void test_older_provider_models(void **state)
{
    (void)state;
    expect_doc("providers:\n"
               "  models:\n"
               "    - name: a\n"
               "      param_size: 7B\n"
               "      access_key: sk\n"
               "      endpoints:\n"
               "        - {endpoint: 'h:1', weight: 2}\n"
               "        - {endpoint: 'h:2'}\n"
               "      access: {provider_model_id: a-up}\n"
               "      reliability: {retry_count: 1}\n"
               "    - {name: b, backend_refs: [{endpoint: 'h:3'}]}\n",
               "version: v0.3\n"
               "providers:\n"
               "  models:\n"
               "    - name: a\n"
               "      provider_model_id: a-up\n"
               "      reliability:\n"
               "        retry_count: 1\n"
               "      backend_refs:\n"
               "        - name: primary\n"
               "          endpoint: \"h:1\"\n"
               "          weight: 2\n"
               "          api_key: sk\n"
               "        - name: backend-2\n"
               "          endpoint: \"h:2\"\n"
               "          api_key: sk\n"
               "    - name: b\n"
               "      backend_refs:\n"
               "        - endpoint: \"h:3\"\n"
               "routing:\n"
               "  modelCards:\n"
               "    - name: a\n"
               "      param_size: \"7B\"\n"
               "    - name: b\n");
    expect_errors("providers:\n"
                  "  models:\n"
                  "    - name: a\n"
                  "      endpoints: [{endpoint: 'h:1', region: eu}, {weight: 1}]\n"
                  "      access: {provider_model_id: x, tier: 1}\n"
                  "      backend_refs: [{endpoint: 'h:2'}]\n",
                  "old.yaml:5:38: unknown pre-v0.3 key \"tier\" in providers.models[].access" UNKNOWN
                  "old.yaml:4:37: unknown pre-v0.3 key \"region\" in providers.models[].endpoints[]" UNKNOWN
                  "old.yaml:4:50: providers.models[].endpoints[]: an endpoint needs its endpoint (host:port)\n"
                  "old.yaml:4:18: providers.models[].backend_refs is given twice (first at 6:21)\n");
}

static void test_older_global_layout_and_limits(void **state)
{
    (void)state;
    expect_errors("global: {runtime: {router: {strategy: priority}}}\n",
                  "old.yaml:1:10: global.runtime (an older layout of global) is not converted by vsr config migrate: "
                  "move its blocks to global.router, services, stores, integrations or model_catalog\n");
    /* pairwise matching is bounded: 4097 models are refused at the block */
    vsr_buf_t doc;
    vsr_buf_init(&doc, 0);
    vsr_buf_append_cstr(&doc, "model_config:\n");
    for (int i = 0; i <= 4096; i++)
        vsr_buf_printf(&doc, "  m%d: {}\n", i);
    vsr_buf_append(&doc, "", 1);
    expect_errors(doc.data, "old.yaml:2:3: model_config: more than 4096 entries\n");
    vsr_buf_free(&doc);
}

/* A partly migrated document: its providers, routing and global blocks are
 * kept and the legacy keys fill them. */
static void test_mixed_document(void **state)
{
    (void)state;
    expect_doc("providers:\n"
               "  models: [{name: a, backend_refs: [{endpoint: 'h:1'}]}]\n"
               "routing:\n"
               "  strategy: priority\n"
               "  models: [{name: a, description: card}]\n"
               "global:\n"
               "  router: {auto_model_name: MoM}\n"
               "model_config:\n"
               "  a: {param_size: 1B}\n"
               "include_config_models_in_list: true\n",
               "version: v0.3\n"
               "providers:\n"
               "  models:\n"
               "    - name: a\n"
               "      backend_refs:\n"
               "        - endpoint: \"h:1\"\n"
               "routing:\n"
               "  strategy: priority\n"
               "  modelCards:\n"
               "    - name: a\n"
               "      description: card\n"
               "      param_size: \"1B\"\n"
               "global:\n"
               "  router:\n"
               "    auto_model_name: MoM\n"
               "    include_config_models_in_list: true\n");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_flat_layout),
        cmocka_unit_test(test_second_document_noted),
        cmocka_unit_test(test_provider_profiles),
        cmocka_unit_test(test_signals_decisions_and_kept_blocks),
        cmocka_unit_test(test_global_blocks),
        cmocka_unit_test(test_scalars_round_trip),
        cmocka_unit_test(test_result_loads),
        cmocka_unit_test(test_already_v03),
        cmocka_unit_test(test_malformed_yaml),
        cmocka_unit_test(test_duplicate_keys),
        cmocka_unit_test(test_wrong_types),
        cmocka_unit_test(test_unknown_keys),
        cmocka_unit_test(test_references_and_conflicts),
        cmocka_unit_test(test_mixed_document),
        cmocka_unit_test(test_older_provider_models),
        cmocka_unit_test(test_older_global_layout_and_limits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
