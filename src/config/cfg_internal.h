/*
 * cfg_internal.h — the machinery behind config.h, private to src/config/.
 *
 * Three layers, each usable on its own:
 *
 *   diagnostics   "FILE:LINE:COL: message" lines collected into a buffer;
 *   YAML tree     libyaml events → a tree of nodes carrying 1-based marks,
 *                 with plain scalars resolved (YAML 1.2 core schema) and
 *                 aliases resolved by sharing;
 *   decoder       per-object field tables (cfg_spec_t / cfg_field_t) that
 *                 turn a mapping node into a C struct, reporting unknown,
 *                 missing, duplicate and mistyped keys on the way.
 *
 * The v0.3 schema itself (which tables exist, which keys they hold) lives in
 * config.c (document, listeners, providers, global), cfg_routing.c (routing,
 * recipes, decisions, plugins, entrypoints), cfg_signals.c (signal families),
 * cfg_policy.c (reliability and fallback) and cfg_looper.c (decision algorithms,
 * global.integrations; cfg_graph.c: algorithm.graph), cfg_stores.c (response_api, router_replay, stores);
 * the checks that span the document are in cfg_check.c;
 * host/port/URL/CIDR syntax in cfg_net.c.
 */
#ifndef VSR_CFG_INTERNAL_H
#define VSR_CFG_INTERNAL_H

#include "base/base.h"
#include "config/config.h"

/* ---- diagnostics ---------------------------------------------------------- */

/* Errors past this many are counted but not printed: a mangled file should
 * not bury the first, most useful messages. */
#define CFG_MAX_ERRORS 50
/* Collections open at once in a document (cfg_yaml.c): deeper is refused. */
#define CFG_MAX_DEPTH VSR_CONFIG_MAX_DEPTH

typedef struct {
    vsr_buf_t *out;    /* may be NULL: count only */
    const char *file;  /* FILE in every message */
    unsigned n_errors;
    /* Set by vsr__cfg_parse_yaml: where what follows the first document
     * starts (0 when nothing does).  Like the reference's YAML decoder, the
     * parser reads only the first document; the caller says so. */
    uint32_t ignored_line, ignored_col;
} cfg_diag_t;

/* Appends "FILE:LINE:COL: message\n" (line/col 1-based). */
void vsr__cfg_error(cfg_diag_t *dg, uint32_t line, uint32_t col, const char *fmt, ...) VSR_PRINTF(4, 5);

/* ---- YAML tree -------------------------------------------------------------- */

typedef enum { CFG_NODE_SCALAR, CFG_NODE_SEQ, CFG_NODE_MAP } cfg_node_kind_t;

/* The resolved type of a scalar.  Plain scalars follow the YAML 1.2 core
 * schema; quoted scalars are always strings; explicit tags (!!str, !!int, ...)
 * win over both. */
typedef enum { CFG_NULL, CFG_BOOL, CFG_INT, CFG_FLOAT, CFG_STR } cfg_scalar_t;

typedef struct cfg_node_s cfg_node_t;
struct cfg_node_s {
    cfg_node_kind_t kind;
    cfg_scalar_t type;   /* scalars only */
    int quoted;          /* scalars: written with quotes or as a block scalar */
    uint32_t line, col;  /* 1-based start of the node (of its anchor/tag when it has one) */
    const char *str;     /* scalars: the text, NUL-terminated; may hold NULs, see len */
    size_t len;
    int64_t ival;        /* CFG_INT: the value ... */
    int ival_ok;         /* ... when it fits in int64_t */
    cfg_node_t **items;  /* SEQ: items[0..n); MAP: key items[2i], value items[2i+1] */
    size_t n;            /* SEQ: items; MAP: pairs */
    uint64_t weight;     /* nodes in this subtree once aliases are expanded (saturating) */
};

/* Parses the first YAML document of a stream into a tree allocated from
 * `pool`; what follows it is not read (dg->ignored_line/col say where it
 * starts).  Syntax errors (from libyaml) are fatal: reported, VSR_ERR_INVALID.
 * Softer problems (duplicate keys, undefined aliases, unsupported tags) are
 * reported and parsing goes on so the decoder can find more; the caller
 * checks dg->n_errors.  *root is NULL when the stream holds no document. */
