/* routing-int.h — private to the routing module. */
#ifndef VSR_ROUTING_INT_H
#define VSR_ROUTING_INT_H

#include <stdatomic.h>

#include "decision/decision.h"
#include "http/http.h"
#include "plugins/plugins.h"
#include "proto/sse.h"
#include "routing/routing.h"
#include "signals/signals.h"

typedef struct {
    const vsr_rule_conf_t *leaf;
    int sig; /* signal index, -1 when unresolved (config validation prevents it);
              * a projection output o is -2 - o */
} leaf_map_t;

typedef struct {
    const vsr_recipe_conf_t *conf;
    vsr_signals_t *signals;
    leaf_map_t *leaves; /* sorted by leaf pointer */
    size_t n_leaves;
    int *referenced;    /* signals some decision references */
    size_t n_referenced;
    int needs_identity; /* an authz signal is referenced */
    vsr_projections_t *proj; /* routing.projections, compiled per version */
    struct sig_box_s *box; /* the compiled signals, shared with other versions whose recipe has the same signals */
    vsr_graph_implied_t *implied; /* per decision (conf->decisions order): its algorithm's implied budget */
} recipe_state_t;

struct vsr__card_vec_s; /* engine.c */

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
    /* router_dc: each model card's description embedding ([card * 2 + use_capabilities]), computed by
     * the first request that needs it and kept for the version: at most 2 per card */
    _Atomic(struct vsr__card_vec_s *) *card_vecs;
    size_t n_card_vecs;
};

typedef struct {
    const vsr_recipe_conf_t *recipe; /* auto name or entrypoint */
    const vsr_model_conf_t *model;   /* concrete model (passthrough) */
} resolution_t;

/* One model task of a request phase. */
typedef struct route_ctx_s route_ctx_t;

/* One model task of a request phase: a runtime task (it goes in the
 * phase's bundle), or a chat task (VSR_SIGNAL_TASK_CHAT: one model call
 * through ports->model_call, e.g. an llm classifier). */
typedef struct {
    int sig;                 /* the signal that asked for it */
    char id[16];
    vsr_signal_task_t task;
    int answered;
    int chat;                /* a model call (a chat task, or a remote classifier's) */
    int remote;              /* VSR_SIGNAL_TASK_REMOTE: a remote classifier's call */
    size_t same_as;          /* a remote task whose payload an earlier one has: 1 + that task's index (its
                              * answer is shared, one call); 0 otherwise */
    void *handle;            /* chat: the call in flight */
    route_ctx_t *rc;
    uint64_t t0_us;          /* when its signal was asked for it */
} route_task_t;

struct route_ctx_s {
    recipe_state_t *rs;
    vsr_signal_input_t in;
    vsr_signal_result_t *memo;
    unsigned char *memo_done;
    unsigned char *unknown;  /* per signal: its model task failed or came late, or it cannot be computed */
    size_t n_unknown_now;    /* signals unknown before any task was sent (an llm classifier) */
    uint64_t *sig_us;        /* per signal: its evaluation time (a model task's: from its start to its result
                              * consumed or given up) */
    unsigned char *sig_task; /* per signal: computed by a model task */
    vsr_decision_result_t *results;
    unsigned char *known;    /* per signal: computed (memo_done and not unknown), for projections */
    vsr_projections_run_t proj;
    int selected;
    size_t model_ref;        /* the selected decision's modelRef that answers (vsr_static_select) */
    vsr_static_choice_t choice;
    int fail_request;        /* a decision's rules.on_unknown: fail_request met an unknown signal */
    const char *fail_signal; /* ... that signal's name */
    /* waiting (vsr__route_start) */
    vsr_pool_t *pool;
    const vsr_ports_t *ports;
    void *ports_ud;
    uint64_t deadline_ms;
    route_task_t *tasks;
    size_t n_tasks;
    const vsr_config_t *cfg; /* the pinned configuration (chat tasks name its models) */
    void *handle;            /* the runtime call in flight, or NULL */
    int calling;             /* inside vsr__route_start: the end is reported by its return */
    int answered;            /* the runtime call's done ran */
    size_t waiting;          /* the runtime call and chat calls not answered yet */
    uint64_t rt_start_us, rt_end_us; /* the runtime call, for evidence */
    unsigned rt_tasks, n_chat;
    unsigned remote_ok, remote_failed, remote_invalid; /* remote classifier calls, by result (evidence) */
    int rt_status;
    int cancelled;
    void (*cont)(route_ctx_t *rc); /* the decision is made after a wait */
    void *cont_ud;
};

