/* keystore.c — API keys made through the management API (docs/tenancy.md
 * "Keys in the store"): one memory store for the process, every worker and
 * the management listener sharing it under a mutex.  A key is kept only as
 * its SHA-256 (the digest the listener takes of a presented key, as for a
 * key_sha256 entry), with its id, user, groups and name; the secret is made
 * from vsr_random_bytes and handed back once, by create and rotate. */
#include "gateway/gateway-int.h"

#include <openssl/crypto.h>
#include <openssl/sha.h>
#include <pthread.h>
#include <string.h>
#include <time.h>

#define KS_MAX 4096 /* keys in the store: create past it is refused */

typedef struct {
    char id[VSR__KS_ID_LEN + 1];
    unsigned char sha256[SHA256_DIGEST_LENGTH];
    char *user, *groups, *name; /* NULL when not given */
    int64_t created, rotated;   /* UNIX seconds; rotated 0 = never */
} ks_entry_t;

struct vsr__keystore_s {
    pthread_mutex_t mu;
    ks_entry_t *e;
    size_t n;
};

vsr__keystore_t *vsr__keystore_new(void)
{
    vsr__keystore_t *ks = vsr_calloc(1, sizeof(*ks));
    pthread_mutex_init(&ks->mu, NULL);
    ks->e = vsr_calloc(KS_MAX, sizeof(ks_entry_t));
    return ks;
}

static void entry_free(ks_entry_t *e)
{
    vsr_free(e->user);
    vsr_free(e->groups);
    vsr_free(e->name);
    memset(e, 0, sizeof(*e));
}

void vsr__keystore_free(vsr__keystore_t *ks)
{
    if (ks == NULL)
        return;
    for (size_t i = 0; i < ks->n; i++)
        entry_free(&ks->e[i]);
    vsr_free(ks->e);
    pthread_mutex_destroy(&ks->mu);
    vsr_free(ks);
}

static void hex(char *out, const unsigned char *p, size_t n)
{
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[p[i] >> 4];
        out[2 * i + 1] = digits[p[i] & 15];
    }
    out[2 * n] = '\0';
}

/* A new secret ("sk-vsr-" and 64 hex digits: 256 random bits) and its digest. */
static void new_secret(char secret[VSR__KS_SECRET_LEN + 1], unsigned char md[SHA256_DIGEST_LENGTH])
{
    unsigned char r[32];
    vsr_random_bytes(r, sizeof(r));
    memcpy(secret, "sk-vsr-", 7);
    hex(secret + 7, r, sizeof(r));
    OPENSSL_cleanse(r, sizeof(r));
    SHA256((const unsigned char *)secret, VSR__KS_SECRET_LEN, md);
}

static char *dup_or_null(vsr_slice_t s)
{
    return s.len ? vsr_strndup(s.p, s.len) : NULL;
}

static ks_entry_t *find_id(vsr__keystore_t *ks, vsr_slice_t id)
{
    for (size_t i = 0; i < ks->n; i++)
        if (vsr_slice_eq_cstr(id, ks->e[i].id))
            return &ks->e[i];
    return NULL;
}

int vsr__keystore_create(vsr__keystore_t *ks, vsr_slice_t user, vsr_slice_t groups, vsr_slice_t name,
                         char id[VSR__KS_ID_LEN + 1], char secret[VSR__KS_SECRET_LEN + 1])
{
    pthread_mutex_lock(&ks->mu);
    if (ks->n == KS_MAX) {
        pthread_mutex_unlock(&ks->mu);
        return VSR_ERR_TOO_BIG;
    }
    ks_entry_t *e = &ks->e[ks->n];
    do { /* ids are random too: one tells nothing of how many keys there are */
        unsigned char r[VSR__KS_ID_LEN / 2];
        vsr_random_bytes(r, sizeof(r));
        hex(e->id, r, sizeof(r));
    } while (find_id(ks, vsr_slice_cstr(e->id)) != NULL);
    new_secret(secret, e->sha256);
    e->user = dup_or_null(user);
    e->groups = dup_or_null(groups);
    e->name = dup_or_null(name);
    e->created = (int64_t)time(NULL);
    ks->n++;
    memcpy(id, e->id, VSR__KS_ID_LEN + 1);
    pthread_mutex_unlock(&ks->mu);
    return VSR_OK;
}

