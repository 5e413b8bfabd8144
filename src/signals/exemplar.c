/*
 * exemplar.c — the `fact_check`, `user_feedbacks` and `modality` families
 * (ref §1.9, condition types `fact_check`, `user_feedback`, `modality`):
 * embedding-prototype classifiers over built-in exemplar banks, one bank
 * per label, written for vsr (data/<family>/exemplars.jsonl, compiled into
 * the binary by cmake/embed.cmake).
 *
 * A signal's name is its label (the configuration refuses another).  The
 * bank is embedded once per compiled signal, as embedding.c embeds its
 * candidates: while no vectors are stored a request's task asks for
 * [routing text, exemplar 1, ..., exemplar n], the first usable answer
 * stores the exemplars' prototypes per label (embedding.c's grouping, at
 * most 8 a label), published once with a compare-and-swap; afterwards a
 * task asks for the routing text alone.  The routing text's prototype
 * score against each label's prototypes is that label's score; the label
 * with the highest score wins, and the signal matches when its label wins
 * with a score >= threshold.  The signal's value is its label's score.
 *
 *  - user_feedbacks is evaluated only when an assistant reply precedes the
 *    routing text's message: without one it asks nothing and does not match.
 *  - modality is a hybrid with image cues (words such as "draw", "image",
 *    "picture", "photo", "logo"; whole words, ASCII case-insensitive): a text
 *    holding one has VSR__MODALITY_CUE_BONUS added to its DIFFUSION and BOTH
 *    scores before the winner is chosen, a text holding none has it
 *    subtracted from them.
 *
 * The `classifiers` family (type local, condition type `classifier`) is the
 * same method over a bank the configuration gives (inline labels with
 * examples, or a model_path JSONL file): every label competes, the signal's
 * result is the winning label (vsr_signal_result_t.label) with its score as
 * value and confidence; it matches when that score >= threshold, and a
 * condition may ask for one label and its own predicate on the score
 * (vsr_rule_leaf_result).  Its evidence: the label, every label's score and
 * the nearest examples.  type llm asks a configured model instead: a chat
 * task (VSR_SIGNAL_TASK_CHAT, the router's own model call through the
 * upstream layer) with the instructions and the labels as a system
 * message, the routing text as the user's; the answer's label (the whole
 * reply, else the first label named in it as a word) wins with confidence
 * 1.0 (0.8 when only found inside a longer reply); a reply naming none, a
 * failed call or a timeout make the signal unknown, and on_error decides.
 * Model-backed and pure: the vectors come from the runtime's `embed` task.
 */
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>

#include "signals/signals-int.h"

#define EX_MAX_LABELS VSR_CLS_MAX_LABELS
#define EX_MAX_EXEMPLARS 512 /* a built-in bank */
#define EX_NEAREST 3         /* classifier evidence: the nearest examples */

typedef struct {
    const char *family;
    const char *const *labels; /* NULL-terminated, at most EX_MAX_LABELS */
    const unsigned char *data;
    const size_t *len;
    int after_assistant; /* evaluated only after an assistant reply */
    int cues;            /* modality's keyword cues */
} ex_family_t;

static const char *const fact_check_labels[] = {"needs_fact_check", "no_fact_check_needed", NULL};
static const char *const user_feedback_labels[] = {"wrong_answer", "need_clarification", "want_different", "satisfied",
                                                   NULL};
static const char *const modality_labels[] = {"AR", "DIFFUSION", "BOTH", NULL};

static const ex_family_t ex_families[] = {
    {"fact_check", fact_check_labels, vsr_builtin_fact_check_exemplars, &vsr_builtin_fact_check_exemplars_len, 0, 0},
    {"user_feedbacks", user_feedback_labels, vsr_builtin_user_feedbacks_exemplars,
     &vsr_builtin_user_feedbacks_exemplars_len, 1, 0},
    {"modality", modality_labels, vsr_builtin_modality_exemplars, &vsr_builtin_modality_exemplars_len, 0, 1},
};

/* Image cues (lower case, matched as whole words): "generate an image",
 * "picture of" and "draw" hold one. */
static const char *const modality_cues[] = {
    "draw",    "drawing", "drawings",     "sketch",      "paint",     "painting", "image",    "images",
    "picture", "pictures", "photo",       "photos",      "photograph", "illustration", "illustrations",
    "illustrate", "render", "logo",       "wallpaper",   "poster",    "portrait", "cartoon",  "diagram",
    "artwork", "concept art", "pixel art", "digital art", "sticker",  "icon",     "visualize",
};

