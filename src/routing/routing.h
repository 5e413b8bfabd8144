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
 * driven directly by unit tests.  Work the core cannot do itself (a model
 * runtime's bundle of tasks; later a model call) goes through ports the
 * adapter lends the session when it opens it (vsr_ports_t): a phase that
 * needs it answers a *pending* effect, and the final effect comes later
 * through the adapter's resume callback, on the same thread.
 *
 * Threading: an engine is immutable and shared by every worker; sessions
 * belong to one thread.  Memory: everything a session returns (effects,
 * plan, evidence) lives in the session's pool until vsr_session_finish().
 */
#ifndef VSR_ROUTING_H
#define VSR_ROUTING_H

#include "base/base.h"
#include "config/config.h"
#include "graph/graph.h"
#include "json/json.h"

typedef struct vsr_engine_s vsr_engine_t;
typedef struct vsr_session_s vsr_session_t;

typedef struct {
    vsr_slice_t name;
    vsr_slice_t value;
} vsr_header_t;

/* ---- Effect: what a phase asks the adapter to do ---- */

/* How the response body reaches the client, as the response headers phase
 * says (vsr_effect_t.body_mode):
 *  RELAY:  the upstream's bytes as they come (the response body phase may
 *          still be called with them; it changes nothing);
 *  STREAM: every chunk goes through vsr_session_response_body, whose
 *          effect's body pieces replace it (possibly empty), and a last
 *          call with end_of_stream gives what ends the stream.  The
 *          upstream's content-length no longer holds: the adapter frames
 *          the body itself (chunked, HTTP/2 DATA, or close-delimited);
 *  BUFFER: the adapter holds the response head; every chunk goes through
 *          the response body phase (nothing to send yet) and the call with
 *          end_of_stream gives the whole body, plus, when status != 0, the
 *          status that replaces the upstream's, and resp_headers to set on
 *          the held head (content-type...).  The adapter sends the head
 *          then, with the body's length. */
typedef enum { VSR_BODY_RELAY = 0, VSR_BODY_STREAM, VSR_BODY_BUFFER } vsr_body_mode_t;

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
    /* 1: the phase waits on its ports; nothing else in this effect is set
     * and there is nothing to apply yet.  The phase's final effect comes
     * through vsr_ports_t.resume (see "ports" below). */
    int pending;
    /* request phases: the upstream request's path replaces the client's
     * (the body was translated to another protocol: "/v1/chat/completions"
     * for Messages ingress, "/v1/messages" for an api_format: anthropic
     * model); empty = the client's path.  base_url prefixes apply to it. */
    vsr_slice_t path;
    /* response headers phase: how the body goes to the client (below) */
    vsr_body_mode_t body_mode;
    /* response headers phase, RELAY: the adapter still passes every chunk
     * and the end to vsr_session_response_body (a plugin keeps a copy on
     * the side, e.g. the response cache); nothing changes for the client */
    int observe;
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

/* One signal family's evaluation time for a request (signal_families_us). */
typedef struct {
    const char *family;            /* as vsr_signal_hit_t.family */
    uint64_t us;
} vsr_family_time_t;
#define VSR_EVIDENCE_MAX_FAMILIES 32 /* families timed per request (there are fewer) */

/* ---- live per-model statistics (model_stats.c) ----
 *
 * What the selectors read, /metrics renders and the management API lists:
 * per model, windowed TTFT, TPOT and total latency (log-spaced histograms
 * of the last one to two windows), requests in flight, the window's
 * requests and failures, and the tokens and cost observed since start.
 * Each worker writes its own shard (shard = its index), readers merge them;
 * every function is thread-safe.  Models are keyed by name: at most
 * VSR_MODEL_STATS_MAX_MODELS names of at most VSR_MODEL_STATS_MAX_NAME
 * bytes; others are not recorded. */
typedef struct vsr_model_stats_s vsr_model_stats_t;
#define VSR_MODEL_STATS_MAX_MODELS 256
#define VSR_MODEL_STATS_MAX_NAME 256
#define VSR_MODEL_STATS_WINDOW_MS 60000

typedef enum { VSR_MSTAT_TTFT = 0, VSR_MSTAT_TPOT, VSR_MSTAT_LATENCY, VSR_MSTAT_N } vsr_mstat_t;

/* One finished request, as the model that served it saw it; a negative time is not observed. */
typedef struct {
    double ttft_ms, tpot_ms, latency_ms;
    int error;                         /* a failure: no answer, or a 5xx / 429 */
    uint64_t prompt_tokens, completion_tokens;
    double cost;                       /* from providers.models[].pricing, in its currency */
} vsr_model_obs_t;

typedef struct {
    int64_t inflight;
    uint64_t window_requests, window_errors;
    uint64_t requests, errors, prompt_tokens, completion_tokens;
    double cost;
    uint64_t n[VSR_MSTAT_N];           /* samples in the window */
    double pct_ms[VSR_MSTAT_N][3];     /* p50, p95, p99 (-1: no sample) */
} vsr_model_stats_view_t;

/* window_ms 0 = VSR_MODEL_STATS_WINDOW_MS; n_shards 0 = 1. */
vsr_model_stats_t *vsr_model_stats_new(unsigned n_shards, uint64_t window_ms);
void vsr_model_stats_free(vsr_model_stats_t *m);   /* NULL is a no-op */
/* Tests: the clock windows are counted on (NULL: vsr_now_ms). */
void vsr_model_stats_set_clock(vsr_model_stats_t *m, uint64_t (*now_ms)(void));
/* Writers (shard's own thread only); m NULL is a no-op. */
void vsr_model_stats_inflight(vsr_model_stats_t *m, unsigned shard, vsr_slice_t model, int delta);
void vsr_model_stats_observe(vsr_model_stats_t *m, unsigned shard, vsr_slice_t model, const vsr_model_obs_t *o);
/* The pct-th percentile (1..100) of a statistic in the window, in ms: 1,
 * or 0 when the window holds no sample.  Under 3 samples: their mean (the
 * reference's rule before a percentile means anything). */
int vsr_model_stats_percentile(const vsr_model_stats_t *m, vsr_slice_t model, vsr_mstat_t which, unsigned pct,
                               double *ms);
/* Requests in flight to the model now, all shards (0 when never seen). */
int64_t vsr_model_stats_inflight_now(const vsr_model_stats_t *m, vsr_slice_t model);
/* Everything about one model: 0 when it was never seen. */
int vsr_model_stats_view(const vsr_model_stats_t *m, vsr_slice_t model, vsr_model_stats_view_t *v);
uint64_t vsr_model_stats_window_ms(const vsr_model_stats_t *m);
size_t vsr_model_stats_names(const vsr_model_stats_t *m, const char **names, size_t cap);
/* Prometheus text (vsr_model_*), appended to out; m NULL appends nothing. */
void vsr_model_stats_render(const vsr_model_stats_t *m, vsr_buf_t *out);
/* The management API's JSON: {"window_seconds":..,"models":[{...}]}. */
void vsr_model_stats_json(const vsr_model_stats_t *m, vsr_buf_t *out);

/* A selector's choice, for the evidence, the preview and the trace. */
typedef struct {
    const char *algorithm;             /* "latency_aware" | "multi_factor" */
    size_t n;                          /* candidates (the decision's modelRefs, at most 64) */
    const char *const *models;         /* n */
    const double *scores;              /* n */
    const unsigned char *scored;       /* n: 1 when scores[i] counts */
    const char *const *dropped;        /* n: why left out, or NULL */
    int chosen;                        /* index, -1 when the selector failed */
    const char *warning;               /* the first candidate was taken: why */
    int probe;                         /* chosen has no statistics yet: tried to get some */
    uint64_t start_us, end_us;         /* monotonic, for the trace span */
} vsr_selection_t;

typedef enum {
    VSR_PATH_NONE = 0, VSR_PATH_UPSTREAM, VSR_PATH_FAST_RESPONSE, VSR_PATH_ERROR, VSR_PATH_LOOPER, VSR_PATH_CACHE,
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
    vsr_family_time_t *family_times; /* per signal family evaluated, first evaluated first */
    size_t n_family_times;
    /* the phase's runtime call (model signals' bundle), for a trace span: 0
     * start when none was made.  Monotonic µs (vsr_now_us). */
    uint64_t runtime_start_us, runtime_end_us;
    unsigned runtime_tasks;        /* tasks in its bundle */
    int runtime_status;            /* VSR_OK, or the call's error (VSR_ERR_IO ...); 1: cancelled or unanswered */
    unsigned chat_tasks;           /* model calls the phase made itself (llm and remote classifiers) */
    /* the phase's remote classifier calls: answered and read, failed (no answer in time, no connection, a
     * non-2xx status, an answer over the bound), answered with something that is not the contract's */
    unsigned remote_ok, remote_failed, remote_invalid;
    int injected_system_prompt;
    /* the tools and context_compression plugins, when they changed the request */
    int tools_applied;
    size_t tools_before, tools_after;
    /* the tools' semantic selection: 0 none, 1 on similarities, 2 failed
     * open (no similarities: the runtime down, a failed task, the deadline);
     * the tools added from the database; the names kept or added (pool) */
    int tools_selection;
    const char *memory;            /* the memory plugin: used, missing, skipped, unavailable; NULL: none ran */
    size_t tools_added;
    vsr_slice_t tools_selected;
    int compression_applied;
    uint64_t compression_tokens_before, compression_tokens_after;
    size_t compression_messages;   /* messages whose content was cut */
    /* the rag plugin: injected | cached | empty | failed | blocked (NULL: not run), and the backend asked */
    const char *rag, *rag_backend;
    int debug;                     /* the client sent x-vsr-debug: true */
    unsigned fallbacks;            /* candidates tried after the first */
    /* the decision's request graph (a Looper algorithm), NULL when none ran:
     * its calls, models used, summed tokens; valid until finish */
    const vsr_graph_outcome_t *looper;
    /* the response cache: 1 hit, 0 miss, -1 not looked up; the hit's similarity */
    int cache_hit;
    double cache_similarity;
    /* response_jailbreak: the answer's scan, "pass" | "flagged" | "blocked" |
     * "error" (failed or late: the answer went out unchanged), NULL when not
     * scanned; and the warning codes of x-vsr-response-warnings (bits, in
     * the reference's order: 1 hallucination, 2 unverified_factual, 4
     * response_jailbreak) */
    const char *response_guard;
    double response_guard_score;
    unsigned response_warnings;
    /* hallucination: what the plugin made of the answer (detected,
     * not_detected, context_unavailable, evaluation_failed,
     * not_enforced_streaming), NULL when it did not look */
    const char *hallucination;
    /* a single-call selector's choice (latency_aware, multi_factor), NULL
     * when none ran; valid until finish */
    const vsr_selection_t *selection;
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

/* ---- ports: waiting without blocking ----
 *
 * A port call starts work outside the core and returns at once; the work
 * completes through the done callback it was given.  Rules every port
 * follows (the core relies on them):
 *
 * - Threading: done runs on the thread that owns the session (the
 *   adapter's worker), from the adapter's own event callback, never from
 *   another thread.  It may run before the port call returns (a
 *   synchronous answer, e.g. an immediate error): the call then returns
 *   NULL.  Otherwise the call returns a non-NULL handle and done runs
 *   later, exactly once, unless the handle is cancelled first.
 * - A port that cannot start the work calls done with an error; it never
 *   returns NULL without having called done.
 * - Cancellation: cancel(ud, handle) on a handle whose done has not run
 *   yet; done is then never called.  The core never cancels a handle
 *   whose done has run.
 * - Memory: what the port is given (the bundle, its payloads) is borrowed
 *   for the call only: the port copies what it keeps.  What done is given
 *   (results) is borrowed for the duration of done: the core copies what
 *   it keeps.
 * - Time: deadline_ms is absolute, on the now_ms clock.  The port ends the
 *   work by then (done with an error); an answer that arrives after it
 *   counts as late (the core checks now_ms when done runs).
 */

/* One model task of a runtime bundle (the runtime's POST /v1/bundle:
 * {"tasks":[{"id":ID,TYPE:PAYLOAD}],"options":{"deadline_ms":...}}). */
typedef struct {
    const char *id;        /* unique within its bundle */
    const char *type;      /* the task kind: embed, classify, ... */
    vsr_slice_t payload;   /* the task's JSON object */
} vsr_runtime_task_t;

/* Every model task of one request phase: one runtime call. */
typedef struct {
    const vsr_runtime_task_t *tasks;
    size_t n_tasks;        /* >= 1 */
} vsr_runtime_bundle_t;

/* One task's answer. */
typedef struct {
    const char *id;        /* the task's id (a result whose id is not in the bundle is ignored) */
    int status;            /* VSR_OK, or VSR_ERR_*: this task failed */
    vsr_slice_t result;    /* VSR_OK: the task's JSON result */
} vsr_runtime_result_t;

/* The end of a runtime call: status VSR_OK with the results it carries (any
 * order; a task without a result failed), or an error for the whole call
 * (VSR_ERR_IO: the runtime cannot be reached; VSR_ERR_TOO_BIG: it refused
 * the load; VSR_ERR: anything else) with no results. */
typedef void (*vsr_runtime_done_fn)(void *done_ud, int status, const vsr_runtime_result_t *results,
                                    size_t n_results);

/* The response cache's store (the response_cache plugin; the adapter opens
 * one per worker from global.stores.response_cache).  A lookup tries the
 * exact key when `exact`, then, when embedding is set, the most similar
 * entry of the same scope and partition at or above threshold. */
#define VSR_CACHE_DIM 512
typedef struct {
    vsr_slice_t key;           /* the exact key */
    const float *embedding;    /* VSR_CACHE_DIM floats of unit length, or NULL */
    vsr_slice_t scope;         /* "" = global, else the user's ("u:...") or the API key's ("k:...") */
    vsr_slice_t partition;     /* the decision, the model, the revision keys and the semantic context */
    double threshold;          /* semantic lookup */
    int exact;                 /* lookup: the exact key first */
    int revalidate;            /* lookup for x-vsr-cache-control no-cache (counted as op="revalidate", never a hit) */
    uint64_t ttl_ms;           /* store */
    int responses;             /* 1: the Responses API's store (global.services.response_api), not the cache */
    int memory;                /* 1: the memory plugin's store (global.stores.memory): exact keys only */
} vsr_cache_query_t;

/* status VSR_OK with the stored value (borrowed during the call) and its
 * similarity (1 for an exact hit); anything else is a miss (the store's
 * failures are counted by the adapter, and the request goes on). */
typedef void (*vsr_cache_done_fn)(void *done_ud, int status, vsr_slice_t value, double similarity);

/* A router replay record (the router_replay plugin): the adapter keeps it in
 * global.services.router_replay's store and answers nobody (the store copies
 * what it keeps; a failure is the adapter's to count). */
typedef struct {
    vsr_slice_t id;            /* "rr_" + 32 hex digits, as sent in x-vsr-replay-id */
    uint64_t timestamp_ms;     /* wall clock, when the record started */
    vsr_slice_t summary;       /* the record's JSON without bodies and tool trace (listing) */
    vsr_slice_t record;        /* the whole record's JSON */
    uint64_t max_records;      /* the plugin's bound on the records kept */
} vsr_replay_record_t;

typedef struct {
    /* Calls the model runtime with one bundle.  NULL: no runtime (every
     * task fails at once, as a runtime that cannot be reached). */
    void *(*runtime_call)(void *ud, const vsr_runtime_bundle_t *bundle, uint64_t deadline_ms,
                          vsr_runtime_done_fn done, void *done_ud);
    void (*runtime_cancel)(void *ud, void *handle);
    /* Calls a model through the upstream layer (a request graph's hop, see
     * graph/graph.h: vsr_graph_call_t, its done).  NULL: a decision whose
     * algorithm is a request graph is served as a single call to its first
     * modelRef. */
    void *(*model_call)(void *ud, const vsr_graph_call_t *call, uint64_t deadline_ms, vsr_graph_call_done_fn done,
                        void *done_ud);
    void (*model_cancel)(void *ud, void *handle);
    /* The response cache (NULL: no store; the plugin neither hits nor
     * stores).  lookup returns a handle for cache_cancel, or NULL when done
     * already ran; store copies what it keeps and answers nobody. */
    void *(*cache_lookup)(void *ud, const vsr_cache_query_t *q, vsr_cache_done_fn done, void *done_ud);
    void (*cache_cancel)(void *ud, void *handle);
    void (*cache_store)(void *ud, const vsr_cache_query_t *q, vsr_slice_t value);
    void (*cache_delete)(void *ud, const vsr_cache_query_t *q); /* the entry of q->key, if any */
    /* Keeps a router replay record (NULL: the router_replay plugin records
     * nothing and sends no x-vsr-replay-id). */
    void (*replay_store)(void *ud, const vsr_replay_record_t *r);
    /* The clock of deadlines, in ms; NULL = vsr_now_ms(). */
    uint64_t (*now_ms)(void *ud);
    /* The live per-model statistics the selectors read (NULL, or NULL
     * returned: none; a selector then takes the first candidate). */
    const vsr_model_stats_t *(*model_stats)(void *ud);
    /* A pending phase is over (the request body phase, or the response
     * body phase's end: the adapter knows which one it waits on): eff is
     * its final effect (never pending), valid until the next phase call or
     * finish.  Runs from a port's done,
     * on the session's thread; the adapter may call the next phase or
     * vsr_session_finish() from here (the core no longer touches the
     * session once resume is called). */
    void (*resume)(void *ud, vsr_session_t *s, const vsr_effect_t *eff);
} vsr_ports_t;

/* How long a runtime call may take when the adapter gives no deadline. */
#define VSR_SESSION_WAIT_DEFAULT_MS 30000

/* ---- session ---- */

typedef struct {
    const vsr_listener_conf_t *listener; /* allow-list, identity trust */
    int identity_trusted;                /* the adapter judged the peer trusted for identity headers */
    vsr_slice_t api_key;                 /* the key the listener checked (borrowed; empty: none), for the
                                          * response cache's api_key scope */
    /* The adapter is Envoy's ext_proc: Envoy calls the backend, so the
     * request effect also carries what vsr's upstream layer would add in
     * standalone mode — the provider's credentials and extra_headers (of
     * the model's first backend_ref) — and a decision's reliability
     * override as Envoy's five per-request headers (x-envoy-upstream-rq-
     * timeout-ms, -per-try-timeout-ms, x-envoy-max-retries, -retry-on,
     * -retriable-status-codes). */
    int envoy;
    /* Ports (borrowed: they outlive the session) and the ud each of their
     * functions gets.  ports NULL: no runtime and nobody to resume; a phase
     * then never answers pending (model tasks fail at once, and on_error
     * decides). */
    const vsr_ports_t *ports;
    void *ports_ud;
    /* The request's deadline on the ports' clock (absolute ms), which
     * bounds every wait of the session; 0 = now + VSR_SESSION_WAIT_DEFAULT_MS
     * when a wait starts. */
    uint64_t deadline_ms;
    /* The request's id as the adapter logs it and sends it upstream (borrowed
     * until finish); empty = the client's x-request-id, if any.  Records
     * (router_replay) carry it. */
    vsr_slice_t request_id;
    /* Whose stored objects (Responses API: responses, their conversations
     * and input items) the request may read, continue and delete, and whose
     * its own become: a name the adapter derives from the client's verified
     * credential (the gateway: vsr__ingress_owner, a SHA-256 of the
     * listener's API key), never the credential itself.  At most
     * VSR_SESSION_MAX_OWNER bytes of [0-9a-f].  Empty: the one shared owner
     * (a listener without keys).  Borrowed until finish.  Another owner's
     * object is answered as a missing one. */
    vsr_slice_t owner;
} vsr_session_opts_t;

#define VSR_SESSION_MAX_OWNER 64

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
 * finish (the effect's pieces point into it), and so are the headers.
 *
 * When the active recipe's referenced signals need model work, their tasks
 * go to the runtime as one bundle (ports->runtime_call) before the
 * decision is evaluated: if the port answers at once, the final effect is
 * returned here; otherwise the effect is pending (eff->pending) and the
 * final effect comes through ports->resume.  A task that fails, or whose
 * answer comes after the deadline, makes its signal unknown; each
 * condition on it then matches or not by its on_error policy (the
 * condition's on_error, else its family's, else the decision's
 * rules.on_unknown, else no_match; fail_request answers 503).  No other
 * phase may be called while a phase is pending. */
const vsr_effect_t *vsr_session_request_body(vsr_session_t *s, const char *body, size_t len);
/* 1 while a phase waits on its ports. */
int vsr_session_pending(const vsr_session_t *s);
/* The client is gone: what the session's ports have in flight is cancelled
 * (runtime_cancel), a pending phase never resumes, and the session only
 * waits for finish.  Idempotent; finish does it too. */
void vsr_session_cancel(vsr_session_t *s);
/* Response headers from the upstream (status and fields): adds the x-vsr-*
 * surface, and says how the body goes on (body_mode): RELAY, or, when the
 * client and the upstream speak different protocols (Messages ingress to an
 * OpenAI backend, a chat client to an api_format: anthropic model), STREAM
 * for an event stream and BUFFER for anything else (a JSON answer or error,
 * translated whole: at most VSR_ANTHROPIC_MAX_INPUT bytes, past which the
 * client gets a 502).  A 2xx answer the decision's response_jailbreak
 * plugin scans (action block or header) is held likewise without
 * translation: BUFFER for a JSON answer, STREAM for an event stream (whose
 * terminal event waits for the verdict); action none only observes. */
const vsr_effect_t *vsr_session_response_headers(vsr_session_t *s, int status, const vsr_header_t *headers,
                                                 size_t n_headers);
/* Response body: a chunk as it arrives (end_of_stream 0), then one call
 * with end_of_stream 1 (chunk may be NULL) when the upstream's body ended —
 * also when it ended early (a reset, a timeout): the protocol translators
 * then end the client's stream with an error event rather than let a cut
 * answer pass for a whole one.  What the effect carries depends on the
 * headers phase's body_mode (see vsr_body_mode_t); its pieces are valid
 * until the next phase call.  Under RELAY the effect is empty.
 *
 * The call with VSR_BODY_END may answer pending (eff->pending) when a
 * response plugin waits on the ports with the whole answer (the
 * response_jailbreak plugin's scan: ports->runtime_call, bounded by the
 * request's deadline and 2 s): the final effect of that call comes through
 * ports->resume, with what the end would have carried — STREAM: the bytes
 * that end the stream (its terminal event, or the protocol's error event
 * when the answer is blocked); BUFFER: the whole body and its status and
 * resp_headers (a 403 when blocked; x-vsr-response-warnings); RELAY (the
 * body has gone out already, observe was set): nothing, the request only
 * ends then.  Chunks before the end never wait.  A client that leaves
 * meanwhile: vsr_session_cancel (or finish) cancels the scan. */
#define VSR_BODY_END 1 /* end_of_stream: the body is complete */
#define VSR_BODY_CUT 2 /* end_of_stream: it ended early (reset, timeout, a client gone) */
const vsr_effect_t *vsr_session_response_body(vsr_session_t *s, const char *chunk, size_t len, int end_of_stream);

/* The error body of a reply the adapter makes itself (an upstream that
 * cannot be reached, a timeout...) in the client's protocol: OpenAI's
 * {"error":{...}} with type and code (NULL = null), or, for a Messages
 * client, Anthropic's {"type":"error","error":{"type":...}} whose type
 * comes from the status.  s may be NULL (OpenAI's shape). */
void vsr_session_error_body(const vsr_session_t *s, int status, const char *type, const char *code, vsr_slice_t msg,
                            vsr_buf_t *out);
/* The adapter answers the request itself (an upstream that cannot be
 * reached, a timeout, a local error) with status and body (borrowed for the
 * call): a router_replay record of the request takes that answer.  Returns
 * the record's id for the reply's x-vsr-replay-id (valid until finish), or
 * NULL when there is no record.  s may be NULL. */
const char *vsr_session_local_reply(vsr_session_t *s, int status, vsr_slice_t body);
/* 1 when the client spoke Anthropic's Messages API (POST /v1/messages). */
int vsr_session_client_anthropic(const vsr_session_t *s);

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
/* The selected decision's enabled shadow_dispatch plugin (*conf) and its
 * shadow model, when the request is routed to a model (a call); else NULL. */
const vsr_model_conf_t *vsr_session_shadow(const vsr_session_t *s, const vsr_plugin_shadow_dispatch_conf_t **conf);

const vsr_plan_t *vsr_session_plan(const vsr_session_t *s);
const vsr_evidence_t *vsr_session_evidence(const vsr_session_t *s);
/* The request's authenticated identity, as the authz signal family reads it
 * (docs/tenancy.md): *user and *groups (comma-separated, as
 * x-authz-user-groups carries them) are slices of the request's headers,
 * valid until finish; empty when the request has none, or when its identity
 * fields are not trusted (neither a trusted peer's nor set by vsr from an
 * API key).  1 when there is a user.  Read after vsr_session_request_headers. */
int vsr_session_identity(const vsr_session_t *s, vsr_slice_t *user, vsr_slice_t *groups);
/* Ends the session once: cancels what its ports have in flight (resume is
 * then never called), unpins the engine, frees everything it returned.
 * Allowed from within resume. */
void vsr_session_finish(vsr_session_t *s);

/* ---- routing preview (management API) ---- */

/* Runs model resolution, signals and the decision for `model` and `text` (as
 * one user message) without calling any backend, and writes the JSON answer
 * of POST /api/v1/routing/preview into out; with trace, also the evaluation
 * trace.  Returns the HTTP status (200, or 400 with an error body).  Model
 * tasks go through ports (NULL: they fail, and on_error decides) as in the
 * body phase: with a port that does not answer at once the return is
 * VSR_AGAIN and done(done_ud, status) runs later with out filled (out is
 * borrowed until then; *wait gets a handle for vsr_preview_cancel, which
 * stops it: done is then never called). */
int vsr_engine_preview(vsr_engine_t *e, vsr_slice_t model, vsr_slice_t text, int trace, vsr_buf_t *out);
typedef struct vsr_preview_s vsr_preview_t;
int vsr_engine_preview_wait(vsr_engine_t *e, vsr_slice_t model, vsr_slice_t text, int trace, vsr_buf_t *out,
                            const vsr_ports_t *ports, void *ports_ud, uint64_t deadline_ms,
                            void (*done)(void *done_ud, int status), void *done_ud, vsr_preview_t **wait);
void vsr_preview_cancel(vsr_preview_t *p);

#endif /* VSR_ROUTING_H */
