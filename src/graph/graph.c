/*
 * graph.c — the executor: frames over the node tree, the calls in flight,
 * the budget's ledger, cancellation, and the run's end.
 *
 * Control flow is continuation passing: node_start() begins a node and
 * node_done() hands its result to the parent frame, which goes on (the
 * next child of a seq, the next round of a loop, ...).  A call's done may
 * come back synchronously from inside the port's call; every entry point
 * (start and each call's done) counts depth, and the run reports to its
 * owner only once the outermost entry unwinds, so no frame is touched after
 * the owner may have freed the pool.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "graph/graph-int.h"

static void node_start(vsr_graph_run_t *r, const node_t *n, frame_t *parent);
static void node_done(vsr_graph_run_t *r, frame_t *f, int ok);

static uint64_t now_ms(const vsr_graph_run_t *r)
{
    return r->o.port && r->o.port->now_ms ? r->o.port->now_ms(r->o.port->ud) : vsr_now_ms();
}

node_t *vsr__graph_node(vsr_graph_run_t *r, node_kind_t kind, const char *name)
{
    node_t *n = vsr_pool_alloc(r->pool, sizeof(*n));
    memset(n, 0, sizeof(*n));
    n->kind = kind;
    n->name = name;
    return n;
}

void vsr__graph_kids(vsr_graph_run_t *r, node_t *n, size_t k, ...)
{
    n->kids = vsr_pool_alloc(r->pool, sizeof(node_t *) * (k ? k : 1));
    n->n_kids = 0;
    va_list ap;
    va_start(ap, k);
    for (size_t i = 0; i < k; i++) {
        node_t *kid = va_arg(ap, node_t *);
        if (kid)
            n->kids[n->n_kids++] = kid;
    }
    va_end(ap);
}

/* ---- the end ---- */

static void cancel_live(vsr_graph_run_t *r)
{
    while (r->live) {
        gcall_t *c = r->live;
        r->live = c->next_live;
        c->next_live = c->prev_live = NULL;
        if (c->inflight && c->handle && r->o.port->cancel)
            r->o.port->cancel(r->o.port->ud, c->handle);
        c->inflight = 0;
        c->handle = NULL;
        vsr_buf_free(&c->body);
    }
}

static void finish(vsr_graph_run_t *r)
{
    if (r->finished)
        return;
    r->finished = 1;
    cancel_live(r); /* first_k, a failure under fail_fast, or the answer came early */
    vsr_graph_outcome_t *o = &r->out;
    o->algorithm = r->o.decision->algorithm;
    o->models_used = vsr_pool_strndup(r->pool, r->used.data ? r->used.data : "", r->used.len);
    o->iterations = r->iterations;
    o->prompt_tokens = r->pt;
    o->completion_tokens = r->ct;
    o->latency_ms = now_ms(r) - r->t0_ms;
    o->records = r->records;
    o->n_records = r->n_records;
    vsr_buf_free(&r->used);
}

/* Reports the outcome once the outermost entry point unwinds. */
static void leave(vsr_graph_run_t *r)
{
    VSR_BUG_ON(r->depth == 0);
    if (--r->depth > 0 || !r->finished || r->reported || r->cancelled || !r->started)
        return;
    r->reported = 1;
    r->o.done(r->o.done_ud, &r->out); /* the pool may be gone on return */
}

void vsr__graph_answer(vsr_graph_run_t *r, int status, const char *content_type, vsr_slice_t body)
{
    if (r->finished)
        return;
    r->out.status = status;
    r->out.content_type = content_type;
    r->out.body = body;
    finish(r);
}

void vsr__graph_fail(vsr_graph_run_t *r, int status, const char *type, const char *code, const char *fmt, ...)
{
    if (r->finished)
        return;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (status == 502 && now_ms(r) >= r->o.deadline_ms) { /* the calls failed because time ran out */
        status = 504;
        code = "looper_deadline";
        snprintf(msg, sizeof(msg), "the algorithm's deadline passed after %u model calls", r->iterations);
    }
    vsr_buf_t b;
    vsr_buf_init(&b, 0);
    vsr_json_error_body(&b, vsr_slice_cstr(msg), type, code);
    vsr_slice_t body = vsr_pool_dup_slice(r->pool, vsr_buf_slice(&b));
    vsr_buf_free(&b);
    vsr__graph_answer(r, status, "application/json", body);
}

