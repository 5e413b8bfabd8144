/*
 * classify_pii.c — the built-in PII detector (`pii`, src/models/pii.h):
 * rules with checksums for the structured types, gazetteers and cues for
 * names, organisations and addresses.  Task option "threshold" (default
 * VSR_PII_DEFAULT_THRESHOLD, 0.5): the score an entity needs, applied during
 * the detector's pass.  The entities, in order of start:
 *   ,"entities":[{"type":"US_SSN","start":4,"end":15,"score":0.95},...]
 * and ,"truncated":true when the text held more than VSR_PII_MAX_ENTITIES.
 */
#include <stdio.h>

#include "models/models.h"
#include "runtime-int.h"

static int pii_classify(vsr_classifier_t *c, const vsr_classify_env_t *env, vsr_slice_t text, vsr_slice_t task,
                        vsr_buf_t *out, vsr_buf_t *err)
{
    VSR_UNUSED(c);
    VSR_UNUSED(env);
    /* "threshold": the score an entity needs (applied during the pass); default VSR_PII_DEFAULT_THRESHOLD */
    double th = VSR_PII_DEFAULT_THRESHOLD;
    vsr_json_t j;
    vsr_json_limits_t lim = {.max_depth = 8};
    uint32_t t;
    if (vsr_json_parse(&j, task.p ? task.p : "", task.len, &lim) == VSR_OK && vsr_json_type(&j, 0) == VSR_JSON_OBJECT &&
        vsr_json_object_get(&j, 0, "threshold", &t) == VSR_OK && vsr_json_type(&j, t) != VSR_JSON_NULL) {
        if (vsr_json_type(&j, t) != VSR_JSON_NUMBER || vsr_json_number(&j, t, &th) != VSR_OK || !(th >= 0 && th <= 1)) {
            vsr_json_free(&j);
            vsr_buf_printf(err, "\"threshold\" must be a number from 0 to 1");
            return VSR_ERR_INVALID;
        }
    }
    vsr_json_free(&j);
    vsr_pii_entity_t *ents = vsr_malloc(VSR_PII_MAX_ENTITIES * sizeof(*ents));
    size_t n = 0;
    int truncated = 0;
    int rc = vsr_pii_detect(text.p, text.len, (float)th, ents, VSR_PII_MAX_ENTITIES, &n, &truncated);
    if (rc != VSR_OK) {
        vsr_buf_printf(err, "the PII detector failed");
        vsr_free(ents);
        return VSR_ERR;
    }
    vsr_buf_append_cstr(out, ",\"entities\":[");
    for (size_t i = 0; i < n; i++) {
        vsr_buf_printf(out, "%s{\"type\":\"%s\",\"start\":%zu,\"end\":%zu,\"score\":", i ? "," : "",
                       vsr_pii_type_name(ents[i].type), ents[i].start, ents[i].end);
        vsr__rt_append_float(out, ents[i].score);
        vsr_buf_append_cstr(out, "}");
    }
    vsr_buf_append_cstr(out, truncated ? "],\"truncated\":true" : "]");
    vsr_free(ents);
    return VSR_OK;
}

static const vsr_classifier_ops_t pii_ops = {pii_classify, NULL};

vsr_classifier_t *vsr_classifier_pii_new(vsr_buf_t *err)
{
    VSR_UNUSED(err);
    vsr_classifier_t *c = vsr_calloc(1, sizeof(*c));
    snprintf(c->name, sizeof(c->name), "pii");
    c->backend = "rules";
    c->output = "entities";
    c->ops = &pii_ops;
    return c;
}
