/*
 * cfg_decision.c — two decision keys of the reference's later schema:
 *
 * candidateIterations: [{variable, source: models | decision.candidates,
 *   models: [modelRef], outputs: [{type: model, value: <variable>}]}] — the
 *   canonical form of the DSL's `FOR v IN ...` over candidate models
 *   (config/decision_config.go).  The reference checks them as below and
 *   hands them to its selectors as metadata, none of which reads them; its
 *   DSL compiler turns an iteration over `models` that outputs its variable
 *   into modelRefs.  vsr checks them the same way and does what the compiler
 *   does: such an iteration's models join the decision's modelRefs (each
 *   once), so a document written by hand routes as the compiled one does.
 *
 * action: {type: route, destination: MODEL} — the decision routes to MODEL:
 *   the same as modelRefs: [{model: MODEL}], so the two may not both be
 *   given (unless modelRefs is exactly that model).
 */
#include "config/cfg_internal.h"

#include <stddef.h>
#include <string.h>

#define CI_OFF(m) offsetof(vsr_candidate_iteration_conf_t, m)
#define DEC_OFF(m) offsetof(vsr_decision_conf_t, m)

typedef struct {
    char *type;
    char *value;
} ci_output_t;

typedef struct {
    ci_output_t *items;
    size_t n;
} ci_outputs_t;

static const char *const ci_sources[] = {"decision.candidates", "models", NULL};

static const cfg_field_t ci_output_fields[] = {
    {.key = "type", .decode = vsr__cfg_string, .flags = CFG_REQUIRED, .offset = offsetof(ci_output_t, type)},
    {.key = "value", .decode = vsr__cfg_string, .offset = offsetof(ci_output_t, value)},
};

static const cfg_spec_t ci_output_spec = {
    .size = sizeof(ci_output_t),
    .fields = ci_output_fields,
    .n_fields = VSR_ARRAY_LEN(ci_output_fields),
};

/* outputs: each {type: model, value: <the iteration's variable>}, as the
 * reference's validator wants (the variable is decoded first: see finish). */
static int decode_ci_outputs(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj)
{
    cfg_field_t lf = {.key = f->key, .offset = offsetof(ci_outputs_t, items), .count_offset = offsetof(ci_outputs_t, n),
                      .spec = &ci_output_spec};
    ci_outputs_t *outs = vsr_pool_alloc(d->pool, sizeof(*outs));
    memset(outs, 0, sizeof(*outs));
    int rc = vsr__cfg_list(d, &lf, val, outs);
    *(ci_outputs_t **)((char *)obj + f->offset) = outs;
    return rc;
}

typedef struct {
    vsr_candidate_iteration_conf_t conf;
    ci_outputs_t *outputs;
} ci_box_t;

static const cfg_field_t ci_fields[] = {
    {.key = "variable", .decode = vsr__cfg_string, .flags = CFG_REQUIRED, .offset = CI_OFF(variable)},
    {.key = "source", .decode = vsr__cfg_choice, .flags = CFG_REQUIRED, .offset = CI_OFF(source_models),
     .choices = ci_sources},
    {.key = "models", .decode = vsr__cfg_list, .flags = CFG_NULL_OK, .offset = CI_OFF(models),
     .count_offset = CI_OFF(n_models), .spec = &vsr__cfg_model_ref_spec},
    {.key = "outputs", .decode = decode_ci_outputs, .flags = CFG_NULL_OK, .offset = offsetof(ci_box_t, outputs)},
};

static void finish_ci(cfg_decoder_t *d, const cfg_node_t *map, void *obj, const cfg_node_t *const *seen, size_t index)
{
    ci_box_t *b = obj;
    vsr_candidate_iteration_conf_t *c = &b->conf;
    if (c->source_models == 1 && c->n_models == 0 && c->variable)
        vsr__cfg_node_error(d, seen[2] ? seen[2] : map, "source models requires at least one model");
    if (c->source_models == 0 && seen[2] != NULL && c->n_models)
        vsr__cfg_node_error(d, seen[2], "models is read only with source: models");
    const cfg_node_t *outs = seen[3];
    for (size_t i = 0; b->outputs && i < b->outputs->n; i++) {
        const ci_output_t *o = &b->outputs->items[i];
        const cfg_node_t *at = outs && outs->kind == CFG_NODE_SEQ && i < outs->n ? outs->items[i] : map;
        if (o->type && strcmp(o->type, "model") != 0)
            vsr__cfg_node_error(d, at, "outputs[%zu]: unsupported output type %s (only model)", i,
                                vsr__cfg_quote(d->pool, o->type, strlen(o->type)));
        else if (o->type && c->variable && (o->value == NULL || strcmp(o->value, c->variable) != 0))
            vsr__cfg_node_error(d, at, "outputs[%zu]: a model output must reference the variable %s", i,
                                vsr__cfg_quote(d->pool, c->variable, strlen(c->variable)));
        else if (o->type)
            c->emits_model = 1;
    }
}

static void init_ci(cfg_decoder_t *d, void *obj)
{
    ((ci_box_t *)obj)->conf.source_models = -1; /* until a valid source is read */
}

static const cfg_spec_t ci_spec = {
    .size = sizeof(ci_box_t),
    .fields = ci_fields,
    .n_fields = VSR_ARRAY_LEN(ci_fields),
    .init = init_ci,
    .finish = finish_ci,
};

typedef struct {
    ci_box_t *items;
    size_t n;
} ci_list_t;

