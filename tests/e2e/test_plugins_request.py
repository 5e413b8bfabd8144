"""Request-side plugins that rewrite the body: tools and context_compression.
The backend (fakellm's echo) must receive the rewritten body, byte ranges
edited and the rest as the client sent it."""
import json
import re
import subprocess

import pytest

from conftest import VSR_BIN, config_yaml, echo, free_port, model_yaml

ROUTING = """
routing:
  signals:
    keywords:
      - {name: notools, operator: OR, keywords: ["notools"]}
      - {name: filtertools, operator: OR, keywords: ["filtertools"]}
      - {name: kangaroo, operator: OR, keywords: ["kangaroo"]}
      - {name: koala, operator: OR, keywords: ["koala"]}
      - {name: wombat, operator: OR, keywords: ["wombat"]}
  decisions:
    - name: strip_tools
      priority: 30
      rules: {operator: OR, conditions: [{type: keyword, name: notools}]}
      modelRefs: [{model: m1}]
      plugins:
        - type: tools
          configuration: {mode: none, strip_tool_history: true}
    - name: filter_tools
      priority: 20
      rules: {operator: OR, conditions: [{type: keyword, name: filtertools}]}
      modelRefs: [{model: m1}]
      plugins:
        - type: tools
          configuration: {mode: filtered, allow_tools: [search, calc], block_tools: [calc]}
    - name: compress
      priority: 10
      rules: {operator: OR, conditions: [{type: keyword, name: kangaroo}]}
      modelRefs: [{model: m1}]
      plugins:
        - type: context_compression
          configuration:
            mode: auto
            budget: {trigger_tokens: 400, target_tokens: 300}
            targets: [tool_results, history]
            scoring: {method: bm25}
            failure_mode: fail_open
    - name: compress_default_targets
      priority: 8
      rules: {operator: OR, conditions: [{type: keyword, name: wombat}]}
      modelRefs: [{model: m1}]
      plugins:
        - type: context_compression
          configuration:
            budget: {trigger_tokens: 400, target_tokens: 300}
    - name: compress_strict
      priority: 5
      rules: {operator: OR, conditions: [{type: keyword, name: koala}]}
      modelRefs: [{model: m1}]
      plugins:
        - type: context_compression
          configuration:
            budget: {trigger_tokens: 20, target_tokens: 10}
            failure_mode: fail_closed
"""


@pytest.fixture
def router(vsr, fakellm):
    a = fakellm("a")
    port = free_port()
    cfg = config_yaml(port, [model_yaml("m1", [a.endpoint])], default="m1") + ROUTING
    return vsr(cfg, port=port)


def tool(name):
    return {"type": "function", "function": {"name": name, "parameters": {"type": "object"}}}


def sent(r):
    assert r.status_code == 200, r.text
    return json.loads(echo(r)["body"])


