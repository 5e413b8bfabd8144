/*
 * memory.c — the memory plugin (ref §2.1): a user's memories, ranked
 * against the request and injected before the call, and the turn kept after
 * the answer.  The plugin layer has no ports: the session finds the user,
 * has the runtime embed the query, reads the user's set from the store
 * (global.stores.memory), and hands the selected texts to the request hook
 * (ctx->memories); after the answer it asks vsr_memory_remember() for the
 * user's new set and writes it back.
 *
 * A user's set is one value in the store, under a key made of a hash of the
 * user's identity, in this binary form (little-endian):
 *   "VSRMEM1\n", u32 dim, u32 n, u32 turns, then n records of
 *   u64 created_ms, f32 importance, u32 text_len, text, dim × f32 (unit vector).
 * It is bounded: at most VSR_MEMORY_MAX_PER_USER records of at most
 * VSR_MEMORY_MAX_TEXT bytes, dim at most VSR_MEMORY_MAX_DIM.  A value that
 * is not in this form, or breaks a bound, reads as an empty set.
 */
#include <ctype.h>
#include <math.h>
#include <pthread.h>
#include <regex.h>
#include <stdio.h>

#include "plugins/plugins_int.h"

#define MAGIC "VSRMEM1\n"
#define MAGIC_LEN 8

const char vsr_memory_preamble[] = "The following is relevant context from previous conversations with the user:\n\n";
const char vsr_memory_postamble[] =
    "\nUse this context to personalize your response when relevant. Do not repeat it verbatim unless asked.";

const vsr_plugin_memory_conf_t *vsr_memory_conf(const vsr_decision_conf_t *d)
{
    for (size_t i = 0; d && i < d->n_plugins; i++)
        if (d->plugins[i].kind == VSR_PLUGIN_MEMORY)
            return &d->plugins[i].u.memory;
    return NULL;
}

static int listed(const vsr_strlist_conf_t *l, vsr_slice_t s)
{
    for (size_t i = 0; i < l->n; i++)
        if (vsr_slice_eq_cstr(s, l->items[i]))
            return 1;
    return 0;
}

const char *vsr_memory_skip(const vsr_config_t *cfg, const vsr_plugin_memory_conf_t *m, vsr_slice_t path,
                            vsr_slice_t model, vsr_slice_t disable)
{
    if (m == NULL || !m->enabled)
        return "disabled";
    if (vsr_slice_case_eq_cstr(vsr_slice_trim(disable), "true"))
        return "header";
    if (listed(&cfg->mem_store.disabled_routes, path))
        return "route";
    if (listed(&cfg->mem_store.disabled_models, model))
        return "model";
    return NULL;
}

/* ---- greetings and low-entropy turns (the reference's fixed lists) ---- */

static const char *const greeting_res[] = {
    "^(hi|hello|hey|howdy)[[:space:]!.,]*$",
    "^(hi|hello|hey)[[:space:],]*(there)?[[:space:]!.,]*$",
    "^(good[[:space:]]+)?(morning|afternoon|evening|night)[[:space:]!.,]*$",
    "^(thanks|thank[[:space:]]+you|thx)[[:space:]!.,]*$",
    "^(bye|goodbye|see[[:space:]]+you|later)[[:space:]!.,]*$",
    "^(ok|okay|sure|yes|no|yep|nope)[[:space:]!.,]*$",
    "^(what'?s?[[:space:]]+up|sup|yo)[[:space:]!?.,]*$",
};

static const char *const low_entropy_res[] = {
    "^(hi|hello|hey|howdy|yo|sup)[[:space:]!.,]*$",
    "^(good[[:space:]]+)?(morning|afternoon|evening|night)[[:space:]!.,]*$",
    "^(thanks|thank[[:space:]]+you|thx|ty)[[:space:]!.,]*$",
    "^(bye|goodbye|see[[:space:]]+you|later|cheers)[[:space:]!.,]*$",
    "^(ok|okay|sure|yes|no|yep|nope|yea|nah|k|alright|got[[:space:]]+it)[[:space:]!.,]*$",
    "^(cool|great|nice|awesome|perfect|sounds[[:space:]]+good)[[:space:]!.,]*$",
};

static const char *const refusal_res[] = {
    "^i('m|[[:space:]]+am)[[:space:]]+(sorry|unable|not[[:space:]]+able|afraid[[:space:]]+i[[:space:]]+can)",
    "^(as[[:space:]]+an?[[:space:]]+ai|i[[:space:]]+don'?t[[:space:]]+have[[:space:]]+(access|the[[:space:]]+ability))",
    "^i[[:space:]]+can'?t[[:space:]]+(help|assist|provide)[[:space:]]+with[[:space:]]+that",
};

/* The fixed lists, compiled once for the process (they never change). */
#define N_FIXED (VSR_ARRAY_LEN(greeting_res) + VSR_ARRAY_LEN(low_entropy_res) + VSR_ARRAY_LEN(refusal_res))
static regex_t fixed[N_FIXED];
static int fixed_ok[N_FIXED];
static pthread_once_t fixed_once = PTHREAD_ONCE_INIT;

