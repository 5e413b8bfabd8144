/*
 * graph_workflows.c — looper.workflows (Router Flow, ref §3.7) as a graph:
 *
 *   [call (planner: dynamic mode)]; loop over waves { parallel (every step
 *   whose access_list is done, at most max_parallel at once) }; call (final,
 *   the final hop); respond
 *
 * Static mode runs the configured roles; dynamic mode asks the planner for
 * {"steps":[{"id","role","models","prompt","access_list"}],"final":{"prompt"}}
 * and runs that, at most max_steps steps; an answer that is not such a plan
 * falls back to the built-in plan (the configured roles, else one step that
 * answers the request).  A step with several models (a role's `models`, a
 * planned step's) calls each of them with its prompt, in the same wave, as
 * the reference does; each call is an entry of steps[] under the step's id.
 * A step sees the conversation plus the outputs of the steps its access_list
 * names, every model's (only earlier steps: a name of a later or unknown step
 * is ignored, so the waves always progress).
 */
#include <string.h>

#include "graph/graph-int.h"

#define FLOW_MAX_STEPS 32               /* the bound of workflows.max_steps (and so of roles[] run) */
#define FLOW_MAX_CALLS VSR_FLOW_MAX_CALLS /* steps[]: the steps' calls, every model of a step counted */

typedef struct {
    const char *id;
    size_t ref;
    vsr_slice_t prompt;
    uint8_t deps[FLOW_MAX_CALLS];  /* entries of steps[] whose outputs it sees */
    size_t n_deps;
    int started, done;
    const result_t *res;
} step_t;

typedef struct {
    const vsr_algo_workflows_conf_t *c;
    step_t steps[FLOW_MAX_CALLS];
    size_t n_steps;
    vsr_slice_t final_prompt;
    size_t final_ref;
    size_t wave[FLOW_MAX_CALLS];   /* this wave's steps, by slot */
    size_t n_wave;
    node_t *planner, *steps_node, *final;
} flow_t;

static void add_step(vsr_graph_run_t *r, flow_t *t, const char *id, size_t ref, vsr_slice_t prompt,
                     const char *const *access, size_t n_access)
{
    if (t->n_steps >= FLOW_MAX_CALLS)
        return;
    step_t *s = &t->steps[t->n_steps];
    memset(s, 0, sizeof(*s));
    s->id = id;
    s->ref = ref;
    s->prompt = vsr_pool_dup_slice(r->pool, prompt);
    for (size_t i = 0; i < n_access; i++)
        for (size_t k = 0; k < t->n_steps; k++)
            if (access[i] && !strcmp(t->steps[k].id, access[i]) && s->n_deps < FLOW_MAX_CALLS)
                s->deps[s->n_deps++] = (uint8_t)k;
    t->n_steps++;
}

static void static_plan(vsr_graph_run_t *r, flow_t *t)
{
    t->n_steps = 0;
    for (size_t i = 0; i < t->c->n_roles && i < t->c->max_steps; i++) {
        const vsr_algo_flow_step_conf_t *ro = &t->c->roles[i];
        size_t n = ro->models.n ? ro->models.n : 1;
        for (size_t m = 0; m < n; m++) {
            const char *model = ro->models.n ? ro->models.items[m] : ro->model;
            size_t ref = 0;
            if (model && vsr__graph_ref_index(r, model, &ref) != VSR_OK)
                ref = 0;
            add_step(r, t, ro->name, ref, vsr_slice_cstr(ro->prompt ? ro->prompt : ""),
                     (const char *const *)ro->access_list.items, ro->access_list.n);
        }
    }
    if (t->n_steps == 0)
        add_step(r, t, "answer", 0, VSR_SLICE_LIT("Answer the request above as well as you can."), NULL, 0);
}

/* ---- dynamic mode: the planner ---- */

#define PLANNER_PROMPT                                                                                           \
    "Plan how to answer the request above with a small workflow of steps run by language models. Reply with "  \
    "only a JSON object: {\"steps\":[{\"id\":\"short_name\",\"role\":\"what this step is\",\"models\":[\"one of: " \
    "%s\"],\"prompt\":\"the step's instructions\",\"access_list\":[\"ids of earlier steps whose output it "    \
    "needs\"]}],\"final\":{\"prompt\":\"how to combine the steps' outputs into the answer\"}}. Use at most %llu " \
    "steps."

