/*
 * cfg_signals.c — routing.signals (ref §1.9): the family catalogue, one
 * table per implemented family (keywords, context, structure, conversation,
 * language, role_bindings, embeddings; metadata and events in cfg_events.c), the capability check for the model-backed ones,
 * and the resolution of rule leaves against a recipe's declared signals.
 *
 * Regexes (keyword method regex, structure patterns) are only decoded here:
 * the signals module compiles them and reports what does not compile.
 */
#include <stddef.h>
#include <stdio.h>
#include <errno.h>
#include <sys/stat.h>
#include <stdlib.h>

#include "config/cfg_internal.h"
#include "json/json.h"

#define DEFAULT_LANGUAGE_THRESHOLD 0.3

static const char *quote_str(cfg_decoder_t *d, const char *s)
{
    return vsr__cfg_quote(d->pool, s, strlen(s));
}

typedef struct {
    const char *family; /* YAML key under routing.signals */
    const char *cond;   /* rule leaf `type` */
    int implemented;
    int model_backed;
} family_t;

/* ref §1.9; the newest catalogue's families are all known, so a document
 * using one gets "not supported yet" rather than "unknown" */
static const family_t families[] = {
    {"keywords", "keyword", 1, 0},        {"context", "context", 1, 0},
    {"structure", "structure", 1, 0},     {"conversation", "conversation", 1, 0},
    {"language", "language", 1, 0},       {"role_bindings", "authz", 1, 0},
    {"embeddings", "embedding", 1, 1},    {"domains", "domain", 1, 1},
    {"fact_check", "fact_check", 1, 1},   {"user_feedbacks", "user_feedback", 1, 1},
    {"reasks", "reask", 1, 1},            {"preferences", "preference", 1, 1},
    {"complexity", "complexity", 1, 1},   {"modality", "modality", 1, 1},
    {"jailbreak", "jailbreak", 1, 1},     {"pii", "pii", 1, 1},
    {"kb", "kb", 1, 1},                   {"events", "event", 1, 0},
    {"metadata", "metadata", 1, 0},       {"classifiers", "classifier", 1, 1},
    {"safety", "safety", 1, 1},           {"hallucination", "hallucination", 0, 1},
    {"input_modality", "input_modality", 1, 0},
    /* a later reference doc's name for events (unverified: its schema and code say events) */
    {"event_context", "event", 1, 0},
    /* outputs of routing.projections */
    {NULL, "projection", 1, 0},
};

static const family_t *family_by_key(const char *key, size_t len)
{
    for (size_t i = 0; i < VSR_ARRAY_LEN(families); i++)
        if (families[i].family && vsr_slice_eq_cstr(vsr_slice(key, len), families[i].family))
            return &families[i];
    return NULL;
}

static const family_t *family_by_cond(const char *cond)
{
    for (size_t i = 0; i < VSR_ARRAY_LEN(families); i++)
        if (strcmp(families[i].cond, cond) == 0)
            return &families[i];
    return NULL;
}

/* ---- predicates {gt, gte, lt, lte} ---- */

#define P_OFF(m) offsetof(vsr_predicate_conf_t, m)
#define PREDICATE_FIELD(k)                                                                                      \
    {.key = #k, .decode = vsr__cfg_double, .flags = CFG_HAS, .offset = P_OFF(k), .has_offset = P_OFF(has_##k), \
     .dmin = -1e300, .dmax = 1e300}

static const cfg_field_t predicate_fields[] = {
    PREDICATE_FIELD(gt), PREDICATE_FIELD(gte), PREDICATE_FIELD(lt), PREDICATE_FIELD(lte),
};

static const cfg_spec_t predicate_spec = {
    .size = sizeof(vsr_predicate_conf_t),
    .fields = predicate_fields,
    .n_fields = VSR_ARRAY_LEN(predicate_fields),
};

int vsr__cfg_decode_predicate(cfg_decoder_t *d, const cfg_node_t *val, vsr_predicate_conf_t *out)
{
    memset(out, 0, sizeof(*out));
    size_t saved = vsr__cfg_path_push(d, "predicate");
    int rc = vsr__cfg_decode_object(d, &predicate_spec, val, out, 0);
    vsr__cfg_path_pop(d, saved);
    if (rc == 0 && !out->has_gt && !out->has_gte && !out->has_lt && !out->has_lte) {
        vsr__cfg_node_error(d, val, "a predicate needs at least one of gt, gte, lt, lte");
        rc = -1;
    }
    return rc;
}

/* ---- keywords ---- */

#define KW_OFF(m) offsetof(vsr_sig_keyword_conf_t, m)

static const char *const kw_operators[] = {"OR", "AND", "NOR", NULL}; /* = vsr_kw_operator_t */

/* method "" (the default, word-boundary matching) is written as an empty string */
static int decode_kw_method(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj)
{
    static const char *const methods[] = {"", "regex", "bm25", "ngram", "fuzzy", NULL}; /* = vsr_kw_method_t */
    const char *s = vsr__cfg_get_text(d, val);
    if (s == NULL)
        return -1;
    for (int i = 0; methods[i]; i++) {
        if (strcmp(s, methods[i]) == 0) {
            ((vsr_sig_keyword_conf_t *)obj)->method = (vsr_kw_method_t)i;
            return 0;
        }
    }
    vsr__cfg_node_error(d, val, "method must be \"\", \"regex\", \"bm25\", \"ngram\" or \"fuzzy\", got %s",
                        vsr__cfg_quote(d->pool, s, val->len));
    return -1;
}

/* keywords: strings; "" is accepted (a reference profile's catch-all: an
 * empty keyword is present in every text) with a warning, since it is more
 * often a slip than a wish. */
static int decode_keywords(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj)
{
    if (val->kind != CFG_NODE_SEQ)
        return vsr__cfg_strlist(d, f, val, obj);
    if (val->n == 0) {
        vsr__cfg_node_error(d, val, "%s must not be empty", f->key);
        return -1;
    }
    vsr_strlist_conf_t *l = (vsr_strlist_conf_t *)((char *)obj + f->offset);
    l->items = vsr_pool_alloc(d->pool, val->n * sizeof(char *));
    l->n = 0;
    int rc = 0;
    for (size_t i = 0; i < val->n; i++) {
        const cfg_node_t *it = val->items[i];
        if (it->kind == CFG_NODE_SCALAR && it->type == CFG_STR && it->len == 0) {
            vsr__cfg_warn(d, "%s:%u:%u: keyword \"\" matches every request (a catch-all)", d->dg->file, it->line,
                          it->col);
            l->items[l->n++] = vsr__cfg_strdup(d, "");
            continue;
        }
        const char *str = vsr__cfg_get_string(d, f, it);
        if (str == NULL) {
            rc = -1;
            continue;
        }
        l->items[l->n++] = vsr__cfg_strdup(d, str);
    }
    return rc;
}

/* Past this edit distance nearly every word is within reach of a keyword:
 * accepted (the reference takes any), with a warning. */
#define FUZZY_WARN_DISTANCE 8

static const cfg_field_t keyword_fields[] = {
    {.key = "name", .decode = vsr__cfg_string, .flags = CFG_REQUIRED, .offset = KW_OFF(name)},
    {.key = "description", .decode = vsr__cfg_accept_text},
    {.key = "operator", .decode = vsr__cfg_choice, .flags = CFG_NOCASE, .offset = KW_OFF(op), .choices = kw_operators},
    {.key = "keywords", .decode = decode_keywords, .flags = CFG_REQUIRED | CFG_NONEMPTY, .offset = KW_OFF(keywords)},
    {.key = "case_sensitive", .decode = vsr__cfg_bool, .offset = KW_OFF(case_sensitive)},
    {.key = "method", .decode = decode_kw_method},
    {.key = "bm25_threshold", .decode = vsr__cfg_double, .offset = KW_OFF(bm25_threshold), .dmin = 0, .dmax = 1e9},
    {.key = "ngram_threshold", .decode = vsr__cfg_double, .offset = KW_OFF(ngram_threshold), .dmin = 0, .dmax = 1},
    {.key = "ngram_arity", .decode = vsr__cfg_uint, .offset = KW_OFF(ngram_arity), .size = sizeof(uint32_t), .min = 1,
     .max = 16},
    {.key = "fuzzy_match", .decode = vsr__cfg_bool, .offset = KW_OFF(fuzzy_match)},
    {.key = "fuzzy_threshold", .decode = vsr__cfg_uint, .offset = KW_OFF(fuzzy_threshold), .size = sizeof(uint32_t),
     .min = 0, .max = UINT32_MAX},
};

static void init_keyword(cfg_decoder_t *d, void *obj)
{
    vsr_sig_keyword_conf_t *k = obj;
    k->bm25_threshold = 0.1;
    k->ngram_threshold = 0.4;
    k->ngram_arity = 3;
    k->fuzzy_threshold = 2;
}

static void finish_keyword(cfg_decoder_t *d, const cfg_node_t *map, void *obj, const cfg_node_t *const *seen,
                           size_t index)
{
    vsr_sig_keyword_conf_t *k = obj;
    if (k->method == VSR_KW_FUZZY)
        k->fuzzy_match = 1;
    const cfg_node_t *ft = vsr__cfg_map_get(map, "fuzzy_threshold");
    if (ft != NULL && k->fuzzy_threshold > FUZZY_WARN_DISTANCE)
        vsr__cfg_warn(d, "%s:%u:%u: fuzzy_threshold %u is an edit distance (not a similarity score): a word within %u "
                         "edits of a keyword matches, which is nearly any word", d->dg->file, ft->line, ft->col,
                      (unsigned)k->fuzzy_threshold, (unsigned)k->fuzzy_threshold);
}

static const cfg_spec_t keyword_spec = {
    .size = sizeof(vsr_sig_keyword_conf_t),
    .fields = keyword_fields,
    .n_fields = VSR_ARRAY_LEN(keyword_fields),
    .init = init_keyword,
    .finish = finish_keyword,
};

/* ---- context ---- */

#define MAX_TOKEN_COUNT 1000000000000ull

/* An integer, or a string with an optional K (x1000) or M (x1000000) suffix,
 * case-insensitive, decimals allowed ("1.5K") — the reference's TokenCount. */
