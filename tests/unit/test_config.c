/* test_config.c — loading and validating the v0.3 document. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <cmocka.h>

#include "config/config.h"

/* ---- helpers ------------------------------------------------------------- */

#define HEAD "version: v0.3\n"
/* lines 2-4 */
#define LISTENERS \
    "listeners:\n"  \
    "  - name: l\n" \
    "    port: 8080\n"
/* lines 5-9 when following HEAD LISTENERS */
#define PROVIDERS              \
    "providers:\n"             \
    "  models:\n"              \
    "    - name: m\n"          \
    "      backend_refs:\n"    \
    "        - endpoint: 127.0.0.1:8000\n"
/* lines 5-8; the test adds line 9 ("        - endpoint: ..." → value at column 21) */
#define PROVIDERS_OPEN   \
    "providers:\n"       \
    "  models:\n"        \
    "    - name: m\n"    \
    "      backend_refs:\n"

static vsr_config_t *load_ok(const char *yaml)
{
    vsr_buf_t err;
    vsr_buf_init(&err, 1 << 20);
    vsr_config_t *c = NULL;
    int rc = vsr_config_load_string("t.yaml", yaml, strlen(yaml), &c, &err);
    if (rc != VSR_OK)
        fprintf(stderr, "unexpected errors:\n%.*s", (int)err.len, err.data ? err.data : "");
    assert_int_equal(rc, VSR_OK);
    assert_non_null(c);
    assert_int_equal(err.len, 0);
    vsr_buf_free(&err);
    return c;
}

/* Loads yaml as "t.yaml", asserts it fails with exactly `expected`. */
static void expect_errors(const char *yaml, const char *expected)
{
    vsr_buf_t err;
    vsr_buf_init(&err, 1 << 20);
    vsr_config_t *c = (vsr_config_t *)0x1;
    int rc = vsr_config_load_string("t.yaml", yaml, strlen(yaml), &c, &err);
    assert_int_equal(rc, VSR_ERR_INVALID);
    assert_null(c);
    vsr_buf_append(&err, "", 1);
    assert_string_equal(err.data, expected);
    vsr_buf_free(&err);
}

/* One backend_refs item on line 9: `        - <item>`. */
static void expect_backend_error(const char *item, const char *expected)
{
    char yaml[1024];
    snprintf(yaml, sizeof(yaml), HEAD LISTENERS PROVIDERS_OPEN "        - %s\n", item);
    expect_errors(yaml, expected);
}

/* ---- valid documents ----------------------------------------------------- */

static void test_reference_example(void **state)
{
    vsr_buf_t err;
    vsr_buf_init(&err, 1 << 20);
    vsr_config_t *c = NULL;
    int rc = vsr_config_load_file("tests/unit/configs/reference-v0.3-http.yaml", &c, &err);
    if (rc != VSR_OK)
        fprintf(stderr, "%.*s", (int)err.len, err.data);
    assert_int_equal(rc, VSR_OK);
    assert_string_equal(c->path, "tests/unit/configs/reference-v0.3-http.yaml");
    assert_string_equal(c->version, "v0.3");

    assert_int_equal(c->n_listeners, 1);
    assert_string_equal(c->listeners[0].name, "http-8899");
    assert_string_equal(c->listeners[0].address, "0.0.0.0");
    assert_int_equal(c->listeners[0].port, 8899);
    assert_int_equal(c->listeners[0].timeout_ms, 300000);

    assert_string_equal(c->default_model, "general-small");
    assert_int_equal(c->n_models, 3);
    const vsr_model_conf_t *m = &c->models[0];
    assert_string_equal(m->name, "general-small");
    assert_string_equal(m->provider_model_id, "general-small-instruct");
    assert_int_equal(m->n_backends, 2);
    assert_string_equal(m->backends[0].name, "small-primary");
    assert_string_equal(m->backends[0].host, "127.0.0.1");
    assert_int_equal(m->backends[0].port, 18000);
    assert_string_equal(m->backends[0].authority, "127.0.0.1:18000");
    assert_int_equal(m->backends[0].weight, 80);
    assert_int_equal(m->backends[1].weight, 20);
    assert_string_equal(m->backends[1].name, "small-secondary");

    m = &c->models[1];
    assert_string_equal(m->name, "general-large");
    assert_int_equal(m->n_backends, 1);
    assert_string_equal(m->backends[0].host, "llm.example.com");
    assert_int_equal(m->backends[0].port, 80);
    assert_int_equal(m->backends[0].tls, 0);
    assert_string_equal(m->backends[0].authority, "llm.example.com");
    assert_string_equal(m->backends[0].path_prefix, "/v1");
    assert_int_equal(m->backends[0].weight, 1);

    assert_string_equal(c->models[2].provider_model_id, "claude-compatible-1");
    assert_ptr_equal(vsr_config_default_model(c), &c->models[0]);

    static const char *const want[] = {
        "listeners[].api_keys",
        "listeners[].models",
        "providers.defaults.reasoning_effort",
        "providers.models[].api_format",
        "providers.models[].reasoning",
        "providers.models[].reliability",
        "providers.models[].pricing",
        "providers.models[].backend_refs[].provider",
        "providers.models[].backend_refs[].auth_header",
        "providers.models[].backend_refs[].auth_prefix",
        "providers.models[].backend_refs[].api_key_env",
        "providers.models[].backend_refs[].extra_headers",
        "routing",
        "recipes",
        "entrypoints",
        "global",
    };
    assert_int_equal(c->n_unimplemented, sizeof(want) / sizeof(want[0]));
    for (size_t i = 0; i < c->n_unimplemented; i++)
        assert_string_equal(c->unimplemented[i], want[i]);
    vsr_config_free(c);
    vsr_buf_free(&err);
}

