/*
 * remote.c — a remote classifier's answer read into the runtime's result
 * shape (docs/signals.md "Bring a bigger model"), so that the families'
 * readers (classify.c) decide on it as on the built-in models' answers.
 *
 * Accepted answers:
 *   http_classify, labels:   [{"label": L, "score": P}, ...]
 *   http_classify, entities: [{"entity_group" | "entity" | "type" | "label": T, "score": S,
 *                              "start": B, "end": B}, ...]  (start and end optional)
 *   a runtime's /v1/classify: {"labels": [...]} or {"entities": [...]} of the same members
 * Written out as {"labels":[{"label":L,"score":P},...]} or
 * {"entities":[{"type":T,"start":B,"end":B,"score":S},...]}.
 *
 * Every score is a number in [0, 1]; labels are at most 256, none twice;
 * with `distribution` (contract label_distribution) the scores add up to 1
 * within 0.02, as the reference checks.  Entity types are upper-cased, a
 * BIO prefix ("B-", "I-") dropped and the short names of common NER models
 * mapped (PER → PERSON, ORG → ORGANIZATION, LOC → LOCATION, EMAIL →
 * EMAIL_ADDRESS, PHONE → PHONE_NUMBER).
 */
#include <math.h>
#include <stdio.h>

#include "signals/signals-int.h"

#define REMOTE_MAX_ITEMS 256
#define REMOTE_MAX_LABEL 128 /* bytes of a label or type */
#define REMOTE_SUM_TOLERANCE 0.02

static int get_num(const vsr_json_t *j, uint32_t o, const char *key, double *out)
{
    uint32_t t;
    return vsr_json_object_get(j, o, key, &t) == VSR_OK && vsr_json_type(j, t) == VSR_JSON_NUMBER &&
                   vsr_json_number(j, t, out) == VSR_OK && isfinite(*out)
               ? VSR_OK
               : VSR_ERR_INVALID;
}

/* The first of keys that o has as a string, unescaped into pool. */
static int get_str(const vsr_json_t *j, uint32_t o, const char *const *keys, size_t n, vsr_pool_t *pool,
                   vsr_slice_t *out)
{
    for (size_t i = 0; i < n; i++) {
        uint32_t t;
        if (vsr_json_object_get(j, o, keys[i], &t) != VSR_OK)
            continue;
        if (vsr_json_type(j, t) != VSR_JSON_STRING || vsr_json_string(j, t, pool, out) != VSR_OK)
            return VSR_ERR_INVALID;
        return out->len > 0 && out->len <= REMOTE_MAX_LABEL ? VSR_OK : VSR_ERR_INVALID;
    }
    return VSR_ERR_INVALID;
}

/* An entity type in vsr's names: upper case, no BIO prefix, common short names mapped. */
static void entity_type(vsr_slice_t t, char *out, size_t cap)
{
    if (t.len > 2 && (t.p[0] == 'B' || t.p[0] == 'I' || t.p[0] == 'b' || t.p[0] == 'i') && t.p[1] == '-') {
        t.p += 2;
        t.len -= 2;
    }
    size_t n = 0;
    for (size_t i = 0; i < t.len && n + 1 < cap; i++) {
        char c = t.p[i];
        out[n++] = c >= 'a' && c <= 'z' ? (char)(c - 'a' + 'A') : c == '-' || c == ' ' ? '_' : c;
    }
    out[n] = '\0';
    static const char *const alias[][2] = {{"PER", "PERSON"},  {"ORG", "ORGANIZATION"},
                                           {"LOC", "LOCATION"}, {"EMAIL", "EMAIL_ADDRESS"},
                                           {"PHONE", "PHONE_NUMBER"}};
    for (size_t i = 0; i < VSR_ARRAY_LEN(alias); i++)
        if (strcmp(out, alias[i][0]) == 0) {
            snprintf(out, cap, "%s", alias[i][1]);
            break;
        }
}

