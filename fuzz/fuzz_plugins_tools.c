/*
 * fuzz_plugins_tools.c — the tools and context_compression plugins over
 * arbitrary chat bodies.
 *
 * Input: a JSON body, optionally followed by a NUL byte and settings bytes
 * (mode, lists, budget, targets, failure mode, plugin order; missing bytes
 * read as 0).  Checks:
 *  - the run returns VSR_OK or VSR_ERR_INVALID with a message, never
 *    anything else;
 *  - on VSR_OK the edited body re-parses as JSON and its chat view builds;
 *  - tools mode none alone: no "tools" member is left, and with
 *    strip_tool_history no role "tool" message either;
 *  - context_compression alone: the estimate of the output is the one the
 *    plugin reports, never above the input's, and with fail_closed (VSR_OK
 *    after a trigger) within the budget.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json/json.h"
#include "plugins/plugins.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                              \
    do {                                                                                         \
        if (!(cond)) {                                                                           \
            fprintf(stderr, "fuzz_plugins_tools: check failed: %s (line %d)\n", #cond, __LINE__); \
            abort();                                                                             \
        }                                                                                        \
    } while (0)

static char *names[] = {"search", "calc", "shell", "weather", ""};

static uint8_t byte_at(const uint8_t *s, size_t n, size_t i)
{
    return i < n ? s[i] : 0;
}

static uint64_t estimate(const vsr_chat_view_t *chat)
{
    uint64_t sum = 0;
    for (size_t i = 0; i < chat->n_messages; i++)
        sum += chat->messages[i].text.len;
    uint64_t b = VSR_MAX(sum, chat->text_bytes);
    return b / 4 + (b % 4 != 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > (1u << 20))
        return 0;
    size_t body_len = size;
    const uint8_t *set = NULL;
    size_t set_len = 0;
    const uint8_t *nul = memchr(data, 0, size);
    if (nul) {
        body_len = (size_t)(nul - data);
        set = nul + 1;
        set_len = size - body_len - 1;
    }
    const char *src = (const char *)data;
    vsr_json_t j;
    vsr_json_limits_t lim = {.max_depth = 64, .max_tokens = 1u << 16};
    if (vsr_json_parse(&j, src, body_len, &lim) != VSR_OK || j.ntoks == 0 || vsr_json_type(&j, 0) != VSR_JSON_OBJECT) {
        vsr_json_free(&j);
        return 0;
    }
    uint32_t dup;
    if (vsr_json_find_duplicate_key(&j, &dup)) { /* refused before routing */
        vsr_json_free(&j);
        return 0;
    }
    vsr_pool_t pool;
    vsr_pool_init(&pool);
    vsr_chat_view_t chat;
    if (vsr_chat_view_build(&j, VSR_API_CHAT, &pool, &chat, NULL) != VSR_OK) {
        vsr_pool_free(&pool);
        vsr_json_free(&j);
        return 0;
    }

    uint8_t b0 = byte_at(set, set_len, 0), b1 = byte_at(set, set_len, 1), b2 = byte_at(set, set_len, 2);
    uint8_t b3 = byte_at(set, set_len, 3), b4 = byte_at(set, set_len, 4);
    vsr_plugin_conf_t p[3];
    memset(p, 0, sizeof(p));
    vsr_plugin_conf_t *tools = &p[0], *cc = &p[1], *sp = &p[2];
    tools->kind = VSR_PLUGIN_TOOLS;
    tools->enabled = tools->u.tools.enabled = 1;
    tools->u.tools.mode = b0 % 3;
    tools->u.tools.strip_tool_history = (b0 >> 2) & 1;
    tools->u.tools.allow_tools = (vsr_strlist_conf_t){names, b1 % 6};
    tools->u.tools.block_tools = (vsr_strlist_conf_t){names + (b1 >> 4) % 5, (b1 >> 3) & 1};
    cc->kind = VSR_PLUGIN_CONTEXT_COMPRESSION;
    cc->enabled = cc->u.context_compression.enabled = 1;
    cc->u.context_compression.trigger_tokens = 1 + b2 % 64;
    cc->u.context_compression.target_tokens = 1 + (b3 % cc->u.context_compression.trigger_tokens);
    cc->u.context_compression.reserve_output_tokens = (b3 >> 6) % cc->u.context_compression.target_tokens;
    cc->u.context_compression.fail_closed = b4 & 1;
    cc->u.context_compression.n_targets = 1 + ((b4 >> 1) & 1);
    cc->u.context_compression.targets[0] = (b4 >> 2) & 1;
    cc->u.context_compression.targets[1] = !cc->u.context_compression.targets[0];
    sp->kind = VSR_PLUGIN_SYSTEM_PROMPT;
    sp->enabled = sp->u.system_prompt.enabled = 1;
    sp->u.system_prompt.system_prompt = "Be brief.";
    sp->u.system_prompt.insert = (b4 >> 3) & 1;

    /* which plugins, in which order */
    int which = (b4 >> 4) & 3;
    vsr_plugin_conf_t list[3];
    size_t n = 0;
    switch (which) {
    case 0: list[n++] = *tools; break;
    case 1: list[n++] = *cc; break;
    case 2: list[n++] = *tools; list[n++] = *cc; break;
    default: list[n++] = *sp; list[n++] = *tools; list[n++] = *cc; break;
    }
    vsr_decision_conf_t d;
    memset(&d, 0, sizeof(d));
    d.name = "fuzz";
    d.plugins = list;
    d.n_plugins = n;

    vsr_json_edits_t ed;
    vsr_json_edits_init(&ed);
    vsr_plugin_ctx_t ctx;
    vsr_plugin_ctx_init(&ctx, &j, &chat, &ed, &pool);
    const char *why = NULL;
    int rc = vsr_plugins_run_request(&d, &ctx, &why);
    CHECK(rc == VSR_OK || rc == VSR_ERR_INVALID);
    if (rc != VSR_OK) {
        CHECK(why != NULL);
        goto out;
    }
    size_t np;
    uint64_t total;
    vsr_slice_t *pieces = vsr_json_edits_apply(&ed, src, body_len, &pool, &np, &total);
    char *out = vsr_pool_alloc(&pool, total + 1);
    size_t w = 0;
    for (size_t i = 0; i < np; i++) {
        memcpy(out + w, pieces[i].p, pieces[i].len);
        w += pieces[i].len;
    }
    CHECK(w == total);
    vsr_json_t oj;
    CHECK(vsr_json_parse(&oj, out, w, NULL) == VSR_OK);
    vsr_chat_view_t ochat;
    CHECK(vsr_chat_view_build(&oj, VSR_API_CHAT, &pool, &ochat, NULL) == VSR_OK);
    uint32_t t;
    if (which == 0 && tools->u.tools.mode == VSR_TOOLS_NONE) {
        CHECK(vsr_json_object_get(&oj, 0, "tools", &t) != VSR_OK);
        if (tools->u.tools.strip_tool_history && ochat.messages_tok)
            for (size_t i = 0; i < ochat.n_messages; i++)
                CHECK(ochat.messages[i].role != VSR_ROLE_TOOL);
    }
    /* the estimate counts the bytes the plugin kept; invalid UTF-8 in them is
     * written as three-byte U+FFFD, so the count is the output's only for
     * valid text */
    if (which == 1 && ctx.compression_applied && vsr_utf8_valid((vsr_slice_t){src, body_len})) {
        uint64_t after = estimate(&ochat);
        CHECK(after == ctx.compression_tokens_after);
        CHECK(after <= ctx.compression_tokens_before);
        const vsr_plugin_context_compression_conf_t *c = &cc->u.context_compression;
        if (c->fail_closed && ctx.compression_tokens_before > c->trigger_tokens)
            CHECK(after <= c->target_tokens - c->reserve_output_tokens);
    }
    vsr_json_free(&oj);
out:
    vsr_json_edits_free(&ed);
    vsr_pool_free(&pool);
    vsr_json_free(&j);
    return 0;
}
