/*
 * cfg_projections.c — routing.projections (ref §1.10): partitions, scores
 * and mappings, their references (signals, earlier scores, outputs), the
 * order scores evaluate in (a cycle is refused), and the resolution of
 * `type: projection` conditions against the recipe's mapping outputs.
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

#include "config/cfg_internal.h"

#define DEFAULT_TEMPERATURE 1.0
#define DEFAULT_SLOPE 12.0

static const char *qs(cfg_decoder_t *d, const char *s)
{
    return vsr__cfg_quote(d->pool, s, strlen(s));
}

/* Marks obj with its `name` node (or the map), for messages after decoding. */
static void mark_named(cfg_decoder_t *d, const void *obj, const cfg_node_t *map)
{
    const cfg_node_t *name = vsr__cfg_map_get(map, "name");
    vsr__cfg_mark(d, obj, name ? name : map);
}

/* ---- partitions ---- */

#define PA_OFF(m) offsetof(vsr_partition_conf_t, m)
static const char *const partition_semantics[] = {"exclusive", "softmax_exclusive", NULL};

static const cfg_field_t partition_fields[] = {
    {.key = "name", .decode = vsr__cfg_string, .flags = CFG_REQUIRED, .offset = PA_OFF(name)},
    {.key = "semantics", .decode = vsr__cfg_choice, .offset = PA_OFF(softmax), .choices = partition_semantics},
    {.key = "temperature", .decode = vsr__cfg_double, .offset = PA_OFF(temperature), .dmin = 1e-6, .dmax = 1e6},
    {.key = "members", .decode = vsr__cfg_strlist, .flags = CFG_REQUIRED | CFG_NONEMPTY, .offset = PA_OFF(members)},
    {.key = "default", .decode = vsr__cfg_string, .offset = PA_OFF(default_)},
    {.key = "description", .decode = vsr__cfg_accept_text},
};

static void init_partition(cfg_decoder_t *d, void *obj)
{
    ((vsr_partition_conf_t *)obj)->temperature = DEFAULT_TEMPERATURE;
}

static void finish_partition(cfg_decoder_t *d, const cfg_node_t *map, void *obj, const cfg_node_t *const *seen,
                             size_t index)
{
    vsr_partition_conf_t *p = obj;
    mark_named(d, p, map);
    const cfg_node_t *members = vsr__cfg_map_get(map, "members");
    if (members && members->kind == CFG_NODE_SEQ && members->n == p->members.n)
        for (size_t i = 0; i < p->members.n; i++)
            vsr__cfg_mark(d, &p->members.items[i], members->items[i]);
    const cfg_node_t *def = vsr__cfg_map_get(map, "default");
    if (def)
        vsr__cfg_mark(d, &p->default_, def);
    if (p->default_ && p->members.n) {
        size_t i = 0;
        while (i < p->members.n && strcmp(p->members.items[i], p->default_) != 0)
            i++;
        if (i == p->members.n)
            vsr__cfg_node_error(d, def, "partition default %s is not one of its members", qs(d, p->default_));
    }
}

static const cfg_spec_t partition_spec = {
    .size = sizeof(vsr_partition_conf_t),
    .fields = partition_fields,
    .n_fields = VSR_ARRAY_LEN(partition_fields),
    .init = init_partition,
    .finish = finish_partition,
};

/* ---- scores ---- */

#define SI_OFF(m) offsetof(vsr_score_input_conf_t, m)
static const char *const value_sources[] = {"binary", "confidence", "raw", "score", NULL}; /* = vsr_value_source_t */

static const cfg_field_t score_input_fields[] = {
    {.key = "type", .decode = vsr__cfg_string, .flags = CFG_REQUIRED, .offset = SI_OFF(type)},
    {.key = "name", .decode = vsr__cfg_string, .offset = SI_OFF(name)},
    {.key = "weight", .decode = vsr__cfg_double, .offset = SI_OFF(weight), .dmin = -1e9, .dmax = 1e9},
    {.key = "value_source", .decode = vsr__cfg_choice, .offset = SI_OFF(value_source), .choices = value_sources},
    {.key = "match", .decode = vsr__cfg_double, .offset = SI_OFF(match), .dmin = -1e9, .dmax = 1e9},
    {.key = "miss", .decode = vsr__cfg_double, .offset = SI_OFF(miss), .dmin = -1e9, .dmax = 1e9},
    {.key = "kb", .decode = vsr__cfg_string, .offset = SI_OFF(kb)},
    {.key = "metric", .decode = vsr__cfg_string, .offset = SI_OFF(metric)},
};

