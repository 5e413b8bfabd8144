/*
 * tool_rank.c — tool_selection's advanced_filtering (the reference's
 * weighted retrieval, tools/relevance.go): the database tools that reached
 * similarity_threshold are filtered (allow/block lists, the matched
 * domain's category) and ranked by a weighted score of their similarity
 * and of words they share with the routing text:
 *
 *   lexical  = distinct query words in the tool's name, description and
 *              category / the query's word count
 *   tag      = distinct query words among the tags / the tags' word count
 *   name     = 1 when every word of the name is a query word
 *   category = 1 when the tool's category is the matched domain's
 *   combined = (w_embed·similarity + w_lexical·lexical + w_tag·tag +
 *               w_name·name + w_category·category) / the weights' sum
 *
 * A tool sharing fewer than min_lexical_overlap words, or scoring below
 * min_combined_score, is left out; the rest go best first (ties: the more
 * similar, then by name).  Words: runs of ASCII letters and digits
 * (lower-cased) and of non-ASCII bytes.  Bounds: the first RANK_MAX_WORDS
 * words of the routing text are compared.
 */
#include <ctype.h>
#include <stdlib.h>

#include "plugins/plugins_int.h"

#define RANK_MAX_WORDS 512u

typedef struct {
    vsr_slice_t *w;
    size_t n, cap;
} words_t;

static int word_byte(unsigned char c)
{
    return isalnum(c) || c >= 0x80;
}

/* The words of s (slices into s; compared without case). */
static void split(vsr_slice_t s, words_t *out, vsr_pool_t *pool, size_t max)
{
    size_t i = 0;
    while (i < s.len && out->n < max) {
        while (i < s.len && !word_byte((unsigned char)s.p[i]))
            i++;
        size_t b = i;
        while (i < s.len && word_byte((unsigned char)s.p[i]))
            i++;
        if (i == b)
            break;
        if (out->n == out->cap) {
            size_t cap = out->cap ? out->cap * 2 : 16;
            vsr_slice_t *w = vsr_pool_alloc(pool, cap * sizeof(*w));
            if (out->n)
                memcpy(w, out->w, out->n * sizeof(*w));
            out->w = w;
            out->cap = cap;
        }
        out->w[out->n++] = vsr_slice(s.p + b, i - b);
    }
}

static int has_word(const words_t *set, vsr_slice_t w)
{
    for (size_t i = 0; i < set->n; i++)
        if (set->w[i].len == w.len && vsr_slice_case_eq(set->w[i], w))
            return 1;
    return 0;
}

/* Distinct words of `words` that the query has. */
static size_t overlap(const words_t *query, const words_t *words)
{
    size_t n = 0;
    for (size_t i = 0; i < words->n; i++) {
        int seen = 0;
        for (size_t k = 0; k < i && !seen; k++)
            seen = vsr_slice_case_eq(words->w[k], words->w[i]);
        if (!seen && has_word(query, words->w[i]))
            n++;
    }
    return n;
}

static int in_list(const vsr_strlist_conf_t *l, const char *name)
{
    for (size_t i = 0; i < l->n; i++)
        if (vsr_slice_case_eq(vsr_slice_trim(vsr_slice_cstr(l->items[i])), vsr_slice_cstr(name)))
            return 1;
    return 0;
}

typedef struct {
    size_t i;       /* database index */
    double sim, combined;
    const char *name;
} ranked_t;

static int by_combined(const void *a, const void *b)
{
    const ranked_t *x = a, *y = b;
    if (x->combined != y->combined)
        return x->combined > y->combined ? -1 : 1;
    if (x->sim != y->sim)
        return x->sim > y->sim ? -1 : 1;
    return strcmp(x->name, y->name);
}

size_t vsr__tools_rank_advanced(const vsr_plugin_tool_selection_conf_t *tc, const vsr_tools_db_t *db,
                                const double *sims, size_t *order, size_t m, vsr_slice_t query, vsr_slice_t category,
                                vsr_pool_t *pool)
{
    if (tc->candidate_pool_size && m > tc->candidate_pool_size)
        m = tc->candidate_pool_size; /* order is best first */
    words_t q = {0};
    split(query, &q, pool, RANK_MAX_WORDS);
    /* allow / block, then the category (kept whole when no tool has it) */
    size_t n = 0, in_cat = 0;
    for (size_t r = 0; r < m; r++) {
        const vsr_tool_entry_t *t = &db->tools[order[r]];
        if ((tc->af_allow.n && !in_list(&tc->af_allow, t->name)) || in_list(&tc->af_block, t->name))
            continue;
        order[n++] = order[r];
        in_cat += category.len && t->category && vsr_slice_case_eq(vsr_slice_trim(vsr_slice_cstr(t->category)),
                                                                    vsr_slice_trim(category));
    }
    if (tc->use_category_filter && in_cat) {
        size_t k = 0;
        for (size_t r = 0; r < n; r++) {
            const vsr_tool_entry_t *t = &db->tools[order[r]];
            if (t->category &&
                vsr_slice_case_eq(vsr_slice_trim(vsr_slice_cstr(t->category)), vsr_slice_trim(category)))
                order[k++] = order[r];
        }
        n = k;
    }
    double wsum = tc->w_embed + tc->w_lexical + tc->w_tag + tc->w_name + tc->w_category;
    ranked_t *rk = vsr_pool_alloc(pool, (n ? n : 1) * sizeof(*rk));
    size_t kept = 0;
    for (size_t r = 0; r < n; r++) {
        const vsr_tool_entry_t *t = &db->tools[order[r]];
        words_t name = {0}, lex = {0}, tags = {0};
        split(vsr_slice_cstr(t->name), &name, pool, RANK_MAX_WORDS);
        split(vsr_slice_cstr(t->name), &lex, pool, 4 * RANK_MAX_WORDS);
        split(vsr_slice_cstr(t->description ? t->description : ""), &lex, pool, 4 * RANK_MAX_WORDS);
        split(vsr_slice_cstr(t->category ? t->category : ""), &lex, pool, 4 * RANK_MAX_WORDS);
        for (size_t g = 0; g < t->tags.n; g++)
            split(vsr_slice_cstr(t->tags.items[g]), &tags, pool, RANK_MAX_WORDS);
        size_t ov = overlap(&q, &lex);
        if (tc->min_lexical_overlap && ov < tc->min_lexical_overlap)
            continue;
        double lexical = q.n ? (double)ov / (double)q.n : 0;
        double tag = tags.n ? (double)overlap(&q, &tags) / (double)tags.n : 0;
        double nm = name.n && q.n ? 1 : 0;
        for (size_t k = 0; k < name.n && nm; k++)
            nm = has_word(&q, name.w[k]);
        double cat = category.len && t->category &&
                             vsr_slice_case_eq(vsr_slice_trim(vsr_slice_cstr(t->category)), vsr_slice_trim(category))
                         ? 1
                         : 0;
        double sim = sims[order[r]];
        double s01 = sim < 0 ? 0 : sim > 1 ? 1 : sim;
        double combined = wsum > 0 ? (tc->w_embed * s01 + tc->w_lexical * lexical + tc->w_tag * tag +
                                      tc->w_name * nm + tc->w_category * cat) / wsum
                                   : 0;
        if (combined < tc->min_combined_score)
            continue;
        rk[kept++] = (ranked_t){order[r], sim, combined, t->name};
    }
    qsort(rk, kept, sizeof(*rk), by_combined);
    for (size_t r = 0; r < kept; r++)
        order[r] = rk[r].i;
    return kept;
}
