/*
 * hcheck.c — the hallucination plugin's pure parts (ref §2.3): the grounding
 * context of a request, the detector's request (the reference's prompt and
 * strict JSON schema) and the reading of its answer, the warning texts, and
 * the answer with a warning put before every choice's content.  The wait
 * on the detector is the session's, through its model-call port (session.c).
 *
 * Bounds: the detector gets at most HC_MAX_CONTEXT bytes of context,
 * HC_MAX_QUESTION of question and HC_MAX_ANSWER of answer (each cut on a
 * character boundary); at most VSR__HC_MAX_SPANS spans are kept and each
 * must be a substring of the answer.
 */
#include "routing/routing-int.h"

#include <stdio.h>

#define HC_MAX_CONTEXT (64u << 10)
#define HC_MAX_QUESTION (16u << 10)
#define HC_MAX_ANSWER (64u << 10)

const char *const vsr__hc_result_names[] = {"",
                                            "detected",
                                            "not_detected",
                                            "context_unavailable",
                                            "evaluation_failed",
                                            "not_enforced_streaming"};

#define HC_CATEGORIES "\"contradiction\",\"fabricated_reference\",\"unsupported_addition\""
#define HC_SUBCATEGORIES                                                                                            \
    "\"entity\",\"temporal\",\"numerical\",\"value\",\"relational\",\"identifier\",\"section\",\"attribute\","      \
    "\"claim\",\"behavior\",\"elaboration\",\"subjective\",\"unspecified\""

#define HC_PROMPT_HEAD                                                                                              \
    "You are an expert annotator who identifies hallucinated spans in a generated answer with respect to a given "  \
    "context (the only trusted evidence). A hallucinated span is a substring of the answer that is not supported "  \
    "by the context. Spans consistent with the context are not hallucinations.\n\nQuote each hallucinated span "   \
    "verbatim from the answer and classify it into exactly one category and one subcategory"
#define HC_PROMPT_BODY                                                                                              \
    ".\n\nCategories (the kinds of unsupported span):\n"                                                           \
    "- contradiction: conflicts with the context (a wrong value, number, date, name, or relationship)\n"           \
    "- fabricated_reference: an entity, name, identifier, or section that is absent from the context\n"            \
    "- unsupported_addition: a claim, detail, or behavior the context never states\n\nSubcategories:\n"            \
    "- entity: a wrong or invented name, entity, or object\n"                                                      \
    "- temporal: an incorrect date, time, duration, or ordering\n"                                                 \
    "- numerical: an incorrect number, quantity, or amount\n"                                                      \
    "- value: a wrong value, setting, or attribute value\n"                                                        \
    "- relational: an incorrect relationship or association between things\n"                                     \
    "- identifier: an invented identifier or name not found in the context\n"                                      \
    "- section: a reference to a section, part, or location that does not exist\n"                                 \
    "- attribute: an invented or incorrect attribute or property\n"                                                \
    "- claim: an added factual claim the context does not support\n"                                               \
    "- behavior: an added or changed action or behavior the context never states\n"                                \
    "- elaboration: extra detail or elaboration beyond what the context supports\n"                                \
    "- subjective: an unsupported subjective or evaluative statement\n"                                            \
    "- unspecified: unsupported, with no more specific subtype\n\n"                                                \
    "Reply with ONLY a JSON object (no markdown, no code fences): {\"hallucinated_spans\": [{\"text\": \"...\", "  \
    "\"category\": \"...\", \"subcategory\": \"...\""
#define HC_PROMPT_TAIL "}]}. If nothing is unsupported, reply {\"hallucinated_spans\": []}."

/* s cut to at most max bytes on a character boundary. */
static vsr_slice_t cut(vsr_slice_t s, size_t max)
{
    if (s.len <= max)
        return s;
    size_t n = max;
    while (n > 0 && ((unsigned char)s.p[n] & 0xC0) == 0x80)
        n--;
    return vsr_slice(s.p, n);
}

