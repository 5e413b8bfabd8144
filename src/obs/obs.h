/*
 * obs — observability: the access log and the metrics registry.
 *
 * Access log: one JSON line per request, written off the worker threads: a
 * worker formats its line into a bounded queue and a writer thread drains
 * it to standard output (or a file).  When the queue is full the line is
 * dropped and counted — a slow disk never blocks a request.  Lines never
 * hold prompt or completion text, nor credentials.
 *
 * Metrics: per-worker counters and histograms (no locks and no atomic
 * read-modify-write on the request path: plain relaxed loads and stores);
 * a scrape sums every worker's shard and renders Prometheus
 * text.  Label sets are bounded: status class, model, decision, outcome —
 * never request ids.
 *
 * Tracing: W3C traceparent/tracestate parsing and formatting, ids, the
 * sampler, and an exporter thread that batches spans and POSTs them as
 * OTLP/HTTP JSON.  Spans are queued, bounded, never waited for.
 */
#ifndef VSR_OBS_H
#define VSR_OBS_H

#include "base/base.h"

/* ---- access log ---- */

typedef struct vsr_access_log_s vsr_access_log_t;

/* path NULL or "-" = standard output.  queue_lines bounds the queue (0 =
 * 65536; at most 4194304).  NULL with a message in err when the file cannot be
 * opened.  A file is opened for appending and created (0644) if missing.
 * The queue also holds at most 64 MiB of lines, whatever queue_lines says.
 * Each string field is cut to 256 bytes (the path to 2048), never inside a
 * UTF-8 sequence; bytes that are not valid UTF-8 become U+FFFD. */
vsr_access_log_t *vsr_access_log_open(const char *path, size_t queue_lines, vsr_buf_t *err);
/* Flushes what is queued, stops the writer thread, closes the file
 * (never standard output).  Waits for the writes: when nobody reads the pipe
 * the log goes to, it waits for as long.  NULL is a no-op. */
void vsr_access_log_close(vsr_access_log_t *log);
/* Lines dropped because the queue was full.  Lines that a failed write
 * loses are not counted here: they are reported in the error log. */
uint64_t vsr_access_log_dropped(const vsr_access_log_t *log);

/* One request.  Slices are borrowed for the call only (copied into the line). */
typedef struct {
    double start_time;          /* wall clock, seconds since the epoch */
    vsr_slice_t method, path, protocol; /* protocol: "HTTP/1.1" */
    int status;                 /* 0 when no response was sent */
    vsr_slice_t response_flags; /* Envoy-style: "-", "UF" (connect failure), "UT" (timeout), "UC" (reset), "UO" (overflow), "DC" (client left), "LR" (local reply) */
    uint64_t bytes_received;    /* request body bytes */
    uint64_t bytes_sent;        /* response bytes written (head and body) */
    uint64_t duration_ms;
    vsr_slice_t upstream_host;  /* "host:port" of the endpoint that answered, or empty */
    vsr_slice_t request_id;
    vsr_slice_t user_agent;
    /* vsr's own */
    vsr_slice_t recipe, decision, selected_model, served_model;
    vsr_slice_t fallback_path;  /* "a,b" or empty */
    unsigned attempts;
    uint64_t config_version;
    double routing_ms;
    /* signal_families_us: each evaluated signal family's time (names borrowed; NULL/0: none, logged null) */
    const char *const *family_names;
    const uint64_t *family_us;
    size_t n_families;
    int streamed;               /* the response was an event stream (else the three below are logged null) */
    uint64_t stream_events;     /* SSE events read from it */
    int has_usage;              /* its usage object was read (else the token counts are logged null) */
    uint64_t prompt_tokens, completion_tokens;
    /* a request graph (logged null without one) */
    const char *looper_algorithm;
    unsigned looper_calls;
    vsr_slice_t looper_models;  /* the models it called, comma-separated */
    uint64_t looper_prompt_tokens, looper_completion_tokens;
    vsr_slice_t cache;          /* the response cache: "hit" / "miss"; empty (null) when not looked up */
    vsr_slice_t client_protocol, upstream_protocol; /* "openai" / "anthropic"; empty (null) without translation */
    vsr_slice_t response_guard; /* response_jailbreak: pass / flagged / blocked / error; empty (null) when not scanned */
} vsr_access_entry_t;

