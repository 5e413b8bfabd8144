/*
 * cfg_routing.c — the routing half of v0.3: the top-level `routing` block
 * (recipe "default"), `recipes[]`, their signals (ref §1.9), decisions and
 * rule trees (ref §1.11), decision plugins (ref §2), and `entrypoints[]`
 * (ref §1.12).
 *
 * Capability checks live here too: a known feature that vsr does not
 * implement yet fails at its node with "... is not supported yet" when the
 * document enables it, and is accepted when it is absent, empty or (for
 * plugins) explicitly disabled.  Unknown names (a misspelt family, plugin,
 * algorithm or condition type) are plain errors.
 *
 * Checks inside one recipe (a rule leaf names a declared signal, decision
 * and signal names are unique) run when the recipe is decoded; checks
 * against other sections (models, cards, recipes) run in cfg_check.c.  The
 * signal families themselves are in cfg_signals.c.
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

#include "config/cfg_internal.h"

#define MAX_RULE_DEPTH 32

static const char *quote_str(cfg_decoder_t *d, const char *s)
{
    return vsr__cfg_quote(d->pool, s, strlen(s));
}

/* Prose that may span lines (system prompts, messages): non-empty, no NUL. */
int vsr_config_param_size(const char *s, double *out)
{
    if (!s)
        return VSR_ERR_INVALID;
    vsr_slice_t t = vsr_slice_cstr(s);
    if (t.len > 32)
        return VSR_ERR_INVALID;
    t = vsr_slice_trim(t);
    /* Checked by hand (strtod alone would take signs, exponents, hex, inf),
     * then converted by strtod for a correctly rounded value. */
    char num[33];
    size_t i = 0;
    while (i < t.len && t.p[i] >= '0' && t.p[i] <= '9')
        i++;
    if (i == 0)
        return VSR_ERR_INVALID;
    if (i < t.len && t.p[i] == '.') {
        size_t f = ++i;
        while (i < t.len && t.p[i] >= '0' && t.p[i] <= '9')
            i++;
        if (i == f)
            return VSR_ERR_INVALID;
    }
    memcpy(num, t.p, i);
    num[i] = '\0';
    double mult = 1;
    if (i < t.len) {
        switch (t.p[i]) {
        case 'k': case 'K': mult = 1e3; break;
        case 'm': case 'M': mult = 1e6; break;
        case 'b': case 'B': mult = 1e9; break;
        case 't': case 'T': mult = 1e12; break;
        default: return VSR_ERR_INVALID;
        }
        i++;
    }
    if (i != t.len)
        return VSR_ERR_INVALID;
    *out = strtod(num, NULL) * mult;
    return VSR_OK;
}

/* Kept as written and read once here: requests use param_size_value. */
static int decode_param_size(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj)
{
    if (vsr__cfg_string(d, f, val, obj) != 0)
        return -1;
    vsr_model_card_conf_t *card = obj;
    card->has_param_size_value = vsr_config_param_size(card->param_size, &card->param_size_value) == VSR_OK;
    return 0;
}

static int decode_prose(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj)
{
    const char *s = vsr__cfg_get_text(d, val);
    if (s == NULL)
        return -1;
    if (val->len == 0) {
        vsr__cfg_node_error(d, val, "%s must not be empty", f->key);
        return -1;
    }
    *(char **)((char *)obj + f->offset) = vsr_pool_strndup(d->pool, s, val->len);
    return 0;
}

/* ==== rule trees ================================================================ */

/* Fills *out from node n.  Returns 0, -1 (reported), or 1 for the empty root
 * (no rule: the decision always matches). */
static int decode_rule(cfg_decoder_t *d, const cfg_node_t *n, vsr_rule_conf_t *out, int depth, int root)
{
    if (n->kind != CFG_NODE_MAP) {
        vsr__cfg_node_error(d, n, "expected a condition (a mapping), got %s", vsr__cfg_node_what(n));
        return -1;
    }
    if (depth > MAX_RULE_DEPTH) {
        vsr__cfg_node_error(d, n, "rules are nested more than %d levels deep", MAX_RULE_DEPTH);
        return -1;
    }
    const cfg_node_t *type = NULL, *name = NULL, *op = NULL, *conds = NULL, *classifier_key = NULL, *on_error_key = NULL;
    const cfg_node_t *label = NULL, *predicate = NULL;
    int rc = 0;
    for (size_t i = 0; i < n->n; i++) {
        const cfg_node_t *k = n->items[2 * i], *v = n->items[2 * i + 1];
        vsr_slice_t key = vsr_slice(k->str, k->len);
        if (k->kind != CFG_NODE_SCALAR || k->type != CFG_STR) {
            vsr__cfg_node_error(d, k, "expected a string key, got %s", vsr__cfg_node_what(k));
            rc = -1;
        } else if (vsr_slice_eq_cstr(key, "type")) {
            type = v;
        } else if (vsr_slice_eq_cstr(key, "name")) {
            name = v;
        } else if (vsr_slice_eq_cstr(key, "operator")) {
            op = v;
        } else if (vsr_slice_eq_cstr(key, "conditions")) {
            conds = v;
        } else if (vsr_slice_eq_cstr(key, "label") || vsr_slice_eq_cstr(key, "predicate") ||
                   vsr_slice_eq_cstr(key, "on_error")) {
            if (vsr_slice_eq_cstr(key, "on_error")) {
                if (on_error_key == NULL)
                    on_error_key = k;
            } else {
                if (classifier_key == NULL)
                    classifier_key = k;
                if (vsr_slice_eq_cstr(key, "label"))
                    label = v;
                else
                    predicate = v;
            }
            if (vsr_slice_eq_cstr(key, "on_error")) {
                static const char *const policies[] = {"match", "no_match", NULL};
                cfg_field_t f = {.key = "on_error", .choices = policies};
                int which;
                if (vsr__cfg_choice(d, &f, v, &which) != 0)
                    rc = -1;
                else
                    out->on_error = which == 0 ? VSR_ON_ERROR_MATCH : VSR_ON_ERROR_NO_MATCH;
            }
        } else if (vsr_slice_eq_cstr(key, "on_unknown")) {
            static const char *const policies[] = {"no_match", "fail_request", NULL};
            cfg_field_t f = {.key = "on_unknown", .choices = policies};
            int which;
            if (!root) {
                vsr__cfg_node_error(d, k, "on_unknown only applies to the root of rules");
                rc = -1;
            } else if (vsr__cfg_choice(d, &f, v, &which) != 0) {
                rc = -1;
            } else {
                out->on_unknown_fail = which == 1; /* a signal that could not be computed fails the request */
            }
        } else {
            static const char *const rule_keys[] = {"type",  "name",     "operator",  "conditions",
                                                    "label", "predicate", "on_error", "on_unknown"};
            vsr__cfg_unknown_key(d, k, rule_keys, VSR_ARRAY_LEN(rule_keys), NULL);
            rc = -1;
        }
    }
    out->line = n->line;
    out->col = n->col;

    if (type != NULL) {
        out->kind = VSR_RULE_LEAF;
        if (op != NULL || conds != NULL) {
            vsr__cfg_node_error(d, n, "a condition is either a leaf (type, name) or a combination (operator, "
                                      "conditions), not both");
            return -1;
        }
        cfg_field_t tf = {.key = "type"}, nf = {.key = "name"};
        const char *t = vsr__cfg_get_string(d, &tf, type);
        if (t == NULL)
            return -1;
        int status = vsr__cfg_condition_type(t);
        if (vsr__cfg_condition_refusal(t)) {
            vsr__cfg_node_error(d, type, "%s", vsr__cfg_condition_refusal(t));
            return -1;
        }
        if (status < 0) {
            vsr__cfg_node_error(d, type, "unknown condition type %s", vsr__cfg_quote(d->pool, t, type->len));
            return -1;
        }
        if (status == 0) {
            vsr__cfg_node_error(d, type, "condition type \"%s\" is not supported yet", t);
            return -1;
        }
        if (classifier_key == NULL && on_error_key != NULL && !vsr__cfg_condition_model_backed(t))
            classifier_key = on_error_key; /* on_error: model-backed conditions (classifiers, embeddings) only */
        if (classifier_key != NULL && strcmp(t, "classifier") == 0 && classifier_key != on_error_key) {
            /* label and predicate: classifier conditions */
            cfg_field_t lf = {.key = "label"};
            const char *l = label ? vsr__cfg_get_string(d, &lf, label) : NULL;
            if (label && l == NULL)
                return -1;
            out->label = l ? vsr__cfg_strdup(d, l) : NULL;
            if (predicate && vsr__cfg_decode_predicate(d, predicate, &out->predicate) != 0)
                return -1;
            out->has_predicate = predicate != NULL;
            classifier_key = NULL;
        }
        if (classifier_key != NULL) {
            vsr__cfg_node_error(d, classifier_key, "%s only applies to classifier conditions", classifier_key->str);
            return -1;
        }
        if (name == NULL) {
            vsr__cfg_node_error(d, n, "missing required key \"name\"");
            return -1;
        }
        const char *nm = vsr__cfg_get_string(d, &nf, name);
        if (nm == NULL)
            return -1;
        out->type = vsr__cfg_strdup(d, t);
        out->name = vsr__cfg_strdup(d, nm);
        return rc;
    }
    if (name != NULL || classifier_key != NULL || on_error_key != NULL) {
        vsr__cfg_node_error(d, n, "a leaf condition needs a type (name, label, predicate and on_error only apply to "
                                  "leaf conditions)");
        return -1;
    }
    if (op == NULL && conds == NULL) {
        if (root)
            return rc == 0 ? 1 : rc;
        vsr__cfg_node_error(d, n, "a combination needs an operator and at least one condition");
        return -1;
    }

    /* operators are matched case-insensitively and trimmed; absent = AND */
    vsr_rule_kind_t kind = VSR_RULE_AND;
    if (op != NULL) {
        if (op->kind != CFG_NODE_SCALAR || op->type != CFG_STR) {
            vsr__cfg_node_error(d, op, "expected an operator (AND, OR or NOT), got %s", vsr__cfg_node_what(op));
            return -1;
        }
        vsr_slice_t o = vsr_slice_trim(vsr_slice(op->str, op->len));
        if (vsr_slice_case_eq_cstr(o, "AND")) {
            kind = VSR_RULE_AND;
        } else if (vsr_slice_case_eq_cstr(o, "OR")) {
            kind = VSR_RULE_OR;
        } else if (vsr_slice_case_eq_cstr(o, "NOT")) {
            kind = VSR_RULE_NOT;
        } else {
            vsr__cfg_node_error(d, op, "unsupported operator %s (expected AND, OR or NOT)",
                                vsr__cfg_quote(d->pool, op->str, op->len));
            return -1;
        }
    }
    out->kind = kind;
    size_t n_children = 0;
    if (conds != NULL && !(conds->kind == CFG_NODE_SCALAR && conds->type == CFG_NULL)) {
        if (conds->kind != CFG_NODE_SEQ) {
            vsr__cfg_node_error(d, conds, "expected a list of conditions, got %s", vsr__cfg_node_what(conds));
            return -1;
        }
        n_children = conds->n;
    }
    const cfg_node_t *at = op ? op : n;
    static const char *const names[] = {"", "AND", "OR", "NOT"};
    if (kind == VSR_RULE_NOT && n_children != 1) {
        vsr__cfg_node_error(d, at, "NOT needs exactly one condition, got %zu", n_children);
        return -1;
    }
    /* only a root AND may be empty: it matches everything; an empty OR never
     * matches, which is never what was meant */
    if (n_children == 0 && !(root && kind == VSR_RULE_AND)) {
        vsr__cfg_node_error(d, at, "%s needs at least one condition", names[kind]);
        return -1;
    }
    if (n_children > 0) {
        out->children = vsr_pool_alloc(d->pool, n_children * sizeof(*out->children));
        memset(out->children, 0, n_children * sizeof(*out->children));
        out->n_children = n_children;
    }
    for (size_t i = 0; i < n_children; i++)
        if (decode_rule(d, conds->items[i], &out->children[i], depth + 1, 0) != 0)
            rc = -1;
    return rc;
}

