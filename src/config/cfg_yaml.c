/*
 * cfg_yaml.c — libyaml events → a tree of cfg_node_t with 1-based marks.
 *
 * Built from the event API rather than libyaml's document loader because the
 * loader keeps no scalar style (we need "quoted" to tell "8080" from 8080),
 * and because we want control over aliases: an alias shares the anchored node
 * (no copy), may only name a node that is already complete (so the tree is a
 * DAG, never a cycle), and the total size of what aliases expand to is
 * bounded, which defuses "billion laughs" documents.
 *
 * Everything is iterative: nesting depth costs heap, never C stack.  Depth
 * is bounded all the same (CFG_MAX_DEPTH, counted on the event stream): the
 * scanner's work per token grows with the number of open flow collections,
 * so unclosed nesting ("{a: " repeated) would cost time quadratic in the
 * document's size; parsing stops at the first collection past the bound.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <yaml.h>

#include "config/cfg_internal.h"

#define CFG_MAX_KEY_BYTES 256

/* Sum of the (expanded) sizes of everything aliases refer to.  Generous for
 * a hand-written config, tiny next to what exponential aliasing produces. */
#define CFG_ALIAS_BUDGET 100000u
#define WEIGHT_CAP (UINT64_C(1) << 40)

#define TAG_PREFIX "tag:yaml.org,2002:"

_Static_assert(CFG_MAX_DEPTH >= 16 && CFG_MAX_DEPTH <= 256, "the canonical emitter recurses up to 256 levels");

typedef struct {
    cfg_node_t *node;
    cfg_node_t **items;  /* children collected so far (malloc'd) */
    size_t n, cap;
    char *anchor;        /* registered when the node completes (pool) */
} frame_t;

typedef struct {
    const char *name;
    cfg_node_t *node;
} anchor_t;

typedef struct {
    vsr_pool_t *pool;
    cfg_diag_t *dg;
    frame_t *stack;
    size_t depth, cap;
    anchor_t *anchors;
    size_t n_anchors, cap_anchors;
    uint64_t alias_expansion;
    int first_ended;     /* the first document's end event was seen */
    cfg_node_t *root;
} builder_t;

void vsr__cfg_error(cfg_diag_t *dg, uint32_t line, uint32_t col, const char *fmt, ...)
{
    dg->n_errors++;
    if (dg->out == NULL || dg->n_errors > CFG_MAX_ERRORS + 1)
        return;
    if (dg->n_errors == CFG_MAX_ERRORS + 1) {
        vsr_buf_printf(dg->out, "%s:%u:%u: too many errors; the rest are not shown\n", dg->file, line, col);
        return;
    }
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    vsr_buf_printf(dg->out, "%s:%u:%u: %s\n", dg->file, line, col, msg);
}

const char *vsr__cfg_node_what(const cfg_node_t *n)
{
    if (n->kind == CFG_NODE_SEQ)
        return "a list";
    if (n->kind == CFG_NODE_MAP)
        return "a mapping";
    switch (n->type) {
    case CFG_NULL: return "null";
    case CFG_BOOL: return "a boolean";
    case CFG_INT: return "an integer";
    case CFG_FLOAT: return "a float";
    case CFG_STR: return "a string";
    }
    return "a scalar";
}

const cfg_node_t *vsr__cfg_map_get(const cfg_node_t *n, const char *key)
{
    if (n == NULL || n->kind != CFG_NODE_MAP)
        return NULL;
    size_t klen = strlen(key);
    for (size_t i = 0; i < n->n; i++) {
        const cfg_node_t *k = n->items[2 * i];
        if (k->kind == CFG_NODE_SCALAR && k->len == klen && memcmp(k->str, key, klen) == 0)
            return n->items[2 * i + 1];
    }
    return NULL;
}

