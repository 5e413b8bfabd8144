/* gateway-int.h — private to the gateway module. */
#ifndef VSR_GATEWAY_INT_H
#define VSR_GATEWAY_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <uv.h>

#include "gateway/gateway.h"
#include "http/http.h"
#include "json/json.h"
#include "proto/anthropic.h"
#include "proto/completions.h"
#include "proto/responses.h"
#include "proto/sse.h"
#include "routing/routing.h"
#include "store/store.h"
#include "upstream/upstream.h"

typedef struct worker_s worker_t;
typedef struct conn_s conn_t;
typedef struct request_s request_t;
typedef struct h2_sess_s h2_sess_t;
typedef struct h2_stream_s h2_stream_t;

typedef struct {
    uv_tcp_t tcp;
    worker_t *w;
    const vsr_listener_conf_t *conf; /* the restart-only settings (a copy the gateway owns) */
    long index;          /* position in the configuration's listeners (api_keys and models are read from the
                          * request's version there); -1 for the management and metrics listeners */
    atomic_uint *active; /* connections on this listener, all workers together */
    int bound;
    int management;      /* the management API listener */
    int extproc;         /* the ext_proc gRPC listener (--gateway extproc): HTTP/2 only, every stream a Process call */
    int metrics;         /* the metrics listener */
    vsr_tls_ctx_t *tls;  /* listeners[].tls: the gateway's, shared by every worker; NULL = plain */
    uv_timer_t backoff;  /* accepting pauses after a failed accept (out of descriptors) */
    int paused;          /* backing off: a connection libuv accepts meanwhile is held, not taken */
    int held;            /* ... one is held: libuv polls the listener again once it is taken */
} listener_t;

struct worker_s {
    vsr_gateway_t *gw;
    unsigned id;
    pthread_t thread;
    uv_loop_t loop;
    uv_async_t stop_async;
    vsr_upstream_t *up;
    vsr_metrics_shard_t *metrics;
    listener_t *listeners;
    size_t n_listeners;
    conn_t *conns;         /* every open client connection, for shutdown */
    void *wop_free;        /* free list of write operations */
    void *parser_free;     /* free list of request parsers (conn.c) */
    unsigned n_parser_free;
    char readbuf[VSR_RBUF_SIZE]; /* client reads are consumed inside read_cb */
    char tlsbuf[VSR_RBUF_SIZE];  /* ... and decrypted into this one on TLS listeners */
    int start_rc;
    vsr_buf_t start_err;
    /* commands from the control thread through stop_async */
    atomic_int cmd;              /* CMD_DRAIN or CMD_STOP */
    pthread_mutex_t async_mu;    /* guards async_closed against a send racing the close */
    int async_closed;
    /* graceful drain */
    int draining;
    int torn_down;
    uint64_t drain_started_ms;
    uv_timer_t drain_deadline;   /* the drain timeout: then whatever is left is closed */
    uv_timer_t drain_check;      /* a zero timer: "is anything still in flight?" */
    uv_timer_t trim_timer;       /* freed connection memory goes back to the system (conn.c) */
    uv_check_t posted_check;     /* the posted connections' flushes, after the round of I/O callbacks (conn.c) */
    uv_idle_t posted_idle;       /* ... and, while any is posted, the loop does not block for I/O first */
    uv_prepare_t clock_prepare;  /* the worker's cached clock is read anew before it waits for I/O ... */
    uv_check_t clock_check;      /* ... and after each round of callbacks (vsr_clock_tick) */
    conn_t *posted, *posting;    /* ... posted since its last run, and those of the run in progress */
    int reserve_fd;              /* a descriptor given up when accept fails for want of one (accept.c) */
    uint64_t accept_log_ms;      /* failed accepts are logged once per interval ... */
    unsigned accept_unlogged;    /* ... with the count since */
    unsigned process_depth;      /* conn.c: nested request starts on this worker's stack */
    void *rt_port;               /* the worker's runtime port (vsr_gateway_runtime_t.open), or NULL */
    vsr_store_t *rc_store[3];    /* the redis stores (ports_cache.c): the response cache's, the Responses API's, memory's */
    char rc_sig[3][1024];        /* ... opened from these settings */
    unsigned shadow_in_flight;   /* shadow_dispatch copies in flight (shadow.c) */
};

