/*
 * classify.c — the families the model runtime's classifiers decide
 * (ref §1.9): `domains` (the built-in domain classifier's top class),
 * `jailbreak` (the prompt guard: classifier, contrastive or hybrid) and
 * `pii` (entity detection).  Each signal asks for one `classify` task,
 *   {"model": "domain" | "jailbreak" | "pii", "text": T, ...options}
 * and reads its value from the result (docs/signals.md, docs/runtime.md):
 *   labels:   {"labels": [{"label": L, "score": P}, ...]}
 *   entities: {"entities": [{"type": T, "start": B, "end": B, "score": S}, ...]}
 * The text is the routing text (the latest user message), or with
 * include_history every message's text; it is shortened to the head, middle
 * and tail of what a model sees (2,048 runes; 16,384 for pii, whose
 * detector is linear and must not miss what sits in the middle).
 *
 * Thresholds default to global.model_catalog.modules (prompt_guard 0.7,
 * classifier.domain 0.5 with fallback_category "other", classifier.pii
 * 0.9); a signal's own threshold wins.
 */
#include <math.h>
#include <stdio.h>

#include "signals/signals-int.h"

#define PII_MAX_RUNES 16384
#define MAX_LABELS 256   /* labels or entities read from one result */

typedef enum { K_DOMAIN, K_JAILBREAK, K_PII } kind_t;

static const char *const jb_methods[] = {"classifier", "contrastive", "hybrid"};

typedef struct {
    kind_t kind;
    const char *model;   /* the runtime classifier (static) */
    double threshold;
    int include_history;
    size_t max_runes;
    char **names;        /* domain: the classes that match (the signal's name and its mmlu_categories);
                          * pii: pii_types_allowed.  Normalised (see norm_label). */
    size_t n_names;
    char *fallback;      /* domain: the class predicted below the threshold */
    int custom;          /* domain: names none of the 14 classes; with a description it matches on that */
    char *opts;          /* JSON members appended after "text" (jailbreak: method and patterns), or NULL */
    vsr__remote_t remote; /* a remote classifier instead of the runtime's model (global.model_catalog.modules) */
    char **positive;     /* jailbreak: the labels whose scores add up to the score (normalised); none: "jailbreak" */
    size_t n_positive;
} cls_t;

/* Labels compare in lower case, with '_', '-' and runs of spaces as one
 * space ("computer_science" = "Computer Science"). */
static char *norm_label(const char *s, size_t len)
{
    char *out = vsr_malloc(len + 1);
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        char ch = s[i];
        if (ch == '_' || ch == '-' || ch == ' ' || ch == '\t') {
            if (n > 0 && out[n - 1] != ' ')
                out[n++] = ' ';
            continue;
        }
        out[n++] = (ch >= 'A' && ch <= 'Z') ? (char)(ch - 'A' + 'a') : ch;
    }
    while (n > 0 && out[n - 1] == ' ')
        n--;
    out[n] = '\0';
    return out;
}

static int label_in(const cls_t *k, vsr_slice_t label)
{
    char *l = norm_label(label.p ? label.p : "", label.len);
    int found = 0;
    for (size_t i = 0; i < k->n_names && !found; i++)
        found = strcmp(k->names[i], l) == 0;
    vsr_free(l);
    return found;
}

static void add_name(cls_t *k, const char *s)
{
    k->names = vsr_realloc(k->names, (k->n_names + 1) * sizeof(char *));
    k->names[k->n_names++] = norm_label(s, strlen(s));
}

static cls_t *new_cls(kind_t kind, const char *model, double threshold, int include_history, size_t max_runes)
{
    cls_t *k = vsr_calloc(1, sizeof(*k));
    k->kind = kind;
    k->model = model;
    k->threshold = threshold;
    k->include_history = include_history;
    k->max_runes = max_runes;
    return k;
}

