"""Multi-model request graphs end to end (ref §3): a decision whose algorithm
is confidence, ratings, remom or fusion makes several model calls and answers
with one assembled result.  One fakellm plays every model (--model-text etc.
keyed by provider_model_id), and its call log says exactly which calls vsr
made, in which order, with which body, and whether they overlapped; the
response gives the final answer and the x-vsr-looper-* headers."""
import collections
import json
import socket
import time

import httpx
import pytest

from conftest import free_port, sse_events, wait_until

pytestmark = pytest.mark.looper

# logical name -> (provider_model_id, param_size, completion text)
MODELS = {
    "m-small": ("small-v1", "1B", "small answer"),
    "m-mid": ("mid-v1", "8B", "mid answer"),
    "m-large": ("large-v1", "70B", "large answer"),
}
PID = {name: m[0] for name, m in MODELS.items()}
TEXT = {name: m[2] for name, m in MODELS.items()}
NAME_OF = {m[0]: name for name, m in MODELS.items()}
WORDS = {name: len(t.split()) for name, t in TEXT.items()}

PROMPT = "hello looper: what is two plus two?"
CHAT = {"model": "auto", "messages": [{"role": "user", "content": PROMPT}]}
TOOLS = [{"type": "function", "function": {"name": "lookup", "description": "look a word up",
                                           "parameters": {"type": "object", "properties": {}}}}]
CC = "/v1/chat/completions"


def backend_args(logprob=None, margin=None, status=None, delay=None, missing=(), text=None):
    """fakellm flags: every model's text (or text[name]), plus per-model
    faults and logprobs, keyed by logical name."""
    args = []
    for name, (pid, _, t) in MODELS.items():
        args += ["--model-text", f"{pid}={(text or {}).get(name, t)}"]
    for flag, table in (("--model-logprob", logprob), ("--model-logprob-margin", margin),
                        ("--model-status", status), ("--model-delay-ms", delay)):
        for name, value in (table or {}).items():
            args += [flag, f"{PID[name]}={value}"]
    for name in missing:
        args += ["--model-logprobs-missing", f"{PID[name]}=1"]
    return args


def looper_doc(port, endpoint, refs, algorithm, cards=("m-large", "m-small", "m-mid"), listener_extra="",
               reliability=None):
    """One listener, the three models on one backend, cards declared out of
    size order, and one keyword decision running `algorithm` over `refs`."""
    rel = {n: f", reliability: {json.dumps(r)}" for n, r in (reliability or {}).items()}
    models = "\n".join(
        f'    - {{name: {n}, provider_model_id: {pid}, backend_refs: [{{name: b, endpoint: "{endpoint}"}}]'
        f'{rel.get(n, "")}}}'
        for n, (pid, _, _) in MODELS.items())
    card_lines = "\n".join(f"    - {{name: {n}, description: {n} model, param_size: {MODELS[n][1]}}}" for n in cards)
    ref_list = ", ".join(f"{{model: {r}}}" for r in refs)
    return f"""version: v0.3
listeners:
  - {{name: l, address: 127.0.0.1, port: {port}, timeout: 60s{listener_extra}}}
providers:
  defaults: {{model: m-small}}
  models:
{models}
routing:
  modelCards:
{card_lines}
  signals:
    keywords:
      - {{name: looper_kw, operator: OR, keywords: [looper]}}
  decisions:
    - name: multi
      rules: {{operator: AND, conditions: [{{type: keyword, name: looper_kw}}]}}
      modelRefs: [{ref_list}]
      algorithm: {json.dumps(algorithm)}
global:
  services:
    management_api: {{port: {free_port()}}}
"""


class Stack:
    def __init__(self, v, be):
        self.v, self.be = v, be
        self.url = v.url

    def ask(self, body=None, headers=None, timeout=60):
        return httpx.post(self.url + CC, json=body or CHAT, headers=headers or {}, timeout=timeout)

    def calls(self):
        """The inference calls fakellm received, in arrival order."""
        r = httpx.get(self.be.url + "/_fakellm/log", timeout=10)
        assert r.status_code == 200, r.text
        return [e for e in r.json()["entries"] if e["path"] == CC]

    def clear(self):
        assert httpx.delete(self.be.url + "/_fakellm/log", timeout=10).status_code == 200


@pytest.fixture
def looper(vsr, fakellm):
    """make(refs, algorithm, **backend faults) -> Stack.  A vsr that refuses
    the document fails the test with its own words, not a setup error."""
    def make(refs, algorithm, cards=("m-large", "m-small", "m-mid"), listener_extra="", reliability=None, **faults):
        be = fakellm("llm", args=backend_args(**faults))
        port = free_port()
        v = vsr(looper_doc(port, be.endpoint, refs, algorithm, cards, listener_extra, reliability), port=port,
                wait_ready=False)

        def ready():
            if v.proc.p.poll() is not None:
                return True
            try:
                return httpx.get(v.url + "/ready", timeout=1).status_code == 200
            except httpx.TransportError:
                return False
        wait_until(ready, timeout=20, what="vsr /ready")
        if v.proc.p.poll() is not None:
            pytest.fail("vsr did not start with the Looper configuration:\n" + v.proc.output()[-3000:])
        return Stack(v, be)
    return make


def models_of(calls):
    return [NAME_OF.get(e["model"], e["model"]) for e in calls]


def content(r):
    assert r.status_code == 200, r.text
    return r.json()["choices"][0]["message"]["content"]


