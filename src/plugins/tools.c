/*
 * tools.c — what a chat request may offer the model as tools (ref §2).
 *
 * Chat requests only ("tools" of /v1/chat/completions); other APIs are left
 * alone.  A tool's name is tools[i].function.name, or tools[i].name when it
 * has no function object; a tool without a readable name matches no list.
 *
 *  - mode passthrough: nothing changes (the counts are still recorded).
 *  - mode filtered (default): a tool stays when allow_tools is empty or
 *    names it, and block_tools does not name it (names compare exactly).
 *    When no tool stays, "tools", "tool_choice" and "parallel_tool_calls"
 *    go (an empty tools array is refused by OpenAI-style backends).  When
 *    some stay and tool_choice is an object naming a removed function
 *    ({"type":"function","function":{"name":...}}), tool_choice goes.
 *    With semantic_selection, the tools left are then cut to the top_k most
 *    similar to the routing text at or above similarity_threshold (the
 *    similarities come in ctx->tool_scores; tools past the scored ones are
 *    kept).  Without similarities (the runtime failed): unchanged, or with
 *    fallback_to_empty every tool goes.
 *  - mode none: "tools", "tool_choice", "parallel_tool_calls" and the legacy
 *    "functions" / "function_call" go.  With strip_tool_history the history
 *    goes too, so a backend without tool support accepts it: messages with
 *    role "tool" (or the legacy "function") are removed; an assistant
 *    message with "tool_calls" / "function_call" loses those members when it
 *    has content (a non-empty string or content array), and is removed when
 *    it has none (null, "" or absent): the turn that only asked for a tool
 *    has nothing left to say.  The messages array is never emptied: a
 *    request of tool messages only is refused (VSR_ERR_INVALID).
 *
 * Edits that collide with an earlier plugin's (a member it already rewrote)
 * give VSR_ERR_INVALID; members an earlier plugin removed are skipped.
 * Evidence: ctx->tools_before / tools_after (entries of "tools").
 */
#include "plugins/plugins_int.h"

static int in_list(vsr_slice_t name, const vsr_strlist_conf_t *l)
{
    for (size_t i = 0; i < l->n; i++)
        if (l->items[i] && vsr_slice_eq_cstr(name, l->items[i]))
            return 1;
    return 0;
}

/* The string at obj.key, unescaped; 0 when absent or not a string. */
static int get_string(vsr_plugin_ctx_t *ctx, uint32_t obj, const char *key, vsr_slice_t *out)
{
    uint32_t v;
    if (vsr_json_type(ctx->json, obj) != VSR_JSON_OBJECT || vsr_json_object_get(ctx->json, obj, key, &v) != VSR_OK ||
        vsr_json_type(ctx->json, v) != VSR_JSON_STRING)
        return 0;
    return vsr_json_string(ctx->json, v, ctx->pool, out) == VSR_OK;
}

/* A tool's (or a tool_choice's) function name. */
static int tool_name(vsr_plugin_ctx_t *ctx, uint32_t t, vsr_slice_t *name)
{
    const vsr_json_t *j = ctx->json;
    uint32_t fn;
    if (vsr_json_type(j, t) != VSR_JSON_OBJECT)
        return 0;
    if (vsr_json_object_get(j, t, "function", &fn) == VSR_OK && vsr_json_type(j, fn) == VSR_JSON_OBJECT)
        return get_string(ctx, fn, "name", name);
    return get_string(ctx, t, "name", name);
}

/* Removes the members of object obj named in names[] (those an earlier
 * plugin removed are skipped).  VSR_OK or VSR_ERR_INVALID. */