/* Formats e as one JSON line and queues it; never blocks.  Thread-safe.
 * log NULL (no access log) is a no-op.  Empty slices are logged as null, and
 * so are a start_time before 1970 or past 9999 and a routing_ms that is not
 * a finite number (a negative one is logged as 0.000). */
void vsr_access_log_write(vsr_access_log_t *log, const vsr_access_entry_t *e);

/* ---- tracing (W3C Trace Context, OTLP/HTTP JSON) ---- */

/* A traceparent's fields. */
typedef struct {
    uint8_t trace_id[16];
    uint8_t span_id[8];  /* the parent span: the caller's */
    uint8_t flags;       /* bit 0: sampled */
} vsr_trace_parent_t;

#define VSR_TRACE_SAMPLED 0x01
#define VSR_TRACEPARENT_LEN 55 /* "00-" 32 hex "-" 16 hex "-" 2 hex */

/* Parses a traceparent field value (W3C Trace Context, level 1): version
 * 00 is exactly 55 bytes; a later version (01..fe) may be longer, and then
 * byte 55 must be '-' and only the first four fields are read; version ff
 * is invalid.  Hex is lowercase only; an all-zero trace id or span id is
 * invalid.  VSR_OK, or VSR_ERR_INVALID (out is then undefined). */
int vsr_traceparent_parse(vsr_slice_t v, vsr_trace_parent_t *out);
/* Writes a version-00 traceparent (55 bytes and a NUL) to out.  Only the
 * sampled bit of flags is kept: vsr propagates no flag it does not know. */
void vsr_traceparent_format(const uint8_t trace_id[16], const uint8_t span_id[8], uint8_t flags, char out[56]);
/* 1 when v is a well-formed tracestate (at most 32 list members, each
 * key=value per the grammar, empty members allowed, at most 512 bytes):
 * it is then forwarded unchanged; an invalid one is dropped. */
int vsr_tracestate_valid(vsr_slice_t v);
/* Random ids, never all zero, from a per-thread generator seeded from
 * getrandom(2): fast, not for secrets. */
void vsr_trace_new_trace_id(uint8_t out[16]);
void vsr_trace_new_span_id(uint8_t out[8]);
/* The sampling decision for a new root (no valid incoming traceparent):
 * sampled when the trace id's low 63 bits fall below ratio * 2^63 (the
 * TraceIdRatioBased rule, so the decision is a function of the id).  A
 * request with a parent follows the parent's sampled flag instead. */
int vsr_trace_sample_root(double ratio, const uint8_t trace_id[16]);

typedef enum { VSR_SPAN_INTERNAL = 1, VSR_SPAN_SERVER = 2, VSR_SPAN_CLIENT = 3 } vsr_span_kind_t;
typedef enum { VSR_SPAN_UNSET = 0, VSR_SPAN_OK = 1, VSR_SPAN_ERROR = 2 } vsr_span_status_t;

typedef struct {
    const char *key;
    vsr_slice_t str;  /* a string value (cut to 256 bytes, made valid UTF-8) ... */
    int64_t num;      /* ... or, when is_num, an integer */
    int is_num;
} vsr_span_attr_t;

typedef struct {
    const char *name;
    uint8_t trace_id[16];
    uint8_t span_id[8];
    uint8_t parent_id[8];        /* all zero: a root span */
    uint64_t start_ns, end_ns;   /* unix time, nanoseconds */
    vsr_span_kind_t kind;
    vsr_span_status_t status;
    const vsr_span_attr_t *attrs;
    size_t n_attrs;
} vsr_span_t;

/* Appends s as one OTLP/JSON span object (hex ids, nanoseconds as decimal
 * strings, int attributes as strings, as the OTLP JSON mapping wants). */
int vsr_span_to_json(vsr_buf_t *b, const vsr_span_t *s);

/* Appends s as one OTLP protobuf Span (opentelemetry.proto.trace.v1.Span):
 * the same fields and attribute values as the JSON form. */
