/*
 * admin_http.c — the management API's configuration endpoints (ref §4.5),
 * independent of any transport: a request's method, target, content type,
 * If-Match and body in; status, headers and body out.
 *
 * ETag / If-Match: the entity tag of the configuration is its version,
 * "\"<version>\"".  PUT honours If-Match when given (stale → 412); rollback
 * requires it (missing → 428, stale → 412).  "*" matches any version.
 */
#include "admin/admin-int.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>

#include "json/json.h"

static void json_error(vsr_admin_response_t *r, int status, const char *type, const char *code, const char *msg)
{
    r->status = status;
    vsr_buf_reset(&r->body);
    vsr_json_error_body(&r->body, vsr_slice_cstr(msg), type, code);
}

static void method_not_allowed(vsr_admin_response_t *r, const char *allow)
{
    json_error(r, 405, "invalid_request_error", "method_not_allowed", "method not allowed");
    vsr_buf_printf(&r->headers, "allow: %s\r\n", allow);
}

static void put_etag(vsr_admin_response_t *r, uint64_t version)
{
    vsr_buf_printf(&r->headers, "etag: \"%llu\"\r\n", (unsigned long long)version);
}

/* Does If-Match name the active version?  Accepts "N", N, W/"N" and *. */
static int if_match_ok(vsr_slice_t v, uint64_t active)
{
    v = vsr_slice_trim(v);
    if (vsr_slice_eq_cstr(v, "*"))
        return 1;
    while (v.len > 0) {
        vsr_slice_t rest = VSR_SLICE_NULL;
        vsr_slice_t tag = vsr_slice_trim(vsr_slice_split(v, ',', &rest));
        if (vsr_slice_starts_with(tag, VSR_SLICE_LIT("W/")))
            tag = vsr_slice(tag.p + 2, tag.len - 2);
        if (tag.len >= 2 && tag.p[0] == '"' && tag.p[tag.len - 1] == '"')
            tag = vsr_slice(tag.p + 1, tag.len - 2);
        char buf[32];
        if (tag.len > 0 && tag.len < sizeof(buf)) {
            memcpy(buf, tag.p, tag.len);
            buf[tag.len] = '\0';
            char *end;
            unsigned long long n = strtoull(buf, &end, 10);
            if (*end == '\0' && n == active)
                return 1;
        }
        if (rest.p == NULL)
            break;
        v = rest;
    }
    return 0;
}

/* "NAME:LINE:COL: message" lines → [{"line":L,"column":C,"message":M}] */
static void put_errors(vsr_buf_t *b, const vsr_buf_t *errors)
{
    vsr_buf_append_cstr(b, "[");
    const char *p = errors->data ? errors->data : "";
    const char *end = p + errors->len;
    int first = 1;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *le = nl ? nl : end;
        if (le > p) {
            /* find ":LINE:COL: " (the name itself may hold colons) */
            unsigned line = 0, col = 0;
            const char *msg = p;
            for (const char *q = p; q < le; q++) {
                unsigned l, c;
                int used = 0;
                if (*q == ':' && sscanf(q, ":%u:%u: %n", &l, &c, &used) == 2 && used > 0 && q + used <= le) {
                    line = l;
                    col = c;
                    msg = q + used;
                    break;
                }
            }
            vsr_buf_append_cstr(b, first ? "" : ",");
            first = 0;
            if (line)
                vsr_buf_printf(b, "{\"line\":%u,\"column\":%u,\"message\":", line, col);
            else
                vsr_buf_append_cstr(b, "{\"message\":");
            vsr_buf_append_json_string(b, vsr_slice(msg, (size_t)(le - msg)));
            vsr_buf_append_cstr(b, ",\"text\":");
            vsr_buf_append_json_string(b, vsr_slice(p, (size_t)(le - p)));
            vsr_buf_append_cstr(b, "}");
        }
        p = nl ? nl + 1 : end;
    }
    vsr_buf_append_cstr(b, "]");
}