int vsr__domain_compile(vsr_signals_t *s, const void *conf, const char *path, void **state, vsr_buf_t *err)
{
    VSR_UNUSED(path);
    VSR_UNUSED(err);
    const vsr_sig_domain_conf_t *c = conf;
    const vsr_modules_conf_t *m = s->modules;
    cls_t *k = new_cls(K_DOMAIN, "domain", m ? m->domain_threshold : VSR_DEFAULT_DOMAIN_THRESHOLD, 0,
                       VSR__MODEL_MAX_RUNES);
    add_name(k, c->name);
    for (size_t i = 0; i < c->categories.n; i++)
        add_name(k, c->categories.items[i]);
    const char *fb = m && m->domain_fallback ? m->domain_fallback : "other";
    k->fallback = norm_label(fb, strlen(fb));
    static const char *const classes[] = {"biology", "business", "chemistry", "computer science", "economics",
                                          "engineering", "health", "history", "law", "math", "other",
                                          "philosophy", "physics", "psychology"};
    k->custom = 1;
    for (size_t i = 0; i < k->n_names && k->custom; i++)
        for (size_t j = 0; j < VSR_ARRAY_LEN(classes) && k->custom; j++)
            k->custom = strcmp(k->names[i], classes[j]) != 0;
    if (c->description && c->description[0]) {
        vsr_buf_t b;
        vsr_buf_init(&b, 0);
        vsr_buf_append_cstr(&b, ",\"description\":");
        vsr_buf_append_json_string(&b, vsr_slice_cstr(c->description));
        vsr_buf_append(&b, "", 1);
        k->opts = b.data; /* owned */
    }
    vsr__remote_init(&k->remote, m ? &m->domain_remote : NULL, k->max_runes, "domain");
    *state = k;
    return VSR_OK;
}

static void append_list(vsr_buf_t *b, const char *key, const vsr_strlist_conf_t *l)
{
    if (l->n == 0)
        return;
    vsr_buf_printf(b, ",\"%s\":[", key);
    for (size_t i = 0; i < l->n; i++) {
        if (i)
            vsr_buf_append_cstr(b, ",");
        vsr_buf_append_json_string(b, vsr_slice_cstr(l->items[i]));
    }
    vsr_buf_append_cstr(b, "]");
}

int vsr__jailbreak_compile(vsr_signals_t *s, const void *conf, const char *path, void **state, vsr_buf_t *err)
{
    VSR_UNUSED(path);
    VSR_UNUSED(err);
    const vsr_sig_jailbreak_conf_t *c = conf;
    const vsr_modules_conf_t *m = s->modules;
    double th = c->has_threshold ? c->threshold : m ? m->guard_threshold : VSR_DEFAULT_GUARD_THRESHOLD;
    cls_t *k = new_cls(K_JAILBREAK, "jailbreak", th, c->include_history, VSR__MODEL_MAX_RUNES);
    vsr_buf_t b;
    vsr_buf_init(&b, 0);
    vsr_jb_method_t method = c->has_method ? c->method : VSR_JB_DEFAULT_METHOD;
    vsr_buf_printf(&b, ",\"method\":\"%s\"", jb_methods[method <= VSR_JB_HYBRID ? method : 0]);
    if (method != VSR_JB_CLASSIFIER) {
        append_list(&b, "jailbreak_patterns", &c->jailbreak_patterns);
        append_list(&b, "benign_patterns", &c->benign_patterns);
    }
    vsr_buf_append(&b, "", 1);
    k->opts = b.data; /* owned */
    if (m && m->guard_remote.protocol) {
        vsr__remote_init(&k->remote, &m->guard_remote, k->max_runes, "jailbreak");
        for (size_t i = 0; i < m->guard_positive.n; i++) {
            const char *l = m->guard_positive.items[i];
            k->positive = vsr_realloc(k->positive, (k->n_positive + 1) * sizeof(char *));
            k->positive[k->n_positive++] = norm_label(l, strlen(l));
        }
    }
    *state = k;
    return VSR_OK;
}

