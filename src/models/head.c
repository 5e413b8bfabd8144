/*
 * head.c — the linear softmax head (head.h): a strict line parser for the
 * "vsr-head 1" text format and the prediction itself.
 */
#include "models/head.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define META_KEY_MAX 32
#define META_VALUE_MAX 128
#define NUM_MAX 64 /* bytes of one number; "%.9g" writes at most 15 */

struct vsr_head_s {
    size_t dim, n;
    double temp;
    float *w; /* n rows of dim */
    float *b; /* n */
    size_t lex;     /* lexical buckets, 0 when none ("vsr-head 1") */
    double lex_scale;
    float *lw;      /* n rows of lex */
    char (*labels)[VSR_HEAD_MAX_LABEL + 1];
    size_t n_meta;
    char meta_key[VSR_HEAD_MAX_META][META_KEY_MAX + 1];
    char meta_value[VSR_HEAD_MAX_META][META_VALUE_MAX + 1];
};

void vsr_head_free(vsr_head_t *h)
{
    if (!h) return;
    vsr_free(h->w);
    vsr_free(h->b);
    vsr_free(h->lw);
    vsr_free(h->labels);
    vsr_free(h);
}

/* ---- parsing ---- */

typedef struct {
    char *p, *end; /* the unread rest; the buffer is NUL-terminated at end */
} cursor_t;

/* The next line, NUL-terminated in place; NULL when no complete line is left
 * (a last line without its '\n' is a truncated file). */
static char *next_line(cursor_t *c)
{
    if (c->p >= c->end) return NULL;
    char *nl = memchr(c->p, '\n', (size_t)(c->end - c->p));
    if (!nl) return NULL;
    *nl = '\0';
    char *line = c->p;
    c->p = nl + 1;
    return line;
}

/* line == "KEY rest": returns rest, else NULL */
static char *after_key(char *line, const char *key)
{
    size_t k = strlen(key);
    if (strncmp(line, key, k) != 0 || line[k] != ' ') return NULL;
    return line + k + 1;
}

/* a decimal integer in [lo, hi] filling all of s */
static int parse_size(const char *s, size_t lo, size_t hi, size_t *out)
{
    size_t v = 0;
    if (!*s || (*s == '0' && s[1])) return 0;
    for (; *s; s++) {
        if (*s < '0' || *s > '9') return 0;
        v = v * 10 + (size_t)(*s - '0');
        if (v > hi) return 0;
    }
    if (v < lo) return 0;
    *out = v;
    return 1;
}

/* One finite number starting exactly at *p and ending at a single space
 * (followed by another field) or at the end of the line. */
static int parse_num(char **p, int last, double limit, double *out)
{
    char *s = *p, *e;
    if (*s == ' ' || *s == '\0') return 0; /* strtod would skip white space */
    if (strcspn(s, " ") > NUM_MAX) return 0; /* strtod's cost grows with the digits */
    double v = strtod(s, &e);
    if (e == s || !isfinite(v) || fabs(v) > limit) return 0;
    if (last) {
        if (*e != '\0') return 0;
    } else {
        if (*e != ' ' || e[1] == ' ' || e[1] == '\0') return 0;
        e++;
    }
    *p = e;
    *out = v;
    return 1;
}

static int parse_floats(char *s, float *out, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        double v;
        if (!parse_num(&s, i + 1 == n, VSR_HEAD_MAX_ABS, &v)) return 0;
        out[i] = (float)v;
    }
    return 1;
}

/* well-formed UTF-8, no control byte (C0, DEL), 1..max bytes, no space at
 * either end */
static int valid_label(const char *s, size_t max)
{
    size_t len = strlen(s);
    if (len == 0 || len > max || s[0] == ' ' || s[len - 1] == ' ') return 0;
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < len;) {
        unsigned c = u[i];
        size_t k;
        unsigned cp;
        if (c < 0x20 || c == 0x7f) return 0;
        if (c < 0x80) {
            i++;
            continue;
        } else if (c >= 0xc2 && c <= 0xdf) {
            k = 1, cp = c & 0x1f;
        } else if (c >= 0xe0 && c <= 0xef) {
            k = 2, cp = c & 0x0f;
        } else if (c >= 0xf0 && c <= 0xf4) {
            k = 3, cp = c & 0x07;
        } else {
            return 0;
        }
        for (size_t j = 1; j <= k; j++) {
            if (i + j >= len || (u[i + j] & 0xc0) != 0x80) return 0;
            cp = (cp << 6) | (u[i + j] & 0x3f);
        }
        if ((k == 2 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) || (k == 3 && (cp < 0x10000 || cp > 0x10ffff)))
            return 0;
        i += k + 1;
    }
    return 1;
}

