/*
 * server.c — `vsr runtime serve`: one libuv loop on the calling thread that
 * owns every connection (Unix socket or TCP), vsr's HTTP/1.1 parser and
 * writer, the endpoints of docs/runtime.md, and the compute pool that runs
 * embedding work.  Requests on one connection are answered in order: while
 * one is being computed the connection is not read.
 */
#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "http/http.h"
#include "runtime-int.h"

#define RT_MAX_HEAD 16384
#define RT_MAX_FIELDS 64
#define RT_DRAIN_MS 10000
#define RT_MAX_CLS_METRICS 8 /* classifiers with their own compute metrics */

/* ---- metrics ---- */
static const char *const m_paths[] = {"/v1/bundle", "/v1/embeddings", "/v1/classify", "/v1/models",
                                      "/health",    "/health/live",   "/metrics",     "other"};
enum { P_BUNDLE, P_EMBEDDINGS, P_CLASSIFY, P_MODELS, P_HEALTH, P_LIVE, P_METRICS, P_OTHER, P_N };
static const int m_codes[] = {200, 400, 404, 405, 408, 413, 422, 429, 431, 500, 501, 503, 504, 505};
#define C_N (VSR_ARRAY_LEN(m_codes) + 1)
static const char *const m_results[] = {"ok", "error", "deadline_exceeded", "not_supported", "unavailable"};
enum { RES_OK, RES_ERROR, RES_DEADLINE, RES_NOT_SUPPORTED, RES_UNAVAILABLE, RES_N };
static const double m_buckets[] = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10};
#define B_N VSR_ARRAY_LEN(m_buckets)

typedef struct {
    atomic_uint_fast64_t requests[P_N][C_N];
    atomic_uint_fast64_t tasks[2][RES_N]; /* [0] embed, [1] other types */
    atomic_uint_fast64_t rejected;
    atomic_uint_fast64_t batch_passes, batch_texts; /* embed() calls of batches, the texts they computed */
    atomic_uint_fast64_t hist[B_N + 1];
    atomic_uint_fast64_t hist_count, hist_sum_us;
    /* per classifier (its index in the options; the first RT_MAX_CLS_METRICS) */
    atomic_uint_fast64_t cls_count[RT_MAX_CLS_METRICS], cls_sum_us[RT_MAX_CLS_METRICS];
} metrics_t;


typedef struct server_s server_t;
typedef struct conn_s conn_t;
typedef struct req_s req_t;

enum { PH_HEAD, PH_BODY, PH_BUSY, PH_IDLE };

struct conn_s {
    union {
        uv_handle_t h;
        uv_stream_t s;
        uv_pipe_t pipe;
        uv_tcp_t tcp;
    } u;
    uv_timer_t timer;
    server_t *srv;
    conn_t *prev, *next;
    vsr_http_parser_t parser;
    int phase;
    int closing;
    int close_after;    /* close once the response in flight is written */
    int keep_alive;     /* of the request being answered */
    req_t *req;         /* the request in flight (answer pending) */
    vsr_buf_t body;
    char method[16];
    char path[256];
    vsr_buf_t pending;  /* bytes read after a complete request, not yet parsed */
    int handles_open;
    int overloaded;     /* the process-wide body budget refused this body */
    char rbuf[65536];
};

struct req_s {
    server_t *srv;
    conn_t *conn;        /* NULL when the client went away */
    vsr_pool_t pool;
    vsr_buf_t body;      /* the request body (owned) */
    int kind;            /* P_BUNDLE or P_EMBEDDINGS */
    uint64_t arrived_us, first_start_us, last_finish_us;
    size_t outstanding;  /* work items not done */
    /* bundle */
    vsr_rt_bundle_t bundle;
    struct ework_s **work; /* per task, NULL for tasks answered without work */
    size_t outstanding_max; /* entries of work */
    /* /v1/embeddings */
    int base64;
};

typedef struct ework_s {
    vsr_rt_work_t w;
    req_t *req;
    server_t *srv;
    vsr_embedder_t *e;   /* embed: the model; classify: the default embedder (may be NULL) */
    vsr_classifier_t *cls; /* classify: the classifier, else NULL */
    vsr_slice_t payload; /* classify: the task's JSON */
    vsr_buf_t result;    /* classify: the result members (freed with the request) */
    const vsr_slice_t *inputs;
    size_t n;
    float *out;          /* n * dim, req pool */
    uint8_t *cached;     /* n, req pool */
    uint8_t *ready;      /* n, req pool: out[i] was filled by the batch's prepare() */
    uint64_t tokens;
    int rc;
    char err[256];
} ework_t;

struct server_s {
    const vsr_runtime_opts_t *o;
    uv_loop_t *loop;
    union {
        uv_handle_t h;
        uv_stream_t s;
        uv_pipe_t pipe;
        uv_tcp_t tcp;
    } lst;
    int listening;
    uv_signal_t sigterm, sigint;
    uv_timer_t drain_timer;
    vsr_rt_pool_t *pool;
    vsr_emb_cache_t *cache;
    conn_t *conns;
    size_t n_conns;
    size_t reqs_in_flight;
    size_t buffered;    /* request body bytes held, all connections and requests */
    size_t inputs;      /* embed inputs of the work queued or running (their vectors are held) */
    int draining;
    int finished;
    metrics_t m;
};

static uint64_t ld(atomic_uint_fast64_t *p)
{
    return (uint64_t)atomic_load(p);
}

static void count_request(server_t *s, int path, int status)
{
    size_t c = VSR_ARRAY_LEN(m_codes);
    for (size_t i = 0; i < VSR_ARRAY_LEN(m_codes); i++)
        if (m_codes[i] == status)
            c = i;
    atomic_fetch_add(&s->m.requests[path][c], 1);
}

static void count_task(server_t *s, int embed, int result)
{
    atomic_fetch_add(&s->m.tasks[embed ? 0 : 1][result], 1);
}

static void observe_compute(server_t *s, uint64_t us)
{
    double sec = (double)us / 1e6;
    size_t b = B_N;
    for (size_t i = 0; i < B_N; i++)
        if (sec <= m_buckets[i]) {
            b = i;
            break;
        }
    atomic_fetch_add(&s->m.hist[b], 1);
    atomic_fetch_add(&s->m.hist_count, 1);
    atomic_fetch_add(&s->m.hist_sum_us, us);
}

static int path_index(const char *p)
{
    for (int i = 0; i < P_OTHER; i++)
        if (strcmp(p, m_paths[i]) == 0)
            return i;
    if (strcmp(p, "/v1/decisions") == 0 || strcmp(p, "/v1/systemone") == 0 || strcmp(p, "/v1/rerank") == 0)
        return P_CLASSIFY;
    return P_OTHER;
}

/* ---- connections ---- */

static void maybe_finish(server_t *s);
static void conn_feed(conn_t *c, const char *p, size_t n);

static void conn_freed(uv_handle_t *h)
{
    conn_t *c = h->data;
    if (--c->handles_open > 0)
        return;
    server_t *s = c->srv;
    vsr_http_parser_free(&c->parser);
    vsr_buf_free(&c->body);
    vsr_buf_free(&c->pending);
    vsr_free(c);
    maybe_finish(s);
}

static void conn_close(conn_t *c)
{
    if (c->closing)
        return;
    c->closing = 1;
    c->srv->buffered -= c->body.len;
    vsr_buf_reset(&c->body);
    if (c->req) {
        c->req->conn = NULL; /* the work finishes on its own and is dropped */
        c->req = NULL;
    }
    server_t *s = c->srv;
    if (c->prev)
        c->prev->next = c->next;
    else
        s->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    s->n_conns--;
    uv_close((uv_handle_t *)&c->timer, conn_freed);
    uv_close(&c->u.h, conn_freed);
}

static void on_timer(uv_timer_t *t);

static void arm(conn_t *c, int phase)
{
    const vsr_runtime_opts_t *o = c->srv->o;
    c->phase = phase;
    uint64_t ms = phase == PH_HEAD ? o->header_timeout_ms
                  : phase == PH_BODY ? o->body_timeout_ms
                  : phase == PH_IDLE ? o->idle_timeout_ms
                                     : 0;
    if (ms)
        uv_timer_start(&c->timer, on_timer, ms, 0);
    else
        uv_timer_stop(&c->timer);
}

typedef struct {
    uv_write_t w;
    conn_t *c;
    vsr_buf_t buf;
} wreq_t;

static void after_write(uv_write_t *w, int status);
static void read_start(conn_t *c);

/* Writes one response; the connection is released for the next request
 * when the write completes.  ctype NULL: application/json (when there is a
 * body). */
