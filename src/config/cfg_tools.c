/*
 * cfg_tools.c — global.integrations.tools, the tools database it names, the
 * tools plugin's semantic_selection and the tool_selection plugin (ref §1.13,
 * §2).
 *
 * The database is a JSON array read with the project's JSON parser (the
 * tokens are the parser's; this file only checks their shape), bounded by
 * VSR_TOOLS_DB_MAX_BYTES and VSR_TOOLS_DB_MAX_TOOLS; every problem is
 * reported as "FILE:LINE:COL: message" at the value that is wrong.  Defaults
 * that a plugin leaves unset are taken from global.integrations.tools once
 * the whole document is decoded (vsr__cfg_tools_resolve).
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "config/cfg_internal.h"
#include "json/json.h"

#define TOOLS_DEFAULT_TOP_K 3
#define TOOLS_DEFAULT_THRESHOLD 0.2
#define TOOLS_MAX_NAME 64

/* ---- the database ------------------------------------------------------------ */

typedef struct {
    const char *name;
    const char *data;
    size_t len;
    vsr_buf_t *err;
    unsigned n_errors;
} db_ctx_t;

static void db_error(db_ctx_t *c, size_t off, const char *fmt, ...) VSR_PRINTF(3, 4);
static void db_error(db_ctx_t *c, size_t off, const char *fmt, ...)
{
    c->n_errors++;
    if (c->err == NULL || c->n_errors > CFG_MAX_ERRORS)
        return;
    uint32_t line = 1, col = 1;
    for (size_t i = 0; i < off && i < c->len; i++) {
        if (c->data[i] == '\n') {
            line++;
            col = 1;
        } else if (((unsigned char)c->data[i] & 0xC0) != 0x80) {
            col++;
        }
    }
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    vsr_buf_printf(c->err, "%s:%u:%u: %s\n", c->name, line, col, msg);
}

/* The string at obj.key: 1 found (in *out), 0 absent, -1 not a string (reported). */
static int db_string(db_ctx_t *c, const vsr_json_t *j, uint32_t obj, const char *key, const char *what,
                     vsr_pool_t *pool, vsr_slice_t *out)
{
    uint32_t v;
    if (vsr_json_object_get(j, obj, key, &v) != VSR_OK)
        return 0;
    if (vsr_json_type(j, v) != VSR_JSON_STRING || vsr_json_string(j, v, pool, out) != VSR_OK) {
        db_error(c, j->toks[v].start, "%s must be a string", what);
        return -1;
    }
    return 1;
}

static int name_ok(vsr_slice_t n)
{
    if (n.len == 0 || n.len > TOOLS_MAX_NAME)
        return 0;
    for (size_t i = 0; i < n.len; i++) {
        unsigned char ch = (unsigned char)n.p[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '_' ||
              ch == '-'))
            return 0;
    }
    return 1;
}

static int blank(vsr_slice_t s)
{
    return vsr_slice_trim(s).len == 0;
}

