/* signals.c — the registry of signal types, compilation of a recipe's
 * signals, evaluation dispatch and the per-request memo. */
#include <stddef.h>

#include <stdio.h>

#include "signals/signals-int.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#define FAMILY(list, count, type) \
    offsetof(vsr_signals_conf_t, list), offsetof(vsr_signals_conf_t, count), sizeof(type)

/* Every signal conf struct starts with its name; compile reads it generically. */
_Static_assert(offsetof(vsr_sig_keyword_conf_t, name) == 0, "name first");
_Static_assert(offsetof(vsr_sig_context_conf_t, name) == 0, "name first");
_Static_assert(offsetof(vsr_sig_structure_conf_t, name) == 0, "name first");
_Static_assert(offsetof(vsr_sig_conversation_conf_t, name) == 0, "name first");
_Static_assert(offsetof(vsr_sig_language_conf_t, name) == 0, "name first");
_Static_assert(offsetof(vsr_sig_authz_conf_t, name) == 0, "name first");
_Static_assert(offsetof(vsr_sig_embedding_conf_t, name) == 0, "name first");
_Static_assert(offsetof(vsr_sig_domain_conf_t, name) == 0, "name first");
_Static_assert(offsetof(vsr_sig_jailbreak_conf_t, name) == 0, "name first");
_Static_assert(offsetof(vsr_sig_pii_conf_t, name) == 0, "name first");
_Static_assert(offsetof(vsr_sig_metadata_conf_t, name) == 0, "name first");
_Static_assert(offsetof(vsr_sig_event_conf_t, name) == 0, "name first");
_Static_assert(offsetof(vsr_sig_input_modality_conf_t, name) == 0, "name first");
_Static_assert(offsetof(vsr_sig_safety_conf_t, name) == 0, "name first");
_Static_assert(offsetof(vsr_sig_preference_conf_t, name) == 0, "name first");
_Static_assert(offsetof(vsr_sig_reask_conf_t, name) == 0, "name first");
_Static_assert(offsetof(vsr_sig_exemplar_conf_t, name) == 0, "name first");
_Static_assert(offsetof(vsr_sig_complexity_conf_t, name) == 0, "name first");
_Static_assert(offsetof(vsr_sig_kb_conf_t, name) == 0, "name first");
_Static_assert(offsetof(vsr_sig_classifier_conf_t, name) == 0, "name first");

/* the family's on_error policy in global.model_catalog.modules, or none */
#define POLICY(member) ((ptrdiff_t)offsetof(vsr_modules_conf_t, member))
#define NO_POLICY ((ptrdiff_t)-1)

