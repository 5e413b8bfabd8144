/*
 * cfg_check.c — the checks that need the whole document: references between
 * sections (modelRefs → providers and model cards, entrypoints → recipes),
 * names that share one namespace (auto names, entrypoint names, provider
 * model names), the layered fallback policy, the management API against the
 * listeners; and the final assembly of recipes[].
 *
 * They run after every section decoded, so each reports a problem once, at
 * the value that refers (positions come from vsr__cfg_mark).  A check is
 * skipped when the section it refers to failed to decode: its own errors
 * are reported already and a cascade of "not found" would only bury them.
 */
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>

#include "config/cfg_internal.h"

static const char *q(cfg_decoder_t *d, const char *s)
{
    return vsr__cfg_quote(d->pool, s, strlen(s));
}

/* ---- recipes --------------------------------------------------------------------- */

static void check_recipe_names(cfg_decoder_t *d, config_box_t *box)
{
    size_t n = box->n_recipe_list;
    const char **keys = vsr_malloc((n + 1) * sizeof(*keys));
    const void **marks = vsr_malloc((n + 1) * sizeof(*marks));
    for (size_t i = 0; i < n; i++) {
        vsr_recipe_conf_t *r = &box->recipe_list[i];
        keys[i] = r->name;
        marks[i] = r;
        if (r->name != NULL && strcmp(r->name, "default") == 0) {
            vsr__cfg_mark_error(d, vsr__cfg_mark_find(d, r),
                                "recipe name \"default\" is reserved: it names the top-level routing block");
            keys[i] = NULL;
        }
    }
    vsr__cfg_check_unique_marked(d, "recipe name", keys, marks, n);
    vsr_free(keys);
    vsr_free(marks);
}

/* ---- model references --------------------------------------------------------------- */

typedef struct {
    cfg_index_t models; /* provider model names */
    cfg_index_t cards;  /* model card names → card index */
    cfg_index_t loras;  /* LoRA names → card index */
    int cards_ok;       /* every card decoded its name */
} model_index_t;

static const vsr_model_card_conf_t *find_card(const vsr_config_t *c, const model_index_t *ix, const char *name)
{
    const cfg_name_t *e = vsr__cfg_index_find(&ix->cards, name, NULL);
    return e ? &c->model_cards[e->index] : NULL;
}

static int card_has_lora(const vsr_model_card_conf_t *card, const char *lora)
{
    for (size_t i = 0; i < card->loras.n; i++) /* a card's own list: short */
        if (strcmp(card->loras.items[i], lora) == 0)
            return 1;
    return 0;
}

/* A modelRef names a provider model, or a LoRA declared under the card of
 * one; the latter is normalised to {model: <card>, lora_name: <LoRA>} so the
 * routing engine sees one shape. */
static void check_model_ref(cfg_decoder_t *d, const vsr_config_t *c, const model_index_t *ix, vsr_model_ref_conf_t *ref)
{
    const cfg_mark_t *at = vsr__cfg_mark_find(d, &ref->model);
    if (vsr__cfg_index_find(&ix->models, ref->model, NULL) == NULL) {
        if (!ix->cards_ok)
            return;
        size_t owners = 0;
        const cfg_name_t *e = vsr__cfg_index_find(&ix->loras, ref->model, &owners);
        const vsr_model_card_conf_t *owner = e ? &c->model_cards[e->index] : NULL;
        if (owner == NULL) {
            vsr__cfg_mark_error(d, at, "model %s is not defined in providers.models (nor as a LoRA in "
                                       "routing.modelCards)", q(d, ref->model));
        } else if (owners > 1) {
            vsr__cfg_mark_error(d, at, "model %s is a LoRA of %zu model cards; name the base model and set lora_name",
                                q(d, ref->model), owners);
        } else if (vsr__cfg_index_find(&ix->models, owner->name, NULL) == NULL) {
            vsr__cfg_mark_error(d, at, "model %s is a LoRA of model card %s, which is not defined in providers.models",
                                q(d, ref->model), q(d, owner->name));
        } else if (ref->lora_name != NULL && strcmp(ref->lora_name, ref->model) != 0) {
            vsr__cfg_mark_error(d, vsr__cfg_mark_find(d, &ref->lora_name),
                                "lora_name %s conflicts with model %s, itself a LoRA of %s", q(d, ref->lora_name),
                                q(d, ref->model), q(d, owner->name));
        } else {
            ref->lora_name = ref->model;
            ref->model = owner->name;
        }
        return;
    }
    if (ref->lora_name == NULL || !ix->cards_ok)
        return;
    const vsr_model_card_conf_t *card = find_card(c, ix, ref->model);
    if (card == NULL || !card_has_lora(card, ref->lora_name))
        vsr__cfg_mark_error(d, vsr__cfg_mark_find(d, &ref->lora_name),
                            "lora_name %s is not a LoRA of model %s (routing.modelCards[].loras)", q(d, ref->lora_name),
                            q(d, ref->model));
}