/* One entry (token e) into t; 0 or -1 (reported). */
static int db_entry(db_ctx_t *c, const vsr_json_t *j, uint32_t e, vsr_pool_t *pool, vsr_tool_entry_t *t)
{
    unsigned before = c->n_errors;
    if (vsr_json_type(j, e) != VSR_JSON_OBJECT) {
        db_error(c, j->toks[e].start, "a tools database entry must be an object {\"tool\": {...}, \"description\": ...}");
        return -1;
    }
    uint32_t tool, fn;
    if (vsr_json_object_get(j, e, "tool", &tool) != VSR_OK) {
        db_error(c, j->toks[e].start, "missing \"tool\" (an OpenAI tool definition)");
        return -1;
    }
    if (vsr_json_type(j, tool) != VSR_JSON_OBJECT) {
        db_error(c, j->toks[tool].start, "\"tool\" must be an object {\"type\": \"function\", \"function\": {...}}");
        return -1;
    }
    vsr_slice_t type = VSR_SLICE_NULL, name = VSR_SLICE_NULL, fdesc = VSR_SLICE_NULL, desc = VSR_SLICE_NULL,
                cat = VSR_SLICE_NULL;
    int rt = db_string(c, j, tool, "type", "tool.type", pool, &type);
    if (rt == 0)
        db_error(c, j->toks[tool].start, "missing tool.type (\"function\")");
    else if (rt > 0 && !vsr_slice_eq_cstr(type, "function"))
        db_error(c, j->toks[tool].start, "tool.type must be \"function\"");
    if (vsr_json_object_get(j, tool, "function", &fn) != VSR_OK || vsr_json_type(j, fn) != VSR_JSON_OBJECT) {
        db_error(c, j->toks[tool].start, "tool.function must be an object {\"name\", \"description\", \"parameters\"}");
        return -1;
    }
    int rn = db_string(c, j, fn, "name", "tool.function.name", pool, &name);
    if (rn == 0)
        db_error(c, j->toks[fn].start, "missing tool.function.name");
    else if (rn > 0 && !name_ok(name))
        db_error(c, j->toks[fn].start, "tool.function.name must be 1 to %d letters, digits, '_' or '-'",
                 TOOLS_MAX_NAME);
    db_string(c, j, fn, "description", "tool.function.description", pool, &fdesc);
    uint32_t params;
    if (vsr_json_object_get(j, fn, "parameters", &params) == VSR_OK && vsr_json_type(j, params) != VSR_JSON_OBJECT)
        db_error(c, j->toks[params].start, "tool.function.parameters must be an object (a JSON schema)");
    db_string(c, j, e, "description", "description", pool, &desc);
    db_string(c, j, e, "category", "category", pool, &cat);
    uint32_t tags;
    size_t n_tags = 0;
    if (vsr_json_object_get(j, e, "tags", &tags) == VSR_OK) {
        if (vsr_json_type(j, tags) != VSR_JSON_ARRAY) {
            db_error(c, j->toks[tags].start, "tags must be a list of strings");
        } else {
            n_tags = j->toks[tags].count;
            t->tags.items = n_tags ? vsr_pool_alloc(pool, n_tags * sizeof(char *)) : NULL;
            uint32_t k = tags + 1;
            for (size_t i = 0; i < n_tags; i++, k = j->toks[k].next) {
                vsr_slice_t s;
                if (vsr_json_type(j, k) != VSR_JSON_STRING || vsr_json_string(j, k, pool, &s) != VSR_OK) {
                    db_error(c, j->toks[k].start, "tags must be a list of strings");
                    break;
                }
                t->tags.items[t->tags.n++] = vsr_pool_strndup(pool, s.p, s.len);
            }
        }
    }
    if (blank(desc))
        desc = fdesc;
    if (blank(desc) && rn > 0)
        db_error(c, j->toks[e].start, "tool \"%.*s\" has no description (description or tool.function.description): "
                                      "it is chosen by what its description says", name_ok(name) ? (int)name.len : 1,
                 name_ok(name) ? name.p : "?");
    if (c->n_errors != before)
        return -1;
    t->name = vsr_pool_strndup(pool, name.p, name.len);
    t->category = cat.len ? vsr_pool_strndup(pool, cat.p, cat.len) : NULL;
    t->description = vsr_pool_strndup(pool, desc.p ? desc.p : "", desc.len);
    vsr_buf_t b;
    vsr_buf_init(&b, 0);
    vsr_buf_printf(&b, "%s: ", t->name);
    vsr_buf_append(&b, desc.p, desc.len);
    if (t->category) {
        vsr_buf_append_cstr(&b, " (");
        vsr_buf_append_cstr(&b, t->category);
        vsr_buf_append_cstr(&b, ")");
    }
    for (size_t i = 0; i < t->tags.n; i++) {
        vsr_buf_append_cstr(&b, i ? ", " : " Tags: ");
        vsr_buf_append_cstr(&b, t->tags.items[i]);
    }
    t->text = vsr_pool_strndup(pool, b.data ? b.data : "", b.len);
    vsr_buf_free(&b);
    t->json = vsr_pool_dup_slice(pool, vsr_json_raw(j, tool));
    return 0;
}