def check_headers(r, algorithm, model, used, iterations, completion=None):
    h = r.headers
    assert h.get("x-vsr-response-path") == "looper", dict(h)
    assert h.get("x-vsr-looper-algorithm") == algorithm
    if model is not None:                      # None: only that it is there
        assert h.get("x-vsr-looper-model") == model
    else:
        assert h.get("x-vsr-looper-model")
    assert h.get("x-vsr-looper-models-used") == ",".join(used)
    assert h.get("x-vsr-looper-iterations") == str(iterations)
    assert int(h["x-vsr-looper-latency-ms"]) >= 0
    if completion is not None:
        prompt = int(h["x-vsr-looper-prompt-tokens"])
        assert prompt > 0
        assert int(h["x-vsr-looper-completion-tokens"]) == completion
        assert int(h["x-vsr-looper-total-tokens"]) == prompt + completion


def check_usage(r, completion):
    """The body's usage is the sum over every call: fakellm counts one
    completion token per word of the model's text."""
    u = r.json()["usage"]
    assert u["completion_tokens"] == completion
    assert u["prompt_tokens"] > 0 and u["total_tokens"] == u["prompt_tokens"] + completion
    assert int(r.headers["x-vsr-looper-prompt-tokens"]) == u["prompt_tokens"]


def check_error(r, *words):
    assert r.status_code >= 400, r.text
    err = r.json()["error"]
    assert isinstance(err["message"], str) and err["message"] and err["type"]
    for w in words:
        assert w in err["message"].lower(), err


def stream(stack, body=None, timeout=60):
    """A streamed request: (response, the JSON events, the text per choice index)."""
    r = stack.ask(dict(body or CHAT, stream=True), timeout=timeout)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/event-stream")
    events = sse_events(r.text)
    assert events and events[-1] == "[DONE]", r.text[-2000:]
    chunks = [json.loads(d) for d in events[:-1]]
    texts = collections.defaultdict(str)
    for c in chunks:
        assert c["object"] == "chat.completion.chunk"
        for ch in c.get("choices", []):
            texts[ch["index"]] += (ch.get("delta") or {}).get("content") or ""
    return r, chunks, dict(texts)


def overlapped(a, b):
    assert a["end_ms"] is not None and b["end_ms"] is not None
    return max(a["start_ms"], b["start_ms"]) < min(a["end_ms"], b["end_ms"])


CARDS_OUT_OF_ORDER = ["m-large", "m-small", "m-mid"]


# ---- confidence (ref §3.3) ---------------------------------------------------


def test_confidence_defaults_accept_the_smallest_model(looper):
    s = looper(CARDS_OUT_OF_ORDER, {"type": "confidence", "confidence": {}})
    r = s.ask()
    assert content(r) == TEXT["m-small"]
    calls = s.calls()
    # threshold -1.0: the first model by param_size (1B) is always accepted
    assert models_of(calls) == ["m-small"]
    assert calls[0]["body"]["logprobs"] is True
    assert calls[0]["body"]["stream"] is not True
    assert calls[0]["body"]["last_user"] == PROMPT
    check_headers(r, "confidence", "m-small", ["m-small"], 1, completion=WORDS["m-small"])
    check_usage(r, WORDS["m-small"])


def test_confidence_escalates_past_a_model_below_the_threshold(looper):
    # avg_logprob: clamp((mean + 3) / 3): -2.5 -> 0.17 (fails 0.5), -0.1 -> 0.97 (passes)
    s = looper(CARDS_OUT_OF_ORDER, {"type": "confidence", "confidence": {"threshold": 0.5}},
               logprob={"m-small": -2.5})
    r = s.ask()
    assert content(r) == TEXT["m-mid"]
    calls = s.calls()
    assert models_of(calls) == ["m-small", "m-mid"]
    assert calls[0]["end_ms"] <= calls[1]["start_ms"]          # one after the other
    assert all(e["body"]["logprobs"] is True for e in calls)
    assert calls[0]["body"]["messages_sha"] == calls[1]["body"]["messages_sha"]   # the original request
    used = ["m-small", "m-mid"]
    check_headers(r, "confidence", "m-mid", used, 2, completion=sum(WORDS[m] for m in used))
    check_usage(r, sum(WORDS[m] for m in used))


def test_confidence_none_passing_returns_the_last_answer(looper):
    # -0.5 -> 0.83 for every model: below 0.99
    s = looper(CARDS_OUT_OF_ORDER, {"type": "confidence", "confidence": {"threshold": 0.99}},
               logprob={"m-small": -0.5, "m-mid": -0.5, "m-large": -0.5})
    r = s.ask()
    assert content(r) == TEXT["m-large"]
    order = ["m-small", "m-mid", "m-large"]
    assert models_of(s.calls()) == order
    check_headers(r, "confidence", "m-large", order, 3, completion=sum(WORDS.values()))
    check_usage(r, sum(WORDS.values()))


def test_confidence_declared_order(looper):
    s = looper(CARDS_OUT_OF_ORDER, {"type": "confidence",
                                    "confidence": {"escalation_order": "declared", "threshold": 0.5}},
               logprob={"m-large": -2.5})
    r = s.ask()
    # modelRefs order: m-large first (fails), then m-small (passes); m-mid never called
    assert content(r) == TEXT["m-small"]
    assert models_of(s.calls()) == ["m-large", "m-small"]
    check_headers(r, "confidence", "m-small", ["m-large", "m-small"], 2)


def test_confidence_margin_method(looper):
    # margin: 1 - exp(-mean(top1 - top2) / 3): 0.3 -> 0.10 (fails the default 0.5), 3.0 -> 0.63 (passes)
    s = looper(CARDS_OUT_OF_ORDER, {"type": "confidence", "confidence": {"confidence_method": "margin"}},
               margin={"m-small": 0.3, "m-mid": 3.0, "m-large": 3.0})
    r = s.ask()
    assert content(r) == TEXT["m-mid"]
    calls = s.calls()
    assert models_of(calls) == ["m-small", "m-mid"]
    for e in calls:
        assert e["body"]["logprobs"] is True and e["body"]["top_logprobs"] == 2
    check_headers(r, "confidence", "m-mid", ["m-small", "m-mid"], 2)