/* The example verbatim has one https base_url: exactly that one error. */
static void test_reference_example_verbatim_needs_tls(void **state)
{
    vsr_buf_t err;
    vsr_buf_init(&err, 1 << 20);
    vsr_config_t *c = NULL;
    int rc = vsr_config_load_file("tests/unit/configs/reference-v0.3.yaml", &c, &err);
    assert_int_equal(rc, VSR_ERR_INVALID);
    assert_null(c);
    vsr_buf_append(&err, "", 1);
    assert_string_equal(err.data, "tests/unit/configs/reference-v0.3.yaml:48:21: upstream TLS is not supported yet\n");
    vsr_buf_free(&err);
}

static void test_full_fixture(void **state)
{
    vsr_buf_t err;
    vsr_buf_init(&err, 1 << 20);
    vsr_config_t *c = NULL;
    assert_int_equal(vsr_config_load_file("tests/unit/configs/full.yaml", &c, &err), VSR_OK);
    assert_int_equal(c->n_listeners, 2);
    const vsr_listener_conf_t *l = &c->listeners[0];
    assert_int_equal(l->timeout_ms, 1500);
    assert_int_equal(l->max_body_bytes, 1048576);
    assert_int_equal(l->max_connections, 1000);
    l = &c->listeners[1];
    assert_string_equal(l->address, "::1");
    assert_int_equal(l->port, 8899); /* same port, other address: fine */
    assert_int_equal(l->timeout_ms, 120000);
    assert_int_equal(l->max_body_bytes, VSR_DEFAULT_MAX_BODY_BYTES);

    assert_string_equal(c->default_model, "large");
    assert_ptr_equal(vsr_config_default_model(c), &c->models[1]);
    const vsr_model_conf_t *m = &c->models[0];
    assert_string_equal(m->provider_model_id, "small-instruct-v2");
    assert_string_equal(m->backends[0].name, "primary");
    assert_int_equal(m->backends[0].weight, 3);
    assert_string_equal(m->backends[1].name, "backend-2");
    assert_string_equal(m->backends[1].host, "fd00::2");
    assert_string_equal(m->backends[1].authority, "[fd00::2]:18000");
    m = &c->models[1];
    assert_string_equal(m->provider_model_id, "large");
    assert_string_equal(m->backends[0].name, "gateway");
    assert_string_equal(m->backends[0].host, "gateway.internal");
    assert_int_equal(m->backends[0].port, 8080);
    assert_string_equal(m->backends[0].authority, "gateway.internal:8080");
    assert_string_equal(m->backends[0].path_prefix, "/openai/v1");
    assert_int_equal(c->n_unimplemented, 0);
    vsr_config_free(c);
    vsr_buf_free(&err);
}

static void test_defaults(void **state)
{
    vsr_config_t *c = load_ok(HEAD LISTENERS PROVIDERS);
    assert_string_equal(c->path, "<string>");
    const vsr_listener_conf_t *l = &c->listeners[0];
    assert_string_equal(l->name, "l");
    assert_string_equal(l->address, "0.0.0.0");
    assert_int_equal(l->port, 8080);
    assert_int_equal(l->timeout_ms, VSR_DEFAULT_LISTENER_TIMEOUT_MS);
    assert_int_equal(l->timeout_ms, 300000);
    assert_int_equal(l->max_body_bytes, 500ull * 1024 * 1024);
    assert_int_equal(l->max_connections, 50000);

    assert_null(c->default_model);
    assert_int_equal(c->n_models, 1);
    const vsr_model_conf_t *m = &c->models[0];
    assert_string_equal(m->provider_model_id, "m");
    assert_int_equal(m->n_backends, 1);
    const vsr_backend_conf_t *b = &m->backends[0];
    assert_string_equal(b->name, "primary");
    assert_string_equal(b->host, "127.0.0.1");
    assert_int_equal(b->port, 8000);
    assert_int_equal(b->tls, 0);
    assert_string_equal(b->authority, "127.0.0.1:8000");
    assert_string_equal(b->path_prefix, "");
    assert_int_equal(b->weight, 1);
    assert_int_equal(c->n_unimplemented, 0);
    assert_null(c->unimplemented);
    assert_ptr_equal(vsr_config_default_model(c), m);
    vsr_config_free(c);
}

static void test_durations(void **state)
{
    static const struct {
        const char *text;
        uint64_t ms;
    } rows[] = {
        {"300s", 300000}, {"1.5s", 1500}, {"250ms", 250}, {"5m", 300000}, {"1h", 3600000}, {"42", 42000},
        {"\"7s\"", 7000},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        char yaml[512];
        snprintf(yaml, sizeof(yaml), HEAD LISTENERS "    timeout: %s\n" PROVIDERS, rows[i].text);
        vsr_config_t *c = load_ok(yaml);
        assert_int_equal(c->listeners[0].timeout_ms, rows[i].ms);
        vsr_config_free(c);
    }
}

