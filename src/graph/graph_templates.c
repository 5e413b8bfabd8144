/*
 * graph_templates.c — the built-in templates `looper.<algorithm>`: the five
 * Looper algorithms of ref §3 as graphs of the executor's nodes.
 *
 *   looper.confidence  loop over the escalation order { call (logprobs);
 *                      [self_verify: call] } until one is confident; respond
 *   looper.ratings     parallel (every modelRef, tools stripped); respond
 *                      with one choice per answer
 *   looper.remom       loop over the breadth schedule { parallel (the
 *                      round's distribution); next round's prompt };
 *                      call (synthesis, the final hop); respond
 *   looper.fusion      parallel (panel); quorum; [call (judge analysis)];
 *                      call (judge synthesis, the final hop); respond
 *   looper.workflows   [call (planner)]; loop over waves { parallel (the
 *                      steps whose inputs are ready) }; call (final, the
 *                      final hop); respond
 *
 * The final hop of remom, fusion and workflows streams when the client
 * does: the adapter sends it as the request's routed call.
 */
#include <math.h>
#include <stdlib.h>
#include <time.h>
#include <string.h>

#include "graph/graph-int.h"

int vsr_graph_eligible(const vsr_decision_conf_t *d)
{
    switch (d->algo.kind) {
    case VSR_ALGO_CONFIDENCE:
    case VSR_ALGO_RATINGS:
        return d->n_model_refs > 1;
    case VSR_ALGO_REMOM:
    case VSR_ALGO_FUSION:
    case VSR_ALGO_WORKFLOWS:
        return d->n_model_refs >= 1;
    case VSR_ALGO_GRAPH: /* the config saw to it that every call has models to call */
        return 1;
    default:
        return 0;
    }
}

/* The index of the candidate named `name` (a modelRef's model or LoRA, or
 * another provider model, added as a candidate). */
int vsr__graph_ref_index(vsr_graph_run_t *r, const char *name, size_t *out)
{
    if (name == NULL)
        return VSR_ERR_NOT_FOUND;
    for (size_t i = 0; i < r->n_refs; i++)
        if (!strcmp(r->refs[i].name, name) || !strcmp(r->refs[i].model->name, name)) {
            *out = i;
            return VSR_OK;
        }
    const vsr_model_conf_t *m = vsr_config_find_model(r->o.cfg, vsr_slice_cstr(name));
    if (m == NULL)
        return VSR_ERR_NOT_FOUND;
    ref_t *v = vsr_pool_alloc(r->pool, sizeof(ref_t) * (r->n_refs + 1));
    memcpy(v, r->refs, sizeof(ref_t) * r->n_refs);
    r->refs = v;
    ref_t *ref = &r->refs[r->n_refs];
    memset(ref, 0, sizeof(*ref));
    ref->model = m;
    ref->name = m->name;
    ref->upstream_id = m->provider_model_id;
    ref->weight = 1.0;
    *out = r->n_refs++;
    return VSR_OK;
}

static const vsr_model_card_conf_t *card_of(const vsr_graph_run_t *r, const ref_t *ref)
{
    for (size_t i = 0; i < r->o.cfg->n_model_cards; i++) {
        const vsr_model_card_conf_t *c = &r->o.cfg->model_cards[i];
        if (c->name && (!strcmp(c->name, ref->model->name) || (ref->lora && !strcmp(c->name, ref->lora))))
            return c;
    }
    return NULL;
}

static vsr_slice_t s_of(const char *s)
{
    return s ? vsr_slice_cstr(s) : vsr_slice(NULL, 0);
}

static const result_t *last_result_of(vsr_graph_run_t *r, const node_t *n)
{
    for (size_t i = r->n_results; i-- > 0;)
        if (r->results[i].node == n)
            return &r->results[i];
    return NULL;
}

/* ======================================================================== */
/* looper.confidence (ref §3.3)                                              */

typedef struct {
    const vsr_algo_confidence_conf_t *c;
    size_t *order;
    size_t n, next;
    int method;
    double threshold;
    const result_t *accepted, *last_ok, *pending; /* pending: the answer self_verify rates */
    node_t *answer, *verify;
} conf_t;

static int conf_prepare(vsr_graph_run_t *r, const node_t *n, size_t slot, slot_t *s)
{
    VSR_UNUSED(n);
    VSR_UNUSED(slot);
    conf_t *t = r->t;
    if (t->next >= t->n)
        return VSR_DECLINED;
    s->ref = t->order[t->next++];
    if (t->method <= VSR_ALGO_CONF_HYBRID) {
        s->logprobs = 1;
        s->top_logprobs = vsr__algo_confidence_needs_top2(t->method) ? 2 : 0;
    }
    return VSR_OK;
}

