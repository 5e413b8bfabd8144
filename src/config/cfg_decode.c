/*
 * cfg_decode.c — the table-driven decoder: a mapping node + a cfg_spec_t
 * → a C struct, plus the generic field decoders (strings, bounded integers,
 * durations, nested objects, lists of objects).
 *
 * Every problem is reported where it is found and decoding goes on with the
 * next key, so one run shows all the mistakes in a document.
 */
#include <stdio.h>
#include <stdlib.h>

#include "config/cfg_internal.h"

void vsr__cfg_node_error(cfg_decoder_t *d, const cfg_node_t *node, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    vsr__cfg_error(d->dg, node->line, node->col, "%s", msg);
}

void vsr__cfg_mark_error(cfg_decoder_t *d, const cfg_mark_t *at, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    vsr__cfg_error(d->dg, at ? at->line : 1, at ? at->col : 1, "%s", msg);
}

void vsr__cfg_warn(cfg_decoder_t *d, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (d->n_warnings == d->cap_warnings) {
        d->cap_warnings = d->cap_warnings ? 2 * d->cap_warnings : 8;
        d->warnings = vsr_realloc(d->warnings, d->cap_warnings * sizeof(*d->warnings));
    }
    d->warnings[d->n_warnings++] = vsr__cfg_strdup(d, msg);
}

char *vsr__cfg_strdup(cfg_decoder_t *d, const char *s)
{
    return vsr_pool_strndup(d->pool, s, strlen(s));
}

/* ---- paths and marks ---------------------------------------------------------- */

size_t vsr__cfg_path_push(cfg_decoder_t *d, const char *seg)
{
    size_t saved = d->path_len;
    int dot = d->path_len > 0 && seg[0] != '[';
    size_t len = strlen(seg);
    /* a path this long only comes from a pathological document: it is cut,
     * which at worst merges two unimplemented paths in the warning */
    if (d->path_len + dot + len + 1 > sizeof(d->path))
        return saved;
    if (dot)
        d->path[d->path_len++] = '.';
    memcpy(d->path + d->path_len, seg, len);
    d->path_len += len;
    d->path[d->path_len] = '\0';
    return saved;
}

void vsr__cfg_path_pop(cfg_decoder_t *d, size_t saved)
{
    d->path_len = saved;
    d->path[saved] = '\0';
}

static int mark_cmp(const void *pa, const void *pb)
{
    const cfg_mark_t *a = pa, *b = pb;
    uintptr_t x = (uintptr_t)a->key, y = (uintptr_t)b->key;
    return x < y ? -1 : x > y;
}

void vsr__cfg_mark(cfg_decoder_t *d, const void *key, const cfg_node_t *node)
{
    if (d->n_marks == d->cap_marks) {
        d->cap_marks = d->cap_marks ? 2 * d->cap_marks : 64;
        d->marks = vsr_realloc(d->marks, d->cap_marks * sizeof(*d->marks));
    }
    d->marks[d->n_marks++] = (cfg_mark_t){key, node->line, node->col};
    d->marks_sorted = 0;
}

/* Sorted on first lookup: marks are all taken before the checks read them,
 * and a document made huge with aliases must not make this quadratic. */
const cfg_mark_t *vsr__cfg_mark_find(cfg_decoder_t *d, const void *key)
{
    if (!d->marks_sorted) {
        if (d->n_marks > 1)
            qsort(d->marks, d->n_marks, sizeof(*d->marks), mark_cmp);
        d->marks_sorted = 1;
    }
    cfg_mark_t probe = {key, 0, 0};
    if (d->n_marks == 0)
        return NULL;
    return bsearch(&probe, d->marks, d->n_marks, sizeof(*d->marks), mark_cmp);
}

static const char *quote(cfg_decoder_t *d, const cfg_node_t *n)
{
    return vsr__cfg_quote(d->pool, n->str, n->len);
}

/* "expected <what>, got <what>".  A quoted scalar that would have had the
 * expected type without its quotes gets a hint: port: "8080" is a string. */