int vsr__cfg_parse_yaml(vsr_pool_t *pool, cfg_diag_t *dg, const char *data, size_t len, cfg_node_t **root);

/* A document parsed once (vsr_config_doc_t, cfg_snapshot.c): the tree that
 * vetting, the canonical form and the loader all read. */
struct vsr_config_doc {
    vsr_pool_t pool;     /* the tree, and the active tree placeholders were taken from */
    char *name;          /* FILE in every message */
    cfg_diag_t dg;       /* the parse's count of errors and ignored_line/col */
    vsr_buf_t parse_err; /* the parse's messages, repeated to whoever reads the tree */
    int parsed;          /* vsr__cfg_parse_yaml returned VSR_OK */
    cfg_node_t *root;    /* NULL when the stream holds no document */
};

/* The loader's half after the parse: decodes root (when parsed) with the
 * errors counted and reported through dg, as vsr_config_load_string does
 * after its own parse.  path: the config's path. */
int vsr__cfg_load_tree(cfg_diag_t *dg, int parsed, const cfg_node_t *root, const char *path, vsr_config_t **out,
                       vsr_buf_t *warnings, vsr_buf_t *unsupported);

/* The type a plain (unquoted, untagged) scalar with this text would have. */
cfg_scalar_t vsr__cfg_plain_type(const char *s, size_t len);
/* "a string", "an integer", "a list", "a mapping", "null", ... for messages. */
const char *vsr__cfg_node_what(const cfg_node_t *n);
/* The value of `key` in a mapping node, or NULL (also when n is not a map). */
const cfg_node_t *vsr__cfg_map_get(const cfg_node_t *n, const char *key);
/* A printable, quoted, length-bounded rendering of s for messages. */
const char *vsr__cfg_quote(vsr_pool_t *pool, const char *s, size_t len);

/* ---- decoder ---------------------------------------------------------------- */

typedef struct cfg_decoder_s cfg_decoder_t;
typedef struct cfg_field_s cfg_field_t;
typedef struct cfg_spec_s cfg_spec_t;

/* Decodes `val` into obj at f->offset.  Reports its own errors; returns 0 or -1. */
typedef int (*cfg_decode_fn)(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj);

enum {
    CFG_REQUIRED = 1u << 0,      /* missing → error */
    CFG_NONEMPTY = 1u << 1,      /* lists: [] → error */
    CFG_UNIMPLEMENTED = 1u << 2, /* part of v0.3, accepted, recorded, not decoded yet */
    CFG_HAS = 1u << 3,           /* after a successful decode, set the int at has_offset to 1 */
    CFG_NULL_OK = 1u << 4,       /* a null value means "absent" (optional blocks and lists) */
    CFG_ZERO_OK = 1u << 5,       /* durations: 0 is allowed (it disables something) */
    CFG_NOCASE = 1u << 6,        /* choices match ASCII case-insensitively */
};

struct cfg_field_s {
    const char *key;
    cfg_decode_fn decode;    /* NULL for CFG_UNIMPLEMENTED */
    unsigned flags;
    size_t offset;           /* where decode stores into the object */
    size_t size;             /* integer fields: sizeof the member (1, 2, 4, 8) */
    size_t count_offset;     /* lists: where the item count (size_t) goes */
    int64_t min, max;        /* integer fields: inclusive range */
    const cfg_spec_t *spec;  /* nested objects, lists of objects */
    const char *alias_of;    /* older spelling of the field `alias_of`: same slot, setting both is an error */
    size_t has_offset;       /* CFG_HAS: the presence flag (int) */
    double dmin, dmax;       /* float fields: inclusive range */
    const char *const *choices; /* strings/choices: the allowed values, NULL-terminated */
    /* Accepted with its type checked (by decode, when set, into scratch
     * memory) and not stored: the key tunes machinery vsr does differently.
     * The text says what vsr does instead; loading warns once per path. */
    const char *inert;
    /* An older spelling or meaning the reference has replaced: decoded as
     * usual (alias_of names the slot), plus a warning with this text. */
    const char *deprecated;
    const void *arg;         /* decoder-specific (see cfg_redis_offsets_t) */
};

/* Scratch room for an inert field's decode: specs used only under inert
 * fields use CFG_INERT_SIZE and offset 0 for every field. */
