/*
 * routing — the transport-agnostic routing core: what happens to a request
 * between the edge and the model backend, identical whatever adapter (the
 * standalone HTTP frontend, or Envoy's ext_proc) carries it.
 *
 * An engine is the compiled routing state of one configuration (recipes,
 * their compiled signals).  A session is one request: it pins the engine
 * (refcount) from open to its single finish, and goes through four phases in
 * order — request headers, request body, response headers, response body —
 * each answering an Effect.  The adapter applies effects with Envoy's rules:
 * removals before sets; host, :authority, :method, :scheme and x-envoy-*
 * are never mutated; a replaced body gets its content-length recomputed.
 *
 * No socket, event loop or HTTP writer type appears here: sessions are
 * driven directly by unit tests.
 *
 * Threading: an engine is immutable and shared by every worker; sessions
 * belong to one thread.  Memory: everything a session returns (effects,
 * plan, evidence) lives in the session's pool until vsr_session_finish().
 */
#ifndef VSR_ROUTING_H
#define VSR_ROUTING_H

#include "base/base.h"
#include "config/config.h"
#include "json/json.h"

typedef struct vsr_engine_s vsr_engine_t;
typedef struct vsr_session_s vsr_session_t;

typedef struct {
    vsr_slice_t name;
    vsr_slice_t value;
} vsr_header_t;

/* ---- Effect: what a phase asks the adapter to do ---- */
typedef struct {
    /* header removals, then sets (a set overwrites every field of that name) */
    vsr_slice_t *remove;
    size_t n_remove;
    vsr_header_t *set;
    size_t n_set;
    /* body replacement: the new body as pieces (slices of the client's body and of new text) */
    int body_replaced;
    vsr_slice_t *body;
    size_t n_body;
    uint64_t body_len;
    int clear_route_cache;
    /* immediate response: status != 0 ends the request with this answer; no
     * model is called and no further phase runs */
    int status;
    vsr_header_t *resp_headers;
    size_t n_resp_headers;
    vsr_slice_t resp_body;
} vsr_effect_t;

/* ---- Plan ---- */
typedef enum { VSR_PLAN_NONE = 0, VSR_PLAN_IMMEDIATE, VSR_PLAN_CALL, VSR_PLAN_PROGRAM } vsr_plan_kind_t;

typedef struct {
    vsr_plan_kind_t kind;
    /* call: the route (Envoy's route key = x-selected-model) and its cluster */
    const vsr_model_conf_t *model;
    vsr_slice_t route_key;
    int rewrite_prefix;            /* a /v1 path: base_url prefixes apply */
    const vsr_reliability_conf_t *reliability; /* the decision's override of the model's policy, or NULL */
    /* budget */
    uint64_t deadline_ms;          /* 0 = the listener's timeout */
    uint32_t max_hops;
} vsr_plan_t;

/* ---- Evidence: why, for headers, logs, metrics and traces ---- */
typedef struct {
    const char *family;            /* keywords, context, ... */
    const char *name;
    double confidence;
    double value;
} vsr_signal_hit_t;

typedef enum {
    VSR_PATH_NONE = 0, VSR_PATH_UPSTREAM, VSR_PATH_FAST_RESPONSE, VSR_PATH_ERROR,
} vsr_response_path_t;

typedef struct {
    const char *recipe;            /* NULL for passthrough */
    const char *decision;          /* NULL when no decision matched */
    double confidence;
    const char *algorithm;         /* "static" when a decision was selected */
    const char *selected_model;    /* logical model name */
    const char *upstream_model;    /* the id sent upstream */
    vsr_response_path_t path;
    int passthrough;
    int decision_evaluated;
    vsr_signal_hit_t *signals;     /* every evaluated signal that matched */
    size_t n_signals;
    uint64_t context_tokens;
    uint64_t routing_us;           /* time spent in the request-body phase */
    int injected_system_prompt;
    int debug;                     /* the client sent x-vsr-debug: true */
    unsigned fallbacks;            /* candidates tried after the first */
} vsr_evidence_t;

/* ---- engine ---- */

/* Compiles the routing state of cfg (borrowed: it must outlive the engine).
 * NULL with messages appended to err when a recipe's signals do not compile.
 * The returned engine has one reference. */
vsr_engine_t *vsr_engine_new(const vsr_config_t *cfg, uint64_t version, vsr_buf_t *err);
/* Same, reusing the compiled signals of every recipe of prev (may be NULL)
 * whose name and signals_hash are unchanged: a change to one recipe
 * recompiles only that recipe's signals.  prev is only read here. */
