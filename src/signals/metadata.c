/* metadata.c — the metadata signal: a fact from the request's metadata,
 * the body's top-level "metadata" object (the OpenAI request field).
 * Headers are not read.  A metadata object larger than
 * VSR_SIGNALS_MAX_METADATA_BYTES, or of more than
 * VSR_SIGNALS_MAX_METADATA_TOKENS JSON tokens, counts as absent.
 *
 * metadata: the member `key`; without a predicate it matches when the key
 * is present (and not null); with one every bound given must hold: equals
 * (text; numbers by value), in (one of), exists, gt/gte/lt/lte (the value
 * read as a number; a value that is no number fails them).
 * Confidence 1.0 on a match; the value is the member's number, or 1/0. */
#include <math.h>
#include <stdlib.h>

#include "signals/signals-int.h"

typedef struct {
    char *key;
    vsr_metadata_predicate_conf_t p;
    int has_predicate;
    char **in;
    size_t n_in;
    char *equals;
} md_t;

static char **copy_list(const vsr_strlist_conf_t *l)
{
    char **v = vsr_calloc(l->n + 1, sizeof(char *));
    for (size_t i = 0; i < l->n; i++)
        v[i] = vsr_strdup(l->items[i]);
    return v;
}

static void free_list(char **v, size_t n)
{
    for (size_t i = 0; v && i < n; i++)
        vsr_free(v[i]);
    vsr_free(v);
}

int vsr__metadata_compile(vsr_signals_t *s, const void *conf, const char *path, void **state, vsr_buf_t *err)
{
    const vsr_sig_metadata_conf_t *mc = conf;
    VSR_UNUSED(s);
    VSR_UNUSED(path);
    VSR_UNUSED(err);
    md_t *m = vsr_calloc(1, sizeof(*m));
    /* compiled signals keep no pointer into the configuration */
    m->key = vsr_strdup(mc->key ? mc->key : "");
    m->p = mc->predicate;
    m->has_predicate = mc->has_predicate;
    m->equals = mc->predicate.equals ? vsr_strdup(mc->predicate.equals) : NULL;
    m->n_in = mc->predicate.in.n;
    m->in = copy_list(&mc->predicate.in);
    m->p.equals = NULL;
    m->p.in = (vsr_strlist_conf_t){NULL, 0};
    *state = m;
    return VSR_OK;
}

void vsr__metadata_free(void *state)
{
    md_t *m = state;
    if (m == NULL)
        return;
    vsr_free(m->key);
    vsr_free(m->equals);
    free_list(m->in, m->n_in);
    vsr_free(m);
}

/* Parses the request's metadata object into j: 1 when there is one. */
static int parse_metadata(const vsr__ctx_t *c, vsr_json_t *j)
{
    memset(j, 0, sizeof(*j));
    vsr_slice_t md = c->in->chat ? c->in->chat->metadata : vsr_slice(NULL, 0);
    if (md.len == 0 || md.len > VSR_SIGNALS_MAX_METADATA_BYTES)
        return 0;
    vsr_json_limits_t lim = {8, VSR_SIGNALS_MAX_METADATA_TOKENS};
    if (vsr_json_parse(j, md.p, md.len, &lim) != VSR_OK || vsr_json_type(j, 0) != VSR_JSON_OBJECT) {
        vsr_json_free(j);
        memset(j, 0, sizeof(*j));
        return 0;
    }
    return 1;
}

/* The text of member `key` (strings unescaped, other scalars as written,
 * containers raw): 1 when present and not null. */
static int member_text(const vsr__ctx_t *c, const vsr_json_t *j, const char *key, vsr_slice_t *out, int *is_number)
{
    uint32_t v;
    if (vsr_json_object_get(j, 0, key, &v) != VSR_OK || vsr_json_type(j, v) == VSR_JSON_NULL)
        return 0;
    *is_number = vsr_json_type(j, v) == VSR_JSON_NUMBER;
    if (vsr_json_type(j, v) == VSR_JSON_STRING)
        return vsr_json_string(j, v, c->pool, out) == VSR_OK;
    *out = vsr_json_raw(j, v);
    return 1;
}

/* s as a number (the whole text), else NaN. */
static double number_of(vsr_pool_t *pool, vsr_slice_t s)
{
    if (s.len == 0 || s.len > 64)
        return NAN;
    char buf[65];
    memcpy(buf, s.p, s.len);
    buf[s.len] = 0;
    char *end;
    double x = strtod(buf, &end);
    VSR_UNUSED(pool);
    return *end == 0 && isfinite(x) ? x : NAN;
}

vsr_signal_result_t vsr__metadata_eval(vsr__ctx_t *c, const void *state)
{
    const md_t *m = state;
    vsr_signal_result_t r = {0};
    vsr_json_t j;
    vsr_slice_t val = {NULL, 0};
    int is_number = 0, present = 0;
    if (parse_metadata(c, &j)) {
        present = member_text(c, &j, m->key, &val, &is_number);
        vsr_json_free(&j);
    }
    double x = present ? number_of(c->pool, val) : NAN;
    if (!isnan(x))
        r.value = x;
    int ok;
    if (!m->has_predicate) {
        ok = present;
    } else {
        const vsr_metadata_predicate_conf_t *p = &m->p;
        ok = 1;
        if (p->has_exists)
            ok &= present == p->exists;
        if (!present && (m->equals || m->n_in || p->has_gt || p->has_gte || p->has_lt || p->has_lte))
            ok = 0;
        if (ok && m->equals) {
            double e = number_of(c->pool, vsr_slice_cstr(m->equals));
            ok = is_number && !isnan(e) && !isnan(x) ? x == e : vsr_slice_eq_cstr(val, m->equals);
        }
        if (ok && m->n_in) {
            size_t i = 0;
            while (i < m->n_in && !vsr_slice_eq_cstr(val, m->in[i]))
                i++;
            ok = i < m->n_in;
        }
        if (ok && (p->has_gt || p->has_gte || p->has_lt || p->has_lte)) {
            ok = !isnan(x) && (!p->has_gt || x > p->gt) && (!p->has_gte || x >= p->gte) &&
                 (!p->has_lt || x < p->lt) && (!p->has_lte || x <= p->lte);
        }
    }
    r.matched = ok;
    r.confidence = ok ? 1.0 : 0.0;
    if (isnan(x))
        r.value = ok ? 1.0 : 0.0;
    return r;
}
