/*
 * cfg_graph.c — algorithm.graph (`type: graph`, a vsr extension): a request
 * graph written in YAML, decoded into vsr_graph_conf_t (config.h).
 *
 * A node is a list (a seq) or a mapping with exactly one kind key (seq,
 * call, parallel, loop, branch, transform, respond, subgraph) and an
 * optional `name` beside it; the mapping kinds also take `name` inside their
 * own mapping (one of the two places, not both).  Each kind's fields are a
 * cfg_spec_t table; the keys holding nodes (loop.body, branch.then/else) and
 * predicates (loop.until, branch.if) are decoded here, so the node count and
 * depth stay bounded while the tree is built (a document made huge with
 * aliases stops at the bound).  After the root and the subgraphs decoded,
 * every subgraph node is resolved to its definition, recursion is refused,
 * and the bounds are checked again with each subgraph expanded where it is
 * used.
 *
 * Model names are checked against providers.models and the decision's
 * modelRefs in cfg_check.c, signal names against the recipe's signals in
 * cfg_signals.c, once the whole document is decoded (vsr__cfg_graph_walk).
 */
#include "config/cfg_internal.h"

#include <stdio.h>
#include <string.h>

#define GRAPH_MAX_SUBGRAPHS 64
#define GRAPH_MAX_NAME 64             /* bytes of a node or subgraph name */
#define GRAPH_MAX_TOP_LOGPROBS 20
#define GRAPH_MAX_COMPLETION_TOKENS (1 << 24)

static const char *q(cfg_decoder_t *d, const char *s)
{
    return vsr__cfg_quote(d->pool, s, strlen(s));
}

/* The state of one graph's decoding: nodes of the definition being decoded
 * (the root or one subgraph) and whether its bound was reported. */
typedef struct {
    cfg_decoder_t *d;
    size_t n_nodes;
    int too_many;
} graph_ctx_t;

static int decode_node(graph_ctx_t *g, const cfg_node_t *val, vsr_gnode_conf_t *n, unsigned depth);

/* ---- fields ---------------------------------------------------------------------------- */

/* A node's name: a short string (it labels evidence and metrics). */
static int decode_name(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj)
{
    const char *s = vsr__cfg_get_string(d, f, val);
    if (s == NULL)
        return -1;
    if (val->len > GRAPH_MAX_NAME) {
        vsr__cfg_node_error(d, val, "%s must be at most %d bytes, got %zu", f->key, GRAPH_MAX_NAME, val->len);
        return -1;
    }
    *(char **)((char *)obj + f->offset) = vsr__cfg_strdup(d, s);
    return 0;
}

/* Prompts: text that may span lines, non-empty, no NUL. */
static int decode_text(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj)
{
    const char *s = vsr__cfg_get_text(d, val);
    if (s == NULL)
        return -1;
    if (val->len == 0) {
        vsr__cfg_node_error(d, val, "%s must be non-empty text", f->key);
        return -1;
    }
    *(char **)((char *)obj + f->offset) = vsr_pool_strndup(d->pool, s, val->len);
    return 0;
}

/* models: 1..VSR_GRAPH_MAX_FANOUT names, no repeats, each remembered with
 * its position for the checks in cfg_check.c. */
static int decode_models(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj)
{
    if (val->kind == CFG_NODE_SEQ && val->n > VSR_GRAPH_MAX_FANOUT) {
        vsr__cfg_node_error(d, val, "%s: at most %u models, got %zu", f->key, VSR_GRAPH_MAX_FANOUT, val->n);
        return -1;
    }
    if (vsr__cfg_strlist(d, f, val, obj) != 0)
        return -1;
    vsr_strlist_conf_t *l = (vsr_strlist_conf_t *)((char *)obj + f->offset);
    for (size_t i = 0; i < l->n; i++)
        vsr__cfg_mark(d, &l->items[i], val->items[i]);
    vsr__cfg_check_unique(d, "model", (const char *const *)l->items, (const cfg_node_t *const *)val->items, l->n);
    return 0;
}

static const char *const on_error_choices[] = {"skip", "fail", NULL}; /* index = on_error_fail */
static const char *const aggregates[] = {"last", "first", "vote", "concat", "choices", "longest", NULL};

#define GN(m) offsetof(vsr_gnode_conf_t, m)
#define G_UINT(k, m, lo, hi) {.key = (k), .decode = vsr__cfg_uint, .offset = GN(m), \
                              .size = sizeof(((vsr_gnode_conf_t *)0)->m), .min = (lo), .max = (hi)}
