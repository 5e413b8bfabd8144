/*
 * runtime — the model runtime: `vsr runtime serve`, an HTTP/JSON server on a
 * Unix domain socket (or TCP) with the reference runtime's API
 * (POST /v1/bundle, /v1/embeddings, /v1/classify, GET /v1/models, /health,
 * /health/live, /metrics; docs/runtime.md), its thread pool, the embedders
 * behind one interface, and the embedding cache; and the router's side of
 * it: the client (one per worker loop) and the child's supervisor (see "The
 * router's side" below).  Depends on base and the codecs (json, http) only.
 *
 * Threading: vsr_runtime_serve() runs one event loop on the calling thread
 * and `threads` compute threads.  Embedders and the cache are called from
 * the compute threads, concurrently.
 */
#ifndef VSR_RUNTIME_H
#define VSR_RUNTIME_H

#include "base/base.h"

/* ---- embedders --------------------------------------------------------
 * One embedding model behind a vtable.  embed() is called from any compute
 * thread, concurrently: an implementation is thread-safe or locks itself.
 * It writes n vectors of e->dim floats, row after row, into out (the caller
 * owns out: n * dim floats) and, when tokens is not NULL, adds the number of
 * tokens it read to *tokens.  Returns VSR_OK, VSR_ERR_INVALID (an input the
 * model refuses, e.g. empty: err says why) or another negative code (the
 * model failed: err says why).  err is a caller-owned buffer for a one-line
 * message. */
typedef struct vsr_embedder_s vsr_embedder_t;
typedef struct {
    int (*embed)(vsr_embedder_t *e, const vsr_slice_t *texts, size_t n, float *out, uint64_t *tokens,
                 vsr_buf_t *err);
    void (*free)(vsr_embedder_t *e);
} vsr_embedder_ops_t;

/* A model is served by wrapping it in one of these: fill ops, name,
 * backend, dim and impl (the model's own handle), and give it to the server
 * in vsr_runtime_opts_t.embedders.  The composition root (src/cmd/main.c,
 * `vsr runtime serve --model PATH`) is where a model file is loaded and
 * wrapped; embed() may be called with texts of any length (the model
 * truncates to its window) and must refuse an empty one. */
struct vsr_embedder_s {
    const vsr_embedder_ops_t *ops;
    char name[128];      /* the model id clients name (GET /v1/models) */
    const char *backend; /* "hash", "remote", "use-lite", ... (static) */
    size_t dim;          /* floats per vector */
    void *impl;          /* the implementation's state */
};

#define VSR_HASH_EMBED_DIM 512
#define VSR_RT_MAX_DIM 4096 /* bounds a remote model's vectors (and so an answer's size) */
/* The built-in TEST embedder "hash-512": each word (a run of letters and
 * digits, ASCII folded to lower case; bytes >= 0x80 count as letters) is
 * hashed (FNV-1a 64) onto 8 of 512 signed components, and the sum is scaled
 * to unit length.  Deterministic, fast, and meaningless beyond shared words:
 * for tests and demos, never for real routing.  Text without any word is
 * hashed whole; an empty text is VSR_ERR_INVALID.  Returns NULL on OOM. */
vsr_embedder_t *vsr_embedder_hash_new(void);

/* An OpenAI-compatible remote endpoint (vLLM, TEI, OpenAI, ...).
 * base_url: "http://host:port[/prefix]"; requests go to <base_url>/embeddings
 * when the prefix ends in "/v1", else to <base_url>/v1/embeddings.  Plain
 * HTTP/1.1 only (https:// → NULL with err set).  model: the name sent in the
 * request and served under (required).  api_key: sent as a bearer token when
 * not NULL (copied).  dim: expected vector length (at most VSR_RT_MAX_DIM),
 * 0 = learn it by embedding
 * one probe text now (a failing probe → NULL with err set).  timeout_ms bounds
 * each call (connect, send and receive together).  Calls block the compute
 * thread they run on; the connection is not kept between calls. */
vsr_embedder_t *vsr_embedder_remote_new(const char *base_url, const char *model, const char *api_key, size_t dim,
                                        uint64_t timeout_ms, vsr_buf_t *err);

