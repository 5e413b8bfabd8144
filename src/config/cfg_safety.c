/*
 * cfg_safety.c — routing.signals.safety[] (docs/signals.md "Safety"): the
 * binary risk stage and the optional hazard stage, by a remote classifier
 * (`model`, resolved against global.model_catalog.external[] with the
 * document, cfg_check.c) or the built-in prompt guard.
 */
#include <stddef.h>
#include <stdio.h>
#include <strings.h>

#include "config/cfg_internal.h"

/* `model` names the classifier: its calls use the reference's http_classify
 * contract (POST /classify {"inputs": T}). */
static int decode_model(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj)
{
    vsr_sig_safety_conf_t *c = obj;
    if (vsr__cfg_string(d, f, val, obj) != 0)
        return -1;
    if (c->model == NULL || c->model[0] == '\0') { /* empty: the built-in module */
        c->model = NULL;
        return 0;
    }
    c->remote.model = c->model;
    c->remote.protocol = VSR_REMOTE_HTTP_CLASSIFY;
    vsr__cfg_mark(d, &c->remote.protocol, val); /* where the check of its external model reports */
    return 0;
}

/* hazard.model: another classifier for the hazard stage (the rule's own
 * model when absent or the same name) */
static int decode_hazard_model(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj)
{
    vsr_sig_safety_conf_t *c = obj;
    if (vsr__cfg_string(d, f, val, obj) != 0)
        return -1;
    if (c->hazard_model == NULL || c->hazard_model[0] == '\0') {
        c->hazard_model = NULL;
        return 0;
    }
    c->hazard_remote.model = c->hazard_model;
    c->hazard_remote.protocol = VSR_REMOTE_HTTP_CLASSIFY;
    vsr__cfg_mark(d, &c->hazard_remote.protocol, val);
    return 0;
}

#define HZ_OFF(m) offsetof(vsr_sig_safety_conf_t, m)
static const cfg_field_t hazard_fields[] = {
    {.key = "model", .decode = decode_hazard_model, .flags = CFG_NULL_OK, .offset = HZ_OFF(hazard_model)},
    {.key = "labels", .decode = vsr__cfg_strlist, .flags = CFG_REQUIRED | CFG_NONEMPTY, .offset = HZ_OFF(hazard_labels)},
    {.key = "categories", .decode = vsr__cfg_strlist, .flags = CFG_NULL_OK, .offset = HZ_OFF(hazard_categories)},
    {.key = "threshold", .decode = vsr__cfg_double, .offset = HZ_OFF(hazard_threshold), .dmin = 0, .dmax = 1},
};

/* hazard decodes into the rule itself (its fields are the rule's hazard_*) */
static const cfg_spec_t hazard_spec = {
    .size = sizeof(vsr_sig_safety_conf_t), .fields = hazard_fields, .n_fields = VSR_ARRAY_LEN(hazard_fields)};

static int decode_hazard(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj)
{
    vsr_sig_safety_conf_t *c = obj;
    if (vsr__cfg_is_empty(val))
        return 0;
    if (val->kind != CFG_NODE_MAP) {
        vsr__cfg_node_error(d, val, "expected a mapping, got %s", vsr__cfg_node_what(val));
        return -1;
    }
    size_t saved = vsr__cfg_path_push(d, f->key);
    int rc = vsr__cfg_decode_object(d, &hazard_spec, val, c, 0);
    vsr__cfg_path_pop(d, saved);
    if (rc == 0) {
        c->has_hazard = 1;
        vsr__cfg_mark(d, &c->has_hazard, val);
    }
    return rc;
}

#define SF_OFF(m) offsetof(vsr_sig_safety_conf_t, m)
static const cfg_field_t safety_fields[] = {
    {.key = "name", .decode = vsr__cfg_string, .flags = CFG_REQUIRED, .offset = SF_OFF(name)},
    {.key = "description", .decode = vsr__cfg_accept_text},
    {.key = "model", .decode = decode_model, .flags = CFG_NULL_OK, .offset = SF_OFF(model)},
    {.key = "labels", .decode = vsr__cfg_strlist, .flags = CFG_NONEMPTY, .offset = SF_OFF(labels)},
    {.key = "unsafe_labels", .decode = vsr__cfg_strlist, .flags = CFG_NONEMPTY, .offset = SF_OFF(unsafe_labels)},
    {.key = "threshold", .decode = vsr__cfg_double, .flags = CFG_REQUIRED, .offset = SF_OFF(threshold), .dmin = 0,
     .dmax = 1},
    {.key = "hazard", .decode = decode_hazard, .flags = CFG_NULL_OK},
};