def test_confidence_hybrid_method(looper):
    # hybrid: 0.5 * avg_logprob + 0.5 * margin, default threshold 0.5:
    # small 0.5 * 0.17 + 0.5 * 0.10 = 0.13 (fails); mid 0.5 * 0.97 + 0.5 * 0.28 = 0.63 (passes)
    s = looper(CARDS_OUT_OF_ORDER, {"type": "confidence", "confidence": {"confidence_method": "hybrid"}},
               logprob={"m-small": -2.5}, margin={"m-small": 0.3})
    r = s.ask()
    assert content(r) == TEXT["m-mid"]
    calls = s.calls()
    assert models_of(calls) == ["m-small", "m-mid"]
    assert all(e["body"]["logprobs"] is True and e["body"]["top_logprobs"] == 2 for e in calls)
    check_headers(r, "confidence", "m-mid", ["m-small", "m-mid"], 2)


def test_confidence_failing_small_model_is_skipped(looper):
    s = looper(CARDS_OUT_OF_ORDER, {"type": "confidence", "confidence": {"on_error": "skip"}},
               status={"m-small": 500})
    r = s.ask()
    assert content(r) == TEXT["m-mid"]
    calls = s.calls()
    assert [(m, e["outcome"]) for m, e in zip(models_of(calls), calls)] == [("m-small", "status:500"),
                                                                          ("m-mid", "ok")]
    check_headers(r, "confidence", "m-mid", ["m-small", "m-mid"], 2, completion=WORDS["m-mid"])


def test_confidence_failing_small_model_with_on_error_fail(looper):
    s = looper(CARDS_OUT_OF_ORDER, {"type": "confidence", "confidence": {"on_error": "fail"}},
               status={"m-small": 500})
    r = s.ask()
    check_error(r)
    assert models_of(s.calls()) == ["m-small"]


def test_confidence_missing_logprobs_is_an_evaluation_error(looper):
    algo = {"type": "confidence", "confidence": {"threshold": 0.5, "on_error": "skip"}}
    s = looper(CARDS_OUT_OF_ORDER, algo, missing=("m-small",))
    r = s.ask()
    # skip: the small answer cannot be scored, so the next model is asked
    assert content(r) == TEXT["m-mid"]
    assert models_of(s.calls()) == ["m-small", "m-mid"]
    check_headers(r, "confidence", "m-mid", ["m-small", "m-mid"], 2)


def test_confidence_missing_logprobs_with_on_error_fail(looper):
    algo = {"type": "confidence", "confidence": {"threshold": 0.5, "on_error": "fail"}}
    s = looper(CARDS_OUT_OF_ORDER, algo, missing=("m-small",))
    r = s.ask()
    check_error(r)
    assert models_of(s.calls()) == ["m-small"]


def test_confidence_streamed_client_makes_the_same_calls(looper):
    s = looper(CARDS_OUT_OF_ORDER, {"type": "confidence", "confidence": {"threshold": 0.5}},
               logprob={"m-small": -2.5})
    plain = s.ask()
    want = content(plain)
    plain_calls = s.calls()
    s.clear()
    r, chunks, texts = stream(s)
    assert texts == {0: want} == {0: TEXT["m-mid"]}
    calls = s.calls()
    assert models_of(calls) == models_of(plain_calls) == ["m-small", "m-mid"]
    # logprobs are needed, so the calls themselves do not stream
    for e in calls:
        assert e["body"]["stream"] is not True and e["body"]["logprobs"] is True
    assert [e["body"]["messages_sha"] for e in calls] == [e["body"]["messages_sha"] for e in plain_calls]
    check_headers(r, "confidence", "m-mid", ["m-small", "m-mid"], 2)


def test_confidence_with_one_model_is_an_ordinary_call(looper):
    # eligibility (ref §3.1): confidence and ratings need more than one modelRef
    s = looper(["m-mid"], {"type": "confidence", "confidence": {}})
    r = s.ask()
    assert content(r) == TEXT["m-mid"]
    assert models_of(s.calls()) == ["m-mid"]
    assert r.headers.get("x-vsr-response-path") != "looper"
    assert not [h for h in r.headers if h.startswith("x-vsr-looper-")]
    assert r.json()["fakellm"]["backend"] == "llm"             # the upstream's own body, relayed


def test_client_looper_headers_are_not_honoured(looper):
    # a client cannot pass for an internal hop (ref §3.2): the decision still runs its graph
    s = looper(CARDS_OUT_OF_ORDER, {"type": "confidence", "confidence": {"threshold": 0.5}},
               logprob={"m-small": -2.5})
    r = s.ask(headers={"x-vsr-looper-request": "true", "x-vsr-looper-iteration": "1",
                       "x-vsr-looper-decision": "multi", "x-vsr-looper-secret": "guess",
                       "x-vsr-internal-auth": "guess"})
    assert content(r) == TEXT["m-mid"]
    assert models_of(s.calls()) == ["m-small", "m-mid"]
    check_headers(r, "confidence", "m-mid", ["m-small", "m-mid"], 2)


def test_listener_model_allow_list_does_not_gate_hops(looper):
    # listeners[].models restricts what clients ask for, not the models a graph calls (ref §1.3)
    s = looper(CARDS_OUT_OF_ORDER, {"type": "confidence", "confidence": {"threshold": 0.99}},
               listener_extra=", models: [auto]")
    r = s.ask()
    assert content(r) == TEXT["m-large"]
    assert models_of(s.calls()) == ["m-small", "m-mid", "m-large"]
    refused = s.ask(dict(CHAT, model="m-small"))
    assert refused.status_code == 403, refused.text