static void compile_fixed(void)
{
    size_t k = 0;
    const char *const *lists[3] = {greeting_res, low_entropy_res, refusal_res};
    size_t lens[3] = {VSR_ARRAY_LEN(greeting_res), VSR_ARRAY_LEN(low_entropy_res), VSR_ARRAY_LEN(refusal_res)};
    for (size_t l = 0; l < 3; l++)
        for (size_t i = 0; i < lens[l]; i++, k++)
            fixed_ok[k] = regcomp(&fixed[k], lists[l][i], REG_EXTENDED | REG_ICASE | REG_NOSUB) == 0;
}

/* 1 when text (at most max bytes, else 0) matches one of the n fixed patterns from index first */
static int matches_any(vsr_slice_t text, size_t first, size_t n, size_t max)
{
    if (text.len > max)
        return 0;
    pthread_once(&fixed_once, compile_fixed);
    char buf[512];
    size_t len = VSR_MIN(text.len, sizeof(buf) - 1);
    if (len)
        memcpy(buf, text.p, len);
    buf[len] = '\0';
    for (size_t i = first; i < first + n; i++)
        if (fixed_ok[i] && regexec(&fixed[i], buf, 0, NULL, 0) == 0)
            return 1;
    return 0;
}

int vsr_memory_is_greeting(vsr_slice_t query)
{
    return matches_any(vsr_slice_trim(query), 0, VSR_ARRAY_LEN(greeting_res), 25);
}

int vsr_memory_should_search(const vsr_chat_view_t *chat)
{
    if (chat == NULL || chat->last_user < 0)
        return 0;
    if (chat->n_tools)
        return 0; /* the request carries tools */
    for (size_t i = 0; i < chat->n_messages; i++)
        if (chat->messages[i].role == VSR_ROLE_TOOL || chat->messages[i].has_tool_calls)
            return 0; /* ... or tool results */
    return !vsr_memory_is_greeting(chat->messages[chat->last_user].text);
}

static const char *const pronouns[] = {"my", "i", "me", "mine", "i'm", "i've", "i'll", "i'd", "myself"};

int vsr_memory_personal(vsr_slice_t query)
{
    vsr_slice_t rest = query;
    while (rest.len) {
        size_t i = 0;
        while (i < rest.len && !(isalnum((unsigned char)rest.p[i]) || rest.p[i] == '\''))
            i++;
        size_t start = i;
        while (i < rest.len && (isalnum((unsigned char)rest.p[i]) || rest.p[i] == '\''))
            i++;
        vsr_slice_t w = vsr_slice(rest.p + start, i - start);
        for (size_t k = 0; w.len && k < VSR_ARRAY_LEN(pronouns); k++)
            if (vsr_slice_case_eq_cstr(w, pronouns[k]))
                return 1;
        rest = vsr_slice(rest.p + i, rest.len - i);
    }
    return 0;
}

/* ---- the stored set ---- */

static void put32(vsr_buf_t *b, uint32_t v)
{
    unsigned char x[4] = {(unsigned char)v, (unsigned char)(v >> 8), (unsigned char)(v >> 16),
                          (unsigned char)(v >> 24)};
    vsr_buf_append(b, (const char *)x, 4);
}

static uint32_t get32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

int vsr_memory_decode(vsr_slice_t v, vsr_pool_t *pool, vsr_memory_set_t *out)
{
    memset(out, 0, sizeof(*out));
    const unsigned char *p = (const unsigned char *)v.p, *end = p + v.len;
    if (v.len < MAGIC_LEN + 12 || memcmp(p, MAGIC, MAGIC_LEN) != 0)
        return VSR_ERR_INVALID;
    p += MAGIC_LEN;
    uint32_t dim = get32(p), n = get32(p + 4), turns = get32(p + 8);
    p += 12;
    if (dim == 0 || dim > VSR_MEMORY_MAX_DIM || n > VSR_MEMORY_MAX_PER_USER)
        return VSR_ERR_INVALID;
    vsr_memory_item_t *items = vsr_pool_alloc(pool, (n + 1) * sizeof(*items));
    for (uint32_t i = 0; i < n; i++) {
        if ((size_t)(end - p) < 16)
            return VSR_ERR_INVALID;
        uint64_t lo = get32(p), hi = get32(p + 4);
        float imp;
        memcpy(&imp, p + 8, 4);
        uint32_t tl = get32(p + 12);
        p += 16;
        if (tl > VSR_MEMORY_MAX_TEXT || (size_t)(end - p) < tl + (size_t)dim * 4 || !isfinite(imp))
            return VSR_ERR_INVALID;
        items[i].created_ms = lo | hi << 32;
        items[i].importance = imp;
        items[i].text = vsr_slice((const char *)p, tl); /* into v: no second copy of the set */
        p += tl;
        float *vec = vsr_pool_alloc(pool, (size_t)dim * sizeof(float));
        memcpy(vec, p, (size_t)dim * 4);
        for (uint32_t k = 0; k < dim; k++)
            if (!isfinite(vec[k]))
                return VSR_ERR_INVALID;
        items[i].vec = vec;
        p += (size_t)dim * 4;
    }
    if (p != end)
        return VSR_ERR_INVALID;
    out->dim = dim;
    out->n = n;
    out->turns = turns;
    out->items = items;
    return VSR_OK;
}

