/*
 * rag.c — the rag plugin's request side (ref §2.2, docs/plugins.md "rag"):
 * injects the context the session retrieved (vsr_plugin_ctx_t.rag), or
 * answers 503 when retrieval failed and on_failure is block.
 *
 * Injection (chat requests; the context cut to max_context_length runes
 * plus "..."):
 *  - tool_role (default): right after the LAST user message, an assistant
 *    message calling the tool "rag_retrieval" and the tool message
 *    {"role":"tool","tool_call_id":"rag_<request-id>_<ns>","content":CTX}
 *    answering it.  The reference inserts the tool message alone, which
 *    providers that check tool results against tool calls (OpenAI) refuse.
 *  - system_prompt: "Context from knowledge base:\n\n<ctx>\n\n" before the
 *    text of the first message when it is a system message (its text parts
 *    joined, as system_prompt does), else a new system message with that
 *    text first.
 * What was injected is ctx->rag_context: the hallucination check's
 * grounding.  A body that cannot take the edit (an earlier plugin rewrote
 * the same bytes) goes on without context, as the reference goes on when
 * its injection fails.
 */
#include <time.h>

#include "plugins/plugins_int.h"

#define RAG_PREFIX "Context from knowledge base:\n\n"

/* s cut to max runes, "..." added when cut. */
static vsr_slice_t cut_runes(vsr_plugin_ctx_t *ctx, vsr_slice_t s, uint64_t max)
{
    uint64_t runes = 0;
    size_t i = 0;
    while (i < s.len) {
        if (runes == max) {
            char *p = vsr_pool_alloc(ctx->pool, i + 3);
            memcpy(p, s.p, i);
            memcpy(p + i, "...", 3);
            return vsr_slice(p, i + 3);
        }
        i++;
        while (i < s.len && ((unsigned char)s.p[i] & 0xC0) == 0x80)
            i++; /* continuation bytes belong to the rune */
        runes++;
    }
    return s;
}

static vsr_slice_t json_str(vsr_plugin_ctx_t *ctx, vsr_slice_t s)
{
    size_t n = vsr_json_string_size(s);
    char *p = vsr_pool_alloc(ctx->pool, n);
    vsr_json_string_put(p, s);
    return vsr_slice(p, n);
}