static int remove_keys(vsr_plugin_ctx_t *ctx, uint32_t obj, const char *const *names, size_t n_names)
{
    const vsr_json_t *j = ctx->json;
    uint32_t n = j->toks[obj].count;
    uint32_t *rm = n ? vsr_pool_alloc(ctx->pool, (size_t)n * sizeof(*rm)) : NULL;
    size_t nrm = 0;
    uint32_t k = obj + 1;
    for (uint32_t i = 0; i < n; i++, k = j->toks[k + 1].next) {
        if (vsr_json_edits_overlaps(ctx->edits, j->toks[k].start, j->toks[k].end))
            continue;
        for (size_t x = 0; x < n_names; x++) {
            if (vsr_json_string_eq(j, k, vsr_slice_cstr(names[x]))) {
                rm[nrm++] = k;
                break;
            }
        }
    }
    return nrm ? vsr_json_edit_remove_members(ctx->edits, j, obj, rm, nrm) : VSR_OK;
}

/* remove_keys for one message object, in O(members + log edits): the
 * removal runs are computed here in the canonical form of edits.c (a run
 * followed by a kept member spans from its first key to that member's key;
 * a run reaching the end spans from the end of the kept value before it), so
 * that later removals in the same object still merge with them.  A message
 * whose members another edit already touches goes through remove_keys (the
 * general path, linear in all edits: calling it per message of a long
 * history would be quadratic). */
static int remove_calls(vsr_plugin_ctx_t *ctx, uint32_t obj, const char *const *names, size_t n_names)
{
    const vsr_json_t *j = ctx->json;
    uint32_t n = j->toks[obj].count;
    if (n == 0)
        return VSR_OK;
    uint32_t *key = vsr_pool_alloc(ctx->pool, (size_t)n * sizeof(*key));
    uint8_t *rm = vsr_pool_alloc(ctx->pool, n);
    uint32_t k = obj + 1, nrm = 0;
    for (uint32_t i = 0; i < n; i++, k = j->toks[k + 1].next) {
        key[i] = k;
        rm[i] = 0;
        for (size_t x = 0; x < n_names && !rm[i]; x++)
            rm[i] = (uint8_t)vsr_json_string_eq(j, k, vsr_slice_cstr(names[x]));
        nrm += rm[i];
    }
    if (nrm == 0)
        return VSR_OK;
    if (nrm == n || vsr_json_edits_overlaps(ctx->edits, j->toks[obj].start + 1, j->toks[obj].end))
        return remove_keys(ctx, obj, names, n_names);
    for (uint32_t a = 0; a < n;) {
        if (!rm[a]) {
            a++;
            continue;
        }
        uint32_t b = a;
        while (b + 1 < n && rm[b + 1])
            b++;
        uint32_t s, e;
        if (b + 1 < n) {
            s = j->toks[key[a]].start;
            e = j->toks[key[b + 1]].start;
        } else {
            s = j->toks[key[a - 1] + 1].end; /* a > 0: not every member goes */
            e = j->toks[key[b] + 1].end;
        }
        int rc = vsr_json_edits_add(ctx->edits, s, e, VSR_SLICE_NULL);
        VSR_BUG_ON(rc != VSR_OK); /* nothing inside the object was edited */
        a = b + 1;
    }
    return VSR_OK;
}

static const char *const all_tool_keys[] = {"tools", "tool_choice", "parallel_tool_calls", "functions",
                                            "function_call"};

static int has_content(const vsr_json_t *j, uint32_t content_tok)
{
    if (content_tok == 0)
        return 0;
    switch (vsr_json_type(j, content_tok)) {
    case VSR_JSON_STRING: return j->toks[content_tok].end - j->toks[content_tok].start > 2;
    case VSR_JSON_ARRAY: return j->toks[content_tok].count > 0;
    default: return 0;
    }
}