enum { CMD_NONE = 0, CMD_DRAIN = 1, CMD_STOP = 2 };

/* keystore.c: API keys made through the management API, kept hashed (docs/tenancy.md) */
typedef struct vsr__keystore_s vsr__keystore_t;
#define VSR__KS_ID_LEN 16     /* hex digits of a key's id */
#define VSR__KS_SECRET_LEN 71 /* "sk-vsr-" and 64 hex digits */
vsr__keystore_t *vsr__keystore_new(void);
void vsr__keystore_free(vsr__keystore_t *ks); /* NULL is a no-op */
/* VSR_OK, or VSR_ERR_TOO_BIG when the store is full.  Empty slices: not given. */
int vsr__keystore_create(vsr__keystore_t *ks, vsr_slice_t user, vsr_slice_t groups, vsr_slice_t name,
                         char id[VSR__KS_ID_LEN + 1], char secret[VSR__KS_SECRET_LEN + 1]);
/* A new secret for the key (the old one stops working), or VSR_ERR_NOT_FOUND. */
int vsr__keystore_rotate(vsr__keystore_t *ks, vsr_slice_t id, char secret[VSR__KS_SECRET_LEN + 1]);
int vsr__keystore_revoke(vsr__keystore_t *ks, vsr_slice_t id); /* VSR_OK or VSR_ERR_NOT_FOUND */
void vsr__keystore_list_json(vsr__keystore_t *ks, vsr_buf_t *out); /* never a secret nor a digest */
int vsr__keystore_entry_json(vsr__keystore_t *ks, vsr_slice_t id, vsr_buf_t *out);
/* 1 when key is a stored one; its user and groups (NULL when none) copied into pool.  ks may be NULL. */
int vsr__keystore_match(vsr__keystore_t *ks, vsr_slice_t key, vsr_pool_t *pool, const char **user,
                        const char **groups);

/* ratelimit.c: the local limiter (docs/tenancy.md), one for the process */
typedef struct vsr__ratelimit_s vsr__ratelimit_t;
typedef struct {
    vsr_slice_t user;   /* the request's identity (trusted, or its key's); empty = none */
    vsr_slice_t groups; /* comma-separated */
    vsr_slice_t model;  /* the model the request goes to */
} vsr__rl_subject_t;
typedef struct {
    const char *rule;   /* the rule the headers report (the refusing one), NULL when none matched */
    uint64_t limit_requests, remaining_requests, limit_tokens, remaining_tokens;
    uint64_t reset_s;   /* seconds until that rule's window ends */
} vsr__rl_verdict_t;
enum { VSR__RL_ADMIT = 0, VSR__RL_LIMITED = 1, VSR__RL_ERROR = 2 };
#define VSR__RL_BODY_MAX (1u << 20) /* a non-streamed answer kept for its usage (token rules), at most */
vsr__ratelimit_t *vsr__ratelimit_new(void);
void vsr__ratelimit_free(vsr__ratelimit_t *rl); /* NULL is a no-op */
/* Checks every rule of cfg that matches s and, when all have room, counts
 * the request in each: ADMIT, LIMITED (v says by which rule) or ERROR (the
 * check could not be made: the table is full; fail_open decides). */
int vsr__ratelimit_admit(vsr__ratelimit_t *rl, const vsr_config_t *cfg, const vsr__rl_subject_t *s, uint64_t now_s,
                         vsr__rl_verdict_t *v);
/* Adds an answered request's tokens to its token rules' buckets. */
void vsr__ratelimit_charge(vsr__ratelimit_t *rl, const vsr_config_t *cfg, const vsr__rl_subject_t *s, uint64_t now_s,
                           uint64_t tokens);

