/* structure.c — structure signals: deterministic features of the routing
 * text, as the reference's StructureClassifier.
 *
 * Sources (how many times something occurs):
 *   regex       non-overlapping matches of `pattern` (case-insensitive unless case_sensitive)
 *   keyword_set occurrences of each keyword, non-overlapping per keyword, summed; an
 *               occurrence counts when no letter/digit (other than CJK) touches it on
 *               either side; keywords containing CJK match as plain substrings
 *   sequence    1 when one of `sequences` occurs in order (plain substrings), else 0
 *   text_bytes  the text's length in bytes
 * Features: count (the source's count), exists (1 if count > 0), density
 * (count per multilingual text unit: each CJK rune is a unit, each run of
 * other letters/digits is a unit), sequence (1 when a sequence occurs, with
 * any source).  Match: every predicate bound that is set holds (gt, gte, lt,
 * lte; a conjunction); without a predicate, value > 0.  A text that is empty
 * or only white space matches nothing.  Confidence: 1.0 without a predicate,
 * else the reference's 1 / (1 + e^(-4d)) (at least 0.5), d the distance from
 * the value to the first bound set among gt, gte, lt, lte. */
#include <math.h>
#include <strings.h>

#include "signals/signals-int.h"

typedef enum { F_COUNT, F_EXISTS, F_DENSITY, F_SEQUENCE } feat_t;
typedef enum { S_REGEX, S_KEYWORD_SET, S_SEQUENCE, S_TEXT_BYTES } src_t;

typedef struct {
    char **items; /* folded unless case-sensitive */
    size_t *lens;
    size_t n;
} seq_t;

typedef struct {
    feat_t feat;
    src_t src;
    int cs;
    pcre2_code *re;
    uint32_t *pat; /* keyword_set: literal pattern per keyword (VSR__NO_PAT for "") */
    size_t n_pat;
    seq_t *seqs;
    size_t n_seqs;
    vsr_predicate_conf_t pred;
    int has_pred;
} st_t;

void vsr__structure_free(void *state)
{
    st_t *st = state;
    if (!st)
        return;
    pcre2_code_free(st->re);
    vsr_free(st->pat);
    for (size_t i = 0; i < st->n_seqs; i++) {
        for (size_t j = 0; j < st->seqs[i].n; j++)
            vsr_free(st->seqs[i].items[j]);
        vsr_free(st->seqs[i].items);
        vsr_free(st->seqs[i].lens);
    }
    vsr_free(st->seqs);
    vsr_free(st);
}

int vsr__structure_compile(vsr_signals_t *s, const void *conf, const char *path, void **state, vsr_buf_t *err)
{
    static const char *const feats[] = {"count", "exists", "density", "sequence"};
    static const char *const srcs[] = {"regex", "keyword_set", "sequence", "text_bytes"};
    const vsr_sig_structure_conf_t *sc = conf;
    int f = vsr__signal_lookup(sc->feature_type, feats, VSR_ARRAY_LEN(feats));
    int src = vsr__signal_lookup(sc->source_type, srcs, VSR_ARRAY_LEN(srcs));
    if (f < 0) {
        vsr_buf_printf(err, "%s.feature.type: signal \"%s\": expected count, exists, density or sequence\n", path,
                       sc->name);
        return VSR_ERR_INVALID;
    }
    if (src < 0) {
        vsr_buf_printf(err, "%s.feature.source.type: signal \"%s\": expected regex, keyword_set, sequence or text_bytes\n",
                       path, sc->name);
        return VSR_ERR_INVALID;
    }
    st_t *st = vsr_calloc(1, sizeof(*st));
    st->feat = (feat_t)f;
    st->src = (src_t)src;
    st->cs = sc->case_sensitive;
    st->pred = sc->predicate;
    st->has_pred = sc->predicate.has_gt || sc->predicate.has_gte || sc->predicate.has_lt || sc->predicate.has_lte;
    int ci = !sc->case_sensitive;

    if (st->src == S_REGEX) {
        if (!sc->pattern || !*sc->pattern) {
            vsr_buf_printf(err, "%s.feature.source.pattern: signal \"%s\": a regex source needs a pattern\n", path,
                           sc->name);
            vsr__structure_free(st);
            return VSR_ERR_INVALID;
        }
        vsr_buf_t msg;
        vsr_buf_init(&msg, 1024);
        st->re = vsr__re_compile(sc->pattern, ci, &msg);
        if (!st->re) {
            vsr_buf_printf(err, "%s.feature.source.pattern: signal \"%s\": regex \"%s\" does not compile: %.*s\n", path,
                           sc->name, sc->pattern, (int)msg.len, msg.data ? msg.data : "");
            vsr_buf_free(&msg);
            vsr__structure_free(st);
            return VSR_ERR_INVALID;
        }
        vsr_buf_free(&msg);
    }
    if (st->src == S_KEYWORD_SET) {
        st->n_pat = sc->keywords.n;
        st->pat = vsr_malloc((st->n_pat ? st->n_pat : 1) * sizeof(uint32_t));
        for (size_t i = 0; i < st->n_pat; i++) {
            const char *kw = sc->keywords.items[i] ? sc->keywords.items[i] : "";
            st->pat[i] = vsr__add_pattern(s, kw, ci, VSR__BOUND_UNICODE, 1);
        }
    }
    if (st->src == S_SEQUENCE || st->feat == F_SEQUENCE) {
        st->n_seqs = sc->n_sequences;
        st->seqs = vsr_calloc(st->n_seqs ? st->n_seqs : 1, sizeof(seq_t));
        for (size_t i = 0; i < st->n_seqs; i++) {
            const vsr_strlist_conf_t *l = &sc->sequences[i];
            seq_t *q = &st->seqs[i];
            q->n = l->n;
            q->items = vsr_calloc(q->n ? q->n : 1, sizeof(char *));
            q->lens = vsr_calloc(q->n ? q->n : 1, sizeof(size_t));
            for (size_t j = 0; j < q->n; j++) {
                const char *m = l->items[j] ? l->items[j] : "";
                if (ci) {
                    q->items[j] = vsr__fold(m, strlen(m), &q->lens[j], NULL);
                } else {
                    q->items[j] = vsr_strdup(m);
                    q->lens[j] = strlen(m);
                }
            }
        }
    }
    *state = st;
    return VSR_OK;
}

