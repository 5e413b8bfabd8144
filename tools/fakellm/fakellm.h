/*
 * fakellm — a fake OpenAI-compatible model backend for vsr's end-to-end
 * tests, demo and benchmarks.
 *
 * It is deliberately independent of vsr (nothing from src/ is included):
 * its HTTP/1.1 request parser is its own, so it can act as an oracle for
 * what vsr actually puts on the wire.  Structure:
 *
 *   buf.c     growable byte buffers, JSON string escaping, base64
 *   http.c    incremental HTTP/1.1 request parser (strict)
 *   server.c  per-thread libuv loop: connections, write queue, faults,
 *             delays and streams
 *   api.c     the endpoints: routing, knobs, response bodies
 *   calllog.c the call log (a ring of fixed records) and the per-key
 *             attempt counters behind x-fakellm-key / -fail-count
 *   tls.c     optional server-side TLS (OpenSSL over memory BIOs)
 *   h2.c      HTTP/2 (nghttp2): each stream answered through api.c as the
 *             HTTP/1.1 request it stands for
 *   main.c    command line, listening sockets, threads, signals
 *
 * See docs/fakellm.md for the user-facing contract.
 */
#ifndef FAKELLM_H
#define FAKELLM_H

#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#define FL_MAX_BODY ((uint64_t)64 << 20)   /* larger request bodies get 413 */
#define FL_MAX_HEAD (64u << 10)            /* request line + header fields; 431 */
#define FL_MAX_HEADERS 128                 /* header field lines; 431 */
#define FL_MAX_CHUNK_SIZE ((int64_t)16 << 20)
#define FL_MAX_DELAY_MS ((int64_t)3600 * 1000)

/* ---- buffers (buf.c) --------------------------------------------------- */

/* A growable byte buffer.  Allocation failure aborts (a fake backend that
 * ran out of memory has nothing sensible left to do). */
typedef struct {
    char *p;
    size_t len, cap;
} fl_buf_t;

void *fl_xmalloc(size_t n);
void *fl_xrealloc(void *p, size_t n);
/* Ensure room for `extra` more bytes, growing geometrically. */
void fl_buf_reserve(fl_buf_t *b, size_t extra);
/* Ensure cap >= `cap` exactly (used for a known request body size, so a
 * 64 MiB body does not round up to a 128 MiB allocation). */
