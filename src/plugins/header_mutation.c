/*
 * header_mutation.c — upstream request headers from a decision (ref §2).
 *
 * Order: every `delete`, then every `add`, then every `update` — the order
 * Envoy gives the reference router's mutation (removals before sets; adds
 * listed before updates).  `add` and `update` both set the header,
 * replacing any value the client sent; a name both deleted and added ends
 * up set.  Names and values are the config's strings (no copy).  The five
 * x-envoy reliability headers never get here: the loader drops them.
 */
#include "plugins/plugins_int.h"

int vsr__plugin_header_mutation_request(const vsr_plugin_conf_t *conf, vsr_plugin_ctx_t *ctx, const char **why)
{
    const vsr_plugin_header_mutation_conf_t *hm = &conf->u.header_mutation;
    for (size_t i = 0; i < hm->delete_.n; i++)
        vsr_plugin_remove_header(ctx, vsr_slice_cstr(hm->delete_.items[i]));
    for (size_t i = 0; i < hm->n_add; i++)
        vsr_plugin_set_header(ctx, vsr_slice_cstr(hm->add[i].name), vsr_slice_cstr(hm->add[i].value));
    for (size_t i = 0; i < hm->n_update; i++)
        vsr_plugin_set_header(ctx, vsr_slice_cstr(hm->update[i].name), vsr_slice_cstr(hm->update[i].value));
    return VSR_OK;
}
