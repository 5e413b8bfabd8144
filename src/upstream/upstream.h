/*
 * upstream — the client side of the proxy: per-worker clusters (one per
 * provider model) and endpoints (its backend_refs), weighted endpoint choice,
 * keep-alive connection pools, and one HTTP/1.1 exchange per call with
 * connect, first-byte and idle timeouts (for `protocol: h2` backends, one
 * HTTP/2 stream on a shared connection instead).
 *
 * Threading: a vsr_upstream_t belongs to one worker loop; every function
 * here must be called on that loop's thread.
 *
 * Ownership: the config is borrowed and must outlive the upstream.  A call
 * copies the request head at start; the body pieces are borrowed until the
 * call ends (on_complete, on_error, or vsr_upstream_call_cancel()).
 */
#ifndef VSR_UPSTREAM_H
#define VSR_UPSTREAM_H

#include <uv.h>

#include "base/base.h"
#include "config/config.h"
#include "http/http.h"

typedef struct vsr_upstream_s vsr_upstream_t;
typedef struct vsr_upstream_call_s vsr_upstream_call_t;
/* State every worker shares: endpoint health, outlier ejection, load and
 * the per-cluster circuit-breaker counters (atomics), and the active health
 * checks.  One per configuration version.  Clusters are keyed by identity
 * (the model's name and, in order, each endpoint's host, port and TLS): a
 * version built while an earlier one still exists shares the state of every
 * model whose identity did not change, and each worker keeps its pooled
 * connections for it.  Thread-safe to create and free from any thread. */
typedef struct vsr_upstream_shared_s vsr_upstream_shared_t;

/* Why a call failed.  Failures before the response head are answered by the
 * caller with a local reply; failures after it abort the client stream. */
typedef enum {
    VSR_UPSTREAM_E_CONNECT = 1, /* could not connect (refused, unreachable, connect timeout) */
    VSR_UPSTREAM_E_RESET,       /* the connection ended before the response head */
    VSR_UPSTREAM_E_PROTOCOL,    /* the response was not valid HTTP/1.x (or HTTP/2) */
    VSR_UPSTREAM_E_TIMEOUT,     /* no response head within the first-byte budget */
    VSR_UPSTREAM_E_IDLE,        /* after the head: nothing received for idle_timeout */
    VSR_UPSTREAM_E_ABORTED,     /* after the head: the connection ended mid-body */
    VSR_UPSTREAM_E_OVERFLOW,    /* circuit breaking: the cluster's max requests or pending reached */
} vsr_upstream_error_t;

/* One attempt of a call, for evidence (headers, access log, metrics). */
typedef struct {
    const vsr_model_conf_t *model;     /* the model the attempt was sent to (its call's) */
    const vsr_backend_conf_t *backend;
    unsigned retry;             /* 1 when a retry within its call (not the call's first attempt) */
    int status;                 /* the response status, 0 when none */
    vsr_upstream_error_t error; /* 0 when a response head arrived */
    uint64_t duration_ms;
    uint64_t start_us, end_us;  /* monotonic (vsr_now_us), for trace spans */
} vsr_upstream_attempt_t;

#define VSR_UPSTREAM_MAX_ATTEMPTS 8

/* Filled in by the upstream as the call goes (caller-owned, optional).  One
 * report may span several calls (a request's fallback candidates): each
 * attempt names its model. */
typedef struct {
    vsr_upstream_attempt_t attempts[VSR_UPSTREAM_MAX_ATTEMPTS];
    unsigned n_attempts;        /* attempts made (may exceed the array: only the first ones are kept) */
    unsigned retries;
} vsr_upstream_report_t;

/* Envoy's wording of a failure ("connection failure", "connection
 * termination", "protocol error", ...), for local replies and logs. */
const char *vsr_upstream_error_reason(vsr_upstream_error_t e);

typedef struct {
    /* The response head, hop-by-hop fields not yet removed; valid during the
     * callback only.  1xx interim responses are not reported. */
    void (*on_head)(void *ud, const vsr_http_head_t *head);
    /* Decoded body bytes (chunk framing removed), borrowed from `owner`:
     * take a reference (vsr_rbuf_ref) to keep them past the callback. */
    void (*on_body)(void *ud, const char *p, size_t n, vsr_rbuf_t *owner);
    void (*on_complete)(void *ud);
    /* The call is over; detail is a short static string or NULL; retried:
     * attempts were retried before this failure ("retried and the latest"). */
    void (*on_error)(void *ud, vsr_upstream_error_t err, const char *detail, int retried);
    /* Optional: the body pieces of one read from the backend have all been
     * delivered and the call goes on (not called when the read ended it:
     * on_complete or on_error come instead).  The place to send together
     * what on_body gathered.  Over HTTP/2, after each DATA frame's piece. */
    void (*on_read_end)(void *ud);
} vsr_upstream_callbacks_t;