typedef struct {
    char model[128];
    size_t dim;
    float *protos; /* rows of dim floats, label by label */
    size_t n_protos[EX_MAX_LABELS], first[EX_MAX_LABELS];
    float *rows;   /* classifiers: every example's vector, bank order (NULL otherwise) */
} ex_store_t;

typedef struct {
    const ex_family_t *fam; /* NULL: a classifier */
    size_t n_labels;
    int target;             /* the signal's label; -1: every label competes (classifiers) */
    int never;              /* a fact_check or user_feedbacks name that is no label: never matched */
    char **names;           /* classifiers: the label names (owned) */
    char **texts;           /* classifiers: the examples (owned), for evidence */
    int llm;                /* classifiers of type llm: a model call */
    char *model;            /* llm: the provider model asked (owned) */
    char *system;           /* llm: the system message (owned) */
    uint64_t timeout_ms;    /* llm: 0 = the routing wait */
    vsr__remote_t remote;   /* classifiers with a backend: a remote classifier's label scores decide */
    double threshold;
    size_t n;            /* exemplars */
    uint8_t *label;      /* n: each exemplar's label index */
    vsr_slice_t cand_json; /* ",\"e1\",\"e2\"...", owned */
    _Atomic(ex_store_t *) store;
} ex_t;

static const ex_family_t *family_named(const char *family)
{
    for (size_t i = 0; i < VSR_ARRAY_LEN(ex_families); i++)
        if (strcmp(ex_families[i].family, family) == 0)
            return &ex_families[i];
    return NULL;
}

/* Reads the bank: each line {"label": L, "text": T}.  Appends the texts to
 * json (as ",\"T\"") and their label indexes to label; returns the count,
 * or 0 when the bank is malformed (a build defect). */
static size_t read_bank(const ex_family_t *f, vsr_buf_t *json, uint8_t *label)
{
    const char *p = (const char *)f->data, *end = p + *f->len;
    size_t n = 0;
    vsr_pool_t pool;
    vsr_pool_init(&pool);
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *le = nl ? nl : end;
        if (le > p) {
            vsr_json_t j;
            memset(&j, 0, sizeof(j));
            uint32_t tl, tt;
            vsr_slice_t ls = VSR_SLICE_NULL, ts = VSR_SLICE_NULL;
            int ok = n < EX_MAX_EXEMPLARS && vsr_json_parse(&j, p, (size_t)(le - p), NULL) == VSR_OK &&
                     vsr_json_type(&j, 0) == VSR_JSON_OBJECT && vsr_json_object_get(&j, 0, "label", &tl) == VSR_OK &&
                     vsr_json_object_get(&j, 0, "text", &tt) == VSR_OK && vsr_json_type(&j, tl) == VSR_JSON_STRING &&
                     vsr_json_type(&j, tt) == VSR_JSON_STRING && vsr_json_string(&j, tl, &pool, &ls) == VSR_OK &&
                     vsr_json_string(&j, tt, &pool, &ts) == VSR_OK && ts.len > 0;
            int li = -1;
            for (size_t k = 0; ok && f->labels[k]; k++)
                if (vsr_slice_eq_cstr(ls, f->labels[k]))
                    li = (int)k;
            vsr_json_free(&j);
            if (!ok || li < 0) {
                n = 0;
                break;
            }
            label[n++] = (uint8_t)li;
            vsr_buf_append(json, ",", 1);
            vsr_buf_append_json_string(json, ts);
        }
        p = nl ? nl + 1 : end;
    }
    vsr_pool_free(&pool);
    return n;
}

size_t vsr__exemplar_bank_size(const char *family)
{
    const ex_family_t *f = family_named(family);
    size_t n = 0;
    for (size_t i = 0; f && i < *f->len; i++)
        n += f->data[i] == '\n';
    return n;
}

