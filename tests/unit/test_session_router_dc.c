/* test_session_router_dc.c — the routing core's side of the router_dc
 * selector with a fake runtime port: the one embed task it asks for (the
 * query, then the descriptions the engine keeps no embedding of), the pick
 * on the vectors that come back, the descriptions' embeddings kept for the
 * configuration version (a second request sends the query alone), and the
 * first candidate when the runtime fails or answers late. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "routing/routing.h"

static const char *DOC =
    "version: v0.3\n"
    "listeners: [{name: l, address: 127.0.0.1, port: 8899}]\n"
    "providers:\n"
    "  defaults: {model: a}\n"
    "  models:\n"
    "    - {name: a, backend_refs: [{endpoint: \"127.0.0.1:9\"}]}\n"
    "    - {name: b, backend_refs: [{endpoint: \"127.0.0.1:9\"}]}\n"
    "    - {name: c, backend_refs: [{endpoint: \"127.0.0.1:9\"}]}\n"
    "routing:\n"
    "  modelCards:\n"
    "    - {name: a, description: Poetry}\n"
    "    - {name: b, description: Code, capabilities: [python, c]}\n"
    "  decisions:\n"
    "    - name: d\n"
    "      modelRefs: [{model: a}, {model: b}, {model: c}]\n"
    "      algorithm: {type: router_dc}\n";

static const char *BODY = "{\"model\":\"auto\",\"messages\":[{\"role\":\"user\",\"content\":\"fix my loop\"}]}";

typedef struct {
    int later, fail, rt_cancels, resumes, calls;
    const char *answer;
    char payload[1024];
    vsr_runtime_done_fn done;
    void *done_ud;
    int handle;
    uint64_t now;
    const vsr_effect_t *resumed;
} fake_t;

static void answer(fake_t *f)
{
    vsr_runtime_result_t r = {"dc", VSR_OK, vsr_slice_cstr(f->answer)};
    vsr_runtime_done_fn done = f->done;
    f->done = NULL;
    if (f->fail)
        done(f->done_ud, VSR_ERR_IO, NULL, 0);
    else
        done(f->done_ud, VSR_OK, &r, 1);
}

static void *fake_rt(void *ud, const vsr_runtime_bundle_t *b, uint64_t deadline, vsr_runtime_done_fn done,
                     void *done_ud)
{
    (void)deadline;
    fake_t *f = ud;
    f->calls++;
    assert_int_equal(b->n_tasks, 1);
    assert_string_equal(b->tasks[0].type, "embed");
    snprintf(f->payload, sizeof(f->payload), "%.*s", (int)b->tasks[0].payload.len, b->tasks[0].payload.p);
    f->done = done;
    f->done_ud = done_ud;
    if (!f->later) {
        answer(f);
        return NULL;
    }
    return &f->handle;
}

static void fake_cancel(void *ud, void *h)
{
    fake_t *f = ud;
    assert_ptr_equal(h, &f->handle);
    f->done = NULL;
    f->rt_cancels++;
}

static uint64_t fake_now(void *ud)
{
    return ((fake_t *)ud)->now;
}

static void fake_resume(void *ud, vsr_session_t *s, const vsr_effect_t *eff)
{
    (void)s;
    fake_t *f = ud;
    f->resumes++;
    f->resumed = eff;
}

static const vsr_ports_t ports = {
    .runtime_call = fake_rt, .runtime_cancel = fake_cancel, .now_ms = fake_now, .resume = fake_resume};

typedef struct {
    vsr_config_t *cfg;
    vsr_engine_t *engine;
} doc_t;

static void doc_init(doc_t *d)
{
    vsr_buf_t err;
    vsr_buf_init(&err, 0);
    assert_int_equal(vsr_config_load_string("c.yaml", DOC, strlen(DOC), &d->cfg, &err), VSR_OK);
    d->engine = vsr_engine_new(d->cfg, 1, &err);
    assert_non_null(d->engine);
    vsr_buf_free(&err);
}

static void doc_free(doc_t *d)
{
    vsr_engine_unref(d->engine);
    vsr_config_free(d->cfg);
}

static vsr_session_t *open_req(doc_t *d, fake_t *f, const vsr_effect_t **eff)
{
    vsr_session_opts_t o = {.listener = &d->cfg->listeners[0], .ports = &ports, .ports_ud = f, .deadline_ms = 1000};
    vsr_session_t *s = vsr_session_open(d->engine, &o);
    vsr_session_request_headers(s, VSR_SLICE_LIT("POST"), VSR_SLICE_LIT("/v1/chat/completions"), NULL, 0);
    *eff = vsr_session_request_body(s, BODY, strlen(BODY));
    return s;
}

static void test_picks_on_the_runtime_vectors(void **state)
{
    (void)state;
    doc_t d;
    doc_init(&d);
    for (int later = 0; later <= 1; later++) {
        /* query (1,0); a (0,1): cosine 0; b (0.8,0.6): cosine 0.8; c has no card */
        fake_t f = {.later = later, .answer = "{\"dim\":2,\"embeddings\":[[1,0],[0,1],[0.8,0.6]]}"};
        const vsr_effect_t *e;
        vsr_session_t *s = open_req(&d, &f, &e);
        assert_int_equal(f.calls, 1);
        if (later == 0)
            assert_string_equal(f.payload,
                                "{\"input\":[\"fix my loop\",\"Poetry\",\"Code. Capabilities: python, c\"]}");
        if (later) {
            /* the descriptions were kept by the first request: the query alone */
            assert_string_equal(f.payload, "{\"input\":[\"fix my loop\"]}");
            assert_true(e->pending);
            f.answer = "{\"dim\":2,\"embeddings\":[[0,1]]}"; /* now a (cosine 1) is nearest, b 0.6 */
            answer(&f);
            assert_int_equal(f.resumes, 1);
            e = f.resumed;
        }
        const vsr_evidence_t *ev = vsr_session_evidence(s);
        const vsr_selection_t *sel = ev->selection;
        assert_non_null(sel);
        assert_null(sel->warning);
        assert_int_equal(sel->n, 3);
        assert_true(sel->scored[0] && sel->scored[1] && sel->scored[2]);
        double sum = sel->scores[0] + sel->scores[1] + sel->scores[2];
        assert_float_equal(sum, 1.0, 1e-9);
        if (later == 0) {
            assert_string_equal(ev->selected_model, "b");
            /* raw: a sigmoid(0) = 0.5, b sigmoid(0.8/0.07), c min_similarity 0.3; softmax at 0.07 */
            assert_float_equal(sel->scores[1], 0.999165, 1e-5);
            assert_float_equal(sel->scores[0], 7.8995e-4, 1e-7);
            assert_float_equal(sel->scores[2], 4.5369e-5, 1e-8);
        } else {
            assert_string_equal(ev->selected_model, "a");
        }
        vsr_session_finish(s);
    }
    doc_free(&d);
}