void vsr_memory_encode(const vsr_memory_set_t *s, vsr_buf_t *out)
{
    vsr_buf_append(out, MAGIC, MAGIC_LEN);
    put32(out, (uint32_t)s->dim);
    put32(out, (uint32_t)s->n);
    put32(out, s->turns);
    for (size_t i = 0; i < s->n; i++) {
        const vsr_memory_item_t *m = &s->items[i];
        put32(out, (uint32_t)m->created_ms);
        put32(out, (uint32_t)(m->created_ms >> 32));
        vsr_buf_append(out, (const char *)&m->importance, 4);
        put32(out, (uint32_t)m->text.len);
        vsr_buf_append(out, m->text.p, m->text.len);
        vsr_buf_append(out, (const char *)m->vec, s->dim * sizeof(float));
    }
}

/* ---- retrieval ---- */

typedef struct {
    size_t idx;
    double cos, score;
} cand_t;

static int by_score(const void *a, const void *b)
{
    const cand_t *x = a, *y = b;
    if (x->score != y->score)
        return x->score < y->score ? 1 : -1;
    return x->idx < y->idx ? -1 : x->idx > y->idx;
}

static int by_cos(const void *a, const void *b)
{
    const cand_t *x = a, *y = b;
    if (x->cos != y->cos)
        return x->cos < y->cos ? 1 : -1;
    return x->idx < y->idx ? -1 : x->idx > y->idx;
}

#define MAX_WORDS 512u

/* lower-cased words of [A-Za-z0-9']: at most MAX_WORDS, each at most 63 bytes */
static size_t words(vsr_slice_t t, char (*w)[64])
{
    size_t n = 0, i = 0;
    while (i < t.len && n < MAX_WORDS) {
        while (i < t.len && !(isalnum((unsigned char)t.p[i]) || t.p[i] == '\''))
            i++;
        size_t len = 0;
        while (i < t.len && (isalnum((unsigned char)t.p[i]) || t.p[i] == '\'')) {
            if (len < 63)
                w[n][len++] = (char)tolower((unsigned char)t.p[i]);
            i++;
        }
        if (len) {
            w[n][len] = '\0';
            n++;
        }
    }
    return n;
}

static size_t count_words(vsr_slice_t t)
{
    size_t n = 0;
    int in = 0;
    for (size_t i = 0; i < t.len; i++) {
        int sp = isspace((unsigned char)t.p[i]);
        if (!sp && !in)
            n++;
        in = !sp;
    }
    return n;
}

static int has_word(char (*w)[64], size_t n, const char *x)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(w[i], x) == 0)
            return 1;
    return 0;
}

/* word-set Jaccard */
static double jaccard(vsr_slice_t a, vsr_slice_t b, char (*wa)[64], char (*wb)[64])
{
    size_t na = words(a, wa), nb = words(b, wb);
    size_t uniq_a = 0, inter = 0, uniq_b = 0;
    for (size_t i = 0; i < na; i++) {
        if (has_word(wa, i, wa[i]))
            continue;
        uniq_a++;
        inter += has_word(wb, nb, wa[i]);
    }
    for (size_t i = 0; i < nb; i++)
        uniq_b += !has_word(wb, i, wb[i]);
    size_t uni = uniq_a + uniq_b - inter;
    return uni ? (double)inter / (double)uni : 0;
}

/* character 3-gram Jaccard of the lower-cased texts (at most 1024 bytes each) */
static double trigram(vsr_slice_t a, vsr_slice_t b)
{
    size_t la = VSR_MIN(a.len, 1024u), lb = VSR_MIN(b.len, 1024u);
    if (la < 3 || lb < 3)
        return 0;
    size_t inter = 0;
    for (size_t i = 0; i + 3 <= la; i++)
        for (size_t k = 0; k + 3 <= lb; k++)
            if (tolower((unsigned char)a.p[i]) == tolower((unsigned char)b.p[k]) &&
                tolower((unsigned char)a.p[i + 1]) == tolower((unsigned char)b.p[k + 1]) &&
                tolower((unsigned char)a.p[i + 2]) == tolower((unsigned char)b.p[k + 2])) {
                inter++;
                break;
            }
    size_t uni = (la - 2) + (lb - 2) - inter;
    return uni ? (double)inter / (double)uni : 0;
}

static uint64_t word_hash(const char *w)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (; *w; w++)
        h = (h ^ (unsigned char)*w) * 1099511628211ull;
    return h;
}

#define BM25_TERMS 64u /* distinct query words scored */

