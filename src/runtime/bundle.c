/*
 * bundle.c — the /v1/bundle request parser (sans-IO, fuzzed by
 * fuzz/fuzz_bundle.c) and the small codecs the runtime shares: input lists,
 * base64, floats, the cache key hash.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "runtime-int.h"

uint64_t vsr__rt_hash(vsr_slice_t model, vsr_slice_t text)
{
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < model.len; i++)
        h = (h ^ (unsigned char)model.p[i]) * 1099511628211ULL;
    h = (h ^ 0xffu) * 1099511628211ULL;
    for (size_t i = 0; i < text.len; i++)
        h = (h ^ (unsigned char)text.p[i]) * 1099511628211ULL;
    return h;
}

int vsr__rt_base64(vsr_buf_t *b, const void *p, size_t n)
{
    static const char tbl[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    const unsigned char *s = p;
    size_t out = (n + 2) / 3 * 4;
    if (vsr_buf_reserve(b, out) != VSR_OK)
        return VSR_ERR_TOO_BIG;
    char *d = b->data + b->len;
    size_t i = 0;
    for (; i + 3 <= n; i += 3) {
        uint32_t v = (uint32_t)s[i] << 16 | (uint32_t)s[i + 1] << 8 | s[i + 2];
        *d++ = tbl[v >> 18];
        *d++ = tbl[(v >> 12) & 63];
        *d++ = tbl[(v >> 6) & 63];
        *d++ = tbl[v & 63];
    }
    if (i < n) {
        uint32_t v = (uint32_t)s[i] << 16 | (i + 1 < n ? (uint32_t)s[i + 1] << 8 : 0);
        *d++ = tbl[v >> 18];
        *d++ = tbl[(v >> 12) & 63];
        *d++ = i + 1 < n ? tbl[(v >> 6) & 63] : '=';
        *d++ = '=';
    }
    b->len += out;
    return VSR_OK;
}

int vsr__rt_append_float(vsr_buf_t *b, float f)
{
    if (!isfinite(f))
        f = 0;
    char tmp[32];
    int n = snprintf(tmp, sizeof tmp, "%.9g", (double)f);
    return vsr_buf_append(b, tmp, (size_t)n);
}

int vsr__rt_parse_inputs(const vsr_json_t *j, uint32_t t, vsr_pool_t *pool, vsr_slice_t **out, size_t *n,
                         const char **why)
{
    *out = NULL;
    *n = 0;
    vsr_json_type_t ty = vsr_json_type(j, t);
    uint32_t count;
    uint32_t first;
    if (ty == VSR_JSON_STRING) {
        count = 1;
        first = t;
    } else if (ty == VSR_JSON_ARRAY) {
        count = j->toks[t].count;
        first = t + 1;
        if (count == 0) {
            *why = "\"input\" is an empty array";
            return VSR_ERR_INVALID;
        }
    } else {
        *why = "\"input\" must be a string or an array of strings";
        return VSR_ERR_INVALID;
    }
    if (count > VSR_RT_MAX_INPUTS) {
        *why = "\"input\" holds more than 2048 strings";
        return VSR_ERR_INVALID;
    }
    vsr_slice_t *v = vsr_pool_alloc(pool, count * sizeof *v);
    if (v == NULL) {
        *why = "out of memory";
        return VSR_ERR_NOMEM;
    }
    uint32_t c = first;
    for (uint32_t i = 0; i < count; i++, c = j->toks[c].next) {
        if (vsr_json_type(j, c) != VSR_JSON_STRING) {
            *why = "\"input\" must be a string or an array of strings (token arrays are not accepted)";
            return VSR_ERR_INVALID;
        }
        if (vsr_json_string(j, c, pool, &v[i]) != VSR_OK) {
            *why = "\"input\" holds an invalid string";
            return VSR_ERR_INVALID;
        }
        if (v[i].len == 0) {
            *why = "\"input\" holds an empty string";
            return VSR_ERR_INVALID;
        }
    }
    *out = v;
    *n = count;
    return VSR_OK;
}

static const char *const unsupported_types[] = {"decisions", "systemone", "rerank"};

static int is_unsupported_type(vsr_slice_t k)
{
    for (size_t i = 0; i < VSR_ARRAY_LEN(unsupported_types); i++)
        if (vsr_slice_eq_cstr(k, unsupported_types[i]))
            return 1;
    return 0;
}

/* Parses task object t into *task (never a request-level error except the id). */
static int parse_task(const vsr_json_t *j, uint32_t t, vsr_pool_t *pool, vsr_rt_task_t *task, const char **msg)
{
    memset(task, 0, sizeof *task);
    uint32_t idv;
    if (vsr_json_object_get(j, t, "id", &idv) != VSR_OK || vsr_json_type(j, idv) != VSR_JSON_STRING) {
        *msg = "every task needs a string \"id\"";
        return VSR_ERR_INVALID;
    }
    if (vsr_json_string(j, idv, pool, &task->id) != VSR_OK || task->id.len == 0 || task->id.len > VSR_RT_MAX_ID) {
        *msg = "a task \"id\" must hold 1 to 256 bytes";
        return VSR_ERR_INVALID;
    }
    /* the task member: every member other than "id" names a type */
    uint32_t k = t + 1, found = 0, val = 0;
    vsr_slice_t type = VSR_SLICE_NULL;
    for (uint32_t i = 0; i < j->toks[t].count; i++) {
        uint32_t v = j->toks[k].next;
        vsr_slice_t key;
        if (vsr_json_string(j, k, pool, &key) != VSR_OK)
            key = VSR_SLICE_NULL;
        if (!vsr_slice_eq_cstr(key, "id")) {
            found++;
            type = key;
            val = v;
        }
        k = j->toks[v].next;
    }
    task->type = type;
    if (found != 1) {
        task->kind = VSR_RT_TASK_INVALID;
        task->error = found == 0 ? "the task names no task type (embed, classify, ...)"
                                 : "a task holds exactly one task member besides \"id\"";
        task->type = VSR_SLICE_NULL;
        return VSR_OK;
    }
    if (vsr_slice_eq_cstr(type, "embed")) {
        task->kind = VSR_RT_TASK_EMBED;
        if (vsr_json_type(j, val) != VSR_JSON_OBJECT) {
            task->kind = VSR_RT_TASK_INVALID;
            task->error = "\"embed\" must be an object";
            return VSR_OK;
        }
        uint32_t m;
        if (vsr_json_object_get(j, val, "model", &m) == VSR_OK && vsr_json_type(j, m) != VSR_JSON_NULL) {
            if (vsr_json_type(j, m) != VSR_JSON_STRING || vsr_json_string(j, m, pool, &task->model) != VSR_OK) {
                task->kind = VSR_RT_TASK_INVALID;
                task->error = "\"embed.model\" must be a string";
                return VSR_OK;
            }
        }
        uint32_t in;
        if (vsr_json_object_get(j, val, "input", &in) != VSR_OK) {
            task->kind = VSR_RT_TASK_INVALID;
            task->error = "\"embed\" needs \"input\"";
            return VSR_OK;
        }
        const char *why = NULL;
        int rc = vsr__rt_parse_inputs(j, in, pool, &task->inputs, &task->n_inputs, &why);
        if (rc == VSR_ERR_NOMEM)
            return rc;
        if (rc != VSR_OK) {
            task->kind = VSR_RT_TASK_INVALID;
            task->error = why;
        }
        return VSR_OK;
    }
    if (vsr_slice_eq_cstr(type, "classify")) {
        task->kind = VSR_RT_TASK_INVALID;
        uint32_t m, tx;
        if (vsr_json_type(j, val) != VSR_JSON_OBJECT) {
            task->error = "\"classify\" must be an object";
        } else if (vsr_json_object_get(j, val, "model", &m) != VSR_OK || vsr_json_type(j, m) != VSR_JSON_STRING ||
                   vsr_json_string(j, m, pool, &task->model) != VSR_OK || task->model.len == 0) {
            task->error = "\"classify.model\" must name a classifier (see GET /v1/models)";
        } else if (vsr_json_object_get(j, val, "text", &tx) != VSR_OK || vsr_json_type(j, tx) != VSR_JSON_STRING) {
            task->error = "\"classify.text\" must be a string";
        } else {
            task->inputs = vsr_pool_alloc(pool, sizeof *task->inputs);
            if (task->inputs == NULL)
                return VSR_ERR_NOMEM;
            if (vsr_json_string(j, tx, pool, &task->inputs[0]) != VSR_OK)
                return VSR_ERR_NOMEM;
            if (task->inputs[0].len == 0) {
                task->error = "\"classify.text\" is empty";
                return VSR_OK;
            }
            task->n_inputs = 1;
            task->payload = vsr_json_raw(j, val);
            task->kind = VSR_RT_TASK_CLASSIFY;
        }
        return VSR_OK;
    }
    task->kind = is_unsupported_type(type) ? VSR_RT_TASK_UNSUPPORTED : VSR_RT_TASK_UNKNOWN;
    return VSR_OK;
}