static int nack_status(const char *code)
{
    if (strcmp(code, "restart_required") == 0)
        return 409;
    if (strcmp(code, "warmup_failed") == 0 || strcmp(code, "busy") == 0 || strcmp(code, "unavailable") == 0)
        return 503;
    if (strcmp(code, "invalid_document") == 0)
        return 400;
    return 422;
}

/* ACK or NACK of an apply or rollback as the answer. */
static void put_result(vsr_admin_response_t *r, const vsr_admin_result_t *res, int dry, uint64_t rolled_back_to)
{
    vsr_buf_t *b = &r->body;
    vsr_buf_reset(b);
    if (res->accepted) {
        r->status = 200;
        if (dry)
            vsr_buf_printf(b, "{\"valid\":true,\"hash\":\"%s\",\"config_version\":%llu}", res->hash,
                           (unsigned long long)res->version);
        else {
            vsr_buf_printf(b, "{\"status\":\"ACK\",\"config_version\":%llu,\"previous_version\":%llu,\"hash\":\"%s\",\"changed\":%s",
                           (unsigned long long)res->version, (unsigned long long)res->previous, res->hash,
                           res->unchanged ? "false" : "true");
            if (rolled_back_to)
                vsr_buf_printf(b, ",\"rolled_back_to\":%llu", (unsigned long long)rolled_back_to);
            vsr_buf_append_cstr(b, "}");
            put_etag(r, res->version);
        }
        return;
    }
    r->status = nack_status(res->code);
    const char *first = res->errors.data ? res->errors.data : res->code;
    const char *nl = strchr(first, '\n');
    vsr_buf_append_cstr(b, "{\"error\":{\"message\":");
    vsr_buf_append_json_string(b, vsr_slice(first, nl ? (size_t)(nl - first) : strlen(first)));
    vsr_buf_append_cstr(b, ",\"type\":\"invalid_request_error\",\"code\":");
    vsr_buf_append_json_string(b, vsr_slice_cstr(res->code));
    vsr_buf_printf(b, "},\"status\":\"%s\",\"reject_code\":\"%s\",\"config_version\":%llu,\"hash\":\"%s\",\"errors\":",
                   dry ? "invalid" : "NACK", res->code, (unsigned long long)res->version, res->hash);
    put_errors(b, &res->errors);
    vsr_buf_append_cstr(b, "}");
    put_etag(r, res->version);
}

static void get_config(vsr_admin_t *a, vsr_admin_response_t *r)
{
    pthread_mutex_lock(&a->state_mu);
    const vsr_config_version_t *v = vsr_config_history_active(&a->hist);
    if (v == NULL) {
        pthread_mutex_unlock(&a->state_mu);
        json_error(r, 503, "server_error", "not_ready", "no configuration is active yet");
        return;
    }
    char ts[64];
    vsr__admin_rfc3339(v->time, ts);
    r->status = 200;
    vsr_buf_printf(&r->body, "{\"config_version\":%llu,\"hash\":\"%s\",\"source\":\"%s\",\"activated_at\":\"%s\",\"document\":",
                   (unsigned long long)v->version, v->hash, v->source, ts);
    put_etag(r, v->version);
    /* a copy: the lock is not held while the document is rendered */
    size_t len = v->len;
    char *doc = vsr_malloc(len + 1);
    memcpy(doc, v->doc, len + 1);
    pthread_mutex_unlock(&a->state_mu);
    /* secrets never leave through the API: the document comes back redacted */
    if (vsr_config_print("active", doc, len, NULL, 1, &r->body) != VSR_OK)
        vsr_buf_append_cstr(&r->body, "null");
    vsr_buf_append_cstr(&r->body, "}");
    memset(doc, 0, len);
    vsr_free(doc);
}