static int decode_token_count(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj)
{
    uint64_t v;
    if (val->kind == CFG_NODE_SCALAR && val->type == CFG_INT) {
        if (!val->ival_ok || val->ival < 0 || (uint64_t)val->ival > MAX_TOKEN_COUNT) {
            vsr__cfg_node_error(d, val, "%s must be between 0 and %llu, got %s", f->key, MAX_TOKEN_COUNT, val->str);
            return -1;
        }
        v = (uint64_t)val->ival;
    } else if (val->kind == CFG_NODE_SCALAR && (val->type == CFG_STR || val->type == CFG_FLOAT)) {
        vsr_slice_t s = vsr_slice_trim(vsr_slice(val->str, val->len));
        double mult = 1;
        if (s.len > 0 && (s.p[s.len - 1] == 'k' || s.p[s.len - 1] == 'K'))
            mult = 1e3, s.len--;
        else if (s.len > 0 && (s.p[s.len - 1] == 'm' || s.p[s.len - 1] == 'M'))
            mult = 1e6, s.len--;
        char num[32];
        int ok = s.len > 0 && s.len < sizeof(num);
        for (size_t i = 0; ok && i < s.len; i++)
            ok = (s.p[i] >= '0' && s.p[i] <= '9') || (s.p[i] == '.' && memchr(s.p, '.', i) == NULL);
        double x = 0;
        if (ok) {
            memcpy(num, s.p, s.len);
            num[s.len] = '\0';
            x = strtod(num, NULL) * mult;
            ok = x <= (double)MAX_TOKEN_COUNT;
        }
        if (!ok) {
            vsr__cfg_node_error(d, val, "invalid token count %s (use e.g. 4096, \"32K\" or \"1M\")",
                                vsr__cfg_quote(d->pool, val->str, val->len));
            return -1;
        }
        v = (uint64_t)x; /* truncated, as the reference does */
    } else {
        vsr__cfg_node_error(d, val, "expected a token count (e.g. 4096 or \"32K\"), got %s", vsr__cfg_node_what(val));
        return -1;
    }
    *(uint64_t *)((char *)obj + f->offset) = v;
    return 0;
}

#define CTX_OFF(m) offsetof(vsr_sig_context_conf_t, m)

static const cfg_field_t context_fields[] = {
    {.key = "name", .decode = vsr__cfg_string, .flags = CFG_REQUIRED, .offset = CTX_OFF(name)},
    {.key = "description", .decode = vsr__cfg_accept_text},
    {.key = "min_tokens", .decode = decode_token_count, .offset = CTX_OFF(min_tokens)},
    {.key = "max_tokens", .decode = decode_token_count, .flags = CFG_HAS, .offset = CTX_OFF(max_tokens),
     .has_offset = CTX_OFF(has_max_tokens)},
};

static void finish_context(cfg_decoder_t *d, const cfg_node_t *map, void *obj, const cfg_node_t *const *seen,
                           size_t index)
{
    vsr_sig_context_conf_t *c = obj;
    const cfg_node_t *max = vsr__cfg_map_get(map, "max_tokens");
    if (!c->has_max_tokens || max == NULL)
        return;
    /* the reference reads 0 as "no bound" in places: say so rather than guess */
    if (c->max_tokens == 0)
        vsr__cfg_node_error(d, max, "max_tokens must be greater than 0 (leave it out for no upper bound)");
    else if (c->max_tokens < c->min_tokens)
        vsr__cfg_node_error(d, max, "max_tokens (%llu) is less than min_tokens (%llu)",
                            (unsigned long long)c->max_tokens, (unsigned long long)c->min_tokens);
}

static const cfg_spec_t context_spec = {
    .size = sizeof(vsr_sig_context_conf_t),
    .fields = context_fields,
    .n_fields = VSR_ARRAY_LEN(context_fields),
    .finish = finish_context,
};

/* ---- structure ---- */

#define ST_OFF(m) offsetof(vsr_sig_structure_conf_t, m)

static const char *const structure_features[] = {"count", "exists", "density", "sequence", NULL};
static const char *const structure_sources[] = {"regex", "keyword_set", "sequence", "text_bytes", NULL};

/* source.sequences: a list of keyword lists */
static int decode_sequences(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj)
{
    vsr_sig_structure_conf_t *s = obj;
    if (val->kind != CFG_NODE_SEQ) {
        vsr__cfg_node_error(d, val, "expected a list of keyword lists, got %s", vsr__cfg_node_what(val));
        return -1;
    }
    s->sequences = val->n ? vsr_pool_alloc(d->pool, val->n * sizeof(*s->sequences)) : NULL;
    s->n_sequences = val->n;
    int rc = 0;
    cfg_field_t item = {.key = "sequences", .flags = CFG_NONEMPTY};
    for (size_t i = 0; i < val->n; i++) {
        memset(&s->sequences[i], 0, sizeof(s->sequences[i]));
        if (vsr__cfg_strlist(d, &item, val->items[i], &s->sequences[i]) != 0)
            rc = -1;
    }
    return rc;
}

static const cfg_field_t structure_source_fields[] = {
    {.key = "type", .decode = vsr__cfg_string, .flags = CFG_REQUIRED, .offset = ST_OFF(source_type),
     .choices = structure_sources},
    {.key = "pattern", .decode = vsr__cfg_string, .offset = ST_OFF(pattern)},
    {.key = "keywords", .decode = vsr__cfg_strlist, .offset = ST_OFF(keywords)},
    {.key = "sequences", .decode = decode_sequences},
    {.key = "case_sensitive", .decode = vsr__cfg_bool, .offset = ST_OFF(case_sensitive)},
};

/* What each source type needs, and nothing it does not use. */
static void finish_structure_source(cfg_decoder_t *d, const cfg_node_t *map, void *obj, const cfg_node_t *const *seen,
                                    size_t index)
{
    vsr_sig_structure_conf_t *s = obj;
    if (s->source_type == NULL)
        return;
    static const struct {
        const char *key, *source;
    } uses[] = {{"pattern", "regex"}, {"keywords", "keyword_set"}, {"sequences", "sequence"}};
    for (size_t i = 0; i < VSR_ARRAY_LEN(uses); i++) {
        const cfg_node_t *v = vsr__cfg_map_get(map, uses[i].key);
        int wanted = strcmp(s->source_type, uses[i].source) == 0;
        if (v != NULL && !wanted)
            vsr__cfg_node_error(d, v, "%s only applies to source type \"%s\"", uses[i].key, uses[i].source);
        else if (wanted && (v == NULL || vsr__cfg_is_empty(v)))
            vsr__cfg_node_error(d, map, "source type \"%s\" needs a non-empty %s", uses[i].source, uses[i].key);
    }
}

static const cfg_spec_t structure_source_spec = {
    .size = sizeof(vsr_sig_structure_conf_t),
    .fields = structure_source_fields,
    .n_fields = VSR_ARRAY_LEN(structure_source_fields),
    .finish = finish_structure_source,
};

static const cfg_field_t structure_feature_fields[] = {
    {.key = "type", .decode = vsr__cfg_string, .flags = CFG_REQUIRED, .offset = ST_OFF(feature_type),
     .choices = structure_features},
    {.key = "source", .decode = vsr__cfg_object, .flags = CFG_REQUIRED, .spec = &structure_source_spec},
};

static const cfg_spec_t structure_feature_spec = {
    .size = sizeof(vsr_sig_structure_conf_t),
    .fields = structure_feature_fields,
    .n_fields = VSR_ARRAY_LEN(structure_feature_fields),
};

static const cfg_field_t structure_fields[] = {
    {.key = "name", .decode = vsr__cfg_string, .flags = CFG_REQUIRED, .offset = ST_OFF(name)},
    {.key = "description", .decode = vsr__cfg_accept_text},
    {.key = "feature", .decode = vsr__cfg_object, .flags = CFG_REQUIRED, .spec = &structure_feature_spec},
    {.key = "predicate", .decode = vsr__cfg_object, .flags = CFG_NULL_OK, .offset = ST_OFF(predicate),
     .spec = &predicate_spec},
};

static const cfg_spec_t structure_spec = {
    .size = sizeof(vsr_sig_structure_conf_t),
    .fields = structure_fields,
    .n_fields = VSR_ARRAY_LEN(structure_fields),
};

/* ---- conversation ---- */

#define CV_OFF(m) offsetof(vsr_sig_conversation_conf_t, m)

static const char *const conversation_features[] = {"count", "exists", NULL};
static const char *const conversation_roles[] = {"user", "assistant", "system", "developer", "tool", "non_user", NULL};

static int decode_conversation_source(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj)
{
    static const char *const sources[] = {"message", "tool_definition", "assistant_tool_call", "active_tool_loop",
                                          "image_content", "tool_choice_required", "tool_choice_none",
                                          "assistant_tool_cycle", NULL};
    const char *s = vsr__cfg_get_string(d, f, val);
    if (s == NULL)
        return -1;
    if (strcmp(s, "flow_tool_state") == 0) {
        /* the name points at the router flow's pending tool state (a tool_call_id "flowtool_<state>__..."
         * of the reference's workflows), which its conversation signal does not read either */
        vsr__cfg_node_error(d, val, "conversation source type \"flow_tool_state\" is not supported yet (the "
                                    "reference's conversation signal defines no such source; the name points at "
                                    "the pending tool state of its router-flow workflows, which hand tool calls "
                                    "back to the client, and vsr's workflows never do)");
        return -1;
    }
    cfg_field_t choice = *f;
    choice.choices = sources;
    return vsr__cfg_string(d, &choice, val, obj);
}

static const cfg_field_t conversation_source_fields[] = {
    {.key = "type", .decode = decode_conversation_source, .flags = CFG_REQUIRED, .offset = CV_OFF(source_type)},
    {.key = "role", .decode = vsr__cfg_string, .offset = CV_OFF(role), .choices = conversation_roles},
};