/* providers.defaults.model: a provider model, or a LoRA of a model card
 * (as modelRefs resolve, ref §1.14), normalised to {card's model, LoRA}. */
static void check_default_model(cfg_decoder_t *d, vsr_config_t *c, const model_index_t *ix)
{
    if (c->default_model == NULL || vsr__cfg_index_find(&ix->models, c->default_model, NULL) != NULL)
        return;
    const cfg_mark_t *at = vsr__cfg_mark_find(d, &c->default_model);
    if (!ix->cards_ok)
        return;
    size_t owners = 0;
    const cfg_name_t *e = vsr__cfg_index_find(&ix->loras, c->default_model, &owners);
    const vsr_model_card_conf_t *owner = e ? &c->model_cards[e->index] : NULL;
    if (owner == NULL)
        vsr__cfg_mark_error(d, at, "default model %s is not defined in providers.models (nor as a LoRA in "
                                   "routing.modelCards)", q(d, c->default_model));
    else if (owners > 1)
        vsr__cfg_mark_error(d, at, "default model %s is a LoRA of %zu model cards", q(d, c->default_model), owners);
    else if (vsr__cfg_index_find(&ix->models, owner->name, NULL) == NULL)
        vsr__cfg_mark_error(d, at, "default model %s is a LoRA of model card %s, which is not defined in "
                                   "providers.models", q(d, c->default_model), q(d, owner->name));
    else {
        c->default_lora = c->default_model;
        c->default_model = owner->name;
    }
}

static void check_algo_models(cfg_decoder_t *d, const model_index_t *ix, vsr_decision_conf_t *dec);

/* router_dc.require_descriptions: every candidate has a modelCards
 * description or capabilities (the reference refuses the selector at
 * start otherwise). */
static void check_router_dc(cfg_decoder_t *d, const vsr_config_t *c, const model_index_t *ix,
                            const vsr_decision_conf_t *dec)
{
    if (dec->algo.kind != VSR_ALGO_ROUTER_DC || !dec->algo.u.router_dc.require_descriptions)
        return;
    for (size_t j = 0; j < dec->n_model_refs; j++) {
        char *const *m = &dec->model_refs[j].model;
        const vsr_model_card_conf_t *card = *m ? find_card(c, ix, *m) : NULL;
        if (*m && (card == NULL || ((card->description == NULL || !*card->description) && card->capabilities.n == 0)))
            vsr__cfg_mark_error(d, vsr__cfg_mark_find(d, m), "decision %s: router_dc.require_descriptions is true "
                                "but model %s has no modelCards description or capabilities", q(d, dec->name),
                                q(d, *m));
    }
}
static void resolve_remote(cfg_decoder_t *d, const vsr_config_t *c, vsr_remote_cls_conf_t *r, const char *family,
                           const char *where);

static void check_recipe_refs(cfg_decoder_t *d, const vsr_config_t *c, const model_index_t *ix, vsr_recipe_conf_t *r)
{
    /* an llm classifier asks a provider model, or as in the reference a global.model_catalog.external[]
     * entry, through its backends */
    for (size_t i = 0; i < r->signals.n_safety; i++) { /* a safety rule's models */
        resolve_remote(d, c, &r->signals.safety[i].remote, "safety", "safety model");
        resolve_remote(d, c, &r->signals.safety[i].hazard_remote, "safety", "safety hazard.model");
    }
    for (size_t i = 0; i < r->signals.n_classifiers; i++) {
        resolve_remote(d, c, &r->signals.classifiers[i].remote, "classifier", "classifier backend");
        char *const *m = &r->signals.classifiers[i].model;
        if (r->signals.classifiers[i].type != VSR_CLS_LLM || *m == NULL ||
            vsr__cfg_index_find(&ix->models, *m, NULL) != NULL)
            continue;
        const vsr_external_conf_t *e = vsr_config_find_external(c, vsr_slice_cstr(*m));
        if (e == NULL)
            vsr__cfg_mark_error(d, vsr__cfg_mark_find(d, m),
                                "classifier model %s is not defined in providers.models nor in "
                                "global.model_catalog.external", q(d, *m));
        else if (e->address == NULL)
            vsr__cfg_mark_error(d, vsr__cfg_mark_find(d, m), "classifier model %s: external model %s has no "
                                "llm_endpoint", q(d, *m), q(d, e->name));
    }
    for (size_t i = 0; i < r->n_decisions; i++) {
        for (size_t j = 0; j < r->decisions[i].n_model_refs; j++)
            if (r->decisions[i].model_refs[j].model != NULL)
                check_model_ref(d, c, ix, &r->decisions[i].model_refs[j]);
        check_algo_models(d, ix, &r->decisions[i]);
        check_router_dc(d, c, ix, &r->decisions[i]);
    }
}

