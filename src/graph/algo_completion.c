/*
 * algo_completion.c — reading a model's chat.completion (content, reasoning,
 * tool calls, usage, the logprob view) and writing the router's own answers
 * from completions: the ratings body, a body with summed usage, and the SSE
 * form of a completion.  See algo.h for the contracts.
 */
#include <math.h>
#include <stdio.h>

#include "algo.h"
#include "json/json.h"

/* ---- small helpers ------------------------------------------------------ */

static uint64_t tok_u64(const vsr_json_t *j, uint32_t t)
{
    uint64_t v = 0;
    if (vsr_json_type(j, t) != VSR_JSON_NUMBER || vsr_slice_to_u64(vsr_json_raw(j, t), UINT64_MAX, &v) != VSR_OK)
        return 0;
    return v;
}

/* The unescaped string at key of obj; empty when absent or not a string. */
static vsr_slice_t get_str(const vsr_json_t *j, uint32_t obj, const char *key, vsr_pool_t *pool)
{
    uint32_t v;
    vsr_slice_t s = VSR_SLICE_NULL;
    if (vsr_json_object_get(j, obj, key, &v) == VSR_OK && vsr_json_type(j, v) == VSR_JSON_STRING)
        (void)vsr_json_string(j, v, pool, &s);
    return s;
}

static int get_typed(const vsr_json_t *j, uint32_t obj, const char *key, vsr_json_type_t type, uint32_t *v)
{
    return vsr_json_object_get(j, obj, key, v) == VSR_OK && vsr_json_type(j, *v) == type;
}

/* ---- tool-call argument spans in the emitted text ----------------------- */

