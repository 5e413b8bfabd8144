/*
 * guard_score — the jailbreak and prompt-injection classifiers
 * (src/models/guard.c) from the command line, for
 * tests/e2e/test_guard_oracle.py (which compares them with the package's own
 * JavaScript).
 *
 *   guard_score PACKAGE_DIR < texts
 *
 * Input: one text per line, hex-encoded UTF-8 (so any byte can be given).
 * Output: one JSON object per text, scores printed with 17 digits:
 * {"jailbreak":p,"prompt_injection":p,"jailbreak_chunked":p,
 *  "prompt_injection_chunked":p,"windows":n}
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/guard.h"

static int unhex(const char *line, size_t n, char *out, size_t *olen)
{
    if (n % 2) return -1;
    for (size_t i = 0; i < n; i += 2) {
        unsigned v;
        if (sscanf(line + i, "%2x", &v) != 1) return -1;
        out[i / 2] = (char)v;
    }
    *olen = n / 2;
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: guard_score PACKAGE_DIR < hex-lines\n");
        return 2;
    }
    vsr_guard_t g;
    int rc = vsr_guard_load_dir(argv[1], &g);
    if (rc != VSR_OK) {
        fprintf(stderr, "guard_score: %s: %s\n", argv[1], vsr_strerror(rc));
        return 1;
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    while ((n = getline(&line, &cap, stdin)) >= 0) {
        while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r')) n--;
        char *text = malloc((size_t)n / 2 + 1);
        size_t len;
        if (!text || unhex(line, (size_t)n, text, &len) != 0) {
            fprintf(stderr, "guard_score: bad hex line\n");
            return 1;
        }
        double j, i, jc, ic;
        size_t w = 0;
        if (vsr_guard_lr_score(g.jailbreak, text, len, &j) != VSR_OK ||
            vsr_guard_lr_score(g.injection, text, len, &i) != VSR_OK ||
            vsr_guard_lr_score_chunked(g.jailbreak, text, len, &jc, &w) != VSR_OK ||
            vsr_guard_lr_score_chunked(g.injection, text, len, &ic, NULL) != VSR_OK) {
            fprintf(stderr, "guard_score: out of memory\n");
            return 1;
        }
        printf("{\"jailbreak\":%.17g,\"prompt_injection\":%.17g,\"jailbreak_chunked\":%.17g,"
               "\"prompt_injection_chunked\":%.17g,\"windows\":%zu}\n", j, i, jc, ic, w);
        free(text);
    }
    free(line);
    vsr_guard_free(&g);
    return 0;
}