static int planner_prepare(vsr_graph_run_t *r, const node_t *n, size_t slot, slot_t *s)
{
    VSR_UNUSED(n);
    VSR_UNUSED(slot);
    flow_t *t = r->t;
    vsr_buf_t names, p;
    vsr_buf_init(&names, 0);
    vsr_buf_init(&p, 0);
    for (size_t i = 0; i < r->o.decision->n_model_refs && i < r->n_refs; i++)
        vsr_buf_printf(&names, "%s%s", i ? ", " : "", r->refs[i].name);
    vsr_buf_printf(&p, PLANNER_PROMPT, names.data ? names.data : "", (unsigned long long)t->c->max_steps);
    size_t ref = 0;
    if (t->c->planner_model && vsr__graph_ref_index(r, t->c->planner_model, &ref) != VSR_OK)
        ref = 0;
    s->ref = ref;
    s->messages = vsr__graph_messages_append_user(r, vsr_slice(NULL, 0), vsr_buf_slice(&p));
    s->max_completion_tokens = t->c->planner_max_completion_tokens;
    s->strip_tools = 1;
    vsr_buf_free(&names);
    vsr_buf_free(&p);
    return VSR_OK;
}

static vsr_slice_t str_of(vsr_graph_run_t *r, const vsr_json_t *j, uint32_t obj, const char *key)
{
    uint32_t v;
    vsr_slice_t s = {0};
    if (vsr_json_object_get(j, obj, key, &v) == VSR_OK && vsr_json_type(j, v) == VSR_JSON_STRING)
        vsr_json_string(j, v, r->pool, &s);
    return s;
}

static void planner_result(vsr_graph_run_t *r, const node_t *n, result_t *res)
{
    VSR_UNUSED(n);
    flow_t *t = r->t;
    if (res->status != VSR_OK)
        return; /* the built-in plan stays */
    vsr_slice_t c = res->c.content;
    while (c.len && (c.p[0] == ' ' || c.p[0] == '\n' || c.p[0] == '`'))
        c.p++, c.len--;
    if (c.len >= 4 && !memcmp(c.p, "json", 4))
        c.p += 4, c.len -= 4;
    while (c.len && (c.p[c.len - 1] == ' ' || c.p[c.len - 1] == '\n' || c.p[c.len - 1] == '`'))
        c.len--;
    vsr_json_t j;
    vsr_json_limits_t lim = {.max_depth = 16, .max_tokens = 4096};
    uint32_t steps;
    if (vsr_json_parse(&j, c.p, c.len, &lim) != VSR_OK || vsr_json_type(&j, 0) != VSR_JSON_OBJECT ||
        vsr_json_object_get(&j, 0, "steps", &steps) != VSR_OK || vsr_json_type(&j, steps) != VSR_JSON_ARRAY ||
        j.toks[steps].count == 0) {
        vsr_json_free(&j);
        return;
    }
    flow_t plan = *t;
    plan.n_steps = 0;
    size_t planned = 0;
    uint32_t e = steps + 1;
    for (uint32_t i = 0; i < j.toks[steps].count && planned < t->c->max_steps; i++, e = j.toks[e].next) {
        if (vsr_json_type(&j, e) != VSR_JSON_OBJECT)
            continue;
        vsr_slice_t id = str_of(r, &j, e, "id"), prompt = str_of(r, &j, e, "prompt"), role = str_of(r, &j, e, "role");
        if (id.len == 0 || prompt.len == 0)
            continue;
        size_t refs[VSR_FLOW_ROLE_MAX_MODELS], n_refs = 0; /* its models: only the decision's, each once */
        uint32_t models;
        if (vsr_json_object_get(&j, e, "models", &models) == VSR_OK && vsr_json_type(&j, models) == VSR_JSON_ARRAY) {
            uint32_t mi = models + 1;
            for (uint32_t q = 0; q < j.toks[models].count && n_refs < VSR_FLOW_ROLE_MAX_MODELS;
                 q++, mi = j.toks[mi].next) {
                if (vsr_json_type(&j, mi) != VSR_JSON_STRING)
                    continue;
                vsr_slice_t m;
                vsr_json_string(&j, mi, r->pool, &m);
                char *name = vsr_pool_strndup(r->pool, m.p, m.len);
                size_t k, have = 0;
                for (k = 0; k < r->o.decision->n_model_refs && k < r->n_refs; k++)
                    if (!strcmp(r->refs[k].name, name) || !strcmp(r->refs[k].model->name, name))
                        break;
                if (k == r->o.decision->n_model_refs || k == r->n_refs)
                    continue;
                while (have < n_refs && refs[have] != k)
                    have++;
                if (have == n_refs)
                    refs[n_refs++] = k;
            }
        }
        if (n_refs == 0)
            refs[n_refs++] = 0;
        const char *access[FLOW_MAX_CALLS];
        size_t n_access = 0;
        uint32_t al;
        if (vsr_json_object_get(&j, e, "access_list", &al) == VSR_OK && vsr_json_type(&j, al) == VSR_JSON_ARRAY) {
            uint32_t a = al + 1;
            for (uint32_t k = 0; k < j.toks[al].count; k++, a = j.toks[a].next)
                if (vsr_json_type(&j, a) == VSR_JSON_STRING && n_access < FLOW_MAX_CALLS) {
                    vsr_slice_t s;
                    vsr_json_string(&j, a, r->pool, &s);
                    access[n_access++] = vsr_pool_strndup(r->pool, s.p, s.len);
                }
        }
        vsr_buf_t p;
        vsr_buf_init(&p, 0);
        if (role.len)
            vsr_buf_printf(&p, "Your role: %.*s\n", (int)role.len, role.p);
        vsr_buf_append_slice(&p, prompt);
        const char *sid = vsr_pool_strndup(r->pool, id.p, id.len);
        for (size_t k = 0; k < n_refs; k++)
            add_step(r, &plan, sid, refs[k], vsr_buf_slice(&p), access, n_access);
        planned++;
        vsr_buf_free(&p);
    }
    uint32_t fin, fp;
    if (vsr_json_object_get(&j, 0, "final", &fin) == VSR_OK && vsr_json_type(&j, fin) == VSR_JSON_OBJECT &&
        vsr_json_object_get(&j, fin, "prompt", &fp) == VSR_OK && vsr_json_type(&j, fp) == VSR_JSON_STRING) {
        vsr_slice_t s;
        vsr_json_string(&j, fp, r->pool, &s);
        plan.final_prompt = vsr_pool_dup_slice(r->pool, s);
    }
    vsr_json_free(&j);
    if (plan.n_steps)
        *t = plan;
}