static void init_score_input(cfg_decoder_t *d, void *obj)
{
    vsr_score_input_conf_t *in = obj;
    in->weight = 1.0;
    in->match = 1.0;
    in->miss = 0.0;
}

static void finish_score_input(cfg_decoder_t *d, const cfg_node_t *map, void *obj, const cfg_node_t *const *seen,
                               size_t index)
{
    vsr_score_input_conf_t *in = obj;
    vsr__cfg_mark(d, in, map);
    if (in->type == NULL)
        return;
    if (strcmp(in->type, "kb_metric") == 0) {
        if (in->kb == NULL)
            vsr__cfg_node_error(d, map, "a kb_metric input needs \"kb\"");
        return;
    }
    if (in->name == NULL)
        vsr__cfg_node_error(d, map, "missing required key \"name\"");
}

static const cfg_spec_t score_input_spec = {
    .size = sizeof(vsr_score_input_conf_t),
    .fields = score_input_fields,
    .n_fields = VSR_ARRAY_LEN(score_input_fields),
    .init = init_score_input,
    .finish = finish_score_input,
};

#define SC_OFF(m) offsetof(vsr_score_conf_t, m)
static const char *const score_methods[] = {"weighted_sum", NULL};

static const cfg_field_t score_fields[] = {
    {.key = "name", .decode = vsr__cfg_string, .flags = CFG_REQUIRED, .offset = SC_OFF(name)},
    {.key = "method", .decode = vsr__cfg_string, .offset = SC_OFF(method), .choices = score_methods},
    {.key = "inputs", .decode = vsr__cfg_list, .flags = CFG_REQUIRED | CFG_NONEMPTY, .offset = SC_OFF(inputs),
     .count_offset = SC_OFF(n_inputs), .spec = &score_input_spec},
    {.key = "description", .decode = vsr__cfg_accept_text},
};

static void finish_score(cfg_decoder_t *d, const cfg_node_t *map, void *obj, const cfg_node_t *const *seen,
                         size_t index)
{
    mark_named(d, obj, map);
}

static const cfg_spec_t score_spec = {
    .size = sizeof(vsr_score_conf_t),
    .fields = score_fields,
    .n_fields = VSR_ARRAY_LEN(score_fields),
    .finish = finish_score,
};

/* ---- mappings ---- */