# ---- ratings (ref §3.4) ------------------------------------------------------


def test_ratings_calls_every_model_concurrently(looper):
    s = looper(["m-small", "m-mid"], {"type": "ratings", "ratings": {}},
               delay={"m-small": 600, "m-mid": 600})
    r = s.ask(dict(CHAT, tools=TOOLS))
    assert r.status_code == 200, r.text
    d = r.json()
    assert d["object"] == "chat.completion"
    assert d["id"].startswith("chatcmpl-looper-")
    assert d["model"] == "m-small,m-mid"
    assert [(c["index"], c["model"], c["message"]["role"], c["message"]["content"], c["finish_reason"])
            for c in d["choices"]] == [(0, "m-small", "assistant", TEXT["m-small"], "stop"),
                                       (1, "m-mid", "assistant", TEXT["m-mid"], "stop")]
    assert d["usage"]["completion_tokens"] == WORDS["m-small"] + WORDS["m-mid"]
    calls = s.calls()
    assert sorted(models_of(calls)) == ["m-mid", "m-small"]
    assert overlapped(calls[0], calls[1])
    for e in calls:
        assert e["body"]["has_tools"] is False            # a tool-free copy of the request
        assert e["body"]["last_user"] == PROMPT
    check_headers(r, "ratings", None, ["m-small", "m-mid"], 2,
                  completion=WORDS["m-small"] + WORDS["m-mid"])


def test_ratings_skips_a_failing_member(looper):
    s = looper(["m-small", "m-mid", "m-large"], {"type": "ratings", "ratings": {"on_error": "skip"}},
               status={"m-mid": 500})
    r = s.ask()
    assert r.status_code == 200, r.text
    d = r.json()
    assert d["model"] == "m-small,m-large"
    assert [(c["index"], c["model"], c["message"]["content"]) for c in d["choices"]] == [
        (0, "m-small", TEXT["m-small"]), (1, "m-large", TEXT["m-large"])]
    assert d["usage"]["completion_tokens"] == WORDS["m-small"] + WORDS["m-large"]
    assert sorted(models_of(s.calls())) == ["m-large", "m-mid", "m-small"]
    assert r.headers["x-vsr-looper-iterations"] == "3"     # failures count


def test_ratings_on_error_fail(looper):
    s = looper(["m-small", "m-mid"], {"type": "ratings", "ratings": {"on_error": "fail"}},
               status={"m-mid": 500})
    r = s.ask()
    check_error(r)
    assert "m-mid" in models_of(s.calls())


def test_ratings_streamed(looper):
    s = looper(["m-small", "m-mid"], {"type": "ratings", "ratings": {}})
    plain = s.ask()
    assert plain.status_code == 200, plain.text
    want = {c["index"]: c["message"]["content"] for c in plain.json()["choices"]}
    s.clear()
    r, chunks, texts = stream(s)
    assert texts == want == {0: TEXT["m-small"], 1: TEXT["m-mid"]}
    assert sorted(models_of(s.calls())) == ["m-mid", "m-small"]
    assert r.headers.get("x-vsr-looper-algorithm") == "ratings"


# ---- remom (ref §3.5) --------------------------------------------------------


REMOM = {"type": "remom", "remom": {"breadth_schedule": [3], "model_distribution": "round_robin",
                                    "synthesis_model": "m-mid"}}


def test_remom_round_robin_then_synthesis(looper):
    s = looper(["m-small", "m-mid"], REMOM)
    r = s.ask()
    # the synthesis answer; the longest round-1 answer would be m-small's
    assert content(r) == TEXT["m-mid"]
    calls = s.calls()
    assert len(calls) == 4
    round1, final = calls[:3], calls[3]
    # round_robin: calls 0, 1, 2 -> modelRefs[0], [1], [0] (concurrent: any arrival order)
    assert collections.Counter(models_of(round1)) == {"m-small": 2, "m-mid": 1}
    assert models_of([final]) == ["m-mid"]
    assert all(e["end_ms"] is not None and e["end_ms"] <= final["start_ms"] for e in round1)
    for e in round1:
        assert e["body"]["last_user"] == PROMPT
        assert e["body"]["stream"] is not True
    # the last user message is replaced by the synthesis prompt, which quotes every answer
    lu = final["body"]["last_user"]
    assert lu != PROMPT and PROMPT in lu
    assert lu.count(TEXT["m-small"]) == 2 and lu.count(TEXT["m-mid"]) == 1
    assert final["body"]["n_messages"] == round1[0]["body"]["n_messages"]
    d = r.json()
    inter = d.get("reasoning_mom_responses")
    assert inter, "include_intermediate_responses defaults to true"
    dump = json.dumps(inter)
    assert TEXT["m-small"] in dump and TEXT["m-mid"] in dump
    assert d["usage"]["completion_tokens"] == 2 * WORDS["m-small"] + 2 * WORDS["m-mid"]
    h = r.headers
    assert h.get("x-vsr-response-path") == "looper" and h.get("x-vsr-looper-algorithm") == "remom"
    assert h.get("x-vsr-looper-iterations") == "4"
    assert sorted(h["x-vsr-looper-models-used"].split(",")) == ["m-mid", "m-small"]


def test_remom_without_intermediate_responses(looper):
    algo = {"type": "remom", "remom": dict(REMOM["remom"], include_intermediate_responses=False)}
    s = looper(["m-small", "m-mid"], algo)
    r = s.ask()
    assert content(r) == TEXT["m-mid"]
    assert "reasoning_mom_responses" not in r.json()
    assert len(s.calls()) == 4