#define G_NAME {.key = "name", .decode = decode_name, .offset = GN(name)}
/* what a call and a parallel share: the models and the parameters of each hop */
#define G_HOP                                                                                                \
    {.key = "models", .decode = decode_models, .flags = CFG_NULL_OK | CFG_NONEMPTY, .offset = GN(models)},  \
    {.key = "temperature", .decode = vsr__cfg_double, .flags = CFG_HAS, .offset = GN(temperature),          \
     .has_offset = GN(has_temperature), .dmin = 0, .dmax = 2},                                              \
    G_UINT("max_completion_tokens", max_completion_tokens, 1, GRAPH_MAX_COMPLETION_TOKENS),                 \
    {.key = "timeout", .decode = vsr__cfg_duration_ms, .offset = GN(timeout_ms)},                           \
    {.key = "logprobs", .decode = vsr__cfg_bool, .offset = GN(logprobs)},                                   \
    G_UINT("top_logprobs", top_logprobs, 0, GRAPH_MAX_TOP_LOGPROBS),                                        \
    {.key = "strip_tools", .decode = vsr__cfg_bool, .offset = GN(strip_tools)}

/* top_logprobs asks for the alternatives of each token's logprob */
static void check_top_logprobs(cfg_decoder_t *d, const cfg_spec_t *s, const vsr_gnode_conf_t *n,
                               const cfg_node_t *const *seen)
{
    if (n->top_logprobs > 0 && !n->logprobs)
        vsr__cfg_node_error(d, vsr__cfg_seen(s, seen, "top_logprobs"), "top_logprobs needs logprobs: true");
}

static const cfg_field_t call_fields[] = {
    G_NAME, G_HOP,
    {.key = "stream", .decode = vsr__cfg_bool, .offset = GN(stream)},
};

static void finish_call(cfg_decoder_t *d, const cfg_node_t *map, void *obj, const cfg_node_t *const *seen,
                        size_t index)
{
    (void)map, (void)index;
    cfg_spec_t s = {.fields = call_fields, .n_fields = VSR_ARRAY_LEN(call_fields)};
    check_top_logprobs(d, &s, obj, seen);
}

static const cfg_spec_t call_spec = {.size = sizeof(vsr_gnode_conf_t),
                                     .fields = call_fields,
                                     .n_fields = VSR_ARRAY_LEN(call_fields),
                                     .finish = finish_call};

static const cfg_field_t parallel_fields[] = {
    G_NAME, G_HOP,
    G_UINT("count", count, 1, VSR_GRAPH_MAX_FANOUT),
    G_UINT("max_concurrency", max_concurrency, 1, VSR_GRAPH_MAX_FANOUT),
    G_UINT("first_k", first_k, 1, VSR_GRAPH_MAX_FANOUT),
    G_UINT("min_success", min_success, 1, VSR_GRAPH_MAX_FANOUT),
    {.key = "on_error", .decode = vsr__cfg_choice, .offset = GN(on_error_fail), .choices = on_error_choices},
};

/* on_error unset: algorithm.on_error decides once the algorithm is decoded
 * (vsr__cfg_graph_defaults) */
static void init_parallel(cfg_decoder_t *d, void *obj)
{
    (void)d;
    ((vsr_gnode_conf_t *)obj)->on_error_fail = -1;
}

/* first_k and min_success within the calls made; with neither models nor
 * count the calls are the decision's modelRefs (checked in cfg_check.c) */
static void finish_parallel(cfg_decoder_t *d, const cfg_node_t *map, void *obj, const cfg_node_t *const *seen,
                            size_t index)
{
    (void)map, (void)index;
    vsr_gnode_conf_t *n = obj;
    cfg_spec_t s = {.fields = parallel_fields, .n_fields = VSR_ARRAY_LEN(parallel_fields)};
    check_top_logprobs(d, &s, n, seen);
    uint64_t calls = n->count ? n->count : n->models.n;
    if (calls > 0 && n->first_k > calls)
        vsr__cfg_node_error(d, vsr__cfg_seen(&s, seen, "first_k"),
                            "first_k must not exceed the parallel's %llu calls, got %llu", (unsigned long long)calls,
                            (unsigned long long)n->first_k);
    if (calls > 0 && n->min_success > calls)
        vsr__cfg_node_error(d, vsr__cfg_seen(&s, seen, "min_success"),
                            "min_success must not exceed the parallel's %llu calls, got %llu",
                            (unsigned long long)calls, (unsigned long long)n->min_success);
    else if (n->first_k > 0 && n->min_success > n->first_k)
        vsr__cfg_node_error(d, vsr__cfg_seen(&s, seen, "min_success"),
                            "min_success must not exceed first_k (%llu), got %llu", (unsigned long long)n->first_k,
                            (unsigned long long)n->min_success);
}

static const cfg_spec_t parallel_spec = {.size = sizeof(vsr_gnode_conf_t),
                                         .fields = parallel_fields,
                                         .n_fields = VSR_ARRAY_LEN(parallel_fields),
                                         .init = init_parallel,
                                         .finish = finish_parallel};

