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
#include "signals/signals.h"

/* Evaluates one leaf: returns 1 when its signal matched (and sets
 * *confidence), 0 when not. */
typedef int (*vsr_rule_leaf_fn)(void *ud, const vsr_rule_conf_t *leaf, double *confidence);

/* A leaf with a label or a predicate (classifier conditions) over its
 * signal's result r: matches when the label (if set) is r->label and the
 * predicate (if set; gt/gte/lt/lte, a conjunction) holds on r->value, else
 * r->matched (the signal's own threshold).  *confidence: the score (0..1)
 * when matched, else 0. */
int vsr_rule_leaf_result(const vsr_rule_conf_t *leaf, const vsr_signal_result_t *r, double *confidence);

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

/* ---- the static selector (docs/signals.md "Model scores") ----
 * Which of a selected decision's modelRefs answers when its algorithm is
 * static (or absent): with the scores of the matched domain (the first
 * domain condition of the decision's rules that matched; else a domain
 * named as the decision) every candidate gets its model_scores entry, 1.0
 * when unlisted; the highest wins, the earlier on a tie, and a best score
 * of exactly 1.0 gives the first modelRef (the reference's
 * use_first_candidate).  Without scores, or for another algorithm: the
 * first modelRef (0).  leaf evaluates the rules' leaves, as for
 * vsr_decision_select.  out (may be NULL) says which domain's scores
 * decided and the winner's score. */
#define VSR_STATIC_UNLISTED_SCORE 1.0
typedef struct {
    const char *domain;            /* the domain whose model_scores decided, NULL when none did */
    double score;                  /* the chosen candidate's score */
    int scored;
} vsr_static_choice_t;
size_t vsr_static_select(const vsr_recipe_conf_t *recipe, const vsr_decision_conf_t *d, vsr_rule_leaf_fn leaf,
                         void *ud, vsr_static_choice_t *out);

/* ---- projections (routing.projections, ref §1.10): derived signals computed
 * after the signals and before the decisions.
 *
 *   partitions  among the matched domain / embedding members keep only the
 *               one with the highest confidence (softmax_exclusive: its
 *               confidence becomes exp(c/T) / sum over the matched members
 *               of exp(c_j/T)); none matched and a `default`: the default
 *               matches with confidence 1.0; a single match is left alone.
 *   scores      weighted sums of signal values (value_source binary:
 *               match/miss; confidence: the confidence, or miss; raw and
 *               score: the signal's measured value) and of other scores;
 *               a kb_metric input reads its kb signal (resolved at load):
 *               best_score its value (the nearest target entry's
 *               similarity), confidence, matched; miss when the signal
 *               was not computed or there is none.
 *   mappings    bands over a score: threshold_bands emits the first band
 *               that holds, multi_emit every one; confidence 1.0, or with
 *               calibration sigmoid_distance 1/(1+exp(-slope*d)), d the
 *               distance from the score to the band's nearest bound.
 *
 * Only what a request's decisions reference is computed: a run memoises
 * the scores and outputs it computed.
 *
 * Threading: a compiled vsr_projections_t is immutable (shared by every
 * request of its engine); a run belongs to one request.
 */
typedef struct vsr_projections_s vsr_projections_t;

/* Resolves (condition type, signal name) to a signal index, or -1. */
typedef int (*vsr_projection_find_fn)(void *ud, const char *type, const char *name);

/* Compiles conf (validated at load: references resolve, no cycle), the
 * signal references resolved with find.  Never fails; a recipe without
 * projections compiles to an empty set.  Free with vsr_projections_free
 * (accepts NULL).  The result points into conf, which must outlive it. */
vsr_projections_t *vsr_projections_compile(const vsr_projections_conf_t *conf, vsr_projection_find_fn find, void *ud);
void vsr_projections_free(vsr_projections_t *p);

size_t vsr_projections_n_outputs(const vsr_projections_t *p);
size_t vsr_projections_n_scores(const vsr_projections_t *p);
int vsr_projections_find_output(const vsr_projections_t *p, const char *name); /* index or -1 */
const char *vsr_projections_output_name(const vsr_projections_t *p, int o);
const char *vsr_projections_score_name(const vsr_projections_t *p, int s);

/* Calls add(ud, sig) for every signal output o depends on (with
 * repetitions). */
void vsr_projections_output_deps(const vsr_projections_t *p, int o, void (*add)(void *ud, int sig), void *ud);
/* Members of partitions that hold signal sig (sig included, with
 * repetitions): evaluating one member of a partition needs them all. */
void vsr_projections_partners(const vsr_projections_t *p, int sig, void (*add)(void *ud, int sig), void *ud);

/* Applies every partition to the signal results in place: sig[i] is signal
 * i's result, known[i] non-zero when it was computed. */
void vsr_projections_partition(const vsr_projections_t *p, vsr_signal_result_t *sig, const unsigned char *known);

typedef struct {
    int matched;
    double confidence;
} vsr_projection_out_t;