static void get_versions(vsr_admin_t *a, vsr_admin_response_t *r)
{
    pthread_mutex_lock(&a->state_mu);
    const vsr_config_version_t *act = vsr_config_history_active(&a->hist);
    r->status = 200;
    vsr_buf_printf(&r->body, "{\"active_version\":%llu,\"versions\":[", (unsigned long long)(act ? act->version : 0));
    for (size_t i = a->hist.n; i-- > 0;) { /* newest first */
        const vsr_config_version_t *v = &a->hist.v[i];
        char ts[64];
        vsr__admin_rfc3339(v->time, ts);
        vsr_buf_printf(&r->body, "%s{\"config_version\":%llu,\"hash\":\"%s\",\"source\":\"%s\",\"activated_at\":\"%s\",\"active\":%s}",
                       i + 1 == a->hist.n ? "" : ",", (unsigned long long)v->version, v->hash, v->source, ts,
                       v == act ? "true" : "false");
    }
    vsr_buf_append_cstr(&r->body, "]}");
    if (act)
        put_etag(r, act->version);
    pthread_mutex_unlock(&a->state_mu);
}

static void get_hash(vsr_admin_t *a, vsr_admin_response_t *r)
{
    pthread_mutex_lock(&a->state_mu);
    const vsr_config_version_t *act = vsr_config_history_active(&a->hist);
    r->status = 200;
    vsr_buf_printf(&r->body,
                   "{\"activation_status\":\"%s\",\"config_version\":%llu,\"active_config_hash\":\"%s\","
                   "\"source_config_hash\":\"%s\"",
                   a->last_rejected ? "rejected" : "active", (unsigned long long)(act ? act->version : 0),
                   act ? act->hash : "", a->last_source_hash[0] ? a->last_source_hash : (act ? act->hash : ""));
    if (a->last_rejected)
        vsr_buf_printf(&r->body, ",\"reject_code\":\"%s\"", a->last_code);
    vsr_buf_append_cstr(&r->body, "}");
    if (act)
        put_etag(r, act->version);
    pthread_mutex_unlock(&a->state_mu);
}

static uint64_t active_version(vsr_admin_t *a)
{
    pthread_mutex_lock(&a->state_mu);
    const vsr_config_version_t *act = vsr_config_history_active(&a->hist);
    uint64_t v = act ? act->version : 0;
    pthread_mutex_unlock(&a->state_mu);
    return v;
}

static void put_config(vsr_admin_t *a, const vsr_admin_request_t *req, vsr_admin_response_t *r, int dry)
{
    vsr_slice_t ct = vsr_slice_trim(vsr_slice_split(req->content_type, ';', NULL));
    int json = vsr_slice_case_eq_cstr(ct, "application/json");
    /* what `curl --data-binary @file` and other generic clients send when
     * not told (a form type, octet-stream) is read as YAML too */
    int yaml = ct.len == 0 || vsr_slice_case_eq_cstr(ct, "application/yaml") ||
               vsr_slice_case_eq_cstr(ct, "application/x-yaml") || vsr_slice_case_eq_cstr(ct, "text/yaml") ||
               vsr_slice_case_eq_cstr(ct, "text/x-yaml") ||
               vsr_slice_case_eq_cstr(ct, "application/x-www-form-urlencoded") ||
               vsr_slice_case_eq_cstr(ct, "application/octet-stream");
    if (!json && !yaml) {
        json_error(r, 415, "invalid_request_error", "unsupported_media_type",
                   "the body must be the configuration document as application/yaml or application/json");
        return;
    }
    if (json) {
        /* JSON is YAML, but a JSON body is held to JSON's own grammar */
        vsr_json_t j;
        int ok = vsr_json_parse(&j, req->body ? req->body : "", req->body_len, NULL) == VSR_OK &&
                 vsr_json_type(&j, 0) == VSR_JSON_OBJECT;
        vsr_json_free(&j);
        if (!ok) {
            json_error(r, 400, "invalid_request_error", "invalid_document", "the body is not a JSON object");
            return;
        }
    }
    if (!dry && req->has_if_match && !if_match_ok(req->if_match, active_version(a))) {
        json_error(r, 412, "invalid_request_error", "precondition_failed",
                   "If-Match does not name the active configuration version");
        put_etag(r, active_version(a));
        return;
    }
    vsr_admin_result_t res;
    vsr_admin_apply(a, "request", req->body ? req->body : "", req->body_len, "api",
                    VSR_ADMIN_BOUNDED | (dry ? VSR_ADMIN_DRY_RUN : 0), &res);
    put_result(r, &res, dry, 0);
    vsr_admin_result_free(&res);
}

