/*
 * proto/completions — OpenAI Completions API <-> chat completions.
 */
#ifndef VSR_PROTO_COMPLETIONS_H
#define VSR_PROTO_COMPLETIONS_H

#include "base/base.h"
#include "proto/sse.h"

/* ==== Completions ==========================================================
 * OpenAI's Completions API (POST /v1/completions) <-> chat completions, for
 * a model that does not serve Completions itself (api_format anthropic:
 * composed with the Messages codec).  Pure, linear in the input; what maps
 * to what is listed at the top of completions.c. */

/* A completions request → a chat request (model kept).  VSR_OK, or
 * VSR_ERR_INVALID with err (NUL-terminated, err_len bytes at most) naming
 * the field that has no chat form. */
int vsr_completions_request_to_chat(const char *body, size_t len, vsr_buf_t *out, char *err, size_t err_len);
/* A chat.completion → a text_completion (choice 0).  VSR_OK, VSR_ERR_INVALID
 * (not a chat.completion) or VSR_ERR_TOO_BIG (out's cap). */
int vsr_completions_response_from_chat(const char *body, size_t len, vsr_buf_t *out);

/* chat.completion.chunk SSE bytes, in chunks of any size → text_completion
 * chunk SSE bytes.  A line or an event over VSR_ANTHROPIC_MAX_EVENT bytes
 * ends the stream with an error event; later bytes are ignored. */
typedef struct {
    vsr_sse_parser_t sse; /* private: the event framing */
    vsr_buf_t *out;       /* private: feed's out, during the call */
    int failed;
} vsr_completions_stream_t;

void vsr_completions_stream_init(vsr_completions_stream_t *s);
int vsr_completions_stream_feed(vsr_completions_stream_t *s, const char *p, size_t n, vsr_buf_t *out);
void vsr_completions_stream_free(vsr_completions_stream_t *s);

#endif /* VSR_PROTO_COMPLETIONS_H */
