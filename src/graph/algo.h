/*
 * algo.h — the pure parts of the Looper algorithms (private to graph/).
 *
 * Everything here is I/O-free and has no global state: reading a model's
 * chat.completion, scoring its confidence, ordering candidates, spreading
 * ReMoM calls over models, writing the prompts of the synthesis rounds and
 * assembling the router's own answers.  The executor makes the calls and
 * feeds the bodies in.
 *
 * Threading: every function is reentrant; objects are owned by the caller.
 * Ownership: slices returned point into the caller's input (borrowed, it must
 * outlive them) or into the pool passed in.  Buffers passed as `out` are
 * appended to (never reset); a buffer's cap makes the writer return
 * VSR_ERR_TOO_BIG, in which case `out` may hold a partial result.
 * Work is linear in the input size unless a function says otherwise.
 */
#ifndef VSR_GRAPH_ALGO_H
#define VSR_GRAPH_ALGO_H

#include <stdint.h>

#include "base/base.h"

/* ==== Completion parsing ================================================== */

/* One token of choices[0].logprobs.content. */
typedef struct {
    double logprob;
    double margin;          /* top1 − top2 of its top_logprobs (the two highest); NAN with < 2 alternatives */
    uint32_t text_start;    /* byte span of the token's (unescaped) text in the concatenation of all tokens' */
    uint32_t text_len;      /*   texts, which is the content the model emitted */
    uint8_t is_tool_arg;    /* see "tool-call argument tokens" below */
} vsr_algo_token_t;

typedef struct {
    vsr_slice_t id;               /* unescaped "id"; empty when absent */
    vsr_slice_t model;            /* unescaped "model"; empty when absent */
    uint64_t created;             /* "created"; 0 when absent or not a non-negative integer */
    size_t n_choices;
    /* of choices[0]: */
    vsr_slice_t content;          /* message.content unescaped; empty when null or absent */
    vsr_slice_t reasoning;        /* message.reasoning_content, else message.reasoning; empty when absent */
    vsr_slice_t finish_reason;    /* empty when null or absent */
    int has_tool_calls;           /* message.tool_calls is a non-empty array */
    vsr_slice_t tool_calls;       /* its raw JSON text (borrowed from body); empty when absent */
    uint64_t prompt_tokens, completion_tokens, total_tokens; /* usage; 0 when absent */
    int has_logprobs;             /* logprobs.content is an array whose every entry has a numeric logprob */
    vsr_algo_token_t *tokens;     /* in the pool; NULL when !has_logprobs */
    size_t n_tokens;
    const char *why;              /* after VSR_ERR_INVALID: a static reason */
} vsr_algo_completion_t;

/* Reads a chat.completion body (body[0..len), borrowed).  A body is accepted
 * when it is a JSON object whose "object" (if present) is "chat.completion"
 * and whose "choices" is a non-empty array whose first element is an object
 * with a "message" object.  Allocations come from pool.  Returns VSR_OK, or
 * VSR_ERR_INVALID with out->why set (also for JSON nested deeper than 64
 * levels: no completion a model returns is).
 *
 * Tool-call argument tokens.  OpenAI's logprobs cover only the content
 * tokens; a structured message.tool_calls has no logprobs, so its arguments
 * cannot be scored and no token is marked.  When the model wrote the call as
 * content text instead (e.g. `<tool_call>{"name":"f","arguments":{...}}`), the
 * tokens' texts are concatenated and scanned: each `"arguments"` or
 * `"parameters"` key (the quoted word, then optional whitespace and a colon)
 * starts a value that runs from the first non-blank byte after the colon to
 * the end of that JSON value (object/array: to the matching bracket, strings
 * and escapes respected; string: to its closing quote; else to the next `,`,
 * `}`, `]` or blank).  An unterminated value runs to the end of the text.  A
 * token is a tool-argument token when its text span overlaps such a value. */
