/*
 * cfg_hallucination.c — the answer-side families of the document (ref §1.3,
 * §2.3, §3): routing.signals.hallucination[], the hallucination plugin, its
 * detector under global.model_catalog.modules.hallucination_mitigation, and
 * the shadow_dispatch plugin.
 *
 * The detector: backend endpoint (an OpenAI-compatible chat completions
 * server) becomes a model of one backend, so that the upstream layer carries
 * its calls with its pools, deadlines and response bound.  backend candle
 * (the default: the reference's local token classifier) is a model vsr does
 * not have; a plugin that needs it loads with a warning and its checks fail
 * open (the reference's detector errors never block either).
 */
#include "config/cfg_internal.h"

#include <stdio.h>
#include <string.h>

/* ---- routing.signals.hallucination[] ----------------------------------------------- */

#define HS_OFF(m) offsetof(vsr_sig_hallucination_conf_t, m)
static const cfg_field_t hal_signal_fields[] = {
    {.key = "name", .decode = vsr__cfg_string, .flags = CFG_REQUIRED, .offset = HS_OFF(name)},
    {.key = "description", .decode = vsr__cfg_accept_text},
    {.key = "use_nli", .decode = vsr__cfg_bool, .offset = HS_OFF(use_nli)},
};
static const cfg_spec_t hal_signal_spec = {.size = sizeof(vsr_sig_hallucination_conf_t),
                                           .fields = hal_signal_fields,
                                           .n_fields = VSR_ARRAY_LEN(hal_signal_fields)};

int vsr__cfg_hallucination_signals(cfg_decoder_t *d, const cfg_node_t *val, vsr_signals_conf_t *s)
{
    if (val->kind == CFG_NODE_SCALAR && val->type == CFG_NULL)
        return 0;
    cfg_field_t lf = {.key = "hallucination", .spec = &hal_signal_spec,
                      .offset = offsetof(vsr_signals_conf_t, hallucination),
                      .count_offset = offsetof(vsr_signals_conf_t, n_hallucination)};
    size_t saved = vsr__cfg_path_push(d, "hallucination");
    int rc = vsr__cfg_list(d, &lf, val, s);
    vsr__cfg_path_pop(d, saved);
    if (rc != 0 || val->kind != CFG_NODE_SEQ || s->n_hallucination < 2)
        return rc;
    const char **keys = vsr_malloc(s->n_hallucination * sizeof(*keys));
    const cfg_node_t **nodes = vsr_malloc(s->n_hallucination * sizeof(*nodes));
    for (size_t i = 0; i < s->n_hallucination; i++) {
        keys[i] = s->hallucination[i].name;
        const cfg_node_t *name = vsr__cfg_map_get(val->items[i], "name");
        nodes[i] = name ? name : val->items[i];
    }
    vsr__cfg_check_unique(d, "hallucination signal name", keys, nodes, s->n_hallucination);
    vsr_free(keys);
    vsr_free(nodes);
    return 0;
}

const char *vsr__cfg_condition_refusal(const char *type)
{
    if (type && strcmp(type, "hallucination") == 0)
        return "condition type \"hallucination\" cannot be read by a decision: it is a response-stage signal (the "
               "answer is checked after the model has answered; the hallucination plugin acts on it)";
    return NULL;
}

/* ---- the hallucination plugin ------------------------------------------------------- */

#define HP_OFF(m) offsetof(vsr_plugin_conf_t, u.hallucination.m)
static const char *const hal_actions[] = {"header", "body", "none", NULL}; /* = vsr_hal_action_t */

static const cfg_field_t hal_plugin_fields[] = {
    {.key = "enabled", .decode = vsr__cfg_bool, .offset = offsetof(vsr_plugin_conf_t, enabled)},
    {.key = "hallucination_action", .decode = vsr__cfg_choice, .offset = HP_OFF(action), .choices = hal_actions},
    {.key = "unverified_factual_action", .decode = vsr__cfg_choice, .offset = HP_OFF(unverified_action),
     .choices = hal_actions},
    {.key = "include_hallucination_details", .decode = vsr__cfg_bool, .offset = HP_OFF(include_details)},
    {.key = "use_nli", .decode = vsr__cfg_bool,
     .inert = "the reference retired its NLI explainer; vsr's detector (backend endpoint) explains spans itself"},
};

static void finish_hal_plugin(cfg_decoder_t *d, const cfg_node_t *map, void *obj, const cfg_node_t *const *seen,
                              size_t index)
{
    VSR_UNUSED(seen);
    VSR_UNUSED(index);
    vsr_plugin_conf_t *p = obj;
    p->u.hallucination.enabled = p->enabled;
    if (p->enabled)
        vsr__cfg_mark(d, &p->u.hallucination, map); /* the detector is checked with the whole document */
}