int vsr_span_to_proto(vsr_buf_t *b, const vsr_span_t *s);

typedef struct vsr_tracer_s vsr_tracer_t;

/* OTLP/gRPC: the transport the caller gives the tracer (obs opens no
 * connection for it).  export makes one TraceService/Export call with msg
 * (a serialized ExportTraceServiceRequest, no gRPC prefix) on the exporter
 * thread, waiting until deadline_ms at most.  It returns the grpc-status
 * (0 OK), or -1 when none came (connect, write, timeout, a non-200
 * :status); why gets a short reason; *answer / *answer_len the response
 * message (valid until the next call), for its partial_success. */
typedef struct {
    void *ud;
    int (*export)(void *ud, const uint8_t *msg, size_t len, uint64_t deadline_ms, const uint8_t **answer,
                  size_t *answer_len, char *why, size_t why_cap);
} vsr_tracer_grpc_t;

typedef struct {
    const char *endpoint;         /* "http://host[:port][/path]"; no path = /v1/traces; port default 4318
                                   * (with grpc: only named in logs) */
    const vsr_tracer_grpc_t *grpc; /* non-NULL: export OTLP/gRPC (protobuf) through it instead */
    const char *service_name;     /* resource service.name; NULL = "vsr" */
    const char *service_version;  /* NULL = none */
    const char *environment;      /* resource deployment.environment; NULL = none */
    double sampling_ratio;        /* new roots: 0..1 */
    size_t max_queue_spans;       /* 0 = 8192 */
    size_t max_batch_spans;       /* 0 = 512 */
    uint64_t batch_timeout_ms;    /* 0 = 1000: a partial batch waits at most this long */
    uint64_t export_timeout_ms;   /* 0 = 2000: connect, send and answer of one batch */
    uint64_t shutdown_timeout_ms; /* 0 = 3000: vsr_tracer_free's flush */
} vsr_tracer_opts_t;

/* Checks an endpoint and splits it; host, port and path are NUL-terminated
 * and cut to their sizes.  VSR_ERR_INVALID with *why set when it is not an
 * http:// URL vsr can export to (https is refused: run a local collector). */
int vsr_tracer_parse_endpoint(const char *url, char *host, size_t host_len, uint16_t *port, char *path,
                              size_t path_len, const char **why);
/* The same for an OTLP/gRPC endpoint: "[scheme://]host[:port][/]" with
 * scheme grpc, grpcs, http or https (TLS is the caller's choice), port
 * default 4317, an IPv6 literal in brackets (host gets it without).  No
 * path: the gRPC method is fixed. */
int vsr_tracer_parse_grpc_endpoint(const char *ep, char *host, size_t host_len, uint16_t *port, const char **why);
/* The collector's ExportTraceServiceResponse: its partial_success's
 * rejected_spans (0 when absent) and error_message (cut to msg_cap - 1
 * bytes, non-printable bytes as '?').  VSR_ERR_INVALID when it does not
 * decode. */
int vsr_tracer_grpc_answer(const uint8_t *p, size_t n, int64_t *rejected, char *msg, size_t msg_cap);
/* Starts the exporter thread.  NULL with a message in err on a bad endpoint
 * or when the thread cannot start. */
vsr_tracer_t *vsr_tracer_new(const vsr_tracer_opts_t *o, vsr_buf_t *err);
/* Flushes what is queued (bounded by shutdown_timeout_ms; what is left is
 * counted as dropped), stops the thread, frees.  NULL is a no-op. */
void vsr_tracer_free(vsr_tracer_t *t);
double vsr_tracer_ratio(const vsr_tracer_t *t);
/* Queues the spans of one request (encoded here, on the caller's thread);
 * never blocks: when the queue is full they are dropped and counted.
 * Thread-safe.  t NULL is a no-op. */
void vsr_tracer_emit(vsr_tracer_t *t, const vsr_span_t *spans, size_t n);

