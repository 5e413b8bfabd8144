/*
 * cfg_compression.c — context_compression.request_controls: the directives
 * a client may send in one header (the reference's
 * req_filter_context_compression_controls.go):
 *
 *   request_controls:
 *     enabled: true                       (default false)
 *     header: x-vsr-compression-control   (the default)
 *     allowed: [bypass, target]           (absent or []: none is obeyed)
 *     max_target_tokens: 4000             (a target directive's cap; 0 = none)
 */
#include "config/cfg_internal.h"

#include <stddef.h>

#define CC_OFF(m) offsetof(vsr_plugin_conf_t, u.context_compression.m)

static const char *const cc_directives[] = {"bypass", "target", NULL};

/* allowed: a list of directives into VSR_CC_CTL_* bits. */
static int decode_cc_allowed(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj)
{
    if (val->kind != CFG_NODE_SEQ) {
        vsr__cfg_node_error(d, val, "expected a list of directives, got %s", vsr__cfg_node_what(val));
        return -1;
    }
    unsigned bits = 0;
    int rc = 0;
    cfg_field_t c = {.key = f->key, .choices = cc_directives, .flags = CFG_NOCASE};
    for (size_t i = 0; i < val->n; i++) {
        int which;
        if (vsr__cfg_choice(d, &c, val->items[i], &which) != 0)
            rc = -1;
        else
            bits |= 1u << which;
    }
    *(unsigned *)((char *)obj + f->offset) = bits;
    return rc;
}

static const cfg_field_t cc_controls_fields[] = {
    {.key = "enabled", .decode = vsr__cfg_bool, .offset = CC_OFF(controls)},
    {.key = "header", .decode = vsr__cfg_header_name, .offset = CC_OFF(control_header)},
    {.key = "allowed", .decode = decode_cc_allowed, .offset = CC_OFF(allowed)},
    {.key = "max_target_tokens", .decode = vsr__cfg_uint, .offset = CC_OFF(max_target_tokens), .size = 8, .min = 0,
     .max = INT32_MAX},
};

const cfg_spec_t vsr__cfg_cc_controls_spec = {
    .size = sizeof(vsr_plugin_conf_t),
    .fields = cc_controls_fields,
    .n_fields = VSR_ARRAY_LEN(cc_controls_fields),
};
