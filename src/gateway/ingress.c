/*
 * ingress.c — the edge's trust boundary (ref §5.2): fields a client may not
 * send through vsr.  They never reach routing or a backend:
 * - the 15 proxy-control x-envoy-* fields that only a trusted proxy may set
 *   (an Envoy-based layer behind vsr would obey them; vsr's own reliability
 *   policy stays the one retry and timeout authority).  Edge fields such as
 *   x-envoy-original-path pass;
 * - vsr's internal x-vsr-* fields (only the documented client controls pass);
 * - identity fields, unless the listener trusts identity headers;
 * - credentials: proxy-authorization always; authorization, api-key and
 *   x-api-key (Anthropic's) once a listener's key check has read them, and
 *   x-api-key always.
 * It also names the owner of what a client stores (vsr__ingress_owner).
 */
#include "gateway/gateway-int.h"

#include <arpa/inet.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/sha.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <time.h>

static const char *const envoy_control[] = {
    "x-envoy-internal",
    "x-envoy-retriable-status-codes",
    "x-envoy-retriable-header-names",
    "x-envoy-retry-on",
    "x-envoy-retry-grpc-on",
    "x-envoy-max-retries",
    "x-envoy-upstream-alt-stat-name",
    "x-envoy-upstream-rq-timeout-ms",
    "x-envoy-upstream-rq-per-try-timeout-ms",
    "x-envoy-upstream-rq-timeout-alt-response",
    "x-envoy-expected-rq-timeout-ms",
    "x-envoy-force-trace",
    "x-envoy-ip-tags",
    "x-envoy-original-url",
    "x-envoy-hedge-on-per-try-timeout",
};

/* x-vsr-* request fields a client may send (ref §4.3) */
static const char *const vsr_client[] = {
    "x-vsr-debug",
    "x-vsr-skip-processing",
    "x-vsr-cache-control",
    "x-vsr-compression-control",
};

static const char *const identity[] = {
    "x-authz-user-id",
    "x-authz-user-groups",
    "x-authz-team-id",
    "x-authz-tenant-id",
};

static int in_list(vsr_slice_t name, const char *const *list, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (vsr_slice_case_eq_cstr(name, list[i]))
            return 1;
    return 0;
}

int vsr__ingress_has_keys(const vsr_listener_conf_t *l)
{
    return l->api_keys.n > 0 || l->n_key_entries > 0;
}

/* The entry whose key SHA-256 names, or NULL; an expired entry never matches.
 * Every entry is compared, whatever matched (CRYPTO_memcmp: constant time). */
static const vsr_api_key_conf_t *entry_match(const vsr_listener_conf_t *l, vsr_slice_t key)
{
    if (l->n_key_entries == 0 || key.len == 0)
        return NULL;
    unsigned char md[SHA256_DIGEST_LENGTH];
    SHA256((const unsigned char *)key.p, key.len, md);
    const vsr_api_key_conf_t *hit = NULL;
    for (size_t i = 0; i < l->n_key_entries; i++)
        if (CRYPTO_memcmp(md, l->key_entries[i].sha256, sizeof(md)) == 0 && hit == NULL)
            hit = &l->key_entries[i];
    if (hit && hit->expires && (int64_t)time(NULL) >= hit->expires)
        return NULL;
    return hit;
}

const vsr_api_key_conf_t *vsr__ingress_key_entry(const vsr_listener_conf_t *l, vsr_slice_t key)
{
    return entry_match(l, key);
}

static int key_ok(const vsr_listener_conf_t *l, vsr__keystore_t *ks, vsr_slice_t key)
{
    int ok = 0;
    for (size_t i = 0; i < l->api_keys.n; i++)
        ok |= vsr_secret_eq(key, vsr_slice_cstr(l->api_keys.items[i])); /* every key is compared, whatever matched */
    ok |= entry_match(l, key) != NULL;
    ok |= vsr__keystore_match(ks, key, NULL, NULL, NULL);
    return ok && key.len > 0;
}

/* The key a credential field carries: api-key's or x-api-key's value, or what follows
 * "Bearer" (any case, then spaces or tabs) in authorization; an empty slice
 * for an authorization of another scheme (never a key). */
static vsr_slice_t presented_key(vsr_slice_t name, vsr_slice_t v)
{
    if (vsr_slice_case_eq_cstr(name, "api-key") || vsr_slice_case_eq_cstr(name, "x-api-key"))
        return v;
    if (v.len > 7 && vsr_slice_case_eq_cstr(vsr_slice(v.p, 6), "bearer") && (v.p[6] == ' ' || v.p[6] == '\t'))
        return vsr_slice_trim(vsr_slice(v.p + 7, v.len - 7));
    return VSR_SLICE_NULL;
}

int vsr__ingress_auth(const vsr_listener_conf_t *l, vsr__keystore_t *ks, const vsr_http_head_t *h,
                      vsr_slice_t *presented)
{
    if (presented)
        *presented = VSR_SLICE_NULL;
    if (!vsr__ingress_has_keys(l))
        return VSR__AUTH_OK;
    /* one credential per request: every authorization / api-key / x-api-key field must
     * carry the same key, so one request tries one key, never a list */
    vsr_slice_t key = VSR_SLICE_NULL;
    size_t seen = 0;
    for (size_t i = 0; i < h->num_headers; i++) {
        vsr_slice_t name = h->headers[i].name;
        if (!vsr_slice_case_eq_cstr(name, "api-key") && !vsr_slice_case_eq_cstr(name, "authorization") &&
            !vsr_slice_case_eq_cstr(name, "x-api-key"))
            continue;
        vsr_slice_t k = presented_key(name, vsr_slice_trim(h->headers[i].value));
        if (seen++ == 0)
            key = k;
        else if (k.len != key.len || (k.len && memcmp(k.p, key.p, k.len) != 0) || k.len == 0)
            return VSR__AUTH_CONFLICT;
    }
    if (seen == 0)
        return VSR__AUTH_BAD;
    if (!key_ok(l, ks, key))
        return VSR__AUTH_BAD;
    if (presented)
        *presented = key;
    return VSR__AUTH_OK;
}