const cfg_spec_t vsr__cfg_hallucination_plugin_spec = {
    .size = sizeof(vsr_plugin_conf_t),
    .fields = hal_plugin_fields,
    .n_fields = VSR_ARRAY_LEN(hal_plugin_fields),
    .finish = finish_hal_plugin,
};

/* ---- global.model_catalog.modules.hallucination_mitigation ------------------------- */

#define HM_OFF(m) offsetof(vsr_hallucination_module_conf_t, m)
static const char *const hal_backends[] = {"candle", "endpoint", NULL}; /* index = endpoint */

static int decode_detector_url(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj)
{
    const char *s = vsr__cfg_get_string(d, f, val);
    if (s == NULL)
        return -1;
    cfg_url_t u;
    const char *why = NULL;
    if (vsr__cfg_parse_base_url(vsr_slice_cstr(s), &u, &why) != VSR_OK) {
        vsr__cfg_node_error(d, val, "%s: invalid URL %s: %s", f->key, vsr__cfg_quote(d->pool, s, val->len),
                            why ? why : "malformed");
        return -1;
    }
    vsr_hallucination_module_conf_t *m = obj;
    vsr_backend_conf_t *b = &m->backend;
    m->url = vsr__cfg_strdup(d, s);
    b->name = vsr__cfg_strdup(d, "primary");
    b->host = vsr_pool_strndup(d->pool, u.hp.host.p, u.hp.host.len);
    b->tls = u.tls;
    b->port = u.hp.port ? u.hp.port : (u.tls ? 443 : 80);
    /* POST {endpoint}/chat/completions: the URL's path replaces the chat path's "/v1" */
    b->has_base_url = 1;
    b->path_prefix = vsr_pool_strndup(d->pool, u.path.p, u.path.len);
    b->weight = 1;
    b->authority = vsr__cfg_authority(d->pool, u.hp.host, u.hp.ipv6, b->port, b->tls);
    return 0;
}

static const cfg_field_t detector_fields[] = {
    {.key = "backend", .decode = vsr__cfg_choice, .offset = HM_OFF(endpoint), .choices = hal_backends},
    {.key = "endpoint", .decode = decode_detector_url},
    {.key = "model_id", .decode = vsr__cfg_string, .offset = HM_OFF(model_id)},
    {.key = "include_explanation", .decode = vsr__cfg_bool, .offset = HM_OFF(include_explanation)},
};
/* open: the local model's settings (threshold, min_span_*, use_cpu, model_ref, nli_*) are recorded */
static const cfg_spec_t detector_spec = {.size = sizeof(vsr_hallucination_module_conf_t),
                                         .fields = detector_fields,
                                         .n_fields = VSR_ARRAY_LEN(detector_fields),
                                         .open = 1};

static void finish_module(cfg_decoder_t *d, const cfg_node_t *map, void *obj, const cfg_node_t *const *seen,
                          size_t index)
{
    VSR_UNUSED(seen);
    VSR_UNUSED(index);
    vsr_hallucination_module_conf_t *m = obj;
    const cfg_node_t *det = vsr__cfg_map_get(map, "detector");
    if (det == NULL)
        det = vsr__cfg_map_get(map, "hallucination_model"); /* the older layout's name */
    if (m->endpoint && m->url == NULL)
        vsr__cfg_node_error(d, det ? det : map, "hallucination detector: backend endpoint needs endpoint (a URL)");
    else if (m->endpoint && m->model_id == NULL)
        vsr__cfg_node_error(d, det ? det : map, "hallucination detector: backend endpoint needs model_id");
    if (m->url && m->model_id) {
        m->model.name = vsr__cfg_strdup(d, VSR_HAL_DETECTOR_NAME);
        m->model.provider_model_id = m->model_id;
        m->model.backends = &m->backend;
        m->model.n_backends = 1;
    }
    vsr__cfg_mark(d, m, map);
}

static const cfg_field_t module_fields[] = {
    {.key = "enabled", .decode = vsr__cfg_bool, .offset = HM_OFF(enabled)},
    {.key = "detector", .decode = vsr__cfg_object, .flags = CFG_NULL_OK, .spec = &detector_spec},
    {.key = "hallucination_model", .decode = vsr__cfg_object, .flags = CFG_NULL_OK, .spec = &detector_spec},
};
/* open: fact_check and explainer (local models) are recorded */
const cfg_spec_t vsr__cfg_hallucination_module_spec = {.size = sizeof(vsr_hallucination_module_conf_t),
                                                       .fields = module_fields,
                                                       .n_fields = VSR_ARRAY_LEN(module_fields),
                                                       .finish = finish_module,
                                                       .open = 1};