/* ---- the steps ---- */

static size_t steps_count(vsr_graph_run_t *r, const node_t *n)
{
    VSR_UNUSED(n);
    flow_t *t = r->t;
    t->n_wave = 0;
    for (size_t i = 0; i < t->n_steps; i++) {
        step_t *s = &t->steps[i];
        int ready = !s->started;
        for (size_t k = 0; k < s->n_deps && ready; k++)
            ready = t->steps[s->deps[k]].done;
        if (ready) {
            s->started = 1;
            t->wave[t->n_wave++] = i;
        }
    }
    return t->n_wave;
}

static void append_outputs(vsr_graph_run_t *r, vsr_buf_t *b, const uint8_t *idx, size_t n)
{
    flow_t *t = r->t;
    for (size_t i = 0; i < n; i++) {
        const step_t *s = &t->steps[idx[i]];
        if (s->res == NULL)
            continue;
        vsr_buf_printf(b, "\n\nOutput of step \"%s\" (%s):\n", s->id, r->refs[s->res->ref].name);
        vsr_buf_append_slice(b, s->res->c.content);
    }
}

static int steps_prepare(vsr_graph_run_t *r, const node_t *n, size_t slot, slot_t *out)
{
    VSR_UNUSED(n);
    flow_t *t = r->t;
    step_t *s = &t->steps[t->wave[slot]];
    vsr_buf_t p;
    vsr_buf_init(&p, 0);
    vsr_buf_printf(&p, "You are step \"%s\" of a workflow answering the request above.\n", s->id);
    vsr_buf_append_slice(&p, s->prompt);
    append_outputs(r, &p, s->deps, s->n_deps);
    out->ref = s->ref;
    out->messages = vsr__graph_messages_append_user(r, vsr_slice(NULL, 0), vsr_buf_slice(&p));
    vsr_buf_free(&p);
    out->has_temperature = t->c->has_temperature;
    out->temperature = t->c->temperature;
    out->max_completion_tokens = t->c->max_completion_tokens;
    out->timeout_ms = t->c->round_timeout_ms;
    return VSR_OK;
}

static void steps_result(vsr_graph_run_t *r, const node_t *n, result_t *res)
{
    VSR_UNUSED(n);
    flow_t *t = r->t;
    step_t *s = &t->steps[t->wave[res->slot]];
    s->done = 1;
    if (res->status == VSR_OK)
        s->res = res;
}

static int steps_until(vsr_graph_run_t *r, const node_t *n, size_t rounds)
{
    VSR_UNUSED(n);
    VSR_UNUSED(rounds);
    flow_t *t = r->t;
    for (size_t i = 0; i < t->n_steps; i++)
        if (!t->steps[i].started)
            return 0;
    return 1;
}

#define FINAL_PROMPT \
    "Using the outputs of the workflow's steps below, write the final answer to the request above. Reply with " \
    "only that answer."

