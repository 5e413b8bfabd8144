/*
 * fuzz_json_edits.c — random structural edits over arbitrary JSON, and the
 * chat view over the same document.
 *
 * Input: a JSON document, optionally followed by a NUL byte and an "edit
 * script" (bytes that choose the operations; once exhausted, choices come
 * from a PRNG seeded with a hash of the whole input, so plain JSON files
 * drive edits too).
 *
 * A small model predicts, for every operation, whether it must be accepted
 * (targets disjoint from everything edited so far; removing an already
 * removed member is a no-op) or rejected, and how many tokens the result
 * has.  Checks:
 *  - acceptance matches the model, and a rejected batch changes nothing;
 *  - the edit array stays sorted and free of overlaps, and
 *    vsr_json_edits_overlaps agrees with a naive scan;
 *  - the pieces are exactly the source with the ranges replaced (compared
 *    with a naive splice), and re-parse as valid JSON with the predicted
 *    token count (and root member count);
 *  - the chat view of every API kind is self-consistent;
 *  - on chat bodies, system_prompt + request_params (+ a second one) +
 *    header_mutation + the engine's model rewrite give a valid body whose
 *    first message is the injected system prompt and whose top-level keys
 *    obey the request_params policy.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json/json.h"
#include "plugins/plugins.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                        \
    do {                                                                                   \
        if (!(cond)) {                                                                     \
            fprintf(stderr, "fuzz_json_edits: check failed: %s (line %d)\n", #cond, __LINE__); \
            abort();                                                                       \
        }                                                                                  \
    } while (0)

#define MAX_OPS 24
#define MAX_MARKS 4096

/* ---- choices ------------------------------------------------------------- */

typedef struct {
    const uint8_t *script;
    size_t len, pos;
    uint64_t rng;
} chooser_t;

static uint32_t next_u32(chooser_t *c)
{
    if (c->pos + 2 <= c->len) {
        uint32_t v = (uint32_t)c->script[c->pos] | (uint32_t)c->script[c->pos + 1] << 8;
        c->pos += 2;
        return v;
    }
    uint64_t x = c->rng;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    c->rng = x;
    return (uint32_t)(x >> 32);
}

/* ---- texts with known token counts --------------------------------------- */

static const struct {
    const char *text;
    uint32_t ntoks;
} members[] = {
    {"\"k\":1", 2},
    {"\"x\":{\"y\":[1,2]}", 6},
    {"\"\":\"s\\n\"", 2},
    {"\"model\":null", 2},
}, values[] = {
    {"1", 1},
    {"{}", 1},
    {"[true,false]", 3},
    {"\"v\"", 1},
    {"{\"a\":{\"b\":null}}", 5},
    {"-0.5e3", 1},
};

/* ---- the model ------------------------------------------------------------ */

typedef struct {
    const vsr_json_t *j;
    uint8_t *is_key;          /* per token */
    uint8_t *removed_key;     /* per token: member removed (by its key) */
    uint32_t dead[MAX_MARKS][2]; /* token ranges removed or replaced */
    size_t n_dead;
    uint32_t ins[MAX_MARKS];  /* containers inserted into */
    size_t n_ins;
    int64_t ntoks;            /* predicted token count */
    int64_t root_count;       /* predicted members/elements of the root */
    int root_dead;
} model_t;

static int range_conflicts(const model_t *m, uint32_t a0, uint32_t a1)
{
    for (size_t i = 0; i < m->n_dead; i++)
        if (a0 < m->dead[i][1] && m->dead[i][0] < a1)
            return 1;
    for (size_t i = 0; i < m->n_ins; i++)
        if (m->ins[i] >= a0 && m->ins[i] < a1)
            return 1;
    return 0;
}

static int point_dead(const model_t *m, uint32_t c)
{
    for (size_t i = 0; i < m->n_dead; i++)
        if (c >= m->dead[i][0] && c < m->dead[i][1])
            return 1;
    return 0;
}