static int name_cmp(const void *a, const void *b)
{
    const vsr_tool_entry_t *x = *(const vsr_tool_entry_t *const *)a, *y = *(const vsr_tool_entry_t *const *)b;
    int r = strcmp(x->name, y->name);
    return r ? r : (x < y ? -1 : x > y);
}

int vsr_tools_db_parse(const char *name, const char *data, size_t len, vsr_pool_t *pool, vsr_tools_db_t *db,
                       vsr_buf_t *err)
{
    memset(db, 0, sizeof(*db));
    db_ctx_t c = {name ? name : "<tools_db>", data ? data : "", len, err, 0};
    if (len > VSR_TOOLS_DB_MAX_BYTES) {
        db_error(&c, 0, "the tools database is larger than %u bytes", (unsigned)VSR_TOOLS_DB_MAX_BYTES);
        return VSR_ERR_INVALID;
    }
    vsr_json_t j;
    vsr_json_limits_t lim = {.max_depth = 64, .max_tokens = 1u << 20};
    int rc = vsr_json_parse(&j, c.data, len, &lim);
    if (rc != VSR_OK) {
        db_error(&c, j.err_offset, "not valid JSON: %s", j.err_msg ? j.err_msg : "malformed");
        vsr_json_free(&j);
        return VSR_ERR_INVALID;
    }
    uint32_t dup;
    if (vsr_json_find_duplicate_key(&j, &dup)) {
        vsr_slice_t k = VSR_SLICE_NULL;
        vsr_json_string(&j, dup, pool, &k);
        db_error(&c, j.toks[dup].start, "duplicate key \"%.*s\"", (int)VSR_MIN(k.len, (size_t)64), k.p ? k.p : "");
        vsr_json_free(&j);
        return VSR_ERR_INVALID;
    }
    if (vsr_json_type(&j, 0) != VSR_JSON_ARRAY) {
        db_error(&c, j.toks[0].start, "a tools database is a JSON array of {\"tool\": {...}, \"description\": ...}");
        vsr_json_free(&j);
        return VSR_ERR_INVALID;
    }
    size_t n = j.toks[0].count;
    if (n > VSR_TOOLS_DB_MAX_TOOLS) {
        db_error(&c, j.toks[0].start, "more than %u tools", (unsigned)VSR_TOOLS_DB_MAX_TOOLS);
        vsr_json_free(&j);
        return VSR_ERR_INVALID;
    }
    vsr_tool_entry_t *tools = n ? vsr_pool_alloc(pool, n * sizeof(*tools)) : NULL;
    uint32_t *at = n ? vsr_pool_alloc(pool, n * sizeof(*at)) : NULL;
    if (n)
        memset(tools, 0, n * sizeof(*tools));
    uint32_t e = 1;
    for (size_t i = 0; i < n; i++, e = j.toks[e].next) {
        at[i] = j.toks[e].start;
        db_entry(&c, &j, e, pool, &tools[i]);
    }
    if (c.n_errors == 0 && n > 1) { /* names are unique */
        const vsr_tool_entry_t **order = vsr_malloc(n * sizeof(*order));
        for (size_t i = 0; i < n; i++)
            order[i] = &tools[i];
        qsort(order, n, sizeof(*order), name_cmp);
        for (size_t i = 1; i < n; i++)
            if (strcmp(order[i]->name, order[i - 1]->name) == 0)
                db_error(&c, at[order[i] - tools], "duplicate tool name \"%s\" (first at entry %zu)", order[i]->name,
                         (size_t)(order[i - 1] - tools) + 1);
        vsr_free(order);
    }
    vsr_json_free(&j);
    if (c.n_errors)
        return VSR_ERR_INVALID;
    db->tools = tools;
    db->n = n;
    return VSR_OK;
}

