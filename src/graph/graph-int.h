/* graph-int.h — private to the graph module: nodes, runs, and the hooks
 * through which a template (graph_templates.c) specialises the executor. */
#ifndef VSR_GRAPH_INT_H
#define VSR_GRAPH_INT_H

#include "graph/algo.h"
#include "graph/graph.h"

typedef struct node_s node_t;
typedef struct frame_s frame_t;
typedef struct gcall_s gcall_t;

typedef enum { N_SEQ = 1, N_CALL, N_PARALLEL, N_LOOP, N_TRANSFORM, N_BRANCH, N_RESPOND } node_kind_t;

/* What one call sends: filled by a call node's prepare hook. */
typedef struct {
    size_t ref;                    /* the candidate (index into run->refs) */
    vsr_slice_t messages;          /* a "messages" JSON array; empty = the request's own */
    int logprobs;                  /* ask for logprobs (and top_logprobs alternatives) */
    unsigned top_logprobs;
    int strip_tools;               /* drop tools, tool_choice, parallel_tool_calls */
    int has_temperature;
    double temperature;
    uint64_t max_completion_tokens; /* 0 = the client's */
    uint64_t timeout_ms;           /* 0 = the run's default per-hop timeout */
    int final_hop;                 /* when the client streams, the adapter sends this call (streamed) */
} slot_t;

/* One call's result (the run keeps every one, in call order). */
typedef struct {
    const node_t *node;
    size_t ref;
    size_t slot;                   /* its parallel slot */
    size_t round;                  /* the enclosing loop's round (0-based), 0 outside loops */
    unsigned iteration;
    int status;                    /* VSR_OK: a 2xx answer that parsed as a chat completion */
    int http_status;
    vsr_slice_t body;              /* the raw answer (pool) */
    vsr_algo_completion_t c;       /* parsed (status VSR_OK) */
    double score;                  /* the template's own (confidence ...) */
    int has_score;
    uint64_t epoch;                /* which execution of its node (r->epoch when the node started) */
} result_t;

struct node_s {
    node_kind_t kind;
    const char *name;              /* for records and errors */
    node_t **kids;                 /* seq: in order; loop: kids[0] the body; branch: kids[0] then, kids[1] else */
    size_t n_kids;
    /* call / parallel: slots 0..count-1 */
    size_t (*count)(vsr_graph_run_t *r, const node_t *n);
    /* VSR_OK: make the call; VSR_DECLINED: the slot has nothing to call */
    int (*prepare)(vsr_graph_run_t *r, const node_t *n, size_t slot, slot_t *out);
    void (*on_result)(vsr_graph_run_t *r, const node_t *n, result_t *res);
    size_t max_concurrency;        /* 0 = all at once */
    size_t first_k;                /* 0 = wait for every slot */
    size_t min_success;            /* fewer successes fail the node (0 = none needed) */
    int fail_fast;                 /* on_error: fail — the first failure fails the run (soft or not) */
    int soft;                      /* too few successes do not fail the run (the next node judges) */
    /* loop */
    size_t max_rounds;
    int (*until)(vsr_graph_run_t *r, const node_t *n, size_t rounds); /* 1: stop before the next round (rounds run) */
    /* transform */
    void (*apply)(vsr_graph_run_t *r, const node_t *n);
    /* branch */
    int (*pred)(vsr_graph_run_t *r, const node_t *n);
    /* respond: sets the outcome (vsr__graph_answer / vsr__graph_fail) */
    void (*respond)(vsr_graph_run_t *r, const node_t *n);
    void *arg;
};

/* A candidate: a modelRef of the decision, resolved. */
typedef struct {
    const vsr_model_conf_t *model;
    const char *name;              /* the LoRA's name when the ref names one, else the model's */
    const char *lora;
    const char *upstream_id;       /* the id sent upstream */
    double weight;
} ref_t;

struct frame_s {
    const node_t *node;
    frame_t *parent;
    size_t idx;                    /* seq: the child running */
    size_t round;                  /* loop */
    size_t count, next, inflight, finished, ok;
    uint64_t epoch;                /* call/parallel: this execution's number */
    gcall_t **calls;               /* parallel: the calls in flight (by slot) */
    int ended;                     /* call / parallel: handed to the parent (once) */
};

struct gcall_s {
    vsr_graph_run_t *r;
    frame_t *f;
    size_t slot;
    slot_t s;
    void *handle;
    int inflight;
    uint64_t t0;
    unsigned iteration;
    vsr_buf_t body;                /* what it sends (heap): freed when it ends, so a run holds at most
                                    * its calls in flight's bodies, not every hop's */
    size_t sent;                   /* its length: each retry sends it again */
    gcall_t *next_live;            /* the run's list of calls in flight */
    gcall_t *prev_live;
};