#define CFG_INERT_SIZE 64

/* The hooks get the object's mapping node, and `seen`: for each field of the
 * table (by index; aliases share their target's index) the value node given
 * in the document, or NULL.  vsr__cfg_seen() looks one up by key.  The
 * dotted path of the object ("routing.decisions[]") is the decoder's: keys
 * are appended as the decoder descends, so one table serves every place the
 * object appears (routing.decisions[] and recipes[].routing.decisions[]). */
struct cfg_spec_s {
    size_t size;       /* sizeof the C object, for lists of them */
    const cfg_field_t *fields;
    size_t n_fields;
    void (*init)(cfg_decoder_t *d, void *obj);  /* defaults, before any field */
    /* derived values and cross-field checks, after all fields; `index` is the
     * position in the enclosing list (0 outside lists) */
    void (*finish)(cfg_decoder_t *d, const cfg_node_t *map, void *obj, const cfg_node_t *const *seen, size_t index);
    /* 1: a key the spec does not list is accepted and recorded as not
     * implemented (blocks of model settings whose keys vary between the
     * reference's releases), not refused */
    int open;
};

#define CFG_MAX_FIELDS 32
#define CFG_MAX_PATH 512

/* Where a decoded value came from, for checks that run after the whole
 * document is decoded (references between sections): keyed by the address
 * of the decoded C member. */
typedef struct {
    const void *key;
    uint32_t line, col;
} cfg_mark_t;

struct cfg_decoder_s {
    vsr_pool_t *pool;     /* the result's memory: decoded strings and arrays */
    cfg_diag_t *dg;
    char **unimpl;        /* unimplemented paths, document order, each once */
    cfg_mark_t *unimpl_at; /* where each was given */
    size_t n_unimpl, cap_unimpl;
    char path[CFG_MAX_PATH]; /* dotted path of the value being decoded */
    const cfg_node_t *key;   /* the key node of the field being decoded (NULL outside fields) */
    size_t path_len;
    cfg_mark_t *marks;    /* see vsr__cfg_mark */
    size_t n_marks, cap_marks;
    int marks_sorted;
    char **warnings;      /* logged only when the load succeeds */
    size_t n_warnings, cap_warnings;
    char **warned;        /* paths already warned about (inert, deprecated) */
    size_t n_warned, cap_warned;
    int inert_depth;      /* > 0 while decoding inside an inert field */
    void *user;           /* the config being built (config_box_t) */
};

/* Decodes mapping `node` into obj (spec->size bytes, zeroed by the caller). */
int vsr__cfg_decode_object(cfg_decoder_t *d, const cfg_spec_t *spec, const cfg_node_t *node, void *obj, size_t index);
const cfg_node_t *vsr__cfg_seen(const cfg_spec_t *spec, const cfg_node_t *const *seen, const char *key);

/* Reports at node: "FILE:LINE:COL: message". */
void vsr__cfg_node_error(cfg_decoder_t *d, const cfg_node_t *node, const char *fmt, ...) VSR_PRINTF(3, 4);
/* Same, at a position kept with vsr__cfg_mark. */
void vsr__cfg_mark_error(cfg_decoder_t *d, const cfg_mark_t *at, const char *fmt, ...) VSR_PRINTF(3, 4);
/* Queues a warning, logged once the document has loaded. */
void vsr__cfg_warn(cfg_decoder_t *d, const char *fmt, ...) VSR_PRINTF(2, 3);
/* Reports "unknown key K" at k, with "did you mean X?" when one of
 * valid[0..n) is within a small edit distance; `hint` (may be NULL) is
 * appended in parentheses. */
void vsr__cfg_unknown_key(cfg_decoder_t *d, const cfg_node_t *k, const char *const *valid, size_t n,
                          const char *hint);
/* The edit distance between a and b (Levenshtein), capped at 255. */
unsigned vsr__cfg_edit_distance(const char *a, size_t alen, const char *b, size_t blen);

/* The decoder's current path: push a segment (".key" is added with the dot
 * only when the path is not empty; "[]" as is), pop back to a saved length. */