static void finish_conversation_source(cfg_decoder_t *d, const cfg_node_t *map, void *obj,
                                       const cfg_node_t *const *seen, size_t index)
{
    vsr_sig_conversation_conf_t *c = obj;
    const cfg_node_t *role = vsr__cfg_map_get(map, "role");
    if (role != NULL && c->source_type != NULL && strcmp(c->source_type, "message") != 0)
        vsr__cfg_node_error(d, role, "role only applies to source type \"message\"");
}

static const cfg_spec_t conversation_source_spec = {
    .size = sizeof(vsr_sig_conversation_conf_t),
    .fields = conversation_source_fields,
    .n_fields = VSR_ARRAY_LEN(conversation_source_fields),
    .finish = finish_conversation_source,
};

static const cfg_field_t conversation_feature_fields[] = {
    {.key = "type", .decode = vsr__cfg_string, .flags = CFG_REQUIRED, .offset = CV_OFF(feature_type),
     .choices = conversation_features},
    {.key = "source", .decode = vsr__cfg_object, .flags = CFG_REQUIRED, .spec = &conversation_source_spec},
};

static const cfg_spec_t conversation_feature_spec = {
    .size = sizeof(vsr_sig_conversation_conf_t),
    .fields = conversation_feature_fields,
    .n_fields = VSR_ARRAY_LEN(conversation_feature_fields),
};

static const cfg_field_t conversation_fields[] = {
    {.key = "name", .decode = vsr__cfg_string, .flags = CFG_REQUIRED, .offset = CV_OFF(name)},
    {.key = "description", .decode = vsr__cfg_accept_text},
    {.key = "feature", .decode = vsr__cfg_object, .flags = CFG_REQUIRED, .spec = &conversation_feature_spec},
    {.key = "predicate", .decode = vsr__cfg_object, .flags = CFG_NULL_OK, .offset = CV_OFF(predicate),
     .spec = &predicate_spec},
};

static const cfg_spec_t conversation_spec = {
    .size = sizeof(vsr_sig_conversation_conf_t),
    .fields = conversation_fields,
    .n_fields = VSR_ARRAY_LEN(conversation_fields),
};

/* ---- language ---- */

static const cfg_field_t language_fields[] = {
    {.key = "name", .decode = vsr__cfg_string, .flags = CFG_REQUIRED, .offset = offsetof(vsr_sig_language_conf_t, name)},
    {.key = "description", .decode = vsr__cfg_accept_text},
    {.key = "threshold", .decode = vsr__cfg_double, .offset = offsetof(vsr_sig_language_conf_t, threshold), .dmin = 0,
     .dmax = 1},
};

static void finish_language(cfg_decoder_t *d, const cfg_node_t *map, void *obj, const cfg_node_t *const *seen,
                            size_t index)
{
    vsr_sig_language_conf_t *l = obj;
    if (l->threshold == 0)
        l->threshold = DEFAULT_LANGUAGE_THRESHOLD;
}

static const cfg_spec_t language_spec = {
    .size = sizeof(vsr_sig_language_conf_t),
    .fields = language_fields,
    .n_fields = VSR_ARRAY_LEN(language_fields),
    .finish = finish_language,
};

/* ---- role_bindings ---- */

static const char *const subject_kinds[] = {"User", "Group", NULL};

static const cfg_field_t subject_fields[] = {
    {.key = "kind", .decode = vsr__cfg_string, .flags = CFG_REQUIRED | CFG_NOCASE,
     .offset = offsetof(vsr_subject_conf_t, kind), .choices = subject_kinds},
    {.key = "name", .decode = vsr__cfg_string, .flags = CFG_REQUIRED, .offset = offsetof(vsr_subject_conf_t, name)},
};

static const cfg_spec_t subject_spec = {
    .size = sizeof(vsr_subject_conf_t),
    .fields = subject_fields,
    .n_fields = VSR_ARRAY_LEN(subject_fields),
};

static const cfg_field_t role_binding_fields[] = {
    {.key = "name", .decode = vsr__cfg_string, .flags = CFG_REQUIRED, .offset = offsetof(vsr_sig_authz_conf_t, name)},
    {.key = "description", .decode = vsr__cfg_accept_text},
    {.key = "role", .decode = vsr__cfg_string, .flags = CFG_REQUIRED, .offset = offsetof(vsr_sig_authz_conf_t, role)},
    {.key = "subjects", .decode = vsr__cfg_list, .flags = CFG_REQUIRED | CFG_NONEMPTY,
     .offset = offsetof(vsr_sig_authz_conf_t, subjects), .count_offset = offsetof(vsr_sig_authz_conf_t, n_subjects),
     .spec = &subject_spec},
};

static const cfg_spec_t role_binding_spec = {
    .size = sizeof(vsr_sig_authz_conf_t),
    .fields = role_binding_fields,
    .n_fields = VSR_ARRAY_LEN(role_binding_fields),
};

/* ---- embeddings ---- */

#define EMB_OFF(m) offsetof(vsr_sig_embedding_conf_t, m)

static const char *const emb_aggregations[] = {"max", "mean", "any", NULL}; /* = vsr_emb_aggregation_t */

/* candidates: 1..VSR_EMB_MAX_CANDIDATES non-empty strings of at most
 * VSR_EMB_MAX_CANDIDATE_BYTES each */
static int decode_candidates(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj)
{
    if (vsr__cfg_strlist(d, f, val, obj) != 0)
        return -1;
    const vsr_strlist_conf_t *l = (const vsr_strlist_conf_t *)((char *)obj + f->offset);
    if (l->n > VSR_EMB_MAX_CANDIDATES) {
        vsr__cfg_node_error(d, val, "%s: at most %d candidates per signal, got %zu", f->key, VSR_EMB_MAX_CANDIDATES,
                            l->n);
        return -1;
    }
    int rc = 0;
    for (size_t i = 0; i < l->n && val->kind == CFG_NODE_SEQ && i < val->n; i++) {
        size_t len = strlen(l->items[i]);
        int blank = 1;
        for (size_t k = 0; k < len && blank; k++)
            blank = l->items[i][k] == ' ' || l->items[i][k] == '\t' || l->items[i][k] == '\n' || l->items[i][k] == '\r';
        if (blank) {
            vsr__cfg_node_error(d, val->items[i], "a candidate must not be empty or blank");
            rc = -1;
        } else if (len > VSR_EMB_MAX_CANDIDATE_BYTES) {
            vsr__cfg_node_error(d, val->items[i], "a candidate is at most %d bytes, got %zu",
                                VSR_EMB_MAX_CANDIDATE_BYTES, len);
            rc = -1;
        }
    }
    return rc;
}

/* The reference's fields vsr does not implement for this family yet: a
 * non-empty value is refused rather than ignored. */
static int decode_emb_unsupported(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj)
{
    VSR_UNUSED(obj);
    if (vsr__cfg_deep_empty(val) ||
        (val->kind == CFG_NODE_SCALAR && val->type == CFG_BOOL && (val->str[0] == 'f' || val->str[0] == 'F')))
        return 0;
    vsr__cfg_node_error(d, val, "embeddings: %s is not supported yet", f->key);
    return -1;
}

static int decode_query_modality(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj)
{
    VSR_UNUSED(obj);
    const char *s = vsr__cfg_get_string(d, f, val);
    if (s == NULL)
        return -1;
    if (strcmp(s, "text") != 0) {
        vsr__cfg_node_error(d, val, "query_modality %s is not supported yet (only \"text\")",
                            vsr__cfg_quote(d->pool, s, strlen(s)));
        return -1;
    }
    return 0;
}

static const cfg_field_t embedding_fields[] = {
    {.key = "name", .decode = vsr__cfg_string, .flags = CFG_REQUIRED, .offset = EMB_OFF(name)},
    {.key = "description", .decode = vsr__cfg_accept_text},
    {.key = "threshold", .decode = vsr__cfg_double, .flags = CFG_REQUIRED, .offset = EMB_OFF(threshold), .dmin = 0,
     .dmax = 1},
    {.key = "candidates", .decode = decode_candidates, .flags = CFG_REQUIRED | CFG_NONEMPTY,
     .offset = EMB_OFF(candidates)},
    {.key = "aggregation_method", .decode = vsr__cfg_choice, .flags = CFG_NOCASE, .offset = EMB_OFF(aggregation),
     .choices = emb_aggregations},
    {.key = "query_modality", .decode = decode_query_modality},
    {.key = "negative_candidates", .decode = decode_candidates, .offset = EMB_OFF(negative_candidates)},
    {.key = "image_candidates", .decode = decode_emb_unsupported},
    {.key = "enable_soft_matching", .decode = vsr__cfg_bool, .offset = EMB_OFF(soft_matching)},
    {.key = "min_score_threshold", .decode = vsr__cfg_double, .offset = EMB_OFF(min_score_threshold), .dmin = 0,
     .dmax = 1},
    {.key = "model", .decode = vsr__cfg_accept_text,
     .inert = "deprecated by the reference: the embedding model is global; vsr embeds with the runtime's embedding model"},
};

static void init_embedding(cfg_decoder_t *d, void *obj)
{
    VSR_UNUSED(d);
    vsr_sig_embedding_conf_t *e = obj;
    e->min_score_threshold = VSR_EMB_DEFAULT_MIN_SCORE;
}

static const cfg_spec_t embedding_spec = {
    .size = sizeof(vsr_sig_embedding_conf_t),
    .fields = embedding_fields,
    .n_fields = VSR_ARRAY_LEN(embedding_fields),
    .init = init_embedding,
};

/* ---- preferences ---- */

#define PREF_OFF(m) offsetof(vsr_sig_preference_conf_t, m)

static const cfg_field_t preference_fields[] = {
    {.key = "name", .decode = vsr__cfg_string, .flags = CFG_REQUIRED, .offset = PREF_OFF(name)},
    {.key = "description", .decode = vsr__cfg_string, .offset = PREF_OFF(description)},
    {.key = "examples", .decode = decode_candidates, .offset = PREF_OFF(examples)},
    {.key = "threshold", .decode = vsr__cfg_double, .offset = PREF_OFF(threshold), .dmin = 0, .dmax = 1},
};

static void init_preference(cfg_decoder_t *d, void *obj)
{
    VSR_UNUSED(d);
    vsr_sig_preference_conf_t *p = obj;
    p->threshold = VSR_PREF_DEFAULT_THRESHOLD;
}

