"""The fault matrix in both gateway modes: each fault of the seed's list
(a 503, a 429, a reset or a per-try timeout once, a 400, a stream's 503, a
mid-stream drop, a 503 on every attempt, a reset or timeout on every
attempt), injected by fakellm, against vsr standalone and against vsr
--gateway extproc behind Envoy's side.  Envoy's side is the parity suite's
(test_mode_parity.via_envoy) with a router that plays Envoy's route
retries: the retry policy of the bootstrap `vsr envoy render` writes for
the same document, overridden by the five x-envoy-* headers of vsr's answer,
with Envoy's meaning of each retry_on token and its local replies.  Both
modes must make the same backend calls and give the client the same result;
where the seed says they differ (standalone falls back to the next
candidate on its local reply; Envoy's local reply reaches the client
without ext_proc), the difference is asserted."""
import contextlib
import subprocess
import time
import uuid

import httpx
import pytest
import yaml

from conftest import VSR_BIN, free_port
from test_extproc import pb, serve_extproc  # noqa: F401  (pb: the fixture)
from test_mode_parity import via_envoy

RELIABILITY = ('{retry_count: 1, retry_on: "5xx,retriable-status-codes", retriable_status_codes: [429], '
               'per_try_timeout: 1s, retry_back_off_base: 25ms}')


def document(port, mgmt, m_be, alt_be, fallback, decision_extra=""):
    return f"""version: v0.3
listeners:
  - {{name: main, address: 127.0.0.1, port: {port}, timeout: 20s}}
providers:
  defaults: {{model: m}}
  models:
    - name: m
      provider_model_id: m-v1
      reliability: {RELIABILITY}
      backend_refs: [{{name: m0, endpoint: "{m_be}"}}]
    - name: alt
      provider_model_id: alt-v1
      reliability: {RELIABILITY}
      backend_refs: [{{name: alt0, endpoint: "{alt_be}"}}]
routing:
  signals:
    keywords:
      - {{name: any, operator: OR, keywords: [hello]}}
  decisions:
    - name: chain
      rules: {{operator: AND, conditions: [{{type: keyword, name: any}}]}}
      modelRefs: [{{model: m}}, {{model: alt}}]
{decision_extra}
global:
  router:
    clear_route_cache: true
    fallback: {{enabled: {str(fallback).lower()}, max_attempts: 2, retryable_status_codes: [502, 503, 504]}}
  services:
    management_api: {{port: {mgmt}}}
"""


# ---- Envoy's router: route retries (Envoy's retry_on semantics, docs/reliability.md's table) ----