size_t vsr__cfg_path_push(cfg_decoder_t *d, const char *seg);
void vsr__cfg_path_pop(cfg_decoder_t *d, size_t saved);
/* A header field name (an HTTP token), and header-safe text (no CR, LF or
 * other control bytes; "" allowed): shared by every table that holds headers. */
int vsr__cfg_header_name(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj);
int vsr__cfg_header_text(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj);
/* {Name: value, ...} into a pool array of *n entries (errors name key and value_what) */
int vsr__cfg_header_map(cfg_decoder_t *d, const char *key, const char *value_what, const cfg_node_t *val,
                        vsr_kv_conf_t **out, size_t *n);

/* Records "<path>.key" as accepted-but-unimplemented (once). */
void vsr__cfg_record_unimplemented(cfg_decoder_t *d, const char *key);
/* An empty value configures nothing: null, [] or {}. */
int vsr__cfg_is_empty(const cfg_node_t *v);

/* Remembers where the value stored at `key` came from; vsr__cfg_mark_find
 * returns it (NULL when never marked). */
void vsr__cfg_mark(cfg_decoder_t *d, const void *key, const cfg_node_t *node);
const cfg_mark_t *vsr__cfg_mark_find(cfg_decoder_t *d, const void *key);
/* The text of a string scalar (non-empty, no control characters), or NULL
 * after reporting what was wrong. */
const char *vsr__cfg_get_string(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val);
char *vsr__cfg_strdup(cfg_decoder_t *d, const char *s);

/* Generic field decoders. */
int vsr__cfg_string(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj);   /* char *, one of f->choices if set */
/* char *; an empty string means the key is absent (the reference's "" = unset, e.g. no password) */
int vsr__cfg_string_or_unset(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj);
int vsr__cfg_choice(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj);   /* int: index in f->choices */
int vsr__cfg_uint(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj);     /* uintN_t, [min, max] */
int vsr__cfg_int(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj);      /* int64_t, [min, max] */
int vsr__cfg_double(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj);   /* double, [dmin, dmax] */
int vsr__cfg_bool(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj);     /* int 0/1 */
int vsr__cfg_duration_ms(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj); /* uint64_t ms */
int vsr__cfg_object(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj);   /* f->spec at obj+offset */
int vsr__cfg_list(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj);     /* array of f->spec + count */
int vsr__cfg_strlist(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj);  /* vsr_strlist_conf_t */
/* global.services.ratelimit.providers (cfg_ratelimit.c); obj is the config_box_t */
int vsr__cfg_ratelimit_providers(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj);
/* listeners[].api_keys: strings and entries with identity (cfg_tenancy.c); obj is the listener */
int vsr__cfg_api_keys(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj);
/* A list of HTTP status codes (100..599): uint32_t * at offset, size_t count at count_offset. */
int vsr__cfg_status_codes(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj);
/* Free text with no effect (descriptions): any string, checked, not stored. */
int vsr__cfg_accept_text(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj);
/* A remote classifier's backend block {protocol, model, contract, deadline_ms} into a vsr_remote_cls_conf_t
 * (config.c); its external model is resolved with the whole document (cfg_check.c). */
extern const cfg_spec_t vsr__cfg_remote_backend_spec;
/* Lenient text: any string scalar, including "" (stored as ""). */
const char *vsr__cfg_get_text(cfg_decoder_t *d, const cfg_node_t *val);
/* Is s an HTTP header field name (RFC 9110 token)? */
int vsr__cfg_is_token(const char *s);

/* Reports every later duplicate among keys[0..n) (NULL keys are skipped) as
 * "duplicate <what> "k" (first defined at L:C)" at nodes[i]. */
void vsr__cfg_check_unique(cfg_decoder_t *d, const char *what, const char *const *keys, const cfg_node_t *const *nodes,
                           size_t n);
/* A sorted name → position index, for lookups that must stay O(log n) when
 * a document (or its aliases) makes lists huge. */
typedef struct {
    const char *name;
    size_t index;
} cfg_name_t;

typedef struct {
    cfg_name_t *v;
    size_t n, cap;
} cfg_index_t;

void vsr__cfg_index_add(cfg_index_t *ix, const char *name, size_t index); /* NULL names are skipped */
void vsr__cfg_index_sort(cfg_index_t *ix);
/* The entry with the lowest index among those named `name`, or NULL; *count
 * (may be NULL) gets how many entries have that name. */