int vsr__algo_completion_parse(const char *body, size_t len, vsr_pool_t *pool, vsr_algo_completion_t *out);

/* ==== Confidence (escalation) ============================================= */

enum {
    VSR_ALGO_CONF_AVG_LOGPROB = 0,
    VSR_ALGO_CONF_MARGIN,
    VSR_ALGO_CONF_HYBRID,
    VSR_ALGO_CONF_SELF_VERIFY,        /* scored by another call: not computed here */
    VSR_ALGO_CONF_AUTOMIX_ENTAILMENT, /* scored by an external verifier: not computed here */
};

/* "avg_logprob" | "margin" | "hybrid" | "self_verify" | "automix_entailment"
 * → VSR_ALGO_CONF_*; an empty name is avg_logprob (the default);
 * VSR_ERR_INVALID for anything else. */
int vsr__algo_confidence_method(vsr_slice_t name);
/* The threshold used when the configured one is 0 or omitted: avg_logprob
 * −1.0, margin 0.5, hybrid 0.5, self_verify 0.7, automix_entailment 0.7.
 * NULL or "" is avg_logprob; an unknown name gives 0.0. */
double vsr__algo_confidence_default_threshold(const char *method);
/* 1 when the method needs top_logprobs: 2 in the request (margin, hybrid). */
int vsr__algo_confidence_needs_top2(int method);

/* Normalised confidence in [0,1] of a parsed completion:
 *   avg_logprob: clamp((mean logprob + 3) / 3, 0, 1);
 *   margin:      m = mean(top1 − top2); 1 − exp(−m / 3), 0 when m <= 0;
 *   hybrid:      logprob_weight · avg_logprob score + margin_weight · margin score.
 * The means are over all tokens, or with tool_args_only over the tool-argument
 * tokens only; the margin mean skips tokens with fewer than 2 alternatives.
 * Returns VSR_OK with *out set, or VSR_ERR_INVALID when the logprobs are
 * missing or empty, when no considered token has 2 alternatives
 * (margin/hybrid), when tool_args_only finds no tool-argument token, or for a
 * method not computed here (self_verify, automix_entailment). */
int vsr__algo_confidence(const vsr_algo_completion_t *c, int method, double logprob_weight, double margin_weight,
                         int tool_args_only, double *out);

/* ==== Escalation order ==================================================== */

enum {
    VSR_ALGO_ORDER_SIZE = 0,   /* "size" / "small_to_large": param_size ascending */
    VSR_ALGO_ORDER_DECLARED,   /* "declared": modelRefs order */
    VSR_ALGO_ORDER_COST,       /* "cost": prompt_per_1m ascending */
    VSR_ALGO_ORDER_AUTOMIX,    /* "automix": value descending, see below */
};

/* Order name → VSR_ALGO_ORDER_*; empty is size; VSR_ERR_INVALID otherwise. */
int vsr__algo_order_parse(vsr_slice_t name);

typedef struct {
    double param_size;     /* parameters (8B → 8e9); NAN when unknown */
    double prompt_per_1m;  /* pricing; NAN when unknown */
    double quality_score;  /* in [0,1]; NAN when unknown */
} vsr_algo_candidate_t;

/* A parameter count: a decimal number (digits, optional fraction) with an
 * optional suffix k/K (1e3), m/M (1e6), b/B (1e9), t/T (1e12): "8B" → 8e9,
 * "120M" → 1.2e8, "1.5k" → 1500, "70b" → 7e10, "7" → 7.  Surrounding blanks
 * are ignored.  VSR_OK, or VSR_ERR_INVALID (empty, other suffix, junk,
 * more than 32 bytes).
 * The loader reads each card's once (param_size_value), with the same code:
 * this is vsr_config_param_size. */
int vsr__algo_parse_param_size(const char *s, double *out);