int vsr__pii_compile(vsr_signals_t *s, const void *conf, const char *path, void **state, vsr_buf_t *err)
{
    VSR_UNUSED(path);
    VSR_UNUSED(err);
    const vsr_sig_pii_conf_t *c = conf;
    const vsr_modules_conf_t *m = s->modules;
    double th = c->has_threshold ? c->threshold : m ? m->pii_threshold : VSR_DEFAULT_PII_THRESHOLD;
    cls_t *k = new_cls(K_PII, "pii", th, c->include_history, PII_MAX_RUNES);
    for (size_t i = 0; i < c->allowed.n; i++)
        add_name(k, c->allowed.items[i]);
    /* the detector applies the threshold during its pass (a candidate below it does not hide a shorter one above) */
    char opts[64];
    snprintf(opts, sizeof(opts), ",\"threshold\":%.6g", th);
    k->opts = vsr_strdup(opts);
    vsr__remote_init(&k->remote, m ? &m->pii_remote : NULL, k->max_runes, "pii");
    *state = k;
    return VSR_OK;
}

void vsr__classify_free(void *state)
{
    cls_t *k = state;
    if (k == NULL)
        return;
    for (size_t i = 0; i < k->n_names; i++)
        vsr_free(k->names[i]);
    vsr_free(k->names);
    vsr_free(k->fallback);
    vsr_free(k->opts);
    vsr__remote_free(&k->remote);
    for (size_t i = 0; i < k->n_positive; i++)
        vsr_free(k->positive[i]);
    vsr_free(k->positive);
    vsr_free(k);
}

/* Without the runtime's answer there is nothing to decide: no match. */
vsr_signal_result_t vsr__classify_eval(vsr__ctx_t *c, const void *state)
{
    VSR_UNUSED(c);
    VSR_UNUSED(state);
    vsr_signal_result_t r = {0};
    return r;
}

/* The text a signal classifies: the routing text, or with include_history
 * every message's text in order, one blank line between them. */
static vsr_slice_t subject(vsr__ctx_t *c, const cls_t *k)
{
    const vsr_chat_view_t *chat = c->in->chat;
    if (!k->include_history || chat == NULL || chat->n_messages <= 1)
        return c->in->text;
    vsr_buf_t b;
    vsr_buf_init(&b, 0);
    for (size_t i = 0; i < chat->n_messages; i++) {
        vsr_slice_t t = chat->messages[i].text;
        if (t.len == 0)
            continue;
        if (b.len)
            vsr_buf_append_cstr(&b, "\n\n");
        vsr_buf_append_slice(&b, t);
    }
    vsr_slice_t out = vsr_pool_dup_slice(c->pool, vsr_buf_slice(&b));
    vsr_buf_free(&b);
    return out;
}

/* {"model":MODEL,"text":TEXT(shortened)OPTS}: a classify task. */
static void classify_payload(vsr_pool_t *pool, const char *model, vsr_slice_t text, size_t max_runes,
                             const char *opts, vsr_signal_task_t *out)
{
    vsr_buf_t b;
    vsr_buf_init(&b, 0);
    vsr_buf_printf(&b, "{\"model\":\"%s\",\"text\":", model);
    vsr_buf_append_slice(&b, vsr__text_json(pool, text, max_runes));
    if (opts)
        vsr_buf_append_cstr(&b, opts);
    vsr_buf_append_cstr(&b, "}");
    out->type = "classify";
    out->payload = vsr_pool_dup_slice(pool, vsr_buf_slice(&b));
    vsr_buf_free(&b);
}

int vsr__classify_task(vsr__ctx_t *c, const void *state, vsr_signal_task_t *out)
{
    const cls_t *k = state;
    vsr_slice_t text = subject(c, k);
    if (text.len == 0)
        return 0; /* nothing to classify: no match */
    if (k->remote.model) /* pii: the threshold the detector applies */
        vsr__remote_task(c->pool, &k->remote, text, k->kind == K_PII ? k->opts : NULL, out);
    else
        classify_payload(c->pool, k->model, text, k->max_runes, k->opts, out);
    return 1;
}