static void mark_dead(model_t *m, uint32_t a0, uint32_t a1)
{
    CHECK(m->n_dead < MAX_MARKS);
    m->dead[m->n_dead][0] = a0;
    m->dead[m->n_dead][1] = a1;
    m->n_dead++;
    m->ntoks -= (int64_t)(a1 - a0);
    if (a0 == 0)
        m->root_dead = 1;
}

/* ---- checks on the edit array ---------------------------------------------- */

static int naive_overlap(const vsr_json_edits_t *ed, uint32_t s, uint32_t e)
{
    for (size_t i = 0; i < ed->n; i++) {
        const vsr_json_edit_t *x = &ed->e[i];
        if (s == e && x->start == x->end)
            continue;
        if (s == e) {
            if (x->start < s && s < x->end)
                return 1;
        } else if (x->start == x->end) {
            if (s < x->start && x->start < e)
                return 1;
        } else if (s < x->end && x->start < e) {
            return 1;
        }
    }
    return 0;
}

static void check_array(const vsr_json_edits_t *ed, size_t len)
{
    for (size_t i = 0; i < ed->n; i++) {
        const vsr_json_edit_t *x = &ed->e[i];
        CHECK(x->start <= x->end && x->end <= len);
        if (i > 0) {
            const vsr_json_edit_t *p = &ed->e[i - 1];
            CHECK(p->start < x->start || (p->start == x->start && p->end <= x->end));
            /* non-empty neighbours do not overlap */
            if (p->start != p->end)
                CHECK(p->end <= x->start || (x->start == x->end && x->start == p->end));
        }
    }
    for (size_t i = 0; i < ed->n; i++)
        for (size_t k = i + 1; k < ed->n; k++) {
            const vsr_json_edit_t *a = &ed->e[i], *b = &ed->e[k];
            if (a->start != a->end && b->start != b->end)
                CHECK(!(a->start < b->end && b->start < a->end));
            if (a->start == a->end && b->start != b->end)
                CHECK(!(b->start < a->start && a->start < b->end));
            if (b->start == b->end && a->start != a->end)
                CHECK(!(a->start < b->start && b->start < a->end));
        }
}

/* ---- operations -------------------------------------------------------------- */

/* A token of the given container type, searched from a random start. */
static int pick_container(const vsr_json_t *j, chooser_t *ch, vsr_json_type_t type, int nonempty, uint32_t *out)
{
    uint32_t start = next_u32(ch) % j->ntoks;
    for (uint32_t k = 0; k < j->ntoks; k++) {
        uint32_t t = (start + k) % j->ntoks;
        if (j->toks[t].type == type && (!nonempty || j->toks[t].count > 0)) {
            *out = t;
            return 1;
        }
    }
    return 0;
}

static uint32_t member_key(const vsr_json_t *j, uint32_t obj, uint32_t idx)
{
    uint32_t c = obj + 1;
    for (uint32_t i = 0; i < idx; i++)
        c = j->toks[c + 1].next;
    return c;
}

static void op_remove(model_t *m, vsr_json_edits_t *ed, chooser_t *ch, int batch)
{
    const vsr_json_t *j = m->j;
    uint32_t obj;
    if (!pick_container(j, ch, VSR_JSON_OBJECT, 1, &obj))
        return;
    uint32_t n = j->toks[obj].count;
    uint32_t keys[64];
    size_t nk = 0;
    if (batch) {
        uint32_t bits = next_u32(ch) | next_u32(ch) << 16;
        uint32_t c = obj + 1;
        for (uint32_t i = 0; i < n && nk < 64; i++, c = j->toks[c + 1].next)
            if (bits & (1u << (i % 32)))
                keys[nk++] = c;
        /* now and then, the same key twice */
        if (nk > 0 && nk < 64 && (next_u32(ch) & 3) == 0)
            keys[nk++] = keys[0];
    } else {
        keys[nk++] = member_key(j, obj, next_u32(ch) % n);
    }

    int expect_ok = 1;
    for (size_t i = 0; i < nk; i++) {
        uint32_t k = keys[i];
        if (m->removed_key[k])
            continue;
        if (range_conflicts(m, k, j->toks[k + 1].next))
            expect_ok = 0;
    }
    size_t before = ed->n;
    vsr_json_edit_t *snap = before ? malloc(before * sizeof(*snap)) : NULL;
    if (before)
        memcpy(snap, ed->e, before * sizeof(*snap));
    int rc = vsr_json_edit_remove_members(ed, j, obj, keys, nk);
    CHECK((rc == VSR_OK) == expect_ok);
    if (rc != VSR_OK) {
        CHECK(ed->n == before);
        CHECK(before == 0 || memcmp(snap, ed->e, before * sizeof(*snap)) == 0);
    } else {
        for (size_t i = 0; i < nk; i++) {
            uint32_t k = keys[i];
            if (m->removed_key[k])
                continue;
            m->removed_key[k] = 1;
            mark_dead(m, k, j->toks[k + 1].next);
            if (obj == 0)
                m->root_count--;
        }
    }
    free(snap);
}

