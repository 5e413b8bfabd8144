/*
 * local.c — the endpoints vsr answers itself, without routing or a backend:
 * the probes (/health, /ready) on every listener, GET /metrics on the
 * metrics listener, and on the management listener its access check, the
 * configuration API (admin/ answers; this file carries the call to one of
 * admin/'s threads and back) and the routing preview.  They are a table of
 * paths (local_paths) that dispatch consults before a request is routed:
 * vsr__local_serve.  A management or metrics listener's request that no
 * entry serves is answered 404; a client listener's goes on to routing.
 */
#include "gateway/request-int.h"

#include <openssl/crypto.h>

/* A management API call running on a thread of admin/'s (vsr_admin_submit).
 * Two owners, counted in refs under mu: the thread until it has answered,
 * and this worker until `async` has closed.  A request that goes first
 * (request_free) closes `async` at once, so neither its loop nor a drain
 * ever waits for the call. */
struct admin_job_s {
    uv_async_t async;              /* the answer is in: wakes the worker */
    pthread_mutex_t mu;            /* guards req and refs */
    int refs;
    request_t *req;                /* NULL once the request is gone */
    vsr_admin_request_t ar;        /* slices of `copy`: the request may go while the call runs */
    vsr_buf_t copy;
    vsr_admin_response_t resp;
};

/* The configuration endpoints: admin/ answers, this only carries.  The
 * call runs on a thread of admin/'s (admin_job_t), because compiling and
 * warming a document (host names are resolved) must not stall the worker's
 * other connections; the request stays pinned meanwhile. */

static void admin_job_unref(admin_job_t *job)
{
    pthread_mutex_lock(&job->mu);
    int last = --job->refs == 0;
    pthread_mutex_unlock(&job->mu);
    if (!last)
        return;
    vsr_admin_response_free(&job->resp);
    vsr_buf_free(&job->copy);
    pthread_mutex_destroy(&job->mu);
    vsr_free(job);
}

static void admin_job_closed(uv_handle_t *h)
{
    admin_job_unref(h->data);
}

/* On admin/'s thread, once answered. */
static void admin_answered(void *ud)
{
    admin_job_t *job = ud;
    pthread_mutex_lock(&job->mu);
    if (job->req != NULL)
        uv_async_send(&job->async); /* under mu: the worker cannot be closing it */
    pthread_mutex_unlock(&job->mu);
    admin_job_unref(job);
}

void vsr__local_abandon(admin_job_t *job)
{
    pthread_mutex_lock(&job->mu);
    job->req = NULL;
    pthread_mutex_unlock(&job->mu);
    uv_close((uv_handle_t *)&job->async, admin_job_closed);
}

static void admin_done(uv_async_t *a)
{
    admin_job_t *job = a->data;
    pthread_mutex_lock(&job->mu);
    request_t *req = job->req;
    job->req = NULL;
    pthread_mutex_unlock(&job->mu);
    uv_close((uv_handle_t *)&job->async, admin_job_closed);
    if (req == NULL)
        return;
    req->admin_job = NULL;
    /* the answer names the version active once it was handled */
    vsr_engine_unref(req->eng);
    req->eng = vsr__gateway_pin(req->w->gw);
    vsr__request_reply(req, job->resp.status, job->resp.content_type, vsr_buf_slice(&job->resp.body),
                       job->resp.headers.data, req->is_head, !req->keep_alive);
    vsr__request_finish(req);
}

/* A copy of s in b (reserved in full beforehand, so earlier slices stay valid). */
static vsr_slice_t keep(vsr_buf_t *b, vsr_slice_t s)
{
    size_t off = b->len;
    vsr_buf_append_slice(b, s);
    return vsr_slice(b->data + off, s.len);
}

