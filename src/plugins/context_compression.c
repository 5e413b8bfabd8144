/*
 * context_compression.c — cutting a long chat history down to a token
 * budget (ref §2), by extractive BM25 sentence selection.  Pure C: no model,
 * no runtime call, bounded work.
 *
 * Token estimate: the context signal's, ceil(bytes / 4) over the messages'
 * text (signals.c: vsr_signals_token_estimate; the plugins module may not
 * include signals, so the formula is repeated in estimate() below).
 *
 * When the estimate exceeds budget.trigger_tokens, message contents are cut
 * until the estimate is at most target_tokens - reserve_output_tokens.
 * "auto" limits (the reference's; also 0) come from the selected model's
 * context window W (its card's context_window_size, ctx->context_window)
 * less the output reserve R (reserve_output_tokens, or when auto the
 * request's max_completion_tokens, else max_tokens, else 0): an auto trigger
 * or target is W - R, so the request is cut to fit the window; with W
 * unknown an auto trigger never fires and an auto target cuts nothing (the
 * reference's target is then the request itself).  An auto reserve is not
 * taken from an explicit target.  What is cut:
 *  - never cut: system and developer messages, the last user message, the
 *    message right before it when that is the assistant's (the most recent
 *    turn), and the final message of the conversation;
 *  - candidates, per `targets` in the order given: tool_results (role tool)
 *    and history (user and assistant messages), oldest first within each;
 *    only string contents are cut (content arrays are left whole);
 *  - each candidate is cut just enough to cover what is still over budget
 *    (so the oldest ones lose the most): its text is split into sentences
 *    (ending at . ! ? before a space, at a line end, or at most
 *    CC_SENTENCE_BYTES bytes), each sentence is scored with BM25 (k1 1.2,
 *    b 0.75, document frequencies over the message's sentences) against the
 *    words of the last user message, and the best sentences that fit are
 *    kept in their original order, joined by one space; each run of dropped
 *    sentences becomes "…".  A content with nothing that fits becomes "…".
 * The new content replaces the old string (one value edit per message).
 *
 * Failures: a content an earlier plugin already edited is not a candidate.
 * When the budget cannot be met (what stays is too big), fail_open sends the
 * best the plugin could do (smaller, never larger) and fail_closed refuses
 * the request: VSR_ERR_INVALID, 400 with *why.  The edits are only added
 * once every one of them is known to fit, so a failure adds none.
 * Evidence: ctx->compression_* (tokens before and after, messages cut).
 */
#include "plugins/plugins_int.h"

#include <math.h>
#include <stdlib.h>

#define CC_SENTENCE_BYTES 400u   /* longest sentence before a forced cut */
#define CC_MAX_SENTENCES 4096u   /* per message; the rest is one last sentence */
#define CC_MAX_TERMS 256u        /* distinct query words used */
#define CC_TERM_SLOTS 512u       /* hash table of the query words (> 2 x terms) */
#define CC_MARK "\xe2\x80\xa6"   /* U+2026 HORIZONTAL ELLIPSIS */
#define CC_MARK_LEN 3u
#define BM25_K1 1.2
#define BM25_B 0.75

static uint64_t estimate_bytes(const vsr_chat_view_t *chat)
{
    uint64_t sum = 0;
    for (size_t i = 0; i < chat->n_messages; i++)
        sum += chat->messages[i].text.len;
    return VSR_MAX(sum, chat->text_bytes);
}

static uint64_t tokens_of(uint64_t bytes)
{
    return bytes / 4 + (bytes % 4 != 0);
}

/* ---- words ---- */

static int word_byte(unsigned char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c >= 0x80;
}

/* The next word of s[*pos..n): its hash (FNV-1a over ASCII-lowercased
 * bytes); 0 when no word is left. */
static int next_word(const char *s, size_t n, size_t *pos, uint64_t *h)
{
    size_t i = *pos;
    while (i < n && !word_byte((unsigned char)s[i]))
        i++;
    if (i == n) {
        *pos = i;
        return 0;
    }
    uint64_t x = 1469598103934665603ull;
    while (i < n && word_byte((unsigned char)s[i])) {
        unsigned char c = (unsigned char)s[i++];
        if (c >= 'A' && c <= 'Z')
            c = (unsigned char)(c + 32);
        x = (x ^ c) * 1099511628211ull;
    }
    *pos = i;
    *h = x | 1; /* 0 marks a free slot */
    return 1;
}