void vsr__graph_answer_completion(vsr_graph_run_t *r, const result_t *res, vsr_slice_t extra)
{
    vsr_buf_t b;
    vsr_buf_init(&b, 0);
    if (vsr__algo_with_usage(&b, res->body.p, res->body.len, r->pt, r->ct, extra) != VSR_OK) {
        vsr_buf_free(&b);
        vsr__graph_fail(r, 502, "server_error", "looper_bad_answer", "model \"%.200s\" answered a body that is not "
                        "a chat completion", r->refs[res->ref].name);
        return;
    }
    vsr__graph_answer_chat(r, r->refs[res->ref].name, &b);
}

void vsr__graph_answer_chat(vsr_graph_run_t *r, const char *model, vsr_buf_t *b)
{
    if (r->o.stream) {
        vsr_buf_t sse;
        vsr_buf_init(&sse, 0);
        vsr__algo_sse_from_completion(&sse, b->data, b->len, r->o.include_usage);
        vsr_buf_free(b);
        *b = sse;
    }
    vsr_slice_t body = vsr_pool_dup_slice(r->pool, vsr_buf_slice(b));
    vsr_buf_free(b);
    r->out.model = model;
    vsr__graph_answer(r, 200, r->o.stream ? "text/event-stream" : "application/json", body);
}

/* ---- results ---- */

size_t vsr__graph_ok_results(vsr_graph_run_t *r, const node_t *n, uint64_t epoch, const result_t ***out)
{
    const result_t **v = vsr_pool_alloc(r->pool, sizeof(*v) * (r->n_results + 1));
    size_t k = 0;
    for (size_t i = 0; i < r->n_results; i++) {
        const result_t *res = &r->results[i];
        if (res->status == VSR_OK && (n == NULL || res->node == n) && (epoch == 0 || res->epoch == epoch))
            v[k++] = res;
    }
    for (size_t i = 1; i < k; i++) /* insertion sort by slot: completion order is not call order */
        for (size_t j = i; j > 0 && v[j - 1]->slot > v[j]->slot; j--) {
            const result_t *t = v[j];
            v[j] = v[j - 1];
            v[j - 1] = t;
        }
    *out = v;
    return k;
}

/* ---- calls ---- */

static void record(vsr_graph_run_t *r, gcall_t *c, const result_t *res, unsigned attempts)
{
    const ref_t *ref = &r->refs[c->s.ref];
    if (r->n_records < VSR_GRAPH_MAX_RECORDS) {
        vsr_graph_call_record_t *rec = &r->records[r->n_records++];
        rec->model = ref->name;
        rec->iteration = c->iteration;
        rec->status = res->status;
        rec->http_status = res->http_status;
        rec->attempts = attempts;
        rec->prompt_tokens = res->status == VSR_OK ? res->c.prompt_tokens : 0;
        rec->completion_tokens = res->status == VSR_OK ? res->c.completion_tokens : 0;
        rec->start_ms = c->t0;
        rec->ms = now_ms(r) - c->t0;
        rec->node = c->f->node->name;
    }
}

static void live_remove(vsr_graph_run_t *r, gcall_t *c)
{
    if (c->prev_live)
        c->prev_live->next_live = c->next_live;
    else if (r->live == c)
        r->live = c->next_live;
    if (c->next_live)
        c->next_live->prev_live = c->prev_live;
    c->next_live = c->prev_live = NULL;
}