/* loop and branch: their node and predicate keys are decoded by decode_node
 * (they are listed in kinds[] below); the table holds the rest */
static const cfg_field_t loop_fields[] = {
    G_NAME,
    {.key = "max_rounds", .decode = vsr__cfg_uint, .flags = CFG_REQUIRED, .offset = GN(max_rounds),
     .size = sizeof(uint64_t), .min = 1, .max = VSR_GRAPH_MAX_ROUNDS},
};
static const cfg_spec_t loop_spec = {
    .size = sizeof(vsr_gnode_conf_t), .fields = loop_fields, .n_fields = VSR_ARRAY_LEN(loop_fields)};

static const cfg_field_t branch_fields[] = {G_NAME};
static const cfg_spec_t branch_spec = {
    .size = sizeof(vsr_gnode_conf_t), .fields = branch_fields, .n_fields = VSR_ARRAY_LEN(branch_fields)};

static const cfg_field_t transform_fields[] = {
    G_NAME,
    {.key = "system_prompt", .decode = decode_text, .offset = GN(system_prompt)},
    {.key = "prompt", .decode = decode_text, .offset = GN(prompt)},
    {.key = "append", .decode = decode_text, .offset = GN(append)},
};
static void finish_transform(cfg_decoder_t *d, const cfg_node_t *map, void *obj, const cfg_node_t *const *seen,
                             size_t index)
{
    (void)obj, (void)index;
    if (seen[1] == NULL && seen[2] == NULL && seen[3] == NULL)
        vsr__cfg_node_error(d, map, "transform needs at least one of system_prompt, prompt or append");
}
static const cfg_spec_t transform_spec = {.size = sizeof(vsr_gnode_conf_t),
                                          .fields = transform_fields,
                                          .n_fields = VSR_ARRAY_LEN(transform_fields),
                                          .finish = finish_transform};

static const cfg_field_t respond_fields[] = {
    G_NAME,
    {.key = "aggregate", .decode = vsr__cfg_string, .offset = GN(aggregate), .choices = aggregates},
};
static const cfg_spec_t respond_spec = {
    .size = sizeof(vsr_gnode_conf_t), .fields = respond_fields, .n_fields = VSR_ARRAY_LEN(respond_fields)};

/* The kinds, indexed by vsr_gnode_kind_t - 1: the kind key, the table of a
 * mapping kind (NULL: seq takes a list, subgraph a name), and the keys whose
 * values are nodes or predicates. */
static const struct {
    const char *key;
    const cfg_spec_t *spec;
    const char *structural[4];
} kinds[] = {
    {"seq", NULL, {NULL}},
    {"call", &call_spec, {NULL}},
    {"parallel", &parallel_spec, {NULL}},
    {"loop", &loop_spec, {"until", "body", NULL}},
    {"branch", &branch_spec, {"if", "then", "else", NULL}},
    {"transform", &transform_spec, {NULL}},
    {"respond", &respond_spec, {NULL}},
    {"subgraph", NULL, {NULL}},
};

static int kind_of_key(const cfg_node_t *k)
{
    for (size_t i = 0; i < VSR_ARRAY_LEN(kinds); i++)
        if (vsr_slice_eq_cstr(vsr_slice(k->str, k->len), kinds[i].key))
            return (int)i + 1;
    return 0;
}

static int kind_has_key(size_t ki, const cfg_node_t *k)
{
    vsr_slice_t key = vsr_slice(k->str, k->len);
    if (kinds[ki].spec != NULL)
        for (size_t j = 0; j < kinds[ki].spec->n_fields; j++)
            if (vsr_slice_eq_cstr(key, kinds[ki].spec->fields[j].key))
                return 1;
    for (size_t j = 0; kinds[ki].structural[j] != NULL; j++)
        if (vsr_slice_eq_cstr(key, kinds[ki].structural[j]))
            return 1;
    return 0;
}

/* ---- predicates ------------------------------------------------------------------------ */

#define PR(m) offsetof(vsr_gpred_conf_t, m)
static const cfg_field_t signal_fields[] = {
    {.key = "type", .decode = vsr__cfg_string, .flags = CFG_REQUIRED, .offset = PR(signal_type)},
    {.key = "name", .decode = vsr__cfg_string, .flags = CFG_REQUIRED, .offset = PR(signal_name)},
};

/* The type is a rule leaf's condition type; the name is resolved against
 * the recipe's signals with the rule leaves (cfg_signals.c), at the
 * position kept here. */