const char *vsr__cfg_quote(vsr_pool_t *pool, const char *s, size_t len)
{
    enum { MAX_SHOWN = 64 };
    char tmp[MAX_SHOWN * 4 + 8];
    size_t o = 0;
    tmp[o++] = '"';
    for (size_t i = 0; i < len && i < MAX_SHOWN; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') {
            tmp[o++] = '\\';
            tmp[o++] = (char)c;
        } else if (c < 0x20 || c == 0x7f) {
            o += (size_t)snprintf(tmp + o, sizeof(tmp) - o, "\\x%02x", c);
        } else {
            tmp[o++] = (char)c;
        }
    }
    if (len > MAX_SHOWN) {
        memcpy(tmp + o, "...", 3);
        o += 3;
    }
    tmp[o++] = '"';
    return vsr_pool_strndup(pool, tmp, o);
}

/* ---- scalar resolution (YAML 1.2 core schema) ------------------------------ */

static int all_in(const char *s, size_t len, const char *set)
{
    if (len == 0)
        return 0;
    for (size_t i = 0; i < len; i++)
        if (s[i] == '\0' || strchr(set, s[i]) == NULL)
            return 0;
    return 1;
}

static int text_is(const char *s, size_t len, const char *const *words)
{
    for (; *words; words++)
        if (strlen(*words) == len && memcmp(*words, s, len) == 0)
            return 1;
    return 0;
}

/* [-+]?[0-9]+ | 0o[0-7]+ | 0x[0-9a-fA-F]+ → value (ok = fits in int64). */
static int parse_int(const char *s, size_t len, int64_t *out, int *ok)
{
    int neg = 0;
    unsigned base = 10;
    const char *digits = "0123456789";
    if (len >= 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'o')) {
        base = s[1] == 'x' ? 16 : 8;
        digits = base == 16 ? "0123456789abcdefABCDEF" : "01234567";
        s += 2;
        len -= 2;
    } else if (len >= 1 && (s[0] == '-' || s[0] == '+')) {
        neg = s[0] == '-';
        s++;
        len--;
    }
    if (!all_in(s, len, digits))
        return 0;
    uint64_t v = 0, limit = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
    *ok = 1;
    for (size_t i = 0; i < len; i++) {
        unsigned dg = s[i] <= '9' ? (unsigned)(s[i] - '0') : (unsigned)((s[i] | 0x20) - 'a' + 10);
        if (v > (limit - dg) / base) {
            *ok = 0;
            v = 0;
            break;
        }
        v = v * base + dg;
    }
    *out = !*ok ? 0 : neg ? (int64_t)(0 - v) : (int64_t)v;
    return 1;
}

/* [-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)? | [-+]?\.inf | \.nan */
static int is_float(const char *s, size_t len)
{
    static const char *const special[] = {".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF", "-.inf", "-.Inf",
                                          "-.INF", ".nan", ".NaN", ".NAN", NULL};
    if (text_is(s, len, special))
        return 1;
    size_t i = 0, int_digits = 0, frac_digits = 0;
    if (i < len && (s[i] == '-' || s[i] == '+'))
        i++;
    while (i < len && s[i] >= '0' && s[i] <= '9')
        i++, int_digits++;
    if (i < len && s[i] == '.') {
        i++;
        while (i < len && s[i] >= '0' && s[i] <= '9')
            i++, frac_digits++;
    }
    if (int_digits + frac_digits == 0)
        return 0;
    if (i < len && (s[i] == 'e' || s[i] == 'E')) {
        i++;
        if (i < len && (s[i] == '-' || s[i] == '+'))
            i++;
        size_t exp_digits = 0;
        while (i < len && s[i] >= '0' && s[i] <= '9')
            i++, exp_digits++;
        if (exp_digits == 0)
            return 0;
    }
    return i == len;
}

static cfg_scalar_t resolve_plain(cfg_node_t *n)
{
    static const char *const nulls[] = {"", "~", "null", "Null", "NULL", NULL};
    static const char *const trues[] = {"true", "True", "TRUE", NULL};
    static const char *const falses[] = {"false", "False", "FALSE", NULL};
    if (text_is(n->str, n->len, nulls))
        return CFG_NULL;
    if (text_is(n->str, n->len, trues) || text_is(n->str, n->len, falses))
        return CFG_BOOL;
    if (parse_int(n->str, n->len, &n->ival, &n->ival_ok))
        return CFG_INT;
    if (is_float(n->str, n->len))
        return CFG_FLOAT;
    return CFG_STR;
}