int vsr_signals_remote_answer(vsr_slice_t answer, int entities, int distribution, vsr_pool_t *pool, vsr_buf_t *out,
                              const char **why)
{
    static const char *const label_keys[] = {"label"};
    static const char *const type_keys[] = {"entity_group", "entity", "type", "label"};
    vsr_json_t j;
    memset(&j, 0, sizeof(j));
    vsr_json_limits_t lim = {.max_depth = 8};
    int rc = VSR_ERR_INVALID;
    *why = "not JSON";
    if (vsr_json_parse(&j, answer.p ? answer.p : "", answer.len, &lim) != VSR_OK)
        goto out;
    uint32_t arr = 0;
    *why = entities ? "not an array of entities" : "not an array of labels";
    if (vsr_json_type(&j, 0) == VSR_JSON_OBJECT) { /* a runtime's /v1/classify answer */
        if (vsr_json_object_get(&j, 0, entities ? "entities" : "labels", &arr) != VSR_OK)
            goto out;
    }
    if (vsr_json_type(&j, arr) != VSR_JSON_ARRAY)
        goto out;
    size_t n = j.toks[arr].count;
    *why = "no labels";
    if (n == 0 && !entities) /* no entity is an answer; no label is not */
        goto out;
    *why = "too many items";
    if (n > REMOTE_MAX_ITEMS)
        goto out;
    vsr_slice_t *seen = vsr_pool_alloc(pool, sizeof(vsr_slice_t) * (n ? n : 1));
    double sum = 0;
    vsr_buf_append_cstr(out, entities ? "{\"entities\":[" : "{\"labels\":[");
    uint32_t t = arr + 1;
    for (size_t i = 0; i < n; i++, t = j.toks[t].next) {
        vsr_slice_t name;
        double p;
        *why = "an item without a name or with a score outside [0, 1]";
        if (vsr_json_type(&j, t) != VSR_JSON_OBJECT ||
            get_str(&j, t, entities ? type_keys : label_keys, entities ? VSR_ARRAY_LEN(type_keys) : 1, pool,
                    &name) != VSR_OK ||
            get_num(&j, t, "score", &p) != VSR_OK || p < 0 || p > 1)
            goto out;
        if (i)
            vsr_buf_append_cstr(out, ",");
        if (entities) {
            char type[REMOTE_MAX_LABEL + 1];
            entity_type(name, type, sizeof(type));
            double b = 0, e = 0;
            int has_b = get_num(&j, t, "start", &b) == VSR_OK, has_e = get_num(&j, t, "end", &e) == VSR_OK;
            *why = "an entity with a bad span";
            if (has_b != has_e || (has_b && (b < 0 || e < b || e > 1e12 || b != floor(b) || e != floor(e))))
                goto out;
            vsr_buf_append_cstr(out, "{\"type\":");
            vsr_buf_append_json_string(out, vsr_slice_cstr(type));
            if (has_b)
                vsr_buf_printf(out, ",\"start\":%.0f,\"end\":%.0f", b, e);
            vsr_buf_printf(out, ",\"score\":%.6g}", p);
            continue;
        }
        *why = "a label given twice";
        for (size_t k = 0; k < i; k++)
            if (vsr_slice_eq(seen[k], name))
                goto out;
        seen[i] = name;
        sum += p;
        vsr_buf_append_cstr(out, "{\"label\":");
        vsr_buf_append_json_string(out, name);
        vsr_buf_printf(out, ",\"score\":%.6g}", p);
    }
    *why = "scores that do not add up to 1 (contract label_distribution)";
    if (distribution && !entities && fabs(sum - 1.0) > REMOTE_SUM_TOLERANCE)
        goto out;
    vsr_buf_append_cstr(out, "]}");
    *why = NULL;
    rc = VSR_OK;
out:
    vsr_json_free(&j);
    return rc;
}

/* The text goes out as JSON, at most 6 bytes a rune (a control byte's \u
 * escape): its bound keeps the request within the entry's max_request_bytes. */
void vsr__remote_init(vsr__remote_t *r, const vsr_remote_cls_conf_t *conf, size_t max_runes, const char *family)
{
    memset(r, 0, sizeof(*r));
    if (conf == NULL || conf->protocol == 0 || conf->model == NULL)
        return;
    r->model = vsr_strdup(conf->model);
    r->protocol = conf->protocol;
    r->timeout_ms = conf->timeout_ms;
    r->distribution = conf->distribution;
    r->runtime_model = vsr_strdup(conf->runtime_model ? conf->runtime_model : family);
    size_t room = conf->max_request_bytes > 256 ? (size_t)(conf->max_request_bytes - 256) / 6 : 1;
    r->runes = VSR_MIN(max_runes, room);
}

void vsr__remote_free(vsr__remote_t *r)
{
    vsr_free(r->model);
    vsr_free(r->runtime_model);
    memset(r, 0, sizeof(*r));
}

void vsr__remote_task(vsr_pool_t *pool, const vsr__remote_t *r, vsr_slice_t text, const char *extra,
                      vsr_signal_task_t *out)
{
    vsr_buf_t b;
    vsr_buf_init(&b, 0);
    vsr_buf_append_cstr(&b, "{\"model\":");
    vsr_buf_append_json_string(&b, vsr_slice_cstr(r->model));
    vsr_buf_printf(&b, ",\"timeout_ms\":%llu,\"path\":\"%s\",\"body\":{", (unsigned long long)r->timeout_ms,
                   r->protocol == VSR_REMOTE_RUNTIME ? "/v1/classify" : "/classify");
    if (r->protocol == VSR_REMOTE_RUNTIME) {
        vsr_buf_append_cstr(&b, "\"model\":");
        vsr_buf_append_json_string(&b, vsr_slice_cstr(r->runtime_model));
        vsr_buf_append_cstr(&b, ",\"text\":");
        vsr_buf_append_slice(&b, vsr__text_json(pool, text, r->runes));
        if (extra)
            vsr_buf_append_cstr(&b, extra);
    } else {
        vsr_buf_append_cstr(&b, "\"inputs\":");
        vsr_buf_append_slice(&b, vsr__text_json(pool, text, r->runes));
    }
    vsr_buf_append_cstr(&b, "}}");
    out->type = VSR_SIGNAL_TASK_REMOTE;
    out->payload = vsr_pool_dup_slice(pool, vsr_buf_slice(&b));
    vsr_buf_free(&b);
}