static const vsr__sig_type_t sig_types[] = {
    {"keyword", "keywords", "keywords", FAMILY(keywords, n_keywords, vsr_sig_keyword_conf_t),
     vsr__keyword_compile, vsr__keyword_eval, vsr__keyword_free, NULL, NULL, NULL, NO_POLICY},
    {"context", "context", "context", FAMILY(context, n_context, vsr_sig_context_conf_t),
     vsr__context_compile, vsr__context_eval, vsr__context_free, NULL, NULL, NULL, NO_POLICY},
    {"structure", "structure", "structure", FAMILY(structure, n_structure, vsr_sig_structure_conf_t),
     vsr__structure_compile, vsr__structure_eval, vsr__structure_free, NULL, NULL, NULL, NO_POLICY},
    {"conversation", "conversation", "conversation", FAMILY(conversation, n_conversation, vsr_sig_conversation_conf_t),
     vsr__conversation_compile, vsr__conversation_eval, vsr__conversation_free, NULL, NULL, NULL, NO_POLICY},
    {"language", "language", "language", FAMILY(language, n_language, vsr_sig_language_conf_t),
     vsr__language_compile, vsr__language_eval, vsr__language_free, NULL, NULL, NULL, NO_POLICY},
    {"authz", "authz", "role_bindings", FAMILY(role_bindings, n_role_bindings, vsr_sig_authz_conf_t),
     vsr__authz_compile, vsr__authz_eval, vsr__authz_free, NULL, NULL, NULL, NO_POLICY},
    {"embedding", "embeddings", "embeddings", FAMILY(embeddings, n_embeddings, vsr_sig_embedding_conf_t),
     vsr__embedding_compile, vsr__embedding_eval, vsr__embedding_free, vsr__embedding_task, vsr__embedding_consume,
     NULL, NO_POLICY},
    {"domain", "domains", "domains", FAMILY(domains, n_domains, vsr_sig_domain_conf_t), vsr__domain_compile,
     vsr__classify_eval, vsr__classify_free, vsr__classify_task, vsr__classify_consume, NULL,
     POLICY(domain_on_error)},
    {"jailbreak", "jailbreak", "jailbreak", FAMILY(jailbreak, n_jailbreak, vsr_sig_jailbreak_conf_t),
     vsr__jailbreak_compile, vsr__classify_eval, vsr__classify_free, vsr__classify_task, vsr__classify_consume, NULL,
     POLICY(guard_on_error)},
    {"pii", "pii", "pii", FAMILY(pii, n_pii, vsr_sig_pii_conf_t), vsr__pii_compile, vsr__classify_eval,
     vsr__classify_free, vsr__classify_task, vsr__classify_consume, NULL, POLICY(pii_on_error)},
    {"metadata", "metadata", "metadata", FAMILY(metadata, n_metadata, vsr_sig_metadata_conf_t),
     vsr__metadata_compile, vsr__metadata_eval, vsr__metadata_free, NULL, NULL, NULL, NO_POLICY},
    {"event", "event", "events", FAMILY(events, n_events, vsr_sig_event_conf_t),
     vsr__event_compile, vsr__event_eval, vsr__event_free, NULL, NULL, NULL, NO_POLICY},
    {"input_modality", "input_modality", "input_modality",
     FAMILY(input_modality, n_input_modality, vsr_sig_input_modality_conf_t), vsr__input_modality_compile,
     vsr__input_modality_eval, vsr__input_modality_free, NULL, NULL, NULL, NO_POLICY},
    {"safety", "safety", "safety", FAMILY(safety, n_safety, vsr_sig_safety_conf_t), vsr__safety_compile,
     vsr__safety_eval, vsr__safety_free, vsr__safety_task, vsr__safety_consume, NULL, NO_POLICY},
    {"preference", "preferences", "preferences", FAMILY(preferences, n_preferences, vsr_sig_preference_conf_t),
     vsr__preference_compile, vsr__embedding_eval, vsr__embedding_free, vsr__embedding_task, vsr__embedding_consume,
     NULL, NO_POLICY},
    {"reask", "reasks", "reasks", FAMILY(reasks, n_reasks, vsr_sig_reask_conf_t),
     vsr__reask_compile, vsr__embedding_eval, vsr__reask_free, vsr__reask_task, vsr__reask_consume, NULL, NO_POLICY},
    {"fact_check", "fact_check", "fact_check", FAMILY(fact_check, n_fact_check, vsr_sig_exemplar_conf_t),
     vsr__fact_check_compile, vsr__embedding_eval, vsr__exemplar_free, vsr__exemplar_task, vsr__exemplar_consume,
     NULL, NO_POLICY},
    {"user_feedback", "user_feedbacks", "user_feedbacks",
     FAMILY(user_feedbacks, n_user_feedbacks, vsr_sig_exemplar_conf_t), vsr__user_feedback_compile,
     vsr__embedding_eval, vsr__exemplar_free, vsr__exemplar_task, vsr__exemplar_consume, NULL, NO_POLICY},
    {"modality", "modality", "modality", FAMILY(modality, n_modality, vsr_sig_exemplar_conf_t),
     vsr__modality_compile, vsr__embedding_eval, vsr__exemplar_free, vsr__exemplar_task, vsr__exemplar_consume,
     NULL, NO_POLICY},
    /* one configured signal, three compiled ones: see add_levels */
    {"complexity", "complexity", "complexity", FAMILY(complexity, n_complexity, vsr_sig_complexity_conf_t),
     vsr__complexity_compile, vsr__embedding_eval, vsr__complexity_free, vsr__complexity_task,
     vsr__complexity_consume, NULL, NO_POLICY},
    {"kb", "kb", "kb", FAMILY(kb, n_kb, vsr_sig_kb_conf_t), vsr__kb_compile, vsr__embedding_eval,
     vsr__embedding_free, vsr__embedding_task, vsr__embedding_consume, NULL, NO_POLICY},
    {"classifier", "classifiers", "classifiers", FAMILY(classifiers, n_classifiers, vsr_sig_classifier_conf_t),
     vsr__classifier_compile, vsr__embedding_eval, vsr__exemplar_free, vsr__exemplar_task, vsr__exemplar_consume,
     NULL, NO_POLICY},
};

/* ---- families registered at run time ---- */

typedef struct {
    const vsr_signal_family_t *f;
    void *state;
} ext_state_t;

static vsr_signal_result_t ext_eval(vsr__ctx_t *c, const void *state)
{
    const ext_state_t *x = state;
    vsr_signal_result_t r = {0};
    return x->f->eval ? x->f->eval(x->state, c->in) : r;
}