static int decode_rules(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj)
{
    vsr_decision_conf_t *dec = obj;
    vsr_rule_conf_t *r = vsr_pool_alloc(d->pool, sizeof(*r));
    memset(r, 0, sizeof(*r));
    int rc = decode_rule(d, val, r, 0, 1);
    dec->rules = rc == 0 ? r : NULL;
    return rc < 0 ? -1 : 0;
}

int vsr__cfg_decode_rule_field(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj)
{
    if (vsr__cfg_deep_empty(val)) {
        *(vsr_rule_conf_t **)((char *)obj + f->offset) = NULL;
        return 0;
    }
    vsr_rule_conf_t *r = vsr_pool_alloc(d->pool, sizeof(*r));
    memset(r, 0, sizeof(*r));
    int rc = decode_rule(d, val, r, 1, 0);
    *(vsr_rule_conf_t **)((char *)obj + f->offset) = rc == 0 ? r : NULL;
    return rc < 0 ? -1 : 0;
}

static size_t rule_depth(const vsr_rule_conf_t *n)
{
    size_t m = 0;
    for (size_t i = 0; i < n->n_children; i++)
        m = VSR_MAX(m, rule_depth(&n->children[i]));
    return m + 1;
}

static const vsr_sig_complexity_conf_t *complexity_of(const vsr_recipe_conf_t *r, const char *leaf)
{
    const char *colon = strrchr(leaf, ':');
    for (size_t i = 0; colon && i < r->signals.n_complexity; i++) {
        const char *nm = r->signals.complexity[i].name;
        if (nm && strlen(nm) == (size_t)(colon - leaf) && memcmp(nm, leaf, (size_t)(colon - leaf)) == 0)
            return &r->signals.complexity[i];
    }
    return NULL;
}

static int has_complexity_leaf(const vsr_rule_conf_t *n, const vsr_rule_conf_t **at)
{
    if (n->kind == VSR_RULE_LEAF && n->type && strcmp(n->type, "complexity") == 0) {
        *at = n;
        return 1;
    }
    for (size_t i = 0; i < n->n_children; i++)
        if (has_complexity_leaf(&n->children[i], at))
            return 1;
    return 0;
}

static void compose(cfg_decoder_t *d, const vsr_recipe_conf_t *r, vsr_rule_conf_t *n, size_t depth)
{
    if (n->kind != VSR_RULE_LEAF) {
        for (size_t i = 0; i < n->n_children; i++)
            compose(d, r, &n->children[i], depth + 1);
        return;
    }
    if (n->type == NULL || n->name == NULL || strcmp(n->type, "complexity") != 0)
        return;
    const vsr_sig_complexity_conf_t *c = complexity_of(r, n->name);
    if (c == NULL || c->composer == NULL)
        return;
    if (depth + 1 + rule_depth(c->composer) > MAX_RULE_DEPTH + 1) {
        vsr__cfg_error(d->dg, n->line, n->col, "with the composer of complexity signal \"%s\", rules are nested more "
                       "than %d levels deep", c->name, MAX_RULE_DEPTH);
        return;
    }
    vsr_rule_conf_t *kids = vsr_pool_alloc(d->pool, 2 * sizeof(*kids));
    kids[0] = *n;
    kids[0].on_unknown_fail = 0;
    kids[1] = *c->composer;
    n->kind = VSR_RULE_AND;
    n->type = NULL;
    n->name = NULL;
    n->on_error = VSR_ON_ERROR_DEFAULT;
    n->children = kids;
    n->n_children = 2;
}

void vsr__cfg_compose_complexity(cfg_decoder_t *d, vsr_recipe_conf_t *r)
{
    for (size_t i = 0; i < r->signals.n_complexity; i++) {
        const vsr_rule_conf_t *at;
        if (r->signals.complexity[i].composer && has_complexity_leaf(r->signals.complexity[i].composer, &at)) {
            vsr__cfg_error(d->dg, at->line, at->col, "a complexity composer cannot name a complexity signal");
            return;
        }
    }
    for (size_t i = 0; i < r->n_decisions; i++)
        if (r->decisions[i].rules != NULL)
            compose(d, r, r->decisions[i].rules, 1);
}

/* ==== modelRefs ================================================================== */

#define MR_OFF(m) offsetof(vsr_model_ref_conf_t, m)

static const cfg_field_t model_ref_fields[] = {
    {.key = "model", .decode = vsr__cfg_string, .flags = CFG_REQUIRED, .offset = MR_OFF(model)},
    {.key = "use_reasoning", .decode = vsr__cfg_bool, .flags = CFG_HAS, .offset = MR_OFF(use_reasoning),
     .has_offset = MR_OFF(has_use_reasoning)},
    {.key = "reasoning_effort", .decode = vsr__cfg_string, .offset = MR_OFF(reasoning_effort)},
    {.key = "reasoning_description", .flags = CFG_UNIMPLEMENTED},
    {.key = "reasoning_mode", .flags = CFG_UNIMPLEMENTED},
    {.key = "lora_name", .decode = vsr__cfg_string, .offset = MR_OFF(lora_name)},
    {.key = "weight", .decode = vsr__cfg_double, .flags = CFG_HAS, .offset = MR_OFF(weight),
     .has_offset = MR_OFF(has_weight), .dmin = 0, .dmax = 1e9},
};

static void finish_model_ref(cfg_decoder_t *d, const cfg_node_t *map, void *obj, const cfg_node_t *const *seen,
                             size_t index)
{
    vsr_model_ref_conf_t *r = obj;
    const cfg_node_t *model = vsr__cfg_map_get(map, "model"), *lora = vsr__cfg_map_get(map, "lora_name");
    if (model != NULL)
        vsr__cfg_mark(d, &r->model, model);
    if (lora != NULL)
        vsr__cfg_mark(d, &r->lora_name, lora);
    /* reasoning needs the model's reasoning family (providers.models[].
     * reasoning), which vsr does not apply yet: accepted and reported */
    if (r->use_reasoning)
        vsr__cfg_record_unimplemented(d, "use_reasoning");
    if (r->reasoning_effort != NULL)
        vsr__cfg_record_unimplemented(d, "reasoning_effort");
}

const cfg_spec_t vsr__cfg_model_ref_spec = {
    .size = sizeof(vsr_model_ref_conf_t),
    .fields = model_ref_fields,
    .n_fields = VSR_ARRAY_LEN(model_ref_fields),
    .finish = finish_model_ref,
};

/* ==== algorithm ===================================================================== */

/* the table and the blocks: cfg_looper.c */

/* ==== plugins ======================================================================== */

#define PL_OFF(m) offsetof(vsr_plugin_conf_t, m)

/* ref §2 (the newest catalogue plus image_gen of the older one) */
static const struct {
    const char *type;
    vsr_plugin_kind_t kind; /* 0: known, not implemented */
} plugin_types[] = {
    {"system_prompt", VSR_PLUGIN_SYSTEM_PROMPT},
    {"header_mutation", VSR_PLUGIN_HEADER_MUTATION},
    {"fast_response", VSR_PLUGIN_FAST_RESPONSE},
    {"request_params", VSR_PLUGIN_REQUEST_PARAMS},
    {"response_cache", VSR_PLUGIN_RESPONSE_CACHE},
    {"memory", VSR_PLUGIN_MEMORY},
    {"rag", VSR_PLUGIN_RAG},
    {"context_compression", VSR_PLUGIN_CONTEXT_COMPRESSION},
    {"tools", VSR_PLUGIN_TOOLS},
    {"tool_selection", VSR_PLUGIN_TOOL_SELECTION},
    {"hallucination", VSR_PLUGIN_HALLUCINATION},
    {"response_jailbreak", VSR_PLUGIN_RESPONSE_JAILBREAK},
    {"router_replay", VSR_PLUGIN_ROUTER_REPLAY},
    {"image_gen", 0},
    {"shadow_dispatch", VSR_PLUGIN_SHADOW_DISPATCH},
};

static const struct {
    const char *alias, *type;
} plugin_aliases[] = {
    {"semantic-cache", "response_cache"},
    {"semantic_cache", "response_cache"},
    {"response-cache", "response_cache"},
};

static int decode_plugin_type(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj)
{
    vsr_plugin_conf_t *p = obj;
    const char *t = vsr__cfg_get_string(d, f, val);
    if (t == NULL)
        return -1;
    for (size_t i = 0; i < VSR_ARRAY_LEN(plugin_aliases); i++)
        if (strcmp(t, plugin_aliases[i].alias) == 0)
            t = plugin_aliases[i].type;
    for (size_t i = 0; i < VSR_ARRAY_LEN(plugin_types); i++) {
        if (strcmp(t, plugin_types[i].type) == 0) {
            p->type = vsr__cfg_strdup(d, plugin_types[i].type);
            p->kind = plugin_types[i].kind;
            return 0;
        }
    }
    vsr__cfg_node_error(d, val, "unknown plugin type %s", vsr__cfg_quote(d->pool, val->str, val->len));
    return -1;
}

/* ---- header_mutation ---- */

