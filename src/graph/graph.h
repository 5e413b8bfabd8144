/*
 * graph — the request-graph executor: multi-model algorithms (the Looper's
 * confidence, ratings, remom, fusion and workflows) run inside the router as
 * graphs of nodes, every hop a model call through the upstream layer.
 *
 * Node kinds (vsr_graph_node_kind_t): `seq` (children in order), `call` (one
 * model exchange), `parallel` (a call per slot, at most max_concurrency at
 * once, done after first_k successes or when all are in; fewer than
 * min_success successes fails it), `loop` (its body again until `until` or
 * max_rounds), `transform` (changes the conversation later calls send),
 * `branch` (one of two children, by a predicate), `respond` (builds the
 * answer).  What is specific to an algorithm (which model a slot calls,
 * the prompt it sends, when a loop stops, how answers are aggregated) comes
 * as hooks of its template (graph_templates.c): each algorithm of ref §3 is
 * a built-in template `looper.<algorithm>` built from these nodes.
 *
 * A run is one request's execution: one deadline, one call budget (the
 * ledger counts physical exchanges, retries included; without
 * algorithm.budget.max_calls, the algorithm's implied budget), one byte
 * budget (the request bytes its hops send upstream, all together), a
 * bounded record of every call (model, status, tokens, latency).  It waits on one port (the
 * adapter's "call this model through the upstream layer") and finishes
 * through its done callback with an outcome: an answer (status, content
 * type, body), or — for a streaming client — the final hop left for the
 * adapter to send as the request's ordinary routed call, so that it streams
 * through with backpressure under the usual safety boundary.
 *
 * No socket or loop here.  Threading: a run belongs to the session's
 * thread.  Memory: everything a run allocates comes from the pool it is
 * given and lives until that pool is cleared.
 */
#ifndef VSR_GRAPH_H
#define VSR_GRAPH_H

#include "base/base.h"
#include "config/config.h"
#include "json/json.h"

/* ---- the port: one model exchange through the upstream layer ---- */

typedef struct {
    const vsr_model_conf_t *model; /* the provider model (its cluster and reliability) */
    vsr_slice_t body;              /* the complete JSON request body, with "model" set to the upstream id */
    unsigned iteration;            /* 1-based call index within the run */
    uint64_t max_response_bytes;   /* a longer response fails the call (VSR_ERR_TOO_BIG) */
    vsr_slice_t path;              /* the request path as is (a remote classifier's "/classify"), sent without
                                    * translation; NULL slice: the model's chat path */
    const vsr_slice_t *extra_headers; /* name, value, name, value ...: 2 * n_extra_headers slices sent as well
                                    * (a shadow copy's forward_headers), borrowed until done */
    size_t n_extra_headers;        /* at most VSR_GRAPH_MAX_EXTRA_HEADERS (more are not sent) */
} vsr_graph_call_t;

#define VSR_GRAPH_MAX_EXTRA_HEADERS 16

/* The end of a call: status VSR_OK with the upstream's HTTP status and body
 * (borrowed for the duration of the callback), or an error before or while
 * reading it (VSR_ERR_IO: connect/reset/timeout; VSR_ERR_TOO_BIG; VSR_ERR:
 * anything else).  attempts: physical exchanges made (retries included). */
typedef void (*vsr_graph_call_done_fn)(void *done_ud, int status, int http_status, vsr_slice_t body,
                                       unsigned attempts);

/* The rules of vsr_ports_t (routing.h) apply: done runs on the session's
 * thread, exactly once unless cancelled, possibly before call returns (it
 * then returns NULL); deadline_ms is absolute on now's clock. */
typedef struct {
    void *(*call)(void *ud, const vsr_graph_call_t *call, uint64_t deadline_ms, vsr_graph_call_done_fn done,
                  void *done_ud);
    void (*cancel)(void *ud, void *handle);
    uint64_t (*now_ms)(void *ud);
    void *ud;
} vsr_graph_port_t;

/* ---- a run ---- */

typedef struct vsr_graph_run_s vsr_graph_run_t;

/* One call of a run, for evidence. */
typedef struct {
    const char *model;             /* the modelRef's name (its LoRA when it names one) */
    unsigned iteration;
    int status;                    /* VSR_OK, or the call's error */
    int http_status;
    unsigned attempts;
    uint64_t prompt_tokens, completion_tokens;
    uint64_t start_ms, ms;
    const char *node;              /* the node that made it ("panel", "judge", ...) */
} vsr_graph_call_record_t;

