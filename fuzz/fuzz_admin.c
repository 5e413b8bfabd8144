/* fuzz_admin.c — arbitrary bytes as management API requests on
 * /api/v1/config*, and as documents for the canonical form.
 *
 * Input: byte 0 picks the endpoint, method and content type; the bytes up
 * to the first newline are the If-Match value (absent when byte 1 is odd);
 * the rest is the body.  Beyond "no crash, no leak" it checks the contract:
 * every answer is a known status with a JSON body, versions never go back,
 * and the canonical form is a fixed point (canonical(canonical(x)) ==
 * canonical(x)) that keeps the content hash. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "admin/admin.h"
#include "json/json.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(int cond, const char *what)
{
    if (!cond) {
        fprintf(stderr, "fuzz_admin: invariant broken: %s\n", what);
        abort();
    }
}

static vsr_engine_t *active;

static void activate(void *ud, vsr_engine_t *e)
{
    (void)ud;
    check(active == NULL || vsr_engine_version(e) > vsr_engine_version(active), "versions only go up");
    vsr_engine_ref(e);
    vsr_engine_unref(active);
    active = e;
}

static const char *const targets[] = {"/api/v1/config", "/api/v1/config/validate", "/api/v1/config/versions",
                                      "/api/v1/config/rollback", "/api/v1/config/hash", "/api/v1/config/"};
static const char *const methods[] = {"GET", "PUT", "POST", "DELETE"};
static const char *const ctypes[] = {"application/yaml", "application/json", "", "text/plain; charset=x"};

static void canonical_fixed_point(const char *doc, size_t len)
{
    vsr_buf_t a, b, err;
    vsr_buf_init(&a, 0);
    vsr_buf_init(&b, 0);
    vsr_buf_init(&err, 1 << 16);
    if (vsr_config_canonical("f", doc, len, &a, &err) == VSR_OK) {
        check(vsr_config_canonical("c", a.data, a.len, &b, &err) == VSR_OK, "the canonical form parses");
        check(a.len == b.len && memcmp(a.data, b.data, a.len) == 0, "the canonical form is a fixed point");
        vsr_json_t j;
        check(vsr_json_parse(&j, a.data, a.len, NULL) == VSR_OK, "the canonical form is JSON");
        vsr_json_free(&j);
    } else {
        check(err.len > 0, "a failure says why");
    }
    vsr_buf_free(&a);
    vsr_buf_free(&b);
    vsr_buf_free(&err);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    unsigned sel = data[0];
    int with_if_match = !(data[1] & 1);
    const char *rest = (const char *)data + 2;
    size_t n = size - 2;
    const char *nl = memchr(rest, '\n', n);
    vsr_slice_t if_match = nl ? vsr_slice(rest, (size_t)(nl - rest)) : VSR_SLICE_NULL;
    const char *body = nl ? nl + 1 : rest;
    size_t body_len = nl ? n - (size_t)(nl + 1 - rest) : n;

    canonical_fixed_point(body, body_len);

    static const char *seed_doc = "version: v0.3\nlisteners: [{name: l, port: 18899}]\n"
                                  "providers: {models: [{name: m, backend_refs: [{endpoint: '127.0.0.1:1'}]}]}\n";
    vsr_admin_hooks_t hooks = {NULL, activate, NULL, NULL};
    vsr_admin_opts_t opts = {NULL};
    vsr_buf_t err;
    vsr_buf_init(&err, 0);
    vsr_admin_t *a = vsr_admin_new(&hooks, &opts, &err);
    vsr_admin_result_t res;
    check(vsr_admin_apply(a, "seed", seed_doc, strlen(seed_doc), "file", 0, &res) == VSR_OK, "the seed loads");
    vsr_admin_result_free(&res);

    vsr_admin_request_t req = {
        .method = vsr_slice_cstr(methods[(sel >> 3) & 3]),
        .target = vsr_slice_cstr(targets[sel % 6]),
        .content_type = vsr_slice_cstr(ctypes[(sel >> 5) & 3]),
        .if_match = if_match,
        .has_if_match = with_if_match,
        .body = body,
        .body_len = body_len,
    };
    vsr_admin_response_t resp;
    int handled = vsr_admin_handle(a, &req, &resp);
    check(handled == 1, "every config path is served");
    if (handled) {
        static const int known[] = {200, 400, 404, 405, 409, 412, 415, 422, 428, 503};
        int ok = 0;
        for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++)
            ok |= resp.status == known[i];
        check(ok, "a known status");
        vsr_json_t j;
        check(vsr_json_parse(&j, resp.body.data ? resp.body.data : "", resp.body.len, NULL) == VSR_OK,
              "the answer is JSON");
        vsr_json_free(&j);
        vsr_admin_response_free(&resp);
    }
    vsr_engine_unref(active);
    active = NULL;
    vsr_admin_free(a);
    vsr_buf_free(&err);
    return 0;
}