static int strip_history(vsr_plugin_ctx_t *ctx, const char **why)
{
    const vsr_json_t *j = ctx->json;
    const vsr_chat_view_t *chat = ctx->chat;
    uint32_t arr = chat->messages_tok;
    uint32_t n = j->toks[arr].count;
    if (n == 0 || n != chat->n_messages)
        return VSR_OK;
    uint8_t *drop = vsr_pool_alloc(ctx->pool, n);
    memset(drop, 0, n);
    static const char *const call_keys[] = {"tool_calls", "function_call"};
    int any = 0;
    for (uint32_t i = 0; i < n; i++) {
        const vsr_chat_message_t *m = &chat->messages[i];
        if (m->tok == 0 || vsr_json_type(j, m->tok) != VSR_JSON_OBJECT)
            continue;
        vsr_slice_t role;
        int legacy_fn = m->role == VSR_ROLE_OTHER && get_string(ctx, m->tok, "role", &role) &&
                        vsr_slice_eq_cstr(role, "function");
        if (m->role == VSR_ROLE_TOOL || legacy_fn) {
            drop[i] = any = 1;
            continue;
        }
        if (m->role != VSR_ROLE_ASSISTANT)
            continue;
        uint32_t v;
        int calls = vsr_json_object_get(j, m->tok, "tool_calls", &v) == VSR_OK ||
                    vsr_json_object_get(j, m->tok, "function_call", &v) == VSR_OK;
        if (!calls)
            continue;
        if (!has_content(j, m->content_tok)) {
            drop[i] = any = 1;
        } else if (remove_calls(ctx, m->tok, call_keys, VSR_ARRAY_LEN(call_keys)) != VSR_OK) {
            *why = "tools: an assistant message's tool calls were already rewritten by an earlier plugin";
            return VSR_ERR_INVALID;
        }
    }
    if (!any)
        return VSR_OK;
    uint32_t left = 0;
    for (uint32_t i = 0; i < n; i++)
        left += !drop[i];
    if (left == 0) {
        *why = "tools: strip_tool_history would leave no messages";
        return VSR_ERR_INVALID;
    }
    if (vsr__plugin_remove_elements(ctx, arr, drop) != VSR_OK) {
        *why = "tools: a tool message to remove was already edited by an earlier plugin";
        return VSR_ERR_INVALID;
    }
    return VSR_OK;
}

/* Applies drop[] to the n elements of array `tools` (names[i]: element i's
 * name or NULL): the kept count goes to tools_after; no tool kept removes
 * "tools", "tool_choice" and "parallel_tool_calls" (an empty tools array is
 * refused by OpenAI-style backends); a tool_choice naming a removed function
 * goes. */
int vsr__tools_apply_drop(vsr_plugin_ctx_t *ctx, uint32_t tools, const uint8_t *drop, const vsr_slice_t *names,
                          const char **why)
{
    const vsr_json_t *j = ctx->json;
    uint32_t n = j->toks[tools].count, kept = 0;
    for (uint32_t i = 0; i < n; i++)
        kept += !drop[i];
    ctx->tools_after = kept;
    if (kept == n)
        return VSR_OK;
    if (kept == 0) {
        static const char *const keys[] = {"tools", "tool_choice", "parallel_tool_calls"};
        if (remove_keys(ctx, 0, keys, VSR_ARRAY_LEN(keys)) != VSR_OK)
            goto conflict;
        return VSR_OK;
    }
    if (vsr__plugin_remove_elements(ctx, tools, drop) != VSR_OK)
        goto conflict;
    uint32_t choice;
    vsr_slice_t want;
    if (vsr_json_object_get(j, 0, "tool_choice", &choice) == VSR_OK && tool_name(ctx, choice, &want)) {
        int found = 0;
        for (uint32_t i = 0; i < n && !found; i++)
            found = !drop[i] && names[i].p != NULL && vsr_slice_eq(names[i], want);
        static const char *const keys[] = {"tool_choice"};
        if (!found && remove_keys(ctx, 0, keys, 1) != VSR_OK)
            goto conflict;
    }
    return VSR_OK;
conflict:
    *why = "tools: the tools were already rewritten by an earlier plugin";
    return VSR_ERR_INVALID;
}

