/*
 * envoy.h — `vsr envoy render`: the Envoy bootstrap that puts Envoy in front
 * of vsr in extproc mode, from one configuration document.  Envoy serves the
 * document's listeners; every request goes through the ext_proc filter
 * (vsr, over gRPC) and is routed on the x-selected-model header vsr sets,
 * one route per model to its cluster, the default model's for the rest.
 * The clusters carry what vsr's upstream layer does in standalone mode:
 * load balancing, outlier detection, health checks, circuit breakers, TLS to
 * https backends.  See docs/extproc.md.
 */
#ifndef VSR_CMD_ENVOY_H
#define VSR_CMD_ENVOY_H

#include "base/base.h"
#include "config/config.h"

typedef struct {
    const char *extproc_address;   /* where Envoy reaches vsr's ext_proc listener (default 127.0.0.1) */
    uint16_t extproc_port;         /* default 50051 */
    uint16_t admin_port;           /* Envoy's admin listener on 0.0.0.0 (default 9901) */
} vsr_envoy_render_opts_t;

/* Appends the bootstrap (YAML) to out.  VSR_OK, or VSR_ERR_INVALID with the
 * reasons in err when the document cannot be served in extproc mode (see
 * vsr_config_check_extproc). */
int vsr_envoy_render(const vsr_config_t *cfg, const vsr_envoy_render_opts_t *o, vsr_buf_t *out, vsr_buf_t *err);

#endif /* VSR_CMD_ENVOY_H */
