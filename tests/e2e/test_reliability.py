"""Reliability end to end against fakellm: retries, timeouts, ejection,
health checks.  Each test asserts the exact sequence of backend calls (from
fakellm's call log) and what the client got."""
import json
import threading
import time
import uuid

import httpx
import pytest

from conftest import config_yaml, free_port, sse_events, wait_until


def reliability_model(name, endpoints, rel):
    lines = [f"    - name: {name}", "      reliability:"]
    lines += [f"        {k}: {v}" for k, v in rel.items()]
    lines.append("      backend_refs:")
    for i, ep in enumerate(endpoints):
        lines.append(f"        - name: b{i}")
        lines.append(f"          endpoint: {ep}")
    return "\n".join(lines)


@pytest.fixture
def rstack(vsr, fakellm):
    def make(rel, n_backends=1, listener_extra="    timeout: 20s", backend_args=()):
        bes = [fakellm(f"be{i}", args=backend_args[i] if i < len(backend_args) else ()) for i in range(n_backends)]
        port = free_port()
        v = vsr(config_yaml(port, [reliability_model("m", [b.endpoint for b in bes], rel)],
                            listener_extra=listener_extra), port=port)
        v.backends = bes
        return v
    return make


def call(v, headers=None, stream=False, timeout=30):
    key = str(uuid.uuid4())
    h = {"x-fakellm-key": key, **(headers or {})}
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    if stream:
        body["stream"] = True
    r = httpx.post(v.url + "/v1/chat/completions", json=body, headers=h, timeout=timeout)
    return r, key


def log(v, key=None):
    """Every backend's log entries for key; ordered by time within one
    backend (single-backend tests see the exact sequence)."""
    entries = []
    for be in v.backends:
        q = f"?key={key}" if key else ""
        entries += httpx.get(be.url + "/_fakellm/log" + q, timeout=5).json()["entries"]
    return sorted(entries, key=lambda e: e["time_ms"])


def outcomes(v, key):
    return [e["outcome"] for e in log(v, key)]


def test_503_once_is_retried(rstack):
    v = rstack({"retry_count": 2, "retry_on": "5xx"})
    r, key = call(v, {"x-fakellm-status": "503", "x-fakellm-fail-count": "1"})
    assert r.status_code == 200
    assert outcomes(v, key) == ["status:503", "ok"]
    assert r.headers["x-vsr-upstream-attempts"] == "2"


def test_429_once_honours_retry_after(rstack):
    v = rstack({"retry_count": 1, "retry_on": "retriable-status-codes", "retriable_status_codes": "[429]",
                "retry_after_max": "3s"})
    r, key = call(v, {"x-fakellm-status": "429", "x-fakellm-retry-after": "1", "x-fakellm-fail-count": "1"})
    assert r.status_code == 200
    entries = log(v, key)
    assert [e["outcome"] for e in entries] == ["status:429", "ok"]
    assert entries[1]["time_ms"] - entries[0]["time_ms"] >= 900  # waited for Retry-After


def test_429_not_retried_without_the_code(rstack):
    v = rstack({"retry_count": 2, "retry_on": "5xx"})
    r, key = call(v, {"x-fakellm-status": "429", "x-fakellm-retry-after": "2"})
    assert r.status_code == 429 and r.headers["retry-after"] == "2"
    assert outcomes(v, key) == ["status:429"]


def test_reset_once_is_retried(rstack):
    v = rstack({"retry_count": 1, "retry_on": "reset"})
    r, key = call(v, {"x-fakellm-reset": "before-headers", "x-fakellm-fail-count": "1"})
    assert r.status_code == 200
    assert outcomes(v, key) == ["reset", "ok"]


def test_per_try_timeout_once_is_retried(rstack):
    v = rstack({"retry_count": 1, "retry_on": "5xx", "per_try_timeout": "500ms"})
    r, key = call(v, {"x-fakellm-delay-ms": "3000", "x-fakellm-fail-count": "1"})
    assert r.status_code == 200
    assert outcomes(v, key)[-1] == "ok"
    assert len(outcomes(v, key)) == 2


def test_400_is_never_retried(rstack):
    v = rstack({"retry_count": 3, "retry_on": "5xx,gateway-error,reset,retriable-4xx"})
    r, key = call(v, {"x-fakellm-status": "400"})
    assert r.status_code == 400
    assert outcomes(v, key) == ["status:400"]


def test_stream_503_before_first_byte_is_retried(rstack):
    v = rstack({"retry_count": 1, "retry_on": "gateway-error"})
    r, key = call(v, {"x-fakellm-status": "503", "x-fakellm-fail-count": "1", "x-fakellm-chunks": "3"}, stream=True)
    assert r.status_code == 200
    assert r.text.rstrip().endswith("data: [DONE]")
    assert outcomes(v, key) == ["status:503", "ok"]