void fl_buf_reserve_exact(fl_buf_t *b, size_t cap);
void fl_buf_add(fl_buf_t *b, const void *p, size_t n);
void fl_buf_adds(fl_buf_t *b, const char *s);
void fl_buf_addc(fl_buf_t *b, char c);
void fl_buf_addu(fl_buf_t *b, uint64_t v);
void fl_buf_addi(fl_buf_t *b, int64_t v);
void fl_buf_addhex(fl_buf_t *b, uint64_t v);
void fl_buf_addf(fl_buf_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void fl_buf_free(fl_buf_t *b);
/* Release the storage of an empty buffer that grew beyond `keep` bytes, so
 * one huge request does not pin memory on a long-lived connection. */
void fl_buf_shrink(fl_buf_t *b, size_t keep);

/* Append the JSON string escape of s[0..n) without quotes.  Invalid UTF-8
 * bytes become U+FFFD; returns 1 if that happened (the text was lossy). */
int fl_json_esc(fl_buf_t *b, const char *s, size_t n);
/* Same, with the surrounding quotes. */
int fl_json_str(fl_buf_t *b, const char *s, size_t n);
void fl_base64(fl_buf_t *b, const void *p, size_t n);

/* ---- HTTP/1.1 request parser (http.c) ---------------------------------- */

typedef struct {
    uint32_t name_off, name_len, value_off, value_len; /* relative to request start */
} fl_hdr_t;

typedef enum {
    FL_P_HEAD,         /* reading the request line and header fields */
    FL_P_BODY_CL,      /* header done; waiting for Content-Length bytes */
    FL_P_BODY_CHUNKED, /* header done; decoding a chunked body */
    FL_P_DONE,         /* a complete request is available */
    FL_P_ERROR,        /* malformed or over a limit: see err_status */
} fl_phase_t;

typedef enum {
    CK_SIZE,
    CK_EXT,
    CK_SIZE_LF,
    CK_DATA,
    CK_DATA_CR,
    CK_DATA_LF,
    CK_TRAILER_START,
    CK_TRAILER,
    CK_TRAILER_LF,
    CK_FINAL_LF,
} fl_chunk_state_t;

typedef struct {
    fl_phase_t phase;
    size_t scan;      /* HEAD: bytes already searched for the blank line;
                         BODY_CHUNKED: offset of the next undecoded byte */
    size_t head_len;  /* bytes of request line + fields + blank line (incl. leading CRLFs) */
    size_t total_len; /* DONE: bytes of the whole message */
    uint32_t method_off, method_len, target_off, target_len;
    int minor; /* HTTP/1.<minor> */
    fl_hdr_t hdrs[FL_MAX_HEADERS];
    int nhdrs;
    uint64_t content_length;
    int has_cl, chunked, keep_alive, expect_continue;
    fl_chunk_state_t ck_state;
    uint64_t ck_rem;
    unsigned ck_digits;
    size_t ck_linelen; /* bytes in the current extension / trailer line */
    size_t trailer_bytes;
    int err_status;      /* FL_P_ERROR: 400, 413, 431, 501 or 505 */
    const char *err_msg; /* FL_P_ERROR: static text */
} fl_req_t;

void fl_req_reset(fl_req_t *r);
/* Advance the parser over buf[0..len), the bytes of the current request
 * received so far (buf may move between calls; offsets are relative).  A
 * chunked body is decoded into `body` (Content-Length bodies stay in buf at
 * head_len).  Returns the new phase. */
fl_phase_t fl_req_parse(fl_req_t *r, const char *buf, size_t len, fl_buf_t *body);

/* ---- process-wide configuration and counters --------------------------- */

#define FL_MAX_MODELS 64 /* distinct MODEL names in --model-* flags */
#define FL_LOGPROB_MIN (-1000.0)
#define FL_MARGIN_MAX 1000.0
#define FL_TOP_LOGPROBS_MAX 20

/* What --model-text/-delay-ms/-logprob/-status set for requests whose
 * `model` is exactly `model`; per-request knobs still win. */
typedef struct fl_model_opt {
    const char *model; /* from argv */
    const char *text;  /* NULL = not set */
    int64_t delay_ms;  /* -1 = not set */
    double logprob, margin;
    int has_logprob, has_margin;
    int logprobs_missing; /* -1 = not set */
    int status;           /* 0 = not set */
} fl_model_opt_t;

typedef struct {
    const char *host;
    int port;
    const char *name;
    int threads;
    const char *port_file;
    /* process-wide faults: apply to every request except /health, /stats and
     * the /_fakellm/ control paths */
    int status;              /* 0 = none */
    const char *retry_after; /* NULL = none */
    int64_t delay_ms;
    int reset_before_headers;
    int64_t drop_after; /* -1 = none */
    int hang;
    int64_t fail_first;
    int fail_status;
    int64_t chunks, chunk_delay_ms, chunk_size;
    const char *text; /* NULL = "Hello from NAME" */
    int health_status;
    int h2_max_streams;             /* HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS */
    const char *tls_cert, *tls_key; /* both or neither */
    int tls;                        /* every listener speaks TLS */
    double logprob, logprob_margin; /* chat logprobs: the chosen token's, top1 - top2 */
    int logprobs_missing;           /* answer logprobs: null even when asked */
    struct fl_model_opt *models;    /* --model-* flags, one entry per model name */
    int nmodels;

    /* derived */
    fl_buf_t name_json;    /* NAME as a quoted JSON string */
    fl_buf_t backend_hdr;  /* "x-fakellm-backend: NAME\r\n" */
    fl_buf_t default_text; /* "Hello from NAME" */
} fl_config_t;

extern fl_config_t fl_cfg;

typedef struct {
    atomic_uint_fast64_t requests;    /* every request except /health, /stats, control */
    atomic_uint_fast64_t health;      /* GET /health */
    atomic_uint_fast64_t accepted;    /* connections accepted */
    atomic_int_fast64_t open;         /* connections currently open */
    atomic_uint_fast64_t fail_seq;    /* for --fail-first */
    atomic_int health_status;         /* settable via /_fakellm/health-status */
    atomic_uint_fast64_t tls_handshakes; /* TLS handshakes completed */
    atomic_uint_fast64_t tls_errors;  /* connections ended by a TLS error */
} fl_stats_t;

extern fl_stats_t fl_stats;

/* ---- call log and per-key attempts (calllog.c) -------------------------- */

#define FL_LOG_CAP 10000      /* entries kept; older ones are overwritten */
#define FL_LOG_METHOD_MAX 16  /* longer fields are truncated in the log ... */
#define FL_LOG_PATH_MAX 256
#define FL_LOG_STR_MAX 128    /* ... model and request id */
#define FL_LOG_TEXT_MAX 512   /* body.last_user and body.system */
#define FL_KEY_MAX 128        /* x-fakellm-key: longer keys are refused (400) */
#define FL_KEYS_CAP 4096      /* keys remembered; the least recently used goes */

typedef enum {
    OUT_OK,
    OUT_STATUS, /* an error status was answered (injected or 400) */
    OUT_RESET,
    OUT_DROP,
    OUT_HANG,
    OUT_DELAY,
    OUT_STALL,
    OUT_HEALTH,
    OUT_REFUSED, /* HTTP/2: RST_STREAM REFUSED_STREAM */
    OUT_GOAWAY,  /* HTTP/2: GOAWAY below the stream, connection closed */
} fl_outcome_t;

/* A borrowed string; p == NULL means absent (rendered as null). */
typedef struct {
    const char *p;
    size_t len;
} fl_str_t;

#define FL_NO_INT INT64_MIN /* an absent integer field (rendered as null) */

/* The essentials of an inference request body, for the log's "body":
 * -1 / FL_NO_INT / p == NULL mean absent (null). */
typedef struct {
    int stream, logprobs; /* -1 absent (or not a boolean), else 0/1 */
    int has_tools;        /* a non-empty "tools" array */
    int64_t top_logprobs, max_completion_tokens, max_tokens, n_messages;
    double temperature;
    int has_temperature;
    fl_str_t last_user, system; /* cut to FL_LOG_TEXT_MAX in the log */
    uint64_t messages_sha;      /* FNV-1a 64 of the compact "messages" JSON */
    int has_sha;
} fl_body_t;

/* One request as the log sees it.  The strings are copied (truncated) into
 * the ring, so they only need to live for the call. */
typedef struct {
    int thread;
    uint64_t conn; /* the connection's number (accept order, from 1) */
    int h2;        /* the request came over HTTP/2 */
    fl_str_t method, path, model, request_id, key;
    uint64_t attempt; /* 0: the request carried no key */
    fl_outcome_t outcome;
    int status; /* OUT_STATUS */
    int health; /* a /health request */
    const fl_body_t *body; /* NULL: not an inference request with a JSON body */
} fl_call_t;

/* One mutex covers both the log and the key table, so that seq order, time
 * order and each key's attempt order agree even across threads.  Between
 * lock and unlock the caller may count an attempt, decide what to do with
 * it and append the entry; nothing in there blocks or does I/O. */
void fl_log_init(void); /* main thread, before the workers start */
void fl_log_free(void);
void fl_log_lock(void);
void fl_log_unlock(void);
/* Count one more request carrying `key` (1..FL_KEY_MAX bytes) and return
 * how many there have been, this one included.  Locked. */
uint64_t fl_keys_attempt_locked(const char *key, size_t len);
/* Append an entry; fills in seq and time (also its start_ms) and returns
 * seq.  Locked. */
uint64_t fl_log_append_locked(const fl_call_t *call);
/* The answer of entry `seq` has been written whole: set its end_ms (if it
 * is still in the ring).  Takes the lock. */
void fl_log_end(uint64_t seq);
/* The client went away (closed the connection, reset the stream) while the
 * answer of entry `seq` was pending: set its client_left_ms, once.  Takes
 * the lock; seq 0 (no answer in progress) is ignored. */
void fl_log_client_left(uint64_t seq);
/* Lock, append, unlock: for entries that count no attempt. */
void fl_log_append(const fl_call_t *call);
/* Render {"backend":..,"capacity":..,"overwritten":..,"entries":[...]}; with
 * key.p != NULL only the entries carrying exactly that key. */
void fl_log_render(fl_buf_t *b, fl_str_t key);
/* Empty the log (seq keeps counting); returns the entries removed. */
uint64_t fl_log_clear(void);
/* Forget every key and its count; returns how many there were. */
uint64_t fl_keys_clear(void);

/* ---- TLS (tls.c) -------------------------------------------------------- */

/* A sans-IO server TLS session: the caller moves ciphertext between the
 * socket and it (feed / take_out) and plaintext between it and the HTTP
 * code (read / write).  It never blocks and never touches a descriptor. */
typedef struct fl_tls fl_tls_t;

#define FL_TLS_EOF (-1) /* fl_tls_read: the peer sent close_notify */
#define FL_TLS_ERR (-2) /* fl_tls_read: a fatal TLS error (counted in /stats) */

/* Main thread, before the workers start: the process-wide context (TLS 1.2
 * or later, the PEM certificate chain and key, ALPN h2 or http/1.1).  Prints why
 * and returns -1 when the files cannot be used. */
int fl_tls_setup(const char *cert_file, const char *key_file);
void fl_tls_teardown(void);
fl_tls_t *fl_tls_new(void); /* aborts on allocation failure */
void fl_tls_free(fl_tls_t *t); /* accepts NULL */
/* Ciphertext read from the socket. */
void fl_tls_feed(fl_tls_t *t, const char *p, size_t n);
/* Advance the handshake over what has been fed: 1 done (also on later
 * calls), 0 more input needed (send fl_tls_take_out first), -1 failed. */
int fl_tls_handshake(fl_tls_t *t);
/* Decrypted bytes into out: > 0 bytes, 0 none until more is fed,
 * FL_TLS_EOF or FL_TLS_ERR. */
ssize_t fl_tls_read(fl_tls_t *t, char *out, size_t cap);
/* Encrypt all of p (after the handshake): 0, or -1 on a fatal error. */
int fl_tls_write(fl_tls_t *t, const char *p, size_t n);
/* Ciphertext waiting for the socket: its size, and take up to cap of it. */
size_t fl_tls_pending_out(const fl_tls_t *t);
size_t fl_tls_take_out(fl_tls_t *t, char *out, size_t cap);
/* Queue a close_notify alert (nothing after a failure). */
void fl_tls_close_notify(fl_tls_t *t);
/* Append ,"tls_handshakes":N,"tls_errors":M,"tls_last_error":S|null */
void fl_tls_render_stats(fl_buf_t *b);

/* ---- server (server.c) / endpoints (api.c) ----------------------------- */

typedef enum { API_CHAT, API_COMPLETIONS, API_RESPONSES, API_MESSAGES } fl_api_t;

typedef enum { RESET_NONE, RESET_BEFORE_HEADERS, RESET_AFTER_HEADERS } fl_reset_t;

/* What happens when a delay ends (or at once when there is no delay). */
typedef enum {
    ACT_SEND,          /* conn->pending holds a whole response */
    ACT_SEND_THEN_RST, /* conn->pending holds a head only; then RST */
    ACT_RST,           /* RST without answering */
    ACT_STREAM,        /* conn->pending holds the head; then run conn->st */
} fl_action_t;

typedef struct {
    fl_api_t api;
    int64_t n;          /* content events */
    int64_t next;       /* content events produced so far */
    int64_t delay_ms;
    int64_t chunk_size;
    int64_t drop_after; /* -1 = none; else RST after min(drop_after, n) events */
    int64_t stall_after; /* -1 = none; else pause after min(stall_after, n) events */
    int64_t stall_ms;
    int stalled;         /* the pause has been taken */
    int include_usage;
    int chunked_te; /* HTTP/1.1: chunked framing; HTTP/1.0: raw, close at end */
    int wait_write; /* paused until the write queue drains */
    int64_t created;
    uint64_t prompt_tokens;
    fl_buf_t id;    /* response id (plain ASCII) */
    fl_buf_t model; /* quoted JSON string */
    fl_buf_t echo;  /* "request":{...} fragment for the first event */
    int words;      /* content events are the words of text, not tok<i> */
    fl_buf_t text;  /* words: the completion text */
    size_t text_off; /* words: where the next event's word starts */
    fl_buf_t tok;   /* the current event's content */
    int logprobs;   /* chat: each event carries its token's logprobs */
    int64_t top_logprobs;
    double logprob, margin;
} fl_stream_t;

typedef struct fl_worker fl_worker_t;

typedef enum {
    CS_IDLE,              /* reading and answering requests in order */
    CS_DELAY,             /* an answer is prepared; waiting for its delay */
    CS_STREAM,            /* an SSE stream is being produced */
    CS_HANG,              /* never answering; waiting for the client to go */
    CS_RST_DRAIN,         /* waiting for sent bytes to be acked, then RST */
    CS_CLOSE_AFTER_WRITE, /* last answer queued; shut down once written */
    CS_LINGER,            /* write side shut; discarding input until EOF */
    CS_CLOSED,
} fl_conn_state_t;

typedef struct fl_h2 fl_h2_t;
typedef struct fl_h2_stream fl_h2_stream_t;

typedef struct fl_conn {
    uv_tcp_t tcp;
    fl_tls_t *tls; /* NULL: plain HTTP */
    uv_timer_t timer; /* delays, stream pacing, RST drain, linger: one at a time */
    uv_write_t wreq;
    uv_shutdown_t sreq;
    fl_worker_t *w;
    struct fl_conn *prev, *next;
    int handles; /* open libuv handles; freed when it drops to 0 */
    fl_conn_state_t state;
    fl_action_t action;
    int writing, reading, peer_eof, processing, keep_alive, continue_sent;
    int drain_polls;
    fl_buf_t in;     /* received bytes; the current request starts at in_off */
    size_t in_off;
    fl_req_t req;
    fl_buf_t cbody;  /* decoded chunked body */
    fl_buf_t out;    /* queued output not yet handed to libuv */
    fl_buf_t wbuf;   /* output being written */
    fl_buf_t pending;/* an answer waiting for its delay */
    fl_stream_t st;
    uint64_t id;     /* accept order, from 1 (HTTP/2 streams: their connection's) */
    int h2_checked;  /* the first bytes were not the HTTP/2 preface */
    fl_h2_t *h2;     /* this connection speaks HTTP/2 (h2.c) */
    fl_h2_stream_t *h2s; /* not a connection: one HTTP/2 stream's request (h2.c) */
    uint64_t log_seq; /* the call-log entry of the answer in progress; 0 = none */
} fl_conn_t;

struct fl_worker {
    int index;
    int fd; /* the listening socket, bound by main */
    uv_loop_t loop;
    uv_tcp_t listener;
    uv_async_t stop;
    fl_conn_t *conns;
    uint64_t seq;
    fl_buf_t scratch; /* response bodies are rendered here, then copied */
    fl_buf_t tls_in;  /* TLS: ciphertext is read here, then fed to OpenSSL */
};

/* server.c: init runs on the main thread (the loop and its handles exist
 * before any signal can ask for a stop), run on the worker's own thread. */
void fl_worker_init(fl_worker_t *w);
void fl_worker_run(fl_worker_t *w);
void fl_worker_stop(fl_worker_t *w); /* thread-safe */
void fl_conn_queue(fl_conn_t *c, fl_action_t action, int64_t delay_ms);
void fl_conn_hang(fl_conn_t *c);

/* h2.c: HTTP/2 on a connection whose first bytes were the client preface
 * (h2c with prior knowledge, or after ALPN h2).  Each stream's request is
 * turned into an HTTP/1.1 request and answered by fl_api_handle on a
 * stand-in fl_conn_t (h2s set); its answer, rendered as HTTP/1.1, goes out
 * as HTTP/2 frames.  fl_conn_queue / fl_conn_hang on a stand-in land here. */
int fl_h2_is_preface(const char *p, size_t n); /* 1 yes, 0 not yet known, -1 no */
void fl_h2_start(fl_conn_t *c);
void fl_h2_input(fl_conn_t *c);      /* c->in holds new bytes (or the peer closed) */
void fl_h2_after_write(fl_conn_t *c);
void fl_h2_free(fl_conn_t *c);       /* the connection is closing */
void fl_h2_client_left(fl_conn_t *c); /* the client closed the connection: its pending answers are logged so */
void fl_h2_queue(fl_conn_t *sc, fl_action_t action, int64_t delay_ms);
void fl_h2_hang(fl_conn_t *sc);
void fl_h2_refuse(fl_conn_t *sc);    /* RST_STREAM REFUSED_STREAM */
void fl_h2_goaway(fl_conn_t *sc);    /* GOAWAY with a last stream id below this one, then close */
/* server.c, for h2.c */
void fl_conn_flush(fl_conn_t *c);
void fl_conn_close(fl_conn_t *c, int rst);
extern atomic_uint_fast64_t fl_conn_seq;

/* api.c: answer the complete request now in c->req; called by the server
 * with the request bytes at base (= c->in.p + c->in_off).  It renders the
 * answer into c->pending (plus c->st for a stream) and calls fl_conn_queue,
 * or fl_conn_hang. */
void fl_api_handle(fl_conn_t *c, const char *base, const char *body, size_t body_len);
/* Answer a request the parser rejected (and close the connection). */
void fl_api_reject(fl_conn_t *c, int status, const char *msg);
/* Render the next piece of a stream into c->out: the first call produces
 * content event 0 (with the request echo), ... ; returns 1 when the stream
 * is complete (the tail has been produced). */
int fl_api_stream_next(fl_conn_t *c);
/* The answer in progress on c has been produced whole: its log entry's
 * end_ms is now (server.c and h2.c call it). */
void fl_api_answer_done(fl_conn_t *c);
/* The response head.  content_length >= 0: that length; -1: chunked
 * transfer coding; -2: neither (the body ends when the connection closes). */
void fl_put_head(fl_buf_t *o, int status, const char *ctype, int64_t content_length,
                 const char *retry_after, size_t retry_after_len, int keep_alive, int minor);

#endif
