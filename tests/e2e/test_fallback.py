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