static int ex_compile(const char *family, const void *conf, const char *path, void **state, vsr_buf_t *err)
{
    const vsr_sig_exemplar_conf_t *c = conf;
    const ex_family_t *f = family_named(family);
    ex_t *e = vsr_calloc(1, sizeof(*e));
    e->fam = f;
    e->target = -1;
    while (f->labels[e->n_labels]) {
        if (c->name && strcmp(c->name, f->labels[e->n_labels]) == 0)
            e->target = (int)e->n_labels;
        e->n_labels++;
    }
    if (e->target < 0 && (strcmp(family, "fact_check") == 0 || strcmp(family, "user_feedbacks") == 0)) {
        e->target = 0; /* the reference's rule under another name: it never matches */
        e->never = 1;
    }
    if (e->target < 0) {
        vsr_buf_printf(err, "%s: a %s signal's name is one of its labels\n", path, family);
        vsr_free(e);
        return VSR_ERR_INVALID;
    }
    e->threshold = c->threshold;
    e->label = vsr_calloc(EX_MAX_EXEMPLARS, 1);
    vsr_buf_t b;
    vsr_buf_init(&b, 0);
    e->n = read_bank(f, &b, e->label);
    int every[EX_MAX_LABELS] = {0};
    for (size_t i = 0; i < e->n; i++)
        every[e->label[i]] = 1;
    for (size_t k = 0; k < e->n_labels; k++)
        if (!every[k])
            e->n = 0;
    if (e->n == 0) {
        vsr_buf_printf(err, "%s: the built-in %s exemplars are malformed\n", path, family);
        vsr_buf_free(&b);
        vsr_free(e->label);
        vsr_free(e);
        return VSR_ERR_INVALID;
    }
    e->cand_json = vsr_slice(b.data, b.len);
    atomic_init(&e->store, NULL);
    *state = e;
    return VSR_OK;
}

int vsr__fact_check_compile(vsr_signals_t *s, const void *conf, const char *path, void **state, vsr_buf_t *err)
{
    VSR_UNUSED(s);
    return ex_compile("fact_check", conf, path, state, err);
}

int vsr__user_feedback_compile(vsr_signals_t *s, const void *conf, const char *path, void **state, vsr_buf_t *err)
{
    VSR_UNUSED(s);
    return ex_compile("user_feedbacks", conf, path, state, err);
}

int vsr__modality_compile(vsr_signals_t *s, const void *conf, const char *path, void **state, vsr_buf_t *err)
{
    VSR_UNUSED(s);
    return ex_compile("modality", conf, path, state, err);
}

void vsr__exemplar_free(void *state)
{
    ex_t *e = state;
    if (e == NULL)
        return;
    vsr_free(e->label);
    vsr_free(e->model);
    vsr_free(e->system);
    vsr__remote_free(&e->remote);
    vsr_free((void *)e->cand_json.p);
    for (size_t k = 0; e->names && k < e->n_labels; k++)
        vsr_free(e->names[k]);
    vsr_free(e->names);
    for (size_t i = 0; e->texts && i < e->n; i++)
        vsr_free(e->texts[i]);
    vsr_free(e->texts);
    ex_store_t *st = atomic_load(&e->store);
    if (st) {
        vsr_free(st->protos);
        vsr_free(st->rows);
        vsr_free(st);
    }
    vsr_free(e);
}