static void finish_signal(cfg_decoder_t *d, const cfg_node_t *map, void *obj, const cfg_node_t *const *seen,
                          size_t index)
{
    (void)map, (void)index;
    vsr_gpred_conf_t *p = obj;
    if (p->signal_type != NULL) {
        int status = vsr__cfg_condition_type(p->signal_type);
        if (vsr__cfg_condition_refusal(p->signal_type))
            vsr__cfg_node_error(d, seen[0], "%s", vsr__cfg_condition_refusal(p->signal_type));
        else if (status < 0)
            vsr__cfg_node_error(d, seen[0], "unknown condition type %s", q(d, p->signal_type));
        else if (status == 0)
            vsr__cfg_node_error(d, seen[0], "condition type \"%s\" is not supported yet", p->signal_type);
    }
    if (p->signal_name != NULL)
        vsr__cfg_mark(d, p->signal_name, seen[1]);
}

static const cfg_spec_t signal_spec = {.size = sizeof(vsr_gpred_conf_t),
                                       .fields = signal_fields,
                                       .n_fields = VSR_ARRAY_LEN(signal_fields),
                                       .finish = finish_signal};

static const char *const predicate_keys[] = {NULL, "succeeded", "confidence_gte", "answers_agree", "signal",
                                             "rounds_gte"}; /* index = vsr_gpred_kind_t */
#define PREDICATES "succeeded, confidence_gte, answers_agree, signal or rounds_gte"

/* `until` / `if`: a mapping with exactly one predicate key. */
static int decode_predicate(cfg_decoder_t *d, const char *what, const cfg_node_t *val, vsr_gpred_conf_t *p)
{
    if (val->kind != CFG_NODE_MAP || val->n == 0) {
        vsr__cfg_node_error(d, val, "%s: expected a mapping with one of " PREDICATES ", got %s", what,
                            val->kind == CFG_NODE_MAP ? "an empty mapping" : vsr__cfg_node_what(val));
        return -1;
    }
    const cfg_node_t *k = val->items[0], *v = val->items[1];
    if (val->n > 1) {
        vsr__cfg_node_error(d, val->items[2], "%s holds one predicate, got a second key", what);
        return -1;
    }
    int kind = 0;
    if (k->kind == CFG_NODE_SCALAR && k->type == CFG_STR)
        for (int i = 1; i < (int)VSR_ARRAY_LEN(predicate_keys); i++)
            if (vsr_slice_eq_cstr(vsr_slice(k->str, k->len), predicate_keys[i]))
                kind = i;
    if (kind == 0) {
        vsr__cfg_node_error(d, k, "unknown predicate %s (one of " PREDICATES ")",
                            k->kind == CFG_NODE_SCALAR ? vsr__cfg_quote(d->pool, k->str, k->len) : "key");
        return -1;
    }
    cfg_field_t f = {.key = predicate_keys[kind]};
    int rc = 0, flag = 0;
    memset(p, 0, sizeof(*p));
    p->kind = (vsr_gpred_kind_t)kind;
    switch (p->kind) {
    case VSR_GPRED_SUCCEEDED:
    case VSR_GPRED_AGREE:
        rc = vsr__cfg_bool(d, &f, v, &flag);
        p->negate = !flag;
        break;
    case VSR_GPRED_CONFIDENCE_GTE:
        f.dmin = 0, f.dmax = 1;
        rc = vsr__cfg_double(d, &f, v, &p->value);
        break;
    case VSR_GPRED_ROUNDS_GTE: {
        uint64_t rounds = 0;
        f.size = sizeof(rounds), f.min = 1, f.max = VSR_GRAPH_MAX_ROUNDS;
        rc = vsr__cfg_uint(d, &f, v, &rounds);
        p->value = (double)rounds;
        break;
    }
    case VSR_GPRED_SIGNAL:
        rc = vsr__cfg_decode_object(d, &signal_spec, v, p, 0);
        break;
    case VSR_GPRED_NONE:
        break;
    }
    return rc;
}

/* ---- nodes --------------------------------------------------------------------------- */

static int decode_kids(graph_ctx_t *g, const cfg_node_t *list, vsr_gnode_conf_t *n, unsigned depth)
{
    if (list->n == 0) {
        vsr__cfg_node_error(g->d, list, "a seq needs at least one node");
        return -1;
    }
    n->kids = vsr_pool_alloc(g->d->pool, list->n * sizeof(*n->kids));
    memset(n->kids, 0, list->n * sizeof(*n->kids));
    n->n_kids = list->n;
    int rc = 0;
    for (size_t i = 0; i < list->n; i++)
        if (decode_node(g, list->items[i], &n->kids[i], depth + 1) != 0)
            rc = -1;
    return rc;
}

/* A mapping kind's value: the keys of its table through the table, its
 * node and predicate keys here.  A key of another kind gets a message
 * saying so. */