def test_remom_first_only(looper):
    s = looper(["m-small", "m-mid"], {"type": "remom", "remom": {"breadth_schedule": [2],
                                                                 "model_distribution": "first_only"}})
    r = s.ask()
    assert content(r) == TEXT["m-small"]
    # two calls to the first modelRef, then its synthesis call
    assert models_of(s.calls()) == ["m-small", "m-small", "m-small"]
    assert r.headers.get("x-vsr-looper-iterations") == "3"
    assert r.headers.get("x-vsr-looper-models-used") == "m-small"


def test_remom_streamed_final_round(looper):
    s = looper(["m-small", "m-mid"], REMOM)
    r, chunks, texts = stream(s)
    assert texts == {0: TEXT["m-mid"]}
    # the final round is the routed call: it streams chunk by chunk (one word per event)
    deltas = [c["choices"][0]["delta"].get("content") for c in chunks if c.get("choices")]
    assert [d for d in deltas if d] == ["mid ", "answer"]
    calls = s.calls()
    assert len(calls) == 4
    assert all(e["body"]["stream"] is not True for e in calls[:3])
    assert calls[3]["body"]["stream"] is True and models_of(calls[3:]) == ["m-mid"]


# ---- fusion (ref §3.6) -------------------------------------------------------


def fusion(**extra):
    return {"type": "fusion", "fusion": dict({"analysis_models": ["m-small", "m-mid"], "model": "m-large"}, **extra)}


def test_fusion_panel_analysis_synthesis(looper):
    s = looper(["m-small", "m-mid", "m-large"], fusion(), delay={"m-small": 500, "m-mid": 500})
    r = s.ask()
    assert content(r) == TEXT["m-large"]
    calls = s.calls()
    assert len(calls) == 4
    panel, judge = calls[:2], calls[2:]
    assert sorted(models_of(panel)) == ["m-mid", "m-small"]
    assert models_of(judge) == ["m-large", "m-large"]
    assert overlapped(panel[0], panel[1])                 # the panel runs concurrently
    assert max(e["end_ms"] for e in panel) <= judge[0]["start_ms"]
    assert judge[0]["end_ms"] <= judge[1]["start_ms"]     # analysis, then synthesis
    # the panel gets the original request; each judge call its own prompt
    assert panel[0]["body"]["messages_sha"] == panel[1]["body"]["messages_sha"]
    assert panel[0]["body"]["last_user"] == PROMPT
    shas = {panel[0]["body"]["messages_sha"], judge[0]["body"]["messages_sha"], judge[1]["body"]["messages_sha"]}
    assert len(shas) == 3
    assert all(e["body"]["stream"] is not True for e in calls)
    used = ["m-small", "m-mid", "m-large"]
    total = WORDS["m-small"] + WORDS["m-mid"] + 2 * WORDS["m-large"]
    check_headers(r, "fusion", "m-large", used, 4, completion=total)
    check_usage(r, total)


def test_fusion_empty_templates_are_the_built_in_ones(looper):
    """The reference's own document writes analysis_template: "" and
    synthesis_template: "": the built-in prompts, as when absent."""
    def judge_prompts(**extra):
        s = looper(["m-small", "m-mid", "m-large"], fusion(**extra))
        assert content(s.ask()) == TEXT["m-large"]
        return [e["body"]["messages_sha"] for e in s.calls()[2:]]
    built_in = judge_prompts()
    assert len(built_in) == 2
    assert judge_prompts(analysis_template="", synthesis_template="") == built_in
    assert judge_prompts(analysis_template="A {{prompt}}", synthesis_template="S")[1] != built_in[1]


def test_fusion_analysis_mode_none(looper):
    s = looper(["m-small", "m-mid", "m-large"], fusion(analysis_mode="none"))
    r = s.ask()
    assert content(r) == TEXT["m-large"]
    calls = s.calls()
    assert sorted(models_of(calls[:2])) == ["m-mid", "m-small"] and models_of(calls[2:]) == ["m-large"]
    check_headers(r, "fusion", "m-large", ["m-small", "m-mid", "m-large"], 3,
                  completion=WORDS["m-small"] + WORDS["m-mid"] + WORDS["m-large"])


def test_fusion_quorum_failure(looper):
    s = looper(["m-small", "m-mid", "m-large"], fusion(min_successful_responses=2, quorum_failure_policy="fail"),
               status={"m-mid": 500})
    r = s.ask()
    check_error(r)
    calls = s.calls()
    assert sorted(models_of(calls)) == ["m-mid", "m-small"]   # the judge is never asked
    assert [e["outcome"] for e in calls if e["model"] == PID["m-mid"]] == ["status:500"]


def test_fusion_streamed_synthesis(looper):
    s = looper(["m-small", "m-mid", "m-large"], fusion())
    r, chunks, texts = stream(s)
    assert texts == {0: TEXT["m-large"]}
    deltas = [c["choices"][0]["delta"].get("content") for c in chunks if c.get("choices")]
    assert [d for d in deltas if d] == ["large ", "answer"]   # the judge's stream, chunk by chunk
    calls = s.calls()
    assert len(calls) == 4
    assert [e["body"]["stream"] is True for e in calls] == [False, False, False, True]
    assert models_of(calls[3:]) == ["m-large"]


# ---- budget and cancellation -------------------------------------------------


def test_budget_max_calls(looper):
    algo = fusion()
    algo["budget"] = {"max_calls": 1}
    s = looper(["m-small", "m-mid", "m-large"], algo)
    r = s.ask()
    check_error(r, "budget")
    assert len(s.calls()) <= 1


