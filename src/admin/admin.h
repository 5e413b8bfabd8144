/*
 * admin — the configuration control plane: every document, whatever its
 * source (the file, the management API, a rollback), goes through one
 * pipeline — canonical form and hash, parse and validate (with FILE:LINE:COL
 * errors), restart-required check, compile (the routing engine), warm (the
 * composition root's upstream state), then one atomic activation — and is
 * either ACKed as a new version or NACKed with a reject code (ref §1.14)
 * while the old version keeps serving.  Activated versions go to a history
 * of the last 10 for rollback; every outcome goes to the audit log.
 *
 * The management API's /api/v1/config* endpoints are served by a
 * transport-agnostic handler (method, target, headers, body in; status,
 * headers, body out), and the file source by a libuv watch.
 *
 * Threading: vsr_admin_apply() and vsr_admin_handle() may be called from
 * any thread; one lock serializes activations.  A call blocks its thread
 * while it compiles and warms (host names are resolved), so event loops hand
 * management calls to vsr_admin_submit(), which runs each on a detached
 * thread of its own: no loop ever waits for one; the process's end waits a
 * bounded time (vsr_admin_wait), so none is cut off inside a library.  Answers
 * that only read (GET) take a second, short lock and never wait for an
 * apply.  The watch belongs to the loop it was started on; it too applies
 * the file on a thread of its own.
 */
#ifndef VSR_ADMIN_H
#define VSR_ADMIN_H

#include <uv.h>

#include "base/base.h"
#include "config/config.h"
#include "routing/routing.h"

typedef struct vsr_admin_s vsr_admin_t;

typedef struct {
    /* Warm: build what the version needs besides routing (the upstream
     * state) and attach it (vsr_engine_adopt's part).  VSR_OK, or a message
     * in err (NACK warmup_failed).  Under the admin lock. */
    int (*warm)(void *ud, vsr_engine_t *e, int dry_run, vsr_buf_t *err);
    /* Activate: make e the version new requests pin (the swap); the callee
     * takes its own reference.  Under the admin lock. */
    void (*activate)(void *ud, vsr_engine_t *e);
    /* Each outcome, for metrics: "ack", "nack" or "unchanged" (may be NULL). */
    void (*outcome)(void *ud, const char *result);
    void *ud;
} vsr_admin_hooks_t;

typedef struct {
    const char *audit_path; /* JSON lines appended per activation, rejection and rollback; NULL = none */
} vsr_admin_opts_t;

/* NULL with a message in err when the audit log cannot be opened. */
vsr_admin_t *vsr_admin_new(const vsr_admin_hooks_t *hooks, const vsr_admin_opts_t *opts, vsr_buf_t *err);
/* The management API's bearer token (copied; NULL = none), for
 * vsr_admin_check_access.  Before the management listener starts. */
void vsr_admin_set_token(vsr_admin_t *a, const char *token);
/* management_api.auth of cfg (docs/security.md#management-api-roles): with
 * mode bearer, each tokens[] entry's value is read from its environment
 * variable now and bound to its role; the roles' permissions are copied.
 * The token of vsr_admin_set_token, when there is one, has the admin role.
 * Mode disabled: nothing changes.  Before the management listener starts.
 * VSR_OK, or VSR_ERR_INVALID with a line in err (a variable that is unset,
 * empty or not a usable token; never its value). */
int vsr_admin_set_auth(vsr_admin_t *a, const vsr_config_t *cfg, vsr_buf_t *err);
/* 1 when vsr_admin_set_auth found at least one token. */
int vsr_admin_has_auth_tokens(const vsr_admin_t *a);
/* From now on no hook runs (a call still in progress is answered
 * "unavailable" instead of activating): call it before whatever the hooks
 * reach goes away.  Idempotent; any thread. */
void vsr_admin_close(vsr_admin_t *a);
/* After vsr_admin_close (and the watch and the Kubernetes source are
 * stopped): waits at most timeout_ms for the calls still running on their
 * threads (a compile, a warm-up) to end.  The number still running: the
 * caller must then leave without running exit handlers (_exit), which would
 * pull the libraries those threads are inside from under them. */
unsigned vsr_admin_wait(vsr_admin_t *a, uint64_t timeout_ms);
/* After the watch is stopped: closes, then drops the caller's reference; the
 * admin (the history, the active version) goes once no call holds it. */