/* Header values: any text but CR, LF and other controls (HTAB is fine). */
static const cfg_field_t header_kv_fields[] = {
    {.key = "name", .decode = vsr__cfg_header_name, .flags = CFG_REQUIRED, .offset = offsetof(vsr_kv_conf_t, name)},
    {.key = "value", .decode = vsr__cfg_header_text, .flags = CFG_REQUIRED, .offset = offsetof(vsr_kv_conf_t, value)},
};

static const cfg_spec_t header_kv_spec = {
    .size = sizeof(vsr_kv_conf_t),
    .fields = header_kv_fields,
    .n_fields = VSR_ARRAY_LEN(header_kv_fields),
};

static int decode_header_names(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj)
{
    if (vsr__cfg_strlist(d, f, val, obj) != 0)
        return -1;
    vsr_strlist_conf_t *l = (vsr_strlist_conf_t *)((char *)obj + f->offset);
    int rc = 0;
    for (size_t i = 0; i < l->n; i++) {
        if (!vsr__cfg_is_token(l->items[i])) {
            vsr__cfg_node_error(d, val->items[i], "invalid header name %s", quote_str(d, l->items[i]));
            rc = -1;
        }
    }
    return rc;
}

/* The five headers through which the reference hands a decision's
 * reliability to Envoy (ref §1.6); they belong to the reliability block. */
static const char *const reliability_headers[] = {
    "x-envoy-upstream-rq-timeout-ms", "x-envoy-upstream-rq-per-try-timeout-ms", "x-envoy-max-retries",
    "x-envoy-retry-on", "x-envoy-retriable-status-codes",
};

/* NULL when the header may be mutated, else why it may not. */
static const char *restricted_header(const char *name)
{
    vsr_slice_t n = vsr_slice_cstr(name);
    for (size_t i = 0; i < VSR_ARRAY_LEN(reliability_headers); i++)
        if (vsr_slice_case_eq_cstr(n, reliability_headers[i]))
            return "the x-envoy reliability headers come from the decision's reliability block";
    if (vsr_slice_case_eq_cstr(n, "host") ||
        (n.len > 8 && vsr_slice_case_eq_cstr(vsr_slice(n.p, 8), "x-envoy-")))
        return "host and x-envoy-* headers cannot be mutated (ref §5.1)";
    return NULL;
}

static void warn_dropped(cfg_decoder_t *d, const cfg_node_t *at, const char *name, const char *why)
{
    vsr__cfg_warn(d, "%s:%u:%u: header_mutation: dropped %s: %s", d->dg->file, at->line, at->col, quote_str(d, name),
                  why);
}

/* `list` is the add/update node; its items parallel kv[] (lists keep failed
 * items as zeroed entries, and a failure means no warning is ever shown). */
static void drop_restricted_kv(cfg_decoder_t *d, const cfg_node_t *list, vsr_kv_conf_t *kv, size_t *n)
{
    size_t o = 0;
    for (size_t i = 0; i < *n; i++) {
        const char *why = kv[i].name ? restricted_header(kv[i].name) : NULL;
        if (why == NULL) {
            kv[o++] = kv[i];
            continue;
        }
        const cfg_node_t *at = list && list->kind == CFG_NODE_SEQ && i < list->n ? list->items[i] : NULL;
        const cfg_node_t *name = at ? vsr__cfg_map_get(at, "name") : NULL;
        warn_dropped(d, name ? name : at ? at : list, kv[i].name, why);
    }
    *n = o;
}

static void finish_header_mutation(cfg_decoder_t *d, const cfg_node_t *map, void *obj, const cfg_node_t *const *seen,
                                   size_t index)
{
    vsr_plugin_header_mutation_conf_t *h = &((vsr_plugin_conf_t *)obj)->u.header_mutation;
    drop_restricted_kv(d, vsr__cfg_map_get(map, "add"), h->add, &h->n_add);
    drop_restricted_kv(d, vsr__cfg_map_get(map, "update"), h->update, &h->n_update);
    const cfg_node_t *del = vsr__cfg_map_get(map, "delete");
    size_t o = 0;
    for (size_t i = 0; i < h->delete_.n; i++) {
        const char *why = restricted_header(h->delete_.items[i]);
        if (why == NULL) {
            h->delete_.items[o++] = h->delete_.items[i];
            continue;
        }
        const cfg_node_t *at = del && del->kind == CFG_NODE_SEQ && del->n == h->delete_.n ? del->items[i] : del;
        warn_dropped(d, at ? at : map, h->delete_.items[i], why);
    }
    h->delete_.n = o;
}

#define HM_OFF(m) offsetof(vsr_plugin_conf_t, u.header_mutation.m)

static const cfg_field_t header_mutation_fields[] = {
    {.key = "enabled", .decode = vsr__cfg_bool, .offset = PL_OFF(enabled)},
    {.key = "add", .decode = vsr__cfg_list, .flags = CFG_NULL_OK, .offset = HM_OFF(add), .count_offset = HM_OFF(n_add),
     .spec = &header_kv_spec},
    {.key = "update", .decode = vsr__cfg_list, .flags = CFG_NULL_OK, .offset = HM_OFF(update),
     .count_offset = HM_OFF(n_update), .spec = &header_kv_spec},
    {.key = "delete", .decode = decode_header_names, .flags = CFG_NULL_OK, .offset = HM_OFF(delete_)},
};

static const cfg_spec_t header_mutation_spec = {
    .size = sizeof(vsr_plugin_conf_t),
    .fields = header_mutation_fields,
    .n_fields = VSR_ARRAY_LEN(header_mutation_fields),
    .finish = finish_header_mutation,
};

/* ---- system_prompt ---- */

/* mode: insert (default, the reference's) | replace.  Any other mode
 * (append, prepend, ...) is treated as replace, as the reference does, with
 * a warning. */
static int decode_prompt_mode(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj)
{
    const char *s = vsr__cfg_get_string(d, f, val);
    if (s == NULL)
        return -1;
    int *insert = (int *)((char *)obj + f->offset);
    *insert = strcmp(s, "insert") == 0;
    if (!*insert && strcmp(s, "replace") != 0)
        vsr__cfg_warn(d, "%s:%u:%u: system_prompt mode %s is treated as \"replace\" (the modes are replace and "
                         "insert)", d->dg->file, val->line, val->col, vsr__cfg_quote(d->pool, s, val->len));
    return 0;
}

/* Text that may be empty: "" leaves the field unset. */
static int decode_optional_prose(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj)
{
    const char *s = vsr__cfg_get_text(d, val);
    if (s == NULL)
        return -1;
    if (val->len > 0)
        *(char **)((char *)obj + f->offset) = vsr_pool_strndup(d->pool, s, val->len);
    return 0;
}

static const cfg_field_t system_prompt_fields[] = {
    {.key = "enabled", .decode = vsr__cfg_bool, .offset = PL_OFF(enabled)},
    {.key = "mode", .decode = decode_prompt_mode, .offset = PL_OFF(u.system_prompt.insert)},
    {.key = "system_prompt", .decode = decode_optional_prose, .offset = PL_OFF(u.system_prompt.system_prompt)},
};

static void init_system_prompt(cfg_decoder_t *d, void *obj)
{
    VSR_UNUSED(d);
    ((vsr_plugin_conf_t *)obj)->u.system_prompt.insert = 1;
}

/* system_prompt is optional and may be empty, as in the reference (whose
 * plugin injects nothing without one): the entry then does nothing, with a
 * warning. */
static void finish_system_prompt(cfg_decoder_t *d, const cfg_node_t *map, void *obj, const cfg_node_t *const *seen,
                                 size_t index)
{
    VSR_UNUSED(seen);
    VSR_UNUSED(index);
    vsr_plugin_conf_t *p = obj;
    p->u.system_prompt.enabled = p->enabled;
    if (p->enabled && p->u.system_prompt.system_prompt == NULL)
        vsr__cfg_warn(d, "%s:%u:%u: a system_prompt plugin without system_prompt does nothing", d->dg->file,
                      map->line, map->col);
}

static const cfg_spec_t system_prompt_spec = {
    .size = sizeof(vsr_plugin_conf_t),
    .fields = system_prompt_fields,
    .n_fields = VSR_ARRAY_LEN(system_prompt_fields),
    .init = init_system_prompt,
    .finish = finish_system_prompt,
};

/* ---- fast_response ---- */

static const cfg_field_t fast_response_fields[] = {
    {.key = "enabled", .decode = vsr__cfg_bool, .offset = PL_OFF(enabled)},
    {.key = "message", .decode = decode_prose, .offset = PL_OFF(u.fast_response.message)},
};

static void finish_fast_response(cfg_decoder_t *d, const cfg_node_t *map, void *obj, const cfg_node_t *const *seen,
                                 size_t index)
{
    vsr_plugin_conf_t *p = obj;
    if (p->enabled && p->u.fast_response.message == NULL && vsr__cfg_map_get(map, "message") == NULL)
        vsr__cfg_node_error(d, map, "missing required key \"message\"");
}

static const cfg_spec_t fast_response_spec = {
    .size = sizeof(vsr_plugin_conf_t),
    .fields = fast_response_fields,
    .n_fields = VSR_ARRAY_LEN(fast_response_fields),
    .finish = finish_fast_response,
};

/* ---- request_params ---- */

#define RP_OFF(m) offsetof(vsr_plugin_conf_t, u.request_params.m)

static const cfg_field_t request_params_fields[] = {
    {.key = "enabled", .decode = vsr__cfg_bool, .offset = PL_OFF(enabled)},
    {.key = "blocked_params", .decode = vsr__cfg_strlist, .flags = CFG_NULL_OK, .offset = RP_OFF(blocked_params)},
    {.key = "max_tokens_limit", .decode = vsr__cfg_uint, .flags = CFG_HAS, .offset = RP_OFF(max_tokens_limit),
     .size = sizeof(uint64_t), .min = 1, .max = INT64_MAX, .has_offset = RP_OFF(has_max_tokens_limit)},
    {.key = "max_n", .decode = vsr__cfg_uint, .flags = CFG_HAS, .offset = RP_OFF(max_n), .size = sizeof(uint64_t),
     .min = 1, .max = INT64_MAX, .has_offset = RP_OFF(has_max_n)},
    {.key = "strip_unknown", .decode = vsr__cfg_bool, .offset = RP_OFF(strip_unknown)},
    {.key = "allowed_params", .decode = vsr__cfg_strlist, .flags = CFG_NULL_OK, .offset = RP_OFF(allowed_params)},
    {.key = "default_max_tokens", .decode = vsr__cfg_uint, .flags = CFG_HAS, .offset = RP_OFF(default_max_tokens),
     .size = sizeof(uint64_t), .min = 1, .max = INT64_MAX, .has_offset = RP_OFF(has_default_max_tokens)},
};