static int handle_admin(request_t *req)
{
    vsr_admin_t *admin = req->w->gw->opts.admin;
    if (admin == NULL || !(vsr_admin_owns(req->head->target) || vsr__gateway_replay_owns(req->head->target)))
        return 0;
    admin_job_t *job = vsr_calloc(1, sizeof(*job));
    pthread_mutex_init(&job->mu, NULL);
    job->req = req;
    vsr_slice_t ctype = VSR_SLICE_NULL, if_match = VSR_SLICE_NULL;
    vsr_http_head_get(req->head, "content-type", &ctype);
    job->ar.has_if_match = vsr_http_head_get(req->head, "if-match", &if_match);
    vsr_buf_init(&job->copy, 0);
    vsr_buf_reserve(&job->copy, req->head->method.len + req->head->target.len + ctype.len + if_match.len +
                                    req->body.len + 1);
    job->ar.method = keep(&job->copy, req->head->method);
    job->ar.target = keep(&job->copy, req->head->target);
    job->ar.content_type = keep(&job->copy, ctype);
    job->ar.if_match = keep(&job->copy, if_match);
    vsr_slice_t body = keep(&job->copy, vsr_buf_slice(&req->body));
    job->ar.body = body.p;
    job->ar.body_len = body.len;
    uv_async_init(&req->w->loop, &job->async, admin_done);
    job->async.data = job;
    job->refs = 2;
    int rc = vsr_admin_submit(admin, &job->ar, &job->resp, admin_answered, job);
    if (rc != VSR_OK) {
        job->refs = 1; /* no thread: only the handle's */
        job->req = NULL;
        uv_close((uv_handle_t *)&job->async, admin_job_closed);
        vsr__request_reply_error(req, 503, "server_error", rc == VSR_ERR_TOO_BIG ? "busy" : "unavailable",
                                 rc == VSR_ERR_TOO_BIG ? VSR_SLICE_LIT("too many management calls are in progress")
                                                       : VSR_SLICE_LIT("cannot run the request now"),
                                 "retry-after: 1\r\n", req->is_head, !req->keep_alive);
        vsr__request_finish(req);
        return 1;
    }
    req->admin_job = job;
    vsr__request_enter(req, RQ_OFFLOOP);
    return 1;
}

/* Every request on the management listener, probes included, passes
 * admin/'s access check first (token, Host, Origin).  1 when refused (and
 * answered). */
static int management_refused(request_t *req)
{
    vsr_admin_t *admin = req->w->gw->opts.admin;
    if (admin == NULL)
        return 0;
    vsr_admin_access_t acc = {VSR_SLICE_NULL, VSR_SLICE_NULL, VSR_SLICE_NULL, req->head->method, req->head->target};
    vsr_slice_t v;
    if (vsr_http_head_get(req->head, "authorization", &v))
        acc.authorization = v.p ? v : VSR_SLICE_LIT("");
    if (vsr_http_head_get(req->head, "host", &v))
        acc.host = v.p ? v : VSR_SLICE_LIT("");
    if (vsr_http_head_get(req->head, "origin", &v))
        acc.origin = v.p ? v : VSR_SLICE_LIT("");
    vsr_admin_response_t r;
    if (vsr_admin_check_access(admin, &acc, &r))
        return 0;
    vsr__request_reply(req, r.status, r.content_type, vsr_buf_slice(&r.body), r.headers.data, req->is_head,
                       !req->keep_alive);
    vsr_admin_response_free(&r);
    vsr__request_finish(req);
    return 1;
}

static void preview_done(void *ud, int status)
{
    request_t *req = ud;
    conn_t *c = req->c;
    int h2 = req->st != NULL, waited = req->preview != NULL;
    req->preview = NULL;
    vsr__request_reply(req, status, "application/json", vsr_buf_slice(&req->preview_out), NULL, req->is_head,
                       !req->keep_alive);
    vsr__request_finish(req);
    if (h2 && waited)
        vsr__conn_flush_soon(c);
}