/* Writes to out[0..n) the candidate indices in the order they are tried.
 * The sort is stable (ties keep declared order) and unknown values go last
 * (in declared order).  automix: value_i = (1 − t)·quality_i + t·costScore_i
 * with costScore_i = 1 − cost_i / max_cost (max over the known costs; 1 when
 * max_cost is 0), unknown quality counted as 0.5 and unknown cost as
 * costScore 0.5 (so with automix nothing is "unknown"), t clamped to [0,1]
 * (NAN → 0.3).  automix sorts by value descending: the best trade-off is
 * tried first and a larger t (cost weighs more) brings cheaper models
 * forward, as the name of the knob says.  An unknown order is declared.
 * O(n²) (n is a decision's modelRefs). */
void vsr__algo_escalation_order(int order, const vsr_algo_candidate_t *c, size_t n, double tradeoff, size_t *out);

/* ==== ReMoM ================================================================ */

/* PCG32 (O'Neill, pcg-random.org, "pcg32": XSH-RR output, 64-bit state, LCG
 * multiplier 6364136223846793005, inc = (seq << 1) | 1), seeded as the
 * reference pcg32_srandom_r(initstate, initseq): state = 0, step,
 * state += initstate, step.  vsr__algo_pcg_seed(g, s) uses seq 54 (the
 * reference demo's), so seed 42 gives 0xa15c02b7, 0x7b47f409, 0xba1d3330 ... */
typedef struct {
    uint64_t state;
    uint64_t inc;
} vsr_algo_pcg_t;

#define VSR_ALGO_PCG_SEQ 54u

void vsr__algo_pcg_seed(vsr_algo_pcg_t *g, uint64_t seed);
void vsr__algo_pcg_seed_seq(vsr_algo_pcg_t *g, uint64_t seed, uint64_t seq);
uint32_t vsr__algo_pcg_next(vsr_algo_pcg_t *g);
/* Uniform in [0, n) without modulo bias (pcg32_boundedrand_r); 0 when n is 0. */
uint32_t vsr__algo_pcg_bounded(vsr_algo_pcg_t *g, uint32_t n);
/* Fisher–Yates: for i = n−1 down to 1, swap a[i] with a[bounded(i + 1)].
 * n must be <= UINT32_MAX. */
void vsr__algo_pcg_shuffle(vsr_algo_pcg_t *g, size_t *a, size_t n);

enum {
    VSR_ALGO_DIST_WEIGHTED = 0,
    VSR_ALGO_DIST_EQUAL,
    VSR_ALGO_DIST_ROUND_ROBIN,
    VSR_ALGO_DIST_FIRST_ONLY,
};

/* "weighted" (also empty) | "equal" | "round_robin" | "first_only" →
 * VSR_ALGO_DIST_*; VSR_ERR_INVALID otherwise. */
int vsr__algo_dist_parse(vsr_slice_t name);

/* Spreads n_calls calls of one round over k models; out[0..n_calls) gets a
 * model index per call.
 *   weighted: weights ≤ 0, NAN or infinite count as 0; share_i = n·w_i/Σw,
 *     each model gets floor(share_i), the calls left go one each to the
 *     largest fractional remainders; equal remainders are ranked by a
 *     permutation of the model indices shuffled by a PCG seeded with seed.
 *     All weights 0 → equal.  (weights may be NULL → equal.)
 *   equal: n/k each, the remainder one each to the first models.
 *   Both then list model 0's calls, model 1's, ... and shuffle that list with
 *   a fresh PCG seeded with seed.
 *   round_robin: call i → model i mod k.  first_only: every call → model 0.
 * Returns VSR_OK, or VSR_ERR_INVALID (k == 0 with n_calls > 0, unknown dist,
 * k > UINT32_MAX).  Scratch memory of O(k) is freed before return. */
int vsr__algo_remom_distribute(int dist, const double *weights, size_t k, size_t n_calls, uint64_t seed,
                               size_t *out);