#define MO_OFF(m) offsetof(vsr_mapping_output_conf_t, m)
#define BAND_FIELD(k)                                                                                       \
    {.key = #k, .decode = vsr__cfg_double, .flags = CFG_HAS, .offset = MO_OFF(band.k),                    \
     .has_offset = MO_OFF(band.has_##k), .dmin = -1e300, .dmax = 1e300}

static const cfg_field_t output_fields[] = {
    {.key = "name", .decode = vsr__cfg_string, .flags = CFG_REQUIRED, .offset = MO_OFF(name)},
    BAND_FIELD(gt), BAND_FIELD(gte), BAND_FIELD(lt), BAND_FIELD(lte),
    {.key = "description", .decode = vsr__cfg_accept_text},
};

static void finish_output(cfg_decoder_t *d, const cfg_node_t *map, void *obj, const cfg_node_t *const *seen,
                          size_t index)
{
    vsr_mapping_output_conf_t *o = obj;
    mark_named(d, o, map);
    const vsr_predicate_conf_t *b = &o->band;
    if (!b->has_gt && !b->has_gte && !b->has_lt && !b->has_lte)
        vsr__cfg_node_error(d, map, "output %s has no bound (give gt, gte, lt or lte)", o->name ? qs(d, o->name) : "?");
    if (b->has_gt && b->has_gte)
        vsr__cfg_node_error(d, map, "an output takes gt or gte, not both");
    if (b->has_lt && b->has_lte)
        vsr__cfg_node_error(d, map, "an output takes lt or lte, not both");
}

static const cfg_spec_t output_spec = {
    .size = sizeof(vsr_mapping_output_conf_t),
    .fields = output_fields,
    .n_fields = VSR_ARRAY_LEN(output_fields),
    .finish = finish_output,
};

#define CA_OFF(m) offsetof(vsr_mapping_conf_t, m)
static const char *const calibration_methods[] = {"sigmoid_distance", NULL};

static const cfg_field_t calibration_fields[] = {
    {.key = "method", .decode = vsr__cfg_string, .flags = CFG_REQUIRED, .offset = CA_OFF(calibration_method),
     .choices = calibration_methods},
    {.key = "slope", .decode = vsr__cfg_double, .offset = CA_OFF(slope), .dmin = 1e-6, .dmax = 1e6},
};

static void finish_calibration(cfg_decoder_t *d, const cfg_node_t *map, void *obj, const cfg_node_t *const *seen,
                               size_t index)
{
    ((vsr_mapping_conf_t *)obj)->calibrated = 1;
}

/* decoded into the mapping itself (offset 0) */
static const cfg_spec_t calibration_spec = {
    .size = sizeof(vsr_mapping_conf_t),
    .fields = calibration_fields,
    .n_fields = VSR_ARRAY_LEN(calibration_fields),
    .finish = finish_calibration,
};

static const char *const mapping_methods[] = {"threshold_bands", "multi_emit", NULL};

static const cfg_field_t mapping_fields[] = {
    {.key = "name", .decode = vsr__cfg_string, .flags = CFG_REQUIRED, .offset = CA_OFF(name)},
    {.key = "source", .decode = vsr__cfg_string, .flags = CFG_REQUIRED, .offset = CA_OFF(source)},
    {.key = "method", .decode = vsr__cfg_choice, .offset = CA_OFF(multi_emit), .choices = mapping_methods},
    {.key = "calibration", .decode = vsr__cfg_object, .flags = CFG_NULL_OK, .offset = 0, .spec = &calibration_spec},
    {.key = "outputs", .decode = vsr__cfg_list, .flags = CFG_REQUIRED | CFG_NONEMPTY, .offset = CA_OFF(outputs),
     .count_offset = CA_OFF(n_outputs), .spec = &output_spec},
    {.key = "description", .decode = vsr__cfg_accept_text},
};

static void init_mapping(cfg_decoder_t *d, void *obj)
{
    ((vsr_mapping_conf_t *)obj)->slope = DEFAULT_SLOPE;
}

static void finish_mapping(cfg_decoder_t *d, const cfg_node_t *map, void *obj, const cfg_node_t *const *seen,
                           size_t index)
{
    vsr_mapping_conf_t *m = obj;
    mark_named(d, m, map);
    const cfg_node_t *src = vsr__cfg_map_get(map, "source");
    if (src)
        vsr__cfg_mark(d, &m->source, src);
}

static const cfg_spec_t mapping_spec = {
    .size = sizeof(vsr_mapping_conf_t),
    .fields = mapping_fields,
    .n_fields = VSR_ARRAY_LEN(mapping_fields),
    .init = init_mapping,
    .finish = finish_mapping,
};

/* ---- the projections block ---- */

#define PR_OFF(m) offsetof(vsr_projections_conf_t, m)

static const cfg_field_t projections_fields[] = {
    {.key = "partitions", .decode = vsr__cfg_list, .flags = CFG_NULL_OK, .offset = PR_OFF(partitions),
     .count_offset = PR_OFF(n_partitions), .spec = &partition_spec},
    {.key = "scores", .decode = vsr__cfg_list, .flags = CFG_NULL_OK, .offset = PR_OFF(scores),
     .count_offset = PR_OFF(n_scores), .spec = &score_spec},
    {.key = "mappings", .decode = vsr__cfg_list, .flags = CFG_NULL_OK, .offset = PR_OFF(mappings),
     .count_offset = PR_OFF(n_mappings), .spec = &mapping_spec},
};

const cfg_spec_t vsr__cfg_projections_spec = {
    .size = sizeof(vsr_projections_conf_t),
    .fields = projections_fields,
    .n_fields = VSR_ARRAY_LEN(projections_fields),
};

/* ---- references ---- */

static int has_signal(const vsr_recipe_conf_t *r, const char *type, const char *name)
{
    return vsr__cfg_signal_declared(&r->signals, type, name);
}

static long find_score(const vsr_projections_conf_t *p, const char *name)
{
    for (size_t i = 0; name && i < p->n_scores; i++)
        if (p->scores[i].name && strcmp(p->scores[i].name, name) == 0)
            return (long)i;
    return -1;
}

/* The mapping output `name` is declared in: its mapping's source score, or -1. */
static long output_source(const vsr_projections_conf_t *p, const char *name)
{
    for (size_t m = 0; name && m < p->n_mappings; m++)
        for (size_t o = 0; o < p->mappings[m].n_outputs; o++)
            if (p->mappings[m].outputs[o].name && strcmp(p->mappings[m].outputs[o].name, name) == 0)
                return find_score(p, p->mappings[m].source);
    return -1;
}

/* The score an input reads: type score, or the reference's type projection
 * (a score by name; with value_source confidence a mapping output, whose
 * source score it then depends on); -1 for a signal input. */
static long input_score(const vsr_projections_conf_t *p, const vsr_score_input_conf_t *in)
{
    if (in->type == NULL || in->name == NULL)
        return -1;
    if (strcmp(in->type, "score") == 0)
        return find_score(p, in->name);
    if (strcmp(in->type, "projection") != 0)
        return -1;
    return in->value_source == VSR_VALUE_CONFIDENCE ? output_source(p, in->name) : find_score(p, in->name);
}

/* Depth-first visit for the score graph: 0 unvisited, 1 on the stack, 2 done. */
static int score_cycle(cfg_decoder_t *d, const vsr_projections_conf_t *p, size_t i, unsigned char *state)
{
    if (state[i] == 2)
        return 0;
    if (state[i] == 1) {
        const cfg_mark_t *at = vsr__cfg_mark_find(d, &p->scores[i]);
        if (at)
            vsr__cfg_mark_error(d, at, "score %s depends on itself (a cycle of scores)", qs(d, p->scores[i].name));
        else
            vsr__cfg_error(d->dg, 1, 1, "score %s depends on itself (a cycle of scores)", qs(d, p->scores[i].name));
        return 1;
    }
    state[i] = 1;
    const vsr_score_conf_t *sc = &p->scores[i];
    for (size_t k = 0; k < sc->n_inputs; k++) {
        const vsr_score_input_conf_t *in = &sc->inputs[k];
        long j = input_score(p, in);
        if (j >= 0 && score_cycle(d, p, (size_t)j, state))
            return 1;
    }
    state[i] = 2;
    return 0;
}

static void err_at(cfg_decoder_t *d, const void *key, const char *msg, const char *what)
{
    const cfg_mark_t *at = vsr__cfg_mark_find(d, key);
    if (at)
        vsr__cfg_mark_error(d, at, "%s %s", msg, what);
    else
        vsr__cfg_error(d->dg, 1, 1, "%s %s", msg, what);
}

static int is_output(const vsr_projections_conf_t *p, const char *name)
{
    for (size_t m = 0; m < p->n_mappings; m++)
        for (size_t o = 0; o < p->mappings[m].n_outputs; o++)
            if (p->mappings[m].outputs[o].name && strcmp(p->mappings[m].outputs[o].name, name) == 0)
                return 1;
    return 0;
}

static void resolve_projection_leaves(cfg_decoder_t *d, const vsr_recipe_conf_t *r, const vsr_rule_conf_t *n,
                                      const char *where)
{
    if (n->kind != VSR_RULE_LEAF) {
        for (size_t i = 0; i < n->n_children; i++)
            resolve_projection_leaves(d, r, &n->children[i], where);
        return;
    }
    if (n->type && n->name && strcmp(n->type, "projection") == 0 && !is_output(&r->projections, n->name))
        vsr__cfg_error(d->dg, n->line, n->col, "projection output %s is not declared in %s.projections.mappings",
                       qs(d, n->name), where);
}

/* A request graph's `signal: {type: projection, name}` predicates, likewise. */
typedef struct {
    cfg_decoder_t *d;
    const vsr_recipe_conf_t *r;
    const char *where;
} graph_outputs_t;

static void resolve_graph_output(const vsr_gnode_conf_t *n, void *arg)
{
    const graph_outputs_t *g = arg;
    const vsr_gpred_conf_t *p = &n->until;
    if (p->kind != VSR_GPRED_SIGNAL || p->signal_type == NULL || p->signal_name == NULL)
        return;
    const cfg_mark_t *at = vsr__cfg_mark_find(g->d, p->signal_name);
    vsr_rule_conf_t leaf = {.kind = VSR_RULE_LEAF, .type = p->signal_type, .name = p->signal_name,
                            .line = at ? at->line : n->line, .col = at ? at->col : n->col};
    resolve_projection_leaves(g->d, g->r, &leaf, g->where);
}

/* A kb_metric input reads a kb signal of the recipe over its kb: the one
 * `name` gives, else the first (its name is filled in); with none the input
 * gives its miss value.  The metric: best_score (default), score or the
 * signal's target value (its similarity), best_matched_score or confidence
 * (the similarity when the signal matched, else miss), matched. */
static void check_kb_metric(cfg_decoder_t *d, const vsr_recipe_conf_t *r, vsr_score_input_conf_t *in,
                            const char *where)
{
    char buf[512];
    const vsr_sig_kb_conf_t *hit = NULL;
    for (size_t i = 0; in->kb && !hit && i < r->signals.n_kb; i++) {
        const vsr_sig_kb_conf_t *k = &r->signals.kb[i];
        if (k->kb && k->name && strcmp(k->kb, in->kb) == 0 && (in->name == NULL || strcmp(k->name, in->name) == 0))
            hit = k;
    }
    if (in->name && hit == NULL) {
        snprintf(buf, sizeof(buf), "kb signal %s over kb %s is not declared in %s.signals.kb", qs(d, in->name),
                 qs(d, in->kb ? in->kb : ""), where);
        err_at(d, in, "kb_metric input:", buf);
        return;
    }
    if (hit)
        in->name = hit->name;
    const char *m = in->metric;
    if (m == NULL || strcmp(m, "best_score") == 0 || strcmp(m, "score") == 0 ||
        (hit && hit->target.value && strcmp(m, hit->target.value) == 0))
        in->kb_metric = VSR_KB_METRIC_SCORE;
    else if (strcmp(m, "confidence") == 0 || strcmp(m, "best_matched_score") == 0)
        in->kb_metric = VSR_KB_METRIC_CONFIDENCE; /* the reference's best_matched_score: the score when matched */
    else if (strcmp(m, "matched") == 0)
        in->kb_metric = VSR_KB_METRIC_MATCHED;
    else if (hit) {
        /* the reference also reads the kb's own metrics (kbs[].metrics, group_margin), which vsr does not compute */
        snprintf(buf, sizeof(buf), "metric %s is not supported yet (a kb's own metrics, global.model_catalog.kbs[]"
                 ".metrics, are not computed): it must be best_score, best_matched_score, score, confidence, matched "
                 "or %s (the target of kb signal %s)", qs(d, m), qs(d, hit->target.value ? hit->target.value : ""),
                 qs(d, hit->name));
        err_at(d, in, "kb_metric input:", buf);
    }
}

void vsr__cfg_check_projections(cfg_decoder_t *d, const vsr_recipe_conf_t *r, const char *where)
{
    const vsr_projections_conf_t *p = &r->projections;
    char buf[256];
    /* partitions: members are domain or embedding signals */
    for (size_t i = 0; i < p->n_partitions; i++) {
        const vsr_partition_conf_t *pa = &p->partitions[i];
        for (size_t k = 0; k < pa->members.n; k++) {
            const char *m = pa->members.items[k];
            if (m && !has_signal(r, "embedding", m) && !has_signal(r, "domain", m)) {
                snprintf(buf, sizeof(buf), "is not a domain or embedding signal of %s.signals", where);
                err_at(d, &pa->members.items[k], qs(d, m), buf);
            }
        }
    }
    /* scores: inputs name declared signals or other scores; no cycle */
    const char **keys = vsr_malloc((p->n_scores + 1) * sizeof(*keys));
    const void **marks = vsr_malloc((p->n_scores + 1) * sizeof(*marks));
    for (size_t i = 0; i < p->n_scores; i++) {
        keys[i] = p->scores[i].name;
        marks[i] = &p->scores[i];
        for (size_t k = 0; k < p->scores[i].n_inputs; k++) {
            const vsr_score_input_conf_t *in = &p->scores[i].inputs[k];
            if (in->type != NULL && strcmp(in->type, "kb_metric") == 0) {
                check_kb_metric(d, r, (vsr_score_input_conf_t *)in, where);
                continue;
            }
            if (in->type == NULL || in->name == NULL)
                continue;
            if (strcmp(in->type, "score") == 0) {
                if (find_score(p, in->name) < 0)
                    err_at(d, in, "score input names an unknown score", qs(d, in->name));
                continue;
            }
            if (strcmp(in->type, "projection") == 0) {
                /* the reference's form: a score by name, or (value_source confidence) a mapping output */
                int conf = in->value_source == VSR_VALUE_CONFIDENCE;
                if (conf ? !is_output(p, in->name) : find_score(p, in->name) < 0)
                    err_at(d, in, conf ? "projection input (value_source confidence) names an unknown mapping output"
                                       : "projection input names an unknown score", qs(d, in->name));
                else if (in->value_source != VSR_VALUE_CONFIDENCE && in->value_source != VSR_VALUE_SCORE &&
                         in->value_source != VSR_VALUE_BINARY)
                    err_at(d, in, "projection input: value_source is score or confidence, not", "\"raw\"");
                continue;
            }
            int known = vsr__cfg_condition_type(in->type);
            if (known < 0) {
                err_at(d, in, "score input has an unknown type", qs(d, in->type));
                continue;
            }
            /* a family vsr does not implement is refused with the signals; an
             * undeclared signal is looked up in the other recipes once every
             * recipe is decoded (vsr__cfg_resolve_projection_inputs) */
        }
    }
    vsr__cfg_check_unique_marked(d, "score name", keys, marks, p->n_scores);
    vsr_free(keys);
    vsr_free(marks);
    unsigned char *state = vsr_calloc(p->n_scores + 1, 1);
    for (size_t i = 0; i < p->n_scores; i++)
        if (score_cycle(d, p, i, state))
            break;
    vsr_free(state);
    /* mappings: a known source; output names unique across the recipe */
    size_t n_out = 0;
    for (size_t m = 0; m < p->n_mappings; m++) {
        if (p->mappings[m].source && find_score(p, p->mappings[m].source) < 0)
            err_at(d, &p->mappings[m].source, "mapping source names an unknown score",
                   qs(d, p->mappings[m].source));
        n_out += p->mappings[m].n_outputs;
    }
    const char **okeys = vsr_malloc((n_out + 1) * sizeof(*okeys));
    const void **omarks = vsr_malloc((n_out + 1) * sizeof(*omarks));
    size_t j = 0;
    for (size_t m = 0; m < p->n_mappings; m++)
        for (size_t o = 0; o < p->mappings[m].n_outputs; o++) {
            okeys[j] = p->mappings[m].outputs[o].name;
            omarks[j++] = &p->mappings[m].outputs[o];
        }
    vsr__cfg_check_unique_marked(d, "projection output name", okeys, omarks, n_out);
    vsr_free(okeys);
    vsr_free(omarks);
    for (size_t i = 0; i < r->n_decisions; i++)
        if (r->decisions[i].rules != NULL)
            resolve_projection_leaves(d, r, r->decisions[i].rules, where);
    graph_outputs_t g = {d, r, where};
    for (size_t i = 0; i < r->n_decisions; i++)
        if (r->decisions[i].algo.kind == VSR_ALGO_GRAPH)
            vsr__cfg_graph_walk(&r->decisions[i].algo.u.graph, resolve_graph_output, &g);
}

/* A score input naming a signal the recipe does not declare: the reference
 * merges every recipe's signals into one registry, so the input reads the
 * signal another recipe (or the top-level block) declares.  The recipe gets
 * its own copy of that declaration and computes it itself. */
static void resolve_inputs(cfg_decoder_t *d, config_box_t *box, vsr_recipe_conf_t *r, const char *where)
{
    vsr_projections_conf_t *p = &r->projections;
    for (size_t i = 0; i < p->n_scores; i++)
        for (size_t k = 0; k < p->scores[i].n_inputs; k++) {
            const vsr_score_input_conf_t *in = &p->scores[i].inputs[k];
            if (in->type == NULL || in->name == NULL || vsr__cfg_condition_type(in->type) != 1 ||
                strcmp(in->type, "score") == 0 || strcmp(in->type, "kb_metric") == 0 ||
                strcmp(in->type, "projection") == 0 || has_signal(r, in->type, in->name))
                continue;
            int found = r != &box->routing &&
                        vsr__cfg_signal_import(d, &r->signals, &box->routing.signals, in->type, in->name);
            for (size_t j = 0; !found && j < box->n_recipe_list; j++)
                if (&box->recipe_list[j] != r)
                    found = vsr__cfg_signal_import(d, &r->signals, &box->recipe_list[j].signals, in->type, in->name);
            if (!found) {
                char buf[256];
                snprintf(buf, sizeof(buf), "%s signal %s is not declared in %s.signals (nor in another recipe)",
                         in->type, qs(d, in->name), where);
                err_at(d, in, "score input:", buf);
            }
        }
}

void vsr__cfg_resolve_projection_inputs(cfg_decoder_t *d, config_box_t *box)
{
    resolve_inputs(d, box, &box->routing, "routing");
    for (size_t i = 0; i < box->n_recipe_list; i++) {
        vsr_recipe_conf_t *r = &box->recipe_list[i];
        char where[160];
        snprintf(where, sizeof(where), "recipe %s: routing", r->name ? qs(d, r->name) : "?");
        resolve_inputs(d, box, r, where);
    }
}