static void conf_on_answer(vsr_graph_run_t *r, const node_t *n, result_t *res)
{
    VSR_UNUSED(n);
    conf_t *t = r->t;
    t->pending = NULL;
    if (res->status != VSR_OK)
        return; /* on_error: skip goes on (fail_fast ended the run otherwise) */
    t->last_ok = res;
    if (t->method == VSR_ALGO_CONF_SELF_VERIFY) {
        t->pending = res;
        return;
    }
    double score;
    int rc = t->method == VSR_ALGO_CONF_AUTOMIX_ENTAILMENT
                 ? VSR_ERR_INVALID /* no external verifier is called: an evaluation error */
                 : vsr__algo_confidence(&res->c, t->method, t->c->logprob_weight, t->c->margin_weight,
                                        t->c->token_filter != NULL, &score);
    if (rc != VSR_OK) {
        if (t->c->on_error_fail)
            vsr__graph_fail(r, 502, "server_error", "looper_confidence_unavailable",
                            "the confidence of model \"%.200s\" could not be evaluated (%s) and on_error is fail",
                            r->refs[res->ref].name,
                            res->c.has_logprobs ? "no usable logprobs for this method" : "the answer has no logprobs");
        return;
    }
    res->score = score;
    res->has_score = 1;
    if (score >= t->threshold)
        t->accepted = res;
}

static int conf_needs_verify(vsr_graph_run_t *r, const node_t *n)
{
    VSR_UNUSED(n);
    return ((conf_t *)r->t)->pending != NULL;
}

#define VERIFY_PROMPT                                                                                          \
    "Rate how confident you are that your previous answer is correct and complete. Reply with only a number " \
    "between 0 and 1."

static int conf_verify_prepare(vsr_graph_run_t *r, const node_t *n, size_t slot, slot_t *s)
{
    VSR_UNUSED(n);
    VSR_UNUSED(slot);
    conf_t *t = r->t;
    s->ref = t->pending->ref;
    s->messages = vsr__graph_messages_append_user(r, t->pending->c.content, VSR_SLICE_LIT(VERIFY_PROMPT));
    s->strip_tools = 1;
    return VSR_OK;
}

static void conf_on_verify(vsr_graph_run_t *r, const node_t *n, result_t *res)
{
    VSR_UNUSED(n);
    conf_t *t = r->t;
    const result_t *ans = t->pending;
    t->pending = NULL;
    char num[32];
    size_t k = 0;
    double score = NAN;
    if (res->status == VSR_OK) { /* the first number in the reply */
        vsr_slice_t c = res->c.content;
        size_t i = 0;
        while (i < c.len && !(c.p[i] >= '0' && c.p[i] <= '9'))
            i++;
        while (i < c.len && k + 1 < sizeof(num) && ((c.p[i] >= '0' && c.p[i] <= '9') || c.p[i] == '.'))
            num[k++] = c.p[i++];
        num[k] = '\0';
        if (k)
            score = strtod(num, NULL);
        if (score > 1.0 && score <= 100.0)
            score /= 100.0; /* "85" read as a percentage */
    }
    if (isnan(score) || score < 0 || score > 1) {
        if (t->c->on_error_fail)
            vsr__graph_fail(r, 502, "server_error", "looper_confidence_unavailable",
                            "model \"%.200s\" did not rate its answer and on_error is fail", r->refs[ans->ref].name);
        return;
    }
    for (size_t i = 0; i < r->n_results; i++)
        if (&r->results[i] == ans) {
            r->results[i].score = score;
            r->results[i].has_score = 1;
        }
    if (score >= t->threshold)
        t->accepted = ans;
}

static int conf_until(vsr_graph_run_t *r, const node_t *n, size_t rounds)
{
    VSR_UNUSED(n);
    VSR_UNUSED(rounds);
    conf_t *t = r->t;
    return t->accepted != NULL || t->next >= t->n;
}

static void conf_respond(vsr_graph_run_t *r, const node_t *n)
{
    VSR_UNUSED(n);
    conf_t *t = r->t;
    const result_t *res = t->accepted ? t->accepted : t->last_ok; /* none confident: the last answer */
    if (res == NULL) {
        vsr__graph_fail(r, 502, "server_error", "looper_all_failed", "every model of the escalation failed");
        return;
    }
    vsr__graph_answer_completion(r, res, vsr_slice(NULL, 0));
}

