/*
 * edits.c — rewriting a JSON body as byte-range edits over the source.
 * See json.h ("Edits") for the contract.
 *
 * The edit array is kept sorted by (start, end), ties in insertion order,
 * and free of overlaps, so both the overlap check and apply are cheap: a
 * new edit can only collide with its nearest non-empty predecessor or with
 * its successor.
 *
 * Structural edits must stay valid JSON whatever else is edited in the same
 * container, in any order.  Two rules give that:
 *  - Removals in one object are kept as one edit per run of consecutive
 *    removed members, in a canonical form that depends only on which members
 *    are removed: a run followed by a live member spans from its first key
 *    to the next live key (its commas go with it); a run that reaches the
 *    end spans from the end of the previous live value to its last value;
 *    removing every member empties the braces.  A new removal recomputes the
 *    runs of that object, so neighbouring removals merge instead of
 *    colliding over a shared comma.
 *  - An insertion at the start of a container carries its separator as a
 *    separate one-byte edit, tagged by pointer: a trailing comma when
 *    original members follow, a leading one when it follows an earlier
 *    insertion into an empty container.  When later removals empty the
 *    object, the last trailing comma is dropped.
 */
#include "json/json.h"

#include <stdlib.h>

/* Distinct objects (not literals) so their addresses tag the edits. */
static const char trail_comma[] = ",";
static const char lead_comma[] = ",";

void vsr_json_edits_init(vsr_json_edits_t *ed)
{
    ed->e = NULL;
    ed->n = ed->cap = 0;
}

void vsr_json_edits_free(vsr_json_edits_t *ed)
{
    if (ed == NULL)
        return;
    if (ed->e != ed->inline_e)
        vsr_free(ed->e);
    ed->e = NULL;
    ed->n = ed->cap = 0;
}

/* Index of the first edit whose (start, end) is greater than (s, e): where
 * a new edit goes so that equal keys stay in insertion order. */
