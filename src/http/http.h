/*
 * http — HTTP/1.x codec, ours: a sans-IO parser for requests and responses,
 * resumable at any byte boundary, the writer helpers used by the server
 * (gateway) and the upstream client (server-sent events are framed by
 * proto/sse.h), and gRPC's header forms over HTTP/2 (grpc-status codes,
 * grpc-timeout, grpc-message).  Depends on base only.
 *
 * Strict where request smuggling lives (RFC 9112): Content-Length together
 * with Transfer-Encoding, duplicate or malformed Content-Length, bare LF or
 * bare CR in the head, obs-fold, invalid token characters, control bytes in
 * field values → error 400; a head over the size limit or with too many
 * fields → 431; an unknown transfer coding → 501; a version other than
 * HTTP/1.0 or HTTP/1.1 → 505; a declared or decoded body over max_body → 413.
 * After any error the parser is dead: answer error_status and close.
 */
#ifndef VSR_HTTP_H
#define VSR_HTTP_H

#include "base/base.h"

#define VSR_HTTP_MAX_HEADERS 128

typedef struct {
    vsr_slice_t name;
    vsr_slice_t value;
} vsr_http_header_t;

typedef enum { VSR_HTTP_REQUEST = 0, VSR_HTTP_RESPONSE = 1 } vsr_http_kind_t;

/* A parsed message head.  Every slice points into the parser's own head
 * buffer and stays valid until the parser starts on the next message (the
 * first execute() call after on_complete), or is reset or freed. */
typedef struct {
    vsr_slice_t method;       /* requests */
    vsr_slice_t target;       /* requests: request-target as sent */
    int version_minor;        /* 0 or 1 */
    int status;               /* responses */
    vsr_slice_t reason;       /* responses */
    vsr_http_header_t headers[VSR_HTTP_MAX_HEADERS];
    size_t num_headers;
    int64_t content_length;   /* -1 when absent */
    unsigned chunked : 1;     /* Transfer-Encoding: chunked */
    unsigned keep_alive : 1;  /* the connection may carry another message after this one */
    unsigned expect_continue : 1; /* request carried "Expect: 100-continue" */
    unsigned upgrade : 1;     /* Connection: upgrade with an Upgrade field */
    unsigned has_body : 1;    /* a body follows: CL > 0, chunked, or read-until-close */
    unsigned until_close : 1; /* responses: body delimited by connection close */
    unsigned conn_plain : 1;  /* set by the parser when no Connection token names a field beyond the
                               * fixed hop-by-hop ones (see vsr_http_is_hop_by_hop); 0 = look */
    unsigned fields_checked : 1; /* set by the HTTP/1.x parser: every name is a token and every value
                                  * field-vchar, what vsr_http_write_header checks (not HTTP/2 heads) */
} vsr_http_head_t;

/* Callbacks return VSR_OK to go on, VSR_PAUSED to make execute() return
 * right after the current event (resume by calling execute() with the rest),
 * or a negative code to abort (execute() returns it; the parser is dead). */
typedef struct {
    int (*on_head)(void *ud, vsr_http_head_t *head);
    int (*on_body)(void *ud, const char *p, size_t n); /* decoded bytes, chunk framing removed */
    int (*on_complete)(void *ud);                      /* message ends (after trailers) */
} vsr_http_callbacks_t;

typedef struct {
    size_t max_head_size; /* bytes of start line + fields; default 64 KiB (→ 431) */
    size_t max_headers;   /* field lines; default 100, at most VSR_HTTP_MAX_HEADERS (→ 431) */
    uint64_t max_body;    /* 0 = unlimited (→ 413) */
} vsr_http_limits_t;

/* Parser state.  Fields starting with '_' are private. */
typedef struct {
    vsr_http_kind_t kind;
    vsr_http_limits_t limits;
    const vsr_http_callbacks_t *cb;
    void *ud;
    vsr_http_head_t head;
    int error_status;       /* after an error: 400, 413, 431, 501, 505 (502 for responses) */
    const char *error_msg;  /* after an error: a short static reason */
    /* private */
    int _state;
    int _paused;
    int _dead;
    int _req_is_head;       /* responses: the request was HEAD */
    vsr_buf_t _headbuf;
    size_t _scan;           /* head bytes already scanned for the end of the head */
    uint64_t _remaining;    /* CL bytes or current chunk bytes left */
    uint64_t _body_total;
    size_t _line_len;       /* bytes in the current chunk-size/trailer line */
    int _chunk_state;
} vsr_http_parser_t;

/* limits may be NULL for defaults.  The parser borrows cb and ud. */
void vsr_http_parser_init(vsr_http_parser_t *p, vsr_http_kind_t kind, const vsr_http_limits_t *limits,
                          const vsr_http_callbacks_t *cb, void *ud);
void vsr_http_parser_free(vsr_http_parser_t *p);
/* Responses: the method of the request this response answers is HEAD, so no
 * body follows whatever the fields say.  Call before the response's bytes.
 * The flag holds through 1xx interim responses and is cleared when the
 * final response completes (before its on_complete runs). */
void vsr_http_parser_set_head_request(vsr_http_parser_t *p, int is_head);

/* Feeds bytes.  Returns how many were consumed (>= 0; fewer than len only when
 * a callback paused), or a negative code: VSR_ERR_INVALID (see error_status
 * and error_msg) or the callback's own negative code.
 * After a pause, call execute() again with the unconsumed bytes, even when
 * there are none: events still due (e.g. on_complete after a paused on_body
 * that carried the last body bytes) are delivered by that call.
 * After a 101 (Switching Protocols) response has completed, execute()
 * consumes nothing more and returns 0: what follows is not HTTP/1.x. */