void vsr_signals_guard_task(vsr_pool_t *pool, vsr_slice_t text, int method, vsr_signal_task_t *out)
{
    char opts[48];
    snprintf(opts, sizeof(opts), ",\"method\":\"%s\"",
             jb_methods[method >= 0 && method <= VSR_JB_HYBRID ? method : 0]);
    classify_payload(pool, "jailbreak", text, VSR__MODEL_MAX_RUNES, opts, out);
}

/* A number member of object o in [0, 1]. */
static int get_score(const vsr_json_t *j, uint32_t o, const char *key, double *out)
{
    uint32_t t;
    double v;
    if (vsr_json_object_get(j, o, key, &t) != VSR_OK || vsr_json_type(j, t) != VSR_JSON_NUMBER ||
        vsr_json_number(j, t, &v) != VSR_OK || !isfinite(v) || v < 0 || v > 1)
        return VSR_ERR_INVALID;
    *out = v;
    return VSR_OK;
}

static int get_string(const vsr_json_t *j, uint32_t o, const char *key, vsr_pool_t *pool, vsr_slice_t *out)
{
    uint32_t t;
    if (vsr_json_object_get(j, o, key, &t) != VSR_OK || vsr_json_type(j, t) != VSR_JSON_STRING ||
        vsr_json_string(j, t, pool, out) != VSR_OK)
        return VSR_ERR_INVALID;
    return VSR_OK;
}

static int consume_labels(vsr__ctx_t *c, const cls_t *k, const vsr_json_t *j, vsr_signal_result_t *out)
{
    uint32_t arr;
    if (vsr_json_object_get(j, 0, "labels", &arr) != VSR_OK || vsr_json_type(j, arr) != VSR_JSON_ARRAY ||
        j->toks[arr].count == 0 || j->toks[arr].count > MAX_LABELS)
        return VSR_ERR_INVALID;
    vsr_slice_t top = VSR_SLICE_NULL, fb_label = VSR_SLICE_NULL;
    double top_p = -1, fb_p = -1, jb_p = -1;
    uint32_t t = arr + 1;
    for (uint32_t i = 0; i < j->toks[arr].count; i++, t = j->toks[t].next) {
        vsr_slice_t label;
        double p;
        if (vsr_json_type(j, t) != VSR_JSON_OBJECT || get_string(j, t, "label", c->pool, &label) != VSR_OK ||
            get_score(j, t, "score", &p) != VSR_OK)
            return VSR_ERR_INVALID;
        if (p > top_p) {
            top_p = p;
            top = label;
        }
        char *l = norm_label(label.p ? label.p : "", label.len);
        if (k->kind == K_DOMAIN && strcmp(l, k->fallback) == 0) {
            fb_p = p;
            fb_label = label;
        }
        if (k->kind == K_JAILBREAK) {
            int positive = k->n_positive == 0 && strcmp(l, "jailbreak") == 0;
            for (size_t q = 0; q < k->n_positive && !positive; q++)
                positive = strcmp(l, k->positive[q]) == 0;
            if (positive) /* positive_labels: their probabilities add up */
                jb_p = VSR_MIN(1.0, (jb_p < 0 ? 0 : jb_p) + p);
        }
        vsr_free(l);
    }
    if (k->kind == K_JAILBREAK) {
        if (jb_p < 0)
            return VSR_ERR_INVALID; /* an answer without the score this family reads */
        out->matched = jb_p >= k->threshold;
        out->confidence = out->matched ? jb_p : 0;
        out->value = jb_p;
        return VSR_OK;
    }
    /* a domain of its own (no MMLU-Pro class): its description's similarity decides */
    double sim;
    if (k->custom && k->opts && get_score(j, 0, "description_similarity", &sim) == VSR_OK) {
        out->value = sim;
        out->matched = sim >= VSR__DOMAIN_DESCRIPTION_MIN;
        out->confidence = out->matched ? sim : 0;
        return VSR_OK;
    }
    /* domains: the top class when it is sure enough, else the fallback class */
    int sure = top_p >= k->threshold;
    out->value = top_p;
    if (sure) {
        out->matched = label_in(k, top);
        out->confidence = out->matched ? top_p : 0;
    } else {
        int fb_match = 0;
        for (size_t i = 0; i < k->n_names && !fb_match; i++)
            fb_match = strcmp(k->names[i], k->fallback) == 0;
        out->matched = fb_match;
        out->confidence = fb_match ? (fb_label.p ? fb_p : top_p) : 0;
    }
    return VSR_OK;
}

