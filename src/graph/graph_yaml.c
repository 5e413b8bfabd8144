/*
 * graph_yaml.c — a request graph written in YAML (algorithm type graph,
 * config.h: vsr_graph_conf_t) built into the executor's nodes.
 *
 * The conversation the calls send starts as the request's messages and is
 * changed by transform nodes (a system prompt, the latest user message
 * replaced, a user message appended); every later call sends it as it is
 * then.  "The latest results" are those of the call or parallel node that
 * started last: transform's {responses}, respond's aggregation and the
 * predicates read them.
 *
 *   call      tries its models in order until one answers (fallback inside
 *             the hop); with stream: true it is the final hop when the
 *             client streams
 *   parallel  one call per slot, slot i to models[i mod n]
 *   loop      its body until the predicate holds or max_rounds
 *   branch    then / else by the predicate
 *   transform system_prompt, prompt (replaces the latest user message),
 *             append (a new user message); {question}, {responses}
 *   respond   last | first | longest | vote | concat | choices
 *   subgraph  the named node, built in place
 */
#include <math.h>
#include <string.h>
#include <time.h>

#include "graph/graph-int.h"

#define YAML_MAX_DEPTH 16

typedef struct {
    vsr_slice_t *msgs;             /* the conversation, one JSON message object each */
    size_t n_msgs;
    int last_user;                 /* index in msgs, -1 when none */
    int system0;                   /* msgs[0] is a system message */
} conv_t;

typedef struct {
    conv_t conv;
} yaml_t;

/* A node's own state: its conf and its candidates. */
typedef struct {
    const vsr_gnode_conf_t *c;
    size_t *refs;
    size_t n_refs;
    size_t tries;                  /* call: candidates tried in this execution */
    const node_t *call;            /* call: the node making the calls (inside its fallback loop) */
} ystate_t;

/* ---- the conversation ---- */

static vsr_slice_t conv_json(vsr_graph_run_t *r)
{
    yaml_t *t = r->t;
    vsr_buf_t b;
    vsr_buf_init(&b, 0);
    vsr_buf_append_cstr(&b, "[");
    for (size_t i = 0; i < t->conv.n_msgs; i++) {
        if (i)
            vsr_buf_append_cstr(&b, ",");
        vsr_buf_append_slice(&b, t->conv.msgs[i]);
    }
    vsr_buf_append_cstr(&b, "]");
    vsr_slice_t s = vsr_pool_dup_slice(r->pool, vsr_buf_slice(&b));
    vsr_buf_free(&b);
    return s;
}

static vsr_slice_t message(vsr_graph_run_t *r, const char *role, vsr_slice_t text)
{
    vsr_buf_t b;
    vsr_buf_init(&b, 0);
    vsr_buf_printf(&b, "{\"role\":\"%s\",\"content\":", role);
    vsr_buf_append_json_string(&b, text);
    vsr_buf_append_cstr(&b, "}");
    vsr_slice_t s = vsr_pool_dup_slice(r->pool, vsr_buf_slice(&b));
    vsr_buf_free(&b);
    return s;
}

static void conv_insert(vsr_graph_run_t *r, size_t at, vsr_slice_t m)
{
    yaml_t *t = r->t;
    vsr_slice_t *v = vsr_pool_alloc(r->pool, sizeof(vsr_slice_t) * (t->conv.n_msgs + 1));
    memcpy(v, t->conv.msgs, sizeof(vsr_slice_t) * at);
    v[at] = m;
    memcpy(v + at + 1, t->conv.msgs + at, sizeof(vsr_slice_t) * (t->conv.n_msgs - at));
    t->conv.msgs = v;
    t->conv.n_msgs++;
    if (t->conv.last_user >= (int)at)
        t->conv.last_user++;
}

/* The latest results' successful answers, in slot order (those of the
 * call or parallel node that started last). */
static size_t latest(vsr_graph_run_t *r, const result_t ***out)
{
    return vsr__graph_ok_results(r, NULL, r->epoch, out);
}

