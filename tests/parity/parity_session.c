/*
 * parity_session — the parity corpus's in-process way: one request through
 * a routing session of the routing core, with no adapter, no socket and no
 * gRPC in between.  The effects of its four phases are printed as JSON, for
 * tests/e2e/test_mode_parity.py to apply with Envoy's rules and compare with
 * what the ext_proc adapter and the wire gave for the same request.
 *
 *   parity_session --config FILE --request DIR [--runtime unix:PATH]
 *
 * DIR holds the request: `method`, `path`, `headers` (one "name<TAB>value"
 * per line, no pseudo-headers), `body` (absent: none); and, for the response
 * phases, the upstream's answer as the wire run saw it: `response_status`,
 * `response_headers`, `response_body`.  The session is opened as the
 * ext_proc adapter opens it (opts.envoy): Envoy calls the backend.  With
 * --runtime, model tasks go to that runtime (the router's own client, on a
 * loop this program runs while a phase is pending); without it they fail
 * as with no runtime.  Graph hops have no port here: a request graph is
 * served as one call to its first modelRef, so graph cases are not run
 * this way.
 *
 * Output, one JSON object: {"request_headers": E, "request_body": E,
 * "response_headers": E, "response_body": E, "evidence": {...}}, where each
 * E is an effect ({"status", "remove", "set", "body", "path",
 * "clear_route_cache", "resp_headers", "resp_body", "body_mode"}) or null
 * for a phase that did not run (after an immediate answer).  Exit 0, or 1
 * with a message on stderr (bad arguments, a document that does not load).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <uv.h>

#include "base/base.h"
#include "config/config.h"
#include "routing/routing.h"
#include "runtime/runtime.h"

typedef struct {
    uv_loop_t loop;
    vsr_rtc_t *rtc;
    const vsr_effect_t *resumed;
} harness_t;

typedef struct {
    vsr_runtime_done_fn done;
    void *done_ud;
    int returned; /* rt_call has returned: rt_done frees */
} rt_call_t;

static char *slurp(const char *dir, const char *name, size_t *len)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return NULL;
    vsr_buf_t b;
    vsr_buf_init(&b, 0);
    char chunk[65536];
    size_t n;
    while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0)
        vsr_buf_append(&b, chunk, n);
    fclose(f);
    vsr_buf_append(&b, "", 1);
    *len = b.len - 1;
    return b.data;
}

/* "name\tvalue" lines into headers pointing into text (modified in place). */
static vsr_header_t *parse_headers(char *text, size_t *n)
{
    size_t cap = 8;
    vsr_header_t *h = vsr_calloc(cap, sizeof(*h));
    *n = 0;
    for (char *line = text; line && *line;) {
        char *nl = strchr(line, '\n');
        if (nl)
            *nl = '\0';
        char *tab = strchr(line, '\t');
        if (tab) {
            if (*n == cap) {
                cap *= 2;
                h = vsr_realloc(h, cap * sizeof(*h));
            }
            h[(*n)++] = (vsr_header_t){vsr_slice(line, (size_t)(tab - line)), vsr_slice_cstr(tab + 1)};
        }
        line = nl ? nl + 1 : NULL;
    }
    return h;
}

/* ---- the runtime port: the router's client on this program's loop ---- */

static void rt_done(void *ud, int status, const vsr_rtc_result_t *res, size_t n, const vsr_rtc_timing_t *t)
{
    VSR_UNUSED(t);
    rt_call_t *rc = ud;
    vsr_runtime_done_fn done = rc->done;
    void *done_ud = rc->done_ud;
    if (rc->returned)
        vsr_free(rc);
    else
        rc->done = NULL; /* answered before vsr_rtc_bundle returned: rt_call frees it */
    vsr_pool_t pool;
    vsr_pool_init(&pool);
    vsr_runtime_result_t *out = n ? vsr_pool_alloc(&pool, n * sizeof(*out)) : NULL;
    for (size_t i = 0; i < n; i++)
        out[i] = (vsr_runtime_result_t){vsr_pool_strndup(&pool, res[i].id.p ? res[i].id.p : "", res[i].id.len),
                                        res[i].status == VSR_OK ? VSR_OK : VSR_ERR, res[i].result};
    done(done_ud, status == VSR_ERR_INVALID ? VSR_ERR : status, out, n);
    vsr_pool_free(&pool);
}

static void *rt_call(void *ud, const vsr_runtime_bundle_t *b, uint64_t deadline_ms, vsr_runtime_done_fn done,
                     void *done_ud)
{
    harness_t *h = ud;
    rt_call_t *rc = vsr_calloc(1, sizeof(*rc));
    rc->done = done;
    rc->done_ud = done_ud;
    vsr_rtc_task_t *tasks = vsr_calloc(b->n_tasks ? b->n_tasks : 1, sizeof(*tasks));
    for (size_t i = 0; i < b->n_tasks; i++)
        tasks[i] = (vsr_rtc_task_t){vsr_slice_cstr(b->tasks[i].id), vsr_slice_cstr(b->tasks[i].type),
                                    b->tasks[i].payload};
    vsr_rtc_call_t *call = vsr_rtc_bundle(h->rtc, tasks, b->n_tasks, deadline_ms, rt_done, rc);
    vsr_free(tasks);
    if (call == NULL) {
        vsr_free(rc);
        return NULL;
    }
    rc->returned = 1;
    return call;
}

