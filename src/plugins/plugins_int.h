/*
 * plugins_int.h — private to src/plugins: the request-side hook of each
 * plugin type, registered by kind in plugins.c.
 *
 * A hook reads ctx->json / ctx->chat and records its changes in ctx.  It
 * returns VSR_OK (possibly having changed nothing) or VSR_ERR_INVALID with
 * *why set to a static message naming the plugin.
 */
#ifndef VSR_PLUGINS_INT_H
#define VSR_PLUGINS_INT_H

#include "plugins/plugins.h"

typedef int (*vsr__plugin_request_fn)(const vsr_plugin_conf_t *conf, vsr_plugin_ctx_t *ctx, const char **why);

int vsr__plugin_system_prompt_request(const vsr_plugin_conf_t *conf, vsr_plugin_ctx_t *ctx, const char **why);
int vsr__plugin_header_mutation_request(const vsr_plugin_conf_t *conf, vsr_plugin_ctx_t *ctx, const char **why);
int vsr__plugin_fast_response_request(const vsr_plugin_conf_t *conf, vsr_plugin_ctx_t *ctx, const char **why);
int vsr__plugin_request_params_request(const vsr_plugin_conf_t *conf, vsr_plugin_ctx_t *ctx, const char **why);
int vsr__plugin_tools_request(const vsr_plugin_conf_t *conf, vsr_plugin_ctx_t *ctx, const char **why);
int vsr__plugin_tool_selection_request(const vsr_plugin_conf_t *conf, vsr_plugin_ctx_t *ctx, const char **why);
int vsr__plugin_context_compression_request(const vsr_plugin_conf_t *conf, vsr_plugin_ctx_t *ctx, const char **why);
int vsr__plugin_memory_request(const vsr_plugin_conf_t *conf, vsr_plugin_ctx_t *ctx, const char **why);
int vsr__plugin_rag_request(const vsr_plugin_conf_t *conf, vsr_plugin_ctx_t *ctx, const char **why);

/* Copies the bytes of b into the pool (b is left untouched). */
vsr_slice_t vsr__plugin_keep(vsr_plugin_ctx_t *ctx, const vsr_buf_t *b);

/* Removes the elements of array arr whose drop[i] is set (drop has one
 * entry per element, in order), as one edit per run of removed elements
 * with its commas: a run followed by a kept element spans from its first
 * element to that kept one; a run reaching the end spans from the end of
 * the kept element before it.  One batch per array: a second call on the
 * same array may collide with the first.  All or nothing: VSR_OK (also when
 * nothing is dropped), or VSR_ERR_INVALID, no edit added, when arr is not an
 * array, every element would go (the array is never emptied: an earlier
 * insertion's separator would dangle), or a run overlaps an earlier edit. */
int vsr__plugin_remove_elements(vsr_plugin_ctx_t *ctx, uint32_t arr, const uint8_t *drop);

/* ---- shared by the tool plugins (tools.c) ---- */

/* The names of the n elements of array `tools` (a NULL slice: none readable). */
vsr_slice_t *vsr__tools_names(vsr_plugin_ctx_t *ctx, uint32_t tools, uint32_t n);
/* allow_tools / block_tools of a tools plugin say name may stay. */
int vsr__tools_allowed(const vsr_plugin_tools_conf_t *tc, vsr_slice_t name);
/* A tool's text compared with the routing text ("name: description"), NULL slice when it has neither. */
vsr_slice_t vsr__tools_text(vsr_plugin_ctx_t *ctx, uint32_t t);
/* Among the first n_scored of n elements not dropped, best score first:
 * keeps at most top_k, those at or above threshold, and at least min_keep
 * whatever their scores; drops the other scored ones, notes the kept names
 * (ctx->tools_selected).  Elements past n_scored are not touched. */
void vsr__tools_select(vsr_plugin_ctx_t *ctx, const double *score, size_t n_scored, uint32_t n, uint8_t *drop,
                       const vsr_slice_t *names, uint32_t top_k, double threshold, uint32_t min_keep);
/* Removes the dropped elements of `tools` (all of them: the tools members go). */
int vsr__tools_apply_drop(vsr_plugin_ctx_t *ctx, uint32_t tools, const uint8_t *drop, const vsr_slice_t *names,
                          const char **why);
void vsr__tools_note_selected(vsr_plugin_ctx_t *ctx, vsr_slice_t name);
/* tool_selection's advanced_filtering (tool_rank.c): order[0..m) (database
 * indices, most similar first) filtered and re-ranked in place by the
 * weighted score; returns how many remain.  query: the routing text;
 * category: the matched domain's (empty: none). */
size_t vsr__tools_rank_advanced(const vsr_plugin_tool_selection_conf_t *tc, const vsr_tools_db_t *db,
                                const double *sims, size_t *order, size_t m, vsr_slice_t query, vsr_slice_t category,
                                vsr_pool_t *pool);

#endif /* VSR_PLUGINS_INT_H */