static const cfg_spec_t preference_spec = {
    .size = sizeof(vsr_sig_preference_conf_t),
    .fields = preference_fields,
    .n_fields = VSR_ARRAY_LEN(preference_fields),
    .init = init_preference,
};

/* ---- fact_check, user_feedbacks, modality: the name is a label of the
 * family's built-in exemplar banks (a modality name that is not one is
 * refused at its node: "must be ...").  fact_check and user_feedbacks take
 * any name, as the reference does: its classifier reports one of the labels
 * and a rule matches only under that name, so another name loads with a
 * warning and never matches. ---- */

#define EX_OFF(m) offsetof(vsr_sig_exemplar_conf_t, m)

static const char *const fact_check_labels[] = {"needs_fact_check", "no_fact_check_needed", NULL};
static const char *const user_feedback_labels[] = {"wrong_answer", "need_clarification", "want_different", "satisfied",
                                                   NULL};
static const char *const modality_labels[] = {"AR", "DIFFUSION", "BOTH", NULL};

/* A name that is none of `labels`: a warning, and the signal never matches. */
static int decode_any_name(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj,
                           const char *family, const char *const *labels, const char *said)
{
    if (vsr__cfg_string(d, f, val, obj) != 0)
        return -1;
    const char *name = *(char **)((char *)obj + f->offset);
    for (size_t i = 0; labels[i]; i++)
        if (strcmp(name, labels[i]) == 0)
            return 0;
    vsr__cfg_warn(d, "%s:%u:%u: %s signal %s never matches: the %s classifier reports %s, and a signal matches "
                  "only under one of those names",
                  d->dg->file, val->line, val->col, family, vsr__cfg_quote(d->pool, name, val->len), family, said);
    return 0;
}

static int decode_fact_check_name(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj)
{
    return decode_any_name(d, f, val, obj, "fact_check", fact_check_labels, "needs_fact_check or no_fact_check_needed");
}

static int decode_user_feedback_name(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj)
{
    return decode_any_name(d, f, val, obj, "user_feedback", user_feedback_labels,
                           "wrong_answer, need_clarification, want_different or satisfied");
}

#define EXEMPLAR_SPEC(fam, labels, name_decode, dflt)                                                          \
    static const cfg_field_t fam##_fields[] = {                                                                \
        {.key = "name", .decode = name_decode, .flags = CFG_REQUIRED, .offset = EX_OFF(name),                 \
         .choices = labels},                                                                                   \
        {.key = "description", .decode = vsr__cfg_string, .offset = EX_OFF(description)},                     \
        {.key = "threshold", .decode = vsr__cfg_double, .offset = EX_OFF(threshold), .dmin = 0, .dmax = 1},   \
    };                                                                                                         \
    static void init_##fam(cfg_decoder_t *d, void *obj)                                                        \
    {                                                                                                          \
        VSR_UNUSED(d);                                                                                         \
        ((vsr_sig_exemplar_conf_t *)obj)->threshold = dflt;                                                    \
    }                                                                                                          \
    static const cfg_spec_t fam##_spec = {                                                                     \
        .size = sizeof(vsr_sig_exemplar_conf_t),                                                               \
        .fields = fam##_fields,                                                                                \
        .n_fields = VSR_ARRAY_LEN(fam##_fields),                                                               \
        .init = init_##fam,                                                                                    \
    };

EXEMPLAR_SPEC(fact_check, NULL, decode_fact_check_name, VSR_FACT_CHECK_DEFAULT_THRESHOLD)
EXEMPLAR_SPEC(user_feedback, NULL, decode_user_feedback_name, VSR_USER_FEEDBACK_DEFAULT_THRESHOLD)
EXEMPLAR_SPEC(modality, modality_labels, vsr__cfg_string, VSR_MODALITY_DEFAULT_THRESHOLD)
/* ---- complexity ---- */

#define CX_OFF(m) offsetof(vsr_sig_complexity_conf_t, m)

static int decode_cx_unsupported(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj)
{
    VSR_UNUSED(obj);
    if (vsr__cfg_deep_empty(val))
        return 0;
    vsr__cfg_node_error(d, val, "complexity: %s is not supported yet", f->key);
    return -1;
}

static const cfg_field_t cx_bank_fields[] = {
    {.key = "candidates", .decode = decode_candidates, .flags = CFG_REQUIRED | CFG_NONEMPTY,
     .offset = offsetof(vsr_cx_bank_conf_t, candidates)},
    {.key = "image_candidates", .decode = decode_cx_unsupported},
};

static const cfg_spec_t cx_bank_spec = {
    .size = sizeof(vsr_cx_bank_conf_t),
    .fields = cx_bank_fields,
    .n_fields = VSR_ARRAY_LEN(cx_bank_fields),
};

static const cfg_field_t complexity_fields[] = {
    {.key = "name", .decode = vsr__cfg_string, .flags = CFG_REQUIRED, .offset = CX_OFF(name)},
    {.key = "description", .decode = vsr__cfg_accept_text},
    {.key = "threshold", .decode = vsr__cfg_double, .offset = CX_OFF(threshold), .dmin = 0, .dmax = 2},
    {.key = "hard_above", .decode = vsr__cfg_double, .flags = CFG_HAS, .offset = CX_OFF(hard_above),
     .has_offset = CX_OFF(has_hard_above), .dmin = -2, .dmax = 2},
    {.key = "easy_below", .decode = vsr__cfg_double, .flags = CFG_HAS, .offset = CX_OFF(easy_below),
     .has_offset = CX_OFF(has_easy_below), .dmin = -2, .dmax = 2},
    {.key = "hard", .decode = vsr__cfg_object, .flags = CFG_REQUIRED, .offset = CX_OFF(hard), .spec = &cx_bank_spec},
    {.key = "easy", .decode = vsr__cfg_object, .flags = CFG_REQUIRED, .offset = CX_OFF(easy), .spec = &cx_bank_spec},
    {.key = "composer", .decode = vsr__cfg_decode_rule_field, .flags = CFG_NULL_OK, .offset = CX_OFF(composer)},
    {.key = "easy_above", .flags = CFG_UNIMPLEMENTED},
    {.key = "hard_below", .flags = CFG_UNIMPLEMENTED},
};

static void init_complexity(cfg_decoder_t *d, void *obj)
{
    VSR_UNUSED(d);
    vsr_sig_complexity_conf_t *c = obj;
    c->threshold = VSR_CX_DEFAULT_THRESHOLD;
}

/* The levels resolve from "<signal>:<level>": a name with a colon would be
 * ambiguous.  easy_below must not exceed hard_above. */
static void finish_complexity(cfg_decoder_t *d, const cfg_node_t *map, void *obj, const cfg_node_t *const *seen,
                              size_t index)
{
    VSR_UNUSED(seen);
    VSR_UNUSED(index);
    vsr_sig_complexity_conf_t *c = obj;
    const cfg_node_t *name = vsr__cfg_map_get(map, "name");
    if (c->name && strchr(c->name, ':') && name)
        vsr__cfg_node_error(d, name, "a complexity signal name must not contain ':' (rules name its levels as "
                                     "\"<signal>:easy|medium|hard\")");
    double hard = c->has_hard_above ? c->hard_above : c->threshold;
    double easy = c->has_easy_below ? c->easy_below : -c->threshold;
    const cfg_node_t *at = vsr__cfg_map_get(map, c->has_easy_below ? "easy_below" : "threshold");
    if (easy > hard)
        vsr__cfg_node_error(d, at ? at : map, "easy_below (%g) is greater than hard_above (%g)", easy, hard);
}

static const cfg_spec_t complexity_spec = {
    .size = sizeof(vsr_sig_complexity_conf_t),
    .fields = complexity_fields,
    .n_fields = VSR_ARRAY_LEN(complexity_fields),
    .init = init_complexity,
    .finish = finish_complexity,
};

/* ---- kb ---- */

#define KB_OFF(m) offsetof(vsr_sig_kb_conf_t, m)

static const char *const kb_target_kinds[] = {"group", "label", NULL}; /* = vsr_kb_target_kind_t */
static const char *const kb_matches[] = {"best", "any", NULL};        /* = vsr_kb_match_t */

static const cfg_field_t kb_target_fields[] = {
    {.key = "kind", .decode = vsr__cfg_choice, .flags = CFG_REQUIRED | CFG_NOCASE,
     .offset = offsetof(vsr_kb_target_conf_t, kind), .choices = kb_target_kinds},
    {.key = "value", .decode = vsr__cfg_string, .flags = CFG_REQUIRED, .offset = offsetof(vsr_kb_target_conf_t, value)},
};

static const cfg_spec_t kb_target_spec = {
    .size = sizeof(vsr_kb_target_conf_t),
    .fields = kb_target_fields,
    .n_fields = VSR_ARRAY_LEN(kb_target_fields),
};

static const cfg_field_t kb_signal_fields[] = {
    {.key = "name", .decode = vsr__cfg_string, .flags = CFG_REQUIRED, .offset = KB_OFF(name)},
    {.key = "description", .decode = vsr__cfg_accept_text},
    {.key = "kb", .decode = vsr__cfg_string, .flags = CFG_REQUIRED, .offset = KB_OFF(kb)},
    {.key = "target", .decode = vsr__cfg_object, .flags = CFG_REQUIRED, .offset = KB_OFF(target),
     .spec = &kb_target_spec},
    {.key = "match", .decode = vsr__cfg_choice, .flags = CFG_NOCASE, .offset = KB_OFF(match), .choices = kb_matches},
    {.key = "threshold", .decode = vsr__cfg_double, .flags = CFG_HAS, .offset = KB_OFF(threshold),
     .has_offset = KB_OFF(has_threshold), .dmin = -1, .dmax = 1},
};

static const cfg_spec_t kb_signal_spec = {
    .size = sizeof(vsr_sig_kb_conf_t),
    .fields = kb_signal_fields,
    .n_fields = VSR_ARRAY_LEN(kb_signal_fields),
};

/* ---- reasks ---- */

#define REASK_OFF(m) offsetof(vsr_sig_reask_conf_t, m)

