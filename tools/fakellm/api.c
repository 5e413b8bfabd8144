/*
 * The endpoints.  Response bodies are written by hand into the worker's
 * scratch buffer (jansson is used only to parse request bodies): that keeps
 * the fast path free of per-request allocations apart from jansson's own.
 */
#include "fakellm.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include <jansson.h>

#define FL_CL_CHUNKED (-1)
#define FL_CL_NONE (-2) /* delimited by closing the connection */

typedef enum {
    R_CHAT,
    R_COMPLETIONS,
    R_RESPONSES,
    R_MESSAGES,
    R_COUNT_TOKENS, /* Anthropic's POST /v1/messages/count_tokens */
    R_MODELS,
    R_EMBEDDINGS,
    R_HEALTH,
    R_STATS,
    R_CONTROL_HEALTH,
    R_CONTROL_LOG,
    R_CONTROL_KEYS,
    R_CONTROL_METHOD,  /* a control path with the wrong method: 405 */
    R_CONTROL_UNKNOWN, /* any other path under /_fakellm/: 404 */
    R_ECHO,
} route_t;

typedef struct {
    int status; /* 0: answer normally */
    const char *retry_after;
    size_t retry_after_len;
    int64_t delay_ms;
    fl_reset_t reset;
    int64_t drop_after;
    int hang;
    int64_t chunks, chunk_delay_ms, chunk_size;
    const char *text;
    size_t text_len;
    const char *body;
    size_t body_len;
    int has_text, has_body;
    int64_t stall_after; /* -1 = none */
    int64_t stall_ms;    /* -1 = not given */
    const char *key;     /* NULL = none */
    size_t key_len;
    int64_t fail_count;  /* -1 = no budget: faults apply every time */
    int refuse_stream;   /* HTTP/2: RST_STREAM REFUSED_STREAM instead of an answer */
    int goaway;          /* HTTP/2: GOAWAY below this stream, then close */
    int text_words;      /* text set per model or per request: streams send its words */
    double logprob, logprob_margin;
    int logprobs_missing;
    int want_logprobs;    /* the request asked for "logprobs": true (chat) */
    int64_t top_logprobs; /* its "top_logprobs", 0..20 */
    char *owned[16]; /* serialised JSON values from the body's "fakellm" object */
    int nowned;
    char ctype[129];  /* content-type of a `body` answer; "" = application/json */
    char *decoded;    /* body-base64's bytes (owned) */
} knobs_t;

typedef struct {
    fl_conn_t *c;
    const char *base; /* request start */
    const char *body;
    size_t body_len;
    int is_head;
} req_ctx_t;

/* ---- response head ------------------------------------------------------ */

static const char *reason(int status)
{
    switch (status) {
    case 100: return "Continue";
    case 200: return "OK";
    case 201: return "Created";
    case 202: return "Accepted";
    case 204: return "No Content";
    case 301: return "Moved Permanently";
    case 302: return "Found";
    case 304: return "Not Modified";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 409: return "Conflict";
    case 413: return "Content Too Large";
    case 422: return "Unprocessable Content";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 502: return "Bad Gateway";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    case 505: return "HTTP Version Not Supported";
    default: return "Status";
    }
}

void fl_put_head(fl_buf_t *o, int status, const char *ctype, int64_t content_length,
                 const char *retry_after, size_t retry_after_len, int keep_alive, int minor)
{
    fl_buf_reserve(o, 256 + fl_cfg.backend_hdr.len + retry_after_len);
    fl_buf_adds(o, "HTTP/1.1 ");
    fl_buf_addu(o, (uint64_t)status);
    fl_buf_addc(o, ' ');
    fl_buf_adds(o, reason(status));
    fl_buf_adds(o, "\r\ncontent-type: ");
    fl_buf_adds(o, ctype);
    fl_buf_adds(o, "\r\n");
    if (content_length >= 0) {
        fl_buf_adds(o, "content-length: ");
        fl_buf_addu(o, (uint64_t)content_length);
        fl_buf_adds(o, "\r\n");
    } else if (content_length == FL_CL_CHUNKED) {
        fl_buf_adds(o, "transfer-encoding: chunked\r\n");
    }
    if (!strcmp(ctype, "text/event-stream"))
        fl_buf_adds(o, "cache-control: no-cache\r\n");
    fl_buf_add(o, fl_cfg.backend_hdr.p, fl_cfg.backend_hdr.len);
    if (retry_after) {
        fl_buf_adds(o, "retry-after: ");
        fl_buf_add(o, retry_after, retry_after_len);
        fl_buf_adds(o, "\r\n");
    }
    if (!keep_alive)
        fl_buf_adds(o, "connection: close\r\n");
    else if (minor == 0)
        fl_buf_adds(o, "connection: keep-alive\r\n");
    fl_buf_adds(o, "\r\n");
}

/* ---- JSON fragments ----------------------------------------------------- */

static int hdr_name_eq(const char *base, const fl_hdr_t *a, const fl_hdr_t *b)
{
    return a->name_len == b->name_len &&
           strncasecmp(base + a->name_off, base + b->name_off, a->name_len) == 0;
}

/* "request":{"method":..,"path":..,"version":..,"headers":{..},"body":..} */
static void render_request(fl_buf_t *b, const req_ctx_t *x)
{
    const fl_req_t *r = &x->c->req;
    const char *base = x->base;
    fl_buf_adds(b, "\"request\":{\"method\":");
    fl_json_str(b, base + r->method_off, r->method_len);
    fl_buf_adds(b, ",\"path\":");
    fl_json_str(b, base + r->target_off, r->target_len);
    fl_buf_adds(b, x->c->h2s ? ",\"version\":\"HTTP/2\""
                   : r->minor ? ",\"version\":\"HTTP/1.1\"" : ",\"version\":\"HTTP/1.0\"");
    fl_buf_adds(b, ",\"headers\":{");
    int first = 1;
    for (int i = 0; i < r->nhdrs; i++) {
        const fl_hdr_t *h = &r->hdrs[i];
        int seen = 0;
        for (int j = 0; j < i && !seen; j++)
            seen = hdr_name_eq(base, &r->hdrs[j], h);
        if (seen)
            continue;
        if (!first)
            fl_buf_addc(b, ',');
        first = 0;
        /* field names are tokens: nothing in them needs escaping */
        fl_buf_reserve(b, h->name_len + 3);
        b->p[b->len++] = '"';
        for (uint32_t k = 0; k < h->name_len; k++) {
            char ch = base[h->name_off + k];
            b->p[b->len++] = (ch >= 'A' && ch <= 'Z') ? (char)(ch + 32) : ch;
        }
        b->p[b->len++] = '"';
        b->p[b->len++] = ':';
        fl_buf_addc(b, '"');
        fl_json_esc(b, base + h->value_off, h->value_len);
        for (int j = i + 1; j < r->nhdrs; j++) {
            if (hdr_name_eq(base, &r->hdrs[j], h)) {
                fl_buf_add(b, ", ", 2);
                fl_json_esc(b, base + r->hdrs[j].value_off, r->hdrs[j].value_len);
            }
        }
        fl_buf_addc(b, '"');
    }
    fl_buf_adds(b, "},\"body\":");
    if (fl_json_str(b, x->body, x->body_len)) {
        /* not valid UTF-8: the string above is lossy, so also give the bytes */
        fl_buf_adds(b, ",\"body_base64\":\"");
        fl_base64(b, x->body, x->body_len);
        fl_buf_addc(b, '"');
    }
    fl_buf_addc(b, '}');
}

/* "fakellm":{"backend":NAME,"request":{...}} */
static void render_fakellm(fl_buf_t *b, const req_ctx_t *x)
{
    fl_buf_adds(b, "\"fakellm\":{\"backend\":");
    fl_buf_add(b, fl_cfg.name_json.p, fl_cfg.name_json.len);
    fl_buf_addc(b, ',');
    render_request(b, x);
    fl_buf_addc(b, '}');
}

static void render_error(fl_buf_t *b, const char *msg, size_t msglen, const char *type, int code)
{
    fl_buf_adds(b, "{\"error\":{\"message\":");
    fl_json_str(b, msg, msglen);
    fl_buf_adds(b, ",\"type\":\"");
    fl_buf_adds(b, type);
    fl_buf_adds(b, "\",\"code\":");
    fl_buf_addu(b, (uint64_t)code);
    fl_buf_adds(b, "}}");
}

/* Anthropic's error type for a status, as its API answers. */
static const char *anthropic_error_type(int code)
{
    switch (code) {
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 413: return "request_too_large";
    case 429: return "rate_limit_error";
    case 529: return "overloaded_error";
    default: return code >= 500 ? "api_error" : "invalid_request_error";
    }
}

/* An error body in the shape of the endpoint: Anthropic's for /v1/messages
 * ({"type":"error","error":{"type","message"}}), else OpenAI's. */
static void render_error_api(fl_buf_t *b, fl_api_t api, const char *msg, size_t msglen, const char *type, int code)
{
    if (api != API_MESSAGES) {
        render_error(b, msg, msglen, type, code);
        return;
    }
    fl_buf_adds(b, "{\"type\":\"error\",\"error\":{\"type\":\"");
    fl_buf_adds(b, anthropic_error_type(code));
    fl_buf_adds(b, "\",\"message\":");
    fl_json_str(b, msg, msglen);
    fl_buf_adds(b, "}}");
}