typedef struct {
    vsr_slice_t method;
    vsr_slice_t path;             /* origin-form target, query included */
    int rewrite_prefix;           /* a leading "/v1" is replaced by the endpoint's path_prefix */
    const vsr_http_header_t *headers; /* end-to-end fields to forward: no host, content-length or hop-by-hop;
                                       * borrowed until the call ends (a retry rebuilds the head) */
    size_t n_headers;
    size_t n_checked_headers;     /* the first ones come from a head with fields_checked (http.h) */
    const vsr_slice_t *body;      /* body pieces, sent in order */
    size_t n_body;
    int send_length;              /* send content-length even when the body is empty */
    int head_request;             /* the method is HEAD: the response has no body */
    int with_credentials;         /* add the endpoint's credentials and extra_headers (replacing same-named fields) */
    uint64_t listener_timeout_ms; /* the listener's timeout: default total and idle timeouts */
    const vsr_reliability_conf_t *override; /* the decision's reliability block, merged over the model's; NULL = none */
    vsr_upstream_report_t *report; /* optional evidence of every attempt */
    uint64_t max_total_ms;        /* caps the total timeout (a fallback candidate's attempt budget); 0 = none */
    /* Optional: appends fields of the attempt's own to its head, as whole
     * "name: value\r\n" lines (a traceparent naming the attempt's span);
     * called with the call's ud as each attempt's head is built.  index is
     * the attempt's place in report (report->n_attempts then; without a
     * report, the attempt number of this call from 0). */
    void (*attempt_headers)(void *ud, unsigned index, vsr_buf_t *head);
} vsr_upstream_request_t;

/* The shared state of cfg's clusters (cfg borrowed: it must outlive the
 * result).  A cluster whose identity some live version already has is
 * reused; a new one's host names are resolved here (blocking getaddrinfo:
 * call it off the workers' loops); literal addresses need no lookup.  A
 * name that does not resolve is logged and leaves its endpoint out of
 * rotation until the re-resolution started with the health checks finds
 * it.  NULL with a message appended to err when TLS cannot be set up. */
vsr_upstream_shared_t *vsr_upstream_shared_new(const vsr_config_t *cfg, vsr_buf_t *err);
/* How many of its clusters were reused from an earlier version. */
size_t vsr_upstream_shared_reused(const vsr_upstream_shared_t *sh);
/* Starts the active health checks (models with health_check_path) on loop:
 * the control thread's, and the periodic re-resolution of backend host
 * names.  Health checks send GET <path>, never an inference. */
void vsr_upstream_health_start(vsr_upstream_shared_t *sh, uv_loop_t *loop);
/* Stops them (on the loop's thread); the handles close on that loop's next
 * run and take their memory with them, so sh may be freed at once. */
void vsr_upstream_health_stop(vsr_upstream_shared_t *sh);
/* After health checks are stopped; from any thread.  Workers drop their
 * pools for clusters no live version has any more. */
void vsr_upstream_shared_free(vsr_upstream_shared_t *sh);
/* How many endpoints of sh have a host name that has not resolved yet
 * (they are out of rotation until it does; the re-resolution runs with the
 * health checks, see vsr_upstream_health_start).  With names, appends the
 * first max_names of them as JSON strings "model/backend (host)",
 * comma-separated.  sh may be NULL (0).  Any thread. */
size_t vsr_upstream_unresolved(vsr_upstream_shared_t *sh, vsr_buf_t *names, size_t max_names);
/* Endpoint j of model i: its health-check state and its outlier-ejection state (for metrics). */
void vsr_upstream_endpoint_state(vsr_upstream_shared_t *sh, size_t model, size_t backend, int *healthy, int *ejected);

/* A worker's clusters on loop: created on first use from whichever version's
 * shared state the request's model belongs to (cfg and sh are not kept). */
vsr_upstream_t *vsr_upstream_new(uv_loop_t *loop, const vsr_config_t *cfg, vsr_upstream_shared_t *sh);
/* Closes every pooled connection.  Calls in flight must have been cancelled.
 * The memory goes once the loop has run the close callbacks. */
