/*
 * admin.c — the activation pipeline, the history and the audit log.
 *
 * The document is parsed once; every step reads its tree.
 * Order of the steps, each able to NACK: canonical form (YAML syntax →
 * invalid_document), hash (equal to the active one → unchanged, unless
 * forced), load and validate (→ duplicate_name, unresolved_reference,
 * unsupported, invalid_resource), restart-required check against the active
 * version, compile (→ build_failed), warm (→ warmup_failed), then the swap.
 * A version number is handed out only on ACK, so versions are contiguous
 * and never go back: a rollback is a new version.
 */
#include "admin/admin-int.h"

#include <errno.h>
#include <openssl/crypto.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <time.h>
#include <strings.h>
#include <unistd.h>

#define MAX_DOC_BYTES VSR_CONFIG_MAX_DOCUMENT_BYTES
#define LOCK_WAIT_S 10         /* how long a bounded apply waits for the one before it */

void vsr__admin_rfc3339(double t, char out[64])
{
    time_t s = (time_t)t;
    struct tm tm;
    gmtime_r(&s, &tm);
    int ms = (int)((t - (double)s) * 1000.0);
    snprintf(out, 64, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
             tm.tm_hour, tm.tm_min, tm.tm_sec, ms < 0 ? 0 : ms > 999 ? 999 : ms);
}

static unsigned admin_exit_wait(void *arg, uint64_t timeout_ms)
{
    return vsr_admin_wait(arg, timeout_ms);
}

vsr_admin_t *vsr_admin_new(const vsr_admin_hooks_t *hooks, const vsr_admin_opts_t *opts, vsr_buf_t *err)
{
    int fd = -1;
    if (opts && opts->audit_path) {
        fd = open(opts->audit_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0640);
        if (fd < 0) {
            vsr_buf_printf(err, "audit log %s: %s\n", opts->audit_path, strerror(errno));
            return NULL;
        }
    }
    vsr_admin_t *a = vsr_calloc(1, sizeof(*a));
    a->hooks = *hooks;
    a->audit_fd = fd;
    atomic_init(&a->refs, 1);
    atomic_init(&a->jobs, 0);
    atomic_init(&a->watch_busy, 0);
    atomic_init(&a->watch_again, 0);
    pthread_mutex_init(&a->mu, NULL);
    pthread_mutex_init(&a->state_mu, NULL);
    pthread_mutex_init(&a->hook_mu, NULL);
    pthread_mutex_init(&a->live_mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&a->live_cv, &ca);
    pthread_condattr_destroy(&ca);
    vsr_config_history_init(&a->hist);
    /* the process's end waits for the calls still running (base.h) */
    if (vsr_exit_wait_add("management call(s)", admin_exit_wait, a) != VSR_OK)
        vsr_log_warn("admin", "the exit list is full: management calls are not waited for at exit");
    return a;
}

void vsr__admin_unref(vsr_admin_t *a)
{
    if (atomic_fetch_sub(&a->refs, 1) != 1)
        return;
    VSR_BUG_ON(a->watch != NULL);
    vsr_engine_unref(a->active);
    vsr_config_history_free(&a->hist);
    if (a->audit_fd >= 0)
        close(a->audit_fd);
    for (size_t i = 0; i < a->n_env_names; i++)
        vsr_free(a->env_names[i]);
    vsr_free(a->env_names);
    if (a->token) {
        memset(a->token, 0, strlen(a->token));
        vsr_free(a->token);
    }
    vsr__admin_auth_free(a->auth);
    pthread_mutex_destroy(&a->mu);
    pthread_mutex_destroy(&a->state_mu);
    pthread_mutex_destroy(&a->hook_mu);
    pthread_mutex_destroy(&a->live_mu);
    pthread_cond_destroy(&a->live_cv);
    vsr_free(a);
}

void vsr_admin_free(vsr_admin_t *a)
{
    if (a == NULL)
        return;
    vsr_admin_close(a);
    vsr_exit_wait_remove(admin_exit_wait, a);
    vsr__admin_unref(a);
}

void vsr_admin_set_token(vsr_admin_t *a, const char *token)
{
    VSR_BUG_ON(a->token != NULL);
    a->token = token && token[0] ? vsr_strdup(token) : NULL;
}

