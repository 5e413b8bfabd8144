/*
 * algo_prompt.c — the prompts of ReMoM's synthesis rounds and of Fusion's
 * judge, and the reading of the judge's analysis.  The built-in texts are
 * quoted in algo.h; templates use {placeholders} expanded here.
 */
#include "algo.h"
#include "json/json.h"

#define PUT(expr)                \
    do {                         \
        if (rc == VSR_OK)        \
            rc = (expr);         \
    } while (0)

typedef struct {
    vsr_slice_t question;
    const vsr_slice_t *models; /* NULL: answers are not labelled with a model */
    const vsr_slice_t *answers;
    size_t n;
    vsr_slice_t analysis;      /* already formatted ("An analysis ...\n\n" or empty) */
} fill_t;

static int put_responses(vsr_buf_t *out, const fill_t *f)
{
    int rc = VSR_OK;
    for (size_t i = 0; i < f->n; i++) {
        if (f->models)
            PUT(vsr_buf_printf(out, "Response %zu (" VSR_SLICE_FMT "):\n", i + 1, VSR_SLICE_ARG(f->models[i])));
        else
            PUT(vsr_buf_printf(out, "Response %zu:\n", i + 1));
        PUT(vsr_buf_append_slice(out, f->answers[i]));
        if (i + 1 < f->n)
            PUT(vsr_buf_append_cstr(out, "\n\n"));
    }
    return rc;
}

/* Copies tmpl to out with {question}, {responses}, {analysis} and {count}
 * expanded; other braces are copied as they are.  One pass, no re-expansion
 * of inserted text. */
static int expand(vsr_buf_t *out, const char *tmpl, const fill_t *f)
{
    int rc = VSR_OK;
    const char *p = tmpl;
    while (*p && rc == VSR_OK) {
        const char *b = strchr(p, '{');
        if (!b) {
            PUT(vsr_buf_append_cstr(out, p));
            break;
        }
        PUT(vsr_buf_append(out, p, (size_t)(b - p)));
        if (strncmp(b, "{question}", 10) == 0) {
            PUT(vsr_buf_append_slice(out, f->question));
            p = b + 10;
        } else if (strncmp(b, "{responses}", 11) == 0) {
            PUT(put_responses(out, f));
            p = b + 11;
        } else if (strncmp(b, "{analysis}", 10) == 0) {
            PUT(vsr_buf_append_slice(out, f->analysis));
            p = b + 10;
        } else if (strncmp(b, "{count}", 7) == 0) {
            PUT(vsr_buf_printf(out, "%zu", f->n));
            p = b + 7;
        } else {
            PUT(vsr_buf_append(out, "{", 1));
            p = b + 1;
        }
    }
    return rc;
}

/* ---- ReMoM --------------------------------------------------------------- */

static const char remom_default[] =
    "You are given a question and {count} candidate responses to it from other models.\n\n"
    "Question:\n{question}\n\n{responses}\n\n"
    "Reason about where the responses agree and disagree, correct their mistakes, and write a single, "
    "complete, best answer to the question. Answer the question directly; do not mention the candidate "
    "responses.";

int vsr__algo_remom_prompt(vsr_buf_t *out, const char *tmpl, vsr_slice_t question, const vsr_slice_t *answers,
                           size_t n)
{
    fill_t f = {question, NULL, answers, n, VSR_SLICE_NULL};
    return expand(out, tmpl && *tmpl ? tmpl : remom_default, &f);
}

/* ---- Fusion -------------------------------------------------------------- */

static const char fusion_analysis_default[] =
    "Below are {count} responses from different models to the conversation above.\n\n{responses}\n\n"
    "Compare them. Reply with only a compact JSON object, no prose, with exactly these keys, each an array "
    "of at most 2 short strings: \"consensus\" (points most responses agree on), \"contradictions\" "
    "(points where they disagree), \"partial_coverage\" (points only some address), \"unique_insights\" "
    "(valuable points made by one response), \"blind_spots\" (what all of them missed).";

static const char fusion_contract[] =
    "Output contract: reply with only the final answer for the user, written as if you were answering the "
    "request directly; do not mention the other models, their responses or this analysis.";

static const char fusion_instruction[] =
    "Synthesize the single best answer: keep what they agree on, resolve contradictions on the merits, and "
    "add what only one of them got right.";

static const char fusion_one_call[] =
    "First compare the responses for consensus, contradictions, partial coverage, unique insights and blind "
    "spots, silently. ";

int vsr__algo_fusion_analysis_prompt(vsr_buf_t *out, const char *tmpl, const vsr_slice_t *models,
                                     const vsr_slice_t *answers, size_t n)
{
    fill_t f = {VSR_SLICE_NULL, models, answers, n, VSR_SLICE_NULL};
    return expand(out, tmpl && *tmpl ? tmpl : fusion_analysis_default, &f);
}

