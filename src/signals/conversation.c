/* conversation.c — conversation signals: facts about the request's shape,
 * as the reference's conversation evaluator.
 *
 * Sources (a count):
 *   message               messages with the given role (user, assistant, system, tool,
 *                         non_user = assistant + system + tool + developer; no role = all
 *                         of these); developer messages count at most once, as in the
 *                         reference, and messages with other roles are not counted
 *   tool_definition       entries of "tools"
 *   assistant_tool_call   assistant messages carrying tool calls
 *   assistant_tool_cycle  completed tool cycles: the tool results (tool messages) the
 *                         conversation carries, as the reference counts them
 *   active_tool_loop      1 when the conversation is inside a tool loop: the last message
 *                         is a tool result, or is an assistant message with tool calls, or
 *                         is a user message right after a tool result; else 0
 *   image_content         messages with an image part
 *   tool_choice_required  1 when tool_choice is "required" (or names a function)
 *   tool_choice_none      1 when tool_choice is "none"
 * Features: count (the source's count) or exists (1 if count > 0).
 * Match: exists -> value > 0 (a predicate is ignored); count -> every bound
 * of the predicate that is set holds, and with no predicate it always
 * matches (the reference's rule).  Confidence 1.0 on a match. */
#include <strings.h>

#include "signals/signals-int.h"

typedef enum {
    SRC_MESSAGE, SRC_TOOL_DEFINITION, SRC_ASSISTANT_TOOL_CALL, SRC_ACTIVE_TOOL_LOOP, SRC_IMAGE_CONTENT,
    SRC_TOOL_CHOICE_REQUIRED, SRC_TOOL_CHOICE_NONE, SRC_ASSISTANT_TOOL_CYCLE,
} src_t;

typedef enum { ROLE_ANY, ROLE_USER, ROLE_ASSISTANT, ROLE_SYSTEM, ROLE_DEVELOPER, ROLE_TOOL, ROLE_NON_USER } role_t;

typedef struct {
    int exists;
    src_t src;
    role_t role;
    vsr_predicate_conf_t pred;
} conv_t;

int vsr__conversation_compile(vsr_signals_t *s, const void *conf, const char *path, void **state, vsr_buf_t *err)
{
    static const char *const feats[] = {"count", "exists"};
    static const char *const srcs[] = {"message", "tool_definition", "assistant_tool_call", "active_tool_loop",
                                       "image_content", "tool_choice_required", "tool_choice_none",
                                       "assistant_tool_cycle"};
    static const char *const roles[] = {"", "user", "assistant", "system", "developer", "tool", "non_user"};
    const vsr_sig_conversation_conf_t *cc = conf;
    VSR_UNUSED(s);
    int f = vsr__signal_lookup(cc->feature_type, feats, VSR_ARRAY_LEN(feats));
    int src = vsr__signal_lookup(cc->source_type, srcs, VSR_ARRAY_LEN(srcs));
    int role = cc->role ? vsr__signal_lookup(cc->role, roles, VSR_ARRAY_LEN(roles)) : 0;
    if (f < 0) {
        vsr_buf_printf(err, "%s.feature.type: signal \"%s\": expected count or exists\n", path, cc->name);
        return VSR_ERR_INVALID;
    }
    if (src < 0) {
        vsr_buf_printf(err,
                       "%s.feature.source.type: signal \"%s\": expected message, tool_definition, assistant_tool_call, "
                       "assistant_tool_cycle, active_tool_loop, image_content, tool_choice_required or tool_choice_none\n",
                       path, cc->name);
        return VSR_ERR_INVALID;
    }
    if (role < 0) {
        vsr_buf_printf(err,
                       "%s.feature.source.role: signal \"%s\": expected user, assistant, system, developer, tool or "
                       "non_user\n",
                       path, cc->name);
        return VSR_ERR_INVALID;
    }
    conv_t *cv = vsr_calloc(1, sizeof(*cv));
    cv->exists = f == 1;
    cv->src = (src_t)src;
    cv->role = (role_t)role;
    cv->pred = cc->predicate;
    *state = cv;
    return VSR_OK;
}