static void add_model_default(fl_buf_t *b)
{
    fl_buf_addc(b, '"');
    fl_json_esc(b, fl_cfg.name, strlen(fl_cfg.name));
    fl_buf_adds(b, "-model\"");
}

static uint64_t count_words(const char *s, size_t n)
{
    uint64_t w = 0;
    int in = 0;
    for (size_t i = 0; i < n; i++) {
        int sp = s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r';
        if (!sp && !in)
            w++;
        in = !sp;
    }
    return w;
}

static void add_usage(fl_buf_t *b, fl_api_t api, uint64_t prompt, uint64_t completion)
{
    if (api == API_RESPONSES)
        fl_buf_adds(b, "\"usage\":{\"input_tokens\":");
    else
        fl_buf_adds(b, "\"usage\":{\"prompt_tokens\":");
    fl_buf_addu(b, prompt);
    fl_buf_adds(b, api == API_RESPONSES ? ",\"output_tokens\":" : ",\"completion_tokens\":");
    fl_buf_addu(b, completion);
    fl_buf_adds(b, ",\"total_tokens\":");
    fl_buf_addu(b, prompt + completion);
    fl_buf_addc(b, '}');
}

static void add_id(fl_buf_t *b, fl_api_t api, fl_worker_t *w, uint64_t seq)
{
    fl_buf_adds(b, api == API_CHAT ? "chatcmpl-fakellm-" : api == API_COMPLETIONS ? "cmpl-fakellm-"
                   : api == API_MESSAGES ? "msg_fakellm_" : "resp_fakellm_");
    fl_buf_addu(b, (uint64_t)w->index);
    fl_buf_addc(b, api == API_RESPONSES || api == API_MESSAGES ? '_' : '-');
    fl_buf_addu(b, seq);
}

/* Opens a Responses-API object up to its "output" array; the caller adds the
 * items and closes it. */
static void responses_object(fl_buf_t *b, const char *id, size_t idlen, int64_t created,
                             const char *model, size_t modellen, const char *status)
{
    fl_buf_adds(b, "{\"id\":\"");
    fl_buf_add(b, id, idlen);
    fl_buf_adds(b, "\",\"object\":\"response\",\"created_at\":");
    fl_buf_addi(b, created);
    fl_buf_adds(b, ",\"status\":\"");
    fl_buf_adds(b, status);
    fl_buf_adds(b, "\",\"model\":");
    fl_buf_add(b, model, modellen);
    fl_buf_adds(b, ",\"output\":[");
}

static void responses_message_open(fl_buf_t *b, const char *id, size_t idlen)
{
    fl_buf_adds(b, "{\"type\":\"message\",\"id\":\"msg_");
    fl_buf_add(b, id, idlen);
    fl_buf_adds(b, "\",\"status\":\"completed\",\"role\":\"assistant\",\"content\":[{\"type\":"
                   "\"output_text\",\"text\":\"");
}

static void responses_message_close(fl_buf_t *b)
{
    fl_buf_adds(b, "\",\"annotations\":[]}]}");
}

/* ---- knobs -------------------------------------------------------------- */

static int parse_int(const char *v, size_t n, int64_t lo, int64_t hi, int64_t *out)
{
    int64_t x = 0;
    if (n == 0 || n > 12)
        return -1;
    for (size_t i = 0; i < n; i++) {
        if (v[i] < '0' || v[i] > '9')
            return -1;
        x = x * 10 + (v[i] - '0');
    }
    if (x < lo || x > hi)
        return -1;
    *out = x;
    return 0;
}

static int parse_real(const char *v, size_t n, double lo, double hi, double *out)
{
    char tmp[64], *end;
    if (n == 0 || n >= sizeof tmp)
        return -1;
    memcpy(tmp, v, n);
    tmp[n] = 0;
    double x = strtod(tmp, &end);
    if (end != tmp + n || !isfinite(x) || x < lo || x > hi)
        return -1;
    *out = x;
    return 0;
}

static int val_is(const char *v, size_t n, const char *lit)
{
    return strlen(lit) == n && strncasecmp(v, lit, n) == 0;
}

static int key_is(const char *k, size_t n, const char *lit)
{
    if (strlen(lit) != n)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char a = k[i] == '_' ? '-' : k[i];
        if (a >= 'A' && a <= 'Z')
            a = (char)(a + 32);
        if (a != lit[i])
            return 0;
    }
    return 1;
}

/* Apply one knob; on error writes a message into err and returns -1. */
/* RFC 4648 base64 with padding into out (room for len / 4 * 3 bytes); 0 or -1. */
static int base64_decode(const char *in, size_t len, unsigned char *out, size_t *n)
{
    *n = 0;
    if (len % 4)
        return -1;
    for (size_t i = 0; i < len; i += 4) {
        uint32_t v = 0;
        int pad = 0;
        for (int j = 0; j < 4; j++) {
            char c = in[i + j];
            int d = c >= 'A' && c <= 'Z'   ? c - 'A'
                    : c >= 'a' && c <= 'z' ? c - 'a' + 26
                    : c >= '0' && c <= '9' ? c - '0' + 52
                    : c == '+'             ? 62
                    : c == '/'             ? 63
                                           : -1;
            if (c == '=' && i + 4 == len && j >= 2) {
                pad++;
                d = 0;
            } else if (d < 0 || pad) {
                return -1;
            }
            v = v << 6 | (uint32_t)d;
        }
        out[(*n)++] = (unsigned char)(v >> 16);
        if (pad < 2)
            out[(*n)++] = (unsigned char)(v >> 8);
        if (pad < 1)
            out[(*n)++] = (unsigned char)v;
    }
    return 0;
}

static int apply_knob(knobs_t *k, const char *key, size_t klen, const char *v, size_t vlen,
                      fl_buf_t *err)
{
    int64_t x;
    const char *what = NULL;
    if (key_is(key, klen, "chunks")) {
        if (parse_int(v, vlen, 0, 1000000000, &x) == 0)
            k->chunks = x;
        else
            what = "an integer 0..1000000000";
    } else if (key_is(key, klen, "chunk-delay-ms")) {
        if (parse_int(v, vlen, 0, FL_MAX_DELAY_MS, &x) == 0)
            k->chunk_delay_ms = x;
        else
            what = "milliseconds 0..3600000";
    } else if (key_is(key, klen, "chunk-size")) {
        if (parse_int(v, vlen, 0, FL_MAX_CHUNK_SIZE, &x) == 0)
            k->chunk_size = x;
        else
            what = "bytes 0..16777216";
    } else if (key_is(key, klen, "delay-ms")) {
        if (parse_int(v, vlen, 0, FL_MAX_DELAY_MS, &x) == 0)
            k->delay_ms = x;
        else
            what = "milliseconds 0..3600000";
    } else if (key_is(key, klen, "status")) {
        if (parse_int(v, vlen, 0, 599, &x) == 0 && (x == 0 || x >= 200))
            k->status = (int)x;
        else
            what = "a status 200..599 (0: none)";
    } else if (key_is(key, klen, "drop-after")) {
        if (val_is(v, vlen, "none"))
            k->drop_after = -1;
        else if (parse_int(v, vlen, 0, 1000000000, &x) == 0)
            k->drop_after = x;
        else
            what = "a chunk count or \"none\"";
    } else if (key_is(key, klen, "hang")) {
        if (val_is(v, vlen, "1") || val_is(v, vlen, "true") || val_is(v, vlen, "yes"))
            k->hang = 1;
        else if (val_is(v, vlen, "0") || val_is(v, vlen, "false") || val_is(v, vlen, "no"))
            k->hang = 0;
        else
            what = "1 or 0";
    } else if (key_is(key, klen, "refuse-stream") || key_is(key, klen, "goaway")) {
        int *flag = key_is(key, klen, "goaway") ? &k->goaway : &k->refuse_stream;
        if (val_is(v, vlen, "1") || val_is(v, vlen, "true") || val_is(v, vlen, "yes"))
            *flag = 1;
        else if (val_is(v, vlen, "0") || val_is(v, vlen, "false") || val_is(v, vlen, "no"))
            *flag = 0;
        else
            what = "1 or 0";
    } else if (key_is(key, klen, "reset")) {
        if (val_is(v, vlen, "before-headers"))
            k->reset = RESET_BEFORE_HEADERS;
        else if (val_is(v, vlen, "after-headers"))
            k->reset = RESET_AFTER_HEADERS;
        else if (val_is(v, vlen, "none"))
            k->reset = RESET_NONE;
        else
            what = "before-headers, after-headers or none";
    } else if (key_is(key, klen, "retry-after")) {
        for (size_t i = 0; i < vlen && !what; i++)
            if (((unsigned char)v[i] < 0x20 && v[i] != '\t') || v[i] == 0x7f)
                what = "a header value without control characters";
        if (!what) {
            k->retry_after = v;
            k->retry_after_len = vlen;
        }
    } else if (key_is(key, klen, "text")) {
        k->text = v;
        k->text_len = vlen;
        k->has_text = 1;
        k->text_words = 1;
    } else if (key_is(key, klen, "logprob")) {
        if (parse_real(v, vlen, FL_LOGPROB_MIN, 0, &k->logprob) < 0)
            what = "a number -1000..0";
    } else if (key_is(key, klen, "logprob-margin")) {
        if (parse_real(v, vlen, 0, FL_MARGIN_MAX, &k->logprob_margin) < 0)
            what = "a number 0..1000";
    } else if (key_is(key, klen, "logprobs-missing")) {
        if (val_is(v, vlen, "1") || val_is(v, vlen, "true") || val_is(v, vlen, "yes"))
            k->logprobs_missing = 1;
        else if (val_is(v, vlen, "0") || val_is(v, vlen, "false") || val_is(v, vlen, "no"))
            k->logprobs_missing = 0;
        else
            what = "1 or 0";
    } else if (key_is(key, klen, "body")) {
        k->body = v;
        k->body_len = vlen;
        k->has_body = 1;
    } else if (key_is(key, klen, "body-base64")) {
        free(k->decoded);
        k->decoded = malloc(vlen / 4 * 3 + 3);
        if (!k->decoded)
            abort();
        size_t n = 0;
        if (base64_decode(v, vlen, (unsigned char *)k->decoded, &n) < 0) {
            what = "base64 (RFC 4648, with padding)";
        } else {
            k->body = k->decoded;
            k->body_len = n;
            k->has_body = 1;
        }
    } else if (key_is(key, klen, "content-type")) {
        if (vlen == 0 || vlen >= sizeof k->ctype)
            what = "1..128 bytes";
        for (size_t i = 0; i < vlen && !what; i++)
            if ((unsigned char)v[i] < 0x20 || (unsigned char)v[i] >= 0x7f)
                what = "printable ASCII";
        if (!what) {
            memcpy(k->ctype, v, vlen);
            k->ctype[vlen] = '\0';
        }
    } else if (key_is(key, klen, "stall-after")) {
        if (val_is(v, vlen, "none"))
            k->stall_after = -1;
        else if (parse_int(v, vlen, 0, 1000000000, &x) == 0)
            k->stall_after = x;
        else
            what = "a chunk count or \"none\"";
    } else if (key_is(key, klen, "stall-ms")) {
        if (parse_int(v, vlen, 0, FL_MAX_DELAY_MS, &x) == 0)
            k->stall_ms = x;
        else
            what = "milliseconds 0..3600000";
    } else if (key_is(key, klen, "key")) {
        if (vlen == 0 || vlen > FL_KEY_MAX)
            what = "1..128 bytes";
        for (size_t i = 0; i < vlen && !what; i++)
            if ((unsigned char)v[i] < 0x20 || v[i] == 0x7f)
                what = "text without control characters";
        if (!what) {
            k->key = v;
            k->key_len = vlen;
        }
    } else if (key_is(key, klen, "fail-count")) {
        if (parse_int(v, vlen, 0, 1000000000, &x) == 0)
            k->fail_count = x;
        else
            what = "an integer 0..1000000000";
    } else {
        fl_buf_adds(err, "unknown fakellm knob '");
        fl_buf_add(err, key, klen);
        fl_buf_adds(err, "'");
        return -1;
    }
    if (what) {
        fl_buf_adds(err, "invalid value for fakellm knob '");
        fl_buf_add(err, key, klen);
        fl_buf_adds(err, "': expected ");
        fl_buf_adds(err, what);
        return -1;
    }
    return 0;
}

