/* test_session_wait.c — the routing core waiting on its ports: a body phase
 * whose recipe references model-backed signals sends their tasks as one
 * bundle and answers pending; it resumes when the port answers (at once,
 * later, with an error, late, or never: cancelled), and on_error decides
 * what a signal that could not be computed means.  The model-backed family
 * here ("probe") exists only in this test: it asks for a classify task and
 * reads {"score": x} back. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "routing/routing.h"
#include "signals/signals.h"

/* ---- the test-only family ---- */

typedef struct {
    char *name;
    double threshold;
} probe_t;

static int probe_compile(const vsr_sig_ext_conf_t *conf, const char *path, void **state, vsr_buf_t *err)
{
    vsr_json_t j;
    uint32_t t;
    double th = 0.5;
    if (conf->params) {
        if (vsr_json_parse(&j, conf->params, strlen(conf->params), NULL) != VSR_OK) {
            vsr_buf_printf(err, "%s: params are not JSON\n", path);
            return VSR_ERR_INVALID;
        }
        if (vsr_json_object_get(&j, 0, "threshold", &t) == VSR_OK)
            vsr_json_number(&j, t, &th);
        vsr_json_free(&j);
    }
    probe_t *p = calloc(1, sizeof(*p));
    p->name = strdup(conf->name);
    p->threshold = th;
    *state = p;
    return VSR_OK;
}

static void probe_free(void *state)
{
    probe_t *p = state;
    if (p)
        free(p->name);
    free(p);
}

static int probe_task(const void *state, const vsr_signal_input_t *in, vsr_signal_task_t *out)
{
    const probe_t *p = state;
    vsr_buf_t b;
    vsr_buf_init(&b, 0);
    vsr_buf_append_cstr(&b, "{\"signal\":");
    vsr_buf_append_json_string(&b, vsr_slice_cstr(p->name));
    vsr_buf_append_cstr(&b, ",\"text\":");
    vsr_buf_append_json_string(&b, in->text);
    vsr_buf_append_cstr(&b, "}");
    out->type = "classify";
    out->payload = vsr_pool_dup_slice(in->pool, vsr_buf_slice(&b));
    vsr_buf_free(&b);
    return 1;
}

static int probe_consume(const void *state, const vsr_signal_input_t *in, vsr_slice_t result, vsr_signal_result_t *out)
{
    const probe_t *p = state;
    (void)in;
    vsr_json_t j;
    uint32_t t;
    double score;
    if (vsr_json_parse(&j, result.p ? result.p : "", result.len, NULL) != VSR_OK)
        return VSR_ERR_INVALID;
    int ok = vsr_json_type(&j, 0) == VSR_JSON_OBJECT && vsr_json_object_get(&j, 0, "score", &t) == VSR_OK &&
             vsr_json_number(&j, t, &score) == VSR_OK;
    vsr_json_free(&j);
    if (!ok)
        return VSR_ERR_INVALID;
    out->matched = score >= p->threshold;
    out->confidence = out->matched ? score : 0;
    out->value = score;
    return VSR_OK;
}

static const vsr_signal_family_t probe_family = {
    .cond_type = "probe",
    .family = "probe",
    .compile = probe_compile,
    .free = probe_free,
    .task = probe_task,
    .consume = probe_consume,
};

/* ---- a document whose decisions reference probe signals ----
 * The YAML decoder knows no probe family: placeholders (keyword signals of
 * the same names) let the rules load, then the leaves are pointed at the
 * probe signals and the probe signals declared (guard, topic, unused). */
static const char *DOC =
    "version: v0.3\n"
    "listeners: [{name: l1, address: 127.0.0.1, port: 18899}]\n"
    "providers:\n"
    "  defaults: {model: small}\n"
    "  models:\n"
    "    - {name: small, provider_model_id: small-v1, backend_refs: [{endpoint: '127.0.0.1:1'}]}\n"
    "    - {name: large, provider_model_id: large-v2, backend_refs: [{endpoint: '127.0.0.1:2'}]}\n"
    "    - {name: mid, provider_model_id: mid-v1, backend_refs: [{endpoint: '127.0.0.1:3'}]}\n"
    "routing:\n"
    "  signals:\n"
    "    keywords:\n"
    "      - {name: code, operator: OR, keywords: [python]}\n"
    "      - {name: guard, operator: OR, keywords: [zzzz]}\n"
    "      - {name: topic, operator: OR, keywords: [zzzz]}\n"
    "  decisions:\n"
    "    - name: guarded\n"
    "      priority: 50\n"
    "      rules: {operator: AND, conditions: [{type: keyword, name: guard}]}\n"
    "      modelRefs: [{model: large}]\n"
    "    - name: topical_code\n"
    "      priority: 40\n"
    "      rules: {operator: AND, conditions: [{type: keyword, name: topic}, {type: keyword, name: code}]}\n"
    "      modelRefs: [{model: mid}]\n";