static void type_error(cfg_decoder_t *d, const cfg_node_t *val, const char *expected, int expected_scalar)
{
    if (val->kind == CFG_NODE_SCALAR && val->type == CFG_STR && val->quoted && expected_scalar >= 0 &&
        vsr__cfg_plain_type(val->str, val->len) == (cfg_scalar_t)expected_scalar)
        vsr__cfg_node_error(d, val, "expected %s, got a string (%s is quoted)", expected, quote(d, val));
    else
        vsr__cfg_node_error(d, val, "expected %s, got %s", expected, vsr__cfg_node_what(val));
}

const char *vsr__cfg_get_string(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val)
{
    if (val->kind != CFG_NODE_SCALAR || val->type != CFG_STR) {
        type_error(d, val, "a string", -1);
        return NULL;
    }
    if (val->len == 0) {
        vsr__cfg_node_error(d, val, "%s must not be empty", f->key);
        return NULL;
    }
    /* names end up in headers and logs: no CR/LF, no NUL, no escapes */
    for (size_t i = 0; i < val->len; i++) {
        unsigned char c = (unsigned char)val->str[i];
        if (c < 0x20 || c == 0x7f) {
            vsr__cfg_node_error(d, val, "%s must not contain control characters", f->key);
            return NULL;
        }
    }
    return val->str;
}

const char *vsr__cfg_get_text(cfg_decoder_t *d, const cfg_node_t *val)
{
    if (val->kind != CFG_NODE_SCALAR || val->type != CFG_STR) {
        type_error(d, val, "a string", -1);
        return NULL;
    }
    if (memchr(val->str, '\0', val->len) != NULL) {
        vsr__cfg_node_error(d, val, "the string must not contain NUL characters");
        return NULL;
    }
    return val->str;
}

int vsr__cfg_accept_text(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj)
{
    return vsr__cfg_get_text(d, val) ? 0 : -1;
}

/* "a", "b" or "c" for messages. */
static void list_choices(char *out, size_t outlen, const char *const *choices)
{
    size_t n = 0, o = 0;
    while (choices[n])
        n++;
    out[0] = '\0';
    for (size_t i = 0; i < n && o < outlen; i++)
        o += (size_t)snprintf(out + o, outlen - o, "%s\"%s\"", i == 0 ? "" : i + 1 == n ? " or " : ", ", choices[i]);
}

static int find_choice(const cfg_field_t *f, const char *s, size_t len)
{
    for (int i = 0; f->choices[i]; i++) {
        vsr_slice_t c = vsr_slice_cstr(f->choices[i]);
        if ((f->flags & CFG_NOCASE) ? vsr_slice_case_eq(c, vsr_slice(s, len)) : vsr_slice_eq(c, vsr_slice(s, len)))
            return i;
    }
    return -1;
}

static int choice_index(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val)
{
    const char *s = vsr__cfg_get_string(d, f, val);
    if (s == NULL)
        return -1;
    int i = find_choice(f, s, val->len);
    if (i < 0) {
        char want[256];
        list_choices(want, sizeof(want), f->choices);
        vsr__cfg_node_error(d, val, "%s must be %s, got %s", f->key, want, quote(d, val));
    }
    return i;
}

int vsr__cfg_string(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj)
{
    if (f->choices != NULL) {
        int i = choice_index(d, f, val);
        if (i < 0)
            return -1;
        *(char **)((char *)obj + f->offset) = vsr__cfg_strdup(d, f->choices[i]);
        return 0;
    }
    const char *s = vsr__cfg_get_string(d, f, val);
    if (s == NULL)
        return -1;
    *(char **)((char *)obj + f->offset) = vsr__cfg_strdup(d, s);
    return 0;
}

int vsr__cfg_string_or_unset(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj)
{
    if (val->kind == CFG_NODE_SCALAR && val->type == CFG_STR && val->len == 0)
        return 0;
    return vsr__cfg_string(d, f, val, obj);
}