static void test_default_model_spellings(void **state)
{
    static const char *const spellings[] = {"model", "default_model"};
    for (size_t i = 0; i < 2; i++) {
        char yaml[1024];
        snprintf(yaml, sizeof(yaml),
                 HEAD LISTENERS
                 "providers:\n"
                 "  defaults:\n"
                 "    %s: b\n"
                 "  models:\n"
                 "    - {name: a, backend_refs: [{endpoint: a}]}\n"
                 "    - {name: b, backend_refs: [{endpoint: b}]}\n",
                 spellings[i]);
        vsr_config_t *c = load_ok(yaml);
        assert_string_equal(c->default_model, "b");
        assert_ptr_equal(vsr_config_default_model(c), &c->models[1]);
        assert_ptr_equal(vsr_config_find_model(c, vsr_slice_cstr("a")), &c->models[0]);
        assert_ptr_equal(vsr_config_find_model(c, vsr_slice("bee", 1)), &c->models[1]);
        assert_null(vsr_config_find_model(c, vsr_slice_cstr("c")));
        assert_null(vsr_config_find_model(c, vsr_slice_cstr("")));
        vsr_config_free(c);
    }
}

static void test_unimplemented_paths(void **state)
{
    vsr_config_t *c = load_ok(
        HEAD
        "global: {router: {strategy: priority}}\n"
        "listeners:\n"
        "  - {name: a, port: 1, tls: {cert_file: c, key_file: k}, api_keys: []}\n"
        "  - {name: b, port: 2, tls: {cert_file: c, key_file: k}, identity: {trust_headers: true}}\n"
        "providers:\n"
        "  defaults: {default_reasoning_effort: high, reasoning_families: {q: {type: x, parameter: y}}}\n"
        "  models:\n"
        "    - name: m\n"
        "      catalog: c1\n"
        "      external_model_ids: {openai: x}\n"
        "      deployment: {}\n"
        "      backend_refs: [{endpoint: a, type: chat, api_key: k, chat_path: /c, api_version: v}]\n"
        "evaluation: {records: [{model: m}]}\n"
        "routing:\n"
        "entrypoints: []\n");
    static const char *const want[] = {
        "global",
        "listeners[].tls",
        "listeners[].identity",
        "providers.defaults.default_reasoning_effort",
        "providers.defaults.reasoning_families",
        "providers.models[].catalog",
        "providers.models[].external_model_ids",
        "providers.models[].backend_refs[].type",
        "providers.models[].backend_refs[].api_key",
        "providers.models[].backend_refs[].chat_path",
        "providers.models[].backend_refs[].api_version",
        "evaluation",
    };
    /* empty values (api_keys: [], deployment: {}, routing: null) configure
     * nothing and are not reported; listeners[].tls appears once */
    assert_int_equal(c->n_unimplemented, sizeof(want) / sizeof(want[0]));
    for (size_t i = 0; i < c->n_unimplemented; i++)
        assert_string_equal(c->unimplemented[i], want[i]);
    vsr_config_warn_unimplemented(c);
    vsr_config_free(c);
}

/* Anchors and aliases are resolved (shared, not copied). */
static void test_aliases_resolved(void **state)
{
    vsr_config_t *c = load_ok(
        HEAD LISTENERS
        "providers:\n"
        "  models:\n"
        "    - name: a\n"
        "      backend_refs: &refs\n"
        "        - {endpoint: \"10.0.0.1:9000\", weight: 2}\n"
        "        - {endpoint: \"10.0.0.2:9000\"}\n"
        "    - name: b\n"
        "      backend_refs: *refs\n");
    assert_int_equal(c->n_models, 2);
    assert_int_equal(c->models[1].n_backends, 2);
    assert_string_equal(c->models[1].backends[0].host, "10.0.0.1");
    assert_int_equal(c->models[1].backends[0].weight, 2);
    assert_string_equal(c->models[1].backends[1].name, "backend-2");
    vsr_config_free(c);
}

static void test_explicit_tags(void **state)
{
    vsr_config_t *c = load_ok(
        HEAD
        "listeners:\n"
        "  - name: !!str 8080\n"
        "    port: !!int \"8081\"\n"
        "providers:\n"
        "  models:\n"
        "    - name: ! 12\n"
        "      backend_refs: !!seq [{endpoint: h}]\n");
    assert_string_equal(c->listeners[0].name, "8080");
    assert_int_equal(c->listeners[0].port, 8081);
    assert_string_equal(c->models[0].name, "12");
    vsr_config_free(c);
}

/* ---- endpoint / base_url ------------------------------------------------- */

