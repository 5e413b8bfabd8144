/* fuzz_config.c — arbitrary bytes as a v0.3 document.
 *
 * Beyond "no crash, no leak" (the sanitizers' job) it checks the contract:
 * a success yields a config whose invariants hold; a failure yields no
 * config and at least one well-formed "FILE:LINE:COL: message" line. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "config/config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(int cond, const char *what)
{
    if (!cond) {
        fprintf(stderr, "fuzz_config: invariant broken: %s\n", what);
        abort();
    }
}

static void check_config(const vsr_config_t *c)
{
    check(c->version != NULL && strcmp(c->version, "v0.3") == 0, "version");
    check(c->n_listeners >= 1, "listeners");
    for (size_t i = 0; i < c->n_listeners; i++) {
        const vsr_listener_conf_t *l = &c->listeners[i];
        check(l->name != NULL && l->name[0] != '\0', "listener name");
        check(l->address != NULL && l->port != 0, "listener address");
        check(l->timeout_ms > 0 && l->max_body_bytes > 0 && l->max_connections > 0, "listener limits");
    }
    check(c->n_models >= 1, "models");
    for (size_t i = 0; i < c->n_models; i++) {
        const vsr_model_conf_t *m = &c->models[i];
        check(m->name != NULL && m->provider_model_id != NULL, "model names");
        check(vsr_config_find_model(c, vsr_slice_cstr(m->name)) != NULL, "find_model");
        check(m->n_backends >= 1, "backends");
        for (size_t j = 0; j < m->n_backends; j++) {
            const vsr_backend_conf_t *b = &m->backends[j];
            check(b->name != NULL && b->host != NULL && b->authority != NULL && b->path_prefix != NULL,
                  "backend strings");
            check(b->port != 0 && b->weight >= 1 && !b->tls, "backend values");
        }
    }
    check(vsr_config_default_model(c) != NULL, "default model");
    for (size_t i = 0; i < c->n_unimplemented; i++)
        check(c->unimplemented[i] != NULL, "unimplemented");
}

/* Every line: "fuzz.yaml:LINE:COL: message". */
static void check_errors(const vsr_buf_t *err)
{
    check(err->len > 0 && err->data[err->len - 1] == '\n', "errors reported");
    const char *p = err->data, *end = err->data + err->len;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        unsigned line, col;
        int n = 0;
        check(nl != NULL, "newline-terminated");
        check(sscanf(p, "fuzz.yaml:%u:%u: %n", &line, &col, &n) == 2 && n > 0 && line >= 1 && col >= 1,
              "error line format");
        p = nl + 1;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    vsr_buf_t err;
    vsr_buf_init(&err, 1 << 20);
    vsr_config_t *c = NULL;
    int rc = vsr_config_load_string("fuzz.yaml", (const char *)data, size, &c, &err);
    if (rc == VSR_OK) {
        check(c != NULL && err.len == 0, "success");
        check_config(c);
        vsr_config_free(c);
    } else {
        check(rc == VSR_ERR_INVALID && c == NULL, "failure");
        check_errors(&err);
    }
    vsr_buf_free(&err);
    return 0;
}