struct vsr_gateway_s {
    vsr_listener_conf_t *listeners; /* copies of the first version's listeners (restart-only settings) */
    size_t n_listeners;
    int management_enabled;
    pthread_mutex_t snap_mu;       /* guards `current` against a swap between its load and its ref */
    vsr_engine_t *current;         /* the version new requests pin (a reference) */
    vsr_listener_conf_t mgmt;      /* the management listener, when enabled */
    vsr_listener_conf_t metrics_listener; /* GET /metrics, when enabled */
    vsr_gateway_opts_t opts;
    worker_t **workers;
    unsigned n_workers;
    vsr_model_stats_t *model_stats; /* live per-model statistics: each worker writes its shard */
    vsr__keystore_t *keystore;      /* the API keys made through the management API */
    atomic_uint *listener_active; /* per listener */
    vsr_tls_ctx_t **listener_tls; /* per configured listener: its TLS context, or NULL */
    atomic_int ready;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    unsigned n_started;
    /* drain: each worker reports on the control thread's loop when it is done */
    uint64_t drain_timeout_ms;
    uv_async_t *drained_async;
    atomic_uint n_drained;
    void (*on_drained)(void *ud);
    void *drained_ud;
    /* the response cache's memory store, one for every worker (ports_cache.c):
     * its calls complete synchronously, each under rc_mu (recursive: a
     * lookup's callback may call the store again) */
    pthread_mutex_t rc_mu;
    vsr_store_t *rc_mem[3];      /* the response cache's, the Responses API's, memory's */
    char rc_mem_sig[3][1024];
    vsr__ratelimit_t *ratelimit; /* the local limiter's buckets, for every worker */
};

/* tracing.c: one request's W3C trace context and, at its end, its spans */
typedef struct {
    vsr_trace_parent_t tp;   /* trace id, the caller's span (zero for a new root), flags */
    uint8_t root[8];         /* vsr's span for the request */
    uint8_t attempts[VSR_UPSTREAM_MAX_ATTEMPTS][8]; /* each upstream attempt's span, by report index */
    char tracestate[512];    /* forwarded when valid: every tracestate field of the request, joined by ',' */
    size_t tracestate_len;
    uint64_t route_start_us;
    unsigned on : 1;         /* tracing enabled: vsr, not the client, sets traceparent upstream */
    unsigned sampled : 1;
} req_trace_t;

typedef struct {
    double start_wall;       /* the request's start, seconds since the epoch ... */
    uint64_t start_us;       /* ... and on the monotonic clock */
    vsr_slice_t method, target;
    int status;
    const char *flags;
    vsr_slice_t request_id;
    const vsr_evidence_t *ev; /* NULL when not routed */
    uint64_t config_version;
    const vsr_upstream_report_t *report;
} req_trace_end_t;

/* At routing start: reads traceparent/tracestate (h), decides sampling.
 * tracer NULL leaves t untouched: it must be zeroed (off) beforehand. */
void vsr__trace_begin(req_trace_t *t, vsr_tracer_t *tracer, const vsr_http_head_t *h);
/* 1 for a client field that vsr replaces upstream while tracing is on */
int vsr__trace_owns(const req_trace_t *t, vsr_slice_t name);
/* An attempt's traceparent (its own span as parent) and tracestate. */
void vsr__trace_attempt_headers(req_trace_t *t, unsigned index, vsr_buf_t *head);
/* At the request's end: the root, routing and attempt spans, when sampled. */
void vsr__trace_end(const req_trace_t *t, vsr_tracer_t *tracer, const req_trace_end_t *e);

/* stream_usage.c: what is read from a streamed response while relaying it */
typedef struct {
    vsr_sse_parser_t parser; /* parser.events: events relayed */
    uint64_t prompt_tokens, completion_tokens;
    int has_usage;           /* the stream's usage object was read */
} stream_usage_t;
stream_usage_t *vsr__usage_new(void);
void vsr__usage_feed(stream_usage_t *u, const char *p, size_t n);
void vsr__usage_free(stream_usage_t *u); /* NULL is a no-op */
/* The token counts of a whole JSON answer's usage (chat, completions,
 * Responses or Anthropic names): 1 when it has them. */
