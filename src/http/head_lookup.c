/* head_lookup.c — lookups over a parsed message head. */
#include "http/http.h"

int vsr_http_head_get(const vsr_http_head_t *h, const char *name, vsr_slice_t *value)
{
    vsr_slice_t n = vsr_slice_cstr(name);
    for (size_t i = 0; i < h->num_headers; i++)
        if (vsr_slice_case_eq(h->headers[i].name, n)) {
            if (value)
                *value = h->headers[i].value;
            return 1;
        }
    return 0;
}

int vsr_http_is_hop_by_hop(const vsr_http_head_t *h, vsr_slice_t name)
{
    /* called for every field of every relayed head: the fixed names by
     * length first, one comparison at most */
    const char *fixed = NULL;
    switch (name.len) {
    case 2: fixed = "te"; break;
    case 7: fixed = (name.p[0] | 0x20) == 't' ? "trailer" : "upgrade"; break;
    case 10: fixed = (name.p[0] | 0x20) == 'c' ? "connection" : "keep-alive"; break;
    case 16: fixed = "proxy-connection"; break;
    case 17: fixed = "transfer-encoding"; break;
    }
    if (fixed && vsr_slice_case_eq(name, vsr_slice(fixed, name.len)))
        return 1;
    if (h != NULL && h->conn_plain)
        return 0; /* the parser saw no Connection token naming another field */
    if (h == NULL || name.len == 0)
        return 0;
    /* Connection options name further fields that must not be forwarded */
    for (size_t i = 0; i < h->num_headers; i++) {
        if (!vsr_slice_case_eq_cstr(h->headers[i].name, "connection"))
            continue;
        vsr_slice_t v = h->headers[i].value;
        while (v.len) {
            vsr_slice_t rest;
            vsr_slice_t tok = vsr_slice_trim(vsr_slice_split(v, ',', &rest));
            if (vsr_slice_case_eq(tok, name))
                return 1;
            v = rest;
        }
    }
    return 0;
}