static void op_insert(model_t *m, vsr_json_edits_t *ed, chooser_t *ch, int member)
{
    const vsr_json_t *j = m->j;
    uint32_t c;
    if (!pick_container(j, ch, member ? VSR_JSON_OBJECT : VSR_JSON_ARRAY, 0, &c))
        return;
    uint32_t which = next_u32(ch);
    vsr_slice_t text;
    uint32_t nt;
    if (member) {
        which %= VSR_ARRAY_LEN(members);
        text = vsr_slice_cstr(members[which].text);
        nt = members[which].ntoks;
    } else {
        which %= VSR_ARRAY_LEN(values);
        text = vsr_slice_cstr(values[which].text);
        nt = values[which].ntoks;
    }
    int expect_ok = !point_dead(m, c);
    int rc = member ? vsr_json_edit_insert_member(ed, j, c, text) : vsr_json_edit_insert_element(ed, j, c, text);
    CHECK((rc == VSR_OK) == expect_ok);
    if (rc == VSR_OK) {
        CHECK(m->n_ins < MAX_MARKS);
        m->ins[m->n_ins++] = c;
        m->ntoks += nt;
        if (c == 0)
            m->root_count++;
    }
}

static void op_replace(model_t *m, vsr_json_edits_t *ed, chooser_t *ch)
{
    const vsr_json_t *j = m->j;
    uint32_t t = next_u32(ch) % j->ntoks;
    if (m->is_key[t])
        t++; /* its value */
    uint32_t which = next_u32(ch) % VSR_ARRAY_LEN(values);
    int expect_ok = !range_conflicts(m, t, j->toks[t].next);
    int rc = vsr_json_edit_replace(ed, j, t, vsr_slice_cstr(values[which].text));
    CHECK((rc == VSR_OK) == expect_ok);
    if (rc == VSR_OK) {
        mark_dead(m, t, j->toks[t].next);
        m->ntoks += values[which].ntoks;
    }
}

static void op_probe(const vsr_json_edits_t *ed, chooser_t *ch, size_t len)
{
    uint32_t s = (uint32_t)(next_u32(ch) % (len + 1));
    uint32_t e = s + (next_u32(ch) & 1 ? 0 : (uint32_t)(next_u32(ch) % (len - s + 1)));
    CHECK(vsr_json_edits_overlaps(ed, s, e) == naive_overlap(ed, s, e));
}

/* ---- chat view ------------------------------------------------------------------ */