const cfg_name_t *vsr__cfg_index_find(const cfg_index_t *ix, const char *name, size_t *count);
void vsr__cfg_index_free(cfg_index_t *ix);

/* Same, with positions from vsr__cfg_mark: marks[i] is the mark key of keys[i]. */
void vsr__cfg_check_unique_marked(cfg_decoder_t *d, const char *what, const char *const *keys,
                                  const void *const *marks, size_t n);

/* A known v0.3 block that vsr does not implement: accepted while it
 * configures nothing (null, [], {}, or mappings of those), otherwise
 * "<path> is not supported yet" at its key, then f->arg (a reason) when set. */
int vsr__cfg_unsupported(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj);
int vsr__cfg_deep_empty(const cfg_node_t *v);

/* ---- store blocks (cfg_stores.c) ------------------------------------------------ */

/* Where a store's Redis settings live in the object its redis block
 * decodes into: the `arg` of a redis.connection field. */
typedef struct {
    size_t address, password, db, timeout_ms;
} cfg_redis_offsets_t;

/* global.services.response_api, global.services.router_replay, global.stores */
extern const cfg_spec_t vsr__cfg_response_api_spec;
extern const cfg_spec_t vsr__cfg_router_replay_spec;
extern const cfg_spec_t vsr__cfg_stores_spec;

int vsr__cfg_redis_connection(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj);
int vsr__cfg_redis_tls(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj);

#define CFG_REDIS_POOL_INERT "vsr keeps one connection per worker to each Redis store"
#define CFG_REDIS_TIMEOUT_INERT "vsr applies the block's timeout to connecting and to every command"
#define CFG_REDIS_INDEX_INERT "vsr's Redis stores keep their own key layout (no vector index to create or tune)"

/* The keys of the reference's Redis blocks that vsr accepts beside its own
 * (address, password, password_env, db, key_prefix, timeout). */
#define CFG_REDIS_EXTRA_FIELDS                                                                                    \
    {.key = "pool_size", .decode = vsr__cfg_uint, .size = 8, .max = INT64_MAX, .inert = CFG_REDIS_POOL_INERT}, \
    {.key = "min_idle_conns", .decode = vsr__cfg_uint, .size = 8, .max = INT64_MAX,                            \
     .inert = CFG_REDIS_POOL_INERT},                                                                           \
    {.key = "max_retries", .decode = vsr__cfg_uint, .size = 8, .max = INT64_MAX,                               \
     .inert = "vsr does not retry a Redis command: a failed call counts as a miss or a failed write"},         \
    {.key = "dial_timeout", .decode = vsr__cfg_uint, .size = 8, .max = INT64_MAX, .inert = CFG_REDIS_TIMEOUT_INERT}, \
    {.key = "read_timeout", .decode = vsr__cfg_uint, .size = 8, .max = INT64_MAX, .inert = CFG_REDIS_TIMEOUT_INERT}, \
    {.key = "write_timeout", .decode = vsr__cfg_uint, .size = 8, .max = INT64_MAX,                             \
     .inert = CFG_REDIS_TIMEOUT_INERT},                                                                        \
    {.key = "config_path", .decode = vsr__cfg_accept_text,                                                     \
     .inert = "vsr reads the connection from this block, not from a separate file"},                           \
    {.key = "tls_enabled", .decode = vsr__cfg_redis_tls},                                                      \
    {.key = "use_tls", .decode = vsr__cfg_redis_tls},                                                          \
    {.key = "tls_skip_verify", .decode = vsr__cfg_bool, .inert = "used only with TLS, which vsr does not support"}, \
    {.key = "tls_ca_path", .decode = vsr__cfg_accept_text, .inert = "used only with TLS, which vsr does not support"}, \
    {.key = "tls_cert_path", .decode = vsr__cfg_accept_text,                                                   \
     .inert = "used only with TLS, which vsr does not support"},                                               \
    {.key = "tls_key_path", .decode = vsr__cfg_accept_text, .inert = "used only with TLS, which vsr does not support"}, \
    {.key = "development", .inert = CFG_REDIS_INDEX_INERT},                                                    \
    {.key = "index", .inert = CFG_REDIS_INDEX_INERT},                                                          \
    {.key = "search", .inert = CFG_REDIS_INDEX_INERT},                                                         \
    {.key = "logging", .inert = "vsr logs Redis errors with its own logger (--log-level)"}