vsr_slice_t vsr__hc_context(const vsr_chat_view_t *chat, vsr_slice_t rag_context, vsr_pool_t *pool)
{
    if (rag_context.len) /* what the rag plugin injected: the retrieved documents */
        return cut(rag_context, HC_MAX_CONTEXT);
    vsr_buf_t b;
    vsr_buf_init(&b, HC_MAX_CONTEXT + 2);
    for (size_t i = 0; chat && i < chat->n_messages; i++) {
        const vsr_chat_message_t *m = &chat->messages[i];
        if (m->role != VSR_ROLE_TOOL || m->text.len == 0)
            continue;
        if (b.len)
            vsr_buf_append_cstr(&b, "\n\n");
        vsr_buf_append_slice(&b, cut(m->text, HC_MAX_CONTEXT - VSR_MIN(b.len, (size_t)HC_MAX_CONTEXT)));
        if (b.len >= HC_MAX_CONTEXT)
            break;
    }
    vsr_slice_t out = vsr_pool_dup_slice(pool, cut(vsr_buf_slice(&b), HC_MAX_CONTEXT));
    vsr_buf_free(&b);
    return out;
}

void vsr__hc_request(vsr_buf_t *out, const char *model_id, int explain, vsr_slice_t context, vsr_slice_t question,
                     vsr_slice_t answer)
{
    vsr_buf_append_cstr(out, "{\"model\":");
    vsr_buf_append_json_string(out, vsr_slice_cstr(model_id ? model_id : ""));
    vsr_buf_append_cstr(out, ",\"temperature\":0,\"stream\":false,\"messages\":[{\"role\":\"system\",\"content\":");
    vsr_buf_append_json_string(out, explain ? VSR_SLICE_LIT(HC_PROMPT_HEAD ", and give a short explanation of why "
                                                                           "it is unsupported" HC_PROMPT_BODY
                                                                           ", \"explanation\": \"...\"" HC_PROMPT_TAIL)
                                            : VSR_SLICE_LIT(HC_PROMPT_HEAD HC_PROMPT_BODY HC_PROMPT_TAIL));
    vsr_buf_t u;
    vsr_buf_init(&u, 0);
    vsr_buf_append_cstr(&u, "User request: ");
    vsr_buf_append_slice(&u, cut(question, HC_MAX_QUESTION));
    vsr_buf_append_cstr(&u, "\n\nExcerpt 1:\n");
    vsr_buf_append_slice(&u, cut(context, HC_MAX_CONTEXT));
    vsr_buf_append_cstr(&u, "\n\nAnswer to verify:\n");
    vsr_buf_append_slice(&u, cut(answer, HC_MAX_ANSWER));
    vsr_buf_append_cstr(out, "},{\"role\":\"user\",\"content\":");
    vsr_buf_append_json_string(out, vsr_buf_slice(&u));
    vsr_buf_free(&u);
    vsr_buf_append_cstr(out, "}],\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{"
                             "\"name\":\"hallucination_detection\",\"schema\":{\"type\":\"object\",\"properties\":{"
                             "\"hallucinated_spans\":{\"type\":\"array\",\"items\":{\"type\":\"object\",\"properties\":{"
                             "\"text\":{\"type\":\"string\"},"
                             "\"category\":{\"type\":\"string\",\"enum\":[" HC_CATEGORIES "]},"
                             "\"subcategory\":{\"type\":\"string\",\"enum\":[" HC_SUBCATEGORIES "]}");
    if (explain)
        vsr_buf_append_cstr(out, ",\"explanation\":{\"type\":\"string\"}");
    vsr_buf_append_cstr(out, "},\"required\":[\"text\",\"category\",\"subcategory\"");
    if (explain)
        vsr_buf_append_cstr(out, ",\"explanation\"");
    vsr_buf_append_cstr(out, "],\"additionalProperties\":false}}},\"required\":[\"hallucinated_spans\"],"
                             "\"additionalProperties\":false},\"strict\":true}}}");
}

/* The value of a string member, lower-cased and trimmed, in a set ("" when not). */
static int in_set(const vsr_json_t *j, uint32_t o, const char *key, const char *const *set, vsr_pool_t *pool)
{
    uint32_t t;
    vsr_slice_t s;
    if (vsr_json_object_get(j, o, key, &t) != VSR_OK || vsr_json_type(j, t) != VSR_JSON_STRING ||
        vsr_json_string(j, t, pool, &s) != VSR_OK)
        return 0;
    s = vsr_slice_trim(s);
    for (size_t i = 0; set[i]; i++)
        if (vsr_slice_case_eq_cstr(s, set[i]))
            return 1;
    return 0;
}