def test_budget_counts_retries(looper):
    # every physical exchange counts: m-small's retry spends the second call of max_calls 2
    algo = {"type": "confidence", "confidence": {"on_error": "skip"}, "budget": {"max_calls": 2}}
    s = looper(CARDS_OUT_OF_ORDER, algo, status={"m-small": 503},
               reliability={"m-small": {"retry_count": 1, "retry_on": "5xx"}})
    r = s.ask()
    check_error(r, "budget")
    assert [(m, e["outcome"]) for m, e in zip(models_of(s.calls()), s.calls())] == [
        ("m-small", "status:503"), ("m-small", "status:503")]


def test_budget_deadline(looper):
    algo = fusion()
    algo["budget"] = {"deadline": "1s"}
    s = looper(["m-small", "m-mid", "m-large"], algo, delay={"m-small": 5000, "m-mid": 5000})
    t0 = time.monotonic()
    r = s.ask()
    elapsed = time.monotonic() - t0
    assert r.status_code >= 400, r.text
    msg = r.json()["error"]["message"].lower()
    assert "deadline" in msg or "budget" in msg, msg
    assert elapsed < 4.5                                       # the deadline, not the 5 s answers
    assert sorted(models_of(s.calls())) == ["m-mid", "m-small"]


def big_chat(n):
    """CHAT with n more bytes in its prompt (the keyword stays, so the decision matches)."""
    return {"model": "auto", "messages": [{"role": "user", "content": PROMPT + " " + "x" * n}]}


def test_without_a_budget_a_graph_makes_at_most_its_implied_calls(looper):
    # 8 rounds of 8 calls imply 64 hops; without a budget block the byte budget is 64 MiB
    graph = {"root": [{"loop": {"max_rounds": 8,
                                "body": {"parallel": {"models": ["m-small", "m-mid"], "count": 8}}}}]}
    s = looper(["m-small", "m-mid"], {"type": "graph", "graph": graph})
    # 64 hops of 1.1 MiB would send 70 MiB: refused before any hop, with a client error
    r = s.ask(big_chat(1100 << 10))
    assert r.status_code == 413, r.text[:300]
    assert r.json()["error"]["code"] == "looper_request_too_large"
    assert r.json()["error"]["type"] == "invalid_request_error"
    check_error(r, "byte budget", str(64 << 20))
    assert s.calls() == []
    assert r.headers["x-vsr-looper-iterations"] == "0"
    # a request that fits makes the graph's calls, and no more than it implies
    r = s.ask(big_chat(64 << 10))
    assert r.status_code == 200, r.text
    assert len(s.calls()) == 64
    assert int(r.headers["x-vsr-looper-iterations"]) == 64


def test_budget_upstream_bytes_refuses_a_request_before_any_hop(looper):
    # remom [2] makes three hops; three times a 2 KiB request passes a 4 KiB budget
    algo = {"type": "remom", "remom": {"breadth_schedule": [2]}, "budget": {"max_upstream_bytes": 4096}}
    s = looper(["m-small"], algo)
    r = s.ask(big_chat(2000))
    assert r.status_code == 413, r.text[:300]
    assert r.json()["error"]["code"] == "looper_request_too_large"
    check_error(r, "4096")
    assert s.calls() == []
    # a small request fits
    r = s.ask()
    assert content(r) == TEXT["m-small"]
    assert len(s.calls()) == 3


def test_budget_upstream_bytes_stops_at_the_budget(looper):
    # the rounds fit; the synthesis carries both 3000-byte answers and would pass the budget: it is not sent
    algo = {"type": "remom", "remom": {"breadth_schedule": [2]}, "budget": {"max_upstream_bytes": 2500}}
    s = looper(["m-small"], algo, text={"m-small": "y" * 3000})
    r = s.ask()
    assert r.status_code == 503, r.text
    assert r.json()["error"]["code"] == "looper_budget_exhausted"
    check_error(r, "byte budget")
    calls = s.calls()
    assert len(calls) == 2
    assert all(e["body"]["stream"] is False for e in calls)
    # streamed: the final hop is not sent either
    s.clear()
    r = s.ask(dict(CHAT, stream=True))
    assert r.status_code == 503, r.text
    check_error(r, "byte budget")
    assert len(s.calls()) == 2


def test_client_disconnect_cancels_the_calls(looper):
    s = looper(["m-small", "m-mid", "m-large"], fusion(), delay={"m-small": 5000, "m-mid": 5000})
    base = s.be.stats()["connections_open"]
    body = json.dumps(CHAT).encode()
    sock = socket.create_connection(("127.0.0.1", s.v.port), timeout=10)
    try:
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\ncontent-type: application/json\r\n"
                     b"content-length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        wait_until(lambda: len(s.calls()) >= 2, timeout=10, what="both panel calls")
        time.sleep(0.3)
    finally:
        sock.close()
    # vsr drops its calls: fakellm sees their connections close, well before the 5 s answers
    wait_until(lambda: s.be.stats()["connections_open"] <= base, timeout=10, what="upstream connections closed")
    time.sleep(5.5)
    calls = s.calls()
    assert sorted(models_of(calls)) == ["m-mid", "m-small"]       # no judge call after the panel
    assert all(e["end_ms"] is None for e in calls)                 # never answered: cancelled


# ---- workflows (ref §3.7), fallback, reload -----------------------------------