/* ---- host, port and URL syntax (cfg_net.c) --------------------------------- */

typedef struct {
    vsr_slice_t host;  /* without IPv6 brackets */
    uint16_t port;     /* 0 when absent */
    int ipv6;
} cfg_hostport_t;

/* "host", "host:port", "[v6]", "[v6]:port".  On error *why says what is wrong. */
int vsr__cfg_parse_hostport(vsr_slice_t s, cfg_hostport_t *out, const char **why);

typedef struct {
    int tls;                /* https */
    cfg_hostport_t hp;
    vsr_slice_t path;       /* without trailing slashes; empty when none */
} cfg_url_t;

/* "http(s)://host[:port][/path]"; no user info, query or fragment. */
int vsr__cfg_parse_base_url(vsr_slice_t s, cfg_url_t *out, const char **why);

enum { CFG_SCHEME_NONE, CFG_SCHEME_HTTP, CFG_SCHEME_HTTPS };

typedef struct {
    cfg_hostport_t hp;
    int scheme;             /* CFG_SCHEME_*: the scheme written, if any */
    vsr_slice_t path;       /* the path after host[:port], without trailing slashes; empty when none */
} cfg_endpoint_t;

/* A backend endpoint as the reference reads it: "[http(s)://]host[:port][/path]".
 * The path is returned, not checked: the reference drops it. */
int vsr__cfg_parse_endpoint(vsr_slice_t s, cfg_endpoint_t *out, const char **why);

/* An IPv4 or IPv6 literal → its canonical text (inet_ntop) in out. */
int vsr__cfg_canonical_ip(const char *s, char *out, size_t outlen);

/* The Host header for an upstream: host ([v6] bracketed), plus ":port" when
 * port is not the scheme's default. */
char *vsr__cfg_authority(vsr_pool_t *pool, vsr_slice_t host, int ipv6, uint16_t port, int tls);

/* "a.b.c.d/n", "v6/n", or a bare address (a single host) → the canonical
 * network "addr/n" with the host bits cleared, in out. */
int vsr__cfg_canonical_cidr(const char *s, char *out, size_t outlen, const char **why);

/* ---- the config under construction ----------------------------------------- */

/* The allocation behind a vsr_config_t: everything it points to lives in
 * `pool`, so freeing is one call whatever the document held.  The other
 * members are scratch used while decoding: sections that the C model
 * arranges differently from the YAML land here first. */
typedef struct {
    vsr_config_t conf; /* first: vsr_config_free converts back */
    vsr_pool_t pool;
    vsr_recipe_conf_t routing;           /* the top-level routing block (recipe "default") */
    vsr_recipe_conf_t *recipe_list;      /* recipes[] */
    size_t n_recipe_list;
    char *auto_model_name;               /* global.router.auto_model_name */
    vsr_strlist_conf_t auto_model_names; /* global.router.auto_model_names as written */
    int has_auto_model_names;
    int has_management;                  /* global.services.management_api given */
    int has_management_enabled;
    int management_remote_exposure;
    uint32_t default_retryable_codes[3];
    int tracing_sampling_type;           /* observability.tracing.sampling.type: index in its choices, -1 absent */
    int has_tracing_rate;
    double tracing_rate;
    char *tracing_provider, *tracing_exporter_type;
    int tracing_insecure, has_tracing_insecure; /* exporter.insecure (the reference's default: true) */
} config_box_t;

/* ---- sections (each file's entry points) ------------------------------------- */

extern const cfg_spec_t vsr__cfg_model_reliability_spec;    /* providers.models[].reliability */
extern const cfg_spec_t vsr__cfg_decision_reliability_spec; /* routing.decisions[].reliability */
extern const cfg_spec_t vsr__cfg_fallback_spec;             /* global.router.fallback */
extern const cfg_spec_t vsr__cfg_scoped_fallback_spec;      /* recipe and decision fallback (no circuit_breaker) */
extern const cfg_spec_t vsr__cfg_routing_spec;              /* the top-level routing block */
extern const cfg_spec_t vsr__cfg_recipe_spec;               /* recipes[] */
extern const cfg_spec_t vsr__cfg_entrypoint_spec;           /* entrypoints[] */
extern const cfg_spec_t vsr__cfg_model_ref_spec;            /* decisions[].modelRefs[] (cfg_routing.c) */
/* decisions[].candidateIterations and .action, and what they add to the
 * decision's modelRefs once the decision is decoded (cfg_decision.c) */