int vsr__usage_of_json(const char *p, size_t n, uint64_t *prompt, uint64_t *completion);

/* ingress.c: a client field that must not pass the edge */
int vsr__ingress_drop(const vsr_listener_conf_t *l, const vsr_config_t *cfg, int identity_trusted, vsr_slice_t name);
/* The listener's key check, on the request head alone: OK when the listener
 * needs no key or the request carries exactly one key (authorization: Bearer
 * or api-key; the same key in several of them counts once) and it is a
 * configured one; BAD when it is missing or wrong; CONFLICT when the fields
 * carry different keys.  presented (may be NULL) gets the key on OK (a
 * slice of the head; empty when the listener has no keys). */
enum { VSR__AUTH_OK = 0, VSR__AUTH_BAD = 1, VSR__AUTH_CONFLICT = 2 };
/* On OK, *presented (when not NULL) is the key checked (a slice of the
 * head), empty when the listener needs none. */
int vsr__ingress_auth(const vsr_listener_conf_t *l, vsr__keystore_t *ks, const vsr_http_head_t *h,
                      vsr_slice_t *presented);
/* The listener checks keys (api_keys strings or entries). */
int vsr__ingress_has_keys(const vsr_listener_conf_t *l);
/* The api_keys entry a checked key matched (its user and groups), or NULL:
 * a key of the list-of-strings form, or an expired entry. */
const vsr_api_key_conf_t *vsr__ingress_key_entry(const vsr_listener_conf_t *l, vsr_slice_t key);
/* The owner of what a client stores (vsr_session_opts_t.owner) from its
 * checked key: 64 hex digits of SHA-256 over a domain prefix and the key, so
 * the key itself is never stored; "" for no key (the shared owner). */
void vsr__ingress_owner(vsr_slice_t key, char out[VSR_SESSION_MAX_OWNER + 1]);
/* identity headers are trusted from this peer (identity.trust_headers, trusted_peers) */
int vsr__ingress_identity_trusted(const vsr_listener_conf_t *l, const struct sockaddr_storage *peer);

/* gateway.c: the active version with a reference (a request's pin) */
vsr_engine_t *vsr__gateway_pin(vsr_gateway_t *gw);

/* ports.c: the routing core's "call the runtime" port, on worker w's loop
 * (vsr_ports_t.runtime_call / runtime_cancel, with the same rules) */
void *vsr__gateway_runtime_call(worker_t *w, const vsr_runtime_bundle_t *bundle, uint64_t deadline_ms,
                                vsr_runtime_done_fn done, void *done_ud);
void vsr__gateway_runtime_cancel(worker_t *w, void *handle);
/* hop.c: a request graph's hop through the worker's upstream (the model-call port) */
void *vsr__gateway_model_call(worker_t *w, uint64_t listener_timeout_ms, vsr_slice_t request_id,
                              const vsr_graph_call_t *call, uint64_t deadline_ms, vsr_graph_call_done_fn done,
                              void *done_ud);
void vsr__gateway_model_cancel(void *handle);
/* shadow.c: the shadow_dispatch copy of a request being proxied (its
 * upstream path and body pieces), when its decision has the plugin */
void vsr__shadow_start(request_t *req, vsr_slice_t path, const vsr_slice_t *body, size_t n_body);

/* The response cache port (ports_cache.c); cfg: the request's version. */
typedef struct vsr__rc_lookup_s vsr__rc_lookup_t;
void *vsr__gateway_cache_lookup(worker_t *w, const vsr_config_t *cfg, const vsr_cache_query_t *q, vsr_cache_done_fn done,
                                void *done_ud);
