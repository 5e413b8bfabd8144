"""The reference's newer routing families, end to end: input_modality (content parts of the user messages,
x-vsr-matched-input-modality), domains[].model_scores with the static selector (the matched domain's scores pick
the modelRef), and safety through a remote classifier (POST /classify {"inputs": T} -> [{label, score}]) and
through the built-in prompt guard (x-vsr-matched-safety).  The domain and safety classifiers are stand-in
servers (remote_classifier.py) on ephemeral ports, so every decision below can only come from their answers."""
import httpx
import pytest

from conftest import free_port
from remote_classifier import RemoteClassifier

DBG = {"x-vsr-debug": "true"}


def domain_answer(path, body):
    text = body["inputs"]
    if "integral" in text:
        return 200, [{"label": "math", "score": 0.9}, {"label": "law", "score": 0.1}], 0
    if "contract" in text:
        return 200, [{"label": "law", "score": 0.9}, {"label": "math", "score": 0.1}], 0
    return 200, [{"label": "other", "score": 0.9}, {"label": "math", "score": 0.1}], 0


def chat(v, content, headers=DBG, messages=None):
    body = {"model": "auto", "messages": messages or [{"role": "user", "content": content}]}
    r = v.post_chat(body, headers)
    assert r.status_code == 200, r.text
    return r


# ---- input_modality ----

MODALITY_DOC = """version: v0.3
listeners: [{{name: l, address: 127.0.0.1, port: {port}}}]
providers:
  defaults: {{model: text-model}}
  models:
    - {{name: text-model, backend_refs: [{{endpoint: "{be}"}}]}}
    - {{name: vision-model, backend_refs: [{{endpoint: "{be}"}}]}}
    - {{name: audio-model, backend_refs: [{{endpoint: "{be}"}}]}}
routing:
  signals:
    input_modality:
      - {{name: has_image, modality: image, description: a picture to look at}}
      - {{name: has_audio, modality: audio}}
      - {{name: has_text, modality: text}}
  decisions:
    - {{name: vision, priority: 20, rules: {{type: input_modality, name: has_image}}, modelRefs: [{{model: vision-model}}]}}
    - {{name: audio, priority: 10, rules: {{type: input_modality, name: has_audio}}, modelRefs: [{{model: audio-model}}]}}
    - {{name: text, priority: 1, rules: {{type: input_modality, name: has_text}}, modelRefs: [{{model: text-model}}]}}
"""


def test_input_modality_routes_on_user_content_parts(vsr, fakellm):
    be = fakellm("be")
    port = free_port()
    v = vsr(MODALITY_DOC.format(port=port, be=be.endpoint), port=port)
    img = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
    aud = {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}}
    r = chat(v, [{"type": "text", "text": "what is in this picture?"}, img])
    assert r.headers["x-vsr-selected-decision"] == "vision"
    assert r.headers["x-vsr-selected-model"] == "vision-model"
    assert r.headers["x-vsr-matched-input-modality"] == "has_image,has_text"
    r = chat(v, [aud])
    assert r.headers["x-vsr-selected-decision"] == "audio"
    assert r.headers["x-vsr-matched-input-modality"] == "has_audio"
    r = chat(v, "plain words")
    assert r.headers["x-vsr-selected-decision"] == "text"
    assert r.headers["x-vsr-matched-input-modality"] == "has_text"
    # only user messages count: an image in an assistant turn, or text in the system prompt, does not
    r = chat(v, None, messages=[{"role": "system", "content": "be brief"},
                                {"role": "assistant", "content": [img]},
                                {"role": "user", "content": [aud]}])
    assert r.headers["x-vsr-selected-decision"] == "audio"
    assert r.headers["x-vsr-matched-input-modality"] == "has_audio"
    # without x-vsr-debug no matched-* header
    r = chat(v, [img], headers={})
    assert r.headers["x-vsr-selected-model"] == "vision-model"
    assert "x-vsr-matched-input-modality" not in r.headers