static void send_typed(conn_t *c, int path, int status, const char *ctype, const char *extra_headers,
                       const vsr_buf_t *body)
{
    server_t *s = c->srv;
    count_request(s, path, status);
    if (status == 429)
        atomic_fetch_add(&s->m.rejected, 1);
    wreq_t *wr = vsr_calloc(1, sizeof *wr);
    wr->c = c;
    vsr_buf_init(&wr->buf, 0);
    int close_it = !c->keep_alive || s->draining || status == 408 || status == 413 || status == 431;
    vsr_http_write_status_line(&wr->buf, status, VSR_SLICE_NULL);
    if (body->len) {
        vsr_buf_append_cstr(&wr->buf, "content-type: ");
        vsr_buf_append_cstr(&wr->buf, ctype ? ctype : "application/json");
        vsr_buf_append_cstr(&wr->buf, "\r\n");
    }
    if (extra_headers)
        vsr_buf_append_cstr(&wr->buf, extra_headers);
    vsr_http_write_header_u64(&wr->buf, "content-length", body->len);
    if (close_it)
        vsr_buf_append_cstr(&wr->buf, "connection: close\r\n");
    vsr_http_write_end_head(&wr->buf);
    vsr_buf_append(&wr->buf, body->data, body->len);
    c->close_after = close_it;
    uv_buf_t b = uv_buf_init(wr->buf.data, (unsigned)wr->buf.len);
    if (uv_write(&wr->w, &c->u.s, &b, 1, after_write) != 0) {
        vsr_buf_free(&wr->buf);
        vsr_free(wr);
        conn_close(c);
    }
}

static void send_response(conn_t *c, int path, int status, const char *extra_headers, vsr_buf_t *body)
{
    send_typed(c, path, status, NULL, extra_headers, body);
}

static void send_error(conn_t *c, int path, int status, const char *code, const char *msg,
                       const char *extra_headers)
{
    vsr_buf_t b;
    vsr_buf_init(&b, 0);
    vsr_buf_append_cstr(&b, "{\"error\":{\"code\":");
    vsr_buf_append_json_string(&b, vsr_slice_cstr(code));
    vsr_buf_append_cstr(&b, ",\"message\":");
    vsr_buf_append_json_string(&b, vsr_slice_cstr(msg));
    vsr_buf_append_cstr(&b, ",\"type\":");
    vsr_buf_append_json_string(&b, vsr_slice_cstr(status >= 500 ? "server_error" : "invalid_request_error"));
    vsr_buf_append_cstr(&b, "}}");
    send_response(c, path, status, extra_headers, &b);
    vsr_buf_free(&b);
}

static void after_write(uv_write_t *w, int status)
{
    wreq_t *wr = (wreq_t *)w;
    conn_t *c = wr->c;
    vsr_buf_free(&wr->buf);
    vsr_free(wr);
    if (c->closing)
        return;
    if (status < 0 || c->close_after) {
        conn_close(c);
        return;
    }
    /* the next request: what was read already, then the socket */
    c->srv->buffered -= c->body.len;
    vsr_buf_reset(&c->body);
    arm(c, PH_IDLE);
    if (c->pending.len) {
        vsr_buf_t p = c->pending;
        vsr_buf_init(&c->pending, sizeof c->rbuf);
        conn_feed(c, p.data, p.len);
        vsr_buf_free(&p);
    }
    if (!c->closing && c->phase != PH_BUSY)
        read_start(c);
}

static void on_timer(uv_timer_t *t)
{
    conn_t *c = t->data;
    if (c->phase == PH_IDLE) {
        conn_close(c);
        return;
    }
    if (c->phase == PH_HEAD || c->phase == PH_BODY) {
        int head = c->phase == PH_HEAD;
        uv_read_stop(&c->u.s);
        c->phase = PH_BUSY;
        c->keep_alive = 0;
        send_error(c, P_OTHER, 408, "request_timeout",
                   head ? "the request head did not arrive in time" : "the request body did not arrive in time",
                   NULL);
    }
}

/* ---- JSON answers ---- */

static void append_vector(vsr_buf_t *b, const float *v, size_t dim, int base64)
{
    if (base64) {
        vsr_buf_append_cstr(b, "\"");
        vsr__rt_base64(b, v, dim * sizeof *v); /* little-endian hosts (x86-64, aarch64) */
        vsr_buf_append_cstr(b, "\"");
        return;
    }
    vsr_buf_append_cstr(b, "[");
    for (size_t k = 0; k < dim; k++) {
        if (k)
            vsr_buf_append_cstr(b, ",");
        vsr__rt_append_float(b, v[k]);
    }
    vsr_buf_append_cstr(b, "]");
}

static void timing_header(req_t *r, char *out, size_t cap)
{
    double q = 0, comp = 0;
    if (r->first_start_us) {
        q = (double)(r->first_start_us - r->arrived_us) / 1000.0;
        comp = (double)(r->last_finish_us - r->first_start_us) / 1000.0;
    }
    snprintf(out, cap, "server-timing: queue;dur=%.3f, compute;dur=%.3f\r\n", q, comp);
}

static vsr_classifier_t *find_classifier(server_t *s, vsr_slice_t name)
{
    for (size_t i = 0; i < s->o->n_classifiers; i++)
        if (vsr_slice_eq_cstr(name, s->o->classifiers[i]->name))
            return s->o->classifiers[i];
    return NULL;
}

/* The embedder a classifier's env gives: for one built over embeddings of
 * a width, the first USE-lite embedder of that width, else the first of
 * that width; otherwise the default. */
static vsr_embedder_t *classify_embedder(const vsr_runtime_opts_t *o, const vsr_classifier_t *k)
{
    if (k->needs_dim == 0)
        return o->n_embedders ? o->embedders[0] : NULL;
    vsr_embedder_t *any = NULL;
    for (size_t i = 0; i < o->n_embedders; i++) {
        vsr_embedder_t *e = o->embedders[i];
        if (e->dim != k->needs_dim)
            continue;
        if (strcmp(e->backend, "use-lite") == 0)
            return e;
        if (any == NULL)
            any = e;
    }
    return any;
}

static vsr_embedder_t *find_model(server_t *s, vsr_slice_t name)
{
    if (name.p == NULL)
        return s->o->embedders[0];
    for (size_t i = 0; i < s->o->n_embedders; i++)
        if (vsr_slice_eq_cstr(name, s->o->embedders[i]->name))
            return s->o->embedders[i];
    return NULL;
}

static void task_error(vsr_buf_t *b, const char *code, const char *fmt_msg, vsr_slice_t arg)
{
    vsr_buf_append_cstr(b, ",\"error\":{\"code\":");
    vsr_buf_append_json_string(b, vsr_slice_cstr(code));
    vsr_buf_append_cstr(b, ",\"message\":");
    vsr_buf_t m;
    vsr_buf_init(&m, 0);
    const char *pct = strstr(fmt_msg, "%s");
    if (pct) {
        vsr_buf_append(&m, fmt_msg, (size_t)(pct - fmt_msg));
        vsr_json_append_client_text(&m, arg, VSR_JSON_QUOTE_MAX);
        vsr_buf_append_cstr(&m, pct + 2);
    } else {
        vsr_buf_append_cstr(&m, fmt_msg);
    }
    vsr_buf_append_json_string(b, vsr_buf_slice(&m));
    vsr_buf_free(&m);
    vsr_buf_append_cstr(b, "}");
}

static void req_free(req_t *r)
{
    if (r->work)
        for (size_t i = 0; i < r->outstanding_max; i++)
            if (r->work[i] && r->work[i]->cls)
                vsr_buf_free(&r->work[i]->result);
    r->srv->reqs_in_flight--;
    r->srv->buffered -= r->body.len;
    vsr_buf_free(&r->body);
    vsr_pool_free(&r->pool);
    server_t *s = r->srv;
    vsr_free(r);
    maybe_finish(s);
}