static void knobs_init(knobs_t *k, int process_wide)
{
    memset(k, 0, sizeof *k);
    k->drop_after = -1;
    k->stall_after = -1;
    k->stall_ms = -1;
    k->fail_count = -1;
    k->chunks = fl_cfg.chunks;
    k->chunk_delay_ms = fl_cfg.chunk_delay_ms;
    k->chunk_size = fl_cfg.chunk_size;
    k->logprob = fl_cfg.logprob;
    k->logprob_margin = fl_cfg.logprob_margin;
    k->logprobs_missing = fl_cfg.logprobs_missing;
    if (fl_cfg.text) {
        k->text = fl_cfg.text;
        k->text_len = strlen(fl_cfg.text);
        k->has_text = 1;
    }
    if (!process_wide)
        return;
    k->status = fl_cfg.status;
    if (fl_cfg.retry_after) {
        k->retry_after = fl_cfg.retry_after;
        k->retry_after_len = strlen(fl_cfg.retry_after);
    }
    k->delay_ms = fl_cfg.delay_ms;
    k->reset = fl_cfg.reset_before_headers ? RESET_BEFORE_HEADERS : RESET_NONE;
    k->drop_after = fl_cfg.drop_after;
    k->hang = fl_cfg.hang;
}

/* The --model-* flags of the request's model, over the process-wide ones
 * and under the request's own knobs. */
static void model_knobs(knobs_t *k, const char *model, size_t len)
{
    for (int i = 0; model && i < fl_cfg.nmodels; i++) {
        const fl_model_opt_t *m = &fl_cfg.models[i];
        if (strlen(m->model) != len || memcmp(m->model, model, len) != 0)
            continue;
        if (m->text) {
            k->text = m->text;
            k->text_len = strlen(m->text);
            k->has_text = 1;
            k->text_words = 1;
        }
        if (m->delay_ms >= 0)
            k->delay_ms = m->delay_ms;
        if (m->has_logprob)
            k->logprob = m->logprob;
        if (m->has_margin)
            k->logprob_margin = m->margin;
        if (m->logprobs_missing >= 0)
            k->logprobs_missing = m->logprobs_missing;
        if (m->status)
            k->status = m->status;
        return;
    }
}

/* Knobs that only make sense together, checked once body and headers are
 * merged. */
static int knobs_check(const knobs_t *k, fl_buf_t *err)
{
    if (k->stall_after >= 0 && k->stall_ms < 0) {
        fl_buf_adds(err, "fakellm knob 'stall-after' needs 'stall-ms'");
        return -1;
    }
    if (k->fail_count >= 0 && !k->key) {
        fl_buf_adds(err, "fakellm knob 'fail-count' needs 'key'");
        return -1;
    }
    return 0;
}

/* The key's fault budget is spent: answer as if no fault had been asked
 * for, process-wide ones included.  Content knobs (chunks, chunk-delay-ms,
 * chunk-size, text) stay: they shape a normal answer. */
static void knobs_drop_faults(knobs_t *k)
{
    k->status = 0;
    k->retry_after = NULL;
    k->retry_after_len = 0;
    k->delay_ms = 0;
    k->reset = RESET_NONE;
    k->drop_after = -1;
    k->hang = 0;
    k->refuse_stream = 0;
    k->goaway = 0;
    k->stall_after = -1;
    k->body = NULL;
    k->body_len = 0;
    k->has_body = 0;
}

static void knobs_free(knobs_t *k)
{
    free(k->decoded);
    k->decoded = NULL;
    for (int i = 0; i < k->nowned; i++)
        free(k->owned[i]);
}

static int body_knobs(knobs_t *k, json_t *obj, fl_buf_t *err)
{
    const char *key;
    json_t *val;
    if (!json_is_object(obj)) {
        fl_buf_adds(err, "\"fakellm\" in the body must be an object");
        return -1;
    }
    json_object_foreach(obj, key, val) {
        const char *v;
        size_t vlen;
        if (json_is_string(val)) {
            v = json_string_value(val);
            vlen = json_string_length(val);
        } else {
            if (k->nowned == (int)(sizeof k->owned / sizeof k->owned[0])) {
                fl_buf_adds(err, "too many fakellm knobs");
                return -1;
            }
            char *s = json_dumps(val, JSON_ENCODE_ANY | JSON_COMPACT);
            if (!s)
                abort();
            k->owned[k->nowned++] = s;
            v = s;
            vlen = strlen(s);
        }
        if (apply_knob(k, key, strlen(key), v, vlen, err) < 0)
            return -1;
    }
    return 0;
}

static int header_knobs(knobs_t *k, const req_ctx_t *x, fl_buf_t *err)
{
    static const char pfx[] = "x-fakellm-";
    const fl_req_t *r = &x->c->req;
    for (int i = 0; i < r->nhdrs; i++) {
        const fl_hdr_t *h = &r->hdrs[i];
        const char *name = x->base + h->name_off;
        if (h->name_len <= sizeof pfx - 1 || strncasecmp(name, pfx, sizeof pfx - 1) != 0)
            continue;
        if (apply_knob(k, name + sizeof pfx - 1, h->name_len - (sizeof pfx - 1),
                       x->base + h->value_off, h->value_len, err) < 0)
            return -1;
    }
    return 0;
}

/* ---- routing ------------------------------------------------------------ */

static route_t classify(const char *m, size_t ml, const char *t, size_t tl)
{
    const char *q = memchr(t, '?', tl);
    size_t pl = q ? (size_t)(q - t) : tl;
#define IS(meth, path) (ml == strlen(meth) && !memcmp(m, meth, ml) && pl == strlen(path) && !memcmp(t, path, pl))
    if (IS("POST", "/v1/chat/completions"))
        return R_CHAT;
    if (IS("POST", "/v1/completions"))
        return R_COMPLETIONS;
    if (IS("POST", "/v1/responses"))
        return R_RESPONSES;
    if (IS("POST", "/v1/messages"))
        return R_MESSAGES;
    if (IS("POST", "/v1/messages/count_tokens"))
        return R_COUNT_TOKENS;
    if (IS("GET", "/v1/models"))
        return R_MODELS;
    if (IS("POST", "/v1/embeddings"))
        return R_EMBEDDINGS;
    if (IS("GET", "/health") || IS("HEAD", "/health"))
        return R_HEALTH;
    if (IS("GET", "/stats"))
        return R_STATS;
    if (IS("GET", "/_fakellm/health-status") || IS("POST", "/_fakellm/health-status") ||
        IS("PUT", "/_fakellm/health-status"))
        return R_CONTROL_HEALTH;
    if (IS("GET", "/_fakellm/log") || IS("DELETE", "/_fakellm/log"))
        return R_CONTROL_LOG;
    if (IS("DELETE", "/_fakellm/keys"))
        return R_CONTROL_KEYS;
#undef IS
#define PATH_IS(path) (pl == strlen(path) && !memcmp(t, path, pl))
    if (PATH_IS("/_fakellm/health-status") || PATH_IS("/_fakellm/log") || PATH_IS("/_fakellm/keys"))
        return R_CONTROL_METHOD;
#undef PATH_IS
    if (pl >= 10 && !memcmp(t, "/_fakellm/", 10))
        return R_CONTROL_UNKNOWN;
    return R_ECHO;
}

