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
 * config.c; host/port/URL syntax in cfg_net.c.
 */
#ifndef VSR_CFG_INTERNAL_H
#define VSR_CFG_INTERNAL_H

#include "base/base.h"

/* ---- diagnostics ---------------------------------------------------------- */

/* Errors past this many are counted but not printed: a mangled file should
 * not bury the first, most useful messages. */
#define CFG_MAX_ERRORS 50

typedef struct {
    vsr_buf_t *out;    /* may be NULL: count only */
    const char *file;  /* FILE in every message */
    unsigned n_errors;
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

/* Parses one YAML document into a tree allocated from `pool`.  Syntax errors
 * (from libyaml) and a second document are fatal: reported, VSR_ERR_INVALID.
 * Softer problems (duplicate keys, undefined aliases, unsupported tags) are
 * reported and parsing goes on so the decoder can find more; the caller
 * checks dg->n_errors.  *root is NULL when the stream holds no document. */
int vsr__cfg_parse_yaml(vsr_pool_t *pool, cfg_diag_t *dg, const char *data, size_t len, cfg_node_t **root);

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
};

/* The hooks get the object's mapping node, and `seen`: for each field of the
 * table (by index; aliases share their target's index) the value node given
 * in the document, or NULL.  vsr__cfg_seen() looks one up by key. */
struct cfg_spec_s {
    const char *path;  /* dotted path for unimplemented keys: "" (top), "listeners[]", "providers.defaults" */
    size_t size;       /* sizeof the C object, for lists of them */
    const cfg_field_t *fields;
    size_t n_fields;
    void (*init)(cfg_decoder_t *d, void *obj);  /* defaults, before any field */
    /* derived values and cross-field checks, after all fields; `index` is the
     * position in the enclosing list (0 outside lists) */
    void (*finish)(cfg_decoder_t *d, const cfg_node_t *map, void *obj, const cfg_node_t *const *seen, size_t index);
};

#define CFG_MAX_FIELDS 32

struct cfg_decoder_s {
    vsr_pool_t *pool;     /* the result's memory: decoded strings and arrays */
    cfg_diag_t *dg;
    char **unimpl;        /* unimplemented paths, document order, each once */
    size_t n_unimpl, cap_unimpl;
};

/* Decodes mapping `node` into obj (spec->size bytes, zeroed by the caller). */
int vsr__cfg_decode_object(cfg_decoder_t *d, const cfg_spec_t *spec, const cfg_node_t *node, void *obj, size_t index);
const cfg_node_t *vsr__cfg_seen(const cfg_spec_t *spec, const cfg_node_t *const *seen, const char *key);

/* Reports at node: "FILE:LINE:COL: message". */
void vsr__cfg_node_error(cfg_decoder_t *d, const cfg_node_t *node, const char *fmt, ...) VSR_PRINTF(3, 4);
/* The text of a string scalar (non-empty, no control characters), or NULL
 * after reporting what was wrong. */
const char *vsr__cfg_get_string(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val);
char *vsr__cfg_strdup(cfg_decoder_t *d, const char *s);

/* Generic field decoders. */
int vsr__cfg_string(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj);   /* char * */
int vsr__cfg_uint(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj);     /* uintN_t, [min, max] */
int vsr__cfg_duration_ms(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj); /* uint64_t ms */
int vsr__cfg_object(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj);   /* f->spec at obj+offset */
int vsr__cfg_list(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj);     /* array of f->spec + count */

/* Reports every later duplicate among keys[0..n) (NULL keys are skipped) as
 * "duplicate <what> "k" (first defined at L:C)" at nodes[i]. */
void vsr__cfg_check_unique(cfg_decoder_t *d, const char *what, const char *const *keys, const cfg_node_t *const *nodes,
                           size_t n);

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

/* An IPv4 or IPv6 literal → its canonical text (inet_ntop) in out. */
int vsr__cfg_canonical_ip(const char *s, char *out, size_t outlen);

/* The Host header for an upstream: host ([v6] bracketed), plus ":port" when
 * port is not the scheme's default. */
char *vsr__cfg_authority(vsr_pool_t *pool, vsr_slice_t host, int ipv6, uint16_t port, int tls);

#endif /* VSR_CFG_INTERNAL_H */
