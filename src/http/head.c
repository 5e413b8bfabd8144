/* head.c — lookups over a parsed message head. */
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
#define F(s) {s, sizeof(s) - 1}
    static const vsr_slice_t fixed[] = {F("connection"), F("keep-alive"), F("proxy-connection"), F("te"),
                                        F("trailer"),    F("transfer-encoding"), F("upgrade")};
#undef F
    for (size_t i = 0; i < VSR_ARRAY_LEN(fixed); i++)
        if (vsr_slice_case_eq(name, fixed[i])) /* lengths first: no strlen */
            return 1;
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