recipe_state_t *vsr__engine_recipe(vsr_engine_t *e, const vsr_recipe_conf_t *r);
int vsr__resolve_model(const vsr_engine_t *e, vsr_slice_t name, resolution_t *out);
/* Evaluates the recipe's referenced signals and selects a decision, the
 * model tasks of the referenced signals sent to ports->runtime_call as one
 * bundle (ports NULL: they fail at once): VSR_OK when the decision is made on
 * return; VSR_AGAIN when it waits: rc->cont(rc) runs once the decision is
 * made (from the port's done).  rc (set up as for vsr__route, plus ports,
 * ports_ud, deadline_ms, cont, cont_ud) must stay put meanwhile. */
int vsr__route_start(route_ctx_t *rc, vsr_pool_t *pool);
/* The evaluation time per family of the signals rc computed, into out
 * (at most cap, first evaluated first): a rule-based family's is the sum of
 * its signals', a model-backed family's the longest of its tasks (they run
 * as one bundle).  Returns the count. */
size_t vsr__route_family_times(const route_ctx_t *rc, vsr_family_time_t *out, size_t cap);
/* A waiting route's runtime call is cancelled; cont never runs. */
void vsr__route_cancel(route_ctx_t *rc);
uint64_t vsr__ports_now(const vsr_ports_t *p, void *ud);

/* ---- response_cache (resp_cache.c) ---- */
/* The exact key of a chat request (its body parsed as j; headers as they
 * reach the session): "sha256:<hex>" of the model asked for, the partition,
 * the scope, every body member but model/stream/stream_options/user (by
 * name) and every non-neutral header field (by name).  context, when not
 * NULL, gets the same hash with messages[last_user] (-1: none) left out:
 * what a semantic hit must share with the request. */
void vsr__rc_key(const vsr_json_t *j, int last_user, const vsr_header_t *headers,
                 size_t n_headers, vsr_slice_t model, vsr_slice_t partition, vsr_slice_t scope,
                 vsr_slice_t control, char out[VSR_CONFIG_HASH_LEN], char context[VSR_CONFIG_HASH_LEN]);
/* An answer's stored form ("<ms>\n" + chat.completion) appended to out:
 * VSR_OK, or VSR_ERR_INVALID when it is not one to keep (not a completion,
 * a cut stream, tool calls, an error, data after [DONE], content_filter,
 * bytes that are not UTF-8). */
int vsr__rc_stored_form(const char *body, size_t len, int sse, uint64_t now_ms, vsr_buf_t *out);
int vsr__rc_parse_stored(vsr_slice_t v, uint64_t *stored_ms, vsr_slice_t *json);
int vsr__rc_replay_sse(vsr_slice_t json, int include_usage, vsr_buf_t *out);
int vsr__rc_read_embedding(vsr_slice_t result, float *v, size_t dim);


/* ---- response_jailbreak (resp_guard.c) ---- */
/* x-vsr-response-warnings codes (the session's one bitmask; written in this order) */
#define VSR__WARN_HALLUCINATION 1u
#define VSR__WARN_UNVERIFIED_FACTUAL 2u
#define VSR__WARN_RESPONSE_JAILBREAK 4u
/* the client protocol's stream terminal, held back until the verdict */
enum { VSR__RG_TERM_CHAT = 0, VSR__RG_TERM_MESSAGES, VSR__RG_TERM_RESPONSES };
/* a scan's result (vsr_evidence_t.response_guard names it) */
enum { VSR__RG_NONE = 0, VSR__RG_PASS, VSR__RG_FLAGGED, VSR__RG_BLOCKED, VSR__RG_ERROR };
extern const char *const vsr__rg_result_names[];