static void finish_request_params(cfg_decoder_t *d, const cfg_node_t *map, void *obj, const cfg_node_t *const *seen,
                                  size_t index)
{
    vsr_plugin_request_params_conf_t *r = &((vsr_plugin_conf_t *)obj)->u.request_params;
    const cfg_node_t *dflt = vsr__cfg_map_get(map, "default_max_tokens");
    if (r->has_default_max_tokens && r->has_max_tokens_limit && r->default_max_tokens > r->max_tokens_limit && dflt)
        vsr__cfg_node_error(d, dflt, "default_max_tokens (%llu) exceeds max_tokens_limit (%llu)",
                            (unsigned long long)r->default_max_tokens, (unsigned long long)r->max_tokens_limit);
}

static const cfg_spec_t request_params_spec = {
    .size = sizeof(vsr_plugin_conf_t),
    .fields = request_params_fields,
    .n_fields = VSR_ARRAY_LEN(request_params_fields),
    .finish = finish_request_params,
};

/* ---- keys of v0.3 that vsr cannot honour yet ---- */

/* Absent, null, empty, or a block that says enabled: false is fine; anything
 * else is refused at its node ("<plugin>: <key> is not supported yet", then
 * f->arg, a reason, when set). */
static int decode_not_yet(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj)
{
    if (vsr__cfg_is_empty(val))
        return 0;
    if (val->kind == CFG_NODE_MAP) {
        /* switched off, whatever else it says (the reference's documents
         * write the whole block with enabled: false): nothing to build */
        const cfg_node_t *en = vsr__cfg_map_get(val, "enabled");
        if (en != NULL && en->kind == CFG_NODE_SCALAR && en->type == CFG_BOOL && (en->str[0] | 0x20) == 'f')
            return 0;
    }
    const vsr_plugin_conf_t *p = obj;
    vsr__cfg_node_error(d, val, "%s: %s is not supported yet%s", p->type ? p->type : "plugin", f->key,
                        f->arg ? (const char *)f->arg : "");
    return -1;
}

/* ---- tools ---- */

#define TL_OFF(m) offsetof(vsr_plugin_conf_t, u.tools.m)

static const char *const tools_modes[] = {"filtered", "none", "passthrough", NULL};

static const cfg_field_t tools_fields[] = {
    {.key = "enabled", .decode = vsr__cfg_bool, .offset = PL_OFF(enabled)},
    {.key = "mode", .decode = vsr__cfg_choice, .offset = TL_OFF(mode), .choices = tools_modes},
    {.key = "allow_tools", .decode = vsr__cfg_strlist, .flags = CFG_NULL_OK, .offset = TL_OFF(allow_tools)},
    {.key = "block_tools", .decode = vsr__cfg_strlist, .flags = CFG_NULL_OK, .offset = TL_OFF(block_tools)},
    {.key = "strip_tool_history", .decode = vsr__cfg_bool, .offset = TL_OFF(strip_tool_history)},
    /* top-k by similarity to the routing text (cfg_tools.c) */
    {.key = "semantic_selection", .decode = vsr__cfg_tools_semantic, .flags = CFG_NULL_OK},
    {.key = "strategy", .decode = vsr__cfg_accept_text,
     .inert = "vsr has one selection strategy: similarity to the routing text (semantic_selection)"},
    {.key = "dynamic_retrieval", .inert = "vsr selects tools by similarity to the routing text alone "
                                          "(semantic_selection); history weighting is not applied"},
};

static void finish_tools(cfg_decoder_t *d, const cfg_node_t *map, void *obj, const cfg_node_t *const *seen,
                         size_t index)
{
    vsr_plugin_conf_t *p = obj;
    vsr_plugin_tools_conf_t *t = &p->u.tools;
    t->enabled = p->enabled;
    const cfg_node_t *strip = vsr__cfg_map_get(map, "strip_tool_history");
    if (t->strip_tool_history && t->mode != VSR_TOOLS_NONE && strip)
        vsr__cfg_warn(d, "%s:%u:%u: tools: strip_tool_history applies to mode none only; ignored", d->dg->file,
                      strip->line, strip->col);
    const cfg_node_t *lists = vsr__cfg_map_get(map, "allow_tools");
    if (lists == NULL)
        lists = vsr__cfg_map_get(map, "block_tools");
    if (t->mode != VSR_TOOLS_FILTERED && (t->allow_tools.n || t->block_tools.n) && lists)
        vsr__cfg_warn(d, "%s:%u:%u: tools: allow_tools and block_tools apply to mode filtered only; ignored",
                      d->dg->file, lists->line, lists->col);
}

static const cfg_spec_t tools_spec = {
    .size = sizeof(vsr_plugin_conf_t),
    .fields = tools_fields,
    .n_fields = VSR_ARRAY_LEN(tools_fields),
    .finish = finish_tools,
};

/* ---- context_compression ---- */

#define CC_OFF(m) offsetof(vsr_plugin_conf_t, u.context_compression.m)

static const char *const cc_modes[] = {"auto", NULL};
static const char *const cc_failure_modes[] = {"fail_open", "fail_closed", NULL};
static const char *const cc_methods[] = {"bm25", NULL};
static const char *const cc_targets[] = {"tool_results", "history", NULL};

/* A token limit as the reference reads it (CompressionTokenLimit): an
 * integer >= 0, the same as a string, or "auto" in any case; spaces around
 * a string are ignored.  0 means auto, as in the reference (a limit of 0 is
 * never applied).  The auto flag is at has_offset. */
static int decode_cc_limit(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj)
{
    uint64_t v = 0;
    int ok = 0;
    if (val->kind == CFG_NODE_SCALAR && val->type == CFG_INT) {
        ok = val->ival_ok && val->ival >= 0;
        v = ok ? (uint64_t)val->ival : 0;
    } else if (val->kind == CFG_NODE_SCALAR && val->type == CFG_STR && memchr(val->str, '\0', val->len) == NULL) {
        vsr_slice_t t = vsr_slice_trim(vsr_slice(val->str, val->len));
        if (vsr_slice_case_eq_cstr(t, "auto"))
            ok = 1;
        else
            ok = t.len > 0 && vsr_slice_to_u64(t, INT64_MAX, &v) == VSR_OK;
    }
    if (!ok) {
        vsr__cfg_node_error(d, val, "%s must be an integer >= 0 or \"auto\", got %s", f->key,
                            val->kind == CFG_NODE_SCALAR ? vsr__cfg_quote(d->pool, val->str, val->len)
                                                         : vsr__cfg_node_what(val));
        return -1;
    }
    *(uint64_t *)((char *)obj + f->offset) = v;
    *(int *)((char *)obj + f->has_offset) = v == 0;
    return 0;
}

static const cfg_field_t cc_budget_fields[] = {
    {.key = "trigger_tokens", .decode = decode_cc_limit, .flags = CFG_REQUIRED, .offset = CC_OFF(trigger_tokens),
     .has_offset = CC_OFF(trigger_auto)},
    {.key = "target_tokens", .decode = decode_cc_limit, .flags = CFG_REQUIRED, .offset = CC_OFF(target_tokens),
     .has_offset = CC_OFF(target_auto)},
    {.key = "reserve_output_tokens", .decode = decode_cc_limit, .offset = CC_OFF(reserve_output_tokens),
     .has_offset = CC_OFF(reserve_auto)},
};

static void finish_cc_budget(cfg_decoder_t *d, const cfg_node_t *map, void *obj, const cfg_node_t *const *seen,
                             size_t index)
{
    const vsr_plugin_context_compression_conf_t *c = &((vsr_plugin_conf_t *)obj)->u.context_compression;
    const cfg_node_t *target = vsr__cfg_map_get(map, "target_tokens");
    const cfg_node_t *reserve = vsr__cfg_map_get(map, "reserve_output_tokens");
    /* auto limits are checked per request, against the model's window */
    if (c->trigger_tokens && c->target_tokens > c->trigger_tokens && target)
        vsr__cfg_node_error(d, target, "target_tokens (%llu) exceeds trigger_tokens (%llu)",
                            (unsigned long long)c->target_tokens, (unsigned long long)c->trigger_tokens);
    else if (c->target_tokens && c->reserve_output_tokens >= c->target_tokens && reserve)
        vsr__cfg_node_error(d, reserve, "reserve_output_tokens (%llu) must be below target_tokens (%llu)",
                            (unsigned long long)c->reserve_output_tokens, (unsigned long long)c->target_tokens);
}

/* The budget's fields are members of the plugin entry (offsets from it). */
static const cfg_spec_t cc_budget_spec = {
    .size = sizeof(vsr_plugin_conf_t),
    .fields = cc_budget_fields,
    .n_fields = VSR_ARRAY_LEN(cc_budget_fields),
    .finish = finish_cc_budget,
};

static int decode_cc_method(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj)
{
    int i;
    return vsr__cfg_choice(d, f, val, &i);
}

static const cfg_field_t cc_scoring_fields[] = {
    {.key = "method", .decode = decode_cc_method, .choices = cc_methods},
    {.key = "embedding_model_ref", .decode = vsr__cfg_accept_text,
     .inert = "vsr scores with bm25, which needs no embedding model"},
};

static const cfg_spec_t cc_scoring_spec = {
    .size = sizeof(vsr_plugin_conf_t),
    .fields = cc_scoring_fields,
    .n_fields = VSR_ARRAY_LEN(cc_scoring_fields),
};

/* The reference's form of targets: a mapping of content kinds, each
 * {mode: preserve | extractive | recoverable, min_tokens, target_tokens}
 * (modes default to extractive for tool_outputs, preserve for the rest).
 * extractive tool_outputs and history are vsr's tool_results and history
 * targets, in that order; recoverable needs recovery (not built); rag and
 * memory content is never injected by vsr, so there is nothing to cut; the
 * per-kind token sizes are said to be unused. */