/* The models a Looper block names (ref §3): each a provider model or one
 * of the decision's modelRefs (as written, or its LoRA); a fusion override
 * names a panel model; quorum_fallback_target, where the original request
 * goes, a provider model.  A fusion quorum above the panel is capped to it. */
static int is_decision_model(const vsr_decision_conf_t *dec, const char *name)
{
    for (size_t i = 0; i < dec->n_model_refs; i++) {
        const vsr_model_ref_conf_t *r = &dec->model_refs[i];
        if ((r->model && strcmp(r->model, name) == 0) || (r->lora_name && strcmp(r->lora_name, name) == 0))
            return 1;
    }
    return 0;
}

static void check_algo_model(cfg_decoder_t *d, const model_index_t *ix, const vsr_decision_conf_t *dec,
                             char *const *name, const char *what)
{
    if (*name == NULL || vsr__cfg_index_find(&ix->models, *name, NULL) != NULL || is_decision_model(dec, *name))
        return;
    vsr__cfg_mark_error(d, vsr__cfg_mark_find(d, name),
                        "%s %s is neither a model of providers.models nor one of the decision's modelRefs", what,
                        q(d, *name));
}

/* A graph's call and parallel nodes: their models as above; without models
 * they call the decision's modelRefs, so the decision needs some, and a
 * parallel's first_k and min_success stay within the calls it makes. */
typedef struct {
    cfg_decoder_t *d;
    const model_index_t *ix;
    const vsr_decision_conf_t *dec;
} graph_check_t;

static void check_graph_node(const vsr_gnode_conf_t *n, void *arg)
{
    graph_check_t *g = arg;
    if (n->kind != VSR_GNODE_CALL && n->kind != VSR_GNODE_PARALLEL)
        return;
    const char *what = n->kind == VSR_GNODE_CALL ? "algorithm.graph: the call's model"
                                                 : "algorithm.graph: the parallel's model";
    for (size_t i = 0; i < n->models.n; i++)
        check_algo_model(g->d, g->ix, g->dec, &n->models.items[i], what);
    if (n->models.n > 0)
        return;
    size_t refs = g->dec->n_model_refs;
    const char *kind = n->kind == VSR_GNODE_CALL ? "call" : "parallel";
    if (refs == 0) {
        vsr__cfg_error(g->d->dg, n->line, n->col, "algorithm.graph: a %s without models calls the decision's "
                       "modelRefs, and decision %s has none", kind, q(g->d, g->dec->name ? g->dec->name : "?"));
        return;
    }
    if (n->kind != VSR_GNODE_PARALLEL || n->count > 0)
        return;
    if (refs > VSR_GRAPH_MAX_FANOUT)
        vsr__cfg_error(g->d->dg, n->line, n->col, "algorithm.graph: a parallel without models or count makes one "
                       "call per modelRef: at most %u, the decision has %zu", VSR_GRAPH_MAX_FANOUT, refs);
    else if (n->first_k > refs || n->min_success > refs)
        vsr__cfg_error(g->d->dg, n->line, n->col, "algorithm.graph: %s must not exceed the parallel's %zu calls "
                       "(one per modelRef), got %llu", n->first_k > refs ? "first_k" : "min_success", refs,
                       (unsigned long long)(n->first_k > refs ? n->first_k : n->min_success));
}