void vsr_upstream_free(vsr_upstream_t *up);

/* Starts a call to `model`'s cluster under its reliability policy (model's
 * block, then req->override): endpoint choice by weighted round robin or
 * least request, skipping unhealthy and ejected endpoints; connect,
 * first-byte, per-try, total and idle timeouts; retries with back-off and
 * Retry-After, preferring endpoints not yet tried, within the retry budget;
 * circuit breaking.  Nothing is retried once the response head has been
 * delivered (on_head).  Never NULL; failures are reported through on_error,
 * never from inside this function. */
vsr_upstream_call_t *vsr_upstream_call_start(vsr_upstream_t *up, const vsr_model_conf_t *model,
                                             const vsr_upstream_request_t *req,
                                             const vsr_upstream_callbacks_t *cb, void *ud);
/* Flow control: stop / restart reading the response (backpressure). */
void vsr_upstream_call_pause(vsr_upstream_call_t *call);
void vsr_upstream_call_resume(vsr_upstream_call_t *call);
/* Ends the call early: no further callbacks; its connection is closed. */
void vsr_upstream_call_cancel(vsr_upstream_call_t *call);

/* Cross-model fallback's circuit breaker of a model (ref §1.7), shared by
 * every worker: may a call go to it now, and record a call's outcome
 * (success: not a failure; client errors and cancellations are not
 * recorded).  f: the fallback policy in force (its circuit_breaker fields). */
int vsr_upstream_breaker_allow(vsr_upstream_t *up, const vsr_model_conf_t *m, const vsr_fallback_conf_t *f);
void vsr_upstream_breaker_record(vsr_upstream_t *up, const vsr_model_conf_t *m, const vsr_fallback_conf_t *f,
                                 int success);
/* The breaker's state name now: "closed", "open" or "half_open". */
const char *vsr_upstream_breaker_state(vsr_upstream_t *up, const vsr_model_conf_t *m, const vsr_fallback_conf_t *f);

/* ---- lazy loop timers ----
 * A connection's or a call's timeouts each come later than the last (connect,
 * first byte, idle; a keep-alive request's stop, then the idle timeout), so
 * its one timer is moved lazily, as nginx's are: only when it is wanted
 * sooner than it is armed for.  The owner keeps the loop time it is wanted at
 * (*due; 0 = not wanted), and its callback first asks vsr_timer_due, which
 * arms the timer again for what is left when it fired early.  Stopping is
 * *due = 0.  A stream's idle clock is not moved per read either: the owner
 * notes the time of the last progress, and vsr_timer_idle re-arms the timer
 * for what is left of the idle time when it fires before the stream has been
 * idle that long.  Each costs a timer-heap update only when it re-arms. */

/* The timer, wanted ms from now (ms may be 0: the next loop iteration). */
static inline void vsr_timer_want(uv_timer_t *t, uv_timer_cb cb, uint64_t *due, uint64_t ms)
{
    uint64_t now = uv_now(t->loop);
    *due = now + ms;
    if (uv_is_active((uv_handle_t *)t) && now + uv_timer_get_due_in(t) <= *due)
        return; /* armed for no later than wanted: fires then, and is re-armed */
    uv_timer_start(t, cb, ms, 0);
}

/* In cb: 1 when the time wanted (due, nonzero) has come; 0 when it has not,
 * and the timer is armed again for what is left. */
static inline int vsr_timer_due(uv_timer_t *t, uv_timer_cb cb, uint64_t due)
{
    uint64_t now = uv_now(t->loop);
    if (now >= due)
        return 1;
    uv_timer_start(t, cb, due - now, 0);
    return 0;
}

/* In cb, for an idle clock: 1 when idle_ms have passed since progress_at;
 * 0 when not, and the timer is armed again for what is left. */
static inline int vsr_timer_idle(uv_timer_t *t, uv_timer_cb cb, uint64_t progress_at, uint64_t idle_ms)
{
    return vsr_timer_due(t, cb, progress_at + idle_ms);
}

/* ---- TLS for the gateway's listeners ----
 * The upstream's sans-IO TLS (OpenSSL over memory BIOs) in the server role,
 * so there is one TLS code base.  The caller moves ciphertext between the
 * socket and the object.  A context is thread-safe and shared by every
 * worker; a connection belongs to one thread.  TLS 1.2 or later; ALPN h2
 * preferred over http/1.1. */
typedef struct vsr_tls_ctx_s vsr_tls_ctx_t;
typedef struct vsr_tls_s vsr_tls_t;