static void test_endpoint_table(void **state)
{
    static const struct {
        const char *item;
        const char *host;
        uint16_t port;
        const char *authority;
        const char *path_prefix;
    } rows[] = {
        {"endpoint: 127.0.0.1:18000", "127.0.0.1", 18000, "127.0.0.1:18000", ""},
        {"endpoint: vllm", "vllm", 80, "vllm", ""},
        {"endpoint: vllm:80", "vllm", 80, "vllm", ""},
        {"endpoint: my_svc.ns.svc:8000", "my_svc.ns.svc", 8000, "my_svc.ns.svc:8000", ""},
        {"endpoint: \"[::1]:8000\"", "::1", 8000, "[::1]:8000", ""},
        {"endpoint: \"[2001:db8::1]\"", "2001:db8::1", 80, "[2001:db8::1]", ""},
        {"{endpoint: \"h:443\", protocol: http}", "h", 443, "h:443", ""},
        {"base_url: http://h", "h", 80, "h", ""},
        {"base_url: http://h/", "h", 80, "h", ""},
        {"base_url: http://h:9/openai/v1/", "h", 9, "h:9", "/openai/v1"},
        {"base_url: http://api.x.com/v1", "api.x.com", 80, "api.x.com", "/v1"},
        {"base_url: HTTP://H.example:80/a//", "H.example", 80, "H.example", "/a"},
        {"base_url: \"http://[::1]:8080/v1\"", "::1", 8080, "[::1]:8080", "/v1"},
        {"{base_url: \"http://h:81\", protocol: http}", "h", 81, "h:81", ""},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        char yaml[1024];
        snprintf(yaml, sizeof(yaml), HEAD LISTENERS PROVIDERS_OPEN "        - %s\n", rows[i].item);
        vsr_config_t *c = load_ok(yaml);
        const vsr_backend_conf_t *b = &c->models[0].backends[0];
        assert_string_equal(b->host, rows[i].host);
        assert_int_equal(b->port, rows[i].port);
        assert_int_equal(b->tls, 0);
        assert_string_equal(b->authority, rows[i].authority);
        assert_string_equal(b->path_prefix, rows[i].path_prefix);
        vsr_config_free(c);
    }
}

static void test_endpoint_errors(void **state)
{
    static const struct {
        const char *item;
        const char *error;
    } rows[] = {
        {"endpoint: \"h:0\"", "t.yaml:9:21: invalid endpoint \"h:0\": port must be an integer between 1 and 65535\n"},
        {"endpoint: \"h:65536\"",
         "t.yaml:9:21: invalid endpoint \"h:65536\": port must be an integer between 1 and 65535\n"},
        {"endpoint: \"h:\"", "t.yaml:9:21: invalid endpoint \"h:\": empty port\n"},
        {"endpoint: \":80\"", "t.yaml:9:21: invalid endpoint \":80\": missing host\n"},
        {"endpoint: \"h:x\"", "t.yaml:9:21: invalid endpoint \"h:x\": port must be an integer between 1 and 65535\n"},
        {"endpoint: \"::1\"",
         "t.yaml:9:21: invalid endpoint \"::1\": IPv6 addresses must be written in brackets, e.g. \"[::1]:8000\"\n"},
        {"endpoint: \"[::1\"", "t.yaml:9:21: invalid endpoint \"[::1\": missing ']' after the IPv6 address\n"},
        {"endpoint: \"[::1]8\"", "t.yaml:9:21: invalid endpoint \"[::1]8\": expected ':' after ']'\n"},
        {"endpoint: \"[h]:1\"", "t.yaml:9:21: invalid endpoint \"[h]:1\": invalid IPv6 address in brackets\n"},
        {"endpoint: \"a b\"", "t.yaml:9:21: invalid endpoint \"a b\": invalid host name\n"},
        {"endpoint: \"http://h:1\"",
         "t.yaml:9:21: invalid endpoint \"http://h:1\": expected host[:port] without a scheme (use base_url for URLs)\n"},
        {"endpoint: \"h:1/v1\"", "t.yaml:9:21: invalid endpoint \"h:1/v1\": expected host[:port] without a path\n"},
        {"endpoint: \"\"", "t.yaml:9:21: endpoint must not be empty\n"},
        {"endpoint: 8080", "t.yaml:9:21: expected a string, got an integer\n"},
        {"base_url: ftp://h", "t.yaml:9:21: invalid base_url \"ftp://h\": the scheme must be http:// or https://\n"},
        {"base_url: h:80", "t.yaml:9:21: invalid base_url \"h:80\": the scheme must be http:// or https://\n"},
        {"base_url: http://", "t.yaml:9:21: invalid base_url \"http://\": missing host\n"},
        {"base_url: http://u:p@h/v1",
         "t.yaml:9:21: invalid base_url \"http://u:p@h/v1\": user info (user@host) is not allowed; use api_key / "
         "auth_header\n"},
        {"base_url: http://h/v1?x=1", "t.yaml:9:21: invalid base_url \"http://h/v1?x=1\": a query or fragment is not allowed\n"},
        {"base_url: \"http://h/a b\"",
         "t.yaml:9:21: invalid base_url \"http://h/a b\": the path must be printable ASCII without spaces "
         "(percent-encode the rest)\n"},
        {"base_url: https://api.x.com/v1", "t.yaml:9:21: upstream TLS is not supported yet\n"},
        {"{endpoint: h, protocol: https}", "t.yaml:9:35: upstream TLS is not supported yet\n"},
        {"{endpoint: h, protocol: HTTP}", "t.yaml:9:35: protocol must be \"http\" or \"https\", got \"HTTP\"\n"},
        {"{endpoint: h, base_url: \"http://h\"}", "t.yaml:9:35: set either endpoint or base_url, not both\n"},
        {"{name: x}", "t.yaml:9:11: missing required key \"endpoint\" (or \"base_url\")\n"},
        {"{endpoint: h, weight: 0}", "t.yaml:9:33: weight must be between 1 and 1000000, got 0\n"},
        {"{endpoint: h, weight: -1}", "t.yaml:9:33: weight must be between 1 and 1000000, got -1\n"},
        {"{endpoint: h, weight: 1.5}", "t.yaml:9:33: expected an integer, got a float\n"},
        {"{endpoint: h, name: \"\"}", "t.yaml:9:31: name must not be empty\n"},
        {"{endpoint: h, bogus: 1}", "t.yaml:9:25: unknown key \"bogus\"\n"},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++)
        expect_backend_error(rows[i].item, rows[i].error);
}