/* text with {question} and {responses} filled in */
static vsr_slice_t fill(vsr_graph_run_t *r, const char *tmpl)
{
    const result_t **res;
    size_t k = latest(r, &res);
    vsr_buf_t b;
    vsr_buf_init(&b, 0);
    for (const char *p = tmpl; *p;) {
        if (!strncmp(p, "{question}", 10)) {
            vsr_buf_append_slice(&b, vsr__graph_question(r));
            p += 10;
        } else if (!strncmp(p, "{responses}", 11)) {
            for (size_t i = 0; i < k; i++) {
                vsr_buf_printf(&b, "%sResponse %zu (%s):\n", i ? "\n\n" : "", i + 1, r->refs[res[i]->ref].name);
                vsr_buf_append_slice(&b, res[i]->c.content);
            }
            p += 11;
        } else {
            vsr_buf_append(&b, p, 1);
            p++;
        }
    }
    vsr_slice_t s = vsr_pool_dup_slice(r->pool, vsr_buf_slice(&b));
    vsr_buf_free(&b);
    return s;
}

static void y_transform(vsr_graph_run_t *r, const node_t *n)
{
    const ystate_t *st = n->arg;
    yaml_t *t = r->t;
    const vsr_gnode_conf_t *c = st->c;
    if (c->system_prompt) {
        vsr_slice_t m = message(r, "system", fill(r, c->system_prompt));
        if (t->conv.system0) {
            t->conv.msgs[0] = m;
        } else {
            conv_insert(r, 0, m);
            t->conv.system0 = 1;
        }
    }
    if (c->prompt) {
        vsr_slice_t m = message(r, "user", fill(r, c->prompt));
        if (t->conv.last_user >= 0)
            t->conv.msgs[t->conv.last_user] = m;
        else {
            conv_insert(r, t->conv.n_msgs, m);
            t->conv.last_user = (int)t->conv.n_msgs - 1;
        }
    }
    if (c->append) {
        conv_insert(r, t->conv.n_msgs, message(r, "user", fill(r, c->append)));
        t->conv.last_user = (int)t->conv.n_msgs - 1;
    }
}

/* ---- calls ---- */

static void knobs(const vsr_gnode_conf_t *c, slot_t *s)
{
    s->has_temperature = c->has_temperature;
    s->temperature = c->temperature;
    s->max_completion_tokens = c->max_completion_tokens;
    s->timeout_ms = c->timeout_ms;
    s->logprobs = c->logprobs;
    s->top_logprobs = c->top_logprobs;
    s->strip_tools = c->strip_tools;
}

static size_t y_parallel_count(vsr_graph_run_t *r, const node_t *n)
{
    VSR_UNUSED(r);
    const ystate_t *st = n->arg;
    return st->c->count ? st->c->count : st->n_refs;
}

static int y_parallel_prepare(vsr_graph_run_t *r, const node_t *n, size_t slot, slot_t *s)
{
    const ystate_t *st = n->arg;
    s->ref = st->refs[slot % st->n_refs];
    s->messages = conv_json(r);
    knobs(st->c, s);
    return VSR_OK;
}

static int y_call_prepare(vsr_graph_run_t *r, const node_t *n, size_t slot, slot_t *s)
{
    VSR_UNUSED(slot);
    ystate_t *st = n->arg;
    if (st->tries >= st->n_refs)
        return VSR_DECLINED;
    s->ref = st->refs[st->tries++];
    s->messages = conv_json(r);
    knobs(st->c, s);
    s->final_hop = st->c->stream;
    return VSR_OK;
}

static int y_call_until(vsr_graph_run_t *r, const node_t *n, size_t rounds)
{
    ystate_t *st = n->arg;
    if (rounds == 0)
        return 0;
    for (size_t i = 0; i < r->n_results; i++)
        if (r->results[i].node == st->call && r->results[i].epoch == r->epoch && r->results[i].status == VSR_OK)
            return 1; /* answered: no other candidate */
    return st->tries >= st->n_refs;
}

static void y_call_reset(vsr_graph_run_t *r, const node_t *n)
{
    VSR_UNUSED(r);
    ((ystate_t *)n->arg)->tries = 0;
}

/* ---- predicates ---- */

