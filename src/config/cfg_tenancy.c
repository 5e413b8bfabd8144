/*
 * cfg_tenancy.c — listeners[].api_keys with identity (docs/tenancy.md).
 *
 * api_keys keeps its list-of-strings form and also takes entries
 * {key | key_env | key_sha256, user, groups, name, expires}.  Strings go to
 * the listener's api_keys list as before; entries to key_entries, each
 * holding only the SHA-256 of its key (a key_env is read once, when the
 * document is decoded, and hashed like a key).
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <openssl/sha.h>

#include "config/cfg_internal.h"

typedef struct {
    char *key, *key_env, *key_sha256, *user, *name, *expires;
    vsr_strlist_conf_t groups;
} key_entry_t;

#define KE_OFF(m) offsetof(key_entry_t, m)

static const cfg_field_t key_entry_fields[] = {
    {.key = "key", .decode = vsr__cfg_string, .offset = KE_OFF(key)},
    {.key = "key_env", .decode = vsr__cfg_string, .offset = KE_OFF(key_env)},
    {.key = "key_sha256", .decode = vsr__cfg_string, .offset = KE_OFF(key_sha256)},
    {.key = "user", .decode = vsr__cfg_string, .offset = KE_OFF(user)},
    {.key = "groups", .decode = vsr__cfg_strlist, .flags = CFG_NULL_OK, .offset = KE_OFF(groups)},
    {.key = "name", .decode = vsr__cfg_string, .offset = KE_OFF(name)},
    {.key = "expires", .decode = vsr__cfg_string, .offset = KE_OFF(expires)},
};

static const cfg_spec_t key_entry_spec = {
    .size = sizeof(key_entry_t),
    .fields = key_entry_fields,
    .n_fields = VSR_ARRAY_LEN(key_entry_fields),
};

static int hexval(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* "YYYY-MM-DD" (the day's start, UTC) or "YYYY-MM-DDTHH:MM:SSZ" → Unix seconds; -1 if neither. */
static int64_t parse_expires(const char *s)
{
    struct tm tm = {0};
    int n = 0;
    if (sscanf(s, "%4d-%2d-%2d%n", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &n) != 3)
        return -1;
    if (s[n] == 'T' || s[n] == 't') {
        int m = 0;
        if (sscanf(s + n + 1, "%2d:%2d:%2d%n", &tm.tm_hour, &tm.tm_min, &tm.tm_sec, &m) != 3 ||
            (s[n + 1 + m] != 'Z' && s[n + 1 + m] != 'z') || s[n + 2 + m] != '\0')
            return -1;
    } else if (s[n] != '\0') {
        return -1;
    }
    if (tm.tm_mon < 1 || tm.tm_mon > 12 || tm.tm_mday < 1 || tm.tm_mday > 31 || tm.tm_hour > 23 || tm.tm_min > 59 ||
        tm.tm_sec > 60 || tm.tm_year < 1970)
        return -1;
    tm.tm_year -= 1900;
    tm.tm_mon -= 1;
    time_t t = timegm(&tm);
    return t < 0 ? -1 : (int64_t)t;
}

static int entry(cfg_decoder_t *d, const cfg_node_t *node, vsr_api_key_conf_t *out)
{
    key_entry_t e = {0};
    if (vsr__cfg_decode_object(d, &key_entry_spec, node, &e, 0) != 0)
        return -1;
    int given = (e.key != NULL) + (e.key_env != NULL) + (e.key_sha256 != NULL);
    if (given != 1) {
        vsr__cfg_node_error(d, node, "an api_keys entry needs exactly one of key, key_env and key_sha256");
        return -1;
    }
    if (e.key_sha256) {
        if (strlen(e.key_sha256) != 2 * SHA256_DIGEST_LENGTH) {
            vsr__cfg_node_error(d, node, "key_sha256 must be 64 hexadecimal digits (the key's SHA-256)");
            return -1;
        }
        for (size_t i = 0; i < SHA256_DIGEST_LENGTH; i++) {
            int hi = hexval(e.key_sha256[2 * i]), lo = hexval(e.key_sha256[2 * i + 1]);
            if (hi < 0 || lo < 0) {
                vsr__cfg_node_error(d, node, "key_sha256 must be 64 hexadecimal digits (the key's SHA-256)");
                return -1;
            }
            out->sha256[i] = (unsigned char)(hi << 4 | lo);
        }
    } else {
        const char *k = e.key;
        if (e.key_env) {
            k = getenv(e.key_env);
            if (k == NULL || *k == '\0') {
                vsr__cfg_node_error(d, node, "key_env names %s, which is not set in the environment", e.key_env);
                return -1;
            }
        }
        SHA256((const unsigned char *)k, strlen(k), out->sha256);
    }
    if (e.expires) {
        out->expires = parse_expires(e.expires);
        if (out->expires < 0) {
            vsr__cfg_node_error(d, node, "expires must be a UTC date (2027-01-31) or time (2027-01-31T12:00:00Z)");
            return -1;
        }
    }
    out->user = e.user;
    out->name = e.name;
    if (e.groups.n) {
        size_t len = 0;
        for (size_t i = 0; i < e.groups.n; i++) {
            if (strchr(e.groups.items[i], ',')) {
                vsr__cfg_node_error(d, node, "a group name must not contain a comma");
                return -1;
            }
            len += strlen(e.groups.items[i]) + 1;
        }
        out->groups = vsr_pool_alloc(d->pool, len);
        out->groups[0] = '\0';
        for (size_t i = 0; i < e.groups.n; i++) {
            if (i)
                strcat(out->groups, ",");
            strcat(out->groups, e.groups.items[i]);
        }
    }
    return 0;
}

int vsr__cfg_api_keys(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj)
{
    VSR_UNUSED(f);
    vsr_listener_conf_t *l = obj;
    if (val->kind != CFG_NODE_SEQ) {
        vsr__cfg_node_error(d, val, "expected a list of keys (strings or {key, user, groups, ...}), got %s",
                            vsr__cfg_node_what(val));
        return -1;
    }
    l->api_keys.items = val->n ? vsr_pool_alloc(d->pool, val->n * sizeof(char *)) : NULL;
    l->api_keys.n = 0;
    l->key_entries = val->n ? vsr_pool_alloc(d->pool, val->n * sizeof(vsr_api_key_conf_t)) : NULL;
    l->n_key_entries = 0;
    int rc = 0;
    size_t saved = vsr__cfg_path_push(d, "[]");
    for (size_t i = 0; i < val->n; i++) {
        const cfg_node_t *it = val->items[i];
        if (it->kind == CFG_NODE_MAP) {
            vsr_api_key_conf_t *e = &l->key_entries[l->n_key_entries];
            memset(e, 0, sizeof(*e));
            if (entry(d, it, e) != 0)
                rc = -1;
            else
                l->n_key_entries++;
            continue;
        }
        const char *s = vsr__cfg_get_string(d, f, it);
        if (s == NULL)
            rc = -1;
        else
            l->api_keys.items[l->api_keys.n++] = vsr__cfg_strdup(d, s);
    }
    vsr__cfg_path_pop(d, saved);
    return rc;
}