typedef struct {
    const vsr_plugin_response_jailbreak_conf_t *conf;
    double threshold;
    int on;                  /* this answer is scanned */
    int sse;                 /* its chat side is an event stream */
    int own_buffer;          /* BUFFER only for the scan (no translation) */
    int withhold;            /* STREAM: the client's terminal event waits for the verdict */
    int own_stream;          /* STREAM only for the scan (no translation) */
    int term;                /* VSR__RG_TERM_* */
    int held;                /* the terminal is in carry */
    int result;              /* VSR__RG_*; 0 until decided */
    double score;
    vsr_sse_parser_t sp;
    int sp_open;
    vsr_buf_t head, tail;    /* the answer's text (see resp_guard.c) */
    vsr_buf_t carry;         /* client bytes held back: a partial event, or the terminal and what follows */
    vsr_buf_t kept;          /* the Responses store's record, kept until the verdict */
    int has_kept;
    vsr_effect_t final;      /* the body phase's end, as it stands before the verdict */
    uint64_t t0_us;
    uint64_t deadline_ms;    /* the scan's, on the ports' clock */
} vsr__rguard_t;

void vsr__rg_init(vsr__rguard_t *g);
void vsr__rg_free(vsr__rguard_t *g);
void vsr__rg_reset(vsr__rguard_t *g);
/* The answer's chat-side bytes: a whole chat.completion, or stream bytes in any pieces. */
void vsr__rg_feed_json(vsr__rguard_t *g, const char *p, size_t n);
void vsr__rg_feed_sse(vsr__rguard_t *g, const char *p, size_t n);
/* The text to scan (from pool, or g's own buffer: valid until the next feed). */
vsr_slice_t vsr__rg_text(vsr__rguard_t *g, vsr_pool_t *pool);
/* Client-side stream bytes in `out` (replaced): what may go out now stays
 * in out; a partial event and the terminal event (with what follows it)
 * are held in g.  cut: the stream ended early: everything goes out. */
void vsr__rg_withhold(vsr__rguard_t *g, vsr_buf_t *out, int cut);
/* The held bytes appended to out (a pass). */
void vsr__rg_release(vsr__rguard_t *g, vsr_buf_t *out);
/* The held terminal dropped; the protocol's error event appended to out. */
void vsr__rg_blocked_event(vsr__rguard_t *g, vsr_slice_t msg, vsr_slice_t resp_id, uint64_t seq, vsr_buf_t *out);
/* "hallucination,unverified_factual,response_jailbreak" subset, from pool; empty when none. */
vsr_slice_t vsr__rg_warnings(unsigned bits, vsr_pool_t *pool);
/* ---- hallucination (hcheck.c) ---- */
/* the check's outcome (x-vsr-hallucination-check names it) */
enum {
    VSR__HC_NONE = 0, VSR__HC_DETECTED, VSR__HC_NOT_DETECTED, VSR__HC_CONTEXT_UNAVAILABLE, VSR__HC_FAILED,
    VSR__HC_STREAMING,
};
extern const char *const vsr__hc_result_names[];
#define VSR__HC_MAX_SPANS 16
#define VSR__HC_UNVERIFIED_TEXT                                                                                     \
    "[Unverified Response] This response contains factual claims that could not be verified due to missing "      \
    "context."

typedef struct {
    vsr_slice_t text;        /* a substring of the answer */
} vsr__hc_span_t;

typedef struct {
    const vsr_plugin_hallucination_conf_t *conf;
    int on;                  /* this answer waits for the check (BUFFER) */
    int result;              /* VSR__HC_* */
    int unverified;          /* fact-check needed, no grounding context */
    vsr_slice_t context;     /* the grounding context (pool) */
    vsr_slice_t answer;      /* the answer's first choice content (pool) */
    vsr__hc_span_t spans[VSR__HC_MAX_SPANS];
    size_t n_spans;
    vsr_effect_t final;      /* the body phase's end, as it stands before the check */
    uint64_t deadline_ms;
} vsr__hcheck_t;