static result_t *result_add(vsr_graph_run_t *r)
{
    if (r->n_results == r->cap_results) {
        size_t cap = r->cap_results ? r->cap_results * 2 : 16;
        result_t *v = vsr_pool_alloc(r->pool, sizeof(*v) * cap);
        if (r->n_results)
            memcpy(v, r->results, sizeof(*v) * r->n_results);
        r->results = v;
        r->cap_results = cap;
    }
    result_t *res = &r->results[r->n_results++];
    memset(res, 0, sizeof(*res));
    return res;
}

static void parallel_pump(vsr_graph_run_t *r, frame_t *f);

static void call_done(void *ud, int status, int http_status, vsr_slice_t body, unsigned attempts)
{
    gcall_t *c = ud;
    vsr_graph_run_t *r = c->r;
    if (!c->inflight || r->finished)
        return;
    r->depth++;
    c->inflight = 0;
    c->handle = NULL;
    live_remove(r, c);
    vsr_buf_free(&c->body); /* the port is done with it */
    r->attempts += attempts ? attempts : 1;
    if (attempts > 1) /* the retries sent the body again */
        r->sent_bytes += (uint64_t)c->sent * (attempts - 1);
    frame_t *f = c->f;
    f->inflight--;
    f->finished++;
    f->calls[c->slot] = NULL;
    result_t *res = result_add(r);
    res->node = f->node;
    res->ref = c->s.ref;
    res->slot = c->slot;
    for (const frame_t *p = f->parent; p; p = p->parent) /* the nearest enclosing loop (its body may be a seq) */
        if (p->node->kind == N_LOOP) {
            res->round = p->round;
            break;
        }
    res->iteration = c->iteration;
    res->epoch = f->epoch;
    res->http_status = http_status;
    res->status = status;
    if (status == VSR_OK && r->kept_bytes + body.len > VSR_GRAPH_MAX_KEPT_BYTES)
        res->status = status = VSR_ERR_TOO_BIG; /* the run keeps no more answers */
    if (status == VSR_OK) {
        r->kept_bytes += body.len;
        res->body = vsr_pool_dup_slice(r->pool, body);
        if (http_status < 200 || http_status > 299)
            res->status = VSR_ERR;
        else if (vsr__algo_completion_parse(res->body.p, res->body.len, r->pool, &res->c) != VSR_OK)
            res->status = VSR_ERR_INVALID;
    }
    if (res->status == VSR_OK) {
        f->ok++;
        r->pt += res->c.prompt_tokens;
        r->ct += res->c.completion_tokens;
    }
    record(r, c, res, attempts);
    if (f->node->on_result)
        f->node->on_result(r, f->node, res);
    if (!r->finished) {
        if (res->status != VSR_OK && f->node->fail_fast)
            vsr__graph_fail(r, 502, "server_error", "looper_call_failed",
                            "model \"%.200s\" failed (%s%d) and the algorithm's on_error is fail", r->refs[c->s.ref].name,
                            http_status ? "status " : "error ", http_status ? http_status : status);
        else
            parallel_pump(r, f);
    }
    leave(r);
}

/* models_used: each model once, in the order of its first call */
static void note_used(vsr_graph_run_t *r, const char *name)
{
    size_t n = strlen(name);
    for (size_t i = 0; i + n <= r->used.len; i++)
        if ((i == 0 || r->used.data[i - 1] == ',') && !memcmp(r->used.data + i, name, n) &&
            (i + n == r->used.len || r->used.data[i + n] == ','))
            return;
    if (r->used.len)
        vsr_buf_append_cstr(&r->used, ",");
    vsr_buf_append_cstr(&r->used, name);
}

/* Would a hop of len bytes pass the byte budget?  Then the run fails (the
 * hops already sent are spent; none starts past the budget). */
static int over_bytes(vsr_graph_run_t *r, size_t len)
{
    if (r->sent_bytes + len <= r->max_bytes)
        return 0;
    vsr__graph_fail(r, 503, "server_error", "looper_budget_exhausted",
                    "the algorithm's upstream byte budget is exhausted: %llu bytes sent in %u model calls, the "
                    "next call's %zu bytes would pass %llu", (unsigned long long)r->sent_bytes, r->iterations, len,
                    (unsigned long long)r->max_bytes);
    return 1;
}