static int valid_meta_key(const char *s)
{
    size_t len = strlen(s);
    if (len == 0 || len > META_KEY_MAX) return 0;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') || *s == '_' || *s == '-')) return 0;
    return 1;
}

static int valid_meta_value(const char *s)
{
    size_t len = strlen(s);
    if (len == 0 || len > META_VALUE_MAX) return 0;
    for (; *s; s++)
        if (*s <= 0x20 || *s >= 0x7f) return 0;
    return 1;
}

/* parses buf[0..len) (NUL-terminated at len, modified in place) into h */
static int parse(vsr_head_t *h, char *buf, size_t len)
{
    cursor_t c = {buf, buf + len};
    char *line, *rest;
    /* no NUL and no control byte other than '\n' anywhere: strtod and the
     * line splitter then see only what the format allows */
    for (size_t i = 0; i < len; i++) {
        unsigned char u = (unsigned char)buf[i];
        if ((u < 0x20 && u != '\n') || u == 0x7f) return VSR_ERR_INVALID;
    }
    int version;
    if (!(line = next_line(&c))) return VSR_ERR_INVALID;
    if (strcmp(line, "vsr-head 1") == 0) version = VSR_HEAD_VERSION;
    else if (strcmp(line, "vsr-head 2") == 0) version = VSR_HEAD_VERSION_LEX;
    else return VSR_ERR_INVALID;
    if (!(line = next_line(&c)) || !(rest = after_key(line, "dim")) ||
        !parse_size(rest, 1, VSR_HEAD_MAX_DIM, &h->dim))
        return VSR_ERR_INVALID;
    if (!(line = next_line(&c)) || !(rest = after_key(line, "classes")) ||
        !parse_size(rest, 2, VSR_HEAD_MAX_CLASSES, &h->n))
        return VSR_ERR_INVALID;
    if (!(line = next_line(&c)) || !(rest = after_key(line, "temperature")) ||
        !parse_num(&rest, 1, VSR_HEAD_MAX_TEMP, &h->temp) || h->temp < VSR_HEAD_MIN_TEMP)
        return VSR_ERR_INVALID;
    /* the file must be big enough for what it declares before we allocate:
     * each number takes at least two bytes ("0 ") */
    if ((size_t)(c.end - c.p) < h->n * (h->dim + 1) * 2) return VSR_ERR_INVALID;

    h->w = vsr_malloc(h->n * h->dim * sizeof *h->w);
    h->b = vsr_malloc(h->n * sizeof *h->b);
    h->labels = vsr_calloc(h->n, sizeof *h->labels);
    if (!h->w || !h->b || !h->labels) return VSR_ERR_NOMEM;

    line = next_line(&c);
    while (line && (rest = after_key(line, "meta"))) {
        if (h->n_meta == VSR_HEAD_MAX_META) return VSR_ERR_INVALID;
        char *sp = strchr(rest, ' ');
        if (!sp) return VSR_ERR_INVALID;
        *sp = '\0';
        if (!valid_meta_key(rest) || !valid_meta_value(sp + 1)) return VSR_ERR_INVALID;
        for (size_t i = 0; i < h->n_meta; i++)
            if (strcmp(h->meta_key[i], rest) == 0) return VSR_ERR_INVALID;
        strcpy(h->meta_key[h->n_meta], rest);
        strcpy(h->meta_value[h->n_meta], sp + 1);
        h->n_meta++;
        line = next_line(&c);
    }
    for (size_t i = 0; i < h->n; i++) {
        if (i > 0) line = next_line(&c);
        if (!line || !(rest = after_key(line, "class")) || !valid_label(rest, VSR_HEAD_MAX_LABEL))
            return VSR_ERR_INVALID;
        for (size_t j = 0; j < i; j++)
            if (strcmp(h->labels[j], rest) == 0) return VSR_ERR_INVALID;
        strcpy(h->labels[i], rest);
    }
    if (!(line = next_line(&c)) || !(rest = after_key(line, "bias")) || !parse_floats(rest, h->b, h->n))
        return VSR_ERR_INVALID;
    for (size_t i = 0; i < h->n; i++)
        if (!(line = next_line(&c)) || !(rest = after_key(line, "row")) ||
            !parse_floats(rest, h->w + i * h->dim, h->dim))
            return VSR_ERR_INVALID;
    if (version == VSR_HEAD_VERSION_LEX) {
        char *sp;
        if (!(line = next_line(&c)) || !(rest = after_key(line, "lexical")) || !(sp = strchr(rest, ' ')))
            return VSR_ERR_INVALID;
        *sp = '\0';
        char *sc = sp + 1;
        if (!parse_size(rest, VSR_HEAD_MIN_LEX, VSR_HEAD_MAX_LEX, &h->lex) || (h->lex & (h->lex - 1)) != 0 ||
            !parse_num(&sc, 1, 100, &h->lex_scale) || !(h->lex_scale > 0))
            return VSR_ERR_INVALID;
        if ((size_t)(c.end - c.p) < h->n * h->lex * 2) return VSR_ERR_INVALID;
        if (!(h->lw = vsr_malloc(h->n * h->lex * sizeof *h->lw))) return VSR_ERR_NOMEM;
        for (size_t i = 0; i < h->n; i++)
            if (!(line = next_line(&c)) || !(rest = after_key(line, "lrow")) ||
                !parse_floats(rest, h->lw + i * h->lex, h->lex))
                return VSR_ERR_INVALID;
    }
    if (!(line = next_line(&c)) || strcmp(line, "end") != 0 || c.p != c.end) return VSR_ERR_INVALID;
    return VSR_OK;
}