static int decode_cc_target_map(cfg_decoder_t *d, const cfg_node_t *val, vsr_plugin_context_compression_conf_t *c)
{
    static const char *const kinds[] = {"tool_outputs", "history", "rag", "memory", NULL};
    static const char *const modes[] = {"preserve", "extractive", "recoverable", NULL};
    int mode[4] = {1, 0, 0, 0};
    int rc = 0;
    for (size_t i = 0; i < val->n; i++) {
        const cfg_node_t *key = val->items[2 * i], *v = val->items[2 * i + 1];
        cfg_field_t kf = {.key = "targets", .choices = kinds};
        int k;
        if (key->kind != CFG_NODE_SCALAR || vsr__cfg_choice(d, &kf, key, &k) != 0) {
            rc = -1;
            continue;
        }
        if (vsr__cfg_is_empty(v))
            continue;
        if (v->kind != CFG_NODE_MAP) {
            vsr__cfg_node_error(d, v, "expected a mapping, got %s", vsr__cfg_node_what(v));
            rc = -1;
            continue;
        }
        for (size_t j = 0; j < v->n; j++) {
            const cfg_node_t *fk = v->items[2 * j], *fv = v->items[2 * j + 1];
            vsr_slice_t name = fk->kind == CFG_NODE_SCALAR ? vsr_slice(fk->str, fk->len) : VSR_SLICE_NULL;
            if (vsr_slice_eq_cstr(name, "mode")) {
                cfg_field_t mf = {.key = "mode", .choices = modes};
                if (vsr__cfg_choice(d, &mf, fv, &mode[k]) != 0)
                    rc = -1;
            } else if (vsr_slice_eq_cstr(name, "min_tokens") || vsr_slice_eq_cstr(name, "target_tokens")) {
                uint64_t n;
                cfg_field_t nf = {.key = vsr_slice_eq_cstr(name, "min_tokens") ? "min_tokens" : "target_tokens",
                                  .size = sizeof(uint64_t), .min = 0, .max = INT64_MAX};
                if (vsr__cfg_uint(d, &nf, fv, &n) != 0)
                    rc = -1;
                else
                    vsr__cfg_warn(d,
                                  "%s:%u:%u: context_compression: targets.%s.%s is accepted and has no effect in vsr: "
                                  "it cuts the oldest content to the overall budget, not each message to its own size",
                                  d->dg->file, fk->line, fk->col, kinds[k], nf.key);
            } else {
                vsr__cfg_node_error(d, fk, "unknown key %s (a target has mode, min_tokens, target_tokens)",
                                    fk->kind == CFG_NODE_SCALAR ? vsr__cfg_quote(d->pool, fk->str, fk->len)
                                                                : vsr__cfg_node_what(fk));
                rc = -1;
            }
        }
        const cfg_node_t *mn = vsr__cfg_map_get(v, "mode");
        if (mode[k] == 2 && mn) {
            vsr__cfg_node_error(d, mn, "context_compression: targets.%s.mode recoverable is not supported yet (it "
                                       "needs recovery)", kinds[k]);
            rc = -1;
        } else if (mode[k] == 1 && k >= 2 && mn) {
            vsr__cfg_warn(d, "%s:%u:%u: context_compression: targets.%s.mode extractive has no effect in vsr: it "
                             "injects no %s content to cut", d->dg->file, mn->line, mn->col, kinds[k], kinds[k]);
        }
    }
    c->n_targets = 0;
    if (mode[0] == 1)
        c->targets[c->n_targets++] = VSR_CC_TOOL_RESULTS;
    if (mode[1] == 1)
        c->targets[c->n_targets++] = VSR_CC_HISTORY;
    return rc;
}

static int decode_cc_targets(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj)
{
    vsr_plugin_context_compression_conf_t *c = &((vsr_plugin_conf_t *)obj)->u.context_compression;
    if (val->kind == CFG_NODE_MAP)
        return decode_cc_target_map(d, val, c);
    if (val->kind != CFG_NODE_SEQ) {
        vsr__cfg_node_error(d, val, "expected a list, got %s", vsr__cfg_node_what(val));
        return -1;
    }
    if (val->n == 0) {
        vsr__cfg_node_error(d, val, "targets must not be empty");
        return -1;
    }
    cfg_field_t g = {.key = "targets", .choices = cc_targets};
    int rc = 0;
    c->n_targets = 0;
    for (size_t i = 0; i < val->n; i++) {
        int k;
        if (vsr__cfg_choice(d, &g, val->items[i], &k) != 0) {
            rc = -1;
            continue;
        }
        int dup = 0;
        for (size_t j = 0; j < c->n_targets; j++)
            dup |= c->targets[j] == (uint8_t)k;
        if (dup) {
            vsr__cfg_node_error(d, val->items[i], "targets: %s is listed twice", cc_targets[k]);
            rc = -1;
            continue;
        }
        c->targets[c->n_targets++] = (uint8_t)k;
    }
    return rc;
}

static const cfg_field_t context_compression_fields[] = {
    {.key = "enabled", .decode = vsr__cfg_bool, .offset = PL_OFF(enabled)},
    {.key = "mode", .decode = decode_cc_method, .choices = cc_modes},
    {.key = "budget", .decode = vsr__cfg_object, .spec = &cc_budget_spec},
    {.key = "targets", .decode = decode_cc_targets},
    {.key = "scoring", .decode = vsr__cfg_object, .flags = CFG_NULL_OK, .spec = &cc_scoring_spec},
    {.key = "failure_mode", .decode = vsr__cfg_choice, .offset = CC_OFF(fail_closed), .choices = cc_failure_modes},
    /* the reference stores each cut passage (Redis/Valkey or its response
     * cache), offers the model a tool to ask for it back and, when the
     * answer calls that tool, makes a follow-up upstream call with it */
    {.key = "recovery", .decode = decode_not_yet,
     .arg = " (it needs a recovery tool offered to the model, a store of the cut passages and a follow-up upstream "
            "call when the model asks for one; vsr makes the one upstream call and keeps no cut text)"},
    {.key = "request_controls", .decode = vsr__cfg_object, .flags = CFG_NULL_OK, .spec = &vsr__cfg_cc_controls_spec},
};

static void init_context_compression(cfg_decoder_t *d, void *obj)
{
    vsr_plugin_context_compression_conf_t *c = &((vsr_plugin_conf_t *)obj)->u.context_compression;
    /* as the reference's absent targets: tool outputs extractive, history
     * (and rag, memory) preserved */
    c->targets[0] = VSR_CC_TOOL_RESULTS;
    c->n_targets = 1;
    c->reserve_auto = 1; /* as the reference's absent reserve_output_tokens */
}

static void finish_context_compression(cfg_decoder_t *d, const cfg_node_t *map, void *obj,
                                       const cfg_node_t *const *seen, size_t index)
{
    vsr_plugin_conf_t *p = obj;
    p->u.context_compression.enabled = p->enabled;
    if (p->enabled && vsr__cfg_map_get(map, "budget") == NULL)
        vsr__cfg_node_error(d, map, "missing required key \"budget\"");
}

static const cfg_spec_t context_compression_spec = {
    .size = sizeof(vsr_plugin_conf_t),
    .fields = context_compression_fields,
    .n_fields = VSR_ARRAY_LEN(context_compression_fields),
    .init = init_context_compression,
    .finish = finish_context_compression,
};

/* ---- the plugin entry ---- */

static int decode_plugin_configuration(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj)
{
    return 0; /* decoded by finish_plugin, once the type is known */
}

static const cfg_field_t plugin_fields[] = {
    {.key = "type", .decode = decode_plugin_type, .flags = CFG_REQUIRED},
    {.key = "configuration", .decode = decode_plugin_configuration},
};

/* ---- response_cache ---- */

#define RCP_OFF(m) PL_OFF(u.response_cache.m)
static const char *const rc_modes[] = {"semantic", "exact", "exact_then_semantic", NULL};
static const char *const rc_scopes[] = {"global", "user", "api_key", NULL}; /* vsr_rc_scope_t */

static const cfg_field_t rc_semantic_fields[] = {
    {.key = "similarity_threshold", .decode = vsr__cfg_double, .flags = CFG_HAS, .offset = RCP_OFF(similarity_threshold),
     .has_offset = RCP_OFF(has_similarity_threshold), .dmin = 0, .dmax = 1},
};
static const cfg_spec_t rc_semantic_spec = {
    .size = sizeof(vsr_plugin_conf_t),
    .fields = rc_semantic_fields,
    .n_fields = VSR_ARRAY_LEN(rc_semantic_fields),
};
static const char *const rc_directives[] = {"no-cache", "no-store", "bypass", "max-age", "ttl", NULL};

/* request_controls.allowed: the directives a client may send (bits in the
 * order of rc_directives); [] allows none. */
static int decode_rc_allowed(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj)
{
    if (val->kind != CFG_NODE_SEQ) {
        vsr__cfg_node_error(d, val, "expected a list of directives, got %s", vsr__cfg_node_what(val));
        return -1;
    }
    unsigned bits = 0;
    int rc = 0;
    cfg_field_t c = {.key = f->key, .choices = rc_directives, .flags = CFG_NOCASE};
    for (size_t i = 0; i < val->n; i++) {
        int which;
        if (vsr__cfg_choice(d, &c, val->items[i], &which) != 0)
            rc = -1;
        else
            bits |= 1u << which;
    }
    /* none allowed: a bit no directive has, so 0 keeps meaning "absent" */
    *(unsigned *)((char *)obj + f->offset) = bits ? bits : 1u << 31;
    return rc;
}

static const cfg_field_t rc_controls_fields[] = {
    {.key = "enabled", .decode = vsr__cfg_bool, .offset = RCP_OFF(request_controls)},
    {.key = "allow_replace", .decode = vsr__cfg_bool, .offset = RCP_OFF(allow_replace)},
    {.key = "header", .decode = vsr__cfg_header_name, .offset = RCP_OFF(control_header)},
    {.key = "allowed", .decode = decode_rc_allowed, .offset = RCP_OFF(allowed)},
    {.key = "max_ttl_seconds", .decode = vsr__cfg_uint, .offset = RCP_OFF(max_ttl_seconds), .size = 8, .min = 0,
     .max = 365 * 86400},
};
static const cfg_spec_t rc_controls_spec = {
    .size = sizeof(vsr_plugin_conf_t),
    .fields = rc_controls_fields,
    .n_fields = VSR_ARRAY_LEN(rc_controls_fields),
};
static const cfg_field_t rc_revision_fields[] = {
    {.key = "cache_epoch", .decode = vsr__cfg_string, .offset = RCP_OFF(cache_epoch)},
    {.key = "model_revision", .decode = vsr__cfg_string, .offset = RCP_OFF(model_revision)},
    {.key = "prompt_revision", .decode = vsr__cfg_string, .offset = RCP_OFF(prompt_revision)},
    {.key = "policy_revision", .decode = vsr__cfg_string, .offset = RCP_OFF(policy_revision)},
};
static const cfg_spec_t rc_revision_spec = {
    .size = sizeof(vsr_plugin_conf_t),
    .fields = rc_revision_fields,
    .n_fields = VSR_ARRAY_LEN(rc_revision_fields),
};

/* personalized: true, or the reference's {mode: disabled | exact}: exact
 * keeps entries per user (scope user) */