static void answer_bundle(req_t *r)
{
    server_t *s = r->srv;
    vsr_buf_t b;
    vsr_buf_init(&b, 0);
    vsr_buf_append_cstr(&b, "{\"results\":[");
    for (size_t i = 0; i < r->bundle.n_tasks; i++) {
        vsr_rt_task_t *t = &r->bundle.tasks[i];
        ework_t *w = r->work[i];
        if (i)
            vsr_buf_append_cstr(&b, ",");
        vsr_buf_append_cstr(&b, "{\"id\":");
        vsr_buf_append_json_string(&b, t->id);
        if (t->kind == VSR_RT_TASK_UNSUPPORTED) {
            task_error(&b, "not_supported", "task type \"%s\" is not supported by this runtime yet", t->type);
            count_task(s, 0, RES_NOT_SUPPORTED);
        } else if (t->kind == VSR_RT_TASK_UNKNOWN) {
            task_error(&b, "unknown_task", "unknown task type \"%s\"", t->type);
            count_task(s, 0, RES_ERROR);
        } else if (t->kind == VSR_RT_TASK_INVALID) {
            task_error(&b, "invalid_task", t->error, VSR_SLICE_NULL);
            count_task(s, 0, RES_ERROR);
        } else if (w == NULL) {
            if (t->kind == VSR_RT_TASK_CLASSIFY)
                task_error(&b, "model_not_found", "the runtime serves no classifier \"%s\"", t->model);
            else
                task_error(&b, "model_not_found", "the runtime serves no embedding model \"%s\"", t->model);
            count_task(s, t->kind == VSR_RT_TASK_EMBED, RES_ERROR);
        } else if (w->w.cancelled) {
            task_error(&b, "unavailable", "the runtime is shutting down", VSR_SLICE_NULL);
            count_task(s, w->cls == NULL, RES_UNAVAILABLE);
        } else if (w->w.expired) {
            task_error(&b, "deadline_exceeded", "the deadline passed before the task started", VSR_SLICE_NULL);
            count_task(s, w->cls == NULL, RES_DEADLINE);
        } else if (w->rc != VSR_OK) {
            task_error(&b,
                       w->rc == VSR_ERR_INVALID ? "invalid_task"
                       : w->cls                 ? "classification_failed"
                                                : "embedding_failed",
                       w->err, VSR_SLICE_NULL);
            count_task(s, w->cls == NULL, RES_ERROR);
        } else if (w->cls) {
            vsr_buf_append_cstr(&b, ",\"classify\":{\"model\":");
            vsr_buf_append_json_string(&b, vsr_slice_cstr(w->cls->name));
            vsr_buf_append_slice(&b, vsr_buf_slice(&w->result));
            vsr_buf_append_cstr(&b, "}");
            count_task(s, 0, RES_OK);
        } else {
            vsr_buf_append_cstr(&b, ",\"embed\":{\"model\":");
            vsr_buf_append_json_string(&b, vsr_slice_cstr(w->e->name));
            vsr_buf_printf(&b, ",\"dim\":%zu,\"embeddings\":[", w->e->dim);
            for (size_t k = 0; k < w->n; k++) {
                if (k)
                    vsr_buf_append_cstr(&b, ",");
                append_vector(&b, w->out + k * w->e->dim, w->e->dim, 0);
            }
            vsr_buf_append_cstr(&b, "],\"cached\":[");
            for (size_t k = 0; k < w->n; k++)
                vsr_buf_append_cstr(&b, k ? (w->cached[k] ? ",true" : ",false") : (w->cached[k] ? "true" : "false"));
            vsr_buf_append_cstr(&b, "]}");
            count_task(s, 1, RES_OK);
        }
        vsr_buf_append_cstr(&b, "}");
    }
    vsr_buf_append_cstr(&b, "]}");
    char th[128];
    timing_header(r, th, sizeof th);
    if (r->conn) {
        r->conn->req = NULL;
        send_response(r->conn, P_BUNDLE, 200, th, &b);
    }
    vsr_buf_free(&b);
}

static void answer_embeddings(req_t *r)
{
    server_t *s = r->srv;
    ework_t *w = r->work[0];
    conn_t *c = r->conn;
    char th[128];
    timing_header(r, th, sizeof th);
    if (c)
        c->req = NULL;
    if (w->w.cancelled) {
        count_task(s, 1, RES_UNAVAILABLE);
        if (c)
            send_error(c, P_EMBEDDINGS, 503, "unavailable", "the runtime is shutting down", th);
        return;
    }
    if (w->w.expired) {
        count_task(s, 1, RES_DEADLINE);
        if (c)
            send_error(c, P_EMBEDDINGS, 504, "deadline_exceeded", "the request waited past its deadline", th);
        return;
    }
    if (w->rc != VSR_OK) {
        count_task(s, 1, RES_ERROR);
        if (c)
            send_error(c, P_EMBEDDINGS, w->rc == VSR_ERR_INVALID ? 422 : 500,
                       w->rc == VSR_ERR_INVALID ? "invalid_input" : "embedding_failed", w->err, th);
        return;
    }
    count_task(s, 1, RES_OK);
    if (c == NULL)
        return;
    vsr_buf_t b;
    vsr_buf_init(&b, 0);
    vsr_buf_append_cstr(&b, "{\"object\":\"list\",\"data\":[");
    for (size_t k = 0; k < w->n; k++) {
        vsr_buf_printf(&b, "%s{\"object\":\"embedding\",\"index\":%zu,\"embedding\":", k ? "," : "", k);
        append_vector(&b, w->out + k * w->e->dim, w->e->dim, r->base64);
        vsr_buf_append_cstr(&b, "}");
    }
    vsr_buf_append_cstr(&b, "],\"model\":");
    vsr_buf_append_json_string(&b, vsr_slice_cstr(w->e->name));
    vsr_buf_printf(&b, ",\"usage\":{\"prompt_tokens\":%llu,\"total_tokens\":%llu}}", (unsigned long long)w->tokens,
                   (unsigned long long)w->tokens);
    send_response(c, P_EMBEDDINGS, 200, th, &b);
    vsr_buf_free(&b);
}

static void answer_classify(req_t *r)
{
    server_t *s = r->srv;
    ework_t *w = r->work[0];
    conn_t *c = r->conn;
    char th[128];
    timing_header(r, th, sizeof th);
    if (c)
        c->req = NULL;
    if (w->w.cancelled || w->w.expired || w->rc != VSR_OK) {
        int st = w->w.cancelled ? 503 : w->w.expired ? 504 : w->rc == VSR_ERR_INVALID ? 422 : 500;
        count_task(s, 0, w->w.cancelled ? RES_UNAVAILABLE : w->w.expired ? RES_DEADLINE : RES_ERROR);
        if (c)
            send_error(c, P_CLASSIFY, st,
                       st == 503   ? "unavailable"
                       : st == 504 ? "deadline_exceeded"
                       : st == 422 ? "invalid_input"
                                   : "classification_failed",
                       st == 503   ? "the runtime is shutting down"
                       : st == 504 ? "the request waited past its deadline"
                                   : w->err,
                       th);
        return;
    }
    count_task(s, 0, RES_OK);
    if (c == NULL)
        return;
    vsr_buf_t b;
    vsr_buf_init(&b, 0);
    vsr_buf_append_cstr(&b, "{\"model\":");
    vsr_buf_append_json_string(&b, vsr_slice_cstr(w->cls->name));
    vsr_buf_append_slice(&b, vsr_buf_slice(&w->result));
    vsr_buf_append_cstr(&b, "}");
    send_response(c, P_CLASSIFY, 200, th, &b);
    vsr_buf_free(&b);
}

/* ---- work ---- */

/* The classify env's embed(): the default embedder through the cache. */
static int env_embed(void *ud, vsr_slice_t text, float *out, vsr_buf_t *err)
{
    ework_t *w = ud;
    vsr_embedder_t *e = w->e;
    if (w->ready[0] && vsr_slice_eq(text, w->inputs[0])) {
        memcpy(out, w->out, e->dim * sizeof *out);
        return VSR_OK;
    }
    vsr_slice_t model = vsr_slice_cstr(e->name);
    if (vsr_emb_cache_get(w->srv->cache, model, text, out, e->dim))
        return VSR_OK;
    int rc = e->ops->embed(e, &text, 1, out, &w->tokens, err);
    if (rc == VSR_OK)
        vsr_emb_cache_put(w->srv->cache, model, text, out, e->dim);
    return rc;
}

static void cwork_run(ework_t *w)
{
    vsr_classify_env_t env = {.embed = w->e ? env_embed : NULL,
                              .ud = w,
                              .dim = w->e ? w->e->dim : 0,
                              .embedder = w->e ? w->e->name : ""};
    vsr_buf_t err;
    vsr_buf_init(&err, sizeof w->err - 1);
    w->rc = w->cls->ops->classify(w->cls, &env, w->inputs[0], w->payload, &w->result, &err);
    for (size_t i = 0; i < w->srv->o->n_classifiers && i < RT_MAX_CLS_METRICS; i++)
        if (w->srv->o->classifiers[i] == w->cls) {
            atomic_fetch_add(&w->srv->m.cls_count[i], 1);
            atomic_fetch_add(&w->srv->m.cls_sum_us[i], vsr_now_us() - w->w.started_us);
        }
    if (w->rc != VSR_OK)
        snprintf(w->err, sizeof w->err, "%.*s", (int)err.len, err.len ? err.data : "the classifier failed");
    vsr_buf_free(&err);
    observe_compute(w->srv, vsr_now_us() - w->w.started_us);
}

