/*
 * session.c — one request's way through the routing core, phase by phase.
 */
#include "routing/routing-int.h"

#include <math.h>
#include <stdio.h>
#include <time.h>

#include "plugins/plugins.h"
#include "proto/anthropic.h"
#include "proto/completions.h"
#include "proto/responses.h"

/* EP_SURFACE: the other inference surfaces (embeddings, ...), routed by their
 * `model` field alone, like a passthrough */
typedef enum {
    EP_NONE = 0, EP_CHAT, EP_COMPLETIONS, EP_RESPONSES, EP_MODELS, EP_SURFACE, EP_MESSAGES, EP_COUNT_TOKENS,
    EP_RESP_GET, EP_RESP_ITEMS, EP_RESP_DELETE, /* the Responses API's stored objects */
} endpoint_t;

/* Bytes of a translated answer: the whole body held for a buffered
 * translation, and one chunk's translated output. */
#define XLATE_MAX_BODY VSR_ANTHROPIC_MAX_INPUT
#define XLATE_MAX_OUT (64u << 20)
#define EV_HOLD_MAX (64u << 10) /* bytes of one streamed event held to see whether it is the usage chunk */

struct vsr_session_s {
    vsr_engine_t *e;
    vsr_pool_t pool;
    vsr_session_opts_t opts;
    vsr_effect_t eff;
    vsr_plan_t plan;
    vsr_evidence_t ev;
    const vsr_header_t *headers;
    size_t n_headers;
    endpoint_t ep;
    int default_route; /* a path outside /v1: forwarded untouched */
    int answered;      /* an immediate response was given */
    int has_json;
    vsr_json_t json;
    vsr_json_edits_t edits;
    vsr_chat_view_t chat;
    /* what every candidate's request shares (fallback re-aims the request) */
    const char *body;
    size_t body_len;
    vsr_slice_t name;
    uint32_t model_tok;
    const vsr_decision_conf_t *decision;
    const vsr_recipe_conf_t *recipe;
    vsr_json_edit_t *saved_edits;
    size_t n_saved_edits;
    vsr_slice_t *plugin_rm;
    size_t n_plugin_rm;
    vsr_header_t *plugin_set;
    size_t n_plugin_set;
    const vsr_model_conf_t **tried;
    size_t n_tried;
    /* the body phase's routing, which may wait on the ports */
    resolution_t res;
    uint64_t t0;
    route_ctx_t rc;
    vsr_signals_memo_t sig_memo;
    int routed;        /* rc holds a decision */
    int pending;       /* waiting on the ports */
    /* the decision's request graph, when its algorithm is one */
    vsr_graph_run_t *graph;
    vsr_graph_port_t gport;
    vsr_slice_t final_body; /* the graph's final hop, sent (streamed) as the routed call */
    int looper_fell_back;   /* the graph failed and algorithm.on_error: fallback sent the request to the first modelRef */
    /* protocols: a Messages client (POST /v1/messages) is served as a chat
     * request (in_body), and a model of api_format anthropic gets the chat
     * request translated to Messages (up_body) */
    int anthropic_in;
    int count_tokens;         /* POST /v1/messages/count_tokens: forwarded to a Messages backend, or estimated */
    const char *no_chat_form; /* what of a Messages request the chat form left out (a chat model refuses it) */
    int include_usage;        /* the chat request asked for a usage chunk (stream_options.include_usage) */
    int usage_added;          /* vsr asked the backend for the usage chunk the client did not ask for */
    vsr_buf_t ev_hold;        /* usage_added: the event being read, until it is known not to be that chunk */
    unsigned ev_strip : 1;    /* this answer is such a stream: its events go through strip_usage_chunk */
    unsigned ev_pass : 1;     /* the event outgrew ev_hold: passed on as it comes */
    unsigned ev_bol : 1;      /* the next byte starts a line */
    vsr_buf_t in_body, up_body, scratch;
    const char *aim_error;    /* why the last aim() could not translate the request */
    /* the answer's translation, chosen by the response headers phase */
    vsr_body_mode_t body_mode;
    int resp_status;
    int to_chat;              /* the upstream answers in Messages: to chat */
    vsr_anthropic_stream_t *sx;     /* (pool) made the first time an answer is translated */
    int sx_open;
    int cmpl;                 /* a Completions client, a Messages model: Messages → chat → text_completion */
    vsr_completions_stream_t *cs;   /* (pool) likewise */
    int cs_open;
    int acc_over;             /* BUFFER: the body passed XLATE_MAX_BODY */
    vsr_buf_t acc, out;
    vsr_buf_t mid;            /* a Messages answer's chat form, for a Responses client */
    vsr_slice_t out_piece;
    /* the response cache (response_cache plugin) */
    const vsr_plugin_response_cache_conf_t *rc_conf;
    int rc_lookup, rc_store;        /* this request looks up / stores */
    int rc_waiting;                 /* 1: the embedding, 2: the store's lookup, 3: a model call, 4: the rag retrieval */
    int rc_calling, rc_answered;    /* a port answered before its call returned */
    const vsr_effect_t *(*rc_then)(vsr_session_t *s); /* what the phase goes on with once it has */
    void *rc_handle;
    char rc_key[VSR_CONFIG_HASH_LEN], rc_ctx[VSR_CONFIG_HASH_LEN];
    vsr_cache_query_t rc_q, rc_rq;  /* the query; a no-cache request's revalidation (exact, no embedding) */
    int rc_revalidate;              /* x-vsr-cache-control no-cache: look up, never answer from it */
    float *rc_vec;                  /* the request's embedding (pool), once it has one */
    uint64_t rc_max_age_ms;         /* x-vsr-cache-control max-age: an older entry is a miss */
    int rc_status;                  /* the lookup's answer */
    vsr_slice_t rc_value;           /* ... a hit's stored value (pool) */
    double rc_similarity;
    int rc_sse, rc_over;            /* response: the answer is an event stream; past the value cap */
    vsr_buf_t rc_acc;               /* the answer's chat-side bytes, kept on the side */
    /* the Responses API (global.services.response_api.enabled): a POST is
     * translated to chat (in_body) and its answer back, and kept under its
     * id; GET / DELETE read the store */
    int responses_in;
    vsr_responses_info_t rinfo;
    char resp_id[64];
    vsr_slice_t resp_key;           /* "resp:<id>", or "resp:<owner>:<id>" (pool): resp_store_key */
    vsr_buf_t r_items, r_conv, r_echo, r_prior;
    uint64_t r_created;
    vsr_responses_stream_t *rs;     /* (pool) likewise */
    int rs_open;
    const char *r_body;             /* the client's body, while the previous response is fetched */
    size_t r_len;
    /* the router_replay plugin's record (resp_replay.c), NULL when the decision has none */
    vsr__replay_t *rp;
    int rp_ended;               /* the record has the answer's end */
    vsr_slice_t rq_method, rq_path; /* the client's, for the record */
    vsr_slice_t rq_body;
    /* the tool plugins' similarities (tools_start), asked before the plugins run */
    const vsr_decision_conf_t *p_decision;
    int ts_asked;
    vsr_tool_scores_t ts;
    int32_t *ts_map;                /* input k+1 of the embed task: >= 0 a request tool, < 0 db tool -(i+1) */
    size_t ts_inputs;
    uint64_t ts_deadline;
    /* router_dc (dc_start): the query's cosine with each candidate's
     * description; the cards whose embedding the task asks for */
    int dc_asked;
    vsr__select_aux_t dc;
    double *dc_cos;
    unsigned char *dc_has;
    int32_t *dc_cards;              /* input k+1 of the embed task: that card's description */
    size_t dc_inputs;
    uint64_t dc_deadline;
    /* what the body phase goes on with once the cache has missed */
    const vsr_model_conf_t *d_model;
    const char *d_lora;
    int d_graph;
    /* the memory plugin (memory_start): the user's key, the query's
     * embedding, the set read and the memories handed to the plugin, and
     * whether the answer is kept as a memory */
    const vsr_plugin_memory_conf_t *mem;
    char mem_key[80];
    float *mem_vec;
    vsr_cache_query_t mem_q;
    vsr_memory_set_t mem_set;
    vsr_memory_hits_t mem_hits;
    int mem_search, mem_store;
    size_t mem_injected;
    const char *mem_state;          /* x-vsr-memory: used, missing, skipped[:why], unavailable */
    vsr_slice_t mem_query;          /* what is embedded and searched: the user turn, or its rewrite */
    uint64_t mem_rw_deadline;       /* the rewrite's answer is read only before it */
    /* response_jailbreak: the answer's scan (resp_guard.c; the wait is port_wait's) */
    vsr__rguard_t *rg;                /* response_jailbreak's state, from the session's pool (the session is one block) */
    /* hallucination: the answer's check (hcheck.c; the wait is port_wait's, kind 3) */
    vsr__hcheck_t *hc;             /* hallucination check (heap: made by hc_begin for a decision with the plugin) */
    vsr_slice_t hc_chat;            /* the answer's chat-side bytes while the detector runs */
    /* the rag plugin's retrieval (rag_retrieve.c; the wait is port_wait's, kind 4), asked before the plugins run */
    int rag_asked;
    vsr_rag_result_t rag_res;
    vsr__rag_vars_t rag_vars;
    vsr_slice_t rag_context;        /* what the plugin injected (pool): the hallucination check's grounding */
};

/* Bytes of one answer kept for the response cache (a longer one is not stored). */
#define RC_MAX_VALUE (4u << 20)

static void rc_resume(vsr_session_t *s, const vsr_effect_t *eff);
static const vsr_effect_t *body_out(vsr_session_t *s);
static vsr_slice_t answer_for_responses(vsr_session_t *s, int *status, vsr_slice_t *content_type, vsr_slice_t body);

static int anthropic_model(const vsr_model_conf_t *m)
{
    return m && m->messages_api;
}

/* ---- small helpers ---- */

static const vsr_header_t *find_header(const vsr_header_t *h, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (vsr_slice_case_eq_cstr(h[i].name, name))
            return &h[i];
    return NULL;
}

/* vsr_plugin_ctx_t.request_header: the session's request headers. */
static int plugin_request_header(void *ud, const char *name, vsr_slice_t *value)
{
    const vsr_session_t *s = ud;
    const vsr_header_t *h = find_header(s->headers, s->n_headers, name);
    if (h == NULL)
        return 0;
    *value = h->value;
    return 1;
}

static vsr_slice_t pool_printf(vsr_pool_t *pool, const char *fmt, ...) VSR_PRINTF(2, 3);
static vsr_slice_t pool_printf(vsr_pool_t *pool, const char *fmt, ...)
{
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
    va_end(ap);
    if (n < 0)
        n = 0;
    if ((size_t)n >= sizeof(tmp))
        n = sizeof(tmp) - 1;
    return vsr_pool_dup_slice(pool, vsr_slice(tmp, (size_t)n));
}

/* A number in the pool, without printf (vsr_fmt_u64). */
static vsr_slice_t pool_u64(vsr_pool_t *pool, uint64_t v, unsigned frac)
{
    char tmp[VSR_U64_DIGITS];
    return vsr_pool_dup_slice(pool, vsr_slice(tmp, vsr_fmt_u64(tmp, v, frac)));
}

static vsr_slice_t pool_fixed4(vsr_pool_t *pool, double v)
{
    char tmp[VSR_U64_DIGITS];
    return vsr_pool_dup_slice(pool, vsr_slice(tmp, vsr_fmt_fixed4(tmp, v)));
}

typedef struct {
    vsr_header_t *v;
    size_t n, cap;
} hlist_t;

static void hl_add(vsr_pool_t *pool, hlist_t *l, vsr_slice_t name, vsr_slice_t value)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 8;
        vsr_header_t *v = vsr_pool_alloc(pool, sizeof(*v) * cap);
        if (l->n)
            memcpy(v, l->v, sizeof(*v) * l->n);
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n].name = name;
    l->v[l->n].value = value;
    l->n++;
}

typedef struct {
    vsr_slice_t *v;
    size_t n, cap;
} slist_t;

static void sl_add(vsr_pool_t *pool, slist_t *l, vsr_slice_t s)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 8;
        vsr_slice_t *v = vsr_pool_alloc(pool, sizeof(*v) * cap);
        if (l->n)
            memcpy(v, l->v, sizeof(*v) * l->n);
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = s;
}

static void reset_effect(vsr_session_t *s)
{
    memset(&s->eff, 0, sizeof(s->eff));
}

/* ---- one wait on a port of the response cache or the Responses store ----
 * (rc_waiting: 1 the runtime's embedding, 2 the store, 3 a model call
 * (the hallucination detector), 4 the rag plugin's retrieval).  A port may answer
 * before its call returns; either way the phase goes on with `then`. */
static void port_wait_begin(vsr_session_t *s, int kind, const vsr_effect_t *(*then)(vsr_session_t *s))
{
    s->rc_waiting = kind;
    s->rc_then = then;
    s->rc_calling = 1;
    s->rc_answered = 0;
}

/* The port call has returned with `handle`: the pending effect while it
 * waits, else what `then` gives. */
static const vsr_effect_t *port_wait_end(vsr_session_t *s, void *handle)
{
    s->rc_calling = 0;
    if (s->rc_answered)
        return s->rc_then(s);
    s->rc_handle = handle;
    s->pending = 1;
    reset_effect(s);
    s->eff.pending = 1;
    return &s->eff;
}

/* The port has answered (its result recorded): the phase goes on now,
 * unless the call is still on the stack (port_wait_end goes on then). */
static void port_wait_done(vsr_session_t *s)
{
    s->rc_handle = NULL;
    s->rc_waiting = 0;
    s->rc_answered = 1;
    if (s->rc_calling)
        return;
    s->pending = 0;
    rc_resume(s, s->rc_then(s));
}

/* A store lookup's answer (a stored value is copied into the pool). */
static void store_done(void *ud, int status, vsr_slice_t value, double similarity)
{
    vsr_session_t *s = ud;
    s->rc_status = status;
    if (status == VSR_OK) {
        s->rc_value = vsr_pool_dup_slice(&s->pool, value);
        s->rc_similarity = similarity;
    }
    port_wait_done(s);
}

static vsr_slice_t keep_buf(vsr_session_t *s, const vsr_buf_t *b)
{
    return vsr_pool_dup_slice(&s->pool, vsr_buf_slice(b));
}

/* A router-made answer (an error, fast_response, a request graph's answer:
 * all in OpenAI's shapes) in Anthropic's shape, for a Messages client. */
static vsr_slice_t answer_for_messages(vsr_session_t *s, int *status, vsr_slice_t *content_type, vsr_slice_t body)
{
    vsr_buf_t b;
    vsr_buf_init(&b, XLATE_MAX_OUT);
    int rc = VSR_OK;
    vsr_anthropic_error_t err;
    if (*status >= 400) {
        rc = vsr_anthropic_error_from_chat(*status, body.p, body.len, &b);
    } else if (vsr_slice_starts_with(*content_type, VSR_SLICE_LIT("text/event-stream"))) {
        vsr_anthropic_stream_t st;
        vsr_anthropic_stream_init(&st, VSR_ANTHROPIC_TO_MESSAGES, NULL, 0, 0);
        rc = vsr_anthropic_stream_feed(&st, body.p, body.len, &b);
        if (rc == VSR_OK)
            rc = vsr_anthropic_stream_finish(&st, &b);
        vsr_anthropic_stream_free(&st);
        rc = VSR_OK; /* a failed stream has its error event written */
    } else {
        rc = vsr_anthropic_response_from_chat(body.p, body.len, NULL, &b, &err);
    }
    if (rc != VSR_OK) {
        vsr_buf_reset(&b);
        *status = 502;
        *content_type = VSR_SLICE_LIT("application/json");
        vsr_anthropic_error_body(&b, "api_error", VSR_SLICE_LIT("the router's answer could not be written as a message"));
    }
    vsr_slice_t out = keep_buf(s, &b);
    vsr_buf_free(&b);
    return out;
}

/* ---- router_replay hooks (resp_replay.c keeps the record) ---- */

static void replay_begin(vsr_session_t *s, const vsr_decision_conf_t *d)
{
    const vsr_plugin_router_replay_conf_t *c = vsr__replay_conf(s->e->cfg, d);
    if (c == NULL || s->rp || s->opts.ports == NULL || s->opts.ports->replay_store == NULL)
        return;
    const vsr_header_t *rid = find_header(s->headers, s->n_headers, "x-request-id");
    vsr_slice_t id = s->opts.request_id.len ? s->opts.request_id : rid ? rid->value : VSR_SLICE_NULL;
    s->rp = vsr__replay_begin(&s->pool, c, s->rq_method, s->rq_path, id, s->name, s->rq_body);
}

static void replay_write(vsr_session_t *s)
{
    if (s->rp)
        vsr__replay_write(s->rp, &s->ev, s->has_json ? &s->json : NULL, vsr_now_us_exact() - s->t0, s->opts.ports,
                          s->opts.ports_ud);
}

static void replay_immediate(vsr_session_t *s, hlist_t *h, int status, vsr_slice_t ctype, vsr_slice_t body,
                             vsr_response_path_t path)
{
    hl_add(&s->pool, h, VSR_SLICE_LIT("x-vsr-replay-id"), vsr_slice_cstr(vsr__replay_id(s->rp)));
    vsr__replay_response(s->rp, status, vsr_slice_starts_with(ctype, VSR_SLICE_LIT("text/event-stream")));
    vsr__replay_feed(s->rp, body.p, body.len);
    vsr__replay_end(s->rp, status, path, 0);
    replay_write(s);
}

/* An immediate answer with a JSON body and the router's headers. */
static const vsr_effect_t *immediate(vsr_session_t *s, int status, vsr_slice_t content_type, vsr_slice_t body,
                                     vsr_response_path_t path, const vsr_header_t *extra, size_t n_extra)
{
    if (s->anthropic_in && !(s->count_tokens && status < 400)) /* a count is no message */
        body = answer_for_messages(s, &status, &content_type, body);
    else if (s->responses_in)
        body = answer_for_responses(s, &status, &content_type, body);
    hlist_t h = {0};
    hl_add(&s->pool, &h, VSR_SLICE_LIT("content-type"), content_type);
    hl_add(&s->pool, &h, VSR_SLICE_LIT("x-vsr-schema-version"), VSR_SLICE_LIT("2"));
    static const char *paths[] = {"", "upstream", "fast_response", "error", "looper", "cache"};
    if (path != VSR_PATH_NONE)
        hl_add(&s->pool, &h, VSR_SLICE_LIT("x-vsr-response-path"), vsr_slice_cstr(paths[path]));
    hl_add(&s->pool, &h, VSR_SLICE_LIT("x-vsr-config-version"),
           pool_printf(&s->pool, "%llu", (unsigned long long)s->e->version));
    for (size_t i = 0; i < n_extra; i++)
        hl_add(&s->pool, &h, extra[i].name, extra[i].value);
    if (s->rp)
        replay_immediate(s, &h, status, content_type, body, path);
    reset_effect(s);
    s->eff.status = status;
    s->eff.resp_headers = h.v;
    s->eff.n_resp_headers = h.n;
    s->eff.resp_body = body;
    s->ev.path = path;
    s->plan.kind = VSR_PLAN_IMMEDIATE;
    s->answered = 1;
    return &s->eff;
}

/* {"error":{"message":M,"type":T,"code":C}}: C is `code` when given, else null
 * (OpenAI's convention: a string or null). */
static const vsr_effect_t *error_reply(vsr_session_t *s, int status, const char *type, const char *code,
                                       vsr_slice_t msg)
{
    vsr_buf_t b;
    vsr_buf_init(&b, 0);
    vsr_json_error_body(&b, msg, type, code);
    vsr_slice_t body = vsr_pool_dup_slice(&s->pool, vsr_buf_slice(&b));
    vsr_buf_free(&b);
    return immediate(s, status, VSR_SLICE_LIT("application/json"), body, VSR_PATH_ERROR, NULL, 0);
}

/* pre + the client's string, cleaned and bounded (vsr_json_append_client_text) + post */
static vsr_slice_t quote_msg(vsr_session_t *s, const char *pre, vsr_slice_t text, const char *post)
{
    vsr_buf_t b;
    vsr_buf_init(&b, 0);
    vsr_buf_append_cstr(&b, pre);
    vsr_json_append_client_text(&b, text, VSR_JSON_QUOTE_MAX);
    vsr_buf_append_cstr(&b, post);
    vsr_slice_t m = vsr_pool_dup_slice(&s->pool, vsr_buf_slice(&b));
    vsr_buf_free(&b);
    return m;
}

/* A model without backend_refs (gateway-routed in the reference) has nothing to call standalone. */
static const vsr_effect_t *no_backends(vsr_session_t *s, const vsr_model_conf_t *m)
{
    s->ev.selected_model = m->name;
    return error_reply(s, 503, "server_error", "no_backends",
                       pool_printf(&s->pool, "model \"%.200s\" has no backends: providers.models[].backend_refs is "
                                             "empty, so there is no endpoint to send the request to", m->name));
}

/* A model no route, entrypoint or provider model knows: 400 with the code
 * OpenAI gives it, so a client can tell it from other bad requests (on
 * /v1/messages, Anthropic's shape: invalid_request_error, which has no code). */
static const vsr_effect_t *unknown_model(vsr_session_t *s, vsr_slice_t name)
{
    return error_reply(s, 400, "invalid_request_error", "model_not_found",
                       quote_msg(s, "model \"", name, "\" is not available"));
}

static const vsr_effect_t *bad_request(vsr_session_t *s, const char *msg)
{
    return error_reply(s, 400, "invalid_request_error", NULL, vsr_slice_cstr(msg));
}

/* ---- session lifecycle ---- */

vsr_session_t *vsr_session_open(vsr_engine_t *e, const vsr_session_opts_t *opts)
{
    _Static_assert(sizeof(vsr_session_t) <= VSR_BLOCK_MAX, "a session is one block");
    vsr_session_t *s = vsr_block_calloc(sizeof(*s));
    s->e = vsr_engine_ref(e);
    vsr_pool_init(&s->pool);
    if (opts)
        s->opts = *opts;
    VSR_BUG_ON(s->opts.owner.len > VSR_SESSION_MAX_OWNER); /* the adapter's name, never a client's bytes */
    vsr_json_edits_init(&s->edits);
    vsr_buf_init(&s->in_body, XLATE_MAX_OUT);
    vsr_buf_init(&s->up_body, XLATE_MAX_OUT);
    vsr_buf_init(&s->ev_hold, EV_HOLD_MAX);
    vsr_buf_init(&s->scratch, XLATE_MAX_OUT);
    vsr_buf_init(&s->acc, XLATE_MAX_BODY);
    vsr_buf_init(&s->out, XLATE_MAX_OUT);
    vsr_buf_init(&s->mid, XLATE_MAX_OUT);
    vsr_buf_init(&s->rc_acc, RC_MAX_VALUE);
    vsr_buf_init(&s->r_items, VSR_RESPONSES_MAX_OUTPUT);
    vsr_buf_init(&s->r_conv, VSR_RESPONSES_MAX_OUTPUT);
    vsr_buf_init(&s->r_echo, VSR_RESPONSES_MAX_OUTPUT);
    vsr_buf_init(&s->r_prior, VSR_RESPONSES_MAX_OUTPUT);
    s->rg = vsr_pool_alloc(&s->pool, sizeof(*s->rg));
    memset(s->rg, 0, sizeof(*s->rg));
    vsr__rg_init(s->rg);
    s->ev.cache_hit = -1;
    return s;
}

int vsr_session_pending(const vsr_session_t *s)
{
    return s->pending;
}

void vsr_session_cancel(vsr_session_t *s)
{
    if (s->rc_waiting && s->rc_handle) {
        if (s->rc_waiting == 1 && s->opts.ports->runtime_cancel)
            s->opts.ports->runtime_cancel(s->opts.ports_ud, s->rc_handle);
        else if (s->rc_waiting == 2 && s->opts.ports->cache_cancel)
            s->opts.ports->cache_cancel(s->opts.ports_ud, s->rc_handle);
        else if (s->rc_waiting == 3 && s->opts.ports->model_cancel)
            s->opts.ports->model_cancel(s->opts.ports_ud, s->rc_handle);
        else if (s->rc_waiting == 4)
            vsr__rag_cancel(s->rc_handle);
        s->rc_handle = NULL;
    }
    if (s->rc_waiting) {
        s->rc_waiting = 0;
        s->pending = 0;
    }
    if (s->pending && !s->graph)
        vsr__route_cancel(&s->rc);
    vsr_graph_cancel(s->graph); /* every hop in flight */
    s->pending = 0;
}