#define VSR_GRAPH_MAX_KEPT_BYTES ((uint64_t)64 << 20) /* answers a run keeps in all; past it a call fails */
#define VSR_GRAPH_MAX_RECORDS 64   /* calls recorded per run; more are counted, not kept */
#define VSR_GRAPH_MAX_CALLS 2048   /* the most calls a run may make without algorithm.budget.max_calls (its
                                    * implied budget is capped to it: a YAML graph of nested loops can imply
                                    * far more) */
#define VSR_GRAPH_DEFAULT_UPSTREAM_BYTES ((uint64_t)64 << 20) /* request bytes one run may send upstream, all
                                    * its hops together, without algorithm.budget.max_upstream_bytes */

/* What a decision's algorithm may cost without an algorithm.budget, from its
 * configuration alone: hops, the model calls its structure allows (a remom
 * schedule's calls plus its synthesis, a fusion panel plus its judge's
 * calls, a YAML graph's calls x loop rounds x parallel fan-out, taking the
 * larger side of every branch); calls, those hops each with the retries
 * its model's reliability allows (retry_count), at most VSR_GRAPH_MAX_CALLS.
 * Computed once per configuration version (the routing engine keeps it
 * per decision), never per request. */
typedef struct {
    uint64_t hops;
    uint64_t calls;
} vsr_graph_implied_t;

/* The implied budget of decision d of cfg (zeros for a decision that runs
 * no graph). */
void vsr_graph_implied_budget(const vsr_config_t *cfg, const vsr_decision_conf_t *d, vsr_graph_implied_t *out);

typedef struct {
    /* the answer: status != 0 */
    int status;
    const char *content_type;      /* application/json or text/event-stream */
    vsr_slice_t body;
    /* or the final hop, for the adapter to send and stream (status == 0) */
    const vsr_model_conf_t *final_model;
    const char *final_lora;
    vsr_slice_t final_body;
    /* evidence (x-vsr-looper-*) */
    const char *algorithm;
    const char *model;             /* the model whose answer is returned (the final hop's) */
    const char *models_used;       /* every called model, comma-separated, in call order */
    unsigned iterations;           /* calls, failed ones included (the final hop counted) */
    uint64_t prompt_tokens, completion_tokens; /* summed over the buffered calls */
    uint64_t latency_ms;
    const vsr_graph_call_record_t *records;
    size_t n_records;
} vsr_graph_outcome_t;

typedef struct {
    const vsr_config_t *cfg;
    const vsr_decision_conf_t *decision; /* its algorithm (algo), modelRefs */
    /* the request body after the decision's plugins (borrowed until the pool goes) */
    const char *body;
    size_t len;
    int stream;                    /* the client streams */
    int include_usage;             /* stream_options.include_usage */
    vsr_pool_t *pool;
    const vsr_graph_port_t *port;
    uint64_t deadline_ms;          /* absolute, on port->now_ms's clock */
    /* the decision's implied budget, computed when the configuration was
     * compiled (vsr_graph_implied_budget); NULL: computed at start */
    const vsr_graph_implied_t *implied;
    /* did the request's signal of this condition type and name match?
     * (a graph's branch or loop predicate); NULL = never */
    int (*signal)(void *ud, const char *type, const char *name);
    /* the run is over (never from inside vsr_graph_start): out is valid
     * until the pool goes.  The callee may free the pool. */
    void (*done)(void *ud, const vsr_graph_outcome_t *out);
    void *done_ud;
} vsr_graph_opts_t;

/* Is this decision run as a graph?  Its algorithm is a Looper type and it is
 * eligible (ref §3.1: confidence and ratings need more than one modelRef,
 * the others at least one); otherwise the first modelRef is used. */
int vsr_graph_eligible(const vsr_decision_conf_t *d);

/* Starts the decision's graph.  VSR_AGAIN: it runs, and done comes later
 * (unless vsr_graph_cancel); VSR_OK: it finished at once and *out is the
 * outcome (done is not called); VSR_ERR_INVALID: the body cannot be run
 * (not a chat completion), with *why set. */
int vsr_graph_start(const vsr_graph_opts_t *o, vsr_graph_run_t **run, const vsr_graph_outcome_t **out,
                    const char **why);
/* Cancels every call in flight; done is never called.  Idempotent. */
void vsr_graph_cancel(vsr_graph_run_t *run);

#endif /* VSR_GRAPH_H */