void vsr_admin_close(vsr_admin_t *a)
{
    pthread_mutex_lock(&a->hook_mu);
    a->closed = 1;
    pthread_mutex_unlock(&a->hook_mu);
}

int vsr__admin_closed(vsr_admin_t *a)
{
    pthread_mutex_lock(&a->hook_mu);
    int closed = a->closed;
    pthread_mutex_unlock(&a->hook_mu);
    return closed;
}

int vsr__admin_spawn(vsr_admin_t *a, void *(*fn)(void *), void *arg)
{
    pthread_attr_t attr;
    pthread_t t;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    atomic_fetch_add(&a->refs, 1); /* the thread's: dropped by fn at its end */
    pthread_mutex_lock(&a->live_mu);
    a->live++;
    pthread_mutex_unlock(&a->live_mu);
    int rc = pthread_create(&t, &attr, fn, arg);
    pthread_attr_destroy(&attr);
    if (rc != 0) {
        pthread_mutex_lock(&a->live_mu);
        a->live--;
        pthread_mutex_unlock(&a->live_mu);
        atomic_fetch_sub(&a->refs, 1);
        return VSR_ERR;
    }
    return VSR_OK;
}

void vsr__admin_thread_end(vsr_admin_t *a)
{
    /* what OpenSSL keeps for this thread (a replay read's libpq connect, the
     * document's hash) goes now, before vsr_admin_wait can return and the
     * exit clean OpenSSL up under a thread-exit destructor */
    OPENSSL_thread_stop();
    pthread_mutex_lock(&a->live_mu);
    a->live--;
    pthread_cond_broadcast(&a->live_cv);
    pthread_mutex_unlock(&a->live_mu);
    vsr__admin_unref(a);
}

unsigned vsr_admin_wait(vsr_admin_t *a, uint64_t timeout_ms)
{
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    until.tv_sec += (time_t)(timeout_ms / 1000);
    until.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&a->live_mu);
    while (a->live > 0 && pthread_cond_timedwait(&a->live_cv, &a->live_mu, &until) != ETIMEDOUT)
        ;
    unsigned left = a->live;
    pthread_mutex_unlock(&a->live_mu);
    return left;
}

vsr_engine_t *vsr_admin_active(vsr_admin_t *a)
{
    pthread_mutex_lock(&a->state_mu);
    vsr_engine_t *e = a->active ? vsr_engine_ref(a->active) : NULL;
    pthread_mutex_unlock(&a->state_mu);
    return e;
}

/* The hooks that reach into the composition root never run once it has
 * closed the admin (it may be gone by then). */
static void outcome(vsr_admin_t *a, const char *result)
{
    pthread_mutex_lock(&a->hook_mu);
    if (!a->closed && a->hooks.outcome)
        a->hooks.outcome(a->hooks.ud, result);
    pthread_mutex_unlock(&a->hook_mu);
}

void vsr_admin_result_free(vsr_admin_result_t *res)
{
    vsr_buf_free(&res->errors);
}

/* One JSON line: time, source, version, hash, result, reason. */
static void audit(vsr_admin_t *a, const char *source, uint64_t version, const char *hash, const char *result,
                  const char *reason, size_t reason_len)
{
    if (a->audit_fd < 0)
        return;
    char ts[64];
    vsr__admin_rfc3339(vsr_wall_time(), ts);
    vsr_buf_t b;
    vsr_buf_init(&b, 0);
    vsr_buf_printf(&b, "{\"time\":\"%s\",\"source\":", ts);
    vsr_buf_append_json_string(&b, vsr_slice_cstr(source));
    vsr_buf_printf(&b, ",\"version\":%llu,\"hash\":", (unsigned long long)version);
    vsr_buf_append_json_string(&b, vsr_slice_cstr(hash));
    vsr_buf_append_cstr(&b, ",\"result\":");
    vsr_buf_append_json_string(&b, vsr_slice_cstr(result));
    vsr_buf_append_cstr(&b, ",\"reason\":");
    while (reason_len > 0 && reason[reason_len - 1] == '\n')
        reason_len--;
    vsr_buf_append_json_string(&b, vsr_slice(reason ? reason : "", reason ? reason_len : 0));
    vsr_buf_append_cstr(&b, "}\n");
    /* one write per line (O_APPEND): lines from concurrent writers never interleave */
    ssize_t n = write(a->audit_fd, b.data, b.len);
    if (n < 0 || (size_t)n != b.len)
        vsr_log_warn("admin", "audit log write failed: %s", n < 0 ? strerror(errno) : "short write");
    vsr_buf_free(&b);
}

