/*
 * signals — rule-based routing signals (ref §1.9), one file per type, each
 * registered by condition type with a compile step (once per recipe per
 * configuration snapshot) and an evaluator (per request, only for signals the
 * recipe's decisions reference).
 *
 * Types: keyword (methods exact/regex/fuzzy/ngram/bm25), context, structure,
 * conversation, language, authz (role_bindings), metadata (the request
 * body's "metadata" object), event (event words in the routing text); and
 * embedding, model-backed (see "model-backed signals" below).  Rule-based signals yield
 * confidence 1.0 when they match (language: the detector's confidence;
 * structure with a predicate: the reference's sigmoid of the distance to the
 * bound, 0.5..1).  docs/signals.md has the exact semantics of each type.
 *
 * Threading: a compiled vsr_signals_t is immutable and may be evaluated from
 * several threads at once (per-request scratch, e.g. PCRE2 match data, comes
 * from the caller's pool; nothing is thread-local).
 */
#ifndef VSR_SIGNALS_H
#define VSR_SIGNALS_H

#include "base/base.h"
#include "config/config.h"
#include "json/json.h"

typedef struct vsr_signals_s vsr_signals_t;

/* Per-request memo: work that several signals of one request share (the one
 * pass over the routing text that matches every literal keyword of the
 * recipe, the lower-cased text, the detected language) is done on first use
 * and reused by the next evaluations.  Zero one per request, point
 * vsr_signal_input_t.memo at it and keep the same text and pool for the whole
 * request; its storage comes from the pool.  memo NULL = no sharing (same
 * results, each evaluation redoes the shared work).  A memo serves one
 * request on one thread. */
typedef struct {
    void *_state; /* private */
} vsr_signals_memo_t;

/* What a signal sees of a request. */
typedef struct {
    const vsr_chat_view_t *chat;   /* messages; chat->last_user is the routing text's message */
    vsr_slice_t text;              /* the routing text: the latest user message's text (empty when none) */
    /* identity (only from trusted headers; present = a user id was given) */
    int identity_present;
    vsr_slice_t user_id;
    const vsr_slice_t *groups;
    size_t n_groups;
    vsr_pool_t *pool;              /* request-scoped scratch (NULL: a temporary pool per evaluation) */
    vsr_signals_memo_t *memo;      /* optional, see vsr_signals_memo_t */
} vsr_signal_input_t;

typedef struct {
    int matched;
    double confidence;             /* 1.0 for rule-based matches; 0 when not matched */
    double value;                  /* the measured quantity, for traces: token count, count, detected-language confidence... */
    vsr_slice_t evidence;          /* model-backed signals: a JSON value from the input's pool saying what decided it
                                    * (the classifier's answer: labels, entity spans, scores), for traces; else empty */
    const char *label;             /* classifiers: the winning label (the compiled signals' storage), else NULL */
} vsr_signal_result_t;

/* metadata signals read the body's "metadata" object; one
 * larger than this many bytes or JSON tokens counts as absent. */
#define VSR_SIGNALS_MAX_METADATA_BYTES 16384
#define VSR_SIGNALS_MAX_METADATA_TOKENS 1024

/* The embeddings signals of one recipe hold at most this many candidates
 * plus one routing text each (their first request embeds them in one
 * runtime bundle, which holds at most 2048 inputs). */
#define VSR_SIGNALS_MAX_RECIPE_CANDIDATES 2048

/* Compiles every signal a recipe declares (keyword sets and regexes are
 * compiled here, once).  NULL with one "path: message" line per problem
 * appended to err (e.g. a regex that does not compile). */
vsr_signals_t *vsr_signals_compile(const vsr_recipe_conf_t *recipe, vsr_buf_t *err);
void vsr_signals_free(vsr_signals_t *s); /* accepts NULL */

size_t vsr_signals_count(const vsr_signals_t *s);
/* Index of signal (condition type, name), or -1.  Condition types are the
 * rule leaf `type` values: keyword, context, structure, conversation,
 * language, authz. */
int vsr_signals_find(const vsr_signals_t *s, const char *cond_type, const char *name);
const char *vsr_signals_name(const vsr_signals_t *s, int i);
/* The name evidence reports for signal i (x-vsr-matched-<family>): its
 * name, except for authz, whose matches report the binding's role, as the
 * reference's x-vsr-matched-authz does. */
const char *vsr_signals_report_name(const vsr_signals_t *s, int i);
/* The family of signal i as named in x-vsr-matched-<family>: keywords,
 * context, structure, conversation, language, authz (the YAML family
 * role_bindings reports as "authz", as the reference's header does). */
const char *vsr_signals_family(const vsr_signals_t *s, int i);
/* Evaluates signal i for one request. */
vsr_signal_result_t vsr_signals_eval(const vsr_signals_t *s, int i, const vsr_signal_input_t *in);

/* ---- model-backed signals ----
 * A signal whose value a model computes does not evaluate on the spot: for
 * one request it asks for a runtime task (a kind such as embed or classify,
 * and a JSON payload), the routing core sends every task of the request's
 * phase to the runtime as one bundle, and the signal reads its value from
 * the task's JSON result.  The core does the waiting; signals stay pure. */
/* The task kind of a model call made by the router itself (through the
 * upstream layer, not the runtime): payload {"model": PROVIDER_MODEL,
 * "timeout_ms": N (optional), "body": {chat completion request}}; the
 * result given to consume is the model's chat.completion body. */