def test_input_modality_rejects_an_unknown_modality(vsr, tmp_path):
    import subprocess
    from conftest import VSR_BIN
    p = tmp_path / "bad.yaml"
    p.write_text(MODALITY_DOC.format(port=free_port(), be="127.0.0.1:1").replace("modality: audio", "modality: smell"))
    out = subprocess.run([VSR_BIN, "config", "validate", str(p)], capture_output=True, text=True, timeout=30)
    assert out.returncode != 0
    assert "modality" in out.stderr and "smell" in out.stderr, out.stderr


# ---- model_scores and the static selector ----

SCORES_DOC = """version: v0.3
listeners: [{{name: l, address: 127.0.0.1, port: {port}}}]
providers:
  defaults: {{model: small}}
  models:
    - {{name: small, backend_refs: [{{endpoint: "{be}"}}]}}
    - {{name: big, backend_refs: [{{endpoint: "{be}"}}]}}
    - {{name: other, backend_refs: [{{endpoint: "{be}"}}]}}
routing:
  signals:
    keywords:
      - {{name: help, operator: OR, keywords: [help]}}
    domains:
      - name: math
        model_scores: [{{model: small, score: 0.6}}, {{model: big, score: 0.9, use_reasoning: true}}]
      - name: law
        model_scores: [{{model: big, score: 0.7}}]
      - name: general
        mmlu_categories: [other]
        model_scores: [{{model: other, score: 0.5}}, {{model: small, score: 0.5}}]
  decisions:
    # the matched domain's scores decide: math -> big (0.9 > 0.6)
    - name: stem
      priority: 30
      rules: {{operator: OR, conditions: [{{type: domain, name: math}}, {{type: keyword, name: help}}]}}
      modelRefs: [{{model: small}}, {{model: big}}]
    # law lists big at 0.7 but small is unlisted (1.0): the best is the 1.0 sentinel, so the first modelRef
    - name: legal
      priority: 20
      rules: {{type: domain, name: law}}
      modelRefs: [{{model: big}}, {{model: small}}]
    # a tie (0.5 and 0.5): the earlier candidate
    - name: general
      priority: 10
      rules: {{type: domain, name: general}}
      modelRefs: [{{model: small}}, {{model: other}}]
global:
  model_catalog:
    external:
      - {{name: big-domain, model_role: classification, llm_endpoint: {{address: 127.0.0.1, port: {dom}}}}}
    modules:
      classifier:
        domain:
          backend: {{protocol: http_classify, model: big-domain, deadline_ms: 2000}}
"""


@pytest.fixture
def domains():
    r = RemoteClassifier(domain_answer)
    yield r
    r.close()


def test_model_scores_pick_the_candidate(vsr, fakellm, domains):
    be = fakellm("be")
    port = free_port()
    v = vsr(SCORES_DOC.format(port=port, be=be.endpoint, dom=domains.port), port=port)
    r = chat(v, "evaluate the integral of x^2")
    assert r.headers["x-vsr-selected-decision"] == "stem"
    assert r.headers["x-vsr-selected-model"] == "big"
    r = chat(v, "is this contract valid?")
    assert r.headers["x-vsr-selected-decision"] == "legal"
    assert r.headers["x-vsr-selected-model"] == "big"  # first modelRef, not the unlisted small at 1.0
    r = chat(v, "tell me a story")
    assert r.headers["x-vsr-selected-decision"] == "general"
    assert r.headers["x-vsr-selected-model"] == "small"
    # stem matched on the keyword only: no domain matched, and no domain is named "stem": the first modelRef
    r = chat(v, "help me with a story")
    assert r.headers["x-vsr-selected-decision"] == "stem"
    assert r.headers["x-vsr-selected-model"] == "small"


def test_model_scores_in_the_routing_preview(vsr, fakellm, domains):
    be = fakellm("be")
    port, mport = free_port(), free_port()
    text = SCORES_DOC.format(port=port, be=be.endpoint, dom=domains.port)
    text = text.replace("global:\n", f"global:\n  services:\n    management_api: {{port: {mport}}}\n", 1)
    vsr(text, port=port)
    p = httpx.post(f"http://127.0.0.1:{mport}/api/v1/routing/preview",
                   json={"model": "auto", "text": "evaluate the integral of x^2"}, timeout=30).json()
    assert p["decision_result"]["decision_name"] == "stem"
    assert p["selected_model"] == "big", p
    assert p["decision_result"]["model_score"] == {"domain": "math", "score": 0.9}