void vsr__ingress_owner(vsr_slice_t key, char out[VSR_SESSION_MAX_OWNER + 1])
{
    out[0] = '\0';
    if (key.len == 0)
        return; /* a listener without keys: the shared owner */
    /* plain, not keyed: every replica sharing a Redis store names a key's
     * owner alike; the prefix keeps the digest apart from any other use */
    static const char domain[] = "vsr response owner v1";
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned mdlen = 0;
    EVP_MD_CTX *c = EVP_MD_CTX_new();
    int ok = c && EVP_DigestInit_ex(c, EVP_sha256(), NULL) == 1 &&
             EVP_DigestUpdate(c, domain, sizeof(domain)) == 1 && /* its NUL too */
             EVP_DigestUpdate(c, key.p, key.len) == 1 && EVP_DigestFinal_ex(c, md, &mdlen) == 1 &&
             mdlen == SHA256_DIGEST_LENGTH;
    EVP_MD_CTX_free(c);
    VSR_BUG_ON(!ok); /* SHA-256 is always there; an owner must never fall back to shared */
    static const char hex[] = "0123456789abcdef";
    for (size_t i = 0; i < SHA256_DIGEST_LENGTH; i++) {
        out[2 * i] = hex[md[i] >> 4];
        out[2 * i + 1] = hex[md[i] & 15];
    }
    out[2 * SHA256_DIGEST_LENGTH] = '\0';
}

/* CIDR match of a peer address against "addr/len" networks (canonical form). */
static int in_network(const struct sockaddr_storage *peer, const char *cidr)
{
    char addr[64];
    const char *slash = strchr(cidr, '/');
    size_t alen = slash ? (size_t)(slash - cidr) : strlen(cidr);
    if (alen >= sizeof(addr))
        return 0;
    memcpy(addr, cidr, alen);
    addr[alen] = '\0';
    unsigned char net[16], ip[16];
    size_t bytes;
    if (peer->ss_family == AF_INET) {
        if (inet_pton(AF_INET, addr, net) != 1)
            return 0;
        memcpy(ip, &((const struct sockaddr_in *)peer)->sin_addr, 4);
        bytes = 4;
    } else if (peer->ss_family == AF_INET6) {
        const struct sockaddr_in6 *p6 = (const struct sockaddr_in6 *)peer;
        if (inet_pton(AF_INET6, addr, net) == 1) {
            memcpy(ip, &p6->sin6_addr, 16);
            bytes = 16;
        } else if (inet_pton(AF_INET, addr, net) == 1 && IN6_IS_ADDR_V4MAPPED(&p6->sin6_addr)) {
            memcpy(ip, (const unsigned char *)&p6->sin6_addr + 12, 4); /* an IPv4 client on a dual-stack socket */
            bytes = 4;
        } else {
            return 0;
        }
    } else {
        return 0;
    }
    unsigned bits = slash ? (unsigned)atoi(slash + 1) : (unsigned)(bytes * 8);
    if (bits > bytes * 8)
        return 0;
    for (size_t i = 0; i < bytes && bits > 0; i++) {
        unsigned take = bits >= 8 ? 8 : bits;
        unsigned char mask = (unsigned char)(0xffu << (8 - take));
        if ((ip[i] & mask) != (net[i] & mask))
            return 0;
        bits -= take;
    }
    return 1;
}

int vsr__ingress_identity_trusted(const vsr_listener_conf_t *l, const struct sockaddr_storage *peer)
{
    if (!l->identity_trust_headers)
        return 0;
    if (l->identity_trusted_peers.n == 0)
        return 1;
    for (size_t i = 0; i < l->identity_trusted_peers.n; i++)
        if (in_network(peer, l->identity_trusted_peers.items[i]))
            return 1;
    return 0; /* judged by the TCP peer, never by X-Forwarded-For */
}

int vsr__ingress_drop(const vsr_listener_conf_t *l, const vsr_config_t *cfg, int identity_trusted, vsr_slice_t name)
{
    if (name.len > 8 && vsr_slice_case_eq_cstr(vsr_slice(name.p, 8), "x-envoy-"))
        return in_list(name, envoy_control, VSR_ARRAY_LEN(envoy_control));
    if (name.len > 6 && vsr_slice_case_eq_cstr(vsr_slice(name.p, 6), "x-vsr-"))
        return !in_list(name, vsr_client, VSR_ARRAY_LEN(vsr_client));
    if (vsr__ingress_has_keys(l) && (vsr_slice_case_eq_cstr(name, "authorization") || vsr_slice_case_eq_cstr(name, "api-key")))
        return 1; /* the client's key was checked: it goes no further */
    if (vsr_slice_case_eq_cstr(name, "proxy-authorization") || vsr_slice_case_eq_cstr(name, "x-api-key"))
        return 1; /* a credential meant for a proxy, or for another API's gateway: never a backend's business */
    if (identity_trusted)
        return 0;
    if (in_list(name, identity, VSR_ARRAY_LEN(identity)))
        return 1;
    return (cfg->authz_user_id_header && vsr_slice_case_eq_cstr(name, cfg->authz_user_id_header)) ||
           (cfg->authz_user_groups_header && vsr_slice_case_eq_cstr(name, cfg->authz_user_groups_header));
}