static void ework_run(vsr_rt_work_t *wk)
{
    ework_t *w = (ework_t *)wk;
    if (w->cls) {
        cwork_run(w);
        return;
    }
    size_t dim = w->e->dim;
    vsr_slice_t model = vsr_slice_cstr(w->e->name);
    vsr_slice_t *miss = vsr_malloc((w->n ? w->n : 1) * sizeof *miss);
    size_t *miss_at = vsr_malloc((w->n ? w->n : 1) * sizeof *miss_at);
    size_t nm = 0;
    for (size_t i = 0; i < w->n; i++) {
        if (w->ready[i])
            continue;
        if (vsr_emb_cache_get(w->srv->cache, model, w->inputs[i], w->out + i * dim, dim)) {
            w->cached[i] = 1;
        } else {
            miss[nm] = w->inputs[i];
            miss_at[nm++] = i;
        }
    }
    w->rc = VSR_OK;
    if (nm) {
        float *tmp = vsr_malloc(nm * dim * sizeof *tmp);
        vsr_buf_t err;
        vsr_buf_init(&err, sizeof w->err - 1);
        w->rc = w->e->ops->embed(w->e, miss, nm, tmp, &w->tokens, &err);
        if (w->rc == VSR_OK) {
            for (size_t k = 0; k < nm; k++) {
                memcpy(w->out + miss_at[k] * dim, tmp + k * dim, dim * sizeof *tmp);
                vsr_emb_cache_put(w->srv->cache, model, miss[k], tmp + k * dim, dim);
            }
        } else {
            snprintf(w->err, sizeof w->err, "%.*s", (int)err.len, err.len ? err.data : "the embedder failed");
        }
        vsr_buf_free(&err);
        vsr_free(tmp);
    }
    vsr_free(miss);
    vsr_free(miss_at);
    observe_compute(w->srv, vsr_now_us() - w->w.started_us);
}

/* The pool's prepare() for work over one embedder: the texts of all the
 * items that the cache does not hold, deduplicated, in one embed() call;
 * the vectors go to each item's out[] (ready) and to the cache.  When the
 * call fails each item's run() embeds its own texts and reports its own
 * error. */
static void ework_prepare(vsr_rt_work_t **items, size_t n)
{
    ework_t *w0 = (ework_t *)items[0];
    vsr_embedder_t *e = w0->e;
    server_t *s = w0->srv;
    size_t dim = e->dim, total = 0;
    vsr_slice_t model = vsr_slice_cstr(e->name);
    for (size_t k = 0; k < n; k++)
        total += ((ework_t *)items[k])->n;
    vsr_slice_t *miss = vsr_malloc(total * sizeof *miss);
    struct {
        ework_t *w;
        size_t i, m;
    } *use = vsr_malloc(total * sizeof *use);
    float *tmp = NULL;
    size_t nm = 0, nu = 0;
    for (size_t k = 0; k < n; k++) {
        ework_t *w = (ework_t *)items[k];
        for (size_t i = 0; i < w->n; i++) {
            if (vsr_emb_cache_get(s->cache, model, w->inputs[i], w->out + i * dim, dim)) {
                w->cached[i] = w->ready[i] = 1;
                continue;
            }
            size_t m = 0;
            while (m < nm && !vsr_slice_eq(miss[m], w->inputs[i]))
                m++;
            if (m == nm)
                miss[nm++] = w->inputs[i];
            use[nu].w = w;
            use[nu].i = i;
            use[nu++].m = m;
        }
    }
    if (nm == 0)
        goto out;
    tmp = vsr_malloc(nm * dim * sizeof *tmp);
    vsr_buf_t err;
    vsr_buf_init(&err, 256);
    int rc = e->ops->embed(e, miss, nm, tmp, NULL, &err);
    vsr_buf_free(&err);
    if (rc != VSR_OK)
        goto out;
    for (size_t u = 0; u < nu; u++) {
        memcpy(use[u].w->out + use[u].i * dim, tmp + use[u].m * dim, dim * sizeof *tmp);
        use[u].w->ready[use[u].i] = 1;
    }
    for (size_t m = 0; m < nm; m++)
        vsr_emb_cache_put(s->cache, model, miss[m], tmp + m * dim, dim);
    atomic_fetch_add(&s->m.batch_passes, 1);
    atomic_fetch_add(&s->m.batch_texts, nm);
out:
    vsr_free(tmp);
    vsr_free(use);
    vsr_free(miss);
}

static void ework_done(vsr_rt_work_t *wk)
{
    ework_t *w = (ework_t *)wk;
    req_t *r = w->req;
    if (r->first_start_us == 0 || w->w.started_us < r->first_start_us)
        r->first_start_us = w->w.started_us ? w->w.started_us : vsr_now_us();
    uint64_t fin = w->w.finished_us ? w->w.finished_us : vsr_now_us();
    if (fin > r->last_finish_us)
        r->last_finish_us = fin;
    r->srv->inputs -= w->n;
    if (--r->outstanding > 0)
        return;
    if (r->kind == P_BUNDLE)
        answer_bundle(r);
    else if (r->kind == P_CLASSIFY)
        answer_classify(r);
    else
        answer_embeddings(r);
    req_free(r);
}

static void batchable(ework_t *w)
{
    w->w.prepare = ework_prepare;
    w->w.batch_key = w->e;
    w->w.batch_weight = w->n;
}

static ework_t *new_work(req_t *r, vsr_embedder_t *e, const vsr_slice_t *inputs, size_t n, uint64_t deadline_us)
{
    ework_t *w = vsr_pool_alloc(&r->pool, sizeof *w);
    memset(w, 0, sizeof *w);
    w->w.run = ework_run;
    w->w.done = ework_done;
    w->w.deadline_us = deadline_us;
    w->req = r;
    w->srv = r->srv;
    w->e = e;
    w->inputs = inputs;
    w->n = n;
    w->out = e ? vsr_pool_alloc(&r->pool, (n ? n : 1) * e->dim * sizeof(float)) : NULL;
    w->cached = vsr_pool_alloc(&r->pool, 2 * (n ? n : 1));
    memset(w->cached, 0, 2 * (n ? n : 1));
    w->ready = w->cached + (n ? n : 1);
    /* a bundle's embed task may share a forward pass (an /v1/embeddings
     * call reports its tokens, which a shared pass does not count) */
    if (e && r->kind == P_BUNDLE)
        batchable(w);
    return w;
}

static ework_t *new_cwork(req_t *r, vsr_classifier_t *cls, vsr_embedder_t *e, const vsr_slice_t *text,
                          vsr_slice_t payload, uint64_t deadline_us)
{
    ework_t *w = new_work(r, e, text, 1, deadline_us);
    w->cls = cls;
    w->payload = payload;
    vsr_buf_init(&w->result, 0);
    w->w.prepare = NULL;
    w->w.batch_key = NULL;
    if (e && cls->embeds_text && (cls->needs_dim == 0 || cls->needs_dim == e->dim))
        batchable(w);
    return w;
}

static req_t *new_req(conn_t *c, int kind)
{
    req_t *r = vsr_calloc(1, sizeof *r);
    r->srv = c->srv;
    r->conn = c;
    r->kind = kind;
    vsr_pool_init(&r->pool);
    r->body = c->body;
    vsr_buf_init(&c->body, c->srv->o->max_body);
    r->arrived_us = vsr_now_us();
    c->srv->reqs_in_flight++;
    return r;
}

static uint64_t deadline_of(server_t *s, uint64_t arrived_us, int64_t ms)
{
    uint64_t d = ms > 0 ? (uint64_t)ms : s->o->default_deadline_ms;
    return d ? arrived_us + d * 1000 : 0;
}

/* Submits the request's work; answers 429/503 itself when it cannot. */
static int submit(conn_t *c, req_t *r, int path, vsr_rt_work_t **items, size_t n)
{
    server_t *s = c->srv;
    size_t inputs = 0;
    for (size_t i = 0; i < n; i++)
        inputs += ((ework_t *)items[i])->n;
    r->outstanding = n;
    c->req = r;
    int rc = s->inputs + inputs > s->o->max_inputs ? VSR_ERR_TOO_BIG : vsr__rt_pool_submit(s->pool, items, n);
    if (rc == VSR_OK) {
        s->inputs += inputs;
        return VSR_OK;
    }
    c->req = NULL;
    if (rc == VSR_ERR_TOO_BIG)
        send_error(c, path, 429, "queue_full", "the runtime's work queue is full; retry later", "retry-after: 1\r\n");
    else
        send_error(c, path, 503, "unavailable", "the runtime is shutting down", NULL);
    return rc;
}

