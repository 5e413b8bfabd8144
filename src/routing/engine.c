/*
 * engine.c — the routing pipeline behind the session phases.
 *
 * Request body phase, in the reference router's order (ref §4.4): JSON and
 * shape validation → model-name resolution (listener allow-list → auto
 * names → entrypoints → concrete provider model → 400) → signals (every
 * signal the recipe's decisions reference, each once) → decision → the
 * selected decision's plugins → the upstream request's rewrites: the model
 * value, x-selected-model, provider credentials and extra headers.
 */
#include "routing/routing-int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "decision/decision.h"
#include "plugins/plugins.h"

/* ---- engine ---- */

static int leaf_cmp(const void *a, const void *b)
{
    const leaf_map_t *x = a, *y = b;
    return x->leaf < y->leaf ? -1 : x->leaf > y->leaf;
}

static void add_referenced(void *ud, int idx)
{
    recipe_state_t *rs = ud;
    size_t k = 0;
    while (k < rs->n_referenced && rs->referenced[k] != idx)
        k++;
    if (k == rs->n_referenced) {
        rs->referenced = vsr_realloc(rs->referenced, sizeof(int) * (rs->n_referenced + 1));
        rs->referenced[rs->n_referenced++] = idx;
    }
}

static void collect_leaves(recipe_state_t *rs, const vsr_rule_conf_t *r)
{
    if (r == NULL)
        return;
    if (r->kind == VSR_RULE_LEAF) {
        int idx;
        if (r->type && strcmp(r->type, "projection") == 0) {
            /* an output: the signals its score reads are referenced */
            int o = vsr_projections_find_output(rs->proj, r->name);
            idx = o >= 0 ? -2 - o : -1;
            if (o >= 0)
                vsr_projections_output_deps(rs->proj, o, add_referenced, rs);
        } else {
            idx = vsr_signals_find(rs->signals, r->type, r->name);
            if (idx >= 0)
                add_referenced(rs, idx);
        }
        rs->leaves = vsr_realloc(rs->leaves, sizeof(leaf_map_t) * (rs->n_leaves + 1));
        rs->leaves[rs->n_leaves++] = (leaf_map_t){r, idx};
        return;
    }
    for (size_t i = 0; i < r->n_children; i++)
        collect_leaves(rs, &r->children[i]);
}

/* Compiled signals outlive the version that compiled them while a later
 * version with the same recipe signals uses them (signals keep no pointer
 * into the configuration they were compiled from). */
struct sig_box_s {
    atomic_uint refs;
    vsr_signals_t *signals;
};

static struct sig_box_s *box_new(vsr_signals_t *s)
{
    struct sig_box_s *b = vsr_calloc(1, sizeof(*b));
    atomic_init(&b->refs, 1);
    b->signals = s;
    return b;
}

static void box_unref(struct sig_box_s *b)
{
    if (b == NULL || atomic_fetch_sub(&b->refs, 1) != 1)
        return;
    vsr_signals_free(b->signals);
    vsr_free(b);
}

static struct sig_box_s *reusable(const vsr_engine_t *prev, const vsr_recipe_conf_t *r)
{
    for (size_t i = 0; prev && r->signals_hash[0] && i < prev->n_recipes; i++) {
        const recipe_state_t *p = &prev->recipes[i];
        if (p->box && p->conf->name && r->name && strcmp(p->conf->name, r->name) == 0 &&
            strcmp(p->conf->signals_hash, r->signals_hash) == 0)
            return p->box;
    }
    return NULL;
}

static int find_signal(void *ud, const char *type, const char *name)
{
    return vsr_signals_find(ud, type, name);
}

vsr_engine_t *vsr_engine_new(const vsr_config_t *cfg, uint64_t version, vsr_buf_t *err)
{
    return vsr_engine_new_from(cfg, NULL, version, err);
}

size_t vsr_engine_reused_recipes(const vsr_engine_t *e)
{
    return e->n_reused;
}

struct vsr__card_vec_s {
    size_t dim;
    float v[];
};

const float *vsr__engine_card_vec(vsr_engine_t *e, size_t card, int caps, size_t *dim)
{
    size_t i = card * 2 + (caps ? 1 : 0);
    if (i >= e->n_card_vecs)
        return NULL;
    struct vsr__card_vec_s *cv = atomic_load_explicit(&e->card_vecs[i], memory_order_acquire);
    if (cv == NULL)
        return NULL;
    *dim = cv->dim;
    return cv->v;
}