static const cfg_field_t reask_fields[] = {
    {.key = "name", .decode = vsr__cfg_string, .flags = CFG_REQUIRED, .offset = REASK_OFF(name)},
    {.key = "description", .decode = vsr__cfg_accept_text},
    {.key = "threshold", .decode = vsr__cfg_double, .offset = REASK_OFF(threshold), .dmin = 0, .dmax = 1},
    {.key = "lookback_turns", .decode = vsr__cfg_uint, .offset = REASK_OFF(lookback_turns), .size = sizeof(uint32_t),
     .min = 1, .max = VSR_REASK_MAX_LOOKBACK},
};

static void init_reask(cfg_decoder_t *d, void *obj)
{
    VSR_UNUSED(d);
    vsr_sig_reask_conf_t *r = obj;
    r->threshold = VSR_REASK_DEFAULT_THRESHOLD;
    r->lookback_turns = 1;
}

static const cfg_spec_t reask_spec = {
    .size = sizeof(vsr_sig_reask_conf_t),
    .fields = reask_fields,
    .n_fields = VSR_ARRAY_LEN(reask_fields),
    .init = init_reask,
};

/* ---- domains, jailbreak, pii (the runtime's classifiers) ---- */

#define MS_OFF(m) offsetof(vsr_model_score_conf_t, m)
static const cfg_field_t model_score_fields[] = {
    {.key = "model", .decode = vsr__cfg_string, .flags = CFG_REQUIRED, .offset = MS_OFF(model)},
    {.key = "score", .decode = vsr__cfg_double, .flags = CFG_REQUIRED, .offset = MS_OFF(score), .dmin = -1e300,
     .dmax = 1e300},
    {.key = "use_reasoning", .decode = vsr__cfg_bool, .flags = CFG_HAS, .offset = MS_OFF(use_reasoning),
     .has_offset = MS_OFF(has_use_reasoning)},
};

static const cfg_spec_t model_score_spec = {
    .size = sizeof(vsr_model_score_conf_t),
    .fields = model_score_fields,
    .n_fields = VSR_ARRAY_LEN(model_score_fields),
};

#define DOM_OFF(m) offsetof(vsr_sig_domain_conf_t, m)
static const cfg_field_t domain_fields[] = {
    {.key = "name", .decode = vsr__cfg_string, .flags = CFG_REQUIRED, .offset = DOM_OFF(name)},
    {.key = "description", .decode = vsr__cfg_string, .flags = CFG_NULL_OK, .offset = DOM_OFF(description)},
    {.key = "mmlu_categories", .decode = vsr__cfg_strlist, .flags = CFG_NULL_OK, .offset = DOM_OFF(categories)},
    {.key = "model_scores", .decode = vsr__cfg_list, .flags = CFG_NULL_OK, .offset = DOM_OFF(model_scores),
     .count_offset = DOM_OFF(n_model_scores), .spec = &model_score_spec},
    {.key = "system_prompt", .decode = vsr__cfg_accept_text,
     .inert = "deprecated by the reference: a decision's system_prompt plugin carries the prompt; this one is not applied"},
};

static const cfg_spec_t domain_spec = {
    .size = sizeof(vsr_sig_domain_conf_t),
    .fields = domain_fields,
    .n_fields = VSR_ARRAY_LEN(domain_fields),
};

/* jailbreak_patterns / benign_patterns: at most VSR_JB_MAX_PATTERNS
 * non-blank texts of at most VSR_EMB_MAX_CANDIDATE_BYTES each */
static int decode_patterns(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj)
{
    if (vsr__cfg_strlist(d, f, val, obj) != 0)
        return -1;
    const vsr_strlist_conf_t *l = (const vsr_strlist_conf_t *)((char *)obj + f->offset);
    if (l->n > VSR_JB_MAX_PATTERNS) {
        vsr__cfg_node_error(d, val, "%s: at most %d patterns per signal, got %zu", f->key, VSR_JB_MAX_PATTERNS, l->n);
        return -1;
    }
    for (size_t i = 0; i < l->n && val->kind == CFG_NODE_SEQ && i < val->n; i++) {
        size_t len = strlen(l->items[i]), k = 0;
        while (k < len && (l->items[i][k] == ' ' || l->items[i][k] == '\t' || l->items[i][k] == '\n' ||
                           l->items[i][k] == '\r'))
            k++;
        if (k == len) {
            vsr__cfg_node_error(d, val->items[i], "a pattern must not be empty or blank");
            return -1;
        }
        if (len > VSR_EMB_MAX_CANDIDATE_BYTES) {
            vsr__cfg_node_error(d, val->items[i], "a pattern is at most %d bytes, got %zu",
                                VSR_EMB_MAX_CANDIDATE_BYTES, len);
            return -1;
        }
    }
    return 0;
}

static const char *const jb_methods[] = {"classifier", "contrastive", "hybrid", NULL}; /* = vsr_jb_method_t */

#define JB_OFF(m) offsetof(vsr_sig_jailbreak_conf_t, m)
static const cfg_field_t jailbreak_fields[] = {
    {.key = "name", .decode = vsr__cfg_string, .flags = CFG_REQUIRED, .offset = JB_OFF(name)},
    {.key = "description", .decode = vsr__cfg_accept_text},
    {.key = "method", .decode = vsr__cfg_choice, .flags = CFG_NOCASE | CFG_HAS, .offset = JB_OFF(method),
     .has_offset = JB_OFF(has_method), .choices = jb_methods},
    {.key = "threshold", .decode = vsr__cfg_double, .flags = CFG_HAS, .offset = JB_OFF(threshold),
     .has_offset = JB_OFF(has_threshold), .dmin = 0, .dmax = 1},
    {.key = "include_history", .decode = vsr__cfg_bool, .offset = JB_OFF(include_history)},
    {.key = "jailbreak_patterns", .decode = decode_patterns, .flags = CFG_NULL_OK, .offset = JB_OFF(jailbreak_patterns)},
    {.key = "benign_patterns", .decode = decode_patterns, .flags = CFG_NULL_OK, .offset = JB_OFF(benign_patterns)},
    {.key = "direction", .flags = CFG_UNIMPLEMENTED},
};

static const cfg_spec_t jailbreak_spec = {
    .size = sizeof(vsr_sig_jailbreak_conf_t),
    .fields = jailbreak_fields,
    .n_fields = VSR_ARRAY_LEN(jailbreak_fields),
};

#define PII_OFF(m) offsetof(vsr_sig_pii_conf_t, m)
static const cfg_field_t pii_fields[] = {
    {.key = "name", .decode = vsr__cfg_string, .flags = CFG_REQUIRED, .offset = PII_OFF(name)},
    {.key = "description", .decode = vsr__cfg_accept_text},
    {.key = "threshold", .decode = vsr__cfg_double, .flags = CFG_HAS, .offset = PII_OFF(threshold),
     .has_offset = PII_OFF(has_threshold), .dmin = 0, .dmax = 1},
    {.key = "include_history", .decode = vsr__cfg_bool, .offset = PII_OFF(include_history)},
    {.key = "pii_types_allowed", .decode = vsr__cfg_strlist, .flags = CFG_NULL_OK, .offset = PII_OFF(allowed)},
};

static const cfg_spec_t pii_spec = {
    .size = sizeof(vsr_sig_pii_conf_t),
    .fields = pii_fields,
    .n_fields = VSR_ARRAY_LEN(pii_fields),
};

/* ---- classifiers (type local: a labelled example bank; llm: loaded only) ---- */

#define CLS_OFF(m) offsetof(vsr_sig_classifier_conf_t, m)
#define CLS_STR(x) #x
#define CLS_XSTR(x) CLS_STR(x)

static const char *const cls_types[] = {"local", "llm", NULL}; /* = vsr_cls_type_t */

/* The label's index in c->labels, added when new (-1 past VSR_CLS_MAX_LABELS). */
static int cls_label(cfg_decoder_t *d, vsr_sig_classifier_conf_t *c, const char *name, size_t len, size_t *cap)
{
    for (size_t i = 0; i < c->n_labels; i++)
        if (strlen(c->labels[i]) == len && memcmp(c->labels[i], name, len) == 0)
            return (int)i;
    if (c->n_labels == VSR_CLS_MAX_LABELS)
        return -1;
    if (c->n_labels == *cap) {
        size_t nc = *cap ? 2 * *cap : 8;
        char **l = vsr_pool_alloc(d->pool, nc * sizeof(*l));
        if (c->n_labels)
            memcpy(l, c->labels, c->n_labels * sizeof(*l));
        c->labels = l;
        *cap = nc;
    }
    c->labels[c->n_labels] = vsr_pool_strndup(d->pool, name, len);
    return (int)c->n_labels++;
}

static void cls_add_example(cfg_decoder_t *d, vsr_sig_classifier_conf_t *c, const char *text, size_t len, int label,
                            size_t *cap)
{
    if (c->n_examples == *cap) {
        size_t nc = *cap ? 2 * *cap : 16;
        vsr_cls_example_conf_t *e = vsr_pool_alloc(d->pool, nc * sizeof(*e));
        if (c->n_examples)
            memcpy(e, c->examples, c->n_examples * sizeof(*e));
        c->examples = e;
        *cap = nc;
    }
    c->examples[c->n_examples].text = vsr_pool_strndup(d->pool, text, len);
    c->examples[c->n_examples++].label = (uint32_t)label;
}

static int cls_blank(const char *s, size_t len)
{
    for (size_t k = 0; k < len; k++)
        if (s[k] != ' ' && s[k] != '\t' && s[k] != '\n' && s[k] != '\r')
            return 0;
    return 1;
}

/* labels: a list whose items are a label name (llm) or {name, description,
 * examples: [text, ...]} (local). */