/* BM25 of the query's words (the first BM25_TERMS distinct ones) in each
 * candidate (k1 1.2, b 0.75, over the candidates): one pass over each
 * text, words compared by a 64-bit hash */
static void bm25(const vsr_memory_set_t *set, cand_t *c, size_t n, vsr_slice_t query, double *out, vsr_pool_t *pool)
{
    char (*w)[64] = vsr_pool_alloc(pool, MAX_WORDS * 64);
    size_t nw = words(query, w), nq = 0;
    uint64_t q[BM25_TERMS];
    for (size_t i = 0; i < nw && nq < BM25_TERMS; i++) {
        uint64_t h = word_hash(w[i]);
        int seen = 0;
        for (size_t k = 0; k < nq && !seen; k++)
            seen = q[k] == h;
        if (!seen)
            q[nq++] = h;
    }
    uint32_t *tf = vsr_pool_alloc(pool, (n * nq + 1) * sizeof(uint32_t));
    size_t *len = vsr_pool_alloc(pool, (n + 1) * sizeof(size_t));
    memset(tf, 0, (n * nq + 1) * sizeof(uint32_t));
    double avg = 0;
    for (size_t i = 0; i < n; i++) {
        len[i] = words(set->items[c[i].idx].text, w);
        avg += (double)len[i];
        for (size_t k = 0; k < len[i]; k++) {
            uint64_t h = word_hash(w[k]);
            for (size_t j = 0; j < nq; j++)
                tf[i * nq + j] += q[j] == h;
        }
        out[i] = 0;
    }
    avg = n && avg > 0 ? avg / (double)n : 1;
    for (size_t j = 0; j < nq; j++) {
        size_t df = 0;
        for (size_t i = 0; i < n; i++)
            df += tf[i * nq + j] > 0;
        double idf = log(1 + ((double)n - (double)df + 0.5) / ((double)df + 0.5));
        for (size_t i = 0; i < n; i++) {
            double f = tf[i * nq + j];
            if (f > 0)
                out[i] += idf * f * 2.2 / (f + 1.2 * (0.25 + 0.75 * (double)len[i] / avg));
        }
    }
}

static void reflection_of(const vsr_config_t *cfg, const vsr_plugin_memory_conf_t *m, int *on,
                          uint64_t *max_tokens, uint64_t *half_life, double *dedup,
                          const vsr_strlist_conf_t **block)
{
    const vsr_memory_reflection_conf_t *p = &m->reflection, *g = &cfg->mem_store.reflection;
    *on = p->has_enabled ? p->enabled : g->has_enabled ? g->enabled : 1;
    int noop = p->has_algorithm ? p->noop : g->has_algorithm ? g->noop : 0;
    if (noop)
        *on = 0;
    *max_tokens = p->has_max_inject_tokens ? p->max_inject_tokens : g->has_max_inject_tokens ? g->max_inject_tokens
                                                                                           : 2048;
    *half_life = p->has_recency_decay_days ? p->recency_decay_days
                 : g->has_recency_decay_days ? g->recency_decay_days
                                             : 30;
    *dedup = p->has_dedup_threshold ? p->dedup_threshold : g->has_dedup_threshold ? g->dedup_threshold : 0.90;
    *block = p->has_block_patterns ? &p->block_patterns : &g->block_patterns;
}

static int blocked(const vsr_strlist_conf_t *block, vsr_slice_t text, vsr_pool_t *pool)
{
    if (block->n == 0)
        return 0;
    char *z = vsr_pool_alloc(pool, text.len + 1);
    if (text.len)
        memcpy(z, text.p, text.len);
    z[text.len] = '\0';
    for (size_t i = 0; i < block->n; i++) {
        regex_t re;
        if (regcomp(&re, block->items[i], REG_EXTENDED | REG_ICASE | REG_NOSUB) != 0)
            continue;
        int hit = regexec(&re, z, 0, NULL, 0) == 0;
        regfree(&re);
        if (hit)
            return 1;
    }
    return 0;
}

