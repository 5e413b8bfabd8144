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

int vsr_engine_preview(vsr_engine_t *e, vsr_slice_t model, vsr_slice_t text, int trace, vsr_buf_t *out)
{
    const vsr_config_t *cfg = e->cfg;
    resolution_t res;
    if (vsr__resolve_model(e, model, &res) != VSR_OK)
        return preview_error(out, "model \"", model, "\" is not available");

    vsr_buf_append_cstr(out, "{");
    if (res.model) {
        append_kv_str(out, "recipe", NULL, 0);
        vsr_buf_append_cstr(out, ",\"decision_result\":null");
        append_kv_str(out, "selected_model", res.model->name, 1);
        append_kv_str(out, "selection_status", "passthrough", 1);
        vsr_buf_append_cstr(out, ",\"signal_confidences\":{}}");
        return 200;
    }

    vsr_pool_t pool;
    vsr_pool_init(&pool);
    vsr_chat_message_t msg;
    memset(&msg, 0, sizeof(msg));
    msg.role = VSR_ROLE_USER;
    msg.text = text;
    vsr_chat_view_t chat;
    memset(&chat, 0, sizeof(chat));
    chat.messages = &msg;
    chat.n_messages = 1;
    chat.last_user = 0;
    chat.text_bytes = text.len;

    route_ctx_t rc;
    memset(&rc, 0, sizeof(rc));
    rc.rs = vsr__engine_recipe(e, res.recipe);
    rc.in.chat = &chat;
    rc.in.text = text;
    rc.in.pool = &pool;
    vsr_signals_memo_t sig_memo;
    memset(&sig_memo, 0, sizeof(sig_memo));
    rc.in.memo = &sig_memo;
    vsr__route(&rc, &pool);

    const vsr_decision_conf_t *d = rc.selected >= 0 ? rc.results[rc.selected].decision : NULL;
    const char *selected = NULL;
    const char *status = "default";
    if (d && d->n_model_refs) {
        selected = d->model_refs[0].lora_name ? d->model_refs[0].lora_name : d->model_refs[0].model;
        status = "matched";
    } else if (cfg->default_model) {
        selected = cfg->default_lora ? cfg->default_lora : cfg->default_model;
    } else {
        status = "no_model";
    }
    append_kv_str(out, "recipe", res.recipe->name, 0);
    if (d) {
        vsr_buf_append_cstr(out, ",\"decision_result\":{");
        append_kv_str(out, "decision_name", d->name, 0);
        append_kv_str(out, "algorithm", d->algorithm ? d->algorithm : "static", 1);
        vsr_buf_printf(out, ",\"confidence\":%.4f,\"plugins\":[", rc.results[rc.selected].confidence);
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
    size_t n = vsr_signals_count(rc.rs->signals);
    for (size_t i = 0; i < n; i++) {
        if (!rc.memo_done[i])
            continue;
        vsr_buf_printf(out, "%s\"%s:%s\":%.4f", first ? "" : ",", vsr_signals_family(rc.rs->signals, (int)i),
                       vsr_signals_name(rc.rs->signals, (int)i), rc.memo[i].matched ? rc.memo[i].confidence : 0.0);
        first = 0;
    }
    vsr_buf_append_cstr(out, "}");
    if (trace) {
        vsr_buf_append_cstr(out, ",\"eval_trace\":[");
        for (size_t i = 0; i < rc.rs->conf->n_decisions; i++) {
            const vsr_decision_result_t *r = &rc.results[i];
            if (i)
                vsr_buf_append(out, ",", 1);
            vsr_buf_append_cstr(out, "{\"decision\":");
            vsr_buf_append_json_string(out, vsr_slice_cstr(r->decision->name));
            vsr_buf_printf(out, ",\"matched\":%s,\"confidence\":%.4f,\"priority\":%lld,\"tier\":%lld,\"rules\":",
                           r->matched ? "true" : "false", r->confidence, (long long)r->decision->priority,
                           (long long)r->decision->tier);
            if (r->decision->rules)
                trace_rule(out, r->decision->rules, &rc);
            else
                vsr_buf_append_cstr(out, "null");
            vsr_buf_append_cstr(out, "}");
        }
        vsr_buf_append_cstr(out, "]");
    }
    vsr_buf_append_cstr(out, "}");
    vsr_pool_free(&pool);
    return 200;
}