/* Starts slot i of f's node: VSR_OK (started, or answered at once),
 * VSR_DECLINED (nothing to call), or the run finished. */
static int call_start(vsr_graph_run_t *r, frame_t *f, size_t i)
{
    const node_t *n = f->node;
    gcall_t *c = vsr_pool_alloc(r->pool, sizeof(*c));
    memset(c, 0, sizeof(*c));
    c->r = r;
    c->f = f;
    c->slot = i;
    if (n->prepare(r, n, i, &c->s) != VSR_OK)
        return VSR_DECLINED;
    const ref_t *ref = &r->refs[c->s.ref];
    /* the ledger: exchanges made, plus one for each call in flight (its
     * retries are counted when it ends) */
    uint64_t spent = r->attempts;
    for (const gcall_t *l = r->live; l; l = l->next_live)
        spent++;
    if (spent >= r->max_calls) {
        vsr__graph_fail(r, 503, "server_error", "looper_budget_exhausted",
                        "the algorithm's call budget is exhausted (%llu model calls, retries included)",
                        (unsigned long long)r->max_calls);
        return VSR_OK;
    }
    uint64_t now = now_ms(r);
    if (now >= r->o.deadline_ms) {
        vsr__graph_fail(r, 504, "server_error", "looper_deadline", "the algorithm's deadline passed before "
                        "call %u", r->iterations + 1);
        return VSR_OK;
    }
    if (c->s.final_hop && r->o.stream) {
        /* the adapter sends it, streamed: the run ends here */
        vsr_slice_t body = vsr__graph_body(r, &c->s, 1);
        if (over_bytes(r, body.len))
            return VSR_OK;
        r->sent_bytes += body.len;
        r->iterations++;
        note_used(r, ref->name);
        r->out.final_model = ref->model;
        r->out.final_lora = ref->lora;
        r->out.final_body = body;
        r->out.model = ref->name;
        finish(r);
        return VSR_OK;
    }
    uint64_t hop = c->s.timeout_ms ? c->s.timeout_ms : r->hop_timeout_ms;
    uint64_t deadline = hop && now + hop < r->o.deadline_ms ? now + hop : r->o.deadline_ms;
    vsr_buf_init(&c->body, 0);
    vsr__graph_body_into(r, &c->s, 0, &c->body);
    if (over_bytes(r, c->body.len)) {
        vsr_buf_free(&c->body);
        return VSR_OK;
    }
    c->sent = c->body.len;
    r->sent_bytes += c->body.len;
    c->iteration = ++r->iterations;
    note_used(r, ref->name);
    vsr_graph_call_t gc = {
        .model = ref->model,
        .body = vsr_buf_slice(&c->body),
        .iteration = c->iteration,
        .max_response_bytes = r->max_response_bytes,
    };
    c->t0 = now;
    c->inflight = 1;
    f->inflight++;
    f->calls[i] = c;
    c->next_live = r->live;
    if (r->live)
        r->live->prev_live = c;
    r->live = c;
    void *h = r->o.port->call(r->o.port->ud, &gc, deadline, call_done, c);
    if (c->inflight)
        c->handle = h;
    return VSR_OK;
}

/* Starts what may start, and ends the node when it is over. */
static void parallel_pump(vsr_graph_run_t *r, frame_t *f)
{
    const node_t *n = f->node;
    size_t cap = n->max_concurrency ? n->max_concurrency : f->count;
    while (!r->finished && f->next < f->count && f->inflight < cap && !(n->first_k && f->ok >= n->first_k)) {
        size_t i = f->next++;
        if (call_start(r, f, i) == VSR_DECLINED)
            f->finished++;
    }
    /* finished, or a call that ended inside the port's call (a nested pump) already ended the node */
    if (r->finished || f->ended)
        return;
    int enough = n->first_k && f->ok >= n->first_k;
    if (!enough && f->finished < f->count)
        return;
    for (size_t i = 0; i < f->count; i++) /* first_k: the rest are not needed */
        if (f->calls[i] && f->calls[i]->inflight) {
            gcall_t *c = f->calls[i];
            live_remove(r, c);
            if (c->handle && r->o.port->cancel)
                r->o.port->cancel(r->o.port->ud, c->handle);
            c->inflight = 0;
            vsr_buf_free(&c->body);
            f->calls[i] = NULL;
        }
    int ok = f->ok >= n->min_success && (f->ok > 0 || f->count == 0 || n->min_success == 0);
    f->ended = 1;
    node_done(r, f, ok || n->soft);
}