static void rollback(vsr_admin_t *a, const vsr_admin_request_t *req, vsr_admin_response_t *r)
{
    uint64_t act = active_version(a);
    if (!req->has_if_match) {
        json_error(r, 428, "invalid_request_error", "precondition_required",
                   "a rollback requires If-Match with the active configuration version (its ETag)");
        put_etag(r, act);
        return;
    }
    if (!if_match_ok(req->if_match, act)) {
        json_error(r, 412, "invalid_request_error", "precondition_failed",
                   "If-Match does not name the active configuration version");
        put_etag(r, act);
        return;
    }
    vsr_json_t j;
    uint32_t t;
    int64_t want = -1;
    if (vsr_json_parse(&j, req->body ? req->body : "", req->body_len, NULL) == VSR_OK) {
        double d;
        if (vsr_json_type(&j, 0) == VSR_JSON_OBJECT && vsr_json_object_get(&j, 0, "config_version", &t) == VSR_OK &&
            vsr_json_type(&j, t) == VSR_JSON_NUMBER && vsr_json_number(&j, t, &d) == VSR_OK && d >= 1 &&
            d <= 9007199254740992.0 && d == (double)(int64_t)d)
            want = (int64_t)d;
    }
    vsr_json_free(&j);
    if (want < 0) {
        json_error(r, 400, "invalid_request_error", "invalid_request",
                   "the body must be {\"config_version\": N} with N a positive integer");
        return;
    }
    vsr_admin_result_t res;
    if (vsr_admin_rollback(a, (uint64_t)want, &res) == VSR_ERR_NOT_FOUND) {
        char msg[160];
        snprintf(msg, sizeof(msg), "version %lld is not in the history (the last %d activated versions are kept)",
                 (long long)want, VSR_CONFIG_HISTORY);
        json_error(r, 404, "invalid_request_error", "version_not_found", msg);
    } else {
        put_result(r, &res, 0, (uint64_t)want);
    }
    vsr_admin_result_free(&res);
}

static int which_path(vsr_slice_t target)
{
    vsr_slice_t path = vsr_slice_split(target, '?', NULL);
    while (path.len > 1 && path.p[path.len - 1] == '/')
        path.len--;
    static const char *const paths[] = {"/api/v1/config", "/api/v1/config/validate", "/api/v1/config/versions",
                                        "/api/v1/config/rollback", "/api/v1/config/hash"};
    for (int i = 0; i < 5; i++)
        if (vsr_slice_eq_cstr(path, paths[i]))
            return i;
    return -1;
}

int vsr_admin_owns(vsr_slice_t target)
{
    return which_path(target) >= 0;
}

void vsr_admin_set_extra(vsr_admin_t *a, int (*owns)(vsr_slice_t target),
                         void (*handle)(void *ud, vsr_engine_t *active, const vsr_admin_request_t *req,
                                        vsr_admin_response_t *resp),
                         void *ud)
{
    a->extra_owns = owns;
    a->extra_handle = handle;
    a->extra_ud = ud;
}