size_t vsr_memory_select(const vsr_config_t *cfg, const vsr_plugin_memory_conf_t *m, const vsr_memory_set_t *set,
                         const float *q, size_t dim, vsr_slice_t query, uint64_t now_ms, vsr_pool_t *pool,
                         vsr_slice_t **out)
{
    *out = NULL;
    if (set->n == 0 || set->dim != dim)
        return 0;
    size_t limit = m->has_retrieval_limit ? m->retrieval_limit
                   : cfg->mem_store.default_retrieval_limit ? cfg->mem_store.default_retrieval_limit
                                                            : 5;
    double threshold = m->has_similarity_threshold ? m->similarity_threshold
                       : cfg->mem_store.has_default_similarity_threshold ? cfg->mem_store.default_similarity_threshold
                                                                         : 0.6;
    int hybrid = m->has_hybrid_search ? m->hybrid_search : cfg->mem_store.hybrid_search;
    int rrf = m->has_hybrid_mode ? m->hybrid_rrf : cfg->mem_store.hybrid_rrf;
    cand_t *c = vsr_pool_alloc(pool, (set->n + 1) * sizeof(cand_t));
    size_t n = 0;
    for (size_t i = 0; i < set->n; i++) {
        double dot = 0;
        for (size_t k = 0; k < dim; k++)
            dot += (double)q[k] * set->items[i].vec[k];
        if (dot >= threshold)
            c[n++] = (cand_t){i, dot, dot};
    }
    if (n == 0)
        return 0;
    /* the candidates a vector search would hand on: the best max(20, limit × 4), × 8 with hybrid */
    qsort(c, n, sizeof(cand_t), by_cos);
    n = VSR_MIN(n, VSR_MAX((size_t)20, limit * 4) * (hybrid ? 8 : 1));
    if (hybrid && n > 1) {
        double *b = vsr_pool_alloc(pool, (n + 1) * sizeof(double));
        bm25(set, c, n, query, b, pool);
        if (rrf) {
            /* reciprocal rank fusion (k = 60) of the vector and BM25 rankings */
            cand_t *r = vsr_pool_alloc(pool, n * sizeof(cand_t));
            for (size_t i = 0; i < n; i++)
                r[i] = (cand_t){i, b[i], 0};
            qsort(r, n, sizeof(cand_t), by_cos);
            for (size_t i = 0; i < n; i++)
                c[i].score = 1.0 / (60.0 + (double)i + 1);
            for (size_t i = 0; i < n; i++)
                c[r[i].idx].score += 1.0 / (60.0 + (double)i + 1);
        } else {
            double lo = b[0], hi = b[0];
            for (size_t i = 1; i < n; i++) {
                lo = VSR_MIN(lo, b[i]);
                hi = VSR_MAX(hi, b[i]);
            }
            for (size_t i = 0; i < n; i++)
                c[i].score = 0.7 * c[i].cos + 0.2 * (hi > lo ? (b[i] - lo) / (hi - lo) : 0) +
                             0.1 * trigram(query, set->items[c[i].idx].text);
        }
        qsort(c, n, sizeof(cand_t), by_score);
    }
    n = VSR_MIN(n, limit);
    /* the reflection gate */
    int on;
    uint64_t max_tokens, half_life;
    double dedup;
    const vsr_strlist_conf_t *block;
    reflection_of(cfg, m, &on, &max_tokens, &half_life, &dedup, &block);
    vsr_slice_t *texts = vsr_pool_alloc(pool, (n + 1) * sizeof(vsr_slice_t));
    size_t kept = 0;
    if (!on) {
        for (size_t i = 0; i < n; i++)
            texts[kept++] = set->items[c[i].idx].text;
        *out = texts;
        return kept;
    }
    size_t live = 0;
    for (size_t i = 0; i < n; i++) {
        const vsr_memory_item_t *it = &set->items[c[i].idx];
        if (blocked(block, it->text, pool))
            continue;
        double age_days = now_ms > it->created_ms ? (double)(now_ms - it->created_ms) / 86400000.0 : 0;
        double decay = half_life ? exp(-log(2.0) * age_days / (double)half_life) : 1;
        c[live] = c[i];
        c[live++].score *= decay;
    }
    qsort(c, live, sizeof(cand_t), by_score);
    char (*wa)[64] = vsr_pool_alloc(pool, MAX_WORDS * 64);
    char (*wb)[64] = vsr_pool_alloc(pool, MAX_WORDS * 64);
    uint64_t tokens = 0;
    for (size_t i = 0; i < live; i++) {
        vsr_slice_t t = set->items[c[i].idx].text;
        int dup = 0;
        for (size_t k = 0; k < kept && !dup; k++)
            dup = jaccard(t, texts[k], wa, wb) >= dedup;
        if (dup)
            continue;
        uint64_t cost = (uint64_t)ceil((double)count_words(t) * 1.3);
        if (kept > 0 && tokens + cost > max_tokens)
            break;
        tokens += cost;
        texts[kept++] = t;
    }
    *out = texts;
    return kept;
}

vsr_slice_t vsr_memory_context(vsr_pool_t *pool, const vsr_slice_t *texts, size_t n)
{
    vsr_buf_t b;
    vsr_buf_init(&b, 0);
    vsr_buf_append_cstr(&b, vsr_memory_preamble);
    for (size_t i = 0; i < n; i++) {
        if (texts[i].len == 0)
            continue;
        vsr_buf_append_cstr(&b, "- ");
        vsr_buf_append(&b, texts[i].p, texts[i].len);
        vsr_buf_append_cstr(&b, "\n");
    }
    vsr_buf_append_cstr(&b, vsr_memory_postamble);
    vsr_slice_t out = vsr_pool_dup_slice(pool, vsr_buf_slice(&b));
    vsr_buf_free(&b);
    return out;
}

/* The request hook: ONE user message with the memories, right after the
 * last system or developer message (first when there is none). */