static void test_backend_names(void **state)
{
    vsr_config_t *c = load_ok(HEAD LISTENERS PROVIDERS_OPEN
                              "        - endpoint: a\n"
                              "        - {name: named, endpoint: b}\n"
                              "        - endpoint: c\n");
    assert_string_equal(c->models[0].backends[0].name, "primary");
    assert_string_equal(c->models[0].backends[1].name, "named");
    assert_string_equal(c->models[0].backends[2].name, "backend-3");
    vsr_config_free(c);

    expect_errors(HEAD LISTENERS PROVIDERS_OPEN
                  "        - {name: x, endpoint: a}\n"
                  "        - {name: x, endpoint: b}\n"
                  "        - endpoint: c\n"
                  "        - {name: backend-3, endpoint: d}\n",
                  "t.yaml:10:18: duplicate backend name \"x\" (first defined at 9:18)\n"
                  "t.yaml:12:18: duplicate backend name \"backend-3\" (first defined at 11:11)\n");
}

/* ---- errors ---------------------------------------------------------------- */

static void test_type_errors(void **state)
{
    expect_errors(HEAD
                  "listeners:\n"
                  "  - name: l\n"
                  "    port: \"8080\"\n" PROVIDERS,
                  "t.yaml:4:11: expected an integer, got a string (\"8080\" is quoted)\n");
    expect_errors(HEAD
                  "listeners:\n"
                  "  - name: true\n"
                  "    port:\n" PROVIDERS,
                  "t.yaml:3:11: expected a string, got a boolean\n"
                  "t.yaml:4:10: expected an integer, got null\n");
    expect_errors(HEAD "listeners: {name: l, port: 1}\n" PROVIDERS, "t.yaml:2:12: expected a list, got a mapping\n");
    expect_errors(HEAD "listeners: [l]\n" PROVIDERS, "t.yaml:2:13: expected a mapping, got a string\n");
    expect_errors(HEAD LISTENERS "providers: models\n", "t.yaml:5:12: expected a mapping, got a string\n");
    expect_errors(HEAD LISTENERS "providers: {models: {name: m}}\n", "t.yaml:5:21: expected a list, got a mapping\n");
    expect_errors(HEAD LISTENERS "providers: {defaults: [], models: [{name: m, backend_refs: [{endpoint: h}]}]}\n",
                  "t.yaml:5:23: expected a mapping, got a list\n");
    expect_errors(HEAD LISTENERS "    timeout: true\n" PROVIDERS,
                  "t.yaml:5:14: expected a duration (e.g. \"300s\") or a number of seconds, got a boolean\n");
    expect_errors(HEAD LISTENERS "    max_connections: 1e3\n" PROVIDERS,
                  "t.yaml:5:22: expected an integer, got a float\n");
    expect_errors(HEAD LISTENERS "    ? [a]\n    : 1\n" PROVIDERS, "t.yaml:5:7: expected a string key, got a list\n");
    /* the quoting hint only where dropping the quotes would give the expected type */
    expect_errors(HEAD "listeners: [{name: a, port: 'http'}]\n" PROVIDERS,
                  "t.yaml:2:29: expected an integer, got a string\n");
    expect_errors(HEAD "listeners: \"[]\"\n" PROVIDERS, "t.yaml:2:12: expected a list, got a string\n");
    expect_errors("|\n  version: v0.3\n", "t.yaml:1:1: expected a mapping, got a string\n");
}

static void test_value_errors(void **state)
{
    expect_errors(HEAD LISTENERS "    address: localhost\n" PROVIDERS,
                  "t.yaml:5:14: address must be an IPv4 or IPv6 address, got \"localhost\"\n");
    expect_errors(HEAD LISTENERS "    address: \"[::1]\"\n" PROVIDERS,
                  "t.yaml:5:14: address must be an IPv4 or IPv6 address, got \"[::1]\"\n");
    /* a bad address is not taken for the default: no follow-on duplicate */
    expect_errors(HEAD
                  "listeners:\n"
                  "  - {name: a, port: 80, address: my-host}\n"
                  "  - {name: b, port: 80}\n" PROVIDERS,
                  "t.yaml:3:34: address must be an IPv4 or IPv6 address, got \"my-host\"\n");
    expect_errors(HEAD
                  "listeners:\n"
                  "  - {name: a, port: 0}\n"
                  "  - {name: b, port: 65536}\n"
                  "  - {name: c, port: 99999999999999999999}\n"
                  "  - {name: d, port: -1}\n" PROVIDERS,
                  "t.yaml:3:21: port must be between 1 and 65535, got 0\n"
                  "t.yaml:4:21: port must be between 1 and 65535, got 65536\n"
                  "t.yaml:5:21: port must be between 1 and 65535, got 99999999999999999999\n"
                  "t.yaml:6:21: port must be between 1 and 65535, got -1\n");
    expect_errors(HEAD LISTENERS "    timeout: 5 seconds\n" PROVIDERS,
                  "t.yaml:5:14: invalid duration \"5 seconds\" (use e.g. \"300s\", \"1.5s\", \"250ms\", \"5m\", \"1h\")\n");
    expect_errors(HEAD LISTENERS "    timeout: 0s\n" PROVIDERS, "t.yaml:5:14: timeout must be greater than 0\n");
    expect_errors(HEAD LISTENERS "    timeout: 0\n" PROVIDERS,
                  "t.yaml:5:14: timeout must be between 1 and 1000000000 seconds, got 0\n");
    expect_errors(HEAD LISTENERS "    max_request_body_bytes: 0\n    max_connections: 4294967296\n" PROVIDERS,
                  "t.yaml:5:29: max_request_body_bytes must be at least 1, got 0\n"
                  "t.yaml:6:22: max_connections must be between 1 and 4294967295, got 4294967296\n");
    expect_errors(HEAD LISTENERS "    name: \"a\\nb\"\n" PROVIDERS,
                  "t.yaml:5:5: duplicate key \"name\" (first at 3:5)\n");
    expect_errors(HEAD "listeners: [{name: \"a\\r\\nb\", port: 1}]\n" PROVIDERS,
                  "t.yaml:2:20: name must not contain control characters\n");
}