void vsr__gateway_cache_cancel(worker_t *w, void *handle);
void vsr__gateway_cache_store(worker_t *w, const vsr_config_t *cfg, const vsr_cache_query_t *q, vsr_slice_t value);
void vsr__gateway_cache_delete(worker_t *w, const vsr_config_t *cfg, const vsr_cache_query_t *q);
void vsr__gateway_cache_close(worker_t *w);
/* ports_replay.c: router replay records (the replay_store port, the management endpoints) */
void vsr__gateway_replay_init(vsr_gateway_t *gw);
void vsr__gateway_replay_free(vsr_gateway_t *gw);
void vsr__gateway_replay_put(const vsr_config_t *cfg, const vsr_replay_record_t *r);
int vsr__gateway_replay_owns(vsr_slice_t target);
void vsr__gateway_replay_metrics(vsr_metrics_t *m); /* before a render */
void vsr__gateway_cache_init(vsr_gateway_t *gw);
void vsr__gateway_cache_free(vsr_gateway_t *gw);
/* /ready: 1 when the gateway serves and the runtime (when one is lent) is ready. */
int vsr__gateway_runtime_ready(const vsr_gateway_t *gw);

/* accept.c: a listener's admission of connections, its back-off */
void vsr__gateway_on_connection(uv_stream_t *server, int status);
void vsr__gateway_accept_backoff_cb(uv_timer_t *t); /* a listener's back-off is over */
/* The worker's reserve descriptor: opened when it is missing (-1 stays when it cannot be). */
void vsr__gateway_reserve_fd(worker_t *w);

/* conn.c */
void vsr__conn_accept(listener_t *l); /* the listener's next connection starts */
/* Out of descriptors: the oldest idle connection, else the newest, closes (1), or none is open (0). */
int vsr__conn_shed(worker_t *w);
void vsr__gateway_close_all(worker_t *w);
/* 1 while some connection of the worker has a request or a reply in flight */
int vsr__gateway_busy(worker_t *w);
/* While draining: check soon whether the worker is done (safe from any callback). */
void vsr__gateway_drain_poke(worker_t *w);
void vsr__gateway_worker_cleanup(worker_t *w);
/* Draining: every HTTP/2 connection gets GOAWAY (streams in flight finish). */
void vsr__gateway_goaway_all(worker_t *w);

/* ---- transports ----
 * The request layer (request.c, proxy.c, local.c) answers through the
 * transport its request came on: HTTP/1.1 (conn.c) or an HTTP/2 stream (h2.c).  A response
 * head is given as the request layer decided it, without framing fields:
 * the transport adds its own (HTTP/1.1: content-length or chunked,
 * connection; HTTP/2: :status and content-length). */
typedef struct {
    int status;
    const vsr_http_header_t *fields;
    size_t n_fields;
    int64_t content_length; /* -1 when unknown */
} vsr__resp_head_t;

/* A stream's queued response bytes: the upstream read pauses above HIGH
 * and resumes below LOW (as the HTTP/1.1 socket queue's marks). */
#define VSR__H2_QUEUE_HIGH (1024 * 1024)
#define VSR__H2_QUEUE_LOW (256 * 1024)

/* request.c, for conn.c and h2.c: the request layer */
request_t *vsr__request_open(conn_t *c, h2_stream_t *st, vsr_http_head_t *head); /* head: until the request ends */
int vsr__request_body(request_t *req, const char *p, size_t n); /* VSR_ERR_TOO_BIG past the body limit */
void vsr__request_dispatch(request_t *req);
void vsr__request_reject(request_t *req, int status); /* 400, 413 or 431: an error reply, then done */
/* A transport with a request's whole head but none of its body (an HTTP/2
 * stream's HEADERS): the status to refuse it with before its body, or 0 when
 * the body may be read — 400 without a target (a tunnel), else the
 * transport's own verdict on the head (transport_status: 431, 400), else 413
 * for a declared length over the listener's body limit, else 401 when a body
 * is to come (has_body) and the key check fails. */
int vsr__request_admit(request_t *req, int transport_status, int has_body);
/* Refused on its head (vsr__request_admit's status): 401 is the key check's
 * answer, any other an error reply; then done. */