static int tpl_confidence(vsr_graph_run_t *r, const char **why)
{
    const vsr_algo_confidence_conf_t *c = &r->algo->u.confidence;
    conf_t *t = vsr_pool_alloc(r->pool, sizeof(*t));
    memset(t, 0, sizeof(*t));
    t->c = c;
    t->method = vsr__algo_confidence_method(s_of(c->method));
    if (t->method < 0) {
        *why = "unknown confidence_method";
        return VSR_ERR_INVALID;
    }
    t->threshold = c->has_threshold && c->threshold != 0 ? c->threshold
                                                          : vsr__algo_confidence_default_threshold(c->method);
    t->n = r->n_refs;
    t->order = vsr_pool_alloc(r->pool, sizeof(size_t) * (t->n + 1));
    vsr_algo_candidate_t *cand = vsr_pool_alloc(r->pool, sizeof(*cand) * (t->n + 1));
    for (size_t i = 0; i < t->n; i++) {
        const ref_t *ref = &r->refs[i];
        const vsr_model_card_conf_t *card = card_of(r, ref);
        cand[i].param_size = card && card->has_param_size_value ? card->param_size_value : NAN;
        cand[i].prompt_per_1m = ref->model->has_prompt_per_1m ? ref->model->prompt_per_1m : NAN;
        cand[i].quality_score = card && card->has_quality_score ? card->quality_score : NAN;
    }
    int order = vsr__algo_order_parse(s_of(c->escalation_order));
    vsr__algo_escalation_order(order < 0 ? VSR_ALGO_ORDER_SIZE : order, cand, t->n, c->cost_quality_tradeoff,
                               t->order);
    r->t = t;

    node_t *answer = vsr__graph_node(r, N_CALL, "escalate");
    answer->prepare = conf_prepare;
    answer->on_result = conf_on_answer;
    answer->fail_fast = c->on_error_fail;
    node_t *verify = NULL;
    if (t->method == VSR_ALGO_CONF_SELF_VERIFY) {
        node_t *vc = vsr__graph_node(r, N_CALL, "self_verify");
        vc->prepare = conf_verify_prepare;
        vc->on_result = conf_on_verify;
        vc->fail_fast = c->on_error_fail;
        vc->soft = !c->on_error_fail;
        verify = vsr__graph_node(r, N_BRANCH, "self_verify?");
        verify->pred = conf_needs_verify;
        vsr__graph_kids(r, verify, 1, vc);
    }
    node_t *body = vsr__graph_node(r, N_SEQ, "step");
    vsr__graph_kids(r, body, 2, answer, verify);
    answer->soft = !c->on_error_fail; /* under skip, a failed model is not the end */
    node_t *loop = vsr__graph_node(r, N_LOOP, "escalation");
    loop->max_rounds = t->n;
    loop->until = conf_until;
    vsr__graph_kids(r, loop, 1, body);
    node_t *resp = vsr__graph_node(r, N_RESPOND, "respond");
    resp->respond = conf_respond;
    node_t *root = vsr__graph_node(r, N_SEQ, "looper.confidence");
    vsr__graph_kids(r, root, 2, loop, resp);
    r->root = root;
    return VSR_OK;
}

/* ======================================================================== */
/* looper.ratings (ref §3.4)                                                 */

static size_t ratings_count(vsr_graph_run_t *r, const node_t *n)
{
    VSR_UNUSED(n);
    return r->o.decision->n_model_refs <= r->n_refs ? r->o.decision->n_model_refs : r->n_refs;
}

static int ratings_prepare(vsr_graph_run_t *r, const node_t *n, size_t slot, slot_t *s)
{
    VSR_UNUSED(r);
    VSR_UNUSED(n);
    s->ref = slot;
    s->strip_tools = 1;
    return VSR_OK;
}

static void ratings_respond(vsr_graph_run_t *r, const node_t *n)
{
    const node_t *panel = n->arg;
    const result_t **res;
    size_t k = vsr__graph_ok_results(r, panel, 0, &res);
    if (k == 0) {
        vsr__graph_fail(r, 502, "server_error", "looper_all_failed", "every model of the ratings failed");
        return;
    }
    vsr_slice_t *models = vsr_pool_alloc(r->pool, sizeof(vsr_slice_t) * k);
    vsr_slice_t *contents = vsr_pool_alloc(r->pool, sizeof(vsr_slice_t) * k);
    vsr_buf_t names;
    vsr_buf_init(&names, 0);
    for (size_t i = 0; i < k; i++) {
        models[i] = vsr_slice_cstr(r->refs[res[i]->ref].name);
        contents[i] = res[i]->c.content;
        vsr_buf_printf(&names, "%s%s", i ? "," : "", r->refs[res[i]->ref].name);
    }
    uint64_t ns = vsr_now_us() * 1000;
    vsr_buf_t b;
    vsr_buf_init(&b, 0);
    vsr__algo_ratings_response(&b, ns, (uint64_t)time(NULL), models, contents, k, r->pt, r->ct);
    const char *joined = vsr_pool_strndup(r->pool, names.data, names.len);
    vsr_buf_free(&names);
    vsr__graph_answer_chat(r, joined, &b);
}

