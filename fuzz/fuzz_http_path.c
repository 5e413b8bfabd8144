/*
 * fuzz_http_path.c — vsr_http_normalize_target over arbitrary bytes.
 *
 * Checks, beyond memory safety: the result is never longer than the input,
 * is "*" or starts with '/', and is canonical — normalising it again gives
 * the same bytes; its path part has no empty, "." or ".." segment (except
 * a trailing '/'), and every escape left is upper-case and not of an
 * unreserved character, '/', '\' or NUL; an authority lies inside the input.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http/http.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                     \
    do {                                                                                \
        if (!(cond)) {                                                                  \
            fprintf(stderr, "fuzz_http_path: check failed: %s (line %d)\n", #cond, __LINE__); \
            abort();                                                                    \
        }                                                                               \
    } while (0)

static int unreserved(unsigned char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '.' ||
           c == '_' || c == '~';
}

static int hexdig_upper(unsigned char c)
{
    return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'F');
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *out = malloc(size ? size : 1);
    size_t len = 0;
    vsr_slice_t auth;
    const char *why = NULL;
    int rc = vsr_http_normalize_target(vsr_slice((const char *)data, size), out, size, &len, &auth, &why);
    CHECK(rc == VSR_OK || rc == VSR_DECLINED || rc == VSR_ERR_INVALID);
    if (rc == VSR_ERR_INVALID) {
        CHECK(why != NULL);
        free(out);
        return 0;
    }
    CHECK(len >= 1 && len <= size);
    if (auth.p)
        CHECK(auth.p >= (const char *)data && auth.p + auth.len <= (const char *)data + size && auth.len > 0);
    if (!(len == 1 && out[0] == '*')) {
        CHECK(out[0] == '/');
        size_t pe = 0;
        while (pe < len && out[pe] != '?')
            pe++;
        for (size_t i = 0; i < pe; i++) {
            if (out[i] == '/') {
                size_t e = i + 1;
                while (e < pe && out[e] != '/')
                    e++;
                size_t seg = e - i - 1;
                CHECK(seg > 0 || e == pe); /* only a trailing '/' leaves an empty segment */
                CHECK(!(seg == 1 && out[i + 1] == '.'));
                CHECK(!(seg == 2 && out[i + 1] == '.' && out[i + 2] == '.'));
            }
            if (out[i] == '%') {
                CHECK(i + 2 < pe && hexdig_upper((unsigned char)out[i + 1]) && hexdig_upper((unsigned char)out[i + 2]));
                unsigned d = (unsigned)strtoul((char[]){out[i + 1], out[i + 2], 0}, NULL, 16);
                CHECK(d != 0 && !unreserved((unsigned char)d));
                if (d == '/' || d == '\\')
                    CHECK(rc == VSR_DECLINED);
            }
        }
    }
    char *again = malloc(len);
    size_t len2 = 0;
    vsr_slice_t auth2;
    CHECK(vsr_http_normalize_target(vsr_slice(out, len), again, len, &len2, &auth2, NULL) == rc);
    CHECK(len2 == len && memcmp(again, out, len) == 0 && auth2.p == NULL);
    free(again);
    free(out);
    return 0;
}