int vsr__cfg_decode_candidate_iterations(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj);
int vsr__cfg_decode_decision_action(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj);
void vsr__cfg_finish_decision_extras(cfg_decoder_t *d, const cfg_node_t *map, vsr_decision_conf_t *dc);
extern const cfg_spec_t vsr__cfg_cc_controls_spec;          /* context_compression.request_controls (cfg_compression.c) */
extern const cfg_spec_t vsr__cfg_management_auth_spec;      /* global.services.management_api.auth (cfg_management.c) */
/* An environment variable's name ([A-Za-z_][A-Za-z0-9_]*) into the char * at f->offset. */
int vsr__cfg_env_name(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj);
/* 1 when a and b have the same management_api.auth (mode, tokens, roles). */
int vsr__cfg_management_auth_eq(const vsr_config_t *a, const vsr_config_t *b);

/* global.integrations.tools, tool_selection, tools.semantic_selection (cfg_tools.c) */
extern const cfg_spec_t vsr__cfg_tools_integration_spec;
extern const cfg_spec_t vsr__cfg_tool_selection_spec;
extern const cfg_spec_t vsr__cfg_memory_plugin_spec; /* cfg_memory.c */
extern const cfg_spec_t vsr__cfg_memory_store_spec;
/* The rag plugin's configuration into p->u.rag (cfg_rag.c). */
void vsr__cfg_rag_decode(cfg_decoder_t *d, const cfg_node_t *conf, vsr_plugin_conf_t *p);
int vsr__cfg_tools_semantic(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj);
/* The tool plugins' unset fields from global.integrations.tools; mode add
 * without a tools database is an error at the plugin. */
void vsr__cfg_tools_resolve(cfg_decoder_t *d, config_box_t *box);

/* The answer-side families (cfg_hallucination.c): routing.signals.hallucination[]
 * into s; the plugins' specs; the detector block; the checks that need the
 * whole document (shadow models, a plugin without a detector). */
int vsr__cfg_hallucination_signals(cfg_decoder_t *d, const cfg_node_t *val, vsr_signals_conf_t *s);
extern const cfg_spec_t vsr__cfg_hallucination_plugin_spec;
extern const cfg_spec_t vsr__cfg_shadow_dispatch_spec;
extern const cfg_spec_t vsr__cfg_hallucination_module_spec;
void vsr__cfg_hallucination_resolve(cfg_decoder_t *d, config_box_t *box);
/* Why a decision may not read condition type `type` (NULL: it may). */
const char *vsr__cfg_condition_refusal(const char *type);

/* routing.signals (cfg_signals.c): decodes the family map into the
 * vsr_signals_conf_t at obj + f->offset. */
int vsr__cfg_decode_signals(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj);
/* A predicate {gt, gte, lt, lte} (one at least) into *out; 0, or -1 reported. */
int vsr__cfg_decode_predicate(cfg_decoder_t *d, const cfg_node_t *val, vsr_predicate_conf_t *out);
/* A rule leaf's condition type: 1 implemented, 0 known but not supported yet, -1 unknown. */
int vsr__cfg_condition_type(const char *type);
/* 1 when a rule leaf's condition type is a model-backed family's (on_error applies to it). */
int vsr__cfg_condition_model_backed(const char *type);
/* 1 when s declares a signal a leaf (or a projection score input) of
 * condition type `type` and name `name` resolves to: a complexity level
 * "<signal>:<level>" names <signal>, an authz name a binding or its role. */
int vsr__cfg_signal_declared(const vsr_signals_conf_t *s, const char *type, const char *name);
/* Appends to dst a copy of the signal of src that (type, name) resolves to
 * (the copy shares src's decoded values: all of them live in the document's
 * pool); 1 when src declares it, else 0. */
int vsr__cfg_signal_import(cfg_decoder_t *d, vsr_signals_conf_t *dst, const vsr_signals_conf_t *src, const char *type,
                           const char *name);