static int tpl_ratings(vsr_graph_run_t *r, const char **why)
{
    VSR_UNUSED(why);
    const vsr_algo_ratings_conf_t *c = &r->algo->u.ratings;
    node_t *panel = vsr__graph_node(r, N_PARALLEL, "ratings");
    panel->count = ratings_count;
    panel->prepare = ratings_prepare;
    panel->max_concurrency = c->max_concurrent;
    panel->fail_fast = c->on_error_fail;
    panel->soft = 1; /* all failed: the answer says so */
    node_t *resp = vsr__graph_node(r, N_RESPOND, "respond");
    resp->respond = ratings_respond;
    resp->arg = panel;
    node_t *root = vsr__graph_node(r, N_SEQ, "looper.ratings");
    vsr__graph_kids(r, root, 2, panel, resp);
    r->root = root;
    return VSR_OK;
}

/* ======================================================================== */
/* looper.remom (ref §3.5)                                                   */

typedef struct {
    const vsr_algo_remom_conf_t *c;
    uint32_t *schedule;
    size_t n_rounds, round;
    size_t *dist;                  /* this round's model per call */
    int dist_kind;
    vsr_slice_t prompt;            /* the synthesis prompt built from the previous round; empty in round 1 */
    vsr_slice_t msgs;              /* the conversation with it in place of the last user message (built once a
                                    * round, not once a call) */
    node_t *round_node, *final;
    int has_synth;
    size_t synth_ref;
} remom_t;

static size_t remom_count(vsr_graph_run_t *r, const node_t *n)
{
    VSR_UNUSED(n);
    remom_t *t = r->t;
    size_t calls = t->schedule[t->round];
    double *w = vsr_pool_alloc(r->pool, sizeof(double) * (r->n_refs + 1));
    for (size_t i = 0; i < r->n_refs; i++)
        w[i] = r->refs[i].weight;
    size_t k = r->o.decision->n_model_refs <= r->n_refs ? r->o.decision->n_model_refs : r->n_refs;
    t->dist = vsr_pool_alloc(r->pool, sizeof(size_t) * (calls + 1));
    if (vsr__algo_remom_distribute(t->dist_kind, w, k, calls, t->c->shuffle_seed, t->dist) != VSR_OK)
        return 0;
    return calls;
}

static void remom_knobs(const remom_t *t, slot_t *s)
{
    s->has_temperature = 1;
    s->temperature = t->c->temperature;
    s->max_completion_tokens = t->c->max_completion_tokens;
    s->timeout_ms = t->c->round_timeout_ms;
}

static int remom_prepare(vsr_graph_run_t *r, const node_t *n, size_t slot, slot_t *s)
{
    VSR_UNUSED(n);
    remom_t *t = r->t;
    s->ref = t->dist[slot];
    s->messages = t->msgs;
    remom_knobs(t, s);
    return VSR_OK;
}

/* The next round's prompt from this round's answers (and the next round). */
static void remom_advance(vsr_graph_run_t *r, const node_t *n)
{
    VSR_UNUSED(n);
    remom_t *t = r->t;
    /* this round's answers (the round node ran last), in slot order, so that
     * answers of equal length keep an order that does not depend on which
     * call finished first */
    const result_t **all, **res;
    size_t n_all = vsr__graph_ok_results(r, t->round_node, r->epoch, &all), k = 0;
    res = all;
    for (size_t i = 0; i < n_all; i++)
        if (all[i]->c.content.len)
            res[k++] = all[i];
    size_t *lens = vsr_pool_alloc(r->pool, sizeof(size_t) * (k + 1));
    size_t *ord = vsr_pool_alloc(r->pool, sizeof(size_t) * (k + 1));
    for (size_t i = 0; i < k; i++)
        lens[i] = res[i]->c.content.len;
    vsr__algo_remom_order(lens, k, t->c->shuffle_seed, ord);
    size_t keep = t->c->max_responses_per_round && t->c->max_responses_per_round < k ? t->c->max_responses_per_round
                                                                                       : k;
    vsr_slice_t *answers = vsr_pool_alloc(r->pool, sizeof(vsr_slice_t) * (keep + 1));
    int compact = t->c->compaction_strategy && !strcmp(t->c->compaction_strategy, "last_n_tokens");
    for (size_t i = 0; i < keep; i++) {
        const result_t *a = res[ord[i]];
        vsr_slice_t text = compact ? vsr__algo_compact_last_tokens(a->c.content, t->c->compaction_tokens)
                                   : a->c.content;
        if (t->c->include_reasoning && a->c.reasoning.len) {
            vsr_buf_t b;
            vsr_buf_init(&b, 0);
            vsr_buf_append_cstr(&b, "Reasoning:\n");
            vsr_buf_append_slice(&b, a->c.reasoning);
            vsr_buf_append_cstr(&b, "\n\nAnswer:\n");
            vsr_buf_append_slice(&b, text);
            text = vsr_pool_dup_slice(r->pool, vsr_buf_slice(&b));
            vsr_buf_free(&b);
        }
        answers[i] = text;
    }
    vsr_buf_t p;
    vsr_buf_init(&p, 0);
    vsr__algo_remom_prompt(&p, t->c->synthesis_template, vsr__graph_question(r), answers, keep);
    t->prompt = vsr_pool_dup_slice(r->pool, vsr_buf_slice(&p));
    vsr_buf_free(&p);
    t->msgs = vsr__graph_messages_replace_last_user(r, t->prompt);
    t->round++;
}

