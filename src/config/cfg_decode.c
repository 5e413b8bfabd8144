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

char *vsr__cfg_strdup(cfg_decoder_t *d, const char *s)
{
    return vsr_pool_strndup(d->pool, s, strlen(s));
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

int vsr__cfg_string(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj)
{
    const char *s = vsr__cfg_get_string(d, f, val);
    if (s == NULL)
        return -1;
    *(char **)((char *)obj + f->offset) = vsr__cfg_strdup(d, s);
    return 0;
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
    if (val->kind == CFG_NODE_SCALAR && val->type == CFG_INT) {
        if (!val->ival_ok || val->ival < 1 || val->ival > MAX_DURATION_SECONDS) {
            vsr__cfg_node_error(d, val, "%s must be between 1 and %lld seconds, got %s", f->key,
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
        if (ms == 0) {
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
    for (size_t i = 0; i < val->n; i++)
        if (vsr__cfg_decode_object(d, f->spec, val->items[i], items + i * f->spec->size, i) != 0)
            rc = -1;
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
static int is_empty_value(const cfg_node_t *v)
{
    if (v->kind == CFG_NODE_SCALAR)
        return v->type == CFG_NULL;
    return v->n == 0;
}

static void record_unimplemented(cfg_decoder_t *d, const cfg_spec_t *spec, const char *key)
{
    char path[256];
    snprintf(path, sizeof(path), "%s%s%s", spec->path, spec->path[0] ? "." : "", key);
    for (size_t i = 0; i < d->n_unimpl; i++)
        if (strcmp(d->unimpl[i], path) == 0)
            return;
    if (d->n_unimpl == d->cap_unimpl) {
        d->cap_unimpl = d->cap_unimpl ? 2 * d->cap_unimpl : 16;
        d->unimpl = vsr_realloc(d->unimpl, d->cap_unimpl * sizeof(*d->unimpl));
    }
    d->unimpl[d->n_unimpl++] = vsr__cfg_strdup(d, path);
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
            else
                vsr__cfg_node_error(d, k, "unknown key %s", quote(d, k));
            continue;
        }
        const cfg_field_t *f = &spec->fields[fi];
        size_t slot = slot_of(spec, fi);
        if (seen[slot] != NULL) {
            const cfg_node_t *prev = seen_key[slot];
            /* the same key twice was reported with the tree; this is the
             * old and the new spelling of one setting */
            if (prev->len != k->len || memcmp(prev->str, k->str, k->len) != 0)
                vsr__cfg_node_error(d, k, "%s and %s are the same setting (first at %u:%u); set only one",
                                    quote(d, prev), quote(d, k), prev->line, prev->col);
            continue;
        }
        seen[slot] = v;
        seen_key[slot] = k;
        if (f->flags & CFG_UNIMPLEMENTED) {
            if (!is_empty_value(v))
                record_unimplemented(d, spec, f->key);
            continue;
        }
        f->decode(d, f, v, obj);
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