/* The USE-lite sentence encoder (512-d; src/models/, docs/runtime.md "The
 * embedding model") from its converted file at path, served as `name`
 * (NULL: "use-lite").  The file is mapped and shared by every compute
 * thread; each thread keeps its own scratch.  Sets the BLAS library to one
 * thread (the compute pool is the parallelism).  NULL with err set when the
 * file cannot be loaded. */
vsr_embedder_t *vsr_embedder_use_new(const char *path, const char *name, vsr_buf_t *err);

void vsr_embedder_free(vsr_embedder_t *e); /* accepts NULL */

/* ---- classifiers ------------------------------------------------------
 * A model that labels a text, behind a vtable: it answers `classify` tasks
 * ({"classify":{"model":NAME,"text":T,...}}) and POST /v1/classify.
 * classify() runs on any compute thread, concurrently (thread-safe, or it
 * locks itself).  task is the raw JSON text of the task's classify object
 * (the classifier reads its own options from it; the text is already
 * unescaped into `text`).  It appends the members that follow "model" in
 * the result object to out, one of
 *   ,"labels":[{"label":L,"score":P},...]   probabilities, highest first
 *   ,"entities":[{"type":T,"start":B,"end":B,"score":S},...]  byte offsets
 * plus any evidence members of its own.  env gives the runtime's default
 * embedder (through the embedding cache) to classifiers over embeddings.
 * Returns VSR_OK, VSR_ERR_INVALID (the task is malformed or the text can't
 * be classified: err says why) or another negative code (err says why). */
typedef struct vsr_classifier_s vsr_classifier_t;
typedef struct {
    /* The default embedder's vector of text (env->dim floats, unit length
     * for the built-in embedders) into out.  VSR_OK or the embedder's code
     * (err says why).  NULL when the runtime serves no embedder. */
    int (*embed)(void *ud, vsr_slice_t text, float *out, vsr_buf_t *err);
    void *ud;
    size_t dim;
    const char *embedder; /* the default embedder's name, "" without one */
} vsr_classify_env_t;
typedef struct {
    int (*classify)(vsr_classifier_t *c, const vsr_classify_env_t *env, vsr_slice_t text, vsr_slice_t task,
                    vsr_buf_t *out, vsr_buf_t *err);
    void (*free)(vsr_classifier_t *c);
} vsr_classifier_ops_t;
struct vsr_classifier_s {
    const vsr_classifier_ops_t *ops;
    char name[64];       /* the model id tasks name: "domain", "jailbreak", "pii" */
    const char *backend; /* static: "linear-head", "tfidf-lr", "rules", ... */
    const char *output;  /* static: "labels" or "entities" */
    size_t needs_dim;    /* an embedding width it was built for (0: none): checked against the default embedder */
    int embeds_text;     /* 1: classify() always embeds its text through env->embed, so the runtime may
                          * compute that vector ahead, in one batch with other work's texts */
    void *impl;
};
void vsr_classifier_free(vsr_classifier_t *c); /* accepts NULL */

/* The built-in classifiers (src/runtime/classify_*.c; docs/signals.md).
 * NULL with err set when one cannot be built.
 * domain: the MMLU-Pro domain head (head_path NULL: the one compiled in)
 *   over the default embedder's vectors (USE-lite, 512-d).
 * jailbreak: the llm_guardrail TF-IDF + logistic-regression models read
 *   from guard_dir (NULL: none, and method "classifier" is refused per
 *   task), and the contrastive scorer over the built-in or the task's
 *   patterns; task option "method": classifier | contrastive | hybrid.
 * pii: the entity detector (rules with checksums, gazetteers, context). */
vsr_classifier_t *vsr_classifier_domain_new(const char *head_path, vsr_buf_t *err);
vsr_classifier_t *vsr_classifier_jailbreak_new(const char *guard_dir, vsr_buf_t *err);
vsr_classifier_t *vsr_classifier_pii_new(vsr_buf_t *err);

/* ---- the embedding cache ----------------------------------------------
 * Bounded by entries and by bytes (key text + model name + vector +
 * overhead), least recently used out first.  Keyed by (model, text): a
 * 64-bit hash to find, a full compare to match.  Thread-safe (one mutex).
 * max_entries or max_bytes 0 → vsr_emb_cache_new returns NULL (no cache);
 * every function accepts a NULL cache (lookups miss, inserts do nothing). */