void vsr__request_refuse(request_t *req, int status);
/* The body's end came: 1 when it is as long as the head declared (or declared none). */
int vsr__request_body_whole(const request_t *req);
void vsr__request_reset(request_t *req);  /* the stream is gone: the request ends, its upstream call cancelled */
/* request.c, for conn.c (HTTP/1.x): the key check on a head whose body is to come (1: read
 * it; 0: dispatch answers 401), and the body's room once it may be read. */
int vsr__request_check_key(request_t *req);
void vsr__request_reserve(request_t *req, size_t n);
/* `Upgrade: h2c` was taken: the request is stream st's, answered over HTTP/2. */
void vsr__request_upgraded(request_t *req, h2_stream_t *st);
/* The request is refused before dispatch (a codec error, a deadline): it
 * ends with status (LR) and goes; the connection answers it. */
void vsr__request_abort(request_t *req, int status);
/* The connection's own error reply, no request in flight: closes after it
 * (target: the head's, when there is one, for the API's error shape). */
void vsr__request_codec_error(conn_t *c, int status, const char *code, vsr_slice_t msg, vsr_slice_t target);
/* The client half-closed: 1 when its request has its whole answer and only
 * the session's look at it is pending (it then ends, not kept alive). */
int vsr__request_peer_left(request_t *req);
void vsr__request_resume(request_t *req); /* its queue drained: read the upstream again */
/* ... the connection's side of the same (HTTP/1.x): an upstream call is in
 * flight; pause: its read pauses (1 when there was one) */
int vsr__request_in_call(const request_t *req);
int vsr__request_pause(request_t *req);
void vsr__request_sent(request_t *req, uint64_t n); /* n more bytes of its response went to the transport */
/* conn.c, for h2.c and the request layer: the connection */
void vsr__conn_send(conn_t *c, vsr_buf_t *b); /* takes b's memory */
void vsr__conn_send_rbuf(conn_t *c, vsr_rbuf_t *rb, size_t len); /* takes the reference */
size_t vsr__conn_queued(const conn_t *c);
/* Calls vsr__h2_flush() from the loop, once the current callback is over:
 * a response handed over never ends its stream (and frees its request)
 * under the request layer's feet. */
void vsr__conn_flush_soon(conn_t *c);
void vsr__conn_end(conn_t *c, int graceful); /* the session is over: close (after the queued bytes when graceful) */
/* vsr__h2_flush() again in `ms` at the latest (a flush_soon comes first). */
void vsr__conn_flush_after(conn_t *c, uint64_t ms);
vsr_metrics_shard_t *vsr__conn_metrics(const conn_t *c); /* the worker's shard */
int vsr__conn_closing(const conn_t *c);                  /* closing: nothing more goes out */
worker_t *vsr__conn_worker(const conn_t *c);
listener_t *vsr__conn_listener(const conn_t *c);
int vsr__conn_identity_trusted(const conn_t *c); /* identity headers from this peer are trusted */
/* `Upgrade: h2c` on a complete HTTP/1.1 request: 1 when the connection
 * switched (101 sent; the request goes on as stream 1, vsr__request_upgraded),
 * 0 when it is answered over HTTP/1.1. */
int vsr__conn_upgrade_h2c(conn_t *c, request_t *req, const vsr_http_head_t *head, int is_head);
/* An HTTP/1.x request is finished: the held pieces go out, the request is
 * freed (vsr__request_reset), and the next one is taken, or the connection
 * closes when it is not kept alive. */
void vsr__conn_request_done(conn_t *c, request_t *req, int keep_alive);
/* An HTTP/1.x response, as the request layer relays it.  A head is held
 * (its memory taken) to go out with the first body bytes or the end, or
 * from the posted flush once the current callback is over; take_head
 * appends it to b instead, which then goes out in its place. */
void vsr__conn_hold_head(conn_t *c, vsr_buf_t *b);
int vsr__conn_head_held(const conn_t *c);
void vsr__conn_take_head(conn_t *c, vsr_buf_t *b);
/* A relayed body piece (a slice of owner's buffer, referenced until
 * written), chunk-framed when chunked; the pieces of one backend read go
 * out in one write, at vsr__conn_read_end at the latest. */