static void check_algo_models(cfg_decoder_t *d, const model_index_t *ix, vsr_decision_conf_t *dec)
{
    const vsr_algo_conf_t *a = &dec->algo;
    switch (a->kind) {
    case VSR_ALGO_STATIC:
    case VSR_ALGO_CONFIDENCE:
    case VSR_ALGO_RATINGS:
    case VSR_ALGO_LATENCY_AWARE:
    case VSR_ALGO_MULTI_FACTOR:
    case VSR_ALGO_ROUTER_DC:
        break;
    case VSR_ALGO_PROMPT:
        check_algo_model(d, ix, dec, &a->u.prompt.model, "algorithm.prompt.model");
        break;
    case VSR_ALGO_REMOM:
        check_algo_model(d, ix, dec, &a->u.remom.synthesis_model, "algorithm.remom.synthesis_model");
        break;
    case VSR_ALGO_FUSION: {
        vsr_algo_fusion_conf_t *f = &dec->algo.u.fusion;
        /* ref §3.6: the quorum is at most the panel */
        size_t panel_size = f->analysis_models.n ? f->analysis_models.n : dec->n_model_refs;
        if (f->min_successful_responses > panel_size)
            f->min_successful_responses = panel_size;
        for (size_t i = 0; i < f->analysis_models.n; i++)
            check_algo_model(d, ix, dec, &f->analysis_models.items[i], "algorithm.fusion.analysis_models:");
        check_algo_model(d, ix, dec, &f->model, "algorithm.fusion.model");
        for (size_t i = 0; i < f->n_analysis_overrides; i++) {
            char *const *m = &f->analysis_overrides[i].model;
            if (*m == NULL)
                continue;
            int panel = 0;
            for (size_t j = 0; j < f->analysis_models.n && !panel; j++)
                panel = strcmp(f->analysis_models.items[j], *m) == 0;
            if (f->analysis_models.n == 0)
                panel = is_decision_model(dec, *m);
            if (!panel)
                vsr__cfg_mark_error(d, vsr__cfg_mark_find(d, m),
                                    "algorithm.fusion.analysis_overrides[].model %s is not a panel model (%s)",
                                    q(d, *m), f->analysis_models.n ? "analysis_models" : "the decision's modelRefs");
        }
        if (f->quorum_fallback_target != NULL && vsr__cfg_index_find(&ix->models, f->quorum_fallback_target, NULL) == NULL)
            vsr__cfg_mark_error(d, vsr__cfg_mark_find(d, &f->quorum_fallback_target),
                                "algorithm.fusion.quorum_fallback_target %s is not defined in providers.models",
                                q(d, f->quorum_fallback_target));
        break;
    }
    case VSR_ALGO_WORKFLOWS: {
        const vsr_algo_workflows_conf_t *w = &a->u.workflows;
        check_algo_model(d, ix, dec, &w->planner_model, "algorithm.workflows.planner.model");
        check_algo_model(d, ix, dec, &w->final_model, "algorithm.workflows.final.model");
        for (size_t i = 0; i < w->n_roles; i++) {
            check_algo_model(d, ix, dec, &w->roles[i].model, "algorithm.workflows.roles[].model");
            for (size_t j = 0; j < w->roles[i].models.n; j++)
                check_algo_model(d, ix, dec, &w->roles[i].models.items[j], "algorithm.workflows.roles[].models:");
        }
        break;
    }
    case VSR_ALGO_GRAPH: {
        graph_check_t g = {d, ix, dec};
        vsr__cfg_graph_walk(&a->u.graph, check_graph_node, &g);
        break;
    }
    }
    /* ref §3.1: confidence and ratings need a choice; with one modelRef the
     * request goes to it as with static */
    if ((a->kind == VSR_ALGO_CONFIDENCE || a->kind == VSR_ALGO_RATINGS || a->kind == VSR_ALGO_LATENCY_AWARE ||
         a->kind == VSR_ALGO_MULTI_FACTOR || a->kind == VSR_ALGO_ROUTER_DC ||
         a->kind == VSR_ALGO_PROMPT) && dec->n_model_refs < 2 && dec->name)
        vsr__cfg_warn(d, "decision %s: algorithm %s needs more than one modelRef; its first modelRef answers alone",
                      q(d, dec->name), dec->algorithm);
}

static void check_model_refs(cfg_decoder_t *d, config_box_t *box)
{
    vsr_config_t *c = &box->conf;
    /* with no provider models too: a default model or a modelRef then names nothing */
    for (size_t i = 0; i < c->n_models; i++)
        if (c->models[i].name == NULL)
            return;
    model_index_t ix;
    memset(&ix, 0, sizeof(ix));
    ix.cards_ok = 1;
    for (size_t i = 0; i < c->n_models; i++)
        vsr__cfg_index_add(&ix.models, c->models[i].name, i);
    for (size_t i = 0; i < c->n_model_cards; i++) {
        const vsr_model_card_conf_t *card = &c->model_cards[i];
        ix.cards_ok &= card->name != NULL;
        vsr__cfg_index_add(&ix.cards, card->name, i);
        for (size_t j = 0; j < card->loras.n; j++)
            vsr__cfg_index_add(&ix.loras, card->loras.items[j], i);
    }
    vsr__cfg_index_sort(&ix.models);
    vsr__cfg_index_sort(&ix.cards);
    vsr__cfg_index_sort(&ix.loras);
    if (c->n_model_cards > 1) {
        const char **keys = vsr_malloc(c->n_model_cards * sizeof(*keys));
        const void **marks = vsr_malloc(c->n_model_cards * sizeof(*marks));
        for (size_t i = 0; i < c->n_model_cards; i++) {
            keys[i] = c->model_cards[i].name;
            marks[i] = &c->model_cards[i];
        }
        vsr__cfg_check_unique_marked(d, "model card name", keys, marks, c->n_model_cards);
        vsr_free(keys);
        vsr_free(marks);
    }
    check_default_model(d, c, &ix);
    check_recipe_refs(d, c, &ix, &box->routing);
    for (size_t i = 0; i < box->n_recipe_list; i++)
        check_recipe_refs(d, c, &ix, &box->recipe_list[i]);
    vsr__cfg_index_free(&ix.models);
    vsr__cfg_index_free(&ix.cards);
    vsr__cfg_index_free(&ix.loras);
}

/* ---- names clients send ------------------------------------------------------------- */

