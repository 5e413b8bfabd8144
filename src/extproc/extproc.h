/*
 * extproc — the Envoy ext_proc adapter's protocol side: one Process stream
 * (one HTTP request that Envoy is proxying) driven through one routing
 * session.  Envoy's ProcessingRequest messages come in as the gRPC
 * stream's DATA bytes; each becomes the session phase it names (request
 * headers, request body, response headers, response body); each phase's
 * Effect goes back as the matching ProcessingResponse, framed, through the
 * io callbacks.  No socket, loop or HTTP/2 type appears here: the server
 * that carries the stream (HTTP/2, gRPC headers and trailers) lends the io
 * callbacks, and unit tests drive a stream directly.
 *
 * The answers follow the standalone adapter's rules (extproc-int.h), and
 * the processing modes follow the session:
 *   - request body: BUFFERED is required (the whole body in one message);
 *     a request body that comes in pieces is answered with a 500 of the
 *     adapter's own;
 *   - response body: the response headers answer asks, with mode_override,
 *     for what the session's body mode needs — NONE for RELAY, STREAMED
 *     for STREAM (each chunk replaced by the session's bytes) and for RELAY
 *     with observe (each chunk answered unchanged), BUFFERED for BUFFER
 *     (the whole body replaced, or an ImmediateResponse when the session
 *     gives a status); a translated body drops content-length.
 * A chunk that comes in a mode that was not asked for (Envoy configured
 * without allow_mode_override) is answered as its mode allows: unchanged.
 *
 * Order: answers go out in the order of the messages.  While a phase waits
 * on its ports (pending), later messages are queued, bounded by
 * max_queued bytes; past it the stream fails (RESOURCE_EXHAUSTED).
 *
 * Threading: a stream belongs to the thread that opened it; the ports'
 * callbacks run there.  Memory: the stream owns its session.
 */
#ifndef VSR_EXTPROC_H
#define VSR_EXTPROC_H

#include "base/base.h"
#include "http/http.h"
#include "routing/routing.h"

typedef struct vsr_xp_stream_s vsr_xp_stream_t;

/* gRPC's status codes and header forms (VSR_GRPC_*, vsr_grpc_timeout_ms,
 * vsr_grpc_message_encode) are http/'s: both ends of the stream use them. */

typedef struct {
    /* Framed ProcessingResponse bytes for the stream's DATA (borrowed for
     * the call: the callee copies). */
    void (*send)(void *ud, const char *p, size_t n);
    /* The RPC is over with this gRPC status (VSR_GRPC_*: 0 = OK) and, when
     * not OK, a message for grpc-message.  Called once; after it the stream
     * makes no io call.  Run from the stream's calls or from a port's
     * callback. */
    void (*finish)(void *ud, int grpc_status, const char *message);
    void *ud;
} vsr_xp_io_t;

typedef struct {
    /* the session's options (listener, trust, ports, deadline); the stream
     * puts itself between the ports and the session to learn when a phase
     * resumes (ports and their ud are borrowed: they outlive the stream) */
    vsr_session_opts_t session;
    uint32_t max_message;   /* bytes of one ProcessingRequest (0 = 64 MiB) */
    size_t max_queued;      /* bytes of messages queued behind a pending phase (0 = 64 MiB) */
} vsr_xp_stream_opts_t;

/* Opens a stream routing with engine e (the session pins it). */
vsr_xp_stream_t *vsr_xp_stream_open(vsr_engine_t *e, const vsr_xp_stream_opts_t *opts, const vsr_xp_io_t *io);
/* DATA from Envoy.  Returns VSR_OK, or an error once the stream has
 * finished (bad framing or message, a protocol violation: finish has run
 * with its status); feeding a finished stream is harmless (ignored). */
int vsr_xp_stream_data(vsr_xp_stream_t *st, const uint8_t *p, size_t n);
/* Envoy closed its side: the stream finishes OK once every message has
 * been answered (at once when nothing is pending). */
void vsr_xp_stream_end(vsr_xp_stream_t *st);
/* The RPC was reset or the peer is gone: what the session waits on is
 * cancelled and no io call follows. */
void vsr_xp_stream_cancel(vsr_xp_stream_t *st);
/* Frees the stream (cancels it first if needed).  Not from an io callback. */
void vsr_xp_stream_free(vsr_xp_stream_t *st);
/* The session, for the adapter's access log and metrics (valid until free). */
vsr_session_t *vsr_xp_stream_session(const vsr_xp_stream_t *st);
/* 1 once finish has run. */
int vsr_xp_stream_finished(const vsr_xp_stream_t *st);

/* What the stream saw of its HTTP request, for the access log and metrics
 * (slices valid until free; empty when not seen). */
typedef struct {
    vsr_slice_t method, path, request_id, user_agent;
    int status;              /* the client's status as vsr answered it: an immediate answer's, the upstream's
                              * (or the one vsr put in its place); 0 before any */
    uint64_t request_bytes;  /* the request body */
    uint64_t response_bytes; /* the response body as vsr answered it (what Envoy was told to send; unchanged
                              * chunks count as they came) */
    int answered;            /* every message got its answer and the RPC ended OK */
} vsr_xp_info_t;
void vsr_xp_stream_info(const vsr_xp_stream_t *st, vsr_xp_info_t *out);

#endif /* VSR_EXTPROC_H */