/* ---- nodes ---- */

static void node_start(vsr_graph_run_t *r, const node_t *n, frame_t *parent)
{
    if (r->finished)
        return;
    frame_t *f = vsr_pool_alloc(r->pool, sizeof(*f));
    memset(f, 0, sizeof(*f));
    f->node = n;
    f->parent = parent;
    switch (n->kind) {
    case N_SEQ:
        if (n->n_kids == 0)
            node_done(r, f, 1);
        else
            node_start(r, n->kids[0], f);
        return;
    case N_CALL:
    case N_PARALLEL:
        f->epoch = ++r->epoch;
        r->latest = n;
        f->count = n->kind == N_CALL ? 1 : n->count(r, n);
        f->calls = vsr_pool_alloc(r->pool, sizeof(gcall_t *) * (f->count ? f->count : 1));
        memset(f->calls, 0, sizeof(gcall_t *) * (f->count ? f->count : 1));
        parallel_pump(r, f);
        return;
    case N_LOOP:
        if (n->max_rounds == 0 || (n->until && n->until(r, n, 0)))
            node_done(r, f, 1);
        else
            node_start(r, n->kids[0], f);
        return;
    case N_TRANSFORM:
        n->apply(r, n);
        node_done(r, f, 1);
        return;
    case N_BRANCH: {
        const node_t *k = n->pred(r, n) ? n->kids[0] : (n->n_kids > 1 ? n->kids[1] : NULL);
        if (k)
            node_start(r, k, f);
        else
            node_done(r, f, 1);
        return;
    }
    case N_RESPOND:
        n->respond(r, n);
        if (!r->finished)
            vsr__graph_fail(r, 500, "server_error", "looper_no_answer", "the algorithm produced no answer");
        return;
    }
}

static void node_done(vsr_graph_run_t *r, frame_t *f, int ok)
{
    if (r->finished)
        return;
    if (!ok) {
        const node_t *n = f->node;
        vsr__graph_fail(r, 502, "server_error", "looper_quorum",
                        "%s: %zu of %zu model calls succeeded, %zu needed", n->name ? n->name : "call", f->ok,
                        f->count, n->min_success ? n->min_success : (size_t)1);
        return;
    }
    frame_t *p = f->parent;
    if (p == NULL) { /* the root ended without an answer */
        vsr__graph_fail(r, 500, "server_error", "looper_no_answer", "the algorithm produced no answer");
        return;
    }
    const node_t *pn = p->node;
    switch (pn->kind) {
    case N_SEQ:
        if (++p->idx < pn->n_kids)
            node_start(r, pn->kids[p->idx], p);
        else
            node_done(r, p, 1);
        return;
    case N_LOOP:
        if (++p->round >= pn->max_rounds || (pn->until && pn->until(r, pn, p->round)))
            node_done(r, p, 1);
        else
            node_start(r, pn->kids[0], p);
        return;
    case N_BRANCH:
        node_done(r, p, 1);
        return;
    default:
        VSR_BUG_ON(1);
    }
}

/* ---- the run ---- */