def test_workflows_static_roles_run_in_waves(looper):
    algo = {"type": "workflows", "workflows": {
        "roles": [{"name": "draft", "model": "m-small", "prompt": "Draft an answer."},
                  {"name": "check", "model": "m-mid", "prompt": "Check the draft.", "access_list": ["draft"]}],
        "final": {"model": "m-large", "prompt": "Write the final answer."}}}
    s = looper(["m-small", "m-mid", "m-large"], algo)
    r = s.ask()
    assert content(r) == TEXT["m-large"]
    calls = s.calls()
    assert models_of(calls) == ["m-small", "m-mid", "m-large"]
    assert calls[0]["end_ms"] <= calls[1]["start_ms"]   # check waits for the draft it reads
    assert calls[0]["body"]["last_user"].startswith('You are step "draft"')
    assert "Check the draft." in calls[1]["body"]["last_user"]
    assert TEXT["m-small"] in calls[1]["body"]["last_user"]          # the draft's output, by access_list
    assert calls[2]["body"]["last_user"].startswith("Write the final answer.")
    assert TEXT["m-small"] in calls[2]["body"]["last_user"] and TEXT["m-mid"] in calls[2]["body"]["last_user"]
    steps = r.json()["workflow_steps"]
    assert [(x["id"], x["model"], x["content"]) for x in steps] == [
        ("draft", "m-small", TEXT["m-small"]), ("check", "m-mid", TEXT["m-mid"])]
    check_headers(r, "workflows", "m-large", ["m-small", "m-mid", "m-large"], 3,
                  completion=sum(WORDS.values()))


def test_workflows_role_with_several_models_calls_each(looper):
    # the reference's roles[].models: every model of the role answers it, in the same wave; the next role and
    # the final see each model's output
    algo = {"type": "workflows", "workflows": {
        "max_parallel": 2,
        "roles": [{"name": "patcher", "models": ["m-small", "m-mid"], "prompt": "Write a patch."},
                  {"name": "verifier", "models": ["m-large"], "prompt": "Check the patches.",
                   "access_list": ["patcher"]}],
        "final": {"model": "m-large", "prompt": "Write the final answer."}}}
    s = looper(["m-small", "m-mid", "m-large"], algo, delay={"m-small": 300, "m-mid": 300})
    r = s.ask()
    assert content(r) == TEXT["m-large"]
    calls = s.calls()
    assert sorted(models_of(calls[:2])) == ["m-mid", "m-small"]
    assert models_of(calls[2:]) == ["m-large", "m-large"]
    assert all("Write a patch." in c["body"]["last_user"] for c in calls[:2])
    assert max(c["end_ms"] for c in calls[:2]) <= calls[2]["start_ms"]   # the verifier waits for both
    assert min(c["end_ms"] for c in calls[:2]) >= max(c["start_ms"] for c in calls[:2])  # which overlapped
    verifier = calls[2]["body"]["last_user"]
    assert "Check the patches." in verifier and TEXT["m-small"] in verifier and TEXT["m-mid"] in verifier
    steps = r.json()["workflow_steps"]
    assert sorted((x["id"], x["model"]) for x in steps) == [
        ("patcher", "m-mid"), ("patcher", "m-small"), ("verifier", "m-large")]
    assert r.headers["x-vsr-looper-iterations"] == "4"


def test_algorithm_on_error_fallback_answers_from_the_first_model_ref(looper):
    # the whole panel fails: the quorum fails, and algorithm.on_error: fallback routes the request to the
    # first modelRef as an ordinary call
    s = looper(["m-small", "m-mid"], {"type": "fusion", "on_error": "fallback", "fusion": {"model": "m-mid"}},
               status={"m-small": 500, "m-mid": 500})
    s.clear()
    r = s.ask()
    assert r.status_code == 500, r.text           # the fallback call is m-small's own answer, relayed
    assert r.headers["x-vsr-response-path"] == "upstream"
    assert r.headers["x-vsr-looper-fallback"] == "true"
    assert r.headers["x-vsr-looper-models-used"] == "m-small,m-mid"
    assert models_of(s.calls()) == ["m-small", "m-mid", "m-small"]


def test_a_graph_keeps_its_snapshot_across_a_reload(looper):
    import threading
    s = looper(["m-small", "m-mid"], {"type": "fusion", "fusion": {"model": "m-mid", "analysis_mode": "none"}},
               delay={"m-small": 1500})
    out = {}
    t = threading.Thread(target=lambda: out.setdefault("r", s.ask(timeout=30)))
    t.start()
    wait_until(lambda: len(s.calls()) >= 2, timeout=10, what="the panel calls")
    # the new version routes the decision to one model, statically
    path = s.v.config_path
    text = path.read_text()
    path.write_text(text.replace('{"type": "fusion", "fusion": {"model": "m-mid", "analysis_mode": "none"}}',
                                 '{"type": "static"}'))

    def reloaded():
        r = s.ask()
        return r.headers.get("x-vsr-config-version") == "2"
    wait_until(reloaded, timeout=15, what="the new version to serve")
    t.join(30)
    r = out["r"]
    # the request that started on version 1 finished as version 1's fusion
    assert r.status_code == 200, r.text
    assert r.headers["x-vsr-config-version"] == "1"
    check_headers(r, "fusion", "m-mid", ["m-small", "m-mid"], 3)
    assert content(r) == TEXT["m-mid"]
    # and a request on version 2 is one ordinary call
    r2 = s.ask()
    assert r2.headers["x-vsr-response-path"] == "upstream" and content(r2) == TEXT["m-small"]


# ---- graphs written in YAML (algorithm type graph) -----------------------------