typedef struct {
    vsr_config_t *cfg;
    vsr_engine_t *engine;
    vsr_sig_ext_conf_t ext[3];
} doc_t;

static vsr_rule_conf_t *leaf_of(vsr_config_t *cfg, size_t decision, size_t child)
{
    return &cfg->recipes[0].decisions[decision].rules->children[child];
}

typedef struct {
    vsr_on_error_t guard_leaf;     /* the condition's on_error */
    vsr_on_error_t guard_family;   /* the family's */
    int guarded_fail;              /* rules.on_unknown: fail_request on `guarded` */
} doc_opts_t;

static void doc_load(doc_t *d, const doc_opts_t *o)
{
    static const doc_opts_t none = {0};
    if (o == NULL)
        o = &none;
    memset(d, 0, sizeof(*d));
    vsr_buf_t err;
    vsr_buf_init(&err, 0);
    assert_int_equal(vsr_config_load_string("wait.yaml", DOC, strlen(DOC), &d->cfg, &err), VSR_OK);
    vsr_recipe_conf_t *r = &d->cfg->recipes[0];
    assert_string_equal(r->name, "default");
    d->ext[0] = (vsr_sig_ext_conf_t){(char *)"guard", (char *)"probe", (char *)"{\"threshold\":0.7}", o->guard_family};
    d->ext[1] = (vsr_sig_ext_conf_t){(char *)"topic", (char *)"probe", NULL, VSR_ON_ERROR_DEFAULT};
    d->ext[2] = (vsr_sig_ext_conf_t){(char *)"unused", (char *)"probe", NULL, VSR_ON_ERROR_DEFAULT};
    r->signals.ext = d->ext;
    r->signals.n_ext = 3;
    static char probe[] = "probe";
    leaf_of(d->cfg, 0, 0)->type = probe;
    leaf_of(d->cfg, 0, 0)->on_error = o->guard_leaf;
    leaf_of(d->cfg, 1, 0)->type = probe;
    r->decisions[0].rules->on_unknown_fail = o->guarded_fail;
    d->engine = vsr_engine_new(d->cfg, 1, &err);
    if (d->engine == NULL)
        fprintf(stderr, "%s", err.data);
    assert_non_null(d->engine);
    vsr_buf_free(&err);
}

static void doc_free(doc_t *d)
{
    vsr_engine_unref(d->engine);
    d->cfg->recipes[0].signals.ext = NULL;
    d->cfg->recipes[0].signals.n_ext = 0;
    vsr_config_free(d->cfg);
}

/* ---- fake ports ---- */

enum { ANSWER_NOW, ANSWER_LATER, FAIL_NOW };

typedef struct {
    int mode;
    double guard_score, topic_score;
    int guard_status;              /* a per-task error for guard */
    const char *guard_result;      /* overrides guard's result text */
    uint64_t now;
    int calls, cancels, resumes;
    size_t n_tasks;
    char task_payload[4][256];
    char task_type[4][32];
    char task_id[4][16];
    uint64_t deadline;
    vsr_runtime_done_fn done;
    void *done_ud;
    int handle;                    /* what runtime_call returns */
    vsr_session_t *resumed_s;
    int resumed_status, resumed_pending;
    char resumed_model[32];
    char resumed_decision[32];
    double resumed_confidence;
    int finish_in_resume;
} fake_t;