int vsr__cfg_choice(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj)
{
    int i = choice_index(d, f, val);
    if (i < 0)
        return -1;
    *(int *)((char *)obj + f->offset) = i;
    return 0;
}

int vsr__cfg_bool(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj)
{
    if (val->kind != CFG_NODE_SCALAR || val->type != CFG_BOOL) {
        type_error(d, val, "a boolean (true or false)", CFG_BOOL);
        return -1;
    }
    *(int *)((char *)obj + f->offset) = val->str[0] == 't' || val->str[0] == 'T';
    return 0;
}

int vsr__cfg_int(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj)
{
    if (val->kind != CFG_NODE_SCALAR || val->type != CFG_INT) {
        type_error(d, val, "an integer", CFG_INT);
        return -1;
    }
    if (!val->ival_ok || val->ival < f->min || val->ival > f->max) {
        vsr__cfg_node_error(d, val, "%s must be between %lld and %lld, got %s", f->key, (long long)f->min,
                            (long long)f->max, val->str);
        return -1;
    }
    *(int64_t *)((char *)obj + f->offset) = val->ival;
    return 0;
}

int vsr__cfg_double(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj)
{
    double v;
    if (val->kind == CFG_NODE_SCALAR && val->type == CFG_INT && val->ival_ok) {
        v = (double)val->ival;
    } else if (val->kind == CFG_NODE_SCALAR && val->type == CFG_FLOAT) {
        char *end;
        v = strtod(val->str, &end);
        /* .inf / .nan are YAML floats but never a sensible threshold */
        if (end != val->str + val->len || v != v || v > 1e300 || v < -1e300) {
            vsr__cfg_node_error(d, val, "%s must be a finite number, got %s", f->key, val->str);
            return -1;
        }
    } else {
        type_error(d, val, "a number", CFG_FLOAT);
        return -1;
    }
    if (v < f->dmin || v > f->dmax) {
        vsr__cfg_node_error(d, val, "%s must be between %g and %g, got %s", f->key, f->dmin, f->dmax, val->str);
        return -1;
    }
    *(double *)((char *)obj + f->offset) = v;
    return 0;
}

int vsr__cfg_strlist(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj)
{
    if (val->kind != CFG_NODE_SEQ) {
        type_error(d, val, "a list of strings", -1);
        return -1;
    }
    if (val->n == 0 && (f->flags & CFG_NONEMPTY)) {
        vsr__cfg_node_error(d, val, "%s must not be empty", f->key);
        return -1;
    }
    vsr_strlist_conf_t *l = (vsr_strlist_conf_t *)((char *)obj + f->offset);
    l->items = val->n ? vsr_pool_alloc(d->pool, val->n * sizeof(char *)) : NULL;
    l->n = 0;
    int rc = 0;
    for (size_t i = 0; i < val->n; i++) {
        const char *s = vsr__cfg_get_string(d, f, val->items[i]);
        if (s == NULL) {
            rc = -1;
            continue;
        }
        l->items[l->n++] = vsr__cfg_strdup(d, s);
    }
    return rc;
}

int vsr__cfg_status_codes(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj)
{
    if (val->kind != CFG_NODE_SEQ) {
        type_error(d, val, "a list of HTTP status codes", -1);
        return -1;
    }
    uint32_t *codes = val->n ? vsr_pool_alloc(d->pool, val->n * sizeof(uint32_t)) : NULL;
    size_t n = 0;
    int rc = 0;
    for (size_t i = 0; i < val->n; i++) {
        const cfg_node_t *c = val->items[i];
        if (c->kind != CFG_NODE_SCALAR || c->type != CFG_INT) {
            type_error(d, c, "an HTTP status code", CFG_INT);
            rc = -1;
        } else if (!c->ival_ok || c->ival < 100 || c->ival > 599) {
            vsr__cfg_node_error(d, c, "%s: a status code must be between 100 and 599, got %s", f->key, c->str);
            rc = -1;
        } else {
            codes[n++] = (uint32_t)c->ival;
        }
    }
    *(uint32_t **)((char *)obj + f->offset) = codes;
    *(size_t *)((char *)obj + f->count_offset) = n;
    return rc;
}

