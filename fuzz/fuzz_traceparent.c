/*
 * fuzz_traceparent.c — the W3C trace context parsers over arbitrary bytes:
 * traceparent, tracestate and the exporter endpoint.
 *
 * Checks, beyond memory safety:
 *  - traceparent acceptance agrees with a direct reference check of the
 *    grammar (version, dashes, lowercase hex, non-zero ids, lengths);
 *  - an accepted value formats back (as version 00, sampled bit only) into a
 *    value the parser accepts with the same ids, and for version 00 with the
 *    flags' sampled bit the same bytes;
 *  - an accepted tracestate is at most 512 bytes with at most 32 members;
 *  - an accepted endpoint gives a non-empty host, a non-zero port and a path
 *    starting with '/'.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "obs/obs.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                          \
    do {                                                                                     \
        if (!(cond)) {                                                                       \
            fprintf(stderr, "fuzz_traceparent: check failed: %s (line %d)\n", #cond, __LINE__); \
            abort();                                                                         \
        }                                                                                    \
    } while (0)

static int lhex(char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
}

static int ref_traceparent(const char *p, size_t n)
{
    if (n < 55)
        return 0;
    for (size_t i = 0; i < 55; i++) {
        int dash = i == 2 || i == 35 || i == 52;
        if (dash ? p[i] != '-' : !lhex(p[i]))
            return 0;
    }
    if (p[0] == 'f' && p[1] == 'f')
        return 0;
    int v00 = p[0] == '0' && p[1] == '0';
    if (v00 && n != 55)
        return 0;
    if (!v00 && n > 55 && p[55] != '-')
        return 0;
    int nz = 0;
    for (size_t i = 3; i < 35; i++)
        nz |= p[i] != '0';
    if (!nz)
        return 0;
    nz = 0;
    for (size_t i = 36; i < 52; i++)
        nz |= p[i] != '0';
    return nz;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *p = (const char *)data;
    vsr_slice_t in = vsr_slice(p, size);

    vsr_trace_parent_t tp;
    int ok = vsr_traceparent_parse(in, &tp) == VSR_OK;
    CHECK(ok == ref_traceparent(p, size));
    if (ok) {
        char out[56];
        vsr_traceparent_format(tp.trace_id, tp.span_id, tp.flags, out);
        CHECK(strlen(out) == VSR_TRACEPARENT_LEN);
        vsr_trace_parent_t back;
        CHECK(vsr_traceparent_parse(vsr_slice_cstr(out), &back) == VSR_OK);
        CHECK(memcmp(back.trace_id, tp.trace_id, 16) == 0 && memcmp(back.span_id, tp.span_id, 8) == 0);
        CHECK(back.flags == (tp.flags & VSR_TRACE_SAMPLED));
        if (size == 55 && p[0] == '0' && p[1] == '0' && (tp.flags & ~VSR_TRACE_SAMPLED) == 0)
            CHECK(memcmp(out, p, 55) == 0);
    }

    if (vsr_tracestate_valid(in)) {
        CHECK(size <= 512);
        size_t commas = 0, members = 0;
        int in_member = 0;
        for (size_t i = 0; i < size; i++) {
            if (p[i] == ',') {
                commas++;
                in_member = 0;
            } else if (p[i] == '=' && !in_member) {
                members++;
                in_member = 1;
            }
        }
        CHECK(members <= 32);
        (void)commas;
    }

    /* the endpoint parser takes a C string */
    char *s = malloc(size + 1);
    memcpy(s, p, size);
    s[size] = '\0';
    char host[256], path[1024];
    uint16_t port = 0;
    const char *why = NULL;
    if (vsr_tracer_parse_endpoint(s, host, sizeof(host), &port, path, sizeof(path), &why) == VSR_OK) {
        CHECK(host[0] != '\0' && port != 0 && path[0] == '/');
        CHECK(strncmp(s, "http://", 7) == 0);
    } else {
        CHECK(why != NULL);
    }
    free(s);
    return 0;
}
