/*
 * select.c — runs a decision's single-call selector (latency_aware,
 * multi_factor, router_dc, prompt): gathers each candidate's live statistics, price and
 * quality, asks decision/'s selector, and keeps what it saw for the
 * evidence, the preview and the trace.
 *
 * The reference's failure rule: a selector that fails answers with the
 * first candidate and a warning, unless algorithm.on_error is fail.
 */
#include "routing/routing-int.h"

#include <string.h>

int vsr__select_card_index(const vsr_config_t *cfg, const char *model)
{
    for (size_t i = 0; i < cfg->n_model_cards; i++)
        if (strcmp(cfg->model_cards[i].name, model) == 0)
            return (int)i;
    return -1;
}

static const vsr_model_card_conf_t *card_of(const vsr_config_t *cfg, const char *model)
{
    int i = vsr__select_card_index(cfg, model);
    return i >= 0 ? &cfg->model_cards[i] : NULL;
}

static void append_capabilities(const vsr_model_card_conf_t *card, vsr_buf_t *b)
{
    vsr_buf_append_cstr(b, "Capabilities: ");
    for (size_t i = 0; i < card->capabilities.n; i++) {
        if (i)
            vsr_buf_append_cstr(b, ", ");
        vsr_buf_append_cstr(b, card->capabilities.items[i]);
    }
}

void vsr__select_aux_text(const vsr_model_card_conf_t *card, int caps, vsr_buf_t *b)
{
    int desc = card->description && *card->description;
    if (desc)
        vsr_buf_append_cstr(b, card->description);
    if (caps && card->capabilities.n) {
        if (desc)
            vsr_buf_append_cstr(b, ". ");
        append_capabilities(card, b);
    } else if (!desc && card->capabilities.n) {
        vsr_buf_printf(b, "Model: %s. ", card->name);
        append_capabilities(card, b);
    }
}

static void gather(const vsr_config_t *cfg, const vsr_model_stats_t *st, const char *model, unsigned ttft_pct,
                   unsigned tpot_pct, vsr_select_input_t *in)
{
    memset(in, 0, sizeof(*in));
    in->model = model;
    vsr_slice_t name = vsr_slice_cstr(model);
    if (st) {
        if (ttft_pct)
            in->has_ttft = vsr_model_stats_percentile(st, name, VSR_MSTAT_TTFT, ttft_pct, &in->ttft_ms);
        if (tpot_pct)
            in->has_tpot = vsr_model_stats_percentile(st, name, VSR_MSTAT_TPOT, tpot_pct, &in->tpot_ms);
        in->inflight = (double)vsr_model_stats_inflight_now(st, name);
    }
    const vsr_model_conf_t *m = vsr_config_find_model(cfg, name);
    if (m && m->has_prompt_per_1m && m->prompt_per_1m > 0) { /* the reference reads prompt pricing only */
        in->cost_per_1m = m->prompt_per_1m;
        in->has_cost = 1;
    }
    const vsr_model_card_conf_t *c = card_of(cfg, model);
    if (c && c->has_quality_score && c->quality_score > 0) {
        in->quality = c->quality_score;
        in->has_quality = 1;
    }
}

int vsr__select_is_selector(const vsr_decision_conf_t *d)
{
    return d && d->n_model_refs > 0 &&
           (d->algo.kind == VSR_ALGO_LATENCY_AWARE || d->algo.kind == VSR_ALGO_MULTI_FACTOR ||
            d->algo.kind == VSR_ALGO_ROUTER_DC || d->algo.kind == VSR_ALGO_PROMPT);
}

void vsr__select_prompt_system(const vsr_config_t *cfg, const vsr_decision_conf_t *d, vsr_buf_t *b)
{
    vsr_slice_t ins = vsr_slice_trim(vsr_slice_cstr(d->algo.u.prompt.instructions));
    vsr_buf_append(b, ins.p, ins.len);
    vsr_buf_append_cstr(b, "\n\nChoose exactly one candidate from this list:\n");
    size_t n = VSR_MIN(d->n_model_refs, (size_t)VSR_SELECT_MAX_CANDIDATES);
    for (size_t i = 0; i < n; i++) {
        vsr_buf_append_cstr(b, "- ");
        vsr_buf_append_cstr(b, d->model_refs[i].model);
        const vsr_model_card_conf_t *c = card_of(cfg, d->model_refs[i].model);
        vsr_slice_t desc = c && c->description ? vsr_slice_trim(vsr_slice_cstr(c->description)) : VSR_SLICE_NULL;
        if (desc.len) {
            vsr_buf_append_cstr(b, ": ");
            vsr_buf_append(b, desc.p, desc.len);
        }
        vsr_buf_append_cstr(b, "\n");
    }
    vsr_buf_append_cstr(b, "Return only JSON: {\"selected_model\":\"<exact candidate name>\",\"rationale\":\"<short "
                           "reason>\"}.");
}