int vsr__cfg_is_token(const char *s)
{
    if (s == NULL || *s == '\0')
        return 0;
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              strchr("!#$%&'*+-.^_`|~", c) != NULL))
            return 0;
    }
    return 1;
}

static void store_uint(void *p, size_t size, uint64_t v)
{
    switch (size) {
    case 1: *(uint8_t *)p = (uint8_t)v; break;
    case 2: *(uint16_t *)p = (uint16_t)v; break;
    case 4: *(uint32_t *)p = (uint32_t)v; break;
    case 8: *(uint64_t *)p = v; break;
    default: VSR_BUG_ON(1);
    }
}

int vsr__cfg_uint(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj)
{
    VSR_BUG_ON(f->min < 0 || f->max < f->min);
    if (val->kind != CFG_NODE_SCALAR || val->type != CFG_INT) {
        type_error(d, val, "an integer", CFG_INT);
        return -1;
    }
    if (!val->ival_ok || val->ival < f->min || val->ival > f->max) {
        if (f->max == INT64_MAX)
            vsr__cfg_node_error(d, val, "%s must be at least %lld, got %s", f->key, (long long)f->min, val->str);
        else
            vsr__cfg_node_error(d, val, "%s must be between %lld and %lld, got %s", f->key, (long long)f->min,
                                (long long)f->max, val->str);
        return -1;
    }
    store_uint((char *)obj + f->offset, f->size, (uint64_t)val->ival);
    return 0;
}

/* An integer is a number of seconds; anything finer needs a unit. */
#define MAX_DURATION_SECONDS 1000000000LL

int vsr__cfg_duration_ms(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj)
{
    uint64_t ms;
    int zero_ok = (f->flags & CFG_ZERO_OK) != 0;
    if (val->kind == CFG_NODE_SCALAR && val->type == CFG_INT) {
        if (!val->ival_ok || val->ival < (zero_ok ? 0 : 1) || val->ival > MAX_DURATION_SECONDS) {
            vsr__cfg_node_error(d, val, "%s must be between %d and %lld seconds, got %s", f->key, zero_ok ? 0 : 1,
                                MAX_DURATION_SECONDS, val->str);
            return -1;
        }
        ms = (uint64_t)val->ival * 1000;
    } else if (val->kind == CFG_NODE_SCALAR && val->type == CFG_STR) {
        if (memchr(val->str, '\0', val->len) != NULL ||
            vsr_parse_duration_ms(vsr_slice(val->str, val->len), &ms) != VSR_OK) {
            vsr__cfg_node_error(d, val, "invalid duration %s (use e.g. \"300s\", \"1.5s\", \"250ms\", \"5m\", \"1h\")",
                                quote(d, val));
            return -1;
        }
        if (ms == 0 && !zero_ok) {
            vsr__cfg_node_error(d, val, "%s must be greater than 0", f->key);
            return -1;
        }
    } else {
        vsr__cfg_node_error(d, val, "expected a duration (e.g. \"300s\") or a number of seconds, got %s",
                            vsr__cfg_node_what(val));
        return -1;
    }
    *(uint64_t *)((char *)obj + f->offset) = ms;
    return 0;
}

int vsr__cfg_object(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj)
{
    return vsr__cfg_decode_object(d, f->spec, val, (char *)obj + f->offset, 0);
}

int vsr__cfg_list(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj)
{
    if (val->kind != CFG_NODE_SEQ) {
        type_error(d, val, "a list", -1);
        return -1;
    }
    if (val->n == 0 && (f->flags & CFG_NONEMPTY)) {
        vsr__cfg_node_error(d, val, "%s must not be empty", f->key);
        return -1;
    }
    char *items = NULL;
    if (val->n > 0) {
        items = vsr_pool_alloc(d->pool, val->n * f->spec->size);
        memset(items, 0, val->n * f->spec->size);
    }
    int rc = 0;
    size_t saved = vsr__cfg_path_push(d, "[]");
    for (size_t i = 0; i < val->n; i++)
        if (vsr__cfg_decode_object(d, f->spec, val->items[i], items + i * f->spec->size, i) != 0)
            rc = -1;
    vsr__cfg_path_pop(d, saved);
    *(void **)((char *)obj + f->offset) = items;
    *(size_t *)((char *)obj + f->count_offset) = val->n;
    return rc;
}