cfg_scalar_t vsr__cfg_plain_type(const char *s, size_t len)
{
    cfg_node_t n;
    memset(&n, 0, sizeof(n));
    n.str = s;
    n.len = len;
    return resolve_plain(&n);
}

/* Applies an explicit tag to a scalar: 0, -1 (tag unsupported) or -2 (the
 * text is not a value of the tagged type). */
static int apply_scalar_tag(cfg_node_t *n, const char *tag)
{
    if (strcmp(tag, "!") == 0 || strcmp(tag, TAG_PREFIX "str") == 0) {
        n->type = CFG_STR;
        return 0;
    }
    cfg_scalar_t want;
    if (strcmp(tag, TAG_PREFIX "int") == 0)
        want = CFG_INT;
    else if (strcmp(tag, TAG_PREFIX "float") == 0)
        want = CFG_FLOAT;
    else if (strcmp(tag, TAG_PREFIX "bool") == 0)
        want = CFG_BOOL;
    else if (strcmp(tag, TAG_PREFIX "null") == 0)
        want = CFG_NULL;
    else {
        n->type = CFG_STR;
        return -1;
    }
    cfg_scalar_t got = resolve_plain(n);
    if (want == CFG_FLOAT && got == CFG_INT)
        got = CFG_FLOAT;
    /* on a mismatch keep what the text is, so the tag error stands alone */
    n->type = got;
    return got == want ? 0 : -2;
}

/* "!!int" for the standard tags, the tag as written otherwise. */
static const char *tag_name(builder_t *b, const char *tag)
{
    size_t plen = strlen(TAG_PREFIX);
    if (strncmp(tag, TAG_PREFIX, plen) == 0) {
        size_t rest = strlen(tag + plen);
        char *s = vsr_pool_alloc(b->pool, rest + 3);
        memcpy(s, "!!", 2);
        memcpy(s + 2, tag + plen, rest + 1);
        tag = s;
    }
    return vsr__cfg_quote(b->pool, tag, strlen(tag));
}

/* ---- building --------------------------------------------------------------- */

static uint64_t sat_add(uint64_t a, uint64_t b)
{
    return a + b > WEIGHT_CAP ? WEIGHT_CAP : a + b;
}

static cfg_node_t *new_node(builder_t *b, cfg_node_kind_t kind, yaml_mark_t mark)
{
    cfg_node_t *n = vsr_pool_alloc(b->pool, sizeof(*n));
    memset(n, 0, sizeof(*n));
    n->kind = kind;
    n->line = (uint32_t)mark.line + 1;
    n->col = (uint32_t)mark.column + 1;
    n->weight = 1;
    n->str = "";
    return n;
}

static void register_anchor(builder_t *b, const char *name, cfg_node_t *node)
{
    if (name == NULL)
        return;
    if (b->n_anchors == b->cap_anchors) {
        b->cap_anchors = b->cap_anchors ? 2 * b->cap_anchors : 8;
        b->anchors = vsr_realloc(b->anchors, b->cap_anchors * sizeof(*b->anchors));
    }
    b->anchors[b->n_anchors].name = name;
    b->anchors[b->n_anchors].node = node;
    b->n_anchors++;
}

static cfg_node_t *find_anchor(builder_t *b, const char *name)
{
    /* newest first: YAML lets a later anchor reuse a name */
    for (size_t i = b->n_anchors; i-- > 0;)
        if (strcmp(b->anchors[i].name, name) == 0)
            return b->anchors[i].node;
    return NULL;
}

static void add_child(builder_t *b, cfg_node_t *n)
{
    if (b->depth == 0) {
        if (b->root == NULL)
            b->root = n;
        return;
    }
    frame_t *f = &b->stack[b->depth - 1];
    if (f->n == f->cap) {
        f->cap = f->cap ? 2 * f->cap : 8;
        f->items = vsr_realloc(f->items, f->cap * sizeof(*f->items));
    }
    f->items[f->n++] = n;
    f->node->weight = sat_add(f->node->weight, n->weight);
}