/* ---- sending ------------------------------------------------------------ */

/* Queue head + body (the body is in the worker scratch buffer). */
static void send_json(const req_ctx_t *x, int status, const fl_buf_t *body, const knobs_t *k,
                      int64_t delay_ms, fl_reset_t reset)
{
    fl_conn_t *c = x->c;
    fl_buf_t *p = &c->pending;
    p->len = 0;
    fl_put_head(p, status, k && k->has_body && k->ctype[0] ? k->ctype : "application/json", (int64_t)body->len,
                k ? k->retry_after : NULL,
                k ? k->retry_after_len : 0, c->keep_alive, c->req.minor);
    if (reset == RESET_AFTER_HEADERS) {
        fl_conn_queue(c, ACT_SEND_THEN_RST, delay_ms);
        return;
    }
    if (!x->is_head)
        fl_buf_add(p, body->p, body->len);
    fl_conn_queue(c, ACT_SEND, delay_ms);
}

void fl_api_reject(fl_conn_t *c, int status, const char *msg)
{
    atomic_fetch_add(&fl_stats.requests, 1);
    /* whatever of the request line was parsed before the error */
    const fl_req_t *r = &c->req;
    const char *base = c->in.p + c->in_off;
    fl_call_t call = {.thread = c->w->index, .outcome = OUT_STATUS, .status = status};
    if (r->method_len)
        call.method = (fl_str_t){base + r->method_off, r->method_len};
    if (r->target_len)
        call.path = (fl_str_t){base + r->target_off, r->target_len};
    fl_log_append(&call);
    fl_buf_t *b = &c->w->scratch;
    b->len = 0;
    render_error(b, msg, strlen(msg), "invalid_request_error", status);
    fl_put_head(&c->out, status, "application/json", (int64_t)b->len, NULL, 0, 0, 1);
    fl_buf_add(&c->out, b->p, b->len);
}

/* ---- streams ------------------------------------------------------------ */