static void rt_cancel(void *ud, void *handle)
{
    VSR_UNUSED(ud);
    vsr_rtc_cancel(handle); /* rt_done never runs: its rt_call_t is lost with the process */
}

static void resume(void *ud, vsr_session_t *s, const vsr_effect_t *eff)
{
    VSR_UNUSED(s);
    ((harness_t *)ud)->resumed = eff;
}

/* A phase's final effect: at once, or once the loop has run its wait out. */
static const vsr_effect_t *settle(harness_t *h, vsr_session_t *s, const vsr_effect_t *eff)
{
    if (!eff->pending)
        return eff;
    h->resumed = NULL;
    while (h->resumed == NULL && vsr_session_pending(s))
        uv_run(&h->loop, UV_RUN_ONCE);
    return h->resumed;
}

/* ---- output ---- */

static void put_str(vsr_buf_t *o, vsr_slice_t s)
{
    vsr_buf_append_json_string(o, s);
}

static void put_headers(vsr_buf_t *o, const vsr_header_t *h, size_t n)
{
    vsr_buf_append_cstr(o, "[");
    for (size_t i = 0; i < n; i++) {
        vsr_buf_append_cstr(o, i ? ",[" : "[");
        put_str(o, h[i].name);
        vsr_buf_append_cstr(o, ",");
        put_str(o, h[i].value);
        vsr_buf_append_cstr(o, "]");
    }
    vsr_buf_append_cstr(o, "]");
}

static void put_effect(vsr_buf_t *o, const char *phase, const vsr_effect_t *e)
{
    vsr_buf_printf(o, "\"%s\":", phase);
    if (e == NULL) {
        vsr_buf_append_cstr(o, "null,");
        return;
    }
    vsr_buf_printf(o, "{\"status\":%d,\"remove\":[", e->status);
    for (size_t i = 0; i < e->n_remove; i++) {
        if (i)
            vsr_buf_append_cstr(o, ",");
        put_str(o, e->remove[i]);
    }
    vsr_buf_append_cstr(o, "],\"set\":");
    put_headers(o, e->set, e->n_set);
    vsr_buf_append_cstr(o, ",\"body\":");
    if (e->body_replaced) {
        vsr_buf_t body;
        vsr_buf_init(&body, 0);
        for (size_t i = 0; i < e->n_body; i++)
            vsr_buf_append(&body, e->body[i].p, e->body[i].len);
        put_str(o, vsr_buf_slice(&body));
        vsr_buf_free(&body);
    } else {
        vsr_buf_append_cstr(o, "null");
    }
    vsr_buf_append_cstr(o, ",\"path\":");
    put_str(o, e->path);
    vsr_buf_printf(o, ",\"clear_route_cache\":%s,\"resp_headers\":", e->clear_route_cache ? "true" : "false");
    put_headers(o, e->resp_headers, e->n_resp_headers);
    vsr_buf_append_cstr(o, ",\"resp_body\":");
    put_str(o, e->resp_body);
    vsr_buf_printf(o, ",\"body_mode\":%d},", (int)e->body_mode);
}

static void put_opt(vsr_buf_t *o, const char *name, const char *v)
{
    vsr_buf_printf(o, "\"%s\":", name);
    if (v)
        put_str(o, vsr_slice_cstr(v));
    else
        vsr_buf_append_cstr(o, "null");
}

static int usage(void)
{
    fprintf(stderr, "usage: parity_session --config FILE --request DIR [--runtime unix:PATH]\n");
    return 1;
}

