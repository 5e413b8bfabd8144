"""The classifiers family (type local) end to end with the runtime as vsr's
child and the real sentence-embedding model: a 3-label inline bank and a
model_path JSONL bank (relative to the configuration's directory) route
evident cases to the decision of their label; a condition's predicate
stricter than any score never matches; an llm classifier's model answers
with no label (the signal is unknown) and its on_error decides.  An llm
classifier on its own asks its model through the router's upstream layer
(no runtime) and routes by the label it answers.  Without the model the routing test skips, and fails
under CI=1."""
import json
import subprocess

import httpx

from conftest import ENV, USE_MODEL, VSR_BIN, debug_chat, free_port, require, signal_doc

MODEL = USE_MODEL

BANK = [
    ("How do I reset my password?", "account"),
    ("I can't log in to my account.", "account"),
    ("Please change the email address on my profile.", "account"),
    ("My account was locked after too many attempts.", "account"),
    ("I was charged twice for my subscription.", "billing"),
    ("The invoice shows the wrong amount.", "billing"),
    ("I would like a refund for last month's payment.", "billing"),
    ("Which payment methods do you accept?", "billing"),
]


def doc(port, backend, admin):
    return signal_doc(port, backend, ["general", "chef", "coach", "coder", "support", "judge"], f"""routing:
  signals:
    classifiers:
      - name: topic
        threshold: 0.2
        labels:
          - name: cooking
            examples: ["How long should I boil an egg?", "Give me a recipe for tomato soup.",
                       "What spices go well with roasted chicken?", "How do I bake sourdough bread?"]
          - name: sports
            examples: ["Who won the football match last night?", "How many players are on a basketball team?",
                       "What are the rules of tennis scoring?", "Tips to improve my marathon time."]
          - name: programming
            examples: ["How do I reverse a list in Python?", "Explain pointers in C.",
                       "Why does my JavaScript promise never resolve?", "Write a SQL query joining two tables."]
      - {{name: desk, model_path: bank.jsonl, threshold: 0.2}}
      - {{name: opinion, type: llm, model: general, labels: [positive, negative], instructions: "say which"}}
  decisions:
    - name: never
      priority: 60
      rules: {{type: classifier, name: topic, predicate: {{gt: 1.5}}}}
      modelRefs: [{{model: judge}}]
    - name: cook
      priority: 50
      rules: {{type: classifier, name: topic, label: cooking}}
      modelRefs: [{{model: chef}}]
    - name: sport
      priority: 40
      rules: {{type: classifier, name: topic, label: sports, predicate: {{gte: 0.2}}}}
      modelRefs: [{{model: coach}}]
    - name: code
      priority: 30
      rules: {{type: classifier, name: topic, label: programming}}
      modelRefs: [{{model: coder}}]
    - name: bill
      priority: 55
      rules:
        operator: AND
        conditions:
          - {{type: classifier, name: desk, label: billing}}
          - {{type: classifier, name: opinion, label: positive, on_error: match}}
      modelRefs: [{{model: support}}]
global:
  services:
    management_api: {{port: {admin}}}
  model_catalog:
    runtime:
      model: {MODEL}
""")


def chat(v, text):
    r = debug_chat(v, text)
    assert r.status_code == 200, r.text
    return r.headers["x-vsr-selected-model"]


def test_real_model_routes_by_label(vsr, fakellm, tmp_path):
    require([MODEL], what="embedding model")
    (tmp_path / "bank.jsonl").write_text("".join(json.dumps({"text": t, "label": l}) + "\n" for t, l in BANK))
    be = fakellm("be")
    port = free_port()
    admin = free_port()
    v = vsr(doc(port, be.endpoint, admin), workers=1, port=port)
    assert chat(v, "What is a good recipe for pancakes?") == "chef"
    assert chat(v, "Who scored the most goals in the last world cup?") == "coach"
    assert chat(v, "How do I fix a segmentation fault in my C program?") == "coder"
    # the model_path bank, and the llm classifier matched by its on_error
    assert chat(v, "My credit card was billed twice this month, I want my money back.") == "support"
    # account wins the desk bank: no billing decision
    assert chat(v, "I forgot my password and cannot sign in.") != "support"
    # the evidence: the winning label, every label's score, the nearest examples
    with httpx.Client(base_url=f"http://127.0.0.1:{admin}", timeout=60) as c:
        r = c.post("/api/v1/routing/preview?trace=true",
                   json={"model": "auto", "text": "Share a recipe for chocolate cake."})
    assert r.status_code == 200, r.text
    ev = r.json()["signal_evidence"]["classifiers:topic"]["result"]
    assert ev["label"] == "cooking", ev
    assert set(ev["scores"]) == {"cooking", "sports", "programming"}
    assert ev["score"] == max(ev["scores"].values())
    assert len(ev["nearest"]) == 3 and ev["nearest"][0]["label"] == "cooking", ev


