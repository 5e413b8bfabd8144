"""The reasks family end to end with the runtime as vsr's child: a
reference-style document loads unchanged; a user turn that repeats the
previous one routes to the reask decision, a new question or a first turn
does not (test embedder hash-512: similarity is shared words; and the real
sentence-embedding model when installed)."""
import subprocess

import httpx

from conftest import ENV, USE_MODEL, VSR_BIN, free_port, require

MODEL = USE_MODEL


def doc(port, backend, runtime, threshold=0.8):
    return f"""version: v0.3
listeners:
  - {{name: l, address: 127.0.0.1, port: {port}, timeout: 20s}}
providers:
  defaults: {{model: general}}
  models:
    - {{name: general, backend_refs: [{{endpoint: "{backend}"}}]}}
    - {{name: stronger, backend_refs: [{{endpoint: "{backend}"}}]}}
routing:
  signals:
    reasks:
      - name: asked_again
        threshold: {threshold}
        lookback_turns: 1
  decisions:
    - name: escalate
      rules: {{operator: AND, conditions: [{{type: reask, name: asked_again}}]}}
      modelRefs: [{{model: stronger}}]
global:
  services:
    management_api: {{port: {free_port()}}}
  model_catalog:
    runtime:
{runtime}
"""


def chat(v, *turns):
    msgs = []
    for i, t in enumerate(turns):
        msgs.append({"role": "user" if i % 2 == 0 else "assistant", "content": t})
    with httpx.Client(base_url=v.url, timeout=30) as c:
        r = c.post("/v1/chat/completions", headers={"x-vsr-debug": "true"}, json={"model": "auto", "messages": msgs})
    assert r.status_code == 200, r.text
    return r


def test_a_repeated_question_routes_to_the_reask_decision(vsr, fakellm):
    be = fakellm("be")
    port = free_port()
    v = vsr(doc(port, be.endpoint, "      embedder: hash\n"), workers=1, port=port)
    q = "how do I reset my router password"
    r = chat(v, q, "Hold the reset button.", q + " please")
    assert r.headers["x-vsr-selected-model"] == "stronger"
    assert r.headers["x-vsr-matched-reasks"] == "asked_again"
    assert 0.8 <= float(r.headers["x-vsr-selected-confidence"]) <= 1.0
    # a new question, and a first turn
    r = chat(v, q, "Hold the reset button.", "thanks, and what is the weather in Lisbon")
    assert r.headers["x-vsr-selected-model"] == "general"
    assert "x-vsr-matched-reasks" not in r.headers
    r = chat(v, q)
    assert r.headers["x-vsr-selected-model"] == "general"


def test_real_model_routes_the_evident_cases(vsr, fakellm):
    require([MODEL], what="embedding model")
    be = fakellm("be")
    port = free_port()
    v = vsr(doc(port, be.endpoint, f"      model: {MODEL}\n"), workers=1, port=port)
    r = chat(v, "How do I reset my router password?", "Hold the reset button for 10 seconds.",
             "How can I reset the password of my router?")
    assert r.headers["x-vsr-selected-model"] == "stronger", r.headers
    r = chat(v, "How do I reset my router password?", "Hold the reset button for 10 seconds.",
             "What is the capital city of Australia?")
    assert r.headers["x-vsr-selected-model"] == "general", r.headers


def test_lookback_turns_is_bounded(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("""version: v0.3
providers:
  models:
    - {name: m, backend_refs: [{endpoint: "127.0.0.1:9"}]}
routing:
  signals:
    reasks:
      - {name: r, lookback_turns: 17}
""")
    p = subprocess.run([VSR_BIN, "config", "validate", str(path)], env=ENV, capture_output=True, text=True,
                       timeout=30)
    assert p.returncode == 2, p.stdout + p.stderr
    assert "lookback_turns" in p.stderr, p.stderr