int vsr__plugin_memory_request(const vsr_plugin_conf_t *conf, vsr_plugin_ctx_t *ctx, const char **why)
{
    const vsr_chat_view_t *chat = ctx->chat;
    const vsr_memory_hits_t *h = ctx->memories;
    if (!conf->u.memory.enabled || h == NULL || h->n == 0 || chat == NULL || chat->api != VSR_API_CHAT ||
        chat->messages_tok == 0)
        return VSR_OK;
    vsr_slice_t text = vsr_memory_context(ctx->pool, h->texts, h->n);
    const char *pre = "{\"role\":\"user\",\"content\":";
    size_t a = strlen(pre), b = vsr_json_string_size(text);
    char *p = vsr_pool_alloc(ctx->pool, 1 + a + b + 1);
    p[0] = ',';
    memcpy(p + 1, pre, a);
    vsr_json_string_put(p + 1 + a, text);
    p[1 + a + b] = '}';
    int last = -1;
    for (size_t i = 0; i < chat->n_messages; i++)
        if ((chat->messages[i].role == VSR_ROLE_SYSTEM || chat->messages[i].role == VSR_ROLE_DEVELOPER) &&
            chat->messages[i].tok)
            last = (int)i;
    int rc;
    if (last >= 0) {
        uint32_t end = ctx->json->toks[chat->messages[last].tok].end;
        rc = vsr_json_edits_add(ctx->edits, end, end, vsr_slice(p, 1 + a + b + 1));
    } else {
        rc = vsr_json_edit_insert_element(ctx->edits, ctx->json, chat->messages_tok, vsr_slice(p + 1, a + b + 1));
    }
    if (rc != VSR_OK) {
        *why = "memory: the messages were already edited where the memories go";
        return VSR_ERR_INVALID;
    }
    ctx->memory_injected = h->n;
    return VSR_OK;
}

/* ---- auto-store ---- */

/* text without <think>...</think> blocks, trimmed */
static vsr_slice_t strip_think(vsr_pool_t *pool, vsr_slice_t t)
{
    vsr_buf_t b;
    vsr_buf_init(&b, 0);
    size_t i = 0;
    while (i < t.len) {
        const char *o = vsr_find(t.p + i, t.len - i, "<think>", 7);
        if (o == NULL) {
            vsr_buf_append(&b, t.p + i, t.len - i);
            break;
        }
        vsr_buf_append(&b, t.p + i, (size_t)(o - (t.p + i)));
        size_t at = (size_t)(o - t.p) + 7;
        const char *c = vsr_find(t.p + at, t.len - at, "</think>", 8);
        if (c == NULL)
            break;
        i = (size_t)(c - t.p) + 8;
    }
    vsr_slice_t out = vsr_pool_dup_slice(pool, vsr_slice_trim(vsr_buf_slice(&b)));
    vsr_buf_free(&b);
    return out;
}

static int low_entropy(vsr_slice_t user, vsr_slice_t answer)
{
    user = vsr_slice_trim(user);
    answer = vsr_slice_trim(answer);
    if (user.len + answer.len < 30)
        return 1;
    if (user.len && matches_any(user, VSR_ARRAY_LEN(greeting_res), VSR_ARRAY_LEN(low_entropy_res), 64))
        return 1;
    return answer.len && matches_any(vsr_slice(answer.p, VSR_MIN(answer.len, 200u)),
                                     VSR_ARRAY_LEN(greeting_res) + VSR_ARRAY_LEN(low_entropy_res),
                                     VSR_ARRAY_LEN(refusal_res), 200);
}

/* "Q: <user>\nA: <answer>", cut at VSR_MEMORY_MAX_TEXT bytes on a UTF-8 boundary */
static void turn_chunk(vsr_buf_t *b, vsr_slice_t user, vsr_slice_t answer)
{
    if (user.len) {
        vsr_buf_append_cstr(b, "Q: ");
        vsr_buf_append(b, user.p, user.len);
    }
    if (answer.len) {
        if (user.len)
            vsr_buf_append_cstr(b, "\n");
        vsr_buf_append_cstr(b, "A: ");
        vsr_buf_append(b, answer.p, answer.len);
    }
}

static vsr_slice_t bounded(vsr_pool_t *pool, vsr_buf_t *b)
{
    size_t len = VSR_MIN(b->len, (size_t)VSR_MEMORY_MAX_TEXT);
    while (len > 0 && len < b->len && ((unsigned char)b->data[len] & 0xC0) == 0x80)
        len--;
    return vsr_pool_dup_slice(pool, vsr_slice(b->data, len));
}

static double strength(const vsr_config_t *cfg, const vsr_memory_item_t *m, uint64_t now_ms)
{
    double days = cfg->mem_store.initial_strength_days ? (double)cfg->mem_store.initial_strength_days : 30;
    double age = now_ms > m->created_ms ? (double)(now_ms - m->created_ms) / 86400000.0 : 0;
    return m->importance * exp(-age / days);
}