void vsr__conn_relay(conn_t *c, const char *p, size_t n, vsr_rbuf_t *owner, int chunked);
/* The body's end: the held head, the last chunk when chunked; coalesce:
 * with the held pieces, in one write. */
void vsr__conn_relay_end(conn_t *c, int chunked, int coalesce);
void vsr__conn_read_end(conn_t *c, const request_t *req); /* req's backend read is over */
/* Past the high mark: the call's read pauses and the client's stall timer
 * runs (1); it resumes from the writes' completion (vsr__request_resume). */
int vsr__conn_backpressure(conn_t *c, vsr_upstream_call_t *call);
void vsr__conn_abort(conn_t *c); /* the response is cut: what is held goes out, then the connection closes */
/* The reply being written is the connection's last (linger_now: lingering
 * starts at once when everything is written already). */
void vsr__conn_close_after_write(conn_t *c, int linger_now);

/* h2.c */
h2_sess_t *vsr__h2_new(conn_t *c, const vsr_listener_conf_t *lc);
/* `Upgrade: h2c`: settings is the HTTP2-Settings value; req becomes stream 1's. */
int vsr__h2_upgrade(h2_sess_t *s, vsr_slice_t settings, request_t *req, int is_head, h2_stream_t **st);
int vsr__h2_feed(h2_sess_t *s, const char *p, size_t n); /* VSR_OK, or VSR_ERR: close the connection */
void vsr__h2_flush(h2_sess_t *s);                         /* more may go to the socket */
void vsr__h2_goaway(h2_sess_t *s);
int vsr__h2_active(const h2_sess_t *s);                   /* a stream is in flight */
void vsr__h2_close(h2_sess_t *s);                         /* the connection closes: requests are reset */
void vsr__h2_free(h2_sess_t *s);
/* a stream's response: the head (with the whole body when !more, or the
 * start of it), then body pieces (copied into the stream's queue), then end;
 * or reset (RST_STREAM) when the upstream failed mid-response */
void vsr__h2_respond(h2_stream_t *st, const vsr__resp_head_t *rh, const char *body, size_t body_len, int more);
void vsr__h2_body(h2_stream_t *st, const char *p, size_t n);
void vsr__h2_end(h2_stream_t *st);
void vsr__h2_reset(h2_stream_t *st);
size_t vsr__h2_queued(const h2_stream_t *st);
void vsr__h2_detach(h2_stream_t *st); /* the request is finished; the stream drains on its own */
/* After the body: trailers end the stream (gRPC's grpc-status); names and
 * values are copied. */
void vsr__h2_trailers(h2_stream_t *st, const vsr_http_header_t *f, size_t n);
/* The session serves ext_proc: every stream is a Process call (xp.c). */
void vsr__h2_extproc(h2_sess_t *s, worker_t *w);

/* xp.c: the ext_proc listener's calls, one per HTTP/2 stream.  open
 * answers a stream that is not a Process call (UNIMPLEMENTED) at once;
 * data and end are the stream's DATA and END_STREAM; free when the stream
 * closes (the call is cancelled if it was not over). */
typedef struct xp_call_s xp_call_t;
xp_call_t *vsr__xp_call_open(conn_t *c, worker_t *w, const vsr_listener_conf_t *lc, h2_stream_t *st,
                             const vsr_http_head_t *head);
void vsr__xp_call_data(xp_call_t *x, const char *p, size_t n);
void vsr__xp_call_end(xp_call_t *x);
int vsr__xp_call_done(const xp_call_t *x);
/* The call's clock, at time now (ms): when Envoy has sent nothing on the
 * stream for the listener's timeout (and vsr has sent nothing either), or
 * its grpc-timeout passed, the call ends with DEADLINE_EXCEEDED and this
 * returns 0; otherwise the ms until that could happen (UINT64_MAX for a
 * call that is over). */
uint64_t vsr__xp_call_check(xp_call_t *x, uint64_t now);
void vsr__xp_call_free(xp_call_t *x);

#endif
