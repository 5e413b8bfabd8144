/*
 * config — the canonical v0.3 document (YAML, decoded strictly with libyaml)
 * → typed, validated, immutable configuration.
 *
 * Decoding is strict: a wrong type, a missing required field, a bad value or
 * an unknown key fails with "FILE:LINE:COL: what was expected".  Keys that
 * belong to the v0.3 contract but are not implemented yet are accepted and
 * reported once (vsr_config_t.unimplemented), so a user's document loads
 * unchanged and nothing is silently ignored.
 *
 * A loaded vsr_config_t is immutable and may be read from any thread.
 */
#ifndef VSR_CONFIG_H
#define VSR_CONFIG_H

#include "base/base.h"

#define VSR_DEFAULT_LISTENER_TIMEOUT_MS 300000u            /* 300s */
#define VSR_DEFAULT_MAX_BODY_BYTES (500ull * 1024 * 1024)  /* 500 MiB */
#define VSR_DEFAULT_MAX_CONNECTIONS 50000u
#define VSR_DEFAULT_CONNECT_TIMEOUT_MS 10000u

typedef struct {
    char *name;               /* required, unique */
    char *address;            /* default "0.0.0.0" */
    uint16_t port;            /* required, 1..65535 */
    uint64_t timeout_ms;      /* `timeout`, default 300s: client idle + upstream budget */
    uint64_t max_body_bytes;  /* vsr extension `max_request_body_bytes`, default 500 MiB */
    uint32_t max_connections; /* vsr extension `max_connections`, default 50,000 */
} vsr_listener_conf_t;

typedef struct {
    char *name;          /* endpoint name; unnamed refs become "primary" (first) or "backend-N" */
    char *host;          /* from `endpoint` (host[:port]) or `base_url` */
    uint16_t port;       /* default 80, or 443 for https */
    int tls;             /* protocol https / base_url scheme https */
    char *authority;     /* Host header value sent upstream: host, or host:port when port is not the default */
    int has_base_url;    /* the ref was given as base_url (then path_prefix replaces "/v1") */
    char *path_prefix;   /* from base_url's path, "" when none; replaces the leading "/v1" */
    uint32_t weight;     /* default 1, >= 1 */
} vsr_backend_conf_t;

typedef struct {
    char *name;                /* logical name, required, unique */
    char *provider_model_id;   /* sent upstream as `model`; defaults to name */
    vsr_backend_conf_t *backends;
    size_t n_backends;         /* >= 1 */
} vsr_model_conf_t;

typedef struct {
    char *path;            /* the file it was read from ("<string>" for strings) */
    char *version;         /* "v0.3" */
    vsr_listener_conf_t *listeners;
    size_t n_listeners;    /* >= 1 */
    char *default_model;   /* providers.defaults.model (alias default_model); NULL when absent */
    vsr_model_conf_t *models;
    size_t n_models;
    /* dotted key paths present in the document that vsr accepts but does not
     * implement yet, in document order, each once (e.g. "routing", "listeners[].api_keys") */
    char **unimplemented;
    size_t n_unimplemented;
} vsr_config_t;

/* Loads and validates a document.  On success *out owns a new config and
 * VSR_OK is returned.  On failure every problem found is appended to err as
 * one line "FILE:LINE:COL: message\n" and VSR_ERR_INVALID (document) or
 * VSR_ERR_IO (unreadable file, message "FILE: strerror") is returned. */
int vsr_config_load_file(const char *path, vsr_config_t **out, vsr_buf_t *err);
/* Same, from memory; `name` stands in for FILE in messages. */
int vsr_config_load_string(const char *name, const char *yaml, size_t len, vsr_config_t **out, vsr_buf_t *err);
void vsr_config_free(vsr_config_t *c); /* accepts NULL */

/* The provider model whose `name` equals `name`, or NULL. */
const vsr_model_conf_t *vsr_config_find_model(const vsr_config_t *c, vsr_slice_t name);
/* The default model (providers.defaults.model), else the first model. */
const vsr_model_conf_t *vsr_config_default_model(const vsr_config_t *c);

/* Logs one warning listing c->unimplemented ("FILE: accepted but not
 * implemented yet, ...: routing, listeners[].api_keys"); nothing when the
 * list is empty.  Meant to be called once at startup after a load. */
void vsr_config_warn_unimplemented(const vsr_config_t *c);

#endif /* VSR_CONFIG_H */