static int inject_tool_role(vsr_plugin_ctx_t *ctx, vsr_slice_t text)
{
    const vsr_chat_view_t *chat = ctx->chat;
    if (chat->last_user < 0)
        return VSR_ERR_INVALID; /* no user message found */
    const vsr_chat_message_t *u = &chat->messages[chat->last_user];
    if (u->tok == 0)
        return VSR_ERR_INVALID;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    unsigned long long ns = (unsigned long long)ts.tv_sec * 1000000000ull + (unsigned long long)ts.tv_nsec;
    vsr_buf_t id;
    vsr_buf_init(&id, 0);
    vsr_buf_append_cstr(&id, "rag_");
    if (ctx->request_id.len)
        vsr_buf_printf(&id, "%.*s_", (int)(ctx->request_id.len < 128 ? ctx->request_id.len : 128), ctx->request_id.p);
    vsr_buf_printf(&id, "%llu", ns);
    vsr_slice_t idj = json_str(ctx, vsr_buf_slice(&id));
    vsr_buf_free(&id);
    vsr_slice_t cj = json_str(ctx, text);
    vsr_buf_t b;
    vsr_buf_init(&b, 0);
    vsr_buf_append_cstr(&b, ",{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":");
    vsr_buf_append_slice(&b, idj);
    vsr_buf_append_cstr(&b, ",\"type\":\"function\",\"function\":{\"name\":\"rag_retrieval\",\"arguments\":\"{}\"}}]},"
                            "{\"role\":\"tool\",\"tool_call_id\":");
    vsr_buf_append_slice(&b, idj);
    vsr_buf_append_cstr(&b, ",\"content\":");
    vsr_buf_append_slice(&b, cj);
    vsr_buf_append_cstr(&b, "}");
    vsr_slice_t ins = vsr__plugin_keep(ctx, &b);
    vsr_buf_free(&b);
    uint32_t at = ctx->json->toks[u->tok].end;
    return vsr_json_edits_add(ctx->edits, at, at, ins);
}

static int inject_system_prompt(vsr_plugin_ctx_t *ctx, vsr_slice_t text)
{
    const vsr_chat_view_t *chat = ctx->chat;
    const vsr_chat_message_t *first = chat->n_messages > 0 ? &chat->messages[0] : NULL;
    int has_system = first != NULL && first->role == VSR_ROLE_SYSTEM && first->tok != 0;
    size_t pre = strlen(RAG_PREFIX);
    size_t old = has_system ? first->text.len : 0;
    size_t n = pre + text.len + 2 + old;
    char *raw = vsr_pool_alloc(ctx->pool, n);
    memcpy(raw, RAG_PREFIX, pre);
    memcpy(raw + pre, text.p, text.len);
    memcpy(raw + pre + text.len, "\n\n", 2);
    if (old)
        memcpy(raw + pre + text.len + 2, first->text.p, old);
    vsr_slice_t content = json_str(ctx, vsr_slice(raw, n));
    if (has_system && first->content_tok != 0)
        return vsr_json_edit_replace(ctx->edits, ctx->json, first->content_tok, content);
    vsr_buf_t b;
    vsr_buf_init(&b, 0);
    if (has_system) {
        vsr_buf_append_cstr(&b, "\"content\":");
        vsr_buf_append_slice(&b, content);
        vsr_slice_t m = vsr__plugin_keep(ctx, &b);
        vsr_buf_free(&b);
        return vsr_json_edit_insert_member(ctx->edits, ctx->json, first->tok, m);
    }
    vsr_buf_append_cstr(&b, "{\"role\":\"system\",\"content\":");
    vsr_buf_append_slice(&b, content);
    vsr_buf_append_cstr(&b, "}");
    vsr_slice_t m = vsr__plugin_keep(ctx, &b);
    vsr_buf_free(&b);
    return vsr_json_edit_insert_element(ctx->edits, ctx->json, chat->messages_tok, m);
}

int vsr__plugin_rag_request(const vsr_plugin_conf_t *conf, vsr_plugin_ctx_t *ctx, const char **why)
{
    VSR_UNUSED(why);
    const vsr_plugin_rag_conf_t *rc = conf->u.rag;
    const vsr_rag_result_t *res = ctx->rag;
    if (rc == NULL || !rc->enabled || res == NULL || res->status == VSR_RAG_NONE || ctx->rag_outcome)
        return VSR_OK; /* not retrieved (no user text, a Looper call), or a first rag plugin ran already */
    if (res->status == VSR_RAG_FAILED) {
        if (rc->on_failure == VSR_RAG_BLOCK) {
            vsr_buf_t msg, body;
            vsr_buf_init(&msg, 0);
            vsr_buf_init(&body, 0);
            vsr_buf_append_cstr(&msg, "RAG retrieval failed: ");
            vsr_buf_append_slice(&msg, res->error);
            vsr_json_error_body(&body, vsr_buf_slice(&msg), "service_unavailable", NULL);
            ctx->imm_status = 503;
            ctx->imm_content_type = VSR_SLICE_LIT("application/json");
            ctx->imm_body = vsr__plugin_keep(ctx, &body);
            vsr_buf_free(&msg);
            vsr_buf_free(&body);
            ctx->rag_outcome = "blocked";
            return VSR_OK;
        }
        if (rc->on_failure == VSR_RAG_WARN)
            vsr_log_warn("plugins", "rag: retrieval failed, the request goes on without context: %.*s",
                         (int)res->error.len, res->error.p ? res->error.p : "");
        ctx->rag_outcome = "failed";
        return VSR_OK;
    }
    const vsr_chat_view_t *chat = ctx->chat;
    if (res->context.len == 0 || chat == NULL || chat->api != VSR_API_CHAT || chat->messages_tok == 0) {
        ctx->rag_outcome = "empty";
        return VSR_OK;
    }
    vsr_slice_t text = cut_runes(ctx, res->context, rc->max_context_length);
    int rc2 = rc->injection_mode == VSR_RAG_SYSTEM_PROMPT ? inject_system_prompt(ctx, text)
                                                          : inject_tool_role(ctx, text);
    if (rc2 != VSR_OK) {
        vsr_log_debug("plugins", "rag: the context could not be injected; the request goes on without it");
        ctx->rag_outcome = "failed";
        return VSR_OK;
    }
    ctx->rag_context = text;
    ctx->rag_outcome = res->cached ? "cached" : "injected";
    return VSR_OK;
}