static int is_blank(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

/* The end of the JSON-ish value starting at text[i] (see algo.h). */
static size_t value_end(const char *s, size_t n, size_t i)
{
    if (i >= n)
        return n;
    if (s[i] == '"') {
        for (size_t k = i + 1; k < n; k++) {
            if (s[k] == '\\')
                k++;
            else if (s[k] == '"')
                return k + 1;
        }
        return n;
    }
    if (s[i] == '{' || s[i] == '[') {
        size_t depth = 0;
        int in_str = 0;
        for (size_t k = i; k < n; k++) {
            char c = s[k];
            if (in_str) {
                if (c == '\\')
                    k++;
                else if (c == '"')
                    in_str = 0;
            } else if (c == '"') {
                in_str = 1;
            } else if (c == '{' || c == '[') {
                depth++;
            } else if (c == '}' || c == ']') {
                if (--depth == 0)
                    return k + 1;
            }
        }
        return n;
    }
    size_t k = i;
    while (k < n && s[k] != ',' && s[k] != '}' && s[k] != ']' && !is_blank(s[k]))
        k++;
    return k;
}

/* Marks the tokens whose text span overlaps an "arguments"/"parameters"
 * value of text[0..n).  Tokens are in text order, so one forward sweep. */
static void mark_tool_args(const char *s, size_t n, vsr_algo_token_t *toks, size_t nt)
{
    static const char *const keys[] = {"\"arguments\"", "\"parameters\""};
    size_t ti = 0;
    size_t i = 0;
    while (i < n) {
        size_t klen = 0;
        if (s[i] == '"') {
            for (size_t q = 0; q < VSR_ARRAY_LEN(keys); q++) {
                size_t l = strlen(keys[q]);
                if (n - i >= l && memcmp(s + i, keys[q], l) == 0) {
                    klen = l;
                    break;
                }
            }
        }
        if (!klen) {
            i++;
            continue;
        }
        size_t k = i + klen;
        while (k < n && is_blank(s[k]))
            k++;
        if (k >= n || s[k] != ':') {
            i += klen;
            continue;
        }
        k++;
        while (k < n && is_blank(s[k]))
            k++;
        size_t vs = k, ve = value_end(s, n, k);
        if (ve > vs) {
            while (ti < nt && (size_t)toks[ti].text_start + toks[ti].text_len <= vs)
                ti++;
            for (size_t t = ti; t < nt && toks[t].text_start < ve; t++)
                if (toks[t].text_len > 0 || toks[t].text_start >= vs)
                    toks[t].is_tool_arg = 1;
        }
        i = ve > i + klen ? ve : i + klen;
    }
}

/* ---- the logprob view --------------------------------------------------- */

static void parse_logprobs(const vsr_json_t *j, uint32_t choice, vsr_pool_t *pool, vsr_algo_completion_t *out)
{
    uint32_t lp, arr;
    if (!get_typed(j, choice, "logprobs", VSR_JSON_OBJECT, &lp) || !get_typed(j, lp, "content", VSR_JSON_ARRAY, &arr))
        return;
    uint32_t n = j->toks[arr].count;
    vsr_algo_token_t *toks = n ? vsr_pool_alloc(pool, (size_t)n * sizeof(*toks)) : NULL;
    vsr_slice_t *texts = n ? vsr_pool_alloc(pool, (size_t)n * sizeof(*texts)) : NULL;
    size_t total = 0;
    uint32_t e = arr + 1;
    for (uint32_t i = 0; i < n; i++, e = j->toks[e].next) {
        uint32_t v;
        double d;
        if (vsr_json_type(j, e) != VSR_JSON_OBJECT || !get_typed(j, e, "logprob", VSR_JSON_NUMBER, &v) ||
            vsr_json_number(j, v, &d) != VSR_OK || !isfinite(d))
            return; /* one unusable entry: the view is missing */
        toks[i].logprob = d;
        toks[i].margin = NAN;
        toks[i].is_tool_arg = 0;
        texts[i] = get_str(j, e, "token", pool);
        toks[i].text_start = (uint32_t)total;
        toks[i].text_len = (uint32_t)texts[i].len;
        total += texts[i].len;
        uint32_t top;
        if (get_typed(j, e, "top_logprobs", VSR_JSON_ARRAY, &top)) {
            double best = -INFINITY, second = -INFINITY;
            size_t seen = 0;
            uint32_t a = top + 1;
            for (uint32_t k = 0; k < j->toks[top].count; k++, a = j->toks[a].next) {
                uint32_t av;
                double x;
                if (vsr_json_type(j, a) != VSR_JSON_OBJECT || !get_typed(j, a, "logprob", VSR_JSON_NUMBER, &av) ||
                    vsr_json_number(j, av, &x) != VSR_OK || !isfinite(x))
                    continue;
                seen++;
                if (x > best) {
                    second = best;
                    best = x;
                } else if (x > second) {
                    second = x;
                }
            }
            if (seen >= 2)
                toks[i].margin = best - second;
        }
    }
    /* The unescaped texts are no longer than the escaped body (< 4 GiB). */
    char *text = total ? vsr_pool_alloc(pool, total) : NULL;
    for (uint32_t i = 0; i < n; i++)
        if (texts[i].len)
            memcpy(text + toks[i].text_start, texts[i].p, texts[i].len);
    if (total)
        mark_tool_args(text, total, toks, n);
    out->tokens = toks;
    out->n_tokens = n;
    out->has_logprobs = 1;
}

/* ---- parsing ------------------------------------------------------------ */

static const vsr_json_limits_t completion_limits = {64, 0};

/* Locates the parts every reader needs: the top object and choices[0]. */
static int locate(const vsr_json_t *j, uint32_t *choices, uint32_t *choice0, uint32_t *msg, const char **why)
{
    uint32_t v;
    if (vsr_json_type(j, 0) != VSR_JSON_OBJECT) {
        *why = "completion is not a JSON object";
        return VSR_ERR_INVALID;
    }
    if (vsr_json_object_get(j, 0, "object", &v) == VSR_OK &&
        !(vsr_json_type(j, v) == VSR_JSON_STRING && vsr_json_string_eq(j, v, vsr_slice_cstr("chat.completion")))) {
        *why = "object is not chat.completion";
        return VSR_ERR_INVALID;
    }
    if (!get_typed(j, 0, "choices", VSR_JSON_ARRAY, choices) || j->toks[*choices].count == 0) {
        *why = "completion has no choices";
        return VSR_ERR_INVALID;
    }
    *choice0 = *choices + 1;
    if (vsr_json_type(j, *choice0) != VSR_JSON_OBJECT || !get_typed(j, *choice0, "message", VSR_JSON_OBJECT, msg)) {
        *why = "choice has no message object";
        return VSR_ERR_INVALID;
    }
    return VSR_OK;
}

int vsr__algo_completion_parse(const char *body, size_t len, vsr_pool_t *pool, vsr_algo_completion_t *out)
{
    memset(out, 0, sizeof(*out));
    vsr_json_t j;
    int rc = vsr_json_parse(&j, body, len, &completion_limits);
    if (rc != VSR_OK) {
        out->why = "completion is not valid JSON";
        vsr_json_free(&j);
        return VSR_ERR_INVALID;
    }
    uint32_t choices, c0, msg, v;
    rc = locate(&j, &choices, &c0, &msg, &out->why);
    if (rc != VSR_OK) {
        vsr_json_free(&j);
        return rc;
    }
    out->n_choices = j.toks[choices].count;
    out->id = get_str(&j, 0, "id", pool);
    out->model = get_str(&j, 0, "model", pool);
    if (vsr_json_object_get(&j, 0, "created", &v) == VSR_OK)
        out->created = tok_u64(&j, v);
    out->content = get_str(&j, msg, "content", pool);
    out->reasoning = get_str(&j, msg, "reasoning_content", pool);
    if (!out->reasoning.len)
        out->reasoning = get_str(&j, msg, "reasoning", pool);
    out->finish_reason = get_str(&j, c0, "finish_reason", pool);
    if (get_typed(&j, msg, "tool_calls", VSR_JSON_ARRAY, &v)) {
        out->tool_calls = vsr_json_raw(&j, v);
        out->has_tool_calls = j.toks[v].count > 0;
    }
    if (get_typed(&j, 0, "usage", VSR_JSON_OBJECT, &v)) {
        uint32_t u;
        if (vsr_json_object_get(&j, v, "prompt_tokens", &u) == VSR_OK)
            out->prompt_tokens = tok_u64(&j, u);
        if (vsr_json_object_get(&j, v, "completion_tokens", &u) == VSR_OK)
            out->completion_tokens = tok_u64(&j, u);
        if (vsr_json_object_get(&j, v, "total_tokens", &u) == VSR_OK)
            out->total_tokens = tok_u64(&j, u);
    }
    parse_logprobs(&j, c0, pool, out);
    vsr_json_free(&j);
    return VSR_OK;
}

/* ---- writers ------------------------------------------------------------ */

/* Chains appends: the first failure sticks. */
#define PUT(expr)                \
    do {                         \
        if (rc == VSR_OK)        \
            rc = (expr);         \
    } while (0)

static int put_usage(vsr_buf_t *out, uint64_t pt, uint64_t ct)
{
    uint64_t tt = pt + ct < pt ? UINT64_MAX : pt + ct;
    return vsr_buf_printf(out, "{\"prompt_tokens\":%llu,\"completion_tokens\":%llu,\"total_tokens\":%llu}",
                          (unsigned long long)pt, (unsigned long long)ct, (unsigned long long)tt);
}

int vsr__algo_ratings_response(vsr_buf_t *out, uint64_t id_nanos, uint64_t created, const vsr_slice_t *models,
                               const vsr_slice_t *contents, size_t n, uint64_t pt, uint64_t ct)
{
    int rc = VSR_OK;
    PUT(vsr_buf_printf(out, "{\"id\":\"chatcmpl-looper-%llu\",\"object\":\"chat.completion\",\"created\":%llu,\"model\":",
                       (unsigned long long)id_nanos, (unsigned long long)created));
    /* The joined model names as one JSON string: escape each, drop the quotes between. */
    PUT(vsr_buf_append(out, "\"", 1));
    for (size_t i = 0; i < n && rc == VSR_OK; i++) {
        if (i)
            PUT(vsr_buf_append(out, ",", 1));
        size_t mark = out->len;
        PUT(vsr_buf_append_json_string(out, models[i]));
        if (rc == VSR_OK) { /* strip the quotes the string writer added */
            memmove(out->data + mark, out->data + mark + 1, out->len - mark - 2);
            out->len -= 2;
        }
    }
    PUT(vsr_buf_append_cstr(out, "\",\"choices\":["));
    for (size_t i = 0; i < n; i++) {
        PUT(vsr_buf_printf(out, "%s{\"index\":%zu,\"message\":{\"role\":\"assistant\",\"content\":", i ? "," : "", i));
        PUT(vsr_buf_append_json_string(out, contents[i]));
        PUT(vsr_buf_append_cstr(out, "},\"finish_reason\":\"stop\",\"model\":"));
        PUT(vsr_buf_append_json_string(out, models[i]));
        PUT(vsr_buf_append(out, "}", 1));
    }
    PUT(vsr_buf_append_cstr(out, "],\"usage\":"));
    PUT(put_usage(out, pt, ct));
    PUT(vsr_buf_append(out, "}", 1));
    return rc;
}

int vsr__algo_with_usage(vsr_buf_t *out, const char *body, size_t len, uint64_t pt, uint64_t ct,
                         vsr_slice_t extra_member)
{
    vsr_json_t j;
    int rc = vsr_json_parse(&j, body, len, &completion_limits);
    if (rc != VSR_OK || vsr_json_type(&j, 0) != VSR_JSON_OBJECT) {
        vsr_json_free(&j);
        return VSR_ERR_INVALID;
    }
    uint32_t close = j.toks[0].end - 1; /* the closing brace */
    int has_members = j.toks[0].count > 0;
    uint32_t u;
    int has_usage = vsr_json_object_get(&j, 0, "usage", &u) == VSR_OK;
    uint32_t us = has_usage ? j.toks[u].start : 0, ue = has_usage ? j.toks[u].end : 0;
    vsr_json_free(&j);
    rc = VSR_OK;
    if (has_usage) {
        PUT(vsr_buf_append(out, body, us));
        PUT(put_usage(out, pt, ct));
        PUT(vsr_buf_append(out, body + ue, close - ue));
    } else {
        PUT(vsr_buf_append(out, body, close));
        PUT(vsr_buf_append_cstr(out, has_members ? ",\"usage\":" : "\"usage\":"));
        PUT(put_usage(out, pt, ct));
    }
    if (extra_member.len) {
        PUT(vsr_buf_append(out, ",", 1));
        PUT(vsr_buf_append_slice(out, extra_member));
    }
    PUT(vsr_buf_append(out, body + close, len - close));
    return rc;
}

/* ---- SSE ---------------------------------------------------------------- */

typedef struct {
    vsr_buf_t *out;
    vsr_slice_t id, model; /* raw JSON values (quoted), or literal "\"\"" */
    uint64_t created;
} sse_t;

/* Raw JSON inside an SSE data line: CR and LF can only be whitespace (the
 * parser refuses them raw inside strings), so they are dropped and the event
 * stays one line. */
static int put_raw_line(vsr_buf_t *out, vsr_slice_t raw)
{
    int rc = VSR_OK;
    size_t from = 0;
    for (size_t i = 0; i < raw.len; i++) {
        if (raw.p[i] != '\n' && raw.p[i] != '\r')
            continue;
        PUT(vsr_buf_append(out, raw.p + from, i - from));
        from = i + 1;
    }
    PUT(vsr_buf_append(out, raw.p + from, raw.len - from));
    return rc;
}

static int chunk_open(const sse_t *s)
{
    int rc = VSR_OK;
    PUT(vsr_buf_append_cstr(s->out, "data: {\"id\":"));
    PUT(vsr_buf_append_slice(s->out, s->id));
    PUT(vsr_buf_printf(s->out, ",\"object\":\"chat.completion.chunk\",\"created\":%llu,\"model\":",
                       (unsigned long long)s->created));
    PUT(vsr_buf_append_slice(s->out, s->model));
    PUT(vsr_buf_append_cstr(s->out, ",\"choices\":["));
    return rc;
}

/* Length of the longest prefix of s[0..n) of at most max bytes that ends on
 * a UTF-8 character start (whole text when shorter; never 0 for n > 0). */
static size_t piece_len(const char *s, size_t n, size_t max)
{
    if (n <= max)
        return n;
    size_t k = max;
    for (int back = 0; back < 3 && k > 0 && ((unsigned char)s[k] & 0xC0) == 0x80; back++)
        k--;
    return k ? k : max;
}

static int text_chunks(const sse_t *s, uint32_t index, const char *field, vsr_slice_t text, int *role_sent)
{
    int rc = VSR_OK;
    size_t off = 0;
    if (!text.p)
        text = VSR_SLICE_LIT("");
    do {
        size_t l = piece_len(text.p + off, text.len - off, VSR_ALGO_SSE_PIECE);
        PUT(chunk_open(s));
        PUT(vsr_buf_printf(s->out, "{\"index\":%u,\"delta\":{%s\"%s\":", index,
                           *role_sent ? "" : "\"role\":\"assistant\",", field));
        PUT(vsr_buf_append_json_string(s->out, vsr_slice(text.p + off, l)));
        PUT(vsr_buf_append_cstr(s->out, "},\"finish_reason\":null}]}\n\n"));
        *role_sent = 1;
        off += l;
    } while (off < text.len && rc == VSR_OK);
    return rc;
}

static int tool_calls_chunk(const sse_t *s, const vsr_json_t *j, uint32_t index, uint32_t arr, int *role_sent)
{
    int rc = VSR_OK;
    PUT(chunk_open(s));
    PUT(vsr_buf_printf(s->out, "{\"index\":%u,\"delta\":{%s\"tool_calls\":[", index,
                       *role_sent ? "" : "\"role\":\"assistant\","));
    uint32_t e = arr + 1;
    for (uint32_t k = 0; k < j->toks[arr].count; k++, e = j->toks[e].next) {
        if (k)
            PUT(vsr_buf_append(s->out, ",", 1));
        vsr_slice_t raw = vsr_json_raw(j, e);
        uint32_t has_index;
        if (vsr_json_type(j, e) == VSR_JSON_OBJECT && vsr_json_object_get(j, e, "index", &has_index) != VSR_OK) {
            PUT(vsr_buf_printf(s->out, "{\"index\":%u%s", k, j->toks[e].count ? "," : ""));
            PUT(put_raw_line(s->out, vsr_slice(raw.p + 1, raw.len - 1)));
        } else {
            PUT(put_raw_line(s->out, raw));
        }
    }
    PUT(vsr_buf_append_cstr(s->out, "]},\"finish_reason\":null}]}\n\n"));
    *role_sent = 1;
    return rc;
}

int vsr__algo_sse_from_completion(vsr_buf_t *out, const char *body, size_t len, int include_usage)
{
    vsr_json_t j;
    int rc = vsr_json_parse(&j, body, len, &completion_limits);
    const char *why = NULL;
    uint32_t choices, c0, msg, v;
    if (rc != VSR_OK || locate(&j, &choices, &c0, &msg, &why) != VSR_OK) {
        vsr_json_free(&j);
        return VSR_ERR_INVALID;
    }
    vsr_pool_t pool;
    vsr_pool_init(&pool);
    sse_t s = {out, VSR_SLICE_LIT("\"\""), VSR_SLICE_LIT("\"\""), 0};
    if (get_typed(&j, 0, "id", VSR_JSON_STRING, &v))
        s.id = vsr_json_raw(&j, v);
    if (get_typed(&j, 0, "model", VSR_JSON_STRING, &v))
        s.model = vsr_json_raw(&j, v);
    if (vsr_json_object_get(&j, 0, "created", &v) == VSR_OK)
        s.created = tok_u64(&j, v);
    rc = VSR_OK;
    uint32_t ch = choices + 1;
    for (uint32_t i = 0; i < j.toks[choices].count && rc == VSR_OK; i++, ch = j.toks[ch].next) {
        uint32_t m, idx = i;
        if (vsr_json_type(&j, ch) != VSR_JSON_OBJECT)
            continue;
        if (get_typed(&j, ch, "index", VSR_JSON_NUMBER, &v)) {
            uint64_t x = tok_u64(&j, v);
            idx = x <= UINT32_MAX ? (uint32_t)x : i;
        }
        int role_sent = 0;
        if (get_typed(&j, ch, "message", VSR_JSON_OBJECT, &m)) {
            vsr_slice_t r = get_str(&j, m, "reasoning_content", &pool);
            if (!r.len)
                r = get_str(&j, m, "reasoning", &pool);
            if (r.len)
                PUT(text_chunks(&s, idx, "reasoning_content", r, &role_sent));
            vsr_slice_t c = get_str(&j, m, "content", &pool);
            if (c.len || !role_sent)
                PUT(text_chunks(&s, idx, "content", c, &role_sent));
            if (get_typed(&j, m, "tool_calls", VSR_JSON_ARRAY, &v) && j.toks[v].count)
                PUT(tool_calls_chunk(&s, &j, idx, v, &role_sent));
        }
        vsr_slice_t fr = VSR_SLICE_LIT("\"stop\"");
        if (get_typed(&j, ch, "finish_reason", VSR_JSON_STRING, &v))
            fr = vsr_json_raw(&j, v);
        PUT(chunk_open(&s));
        PUT(vsr_buf_printf(out, "{\"index\":%u,\"delta\":{},\"finish_reason\":", idx));
        PUT(vsr_buf_append_slice(out, fr));
        PUT(vsr_buf_append_cstr(out, "}]}\n\n"));
    }
    if (include_usage) {
        PUT(chunk_open(&s));
        PUT(vsr_buf_append_cstr(out, "],\"usage\":"));
        if (get_typed(&j, 0, "usage", VSR_JSON_OBJECT, &v))
            PUT(put_raw_line(out, vsr_json_raw(&j, v)));
        else
            PUT(put_usage(out, 0, 0));
        PUT(vsr_buf_append_cstr(out, "}\n\n"));
    }
    PUT(vsr_buf_append_cstr(out, "data: [DONE]\n\n"));
    vsr_pool_free(&pool);
    vsr_json_free(&j);
    return rc;
}