typedef struct vsr_emb_cache_s vsr_emb_cache_t;
typedef struct {
    uint64_t hits, misses, evictions, entries, bytes;
} vsr_emb_cache_stats_t;

vsr_emb_cache_t *vsr_emb_cache_new(size_t max_entries, size_t max_bytes);
void vsr_emb_cache_free(vsr_emb_cache_t *c);
/* Copies dim floats into out on a hit: 1 hit, 0 miss. */
int vsr_emb_cache_get(vsr_emb_cache_t *c, vsr_slice_t model, vsr_slice_t text, float *out, size_t dim);
/* Stores a copy (an existing entry is refreshed).  An entry larger than the
 * byte bound is not stored. */
void vsr_emb_cache_put(vsr_emb_cache_t *c, vsr_slice_t model, vsr_slice_t text, const float *vec, size_t dim);
void vsr_emb_cache_stats(vsr_emb_cache_t *c, vsr_emb_cache_stats_t *out);

/* ---- the bundle request parser (sans-IO) -----------------------------
 * Parses a /v1/bundle body.  Every slice points into the body (ids and
 * texts are unescaped into pool when they hold escapes): the body and the
 * pool must outlive the result. */
#define VSR_RT_MAX_INPUTS 2048 /* per embed task, and per bundle together */
#define VSR_RT_MAX_ID 256

typedef enum {
    VSR_RT_TASK_EMBED = 1,
    VSR_RT_TASK_CLASSIFY,
    VSR_RT_TASK_UNSUPPORTED, /* a reference task type not served yet (decisions, rerank) */
    VSR_RT_TASK_UNKNOWN,     /* a member that names no task type we know */
    VSR_RT_TASK_INVALID,     /* no task member, two, or an invalid task body: error says why */
} vsr_rt_task_kind_t;

typedef struct {
    vsr_slice_t id;
    vsr_rt_task_kind_t kind;
    vsr_slice_t type;        /* the task member's name */
    vsr_slice_t model;       /* embed: NULL slice when absent; classify: the classifier */
    vsr_slice_t *inputs;     /* embed: n_inputs texts (pool); classify: the text (n_inputs 1) */
    vsr_slice_t payload;     /* classify: the raw JSON text of the classify object */
    size_t n_inputs;
    const char *error;       /* INVALID: a static reason */
} vsr_rt_task_t;

typedef struct {
    vsr_rt_task_t *tasks;    /* pool */
    size_t n_tasks;
    int64_t deadline_ms;     /* -1 when absent */
} vsr_rt_bundle_t;

/* Returns VSR_OK, or on a request-level error an HTTP status (400, 413 or
 * 422) with *code and *msg static strings: 400 invalid_json (not JSON, or
 * duplicate member names) or invalid_request (shape, duplicate ids), 413
 * too_many_tasks (more than max_tasks) or too_many_inputs (the embed tasks
 * hold more than VSR_RT_MAX_INPUTS inputs together), 422 invalid_input (a
 * negative deadline).  A bad task that is otherwise well placed is not a request
 * error: it comes back as a VSR_RT_TASK_INVALID task. */
int vsr_rt_bundle_parse(const char *body, size_t len, size_t max_tasks, vsr_pool_t *pool, vsr_rt_bundle_t *out,
                        const char **code, const char **msg);

/* ---- the server -------------------------------------------------------- */
typedef struct {
    const char *socket_path;   /* Unix socket, or NULL */
    const char *listen;        /* "ADDR:PORT" for TCP, or NULL; exactly one of the two */
    vsr_embedder_t **embedders;/* n_embedders, the first the default; the server takes them */
    size_t n_embedders;
    vsr_classifier_t **classifiers; /* n_classifiers; the server takes them */
    size_t n_classifiers;
    unsigned threads;          /* 0 = cores */
    size_t queue;              /* 256 */
    size_t max_inputs;         /* embed inputs of the work queued or running, together: 16384 (→ 429) */
    size_t max_tasks;          /* 64 */
    size_t max_body;           /* 8 MiB */
    size_t cache_entries;      /* 4096; 0 = no cache */
    size_t cache_bytes;        /* 64 MiB; 0 = no cache */
    uint64_t header_timeout_ms;/* 10000 */
    uint64_t body_timeout_ms;  /* 30000 */
    uint64_t idle_timeout_ms;  /* 60000 */
    size_t max_connections;    /* 1024 */
    size_t max_buffered;       /* request body bytes held at once, all connections: 256 MiB (→ 503) */
    uint64_t default_deadline_ms; /* 30000 */
    size_t max_batch;          /* texts one forward pass may take from waiting work: 16; 1 = no batching */
    uint64_t test_delay_ms;    /* test knob: a compute thread sleeps this long on each item it takes; 0 */
} vsr_runtime_opts_t;