#define VSR_SIGNAL_TASK_CHAT "chat"
/* The task kind of a remote classifier's call (docs/signals.md "Bring a
 * bigger model"), made by the router through the upstream layer: payload
 * {"model": EXTERNAL, "timeout_ms": N, "path": "/classify" | "/v1/classify",
 * "body": {...}} names a global.model_catalog.external[] entry; the body is
 * sent as is and the endpoint's answer given to consume.  Tasks with the
 * same payload in one request share one call. */
#define VSR_SIGNAL_TASK_REMOTE "remote_classify"

typedef struct {
    const char *type;              /* the task kind */
    vsr_slice_t payload;           /* a JSON object, from the input's pool */
} vsr_signal_task_t;

/* 1 when a recipe's signals declare any of a model-backed family (one
 * whose signals ask the runtime for tasks) or of a family registered at
 * run time: such a recipe needs the model runtime. */
int vsr_signals_conf_model_backed(const vsr_signals_conf_t *conf);

/* 1 when signal i needs a runtime task for this request (*out filled from
 * in->pool), 0 when it evaluates with vsr_signals_eval (every rule-based
 * signal), -1 when it cannot be computed for this request (it is unknown,
 * as when its task failed: an llm classifier). */
int vsr_signals_task(const vsr_signals_t *s, int i, const vsr_signal_input_t *in, vsr_signal_task_t *out);
/* Reads signal i's value from its task's result.  VSR_OK, or
 * VSR_ERR_INVALID when the result is unusable (the signal is then unknown,
 * as when the task failed). */
int vsr_signals_consume(const vsr_signals_t *s, int i, const vsr_signal_input_t *in, vsr_slice_t result,
                        vsr_signal_result_t *out);
/* The prompt guard outside a signal (the response_jailbreak plugin scans an
 * answer with it): the classify task the jailbreak signal makes for `text`
 * ({"model":"jailbreak","text":T,"method":M}, T shortened to what the model
 * sees, as the signal's), its payload from pool; method a vsr_jb_method_t.
 * guard_score reads the `jailbreak` label's score from the task's result, as
 * the signal does: VSR_OK, or VSR_ERR_INVALID for an unusable result. */
void vsr_signals_guard_task(vsr_pool_t *pool, vsr_slice_t text, int method, vsr_signal_task_t *out);
int vsr_signals_guard_score(vsr_slice_t result, vsr_pool_t *pool, double *score);
/* A remote classifier's answer (docs/signals.md "Bring a bigger model")
 * appended to out in the runtime's result shape: {"labels": [...]}, or with
 * entities {"entities": [...]}.  distribution: the scores must add up to 1
 * (contract label_distribution).  Strings are unescaped into pool.  VSR_OK,
 * or VSR_ERR_INVALID with *why (static) saying what is wrong; out may then
 * hold a partial text. */
int vsr_signals_remote_answer(vsr_slice_t answer, int entities, int distribution, vsr_pool_t *pool, vsr_buf_t *out,
                              const char **why);
/* A signal computed with signal i whenever i is (a safety rule's hazard
 * stage on a classifier of its own; no rule names it): its index, or -1. */
int vsr_signals_companion(const vsr_signals_t *s, int i);
/* Joins companions into their signals once a request's tasks are settled
 * (memo, done and unknown as the routing core keeps them, one entry per
 * signal): a matched safety signal keeps its match only when its hazard
 * stage's score reaches hazard.threshold, and is unknown when that stage
 * could not be computed. */
void vsr_signals_combine(const vsr_signals_t *s, vsr_signal_result_t *memo, const unsigned char *done,
                         unsigned char *unknown);
/* The on_error policy of signal i's family (VSR_ON_ERROR_DEFAULT: none). */
vsr_on_error_t vsr_signals_on_error(const vsr_signals_t *s, int i);

/* A family of signals added at run time (its signals are declared in
 * vsr_signals_conf_t.ext): the same interface as the built-in families'.
 * compile builds one signal's state from its conf (VSR_OK, or an error with
 * "path: message" lines appended to err); eval (may be NULL: never
 * matches) is the rule-based evaluation; task and consume (both NULL for a
 * rule-based family) are the model-backed one, as vsr_signals_task and
 * vsr_signals_consume.  Every function may run on several threads at once
 * for different requests. */
typedef struct {
    const char *cond_type;         /* rule leaf `type` */
    const char *family;            /* x-vsr-matched-<family> */
    int (*compile)(const vsr_sig_ext_conf_t *conf, const char *path, void **state, vsr_buf_t *err);
    void (*free)(void *state);
    vsr_signal_result_t (*eval)(const void *state, const vsr_signal_input_t *in);
    int (*task)(const void *state, const vsr_signal_input_t *in, vsr_signal_task_t *out);
    int (*consume)(const void *state, const vsr_signal_input_t *in, vsr_slice_t result, vsr_signal_result_t *out);
} vsr_signal_family_t;

#define VSR_SIGNALS_MAX_EXT_FAMILIES 8
/* Signals declared in vsr_signals_conf_t.ext are not part of a recipe's
 * signals_hash: a new version reuses compiled signals by that hash, so code
 * that changes ext signals builds the engine without a previous version.
 * Registers f (borrowed: static storage) process-wide.  Only at start-up,
 * before any compile and before other threads run (not thread-safe).
 * VSR_OK; VSR_ERR_TOO_BIG past VSR_SIGNALS_MAX_EXT_FAMILIES; VSR_ERR_INVALID
 * when its condition type is taken. */
int vsr_signals_register_family(const vsr_signal_family_t *f);

/* The context token estimate of the reference: ceil(bytes / 4) over all
 * messages' text (the larger of chat->text_bytes and the sum of the
 * messages' text lengths). */
uint64_t vsr_signals_token_estimate(const vsr_chat_view_t *chat);

#endif /* VSR_SIGNALS_H */