def test_mid_stream_drop_is_not_retried(rstack):
    v = rstack({"retry_count": 3, "retry_on": "5xx,reset"})
    key = str(uuid.uuid4())
    with pytest.raises(httpx.RemoteProtocolError):
        with httpx.stream("POST", v.url + "/v1/chat/completions", timeout=30,
                          headers={"x-fakellm-key": key, "x-fakellm-chunks": "10", "x-fakellm-drop-after": "2"},
                          json={"model": "m", "stream": True, "messages": []}) as r:
            assert r.status_code == 200
            for _ in r.iter_text():
                pass
    assert outcomes(v, key) == ["drop"]  # the backend was called once


def test_503_on_every_attempt_relays_the_last(rstack):
    v = rstack({"retry_count": 2, "retry_on": "5xx", "retry_back_off_base": "10ms"})
    r, key = call(v, {"x-fakellm-status": "503"})
    assert r.status_code == 503
    assert r.json()["error"]["message"] == "fakellm injected 503"
    assert outcomes(v, key) == ["status:503"] * 3


def test_reset_on_every_attempt_gives_the_local_reply(rstack):
    v = rstack({"retry_count": 1, "retry_on": "reset"})
    r, key = call(v, {"x-fakellm-reset": "before-headers"})
    assert r.status_code == 503
    assert r.json()["error"]["message"] == ("upstream connect error or disconnect/reset before headers. "
                                            "retried and the latest reset reason: connection termination")
    assert outcomes(v, key) == ["reset", "reset"]


def test_retry_prefers_another_endpoint(rstack):
    # be0 always fails; a retry must never go back to it while be1 is untried
    v = rstack({"retry_count": 1, "retry_on": "5xx"}, n_backends=2, backend_args=[("--status", "503"), ()])
    retried = 0
    for _ in range(6):
        r, key = call(v)
        assert r.status_code == 200
        # (each fakellm keeps its own clock: compare per backend, not across)
        seq = sorted((e["backend"], e["outcome"]) for e in log(v, key))
        assert seq in ([("be1", "ok")], [("be0", "status:503"), ("be1", "ok")]), seq
        retried += len(seq) == 2
    assert retried >= 1


def test_first_byte_timeout_against_a_hung_backend(rstack):
    v = rstack({"first_byte_timeout": "500ms"})
    t0 = time.monotonic()
    r, key = call(v, {"x-fakellm-hang": "1"})
    assert r.status_code == 504
    assert r.json()["error"]["message"] == "upstream request timeout"
    assert time.monotonic() - t0 < 5
    assert outcomes(v, key) == ["hang"]


def test_total_timeout_bounds_all_retries(rstack):
    v = rstack({"retry_count": 5, "retry_on": "5xx", "per_try_timeout": "400ms", "total_timeout": "1s"})
    t0 = time.monotonic()
    r, key = call(v, {"x-fakellm-hang": "1"})
    elapsed = time.monotonic() - t0
    assert r.status_code == 504
    assert 0.9 < elapsed < 4                     # the deadline ended it, neither early nor much late
    # attempts start at >= 0, 400 and 800 ms: a fourth would start past the deadline.  Timers armed for the rest
    # of the deadline count from a fresh loop time, so a loaded machine cannot fire one early and let a fourth in
    # (tests/unit/test_upstream_clock.c shows that case deterministically).
    assert 2 <= len(outcomes(v, key)) <= 3


def test_idle_timeout_cuts_a_stalled_stream(rstack):
    v = rstack({"idle_timeout": "500ms"})
    key = str(uuid.uuid4())
    with pytest.raises(httpx.RemoteProtocolError):
        with httpx.stream("POST", v.url + "/v1/chat/completions", timeout=30,
                          headers={"x-fakellm-key": key, "x-fakellm-chunks": "5", "x-fakellm-stall-after": "2",
                                   "x-fakellm-stall-ms": "5000"},
                          json={"model": "m", "stream": True, "messages": []}) as r:
            for _ in r.iter_text():
                pass