static void check_view(const vsr_json_t *j)
{
    for (int api = VSR_API_CHAT; api <= VSR_API_RESPONSES; api++) {
        vsr_pool_t pool;
        vsr_pool_init(&pool);
        vsr_chat_view_t v;
        const char *why = NULL;
        int rc = vsr_chat_view_build(j, (vsr_api_kind_t)api, &pool, &v, &why);
        if (rc == VSR_OK) {
            CHECK(why == NULL);
            uint64_t bytes = 0;
            int last = -1;
            for (size_t i = 0; i < v.n_messages; i++) {
                const vsr_chat_message_t *msg = &v.messages[i];
                CHECK(msg->text.len == 0 || msg->text.p != NULL);
                CHECK(msg->role >= VSR_ROLE_OTHER && msg->role <= VSR_ROLE_TOOL);
                CHECK(msg->tok < j->ntoks && msg->content_tok < j->ntoks);
                bytes += msg->text.len;
                if (msg->role == VSR_ROLE_USER)
                    last = (int)i;
            }
            CHECK(bytes == v.text_bytes);
            CHECK(last == v.last_user);
            if (api == VSR_API_CHAT) {
                CHECK(v.messages_tok != 0 && j->toks[v.messages_tok].type == VSR_JSON_ARRAY);
                CHECK(v.n_messages == j->toks[v.messages_tok].count);
            } else {
                CHECK(v.messages_tok == 0);
            }
        } else {
            CHECK(rc == VSR_ERR_INVALID && why != NULL);
        }
        vsr_pool_free(&pool);
    }
}

/* ---- plugins on chat bodies ------------------------------------------------------- */

static int key_allowed(vsr_slice_t k)
{
    static const char *const ok[] = {
        "model", "messages", "temperature", "top_p", "n", "stream", "stream_options", "stop", "max_tokens",
        "max_completion_tokens", "presence_penalty", "frequency_penalty", "logit_bias", "logprobs", "top_logprobs",
        "user", "response_format", "seed", "tools", "tool_choice", "parallel_tool_calls", "reasoning_effort",
        "metadata", "store", "modalities", "audio", "prediction", "service_tier", "web_search_options",
        "functions", "function_call", "top_k",
    };
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++)
        if (vsr_slice_eq_cstr(k, ok[i]))
            return 1;
    return 0;
}