int vsr__classifier_compile(vsr_signals_t *s, const void *conf, const char *path, void **state, vsr_buf_t *err)
{
    VSR_UNUSED(s);
    const vsr_sig_classifier_conf_t *c = conf;
    ex_t *e = vsr_calloc(1, sizeof(*e));
    e->target = -1;
    e->threshold = c->threshold;
    atomic_init(&e->store, NULL);
    *state = e;
    if (c->remote.protocol) {
        if (c->n_labels == 0 || c->n_labels > EX_MAX_LABELS) {
            vsr_buf_printf(err, "%s: a classifier with a backend needs 1 to %d labels\n", path, EX_MAX_LABELS);
            vsr__exemplar_free(e);
            *state = NULL;
            return VSR_ERR_INVALID;
        }
        vsr__remote_init(&e->remote, &c->remote, VSR__MODEL_MAX_RUNES, c->name);
        e->n_labels = c->n_labels;
        e->names = vsr_calloc(c->n_labels, sizeof(char *));
        for (size_t k = 0; k < c->n_labels; k++)
            e->names[k] = vsr_strdup(c->labels[k]);
        return VSR_OK;
    }
    if (c->type == VSR_CLS_LLM) {
        if (c->model == NULL || c->n_labels == 0 || c->n_labels > EX_MAX_LABELS) {
            vsr_buf_printf(err, "%s: an llm classifier needs a model and 1 to %d labels\n", path, EX_MAX_LABELS);
            vsr__exemplar_free(e);
            *state = NULL;
            return VSR_ERR_INVALID;
        }
        e->llm = 1;
        e->model = vsr_strdup(c->model);
        e->timeout_ms = c->timeout_ms;
        e->n_labels = c->n_labels;
        e->names = vsr_calloc(c->n_labels, sizeof(char *));
        vsr_buf_t b;
        vsr_buf_init(&b, 0);
        if (c->instructions && c->instructions[0])
            vsr_buf_printf(&b, "%s\n\n", c->instructions);
        vsr_buf_append_cstr(&b, "Classify the user's message. Reply with exactly one of these labels and nothing else: ");
        for (size_t k = 0; k < c->n_labels; k++) {
            e->names[k] = vsr_strdup(c->labels[k]);
            vsr_buf_printf(&b, "%s%s", k ? ", " : "", c->labels[k]);
        }
        vsr_buf_append_cstr(&b, ".");
        e->system = vsr_strndup(b.data, b.len);
        vsr_buf_free(&b);
        return VSR_OK;
    }
    if (c->n_labels == 0 || c->n_labels > EX_MAX_LABELS || c->n_examples == 0) {
        vsr_buf_printf(err, "%s: a local classifier needs 1 to %d labels, each with examples\n", path, EX_MAX_LABELS);
        vsr__exemplar_free(e);
        *state = NULL;
        return VSR_ERR_INVALID;
    }
    e->n_labels = c->n_labels;
    e->names = vsr_calloc(c->n_labels, sizeof(char *));
    for (size_t k = 0; k < c->n_labels; k++)
        e->names[k] = vsr_strdup(c->labels[k]);
    e->n = c->n_examples;
    e->label = vsr_calloc(e->n, 1);
    e->texts = vsr_calloc(e->n, sizeof(char *));
    vsr_buf_t b;
    vsr_buf_init(&b, 0);
    for (size_t i = 0; i < e->n; i++) {
        e->label[i] = (uint8_t)c->examples[i].label;
        e->texts[i] = vsr_strdup(c->examples[i].text);
        vsr_buf_append(&b, ",", 1);
        vsr_buf_append_json_string(&b, vsr_slice_cstr(c->examples[i].text));
    }
    e->cand_json = vsr_slice(b.data, b.len);
    return VSR_OK;
}

size_t vsr__classifier_bank_size(const vsr_sig_classifier_conf_t *c)
{
    return c->type == VSR_CLS_LOCAL ? c->n_examples : 0;
}

/* 1 when an assistant message with text precedes the routing text's. */
static int after_assistant(const vsr_chat_view_t *chat)
{
    if (chat == NULL || chat->last_user < 0)
        return 0;
    for (size_t i = (size_t)chat->last_user; i-- > 0;)
        if (chat->messages[i].role == VSR_ROLE_ASSISTANT && chat->messages[i].text.len > 0)
            return 1;
    return 0;
}

static int ex_applies(vsr__ctx_t *c, const ex_t *e)
{
    return c->in->text.len > 0 && (!e->fam || !e->fam->after_assistant || after_assistant(c->in->chat));
}

int vsr__exemplar_task(vsr__ctx_t *c, const void *state, vsr_signal_task_t *out)
{
    const ex_t *e = state;
    if (!ex_applies(c, e))
        return 0; /* nothing to classify: no match */
    if (e->remote.model) {
        vsr__remote_task(c->pool, &e->remote, c->in->text, NULL, out);
        return 1;
    }
    if (e->llm) {
        vsr_buf_t b;
        vsr_buf_init(&b, 0);
        vsr_buf_append_cstr(&b, "{\"model\":");
        vsr_buf_append_json_string(&b, vsr_slice_cstr(e->model));
        if (e->timeout_ms)
            vsr_buf_printf(&b, ",\"timeout_ms\":%llu", (unsigned long long)e->timeout_ms);
        vsr_buf_append_cstr(&b, ",\"body\":{\"messages\":[{\"role\":\"system\",\"content\":");
        vsr_buf_append_json_string(&b, vsr_slice_cstr(e->system));
        vsr_buf_append_cstr(&b, "},{\"role\":\"user\",\"content\":");
        vsr_buf_append_slice(&b, vsr__text_json(c->pool, c->in->text, VSR__MODEL_MAX_RUNES));
        vsr_buf_append_cstr(&b, "}],\"temperature\":0,\"max_completion_tokens\":16,\"stream\":false}}");
        out->type = VSR_SIGNAL_TASK_CHAT;
        out->payload = vsr_pool_dup_slice(c->pool, vsr_buf_slice(&b));
        vsr_buf_free(&b);
        return 1;
    }
    int with_bank = atomic_load(&((ex_t *)e)->store) == NULL;
    vsr_buf_t b;
    vsr_buf_init(&b, 0);
    vsr_buf_append_cstr(&b, "{\"input\":[");
    vsr_buf_append_slice(&b, vsr__text_json(c->pool, c->in->text, VSR__MODEL_MAX_RUNES));
    if (with_bank)
        vsr_buf_append_slice(&b, e->cand_json);
    vsr_buf_append_cstr(&b, "]}");
    out->type = "embed";
    out->payload = vsr_pool_dup_slice(c->pool, vsr_buf_slice(&b));
    vsr_buf_free(&b);
    return 1;
}