static void handle_bundle(conn_t *c)
{
    server_t *s = c->srv;
    req_t *r = new_req(c, P_BUNDLE);
    const char *code = NULL, *msg = NULL;
    int st = vsr_rt_bundle_parse(r->body.data ? r->body.data : "", r->body.len, s->o->max_tasks, &r->pool,
                                 &r->bundle, &code, &msg);
    if (st != VSR_OK) {
        send_error(c, P_BUNDLE, st, code, msg, NULL);
        req_free(r);
        return;
    }
    uint64_t dl = deadline_of(s, r->arrived_us, r->bundle.deadline_ms);
    r->work = vsr_pool_alloc(&r->pool, r->bundle.n_tasks * sizeof *r->work);
    r->outstanding_max = r->bundle.n_tasks;
    vsr_rt_work_t **items = vsr_pool_alloc(&r->pool, r->bundle.n_tasks * sizeof *items);
    size_t n = 0;
    for (size_t i = 0; i < r->bundle.n_tasks; i++) {
        vsr_rt_task_t *t = &r->bundle.tasks[i];
        r->work[i] = NULL;
        if (t->kind == VSR_RT_TASK_CLASSIFY) {
            vsr_classifier_t *cls = find_classifier(s, t->model);
            if (cls == NULL)
                continue;
            r->work[i] = new_cwork(r, cls, classify_embedder(s->o, cls), t->inputs, t->payload, dl);
            items[n++] = &r->work[i]->w;
            continue;
        }
        if (t->kind != VSR_RT_TASK_EMBED)
            continue;
        vsr_embedder_t *e = find_model(s, t->model);
        if (e == NULL)
            continue;
        r->work[i] = new_work(r, e, t->inputs, t->n_inputs, dl);
        items[n++] = &r->work[i]->w;
    }
    if (n == 0) {
        answer_bundle(r);
        req_free(r);
        return;
    }
    if (submit(c, r, P_BUNDLE, items, n) != VSR_OK)
        req_free(r);
}

/* The body of r as a JSON object into *j (free it in every case):
 * VSR_OK, or VSR_ERR_INVALID with *code ("invalid_json" or
 * "invalid_request", a 400) and *why set. */
static int parse_object_body(req_t *r, vsr_json_t *j, const char **code, const char **why)
{
    vsr_json_limits_t lim = {.max_depth = 64};
    uint32_t dup;
    *code = "invalid_json";
    if (vsr_json_parse(j, r->body.data ? r->body.data : "", r->body.len, &lim) != VSR_OK) {
        *why = j->err_msg ? j->err_msg : "the body is not valid JSON";
        return VSR_ERR_INVALID;
    }
    if (vsr_json_find_duplicate_key(j, &dup)) {
        *why = "duplicate member name in the body";
        return VSR_ERR_INVALID;
    }
    *code = "invalid_request";
    if (vsr_json_type(j, 0) != VSR_JSON_OBJECT) {
        *why = "the body must be a JSON object";
        return VSR_ERR_INVALID;
    }
    return VSR_OK;
}

/* 404 model_not_found: "the runtime serves no <what> "<model>" ...". */
static void send_model_not_found(conn_t *c, int path, const char *what, vsr_slice_t model)
{
    vsr_buf_t m;
    vsr_buf_init(&m, 0);
    vsr_buf_printf(&m, "the runtime serves no %s \"", what);
    vsr_json_append_client_text(&m, model, VSR_JSON_QUOTE_MAX);
    vsr_buf_append_cstr(&m, "\" (see GET /v1/models)");
    vsr_buf_append(&m, "", 1);
    send_error(c, path, 404, "model_not_found", m.data, NULL);
    vsr_buf_free(&m);
}

static void handle_embeddings(conn_t *c)
{
    server_t *s = c->srv;
    req_t *r = new_req(c, P_EMBEDDINGS);
    vsr_json_t j;
    const char *why = NULL, *code = NULL;
    int status = 400;
    vsr_embedder_t *e = NULL;
    vsr_slice_t *inputs = NULL;
    size_t n = 0;
    uint32_t t;
    if (parse_object_body(r, &j, &code, &why) != VSR_OK)
        goto fail;
    vsr_slice_t model = VSR_SLICE_NULL;
    if (vsr_json_object_get(&j, 0, "model", &t) == VSR_OK && vsr_json_type(&j, t) != VSR_JSON_NULL) {
        if (vsr_json_type(&j, t) != VSR_JSON_STRING || vsr_json_string(&j, t, &r->pool, &model) != VSR_OK) {
            why = "\"model\" must be a string";
            goto fail;
        }
    }
    if (vsr_json_object_get(&j, 0, "encoding_format", &t) == VSR_OK && vsr_json_type(&j, t) != VSR_JSON_NULL) {
        if (vsr_json_string_eq(&j, t, VSR_SLICE_LIT("base64")))
            r->base64 = 1;
        else if (!vsr_json_string_eq(&j, t, VSR_SLICE_LIT("float"))) {
            status = 422;
            code = "invalid_input";
            why = "\"encoding_format\" must be \"float\" or \"base64\"";
            goto fail;
        }
    }
    if (vsr_json_object_get(&j, 0, "input", &t) != VSR_OK) {
        why = "\"input\" is required";
        goto fail;
    }
    int rc = vsr__rt_parse_inputs(&j, t, &r->pool, &inputs, &n, &why);
    if (rc != VSR_OK) {
        status = 422;
        code = "invalid_input";
        goto fail;
    }
    e = find_model(s, model);
    if (e == NULL) {
        vsr_json_free(&j);
        send_model_not_found(c, P_EMBEDDINGS, "embedding model", model);
        req_free(r);
        return;
    }
    vsr_json_free(&j);
    r->work = vsr_pool_alloc(&r->pool, sizeof *r->work);
    r->outstanding_max = 1;
    r->work[0] = new_work(r, e, inputs, n, deadline_of(s, r->arrived_us, -1));
    vsr_rt_work_t *item = &r->work[0]->w;
    if (submit(c, r, P_EMBEDDINGS, &item, 1) != VSR_OK)
        req_free(r);
    return;
fail:
    vsr_json_free(&j);
    send_error(c, P_EMBEDDINGS, status, code, why, NULL);
    req_free(r);
}

/* POST /v1/classify {"model": NAME, "text": T, ...options}: one
 * classification; the body is the classifier's task object. */
static void handle_classify(conn_t *c)
{
    server_t *s = c->srv;
    req_t *r = new_req(c, P_CLASSIFY);
    vsr_json_t j;
    const char *why = NULL, *code = NULL;
    int status = 400;
    uint32_t t;
    vsr_slice_t model = VSR_SLICE_NULL, *text = vsr_pool_alloc(&r->pool, sizeof *text);
    if (parse_object_body(r, &j, &code, &why) != VSR_OK)
        goto fail;
    if (vsr_json_object_get(&j, 0, "model", &t) != VSR_OK || vsr_json_type(&j, t) != VSR_JSON_STRING ||
        vsr_json_string(&j, t, &r->pool, &model) != VSR_OK || model.len == 0) {
        why = "\"model\" must name a classifier (see GET /v1/models)";
        goto fail;
    }
    if ((vsr_json_object_get(&j, 0, "text", &t) != VSR_OK && vsr_json_object_get(&j, 0, "input", &t) != VSR_OK) ||
        vsr_json_type(&j, t) != VSR_JSON_STRING) {
        why = "\"text\" must be a string";
        goto fail;
    }
    if (vsr_json_string(&j, t, &r->pool, text) != VSR_OK || text->len == 0) {
        status = 422;
        code = "invalid_input";
        why = "\"text\" is empty";
        goto fail;
    }
    vsr_classifier_t *cls = find_classifier(s, model);
    vsr_json_free(&j);
    if (cls == NULL) {
        send_model_not_found(c, P_CLASSIFY, "classifier", model);
        req_free(r);
        return;
    }
    r->work = vsr_pool_alloc(&r->pool, sizeof *r->work);
    r->outstanding_max = 1;
    r->work[0] = new_cwork(r, cls, classify_embedder(s->o, cls), text,
                           vsr_slice(r->body.data, r->body.len), deadline_of(s, r->arrived_us, -1));
    vsr_rt_work_t *item = &r->work[0]->w;
    if (submit(c, r, P_CLASSIFY, &item, 1) != VSR_OK)
        req_free(r);
    return;
fail:
    vsr_json_free(&j);
    send_error(c, P_CLASSIFY, status, code, why, NULL);
    req_free(r);
}