static char *dup_anchor(builder_t *b, const yaml_char_t *anchor)
{
    return anchor ? vsr_pool_strndup(b->pool, (const char *)anchor, strlen((const char *)anchor)) : NULL;
}

static void push(builder_t *b, cfg_node_t *n, const yaml_char_t *anchor)
{
    if (b->depth == b->cap) {
        b->cap = b->cap ? 2 * b->cap : 16;
        b->stack = vsr_realloc(b->stack, b->cap * sizeof(*b->stack));
    }
    frame_t *f = &b->stack[b->depth++];
    memset(f, 0, sizeof(*f));
    f->node = n;
    f->anchor = dup_anchor(b, anchor);
}

typedef struct {
    const cfg_node_t *key;
    size_t index;
} keyref_t;

static int keyref_cmp(const void *pa, const void *pb)
{
    const keyref_t *a = pa, *b = pb;
    if (a->key->len != b->key->len)
        return a->key->len < b->key->len ? -1 : 1;
    int c = memcmp(a->key->str, b->key->str, a->key->len);
    if (c != 0)
        return c;
    return a->index < b->index ? -1 : a->index > b->index;
}

/* Sorting instead of pairwise comparison keeps a huge mapping O(n log n). */
static void check_duplicate_keys(builder_t *b, const cfg_node_t *map)
{
    if (map->n == 0)
        return;
    keyref_t *refs = vsr_malloc(map->n * sizeof(*refs));
    size_t n = 0;
    for (size_t i = 0; i < map->n; i++)
        if (map->items[2 * i]->kind == CFG_NODE_SCALAR) {
            const cfg_node_t *k = map->items[2 * i];
            /* no key of the schema comes near; the canonical form's JSON key
             * (escapes added) must stay under YAML's 1024-character limit
             * on an implicit key, or it would not parse back */
            if (k->len > CFG_MAX_KEY_BYTES)
                vsr__cfg_error(b->dg, k->line, k->col, "a key longer than %d bytes", CFG_MAX_KEY_BYTES);
            refs[n++] = (keyref_t){k, i};
        }
    qsort(refs, n, sizeof(*refs), keyref_cmp);
    for (size_t i = 1; i < n; i++) {
        const cfg_node_t *first = refs[i - 1].key, *k = refs[i].key;
        if (k->len != first->len || memcmp(k->str, first->str, k->len) != 0)
            continue;
        /* report against the first occurrence, not the previous duplicate */
        size_t j = i - 1;
        while (j > 0 && refs[j - 1].key->len == k->len && memcmp(refs[j - 1].key->str, k->str, k->len) == 0)
            j--;
        first = refs[j].key;
        vsr__cfg_error(b->dg, k->line, k->col, "duplicate key %s (first at %u:%u)",
                       vsr__cfg_quote(b->pool, k->str, k->len), first->line, first->col);
    }
    vsr_free(refs);
}

static void pop(builder_t *b)
{
    frame_t *f = &b->stack[--b->depth];
    cfg_node_t *n = f->node;
    size_t count = f->n;
    if (n->kind == CFG_NODE_MAP) {
        /* libyaml guarantees key/value pairs; keep the invariant explicit */
        VSR_BUG_ON(count % 2 != 0);
        n->n = count / 2;
    } else {
        n->n = count;
    }
    if (count > 0) {
        n->items = vsr_pool_alloc(b->pool, count * sizeof(*n->items));
        memcpy(n->items, f->items, count * sizeof(*n->items));
    }
    vsr_free(f->items);
    if (n->kind == CFG_NODE_MAP)
        check_duplicate_keys(b, n);
    register_anchor(b, f->anchor, n);
    add_child(b, n);
}

static void error_at(builder_t *b, yaml_mark_t m, const char *fmt, const char *arg)
{
    vsr__cfg_error(b->dg, (uint32_t)m.line + 1, (uint32_t)m.column + 1, fmt, arg);
}