static void check_plugins(const vsr_json_t *j, const char *src, size_t len, chooser_t *ch)
{
    static const char prompt[] = "P \"q\"\n\xc3\xa9\x01";
    vsr_pool_t pool;
    vsr_pool_init(&pool);
    vsr_chat_view_t v;
    if (vsr_chat_view_build(j, VSR_API_CHAT, &pool, &v, NULL) != VSR_OK) {
        vsr_pool_free(&pool);
        return;
    }
    uint32_t bits = next_u32(ch);
    char *blocked[] = {(char *)"user", (char *)"model", (char *)"temperature", (char *)"messages"};
    char *allowed[] = {(char *)"top_k"};
    vsr_kv_conf_t add[] = {{(char *)"x-a", (char *)"1"}};
    char *del[] = {(char *)"x-a"};
    vsr_plugin_conf_t p[4];
    memset(p, 0, sizeof(p));
    p[0].kind = VSR_PLUGIN_SYSTEM_PROMPT;
    p[0].enabled = 1;
    p[0].u.system_prompt.enabled = 1;
    p[0].u.system_prompt.insert = bits & 1;
    p[0].u.system_prompt.system_prompt = (char *)prompt;
    for (int i = 1; i <= 2; i++) {
        vsr_plugin_request_params_conf_t *rp = &p[i].u.request_params;
        p[i].kind = VSR_PLUGIN_REQUEST_PARAMS;
        p[i].enabled = i == 1 || (bits & 2);
        rp->blocked_params.items = blocked;
        rp->blocked_params.n = (bits >> 2) & 1 ? 4 : 0;
        rp->strip_unknown = (bits >> 3) & 1;
        rp->allowed_params.items = allowed;
        rp->allowed_params.n = 1;
        rp->has_max_tokens_limit = i == 1 && ((bits >> 4) & 1);
        rp->max_tokens_limit = 100;
        rp->has_max_n = (bits >> 5) & 1;
        rp->max_n = 1;
        rp->has_default_max_tokens = (bits >> 6) & 1;
        rp->default_max_tokens = 50;
    }
    p[3].kind = VSR_PLUGIN_HEADER_MUTATION;
    p[3].enabled = 1;
    p[3].u.header_mutation.add = add;
    p[3].u.header_mutation.n_add = 1;
    p[3].u.header_mutation.delete_.items = del;
    p[3].u.header_mutation.delete_.n = 1;
    vsr_decision_conf_t d;
    memset(&d, 0, sizeof(d));
    d.plugins = p;
    d.n_plugins = 4;

    vsr_json_edits_t ed;
    vsr_json_edits_init(&ed);
    vsr_plugin_ctx_t ctx;
    vsr_plugin_ctx_init(&ctx, j, &v, &ed, &pool);
    const char *why = NULL;
    int rc = vsr_plugins_run_request(&d, &ctx, &why);
    CHECK(rc == VSR_OK || (rc == VSR_ERR_INVALID && why != NULL));
    CHECK(rc != VSR_OK || (ctx.n_set_headers == 1 && ctx.n_remove_headers == 1));
    uint32_t model;
    if (rc == VSR_OK && vsr_json_object_get(j, 0, "model", &model) == VSR_OK &&
        !vsr_json_edits_overlaps(&ed, j->toks[model].start, j->toks[model].end))
        CHECK(vsr_json_edit_replace(&ed, j, model, vsr_slice_cstr("\"routed\"")) == VSR_OK);

    size_t np;
    uint64_t total;
    vsr_slice_t *pieces = vsr_json_edits_apply(&ed, src, len, &pool, &np, &total);
    char *out = vsr_pool_alloc(&pool, total + 1);
    size_t w = 0;
    for (size_t i = 0; i < np; i++) {
        memcpy(out + w, pieces[i].p, pieces[i].len);
        w += pieces[i].len;
    }
    vsr_json_t o;
    CHECK(vsr_json_parse(&o, out, w, NULL) == VSR_OK);
    vsr_chat_view_t ov;
    CHECK(vsr_chat_view_build(&o, VSR_API_CHAT, &pool, &ov, NULL) == VSR_OK);
    if (rc == VSR_OK) {
        CHECK(ctx.injected_system_prompt);
        CHECK(ov.n_messages >= 1 && ov.messages[0].role == VSR_ROLE_SYSTEM);
        CHECK(ov.n_messages == v.n_messages + (v.n_messages == 0 || v.messages[0].role != VSR_ROLE_SYSTEM));
        vsr_buf_t want;
        vsr_buf_init(&want, 0);
        vsr_buf_append_cstr(&want, prompt);
        if ((bits & 1) && v.n_messages > 0 && v.messages[0].role == VSR_ROLE_SYSTEM) {
            vsr_buf_append_cstr(&want, "\n\n");
            vsr_buf_append_slice(&want, v.messages[0].text);
        }
        /* the prompt is written as a JSON string: invalid UTF-8 as U+FFFD */
        char *fixed = vsr_pool_alloc(&pool, 3 * want.len + 1);
        size_t nfixed = vsr_utf8_repair(want.data, want.len, fixed);
        CHECK(vsr_slice_eq(ov.messages[0].text, (vsr_slice_t){fixed, nfixed}));
        vsr_buf_free(&want);
        uint32_t c = 1;
        for (uint32_t i = 0; i < o.toks[0].count; i++, c = o.toks[c + 1].next) {
            vsr_slice_t k;
            vsr_json_string(&o, c, &pool, &k);
            int protected_key = vsr_slice_eq_cstr(k, "model") || vsr_slice_eq_cstr(k, "messages");
            if ((bits >> 3) & 1)
                CHECK(key_allowed(k));
            if ((bits >> 2) & 1)
                CHECK(protected_key || (!vsr_slice_eq_cstr(k, "user") && !vsr_slice_eq_cstr(k, "temperature")));
            double num;
            if (((bits >> 4) & 1) && vsr_slice_eq_cstr(k, "max_tokens") && vsr_json_number(&o, c + 1, &num) == VSR_OK)
                CHECK(num <= 100);
            if (((bits >> 5) & 1) && vsr_slice_eq_cstr(k, "n") && vsr_json_number(&o, c + 1, &num) == VSR_OK)
                CHECK(num <= 1);
        }
    }
    vsr_json_free(&o);
    vsr_json_edits_free(&ed);
    vsr_pool_free(&pool);
}