static int decode_kind_map(graph_ctx_t *g, size_t ki, const cfg_node_t *val, vsr_gnode_conf_t *n, unsigned depth)
{
    cfg_decoder_t *d = g->d;
    cfg_node_t empty = {.kind = CFG_NODE_MAP, .line = val->line, .col = val->col};
    if (val->kind == CFG_NODE_SCALAR && val->type == CFG_NULL)
        val = &empty; /* `call:` or `respond: null`: every default */
    if (val->kind != CFG_NODE_MAP) {
        vsr__cfg_node_error(d, val, "%s: expected a mapping, got %s", kinds[ki].key, vsr__cfg_node_what(val));
        return -1;
    }
    cfg_node_t table = *val;
    table.items = val->n ? vsr_malloc(2 * val->n * sizeof(*table.items)) : NULL;
    table.n = 0;
    const cfg_node_t *structural[4] = {NULL};
    int rc = 0;
    for (size_t i = 0; i < val->n; i++) {
        const cfg_node_t *k = val->items[2 * i], *v = val->items[2 * i + 1];
        size_t s = 0;
        while (k->kind == CFG_NODE_SCALAR && kinds[ki].structural[s] != NULL &&
               !vsr_slice_eq_cstr(vsr_slice(k->str, k->len), kinds[ki].structural[s]))
            s++;
        if (k->kind == CFG_NODE_SCALAR && kinds[ki].structural[s] != NULL) {
            if (structural[s] == NULL) /* a repeated key was reported with the tree */
                structural[s] = v;
            continue;
        }
        if (k->kind == CFG_NODE_SCALAR && k->type == CFG_STR && !kind_has_key(ki, k)) {
            char owners[128];
            size_t o = 0, count = 0, total = 0;
            owners[0] = '\0';
            for (size_t j = 0; j < VSR_ARRAY_LEN(kinds); j++)
                total += j != ki && kind_has_key(j, k);
            for (size_t j = 0; j < VSR_ARRAY_LEN(kinds); j++)
                if (j != ki && kind_has_key(j, k) && o < sizeof(owners)) {
                    count++;
                    o += (size_t)snprintf(owners + o, sizeof(owners) - o, "%s%s",
                                          count == 1 ? "" : count == total ? " and " : ", ", kinds[j].key);
                }
            if (count > 0) {
                vsr__cfg_node_error(d, k, "%s is not a field of a %s node (only of %s)",
                                    vsr__cfg_quote(d->pool, k->str, k->len), kinds[ki].key, owners);
                rc = -1;
                continue;
            }
        }
        table.items[2 * table.n] = val->items[2 * i];
        table.items[2 * table.n + 1] = val->items[2 * i + 1];
        table.n++;
    }
    if (vsr__cfg_decode_object(d, kinds[ki].spec, &table, n, 0) != 0)
        rc = -1;
    vsr_free(table.items);

    switch ((vsr_gnode_kind_t)(ki + 1)) {
    case VSR_GNODE_LOOP:
        if (structural[0] != NULL && decode_predicate(d, "until", structural[0], &n->until) != 0)
            rc = -1;
        if (structural[1] == NULL) {
            vsr__cfg_node_error(d, val, "missing required key \"body\"");
            return -1;
        }
        n->kids = vsr_pool_alloc(d->pool, sizeof(*n->kids));
        memset(n->kids, 0, sizeof(*n->kids));
        n->n_kids = 1;
        if (decode_node(g, structural[1], &n->kids[0], depth + 1) != 0)
            rc = -1;
        break;
    case VSR_GNODE_BRANCH:
        if (structural[0] == NULL) {
            vsr__cfg_node_error(d, val, "missing required key \"if\"");
            rc = -1;
        } else if (decode_predicate(d, "if", structural[0], &n->until) != 0) {
            rc = -1;
        }
        if (structural[1] == NULL) {
            vsr__cfg_node_error(d, val, "missing required key \"then\"");
            return -1;
        }
        n->n_kids = structural[2] ? 2 : 1;
        n->kids = vsr_pool_alloc(d->pool, n->n_kids * sizeof(*n->kids));
        memset(n->kids, 0, n->n_kids * sizeof(*n->kids));
        for (size_t i = 0; i < n->n_kids; i++)
            if (decode_node(g, structural[1 + i], &n->kids[i], depth + 1) != 0)
                rc = -1;
        break;
    default:
        break;
    }
    return rc;
}