typedef struct {
    uint64_t hash[CC_TERM_SLOTS];
    uint16_t idx[CC_TERM_SLOTS];
    uint32_t n;
} terms_t;

/* Index of word h in the table, or -1; with add, inserts it (while room). */
static int term_find(terms_t *t, uint64_t h, int add)
{
    uint32_t s = (uint32_t)(h % CC_TERM_SLOTS);
    while (t->hash[s] != 0) {
        if (t->hash[s] == h)
            return t->idx[s];
        s = (s + 1) % CC_TERM_SLOTS;
    }
    if (!add || t->n >= CC_MAX_TERMS)
        return -1;
    t->hash[s] = h;
    t->idx[s] = (uint16_t)t->n;
    return (int)t->n++;
}

/* ---- sentences ---- */

typedef struct {
    uint32_t off, len;
    uint32_t words;
    double score;
} sent_t;

static int space_byte(char c)
{
    return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\f' || c == '\v';
}

/* Splits s into at most `max` trimmed, non-empty sentences. */
static size_t split(const char *s, size_t n, sent_t *out, size_t max)
{
    size_t k = 0, i = 0;
    while (i < n && k < max) {
        while (i < n && space_byte(s[i]))
            i++;
        if (i == n)
            break;
        size_t start = i, end;
        if (k == max - 1) {
            end = n;
        } else {
            for (;;) {
                if (i == n || s[i] == '\n') {
                    end = i;
                    break;
                }
                if ((s[i] == '.' || s[i] == '!' || s[i] == '?') && (i + 1 == n || space_byte(s[i + 1]))) {
                    end = ++i;
                    break;
                }
                if (i - start >= CC_SENTENCE_BYTES) {
                    /* cut at the last space of the second half, else on a
                     * character boundary */
                    size_t cut = i;
                    while (cut > start + CC_SENTENCE_BYTES / 2 && !space_byte(s[cut - 1]))
                        cut--;
                    if (cut <= start + CC_SENTENCE_BYTES / 2) {
                        cut = i;
                        while (cut > start + 1 && ((unsigned char)s[cut] & 0xC0) == 0x80)
                            cut--;
                    }
                    end = i = cut;
                    break;
                }
                i++;
            }
        }
        i = end;
        while (end > start && space_byte(s[end - 1]))
            end--;
        if (end > start)
            out[k++] = (sent_t){(uint32_t)start, (uint32_t)(end - start), 0, 0};
    }
    return k;
}

/* BM25 of every sentence against the query terms q (nq of them). */
static void score(const char *s, sent_t *st, size_t ns, terms_t *q, vsr_pool_t *pool)
{
    uint32_t nq = q->n;
    if (nq == 0 || ns == 0)
        return;
    uint32_t *df = vsr_pool_alloc(pool, nq * sizeof(*df));
    uint32_t *last = vsr_pool_alloc(pool, nq * sizeof(*last));
    uint32_t *tf = vsr_pool_alloc(pool, nq * sizeof(*tf));
    uint32_t *touched = vsr_pool_alloc(pool, nq * sizeof(*touched));
    memset(df, 0, nq * sizeof(*df));
    memset(tf, 0, nq * sizeof(*tf));
    for (uint32_t t = 0; t < nq; t++)
        last[t] = UINT32_MAX;
    uint64_t total_words = 0;
    for (size_t i = 0; i < ns; i++) {
        size_t pos = 0;
        uint64_t h;
        while (next_word(s + st[i].off, st[i].len, &pos, &h)) {
            st[i].words++;
            int t = term_find(q, h, 0);
            if (t >= 0 && last[t] != i) {
                last[t] = (uint32_t)i;
                df[t]++;
            }
        }
        total_words += st[i].words;
    }
    double avg = total_words ? (double)total_words / (double)ns : 1.0;
    for (size_t i = 0; i < ns; i++) {
        size_t pos = 0, nt = 0;
        uint64_t h;
        while (next_word(s + st[i].off, st[i].len, &pos, &h)) {
            int t = term_find(q, h, 0);
            if (t < 0)
                continue;
            if (tf[t]++ == 0)
                touched[nt++] = (uint32_t)t;
        }
        double sc = 0, norm = BM25_K1 * (1 - BM25_B + BM25_B * (double)st[i].words / avg);
        for (size_t x = 0; x < nt; x++) {
            uint32_t t = touched[x];
            double idf = log(1.0 + ((double)ns - df[t] + 0.5) / (df[t] + 0.5));
            sc += idf * (tf[t] * (BM25_K1 + 1)) / (tf[t] + norm);
            tf[t] = 0;
        }
        st[i].score = sc;
    }
}