int vsr__keystore_rotate(vsr__keystore_t *ks, vsr_slice_t id, char secret[VSR__KS_SECRET_LEN + 1])
{
    pthread_mutex_lock(&ks->mu);
    ks_entry_t *e = find_id(ks, id);
    if (e) {
        new_secret(secret, e->sha256); /* the old secret stops working now */
        e->rotated = (int64_t)time(NULL);
    }
    pthread_mutex_unlock(&ks->mu);
    return e ? VSR_OK : VSR_ERR_NOT_FOUND;
}

int vsr__keystore_revoke(vsr__keystore_t *ks, vsr_slice_t id)
{
    pthread_mutex_lock(&ks->mu);
    ks_entry_t *e = find_id(ks, id);
    if (e) {
        entry_free(e);
        *e = ks->e[--ks->n];
        memset(&ks->e[ks->n], 0, sizeof(ks_entry_t));
    }
    pthread_mutex_unlock(&ks->mu);
    return e ? VSR_OK : VSR_ERR_NOT_FOUND;
}

static void member(vsr_buf_t *out, const char *name, const char *v)
{
    vsr_buf_printf(out, ",\"%s\":", name);
    if (v)
        vsr_buf_append_json_string(out, vsr_slice_cstr(v));
    else
        vsr_buf_append_cstr(out, "null");
}

static void entry_json(const ks_entry_t *e, vsr_buf_t *out)
{
    vsr_buf_printf(out, "{\"id\":\"%s\"", e->id);
    member(out, "name", e->name);
    member(out, "user", e->user);
    member(out, "groups", e->groups);
    vsr_buf_printf(out, ",\"created\":%lld,\"rotated\":%lld}", (long long)e->created, (long long)e->rotated);
}

void vsr__keystore_list_json(vsr__keystore_t *ks, vsr_buf_t *out)
{
    pthread_mutex_lock(&ks->mu);
    vsr_buf_append_cstr(out, "{\"object\":\"list\",\"data\":[");
    for (size_t i = 0; i < ks->n; i++) {
        if (i)
            vsr_buf_append_cstr(out, ",");
        entry_json(&ks->e[i], out);
    }
    vsr_buf_append_cstr(out, "]}");
    pthread_mutex_unlock(&ks->mu);
}

int vsr__keystore_entry_json(vsr__keystore_t *ks, vsr_slice_t id, vsr_buf_t *out)
{
    pthread_mutex_lock(&ks->mu);
    ks_entry_t *e = find_id(ks, id);
    if (e)
        entry_json(e, out);
    pthread_mutex_unlock(&ks->mu);
    return e ? VSR_OK : VSR_ERR_NOT_FOUND;
}

int vsr__keystore_match(vsr__keystore_t *ks, vsr_slice_t key, vsr_pool_t *pool, const char **user,
                        const char **groups)
{
    if (ks == NULL || key.len == 0)
        return 0;
    unsigned char md[SHA256_DIGEST_LENGTH];
    SHA256((const unsigned char *)key.p, key.len, md);
    int hit = 0;
    pthread_mutex_lock(&ks->mu);
    for (size_t i = 0; i < ks->n; i++) /* every entry is compared, whatever matched (constant time) */
        if (CRYPTO_memcmp(md, ks->e[i].sha256, sizeof(md)) == 0 && !hit) {
            hit = 1;
            if (pool && user)
                *user = ks->e[i].user ? vsr_pool_strndup(pool, ks->e[i].user, strlen(ks->e[i].user)) : NULL;
            if (pool && groups)
                *groups = ks->e[i].groups ? vsr_pool_strndup(pool, ks->e[i].groups, strlen(ks->e[i].groups)) : NULL;
        }
    pthread_mutex_unlock(&ks->mu);
    return hit;
}