static int decode_rc_personalized(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj)
{
    int v = 0;
    cfg_field_t b = *f;
    b.offset = 0;
    if (val->kind == CFG_NODE_MAP) {
        static const char *const modes[] = {"disabled", "exact", NULL};
        for (size_t i = 0; i < val->n; i++) {
            const cfg_node_t *k = val->items[2 * i];
            static const char *const keys[] = {"mode"};
            if (k->kind != CFG_NODE_SCALAR || strcmp(k->str, "mode") != 0) {
                vsr__cfg_unknown_key(d, k, keys, 1, NULL);
                return -1;
            }
            cfg_field_t m = {.key = "mode", .choices = modes};
            if (vsr__cfg_choice(d, &m, val->items[2 * i + 1], &v) != 0)
                return -1;
        }
    } else if (vsr__cfg_bool(d, &b, val, &v) != 0) {
        return -1;
    }
    if (v) {
        ((vsr_plugin_conf_t *)obj)->u.response_cache.scope = VSR_RC_SCOPE_USER;
        ((vsr_plugin_conf_t *)obj)->u.response_cache.has_scope = 1;
    }
    return 0;
}

static const cfg_field_t response_cache_fields[] = {
    {.key = "enabled", .decode = vsr__cfg_bool, .offset = PL_OFF(enabled)},
    {.key = "mode", .decode = vsr__cfg_choice, .offset = RCP_OFF(mode), .choices = rc_modes},
    {.key = "scope", .decode = vsr__cfg_choice, .flags = CFG_HAS, .offset = RCP_OFF(scope),
     .has_offset = RCP_OFF(has_scope), .choices = rc_scopes},
    {.key = "personalized", .decode = decode_rc_personalized},
    {.key = "semantic", .decode = vsr__cfg_object, .flags = CFG_NULL_OK, .spec = &rc_semantic_spec},
    {.key = "similarity_threshold", .decode = vsr__cfg_double, .flags = CFG_HAS, .offset = RCP_OFF(similarity_threshold),
     .has_offset = RCP_OFF(has_similarity_threshold), .dmin = 0, .dmax = 1},
    {.key = "ttl_seconds", .decode = vsr__cfg_uint, .flags = CFG_HAS, .offset = RCP_OFF(ttl_seconds), .size = 8,
     .has_offset = RCP_OFF(has_ttl_seconds), .min = 1, .max = 365 * 86400},
    {.key = "request_controls", .decode = vsr__cfg_object, .flags = CFG_NULL_OK, .spec = &rc_controls_spec},
    {.key = "revision", .decode = vsr__cfg_object, .flags = CFG_NULL_OK, .spec = &rc_revision_spec},
    {.key = "allow_request_controls", .decode = vsr__cfg_bool, .offset = RCP_OFF(request_controls),
     .deprecated = "the reference replaced it with request_controls.enabled"},
    {.key = "control_header", .decode = vsr__cfg_header_name, .offset = RCP_OFF(control_header),
     .deprecated = "the reference replaced it with request_controls.header"},
};

static void finish_response_cache(cfg_decoder_t *d, const cfg_node_t *map, void *obj, const cfg_node_t *const *seen,
                                  size_t index)
{
    VSR_UNUSED(d);
    VSR_UNUSED(map);
    VSR_UNUSED(seen);
    VSR_UNUSED(index);
    vsr_plugin_conf_t *p = obj;
    p->u.response_cache.enabled = p->enabled;
}

static const cfg_spec_t response_cache_spec = {
    .size = sizeof(vsr_plugin_conf_t),
    .fields = response_cache_fields,
    .n_fields = VSR_ARRAY_LEN(response_cache_fields),
    .finish = finish_response_cache,
};

/* ---- response_jailbreak ---- */

#define RJ_OFF(m) PL_OFF(u.response_jailbreak.m)
static const char *const rj_actions[] = {"header", "block", "none", NULL};
static const char *const rj_methods[] = {"classifier", "contrastive", "hybrid", NULL};

static const cfg_field_t response_jailbreak_fields[] = {
    {.key = "enabled", .decode = vsr__cfg_bool, .offset = PL_OFF(enabled)},
    {.key = "threshold", .decode = vsr__cfg_double, .flags = CFG_HAS, .offset = RJ_OFF(threshold),
     .has_offset = RJ_OFF(has_threshold), .dmin = 0, .dmax = 1},
    {.key = "action", .decode = vsr__cfg_choice, .offset = RJ_OFF(action), .choices = rj_actions},
    {.key = "method", .decode = vsr__cfg_choice, .offset = RJ_OFF(method), .choices = rj_methods},
};

static void finish_response_jailbreak(cfg_decoder_t *d, const cfg_node_t *map, void *obj,
                                      const cfg_node_t *const *seen, size_t index)
{
    VSR_UNUSED(d);
    VSR_UNUSED(map);
    VSR_UNUSED(seen);
    VSR_UNUSED(index);
    vsr_plugin_conf_t *p = obj;
    p->u.response_jailbreak.enabled = p->enabled;
}

static const cfg_spec_t response_jailbreak_spec = {
    .size = sizeof(vsr_plugin_conf_t),
    .fields = response_jailbreak_fields,
    .n_fields = VSR_ARRAY_LEN(response_jailbreak_fields),
    .finish = finish_response_jailbreak,
};

/* router_replay */
#define RR_OFF(m) PL_OFF(u.router_replay.m)

static const cfg_field_t router_replay_fields[] = {
    {.key = "enabled", .decode = vsr__cfg_bool, .offset = PL_OFF(enabled)},
    {.key = "max_records", .decode = vsr__cfg_uint, .offset = RR_OFF(max_records), .size = 8, .min = 1,
     .max = 1000000},
    {.key = "capture_request_body", .decode = vsr__cfg_bool, .offset = RR_OFF(capture_request_body)},
    {.key = "capture_response_body", .decode = vsr__cfg_bool, .offset = RR_OFF(capture_response_body)},
    {.key = "max_body_bytes", .decode = vsr__cfg_uint, .offset = RR_OFF(max_body_bytes), .size = 8, .min = 0,
     .max = 16 << 20},
    {.key = "max_tool_trace_bytes", .decode = vsr__cfg_uint, .offset = RR_OFF(max_tool_trace_bytes), .size = 8,
     .min = 0, .max = 1 << 20},
    {.key = "max_tool_trace_steps", .decode = vsr__cfg_uint, .offset = RR_OFF(max_tool_trace_steps), .size = 8,
     .min = 0, .max = 1024},
};

static void finish_router_replay(cfg_decoder_t *d, const cfg_node_t *map, void *obj, const cfg_node_t *const *seen,
                                 size_t index)
{
    VSR_UNUSED(d);
    VSR_UNUSED(map);
    VSR_UNUSED(seen);
    VSR_UNUSED(index);
    vsr_plugin_conf_t *p = obj;
    p->u.router_replay.enabled = p->enabled;
}

static const cfg_spec_t router_replay_spec = {
    .size = sizeof(vsr_plugin_conf_t),
    .fields = router_replay_fields,
    .n_fields = VSR_ARRAY_LEN(router_replay_fields),
    .finish = finish_router_replay,
};

static const cfg_spec_t plugin_spec;

static void finish_plugin(cfg_decoder_t *d, const cfg_node_t *map, void *obj, const cfg_node_t *const *seen,
                          size_t index)
{
    vsr_plugin_conf_t *p = obj;
    const cfg_node_t *type = vsr__cfg_seen(&plugin_spec, seen, "type");
    const cfg_node_t *conf = vsr__cfg_seen(&plugin_spec, seen, "configuration");
    if (p->type == NULL)
        return; /* the type was wrong: reported */
    p->enabled = 1;
    if (p->kind == 0) {
        /* an entry switched off is harmless whatever it would do */
        const cfg_node_t *en = vsr__cfg_map_get(conf, "enabled");
        if (en != NULL && en->kind == CFG_NODE_SCALAR && en->type == CFG_BOOL && (en->str[0] | 0x20) == 'f') {
            p->kind = VSR_PLUGIN_UNSUPPORTED;
            p->enabled = 0;
            return;
        }
        if (strcmp(p->type, "image_gen") == 0) { /* the reference removed it; its own words */
            vsr__cfg_node_error(d, type, "plugin \"image_gen\" is unsupported: the image_gen route plugin was removed; "
                                         "use the Responses-API hosted image_generation tool with a vllm-omni "
                                         "modality route");
            return;
        }
        if (strcmp(type->str, p->type) != 0)
            vsr__cfg_node_error(d, type, "plugin \"%s\" (%s) is not supported yet", type->str, p->type);
        else
            vsr__cfg_node_error(d, type, "plugin \"%s\" is not supported yet", p->type);
        return;
    }
    const cfg_spec_t *spec = p->kind == VSR_PLUGIN_SYSTEM_PROMPT     ? &system_prompt_spec
                             : p->kind == VSR_PLUGIN_HEADER_MUTATION ? &header_mutation_spec
                             : p->kind == VSR_PLUGIN_FAST_RESPONSE   ? &fast_response_spec
                             : p->kind == VSR_PLUGIN_TOOLS           ? &tools_spec
                             : p->kind == VSR_PLUGIN_CONTEXT_COMPRESSION ? &context_compression_spec
                             : p->kind == VSR_PLUGIN_RESPONSE_CACHE  ? &response_cache_spec
                             : p->kind == VSR_PLUGIN_RESPONSE_JAILBREAK ? &response_jailbreak_spec
                             : p->kind == VSR_PLUGIN_ROUTER_REPLAY   ? &router_replay_spec
                             : p->kind == VSR_PLUGIN_TOOL_SELECTION  ? &vsr__cfg_tool_selection_spec
                             : p->kind == VSR_PLUGIN_MEMORY          ? &vsr__cfg_memory_plugin_spec
                             : p->kind == VSR_PLUGIN_HALLUCINATION   ? &vsr__cfg_hallucination_plugin_spec
                             : p->kind == VSR_PLUGIN_SHADOW_DISPATCH ? &vsr__cfg_shadow_dispatch_spec
                                                                     : &request_params_spec;
    /* fast_response without configuration: the reference's router finds no
     * configuration for it and answers nothing (its validator asks for one;
     * its Kubernetes source, which skips that check, writes such entries) */
    int no_conf = conf == NULL || (conf->kind == CFG_NODE_SCALAR && conf->type == CFG_NULL);
    if (p->kind == VSR_PLUGIN_FAST_RESPONSE && no_conf) {
        p->enabled = 0;
        vsr__cfg_warn(d, "%s:%u:%u: a fast_response plugin without configuration does nothing (it has no message)",
                      d->dg->file, map->line, map->col);
        return;
    }
    /* no configuration: its required keys are reported at the entry */
    cfg_node_t empty = {.kind = CFG_NODE_MAP, .line = map->line, .col = map->col, .str = ""};
    if (no_conf)
        conf = &empty;
    if (p->kind == VSR_PLUGIN_RAG) { /* cfg_rag.c */
        size_t at = vsr__cfg_path_push(d, "configuration");
        vsr__cfg_rag_decode(d, conf, p);
        vsr__cfg_path_pop(d, at);
        return;
    }
    if (p->kind == VSR_PLUGIN_ROUTER_REPLAY) {
        vsr_plugin_router_replay_conf_t *rr = &p->u.router_replay;
        rr->max_records = 1000;
        rr->capture_request_body = rr->capture_response_body = 1;
        rr->max_body_bytes = 65536;
        rr->max_tool_trace_bytes = 16384;
        rr->max_tool_trace_steps = 32;
    }
    size_t saved = vsr__cfg_path_push(d, "configuration");
    vsr__cfg_decode_object(d, spec, conf, p, 0);
    vsr__cfg_path_pop(d, saved);
}