static void ext_free(void *state)
{
    ext_state_t *x = state;
    if (x == NULL)
        return;
    if (x->f->free)
        x->f->free(x->state);
    vsr_free(x);
}

static int ext_task(vsr__ctx_t *c, const void *state, vsr_signal_task_t *out)
{
    const ext_state_t *x = state;
    return x->f->task ? x->f->task(x->state, c->in, out) : 0;
}

static int ext_consume(vsr__ctx_t *c, const void *state, vsr_slice_t result, vsr_signal_result_t *out)
{
    const ext_state_t *x = state;
    return x->f->consume ? x->f->consume(x->state, c->in, result, out) : VSR_ERR_INVALID;
}

static vsr__sig_type_t ext_types[VSR_SIGNALS_MAX_EXT_FAMILIES];
static size_t n_ext_types;

int vsr_signals_register_family(const vsr_signal_family_t *f)
{
    if (f == NULL || f->cond_type == NULL || f->family == NULL || f->compile == NULL)
        return VSR_ERR_INVALID;
    for (size_t t = 0; t < VSR_ARRAY_LEN(sig_types); t++)
        if (strcmp(sig_types[t].cond_type, f->cond_type) == 0)
            return VSR_ERR_INVALID;
    for (size_t t = 0; t < n_ext_types; t++)
        if (strcmp(ext_types[t].cond_type, f->cond_type) == 0)
            return ext_types[t].ext == f ? VSR_OK : VSR_ERR_INVALID;
    if (n_ext_types == VSR_ARRAY_LEN(ext_types))
        return VSR_ERR_TOO_BIG;
    vsr__sig_type_t *ty = &ext_types[n_ext_types++];
    memset(ty, 0, sizeof(*ty));
    ty->cond_type = f->cond_type;
    ty->family = f->family;
    ty->yaml = f->family;
    ty->eval = ext_eval;
    ty->free = ext_free;
    if (f->task)
        ty->task = ext_task;
    ty->consume = ext_consume;
    ty->ext = f;
    ty->on_error_off = NO_POLICY; /* its policy comes with its own settings */
    return VSR_OK;
}

static const vsr__sig_type_t *ext_type(const char *cond_type)
{
    for (size_t t = 0; cond_type && t < n_ext_types; t++)
        if (strcmp(ext_types[t].cond_type, cond_type) == 0)
            return &ext_types[t];
    return NULL;
}

/* The signals of registered families a recipe declares (vsr_signals_conf_t.ext). */
static int compile_ext(vsr_signals_t *s, const vsr_signals_conf_t *conf, const char *prefix, const char *recipe,
                       vsr_buf_t *err)
{
    int failed = 0;
    char path[256];
    for (size_t i = 0; i < conf->n_ext; i++) {
        const vsr_sig_ext_conf_t *c = &conf->ext[i];
        if (prefix)
            snprintf(path, sizeof(path), "%s.signals.%s[%zu]", prefix, c->type ? c->type : "?", i);
        else
            snprintf(path, sizeof(path), "recipes.%s.signals.%s[%zu]", recipe, c->type ? c->type : "?", i);
        const vsr__sig_type_t *ty = ext_type(c->type);
        if (ty == NULL) {
            vsr_buf_printf(err, "%s: no signal family has condition type \"%s\"\n", path, c->type ? c->type : "");
            failed = 1;
            continue;
        }
        if (!c->name || !*c->name || vsr_signals_find(s, ty->cond_type, c->name) >= 0) {
            vsr_buf_printf(err, "%s: a signal needs a unique name\n", path);
            failed = 1;
            continue;
        }
        void *inner = NULL;
        if (ty->ext->compile(c, path, &inner, err) != VSR_OK) {
            failed = 1;
            continue;
        }
        ext_state_t *x = vsr_calloc(1, sizeof(*x));
        x->f = ty->ext;
        x->state = inner;
        vsr__sig_t *sig = &s->sigs[s->n++];
        sig->type = ty;
        sig->name = vsr_strdup(c->name);
        sig->state = x;
        sig->on_error = c->on_error;
    }
    return failed ? VSR_ERR_INVALID : VSR_OK;
}