void vsr__engine_card_vec_put(vsr_engine_t *e, size_t card, int caps, const float *v, size_t dim)
{
    size_t i = card * 2 + (caps ? 1 : 0);
    if (i >= e->n_card_vecs || dim == 0)
        return;
    struct vsr__card_vec_s *cv = vsr_malloc(sizeof(*cv) + dim * sizeof(float)), *none = NULL;
    cv->dim = dim;
    memcpy(cv->v, v, dim * sizeof(float));
    if (!atomic_compare_exchange_strong_explicit(&e->card_vecs[i], &none, cv, memory_order_acq_rel,
                                                 memory_order_acquire))
        vsr_free(cv); /* another worker kept one first: the same text, the same vector */
}

vsr_engine_t *vsr_engine_new_from(const vsr_config_t *cfg, const vsr_engine_t *prev, uint64_t version, vsr_buf_t *err)
{
    vsr_engine_t *e = vsr_calloc(1, sizeof(*e));
    atomic_init(&e->refs, 1);
    e->n_card_vecs = cfg->n_model_cards * 2;
    e->card_vecs = vsr_calloc(e->n_card_vecs ? e->n_card_vecs : 1, sizeof(*e->card_vecs));
    for (size_t i = 0; i < e->n_card_vecs; i++)
        atomic_init(&e->card_vecs[i], NULL);
    e->cfg = cfg;
    e->version = version;
    e->n_recipes = cfg->n_recipes;
    e->recipes = vsr_calloc(cfg->n_recipes ? cfg->n_recipes : 1, sizeof(recipe_state_t));
    int ok = 1;
    for (size_t i = 0; i < cfg->n_recipes; i++) {
        recipe_state_t *rs = &e->recipes[i];
        rs->conf = &cfg->recipes[i];
        struct sig_box_s *old = reusable(prev, rs->conf);
        if (old) {
            atomic_fetch_add(&old->refs, 1);
            rs->box = old;
            rs->signals = old->signals;
            e->n_reused++;
        } else {
            rs->signals = vsr_signals_compile(rs->conf, err);
            if (rs->signals == NULL) {
                ok = 0;
                continue;
            }
            rs->box = box_new(rs->signals);
        }
        rs->proj = vsr_projections_compile(&rs->conf->projections, find_signal, rs->signals);
        /* each decision's rules, and what its graph may cost without a budget (once per version, not per
         * request) */
        rs->implied = vsr_calloc(rs->conf->n_decisions ? rs->conf->n_decisions : 1, sizeof(vsr_graph_implied_t));
        for (size_t d = 0; d < rs->conf->n_decisions; d++) {
            collect_leaves(rs, rs->conf->decisions[d].rules);
            vsr_graph_implied_budget(cfg, &rs->conf->decisions[d], &rs->implied[d]);
            /* the hallucination plugin checks an answer when the fact_check signal
             * needs_fact_check matched: computed whether a rule reads it or not */
            const vsr_decision_conf_t *dc = &rs->conf->decisions[d];
            for (size_t k = 0; k < dc->n_plugins; k++) {
                int idx = dc->plugins[k].kind == VSR_PLUGIN_HALLUCINATION && dc->plugins[k].enabled
                              ? vsr_signals_find(rs->signals, "fact_check", "needs_fact_check")
                              : -1;
                if (idx >= 0)
                    add_referenced(rs, idx);
            }
        }
        /* a partition's winner is chosen among all its members */
        for (size_t k = 0; k < rs->n_referenced; k++)
            vsr_projections_partners(rs->proj, rs->referenced[k], add_referenced, rs);
        /* a signal's companion (a safety hazard stage) is computed with it */
        for (size_t k = 0; k < rs->n_referenced; k++)
            if (vsr_signals_companion(rs->signals, rs->referenced[k]) >= 0)
                add_referenced(rs, vsr_signals_companion(rs->signals, rs->referenced[k]));
        if (rs->n_leaves > 1)
            qsort(rs->leaves, rs->n_leaves, sizeof(leaf_map_t), leaf_cmp);
        for (size_t k = 0; k < rs->n_referenced; k++)
            if (strcmp(vsr_signals_family(rs->signals, rs->referenced[k]), "authz") == 0)
                rs->needs_identity = 1;
    }
    if (!ok) {
        vsr_engine_unref(e);
        return NULL;
    }
    return e;
}

vsr_engine_t *vsr_engine_ref(vsr_engine_t *e)
{
    atomic_fetch_add(&e->refs, 1);
    return e;
}

