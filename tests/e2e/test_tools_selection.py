"""tools.semantic_selection and tool_selection against the real runtime child
(the hash embedder: texts that share words are similar), and with the runtime
out of reach (the tools go as sent)."""
import json

import httpx

from conftest import config_yaml, echo, free_port, model_yaml

DB = [
    {"tool": {"type": "function", "function": {"name": "get_weather", "description": "weather forecast",
                                               "parameters": {"type": "object"}}},
     "description": "weather forecast temperature rain city", "category": "weather", "tags": ["forecast"]},
    {"tool": {"type": "function", "function": {"name": "send_email", "description": "send an email"}},
     "description": "send an email message to a recipient inbox"},
    {"tool": {"type": "function", "function": {"name": "stock_price", "description": "stock quote"}},
     "description": "stock market share price quote ticker"},
]

ROUTING = """
routing:
  signals:
    keywords:
      - {name: pick, operator: OR, keywords: ["pick"]}
      - {name: addtools, operator: OR, keywords: ["addtools"]}
  decisions:
    - name: pick_tools
      priority: 10
      rules: {operator: OR, conditions: [{type: keyword, name: pick}]}
      modelRefs: [{model: m1}]
      plugins:
        - type: tools
          configuration: {mode: filtered, semantic_selection: {top_k: 1, similarity_threshold: 0.2}}
    - name: add_tools
      priority: 5
      rules: {operator: OR, conditions: [{type: keyword, name: addtools}]}
      modelRefs: [{model: m1}]
      plugins:
        - type: tool_selection
          configuration: {mode: add, top_k: 1, similarity_threshold: 0.2}
"""


def tool(name, desc):
    return {"type": "function", "function": {"name": name, "description": desc, "parameters": {"type": "object"}}}


def start(vsr, fakellm, tmp_path, runtime):
    be = fakellm("a")
    port = free_port()
    db = tmp_path / "tools_db.json"
    db.write_text(json.dumps(DB, indent=2))
    cfg = config_yaml(port, [model_yaml("m1", [be.endpoint])], default="m1")
    cfg = cfg.replace("\nglobal:", ROUTING + "global:", 1)
    cfg += f"  integrations:\n    tools: {{tools_db_path: {db}}}\n  model_catalog:\n    runtime:\n{runtime}"
    return vsr(cfg, port=port)


def ask(v, text, tools=None):
    body = {"model": "auto", "messages": [{"role": "user", "content": text}]}
    if tools is not None:
        body["tools"] = tools
    r = v.post_chat(body, headers={"x-vsr-debug": "true"})
    assert r.status_code == 200, r.text
    return r, json.loads(echo(r)["body"])


REQUEST_TOOLS = [tool("weather_now", "current weather forecast rain"), tool("translate", "translate text language"),
                 tool("calculator", "arithmetic sums")]


def test_semantic_selection_keeps_the_tool_about_the_question(vsr, fakellm, tmp_path):
    v = start(vsr, fakellm, tmp_path, "      embedder: hash\n")
    r, got = ask(v, "pick: what is the weather forecast, will it rain", REQUEST_TOOLS)
    assert r.headers["x-vsr-selected-decision"] == "pick_tools"
    assert [t["function"]["name"] for t in got["tools"]] == ["weather_now"]
    assert r.headers["x-vsr-tools-selection"] == "semantic"
    assert r.headers["x-vsr-tools-before"] == "3" and r.headers["x-vsr-tools-after"] == "1"
    assert r.headers["x-vsr-tools-selected"] == "weather_now"
    # a question none of the tools is about: none reaches the threshold, the tools go
    r, got = ask(v, "pick: zebra quokka", REQUEST_TOOLS)
    assert "tools" not in got
    assert r.headers["x-vsr-tools-after"] == "0"


def test_tool_selection_adds_from_the_database(vsr, fakellm, tmp_path):
    v = start(vsr, fakellm, tmp_path, "      embedder: hash\n")
    r, got = ask(v, "addtools: what is the stock price quote for this ticker")
    assert r.headers["x-vsr-selected-decision"] == "add_tools"
    assert got["tools"] == [DB[2]["tool"]]
    assert r.headers["x-vsr-tools-added"] == "1"
    assert r.headers["x-vsr-tools-selected"] == "stock_price"
    # a tool the request has already is not added twice
    r, got = ask(v, "addtools: stock price quote ticker", [tool("stock_price", "mine")])
    assert [t["function"]["name"] for t in got["tools"]] == ["stock_price"]
    assert got["tools"][0]["function"]["description"] == "mine"
    assert r.headers["x-vsr-tools-added"] == "0"


def test_runtime_down_leaves_the_tools_unchanged(vsr, fakellm, tmp_path):
    v = start(vsr, fakellm, tmp_path, f"      endpoint: unix://{tmp_path}/no-runtime.sock\n      timeout: 2s\n")
    r, got = ask(v, "pick: what is the weather forecast", REQUEST_TOOLS)
    assert got["tools"] == REQUEST_TOOLS
    assert r.headers["x-vsr-tools-selection"] == "unavailable"
    assert r.headers["x-vsr-tools-after"] == "3"
    r, got = ask(v, "addtools: stock price quote")
    assert "tools" not in got
    assert r.headers["x-vsr-tools-selection"] == "unavailable"
    metrics = httpx.get(v.metrics_url, timeout=5).text
    assert 'vsr_tool_selection_total{result="unavailable"} 2' in metrics, metrics