/* The default list is ["vllm-sr/auto", "auto", auto_model_name ("MoM")];
 * an explicit auto_model_names replaces it (ref §1.11). */
static void set_auto_names(cfg_decoder_t *d, config_box_t *box)
{
    vsr_config_t *c = &box->conf;
    if (box->has_auto_model_names && box->auto_model_names.n > 0) {
        c->auto_model_names = box->auto_model_names;
        return;
    }
    vsr_slice_t custom = vsr_slice_trim(vsr_slice_cstr(box->auto_model_name));
    const char *names[3] = {"vllm-sr/auto", "auto", NULL};
    names[2] = custom.len ? vsr_pool_strndup(d->pool, custom.p, custom.len) : "MoM";
    c->auto_model_names.items = vsr_pool_alloc(d->pool, 3 * sizeof(char *));
    c->auto_model_names.n = 0;
    for (size_t i = 0; i < 3; i++) {
        int dup = 0;
        for (size_t j = 0; j < c->auto_model_names.n; j++)
            dup |= strcmp(c->auto_model_names.items[j], names[i]) == 0;
        if (!dup)
            c->auto_model_names.items[c->auto_model_names.n++] = vsr__cfg_strdup(d, names[i]);
    }
}

typedef enum { NAME_AUTO, NAME_ENTRYPOINT, NAME_PROVIDER } name_kind_t;

typedef struct {
    const char *name;
    name_kind_t kind;
    uint32_t line, col; /* 0: not written in the document (a default) */
    size_t order;
} client_name_t;

static int client_name_cmp(const void *pa, const void *pb)
{
    const client_name_t *a = pa, *b = pb;
    int c = strcmp(a->name, b->name);
    if (c != 0)
        return c;
    if (a->line != b->line)
        return a->line < b->line ? -1 : 1;
    if (a->col != b->col)
        return a->col < b->col ? -1 : 1;
    return a->order < b->order ? -1 : a->order > b->order;
}

static int position_cmp(const void *pa, const void *pb)
{
    const client_name_t *a = pa, *b = pb;
    if (a->line != b->line)
        return a->line < b->line ? -1 : 1;
    return a->col < b->col ? -1 : a->col > b->col;
}

static void add_client_name(cfg_decoder_t *d, client_name_t *v, size_t *n, const char *name, name_kind_t kind,
                            const void *mark)
{
    if (name == NULL)
        return;
    const cfg_mark_t *m = vsr__cfg_mark_find(d, mark);
    /* only default auto names come from nowhere; anything else without a
     * position sat in a list with an error (reported) */
    if (m == NULL && kind != NAME_AUTO)
        return;
    v[*n] = (client_name_t){name, kind, m ? m->line : 0, m ? m->col : 0, *n};
    (*n)++;
}

/* Auto names, entrypoint names and provider model names are all values of
 * a request's `model`: one name must mean one thing (ref §1.12). */
static void check_client_names(cfg_decoder_t *d, config_box_t *box)
{
    vsr_config_t *c = &box->conf;
    size_t total = c->auto_model_names.n + c->n_models;
    for (size_t i = 0; i < c->n_entrypoints; i++)
        total += c->entrypoints[i].model_names.n;
    if (total < 2)
        return;
    client_name_t *v = vsr_malloc(total * sizeof(*v));
    size_t n = 0;
    for (size_t i = 0; i < c->auto_model_names.n; i++)
        add_client_name(d, v, &n, c->auto_model_names.items[i], NAME_AUTO, &c->auto_model_names.items[i]);
    for (size_t i = 0; i < c->n_entrypoints; i++)
        for (size_t j = 0; j < c->entrypoints[i].model_names.n; j++)
            add_client_name(d, v, &n, c->entrypoints[i].model_names.items[j], NAME_ENTRYPOINT,
                            &c->entrypoints[i].model_names.items[j]);
    for (size_t i = 0; i < c->n_models; i++)
        add_client_name(d, v, &n, c->models[i].name, NAME_PROVIDER, &c->models[i].name);
    qsort(v, n, sizeof(*v), client_name_cmp);
    /* report in document order */
    client_name_t *dups = vsr_malloc(n * sizeof(*dups) + 1);
    size_t nd = 0;
    for (size_t i = 1, first = 0; i < n; i++) {
        if (strcmp(v[i].name, v[first].name) != 0) {
            first = i;
            continue;
        }
        /* provider duplicates are reported with the providers; repeated
         * auto names are dropped like the reference does */
        if (v[i].kind == v[first].kind && v[i].kind != NAME_ENTRYPOINT)
            continue;
        /* a provider model named like an auto name: the reference accepts it,
         * and the auto name wins (requests naming it are routed) */
        if ((v[i].kind == NAME_PROVIDER && v[first].kind == NAME_AUTO) ||
            (v[i].kind == NAME_AUTO && v[first].kind == NAME_PROVIDER)) {
            const client_name_t *prov = v[i].kind == NAME_PROVIDER ? &v[i] : &v[first];
            if (prov->line != 0)
                vsr__cfg_warn(d, "%s:%u:%u: model name %s is also an auto model name: requests naming it are routed "
                                 "by the default recipe, never passed through to this model", d->dg->file, prov->line,
                              prov->col, q(d, prov->name));
            continue;
        }
        dups[nd] = v[i];
        dups[nd].order = first;
        nd++;
    }
    qsort(dups, nd, sizeof(*dups), position_cmp);
    for (size_t i = 0; i < nd; i++) {
        const client_name_t *first = &v[dups[i].order];
        static const char *const what[] = {"an auto model name", "published by an entrypoint", "a provider model name"};
        if (first->line == 0)
            vsr__cfg_error(d->dg, dups[i].line, dups[i].col,
                           "model name %s is already an auto model name (a default of global.router.auto_model_names)",
                           q(d, dups[i].name));
        else
            vsr__cfg_error(d->dg, dups[i].line, dups[i].col, "model name %s is already %s (at %u:%u)",
                           q(d, dups[i].name), what[first->kind], first->line, first->col);
    }
    vsr_free(dups);
    vsr_free(v);
}