void vsr_engine_unref(vsr_engine_t *e)
{
    if (e == NULL || atomic_fetch_sub(&e->refs, 1) != 1)
        return;
    for (size_t i = 0; i < e->n_recipes; i++) {
        box_unref(e->recipes[i].box);
        vsr_projections_free(e->recipes[i].proj);
        vsr_free(e->recipes[i].leaves);
        vsr_free(e->recipes[i].referenced);
        vsr_free(e->recipes[i].implied);
    }
    vsr_free(e->recipes);
    for (size_t i = 0; i < e->n_card_vecs; i++)
        vsr_free(atomic_load(&e->card_vecs[i]));
    vsr_free(e->card_vecs);
    if (e->part_free)
        e->part_free(e->part);
    vsr_config_free(e->owned_cfg);
    vsr_free(e);
}

uint64_t vsr_engine_version(const vsr_engine_t *e)
{
    return e->version;
}

void vsr_engine_adopt(vsr_engine_t *e, vsr_config_t *cfg, const char *hash)
{
    VSR_BUG_ON(cfg != NULL && cfg != e->cfg);
    e->owned_cfg = cfg;
    snprintf(e->hash, sizeof(e->hash), "%s", hash ? hash : "");
}

void vsr_engine_set_part(vsr_engine_t *e, void *part, void (*part_free)(void *part))
{
    e->part = part;
    e->part_free = part_free;
}

void vsr_engine_set_version(vsr_engine_t *e, uint64_t version)
{
    e->version = version;
}

const vsr_config_t *vsr_engine_config(const vsr_engine_t *e)
{
    return e->cfg;
}

const char *vsr_engine_hash(const vsr_engine_t *e)
{
    return e->hash;
}

void *vsr_engine_part(const vsr_engine_t *e)
{
    return e->part;
}

recipe_state_t *vsr__engine_recipe(vsr_engine_t *e, const vsr_recipe_conf_t *r)
{
    for (size_t i = 0; i < e->n_recipes; i++)
        if (e->recipes[i].conf == r)
            return &e->recipes[i];
    return NULL;
}

/* ---- model-name resolution (ref §1.12) ---- */

int vsr__resolve_model(const vsr_engine_t *e, vsr_slice_t name, resolution_t *out)
{
    const vsr_config_t *cfg = e->cfg;
    memset(out, 0, sizeof(*out));
    if (name.len == 0)
        return VSR_ERR_NOT_FOUND; /* an empty name is neither an auto alias nor a model */
    for (size_t i = 0; i < cfg->auto_model_names.n; i++) {
        if (vsr_slice_eq_cstr(name, cfg->auto_model_names.items[i])) {
            out->recipe = vsr_config_find_recipe(cfg, VSR_SLICE_LIT("default"));
            return out->recipe ? VSR_OK : VSR_ERR_NOT_FOUND;
        }
    }
    for (size_t i = 0; i < cfg->n_entrypoints; i++) {
        const vsr_entrypoint_conf_t *ep = &cfg->entrypoints[i];
        for (size_t k = 0; k < ep->model_names.n; k++) {
            if (vsr_slice_eq_cstr(name, ep->model_names.items[k])) {
                out->recipe = ep->resolved ? ep->resolved : vsr_config_find_recipe(cfg, vsr_slice_cstr(ep->recipe));
                return out->recipe ? VSR_OK : VSR_ERR_NOT_FOUND;
            }
        }
    }
    out->model = vsr_config_find_model(cfg, name);
    return out->model ? VSR_OK : VSR_ERR_NOT_FOUND;
}

/* ---- signals and decision for one request ---- */

/* What a condition on an unknown signal means: the condition's on_error,
 * else its family's (DEFAULT: the decision's on_unknown, then no_match). */
static vsr_on_error_t leaf_policy(const route_ctx_t *rc, const vsr_rule_conf_t *leaf, int sig)
{
    if (leaf->on_error != VSR_ON_ERROR_DEFAULT)
        return leaf->on_error;
    return vsr_signals_on_error(rc->rs->signals, sig);
}

static int leaf_sig(const recipe_state_t *rs, const vsr_rule_conf_t *leaf)
{
    leaf_map_t key = {leaf, -1};
    leaf_map_t *hit = rs->n_leaves ? bsearch(&key, rs->leaves, rs->n_leaves, sizeof(leaf_map_t), leaf_cmp) : NULL;
    return hit ? hit->sig : -1;
}