/* The reject code of a load failure, from its first message (ref §1.14). */
static const char *classify(const vsr_buf_t *errors)
{
    const char *s = errors->data ? errors->data : "";
    const char *nl = strchr(s, '\n');
    size_t n = nl ? (size_t)(nl - s) : strlen(s);
    char line[1024];
    snprintf(line, sizeof(line), "%.*s", (int)VSR_MIN(n, sizeof(line) - 1), s);
    if (strstr(line, "duplicate "))
        return "duplicate_name";
    if (strstr(line, "is not defined") || strstr(line, "is not declared") || strstr(line, "undefined alias"))
        return "unresolved_reference";
    if (strstr(line, "not supported"))
        return "unsupported";
    if (strstr(line, "the document is empty") || strstr(line, "larger than"))
        return "invalid_document";
    return "invalid_resource";
}

static void nack(vsr_admin_t *a, vsr_admin_result_t *res, const char *source, const char *code, unsigned flags)
{
    res->accepted = 0;
    res->code = code;
    if (flags & VSR_ADMIN_DRY_RUN)
        return;
    pthread_mutex_lock(&a->state_mu);
    snprintf(a->last_code, sizeof(a->last_code), "%s", code);
    a->last_rejected = 1;
    pthread_mutex_unlock(&a->state_mu);
    char reason[1200];
    size_t elen = res->errors.len;
    int n = snprintf(reason, sizeof(reason), "%s: %.*s", code, (int)VSR_MIN(elen, 1024), res->errors.data ? res->errors.data : "");
    audit(a, source, res->version, res->hash, "NACK", reason, n > 0 ? VSR_MIN((size_t)n, sizeof(reason) - 1) : 0);
    outcome(a, "nack");
    if (a->active == NULL) /* the first version: nothing serves */
        vsr_log_warn("admin", "configuration from %s rejected (%s); nothing was started", source, code);
    else
        vsr_log_warn("admin", "configuration from %s rejected (%s); version %llu keeps serving", source, code,
                     (unsigned long long)res->version);
}

static void set_source_hash(vsr_admin_t *a, const char *hash)
{
    pthread_mutex_lock(&a->state_mu);
    snprintf(a->last_source_hash, sizeof(a->last_source_hash), "%s", hash);
    pthread_mutex_unlock(&a->state_mu);
}

/* vsr_config_vet's env_seen: the file's variables are the ones a document
 * from the management API may name (under mu). */
static void env_seen(void *ud, const char *name)
{
    vsr_admin_t *a = ud;
    for (size_t i = 0; i < a->n_env_names; i++)
        if (strcmp(a->env_names[i], name) == 0)
            return;
    if (a->n_env_names >= 4096)
        return;
    a->env_names = vsr_realloc(a->env_names, (a->n_env_names + 1) * sizeof(char *));
    a->env_names[a->n_env_names++] = vsr_strdup(name);
}