int vsr_memory_remember(const vsr_config_t *cfg, const vsr_memory_set_t *old, const float *q, size_t dim,
                        const vsr_chat_view_t *chat, vsr_slice_t answer, uint64_t now_ms, vsr_pool_t *pool,
                        vsr_buf_t *out)
{
    if (chat == NULL || chat->last_user < 0 || dim == 0 || dim > VSR_MEMORY_MAX_DIM)
        return 0;
    vsr_slice_t user = vsr_slice_trim(chat->messages[chat->last_user].text);
    answer = strip_think(pool, answer);
    if (user.len == 0 && answer.len == 0)
        return 0;
    size_t cap = cfg->mem_store.max_memories_per_user ? cfg->mem_store.max_memories_per_user
                                                      : VSR_MEMORY_DEFAULT_MAX_PER_USER;
    int same_dim = old->n == 0 || old->dim == dim; /* a new embedding model: the old set cannot be searched */
    size_t n_old = same_dim ? old->n : 0;
    vsr_memory_set_t s = {.dim = dim, .turns = (same_dim ? old->turns : 0) + 1};
    s.items = vsr_pool_alloc(pool, (n_old + 3) * sizeof(vsr_memory_item_t));
    double prune = cfg->mem_store.prune_threshold;
    for (size_t i = 0; i < n_old; i++)
        if (!(prune > 0 && strength(cfg, &old->items[i], now_ms) < prune))
            s.items[s.n++] = old->items[i];
    float *vec = vsr_pool_alloc(pool, dim * sizeof(float));
    memcpy(vec, q, dim * sizeof(float));
    int added = 0;
    vsr_buf_t b;
    vsr_buf_init(&b, 0);
    if (!low_entropy(user, answer)) {
        turn_chunk(&b, user, answer);
        s.items[s.n++] = (vsr_memory_item_t){.created_ms = now_ms, .importance = 0.5f, .text = bounded(pool, &b),
                                             .vec = vec};
        added = 1;
    }
    /* every 3rd user turn: the last 5 turns as one chunk */
    size_t turns = 0;
    for (size_t i = 0; i < chat->n_messages; i++)
        turns += chat->messages[i].role == VSR_ROLE_USER;
    if (turns >= 3 && turns % 3 == 0) {
        vsr_buf_reset(&b);
        size_t first = chat->n_messages, seen = 0;
        for (size_t i = (size_t)chat->last_user; i-- > 0 && seen < 4;)
            if (chat->messages[i].role == VSR_ROLE_USER) {
                first = i;
                seen++;
            }
        for (size_t i = first; i < (size_t)chat->last_user; i++) {
            if (chat->messages[i].role != VSR_ROLE_USER)
                continue;
            vsr_slice_t a = VSR_SLICE_NULL;
            if (i + 1 < chat->n_messages && chat->messages[i + 1].role == VSR_ROLE_ASSISTANT)
                a = strip_think(pool, chat->messages[i + 1].text);
            turn_chunk(&b, vsr_slice_trim(chat->messages[i].text), a);
            vsr_buf_append_cstr(&b, "\n---\n");
        }
        turn_chunk(&b, user, answer);
        s.items[s.n++] = (vsr_memory_item_t){.created_ms = now_ms, .importance = 0.7f, .text = bounded(pool, &b),
                                             .vec = vec};
        added = 1;
    }
    vsr_buf_free(&b);
    if (!added && s.n == n_old)
        return 0;
    /* past max_memories_per_user: the weakest go (importance, decayed by age), the oldest first among equals */
    while (s.n > cap) {
        size_t worst = 0;
        for (size_t i = 1; i < s.n; i++) {
            double a = strength(cfg, &s.items[i], now_ms), w = strength(cfg, &s.items[worst], now_ms);
            if (a < w || (a == w && s.items[i].created_ms < s.items[worst].created_ms))
                worst = i;
        }
        memmove(&s.items[worst], &s.items[worst + 1], (s.n - worst - 1) * sizeof(vsr_memory_item_t));
        s.n--;
    }
    vsr_memory_encode(&s, out);
    return 1;
}

/* ---- the query's rewrite (an external model of role memory_rewrite) ---- */

