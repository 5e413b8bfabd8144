"""The prompt selector end to end: a judge model (fakellm with a fixed
answer) picks one of the decision's candidates from their modelCards
descriptions; an answer that names no candidate, is not the reference's
JSON, fails or comes after timeout_seconds takes the first candidate with a
warning, or 503 with on_error: fail."""
import json

import httpx

from conftest import free_port

CARDS = {"m-a": "general chat", "m-b": "code and math"}


def doc(port, endpoint, algorithm):
    models = "\n".join(
        f'    - {{name: {n}, provider_model_id: {n}-id, backend_refs: [{{name: b, endpoint: "{endpoint}"}}]}}'
        for n in [*CARDS, "judge"])
    cards = "\n".join(f'    - {{name: {n}, description: "{d}"}}' for n, d in CARDS.items())
    return f"""version: v0.3
listeners:
  - {{name: l, address: 127.0.0.1, port: {port}, timeout: 60s}}
providers:
  defaults: {{model: m-a}}
  models:
{models}
routing:
  modelCards:
{cards}
  decisions:
    - name: pick
      modelRefs: [{{model: m-a}}, {{model: m-b}}]
      algorithm: {json.dumps(algorithm)}
"""


def start(vsr, fakellm, judge_args, extra=None):
    be = fakellm("llm", args=judge_args)
    port = free_port()
    algo = {"type": "prompt", "prompt": {"model": "judge", "instructions": "Pick the best model.",
                                         "timeout_seconds": 1}}
    algo.update(extra or {})
    return vsr(doc(port, be.endpoint, algo), port=port), be


def ask(v):
    return httpx.post(v.url + "/v1/chat/completions", timeout=60, headers={"x-vsr-debug": "true"},
                      json={"model": "auto", "messages": [{"role": "user", "content": "integrate x squared"}]})


def test_prompt_selector_takes_the_models_pick(vsr, fakellm):
    v, _ = start(vsr, fakellm, ["--model-text", 'judge-id={"selected_model": "m-b", "rationale": "math"}'])
    r = ask(v)
    assert r.status_code == 200, r.text
    assert r.headers["x-vsr-selected-algorithm"] == "prompt"
    assert r.headers["x-vsr-selected-model"] == "m-b"
    assert "x-vsr-selection-warning" not in r.headers
    assert r.headers["x-vsr-selection-scores"] == "m-a=0.0000,m-b=1.0000"


def test_prompt_selector_answer_not_a_candidate_takes_the_first(vsr, fakellm):
    v, _ = start(vsr, fakellm, ["--model-text", 'judge-id={"selected_model": "m-z", "rationale": "?"}'])
    r = ask(v)
    assert r.status_code == 200, r.text
    assert r.headers["x-vsr-selected-model"] == "m-a"
    assert "not a candidate" in r.headers["x-vsr-selection-warning"]
    v, _ = start(vsr, fakellm, ["--model-text", "judge-id=m-b because math"])
    r = ask(v)
    assert r.headers["x-vsr-selected-model"] == "m-a"
    assert "not a JSON object" in r.headers["x-vsr-selection-warning"]


def test_prompt_selector_timeout_and_on_error_fail(vsr, fakellm):
    slow = ["--model-text", 'judge-id={"selected_model": "m-b", "rationale": "math"}',
            "--model-delay-ms", "judge-id=3000"]
    v, _ = start(vsr, fakellm, slow)
    r = ask(v)
    assert r.status_code == 200, r.text
    assert r.headers["x-vsr-selected-model"] == "m-a"
    assert "within timeout_seconds" in r.headers["x-vsr-selection-warning"]
    v, _ = start(vsr, fakellm, ["--model-status", "judge-id=500"], {"on_error": "fail"})
    r = ask(v)
    assert r.status_code == 503, r.text
    assert r.json()["error"]["code"] == "selection_failed"