/* POST /api/v1/routing/preview: the decision a text would get, without a backend call. */
static void serve_preview(request_t *req)
{
    if (!vsr_slice_eq_cstr(req->head->method, "POST")) {
        vsr__request_reply_error(req, 405, "invalid_request_error", NULL, VSR_SLICE_LIT("method not allowed"),
                                 "allow: POST\r\n", req->is_head, !req->keep_alive);
        vsr__request_finish(req);
        return;
    }
    vsr_json_t *j = &req->json;
    req->has_json = 1;
    uint32_t mt, tt;
    vsr_slice_t model = VSR_SLICE_NULL, text = VSR_SLICE_NULL;
    if (vsr_json_parse(j, req->body.data ? req->body.data : "", req->body.len, NULL) != VSR_OK ||
        vsr_json_type(j, 0) != VSR_JSON_OBJECT) {
        vsr__request_error(req, 400, "malformed JSON body");
        return;
    }
    if (vsr_json_object_get(j, 0, "model", &mt) == VSR_OK && vsr_json_type(j, mt) == VSR_JSON_STRING)
        vsr_json_string(j, mt, &req->pool, &model);
    if (vsr_json_object_get(j, 0, "text", &tt) != VSR_OK || vsr_json_type(j, tt) != VSR_JSON_STRING) {
        vsr__request_error(req, 400, "text field is required");
        return;
    }
    vsr_json_string(j, tt, &req->pool, &text);
    const vsr_config_t *cfg = vsr_engine_config(req->eng);
    if (model.len == 0)
        model = vsr_slice_cstr(cfg->auto_model_names.n ? cfg->auto_model_names.items[0] : "");
    vsr_slice_t q = VSR_SLICE_NULL;
    vsr_slice_split(req->head->target, '?', &q);
    int trace = q.p && (vsr_slice_eq_cstr(q, "trace=true") || vsr_slice_starts_with(q, VSR_SLICE_LIT("trace=true&")));
    /* the same path as a request's body phase: it may wait on the runtime (preview_done) */
    vsr_buf_init(&req->preview_out, 0);
    vsr__request_enter(req, RQ_OFFLOOP);
    int status = vsr_engine_preview_wait(req->eng, model, text, trace, &req->preview_out, &vsr__gateway_ports, req,
                                         vsr__request_deadline(req), preview_done, req, &req->preview);
    if (status != VSR_AGAIN)
        preview_done(req, status);
}

static int get_like(const request_t *req)
{
    return vsr_slice_eq_cstr(req->head->method, "GET") || req->is_head;
}

/* GET /health: the process serves. */
static void serve_health(request_t *req)
{
    vsr__request_reply(req, 200, "application/json", VSR_SLICE_LIT("{\"status\":\"ok\"}"), NULL, req->is_head,
                       !req->keep_alive);
    vsr__request_finish(req);
}

/* GET /ready: the gateway serves, the runtime (when one is lent) is ready
 * and every backend host has resolved. */
static void serve_ready(request_t *req)
{
    worker_t *w = req->w;
    int ready = atomic_load(&w->gw->ready);
    int rt_ready = vsr__gateway_runtime_ready(w->gw);
    /* an endpoint whose host has not resolved yet cannot be served: not ready, and which */
    vsr_buf_t un;
    vsr_buf_init(&un, 0);
    vsr_buf_append_cstr(&un, "{\"status\":\"not ready\",\"reason\":\"backend hosts not resolved yet\",\"unresolved\":[");
    size_t n_un = ready ? vsr_upstream_unresolved(vsr_engine_part(req->eng), &un, 16) : 0; /* the first 16 */
    if (ready && !rt_ready) {
        vsr__request_reply(req, 503, "application/json",
                           VSR_SLICE_LIT("{\"status\":\"not ready\",\"reason\":\"model runtime not ready\"}"), NULL,
                           req->is_head, !req->keep_alive);
    } else if (n_un > 0) {
        vsr_buf_printf(&un, "],\"unresolved_count\":%zu}", n_un);
        vsr__request_reply(req, 503, "application/json", vsr_buf_slice(&un), NULL, req->is_head, !req->keep_alive);
    } else {
        vsr__request_reply(req, ready ? 200 : 503, "application/json",
                           ready ? VSR_SLICE_LIT("{\"status\":\"ready\"}")
                                 : VSR_SLICE_LIT("{\"status\":\"not ready\"}"),
                           NULL, req->is_head, !req->keep_alive);
    }
    vsr_buf_free(&un);
    vsr__request_finish(req);
}

