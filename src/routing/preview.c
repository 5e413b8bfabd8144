/*
 * preview.c — POST /api/v1/routing/preview: what the routing core would
 * decide for a model name and a text, without calling anything.
 */
#include "routing/routing-int.h"

static void append_kv_str(vsr_buf_t *b, const char *key, const char *val, int comma)
{
    vsr_buf_printf(b, "%s\"%s\":", comma ? "," : "", key);
    if (val)
        vsr_buf_append_json_string(b, vsr_slice_cstr(val));
    else
        vsr_buf_append_cstr(b, "null");
}

static void trace_rule(vsr_buf_t *b, const vsr_rule_conf_t *r, route_ctx_t *rc)
{
    static const char *ops[] = {"LEAF", "AND", "OR", "NOT"};
    if (r->kind == VSR_RULE_LEAF) {
        int idx = vsr_signals_find(rc->rs->signals, r->type, r->name);
        int matched = idx >= 0 && rc->memo_done[idx] && rc->memo[idx].matched;
        double conf = matched ? rc->memo[idx].confidence : 0;
        int o = strcmp(r->type, "projection") == 0 ? vsr_projections_find_output(rc->rs->proj, r->name) : -1;
        if (o >= 0 && rc->proj.out_done[o]) {
            matched = rc->proj.out[o].matched;
            conf = rc->proj.out[o].confidence;
        }
        vsr_buf_append_cstr(b, "{\"type\":");
        vsr_buf_append_json_string(b, vsr_slice_cstr(r->type));
        vsr_buf_append_cstr(b, ",\"name\":");
        vsr_buf_append_json_string(b, vsr_slice_cstr(r->name));
        vsr_buf_printf(b, ",\"matched\":%s,\"confidence\":%.4f}", matched ? "true" : "false", conf);
        return;
    }
    vsr_buf_printf(b, "{\"operator\":\"%s\",\"conditions\":[", ops[r->kind]);
    for (size_t i = 0; i < r->n_children; i++) {
        if (i)
            vsr_buf_append(b, ",", 1);
        trace_rule(b, &r->children[i], rc);
    }
    vsr_buf_append_cstr(b, "]}");
}

static const char *plugin_name(vsr_plugin_kind_t k)
{
    switch (k) {
    case VSR_PLUGIN_SYSTEM_PROMPT: return "system_prompt";
    case VSR_PLUGIN_HEADER_MUTATION: return "header_mutation";
    case VSR_PLUGIN_FAST_RESPONSE: return "fast_response";
    case VSR_PLUGIN_REQUEST_PARAMS: return "request_params";
    case VSR_PLUGIN_TOOLS: return "tools";
    case VSR_PLUGIN_CONTEXT_COMPRESSION: return "context_compression";
    case VSR_PLUGIN_RESPONSE_CACHE: return "response_cache";
    case VSR_PLUGIN_RESPONSE_JAILBREAK: return "response_jailbreak";
    case VSR_PLUGIN_ROUTER_REPLAY: return "router_replay";
    case VSR_PLUGIN_TOOL_SELECTION: return "tool_selection";
    case VSR_PLUGIN_MEMORY: return "memory";
    case VSR_PLUGIN_HALLUCINATION: return "hallucination";
    case VSR_PLUGIN_SHADOW_DISPATCH: return "shadow_dispatch";
    case VSR_PLUGIN_RAG: return "rag";
    case VSR_PLUGIN_UNSUPPORTED: break;
    }
    return "unsupported";
}

static int preview_error(vsr_buf_t *out, const char *pre, vsr_slice_t arg, const char *post)
{
    vsr_buf_t m;
    vsr_buf_init(&m, 0);
    vsr_buf_append_cstr(&m, pre);
    vsr_json_append_client_text(&m, arg, VSR_JSON_QUOTE_MAX); /* valid UTF-8, NUL kept, bounded */
    vsr_buf_append_cstr(&m, post);
    vsr_buf_append_cstr(out, "{\"error\":{\"message\":");
    vsr_buf_append_json_string(out, vsr_buf_slice(&m));
    vsr_buf_append_cstr(out, ",\"type\":\"invalid_request_error\",\"code\":null}}");
    vsr_buf_free(&m);
    return 400;
}

struct vsr_preview_s {
    vsr_engine_t *e;
    vsr_pool_t pool;
    vsr_chat_message_t msg;
    vsr_chat_view_t chat;
    vsr_signals_memo_t sig_memo;
    route_ctx_t rc;
    const vsr_recipe_conf_t *recipe;
    int trace;
    vsr_buf_t *out;
    void (*done)(void *done_ud, int status);
    void *done_ud;
};

