/* fuzz_migrate.c — arbitrary bytes as a pre-v0.3 document for
 * vsr_config_migrate.
 *
 * Beyond "no crash, no leak" it checks the contract: a failure writes
 * nothing and reports well-formed "FILE:LINE:COL: message" lines; a success
 * writes a document that parses as YAML without a single problem and says
 * v0.3 (migrating it again yields exactly the "already v0.3" refusal). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(int cond, const char *what)
{
    if (!cond) {
        fprintf(stderr, "fuzz_migrate: invariant broken: %s\n", what);
        abort();
    }
}

/* Every line is "f.yaml:LINE:COL: text" with LINE, COL >= 1. */
static void check_lines(const vsr_buf_t *err)
{
    check(err->len > 0 && err->data[err->len - 1] == '\n', "errors end with a newline");
    const char *p = err->data, *end = err->data + err->len;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        check(nl != NULL && (size_t)(nl - p) > 7 && memcmp(p, "f.yaml:", 7) == 0, "an error names the file");
        char *q = NULL;
        unsigned long line = strtoul(p + 7, &q, 10), col = 0;
        check(q && *q == ':' && line >= 1, "an error has a line");
        col = strtoul(q + 1, &q, 10);
        check(q && *q == ':' && col >= 1, "an error has a column");
        p = nl + 1;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    vsr_buf_t out, err;
    vsr_buf_init(&out, 0);
    vsr_buf_init(&err, 1 << 20);
    int rc = vsr_config_migrate("f.yaml", (const char *)data, size, &out, &err, NULL);
    if (rc != VSR_OK) {
        check(rc == VSR_ERR_INVALID, "a failure is VSR_ERR_INVALID");
        check(out.len == 0, "a failure writes nothing");
        check_lines(&err);
    } else {
        check(err.len == 0, "a success reports no error");
        check(out.len > 0 && memcmp(out.data, "version: v0.3\n", 14) == 0, "the output starts with its version");
        vsr_buf_t again, err2;
        vsr_buf_init(&again, 0);
        vsr_buf_init(&err2, 1 << 20);
        check(vsr_config_migrate("f.yaml", out.data, out.len, &again, &err2, NULL) == VSR_ERR_INVALID,
              "the output is v0.3");
        vsr_buf_append(&err2, "", 1);
        check(strcmp(err2.data, "f.yaml:1:10: version is already v0.3; nothing to migrate\n") == 0,
              "the output parses without a problem");
        vsr_buf_free(&again);
        vsr_buf_free(&err2);
    }
    vsr_buf_free(&out);
    vsr_buf_free(&err);
    return 0;
}