/* The order in which a round's n answers are embedded in the next prompt:
 * indices sorted by lens ascending (stable), then shuffled by a PCG seeded
 * with seed, so the order does not depend on which call finished first.
 * out[0..n). */
void vsr__algo_remom_order(const size_t *lens, size_t n, uint64_t seed, size_t *out);

/* compaction_strategy last_n_tokens: the last ≈4·tokens bytes of text (a
 * token is taken as 4 bytes), the cut moved forward onto a UTF-8 character
 * start (at most 3 bytes).  tokens 0, or text no longer than the bound, gives
 * text whole.  A slice of text. */
vsr_slice_t vsr__algo_compact_last_tokens(vsr_slice_t text, uint64_t tokens);

/* The ReMoM synthesis prompt (replaces the last user message from round 2 on).
 * tmpl NULL or "" uses the built-in one:
 *   "You are given a question and {count} candidate responses to it from
 *    other models.\n\nQuestion:\n{question}\n\n{responses}\n\nReason about
 *    where the responses agree and disagree, correct their mistakes, and
 *    write a single, complete, best answer to the question. Answer the
 *    question directly; do not mention the candidate responses."
 * Placeholders: {question}, {responses} (each answer as
 * "Response <i>:\n<text>\n\n", i from 1, the last one without the blank
 * line), {count} (n); any other brace text is copied as is.  Returns VSR_OK
 * or VSR_ERR_TOO_BIG (out's cap). */
int vsr__algo_remom_prompt(vsr_buf_t *out, const char *tmpl, vsr_slice_t question, const vsr_slice_t *answers,
                           size_t n);

typedef struct {
    vsr_slice_t content;
    uint32_t round;        /* 1-based round number */
} vsr_algo_answer_t;

/* The ReMoM result: the first answer (array order) of round final_round whose
 * content is not empty or blank; else the longest non-blank answer of an
 * earlier round (length in bytes; ties favour the newer round, then the
 * earlier entry).  VSR_OK with *out its index, or VSR_ERR_NOT_FOUND. */
int vsr__algo_remom_pick(const vsr_algo_answer_t *a, size_t n, uint32_t final_round, size_t *out);

/* ==== Fusion =============================================================== */

/* The judge's analysis request (a user message appended to the conversation).
 * tmpl NULL/"" uses the built-in one:
 *   "Below are {count} responses from different models to the conversation
 *    above.\n\n{responses}\n\nCompare them. Reply with only a compact JSON
 *    object, no prose, with exactly these keys, each an array of at most 2
 *    short strings: \"consensus\" (points most responses agree on),
 *    \"contradictions\" (points where they disagree), \"partial_coverage\"
 *    (points only some address), \"unique_insights\" (valuable points made by
 *    one response), \"blind_spots\" (what all of them missed)."
 * {responses}: each as "Response <i> (<model>):\n<text>\n\n" (the last one
 * without the blank line); {count}.  VSR_OK or VSR_ERR_TOO_BIG. */
int vsr__algo_fusion_analysis_prompt(vsr_buf_t *out, const char *tmpl, const vsr_slice_t *models,
                                     const vsr_slice_t *answers, size_t n);

/* Reads the judge's analysis: content, after blanks are trimmed and an
 * optional Markdown fence (``` or ```json ... ```) is removed, must be one
 * JSON object.  The five keys (consensus, contradictions, partial_coverage,
 * unique_insights, blind_spots) are written in that order as arrays of at most
 * 2 strings: a string value counts as a one-element array, non-string
 * elements are dropped, a missing key or a null is [], other keys are
 * dropped.  *normalised_json is in the pool.  VSR_OK, or VSR_ERR_INVALID (not
 * JSON, not an object, a key of another type, nothing but empty arrays). */
int vsr__algo_fusion_parse_analysis(vsr_slice_t content, vsr_pool_t *pool, vsr_slice_t *normalised_json);

