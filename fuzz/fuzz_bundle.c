/*
 * fuzz_bundle.c — vsr_rt_bundle_parse (the model runtime's /v1/bundle
 * request parser) over arbitrary bytes.
 *
 * Checks, beyond memory safety:
 *  - the result is either VSR_OK with 1..max_tasks tasks, or one of the
 *    documented statuses (400, 413, 422) with a code and a message;
 *  - every task has a 1..256-byte id, ids are unique, and its kind is one
 *    of the five; an embed task holds 1..2048 non-empty inputs, a classify
 *    task a model, one non-empty text and its raw JSON object, an invalid
 *    one says why;
 *  - the slices point into the body or the pool (they are readable);
 *  - a smaller task bound only ever turns an answer into 413.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/runtime.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                        \
    do {                                                                                   \
        if (!(cond)) {                                                                     \
            fprintf(stderr, "fuzz_bundle: check failed: %s (line %d)\n", #cond, __LINE__); \
            abort();                                                                       \
        }                                                                                  \
    } while (0)

static volatile unsigned sink;

static void touch(vsr_slice_t s)
{
    for (size_t i = 0; i < s.len; i++)
        sink += (unsigned char)s.p[i];
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    vsr_pool_t pool;
    vsr_pool_init(&pool);
    vsr_rt_bundle_t b;
    const char *code = NULL, *msg = NULL;
    int st = vsr_rt_bundle_parse((const char *)data, size, 64, &pool, &b, &code, &msg);
    if (st != VSR_OK) {
        CHECK(st == 400 || st == 413 || st == 422);
        CHECK(code != NULL && msg != NULL && *msg);
        CHECK(b.n_tasks == 0 && b.tasks == NULL);
    } else {
        CHECK(b.n_tasks >= 1 && b.n_tasks <= 64);
        CHECK(b.deadline_ms >= -1);
        for (size_t i = 0; i < b.n_tasks; i++) {
            const vsr_rt_task_t *t = &b.tasks[i];
            CHECK(t->id.len >= 1 && t->id.len <= VSR_RT_MAX_ID);
            touch(t->id);
            for (size_t k = 0; k < i; k++)
                CHECK(!vsr_slice_eq(b.tasks[k].id, t->id));
            switch (t->kind) {
            case VSR_RT_TASK_EMBED:
                CHECK(t->n_inputs >= 1 && t->n_inputs <= VSR_RT_MAX_INPUTS);
                for (size_t k = 0; k < t->n_inputs; k++) {
                    CHECK(t->inputs[k].len > 0);
                    touch(t->inputs[k]);
                }
                touch(t->model);
                break;
            case VSR_RT_TASK_CLASSIFY:
                CHECK(t->n_inputs == 1 && t->inputs[0].len > 0 && t->model.len > 0);
                CHECK(t->payload.len >= 2 && t->payload.p[0] == '{' && t->payload.p[t->payload.len - 1] == '}');
                touch(t->inputs[0]);
                touch(t->model);
                touch(t->payload);
                break;
            case VSR_RT_TASK_UNSUPPORTED:
            case VSR_RT_TASK_UNKNOWN:
                touch(t->type);
                break;
            case VSR_RT_TASK_INVALID:
                CHECK(t->error != NULL && *t->error);
                break;
            default:
                CHECK(0);
            }
        }
    }
    /* a tighter task bound: the same answer, or 413 in place of success */
    vsr_pool_t pool2;
    vsr_pool_init(&pool2);
    vsr_rt_bundle_t b2;
    int st2 = vsr_rt_bundle_parse((const char *)data, size, 2, &pool2, &b2, &code, &msg);
    if (st == VSR_OK)
        CHECK(st2 == VSR_OK ? b2.n_tasks == b.n_tasks : (st2 == 413 && b.n_tasks > 2));
    else if (st != 413) /* the task count is checked before the rest */
        CHECK(st2 == st || st2 == 413);
    vsr_pool_free(&pool2);
    vsr_pool_free(&pool);
    return 0;
}
