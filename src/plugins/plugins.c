/*
 * plugins.c — the registry {kind → request hook}, the context, and the
 * request-side run over a decision's plugin list.
 *
 * Upstream header changes are recorded so that "apply every removal, then
 * every set" (what Envoy does with an ext_proc header mutation, and what the
 * engine does with ctx) gives the same result as applying the plugins'
 * calls one after another: a set replaces an earlier set of the same name,
 * and a removal also cancels earlier sets of that name.
 */
#include "plugins/plugins_int.h"

static const struct {
    vsr_plugin_kind_t kind;
    const char *name;
    vsr__plugin_request_fn request;
} registry[] = {
    {VSR_PLUGIN_SYSTEM_PROMPT, "system_prompt", vsr__plugin_system_prompt_request},
    {VSR_PLUGIN_HEADER_MUTATION, "header_mutation", vsr__plugin_header_mutation_request},
    {VSR_PLUGIN_FAST_RESPONSE, "fast_response", vsr__plugin_fast_response_request},
    {VSR_PLUGIN_REQUEST_PARAMS, "request_params", vsr__plugin_request_params_request},
    {VSR_PLUGIN_TOOLS, "tools", vsr__plugin_tools_request},
    {VSR_PLUGIN_TOOL_SELECTION, "tool_selection", vsr__plugin_tool_selection_request},
    {VSR_PLUGIN_CONTEXT_COMPRESSION, "context_compression", vsr__plugin_context_compression_request},
    {VSR_PLUGIN_MEMORY, "memory", vsr__plugin_memory_request},
    {VSR_PLUGIN_RAG, "rag", vsr__plugin_rag_request},
};

void vsr_plugin_ctx_init(vsr_plugin_ctx_t *ctx, const vsr_json_t *json, const vsr_chat_view_t *chat,
                         vsr_json_edits_t *edits, vsr_pool_t *pool)
{
    memset(ctx, 0, sizeof(*ctx));
    ctx->json = json;
    ctx->chat = chat;
    ctx->stream = chat ? chat->stream : 0;
    ctx->pool = pool;
    ctx->edits = edits;
}

vsr_slice_t vsr__plugin_keep(vsr_plugin_ctx_t *ctx, const vsr_buf_t *b)
{
    return vsr_pool_dup_slice(ctx->pool, vsr_buf_slice(b));
}

int vsr__plugin_remove_elements(vsr_plugin_ctx_t *ctx, uint32_t arr, const uint8_t *drop)
{
    const vsr_json_t *j = ctx->json;
    if (j == NULL || arr >= j->ntoks || vsr_json_type(j, arr) != VSR_JSON_ARRAY)
        return VSR_ERR_INVALID;
    uint32_t n = j->toks[arr].count, live = 0;
    if (n == 0)
        return VSR_OK;
    uint32_t *el = vsr_pool_alloc(ctx->pool, (size_t)n * sizeof(*el));
    uint32_t c = arr + 1;
    for (uint32_t i = 0; i < n; i++, c = j->toks[c].next) {
        el[i] = c;
        live += !drop[i];
    }
    if (live == n)
        return VSR_OK;
    if (live == 0)
        return VSR_ERR_INVALID;
    vsr_json_edit_t *runs = vsr_pool_alloc(ctx->pool, (size_t)n * sizeof(*runs));
    size_t nruns = 0;
    for (uint32_t a = 0; a < n;) {
        if (!drop[a]) {
            a++;
            continue;
        }
        uint32_t b = a;
        while (b + 1 < n && drop[b + 1])
            b++;
        /* a == 0 with b == n - 1 would be every element: excluded above */
        if (b + 1 < n)
            runs[nruns++] = (vsr_json_edit_t){j->toks[el[a]].start, j->toks[el[b + 1]].start, VSR_SLICE_NULL, 0};
        else
            runs[nruns++] = (vsr_json_edit_t){j->toks[el[a - 1]].end, j->toks[el[b]].end, VSR_SLICE_NULL, 0};
        a = b + 1;
    }
    for (size_t i = 0; i < nruns; i++)
        if (vsr_json_edits_overlaps(ctx->edits, runs[i].start, runs[i].end))
            return VSR_ERR_INVALID;
    for (size_t i = 0; i < nruns; i++) {
        int rc = vsr_json_edits_add(ctx->edits, runs[i].start, runs[i].end, VSR_SLICE_NULL);
        VSR_BUG_ON(rc != VSR_OK); /* checked just above */
    }
    return VSR_OK;
}

/* Grows a pool-allocated array of `size`-byte items to hold one more. */
static void *grow(vsr_pool_t *pool, void *arr, size_t n, size_t *cap, size_t size)
{
    if (n < *cap)
        return arr;
    size_t ncap = *cap ? *cap * 2 : 8;
    void *p = vsr_pool_alloc(pool, ncap * size);
    if (n)
        memcpy(p, arr, n * size);
    *cap = ncap;
    return p;
}

void vsr_plugin_set_header(vsr_plugin_ctx_t *ctx, vsr_slice_t name, vsr_slice_t value)
{
    for (size_t i = 0; i < ctx->n_set_headers; i++) {
        if (vsr_slice_case_eq(ctx->set_headers[i].name, name)) {
            ctx->set_headers[i].value = value;
            return;
        }
    }
    ctx->set_headers = grow(ctx->pool, ctx->set_headers, ctx->n_set_headers, &ctx->cap_set_headers,
                            sizeof(*ctx->set_headers));
    ctx->set_headers[ctx->n_set_headers].name = name;
    ctx->set_headers[ctx->n_set_headers].value = value;
    ctx->n_set_headers++;
}

void vsr_plugin_remove_header(vsr_plugin_ctx_t *ctx, vsr_slice_t name)
{
    size_t w = 0;
    for (size_t i = 0; i < ctx->n_set_headers; i++)
        if (!vsr_slice_case_eq(ctx->set_headers[i].name, name))
            ctx->set_headers[w++] = ctx->set_headers[i];
    ctx->n_set_headers = w;
    for (size_t i = 0; i < ctx->n_remove_headers; i++)
        if (vsr_slice_case_eq(ctx->remove_headers[i], name))
            return;
    ctx->remove_headers = grow(ctx->pool, ctx->remove_headers, ctx->n_remove_headers, &ctx->cap_remove_headers,
                               sizeof(*ctx->remove_headers));
    ctx->remove_headers[ctx->n_remove_headers++] = name;
}

int vsr_plugins_run_request(const vsr_decision_conf_t *decision, vsr_plugin_ctx_t *ctx, const char **why)
{
    const char *dummy;
    if (why == NULL)
        why = &dummy;
    *why = NULL;
    if (decision == NULL)
        return VSR_OK;
    ctx->_decision = decision;
    for (size_t i = 0; i < decision->n_plugins; i++) {
        const vsr_plugin_conf_t *p = &decision->plugins[i];
        if (!p->enabled)
            continue;
        size_t k = 0;
        while (k < VSR_ARRAY_LEN(registry) && registry[k].kind != p->kind)
            k++;
        if (k == VSR_ARRAY_LEN(registry))
            continue; /* a kind without a request-side hook */
        vsr_log_debug("plugins", "request hook %s", registry[k].name);
        int rc = registry[k].request(p, ctx, why);
        if (rc != VSR_OK)
            return rc;
        /* An immediate answer ends the request side: nothing after it
         * would reach an upstream. */
        if (ctx->imm_status != 0)
            break;
    }
    return VSR_OK;
}
