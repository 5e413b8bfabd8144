"""Cross-model fallback end to end (ref §1.7): the decision's candidates in
order, never revisited, gated by the policy, with a per-model circuit
breaker; headers name the model that served and the fallback path."""
import uuid

import httpx
import pytest

from conftest import free_port


def doc(port, mgmt, bad, good, third, fallback, decision_fallback=""):
    return f"""version: v0.3
listeners:
  - {{name: l, address: 127.0.0.1, port: {port}, timeout: 20s}}
providers:
  defaults: {{model: good}}
  models:
    - {{name: bad, provider_model_id: bad-v1, backend_refs: [{{endpoint: "{bad}"}}]}}
    - {{name: good, provider_model_id: good-v1, backend_refs: [{{endpoint: "{good}"}}]}}
    - {{name: third, provider_model_id: third-v1, backend_refs: [{{endpoint: "{third}"}}]}}
routing:
  signals:
    keywords:
      - {{name: any, operator: OR, keywords: [hello]}}
  decisions:
    - name: chain
      rules: {{operator: AND, conditions: [{{type: keyword, name: any}}]}}
      modelRefs: [{{model: bad}}, {{model: good}}, {{model: third}}]
{decision_fallback}
global:
  router:
    fallback:
{fallback}
  services:
    management_api: {{port: {mgmt}}}
"""


@pytest.fixture
def fstack(vsr, fakellm):
    def make(fallback, bad_args=("--status", "503"), decision_fallback=""):
        bad, good, third = fakellm("bad", args=bad_args), fakellm("good"), fakellm("third")
        port = free_port()
        v = vsr(doc(port, free_port(), bad.endpoint, good.endpoint, third.endpoint, fallback, decision_fallback),
                port=port)
        v.bad, v.good, v.third = bad, good, third
        return v
    return make


def ask(v, headers=None):
    key = str(uuid.uuid4())
    r = httpx.post(v.url + "/v1/chat/completions", timeout=30, headers={"x-fakellm-key": key, **(headers or {})},
                   json={"model": "auto", "messages": [{"role": "user", "content": "hello"}]})
    return r, key


def calls(be, key):
    return [e["outcome"] for e in httpx.get(be.url + f"/_fakellm/log?key={key}").json()["entries"]]


ENABLED = "      enabled: true\n      max_attempts: 3\n      retryable_status_codes: [502, 503, 504]"


def test_falls_back_to_the_next_candidate(fstack):
    v = fstack(ENABLED)
    r, key = ask(v)
    assert r.status_code == 200
    assert r.headers["x-fakellm-backend"] == "good"
    assert r.headers["x-vsr-selected-model"] == "good"
    assert r.headers["x-vsr-fallback-path"] == "bad,good"
    assert calls(v.bad, key) == ["status:503"]
    assert calls(v.good, key) == ["ok"]
    assert calls(v.third, key) == []
    # the candidate's request is built like the first one: its own model id
    assert r.json()["fakellm"]["request"]["headers"]["x-selected-model"] == "good"
    assert '"model": "good-v1"' in r.json()["fakellm"]["request"]["body"]


def test_disabled_policy_relays_the_failure(fstack):
    v = fstack("      enabled: false")
    r, key = ask(v)
    assert r.status_code == 503
    assert "x-vsr-fallback-path" not in r.headers
    assert calls(v.good, key) == []


def test_unlisted_status_does_not_fall_back(fstack):
    v = fstack(ENABLED, bad_args=("--status", "500"))
    r, key = ask(v)
    assert r.status_code == 500
    assert calls(v.good, key) == []


def test_max_attempts_counts_the_first(fstack):
    v = fstack("      enabled: true\n      max_attempts: 1")
    r, key = ask(v)
    assert r.status_code == 503
    assert calls(v.good, key) == []