static int leaf_cb(void *ud, const vsr_rule_conf_t *leaf, double *confidence)
{
    route_ctx_t *rc = ud;
    recipe_state_t *rs = rc->rs;
    int i = leaf_sig(rs, leaf);
    if (i <= -2) {
        vsr_projection_out_t o = vsr_projections_output(rs->proj, &rc->proj, -2 - i);
        *confidence = o.confidence;
        return o.matched;
    }
    if (i < 0)
        return 0;
    if (rc->unknown && rc->unknown[i]) {
        /* nothing was measured: a match by policy has no confidence of its own */
        *confidence = 0;
        return leaf_policy(rc, leaf, i) == VSR_ON_ERROR_MATCH;
    }
    if (!rc->memo_done[i]) {
        uint64_t t0 = vsr_now_us_exact();
        rc->memo[i] = vsr_signals_eval(rs->signals, i, &rc->in);
        rc->memo_done[i] = 1;
        if (rc->sig_us)
            rc->sig_us[i] = vsr_now_us_exact() - t0;
    }
    if (leaf->label || leaf->has_predicate)
        return vsr_rule_leaf_result(leaf, &rc->memo[i], confidence);
    *confidence = rc->memo[i].confidence;
    return rc->memo[i].matched;
}

/* rules.on_unknown: fail_request: a condition on an unknown signal with no
 * policy of its own fails the request. */
static const char *fails_request(const route_ctx_t *rc, const vsr_rule_conf_t *r)
{
    if (r->kind == VSR_RULE_LEAF) {
        int i = leaf_sig(rc->rs, r);
        return i >= 0 && rc->unknown[i] && leaf_policy(rc, r, i) == VSR_ON_ERROR_DEFAULT ? r->name : NULL;
    }
    for (size_t k = 0; k < r->n_children; k++) {
        const char *name = fails_request(rc, &r->children[k]);
        if (name)
            return name;
    }
    return NULL;
}

static void route_select(route_ctx_t *rc)
{
    recipe_state_t *rs = rc->rs;
    vsr_signals_combine(rs->signals, rc->memo, rc->memo_done, rc->unknown);
    for (size_t d = 0; (rc->n_tasks || rc->n_unknown_now) && d < rs->conf->n_decisions && !rc->fail_request; d++) {
        const vsr_rule_conf_t *r = rs->conf->decisions[d].rules;
        if (r && r->on_unknown_fail && (rc->fail_signal = fails_request(rc, r)) != NULL)
            rc->fail_request = 1;
    }
    /* projections: after the signals, before the decisions */
    size_t n = vsr_signals_count(rs->signals);
    rc->known = vsr_pool_alloc(rc->pool, n + 1);
    for (size_t i = 0; i < n; i++)
        rc->known[i] = rc->memo_done[i] && !rc->unknown[i];
    vsr_projections_partition(rs->proj, rc->memo, rc->known);
    vsr_projections_run_init(rs->proj, &rc->proj, rc->pool, rc->memo, rc->known);
    rc->results = vsr_pool_alloc(rc->pool, sizeof(vsr_decision_result_t) * (rs->conf->n_decisions + 1));
    rc->selected = vsr_decision_select(rs->conf, leaf_cb, rc, rc->results);
    /* the static selector: which modelRef answers (docs/signals.md "Model scores") */
    rc->model_ref = rc->selected >= 0 ? vsr_static_select(rs->conf, rc->results[rc->selected].decision, leaf_cb, rc,
                                                          &rc->choice)
                                      : 0;
}

uint64_t vsr__ports_now(const vsr_ports_t *p, void *ud)
{
    return p && p->now_ms ? p->now_ms(ud) : vsr_now_ms();
}

/* Every task without a usable answer makes its signal unknown. */
static void settle_tasks(route_ctx_t *rc)
{
    uint64_t now = vsr_now_us_exact();
    for (size_t k = 0; k < rc->n_tasks; k++) {
        int i = rc->tasks[k].sig;
        if (rc->memo_done[i])
            continue;
        rc->sig_us[i] = now - rc->tasks[k].t0_us;
        memset(&rc->memo[i], 0, sizeof(rc->memo[i]));
        rc->memo_done[i] = 1;
        rc->unknown[i] = 1;
    }
}

