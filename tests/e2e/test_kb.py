"""The kb family end to end with the runtime as vsr's child and the test
embedder (hash-512: similarity is shared words): a kb of labelled, grouped
entries in global.model_catalog.kbs routes a request whose nearest entry
has the target label (match best) or is near enough an entry of the
target group (match any); and its configuration errors."""
import subprocess

import httpx
import pytest

from conftest import VSR_BIN, ENV, free_port

KBS = """    kbs:
      - name: support
        entries:
          - {text: "reset my account password", label: account, group: it}
          - {text: "my laptop screen is broken", label: hardware, group: it}
          - {text: "refund for my last invoice", label: billing, group: finance}
"""


def doc(port, backend):
    return f"""version: v0.3
listeners:
  - {{name: l, address: 127.0.0.1, port: {port}, timeout: 20s}}
providers:
  defaults: {{model: general}}
  models:
    - {{name: general, backend_refs: [{{endpoint: "{backend}"}}]}}
    - {{name: acct, backend_refs: [{{endpoint: "{backend}"}}]}}
    - {{name: fin, backend_refs: [{{endpoint: "{backend}"}}]}}
routing:
  signals:
    kb:
      - {{name: account, kb: support, target: {{kind: label, value: account}}, match: best, threshold: 0.3}}
      - {{name: money, kb: support, target: {{kind: group, value: finance}}, match: any, threshold: 0.4}}
  decisions:
    - name: account
      priority: 20
      rules: {{type: kb, name: account}}
      modelRefs: [{{model: acct}}]
    - name: money
      priority: 10
      rules: {{type: kb, name: money}}
      modelRefs: [{{model: fin}}]
global:
  services:
    management_api: {{port: {free_port()}}}
  model_catalog:
{KBS}    runtime:
      embedder: hash
"""


def chat(v, text):
    with httpx.Client(base_url=v.url, timeout=30) as c:
        r = c.post("/v1/chat/completions", headers={"x-vsr-debug": "true"},
                   json={"model": "auto", "messages": [{"role": "user", "content": text}]})
    assert r.status_code == 200, r.text
    return r


def test_kb_routes_by_nearest_entry(vsr, fakellm):
    be = fakellm("be")
    port = free_port()
    v = vsr(doc(port, be.endpoint), workers=1, port=port)
    r = chat(v, "please reset my account password")
    assert r.headers["x-vsr-selected-model"] == "acct", (dict(r.headers), v.proc.output())
    assert r.headers["x-vsr-matched-kb"] == "account"
    r = chat(v, "I want a refund for my last invoice")
    assert r.headers["x-vsr-selected-model"] == "fin", dict(r.headers)
    assert r.headers["x-vsr-matched-kb"] == "money"
    # nearest the hardware entry: not the account label
    r = chat(v, "my laptop screen is broken again")
    assert r.headers["x-vsr-selected-model"] == "general", dict(r.headers)
    assert "x-vsr-matched-kb" not in r.headers


@pytest.mark.parametrize("kbs,signal,needle", [
    (KBS, "{name: k, kb: nowhere, target: {kind: label, value: x}}", 'kb "nowhere" is not declared'),
    (KBS, "{name: k, kb: support, target: {kind: group, value: hr}}", 'no entry of kb "support" has group "hr"'),
    (KBS, "{name: k, kb: support, target: {kind: topic, value: it}}", "kind"),
    ("    kbs: [{name: support, entries: [{text: '  '}]}]\n", "{name: k, kb: support, target: {kind: label, value: x}}",
     "must not be empty or blank"),
])
def test_kb_errors(tmp_path, kbs, signal, needle):
    path = tmp_path / "c.yaml"
    path.write_text(f"""version: v0.3
providers:
  models:
    - {{name: m, backend_refs: [{{endpoint: "127.0.0.1:9"}}]}}
routing:
  signals:
    kb:
      - {signal}
  decisions:
    - {{name: d, rules: {{type: kb, name: k}}, modelRefs: [{{model: m}}]}}
global:
  model_catalog:
{kbs}""")
    p = subprocess.run([VSR_BIN, "config", "validate", str(path)], env=ENV, capture_output=True, text=True,
                       timeout=30)
    assert p.returncode == 2, p.stdout + p.stderr
    assert needle in p.stderr, p.stderr