/* Fills the defaults above (no address, no embedders). */
void vsr_runtime_opts_init(vsr_runtime_opts_t *o);

/* Serves until SIGTERM or SIGINT.  Takes the embedders in every case.
 * Returns 0 after a clean shutdown, 1 when it cannot start (logged), 3 when
 * the socket or address is in use by a live process. */
int vsr_runtime_serve(const vsr_runtime_opts_t *opts);

/* ==== The router's side ==================================================
 * The router's client of the runtime and its supervisor (src/runtime/
 * client.c, supervisor.c), wired by the composition root (src/cmd/main.c):
 * one client per gateway worker loop (the loop is libuv's, declared here as
 * struct uv_loop_s so this header needs no libuv include).
 *
 * The client: one POST /v1/bundle per request phase, over HTTP/1.1 on the
 * runtime's Unix domain socket (or TCP), with connections pooled per loop.
 * A bundle is sent as
 *   {"tasks":[{"id":ID,TYPE:PAYLOAD},...],"options":{"deadline_ms":REMAINING}}
 * where REMAINING is what is left of the caller's deadline when the call
 * starts, and its answer ({"results":[{"id":ID,TYPE:RESULT} | {"id":ID,
 * "error":{"code","message"}}]}) is handed back per task, the result as the
 * raw JSON text of the task type's member.
 *
 * Threading: a client belongs to one libuv loop (a worker's); every
 * function and callback runs on that loop's thread.  Memory: tasks are
 * borrowed for the call to vsr_rtc_bundle only (the request is serialised
 * there); results are borrowed for the duration of done. */
struct uv_loop_s;

typedef struct vsr_rtc_s vsr_rtc_t;
typedef struct vsr_rtc_call_s vsr_rtc_call_t;

typedef struct {
    const char *socket_path;   /* copied; ignored when tcp_host is set */
    const char *tcp_host;      /* a numeric IPv4 or IPv6 address: connect over TCP to it (and tcp_port) instead */
    uint16_t tcp_port;
    unsigned max_conns;        /* connections open at once; 0 → 64.  A call past it fails at once (VSR_ERR_TOO_BIG) */
    unsigned max_idle;         /* idle connections kept for the next calls; 0 → 8 */
    size_t max_response_bytes; /* a larger answer fails the call (VSR_ERR_TOO_BIG); 0 → 16 MiB */
    /* On a Unix socket: the process that must be serving it (the managed
     * child: vsr_rts_pid), asked at each new connection; a connection to
     * any other process (or when it answers 0) fails before a byte is sent,
     * and so does the call (VSR_ERR_IO).  NULL: not checked.  Called on
     * the client's loop thread. */
    int (*peer_pid)(void *ud);
    void *peer_ud;
} vsr_rtc_opts_t;

typedef struct {
    vsr_slice_t id;            /* unique within the bundle */
    vsr_slice_t type;          /* embed, classify, ... */
    vsr_slice_t payload;       /* a JSON value, copied as is */
} vsr_rtc_task_t;

typedef struct {
    vsr_slice_t id;
    int status;                /* VSR_OK, or VSR_ERR: the runtime answered this task with an error */
    vsr_slice_t result;        /* VSR_OK: the task type's member, raw JSON */
    vsr_slice_t error_code;    /* VSR_ERR: error.code ("deadline_exceeded", ...) */
} vsr_rtc_result_t;