/* ---- global.integrations.tools ------------------------------------------------- */

#define TI(m) offsetof(vsr_tools_integration_conf_t, m)

static const cfg_field_t integration_fields[] = {
    {.key = "enabled", .decode = vsr__cfg_bool, .offset = TI(enabled)},
    {.key = "top_k", .decode = vsr__cfg_uint, .offset = TI(top_k), .size = sizeof(uint32_t), .min = 1,
     .max = VSR_TOOLS_MAX_SELECT},
    {.key = "similarity_threshold", .decode = vsr__cfg_double, .offset = TI(similarity_threshold), .dmin = 0,
     .dmax = 1},
    {.key = "tools_db_path", .decode = vsr__cfg_string, .flags = CFG_NULL_OK, .offset = TI(tools_db_path)},
    {.key = "fallback_to_empty", .decode = vsr__cfg_bool, .offset = TI(fallback_to_empty)},
    {.key = "advanced_filtering", .inert = "vsr selects tools by similarity to the routing text (top_k, "
                                           "similarity_threshold); category, lexical and history filters are not applied"},
    {.key = "model_type", .decode = vsr__cfg_accept_text,
     .inert = "an earlier version's key: vsr embeds tools with the runtime's embedding model"},
    {.key = "target_dim", .decode = vsr__cfg_uint, .size = 8, .max = 65536,
     .inert = "an earlier version's key: vsr embeds tools with the runtime's embedding model"},
};

static void init_integration(cfg_decoder_t *d, void *obj)
{
    VSR_UNUSED(d);
    vsr_tools_integration_conf_t *t = obj;
    t->present = 1;
    t->enabled = 1;
    t->top_k = TOOLS_DEFAULT_TOP_K;
    t->similarity_threshold = TOOLS_DEFAULT_THRESHOLD;
}

static size_t dir_len(const char *file)
{
    const char *slash = file ? strrchr(file, '/') : NULL;
    return slash ? (size_t)(slash - file) + 1 : 0;
}

/* Reads and checks the database named at `val`. */
static void load_db(cfg_decoder_t *d, const cfg_node_t *val, vsr_tools_integration_conf_t *t)
{
    vsr_buf_t path;
    vsr_buf_init(&path, 0);
    if (t->tools_db_path[0] != '/')
        vsr_buf_append(&path, d->dg->file, dir_len(d->dg->file));
    vsr_buf_append_cstr(&path, t->tools_db_path);
    vsr_buf_append(&path, "", 1);
    const char *file = path.data;
    char *data = NULL;
    size_t len = 0;
    struct stat sb;
    FILE *fp = NULL;
    if (stat(file, &sb) == 0 && !S_ISREG(sb.st_mode)) {
        vsr__cfg_node_error(d, val, "tools_db_path: %s is not a regular file", vsr__cfg_quote(d->pool, file, strlen(file)));
        goto out;
    }
    fp = fopen(file, "rb");
    if (fp == NULL && errno == ENOENT) { /* as the reference: a warning, and no tools database */
        t->db_missing = 1;
        vsr__cfg_warn(d, "%s:%u:%u: tools_db_path: %s does not exist: running without the tools database (no tools "
                         "to add or select)", d->dg->file, val->line, val->col,
                      vsr__cfg_quote(d->pool, t->tools_db_path, strlen(t->tools_db_path))); /* as written */
        goto out;
    }
    if (fp == NULL) {
        vsr__cfg_node_error(d, val, "tools_db_path: cannot open %s: %s", vsr__cfg_quote(d->pool, file, strlen(file)),
                            strerror(errno));
        goto out;
    }
    data = vsr_malloc(VSR_TOOLS_DB_MAX_BYTES + 1);
    len = fread(data, 1, VSR_TOOLS_DB_MAX_BYTES + 1, fp);
    if (ferror(fp)) {
        vsr__cfg_node_error(d, val, "tools_db_path: cannot read %s", vsr__cfg_quote(d->pool, file, strlen(file)));
        goto out;
    }
    if (len > VSR_TOOLS_DB_MAX_BYTES) {
        vsr__cfg_node_error(d, val, "tools_db_path: %s is larger than %u bytes",
                            vsr__cfg_quote(d->pool, file, strlen(file)), (unsigned)VSR_TOOLS_DB_MAX_BYTES);
        goto out;
    }
    vsr_buf_t err;
    vsr_buf_init(&err, 0);
    if (vsr_tools_db_parse(file, data, len, d->pool, &t->db, &err) != VSR_OK) {
        /* the database's own FILE:LINE:COL lines, under the key that names it */
        vsr__cfg_node_error(d, val, "tools_db_path: %s is not a valid tools database:\n%.*s",
                            vsr__cfg_quote(d->pool, file, strlen(file)),
                            (int)(err.len && err.data[err.len - 1] == '\n' ? err.len - 1 : err.len),
                            err.data ? err.data : "");
    }
    vsr_buf_free(&err);
out:
    if (fp)
        fclose(fp);
    vsr_free(data);
    vsr_buf_free(&path);
}