static void task_answer(route_ctx_t *rc, route_task_t *t, vsr_slice_t result)
{
    t->answered = 1;
    vsr_signal_result_t v;
    if (vsr_signals_consume(rc->rs->signals, t->sig, &rc->in, result, &v) == VSR_OK) {
        rc->memo[t->sig] = v;
        rc->memo_done[t->sig] = 1;
        rc->sig_us[t->sig] = vsr_now_us_exact() - t->t0_us;
    }
}

/* One wait is over; the last one makes the decision (unless the start is
 * still on the stack: it sees waiting == 0 and goes on itself). */
static void wait_over(route_ctx_t *rc)
{
    if (--rc->waiting > 0 || rc->calling)
        return;
    settle_tasks(rc);
    route_select(rc);
    rc->cont(rc);
}

static void route_done(void *ud, int status, const vsr_runtime_result_t *res, size_t n)
{
    route_ctx_t *rc = ud;
    if (rc->answered || rc->cancelled)
        return; /* a port that answers twice: the first answer stands */
    rc->answered = 1;
    rc->handle = NULL;
    rc->rt_end_us = vsr_now_us_exact();
    int late = vsr__ports_now(rc->ports, rc->ports_ud) > rc->deadline_ms;
    rc->rt_status = late ? VSR_ERR_TOO_BIG : status;
    for (size_t r = 0; status == VSR_OK && !late && r < n; r++) {
        if (res[r].id == NULL || res[r].status != VSR_OK)
            continue;
        for (size_t k = 0; k < rc->n_tasks; k++) {
            route_task_t *t = &rc->tasks[k];
            if (t->chat || t->answered || strcmp(t->id, res[r].id) != 0)
                continue;
            task_answer(rc, t, res[r].result);
            break;
        }
    }
    wait_over(rc);
}

/* A remote classifier that failed: one warning a second at most, the
 * endpoint's trouble must not flood the log (each failure leaves its
 * signals unknown, which the trace and the decision's on_error show). */
static void remote_failed(const route_task_t *t, const char *why, int http_status)
{
    static _Atomic uint64_t last_ms;
    uint64_t now = vsr_now_ms(), prev = atomic_load(&last_ms);
    if (now - prev < 1000 || !atomic_compare_exchange_strong(&last_ms, &prev, now)) {
        vsr_log_debug("routing", "remote classifier call for signal %d: %s (%d)", t->sig, why, http_status);
        return;
    }
    vsr_log_warn("routing", "remote classifier call failed: %s%s%.0d; its signals are unknown (on_error decides)",
                 why, http_status ? ", status " : "", http_status);
}

static void chat_done(void *ud, int status, int http_status, vsr_slice_t body, unsigned attempts)
{
    VSR_UNUSED(attempts);
    route_task_t *t = ud;
    route_ctx_t *rc = t->rc;
    if (t->answered || rc->cancelled)
        return;
    t->answered = 1;
    t->handle = NULL;
    int late = vsr__ports_now(rc->ports, rc->ports_ud) > rc->deadline_ms;
    int ok = status == VSR_OK && http_status >= 200 && http_status <= 299 && !late;
    if (ok)
        task_answer(rc, t, body);
    if (t->remote) {
        size_t me = (size_t)(t - rc->tasks) + 1;
        int invalid = ok && !rc->memo_done[t->sig];
        rc->remote_ok += ok && !invalid;
        rc->remote_invalid += invalid;
        rc->remote_failed += !ok;
        if (invalid)
            remote_failed(t, "an answer that is not the contract's", 0);
        else if (!ok)
            remote_failed(t, late || status == VSR_ERR_IO ? "no answer in time or no connection"
                             : status == VSR_ERR_TOO_BIG ? "an answer over max_response_bytes"
                                                         : "an error status",
                          http_status);
        for (size_t k = 0; k < rc->n_tasks; k++) /* the signals that asked the same */
            if (rc->tasks[k].same_as == me) {
                rc->tasks[k].answered = 1;
                if (ok)
                    task_answer(rc, &rc->tasks[k], body);
            }
    }
    wait_over(rc);
}

/* A remote classifier's call: the payload {"model": EXTERNAL, "timeout_ms":
 * N, "path": P, "body": {...}} names a global.model_catalog.external[]
 * entry; its body goes as is, to P on the entry's endpoint. */