/* choices[0].message.content of a chat completion (pool), or VSR_ERR_INVALID. */
static int completion_content(vsr_slice_t body, vsr_pool_t *pool, vsr_slice_t *out)
{
    vsr_json_t j;
    uint32_t ch, msg, c;
    int rc = VSR_ERR_INVALID;
    if (vsr_json_parse(&j, body.p ? body.p : "", body.len, NULL) == VSR_OK && vsr_json_type(&j, 0) == VSR_JSON_OBJECT &&
        vsr_json_object_get(&j, 0, "choices", &ch) == VSR_OK && vsr_json_type(&j, ch) == VSR_JSON_ARRAY &&
        j.toks[ch].count > 0 && vsr_json_type(&j, ch + 1) == VSR_JSON_OBJECT &&
        vsr_json_object_get(&j, ch + 1, "message", &msg) == VSR_OK && vsr_json_type(&j, msg) == VSR_JSON_OBJECT &&
        vsr_json_object_get(&j, msg, "content", &c) == VSR_OK && vsr_json_type(&j, c) == VSR_JSON_STRING)
        rc = vsr_json_string(&j, c, pool, out);
    vsr_json_free(&j);
    return rc == VSR_OK ? VSR_OK : VSR_ERR_INVALID;
}

int vsr__select_prompt_parse(const vsr_decision_conf_t *d, vsr_slice_t body, vsr_pool_t *pool, const char **why)
{
    vsr_slice_t content;
    *why = "prompt: the reply is not a chat completion with a message content";
    if (completion_content(body, pool, &content) != VSR_OK)
        return -1;
    content = vsr_slice_trim(content);
    vsr_json_t j;
    uint32_t sm, ra;
    int pick = -1;
    *why = "prompt: the reply is not a JSON object";
    if (vsr_json_parse(&j, content.p ? content.p : "", content.len, NULL) != VSR_OK) {
        vsr_json_free(&j);
        return -1;
    }
    if (vsr_json_type(&j, 0) != VSR_JSON_OBJECT)
        goto out;
    *why = "prompt: the reply is not exactly {selected_model, rationale}";
    if (j.toks[0].count != 2 || vsr_json_object_get(&j, 0, "selected_model", &sm) != VSR_OK ||
        vsr_json_object_get(&j, 0, "rationale", &ra) != VSR_OK || vsr_json_type(&j, sm) != VSR_JSON_STRING ||
        vsr_json_type(&j, ra) != VSR_JSON_STRING)
        goto out;
    vsr_slice_t model, rationale;
    int ok = vsr_json_string(&j, sm, pool, &model) == VSR_OK && vsr_json_string(&j, ra, pool, &rationale) == VSR_OK;
    model = vsr_slice_trim(model);
    *why = "prompt: selected_model or rationale is empty";
    if (ok && model.len && vsr_slice_trim(rationale).len) {
        *why = "prompt: the model chose a model that is not a candidate";
        size_t n = VSR_MIN(d->n_model_refs, (size_t)VSR_SELECT_MAX_CANDIDATES);
        for (size_t i = 0; i < n && pick < 0; i++)
            if (vsr_slice_eq_cstr(model, d->model_refs[i].model))
                pick = (int)i;
    }
out:
    vsr_json_free(&j);
    if (pick >= 0)
        *why = NULL;
    return pick;
}

static void run_router_dc(const vsr_algo_conf_t *a, const vsr__select_aux_t *dc, size_t n, vsr_select_result_t *r)
{
    static const unsigned char none[VSR_SELECT_MAX_CANDIDATES];
    static const double zero[VSR_SELECT_MAX_CANDIDATES];
    if (dc && dc->ok) {
        vsr_select_router_dc(&a->u.router_dc, a->minimum_candidates, dc->cosine, dc->has, n, r);
        return;
    }
    vsr_select_router_dc(&a->u.router_dc, a->minimum_candidates, zero, none, n, r); /* 1/n each, the first */
    r->warning = "router_dc: no embedding of the query (the runtime did not answer); the first candidate";
}

/* The reference scores the chosen 1.0, the others 0; a failed call or an
 * answer that names no candidate is a selector failure. */
static void run_prompt(const vsr__select_aux_t *aux, size_t n, vsr_select_result_t *r)
{
    memset(r, 0, sizeof(*r));
    if (aux == NULL || aux->prompt_choice < 0 || (size_t)aux->prompt_choice >= n) {
        r->chosen = -1;
        r->error = aux && aux->prompt_error ? aux->prompt_error : "prompt: the model was not asked";
        return;
    }
    for (size_t i = 0; i < n; i++) {
        r->scores[i] = (int)i == aux->prompt_choice ? 1.0 : 0.0;
        r->scored[i] = 1;
    }
    r->chosen = aux->prompt_choice;
    r->score = 1.0;
}