static int load_owned(char *buf, size_t len, vsr_head_t **out)
{
    vsr_head_t *h = vsr_calloc(1, sizeof *h);
    if (!h) return VSR_ERR_NOMEM;
    int rc = parse(h, buf, len);
    if (rc != VSR_OK) {
        vsr_head_free(h);
        return rc;
    }
    *out = h;
    return VSR_OK;
}

int vsr_head_load_mem(const void *data, size_t len, vsr_head_t **out)
{
    if (len > VSR_HEAD_MAX_BYTES) return VSR_ERR_TOO_BIG;
    char *buf = vsr_malloc(len + 1);
    if (!buf) return VSR_ERR_NOMEM;
    if (len) memcpy(buf, data, len);
    buf[len] = '\0';
    int rc = load_owned(buf, len, out);
    vsr_free(buf);
    return rc;
}

int vsr_head_load(const char *path, vsr_head_t **out)
{
    FILE *f = fopen(path, "rb");
    if (!f) return VSR_ERR_IO;
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
        fclose(f);
        return VSR_ERR_IO;
    }
    if ((uint64_t)st.st_size > VSR_HEAD_MAX_BYTES) {
        fclose(f);
        return VSR_ERR_TOO_BIG;
    }
    size_t len = (size_t)st.st_size;
    char *buf = vsr_malloc(len + 1);
    if (!buf) {
        fclose(f);
        return VSR_ERR_NOMEM;
    }
    /* read one byte more than stat said: a file that grew is refused */
    size_t got = fread(buf, 1, len + 1, f);
    int err = ferror(f);
    fclose(f);
    if (err) {
        vsr_free(buf);
        return VSR_ERR_IO;
    }
    if (got != len) {
        vsr_free(buf);
        return VSR_ERR_INVALID;
    }
    buf[len] = '\0';
    int rc = load_owned(buf, len, out);
    vsr_free(buf);
    return rc;
}

/* ---- accessors ---- */

size_t vsr_head_dim(const vsr_head_t *h) { return h->dim; }
size_t vsr_head_classes(const vsr_head_t *h) { return h->n; }
double vsr_head_temperature(const vsr_head_t *h) { return h->temp; }

size_t vsr_head_lex_buckets(const vsr_head_t *h) { return h->lex; }
double vsr_head_lex_scale(const vsr_head_t *h) { return h->lex_scale; }

const char *vsr_head_label(const vsr_head_t *h, size_t i) { return i < h->n ? h->labels[i] : NULL; }

int vsr_head_label_index(const vsr_head_t *h, const char *label)
{
    for (size_t i = 0; i < h->n; i++)
        if (strcmp(h->labels[i], label) == 0) return (int)i;
    return -1;
}

const char *vsr_head_meta(const vsr_head_t *h, const char *key)
{
    for (size_t i = 0; i < h->n_meta; i++)
        if (strcmp(h->meta_key[i], key) == 0) return h->meta_value[i];
    return NULL;
}

/* ---- prediction ---- */

int vsr_head_logits(const vsr_head_t *h, const float *x, size_t dim, float *logits)
{
    if (dim != h->dim) return VSR_ERR_INVALID;
    for (size_t d = 0; d < dim; d++)
        if (!isfinite(x[d])) return VSR_ERR_INVALID;
    for (size_t i = 0; i < h->n; i++) {
        const float *row = h->w + i * h->dim;
        double acc = h->b[i];
        for (size_t d = 0; d < dim; d++) acc += (double)row[d] * x[d];
        logits[i] = (float)acc;
    }
    return VSR_OK;
}