def test_bank_errors_name_the_bank_line(tmp_path):
    (tmp_path / "bank.jsonl").write_text('{"text": "a", "label": "x"}\n{"text": "", "label": "x"}\n')
    path = tmp_path / "c.yaml"
    path.write_text("""version: v0.3
providers:
  models:
    - {name: m, backend_refs: [{endpoint: "127.0.0.1:9"}]}
routing:
  signals:
    classifiers:
      - {name: desk, model_path: bank.jsonl}
  decisions:
    - {name: d, rules: {type: classifier, name: desk}, modelRefs: [{model: m}]}
""")
    p = subprocess.run([VSR_BIN, "config", "validate", str(path)], env=ENV, capture_output=True, text=True,
                       timeout=30)
    assert p.returncode == 2, p.stdout + p.stderr
    assert f'c.yaml:8:34: model_path: {tmp_path}/bank.jsonl:2: "text" must not be empty or blank' in p.stderr, \
        p.stderr


LLM_DOC = """routing:
  signals:
    classifiers:
      - {{name: mood, type: llm, model: sentiment, labels: [positive, negative], instructions: "Judge the tone.",
          timeout: 5s}}
  decisions:
    - {{name: up, priority: 20, rules: {{type: classifier, name: mood, label: positive}}, modelRefs: [{{model: happy}}]}}
    - {{name: down, priority: 10, rules: {{type: classifier, name: mood, label: negative, on_error: no_match}},
        modelRefs: [{{model: grumpy}}]}}
global:
  services:
    management_api: {{port: {admin}}}
"""


def test_llm_classifier_asks_its_model(vsr, fakellm):
    """type llm: the router asks the classifier's model itself (no runtime
    needed), with the labels and instructions, and routes by the label it
    answers; an answer naming no label leaves the signal unknown."""
    be = fakellm("be")
    judge = fakellm("judge", args=["--text", "negative"])
    port, admin = free_port(), free_port()
    judge_model = f'{{name: sentiment, provider_model_id: sentiment-v1, backend_refs: [{{endpoint: "{judge.endpoint}"}}]}}'
    text = signal_doc(port, be.endpoint, ["general", "happy", "grumpy", judge_model], LLM_DOC.format(admin=admin))
    v = vsr(text, workers=1, port=port)
    with httpx.Client(base_url=v.url, timeout=30) as c:
        r = c.post("/v1/chat/completions", headers={"x-vsr-debug": "true"},
                   json={"model": "auto", "messages": [{"role": "user", "content": "this is awful"}]})
        assert r.status_code == 200, r.text
        assert r.headers["x-vsr-selected-model"] == "grumpy"
        assert r.headers["x-vsr-matched-classifiers"] == "mood"
        log = httpx.get(judge.url + "/_fakellm/log", timeout=5).json()["entries"]
        calls = [e for e in log if e["path"] == "/v1/chat/completions"]
        assert len(calls) == 1 and calls[0]["model"] == "sentiment-v1"
        assert calls[0]["body"]["last_user"] == "this is awful"
        assert calls[0]["body"]["system"].startswith("Judge the tone.")
        assert "positive, negative" in calls[0]["body"]["system"]
        # the classifier's call has its own body: the client's fields never reach the classifier's model
        r = c.post("/v1/chat/completions",
                   json={"model": "auto", "messages": [{"role": "user", "content": "meh"}],
                         "fakellm": {"text": "positive"}})
        assert r.status_code == 200, r.text
        assert r.headers["x-vsr-selected-model"] == "grumpy"
