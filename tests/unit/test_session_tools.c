/* test_session_tools.c — the routing core's side of the semantic tool
 * plugins with a fake runtime port: the one embed task it asks for (the
 * routing text, then the tools' texts), the selection once the vectors come
 * (at once or later), and failing open when the runtime fails, answers
 * late, or the client leaves. */
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
    "  defaults: {model: m}\n"
    "  models: [{name: m, backend_refs: [{endpoint: \"127.0.0.1:9\"}]}]\n"
    "routing:\n"
    "  decisions:\n"
    "    - name: d\n"
    "      modelRefs: [{model: m}]\n"
    "      plugins: [{type: tools, configuration: {semantic_selection: {top_k: 1, similarity_threshold: 0.5}}}]\n";

static const char *BODY =
    "{\"model\":\"auto\",\"messages\":[{\"role\":\"user\",\"content\":\"weather please\"}],\"tools\":["
    "{\"type\":\"function\",\"function\":{\"name\":\"mail\",\"description\":\"send mail\"}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"weather\",\"description\":\"forecast\"}}]}";

typedef struct {
    int later, fail, rt_cancels, resumes, calls;
    char payload[1024];
    vsr_runtime_done_fn done;
    void *done_ud;
    int handle;
    uint64_t now;
    const vsr_effect_t *resumed;
} fake_t;

static void answer(fake_t *f)
{
    /* the query and "weather" point the same way; "mail" does not */
    static const char *res = "{\"model\":\"x\",\"dim\":2,\"embeddings\":[[1,0],[0,1],[0.9,0.1]]}";
    vsr_runtime_result_t r = {"tools", VSR_OK, vsr_slice_cstr(res)};
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

static vsr_session_t *open_req(doc_t *d, fake_t *f, const vsr_effect_t **eff)
{
    vsr_session_opts_t o = {.listener = &d->cfg->listeners[0], .ports = &ports, .ports_ud = f, .deadline_ms = 1000};
    vsr_session_t *s = vsr_session_open(d->engine, &o);
    vsr_session_request_headers(s, VSR_SLICE_LIT("POST"), VSR_SLICE_LIT("/v1/chat/completions"), NULL, 0);
    *eff = vsr_session_request_body(s, BODY, strlen(BODY));
    return s;
}

static void body_of(const vsr_effect_t *e, char *out, size_t cap)
{
    size_t w = 0;
    for (size_t i = 0; e->body_replaced && i < e->n_body && w + e->body[i].len < cap; i++) {
        memcpy(out + w, e->body[i].p, e->body[i].len);
        w += e->body[i].len;
    }
    out[w] = '\0';
}

static void test_selects_on_the_runtime_vectors(void **state)
{
    (void)state;
    doc_t d;
    doc_init(&d);
    for (int later = 0; later <= 1; later++) {
        fake_t f = {.later = later};
        const vsr_effect_t *e;
        vsr_session_t *s = open_req(&d, &f, &e);
        assert_int_equal(f.calls, 1);
        assert_string_equal(f.payload, "{\"input\":[\"weather please\",\"mail: send mail\",\"weather: forecast\"]}");
        if (later) {
            assert_true(e->pending);
            answer(&f);
            assert_int_equal(f.resumes, 1);
            e = f.resumed;
        }
        char body[2048];
        body_of(e, body, sizeof(body));
        assert_null(strstr(body, "\"mail\""));
        assert_non_null(strstr(body, "\"weather\""));
        const vsr_evidence_t *ev = vsr_session_evidence(s);
        assert_int_equal(ev->tools_selection, 1);
        assert_int_equal(ev->tools_before, 2);
        assert_int_equal(ev->tools_after, 1);
        vsr_session_finish(s);
    }
    vsr_engine_unref(d.engine);
    vsr_config_free(d.cfg);
}

static void test_fails_open(void **state)
{
    (void)state;
    doc_t d;
    doc_init(&d);
    /* the runtime fails */
    fake_t f = {.fail = 1};
    const vsr_effect_t *e;
    vsr_session_t *s = open_req(&d, &f, &e);
    assert_false(e->pending);
    char body[2048];
    body_of(e, body, sizeof(body));
    assert_true(body[0] == '\0' || (strstr(body, "\"mail\"") && strstr(body, "\"weather\"")));
    assert_int_equal(vsr_session_evidence(s)->tools_selection, 2);
    assert_int_equal(vsr_session_evidence(s)->tools_after, 2);
    vsr_session_finish(s);
    /* an answer past the deadline counts as none */
    f = (fake_t){.later = 1};
    s = open_req(&d, &f, &e);
    f.now = 5000;
    answer(&f);
    assert_int_equal(f.resumes, 1);
    assert_int_equal(vsr_session_evidence(s)->tools_selection, 2);
    vsr_session_finish(s);
    /* the client leaves while the vectors are awaited */
    f = (fake_t){.later = 1};
    s = open_req(&d, &f, &e);
    assert_true(vsr_session_pending(s));
    vsr_session_cancel(s);
    assert_int_equal(f.rt_cancels, 1);
    vsr_session_finish(s);
    assert_int_equal(f.resumes, 0);
    vsr_engine_unref(d.engine);
    vsr_config_free(d.cfg);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_selects_on_the_runtime_vectors),
        cmocka_unit_test(test_fails_open),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
