"""The complexity family end to end with the runtime as vsr's child and the
test embedder (hash-512: similarity is shared words): one signal's three
levels route a request near the hard candidates, near the easy ones, or
near neither to three decisions; and its configuration errors."""
import subprocess

import httpx
import pytest

from conftest import VSR_BIN, ENV, free_port


def doc(port, backend, composer=""):
    return f"""version: v0.3
listeners:
  - {{name: l, address: 127.0.0.1, port: {port}, timeout: 20s}}
providers:
  defaults: {{model: general}}
  models:
    - {{name: general, backend_refs: [{{endpoint: "{backend}"}}]}}
    - {{name: small, backend_refs: [{{endpoint: "{backend}"}}]}}
    - {{name: mid, backend_refs: [{{endpoint: "{backend}"}}]}}
    - {{name: big, backend_refs: [{{endpoint: "{backend}"}}]}}
routing:
  signals:
    keywords:
      - {{name: math, keywords: [integral, induction]}}
    complexity:
      - name: reasoning
        threshold: 0.2
{composer}        hard:
          candidates: ["prove the theorem by induction on n", "derive the closed form of the recurrence"]
        easy:
          candidates: ["what time is it", "say hello to my friend"]
  decisions:
    - name: hard
      priority: 30
      rules: {{operator: AND, conditions: [{{type: complexity, name: "reasoning:hard"}}]}}
      modelRefs: [{{model: big}}]
    - name: easy
      priority: 20
      rules: {{operator: AND, conditions: [{{type: complexity, name: "reasoning:easy"}}]}}
      modelRefs: [{{model: small}}]
    - name: medium
      priority: 10
      rules: {{operator: AND, conditions: [{{type: complexity, name: "reasoning:medium"}}]}}
      modelRefs: [{{model: mid}}]
global:
  services:
    management_api: {{port: {free_port()}}}
  model_catalog:
    runtime:
      embedder: hash
"""


def chat(v, text):
    with httpx.Client(base_url=v.url, timeout=30) as c:
        r = c.post("/v1/chat/completions", headers={"x-vsr-debug": "true"},
                   json={"model": "auto", "messages": [{"role": "user", "content": text}]})
    assert r.status_code == 200, r.text
    return r


def test_complexity_levels_route(vsr, fakellm):
    be = fakellm("be")
    port = free_port()
    v = vsr(doc(port, be.endpoint), workers=1, port=port)
    r = chat(v, "prove the theorem by induction")
    assert r.headers["x-vsr-selected-model"] == "big", (dict(r.headers), v.proc.output())
    assert r.headers["x-vsr-matched-complexity"] == "reasoning:hard"
    r = chat(v, "what time is it")
    assert r.headers["x-vsr-selected-model"] == "small", dict(r.headers)
    assert r.headers["x-vsr-matched-complexity"] == "reasoning:easy"
    r = chat(v, "recommend a restaurant in Lisbon")
    assert r.headers["x-vsr-selected-model"] == "mid", dict(r.headers)
    assert r.headers["x-vsr-matched-complexity"] == "reasoning:medium"


def test_composer_gates_every_level(vsr, fakellm):
    be = fakellm("be")
    port = free_port()
    v = vsr(doc(port, be.endpoint, "        composer: {operator: OR, conditions: [{type: keyword, name: math}]}\n"),
            workers=1, port=port)
    r = chat(v, "prove the theorem by induction")
    assert r.headers["x-vsr-selected-model"] == "big", (dict(r.headers), v.proc.output())
    # without the composer's keyword no level applies: the default model
    r = chat(v, "prove the theorem by contradiction")
    assert r.headers["x-vsr-selected-model"] == "general", dict(r.headers)
    r = chat(v, "what time is it")
    assert r.headers["x-vsr-selected-model"] == "general", dict(r.headers)


@pytest.mark.parametrize("body,rule,needle", [
    ("", "c:extreme", "must name a level"),
    ("", "d:hard", 'complexity signal "d" is not declared'),
    ("composer: {operator: AND, conditions: [{type: keyword, name: k}]}", "c:hard",
     'keyword signal "k" is not declared'),
    ("composer: {type: complexity, name: 'c:easy'}", "c:hard", "a complexity composer cannot name a complexity signal"),
    ("easy_below: 0.5", "c:easy", "easy_below (0.5) is greater than hard_above (0.1)"),
])
def test_complexity_errors_name_their_place(tmp_path, body, rule, needle):
    path = tmp_path / "c.yaml"
    path.write_text(f"""version: v0.3
providers:
  models:
    - {{name: m, backend_refs: [{{endpoint: "127.0.0.1:9"}}]}}
routing:
  signals:
    complexity:
      - name: c
        hard: {{candidates: [prove it]}}
        easy: {{candidates: [hi]}}
        {body}
  decisions:
    - {{name: d, rules: {{type: complexity, name: "{rule}"}}, modelRefs: [{{model: m}}]}}
""")
    p = subprocess.run([VSR_BIN, "config", "validate", str(path)], env=ENV, capture_output=True, text=True,
                       timeout=30)
    assert p.returncode == 2, p.stdout + p.stderr
    assert needle in p.stderr, p.stderr
    assert "c.yaml:" in p.stderr, p.stderr