static void fake_answer(fake_t *f)
{
    vsr_runtime_result_t res[4];
    char text[4][64];
    for (size_t i = 0; i < f->n_tasks; i++) {
        int guard = strstr(f->task_payload[i], "\"signal\":\"guard\"") != NULL;
        snprintf(text[i], sizeof(text[i]), "{\"score\":%.2f}", guard ? f->guard_score : f->topic_score);
        res[i].id = f->task_id[i];
        res[i].status = guard ? f->guard_status : VSR_OK;
        res[i].result = guard && f->guard_result ? vsr_slice_cstr(f->guard_result) : vsr_slice_cstr(text[i]);
    }
    vsr_runtime_done_fn done = f->done;
    f->done = NULL;
    done(f->done_ud, VSR_OK, res, f->n_tasks);
}

static void *fake_call(void *ud, const vsr_runtime_bundle_t *b, uint64_t deadline_ms, vsr_runtime_done_fn done,
                       void *done_ud)
{
    fake_t *f = ud;
    f->calls++;
    f->deadline = deadline_ms;
    f->n_tasks = b->n_tasks;
    assert_true(b->n_tasks <= 4);
    for (size_t i = 0; i < b->n_tasks; i++) {
        snprintf(f->task_payload[i], sizeof(f->task_payload[i]), "%.*s", (int)b->tasks[i].payload.len,
                 b->tasks[i].payload.p);
        snprintf(f->task_type[i], sizeof(f->task_type[i]), "%s", b->tasks[i].type);
        snprintf(f->task_id[i], sizeof(f->task_id[i]), "%s", b->tasks[i].id);
    }
    f->done = done;
    f->done_ud = done_ud;
    if (f->mode == ANSWER_NOW) {
        fake_answer(f);
        return NULL;
    }
    if (f->mode == FAIL_NOW) {
        f->done = NULL;
        done(done_ud, VSR_ERR_IO, NULL, 0);
        return NULL;
    }
    return &f->handle;
}

static void fake_cancel(void *ud, void *handle)
{
    fake_t *f = ud;
    assert_ptr_equal(handle, &f->handle);
    assert_non_null(f->done); /* never a handle whose done ran */
    f->done = NULL;
    f->cancels++;
}

static uint64_t fake_now(void *ud)
{
    return ((fake_t *)ud)->now;
}

static void fake_resume(void *ud, vsr_session_t *s, const vsr_effect_t *eff)
{
    fake_t *f = ud;
    f->resumes++;
    f->resumed_s = s;
    f->resumed_status = eff->status;
    f->resumed_pending = eff->pending;
    const vsr_evidence_t *ev = vsr_session_evidence(s);
    snprintf(f->resumed_model, sizeof(f->resumed_model), "%s", ev->selected_model ? ev->selected_model : "");
    snprintf(f->resumed_decision, sizeof(f->resumed_decision), "%s", ev->decision ? ev->decision : "");
    f->resumed_confidence = ev->confidence;
    if (f->finish_in_resume) {
        vsr_session_finish(s); /* the adapter ends the request from here */
        f->resumed_s = NULL;
    }
}

static const vsr_ports_t fake_ports = {
    .runtime_call = fake_call,
    .runtime_cancel = fake_cancel,
    .now_ms = fake_now,
    .resume = fake_resume,
};

static void fake_init(fake_t *f, int mode)
{
    memset(f, 0, sizeof(*f));
    f->mode = mode;
    f->now = 1000;
    f->guard_score = 0.9;
    f->topic_score = 0.9;
}

static const char *BODY_CODE = "{\"model\":\"auto\",\"messages\":[{\"role\":\"user\",\"content\":\"write python\"}]}";

static vsr_session_t *open_body(doc_t *d, fake_t *f, const char *body, uint64_t deadline, const vsr_effect_t **eff)
{
    vsr_session_opts_t o = {.listener = &d->cfg->listeners[0], .ports = f ? &fake_ports : NULL, .ports_ud = f,
                            .deadline_ms = deadline};
    vsr_session_t *s = vsr_session_open(d->engine, &o);
    const vsr_effect_t *e = vsr_session_request_headers(s, VSR_SLICE_LIT("POST"), VSR_SLICE_LIT("/v1/chat/completions"),
                                                        NULL, 0);
    assert_int_equal(e->status, 0);
    *eff = vsr_session_request_body(s, body, strlen(body));
    return s;
}

static const char *model_of(vsr_session_t *s)
{
    return vsr_session_evidence(s)->selected_model;
}

static int register_probe(void **state)
{
    (void)state;
    return vsr_signals_register_family(&probe_family) == VSR_OK ? 0 : -1;
}

/* ---- tests ---- */