/* GET /metrics (the metrics listener): every worker's shards, rendered. */
static void serve_metrics(request_t *req)
{
    vsr_gateway_t *gw = req->w->gw;
    const vsr_config_t *cfg = vsr_engine_config(req->eng);
    vsr_upstream_shared_t *shared = vsr_engine_part(req->eng);
    for (size_t i = 0; shared && i < cfg->n_models; i++) {
        for (size_t j = 0; j < cfg->models[i].n_backends; j++) {
            int healthy, ejected;
            vsr_upstream_endpoint_state(shared, i, j, &healthy, &ejected);
            vsr_metrics_set_endpoint_health(gw->opts.metrics, vsr_slice_cstr(cfg->models[i].name),
                                            vsr_slice_cstr(cfg->models[i].backends[j].name), healthy, ejected);
        }
    }
    vsr__gateway_replay_metrics(gw->opts.metrics);
    vsr_buf_t out;
    vsr_buf_init(&out, 0);
    vsr_metrics_render(gw->opts.metrics, &out);
    vsr_model_stats_render(gw->model_stats, &out);
    vsr__request_reply(req, 200, "text/plain; version=0.0.4", vsr_buf_slice(&out), NULL, req->is_head,
                       !req->keep_alive);
    vsr_buf_free(&out);
    vsr__request_finish(req);
}

/* GET /api/v1/models/stats: the live per-model statistics the selectors read. */
static void serve_model_stats(request_t *req)
{
    vsr_buf_t out;
    vsr_buf_init(&out, 0);
    vsr_model_stats_json(req->w->gw->model_stats, &out);
    vsr__request_reply(req, 200, "application/json", vsr_buf_slice(&out), NULL, req->is_head, !req->keep_alive);
    vsr_buf_free(&out);
    vsr__request_finish(req);
}

/* ---- /api/v1/keys: the key store (docs/tenancy.md) ---- */

/* The request's JSON object body, or NULL after a 400 (an empty body reads as {}). */
static vsr_json_t *keys_body(request_t *req)
{
    vsr_json_t *j = &req->json;
    req->has_json = 1;
    const char *p = req->body.len ? req->body.data : "{}";
    if (vsr_json_parse(j, p, req->body.len ? req->body.len : 2, NULL) != VSR_OK || vsr_json_type(j, 0) != VSR_JSON_OBJECT) {
        vsr__request_error(req, 400, "malformed JSON body");
        return NULL;
    }
    return j;
}

/* A string field, or an empty slice when absent or null; -1 after a 400 for another type. */
static int keys_string(request_t *req, vsr_json_t *j, const char *name, vsr_slice_t *out)
{
    uint32_t t;
    *out = VSR_SLICE_NULL;
    if (vsr_json_object_get(j, 0, name, &t) != VSR_OK || vsr_json_type(j, t) == VSR_JSON_NULL)
        return 0;
    if (vsr_json_type(j, t) != VSR_JSON_STRING || vsr_json_string(j, t, &req->pool, out) != VSR_OK ||
        out->len > 256 || vsr_find(out->p, out->len, ",", 1) || memchr(out->p, '\0', out->len)) {
        char msg[96];
        snprintf(msg, sizeof(msg), "%s must be a string of at most 256 bytes, without commas", name);
        vsr__request_error(req, 400, msg);
        return -1;
    }
    return 0;
}