static void finish_integration(cfg_decoder_t *d, const cfg_node_t *map, void *obj, const cfg_node_t *const *seen,
                               size_t index)
{
    VSR_UNUSED(map);
    VSR_UNUSED(index);
    vsr_tools_integration_conf_t *t = obj;
    const cfg_node_t *pathv = seen[3];
    if (t->tools_db_path && t->enabled && pathv)
        load_db(d, pathv, t);
}

const cfg_spec_t vsr__cfg_tools_integration_spec = {
    .size = sizeof(vsr_tools_integration_conf_t),
    .fields = integration_fields,
    .n_fields = VSR_ARRAY_LEN(integration_fields),
    .init = init_integration,
    .finish = finish_integration,
};

/* ---- tools.semantic_selection ------------------------------------------------------ */

#define TS(m) offsetof(vsr_plugin_tools_conf_t, m)

static const cfg_field_t semantic_fields[] = {
    {.key = "enabled", .decode = vsr__cfg_bool, .offset = TS(semantic)},
    {.key = "top_k", .decode = vsr__cfg_uint, .flags = CFG_HAS, .offset = TS(top_k), .size = sizeof(uint32_t),
     .min = 1, .max = VSR_TOOLS_MAX_SELECT, .has_offset = TS(has_top_k)},
    {.key = "similarity_threshold", .decode = vsr__cfg_double, .flags = CFG_HAS, .offset = TS(similarity_threshold),
     .dmin = 0, .dmax = 1, .has_offset = TS(has_similarity_threshold)},
};

static void init_semantic(cfg_decoder_t *d, void *obj)
{
    VSR_UNUSED(d);
    ((vsr_plugin_tools_conf_t *)obj)->semantic = 1; /* a block means on, unless it says enabled: false */
}

static const cfg_spec_t semantic_spec = {
    .size = sizeof(vsr_plugin_tools_conf_t),
    .fields = semantic_fields,
    .n_fields = VSR_ARRAY_LEN(semantic_fields),
    .init = init_semantic,
};

int vsr__cfg_tools_semantic(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj)
{
    VSR_UNUSED(f);
    vsr_plugin_tools_conf_t *t = &((vsr_plugin_conf_t *)obj)->u.tools;
    vsr__cfg_mark(d, t, val);
    if (val->kind == CFG_NODE_SCALAR && val->type == CFG_BOOL) {
        cfg_field_t b = {.key = "semantic_selection", .offset = 0};
        return vsr__cfg_bool(d, &b, val, &t->semantic);
    }
    if (val->kind != CFG_NODE_MAP) {
        vsr__cfg_node_error(d, val, "semantic_selection: expected true, false or a mapping {enabled, top_k, "
                                    "similarity_threshold}, got %s", vsr__cfg_node_what(val));
        return -1;
    }
    return vsr__cfg_decode_object(d, &semantic_spec, val, t, 0);
}