static int consume_entities(vsr__ctx_t *c, const cls_t *k, const vsr_json_t *j, vsr_signal_result_t *out)
{
    uint32_t arr;
    if (vsr_json_object_get(j, 0, "entities", &arr) != VSR_OK || vsr_json_type(j, arr) != VSR_JSON_ARRAY)
        return VSR_ERR_INVALID;
    double best = 0;
    size_t found = 0;
    uint32_t t = arr + 1;
    for (uint32_t i = 0; i < j->toks[arr].count; i++, t = j->toks[t].next) {
        vsr_slice_t type;
        double p;
        if (vsr_json_type(j, t) != VSR_JSON_OBJECT || get_string(j, t, "type", c->pool, &type) != VSR_OK ||
            get_score(j, t, "score", &p) != VSR_OK)
            return VSR_ERR_INVALID;
        if (p < k->threshold || label_in(k, type))
            continue;
        found++;
        if (p > best)
            best = p;
    }
    out->matched = found > 0;
    out->confidence = found ? best : 0;
    out->value = (double)found;
    return VSR_OK;
}

int vsr__classify_consume(vsr__ctx_t *c, const void *state, vsr_slice_t result, vsr_signal_result_t *out)
{
    const cls_t *k = state;
    vsr_json_t j;
    memset(&j, 0, sizeof(j));
    vsr_json_limits_t lim = {.max_depth = 16};
    int rc = VSR_ERR_INVALID;
    vsr_buf_t conv;
    vsr_buf_init(&conv, 0);
    vsr_pool_t tmp;
    vsr_pool_init(&tmp);
    if (k->remote.model) { /* the remote's answer, read into the runtime's shape */
        const char *why;
        vsr_pool_t *pool = c->pool ? c->pool : &tmp;
        if (vsr_signals_remote_answer(result, k->kind == K_PII, k->remote.distribution, pool, &conv, &why) !=
            VSR_OK) {
            vsr_log_debug("signals", "remote classifier %s: the answer is unusable: %s", k->remote.model, why);
            goto out;
        }
        result = vsr_buf_slice(&conv);
    }
    if (vsr_json_parse(&j, result.p ? result.p : "", result.len, &lim) == VSR_OK &&
        vsr_json_type(&j, 0) == VSR_JSON_OBJECT)
        rc = k->kind == K_PII ? consume_entities(c, k, &j, out) : consume_labels(c, k, &j, out);
    if (rc == VSR_OK && c->pool)
        out->evidence = vsr_pool_dup_slice(c->pool, result);
out:
    vsr_json_free(&j);
    vsr_buf_free(&conv);
    vsr_pool_free(&tmp);
    return rc;
}

int vsr_signals_guard_score(vsr_slice_t result, vsr_pool_t *pool, double *score)
{
    cls_t k = {.kind = K_JAILBREAK, .model = "jailbreak", .threshold = 1};
    vsr__ctx_t c;
    memset(&c, 0, sizeof(c));
    c.pool = pool;
    vsr_signal_result_t r = {0};
    vsr_json_t j;
    memset(&j, 0, sizeof(j));
    vsr_json_limits_t lim = {.max_depth = 16};
    int rc = VSR_ERR_INVALID;
    if (vsr_json_parse(&j, result.p ? result.p : "", result.len, &lim) == VSR_OK &&
        vsr_json_type(&j, 0) == VSR_JSON_OBJECT)
        rc = consume_labels(&c, &k, &j, &r);
    vsr_json_free(&j);
    if (rc == VSR_OK)
        *score = r.value;
    return rc;
}