int vsr__hc_parse(vsr_slice_t body, vsr_slice_t answer, vsr_pool_t *pool, vsr__hc_span_t *spans, size_t *n)
{
    static const char *const categories[] = {"contradiction", "fabricated_reference", "unsupported_addition", NULL};
    static const char *const subcategories[] = {"entity",    "temporal",   "numerical",   "value",      "relational",
                                                "identifier", "section",   "attribute",   "claim",      "behavior",
                                                "elaboration", "subjective", "unspecified", NULL};
    *n = 0;
    vsr_json_t j, c;
    memset(&j, 0, sizeof(j));
    memset(&c, 0, sizeof(c));
    int rc = VSR_ERR_INVALID;
    uint32_t ch, msg, ct, arr;
    vsr_slice_t content;
    if (vsr_json_parse(&j, body.p ? body.p : "", body.len, NULL) != VSR_OK || vsr_json_type(&j, 0) != VSR_JSON_OBJECT ||
        vsr_json_object_get(&j, 0, "choices", &ch) != VSR_OK || vsr_json_type(&j, ch) != VSR_JSON_ARRAY ||
        j.toks[ch].count == 0 || vsr_json_type(&j, ch + 1) != VSR_JSON_OBJECT ||
        vsr_json_object_get(&j, ch + 1, "message", &msg) != VSR_OK || vsr_json_type(&j, msg) != VSR_JSON_OBJECT ||
        vsr_json_object_get(&j, msg, "content", &ct) != VSR_OK || vsr_json_type(&j, ct) != VSR_JSON_STRING ||
        vsr_json_string(&j, ct, pool, &content) != VSR_OK)
        goto out;
    /* the detector's verdict: an object whose hallucinated_spans array is present (missing or null is a
     * schema violation, not a clean verdict) */
    if (vsr_json_parse(&c, content.p ? content.p : "", content.len, NULL) != VSR_OK ||
        vsr_json_type(&c, 0) != VSR_JSON_OBJECT || vsr_json_object_get(&c, 0, "hallucinated_spans", &arr) != VSR_OK ||
        vsr_json_type(&c, arr) != VSR_JSON_ARRAY)
        goto out;
    size_t invalid = 0;
    uint32_t e = arr + 1;
    for (uint32_t i = 0; i < c.toks[arr].count; i++, e = c.toks[e].next) {
        uint32_t t;
        vsr_slice_t text;
        if (vsr_json_type(&c, e) != VSR_JSON_OBJECT || vsr_json_object_get(&c, e, "text", &t) != VSR_OK ||
            vsr_json_type(&c, t) != VSR_JSON_STRING || vsr_json_string(&c, t, pool, &text) != VSR_OK ||
            text.len == 0 || vsr_find(answer.p ? answer.p : "", answer.len, text.p, text.len) == NULL ||
            !in_set(&c, e, "category", categories, pool) || !in_set(&c, e, "subcategory", subcategories, pool)) {
            invalid++; /* quoted verbatim from the answer, in the taxonomy, or not a span */
            continue;
        }
        if (*n < VSR__HC_MAX_SPANS)
            spans[(*n)++].text = vsr_pool_dup_slice(pool, text);
    }
    /* spans that all failed: a malformed verdict, not a clean one */
    rc = *n == 0 && invalid ? VSR_ERR_INVALID : VSR_OK;
out:
    vsr_json_free(&j);
    vsr_json_free(&c);
    return rc;
}

vsr_slice_t vsr__hc_answer(const char *body, size_t len, vsr_pool_t *pool)
{
    vsr_json_t j;
    memset(&j, 0, sizeof(j));
    vsr_slice_t out = VSR_SLICE_NULL;
    uint32_t ch, msg, ct;
    if (vsr_json_parse(&j, body ? body : "", len, NULL) == VSR_OK && vsr_json_type(&j, 0) == VSR_JSON_OBJECT &&
        vsr_json_object_get(&j, 0, "choices", &ch) == VSR_OK && vsr_json_type(&j, ch) == VSR_JSON_ARRAY &&
        j.toks[ch].count > 0 && vsr_json_type(&j, ch + 1) == VSR_JSON_OBJECT &&
        vsr_json_object_get(&j, ch + 1, "message", &msg) == VSR_OK && vsr_json_type(&j, msg) == VSR_JSON_OBJECT &&
        vsr_json_object_get(&j, msg, "content", &ct) == VSR_OK && vsr_json_type(&j, ct) == VSR_JSON_STRING &&
        vsr_json_string(&j, ct, pool, &out) == VSR_OK)
        out = vsr_pool_dup_slice(pool, out); /* zero copy points into body otherwise */
    vsr_json_free(&j);
    return out;
}