static int remom_until(vsr_graph_run_t *r, const node_t *n, size_t rounds)
{
    VSR_UNUSED(n);
    VSR_UNUSED(rounds);
    remom_t *t = r->t;
    return t->round >= t->n_rounds;
}

static int remom_final_prepare(vsr_graph_run_t *r, const node_t *n, size_t slot, slot_t *s)
{
    VSR_UNUSED(n);
    VSR_UNUSED(slot);
    remom_t *t = r->t;
    if (t->has_synth) {
        s->ref = t->synth_ref;
    } else {
        size_t one = 0;
        size_t k = r->o.decision->n_model_refs <= r->n_refs ? r->o.decision->n_model_refs : r->n_refs;
        double *w = vsr_pool_alloc(r->pool, sizeof(double) * (k + 1));
        for (size_t i = 0; i < k; i++)
            w[i] = r->refs[i].weight;
        if (vsr__algo_remom_distribute(t->dist_kind, w, k, 1, t->c->shuffle_seed, &one) != VSR_OK)
            one = 0;
        s->ref = one;
    }
    s->messages = t->msgs;
    remom_knobs(t, s);
    s->final_hop = 1;
    return VSR_OK;
}

static void remom_respond(vsr_graph_run_t *r, const node_t *n)
{
    VSR_UNUSED(n);
    remom_t *t = r->t;
    vsr_algo_answer_t *a = vsr_pool_alloc(r->pool, sizeof(*a) * (r->n_results + 1));
    const result_t **who = vsr_pool_alloc(r->pool, sizeof(*who) * (r->n_results + 1));
    size_t k = 0;
    for (size_t i = 0; i < r->n_results; i++) {
        const result_t *res = &r->results[i];
        if (res->status != VSR_OK)
            continue;
        a[k].content = res->c.content;
        a[k].round = res->node == t->final ? (uint32_t)t->n_rounds + 1 : (uint32_t)res->round + 1;
        who[k++] = res;
    }
    size_t pick;
    if (vsr__algo_remom_pick(a, k, (uint32_t)t->n_rounds + 1, &pick) != VSR_OK) {
        vsr__graph_fail(r, 502, "server_error", "looper_all_failed", "no round of the ReMoM produced an answer");
        return;
    }
    vsr_slice_t extra = vsr_slice(NULL, 0);
    if (t->c->include_intermediate_responses) {
        vsr_buf_t b;
        vsr_buf_init(&b, 0);
        vsr_buf_append_cstr(&b, "\"reasoning_mom_responses\":[");
        int first = 1;
        for (size_t i = 0; i < k; i++) {
            if (who[i]->node == t->final)
                continue;
            vsr_buf_printf(&b, "%s{\"round\":%u,\"model\":", first ? "" : ",", a[i].round);
            vsr_buf_append_json_string(&b, vsr_slice_cstr(r->refs[who[i]->ref].name));
            vsr_buf_append_cstr(&b, ",\"content\":");
            vsr_buf_append_json_string(&b, a[i].content);
            vsr_buf_append_cstr(&b, "}");
            first = 0;
        }
        vsr_buf_append_cstr(&b, "]");
        extra = vsr_pool_dup_slice(r->pool, vsr_buf_slice(&b));
        vsr_buf_free(&b);
    }
    vsr__graph_answer_completion(r, who[pick], extra);
}