typedef struct {
    double score;
    uint32_t i;
} rank_t;

/* Best score first; ties keep the earlier sentence first. */
static int by_score(const void *a, const void *b)
{
    const rank_t *x = a, *y = b;
    if (x->score != y->score)
        return x->score > y->score ? -1 : 1;
    return x->i < y->i ? -1 : x->i > y->i;
}

/* The length of the text made of the kept sentences and marks. */
static uint64_t out_len(uint64_t kept_bytes, size_t n_kept, size_t n_runs)
{
    size_t parts = n_kept + n_runs;
    return parts ? kept_bytes + (uint64_t)n_runs * CC_MARK_LEN + (parts - 1) : 0;
}

/* Appends to out the extract of s (n bytes) in at most `allow` bytes (at
 * least the mark).  Returns 1 when something was cut, 0 when the whole text
 * fits as it is. */
static int compress(const char *s, size_t n, uint64_t allow, terms_t *q, sent_t *st, vsr_pool_t *pool,
                    vsr_buf_t *out)
{
    if (n <= allow)
        return 0;
    size_t ns = split(s, n, st, CC_MAX_SENTENCES);
    score(s, st, ns, q, pool);
    rank_t *order = vsr_pool_alloc(pool, (ns ? ns : 1) * sizeof(*order));
    uint8_t *kept = vsr_pool_alloc(pool, ns ? ns : 1);
    for (size_t i = 0; i < ns; i++) {
        order[i] = (rank_t){st[i].score, (uint32_t)i};
        kept[i] = 0;
    }
    qsort(order, ns, sizeof(*order), by_score);
    uint64_t kept_bytes = 0;
    size_t n_kept = 0, n_runs = ns ? 1 : 0;
    for (size_t r = 0; r < ns; r++) {
        uint32_t i = order[r].i;
        int prev_dropped = i > 0 && !kept[i - 1];
        int next_dropped = i + 1 < ns && !kept[i + 1];
        size_t runs = n_runs + (prev_dropped && next_dropped) - (!prev_dropped && !next_dropped);
        if (out_len(kept_bytes + st[i].len, n_kept + 1, runs) > allow)
            continue;
        kept[i] = 1;
        kept_bytes += st[i].len;
        n_kept++;
        n_runs = runs;
    }
    if (n_kept == ns && out_len(kept_bytes, n_kept, 0) >= n)
        return 0; /* only the spacing would change */
    int first = 1, in_gap = 0;
    for (size_t i = 0; i < ns; i++) {
        if (!kept[i]) {
            if (!in_gap) {
                if (!first)
                    vsr_buf_append(out, " ", 1);
                vsr_buf_append(out, CC_MARK, CC_MARK_LEN);
                first = 0;
            }
            in_gap = 1;
            continue;
        }
        if (!first)
            vsr_buf_append(out, " ", 1);
        vsr_buf_append(out, s + st[i].off, st[i].len);
        first = 0;
        in_gap = 0;
    }
    if (first)
        vsr_buf_append(out, CC_MARK, CC_MARK_LEN);
    return 1;
}

/* The output the request asks for: max_completion_tokens, else max_tokens
 * (the reference's order); 0 when neither is a non-negative number. */