static void preview_free(vsr_preview_t *p)
{
    vsr_pool_free(&p->pool);
    vsr_engine_unref(p->e);
    vsr_free(p);
}

/* The answer, once the decision is made. */
static void preview_write(vsr_preview_t *p)
{
    const vsr_config_t *cfg = p->e->cfg;
    route_ctx_t *rc = &p->rc;
    vsr_buf_t *out = p->out;
    int trace = p->trace;
    const vsr_decision_conf_t *d = rc->selected >= 0 ? rc->results[rc->selected].decision : NULL;
    const char *selected = NULL;
    const char *status = "default";
    const vsr_selection_t *sel = NULL;
    if (d && vsr__select_is_selector(d) && !rc->fail_request) {
        const vsr_model_stats_t *st = rc->ports && rc->ports->model_stats ? rc->ports->model_stats(rc->ports_ud)
                                                                          : NULL;
        vsr__select_run(cfg, d, st, NULL, &p->pool, &sel); /* router_dc: no query embedding here */
    }
    if (d && d->n_model_refs) {
        const vsr_model_ref_conf_t *ref = &d->model_refs[sel && sel->chosen >= 0 ? (size_t)sel->chosen : rc->model_ref];
        selected = ref->lora_name ? ref->lora_name : ref->model;
        status = sel && sel->chosen < 0 ? "selection_failed" : "matched";
    } else if (cfg->default_model) {
        selected = cfg->default_lora ? cfg->default_lora : cfg->default_model;
    } else {
        status = "no_model";
    }
    if (rc->fail_request) {
        d = NULL;
        selected = NULL;
        status = "signal_unavailable";
    }
    append_kv_str(out, "recipe", p->recipe->name, 0);
    if (d) {
        vsr_buf_append_cstr(out, ",\"decision_result\":{");
        append_kv_str(out, "decision_name", d->name, 0);
        append_kv_str(out, "algorithm", d->algorithm ? d->algorithm : "static", 1);
        if (rc->choice.scored) { /* the static selector's scores decided the modelRef */
            vsr_buf_append_cstr(out, ",\"model_score\":{");
            append_kv_str(out, "domain", rc->choice.domain, 0);
            vsr_buf_printf(out, ",\"score\":%.4f}", rc->choice.score);
        }
        vsr_buf_printf(out, ",\"confidence\":%.4f,", rc->results[rc->selected].confidence);
        if (sel) {
            vsr_buf_append_cstr(out, "\"selection\":");
            vsr__selection_json(out, sel);
            vsr_buf_append_cstr(out, ",");
        }
        vsr_buf_append_cstr(out, "\"plugins\":[");
        int first = 1;
        for (size_t i = 0; i < d->n_plugins; i++) {
            if (!d->plugins[i].enabled)
                continue;
            vsr_buf_printf(out, "%s\"%s\"", first ? "" : ",", plugin_name(d->plugins[i].kind));
            first = 0;
        }
        vsr_buf_append_cstr(out, "]}");
    } else {
        vsr_buf_append_cstr(out, ",\"decision_result\":null");
    }
    append_kv_str(out, "selected_model", selected, 1);
    append_kv_str(out, "selection_status", status, 1);
    vsr_buf_append_cstr(out, ",\"signal_confidences\":{");
    int first = 1;
    size_t n = vsr_signals_count(rc->rs->signals);
    for (size_t i = 0; i < n; i++) {
        if (!rc->memo_done[i])
            continue;
        vsr_buf_printf(out, "%s\"%s:%s\":%.4f", first ? "" : ",", vsr_signals_family(rc->rs->signals, (int)i),
                       vsr_signals_name(rc->rs->signals, (int)i), rc->memo[i].matched ? rc->memo[i].confidence : 0.0);
        first = 0;
    }
    vsr_buf_append_cstr(out, "},");
    vsr_projections_describe(rc->rs->proj, &rc->proj, trace, out);
    if (trace) {
        /* what decided each model-backed signal: its value and the model's answer */
        vsr_buf_append_cstr(out, ",\"signal_evidence\":{");
        first = 1;
        for (size_t i = 0; i < n; i++) {
            if (!rc->memo_done[i] || rc->memo[i].evidence.len == 0)
                continue;
            vsr_buf_printf(out, "%s\"%s:%s\":{\"value\":%.6g,\"result\":", first ? "" : ",",
                           vsr_signals_family(rc->rs->signals, (int)i), vsr_signals_name(rc->rs->signals, (int)i),
                           rc->memo[i].value);
            vsr_buf_append_slice(out, rc->memo[i].evidence);
            vsr_buf_append_cstr(out, "}");
            first = 0;
        }
        vsr_buf_append_cstr(out, "}");
        vsr_buf_append_cstr(out, ",\"eval_trace\":[");
        for (size_t i = 0; i < rc->rs->conf->n_decisions; i++) {
            const vsr_decision_result_t *r = &rc->results[i];
            if (i)
                vsr_buf_append(out, ",", 1);
            vsr_buf_append_cstr(out, "{\"decision\":");
            vsr_buf_append_json_string(out, vsr_slice_cstr(r->decision->name));
            vsr_buf_printf(out, ",\"matched\":%s,\"confidence\":%.4f,\"priority\":%lld,\"tier\":%lld,\"rules\":",
                           r->matched ? "true" : "false", r->confidence, (long long)r->decision->priority,
                           (long long)r->decision->tier);
            if (r->decision->rules)
                trace_rule(out, r->decision->rules, rc);
            else
                vsr_buf_append_cstr(out, "null");
            vsr_buf_append_cstr(out, "}");
        }
        vsr_buf_append_cstr(out, "]");
    }
    vsr_buf_append_cstr(out, "}");
}


