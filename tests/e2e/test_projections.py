"""routing.projections and the metadata / events signals, end to end, on
reference-style documents (tests/e2e/corpus/refdocs/): the decision they
make, x-vsr-matched-projections / -metadata / -event under x-vsr-debug, and
the routing preview's scores and outputs."""
import math

import httpx

from conftest import free_port
from test_refdocs import doc


def serve(vsr, name, backends, mgmt=None):
    text = doc(name)
    for i, b in enumerate(backends):
        text = text.replace(f"127.0.0.1:{18000 + i}", b.endpoint)
    port = free_port()
    text = text.replace("port: 8899", f"port: {port}")
    if mgmt is not None:
        text = text.replace("port: 8080", f"port: {mgmt}")
    return vsr(text, port=port)


def ask(v, text, headers=None, **extra):
    body = {"model": "auto", "messages": [{"role": "user", "content": text}], **extra}
    r = v.post_chat(body, headers)
    assert r.status_code == 200, r.text
    return r


def test_projection_bands_route_and_explain(vsr, fakellm):
    small, big = fakellm("small"), fakellm("big")
    mgmt = free_port()
    v = serve(vsr, "projections-bands.yaml", [small, big], mgmt=mgmt)
    dbg = {"x-vsr-debug": "true"}
    # reasoning (0.5) + code (0.3) = 0.8 >= 0.6
    r = ask(v, "prove that this python function terminates", dbg)
    assert r.headers["x-vsr-selected-decision"] == "hard"
    assert r.headers["x-vsr-selected-model"] == "big-reasoner"
    assert r.headers["x-vsr-matched-projections"] == "hard_request"
    # the decision's confidence is the output's: 1/(1+exp(-12*0.2))
    assert r.headers["x-vsr-selected-confidence"] == f"{1 / (1 + math.exp(-12 * 0.2)):.4f}"
    assert r.headers["x-fakellm-backend"] == "big"
    # code only: 0.3 < 0.6
    r = ask(v, "a python question", dbg)
    assert r.headers["x-vsr-selected-decision"] == "easy"
    assert r.headers["x-vsr-matched-projections"] == "easy_request"
    assert r.headers["x-fakellm-backend"] == "small"
    r = ask(v, "a python question")
    assert "x-vsr-matched-projections" not in r.headers

    url = f"http://127.0.0.1:{mgmt}/api/v1/routing/preview"
    p = httpx.post(url + "?trace=true", json={"model": "auto", "text": "derive it step by step in rust"}).json()
    assert p["decision_result"]["decision_name"] == "hard"
    (score,) = p["projection_scores"]
    assert score["name"] == "difficulty" and score["score"] == 0.8
    assert [(i["name"], i["value"], i["weight"]) for i in score["inputs"]] == [
        ("reasoning_terms", 1.0, 0.5), ("code_terms", 1.0, 0.3), ("long_prompt", 0.0, 0.3)]
    outs = {o["name"]: o for o in p["projection_outputs"]}
    assert outs["hard_request"]["matched"] is True and outs["easy_request"]["matched"] is False
    hard = [t for t in p["eval_trace"] if t["decision"] == "hard"][0]
    assert hard["rules"]["conditions"][0] == {"type": "projection", "name": "hard_request", "matched": True,
                                             "confidence": round(1 / (1 + math.exp(-12 * 0.2)), 4)}
    p = httpx.post(url, json={"model": "auto", "text": "hello"}).json()
    assert p["decision_result"]["decision_name"] == "easy"
    assert "inputs" not in p["projection_scores"][0]


def test_metadata_and_events_route(vsr, fakellm):
    std, prem = fakellm("std"), fakellm("prem")
    v = serve(vsr, "metadata-events.yaml", [std, prem])
    dbg = {"x-vsr-debug": "true"}
    # events read the prompt: one of two criteria met (event_types) gives 0.5 + 0.5 * 1/2
    r = ask(v, "summarise the incident", dbg)
    assert r.headers["x-vsr-selected-decision"] == "incident_response"
    assert r.headers["x-vsr-matched-event"] == "sev1_incident"
    assert r.headers["x-vsr-selected-confidence"] == "0.7500"
    assert r.headers["x-fakellm-backend"] == "prem"
    r = ask(v, "Critical OUTAGE in eu-west", dbg)
    assert r.headers["x-vsr-selected-confidence"] == "1.0000"
    # the metadata object is not what events read
    r = ask(v, "hello", dbg, metadata={"event_type": "outage", "severity": "critical"})
    assert "x-vsr-selected-decision" not in r.headers
    # temporal: the urgency words, "time sensitive" with any rune between the words
    r = ask(v, "this is time-sensitive, please hurry", dbg)
    assert r.headers["x-vsr-selected-decision"] == "urgent"
    assert r.headers["x-vsr-matched-event"] == "urgent_ops"
    assert r.headers["x-vsr-selected-confidence"] == "0.7500"
    r = ask(v, "rollback the deploy right now", dbg)
    assert r.headers["x-vsr-selected-confidence"] == "1.0000"
    r = ask(v, "nowhere urgently", dbg)  # whole words only
    assert "x-vsr-selected-decision" not in r.headers
    r = ask(v, "hello", dbg, metadata={"tier": "gold"})
    assert r.headers["x-vsr-selected-decision"] == "gold"
    assert r.headers["x-vsr-matched-metadata"] == "gold_tenant"
    # not gold, no event words: the default model
    r = ask(v, "hello", dbg, metadata={"tier": "silver"})
    assert "x-vsr-selected-decision" not in r.headers
    assert r.headers["x-fakellm-backend"] == "std"
    r = ask(v, "hello", dbg)
    assert r.headers["x-fakellm-backend"] == "std"
    # metadata that is not an object is no metadata
    r = ask(v, "hello", dbg, metadata="tier=gold")
    assert r.headers["x-fakellm-backend"] == "std"