static int is_word(unsigned char ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '_';
}

static int cue_in(vsr_slice_t text)
{
    for (size_t k = 0; k < VSR_ARRAY_LEN(modality_cues); k++) {
        size_t m = strlen(modality_cues[k]);
        for (size_t i = 0; i + m <= text.len; i++) {
            if ((i > 0 && is_word((unsigned char)text.p[i - 1])) ||
                (i + m < text.len && is_word((unsigned char)text.p[i + m])))
                continue;
            size_t t = 0;
            while (t < m && (text.p[i + t] | (('A' <= text.p[i + t] && text.p[i + t] <= 'Z') ? 0x20 : 0)) ==
                                modality_cues[k][t])
                t++;
            if (t == m)
                return 1;
        }
    }
    return 0;
}

int vsr__modality_cue(vsr_slice_t text)
{
    size_t w = VSR__MODALITY_CUE_SCAN_BYTES;
    if (text.len <= 2 * w)
        return cue_in(text);
    /* the head and the tail (a word cut at an edge may read as a cue) */
    return cue_in(vsr_slice(text.p, w)) || cue_in(vsr_slice(text.p + text.len - w, w));
}

/* Groups the bank's vectors (n rows, exemplar order) label by label. */
static ex_store_t *make_store(const ex_t *e, const float *v, size_t dim, vsr_slice_t model)
{
    ex_store_t *st = vsr_calloc(1, sizeof(*st));
    memcpy(st->model, model.p ? model.p : "", model.len);
    st->dim = dim;
    float *rows = vsr_malloc(e->n * dim * sizeof(float));
    float *all = vsr_malloc(e->n_labels * 8 * dim * sizeof(float));
    size_t total = 0;
    for (size_t k = 0; k < e->n_labels; k++) {
        size_t m = 0;
        for (size_t i = 0; i < e->n; i++)
            if (e->label[i] == k)
                memcpy(rows + (m++) * dim, v + i * dim, dim * sizeof(float));
        size_t np;
        float *p = vsr__emb_prototypes(rows, m, dim, &np);
        memcpy(all + total * dim, p, np * dim * sizeof(float));
        vsr_free(p);
        st->first[k] = total;
        st->n_protos[k] = np;
        total += np;
    }
    vsr_free(rows);
    st->protos = all;
    if (e->fam == NULL) {
        st->rows = vsr_malloc(e->n * dim * sizeof(float));
        memcpy(st->rows, v, e->n * dim * sizeof(float));
    }
    return st;
}

static void free_store(ex_store_t *st)
{
    if (st) {
        vsr_free(st->protos);
        vsr_free(st->rows);
        vsr_free(st);
    }
}

/* An example as evidence: its first EX_EVIDENCE_BYTES bytes (whole UTF-8
 * sequences). */
#define EX_EVIDENCE_BYTES 160
static vsr_slice_t clip(const char *t)
{
    size_t n = strlen(t);
    if (n > EX_EVIDENCE_BYTES) {
        n = EX_EVIDENCE_BYTES;
        while (n > 0 && ((unsigned char)t[n] & 0xC0) == 0x80)
            n--;
    }
    return vsr_slice(t, n);
}

/* A classifier's evidence: {"label": L, "score": s, "scores": {label: score,
 * ...}, "nearest": [{"text", "label", "score"}, ...]} (the EX_NEAREST
 * examples most similar to the routing text). */