uint32_t vsr__add_pattern(vsr_signals_t *s, const char *kw, int ci, vsr__bound_t bound, int counted)
{
    size_t len = strlen(kw);
    if (len == 0)
        return VSR__NO_PAT;
    if (s->n_pats == s->cap_pats) {
        s->cap_pats = s->cap_pats ? s->cap_pats * 2 : 16;
        s->pats = vsr_realloc(s->pats, s->cap_pats * sizeof(*s->pats));
    }
    vsr__pat_t *p = &s->pats[s->n_pats];
    memset(p, 0, sizeof(*p));
    if (ci) {
        p->bytes = vsr__fold(kw, len, &p->len, NULL);
    } else {
        p->bytes = vsr_strndup(kw, len);
        p->len = len;
    }
    p->ci = (uint8_t)(ci != 0);
    p->counted = (uint8_t)(counted != 0);
    p->bound = (uint8_t)bound;
    if (vsr__has_cjk(kw, len))
        p->bound = VSR__BOUND_NONE;
    if (p->bound == VSR__BOUND_ASCII) {
        p->left = (uint8_t)vsr__is_word_ascii((unsigned char)p->bytes[0]);
        p->right = (uint8_t)vsr__is_word_ascii((unsigned char)p->bytes[p->len - 1]);
    } else if (p->bound == VSR__BOUND_UNICODE) {
        p->left = p->right = 1;
    }
    p->slot = counted ? s->n_counts++ : s->n_bits++;
    return s->n_pats++;
}

static void build_matchers(vsr_signals_t *s)
{
    uint32_t *ci = vsr_malloc((s->n_pats + 1) * sizeof(uint32_t));
    uint32_t *cs = vsr_malloc((s->n_pats + 1) * sizeof(uint32_t));
    size_t nci = 0, ncs = 0;
    for (uint32_t i = 0; i < s->n_pats; i++) {
        if (s->pats[i].ci)
            ci[nci++] = i;
        else
            cs[ncs++] = i;
    }
    if (nci)
        s->ac_ci = vsr__ac_build(s->pats, ci, nci, 1);
    if (ncs)
        s->ac_cs = vsr__ac_build(s->pats, cs, ncs, 0);
    vsr_free(ci);
    vsr_free(cs);
}

/* An authz condition may name a role rather than a binding (ref §1.9): each
 * role that is not also a binding's name becomes a signal of its own, the
 * union of the bindings that grant it. */
static void add_roles(vsr_signals_t *s, const vsr_signals_conf_t *conf)
{
    const vsr__sig_type_t *ty = NULL;
    for (size_t t = 0; t < VSR_ARRAY_LEN(sig_types); t++)
        if (sig_types[t].compile == vsr__authz_compile)
            ty = &sig_types[t];
    for (size_t b = 0; b < conf->n_role_bindings; b++) {
        const char *role = conf->role_bindings[b].role;
        if (role == NULL || *role == '\0' || vsr_signals_find(s, ty->cond_type, role) >= 0)
            continue;
        vsr__sig_t *sig = &s->sigs[s->n++];
        sig->type = ty;
        sig->name = vsr_strdup(role);
        sig->report = vsr_strdup(role);
        sig->state = vsr__authz_role_compile(conf->role_bindings, conf->n_role_bindings, role);
    }
}

/* A complexity signal's levels, "<name>:easy|medium|hard", are the signals
 * rules name; they share the compiled core. */
static void add_levels(vsr_signals_t *s, const vsr__sig_type_t *ty, const char *name, void *core)
{
    static const char *const levels[] = {"easy", "medium", "hard"};
    for (int l = 0; l < 3; l++) {
        vsr__sig_t *sig = &s->sigs[s->n++];
        sig->type = ty;
        size_t n = strlen(name) + strlen(levels[l]) + 2;
        sig->name = vsr_malloc(n);
        snprintf(sig->name, n, "%s:%s", name, levels[l]);
        sig->state = vsr__complexity_level(core, l);
    }
}

