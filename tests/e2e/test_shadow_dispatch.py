"""The shadow_dispatch plugin end to end: a routed chat request is copied to
the decision's shadow model (a stand-in server that records what it gets
and answers slowly), with the shadow's upstream id and only the headers
forward_headers names; the client's answer comes from the primary
(fakellm), unchanged and without waiting for the copy; max_concurrency
copies in flight at most, the rest dropped and counted; a decision without
the plugin sends no copy; credential headers are refused at load."""
import subprocess
import time

import httpx
import pytest

from conftest import ENV, VSR_BIN, config_yaml, free_port, model_yaml, wait_until
from remote_classifier import RemoteClassifier

SHADOW_DELAY = 1.5


def shadow_answer(path, body):
    return 200, {"id": "s", "object": "chat.completion", "model": body.get("model"),
                 "choices": [{"index": 0, "message": {"role": "assistant", "content": "SHADOW ANSWER"},
                              "finish_reason": "stop"}]}, SHADOW_DELAY


@pytest.fixture
def shadow():
    s = RemoteClassifier(shadow_answer)
    yield s
    s.close()


def start(vsr, fakellm, shadow, extra=""):
    be = fakellm("primary")
    port = free_port()
    cfg = config_yaml(port, [model_yaml("m1", [be.endpoint]),
                             model_yaml("candidate", [f"127.0.0.1:{shadow.port}"], "candidate-v2")], default="m1")
    cfg = cfg.replace("\nglobal:", f"""
routing:
  signals:
    keywords:
      - {{name: kw_shadow, operator: OR, keywords: ["shadowme"]}}
  decisions:
    - name: shadowed
      priority: 10
      rules: {{type: keyword, name: kw_shadow}}
      modelRefs: [{{model: m1}}]
      plugins:
        - type: shadow_dispatch
          configuration: {{enabled: true, model: candidate, max_concurrency: 1, timeout_seconds: 10,
                           forward_headers: [x-trace-me]{extra}}}
global:""", 1)
    v = vsr(cfg, workers=1, port=port)
    v.be = be
    return v


def metric(v, result):
    for line in httpx.get(v.metrics_url, timeout=5).text.splitlines():
        if line.startswith(f'vsr_shadow_dispatch_total{{model="candidate",result="{result}"}}'):
            return float(line.split()[-1])
    return 0.0


def ask(v, word, **headers):
    with v.client(timeout=30) as c:
        t0 = time.monotonic()
        r = c.post("/v1/chat/completions", json={"model": "auto", "messages": [{"role": "user", "content": word}]},
                   headers={"authorization": "Bearer sk-client", "x-trace-me": "t-1", "x-other": "o", **headers})
        return r, time.monotonic() - t0


def test_the_copy_goes_to_the_shadow_and_the_client_does_not_wait(vsr, fakellm, shadow):
    v = start(vsr, fakellm, shadow)
    r, took = ask(v, "shadowme please")
    assert r.status_code == 200, r.text
    assert r.headers["x-vsr-selected-decision"] == "shadowed"
    assert r.headers["x-fakellm-backend"] == "primary"
    assert "SHADOW ANSWER" not in r.text
    assert took < SHADOW_DELAY, took  # the shadow answers later; the client never waits for it
    wait_until(lambda: metric(v, "ok") == 1, timeout=15, what="the shadow copy's end")
    (req,) = shadow.requests
    assert req["path"] == "/v1/chat/completions"
    assert req["body"]["model"] == "candidate-v2"
    assert req["body"]["messages"] == [{"role": "user", "content": "shadowme please"}]
    assert req["headers"]["x-trace-me"] == "t-1"
    assert "authorization" not in req["headers"] and "x-other" not in req["headers"]
    # a request of another decision: no copy
    r, _ = ask(v, "no copy for this one")
    assert r.status_code == 200
    time.sleep(0.3)
    assert len(shadow.requests) == 1


def test_max_concurrency_drops_and_counts(vsr, fakellm, shadow):
    v = start(vsr, fakellm, shadow)
    for _ in range(3):  # the first copy is still out (SHADOW_DELAY) when the next two come
        r, took = ask(v, "shadowme")
        assert r.status_code == 200 and took < SHADOW_DELAY
    assert metric(v, "dropped") == 2
    wait_until(lambda: metric(v, "ok") == 1, timeout=15, what="the shadow copy's end")
    assert len(shadow.requests) == 1
    # once it is back, the next copy goes
    ask(v, "shadowme")
    wait_until(lambda: metric(v, "ok") == 2, timeout=15, what="the second copy's end")


def test_a_stop_with_a_copy_in_flight_is_clean(vsr, fakellm, shadow):
    v = start(vsr, fakellm, shadow)
    r, _ = ask(v, "shadowme")
    assert r.status_code == 200
    wait_until(lambda: len(shadow.requests) == 1, timeout=10, what="the copy at the shadow")
    v.proc.stop()  # the copy is still out (the shadow answers after SHADOW_DELAY)
    v.proc.assert_clean_exit()


def test_sample_rate_zero_sends_nothing(vsr, fakellm, shadow):
    v = start(vsr, fakellm, shadow, extra=", sample_rate: 0")
    r, _ = ask(v, "shadowme")
    assert r.status_code == 200
    assert metric(v, "sampled_out") == 1
    assert shadow.requests == []


def test_extproc_refuses_what_it_cannot_send(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("""version: v0.3
providers:
  models:
    - {name: m, backend_refs: [{endpoint: "127.0.0.1:9"}]}
    - {name: s, backend_refs: [{endpoint: "127.0.0.1:9"}]}
routing:
  decisions:
    - name: d
      rules: {operator: AND, conditions: []}
      modelRefs: [{model: m}]
      plugins:
        - type: shadow_dispatch
          configuration: {enabled: true, model: s}
""")
    ok = subprocess.run([VSR_BIN, "config", "validate", str(path)], env=ENV, capture_output=True, text=True,
                        timeout=30)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    p = subprocess.run([VSR_BIN, "config", "validate", str(path), "--gateway", "extproc"], env=ENV,
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 2, p.stdout + p.stderr
    assert 'decision "d": shadow_dispatch: vsr sends shadow copies only with --gateway standalone' in p.stderr


@pytest.mark.parametrize("header", ["authorization", "Cookie", "x-api-key", "x-user-openai-key", ":authority"])
def test_credentials_are_never_forwarded(tmp_path, header):
    path = tmp_path / "c.yaml"
    path.write_text(f"""version: v0.3
providers:
  models:
    - {{name: m, backend_refs: [{{endpoint: "127.0.0.1:9"}}]}}
    - {{name: s, backend_refs: [{{endpoint: "127.0.0.1:9"}}]}}
routing:
  decisions:
    - name: d
      rules: {{operator: AND, conditions: []}}
      modelRefs: [{{model: m}}]
      plugins:
        - type: shadow_dispatch
          configuration: {{enabled: true, model: s, forward_headers: ["{header}"]}}
""")
    p = subprocess.run([VSR_BIN, "config", "validate", str(path)], env=ENV, capture_output=True, text=True,
                       timeout=30)
    assert p.returncode == 2, p.stdout + p.stderr
    assert "shadow_dispatch: forward_headers may not name" in p.stderr, p.stderr
