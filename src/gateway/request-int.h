/*
 * request-int.h — the request layer's own view, private to the files that
 * serve a request: request.c (its lifecycle and dispatch), proxy.c (plan
 * execution, fallback, the response relay), local.c (the endpoints vsr
 * answers itself) and ports.c (the routing core's ports).  The connection
 * (conn.c) does not include it: it reaches a request only through the
 * vsr__request_* functions of gateway-int.h, and a request writes only
 * through vsr__conn_*.
 */
#ifndef VSR_GATEWAY_REQUEST_INT_H
#define VSR_GATEWAY_REQUEST_INT_H

#include "gateway/gateway-int.h"

typedef struct admin_job_s admin_job_t;

/* A request's phase: request.c's header has the states and their transitions. */
typedef enum {
    RQ_RECEIVING,
    RQ_ROUTING,
    RQ_OFFLOOP,
    RQ_UPSTREAM,
    RQ_RESPONDING,
    RQ_RESP_EFFECT,
    RQ_RESP_FINISH,
    RQ_DONE,
    RQ_N_STATES
} rq_state_t;

struct request_s {
    conn_t *c;
    worker_t *w;                   /* the connection's worker and listener */
    listener_t *l;
    h2_stream_t *st;               /* an HTTP/2 stream's request; NULL over HTTP/1.x */
    vsr_pool_t pool;
    vsr_engine_t *eng;             /* the configuration version pinned from the first byte to the finish */
    admin_job_t *admin_job;        /* a management API call running off the loop */
    vsr_session_t *sess;
    vsr_http_head_t *head;         /* the parser's head: valid until the parser resumes */
    vsr_header_t *hdrs;            /* the head's fields that passed ingress hygiene */
    size_t n_hdrs;
    vsr_buf_t body;
    vsr_json_t json;
    int has_json;
    int keep_alive;
    int is_head;
    unsigned state;                /* rq_state_t: its phase */
    /* upstream */
    vsr_upstream_call_t *call;
    vsr_http_header_t *fwd;
    size_t n_fwd;
    size_t n_fwd_checked;          /* ... the first ones from the parsed head (vsr_http_write_checked_header) */
    vsr_slice_t pieces[3];
    size_t n_pieces;
    vsr_upstream_report_t report;
    /* evidence for the access log and metrics */
    double start_wall;
    uint64_t start_us;
    int resp_status;
    const char *flags;             /* Envoy-style response flags */
    uint64_t bytes_sent;
    /* cross-model fallback (ref §1.7): the policy in force, its one deadline, attempts so far */
    vsr_fallback_conf_t fb;
    uint64_t fb_deadline_ms;
    unsigned fb_attempts;
    unsigned first_skipped : 1;    /* the routing's choice was skipped (its circuit open): never called */
    vsr_slice_t request_id;        /* the x-request-id the backend got (or would): the client's, else vsr's */
    unsigned id_made : 1;          /* request_id is one vsr made for the backend */
    const vsr_model_conf_t *served; /* the model whose response head was relayed; NULL when none */
    const vsr_model_conf_t *ms_model; /* the model counted in flight for this request (model_stats) */
    uint64_t ms_sent_us, ms_head_us;  /* its call went out, its response head came (monotonic µs) */
    unsigned resp_chunked : 1;
    unsigned resp_no_body : 1;
    /* a translated answer (vsr_body_mode_t): STREAM's chunks and BUFFER's
     * whole body come from the session; BUFFER holds the head until then */
    unsigned body_mode : 2;
    unsigned usage_of_output : 1;  /* the event stream's usage is read from what is sent, not what came */
    unsigned observe : 1;          /* RELAY, and the session keeps a copy of the body (the response cache) */
    int held_status;
    vsr_http_header_t *held_fields;
    size_t n_held_fields;
    unsigned unauth : 2;           /* the key check failed on the head (VSR__AUTH_*): 401 before any body */
    req_trace_t trace;
    stream_usage_t *usage;         /* an event stream's events and usage, read as relayed */
    stream_usage_t *usage_up;      /* ... and a translated one's usage as the backend sent it (usage_of_output) */
    vsr__rl_subject_t rl_subject;  /* whom the rate limiter counted this request for */
    vsr__rl_verdict_t rl_verdict;  /* ... and the room its tightest rule had left: the answer's x-ratelimit-* */
    unsigned rl_counted : 1;       /* ... its tokens are charged when it is over */
    unsigned rl_tokens : 1;        /* a token rule applies: a non-streamed answer is kept for its usage */
    vsr_buf_t rl_body;             /* ... that answer, at most VSR__RL_BODY_MAX bytes (past it, not charged) */
    vsr_preview_t *preview;        /* a routing preview waiting on the runtime */
    vsr_buf_t preview_out;         /* ... and its answer */
};