/* Once every recipe is decoded: a projection score input naming a signal its
 * recipe does not declare takes it from the recipe (or the top-level block)
 * that does, as the reference's global signal registry does; else an error. */
void vsr__cfg_resolve_projection_inputs(cfg_decoder_t *d, config_box_t *box);
/* Reports every rule leaf of r's decisions that names no signal declared in
 * r; `where` names the recipe in messages ("routing"). */
void vsr__cfg_resolve_leaves(cfg_decoder_t *d, const vsr_recipe_conf_t *r, const char *where);
/* A rule tree field (a complexity signal's composer): decodes into the
 * vsr_rule_conf_t * at f->offset (NULL for an empty one). */
int vsr__cfg_decode_rule_field(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj);
/* Gates every rule leaf of r naming a complexity level with that signal's
 * composer (see vsr_sig_complexity_conf_t). */
void vsr__cfg_compose_complexity(cfg_decoder_t *d, vsr_recipe_conf_t *r);
/* routing.projections (cfg_projections.c): the block's table, and the
 * checks that need the whole recipe (signal and score references, score
 * cycles, unique output names, `type: projection` leaves). */
extern const cfg_spec_t vsr__cfg_projections_spec;
/* routing.decisions[].algorithm (cfg_looper.c): the type and its block into
 * the decision (vsr_decision_conf_t) at obj. */
int vsr__cfg_decode_algorithm(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj);
/* The key of a kind's own block ("confidence", ...; NULL for static). */
const char *vsr__cfg_algo_block(vsr_algo_kind_t kind);
/* algorithm.graph (cfg_graph.c): the block's table (root and subgraphs
 * decoded, subgraph nodes resolved, recursion and the bounds checked); the
 * default of every parallel's on_error from algorithm.on_error (NULL: skip),
 * once the algorithm is decoded; and every node of the root's and of each
 * subgraph's tree, parents first, subgraph nodes not followed. */
extern const cfg_spec_t vsr__cfg_graph_spec;
void vsr__cfg_graph_defaults(vsr_graph_conf_t *g, const char *on_error);
void vsr__cfg_graph_walk(const vsr_graph_conf_t *g, void (*fn)(const vsr_gnode_conf_t *n, void *arg), void *arg);
/* global.integrations (its object is the vsr_config_t), and the defaults of
 * its looper block when the document has none. */
extern const cfg_spec_t vsr__cfg_integrations_spec;
void vsr__cfg_looper_defaults(vsr_looper_integration_conf_t *l);
/* routing.signals.metadata[] and .events[] (cfg_events.c) */
extern const cfg_spec_t vsr__cfg_metadata_spec;
extern const cfg_spec_t vsr__cfg_event_spec;
extern const cfg_spec_t vsr__cfg_safety_spec;
extern const cfg_spec_t vsr__cfg_input_modality_spec;
void vsr__cfg_check_projections(cfg_decoder_t *d, const vsr_recipe_conf_t *r, const char *where);

/* The fallback defaults of ref §1.7 into *out (every has_ flag set). */
void vsr__cfg_fallback_defaults(const config_box_t *box, vsr_fallback_conf_t *out);
/* Applies the fields `layer` sets over *base. */
void vsr__cfg_fallback_merge(vsr_fallback_conf_t *base, const vsr_fallback_conf_t *layer);

/* The canonical form (cfg_snapshot.c) of one node, appended to b. */
int vsr__cfg_canonical_node(vsr_buf_t *b, const cfg_node_t *n);

/* The checks that need the whole document, run by the document's finish hook. */
void vsr__cfg_check_document(cfg_decoder_t *d, config_box_t *box);

/* cfg_snapshot.c: what redaction hides.  A key whose value is a secret
 * wherever it appears; a header name whose extra_headers value is not one;
 * a printer path that names an extra_headers map; a header_mutation entry
 * whose value is one. */
int vsr__cfg_secret_key(const char *key);
int vsr__cfg_header_harmless(const char *name);
int vsr__cfg_under_extra_headers(const char *path);
int vsr__cfg_header_entry_secret(const char *path, const cfg_node_t *map);

#endif /* VSR_CFG_INTERNAL_H */