static int decode_node(graph_ctx_t *g, const cfg_node_t *val, vsr_gnode_conf_t *n, unsigned depth)
{
    cfg_decoder_t *d = g->d;
    n->line = val->line;
    n->col = val->col;
    if (++g->n_nodes > VSR_GRAPH_MAX_NODES) {
        if (!g->too_many)
            vsr__cfg_node_error(d, val, "a graph holds at most %u nodes", VSR_GRAPH_MAX_NODES);
        g->too_many = 1;
        return -1;
    }
    if (depth > VSR_GRAPH_MAX_DEPTH) {
        vsr__cfg_node_error(d, val, "graph nodes nest at most %u deep", VSR_GRAPH_MAX_DEPTH);
        return -1;
    }
    if (val->kind == CFG_NODE_SEQ) {
        n->kind = VSR_GNODE_SEQ;
        n->name = vsr__cfg_strdup(d, "seq");
        return decode_kids(g, val, n, depth);
    }
    if (val->kind != CFG_NODE_MAP) {
        vsr__cfg_node_error(d, val, "expected a graph node (a mapping naming its kind, or a list), got %s",
                            vsr__cfg_node_what(val));
        return -1;
    }
    const cfg_node_t *kind_key = NULL, *kind_val = NULL, *name_key = NULL, *name_val = NULL;
    int kind = 0, rc = 0;
    for (size_t i = 0; i < val->n; i++) {
        const cfg_node_t *k = val->items[2 * i], *v = val->items[2 * i + 1];
        if (k->kind != CFG_NODE_SCALAR || k->type != CFG_STR) {
            vsr__cfg_node_error(d, k, "expected a string key, got %s", vsr__cfg_node_what(k));
            rc = -1;
            continue;
        }
        int kk = kind_of_key(k);
        if (kk != 0 && kind_key == NULL) {
            kind = kk, kind_key = k, kind_val = v;
        } else if (kk != 0) {
            if (kk != kind) /* the same key twice was reported with the tree */
                vsr__cfg_node_error(d, k, "a graph node has one kind: %s and %s (first at %u:%u)",
                                    vsr__cfg_quote(d->pool, kind_key->str, kind_key->len),
                                    vsr__cfg_quote(d->pool, k->str, k->len), kind_key->line, kind_key->col);
            rc = -1;
        } else if (vsr_slice_eq_cstr(vsr_slice(k->str, k->len), "name")) {
            if (name_key == NULL)
                name_key = k, name_val = v;
        } else {
            vsr__cfg_node_error(d, k, "unknown key %s (a graph node holds one of seq, call, parallel, loop, branch, "
                                "transform, respond or subgraph, and an optional name)",
                                vsr__cfg_quote(d->pool, k->str, k->len));
            rc = -1;
        }
    }
    if (kind_key == NULL) {
        if (rc == 0)
            vsr__cfg_node_error(d, val, "a graph node needs one of seq, call, parallel, loop, branch, transform, "
                                "respond or subgraph");
        return -1;
    }
    n->kind = (vsr_gnode_kind_t)kind;
    char *outer = NULL;
    cfg_field_t nf = {.key = "name"};
    if (name_val != NULL && decode_name(d, &nf, name_val, &outer) != 0)
        rc = -1;
    size_t ki = (size_t)kind - 1;
    switch (n->kind) {
    case VSR_GNODE_SEQ:
        if (kind_val->kind != CFG_NODE_SEQ) {
            vsr__cfg_node_error(d, kind_val, "seq: expected a list of nodes, got %s", vsr__cfg_node_what(kind_val));
            rc = -1;
        } else if (decode_kids(g, kind_val, n, depth) != 0) {
            rc = -1;
        }
        break;
    case VSR_GNODE_SUBGRAPH: {
        cfg_field_t sf = {.key = "subgraph"};
        if (decode_name(d, &sf, kind_val, &n->subgraph) != 0)
            rc = -1;
        break;
    }
    default:
        if (decode_kind_map(g, ki, kind_val, n, depth) != 0)
            rc = -1;
        break;
    }
    if (outer != NULL && n->name != NULL) {
        vsr__cfg_node_error(d, name_key, "name is set twice: beside \"%s\" and inside it", kinds[ki].key);
        rc = -1;
    } else if (outer != NULL) {
        n->name = outer;
    }
    if (n->name == NULL)
        n->name = vsr__cfg_strdup(d, kinds[ki].key);
    if (n->kind == VSR_GNODE_RESPOND && n->aggregate == NULL)
        n->aggregate = vsr__cfg_strdup(d, "last");
    return rc;
}

/* ---- the graph ------------------------------------------------------------------------- */

typedef void (*node_fn)(vsr_gnode_conf_t *n, void *arg);

/* Every node of one definition, parents first; subgraph nodes are not
 * followed (their definition is walked on its own). */
static void walk(vsr_gnode_conf_t *n, node_fn fn, void *arg)
{
    fn(n, arg);
    for (size_t i = 0; i < n->n_kids; i++)
        walk(&n->kids[i], fn, arg);
}

static void walk_graph(vsr_graph_conf_t *gr, node_fn fn, void *arg)
{
    if (gr->root.kind != 0)
        walk(&gr->root, fn, arg);
    for (size_t i = 0; i < gr->n_subgraphs; i++)
        if (gr->subgraphs[i].node.kind != 0)
            walk(&gr->subgraphs[i].node, fn, arg);
}

typedef struct {
    cfg_decoder_t *d;
    vsr_graph_conf_t *gr;
} resolve_t;