vsr_signals_t *vsr_signals_compile(const vsr_recipe_conf_t *recipe, vsr_buf_t *err)
{
    vsr_signals_t *s = vsr_calloc(1, sizeof(*s));
    const vsr_signals_conf_t *conf = &recipe->signals;
    size_t total = 0;
    for (size_t t = 0; t < VSR_ARRAY_LEN(sig_types); t++)
        total += *(const size_t *)((const char *)conf + sig_types[t].count_off);
    /* room for one role signal per binding (see add_roles) and three levels per complexity signal */
    /* ... and one companion per safety signal (a hazard stage on a classifier of its own) */
    s->sigs = vsr_calloc(total + 2 * conf->n_complexity + conf->n_role_bindings + conf->n_ext + conf->n_safety + 1,
                         sizeof(*s->sigs));

    int failed = 0;
    char path[256];
    s->modules = &conf->modules;
    const char *prefix = (!recipe->name || strcmp(recipe->name, "default") == 0) ? "routing" : NULL;
    for (size_t t = 0; t < VSR_ARRAY_LEN(sig_types); t++) {
        const vsr__sig_type_t *ty = &sig_types[t];
        const char *list = *(const char *const *)((const char *)conf + ty->list_off);
        size_t count = *(const size_t *)((const char *)conf + ty->count_off);
        for (size_t i = 0; i < count; i++) {
            const void *c = list + i * ty->elem_size;
            const char *name = *(char *const *)c;
            if (prefix)
                snprintf(path, sizeof(path), "%s.signals.%s[%zu]", prefix, ty->yaml, i);
            else
                snprintf(path, sizeof(path), "recipes.%s.signals.%s[%zu]", recipe->name, ty->yaml, i);
            if (!name || !*name) {
                vsr_buf_printf(err, "%s: signal name is required\n", path);
                failed = 1;
                continue;
            }
            char level0[300];
            if (ty->compile == vsr__complexity_compile)
                snprintf(level0, sizeof(level0), "%s:easy", name);
            if (vsr_signals_find(s, ty->cond_type, ty->compile == vsr__complexity_compile ? level0 : name) >= 0) {
                vsr_buf_printf(err, "%s: duplicate %s signal name \"%s\"\n", path, ty->cond_type, name);
                failed = 1;
                continue;
            }
            void *state = NULL;
            if (ty->compile(s, c, path, &state, err) != VSR_OK) {
                failed = 1;
                continue;
            }
            if (ty->compile == vsr__complexity_compile) {
                add_levels(s, ty, name, state);
                continue;
            }
            vsr__sig_t *sig = &s->sigs[s->n++];
            sig->type = ty;
            sig->name = vsr_strdup(name);
            if (ty->compile == vsr__authz_compile && ((const vsr_sig_authz_conf_t *)c)->role)
                sig->report = vsr_strdup(((const vsr_sig_authz_conf_t *)c)->role);
            sig->state = state;
            if (ty->on_error_off != NO_POLICY) /* the family's policy in global.model_catalog.modules */
                sig->on_error = *(const vsr_on_error_t *)((const char *)&conf->modules + ty->on_error_off);
            void *hz = ty->compile == vsr__safety_compile ? vsr__safety_hazard_compile(c) : NULL;
            if (hz) {
                sig->companion = (int)s->n + 1;
                vsr__sig_t *h = &s->sigs[s->n++];
                h->type = ty;
                size_t n = strlen(name) + sizeof(":hazard");
                h->name = vsr_malloc(n);
                snprintf(h->name, n, "%s:hazard", name);
                h->state = hz;
                h->hidden = 1;
            }
        }
    }
    s->modules = NULL;
    if (compile_ext(s, conf, prefix, recipe->name, err) != VSR_OK)
        failed = 1;
    /* the first request embeds every candidate of the recipe in one bundle,
     * which the runtime bounds (2048 inputs, the routing texts included) */
    size_t n_cands = 0;
    for (size_t i = 0; i < conf->n_embeddings; i++)
        n_cands += conf->embeddings[i].candidates.n + conf->embeddings[i].negative_candidates.n + 1;
    for (size_t i = 0; i < conf->n_preferences; i++)
        n_cands += conf->preferences[i].examples.n + 2; /* the description and the routing text */
    n_cands += conf->n_fact_check * (vsr__exemplar_bank_size("fact_check") + 1);
    n_cands += conf->n_user_feedbacks * (vsr__exemplar_bank_size("user_feedbacks") + 1);
    n_cands += conf->n_modality * (vsr__exemplar_bank_size("modality") + 1);
    for (size_t i = 0; i < conf->n_complexity; i++)
        /* each level a rule names sends its own task */
        n_cands += 3 * (conf->complexity[i].hard.candidates.n + conf->complexity[i].easy.candidates.n + 1);
    for (size_t i = 0; i < conf->n_kb; i++)
        n_cands += vsr__kb_entries(&conf->modules, conf->kb[i].kb) + 1;
    for (size_t i = 0; i < conf->n_classifiers; i++)
        n_cands += vsr__classifier_bank_size(&conf->classifiers[i]) + 1;
    if (n_cands > VSR_SIGNALS_MAX_RECIPE_CANDIDATES) {
        vsr_buf_printf(err,
                       "%s.signals: %zu texts to embed (candidates, examples, kb entries and routing texts) "
                       "together, at most %d per recipe\n",
                       prefix ? prefix : recipe->name, n_cands, VSR_SIGNALS_MAX_RECIPE_CANDIDATES);
        failed = 1;
    }
    if (!failed)
        add_roles(s, conf);
    if (failed) {
        vsr_signals_free(s);
        return NULL;
    }
    build_matchers(s);
    return s;
}