struct vsr_graph_run_s {
    vsr_graph_opts_t o;
    vsr_pool_t *pool;
    const vsr_algo_conf_t *algo;
    vsr_json_t json;               /* the request body, parsed */
    vsr_chat_view_t chat;
    ref_t *refs;
    size_t n_refs;
    const node_t *root;
    void *t;                       /* the template's state */
    /* results and evidence */
    result_t *results;
    size_t n_results, cap_results;
    vsr_graph_call_record_t records[VSR_GRAPH_MAX_RECORDS];
    size_t n_records;
    vsr_buf_t used;                /* models used, comma-separated */
    unsigned iterations;
    uint64_t attempts, max_calls;  /* the budget's ledger */
    uint64_t sent_bytes, max_bytes; /* the byte budget's: request bytes sent upstream (retries included) */
    vsr_graph_implied_t implied;   /* the algorithm's implied budget */
    uint64_t pt, ct;
    uint64_t t0_ms;
    uint64_t hop_timeout_ms;
    uint64_t max_response_bytes;
    uint64_t kept_bytes;           /* answers kept (every result's body): at most VSR_GRAPH_MAX_KEPT_BYTES */
    gcall_t *live;
    uint64_t epoch;                /* call/parallel executions started */
    const node_t *latest;          /* the call/parallel node that started last */
    /* the end */
    vsr_graph_outcome_t out;
    int finished, reported, cancelled, started;
    unsigned depth;                /* inside an entry point: report when it unwinds to 0 */
};

/* ---- for templates ---- */

/* The answer: a body of content_type with status. */
void vsr__graph_answer(vsr_graph_run_t *r, int status, const char *content_type, vsr_slice_t body);
/* An OpenAI-style error answer. */
void vsr__graph_fail(vsr_graph_run_t *r, int status, const char *type, const char *code, const char *fmt, ...)
    VSR_PRINTF(5, 6);
/* A chat.completion answer from res's body, with usage = the run's sums and
 * an extra top-level member (may be empty); as SSE when the client streams. */
void vsr__graph_answer_completion(vsr_graph_run_t *r, const result_t *res, vsr_slice_t extra_member);
/* A chat.completion the run wrote itself (b, taken and freed): the answer,
 * as SSE when the client streams; model names it in the evidence. */
void vsr__graph_answer_chat(vsr_graph_run_t *r, const char *model, vsr_buf_t *b);
/* JSON texts of the conversation: the request's messages array; with the
 * last user message replaced by a user message of `text`; with a user
 * message of `text` appended. */
vsr_slice_t vsr__graph_messages(vsr_graph_run_t *r);
vsr_slice_t vsr__graph_messages_replace_last_user(vsr_graph_run_t *r, vsr_slice_t text);
vsr_slice_t vsr__graph_messages_append_user(vsr_graph_run_t *r, vsr_slice_t assistant, vsr_slice_t text);
/* The successful results of node n (NULL: any node) and of its execution
 * number epoch (0: every execution), in slot order (completion order is not
 * call order); *out in the pool. */
size_t vsr__graph_ok_results(vsr_graph_run_t *r, const node_t *n, uint64_t epoch, const result_t ***out);
/* The latest user message's text. */
vsr_slice_t vsr__graph_question(vsr_graph_run_t *r);
/* The body of one call (graph_body.c). */
vsr_slice_t vsr__graph_body(vsr_graph_run_t *r, const slot_t *s, int stream);   /* in the pool */
void vsr__graph_body_into(vsr_graph_run_t *r, const slot_t *s, int stream, vsr_buf_t *out); /* appended to out */

node_t *vsr__graph_node(vsr_graph_run_t *r, node_kind_t kind, const char *name);
void vsr__graph_kids(vsr_graph_run_t *r, node_t *n, size_t k, ...);

/* Builds the template of the run's algorithm (r->root, r->t). */
int vsr__graph_tpl_workflows(vsr_graph_run_t *r, const char **why);
int vsr__graph_tpl_graph(vsr_graph_run_t *r, const char **why);
/* The candidate named `name` (a modelRef's model or LoRA, else any provider
 * model, added as a candidate): VSR_OK or VSR_ERR_NOT_FOUND. */
int vsr__graph_ref_index(vsr_graph_run_t *r, const char *name, size_t *out);
int vsr__graph_template(vsr_graph_run_t *r, const char **why);

#endif