/* ---- tool_selection ------------------------------------------------------------- */

#define TSEL(m) offsetof(vsr_plugin_conf_t, u.tool_selection.m)

static const char *const toolsel_modes[] = {"add", "filter", NULL};
#define TOOLSEL_DEFAULT_RELEVANCE 0.25 /* mode filter's relevance_threshold (ref: req_tool_selection_plugin.go) */

/* advanced_filtering (ref: tools/relevance.go): the weighted re-ranking of mode add */
static int decode_retrieval_strategy(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj)
{
    VSR_UNUSED(obj);
    const char *s = vsr__cfg_get_string(d, f, val);
    if (s == NULL)
        return -1;
    if (strcmp(s, "weighted") == 0 || s[0] == '\0')
        return 0;
    if (strcmp(s, "hybrid_history") == 0)
        vsr__cfg_node_error(d, val, "tool_selection: advanced_filtering.retrieval_strategy hybrid_history is not "
                                    "supported yet (use weighted)");
    else
        vsr__cfg_node_error(d, val, "retrieval_strategy must be \"weighted\" or \"hybrid_history\", got %s",
                            vsr__cfg_quote(d->pool, s, val->len));
    return -1;
}

#define TW(k, m) {.key = (k), .decode = vsr__cfg_double, .offset = TSEL(m), .dmin = 0, .dmax = 1000}
static const cfg_field_t weights_fields[] = {
    TW("embed", w_embed), TW("lexical", w_lexical), TW("tag", w_tag), TW("name", w_name), TW("category", w_category),
};
static void init_weights(cfg_decoder_t *d, void *obj)
{
    VSR_UNUSED(d);
    vsr_plugin_tool_selection_conf_t *t = &((vsr_plugin_conf_t *)obj)->u.tool_selection;
    t->w_embed = 0; /* a block given: the unset weights are 0 (the reference's) */
}
static const cfg_spec_t weights_spec = {.size = sizeof(vsr_plugin_conf_t), .fields = weights_fields,
                                        .n_fields = VSR_ARRAY_LEN(weights_fields), .init = init_weights};

static const cfg_field_t advanced_fields[] = {
    {.key = "enabled", .decode = vsr__cfg_bool, .offset = TSEL(advanced)},
    {.key = "retrieval_strategy", .decode = decode_retrieval_strategy},
    {.key = "candidate_pool_size", .decode = vsr__cfg_uint, .offset = TSEL(candidate_pool_size),
     .size = sizeof(uint32_t), .min = 0, .max = VSR_TOOLS_DB_MAX_TOOLS},
    {.key = "min_lexical_overlap", .decode = vsr__cfg_uint, .offset = TSEL(min_lexical_overlap),
     .size = sizeof(uint32_t), .min = 0, .max = 1024},
    {.key = "min_combined_score", .decode = vsr__cfg_double, .offset = TSEL(min_combined_score), .dmin = 0,
     .dmax = 1},
    {.key = "weights", .decode = vsr__cfg_object, .flags = CFG_NULL_OK, .spec = &weights_spec},
    {.key = "use_category_filter", .decode = vsr__cfg_bool, .offset = TSEL(use_category_filter)},
    {.key = "category_confidence_threshold", .decode = vsr__cfg_double, .offset = TSEL(category_confidence_threshold),
     .dmin = 0, .dmax = 1},
    {.key = "allow_tools", .decode = vsr__cfg_strlist, .flags = CFG_NULL_OK, .offset = TSEL(af_allow)},
    {.key = "block_tools", .decode = vsr__cfg_strlist, .flags = CFG_NULL_OK, .offset = TSEL(af_block)},
    {.key = "hybrid_history", .flags = CFG_UNIMPLEMENTED},
};
static void finish_advanced(cfg_decoder_t *d, const cfg_node_t *map, void *obj, const cfg_node_t *const *seen,
                            size_t index)
{
    VSR_UNUSED(d);
    VSR_UNUSED(map);
    VSR_UNUSED(seen);
    VSR_UNUSED(index);
    vsr_plugin_tool_selection_conf_t *t = &((vsr_plugin_conf_t *)obj)->u.tool_selection;
    if (t->w_embed == 0 && t->w_lexical == 0 && t->w_tag == 0 && t->w_name == 0 && t->w_category == 0)
        t->w_embed = 1; /* none set (or all 0): similarity alone, as the reference */
}
static const cfg_spec_t advanced_spec = {.size = sizeof(vsr_plugin_conf_t), .fields = advanced_fields,
                                         .n_fields = VSR_ARRAY_LEN(advanced_fields), .finish = finish_advanced};