void vsr_signals_free(vsr_signals_t *s)
{
    if (!s)
        return;
    for (size_t i = 0; i < s->n; i++) {
        s->sigs[i].type->free(s->sigs[i].state);
        vsr_free(s->sigs[i].name);
        vsr_free(s->sigs[i].report);
    }
    vsr_free(s->sigs);
    for (uint32_t i = 0; i < s->n_pats; i++)
        vsr_free(s->pats[i].bytes);
    vsr_free(s->pats);
    vsr__ac_free(s->ac_ci);
    vsr__ac_free(s->ac_cs);
    vsr_free(s);
}

size_t vsr_signals_count(const vsr_signals_t *s)
{
    return s ? s->n : 0;
}

int vsr_signals_find(const vsr_signals_t *s, const char *cond_type, const char *name)
{
    if (!s || !cond_type || !name)
        return -1;
    for (size_t i = 0; i < s->n; i++) {
        if (!s->sigs[i].hidden && strcmp(s->sigs[i].type->cond_type, cond_type) == 0 &&
            strcmp(s->sigs[i].name, name) == 0)
            return (int)i;
    }
    return -1;
}

int vsr_signals_companion(const vsr_signals_t *s, int i)
{
    VSR_BUG_ON(!s || i < 0 || (size_t)i >= s->n);
    return s->sigs[i].companion - 1;
}

void vsr_signals_combine(const vsr_signals_t *s, vsr_signal_result_t *memo, const unsigned char *done,
                         unsigned char *unknown)
{
    for (size_t i = 0; i < s->n; i++) {
        int j = s->sigs[i].companion - 1;
        if (j < 0 || !done[i] || unknown[i] || !memo[i].matched)
            continue;
        if (!done[j] || unknown[j]) { /* the hazard stage could not be computed: the signal is unknown */
            memset(&memo[i], 0, sizeof(memo[i]));
            unknown[i] = 1;
            continue;
        }
        memo[i].matched = memo[j].value >= vsr__safety_hazard_threshold(s->sigs[i].state);
        if (!memo[i].matched)
            memo[i].confidence = 0;
    }
}

const char *vsr_signals_name(const vsr_signals_t *s, int i)
{
    VSR_BUG_ON(!s || i < 0 || (size_t)i >= s->n);
    return s->sigs[i].name;
}

const char *vsr_signals_report_name(const vsr_signals_t *s, int i)
{
    VSR_BUG_ON(!s || i < 0 || (size_t)i >= s->n);
    return s->sigs[i].report ? s->sigs[i].report : s->sigs[i].name;
}

const char *vsr_signals_family(const vsr_signals_t *s, int i)
{
    VSR_BUG_ON(!s || i < 0 || (size_t)i >= s->n);
    return s->sigs[i].type->family;
}

uint64_t vsr_signals_token_estimate(const vsr_chat_view_t *chat)
{
    if (!chat)
        return 0;
    uint64_t sum = 0;
    for (size_t i = 0; i < chat->n_messages; i++)
        sum += chat->messages[i].text.len;
    uint64_t bytes = VSR_MAX(sum, chat->text_bytes);
    return bytes / 4 + (bytes % 4 != 0);
}

/* ---- the memo ---- */

static vsr__memo_t *memo_new(vsr__ctx_t *c)
{
    vsr__memo_t *m = vsr_pool_alloc(c->pool, sizeof(*m));
    memset(m, 0, sizeof(*m));
    m->owner = c->s;
    m->text_p = c->in->text.p;
    m->text_len = c->in->text.len;
    m->chat = c->in->chat;
    return m;
}

static vsr__memo_t *memo_get(vsr__ctx_t *c)
{
    vsr_signals_memo_t *pub = c->in->memo;
    if (pub) {
        vsr__memo_t *m = pub->_state;
        if (m && m->owner == c->s && m->text_p == c->in->text.p && m->text_len == c->in->text.len &&
            m->chat == c->in->chat)
            return m;
        m = memo_new(c);
        pub->_state = m;
        return m;
    }
    return memo_new(c);
}

/* Whole prompts go through here: 64 bytes per test, by SSE2 where there is
 * one (x86-64 always), eight at a time otherwise. */
static int ascii_only(const char *s, size_t len)
{
    size_t i = 0;
#if defined(__SSE2__)
    for (; i + 64 <= len; i += 64) {
        const __m128i *v = (const __m128i *)(const void *)(s + i);
        __m128i x = _mm_or_si128(_mm_or_si128(_mm_loadu_si128(v), _mm_loadu_si128(v + 1)),
                                 _mm_or_si128(_mm_loadu_si128(v + 2), _mm_loadu_si128(v + 3)));
        if (_mm_movemask_epi8(x))
            return 0;
    }
#endif
    for (; i + 8 <= len; i += 8) {
        uint64_t w;
        memcpy(&w, s + i, 8);
        if (w & 0x8080808080808080ull)
            return 0;
    }
    for (; i < len; i++) {
        if ((unsigned char)s[i] >= 0x80)
            return 0;
    }
    return 1;
}