typedef struct {
    uint64_t spans_exported;   /* accepted by the collector (2xx; gRPC: status OK, less partial_success's rejected) */
    uint64_t spans_dropped;    /* queue full, or left at shutdown */
    uint64_t spans_failed;     /* in a batch the collector did not accept */
    uint64_t export_failures;  /* batches that failed: connect, write, timeout, non-2xx, grpc-status not OK */
} vsr_tracer_stats_t;
void vsr_tracer_stats(const vsr_tracer_t *t, vsr_tracer_stats_t *out); /* t NULL: zeros */

/* ---- metrics ---- */

typedef struct vsr_metrics_s vsr_metrics_t;   /* the registry: one per process */
typedef struct vsr_metrics_shard_s vsr_metrics_shard_t; /* one per worker thread */

/* The functions below accept a NULL registry or shard and do nothing, so a
 * caller without metrics needs no checks.  Label values (model, decision,
 * outcome, endpoint; "from" and "to" are models) are cut to 256 bytes;
 * each kind keeps at most 256 distinct values for the life of the registry,
 * and the values that come after are counted under "other". */
vsr_metrics_t *vsr_metrics_new(unsigned n_shards);
void vsr_metrics_free(vsr_metrics_t *m);
/* Worker i's shard: written only by that worker's thread. */
vsr_metrics_shard_t *vsr_metrics_shard(vsr_metrics_t *m, unsigned i);

/* A finished request (status 0 = no response; model/decision may be empty).
 * status_class is "1xx".."5xx", "none" for 0, "other" past 599.  A duration
 * that is negative (or not a finite number) is not observed: pass -1 for
 * routing_seconds when the request was not routed and for upstream_seconds
 * when no upstream attempt was made. */
void vsr_metrics_request(vsr_metrics_shard_t *s, int status, vsr_slice_t model, vsr_slice_t decision,
                         double total_seconds, double routing_seconds, double upstream_seconds);
/* One signal family's evaluation time for one request
 * (vsr_signal_family_seconds{family}; negative: not observed). */
void vsr_metrics_signal_family(vsr_metrics_shard_t *s, vsr_slice_t family, double seconds);
/* Time to the first response byte of a stream (negative: not observed). */
void vsr_metrics_ttfb(vsr_metrics_shard_t *s, vsr_slice_t model, double seconds);
/* One upstream attempt: outcome "ok", "5xx", "4xx", "connect_failure", "reset", "timeout", "protocol", "overflow". */
void vsr_metrics_attempt(vsr_metrics_shard_t *s, vsr_slice_t model, const char *outcome);
void vsr_metrics_retry(vsr_metrics_shard_t *s, vsr_slice_t model);
void vsr_metrics_fallback(vsr_metrics_shard_t *s, vsr_slice_t from_model, vsr_slice_t to_model);
void vsr_metrics_overflow(vsr_metrics_shard_t *s, vsr_slice_t model);
/* Token counts a response reported (vsr_tokens_total{model,type}). */
void vsr_metrics_tokens(vsr_metrics_shard_t *s, vsr_slice_t model, uint64_t prompt, uint64_t completion);
/* One call of a request graph (vsr_looper_calls_total{algorithm,model,outcome},
 * vsr_looper_call_duration_seconds{algorithm,node}); algorithm and node are
 * static names. */
void vsr_metrics_looper_call(vsr_metrics_shard_t *s, const char *algorithm, const char *node, vsr_slice_t model,
                             int ok, double seconds);
/* A failed accept (vsr_accept_errors_total{reason}: "emfile", "enfile", "other"). */
void vsr_metrics_accept_error(vsr_metrics_shard_t *s, const char *reason);
/* A client connection ended for slowness (vsr_client_timeouts_total{reason}: "header", "body", "write"). */
void vsr_metrics_client_timeout(vsr_metrics_shard_t *s, const char *reason);
/* A client-facing limit refused or cut something (vsr_edge_refusals_total{reason});
 * reason is a fixed string (see docs/observability.md). */
void vsr_metrics_edge_refusal(vsr_metrics_shard_t *s, const char *reason);
/* vsr_ratelimit_total{rule, result}: result limited, error_open or error_closed */
void vsr_metrics_ratelimit(vsr_metrics_shard_t *s, const char *rule, const char *result);
/* Gauges owned by the shard: add +1 / -1. */
/* vsr_response_cache_total{op, result}: op lookup | store; result hit,
 * miss, stored, error (the store failed: the request went on), skipped
 * (an answer not kept: too big, cut, not a completion). */