def test_outlier_ejection_and_return(rstack):
    v = rstack({"consecutive_5xx": 2, "base_ejection_time": "1s", "max_ejection_percent": 50}, n_backends=2,
               backend_args=[("--status", "503"), ()])
    bad = v.backends[0].name
    with httpx.Client(base_url=v.url, timeout=10) as c:   # one connection: one worker's round robin
        got = [c.post("/v1/chat/completions", json={"model": "m", "messages": []}).status_code for _ in range(8)]
    assert got.count(503) == 2            # two 5xx, then the bad endpoint is ejected
    assert got[-4:] == [200] * 4
    time.sleep(1.3)                        # the ejection ends
    with httpx.Client(base_url=v.url, timeout=10) as c:
        got = [c.post("/v1/chat/completions", json={"model": "m", "messages": []}).status_code for _ in range(4)]
    assert 503 in got                      # the endpoint is back in rotation
    assert bad


def test_ttft_ejection_and_return(rstack):
    """A slow endpoint (every head 300 ms late) is ejected once its p90 time
    to first byte over the window passes 150 ms; the fast one then takes
    everything until the ejection ends."""
    v = rstack({"ttft_ejection_threshold": "150ms", "ttft_ejection_percentile": 90, "ttft_ejection_window": "30s",
                "ttft_ejection_min_samples": 3, "base_ejection_time": "2s", "max_ejection_percent": 50},
               n_backends=2, backend_args=[("--delay-ms", "300"), ()])
    slow, fast = (b.name for b in v.backends)

    def served(n):
        with httpx.Client(base_url=v.url, timeout=10) as c:   # one connection: one worker's round robin
            return [c.post("/v1/chat/completions", json={"model": "m", "messages": []}).headers["x-fakellm-backend"]
                    for _ in range(n)]

    first = served(8)
    assert first.count(slow) == 3          # its third slow head fills the window: ejected
    assert first[-2:] == [fast, fast]
    assert served(6) == [fast] * 6
    time.sleep(2.3)                        # the ejection ends
    assert slow in served(4)               # back in rotation, with a clean window


def test_ttft_ejection_is_off_without_a_threshold(rstack):
    v = rstack({"base_ejection_time": "2s", "max_ejection_percent": 50}, n_backends=2,
               backend_args=[("--delay-ms", "300"), ()])
    with httpx.Client(base_url=v.url, timeout=10) as c:
        got = [c.post("/v1/chat/completions", json={"model": "m", "messages": []}).headers["x-fakellm-backend"]
               for _ in range(8)]
    assert got.count(v.backends[0].name) == 4


def test_health_check_down_and_up(vsr, fakellm):
    a, b = fakellm("hc-a"), fakellm("hc-b")
    port = free_port()
    rel = {"health_check_path": "/health", "health_check_interval": "100ms", "health_check_timeout": "200ms"}
    v = vsr(config_yaml(port, [reliability_model("m", [a.endpoint, b.endpoint], rel)]), port=port)

    def backends_used(n=6):
        with httpx.Client(base_url=v.url, timeout=10) as c:
            return {c.post("/v1/chat/completions", json={"model": "m", "messages": []}).headers["x-fakellm-backend"]
                    for _ in range(n)}

    assert backends_used() == {"hc-a", "hc-b"}
    httpx.post(a.url + "/_fakellm/health-status", content=b"503")
    wait_until(lambda: backends_used() == {"hc-b"}, timeout=10, what="hc-a marked unhealthy")
    health = [e for e in httpx.get(a.url + "/_fakellm/log").json()["entries"] if e["outcome"] == "health"]
    assert len(health) >= 3 and all(e["method"] == "GET" and e["path"] == "/health" for e in health)
    httpx.post(a.url + "/_fakellm/health-status", content=b"200")
    wait_until(lambda: backends_used() == {"hc-a", "hc-b"}, timeout=10, what="hc-a healthy again")


def decision_doc(port, endpoint, decision_rel, model_rel=""):
    model_rel = f", reliability: {{{model_rel}}}" if model_rel else ""
    return f"""version: v0.3
listeners:
  - {{name: l, address: 127.0.0.1, port: {port}, timeout: 20s}}
providers:
  defaults: {{model: m}}
  models:
    - {{name: m{model_rel}, backend_refs: [{{endpoint: "{endpoint}"}}]}}
routing:
  signals:
    keywords:
      - {{name: any, operator: OR, keywords: [hello]}}
  decisions:
    - name: d
      rules: {{operator: AND, conditions: [{{type: keyword, name: any}}]}}
      modelRefs: [{{model: m}}]
      reliability: {{{decision_rel}}}
global:
  services:
    management_api: {{port: {free_port()}}}
"""


def ask_auto(v, headers):
    key = str(uuid.uuid4())
    r = httpx.post(v.url + "/v1/chat/completions", timeout=30, headers={"x-fakellm-key": key, **headers},
                   json={"model": "auto", "messages": [{"role": "user", "content": "hello"}]})
    return r, key