static void keys_reply(request_t *req, int status, vsr_buf_t *out)
{
    vsr__request_reply(req, status, "application/json", vsr_buf_slice(out), "cache-control: no-store\r\n",
                       req->is_head, !req->keep_alive);
    vsr_buf_free(out);
    vsr__request_finish(req);
}

/* The key's fields with its secret, the one time it is shown. */
static void keys_secret_reply(request_t *req, int status, vsr_slice_t id, const char *secret)
{
    vsr_buf_t out;
    vsr_buf_init(&out, 0);
    vsr__keystore_entry_json(req->w->gw->keystore, id, &out);
    if (out.len) {
        out.len--; /* the entry's closing brace */
        vsr_buf_printf(&out, ",\"key\":\"%s\"}", secret);
    }
    keys_reply(req, status, &out);
}

/* GET lists the keys (never a secret); POST {user, groups[], name} makes one. */
static void serve_keys(request_t *req)
{
    vsr__keystore_t *ks = req->w->gw->keystore;
    if (get_like(req)) {
        vsr_buf_t out;
        vsr_buf_init(&out, 0);
        vsr__keystore_list_json(ks, &out);
        keys_reply(req, 200, &out);
        return;
    }
    if (!vsr_slice_eq_cstr(req->head->method, "POST")) {
        vsr__request_reply_error(req, 405, "invalid_request_error", NULL, VSR_SLICE_LIT("method not allowed"),
                                 "allow: GET, HEAD, POST\r\n", req->is_head, !req->keep_alive);
        vsr__request_finish(req);
        return;
    }
    vsr_json_t *j = keys_body(req);
    vsr_slice_t user, name;
    if (j == NULL || keys_string(req, j, "user", &user) || keys_string(req, j, "name", &name))
        return;
    vsr_buf_t groups;
    vsr_buf_init(&groups, 0);
    uint32_t gt;
    if (vsr_json_object_get(j, 0, "groups", &gt) == VSR_OK && vsr_json_type(j, gt) != VSR_JSON_NULL) {
        int bad = vsr_json_type(j, gt) != VSR_JSON_ARRAY || j->toks[gt].count > 64;
        for (uint32_t i = 0, k = gt + 1; !bad && i < j->toks[gt].count; i++, k = j->toks[k].next) {
            vsr_slice_t g;
            bad = vsr_json_type(j, k) != VSR_JSON_STRING || vsr_json_string(j, k, &req->pool, &g) != VSR_OK ||
                  g.len == 0 || g.len > 256 || vsr_find(g.p, g.len, ",", 1) || memchr(g.p, '\0', g.len);
            if (!bad)
                vsr_buf_printf(&groups, "%s%.*s", i ? "," : "", (int)g.len, g.p);
        }
        if (bad) {
            vsr_buf_free(&groups);
            vsr__request_error(req, 400, "groups must be a list of at most 64 non-empty strings without commas");
            return;
        }
    }
    char id[VSR__KS_ID_LEN + 1], secret[VSR__KS_SECRET_LEN + 1];
    int rc = vsr__keystore_create(ks, user, vsr_buf_slice(&groups), name, id, secret);
    vsr_buf_free(&groups);
    if (rc != VSR_OK) {
        vsr__request_error(req, 507, "the key store is full");
        return;
    }
    keys_secret_reply(req, 201, vsr_slice_cstr(id), secret);
    OPENSSL_cleanse(secret, sizeof(secret));
}

