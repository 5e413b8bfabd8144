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
int vsr__plugin_context_compression_request(const vsr_plugin_conf_t *conf, vsr_plugin_ctx_t *ctx, const char **why);

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

#endif /* VSR_PLUGINS_INT_H */