int vsr_admin_handle(vsr_admin_t *a, const vsr_admin_request_t *req, vsr_admin_response_t *r)
{
    int which = which_path(req->target);
    int extra = which < 0 && a->extra_owns && a->extra_handle && a->extra_owns(req->target);
    if (which < 0 && !extra)
        return 0;
    memset(r, 0, sizeof(*r));
    vsr_buf_init(&r->headers, 0);
    vsr_buf_init(&r->body, 0);
    r->content_type = "application/json";
    r->status = 200;
    if (extra) {
        vsr_engine_t *active = vsr_admin_active(a);
        a->extra_handle(a->extra_ud, active, req, r);
        vsr_engine_unref(active);
        return 1;
    }
    int get = vsr_slice_eq_cstr(req->method, "GET") || vsr_slice_eq_cstr(req->method, "HEAD");
    int post = vsr_slice_eq_cstr(req->method, "POST");
    switch (which) {
    case 0:
        if (get)
            get_config(a, r);
        else if (vsr_slice_eq_cstr(req->method, "PUT"))
            put_config(a, req, r, 0);
        else
            method_not_allowed(r, "GET, HEAD, PUT");
        break;
    case 1:
        if (post)
            put_config(a, req, r, 1);
        else
            method_not_allowed(r, "POST");
        break;
    case 2:
        if (get)
            get_versions(a, r);
        else
            method_not_allowed(r, "GET, HEAD");
        break;
    case 3:
        if (post)
            rollback(a, req, r);
        else
            method_not_allowed(r, "POST");
        break;
    case 4:
        if (get)
            get_hash(a, r);
        else
            method_not_allowed(r, "GET, HEAD");
        break;
    }
    return 1;
}

void vsr_admin_response_free(vsr_admin_response_t *r)
{
    vsr_buf_free(&r->headers);
    vsr_buf_free(&r->body);
}

/* ---- running calls off the loops ---- */

typedef struct {
    vsr_admin_t *a;
    const vsr_admin_request_t *req;
    vsr_admin_response_t *resp;
    void (*done)(void *ud);
    void *ud;
} job_t;

static void *job_main(void *arg)
{
    job_t *j = arg;
    vsr_admin_t *a = j->a;
    vsr_admin_handle(a, j->req, j->resp);
    j->done(j->ud);
    vsr_free(j);
    atomic_fetch_sub(&a->jobs, 1);
    vsr__admin_thread_end(a);
    return NULL;
}

int vsr_admin_submit(vsr_admin_t *a, const vsr_admin_request_t *req, vsr_admin_response_t *resp,
                     void (*done)(void *ud), void *ud)
{
    if (vsr__admin_closed(a))
        return VSR_ERR;
    if (atomic_fetch_add(&a->jobs, 1) >= VSR_ADMIN_MAX_JOBS) {
        atomic_fetch_sub(&a->jobs, 1);
        return VSR_ERR_TOO_BIG;
    }
    job_t *j = vsr_malloc(sizeof(*j));
    *j = (job_t){a, req, resp, done, ud};
    if (vsr__admin_spawn(a, job_main, j) != VSR_OK) {
        vsr_free(j);
        atomic_fetch_sub(&a->jobs, 1);
        return VSR_ERR;
    }
    return VSR_OK;
}

/* ---- who may call ---- */

int vsr_admin_loopback(const char *addr)
{
    unsigned char bin[16];
    if (inet_pton(AF_INET, addr, bin) == 1)
        return bin[0] == 127;
    if (inet_pton(AF_INET6, addr, bin) == 1) {
        static const unsigned char v6_loopback[16] = {[15] = 1};
        static const unsigned char v4_mapped[12] = {[10] = 0xff, [11] = 0xff};
        return memcmp(bin, v6_loopback, 16) == 0 || (memcmp(bin, v4_mapped, 12) == 0 && bin[12] == 127);
    }
    return 0;
}

/* "name[:port]" or "[v6][:port]" with name a loopback name or address and
 * port, when given, the listener's. */