static int decode_cls_labels(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj)
{
    VSR_UNUSED(f);
    vsr_sig_classifier_conf_t *c = obj;
    if (val->kind != CFG_NODE_SEQ || val->n == 0) {
        vsr__cfg_node_error(d, val, "labels must be a non-empty list of labels ({name, examples} or names)");
        return -1;
    }
    size_t lcap = 0, ecap = 0;
    int rc = 0;
    for (size_t i = 0; i < val->n; i++) {
        const cfg_node_t *it = val->items[i], *nm = it, *ex = NULL;
        if (it->kind == CFG_NODE_MAP) {
            nm = NULL;
            for (size_t k = 0; k < it->n; k++) {
                const cfg_node_t *key = it->items[2 * k], *v = it->items[2 * k + 1];
                if (key->kind == CFG_NODE_SCALAR && vsr_slice_eq_cstr(vsr_slice(key->str, key->len), "name"))
                    nm = v;
                else if (key->kind == CFG_NODE_SCALAR && vsr_slice_eq_cstr(vsr_slice(key->str, key->len), "examples"))
                    ex = v;
                else if (!(key->kind == CFG_NODE_SCALAR &&
                           vsr_slice_eq_cstr(vsr_slice(key->str, key->len), "description"))) {
                    vsr__cfg_node_error(d, key, "unknown key %s (a label has name, description, examples)",
                                        vsr__cfg_quote(d->pool, key->str, key->len));
                    rc = -1;
                }
            }
            if (nm == NULL) {
                vsr__cfg_node_error(d, it, "missing required key \"name\"");
                rc = -1;
                continue;
            }
        }
        cfg_field_t nf = {.key = "name"};
        const char *name = vsr__cfg_get_string(d, &nf, nm);
        if (name == NULL) {
            rc = -1;
            continue;
        }
        size_t before = c->n_labels;
        int li = cls_label(d, c, name, strlen(name), &lcap);
        if (li < 0) {
            vsr__cfg_node_error(d, nm, "at most %d labels per classifier", VSR_CLS_MAX_LABELS);
            return -1;
        }
        if (c->n_labels == before) {
            vsr__cfg_node_error(d, nm, "label %s is listed twice", quote_str(d, name));
            rc = -1;
        }
        if (ex == NULL || (ex->kind == CFG_NODE_SCALAR && ex->type == CFG_NULL))
            continue;
        if (ex->kind != CFG_NODE_SEQ) {
            vsr__cfg_node_error(d, ex, "examples must be a list of texts, got %s", vsr__cfg_node_what(ex));
            rc = -1;
            continue;
        }
        for (size_t k = 0; k < ex->n; k++) {
            const char *t = vsr__cfg_get_text(d, ex->items[k]);
            if (t == NULL) {
                rc = -1;
            } else if (cls_blank(t, ex->items[k]->len)) {
                vsr__cfg_node_error(d, ex->items[k], "an example must not be empty or blank");
                rc = -1;
            } else if (ex->items[k]->len > VSR_CLS_MAX_TEXT_BYTES) {
                vsr__cfg_node_error(d, ex->items[k], "an example is at most %d bytes, got %zu", VSR_CLS_MAX_TEXT_BYTES,
                                    (size_t)ex->items[k]->len);
                rc = -1;
            } else {
                cls_add_example(d, c, t, ex->items[k]->len, li, &ecap);
            }
        }
    }
    return rc;
}

/* The directory of the configuration file (with its slash), "" when none. */
static size_t cls_dir_len(const char *file)
{
    const char *slash = file ? strrchr(file, '/') : NULL;
    return slash ? (size_t)(slash - file) + 1 : 0;
}

/* Reads the bank at val's path: one {"text": T, "label": L} object a
 * line (blank lines skipped), at most VSR_CLS_MAX_FILE_LINES of them and
 * VSR_CLS_MAX_TEXT_BYTES a text; errors name the bank's FILE:LINE. */
static void cls_path(cfg_decoder_t *d, const char *rel, vsr_buf_t *path)
{
    if (rel[0] != '/')
        vsr_buf_append(path, d->dg->file, cls_dir_len(d->dg->file));
    vsr_buf_append_cstr(path, rel);
    vsr_buf_append(path, "", 1);
}

/* With `fixed` (the classifier lists its labels), the bank's labels must be
 * among them: the list names and orders the classes. */
static int cls_read_bank(cfg_decoder_t *d, const cfg_node_t *val, vsr_sig_classifier_conf_t *c, const char *rel,
                         int fixed)
{
    vsr_buf_t path;
    vsr_buf_init(&path, 0);
    cls_path(d, rel, &path);
    const char *file = path.data;
    int rc = -1;
    char *data = NULL;
    /* labels and examples given inline are kept: growing from their count
     * reallocates before the first write past them */
    size_t len = 0, lcap = c->n_labels, ecap = c->n_examples;
    struct stat sb;
    if (stat(file, &sb) == 0 && !S_ISREG(sb.st_mode)) {
        vsr__cfg_node_error(d, val, "model_path: %s is not a regular file", quote_str(d, file));
        goto out;
    }
    FILE *fp = fopen(file, "rb");
    if (fp == NULL) {
        vsr__cfg_node_error(d, val, "model_path: cannot open %s: %s", quote_str(d, file), strerror(errno));
        goto out;
    }
    long size = fseek(fp, 0, SEEK_END) == 0 ? ftell(fp) : -1;
    if (size < 0 || fseek(fp, 0, SEEK_SET) != 0) {
        fclose(fp);
        vsr__cfg_node_error(d, val, "model_path: cannot read %s (not a regular file?)", quote_str(d, file));
        goto out;
    }
    if ((unsigned long)size <= VSR_CLS_MAX_FILE_BYTES) {
        data = vsr_malloc((size_t)size + 1);
        len = fread(data, 1, (size_t)size + 1, fp);
    }
    int bad = ferror(fp);
    fclose(fp);
    if (bad) {
        vsr__cfg_node_error(d, val, "model_path: cannot read %s", quote_str(d, file));
        goto out;
    }
    if ((unsigned long)size > VSR_CLS_MAX_FILE_BYTES || len > (size_t)size) {
        vsr__cfg_node_error(d, val, "model_path: %s is larger than %u bytes", quote_str(d, file),
                            (unsigned)VSR_CLS_MAX_FILE_BYTES);
        goto out;
    }
    size_t lines = 0, lineno = 0;
    const char *p = data, *end = data + len;
    rc = 0;
    while (p < end && rc == 0) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *le = nl ? nl : end;
        lineno++;
        if (!cls_blank(p, (size_t)(le - p))) {
            vsr_json_t j;
            memset(&j, 0, sizeof(j));
            uint32_t tl, tt;
            vsr_slice_t ls = VSR_SLICE_NULL, ts = VSR_SLICE_NULL;
            const char *why = NULL;
            if (++lines > VSR_CLS_MAX_FILE_LINES)
                why = "more than " CLS_XSTR(VSR_CLS_MAX_FILE_LINES) " examples";
            else if (vsr_json_parse(&j, p, (size_t)(le - p), NULL) != VSR_OK || vsr_json_type(&j, 0) != VSR_JSON_OBJECT)
                why = "expected a JSON object {\"text\": ..., \"label\": ...}";
            else if (vsr_json_object_get(&j, 0, "text", &tt) != VSR_OK || vsr_json_type(&j, tt) != VSR_JSON_STRING ||
                     vsr_json_string(&j, tt, d->pool, &ts) != VSR_OK)
                why = "\"text\" must be a string";
            else if (vsr_json_object_get(&j, 0, "label", &tl) != VSR_OK || vsr_json_type(&j, tl) != VSR_JSON_STRING ||
                     vsr_json_string(&j, tl, d->pool, &ls) != VSR_OK || ls.len == 0)
                why = "\"label\" must be a non-empty string";
            else if (cls_blank(ts.p, ts.len))
                why = "\"text\" must not be empty or blank";
            else if (ts.len > VSR_CLS_MAX_TEXT_BYTES)
                why = "\"text\" is longer than " CLS_XSTR(VSR_CLS_MAX_TEXT_BYTES) " bytes";
            else if (memchr(ls.p, '\0', ls.len) || memchr(ts.p, '\0', ts.len))
                why = "a NUL character in \"text\" or \"label\"";
            size_t known = c->n_labels;
            int li = why ? -1 : cls_label(d, c, ls.p, ls.len, &lcap);
            if (why == NULL && li < 0)
                why = "more than " CLS_XSTR(VSR_CLS_MAX_LABELS) " labels";
            else if (why == NULL && fixed && c->n_labels > known) {
                c->n_labels = known;
                li = -1;
                why = "\"label\" is not one of the classifier's labels";
            }
            if (why == NULL)
                cls_add_example(d, c, ts.p, ts.len, li, &ecap);
            vsr_json_free(&j);
            if (why) {
                vsr__cfg_node_error(d, val, "model_path: %s:%zu: %s", file, lineno, why);
                rc = -1;
            }
        }
        p = nl ? nl + 1 : end;
    }
    if (rc == 0 && c->n_examples == 0) {
        vsr__cfg_node_error(d, val, "model_path: %s holds no examples", quote_str(d, file));
        rc = -1;
    }
out:
    vsr_free(data);
    vsr_buf_free(&path);
    return rc;
}

static int decode_cls_model_path(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj)
{
    if (vsr__cfg_string(d, f, val, obj) != 0)
        return -1;
    return 0; /* read in finish, once the type and the labels are known */
}

/* An llm classifier's model: remembered with its position for cfg_check.c. */
static int decode_cls_model(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj)
{
    if (vsr__cfg_string(d, f, val, obj) != 0)
        return -1;
    vsr__cfg_mark(d, (char *)obj + f->offset, val);
    return 0;
}

static const cfg_field_t classifier_fields[] = {
    {.key = "name", .decode = vsr__cfg_string, .flags = CFG_REQUIRED, .offset = CLS_OFF(name)},
    {.key = "description", .decode = vsr__cfg_accept_text},
    {.key = "type", .decode = vsr__cfg_choice, .flags = CFG_NOCASE, .offset = CLS_OFF(type), .choices = cls_types},
    {.key = "threshold", .decode = vsr__cfg_double, .offset = CLS_OFF(threshold), .dmin = 0, .dmax = 1},
    {.key = "labels", .decode = decode_cls_labels, .flags = CFG_NULL_OK},
    {.key = "model_path", .decode = decode_cls_model_path, .offset = CLS_OFF(model_path)},
    {.key = "model", .decode = decode_cls_model, .offset = CLS_OFF(model)},
    {.key = "instructions", .decode = vsr__cfg_accept_text},
    {.key = "timeout", .decode = vsr__cfg_duration_ms, .offset = CLS_OFF(timeout_ms)},
    {.key = "use_cpu", .decode = vsr__cfg_bool, .offset = CLS_OFF(use_cpu)},
    {.key = "backend", .decode = vsr__cfg_object, .flags = CFG_NULL_OK, .offset = CLS_OFF(remote),
     .spec = &vsr__cfg_remote_backend_spec},
};