static vsr_slice_t cls_evidence(vsr__ctx_t *c, const ex_t *e, const ex_store_t *st, const float *q, size_t win,
                                const double *score)
{
    vsr_buf_t b;
    vsr_buf_init(&b, 0);
    vsr_buf_append_cstr(&b, "{\"label\":");
    vsr_buf_append_json_string(&b, vsr_slice_cstr(e->names[win]));
    vsr_buf_printf(&b, ",\"score\":%.4f,\"scores\":{", score[win]);
    for (size_t k = 0; k < e->n_labels; k++) {
        if (k)
            vsr_buf_append(&b, ",", 1);
        vsr_buf_append_json_string(&b, vsr_slice_cstr(e->names[k]));
        vsr_buf_printf(&b, ":%.4f", score[k]);
    }
    vsr_buf_append_cstr(&b, "},\"nearest\":[");
    size_t top[EX_NEAREST];
    double ts[EX_NEAREST];
    size_t nt = 0;
    for (size_t i = 0; st->rows && i < e->n; i++) {
        double dot = 0;
        for (size_t k = 0; k < st->dim; k++)
            dot += (double)q[k] * st->rows[i * st->dim + k];
        size_t at = nt;
        while (at > 0 && ts[at - 1] < dot)
            at--;
        if (at >= EX_NEAREST)
            continue;
        size_t last = nt < EX_NEAREST ? nt : EX_NEAREST - 1;
        for (size_t m = last; m > at; m--) {
            top[m] = top[m - 1];
            ts[m] = ts[m - 1];
        }
        top[at] = i;
        ts[at] = dot;
        if (nt < EX_NEAREST)
            nt++;
    }
    for (size_t m = 0; m < nt; m++) {
        vsr_buf_append_cstr(&b, m ? ",{\"text\":" : "{\"text\":");
        vsr_buf_append_json_string(&b, clip(e->texts[top[m]]));
        vsr_buf_append_cstr(&b, ",\"label\":");
        vsr_buf_append_json_string(&b, vsr_slice_cstr(e->names[e->label[top[m]]]));
        vsr_buf_printf(&b, ",\"score\":%.4f}", ts[m]);
    }
    vsr_buf_append_cstr(&b, "]}");
    vsr_slice_t out = vsr_pool_dup_slice(c->pool, vsr_buf_slice(&b));
    vsr_buf_free(&b);
    return out;
}

/* {"model": M, "dim": D, "embeddings": [text, (exemplar 1, ..., n)]} */
/* case-insensitive equality of n bytes */
static int ieq(const char *a, const char *b, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char x = (unsigned char)a[i], y = (unsigned char)b[i];
        if ((x | (x >= 'A' && x <= 'Z' ? 0x20 : 0)) != (y | (y >= 'A' && y <= 'Z' ? 0x20 : 0)))
            return 0;
    }
    return 1;
}

/* An llm classifier's answer (a chat.completion): its label. */
static int llm_consume(vsr__ctx_t *c, const ex_t *e, vsr_slice_t result, vsr_signal_result_t *out)
{
    vsr_json_t j;
    uint32_t ch, msg, ct;
    vsr_slice_t text = VSR_SLICE_NULL;
    vsr_json_limits_t lim = {.max_depth = 64, .max_tokens = 1u << 16};
    int ok = vsr_json_parse(&j, result.p, result.len, &lim) == VSR_OK && vsr_json_type(&j, 0) == VSR_JSON_OBJECT &&
             vsr_json_object_get(&j, 0, "choices", &ch) == VSR_OK && vsr_json_type(&j, ch) == VSR_JSON_ARRAY &&
             j.toks[ch].count > 0 && vsr_json_type(&j, ch + 1) == VSR_JSON_OBJECT &&
             vsr_json_object_get(&j, ch + 1, "message", &msg) == VSR_OK &&
             vsr_json_type(&j, msg) == VSR_JSON_OBJECT && vsr_json_object_get(&j, msg, "content", &ct) == VSR_OK &&
             vsr_json_type(&j, ct) == VSR_JSON_STRING && vsr_json_string(&j, ct, c->pool, &text) == VSR_OK;
    vsr_json_free(&j);
    if (!ok)
        return VSR_ERR_INVALID;
    /* the reply trimmed of blanks, quotes and a final period */
    vsr_slice_t t = text;
    while (t.len && (t.p[0] == ' ' || t.p[0] == '\n' || t.p[0] == '\t' || t.p[0] == '"' || t.p[0] == '\''))
        t.p++, t.len--;
    while (t.len && strchr(" \n\t\r\"'.", t.p[t.len - 1]))
        t.len--;
    int win = -1;
    double conf = 1.0;
    for (size_t k = 0; k < e->n_labels && win < 0; k++)
        if (strlen(e->names[k]) == t.len && ieq(t.p, e->names[k], t.len))
            win = (int)k;
    for (size_t k = 0; k < e->n_labels && win < 0; k++) { /* a label named as a word inside a longer reply */
        size_t m = strlen(e->names[k]);
        for (size_t i = 0; m && i + m <= t.len && win < 0; i++)
            if (ieq(t.p + i, e->names[k], m) && (i == 0 || !is_word((unsigned char)t.p[i - 1])) &&
                (i + m == t.len || !is_word((unsigned char)t.p[i + m]))) {
                win = (int)k;
                conf = 0.8;
            }
    }
    if (win < 0)
        return VSR_ERR_INVALID; /* no label: the signal is unknown */
    out->label = e->names[win];
    out->value = conf;
    out->matched = conf >= e->threshold;
    out->confidence = out->matched ? conf : 0;
    vsr_buf_t b;
    vsr_buf_init(&b, 0);
    vsr_buf_append_cstr(&b, "{\"label\":");
    vsr_buf_append_json_string(&b, vsr_slice_cstr(e->names[win]));
    vsr_buf_printf(&b, ",\"score\":%.2f,\"model\":", conf);
    vsr_buf_append_json_string(&b, vsr_slice_cstr(e->model));
    vsr_buf_append_cstr(&b, ",\"answer\":");
    vsr_buf_append_json_string(&b, vsr_slice(text.p, VSR_MIN(text.len, (size_t)EX_EVIDENCE_BYTES)));
    vsr_buf_append_cstr(&b, "}");
    out->evidence = vsr_pool_dup_slice(c->pool, vsr_buf_slice(&b));
    vsr_buf_free(&b);
    return VSR_OK;
}

