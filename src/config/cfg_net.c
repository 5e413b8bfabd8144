/*
 * cfg_net.c — the small grammars inside config strings: "host[:port]",
 * "[v6]:port", "http(s)://host[:port]/path", IP literals, and the upstream
 * authority (Host header) derived from them.
 */
#include <arpa/inet.h>
#include <stdio.h>

#include "config/cfg_internal.h"

#define MAX_HOST_LEN 253

static int parse_port(vsr_slice_t s, uint16_t *port, const char **why)
{
    uint64_t v;
    if (s.len == 0) {
        *why = "empty port";
        return VSR_ERR_INVALID;
    }
    if (vsr_slice_to_u64(s, 65535, &v) != VSR_OK || v == 0) {
        *why = "port must be an integer between 1 and 65535";
        return VSR_ERR_INVALID;
    }
    *port = (uint16_t)v;
    return VSR_OK;
}

/* DNS names and IPv4 literals: letters, digits, '-', '.', '_' (the latter for
 * container and service names that resolvers accept). */
static int valid_hostname(vsr_slice_t h)
{
    if (h.len == 0 || h.len > MAX_HOST_LEN)
        return 0;
    for (size_t i = 0; i < h.len; i++) {
        char c = h.p[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '.' ||
              c == '_'))
            return 0;
    }
    return 1;
}

static int valid_ipv6(vsr_slice_t h)
{
    char tmp[INET6_ADDRSTRLEN + 1];
    unsigned char bin[16];
    if (h.len == 0 || h.len >= sizeof(tmp))
        return 0;
    memcpy(tmp, h.p, h.len);
    tmp[h.len] = '\0';
    return inet_pton(AF_INET6, tmp, bin) == 1;
}

int vsr__cfg_parse_hostport(vsr_slice_t s, cfg_hostport_t *out, const char **why)
{
    memset(out, 0, sizeof(*out));
    if (memchr(s.p, '/', s.len) != NULL) {
        *why = memmem(s.p, s.len, "://", 3) ? "expected host[:port] without a scheme (use base_url for URLs)"
                                             : "expected host[:port] without a path";
        return VSR_ERR_INVALID;
    }
    vsr_slice_t port = VSR_SLICE_NULL;
    int has_port = 0;
    if (s.len > 0 && s.p[0] == '[') {
        const char *close = memchr(s.p, ']', s.len);
        if (close == NULL) {
            *why = "missing ']' after the IPv6 address";
            return VSR_ERR_INVALID;
        }
        out->host = vsr_slice(s.p + 1, (size_t)(close - s.p) - 1);
        out->ipv6 = 1;
        vsr_slice_t rest = vsr_slice(close + 1, s.len - (size_t)(close - s.p) - 1);
        if (rest.len > 0) {
            if (rest.p[0] != ':') {
                *why = "expected ':' after ']'";
                return VSR_ERR_INVALID;
            }
            port = vsr_slice(rest.p + 1, rest.len - 1);
            has_port = 1;
        }
        if (!valid_ipv6(out->host)) {
            *why = "invalid IPv6 address in brackets";
            return VSR_ERR_INVALID;
        }
    } else {
        const char *colon = memchr(s.p, ':', s.len);
        if (colon != NULL && memchr(colon + 1, ':', s.len - (size_t)(colon - s.p) - 1) != NULL) {
            *why = "IPv6 addresses must be written in brackets, e.g. \"[::1]:8000\"";
            return VSR_ERR_INVALID;
        }
        out->host = colon ? vsr_slice(s.p, (size_t)(colon - s.p)) : s;
        if (colon) {
            port = vsr_slice(colon + 1, s.len - (size_t)(colon - s.p) - 1);
            has_port = 1;
        }
        if (out->host.len == 0) {
            *why = "missing host";
            return VSR_ERR_INVALID;
        }
        if (!valid_hostname(out->host)) {
            *why = "invalid host name";
            return VSR_ERR_INVALID;
        }
    }
    if (has_port && parse_port(port, &out->port, why) != VSR_OK)
        return VSR_ERR_INVALID;
    return VSR_OK;
}

static int case_prefix(vsr_slice_t s, const char *prefix)
{
    return vsr_slice_case_eq_cstr(vsr_slice(s.p, VSR_MIN(s.len, strlen(prefix))), prefix);
}

int vsr__cfg_parse_base_url(vsr_slice_t s, cfg_url_t *out, const char **why)
{
    memset(out, 0, sizeof(*out));
    size_t skip;
    if (case_prefix(s, "http://")) {
        skip = 7;
    } else if (case_prefix(s, "https://")) {
        skip = 8;
        out->tls = 1;
    } else {
        *why = "the scheme must be http:// or https://";
        return VSR_ERR_INVALID;
    }
    vsr_slice_t rest = vsr_slice(s.p + skip, s.len - skip);
    if (memchr(rest.p, '?', rest.len) || memchr(rest.p, '#', rest.len)) {
        *why = "a query or fragment is not allowed";
        return VSR_ERR_INVALID;
    }
    const char *slash = memchr(rest.p, '/', rest.len);
    vsr_slice_t authority = slash ? vsr_slice(rest.p, (size_t)(slash - rest.p)) : rest;
    vsr_slice_t path = slash ? vsr_slice(slash, rest.len - authority.len) : VSR_SLICE_NULL;
    if (memchr(authority.p, '@', authority.len)) {
        *why = "user info (user@host) is not allowed; use api_key / auth_header";
        return VSR_ERR_INVALID;
    }
    if (vsr__cfg_parse_hostport(authority, &out->hp, why) != VSR_OK)
        return VSR_ERR_INVALID;
    for (size_t i = 0; i < path.len; i++) {
        unsigned char c = (unsigned char)path.p[i];
        if (c <= 0x20 || c >= 0x7f) {
            *why = "the path must be printable ASCII without spaces (percent-encode the rest)";
            return VSR_ERR_INVALID;
        }
    }
    while (path.len > 0 && path.p[path.len - 1] == '/')
        path.len--;
    out->path = path.len ? path : vsr_slice("", 0);
    return VSR_OK;
}