int main(int argc, char **argv)
{
    const char *config = NULL, *dir = NULL, *runtime = NULL;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--config") == 0)
            config = argv[i + 1];
        else if (strcmp(argv[i], "--request") == 0)
            dir = argv[i + 1];
        else if (strcmp(argv[i], "--runtime") == 0)
            runtime = argv[i + 1];
        else
            return usage();
    }
    if (config == NULL || dir == NULL || (runtime && strncmp(runtime, "unix:", 5) != 0))
        return usage();
    vsr_buf_t err;
    vsr_buf_init(&err, 0);
    vsr_config_t *cfg = NULL;
    vsr_engine_t *engine = NULL;
    if (vsr_config_load_file(config, &cfg, &err) != VSR_OK || (engine = vsr_engine_new(cfg, 1, &err)) == NULL) {
        fprintf(stderr, "parity_session: %.*s\n", (int)err.len, err.data ? err.data : "");
        return 1;
    }
    size_t len, hlen, blen = 0, rlen = 0, rhlen = 0, rblen = 0;
    char *method = slurp(dir, "method", &len), *path = slurp(dir, "path", &len);
    char *htext = slurp(dir, "headers", &hlen), *body = slurp(dir, "body", &blen);
    char *rstatus = slurp(dir, "response_status", &rlen), *rhtext = slurp(dir, "response_headers", &rhlen);
    char *rbody = slurp(dir, "response_body", &rblen);
    if (method == NULL || path == NULL || htext == NULL) {
        fprintf(stderr, "parity_session: %s needs method, path and headers\n", dir);
        return 1;
    }
    size_t nh = 0, nrh = 0;
    vsr_header_t *h = parse_headers(htext, &nh);
    vsr_header_t *rh = rhtext ? parse_headers(rhtext, &nrh) : NULL;

    harness_t hs = {0};
    uv_loop_init(&hs.loop);
    vsr_ports_t ports = {.resume = resume};
    if (runtime) {
        vsr_rtc_opts_t o = {.socket_path = runtime + 5};
        hs.rtc = vsr_rtc_new(&hs.loop, &o);
        ports.runtime_call = rt_call;
        ports.runtime_cancel = rt_cancel;
    }
    vsr_session_opts_t so = {.listener = cfg->n_listeners ? &cfg->listeners[0] : NULL, .envoy = 1,
                             .ports = &ports, .ports_ud = &hs};
    vsr_session_t *s = vsr_session_open(engine, &so);

    vsr_buf_t o;
    vsr_buf_init(&o, 0);
    vsr_buf_append_cstr(&o, "{");
    const vsr_effect_t *e = vsr_session_request_headers(s, vsr_slice_cstr(method), vsr_slice_cstr(path), h, nh);
    put_effect(&o, "request_headers", e);
    int over = e->status != 0;
    e = over ? NULL : settle(&hs, s, vsr_session_request_body(s, body ? body : "", blen));
    put_effect(&o, "request_body", e);
    over = over || e == NULL || e->status != 0;
    if (!over && rstatus) {
        e = vsr_session_response_headers(s, atoi(rstatus), rh, nrh);
        put_effect(&o, "response_headers", e);
        if (e->body_mode != VSR_BODY_RELAY || e->observe) {
            const vsr_effect_t *mid = vsr_session_response_body(s, rbody ? rbody : "", rblen, 0);
            vsr_buf_t whole; /* STREAM: the chunk's pieces, then the end's */
            vsr_buf_init(&whole, 0);
            for (size_t i = 0; mid->body_replaced && i < mid->n_body; i++)
                vsr_buf_append(&whole, mid->body[i].p, mid->body[i].len);
            e = settle(&hs, s, vsr_session_response_body(s, NULL, 0, VSR_BODY_END));
            vsr_effect_t end = *e;
            vsr_slice_t joined[2] = {vsr_buf_slice(&whole), VSR_SLICE_NULL};
            if (whole.len) {
                vsr_buf_t tail;
                vsr_buf_init(&tail, 0);
                for (size_t i = 0; e->body_replaced && i < e->n_body; i++)
                    vsr_buf_append(&tail, e->body[i].p, e->body[i].len);
                vsr_buf_append(&whole, tail.data, tail.len);
                vsr_buf_free(&tail);
                joined[0] = vsr_buf_slice(&whole);
                end.body = joined;
                end.n_body = 1;
                end.body_replaced = 1;
            }
            put_effect(&o, "response_body", &end);
            vsr_buf_free(&whole);
        } else {
            put_effect(&o, "response_body", NULL);
        }
    } else {
        put_effect(&o, "response_headers", NULL);
        put_effect(&o, "response_body", NULL);
    }
    const vsr_evidence_t *ev = vsr_session_evidence(s);
    vsr_buf_append_cstr(&o, "\"evidence\":{");
    put_opt(&o, "decision", ev->decision);
    vsr_buf_append_cstr(&o, ",");
    put_opt(&o, "selected_model", ev->selected_model);
    vsr_buf_append_cstr(&o, ",");
    put_opt(&o, "recipe", ev->recipe);
    vsr_buf_append_cstr(&o, ",");
    put_opt(&o, "algorithm", ev->algorithm);
    vsr_buf_append_cstr(&o, "}}\n");
    fwrite(o.data, 1, o.len, stdout);

    vsr_buf_free(&o);
    vsr_session_finish(s);
    if (hs.rtc)
        vsr_rtc_free(hs.rtc);
    uv_run(&hs.loop, UV_RUN_DEFAULT);
    uv_loop_close(&hs.loop);
    vsr_engine_unref(engine);
    vsr_config_free(cfg);
    vsr_free(h);
    vsr_free(rh);
    vsr_free(method);
    vsr_free(path);
    vsr_free(htext);
    vsr_free(body);
    vsr_free(rstatus);
    vsr_free(rhtext);
    vsr_free(rbody);
    vsr_buf_free(&err);
    return 0;
}