static void on_scalar(builder_t *b, const yaml_event_t *ev)
{
    cfg_node_t *n = new_node(b, CFG_NODE_SCALAR, ev->start_mark);
    n->str = vsr_pool_strndup(b->pool, (const char *)ev->data.scalar.value, ev->data.scalar.length);
    n->len = ev->data.scalar.length;
    n->quoted = ev->data.scalar.style != YAML_PLAIN_SCALAR_STYLE;
    const char *tag = (const char *)ev->data.scalar.tag;
    if (tag != NULL) {
        int rc = apply_scalar_tag(n, tag);
        if (rc == -1)
            vsr__cfg_error(b->dg, n->line, n->col, "unsupported tag %s", tag_name(b, tag));
        else if (rc == -2)
            vsr__cfg_error(b->dg, n->line, n->col, "%s is not a valid %s value",
                           vsr__cfg_quote(b->pool, n->str, n->len), tag_name(b, tag));
    } else {
        n->type = n->quoted ? CFG_STR : resolve_plain(n);
    }
    register_anchor(b, dup_anchor(b, ev->data.scalar.anchor), n);
    add_child(b, n);
}

static void on_collection_start(builder_t *b, const yaml_event_t *ev, cfg_node_kind_t kind)
{
    cfg_node_t *n = new_node(b, kind, ev->start_mark);
    const yaml_char_t *tag = kind == CFG_NODE_MAP ? ev->data.mapping_start.tag : ev->data.sequence_start.tag;
    const yaml_char_t *anchor = kind == CFG_NODE_MAP ? ev->data.mapping_start.anchor : ev->data.sequence_start.anchor;
    const char *want = kind == CFG_NODE_MAP ? TAG_PREFIX "map" : TAG_PREFIX "seq";
    if (tag != NULL && strcmp((const char *)tag, "!") != 0 && strcmp((const char *)tag, want) != 0)
        vsr__cfg_error(b->dg, n->line, n->col, "unsupported tag %s", tag_name(b, (const char *)tag));
    push(b, n, anchor);
}

/* 0 to go on, -1 on a fatal problem (already reported). */
static int on_alias(builder_t *b, const yaml_event_t *ev)
{
    const char *name = (const char *)ev->data.alias.anchor;
    cfg_node_t *target = find_anchor(b, name);
    if (target == NULL) {
        /* anchors register when their node completes, so an alias inside
         * its own anchored node lands here: the tree never has a cycle */
        int open = 0;
        for (size_t i = 0; i < b->depth; i++)
            if (b->stack[i].anchor != NULL && strcmp(b->stack[i].anchor, name) == 0)
                open = 1;
        error_at(b, ev->start_mark, open ? "alias %s refers to a node that contains it" : "undefined alias %s",
                 vsr__cfg_quote(b->pool, name, strlen(name)));
        cfg_node_t *n = new_node(b, CFG_NODE_SCALAR, ev->start_mark);
        n->type = CFG_NULL;
        add_child(b, n);
        return 0;
    }
    b->alias_expansion = sat_add(b->alias_expansion, target->weight);
    if (b->alias_expansion > CFG_ALIAS_BUDGET) {
        vsr__cfg_error(b->dg, (uint32_t)ev->start_mark.line + 1, (uint32_t)ev->start_mark.column + 1,
                       "aliases expand to more than %u nodes", CFG_ALIAS_BUDGET);
        return -1;
    }
    add_child(b, target);
    return 0;
}

/* Where libyaml's error is, 1-based: the reader reports a byte offset, the
 * scanner and parser a mark. */
static void problem_position(const yaml_parser_t *p, const char *data, size_t len, uint32_t *line, uint32_t *col)
{
    if (p->error == YAML_READER_ERROR) {
        *line = 1, *col = 1;
        for (size_t i = 0; i < p->problem_offset && i < len; i++) {
            if (data[i] == '\n')
                ++*line, *col = 1;
            else
                ++*col;
        }
        return;
    }
    *line = (uint32_t)p->problem_mark.line + 1;
    *col = (uint32_t)p->problem_mark.column + 1;
}