static const char filler_pat[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_";

static void add_filler(fl_buf_t *b, int64_t n)
{
    fl_buf_reserve(b, (size_t)n);
    while (n > 0) {
        size_t k = (size_t)n < sizeof filler_pat - 1 ? (size_t)n : sizeof filler_pat - 1;
        memcpy(b->p + b->len, filler_pat, k);
        b->len += k;
        n -= (int64_t)k;
    }
}

static int is_space(char ch)
{
    return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r';
}

/* The end of the token that starts at off: a word with the whitespace that
 * follows it (the first token also takes any leading whitespace), so the
 * tokens of a text put together are the text. */
static size_t tok_end(const char *t, size_t n, size_t off)
{
    while (off < n && is_space(t[off]))
        off++;
    while (off < n && !is_space(t[off]))
        off++;
    while (off < n && is_space(t[off]))
        off++;
    return off;
}

/* Content event i: "tok<i> ", or the next word of the text at *off. */
static void tok_render(const fl_stream_t *s, int64_t i, size_t *off, fl_buf_t *out)
{
    if (s->words) {
        size_t e = tok_end(s->text.p, s->text.len, *off);
        fl_buf_add(out, s->text.p + *off, e - *off);
        *off = e;
    } else {
        fl_buf_adds(out, "tok");
        fl_buf_addi(out, i);
        fl_buf_addc(out, ' ');
    }
    add_filler(out, s->chunk_size);
}

static void add_real(fl_buf_t *b, double v)
{
    fl_buf_addf(b, "%.9g", v);
}

static void add_bytes(fl_buf_t *b, const char *t, size_t n)
{
    fl_buf_adds(b, ",\"bytes\":[");
    for (size_t i = 0; i < n; i++) {
        if (i)
            fl_buf_addc(b, ',');
        fl_buf_addu(b, (unsigned char)t[i]);
    }
    fl_buf_addc(b, ']');
}

/* One entry of OpenAI's logprobs.content: the chosen token with logprob lp,
 * and top alternatives, the first being the chosen token, the k-th (from 1)
 * "alt<k-1>" with lp - (k-1) * margin. */
static void add_logprob_entry(fl_buf_t *b, const char *t, size_t n, int64_t top, double lp,
                              double margin)
{
    fl_buf_adds(b, "{\"token\":");
    fl_json_str(b, t, n);
    fl_buf_adds(b, ",\"logprob\":");
    add_real(b, lp);
    add_bytes(b, t, n);
    fl_buf_adds(b, ",\"top_logprobs\":[");
    for (int64_t j = 0; j < top; j++) {
        char alt[24];
        const char *at = t;
        size_t an = n;
        if (j > 0) {
            an = (size_t)snprintf(alt, sizeof alt, "alt%lld", (long long)j);
            at = alt;
        }
        fl_buf_adds(b, j ? ",{\"token\":" : "{\"token\":");
        fl_json_str(b, at, an);
        fl_buf_adds(b, ",\"logprob\":");
        add_real(b, lp - (double)j * margin);
        add_bytes(b, at, an);
        fl_buf_addc(b, '}');
    }
    fl_buf_adds(b, "]}");
}

/* {"content":[one entry per token of the text]} */
static void add_logprobs(fl_buf_t *b, const char *t, size_t n, int64_t top, double lp, double margin)
{
    uint64_t words = count_words(t, n);
    fl_buf_adds(b, "{\"content\":[");
    for (size_t off = 0, e, i = 0; i < words; off = e, i++) {
        e = tok_end(t, n, off);
        if (i)
            fl_buf_addc(b, ',');
        add_logprob_entry(b, t + off, e - off, top, lp, margin);
    }
    fl_buf_adds(b, "]}");
}

/* Frame one SSE event from scratch into out. */
static void emit(fl_conn_t *c, const fl_buf_t *ev)
{
    if (c->st.chunked_te) {
        fl_buf_reserve(&c->out, ev->len + 24);
        fl_buf_addhex(&c->out, ev->len);
        fl_buf_add(&c->out, "\r\n", 2);
        fl_buf_add(&c->out, ev->p, ev->len);
        fl_buf_add(&c->out, "\r\n", 2);
    } else {
        fl_buf_add(&c->out, ev->p, ev->len);
    }
}

static void chunk_prefix(fl_buf_t *b, const fl_stream_t *s)
{
    fl_buf_adds(b, "data: {\"id\":\"");
    fl_buf_add(b, s->id.p, s->id.len);
    fl_buf_adds(b, s->api == API_CHAT ? "\",\"object\":\"chat.completion.chunk\",\"created\":"
                                      : "\",\"object\":\"text_completion\",\"created\":");
    fl_buf_addi(b, s->created);
    fl_buf_adds(b, ",\"model\":");
    fl_buf_add(b, s->model.p, s->model.len);
    if (s->api == API_CHAT)
        fl_buf_adds(b, ",\"system_fingerprint\":\"fp_fakellm\"");
}

static void fakellm_tail(fl_buf_t *b, fl_stream_t *s, int64_t chunk, int first)
{
    fl_buf_adds(b, ",\"fakellm\":{\"backend\":");
    fl_buf_add(b, fl_cfg.name_json.p, fl_cfg.name_json.len);
    if (chunk >= 0) {
        fl_buf_adds(b, ",\"chunk\":");
        fl_buf_addi(b, chunk);
    }
    if (first) {
        fl_buf_addc(b, ',');
        fl_buf_add(b, s->echo.p, s->echo.len);
    }
    fl_buf_addc(b, '}');
}

int fl_api_stream_next(fl_conn_t *c)
{
    fl_stream_t *s = &c->st;
    fl_buf_t *b = &c->w->scratch;
    int first = s->next == 0 && s->echo.len > 0;
    b->len = 0;

    if (s->api == API_MESSAGES) {
        /* Anthropic's events: message_start (with the echo) and one text
         * block of N text_delta events, then message_delta and message_stop */
        if (first) {
            fl_buf_adds(b, "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"");
            fl_buf_add(b, s->id.p, s->id.len);
            fl_buf_adds(b, "\",\"type\":\"message\",\"role\":\"assistant\",\"model\":");
            fl_buf_add(b, s->model.p, s->model.len);
            fl_buf_adds(b, ",\"content\":[],\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":");
            fl_buf_addu(b, s->prompt_tokens);
            fl_buf_adds(b, ",\"output_tokens\":1}}");
            fakellm_tail(b, s, -1, 1);
            fl_buf_adds(b, "}\n\nevent: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,"
                           "\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n"
                           "event: ping\ndata: {\"type\":\"ping\"}\n\n");
            emit(c, b);
            b->len = 0;
            s->echo.len = 0;
        }
        if (s->next < s->n) {
            fl_buf_adds(b, "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,"
                           "\"delta\":{\"type\":\"text_delta\",\"text\":\"");
            s->tok.len = 0;
            tok_render(s, s->next, &s->text_off, &s->tok);
            fl_json_esc(b, s->tok.p, s->tok.len);
            fl_buf_adds(b, "\"}");
            fakellm_tail(b, s, s->next, 0);
            fl_buf_adds(b, "}\n\n");
            emit(c, b);
            s->next++;
            return 0;
        }
        fl_buf_adds(b, "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n"
                       "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":"
                       "\"end_turn\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":");
        fl_buf_addu(b, (uint64_t)s->n);
        fl_buf_adds(b, "}");
        fakellm_tail(b, s, s->n, 0);
        fl_buf_adds(b, "}\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n");
        emit(c, b);
    } else if (s->api == API_RESPONSES) {
        if (first) {
            fl_buf_adds(b, "event: response.created\ndata: {\"type\":\"response.created\",\"response\":");
            responses_object(b, s->id.p, s->id.len, s->created, s->model.p, s->model.len,
                             "in_progress");
            fl_buf_adds(b, "]}");
            fakellm_tail(b, s, -1, 1);
            fl_buf_adds(b, "}\n\n");
            emit(c, b);
            b->len = 0;
            s->echo.len = 0;
        }
        if (s->next < s->n) {
            fl_buf_adds(b, "event: response.output_text.delta\ndata: {\"type\":"
                           "\"response.output_text.delta\",\"item_id\":\"msg_");
            fl_buf_add(b, s->id.p, s->id.len);
            fl_buf_adds(b, "\",\"output_index\":0,\"content_index\":0,\"delta\":\"");
            s->tok.len = 0;
            tok_render(s, s->next, &s->text_off, &s->tok);
            fl_json_esc(b, s->tok.p, s->tok.len);
            fl_buf_addc(b, '"');
            fakellm_tail(b, s, s->next, 0);
            fl_buf_adds(b, "}\n\n");
            emit(c, b);
            s->next++;
            return 0;
        }
        fl_buf_adds(b, "event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":");
        responses_object(b, s->id.p, s->id.len, s->created, s->model.p, s->model.len, "completed");
        responses_message_open(b, s->id.p, s->id.len);
        size_t off = 0;
        for (int64_t i = 0; i < s->n; i++) {
            s->tok.len = 0;
            tok_render(s, i, &off, &s->tok);
            fl_json_esc(b, s->tok.p, s->tok.len);
        }
        responses_message_close(b);
        fl_buf_adds(b, "],");
        add_usage(b, API_RESPONSES, s->prompt_tokens, (uint64_t)s->n);
        fl_buf_addc(b, '}');
        fakellm_tail(b, s, s->n, 0);
        fl_buf_adds(b, "}\n\n");
        emit(c, b);
    } else if (s->next < s->n) {
        chunk_prefix(b, s);
        s->tok.len = 0;
        tok_render(s, s->next, &s->text_off, &s->tok);
        if (s->api == API_CHAT) {
            /* as OpenAI: the first delta names the role (SDKs that
             * accumulate a stream need it), every choice has logprobs */
            fl_buf_adds(b, s->next == 0 ? ",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\""
                                        : ",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"");
            fl_json_esc(b, s->tok.p, s->tok.len);
            fl_buf_adds(b, "\"},\"logprobs\":");
            if (s->logprobs) {
                fl_buf_adds(b, "{\"content\":[");
                add_logprob_entry(b, s->tok.p, s->tok.len, s->top_logprobs, s->logprob, s->margin);
                fl_buf_adds(b, "]}");
            } else {
                fl_buf_adds(b, "null");
            }
            fl_buf_adds(b, ",\"finish_reason\":null}]");
        } else {
            fl_buf_adds(b, ",\"choices\":[{\"index\":0,\"text\":\"");
            fl_json_esc(b, s->tok.p, s->tok.len);
            fl_buf_adds(b, "\",\"logprobs\":null,\"finish_reason\":null}]");
        }
        fakellm_tail(b, s, s->next, first);
        fl_buf_adds(b, "}\n\n");
        emit(c, b);
        s->echo.len = 0;
        s->next++;
        return 0;
    } else {
        chunk_prefix(b, s);
        if (s->api == API_CHAT)
            fl_buf_adds(b, s->n == 0 ? ",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\"},\"logprobs\":null,"
                                       "\"finish_reason\":\"stop\"}]"
                                     : ",\"choices\":[{\"index\":0,\"delta\":{},\"logprobs\":null,\"finish_reason\":\"stop\"}]");
        else
            fl_buf_adds(b, ",\"choices\":[{\"index\":0,\"text\":\"\",\"logprobs\":null,"
                           "\"finish_reason\":\"stop\"}]");
        fakellm_tail(b, s, s->n, first);
        fl_buf_adds(b, "}\n\n");
        emit(c, b);
        if (s->include_usage) {
            b->len = 0;
            chunk_prefix(b, s);
            fl_buf_adds(b, ",\"choices\":[],");
            add_usage(b, s->api, s->prompt_tokens, (uint64_t)s->n);
            fakellm_tail(b, s, -1, 0);
            fl_buf_adds(b, "}\n\n");
            emit(c, b);
        }
        b->len = 0;
        fl_buf_adds(b, "data: [DONE]\n\n");
        emit(c, b);
    }
    if (s->chunked_te)
        fl_buf_add(&c->out, "0\r\n\r\n", 5);
    return 1;
}

static void start_stream(const req_ctx_t *x, fl_api_t api, const knobs_t *k, const char *model,
                         size_t model_len, int include_usage)
{
    fl_conn_t *c = x->c;
    fl_stream_t *s = &c->st;
    s->api = api;
    s->n = k->chunks;
    s->next = 0;
    s->delay_ms = k->chunk_delay_ms;
    s->chunk_size = k->chunk_size;
    s->drop_after = k->drop_after;
    s->stall_after = k->stall_after;
    s->stall_ms = k->stall_ms;
    s->stalled = 0;
    s->include_usage = include_usage;
    s->words = k->text_words;
    s->text.len = 0;
    s->text_off = 0;
    if (s->words) {
        fl_buf_add(&s->text, k->text, k->text_len);
        s->n = (int64_t)count_words(k->text, k->text_len);
    }
    s->logprobs = api == API_CHAT && k->want_logprobs && !k->logprobs_missing;
    s->top_logprobs = k->top_logprobs;
    s->logprob = k->logprob;
    s->margin = k->logprob_margin;
    s->chunked_te = c->req.minor == 1 && !c->h2s; /* HTTP/2: DATA frames delimit */
    s->wait_write = 0;
    s->created = (int64_t)time(NULL);
    s->prompt_tokens = (x->body_len + 3) / 4;
    s->id.len = 0;
    add_id(&s->id, api, c->w, ++c->w->seq);
    s->model.len = 0;
    if (model)
        fl_json_str(&s->model, model, model_len);
    else
        add_model_default(&s->model);
    s->echo.len = 0;
    render_request(&s->echo, x);
    if (!s->chunked_te)
        c->keep_alive = 0; /* HTTP/1.0: the end of the stream is the close */

    fl_buf_t *p = &c->pending;
    p->len = 0;
    fl_put_head(p, 200, "text/event-stream", s->chunked_te ? FL_CL_CHUNKED : FL_CL_NONE,
                k->retry_after, k->retry_after_len, c->keep_alive, c->req.minor);
    fl_conn_queue(c, k->reset == RESET_AFTER_HEADERS ? ACT_SEND_THEN_RST : ACT_STREAM, k->delay_ms);
}

/* ---- bodies ------------------------------------------------------------- */

static void body_completion(fl_buf_t *b, const req_ctx_t *x, fl_api_t api, const knobs_t *k,
                            const char *model, size_t model_len)
{
    fl_worker_t *w = x->c->w;
    const char *text = k->has_text ? k->text : fl_cfg.default_text.p;
    size_t text_len = k->has_text ? k->text_len : fl_cfg.default_text.len;
    uint64_t prompt = (x->body_len + 3) / 4, completion = count_words(text, text_len);
    fl_buf_t *mb = &x->c->st.model; /* free between streams: reuse as scratch */
    mb->len = 0;
    if (model)
        fl_json_str(mb, model, model_len);
    else
        add_model_default(mb);
    fl_buf_t *idb = &x->c->st.id;
    idb->len = 0;
    add_id(idb, api, w, ++w->seq);

    if (api == API_MESSAGES) {
        fl_buf_adds(b, "{\"id\":\"");
        fl_buf_add(b, idb->p, idb->len);
        fl_buf_adds(b, "\",\"type\":\"message\",\"role\":\"assistant\",\"model\":");
        fl_buf_add(b, mb->p, mb->len);
        fl_buf_adds(b, ",\"content\":[{\"type\":\"text\",\"text\":");
        fl_json_str(b, text, text_len);
        fl_buf_adds(b, "}],\"stop_reason\":\"end_turn\",\"stop_sequence\":null,\"usage\":{\"input_tokens\":");
        fl_buf_addu(b, prompt);
        fl_buf_adds(b, ",\"output_tokens\":");
        fl_buf_addu(b, completion);
        fl_buf_addc(b, '}');
    } else if (api == API_RESPONSES) {
        responses_object(b, idb->p, idb->len, (int64_t)time(NULL), mb->p, mb->len, "completed");
        responses_message_open(b, idb->p, idb->len);
        fl_json_esc(b, text, text_len);
        responses_message_close(b);
        fl_buf_adds(b, "],");
        add_usage(b, api, prompt, completion);
    } else {
        fl_buf_adds(b, "{\"id\":\"");
        fl_buf_add(b, idb->p, idb->len);
        fl_buf_adds(b, api == API_CHAT ? "\",\"object\":\"chat.completion\",\"created\":"
                                       : "\",\"object\":\"text_completion\",\"created\":");
        fl_buf_addi(b, (int64_t)time(NULL));
        fl_buf_adds(b, ",\"model\":");
        fl_buf_add(b, mb->p, mb->len);
        if (api == API_CHAT) {
            fl_buf_adds(b, ",\"system_fingerprint\":\"fp_fakellm\",\"choices\":[{\"index\":0,\"message\":{"
                           "\"role\":\"assistant\",\"content\":");
            fl_json_str(b, text, text_len);
            fl_buf_adds(b, ",\"refusal\":null},\"logprobs\":");
            if (k->want_logprobs && !k->logprobs_missing)
                add_logprobs(b, text, text_len, k->top_logprobs, k->logprob, k->logprob_margin);
            else
                fl_buf_adds(b, "null");
            fl_buf_adds(b, ",\"finish_reason\":\"stop\"}],");
        } else {
            fl_buf_adds(b, ",\"choices\":[{\"index\":0,\"text\":");
            fl_json_str(b, text, text_len);
            fl_buf_adds(b, ",\"logprobs\":null,\"finish_reason\":\"stop\"}],");
        }
        add_usage(b, api, prompt, completion);
    }
    fl_buf_addc(b, ',');
    render_fakellm(b, x);
    fl_buf_addc(b, '}');
}

/* POST /v1/embeddings: one deterministic unit vector per input, of
 * `dimensions` components (default 16, at most 4096): component i of text t
 * comes from FNV-1a 64 of t mixed with i, so equal texts get equal vectors.
 * encoding_format "float" (the default) writes it as a JSON array of
 * numbers; "base64" (what the OpenAI SDKs ask for unless told otherwise) as
 * the base64 of its float32 components, little-endian, as OpenAI does. */
static void embed_one(fl_buf_t *b, const char *t, size_t n, int64_t dim, int base64)
{
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)t[i]) * 1099511628211ULL;
    double ss = 0, v[4096];
    for (int64_t i = 0; i < dim; i++) {
        uint64_t x = h ^ ((uint64_t)i * 0x9e3779b97f4a7c15ULL);
        x ^= x >> 33;
        x *= 0xff51afd7ed558ccdULL;
        x ^= x >> 33;
        v[i] = (double)(x >> 11) / (double)(1ULL << 53) * 2.0 - 1.0;
        ss += v[i] * v[i];
    }
    double inv = ss > 0 ? 1.0 / sqrt(ss) : 0;
    if (base64) {
        unsigned char le[4096 * 4];
        for (int64_t i = 0; i < dim; i++) {
            float f = (float)(v[i] * inv);
            uint32_t u;
            memcpy(&u, &f, sizeof(u));
            for (int k = 0; k < 4; k++)
                le[i * 4 + k] = (unsigned char)(u >> (8 * k));
        }
        fl_buf_addc(b, '"');
        fl_base64(b, le, (size_t)dim * 4);
        fl_buf_addc(b, '"');
        return;
    }
    fl_buf_addc(b, '[');
    for (int64_t i = 0; i < dim; i++)
        fl_buf_addf(b, "%s%.8f", i ? "," : "", v[i] * inv);
    fl_buf_addc(b, ']');
}

static int body_embeddings(fl_buf_t *b, json_t *root, const char *model, size_t model_len, fl_buf_t *err)
{
    json_t *in = json_object_get(root, "input");
    json_t *dm = json_object_get(root, "dimensions");
    json_t *ef = json_object_get(root, "encoding_format");
    int64_t dim = 16;
    int base64 = 0;
    if (dm) {
        if (!json_is_integer(dm) || json_integer_value(dm) < 1 || json_integer_value(dm) > 4096) {
            fl_buf_adds(err, "\"dimensions\" must be an integer from 1 to 4096");
            return -1;
        }
        dim = (int64_t)json_integer_value(dm);
    }
    if (ef && !json_is_null(ef)) {
        if (json_is_string(ef) && strcmp(json_string_value(ef), "base64") == 0)
            base64 = 1;
        else if (!json_is_string(ef) || strcmp(json_string_value(ef), "float") != 0) {
            fl_buf_adds(err, "\"encoding_format\" must be \"float\" or \"base64\"");
            return -1;
        }
    }
    size_t n = json_is_string(in) ? 1 : json_is_array(in) ? json_array_size(in) : 0;
    if (n == 0) {
        fl_buf_adds(err, "\"input\" must be a string or a non-empty array of strings");
        return -1;
    }
    for (size_t i = 0; i < n; i++)
        if (!json_is_string(json_is_string(in) ? in : json_array_get(in, i))) {
            fl_buf_adds(err, "\"input\" must be a string or a non-empty array of strings");
            return -1;
        }
    uint64_t words = 0;
    fl_buf_adds(b, "{\"object\":\"list\",\"data\":[");
    for (size_t i = 0; i < n; i++) {
        json_t *s = json_is_string(in) ? in : json_array_get(in, i);
        const char *t = json_string_value(s);
        size_t tl = json_string_length(s);
        words += count_words(t, tl);
        fl_buf_addf(b, "%s{\"object\":\"embedding\",\"index\":%zu,\"embedding\":", i ? "," : "", i);
        embed_one(b, t, tl, dim, base64);
        fl_buf_addc(b, '}');
    }
    fl_buf_adds(b, "],\"model\":");
    if (model)
        fl_json_str(b, model, model_len);
    else
        add_model_default(b);
    fl_buf_addf(b, ",\"usage\":{\"prompt_tokens\":%llu,\"total_tokens\":%llu}}", (unsigned long long)words,
                (unsigned long long)words);
    return 0;
}

static void body_stats(fl_buf_t *b)
{
    fl_buf_adds(b, "{\"requests\":");
    fl_buf_addu(b, atomic_load(&fl_stats.requests));
    fl_buf_adds(b, ",\"health\":");
    fl_buf_addu(b, atomic_load(&fl_stats.health));
    fl_buf_adds(b, ",\"connections_accepted\":");
    fl_buf_addu(b, atomic_load(&fl_stats.accepted));
    fl_buf_adds(b, ",\"connections_open\":");
    fl_buf_addi(b, atomic_load(&fl_stats.open));
    if (fl_cfg.tls) {
        fl_buf_adds(b, ",\"tls\":true");
        fl_tls_render_stats(b);
    } else {
        fl_buf_adds(b, ",\"tls\":false");
    }
    fl_buf_adds(b, ",\"backend\":");
    fl_buf_add(b, fl_cfg.name_json.p, fl_cfg.name_json.len);
    fl_buf_addc(b, '}');
}

static void control_health(const req_ctx_t *x, fl_buf_t *b)
{
    int status = 200;
    if (x->base[x->c->req.method_off] != 'G') {
        int64_t v;
        size_t n = x->body_len;
        while (n && (x->body[n - 1] == '\n' || x->body[n - 1] == '\r' || x->body[n - 1] == ' '))
            n--;
        if (parse_int(x->body, n, 200, 599, &v) < 0) {
            static const char m[] = "body must be a status code 200..599";
            render_error(b, m, sizeof m - 1, "invalid_request_error", 400);
            send_json(x, 400, b, NULL, 0, RESET_NONE);
            return;
        }
        atomic_store(&fl_stats.health_status, (int)v);
    }
    status = atomic_load(&fl_stats.health_status);
    fl_buf_adds(b, "{\"health_status\":");
    fl_buf_addu(b, (uint64_t)status);
    fl_buf_adds(b, ",\"backend\":");
    fl_buf_add(b, fl_cfg.name_json.p, fl_cfg.name_json.len);
    fl_buf_addc(b, '}');
    send_json(x, 200, b, NULL, 0, RESET_NONE);
}

static int hexdig(char ch)
{
    if (ch >= '0' && ch <= '9')
        return ch - '0';
    if (ch >= 'a' && ch <= 'f')
        return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F')
        return ch - 'A' + 10;
    return -1;
}

/* The query of GET /_fakellm/log: only `key=K` (percent-encoded, `+` for a
 * space) is understood; anything else is an error rather than ignored. */
static const char *log_query(const char *q, size_t n, char *out, fl_str_t *key)
{
    size_t i = 0;
    while (i < n) {
        size_t s = i;
        while (i < n && q[i] != '&')
            i++;
        size_t e = i++;
        if (e == s)
            continue;
        const char *eq = memchr(q + s, '=', e - s);
        if (!eq || eq - (q + s) != 3 || memcmp(q + s, "key", 3) != 0)
            return "unknown query parameter; expected key=K";
        size_t len = 0;
        for (const char *p = eq + 1; p < q + e; p++) {
            char ch = *p;
            if (ch == '+') {
                ch = ' ';
            } else if (ch == '%') {
                int hi = p + 2 < q + e ? hexdig(p[1]) : -1, lo = hi >= 0 ? hexdig(p[2]) : -1;
                if (lo < 0)
                    return "malformed percent-encoding in key";
                ch = (char)(hi * 16 + lo);
                p += 2;
            }
            if (len == FL_KEY_MAX)
                return "key is longer than 128 bytes";
            out[len++] = ch;
        }
        if (len == 0)
            return "key must not be empty";
        key->p = out;
        key->len = len;
    }
    return NULL;
}

static void control_log(const req_ctx_t *x, fl_buf_t *b)
{
    const fl_req_t *r = &x->c->req;
    if (x->base[r->method_off] == 'D') {
        uint64_t n = fl_log_clear();
        fl_buf_adds(b, "{\"cleared\":");
        fl_buf_addu(b, n);
        fl_buf_adds(b, ",\"backend\":");
        fl_buf_add(b, fl_cfg.name_json.p, fl_cfg.name_json.len);
        fl_buf_addc(b, '}');
        send_json(x, 200, b, NULL, 0, RESET_NONE);
        return;
    }
    const char *t = x->base + r->target_off;
    const char *q = memchr(t, '?', r->target_len);
    char keybuf[FL_KEY_MAX];
    fl_str_t key = {NULL, 0};
    if (q) {
        const char *msg = log_query(q + 1, r->target_len - (size_t)(q + 1 - t), keybuf, &key);
        if (msg) {
            render_error(b, msg, strlen(msg), "invalid_request_error", 400);
            send_json(x, 400, b, NULL, 0, RESET_NONE);
            return;
        }
    }
    fl_log_render(b, key);
    send_json(x, 200, b, NULL, 0, RESET_NONE);
}

static void control_keys(const req_ctx_t *x, fl_buf_t *b)
{
    uint64_t n = fl_keys_clear();
    fl_buf_adds(b, "{\"cleared\":");
    fl_buf_addu(b, n);
    fl_buf_adds(b, ",\"backend\":");
    fl_buf_add(b, fl_cfg.name_json.p, fl_cfg.name_json.len);
    fl_buf_addc(b, '}');
    send_json(x, 200, b, NULL, 0, RESET_NONE);
}

static fl_str_t find_header(const req_ctx_t *x, const char *name)
{
    const fl_req_t *r = &x->c->req;
    size_t n = strlen(name);
    for (int i = 0; i < r->nhdrs; i++) {
        const fl_hdr_t *h = &r->hdrs[i];
        if (h->name_len == n && strncasecmp(x->base + h->name_off, name, n) == 0)
            return (fl_str_t){x->base + h->value_off, h->value_len};
    }
    return (fl_str_t){NULL, 0};
}

/* The text of a message's content: a string, or the "text" of its parts
 * put together (into buf, at most cap bytes). */
static fl_str_t msg_text(json_t *content, char *buf, size_t cap)
{
    if (json_is_string(content))
        return (fl_str_t){json_string_value(content), json_string_length(content)};
    if (!json_is_array(content))
        return (fl_str_t){NULL, 0};
    size_t len = 0, i;
    json_t *part;
    json_array_foreach(content, i, part) {
        json_t *t = json_object_get(part, "text");
        if (!json_is_string(t))
            continue;
        size_t n = json_string_length(t);
        if (n > cap - len)
            n = cap - len;
        memcpy(buf + len, json_string_value(t), n);
        len += n;
    }
    return (fl_str_t){buf, len};
}

static int64_t int_field(json_t *root, const char *name)
{
    json_t *v = json_object_get(root, name);
    return json_is_integer(v) ? (int64_t)json_integer_value(v) : FL_NO_INT;
}

static int bool_field(json_t *root, const char *name)
{
    json_t *v = json_object_get(root, name);
    return json_is_boolean(v) ? json_is_true(v) : -1;
}

/* FNV-1a 64 over a walk of a JSON value: each node's type, then its
 * content (keys in their order), so equal values hash equal.  Depth is
 * bounded by jansson's parser. */
static uint64_t fnv_bytes(uint64_t h, const void *p, size_t n)
{
    const unsigned char *c = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ c[i]) * 1099511628211ULL;
    return h;
}

static uint64_t json_hash(uint64_t h, json_t *v)
{
    char num[32];
    int n;
    switch (json_typeof(v)) {
    case JSON_OBJECT: {
        const char *key;
        json_t *x;
        h = fnv_bytes(h, "{", 1);
        json_object_foreach(v, key, x) {
            h = fnv_bytes(h, key, strlen(key) + 1);
            h = json_hash(h, x);
        }
        return fnv_bytes(h, "}", 1);
    }
    case JSON_ARRAY: {
        size_t i;
        json_t *x;
        h = fnv_bytes(h, "[", 1);
        json_array_foreach(v, i, x) h = json_hash(h, x);
        return fnv_bytes(h, "]", 1);
    }
    case JSON_STRING:
        h = fnv_bytes(h, "\"", 1);
        h = fnv_bytes(h, json_string_value(v), json_string_length(v));
        return fnv_bytes(h, "\"", 1);
    case JSON_INTEGER:
        n = snprintf(num, sizeof num, "i%lld", (long long)json_integer_value(v));
        return fnv_bytes(h, num, (size_t)n);
    case JSON_REAL:
        n = snprintf(num, sizeof num, "r%.17g", json_real_value(v));
        return fnv_bytes(h, num, (size_t)n);
    case JSON_TRUE:
        return fnv_bytes(h, "t", 1);
    case JSON_FALSE:
        return fnv_bytes(h, "f", 1);
    default:
        return fnv_bytes(h, "n", 1);
    }
}

/* The log's view of an inference body.  Strings point into root (or into
 * the two buffers of FL_LOG_TEXT_MAX + 8 bytes). */
static void body_essentials(fl_body_t *bd, json_t *root, char *ubuf, char *sbuf)
{
    memset(bd, 0, sizeof *bd);
    bd->stream = bool_field(root, "stream");
    bd->logprobs = bool_field(root, "logprobs");
    bd->top_logprobs = int_field(root, "top_logprobs");
    bd->max_completion_tokens = int_field(root, "max_completion_tokens");
    bd->max_tokens = int_field(root, "max_tokens");
    bd->n_messages = FL_NO_INT;
    json_t *t = json_object_get(root, "temperature");
    if (json_is_number(t)) {
        bd->temperature = json_number_value(t);
        bd->has_temperature = 1;
    }
    json_t *tools = json_object_get(root, "tools");
    bd->has_tools = json_is_array(tools) && json_array_size(tools) > 0;
    json_t *msgs = json_object_get(root, "messages");
    if (!json_is_array(msgs))
        return;
    bd->n_messages = (int64_t)json_array_size(msgs);
    bd->messages_sha = json_hash(1469598103934665603ULL, msgs);
    bd->has_sha = 1;
    size_t i;
    json_t *m;
    json_array_foreach(msgs, i, m) {
        const char *role = json_string_value(json_object_get(m, "role"));
        if (!role)
            continue;
        if (!strcmp(role, "system") && !bd->system.p)
            bd->system = msg_text(json_object_get(m, "content"), sbuf, FL_LOG_TEXT_MAX + 8);
        else if (!strcmp(role, "user"))
            bd->last_user = msg_text(json_object_get(m, "content"), ubuf, FL_LOG_TEXT_MAX + 8);
    }
}

void fl_api_answer_done(fl_conn_t *c)
{
    if (c->log_seq) {
        fl_log_end(c->log_seq);
        c->log_seq = 0;
    }
}

static void call_init(fl_call_t *call, const req_ctx_t *x, route_t route, const knobs_t *k,
                      const char *model, size_t model_len)
{
    const fl_req_t *r = &x->c->req;
    memset(call, 0, sizeof *call);
    call->thread = x->c->w->index;
    call->conn = x->c->id;
    call->h2 = x->c->h2s != NULL;
    call->method = (fl_str_t){x->base + r->method_off, r->method_len};
    call->path = (fl_str_t){x->base + r->target_off, r->target_len};
    call->request_id = find_header(x, "x-request-id");
    call->model = (fl_str_t){model, model_len};
    call->key = (fl_str_t){k->key, k->key_len};
    call->health = route == R_HEALTH;
}

/* What the handler below is going to do, in its order of precedence. */
static void decide_outcome(fl_call_t *call, const knobs_t *k, int bad_json, int stream)
{
    int streaming = stream && !k->status && !bad_json && !k->has_body;
    if (call->h2 && k->refuse_stream)
        call->outcome = OUT_REFUSED;
    else if (call->h2 && k->goaway)
        call->outcome = OUT_GOAWAY;
    else if (k->hang)
        call->outcome = OUT_HANG;
    else if (k->reset != RESET_NONE)
        call->outcome = OUT_RESET;
    else if (k->status || bad_json) {
        call->outcome = OUT_STATUS;
        call->status = k->status ? k->status : 400;
    } else if (streaming && k->drop_after >= 0)
        call->outcome = OUT_DROP;
    else if (streaming && k->stall_after >= 0)
        call->outcome = OUT_STALL;
    else if (k->delay_ms > 0)
        call->outcome = OUT_DELAY;
    else if (call->health)
        call->outcome = OUT_HEALTH;
    else
        call->outcome = OUT_OK;
}

void fl_api_handle(fl_conn_t *c, const char *base, const char *body, size_t body_len)
{
    fl_req_t *r = &c->req;
    req_ctx_t x = {.c = c, .base = base, .body = body, .body_len = body_len};
    x.is_head = r->method_len == 4 && !memcmp(base + r->method_off, "HEAD", 4);
    route_t route = classify(base + r->method_off, r->method_len, base + r->target_off, r->target_len);
    fl_buf_t *b = &c->w->scratch;
    b->len = 0;

    if (route == R_STATS) {
        body_stats(b);
        send_json(&x, 200, b, NULL, 0, RESET_NONE);
        return;
    }
    if (route == R_CONTROL_HEALTH) {
        control_health(&x, b);
        return;
    }
    if (route == R_CONTROL_LOG) {
        control_log(&x, b);
        return;
    }
    if (route == R_CONTROL_KEYS) {
        control_keys(&x, b);
        return;
    }
    if (route == R_CONTROL_METHOD || route == R_CONTROL_UNKNOWN) {
        static const char m405[] = "method not allowed on this fakellm control path";
        static const char m404[] = "unknown fakellm control path";
        int st = route == R_CONTROL_METHOD ? 405 : 404;
        const char *m = st == 405 ? m405 : m404;
        render_error(b, m, strlen(m), "invalid_request_error", st);
        send_json(&x, st, b, NULL, 0, RESET_NONE);
        return;
    }
    int counted = route != R_HEALTH;
    if (counted)
        atomic_fetch_add(&fl_stats.requests, 1);
    else
        atomic_fetch_add(&fl_stats.health, 1);

    knobs_t k;
    fl_call_t call;
    knobs_init(&k, counted);
    if (counted && fl_cfg.fail_first > 0 &&
        atomic_fetch_add(&fl_stats.fail_seq, 1) < (uint64_t)fl_cfg.fail_first)
        k.status = fl_cfg.fail_status;

    fl_buf_t err = {0};
    json_t *root = NULL;
    const char *model = NULL;
    size_t model_len = 0;
    int stream = 0, include_usage = 0, bad_json = 0;
    const char *field_err = NULL; /* a request field fakellm cannot honour: 400 */
    fl_body_t bd;
    int has_bd = 0;
    char ubuf[FL_LOG_TEXT_MAX + 8], sbuf[FL_LOG_TEXT_MAX + 8];
    fl_api_t api = route == R_CHAT ? API_CHAT : route == R_COMPLETIONS ? API_COMPLETIONS
                   : route == R_MESSAGES || route == R_COUNT_TOKENS ? API_MESSAGES : API_RESPONSES;
    int inference = route == R_CHAT || route == R_COMPLETIONS || route == R_RESPONSES || route == R_MESSAGES ||
                    route == R_COUNT_TOKENS;

    if (inference || route == R_EMBEDDINGS) {
        json_error_t jerr;
        root = body_len ? json_loadb(body, body_len, JSON_ALLOW_NUL, &jerr) : NULL;
        if (!root || !json_is_object(root)) {
            bad_json = 1;
            if (!body_len)
                fl_buf_adds(&err, "request body is empty; expected a JSON object");
            else if (!root)
                fl_buf_addf(&err, "invalid JSON body: %s (line %d, column %d)", jerr.text, jerr.line,
                            jerr.column);
            else
                fl_buf_adds(&err, "request body must be a JSON object");
        } else {
            json_t *m = json_object_get(root, "model");
            if (json_is_string(m)) {
                model = json_string_value(m);
                model_len = json_string_length(m);
            }
            stream = route != R_COUNT_TOKENS && json_is_true(json_object_get(root, "stream")); /* counting has none */
            include_usage = json_is_true(
                json_object_get(json_object_get(root, "stream_options"), "include_usage"));
            if (inference) {
                body_essentials(&bd, root, ubuf, sbuf);
                has_bd = 1;
                json_t *tl = json_object_get(root, "top_logprobs");
                if (tl && !json_is_null(tl) &&
                    (!json_is_integer(tl) || json_integer_value(tl) < 0 ||
                     json_integer_value(tl) > FL_TOP_LOGPROBS_MAX)) {
                    field_err = "\"top_logprobs\" must be an integer from 0 to 20";
                    bad_json = 1;
                }
                k.want_logprobs = route == R_CHAT && bd.logprobs == 1;
                k.top_logprobs = bd.top_logprobs == FL_NO_INT ? 0 : bd.top_logprobs;
            }
            model_knobs(&k, model, model_len);
            json_t *fk = json_object_get(root, "fakellm");
            if (fk && body_knobs(&k, fk, &err) < 0)
                goto knob_error;
            /* as Anthropic: max_tokens is required, messages must be a list */
            if (route == R_MESSAGES && !json_is_integer(json_object_get(root, "max_tokens"))) {
                bad_json = 1;
                fl_buf_adds(&err, "max_tokens: Field required");
            } else if ((route == R_MESSAGES || route == R_COUNT_TOKENS) &&
                       !json_is_array(json_object_get(root, "messages"))) {
                bad_json = 1;
                fl_buf_adds(&err, "messages: Field required");
            }
        }
    }
    if (header_knobs(&k, &x, &err) < 0 || knobs_check(&k, &err) < 0)
        goto knob_error;

    /* Counting the attempt, spending the budget and logging happen under
     * one lock, so the log shows each key's attempts in seq order. */
    call_init(&call, &x, route, &k, model, model_len);
    call.body = has_bd ? &bd : NULL;
    fl_log_lock();
    if (k.key) {
        call.attempt = fl_keys_attempt_locked(k.key, k.key_len);
        if (k.fail_count >= 0 && call.attempt > (uint64_t)k.fail_count)
            knobs_drop_faults(&k);
    }
    decide_outcome(&call, &k, bad_json, stream && inference);
    c->log_seq = fl_log_append_locked(&call);
    fl_log_unlock();

    if (c->h2s && k.refuse_stream) {
        fl_h2_refuse(c);
        goto done;
    }
    if (c->h2s && k.goaway) {
        fl_h2_goaway(c);
        goto done;
    }
    if (k.hang) {
        fl_conn_hang(c);
        goto done;
    }
    if (k.reset == RESET_BEFORE_HEADERS) {
        fl_conn_queue(c, ACT_RST, k.delay_ms);
        goto done;
    }
    if (k.status) {
        if (k.has_body) {
            fl_buf_add(b, k.body, k.body_len);
        } else {
            char msg[48];
            int n = snprintf(msg, sizeof msg, "fakellm injected %d", k.status);
            render_error_api(b, api, msg, (size_t)n, "server_error", k.status);
        }
        send_json(&x, k.status, b, &k, k.delay_ms, k.reset);
        goto done;
    }
    if (bad_json) {
        if (field_err)
            render_error_api(b, api, field_err, strlen(field_err), "invalid_request_error", 400);
        else
            render_error_api(b, api, err.p, err.len, "invalid_request_error", 400);
        send_json(&x, 400, b, &k, k.delay_ms, k.reset);
        goto done;
    }
    if (stream && inference && !k.has_body) {
        start_stream(&x, api, &k, model, model_len, include_usage);
        goto done;
    }
    if (k.has_body) {
        fl_buf_add(b, k.body, k.body_len);
        send_json(&x, 200, b, &k, k.delay_ms, k.reset);
        goto done;
    }
    switch (route) {
    case R_CHAT:
    case R_COMPLETIONS:
    case R_RESPONSES:
    case R_MESSAGES:
        body_completion(b, &x, api, &k, model, model_len);
        break;
    case R_COUNT_TOKENS: /* the prompt-token count of the answers, of this body */
        fl_buf_addf(b, "{\"input_tokens\":%llu,", (unsigned long long)((x.body_len + 3) / 4));
        render_fakellm(b, &x);
        fl_buf_addc(b, '}');
        break;
    case R_EMBEDDINGS:
        if (body_embeddings(b, root, model, model_len, &err) < 0) {
            b->len = 0;
            render_error(b, err.p, err.len, "invalid_request_error", 400);
            send_json(&x, 400, b, &k, k.delay_ms, k.reset);
            goto done;
        }
        break;
    case R_MODELS:
        fl_buf_adds(b, "{\"object\":\"list\",\"data\":[{\"id\":");
        add_model_default(b);
        fl_buf_adds(b, ",\"object\":\"model\",\"created\":0,\"owned_by\":\"fakellm\"}],");
        render_fakellm(b, &x);
        fl_buf_addc(b, '}');
        break;
    case R_HEALTH: {
        int hs = atomic_load(&fl_stats.health_status);
        fl_buf_adds(b, hs == 200 ? "{\"status\":\"ok\",\"backend\":" : "{\"status\":\"unhealthy\",\"backend\":");
        fl_buf_add(b, fl_cfg.name_json.p, fl_cfg.name_json.len);
        fl_buf_addc(b, '}');
        send_json(&x, hs, b, &k, k.delay_ms, k.reset);
        goto done;
    }
    default:
        fl_buf_addc(b, '{');
        render_fakellm(b, &x);
        fl_buf_addc(b, '}');
        break;
    }
    send_json(&x, 200, b, &k, k.delay_ms, k.reset);
    goto done;

knob_error:
    /* logged, but not counted as an attempt of its key (attempt 0) */
    call_init(&call, &x, route, &k, model, model_len);
    call.body = has_bd ? &bd : NULL;
    call.outcome = OUT_STATUS;
    call.status = 400;
    fl_log_lock();
    c->log_seq = fl_log_append_locked(&call);
    fl_log_unlock();
    b->len = 0;
    render_error_api(b, api, err.p, err.len, "invalid_request_error", 400);
    send_json(&x, 400, b, NULL, 0, RESET_NONE);
done:
    if (b->cap > (4u << 20))
        fl_buf_free(b);
    if (root)
        json_decref(root);
    knobs_free(&k);
    fl_buf_free(&err);
}