static void handle_models(conn_t *c)
{
    server_t *s = c->srv;
    vsr_buf_t b;
    vsr_buf_init(&b, 0);
    vsr_buf_append_cstr(&b, "{\"object\":\"list\",\"data\":[");
    for (size_t i = 0; i < s->o->n_embedders; i++) {
        vsr_embedder_t *e = s->o->embedders[i];
        vsr_buf_append_cstr(&b, i ? ",{\"id\":" : "{\"id\":");
        vsr_buf_append_json_string(&b, vsr_slice_cstr(e->name));
        vsr_buf_printf(&b, ",\"object\":\"model\",\"owned_by\":\"vsr-runtime\",\"task\":\"embed\",\"dim\":%zu,"
                           "\"backend\":\"%s\",\"default\":%s}",
                       e->dim, e->backend, i == 0 ? "true" : "false");
    }
    for (size_t i = 0; i < s->o->n_classifiers; i++) {
        vsr_classifier_t *k = s->o->classifiers[i];
        vsr_buf_append_cstr(&b, i || s->o->n_embedders ? ",{\"id\":" : "{\"id\":");
        vsr_buf_append_json_string(&b, vsr_slice_cstr(k->name));
        vsr_buf_printf(&b, ",\"object\":\"model\",\"owned_by\":\"vsr-runtime\",\"task\":\"classify\",\"output\":\"%s\","
                           "\"backend\":\"%s\"}",
                       k->output, k->backend);
    }
    vsr_buf_append_cstr(&b, "]}");
    send_response(c, P_MODELS, 200, NULL, &b);
    vsr_buf_free(&b);
}

static void handle_metrics(conn_t *c)
{
    server_t *s = c->srv;
    metrics_t *m = &s->m;
    vsr_buf_t b;
    vsr_buf_init(&b, 0);
    vsr_buf_append_cstr(&b, "# HELP vsr_runtime_requests_total Requests answered, by endpoint and status.\n"
                            "# TYPE vsr_runtime_requests_total counter\n");
    for (int p = 0; p < P_N; p++)
        for (size_t k = 0; k < C_N; k++) {
            uint64_t v = ld(&m->requests[p][k]);
            if (v == 0)
                continue;
            if (k < VSR_ARRAY_LEN(m_codes))
                vsr_buf_printf(&b, "vsr_runtime_requests_total{path=\"%s\",code=\"%d\"} %llu\n", m_paths[p],
                               m_codes[k], (unsigned long long)v);
            else
                vsr_buf_printf(&b, "vsr_runtime_requests_total{path=\"%s\",code=\"other\"} %llu\n", m_paths[p],
                               (unsigned long long)v);
        }
    vsr_buf_append_cstr(&b, "# HELP vsr_runtime_tasks_total Model tasks answered, by type and result.\n"
                            "# TYPE vsr_runtime_tasks_total counter\n");
    for (int t = 0; t < 2; t++)
        for (int r = 0; r < RES_N; r++)
            vsr_buf_printf(&b, "vsr_runtime_tasks_total{type=\"%s\",result=\"%s\"} %llu\n", t ? "other" : "embed",
                           m_results[r], (unsigned long long)ld(&m->tasks[t][r]));
    vsr_buf_printf(&b,
                   "# HELP vsr_runtime_queue_depth Work items waiting for a compute thread.\n"
                   "# TYPE vsr_runtime_queue_depth gauge\nvsr_runtime_queue_depth %zu\n"
                   "# HELP vsr_runtime_rejected_total Requests refused with 429 (queue full).\n"
                   "# TYPE vsr_runtime_rejected_total counter\nvsr_runtime_rejected_total %llu\n"
                   "# HELP vsr_runtime_connections Open connections.\n"
                   "# TYPE vsr_runtime_connections gauge\nvsr_runtime_connections %zu\n",
                   vsr__rt_pool_depth(s->pool), (unsigned long long)ld(&m->rejected), s->n_conns);
    uint64_t batches, batched;
    vsr__rt_pool_batches(s->pool, &batches, &batched);
    vsr_buf_printf(&b,
                   "# HELP vsr_runtime_batches_total Work items taken together by one compute thread "
                   "(two or more, one key).\n"
                   "# TYPE vsr_runtime_batches_total counter\nvsr_runtime_batches_total %llu\n"
                   "# HELP vsr_runtime_batched_tasks_total Work items taken in those batches.\n"
                   "# TYPE vsr_runtime_batched_tasks_total counter\nvsr_runtime_batched_tasks_total %llu\n"
                   "# HELP vsr_runtime_batch_passes_total Embedding calls that computed a batch's texts "
                   "together.\n"
                   "# TYPE vsr_runtime_batch_passes_total counter\nvsr_runtime_batch_passes_total %llu\n"
                   "# HELP vsr_runtime_batch_texts_total Texts those calls computed (deduplicated).\n"
                   "# TYPE vsr_runtime_batch_texts_total counter\nvsr_runtime_batch_texts_total %llu\n",
                   (unsigned long long)batches, (unsigned long long)batched,
                   (unsigned long long)ld(&m->batch_passes), (unsigned long long)ld(&m->batch_texts));
    vsr_buf_append_cstr(&b, "# HELP vsr_runtime_compute_seconds Time a work item spent computing.\n"
                            "# TYPE vsr_runtime_compute_seconds histogram\n");
    uint64_t cum = 0;
    for (size_t i = 0; i < B_N; i++) {
        cum += ld(&m->hist[i]);
        vsr_buf_printf(&b, "vsr_runtime_compute_seconds_bucket{le=\"%g\"} %llu\n", m_buckets[i],
                       (unsigned long long)cum);
    }
    cum += ld(&m->hist[B_N]);
    vsr_buf_printf(&b,
                   "vsr_runtime_compute_seconds_bucket{le=\"+Inf\"} %llu\nvsr_runtime_compute_seconds_sum %.6f\n"
                   "vsr_runtime_compute_seconds_count %llu\n",
                   (unsigned long long)cum, (double)ld(&m->hist_sum_us) / 1e6,
                   (unsigned long long)ld(&m->hist_count));
    vsr_buf_append_cstr(&b, "# HELP vsr_runtime_classify_seconds Time one classify task computed, by classifier "
                            "(its embedding included).\n# TYPE vsr_runtime_classify_seconds summary\n");
    for (size_t i = 0; i < s->o->n_classifiers && i < RT_MAX_CLS_METRICS; i++)
        vsr_buf_printf(&b,
                       "vsr_runtime_classify_seconds_sum{model=\"%s\"} %.6f\n"
                       "vsr_runtime_classify_seconds_count{model=\"%s\"} %llu\n",
                       s->o->classifiers[i]->name, (double)ld(&m->cls_sum_us[i]) / 1e6, s->o->classifiers[i]->name,
                       (unsigned long long)ld(&m->cls_count[i]));
    vsr_emb_cache_stats_t cs;
    vsr_emb_cache_stats(s->cache, &cs);
    double ratio = cs.hits + cs.misses ? (double)cs.hits / (double)(cs.hits + cs.misses) : 0;
    vsr_buf_printf(&b,
                   "# HELP vsr_runtime_embedding_cache_hits_total Embedding cache lookups that hit.\n"
                   "# TYPE vsr_runtime_embedding_cache_hits_total counter\n"
                   "vsr_runtime_embedding_cache_hits_total %llu\n"
                   "# HELP vsr_runtime_embedding_cache_misses_total Embedding cache lookups that missed.\n"
                   "# TYPE vsr_runtime_embedding_cache_misses_total counter\n"
                   "vsr_runtime_embedding_cache_misses_total %llu\n"
                   "# HELP vsr_runtime_embedding_cache_hit_ratio Hits over lookups since the start.\n"
                   "# TYPE vsr_runtime_embedding_cache_hit_ratio gauge\n"
                   "vsr_runtime_embedding_cache_hit_ratio %.6f\n"
                   "# HELP vsr_runtime_embedding_cache_entries Vectors in the embedding cache.\n"
                   "# TYPE vsr_runtime_embedding_cache_entries gauge\n"
                   "vsr_runtime_embedding_cache_entries %llu\n"
                   "# HELP vsr_runtime_embedding_cache_bytes Bytes held by the embedding cache.\n"
                   "# TYPE vsr_runtime_embedding_cache_bytes gauge\n"
                   "vsr_runtime_embedding_cache_bytes %llu\n"
                   "# HELP vsr_runtime_embedding_cache_evictions_total Entries evicted to stay in bounds.\n"
                   "# TYPE vsr_runtime_embedding_cache_evictions_total counter\n"
                   "vsr_runtime_embedding_cache_evictions_total %llu\n",
                   (unsigned long long)cs.hits, (unsigned long long)cs.misses, ratio, (unsigned long long)cs.entries,
                   (unsigned long long)cs.bytes, (unsigned long long)cs.evictions);
    send_typed(c, P_METRICS, 200, "text/plain; version=0.0.4", NULL, &b);
    vsr_buf_free(&b);
}