void vsr_metrics_cache(vsr_metrics_shard_t *s, const char *op, const char *result);
/* vsr_response_guard_total{result}: the response_jailbreak plugin's scan of
 * an answer; result pass | flagged | blocked | error (fail open). */
void vsr_metrics_response_guard(vsr_metrics_shard_t *s, const char *result);
/* vsr_remote_classifier_calls_total{result}: n calls of remote classifiers
 * by routing signals; result ok | failed | invalid. */
void vsr_metrics_remote_classifier(vsr_metrics_shard_t *s, const char *result, unsigned n);
/* vsr_hallucination_checks_total{result}: the hallucination plugin's look
 * at an answer (result: vsr__hc_result_names). */
void vsr_metrics_hallucination(vsr_metrics_shard_t *s, const char *result);
/* vsr_shadow_dispatch_total{model, result}: a shadow copy; result ok |
 * failed | dropped | sampled_out. */
void vsr_metrics_shadow(vsr_metrics_shard_t *s, vsr_slice_t model, const char *result);
/* vsr_tool_selection_total{result}: semantic | unavailable (fail open). */
void vsr_metrics_tool_selection(vsr_metrics_shard_t *s, const char *result);
/* vsr_memory_total{op, result}: the memory plugin; op request (result used,
 * missing, skipped, unavailable) or write (stored, error). */
void vsr_metrics_memory(vsr_metrics_shard_t *s, const char *op, const char *result);
/* vsr_rag_retrievals_total{backend,result}: the rag plugin's retrieval;
 * result injected | cached | empty | failed | blocked. */
void vsr_metrics_rag(vsr_metrics_shard_t *s, const char *backend, const char *result);
void vsr_metrics_connections(vsr_metrics_shard_t *s, int delta);
void vsr_metrics_active_requests(vsr_metrics_shard_t *s, int delta);

/* Process-wide values set from the control thread (atomics; the
 * per-endpoint values are behind a mutex, so any thread may set them). */
void vsr_metrics_set_config_version(vsr_metrics_t *m, uint64_t version);
void vsr_metrics_set_endpoint_health(vsr_metrics_t *m, vsr_slice_t model, vsr_slice_t endpoint, int healthy,
                                     int ejected);
void vsr_metrics_count_ejection(vsr_metrics_t *m, vsr_slice_t model);
/* A configuration became active (vsr_config_activations_total). */
void vsr_metrics_count_activation(vsr_metrics_t *m);
/* A configuration document was submitted: result "ack" (activated), "nack"
 * (rejected) or "unchanged" (vsr_config_updates_total{result}). */
void vsr_metrics_count_config_update(vsr_metrics_t *m, const char *result);

/* vsr_router_replay_records_total{backend, result}: backend "memory" |
 * "redis" | "postgres", result "written" | "failed" | "evicted"; n is the count so far
 * (the store keeps the counts; any thread). */
void vsr_metrics_set_replay_records(vsr_metrics_t *m, const char *backend, const char *result, uint64_t n);

/* Renders every metric (shards summed) in the Prometheus text format 0.0.4,
 * appended to out (when out's cap is reached, only whole lines are kept).
 * Safe while workers write (a scrape may see a counter mid-update, never a
 * torn value: counters are 64-bit aligned and written with relaxed atomics)
 * and from several threads at once.  Families with labels appear once they
 * have a series; the others always (the vsr_tracing_* ones once a tracer is
 * attached).  Series are sorted by label value. */
void vsr_metrics_render(vsr_metrics_t *m, vsr_buf_t *out);
/* The access log and tracer whose counters the scrape reports (dropped
 * lines, dropped spans, export failures); either may be NULL.  Both are
 * borrowed and must outlive the registry's scrapes.  Call before serving. */
void vsr_metrics_attach(vsr_metrics_t *m, vsr_access_log_t *log, vsr_tracer_t *tracer);

#endif /* VSR_OBS_H */
