/*
 * cfg_events.c — routing.signals.metadata[], routing.signals.events[] and
 * routing.signals.input_modality[] (ref §1.9): facts of the request that
 * need no model.
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>

#include "config/cfg_internal.h"

/* ---- metadata ---- */

/* Any scalar (string, number, boolean) as its text. */
static int decode_scalar_text(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj)
{
    if (val->kind != CFG_NODE_SCALAR || val->type == CFG_NULL) {
        vsr__cfg_node_error(d, val, "expected a string, number or boolean, got %s", vsr__cfg_node_what(val));
        return -1;
    }
    if (memchr(val->str, '\0', val->len) != NULL) {
        vsr__cfg_node_error(d, val, "the string must not contain NUL characters");
        return -1;
    }
    *(char **)((char *)obj + f->offset) = vsr__cfg_strdup(d, val->str);
    return 0;
}

#define MP_OFF(m) offsetof(vsr_metadata_predicate_conf_t, m)
#define MP_BOUND(k)                                                                                         \
    {.key = #k, .decode = vsr__cfg_double, .flags = CFG_HAS, .offset = MP_OFF(k), .has_offset = MP_OFF(has_##k), \
     .dmin = -1e300, .dmax = 1e300}

static const cfg_field_t metadata_predicate_fields[] = {
    {.key = "equals", .decode = decode_scalar_text, .offset = MP_OFF(equals)},
    {.key = "in", .decode = vsr__cfg_strlist, .flags = CFG_NONEMPTY, .offset = MP_OFF(in)},
    {.key = "exists", .decode = vsr__cfg_bool, .flags = CFG_HAS, .offset = MP_OFF(exists),
     .has_offset = MP_OFF(has_exists)},
    MP_BOUND(gt), MP_BOUND(gte), MP_BOUND(lt), MP_BOUND(lte),
};

static void finish_metadata_predicate(cfg_decoder_t *d, const cfg_node_t *map, void *obj,
                                      const cfg_node_t *const *seen, size_t index)
{
    const vsr_metadata_predicate_conf_t *p = obj;
    if (!p->equals && !p->in.n && !p->has_exists && !p->has_gt && !p->has_gte && !p->has_lt && !p->has_lte)
        vsr__cfg_node_error(d, map, "a metadata predicate needs equals, in, exists, gt, gte, lt or lte");
}

static const cfg_spec_t metadata_predicate_spec = {
    .size = sizeof(vsr_metadata_predicate_conf_t),
    .fields = metadata_predicate_fields,
    .n_fields = VSR_ARRAY_LEN(metadata_predicate_fields),
    .finish = finish_metadata_predicate,
};

#define MD_OFF(m) offsetof(vsr_sig_metadata_conf_t, m)

static const cfg_field_t metadata_fields[] = {
    {.key = "name", .decode = vsr__cfg_string, .flags = CFG_REQUIRED, .offset = MD_OFF(name)},
    {.key = "key", .decode = vsr__cfg_string, .flags = CFG_REQUIRED, .offset = MD_OFF(key)},
    {.key = "predicate", .decode = vsr__cfg_object, .flags = CFG_HAS | CFG_NULL_OK, .offset = MD_OFF(predicate),
     .spec = &metadata_predicate_spec, .has_offset = MD_OFF(has_predicate)},
    {.key = "description", .decode = vsr__cfg_accept_text},
};

const cfg_spec_t vsr__cfg_metadata_spec = {
    .size = sizeof(vsr_sig_metadata_conf_t),
    .fields = metadata_fields,
    .n_fields = VSR_ARRAY_LEN(metadata_fields),
};

/* ---- events ---- */

#define EV_OFF(m) offsetof(vsr_sig_event_conf_t, m)

static const cfg_field_t event_fields[] = {
    {.key = "name", .decode = vsr__cfg_string, .flags = CFG_REQUIRED, .offset = EV_OFF(name)},
    {.key = "event_types", .decode = vsr__cfg_strlist, .flags = CFG_NULL_OK, .offset = EV_OFF(event_types)},
    {.key = "severities", .decode = vsr__cfg_strlist, .flags = CFG_NULL_OK, .offset = EV_OFF(severities)},
    {.key = "action_codes", .decode = vsr__cfg_strlist, .flags = CFG_NULL_OK, .offset = EV_OFF(action_codes)},
    {.key = "temporal", .decode = vsr__cfg_bool, .offset = EV_OFF(temporal)},
    {.key = "description", .decode = vsr__cfg_accept_text},
};

static int blank(const char *s)
{
    while (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r')
        s++;
    return *s == '\0';
}

static int any_nonblank(const vsr_strlist_conf_t *l)
{
    for (size_t i = 0; i < l->n; i++)
        if (!blank(l->items[i]))
            return 1;
    return 0;
}

/* A group counts as a criterion only with an entry that can match: blank
 * entries are dropped, and so are severities other than the four levels (as
 * the reference does, which drops them silently; vsr warns). */
static void finish_event(cfg_decoder_t *d, const cfg_node_t *map, void *obj, const cfg_node_t *const *seen,
                         size_t index)
{
    VSR_UNUSED(seen);
    VSR_UNUSED(index);
    const vsr_sig_event_conf_t *e = obj;
    int sev = 0;
    for (size_t i = 0; i < e->severities.n; i++) {
        if (vsr_event_severity_level(e->severities.items[i]) >= 0)
            sev = 1;
        else
            vsr__cfg_warn(d, "%s: severity %s is not critical, high, medium or low and never matches", d->path,
                          vsr__cfg_quote(d->pool, e->severities.items[i], strlen(e->severities.items[i])));
    }
    if (!any_nonblank(&e->event_types) && !sev && !any_nonblank(&e->action_codes) && !e->temporal)
        vsr__cfg_node_error(d, map, "an events signal needs event_types, severities, action_codes or temporal: true");
}

const cfg_spec_t vsr__cfg_event_spec = {
    .size = sizeof(vsr_sig_event_conf_t),
    .fields = event_fields,
    .n_fields = VSR_ARRAY_LEN(event_fields),
    .finish = finish_event,
};

/* ---- input_modality ---- */

static const char *const modalities[] = {"text", "image", "audio", "video", NULL}; /* = VSR_MODALITY_* */

#define IM_OFF(m) offsetof(vsr_sig_input_modality_conf_t, m)

static const cfg_field_t input_modality_fields[] = {
    {.key = "name", .decode = vsr__cfg_string, .flags = CFG_REQUIRED, .offset = IM_OFF(name)},
    {.key = "modality", .decode = vsr__cfg_choice, .flags = CFG_REQUIRED, .offset = IM_OFF(modality),
     .choices = modalities},
    {.key = "description", .decode = vsr__cfg_accept_text},
};

const cfg_spec_t vsr__cfg_input_modality_spec = {
    .size = sizeof(vsr_sig_input_modality_conf_t),
    .fields = input_modality_fields,
    .n_fields = VSR_ARRAY_LEN(input_modality_fields),
};

int vsr_event_severity_level(const char *s)
{
    static const char *const levels[] = {"critical", "high", "medium", "low"};
    if (s == NULL)
        return -1;
    while (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r')
        s++;
    size_t n = strlen(s);
    while (n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\n' || s[n - 1] == '\r'))
        n--;
    for (int i = 0; i < 4; i++)
        if (n == strlen(levels[i]) && strncasecmp(s, levels[i], n) == 0)
            return i;
    return -1;
}