void vsr_session_finish(vsr_session_t *s)
{
    if (s == NULL)
        return;
    vsr_session_cancel(s);
    replay_write(s); /* an answer that never ended (the client left, a stream cut short) */
    vsr__replay_free(s->rp);
    if (s->has_json)
        vsr_json_free(&s->json);
    vsr_json_edits_free(&s->edits);
    if (s->sx_open)
        vsr_anthropic_stream_free(s->sx);
    if (s->cs_open)
        vsr_completions_stream_free(s->cs);
    vsr_buf_free(&s->in_body);
    vsr_buf_free(&s->up_body);
    vsr_buf_free(&s->ev_hold);
    vsr_buf_free(&s->scratch);
    vsr_buf_free(&s->acc);
    vsr_buf_free(&s->out);
    vsr_buf_free(&s->mid);
    vsr_buf_free(&s->rc_acc);
    if (s->rs_open)
        vsr_responses_stream_free(s->rs);
    vsr_buf_free(&s->r_items);
    vsr_buf_free(&s->r_conv);
    vsr_buf_free(&s->r_echo);
    vsr_buf_free(&s->r_prior);
    vsr__rg_free(s->rg);
    vsr_free(s->hc);
    vsr_pool_free(&s->pool);
    vsr_engine_unref(s->e);
    vsr_block_free(s);
}

const vsr_plan_t *vsr_session_plan(const vsr_session_t *s)
{
    return &s->plan;
}

const vsr_evidence_t *vsr_session_evidence(const vsr_session_t *s)
{
    return &s->ev;
}

/* ---- /v1/models (ref §4.1) ---- */

static int listed(const vsr_listener_conf_t *l, const char *name)
{
    if (l == NULL || l->models.n == 0)
        return 1;
    for (size_t i = 0; i < l->models.n; i++)
        if (strcmp(l->models.items[i], name) == 0)
            return 1;
    return 0;
}

/* One /v1/models entry.  created: when the list is built (the reference's
 * listing has no stored creation time); default_route and selectable are
 * written only when true, as the reference omits false ones: a passthrough
 * model is not a name the router selects for. */
static void model_entry(vsr_buf_t *b, int *first, uint64_t created, const char *id, const char *owner,
                        const char *description, const char *resolution, int selectable, int default_route,
                        const char *recipe)
{
    vsr_buf_append_cstr(b, *first ? "{\"id\":" : ",{\"id\":");
    *first = 0;
    vsr_buf_append_json_string(b, vsr_slice_cstr(id));
    vsr_buf_printf(b, ",\"object\":\"model\",\"created\":%llu,\"owned_by\":\"%s\"", (unsigned long long)created,
                   owner);
    if (description) {
        vsr_buf_append_cstr(b, ",\"description\":");
        vsr_buf_append_json_string(b, vsr_slice_cstr(description));
    }
    vsr_buf_printf(b, ",\"routing\":{\"resolution\":\"%s\"", resolution);
    if (selectable)
        vsr_buf_append_cstr(b, ",\"selectable\":true");
    if (default_route)
        vsr_buf_append_cstr(b, ",\"default_route\":true");
    if (recipe) {
        vsr_buf_append_cstr(b, ",\"recipe\":");
        vsr_buf_append_json_string(b, vsr_slice_cstr(recipe));
    }
    vsr_buf_append_cstr(b, "}}");
}

/* The entries of /v1/models, in the reference's order, into b: every one,
 * or with `only` (not NULL) just the entry of that id.  Returns how many. */
static size_t model_entries(vsr_session_t *s, vsr_buf_t *b, const vsr_slice_t *only)
{
    const vsr_config_t *cfg = s->e->cfg;
    const vsr_listener_conf_t *l = s->opts.listener;
    const vsr_model_conf_t *def = vsr_config_default_model(cfg);
    uint64_t now = (uint64_t)time(NULL);
    int first = 1;
    size_t n = 0;
#define WANT(id) (listed(l, (id)) && (only == NULL || vsr_slice_eq_cstr(*only, (id))))
    for (size_t i = 0; i < cfg->auto_model_names.n; i++)
        if (WANT(cfg->auto_model_names.items[i]) && ++n)
            model_entry(b, &first, now, cfg->auto_model_names.items[i], "vllm-semantic-router",
                        "Intelligent Router for Mixture-of-Models", "virtual", 1, 1, "default");
    for (size_t i = 0; i < cfg->n_entrypoints; i++) {
        const vsr_entrypoint_conf_t *ep = &cfg->entrypoints[i];
        const vsr_recipe_conf_t *r = ep->resolved;
        for (size_t k = 0; k < ep->model_names.n; k++)
            if (WANT(ep->model_names.items[k]) && ++n)
                model_entry(b, &first, now, ep->model_names.items[k], "vllm-semantic-router",
                            r && r->description ? r->description : NULL, "virtual", 1, 0, ep->recipe);
    }
    if (cfg->include_config_models_in_list) {
        for (size_t i = 0; i < cfg->n_models; i++)
            if (WANT(cfg->models[i].name) && ++n)
                model_entry(b, &first, now, cfg->models[i].name, "upstream-endpoint", NULL, "passthrough", 0,
                            &cfg->models[i] == def, NULL);
    }
#undef WANT
    return n;
}

static const vsr_effect_t *models_list(vsr_session_t *s)
{
    vsr_buf_t b;
    vsr_buf_init(&b, 0);
    vsr_buf_append_cstr(&b, "{\"object\":\"list\",\"data\":[");
    model_entries(s, &b, NULL);
    vsr_buf_append_cstr(&b, "]}");
    vsr_slice_t body = vsr_pool_dup_slice(&s->pool, vsr_buf_slice(&b));
    vsr_buf_free(&b);
    return immediate(s, 200, VSR_SLICE_LIT("application/json"), body, VSR_PATH_NONE, NULL, 0);
}

