/*
 * tool_selection.c — tools chosen by their similarity to the routing text
 * (ref §2 `tool_selection`), and what the tool plugins of a decision need
 * compared (vsr_plugins_tool_texts).
 *
 * Chat requests only.  The similarities come in ctx->tool_scores (the
 * session gathers them from the runtime before the plugins run); when they
 * could not be had the request's tools are left as they are
 * (tools_selection = unavailable), except that mode filter with
 * fallback_to_empty removes them all.
 *
 *  - mode add: the database's tools (ctx->tools_db) at or above
 *    similarity_threshold, best first, at most top_k, are appended to the
 *    request's "tools" (the member is created when absent).  A tool whose
 *    name the request already has is not added, nor one that an enabled
 *    `tools` plugin of the same decision would refuse (its allow/block
 *    lists; mode none: nothing is added).  The added elements are the
 *    database's `tool` objects as written in the file.
 *  - mode filter: the request's tools below relevance_threshold go, but the
 *    preserve_count best ones stay whatever their similarity; tools past
 *    the VSR_TOOLS_MAX_SCORED scored ones stay.
 */
#include "plugins/plugins_int.h"

static int chat_ok(const vsr_plugin_ctx_t *ctx)
{
    const vsr_json_t *j = ctx->json;
    return ctx->chat && ctx->chat->api == VSR_API_CHAT && j && j->ntoks && vsr_json_type(j, 0) == VSR_JSON_OBJECT;
}

/* The request's "tools" array token, 0 when absent, not an array, or removed by an earlier plugin. */
static uint32_t tools_array(const vsr_plugin_ctx_t *ctx, int *present)
{
    const vsr_json_t *j = ctx->json;
    uint32_t t;
    *present = 0;
    if (vsr_json_object_get(j, 0, "tools", &t) != VSR_OK)
        return 0;
    *present = 1;
    if (vsr_json_type(j, t) != VSR_JSON_ARRAY)
        return 0;
    return t;
}

int vsr_plugins_tool_texts(const vsr_decision_conf_t *decision, const vsr_plugin_ctx_t *ctx, vsr_slice_t **texts,
                           size_t *n, int *with_db)
{
    *texts = NULL;
    *n = 0;
    *with_db = 0;
    if (decision == NULL || !chat_ok(ctx))
        return 0;
    int want_request = 0;
    for (size_t i = 0; i < decision->n_plugins; i++) {
        const vsr_plugin_conf_t *p = &decision->plugins[i];
        if (!p->enabled)
            continue;
        if (p->kind == VSR_PLUGIN_TOOLS && p->u.tools.semantic && p->u.tools.mode == VSR_TOOLS_FILTERED)
            want_request = 1;
        else if (p->kind == VSR_PLUGIN_TOOL_SELECTION && p->u.tool_selection.mode == VSR_TOOLSEL_FILTER)
            want_request = 1;
        else if (p->kind == VSR_PLUGIN_TOOL_SELECTION && ctx->tools_db && ctx->tools_db->n)
            *with_db = 1;
    }
    int present;
    uint32_t arr = want_request ? tools_array(ctx, &present) : 0;
    if (arr) {
        const vsr_json_t *j = ctx->json;
        uint32_t count = VSR_MIN(j->toks[arr].count, VSR_TOOLS_MAX_SCORED);
        vsr_slice_t *v = vsr_pool_alloc(ctx->pool, (count ? count : 1) * sizeof(*v));
        uint32_t t = arr + 1;
        for (uint32_t i = 0; i < count; i++, t = j->toks[t].next)
            v[i] = vsr__tools_text((vsr_plugin_ctx_t *)ctx, t);
        *texts = v;
        *n = count;
    }
    return *n > 0 || *with_db;
}

static int filter_mode(const vsr_plugin_tool_selection_conf_t *tc, vsr_plugin_ctx_t *ctx, uint32_t arr,
                       const char **why)
{
    const vsr_json_t *j = ctx->json;
    uint32_t n = j->toks[arr].count;
    const vsr_tool_scores_t *sc = ctx->tool_scores;
    uint8_t *drop = vsr_pool_alloc(ctx->pool, n ? n : 1);
    memset(drop, 0, n ? n : 1);
    vsr_slice_t *names = vsr__tools_names(ctx, arr, n);
    if (sc == NULL || !sc->ok) {
        ctx->tools_selection = VSR_TOOLSEL_UNAVAILABLE;
        if (!tc->fallback_to_empty)
            return VSR_OK;
        memset(drop, 1, n);
    } else {
        ctx->tools_selection = VSR_TOOLSEL_SEMANTIC;
        vsr__tools_select(ctx, sc->request, VSR_MIN(sc->n_request, (size_t)n), n, drop, names, UINT32_MAX,
                          tc->relevance_threshold, tc->preserve_count);
    }
    return vsr__tools_apply_drop(ctx, arr, drop, names, why);
}

/* May the database's tool `name` join the request? */
static int addable(const vsr_plugin_ctx_t *ctx, const vsr_slice_t *names, uint32_t n, vsr_slice_t name)
{
    for (uint32_t i = 0; i < n; i++)
        if (names[i].p && vsr_slice_eq(names[i], name))
            return 0;
    const vsr_decision_conf_t *d = ctx->_decision;
    for (size_t i = 0; d && i < d->n_plugins; i++) {
        const vsr_plugin_conf_t *p = &d->plugins[i];
        if (p->enabled && p->kind == VSR_PLUGIN_TOOLS &&
            (p->u.tools.mode == VSR_TOOLS_NONE ||
             (p->u.tools.mode == VSR_TOOLS_FILTERED && !vsr__tools_allowed(&p->u.tools, name))))
            return 0;
    }
    return 1;
}