int vsr__cfg_decode_candidate_iterations(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj)
{
    vsr_decision_conf_t *dc = obj;
    cfg_field_t lf = {.key = f->key, .offset = offsetof(ci_list_t, items), .count_offset = offsetof(ci_list_t, n),
                      .spec = &ci_spec};
    ci_list_t list = {NULL, 0};
    int rc = vsr__cfg_list(d, &lf, val, &list);
    if (list.n) {
        dc->candidate_iterations = vsr_pool_alloc(d->pool, list.n * sizeof(*dc->candidate_iterations));
        for (size_t i = 0; i < list.n; i++)
            dc->candidate_iterations[i] = list.items[i].conf; /* its models stay where they were marked */
        dc->n_candidate_iterations = list.n;
    }
    return rc;
}

/* action */

typedef struct {
    int type;
    char *destination;
} action_t;

static const char *const action_types[] = {"route", NULL};

static const cfg_field_t action_fields[] = {
    {.key = "type", .decode = vsr__cfg_choice, .flags = CFG_REQUIRED, .offset = offsetof(action_t, type),
     .choices = action_types},
    {.key = "destination", .decode = vsr__cfg_string, .flags = CFG_REQUIRED, .offset = offsetof(action_t, destination)},
};

static void finish_action(cfg_decoder_t *d, const cfg_node_t *map, void *obj, const cfg_node_t *const *seen,
                          size_t index)
{
    action_t *a = obj;
    if (a->destination && seen[1])
        vsr__cfg_mark(d, &a->destination, seen[1]);
}

static const cfg_spec_t action_spec = {
    .size = sizeof(action_t),
    .fields = action_fields,
    .n_fields = VSR_ARRAY_LEN(action_fields),
    .finish = finish_action,
};

int vsr__cfg_decode_decision_action(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj)
{
    vsr_decision_conf_t *dc = obj;
    action_t *a = vsr_pool_alloc(d->pool, sizeof(*a));
    memset(a, 0, sizeof(*a));
    cfg_field_t of = {.key = f->key, .offset = 0, .spec = &action_spec};
    int rc = vsr__cfg_object(d, &of, val, a);
    if (rc == 0 && a->destination) {
        dc->action_destination = a->destination;
        const cfg_node_t *dest = vsr__cfg_map_get(val, "destination");
        vsr__cfg_mark(d, &dc->action_destination, dest ? dest : val);
    }
    return rc;
}

/* Moves a position kept for `from` (vsr__cfg_mark) to `to`. */
static void remark(cfg_decoder_t *d, const void *to, const void *from)
{
    const cfg_mark_t *m = vsr__cfg_mark_find(d, from);
    if (m == NULL)
        return;
    cfg_node_t at;
    memset(&at, 0, sizeof(at));
    at.line = m->line;
    at.col = m->col;
    vsr__cfg_mark(d, to, &at);
}

static int has_ref(const vsr_model_ref_conf_t *refs, size_t n, const char *model, const char *lora)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(refs[i].model, model) == 0 &&
            ((lora == NULL && refs[i].lora_name == NULL) ||
             (lora && refs[i].lora_name && strcmp(lora, refs[i].lora_name) == 0)))
            return 1;
    return 0;
}

void vsr__cfg_finish_decision_extras(cfg_decoder_t *d, const cfg_node_t *map, vsr_decision_conf_t *dc)
{
    const cfg_node_t *iters = vsr__cfg_map_get(map, "candidateIterations");
    for (size_t i = 0; i < dc->n_candidate_iterations; i++)
        if (dc->candidate_iterations[i].source_models == 0 && dc->n_model_refs == 0)
            vsr__cfg_node_error(d, iters && iters->kind == CFG_NODE_SEQ && i < iters->n ? iters->items[i] : map,
                                "candidateIterations[%zu]: source decision.candidates requires non-empty modelRefs",
                                i);
    size_t extra = dc->action_destination ? 1 : 0;
    for (size_t i = 0; i < dc->n_candidate_iterations; i++)
        extra += dc->candidate_iterations[i].n_models;
    if (extra == 0)
        return;
    /* the decision's refs, then what the iterations and the action add, each once */
    vsr_model_ref_conf_t *refs = vsr_pool_alloc(d->pool, (dc->n_model_refs + extra) * sizeof(*refs));
    size_t n = 0, given = dc->n_model_refs;
    for (size_t i = 0; i < given; i++) {
        refs[n] = dc->model_refs[i];
        remark(d, &refs[n].model, &dc->model_refs[i].model);
        remark(d, &refs[n].lora_name, &dc->model_refs[i].lora_name);
        n++;
    }
    for (size_t i = 0; i < dc->n_candidate_iterations; i++) {
        const vsr_candidate_iteration_conf_t *c = &dc->candidate_iterations[i];
        if (c->source_models != 1 || !c->emits_model)
            continue;
        for (size_t j = 0; j < c->n_models; j++) {
            const vsr_model_ref_conf_t *r = &c->models[j];
            if (r->model == NULL || has_ref(refs, n, r->model, r->lora_name))
                continue;
            refs[n] = *r;
            remark(d, &refs[n].model, &r->model);
            remark(d, &refs[n].lora_name, &r->lora_name);
            n++;
        }
    }
    if (dc->action_destination) {
        const cfg_node_t *act = vsr__cfg_map_get(map, "action");
        const cfg_node_t *dest = act ? vsr__cfg_map_get(act, "destination") : NULL;
        if (n == 0) {
            refs[n] = (vsr_model_ref_conf_t){.model = dc->action_destination};
            remark(d, &refs[n].model, &dc->action_destination);
            n++;
        } else if (!(n == 1 && refs[0].lora_name == NULL && strcmp(refs[0].model, dc->action_destination) == 0)) {
            vsr__cfg_node_error(d, dest ? dest : map, "action.destination and modelRefs both say where the decision "
                                                      "routes; give one of them");
        }
    }
    dc->model_refs = refs;
    dc->n_model_refs = n;
}
