/* decision.c — rule trees and decision selection (see decision.h). */
#include "decision/decision.h"

int vsr_rule_leaf_result(const vsr_rule_conf_t *leaf, const vsr_signal_result_t *r, double *confidence)
{
    *confidence = 0;
    if (leaf->label && (r->label == NULL || strcmp(leaf->label, r->label) != 0))
        return 0;
    int ok = r->matched;
    if (leaf->has_predicate) {
        const vsr_predicate_conf_t *p = &leaf->predicate;
        double v = r->value;
        ok = r->label != NULL && !(p->has_gt && !(v > p->gt)) && !(p->has_gte && !(v >= p->gte)) &&
             !(p->has_lt && !(v < p->lt)) && !(p->has_lte && !(v <= p->lte));
    }
    if (ok)
        *confidence = VSR_MAX(0.0, VSR_MIN(r->value, 1.0));
    return ok;
}

int vsr_rule_eval(const vsr_rule_conf_t *rule, vsr_rule_leaf_fn leaf, void *ud, double *confidence)
{
    *confidence = 0;
    if (rule == NULL)
        return 1;
    switch (rule->kind) {
    case VSR_RULE_LEAF:
        return leaf(ud, rule, confidence) ? 1 : 0;
    case VSR_RULE_AND: {
        double sum = 0;
        for (size_t i = 0; i < rule->n_children; i++) {
            double c;
            if (!vsr_rule_eval(&rule->children[i], leaf, ud, &c))
                return 0; /* the rest cannot change the outcome */
            sum += c;
        }
        *confidence = rule->n_children ? sum / (double)rule->n_children : 0;
        return 1;
    }
    case VSR_RULE_OR: {
        int any = 0;
        double best = 0;
        for (size_t i = 0; i < rule->n_children; i++) {
            double c;
            if (vsr_rule_eval(&rule->children[i], leaf, ud, &c) && (!any || c > best)) {
                best = c;
                any = 1;
            }
        }
        *confidence = any ? best : 0;
        return any;
    }
    case VSR_RULE_NOT: {
        double c;
        if (rule->n_children != 1 || vsr_rule_eval(&rule->children[0], leaf, ud, &c))
            return 0;
        *confidence = 1.0;
        return 1;
    }
    }
    return 0;
}

/* <0 when a ranks before b */
static int rank(const vsr_decision_result_t *a, const vsr_decision_result_t *b, int tiered, int by_confidence)
{
    const vsr_decision_conf_t *da = a->decision, *db = b->decision;
    if (tiered && da->tier != db->tier)
        return da->tier < db->tier ? -1 : 1;
    if (tiered || by_confidence) {
        if (a->confidence != b->confidence)
            return a->confidence > b->confidence ? -1 : 1;
        if (da->priority != db->priority)
            return da->priority > db->priority ? -1 : 1;
    } else {
        if (da->priority != db->priority)
            return da->priority > db->priority ? -1 : 1;
        if (a->confidence != b->confidence)
            return a->confidence > b->confidence ? -1 : 1;
    }
    return strcmp(da->name, db->name);
}

int vsr_decision_select(const vsr_recipe_conf_t *recipe, vsr_rule_leaf_fn leaf, void *ud,
                        vsr_decision_result_t *results)
{
    int tiered = 0;
    for (size_t i = 0; i < recipe->n_decisions; i++) {
        vsr_decision_result_t *r = &results[i];
        r->decision = &recipe->decisions[i];
        r->matched = vsr_rule_eval(r->decision->rules, leaf, ud, &r->confidence);
        if (r->matched && r->decision->tier > 0)
            tiered = 1;
    }
    int best = -1;
    for (size_t i = 0; i < recipe->n_decisions; i++) {
        if (!results[i].matched)
            continue;
        if (best < 0 || rank(&results[i], &results[best], tiered, recipe->strategy_confidence) < 0)
            best = (int)i;
    }
    return best;
}