/* The grounding context: what the rag plugin injected, else every role
 * "tool" message's text joined with "\n\n" (bounded; from pool). */
vsr_slice_t vsr__hc_context(const vsr_chat_view_t *chat, vsr_slice_t rag_context, vsr_pool_t *pool);
/* The detector's chat completions request (the reference's prompt and strict schema). */
void vsr__hc_request(vsr_buf_t *out, const char *model_id, int explain, vsr_slice_t context, vsr_slice_t question,
                     vsr_slice_t answer);
/* The detector's answer: VSR_OK with the valid spans (*n may be 0: nothing
 * unsupported), or VSR_ERR_INVALID (not the schema, or every span invalid). */
int vsr__hc_parse(vsr_slice_t body, vsr_slice_t answer, vsr_pool_t *pool, vsr__hc_span_t *spans, size_t *n);
/* A chat.completion's first choice's content (from pool; empty when none). */
vsr_slice_t vsr__hc_answer(const char *body, size_t len, vsr_pool_t *pool);
/* The body warning, with the spans when details (from pool or static). */
vsr_slice_t vsr__hc_warning(int details, const vsr__hc_span_t *spans, size_t n, vsr_pool_t *pool);
/* out = the chat.completion body with warning + "\n\n" before every choice's
 * string content (body may be out's own bytes).  VSR_ERR_INVALID when it is
 * not a chat.completion (out untouched). */
int vsr__hc_prepend(const char *body, size_t len, vsr_slice_t warning, vsr_pool_t *pool, vsr_buf_t *out);

/* ---- router_replay (resp_replay.c) ---- */
typedef struct vsr__replay_s vsr__replay_t;
/* The decision's enabled router_replay plugin (NULL: none, or
 * global.services.router_replay.enabled is false). */
const vsr_plugin_router_replay_conf_t *vsr__replay_conf(const vsr_config_t *cfg, const vsr_decision_conf_t *d);
/* A record, in pool (free its buffer with vsr__replay_free); the slices are
 * copied but body, borrowed until the write. */
vsr__replay_t *vsr__replay_begin(vsr_pool_t *pool, const vsr_plugin_router_replay_conf_t *conf, vsr_slice_t method,
                                 vsr_slice_t path, vsr_slice_t request_id, vsr_slice_t model, vsr_slice_t body);
const char *vsr__replay_id(const vsr__replay_t *r);
/* The answer's head (again for a fallback's: the body kept starts afresh). */
void vsr__replay_response(vsr__replay_t *r, int status, int streamed);
/* Bytes of the answer as the client gets them (kept up to max_body_bytes). */
void vsr__replay_feed(vsr__replay_t *r, const char *p, size_t n);
/* The answer ended: status (0 = as given before), how it was served, cut early. */
void vsr__replay_end(vsr__replay_t *r, int status, vsr_response_path_t path, int cut);
/* The record, once, through ports->replay_store (req: the parsed request, or NULL). */
void vsr__replay_write(vsr__replay_t *r, const vsr_evidence_t *ev, const vsr_json_t *req, uint64_t latency_us,
                       const vsr_ports_t *ports, void *ud);
void vsr__replay_free(vsr__replay_t *r);

/* ---- the rag plugin's retrieval (rag_retrieve.c) ---- */
typedef struct vsr__rag_s vsr__rag_t;
/* What an mcp backend's tool_arguments may name (borrowed until the retrieval ends). */
typedef struct {
    vsr_slice_t decision, domains, keywords; /* the decision; matched domains and keywords, comma-separated */
} vsr__rag_vars_t;
/* Retrieves conf's context for query (borrowed until done), in pool, through
 * ports (model_call; runtime_call for an embedding), by deadline.  out is
 * filled before done(done_ud) runs, exactly once: from here (then NULL is
 * returned: a cache hit, or a backend that failed at once) or later (the
 * handle for vsr__rag_cancel is returned). */