static const cfg_spec_t plugin_spec = {
    .size = sizeof(vsr_plugin_conf_t),
    .fields = plugin_fields,
    .n_fields = VSR_ARRAY_LEN(plugin_fields),
    .finish = finish_plugin,
};

/* ==== emits ============================================================================ */

#define RT_OFF(m) offsetof(vsr_retention_conf_t, m)

static const cfg_field_t retention_fields[] = {
    {.key = "drop", .decode = vsr__cfg_bool, .flags = CFG_HAS, .offset = RT_OFF(drop), .has_offset = RT_OFF(has_drop)},
    {.key = "ttl_turns", .decode = vsr__cfg_uint, .flags = CFG_HAS, .offset = RT_OFF(ttl_turns),
     .size = sizeof(uint64_t), .min = 0, .max = INT64_MAX, .has_offset = RT_OFF(has_ttl_turns)},
    {.key = "keep_current_model", .decode = vsr__cfg_bool, .flags = CFG_HAS, .offset = RT_OFF(keep_current_model),
     .has_offset = RT_OFF(has_keep_current_model)},
    {.key = "prefer_prefix_retention", .decode = vsr__cfg_bool, .flags = CFG_HAS,
     .offset = RT_OFF(prefer_prefix_retention), .has_offset = RT_OFF(has_prefer_prefix_retention)},
};

static void finish_retention(cfg_decoder_t *d, const cfg_node_t *map, void *obj, const cfg_node_t *const *seen,
                             size_t index)
{
    vsr_retention_conf_t *r = obj;
    r->present = 1;
    if (r->has_drop && r->drop && r->has_ttl_turns && r->ttl_turns > 0)
        vsr__cfg_node_error(d, vsr__cfg_map_get(map, "ttl_turns"), "retention: drop: true and a positive ttl_turns "
                                                                    "exclude each other");
}

static const cfg_spec_t retention_spec = {
    .size = sizeof(vsr_retention_conf_t),
    .fields = retention_fields,
    .n_fields = VSR_ARRAY_LEN(retention_fields),
    .finish = finish_retention,
};

/* emits: [{kind: retention, retention: {...}}], at most one retention
 * directive per decision.  Another kind is recorded as not implemented. */
static int decode_emits(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj)
{
    vsr_decision_conf_t *dec = obj;
    if (val->kind != CFG_NODE_SEQ) {
        vsr__cfg_node_error(d, val, "expected a list, got %s", vsr__cfg_node_what(val));
        return -1;
    }
    int rc = 0;
    size_t saved = vsr__cfg_path_push(d, "[]");
    for (size_t i = 0; i < val->n; i++) {
        const cfg_node_t *it = val->items[i];
        if (it->kind != CFG_NODE_MAP) {
            vsr__cfg_node_error(d, it, "expected a mapping, got %s", vsr__cfg_node_what(it));
            rc = -1;
            continue;
        }
        const cfg_node_t *kind = vsr__cfg_map_get(it, "kind"), *block = vsr__cfg_map_get(it, "retention");
        cfg_field_t kf = {.key = "kind"};
        const char *k = kind ? vsr__cfg_get_string(d, &kf, kind) : NULL;
        if (kind == NULL)
            vsr__cfg_node_error(d, it, "missing required key \"kind\"");
        if (k == NULL) {
            rc = -1;
            continue;
        }
        if (strcmp(k, "retention") != 0) {
            vsr__cfg_record_unimplemented(d, k);
            continue;
        }
        for (size_t j = 0; j < it->n; j++) {
            const cfg_node_t *key = it->items[2 * j];
            if (key->kind == CFG_NODE_SCALAR && key->type == CFG_STR && strcmp(key->str, "kind") != 0 &&
                strcmp(key->str, "retention") != 0) {
                vsr__cfg_node_error(d, key, "unknown key %s", vsr__cfg_quote(d->pool, key->str, key->len));
                rc = -1;
            }
        }
        if (dec->retention.present) {
            vsr__cfg_node_error(d, kind, "a decision emits at most one retention directive");
            rc = -1;
            continue;
        }
        cfg_node_t empty = {.kind = CFG_NODE_MAP, .line = it->line, .col = it->col, .str = ""};
        if (block == NULL || (block->kind == CFG_NODE_SCALAR && block->type == CFG_NULL))
            block = &empty;
        size_t s2 = vsr__cfg_path_push(d, "retention");
        if (vsr__cfg_decode_object(d, &retention_spec, block, &dec->retention, 0) != 0)
            rc = -1;
        vsr__cfg_path_pop(d, s2);
    }
    vsr__cfg_path_pop(d, saved);
    return rc;
}

/* ==== decisions ======================================================================== */

#define DEC_OFF(m) offsetof(vsr_decision_conf_t, m)

static const cfg_field_t decision_fields[] = {
    {.key = "name", .decode = vsr__cfg_string, .flags = CFG_REQUIRED, .offset = DEC_OFF(name)},
    {.key = "description", .decode = decode_prose, .offset = DEC_OFF(description)},
    {.key = "priority", .decode = vsr__cfg_int, .offset = DEC_OFF(priority), .min = INT64_MIN, .max = INT64_MAX},
    {.key = "tier", .decode = vsr__cfg_int, .offset = DEC_OFF(tier), .min = 0, .max = INT64_MAX},
    {.key = "rules", .decode = decode_rules, .flags = CFG_NULL_OK},
    {.key = "modelRefs", .decode = vsr__cfg_list, .flags = CFG_NULL_OK, .offset = DEC_OFF(model_refs),
     .count_offset = DEC_OFF(n_model_refs), .spec = &vsr__cfg_model_ref_spec},
    {.key = "candidateIterations", .decode = vsr__cfg_decode_candidate_iterations, .flags = CFG_NULL_OK},
    {.key = "algorithm", .decode = vsr__cfg_decode_algorithm, .flags = CFG_NULL_OK},
    {.key = "plugins", .decode = vsr__cfg_list, .flags = CFG_NULL_OK, .offset = DEC_OFF(plugins),
     .count_offset = DEC_OFF(n_plugins), .spec = &plugin_spec},
    {.key = "reliability", .decode = vsr__cfg_object, .flags = CFG_NULL_OK | CFG_HAS, .offset = DEC_OFF(reliability),
     .spec = &vsr__cfg_decision_reliability_spec, .has_offset = DEC_OFF(has_reliability)},
    {.key = "fallback", .decode = vsr__cfg_object, .flags = CFG_NULL_OK, .offset = DEC_OFF(fallback),
     .spec = &vsr__cfg_scoped_fallback_spec},
    {.key = "action", .decode = vsr__cfg_decode_decision_action, .flags = CFG_NULL_OK},
    {.key = "output_contract", .flags = CFG_UNIMPLEMENTED},
    {.key = "output_contract_spec", .flags = CFG_UNIMPLEMENTED},
    {.key = "annotations", .flags = CFG_UNIMPLEMENTED},
    {.key = "adaptations", .flags = CFG_UNIMPLEMENTED},
    {.key = "emits", .decode = decode_emits, .flags = CFG_NULL_OK},
};

static void finish_decision(cfg_decoder_t *d, const cfg_node_t *map, void *obj, const cfg_node_t *const *seen,
                            size_t index)
{
    vsr__cfg_finish_decision_extras(d, map, obj); /* candidateIterations, action (cfg_decision.c) */
}

static const cfg_spec_t decision_spec = {
    .size = sizeof(vsr_decision_conf_t),
    .fields = decision_fields,
    .n_fields = VSR_ARRAY_LEN(decision_fields),
    .finish = finish_decision,
};

/* ==== recipes ========================================================================== */

#define RC_OFF(m) offsetof(vsr_recipe_conf_t, m)

static const char *const strategies[] = {"priority", "confidence", NULL}; /* index = strategy_confidence */

/* Decision names are unique per recipe; leaves resolve.  `decisions` is the
 * recipe's decisions list node (NULL when absent). */
static void check_recipe(cfg_decoder_t *d, vsr_recipe_conf_t *r, const char *where, const cfg_node_t *decisions)
{
    if (r->n_decisions > 1 && decisions != NULL && decisions->kind == CFG_NODE_SEQ && decisions->n == r->n_decisions) {
        const char **keys = vsr_malloc(r->n_decisions * sizeof(*keys));
        const cfg_node_t **nodes = vsr_malloc(r->n_decisions * sizeof(*nodes));
        for (size_t i = 0; i < r->n_decisions; i++) {
            const cfg_node_t *name = vsr__cfg_map_get(decisions->items[i], "name");
            keys[i] = r->decisions[i].name;
            nodes[i] = name ? name : decisions->items[i];
        }
        vsr__cfg_check_unique(d, "decision name", keys, nodes, r->n_decisions);
        vsr_free(keys);
        vsr_free(nodes);
    }
    vsr__cfg_compose_complexity(d, r);
    vsr__cfg_resolve_leaves(d, r, where);
    vsr__cfg_check_projections(d, r, where);
}

/* routing.modelCards[] */

typedef struct {
    char *name;
} lora_t;

typedef struct {
    lora_t *items;
    size_t n;
} lora_list_t;

static const cfg_field_t lora_fields[] = {
    {.key = "name", .decode = vsr__cfg_string, .flags = CFG_REQUIRED, .offset = offsetof(lora_t, name)},
    {.key = "description", .decode = vsr__cfg_accept_text},
};