vsr_engine_t *vsr_engine_new_from(const vsr_config_t *cfg, const vsr_engine_t *prev, uint64_t version, vsr_buf_t *err);
/* How many recipes' signals were reused from prev. */
size_t vsr_engine_reused_recipes(const vsr_engine_t *e);
vsr_engine_t *vsr_engine_ref(vsr_engine_t *e);   /* thread-safe */
void vsr_engine_unref(vsr_engine_t *e);          /* thread-safe; frees at zero; accepts NULL */
uint64_t vsr_engine_version(const vsr_engine_t *e);

/* ---- the engine as a configuration snapshot ----
 * An engine is what a request pins: with vsr_engine_adopt() it also owns
 * its configuration (cfg, the one it was built from) and knows its content
 * hash; vsr_engine_set_part() gives it one more part of the version (the
 * composition root's upstream state, freed by part_free).  All of it goes
 * with the last reference, i.e. when the last request on that version
 * finishes (drain).  These setters are for the builder, before the engine
 * is shared. */
void vsr_engine_adopt(vsr_engine_t *e, vsr_config_t *cfg, const char *hash);
void vsr_engine_set_part(vsr_engine_t *e, void *part, void (*part_free)(void *part));
void vsr_engine_set_version(vsr_engine_t *e, uint64_t version);
const vsr_config_t *vsr_engine_config(const vsr_engine_t *e);
const char *vsr_engine_hash(const vsr_engine_t *e);  /* "" when none was given */
void *vsr_engine_part(const vsr_engine_t *e);

/* ---- session ---- */

typedef struct {
    const vsr_listener_conf_t *listener; /* allow-list, identity trust */
    int identity_trusted;                /* the adapter judged the peer trusted for identity headers */
} vsr_session_opts_t;

vsr_session_t *vsr_session_open(vsr_engine_t *e, const vsr_session_opts_t *opts);
/* Request headers: validates the path and method (404/405 immediate
 * answers for /v1 paths), answers GET /v1/models, and notes what the body
 * phase needs.  Borrowed slices must stay valid until the body phase
 * returns.  A path outside /v1 becomes a call to the default model with the
 * body untouched (Envoy's default route); no body phase is needed then, but
 * calling it is harmless. */
const vsr_effect_t *vsr_session_request_headers(vsr_session_t *s, vsr_slice_t method, vsr_slice_t path,
                                                const vsr_header_t *headers, size_t n_headers);
/* Request body (complete): model-name resolution, signals, decision,
 * plugins, the upstream request's rewrites.  The body is borrowed until
 * finish (the effect's pieces point into it). */
const vsr_effect_t *vsr_session_request_body(vsr_session_t *s, const char *body, size_t len);
/* Response headers from the upstream (status and fields): adds the x-vsr-*
 * surface. */
const vsr_effect_t *vsr_session_response_headers(vsr_session_t *s, int status, const vsr_header_t *headers,
                                                 size_t n_headers);
/* Response body (a chunk, or the whole body): no response plugin yet, so no
 * change; present so adapters drive every phase. */
const vsr_effect_t *vsr_session_response_body(vsr_session_t *s, const char *chunk, size_t len, int end_of_stream);

/* Cross-model fallback (ref §1.7): re-aims the request at the decision's
 * next candidate (modelRefs in order, a model already tried is never
 * revisited; `allow` may veto one, e.g. its circuit is open) and returns the
 * new request effect, the same shape as the body phase's; the plan and the
 * evidence follow.  NULL when no candidate remains (or the request was not
 * routed by a decision). */
const vsr_effect_t *vsr_session_fallback(vsr_session_t *s, int (*allow)(void *ud, const vsr_model_conf_t *m),
                                         void *ud);
/* The fallback policy in force for this request (defaults, global, recipe, decision). */
void vsr_session_fallback_policy(const vsr_session_t *s, vsr_fallback_conf_t *out);
/* The models tried so far, in order. */
const vsr_model_conf_t *const *vsr_session_tried(const vsr_session_t *s, size_t *n);

const vsr_plan_t *vsr_session_plan(const vsr_session_t *s);
const vsr_evidence_t *vsr_session_evidence(const vsr_session_t *s);
/* Ends the session once: unpins the engine, frees everything it returned. */
void vsr_session_finish(vsr_session_t *s);

/* ---- routing preview (management API) ---- */

/* Runs model resolution, signals and the decision for `model` and `text` (as
 * one user message) without calling anything, and writes the JSON answer of
 * POST /api/v1/routing/preview into out; with trace, also the evaluation
 * trace.  Returns the HTTP status (200, or 400 with an error body). */
int vsr_engine_preview(vsr_engine_t *e, vsr_slice_t model, vsr_slice_t text, int trace, vsr_buf_t *out);

#endif /* VSR_ROUTING_H */
