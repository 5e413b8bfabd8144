/*
 * request_params.c — policing the top-level parameters of a request (ref §2).
 *
 * One pass over the top-level members, in document order:
 *  - "model" and "messages" are never touched (even when blocked);
 *  - blocked_params: removed;
 *  - strip_unknown (chat requests only, as its allow-list is the chat one):
 *    every key not in the OpenAI chat-completions parameters below nor in
 *    allowed_params is removed;
 *  - max_tokens / max_completion_tokens above max_tokens_limit, n above
 *    max_n: the number is replaced by the limit (non-numbers are left for
 *    the upstream to reject);
 * then default_max_tokens (chat only): when neither max_tokens nor
 * max_completion_tokens remains, "max_tokens":<default> is inserted as the
 * first member (capped by max_tokens_limit when both are set).
 *
 * Duplicate keys are each handled.  A member an earlier plugin removed is
 * skipped (it is gone); one whose value an earlier plugin rewrote cannot be
 * clamped or removed here: VSR_ERR_INVALID, never a corrupt body.
 */
#include "plugins/plugins_int.h"

#include <stdio.h>

/* The OpenAI chat-completions request parameters. */
static const char *const chat_params[] = {
    "model", "messages", "temperature", "top_p", "n", "stream", "stream_options", "stop", "max_tokens",
    "max_completion_tokens", "presence_penalty", "frequency_penalty", "logit_bias", "logprobs", "top_logprobs",
    "user", "response_format", "seed", "tools", "tool_choice", "parallel_tool_calls", "reasoning_effort",
    "metadata", "store", "modalities", "audio", "prediction", "service_tier", "web_search_options", "functions",
    "function_call",
};

static int in_conf_list(vsr_slice_t key, const vsr_strlist_conf_t *l)
{
    for (size_t i = 0; i < l->n; i++)
        if (l->items[i] && vsr_slice_eq_cstr(key, l->items[i]))
            return 1;
    return 0;
}

static int is_chat_param(vsr_slice_t key)
{
    for (size_t i = 0; i < VSR_ARRAY_LEN(chat_params); i++)
        if (vsr_slice_eq_cstr(key, chat_params[i]))
            return 1;
    return 0;
}

/* Whether an earlier plugin already inserted a max_tokens member. */
static int max_tokens_inserted(const vsr_plugin_ctx_t *ctx)
{
    static const char prefix[] = "\"max_tokens\":";
    uint32_t at = ctx->json->toks[0].start + 1;
    for (size_t i = 0; i < ctx->edits->n; i++) {
        const vsr_json_edit_t *x = &ctx->edits->e[i];
        if (x->start == at && x->end == at && x->text.len >= sizeof(prefix) - 1 &&
            memcmp(x->text.p, prefix, sizeof(prefix) - 1) == 0)
            return 1;
    }
    return 0;
}

static vsr_slice_t print_u64(vsr_pool_t *pool, const char *fmt, uint64_t v)
{
    char *s = vsr_pool_alloc(pool, 48);
    int n = snprintf(s, 48, fmt, (unsigned long long)v);
    return vsr_slice(s, (size_t)n);
}

int vsr__plugin_request_params_request(const vsr_plugin_conf_t *conf, vsr_plugin_ctx_t *ctx, const char **why)
{
    const vsr_plugin_request_params_conf_t *rp = &conf->u.request_params;
    const vsr_json_t *j = ctx->json;
    if (j == NULL || j->ntoks == 0 || vsr_json_type(j, 0) != VSR_JSON_OBJECT)
        return VSR_OK;
    int chat = ctx->chat != NULL && ctx->chat->api == VSR_API_CHAT;
    uint32_t n = j->toks[0].count;
    uint32_t *rm = n ? vsr_pool_alloc(ctx->pool, (size_t)n * sizeof(*rm)) : NULL;
    size_t nrm = 0;
    int has_max = 0;

    uint32_t k = 1;
    for (uint32_t i = 0; i < n; i++, k = j->toks[k + 1].next) {
        uint32_t v = k + 1;
        vsr_slice_t key;
        vsr_json_string(j, k, ctx->pool, &key);
        /* a key is only ever covered by a removal */
        if (vsr_json_edits_overlaps(ctx->edits, j->toks[k].start, j->toks[k].end))
            continue;
        if (vsr_slice_eq_cstr(key, "model") || vsr_slice_eq_cstr(key, "messages"))
            continue;
        if (in_conf_list(key, &rp->blocked_params) ||
            (rp->strip_unknown && chat && !is_chat_param(key) && !in_conf_list(key, &rp->allowed_params))) {
            rm[nrm++] = k;
            continue;
        }
        int is_max = vsr_slice_eq_cstr(key, "max_tokens") || vsr_slice_eq_cstr(key, "max_completion_tokens");
        has_max |= is_max;
        uint64_t limit = 0;
        int bounded = 0;
        if (is_max && rp->has_max_tokens_limit) {
            limit = rp->max_tokens_limit;
            bounded = 1;
        } else if (vsr_slice_eq_cstr(key, "n") && rp->has_max_n) {
            limit = rp->max_n;
            bounded = 1;
        }
        double d;
        if (bounded && vsr_json_number(j, v, &d) == VSR_OK && d > (double)limit) {
            if (vsr_json_edit_replace(ctx->edits, j, v, print_u64(ctx->pool, "%llu", limit)) != VSR_OK) {
                *why = "request_params: a parameter to clamp was already rewritten by an earlier plugin";
                return VSR_ERR_INVALID;
            }
        }
    }
    if (nrm && vsr_json_edit_remove_members(ctx->edits, j, 0, rm, nrm) != VSR_OK) {
        *why = "request_params: a parameter to remove was already rewritten by an earlier plugin";
        return VSR_ERR_INVALID;
    }
    if (chat && rp->has_default_max_tokens && !has_max && !max_tokens_inserted(ctx)) {
        uint64_t dflt = rp->default_max_tokens;
        if (rp->has_max_tokens_limit && dflt > rp->max_tokens_limit)
            dflt = rp->max_tokens_limit;
        if (vsr_json_edit_insert_member(ctx->edits, j, 0, print_u64(ctx->pool, "\"max_tokens\":%llu", dflt)) !=
            VSR_OK) {
            *why = "request_params: cannot insert max_tokens";
            return VSR_ERR_INVALID;
        }
    }
    return VSR_OK;
}
