"""router_dc end to end against the real runtime child (the hash embedder:
texts that share words are similar): the candidate whose modelCards
description is about the question is chosen, every candidate's score is
reported, and with the runtime out of reach the first candidate answers
with a warning (the reference's rule)."""
import json

import httpx

from conftest import free_port

CARDS = {
    "m-code": "python code programming software bugs compiler",
    "m-cook": "cooking recipes kitchen baking bread soup",
    "m-law": "law contracts legal court lawyer",
}


def doc(port, admin, endpoint, runtime, algorithm):
    models = "\n".join(f'    - {{name: {n}, backend_refs: [{{name: b, endpoint: "{endpoint}"}}]}}' for n in CARDS)
    cards = "\n".join(f'    - {{name: {n}, description: "{d}"}}' for n, d in CARDS.items())
    refs = ", ".join(f"{{model: {n}}}" for n in CARDS)
    return f"""version: v0.3
listeners:
  - {{name: l, address: 127.0.0.1, port: {port}, timeout: 60s}}
providers:
  defaults: {{model: m-code}}
  models:
{models}
routing:
  modelCards:
{cards}
  decisions:
    - name: pick
      modelRefs: [{refs}]
      algorithm: {json.dumps(algorithm)}
global:
  services:
    management_api: {{port: {admin}}}
  model_catalog:
    runtime:
{runtime}"""


def start(vsr, fakellm, runtime, algorithm=None):
    be = fakellm("llm")
    port, admin = free_port(), free_port()
    return vsr(doc(port, admin, be.endpoint, runtime, algorithm or {"type": "router_dc"}), port=port)


def ask(v, text):
    r = httpx.post(v.url + "/v1/chat/completions", timeout=60, headers={"x-vsr-debug": "true"},
                   json={"model": "auto", "messages": [{"role": "user", "content": text}]})
    assert r.status_code == 200, r.text
    return r


def scores(r):
    return {k: float(x) for k, x in (kv.split("=") for kv in r.headers["x-vsr-selection-scores"].split(","))}


def test_router_dc_picks_the_model_whose_description_matches(vsr, fakellm):
    v = start(vsr, fakellm, "      embedder: hash\n")
    r = ask(v, "my python code has bugs the compiler rejects")
    assert r.headers["x-vsr-selected-algorithm"] == "router_dc"
    assert r.headers["x-vsr-selected-model"] == "m-code"
    assert "x-vsr-selection-warning" not in r.headers
    s = scores(r)
    assert set(s) == set(CARDS)
    assert abs(sum(s.values()) - 1) < 1e-3, s  # the softmax of the raw scores
    assert s["m-code"] == max(s.values()) and s["m-code"] > 0.5, s
    # the description embeddings are kept: the next question reuses them
    r = ask(v, "a recipe for baking bread in my kitchen")
    assert r.headers["x-vsr-selected-model"] == "m-cook"
    assert scores(r)["m-cook"] == max(scores(r).values())
    r = ask(v, "the court read the contracts my lawyer wrote")
    assert r.headers["x-vsr-selected-model"] == "m-law"


def test_router_dc_min_similarity_takes_the_first_candidate(vsr, fakellm):
    v = start(vsr, fakellm, "      embedder: hash\n", {"type": "router_dc", "router_dc": {"min_similarity": 1.0}})
    r = ask(v, "a recipe for baking bread")
    assert r.headers["x-vsr-selected-model"] == "m-code"
    assert "min_similarity" in r.headers["x-vsr-selection-warning"]
    s = scores(r)
    assert all(abs(x - 1 / 3) < 1e-3 for x in s.values()), s  # 1/n each


def test_router_dc_without_the_runtime_takes_the_first_candidate(vsr, fakellm, tmp_path):
    v = start(vsr, fakellm, f"      endpoint: unix://{tmp_path}/no-runtime.sock\n      timeout: 2s\n")
    r = ask(v, "a recipe for baking bread")
    assert r.headers["x-vsr-selected-model"] == "m-code"
    assert "no embedding of the query" in r.headers["x-vsr-selection-warning"]
