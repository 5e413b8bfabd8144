/*
 * strict.c — what vsr refuses of, or cleans in, client JSON beyond the
 * grammar: duplicate member names, and client text quoted in an error
 * message.  See json.h for the contract.
 */
#include <stdlib.h>
#include <string.h>

#include "json/json.h"

/* Objects with at most this many members are checked pair by pair; larger
 * ones are sorted (O(n log n) whatever the keys: no hash an attacker could
 * flood). */
#define PAIRWISE_MAX 8u

typedef struct {
    vsr_slice_t key; /* unescaped */
    uint32_t tok;
} mkey_t;

static int key_cmp(const void *a, const void *b)
{
    const mkey_t *x = a, *y = b;
    size_t n = VSR_MIN(x->key.len, y->key.len);
    int c = n ? memcmp(x->key.p, y->key.p, n) : 0;
    if (c == 0 && x->key.len != y->key.len)
        c = x->key.len < y->key.len ? -1 : 1;
    if (c == 0)
        c = x->tok < y->tok ? -1 : x->tok > y->tok;
    return c;
}

static int same(vsr_slice_t a, vsr_slice_t b)
{
    return a.len == b.len && (a.len == 0 || memcmp(a.p, b.p, a.len) == 0);
}

int vsr_json_find_duplicate_key(const vsr_json_t *j, uint32_t *key)
{
    if (j->toks == NULL)
        return 0;
    vsr_pool_t pool; /* unescaped copies of escaped keys */
    vsr_pool_init(&pool);
    mkey_t small[PAIRWISE_MAX];
    mkey_t *keys = NULL;
    size_t cap = 0;
    int found = 0;
    for (uint32_t t = 0; t < j->ntoks && !found; t++) {
        const vsr_json_tok_t *o = &j->toks[t];
        if (o->type != VSR_JSON_OBJECT || o->count < 2)
            continue;
        mkey_t *k = small;
        if (o->count > PAIRWISE_MAX) {
            if (o->count > cap) {
                vsr_free(keys);
                cap = o->count;
                keys = vsr_malloc(cap * sizeof(*keys));
            }
            k = keys;
        }
        uint32_t c = t + 1;
        for (uint32_t i = 0; i < o->count; i++) {
            k[i].tok = c;
            vsr_json_string(j, c, &pool, &k[i].key);
            c = j->toks[c + 1].next;
        }
        uint32_t dup = UINT32_MAX;
        if (o->count <= PAIRWISE_MAX) {
            for (uint32_t b = 1; b < o->count && dup == UINT32_MAX; b++)
                for (uint32_t a = 0; a < b && dup == UINT32_MAX; a++)
                    if (same(k[a].key, k[b].key))
                        dup = k[b].tok;
        } else {
            qsort(k, o->count, sizeof(*k), key_cmp);
            for (uint32_t i = 1; i < o->count; i++)
                if (same(k[i - 1].key, k[i].key) && k[i].tok < dup)
                    dup = k[i].tok; /* the later of the pair; the earliest such in the object */
        }
        if (dup != UINT32_MAX) {
            *key = dup;
            found = 1;
        }
    }
    vsr_free(keys);
    vsr_pool_free(&pool);
    return found;
}

int vsr_json_append_client_text(vsr_buf_t *b, vsr_slice_t s, size_t max)
{
    static const char fffd[] = "\xEF\xBF\xBD";
    const unsigned char *p = (const unsigned char *)s.p;
    size_t i = 0, out = 0;
    while (i < s.len) {
        size_t n = vsr_utf8_seq(p + i, s.len - i);
        size_t w = n ? n : 3;
        if (out + w > max)
            return vsr_buf_append(b, "...", 3);
        int rc = n ? vsr_buf_append(b, s.p + i, n) : vsr_buf_append(b, fffd, 3);
        if (rc != VSR_OK)
            return rc;
        out += w;
        i += n ? n : 1;
    }
    return VSR_OK;
}

int vsr_json_error_body(vsr_buf_t *b, vsr_slice_t msg, const char *type, const char *code)
{
    int rc = vsr_buf_append_cstr(b, "{\"error\":{\"message\":");
    rc |= vsr_buf_append_json_string(b, msg);
    rc |= vsr_buf_append_cstr(b, ",\"type\":");
    rc |= vsr_buf_append_json_string(b, vsr_slice_cstr(type));
    rc |= vsr_buf_append_cstr(b, ",\"code\":");
    rc |= code ? vsr_buf_append_json_string(b, vsr_slice_cstr(code)) : vsr_buf_append_cstr(b, "null");
    rc |= vsr_buf_append_cstr(b, "}}");
    return rc ? VSR_ERR_TOO_BIG : VSR_OK;
}