int vsr_graph_start(const vsr_graph_opts_t *o, vsr_graph_run_t **run, const vsr_graph_outcome_t **out,
                    const char **why)
{
    vsr_graph_run_t *r = vsr_pool_alloc(o->pool, sizeof(*r));
    memset(r, 0, sizeof(*r));
    r->o = *o;
    r->pool = o->pool;
    r->algo = &o->decision->algo;
    r->t0_ms = now_ms(r);
    vsr_buf_init(&r->used, 0);
    *run = r;
    *out = NULL;
    if (vsr_json_parse(&r->json, o->body, o->len, NULL) != VSR_OK || vsr_json_type(&r->json, 0) != VSR_JSON_OBJECT ||
        vsr_chat_view_build(&r->json, VSR_API_CHAT, r->pool, &r->chat, why) != VSR_OK) {
        if (why && *why == NULL)
            *why = "the request body is not a chat completion request";
        vsr_json_free(&r->json);
        vsr_buf_free(&r->used);
        return VSR_ERR_INVALID;
    }
    vsr_pool_on_clear(r->pool, (void (*)(void *))vsr_json_free, &r->json);
    /* the candidates: the decision's modelRefs */
    const vsr_decision_conf_t *d = o->decision;
    r->refs = vsr_pool_alloc(r->pool, sizeof(ref_t) * (d->n_model_refs + 1));
    for (size_t i = 0; i < d->n_model_refs; i++) {
        const vsr_model_ref_conf_t *mr = &d->model_refs[i];
        const vsr_model_conf_t *m = vsr_config_find_model(o->cfg, vsr_slice_cstr(mr->model));
        if (m == NULL)
            continue;
        ref_t *ref = &r->refs[r->n_refs++];
        ref->model = m;
        ref->lora = mr->lora_name;
        ref->name = mr->lora_name ? mr->lora_name : m->name;
        ref->upstream_id = mr->lora_name ? mr->lora_name : m->provider_model_id;
        ref->weight = mr->has_weight ? mr->weight : 1.0;
    }
    const vsr_looper_integration_conf_t *li = &o->cfg->looper;
    r->hop_timeout_ms = li->timeout_ms;
    r->max_response_bytes = li->max_response_bytes ? li->max_response_bytes : (uint64_t)32 << 20;
    if (o->implied)
        r->implied = *o->implied;
    else
        vsr_graph_implied_budget(o->cfg, d, &r->implied);
    r->max_calls = r->algo->budget.max_calls ? r->algo->budget.max_calls
                   : r->implied.calls        ? r->implied.calls
                                             : VSR_GRAPH_MAX_CALLS;
    r->max_bytes = r->algo->budget.max_upstream_bytes ? r->algo->budget.max_upstream_bytes
                                                      : VSR_GRAPH_DEFAULT_UPSTREAM_BYTES;
    if (r->algo->budget.deadline_ms && r->t0_ms + r->algo->budget.deadline_ms < r->o.deadline_ms)
        r->o.deadline_ms = r->t0_ms + r->algo->budget.deadline_ms;
    if (vsr__graph_template(r, why) != VSR_OK) {
        vsr_buf_free(&r->used);
        return VSR_ERR_INVALID;
    }
    r->depth++;
    /* known in advance: every hop sends about the request, so the hops the
     * algorithm may make (no more than its call budget) times its size */
    uint64_t hops = r->implied.hops < r->max_calls ? r->implied.hops : r->max_calls;
    if (hops && (uint64_t)o->len > r->max_bytes / hops)
        vsr__graph_fail(r, 413, "invalid_request_error", "looper_request_too_large",
                        "the request's %zu bytes, sent on each of the algorithm's up to %llu model calls, would "
                        "pass its upstream byte budget of %llu bytes", o->len, (unsigned long long)hops,
                        (unsigned long long)r->max_bytes);
    else
        node_start(r, r->root, NULL);
    r->depth--;
    if (r->finished) {
        r->reported = 1;
        *out = &r->out;
        return VSR_OK;
    }
    r->started = 1;
    return VSR_AGAIN;
}

void vsr_graph_cancel(vsr_graph_run_t *r)
{
    if (r == NULL || r->cancelled)
        return;
    r->cancelled = 1;
    cancel_live(r);
    if (!r->finished) {
        r->finished = 1;
        vsr_buf_free(&r->used);
    }
}