static void preview_resumed(route_ctx_t *rcp)
{
    vsr_preview_t *p = rcp->cont_ud;
    preview_write(p);
    void (*done)(void *, int) = p->done;
    void *ud = p->done_ud;
    preview_free(p);
    done(ud, 200);
}

int vsr_engine_preview_wait(vsr_engine_t *e, vsr_slice_t model, vsr_slice_t text, int trace, vsr_buf_t *out,
                            const vsr_ports_t *ports, void *ports_ud, uint64_t deadline_ms,
                            void (*done)(void *done_ud, int status), void *done_ud, vsr_preview_t **wait)
{
    if (wait)
        *wait = NULL;
    resolution_t res;
    if (vsr__resolve_model(e, model, &res) != VSR_OK)
        return preview_error(out, "model \"", model, "\" is not available");

    if (res.model) {
        vsr_buf_append_cstr(out, "{");
        append_kv_str(out, "recipe", NULL, 0);
        vsr_buf_append_cstr(out, ",\"decision_result\":null");
        append_kv_str(out, "selected_model", res.model->name, 1);
        append_kv_str(out, "selection_status", "passthrough", 1);
        vsr_buf_append_cstr(out, ",\"signal_confidences\":{}}");
        return 200;
    }

    vsr_buf_append_cstr(out, "{");
    vsr_preview_t *p = vsr_calloc(1, sizeof(*p));
    p->e = vsr_engine_ref(e);
    vsr_pool_init(&p->pool);
    p->msg.role = VSR_ROLE_USER;
    p->msg.text = text;
    p->chat.messages = &p->msg;
    p->chat.n_messages = 1;
    p->chat.last_user = 0;
    p->chat.text_bytes = text.len;
    p->recipe = res.recipe;
    p->trace = trace;
    p->out = out;
    p->done = done;
    p->done_ud = done_ud;

    route_ctx_t *rc = &p->rc;
    rc->rs = vsr__engine_recipe(e, res.recipe);
    rc->in.chat = &p->chat;
    rc->in.text = text;
    rc->in.pool = &p->pool;
    rc->in.memo = &p->sig_memo;
    rc->ports = ports;
    rc->ports_ud = ports_ud;
    rc->cfg = e->cfg; /* model calls (llm and remote classifiers) name its models */
    rc->deadline_ms = deadline_ms;
    rc->cont = preview_resumed;
    rc->cont_ud = p;
    if (vsr__route_start(rc, &p->pool) == VSR_AGAIN) {
        VSR_BUG_ON(done == NULL || wait == NULL);
        *wait = p;
        return VSR_AGAIN;
    }
    preview_write(p);
    preview_free(p);
    return 200;
}

void vsr_preview_cancel(vsr_preview_t *p)
{
    if (p == NULL)
        return;
    vsr__route_cancel(&p->rc);
    preview_free(p);
}

int vsr_engine_preview(vsr_engine_t *e, vsr_slice_t model, vsr_slice_t text, int trace, vsr_buf_t *out)
{
    return vsr_engine_preview_wait(e, model, text, trace, out, NULL, NULL, 0, NULL, NULL, NULL);
}