ssize_t vsr_http_parser_execute(vsr_http_parser_t *p, const char *data, size_t len);

/* The peer closed.  A read-until-close response completes here (on_complete
 * runs) → VSR_OK; no message in progress → VSR_OK; a message cut short →
 * VSR_ERR_INVALID with error_msg "truncated message". */
int vsr_http_parser_finish(vsr_http_parser_t *p);

/* True between messages: no byte of a next message has been consumed. */
int vsr_http_parser_idle(const vsr_http_parser_t *p);

/* ---- head helpers ---- */

/* Finds the first field named `name` (case-insensitive).  1 found, 0 not. */
int vsr_http_head_get(const vsr_http_head_t *h, const char *name, vsr_slice_t *value);
/* True when `name` is hop-by-hop: connection, keep-alive, proxy-connection,
 * te, trailer, transfer-encoding, upgrade, or a field named as a token of
 * the head's Connection field(s). */
int vsr_http_is_hop_by_hop(const vsr_http_head_t *h, vsr_slice_t name);

/* ---- request-target normalisation ----
 * What routing matches and what goes upstream is one canonical path,
 * computed once per request (RFC 3986 §6.2.2 and §5.2.4, RFC 9112 §3.2):
 * - absolute-form ("http://host/p?q", scheme case-insensitive): the path
 *   (and query) are taken from it, "/" when it has none, and *authority is
 *   set to its authority, which replaces Host (RFC 9112 §3.2.2); userinfo
 *   ('@') is refused;
 * - percent-escapes of unreserved characters (ALPHA DIGIT - . _ ~) are
 *   decoded, every other escape is kept with upper-case hex;
 * - runs of '/' become one; "." and ".." segments are removed (after
 *   decoding, so "%2e%2e" is ".."); a trailing '/' is kept;
 * - the query is kept as sent; "*" (asterisk-form) is returned as is.
 * An encoded '/' or '\' (%2F, %5C) is data, not a separator: it is kept
 * encoded, and the result is VSR_DECLINED instead of VSR_OK (out and *why
 * set), because a backend that decodes it would see other segments than
 * routing did: a caller forwards such a path only where it is safe.
 * Refused, VSR_ERR_INVALID with *why a short static reason (answer 400):
 * an encoded NUL (%00), a malformed escape, a ".."
 * that would climb above the root, a raw '#', '\', space or control byte,
 * an empty or malformed authority, any other target form.
 * out must hold target.len bytes (the result is never longer): otherwise
 * VSR_ERR_TOO_BIG.  Sans-IO, no allocation; authority and why may be NULL. */
int vsr_http_normalize_target(vsr_slice_t target, char *out, size_t cap, size_t *out_len, vsr_slice_t *authority,
                              const char **why);

/* ---- writer ----
 * Writers return VSR_OK, VSR_ERR_TOO_BIG (the buffer's cap) or
 * VSR_ERR_INVALID when an argument holds bytes that would break the framing
 * (CR, LF or another control byte in a value or reason, a non-token method
 * or field name, SP or a control byte in a target, a status outside
 * 100..999).  On failure the buffer is unchanged. */

const char *vsr_http_reason(int status); /* "OK", "Not Found", ...; "Unknown" */
/* "HTTP/1.1 <status> <reason>\r\n" (reason NULL slice → the standard phrase) */
int vsr_http_write_status_line(vsr_buf_t *b, int status, vsr_slice_t reason);
/* "<method> <target> HTTP/1.1\r\n" */
int vsr_http_write_request_line(vsr_buf_t *b, vsr_slice_t method, vsr_slice_t target);
/* "<name>: <value>\r\n" */
int vsr_http_write_header(vsr_buf_t *b, vsr_slice_t name, vsr_slice_t value);
/* The same for a field of a head with fields_checked: not checked again. */
int vsr_http_write_checked_header(vsr_buf_t *b, vsr_slice_t name, vsr_slice_t value);
int vsr_http_write_header_u64(vsr_buf_t *b, const char *name, uint64_t value);
/* "\r\n" */
int vsr_http_write_end_head(vsr_buf_t *b);
/* Chunk framing: writes "<hex size>\r\n" into out and returns its length;
 * the chunk's data follows, then VSR_HTTP_CRLF. */
size_t vsr_http_chunk_head(char out[24], size_t n);
#define VSR_HTTP_CRLF "\r\n"
#define VSR_HTTP_LAST_CHUNK "0\r\n\r\n"

/* gRPC over HTTP/2: the header forms both of its ends read and write
 * (grpc_head.c), for the ext_proc listener and the ext_proc adapter alike. */
/* gRPC status codes (the ones vsr answers with). */
enum {
    VSR_GRPC_OK = 0,
    VSR_GRPC_CANCELLED = 1,
    VSR_GRPC_INVALID_ARGUMENT = 3,
    VSR_GRPC_DEADLINE_EXCEEDED = 4,
    VSR_GRPC_RESOURCE_EXHAUSTED = 8,
    VSR_GRPC_FAILED_PRECONDITION = 9,
    VSR_GRPC_UNIMPLEMENTED = 12,
    VSR_GRPC_INTERNAL = 13,
    VSR_GRPC_UNAVAILABLE = 14,
};
/* grpc-timeout ("1-8 digits" then H, M, S, m, u or n): VSR_OK with the
 * timeout in ms (rounded up; a timeout over a day is a day), or
 * VSR_ERR_INVALID. */
int vsr_grpc_timeout_ms(vsr_slice_t v, uint64_t *ms);
/* grpc-message: percent-encodes what is not printable ASCII (and '%'), at
 * most 1 KiB of the result. */
void vsr_grpc_message_encode(vsr_buf_t *out, vsr_slice_t msg);

#endif /* VSR_HTTP_H */
