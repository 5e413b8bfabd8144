/* stream_usage.c — what the gateway reads from a streamed (SSE) response
 * while relaying it: the number of events, and the token counts of the
 * final usage object (chat and completions: a top-level "usage" with
 * prompt_tokens/completion_tokens; responses: response.usage with
 * input_tokens/output_tokens; Anthropic's Messages: message_start's
 * message.usage, then message_delta's usage with output_tokens alone).  Only events that mention "usage" are
 * parsed as JSON; a stream vsr cannot parse is relayed all the same. */
#include "gateway/gateway-int.h"

#define MAX_EVENT (64 * 1024) /* bytes of one event's line or data kept: a longer one ends the reading, so a
                               * stream costs at most about twice this much memory */

static int read_count(const vsr_json_t *j, uint32_t obj, const char *a, const char *b, uint64_t *out)
{
    uint32_t t;
    double d;
    if ((vsr_json_object_get(j, obj, a, &t) == VSR_OK || vsr_json_object_get(j, obj, b, &t) == VSR_OK) &&
        vsr_json_type(j, t) == VSR_JSON_NUMBER && vsr_json_number(j, t, &d) == VSR_OK && d >= 0 && d < 1e15) {
        *out = (uint64_t)d;
        return 1;
    }
    return 0;
}

static int on_event(void *ud, vsr_slice_t type, vsr_slice_t data, vsr_slice_t id)
{
    stream_usage_t *u = ud;
    if (data.len < 8 || vsr_find(data.p, data.len, "\"usage\"", 7) == NULL)
        return VSR_OK;
    vsr_json_t j;
    if (vsr_json_parse(&j, data.p, data.len, NULL) == VSR_OK && vsr_json_type(&j, 0) == VSR_JSON_OBJECT) {
        uint32_t usage, resp;
        int found = vsr_json_object_get(&j, 0, "usage", &usage) == VSR_OK;
        if (!found && ((vsr_json_object_get(&j, 0, "response", &resp) == VSR_OK) ||
                       vsr_json_object_get(&j, 0, "message", &resp) == VSR_OK) &&
            vsr_json_type(&j, resp) == VSR_JSON_OBJECT)
            found = vsr_json_object_get(&j, resp, "usage", &usage) == VSR_OK;
        uint64_t p = 0, c = 0;
        if (found && vsr_json_type(&j, usage) == VSR_JSON_OBJECT) {
            int has_p = read_count(&j, usage, "prompt_tokens", "input_tokens", &p);
            if (read_count(&j, usage, "completion_tokens", "output_tokens", &c) && (has_p || u->has_usage)) {
                if (has_p) /* message_delta's usage may leave the prompt out: message_start's stands */
                    u->prompt_tokens = p;
                u->completion_tokens = c;
                u->has_usage = 1;
            }
        }
    }
    vsr_json_free(&j);
    return VSR_OK;
}

static const vsr_sse_callbacks_t usage_cbs = {on_event};

int vsr__usage_of_json(const char *p, size_t n, uint64_t *prompt, uint64_t *completion)
{
    vsr_json_t j;
    int ok = 0;
    uint32_t usage;
    if (vsr_json_parse(&j, p, n, NULL) == VSR_OK && vsr_json_type(&j, 0) == VSR_JSON_OBJECT &&
        vsr_json_object_get(&j, 0, "usage", &usage) == VSR_OK && vsr_json_type(&j, usage) == VSR_JSON_OBJECT)
        ok = read_count(&j, usage, "prompt_tokens", "input_tokens", prompt) &&
             read_count(&j, usage, "completion_tokens", "output_tokens", completion);
    vsr_json_free(&j);
    return ok;
}

stream_usage_t *vsr__usage_new(void)
{
    stream_usage_t *u = vsr_calloc(1, sizeof(*u));
    vsr_sse_init(&u->parser, MAX_EVENT, &usage_cbs, u);
    return u;
}

void vsr__usage_feed(stream_usage_t *u, const char *p, size_t n)
{
    if (u->parser._dead)
        return;
    if (vsr_sse_feed(&u->parser, p, n) != VSR_OK)
        vsr_log_debug("gateway", "event stream not read past an over-long line or event; relayed as is");
}

void vsr__usage_free(stream_usage_t *u)
{
    if (u == NULL)
        return;
    vsr_sse_free(&u->parser);
    vsr_free(u);
}
