/*
 * system_prompt.c — injects a decision's system prompt into a chat request
 * (ref §2), editing only the bytes needed.
 *
 * As the reference router does, only the FIRST message counts as "the
 * system message", and only when its role is exactly "system":
 *  - mode replace (default): its content becomes the prompt; without one, a
 *    {"role":"system","content":prompt} element is inserted first;
 *  - mode insert: its content becomes prompt + "\n\n" + its old text (the
 *    text parts of a content array joined with "\n", see chatview.c);
 *    without one, the same new first element as in replace mode.
 * An array content is replaced by a plain string in both modes (the
 * reference does the same; image parts in a system message are dropped).
 * A system message without "content" gets the member inserted.
 *
 * Chat requests only (the view's messages_tok); completions and responses
 * bodies are left alone.  When several system_prompt plugins are enabled in
 * one decision, the first one wins (the reference reads only the first).
 */
#include "plugins/plugins_int.h"

static int conflict(const char **why)
{
    *why = "system_prompt: the system message was already edited by an earlier plugin";
    return VSR_ERR_INVALID;
}

/* pre, then text as a JSON string literal, then post: in the request's pool */
static vsr_slice_t literal(vsr_plugin_ctx_t *ctx, const char *pre, vsr_slice_t text, const char *post)
{
    size_t a = strlen(pre), b = vsr_json_string_size(text), c = strlen(post);
    char *p = vsr_pool_alloc(ctx->pool, a + b + c);
    memcpy(p, pre, a);
    vsr_json_string_put(p + a, text);
    memcpy(p + a + b, post, c);
    return vsr_slice(p, a + b + c);
}

int vsr__plugin_system_prompt_request(const vsr_plugin_conf_t *conf, vsr_plugin_ctx_t *ctx, const char **why)
{
    const vsr_plugin_system_prompt_conf_t *sp = &conf->u.system_prompt;
    const vsr_chat_view_t *chat = ctx->chat;
    if (!sp->enabled || sp->system_prompt == NULL || sp->system_prompt[0] == '\0')
        return VSR_OK;
    if (chat == NULL || chat->api != VSR_API_CHAT || chat->messages_tok == 0 || ctx->injected_system_prompt)
        return VSR_OK;

    vsr_slice_t prompt = vsr_slice_cstr(sp->system_prompt);
    const vsr_chat_message_t *first = chat->n_messages > 0 ? &chat->messages[0] : NULL;
    int has_system = first != NULL && first->role == VSR_ROLE_SYSTEM;

    if (sp->insert && has_system) {
        size_t n = prompt.len + 2 + first->text.len;
        char *raw = vsr_pool_alloc(ctx->pool, n);
        memcpy(raw, prompt.p, prompt.len);
        memcpy(raw + prompt.len, "\n\n", 2);
        if (first->text.len)
            memcpy(raw + prompt.len + 2, first->text.p, first->text.len);
        prompt = vsr_slice(raw, n);
    }

    int rc;
    if (has_system && first->content_tok != 0)
        rc = vsr_json_edit_replace(ctx->edits, ctx->json, first->content_tok, literal(ctx, "", prompt, ""));
    else if (has_system)
        rc = vsr_json_edit_insert_member(ctx->edits, ctx->json, first->tok, literal(ctx, "\"content\":", prompt, ""));
    else
        rc = vsr_json_edit_insert_element(ctx->edits, ctx->json, chat->messages_tok,
                                          literal(ctx, "{\"role\":\"system\",\"content\":", prompt, "}"));
    if (rc != VSR_OK)
        return conflict(why);
    ctx->injected_system_prompt = 1;
    return VSR_OK;
}