static void send_json(conn_t *c, int path, int status, const char *json)
{
    vsr_buf_t b;
    vsr_buf_init(&b, 0);
    vsr_buf_append_cstr(&b, json);
    send_response(c, path, status, NULL, &b);
    vsr_buf_free(&b);
}

static void dispatch(conn_t *c)
{
    server_t *s = c->srv;
    int post = strcmp(c->method, "POST") == 0;
    int get = strcmp(c->method, "GET") == 0;
    int p = path_index(c->path);
    if (p == P_OTHER) {
        send_error(c, P_OTHER, 404, "not_found", "unknown path (see docs/runtime.md)", NULL);
        return;
    }
    int wants_post = p == P_BUNDLE || p == P_EMBEDDINGS || p == P_CLASSIFY;
    if (wants_post ? !post : !get) {
        send_error(c, p, 405, "method_not_allowed", wants_post ? "use POST" : "use GET",
                   wants_post ? "allow: POST\r\n" : "allow: GET\r\n");
        return;
    }
    if (s->draining && (p == P_BUNDLE || p == P_EMBEDDINGS || p == P_CLASSIFY)) {
        send_error(c, p, 503, "unavailable", "the runtime is shutting down", NULL);
        return;
    }
    switch (p) {
    case P_BUNDLE:
        handle_bundle(c);
        return;
    case P_EMBEDDINGS:
        handle_embeddings(c);
        return;
    case P_CLASSIFY: {
        if (strcmp(c->path, "/v1/classify") == 0) {
            handle_classify(c);
            return;
        }
        char msg[400];
        snprintf(msg, sizeof msg, "%s is not supported by this runtime yet (see GET /v1/models)", c->path);
        send_error(c, p, 501, "not_supported", msg, NULL);
        return;
    }
    case P_MODELS:
        handle_models(c);
        return;
    case P_HEALTH:
        if (s->draining)
            send_json(c, p, 503, "{\"status\":\"shutting_down\"}");
        else {
            char tmp[64];
            snprintf(tmp, sizeof tmp, "{\"status\":\"ok\",\"models\":%zu}", s->o->n_embedders + s->o->n_classifiers);
            send_json(c, p, 200, tmp);
        }
        return;
    case P_LIVE:
        send_json(c, p, 200, "{\"status\":\"live\"}");
        return;
    case P_METRICS:
        handle_metrics(c);
        return;
    }
}

/* ---- parser callbacks ---- */

static void free_write_req(uv_write_t *w, int status)
{
    VSR_UNUSED(status);
    vsr_free(w);
}

static int cb_head(void *ud, vsr_http_head_t *h)
{
    conn_t *c = ud;
    snprintf(c->method, sizeof c->method, "%.*s", (int)VSR_MIN(h->method.len, 15), h->method.p);
    vsr_slice_t t = h->target;
    const char *q = memchr(t.p, '?', t.len);
    size_t tl = q ? (size_t)(q - t.p) : t.len;
    if (tl >= sizeof c->path)
        tl = sizeof c->path - 1; /* longer than any path we serve: stays unknown */
    memcpy(c->path, t.p, tl);
    c->path[tl] = '\0';
    c->keep_alive = h->keep_alive;
    c->srv->buffered -= c->body.len;
    vsr_buf_reset(&c->body);
    arm(c, PH_BODY);
    if (h->expect_continue) {
        static char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
        uv_write_t *w = vsr_calloc(1, sizeof *w);
        uv_buf_t b = uv_buf_init(cont, sizeof cont - 1);
        if (uv_write(w, &c->u.s, &b, 1, free_write_req) != 0)
            vsr_free(w);
    }
    return VSR_OK;
}

static int cb_body(void *ud, const char *p, size_t n)
{
    conn_t *c = ud;
    server_t *s = c->srv;
    if (s->buffered + n > s->o->max_buffered) {
        c->overloaded = 1;
        return VSR_ERR_TOO_BIG;
    }
    if (vsr_buf_append(&c->body, p, n) != VSR_OK)
        return VSR_ERR_TOO_BIG;
    s->buffered += n;
    return VSR_OK;
}

static int cb_complete(void *ud)
{
    conn_t *c = ud;
    arm(c, PH_BUSY);
    return VSR_PAUSED;
}

static const vsr_http_callbacks_t parser_cb = {cb_head, cb_body, cb_complete};

/* Feeds bytes to the parser; dispatches a complete request and keeps what
 * follows it in c->pending. */
static void conn_feed(conn_t *c, const char *p, size_t n)
{
    if (c->phase == PH_IDLE && n)
        arm(c, PH_HEAD);
    ssize_t used = vsr_http_parser_execute(&c->parser, p, n);
    if (used < 0) {
        uv_read_stop(&c->u.s);
        int st = c->parser.error_status ? c->parser.error_status : 400;
        c->keep_alive = 0;
        c->phase = PH_BUSY;
        if (c->overloaded) {
            send_error(c, P_OTHER, 503, "overloaded",
                       "the runtime holds too many request bodies at once; retry later", "retry-after: 1\r\n");
            return;
        }
        const char *code = st == 413 ? "request_too_large" : st == 431 ? "headers_too_large" : "invalid_http";
        send_error(c, P_OTHER, st, code, c->parser.error_msg ? c->parser.error_msg : "invalid HTTP request", NULL);
        return;
    }
    if (c->phase != PH_BUSY)
        return;
    uv_read_stop(&c->u.s);
    if ((size_t)used < n)
        vsr_buf_append(&c->pending, p + used, n - (size_t)used);
    dispatch(c);
}

static void on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *b)
{
    conn_t *c = h->data;
    VSR_UNUSED(hint);
    *b = uv_buf_init(c->rbuf, sizeof c->rbuf);
}

static void on_read(uv_stream_t *st, ssize_t n, const uv_buf_t *b)
{
    conn_t *c = st->data;
    if (n < 0) {
        if (c->phase == PH_BUSY) { /* the peer half-closed while its answer is due: answer, then close */
            uv_read_stop(st);
            c->keep_alive = 0;
            return;
        }
        conn_close(c);
        return;
    }
    if (n == 0)
        return;
    conn_feed(c, b->base, (size_t)n);
}

static void read_start(conn_t *c)
{
    uv_read_start(&c->u.s, on_alloc, on_read);
}

static void on_conn(uv_stream_t *l, int status)
{
    server_t *s = l->data;
    if (status < 0)
        return;
    conn_t *c = vsr_calloc(1, sizeof *c);
    c->srv = s;
    int rc = s->o->socket_path ? uv_pipe_init(s->loop, &c->u.pipe, 0) : uv_tcp_init(s->loop, &c->u.tcp);
    if (rc != 0) {
        vsr_free(c);
        return;
    }
    c->u.h.data = c;
    uv_timer_init(s->loop, &c->timer);
    c->timer.data = c;
    c->handles_open = 2;
    vsr_http_limits_t lim = {.max_head_size = RT_MAX_HEAD, .max_headers = RT_MAX_FIELDS, .max_body = s->o->max_body};
    vsr_http_parser_init(&c->parser, VSR_HTTP_REQUEST, &lim, &parser_cb, c);
    vsr_buf_init(&c->body, s->o->max_body);
    vsr_buf_init(&c->pending, sizeof c->rbuf);
    c->next = s->conns;
    if (s->conns)
        s->conns->prev = c;
    s->conns = c;
    s->n_conns++;
    if (uv_accept(l, &c->u.s) != 0 || s->n_conns > s->o->max_connections || s->draining) {
        conn_close(c);
        return;
    }
    arm(c, PH_HEAD);
    read_start(c);
}

/* ---- shutdown ---- */

static void finish(server_t *s)
{
    if (s->finished)
        return;
    s->finished = 1;
    uv_close((uv_handle_t *)&s->drain_timer, NULL);
    uv_close((uv_handle_t *)&s->sigterm, NULL);
    uv_close((uv_handle_t *)&s->sigint, NULL);
    vsr__rt_pool_free(s->pool);
    s->pool = NULL;
}

static void maybe_finish(server_t *s)
{
    if (s->draining && !s->finished && s->n_conns == 0 && s->reqs_in_flight == 0 && !s->listening)
        finish(s);
}