/* Loads the certificate chain and the key (PEM).  NULL with a message
 * appended to err when they do not load or do not match. */
vsr_tls_ctx_t *vsr_tls_server_ctx_new(const char *cert_file, const char *key_file, vsr_buf_t *err);
void vsr_tls_server_ctx_free(vsr_tls_ctx_t *ctx);
vsr_tls_t *vsr_tls_server_new(vsr_tls_ctx_t *ctx);
void vsr_tls_conn_free(vsr_tls_t *t); /* accepts NULL */
/* Ciphertext from the socket: VSR_OK, or VSR_ERR_TOO_BIG when 1 MiB of it waits unread. */
int vsr_tls_conn_feed(vsr_tls_t *t, const char *p, size_t n);
/* Plaintext: > 0 bytes, 0 none yet (the handshake goes on: send what is
 * pending out), VSR_ERR on failure, VSR_DECLINED at the peer's close_notify. */
ssize_t vsr_tls_conn_read(vsr_tls_t *t, char *out, size_t cap);
/* VSR_OK once the handshake is done, VSR_AGAIN before, VSR_ERR on failure. */
int vsr_tls_conn_handshake(vsr_tls_t *t);
int vsr_tls_conn_write(vsr_tls_t *t, const char *p, size_t n); /* VSR_OK or VSR_ERR */
size_t vsr_tls_conn_pending_out(const vsr_tls_t *t);
size_t vsr_tls_conn_take_out(vsr_tls_t *t, char *out, size_t cap);
int vsr_tls_conn_alpn_h2(const vsr_tls_t *t); /* ALPN chose h2 */
const char *vsr_tls_conn_error(const vsr_tls_t *t);

/* ---- a blocking unary gRPC client (background threads only) ----
 * One HTTP/2 connection (h2c, or TLS with ALPN h2 verified against the
 * system CAs, SSL_CERT_FILE honoured), made on the first call and kept
 * alive; each call waits with poll() until its deadline at most, and a kept
 * connection the server closed meanwhile is retried once on a new one.  A
 * client belongs to one thread.  The OTLP/gRPC trace exporter uses it. */
typedef struct vsr_grpc_client_s vsr_grpc_client_t;

#define VSR_GRPC_CLIENT_MAX_ANSWER (64u * 1024) /* bytes of the response DATA kept; more fails the call */
#define VSR_GRPC_CLIENT_MAX_MESSAGE 256         /* bytes of grpc-message kept */

typedef struct {
    int http_status;                           /* :status */
    int grpc_status;                           /* 0..16 from the trailers, -1 none (or malformed) */
    char message[VSR_GRPC_CLIENT_MAX_MESSAGE]; /* grpc-message, decoded and printable; or why the call failed */
    const uint8_t *answer;                     /* the response message (no prefix), valid until the next call */
    size_t answer_len;
} vsr_grpc_client_result_t;

/* host is a name or an IP literal (no brackets).  NULL with a message in
 * err when TLS cannot be set up. */
vsr_grpc_client_t *vsr_grpc_client_new(const char *host, uint16_t port, int tls, vsr_buf_t *err);
void vsr_grpc_client_free(vsr_grpc_client_t *c); /* accepts NULL */
/* One call to path (e.g. "/pkg.Service/Method") with msg (serialized, no
 * prefix).  VSR_OK when the server answered (res says how: a non-200
 * :status, or grpc_status != 0, is the server's refusal); VSR_ERR on a
 * transport failure or the deadline (res->message says which). */
int vsr_grpc_client_call(vsr_grpc_client_t *c, const char *path, const void *msg, size_t len, uint64_t deadline_ms,
                         vsr_grpc_client_result_t *res);

/* The pieces of an answer, for the client and its fuzz target: a
 * grpc-status value (-1 when not 1*3DIGIT; an unknown code is 2, UNKNOWN);
 * grpc-message percent-decoded into out (NUL-terminated, non-printable bytes
 * as '?'), returning its length; the response DATA as zero or exactly one
 * uncompressed length-prefixed message (VSR_ERR_INVALID otherwise). */
int vsr_grpc_status_parse(vsr_slice_t v);
size_t vsr_grpc_message_decode(vsr_slice_t v, char *out, size_t cap);
int vsr_grpc_unary_answer(const uint8_t *data, size_t len, const uint8_t **msg, size_t *msg_len);

#endif /* VSR_UPSTREAM_H */