static void test_first_candidate_when_the_runtime_fails(void **state)
{
    (void)state;
    doc_t d;
    doc_init(&d);
    const char *ok = "{\"dim\":2,\"embeddings\":[[1,0],[0,1],[0.8,0.6]]}";
    fake_t f = {.fail = 1, .answer = ok};
    const vsr_effect_t *e;
    vsr_session_t *s = open_req(&d, &f, &e);
    assert_false(e->pending);
    assert_string_equal(vsr_session_evidence(s)->selected_model, "a");
    assert_non_null(strstr(vsr_session_evidence(s)->selection->warning, "no embedding of the query"));
    vsr_session_finish(s);
    /* an answer past the deadline counts as none (and keeps no description) */
    f = (fake_t){.later = 1, .answer = ok};
    s = open_req(&d, &f, &e);
    f.now = 5000;
    answer(&f);
    assert_int_equal(f.resumes, 1);
    assert_string_equal(vsr_session_evidence(s)->selected_model, "a");
    vsr_session_finish(s);
    /* the client leaves while the vectors are awaited */
    f = (fake_t){.later = 1, .answer = ok};
    s = open_req(&d, &f, &e);
    assert_string_equal(f.payload, "{\"input\":[\"fix my loop\",\"Poetry\",\"Code. Capabilities: python, c\"]}");
    assert_true(vsr_session_pending(s));
    vsr_session_cancel(s);
    assert_int_equal(f.rt_cancels, 1);
    vsr_session_finish(s);
    assert_int_equal(f.resumes, 0);
    doc_free(&d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_picks_on_the_runtime_vectors),
        cmocka_unit_test(test_first_candidate_when_the_runtime_fails),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