/* A remote classifier's label scores: the highest-scoring of the signal's
 * labels wins (labels the signal does not have are ignored); an answer
 * without any of them is unusable. */
static int remote_consume(vsr__ctx_t *c, const ex_t *e, vsr_slice_t result, vsr_signal_result_t *out)
{
    vsr_buf_t conv;
    vsr_buf_init(&conv, 0);
    vsr_json_t j;
    memset(&j, 0, sizeof(j));
    const char *why = NULL;
    int rc = VSR_ERR_INVALID, win = -1;
    double best = -1;
    uint32_t arr;
    if (vsr_signals_remote_answer(result, 0, e->remote.distribution, c->pool, &conv, &why) != VSR_OK ||
        vsr_json_parse(&j, conv.data, conv.len, NULL) != VSR_OK ||
        vsr_json_object_get(&j, 0, "labels", &arr) != VSR_OK) {
        vsr_log_debug("signals", "remote classifier %s: the answer is unusable: %s", e->remote.model,
                      why ? why : "labels");
        goto out;
    }
    uint32_t t = arr + 1;
    for (uint32_t i = 0; i < j.toks[arr].count; i++, t = j.toks[t].next) {
        uint32_t lt, st;
        double p;
        vsr_slice_t l = VSR_SLICE_NULL;
        if (vsr_json_object_get(&j, t, "label", &lt) != VSR_OK || vsr_json_string(&j, lt, c->pool, &l) != VSR_OK ||
            vsr_json_object_get(&j, t, "score", &st) != VSR_OK || vsr_json_number(&j, st, &p) != VSR_OK)
            goto out;
        for (size_t k = 0; k < e->n_labels; k++)
            if (strlen(e->names[k]) == l.len && ieq(l.p, e->names[k], l.len) && p > best) {
                best = p;
                win = (int)k;
            }
    }
    if (win < 0)
        goto out;
    out->label = e->names[win];
    out->value = best;
    out->matched = best >= e->threshold;
    out->confidence = out->matched ? best : 0;
    vsr_buf_t b;
    vsr_buf_init(&b, 0);
    vsr_buf_append_cstr(&b, "{\"label\":");
    vsr_buf_append_json_string(&b, vsr_slice_cstr(e->names[win]));
    vsr_buf_printf(&b, ",\"score\":%.6g,\"model\":", best);
    vsr_buf_append_json_string(&b, vsr_slice_cstr(e->remote.model));
    vsr_buf_append_cstr(&b, ",\"scores\":");
    vsr_buf_append(&b, conv.data + j.toks[arr].start, j.toks[arr].end - j.toks[arr].start);
    vsr_buf_append_cstr(&b, "}");
    out->evidence = vsr_pool_dup_slice(c->pool, vsr_buf_slice(&b));
    vsr_buf_free(&b);
    rc = VSR_OK;
out:
    vsr_json_free(&j);
    vsr_buf_free(&conv);
    return rc;
}