static int pred(vsr_graph_run_t *r, const vsr_gpred_conf_t *p, size_t rounds)
{
    const result_t **res;
    size_t k = latest(r, &res);
    int v = 0;
    switch (p->kind) {
    case VSR_GPRED_NONE:
        return 0;
    case VSR_GPRED_SUCCEEDED:
        v = k > 0;
        break;
    case VSR_GPRED_CONFIDENCE_GTE: {
        double score;
        v = k > 0 && vsr__algo_confidence(&res[k - 1]->c, VSR_ALGO_CONF_AVG_LOGPROB, 0.5, 0.5, 0, &score) == VSR_OK &&
            score >= p->value;
        break;
    }
    case VSR_GPRED_AGREE: {
        v = k > 0;
        for (size_t i = 1; i < k && v; i++)
            v = vsr_slice_eq(vsr_slice_trim(res[i]->c.content), vsr_slice_trim(res[0]->c.content));
        break;
    }
    case VSR_GPRED_SIGNAL:
        v = r->o.signal && r->o.signal(r->o.done_ud, p->signal_type, p->signal_name);
        break;
    case VSR_GPRED_ROUNDS_GTE:
        v = (double)rounds >= p->value;
        break;
    }
    return p->negate ? !v : v;
}

static int y_until(vsr_graph_run_t *r, const node_t *n, size_t rounds)
{
    /* never before the first round: the latest results are another node's */
    return rounds > 0 && pred(r, &((ystate_t *)n->arg)->c->until, rounds);
}

static int y_if(vsr_graph_run_t *r, const node_t *n)
{
    return pred(r, &((ystate_t *)n->arg)->c->until, 0);
}

/* ---- respond ---- */