def test_reset_on_every_attempt_falls_back(fstack):
    v = fstack(ENABLED, bad_args=())
    r, key = ask(v, {"x-fakellm-reset": "before-headers"})
    # every candidate resets: each is tried once, then the local reply
    assert r.status_code == 503
    assert r.headers.get("x-vsr-fallback-path") is None  # no response head ever came
    assert calls(v.bad, key) == ["reset"]
    assert calls(v.good, key) == ["reset"]
    assert calls(v.third, key) == ["reset"]


def test_connect_failure_falls_back(vsr, fakellm):
    good, third = fakellm("good"), fakellm("third")
    port = free_port()
    v = vsr(doc(port, free_port(), f"127.0.0.1:{free_port()}", good.endpoint, third.endpoint, ENABLED), port=port)
    v.good = good
    r, key = ask(v)
    assert r.status_code == 200
    assert r.headers["x-vsr-fallback-path"] == "bad,good"


def test_decision_policy_overrides_global(fstack):
    v = fstack("      enabled: false", decision_fallback="      fallback: {enabled: true, max_attempts: 2}")
    r, key = ask(v)
    assert r.status_code == 200
    assert r.headers["x-fakellm-backend"] == "good"


def test_circuit_breaker_skips_an_open_candidate(fstack):
    v = fstack(ENABLED + "\n      circuit_breaker: {consecutive_failures: 2, cooldown_period: 30s}")
    keys = [ask(v)[1] for _ in range(4)]
    # the first two requests try bad and fail over; then its circuit is open and it is skipped
    assert [len(calls(v.bad, k)) for k in keys] == [1, 1, 0, 0]
    assert all(calls(v.good, k) == ["ok"] for k in keys)


def metric_lines(v):
    return {l.rsplit(" ", 1)[0]: float(l.rsplit(" ", 1)[1])
            for l in httpx.get(v.metrics_url).text.splitlines() if l and not l.startswith("#")}


def series(lines, name, **labels):
    return sum(val for k, val in lines.items()
               if k.startswith(name + "{") and all(f'{lk}="{lv}"' in k for lk, lv in labels.items()))


def access_line(v, key):
    import json
    from conftest import wait_until
    found = []

    def look():
        found[:] = [json.loads(l) for l in v.proc.output().splitlines()
                    if l.startswith("{") and f'"x_request_id":"{key}"' in l]
        return found
    wait_until(look, what="the access-log line")
    return found[0]


def test_attempts_are_counted_under_the_model_they_went_to(vsr, fakellm):
    """bad refuses connections (retried within its model), good answers: each
    attempt's series names the model it was sent to."""
    good, third = fakellm("good"), fakellm("third")
    port = free_port()
    v = vsr(doc(port, free_port(), f"127.0.0.1:{free_port()}", good.endpoint, third.endpoint, ENABLED), port=port)
    r, key = ask(v, {"x-request-id": "m-1"})
    assert r.status_code == 200 and r.headers["x-fakellm-backend"] == "good"
    m = metric_lines(v)
    bad_attempts = series(m, "vsr_upstream_attempts_total", model="bad", outcome="connect_failure")
    assert bad_attempts >= 1
    assert series(m, "vsr_upstream_attempts_total", model="good", outcome="connect_failure") == 0
    assert series(m, "vsr_upstream_attempts_total", model="good", outcome="ok") == 1
    assert series(m, "vsr_upstream_retries_total", model="good") == 0
    assert series(m, "vsr_upstream_retries_total", model="bad") == bad_attempts - 1
    line = access_line(v, "m-1")
    assert line["attempts"] == bad_attempts + 1          # every attempt of the request
    assert r.headers["x-vsr-upstream-attempts"] == "1"    # the serving model's
    # a dead backend is visible at info: model, endpoint, reason
    out = v.proc.output()
    assert "model bad endpoint primary (127.0.0.1:" in out and "failed: connection failure (connection refused)" in out