static const cfg_spec_t lora_spec = {
    .size = sizeof(lora_t),
    .fields = lora_fields,
    .n_fields = VSR_ARRAY_LEN(lora_fields),
};

static int decode_loras(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj)
{
    vsr_model_card_conf_t *card = obj;
    cfg_field_t lf = {.key = "loras", .spec = &lora_spec, .offset = offsetof(lora_list_t, items),
                      .count_offset = offsetof(lora_list_t, n)};
    lora_list_t tmp = {NULL, 0};
    int rc = vsr__cfg_list(d, &lf, val, &tmp);
    lora_t *loras = tmp.items;
    size_t n = tmp.n;
    card->loras.items = n ? vsr_pool_alloc(d->pool, n * sizeof(char *)) : NULL;
    card->loras.n = 0;
    const char **keys = n ? vsr_malloc(n * sizeof(*keys)) : NULL;
    const cfg_node_t **nodes = n ? vsr_malloc(n * sizeof(*nodes)) : NULL;
    for (size_t i = 0; i < n; i++) {
        keys[i] = loras[i].name;
        const cfg_node_t *nm = vsr__cfg_map_get(val->items[i], "name");
        nodes[i] = nm ? nm : val->items[i];
        if (loras[i].name != NULL)
            card->loras.items[card->loras.n++] = loras[i].name;
    }
    vsr__cfg_check_unique(d, "LoRA name", keys, nodes, n);
    vsr_free(keys);
    vsr_free(nodes);
    return rc;
}

#define CARD_OFF(m) offsetof(vsr_model_card_conf_t, m)

#define CARD_INERT "descriptive: vsr neither routes on it nor shows it"

static const cfg_field_t card_fields[] = {
    {.key = "family", .decode = vsr__cfg_accept_text, .inert = CARD_INERT},
    {.key = "lifecycle", .decode = vsr__cfg_accept_text, .inert = CARD_INERT},
    {.key = "released_at", .decode = vsr__cfg_accept_text, .inert = CARD_INERT},
    {.key = "revision", .decode = vsr__cfg_accept_text, .inert = CARD_INERT},
    {.key = "knowledge_cutoff", .decode = vsr__cfg_accept_text, .inert = CARD_INERT},
    {.key = "presentation", .inert = CARD_INERT},
    {.key = "distribution", .inert = CARD_INERT},
    {.key = "name", .decode = vsr__cfg_string, .flags = CFG_REQUIRED, .offset = CARD_OFF(name)},
    {.key = "description", .decode = decode_prose, .offset = CARD_OFF(description)},
    {.key = "param_size", .decode = decode_param_size, .offset = CARD_OFF(param_size)},
    {.key = "loras", .decode = decode_loras, .flags = CFG_NULL_OK},
    {.key = "display_name", .inert = CARD_INERT},
    {.key = "publisher", .inert = CARD_INERT},
    {.key = "context_window_size", .decode = vsr__cfg_uint, .offset = CARD_OFF(context_window_size),
     .size = sizeof(uint64_t), .min = 0, .max = INT64_MAX},
    {.key = "max_output_tokens", .inert = CARD_INERT},
    {.key = "capabilities", .decode = vsr__cfg_strlist, .flags = CFG_NULL_OK, .offset = CARD_OFF(capabilities)},
    {.key = "modalities", .inert = CARD_INERT},
    {.key = "modality", .inert = CARD_INERT},
    {.key = "tags", .inert = CARD_INERT},
    {.key = "quality_score", .decode = vsr__cfg_double, .flags = CFG_HAS, .offset = CARD_OFF(quality_score),
     .has_offset = CARD_OFF(has_quality_score), .dmin = 0, .dmax = 1},
};

static void finish_card(cfg_decoder_t *d, const cfg_node_t *map, void *obj, const cfg_node_t *const *seen,
                        size_t index)
{
    const cfg_node_t *name = vsr__cfg_map_get(map, "name");
    vsr__cfg_mark(d, obj, name ? name : map);
}

static const cfg_spec_t card_spec = {
    .size = sizeof(vsr_model_card_conf_t),
    .fields = card_fields,
    .n_fields = VSR_ARRAY_LEN(card_fields),
    .finish = finish_card,
};

static int decode_model_cards(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj)
{
    config_box_t *box = d->user;
    cfg_field_t lf = {.key = "modelCards", .spec = &card_spec, .offset = offsetof(vsr_config_t, model_cards),
                      .count_offset = offsetof(vsr_config_t, n_model_cards)};
    return vsr__cfg_list(d, &lf, val, &box->conf);
}

/* Cards describe models, which are global: one list for every recipe. */
static int decode_recipe_model_cards(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj)
{
    if (vsr__cfg_is_empty(val))
        return 0;
    vsr__cfg_node_error(d, d->key ? d->key : val,
                        "modelCards are global: declare them in the top-level routing block, not in a recipe");
    return -1;
}

/* Keys a newer reference schema lists with no fields and no behaviour in its
 * code: vsr will not guess one (docs/configuration.md#not-supported-yet). */
#define NO_MEANING                                                                                                    \
    " (the reference names this key in its newest schema but defines no fields or behaviour for it; vsr does not " \
    "guess one)"

#define ROUTING_COMMON_FIELDS                                                                                         \
    {.key = "strategy", .decode = vsr__cfg_choice, .flags = CFG_HAS, .offset = RC_OFF(strategy_confidence),          \
     .choices = strategies, .has_offset = RC_OFF(has_strategy)},                                                       \
        {.key = "signals", .decode = vsr__cfg_decode_signals, .flags = CFG_NULL_OK, .offset = RC_OFF(signals)},                \
        {.key = "projections", .decode = vsr__cfg_object, .flags = CFG_NULL_OK, .offset = RC_OFF(projections),        \
         .spec = &vsr__cfg_projections_spec},                                                                          \
        {.key = "decisions", .decode = vsr__cfg_list, .flags = CFG_NULL_OK, .offset = RC_OFF(decisions),              \
         .count_offset = RC_OFF(n_decisions), .spec = &decision_spec},                                                 \
        {.key = "fallback", .decode = vsr__cfg_object, .flags = CFG_NULL_OK, .offset = RC_OFF(fallback),              \
         .spec = &vsr__cfg_scoped_fallback_spec},                                                                      \
        {.key = "data_policy", .decode = vsr__cfg_unsupported, .arg = NO_MEANING},                                      \
        {.key = "candidate_requirements", .decode = vsr__cfg_unsupported, .arg = NO_MEANING}

static const cfg_field_t routing_fields[] = {
    ROUTING_COMMON_FIELDS,
    {.key = "modelCards", .decode = decode_model_cards, .flags = CFG_NULL_OK},
    {.key = "model_bindings", .flags = CFG_UNIMPLEMENTED},
};

static void finish_routing(cfg_decoder_t *d, const cfg_node_t *map, void *obj, const cfg_node_t *const *seen,
                           size_t index)
{
    check_recipe(d, obj, "routing", vsr__cfg_map_get(map, "decisions"));
}

const cfg_spec_t vsr__cfg_routing_spec = {
    .size = sizeof(vsr_recipe_conf_t),
    .fields = routing_fields,
    .n_fields = VSR_ARRAY_LEN(routing_fields),
    .finish = finish_routing,
};

static const cfg_field_t recipe_routing_fields[] = {
    ROUTING_COMMON_FIELDS,
    {.key = "modelCards", .decode = decode_recipe_model_cards},
};

static const cfg_spec_t recipe_routing_spec = {
    .size = sizeof(vsr_recipe_conf_t),
    .fields = recipe_routing_fields,
    .n_fields = VSR_ARRAY_LEN(recipe_routing_fields),
};

static const cfg_field_t recipe_fields[] = {
    {.key = "name", .decode = vsr__cfg_string, .flags = CFG_REQUIRED, .offset = RC_OFF(name)},
    {.key = "description", .decode = decode_prose, .offset = RC_OFF(description)},
    {.key = "routing", .decode = vsr__cfg_object, .flags = CFG_NULL_OK, .spec = &recipe_routing_spec},
};

static void finish_recipe(cfg_decoder_t *d, const cfg_node_t *map, void *obj, const cfg_node_t *const *seen,
                          size_t index)
{
    vsr_recipe_conf_t *r = obj;
    const cfg_node_t *name = vsr__cfg_map_get(map, "name");
    vsr__cfg_mark(d, r, name ? name : map);
    char where[160];
    snprintf(where, sizeof(where), "recipe %s: routing", r->name ? quote_str(d, r->name) : "?");
    check_recipe(d, r, where, vsr__cfg_map_get(vsr__cfg_map_get(map, "routing"), "decisions"));
}

const cfg_spec_t vsr__cfg_recipe_spec = {
    .size = sizeof(vsr_recipe_conf_t),
    .fields = recipe_fields,
    .n_fields = VSR_ARRAY_LEN(recipe_fields),
    .finish = finish_recipe,
};

/* ==== entrypoints ======================================================================== */

#define EP_OFF(m) offsetof(vsr_entrypoint_conf_t, m)

static const cfg_field_t entrypoint_fields[] = {
    {.key = "model_names", .decode = vsr__cfg_strlist, .flags = CFG_REQUIRED | CFG_NONEMPTY,
     .offset = EP_OFF(model_names)},
    {.key = "recipe", .decode = vsr__cfg_string, .offset = EP_OFF(recipe)},
    {.key = "rules", .decode = vsr__cfg_unsupported, .arg = NO_MEANING},
};

static void finish_entrypoint(cfg_decoder_t *d, const cfg_node_t *map, void *obj, const cfg_node_t *const *seen,
                              size_t index)
{
    vsr_entrypoint_conf_t *e = obj;
    const cfg_node_t *recipe = vsr__cfg_map_get(map, "recipe"), *names = vsr__cfg_map_get(map, "model_names");
    const cfg_node_t *rules = vsr__cfg_map_get(map, "rules");
    if (recipe != NULL)
        vsr__cfg_mark(d, &e->recipe, recipe);
    else if (rules == NULL || vsr__cfg_is_empty(rules))
        vsr__cfg_node_error(d, map, "missing required key \"recipe\"");
    if (names != NULL && names->kind == CFG_NODE_SEQ && names->n == e->model_names.n)
        for (size_t i = 0; i < e->model_names.n; i++)
            vsr__cfg_mark(d, &e->model_names.items[i], names->items[i]);
}

const cfg_spec_t vsr__cfg_entrypoint_spec = {
    .size = sizeof(vsr_entrypoint_conf_t),
    .fields = entrypoint_fields,
    .n_fields = VSR_ARRAY_LEN(entrypoint_fields),
    .finish = finish_entrypoint,
};