int vsr__exemplar_consume(vsr__ctx_t *c, const void *state, vsr_slice_t result, vsr_signal_result_t *out)
{
    ex_t *e = (ex_t *)state;
    if (e->remote.model)
        return remote_consume(c, e, result, out);
    if (e->llm)
        return llm_consume(c, e, result, out);
    vsr_json_t j;
    memset(&j, 0, sizeof(j));
    int rc = VSR_ERR_INVALID;
    float *q = NULL, *bv = NULL;
    ex_store_t *mine = NULL;
    uint32_t m, d, arr;
    double dimv;
    if (!ex_applies(c, e) || vsr_json_parse(&j, result.p ? result.p : "", result.len, NULL) != VSR_OK ||
        vsr_json_type(&j, 0) != VSR_JSON_OBJECT || vsr_json_object_get(&j, 0, "dim", &d) != VSR_OK ||
        vsr_json_number(&j, d, &dimv) != VSR_OK || !(dimv >= 1 && dimv <= 65536) ||
        vsr_json_object_get(&j, 0, "embeddings", &arr) != VSR_OK || vsr_json_type(&j, arr) != VSR_JSON_ARRAY)
        goto out;
    size_t dim = (size_t)dimv, count = j.toks[arr].count;
    vsr_slice_t model = VSR_SLICE_NULL;
    if (vsr_json_object_get(&j, 0, "model", &m) == VSR_OK && vsr_json_type(&j, m) == VSR_JSON_STRING)
        vsr_json_string(&j, m, c->pool, &model);
    if (model.len >= sizeof(((ex_store_t *)0)->model) || (count != 1 && count != e->n + 1))
        goto out;
    q = vsr_malloc(dim * sizeof(float));
    uint32_t t = arr + 1;
    if (vsr__emb_read_vec(&j, t, dim, q) != VSR_OK)
        goto out;
    const ex_store_t *st = atomic_load(&e->store);
    if (count == e->n + 1) {
        bv = vsr_malloc(e->n * dim * sizeof(float));
        for (size_t i = 0; i < e->n; i++) {
            t = j.toks[t].next;
            if (vsr__emb_read_vec(&j, t, dim, bv + i * dim) != VSR_OK)
                goto out;
        }
        mine = make_store(e, bv, dim, model);
        st = mine;
        ex_store_t *expected = NULL;
        if (atomic_compare_exchange_strong(&e->store, &expected, mine))
            mine = NULL; /* the store has it now */
    } else if (st == NULL || st->dim != dim || strlen(st->model) != model.len ||
               memcmp(st->model, model.p ? model.p : "", model.len) != 0) {
        goto out; /* not the model the exemplars were embedded with */
    }
    int cue = vsr__modality_cue(c->in->text);
    double score[EX_MAX_LABELS];
    size_t win = 0;
    for (size_t k = 0; k < e->n_labels; k++) {
        score[k] = vsr__emb_proto_score(q, st->protos + st->first[k] * dim, st->n_protos[k], dim);
        if (e->fam && e->fam->cues &&
            (strcmp(e->fam->labels[k], "DIFFUSION") == 0 || strcmp(e->fam->labels[k], "BOTH") == 0))
            score[k] += cue ? VSR__MODALITY_CUE_BONUS : -VSR__MODALITY_CUE_BONUS;
        if (score[k] > score[win])
            win = k;
    }
    if (e->target < 0) {
        /* a classifier: the winning label, whichever it is */
        double s = VSR_MIN(score[win], 1.0);
        out->label = e->names[win];
        out->matched = s >= e->threshold;
        out->confidence = out->matched ? VSR_MAX(s, 0.0) : 0;
        out->value = s;
        out->evidence = cls_evidence(c, e, st, q, win, score);
        rc = VSR_OK;
        goto out;
    }
    double s = VSR_MIN(score[e->target], 1.0);
    out->matched = !e->never && win == (size_t)e->target && s >= e->threshold;
    out->confidence = out->matched ? VSR_MAX(s, 0.0) : 0;
    out->value = s;
    rc = VSR_OK;
out:
    free_store(mine);
    vsr_free(q);
    vsr_free(bv);
    vsr_json_free(&j);
    return rc;
}