static void check_entrypoints(cfg_decoder_t *d, config_box_t *box, long *index)
{
    vsr_config_t *c = &box->conf;
    int recipes_ok = 1;
    cfg_index_t names = {0};
    for (size_t i = 0; i < box->n_recipe_list; i++) {
        recipes_ok &= box->recipe_list[i].name != NULL;
        vsr__cfg_index_add(&names, box->recipe_list[i].name, i + 1);
    }
    vsr__cfg_index_add(&names, "default", 0); /* reserved: a recipe using it was reported */
    vsr__cfg_index_sort(&names);
    for (size_t i = 0; i < c->n_entrypoints; i++) {
        const vsr_entrypoint_conf_t *e = &c->entrypoints[i];
        const cfg_name_t *r = e->recipe ? vsr__cfg_index_find(&names, e->recipe, NULL) : NULL;
        index[i] = r ? (long)r->index : -1;
        if (e->recipe != NULL && r == NULL && recipes_ok)
            vsr__cfg_mark_error(d, vsr__cfg_mark_find(d, &e->recipe),
                                "recipe %s is not defined (recipes[].name, or \"default\" for the top-level routing)",
                                q(d, e->recipe));
    }
    vsr__cfg_index_free(&names);
}

/* ---- fallback layers ---------------------------------------------------------------- */

/* Checks the merged policy where `layer` applies; a problem is reported at
 * the value of this layer that causes it (one inherited from above was
 * reported there). */
static void check_fallback_layer(cfg_decoder_t *d, const vsr_fallback_conf_t *merged, const vsr_fallback_conf_t *layer)
{
    if (!layer->present)
        return;
    if (merged->total_timeout_ms > 0 && merged->per_attempt_timeout_ms > merged->total_timeout_ms) {
        const void *k = layer->has_per_attempt_timeout ? (const void *)&layer->per_attempt_timeout_ms
                        : layer->has_total_timeout     ? (const void *)&layer->total_timeout_ms
                                                       : NULL;
        if (k != NULL)
            vsr__cfg_mark_error(d, vsr__cfg_mark_find(d, k),
                                "fallback per_attempt_timeout (%llums) must not exceed total_timeout (%llums)",
                                (unsigned long long)merged->per_attempt_timeout_ms,
                                (unsigned long long)merged->total_timeout_ms);
    }
    if (merged->enabled && merged->max_attempts == 0) {
        const void *k = layer->has_max_attempts ? (const void *)&layer->max_attempts
                        : layer->has_enabled    ? (const void *)&layer->enabled
                                                : NULL;
        if (k != NULL)
            vsr__cfg_mark_error(d, vsr__cfg_mark_find(d, k), "fallback max_attempts must be at least 1 when fallback "
                                                             "is enabled");
    }
}

static void check_recipe_fallbacks(cfg_decoder_t *d, const vsr_fallback_conf_t *global, const vsr_recipe_conf_t *r)
{
    vsr_fallback_conf_t in_recipe = *global;
    vsr__cfg_fallback_merge(&in_recipe, &r->fallback);
    check_fallback_layer(d, &in_recipe, &r->fallback);
    for (size_t i = 0; i < r->n_decisions; i++) {
        vsr_fallback_conf_t in_decision = in_recipe;
        vsr__cfg_fallback_merge(&in_decision, &r->decisions[i].fallback);
        check_fallback_layer(d, &in_decision, &r->decisions[i].fallback);
    }
}