int vsr__select_run(const vsr_config_t *cfg, const vsr_decision_conf_t *d, const vsr_model_stats_t *st,
                    const vsr__select_aux_t *dc, vsr_pool_t *pool, const vsr_selection_t **out)
{
    VSR_BUG_ON(!vsr__select_is_selector(d));
    uint64_t t0 = vsr_now_us();
    size_t n = VSR_MIN(d->n_model_refs, (size_t)VSR_SELECT_MAX_CANDIDATES);
    vsr_select_input_t in[VSR_SELECT_MAX_CANDIDATES];
    const vsr_algo_conf_t *a = &d->algo;
    unsigned ttft_pct = 0, tpot_pct = 0;
    if (a->kind == VSR_ALGO_LATENCY_AWARE) {
        ttft_pct = a->u.latency_aware.ttft_percentile;
        tpot_pct = a->u.latency_aware.tpot_percentile;
    } else if (a->kind == VSR_ALGO_MULTI_FACTOR) {
        ttft_pct = tpot_pct = a->u.multi_factor.latency_percentile;
    }
    for (size_t i = 0; i < n; i++)
        gather(cfg, st, d->model_refs[i].model, ttft_pct, tpot_pct, &in[i]);
    vsr_select_result_t r;
    if (a->kind == VSR_ALGO_LATENCY_AWARE)
        vsr_select_latency_aware(&a->u.latency_aware, a->minimum_candidates, in, n, &r);
    else if (a->kind == VSR_ALGO_MULTI_FACTOR)
        vsr_select_multi_factor(&a->u.multi_factor, a->minimum_candidates, in, n, &r);
    else if (a->kind == VSR_ALGO_ROUTER_DC)
        run_router_dc(a, dc, n, &r);
    else
        run_prompt(dc, n, &r);

    vsr_selection_t *sel = vsr_pool_alloc(pool, sizeof(*sel));
    const char **models = vsr_pool_alloc(pool, n * sizeof(*models));
    double *scores = vsr_pool_alloc(pool, n * sizeof(*scores));
    unsigned char *scored = vsr_pool_alloc(pool, n);
    const char **dropped = vsr_pool_alloc(pool, n * sizeof(*dropped));
    for (size_t i = 0; i < n; i++) {
        models[i] = d->model_refs[i].model;
        scores[i] = r.scores[i];
        scored[i] = r.scored[i];
        dropped[i] = r.dropped[i];
    }
    *sel = (vsr_selection_t){.algorithm = d->algorithm, .n = n, .models = models, .scores = scores,
                             .scored = scored, .dropped = dropped, .chosen = r.chosen, .warning = r.warning, .probe = r.probe,
                             .start_us = t0};
    int fail = a->on_error && strcmp(a->on_error, "fail") == 0;
    if (r.chosen < 0 && !fail) { /* the reference's rule: the first candidate */
        sel->chosen = 0;
        if (a->kind == VSR_ALGO_PROMPT) {
            vsr_buf_t w;
            vsr_buf_init(&w, 0);
            vsr_buf_printf(&w, "the selector failed (%s); the first candidate", r.error);
            sel->warning = vsr_pool_strndup(pool, w.data, w.len);
            vsr_buf_free(&w);
        } else {
            sel->warning = "the selector failed (every candidate excluded by the SLO, on_no_candidates: fail); "
                           "the first candidate";
        }
    } else if (r.chosen < 0) {
        sel->warning = r.error;
    }
    sel->end_us = vsr_now_us();
    *out = sel;
    return sel->chosen;
}

void vsr__selection_json(vsr_buf_t *b, const vsr_selection_t *sel)
{
    vsr_buf_append_cstr(b, "{\"algorithm\":");
    vsr_buf_append_json_string(b, vsr_slice_cstr(sel->algorithm));
    vsr_buf_append_cstr(b, ",\"selected_model\":");
    if (sel->chosen >= 0)
        vsr_buf_append_json_string(b, vsr_slice_cstr(sel->models[sel->chosen]));
    else
        vsr_buf_append_cstr(b, "null");
    vsr_buf_printf(b, ",\"probe\":%s,\"warning\":", sel->probe ? "true" : "false");
    if (sel->warning)
        vsr_buf_append_json_string(b, vsr_slice_cstr(sel->warning));
    else
        vsr_buf_append_cstr(b, "null");
    vsr_buf_append_cstr(b, ",\"candidates\":[");
    for (size_t i = 0; i < sel->n; i++) {
        vsr_buf_append_cstr(b, i ? ",{\"model\":" : "{\"model\":");
        vsr_buf_append_json_string(b, vsr_slice_cstr(sel->models[i]));
        if (sel->scored[i])
            vsr_buf_printf(b, ",\"score\":%.6f", sel->scores[i]);
        else
            vsr_buf_append_cstr(b, ",\"score\":null");
        if (sel->dropped[i]) {
            vsr_buf_append_cstr(b, ",\"excluded\":");
            vsr_buf_append_json_string(b, vsr_slice_cstr(sel->dropped[i]));
        }
        vsr_buf_append_cstr(b, "}");
    }
    vsr_buf_append_cstr(b, "]}");
}

const char *vsr__selection_scores(vsr_pool_t *pool, const vsr_selection_t *sel)
{
    vsr_buf_t b;
    vsr_buf_init(&b, 0);
    for (size_t i = 0; i < sel->n; i++) {
        if (!sel->scored[i])
            continue;
        vsr_buf_printf(&b, "%s%s=%.4f", b.len ? "," : "", sel->models[i], sel->scores[i]);
    }
    const char *s = vsr_pool_strndup(pool, b.data ? b.data : "", b.len);
    vsr_buf_free(&b);
    return s;
}
