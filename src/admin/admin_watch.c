/*
 * admin_watch.c — the file source.
 *
 * uv_fs_event watches the file itself.  Editors that write in place produce
 * change events on the watched inode; tools that write a new file and
 * rename it over the old one (and Kubernetes' ConfigMap symlink swap)
 * leave the watch on the old, now unlinked inode, so after every burst of
 * events the watch is re-armed on the path.  A burst is debounced: the file
 * is read once it has been quiet for debounce_ms, so a write in several
 * pieces is applied once, whole (on a thread of its own: see apply_file).
 */
#include "admin/admin-int.h"

#include <stdio.h>

struct admin_watch_s {
    vsr_admin_t *a;
    char *path;
    uv_fs_event_t ev;
    uv_timer_t debounce;
    uint64_t debounce_ms;
    int armed;            /* ev is started */
    int closes;           /* handles still closing */
};

static void on_event(uv_fs_event_t *h, const char *filename, int events, int status);

static void arm(admin_watch_t *w)
{
    if (w->armed) {
        uv_fs_event_stop(&w->ev);
        w->armed = 0;
    }
    if (uv_fs_event_start(&w->ev, on_event, w->path, 0) == 0)
        w->armed = 1;
}

static void apply_path(vsr_admin_t *a, const char *path)
{
    char *doc;
    size_t len;
    vsr_buf_t err;
    vsr_buf_init(&err, 4096);
    if (vsr_admin_read_file(path, &doc, &len, &err) != VSR_OK) {
        vsr_log_warn("admin", "configuration file unreadable, keeping the active version: %.*s", (int)err.len, err.data);
        vsr_buf_free(&err);
        return;
    }
    vsr_buf_free(&err);
    vsr_admin_result_t res;
    if (vsr_admin_apply(a, path, doc, len, "file", 0, &res) != VSR_OK)
        vsr_log_warn("admin", "%s rejected (%s):\n%.*s", path, res.code, (int)res.errors.len,
                     res.errors.data ? res.errors.data : "");
    vsr_admin_result_free(&res);
    vsr_free(doc);
}

/* The file is applied on a thread of its own, so the loop (the control
 * thread, which also takes signals) never waits for an apply.  One such
 * thread at a time: a change seen meanwhile makes it read the file again. */
typedef struct {
    vsr_admin_t *a;
    char *path;
} file_job_t;

static void *file_main(void *arg)
{
    file_job_t *j = arg;
    vsr_admin_t *a = j->a;
    for (;;) {
        atomic_store(&a->watch_again, 0);
        if (!vsr__admin_closed(a))
            apply_path(a, j->path);
        atomic_store(&a->watch_busy, 0);
        int idle = 0;
        if (!atomic_load(&a->watch_again) || vsr__admin_closed(a) ||
            !atomic_compare_exchange_strong(&a->watch_busy, &idle, 1))
            break;
    }
    vsr_free(j->path);
    vsr_free(j);
    vsr__admin_thread_end(a);
    return NULL;
}

static void apply_file(admin_watch_t *w)
{
    vsr_admin_t *a = w->a;
    atomic_store(&a->watch_again, 1);
    int idle = 0;
    if (!atomic_compare_exchange_strong(&a->watch_busy, &idle, 1))
        return; /* the thread at work reads it again */
    file_job_t *j = vsr_malloc(sizeof(*j));
    j->a = a;
    j->path = vsr_strdup(w->path);
    if (vsr__admin_spawn(a, file_main, j) != VSR_OK) {
        vsr_log_warn("admin", "cannot start a thread to apply %s; keeping the active version", w->path);
        atomic_store(&a->watch_busy, 0);
        vsr_free(j->path);
        vsr_free(j);
    }
}

static void debounce_cb(uv_timer_t *t)
{
    admin_watch_t *w = t->data;
    arm(w); /* a rename leaves the watch on the old inode: follow the path */
    if (!w->armed) {
        /* the file is missing for now (mid-rename): try again */
        uv_timer_start(&w->debounce, debounce_cb, w->debounce_ms, 0);
        return;
    }
    apply_file(w);
}

static void on_event(uv_fs_event_t *h, const char *filename, int events, int status)
{
    VSR_UNUSED(filename);
    admin_watch_t *w = h->data;
    if (status < 0)
        vsr_log_warn("admin", "watching %s: %s", w->path, uv_strerror(status));
    if (events & UV_RENAME) {
        uv_fs_event_stop(&w->ev); /* re-armed on the path once things are quiet */
        w->armed = 0;
    }
    uv_timer_start(&w->debounce, debounce_cb, w->debounce_ms, 0);
}

int vsr_admin_watch_start(vsr_admin_t *a, uv_loop_t *loop, const char *path, uint64_t debounce_ms, vsr_buf_t *err)
{
    admin_watch_t *w = vsr_calloc(1, sizeof(*w));
    w->a = a;
    w->path = vsr_strdup(path);
    w->debounce_ms = debounce_ms ? debounce_ms : 1;
    uv_fs_event_init(loop, &w->ev);
    uv_timer_init(loop, &w->debounce);
    w->ev.data = w->debounce.data = w;
    int rc = uv_fs_event_start(&w->ev, on_event, w->path, 0);
    if (rc != 0) {
        vsr_buf_printf(err, "cannot watch %s: %s\n", path, uv_strerror(rc));
        a->watch = w;
        vsr_admin_watch_stop(a);
        return VSR_ERR_IO;
    }
    w->armed = 1;
    a->watch = w;
    return VSR_OK;
}

static void closed(uv_handle_t *h)
{
    admin_watch_t *w = h->data;
    if (--w->closes == 0) {
        vsr_free(w->path);
        vsr_free(w);
    }
}

void vsr_admin_watch_stop(vsr_admin_t *a)
{
    admin_watch_t *w = a->watch;
    if (w == NULL)
        return;
    a->watch = NULL;
    w->closes = 2;
    uv_close((uv_handle_t *)&w->ev, closed);
    uv_close((uv_handle_t *)&w->debounce, closed);
}