def test_mode_none_strips_tools_and_history(router):
    body = {
        "model": "auto",
        "tools": [tool("weather")],
        "tool_choice": "auto",
        "parallel_tool_calls": False,
        "messages": [
            {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": None,
             "tool_calls": [{"id": "c1", "type": "function",
                             "function": {"name": "weather", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "18C"},
            {"role": "assistant", "content": "It is 18C."},
            {"role": "user", "content": "thanks, notools please"},
        ],
    }
    r = router.post_chat(body)
    assert r.headers["x-vsr-selected-decision"] == "strip_tools"
    got = sent(r)
    assert "tools" not in got and "tool_choice" not in got and "parallel_tool_calls" not in got
    assert got["messages"] == [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "It is 18C."},
        {"role": "user", "content": "thanks, notools please"},
    ]


def test_mode_filtered_keeps_allowed_tools(router):
    body = {
        "model": "auto",
        "tools": [tool("search"), tool("calc"), tool("shell")],
        "tool_choice": {"type": "function", "function": {"name": "calc"}},
        "messages": [{"role": "user", "content": "filtertools: find it"}],
    }
    r = router.post_chat(body, headers={"x-vsr-debug": "true"})
    assert r.headers["x-vsr-selected-decision"] == "filter_tools"
    assert (r.headers["x-vsr-tools-before"], r.headers["x-vsr-tools-after"]) == ("3", "1")
    got = sent(r)
    assert got["tools"] == [tool("search")]
    assert "tool_choice" not in got          # it named a removed tool
    assert got["messages"] == body["messages"]


SENTENCES = [
    "The elephant enclosure was cleaned in the morning.",
    "Penguins need cold water and a steady supply of fish.",
    "An adult kangaroo eats about two kilograms of grass per day.",
    "The giraffe house roof leaked during the storm last week.",
    "Visitors asked many questions about the new tiger cubs.",
]


def test_compression_over_trigger(router):
    old = " ".join(SENTENCES * 6)
    body = {
        "model": "auto",
        "messages": [
            {"role": "system", "content": "You help zoo keepers."},
            {"role": "user", "content": old},
            {"role": "tool", "tool_call_id": "x", "content": old},
            {"role": "assistant", "content": "Noted."},
            {"role": "user", "content": "How much does a kangaroo eat?"},
        ],
    }
    r = router.post_chat(body, headers={"x-vsr-debug": "true"})
    assert r.headers["x-vsr-selected-decision"] == "compress"
    before, after = int(r.headers["x-vsr-compression-tokens-before"]), int(r.headers["x-vsr-compression-tokens-after"])
    assert before > 400 >= 300 >= after
    assert r.headers["x-vsr-compression-messages"] == "2"
    got = sent(r)
    msgs = got["messages"]
    assert [m["role"] for m in msgs] == ["system", "user", "tool", "assistant", "user"]
    assert msgs[0] == body["messages"][0]
    assert msgs[3:] == body["messages"][3:]
    assert sum(len(m["content"].encode()) for m in msgs) <= 300 * 4
    # the tool output is cut first, entirely; the old turn keeps its most relevant sentences
    assert msgs[2]["content"] == "\u2026"
    assert "kangaroo" in msgs[1]["content"] and "\u2026" in msgs[1]["content"]
    assert len(msgs[1]["content"]) < len(old)


def test_compression_default_targets_keep_history(router):
    """Without `targets`, as the reference's default: tool outputs are cut,
    the conversation's history is preserved."""
    old = " ".join(SENTENCES * 6)
    body = {
        "model": "auto",
        "messages": [
            {"role": "user", "content": old},
            {"role": "tool", "tool_call_id": "x", "content": old},
            {"role": "assistant", "content": "Noted."},
            {"role": "user", "content": "What does a wombat eat?"},
        ],
    }
    r = router.post_chat(body, headers={"x-vsr-debug": "true"})
    assert r.headers["x-vsr-selected-decision"] == "compress_default_targets"
    assert r.headers["x-vsr-compression-messages"] == "1"
    msgs = sent(r)["messages"]
    assert msgs[0] == body["messages"][0]
    assert msgs[1]["content"] == "\u2026"
    assert msgs[2:] == body["messages"][2:]


def test_compression_under_trigger_sends_body_unchanged(router):
    raw = (b'{"model":"auto","messages":[{"role":"user","content":"A short kangaroo question."}],'
           b'"temperature":0}')
    with router.client() as c:
        r = c.post("/v1/chat/completions", content=raw, headers={"content-type": "application/json"})
    assert r.status_code == 200
    assert r.headers["x-vsr-selected-decision"] == "compress"
    assert echo(r)["body"].encode() == raw.replace(b'"auto"', b'"m1"')


def test_fail_closed_refuses_what_cannot_fit(router):
    # what must stay whole (the system message, the last user message) is over the budget
    body = {"model": "auto",
            "messages": [{"role": "system", "content": "You are a helpful assistant for koala keepers. " * 3},
                         {"role": "user", "content": "What do koala eat?"}]}
    r = router.post_chat(body)
    assert r.status_code == 400
    assert r.json()["error"]["message"] == \
        "context_compression: the request does not fit its token budget even compressed"


def test_bad_tools_database_refused_at_load(tmp_path):
    (tmp_path / "tools_db.json").write_text('[\n  {"tool": {"type": "function", "function": {"name": "a b"}}}\n]\n')
    cfg = config_yaml(free_port(), [model_yaml("m1", ["127.0.0.1:9"])], default="m1") + """
  integrations:
    tools: {tools_db_path: tools_db.json}
"""
    cfg = cfg.replace("\nglobal:", """
routing:
  decisions:
    - name: d
      modelRefs: [{model: m1}]
      plugins:
        - type: tools
          configuration: {mode: filtered, semantic_selection: {top_k: 3}}
        - type: tool_selection
          configuration: {mode: add}
global:""", 1)
    path = tmp_path / "config.yaml"
    path.write_text(cfg)
    p = subprocess.run([VSR_BIN, "config", "validate", str(path)], capture_output=True, text=True, timeout=30)
    assert p.returncode != 0
    out = p.stderr + p.stdout
    assert re.search(r"config\.yaml:\d+:\d+: tools_db_path: .* is not a valid tools database", out), out
    assert re.search(r"tools_db\.json:2:\d+: tool\.function\.name must be", out), out


AUTO_ROUTING = """
routing:
  modelCards:
    - {name: m1, context_window_size: 400}
  decisions:
    - name: fit_window
      rules: {operator: AND, conditions: []}
      modelRefs: [{model: m1}]
      plugins:
        - type: context_compression
          configuration:
            enabled: true
            budget: {trigger_tokens: auto, target_tokens: auto, reserve_output_tokens: auto}
            targets: {history: {mode: extractive}}
"""


def test_compression_auto_fits_the_model_window(vsr, fakellm):
    """The reference's `auto` budget: the request is cut to the selected
    model's context window (its card's context_window_size) less the output
    it asks for (max_tokens)."""
    a = fakellm("a")
    port = free_port()
    v = vsr(config_yaml(port, [model_yaml("m1", [a.endpoint])], default="m1") + AUTO_ROUTING, port=port)
    old = " ".join(SENTENCES * 6)
    msgs = [{"role": "user", "content": old}, {"role": "assistant", "content": "Noted."},
            {"role": "user", "content": "How much does a kangaroo eat?"}]
    for extra, budget in (({}, 400), ({"max_tokens": 150}, 250)):
        r = v.post_chat({"model": "auto", "messages": msgs, **extra}, headers={"x-vsr-debug": "true"})
        assert r.status_code == 200, r.text
        before, after = (int(r.headers["x-vsr-compression-tokens-before"]),
                         int(r.headers["x-vsr-compression-tokens-after"]))
        assert before > 400 and budget // 2 < after <= budget, (before, after, budget)
        assert "kangaroo" in sent(r)["messages"][0]["content"]
    # under the window: untouched
    r = v.post_chat({"model": "auto", "messages": msgs[1:]}, headers={"x-vsr-debug": "true"})
    assert r.headers["x-vsr-compression-tokens-after"] == r.headers["x-vsr-compression-tokens-before"]
    assert sent(r)["messages"] == msgs[1:]