static void remote_start(route_ctx_t *rc, route_task_t *t, uint64_t now)
{
    vsr_json_t j;
    uint32_t mt, bt, tt, pt;
    vsr_slice_t name = VSR_SLICE_NULL;
    vsr_slice_t path = VSR_SLICE_NULL;
    const vsr_external_conf_t *e = NULL;
    int parsed = rc->ports->model_call && rc->cfg;
    int ok = parsed && vsr_json_parse(&j, t->task.payload.p, t->task.payload.len, NULL) == VSR_OK &&
             vsr_json_type(&j, 0) == VSR_JSON_OBJECT &&
             vsr_json_object_get(&j, 0, "model", &mt) == VSR_OK && vsr_json_type(&j, mt) == VSR_JSON_STRING &&
             vsr_json_object_get(&j, 0, "body", &bt) == VSR_OK && vsr_json_type(&j, bt) == VSR_JSON_OBJECT &&
             vsr_json_object_get(&j, 0, "path", &pt) == VSR_OK &&
             vsr_json_string(&j, mt, rc->pool, &name) == VSR_OK;
    if (ok) /* one of two static paths: the slice must outlive the call */
        path = vsr_json_string_eq(&j, pt, VSR_SLICE_LIT("/classify"))      ? VSR_SLICE_LIT("/classify")
               : vsr_json_string_eq(&j, pt, VSR_SLICE_LIT("/v1/classify")) ? VSR_SLICE_LIT("/v1/classify")
                                                                           : VSR_SLICE_NULL;
    e = ok && path.p ? vsr_config_find_external(rc->cfg, name) : NULL;
    if (e == NULL || e->model.n_backends == 0) { /* nothing to call (a newer document dropped it): unknown */
        if (parsed)
            vsr_json_free(&j);
        t->answered = 1;
        rc->waiting--;
        return;
    }
    uint64_t deadline = rc->deadline_ms;
    double tm;
    if (vsr_json_object_get(&j, 0, "timeout_ms", &tt) == VSR_OK && vsr_json_number(&j, tt, &tm) == VSR_OK && tm > 0 &&
        now + (uint64_t)tm < deadline)
        deadline = now + (uint64_t)tm;
    vsr_slice_t body = vsr_slice(j.src + j.toks[bt].start, j.toks[bt].end - j.toks[bt].start);
    vsr_graph_call_t gc = {.model = &e->model, .body = body, .iteration = 1,
                           .max_response_bytes = e->max_response_bytes, .path = path};
    vsr_json_free(&j);
    t->rc = rc;
    void *h = rc->ports->model_call(rc->ports_ud, &gc, deadline, chat_done, t);
    if (!t->answered)
        t->handle = h;
}

/* A chat task's call: its payload {"model": NAME, "timeout_ms": N, "body": {...}}
 * names a provider model; the body goes with the model's upstream id. */
static void chat_start(route_ctx_t *rc, route_task_t *t, uint64_t now)
{
    vsr_json_t j;
    uint32_t mt, bt, tt;
    vsr_slice_t name = VSR_SLICE_NULL;
    const vsr_model_conf_t *m = NULL;
    int parsed = rc->ports->model_call && rc->cfg;
    int ok = parsed && vsr_json_parse(&j, t->task.payload.p, t->task.payload.len, NULL) == VSR_OK &&
             vsr_json_type(&j, 0) == VSR_JSON_OBJECT &&
             vsr_json_object_get(&j, 0, "model", &mt) == VSR_OK && vsr_json_type(&j, mt) == VSR_JSON_STRING &&
             vsr_json_object_get(&j, 0, "body", &bt) == VSR_OK && vsr_json_type(&j, bt) == VSR_JSON_OBJECT &&
             vsr_json_string(&j, mt, rc->pool, &name) == VSR_OK;
    m = ok ? vsr_config_find_model(rc->cfg, name) : NULL;
    const vsr_external_conf_t *ext = ok && m == NULL ? vsr_config_find_external(rc->cfg, name) : NULL;
    if (ext) /* the reference's llm classifier names an external model: its endpoint, its llm_model_name */
        m = &ext->model;
    if (m == NULL || m->n_backends == 0) { /* nothing to call: the signal is unknown */
        if (parsed)
            vsr_json_free(&j);
        t->answered = 1;
        rc->waiting--;
        return;
    }
    uint64_t deadline = rc->deadline_ms;
    double tm;
    if (vsr_json_object_get(&j, 0, "timeout_ms", &tt) == VSR_OK && vsr_json_number(&j, tt, &tm) == VSR_OK && tm > 0 &&
        now + (uint64_t)tm < deadline)
        deadline = now + (uint64_t)tm;
    /* the body with "model": the upstream id */
    vsr_buf_t b;
    vsr_buf_init(&b, 0);
    vsr_buf_append_cstr(&b, "{\"model\":");
    vsr_buf_append_json_string(&b, vsr_slice_cstr(m->provider_model_id));
    uint32_t k = bt + 1;
    for (uint32_t i = 0; i < j.toks[bt].count; i++) {
        uint32_t v = k + 1;
        if (!vsr_json_string_eq(&j, k, VSR_SLICE_LIT("model"))) {
            vsr_buf_append_cstr(&b, ",");
            vsr_buf_append(&b, j.src + j.toks[k].start, j.toks[v].end - j.toks[k].start);
        }
        k = j.toks[v].next;
    }
    vsr_buf_append_cstr(&b, "}");
    vsr_json_free(&j);
    vsr_graph_call_t gc = {.model = m, .body = vsr_pool_dup_slice(rc->pool, vsr_buf_slice(&b)), .iteration = 1,
                           .max_response_bytes = (uint64_t)1 << 20};
    vsr_buf_free(&b);
    t->rc = rc;
    void *h = rc->ports->model_call(rc->ports_ud, &gc, deadline, chat_done, t);
    if (!t->answered)
        t->handle = h;
}