/* ---- the lexical part ---- */

static int word_byte(unsigned char u)
{
    return (u >= 'a' && u <= 'z') || (u >= 'A' && u <= 'Z') || (u >= '0' && u <= '9') || u >= 0x80;
}

#define FNV_OFFSET 2166136261u
#define FNV_PRIME 16777619u

static uint32_t fnv_byte(uint32_t hash, unsigned char u)
{
    if (u >= 'A' && u <= 'Z') u = (unsigned char)(u - 'A' + 'a');
    else if (u >= '0' && u <= '9') u = '0';
    return (hash ^ u) * FNV_PRIME;
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

size_t vsr_head_lex_features(const char *text, size_t len, size_t buckets, uint32_t *idx)
{
    const unsigned char *u = (const unsigned char *)text;
    size_t n = 0, words = 0, i = 0;
    uint32_t prev = 0; /* the previous word's hash; 0: none yet */
    while (i < len && words < VSR_HEAD_LEX_MAX_WORDS) {
        while (i < len && !word_byte(u[i])) i++;
        if (i == len) break;
        uint32_t w = FNV_OFFSET, pair = prev;
        for (; i < len && word_byte(u[i]); i++) w = fnv_byte(w, u[i]);
        idx[n++] = w & (uint32_t)(buckets - 1);
        if (prev) {
            /* the pair: the previous word's hash mixed with this one's */
            pair = (pair ^ (w * 0x9e3779b1u)) * FNV_PRIME;
            pair ^= pair >> 15;
            idx[n++] = pair & (uint32_t)(buckets - 1);
        }
        prev = w ? w : 1;
        words++;
    }
    qsort(idx, n, sizeof *idx, cmp_u32);
    size_t k = 0;
    for (size_t j = 0; j < n; j++)
        if (k == 0 || idx[j] != idx[k - 1]) idx[k++] = idx[j];
    return k;
}

static int predict(const vsr_head_t *h, const float *x, size_t dim, const char *text, size_t len, float *probs)
{
    int rc = vsr_head_logits(h, x, dim, probs);
    if (rc != VSR_OK) {
        memset(probs, 0, h->n * sizeof *probs);
        return rc;
    }
    if (h->lex && text) {
        uint32_t idx[VSR_HEAD_LEX_MAX_FEATURES];
        size_t k = vsr_head_lex_features(text, len, h->lex, idx);
        if (k) {
            double v = h->lex_scale / sqrt((double)k);
            for (size_t i = 0; i < h->n; i++) {
                const float *row = h->lw + i * h->lex;
                double acc = 0;
                for (size_t j = 0; j < k; j++) acc += row[idx[j]];
                probs[i] = (float)(probs[i] + acc * v);
            }
        }
    }
    double max = probs[0];
    for (size_t i = 1; i < h->n; i++)
        if (probs[i] > max) max = probs[i];
    double e[VSR_HEAD_MAX_CLASSES], sum = 0;
    for (size_t i = 0; i < h->n; i++) {
        e[i] = exp((probs[i] - max) / h->temp);
        sum += e[i];
    }
    for (size_t i = 0; i < h->n; i++) probs[i] = (float)(e[i] / sum);
    return VSR_OK;
}

int vsr_head_predict(const vsr_head_t *h, const float *x, size_t dim, float *probs)
{
    return predict(h, x, dim, NULL, 0, probs);
}

int vsr_head_predict_text(const vsr_head_t *h, const float *x, size_t dim, const char *text, size_t len,
                          float *probs)
{
    return predict(h, x, dim, text, len, probs);
}

size_t vsr_head_top_k(const float *probs, size_t n, size_t k, size_t *idx)
{
    /* insertion into the sorted prefix: O(n·k); an equal value goes after
     * the ones already there, so ties keep the lower index first */
    if (k > n) k = n;
    size_t cnt = 0;
    for (size_t i = 0; i < n; i++) {
        size_t at = cnt;
        while (at > 0 && probs[i] > probs[idx[at - 1]]) at--;
        if (at >= k) continue;
        size_t last = cnt < k ? cnt : k - 1;
        for (size_t j = last; j > at; j--) idx[j] = idx[j - 1];
        idx[at] = i;
        if (cnt < k) cnt++;
    }
    return k;
}