static void check_fallbacks(cfg_decoder_t *d, config_box_t *box)
{
    vsr_fallback_conf_t global;
    vsr__cfg_fallback_defaults(box, &global);
    vsr__cfg_fallback_merge(&global, &box->conf.global_fallback);
    check_fallback_layer(d, &global, &box->conf.global_fallback);
    check_recipe_fallbacks(d, &global, &box->routing);
    for (size_t i = 0; i < box->n_recipe_list; i++)
        check_recipe_fallbacks(d, &global, &box->recipe_list[i]);
}

/* ---- management API ------------------------------------------------------------------ */

static int is_loopback(const char *addr)
{
    unsigned char bin[16];
    if (inet_pton(AF_INET, addr, bin) == 1)
        return bin[0] == 127;
    if (inet_pton(AF_INET6, addr, bin) == 1) {
        static const unsigned char v6_loopback[16] = {[15] = 1};
        return memcmp(bin, v6_loopback, 16) == 0;
    }
    return 0;
}

static int is_wildcard(const char *canon)
{
    return strcmp(canon, "0.0.0.0") == 0 || strcmp(canon, "::") == 0;
}

/* Runs only when configured (see config.h); bound to loopback unless
 * remote_exposure says otherwise (serving it then also needs a token: the
 * composition root checks that, as the token may come from the command line). */
static void check_management(cfg_decoder_t *d, config_box_t *box)
{
    vsr_config_t *c = &box->conf;
    if (!box->has_management_enabled)
        c->management_enabled = box->has_management;
    if (!c->management_enabled || c->management_address == NULL)
        return;
    if (!box->management_remote_exposure && !is_loopback(c->management_address))
        vsr__cfg_mark_error(d, vsr__cfg_mark_find(d, &c->management_address),
                            "binding the management API to %s makes it reachable from other hosts: it needs "
                            "remote_exposure: true (and a management token)",
                            c->management_address);
    char mine[64], theirs[64];
    if (vsr__cfg_canonical_ip(c->management_address, mine, sizeof(mine)) != VSR_OK)
        return;
    for (size_t i = 0; i < c->n_listeners; i++) {
        const vsr_listener_conf_t *l = &c->listeners[i];
        if (l->port != c->management_port || l->address == NULL ||
            vsr__cfg_canonical_ip(l->address, theirs, sizeof(theirs)) != VSR_OK)
            continue;
        if (strcmp(mine, theirs) == 0 || is_wildcard(mine) || is_wildcard(theirs)) {
            const cfg_mark_t *at = vsr__cfg_mark_find(d, &c->management_port);
            const cfg_mark_t *lp = vsr__cfg_mark_find(d, &l->port);
            vsr__cfg_mark_error(d, at, "management_api port %u is also used by listener %s (at %u:%u)",
                                (unsigned)c->management_port, l->name ? q(d, l->name) : "?", lp ? lp->line : 1,
                                lp ? lp->col : 1);
        }
    }
}

/* ---- assembly ------------------------------------------------------------------------- */

/* ---- remote classifiers: global.model_catalog.external[] ------------------------------ */

/* One family's remote classifier: its external entry (by name, or for the
 * prompt guard by model_role guardrail, as the reference finds it) and the
 * settings its signals copy. */
static void resolve_remote(cfg_decoder_t *d, const vsr_config_t *c, vsr_remote_cls_conf_t *r, const char *family,
                           const char *where)
{
    if (r->protocol == 0)
        return;
    const cfg_mark_t *at = vsr__cfg_mark_find(d, &r->protocol);
    const vsr_external_conf_t *e = NULL;
    if (r->model == NULL) { /* prompt_guard.protocol */
        for (size_t i = 0; i < c->n_externals && e == NULL; i++)
            if (c->externals[i].role && strcmp(c->externals[i].role, "guardrail") == 0)
                e = &c->externals[i];
        if (e == NULL) {
            vsr__cfg_mark_error(d, at, "%s needs an entry in global.model_catalog.external with model_role: "
                                       "guardrail", where);
            return;
        }
        r->model = e->name;
    } else if ((e = vsr_config_find_external(c, vsr_slice_cstr(r->model))) == NULL) {
        vsr__cfg_mark_error(d, at, "%s: model %s is not declared in global.model_catalog.external[].name", where,
                            q(d, r->model));
        return;
    }
    if (e->model.n_backends == 0) {
        if (e->address == NULL) /* else its endpoint failed to decode: reported */
            vsr__cfg_mark_error(d, at, "%s: external model %s has no llm_endpoint", where, q(d, e->name));
        return;
    }
    if (r->timeout_ms == 0)
        r->timeout_ms = e->timeout_ms;
    r->max_request_bytes = e->max_request_bytes;
    r->runtime_model = e->model_name ? e->model_name : vsr__cfg_strdup(d, family);
}

