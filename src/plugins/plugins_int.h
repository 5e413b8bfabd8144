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

/* Copies the bytes of b into the pool (b is left untouched). */
vsr_slice_t vsr__plugin_keep(vsr_plugin_ctx_t *ctx, const vsr_buf_t *b);

#endif /* VSR_PLUGINS_INT_H */