static void report_parser_error(builder_t *b, const yaml_parser_t *p, const char *data, size_t len)
{
    const char *problem = p->problem ? p->problem : "invalid YAML";
    if (p->error == YAML_MEMORY_ERROR) {
        vsr__cfg_error(b->dg, 1, 1, "out of memory while parsing YAML");
        return;
    }
    uint32_t line, col;
    problem_position(p, data, len, &line, &col);
    if (p->error == YAML_READER_ERROR) {
        if (p->problem_value != -1)
            vsr__cfg_error(b->dg, line, col, "%s (byte 0x%02x)", problem, (unsigned)p->problem_value & 0xffu);
        else
            vsr__cfg_error(b->dg, line, col, "%s", problem);
        return;
    }
    if (p->context != NULL)
        vsr__cfg_error(b->dg, line, col, "%s (%s at %u:%u)", problem, p->context, (unsigned)p->context_mark.line + 1,
                       (unsigned)p->context_mark.column + 1);
    else
        vsr__cfg_error(b->dg, line, col, "%s", problem);
}

static atomic_ulong parse_runs;

unsigned long vsr_config_parse_runs(void)
{
    return atomic_load(&parse_runs);
}

int vsr__cfg_parse_yaml(vsr_pool_t *pool, cfg_diag_t *dg, const char *data, size_t len, cfg_node_t **root)
{
    atomic_fetch_add(&parse_runs, 1);
    builder_t b;
    memset(&b, 0, sizeof(b));
    b.pool = pool;
    b.dg = dg;
    *root = NULL;

    yaml_parser_t parser;
    if (!yaml_parser_initialize(&parser)) {
        vsr__cfg_error(dg, 1, 1, "out of memory while parsing YAML");
        return VSR_ERR_INVALID;
    }
    yaml_parser_set_input_string(&parser, (const unsigned char *)data, len);

    int rc = VSR_OK, done = 0;
    while (!done) {
        yaml_event_t ev;
        if (!yaml_parser_parse(&parser, &ev)) {
            if (b.first_ended && parser.error != YAML_MEMORY_ERROR) {
                /* past the first document: not read, as by the reference */
                problem_position(&parser, data, len, &dg->ignored_line, &dg->ignored_col);
                break;
            }
            report_parser_error(&b, &parser, data, len);
            rc = VSR_ERR_INVALID;
            break;
        }
        switch (ev.type) {
        case YAML_STREAM_END_EVENT:
            done = 1;
            break;
        case YAML_DOCUMENT_START_EVENT:
            if (b.first_ended) {
                dg->ignored_line = (uint32_t)ev.start_mark.line + 1;
                dg->ignored_col = (uint32_t)ev.start_mark.column + 1;
                done = 1;
            }
            break;
        case YAML_DOCUMENT_END_EVENT:
            b.first_ended = 1;
            break;
        case YAML_SCALAR_EVENT:
            on_scalar(&b, &ev);
            break;
        case YAML_SEQUENCE_START_EVENT:
        case YAML_MAPPING_START_EVENT:
            if (b.depth >= CFG_MAX_DEPTH) {
                vsr__cfg_error(dg, (uint32_t)ev.start_mark.line + 1, (uint32_t)ev.start_mark.column + 1,
                               "nesting deeper than %u levels", CFG_MAX_DEPTH);
                rc = VSR_ERR_INVALID;
                done = 1;
                break;
            }
            on_collection_start(&b, &ev, ev.type == YAML_MAPPING_START_EVENT ? CFG_NODE_MAP : CFG_NODE_SEQ);
            break;
        case YAML_SEQUENCE_END_EVENT:
        case YAML_MAPPING_END_EVENT:
            pop(&b);
            break;
        case YAML_ALIAS_EVENT:
            if (on_alias(&b, &ev) != 0) {
                rc = VSR_ERR_INVALID;
                done = 1;
            }
            break;
        default: /* stream start, no-op */
            break;
        }
        yaml_event_delete(&ev);
    }
    yaml_parser_delete(&parser);

    while (b.depth > 0)
        vsr_free(b.stack[--b.depth].items);
    vsr_free(b.stack);
    vsr_free(b.anchors);
    if (rc == VSR_OK)
        *root = b.root;
    return rc;
}