static void check_externals(cfg_decoder_t *d, config_box_t *box)
{
    vsr_config_t *c = &box->conf;
    size_t n = c->n_externals;
    if (n > 0) {
        const char **keys = vsr_malloc(n * sizeof(*keys));
        const void **marks = vsr_malloc(n * sizeof(*marks));
        for (size_t i = 0; i < n; i++) {
            keys[i] = c->externals[i].name;
            marks[i] = &c->externals[i];
        }
        vsr__cfg_check_unique_marked(d, "external model name", keys, marks, n);
        vsr_free(keys);
        vsr_free(marks);
    }
    vsr_modules_conf_t *m = &c->modules;
    resolve_remote(d, c, &m->guard_remote, "jailbreak", "global.model_catalog.modules.prompt_guard.protocol");
    resolve_remote(d, c, &m->domain_remote, "domain", "global.model_catalog.modules.classifier.domain.backend");
    resolve_remote(d, c, &m->pii_remote, "pii", "global.model_catalog.modules.classifier.pii.backend");
}

void vsr__cfg_check_document(cfg_decoder_t *d, config_box_t *box)
{
    vsr_config_t *c = &box->conf;

    check_recipe_names(d, box);
    box->routing.name = vsr__cfg_strdup(d, "default");
    for (size_t i = 0; i < box->n_recipe_list; i++) {
        vsr_recipe_conf_t *r = &box->recipe_list[i];
        if (!r->has_strategy)
            r->strategy_confidence = box->routing.strategy_confidence;
    }
    check_model_refs(d, box);
    set_auto_names(d, box);
    long *ep_index = c->n_entrypoints ? vsr_malloc(c->n_entrypoints * sizeof(long)) : NULL;
    check_entrypoints(d, box, ep_index);
    check_client_names(d, box);
    check_fallbacks(d, box);
    check_management(d, box);
    check_externals(d, box);
    vsr__cfg_tools_resolve(d, box);
    vsr__cfg_hallucination_resolve(d, box);
    vsr__cfg_resolve_projection_inputs(d, box);

    /* recipes[0] is the top-level block; the rest in document order.  Done
     * last: the checks above locate values by their decoded addresses. */
    c->n_recipes = 1 + box->n_recipe_list;
    c->recipes = vsr_pool_alloc(d->pool, c->n_recipes * sizeof(*c->recipes));
    c->recipes[0] = box->routing;
    for (size_t i = 0; i < box->n_recipe_list; i++)
        c->recipes[i + 1] = box->recipe_list[i];
    for (size_t i = 0; i < c->n_entrypoints; i++)
        c->entrypoints[i].resolved = ep_index[i] >= 0 ? &c->recipes[ep_index[i]] : NULL;
    vsr_free(ep_index);
}

/* ---- what a gateway mode can carry ------------------------------------------------ */

size_t vsr_config_check_extproc(const vsr_config_t *c, vsr_buf_t *err)
{
    size_t n = 0;
    for (size_t i = 0; i < c->n_recipes; i++) {
        const vsr_recipe_conf_t *rc = &c->recipes[i];
        for (size_t j = 0; j < rc->n_decisions; j++) {
            const vsr_decision_conf_t *d = &rc->decisions[j];
            for (size_t k = 0; k < d->n_plugins; k++) {
                if (d->plugins[k].kind != VSR_PLUGIN_SHADOW_DISPATCH || !d->plugins[k].enabled)
                    continue;
                n++;
                vsr_buf_printf(err,
                               "%s%s%sdecision \"%s\": shadow_dispatch: vsr sends shadow copies only with "
                               "--gateway standalone (in --gateway extproc Envoy sends the request upstream)\n",
                               strcmp(rc->name, "default") ? "recipe \"" : "", strcmp(rc->name, "default") ? rc->name : "",
                               strcmp(rc->name, "default") ? "\": " : "", d->name);
            }
            if (!d->has_reliability)
                continue;
            const vsr_reliability_conf_t *r = &d->reliability;
            /* Envoy takes total_timeout, per_try_timeout, retry_count, retry_on
             * and retriable_status_codes per request (x-envoy-*); not these */
            static const char *const names[] = {"idle_timeout", "first_byte_timeout", "retry_back_off_base",
                                                "retry_back_off_max", "retry_after_max"};
            const int set[] = {r->has_idle_timeout, r->has_first_byte_timeout, r->has_retry_back_off_base,
                               r->has_retry_back_off_max, r->has_retry_after_max};
            for (size_t k = 0; k < VSR_ARRAY_LEN(names); k++) {
                if (!set[k])
                    continue;
                n++;
                vsr_buf_printf(err,
                               "%s%s%sdecision \"%s\": reliability.%s: Envoy cannot apply it per request in "
                               "--gateway extproc (only total_timeout, per_try_timeout, retry_count, retry_on and "
                               "retriable_status_codes); serve with --gateway standalone, or set it on Envoy's "
                               "route\n",
                               strcmp(rc->name, "default") ? "recipe \"" : "", strcmp(rc->name, "default") ? rc->name : "",
                               strcmp(rc->name, "default") ? "\": " : "", d->name, names[k]);
            }
        }
    }
    return n;
}