static void test_version(void **state)
{
    expect_errors("version: v0.2\n" LISTENERS PROVIDERS, "t.yaml:1:10: unsupported version \"v0.2\" (vsr reads \"v0.3\")\n");
    expect_errors("version: 0.3\n" LISTENERS PROVIDERS, "t.yaml:1:10: expected the string \"v0.3\", got a float\n");
    expect_errors("version: \"v0.3\\0\"\n" LISTENERS PROVIDERS,
                  "t.yaml:1:10: unsupported version \"v0.3\\x00\" (vsr reads \"v0.3\")\n");
    vsr_config_t *c = load_ok("version: 'v0.3'\n" LISTENERS PROVIDERS);
    vsr_config_free(c);
}

static void test_missing_required(void **state)
{
    expect_errors("listeners: []\n"
                  "providers: {}\n",
                  "t.yaml:1:12: listeners must not be empty\n"
                  "t.yaml:2:12: missing required key \"models\"\n"
                  "t.yaml:1:1: missing required key \"version\"\n");
    expect_errors(HEAD, "t.yaml:1:1: missing required key \"listeners\"\n"
                        "t.yaml:1:1: missing required key \"providers\"\n");
    expect_errors(HEAD
                  "listeners:\n"
                  "  - address: 127.0.0.1\n" PROVIDERS,
                  "t.yaml:3:5: missing required key \"name\"\n"
                  "t.yaml:3:5: missing required key \"port\"\n");
    expect_errors(HEAD LISTENERS
                  "providers:\n"
                  "  models:\n"
                  "    - provider_model_id: x\n"
                  "    - name: y\n"
                  "      backend_refs: []\n",
                  "t.yaml:7:7: missing required key \"name\"\n"
                  "t.yaml:7:7: missing required key \"backend_refs\"\n"
                  "t.yaml:9:21: backend_refs must not be empty\n");
    expect_errors(HEAD LISTENERS "providers:\n  models: []\n", "t.yaml:6:11: models must not be empty\n");
}

static void test_unknown_keys(void **state)
{
    expect_errors(HEAD LISTENERS "    listen: 1\n" PROVIDERS "extra: 1\n"
                  "providers_: 2\n",
                  "t.yaml:5:5: unknown key \"listen\"\n"
                  "t.yaml:11:1: unknown key \"extra\"\n"
                  "t.yaml:12:1: unknown key \"providers_\"\n");
    expect_errors(HEAD LISTENERS PROVIDERS "      loras: [{name: x}]\n"
                                           "  default: {model: m}\n",
                  "t.yaml:10:7: unknown key \"loras\"\n"
                  "t.yaml:11:3: unknown key \"default\"\n");
    expect_errors(HEAD LISTENERS PROVIDERS "  defaults: {modle: m}\n", "t.yaml:10:14: unknown key \"modle\"\n");
    expect_errors(HEAD LISTENERS PROVIDERS "<<: {a: 1}\n", "t.yaml:10:1: merge keys (<<) are not supported\n");
}

static void test_default_model_checks(void **state)
{
    expect_errors(HEAD LISTENERS PROVIDERS "  defaults:\n"
                                           "    model: m\n"
                                           "    default_model: m\n",
                  "t.yaml:12:5: \"model\" and \"default_model\" are the same setting (first at 11:5); set only one\n");
    expect_errors(HEAD LISTENERS PROVIDERS "  defaults:\n"
                                           "    default_model: nope\n",
                  "t.yaml:11:20: default model \"nope\" is not defined in providers.models\n");
    expect_errors(HEAD LISTENERS PROVIDERS "  defaults:\n"
                                           "    reasoning_effort: low\n"
                                           "    default_reasoning_effort: high\n",
                  "t.yaml:12:5: \"reasoning_effort\" and \"default_reasoning_effort\" are the same setting (first at "
                  "11:5); set only one\n");
}