static void test_register_rules(void **state)
{
    (void)state;
    assert_int_equal(vsr_signals_register_family(&probe_family), VSR_OK); /* the same family again: fine */
    vsr_signal_family_t clash = probe_family;
    assert_int_equal(vsr_signals_register_family(&clash), VSR_ERR_INVALID);
    clash.cond_type = "keyword";
    assert_int_equal(vsr_signals_register_family(&clash), VSR_ERR_INVALID);
}

/* An answer at once: one bundle with the referenced signals' tasks only,
 * the request's deadline, and the final effect returned directly. */
static void test_answer_at_once(void **state)
{
    (void)state;
    doc_t d;
    doc_load(&d, NULL);
    fake_t f;
    fake_init(&f, ANSWER_NOW);
    const vsr_effect_t *eff;
    vsr_session_t *s = open_body(&d, &f, BODY_CODE, 5000, &eff);
    assert_int_equal(eff->pending, 0);
    assert_int_equal(eff->status, 0);
    assert_int_equal(f.calls, 1);
    assert_int_equal(f.n_tasks, 2); /* guard and topic; `unused` is referenced by no decision */
    assert_string_equal(f.task_type[0], "classify");
    assert_non_null(strstr(f.task_payload[0], "\"text\":\"write python\""));
    assert_string_not_equal(f.task_id[0], f.task_id[1]);
    assert_int_equal(f.deadline, 5000);
    assert_int_equal(f.resumes, 0);
    assert_false(vsr_session_pending(s));
    assert_string_equal(model_of(s), "large");
    assert_string_equal(vsr_session_evidence(s)->decision, "guarded");
    assert_true(vsr_session_evidence(s)->confidence > 0.89 && vsr_session_evidence(s)->confidence < 0.91);
    /* the model-backed hit is evidence like any signal's */
    int seen = 0;
    for (size_t i = 0; i < vsr_session_evidence(s)->n_signals; i++)
        seen |= strcmp(vsr_session_evidence(s)->signals[i].family, "probe") == 0 &&
                strcmp(vsr_session_evidence(s)->signals[i].name, "guard") == 0;
    assert_true(seen);
    vsr_session_finish(s);
    doc_free(&d);
}

/* A later answer: pending, then resume with the final effect. */
static void test_answer_later(void **state)
{
    (void)state;
    doc_t d;
    doc_load(&d, NULL);
    fake_t f;
    fake_init(&f, ANSWER_LATER);
    f.guard_score = 0.1; /* below guard's threshold: topic AND code decide */
    const vsr_effect_t *eff;
    vsr_session_t *s = open_body(&d, &f, BODY_CODE, 5000, &eff);
    assert_int_equal(eff->pending, 1);
    assert_int_equal(eff->status, 0);
    assert_true(vsr_session_pending(s));
    assert_int_equal(f.resumes, 0);
    f.now = 2000;
    fake_answer(&f);
    assert_int_equal(f.resumes, 1);
    assert_ptr_equal(f.resumed_s, s);
    assert_int_equal(f.resumed_pending, 0);
    assert_int_equal(f.resumed_status, 0);
    assert_string_equal(f.resumed_model, "mid");
    assert_string_equal(f.resumed_decision, "topical_code");
    assert_false(vsr_session_pending(s));
    assert_int_equal(vsr_session_plan(s)->kind, VSR_PLAN_CALL);
    /* the phases go on after a resume */
    const vsr_effect_t *r = vsr_session_response_headers(s, 200, NULL, 0);
    assert_int_equal(r->pending, 0);
    vsr_session_finish(s);
    assert_int_equal(f.cancels, 0);
    doc_free(&d);
}

/* The adapter may end the session from resume. */
static void test_finish_from_resume(void **state)
{
    (void)state;
    doc_t d;
    doc_load(&d, NULL);
    fake_t f;
    fake_init(&f, ANSWER_LATER);
    f.finish_in_resume = 1;
    const vsr_effect_t *eff;
    open_body(&d, &f, BODY_CODE, 5000, &eff);
    assert_int_equal(eff->pending, 1);
    fake_answer(&f);
    assert_int_equal(f.resumes, 1);
    assert_string_equal(f.resumed_model, "large");
    assert_int_equal(f.cancels, 0);
    doc_free(&d);
}