static int final_prepare(vsr_graph_run_t *r, const node_t *n, size_t slot, slot_t *out)
{
    VSR_UNUSED(n);
    VSR_UNUSED(slot);
    flow_t *t = r->t;
    uint8_t all[FLOW_MAX_CALLS];
    size_t ok = 0;
    for (size_t i = 0; i < t->n_steps; i++) {
        all[i] = (uint8_t)i;
        ok += t->steps[i].res != NULL;
    }
    if (ok < t->c->min_successful_responses) { /* under on_error: skip, the steps that must have worked */
        vsr__graph_fail(r, 502, "server_error", "looper_quorum",
                        "workflows: %zu of %zu step calls succeeded, %llu needed (min_successful_responses)", ok,
                        t->n_steps, (unsigned long long)t->c->min_successful_responses);
        return VSR_DECLINED;
    }
    vsr_buf_t p;
    vsr_buf_init(&p, 0);
    if (t->final_prompt.len)
        vsr_buf_append_slice(&p, t->final_prompt);
    else
        vsr_buf_append_cstr(&p, FINAL_PROMPT);
    append_outputs(r, &p, all, t->n_steps);
    out->ref = t->final_ref;
    out->messages = vsr__graph_messages_append_user(r, vsr_slice(NULL, 0), vsr_buf_slice(&p));
    vsr_buf_free(&p);
    out->has_temperature = t->c->has_temperature;
    out->temperature = t->c->temperature;
    out->max_completion_tokens = t->c->max_completion_tokens;
    out->final_hop = 1;
    return VSR_OK;
}

static void flow_respond(vsr_graph_run_t *r, const node_t *n)
{
    VSR_UNUSED(n);
    flow_t *t = r->t;
    const result_t *fin = NULL;
    for (size_t i = r->n_results; i-- > 0 && !fin;)
        if (r->results[i].node == t->final && r->results[i].status == VSR_OK)
            fin = &r->results[i];
    if (fin == NULL) {
        vsr__graph_fail(r, 502, "server_error", "looper_synthesis_failed", "workflows: the final call failed");
        return;
    }
    vsr_slice_t extra = vsr_slice(NULL, 0);
    if (t->c->include_intermediate_responses) {
        vsr_buf_t b;
        vsr_buf_init(&b, 0);
        vsr_buf_append_cstr(&b, "\"workflow_steps\":[");
        int first = 1;
        for (size_t i = 0; i < t->n_steps; i++) {
            const step_t *s = &t->steps[i];
            if (s->res == NULL)
                continue;
            vsr_buf_append_cstr(&b, first ? "{\"id\":" : ",{\"id\":");
            vsr_buf_append_json_string(&b, vsr_slice_cstr(s->id));
            vsr_buf_append_cstr(&b, ",\"model\":");
            vsr_buf_append_json_string(&b, vsr_slice_cstr(r->refs[s->res->ref].name));
            vsr_buf_append_cstr(&b, ",\"content\":");
            vsr_buf_append_json_string(&b, s->res->c.content);
            vsr_buf_append_cstr(&b, "}");
            first = 0;
        }
        vsr_buf_append_cstr(&b, "]");
        extra = vsr_pool_dup_slice(r->pool, vsr_buf_slice(&b));
        vsr_buf_free(&b);
    }
    vsr__graph_answer_completion(r, fin, extra);
}

int vsr__graph_tpl_workflows(vsr_graph_run_t *r, const char **why)
{
    const vsr_algo_workflows_conf_t *c = &r->algo->u.workflows;
    flow_t *t = vsr_pool_alloc(r->pool, sizeof(*t));
    memset(t, 0, sizeof(*t));
    t->c = c;
    r->t = t;
    static_plan(r, t);
    if (c->final_prompt)
        t->final_prompt = vsr_slice_cstr(c->final_prompt);
    if (c->final_model && vsr__graph_ref_index(r, c->final_model, &t->final_ref) != VSR_OK) {
        *why = "workflows.final.model names no model";
        return VSR_ERR_INVALID;
    }
    node_t *planner = NULL;
    if (c->dynamic) {
        planner = vsr__graph_node(r, N_CALL, "planner");
        planner->prepare = planner_prepare;
        planner->on_result = planner_result;
        planner->soft = 1; /* the built-in plan */
    }
    node_t *steps = vsr__graph_node(r, N_PARALLEL, "steps");
    steps->count = steps_count;
    steps->prepare = steps_prepare;
    steps->on_result = steps_result;
    steps->max_concurrency = c->max_parallel;
    steps->fail_fast = c->on_error_fail;
    steps->soft = !c->on_error_fail;
    node_t *waves = vsr__graph_node(r, N_LOOP, "waves");
    waves->max_rounds = FLOW_MAX_STEPS;
    waves->until = steps_until;
    vsr__graph_kids(r, waves, 1, steps);
    node_t *final = vsr__graph_node(r, N_CALL, "final");
    final->prepare = final_prepare;
    final->soft = 1;
    t->final = final;
    node_t *resp = vsr__graph_node(r, N_RESPOND, "respond");
    resp->respond = flow_respond;
    node_t *root = vsr__graph_node(r, N_SEQ, "looper.workflows");
    vsr__graph_kids(r, root, 4, planner, waves, final, resp);
    r->root = root;
    return VSR_OK;
}
