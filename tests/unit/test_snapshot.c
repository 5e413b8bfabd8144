/* Configuration versions: canonical form and hash, the history of 10,
 * rollback semantics, restart-required, the snapshot's drain (the engine's
 * last reference frees its parts), the admin pipeline and API, and the
 * identity-keyed reuse of upstream state across versions. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "admin/admin.h"
#include "config/config.h"
#include "routing/routing.h"
#include "upstream/upstream.h"

static const char *DOC =
    "version: v0.3\n"
    "listeners:\n"
    "  - {name: l1, address: 127.0.0.1, port: 18899, api_keys: [k1]}\n"
    "providers:\n"
    "  models:\n"
    "    - name: small   # a comment\n"
    "      backend_refs: [{endpoint: '127.0.0.1:1'}]\n"
    "    - name: large\n"
    "      backend_refs: [{endpoint: '127.0.0.1:2', api_key: sk-live}]\n";

/* The same document, written differently. */
static const char *DOC_REFORMATTED =
    "version: \"v0.3\"\n"
    "listeners: [{name: l1, address: \"127.0.0.1\", port: 18899, api_keys: [\"k1\"]}]\n"
    "providers:\n"
    "  models:\n"
    "  - name: small\n"
    "    backend_refs:\n"
    "    - endpoint: 127.0.0.1:1\n"
    "  - {name: large, backend_refs: [{endpoint: 127.0.0.1:2, api_key: sk-live}]}\n";

static char *with(const char *from, const char *to)
{
    const char *p = strstr(DOC, from);
    assert_non_null(p);
    size_t n = strlen(DOC) - strlen(from) + strlen(to) + 1;
    char *s = malloc(n);
    snprintf(s, n, "%.*s%s%s", (int)(p - DOC), DOC, to, p + strlen(from));
    return s;
}

static void canon_hash(const char *doc, char hash[VSR_CONFIG_HASH_LEN])
{
    vsr_buf_t out, err;
    vsr_buf_init(&out, 0);
    vsr_buf_init(&err, 0);
    assert_int_equal(vsr_config_canonical("t", doc, strlen(doc), &out, &err), VSR_OK);
    vsr_config_hash(out.data, out.len, hash);
    vsr_buf_free(&out);
    vsr_buf_free(&err);
}