/* A failed call: every probe signal is unknown; no policy = no match, so
 * no decision matches and the default model serves. */
static void test_error_is_no_match(void **state)
{
    (void)state;
    doc_t d;
    doc_load(&d, NULL);
    fake_t f;
    fake_init(&f, FAIL_NOW);
    const vsr_effect_t *eff;
    vsr_session_t *s = open_body(&d, &f, BODY_CODE, 5000, &eff);
    assert_int_equal(eff->pending, 0);
    assert_int_equal(eff->status, 0);
    assert_int_equal(f.calls, 1);
    assert_string_equal(model_of(s), "small");
    assert_null(vsr_session_evidence(s)->decision);
    vsr_session_finish(s);

    /* no ports at all: the same, and nothing waits */
    s = open_body(&d, NULL, BODY_CODE, 0, &eff);
    assert_int_equal(eff->pending, 0);
    assert_string_equal(model_of(s), "small");
    vsr_session_finish(s);
    doc_free(&d);
}

/* The condition's on_error: match makes the condition match, with
 * confidence 0 (nothing was measured). */
static void test_condition_on_error_match(void **state)
{
    (void)state;
    doc_t d;
    doc_opts_t o = {.guard_leaf = VSR_ON_ERROR_MATCH};
    doc_load(&d, &o);
    fake_t f;
    fake_init(&f, FAIL_NOW);
    const vsr_effect_t *eff;
    vsr_session_t *s = open_body(&d, &f, BODY_CODE, 5000, &eff);
    assert_string_equal(model_of(s), "large");
    assert_string_equal(vsr_session_evidence(s)->decision, "guarded");
    assert_true(vsr_session_evidence(s)->confidence == 0);
    /* an unknown signal is no hit in the evidence, whatever the policy */
    for (size_t i = 0; i < vsr_session_evidence(s)->n_signals; i++)
        assert_string_not_equal(vsr_session_evidence(s)->signals[i].family, "probe");
    vsr_session_finish(s);
    doc_free(&d);
}

/* The family's policy applies when the condition has none; the condition's
 * own wins over it. */
static void test_family_on_error(void **state)
{
    (void)state;
    doc_t d;
    doc_opts_t o = {.guard_family = VSR_ON_ERROR_MATCH};
    doc_load(&d, &o);
    fake_t f;
    fake_init(&f, FAIL_NOW);
    const vsr_effect_t *eff;
    vsr_session_t *s = open_body(&d, &f, BODY_CODE, 5000, &eff);
    assert_string_equal(vsr_session_evidence(s)->decision, "guarded");
    vsr_session_finish(s);
    doc_free(&d);

    o.guard_leaf = VSR_ON_ERROR_NO_MATCH;
    doc_load(&d, &o);
    s = open_body(&d, &f, BODY_CODE, 5000, &eff);
    assert_null(vsr_session_evidence(s)->decision);
    vsr_session_finish(s);
    doc_free(&d);
}

/* rules.on_unknown: fail_request: a condition without a policy of its own
 * on an unknown signal fails the request (503); the condition's policy
 * wins over it; a computed signal never fails it. */
static void test_on_unknown_fail_request(void **state)
{
    (void)state;
    doc_t d;
    doc_opts_t o = {.guarded_fail = 1};
    doc_load(&d, &o);
    fake_t f;
    fake_init(&f, FAIL_NOW);
    const vsr_effect_t *eff;
    vsr_session_t *s = open_body(&d, &f, BODY_CODE, 5000, &eff);
    assert_int_equal(eff->status, 503);
    assert_non_null(strstr(eff->resp_body.p, "\"code\":\"signal_unavailable\""));
    assert_non_null(strstr(eff->resp_body.p, "guard"));
    vsr_session_finish(s);

    fake_init(&f, ANSWER_NOW);
    s = open_body(&d, &f, BODY_CODE, 5000, &eff);
    assert_int_equal(eff->status, 0);
    assert_string_equal(model_of(s), "large");
    vsr_session_finish(s);
    doc_free(&d);

    o.guard_leaf = VSR_ON_ERROR_NO_MATCH;
    doc_load(&d, &o);
    fake_init(&f, FAIL_NOW);
    s = open_body(&d, &f, BODY_CODE, 5000, &eff);
    assert_int_equal(eff->status, 0);
    assert_string_equal(model_of(s), "small");
    vsr_session_finish(s);
    doc_free(&d);
}