/* The names of the n elements of `tools` (NULL slice: none readable). */
vsr_slice_t *vsr__tools_names(vsr_plugin_ctx_t *ctx, uint32_t tools, uint32_t n)
{
    const vsr_json_t *j = ctx->json;
    vsr_slice_t *names = vsr_pool_alloc(ctx->pool, (n ? n : 1) * sizeof(*names));
    uint32_t t = tools + 1;
    for (uint32_t i = 0; i < n; i++, t = j->toks[t].next)
        if (!tool_name(ctx, t, &names[i]))
            names[i] = VSR_SLICE_NULL;
    return names;
}

int vsr__tools_allowed(const vsr_plugin_tools_conf_t *tc, vsr_slice_t name)
{
    int named = name.p != NULL;
    return (tc->allow_tools.n == 0 || (named && in_list(name, &tc->allow_tools))) &&
           !(named && in_list(name, &tc->block_tools));
}

static int score_cmp_desc(double a, double b)
{
    /* NAN (no text) sorts last */
    if (a != a)
        return b != b ? 0 : 1;
    if (b != b)
        return -1;
    return a > b ? -1 : a < b;
}

static int header_safe(vsr_slice_t n)
{
    if (n.len == 0 || n.len > 64)
        return 0;
    for (size_t i = 0; i < n.len; i++) {
        unsigned char c = (unsigned char)n.p[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-'))
            return 0;
    }
    return 1;
}

/* Appends a name to ctx->tools_selected (bounded; unsafe names left out). */
void vsr__tools_note_selected(vsr_plugin_ctx_t *ctx, vsr_slice_t name)
{
    if (!header_safe(name) || ctx->tools_selected.len + 1 + name.len > 1024)
        return;
    size_t len = ctx->tools_selected.len;
    char *p = vsr_pool_alloc(ctx->pool, len + 1 + name.len);
    if (len)
        memcpy(p, ctx->tools_selected.p, len);
    if (len)
        p[len++] = ',';
    memcpy(p + len, name.p, name.len);
    ctx->tools_selected = vsr_slice(p, len + name.len);
}

void vsr__tools_select(vsr_plugin_ctx_t *ctx, const double *score, size_t n_scored, uint32_t n, uint8_t *drop,
                       const vsr_slice_t *names, uint32_t top_k, double threshold, uint32_t min_keep)
{
    /* the candidates: scored and not dropped, best first (ties: in order) */
    uint32_t *order = vsr_pool_alloc(ctx->pool, (n ? n : 1) * sizeof(*order));
    uint32_t m = 0;
    for (uint32_t i = 0; i < n && i < n_scored; i++) {
        if (drop[i])
            continue;
        uint32_t k = m++;
        while (k > 0 && score_cmp_desc(score[i], score[order[k - 1]]) < 0) {
            order[k] = order[k - 1];
            k--;
        }
        order[k] = i;
    }
    uint32_t kept = 0;
    for (uint32_t r = 0; r < m; r++) {
        uint32_t i = order[r];
        int pass = score[i] == score[i] && score[i] >= threshold;
        int keep = kept < top_k && (pass || kept < min_keep);
        drop[i] = !keep;
        if (keep) {
            kept++;
            vsr__tools_note_selected(ctx, names[i]);
        }
    }
}

static int filter(const vsr_plugin_tools_conf_t *tc, vsr_plugin_ctx_t *ctx, uint32_t tools, const char **why)
{
    const vsr_json_t *j = ctx->json;
    uint32_t n = j->toks[tools].count;
    uint8_t *drop = vsr_pool_alloc(ctx->pool, n ? n : 1);
    vsr_slice_t *names = vsr__tools_names(ctx, tools, n);
    for (uint32_t i = 0; i < n; i++)
        drop[i] = !vsr__tools_allowed(tc, names[i]);
    if (tc->semantic) {
        const vsr_tool_scores_t *sc = ctx->tool_scores;
        if (sc && sc->ok) {
            ctx->tools_selection = VSR_TOOLSEL_SEMANTIC;
            vsr__tools_select(ctx, sc->request, VSR_MIN(sc->n_request, (size_t)n), n, drop, names, tc->top_k,
                              tc->similarity_threshold, 0);
        } else {
            ctx->tools_selection = VSR_TOOLSEL_UNAVAILABLE;
            if (tc->fallback_to_empty)
                memset(drop, 1, n);
        }
    }
    return vsr__tools_apply_drop(ctx, tools, drop, names, why);
}

/* The text compared with the routing text: "name: description". */
vsr_slice_t vsr__tools_text(vsr_plugin_ctx_t *ctx, uint32_t t)
{
    const vsr_json_t *j = ctx->json;
    vsr_slice_t name = VSR_SLICE_NULL, desc = VSR_SLICE_NULL;
    uint32_t fn;
    if (vsr_json_type(j, t) != VSR_JSON_OBJECT)
        return VSR_SLICE_NULL;
    uint32_t holder = t;
    if (vsr_json_object_get(j, t, "function", &fn) == VSR_OK && vsr_json_type(j, fn) == VSR_JSON_OBJECT)
        holder = fn;
    get_string(ctx, holder, "name", &name);
    get_string(ctx, holder, "description", &desc);
    name = vsr_slice_trim(name);
    desc = vsr_slice_trim(desc);
    if (name.len == 0 && desc.len == 0)
        return VSR_SLICE_NULL;
    size_t len = name.len + (name.len && desc.len ? 2 : 0) + desc.len;
    char *p = vsr_pool_alloc(ctx->pool, len ? len : 1);
    size_t w = 0;
    if (name.len)
        memcpy(p, name.p, name.len), w = name.len;
    if (name.len && desc.len)
        memcpy(p + w, ": ", 2), w += 2;
    if (desc.len)
        memcpy(p + w, desc.p, desc.len);
    return vsr_slice(p, len);
}

int vsr__plugin_tools_request(const vsr_plugin_conf_t *conf, vsr_plugin_ctx_t *ctx, const char **why)
{
    const vsr_plugin_tools_conf_t *tc = &conf->u.tools;
    const vsr_json_t *j = ctx->json;
    const vsr_chat_view_t *chat = ctx->chat;
    if (chat == NULL || chat->api != VSR_API_CHAT || j == NULL || j->ntoks == 0 ||
        vsr_json_type(j, 0) != VSR_JSON_OBJECT)
        return VSR_OK;
    uint32_t tools = 0;
    if (vsr_json_object_get(j, 0, "tools", &tools) != VSR_OK)
        tools = 0;
    /* a member an earlier plugin removed is gone */
    if (tools && vsr_json_edits_overlaps(ctx->edits, j->toks[tools].start, j->toks[tools].end))
        tools = 0;
    size_t before = tools && vsr_json_type(j, tools) == VSR_JSON_ARRAY ? j->toks[tools].count : 0;
    if (!ctx->tools_applied)
        ctx->tools_before = before;
    ctx->tools_applied = 1;
    ctx->tools_after = before;

    switch ((vsr_tools_mode_t)tc->mode) {
    case VSR_TOOLS_PASSTHROUGH:
        return VSR_OK;
    case VSR_TOOLS_FILTERED:
        if (before == 0)
            return VSR_OK;
        return filter(tc, ctx, tools, why);
    case VSR_TOOLS_NONE:
        ctx->tools_after = 0;
        if (remove_keys(ctx, 0, all_tool_keys, VSR_ARRAY_LEN(all_tool_keys)) != VSR_OK) {
            *why = "tools: the tools were already rewritten by an earlier plugin";
            return VSR_ERR_INVALID;
        }
        if (tc->strip_tool_history && chat->messages_tok)
            return strip_history(ctx, why);
        return VSR_OK;
    }
    return VSR_OK;
}