static void init_classifier(cfg_decoder_t *d, void *obj)
{
    VSR_UNUSED(d);
    ((vsr_sig_classifier_conf_t *)obj)->threshold = VSR_CLS_DEFAULT_THRESHOLD;
}

static void finish_classifier(cfg_decoder_t *d, const cfg_node_t *map, void *obj, const cfg_node_t *const *seen,
                              size_t index)
{
    VSR_UNUSED(index);
    vsr_sig_classifier_conf_t *c = obj;
    VSR_UNUSED(seen);
    const cfg_node_t *labels = vsr__cfg_map_get(map, "labels");
    if (labels && vsr__cfg_is_empty(labels))
        labels = NULL;
    const cfg_node_t *mp = vsr__cfg_map_get(map, "model_path"), *ins = vsr__cfg_map_get(map, "instructions");
    if (ins && ins->kind == CFG_NODE_SCALAR && ins->type == CFG_STR)
        c->instructions = vsr_pool_strndup(d->pool, ins->str, ins->len);
    if (c->remote.protocol) { /* a remote classifier's label scores: label names are enough */
        if (c->type == VSR_CLS_LLM)
            vsr__cfg_node_error(d, vsr__cfg_map_get(map, "backend"), "backend applies to a classifier of type "
                                                                     "local (an llm classifier names a model)");
        if (c->n_labels == 0)
            vsr__cfg_node_error(d, map, "a classifier with a backend needs \"labels\" (the labels it reads)");
        if (mp)
            vsr__cfg_node_error(d, mp, "model_path and backend exclude each other");
        return; /* its external model is checked with the document (cfg_check.c) */
    }
    if (c->type == VSR_CLS_LLM) {
        if (c->model == NULL)
            vsr__cfg_node_error(d, map, "an llm classifier needs \"model\"");
        if (c->n_labels == 0)
            vsr__cfg_node_error(d, map, "an llm classifier needs \"labels\"");
        if (mp)
            vsr__cfg_node_error(d, mp, "model_path applies to local classifiers (an llm classifier names a model)");
        return; /* its model is checked with the providers (cfg_check.c) */
    }
    if (c->model && vsr__cfg_map_get(map, "model"))
        vsr__cfg_node_error(d, vsr__cfg_map_get(map, "model"), "model applies to llm classifiers (a local "
                                                               "classifier reads model_path or inline labels)");
    if (c->model_path && mp && labels) {
        /* The reference's form: model_path a sequence-classification model
         * whose outputs the labels name, in order.  vsr's local classifier
         * reads a bank of examples; with labels, the bank's labels must be
         * among them. */
        vsr_buf_t path;
        vsr_buf_init(&path, 0);
        cls_path(d, c->model_path, &path);
        struct stat sb;
        int is_file = stat(path.data, &sb) == 0 && S_ISREG(sb.st_mode);
        vsr_buf_free(&path);
        if (!is_file) {
            vsr__cfg_node_error(d, mp,
                                "model_path %s names no JSONL file of examples: a sequence-classification model "
                                "directory (the reference's local classifier, its labels naming the model's outputs) "
                                "is not supported yet; vsr's local classifier reads {\"text\", \"label\"} lines "
                                "with those labels",
                                quote_str(d, c->model_path));
            return;
        }
    }
    if (c->model_path && mp) {
        if (cls_read_bank(d, mp, c, c->model_path, labels != NULL) != 0)
            return; /* said; the labels' examples are not known */
    } else if (!labels) {
        vsr__cfg_node_error(d, map, "a local classifier needs labels with examples, or model_path");
        return;
    }
    int has[VSR_CLS_MAX_LABELS] = {0};
    for (size_t i = 0; i < c->n_examples; i++)
        has[c->examples[i].label] = 1;
    for (size_t k = 0; k < c->n_labels; k++)
        if (!has[k]) {
            vsr__cfg_node_error(d, mp ? mp : labels, "label %s has no examples", quote_str(d, c->labels[k]));
            break;
        }
    if (c->n_labels == 1 && c->n_examples > 0)
        vsr__cfg_warn(d, "%s:%u:%u: classifier %s has one label: it wins on every request", d->dg->file, map->line,
                      map->col, quote_str(d, c->name ? c->name : ""));
}

static const cfg_spec_t classifier_spec = {
    .size = sizeof(vsr_sig_classifier_conf_t),
    .fields = classifier_fields,
    .n_fields = VSR_ARRAY_LEN(classifier_fields),
    .init = init_classifier,
    .finish = finish_classifier,
};

/* ---- the signals map ---- */

typedef struct {
    const char *family;
    const cfg_spec_t *spec;
    size_t offset, count_offset; /* in vsr_signals_conf_t */
} family_table_t;

#define SIG_OFF(m) offsetof(vsr_signals_conf_t, m)

static const family_table_t family_tables[] = {
    {"keywords", &keyword_spec, SIG_OFF(keywords), SIG_OFF(n_keywords)},
    {"context", &context_spec, SIG_OFF(context), SIG_OFF(n_context)},
    {"structure", &structure_spec, SIG_OFF(structure), SIG_OFF(n_structure)},
    {"conversation", &conversation_spec, SIG_OFF(conversation), SIG_OFF(n_conversation)},
    {"language", &language_spec, SIG_OFF(language), SIG_OFF(n_language)},
    {"role_bindings", &role_binding_spec, SIG_OFF(role_bindings), SIG_OFF(n_role_bindings)},
    {"embeddings", &embedding_spec, SIG_OFF(embeddings), SIG_OFF(n_embeddings)},
    {"domains", &domain_spec, SIG_OFF(domains), SIG_OFF(n_domains)},
    {"jailbreak", &jailbreak_spec, SIG_OFF(jailbreak), SIG_OFF(n_jailbreak)},
    {"pii", &pii_spec, SIG_OFF(pii), SIG_OFF(n_pii)},
    {"metadata", &vsr__cfg_metadata_spec, SIG_OFF(metadata), SIG_OFF(n_metadata)},
    {"events", &vsr__cfg_event_spec, SIG_OFF(events), SIG_OFF(n_events)},
    {"event_context", &vsr__cfg_event_spec, SIG_OFF(events), SIG_OFF(n_events)},
    {"input_modality", &vsr__cfg_input_modality_spec, SIG_OFF(input_modality), SIG_OFF(n_input_modality)},
    {"safety", &vsr__cfg_safety_spec, SIG_OFF(safety), SIG_OFF(n_safety)},
    {"preferences", &preference_spec, SIG_OFF(preferences), SIG_OFF(n_preferences)},
    {"reasks", &reask_spec, SIG_OFF(reasks), SIG_OFF(n_reasks)},
    {"fact_check", &fact_check_spec, SIG_OFF(fact_check), SIG_OFF(n_fact_check)},
    {"user_feedbacks", &user_feedback_spec, SIG_OFF(user_feedbacks), SIG_OFF(n_user_feedbacks)},
    {"modality", &modality_spec, SIG_OFF(modality), SIG_OFF(n_modality)},
    {"complexity", &complexity_spec, SIG_OFF(complexity), SIG_OFF(n_complexity)},
    {"kb", &kb_signal_spec, SIG_OFF(kb), SIG_OFF(n_kb)},
    {"classifiers", &classifier_spec, SIG_OFF(classifiers), SIG_OFF(n_classifiers)},
};

static const family_table_t *family_table(const char *family)
{
    for (size_t i = 0; i < VSR_ARRAY_LEN(family_tables); i++)
        if (strcmp(family_tables[i].family, family) == 0)
            return &family_tables[i];
    return NULL;
}

/* Every signal struct starts with `char *name`. */
static const char *signal_name(const family_table_t *t, const vsr_signals_conf_t *s, size_t i)
{
    const char *items = *(char *const *)((const char *)s + t->offset);
    return *(char *const *)(items + i * t->spec->size);
}

static size_t signal_count(const family_table_t *t, const vsr_signals_conf_t *s)
{
    return *(const size_t *)((const char *)s + t->count_offset);
}

static void check_signal_names(cfg_decoder_t *d, const family_table_t *t, const vsr_signals_conf_t *s,
                               const cfg_node_t *list)
{
    size_t n = signal_count(t, s);
    if (n < 2 || list->kind != CFG_NODE_SEQ || list->n != n)
        return;
    const char **keys = vsr_malloc(n * sizeof(*keys));
    const cfg_node_t **nodes = vsr_malloc(n * sizeof(*nodes));
    for (size_t i = 0; i < n; i++) {
        keys[i] = signal_name(t, s, i);
        const cfg_node_t *name = vsr__cfg_map_get(list->items[i], "name");
        nodes[i] = name ? name : list->items[i];
    }
    char what[64];
    snprintf(what, sizeof(what), "%s signal name", t->family);
    vsr__cfg_check_unique(d, what, keys, nodes, n);
    vsr_free(keys);
    vsr_free(nodes);
}