/* An answer past the deadline counts as failed: its scores are ignored. */
static void test_late_answer(void **state)
{
    (void)state;
    doc_t d;
    doc_load(&d, NULL);
    fake_t f;
    fake_init(&f, ANSWER_LATER);
    const vsr_effect_t *eff;
    vsr_session_t *s = open_body(&d, &f, BODY_CODE, 5000, &eff);
    assert_int_equal(eff->pending, 1);
    f.now = 5001;
    fake_answer(&f);
    assert_int_equal(f.resumes, 1);
    assert_string_equal(f.resumed_model, "small");
    assert_string_equal(f.resumed_decision, "");
    vsr_session_finish(s);

    /* no time left when the phase starts: no call at all */
    fake_init(&f, ANSWER_LATER);
    f.now = 6000;
    s = open_body(&d, &f, BODY_CODE, 5000, &eff);
    assert_int_equal(eff->pending, 0);
    assert_int_equal(f.calls, 0);
    assert_string_equal(model_of(s), "small");
    vsr_session_finish(s);

    /* no deadline from the adapter: the default bound */
    fake_init(&f, ANSWER_NOW);
    s = open_body(&d, &f, BODY_CODE, 0, &eff);
    assert_int_equal(f.deadline, 1000 + VSR_SESSION_WAIT_DEFAULT_MS);
    vsr_session_finish(s);
    doc_free(&d);
}

/* One task failing, or a result the family cannot read, leaves the other
 * tasks' answers standing. */
static void test_partial_answers(void **state)
{
    (void)state;
    doc_t d;
    doc_load(&d, NULL);
    fake_t f;
    fake_init(&f, ANSWER_NOW);
    f.guard_status = VSR_ERR;
    const vsr_effect_t *eff;
    vsr_session_t *s = open_body(&d, &f, BODY_CODE, 5000, &eff);
    assert_string_equal(vsr_session_evidence(s)->decision, "topical_code");
    vsr_session_finish(s);

    fake_init(&f, ANSWER_NOW);
    f.guard_result = "{\"score\":";
    s = open_body(&d, &f, BODY_CODE, 5000, &eff);
    assert_string_equal(vsr_session_evidence(s)->decision, "topical_code");
    vsr_session_finish(s);
    doc_free(&d);
}

/* The client goes: the call in flight is cancelled once, resume never runs. */
static void test_cancel(void **state)
{
    (void)state;
    doc_t d;
    doc_load(&d, NULL);
    fake_t f;
    fake_init(&f, ANSWER_LATER);
    const vsr_effect_t *eff;
    vsr_session_t *s = open_body(&d, &f, BODY_CODE, 5000, &eff);
    assert_int_equal(eff->pending, 1);
    vsr_session_finish(s);
    assert_int_equal(f.cancels, 1);
    assert_int_equal(f.resumes, 0);

    fake_init(&f, ANSWER_LATER);
    s = open_body(&d, &f, BODY_CODE, 5000, &eff);
    vsr_session_cancel(s);
    assert_false(vsr_session_pending(s));
    vsr_session_cancel(s);
    vsr_session_finish(s);
    assert_int_equal(f.cancels, 1);
    assert_int_equal(f.resumes, 0);

    /* an answered call is never cancelled */
    fake_init(&f, ANSWER_LATER);
    s = open_body(&d, &f, BODY_CODE, 5000, &eff);
    fake_answer(&f);
    vsr_session_finish(s);
    assert_int_equal(f.cancels, 0);
    doc_free(&d);
}

