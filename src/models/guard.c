/*
 * guard.c — TF-IDF + logistic-regression classifiers (see guard.h): the
 * model file's strict JSON reader, the tokenizer of the package's JS, the
 * scoring and its windows, and the contrastive and hybrid scores.
 */
#include "guard.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DEPTH 8

typedef struct {
    uint32_t off, len; /* in terms */
    int32_t index;     /* feature; -1 = empty slot */
} slot_t;

struct vsr_guard_lr_s {
    size_t n;       /* features */
    double *coef;   /* n */
    double *idf;    /* n */
    double intercept, threshold;
    int ngram_min, ngram_max, lowercase;
    char *terms;    /* the vocabulary's terms, back to back */
    size_t terms_len, terms_cap;
    slot_t *slots;  /* open addressing, power of two */
    size_t n_slots, n_terms;
    uint8_t *seen;  /* n: index already in the vocabulary */
};

/* ---- hashing ---- */

static uint64_t fnv(const char *p, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) {
        h ^= (uint8_t)p[i];
        h *= 1099511628211ull;
    }
    return h;
}

static int32_t vocab_find(const vsr_guard_lr_t *m, const char *p, size_t n)
{
    size_t mask = m->n_slots - 1, i = (size_t)fnv(p, n) & mask;
    for (;;) {
        const slot_t *s = &m->slots[i];
        if (s->index < 0)
            return -1;
        if (s->len == n && memcmp(m->terms + s->off, p, n) == 0)
            return s->index;
        i = (i + 1) & mask;
    }
}

/* ---- the JSON reader ---- */

typedef struct {
    const char *p, *end;
    int depth;
} rd_t;

static void ws(rd_t *r)
{
    while (r->p < r->end && (*r->p == ' ' || *r->p == '\t' || *r->p == '\n' || *r->p == '\r'))
        r->p++;
}

static int lit(rd_t *r, char c)
{
    ws(r);
    if (r->p < r->end && *r->p == c) {
        r->p++;
        return 1;
    }
    return 0;
}

