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

    vsr_buf_t raw, out;
    vsr_buf_init(&raw, 0);
    vsr_buf_init(&out, 0);
    if (sp->insert && has_system) {
        vsr_buf_append_slice(&raw, prompt);
        vsr_buf_append(&raw, "\n\n", 2);
        vsr_buf_append_slice(&raw, first->text);
        prompt = vsr_buf_slice(&raw);
    }

    int rc;
    if (has_system && first->content_tok != 0) {
        vsr_buf_append_json_string(&out, prompt);
        rc = vsr_json_edit_replace(ctx->edits, ctx->json, first->content_tok, vsr__plugin_keep(ctx, &out));
    } else if (has_system) {
        vsr_buf_append_cstr(&out, "\"content\":");
        vsr_buf_append_json_string(&out, prompt);
        rc = vsr_json_edit_insert_member(ctx->edits, ctx->json, first->tok, vsr__plugin_keep(ctx, &out));
    } else {
        vsr_buf_append_cstr(&out, "{\"role\":\"system\",\"content\":");
        vsr_buf_append_json_string(&out, prompt);
        vsr_buf_append(&out, "}", 1);
        rc = vsr_json_edit_insert_element(ctx->edits, ctx->json, chat->messages_tok, vsr__plugin_keep(ctx, &out));
    }
    vsr_buf_free(&raw);
    vsr_buf_free(&out);
    if (rc != VSR_OK)
        return conflict(why);
    ctx->injected_system_prompt = 1;
    return VSR_OK;
}
