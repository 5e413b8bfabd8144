"""The preferences family end to end with the runtime as vsr's child: a
reference-style document loads unchanged and routes a request near a
preference's examples or description to its decision, with the test
embedder (hash-512: similarity is shared words) and, when installed, the
real sentence-embedding model; and its configuration errors."""
import subprocess

import httpx
import pytest

from conftest import ENV, USE_MODEL, VSR_BIN, free_port, require

MODEL = USE_MODEL

SIGNALS = """    preferences:
      - name: terse
        description: "the user wants a short answer without explanations"
        examples: ["give me just the answer", "keep it short, no explanation", "one line answer only"]
        threshold: 0.6
      - name: detailed
        description: "the user wants a thorough step by step explanation with examples"
        examples: ["explain it step by step in detail", "walk me through it thoroughly with examples"]
"""


def doc(port, backend, runtime):
    return f"""version: v0.3
listeners:
  - {{name: l, address: 127.0.0.1, port: {port}, timeout: 20s}}
providers:
  defaults: {{model: general}}
  models:
    - {{name: general, backend_refs: [{{endpoint: "{backend}"}}]}}
    - {{name: small, backend_refs: [{{endpoint: "{backend}"}}]}}
    - {{name: big, backend_refs: [{{endpoint: "{backend}"}}]}}
routing:
  signals:
{SIGNALS}  decisions:
    - name: terse
      priority: 20
      rules: {{operator: AND, conditions: [{{type: preference, name: terse}}]}}
      modelRefs: [{{model: small}}]
    - name: detailed
      priority: 10
      rules: {{operator: AND, conditions: [{{type: preference, name: detailed, on_error: no_match}}]}}
      modelRefs: [{{model: big}}]
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


def test_preferences_route_by_examples_and_description(vsr, fakellm):
    be = fakellm("be")
    port = free_port()
    v = vsr(doc(port, be.endpoint, "      embedder: hash\n"), workers=1, port=port)
    r = chat(v, "give me just the answer")
    assert r.headers["x-vsr-selected-model"] == "small", (dict(r.headers), v.proc.output())
    assert r.headers["x-vsr-matched-preferences"] == "terse"
    assert 0.6 <= float(r.headers["x-vsr-selected-confidence"]) <= 1.0
    # the description is a candidate too (the second signal's default threshold is 0.7)
    r = chat(v, "the user wants a thorough step by step explanation with examples")
    assert r.headers["x-vsr-selected-model"] == "big"
    assert r.headers["x-vsr-matched-preferences"] == "detailed"
    r = chat(v, "what is the weather like in Lisbon tomorrow")
    assert r.headers["x-vsr-selected-model"] == "general"
    assert "x-vsr-matched-preferences" not in r.headers


def test_real_model_routes_the_evident_cases(vsr, fakellm):
    require([MODEL], what="embedding model")
    be = fakellm("be")
    port = free_port()
    v = vsr(doc(port, be.endpoint, f"      model: {MODEL}\n"), workers=1, port=port)
    r = chat(v, "Just give me the answer, keep it short.")
    assert r.headers["x-vsr-selected-model"] == "small", r.headers
    r = chat(v, "What is the capital city of Australia?")
    assert r.headers["x-vsr-selected-model"] == "general", r.headers


@pytest.mark.parametrize("body,needle", [
    ("threshold: 2", "threshold"),
    ("examples: ['  ']", "a candidate must not be empty or blank"),
    ("examples: []", "examples or a description"),
])
def test_preference_errors_name_their_place(tmp_path, body, needle):
    path = tmp_path / "c.yaml"
    path.write_text(f"""version: v0.3
providers:
  models:
    - {{name: m, backend_refs: [{{endpoint: "127.0.0.1:9"}}]}}
routing:
  signals:
    preferences:
      - name: p
        {body}
  decisions:
    - {{name: d, rules: {{type: preference, name: p}}, modelRefs: [{{model: m}}]}}
""")
    p = subprocess.run([VSR_BIN, "config", "validate", str(path)], env=ENV, capture_output=True, text=True,
                       timeout=30)
    assert p.returncode == 2, p.stdout + p.stderr
    assert needle in p.stderr, p.stderr