static void test_duplicates(void **state)
{
    expect_errors(HEAD HEAD LISTENERS PROVIDERS, "t.yaml:2:1: duplicate key \"version\" (first at 1:1)\n");
    /* duplicates are found in unimplemented subtrees too */
    expect_errors(HEAD LISTENERS PROVIDERS "routing:\n"
                                           "  strategy: priority\n"
                                           "  strategy: confidence\n",
                  "t.yaml:12:3: duplicate key \"strategy\" (first at 11:3)\n");
    expect_errors(HEAD
                  "listeners:\n"
                  "  - {name: a, port: 80}\n"
                  "  - {name: a, port: 81}\n"
                  "  - {name: b, port: 80, address: 0.0.0.0}\n"
                  "  - {name: c, port: 80, address: \"::\"}\n"
                  "  - {name: d, port: 80, address: \"0:0::0\"}\n"
                  "  - {name: e, port: 80, address: 127.0.0.1}\n" PROVIDERS,
                  "t.yaml:4:12: duplicate listener name \"a\" (first defined at 3:12)\n"
                  "t.yaml:5:21: duplicate listener address \"0.0.0.0:80\" (first defined at 3:21)\n"
                  "t.yaml:7:21: duplicate listener address \"[::]:80\" (first defined at 6:21)\n");
    expect_errors(HEAD LISTENERS
                  "providers:\n"
                  "  models:\n"
                  "    - {name: m, backend_refs: [{endpoint: a}]}\n"
                  "    - {name: m, backend_refs: [{endpoint: b}]}\n",
                  "t.yaml:8:14: duplicate model name \"m\" (first defined at 7:14)\n");
}

static void test_several_errors_in_one_run(void **state)
{
    expect_errors("version: v0.4\n"
                  "listeners:\n"
                  "  - name: a\n"
                  "    port: \"80\"\n"
                  "    timeout: forever\n"
                  "  - name: a\n"
                  "    port: 81\n"
                  "    colour: blue\n"
                  "providers:\n"
                  "  defaults: {model: ghost}\n"
                  "  models:\n"
                  "    - name: m\n"
                  "      weight: 3\n"
                  "      backend_refs:\n"
                  "        - endpoint: \"h:99999\"\n"
                  "        - base_url: https://x\n",
                  "t.yaml:1:10: unsupported version \"v0.4\" (vsr reads \"v0.3\")\n"
                  "t.yaml:4:11: expected an integer, got a string (\"80\" is quoted)\n"
                  "t.yaml:5:14: invalid duration \"forever\" (use e.g. \"300s\", \"1.5s\", \"250ms\", \"5m\", \"1h\")\n"
                  "t.yaml:8:5: unknown key \"colour\"\n"
                  "t.yaml:13:7: unknown key \"weight\"\n"
                  "t.yaml:15:21: invalid endpoint \"h:99999\": port must be an integer between 1 and 65535\n"
                  "t.yaml:16:21: upstream TLS is not supported yet\n"
                  "t.yaml:10:21: default model \"ghost\" is not defined in providers.models\n"
                  "t.yaml:6:11: duplicate listener name \"a\" (first defined at 3:11)\n");
}

static void test_error_cap(void **state)
{
    vsr_buf_t doc, want;
    vsr_buf_init(&doc, 0);
    vsr_buf_init(&want, 0);
    vsr_buf_append_cstr(&doc, HEAD LISTENERS PROVIDERS);
    for (int i = 0; i < 60; i++) {
        vsr_buf_printf(&doc, "k%d: 1\n", i);
        if (i < 50)
            vsr_buf_printf(&want, "t.yaml:%d:1: unknown key \"k%d\"\n", 10 + i, i);
    }
    vsr_buf_append_cstr(&want, "t.yaml:60:1: too many errors; the rest are not shown\n");
    vsr_buf_append(&doc, "", 1);
    vsr_buf_append(&want, "", 1);
    expect_errors(doc.data, want.data);
    vsr_buf_free(&doc);
    vsr_buf_free(&want);
}

/* ---- YAML-level problems ------------------------------------------------------ */

static void test_yaml_syntax_errors(void **state)
{
    expect_errors(HEAD "listeners: [a, b\n", "t.yaml:3:1: did not find expected ',' or ']' (while parsing a flow "
                                               "sequence at 2:12)\n");
    expect_errors(HEAD "listeners: a: b\n", "t.yaml:2:13: mapping values are not allowed in this context\n");
    expect_errors(HEAD "listeners:\n  - a\n b: 1\n", "t.yaml:4:2: did not find expected key (while parsing a block "
                                                     "mapping at 1:1)\n");
    expect_errors(HEAD "x: \"\\q\"\n", "t.yaml:2:5: found unknown escape character (while parsing a quoted scalar at "
                                       "2:4)\n");
    /* invalid UTF-8 comes from the reader: a byte offset turned into line/col */
    expect_errors(HEAD "x: \xff\n", "t.yaml:2:4: invalid leading UTF-8 octet (byte 0xff)\n");
    expect_errors(HEAD "x: \x01\n", "t.yaml:2:4: control characters are not allowed (byte 0x01)\n");
}

static void test_document_shape(void **state)
{
    expect_errors("", "t.yaml:1:1: the document is empty\n");
    expect_errors("# just a comment\n\n", "t.yaml:1:1: the document is empty\n");
    expect_errors("---\n", "t.yaml:2:1: the document is empty\n");
    expect_errors("~\n", "t.yaml:1:1: the document is empty\n");
    expect_errors("- a\n", "t.yaml:1:1: expected a mapping, got a list\n");
    expect_errors("v0.3\n", "t.yaml:1:1: expected a mapping, got a string\n");
    expect_errors(HEAD LISTENERS PROVIDERS "---\n" HEAD,
                  "t.yaml:10:1: multiple YAML documents in one file are not supported\n");
    expect_errors(HEAD LISTENERS PROVIDERS "...\n---\n" HEAD,
                  "t.yaml:11:1: multiple YAML documents in one file are not supported\n");
    /* a NULL/empty buffer is an empty document, not a crash */
    vsr_buf_t err;
    vsr_buf_init(&err, 0);
    vsr_config_t *c = NULL;
    assert_int_equal(vsr_config_load_string(NULL, NULL, 0, &c, &err), VSR_ERR_INVALID);
    vsr_buf_append(&err, "", 1);
    assert_string_equal(err.data, "<string>:1:1: the document is empty\n");
    vsr_buf_free(&err);
}