static void answer_text(vsr_graph_run_t *r, const char *model, vsr_slice_t content)
{
    vsr_buf_t b;
    vsr_buf_init(&b, 0);
    vsr_buf_printf(&b, "{\"id\":\"chatcmpl-graph-%llu\",\"object\":\"chat.completion\",\"created\":%llu,\"model\":",
                   (unsigned long long)(vsr_now_us() * 1000), (unsigned long long)time(NULL));
    vsr_buf_append_json_string(&b, vsr_slice_cstr(model));
    vsr_buf_append_cstr(&b, ",\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":");
    vsr_buf_append_json_string(&b, content);
    vsr_buf_append_cstr(&b, "},\"finish_reason\":\"stop\"}]}");
    result_t tmp;
    memset(&tmp, 0, sizeof(tmp));
    tmp.body = vsr_pool_dup_slice(r->pool, vsr_buf_slice(&b));
    vsr_buf_free(&b);
    tmp.ref = 0;
    vsr__graph_answer_completion(r, &tmp, vsr_slice(NULL, 0));
    r->out.model = model;
}

static void y_respond(vsr_graph_run_t *r, const node_t *n)
{
    const ystate_t *st = n->arg;
    const char *agg = st->c->aggregate ? st->c->aggregate : "last";
    const result_t **res;
    size_t k = latest(r, &res);
    if (k == 0) {
        vsr__graph_fail(r, 502, "server_error", "looper_all_failed", "the graph's latest calls all failed");
        return;
    }
    if (!strcmp(agg, "first")) {
        vsr__graph_answer_completion(r, res[0], vsr_slice(NULL, 0));
    } else if (!strcmp(agg, "longest")) {
        size_t best = 0;
        for (size_t i = 1; i < k; i++)
            if (res[i]->c.content.len > res[best]->c.content.len)
                best = i;
        vsr__graph_answer_completion(r, res[best], vsr_slice(NULL, 0));
    } else if (!strcmp(agg, "vote")) { /* the most frequent answer (trimmed); ties: the earliest slot */
        size_t best = 0, best_n = 0;
        for (size_t i = 0; i < k; i++) {
            size_t c = 0;
            for (size_t j = 0; j < k; j++)
                c += vsr_slice_eq(vsr_slice_trim(res[i]->c.content), vsr_slice_trim(res[j]->c.content));
            if (c > best_n) {
                best = i;
                best_n = c;
            }
        }
        vsr__graph_answer_completion(r, res[best], vsr_slice(NULL, 0));
    } else if (!strcmp(agg, "concat")) {
        vsr_buf_t b, names;
        vsr_buf_init(&b, 0);
        vsr_buf_init(&names, 0);
        for (size_t i = 0; i < k; i++) {
            if (i)
                vsr_buf_append_cstr(&b, "\n\n");
            vsr_buf_append_slice(&b, res[i]->c.content);
            vsr_buf_printf(&names, "%s%s", i ? "," : "", r->refs[res[i]->ref].name);
        }
        vsr_slice_t text = vsr_pool_dup_slice(r->pool, vsr_buf_slice(&b));
        const char *model = vsr_pool_strndup(r->pool, names.data, names.len);
        vsr_buf_free(&b);
        vsr_buf_free(&names);
        answer_text(r, model, text);
    } else if (!strcmp(agg, "choices")) {
        vsr_slice_t *models = vsr_pool_alloc(r->pool, sizeof(vsr_slice_t) * k);
        vsr_slice_t *contents = vsr_pool_alloc(r->pool, sizeof(vsr_slice_t) * k);
        vsr_buf_t names, b;
        vsr_buf_init(&names, 0);
        vsr_buf_init(&b, 0);
        for (size_t i = 0; i < k; i++) {
            models[i] = vsr_slice_cstr(r->refs[res[i]->ref].name);
            contents[i] = res[i]->c.content;
            vsr_buf_printf(&names, "%s%s", i ? "," : "", r->refs[res[i]->ref].name);
        }
        vsr__algo_ratings_response(&b, vsr_now_us() * 1000, (uint64_t)time(NULL), models, contents, k, r->pt, r->ct);
        const char *joined = vsr_pool_strndup(r->pool, names.data, names.len);
        vsr_buf_free(&names);
        vsr__graph_answer_chat(r, joined, &b);
    } else { /* last */
        vsr__graph_answer_completion(r, res[k - 1], vsr_slice(NULL, 0));
    }
}

/* ---- building ---- */

static node_t *build(vsr_graph_run_t *r, const vsr_gnode_conf_t *c, unsigned depth, const char **why);

static ystate_t *state(vsr_graph_run_t *r, const vsr_gnode_conf_t *c, const char **why)
{
    ystate_t *st = vsr_pool_alloc(r->pool, sizeof(*st));
    memset(st, 0, sizeof(*st));
    st->c = c;
    size_t n = c->models.n ? c->models.n : r->o.decision->n_model_refs;
    st->refs = vsr_pool_alloc(r->pool, sizeof(size_t) * (n + 1));
    if (c->models.n) {
        for (size_t i = 0; i < c->models.n; i++)
            if (vsr__graph_ref_index(r, c->models.items[i], &st->refs[st->n_refs]) == VSR_OK)
                st->n_refs++;
    } else {
        for (size_t i = 0; i < n && i < r->n_refs; i++)
            st->refs[st->n_refs++] = i;
    }
    if ((c->kind == VSR_GNODE_CALL || c->kind == VSR_GNODE_PARALLEL) && st->n_refs == 0) {
        *why = "a graph node names no model that can be called";
        return NULL;
    }
    return st;
}

static const char *kind_name(vsr_gnode_kind_t k)
{
    static const char *const names[] = {"", "seq", "call", "parallel", "loop", "branch", "transform", "respond",
                                        "subgraph"};
    return (size_t)k < VSR_ARRAY_LEN(names) ? names[k] : "node";
}

static node_t *build(vsr_graph_run_t *r, const vsr_gnode_conf_t *c, unsigned depth, const char **why)
{
    if (depth > YAML_MAX_DEPTH) {
        *why = "the graph nests too deeply";
        return NULL;
    }
    ystate_t *st = state(r, c, why);
    if (st == NULL)
        return NULL;
    const char *name = c->name ? c->name : kind_name(c->kind);
    node_t *n = NULL;
    switch (c->kind) {
    case VSR_GNODE_SEQ:
        n = vsr__graph_node(r, N_SEQ, name);
        n->kids = vsr_pool_alloc(r->pool, sizeof(node_t *) * (c->n_kids + 1));
        for (size_t i = 0; i < c->n_kids; i++)
            if ((n->kids[n->n_kids++] = build(r, &c->kids[i], depth + 1, why)) == NULL)
                return NULL;
        break;
    case VSR_GNODE_CALL: { /* seq[reset, loop(until answered) { call }] */
        node_t *call = vsr__graph_node(r, N_CALL, name);
        call->prepare = y_call_prepare;
        call->arg = st;
        call->soft = 1; /* the next candidate; the loop below ends the fallback */
        st->call = call;
        node_t *loop = vsr__graph_node(r, N_LOOP, name);
        loop->max_rounds = st->n_refs;
        loop->until = y_call_until;
        loop->arg = st;
        vsr__graph_kids(r, loop, 1, call);
        node_t *reset = vsr__graph_node(r, N_TRANSFORM, name);
        reset->apply = y_call_reset;
        reset->arg = st;
        n = vsr__graph_node(r, N_SEQ, name);
        vsr__graph_kids(r, n, 2, reset, loop);
        break;
    }
    case VSR_GNODE_PARALLEL:
        n = vsr__graph_node(r, N_PARALLEL, name);
        n->count = y_parallel_count;
        n->prepare = y_parallel_prepare;
        n->max_concurrency = c->max_concurrency;
        n->first_k = c->first_k;
        n->min_success = c->min_success;
        n->fail_fast = c->on_error_fail;
        n->arg = st;
        break;
    case VSR_GNODE_LOOP:
        n = vsr__graph_node(r, N_LOOP, name);
        n->max_rounds = c->max_rounds;
        n->until = y_until;
        n->arg = st;
        if (c->n_kids < 1) {
            *why = "a loop has no body";
            return NULL;
        }
        n->kids = vsr_pool_alloc(r->pool, sizeof(node_t *));
        if ((n->kids[0] = build(r, &c->kids[0], depth + 1, why)) == NULL)
            return NULL;
        n->n_kids = 1;
        break;
    case VSR_GNODE_BRANCH:
        n = vsr__graph_node(r, N_BRANCH, name);
        n->pred = y_if;
        n->arg = st;
        n->kids = vsr_pool_alloc(r->pool, sizeof(node_t *) * 2);
        for (size_t i = 0; i < c->n_kids && i < 2; i++)
            if ((n->kids[n->n_kids++] = build(r, &c->kids[i], depth + 1, why)) == NULL)
                return NULL;
        if (n->n_kids == 0) {
            *why = "a branch has no then";
            return NULL;
        }
        break;
    case VSR_GNODE_TRANSFORM:
        n = vsr__graph_node(r, N_TRANSFORM, name);
        n->apply = y_transform;
        n->arg = st;
        break;
    case VSR_GNODE_RESPOND:
        n = vsr__graph_node(r, N_RESPOND, name);
        n->respond = y_respond;
        n->arg = st;
        break;
    case VSR_GNODE_SUBGRAPH:
        if (c->resolved == NULL) {
            *why = "a subgraph is not defined";
            return NULL;
        }
        return build(r, c->resolved, depth + 1, why);
    }
    if (n == NULL)
        *why = "unknown graph node";
    return n;
}

int vsr__graph_tpl_graph(vsr_graph_run_t *r, const char **why)
{
    yaml_t *t = vsr_pool_alloc(r->pool, sizeof(*t));
    memset(t, 0, sizeof(*t));
    t->conv.msgs = vsr_pool_alloc(r->pool, sizeof(vsr_slice_t) * (r->chat.n_messages + 1));
    t->conv.last_user = r->chat.last_user;
    t->conv.system0 = r->chat.n_messages > 0 && r->chat.messages[0].role == VSR_ROLE_SYSTEM;
    for (size_t i = 0; i < r->chat.n_messages; i++)
        t->conv.msgs[t->conv.n_msgs++] = vsr_json_raw(&r->json, r->chat.messages[i].tok);
    r->t = t;
    node_t *root = build(r, &r->algo->u.graph.root, 0, why);
    if (root == NULL)
        return VSR_ERR_INVALID;
    /* a graph that ends without respond answers with its latest results */
    node_t *resp = vsr__graph_node(r, N_RESPOND, "respond");
    ystate_t *st = vsr_pool_alloc(r->pool, sizeof(*st));
    memset(st, 0, sizeof(*st));
    static const vsr_gnode_conf_t last = {.kind = VSR_GNODE_RESPOND};
    st->c = &last;
    resp->respond = y_respond;
    resp->arg = st;
    node_t *seq = vsr__graph_node(r, N_SEQ, "graph");
    vsr__graph_kids(r, seq, 2, root, resp);
    r->root = seq;
    return VSR_OK;
}