static double count_messages(const vsr_chat_view_t *chat, role_t want)
{
    size_t user = 0, assistant = 0, system = 0, tool = 0, developer = 0;
    for (size_t i = 0; i < chat->n_messages; i++) {
        switch (chat->messages[i].role) {
        case VSR_ROLE_USER: user++; break;
        case VSR_ROLE_ASSISTANT: assistant++; break;
        case VSR_ROLE_SYSTEM: system++; break;
        case VSR_ROLE_TOOL: tool++; break;
        case VSR_ROLE_DEVELOPER: developer = 1; break;
        default: break;
        }
    }
    switch (want) {
    case ROLE_USER: return (double)user;
    case ROLE_ASSISTANT: return (double)assistant;
    case ROLE_SYSTEM: return (double)system;
    case ROLE_DEVELOPER: return (double)developer;
    case ROLE_TOOL: return (double)tool;
    case ROLE_NON_USER: return (double)(assistant + system + tool + developer);
    default: return (double)(user + assistant + system + tool + developer);
    }
}

static int active_tool_loop(const vsr_chat_view_t *chat)
{
    if (chat->n_messages == 0)
        return 0;
    const vsr_chat_message_t *last = &chat->messages[chat->n_messages - 1];
    if (last->role == VSR_ROLE_TOOL)
        return 1;
    if (last->role == VSR_ROLE_ASSISTANT && last->has_tool_calls)
        return 1;
    if (last->role == VSR_ROLE_USER && chat->n_messages >= 2 &&
        chat->messages[chat->n_messages - 2].role == VSR_ROLE_TOOL)
        return 1;
    return 0;
}

vsr_signal_result_t vsr__conversation_eval(vsr__ctx_t *c, const void *state)
{
    const conv_t *cv = state;
    vsr_signal_result_t r = {0};
    const vsr_chat_view_t *chat = c->in->chat;
    if (!chat)
        return r;
    double v = 0;
    switch (cv->src) {
    case SRC_MESSAGE:
        v = count_messages(chat, cv->role);
        break;
    case SRC_TOOL_DEFINITION:
        v = (double)chat->n_tools;
        break;
    case SRC_ASSISTANT_TOOL_CALL:
        for (size_t i = 0; i < chat->n_messages; i++)
            v += chat->messages[i].role == VSR_ROLE_ASSISTANT && chat->messages[i].has_tool_calls;
        break;
    case SRC_ASSISTANT_TOOL_CYCLE:
        v = count_messages(chat, ROLE_TOOL);
        break;
    case SRC_ACTIVE_TOOL_LOOP:
        v = active_tool_loop(chat);
        break;
    case SRC_IMAGE_CONTENT:
        for (size_t i = 0; i < chat->n_messages; i++)
            v += chat->messages[i].has_image;
        break;
    case SRC_TOOL_CHOICE_REQUIRED:
        v = vsr_slice_eq_cstr(chat->tool_choice, "required");
        break;
    case SRC_TOOL_CHOICE_NONE:
        v = vsr_slice_eq_cstr(chat->tool_choice, "none");
        break;
    }
    if (cv->exists)
        v = v > 0 ? 1 : 0;
    r.value = v;
    if (cv->exists) {
        r.matched = v > 0;
    } else {
        const vsr_predicate_conf_t *p = &cv->pred;
        r.matched = !(p->has_gt && !(v > p->gt)) && !(p->has_gte && !(v >= p->gte)) && !(p->has_lt && !(v < p->lt)) &&
                    !(p->has_lte && !(v <= p->lte));
    }
    r.confidence = r.matched ? 1.0 : 0.0;
    return r;
}

void vsr__conversation_free(void *state)
{
    vsr_free(state);
}