/* request.c */
/* 1 when a request may go from one state to the other (request.c's table). */
int vsr__request_can_move(rq_state_t from, rq_state_t to);
/* The request enters a state: a move the table does not allow is a bug. */
void vsr__request_enter(request_t *req, rq_state_t to);
/* The response head is committed: no fallback, no second status. */
static inline int vsr__request_head_sent(const request_t *req)
{
    return req->state >= RQ_RESPONDING && req->state != RQ_DONE;
}
vsr_slice_t vsr__request_id(request_t *req);
/* The response has been handed to the transport: the request is over. */
void vsr__request_finish(request_t *req);
/* What bounds a request's waits: its start plus the listener's timeout. */
uint64_t vsr__request_deadline(const request_t *req);
/* Local replies: the body as given (reply) or an API error (reply_error:
 * OpenAI's shape, Anthropic's on /v1/messages), with the request's id and
 * version; extra_headers: "name: value\r\n" lines; close: the connection
 * closes after it (HTTP/1.x). */
void vsr__request_reply(request_t *req, int status, const char *ctype, vsr_slice_t body, const char *extra_headers,
                        int is_head, int close);
void vsr__request_reply_error(request_t *req, int status, const char *type, const char *code, vsr_slice_t msg,
                              const char *extra_headers, int is_head, int close);
/* A client error (invalid_request_error), then the request is finished. */
void vsr__request_error(request_t *req, int status, const char *msg);

/* The models a call went to, in order (the session's list without a first
 * choice skipped for its open circuit). */
const vsr_model_conf_t *const *vsr__request_models_called(const request_t *req, size_t *n);
/* Attempts made by model m (those past the report's array count for the last model called). */
unsigned vsr__request_attempts_of(const request_t *req, const vsr_model_conf_t *m);
/* The request ends (answered or not: the access log says which) and its memory goes. */
void vsr__request_free(request_t *req);

static inline vsr_slice_t vsr__slice_or_empty(const char *s)
{
    return s ? vsr_slice_cstr(s) : VSR_SLICE_NULL;
}

/* proxy.c */
/* The body phase's effect is in: an answer, or the upstream call. */
void vsr__proxy_routed(request_t *req, const vsr_effect_t *eff);
/* An immediate answer from the routing core (eff->status). */
void vsr__proxy_reply_effect(request_t *req, const vsr_effect_t *eff);
/* The end of the answer: the session's last effect (STREAM, BUFFER; NULL for RELAY), then the stream's end. */
void vsr__proxy_response_end(request_t *req, const vsr_effect_t *eff);

/* local.c */
/* The endpoints vsr answers itself (path: the target's path, its trailing
 * '/'s aside): 1 when the request is answered or being answered, 0 when it
 * goes on to routing. */
int vsr__local_serve(request_t *req, vsr_slice_t path);
/* The request is gone before its management call answered: the answer is dropped. */
void vsr__local_abandon(admin_job_t *job);

/* ports.c: the ports every request lends its session (ports_ud: the request) */
extern const vsr_ports_t vsr__gateway_ports;

#endif