/* ---- objects ------------------------------------------------------------------ */

static size_t field_index(const cfg_spec_t *spec, const char *key, size_t len)
{
    for (size_t i = 0; i < spec->n_fields; i++)
        if (strlen(spec->fields[i].key) == len && memcmp(spec->fields[i].key, key, len) == 0)
            return i;
    return SIZE_MAX;
}

/* Aliases share the slot of the field they stand for. */
static size_t slot_of(const cfg_spec_t *spec, size_t i)
{
    const char *target = spec->fields[i].alias_of;
    if (target == NULL)
        return i;
    size_t t = field_index(spec, target, strlen(target));
    VSR_BUG_ON(t == SIZE_MAX);
    return t;
}

const cfg_node_t *vsr__cfg_seen(const cfg_spec_t *spec, const cfg_node_t *const *seen, const char *key)
{
    size_t i = field_index(spec, key, strlen(key));
    VSR_BUG_ON(i == SIZE_MAX);
    return seen[slot_of(spec, i)];
}

/* An empty value configures nothing, so there is nothing to warn about. */
int vsr__cfg_is_empty(const cfg_node_t *v)
{
    if (v->kind == CFG_NODE_SCALAR)
        return v->type == CFG_NULL;
    return v->n == 0;
}

void vsr__cfg_record_unimplemented(cfg_decoder_t *d, const char *key)
{
    char path[CFG_MAX_PATH + 64];
    snprintf(path, sizeof(path), "%s%s%s", d->path, d->path_len ? "." : "", key);
    for (size_t i = 0; i < d->n_unimpl; i++)
        if (strcmp(d->unimpl[i], path) == 0)
            return;
    if (d->n_unimpl == d->cap_unimpl) {
        d->cap_unimpl = d->cap_unimpl ? 2 * d->cap_unimpl : 16;
        d->unimpl = vsr_realloc(d->unimpl, d->cap_unimpl * sizeof(*d->unimpl));
        d->unimpl_at = vsr_realloc(d->unimpl_at, d->cap_unimpl * sizeof(*d->unimpl_at));
    }
    d->unimpl_at[d->n_unimpl] = (cfg_mark_t){NULL, d->key ? d->key->line : 1, d->key ? d->key->col : 1};
    d->unimpl[d->n_unimpl++] = vsr__cfg_strdup(d, path);
}

/* ---- unknown, inert and deprecated keys ----------------------------------------- */