/* What references no model-backed signal never calls the runtime. */
static void test_rule_only_requests_never_call(void **state)
{
    (void)state;
    doc_t d;
    doc_load(&d, NULL);
    fake_t f;
    fake_init(&f, ANSWER_LATER);
    const vsr_effect_t *eff;
    /* passthrough: no signals */
    vsr_session_t *s = open_body(&d, &f, "{\"model\":\"large\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
                                 5000, &eff);
    assert_int_equal(eff->pending, 0);
    assert_int_equal(f.calls, 0);
    vsr_session_finish(s);
    doc_free(&d);

    /* a document without probe signals */
    vsr_config_t *cfg;
    vsr_buf_t err;
    vsr_buf_init(&err, 0);
    assert_int_equal(vsr_config_load_string("plain.yaml", DOC, strlen(DOC), &cfg, &err), VSR_OK);
    vsr_engine_t *e = vsr_engine_new(cfg, 1, &err);
    assert_non_null(e);
    vsr_session_opts_t o = {.listener = &cfg->listeners[0], .ports = &fake_ports, .ports_ud = &f, .deadline_ms = 5000};
    s = vsr_session_open(e, &o);
    vsr_session_request_headers(s, VSR_SLICE_LIT("POST"), VSR_SLICE_LIT("/v1/chat/completions"), NULL, 0);
    eff = vsr_session_request_body(s, BODY_CODE, strlen(BODY_CODE));
    assert_int_equal(eff->pending, 0);
    assert_int_equal(f.calls, 0);
    vsr_session_finish(s);
    vsr_engine_unref(e);
    vsr_config_free(cfg);
    vsr_buf_free(&err);
}

static void preview_done(void *ud, int status)
{
    *(int *)ud = status;
}

/* The routing preview runs the same path. */
static void test_preview_waits(void **state)
{
    (void)state;
    doc_t d;
    doc_load(&d, NULL);
    fake_t f;
    fake_init(&f, ANSWER_LATER);
    vsr_buf_t out;
    vsr_buf_init(&out, 0);
    int status = 0;
    vsr_preview_t *w = NULL;
    int rc = vsr_engine_preview_wait(d.engine, VSR_SLICE_LIT("auto"), VSR_SLICE_LIT("python"), 1, &out, &fake_ports,
                                     &f, 5000, preview_done, &status, &w);
    assert_int_equal(rc, VSR_AGAIN);
    assert_non_null(w);
    assert_int_equal(f.calls, 1);
    assert_int_equal(status, 0);
    fake_answer(&f);
    assert_int_equal(status, 200);
    assert_non_null(strstr(out.data, "\"decision_name\":\"guarded\""));
    assert_non_null(strstr(out.data, "\"probe:guard\":0.9000"));

    /* cancelled: done never runs */
    vsr_buf_reset(&out);
    fake_init(&f, ANSWER_LATER);
    status = 0;
    rc = vsr_engine_preview_wait(d.engine, VSR_SLICE_LIT("auto"), VSR_SLICE_LIT("python"), 0, &out, &fake_ports, &f,
                                 5000, preview_done, &status, &w);
    assert_int_equal(rc, VSR_AGAIN);
    vsr_preview_cancel(w);
    assert_int_equal(f.cancels, 1);
    assert_int_equal(status, 0);

    /* rules.on_unknown: fail_request: the preview says so */
    doc_t d2;
    doc_opts_t o = {.guarded_fail = 1};
    doc_load(&d2, &o);
    vsr_buf_reset(&out);
    rc = vsr_engine_preview(d2.engine, VSR_SLICE_LIT("auto"), VSR_SLICE_LIT("python"), 0, &out);
    assert_int_equal(rc, 200);
    assert_non_null(strstr(out.data, "\"selection_status\":\"signal_unavailable\""));
    assert_non_null(strstr(out.data, "\"selected_model\":null"));
    doc_free(&d2);

    /* no ports: at once, the probe signals unknown */
    vsr_buf_reset(&out);
    rc = vsr_engine_preview(d.engine, VSR_SLICE_LIT("auto"), VSR_SLICE_LIT("python"), 0, &out);
    assert_int_equal(rc, 200);
    assert_non_null(strstr(out.data, "\"decision_result\":null"));
    vsr_buf_free(&out);
    doc_free(&d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_register_rules),
        cmocka_unit_test(test_answer_at_once),
        cmocka_unit_test(test_answer_later),
        cmocka_unit_test(test_finish_from_resume),
        cmocka_unit_test(test_error_is_no_match),
        cmocka_unit_test(test_condition_on_error_match),
        cmocka_unit_test(test_family_on_error),
        cmocka_unit_test(test_on_unknown_fail_request),
        cmocka_unit_test(test_late_answer),
        cmocka_unit_test(test_partial_answers),
        cmocka_unit_test(test_cancel),
        cmocka_unit_test(test_rule_only_requests_never_call),
        cmocka_unit_test(test_preview_waits),
    };
    return cmocka_run_group_tests(tests, register_probe, NULL);
}