/* The final synthesis request (a user message appended to the conversation).
 * tmpl NULL/"" uses the built-in one:
 *   "Here are {count} responses from different models to the request
 *    above.\n\n{responses}\n\n{analysis}<instruction>\n\nOutput contract:
 *    reply with only the final answer for the user, written as if you were
 *    answering the request directly; do not mention the other models, their
 *    responses or this analysis."
 * where {analysis} is "An analysis of the responses (JSON):\n<json>\n\n" when
 * analysis_json is not empty, else nothing; <instruction> is "Synthesize the
 * single best answer: keep what they agree on, resolve contradictions on the
 * merits, and add what only one of them got right." and, with one_call, is
 * preceded by "First compare the responses for consensus, contradictions,
 * partial coverage, unique insights and blind spots, silently. ".
 * Placeholders: {question} (the question text), {responses} (as in the
 * analysis prompt), {analysis}, {count}.  A template without
 * "Output contract" gets the contract line appended after "\n\n".
 * VSR_OK or VSR_ERR_TOO_BIG. */
int vsr__algo_fusion_synthesis_prompt(vsr_buf_t *out, const char *tmpl, vsr_slice_t question,
                                      const vsr_slice_t *models, const vsr_slice_t *answers, size_t n,
                                      vsr_slice_t analysis_json, int one_call);

/* ==== Response assembly ==================================================== */

/* The ratings answer (ref shape):
 * {"id":"chatcmpl-looper-<id_nanos>","object":"chat.completion","created":C,
 *  "model":"m1,m2","choices":[{"index":0,"message":{"role":"assistant",
 *  "content":"..."},"finish_reason":"stop","model":"m1"},...],
 *  "usage":{"prompt_tokens":pt,"completion_tokens":ct,"total_tokens":pt+ct}}
 * models and contents are unescaped texts (escaped here).  VSR_OK or
 * VSR_ERR_TOO_BIG. */
int vsr__algo_ratings_response(vsr_buf_t *out, uint64_t id_nanos, uint64_t created, const vsr_slice_t *models,
                               const vsr_slice_t *contents, size_t n, uint64_t pt, uint64_t ct);

/* body (a JSON object) with its top-level "usage" value replaced by
 * {"prompt_tokens":pt,"completion_tokens":ct,"total_tokens":pt+ct} (added
 * as the last member when absent) and, when extra_member is not empty, that
 * text (a complete member, e.g. "\"reasoning_mom_responses\":[...]") added as
 * the last member; every other byte is copied as is.  VSR_OK,
 * VSR_ERR_INVALID (not a JSON object) or VSR_ERR_TOO_BIG. */
int vsr__algo_with_usage(vsr_buf_t *out, const char *body, size_t len, uint64_t pt, uint64_t ct,
                         vsr_slice_t extra_member);

/* Content pieces of a streamed answer are at most this many bytes. */
#define VSR_ALGO_SSE_PIECE 1024

/* A chat.completion as the OpenAI stream of chat.completion.chunk events,
 * each "data: {...}\n\n" with the body's id, created and model:
 * per choice, in order: a chunk with delta {"role":"assistant","content":
 * first piece} (pieces of <= VSR_ALGO_SSE_PIECE bytes cut on UTF-8
 * boundaries; further pieces as delta {"content":...}), reasoning_content
 * likewise before the content when present, message.tool_calls as one delta
 * {"tool_calls":[...]} with an "index" (its position) added to each call that
 * has none, line breaks of the raw JSON dropped; then a chunk with
 * delta {} and the choice's finish_reason ("stop" when absent); then, with
 * include_usage, a chunk with "choices":[] and the body's usage (zeros when
 * absent); then "data: [DONE]\n\n".  VSR_OK, VSR_ERR_INVALID (what
 * vsr__algo_completion_parse refuses) or VSR_ERR_TOO_BIG. */
int vsr__algo_sse_from_completion(vsr_buf_t *out, const char *body, size_t len, int include_usage);

#endif /* VSR_GRAPH_ALGO_H */