static int tpl_remom(vsr_graph_run_t *r, const char **why)
{
    const vsr_algo_remom_conf_t *c = &r->algo->u.remom;
    remom_t *t = vsr_pool_alloc(r->pool, sizeof(*t));
    memset(t, 0, sizeof(*t));
    t->c = c;
    static uint32_t dflt[] = {4};
    t->schedule = c->n_breadth_schedule ? c->breadth_schedule : dflt;
    t->n_rounds = c->n_breadth_schedule ? c->n_breadth_schedule : 1;
    t->dist_kind = vsr__algo_dist_parse(s_of(c->model_distribution));
    if (t->dist_kind < 0) {
        *why = "unknown model_distribution";
        return VSR_ERR_INVALID;
    }
    if (c->synthesis_model) {
        if (vsr__graph_ref_index(r, c->synthesis_model, &t->synth_ref) != VSR_OK) {
            *why = "synthesis_model names no model";
            return VSR_ERR_INVALID;
        }
        t->has_synth = 1;
    }
    r->t = t;
    node_t *round = vsr__graph_node(r, N_PARALLEL, "round");
    round->count = remom_count;
    round->prepare = remom_prepare;
    round->max_concurrency = c->max_concurrent;
    round->min_success = c->min_successful_responses;
    round->fail_fast = c->on_error_fail;
    t->round_node = round;
    node_t *adv = vsr__graph_node(r, N_TRANSFORM, "synthesis_prompt");
    adv->apply = remom_advance;
    node_t *body = vsr__graph_node(r, N_SEQ, "round");
    vsr__graph_kids(r, body, 2, round, adv);
    node_t *loop = vsr__graph_node(r, N_LOOP, "rounds");
    loop->max_rounds = t->n_rounds;
    loop->until = remom_until;
    vsr__graph_kids(r, loop, 1, body);
    node_t *final = vsr__graph_node(r, N_CALL, "synthesis");
    final->prepare = remom_final_prepare;
    final->soft = 1; /* the result rule falls back to earlier rounds */
    t->final = final;
    node_t *resp = vsr__graph_node(r, N_RESPOND, "respond");
    resp->respond = remom_respond;
    node_t *root = vsr__graph_node(r, N_SEQ, "looper.remom");
    vsr__graph_kids(r, root, 3, loop, final, resp);
    r->root = root;
    return VSR_OK;
}

/* ======================================================================== */
/* looper.fusion (ref §3.6)                                                  */

typedef struct {
    const vsr_algo_fusion_conf_t *c;
    size_t *panel;
    size_t n_panel;
    size_t judge;
    size_t quorum;
    int explicit_quorum;
    int fallback;                  /* the quorum failed and the policy routes the request elsewhere */
    size_t fallback_ref;
    int mode;                      /* 0 separate, 1 one_call, 2 none */
    vsr_slice_t analysis;          /* normalised JSON, empty when none */
    node_t *panel_node, *analysis_node, *synth_node, *fallback_node;
} fusion_t;

static size_t fusion_count(vsr_graph_run_t *r, const node_t *n)
{
    VSR_UNUSED(n);
    return ((fusion_t *)r->t)->n_panel;
}

static int fusion_panel_prepare(vsr_graph_run_t *r, const node_t *n, size_t slot, slot_t *s)
{
    VSR_UNUSED(n);
    fusion_t *t = r->t;
    s->ref = t->panel[slot];
    s->has_temperature = t->c->has_temperature;
    s->temperature = t->c->temperature;
    s->max_completion_tokens = t->c->max_completion_tokens;
    s->timeout_ms = t->c->round_timeout_ms;
    for (size_t i = 0; i < t->c->n_analysis_overrides; i++) {
        const vsr_algo_fusion_override_conf_t *o = &t->c->analysis_overrides[i];
        const ref_t *ref = &r->refs[s->ref];
        if (o->model && (!strcmp(o->model, ref->name) || !strcmp(o->model, ref->model->name))) {
            if (o->has_temperature) {
                s->has_temperature = 1;
                s->temperature = o->temperature;
            }
            if (o->max_completion_tokens)
                s->max_completion_tokens = o->max_completion_tokens;
        }
    }
    return VSR_OK;
}

static size_t fusion_answers(vsr_graph_run_t *r, vsr_slice_t **models, vsr_slice_t **answers)
{
    fusion_t *t = r->t;
    const result_t **res;
    size_t k = vsr__graph_ok_results(r, t->panel_node, 0, &res);
    *models = vsr_pool_alloc(r->pool, sizeof(vsr_slice_t) * (k + 1));
    *answers = vsr_pool_alloc(r->pool, sizeof(vsr_slice_t) * (k + 1));
    for (size_t i = 0; i < k; i++) {
        (*models)[i] = vsr_slice_cstr(r->refs[res[i]->ref].name);
        (*answers)[i] = res[i]->c.content;
    }
    return k;
}

static void fusion_quorum(vsr_graph_run_t *r, const node_t *n)
{
    VSR_UNUSED(n);
    fusion_t *t = r->t;
    const result_t **res;
    size_t ok = vsr__graph_ok_results(r, t->panel_node, 0, &res);
    int short_panel = ok < t->quorum;
    if (ok > 0 && !(short_panel && (t->c->on_error_fail || t->explicit_quorum)))
        return; /* a short panel under on_error: skip goes on with what it has */
    if (t->c->quorum_fallback && t->c->quorum_fallback_target &&
        vsr__graph_ref_index(r, t->c->quorum_fallback_target, &t->fallback_ref) == VSR_OK) {
        t->fallback = 1;
        return;
    }
    vsr__graph_fail(r, 502, "server_error", "looper_quorum",
                    "fusion: %zu of %zu panel models answered, %zu needed (quorum_failure_policy: fail)", ok,
                    t->n_panel, t->quorum);
}

