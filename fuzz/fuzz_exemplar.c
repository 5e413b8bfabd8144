/*
 * fuzz_exemplar.c — the exemplar-bank families (src/signals/exemplar.c):
 * fact_check, user_feedbacks and modality over arbitrary routing texts and
 * runtime answers.  The first byte picks the family (byte % 3), the label
 * (byte / 3, modulo the family's labels) and whether the rest is the
 * routing text (even second byte) or the runtime's answer (odd); with bit
 * 1 of the second byte set, a local classifier (routing.signals.classifiers)
 * over a small inline bank of three labels takes the family's place.
 *
 * Checks, beyond memory safety: the task's payload is JSON; a text scored
 * against a canned bank answer (every exemplar on its label's axis) gives
 * VSR_OK, a value <= 1 and matches only with a value >= the threshold; an
 * arbitrary answer is either refused or gives the same invariants; a
 * classifier's result names a label and its evidence is JSON.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json/json.h"
#include "signals/signals-int.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(int cond, const char *what)
{
    if (!cond) {
        fprintf(stderr, "fuzz_exemplar: invariant broken: %s\n", what);
        abort();
    }
}

static const char *const families[] = {"fact_check", "user_feedbacks", "modality"};
static const char *const labels[3][4] = {
    {"needs_fact_check", "no_fact_check_needed"},
    {"wrong_answer", "need_clarification", "want_different", "satisfied"},
    {"AR", "DIFFUSION", "BOTH"},
};
static const size_t n_labels[3] = {2, 4, 3};

static void check_result(const vsr_signal_result_t *r, double threshold)
{
    check(r->value <= 1.0, "value <= 1");
    check(!r->matched || r->value >= threshold, "a match is at or above the threshold");
    check(r->confidence >= 0 && r->confidence <= 1, "confidence in [0, 1]");
}

static char *cls_labels[] = {"alpha", "beta", "gamma"};
static vsr_cls_example_conf_t cls_examples[] = {
    {"first alpha text", 0}, {"second alpha", 0}, {"a beta one", 1}, {"beta \"quoted\" \u00e9", 1},
    {"gamma", 2},            {"gamma again", 2},
};

static void fuzz_classifier(int answer, vsr_slice_t rest, vsr_pool_t *pool)
{
    static vsr_sig_classifier_conf_t conf;
    static vsr_recipe_conf_t recipe;
    memset(&conf, 0, sizeof(conf));
    memset(&recipe, 0, sizeof(recipe));
    conf.name = (char *)"c";
    conf.threshold = 0.3;
    conf.labels = cls_labels;
    conf.n_labels = 3;
    conf.examples = cls_examples;
    conf.n_examples = sizeof(cls_examples) / sizeof(cls_examples[0]);
    recipe.name = (char *)"r";
    recipe.signals.classifiers = &conf;
    recipe.signals.n_classifiers = 1;
    vsr_buf_t err;
    vsr_buf_init(&err, 256);
    vsr_signals_t *s = vsr_signals_compile(&recipe, &err);
    check(s != NULL, "the classifier compiles");
    vsr_buf_free(&err);
    vsr_signal_input_t in;
    memset(&in, 0, sizeof(in));
    in.pool = pool;
    in.text = answer ? vsr_slice_cstr("a question") : rest;
    vsr_signal_task_t t;
    if (vsr_signals_task(s, 0, &in, &t) == 1) {
        vsr_json_t j;
        memset(&j, 0, sizeof(j));
        check(vsr_json_parse(&j, t.payload.p, t.payload.len, NULL) == VSR_OK, "the task is JSON");
        vsr_json_free(&j);
    }
    vsr_buf_t b;
    vsr_buf_init(&b, 0);
    if (answer)
        vsr_buf_append_slice(&b, rest);
    else
        vsr_buf_printf(&b, "{\"model\":\"m\",\"dim\":3,\"embeddings\":[[%d,1,0],[1,0,0],[1,0.1,0],[0,1,0],"
                           "[0,1,0.1],[0,0,1],[0.1,0,1]]}", (int)(rest.len % 3));
    vsr_signal_result_t r;
    memset(&r, 0, sizeof(r));
    int rc = in.text.len > 0 ? vsr_signals_consume(s, 0, &in, vsr_buf_slice(&b), &r) : VSR_ERR_INVALID;
    if (rc == VSR_OK) {
        check_result(&r, conf.threshold);
        check(r.label != NULL, "a classifier's result names a label");
        vsr_json_t j;
        memset(&j, 0, sizeof(j));
        check(vsr_json_parse(&j, r.evidence.p, r.evidence.len, NULL) == VSR_OK, "the evidence is JSON");
        vsr_json_free(&j);
    }
    check(answer || in.text.len == 0 || rc == VSR_OK, "the canned answer is read");
    vsr_buf_free(&b);
    vsr_signals_free(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    size_t fam = data[0] % 3, lab = (size_t)(data[0] / 3) % n_labels[fam];
    int answer = data[1] & 1;
    vsr_slice_t rest = vsr_slice((const char *)data + 2, size - 2);
    if (data[1] & 2) {
        vsr_pool_t pool;
        vsr_pool_init(&pool);
        fuzz_classifier(answer, rest, &pool);
        vsr_pool_free(&pool);
        return 0;
    }
    static vsr_sig_exemplar_conf_t conf;
    static vsr_recipe_conf_t recipe;
    memset(&conf, 0, sizeof(conf));
    memset(&recipe, 0, sizeof(recipe));
    conf.name = (char *)labels[fam][lab];
    conf.threshold = 0.3;
    recipe.name = (char *)"r";
    if (fam == 0) {
        recipe.signals.fact_check = &conf;
        recipe.signals.n_fact_check = 1;
    } else if (fam == 1) {
        recipe.signals.user_feedbacks = &conf;
        recipe.signals.n_user_feedbacks = 1;
    } else {
        recipe.signals.modality = &conf;
        recipe.signals.n_modality = 1;
    }
    vsr_buf_t err;
    vsr_buf_init(&err, 256);
    vsr_signals_t *s = vsr_signals_compile(&recipe, &err);
    check(s != NULL, "the built-in banks compile");
    vsr_buf_free(&err);

    vsr_pool_t pool;
    vsr_pool_init(&pool);
    vsr_chat_message_t msgs[2];
    memset(msgs, 0, sizeof(msgs));
    msgs[0].role = VSR_ROLE_ASSISTANT;
    msgs[0].text = vsr_slice_cstr("an earlier reply");
    msgs[1].role = VSR_ROLE_USER;
    vsr_chat_view_t chat;
    memset(&chat, 0, sizeof(chat));
    chat.messages = msgs;
    chat.n_messages = 2;
    chat.last_user = 1;
    vsr_signal_input_t in;
    memset(&in, 0, sizeof(in));
    in.pool = &pool;
    in.chat = &chat;
    in.text = answer ? vsr_slice_cstr("a question") : rest;
    msgs[1].text = in.text;
    vsr_signal_result_t r;
    vsr_signal_task_t t;
    if (vsr_signals_task(s, 0, &in, &t) == 1) {
        vsr_json_t j;
        memset(&j, 0, sizeof(j));
        check(vsr_json_parse(&j, t.payload.p, t.payload.len, NULL) == VSR_OK, "the task is JSON");
        vsr_json_free(&j);
    }
    if (answer) {
        memset(&r, 0, sizeof(r));
        if (vsr_signals_consume(s, 0, &in, rest, &r) == VSR_OK)
            check_result(&r, conf.threshold);
    } else if (in.text.len > 0) {
        /* the canned answer: the text leans on its own label's axis */
        size_t n = vsr__exemplar_bank_size(families[fam]);
        const unsigned char *bank = fam == 0   ? vsr_builtin_fact_check_exemplars
                                    : fam == 1 ? vsr_builtin_user_feedbacks_exemplars
                                               : vsr_builtin_modality_exemplars;
        vsr_buf_t b;
        vsr_buf_init(&b, 0);
        vsr_buf_printf(&b, "{\"model\":\"m\",\"dim\":4,\"embeddings\":[[%d,%d,%d,%d]", 1 + (lab == 0), 1 + (lab == 1),
                       1 + (lab == 2), 1 + (lab == 3));
        const char *p = (const char *)bank;
        for (size_t i = 0; i < n; i++) {
            size_t k = 0;
            for (size_t x = 0; x < n_labels[fam]; x++) {
                char needle[96];
                snprintf(needle, sizeof needle, "\"label\": \"%s\"", labels[fam][x]);
                const char *nl = strchr(p, '\n');
                if (memmem(p, (size_t)(nl - p), needle, strlen(needle)))
                    k = x;
            }
            vsr_buf_printf(&b, ",[%d,%d,%d,%d]", k == 0, k == 1, k == 2, k == 3);
            p = strchr(p, '\n') + 1;
        }
        vsr_buf_append_cstr(&b, "]}");
        memset(&r, 0, sizeof(r));
        check(vsr_signals_consume(s, 0, &in, vsr_buf_slice(&b), &r) == VSR_OK, "the canned answer is read");
        check_result(&r, conf.threshold);
        vsr_buf_free(&b);
    }
    vsr_pool_free(&pool);
    vsr_signals_free(s);
    return 0;
}