/* POST {id}: revoke (the key gets the same 401 as a wrong one from now on) or rotate (a new secret). */
static void keys_by_id(request_t *req, int rotate)
{
    if (!vsr_slice_eq_cstr(req->head->method, "POST")) {
        vsr__request_reply_error(req, 405, "invalid_request_error", NULL, VSR_SLICE_LIT("method not allowed"),
                                 "allow: POST\r\n", req->is_head, !req->keep_alive);
        vsr__request_finish(req);
        return;
    }
    vsr_json_t *j = keys_body(req);
    vsr_slice_t id;
    if (j == NULL || keys_string(req, j, "id", &id))
        return;
    vsr__keystore_t *ks = req->w->gw->keystore;
    char secret[VSR__KS_SECRET_LEN + 1];
    int rc = rotate ? vsr__keystore_rotate(ks, id, secret) : vsr__keystore_revoke(ks, id);
    if (rc != VSR_OK) {
        vsr__request_error(req, 404, "no such key");
        return;
    }
    if (rotate) {
        keys_secret_reply(req, 200, id, secret);
        OPENSSL_cleanse(secret, sizeof(secret));
        return;
    }
    vsr_buf_t out;
    vsr_buf_init(&out, 0);
    vsr_buf_append_cstr(&out, "{\"revoked\":");
    vsr_buf_append_json_string(&out, id);
    vsr_buf_append_cstr(&out, "}");
    keys_reply(req, 200, &out);
}

static void serve_keys_revoke(request_t *req)
{
    keys_by_id(req, 0);
}

static void serve_keys_rotate(request_t *req)
{
    keys_by_id(req, 1);
}

/* ---- the path table ---- */

enum {
    ON_CLIENT = 1,     /* a client listener (listeners[]) */
    ON_MANAGEMENT = 2, /* the management listener */
    ON_METRICS = 4,    /* the metrics listener */
    ON_ANY = ON_CLIENT | ON_MANAGEMENT | ON_METRICS,
};

typedef struct {
    const char *path;   /* the request's path: its query and trailing '/'s aside */
    unsigned on;        /* the listeners that serve it (ON_*) */
    unsigned get_only : 1; /* GET and HEAD only: another method is not this entry's */
    unsigned probe : 1; /* served before the management listener's configuration API claims the path */
    void (*serve)(request_t *req); /* answers (or starts answering) the request */
} local_path_t;

static const local_path_t local_paths[] = {
    {"/health", ON_ANY, 1, 1, serve_health},
    {"/ready", ON_ANY, 1, 1, serve_ready},
    {"/metrics", ON_METRICS, 1, 0, serve_metrics},
    {"/api/v1/routing/preview", ON_MANAGEMENT, 0, 0, serve_preview}, /* POST; another method is told 405 */
    {"/api/v1/models/stats", ON_MANAGEMENT, 1, 1, serve_model_stats},
    {"/api/v1/keys", ON_MANAGEMENT, 0, 0, serve_keys},
    {"/api/v1/keys/revoke", ON_MANAGEMENT, 0, 0, serve_keys_revoke}, /* POST */
    {"/api/v1/keys/rotate", ON_MANAGEMENT, 0, 0, serve_keys_rotate}, /* POST */
};

static const local_path_t *local_find(const request_t *req, vsr_slice_t path, unsigned on, int probe)
{
    for (size_t i = 0; i < VSR_ARRAY_LEN(local_paths); i++) {
        const local_path_t *e = &local_paths[i];
        if ((e->on & on) && e->probe == (unsigned)probe && vsr_slice_eq_cstr(path, e->path) &&
            (!e->get_only || get_like(req)))
            return e;
    }
    return NULL;
}

int vsr__local_serve(request_t *req, vsr_slice_t path)
{
    const listener_t *l = req->l;
    unsigned on = l->management ? ON_MANAGEMENT : l->metrics ? ON_METRICS : ON_CLIENT;
    if (l->management && management_refused(req))
        return 1;
    const local_path_t *e = local_find(req, path, on, 1);
    if (e == NULL && l->management && handle_admin(req))
        return 1; /* the configuration API (admin/ decides what it owns) */
    if (e == NULL)
        e = local_find(req, path, on, 0);
    if (e) {
        e->serve(req);
        return 1;
    }
    if (on == ON_CLIENT)
        return 0; /* routed */
    vsr__request_error(req, 404, "endpoint not found");
    return 1;
}