int vsr__cfg_decode_signals(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj)
{
    vsr_signals_conf_t *s = (vsr_signals_conf_t *)((char *)obj + f->offset);
    if (val->kind != CFG_NODE_MAP) {
        vsr__cfg_node_error(d, val, "expected a mapping of signal families, got %s", vsr__cfg_node_what(val));
        return -1;
    }
    unsigned before = d->dg->n_errors;
    for (size_t i = 0; i < val->n; i++) {
        const cfg_node_t *k = val->items[2 * i], *v = val->items[2 * i + 1];
        if (k->kind != CFG_NODE_SCALAR || k->type != CFG_STR) {
            vsr__cfg_node_error(d, k, "expected a string key, got %s", vsr__cfg_node_what(k));
            continue;
        }
        const family_t *fam = family_by_key(k->str, k->len);
        if (fam == NULL) {
            vsr__cfg_node_error(d, k, "unknown signal family %s", vsr__cfg_quote(d->pool, k->str, k->len));
            continue;
        }
        if (strcmp(fam->family, "hallucination") == 0) { /* response-stage (cfg_hallucination.c) */
            vsr__cfg_hallucination_signals(d, v, s);
            continue;
        }
        if (!fam->implemented) {
            if (!vsr__cfg_deep_empty(v))
                vsr__cfg_node_error(d, k, "signal family \"%s\" is not supported yet%s", fam->family,
                                    fam->model_backed ? " (model-backed signals need the model runtime)" : "");
            continue;
        }
        if (v->kind == CFG_NODE_SCALAR && v->type == CFG_NULL)
            continue;
        if (strcmp(fam->family, "event_context") == 0) {
            if (vsr__cfg_map_get(val, "events") != NULL) {
                vsr__cfg_node_error(d, k, "event_context and events are one family: write its signals under events");
                continue;
            }
            vsr__cfg_warn(d, "routing.signals.event_context is read as routing.signals.events (an unverified alias "
                             "of the reference's docs)");
        }
        const family_table_t *t = family_table(fam->family);
        cfg_field_t lf = {.key = fam->family, .spec = t->spec, .offset = t->offset, .count_offset = t->count_offset};
        size_t saved = vsr__cfg_path_push(d, fam->family);
        vsr__cfg_list(d, &lf, v, s);
        vsr__cfg_path_pop(d, saved);
        check_signal_names(d, t, s, v);
    }
    return d->dg->n_errors == before ? 0 : -1;
}

int vsr__cfg_condition_type(const char *type)
{
    const family_t *fam = family_by_cond(type);
    return fam == NULL ? -1 : fam->implemented;
}

int vsr__cfg_condition_model_backed(const char *type)
{
    const family_t *fam = family_by_cond(type);
    return fam != NULL && fam->model_backed;
}

/* ---- rule leaves --------------------------------------------------------------- */

/* The family table and index of the signal (type, name) resolves to in s,
 * or -1 (an ext signal is not found here). */
static long declared_index(const vsr_signals_conf_t *s, const char *type, const char *name,
                           const family_table_t **table)
{
    const family_t *fam = family_by_cond(type);
    const family_table_t *t = fam && fam->family ? family_table(fam->family) : NULL;
    *table = t;
    if (t == NULL)
        return -1;
    size_t len = strlen(name);
    const char *colon = strchr(name, ':');
    if (strcmp(fam->family, "complexity") == 0 && colon != NULL && colon > name)
        len = (size_t)(colon - name); /* as the reference: the level names its signal */
    for (size_t i = 0, n = signal_count(t, s); i < n; i++) {
        const char *nm = signal_name(t, s, i);
        if (nm && strlen(nm) == len && memcmp(nm, name, len) == 0)
            return (long)i;
    }
    if (strcmp(fam->family, "role_bindings") == 0)
        for (size_t i = 0; i < s->n_role_bindings; i++)
            if (s->role_bindings[i].role && strcmp(s->role_bindings[i].role, name) == 0)
                return (long)i;
    return -1;
}

int vsr__cfg_signal_declared(const vsr_signals_conf_t *s, const char *type, const char *name)
{
    const family_table_t *t;
    if (declared_index(s, type, name, &t) >= 0)
        return 1;
    for (size_t i = 0; i < s->n_ext; i++)
        if (s->ext[i].type && s->ext[i].name && strcmp(s->ext[i].type, type) == 0 && strcmp(s->ext[i].name, name) == 0)
            return 1;
    return 0;
}

int vsr__cfg_signal_import(cfg_decoder_t *d, vsr_signals_conf_t *dst, const vsr_signals_conf_t *src, const char *type,
                           const char *name)
{
    const family_table_t *t;
    long i = declared_index(src, type, name, &t);
    if (i < 0)
        return 0;
    size_t n = signal_count(t, dst), size = t->spec->size;
    char **items = (char **)((char *)dst + t->offset);
    char *grown = vsr_pool_alloc(d->pool, (n + 1) * size);
    if (n > 0)
        memcpy(grown, *items, n * size);
    memcpy(grown + n * size, *(char *const *)((const char *)src + t->offset) + (size_t)i * size, size);
    *items = grown;
    *(size_t *)((char *)dst + t->count_offset) = n + 1;
    return 1;
}

typedef struct {
    cfg_index_t names[VSR_ARRAY_LEN(family_tables)];
    int complete[VSR_ARRAY_LEN(family_tables)]; /* every signal of the family decoded a name */
    cfg_index_t roles;                          /* role_bindings[].role */
    const vsr_signals_conf_t *sig;
} signal_index_t;

/* Every leaf resolves to a declared signal of the same recipe: recipes
 * have their own signal namespace. */
static void resolve_leaf(cfg_decoder_t *d, const signal_index_t *ix, const vsr_rule_conf_t *n, const char *where)
{
    if (n->kind != VSR_RULE_LEAF) {
        for (size_t i = 0; i < n->n_children; i++)
            resolve_leaf(d, ix, &n->children[i], where);
        return;
    }
    if (n->type == NULL || n->name == NULL)
        return;
    const family_t *fam = family_by_cond(n->type);
    const family_table_t *t = fam && fam->family ? family_table(fam->family) : NULL;
    if (t == NULL)
        return;
    size_t ti = (size_t)(t - family_tables);
    const char *name = n->name;
    if (strcmp(fam->family, "complexity") == 0) {
        /* "<signal>:easy|medium|hard" */
        const char *colon = strrchr(name, ':');
        if (colon == NULL || (strcmp(colon + 1, "easy") != 0 && strcmp(colon + 1, "medium") != 0 &&
                              strcmp(colon + 1, "hard") != 0)) {
            vsr__cfg_error(d->dg, n->line, n->col, "complexity condition %s must name a level: \"<signal>:easy\", "
                           "\"<signal>:medium\" or \"<signal>:hard\"", quote_str(d, name));
            return;
        }
        char *base = vsr_pool_alloc(d->pool, (size_t)(colon - name) + 1);
        memcpy(base, name, (size_t)(colon - name));
        base[colon - name] = '\0';
        name = base;
    }
    /* a classifier condition's label is one of the classifier's */
    const cfg_name_t *hit = vsr__cfg_index_find(&ix->names[ti], name, NULL);
    if (hit && n->label && strcmp(fam->family, "classifiers") == 0) {
        const vsr_sig_classifier_conf_t *c = &ix->sig->classifiers[hit->index];
        int found = c->n_labels == 0; /* its labels failed to decode: reported already */
        for (size_t k = 0; k < c->n_labels && !found; k++)
            found = strcmp(c->labels[k], n->label) == 0;
        if (!found)
            vsr__cfg_error(d->dg, n->line, n->col, "classifier %s has no label %s", quote_str(d, name),
                           quote_str(d, n->label));
        return;
    }
    /* a signal that failed to decode may be the one meant: reported already */
    if (!ix->complete[ti] || hit != NULL)
        return;
    /* an authz condition names a binding's role (or a binding) */
    if (strcmp(fam->family, "role_bindings") == 0 && vsr__cfg_index_find(&ix->roles, n->name, NULL) != NULL)
        return;
    vsr__cfg_error(d->dg, n->line, n->col, "%s signal %s is not declared in %s.signals.%s%s", n->type,
                   quote_str(d, name), where, fam->family,
                   strcmp(fam->family, "role_bindings") == 0 ? " (as a role or a binding name)" : "");
}

/* A request graph's signal predicates (loop.until, branch.if) resolve as
 * rule leaves do, at the position of their name. */
typedef struct {
    cfg_decoder_t *d;
    const signal_index_t *ix;
    const char *where;
} graph_leaves_t;

static void resolve_graph_leaf(const vsr_gnode_conf_t *n, void *arg)
{
    graph_leaves_t *g = arg;
    if (n->until.kind != VSR_GPRED_SIGNAL || n->until.signal_type == NULL || n->until.signal_name == NULL)
        return;
    const cfg_mark_t *at = vsr__cfg_mark_find(g->d, n->until.signal_name);
    vsr_rule_conf_t leaf = {.kind = VSR_RULE_LEAF, .type = n->until.signal_type, .name = n->until.signal_name,
                            .line = at ? at->line : n->line, .col = at ? at->col : n->col};
    resolve_leaf(g->d, g->ix, &leaf, g->where);
}

void vsr__cfg_resolve_leaves(cfg_decoder_t *d, const vsr_recipe_conf_t *r, const char *where)
{
    signal_index_t ix;
    memset(&ix, 0, sizeof(ix));
    ix.sig = &r->signals;
    for (size_t t = 0; t < VSR_ARRAY_LEN(family_tables); t++) {
        size_t count = signal_count(&family_tables[t], &r->signals);
        ix.complete[t] = 1;
        for (size_t i = 0; i < count; i++) {
            const char *name = signal_name(&family_tables[t], &r->signals, i);
            ix.complete[t] &= name != NULL;
            vsr__cfg_index_add(&ix.names[t], name, i);
        }
        vsr__cfg_index_sort(&ix.names[t]);
    }
    for (size_t i = 0; i < r->signals.n_role_bindings; i++)
        vsr__cfg_index_add(&ix.roles, r->signals.role_bindings[i].role, i);
    vsr__cfg_index_sort(&ix.roles);
    for (size_t i = 0; i < r->n_decisions; i++)
        if (r->decisions[i].rules != NULL)
            resolve_leaf(d, &ix, r->decisions[i].rules, where);
    graph_leaves_t gl = {d, &ix, where};
    for (size_t i = 0; i < r->n_decisions; i++)
        if (r->decisions[i].algo.kind == VSR_ALGO_GRAPH)
            vsr__cfg_graph_walk(&r->decisions[i].algo.u.graph, resolve_graph_leaf, &gl);
    for (size_t t = 0; t < VSR_ARRAY_LEN(family_tables); t++)
        vsr__cfg_index_free(&ix.names[t]);
    vsr__cfg_index_free(&ix.roles);
}