int vsr__route_start(route_ctx_t *rc, vsr_pool_t *pool)
{
    recipe_state_t *rs = rc->rs;
    size_t n = vsr_signals_count(rs->signals);
    rc->pool = pool;
    rc->memo = vsr_pool_alloc(pool, sizeof(vsr_signal_result_t) * (n ? n : 1));
    rc->memo_done = vsr_pool_alloc(pool, n ? n : 1);
    memset(rc->memo_done, 0, n ? n : 1);
    rc->unknown = vsr_pool_alloc(pool, n ? n : 1);
    memset(rc->unknown, 0, n ? n : 1);
    rc->sig_us = vsr_pool_alloc(pool, sizeof(uint64_t) * (n ? n : 1));
    memset(rc->sig_us, 0, sizeof(uint64_t) * (n ? n : 1));
    rc->sig_task = vsr_pool_alloc(pool, n ? n : 1);
    memset(rc->sig_task, 0, n ? n : 1);
    rc->n_tasks = 0;
    rc->n_unknown_now = 0;
    rc->remote_ok = rc->remote_failed = rc->remote_invalid = 0;
    rc->tasks = NULL;
    /* every referenced signal, once, as the reference evaluates them all
     * before the rules; unreferenced signals are never computed.  A
     * model-backed one gives a task instead: the runtime's go as one
     * bundle, chat tasks as one model call each, all at once. */
    size_t n_runtime = 0, n_chat = 0;
    uint64_t t_next = 0; /* the end of the last signal computed here is the start of the next */
    for (size_t k = 0; k < rs->n_referenced; k++) {
        int i = rs->referenced[k];
        vsr_signal_task_t t;
        uint64_t t0 = t_next ? t_next : vsr_now_us_exact();
        t_next = 0;
        int want = vsr_signals_task(rs->signals, i, &rc->in, &t);
        if (want < 0) {
            /* cannot be computed: unknown, its policies decide */
            memset(&rc->memo[i], 0, sizeof(rc->memo[i]));
            rc->memo_done[i] = 1;
            rc->unknown[i] = 1;
            rc->n_unknown_now++;
            t_next = vsr_now_us_exact();
            rc->sig_us[i] = t_next - t0;
            continue;
        }
        if (want) {
            if (rc->tasks == NULL)
                rc->tasks = vsr_pool_alloc(pool, sizeof(route_task_t) * rs->n_referenced);
            route_task_t *rt = &rc->tasks[rc->n_tasks];
            memset(rt, 0, sizeof(*rt));
            rt->sig = i;
            rt->task = t;
            rt->remote = strcmp(t.type, VSR_SIGNAL_TASK_REMOTE) == 0;
            rt->chat = rt->remote || strcmp(t.type, VSR_SIGNAL_TASK_CHAT) == 0;
            for (size_t p = 0; rt->remote && p < rc->n_tasks && !rt->same_as; p++)
                if (rc->tasks[p].remote && !rc->tasks[p].same_as && vsr_slice_eq(rc->tasks[p].task.payload, t.payload))
                    rt->same_as = p + 1;
            n_chat += rt->chat && !rt->same_as;
            n_runtime += !rt->chat;
            rt->t0_us = t0;
            rc->sig_task[i] = 1;
            snprintf(rt->id, sizeof(rt->id), "t%zu", rc->n_tasks);
            rc->n_tasks++;
            continue;
        }
        rc->memo[i] = vsr_signals_eval(rs->signals, i, &rc->in);
        rc->memo_done[i] = 1;
        t_next = vsr_now_us_exact();
        rc->sig_us[i] = t_next - t0;
    }
    if (rc->n_tasks == 0) {
        route_select(rc);
        return VSR_OK;
    }
    uint64_t now = vsr__ports_now(rc->ports, rc->ports_ud);
    if (rc->deadline_ms == 0)
        rc->deadline_ms = now + VSR_SESSION_WAIT_DEFAULT_MS;
    if (rc->ports == NULL || now >= rc->deadline_ms) {
        settle_tasks(rc); /* no ports, or no time left: every task failed */
        route_select(rc);
        return VSR_OK;
    }
    rc->calling = 1;
    rc->n_chat = (unsigned)n_chat;
    rc->waiting = n_chat + (n_runtime && rc->ports->runtime_call ? 1 : 0);
    rc->answered = 0;
    for (size_t k = 0; k < rc->n_tasks; k++)
        if (rc->tasks[k].remote && !rc->tasks[k].same_as)
            remote_start(rc, &rc->tasks[k], now);
        else if (rc->tasks[k].chat && !rc->tasks[k].remote)
            chat_start(rc, &rc->tasks[k], now);
    if (n_runtime && rc->ports->runtime_call) {
        vsr_runtime_task_t *tasks = vsr_pool_alloc(pool, sizeof(*tasks) * n_runtime);
        size_t m = 0;
        for (size_t k = 0; k < rc->n_tasks; k++)
            if (!rc->tasks[k].chat)
                tasks[m++] = (vsr_runtime_task_t){rc->tasks[k].id, rc->tasks[k].task.type, rc->tasks[k].task.payload};
        vsr_runtime_bundle_t b = {tasks, m};
        rc->rt_start_us = vsr_now_us_exact();
        rc->rt_tasks = (unsigned)m;
        rc->rt_status = 1;
        void *h = rc->ports->runtime_call(rc->ports_ud, &b, rc->deadline_ms, route_done, rc);
        if (!rc->answered) {
            VSR_BUG_ON(h == NULL); /* a port returns NULL only once done has run */
            rc->handle = h;
        }
    }
    rc->calling = 0;
    if (rc->waiting == 0) {
        settle_tasks(rc);
        route_select(rc);
        return VSR_OK;
    }
    return VSR_AGAIN;
}