static int fusion_is_fallback(vsr_graph_run_t *r, const node_t *n)
{
    VSR_UNUSED(n);
    return ((fusion_t *)r->t)->fallback;
}

static int fusion_fallback_prepare(vsr_graph_run_t *r, const node_t *n, size_t slot, slot_t *s)
{
    VSR_UNUSED(n);
    VSR_UNUSED(slot);
    s->ref = ((fusion_t *)r->t)->fallback_ref;
    s->final_hop = 1;
    return VSR_OK;
}

static int fusion_analysis_prepare(vsr_graph_run_t *r, const node_t *n, size_t slot, slot_t *s)
{
    VSR_UNUSED(n);
    VSR_UNUSED(slot);
    fusion_t *t = r->t;
    vsr_slice_t *models, *answers;
    size_t k = fusion_answers(r, &models, &answers);
    vsr_buf_t p;
    vsr_buf_init(&p, 0);
    vsr__algo_fusion_analysis_prompt(&p, t->c->analysis_template, models, answers, k);
    s->ref = t->judge;
    s->messages = vsr__graph_messages_append_user(r, vsr_slice(NULL, 0), vsr_buf_slice(&p));
    vsr_buf_free(&p);
    s->strip_tools = 1;
    s->timeout_ms = t->c->round_timeout_ms;
    return VSR_OK;
}

static void fusion_on_analysis(vsr_graph_run_t *r, const node_t *n, result_t *res)
{
    VSR_UNUSED(n);
    fusion_t *t = r->t;
    vsr_slice_t norm;
    if (res->status == VSR_OK && vsr__algo_fusion_parse_analysis(res->c.content, r->pool, &norm) == VSR_OK)
        t->analysis = norm; /* else non-fatal: the synthesis works from the panel alone */
}

static int fusion_synth_prepare(vsr_graph_run_t *r, const node_t *n, size_t slot, slot_t *s)
{
    VSR_UNUSED(n);
    VSR_UNUSED(slot);
    fusion_t *t = r->t;
    vsr_slice_t *models, *answers;
    size_t k = fusion_answers(r, &models, &answers);
    vsr_buf_t p;
    vsr_buf_init(&p, 0);
    vsr__algo_fusion_synthesis_prompt(&p, t->c->synthesis_template, vsr__graph_question(r), models, answers, k,
                                      t->analysis, t->mode == 1);
    s->ref = t->judge;
    s->messages = vsr__graph_messages_append_user(r, vsr_slice(NULL, 0), vsr_buf_slice(&p));
    vsr_buf_free(&p);
    s->has_temperature = t->c->has_temperature;
    s->temperature = t->c->temperature;
    s->max_completion_tokens = t->c->max_completion_tokens;
    s->final_hop = 1;
    return VSR_OK;
}

static void fusion_respond(vsr_graph_run_t *r, const node_t *n)
{
    VSR_UNUSED(n);
    fusion_t *t = r->t;
    const result_t *res = last_result_of(r, t->fallback ? t->fallback_node : t->synth_node);
    if (res == NULL || res->status != VSR_OK) {
        vsr__graph_fail(r, 502, "server_error", "looper_synthesis_failed", "fusion: the judge's synthesis call "
                        "to model \"%.200s\" failed", r->refs[t->fallback ? t->fallback_ref : t->judge].name);
        return;
    }
    vsr_slice_t extra = vsr_slice(NULL, 0);
    if (!t->fallback && (t->c->include_analysis || t->c->include_intermediate_responses)) {
        vsr_buf_t b;
        vsr_buf_init(&b, 0);
        vsr_buf_append_cstr(&b, "\"fusion\":{");
        int first = 1;
        if (t->c->include_intermediate_responses) {
            vsr_slice_t *models, *answers;
            size_t k = fusion_answers(r, &models, &answers);
            vsr_buf_append_cstr(&b, "\"panel\":[");
            for (size_t i = 0; i < k; i++) {
                vsr_buf_append_cstr(&b, i ? ",{\"model\":" : "{\"model\":");
                vsr_buf_append_json_string(&b, models[i]);
                vsr_buf_append_cstr(&b, ",\"content\":");
                vsr_buf_append_json_string(&b, answers[i]);
                vsr_buf_append_cstr(&b, "}");
            }
            vsr_buf_append_cstr(&b, "]");
            first = 0;
        }
        if (t->c->include_analysis) {
            vsr_buf_append_cstr(&b, first ? "\"analysis\":" : ",\"analysis\":");
            if (t->analysis.len)
                vsr_buf_append_slice(&b, t->analysis);
            else
                vsr_buf_append_cstr(&b, "null");
        }
        vsr_buf_append_cstr(&b, "}");
        extra = vsr_pool_dup_slice(r->pool, vsr_buf_slice(&b));
        vsr_buf_free(&b);
    }
    vsr__graph_answer_completion(r, res, extra);
}