static int hexval(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* GET /v1/models/{id} (the OpenAI SDK's models.retrieve): the list's entry
 * for id (percent-decoded; ids such as vllm-sr/auto hold a slash, sent raw
 * or as %2F), or OpenAI's 404. */
static const vsr_effect_t *model_retrieve(vsr_session_t *s, vsr_slice_t raw)
{
    char *id = vsr_pool_alloc(&s->pool, raw.len + 1);
    size_t n = 0;
    for (size_t i = 0; i < raw.len; i++) {
        int hi, lo;
        if (raw.p[i] == '%' && i + 2 < raw.len && (hi = hexval(raw.p[i + 1])) >= 0 &&
            (lo = hexval(raw.p[i + 2])) >= 0) {
            id[n++] = (char)(hi << 4 | lo);
            i += 2;
        } else {
            id[n++] = raw.p[i];
        }
    }
    vsr_slice_t want = vsr_slice(id, n);
    vsr_buf_t b;
    vsr_buf_init(&b, 0);
    size_t found = model_entries(s, &b, &want);
    if (found == 0 || memchr(id, '\0', n) != NULL) {
        vsr_buf_reset(&b);
        vsr_buf_append_cstr(&b, "{\"error\":{\"message\":");
        vsr_buf_append_json_string(&b, quote_msg(s, "The model '", vsr_slice(id, n), "' does not exist"));
        vsr_buf_append_cstr(&b, ",\"type\":\"invalid_request_error\",\"param\":\"model\",\"code\":\"model_not_found\"}}");
        vsr_slice_t body = vsr_pool_dup_slice(&s->pool, vsr_buf_slice(&b));
        vsr_buf_free(&b);
        return immediate(s, 404, VSR_SLICE_LIT("application/json"), body, VSR_PATH_ERROR, NULL, 0);
    }
    /* one id is one entry (names are unique across kinds) */
    vsr_slice_t body = vsr_pool_dup_slice(&s->pool, vsr_buf_slice(&b));
    vsr_buf_free(&b);
    return immediate(s, 200, VSR_SLICE_LIT("application/json"), body, VSR_PATH_NONE, NULL, 0);
}

/* ---- request headers ---- */

static const struct {
    const char *path;
    const char *method;
    endpoint_t ep;
} endpoints[] = {
    {"/v1/chat/completions", "POST", EP_CHAT},
    {"/v1/completions", "POST", EP_COMPLETIONS},
    {"/v1/responses", "POST", EP_RESPONSES},
    {"/v1/messages", "POST", EP_MESSAGES}, /* Anthropic's Messages API, served as chat */
    {"/v1/messages/count_tokens", "POST", EP_COUNT_TOKENS},
    {"/v1/models", "GET", EP_MODELS},
    /* JSON bodies with a `model`, as OpenAI and vLLM serve them */
    {"/v1/embeddings", "POST", EP_SURFACE},
    {"/v1/moderations", "POST", EP_SURFACE},
    {"/v1/images/generations", "POST", EP_SURFACE},
    {"/v1/audio/speech", "POST", EP_SURFACE},
    {"/v1/rerank", "POST", EP_SURFACE},
    {"/v1/score", "POST", EP_SURFACE},
    {"/v1/classify", "POST", EP_SURFACE},
    {"/v1/pooling", "POST", EP_SURFACE},
    {"/v1/tokenize", "POST", EP_SURFACE},
    {"/v1/detokenize", "POST", EP_SURFACE},
};

static const vsr_effect_t *stored_response_headers(vsr_session_t *s, vsr_slice_t method, vsr_slice_t rest);

const vsr_effect_t *vsr_session_request_headers(vsr_session_t *s, vsr_slice_t method, vsr_slice_t target,
                                                const vsr_header_t *headers, size_t n_headers)
{
    reset_effect(s);
    s->headers = headers;
    s->n_headers = n_headers;
    s->rq_method = vsr_pool_dup_slice(&s->pool, method);
    s->rq_path = vsr_pool_dup_slice(&s->pool, vsr_slice_split(target, '?', NULL));
    const vsr_header_t *dbg = find_header(headers, n_headers, "x-vsr-debug");
    s->ev.debug = dbg && vsr_slice_case_eq_cstr(vsr_slice_trim(dbg->value), "true");

    vsr_slice_t path = vsr_slice_split(target, '?', NULL);
    while (path.len > 1 && path.p[path.len - 1] == '/')
        path.len--; /* a trailing slash and the query do not take part in matching */
    if (!(vsr_slice_eq_cstr(path, "/v1") || vsr_slice_starts_with(path, VSR_SLICE_LIT("/v1/")))) {
        /* paths are case-sensitive (RFC 3986 §6.2.2.1): "/V1/..." or "/v1;x/..." is no API path, yet a
         * backend that folds case or drops path parameters would serve it as one, with a model nobody
         * checked.  Such a first segment is answered here and never passed through. */
        vsr_slice_t first = path.len > 1 ? vsr_slice_split(vsr_slice(path.p + 1, path.len - 1), '/', NULL)
                                         : VSR_SLICE_NULL;
        if (vsr_slice_case_eq_cstr(vsr_slice_split(first, ';', NULL), "v1"))
            return error_reply(s, 404, "invalid_request_error", NULL, VSR_SLICE_LIT("endpoint not found"));
        /* Envoy's default route: the default model's backend, request untouched */
        s->default_route = 1;
        s->plan.kind = VSR_PLAN_CALL;
        s->plan.model = vsr_config_default_model(s->e->cfg);
        if (s->plan.model == NULL)
            return error_reply(s, 404, "invalid_request_error", NULL, VSR_SLICE_LIT("endpoint not found"));
        if (s->plan.model->n_backends == 0)
            return no_backends(s, s->plan.model);
        s->plan.route_key = vsr_slice_cstr(s->plan.model->name);
        return &s->eff;
    }
    if (vsr_slice_starts_with(path, VSR_SLICE_LIT("/v1/models/")) && path.len > 11) {
        int is_head = vsr_slice_eq_cstr(method, "HEAD");
        if (!vsr_slice_eq_cstr(method, "GET") && !is_head) {
            vsr_header_t allow = {VSR_SLICE_LIT("allow"), VSR_SLICE_LIT("GET")};
            vsr_slice_t body = VSR_SLICE_LIT(
                "{\"error\":{\"message\":\"method not allowed\",\"type\":\"invalid_request_error\",\"code\":405}}");
            return immediate(s, 405, VSR_SLICE_LIT("application/json"), body, VSR_PATH_ERROR, &allow, 1);
        }
        s->ep = EP_MODELS;
        return model_retrieve(s, vsr_slice(path.p + 11, path.len - 11));
    }
    if (s->e->cfg->response_api_enabled && vsr_slice_starts_with(path, VSR_SLICE_LIT("/v1/responses/")) &&
        path.len > 14)
        return stored_response_headers(s, method, vsr_slice(path.p + 14, path.len - 14));
    for (size_t i = 0; i < VSR_ARRAY_LEN(endpoints); i++) {
        if (!vsr_slice_eq_cstr(path, endpoints[i].path))
            continue;
        if (endpoints[i].ep == EP_RESPONSES && !s->e->cfg->response_api_enabled)
            break; /* the Responses API is served only when enabled */
        s->anthropic_in = endpoints[i].ep == EP_MESSAGES || endpoints[i].ep == EP_COUNT_TOKENS; /* errors too */
        s->count_tokens = endpoints[i].ep == EP_COUNT_TOKENS;
        s->responses_in = endpoints[i].ep == EP_RESPONSES;
        int is_head = vsr_slice_eq_cstr(method, "HEAD");
        if (!vsr_slice_eq_cstr(method, endpoints[i].method) && !(is_head && endpoints[i].ep == EP_MODELS)) {
            vsr_header_t allow = {VSR_SLICE_LIT("allow"), vsr_slice_cstr(endpoints[i].method)};
            vsr_slice_t body = VSR_SLICE_LIT(
                "{\"error\":{\"message\":\"method not allowed\",\"type\":\"invalid_request_error\",\"code\":null}}");
            return immediate(s, 405, VSR_SLICE_LIT("application/json"), body, VSR_PATH_ERROR, &allow, 1);
        }
        s->ep = endpoints[i].ep == EP_MESSAGES || endpoints[i].ep == EP_COUNT_TOKENS ? EP_CHAT : endpoints[i].ep;
        if (s->ep == EP_MODELS)
            return models_list(s);
        return &s->eff;
    }
    /* an Anthropic client reads Anthropic's error shape on every /v1/messages path */
    s->anthropic_in = vsr_slice_starts_with(path, VSR_SLICE_LIT("/v1/messages/"));
    return error_reply(s, 404, "invalid_request_error", NULL, VSR_SLICE_LIT("endpoint not found"));
}

/* ---- request body ---- */

static void identity(vsr_session_t *s, vsr_signal_input_t *in)
{
    vsr_slice_t user, g;
    if (!vsr_session_identity(s, &user, &g))
        return;
    in->identity_present = 1;
    in->user_id = user;
    if (g.len == 0)
        return;
    slist_t groups = {0};
    vsr_slice_t rest = g;
    while (rest.p) {
        vsr_slice_t one = vsr_slice_trim(vsr_slice_split(rest, ',', &rest));
        if (one.len)
            sl_add(&s->pool, &groups, one);
    }
    in->groups = groups.v;
    in->n_groups = groups.n;
}

int vsr_session_identity(const vsr_session_t *s, vsr_slice_t *user, vsr_slice_t *groups)
{
    *user = *groups = VSR_SLICE_NULL;
    if (!s->opts.identity_trusted)
        return 0;
    const vsr_config_t *cfg = s->e->cfg;
    const vsr_header_t *uid = find_header(s->headers, s->n_headers,
                                          cfg->authz_user_id_header ? cfg->authz_user_id_header : "x-authz-user-id");
    if (uid == NULL || vsr_slice_trim(uid->value).len == 0)
        return 0;
    *user = vsr_slice_trim(uid->value);
    const vsr_header_t *g = find_header(s->headers, s->n_headers,
                                        cfg->authz_user_groups_header ? cfg->authz_user_groups_header
                                                                      : "x-authz-user-groups");
    if (g)
        *groups = vsr_slice_trim(g->value);
    return 1;
}

static void note_signals(vsr_session_t *s, route_ctx_t *rc)
{
    recipe_state_t *rs = rc->rs;
    size_t n = vsr_signals_count(rs->signals);
    size_t n_out = vsr_projections_n_outputs(rs->proj);
    s->ev.family_times = vsr_pool_alloc(&s->pool, sizeof(vsr_family_time_t) * VSR_EVIDENCE_MAX_FAMILIES);
    s->ev.n_family_times = vsr__route_family_times(rc, s->ev.family_times, VSR_EVIDENCE_MAX_FAMILIES);
    s->ev.runtime_start_us = rc->rt_start_us;
    s->ev.runtime_end_us = rc->rt_end_us ? rc->rt_end_us : (rc->rt_start_us ? vsr_now_us_exact() : 0);
    s->ev.runtime_tasks = rc->rt_tasks;
    s->ev.runtime_status = rc->rt_status;
    s->ev.chat_tasks = rc->n_chat;
    s->ev.remote_ok = rc->remote_ok;
    s->ev.remote_failed = rc->remote_failed;
    s->ev.remote_invalid = rc->remote_invalid;
    s->ev.signals = vsr_pool_alloc(&s->pool, sizeof(vsr_signal_hit_t) * (n + n_out + 1));
    for (size_t i = 0; i < n; i++) {
        if (!rc->memo_done[i] || !rc->memo[i].matched)
            continue;
        vsr_signal_hit_t *h = &s->ev.signals[s->ev.n_signals++];
        h->family = vsr_signals_family(rs->signals, (int)i);
        h->name = vsr_signals_report_name(rs->signals, (int)i);
        h->confidence = rc->memo[i].confidence;
        h->value = rc->memo[i].value;
    }
    /* matched projection outputs the decisions computed: x-vsr-matched-projections */
    for (size_t o = 0; rc->proj.out_done && o < n_out; o++) {
        if (!rc->proj.out_done[o] || !rc->proj.out[o].matched)
            continue;
        vsr_signal_hit_t *h = &s->ev.signals[s->ev.n_signals++];
        h->family = "projections";
        h->name = vsr_projections_output_name(rs->proj, (int)o);
        h->confidence = rc->proj.out[o].confidence;
        h->value = rc->proj.out[o].confidence;
    }
}

static int aim(vsr_session_t *s, const vsr_model_conf_t *model, const char *lora);
static const vsr_effect_t *cache_start(vsr_session_t *s);
static const vsr_effect_t *dispatch(vsr_session_t *s);
static const vsr_effect_t *untranslatable(vsr_session_t *s, const vsr_model_conf_t *m);
static const vsr_effect_t *start_graph(vsr_session_t *s);
static void route_resumed(route_ctx_t *rc);
static const vsr_effect_t *body_decided(vsr_session_t *s);
static const vsr_effect_t *body_select(vsr_session_t *s);
static const vsr_effect_t *count_tokens(vsr_session_t *s, const vsr_recipe_conf_t *recipe,
                                        const vsr_decision_conf_t *decision, const vsr_model_conf_t *model,
                                        const char *lora);
static const vsr_effect_t *body_plugins(vsr_session_t *s);
static const vsr_effect_t *rag_then_plugins(vsr_session_t *s);
static const vsr_effect_t *tools_start(vsr_session_t *s);
static const vsr_effect_t *memory_then_plugins(vsr_session_t *s);
static const vsr_effect_t *surface_body(vsr_session_t *s, vsr_slice_t name, uint32_t mt, const char *body,
                                        size_t len, uint64_t t0);
static const vsr_effect_t *chat_body(vsr_session_t *s, const char *body, size_t len, uint64_t t0);
static const vsr_effect_t *stored_response_fetch(vsr_session_t *s);
static const vsr_effect_t *previous_fetch(vsr_session_t *s);
static const vsr_effect_t *responses_translate(vsr_session_t *s, const char *body, size_t len);
static const vsr_effect_t *responses_error(vsr_session_t *s, const vsr_responses_error_t *err);

/* ---- the Responses API (POST /v1/responses, its stored objects) ---- */

static const vsr_effect_t *responses_error(vsr_session_t *s, const vsr_responses_error_t *err)
{
    vsr_buf_t b;
    vsr_buf_init(&b, 0);
    vsr_responses_error_body(&b, err);
    vsr_slice_t body = keep_buf(s, &b);
    vsr_buf_free(&b);
    return immediate(s, err->status, VSR_SLICE_LIT("application/json"), body, VSR_PATH_ERROR, NULL, 0);
}

static const vsr_effect_t *not_found_response(vsr_session_t *s)
{
    vsr_responses_error_t e = {.status = 404, .type = "invalid_request_error"};
    snprintf(e.message, sizeof(e.message), "Response with id '%s' not found.", s->resp_id);
    return responses_error(s, &e);
}

/* The store's key of response `id` for this request's owner: the shared
 * owner's "resp:<id>" (as before owners), another's "resp:<owner>:<id>".  An
 * id holds no ':', so no id of one owner names another's key. */
static vsr_slice_t resp_store_key(vsr_session_t *s, const char *id)
{
    vsr_slice_t o = s->opts.owner;
    if (o.len == 0)
        return pool_printf(&s->pool, "resp:%s", id);
    return pool_printf(&s->pool, "resp:%.*s:%s", (int)o.len, o.p, id);
}

/* /v1/responses/{id} (GET, DELETE) and /v1/responses/{id}/input_items (GET):
 * answered in the body phase, which may wait on the store. */
static const vsr_effect_t *stored_response_headers(vsr_session_t *s, vsr_slice_t method, vsr_slice_t rest)
{
    vsr_slice_t sub = VSR_SLICE_NULL;
    vsr_slice_t id = vsr_slice_split(rest, '/', &sub);
    int items = sub.p != NULL;
    int ok = id.len > 0 && id.len < 60 && (!items || vsr_slice_eq_cstr(sub, "input_items"));
    for (size_t i = 0; ok && i < id.len; i++) {
        char c = id.p[i];
        ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
    }
    if (!ok)
        return error_reply(s, 404, "invalid_request_error", NULL, VSR_SLICE_LIT("endpoint not found"));
    int get = vsr_slice_eq_cstr(method, "GET"), del = vsr_slice_eq_cstr(method, "DELETE");
    if (!get && !(del && !items)) {
        vsr_header_t allow = {VSR_SLICE_LIT("allow"), items ? VSR_SLICE_LIT("GET") : VSR_SLICE_LIT("GET, DELETE")};
        vsr_slice_t body = VSR_SLICE_LIT(
            "{\"error\":{\"message\":\"method not allowed\",\"type\":\"invalid_request_error\",\"code\":null}}");
        return immediate(s, 405, VSR_SLICE_LIT("application/json"), body, VSR_PATH_ERROR, &allow, 1);
    }
    memcpy(s->resp_id, id.p, id.len);
    s->resp_id[id.len] = '\0';
    s->resp_key = resp_store_key(s, s->resp_id);
    s->ep = items ? EP_RESP_ITEMS : del ? EP_RESP_DELETE : EP_RESP_GET;
    return &s->eff;
}

/* A stored record: {"owner":O,"response":R,"conv":C,"items":I}; the raw text
 * of member `name` when the record is this request's owner's.  A record
 * without "owner" (kept before owners were) is the shared owner's.  Another
 * owner's record is VSR_ERR_NOT_FOUND, as a missing one. */
static int record_member(vsr_session_t *s, vsr_slice_t rec, const char *name, vsr_slice_t *out)
{
    vsr_json_t j;
    uint32_t t, o;
    int rc = VSR_ERR_INVALID;
    if (vsr_json_parse(&j, rec.p, rec.len, NULL) == VSR_OK && vsr_json_type(&j, 0) == VSR_JSON_OBJECT) {
        vsr_slice_t owner = VSR_SLICE_NULL;
        if (vsr_json_object_get(&j, 0, "owner", &o) == VSR_OK &&
            (vsr_json_type(&j, o) != VSR_JSON_STRING || vsr_json_string(&j, o, &s->pool, &owner) != VSR_OK))
            owner = VSR_SLICE_LIT("-"); /* not an owner's name: nobody's */
        if (!vsr_slice_eq(owner, s->opts.owner))
            rc = VSR_ERR_NOT_FOUND;
        else if (vsr_json_object_get(&j, 0, name, &t) == VSR_OK) {
            *out = vsr_slice(rec.p + j.toks[t].start, j.toks[t].end - j.toks[t].start);
            rc = VSR_OK;
        }
    }
    vsr_json_free(&j);
    return rc;
}

static const vsr_effect_t *stored_answer(vsr_session_t *s)
{
    vsr_slice_t v;
    if (s->rc_status != VSR_OK ||
        record_member(s, s->rc_value, s->ep == EP_RESP_ITEMS ? "items" : "response", &v) != VSR_OK)
        return not_found_response(s); /* missing, or another owner's: the same answer */
    if (s->ep == EP_RESP_DELETE) {
        vsr_cache_query_t q = {.key = s->resp_key, .responses = 1};
        if (s->opts.ports->cache_delete)
            s->opts.ports->cache_delete(s->opts.ports_ud, &q);
        vsr_slice_t body = pool_printf(&s->pool, "{\"id\":\"%s\",\"object\":\"response\",\"deleted\":true}", s->resp_id);
        return immediate(s, 200, VSR_SLICE_LIT("application/json"), body, VSR_PATH_NONE, NULL, 0);
    }
    if (s->ep == EP_RESP_GET)
        return immediate(s, 200, VSR_SLICE_LIT("application/json"), v, VSR_PATH_NONE, NULL, 0);
    vsr_buf_t b;
    vsr_buf_init(&b, 0);
    vsr_buf_append_cstr(&b, "{\"object\":\"list\",\"data\":");
    vsr_buf_append_slice(&b, v);
    vsr_buf_append_cstr(&b, ",\"first_id\":null,\"last_id\":null,\"has_more\":false}");
    vsr_slice_t body = keep_buf(s, &b);
    vsr_buf_free(&b);
    return immediate(s, 200, VSR_SLICE_LIT("application/json"), body, VSR_PATH_NONE, NULL, 0);
}

/* A POST's previous response has been looked up: its conversation comes first. */
static const vsr_effect_t *previous_then(vsr_session_t *s)
{
    vsr_slice_t conv;
    if (s->rc_status != VSR_OK || record_member(s, s->rc_value, "conv", &conv) != VSR_OK) {
        vsr_responses_error_t e = {.status = 400, .type = "invalid_request_error"};
        snprintf(e.param, sizeof(e.param), "previous_response_id");
        snprintf(e.message, sizeof(e.message), "Previous response with id '%s' not found.",
                 s->rinfo.previous_response_id);
        return responses_error(s, &e);
    }
    vsr_buf_reset(&s->r_prior);
    vsr_buf_append_slice(&s->r_prior, conv);
    return responses_translate(s, s->r_body, s->r_len);
}

/* Looks `key` up in the Responses store, then goes on with `then`. */
static const vsr_effect_t *fetch(vsr_session_t *s, vsr_slice_t key, const vsr_effect_t *(*then)(vsr_session_t *s))
{
    const vsr_ports_t *ports = s->opts.ports;
    if (ports == NULL || ports->cache_lookup == NULL) {
        s->rc_status = VSR_ERR_NOT_FOUND; /* no store: nothing was kept */
        return then(s);
    }
    s->rc_q = (vsr_cache_query_t){.key = key, .exact = 1, .responses = 1};
    port_wait_begin(s, 2, then);
    return port_wait_end(s, ports->cache_lookup(s->opts.ports_ud, &s->rc_q, store_done, s));
}

static const vsr_effect_t *stored_response_fetch(vsr_session_t *s)
{
    return fetch(s, s->resp_key, stored_answer);
}

static const vsr_effect_t *previous_fetch(vsr_session_t *s)
{
    return fetch(s, resp_store_key(s, s->rinfo.previous_response_id), previous_then);
}

/* The POST's body (and the previous response's conversation) in chat form;
 * the request then goes on as chat. */
static const vsr_effect_t *responses_translate(vsr_session_t *s, const char *body, size_t len)
{
    vsr_responses_error_t err;
    vsr_responses_out_t out = {&s->in_body, &s->r_items, &s->r_conv, &s->r_echo};
    if (vsr_responses_request_to_chat(body ? body : "", len, s->r_prior.data, s->r_prior.len, NULL, &out, &err) !=
        VSR_OK)
        return responses_error(s, &err);
    char uuid[37];
    vsr_uuid4(uuid);
    size_t w = (size_t)snprintf(s->resp_id, sizeof(s->resp_id), "resp_");
    for (const char *p = uuid; *p && w + 1 < sizeof(s->resp_id); p++)
        if (*p != '-')
            s->resp_id[w++] = *p;
    s->resp_id[w] = '\0';
    s->resp_key = resp_store_key(s, s->resp_id);
    s->r_created = (uint64_t)time(NULL);
    s->ep = EP_CHAT;
    return chat_body(s, s->in_body.data, s->in_body.len, s->t0);
}

static vsr_responses_meta_t responses_meta(vsr_session_t *s)
{
    return (vsr_responses_meta_t){.id = vsr_slice_cstr(s->resp_id),
                                  .created_at = s->r_created,
                                  .model = s->ev.selected_model ? vsr_slice_cstr(s->ev.selected_model) : s->name,
                                  .echo = vsr_buf_slice(&s->r_echo),
                                  .conv = vsr_buf_slice(&s->r_conv)};
}

/* Keeps a finished Response under its id (store: true, the default). */
static void responses_keep(vsr_session_t *s, vsr_slice_t response, vsr_slice_t conv)
{
    const vsr_ports_t *ports = s->opts.ports;
    if (!s->rinfo.store || ports == NULL || ports->cache_store == NULL || response.len == 0)
        return;
    vsr_buf_t b;
    vsr_buf_init(&b, 0);
    vsr_buf_append_cstr(&b, "{\"owner\":");
    vsr_buf_append_json_string(&b, s->opts.owner);
    vsr_buf_append_cstr(&b, ",\"response\":");
    vsr_buf_append_slice(&b, response);
    vsr_buf_append_cstr(&b, ",\"conv\":");
    vsr_buf_append_slice(&b, conv.len ? conv : VSR_SLICE_LIT("[]"));
    vsr_buf_append_cstr(&b, ",\"items\":");
    vsr_buf_append_slice(&b, s->r_items.len ? vsr_buf_slice(&s->r_items) : VSR_SLICE_LIT("[]"));
    vsr_buf_append_cstr(&b, "}");
    if (s->rg->on && !s->rg->result) { /* stored once the scan lets it through */
        vsr_buf_reset(&s->rg->kept);
        vsr_buf_append_slice(&s->rg->kept, vsr_buf_slice(&b));
        s->rg->has_kept = 1;
        vsr_buf_free(&b);
        return;
    }
    vsr_cache_query_t q = {.key = s->resp_key, .exact = 1, .responses = 1,
                           .ttl_ms = s->e->cfg->resp_store.ttl_seconds * 1000};
    ports->cache_store(s->opts.ports_ud, &q, vsr_buf_slice(&b));
    vsr_buf_free(&b);
}

/* A router-made chat answer (fast_response, a cache hit, a graph's answer)
 * as a Response object or its event stream. */
static vsr_slice_t answer_for_responses(vsr_session_t *s, int *status, vsr_slice_t *content_type, vsr_slice_t body)
{
    if (*status >= 400)
        return body; /* the error shapes are OpenAI's either way */
    vsr_buf_t b, conv;
    vsr_buf_init(&b, XLATE_MAX_OUT);
    vsr_buf_init(&conv, XLATE_MAX_OUT);
    vsr_responses_meta_t meta = responses_meta(s);
    vsr_responses_error_t err;
    int rc = VSR_OK;
    if (vsr_slice_starts_with(*content_type, VSR_SLICE_LIT("text/event-stream"))) {
        vsr_responses_stream_t st;
        vsr_responses_stream_init(&st, &meta, NULL);
        vsr_responses_stream_feed(&st, body.p, body.len, &b);
        vsr_responses_stream_finish(&st, &b);
        responses_keep(s, vsr_buf_slice(&st.final), vsr_buf_slice(&st.conv));
        vsr_responses_stream_free(&st);
    } else {
        rc = vsr_responses_response_from_chat(body.p, body.len, &meta, NULL, &b, &conv, &err);
        if (rc == VSR_OK)
            responses_keep(s, vsr_buf_slice(&b), vsr_buf_slice(&conv));
    }
    if (rc != VSR_OK) {
        vsr_buf_reset(&b);
        *status = err.status ? err.status : 502;
        *content_type = VSR_SLICE_LIT("application/json");
        vsr_responses_error_body(&b, &err);
    }
    vsr_slice_t out = keep_buf(s, &b);
    vsr_buf_free(&b);
    vsr_buf_free(&conv);
    return out;
}

const vsr_effect_t *vsr_session_request_body(vsr_session_t *s, const char *body, size_t len)
{
    VSR_BUG_ON(s->pending);
    if (s->answered || s->default_route || s->ep == EP_NONE || s->ep == EP_MODELS) {
        reset_effect(s);
        return &s->eff;
    }
    uint64_t t0 = vsr_now_us_exact();
    reset_effect(s);
    s->rq_body = vsr_slice(body, len);

    if (s->ep == EP_RESP_GET || s->ep == EP_RESP_ITEMS || s->ep == EP_RESP_DELETE)
        return stored_response_fetch(s);
    if (s->responses_in) {
        vsr_responses_error_t rerr;
        if (vsr_responses_request_info(body ? body : "", len, NULL, &s->rinfo, &rerr) != VSR_OK)
            return responses_error(s, &rerr);
        s->t0 = t0;
        if (s->rinfo.previous_response_id[0]) { /* its conversation comes first */
            s->r_body = body;
            s->r_len = len;
            return previous_fetch(s);
        }
        return responses_translate(s, body, len);
    }
    return chat_body(s, body, len, t0);
}

/* The body phase of a chat request (a Messages or Responses one already in
 * chat form). */
static const vsr_effect_t *chat_body(vsr_session_t *s, const char *body, size_t len, uint64_t t0)
{
    const vsr_config_t *cfg = s->e->cfg;
    if (s->anthropic_in) {
        /* decoded once into a chat request; the rest of the phase reads that */
        vsr_anthropic_error_t aerr;
        vsr_anthropic_limits_t lim = {.count_tokens = s->count_tokens, .lenient = 1};
        int rc = vsr_anthropic_request_to_chat(body ? body : "", len, &lim, &s->in_body, &aerr);
        if (rc != VSR_OK)
            return error_reply(s, rc == VSR_ERR_TOO_BIG ? 413 : 400, "invalid_request_error", NULL,
                               vsr_slice_cstr(aerr.message));
        if (aerr.message[0]) /* a Messages model gets it all the same (aim) */
            s->no_chat_form = vsr_pool_strndup(&s->pool, aerr.message, strlen(aerr.message));
        body = s->in_body.data;
        len = s->in_body.len;
    }

    s->has_json = 1;
    if (vsr_json_parse(&s->json, body ? body : "", len, NULL) != VSR_OK ||
        vsr_json_type(&s->json, 0) != VSR_JSON_OBJECT)
        return bad_request(s, "malformed JSON body");
    vsr_json_t *j = &s->json;
    uint32_t dup;
    if (vsr_json_find_duplicate_key(j, &dup)) {
        /* vsr reads one copy, a backend may read another: neither is trusted */
        vsr_slice_t k = VSR_SLICE_NULL;
        vsr_json_string(j, dup, &s->pool, &k);
        return error_reply(s, 400, "invalid_request_error", "duplicate_key",
                           quote_msg(s, "duplicate key \"", k, "\" in request body"));
    }

    uint32_t mt = 0;
    vsr_slice_t name = VSR_SLICE_NULL;
    if (vsr_json_object_get(j, 0, "model", &mt) == VSR_OK) {
        if (vsr_json_type(j, mt) != VSR_JSON_STRING)
            return bad_request(s, "model field must be a string");
        vsr_json_string(j, mt, &s->pool, &name);
    } else {
        mt = 0;
    }

    /* listener allow-list */
    const vsr_listener_conf_t *l = s->opts.listener;
    if (l && l->models.n) {
        if (name.len == 0)
            return error_reply(s, 400, "invalid_request_error", "model_required",
                               VSR_SLICE_LIT("model field is required on this listener"));
        int ok = 0;
        for (size_t i = 0; i < l->models.n && !ok; i++)
            ok = vsr_slice_eq_cstr(name, l->models.items[i]);
        if (!ok)
            return error_reply(s, 403, "invalid_request_error", "model_not_allowed",
                               quote_msg(s, "model \"", name, "\" is not allowed on this listener"));
    }

    if (s->ep == EP_SURFACE)
        return surface_body(s, name, mt, body, len, t0);

    const char *why = NULL;
    vsr_api_kind_t api = s->ep == EP_CHAT ? VSR_API_CHAT : s->ep == EP_COMPLETIONS ? VSR_API_COMPLETIONS : VSR_API_RESPONSES;
    if (vsr_chat_view_build(j, api, &s->pool, &s->chat, &why) != VSR_OK)
        return bad_request(s, why ? why : "malformed request body");
    uint32_t so, iu;
    if (vsr_json_object_get(j, 0, "stream_options", &so) == VSR_OK && vsr_json_type(j, so) == VSR_JSON_OBJECT &&
        vsr_json_object_get(j, so, "include_usage", &iu) == VSR_OK)
        s->include_usage = vsr_json_bool(j, iu) == 1;

    resolution_t res;
    if (vsr__resolve_model(s->e, name, &res) != VSR_OK)
        return unknown_model(s, name);

    /* what the rest of the phase needs, after a wait too */
    s->res = res;
    s->t0 = t0;
    s->body = body;
    s->body_len = len;
    s->name = name;
    s->model_tok = mt;
    if (res.recipe) {
        s->ev.recipe = res.recipe->name;
        const vsr_header_t *skip = find_header(s->headers, s->n_headers, "x-vsr-skip-processing");
        int skipping = cfg->skip_processing_enabled && skip && vsr_slice_case_eq_cstr(vsr_slice_trim(skip->value), "true");
        if (!skipping) {
            route_ctx_t *rc = &s->rc;
            memset(rc, 0, sizeof(*rc));
            rc->rs = vsr__engine_recipe(s->e, res.recipe);
            rc->cfg = cfg;
            rc->in.chat = &s->chat;
            rc->in.text = s->chat.last_user >= 0 ? s->chat.messages[s->chat.last_user].text : VSR_SLICE_NULL;
            rc->in.pool = &s->pool;
            rc->in.memo = &s->sig_memo; /* one scan of the text serves every keyword signal */
            identity(s, &rc->in);
            if (rc->rs->needs_identity && !rc->in.identity_present && !cfg->authz_fail_open)
                return error_reply(s, 403, "invalid_request_error", NULL,
                                   VSR_SLICE_LIT("user identity is required for authorization"));
            rc->ports = s->opts.ports;
            rc->ports_ud = s->opts.ports_ud;
            rc->deadline_ms = s->opts.deadline_ms;
            rc->cont = route_resumed;
            rc->cont_ud = s;
            if (vsr__route_start(rc, &s->pool) == VSR_AGAIN) {
                VSR_BUG_ON(s->opts.ports->resume == NULL);
                s->pending = 1;
                reset_effect(s);
                s->eff.pending = 1;
                return &s->eff;
            }
            s->routed = 1;
        }
    }
    return body_select(s);
}

/* The model tasks are answered (or failed): the phase goes on, and its
 * effect goes to the adapter. */
static void route_resumed(route_ctx_t *rc)
{
    vsr_session_t *s = rc->cont_ud;
    s->pending = 0;
    s->routed = 1;
    const vsr_effect_t *eff = body_select(s);
    if (eff->pending)
        return; /* a request graph or router_dc's embedding runs: it resumes the phase */
    s->opts.ports->resume(s->opts.ports_ud, s, eff); /* the session may be gone on return */
}

/* The body phase once the decision is made: its evidence, then what its
 * plugins need (body_plugins goes on). */
static const vsr_effect_t *body_decided(vsr_session_t *s)
{
    const vsr_config_t *cfg = s->e->cfg;
    const resolution_t res = s->res;
    const vsr_model_conf_t *model = res.model;
    const vsr_decision_conf_t *decision = NULL;
    const char *lora = NULL;
    if (res.recipe) {
        if (s->routed) {
            route_ctx_t *rc = &s->rc;
            s->ev.decision_evaluated = 1;
            note_signals(s, rc);
            if (rc->fail_request)
                return error_reply(s, 503, "server_error", "signal_unavailable",
                                   pool_printf(&s->pool, "signal \"%.200s\" could not be computed and a decision says "
                                                         "rules.on_unknown: fail_request", rc->fail_signal));
            if (rc->selected >= 0) {
                decision = rc->results[rc->selected].decision;
                s->ev.decision = decision->name;
                s->ev.confidence = rc->results[rc->selected].confidence;
                s->ev.algorithm = decision->algorithm ? decision->algorithm : "static";
                size_t pick = rc->model_ref; /* static: the first modelRef or the best model_scores */
                if (vsr__select_is_selector(decision)) {
                    const vsr_ports_t *p = s->opts.ports;
                    const vsr_model_stats_t *st = p && p->model_stats ? p->model_stats(s->opts.ports_ud) : NULL;
                    int k = vsr__select_run(cfg, decision, st, s->dc_asked ? &s->dc : NULL, &s->pool,
                                            &s->ev.selection);
                    if (k < 0)
                        return error_reply(s, 503, "server_error", "selection_failed",
                                           pool_printf(&s->pool, "decision \"%.200s\": %s (algorithm.on_error: fail)",
                                                       decision->name, s->ev.selection->warning));
                    pick = (size_t)k;
                }
                if (decision->n_model_refs > 0) {
                    const vsr_model_ref_conf_t *ref = &decision->model_refs[pick];
                    model = vsr_config_find_model(cfg, vsr_slice_cstr(ref->model));
                    if (ref->lora_name)
                        lora = ref->lora_name;
                }
            }
        }
        if (model == NULL) {
            model = cfg->default_model ? vsr_config_find_model(cfg, vsr_slice_cstr(cfg->default_model)) : NULL;
            lora = model ? cfg->default_lora : NULL;
        }
        /* no model: refused after the plugins, since fast_response answers without one (ref §4.4) */
    } else {
        s->ev.passthrough = 1;
    }
    s->ev.context_tokens = vsr_signals_token_estimate(&s->chat);
    if (s->count_tokens)
        return count_tokens(s, res.recipe, decision, model, lora);
    s->p_decision = decision;
    s->d_model = model;
    s->d_lora = lora;
    const vsr_effect_t *waiting = tools_start(s);
    if (waiting)
        return waiting; /* the tools' similarities first */
    return rag_then_plugins(s);
}

/* The body phase once the decision is made and what its plugins need is
 * gathered: plugins, the upstream request's rewrites. */
static const vsr_effect_t *body_plugins(vsr_session_t *s)
{
    const vsr_config_t *cfg = s->e->cfg;
    vsr_json_t *j = &s->json;
    uint64_t t0 = s->t0;
    const resolution_t res = s->res;
    const vsr_decision_conf_t *decision = s->p_decision;
    const vsr_model_conf_t *model = s->d_model;
    const char *lora = s->d_lora;

    replay_begin(s, decision);
    /* plugins of the selected decision */
    vsr_plugin_ctx_t pc;
    vsr_plugin_ctx_init(&pc, j, &s->chat, &s->edits, &s->pool);
    pc.stream = s->chat.stream;
    pc.tools_db = cfg->tools.db.n ? &cfg->tools.db : NULL;
    pc.tool_scores = s->ts_asked ? &s->ts : NULL;
    pc.request_header = plugin_request_header;
    pc.request_header_ud = s;
    pc.memories = &s->mem_hits;
    if (s->mem_state) /* the metric's result: skipped whatever the reason */
        s->ev.memory = strncmp(s->mem_state, "skipped", 7) == 0 ? "skipped" : s->mem_state;
    for (size_t i = 0; i < s->ev.n_signals && pc.category.len == 0; i++)
        if (strcmp(s->ev.signals[i].family, "domain") == 0) {
            pc.category = vsr_slice_cstr(s->ev.signals[i].name);
            pc.category_confidence = s->ev.signals[i].confidence;
        }
    pc.rag = s->rag_asked ? &s->rag_res : NULL;
    pc.request_id = s->opts.request_id;
    for (size_t i = 0; model && i < cfg->n_model_cards; i++)
        if (strcmp(cfg->model_cards[i].name, model->name) == 0)
            pc.context_window = cfg->model_cards[i].context_window_size;
    if (decision && decision->n_plugins) {
        const char *pwhy = NULL;
        if (vsr_plugins_run_request(decision, &pc, &pwhy) != VSR_OK)
            return bad_request(s, pwhy ? pwhy : "request cannot be processed");
        s->ev.injected_system_prompt = pc.injected_system_prompt;
        s->ev.tools_applied = pc.tools_applied;
        s->ev.tools_before = pc.tools_before;
        s->ev.tools_after = pc.tools_after;
        s->ev.tools_selection = pc.tools_selection;
        s->ev.tools_added = pc.tools_added;
        s->ev.tools_selected = pc.tools_selected;
        s->ev.compression_applied = pc.compression_applied;
        s->ev.compression_tokens_before = pc.compression_tokens_before;
        s->ev.compression_tokens_after = pc.compression_tokens_after;
        s->ev.compression_messages = pc.compression_messages;
        s->mem_injected = pc.memory_injected;
        s->ev.rag = pc.rag_outcome;
        s->ev.rag_backend = pc.rag_outcome && s->rag_res.backend ? s->rag_res.backend : NULL;
        s->rag_context = pc.rag_context;
        if (pc.imm_status) {
            vsr_header_t extra[VSR_ARRAY_LEN(pc.imm_headers) + 2];
            size_t n_extra = 0;
            for (size_t i = 0; i < pc.n_imm_headers; i++) {
                extra[n_extra].name = pc.imm_headers[i].name;
                extra[n_extra++].value = pc.imm_headers[i].value;
            }
            /* the answer is the decision's: say which, as the reference does */
            if (s->ev.recipe)
                extra[n_extra++] = (vsr_header_t){VSR_SLICE_LIT("x-vsr-selected-recipe"), vsr_slice_cstr(s->ev.recipe)};
            extra[n_extra++] = (vsr_header_t){VSR_SLICE_LIT("x-vsr-selected-decision"), vsr_slice_cstr(decision->name)};
            s->ev.routing_us = vsr_now_us_exact() - t0;
            return immediate(s, pc.imm_status, pc.imm_content_type, pc.imm_body,
                             pc.rag_outcome && strcmp(pc.rag_outcome, "blocked") == 0 ? VSR_PATH_ERROR
                                                                                      : VSR_PATH_FAST_RESPONSE,
                             extra, n_extra);
        }
    }

    int graph = decision && s->ep == EP_CHAT && vsr_graph_eligible(decision) && s->opts.ports &&
                s->opts.ports->model_call; /* its nodes name the models they call */
    if (model == NULL && !graph)
        return bad_request(s, "unable to route request: no model selected and no default model configured");
    if (model && model->n_backends == 0 && !graph)
        return no_backends(s, model);

    /* what every candidate's request shares: the plugins' edits and fields */
    s->decision = decision;
    s->recipe = res.recipe;
    s->n_saved_edits = s->edits.n;
    if (s->edits.n) {
        s->saved_edits = vsr_pool_alloc(&s->pool, sizeof(vsr_json_edit_t) * s->edits.n);
        memcpy(s->saved_edits, s->edits.e, sizeof(vsr_json_edit_t) * s->edits.n);
    }
    s->plugin_rm = vsr_pool_alloc(&s->pool, sizeof(vsr_slice_t) * (pc.n_remove_headers + 1));
    if (pc.n_remove_headers)
        memcpy(s->plugin_rm, pc.remove_headers, sizeof(vsr_slice_t) * pc.n_remove_headers);
    s->n_plugin_rm = pc.n_remove_headers;
    s->plugin_set = vsr_pool_alloc(&s->pool, sizeof(vsr_header_t) * (pc.n_set_headers + 1));
    for (size_t i = 0; i < pc.n_set_headers; i++) {
        s->plugin_set[i].name = pc.set_headers[i].name;
        s->plugin_set[i].value = pc.set_headers[i].value;
    }
    s->n_plugin_set = pc.n_set_headers;
    s->tried = vsr_pool_alloc(&s->pool, sizeof(const vsr_model_conf_t *) * (cfg->n_models + 1));
    s->d_model = model;
    s->d_lora = lora;
    s->d_graph = graph;
    const vsr_effect_t *cached = cache_start(s);
    if (cached)
        return cached; /* a hit, or waiting on the cache */
    return dispatch(s);
}

/* ---- the tool plugins' similarities (tools.semantic_selection, tool_selection) ----
 * One embed task: the routing text, then every tool text the plugins named
 * (the request's, the database's).  Whatever goes wrong leaves ts.ok 0:
 * the plugins then fail open. */

static uint64_t rc_now(vsr_session_t *s);

static const vsr_effect_t *tools_ready(vsr_session_t *s)
{
    return rag_then_plugins(s);
}

/* ---- the rag plugin's retrieval (rag_retrieve.c): the backends are asked before the plugins run ---- */

static void rag_done(void *ud)
{
    port_wait_done(ud);
}

vsr_slice_t vsr__session_rag_context(const vsr_session_t *s)
{
    return s->rag_context;
}

/* The decision's first enabled rag plugin retrieves for the current user
 * message (a chat request); then the memory plugin's search (which reads
 * whether rag context goes in as a tool message), then the plugins run. */
static const vsr_effect_t *rag_then_plugins(vsr_session_t *s)
{
    const vsr_decision_conf_t *d = s->p_decision;
    const vsr_plugin_rag_conf_t *conf = NULL;
    for (size_t i = 0; d && i < d->n_plugins && conf == NULL; i++)
        if (d->plugins[i].kind == VSR_PLUGIN_RAG && d->plugins[i].enabled && d->plugins[i].u.rag)
            conf = d->plugins[i].u.rag;
    vsr_slice_t query = s->chat.last_user >= 0 ? vsr_slice_trim(s->chat.messages[s->chat.last_user].text)
                                               : VSR_SLICE_NULL;
    if (conf == NULL || s->ep != EP_CHAT || query.len == 0 || s->rag_asked)
        return memory_then_plugins(s);
    if (conf->has_min_confidence) {
        /* the reference compares it with the fact-check confidence: 1.0 once a fact_check signal matched */
        double fc = 0;
        for (size_t i = 0; i < s->ev.n_signals && fc == 0; i++)
            if (strcmp(s->ev.signals[i].family, "fact_check") == 0)
                fc = 1.0;
        if (fc < conf->min_confidence_threshold)
            return memory_then_plugins(s);
    }
    s->rag_asked = 1;
    /* what an mcp tool's arguments may name */
    vsr_buf_t dom, kw;
    vsr_buf_init(&dom, 4096);
    vsr_buf_init(&kw, 4096);
    for (size_t i = 0; i < s->ev.n_signals; i++) {
        vsr_buf_t *b = strcmp(s->ev.signals[i].family, "domain") == 0     ? &dom
                       : strcmp(s->ev.signals[i].family, "keyword") == 0 ? &kw
                                                                          : NULL;
        if (b && b->len + strlen(s->ev.signals[i].name) + 1 < b->cap) {
            if (b->len)
                vsr_buf_append(b, ",", 1);
            vsr_buf_append_cstr(b, s->ev.signals[i].name);
        }
    }
    s->rag_vars.decision = vsr_slice_cstr(d->name);
    s->rag_vars.domains = keep_buf(s, &dom);
    s->rag_vars.keywords = keep_buf(s, &kw);
    vsr_buf_free(&dom);
    vsr_buf_free(&kw);
    uint64_t deadline = s->opts.deadline_ms ? s->opts.deadline_ms : rc_now(s) + VSR_SESSION_WAIT_DEFAULT_MS;
    port_wait_begin(s, 4, memory_then_plugins);
    return port_wait_end(s, vsr__rag_start(&s->pool, conf, query, &s->rag_vars, s->opts.ports, s->opts.ports_ud,
                                           deadline, &s->rag_res, rag_done, s));
}

/* embeddings[k]: dim finite numbers, scaled to unit length; VSR_OK or VSR_ERR_INVALID. */
static int read_vec(const vsr_json_t *j, uint32_t arr, size_t dim, float *v)
{
    if (vsr_json_type(j, arr) != VSR_JSON_ARRAY || j->toks[arr].count != dim)
        return VSR_ERR_INVALID;
    double norm = 0;
    uint32_t t = arr + 1;
    for (size_t i = 0; i < dim; i++, t = j->toks[t].next) {
        double x;
        if (vsr_json_type(j, t) != VSR_JSON_NUMBER || vsr_json_number(j, t, &x) != VSR_OK || !isfinite(x) ||
            fabs(x) > 1e30)
            return VSR_ERR_INVALID;
        v[i] = (float)x;
        norm += x * x;
    }
    if (!(norm > 0))
        return VSR_ERR_INVALID;
    float inv = (float)(1.0 / sqrt(norm));
    for (size_t i = 0; i < dim; i++)
        v[i] *= inv;
    return VSR_OK;
}

/* ---- router_dc: the query's embedding against the candidates' descriptions ----
 * One embed task: the last user message, then the description text of
 * each candidate card the engine keeps no embedding of yet (those are kept
 * for the configuration version, so a later request sends the query
 * alone).  Whatever goes wrong leaves dc.ok 0: the selector then takes the
 * first candidate, with a warning (the reference's rule). */

static const vsr_effect_t *ps_start(vsr_session_t *s, const vsr_decision_conf_t *d);

static void dc_embed_done(void *ud, int status, const vsr_runtime_result_t *results, size_t n)
{
    vsr_session_t *s = ud;
    const vsr_config_t *cfg = s->e->cfg;
    const vsr_decision_conf_t *d = s->rc.results[s->rc.selected].decision;
    int caps = d->algo.u.router_dc.use_capabilities;
    if (rc_now(s) > s->dc_deadline)
        status = VSR_ERR; /* late: as if unanswered */
    for (size_t i = 0; status == VSR_OK && i < n; i++) {
        if (results[i].id == NULL || strcmp(results[i].id, "dc") != 0 || results[i].status != VSR_OK)
            continue;
        vsr_json_t j;
        uint32_t arr, dn;
        double dimv;
        if (vsr_json_parse(&j, results[i].result.p ? results[i].result.p : "", results[i].result.len, NULL) == VSR_OK &&
            vsr_json_type(&j, 0) == VSR_JSON_OBJECT && vsr_json_object_get(&j, 0, "dim", &dn) == VSR_OK &&
            vsr_json_number(&j, dn, &dimv) == VSR_OK && dimv >= 1 && dimv <= 65536 &&
            vsr_json_object_get(&j, 0, "embeddings", &arr) == VSR_OK && vsr_json_type(&j, arr) == VSR_JSON_ARRAY &&
            j.toks[arr].count == s->dc_inputs + 1) {
            size_t dim = (size_t)dimv;
            float *q = vsr_malloc(dim * sizeof(float) * 2), *v = q + dim;
            uint32_t t = arr + 1;
            int ok = read_vec(&j, t, dim, q) == VSR_OK;
            for (size_t k = 0; ok && k < s->dc_inputs; k++) {
                t = j.toks[t].next;
                if (read_vec(&j, t, dim, v) == VSR_OK)
                    vsr__engine_card_vec_put(s->e, (size_t)s->dc_cards[k], caps, v, dim);
            }
            for (size_t c = 0; ok && c < s->dc.n; c++) {
                int card = vsr__select_card_index(cfg, d->model_refs[c].model);
                size_t vdim = 0;
                const float *cv = card >= 0 ? vsr__engine_card_vec(s->e, (size_t)card, caps, &vdim) : NULL;
                if (cv == NULL || vdim != dim)
                    continue; /* no description, or another embedding model's: scored min_similarity */
                double dot = 0;
                for (size_t x = 0; x < dim; x++)
                    dot += (double)q[x] * cv[x];
                s->dc_cos[c] = dot;
                s->dc_has[c] = 1;
            }
            s->dc.ok = ok;
            vsr_free(q);
        }
        vsr_json_free(&j);
        break;
    }
    port_wait_done(s);
}

/* Asks the runtime for what router_dc needs when the decision made is a
 * router_dc one; NULL when nothing is asked (the selector then runs
 * without a query embedding), else the pending effect, or the phase's
 * effect when the port answered at once. */
static const vsr_effect_t *dc_start(vsr_session_t *s)
{
    const vsr_config_t *cfg = s->e->cfg;
    if (!s->res.recipe || !s->routed || s->dc_asked || s->rc.fail_request || s->rc.selected < 0)
        return NULL;
    const vsr_decision_conf_t *d = s->rc.results[s->rc.selected].decision;
    if (!vsr__select_is_selector(d) || (d->algo.kind != VSR_ALGO_ROUTER_DC && d->algo.kind != VSR_ALGO_PROMPT))
        return NULL;
    s->dc_asked = 1;
    if (d->algo.kind == VSR_ALGO_PROMPT)
        return ps_start(s, d);
    size_t n = VSR_MIN(d->n_model_refs, (size_t)VSR_SELECT_MAX_CANDIDATES);
    int caps = d->algo.u.router_dc.use_capabilities;
    s->dc_cos = vsr_pool_alloc(&s->pool, n * sizeof(double));
    s->dc_has = vsr_pool_alloc(&s->pool, n);
    memset(s->dc_has, 0, n);
    s->dc = (vsr__select_aux_t){.cosine = s->dc_cos, .has = s->dc_has, .ok = 0, .n = n};
    vsr_slice_t query = s->chat.last_user >= 0 ? vsr_slice_trim(s->chat.messages[s->chat.last_user].text)
                                               : VSR_SLICE_NULL;
    const vsr_ports_t *ports = s->opts.ports;
    if (query.len == 0 || ports == NULL || ports->runtime_call == NULL)
        return NULL;
    s->dc_cards = vsr_pool_alloc(&s->pool, n * sizeof(int32_t));
    s->dc_inputs = 0;
    vsr_buf_t b, text, one;
    vsr_buf_init(&b, 0);
    vsr_buf_init(&text, 0);
    vsr_buf_init(&one, 0);
    vsr_buf_append_cstr(&b, "{\"input\":[");
    vsr_json_append_client_text(&one, query, 16384); /* the model reads less */
    vsr_buf_append_json_string(&b, vsr_buf_slice(&one));
    for (size_t c = 0; c < n; c++) {
        int card = vsr__select_card_index(cfg, d->model_refs[c].model);
        size_t dim;
        if (card < 0 || vsr__engine_card_vec(s->e, (size_t)card, caps, &dim) != NULL)
            continue;
        int queued = 0;
        for (size_t k = 0; k < s->dc_inputs && !queued; k++)
            queued = s->dc_cards[k] == card;
        vsr_buf_reset(&text);
        vsr__select_aux_text(&cfg->model_cards[card], caps, &text);
        if (queued || text.len == 0)
            continue;
        s->dc_cards[s->dc_inputs++] = card;
        vsr_buf_reset(&one);
        vsr_json_append_client_text(&one, vsr_buf_slice(&text), VSR_SELECT_DC_TEXT_MAX);
        vsr_buf_append(&b, ",", 1);
        vsr_buf_append_json_string(&b, vsr_buf_slice(&one));
    }
    vsr_buf_free(&one);
    vsr_buf_free(&text);
    vsr_buf_append_cstr(&b, "]}");
    vsr_runtime_task_t task = {"dc", "embed", vsr_pool_dup_slice(&s->pool, vsr_buf_slice(&b))};
    vsr_buf_free(&b);
    vsr_runtime_bundle_t bundle = {&task, 1};
    uint64_t deadline = s->opts.deadline_ms ? s->opts.deadline_ms : rc_now(s) + VSR_SESSION_WAIT_DEFAULT_MS;
    s->dc_deadline = deadline;
    port_wait_begin(s, 1, body_decided);
    return port_wait_end(s, ports->runtime_call(s->opts.ports_ud, &bundle, deadline, dc_embed_done, s));
}

/* ---- prompt: a model picks the candidate ----
 * One chat call to algorithm.prompt.model (the reference's: its system
 * prompt, the query as the user message, temperature 0, 512 completion
 * tokens, a JSON object answer) within timeout_seconds (default 5). */

#define VSR_SELECT_PROMPT_MAX_RESPONSE (256u * 1024u)

static void ps_done(void *ud, int status, int http_status, vsr_slice_t body, unsigned attempts)
{
    VSR_UNUSED(attempts);
    vsr_session_t *s = ud;
    const vsr_decision_conf_t *d = s->rc.results[s->rc.selected].decision;
    if (rc_now(s) > s->dc_deadline || (status != VSR_OK && rc_now(s) >= s->dc_deadline))
        s->dc.prompt_error = "prompt: the model did not answer within timeout_seconds";
    else if (status != VSR_OK || http_status != 200)
        s->dc.prompt_error = "prompt: the model call failed";
    else
        s->dc.prompt_choice = vsr__select_prompt_parse(d, body, &s->pool, &s->dc.prompt_error);
    port_wait_done(s);
}

static const vsr_effect_t *ps_start(vsr_session_t *s, const vsr_decision_conf_t *d)
{
    const vsr_config_t *cfg = s->e->cfg;
    const vsr_algo_prompt_conf_t *pc = &d->algo.u.prompt;
    s->dc = (vsr__select_aux_t){.prompt_choice = -1, .prompt_error = "prompt: no user message to choose for"};
    vsr_slice_t query = s->chat.last_user >= 0 ? vsr_slice_trim(s->chat.messages[s->chat.last_user].text)
                                               : VSR_SLICE_NULL;
    const vsr_model_conf_t *m = vsr_config_find_model(cfg, vsr_slice_cstr(pc->model));
    if (query.len == 0)
        return NULL;
    if (m == NULL || s->opts.ports == NULL || s->opts.ports->model_call == NULL) {
        s->dc.prompt_error = "prompt: no way to call the model";
        return NULL;
    }
    vsr_buf_t b, sys, one;
    vsr_buf_init(&b, 0);
    vsr_buf_init(&sys, 0);
    vsr_buf_init(&one, 0);
    vsr__select_prompt_system(cfg, d, &sys);
    vsr_buf_append_cstr(&b, "{\"model\":");
    vsr_buf_append_json_string(&b, vsr_slice_cstr(m->provider_model_id ? m->provider_model_id : m->name));
    vsr_buf_append_cstr(&b, ",\"messages\":[{\"role\":\"system\",\"content\":");
    vsr_buf_append_json_string(&b, vsr_buf_slice(&sys));
    vsr_buf_append_cstr(&b, "},{\"role\":\"user\",\"content\":");
    vsr_json_append_client_text(&one, query, 16384);
    vsr_buf_append_json_string(&b, vsr_buf_slice(&one));
    vsr_buf_append_cstr(&b, "}],\"temperature\":0,\"max_completion_tokens\":512,"
                            "\"response_format\":{\"type\":\"json_object\"}}");
    vsr_graph_call_t call = {.model = m, .body = vsr_pool_dup_slice(&s->pool, vsr_buf_slice(&b)), .iteration = 1,
                             .max_response_bytes = VSR_SELECT_PROMPT_MAX_RESPONSE};
    vsr_buf_free(&b);
    vsr_buf_free(&sys);
    vsr_buf_free(&one);
    uint64_t now = rc_now(s);
    uint64_t deadline = now + (uint64_t)(pc->timeout_seconds ? pc->timeout_seconds : 5) * 1000;
    if (s->opts.deadline_ms && s->opts.deadline_ms < deadline)
        deadline = s->opts.deadline_ms > now ? s->opts.deadline_ms : now;
    s->dc_deadline = deadline;
    s->dc.prompt_error = "prompt: the model did not answer";
    port_wait_begin(s, 3, body_decided);
    return port_wait_end(s, s->opts.ports->model_call(s->opts.ports_ud, &call, deadline, ps_done, s));
}

/* The decision is made: what its selector asks of a model (router_dc's
 * embedding, prompt's choice) when it needs it, then body_decided. */
static const vsr_effect_t *body_select(vsr_session_t *s)
{
    const vsr_effect_t *w = dc_start(s);
    return w ? w : body_decided(s);
}

static void tools_embed_done(void *ud, int status, const vsr_runtime_result_t *results, size_t n)
{
    vsr_session_t *s = ud;
    if (rc_now(s) > s->ts_deadline)
        status = VSR_ERR; /* late: as if unanswered */
    for (size_t i = 0; status == VSR_OK && i < n; i++) {
        if (results[i].id == NULL || strcmp(results[i].id, "tools") != 0 || results[i].status != VSR_OK)
            continue;
        vsr_json_t j;
        uint32_t arr, d;
        double dimv;
        if (vsr_json_parse(&j, results[i].result.p ? results[i].result.p : "", results[i].result.len, NULL) == VSR_OK &&
            vsr_json_type(&j, 0) == VSR_JSON_OBJECT && vsr_json_object_get(&j, 0, "dim", &d) == VSR_OK &&
            vsr_json_number(&j, d, &dimv) == VSR_OK && dimv >= 1 && dimv <= 65536 &&
            vsr_json_object_get(&j, 0, "embeddings", &arr) == VSR_OK && vsr_json_type(&j, arr) == VSR_JSON_ARRAY &&
            j.toks[arr].count == s->ts_inputs + 1) {
            size_t dim = (size_t)dimv;
            float *q = vsr_malloc(dim * sizeof(float) * 2), *v = q + dim;
            uint32_t t = arr + 1;
            int ok = read_vec(&j, t, dim, q) == VSR_OK;
            for (size_t k = 0; ok && k < s->ts_inputs; k++) {
                t = j.toks[t].next;
                ok = read_vec(&j, t, dim, v) == VSR_OK;
                double dot = 0;
                for (size_t x = 0; ok && x < dim; x++)
                    dot += (double)q[x] * v[x];
                int32_t m = s->ts_map[k];
                if (m >= 0)
                    ((double *)s->ts.request)[m] = dot;
                else
                    ((double *)s->ts.db)[-(m + 1)] = dot;
            }
            s->ts.ok = ok;
            vsr_free(q);
        }
        vsr_json_free(&j);
        break;
    }
    port_wait_done(s);
}

/* Asks the runtime for the similarities the decision's tool plugins need;
 * NULL when none are needed (or none can be had: the plugins fail open),
 * else the pending effect, or the phase's effect when the port answered
 * at once. */
static const vsr_effect_t *tools_start(vsr_session_t *s)
{
    const vsr_decision_conf_t *d = s->p_decision;
    const vsr_config_t *cfg = s->e->cfg;
    if (d == NULL || d->n_plugins == 0 || s->ep != EP_CHAT)
        return NULL;
    vsr_plugin_ctx_t pc;
    vsr_plugin_ctx_init(&pc, &s->json, &s->chat, &s->edits, &s->pool);
    const vsr_tools_db_t *db = cfg->tools.db.n ? &cfg->tools.db : NULL;
    pc.tools_db = db;
    vsr_slice_t *texts;
    size_t n;
    int with_db;
    if (!vsr_plugins_tool_texts(d, &pc, &texts, &n, &with_db))
        return NULL;
    s->ts_asked = 1;
    size_t n_db = with_db ? db->n : 0;
    double *req = vsr_pool_alloc(&s->pool, (n + 1) * sizeof(double));
    double *dbs = vsr_pool_alloc(&s->pool, (n_db + 1) * sizeof(double));
    for (size_t i = 0; i < n; i++)
        req[i] = NAN;
    for (size_t i = 0; i < n_db; i++)
        dbs[i] = NAN;
    s->ts = (vsr_tool_scores_t){.ok = 0, .request = req, .n_request = n, .db = dbs, .n_db = n_db};
    vsr_slice_t query = s->chat.last_user >= 0 ? vsr_slice_trim(s->chat.messages[s->chat.last_user].text)
                                               : VSR_SLICE_NULL;
    const vsr_ports_t *ports = s->opts.ports;
    if (query.len == 0 || ports == NULL || ports->runtime_call == NULL)
        return NULL; /* nothing to compare with, or nobody to ask */
    s->ts_map = vsr_pool_alloc(&s->pool, (n + n_db + 1) * sizeof(int32_t));
    s->ts_inputs = 0;
    vsr_buf_t b;
    vsr_buf_init(&b, 0);
    vsr_buf_append_cstr(&b, "{\"input\":[");
    vsr_buf_t one;
    vsr_buf_init(&one, 0);
    for (size_t k = 0; k < 1 + n + n_db; k++) {
        vsr_slice_t t = k == 0 ? query : k <= n ? texts[k - 1] : vsr_slice_cstr(db->tools[k - 1 - n].text);
        t = vsr_slice_trim(t);
        if (t.len == 0)
            continue; /* no text: stays NAN, which the plugins rank last */
        if (k > 0)
            s->ts_map[s->ts_inputs++] = k <= n ? (int32_t)(k - 1) : -(int32_t)(k - n);
        vsr_buf_reset(&one);
        vsr_json_append_client_text(&one, t, k == 0 ? 16384 : VSR_TOOLS_TEXT_MAX); /* the model reads less */
        if (k > 0)
            vsr_buf_append(&b, ",", 1);
        vsr_buf_append_json_string(&b, vsr_buf_slice(&one));
    }
    vsr_buf_free(&one);
    vsr_buf_append_cstr(&b, "]}");
    if (s->ts_inputs == 0) {
        vsr_buf_free(&b);
        s->ts.ok = 1; /* no tool has a text: every one ranks last */
        return NULL;
    }
    vsr_runtime_task_t task = {"tools", "embed", vsr_pool_dup_slice(&s->pool, vsr_buf_slice(&b))};
    vsr_buf_free(&b);
    vsr_runtime_bundle_t bundle = {&task, 1};
    uint64_t deadline = s->opts.deadline_ms ? s->opts.deadline_ms : rc_now(s) + VSR_SESSION_WAIT_DEFAULT_MS;
    s->ts_deadline = deadline;
    port_wait_begin(s, 1, tools_ready);
    return port_wait_end(s, ports->runtime_call(s->opts.ports_ud, &bundle, deadline, tools_embed_done, s));
}

/* ---- the memory plugin's store (memory.c has the rest) ----
 * Before the plugins: the user (a trusted x-authz-user-id, else the API key
 * the listener checked), the query's embedding from the runtime, then the
 * user's set from global.stores.memory (one bounded value per user); the
 * selected memories go to the plugin (pc.memories).  It runs after the rag
 * plugin's retrieval: context the rag plugin injects as a tool message
 * means no search, as in the reference.  With an external model of role
 * memory_rewrite the query is first rewritten by it (model_call); its
 * failure, or an empty rewrite, leaves the user turn as the query.  After a complete,
 * successful answer (rc_keep), the user's new set is written back.  Every
 * failure fails open: the request goes on without memories. */

static uint64_t wall_ms(void);
static const vsr_effect_t *mem_after_lookup(vsr_session_t *s);

static void mem_embed_done(void *ud, int status, const vsr_runtime_result_t *results, size_t n)
{
    vsr_session_t *s = ud;
    int ok = 0;
    if (rc_now(s) > s->ts_deadline)
        status = VSR_ERR; /* late: as if unanswered */
    float *v = vsr_pool_alloc(&s->pool, VSR_CACHE_DIM * sizeof(float));
    for (size_t i = 0; status == VSR_OK && i < n && !ok; i++)
        ok = results[i].id && strcmp(results[i].id, "mem") == 0 && results[i].status == VSR_OK &&
             vsr__rc_read_embedding(results[i].result, v, VSR_CACHE_DIM) == VSR_OK;
    if (ok)
        s->mem_vec = v;
    port_wait_done(s);
}

static const vsr_effect_t *mem_lookup_step(vsr_session_t *s)
{
    if (s->mem_vec == NULL) {
        s->mem_state = "unavailable";
        s->mem_store = 0;
        return body_plugins(s);
    }
    port_wait_begin(s, 2, mem_after_lookup);
    s->mem_q = (vsr_cache_query_t){.key = vsr_slice_cstr(s->mem_key), .exact = 1, .memory = 1};
    return port_wait_end(s, s->opts.ports->cache_lookup(s->opts.ports_ud, &s->mem_q, store_done, s));
}

static const vsr_effect_t *mem_after_lookup(vsr_session_t *s)
{
    if (s->rc_status == VSR_OK && vsr_memory_decode(s->rc_value, &s->pool, &s->mem_set) != VSR_OK)
        memset(&s->mem_set, 0, sizeof(s->mem_set)); /* not a set: read as none, replaced by the next write */
    else if (s->rc_status != VSR_OK && s->rc_status != VSR_ERR_NOT_FOUND) {
        s->mem_state = "unavailable";
        s->mem_store = 0; /* the set could not be read: writing would lose it */
        return body_plugins(s);
    }
    s->rc_status = 0;
    s->rc_value = VSR_SLICE_NULL;
    if (!s->mem_search) {
        s->mem_state = "skipped";
        return body_plugins(s);
    }
    vsr_slice_t *texts;
    size_t n = vsr_memory_select(s->e->cfg, s->mem, &s->mem_set, s->mem_vec, VSR_CACHE_DIM, s->mem_query, wall_ms(),
                                 &s->pool, &texts);
    s->mem_hits = (vsr_memory_hits_t){texts, n};
    s->mem_state = n ? "used" : "missing";
    return body_plugins(s);
}

/* 1 when the decision's rag plugin injects its context as a tool message (injection_mode tool_role). */
static int rag_tool_role(const vsr_decision_conf_t *d)
{
    for (size_t i = 0; d && i < d->n_plugins; i++)
        if (d->plugins[i].kind == VSR_PLUGIN_RAG && d->plugins[i].enabled && d->plugins[i].u.rag)
            return d->plugins[i].u.rag->injection_mode != VSR_RAG_SYSTEM_PROMPT;
    return 0;
}

static void mem_rewrite_done(void *ud, int status, int http_status, vsr_slice_t body, unsigned attempts)
{
    VSR_UNUSED(attempts);
    vsr_session_t *s = ud;
    vsr_slice_t q = VSR_SLICE_NULL;
    if (status == VSR_OK && http_status == 200 && rc_now(s) <= s->mem_rw_deadline)
        q = vsr_memory_rewrite_result(&s->pool, vsr__hc_answer(body.p, body.len, &s->pool));
    if (q.len)
        s->mem_query = q;
    else
        vsr_log_debug("routing", "memory: the query's rewrite failed (status %d, HTTP %d); the user turn is searched",
                      status, http_status);
    port_wait_done(s);
}

static const vsr_effect_t *mem_embed_step(vsr_session_t *s);

/* NULL when the decision's memory plugin has nothing to do for this
 * request (body_plugins goes on), else the pending effect or the phase's. */
static const vsr_effect_t *memory_start(vsr_session_t *s)
{
    const vsr_config_t *cfg = s->e->cfg;
    const vsr_ports_t *ports = s->opts.ports;
    const vsr_plugin_memory_conf_t *m = vsr_memory_conf(s->p_decision);
    if (m == NULL || s->ep != EP_CHAT || s->chat.last_user < 0 ||
        vsr_slice_trim(s->chat.messages[s->chat.last_user].text).len == 0)
        return NULL; /* no text to find memories by (an image-only turn) */
    const vsr_header_t *off = find_header(s->headers, s->n_headers, "x-disable-router-memory");
    const char *skip = vsr_memory_skip(cfg, m, s->rq_path, s->name,
                                       off ? off->value : VSR_SLICE_NULL);
    char h[VSR_CONFIG_HASH_LEN];
    char kind = 0;
    vsr_signal_input_t in = {0};
    identity(s, &in);
    if (skip == NULL && in.identity_present && in.user_id.len) {
        vsr_config_hash(in.user_id.p, in.user_id.len, h);
        kind = 'u';
    } else if (skip == NULL && s->opts.api_key.len) {
        vsr_config_hash(s->opts.api_key.p, s->opts.api_key.len, h);
        kind = 'k';
    } else if (skip == NULL) {
        skip = "no_user";
    }
    if (skip) {
        char *st = vsr_pool_alloc(&s->pool, 48);
        snprintf(st, 48, "skipped:%s", skip);
        s->mem_state = st;
        return NULL;
    }
    if (ports == NULL || ports->cache_lookup == NULL || ports->cache_store == NULL || ports->runtime_call == NULL) {
        s->mem_state = "unavailable";
        return NULL;
    }
    s->mem = m;
    /* the key names the user only through a hash: users never share one, whatever they send */
    snprintf(s->mem_key, sizeof(s->mem_key), "%c:%s", kind, h + 7);
    s->mem_search = vsr_memory_should_search(&s->chat);
    /* a question of fact is searched only when it is about the user */
    for (size_t i = 0; s->mem_search && i < s->ev.n_signals; i++)
        if (strcmp(s->ev.signals[i].family, "fact_check") == 0 && s->ev.signals[i].name &&
            strcmp(s->ev.signals[i].name, "needs_fact_check") == 0)
            s->mem_search = vsr_memory_personal(s->chat.messages[s->chat.last_user].text);
    s->mem_store = m->has_auto_store ? m->auto_store : cfg->mem_store.auto_store;
    if (s->responses_in && s->rinfo.auto_store >= 0)
        s->mem_store = s->rinfo.auto_store; /* a Responses request's auto_store decides, as in the reference */
    if (s->mem_search && s->rag_asked && s->rag_res.status == VSR_RAG_OK && s->rag_res.context.len &&
        rag_tool_role(s->p_decision))
        s->mem_search = 0; /* the rag plugin's context goes in as a tool message: the reference then skips the search */
    if (!s->mem_search && !s->mem_store) {
        s->mem_state = "skipped";
        return NULL;
    }
    s->mem_query = s->chat.messages[s->chat.last_user].text;
    const vsr_external_conf_t *rw = NULL;
    for (size_t i = 0; s->mem_search && rw == NULL && i < cfg->n_externals; i++)
        if (cfg->externals[i].role && strcmp(cfg->externals[i].role, "memory_rewrite") == 0 &&
            cfg->externals[i].model.n_backends)
            rw = &cfg->externals[i];
    if (rw == NULL || ports->model_call == NULL)
        return mem_embed_step(s);
    vsr_buf_t b;
    vsr_buf_init(&b, 0);
    vsr_memory_rewrite_request(&b, rw->model.provider_model_id, &s->chat);
    if (b.len > rw->max_request_bytes) { /* the entry's bound: the user turn as sent is searched */
        vsr_buf_free(&b);
        return mem_embed_step(s);
    }
    vsr_graph_call_t call = {.model = &rw->model, .body = vsr_pool_dup_slice(&s->pool, vsr_buf_slice(&b)),
                             .iteration = 1, .max_response_bytes = rw->max_response_bytes};
    vsr_buf_free(&b);
    uint64_t now = rc_now(s);
    uint64_t deadline = now + rw->timeout_ms;
    if (s->opts.deadline_ms && s->opts.deadline_ms < deadline)
        deadline = s->opts.deadline_ms > now ? s->opts.deadline_ms : now;
    s->mem_rw_deadline = deadline;
    port_wait_begin(s, 3, mem_embed_step);
    return port_wait_end(s, ports->model_call(s->opts.ports_ud, &call, deadline, mem_rewrite_done, s));
}

/* The query (the user turn, or its rewrite) to the runtime's embedding model. */
static const vsr_effect_t *mem_embed_step(vsr_session_t *s)
{
    const vsr_ports_t *ports = s->opts.ports;
    vsr_buf_t b, text;
    vsr_buf_init(&b, 0);
    vsr_buf_init(&text, 0);
    vsr_json_append_client_text(&text, s->mem_query, 16384); /* the model reads less */
    vsr_buf_append_cstr(&b, "{\"input\":[");
    vsr_buf_append_json_string(&b, vsr_buf_slice(&text));
    vsr_buf_append_cstr(&b, "]}");
    vsr_buf_free(&text);
    vsr_runtime_task_t task = {"mem", "embed", vsr_pool_dup_slice(&s->pool, vsr_buf_slice(&b))};
    vsr_buf_free(&b);
    vsr_runtime_bundle_t bundle = {&task, 1};
    uint64_t deadline = s->opts.deadline_ms ? s->opts.deadline_ms : rc_now(s) + VSR_SESSION_WAIT_DEFAULT_MS;
    s->ts_deadline = deadline;
    port_wait_begin(s, 1, mem_lookup_step);
    return port_wait_end(s, ports->runtime_call(s->opts.ports_ud, &bundle, deadline, mem_embed_done, s));
}

static const vsr_effect_t *memory_then_plugins(vsr_session_t *s)
{
    const vsr_effect_t *waiting = memory_start(s);
    return waiting ? waiting : body_plugins(s);
}

/* The answer, complete and successful: the user's set with this turn. */
static void mem_keep(vsr_session_t *s)
{
    if (!s->mem_store || s->mem_vec == NULL || s->rc_over || s->resp_status != 200 || s->rc_acc.len == 0)
        return;
    if (s->rg->on && s->rg->result == VSR__RG_FLAGGED)
        return; /* the guard found a jailbreak in the answer: not a memory (a blocked one never gets here) */
    s->mem_store = 0;
    vsr_buf_t v;
    vsr_buf_init(&v, RC_MAX_VALUE + 64);
    uint64_t stored;
    vsr_slice_t json;
    vsr_json_t j;
    uint32_t c, msg, content;
    vsr_slice_t answer = VSR_SLICE_NULL;
    int parsed = 0;
    if (vsr__rc_stored_form(s->rc_acc.data, s->rc_acc.len, s->rc_sse, wall_ms(), &v) == VSR_OK &&
        vsr__rc_parse_stored(vsr_buf_slice(&v), &stored, &json) == VSR_OK &&
        vsr_json_parse(&j, json.p, json.len, NULL) == VSR_OK) {
        parsed = 1;
        if (vsr_json_object_get(&j, 0, "choices", &c) == VSR_OK && vsr_json_type(&j, c) == VSR_JSON_ARRAY &&
            j.toks[c].count > 0 && vsr_json_object_get(&j, c + 1, "message", &msg) == VSR_OK &&
            vsr_json_type(&j, msg) == VSR_JSON_OBJECT &&
            vsr_json_object_get(&j, msg, "content", &content) == VSR_OK &&
            vsr_json_type(&j, content) == VSR_JSON_STRING) {
            vsr_slice_t t;
            if (vsr_json_string(&j, content, &s->pool, &t) == VSR_OK)
                answer = vsr_pool_dup_slice(&s->pool, t); /* out of v, which is reused below */
        }
    }
    if (parsed)
        vsr_json_free(&j);
    vsr_buf_reset(&v);
    if (vsr_memory_remember(s->e->cfg, &s->mem_set, s->mem_vec, VSR_CACHE_DIM, &s->chat, answer, wall_ms(), &s->pool,
                            &v)) {
        vsr_cache_query_t q = {.key = vsr_slice_cstr(s->mem_key), .exact = 1, .memory = 1,
                               .ttl_ms = 10ull * 365 * 86400 * 1000};
        s->opts.ports->cache_store(s->opts.ports_ud, &q, vsr_buf_slice(&v));
    }
    vsr_buf_free(&v);
}

/* POST /v1/messages/count_tokens, once the decision is made: the count of
 * the routed model's Messages backend (the client's body, its model
 * rewritten; no plugin runs, nothing is cached), or, for a model that does
 * not speak Messages, vsr's own estimate (vsr_signals_token_estimate, the
 * context signal's: a quarter of the text's bytes). */
static const vsr_effect_t *count_tokens(vsr_session_t *s, const vsr_recipe_conf_t *recipe,
                                        const vsr_decision_conf_t *decision, const vsr_model_conf_t *model,
                                        const char *lora)
{
    const vsr_config_t *cfg = s->e->cfg;
    s->decision = decision;
    s->recipe = recipe;
    s->ev.routing_us = vsr_now_us_exact() - s->t0;
    if (model && anthropic_model(model) && model->n_backends) {
        s->tried = vsr_pool_alloc(&s->pool, sizeof(const vsr_model_conf_t *) * (cfg->n_models + 1));
        if (aim(s, model, lora) != VSR_OK)
            return untranslatable(s, model);
        return &s->eff;
    }
    vsr_header_t extra[3];
    size_t n_extra = 0;
    extra[n_extra++] = (vsr_header_t){VSR_SLICE_LIT("x-vsr-token-count"), VSR_SLICE_LIT("estimate")};
    if (model)
        extra[n_extra++] = (vsr_header_t){VSR_SLICE_LIT("x-vsr-selected-model"), vsr_slice_cstr(model->name)};
    if (decision)
        extra[n_extra++] = (vsr_header_t){VSR_SLICE_LIT("x-vsr-selected-decision"), vsr_slice_cstr(decision->name)};
    return immediate(s, 200, VSR_SLICE_LIT("application/json"),
                     pool_printf(&s->pool, "{\"input_tokens\":%llu}", (unsigned long long)s->ev.context_tokens),
                     VSR_PATH_NONE, extra, n_extra);
}

/* The routed request goes on: its graph, or its call. */
static const vsr_effect_t *dispatch(vsr_session_t *s)
{
    s->ev.routing_us = vsr_now_us_exact() - s->t0;
    if (s->d_graph)
        return start_graph(s);
    if (aim(s, s->d_model, s->d_lora) != VSR_OK)
        return untranslatable(s, s->d_model);
    return &s->eff;
}

/* ---- the response cache (response_cache plugin, ref §2) ---- */

static const vsr_plugin_response_cache_conf_t *rc_conf_of(const vsr_decision_conf_t *d)
{
    for (size_t i = 0; d && i < d->n_plugins; i++)
        if (d->plugins[i].kind == VSR_PLUGIN_RESPONSE_CACHE && d->plugins[i].enabled)
            return &d->plugins[i].u.response_cache;
    return NULL;
}

static uint64_t rc_now(vsr_session_t *s)
{
    return s->opts.ports && s->opts.ports->now_ms ? s->opts.ports->now_ms(s->opts.ports_ud) : vsr_now_ms();
}

static uint64_t wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* x-vsr-cache-control (request_controls.enabled): no-cache (the model
 * answers; a fresh entry under the key is kept unless request_controls.
 * allow_replace), no-store, bypass (neither lookup nor store), max-age=S (an
 * older entry is a miss), ttl=S (at most the configured TTL). */
static void rc_controls(vsr_session_t *s, const vsr_plugin_response_cache_conf_t *rc, uint64_t *ttl_ms)
{
    const vsr_header_t *h = find_header(s->headers, s->n_headers,
                                        rc->control_header ? rc->control_header : "x-vsr-cache-control");
    if (h == NULL)
        return;
    unsigned allowed = rc->allowed ? rc->allowed : ~0u;
    vsr_slice_t rest = h->value;
    while (rest.p) {
        vsr_slice_t t = vsr_slice_trim(vsr_slice_split(rest, ',', &rest));
        vsr_slice_t val = VSR_SLICE_NULL;
        vsr_slice_t name = vsr_slice_trim(vsr_slice_split(t, '=', &val));
        uint64_t n = 0;
        int num = val.p && val.len > 0 && val.len <= 9;
        for (size_t i = 0; num && i < val.len; i++) {
            num = val.p[i] >= '0' && val.p[i] <= '9';
            n = n * 10 + (uint64_t)(val.p[i] - '0');
        }
        if (vsr_slice_case_eq_cstr(name, "no-cache") && (allowed & VSR_RC_CTL_NO_CACHE))
            s->rc_revalidate = 1;
        else if (vsr_slice_case_eq_cstr(name, "no-store") && (allowed & VSR_RC_CTL_NO_STORE))
            s->rc_store = 0;
        else if (vsr_slice_case_eq_cstr(name, "bypass") && (allowed & VSR_RC_CTL_BYPASS))
            s->rc_lookup = s->rc_store = 0;
        else if (vsr_slice_case_eq_cstr(name, "max-age") && num && (allowed & VSR_RC_CTL_MAX_AGE))
            s->rc_max_age_ms = n ? n * 1000 : 1;
        else if (vsr_slice_case_eq_cstr(name, "ttl") && num && n > 0 && (allowed & VSR_RC_CTL_TTL)) {
            if (rc->max_ttl_seconds > 0 && n > rc->max_ttl_seconds)
                n = rc->max_ttl_seconds;
            *ttl_ms = VSR_MIN(n * 1000, *ttl_ms); /* shorter than the operator's, never longer */
        }
    }
}

static const vsr_effect_t *rc_lookup_step(vsr_session_t *s);
static const vsr_effect_t *rc_after_lookup(vsr_session_t *s);

static void rc_resume(vsr_session_t *s, const vsr_effect_t *eff)
{
    if (eff->pending)
        return;
    s->pending = 0;
    s->opts.ports->resume(s->opts.ports_ud, s, eff); /* the session may be gone on return */
}

static float *rc_vec(vsr_session_t *s)
{
    if (s->rc_vec == NULL)
        s->rc_vec = vsr_pool_alloc(&s->pool, VSR_CACHE_DIM * sizeof(float));
    return s->rc_vec;
}

static void rc_embed_done(void *ud, int status, const vsr_runtime_result_t *results, size_t n)
{
    vsr_session_t *s = ud;
    int ok = 0;
    for (size_t i = 0; status == VSR_OK && i < n && !ok; i++)
        ok = results[i].id && strcmp(results[i].id, "rc") == 0 && results[i].status == VSR_OK &&
             vsr__rc_read_embedding(results[i].result, rc_vec(s), VSR_CACHE_DIM) == VSR_OK;
    if (ok)
        s->rc_q.embedding = s->rc_vec;
    else /* no embedding: no semantic lookup, and nothing stored that a lookup could not find */
        s->rc_lookup = s->rc_store = 0;
    port_wait_done(s);
}

/* Prepares the request's cache work; NULL when there is none, else the
 * effect (pending, or a hit). */
static const vsr_effect_t *cache_start(vsr_session_t *s)
{
    const vsr_config_t *cfg = s->e->cfg;
    const vsr_ports_t *ports = s->opts.ports;
    const vsr_plugin_response_cache_conf_t *rc = rc_conf_of(s->decision);
    if (rc == NULL || !cfg->rc_store.enabled || s->ep != EP_CHAT || ports == NULL || ports->cache_lookup == NULL ||
        ports->cache_store == NULL)
        return NULL;
    if (s->no_chat_form)
        return NULL; /* the key, made of the chat form, would not tell apart two requests that differ in a document */
    s->rc_conf = rc;
    s->rc_lookup = s->rc_store = 1;
    uint64_t ttl_ms = (rc->has_ttl_seconds ? rc->ttl_seconds : cfg->rc_store.ttl_seconds) * 1000;
    if (rc->request_controls)
        rc_controls(s, rc, &ttl_ms);
    if (s->rc_revalidate && !s->rc_store)
        s->rc_lookup = 0; /* nothing to protect */
    vsr_slice_t scope = VSR_SLICE_NULL;
    int scope_kind = rc->has_scope ? rc->scope
                     : s->opts.listener && (s->opts.listener->api_keys.n || s->opts.listener->n_key_entries)
                         ? VSR_RC_SCOPE_API_KEY
                         : VSR_RC_SCOPE_GLOBAL;
    if (scope_kind == VSR_RC_SCOPE_USER) {
        vsr_signal_input_t in = {0};
        identity(s, &in);
        if (!in.identity_present) /* nobody to keep it for: neither read nor write */
            return NULL;
        char h[VSR_CONFIG_HASH_LEN];
        vsr_config_hash(in.user_id.p, in.user_id.len, h);
        scope = pool_printf(&s->pool, "u:%.23s", h + 7); /* 92 bits of the user id's hash */
    } else if (scope_kind == VSR_RC_SCOPE_API_KEY) {
        if (s->opts.api_key.len == 0) /* no key presented: nobody to keep it for */
            return NULL;
        char h[VSR_CONFIG_HASH_LEN];
        vsr_config_hash(s->opts.api_key.p, s->opts.api_key.len, h);
        scope = pool_printf(&s->pool, "k:%.23s", h + 7); /* 92 bits of the key's hash */
    }
    if (!s->rc_lookup && !s->rc_store)
        return NULL;
    vsr_slice_t partition =
        pool_printf(&s->pool, "d=%s|m=%s|e=%s|mr=%s|pr=%s|po=%s", s->decision->name,
                    s->d_model ? s->d_model->name : "", rc->cache_epoch ? rc->cache_epoch : "",
                    rc->model_revision ? rc->model_revision : "", rc->prompt_revision ? rc->prompt_revision : "",
                    rc->policy_revision ? rc->policy_revision : "");
    /* the request-controls header says how to cache, not what to answer */
    vsr_slice_t control = rc->control_header ? vsr_slice_cstr(rc->control_header) : VSR_SLICE_NULL;
    vsr__rc_key(&s->json, s->chat.last_user, s->headers, s->n_headers, s->name, partition, scope, control, s->rc_key,
                s->rc_ctx);
    /* a semantic hit shares everything with the request but its last user
     * message: the system prompt, the earlier turns, the sampling fields */
    partition = pool_printf(&s->pool, "%.*s|c=%.23s", (int)partition.len, partition.p, s->rc_ctx + 7);
    s->rc_q = (vsr_cache_query_t){.key = vsr_slice_cstr(s->rc_key),
                                  .scope = scope,
                                  .partition = partition,
                                  /* the store's threshold is not cascaded (as in the reference) */
                                  .threshold = rc->has_similarity_threshold ? rc->similarity_threshold
                                                                            : VSR_RC_DEFAULT_THRESHOLD,
                                  .exact = rc->mode != VSR_RC_SEMANTIC,
                                  .ttl_ms = ttl_ms};
    s->ev.cache_hit = 0;
    if (rc->mode == VSR_RC_EXACT || s->chat.last_user < 0 || ports->runtime_call == NULL) {
        if (rc->mode == VSR_RC_SEMANTIC)
            return NULL; /* nothing to embed: no semantic entry to find or make */
        return rc_lookup_step(s);
    }
    /* the last user message's embedding, from the runtime */
    vsr_buf_t b;
    vsr_buf_init(&b, 0);
    vsr_buf_t text;
    vsr_buf_init(&text, 0);
    vsr_json_append_client_text(&text, s->chat.messages[s->chat.last_user].text, 16384); /* the model reads less */
    vsr_buf_append_cstr(&b, "{\"input\":[");
    vsr_buf_append_json_string(&b, vsr_buf_slice(&text));
    vsr_buf_append_cstr(&b, "]}");
    vsr_buf_free(&text);
    vsr_runtime_task_t task = {"rc", "embed", vsr_pool_dup_slice(&s->pool, vsr_buf_slice(&b))};
    vsr_buf_free(&b);
    vsr_runtime_bundle_t bundle = {&task, 1};
    uint64_t deadline = s->opts.deadline_ms ? s->opts.deadline_ms : rc_now(s) + VSR_SESSION_WAIT_DEFAULT_MS;
    port_wait_begin(s, 1, rc_lookup_step);
    return port_wait_end(s, ports->runtime_call(s->opts.ports_ud, &bundle, deadline, rc_embed_done, s));
}

static const vsr_effect_t *rc_lookup_step(vsr_session_t *s)
{
    if (!s->rc_lookup)
        return dispatch(s);
    port_wait_begin(s, 2, rc_after_lookup);
    s->rc_rq = s->rc_q;
    if (s->rc_revalidate) { /* is there an entry under this very key? */
        s->rc_rq.exact = 1;
        s->rc_rq.embedding = NULL;
        s->rc_rq.revalidate = 1;
    }
    return port_wait_end(s, s->opts.ports->cache_lookup(s->opts.ports_ud, &s->rc_rq, store_done, s));
}

/* A hit answers from the store; anything else goes on to the model. */
static const vsr_effect_t *rc_after_lookup(vsr_session_t *s)
{
    uint64_t stored;
    vsr_slice_t json;
    if (s->rc_revalidate) {
        /* no-cache: the model answers; its answer replaces a fresh entry only where the operator allows */
        if (s->rc_status == VSR_OK && !s->rc_conf->allow_replace)
            s->rc_store = 0;
        return dispatch(s);
    }
    if (s->rc_status != VSR_OK || vsr__rc_parse_stored(s->rc_value, &stored, &json) != VSR_OK ||
        (s->rc_max_age_ms && wall_ms() > stored + s->rc_max_age_ms))
        return dispatch(s);
    s->ev.cache_hit = 1;
    s->ev.cache_similarity = s->rc_similarity;
    s->rc_store = 0;
    vsr_slice_t ctype = VSR_SLICE_LIT("application/json"), body = json;
    if (s->chat.stream) {
        vsr_buf_t b;
        vsr_buf_init(&b, 0);
        if (vsr__rc_replay_sse(json, s->include_usage, &b) != VSR_OK) {
            vsr_buf_free(&b);
            return dispatch(s);
        }
        body = keep_buf(s, &b);
        vsr_buf_free(&b);
        ctype = VSR_SLICE_LIT("text/event-stream");
    }
    vsr_header_t extra[6];
    size_t n = 0;
    extra[n++] = (vsr_header_t){VSR_SLICE_LIT("x-vsr-cache-hit"), VSR_SLICE_LIT("true")};
    if (s->ev.debug)
        extra[n++] = (vsr_header_t){VSR_SLICE_LIT("x-vsr-cache-similarity"),
                                    pool_fixed4(&s->pool, s->rc_similarity)};
    if (s->ev.recipe)
        extra[n++] = (vsr_header_t){VSR_SLICE_LIT("x-vsr-selected-recipe"), vsr_slice_cstr(s->ev.recipe)};
    extra[n++] = (vsr_header_t){VSR_SLICE_LIT("x-vsr-selected-decision"), vsr_slice_cstr(s->ev.decision)};
    s->ev.routing_us = vsr_now_us_exact() - s->t0;
    return immediate(s, 200, ctype, body, VSR_PATH_CACHE, extra, n);
}

/* The answer, complete: kept when it is one to keep. */
static void mem_keep(vsr_session_t *s);

static void rc_keep(vsr_session_t *s)
{
    if (s->rg->on && !s->rg->result)
        return; /* kept once the scan lets it through */
    mem_keep(s);
    if (!s->rc_store || s->rc_over || s->resp_status != 200 || s->rc_acc.len == 0)
        return;
    vsr_buf_t v;
    vsr_buf_init(&v, RC_MAX_VALUE + 64);
    if (vsr__rc_stored_form(s->rc_acc.data, s->rc_acc.len, s->rc_sse, wall_ms(), &v) == VSR_OK)
        s->opts.ports->cache_store(s->opts.ports_ud, &s->rc_q, vsr_buf_slice(&v));
    vsr_buf_free(&v);
    s->rc_store = 0;
}

static void rc_feed(vsr_session_t *s, const char *p, size_t n)
{
    if ((s->rc_store || s->mem_store) && !s->rc_over && n && vsr_buf_append(&s->rc_acc, p, n) != VSR_OK)
        s->rc_over = 1;
}

/* ---- the decision's request graph (graph/: a Looper algorithm) ---- */

static void *gport_call(void *ud, const vsr_graph_call_t *c, uint64_t deadline_ms, vsr_graph_call_done_fn done,
                        void *done_ud)
{
    vsr_session_t *s = ud;
    return s->opts.ports->model_call(s->opts.ports_ud, c, deadline_ms, done, done_ud);
}

static void gport_cancel(void *ud, void *handle)
{
    vsr_session_t *s = ud;
    if (s->opts.ports->model_cancel)
        s->opts.ports->model_cancel(s->opts.ports_ud, handle);
}

static uint64_t gport_now(void *ud)
{
    vsr_session_t *s = ud;
    return vsr__ports_now(s->opts.ports, s->opts.ports_ud);
}

static void add_looper_headers(vsr_session_t *s, hlist_t *h, const vsr_graph_outcome_t *o)
{
    if (o->model)
        hl_add(&s->pool, h, VSR_SLICE_LIT("x-vsr-looper-model"), vsr_slice_cstr(o->model));
    hl_add(&s->pool, h, VSR_SLICE_LIT("x-vsr-looper-models-used"), vsr_slice_cstr(o->models_used));
    hl_add(&s->pool, h, VSR_SLICE_LIT("x-vsr-looper-iterations"), pool_u64(&s->pool, o->iterations, 0));
    hl_add(&s->pool, h, VSR_SLICE_LIT("x-vsr-looper-algorithm"), vsr_slice_cstr(o->algorithm));
    hl_add(&s->pool, h, VSR_SLICE_LIT("x-vsr-looper-latency-ms"), pool_u64(&s->pool, o->latency_ms, 0));
    if (o->prompt_tokens)
        hl_add(&s->pool, h, VSR_SLICE_LIT("x-vsr-looper-prompt-tokens"), pool_u64(&s->pool, o->prompt_tokens, 0));
    if (o->completion_tokens)
        hl_add(&s->pool, h, VSR_SLICE_LIT("x-vsr-looper-completion-tokens"),
               pool_u64(&s->pool, o->completion_tokens, 0));
    if (o->prompt_tokens + o->completion_tokens)
        hl_add(&s->pool, h, VSR_SLICE_LIT("x-vsr-looper-total-tokens"),
               pool_u64(&s->pool, o->prompt_tokens + o->completion_tokens, 0));
}

/* The graph is over: its answer, or its final hop as the routed call. */
static const vsr_effect_t *graph_effect(vsr_session_t *s, const vsr_graph_outcome_t *o)
{
    s->ev.looper = o;
    const vsr_algo_conf_t *a = &s->decision->algo;
    if (o->status >= 500 && a->on_error && !strcmp(a->on_error, "fallback") && s->decision->n_model_refs) {
        /* algorithm.on_error: fallback (ref §3.8): the first modelRef answers */
        const vsr_model_ref_conf_t *ref = &s->decision->model_refs[0];
        const vsr_model_conf_t *m = vsr_config_find_model(s->e->cfg, vsr_slice_cstr(ref->model));
        if (m && m->n_backends) {
            s->looper_fell_back = 1;
            if (aim(s, m, ref->lora_name) != VSR_OK)
                return untranslatable(s, m);
            return &s->eff;
        }
    }
    if (o->status) {
        hlist_t h = {0};
        add_looper_headers(s, &h, o);
        if (o->status < 400 && o->model) {
            s->ev.selected_model = o->model;
            hl_add(&s->pool, &h, VSR_SLICE_LIT("x-vsr-selected-model"), vsr_slice_cstr(o->model));
        }
        if (s->ev.recipe)
            hl_add(&s->pool, &h, VSR_SLICE_LIT("x-vsr-selected-recipe"), vsr_slice_cstr(s->ev.recipe));
        hl_add(&s->pool, &h, VSR_SLICE_LIT("x-vsr-selected-decision"), vsr_slice_cstr(s->ev.decision));
        hl_add(&s->pool, &h, VSR_SLICE_LIT("x-vsr-selected-algorithm"), vsr_slice_cstr(s->ev.algorithm));
        return immediate(s, o->status, vsr_slice_cstr(o->content_type), o->body,
                         o->status < 400 ? VSR_PATH_LOOPER : VSR_PATH_ERROR, h.v, h.n);
    }
    s->final_body = o->final_body;
    if (aim(s, o->final_model, o->final_lora) != VSR_OK)
        return untranslatable(s, o->final_model);
    return &s->eff;
}

/* A graph predicate's signal: its result when a decision needed it, else
 * evaluated now when it needs no model (a model signal no decision
 * referenced was never computed: not matched). */
static int graph_signal(void *ud, const char *type, const char *name)
{
    vsr_session_t *s = ud;
    route_ctx_t *rc = &s->rc;
    if (!s->routed || rc->rs == NULL)
        return 0;
    int i = vsr_signals_find(rc->rs->signals, type, name);
    if (i < 0)
        return 0;
    if (rc->memo_done && rc->memo_done[i])
        return !(rc->unknown && rc->unknown[i]) && rc->memo[i].matched;
    vsr_signal_task_t task;
    if (vsr_signals_task(rc->rs->signals, i, &rc->in, &task) != 0)
        return 0;
    return vsr_signals_eval(rc->rs->signals, i, &rc->in).matched;
}

static void graph_done(void *ud, const vsr_graph_outcome_t *o)
{
    vsr_session_t *s = ud;
    s->pending = 0;
    const vsr_effect_t *eff = graph_effect(s, o);
    s->opts.ports->resume(s->opts.ports_ud, s, eff); /* the session may be gone on return */
}

static const vsr_effect_t *start_graph(vsr_session_t *s)
{
    /* the body every hop starts from: the client's, after the decision's plugins */
    size_t n = 0;
    uint64_t total = 0;
    vsr_slice_t *pieces = vsr_json_edits_apply(&s->edits, s->body, s->body_len, &s->pool, &n, &total);
    char *flat = vsr_pool_alloc(&s->pool, total + 1);
    size_t off = 0;
    for (size_t i = 0; i < n; i++) {
        memcpy(flat + off, pieces[i].p, pieces[i].len);
        off += pieces[i].len;
    }
    int include_usage = 0;
    uint32_t so, iu;
    if (vsr_json_object_get(&s->json, 0, "stream_options", &so) == VSR_OK &&
        vsr_json_type(&s->json, so) == VSR_JSON_OBJECT &&
        vsr_json_object_get(&s->json, so, "include_usage", &iu) == VSR_OK)
        include_usage = vsr_json_bool(&s->json, iu) == 1;
    s->gport = (vsr_graph_port_t){.call = gport_call, .cancel = gport_cancel, .now_ms = gport_now, .ud = s};
    uint64_t deadline = s->opts.deadline_ms ? s->opts.deadline_ms
                                            : vsr__ports_now(s->opts.ports, s->opts.ports_ud) + VSR_SESSION_WAIT_DEFAULT_MS;
    /* the decision's implied budget, compiled with this version */
    const vsr_graph_implied_t *implied = NULL;
    const recipe_state_t *rs = s->recipe ? vsr__engine_recipe(s->e, s->recipe) : NULL;
    if (rs && rs->implied && s->decision >= rs->conf->decisions &&
        s->decision < rs->conf->decisions + rs->conf->n_decisions)
        implied = &rs->implied[s->decision - rs->conf->decisions];
    vsr_graph_opts_t o = {
        .cfg = s->e->cfg,
        .decision = s->decision,
        .body = flat,
        .len = off,
        .stream = s->chat.stream,
        .include_usage = include_usage,
        .pool = &s->pool,
        .port = &s->gport,
        .deadline_ms = deadline,
        .implied = implied,
        .signal = graph_signal,
        .done = graph_done,
        .done_ud = s,
    };
    const vsr_graph_outcome_t *out = NULL;
    const char *why = NULL;
    int rc = vsr_graph_start(&o, &s->graph, &out, &why);
    if (rc == VSR_ERR_INVALID) {
        s->graph = NULL;
        return bad_request(s, why ? why : "the request cannot be run by the decision's algorithm");
    }
    if (rc == VSR_OK)
        return graph_effect(s, out);
    s->pending = 1;
    reset_effect(s);
    s->eff.pending = 1;
    return &s->eff;
}

/* An inference surface other than chat, completions and responses
 * (embeddings, rerank, ...): no signals, no decision, no plugins.  The
 * `model` names a provider model (its backends, credentials and rewrites,
 * as a passthrough); an auto or entrypoint name means the default model,
 * since there is no conversation to route on. */
static const vsr_effect_t *surface_body(vsr_session_t *s, vsr_slice_t name, uint32_t mt, const char *body,
                                        size_t len, uint64_t t0)
{
    const vsr_config_t *cfg = s->e->cfg;
    if (name.len == 0)
        return bad_request(s, "model field is required");
    resolution_t res;
    if (vsr__resolve_model(s->e, name, &res) != VSR_OK)
        return unknown_model(s, name);
    const vsr_model_conf_t *model = res.model;
    const char *lora = NULL;
    if (model == NULL) {
        model = cfg->default_model ? vsr_config_find_model(cfg, vsr_slice_cstr(cfg->default_model))
                                   : vsr_config_default_model(cfg);
        lora = model && cfg->default_model ? cfg->default_lora : NULL;
    }
    if (model == NULL)
        return bad_request(s, "unable to route request: no default model configured");
    if (model->n_backends == 0)
        return no_backends(s, model);
    s->ev.passthrough = res.model != NULL;
    s->body = body;
    s->body_len = len;
    s->name = name;
    s->model_tok = mt;
    s->tried = vsr_pool_alloc(&s->pool, sizeof(const vsr_model_conf_t *) * (cfg->n_models + 1));
    s->ev.routing_us = vsr_now_us_exact() - t0;
    if (aim(s, model, lora) != VSR_OK)
        return untranslatable(s, model);
    return &s->eff;
}

/* ext_proc: what vsr's upstream layer adds in standalone mode, for Envoy
 * to send — the provider's credentials and extra_headers (the model's first
 * backend_ref: Envoy picks the endpoint), and the decision's reliability
 * override as Envoy's per-request headers. */
static void envoy_fields(vsr_session_t *s, hlist_t *set, const vsr_model_conf_t *model)
{
    if (model->n_backends) {
        const vsr_backend_conf_t *b = &model->backends[0];
        if (b->resolved_api_key && b->resolved_api_key[0]) {
            const char *prefix = b->has_auth_prefix ? (b->auth_prefix ? b->auth_prefix : "") : "Bearer";
            hl_add(&s->pool, set, vsr_slice_cstr(b->auth_header ? b->auth_header : "authorization"),
                   prefix[0] ? pool_printf(&s->pool, "%s %s", prefix, b->resolved_api_key)
                             : vsr_slice_cstr(b->resolved_api_key));
        }
        for (size_t i = 0; i < b->n_extra_headers; i++)
            hl_add(&s->pool, set, vsr_slice_cstr(b->extra_headers[i].name), vsr_slice_cstr(b->extra_headers[i].value));
    }
    const vsr_reliability_conf_t *r = s->decision && s->decision->has_reliability ? &s->decision->reliability : NULL;
    if (r == NULL)
        return;
    if (r->has_total_timeout)
        hl_add(&s->pool, set, VSR_SLICE_LIT("x-envoy-upstream-rq-timeout-ms"), pool_u64(&s->pool, r->total_timeout_ms, 0));
    if (r->has_per_try_timeout)
        hl_add(&s->pool, set, VSR_SLICE_LIT("x-envoy-upstream-rq-per-try-timeout-ms"),
               pool_u64(&s->pool, r->per_try_timeout_ms, 0));
    if (r->has_retry_count)
        hl_add(&s->pool, set, VSR_SLICE_LIT("x-envoy-max-retries"), pool_u64(&s->pool, r->retry_count, 0));
    if (r->retry_on && r->retry_on[0])
        hl_add(&s->pool, set, VSR_SLICE_LIT("x-envoy-retry-on"), vsr_slice_cstr(r->retry_on));
    if (r->n_retriable_status_codes) {
        vsr_buf_t b;
        vsr_buf_init(&b, 0);
        for (size_t i = 0; i < r->n_retriable_status_codes; i++)
            vsr_buf_printf(&b, "%s%u", i ? "," : "", r->retriable_status_codes[i]);
        hl_add(&s->pool, set, VSR_SLICE_LIT("x-envoy-retriable-status-codes"), keep_buf(s, &b));
        vsr_buf_free(&b);
    }
}

/* The Messages client's own body, its `model` set to id, into up_body: what
 * a Messages backend gets when no translation stands between them. */
static int messages_own_body(vsr_session_t *s, vsr_slice_t id)
{
    vsr_json_t j;
    vsr_buf_reset(&s->up_body);
    int rc = vsr_json_parse(&j, s->rq_body.p ? s->rq_body.p : "", s->rq_body.len, NULL);
    uint32_t mt = 0;
    if (rc == VSR_OK && vsr_json_object_get(&j, 0, "model", &mt) == VSR_OK) {
        vsr_buf_append(&s->up_body, j.src, j.toks[mt].start);
        vsr_buf_append_json_string(&s->up_body, id);
        rc = vsr_buf_append(&s->up_body, j.src + j.toks[mt].end, j.len - j.toks[mt].end);
    } else if (rc == VSR_OK) {
        rc = VSR_ERR_INVALID; /* decoded once already: it has a model */
    }
    vsr_json_free(&j);
    return rc;
}

/* The chat request as the plugins and the model rewrite left it (aim's
 * effect so far), whole, in scratch. */
static const vsr_buf_t *edited_chat(vsr_session_t *s)
{
    vsr_buf_reset(&s->scratch);
    if (s->eff.body_replaced)
        for (size_t i = 0; i < s->eff.n_body; i++)
            vsr_buf_append_slice(&s->scratch, s->eff.body[i]);
    else
        vsr_buf_append(&s->scratch, s->body, s->body_len);
    return &s->scratch;
}

/* Member key k of object 0 of `in`, in object 0 of j: its value token, or 0. */
static uint32_t same_member(vsr_session_t *s, const vsr_json_t *in, uint32_t k, const vsr_json_t *j)
{
    vsr_slice_t name = VSR_SLICE_NULL;
    uint32_t v;
    if (vsr_json_string(in, k, &s->pool, &name) != VSR_OK ||
        vsr__json_object_get_n(j, 0, name.p ? name.p : "", name.len, &v) != VSR_OK)
        return 0;
    return v;
}

/* A Messages client and a Messages model: the client's own body (nothing
 * the chat form lacks is lost: thinking, cache_control, documents, server
 * tools), its model set to id, and the plugins' edits carried over: every
 * top-level field whose Messages form the edits changed (the edited chat
 * request against the client's, each translated) replaces the client's, or
 * is added, or removed.  Into up_body. */
static int messages_passthrough(vsr_session_t *s, vsr_slice_t id, const vsr_buf_t *edited)
{
    if (s->n_saved_edits == 0)
        return messages_own_body(s, id);
    vsr_buf_t me, m0;
    vsr_buf_init(&me, XLATE_MAX_OUT);
    vsr_buf_init(&m0, XLATE_MAX_OUT);
    vsr_json_t jc = {0}, je = {0}, j0 = {0};
    vsr_json_edits_t ed;
    vsr_json_edits_init(&ed);
    vsr_anthropic_error_t aerr;
    int rc = vsr_anthropic_request_from_chat(edited->data, edited->len, NULL, &me, &aerr);
    if (rc == VSR_OK)
        rc = vsr_anthropic_request_from_chat(s->body, s->body_len, NULL, &m0, &aerr);
    int pc = vsr_json_parse(&jc, s->rq_body.p ? s->rq_body.p : "", s->rq_body.len, NULL);
    int pe = vsr_json_parse(&je, me.data ? me.data : "", me.len, NULL);
    int p0 = vsr_json_parse(&j0, m0.data ? m0.data : "", m0.len, NULL);
    if (rc == VSR_OK && (pc != VSR_OK || pe != VSR_OK || p0 != VSR_OK))
        rc = VSR_ERR_INVALID;
    uint32_t mt = 0;
    if (rc == VSR_OK && vsr_json_object_get(&jc, 0, "model", &mt) == VSR_OK) {
        size_t n = vsr_json_string_size(id);
        char *lit = vsr_pool_alloc(&s->pool, n);
        vsr_json_string_put(lit, id);
        rc = vsr_json_edit_replace(&ed, &jc, mt, vsr_slice(lit, n));
    }
    /* fields the edits changed or added */
    for (uint32_t i = 0, k = 1; rc == VSR_OK && i < je.toks[0].count; i++, k = je.toks[k + 1].next) {
        if (vsr_json_string_eq(&je, k, VSR_SLICE_LIT("model")))
            continue;
        uint32_t v0 = same_member(s, &je, k, &j0), vc = same_member(s, &je, k, &jc);
        vsr_slice_t val = vsr_pool_dup_slice(&s->pool, vsr_json_raw(&je, k + 1));
        if (v0 && vsr_slice_eq(val, vsr_json_raw(&j0, v0)))
            continue; /* untouched: the client's own stays */
        if (vc) {
            rc = vsr_json_edit_replace(&ed, &jc, vc, val);
        } else {
            vsr_slice_t key = vsr_json_raw(&je, k);
            char *m = vsr_pool_alloc(&s->pool, key.len + 1 + val.len);
            memcpy(m, key.p, key.len);
            m[key.len] = ':';
            memcpy(m + key.len + 1, val.p, val.len);
            rc = vsr_json_edit_insert_member(&ed, &jc, 0, vsr_slice(m, key.len + 1 + val.len));
        }
    }
    /* fields the edits removed */
    for (uint32_t i = 0, k = 1; rc == VSR_OK && i < j0.toks[0].count; i++, k = j0.toks[k + 1].next) {
        uint32_t vc = same_member(s, &j0, k, &jc);
        if (vc && !same_member(s, &j0, k, &je) && !vsr_json_string_eq(&j0, k, VSR_SLICE_LIT("model")))
            rc = vsr_json_edit_remove_member(&ed, &jc, 0, vc - 1);
    }
    vsr_buf_reset(&s->up_body);
    if (rc == VSR_OK) {
        size_t n = 0;
        uint64_t total = 0;
        vsr_slice_t *pieces = vsr_json_edits_apply(&ed, jc.src, jc.len, &s->pool, &n, &total);
        for (size_t i = 0; i < n && rc == VSR_OK; i++)
            rc = vsr_buf_append_slice(&s->up_body, pieces[i]);
    }
    vsr_json_edits_free(&ed);
    vsr_json_free(&jc);
    vsr_json_free(&je);
    vsr_json_free(&j0);
    vsr_buf_free(&me);
    vsr_buf_free(&m0);
    return rc;
}

/* A token rate-limit rule charges a stream by its usage chunk: a chat
 * client's stream to an OpenAI-format backend that did not ask for one gets
 * stream_options.include_usage added, and the chunk is taken out of what
 * the client sees (strip_usage_chunk).  Returns 1 when the edit was added. */
static int ask_stream_usage(vsr_session_t *s, const vsr_model_conf_t *model)
{
    const vsr_config_t *cfg = s->e->cfg;
    const vsr_json_t *j = &s->json;
    int tokens = 0;
    for (size_t i = 0; i < cfg->n_ratelimit_rules && !tokens; i++)
        tokens = cfg->ratelimit_rules[i].tokens_per_unit > 0;
    if (!tokens || s->ep != EP_CHAT || s->anthropic_in || s->responses_in || !s->chat.stream || s->include_usage ||
        anthropic_model(model) || s->final_body.len || s->count_tokens)
        return 0;
    uint32_t so, iu;
    if (vsr_json_object_get(j, 0, "stream_options", &so) != VSR_OK)
        return vsr_json_edit_insert_member(&s->edits, j, 0,
                                           VSR_SLICE_LIT("\"stream_options\":{\"include_usage\":true}")) == VSR_OK;
    if (vsr_json_type(j, so) != VSR_JSON_OBJECT)
        return vsr_json_edit_replace(&s->edits, j, so, VSR_SLICE_LIT("{\"include_usage\":true}")) == VSR_OK;
    if (vsr_json_object_get(j, so, "include_usage", &iu) == VSR_OK)
        return vsr_json_edit_replace(&s->edits, j, iu, VSR_SLICE_LIT("true")) == VSR_OK;
    return vsr_json_edit_insert_member(&s->edits, j, so, VSR_SLICE_LIT("\"include_usage\":true")) == VSR_OK;
}

/* Points the request at one candidate model: its id in the body (the
 * client's bytes around it, plus the plugins' edits), x-selected-model, the
 * plan.  Used for the first choice and for every fallback candidate.  With
 * a LoRA, the LoRA's name is both the id sent upstream and the selected
 * model (ref §1.11). */
static int aim(vsr_session_t *s, const vsr_model_conf_t *model, const char *lora)
{
    const char *upstream_id = lora ? lora : model->provider_model_id;
    const vsr_config_t *cfg = s->e->cfg;
    const vsr_json_t *j = &s->json;
    reset_effect(s);
    s->edits.n = 0;
    for (size_t i = 0; i < s->n_saved_edits; i++)
        vsr_json_edits_add(&s->edits, s->saved_edits[i].start, s->saved_edits[i].end, s->saved_edits[i].text);
    vsr_slice_t id = vsr_slice_cstr(upstream_id);
    uint32_t mt = s->model_tok;
    if (mt && !(vsr_slice_eq(s->name, id) && !j->toks[mt].escaped)) {
        size_t n = vsr_json_string_size(id);
        char *lit = vsr_pool_alloc(&s->pool, n);
        vsr_json_string_put(lit, id);
        vsr_json_edit_replace(&s->edits, j, mt, vsr_slice(lit, n));
    }
    s->usage_added = ask_stream_usage(s, model);
    if (s->final_body.len) { /* a request graph's final hop: its own body */
        s->eff.body = &s->final_body;
        s->eff.n_body = 1;
        s->eff.body_len = s->final_body.len;
        s->eff.body_replaced = 1;
    } else if (s->edits.n) {
        s->eff.body = vsr_json_edits_apply(&s->edits, s->body, s->body_len, &s->pool, &s->eff.n_body, &s->eff.body_len);
        s->eff.body_replaced = 1;
    } else if (s->anthropic_in || s->responses_in) { /* the chat form of the client's body, never its own bytes */
        s->eff.body = vsr_pool_alloc(&s->pool, sizeof(vsr_slice_t));
        s->eff.body[0] = vsr_slice(s->body, s->body_len);
        s->eff.n_body = 1;
        s->eff.body_len = s->body_len;
        s->eff.body_replaced = 1;
    }
    int to_messages = anthropic_model(model);
    if (s->no_chat_form && !to_messages) { /* what the chat form left out cannot be left out silently */
        s->aim_error = s->no_chat_form;
        return VSR_ERR_INVALID;
    }
    if (s->count_tokens) {
        /* the client's body as it came, to the same endpoint of a Messages backend */
        if (!to_messages || messages_own_body(s, id) != VSR_OK) {
            s->aim_error = "count_tokens is forwarded to api_format anthropic models only";
            return VSR_ERR_INVALID;
        }
        s->eff.body = vsr_pool_alloc(&s->pool, sizeof(vsr_slice_t));
        s->eff.body[0] = vsr_buf_slice(&s->up_body);
        s->eff.n_body = 1;
        s->eff.body_len = s->up_body.len;
        s->eff.body_replaced = 1;
        s->eff.path = VSR_SLICE_LIT("/v1/messages/count_tokens");
    } else if (to_messages && s->anthropic_in && !s->final_body.len) {
        /* one protocol both sides: the client's own body, with vsr's edits */
        if (messages_passthrough(s, id, edited_chat(s)) != VSR_OK) {
            s->aim_error = "the plugins' edits could not be carried over to the Messages body";
            return VSR_ERR_INVALID;
        }
        s->eff.body = vsr_pool_alloc(&s->pool, sizeof(vsr_slice_t));
        s->eff.body[0] = vsr_buf_slice(&s->up_body);
        s->eff.n_body = 1;
        s->eff.body_len = s->up_body.len;
        s->eff.body_replaced = 1;
        s->eff.path = VSR_SLICE_LIT("/v1/messages");
    } else if (to_messages) {
        /* the chat request, as the plugins and the model rewrite left it, in Messages form */
        const vsr_buf_t *chat = edited_chat(s);
        if (s->ep == EP_COMPLETIONS) { /* a completions request: its chat form first (in_body is free) */
            char cerr[160];
            vsr_buf_reset(&s->in_body);
            if (vsr_completions_request_to_chat(s->scratch.data, s->scratch.len, &s->in_body, cerr, sizeof(cerr)) !=
                VSR_OK) {
                s->aim_error = vsr_pool_strndup(&s->pool, cerr, strlen(cerr));
                return VSR_ERR_INVALID;
            }
            chat = &s->in_body;
        }
        vsr_buf_reset(&s->up_body);
        vsr_anthropic_error_t aerr;
        if (vsr_anthropic_request_from_chat(chat->data, chat->len, NULL, &s->up_body, &aerr) != VSR_OK) {
            s->aim_error = vsr_pool_strndup(&s->pool, aerr.message, strlen(aerr.message));
            return VSR_ERR_INVALID;
        }
        s->eff.body = vsr_pool_alloc(&s->pool, sizeof(vsr_slice_t));
        s->eff.body[0] = vsr_buf_slice(&s->up_body);
        s->eff.n_body = 1;
        s->eff.body_len = s->up_body.len;
        s->eff.body_replaced = 1;
        s->eff.path = VSR_SLICE_LIT("/v1/messages");
    } else if (s->anthropic_in || s->responses_in) {
        s->eff.path = VSR_SLICE_LIT("/v1/chat/completions");
    }

    /* the upstream request's fields: removals first, then sets */
    slist_t rm = {0};
    hlist_t set = {0};
    sl_add(&s->pool, &rm, VSR_SLICE_LIT("authorization")); /* client credentials never reach a provider */
    sl_add(&s->pool, &rm, VSR_SLICE_LIT("api-key"));
    for (size_t i = 0; i < s->n_plugin_rm; i++)
        sl_add(&s->pool, &rm, s->plugin_rm[i]);
    if (s->anthropic_in && !to_messages) { /* a Messages client's protocol fields mean nothing to a chat backend */
        sl_add(&s->pool, &rm, VSR_SLICE_LIT("anthropic-version"));
        sl_add(&s->pool, &rm, VSR_SLICE_LIT("anthropic-beta"));
    }
    hl_add(&s->pool, &set, VSR_SLICE_LIT("x-selected-model"), vsr_slice_cstr(model->name));
    hl_add(&s->pool, &set, VSR_SLICE_LIT("accept-encoding"), VSR_SLICE_LIT("identity"));
    if (s->opts.envoy)
        envoy_fields(s, &set, model);
    for (size_t i = 0; i < s->n_plugin_set; i++)
        hl_add(&s->pool, &set, s->plugin_set[i].name, s->plugin_set[i].value);
    s->eff.remove = rm.v;
    s->eff.n_remove = rm.n;
    s->eff.set = set.v;
    s->eff.n_set = set.n;
    s->eff.clear_route_cache = cfg->clear_route_cache;

    s->tried[s->n_tried++] = model;
    s->ev.selected_model = lora ? lora : model->name;
    s->ev.upstream_model = upstream_id;
    s->plan.kind = VSR_PLAN_CALL;
    s->plan.model = model;
    s->plan.route_key = vsr_slice_cstr(model->name);
    s->plan.rewrite_prefix = 1;
    s->plan.reliability = s->decision && s->decision->has_reliability ? &s->decision->reliability : NULL;
    s->plan.max_hops = 1;
    s->ev.path = VSR_PATH_UPSTREAM;
    return VSR_OK;
}

/* The request cannot be written for the model aimed at (aim_error). */
static const vsr_effect_t *untranslatable(vsr_session_t *s, const vsr_model_conf_t *m)
{
    s->ev.selected_model = m->name;
    return error_reply(s, 400, "invalid_request_error", NULL,
                       pool_printf(&s->pool, "the request cannot be sent to model \"%.200s\" (api_format %s): %s",
                                   m->name, m->api_format ? m->api_format : "openai",
                                   s->aim_error ? s->aim_error : "untranslatable"));
}

const vsr_effect_t *vsr_session_fallback(vsr_session_t *s, int (*allow)(void *ud, const vsr_model_conf_t *m),
                                         void *ud)
{
    const vsr_decision_conf_t *d = s->decision;
    if (d == NULL || s->plan.kind != VSR_PLAN_CALL || s->n_tried == 0 || s->final_body.len)
        return NULL; /* a graph's final hop carries its own prompt: no other candidate takes it */
    for (size_t i = 0; i < d->n_model_refs; i++) {
        const vsr_model_ref_conf_t *ref = &d->model_refs[i];
        const vsr_model_conf_t *m = vsr_config_find_model(s->e->cfg, vsr_slice_cstr(ref->model));
        if (m == NULL || m->n_backends == 0)
            continue; /* nothing to call */
        int seen = 0;
        for (size_t k = 0; k < s->n_tried && !seen; k++)
            seen = s->tried[k] == m; /* a model already tried is never revisited */
        if (seen || (allow && !allow(ud, m)))
            continue;
        if (aim(s, m, ref->lora_name) != VSR_OK) {
            s->tried[s->n_tried++] = m; /* this candidate cannot take the request: the next one may */
            continue;
        }
        s->ev.fallbacks++;
        return &s->eff;
    }
    return NULL;
}

void vsr_session_fallback_policy(const vsr_session_t *s, vsr_fallback_conf_t *out)
{
    vsr_config_effective_fallback(s->e->cfg, s->recipe, s->decision, out);
}

const vsr_model_conf_t *vsr_session_shadow(const vsr_session_t *s, const vsr_plugin_shadow_dispatch_conf_t **conf)
{
    if (s == NULL || s->decision == NULL || s->answered || s->plan.kind != VSR_PLAN_CALL)
        return NULL;
    for (size_t i = 0; i < s->decision->n_plugins; i++) {
        const vsr_plugin_conf_t *p = &s->decision->plugins[i];
        if (p->kind == VSR_PLUGIN_SHADOW_DISPATCH && p->enabled && p->u.shadow_dispatch.model) {
            *conf = &p->u.shadow_dispatch;
            return vsr_config_find_model(s->e->cfg, vsr_slice_cstr(p->u.shadow_dispatch.model));
        }
    }
    return NULL;
}

const vsr_model_conf_t *const *vsr_session_tried(const vsr_session_t *s, size_t *n)
{
    *n = s->n_tried;
    return s->tried;
}

/* ---- response ---- */

static void add_family_headers(vsr_session_t *s, hlist_t *h)
{
    /* x-vsr-matched-<family>: the matched names of each family, comma-separated */
    for (size_t i = 0; i < s->ev.n_signals; i++) {
        const char *fam = s->ev.signals[i].family;
        int seen = 0;
        for (size_t k = 0; k < i && !seen; k++)
            seen = strcmp(s->ev.signals[k].family, fam) == 0;
        if (seen)
            continue;
        vsr_buf_t b;
        vsr_buf_init(&b, 0);
        for (size_t k = i; k < s->ev.n_signals; k++) {
            if (strcmp(s->ev.signals[k].family, fam) != 0)
                continue;
            int dup = 0; /* two authz bindings may report one role */
            for (size_t m = i; m < k && !dup; m++)
                dup = strcmp(s->ev.signals[m].family, fam) == 0 && strcmp(s->ev.signals[m].name, s->ev.signals[k].name) == 0;
            if (!dup)
                vsr_buf_printf(&b, "%s%s", b.len ? "," : "", s->ev.signals[k].name);
        }
        /* the reference's header for input_modality is x-vsr-matched-input-modality */
        hl_add(&s->pool, h,
               pool_printf(&s->pool, "x-vsr-matched-%s", strcmp(fam, "input_modality") == 0 ? "input-modality" : fam),
               vsr_pool_dup_slice(&s->pool, vsr_buf_slice(&b)));
        vsr_buf_free(&b);
    }
}

/* The decision's retention directive (emits), the fields it sets only. */
static void add_retention_headers(vsr_session_t *s, hlist_t *h, const vsr_retention_conf_t *r)
{
    if (!r->present)
        return;
    if (r->has_drop)
        hl_add(&s->pool, h, VSR_SLICE_LIT("x-vsr-retention-drop"), vsr_slice_cstr(r->drop ? "true" : "false"));
    if (r->has_ttl_turns)
        hl_add(&s->pool, h, VSR_SLICE_LIT("x-vsr-retention-ttl-turns"), pool_u64(&s->pool, r->ttl_turns, 0));
    if (r->has_keep_current_model)
        hl_add(&s->pool, h, VSR_SLICE_LIT("x-vsr-retention-keep-current-model"),
               vsr_slice_cstr(r->keep_current_model ? "true" : "false"));
    if (r->has_prefer_prefix_retention)
        hl_add(&s->pool, h, VSR_SLICE_LIT("x-vsr-retention-prefer-prefix"),
               vsr_slice_cstr(r->prefer_prefix_retention ? "true" : "false"));
}

/* ---- response_jailbreak (ref §2): the answer scanned by the prompt guard ---- */

/* How long the scan may hold an answer (within the request's deadline). */
#define RG_WAIT_MS 2000
#define RG_BLOCKED_MSG "Response blocked: jailbreak content detected in LLM output"

static const vsr_plugin_response_jailbreak_conf_t *rj_conf_of(const vsr_decision_conf_t *d)
{
    for (size_t i = 0; d && i < d->n_plugins; i++)
        if (d->plugins[i].kind == VSR_PLUGIN_RESPONSE_JAILBREAK && d->plugins[i].enabled)
            return &d->plugins[i].u.response_jailbreak;
    return NULL;
}

/* A 2xx chat-side answer of a decision with the plugin is scanned: block and
 * header hold what the verdict may change (a JSON answer whole: BUFFER; a
 * stream's terminal event: STREAM), none only observes. */
static void rg_begin(vsr_session_t *s, int status, const vsr_header_t *headers, size_t n_headers)
{
    vsr__rguard_t *g = s->rg;
    vsr__rg_reset(g);
    const vsr_plugin_response_jailbreak_conf_t *c = rj_conf_of(s->decision);
    const vsr_ports_t *ports = s->opts.ports;
    if (c == NULL || s->ep != EP_CHAT || status < 200 || status >= 300 || ports == NULL ||
        ports->runtime_call == NULL || ports->resume == NULL)
        return;
    const vsr_header_t *ct = find_header(headers, n_headers, "content-type");
    g->conf = c;
    g->on = 1;
    g->sse = ct && vsr_slice_starts_with(vsr_slice_trim(ct->value), VSR_SLICE_LIT("text/event-stream"));
    g->threshold = c->has_threshold ? c->threshold : s->e->cfg->modules.guard_threshold;
    g->term = s->anthropic_in ? VSR__RG_TERM_MESSAGES : s->responses_in ? VSR__RG_TERM_RESPONSES : VSR__RG_TERM_CHAT;
    if (c->action == VSR_RJ_NONE)
        return;
    if (s->body_mode == VSR_BODY_RELAY) {
        s->body_mode = g->sse ? VSR_BODY_STREAM : VSR_BODY_BUFFER;
        g->own_stream = g->sse;
        g->own_buffer = !g->sse;
    }
    g->withhold = s->body_mode == VSR_BODY_STREAM;
}

static const vsr_effect_t *rg_then(vsr_session_t *s);
static const vsr_effect_t *rg_then_captured(vsr_session_t *s);

static void rg_done(void *ud, int status, const vsr_runtime_result_t *results, size_t n)
{
    vsr_session_t *s = ud;
    vsr__rguard_t *g = s->rg;
    int ok = 0;
    for (size_t i = 0; status == VSR_OK && i < n && !ok; i++)
        ok = results[i].id && strcmp(results[i].id, "rj") == 0 && results[i].status == VSR_OK &&
             vsr_signals_guard_score(results[i].result, &s->pool, &g->score) == VSR_OK;
    if (!ok || rc_now(s) > g->deadline_ms)
        g->result = VSR__RG_ERROR; /* failed or late: fail open */
    else if (g->score < g->threshold)
        g->result = VSR__RG_PASS;
    else
        g->result = g->conf->action == VSR_RJ_BLOCK ? VSR__RG_BLOCKED : VSR__RG_FLAGGED;
    port_wait_done(s);
}

/* The end of the answer: its text goes to the prompt guard; the phase's
 * effect (eff, kept) waits for the verdict (rg_then). */
static const vsr_effect_t *rg_scan(vsr_session_t *s, const vsr_effect_t *eff)
{
    vsr__rguard_t *g = s->rg;
    g->final = *eff;
    vsr_slice_t text = vsr__rg_text(g, &s->pool);
    if (text.len == 0) { /* nothing said (tool calls only): nothing to scan, nothing counted */
        g->result = VSR__RG_PASS;
        const vsr_effect_t *out = rg_then(s);
        s->ev.response_guard = NULL;
        return out;
    }
    vsr_signal_task_t t;
    vsr_signals_guard_task(&s->pool, text, g->conf->method, &t);
    vsr_runtime_task_t task = {"rj", t.type, t.payload};
    vsr_runtime_bundle_t bundle = {&task, 1};
    uint64_t now = rc_now(s);
    uint64_t deadline = now + RG_WAIT_MS;
    if (s->opts.deadline_ms && s->opts.deadline_ms < deadline)
        deadline = s->opts.deadline_ms > now ? s->opts.deadline_ms : now;
    g->t0_us = vsr_now_us();
    g->deadline_ms = deadline;
    port_wait_begin(s, 1, rg_then_captured);
    return port_wait_end(s, s->opts.ports->runtime_call(s->opts.ports_ud, &bundle, deadline, rg_done, s));
}

/* The verdict is in: the answer goes on unchanged, with its warning, or
 * blocked (BUFFER: a 403 in the client's shape; STREAM: the protocol's
 * error event instead of its terminal one). */
static const vsr_effect_t *rg_then(vsr_session_t *s)
{
    vsr__rguard_t *g = s->rg;
    int blocked = g->result == VSR__RG_BLOCKED;
    s->ev.response_guard = vsr__rg_result_names[g->result];
    s->ev.response_guard_score = g->score;
    if (g->result == VSR__RG_FLAGGED)
        s->ev.response_warnings |= VSR__WARN_RESPONSE_JAILBREAK;
    if (g->result == VSR__RG_ERROR)
        vsr_log_debug("routing", "response_jailbreak: the answer's scan failed or came late; it goes out unscanned");
    if (!blocked) {
        rc_keep(s);
        if (g->has_kept) {
            vsr_cache_query_t q = {.key = s->resp_key, .exact = 1, .responses = 1,
                                   .ttl_ms = s->e->cfg->resp_store.ttl_seconds * 1000};
            s->opts.ports->cache_store(s->opts.ports_ud, &q, vsr_buf_slice(&g->kept));
        }
    }
    g->has_kept = 0;
    s->eff = g->final;
    if (s->body_mode == VSR_BODY_STREAM) {
        if (blocked)
            vsr__rg_blocked_event(g, VSR_SLICE_LIT(RG_BLOCKED_MSG), vsr_slice_cstr(s->resp_id),
                                  s->rs_open && s->rs->seq ? s->rs->seq - 1 : 0, &s->out);
        else
            vsr__rg_release(g, &s->out);
        return body_out(s);
    }
    if (s->body_mode != VSR_BODY_BUFFER)
        return &s->eff;
    hlist_t h = {0};
    if (blocked) {
        vsr_buf_reset(&s->out);
        /* code: a name, as every vsr error's (the reference sends the status number there) */
        vsr_session_error_body(s, 403, "invalid_request_error", "response_blocked", VSR_SLICE_LIT(RG_BLOCKED_MSG),
                               &s->out);
        s->eff.status = 403;
        hl_add(&s->pool, &h, VSR_SLICE_LIT("content-type"), VSR_SLICE_LIT("application/json"));
        hl_add(&s->pool, &h, VSR_SLICE_LIT("x-vsr-response-path"), VSR_SLICE_LIT("blocked"));
        body_out(s);
    } else {
        for (size_t i = 0; i < g->final.n_resp_headers; i++)
            hl_add(&s->pool, &h, g->final.resp_headers[i].name, g->final.resp_headers[i].value);
        vsr_slice_t w = vsr__rg_warnings(s->ev.response_warnings, &s->pool);
        if (w.len)
            hl_add(&s->pool, &h, VSR_SLICE_LIT("x-vsr-response-warnings"), w);
    }
    if (s->ev.debug)
        hl_add(&s->pool, &h, VSR_SLICE_LIT("x-vsr-response-guard"), vsr_slice_cstr(s->ev.response_guard));
    s->eff.resp_headers = h.v;
    s->eff.n_resp_headers = h.n;
    return &s->eff;
}

/* ---- hallucination (ref §2.3): the answer checked against the request's grounding context ---- */

static const vsr_plugin_hallucination_conf_t *hc_conf_of(const vsr_decision_conf_t *d)
{
    for (size_t i = 0; d && i < d->n_plugins; i++)
        if (d->plugins[i].kind == VSR_PLUGIN_HALLUCINATION && d->plugins[i].enabled)
            return &d->plugins[i].u.hallucination;
    return NULL;
}

/* The preconditions (the reference's): the decision's plugin, a 2xx chat
 * answer, and the fact_check signal needs_fact_check matched.  A JSON
 * answer is then held whole (BUFFER) for the check; a stream is not
 * enforced (its bytes are gone before a verdict could change them). */
static void hc_begin(vsr_session_t *s, int status, const vsr_header_t *headers, size_t n_headers, hlist_t *h)
{
    const vsr_plugin_hallucination_conf_t *c = hc_conf_of(s->decision);
    if (c == NULL && s->hc == NULL)
        return;
    if (s->hc == NULL)
        s->hc = vsr_calloc(1, sizeof(*s->hc));
    vsr__hcheck_t *g = s->hc;
    memset(g, 0, sizeof(*g));
    const vsr_ports_t *ports = s->opts.ports;
    if (c == NULL || s->ep != EP_CHAT || status < 200 || status >= 300 || ports == NULL || ports->resume == NULL)
        return;
    int needed = 0;
    for (size_t i = 0; i < s->ev.n_signals && !needed; i++)
        needed = strcmp(s->ev.signals[i].family, "fact_check") == 0 &&
                 strcmp(s->ev.signals[i].name, "needs_fact_check") == 0;
    if (!needed)
        return;
    g->conf = c;
    const vsr_header_t *ct = find_header(headers, n_headers, "content-type");
    if (ct && vsr_slice_starts_with(vsr_slice_trim(ct->value), VSR_SLICE_LIT("text/event-stream"))) {
        g->result = VSR__HC_STREAMING;
        s->ev.hallucination = vsr__hc_result_names[g->result];
        if (s->ev.debug)
            hl_add(&s->pool, h, VSR_SLICE_LIT("x-vsr-hallucination-check"), VSR_SLICE_LIT("not_enforced_streaming"));
        return;
    }
    g->context = vsr__hc_context(&s->chat, s->rag_context, &s->pool);
    g->unverified = g->context.len == 0;
    g->on = 1;
    if (s->body_mode == VSR_BODY_RELAY) {
        s->body_mode = VSR_BODY_BUFFER;
        s->rg->own_buffer = 1; /* held for the check only: the answer as it came */
    }
}

static const vsr_effect_t *hc_then(vsr_session_t *s);
static void replay_capture(vsr_session_t *s, const char *chunk, size_t len, int end_of_stream, const vsr_effect_t *eff);

static const vsr_effect_t *hc_then_captured(vsr_session_t *s)
{
    const vsr_effect_t *eff = hc_then(s);
    if (!eff->pending)
        replay_capture(s, NULL, 0, VSR_BODY_END, eff);
    return eff;
}

static void hc_done(void *ud, int status, int http_status, vsr_slice_t body, unsigned attempts)
{
    VSR_UNUSED(attempts);
    vsr_session_t *s = ud;
    vsr__hcheck_t *g = s->hc;
    g->result = VSR__HC_FAILED; /* detector errors never block: the answer goes on unchecked */
    if (status == VSR_OK && http_status == 200 && rc_now(s) <= g->deadline_ms &&
        vsr__hc_parse(body, g->answer, &s->pool, g->spans, &g->n_spans) == VSR_OK)
        g->result = g->n_spans ? VSR__HC_DETECTED : VSR__HC_NOT_DETECTED;
    if (g->result == VSR__HC_FAILED)
        vsr_log_debug("routing", "hallucination: the detector failed (status %d, HTTP %d); the answer goes out "
                                 "unchecked", status, http_status);
    port_wait_done(s);
}

/* The end of a held answer: no grounding context (unverified), or the
 * detector asked; the phase's effect (eff) waits for the verdict. */
static const vsr_effect_t *hc_run(vsr_session_t *s, const vsr_effect_t *eff)
{
    vsr__hcheck_t *g = s->hc;
    g->final = *eff;
    if (g->unverified) {
        g->result = VSR__HC_CONTEXT_UNAVAILABLE;
        return hc_then_captured(s);
    }
    g->answer = vsr__hc_answer(s->hc_chat.p, s->hc_chat.len, &s->pool);
    const vsr_external_conf_t *det = vsr_config_find_external(s->e->cfg, VSR_SLICE_LIT(VSR_HAL_DETECTOR_NAME));
    if (g->answer.len == 0 || det == NULL || s->opts.ports->model_call == NULL) {
        g->result = VSR__HC_FAILED; /* nothing to verify, or no detector to ask */
        return hc_then_captured(s);
    }
    vsr_buf_t b;
    vsr_buf_init(&b, 0);
    vsr_slice_t question = s->chat.last_user >= 0 ? s->chat.messages[s->chat.last_user].text : VSR_SLICE_NULL;
    vsr__hc_request(&b, det->model_name, s->e->cfg->hallucination.include_explanation, g->context, question,
                    g->answer);
    vsr_graph_call_t call = {.model = &det->model, .body = vsr_pool_dup_slice(&s->pool, vsr_buf_slice(&b)),
                             .iteration = 1, .max_response_bytes = det->max_response_bytes};
    vsr_buf_free(&b);
    uint64_t now = rc_now(s);
    uint64_t deadline = now + det->timeout_ms;
    if (s->opts.deadline_ms && s->opts.deadline_ms < deadline)
        deadline = s->opts.deadline_ms > now ? s->opts.deadline_ms : now;
    g->deadline_ms = deadline;
    port_wait_begin(s, 3, hc_then_captured);
    return port_wait_end(s, s->opts.ports->model_call(s->opts.ports_ud, &call, deadline, hc_done, s));
}

/* The verdict is in: the actions (header: a warning code; body: a warning
 * before every choice's content; none: recorded only), then the
 * response_jailbreak scan when the decision has one, else the headers. */
static const vsr_effect_t *hc_then(vsr_session_t *s)
{
    vsr__hcheck_t *g = s->hc;
    const vsr_plugin_hallucination_conf_t *c = g->conf;
    vsr_slice_t warning = VSR_SLICE_NULL;
    s->ev.hallucination = vsr__hc_result_names[g->result];
    if (g->result == VSR__HC_DETECTED) {
        if (c->action == VSR_HAL_HEADER)
            s->ev.response_warnings |= VSR__WARN_HALLUCINATION;
        else if (c->action == VSR_HAL_BODY)
            warning = vsr__hc_warning(c->include_details, g->spans, g->n_spans, &s->pool);
    } else if (g->unverified) {
        if (c->unverified_action == VSR_HAL_HEADER)
            s->ev.response_warnings |= VSR__WARN_UNVERIFIED_FACTUAL;
        else if (c->unverified_action == VSR_HAL_BODY)
            warning = VSR_SLICE_LIT(VSR__HC_UNVERIFIED_TEXT);
    }
    if (s->rg->on) /* before the body changes: the scan reads the model's words */
        vsr__rg_feed_json(s->rg, s->hc_chat.p, s->hc_chat.len);
    s->eff = g->final;
    if (warning.len && !s->anthropic_in && !s->responses_in) /* a chat.completion client's answer */
        vsr__hc_prepend(s->out.data, s->out.len, warning, &s->pool, &s->out);
    body_out(s);
    hlist_t h = {0};
    for (size_t i = 0; i < g->final.n_resp_headers; i++)
        hl_add(&s->pool, &h, g->final.resp_headers[i].name, g->final.resp_headers[i].value);
    if (s->ev.debug) {
        hl_add(&s->pool, &h, VSR_SLICE_LIT("x-vsr-hallucination-check"), vsr_slice_cstr(vsr__hc_result_names[g->result]));
        const vsr_signals_conf_t *sg = s->recipe ? &s->recipe->signals : NULL;
        if (g->result == VSR__HC_DETECTED && sg && sg->n_hallucination) {
            vsr_buf_t b;
            vsr_buf_init(&b, 0);
            for (size_t i = 0; i < sg->n_hallucination; i++)
                vsr_buf_printf(&b, "%s%s", i ? "," : "", sg->hallucination[i].name);
            hl_add(&s->pool, &h, VSR_SLICE_LIT("x-vsr-matched-hallucination"),
                   vsr_pool_dup_slice(&s->pool, vsr_buf_slice(&b)));
            vsr_buf_free(&b);
        }
    }
    s->eff.resp_headers = h.v;
    s->eff.n_resp_headers = h.n;
    if (s->rg->on)
        return rg_scan(s, &s->eff); /* its verdict adds the warnings header, all codes in their order */
    vsr_slice_t w = vsr__rg_warnings(s->ev.response_warnings, &s->pool);
    if (w.len) {
        hl_add(&s->pool, &h, VSR_SLICE_LIT("x-vsr-response-warnings"), w);
        s->eff.resp_headers = h.v;
        s->eff.n_resp_headers = h.n;
    }
    return &s->eff;
}

const vsr_effect_t *vsr_session_response_headers(vsr_session_t *s, int status, const vsr_header_t *headers,
                                                 size_t n_headers)
{
    VSR_BUG_ON(s->pending);
    reset_effect(s);
    if (s->default_route || s->answered || s->plan.kind != VSR_PLAN_CALL)
        return &s->eff;
    hlist_t h = {0};
    /* one protocol on each side, or a translation of the answer */
    int up_messages = anthropic_model(s->plan.model), client_messages = s->anthropic_in;
    s->resp_status = status;
    s->body_mode = VSR_BODY_RELAY;
    vsr_buf_reset(&s->acc); /* a fallback's answer starts afresh */
    s->acc_over = 0;
    if (s->sx_open) {
        vsr_anthropic_stream_free(s->sx);
        s->sx_open = 0;
    }
    if (s->cs_open) {
        vsr_completions_stream_free(s->cs);
        s->cs_open = 0;
    }
    if (s->rs_open) {
        vsr_responses_stream_free(s->rs);
        s->rs_open = 0;
    }
    if (s->responses_in) {
        const vsr_header_t *ct = find_header(headers, n_headers, "content-type");
        int sse = status >= 200 && status < 300 && ct &&
                  vsr_slice_starts_with(vsr_slice_trim(ct->value), VSR_SLICE_LIT("text/event-stream"));
        s->to_chat = up_messages; /* Messages → chat → Responses: the two codecs in a row */
        s->body_mode = sse ? VSR_BODY_STREAM : VSR_BODY_BUFFER;
        if (sse) {
            vsr_responses_meta_t meta = responses_meta(s);
            if (s->rs == NULL)
                s->rs = vsr_pool_alloc(&s->pool, sizeof(*s->rs));
            vsr_responses_stream_init(s->rs, &meta, NULL);
            s->rs_open = 1;
            if (up_messages) {
                if (s->sx == NULL)
                    s->sx = vsr_pool_alloc(&s->pool, sizeof(*s->sx));
                vsr_anthropic_stream_init(s->sx, VSR_ANTHROPIC_TO_CHAT, NULL, (uint64_t)time(NULL), s->include_usage);
                s->sx_open = 1;
            }
        }
        hl_add(&s->pool, &h, VSR_SLICE_LIT("x-vsr-client-protocol"), VSR_SLICE_LIT("openai-responses"));
        hl_add(&s->pool, &h, VSR_SLICE_LIT("x-vsr-upstream-protocol"),
               up_messages ? VSR_SLICE_LIT("anthropic") : VSR_SLICE_LIT("openai"));
    } else if (up_messages != client_messages) {
        const vsr_header_t *ct = find_header(headers, n_headers, "content-type");
        int sse = status >= 200 && status < 300 && ct &&
                  vsr_slice_starts_with(vsr_slice_trim(ct->value), VSR_SLICE_LIT("text/event-stream"));
        s->to_chat = up_messages;
        s->cmpl = up_messages && s->ep == EP_COMPLETIONS;
        s->body_mode = sse ? VSR_BODY_STREAM : VSR_BODY_BUFFER;
        if (sse) {
            if (s->sx == NULL)
                s->sx = vsr_pool_alloc(&s->pool, sizeof(*s->sx));
            vsr_anthropic_stream_init(s->sx, up_messages ? VSR_ANTHROPIC_TO_CHAT : VSR_ANTHROPIC_TO_MESSAGES, NULL,
                                      (uint64_t)time(NULL), s->include_usage);
            s->sx_open = 1;
            if (s->cmpl) {
                if (s->cs == NULL)
                    s->cs = vsr_pool_alloc(&s->pool, sizeof(*s->cs));
                vsr_completions_stream_init(s->cs);
                s->cs_open = 1;
            }
        }
        hl_add(&s->pool, &h, VSR_SLICE_LIT("x-vsr-client-protocol"),
               client_messages ? VSR_SLICE_LIT("anthropic") : VSR_SLICE_LIT("openai"));
        hl_add(&s->pool, &h, VSR_SLICE_LIT("x-vsr-upstream-protocol"),
               up_messages ? VSR_SLICE_LIT("anthropic") : VSR_SLICE_LIT("openai"));
    }
    rg_begin(s, status, headers, n_headers);
    hc_begin(s, status, headers, n_headers, &h);
    s->ev_strip = 0;
    if (s->usage_added && !up_messages && !client_messages && !s->responses_in && s->body_mode != VSR_BODY_BUFFER &&
        status >= 200 && status < 300) {
        const vsr_header_t *ct = find_header(headers, n_headers, "content-type");
        if (ct && vsr_slice_starts_with(vsr_slice_trim(ct->value), VSR_SLICE_LIT("text/event-stream"))) {
            s->body_mode = VSR_BODY_STREAM; /* framed by vsr: the usage chunk leaves the stream */
            s->to_chat = 0;
            s->ev_strip = 1;
            s->ev_pass = 0;
            s->ev_bol = 1;
            vsr_buf_reset(&s->ev_hold);
        }
    }
    s->eff.body_mode = s->body_mode;
    vsr_buf_reset(&s->rc_acc);
    s->rc_over = 0;
    if ((s->rc_store || s->mem_store) && status == 200) {
        const vsr_header_t *ct = find_header(headers, n_headers, "content-type");
        /* the chat side's bytes: the translated ones for a Messages backend */
        s->rc_sse = ct && vsr_slice_starts_with(vsr_slice_trim(ct->value), VSR_SLICE_LIT("text/event-stream"));
        s->eff.observe = s->body_mode == VSR_BODY_RELAY;
    }
    if (s->rg->on && s->body_mode == VSR_BODY_RELAY)
        s->eff.observe = 1; /* action none: scanned on the side */
    if (s->rp) {
        const vsr_header_t *ct = find_header(headers, n_headers, "content-type");
        vsr__replay_response(s->rp, status,
                             ct && vsr_slice_starts_with(vsr_slice_trim(ct->value), VSR_SLICE_LIT("text/event-stream")));
        hl_add(&s->pool, &h, VSR_SLICE_LIT("x-vsr-replay-id"), vsr_slice_cstr(vsr__replay_id(s->rp)));
        if (s->body_mode == VSR_BODY_RELAY)
            s->eff.observe = 1; /* the end (or the cut) and the bytes, kept when capture_response_body */
    }
    if (s->ev.cache_hit == 0) /* looked up (or to be stored), and answered by the model */
        hl_add(&s->pool, &h, VSR_SLICE_LIT("x-vsr-cache-hit"), VSR_SLICE_LIT("false"));
    hl_add(&s->pool, &h, VSR_SLICE_LIT("x-vsr-schema-version"), VSR_SLICE_LIT("2"));
    hl_add(&s->pool, &h, VSR_SLICE_LIT("x-vsr-response-path"),
           s->ev.looper && !s->looper_fell_back ? VSR_SLICE_LIT("looper") : VSR_SLICE_LIT("upstream"));
    if (s->ev.looper)
        add_looper_headers(s, &h, s->ev.looper);
    if (s->looper_fell_back)
        hl_add(&s->pool, &h, VSR_SLICE_LIT("x-vsr-looper-fallback"), VSR_SLICE_LIT("true"));
    hl_add(&s->pool, &h, VSR_SLICE_LIT("x-vsr-config-version"), pool_u64(&s->pool, s->e->version, 0));
    hl_add(&s->pool, &h, VSR_SLICE_LIT("x-vsr-routing-latency-ms"), pool_u64(&s->pool, s->ev.routing_us, 3));
    if (status >= 200 && status < 300) {
        hl_add(&s->pool, &h, VSR_SLICE_LIT("x-vsr-selected-model"), vsr_slice_cstr(s->ev.selected_model));
        if (s->ev.recipe)
            hl_add(&s->pool, &h, VSR_SLICE_LIT("x-vsr-selected-recipe"), vsr_slice_cstr(s->ev.recipe));
        if (s->ev.decision) {
            hl_add(&s->pool, &h, VSR_SLICE_LIT("x-vsr-selected-decision"), vsr_slice_cstr(s->ev.decision));
            hl_add(&s->pool, &h, VSR_SLICE_LIT("x-vsr-selected-confidence"),
                   pool_fixed4(&s->pool, s->ev.confidence));
            hl_add(&s->pool, &h, VSR_SLICE_LIT("x-vsr-selected-algorithm"), vsr_slice_cstr(s->ev.algorithm));
        }
        if (s->ev.selection && s->ev.selection->warning)
            hl_add(&s->pool, &h, VSR_SLICE_LIT("x-vsr-selection-warning"), vsr_slice_cstr(s->ev.selection->warning));
        if (s->ev.debug && s->ev.selection)
            hl_add(&s->pool, &h, VSR_SLICE_LIT("x-vsr-selection-scores"),
                   vsr_slice_cstr(vsr__selection_scores(&s->pool, s->ev.selection)));
        if (s->ev.debug && s->ev.decision_evaluated) {
            add_family_headers(s, &h);
            hl_add(&s->pool, &h, VSR_SLICE_LIT("x-vsr-context-token-count"),
                   pool_printf(&s->pool, "%llu", (unsigned long long)s->ev.context_tokens));
            if (s->ev.injected_system_prompt)
                hl_add(&s->pool, &h, VSR_SLICE_LIT("x-vsr-injected-system-prompt"), VSR_SLICE_LIT("true"));
            if (s->mem_state) {
                hl_add(&s->pool, &h, VSR_SLICE_LIT("x-vsr-memory"), vsr_slice_cstr(s->mem_state));
                hl_add(&s->pool, &h, VSR_SLICE_LIT("x-vsr-memory-injected"), pool_u64(&s->pool, s->mem_injected, 0));
            }
            if (s->ev.tools_applied) {
                hl_add(&s->pool, &h, VSR_SLICE_LIT("x-vsr-tools-before"), pool_u64(&s->pool, s->ev.tools_before, 0));
                hl_add(&s->pool, &h, VSR_SLICE_LIT("x-vsr-tools-after"), pool_u64(&s->pool, s->ev.tools_after, 0));
            }
            if (s->ev.tools_selection) {
                hl_add(&s->pool, &h, VSR_SLICE_LIT("x-vsr-tools-selection"),
                       s->ev.tools_selection == VSR_TOOLSEL_SEMANTIC ? VSR_SLICE_LIT("semantic")
                                                                     : VSR_SLICE_LIT("unavailable"));
                hl_add(&s->pool, &h, VSR_SLICE_LIT("x-vsr-tools-added"), pool_u64(&s->pool, s->ev.tools_added, 0));
                if (s->ev.tools_selected.len)
                    hl_add(&s->pool, &h, VSR_SLICE_LIT("x-vsr-tools-selected"), s->ev.tools_selected);
            }
            if (s->ev.compression_applied) {
                hl_add(&s->pool, &h, VSR_SLICE_LIT("x-vsr-compression-tokens-before"),
                       pool_u64(&s->pool, s->ev.compression_tokens_before, 0));
                hl_add(&s->pool, &h, VSR_SLICE_LIT("x-vsr-compression-tokens-after"),
                       pool_u64(&s->pool, s->ev.compression_tokens_after, 0));
                hl_add(&s->pool, &h, VSR_SLICE_LIT("x-vsr-compression-messages"),
                       pool_u64(&s->pool, s->ev.compression_messages, 0));
            }
            if (s->ev.rag) {
                hl_add(&s->pool, &h, VSR_SLICE_LIT("x-vsr-rag"), vsr_slice_cstr(s->ev.rag));
                if (s->ev.rag_backend)
                    hl_add(&s->pool, &h, VSR_SLICE_LIT("x-vsr-rag-backend"), vsr_slice_cstr(s->ev.rag_backend));
            }
            if (s->decision)
                add_retention_headers(s, &h, &s->decision->retention);
        }
    }
    s->eff.set = h.v;
    s->eff.n_set = h.n;
    return &s->eff;
}

static const vsr_effect_t *body_out(vsr_session_t *s)
{
    s->out_piece = vsr_buf_slice(&s->out);
    s->eff.body = &s->out_piece;
    s->eff.n_body = s->out.len ? 1 : 0;
    s->eff.body_len = s->out.len;
    s->eff.body_replaced = 1;
    return &s->eff;
}

/* BUFFER: the whole answer (or error) in the client's protocol. */
static const vsr_effect_t *translate_whole(vsr_session_t *s)
{
    static vsr_header_t json_type = {VSR_SLICE_LIT("content-type"), VSR_SLICE_LIT("application/json")};
    vsr_buf_reset(&s->out);
    int status = s->resp_status, rc;
    vsr_anthropic_error_t err;
    snprintf(err.message, sizeof(err.message), "the upstream's answer is larger than %u bytes", XLATE_MAX_BODY);
    const char *p = s->acc.data ? s->acc.data : "";
    size_t n = s->acc.len;
    if (s->acc_over) {
        rc = VSR_ERR_TOO_BIG;
    } else if (s->rg->own_buffer) { /* held for the scan only: the answer as it came */
        vsr_buf_append(&s->out, p, n);
        s->eff.status = status;
        return body_out(s);
    } else if (s->responses_in) {
        vsr_responses_error_t rerr = {.status = 502};
        snprintf(rerr.message, sizeof(rerr.message), "the answer is larger than the Responses codec's limits");
        vsr_buf_t conv;
        vsr_buf_init(&conv, XLATE_MAX_OUT);
        vsr_responses_meta_t meta = responses_meta(s);
        rc = VSR_OK;
        if (s->to_chat) { /* a Messages answer: its chat form first */
            vsr_buf_reset(&s->mid);
            rc = vsr_anthropic_answer_to_chat(status, p, n, (uint64_t)time(NULL), &s->mid, &err);
            p = s->mid.data ? s->mid.data : "";
            n = s->mid.len;
        }
        if (rc == VSR_OK) {
            rc = status >= 200 && status < 300
                     ? vsr_responses_response_from_chat(p, n, &meta, NULL, &s->out, &conv, &rerr)
                     : vsr_responses_error_from_chat(status, p, n, &s->out);
            if (rc != VSR_OK)
                snprintf(err.message, sizeof(err.message), "%s", rerr.message);
            else if (status >= 200 && status < 300)
                responses_keep(s, vsr_buf_slice(&s->out), vsr_buf_slice(&conv));
        }
        vsr_buf_free(&conv);
    } else if (status >= 200 && status < 300 && s->cmpl) { /* Messages → chat → text_completion */
        vsr_buf_reset(&s->mid);
        rc = vsr_anthropic_response_to_chat(p, n, NULL, (uint64_t)time(NULL), &s->mid, &err);
        if (rc == VSR_OK && (rc = vsr_completions_response_from_chat(s->mid.data, s->mid.len, &s->out)) != VSR_OK)
            snprintf(err.message, sizeof(err.message), "its chat form has no completion form");
    } else if (s->to_chat)
        rc = vsr_anthropic_answer_to_chat(status, p, n, (uint64_t)time(NULL), &s->out, &err);
    else if (status >= 200 && status < 300)
        rc = vsr_anthropic_response_from_chat(p, n, NULL, &s->out, &err);
    else
        rc = vsr_anthropic_error_from_chat(status, p, n, &s->out);
    if (rc != VSR_OK) {
        /* the backend's bytes are not what its protocol says: a bad gateway, said in the client's shape */
        vsr_buf_reset(&s->out);
        status = 502;
        vsr_slice_t msg = pool_printf(&s->pool, "the upstream's answer could not be translated: %s", err.message);
        vsr_session_error_body(s, status, "server_error", "upstream_protocol_error", msg, &s->out);
    }
    s->eff.status = status;
    s->eff.resp_headers = &json_type;
    s->eff.n_resp_headers = 1;
    return body_out(s);
}

/* Whether a held event is the usage chunk: a data line holding an object
 * with "choices":[] and a "usage" object. */
static int usage_only_event(const char *p, size_t n)
{
    const char *d = p;
    while (d && (size_t)(d - p) + 5 <= n && memcmp(d, "data:", 5) != 0) {
        const char *nl = memchr(d, '\n', n - (size_t)(d - p));
        d = nl ? nl + 1 : NULL;
    }
    if (d == NULL || (size_t)(d - p) + 5 > n)
        return 0;
    d += 5;
    const char *end = memchr(d, '\n', n - (size_t)(d - p));
    size_t len = end ? (size_t)(end - d) : n - (size_t)(d - p);
    if (vsr_find(d, len, "\"usage\"", 7) == NULL)
        return 0;
    vsr_json_t j;
    uint32_t ch, u;
    int yes = vsr_json_parse(&j, d, len, NULL) == VSR_OK && vsr_json_type(&j, 0) == VSR_JSON_OBJECT &&
              vsr_json_object_get(&j, 0, "choices", &ch) == VSR_OK && vsr_json_type(&j, ch) == VSR_JSON_ARRAY &&
              j.toks[ch].count == 0 && vsr_json_object_get(&j, 0, "usage", &u) == VSR_OK &&
              vsr_json_type(&j, u) == VSR_JSON_OBJECT;
    vsr_json_free(&j);
    return yes;
}

/* A stream whose usage chunk vsr asked for (ask_stream_usage): the events
 * go to s->out as they came, less that chunk.  Each event is held to its
 * end (a blank line); one longer than EV_HOLD_MAX is passed on as it comes. */
static void strip_usage_chunk(vsr_session_t *s, const char *p, size_t n, int end_of_stream)
{
    while (n) {
        const char *nl = memchr(p, '\n', n);
        size_t k = nl ? (size_t)(nl - p) + 1 : n;
        /* a blank line ("\n" or "\r\n" at a line's start) ends the event */
        int blank = nl && s->ev_bol && (k == 1 || (k == 2 && p[0] == '\r'));
        if (s->ev_pass) {
            vsr_buf_append(&s->out, p, k);
        } else if (vsr_buf_append(&s->ev_hold, p, k) != VSR_OK) {
            vsr_buf_append_slice(&s->out, vsr_buf_slice(&s->ev_hold));
            vsr_buf_append(&s->out, p, k);
            vsr_buf_reset(&s->ev_hold);
            s->ev_pass = 1;
        }
        s->ev_bol = nl != NULL;
        if (blank) {
            if (!s->ev_pass && !usage_only_event(s->ev_hold.data, s->ev_hold.len))
                vsr_buf_append_slice(&s->out, vsr_buf_slice(&s->ev_hold));
            vsr_buf_reset(&s->ev_hold);
            s->ev_pass = 0;
        }
        p += k;
        n -= k;
    }
    if (end_of_stream && s->ev_hold.len) { /* an event the stream did not end */
        vsr_buf_append_slice(&s->out, vsr_buf_slice(&s->ev_hold));
        vsr_buf_reset(&s->ev_hold);
    }
}

static const vsr_effect_t *response_body(vsr_session_t *s, const char *chunk, size_t len, int end_of_stream)
{
    reset_effect(s);
    if (s->body_mode == VSR_BODY_BUFFER) {
        if (!s->acc_over && len && vsr_buf_append(&s->acc, chunk, len) != VSR_OK)
            s->acc_over = 1; /* read on to the end (the connection stays usable), keep nothing more */
        if (!end_of_stream)
            return body_out(s);
        const vsr_effect_t *eff = translate_whole(s);
        const vsr_buf_t *chat = !s->to_chat ? &s->acc : s->responses_in ? &s->mid : &s->out;
        const char *chat_p = chat->data;
        size_t chat_n = chat->len;
        if (end_of_stream == VSR_BODY_END && eff->status == 200) {
            rc_feed(s, chat_p, chat_n);
            rc_keep(s);
        }
        if (end_of_stream == VSR_BODY_END && s->hc && s->hc->on && eff->status >= 200 && eff->status < 300) {
            s->hc_chat = vsr_slice(chat_p, chat_n);
            return hc_run(s, eff);
        }
        if (end_of_stream == VSR_BODY_END && s->rg->on && eff->status >= 200 && eff->status < 300) {
            vsr__rg_feed_json(s->rg, chat_p, chat_n);
            return rg_scan(s, eff);
        }
        return eff;
    }
    if (s->body_mode == VSR_BODY_STREAM) {
        vsr_buf_reset(&s->out);
        const char *chat_p = s->to_chat ? NULL : chunk; /* the answer's chat form, for the cache and the guard */
        size_t chat_n = s->to_chat ? 0 : len;
        if (s->responses_in) {
            if (s->to_chat) { /* Messages events → chat chunks → Responses events */
                vsr_buf_reset(&s->mid);
                if (len)
                    vsr_anthropic_stream_feed(s->sx, chunk, len, &s->mid);
                if (end_of_stream)
                    vsr_anthropic_stream_finish(s->sx, &s->mid);
                chunk = s->mid.data;
                len = s->mid.len;
                chat_p = chunk;
                chat_n = len;
            }
            if (len)
                vsr_responses_stream_feed(s->rs, chunk, len, &s->out); /* a failure has written response.failed */
            if (end_of_stream) {
                vsr_responses_stream_finish(s->rs, &s->out);
                if (end_of_stream == VSR_BODY_END && s->rs->conv.len)
                    responses_keep(s, vsr_buf_slice(&s->rs->final), vsr_buf_slice(&s->rs->conv));
            }
        } else if (s->ev_strip) {
            strip_usage_chunk(s, chunk, len, end_of_stream);
        } else if (s->rg->own_stream) { /* streamed for the scan only: the events as they came */
            if (len)
                vsr_buf_append(&s->out, chunk, len);
            if (end_of_stream == VSR_BODY_CUT)
                vsr_buf_append_cstr(&s->out, "data: {\"error\":{\"message\":\"the upstream's stream ended early\","
                                             "\"type\":\"server_error\",\"code\":\"upstream_stream_cut\"}}\n\n");
        } else {
            vsr_buf_t *sink = s->cmpl ? &s->mid : &s->out; /* a completions client: chat chunks on the way */
            vsr_buf_reset(&s->mid);
            if (len)
                vsr_anthropic_stream_feed(s->sx, chunk, len, sink); /* a failed stream has written its error event */
            if (end_of_stream)
                vsr_anthropic_stream_finish(s->sx, sink);
            if (s->cmpl)
                vsr_completions_stream_feed(s->cs, s->mid.data, s->mid.len, &s->out);
        }
        if (s->to_chat && !s->responses_in) {
            chat_p = s->out.data;
            chat_n = s->out.len;
        }
        rc_feed(s, chat_p, chat_n);
        if (s->rg->on)
            vsr__rg_feed_sse(s->rg, chat_p, chat_n);
        vsr__rg_withhold(s->rg, &s->out, end_of_stream == VSR_BODY_CUT);
        if (end_of_stream == VSR_BODY_END)
            rc_keep(s);
        if (end_of_stream == VSR_BODY_END && s->rg->on)
            return rg_scan(s, body_out(s));
        return body_out(s);
    }
    rc_feed(s, chunk, len);
    if (s->rg->on && s->rg->sse)
        vsr__rg_feed_sse(s->rg, chunk, len);
    else if (s->rg->on && len && vsr_buf_append(&s->acc, chunk, len) != VSR_OK)
        s->acc_over = 1;
    if (end_of_stream == VSR_BODY_END)
        rc_keep(s);
    if (end_of_stream == VSR_BODY_END && s->rg->on) {
        if (!s->rg->sse && !s->acc_over)
            vsr__rg_feed_json(s->rg, s->acc.data, s->acc.len);
        return rg_scan(s, &s->eff);
    }
    return &s->eff;
}

/* What the client got of a body phase's call, for the replay record: at
 * once, or (the answer's end waited on the response guard) when the
 * verdict's effect comes (rg_then_captured). */
static void replay_capture(vsr_session_t *s, const char *chunk, size_t len, int end_of_stream, const vsr_effect_t *eff)
{
    if (s->rp == NULL || s->rp_ended || s->answered || s->plan.kind != VSR_PLAN_CALL)
        return;
    if (eff->body_replaced)
        for (size_t i = 0; i < eff->n_body; i++)
            vsr__replay_feed(s->rp, eff->body[i].p, eff->body[i].len);
    else
        vsr__replay_feed(s->rp, chunk, len);
    if (end_of_stream) {
        s->rp_ended = 1;
        vsr__replay_end(s->rp, eff->status, s->ev.looper && !s->looper_fell_back ? VSR_PATH_LOOPER : VSR_PATH_UPSTREAM,
                        end_of_stream == VSR_BODY_CUT);
        replay_write(s);
    }
}

static const vsr_effect_t *rg_then_captured(vsr_session_t *s)
{
    const vsr_effect_t *eff = rg_then(s);
    replay_capture(s, NULL, 0, VSR_BODY_END, eff);
    return eff;
}

/* The body phase, and the record of what the client got (router_replay). */
const vsr_effect_t *vsr_session_response_body(vsr_session_t *s, const char *chunk, size_t len, int end_of_stream)
{
    const vsr_effect_t *eff = response_body(s, chunk, len, end_of_stream);
    if (!eff->pending)
        replay_capture(s, chunk, len, end_of_stream, eff);
    return eff;
}

void vsr_session_error_body(const vsr_session_t *s, int status, const char *type, const char *code, vsr_slice_t msg,
                            vsr_buf_t *out)
{
    if (s && s->anthropic_in)
        vsr_anthropic_error_body(out, vsr_anthropic_error_type(status), msg);
    else
        vsr_json_error_body(out, msg, type, code);
}

const char *vsr_session_local_reply(vsr_session_t *s, int status, vsr_slice_t body)
{
    if (s == NULL || s->rp == NULL)
        return NULL;
    vsr__replay_response(s->rp, status, 0);
    vsr__replay_feed(s->rp, body.p, body.len);
    vsr__replay_end(s->rp, status, VSR_PATH_ERROR, 0);
    return vsr__replay_id(s->rp);
}

int vsr_session_client_anthropic(const vsr_session_t *s)
{
    return s && s->anthropic_in;
}