/* The reference's prompt (req_filter_memory_rewrite.go), word for word. */
static const char rewrite_prompt[] =
    "You are a query rewriter for semantic search in a memory database.\n\n"
    "Given conversation history and a user query, rewrite the query to be self-contained\n"
    "for searching memories. Include relevant context from history if the query references\n"
    "previous conversation.\n\n"
    "Do NOT use <think> tags or show your reasoning. Output ONLY the rewritten query.\n\n"
    "CRITICAL RULES:\n"
    "- PRESERVE THE QUERY TYPE: If the user is stating a fact, keep it as a statement. If asking a question, keep it "
    "as a question. NEVER convert statements to questions!\n"
    "- Use ONLY facts explicitly stated in the history. NEVER invent or hallucinate values!\n"
    "- If history says \"$10,000\" - use \"$10,000\" (not $1,000,000)\n"
    "- Keep the rewritten query concise (under 50 words)\n"
    "- Preserve the user's intent exactly\n"
    "- Replace vague references (e.g., \"it\", \"that\", \"my budget\") with specific context from history\n"
    "- Include CONSTRAINTS when relevant (cannot use X, must use Y, excluded, limitations)\n"
    "- For tech/deployment queries, include any mentioned technologies or platforms\n"
    "- If the query is already self-contained, return it unchanged\n"
    "- Return ONLY the rewritten query, no explanation or quotes\n\n"
    "EXAMPLES:\n"
    "History: [user]: My project budget is $50,000 and deadline is March 15th\n"
    "Query: When is the deadline?\n"
    "Rewritten: When is the deadline for my $50,000 project?\n\n"
    "History: [user]: I'm building an e-commerce platform\n"
    "Query: I prefer React for frontend and Go for backend\n"
    "Rewritten: I prefer React for frontend and Go for backend for my e-commerce platform\n\n"
    "History: [user]: I prefer React for frontend and Go for backend\n"
    "Query: What tech should I use?\n"
    "Rewritten: What tech stack should I use considering my preference for React frontend and Go backend?\n\n"
    "History: [user]: We cannot use AWS, must deploy on Azure\n"
    "Query: Where can I deploy?\n"
    "Rewritten: Where can I deploy my project given I cannot use AWS and must use Azure?\n\n"
    "History: [user]: Building an e-commerce platform with PostgreSQL database\n"
    "Query: What database?\n"
    "Rewritten: What database should I use for my e-commerce platform using PostgreSQL?\n\n"
    "History: (no relevant context)\n"
    "Query: What is my budget?\n"
    "Rewritten: What is my project budget?";

static const char *role_name(vsr_role_t r)
{
    switch (r) {
    case VSR_ROLE_DEVELOPER: return "developer";
    case VSR_ROLE_USER: return "user";
    case VSR_ROLE_ASSISTANT: return "assistant";
    case VSR_ROLE_TOOL: return "tool";
    default: return NULL;
    }
}

void vsr_memory_rewrite_request(vsr_buf_t *out, const char *model, const vsr_chat_view_t *chat)
{
    /* the history: the last five messages with text, system ones left out (the current user turn among them) */
    size_t idx[VSR_MEMORY_REWRITE_HISTORY], n = 0;
    for (size_t i = chat->n_messages; i-- > 0 && n < VSR_MEMORY_REWRITE_HISTORY;)
        if (role_name(chat->messages[i].role) && chat->messages[i].text.len)
            idx[n++] = i;
    vsr_buf_t u;
    vsr_buf_init(&u, 0);
    vsr_buf_append_cstr(&u, "History:\n");
    if (n == 0)
        vsr_buf_append_cstr(&u, "(no previous conversation)");
    for (size_t k = n; k-- > 0;) {
        const vsr_chat_message_t *m = &chat->messages[idx[k]];
        vsr_buf_printf(&u, "%s[%s]: ", k + 1 < n ? "\n" : "", role_name(m->role));
        vsr_buf_append(&u, m->text.p, m->text.len < VSR_MEMORY_MAX_TEXT ? m->text.len : VSR_MEMORY_MAX_TEXT);
    }
    vsr_slice_t q = chat->last_user >= 0 ? chat->messages[chat->last_user].text : VSR_SLICE_NULL;
    vsr_buf_append_cstr(&u, "\n\nQuery: ");
    vsr_buf_append(&u, q.p, q.len < VSR_MEMORY_MAX_TEXT ? q.len : VSR_MEMORY_MAX_TEXT);
    vsr_buf_append_cstr(&u, "\n\nRewritten query:");
    vsr_buf_append_cstr(out, "{\"model\":");
    vsr_buf_append_json_string(out, vsr_slice_cstr(model ? model : ""));
    vsr_buf_append_cstr(out, ",\"messages\":[{\"role\":\"system\",\"content\":");
    vsr_buf_append_json_string(out, vsr_slice_cstr(rewrite_prompt));
    vsr_buf_append_cstr(out, "},{\"role\":\"user\",\"content\":");
    vsr_buf_append_json_string(out, vsr_buf_slice(&u));
    vsr_buf_append_cstr(out, "}],\"max_tokens\":512,\"temperature\":0.1,\"stream\":false}");
    vsr_buf_free(&u);
}

vsr_slice_t vsr_memory_rewrite_result(vsr_pool_t *pool, vsr_slice_t content)
{
    vsr_slice_t t = strip_think(pool, content);
    while (t.len && (t.p[0] == '"' || t.p[0] == '\''))
        t = vsr_slice(t.p + 1, t.len - 1);
    while (t.len && (t.p[t.len - 1] == '"' || t.p[t.len - 1] == '\''))
        t.len--;
    if (t.len > VSR_MEMORY_MAX_TEXT)
        t.len = VSR_MEMORY_MAX_TEXT; /* a query, not an essay: what is embedded and searched is bounded */
    return t;
}
