/* labeled.c — see labeled.h */
#include "labeled.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

#include "base/base.h"
#include "json/json.h"

static char *field(const vsr_json_t *j, const char *key, vsr_pool_t *pool)
{
    uint32_t v;
    vsr_slice_t s;
    if (vsr_json_object_get(j, 0, key, &v) != VSR_OK || vsr_json_type(j, v) != VSR_JSON_STRING ||
        vsr_json_string(j, v, pool, &s) != VSR_OK || s.len == 0)
        return NULL;
    return vsr_strndup(s.p, s.len);
}

int labeled_load(const char *path, labeled_t *out)
{
    memset(out, 0, sizeof *out);
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "%s: can't open\n", path);
        return -1;
    }
    char *line = malloc(LABELED_MAX_LINE);
    size_t cap = 0, lineno = 0, plen = strlen(path);
    int rc = 0, tsv = plen >= 4 && strcmp(path + plen - 4, ".tsv") == 0;
    while (rc == 0 && fgets(line, (int)LABELED_MAX_LINE, f)) {
        lineno++;
        size_t len = strlen(line);
        while (len && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = '\0';
        if (len == 0 || (tsv && line[0] == '#')) continue;
        vsr_json_t j;
        vsr_pool_t pool;
        vsr_pool_init(&pool);
        memset(&j, 0, sizeof j);
        char *label = NULL, *text = NULL, *tab = tsv ? strchr(line, '\t') : NULL;
        if (tsv && tab && tab > line && tab[1]) {
            label = vsr_strndup(line, (size_t)(tab - line));
            text = vsr_strndup(tab + 1, strlen(tab + 1));
        }
        if (tsv && !text) {
            fprintf(stderr, "%s:%zu: not a label<TAB>text line\n", path, lineno);
            rc = -1;
        } else if (!tsv && (vsr_json_parse(&j, line, len, NULL) != VSR_OK || vsr_json_type(&j, 0) != VSR_JSON_OBJECT ||
                            !(label = field(&j, "label", &pool)) || !(text = field(&j, "text", &pool)))) {
            fprintf(stderr, "%s:%zu: not a {\"label\",\"text\"} object\n", path, lineno);
            rc = -1;
        } else if (out->n == LABELED_MAX_ITEMS) {
            fprintf(stderr, "%s: more than %d items\n", path, LABELED_MAX_ITEMS);
            rc = -1;
        } else {
            if (out->n == cap) {
                cap = cap ? cap * 2 : 256;
                out->label = realloc(out->label, cap * sizeof *out->label);
                out->text = realloc(out->text, cap * sizeof *out->text);
            }
            out->label[out->n] = label;
            out->text[out->n] = text;
            out->n++;
            label = text = NULL;
        }
        vsr_free(label);
        vsr_free(text);
        vsr_json_free(&j);
        vsr_pool_free(&pool);
    }
    free(line);
    fclose(f);
    if (rc != 0) labeled_free(out);
    return rc;
}

void labeled_free(labeled_t *s)
{
    for (size_t i = 0; i < s->n; i++) {
        vsr_free(s->label[i]);
        vsr_free(s->text[i]);
    }
    free(s->label);
    free(s->text);
    memset(s, 0, sizeof *s);
}

int labeled_sha256_file(const char *path, char hex[65])
{
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    unsigned char buf[1 << 16], md[32];
    unsigned mdlen = 0;
    size_t n;
    int ok = ctx && EVP_DigestInit_ex(ctx, EVP_sha256(), NULL);
    while (ok && (n = fread(buf, 1, sizeof buf, f)) > 0) ok = EVP_DigestUpdate(ctx, buf, n);
    ok = ok && !ferror(f) && EVP_DigestFinal_ex(ctx, md, &mdlen) && mdlen == 32;
    EVP_MD_CTX_free(ctx);
    fclose(f);
    if (!ok) return -1;
    for (int i = 0; i < 32; i++) snprintf(hex + 2 * i, 3, "%02x", md[i]);
    return 0;
}