size_t vsr__route_family_times(const route_ctx_t *rc, vsr_family_time_t *out, size_t cap)
{
    size_t n = 0, total = rc->sig_us ? vsr_signals_count(rc->rs->signals) : 0;
    /* the referenced signals in evaluation order; others (a lazy leaf) after them */
    for (size_t pass = 0; pass < 2; pass++) {
        size_t count = pass == 0 ? rc->rs->n_referenced : total;
        for (size_t k = 0; k < count; k++) {
            int i = pass == 0 ? rc->rs->referenced[k] : (int)k;
            if ((size_t)i >= total || !rc->memo_done[i])
                continue;
            if (pass == 1) {
                size_t r = 0;
                while (r < rc->rs->n_referenced && rc->rs->referenced[r] != i)
                    r++;
                if (r < rc->rs->n_referenced)
                    continue; /* counted in the first pass */
            }
            const char *fam = vsr_signals_family(rc->rs->signals, i);
            size_t f = 0;
            while (f < n && strcmp(out[f].family, fam) != 0)
                f++;
            if (f == n) {
                if (n == cap)
                    continue;
                out[n++] = (vsr_family_time_t){fam, 0};
            }
            if (rc->sig_task[i])
                out[f].us = VSR_MAX(out[f].us, rc->sig_us[i]);
            else
                out[f].us += rc->sig_us[i];
        }
    }
    return n;
}

void vsr__route_cancel(route_ctx_t *rc)
{
    if (rc->cancelled)
        return;
    rc->cancelled = 1; /* a done that still comes is ignored */
    if (rc->handle && rc->ports->runtime_cancel)
        rc->ports->runtime_cancel(rc->ports_ud, rc->handle);
    rc->handle = NULL;
    for (size_t k = 0; k < rc->n_tasks; k++) {
        route_task_t *t = &rc->tasks[k];
        if (t->chat && !t->answered && t->handle && rc->ports->model_cancel)
            rc->ports->model_cancel(rc->ports_ud, t->handle);
        t->handle = NULL;
    }
}