static int apply_locked(vsr_admin_t *a, const char *name, const char *doc, size_t len, const char *source,
                        unsigned flags, vsr_admin_result_t *res, const char *reason)
{
    const int dry = (flags & VSR_ADMIN_DRY_RUN) != 0;
    res->version = res->previous = a->active ? vsr_engine_version(a->active) : 0;

    /* 0. bounds: the active version's document size limit (the hard one
     * before the first), then placeholders and variable names */
    uint64_t max = a->active ? vsr_engine_config(a->active)->management_max_document_bytes : MAX_DOC_BYTES;
    if (max == 0 || max > MAX_DOC_BYTES)
        max = MAX_DOC_BYTES;
    if (len > max) {
        vsr_buf_printf(&res->errors, "%s:1:1: the document is larger than %llu bytes "
                       "(global.services.management_api.max_document_bytes)\n", name, (unsigned long long)max);
        nack(a, res, source, "invalid_document", flags);
        return VSR_ERR_INVALID;
    }
    const vsr_config_version_t *act = vsr_config_history_active(&a->hist);
    int from_file = strcmp(source, "file") == 0;
    vsr_config_vet_t vet = {
        .active = act ? act->doc : NULL,
        .active_len = act ? act->len : 0,
        .env_check = strcmp(source, "api") == 0,
        .env_allowed = a->env_names,
        .n_env_allowed = a->n_env_names,
        .env_seen = from_file && !dry ? env_seen : NULL,
        .ud = a,
    };
    /* one parse: vetting, the canonical form and the loader read its tree */
    vsr_config_doc_t *pd = vsr_config_doc_parse(name, doc, len);
    if (vsr_config_doc_vet(pd, &vet, &res->errors) != VSR_OK) {
        vsr_config_doc_free(pd);
        nack(a, res, source, "invalid_document", flags);
        return VSR_ERR_INVALID;
    }

    /* 1. canonical form and hash */
    vsr_buf_t canon;
    vsr_buf_init(&canon, 0);
    int rc = VSR_ERR_INVALID;
    if (vsr_config_doc_canonical(pd, &canon, &res->errors) != VSR_OK) {
        if (!dry) { /* no canonical form: the source's bytes stand for it */
            char raw[VSR_CONFIG_HASH_LEN];
            vsr_config_hash(doc, len, raw);
            set_source_hash(a, raw);
        }
        if (res->errors.len == 0)
            vsr_buf_printf(&res->errors, "%s:1:1: the document is empty\n", name);
        nack(a, res, source, "invalid_document", flags);
        goto out;
    }
    vsr_config_hash(canon.data, canon.len, res->hash);
    if (!dry)
        set_source_hash(a, res->hash);
    if (!dry && !(flags & VSR_ADMIN_FORCE) && a->active && strcmp(vsr_engine_hash(a->active), res->hash) == 0) {
        res->accepted = 1;
        res->unchanged = 1;
        pthread_mutex_lock(&a->state_mu);
        a->last_rejected = 0;
        pthread_mutex_unlock(&a->state_mu);
        outcome(a, "unchanged");
        rc = VSR_OK;
        goto out;
    }

    /* 2. decode and validate (the tree parsed above) */
    vsr_config_t *cfg = NULL;
    if (vsr_config_doc_load(pd, &cfg, &res->errors) != VSR_OK) {
        nack(a, res, source, classify(&res->errors), flags);
        goto out;
    }
    /* 3. what a live process cannot change */
    if (a->active && vsr_config_restart_required(vsr_engine_config(a->active), cfg, &res->errors) > 0) {
        vsr_config_free(cfg);
        nack(a, res, source, "restart_required", flags);
        goto out;
    }
    /* 4. compile */
    vsr_engine_t *e = vsr_engine_new_from(cfg, a->active, 0, &res->errors);
    if (e == NULL) {
        vsr_config_free(cfg);
        nack(a, res, source, "build_failed", flags);
        goto out;
    }
    vsr_engine_adopt(e, cfg, res->hash);
    /* 5. warm */
    if (a->hooks.warm && a->hooks.warm(a->hooks.ud, e, dry, &res->errors) != VSR_OK) {
        vsr_engine_unref(e);
        nack(a, res, source, "warmup_failed", flags);
        goto out;
    }
    if (dry) {
        vsr_engine_unref(e);
        res->accepted = 1;
        rc = VSR_OK;
        goto out;
    }
    /* 6. activate: the version number is handed out only now, and never
     * once the process is stopping (the swap's hook may be gone) */
    pthread_mutex_lock(&a->hook_mu);
    if (a->closed) {
        pthread_mutex_unlock(&a->hook_mu);
        vsr_engine_unref(e);
        vsr_buf_printf(&res->errors, "%s:1:1: the process is stopping\n", name);
        res->code = "unavailable";
        goto out;
    }
    pthread_mutex_lock(&a->state_mu);
    uint64_t v = vsr_config_history_push(&a->hist, res->hash, source, vsr_wall_time(), canon.data, canon.len);
    vsr_engine_set_version(e, v);
    vsr_engine_t *old = a->active;
    a->active = e; /* the admin's reference */
    a->last_rejected = 0;
    a->last_code[0] = '\0';
    pthread_mutex_unlock(&a->state_mu);
    if (a->hooks.activate)
        a->hooks.activate(a->hooks.ud, e);
    if (a->hooks.outcome)
        a->hooks.outcome(a->hooks.ud, "ack");
    pthread_mutex_unlock(&a->hook_mu);
    res->accepted = 1;
    res->version = v;
    audit(a, source, v, res->hash, "ACK", reason ? reason : "", reason ? strlen(reason) : 0);
    vsr_log_info("admin", "configuration version %llu active (%s, %s)", (unsigned long long)v, source, res->hash);
    vsr_engine_unref(old);
    rc = VSR_OK;
out:
    vsr_buf_free(&canon);
    vsr_config_doc_free(pd);
    return rc;
}