unsigned vsr__cfg_edit_distance(const char *a, size_t alen, const char *b, size_t blen)
{
    enum { MAXLEN = 64 };
    if (alen > MAXLEN || blen > MAXLEN)
        return 255;
    unsigned row[MAXLEN + 1];
    for (size_t j = 0; j <= blen; j++)
        row[j] = (unsigned)j;
    for (size_t i = 1; i <= alen; i++) {
        unsigned diag = row[0];
        row[0] = (unsigned)i;
        for (size_t j = 1; j <= blen; j++) {
            unsigned up = row[j];
            unsigned best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best)
                best = up + 1;
            if (row[j - 1] + 1 < best)
                best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[blen] > 255 ? 255 : row[blen];
}

void vsr__cfg_unknown_key(cfg_decoder_t *d, const cfg_node_t *k, const char *const *valid, size_t n,
                          const char *hint)
{
    /* a suggestion is worth making when it differs in at most a third of
     * the key (at least one edit, at most three) */
    unsigned limit = (unsigned)(k->len / 3);
    limit = limit < 1 ? 1 : limit > 3 ? 3 : limit;
    const char *best = NULL;
    unsigned best_d = limit + 1;
    for (size_t i = 0; i < n; i++) {
        unsigned dist = vsr__cfg_edit_distance(k->str, k->len, valid[i], strlen(valid[i]));
        if (dist < best_d) {
            best_d = dist;
            best = valid[i];
        }
    }
    char tail[320] = "";
    if (hint != NULL)
        snprintf(tail, sizeof(tail), " (%s)", hint);
    if (best != NULL)
        vsr__cfg_node_error(d, k, "unknown key %s; did you mean \"%s\"?%s", quote(d, k), best, tail);
    else
        vsr__cfg_node_error(d, k, "unknown key %s%s", quote(d, k), tail);
}

/* One warning per path: a list of fifty items with the same inert key
 * says it once, at the first. */
static void warn_once(cfg_decoder_t *d, const cfg_node_t *k, const char *what, const char *why)
{
    char tag[CFG_MAX_PATH + 16];
    snprintf(tag, sizeof(tag), "\x01%s", d->path);
    for (size_t i = 0; i < d->n_warned; i++)
        if (strcmp(d->warned[i], tag) == 0)
            return;
    if (d->n_warned == d->cap_warned) {
        d->cap_warned = d->cap_warned ? 2 * d->cap_warned : 16;
        d->warned = vsr_realloc(d->warned, d->cap_warned * sizeof(*d->warned));
    }
    d->warned[d->n_warned++] = vsr__cfg_strdup(d, tag);
    vsr__cfg_warn(d, "%s:%u:%u: %s %s: %s", d->dg->file, k->line, k->col, d->path, what, why);
}

/* Decodes an inert field into scratch memory, so its value is checked the
 * way an implemented one is; nothing is stored.  An empty value configures
 * nothing and is not worth a warning. */
static void decode_inert(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *k, const cfg_node_t *v)
{
    if (f->decode != NULL) {
        size_t size = f->spec != NULL && f->spec->size > CFG_INERT_SIZE ? f->spec->size : CFG_INERT_SIZE;
        void *scratch = vsr_pool_alloc(d->pool, size + f->offset + 2 * sizeof(size_t) + f->count_offset);
        memset(scratch, 0, size + f->offset + 2 * sizeof(size_t) + f->count_offset);
        d->inert_depth++;
        int rc = f->decode(d, f, v, scratch);
        d->inert_depth--;
        if (rc != 0)
            return;
    }
    if (d->inert_depth == 0 && !vsr__cfg_deep_empty(v))
        warn_once(d, k, "is accepted and has no effect in vsr", f->inert);
}

int vsr__cfg_decode_object(cfg_decoder_t *d, const cfg_spec_t *spec, const cfg_node_t *node, void *obj, size_t index)
{
    VSR_BUG_ON(spec->n_fields > CFG_MAX_FIELDS);
    if (node->kind != CFG_NODE_MAP) {
        type_error(d, node, "a mapping", -1);
        return -1;
    }
    unsigned errors_before = d->dg->n_errors;
    const cfg_node_t *seen[CFG_MAX_FIELDS] = {0};
    const cfg_node_t *seen_key[CFG_MAX_FIELDS] = {0};
    if (spec->init)
        spec->init(d, obj);

    /* document order, so unimplemented paths are recorded in that order */
    for (size_t i = 0; i < node->n; i++) {
        const cfg_node_t *k = node->items[2 * i], *v = node->items[2 * i + 1];
        if (k->kind != CFG_NODE_SCALAR || k->type != CFG_STR) {
            vsr__cfg_node_error(d, k, "expected a string key, got %s", vsr__cfg_node_what(k));
            continue;
        }
        size_t fi = field_index(spec, k->str, k->len);
        if (fi == SIZE_MAX) {
            if (k->len == 2 && memcmp(k->str, "<<", 2) == 0 && !k->quoted)
                vsr__cfg_node_error(d, k, "merge keys (<<) are not supported");
            else if (spec->open && !vsr__cfg_is_empty(v)) {
                char key[128];
                snprintf(key, sizeof(key), "%.*s", (int)VSR_MIN(k->len, sizeof(key) - 1), k->str);
                const cfg_node_t *outer_key = d->key;
                d->key = k;
                vsr__cfg_record_unimplemented(d, key);
                d->key = outer_key;
            }
            else if (!spec->open) {
                const char *valid[CFG_MAX_FIELDS];
                size_t nv = 0;
                for (size_t j = 0; j < spec->n_fields; j++)
                    valid[nv++] = spec->fields[j].key;
                vsr__cfg_unknown_key(d, k, valid, nv, NULL);
            }
            continue;
        }
        const cfg_field_t *f = &spec->fields[fi];
        size_t slot = slot_of(spec, fi);
        if (seen_key[slot] != NULL) {
            const cfg_node_t *prev = seen_key[slot];
            /* the same key twice was reported with the tree; this is the
             * old and the new spelling of one setting */
            if (prev->len != k->len || memcmp(prev->str, k->str, k->len) != 0)
                vsr__cfg_node_error(d, k, "%s and %s are the same setting (first at %u:%u); set only one",
                                    quote(d, prev), quote(d, k), prev->line, prev->col);
            continue;
        }
        seen_key[slot] = k;
        if ((f->flags & CFG_NULL_OK) && v->kind == CFG_NODE_SCALAR && v->type == CFG_NULL)
            continue; /* null: as if absent */
        seen[slot] = v;
        if (f->flags & CFG_UNIMPLEMENTED) {
            if (!vsr__cfg_is_empty(v)) {
                const cfg_node_t *outer_key = d->key;
                d->key = k;
                vsr__cfg_record_unimplemented(d, f->key);
                d->key = outer_key;
            }
            continue;
        }
        size_t saved = vsr__cfg_path_push(d, f->key);
        const cfg_node_t *outer_key = d->key;
        d->key = k;
        if (f->inert != NULL) {
            decode_inert(d, f, k, v);
        } else {
            if (f->deprecated != NULL)
                warn_once(d, k, "is deprecated", f->deprecated);
            if (f->decode(d, f, v, obj) == 0 && (f->flags & CFG_HAS))
                *(int *)((char *)obj + f->has_offset) = 1;
        }
        d->key = outer_key;
        vsr__cfg_path_pop(d, saved);
    }

    for (size_t i = 0; i < spec->n_fields; i++) {
        const cfg_field_t *f = &spec->fields[i];
        if ((f->flags & CFG_REQUIRED) && f->alias_of == NULL && seen[i] == NULL)
            vsr__cfg_node_error(d, node, "missing required key \"%s\"", f->key);
    }
    if (spec->finish)
        spec->finish(d, node, obj, seen, index);
    return d->dg->n_errors == errors_before ? 0 : -1;
}

/* ---- uniqueness ---------------------------------------------------------------- */

typedef struct {
    const char *key;
    const cfg_node_t *node;
    size_t index;
    const cfg_node_t *first; /* duplicates: the first occurrence */
} named_t;

static int named_cmp(const void *pa, const void *pb)
{
    const named_t *a = pa, *b = pb;
    int c = strcmp(a->key, b->key);
    if (c != 0)
        return c;
    return a->index < b->index ? -1 : a->index > b->index;
}

static int index_cmp(const void *pa, const void *pb)
{
    const named_t *a = pa, *b = pb;
    return a->index < b->index ? -1 : a->index > b->index;
}

/* Sorting keeps this O(n log n) even for lists made huge with aliases. */
void vsr__cfg_check_unique(cfg_decoder_t *d, const char *what, const char *const *keys, const cfg_node_t *const *nodes,
                           size_t n)
{
    if (n < 2)
        return;
    named_t *v = vsr_malloc(n * sizeof(*v));
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
        if (keys[i] != NULL)
            v[m++] = (named_t){keys[i], nodes[i], i, NULL};
    qsort(v, m, sizeof(*v), named_cmp);
    named_t *dups = vsr_malloc(n * sizeof(*dups));
    size_t nd = 0;
    for (size_t i = 1, first = 0; i < m; i++) {
        if (strcmp(v[i].key, v[first].key) != 0) {
            first = i;
            continue;
        }
        dups[nd] = v[i];
        dups[nd++].first = v[first].node;
    }
    qsort(dups, nd, sizeof(*dups), index_cmp); /* report in document order */
    for (size_t i = 0; i < nd; i++)
        vsr__cfg_node_error(d, dups[i].node, "duplicate %s %s (first defined at %u:%u)", what,
                            vsr__cfg_quote(d->pool, dups[i].key, strlen(dups[i].key)), dups[i].first->line,
                            dups[i].first->col);
    vsr_free(dups);
    vsr_free(v);
}

void vsr__cfg_check_unique_marked(cfg_decoder_t *d, const char *what, const char *const *keys,
                                  const void *const *marks, size_t n)
{
    if (n < 2)
        return;
    cfg_node_t *pos = vsr_calloc(n, sizeof(*pos));
    const cfg_node_t **nodes = vsr_malloc(n * sizeof(*nodes));
    for (size_t i = 0; i < n; i++) {
        const cfg_mark_t *m = vsr__cfg_mark_find(d, marks[i]);
        pos[i].line = m ? m->line : 1;
        pos[i].col = m ? m->col : 1;
        nodes[i] = &pos[i];
    }
    vsr__cfg_check_unique(d, what, keys, nodes, n);
    vsr_free(nodes);
    vsr_free(pos);
}

/* ---- capability checks ------------------------------------------------------------ */

static int deep_empty_at(const cfg_node_t *v, int depth)
{
    if (vsr__cfg_is_empty(v))
        return 1;
    if (v->kind != CFG_NODE_MAP || depth > 4)
        return 0;
    for (size_t i = 0; i < v->n; i++)
        if (!deep_empty_at(v->items[2 * i + 1], depth + 1))
            return 0;
    return 1;
}

int vsr__cfg_deep_empty(const cfg_node_t *v)
{
    return deep_empty_at(v, 0);
}

int vsr__cfg_unsupported(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj)
{
    if (vsr__cfg_deep_empty(val))
        return 0;
    vsr__cfg_node_error(d, d->key ? d->key : val, "%s is not supported yet%s", d->path,
                        f->arg ? (const char *)f->arg : "");
    return -1;
}

/* ---- name indexes ------------------------------------------------------------------ */

void vsr__cfg_index_add(cfg_index_t *ix, const char *name, size_t index)
{
    if (name == NULL)
        return;
    if (ix->n == ix->cap) {
        ix->cap = ix->cap ? 2 * ix->cap : 16;
        ix->v = vsr_realloc(ix->v, ix->cap * sizeof(*ix->v));
    }
    ix->v[ix->n++] = (cfg_name_t){name, index};
}

static int name_index_cmp(const void *pa, const void *pb)
{
    const cfg_name_t *a = pa, *b = pb;
    int c = strcmp(a->name, b->name);
    if (c != 0)
        return c;
    return a->index < b->index ? -1 : a->index > b->index;
}

void vsr__cfg_index_sort(cfg_index_t *ix)
{
    if (ix->n > 1)
        qsort(ix->v, ix->n, sizeof(*ix->v), name_index_cmp);
}

const cfg_name_t *vsr__cfg_index_find(const cfg_index_t *ix, const char *name, size_t *count)
{
    size_t lo = 0, hi = ix->n;
    while (lo < hi) { /* first entry >= name */
        size_t mid = lo + (hi - lo) / 2;
        if (strcmp(ix->v[mid].name, name) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    size_t end = lo;
    while (end < ix->n && strcmp(ix->v[end].name, name) == 0)
        end++;
    if (count != NULL)
        *count = end - lo;
    return end > lo ? &ix->v[lo] : NULL;
}

void vsr__cfg_index_free(cfg_index_t *ix)
{
    vsr_free(ix->v);
    memset(ix, 0, sizeof(*ix));
}