static void test_alias_errors(void **state)
{
    expect_errors(HEAD LISTENERS PROVIDERS "routing: *nope\n", "t.yaml:10:10: undefined alias \"nope\"\n");
    expect_errors(HEAD LISTENERS PROVIDERS "routing: &r {a: [*r]}\n",
                  "t.yaml:10:18: alias \"r\" refers to a node that contains it\n");
    /* exponential expansion is refused, not computed */
    expect_errors(HEAD LISTENERS PROVIDERS "global:\n"
                                           "  a: &a [x, x, x, x, x, x, x, x, x, x]\n"
                                           "  b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
                                           "  c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]\n"
                                           "  d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]\n"
                                           "  e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]\n"
                                           "  f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e, *e]\n",
                  "t.yaml:15:38: aliases expand to more than 100000 nodes\n");
}

static void test_tag_errors(void **state)
{
    expect_errors(HEAD LISTENERS "    max_connections: !!int many\n" PROVIDERS,
                  "t.yaml:5:22: \"many\" is not a valid \"!!int\" value\n"
                  "t.yaml:5:22: expected an integer, got a string\n");
    expect_errors(HEAD LISTENERS PROVIDERS "routing: !custom {a: 1}\n", "t.yaml:10:10: unsupported tag \"!custom\"\n");
    expect_errors(HEAD LISTENERS PROVIDERS "routing: !!binary aGVsbG8=\n",
                  "t.yaml:10:10: unsupported tag \"!!binary\"\n");
}

/* ---- files ------------------------------------------------------------------------- */

static void test_file_errors(void **state)
{
    vsr_buf_t err;
    vsr_buf_init(&err, 0);
    vsr_config_t *c = (vsr_config_t *)0x1;
    assert_int_equal(vsr_config_load_file("tests/unit/configs/does-not-exist.yaml", &c, &err), VSR_ERR_IO);
    assert_null(c);
    vsr_buf_append(&err, "", 1);
    assert_string_equal(err.data, "tests/unit/configs/does-not-exist.yaml: No such file or directory\n");
    vsr_buf_reset(&err);
    assert_int_equal(vsr_config_load_file("tests/unit/configs", &c, &err), VSR_ERR_IO);
    vsr_buf_append(&err, "", 1);
    assert_string_equal(err.data, "tests/unit/configs: Is a directory\n");
    vsr_buf_free(&err);
    /* err may be NULL: the result code alone */
    assert_int_equal(vsr_config_load_file("tests/unit/configs/does-not-exist.yaml", &c, NULL), VSR_ERR_IO);
    assert_int_equal(vsr_config_load_string("x", "a: 1", 4, &c, NULL), VSR_ERR_INVALID);
    vsr_config_free(NULL);
}

/* Messages of a file load name the file. */
static void test_file_error_names_file(void **state)
{
    char path[] = "/tmp/vsr-test-config-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    const char *doc = HEAD LISTENERS "    port: 1\n" PROVIDERS;
    assert_int_equal(write(fd, doc, strlen(doc)), (ssize_t)strlen(doc));
    close(fd);
    vsr_buf_t err, want;
    vsr_buf_init(&err, 0);
    vsr_buf_init(&want, 0);
    vsr_config_t *c = NULL;
    assert_int_equal(vsr_config_load_file(path, &c, &err), VSR_ERR_INVALID);
    vsr_buf_printf(&want, "%s:5:5: duplicate key \"port\" (first at 4:5)\n", path);
    vsr_buf_append(&err, "", 1);
    vsr_buf_append(&want, "", 1);
    assert_string_equal(err.data, want.data);
    unlink(path);
    vsr_buf_free(&err);
    vsr_buf_free(&want);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reference_example),
        cmocka_unit_test(test_reference_example_verbatim_needs_tls),
        cmocka_unit_test(test_full_fixture),
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_durations),
        cmocka_unit_test(test_default_model_spellings),
        cmocka_unit_test(test_unimplemented_paths),
        cmocka_unit_test(test_aliases_resolved),
        cmocka_unit_test(test_explicit_tags),
        cmocka_unit_test(test_endpoint_table),
        cmocka_unit_test(test_endpoint_errors),
        cmocka_unit_test(test_backend_names),
        cmocka_unit_test(test_type_errors),
        cmocka_unit_test(test_value_errors),
        cmocka_unit_test(test_version),
        cmocka_unit_test(test_missing_required),
        cmocka_unit_test(test_unknown_keys),
        cmocka_unit_test(test_default_model_checks),
        cmocka_unit_test(test_duplicates),
        cmocka_unit_test(test_several_errors_in_one_run),
        cmocka_unit_test(test_error_cap),
        cmocka_unit_test(test_yaml_syntax_errors),
        cmocka_unit_test(test_document_shape),
        cmocka_unit_test(test_alias_errors),
        cmocka_unit_test(test_tag_errors),
        cmocka_unit_test(test_file_errors),
        cmocka_unit_test(test_file_error_names_file),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