/* ---- shadow_dispatch ---------------------------------------------------------------- */

#define SD_OFF(m) offsetof(vsr_plugin_conf_t, u.shadow_dispatch.m)

/* forward_headers: no credentials, no pseudo-headers (the reference's rule) */
static int decode_forward_headers(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj)
{
    if (vsr__cfg_strlist(d, f, val, obj) != 0)
        return -1;
    const vsr_strlist_conf_t *l = (const vsr_strlist_conf_t *)((char *)obj + f->offset);
    static const char *const creds[] = {"authorization", "proxy-authorization", "cookie", "x-api-key", "api-key",
                                        "x-goog-api-key"};
    for (size_t i = 0; i < l->n; i++) {
        const char *h = l->items[i];
        const cfg_node_t *at = val->kind == CFG_NODE_SEQ && i < val->n ? val->items[i] : val;
        size_t n = strlen(h);
        int bad = h[0] == ':' || !vsr__cfg_is_token(h);
        for (size_t k = 0; k < VSR_ARRAY_LEN(creds) && !bad; k++)
            bad = vsr_slice_case_eq_cstr(vsr_slice(h, n), creds[k]);
        /* x-user-<provider>-key */
        if (!bad && n > 11 && vsr_slice_case_eq_cstr(vsr_slice(h, 7), "x-user-") &&
            vsr_slice_case_eq_cstr(vsr_slice(h + n - 4, 4), "-key"))
            bad = 1;
        if (bad) {
            vsr__cfg_node_error(d, at, "shadow_dispatch: forward_headers may not name %s (credentials and "
                                       "pseudo-headers never go to a shadow model)", vsr__cfg_quote(d->pool, h, n));
            return -1;
        }
    }
    if (l->n > VSR_SHADOW_MAX_FORWARD) {
        vsr__cfg_node_error(d, val, "shadow_dispatch: at most %u forward_headers", VSR_SHADOW_MAX_FORWARD);
        return -1;
    }
    return 0;
}

static int decode_shadow_seconds(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj)
{
    uint64_t s = 0;
    cfg_field_t g = *f;
    g.offset = 0;
    g.size = sizeof(s);
    g.min = 1;
    g.max = 600;
    if (vsr__cfg_uint(d, &g, val, &s) != 0)
        return -1;
    *(uint64_t *)((char *)obj + f->offset) = s * 1000;
    return 0;
}

static const cfg_field_t shadow_fields[] = {
    {.key = "enabled", .decode = vsr__cfg_bool, .offset = offsetof(vsr_plugin_conf_t, enabled)},
    {.key = "model", .decode = vsr__cfg_string, .offset = SD_OFF(model)},
    {.key = "sample_rate", .decode = vsr__cfg_double, .offset = SD_OFF(sample_rate), .dmin = 0, .dmax = 1},
    {.key = "max_concurrency", .decode = vsr__cfg_uint, .offset = SD_OFF(max_concurrency), .size = sizeof(uint32_t),
     .min = 1, .max = 1024},
    {.key = "max_queue_depth", .decode = vsr__cfg_uint, .offset = SD_OFF(max_queue_depth), .size = sizeof(uint32_t),
     .min = 0, .max = 65536},
    {.key = "timeout_seconds", .decode = decode_shadow_seconds, .offset = SD_OFF(timeout_ms)},
    {.key = "max_response_bytes", .decode = vsr__cfg_uint, .offset = SD_OFF(max_response_bytes),
     .size = sizeof(uint64_t), .min = 1, .max = (int64_t)64 << 20},
    {.key = "max_retries", .decode = vsr__cfg_uint, .size = sizeof(uint32_t), .min = 0, .max = 3,
     .inert = "a shadow copy is retried as the shadow model's own reliability settings say"},
    {.key = "forward_headers", .decode = decode_forward_headers, .flags = CFG_NULL_OK,
     .offset = SD_OFF(forward_headers)},
    {.key = "capture_response_body", .decode = vsr__cfg_bool,
     .inert = "vsr counts a shadow answer's status, bytes and latency (metrics); it keeps no body"},
    {.key = "max_capture_bytes", .decode = vsr__cfg_uint, .size = 8, .max = INT64_MAX,
     .inert = "vsr keeps no shadow answer body"},
    {.key = "tls_skip_verify", .decode = vsr__cfg_bool,
     .inert = "a shadow copy goes through the model's own backend settings (its TLS included)"},
};

static void init_shadow(cfg_decoder_t *d, void *obj)
{
    VSR_UNUSED(d);
    vsr_plugin_shadow_dispatch_conf_t *s = &((vsr_plugin_conf_t *)obj)->u.shadow_dispatch;
    s->sample_rate = 1.0;
    s->max_concurrency = 2;
    s->max_queue_depth = 8;
    s->timeout_ms = 30000;
    s->max_response_bytes = 1048576;
}

