/* routing-int.h — private to the routing module. */
#ifndef VSR_ROUTING_INT_H
#define VSR_ROUTING_INT_H

#include <stdatomic.h>

#include "decision/decision.h"
#include "routing/routing.h"
#include "signals/signals.h"

typedef struct {
    const vsr_rule_conf_t *leaf;
    int sig; /* signal index, -1 when unresolved (config validation prevents it) */
} leaf_map_t;

typedef struct {
    const vsr_recipe_conf_t *conf;
    vsr_signals_t *signals;
    leaf_map_t *leaves; /* sorted by leaf pointer */
    size_t n_leaves;
    int *referenced;    /* signals some decision references */
    size_t n_referenced;
    int needs_identity; /* an authz signal is referenced */
    struct sig_box_s *box; /* the compiled signals, shared with other versions whose recipe has the same signals */
} recipe_state_t;

struct vsr_engine_s {
    atomic_uint refs;
    const vsr_config_t *cfg;
    uint64_t version;
    /* a snapshot: what the engine owns and frees with its last reference */
    vsr_config_t *owned_cfg;
    char hash[VSR_CONFIG_HASH_LEN];
    void *part;
    void (*part_free)(void *part);
    recipe_state_t *recipes;
    size_t n_recipes;
    size_t n_reused;    /* recipes whose compiled signals came from the previous version */
};

typedef struct {
    const vsr_recipe_conf_t *recipe; /* auto name or entrypoint */
    const vsr_model_conf_t *model;   /* concrete model (passthrough) */
} resolution_t;

typedef struct {
    recipe_state_t *rs;
    vsr_signal_input_t in;
    vsr_signal_result_t *memo;
    unsigned char *memo_done;
    vsr_decision_result_t *results;
    int selected;
} route_ctx_t;

recipe_state_t *vsr__engine_recipe(vsr_engine_t *e, const vsr_recipe_conf_t *r);
int vsr__resolve_model(const vsr_engine_t *e, vsr_slice_t name, resolution_t *out);
/* Evaluates the recipe's referenced signals and selects a decision. */
void vsr__route(route_ctx_t *rc, vsr_pool_t *pool);

#endif