/* The activation lock; a bounded caller waits LOCK_WAIT_S at most (then the
 * answer is "busy": another change is still in progress). */
static int lock(vsr_admin_t *a, unsigned flags, vsr_admin_result_t *res)
{
    if (!(flags & VSR_ADMIN_BOUNDED)) {
        pthread_mutex_lock(&a->mu);
        return VSR_OK;
    }
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += LOCK_WAIT_S;
    if (pthread_mutex_timedlock(&a->mu, &until) == 0)
        return VSR_OK;
    pthread_mutex_lock(&a->state_mu);
    res->version = res->previous = a->active ? vsr_engine_version(a->active) : 0;
    pthread_mutex_unlock(&a->state_mu);
    res->code = "busy";
    vsr_buf_printf(&res->errors, "another configuration change has been in progress for over %d s; try again later\n",
                   LOCK_WAIT_S);
    return VSR_ERR;
}

int vsr_admin_apply(vsr_admin_t *a, const char *name, const char *doc, size_t len, const char *source,
                    unsigned flags, vsr_admin_result_t *res)
{
    memset(res, 0, sizeof(*res));
    vsr_buf_init(&res->errors, 1 << 20);
    if (lock(a, flags, res) != VSR_OK)
        return VSR_ERR_INVALID;
    int rc = apply_locked(a, name, doc, len, source, flags, res, NULL);
    pthread_mutex_unlock(&a->mu);
    return rc;
}

int vsr_admin_rollback(vsr_admin_t *a, uint64_t version, vsr_admin_result_t *res)
{
    memset(res, 0, sizeof(*res));
    vsr_buf_init(&res->errors, 1 << 20);
    if (lock(a, VSR_ADMIN_BOUNDED, res) != VSR_OK)
        return VSR_ERR_INVALID;
    const vsr_config_version_t *v = vsr_config_history_find(&a->hist, version);
    int rc;
    if (v == NULL) {
        res->version = res->previous = a->active ? vsr_engine_version(a->active) : 0;
        rc = VSR_ERR_NOT_FOUND;
    } else {
        /* the entry may leave the history during the apply: work on a copy */
        char *doc = vsr_malloc(v->len + 1);
        memcpy(doc, v->doc, v->len + 1);
        size_t len = v->len;
        char name[64], reason[64];
        snprintf(name, sizeof(name), "version %llu", (unsigned long long)version);
        snprintf(reason, sizeof(reason), "rollback to version %llu", (unsigned long long)version);
        rc = apply_locked(a, name, doc, len, "rollback", VSR_ADMIN_FORCE, res, reason);
        vsr_free(doc);
    }
    pthread_mutex_unlock(&a->mu);
    return rc;
}

int vsr_admin_read_file(const char *path, char **out, size_t *len, vsr_buf_t *err)
{
    *out = NULL;
    *len = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        vsr_buf_printf(err, "%s: %s\n", path, strerror(errno));
        return VSR_ERR_IO;
    }
    size_t n = 0, alloc = 4096;
    char *data = vsr_malloc(alloc);
    for (;;) {
        if (n + 1 >= alloc) {
            if (alloc > MAX_DOC_BYTES) {
                vsr_buf_printf(err, "%s:1:1: the file is larger than %u bytes\n", path, MAX_DOC_BYTES);
                vsr_free(data);
                close(fd);
                return VSR_ERR_INVALID;
            }
            alloc *= 2;
            data = vsr_realloc(data, alloc);
        }
        ssize_t got = read(fd, data + n, alloc - n - 1);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0) {
            vsr_buf_printf(err, "%s: %s\n", path, strerror(errno));
            vsr_free(data);
            close(fd);
            return VSR_ERR_IO;
        }
        if (got == 0)
            break;
        n += (size_t)got;
    }
    close(fd);
    data[n] = '\0';
    *out = data;
    *len = n;
    return VSR_OK;
}