static void test_hash_is_sha256(void **state)
{
    (void)state;
    char h[VSR_CONFIG_HASH_LEN];
    vsr_config_hash("abc", 3, h);
    assert_string_equal(h, "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

/* A second YAML document is not part of the canonical form (the loader
 * reads only the first, as the reference does): the hash is the first's. */
static void test_canonical_reads_the_first_document(void **state)
{
    (void)state;
    char a[VSR_CONFIG_HASH_LEN], b[VSR_CONFIG_HASH_LEN];
    canon_hash(DOC, a);
    size_t n = strlen(DOC) + 64;
    char *two = malloc(n);
    snprintf(two, n, "%s---\nversion: v0.3\nother: [1\n", DOC);
    canon_hash(two, b);
    assert_string_equal(a, b);
    free(two);
}

static void test_canonical_ignores_formatting(void **state)
{
    (void)state;
    char a[VSR_CONFIG_HASH_LEN], b[VSR_CONFIG_HASH_LEN], c[VSR_CONFIG_HASH_LEN];
    canon_hash(DOC, a);
    canon_hash(DOC_REFORMATTED, b);
    assert_string_equal(a, b);
    char *changed = with("port: 18899", "port: 18898");
    canon_hash(changed, c);
    assert_string_not_equal(a, c);
    free(changed);

    /* the canonical form is itself a document that loads */
    vsr_buf_t out, err;
    vsr_buf_init(&out, 0);
    vsr_buf_init(&err, 0);
    assert_int_equal(vsr_config_canonical("t", DOC, strlen(DOC), &out, &err), VSR_OK);
    vsr_config_t *cfg = NULL;
    assert_int_equal(vsr_config_load_string("canon", out.data, out.len, &cfg, &err), VSR_OK);
    assert_int_equal(cfg->n_models, 2);
    assert_string_equal(cfg->models[1].backends[0].api_key, "sk-live");
    vsr_config_free(cfg);

    /* characters YAML refuses or folds are escaped as themselves, so the
     * canonical form reads back to the same form */
    static const char odd[] = "a: \"x\\uFFFE\\uFFFFy\\u2028\\u0085\"\n";
    vsr_buf_reset(&out);
    assert_int_equal(vsr_config_canonical("t", odd, strlen(odd), &out, &err), VSR_OK);
    assert_non_null(strstr(out.data, "x\\ufffe\\uffffy\\u2028\\u0085"));
    vsr_buf_t again;
    vsr_buf_init(&again, 0);
    assert_int_equal(vsr_config_canonical("t", out.data, out.len, &again, &err), VSR_OK);
    assert_int_equal(again.len, out.len);
    assert_memory_equal(again.data, out.data, out.len);
    vsr_buf_free(&again);

    /* a syntax error is reported with its line and column */
    vsr_buf_reset(&out);
    assert_int_equal(vsr_config_canonical("bad.yaml", "a: [1,\n", 7, &out, &err), VSR_ERR_INVALID);
    assert_non_null(strstr(err.data, "bad.yaml:2:1: "));
    vsr_buf_free(&out);
    vsr_buf_free(&err);
}

static void test_history_keeps_ten_and_never_reuses(void **state)
{
    (void)state;
    vsr_config_history_t h;
    vsr_config_history_init(&h);
    for (int i = 1; i <= 12; i++) {
        char hash[VSR_CONFIG_HASH_LEN];
        snprintf(hash, sizeof(hash), "sha256:%d", i % 3); /* contents repeat; versions do not */
        assert_int_equal(vsr_config_history_push(&h, hash, "api", 1.0 * i, "doc", 3), (uint64_t)i);
    }
    assert_int_equal(h.n, VSR_CONFIG_HISTORY);
    assert_null(vsr_config_history_find(&h, 1));
    assert_null(vsr_config_history_find(&h, 2));
    assert_non_null(vsr_config_history_find(&h, 3));
    assert_int_equal(vsr_config_history_active(&h)->version, 12);
    assert_string_equal(vsr_config_history_find(&h, 12)->hash, "sha256:0");
    assert_string_equal(vsr_config_history_find(&h, 9)->hash, "sha256:0");
    vsr_config_history_free(&h);
}

static void test_restart_required(void **state)
{
    (void)state;
    vsr_buf_t err, why;
    vsr_buf_init(&err, 0);
    vsr_buf_init(&why, 0);
    vsr_config_t *a = NULL, *b = NULL, *c = NULL;
    char *port = with("port: 18899", "port: 18898");
    char *keys = with("api_keys: [k1]", "api_keys: [k2, k3]");
    assert_int_equal(vsr_config_load_string("a", DOC, strlen(DOC), &a, &err), VSR_OK);
    assert_int_equal(vsr_config_load_string("b", port, strlen(port), &b, &err), VSR_OK);
    assert_int_equal(vsr_config_load_string("c", keys, strlen(keys), &c, &err), VSR_OK);
    assert_int_equal(vsr_config_restart_required(a, b, &why), 1);
    assert_non_null(strstr(why.data, "port changed"));
    vsr_buf_reset(&why);
    assert_int_equal(vsr_config_restart_required(a, c, &why), 0); /* api keys change live */
    /* the source (the file's watch or the cluster's) is chosen at start */
    size_t n = strlen(DOC) + 64;
    char *k8s = malloc(n);
    snprintf(k8s, n, "%sglobal: {router: {config_source: kubernetes}}\n", DOC);
    vsr_config_t *d = NULL;
    assert_int_equal(vsr_config_load_string("d", k8s, strlen(k8s), &d, &err), VSR_OK);
    assert_int_equal(vsr_config_restart_required(a, d, &why), 1);
    assert_non_null(strstr(why.data, "global.router.config_source changed"));
    assert_int_equal(vsr_config_restart_required(d, d, &why), 0);
    vsr_config_free(d);
    free(k8s);
    vsr_config_free(a);
    vsr_config_free(b);
    vsr_config_free(c);
    free(port);
    free(keys);
    vsr_buf_free(&err);
    vsr_buf_free(&why);
}

static int part_freed;

static void part_free(void *p)
{
    (void)p;
    part_freed++;
}

/* A snapshot lives while any request pins it: the swap drops the
 * gateway's reference, the last request's finish frees it. */
static void test_snapshot_drains_with_last_reference(void **state)
{
    (void)state;
    vsr_buf_t err;
    vsr_buf_init(&err, 0);
    vsr_config_t *cfg = NULL;
    assert_int_equal(vsr_config_load_string("a", DOC, strlen(DOC), &cfg, &err), VSR_OK);
    vsr_engine_t *e = vsr_engine_new(cfg, 7, &err);
    assert_non_null(e);
    vsr_engine_adopt(e, cfg, "sha256:x");
    vsr_engine_set_part(e, &part_freed, part_free);
    part_freed = 0;
    vsr_engine_t *req1 = vsr_engine_ref(e);
    vsr_session_opts_t so = {0};
    vsr_session_t *sess = vsr_session_open(e, &so);
    vsr_engine_unref(e); /* swapped out */
    assert_int_equal(part_freed, 0);
    vsr_engine_unref(req1);
    assert_int_equal(part_freed, 0);
    assert_int_equal(vsr_engine_version(e), 7);
    vsr_session_finish(sess); /* the last request on the version */
    assert_int_equal(part_freed, 1);
    vsr_buf_free(&err);
}

/* ---- the admin pipeline ---- */

typedef struct {
    vsr_engine_t *active;
    int activations;
    int warm_fail;
    char outcomes[256];
} host_t;

static int warm(void *ud, vsr_engine_t *e, int dry, vsr_buf_t *err)
{
    host_t *h = ud;
    (void)e;
    (void)dry;
    if (h->warm_fail) {
        vsr_buf_printf(err, "cannot warm\n");
        return VSR_ERR;
    }
    return VSR_OK;
}

static void activate(void *ud, vsr_engine_t *e)
{
    host_t *h = ud;
    vsr_engine_ref(e);
    vsr_engine_unref(h->active);
    h->active = e;
    h->activations++;
}

static void outcome(void *ud, const char *r)
{
    host_t *h = ud;
    strncat(h->outcomes, r, sizeof(h->outcomes) - strlen(h->outcomes) - 2);
    strcat(h->outcomes, ",");
}

static vsr_admin_t *new_admin(host_t *h)
{
    memset(h, 0, sizeof(*h));
    vsr_admin_hooks_t hooks = {warm, activate, outcome, h};
    vsr_admin_opts_t opts = {NULL};
    vsr_buf_t err;
    vsr_buf_init(&err, 0);
    vsr_admin_t *a = vsr_admin_new(&hooks, &opts, &err);
    assert_non_null(a);
    vsr_buf_free(&err);
    return a;
}

static void test_admin_ack_nack_rollback(void **state)
{
    (void)state;
    host_t h;
    vsr_admin_t *a = new_admin(&h);
    vsr_admin_result_t r;
    assert_int_equal(vsr_admin_apply(a, "f", DOC, strlen(DOC), "file", 0, &r), VSR_OK);
    assert_int_equal(r.version, 1);
    char h1[VSR_CONFIG_HASH_LEN];
    strcpy(h1, r.hash);
    vsr_admin_result_free(&r);

    /* the same content, reformatted: nothing new */
    assert_int_equal(vsr_admin_apply(a, "f", DOC_REFORMATTED, strlen(DOC_REFORMATTED), "file", 0, &r), VSR_OK);
    assert_true(r.unchanged);
    assert_int_equal(r.version, 1);
    vsr_admin_result_free(&r);

    char *v2 = with("name: large", "name: huge");
    assert_int_equal(vsr_admin_apply(a, "f", v2, strlen(v2), "api", 0, &r), VSR_OK);
    assert_int_equal(r.version, 2);
    assert_int_equal(vsr_engine_version(h.active), 2);
    vsr_admin_result_free(&r);

    /* rejections name a code and a LINE:COL; the active version stays */
    char *dup = with("name: large", "name: small");
    assert_int_equal(vsr_admin_apply(a, "put", dup, strlen(dup), "api", 0, &r), VSR_ERR_INVALID);
    assert_string_equal(r.code, "duplicate_name");
    assert_non_null(strstr(r.errors.data, "put:8:13: "));
    assert_int_equal(r.version, 2);
    vsr_admin_result_free(&r);
    char *port = with("port: 18899", "port: 1");
    assert_int_equal(vsr_admin_apply(a, "put", port, strlen(port), "api", 0, &r), VSR_ERR_INVALID);
    assert_string_equal(r.code, "restart_required");
    vsr_admin_result_free(&r);
    assert_int_equal(vsr_admin_apply(a, "put", "a: [", 4, "api", 0, &r), VSR_ERR_INVALID);
    assert_string_equal(r.code, "invalid_document");
    vsr_admin_result_free(&r);
    h.warm_fail = 1;
    char *v3 = with("name: large", "name: other");
    assert_int_equal(vsr_admin_apply(a, "put", v3, strlen(v3), "api", 0, &r), VSR_ERR_INVALID);
    assert_string_equal(r.code, "warmup_failed");
    vsr_admin_result_free(&r);
    h.warm_fail = 0;
    /* a dry run activates nothing */
    assert_int_equal(vsr_admin_apply(a, "put", v3, strlen(v3), "api", VSR_ADMIN_DRY_RUN, &r), VSR_OK);
    assert_int_equal(h.activations, 2);
    vsr_admin_result_free(&r);

    /* rollback: a NEW version with the chosen one's content */
    assert_int_equal(vsr_admin_rollback(a, 1, &r), VSR_OK);
    assert_int_equal(r.version, 3);
    assert_string_equal(r.hash, h1);
    assert_string_equal(vsr_engine_hash(h.active), h1);
    vsr_admin_result_free(&r);
    assert_int_equal(vsr_admin_rollback(a, 99, &r), VSR_ERR_NOT_FOUND);
    vsr_admin_result_free(&r);
    assert_string_equal(h.outcomes, "ack,unchanged,ack,nack,nack,nack,nack,ack,");

    vsr_engine_unref(h.active);
    vsr_admin_free(a);
    free(v2);
    free(v3);
    free(dup);
    free(port);
}

static int handle(vsr_admin_t *a, const char *method, const char *target, const char *ctype, const char *if_match,
                  const char *body, vsr_admin_response_t *r)
{
    vsr_admin_request_t req = {.method = vsr_slice_cstr(method), .target = vsr_slice_cstr(target),
                               .content_type = vsr_slice_cstr(ctype ? ctype : ""),
                               .if_match = vsr_slice_cstr(if_match ? if_match : ""), .has_if_match = if_match != NULL,
                               .body = body, .body_len = body ? strlen(body) : 0};
    assert_int_equal(vsr_admin_handle(a, &req, r), 1);
    return r->status;
}

static void test_admin_api(void **state)
{
    (void)state;
    host_t h;
    vsr_admin_t *a = new_admin(&h);
    vsr_admin_response_t r;
    assert_int_equal(handle(a, "GET", "/api/v1/config", NULL, NULL, NULL, &r), 503);
    vsr_admin_response_free(&r);
    assert_int_equal(handle(a, "PUT", "/api/v1/config", "application/yaml", NULL, DOC, &r), 200);
    assert_non_null(strstr(r.headers.data, "etag: \"1\""));
    vsr_admin_response_free(&r);
    assert_int_equal(handle(a, "GET", "/api/v1/config", NULL, NULL, NULL, &r), 200);
    assert_non_null(strstr(r.body.data, "\"config_version\":1"));
    assert_non_null(strstr(r.body.data, "<redacted>")); /* the api key */
    assert_null(strstr(r.body.data, "sk-live"));
    vsr_admin_response_free(&r);
    /* the same document as JSON */
    char *v2 = with("name: large", "name: huge");
    vsr_buf_t canon, err;
    vsr_buf_init(&canon, 0);
    vsr_buf_init(&err, 0);
    assert_int_equal(vsr_config_canonical("x", v2, strlen(v2), &canon, &err), VSR_OK);
    assert_int_equal(handle(a, "PUT", "/api/v1/config", "application/json", "\"7\"", canon.data, &r), 412);
    vsr_admin_response_free(&r);
    assert_int_equal(handle(a, "PUT", "/api/v1/config", "application/json", "\"1\"", canon.data, &r), 200);
    assert_non_null(strstr(r.body.data, "\"config_version\":2"));
    vsr_admin_response_free(&r);
    assert_int_equal(handle(a, "PUT", "/api/v1/config", "application/json", NULL, "version: v0.3", &r), 400);
    vsr_admin_response_free(&r);
    assert_int_equal(handle(a, "PUT", "/api/v1/config", "text/plain", NULL, DOC, &r), 415);
    vsr_admin_response_free(&r);
    assert_int_equal(
        handle(a, "POST", "/api/v1/config/validate", "application/yaml", NULL, "version: v0.3\nlisteners: 5\n", &r),
        422);
    assert_non_null(strstr(r.body.data, "\"line\":"));
    vsr_admin_response_free(&r);
    /* rollback needs If-Match */
    assert_int_equal(handle(a, "POST", "/api/v1/config/rollback", NULL, NULL, "{\"config_version\":1}", &r), 428);
    vsr_admin_response_free(&r);
    assert_int_equal(handle(a, "POST", "/api/v1/config/rollback", NULL, "\"1\"", "{\"config_version\":1}", &r), 412);
    vsr_admin_response_free(&r);
    assert_int_equal(handle(a, "POST", "/api/v1/config/rollback", NULL, "\"2\"", "{\"config_version\":0}", &r), 400);
    vsr_admin_response_free(&r);
    assert_int_equal(handle(a, "POST", "/api/v1/config/rollback", NULL, "\"2\"", "{\"config_version\":1}", &r), 200);
    assert_non_null(strstr(r.body.data, "\"config_version\":3"));
    vsr_admin_response_free(&r);
    assert_int_equal(handle(a, "GET", "/api/v1/config/versions", NULL, NULL, NULL, &r), 200);
    assert_non_null(strstr(r.body.data, "\"active_version\":3"));
    assert_non_null(strstr(r.body.data, "\"source\":\"rollback\""));
    vsr_admin_response_free(&r);
    assert_int_equal(handle(a, "GET", "/api/v1/config/hash", NULL, NULL, NULL, &r), 200);
    assert_non_null(strstr(r.body.data, "\"activation_status\":\"active\""));
    vsr_admin_response_free(&r);
    assert_int_equal(handle(a, "DELETE", "/api/v1/config", NULL, NULL, NULL, &r), 405);
    vsr_admin_response_free(&r);
    vsr_admin_request_t other = {.method = VSR_SLICE_LIT("GET"), .target = VSR_SLICE_LIT("/api/v1/routing/preview")};
    assert_int_equal(vsr_admin_handle(a, &other, &r), 0);

    vsr_buf_free(&canon);
    vsr_buf_free(&err);
    free(v2);
    vsr_engine_unref(h.active);
    vsr_admin_free(a);
}

/* ---- what a submitted document may say, who may submit it ---- */

static int apply_src(vsr_admin_t *a, const char *doc, const char *source, char *first_error, size_t n)
{
    vsr_admin_result_t res;
    int rc = vsr_admin_apply(a, "t", doc, strlen(doc), source, 0, &res);
    if (first_error)
        snprintf(first_error, n, "%s", res.errors.data ? res.errors.data : "");
    vsr_admin_result_free(&res);
    return rc;
}

static void test_admin_placeholders_and_env(void **state)
{
    (void)state;
    host_t h;
    vsr_admin_t *a = new_admin(&h);
    char msg[512];
    assert_int_equal(apply_src(a, DOC, "file", NULL, 0), VSR_OK);
    /* the models reordered, every secret a placeholder: matched by name */
    const char *back =
        "version: v0.3\n"
        "listeners: [{name: l1, address: 127.0.0.1, port: 18899, api_keys: ['<redacted>']}]\n"
        "providers:\n"
        "  models:\n"
        "    - {name: large, backend_refs: [{endpoint: '127.0.0.1:2', api_key: '<redacted>'}]}\n"
        "    - {name: small, backend_refs: [{endpoint: '127.0.0.1:1'}]}\n";
    assert_int_equal(apply_src(a, back, "api", msg, sizeof(msg)), VSR_OK);
    const vsr_config_t *c = vsr_engine_config(h.active);
    assert_int_equal(vsr_engine_version(h.active), 2);
    assert_string_equal(c->listeners[0].api_keys.items[0], "k1");
    assert_string_equal(c->models[0].name, "large");
    assert_string_equal(c->models[0].backends[0].api_key, "sk-live");
    /* a placeholder with nothing behind it, in any source: refused, never a key */
    const char *extra = "version: v0.3\n"
                        "listeners: [{name: l1, address: 127.0.0.1, port: 18899, api_keys: [k1, '<redacted>']}]\n"
                        "providers: {models: [{name: small, backend_refs: [{endpoint: '127.0.0.1:1'}]}]}\n";
    assert_int_equal(apply_src(a, extra, "api", msg, sizeof(msg)), VSR_ERR_INVALID);
    assert_non_null(strstr(msg, "t:2:72: listeners[0].api_keys[1] is \"<redacted>\""));
    assert_int_equal(apply_src(a, extra, "file", msg, sizeof(msg)), VSR_ERR_INVALID);
    /* environment variables: the API may name only what a file named */
    const char *env_doc = "version: v0.3\n"
                          "listeners: [{name: l1, address: 127.0.0.1, port: 18899}]\n"
                          "providers: {models: [{name: small, backend_refs: [{endpoint: '127.0.0.1:1', "
                          "api_key_env: PATH}]}]}\n";
    assert_int_equal(apply_src(a, env_doc, "api", msg, sizeof(msg)), VSR_ERR_INVALID);
    assert_non_null(strstr(msg, "api_key_env names the environment variable \"PATH\""));
    assert_null(strstr(msg, getenv("PATH")));
    assert_int_equal(apply_src(a, env_doc, "file", NULL, 0), VSR_OK);
    const char *env_doc2 = "version: v0.3\n"
                           "listeners: [{name: l1, address: 127.0.0.1, port: 18899, api_keys: [k9]}]\n"
                           "providers: {models: [{name: small, backend_refs: [{endpoint: '127.0.0.1:1', "
                           "api_key_env: PATH}]}]}\n";
    int before = h.activations;
    assert_int_equal(apply_src(a, env_doc2, "api", msg, sizeof(msg)), VSR_OK);
    assert_int_equal(h.activations, before + 1);
    vsr_engine_unref(h.active);
    vsr_admin_free(a);
}

/* An activation parses the submitted document once: vetting, the canonical
 * form and the loader read one tree.  The active document is parsed only
 * when a placeholder asks for its secrets. */
static void test_admin_parses_once(void **state)
{
    (void)state;
    host_t h;
    vsr_admin_t *a = new_admin(&h);
    vsr_admin_result_t r;
    unsigned long before = vsr_config_parse_runs();
    assert_int_equal(vsr_admin_apply(a, "f", DOC, strlen(DOC), "file", 0, &r), VSR_OK);
    assert_int_equal(vsr_config_parse_runs() - before, 1);
    vsr_admin_result_free(&r);

    /* with a version active: still one */
    char *v2 = with("name: large", "name: huge");
    before = vsr_config_parse_runs();
    assert_int_equal(vsr_admin_apply(a, "f", v2, strlen(v2), "api", 0, &r), VSR_OK);
    assert_int_equal(vsr_config_parse_runs() - before, 1);
    assert_int_equal(r.version, 2);
    vsr_admin_result_free(&r);

    /* refused by the loader, with its LINE:COL: one */
    char *dup = with("name: large", "name: small");
    before = vsr_config_parse_runs();
    assert_int_equal(vsr_admin_apply(a, "put", dup, strlen(dup), "api", 0, &r), VSR_ERR_INVALID);
    assert_int_equal(vsr_config_parse_runs() - before, 1);
    assert_non_null(strstr(r.errors.data, "put:8:13: "));
    vsr_admin_result_free(&r);

    /* a syntax error: one, reported once */
    before = vsr_config_parse_runs();
    assert_int_equal(vsr_admin_apply(a, "put", "a: [", 4, "api", 0, &r), VSR_ERR_INVALID);
    assert_int_equal(vsr_config_parse_runs() - before, 1);
    assert_string_equal(r.code, "invalid_document");
    const char *first = strstr(r.errors.data, "put:");
    assert_non_null(first);
    assert_null(strstr(first + 1, "put:"));
    vsr_admin_result_free(&r);

    /* a placeholder: the document, then the active one for its secret */
    assert_int_equal(vsr_admin_apply(a, "f", DOC, strlen(DOC), "file", 0, &r), VSR_OK);
    vsr_admin_result_free(&r);
    char *back = with("api_key: sk-live", "api_key: '<redacted>'");
    before = vsr_config_parse_runs();
    assert_int_equal(vsr_admin_apply(a, "put", back, strlen(back), "api", VSR_ADMIN_FORCE, &r), VSR_OK);
    assert_int_equal(vsr_config_parse_runs() - before, 2);
    vsr_admin_result_free(&r);
    assert_string_equal(vsr_engine_config(h.active)->models[1].backends[0].api_key, "sk-live");

    free(v2);
    free(dup);
    free(back);
    vsr_engine_unref(h.active);
    vsr_admin_free(a);
}

static void test_admin_access(void **state)
{
    (void)state;
    host_t h;
    vsr_admin_t *a = new_admin(&h);
    assert_int_equal(apply_src(a, DOC, "file", NULL, 0), VSR_OK); /* management_api: 127.0.0.1:8080 */
    vsr_admin_set_token(a, "0123456789abcdef-token");
    static const struct {
        const char *auth, *host, *origin;
        int status;
    } rows[] = {
        {"Bearer 0123456789abcdef-token", NULL, NULL, 0},
        {"bearer \t0123456789abcdef-token  ", "127.0.0.1:8080", NULL, 0},
        {"Bearer 0123456789abcdef-token", "localhost:8080", "http://localhost:8080", 0},
        {"Bearer 0123456789abcdef-token", "[::1]:8080", "http://127.0.0.1:8080", 0},
        {"Bearer 0123456789abcdef-token", "localhost.:8080", NULL, 0},
        {NULL, "127.0.0.1:8080", NULL, 401},
        {"Bearer 0123456789abcdef-toke", NULL, NULL, 401},
        {"Bearer 0123456789abcdef-tokenX", NULL, NULL, 401},
        {"0123456789abcdef-token", NULL, NULL, 401},
        {"Bearer ", NULL, NULL, 401},
        {"Bearer 0123456789abcdef-token", "evil.example:8080", NULL, 403},
        {"Bearer 0123456789abcdef-token", "127.0.0.1:8081", NULL, 403},
        {"Bearer 0123456789abcdef-token", "127.0.0.1", NULL, 403}, /* port 80 */
        {"Bearer 0123456789abcdef-token", "127.0.0.1:08080x", NULL, 403},
        {"Bearer 0123456789abcdef-token", "[::1", NULL, 403},
        {"Bearer 0123456789abcdef-token", "", NULL, 403},
        {"Bearer 0123456789abcdef-token", NULL, "http://evil.example", 403},
        {"Bearer 0123456789abcdef-token", NULL, "null", 403},
        {"Bearer 0123456789abcdef-token", NULL, "http://127.0.0.1:9", 403},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        vsr_admin_access_t acc = {rows[i].auth ? vsr_slice_cstr(rows[i].auth) : VSR_SLICE_NULL,
                                  rows[i].host ? vsr_slice_cstr(rows[i].host) : VSR_SLICE_NULL,
                                  rows[i].origin ? vsr_slice_cstr(rows[i].origin) : VSR_SLICE_NULL,
                                  VSR_SLICE_LIT("GET"), VSR_SLICE_LIT("/api/v1/config")};
        vsr_admin_response_t r;
        int ok = vsr_admin_check_access(a, &acc, &r);
        if (ok != (rows[i].status == 0) || (!ok && r.status != rows[i].status))
            fail_msg("row %zu: %s / %s / %s", i, rows[i].auth, rows[i].host, rows[i].origin);
        if (!ok) {
            assert_null(strstr(r.body.data, "0123456789abcdef"));
            vsr_admin_response_free(&r);
        }
    }
    assert_true(vsr_admin_loopback("127.9.9.9") && vsr_admin_loopback("::1") && vsr_admin_loopback("::ffff:127.0.0.1"));
    assert_false(vsr_admin_loopback("10.0.0.1") || vsr_admin_loopback("0.0.0.0") || vsr_admin_loopback("::"));
    vsr_engine_unref(h.active);
    vsr_admin_free(a);
}

typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int done;
} waiter_t;

static void job_done(void *ud)
{
    waiter_t *w = ud;
    pthread_mutex_lock(&w->mu);
    w->done = 1;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

static void test_admin_submit_and_close(void **state)
{
    (void)state;
    host_t h;
    vsr_admin_t *a = new_admin(&h);
    assert_int_equal(apply_src(a, DOC, "file", NULL, 0), VSR_OK);
    waiter_t w = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0};
    vsr_admin_request_t req = {.method = VSR_SLICE_LIT("GET"), .target = VSR_SLICE_LIT("/api/v1/config/hash")};
    vsr_admin_response_t r;
    assert_int_equal(vsr_admin_submit(a, &req, &r, job_done, &w), VSR_OK);
    pthread_mutex_lock(&w.mu);
    while (!w.done)
        pthread_cond_wait(&w.cv, &w.mu);
    pthread_mutex_unlock(&w.mu);
    assert_int_equal(r.status, 200);
    vsr_admin_response_free(&r);
    /* closed: no call starts, no hook runs, nothing activates */
    vsr_admin_close(a);
    assert_int_equal(vsr_admin_submit(a, &req, &r, job_done, &w), VSR_ERR);
    int before = h.activations;
    char *v2 = with("name: large", "name: huge");
    vsr_admin_result_t res;
    assert_int_equal(vsr_admin_apply(a, "t", v2, strlen(v2), "api", 0, &res), VSR_ERR_INVALID);
    assert_string_equal(res.code, "unavailable");
    vsr_admin_result_free(&res);
    assert_int_equal(h.activations, before);
    free(v2);
    vsr_engine_unref(h.active);
    vsr_admin_free(a);
}

/* ---- identity-keyed reuse ---- */

static void test_upstream_reuse_by_identity(void **state)
{
    (void)state;
    vsr_buf_t err;
    vsr_buf_init(&err, 0);
    vsr_config_t *a = NULL, *b = NULL, *c = NULL;
    char *weights = with("endpoint: '127.0.0.1:1'", "endpoint: '127.0.0.1:1', weight: 5"); /* same identity */
    char *moved = with("endpoint: '127.0.0.1:2'", "endpoint: '127.0.0.1:3'");               /* large moved */
    assert_int_equal(vsr_config_load_string("a", DOC, strlen(DOC), &a, &err), VSR_OK);
    assert_int_equal(vsr_config_load_string("b", weights, strlen(weights), &b, &err), VSR_OK);
    assert_int_equal(vsr_config_load_string("c", moved, strlen(moved), &c, &err), VSR_OK);
    vsr_upstream_shared_t *sa = vsr_upstream_shared_new(a, &err);
    assert_non_null(sa);
    assert_int_equal(vsr_upstream_shared_reused(sa), 0);
    vsr_upstream_shared_t *sb = vsr_upstream_shared_new(b, &err);
    assert_int_equal(vsr_upstream_shared_reused(sb), 2);
    vsr_upstream_shared_free(sa); /* the old version drains; its clusters live on in b */
    vsr_upstream_shared_t *sc = vsr_upstream_shared_new(c, &err);
    assert_int_equal(vsr_upstream_shared_reused(sc), 1); /* small kept, large is new */
    vsr_upstream_shared_free(sb);
    vsr_upstream_shared_free(sc);
    /* nothing holds them any more: a new version starts fresh */
    vsr_upstream_shared_t *sa2 = vsr_upstream_shared_new(a, &err);
    assert_int_equal(vsr_upstream_shared_reused(sa2), 0);
    vsr_upstream_shared_free(sa2);
    vsr_config_free(a);
    vsr_config_free(b);
    vsr_config_free(c);
    free(weights);
    free(moved);
    vsr_buf_free(&err);
}

/* A change to one recipe recompiles only that recipe's signals. */
static void test_signals_reused_per_recipe(void **state)
{
    (void)state;
    static const char *base =
        "version: v0.3\n"
        "listeners: [{name: l1, port: 18899}]\n"
        "providers: {models: [{name: m, backend_refs: [{endpoint: '127.0.0.1:1'}]}]}\n"
        "routing:\n"
        "  signals: {keywords: [{name: urgent, keywords: [asap, urgent]}]}\n"
        "  decisions: [{name: d, rules: {type: keyword, name: urgent}, modelRefs: [{model: m}]}]\n"
        "recipes:\n"
        "  - name: other\n"
        "    routing:\n"
        "      signals: {keywords: [{name: code, keywords: [python]}]}\n"
        "      decisions: [{name: c, rules: {type: keyword, name: code}, modelRefs: [{model: m}]}]\n";
    vsr_buf_t err;
    vsr_buf_init(&err, 0);
    char *decision_only = strdup(base);
    strstr(decision_only, "name: d,")[6] = 'x'; /* decision "d" renamed: signals untouched */
    char *other_signals = strdup(base);
    memcpy(strstr(other_signals, "python"), "golang", 6);
    vsr_config_t *a = NULL, *b = NULL, *c = NULL;
    assert_int_equal(vsr_config_load_string("a", base, strlen(base), &a, &err), VSR_OK);
    assert_int_equal(vsr_config_load_string("b", decision_only, strlen(decision_only), &b, &err), VSR_OK);
    assert_int_equal(vsr_config_load_string("c", other_signals, strlen(other_signals), &c, &err), VSR_OK);
    vsr_engine_t *ea = vsr_engine_new_from(a, NULL, 1, &err);
    assert_non_null(ea);
    assert_int_equal(vsr_engine_reused_recipes(ea), 0);
    vsr_engine_t *eb = vsr_engine_new_from(b, ea, 2, &err);
    assert_int_equal(vsr_engine_reused_recipes(eb), 2);
    vsr_engine_t *ec = vsr_engine_new_from(c, eb, 3, &err);
    assert_int_equal(vsr_engine_reused_recipes(ec), 1); /* "default" kept, "other" recompiled */
    vsr_engine_unref(ea); /* the reused signals live on in eb and ec */
    vsr_engine_unref(eb);
    /* the reused signals still work: a preview through the default recipe matches */
    vsr_buf_t out;
    vsr_buf_init(&out, 0);
    assert_int_equal(vsr_engine_preview(ec, VSR_SLICE_LIT("auto"), VSR_SLICE_LIT("please fix it asap"), 0, &out), 200);
    assert_non_null(strstr(out.data, "\"decision_name\":\"d\""));
    vsr_buf_free(&out);
    vsr_engine_unref(ec);
    vsr_config_free(a);
    vsr_config_free(b);
    vsr_config_free(c);
    free(decision_only);
    free(other_signals);
    vsr_buf_free(&err);
}

static void test_print_redacts_and_fills_defaults(void **state)
{
    (void)state;
    vsr_buf_t err, out;
    vsr_buf_init(&err, 0);
    vsr_buf_init(&out, 0);
    vsr_config_t *cfg = NULL;
    assert_int_equal(vsr_config_load_string("a", DOC, strlen(DOC), &cfg, &err), VSR_OK);
    assert_int_equal(vsr_config_print("a", DOC, strlen(DOC), cfg, 1, &out), VSR_OK);
    assert_null(strstr(out.data, "sk-live"));
    assert_null(strstr(out.data, "\"k1\""));
    assert_non_null(strstr(out.data, "\"timeout\": \"300s\""));
    assert_non_null(strstr(out.data, "\"provider_model_id\": \"small\""));
    /* the printed document loads and means the same */
    vsr_config_t *again = NULL;
    assert_int_equal(vsr_config_load_string("p", out.data, out.len, &again, &err), VSR_OK);
    assert_int_equal(again->listeners[0].timeout_ms, 300000);
    vsr_config_free(again);
    vsr_buf_reset(&out);
    assert_int_equal(vsr_config_print("a", DOC, strlen(DOC), cfg, 0, &out), VSR_OK);
    assert_non_null(strstr(out.data, "sk-live"));
    vsr_config_free(cfg);
    vsr_buf_free(&err);
    vsr_buf_free(&out);
}

/* global.integrations.looper.headers go with every hop, as extra_headers
 * do: printed redacted unless the name is known harmless; a Looper block is
 * part of the content hash like every other key. */
static void test_looper_headers_redacted_and_hashed(void **state)
{
    (void)state;
    static const char doc[] = "version: v0.3\n"
                              "providers: {models: [{name: a, backend_refs: [{endpoint: 127.0.0.1:1}]},"
                              " {name: b, backend_refs: [{endpoint: 127.0.0.1:1}]}]}\n"
                              "routing:\n"
                              "  decisions:\n"
                              "    - name: d\n"
                              "      modelRefs: [{model: a}, {model: b}]\n"
                              "      algorithm: {type: remom, remom: {breadth_schedule: [3, 2]}}\n"
                              "global: {integrations: {looper: {headers: {x-signature: s3cret, x-team: t}}}}\n";
    vsr_buf_t err, out;
    vsr_buf_init(&err, 0);
    vsr_buf_init(&out, 0);
    vsr_config_t *cfg = NULL;
    assert_int_equal(vsr_config_load_string("a", doc, strlen(doc), &cfg, &err), VSR_OK);
    assert_int_equal(vsr_config_print("a", doc, strlen(doc), cfg, 1, &out), VSR_OK);
    assert_null(strstr(out.data, "s3cret"));
    assert_non_null(strstr(out.data, "\"x-team\": \"t\""));
    vsr_config_free(cfg);

    char h1[VSR_CONFIG_HASH_LEN], h2[VSR_CONFIG_HASH_LEN];
    canon_hash(doc, h1);
    char *other = strdup(doc);
    strstr(other, "[3, 2]")[1] = '4'; /* breadth_schedule [4, 2] */
    canon_hash(other, h2);
    assert_string_not_equal(h1, h2);
    free(other);
    vsr_buf_free(&err);
    vsr_buf_free(&out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hash_is_sha256),
        cmocka_unit_test(test_canonical_ignores_formatting),
        cmocka_unit_test(test_canonical_reads_the_first_document),
        cmocka_unit_test(test_history_keeps_ten_and_never_reuses),
        cmocka_unit_test(test_restart_required),
        cmocka_unit_test(test_snapshot_drains_with_last_reference),
        cmocka_unit_test(test_admin_ack_nack_rollback),
        cmocka_unit_test(test_admin_api),
        cmocka_unit_test(test_admin_placeholders_and_env),
        cmocka_unit_test(test_admin_parses_once),
        cmocka_unit_test(test_admin_access),
        cmocka_unit_test(test_admin_submit_and_close),
        cmocka_unit_test(test_upstream_reuse_by_identity),
        cmocka_unit_test(test_print_redacts_and_fills_defaults),
        cmocka_unit_test(test_looper_headers_redacted_and_hashed),
        cmocka_unit_test(test_signals_reused_per_recipe),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