def test_access_log_names_choice_and_server_after_a_fallback(fstack):
    v = fstack(ENABLED)
    r, key = ask(v, {"x-request-id": "fb-1"})
    assert r.status_code == 200 and r.headers["x-vsr-selected-model"] == "good"
    line = access_line(v, "fb-1")
    assert line["selected_model"] == "bad"       # what the routing chose
    assert line["served_model"] == "good"        # what answered
    assert line["fallback_path"] == "bad,good"
    assert line["attempts"] == 2


def test_nothing_answered_has_no_served_model(fstack):
    v = fstack(ENABLED, bad_args=())
    r, key = ask(v, {"x-fakellm-reset": "before-headers", "x-request-id": "none-1"})
    assert r.status_code == 503
    line = access_line(v, "none-1")
    assert line["served_model"] is None and line["selected_model"] == "bad"
    assert line["fallback_path"] == "bad,good,third"


def test_a_model_skipped_for_its_open_circuit_is_not_on_the_path(fstack):
    v = fstack(ENABLED + "\n      circuit_breaker: {consecutive_failures: 1, cooldown_period: 30s}")
    r, _ = ask(v)
    assert r.headers["x-vsr-fallback-path"] == "bad,good"
    r, key = ask(v, {"x-request-id": "skip-1"})     # bad's circuit is open: skipped, never called
    assert r.status_code == 200 and calls(v.bad, key) == []
    assert "x-vsr-fallback-path" not in r.headers
    assert r.headers["x-vsr-upstream-attempts"] == "1"
    line = access_line(v, "skip-1")
    assert line["selected_model"] == "bad" and line["served_model"] == "good"
    assert line["fallback_path"] is None and line["attempts"] == 1
    assert "model bad: circuit breaker open for 30000 ms" in v.proc.output()


def test_the_last_candidates_circuit_opens_on_connection_failures(fstack):
    """A failure counts for every candidate's circuit, the last one's too
    (no next candidate to move to)."""
    v = fstack(ENABLED + "\n      circuit_breaker: {consecutive_failures: 2, cooldown_period: 30s}", bad_args=())
    for _ in range(2):
        r, _ = ask(v, {"x-fakellm-reset": "before-headers"})
        assert r.status_code == 503 and "reset reason" in r.text
    r, key = ask(v, {"x-fakellm-reset": "before-headers"})
    assert r.status_code == 503 and r.json()["error"]["code"] == "circuit_open"
    assert calls(v.third, key) == []
    out = v.proc.output()
    for m in ("bad", "good", "third"):
        assert f"model {m}: circuit breaker open" in out


def test_upstream_failure_lines_are_rate_limited(vsr):
    """At most 10 failure lines a second per worker; the next line says how
    many were left out."""
    import time
    port = free_port()
    dead = free_port()
    text = f"""version: v0.3
listeners:
  - {{name: l, address: 127.0.0.1, port: {port}}}
providers:
  models:
    - {{name: m, backend_refs: [{{endpoint: "127.0.0.1:{dead}"}}]}}
global:
  services:
    management_api: {{port: {free_port()}}}
"""
    v = vsr(text, port=port, workers=1)
    t0 = time.monotonic()
    with httpx.Client(base_url=v.url, timeout=30) as c:
        for _ in range(60):
            assert c.post("/v1/chat/completions", json={"model": "m", "messages": []}).status_code == 503
    elapsed = time.monotonic() - t0
    time.sleep(1.1)
    httpx.post(v.url + "/v1/chat/completions", json={"model": "m", "messages": []}, timeout=30)
    attempts = series(metric_lines(v), "vsr_upstream_attempts_total", model="m", outcome="connect_failure")
    out = v.proc.output()
    lines = [l for l in out.splitlines() if "model m endpoint " in l and " failed: connection failure" in l]
    windows = int(elapsed) + 3
    assert 1 <= len(lines) <= 10 * windows and attempts >= 60
    if len(lines) < attempts:
        assert "similar lines left out" in out