static void resolve_node(vsr_gnode_conf_t *n, void *arg)
{
    resolve_t *r = arg;
    if (n->kind != VSR_GNODE_SUBGRAPH || n->subgraph == NULL)
        return;
    for (size_t i = 0; i < r->gr->n_subgraphs; i++)
        if (r->gr->subgraphs[i].name != NULL && strcmp(r->gr->subgraphs[i].name, n->subgraph) == 0) {
            n->resolved = &r->gr->subgraphs[i].node;
            return;
        }
    vsr__cfg_error(r->d->dg, n->line, n->col, "subgraph %s is not defined in algorithm.graph.subgraphs",
                   q(r->d, n->subgraph));
}

/* Recursion: a depth-first search over the subgraphs a definition uses,
 * with the chain of names so far for the message. */
typedef struct {
    cfg_decoder_t *d;
    vsr_graph_conf_t *gr;
    unsigned char *state; /* per subgraph: 0 unseen, 1 on the chain, 2 done */
    size_t chain[GRAPH_MAX_SUBGRAPHS + 1];
    size_t n_chain;
} cycle_t;

static void visit_subgraph(cycle_t *c, size_t i);

static void cycle_node(vsr_gnode_conf_t *n, void *arg)
{
    cycle_t *c = arg;
    if (n->kind != VSR_GNODE_SUBGRAPH || n->resolved == NULL)
        return;
    size_t j = (size_t)((const vsr_gsub_conf_t *)((const char *)n->resolved - offsetof(vsr_gsub_conf_t, node)) -
                        c->gr->subgraphs);
    if (c->state[j] == 2)
        return;
    if (c->state[j] == 0) {
        visit_subgraph(c, j);
        return;
    }
    char chain[512];
    size_t o = 0, from = 0;
    while (c->chain[from] != j)
        from++;
    for (size_t k = from; k < c->n_chain && o < sizeof(chain); k++)
        o += (size_t)snprintf(chain + o, sizeof(chain) - o, "%s -> ", c->gr->subgraphs[c->chain[k]].name);
    if (o < sizeof(chain))
        snprintf(chain + o, sizeof(chain) - o, "%s", c->gr->subgraphs[j].name);
    vsr__cfg_error(c->d->dg, n->line, n->col, "subgraph %s reaches itself (%s)", q(c->d, c->gr->subgraphs[j].name),
                   chain);
    n->resolved = NULL; /* the loaded graph never holds a cycle; the load fails anyway */
}

static void visit_subgraph(cycle_t *c, size_t i)
{
    c->state[i] = 1;
    c->chain[c->n_chain++] = i;
    if (c->gr->subgraphs[i].node.kind != 0)
        walk(&c->gr->subgraphs[i].node, cycle_node, c);
    c->n_chain--;
    c->state[i] = 2;
}

/* The bounds again with every subgraph expanded where it is used: at most
 * VSR_GRAPH_MAX_NODES + 1 nodes are visited, whatever the document. */
typedef struct {
    cfg_decoder_t *d;
    size_t nodes, calls;
    int failed;
} expand_t;

static void expand(expand_t *e, const vsr_gnode_conf_t *n, unsigned depth, const vsr_gnode_conf_t *via)
{
    if (e->failed)
        return;
    if (++e->nodes > VSR_GRAPH_MAX_NODES) {
        vsr__cfg_error(e->d->dg, via ? via->line : n->line, via ? via->col : n->col,
                       "a graph holds at most %u nodes, each subgraph counted at every use", VSR_GRAPH_MAX_NODES);
        e->failed = 1;
        return;
    }
    if (depth > VSR_GRAPH_MAX_DEPTH) {
        VSR_BUG_ON(via == NULL); /* each definition was bounded while it decoded */
        vsr__cfg_error(e->d->dg, via->line, via->col,
                       "subgraph %s used here makes graph nodes nest deeper than %u", q(e->d, via->subgraph),
                       VSR_GRAPH_MAX_DEPTH);
        e->failed = 1;
        return;
    }
    if (n->kind == VSR_GNODE_CALL || n->kind == VSR_GNODE_PARALLEL)
        e->calls++;
    if (n->kind == VSR_GNODE_SUBGRAPH && n->resolved != NULL)
        expand(e, n->resolved, depth + 1, via ? via : n);
    for (size_t i = 0; i < n->n_kids; i++)
        expand(e, &n->kids[i], depth + 1, via);
}

