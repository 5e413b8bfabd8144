/*
 * shadow.c — the shadow_dispatch plugin (ref §3): a copy of a routed chat
 * request goes to the decision's shadow model through the worker's upstream
 * layer (the model-call port's hop, hop.c), its answer is read to the end,
 * counted and dropped.  It never touches the client's exchange: the copy is
 * its own hop with its own body, and the request may finish (and be freed)
 * while the copy is still out; the copy holds the configuration version it
 * was made under until it ends.
 *
 * Bounds: at most max_concurrency copies in flight per worker (a copy past
 * it is dropped and counted: vsr queues none, so max_queue_depth is
 * accepted only); each copy's body at most SHADOW_MAX_BODY bytes; its
 * answer at most max_response_bytes; its time at most timeout_seconds.
 */
#include <string.h>

#include "gateway/gateway-int.h"
#include "gateway/request-int.h"
#include "json/json.h"
#include "obs/obs.h"

#define SHADOW_MAX_BODY ((size_t)16 << 20)

typedef struct {
    worker_t *w;
    vsr_engine_t *eng;       /* the version the copy's model belongs to */
    const vsr_model_conf_t *model;
    vsr_buf_t body;
    vsr_slice_t hdrs[2 * VSR_SHADOW_MAX_FORWARD]; /* the forwarded headers, copied into hbuf */
    size_t n_hdrs;
    vsr_buf_t hbuf;
} shadow_t;

static void shadow_done(void *ud, int status, int http_status, vsr_slice_t body, unsigned attempts)
{
    VSR_UNUSED(body);
    VSR_UNUSED(attempts);
    shadow_t *sh = ud;
    worker_t *w = sh->w;
    w->shadow_in_flight--;
    vsr_metrics_shadow(w->metrics, vsr_slice_cstr(sh->model->name),
                       status == VSR_OK && http_status >= 200 && http_status < 300 ? "ok" : "failed");
    vsr_buf_free(&sh->body);
    vsr_buf_free(&sh->hbuf);
    vsr_engine_unref(sh->eng);
    vsr_free(sh);
}

/* The upstream body with its "model" set to the shadow model's upstream id
 * (0), or -1 when it is not a JSON object with a model. */
static int copy_body(const vsr_slice_t *pieces, size_t n, const vsr_model_conf_t *m, vsr_buf_t *out)
{
    vsr_buf_t src;
    vsr_buf_init(&src, SHADOW_MAX_BODY);
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++)
        rc = vsr_buf_append_slice(&src, pieces[i]) == VSR_OK ? 0 : -1;
    vsr_json_t j;
    memset(&j, 0, sizeof(j));
    uint32_t t;
    if (rc != 0 || vsr_json_parse(&j, src.data ? src.data : "", src.len, NULL) != VSR_OK ||
        vsr_json_type(&j, 0) != VSR_JSON_OBJECT || vsr_json_object_get(&j, 0, "model", &t) != VSR_OK) {
        vsr_json_free(&j);
        vsr_buf_free(&src);
        return -1;
    }
    vsr_buf_append(out, src.data, j.toks[t].start);
    vsr_buf_append_json_string(out, vsr_slice_cstr(m->provider_model_id ? m->provider_model_id : m->name));
    vsr_buf_append(out, src.data + j.toks[t].end, src.len - j.toks[t].end);
    vsr_json_free(&j);
    vsr_buf_free(&src);
    return 0;
}

void vsr__shadow_start(request_t *req, vsr_slice_t path, const vsr_slice_t *body, size_t n_body)
{
    const vsr_plugin_shadow_dispatch_conf_t *c = NULL;
    const vsr_model_conf_t *m = vsr_session_shadow(req->sess, &c);
    if (m == NULL || m->n_backends == 0)
        return;
    /* a chat request only: the hop speaks chat (and Messages for an anthropic model) */
    vsr_slice_t route = path;
    for (size_t i = 0; i < path.len; i++)
        if (path.p[i] == '?') {
            route.len = i;
            break;
        }
    if (route.len < 17 || memcmp(route.p + route.len - 17, "/chat/completions", 17) != 0)
        return;
    worker_t *w = req->w;
    vsr_slice_t name = vsr_slice_cstr(m->name);
    if (c->sample_rate < 1.0) {
        uint32_t r;
        vsr_random_bytes(&r, sizeof(r));
        if ((double)r / 4294967296.0 >= c->sample_rate) {
            vsr_metrics_shadow(w->metrics, name, "sampled_out");
            return;
        }
    }
    if (w->shadow_in_flight >= c->max_concurrency) {
        vsr_metrics_shadow(w->metrics, name, "dropped");
        return;
    }
    shadow_t *sh = vsr_calloc(1, sizeof(*sh));
    vsr_buf_init(&sh->body, SHADOW_MAX_BODY);
    if (copy_body(body, n_body, m, &sh->body) != 0) {
        vsr_buf_free(&sh->body);
        vsr_free(sh);
        vsr_metrics_shadow(w->metrics, name, "failed");
        return;
    }
    /* forward_headers: the client's values, copied (the request may be gone before the copy ends) */
    vsr_buf_init(&sh->hbuf, 0);
    size_t at[2 * VSR_SHADOW_MAX_FORWARD];
    for (size_t i = 0; i < c->forward_headers.n && sh->n_hdrs < VSR_SHADOW_MAX_FORWARD; i++) {
        for (size_t k = 0; k < req->n_hdrs; k++) {
            if (!vsr_slice_case_eq_cstr(req->hdrs[k].name, c->forward_headers.items[i]))
                continue;
            at[2 * sh->n_hdrs] = sh->hbuf.len;
            vsr_buf_append_cstr(&sh->hbuf, c->forward_headers.items[i]);
            at[2 * sh->n_hdrs + 1] = sh->hbuf.len;
            vsr_buf_append_slice(&sh->hbuf, req->hdrs[k].value);
            sh->n_hdrs++;
            break;
        }
    }
    for (size_t i = 0; i < sh->n_hdrs; i++) { /* slices once the buffer no longer moves */
        size_t name_end = at[2 * i + 1], value_end = i + 1 < sh->n_hdrs ? at[2 * i + 2] : sh->hbuf.len;
        sh->hdrs[2 * i] = vsr_slice(sh->hbuf.data + at[2 * i], name_end - at[2 * i]);
        sh->hdrs[2 * i + 1] = vsr_slice(sh->hbuf.data + name_end, value_end - name_end);
    }
    sh->w = w;
    sh->eng = vsr_engine_ref(req->eng);
    sh->model = m;
    w->shadow_in_flight++;
    vsr_graph_call_t call = {.model = m, .body = vsr_buf_slice(&sh->body), .iteration = 1,
                             .max_response_bytes = c->max_response_bytes, .extra_headers = sh->hdrs,
                             .n_extra_headers = sh->n_hdrs};
    /* its own id: the shadow's logs never mix with the client's exchange */
    char id[37];
    vsr_uuid4(id);
    vsr__gateway_model_call(w, c->timeout_ms, vsr_slice(id, 36), &call, vsr_now_ms() + c->timeout_ms, shadow_done, sh);
}