static int loopback_authority(vsr_slice_t a, unsigned port)
{
    vsr_slice_t hostpart = a, portpart = VSR_SLICE_NULL;
    if (a.len > 0 && a.p[0] == '[') {
        const char *close = memchr(a.p, ']', a.len);
        if (close == NULL)
            return 0;
        hostpart = vsr_slice(a.p + 1, (size_t)(close - a.p - 1));
        size_t rest = a.len - (size_t)(close - a.p) - 1;
        if (rest > 0) {
            if (close[1] != ':')
                return 0;
            portpart = vsr_slice(close + 2, rest - 1);
        }
    } else {
        const char *colon = memchr(a.p, ':', a.len);
        if (colon) {
            hostpart = vsr_slice(a.p, (size_t)(colon - a.p));
            portpart = vsr_slice(colon + 1, a.len - hostpart.len - 1);
        }
    }
    if (portpart.p != NULL) {
        unsigned v = 0;
        if (portpart.len == 0 || portpart.len > 5)
            return 0;
        for (size_t i = 0; i < portpart.len; i++) {
            if (portpart.p[i] < '0' || portpart.p[i] > '9')
                return 0;
            v = v * 10 + (unsigned)(portpart.p[i] - '0');
        }
        if (v != port)
            return 0;
    } else if (port != 80) {
        return 0;
    }
    if (hostpart.len > 0 && hostpart.p[hostpart.len - 1] == '.')
        hostpart.len--; /* "localhost." */
    if (vsr_slice_case_eq_cstr(hostpart, "localhost"))
        return 1;
    char lit[64];
    if (hostpart.len == 0 || hostpart.len >= sizeof(lit))
        return 0;
    memcpy(lit, hostpart.p, hostpart.len);
    lit[hostpart.len] = '\0';
    return vsr_admin_loopback(lit);
}

void vsr__admin_refuse(vsr_admin_response_t *r, int status, const char *type, const char *code, const char *msg)
{
    memset(r, 0, sizeof(*r));
    vsr_buf_init(&r->headers, 0);
    vsr_buf_init(&r->body, 0);
    r->content_type = "application/json";
    json_error(r, status, type, code, msg);
}

vsr_slice_t vsr__admin_bearer(vsr_slice_t authorization)
{
    vsr_slice_t v = vsr_slice_trim(authorization);
    int ok = authorization.p != NULL && v.len > 7 && vsr_slice_case_eq_cstr(vsr_slice(v.p, 6), "bearer") &&
             (v.p[6] == ' ' || v.p[6] == '\t');
    return ok ? vsr_slice_trim(vsr_slice(v.p + 7, v.len - 7)) : VSR_SLICE_NULL;
}

int vsr_admin_check_access(vsr_admin_t *a, const vsr_admin_access_t *req, vsr_admin_response_t *r)
{
    vsr_engine_t *e = vsr_admin_active(a);
    const vsr_config_t *c = e ? vsr_engine_config(e) : NULL;
    int loopback = c && c->management_address && vsr_admin_loopback(c->management_address);
    unsigned port = c ? c->management_port : 0;
    vsr_engine_unref(e);
    if (loopback) {
        if (req->host.p != NULL && !loopback_authority(vsr_slice_trim(req->host), port)) {
            vsr__admin_refuse(r, 403, "permission_error", "forbidden_host",
                   "the management API answers only to a loopback host name or address with its port");
            return 0;
        }
        vsr_slice_t o = vsr_slice_trim(req->origin);
        if (req->origin.p != NULL &&
            !(vsr_slice_starts_with(o, VSR_SLICE_LIT("http://")) && loopback_authority(vsr_slice(o.p + 7, o.len - 7), port))) {
            vsr__admin_refuse(r, 403, "permission_error", "forbidden_origin",
                   "the management API does not answer requests from other origins");
            return 0;
        }
    }
    if (a->auth)
        return vsr__admin_authorize(a, req, r);
    if (a->token == NULL)
        return 1;
    vsr_slice_t got = vsr__admin_bearer(req->authorization);
    int ok = got.p != NULL && vsr_secret_eq(got, vsr_slice_cstr(a->token)) && a->token[0];
    if (!ok) {
        vsr__admin_refuse(r, 401, "authentication_error", "invalid_management_token",
               "the management API needs authorization: Bearer <management token>");
        vsr_buf_append_cstr(&r->headers, "www-authenticate: Bearer realm=\"vsr-management\"\r\n");
        return 0;
    }
    return 1;
}