static int tpl_fusion(vsr_graph_run_t *r, const char **why)
{
    const vsr_algo_fusion_conf_t *c = &r->algo->u.fusion;
    fusion_t *t = vsr_pool_alloc(r->pool, sizeof(*t));
    memset(t, 0, sizeof(*t));
    t->c = c;
    size_t n_decl = r->o.decision->n_model_refs <= r->n_refs ? r->o.decision->n_model_refs : r->n_refs;
    size_t n = c->analysis_models.n ? c->analysis_models.n : n_decl;
    t->panel = vsr_pool_alloc(r->pool, sizeof(size_t) * (n + 1));
    for (size_t i = 0; i < n; i++) {
        if (c->analysis_models.n) {
            if (vsr__graph_ref_index(r, c->analysis_models.items[i], &t->panel[t->n_panel]) != VSR_OK) {
                *why = "fusion.analysis_models names no model";
                return VSR_ERR_INVALID;
            }
            t->n_panel++;
        } else {
            t->panel[t->n_panel++] = i;
        }
    }
    if (c->model) {
        if (vsr__graph_ref_index(r, c->model, &t->judge) != VSR_OK) {
            *why = "fusion.model names no model";
            return VSR_ERR_INVALID;
        }
    } else {
        t->judge = t->panel[0];
    }
    t->explicit_quorum = c->min_successful_responses > 0;
    t->quorum = c->min_successful_responses && c->min_successful_responses < t->n_panel ? c->min_successful_responses
                                                                                          : t->n_panel;
    t->mode = c->analysis_mode == NULL || !strcmp(c->analysis_mode, "separate") ? 0
              : !strcmp(c->analysis_mode, "one_call")                          ? 1
                                                                               : 2;
    r->t = t;

    node_t *panel = vsr__graph_node(r, N_PARALLEL, "panel");
    panel->count = fusion_count;
    panel->prepare = fusion_panel_prepare;
    panel->max_concurrency = c->max_concurrent;
    panel->soft = 1; /* the quorum node judges */
    t->panel_node = panel;
    node_t *quorum = vsr__graph_node(r, N_TRANSFORM, "quorum");
    quorum->apply = fusion_quorum;
    node_t *analysis = NULL;
    if (t->mode == 0) {
        analysis = vsr__graph_node(r, N_CALL, "analysis");
        analysis->prepare = fusion_analysis_prepare;
        analysis->on_result = fusion_on_analysis;
        analysis->soft = 1;
        t->analysis_node = analysis;
    }
    node_t *synth = vsr__graph_node(r, N_CALL, "synthesis");
    synth->prepare = fusion_synth_prepare;
    synth->soft = 1; /* respond says that it failed */
    t->synth_node = synth;
    node_t *normal = vsr__graph_node(r, N_SEQ, "judge");
    vsr__graph_kids(r, normal, 2, analysis, synth);
    node_t *fb = vsr__graph_node(r, N_CALL, "quorum_fallback");
    fb->prepare = fusion_fallback_prepare;
    fb->soft = 1;
    t->fallback_node = fb;
    node_t *br = vsr__graph_node(r, N_BRANCH, "quorum?");
    br->pred = fusion_is_fallback;
    vsr__graph_kids(r, br, 2, fb, normal);
    node_t *resp = vsr__graph_node(r, N_RESPOND, "respond");
    resp->respond = fusion_respond;
    node_t *root = vsr__graph_node(r, N_SEQ, "looper.fusion");
    vsr__graph_kids(r, root, 4, panel, quorum, br, resp);
    r->root = root;
    return VSR_OK;
}

/* ======================================================================== */

int vsr__graph_template(vsr_graph_run_t *r, const char **why)
{
    if (r->n_refs == 0 && r->algo->kind != VSR_ALGO_GRAPH) { /* a graph's nodes may name their own models */
        *why = "the decision has no modelRef to call";
        return VSR_ERR_INVALID;
    }
    switch (r->algo->kind) {
    case VSR_ALGO_CONFIDENCE:
        return tpl_confidence(r, why);
    case VSR_ALGO_RATINGS:
        return tpl_ratings(r, why);
    case VSR_ALGO_REMOM:
        return tpl_remom(r, why);
    case VSR_ALGO_FUSION:
        return tpl_fusion(r, why);
    case VSR_ALGO_WORKFLOWS:
        return vsr__graph_tpl_workflows(r, why);
    case VSR_ALGO_GRAPH:
        return vsr__graph_tpl_graph(r, why);
    default:
        *why = "the algorithm is not a Looper algorithm";
        return VSR_ERR_INVALID;
    }
}