void vsr_admin_free(vsr_admin_t *a);

typedef struct {
    int accepted;         /* ACK (or, with dry run, valid) */
    int unchanged;        /* the content is the active version's: nothing activated */
    const char *code;     /* NACK: the reject code (invalid_document, duplicate_name, unresolved_reference,
                           * invalid_resource, restart_required, unsupported, build_failed, warmup_failed) */
    uint64_t version;     /* ACK: the new version; otherwise the active one */
    uint64_t previous;    /* the version active before */
    char hash[VSR_CONFIG_HASH_LEN]; /* the document's content hash ("" when it does not parse) */
    vsr_buf_t errors;     /* NACK: "NAME:LINE:COL: message" lines (or plain lines for restart_required) */
} vsr_admin_result_t;

enum {
    VSR_ADMIN_DRY_RUN = 1u << 0, /* validate only (POST /api/v1/config/validate) */
    VSR_ADMIN_FORCE = 1u << 1,   /* a new version even when the content is the active one's (rollback) */
    VSR_ADMIN_BOUNDED = 1u << 2, /* wait 10 s at most for a change in progress (then NACK "busy") */
};

/* Runs the pipeline for one document; `name` stands for FILE in messages,
 * `source` is recorded ("file", "api", "rollback").  Before anything else:
 * the size limit (the active version's management_api.max_document_bytes),
 * then vsr_config_vet: placeholders keep the active secrets, and a document
 * from "api" may name only environment variables that a "file" document
 * named.  Fills res (free it with
 * vsr_admin_result_free) and returns VSR_OK on ACK, VSR_ERR_INVALID on NACK. */
int vsr_admin_apply(vsr_admin_t *a, const char *name, const char *doc, size_t len, const char *source,
                    unsigned flags, vsr_admin_result_t *res);
/* Activates a NEW version whose content is that of `version` (kept in the
 * history).  VSR_ERR_NOT_FOUND when it is not kept; else as apply. */
int vsr_admin_rollback(vsr_admin_t *a, uint64_t version, vsr_admin_result_t *res);
void vsr_admin_result_free(vsr_admin_result_t *res);
/* The active version, with a reference for the caller; NULL before the first. */
vsr_engine_t *vsr_admin_active(vsr_admin_t *a);

/* ---- the management API (transport-agnostic) ---- */

typedef struct {
    vsr_slice_t method;
    vsr_slice_t target;        /* path and query */
    vsr_slice_t content_type;  /* empty when absent */
    vsr_slice_t if_match;      /* empty when absent */
    int has_if_match;
    const char *body;
    size_t body_len;
} vsr_admin_request_t;

typedef struct {
    int status;
    const char *content_type;
    vsr_buf_t headers;         /* extra header lines, "name: value\r\n" each */
    vsr_buf_t body;
} vsr_admin_response_t;

/* 1 when target's path is one of the endpoints below (whatever the method);
 * the extra endpoints (vsr_admin_set_extra) are the owner's to recognise. */
int vsr_admin_owns(vsr_slice_t target);
/* Serves GET/PUT /api/v1/config, POST /api/v1/config/validate, GET
 * /api/v1/config/versions, POST /api/v1/config/rollback and GET
 * /api/v1/config/hash.  Returns 1 with resp filled (free it with
 * vsr_admin_response_free), or 0 when the path is not one of them. */
int vsr_admin_handle(vsr_admin_t *a, const vsr_admin_request_t *req, vsr_admin_response_t *resp);
void vsr_admin_response_free(vsr_admin_response_t *resp);

/* More endpoints on the management API, served like the configuration
 * ones (vsr_admin_handle, and so vsr_admin_submit's threads, where a call
 * may block for a bounded time): owns(target) says which paths (any
 * thread), handle answers with resp initialised (status 200,
 * application/json, empty buffers) and the active version (NULL before the
 * first; a reference held for the call).  Before the management listener
 * starts; ud must outlive every call (a call may still run after the
 * admin's owner is gone: keep ud static or refcounted). */
void vsr_admin_set_extra(vsr_admin_t *a, int (*owns)(vsr_slice_t target),
                         void (*handle)(void *ud, vsr_engine_t *active, const vsr_admin_request_t *req,
                                        vsr_admin_response_t *resp),
                         void *ud);

/* At most this many management calls run at once (vsr_admin_submit). */
#define VSR_ADMIN_MAX_JOBS 8