/* ---- entry --------------------------------------------------------------------- */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *nul = memchr(data, 0, size);
    size_t jlen = nul ? (size_t)(nul - data) : size;
    vsr_json_t j;
    if (vsr_json_parse(&j, (const char *)data, jlen, NULL) != VSR_OK) {
        vsr_json_free(&j);
        return 0;
    }
    check_view(&j);

    chooser_t ch = {.script = nul ? nul + 1 : NULL, .len = nul ? size - jlen - 1 : 0};
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < size; i++)
        h = (h ^ data[i]) * 1099511628211ull;
    ch.rng = h | 1;

    model_t *m = calloc(1, sizeof(*m));
    m->j = &j;
    m->is_key = calloc(j.ntoks, 1);
    m->removed_key = calloc(j.ntoks, 1);
    for (uint32_t t = 0; t < j.ntoks; t++)
        if (j.toks[t].type == VSR_JSON_OBJECT) {
            uint32_t c = t + 1;
            for (uint32_t i = 0; i < j.toks[t].count; i++, c = j.toks[c + 1].next)
                m->is_key[c] = 1;
        }
    m->ntoks = j.ntoks;
    m->root_count = j.toks[0].count;

    check_plugins(&j, (const char *)data, jlen, &ch);

    vsr_json_edits_t ed;
    vsr_json_edits_init(&ed);
    uint32_t nops = 1 + next_u32(&ch) % MAX_OPS;
    for (uint32_t i = 0; i < nops; i++) {
        switch (next_u32(&ch) % 6) {
        case 0: op_remove(m, &ed, &ch, 0); break;
        case 1: op_remove(m, &ed, &ch, 1); break;
        case 2: op_insert(m, &ed, &ch, 1); break;
        case 3: op_insert(m, &ed, &ch, 0); break;
        case 4: op_replace(m, &ed, &ch); break;
        default: op_probe(&ed, &ch, jlen); break;
        }
        check_array(&ed, jlen);
    }

    /* The pieces against a naive splice of the (sorted) edit list. */
    vsr_pool_t pool;
    vsr_pool_init(&pool);
    size_t np;
    uint64_t total;
    vsr_slice_t *pieces = vsr_json_edits_apply(&ed, (const char *)data, jlen, &pool, &np, &total);
    char *out = malloc(total + 1);
    size_t w = 0;
    for (size_t i = 0; i < np; i++) {
        CHECK(pieces[i].len > 0 || (ed.n == 0 && np == 1));
        memcpy(out + w, pieces[i].p, pieces[i].len);
        w += pieces[i].len;
    }
    CHECK(w == total);
    char *naive = malloc(jlen + 1 + total);
    size_t nw = 0, cur = 0;
    for (size_t i = 0; i < ed.n; i++) {
        memcpy(naive + nw, data + cur, ed.e[i].start - cur);
        nw += ed.e[i].start - cur;
        if (ed.e[i].text.len)
            memcpy(naive + nw, ed.e[i].text.p, ed.e[i].text.len);
        nw += ed.e[i].text.len;
        cur = ed.e[i].end;
    }
    memcpy(naive + nw, data + cur, jlen - cur);
    nw += jlen - cur;
    CHECK(nw == w && memcmp(naive, out, w) == 0);

    vsr_json_t j2;
    int rc = vsr_json_parse(&j2, out, w, NULL);
    if (rc != VSR_OK)
        fprintf(stderr, "fuzz_json_edits: invalid output: %.*s\n", (int)(w > 2000 ? 2000 : w), out);
    CHECK(rc == VSR_OK);
    CHECK((int64_t)j2.ntoks == m->ntoks);
    if (!m->root_dead && (j.toks[0].type == VSR_JSON_OBJECT || j.toks[0].type == VSR_JSON_ARRAY))
        CHECK((int64_t)j2.toks[0].count == m->root_count);
    check_view(&j2);
    vsr_json_free(&j2);

    free(naive);
    free(out);
    vsr_pool_free(&pool);
    vsr_json_edits_free(&ed);
    free(m->is_key);
    free(m->removed_key);
    free(m);
    vsr_json_free(&j);
    return 0;
}