static int sequence_matched(vsr__ctx_t *c, const st_t *st)
{
    const char *text = c->in->text.p;
    size_t len = c->in->text.len;
    if (!st->cs)
        text = vsr__memo_low(c, &len);
    for (size_t i = 0; i < st->n_seqs; i++) {
        const seq_t *q = &st->seqs[i];
        if (q->n == 0)
            continue;
        size_t from = 0;
        int ok = 1;
        for (size_t j = 0; j < q->n && ok; j++) {
            const char *hit = q->lens[j] == 0 ? text + from : memmem(text + from, len - from, q->items[j], q->lens[j]);
            if (!hit)
                ok = 0;
            else
                from = (size_t)(hit - text) + q->lens[j];
        }
        if (ok)
            return 1;
    }
    return 0;
}

static double source_count(vsr__ctx_t *c, const st_t *st)
{
    switch (st->src) {
    case S_REGEX:
        return (double)vsr__re_count(st->re, c->in->text.p, c->in->text.len, vsr__memo_md(c));
    case S_KEYWORD_SET: {
        vsr__memo_scan(c);
        double total = 0;
        for (size_t i = 0; i < st->n_pat; i++) {
            if (st->pat[i] != VSR__NO_PAT)
                total += c->m->counts[c->s->pats[st->pat[i]].slot];
        }
        return total;
    }
    case S_SEQUENCE:
        return sequence_matched(c, st) ? 1 : 0;
    case S_TEXT_BYTES:
    default:
        return (double)c->in->text.len;
    }
}

static size_t text_units(const char *s, size_t len)
{
    size_t count = 0, i = 0, adv;
    int in_word = 0;
    while (i < len) {
        uint32_t cp = vsr__utf8_decode(s + i, len - i, &adv);
        i += adv;
        if (vsr__is_cjk(cp)) {
            count++;
            in_word = 0;
        } else if (vsr__is_alnum(cp)) {
            if (!in_word)
                count++;
            in_word = 1;
        } else {
            in_word = 0;
        }
    }
    return count;
}

static int blank(const char *s, size_t len)
{
    size_t i = 0, adv;
    while (i < len) {
        if (!vsr__is_space(vsr__utf8_decode(s + i, len - i, &adv)))
            return 0;
        i += adv;
    }
    return 1;
}

static int predicate_holds(const vsr_predicate_conf_t *p, double v)
{
    if (p->has_gt && !(v > p->gt))
        return 0;
    if (p->has_gte && !(v >= p->gte))
        return 0;
    if (p->has_lt && !(v < p->lt))
        return 0;
    if (p->has_lte && !(v <= p->lte))
        return 0;
    return 1;
}

vsr_signal_result_t vsr__structure_eval(vsr__ctx_t *c, const void *state)
{
    const st_t *st = state;
    vsr_signal_result_t r = {0};
    if (!c->in->text.p || blank(c->in->text.p, c->in->text.len))
        return r;
    double v;
    switch (st->feat) {
    case F_EXISTS:
        v = source_count(c, st) > 0 ? 1 : 0;
        break;
    case F_DENSITY: {
        size_t units = text_units(c->in->text.p, c->in->text.len);
        v = units ? source_count(c, st) / (double)units : 0;
        break;
    }
    case F_SEQUENCE:
        v = sequence_matched(c, st) ? 1 : 0;
        break;
    case F_COUNT:
    default:
        v = source_count(c, st);
        break;
    }
    r.value = v;
    if (!st->has_pred) {
        r.matched = v > 0;
        r.confidence = r.matched ? 1.0 : 0.0;
        return r;
    }
    r.matched = predicate_holds(&st->pred, v);
    if (!r.matched)
        return r;
    const vsr_predicate_conf_t *p = &st->pred;
    double d = p->has_gt ? fabs(v - p->gt) : p->has_gte ? fabs(v - p->gte) : p->has_lt ? fabs(p->lt - v) : fabs(p->lte - v);
    double conf = 1.0 / (1.0 + exp(-4.0 * d));
    r.confidence = conf < 0.5 ? 0.5 : conf;
    return r;
}