def test_yaml_graph_panel_branch_and_streamed_judge(looper):
    graph = {"subgraphs": {"panel": {"parallel": {"models": ["m-small", "m-mid"], "min_success": 1,
                                                  "name": "panel"}}},
             "root": [{"subgraph": "panel"},
                      {"branch": {"if": {"answers_agree": True},
                                  "then": {"respond": {"aggregate": "first"}},
                                  "else": [{"transform": {"append": "Q: {question}\n{responses}\nPick one."}},
                                           {"call": {"models": ["m-large"], "stream": True, "name": "judge"}},
                                           {"respond": {"aggregate": "last"}}]}}]}
    s = looper(["m-small", "m-mid", "m-large"], {"type": "graph", "graph": graph},
               delay={"m-small": 300, "m-mid": 300})
    r = s.ask()
    assert content(r) == TEXT["m-large"]                      # the two answers differ: the judge decides
    calls = s.calls()
    assert sorted(models_of(calls[:2])) == ["m-mid", "m-small"] and models_of(calls[2:]) == ["m-large"]
    assert overlapped(calls[0], calls[1])
    judge = calls[2]["body"]
    assert judge["n_messages"] == 2 and judge["last_user"].startswith("Q: " + PROMPT)
    assert "Response 1 (m-small):\n" + TEXT["m-small"] in judge["last_user"]
    check_headers(r, "graph", "m-large", ["m-small", "m-mid", "m-large"], 3)
    # streamed: the judge's call is the one that streams, straight through
    s.clear()
    r, chunks, texts = stream(s)
    assert texts[0].strip() == TEXT["m-large"]
    calls = s.calls()
    assert [e["body"]["stream"] for e in calls] == [False, False, True]


def test_yaml_graph_call_falls_back_inside_the_hop(looper):
    graph = {"root": [{"call": {"models": ["m-small", "m-mid"]}}]}
    s = looper(["m-small"], {"type": "graph", "graph": graph}, status={"m-small": 503})
    r = s.ask()
    assert content(r) == TEXT["m-mid"]
    assert models_of(s.calls()) == ["m-small", "m-mid"]
    check_headers(r, "graph", "m-mid", ["m-small", "m-mid"], 2)


def test_yaml_graph_loop_until_confident_and_vote(looper):
    # a loop that asks again until the answer is confident (never, here: logprob -2.9) stops at max_rounds
    graph = {"root": [{"loop": {"max_rounds": 3, "until": {"confidence_gte": 0.9},
                                "body": {"call": {"models": ["m-small"], "logprobs": True}}}},
                      {"parallel": {"models": ["m-mid", "m-small"], "count": 3}},   # mid, small, mid
                      {"respond": {"aggregate": "vote"}}]}
    s = looper(["m-small", "m-mid"], {"type": "graph", "graph": graph}, logprob={"m-small": -2.9})
    r = s.ask()
    assert content(r) == TEXT["m-mid"]                      # two of three said it
    calls = s.calls()
    assert models_of(calls[:3]) == ["m-small"] * 3
    assert sorted(models_of(calls[3:])) == ["m-mid", "m-mid", "m-small"]
    assert [e["body"]["logprobs"] for e in s.calls()[:3]] == [True] * 3
    assert int(r.headers["x-vsr-looper-iterations"]) == 6


def test_yaml_graph_branch_on_a_signal(looper):
    # the keyword signal looper_kw matched (the decision needs it): the graph takes the `then` side
    graph = {"root": [{"branch": {"if": {"signal": {"type": "keyword", "name": "looper_kw"}},
                                  "then": {"call": {"models": ["m-large"]}},
                                  "else": {"call": {"models": ["m-small"]}}}}]}
    s = looper(["m-small"], {"type": "graph", "graph": graph})
    r = s.ask()
    assert content(r) == TEXT["m-large"]
    assert models_of(s.calls()) == ["m-large"]


def test_yaml_graph_first_k_cancels_the_rest(looper):
    graph = {"root": [{"parallel": {"models": ["m-small", "m-large"], "first_k": 1}}]}
    s = looper(["m-small"], {"type": "graph", "graph": graph}, delay={"m-large": 5000})
    t0 = time.monotonic()
    r = s.ask()
    assert content(r) == TEXT["m-small"]
    assert time.monotonic() - t0 < 4.0              # it did not wait for the slow one
    calls = s.calls()
    assert sorted(models_of(calls)) == ["m-large", "m-small"]
    slow = [e for e in calls if NAME_OF.get(e["model"]) == "m-large"][0]
    wait_until(lambda: httpx.get(s.be.url + "/stats", timeout=5).json()["connections_open"] <= 2, timeout=10,
               what="the slow call's connection to close")
    assert slow["end_ms"] is None or slow["end_ms"] >= slow["start_ms"]


def test_a_hop_answer_over_the_cap_fails_that_hop(vsr, fakellm):
    """Backends that answer buffered hops with more than
    global.integrations.looper.max_response_bytes_mb: each such hop fails
    (vsr reads the answer to its end without keeping it) and the graph
    answers as with failed calls; a small answer still passes."""
    be = fakellm("llm", args=backend_args())
    port = free_port()
    doc = looper_doc(port, be.endpoint, ["m-small", "m-mid"], {"type": "ratings"})
    doc = doc.replace("global:\n", "global:\n  integrations:\n    looper: {max_response_bytes_mb: 1}\n", 1)
    v = vsr(doc, port=port)
    big = dict(CHAT, fakellm={"text": "x" * (1536 * 1024)})      # every hop carries the client's fakellm knob
    r = httpx.post(v.url + CC, json=big, timeout=60)
    assert r.status_code == 502, r.text
    assert "failed" in r.json()["error"]["message"]
    assert r.headers["x-vsr-looper-iterations"] == "2"
    r = httpx.post(v.url + CC, json=CHAT, timeout=60)               # the cap leaves ordinary answers alone
    assert r.status_code == 200 and len(r.json()["choices"]) == 2, r.text