def route_policies(doc, tmp_path):
    """model name -> the retry policy of its route in the rendered bootstrap."""
    p = tmp_path / "render.yaml"
    p.write_text(doc)
    r = subprocess.run([VSR_BIN, "envoy", "render", str(p)], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    hcm = yaml.safe_load(r.stdout)["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]
    routes = hcm["typed_config"]["route_config"]["virtual_hosts"][0]["routes"]
    return {rt["match"]["headers"][0]["string_match"]["exact"]: rt["route"].get("retry_policy", {})
            for rt in routes if "headers" in rt["match"]}


def seconds(d):
    return float(d[:-2]) / 1000 if d.endswith("ms") else float(d.rstrip("s"))


RESET_REPLY = (b"upstream connect error or disconnect/reset before headers. retried and the latest reset reason: "
               b"connection termination")


def envoy_router(policies):
    @contextlib.contextmanager
    def route(method, url, body, headers, cluster):
        h = dict(headers)
        pol = policies[cluster]
        retry_on = set((h.get("x-envoy-retry-on") or pol.get("retry_on", "")).split(",")) - {""}
        retries = int(h.get("x-envoy-max-retries", pol.get("num_retries", 0)))
        per_try = (int(h["x-envoy-upstream-rq-per-try-timeout-ms"]) / 1000
                   if "x-envoy-upstream-rq-per-try-timeout-ms" in h else seconds(pol.get("per_try_timeout", "30s")))
        codes = ({int(c) for c in h["x-envoy-retriable-status-codes"].split(",")}
                 if "x-envoy-retriable-status-codes" in h else set(pol.get("retriable_status_codes", [])))
        no_answer = bool(retry_on & {"5xx", "gateway-error", "reset"})  # reset, EOF, per-try timeout
        send = [(k, v) for k, v in headers if not k.startswith("x-envoy-")]
        with httpx.Client(timeout=httpx.Timeout(30, read=per_try)) as c:
            for attempt in range(retries + 1):
                last = attempt == retries
                try:
                    up = c.send(c.build_request(method, url, content=body, headers=send), stream=True)
                except httpx.TimeoutException:
                    if no_answer and not last:
                        continue
                    yield None, (504, {"content-type": "text/plain"}, b"upstream request timeout")
                    return
                except httpx.TransportError:
                    if no_answer and not last:
                        continue
                    yield None, (503, {"content-type": "text/plain"}, RESET_REPLY)
                    return
                s = up.status_code
                again = (("5xx" in retry_on and s >= 500) or ("gateway-error" in retry_on and s in (502, 503, 504))
                         or ("retriable-status-codes" in retry_on and s in codes))
                if again and not last:
                    up.close()
                    time.sleep(0.025)
                    continue
                try:
                    yield up, None
                finally:
                    up.close()
                return
    return route


# ---- both modes ----

@pytest.fixture
def matrix(vsr, fakellm, pb, tmp_path):  # noqa: F811
    """make(fallback, m_args): vsr standalone and vsr extproc, each with its
    own backends m and alt (m started with m_args); returns a function that
    sends one request through a mode and gives its result and its calls."""
    def make(fallback=False, m_args=(), decision_extra=""):
        sides = {}
        for mode in ("standalone", "extproc"):
            m_be, alt_be = fakellm(f"m-{mode}", args=m_args), fakellm(f"alt-{mode}")
            port, mgmt = free_port(), free_port()
            doc = document(port, mgmt, m_be.endpoint, alt_be.endpoint, fallback, decision_extra)
            if mode == "standalone":
                v = vsr(doc, port=port)
                sides[mode] = (v, None, (m_be, alt_be))
                continue
            v = serve_extproc(vsr, doc, port)
            envoy_side = (pb, v.xport, {"m": m_be, "alt": alt_be, "default": "m"})
            sides[mode] = (v, (envoy_side, envoy_router(route_policies(doc, tmp_path))), (m_be, alt_be))

        def send(mode, faults, stream=False, content="hello"):
            v, envoy, (m_be, alt_be) = sides[mode]
            key = str(uuid.uuid4())
            body = {"model": "auto", "messages": [{"role": "user", "content": content}]}
            if stream:
                body["stream"] = True
            data = httpx.Request("POST", "http://x", json=body).content
            headers = [("content-type", "application/json"), ("x-fakellm-key", key), *faults.items()]
            try:
                if envoy is None:
                    r = httpx.post(v.url + "/v1/chat/completions", content=data, headers=headers, timeout=30)
                    status, hd, out = r.status_code, dict(r.headers), r.content
                else:
                    status, hd, out = via_envoy(envoy[0], "POST", "/v1/chat/completions", headers, data,
                                                upstream=envoy[1])
                result = (status, hd.get("x-fakellm-backend"), out.rstrip().endswith(b"data: [DONE]"))
            except httpx.RemoteProtocolError:
                result = ("cut", None, False)

            def log(be):
                return [e["outcome"] for e in httpx.get(be.url + f"/_fakellm/log?key={key}", timeout=5)
                        .json()["entries"]]
            return result, {"m": log(m_be), "alt": log(alt_be)}, out if result[0] != "cut" else b""
        return send
    return make


SAME = {
    # fault: (request headers, stream, client result, backend calls)
    "503-once": ({"x-fakellm-status": "503", "x-fakellm-fail-count": "1"}, False,
                 (200, "m-{mode}", False), {"m": ["status:503", "ok"], "alt": []}),
    "429-once": ({"x-fakellm-status": "429", "x-fakellm-fail-count": "1"}, False,
                 (200, "m-{mode}", False), {"m": ["status:429", "ok"], "alt": []}),
    "reset-once": ({"x-fakellm-reset": "before-headers", "x-fakellm-fail-count": "1"}, False,
                   (200, "m-{mode}", False), {"m": ["reset", "ok"], "alt": []}),
    "400": ({"x-fakellm-status": "400"}, False, (400, "m-{mode}", False), {"m": ["status:400"], "alt": []}),
    "stream-503-once": ({"x-fakellm-status": "503", "x-fakellm-fail-count": "1", "x-fakellm-chunks": "3"}, True,
                        (200, "m-{mode}", True), {"m": ["status:503", "ok"], "alt": []}),
    "mid-stream-drop": ({"x-fakellm-chunks": "10", "x-fakellm-drop-after": "2"}, True,
                        ("cut", None, False), {"m": ["drop"], "alt": []}),
    "503-every-attempt": ({"x-fakellm-status": "503"}, False,
                          (503, "m-{mode}", False), {"m": ["status:503", "status:503"], "alt": []}),
}


@pytest.mark.parametrize("fault", list(SAME))
def test_both_modes_meet_a_fault_alike(matrix, fault):
    """Fallback off: the same backend calls and the same client result."""
    send = matrix()
    headers, stream, result, calls = SAME[fault]
    for mode in ("standalone", "extproc"):
        want = (result[0], result[1].format(mode=mode) if result[1] else None, result[2])
        got, got_calls, _ = send(mode, headers, stream=stream)
        assert (mode, got) == (mode, want)
        assert (mode, got_calls) == (mode, calls)


def test_per_try_timeout_once_is_retried_in_both_modes(matrix):
    send = matrix()
    for mode in ("standalone", "extproc"):
        got, calls, _ = send(mode, {"x-fakellm-delay-ms": "3000", "x-fakellm-fail-count": "1"})
        assert (mode, got) == (mode, (200, f"m-{mode}", False))
        assert (mode, len(calls["m"]), calls["alt"]) == (mode, 2, [])


def test_a_decisions_override_reaches_envoy_as_the_five_headers(matrix):
    """The decision's reliability overrides the model's: standalone's
    upstream layer applies it, and in extproc mode it travels as
    x-envoy-max-retries / x-envoy-retry-on and Envoy's router applies it
    over the route's policy, so both modes try a failing backend 4 times."""
    send = matrix(decision_extra='      reliability: {retry_count: 3, retry_on: "gateway-error"}')
    for mode in ("standalone", "extproc"):
        got, calls, _ = send(mode, {"x-fakellm-status": "503"})
        assert (mode, got, calls) == (mode, (503, f"m-{mode}", False), {"m": ["status:503"] * 4, "alt": []})
        got, calls, _ = send(mode, {"x-fakellm-status": "502", "x-fakellm-fail-count": "3"})
        assert (mode, got, calls) == (mode, (200, f"m-{mode}", False),
                                      {"m": ["status:502"] * 3 + ["ok"], "alt": []})


@pytest.mark.parametrize("fault", ["reset", "timeout"])
def test_every_attempt_failing_without_fallback(matrix, fault):
    """No answer on every attempt, fallback off: both modes try m twice and
    give a local reply with the same status; the bodies are each gateway's
    own (vsr's OpenAI-style error, Envoy's text)."""
    faults = ({"x-fakellm-reset": "before-headers"} if fault == "reset" else {"x-fakellm-delay-ms": "3000"})
    status = 503 if fault == "reset" else 504
    send = matrix()
    (s_res, s_calls, s_body), (x_res, x_calls, x_body) = send("standalone", faults), send("extproc", faults)
    assert s_res == x_res == (status, None, False)
    assert len(s_calls["m"]) == len(x_calls["m"]) == 2 and s_calls["alt"] == x_calls["alt"] == []
    if fault == "reset":
        assert s_calls["m"] == x_calls["m"] == ["reset", "reset"]
    assert b'"error"' in s_body
    assert x_body in (RESET_REPLY, b"upstream request timeout")


@pytest.mark.parametrize("fault", ["reset", "timeout", "503"])
def test_standalone_falls_back_where_envoy_gives_its_local_reply(matrix, fault):
    """m's backend fails every attempt (a reset, a hang past the per-try
    timeout, or a 503), fallback on: standalone tries m as its policy says,
    then the next candidate, and the client gets alt's answer; in extproc
    mode Envoy retries m as the rendered route says and the client gets its
    local reply (or m's 503): the fallback is standalone's alone."""
    m_args = {"reset": ("--reset-before-headers",), "timeout": ("--delay-ms", "3000"),
              "503": ("--status", "503")}[fault]
    send = matrix(fallback=True, m_args=m_args)
    s_res, s_calls, _ = send("standalone", {})
    assert s_res == (200, "alt-standalone", False)
    assert len(s_calls["m"]) == 2 and s_calls["alt"] == ["ok"]
    x_res, x_calls, x_body = send("extproc", {})
    assert x_res == ({"reset": 503, "timeout": 504, "503": 503}[fault], "m-extproc" if fault == "503" else None,
                     False)
    assert len(x_calls["m"]) == 2 and x_calls["alt"] == []
    if fault == "reset":
        assert x_body == RESET_REPLY
