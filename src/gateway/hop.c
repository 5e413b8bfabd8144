/*
 * hop.c — the worker's side of the routing core's model-call port: one hop
 * of a request graph (graph/graph.h), sent through the upstream layer with
 * the model's reliability policy (endpoint choice, timeouts, retries,
 * circuit breaking) and read whole into memory, at most the call's
 * max_response_bytes (a longer answer is read to its end and fails the hop
 * with VSR_ERR_TOO_BIG, so a lying backend costs bounded memory).
 *
 * The hop is the upstream call's owner: it is freed when its done has run,
 * or when the graph cancels it (the client went away, the budget ran out,
 * a first_k rule no longer needs it).
 *
 * A model of api_format anthropic gets the hop's chat request as a Messages
 * request (POST /v1/messages) and its answer back as a chat completion (an
 * error as an OpenAI error body), so the graph only ever reads chat.
 */
#include <string.h>
#include <time.h>

#include "gateway/gateway-int.h"

typedef struct {
    vsr_upstream_call_t *call;
    vsr_buf_t body;
    vsr_buf_t xbody;   /* the request in Messages form (an anthropic model), then its answer in chat form */
    int messages;      /* the model speaks Messages */
    int status;
    int too_big;
    uint64_t max;
    vsr_graph_call_done_fn done;
    void *done_ud;
    vsr_upstream_report_t report;
    vsr_http_header_t hdrs[4 + VSR_GRAPH_MAX_EXTRA_HEADERS];
    vsr_slice_t piece;
    char request_id[64];
} hop_t;

static void hop_free(hop_t *h)
{
    vsr_buf_free(&h->body);
    vsr_buf_free(&h->xbody);
    vsr_free(h);
}

static void hop_on_head(void *ud, const vsr_http_head_t *head)
{
    hop_t *h = ud;
    h->status = head->status;
}

static void hop_on_body(void *ud, const char *p, size_t n, vsr_rbuf_t *owner)
{
    VSR_UNUSED(owner);
    hop_t *h = ud;
    if (h->too_big)
        return;
    if (h->body.len + n > h->max) {
        h->too_big = 1;
        vsr_buf_free(&h->body);
        vsr_buf_init(&h->body, 0);
        return;
    }
    vsr_buf_append(&h->body, p, n);
}

static unsigned attempts(const hop_t *h)
{
    return h->report.n_attempts ? h->report.n_attempts : 1;
}

static void hop_on_complete(void *ud)
{
    hop_t *h = ud;
    h->call = NULL;
    if (h->too_big) {
        h->done(h->done_ud, VSR_ERR_TOO_BIG, h->status, vsr_slice(NULL, 0), attempts(h));
    } else if (h->messages) {
        vsr_buf_reset(&h->xbody);
        vsr_anthropic_error_t err;
        const char *p = h->body.data ? h->body.data : "";
        int rc = vsr_anthropic_answer_to_chat(h->status, p, h->body.len, (uint64_t)time(NULL), &h->xbody, &err);
        if (rc != VSR_OK) /* not a Messages answer: the hop failed */
            h->done(h->done_ud, VSR_ERR, h->status, vsr_slice(NULL, 0), attempts(h));
        else
            h->done(h->done_ud, VSR_OK, h->status, vsr_buf_slice(&h->xbody), attempts(h));
    } else {
        h->done(h->done_ud, VSR_OK, h->status, vsr_buf_slice(&h->body), attempts(h));
    }
    hop_free(h);
}

static void hop_on_error(void *ud, vsr_upstream_error_t err, const char *detail, int retried)
{
    VSR_UNUSED(detail);
    VSR_UNUSED(retried);
    hop_t *h = ud;
    h->call = NULL;
    vsr_log_debug("gateway", "graph hop failed: %s", vsr_upstream_error_reason(err));
    h->done(h->done_ud, VSR_ERR_IO, h->status, vsr_slice(NULL, 0), attempts(h));
    hop_free(h);
}

static const vsr_upstream_callbacks_t hop_callbacks = {hop_on_head, hop_on_body, hop_on_complete, hop_on_error, NULL};

void *vsr__gateway_model_call(worker_t *w, uint64_t listener_timeout_ms, vsr_slice_t request_id,
                              const vsr_graph_call_t *call, uint64_t deadline_ms, vsr_graph_call_done_fn done,
                              void *done_ud)
{
    if (w->torn_down) {
        done(done_ud, VSR_ERR_IO, 0, vsr_slice(NULL, 0), 0);
        return NULL;
    }
    hop_t *h = vsr_calloc(1, sizeof(*h));
    h->max = call->max_response_bytes ? call->max_response_bytes : (uint64_t)32 << 20;
    h->done = done;
    h->done_ud = done_ud;
    vsr_buf_init(&h->body, 0);
    size_t n = 0;
    h->hdrs[n++] = (vsr_http_header_t){VSR_SLICE_LIT("content-type"), VSR_SLICE_LIT("application/json")};
    h->hdrs[n++] = (vsr_http_header_t){VSR_SLICE_LIT("accept-encoding"), VSR_SLICE_LIT("identity")};
    h->hdrs[n++] = (vsr_http_header_t){VSR_SLICE_LIT("x-selected-model"), vsr_slice_cstr(call->model->name)};
    if (request_id.len && request_id.len < sizeof(h->request_id)) {
        memcpy(h->request_id, request_id.p, request_id.len);
        h->hdrs[n++] = (vsr_http_header_t){VSR_SLICE_LIT("x-request-id"), vsr_slice(h->request_id, request_id.len)};
    }
    for (size_t i = 0; i < call->n_extra_headers && i < VSR_GRAPH_MAX_EXTRA_HEADERS; i++)
        h->hdrs[n++] = (vsr_http_header_t){call->extra_headers[2 * i], call->extra_headers[2 * i + 1]};
    h->piece = call->body;
    vsr_buf_init(&h->xbody, (size_t)h->max);
    h->messages = call->path.p == NULL && call->model->messages_api;
    if (h->messages) {
        vsr_anthropic_error_t err;
        if (vsr_anthropic_request_from_chat(call->body.p, call->body.len, NULL, &h->xbody, &err) != VSR_OK) {
            vsr_log_debug("gateway", "graph hop to %s: %s", call->model->name, err.message);
            hop_free(h);
            done(done_ud, VSR_ERR, 0, vsr_slice(NULL, 0), 0);
            return NULL;
        }
        h->piece = vsr_buf_slice(&h->xbody);
    }
    uint64_t now = vsr_now_ms();
    vsr_upstream_request_t ur = {
        .method = VSR_SLICE_LIT("POST"),
        .path = call->path.p ? call->path
                : h->messages ? VSR_SLICE_LIT("/v1/messages")
                              : VSR_SLICE_LIT("/v1/chat/completions"),
        .rewrite_prefix = call->path.p == NULL,
        .headers = h->hdrs,
        .n_headers = n,
        .body = &h->piece,
        .n_body = 1,
        .send_length = 1,
        .with_credentials = 1,
        .listener_timeout_ms = listener_timeout_ms,
        .report = &h->report,
        .max_total_ms = deadline_ms > now ? deadline_ms - now : 1,
    };
    h->call = vsr_upstream_call_start(w->up, call->model, &ur, &hop_callbacks, h);
    return h;
}

void vsr__gateway_model_cancel(void *handle)
{
    hop_t *h = handle;
    if (h == NULL)
        return;
    if (h->call)
        vsr_upstream_call_cancel(h->call);
    hop_free(h);
}