static int add_mode(const vsr_plugin_tool_selection_conf_t *tc, vsr_plugin_ctx_t *ctx, int present, uint32_t arr,
                    const char **why)
{
    const vsr_json_t *j = ctx->json;
    const vsr_tool_scores_t *sc = ctx->tool_scores;
    const vsr_tools_db_t *db = ctx->tools_db;
    if (sc == NULL || !sc->ok || db == NULL || sc->n_db != db->n) {
        ctx->tools_selection = VSR_TOOLSEL_UNAVAILABLE;
        return VSR_OK;
    }
    ctx->tools_selection = VSR_TOOLSEL_SEMANTIC;
    if (present && arr == 0)
        return VSR_OK; /* "tools" is not an array: nothing to add to */
    uint32_t n = arr ? j->toks[arr].count : 0;
    vsr_slice_t *names = vsr__tools_names(ctx, arr, n);
    /* candidates, best first (ties: database order) */
    size_t *order = vsr_pool_alloc(ctx->pool, (db->n ? db->n : 1) * sizeof(*order));
    size_t m = 0;
    for (size_t i = 0; i < db->n; i++) {
        double s = sc->db[i];
        if (!(s == s) || s < tc->similarity_threshold || !addable(ctx, names, n, vsr_slice_cstr(db->tools[i].name)))
            continue;
        size_t k = m++;
        while (k > 0 && sc->db[order[k - 1]] < s) {
            order[k] = order[k - 1];
            k--;
        }
        order[k] = i;
    }
    if (tc->advanced) {
        const vsr_chat_view_t *cv = ctx->chat;
        vsr_slice_t query = cv->last_user >= 0 ? cv->messages[cv->last_user].text : VSR_SLICE_NULL;
        vsr_slice_t cat = ctx->category_confidence >= tc->category_confidence_threshold ? ctx->category
                                                                                         : VSR_SLICE_NULL;
        m = vsr__tools_rank_advanced(tc, db, sc->db, order, m, query, cat, ctx->pool);
    }
    m = VSR_MIN(m, (size_t)tc->top_k);
    if (m == 0)
        return VSR_OK;
    vsr_buf_t b;
    vsr_buf_init(&b, 0);
    for (size_t r = 0; r < m; r++) {
        const vsr_tool_entry_t *t = &db->tools[order[r]];
        if (r)
            vsr_buf_append(&b, ",", 1);
        vsr_buf_append_slice(&b, t->json);
        vsr__tools_note_selected(ctx, vsr_slice_cstr(t->name));
    }
    vsr_slice_t elems = vsr_pool_dup_slice(ctx->pool, vsr_buf_slice(&b));
    vsr_buf_free(&b);
    int rc = VSR_ERR_INVALID;
    if (arr) {
        /* after the last element, before "]": falls inside an earlier edit
         * only when that edit removed the whole member */
        uint32_t at = j->toks[arr].end - 1;
        vsr_slice_t text = elems;
        if (n > 0) {
            char *p = vsr_pool_alloc(ctx->pool, elems.len + 1);
            p[0] = ',';
            memcpy(p + 1, elems.p, elems.len);
            text = vsr_slice(p, elems.len + 1);
        }
        if (!vsr_json_edits_overlaps(ctx->edits, at, at))
            rc = vsr_json_edits_add(ctx->edits, at, at, text);
    }
    if (rc != VSR_OK) {
        vsr_slice_t member = vsr_pool_dup_slice(ctx->pool, VSR_SLICE_LIT("\"tools\":["));
        char *p = vsr_pool_alloc(ctx->pool, member.len + elems.len + 1);
        memcpy(p, member.p, member.len);
        memcpy(p + member.len, elems.p, elems.len);
        p[member.len + elems.len] = ']';
        rc = vsr_json_edit_insert_member(ctx->edits, j, 0, vsr_slice(p, member.len + elems.len + 1));
    }
    if (rc != VSR_OK) {
        *why = "tool_selection: the tools were already rewritten by an earlier plugin";
        return VSR_ERR_INVALID;
    }
    ctx->tools_added += m;
    ctx->tools_after += m;
    return VSR_OK;
}

int vsr__plugin_tool_selection_request(const vsr_plugin_conf_t *conf, vsr_plugin_ctx_t *ctx, const char **why)
{
    const vsr_plugin_tool_selection_conf_t *tc = &conf->u.tool_selection;
    if (!chat_ok(ctx))
        return VSR_OK;
    int present;
    uint32_t arr = tools_array(ctx, &present);
    const vsr_json_t *j = ctx->json;
    /* a member an earlier plugin removed is gone */
    int gone = arr && vsr_json_edits_overlaps(ctx->edits, j->toks[arr].end - 1, j->toks[arr].end - 1);
    size_t before = arr && !gone ? j->toks[arr].count : 0;
    if (!ctx->tools_applied) {
        ctx->tools_before = before;
        ctx->tools_after = before;
    }
    ctx->tools_applied = 1;
    if (tc->mode == VSR_TOOLSEL_FILTER) {
        if (arr == 0 || gone || before == 0)
            return VSR_OK;
        return filter_mode(tc, ctx, arr, why);
    }
    return add_mode(tc, ctx, gone ? 0 : present, gone ? 0 : arr, why);
}