static void on_drain_timeout(uv_timer_t *t)
{
    server_t *s = t->data;
    vsr_log_warn("runtime", "drain timeout: closing %zu connection(s)", s->n_conns);
    while (s->conns)
        conn_close(s->conns);
    vsr__rt_pool_stop(s->pool); /* cancelled work answers nobody and frees its requests */
    maybe_finish(s);
}

static void listener_closed(uv_handle_t *h)
{
    server_t *s = h->data;
    s->listening = 0;
    maybe_finish(s);
}

static void on_signal(uv_signal_t *sig, int signum)
{
    server_t *s = sig->data;
    if (s->draining)
        return;
    vsr_log_info("runtime", "signal %d: draining", signum);
    s->draining = 1;
    uv_close(&s->lst.h, listener_closed);
    uv_timer_start(&s->drain_timer, on_drain_timeout, RT_DRAIN_MS, 0);
    for (conn_t *c = s->conns, *n; c; c = n) {
        n = c->next;
        if (c->phase != PH_BUSY)
            conn_close(c);
    }
}

/* ---- start ---- */

void vsr_runtime_opts_init(vsr_runtime_opts_t *o)
{
    memset(o, 0, sizeof *o);
    o->queue = 256;
    o->max_tasks = 64;
    o->max_body = 8u << 20;
    o->cache_entries = 4096;
    o->cache_bytes = 64u << 20;
    o->header_timeout_ms = 10000;
    o->body_timeout_ms = 30000;
    o->idle_timeout_ms = 60000;
    o->max_connections = 1024;
    o->max_buffered = 256u << 20;
    o->max_inputs = 16384;
    o->default_deadline_ms = 30000;
    o->max_batch = 16;
}

/* 0 bound, 3 in use by a live process, 1 another failure. */
static int bind_unix(server_t *s, const char *path)
{
    if (strlen(path) >= sizeof(((struct sockaddr_un *)0)->sun_path)) {
        vsr_log_error("runtime", "socket path too long (at most %zu bytes): %s",
                      sizeof(((struct sockaddr_un *)0)->sun_path) - 1, path);
        return 1;
    }
    struct stat stt;
    if (lstat(path, &stt) == 0) {
        if (!S_ISSOCK(stt.st_mode)) {
            vsr_log_error("runtime", "%s exists and is not a socket", path);
            return 1;
        }
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path);
        int live = fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0;
        if (fd >= 0)
            close(fd);
        if (live) {
            vsr_log_error("runtime", "%s: another process is serving on this socket", path);
            return 3;
        }
        unlink(path); /* a stale socket of a runtime that died */
    }
    uv_pipe_init(s->loop, &s->lst.pipe, 0);
    mode_t old = umask(0177);
    int rc = uv_pipe_bind(&s->lst.pipe, path);
    umask(old);
    if (rc == 0)
        rc = uv_listen(&s->lst.s, 128, on_conn);
    if (rc != 0) {
        vsr_log_error("runtime", "cannot listen on %s: %s", path, uv_strerror(rc));
        return rc == UV_EADDRINUSE ? 3 : 1;
    }
    return 0;
}

static int bind_tcp(server_t *s, const char *addr)
{
    char host[128];
    const char *colon = strrchr(addr, ':');
    if (colon == NULL || colon == addr || (size_t)(colon - addr) >= sizeof host) {
        vsr_log_error("runtime", "--listen wants ADDR:PORT, got %s", addr);
        return 1;
    }
    memcpy(host, addr, (size_t)(colon - addr));
    host[colon - addr] = '\0';
    uint64_t port;
    if (vsr_slice_to_u64(vsr_slice_cstr(colon + 1), 65535, &port) != VSR_OK) {
        vsr_log_error("runtime", "--listen: bad port in %s", addr);
        return 1;
    }
    struct sockaddr_storage ss;
    char *h = host;
    size_t hl = strlen(h);
    if (h[0] == '[' && hl > 2 && h[hl - 1] == ']') {
        h[hl - 1] = '\0';
        h++;
    }
    if (uv_ip4_addr(h, (int)port, (struct sockaddr_in *)&ss) != 0 &&
        uv_ip6_addr(h, (int)port, (struct sockaddr_in6 *)&ss) != 0) {
        vsr_log_error("runtime", "--listen: %s is not a numeric address", h);
        return 1;
    }
    uv_tcp_init(s->loop, &s->lst.tcp);
    int rc = uv_tcp_bind(&s->lst.tcp, (struct sockaddr *)&ss, 0);
    if (rc == 0)
        rc = uv_listen(&s->lst.s, 128, on_conn);
    if (rc != 0) {
        vsr_log_error("runtime", "cannot listen on %s: %s", addr, uv_strerror(rc));
        return rc == UV_EADDRINUSE ? 3 : 1;
    }
    struct sockaddr_storage bound;
    int bl = sizeof bound;
    char ip[64] = "";
    uv_tcp_getsockname(&s->lst.tcp, (struct sockaddr *)&bound, &bl);
    int bport = 0;
    if (bound.ss_family == AF_INET6) {
        uv_ip6_name((struct sockaddr_in6 *)&bound, ip, sizeof ip);
        bport = ntohs(((struct sockaddr_in6 *)&bound)->sin6_port);
    } else {
        uv_ip4_name((struct sockaddr_in *)&bound, ip, sizeof ip);
        bport = ntohs(((struct sockaddr_in *)&bound)->sin_port);
    }
    printf("listening on %s:%d\n", ip, bport);
    fflush(stdout);
    return 0;
}

int vsr_runtime_serve(const vsr_runtime_opts_t *opts)
{
    int rc = 1;
    server_t *s = vsr_calloc(1, sizeof *s);
    s->o = opts;
    uv_loop_t loop;
    uv_loop_init(&loop);
    s->loop = &loop;
    if (opts->n_embedders == 0 || (!opts->socket_path == !opts->listen)) {
        vsr_log_error("runtime", "need one address (--socket or --listen) and at least one embedder");
        goto out_loop;
    }
    for (size_t i = 0; i < opts->n_classifiers; i++) {
        const vsr_classifier_t *k = opts->classifiers[i];
        if (classify_embedder(opts, k) == NULL) {
            vsr_log_error("runtime", "classifier %s works on %zu-d embeddings and no embedder gives them", k->name,
                          k->needs_dim);
            goto out_loop;
        }
    }
    signal(SIGPIPE, SIG_IGN);
    uv_signal_init(&loop, &s->sigterm);
    uv_signal_init(&loop, &s->sigint);
    s->sigterm.data = s->sigint.data = s;
    uv_signal_start(&s->sigterm, on_signal, SIGTERM);
    uv_signal_start(&s->sigint, on_signal, SIGINT);
    uv_timer_init(&loop, &s->drain_timer);
    s->drain_timer.data = s;
    unsigned threads = opts->threads;
    if (threads == 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        threads = n > 0 ? (unsigned)n : 1;
    }
    s->cache = vsr_emb_cache_new(opts->cache_entries, opts->cache_bytes);
    s->pool = vsr__rt_pool_new(&loop, threads, opts->queue, opts->max_batch, opts->test_delay_ms);
    if (s->pool == NULL) {
        s->draining = 1;
        finish(s);
        goto out_run;
    }
    int b = opts->socket_path ? bind_unix(s, opts->socket_path) : bind_tcp(s, opts->listen);
    s->lst.h.data = s;
    if (b != 0) {
        rc = b;
        if (!uv_is_closing(&s->lst.h) && s->lst.h.type != UV_UNKNOWN_HANDLE)
            uv_close(&s->lst.h, NULL);
        s->draining = 1;
        finish(s);
        goto out_run;
    }
    s->listening = 1;
    vsr_log_info("runtime", "serving %zu model(s) on %s with %u thread(s), queue %zu",
                 opts->n_embedders + opts->n_classifiers,
                 opts->socket_path ? opts->socket_path : opts->listen, threads, opts->queue);
    if (opts->test_delay_ms)
        vsr_log_warn("runtime", "--test-delay-ms %llu: every work item taken is delayed (a test knob)",
                     (unsigned long long)opts->test_delay_ms);
    uv_run(&loop, UV_RUN_DEFAULT);
    rc = 0;
    if (opts->socket_path)
        unlink(opts->socket_path);
    vsr_log_info("runtime", "stopped");
    goto out_loop;
out_run:
    uv_run(&loop, UV_RUN_DEFAULT);
out_loop:
    uv_loop_close(&loop);
    for (size_t i = 0; i < opts->n_embedders; i++)
        vsr_embedder_free(opts->embedders[i]);
    for (size_t i = 0; i < opts->n_classifiers; i++)
        vsr_classifier_free(opts->classifiers[i]);
    vsr_emb_cache_free(s->cache);
    vsr_free(s);
    return rc;
}