static void init_safety(cfg_decoder_t *d, void *obj)
{
    VSR_UNUSED(d);
    ((vsr_sig_safety_conf_t *)obj)->hazard_threshold = VSR_SAFETY_DEFAULT_HAZARD_THRESHOLD;
}

static int in_list(const vsr_strlist_conf_t *l, const char *s)
{
    for (size_t i = 0; i < l->n; i++)
        if (strcasecmp(l->items[i], s) == 0)
            return 1;
    return 0;
}

static void default_list(cfg_decoder_t *d, vsr_strlist_conf_t *l, const char *const *items, size_t n)
{
    l->items = vsr_pool_alloc(d->pool, n * sizeof(char *));
    for (size_t i = 0; i < n; i++)
        l->items[i] = vsr__cfg_strdup(d, items[i]);
    l->n = n;
}

static void finish_safety(cfg_decoder_t *d, const cfg_node_t *map, void *obj, const cfg_node_t *const *seen,
                          size_t index)
{
    VSR_UNUSED(seen);
    VSR_UNUSED(index);
    vsr_sig_safety_conf_t *c = obj;
    static const char *const binary[] = {"safe", "unsafe"}, *const unsafe[] = {"unsafe"};
    if (c->labels.n == 0)
        default_list(d, &c->labels, binary, 2);
    if (c->unsafe_labels.n == 0)
        default_list(d, &c->unsafe_labels, unsafe, 1);
    const cfg_node_t *at = vsr__cfg_map_get(map, "unsafe_labels");
    for (size_t i = 0; i < c->unsafe_labels.n; i++)
        if (!in_list(&c->labels, c->unsafe_labels.items[i]))
            vsr__cfg_node_error(d, at ? at : map, "unsafe label %s is not one of labels",
                                vsr__cfg_quote(d->pool, c->unsafe_labels.items[i], strlen(c->unsafe_labels.items[i])));
    if (c->labels.n > VSR_SAFETY_MAX_LABELS || c->hazard_labels.n > VSR_SAFETY_MAX_LABELS)
        vsr__cfg_node_error(d, map, "a safety signal reads at most %d labels a stage", VSR_SAFETY_MAX_LABELS);
    if (c->model == NULL) {
        /* the built-in prompt guard answers two labels */
        for (size_t i = 0; i < c->labels.n; i++)
            if (!in_list(&(vsr_strlist_conf_t){(char **)binary, 2}, c->labels.items[i]))
                vsr__cfg_node_error(d, vsr__cfg_map_get(map, "labels") ? vsr__cfg_map_get(map, "labels") : map,
                                    "label %s: the built-in safety model (the prompt guard) answers \"safe\" and "
                                    "\"unsafe\"; name a model in global.model_catalog.external for other labels",
                                    vsr__cfg_quote(d->pool, c->labels.items[i], strlen(c->labels.items[i])));
    }
    if (!c->has_hazard)
        return;
    const cfg_node_t *hz = vsr__cfg_map_get(map, "hazard");
    if (c->hazard_model && c->model && strcmp(c->hazard_model, c->model) == 0) { /* one classifier, one answer */
        c->hazard_model = NULL;
        memset(&c->hazard_remote, 0, sizeof(c->hazard_remote));
    }
    if (c->model == NULL && c->hazard_model == NULL)
        vsr__cfg_node_error(d, hz, "hazard: the built-in hazard model is not supported yet (vsr's built-in safety "
                                   "model is the prompt guard, which has no hazard head); name a hazard.model");
    for (size_t i = 0; i < c->hazard_categories.n; i++)
        if (!in_list(&c->hazard_labels, c->hazard_categories.items[i]))
            vsr__cfg_node_error(d, hz, "hazard category %s is not one of hazard.labels",
                                vsr__cfg_quote(d->pool, c->hazard_categories.items[i],
                                               strlen(c->hazard_categories.items[i])));
    if (c->hazard_categories.n == 0) /* every label of the head is a category */
        c->hazard_categories = c->hazard_labels;
}

const cfg_spec_t vsr__cfg_safety_spec = {
    .size = sizeof(vsr_sig_safety_conf_t),
    .fields = safety_fields,
    .n_fields = VSR_ARRAY_LEN(safety_fields),
    .init = init_safety,
    .finish = finish_safety,
};
