/*
 * decision — the rule language and decision selection of the reference
 * router (ref §1.11).
 *
 * A rule is a leaf {type, name} or a composite AND / OR / NOT.  Confidence:
 * leaf = its signal's; AND = mean of its children (empty AND matches with
 * 0); OR = its best matching child's; NOT = 1.0 when its one child does not
 * match; no rules at all = always matches with 0.
 *
 * Selection among the matched decisions of a recipe: when any has tier > 0,
 * lower tier first (an untiered decision has tier 0 and so sorts first), then
 * higher confidence, then higher priority; strategy "confidence": higher
 * confidence, then higher priority; strategy "priority" (default): higher
 * priority, then higher confidence.  Ties go to the lexicographically smaller
 * name.
 */
#ifndef VSR_DECISION_H
#define VSR_DECISION_H

#include "base/base.h"
#include "config/config.h"

/* Evaluates one leaf: returns 1 when its signal matched (and sets
 * *confidence), 0 when not. */
typedef int (*vsr_rule_leaf_fn)(void *ud, const vsr_rule_conf_t *leaf, double *confidence);

/* Evaluates a rule tree: 1 matched (with *confidence), 0 not.  rule NULL =
 * always matches with confidence 0. */
int vsr_rule_eval(const vsr_rule_conf_t *rule, vsr_rule_leaf_fn leaf, void *ud, double *confidence);

typedef struct {
    const vsr_decision_conf_t *decision;
    int matched;
    double confidence;
} vsr_decision_result_t;

/* Evaluates every decision of the recipe into results[] (one per decision,
 * in recipe order; results must hold recipe->n_decisions) and returns the
 * index of the selected one, or -1 when none matched. */
int vsr_decision_select(const vsr_recipe_conf_t *recipe, vsr_rule_leaf_fn leaf, void *ud,
                        vsr_decision_result_t *results);

#endif /* VSR_DECISION_H */