static uint64_t requested_output(const vsr_json_t *j)
{
    static const char *const keys[] = {"max_completion_tokens", "max_tokens"};
    for (size_t i = 0; i < VSR_ARRAY_LEN(keys); i++) {
        uint32_t t;
        double v;
        if (vsr_json_object_get(j, 0, keys[i], &t) == VSR_OK && vsr_json_number(j, t, &v) == VSR_OK)
            return v >= 0 && v < 9e15 ? (uint64_t)v : 0;
    }
    return 0;
}

/* ---- the plan ---- */

typedef struct {
    uint32_t tok;
    vsr_slice_t text;
} repl_t;

/* Document order, so the edits are appended rather than inserted. */
static int by_tok(const void *a, const void *b)
{
    uint32_t x = ((const repl_t *)a)->tok, y = ((const repl_t *)b)->tok;
    return (x > y) - (x < y);
}

static int is_candidate(const vsr_chat_view_t *chat, size_t i, vsr_cc_target_t target)
{
    const vsr_chat_message_t *m = &chat->messages[i];
    int last_user = chat->last_user;
    if ((int)i == last_user || i + 1 == chat->n_messages)
        return 0;
    if (last_user > 0 && (int)i == last_user - 1 && m->role == VSR_ROLE_ASSISTANT)
        return 0;
    if (target == VSR_CC_TOOL_RESULTS)
        return m->role == VSR_ROLE_TOOL;
    return m->role == VSR_ROLE_USER || m->role == VSR_ROLE_ASSISTANT;
}

/* request_controls (the reference's): the control header's value, lower
 * case, is a comma-separated list of directives, each "name" or
 * "name=value"; one the configuration does not allow is ignored.  bypass:
 * no compression for this request.  target=N (N > 0): the budget's target is
 * N tokens instead, at most max_target_tokens when that is set.  *target is
 * left as it is when no target directive counts. */
static void read_controls(const vsr_plugin_context_compression_conf_t *cc, const vsr_plugin_ctx_t *ctx, int *bypass,
                          uint64_t *target)
{
    vsr_slice_t v;
    if (!cc->controls || ctx->request_header == NULL ||
        !ctx->request_header(ctx->request_header_ud,
                             cc->control_header ? cc->control_header : "x-vsr-compression-control", &v))
        return;
    while (v.len > 0) {
        vsr_slice_t item = vsr_slice_trim(vsr_slice_split(v, ',', &v));
        vsr_slice_t value = VSR_SLICE_NULL;
        vsr_slice_t name = vsr_slice_trim(vsr_slice_split(item, '=', &value));
        if (vsr_slice_case_eq_cstr(name, "bypass") && (cc->allowed & VSR_CC_CTL_BYPASS)) {
            *bypass = 1;
        } else if (vsr_slice_case_eq_cstr(name, "target") && (cc->allowed & VSR_CC_CTL_TARGET) && value.p) {
            value = vsr_slice_trim(value);
            size_t i = value.len && value.p[0] == '+' ? 1 : 0; /* Go's Atoi takes a sign */
            uint64_t n = 0;
            int ok = i < value.len;
            for (; ok && i < value.len; i++) {
                ok = value.p[i] >= '0' && value.p[i] <= '9' && n <= (UINT64_MAX - 9) / 10;
                n = n * 10 + (uint64_t)(value.p[i] - '0');
            }
            if (ok && n > 0)
                *target = cc->max_target_tokens && n > cc->max_target_tokens ? cc->max_target_tokens : n;
        }
    }
}

