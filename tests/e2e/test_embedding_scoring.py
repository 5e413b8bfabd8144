"""The embeddings family's scoring end to end, with the runtime as vsr's
child: negative_candidates veto a text nearer to one of them than to the
candidates, enable_soft_matching + min_score_threshold let a score under the
threshold match, and prototype scoring (aggregation_method max) routes the
evident cases, with the test embedder (hash-512: similarity is shared words)
and, when it is installed, the real sentence-embedding model."""

import httpx

from conftest import USE_MODEL, free_port, require

MODEL = USE_MODEL


def doc(port, backend, runtime):
    # a reference-style document: field names and defaults as the reference writes them
    return f"""version: v0.3
listeners:
  - {{name: l, address: 127.0.0.1, port: {port}, timeout: 20s}}
providers:
  defaults: {{model: general}}
  models:
    - {{name: general, backend_refs: [{{endpoint: "{backend}"}}]}}
    - {{name: coder, backend_refs: [{{endpoint: "{backend}"}}]}}
    - {{name: jester, backend_refs: [{{endpoint: "{backend}"}}]}}
routing:
  signals:
    embeddings:
      - name: code
        threshold: 0.6
        aggregation_method: max
        candidates: ["how do I sort a list in python", "write a function in rust"]
        negative_candidates: ["how do I feed a python snake"]
      - name: jokes
        threshold: 0.97
        enable_soft_matching: true
        min_score_threshold: 0.5
        candidates: ["tell me a joke about cats"]
  decisions:
    - name: code
      priority: 20
      rules: {{operator: AND, conditions: [{{type: embedding, name: code}}]}}
      modelRefs: [{{model: coder}}]
    - name: jokes
      priority: 10
      rules: {{operator: AND, conditions: [{{type: embedding, name: jokes}}]}}
      modelRefs: [{{model: jester}}]
global:
  services:
    management_api: {{port: {free_port()}}}
  model_catalog:
    runtime:
{runtime}
"""


def chat(v, text):
    with httpx.Client(base_url=v.url, timeout=30) as c:
        r = c.post("/v1/chat/completions", headers={"x-vsr-debug": "true"},
                   json={"model": "auto", "messages": [{"role": "user", "content": text}]})
    assert r.status_code == 200, r.text
    return r


def test_negatives_veto_and_soft_matching_route(vsr, fakellm):
    be = fakellm("be")
    port = free_port()
    v = vsr(doc(port, be.endpoint, "      embedder: hash\n"), workers=1, port=port)
    r = chat(v, "how do I sort a list in python")
    assert r.headers["x-vsr-selected-model"] == "coder"
    assert r.headers["x-vsr-matched-embeddings"] == "code"
    # two prototypes (the candidates share little): 0.75 * 1 + 0.25 * mean(1, sim(other)) < 1
    assert 0.75 < float(r.headers["x-vsr-selected-confidence"]) < 1.0
    # most of its words are a candidate's (it would score above 0.6), but it is the negative itself
    r = chat(v, "how do I feed a python snake")
    assert r.headers["x-vsr-selected-model"] == "general"
    assert "x-vsr-matched-embeddings" not in r.headers
    # under the jokes threshold (0.97) but above its soft floor (0.5): a soft match, confidence = the score
    r = chat(v, "tell me a joke about dogs")
    assert r.headers["x-vsr-selected-model"] == "jester"
    assert r.headers["x-vsr-matched-embeddings"] == "jokes"
    assert 0.5 <= float(r.headers["x-vsr-selected-confidence"]) < 0.97
    r = chat(v, "what is the weather like in Lisbon tomorrow")
    assert r.headers["x-vsr-selected-model"] == "general"
    assert "x-vsr-matched-embeddings" not in r.headers


def test_real_model_routes_the_evident_cases(vsr, fakellm):
    require([MODEL], what="embedding model")
    be = fakellm("be")
    port = free_port()
    v = vsr(doc(port, be.endpoint, f"      model: {MODEL}\n"), workers=1, port=port)
    r = chat(v, "How can I sort a Python list in descending order?")
    assert r.headers["x-vsr-selected-model"] == "coder", r.headers
    r = chat(v, "What is the capital city of Australia?")
    assert r.headers["x-vsr-selected-model"] == "general", r.headers