static const cfg_field_t tool_selection_fields[] = {
    {.key = "enabled", .decode = vsr__cfg_bool, .offset = offsetof(vsr_plugin_conf_t, enabled)},
    {.key = "mode", .decode = vsr__cfg_choice, .offset = TSEL(mode), .choices = toolsel_modes},
    {.key = "top_k", .decode = vsr__cfg_uint, .flags = CFG_HAS, .offset = TSEL(top_k), .size = sizeof(uint32_t),
     .min = 1, .max = VSR_TOOLS_MAX_SELECT, .has_offset = TSEL(has_top_k)},
    {.key = "similarity_threshold", .decode = vsr__cfg_double, .flags = CFG_HAS,
     .offset = TSEL(similarity_threshold), .dmin = 0, .dmax = 1, .has_offset = TSEL(has_similarity_threshold)},
    {.key = "relevance_threshold", .decode = vsr__cfg_double, .flags = CFG_HAS, .offset = TSEL(relevance_threshold),
     .dmin = 0, .dmax = 1, .has_offset = TSEL(has_relevance_threshold)},
    {.key = "preserve_count", .decode = vsr__cfg_uint, .flags = CFG_HAS, .offset = TSEL(preserve_count),
     .size = sizeof(uint32_t), .min = 0, .max = 1024, .has_offset = TSEL(has_preserve_count)},
    {.key = "advanced_filtering", .decode = vsr__cfg_object, .flags = CFG_NULL_OK, .spec = &advanced_spec},
    /* a database of the plugin's own: the global one (integrations.tools) serves every plugin today */
    {.key = "tools_db_path", .flags = CFG_UNIMPLEMENTED},
    {.key = "fallback_to_empty", .decode = vsr__cfg_bool, .flags = CFG_HAS, .offset = TSEL(fallback_to_empty),
     .has_offset = TSEL(has_fallback_to_empty)},
    {.key = "strategy", .decode = vsr__cfg_accept_text,
     .inert = "vsr has one selection strategy: similarity to the routing text"},
};

static void finish_tool_selection(cfg_decoder_t *d, const cfg_node_t *map, void *obj, const cfg_node_t *const *seen,
                                  size_t index)
{
    VSR_UNUSED(seen);
    VSR_UNUSED(index);
    vsr_plugin_conf_t *p = obj;
    vsr_plugin_tool_selection_conf_t *t = &p->u.tool_selection;
    t->enabled = p->enabled;
    const cfg_node_t *mode = vsr__cfg_map_get(map, "mode");
    if (mode == NULL || (mode->kind == CFG_NODE_SCALAR && mode->type == CFG_STR &&
                         (strcmp(mode->str, "add") == 0 || strcmp(mode->str, "filter") == 0)))
        vsr__cfg_mark(d, t, map); /* checked once the document is decoded (a bad mode is reported already) */
    if (t->mode == VSR_TOOLSEL_ADD) {
        const cfg_node_t *k = vsr__cfg_map_get(map, "relevance_threshold");
        if (k == NULL)
            k = vsr__cfg_map_get(map, "preserve_count");
        if (k)
            vsr__cfg_warn(d, "%s:%u:%u: tool_selection: relevance_threshold and preserve_count apply to mode filter "
                             "only; ignored", d->dg->file, k->line, k->col);
    } else {
        const cfg_node_t *k = vsr__cfg_map_get(map, "top_k");
        if (k == NULL)
            k = vsr__cfg_map_get(map, "similarity_threshold");
        if (k)
            vsr__cfg_warn(d, "%s:%u:%u: tool_selection: top_k and similarity_threshold apply to mode add only; "
                             "ignored", d->dg->file, k->line, k->col);
    }
}