int vsr__plugin_context_compression_request(const vsr_plugin_conf_t *conf, vsr_plugin_ctx_t *ctx, const char **why)
{
    const vsr_plugin_context_compression_conf_t *cc = &conf->u.context_compression;
    const vsr_chat_view_t *chat = ctx->chat;
    const vsr_json_t *j = ctx->json;
    if (chat == NULL || chat->api != VSR_API_CHAT || chat->messages_tok == 0 || j == NULL)
        return VSR_OK;
    int bypass = 0;
    uint64_t target_tokens = 0; /* 0: the configuration's */
    read_controls(cc, ctx, &bypass, &target_tokens);
    if (bypass) {
        ctx->compression_bypassed = 1;
        return VSR_OK;
    }
    uint64_t bytes = estimate_bytes(chat);
    uint64_t before = tokens_of(bytes);
    ctx->compression_applied = 1;
    ctx->compression_tokens_before = before;
    ctx->compression_tokens_after = before;
    uint64_t window = ctx->context_window, available = UINT64_MAX; /* UINT64_MAX: no window known */
    if (window > 0) {
        uint64_t reserve = cc->reserve_auto ? requested_output(j) : cc->reserve_output_tokens;
        available = window > reserve ? window - reserve : 0;
    }
    uint64_t trigger = cc->trigger_auto ? available : cc->trigger_tokens;
    if (before <= trigger)
        return VSR_OK;
    uint64_t budget;
    uint64_t target = target_tokens ? target_tokens : cc->target_tokens; /* a client's target is explicit */
    if (cc->target_auto && target_tokens == 0)
        budget = available;
    else if (cc->reserve_auto)
        budget = target;
    else
        budget = target > cc->reserve_output_tokens ? target - cc->reserve_output_tokens : 0;
    uint64_t budget_bytes = budget > UINT64_MAX / 4 ? UINT64_MAX : budget * 4;
    if (bytes <= budget_bytes)
        return VSR_OK;
    uint64_t need = bytes - budget_bytes;

    terms_t *q = vsr_pool_alloc(ctx->pool, sizeof(*q));
    memset(q, 0, sizeof(*q));
    if (chat->last_user >= 0) {
        vsr_slice_t u = chat->messages[chat->last_user].text;
        size_t pos = 0;
        uint64_t h;
        while (q->n < CC_MAX_TERMS && next_word(u.p, u.len, &pos, &h))
            term_find(q, h, 1);
    }

    repl_t *repl = vsr_pool_alloc(ctx->pool, (chat->n_messages ? chat->n_messages : 1) * sizeof(*repl));
    size_t nrepl = 0;
    uint64_t saved = 0;
    sent_t *st = vsr_pool_alloc(ctx->pool, CC_MAX_SENTENCES * sizeof(*st));
    for (size_t t = 0; t < cc->n_targets && need > 0; t++) {
        for (size_t i = 0; i < chat->n_messages && need > 0; i++) {
            const vsr_chat_message_t *m = &chat->messages[i];
            if (!is_candidate(chat, i, (vsr_cc_target_t)cc->targets[t]) || m->content_tok == 0 ||
                vsr_json_type(j, m->content_tok) != VSR_JSON_STRING)
                continue;
            const vsr_json_tok_t *ct = &j->toks[m->content_tok];
            if (vsr_json_edits_overlaps(ctx->edits, ct->start, ct->end))
                continue;
            uint64_t len = m->text.len;
            uint64_t allow = len > need ? len - need : 0;
            vsr_buf_t out;
            vsr_buf_init(&out, 0);
            if (compress(m->text.p, m->text.len, allow, q, st, ctx->pool, &out) && out.len < len) {
                vsr_buf_t js;
                vsr_buf_init(&js, 0);
                vsr_buf_append_json_string(&js, vsr_buf_slice(&out));
                repl[nrepl].tok = m->content_tok;
                repl[nrepl].text = vsr__plugin_keep(ctx, &js);
                nrepl++;
                vsr_buf_free(&js);
                uint64_t cut = len - out.len;
                saved += cut;
                need -= VSR_MIN(need, cut);
            }
            vsr_buf_free(&out);
        }
    }
    if (need > 0 && cc->fail_closed) {
        *why = "context_compression: the request does not fit its token budget even compressed";
        return VSR_ERR_INVALID;
    }
    /* every target is a distinct string no earlier edit touches */
    qsort(repl, nrepl, sizeof(*repl), by_tok);
    for (size_t i = 0; i < nrepl; i++) {
        int rc = vsr_json_edit_replace(ctx->edits, j, repl[i].tok, repl[i].text);
        VSR_BUG_ON(rc != VSR_OK);
    }
    ctx->compression_tokens_after = tokens_of(bytes - saved);
    ctx->compression_messages = nrepl;
    return VSR_OK;
}