/* Sort helper for the duplicate-id check. */
static int cmp_slice(const void *a, const void *b)
{
    const vsr_slice_t *x = *(const vsr_slice_t *const *)a, *y = *(const vsr_slice_t *const *)b;
    size_t n = VSR_MIN(x->len, y->len);
    int c = n ? memcmp(x->p, y->p, n) : 0;
    if (c)
        return c;
    return x->len < y->len ? -1 : x->len > y->len;
}

int vsr_rt_bundle_parse(const char *body, size_t len, size_t max_tasks, vsr_pool_t *pool, vsr_rt_bundle_t *out,
                        const char **code, const char **msg)
{
    memset(out, 0, sizeof *out);
    out->deadline_ms = -1;
    *code = "invalid_json";
    vsr_json_t j;
    vsr_json_limits_t lim = {.max_depth = 64, .max_tokens = 0};
    int rc = vsr_json_parse(&j, body, len, &lim);
    if (rc != VSR_OK) {
        *msg = j.err_msg ? j.err_msg : "the body is not valid JSON";
        vsr_json_free(&j);
        return 400;
    }
    uint32_t dup;
    if (vsr_json_find_duplicate_key(&j, &dup)) {
        *msg = "duplicate member name in the body";
        vsr_json_free(&j);
        return 400;
    }
    int status = 400;
    *code = "invalid_request";
    vsr_slice_t **ids = NULL;
    if (vsr_json_type(&j, 0) != VSR_JSON_OBJECT) {
        *msg = "the body must be a JSON object";
        goto out;
    }
    uint32_t tasks;
    if (vsr_json_object_get(&j, 0, "tasks", &tasks) != VSR_OK || vsr_json_type(&j, tasks) != VSR_JSON_ARRAY) {
        *msg = "\"tasks\" must be an array";
        goto out;
    }
    uint32_t n = j.toks[tasks].count;
    if (n == 0) {
        *msg = "\"tasks\" is empty";
        goto out;
    }
    if (n > max_tasks) {
        status = 413;
        *code = "too_many_tasks";
        *msg = "too many tasks in the bundle (see the runtime's --max-tasks, 64 by default)";
        goto out;
    }
    uint32_t opts;
    if (vsr_json_object_get(&j, 0, "options", &opts) == VSR_OK && vsr_json_type(&j, opts) != VSR_JSON_NULL) {
        if (vsr_json_type(&j, opts) != VSR_JSON_OBJECT) {
            *msg = "\"options\" must be an object";
            goto out;
        }
        uint32_t d;
        if (vsr_json_object_get(&j, opts, "deadline_ms", &d) == VSR_OK && vsr_json_type(&j, d) != VSR_JSON_NULL) {
            double v;
            if (vsr_json_type(&j, d) != VSR_JSON_NUMBER || vsr_json_number(&j, d, &v) != VSR_OK || !isfinite(v)) {
                *msg = "\"options.deadline_ms\" must be a number";
                goto out;
            }
            if (v < 0) {
                status = 422;
                *code = "invalid_input";
                *msg = "\"options.deadline_ms\" must not be negative";
                goto out;
            }
            out->deadline_ms = v > 86400000.0 ? 86400000 : (int64_t)v;
        }
    }
    out->tasks = vsr_pool_alloc(pool, n * sizeof *out->tasks);
    ids = vsr_malloc(n * sizeof *ids);
    uint32_t t = tasks + 1;
    for (uint32_t i = 0; i < n; i++, t = j.toks[t].next) {
        if (vsr_json_type(&j, t) != VSR_JSON_OBJECT) {
            *msg = "every task must be an object";
            goto out;
        }
        if (parse_task(&j, t, pool, &out->tasks[i], msg) != VSR_OK)
            goto out;
        ids[i] = &out->tasks[i].id;
    }
    size_t inputs = 0;
    for (uint32_t i = 0; i < n; i++)
        if (out->tasks[i].kind == VSR_RT_TASK_EMBED)
            inputs += out->tasks[i].n_inputs;
    if (inputs > VSR_RT_MAX_INPUTS) {
        status = 413;
        *code = "too_many_inputs";
        *msg = "a bundle's embed tasks hold at most 2048 inputs together";
        goto out;
    }
    qsort(ids, n, sizeof *ids, cmp_slice);
    for (uint32_t i = 1; i < n; i++)
        if (cmp_slice(&ids[i - 1], &ids[i]) == 0) {
            *msg = "task ids must be unique in a bundle";
            goto out;
        }
    out->n_tasks = n;
    status = VSR_OK;
out:
    vsr_free(ids);
    vsr_json_free(&j);
    if (status != VSR_OK) {
        out->tasks = NULL;
        out->n_tasks = 0;
    }
    return status;
}