void vsr__memo_scan(vsr__ctx_t *c)
{
    vsr__memo_t *m = c->m;
    if (m->scanned)
        return;
    m->scanned = 1;
    size_t nw = (c->s->n_bits + 63) / 64;
    m->bits = vsr_pool_alloc(c->pool, (nw ? nw : 1) * sizeof(uint64_t));
    memset(m->bits, 0, (nw ? nw : 1) * sizeof(uint64_t));
    size_t nc = c->s->n_counts ? c->s->n_counts : 1;
    m->counts = vsr_pool_alloc(c->pool, nc * sizeof(uint32_t));
    memset(m->counts, 0, nc * sizeof(uint32_t));
    const char *text = c->in->text.p;
    size_t len = c->in->text.len;
    if (!text || len == 0)
        return;
    uint32_t *last_end = NULL;
    if (c->s->n_counts) {
        last_end = vsr_pool_alloc(c->pool, nc * sizeof(uint32_t));
        memset(last_end, 0, nc * sizeof(uint32_t));
    }
    if (c->s->ac_cs)
        vsr__ac_scan(c->s->ac_cs, c->s->pats, text, len, m->bits, m->counts, last_end);
    if (c->s->ac_ci) {
        /* ASCII text needs no folded copy: the automaton merges ASCII cases */
        const char *buf = text;
        size_t blen = len;
        if (!ascii_only(text, len))
            buf = vsr__memo_low(c, &blen);
        vsr__ac_scan(c->s->ac_ci, c->s->pats, buf, blen, m->bits, m->counts, last_end);
    }
}

const char *vsr__memo_low(vsr__ctx_t *c, size_t *len)
{
    vsr__memo_t *m = c->m;
    if (!m->low_done) {
        m->low_done = 1;
        if (c->in->text.len == 0) {
            m->low = "";
            m->low_len = 0;
        } else {
            m->low = vsr__fold(c->in->text.p, c->in->text.len, &m->low_len, c->pool);
        }
    }
    *len = m->low_len;
    return m->low;
}

const uint32_t *vsr__memo_runes(vsr__ctx_t *c, int lower, size_t *n)
{
    vsr__memo_t *m = c->m;
    lower = lower != 0;
    if (!m->runes_done[lower]) {
        m->runes_done[lower] = 1;
        size_t len = c->in->text.len;
        m->runes[lower] = vsr_pool_alloc(c->pool, (len ? len : 1) * sizeof(uint32_t));
        m->n_runes = len ? vsr__runes(c->in->text.p, len, lower, m->runes[lower]) : 0;
    }
    *n = m->n_runes;
    return m->runes[lower];
}

/* Unique lower-cased words (runs of letters and digits, as the reference's
 * extractLowerWords), so fuzzy matching costs unique words x keywords. */
void vsr__memo_words(vsr__ctx_t *c)
{
    vsr__memo_t *m = c->m;
    if (m->words_done)
        return;
    m->words_done = 1;
    size_t n;
    const uint32_t *r = vsr__memo_runes(c, 1, &n);
    size_t max_words = n / 2 + 1;
    m->word_off = vsr_pool_alloc(c->pool, max_words * sizeof(uint32_t));
    m->word_len = vsr_pool_alloc(c->pool, max_words * sizeof(uint32_t));
    size_t tcap = 16;
    while (tcap < max_words * 2)
        tcap *= 2;
    uint32_t *table = vsr_pool_alloc(c->pool, tcap * sizeof(uint32_t)); /* word index + 1, 0 = empty */
    memset(table, 0, tcap * sizeof(uint32_t));
    size_t i = 0;
    while (i < n) {
        if (!vsr__is_alnum(r[i])) {
            i++;
            continue;
        }
        size_t st = i;
        while (i < n && vsr__is_alnum(r[i]))
            i++;
        size_t wl = i - st;
        uint64_t h = vsr__hash_runes(r + st, wl);
        size_t slot = (size_t)h & (tcap - 1);
        int dup = 0;
        while (table[slot]) {
            uint32_t w = table[slot] - 1;
            if (m->word_len[w] == wl && memcmp(r + m->word_off[w], r + st, wl * sizeof(uint32_t)) == 0) {
                dup = 1;
                break;
            }
            slot = (slot + 1) & (tcap - 1);
        }
        if (dup)
            continue;
        m->word_off[m->n_words] = (uint32_t)st;
        m->word_len[m->n_words] = (uint32_t)wl;
        table[slot] = (uint32_t)++m->n_words;
    }
}