static void finish_shadow(cfg_decoder_t *d, const cfg_node_t *map, void *obj, const cfg_node_t *const *seen,
                          size_t index)
{
    VSR_UNUSED(seen);
    VSR_UNUSED(index);
    vsr_plugin_conf_t *p = obj;
    vsr_plugin_shadow_dispatch_conf_t *s = &p->u.shadow_dispatch;
    s->enabled = p->enabled;
    if (p->enabled && s->model == NULL)
        vsr__cfg_node_error(d, map, "shadow_dispatch: model is required when enabled");
    else if (s->model)
        vsr__cfg_mark(d, s, vsr__cfg_map_get(map, "model"));
}

const cfg_spec_t vsr__cfg_shadow_dispatch_spec = {
    .size = sizeof(vsr_plugin_conf_t),
    .fields = shadow_fields,
    .n_fields = VSR_ARRAY_LEN(shadow_fields),
    .init = init_shadow,
    .finish = finish_shadow,
};

/* ---- once the whole document is decoded -------------------------------------------- */

static void resolve_recipe(cfg_decoder_t *d, config_box_t *box, const vsr_recipe_conf_t *r)
{
    const vsr_hallucination_module_conf_t *m = &box->conf.hallucination;
    for (size_t i = 0; i < r->n_decisions; i++) {
        const vsr_decision_conf_t *dec = &r->decisions[i];
        for (size_t k = 0; k < dec->n_plugins; k++) {
            const vsr_plugin_conf_t *p = &dec->plugins[k];
            if (p->kind == VSR_PLUGIN_SHADOW_DISPATCH && p->u.shadow_dispatch.model) {
                const cfg_mark_t *at = vsr__cfg_mark_find(d, &p->u.shadow_dispatch);
                int found = 0;
                for (size_t j = 0; j < box->conf.n_models && !found; j++)
                    found = strcmp(box->conf.models[j].name, p->u.shadow_dispatch.model) == 0;
                if (!found && at)
                    vsr__cfg_mark_error(d, at, "shadow_dispatch: model \"%s\" is not a providers.models[] name",
                                        p->u.shadow_dispatch.model);
            } else if (p->kind == VSR_PLUGIN_HALLUCINATION && p->enabled && m->model.n_backends == 0) {
                const cfg_mark_t *at = vsr__cfg_mark_find(d, &p->u.hallucination);
                if (at)
                    vsr__cfg_warn(d, "%s:%u:%u: hallucination: no detector vsr can call (set global.model_catalog."
                                     "modules.hallucination_mitigation.detector.backend: endpoint with endpoint and "
                                     "model_id); answers are not checked, only unverified_factual_action applies",
                                  d->dg->file, at->line, at->col);
            }
        }
    }
}

/* The detector joins global.model_catalog.external[] (under a name no
 * document can write: it has a dot), so that the upstream layer opens its
 * pool with the others and carries its calls. */
static void add_detector(cfg_decoder_t *d, vsr_config_t *c)
{
    vsr_hallucination_module_conf_t *m = &c->hallucination;
    if (m->model.n_backends == 0)
        return;
    vsr_external_conf_t *v = vsr_pool_alloc(d->pool, (c->n_externals + 1) * sizeof(*v));
    if (c->n_externals)
        memcpy(v, c->externals, c->n_externals * sizeof(*v));
    vsr_external_conf_t *e = &v[c->n_externals];
    memset(e, 0, sizeof(*e));
    e->name = vsr__cfg_strdup(d, VSR_HAL_DETECTOR_NAME);
    e->model_name = m->model_id;
    e->timeout_ms = VSR_HAL_DEFAULT_TIMEOUT_MS;
    e->max_request_bytes = VSR_EXTERNAL_DEFAULT_MAX_REQUEST;
    e->max_response_bytes = VSR_HAL_MAX_RESPONSE;
    e->backend = m->backend;
    e->model = m->model;
    e->model.name = e->name;
    c->externals = v;
    c->n_externals++;
    for (size_t i = 0; i < c->n_externals; i++) /* the array moved: each model's one backend with it */
        if (c->externals[i].model.n_backends)
            c->externals[i].model.backends = &c->externals[i].backend;
}

void vsr__cfg_hallucination_resolve(cfg_decoder_t *d, config_box_t *box)
{
    add_detector(d, &box->conf);
    resolve_recipe(d, box, &box->routing);
    for (size_t i = 0; i < box->n_recipe_list; i++)
        resolve_recipe(d, box, &box->recipe_list[i]);
}
