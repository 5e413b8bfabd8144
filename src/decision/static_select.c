/* static_select.c — the static selector's choice among a decision's
 * modelRefs (see decision.h, vsr_static_select). */
#include "decision/decision.h"

/* The first domain leaf of rule (depth first, in rule order) whose signal
 * matched; NOT subtrees are skipped (a leaf that matched there made its
 * NOT fail). */
static const char *first_domain(const vsr_rule_conf_t *r, vsr_rule_leaf_fn leaf, void *ud)
{
    if (r == NULL)
        return NULL;
    if (r->kind == VSR_RULE_LEAF) {
        double conf;
        return r->type && strcmp(r->type, "domain") == 0 && r->name && leaf(ud, r, &conf) ? r->name : NULL;
    }
    if (r->kind == VSR_RULE_NOT)
        return NULL;
    for (size_t k = 0; k < r->n_children; k++) {
        const char *n = first_domain(&r->children[k], leaf, ud);
        if (n)
            return n;
    }
    return NULL;
}

static const vsr_sig_domain_conf_t *find_domain(const vsr_recipe_conf_t *recipe, const char *name)
{
    for (size_t i = 0; name && i < recipe->signals.n_domains; i++)
        if (recipe->signals.domains[i].name && strcmp(recipe->signals.domains[i].name, name) == 0)
            return &recipe->signals.domains[i];
    return NULL;
}

/* A candidate's listed score: by its name as written (a LoRA's name), else
 * by its model card's; 1.0 when unlisted. */
static double score_of(const vsr_sig_domain_conf_t *dom, const vsr_model_ref_conf_t *ref)
{
    for (int pass = 0; pass < 2; pass++) {
        const char *name = pass == 0 ? (ref->lora_name ? ref->lora_name : ref->model) : ref->model;
        for (size_t i = 0; name && i < dom->n_model_scores; i++)
            if (dom->model_scores[i].model && strcmp(dom->model_scores[i].model, name) == 0)
                return dom->model_scores[i].score;
    }
    return VSR_STATIC_UNLISTED_SCORE;
}

size_t vsr_static_select(const vsr_recipe_conf_t *recipe, const vsr_decision_conf_t *d, vsr_rule_leaf_fn leaf,
                         void *ud, vsr_static_choice_t *out)
{
    vsr_static_choice_t c = {0};
    c.score = VSR_STATIC_UNLISTED_SCORE;
    if (out)
        *out = c;
    if (d == NULL || d->n_model_refs == 0 || d->algo.kind != VSR_ALGO_STATIC)
        return 0;
    const char *name = first_domain(d->rules, leaf, ud);
    const vsr_sig_domain_conf_t *dom = find_domain(recipe, name);
    if (dom == NULL || dom->n_model_scores == 0) { /* the reference's fallback: a domain named as the decision */
        dom = find_domain(recipe, d->name);
        name = dom ? dom->name : NULL;
    }
    if (dom == NULL || dom->n_model_scores == 0)
        return 0;
    size_t best = 0;
    double best_score = 0;
    for (size_t i = 0; i < d->n_model_refs; i++) {
        double sc = score_of(dom, &d->model_refs[i]);
        if (i == 0 || sc > best_score) { /* ties: the earlier candidate */
            best = i;
            best_score = sc;
        }
    }
    if (best_score == VSR_STATIC_UNLISTED_SCORE) { /* use_first_candidate: a best of 1.0 is the first one */
        best = 0;
        best_score = score_of(dom, &d->model_refs[0]);
    }
    c.domain = name;
    c.score = best_score;
    c.scored = 1;
    if (out)
        *out = c;
    return best;
}