/* Runs vsr_admin_handle(a, req, resp) on a new detached thread, then
 * done(ud) on that thread.  req (and what it points to) and resp must stay
 * valid until done runs; the caller owns both.  VSR_OK, or VSR_ERR_TOO_BIG
 * (VSR_ADMIN_MAX_JOBS are running) or VSR_ERR (closed, no thread): then done
 * never runs. */
int vsr_admin_submit(vsr_admin_t *a, const vsr_admin_request_t *req, vsr_admin_response_t *resp,
                     void (*done)(void *ud), void *ud);

/* Who may use the management listener.  Every request on it, probes and
 * routing preview included, is checked: with a token, "authorization: Bearer
 * TOKEN" (compared in constant time; else 401); on a loopback bind, Host
 * must be absent or a loopback name or address with the listener's port,
 * and Origin, when sent, the listener's own loopback origin (else 403): a
 * page from elsewhere cannot reach it through DNS rebinding. */
typedef struct {
    vsr_slice_t authorization; /* p NULL: absent (likewise below) */
    vsr_slice_t host;
    vsr_slice_t origin;
    vsr_slice_t method;        /* with auth mode bearer: the route's permission comes from these two */
    vsr_slice_t target;
} vsr_admin_access_t;

/* 1: go on.  0: refused, resp filled (free it with vsr_admin_response_free).
 * The listener's address and port are the active version's. */
int vsr_admin_check_access(vsr_admin_t *a, const vsr_admin_access_t *req, vsr_admin_response_t *resp);
/* 1 when addr (an IP literal) is a loopback address. */
int vsr_admin_loopback(const char *addr);

/* ---- the file source ---- */

/* Watches path with uv_fs_event on loop: in-place writes and a new file
 * renamed over the old one both trigger (the watch is re-armed after a
 * rename); events are debounced by debounce_ms, then the file is read and
 * applied (source "file"); content equal to the active version's is
 * ignored.  VSR_OK or an error in err. */
int vsr_admin_watch_start(vsr_admin_t *a, uv_loop_t *loop, const char *path, uint64_t debounce_ms, vsr_buf_t *err);
/* Closes the watch's handles (they finish closing on the loop's next run). */
void vsr_admin_watch_stop(vsr_admin_t *a);

/* ---- the Kubernetes source (global.router.config_source: kubernetes) ---- */

/* Lists and watches the vllm.ai/v1alpha1 IntelligentPool and IntelligentRoute
 * resources of the pod's namespace through the API server
 * (KUBERNETES_SERVICE_HOST and _PORT, the service account's token, ca.crt and
 * namespace under /var/run/secrets/kubernetes.io/serviceaccount, or the
 * directory VSR_K8S_SERVICEACCOUNT_DIR names; VSR_K8S_NAMESPACE overrides the
 * namespace), on threads of its own.  Each new generation of the pair is
 * merged into the document at base_path (vsr_admin_k8s_document) and applied
 * (source "kubernetes"); the outcome goes to the resources' status.  VSR_OK,
 * or a message in err (no API server, namespace or CA). */
int vsr_admin_k8s_start(vsr_admin_t *a, const char *base_path, vsr_buf_t *err);
/* Stops and joins the threads (each sees the stop within 250 ms, or once a
 * connect attempt times out); call it after vsr_admin_close. */
void vsr_admin_k8s_stop(vsr_admin_t *a);
/* The document for one IntelligentPool and one IntelligentRoute (JSON
 * objects as the API server serves them): base (the file) in canonical form
 * with routing.modelCards, routing.signals and routing.decisions replaced by
 * the resources' (keys respelled camelCase → snake_case; a decision's
 * signals become its rules; plugin configuration is copied as it is) and
 * providers.defaults.model set to the pool's defaultModel.  Appends to out;
 * VSR_OK or lines in err. */
int vsr_admin_k8s_document(const char *base_name, const char *base, size_t base_len, const char *pool_json,
                           const char *route_json, vsr_buf_t *out, vsr_buf_t *err);

/* Reads a whole file (at most 16 MiB) into *out (NUL-terminated); VSR_OK or
 * "PATH: reason" in err. */
int vsr_admin_read_file(const char *path, char **out, size_t *len, vsr_buf_t *err);

#endif /* VSR_ADMIN_H */