def test_decision_retry_on_without_count_retries_once(vsr, fakellm):
    """ref §1.6: the decision's retry_on reaches Envoy as x-envoy-retry-on
    without x-envoy-max-retries, and Envoy then retries once."""
    be = fakellm("be")
    port = free_port()
    v = vsr(decision_doc(port, be.endpoint, "retry_on: 5xx"), port=port)
    v.backends = [be]
    r, key = ask_auto(v, {"x-fakellm-status": "503", "x-fakellm-fail-count": "1"})
    assert r.status_code == 200
    assert outcomes(v, key) == ["status:503", "ok"]
    r, key = ask_auto(v, {"x-fakellm-status": "503", "x-fakellm-fail-count": "5"})
    assert r.status_code == 503
    assert outcomes(v, key) == ["status:503", "status:503"]   # one retry, not more


def test_decision_retry_on_keeps_the_models_count(vsr, fakellm):
    be = fakellm("be")
    port = free_port()
    v = vsr(decision_doc(port, be.endpoint, "retry_on: 5xx", model_rel="retry_count: 3"), port=port)
    v.backends = [be]
    r, key = ask_auto(v, {"x-fakellm-status": "503", "x-fakellm-fail-count": "3"})
    assert r.status_code == 200
    assert outcomes(v, key) == ["status:503"] * 3 + ["ok"]


def test_retry_after_beyond_the_max_is_not_honoured(rstack):
    """ref §5.3: Retry-After is honoured up to retry_after_max; a longer one
    is ignored and the computed back-off (25 ms base) applies, not the max."""
    v = rstack({"retry_count": 1, "retry_on": "retriable-status-codes", "retriable_status_codes": "[429]",
                "retry_after_max": "10s"})
    t0 = time.monotonic()
    r, key = call(v, {"x-fakellm-status": "429", "x-fakellm-retry-after": "60", "x-fakellm-fail-count": "1"})
    assert r.status_code == 200
    entries = log(v, key)
    assert [e["outcome"] for e in entries] == ["status:429", "ok"]
    assert entries[1]["time_ms"] - entries[0]["time_ms"] < 5000   # capped, it would have been 10 to 15 s
    assert time.monotonic() - t0 < 8


def test_total_timeout_bounds_a_call_only_until_its_response_starts(rstack):
    # 8 events 400 ms apart: the stream outlives total_timeout many times over, and no gap nears idle_timeout
    v = rstack({"total_timeout": "1s", "idle_timeout": "5s"})
    t0 = time.monotonic()
    r, key = call(v, {"x-fakellm-chunks": "8", "x-fakellm-chunk-delay-ms": "400"}, stream=True)
    elapsed = time.monotonic() - t0
    assert r.status_code == 200
    events = sse_events(r.text)
    assert events[-1] == "[DONE]"
    assert sum(1 for e in events if e != "[DONE]" and json.loads(e)["choices"] and
               json.loads(e)["choices"][0]["delta"].get("content")) == 8
    assert elapsed > 3                           # ran well past the 1 s total timeout
    assert outcomes(v, key) == ["ok"]


def test_idle_timeout_restarts_with_every_event(rstack):
    # 8 events 600 ms apart under a 1 s idle timeout: the stream lasts about 5 s, four times the timeout, and
    # each gap is under it, so it is never cut (the clock restarts lazily: the timer, armed once, is armed
    # again for what is left each time it finds progress)
    v = rstack({"idle_timeout": "1s"})
    t0 = time.monotonic()
    r, key = call(v, {"x-fakellm-chunks": "8", "x-fakellm-chunk-delay-ms": "600"}, stream=True)
    assert r.status_code == 200
    events = sse_events(r.text)
    assert events[-1] == "[DONE]"
    assert sum(1 for e in events if e != "[DONE]" and json.loads(e)["choices"] and
               json.loads(e)["choices"][0]["delta"].get("content")) == 8
    assert time.monotonic() - t0 > 4
    assert outcomes(v, key) == ["ok"]


def test_a_stream_that_stalls_past_idle_timeout_is_cut_even_within_total_timeout(rstack):
    v = rstack({"total_timeout": "60s", "idle_timeout": "1s"})
    t0 = time.monotonic()
    with pytest.raises(httpx.RemoteProtocolError):
        with httpx.stream("POST", v.url + "/v1/chat/completions", timeout=30,
                          headers={"x-fakellm-chunks": "5", "x-fakellm-stall-after": "2", "x-fakellm-stall-ms": "20000"},
                          json={"model": "m", "stream": True, "messages": []}) as r:
            for _ in r.iter_text():
                pass
    assert 0.9 < time.monotonic() - t0 < 15      # the idle timeout cut it, long before the stall ended