static int hex4(const char *p, unsigned *out)
{
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p[i];
        v <<= 4;
        if (c >= '0' && c <= '9')
            v |= (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f')
            v |= (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F')
            v |= (unsigned)(c - 'A' + 10);
        else
            return 0;
    }
    *out = v;
    return 1;
}

static size_t put_utf8(char *o, unsigned cp)
{
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (char)(0xC0 | (cp >> 6));
        o[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | (cp >> 12));
        o[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | (cp >> 18));
    o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* A string into out[] (at most cap bytes, decoded); *n its length.  With
 * out == NULL it is only checked and skipped.  0 on malformed or too long. */
static int str(rd_t *r, char *out, size_t cap, size_t *n)
{
    if (!lit(r, '"'))
        return 0;
    size_t k = 0;
    while (r->p < r->end) {
        unsigned char c = (unsigned char)*r->p++;
        char tmp[4];
        size_t w = 1;
        if (c == '"') {
            if (n)
                *n = k;
            return 1;
        }
        if (c < 0x20)
            return 0;
        if (c == '\\') {
            if (r->p >= r->end)
                return 0;
            char e = *r->p++;
            switch (e) {
            case '"': case '\\': case '/': tmp[0] = e; break;
            case 'b': tmp[0] = '\b'; break;
            case 'f': tmp[0] = '\f'; break;
            case 'n': tmp[0] = '\n'; break;
            case 'r': tmp[0] = '\r'; break;
            case 't': tmp[0] = '\t'; break;
            case 'u': {
                unsigned cp, lo;
                if (r->end - r->p < 4 || !hex4(r->p, &cp))
                    return 0;
                r->p += 4;
                if (cp >= 0xD800 && cp < 0xDC00 && r->end - r->p >= 6 && r->p[0] == '\\' && r->p[1] == 'u' &&
                    hex4(r->p + 2, &lo) && lo >= 0xDC00 && lo < 0xE000) {
                    r->p += 6;
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                } else if (cp >= 0xD800 && cp < 0xE000) {
                    cp = 0xFFFD; /* a lone surrogate: never a word character */
                }
                w = put_utf8(tmp, cp);
                break;
            }
            default:
                return 0;
            }
        } else {
            tmp[0] = (char)c;
        }
        if (out) {
            if (k + w > cap)
                return 0;
            memcpy(out + k, tmp, w);
        }
        k += w;
    }
    return 0;
}

static int num(rd_t *r, double *out)
{
    ws(r);
    const char *s = r->p;
    const char *q = s;
    if (q < r->end && *q == '-')
        q++;
    if (q >= r->end)
        return 0;
    if (*q == '0') {
        q++;
    } else if (*q >= '1' && *q <= '9') {
        while (q < r->end && *q >= '0' && *q <= '9')
            q++;
    } else {
        return 0;
    }
    if (q < r->end && *q == '.') {
        q++;
        if (q >= r->end || *q < '0' || *q > '9')
            return 0;
        while (q < r->end && *q >= '0' && *q <= '9')
            q++;
    }
    if (q < r->end && (*q == 'e' || *q == 'E')) {
        q++;
        if (q < r->end && (*q == '+' || *q == '-'))
            q++;
        if (q >= r->end || *q < '0' || *q > '9')
            return 0;
        while (q < r->end && *q >= '0' && *q <= '9')
            q++;
    }
    char buf[64];
    size_t n = (size_t)(q - s);
    if (n >= sizeof buf)
        return 0;
    memcpy(buf, s, n);
    buf[n] = 0;
    double v = strtod(buf, NULL);
    if (!isfinite(v))
        return 0;
    r->p = q;
    *out = v;
    return 1;
}

static int word(rd_t *r, const char *w)
{
    ws(r);
    size_t n = strlen(w);
    if ((size_t)(r->end - r->p) >= n && memcmp(r->p, w, n) == 0) {
        r->p += n;
        return 1;
    }
    return 0;
}

static int skip_value(rd_t *r)
{
    double d;
    ws(r);
    if (r->p >= r->end)
        return 0;
    char c = *r->p;
    if (c == '"')
        return str(r, NULL, 0, NULL);
    if (c == 't')
        return word(r, "true");
    if (c == 'f')
        return word(r, "false");
    if (c == 'n')
        return word(r, "null");
    if (c != '[' && c != '{')
        return num(r, &d);
    if (++r->depth > MAX_DEPTH)
        return 0;
    r->p++;
    char close = c == '[' ? ']' : '}';
    if (!lit(r, close)) {
        do {
            if (c == '{' && (!str(r, NULL, 0, NULL) || !lit(r, ':')))
                return 0;
            if (!skip_value(r))
                return 0;
        } while (lit(r, ','));
        if (!lit(r, close))
            return 0;
    }
    r->depth--;
    return 1;
}

/* an array of numbers into a grown double array */
static int num_array(rd_t *r, double **out, size_t *n)
{
    if (!lit(r, '['))
        return 0;
    size_t cap = 0, k = 0;
    double *v = NULL;
    if (!lit(r, ']')) {
        do {
            double d;
            if (!num(r, &d))
                goto fail;
            if (k == cap) {
                if (cap >= VSR_GUARD_MAX_FEATURES)
                    goto fail;
                cap = cap ? cap * 2 : 1024;
                double *nv = vsr_realloc(v, cap * sizeof *v);
                if (!nv)
                    goto fail;
                v = nv;
            }
            v[k++] = d;
        } while (lit(r, ','));
        if (!lit(r, ']'))
            goto fail;
    }
    *out = v;
    *n = k;
    return 1;
fail:
    vsr_free(v);
    return 0;
}

typedef struct {
    size_t off, len; /* in the entries' text */
    double index;
} entry_t;

typedef struct {
    entry_t *e;
    size_t n;
    char *text; /* the decoded terms, back to back */
    size_t text_len;
} entries_t;

static int vocab_add(vsr_guard_lr_t *m, const char *t, size_t n, size_t index)
{
    if (m->n_terms * 2 >= m->n_slots) {
        size_t ns = m->n_slots ? m->n_slots * 2 : 4096;
        slot_t *s = vsr_malloc(ns * sizeof *s);
        if (!s)
            return VSR_ERR_NOMEM;
        for (size_t i = 0; i < ns; i++)
            s[i].index = -1;
        for (size_t i = 0; i < m->n_slots; i++) {
            if (m->slots[i].index < 0)
                continue;
            size_t j = (size_t)fnv(m->terms + m->slots[i].off, m->slots[i].len) & (ns - 1);
            while (s[j].index >= 0)
                j = (j + 1) & (ns - 1);
            s[j] = m->slots[i];
        }
        vsr_free(m->slots);
        m->slots = s;
        m->n_slots = ns;
    }
    if (vocab_find(m, t, n) >= 0)
        return VSR_ERR_INVALID; /* a term twice */
    if (m->terms_len + n > m->terms_cap) {
        size_t nc = m->terms_cap ? m->terms_cap * 2 : 65536;
        while (nc < m->terms_len + n)
            nc *= 2;
        char *nt = vsr_realloc(m->terms, nc);
        if (!nt)
            return VSR_ERR_NOMEM;
        m->terms = nt;
        m->terms_cap = nc;
    }
    if (n)
        memcpy(m->terms + m->terms_len, t, n);
    size_t j = (size_t)fnv(t, n) & (m->n_slots - 1);
    while (m->slots[j].index >= 0)
        j = (j + 1) & (m->n_slots - 1);
    m->slots[j] = (slot_t){(uint32_t)m->terms_len, (uint32_t)n, (int32_t)index};
    m->terms_len += n;
    m->n_terms++;
    return VSR_OK;
}

static int is_int(double d, double lo, double hi)
{
    return d >= lo && d <= hi && d == floor(d);
}

/* the vocabulary object: its indices are checked once the feature count
 * is known, so entries are kept as (term, index) until then, compactly (a
 * hostile file of short terms costs about what it weighs) */
static int vocab_object(rd_t *r, entries_t *out)
{
    if (!lit(r, '{'))
        return 0;
    size_t cap = 0, k = 0, tcap = 0, tlen = 0;
    entry_t *v = NULL;
    char *text = NULL;
    if (!lit(r, '}')) {
        do {
            char term[VSR_GUARD_MAX_TERM_BYTES];
            size_t n;
            double ix;
            if (!str(r, term, sizeof term, &n) || !lit(r, ':') || !num(r, &ix))
                goto fail;
            if (k == cap) {
                if (cap >= VSR_GUARD_MAX_FEATURES)
                    goto fail;
                cap = cap ? cap * 2 : 1024;
                entry_t *nv = vsr_realloc(v, cap * sizeof *v);
                if (!nv)
                    goto fail;
                v = nv;
            }
            if (tlen + n > tcap) {
                size_t nc = tcap ? tcap * 2 : 65536;
                while (nc < tlen + n)
                    nc *= 2;
                char *nt = vsr_realloc(text, nc);
                if (!nt)
                    goto fail;
                text = nt;
                tcap = nc;
            }
            if (n)
                memcpy(text + tlen, term, n);
            v[k++] = (entry_t){tlen, n, ix};
            tlen += n;
        } while (lit(r, ','));
        if (!lit(r, '}'))
            goto fail;
    }
    out->e = v;
    out->n = k;
    out->text = text;
    out->text_len = tlen;
    return 1;
fail:
    vsr_free(v);
    vsr_free(text);
    return 0;
}

int vsr_guard_lr_load_mem(const char *data, size_t len, vsr_guard_lr_t **out)
{
    if (len > VSR_GUARD_MAX_FILE_BYTES)
        return VSR_ERR_TOO_BIG;
    rd_t r = {data, data + len, 1};
    vsr_guard_lr_t *m = vsr_calloc(1, sizeof *m);
    if (!m)
        return VSR_ERR_NOMEM;
    entries_t voc = {0};
    double *coef = NULL, *icpt = NULL, *rng = NULL;
    size_t n_coef = 0, n_icpt = 0, n_rng = 0, n_idf = 0;
    int rc = VSR_ERR_INVALID, have_lower = 0, have_coef = 0, have_voc = 0, have_idf = 0;
    unsigned seen_keys = 0;
    m->threshold = 0.5;

    if (!lit(&r, '{'))
        goto out;
    if (!lit(&r, '}')) {
        do {
            char key[32];
            size_t kl;
            unsigned bit = 0;
            if (!str(&r, key, sizeof key - 1, &kl) || !lit(&r, ':'))
                goto out;
            key[kl] = 0;
#define KEY(name, b) (strcmp(key, name) == 0 && (bit = (b)))
            if (KEY("coefficients", 1)) {
                if ((seen_keys & bit) || !lit(&r, '[') || !num_array(&r, &coef, &n_coef) || !lit(&r, ']'))
                    goto out;
                have_coef = 1;
            } else if (KEY("intercept", 2)) {
                if ((seen_keys & bit) || !num_array(&r, &icpt, &n_icpt) || n_icpt != 1)
                    goto out;
                m->intercept = icpt[0];
            } else if (KEY("vocabulary", 4)) {
                if ((seen_keys & bit) || !vocab_object(&r, &voc))
                    goto out;
                have_voc = 1;
            } else if (KEY("idf", 8)) {
                if ((seen_keys & bit) || !num_array(&r, &m->idf, &n_idf))
                    goto out;
                have_idf = 1;
            } else if (KEY("ngram_range", 16)) {
                if ((seen_keys & bit) || !num_array(&r, &rng, &n_rng) || n_rng != 2 ||
                    !is_int(rng[0], 1, VSR_GUARD_MAX_NGRAM) || !is_int(rng[1], rng[0], VSR_GUARD_MAX_NGRAM))
                    goto out;
                m->ngram_min = (int)rng[0];
                m->ngram_max = (int)rng[1];
            } else if (KEY("lowercase", 32)) {
                if (seen_keys & bit)
                    goto out;
                if (word(&r, "true"))
                    m->lowercase = 1;
                else if (!word(&r, "false"))
                    goto out;
                have_lower = 1;
            } else if (KEY("threshold", 64)) {
                if ((seen_keys & bit) || !num(&r, &m->threshold))
                    goto out;
            } else if (!skip_value(&r)) {
                goto out;
            }
#undef KEY
            seen_keys |= bit;
        } while (lit(&r, ','));
        if (!lit(&r, '}'))
            goto out;
    }
    ws(&r);
    if (r.p != r.end)
        goto out;
    /* everything present, consistent: one coefficient row, idf alike */
    if (!have_coef || !have_voc || !have_idf || !have_lower || !(seen_keys & 2) || !(seen_keys & 16))
        goto out;
    if (n_coef == 0 || n_coef != n_idf || voc.n > n_coef)
        goto out;
    m->n = n_coef;
    m->coef = coef;
    coef = NULL;
    m->seen = vsr_calloc(m->n, 1);
    if (!m->seen) {
        rc = VSR_ERR_NOMEM;
        goto out;
    }
    for (size_t i = 0; i < voc.n; i++) {
        if (!is_int(voc.e[i].index, 0, (double)m->n - 1))
            goto out;
        size_t ix = (size_t)voc.e[i].index;
        if (m->seen[ix])
            goto out;
        m->seen[ix] = 1;
        /* an empty vocabulary text leaves voc.text NULL: its only term is "" */
        int arc = vocab_add(m, voc.text ? voc.text + voc.e[i].off : "", voc.e[i].len, ix);
        if (arc != VSR_OK) {
            rc = arc;
            goto out;
        }
    }
    if (m->n_slots == 0) { /* an empty vocabulary: a table that finds nothing */
        m->slots = vsr_malloc(16 * sizeof *m->slots);
        if (!m->slots) {
            rc = VSR_ERR_NOMEM;
            goto out;
        }
        m->n_slots = 16;
        for (size_t i = 0; i < m->n_slots; i++)
            m->slots[i].index = -1;
    }
    rc = VSR_OK;
out:
    vsr_free(voc.e);
    vsr_free(voc.text);
    vsr_free(coef);
    vsr_free(icpt);
    vsr_free(rng);
    if (rc == VSR_OK)
        *out = m;
    else
        vsr_guard_lr_free(m);
    return rc;
}

int vsr_guard_lr_load(const char *path, vsr_guard_lr_t **out)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return VSR_ERR_IO;
    int rc = VSR_ERR_IO;
    char *buf = NULL;
    if (fseek(f, 0, SEEK_END) != 0)
        goto out;
    long sz = ftell(f);
    if (sz < 0 || fseek(f, 0, SEEK_SET) != 0)
        goto out;
    if ((unsigned long)sz > VSR_GUARD_MAX_FILE_BYTES) {
        rc = VSR_ERR_TOO_BIG;
        goto out;
    }
    buf = vsr_malloc((size_t)sz + 1);
    if (!buf) {
        rc = VSR_ERR_NOMEM;
        goto out;
    }
    if (fread(buf, 1, (size_t)sz, f) != (size_t)sz)
        goto out;
    rc = vsr_guard_lr_load_mem(buf, (size_t)sz, out);
out:
    vsr_free(buf);
    fclose(f);
    return rc;
}

void vsr_guard_lr_free(vsr_guard_lr_t *m)
{
    if (!m)
        return;
    vsr_free(m->coef);
    vsr_free(m->idf);
    vsr_free(m->terms);
    vsr_free(m->slots);
    vsr_free(m->seen);
    vsr_free(m);
}

size_t vsr_guard_lr_features(const vsr_guard_lr_t *m) { return m->n; }
double vsr_guard_lr_threshold(const vsr_guard_lr_t *m) { return m->threshold; }

/* ---- tokens ---- */

typedef struct {
    size_t off, len;      /* in the normalised text */
    size_t rune0, rune1;  /* code points of the original before its start, and through its end */
} tok_t;

typedef struct {
    char *norm; /* the text's word characters, lowercased; 0 elsewhere */
    tok_t *tok;
    size_t n_tok;
} toks_t;

static int tokenize(const vsr_guard_lr_t *m, const char *text, size_t len, toks_t *t)
{
    t->norm = vsr_malloc(len + 1);
    t->tok = vsr_malloc((len / 3 + 1) * sizeof *t->tok); /* a token and its separator: >= 3 bytes */
    t->n_tok = 0;
    if (!t->norm || !t->tok)
        return VSR_ERR_NOMEM;
    size_t o = 0, runes = 0, start = 0, start_rune = 0;
    int in = 0;
    for (size_t i = 0; i <= len;) {
        char w = 0;
        size_t step = 1;
        int sep_after = 0;
        if (i < len) {
            unsigned char c = (unsigned char)text[i];
            if ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_')
                w = (char)c;
            else if (c >= 'A' && c <= 'Z')
                w = m->lowercase ? (char)(c + 32) : (char)c;
            else if (m->lowercase && c == 0xE2 && i + 2 < len && (unsigned char)text[i + 1] == 0x84 &&
                     (unsigned char)text[i + 2] == 0xAA) {
                w = 'k', step = 3; /* U+212A KELVIN SIGN */
            } else if (m->lowercase && c == 0xC4 && i + 1 < len && (unsigned char)text[i + 1] == 0xB0) {
                w = 'i', step = 2, sep_after = 1; /* U+0130 -> i U+0307 */
            } else if (c >= 0x80) {
                /* one code point per lead byte (or stray byte) */
                while (i + step < len && step < 4 && ((unsigned char)text[i + step] & 0xC0) == 0x80 && c >= 0xC0)
                    step++;
            }
        }
        if (w) {
            if (!in) {
                in = 1;
                start = o;
                start_rune = runes;
            }
            t->norm[o++] = w;
        }
        if (!w || sep_after) {
            if (in && o - start >= 2) {
                t->tok[t->n_tok++] = (tok_t){start, o - start, start_rune, runes + (w ? 1 : 0)};
            }
            in = 0;
            if (i < len || !w)
                t->norm[o++] = 0;
        }
        runes++;
        i += step;
    }
    return VSR_OK;
}

/* ---- scoring ---- */

typedef struct {
    int32_t index;
    uint32_t count;
} cnt_t;

static int cmp_cnt(const void *a, const void *b)
{
    int32_t x = ((const cnt_t *)a)->index, y = ((const cnt_t *)b)->index;
    return (x > y) - (x < y);
}

/* tokens [a, b) of t, the JS transform + predictProba */
static int score_range(const vsr_guard_lr_t *m, const toks_t *t, size_t a, size_t b, double *p)
{
    size_t n_tok = b - a, n_terms = 0;
    for (int n = m->ngram_min; n <= m->ngram_max; n++)
        if (n_tok >= (size_t)n)
            n_terms += n_tok - (size_t)n + 1;
    size_t cap = 16;
    while (cap < n_terms * 2)
        cap *= 2;
    cnt_t *h = vsr_malloc(cap * sizeof *h);
    if (!h)
        return VSR_ERR_NOMEM;
    for (size_t i = 0; i < cap; i++)
        h[i].index = -1;
    size_t used = 0;
    char key[VSR_GUARD_MAX_TERM_BYTES];
    for (int n = m->ngram_min; n <= m->ngram_max; n++) {
        for (size_t i = a; i + (size_t)n <= b; i++) {
            size_t kl = 0;
            int fits = 1;
            for (int j = 0; j < n && fits; j++) {
                const tok_t *tk = &t->tok[i + (size_t)j];
                if (kl + tk->len + (j > 0) > sizeof key) {
                    fits = 0;
                    break;
                }
                if (j > 0)
                    key[kl++] = ' ';
                memcpy(key + kl, t->norm + tk->off, tk->len);
                kl += tk->len;
            }
            if (!fits)
                continue;
            int32_t ix = vocab_find(m, key, kl);
            if (ix < 0)
                continue;
            size_t s = ((uint32_t)ix * 2654435761u) & (cap - 1);
            while (h[s].index >= 0 && h[s].index != ix)
                s = (s + 1) & (cap - 1);
            if (h[s].index < 0) {
                h[s] = (cnt_t){ix, 0};
                used++;
            }
            h[s].count++;
        }
    }
    /* the JS sums over the dense vector in index order: the same order here */
    size_t k = 0;
    for (size_t i = 0; i < cap; i++)
        if (h[i].index >= 0)
            h[k++] = h[i];
    qsort(h, k, sizeof *h, cmp_cnt);
    double norm2 = 0;
    for (size_t i = 0; i < k; i++) {
        double v = (double)h[i].count * m->idf[h[i].index];
        norm2 += v * v;
    }
    double norm = sqrt(norm2), z = m->intercept;
    for (size_t i = 0; i < k; i++) {
        double v = (double)h[i].count * m->idf[h[i].index];
        if (norm > 0)
            v /= norm;
        z += m->coef[h[i].index] * v;
    }
    vsr_free(h);
    VSR_UNUSED(used);
    *p = 1.0 / (1.0 + exp(-z));
    return VSR_OK;
}

static void toks_free(toks_t *t)
{
    vsr_free(t->norm);
    vsr_free(t->tok);
}

int vsr_guard_lr_score(const vsr_guard_lr_t *m, const char *text, size_t len, double *p)
{
    toks_t t = {0};
    int rc = tokenize(m, text, len, &t);
    if (rc == VSR_OK)
        rc = score_range(m, &t, 0, t.n_tok, p);
    toks_free(&t);
    return rc;
}

int vsr_guard_lr_score_chunked(const vsr_guard_lr_t *m, const char *text, size_t len, double *p, size_t *n_windows)
{
    toks_t t = {0};
    size_t windows = 0;
    int rc = tokenize(m, text, len, &t);
    double best = 0;
    size_t a = 0;
    while (rc == VSR_OK) {
        size_t b = VSR_MIN(a + VSR_GUARD_CHUNK_TOKENS, t.n_tok);
        double s;
        rc = score_range(m, &t, a, b, &s);
        if (rc != VSR_OK)
            break;
        if (windows++ == 0 || s > best)
            best = s;
        if (b >= t.n_tok)
            break;
        /* the next window: the first token beginning within the last 64
         * runes of this one, and at least one token further */
        size_t end = t.tok[b - 1].rune1, na = b;
        while (na > a + 1 && t.tok[na - 1].rune0 + VSR_GUARD_CHUNK_OVERLAP_RUNES >= end)
            na--;
        a = na;
    }
    toks_free(&t);
    if (rc == VSR_OK) {
        *p = best;
        if (n_windows)
            *n_windows = windows;
    }
    return rc;
}

/* ---- both models ---- */

int vsr_guard_load_dir(const char *dir, vsr_guard_t *g)
{
    char path[4096];
    g->jailbreak = g->injection = NULL;
    if (snprintf(path, sizeof path, "%s/%s", dir, VSR_GUARD_JAILBREAK_FILE) >= (int)sizeof path)
        return VSR_ERR_IO;
    int rc = vsr_guard_lr_load(path, &g->jailbreak);
    if (rc != VSR_OK)
        return rc;
    if (snprintf(path, sizeof path, "%s/%s", dir, VSR_GUARD_INJECTION_FILE) >= (int)sizeof path)
        rc = VSR_ERR_IO;
    else
        rc = vsr_guard_lr_load(path, &g->injection);
    if (rc != VSR_OK) {
        vsr_guard_lr_free(g->jailbreak);
        g->jailbreak = NULL;
    }
    return rc;
}

void vsr_guard_free(vsr_guard_t *g)
{
    vsr_guard_lr_free(g->jailbreak);
    vsr_guard_lr_free(g->injection);
    g->jailbreak = g->injection = NULL;
}

int vsr_guard_score(const vsr_guard_t *g, const char *text, size_t len, double *p_jailbreak, double *p_injection)
{
    int rc = vsr_guard_lr_score_chunked(g->jailbreak, text, len, p_jailbreak, NULL);
    if (rc == VSR_OK)
        rc = vsr_guard_lr_score_chunked(g->injection, text, len, p_injection, NULL);
    return rc;
}

/* ---- contrastive and hybrid ---- */

static double cosine(const float *a, const float *b, size_t dim)
{
    double ab = 0, aa = 0, bb = 0;
    for (size_t i = 0; i < dim; i++) {
        ab += (double)a[i] * b[i];
        aa += (double)a[i] * a[i];
        bb += (double)b[i] * b[i];
    }
    if (aa <= 0 || bb <= 0)
        return 0;
    return ab / (sqrt(aa) * sqrt(bb));
}

static double max_cos(const float *q, const float *set, size_t n, size_t dim)
{
    double best = 0;
    for (size_t i = 0; i < n; i++) {
        double c = cosine(q, set + i * dim, dim);
        if (i == 0 || c > best)
            best = c;
    }
    return best;
}

double vsr_guard_contrastive(const float *q, const float *jailbreak, size_t n_jailbreak, const float *benign,
                             size_t n_benign, size_t dim)
{
    return max_cos(q, jailbreak, n_jailbreak, dim) - max_cos(q, benign, n_benign, dim);
}

double vsr_guard_hybrid(double p_classifier, double contrastive, double w, double lo, double hi)
{
    double c = hi > lo ? (contrastive - lo) / (hi - lo) : (contrastive >= lo ? 1.0 : 0.0);
    if (!(c >= 0)) /* also NaN */
        c = 0;
    if (c > 1)
        c = 1;
    if (!(p_classifier >= 0))
        p_classifier = 0;
    if (p_classifier > 1)
        p_classifier = 1;
    return w * p_classifier + (1 - w) * c;
}

static double unit(double v)
{
    return !(v >= 0) ? 0 : v > 1 ? 1 : v;
}

double vsr_guard_with_head(double p_head, double hybrid, double w_head)
{
    return w_head * unit(p_head) + (1 - w_head) * unit(hybrid);
}

double vsr_guard_with_lexical(double p_lexical, double score, double w_lexical)
{
    return w_lexical * unit(p_lexical) + (1 - w_lexical) * unit(score);
}

double vsr_guard_calibrate(double score, double operating_point)
{
    double x = unit(score), t = operating_point, c = VSR_GUARD_CALIBRATED_AT;
    if (!(t > 0 && t < 1))
        return x;
    return x <= t ? c * x / t : c + (1 - c) * (x - t) / (1 - t);
}