const cfg_spec_t vsr__cfg_tool_selection_spec = {
    .size = sizeof(vsr_plugin_conf_t),
    .fields = tool_selection_fields,
    .n_fields = VSR_ARRAY_LEN(tool_selection_fields),
    .finish = finish_tool_selection,
};

/* ---- defaults from global.integrations.tools, once everything is decoded ---- */

static void resolve_recipe(cfg_decoder_t *d, const vsr_tools_integration_conf_t *g, vsr_recipe_conf_t *r)
{
    uint32_t top_k = g->present ? g->top_k : TOOLS_DEFAULT_TOP_K;
    double thr = g->present ? g->similarity_threshold : TOOLS_DEFAULT_THRESHOLD;
    for (size_t i = 0; i < r->n_decisions; i++) {
        vsr_decision_conf_t *dec = &r->decisions[i];
        for (size_t k = 0; k < dec->n_plugins; k++) {
            vsr_plugin_conf_t *p = &dec->plugins[k];
            if (p->kind == VSR_PLUGIN_TOOLS) {
                vsr_plugin_tools_conf_t *t = &p->u.tools;
                if (!t->has_top_k)
                    t->top_k = top_k;
                if (!t->has_similarity_threshold)
                    t->similarity_threshold = thr;
                t->fallback_to_empty = g->fallback_to_empty;
                const cfg_mark_t *at = vsr__cfg_mark_find(d, t);
                if (t->semantic && t->mode != VSR_TOOLS_FILTERED && at)
                    vsr__cfg_warn(d, "%s:%u:%u: tools: semantic_selection applies to mode filtered only; ignored",
                                  d->dg->file, at->line, at->col);
            } else if (p->kind == VSR_PLUGIN_TOOL_SELECTION) {
                vsr_plugin_tool_selection_conf_t *t = &p->u.tool_selection;
                if (!t->has_top_k)
                    t->top_k = top_k;
                if (!t->has_similarity_threshold)
                    t->similarity_threshold = thr;
                if (!t->has_relevance_threshold)
                    t->relevance_threshold = TOOLSEL_DEFAULT_RELEVANCE; /* the reference's own, not the global */
                if (!t->has_preserve_count)
                    t->preserve_count = 1;
                if (!t->has_fallback_to_empty)
                    t->fallback_to_empty = g->fallback_to_empty;
                const cfg_mark_t *at = vsr__cfg_mark_find(d, t);
                if (t->enabled && t->mode == VSR_TOOLSEL_ADD && g->db.n == 0 && !g->db_missing && at) {
                    const char *why = !g->present || g->tools_db_path == NULL
                                          ? "global.integrations.tools.tools_db_path is not set"
                                      : !g->enabled ? "global.integrations.tools.enabled is false"
                                                    : "the tools database holds no tools";
                    vsr__cfg_mark_error(d, at, "tool_selection: mode add takes its tools from the tools database, "
                                               "and %s", why);
                }
            }
        }
    }
}

void vsr__cfg_tools_resolve(cfg_decoder_t *d, config_box_t *box)
{
    const vsr_tools_integration_conf_t *g = &box->conf.tools;
    resolve_recipe(d, g, &box->routing);
    for (size_t i = 0; i < box->n_recipe_list; i++)
        resolve_recipe(d, g, &box->recipe_list[i]);
}