/* subgraphs: {name: node}, at most GRAPH_MAX_SUBGRAPHS */
static int decode_subgraphs(cfg_decoder_t *d, const cfg_node_t *val, vsr_graph_conf_t *gr)
{
    if (val->kind != CFG_NODE_MAP) {
        vsr__cfg_node_error(d, val, "subgraphs: expected a mapping of names to nodes, got %s",
                            vsr__cfg_node_what(val));
        return -1;
    }
    if (val->n > GRAPH_MAX_SUBGRAPHS) {
        vsr__cfg_node_error(d, val, "subgraphs: at most %d, got %zu", GRAPH_MAX_SUBGRAPHS, val->n);
        return -1;
    }
    gr->subgraphs = val->n ? vsr_pool_alloc(d->pool, val->n * sizeof(*gr->subgraphs)) : NULL;
    if (val->n)
        memset(gr->subgraphs, 0, val->n * sizeof(*gr->subgraphs));
    gr->n_subgraphs = val->n;
    int rc = 0;
    cfg_field_t nf = {.key = "a subgraph name"};
    for (size_t i = 0; i < val->n; i++) {
        vsr_gsub_conf_t *s = &gr->subgraphs[i];
        if (decode_name(d, &nf, val->items[2 * i], &s->name) != 0)
            rc = -1;
        for (size_t j = 0; s->name != NULL && j < i; j++)
            if (gr->subgraphs[j].name != NULL && strcmp(gr->subgraphs[j].name, s->name) == 0)
                s->name = NULL; /* a repeated key was reported with the tree; the first counts */
        graph_ctx_t g = {.d = d};
        if (decode_node(&g, val->items[2 * i + 1], &s->node, 1) != 0)
            rc = -1;
    }
    return rc;
}

static int decode_later(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj)
{
    (void)d, (void)f, (void)val, (void)obj;
    return 0; /* in finish_graph, once both keys are known */
}

static const cfg_field_t graph_fields[] = {
    {.key = "root", .decode = decode_later, .flags = CFG_REQUIRED},
    {.key = "subgraphs", .decode = decode_later, .flags = CFG_NULL_OK},
};

static void finish_graph(cfg_decoder_t *d, const cfg_node_t *map, void *obj, const cfg_node_t *const *seen,
                         size_t index)
{
    (void)map, (void)index;
    vsr_graph_conf_t *gr = obj;
    const cfg_node_t *root = seen[0], *subs = seen[1];
    unsigned before = d->dg->n_errors;
    int subs_first = subs != NULL && root != NULL &&
                     (subs->line < root->line || (subs->line == root->line && subs->col < root->col));
    graph_ctx_t g = {.d = d};
    if (subs_first)
        decode_subgraphs(d, subs, gr);
    if (root != NULL)
        decode_node(&g, root, &gr->root, 1);
    if (subs != NULL && !subs_first)
        decode_subgraphs(d, subs, gr);

    resolve_t r = {d, gr};
    walk_graph(gr, resolve_node, &r);
    unsigned char state[GRAPH_MAX_SUBGRAPHS] = {0};
    cycle_t c = {.d = d, .gr = gr, .state = state};
    if (gr->root.kind != 0)
        walk(&gr->root, cycle_node, &c);
    for (size_t i = 0; i < gr->n_subgraphs; i++)
        if (state[i] == 0)
            visit_subgraph(&c, i);

    if (d->dg->n_errors != before || root == NULL)
        return;
    expand_t e = {.d = d};
    expand(&e, &gr->root, 1, NULL);
    if (!e.failed && e.calls == 0)
        vsr__cfg_node_error(d, root, "a graph needs at least one call or parallel node reachable from its root");
    /* a subgraph the root does not use holds the same bounds */
    for (size_t i = 0; i < gr->n_subgraphs && !e.failed; i++) {
        e.nodes = 0;
        expand(&e, &gr->subgraphs[i].node, 1, NULL);
    }
}

const cfg_spec_t vsr__cfg_graph_spec = {.size = sizeof(vsr_graph_conf_t),
                                        .fields = graph_fields,
                                        .n_fields = VSR_ARRAY_LEN(graph_fields),
                                        .finish = finish_graph};

/* ---- after the algorithm --------------------------------------------------------------- */

static void default_on_error(vsr_gnode_conf_t *n, void *arg)
{
    if (n->kind == VSR_GNODE_PARALLEL && n->on_error_fail < 0)
        n->on_error_fail = *(const int *)arg;
}

void vsr__cfg_graph_defaults(vsr_graph_conf_t *gr, const char *on_error)
{
    int fail = on_error != NULL && strcmp(on_error, "fail") == 0;
    walk_graph(gr, default_on_error, &fail);
}

typedef struct {
    void (*fn)(const vsr_gnode_conf_t *n, void *arg);
    void *arg;
} const_walk_t;

static void call_const(vsr_gnode_conf_t *n, void *arg)
{
    const_walk_t *w = arg;
    w->fn(n, w->arg);
}

void vsr__cfg_graph_walk(const vsr_graph_conf_t *gr, void (*fn)(const vsr_gnode_conf_t *n, void *arg), void *arg)
{
    const_walk_t w = {fn, arg};
    walk_graph((vsr_graph_conf_t *)gr, call_const, &w);
}