/* One request's memo of scores and outputs (arrays from the pool). */
typedef struct {
    const vsr_signal_result_t *sig;
    const unsigned char *known;
    double *score;
    unsigned char *score_state;    /* 0 not computed, 1 computing, 2 done */
    vsr_projection_out_t *out;
    unsigned char *out_done;
} vsr_projections_run_t;

void vsr_projections_run_init(const vsr_projections_t *p, vsr_projections_run_t *run, vsr_pool_t *pool,
                              const vsr_signal_result_t *sig, const unsigned char *known);
double vsr_projections_score(const vsr_projections_t *p, vsr_projections_run_t *run, int s);
vsr_projection_out_t vsr_projections_output(const vsr_projections_t *p, vsr_projections_run_t *run, int o);

/* Appends the run's computed scores and outputs as JSON members
 * `"projection_scores":[...],"projection_outputs":[...]` (trace: each
 * score's inputs with their values too). */
void vsr_projections_describe(const vsr_projections_t *p, const vsr_projections_run_t *run, int trace, vsr_buf_t *b);
/* Appends the names of the matched outputs computed by the run,
 * comma-separated; returns how many. */
size_t vsr_projections_matched_names(const vsr_projections_t *p, const vsr_projections_run_t *run, vsr_buf_t *b);

/* ---- single-call selectors (ref §3.8): pick one of a decision's candidates ----
 *
 * Pure functions over what the caller gathered for each candidate (its live
 * statistics at the percentile the selector asks for, its price and quality
 * score), so a fixture decides them exactly.  The caller applies the result:
 * chosen < 0 is a selector failure (algorithm.on_error decides); a warning
 * names why the first candidate was taken without ranking. */
#define VSR_SELECT_MAX_CANDIDATES 64

typedef struct {
    const char *model;                 /* the modelRef's model (borrowed) */
    double ttft_ms, tpot_ms;           /* at the selector's percentile, when has_* */
    int has_ttft, has_tpot;
    double inflight;                   /* requests in flight to the model now */
    double cost_per_1m; int has_cost;  /* providers.models[].pricing.prompt_per_1m (> 0) */
    double quality; int has_quality;   /* modelCards[].quality_score */
} vsr_select_input_t;

typedef struct {
    int chosen;                        /* index into the candidates; -1: the selector failed */
    double score;                      /* the chosen one's */
    double scores[VSR_SELECT_MAX_CANDIDATES];
    unsigned char scored[VSR_SELECT_MAX_CANDIDATES];  /* 1: scores[i] is the candidate's score */
    const char *dropped[VSR_SELECT_MAX_CANDIDATES];   /* why a candidate was left out (static text), or NULL */
    const char *warning;               /* static text: the first candidate was taken without ranking */
    int probe;                         /* latency_aware: chosen is a candidate without statistics, tried */
    const char *error;                 /* static text, with chosen -1 */
} vsr_select_result_t;

/* latency_aware: the candidates with data for every percentile asked,
 * scored by mean(tpot / min tpot, ttft / min ttft); the lowest wins (the
 * first of equals).  No percentile asked, no candidate with data, or fewer
 * than minimum_candidates with data: the first candidate, with a warning.
 * Before ranking, a candidate without data and with nothing in flight is
 * chosen as a probe (probe set, nothing scored).
 * n is at most VSR_SELECT_MAX_CANDIDATES and at least 1. */
void vsr_select_latency_aware(const vsr_algo_latency_conf_t *c, uint32_t minimum_candidates,
                              const vsr_select_input_t *in, size_t n, vsr_select_result_t *out);
/* multi_factor: the SLO ceilings and quality.min_score / on_missing drop
 * candidates; the rest are scored w_q*quality + w_l*(1-latency) + w_c*(1-cost)
 * + w_L*(1-load), each min-max normalised over them (latency: TPOT, else TTFT),
 * the highest wins; objective.strategy lexicographic first keeps, factor by
 * factor of objective.priorities, the candidates within the tolerance of
 * the best.  None left: on_no_candidates (cheapest, first, fail). */
void vsr_select_multi_factor(const vsr_algo_multi_factor_conf_t *c, uint32_t minimum_candidates,
                             const vsr_select_input_t *in, size_t n, vsr_select_result_t *out);
/* router_dc (the reference's router_dc.go): cosine[i] is the cosine of the
 * query's embedding and candidate i's description embedding, when has[i]
 * (none: the candidate's raw score is min_similarity).  Raw score
 * sigmoid(cosine / temperature); the highest raw score among the embedded
 * ones wins (the first of equals); the reported scores are the softmax of
 * the raw scores at the temperature.  No embedded candidate, a best raw
 * score below min_similarity, or fewer embedded candidates than
 * minimum_candidates: the first candidate, every score 1/n, a warning. */
void vsr_select_router_dc(const vsr_algo_router_dc_conf_t *c, uint32_t minimum_candidates, const double *cosine,
                          const unsigned char *has, size_t n, vsr_select_result_t *out);

#endif /* VSR_DECISION_H */