static void *pool_malloc(size_t n, void *data)
{
    return vsr_pool_alloc(data, n);
}

static void pool_free(void *p, void *data)
{
    VSR_UNUSED(p);
    VSR_UNUSED(data);
}

pcre2_match_data *vsr__memo_md(vsr__ctx_t *c)
{
    vsr__memo_t *m = c->m;
    if (!m->md) {
        m->gctx = pcre2_general_context_create(pool_malloc, pool_free, c->pool);
        VSR_BUG_ON(!m->gctx);
        m->md = pcre2_match_data_create(1, m->gctx);
        VSR_BUG_ON(!m->md);
    }
    return m->md;
}

int vsr_signals_conf_model_backed(const vsr_signals_conf_t *conf)
{
    for (size_t t = 0; t < VSR_ARRAY_LEN(sig_types); t++) {
        if (!sig_types[t].task || *(const size_t *)((const char *)conf + sig_types[t].count_off) == 0)
            continue;
        size_t off = sig_types[t].count_off;
        const vsr_modules_conf_t *m = &conf->modules; /* a family with a remote classifier asks it instead */
        if ((off == offsetof(vsr_signals_conf_t, n_domains) && m->domain_remote.protocol) ||
            (off == offsetof(vsr_signals_conf_t, n_jailbreak) && m->guard_remote.protocol) ||
            (off == offsetof(vsr_signals_conf_t, n_pii) && m->pii_remote.protocol))
            continue;
        if (off == offsetof(vsr_signals_conf_t, n_safety)) { /* a rule with a model asks its classifier */
            for (size_t i = 0; i < conf->n_safety; i++)
                if (conf->safety[i].model == NULL)
                    return 1;
            continue;
        }
        if (off != offsetof(vsr_signals_conf_t, n_classifiers))
            return 1;
        for (size_t i = 0; i < conf->n_classifiers; i++) /* an llm classifier asks a provider model instead */
            if (conf->classifiers[i].type != VSR_CLS_LLM && !conf->classifiers[i].remote.protocol)
                return 1;
    }
    return conf->n_ext > 0;
}

int vsr_signals_task(const vsr_signals_t *s, int i, const vsr_signal_input_t *in, vsr_signal_task_t *out)
{
    VSR_BUG_ON(!s || !in || !in->pool || i < 0 || (size_t)i >= s->n);
    if (s->sigs[i].type->task == NULL)
        return 0;
    vsr__ctx_t c = {.s = s, .in = in, .pool = in->pool};
    c.m = memo_get(&c);
    int rc = s->sigs[i].type->task(&c, s->sigs[i].state, out);
    return rc == 1 ? 1 : rc < 0 ? -1 : 0;
}

int vsr_signals_consume(const vsr_signals_t *s, int i, const vsr_signal_input_t *in, vsr_slice_t result,
                        vsr_signal_result_t *out)
{
    VSR_BUG_ON(!s || !in || !in->pool || i < 0 || (size_t)i >= s->n);
    memset(out, 0, sizeof(*out));
    if (s->sigs[i].type->consume == NULL)
        return VSR_ERR_INVALID;
    vsr__ctx_t c = {.s = s, .in = in, .pool = in->pool};
    c.m = memo_get(&c);
    int rc = s->sigs[i].type->consume(&c, s->sigs[i].state, result, out);
    if (rc != VSR_OK)
        memset(out, 0, sizeof(*out));
    return rc == VSR_OK ? VSR_OK : VSR_ERR_INVALID;
}

vsr_on_error_t vsr_signals_on_error(const vsr_signals_t *s, int i)
{
    VSR_BUG_ON(!s || i < 0 || (size_t)i >= s->n);
    return s->sigs[i].on_error;
}

vsr_signal_result_t vsr_signals_eval(const vsr_signals_t *s, int i, const vsr_signal_input_t *in)
{
    VSR_BUG_ON(!s || !in || i < 0 || (size_t)i >= s->n);
    vsr_pool_t local;
    vsr__ctx_t c = {.s = s, .in = in, .pool = in->pool};
    if (!c.pool) {
        vsr_pool_init(&local);
        c.pool = &local;
        /* a memo cannot outlive this call's pool */
        vsr_signal_input_t copy = *in;
        copy.memo = NULL;
        c.in = &copy;
        c.m = memo_get(&c);
        vsr_signal_result_t r = s->sigs[i].type->eval(&c, s->sigs[i].state);
        vsr_pool_free(&local);
        return r;
    }
    c.m = memo_get(&c);
    return s->sigs[i].type->eval(&c, s->sigs[i].state);
}