typedef struct {
    int http_status;           /* 0 when no answer came */
    double wall_ms;            /* the call, start to end */
    double runtime_ms;         /* the runtime's own time (server-timing: queue + compute); -1 when not given */
} vsr_rtc_timing_t;

/* The end of a call (exactly once, unless cancelled): VSR_OK with the
 * results; VSR_ERR_IO (the runtime cannot be reached, closed the
 * connection, or its answer is not HTTP), VSR_ERR_TOO_BIG (429 or 413, or
 * an answer over the limit), VSR_ERR_INVALID (an answer that is not the
 * bundle shape), VSR_ERR (the deadline passed, or any other status). */
typedef void (*vsr_rtc_done_fn)(void *ud, int status, const vsr_rtc_result_t *results, size_t n_results,
                                const vsr_rtc_timing_t *timing);

vsr_rtc_t *vsr_rtc_new(struct uv_loop_s *loop, const vsr_rtc_opts_t *opts);
/* Closes every connection; calls in flight end without done (as if
 * cancelled).  The memory goes once libuv has closed the handles (run the
 * loop). */
void vsr_rtc_free(vsr_rtc_t *c);

/* Starts one bundle call with the deadline deadline_ms (absolute, on
 * vsr_now_ms()).  Returns the call, or NULL when done has already run (it
 * could not start: VSR_ERR_TOO_BIG past max_conns, VSR_ERR past the
 * deadline). */
vsr_rtc_call_t *vsr_rtc_bundle(vsr_rtc_t *c, const vsr_rtc_task_t *tasks, size_t n_tasks, uint64_t deadline_ms,
                               vsr_rtc_done_fn done, void *ud);
/* Before done: the call ends, done never runs; its connection is closed
 * (an answer may be on its way). */
void vsr_rtc_cancel(vsr_rtc_call_t *call);

/* Connections open and idle (for tests and metrics). */
unsigned vsr_rtc_open_conns(const vsr_rtc_t *c);
unsigned vsr_rtc_idle_conns(const vsr_rtc_t *c);

/* ---- the supervisor: the runtime as the router's child ----
 * Starts the runtime (exe + args, e.g. `vsr runtime serve --socket PATH`)
 * with uv_spawn, probes GET /health/live on its socket, and restarts it with
 * exponential back-off when it exits or stops answering (a probe answered by
 * any process but the child is a failed one).  Its stdout and stderr go to
 * vsr's log line by line, prefixed.  Ready is true from the first good
 * probe of a child until that child fails; on_ready tells each change.
 * Everything runs on the loop's thread; vsr_rts_ready() and vsr_rts_pid()
 * may be read from any thread. */
typedef struct vsr_rts_s vsr_rts_t;

typedef struct {
    const char *exe;               /* copied */
    const char *const *args;       /* the arguments after exe, NULL-terminated; copied */
    const char *socket_path;       /* probed; copied */
    uint64_t probe_interval_ms;    /* 0 → 1000 (200 while starting) */
    uint64_t probe_timeout_ms;     /* 0 → 1000 */
    unsigned probe_failures;       /* consecutive failed probes that make a ready child restart; 0 → 3 */
    uint64_t start_timeout_ms;     /* a child not ready by then is restarted; 0 → 60000 */
    uint64_t backoff_initial_ms;   /* 0 → 100; doubles after each failed start ... */
    uint64_t backoff_max_ms;       /* ... up to this; 0 → 30000.  A child that became ready resets it */
    void (*on_ready)(void *ud, int ready);
    void (*log_line)(void *ud, const char *line, size_t len); /* NULL: vsr_log_info("runtime", ...) */
    void *ud;
} vsr_rts_opts_t;

vsr_rts_t *vsr_rts_start(struct uv_loop_s *loop, const vsr_rts_opts_t *opts);
int vsr_rts_ready(const vsr_rts_t *s);
unsigned vsr_rts_starts(const vsr_rts_t *s); /* children started so far */
int vsr_rts_pid(const vsr_rts_t *s);         /* the child's, 0 when none runs; from any thread */
/* Stops the child (SIGTERM, SIGKILL after 5 s) and frees everything once
 * libuv has closed the handles (run the loop); on_ready is not called. */
void vsr_rts_stop(vsr_rts_t *s);

#endif /* VSR_RUNTIME_H */