#define HC_WARNING "[Hallucination Warning] This response may contain unsupported claims"
#define HC_VERIFY " Please verify the information independently."

vsr_slice_t vsr__hc_warning(int details, const vsr__hc_span_t *spans, size_t n, vsr_pool_t *pool)
{
    if (!details)
        return VSR_SLICE_LIT(HC_WARNING "." HC_VERIFY);
    vsr_buf_t b;
    vsr_buf_init(&b, 0);
    vsr_buf_append_cstr(&b, HC_WARNING " (confidence: 100%).");
    if (n) {
        vsr_buf_append_cstr(&b, " Unsupported spans: \"");
        for (size_t i = 0; i < n; i++) {
            if (i)
                vsr_buf_append_cstr(&b, "\", \"");
            vsr_buf_append_slice(&b, spans[i].text);
        }
        vsr_buf_append_cstr(&b, "\".");
    }
    vsr_buf_append_cstr(&b, HC_VERIFY);
    vsr_slice_t out = vsr_pool_dup_slice(pool, vsr_buf_slice(&b));
    vsr_buf_free(&b);
    return out;
}

int vsr__hc_prepend(const char *body, size_t len, vsr_slice_t warning, vsr_pool_t *pool, vsr_buf_t *out)
{
    vsr_json_t j;
    memset(&j, 0, sizeof(j));
    uint32_t ch;
    if (vsr_json_parse(&j, body ? body : "", len, NULL) != VSR_OK || vsr_json_type(&j, 0) != VSR_JSON_OBJECT ||
        vsr_json_object_get(&j, 0, "choices", &ch) != VSR_OK || vsr_json_type(&j, ch) != VSR_JSON_ARRAY) {
        vsr_json_free(&j);
        return VSR_ERR_INVALID; /* not a chat.completion: left as it is */
    }
    vsr_json_edits_t ed;
    vsr_json_edits_init(&ed);
    uint32_t c = ch + 1;
    for (uint32_t i = 0; i < j.toks[ch].count; i++, c = j.toks[c].next) {
        uint32_t msg, ct;
        vsr_slice_t s;
        if (vsr_json_type(&j, c) != VSR_JSON_OBJECT || vsr_json_object_get(&j, c, "message", &msg) != VSR_OK ||
            vsr_json_type(&j, msg) != VSR_JSON_OBJECT || vsr_json_object_get(&j, msg, "content", &ct) != VSR_OK ||
            vsr_json_type(&j, ct) != VSR_JSON_STRING || vsr_json_string(&j, ct, pool, &s) != VSR_OK)
            continue; /* a choice without string content (tool calls only) is left alone */
        vsr_buf_t v;
        vsr_buf_init(&v, 0);
        vsr_buf_append_slice(&v, warning);
        vsr_buf_append_cstr(&v, "\n\n");
        vsr_buf_append_slice(&v, s);
        vsr_buf_t q;
        vsr_buf_init(&q, 0);
        vsr_buf_append_json_string(&q, vsr_buf_slice(&v));
        vsr_json_edit_replace(&ed, &j, ct, vsr_pool_dup_slice(pool, vsr_buf_slice(&q)));
        vsr_buf_free(&v);
        vsr_buf_free(&q);
    }
    size_t n = 0;
    uint64_t total = 0;
    vsr_slice_t *pieces = vsr_json_edits_apply(&ed, body, len, pool, &n, &total);
    vsr_buf_t tmp; /* body may be out's own bytes */
    vsr_buf_init(&tmp, 0);
    for (size_t i = 0; i < n; i++)
        vsr_buf_append_slice(&tmp, pieces[i]);
    vsr_buf_reset(out);
    vsr_buf_append_slice(out, vsr_buf_slice(&tmp));
    vsr_buf_free(&tmp);
    vsr_json_edits_free(&ed);
    vsr_json_free(&j);
    return VSR_OK;
}