int vsr__cfg_parse_endpoint(vsr_slice_t s, cfg_endpoint_t *out, const char **why)
{
    memset(out, 0, sizeof(*out));
    out->path = vsr_slice("", 0);
    const char *sep = memmem(s.p, s.len, "://", 3);
    if (sep != NULL) {
        vsr_slice_t scheme = vsr_slice(s.p, (size_t)(sep - s.p));
        if (vsr_slice_case_eq_cstr(scheme, "http")) {
            out->scheme = CFG_SCHEME_HTTP;
        } else if (vsr_slice_case_eq_cstr(scheme, "https")) {
            out->scheme = CFG_SCHEME_HTTPS;
        } else {
            *why = "the scheme must be http:// or https://";
            return VSR_ERR_INVALID;
        }
        s = vsr_slice(sep + 3, s.len - scheme.len - 3);
    }
    const char *slash = memchr(s.p, '/', s.len);
    if (slash != NULL) {
        vsr_slice_t path = vsr_slice(slash, s.len - (size_t)(slash - s.p));
        s.len = (size_t)(slash - s.p);
        while (path.len > 0 && path.p[path.len - 1] == '/')
            path.len--;
        out->path = path.len ? path : vsr_slice("", 0);
    }
    return vsr__cfg_parse_hostport(s, &out->hp, why);
}

int vsr__cfg_canonical_ip(const char *s, char *out, size_t outlen)
{
    unsigned char bin[16];
    if (inet_pton(AF_INET, s, bin) == 1)
        return inet_ntop(AF_INET, bin, out, (socklen_t)outlen) ? VSR_OK : VSR_ERR_INVALID;
    if (inet_pton(AF_INET6, s, bin) == 1)
        return inet_ntop(AF_INET6, bin, out, (socklen_t)outlen) ? VSR_OK : VSR_ERR_INVALID;
    return VSR_ERR_INVALID;
}

char *vsr__cfg_authority(vsr_pool_t *pool, vsr_slice_t host, int ipv6, uint16_t port, int tls)
{
    char buf[MAX_HOST_LEN + 16];
    int n;
    uint16_t dflt = tls ? 443 : 80;
    const char *open = ipv6 ? "[" : "", *close = ipv6 ? "]" : "";
    if (port == dflt)
        n = snprintf(buf, sizeof(buf), "%s" VSR_SLICE_FMT "%s", open, VSR_SLICE_ARG(host), close);
    else
        n = snprintf(buf, sizeof(buf), "%s" VSR_SLICE_FMT "%s:%u", open, VSR_SLICE_ARG(host), close, port);
    VSR_BUG_ON(n < 0 || (size_t)n >= sizeof(buf));
    return vsr_pool_strndup(pool, buf, (size_t)n);
}

int vsr__cfg_canonical_cidr(const char *s, char *out, size_t outlen, const char **why)
{
    char addr[INET6_ADDRSTRLEN + 1];
    unsigned char bin[16];
    const char *slash = strchr(s, '/');
    size_t alen = slash ? (size_t)(slash - s) : strlen(s);
    if (alen == 0 || alen >= sizeof(addr)) {
        *why = "expected an IPv4 or IPv6 network such as \"10.0.0.0/8\" or \"fd00::/8\"";
        return VSR_ERR_INVALID;
    }
    memcpy(addr, s, alen);
    addr[alen] = '\0';
    int family, bits;
    if (inet_pton(AF_INET, addr, bin) == 1) {
        family = AF_INET;
        bits = 32;
    } else if (inet_pton(AF_INET6, addr, bin) == 1) {
        family = AF_INET6;
        bits = 128;
    } else {
        *why = "expected an IPv4 or IPv6 network such as \"10.0.0.0/8\" or \"fd00::/8\"";
        return VSR_ERR_INVALID;
    }
    uint64_t prefix = (uint64_t)bits;
    if (slash != NULL && vsr_slice_to_u64(vsr_slice_cstr(slash + 1), (uint64_t)bits, &prefix) != VSR_OK) {
        *why = family == AF_INET ? "the prefix length must be an integer from 0 to 32"
                                 : "the prefix length must be an integer from 0 to 128";
        return VSR_ERR_INVALID;
    }
    /* clear the host bits: "10.1.2.3/8" names the network 10.0.0.0/8 */
    for (int i = 0; i < bits / 8; i++) {
        int keep = (int)prefix - 8 * i;
        if (keep >= 8)
            continue;
        bin[i] &= keep <= 0 ? 0 : (unsigned char)(0xffu << (8 - keep));
    }
    char text[INET6_ADDRSTRLEN];
    if (inet_ntop(family, bin, text, sizeof(text)) == NULL) {
        *why = "invalid address";
        return VSR_ERR_INVALID;
    }
    int n = snprintf(out, outlen, "%s/%u", text, (unsigned)prefix);
    VSR_BUG_ON(n < 0 || (size_t)n >= outlen);
    return VSR_OK;
}