void *vsr__rag_start(vsr_pool_t *pool, const vsr_plugin_rag_conf_t *conf, vsr_slice_t query,
                     const vsr__rag_vars_t *vars, const vsr_ports_t *ports, void *ports_ud, uint64_t deadline,
                     vsr_rag_result_t *out, void (*done)(void *ud), void *done_ud);
/* Cancels what is in flight; done is never called then. */
void vsr__rag_cancel(void *handle);
/* Empties the result cache (tests). */
void vsr__rag_cache_clear(void);
/* The context the rag plugin injected into the request (empty when none):
 * the grounding of the hallucination check, valid until finish. */
vsr_slice_t vsr__session_rag_context(const vsr_session_t *s);
/* engine.c: the router_dc description embedding of model card `card`
 * (use_capabilities `caps`), unit length, or NULL while none is kept;
 * *dim its length. */
const float *vsr__engine_card_vec(vsr_engine_t *e, size_t card, int caps, size_t *dim);
/* Keeps a copy of v (dim floats) unless one is kept already. */
void vsr__engine_card_vec_put(vsr_engine_t *e, size_t card, int caps, const float *v, size_t dim);

/* select.c: a decision's single-call selector */
int vsr__select_is_selector(const vsr_decision_conf_t *d);
/* What a selector that asks a model brings: router_dc's cosine[i] of the
 * query's embedding and candidate i's description embedding, when has[i]
 * (ok 0: the query has no embedding); prompt's choice (the candidate's
 * index, or -1 with prompt_error, static text). */
typedef struct {
    const double *cosine;
    const unsigned char *has;
    size_t n;                 /* the candidates (at most VSR_SELECT_MAX_CANDIDATES) */
    int ok;
    int prompt_choice;
    const char *prompt_error;
} vsr__select_aux_t;
/* prompt: the system prompt (the reference's: the instructions, the
 * candidates with their modelCards descriptions, the answer's JSON form). */
void vsr__select_prompt_system(const vsr_config_t *cfg, const vsr_decision_conf_t *d, vsr_buf_t *b);
/* prompt: the candidate the model's reply (a chat completion body: its
 * first choice's message content) names, or -1 with *why (static text):
 * the reference's rule, a JSON object of exactly selected_model and
 * rationale, both non-empty, naming a candidate. */
int vsr__select_prompt_parse(const vsr_decision_conf_t *d, vsr_slice_t body, vsr_pool_t *pool, const char **why);
#define VSR_SELECT_DC_TEXT_MAX 4096u /* bytes of one description text sent to be embedded */
/* The index of model card `model` in cfg->model_cards, or -1. */
int vsr__select_card_index(const vsr_config_t *cfg, const char *model);
/* The text router_dc embeds for a card (the reference's buildDescriptionText:
 * description, then "Capabilities: a, b" when caps, joined by ". "; no
 * description: "Model: name" before the capabilities); empty when none. */
void vsr__select_aux_text(const vsr_model_card_conf_t *card, int caps, vsr_buf_t *b);
/* The index of the modelRef chosen, or -1 when the selector failed and
 * algorithm.on_error is fail; *out (from pool) says what it saw.  dc:
 * router_dc's similarities (NULL: none, the first candidate). */
int vsr__select_run(const vsr_config_t *cfg, const vsr_decision_conf_t *d, const vsr_model_stats_t *st,
                    const vsr__select_aux_t *dc, vsr_pool_t *pool, const vsr_selection_t **out);
/* The selection as a JSON object (the preview's "selection"). */
void vsr__selection_json(vsr_buf_t *b, const vsr_selection_t *sel);
/* "model=score,..." of the scored candidates (x-vsr-selection-scores). */
const char *vsr__selection_scores(vsr_pool_t *pool, const vsr_selection_t *sel);

#endif