int vsr__algo_fusion_synthesis_prompt(vsr_buf_t *out, const char *tmpl, vsr_slice_t question,
                                      const vsr_slice_t *models, const vsr_slice_t *answers, size_t n,
                                      vsr_slice_t analysis_json, int one_call)
{
    int rc = VSR_OK;
    vsr_buf_t an;
    vsr_buf_init(&an, 0);
    if (analysis_json.len) {
        PUT(vsr_buf_append_cstr(&an, "An analysis of the responses (JSON):\n"));
        PUT(vsr_buf_append_slice(&an, analysis_json));
        PUT(vsr_buf_append_cstr(&an, "\n\n"));
    }
    fill_t f = {question, models, answers, n, vsr_buf_slice(&an)};
    if (tmpl && *tmpl) {
        PUT(expand(out, tmpl, &f));
        if (!strstr(tmpl, "Output contract")) {
            PUT(vsr_buf_append_cstr(out, "\n\n"));
            PUT(vsr_buf_append_cstr(out, fusion_contract));
        }
    } else {
        PUT(expand(out, "Here are {count} responses from different models to the request above.\n\n"
                        "{responses}\n\n{analysis}", &f));
        if (one_call)
            PUT(vsr_buf_append_cstr(out, fusion_one_call));
        PUT(vsr_buf_append_cstr(out, fusion_instruction));
        PUT(vsr_buf_append_cstr(out, "\n\n"));
        PUT(vsr_buf_append_cstr(out, fusion_contract));
    }
    vsr_buf_free(&an);
    return rc;
}

static const char *const analysis_keys[] = {"consensus", "contradictions", "partial_coverage", "unique_insights",
                                            "blind_spots"};

static vsr_slice_t trim_blank(vsr_slice_t s)
{
    while (s.len && (s.p[0] == ' ' || s.p[0] == '\t' || s.p[0] == '\n' || s.p[0] == '\r')) {
        s.p++;
        s.len--;
    }
    while (s.len && (s.p[s.len - 1] == ' ' || s.p[s.len - 1] == '\t' || s.p[s.len - 1] == '\n' ||
                     s.p[s.len - 1] == '\r'))
        s.len--;
    return s;
}

/* Removes one Markdown code fence around s: ```[lang]\n ... ``` */
static vsr_slice_t unfence(vsr_slice_t s)
{
    if (s.len < 6 || memcmp(s.p, "```", 3) != 0 || memcmp(s.p + s.len - 3, "```", 3) != 0)
        return s;
    const char *nl = memchr(s.p + 3, '\n', s.len - 6);
    if (!nl)
        return s; /* ```{...}``` on one line: the info string would be the JSON */
    vsr_slice_t info = vsr_slice(s.p + 3, (size_t)(nl - (s.p + 3)));
    info = trim_blank(info);
    if (info.len && !vsr_slice_eq_cstr(info, "json") && !vsr_slice_eq_cstr(info, "JSON"))
        return s;
    return trim_blank(vsr_slice(nl + 1, (size_t)(s.p + s.len - 3 - (nl + 1))));
}

int vsr__algo_fusion_parse_analysis(vsr_slice_t content, vsr_pool_t *pool, vsr_slice_t *normalised_json)
{
    vsr_slice_t s = unfence(trim_blank(content));
    vsr_json_t j;
    static const vsr_json_limits_t lim = {32, 0};
    int rc = vsr_json_parse(&j, s.p ? s.p : "", s.len, &lim);
    if (rc != VSR_OK || vsr_json_type(&j, 0) != VSR_JSON_OBJECT) {
        vsr_json_free(&j);
        return VSR_ERR_INVALID;
    }
    vsr_buf_t b;
    vsr_buf_init(&b, 0);
    rc = VSR_OK;
    size_t items = 0;
    PUT(vsr_buf_append(&b, "{", 1));
    for (size_t k = 0; k < VSR_ARRAY_LEN(analysis_keys) && rc == VSR_OK; k++) {
        PUT(vsr_buf_printf(&b, "%s\"%s\":[", k ? "," : "", analysis_keys[k]));
        uint32_t v;
        if (vsr_json_object_get(&j, 0, analysis_keys[k], &v) == VSR_OK) {
            vsr_json_type_t t = vsr_json_type(&j, v);
            uint32_t first = v, count = 1;
            if (t == VSR_JSON_ARRAY) {
                first = v + 1;
                count = j.toks[v].count;
            } else if (t == VSR_JSON_NULL) {
                count = 0;
            } else if (t != VSR_JSON_STRING) {
                rc = VSR_ERR_INVALID;
                break;
            }
            size_t kept = 0;
            uint32_t e = first;
            for (uint32_t i = 0; i < count && kept < 2; i++, e = j.toks[e].next) {
                vsr_slice_t str;
                if (vsr_json_type(&j, e) != VSR_JSON_STRING || vsr_json_string(&j, e, pool, &str) != VSR_OK)
                    continue;
                PUT(vsr_buf_append(&b, ",", kept ? 1 : 0));
                PUT(vsr_buf_append_json_string(&b, str));
                kept++;
            }
            items += kept;
        }
        PUT(vsr_buf_append(&b, "]", 1));
    }
    PUT(vsr_buf_append(&b, "}", 1));
    vsr_json_free(&j);
    if (rc == VSR_OK && items == 0)
        rc = VSR_ERR_INVALID;
    if (rc == VSR_OK)
        *normalised_json = vsr_pool_dup_slice(pool, vsr_buf_slice(&b));
    vsr_buf_free(&b);
    return rc;
}