static size_t upper_bound(const vsr_json_edits_t *ed, uint32_t s, uint32_t e)
{
    size_t lo = 0, hi = ed->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const vsr_json_edit_t *m = &ed->e[mid];
        if (m->start < s || (m->start == s && m->end <= e))
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* Index of the first edit with start >= s. */
static size_t lower_bound_start(const vsr_json_edits_t *ed, uint32_t s)
{
    size_t lo = 0, hi = ed->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (ed->e[mid].start < s)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* Whether [s, e) would overlap an existing edit, given idx = upper_bound(s, e). */
static int conflicts_at(const vsr_json_edits_t *ed, size_t idx, uint32_t s, uint32_t e)
{
    /* Non-empty edits that do not overlap each other have increasing ends
     * in start order, so the nearest non-empty predecessor is the only one
     * that can reach past s.  Insertions before idx sit at points <= s. */
    for (size_t i = idx; i-- > 0;) {
        const vsr_json_edit_t *p = &ed->e[i];
        if (p->start == p->end)
            continue;
        if (p->end > s)
            return 1;
        break;
    }
    /* Successors start at or after s; for a non-empty range the first one
     * collides when it starts before e (a successor insertion at exactly s
     * cannot exist: it would sort before).  An insertion has no interior. */
    if (s != e && idx < ed->n && ed->e[idx].start < e)
        return 1;
    return 0;
}

static void insert_at(vsr_json_edits_t *ed, size_t idx, uint32_t s, uint32_t e, vsr_slice_t text)
{
    if (ed->n == ed->cap) {
        if (ed->e == NULL) {
            ed->e = ed->inline_e;
            ed->cap = VSR_JSON_EDITS_INLINE;
        } else {
            vsr_json_edit_t *grown = vsr_malloc(ed->cap * 2 * sizeof(*ed->e));
            memcpy(grown, ed->e, ed->n * sizeof(*ed->e));
            if (ed->e != ed->inline_e)
                vsr_free(ed->e);
            ed->e = grown;
            ed->cap *= 2;
        }
    }
    if (idx < ed->n)
        memmove(&ed->e[idx + 1], &ed->e[idx], (ed->n - idx) * sizeof(*ed->e));
    vsr_json_edit_t *x = &ed->e[idx];
    x->start = s;
    x->end = e;
    x->text = text;
    /* Rank among edits with the same range; the array order already keeps
     * it, the field records it for readers of the array. */
    x->seq = (idx > 0 && ed->e[idx - 1].start == s && ed->e[idx - 1].end == e) ? ed->e[idx - 1].seq + 1 : 0;
    ed->n++;
}

int vsr_json_edits_add(vsr_json_edits_t *ed, uint32_t start, uint32_t end, vsr_slice_t text)
{
    if (start > end)
        return VSR_ERR_INVALID;
    size_t idx = upper_bound(ed, start, end);
    if (conflicts_at(ed, idx, start, end))
        return VSR_ERR_INVALID;
    insert_at(ed, idx, start, end, text);
    return VSR_OK;
}

int vsr_json_edits_overlaps(const vsr_json_edits_t *ed, uint32_t start, uint32_t end)
{
    if (ed == NULL || ed->n == 0 || start > end)
        return 0;
    return conflicts_at(ed, upper_bound(ed, start, end), start, end);
}

int vsr_json_edit_replace(vsr_json_edits_t *ed, const vsr_json_t *j, uint32_t t, vsr_slice_t text)
{
    if (j->toks == NULL || t >= j->ntoks)
        return VSR_ERR_INVALID;
    return vsr_json_edits_add(ed, j->toks[t].start, j->toks[t].end, text);
}

/* ---- object members and their removal runs ------------------------------- */

typedef struct {
    uint32_t n;
    uint32_t *key;  /* key token of member i */
    uint32_t *ks;   /* offset of its key's opening quote */
    uint32_t *ve;   /* offset one past its value */
} members_t;

static void members_load(const vsr_json_t *j, uint32_t obj, members_t *m)
{
    uint32_t n = j->toks[obj].count;
    m->n = n;
    m->key = vsr_malloc(((size_t)n * 3 + 1) * sizeof(uint32_t));
    m->ks = m->key + n;
    m->ve = m->ks + n;
    uint32_t c = obj + 1;
    for (uint32_t i = 0; i < n; i++) {
        m->key[i] = c;
        m->ks[i] = j->toks[c].start;
        m->ve[i] = j->toks[c + 1].end;
        c = j->toks[c + 1].next;
    }
}

static void members_free(members_t *m)
{
    vsr_free(m->key);
}

/* Index of v in the ascending array a[0..n), or -1. */
static int64_t find_u32(const uint32_t *a, uint32_t n, uint32_t v)
{
    uint32_t lo = 0, hi = n;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (a[mid] < v)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < n && a[lo] == v ? (int64_t)lo : -1;
}

/* The members edit x removes, when x is a canonical removal run of the
 * object (see the top of the file): sets [*a, *b] and returns 1. */
static int run_of(const vsr_json_t *j, uint32_t obj, const members_t *m, const vsr_json_edit_t *x, uint32_t *a,
                  uint32_t *b)
{
    if (x->text.len != 0 || x->start == x->end || m->n == 0)
        return 0;
    const vsr_json_tok_t *o = &j->toks[obj];
    if (x->start == o->start + 1 && x->end == o->end - 1) {
        *a = 0;
        *b = m->n - 1;
        return 1;
    }
    int64_t first = find_u32(m->ks, m->n, x->start);
    int64_t next = find_u32(m->ks, m->n, x->end);
    if (first >= 0 && next > first) {
        *a = (uint32_t)first;
        *b = (uint32_t)next - 1;
        return 1;
    }
    int64_t before = find_u32(m->ve, m->n, x->start);
    if (before >= 0 && before < (int64_t)m->n - 1 && x->end == m->ve[m->n - 1]) {
        *a = (uint32_t)before + 1;
        *b = m->n - 1;
        return 1;
    }
    return 0;
}

/* Marks removed[i] for members covered by the object's removal runs and,
 * when is_run is not NULL, flags those run edits (is_run[i - lo] for edit i
 * in [lo, hi), the edits that start inside the object). */
static void scan_runs(const vsr_json_edits_t *ed, const vsr_json_t *j, uint32_t obj, const members_t *m,
                      uint8_t *removed, size_t *lo_out, size_t *hi_out, uint8_t **is_run)
{
    const vsr_json_tok_t *o = &j->toks[obj];
    size_t lo = lower_bound_start(ed, o->start + 1);
    size_t hi = lower_bound_start(ed, o->end);
    if (is_run)
        *is_run = hi > lo ? vsr_calloc(hi - lo, 1) : NULL;
    for (size_t i = lo; i < hi; i++) {
        uint32_t a, b;
        if (!run_of(j, obj, m, &ed->e[i], &a, &b))
            continue;
        memset(removed + a, 1, (size_t)(b - a) + 1);
        if (is_run)
            (*is_run)[i - lo] = 1;
    }
    *lo_out = lo;
    *hi_out = hi;
}

static int is_object(const vsr_json_t *j, uint32_t t)
{
    return j->toks != NULL && t < j->ntoks && j->toks[t].type == VSR_JSON_OBJECT;
}

int vsr_json_edit_remove_members(vsr_json_edits_t *ed, const vsr_json_t *j, uint32_t obj, const uint32_t *keys,
                                 size_t nkeys)
{
    if (!is_object(j, obj))
        return VSR_ERR_INVALID;
    if (nkeys == 0)
        return VSR_OK;
    members_t m;
    members_load(j, obj, &m);
    int rc = VSR_ERR_INVALID;
    uint8_t *removed = vsr_calloc((size_t)m.n + 1, 2);
    uint8_t *want = removed + m.n + 1;
    uint8_t *is_run = NULL;
    vsr_json_edit_t *runs = NULL, *merged = NULL;

    for (size_t i = 0; i < nkeys; i++) {
        int64_t idx = find_u32(m.key, m.n, keys[i]);
        if (idx < 0)
            goto out;
        want[idx] = 1;
    }
    size_t lo, hi;
    scan_runs(ed, j, obj, &m, removed, &lo, &hi, &is_run);
    int fresh = 0, all = 1;
    for (uint32_t i = 0; i < m.n; i++) {
        if (want[i] && !removed[i])
            fresh = 1;
        removed[i] |= want[i];
        if (!removed[i])
            all = 0;
    }
    if (!fresh) {
        rc = VSR_OK;
        goto out;
    }

    /* The new runs, in document order. */
    const vsr_json_tok_t *o = &j->toks[obj];
    runs = vsr_malloc(((size_t)m.n + 1) * sizeof(*runs));
    size_t nruns = 0;
    if (all) {
        runs[nruns++] = (vsr_json_edit_t){o->start + 1, o->end - 1, VSR_SLICE_NULL, 0};
    } else {
        for (uint32_t a = 0; a < m.n;) {
            if (!removed[a]) {
                a++;
                continue;
            }
            uint32_t b = a;
            while (b + 1 < m.n && removed[b + 1])
                b++;
            if (b + 1 < m.n)
                runs[nruns++] = (vsr_json_edit_t){m.ks[a], m.ks[b + 1], VSR_SLICE_NULL, 0};
            else
                runs[nruns++] = (vsr_json_edit_t){m.ve[a - 1], m.ve[b], VSR_SLICE_NULL, 0};
            a = b + 1;
        }
    }

    /* The trailing comma to drop when the braces are emptied: an insertion
     * that expected originals after it no longer has any. */
    size_t drop = SIZE_MAX;
    if (all) {
        uint32_t at = o->start + 1;
        for (size_t i = upper_bound(ed, at, at); i-- > 0 && ed->e[i].start == at && ed->e[i].end == at;) {
            if (ed->e[i].text.p == trail_comma) {
                drop = i;
                break;
            }
        }
    }

    /* Merge the kept edits (all but this object's old runs and the dropped
     * comma) with the new runs, checking overlaps in the same pass: in
     * position order, every edit must start at or after the end of every
     * earlier non-empty one.  Linear, so stripping many parameters at once
     * stays cheap.  The old array stays until the merge is accepted. */
    size_t mcap = ed->n + nruns + 1;
    merged = vsr_malloc(mcap * sizeof(*merged));
    size_t w = 0, r = 0;
    uint32_t reach = 0;
    rc = VSR_OK;
    for (size_t i = 0; i <= ed->n && rc == VSR_OK; i++) {
        int keep = i < ed->n && i != drop && (i < lo || i >= hi || !is_run[i - lo]);
        if (i < ed->n && !keep)
            continue;
        /* runs that sort before edit i (or all the rest, at the end) */
        while (r < nruns && (i == ed->n || runs[r].start < ed->e[i].start ||
                             (runs[r].start == ed->e[i].start && runs[r].end <= ed->e[i].end))) {
            if (runs[r].start < reach) {
                rc = VSR_ERR_INVALID;
                break;
            }
            reach = runs[r].end;
            merged[w++] = runs[r++];
        }
        if (i == ed->n || rc != VSR_OK)
            break;
        if (ed->e[i].start < reach) {
            rc = VSR_ERR_INVALID;
            break;
        }
        if (ed->e[i].end > ed->e[i].start)
            reach = ed->e[i].end;
        merged[w++] = ed->e[i];
    }
    if (rc == VSR_OK) {
        if (ed->e != ed->inline_e)
            vsr_free(ed->e);
        ed->e = merged;
        ed->n = w;
        ed->cap = mcap;
        merged = NULL;
    }
out:
    vsr_free(merged);
    vsr_free(runs);
    vsr_free(is_run);
    vsr_free(removed);
    members_free(&m);
    return rc;
}

int vsr_json_edit_remove_member(vsr_json_edits_t *ed, const vsr_json_t *j, uint32_t obj, uint32_t k)
{
    return vsr_json_edit_remove_members(ed, j, obj, &k, 1);
}

/* ---- insertions ------------------------------------------------------------ */

/* Inserts text at the start of container c, which keeps `live` of its
 * original children. */
static int insert_first(vsr_json_edits_t *ed, const vsr_json_t *j, uint32_t c, vsr_slice_t text, uint32_t live)
{
    uint32_t at = j->toks[c].start + 1;
    size_t idx = upper_bound(ed, at, at);
    if (conflicts_at(ed, idx, at, at))
        return VSR_ERR_INVALID;
    if (live > 0) {
        insert_at(ed, idx, at, at, text);
        insert_at(ed, idx + 1, at, at, vsr_slice(trail_comma, 1));
        return VSR_OK;
    }
    int earlier = idx > 0 && ed->e[idx - 1].start == at && ed->e[idx - 1].end == at;
    if (earlier)
        insert_at(ed, idx++, at, at, vsr_slice(lead_comma, 1));
    insert_at(ed, idx, at, at, text);
    return VSR_OK;
}

int vsr_json_edit_insert_member(vsr_json_edits_t *ed, const vsr_json_t *j, uint32_t obj, vsr_slice_t member)
{
    if (!is_object(j, obj))
        return VSR_ERR_INVALID;
    uint32_t live = j->toks[obj].count;
    if (live > 0 && ed->n > 0) {
        members_t m;
        members_load(j, obj, &m);
        uint8_t *removed = vsr_calloc(m.n, 1);
        size_t lo, hi;
        scan_runs(ed, j, obj, &m, removed, &lo, &hi, NULL);
        for (uint32_t i = 0; i < m.n; i++)
            live -= removed[i];
        vsr_free(removed);
        members_free(&m);
    }
    return insert_first(ed, j, obj, member, live);
}

int vsr_json_edit_insert_element(vsr_json_edits_t *ed, const vsr_json_t *j, uint32_t arr, vsr_slice_t value)
{
    if (j->toks == NULL || arr >= j->ntoks || j->toks[arr].type != VSR_JSON_ARRAY)
        return VSR_ERR_INVALID;
    return insert_first(ed, j, arr, value, j->toks[arr].count);
}

/* ---- output ---------------------------------------------------------------- */

vsr_slice_t *vsr_json_edits_apply(const vsr_json_edits_t *ed, const char *src, size_t len, vsr_pool_t *pool,
                                  size_t *n_out, uint64_t *total_len)
{
    size_t n = ed ? ed->n : 0;
    vsr_slice_t *pieces = vsr_pool_alloc(pool, (2 * n + 1) * sizeof(*pieces));
    if (n == 0) {
        pieces[0] = vsr_slice(src, len);
        *n_out = 1;
        *total_len = len;
        return pieces;
    }
    size_t k = 0, cur = 0;
    uint64_t total = 0;
    for (size_t i = 0; i < n; i++) {
        const vsr_json_edit_t *x = &ed->e[i];
        VSR_BUG_ON(x->end > len || x->start < cur);
        if (x->start > cur) {
            pieces[k++] = vsr_slice(src + cur, x->start - cur);
            total += x->start - cur;
        }
        if (x->text.len) {
            pieces[k++] = x->text;
            total += x->text.len;
        }
        cur = x->end;
    }
    if (cur < len) {
        pieces[k++] = vsr_slice(src + cur, len - cur);
        total += len - cur;
    }
    *n_out = k;
    *total_len = total;
    return pieces;
}
