"""Tracing end to end: W3C trace context in, spans out to an OTLP/HTTP
collector stand-in, traceparent to the backend; sampling; a dead or hung
collector never costs a request; no secret reaches logs, metrics or spans."""
import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from conftest import config_yaml, free_port, model_yaml, wait_until, echo

TID = "4bf92f3577b34da6a3ce929d0e0e4736"
PID = "00f067aa0ba902b7"


class Collector:
    """A minimal OTLP/HTTP JSON receiver: keeps every span it is sent."""

    def __init__(self):
        self.bodies, self.paths, self.ctypes = [], [], []
        outer = self

        class H(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self):
                n = int(self.headers.get("content-length", "0"))
                data = self.rfile.read(n)
                outer.paths.append(self.path)
                outer.ctypes.append(self.headers.get("content-type"))
                outer.bodies.append(json.loads(data))
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", "2")
                self.end_headers()
                self.wfile.write(b"{}")

            def log_message(self, *a):
                pass

        self.srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.port = self.srv.server_address[1]
        self.t = threading.Thread(target=self.srv.serve_forever, daemon=True)
        self.t.start()

    def spans(self, trace_id=None):
        out = []
        for b in list(self.bodies):
            for rs in b["resourceSpans"]:
                for ss in rs["scopeSpans"]:
                    out += [s for s in ss["spans"] if trace_id is None or s["traceId"] == trace_id]
        return out

    def resources(self):
        return [rs["resource"] for b in list(self.bodies) for rs in b["resourceSpans"]]

    def close(self):
        self.srv.shutdown()
        self.srv.server_close()


@pytest.fixture
def collector():
    c = Collector()
    yield c
    c.close()


def tracing_yaml(endpoint, sampling="type: always_on"):
    return f"""    observability:
      tracing:
        enabled: true
        provider: opentelemetry
        exporter:
          type: otlp
          endpoint: {endpoint}
        sampling:
          {sampling}
        resource:
          service_name: vsr-test
          deployment_environment: e2e
"""


def start(vsr, fakellm, endpoint, sampling="type: always_on", backend_args=(), rel=None, listener_extra="",
          backend_extra=None):
    be = fakellm("be", args=backend_args)
    port = free_port()
    b = {"endpoint": be.endpoint}
    if backend_extra:
        b.update(backend_extra)
    model = model_yaml("m", [b])
    if rel:
        model = model.replace("      backend_refs:", "      reliability:\n" +
                              "".join(f"        {k}: {v}\n" for k, v in rel.items()) + "      backend_refs:")
    v = vsr(config_yaml(port, [model], default="m", listener_extra=listener_extra,
                        global_extra=tracing_yaml(endpoint, sampling)), port=port)
    v.backend = be
    return v


def attr(span, key):
    for a in span.get("attributes", []):
        if a["key"] == key:
            val = a["value"]
            return val.get("stringValue", val.get("intValue"))
    return None


def by_name(spans, name):
    return [s for s in spans if s["name"] == name]


def metrics(v):
    out = {}
    for line in httpx.get(v.metrics_url).text.splitlines():
        if line and not line.startswith("#"):
            k, val = line.rsplit(" ", 1)
            out[k] = float(val)
    return out


def test_spans_tree_and_propagation(vsr, fakellm, collector):
    v = start(vsr, fakellm, f"http://127.0.0.1:{collector.port}")
    r = v.post_chat({"model": "m", "messages": [{"role": "user", "content": "hello"}]},
                    headers={"traceparent": f"00-{TID}-{PID}-01", "tracestate": "congo=t61rcWkgMzE,rojo=00f067aa"})
    assert r.status_code == 200
    sent = echo(r)["headers"]
    version, tid, parent, flags = sent["traceparent"].split("-")
    assert (version, tid, flags) == ("00", TID, "01")
    assert parent != PID                      # vsr's attempt span, not the caller's
    assert sent["tracestate"] == "congo=t61rcWkgMzE,rojo=00f067aa"

    wait_until(lambda: len(collector.spans(TID)) >= 3, what="three spans")
    spans = collector.spans(TID)
    (root,) = by_name(spans, "vsr.request")
    (routing,) = by_name(spans, "vsr.routing")
    (attempt,) = by_name(spans, "vsr.upstream_attempt")
    assert root["parentSpanId"] == PID and root["kind"] == 2
    assert routing["parentSpanId"] == root["spanId"] and attempt["parentSpanId"] == root["spanId"]
    assert attempt["spanId"] == parent and attempt["kind"] == 3
    assert attr(root, "http.response.status_code") == "200" and attr(root, "url.path") == "/v1/chat/completions"
    assert attr(routing, "vsr.selected_model") == "m"
    assert attr(attempt, "server.address") == v.backend.endpoint
    for s in spans:
        assert int(s["startTimeUnixNano"]) <= int(s["endTimeUnixNano"])
        assert abs(int(s["startTimeUnixNano"]) / 1e9 - time.time()) < 60
        assert len(s["spanId"]) == 16 and s["spanId"] == s["spanId"].lower()
    assert int(root["startTimeUnixNano"]) <= int(attempt["startTimeUnixNano"])
    assert collector.paths[0] == "/v1/traces" and collector.ctypes[0] == "application/json"
    res = collector.resources()[0]["attributes"]
    assert {"key": "service.name", "value": {"stringValue": "vsr-test"}} in res
    assert "hello" not in json.dumps(collector.bodies)   # no prompt text in spans


def test_retry_gives_two_attempt_spans(vsr, fakellm, collector):
    v = start(vsr, fakellm, f"http://127.0.0.1:{collector.port}", rel={"retry_count": 2, "retry_on": "5xx"})
    r = v.post_chat({"model": "m", "messages": []},
                    headers={"traceparent": f"00-{TID}-{PID}-01", "x-fakellm-key": "k1",
                             "x-fakellm-status": "503", "x-fakellm-fail-count": "1"})
    assert r.status_code == 200 and r.headers["x-vsr-upstream-attempts"] == "2"
    parent = echo(r)["headers"]["traceparent"].split("-")[2]
    wait_until(lambda: len(by_name(collector.spans(TID), "vsr.upstream_attempt")) == 2, what="two attempt spans")
    spans = collector.spans(TID)
    (root,) = by_name(spans, "vsr.request")
    a1, a2 = sorted(by_name(spans, "vsr.upstream_attempt"), key=lambda s: attr(s, "vsr.attempt"))
    assert a1["parentSpanId"] == a2["parentSpanId"] == root["spanId"]
    assert a1["spanId"] != a2["spanId"] and a2["spanId"] == parent
    assert attr(a1, "http.response.status_code") == "503" and a1["status"]["code"] == 2
    assert attr(a2, "http.response.status_code") == "200"


def test_tracestate_fields_are_joined_and_invalid_ones_dropped(vsr, fakellm, collector):
    v = start(vsr, fakellm, f"http://127.0.0.1:{collector.port}")
    tp = f"00-{TID}-{PID}-01"
    # two fields are one list; httpx sends a list of pairs as repeated fields
    with v.client() as c:
        r = c.post("/v1/chat/completions", json={"model": "m", "messages": []},
                   headers=[("traceparent", tp), ("tracestate", "a=1"), ("tracestate", "b=2")])
    assert echo(r)["headers"]["tracestate"] == "a=1,b=2"
    r = v.post_chat({"model": "m", "messages": []}, headers={"traceparent": tp, "tracestate": "Bad Key=1"})
    assert "tracestate" not in echo(r)["headers"]
    assert echo(r)["headers"]["traceparent"].startswith(f"00-{TID}-")


def test_invalid_traceparent_starts_a_new_trace(vsr, fakellm, collector):
    v = start(vsr, fakellm, f"http://127.0.0.1:{collector.port}")
    bad = f"00-{TID.upper()}-{PID}-01"       # uppercase hex is invalid
    r = v.post_chat({"model": "m", "messages": []}, headers={"traceparent": bad, "tracestate": "a=b"})
    sent = echo(r)["headers"]
    _, tid, _, _ = sent["traceparent"].split("-")
    assert tid != TID.lower() and len(tid) == 32
    assert "tracestate" not in sent            # it belonged to the discarded parent
    wait_until(lambda: collector.spans(tid), what="the new trace's spans")
    (root,) = by_name(collector.spans(tid), "vsr.request")
    assert "parentSpanId" not in root


def test_sampling_zero_exports_no_new_roots(vsr, fakellm, collector):
    v = start(vsr, fakellm, f"http://127.0.0.1:{collector.port}", sampling="type: probabilistic\n          rate: 0")
    tids = []
    for _ in range(5):
        r = v.post_chat({"model": "m", "messages": []})
        assert r.status_code == 200
        _, tid, _, flags = echo(r)["headers"]["traceparent"].split("-")
        assert flags == "00"
        tids.append(tid)
    # an incoming sampled parent is still honoured: its spans arrive, and
    # by then (one exporter, in order) the unsampled ones would have too
    r = v.post_chat({"model": "m", "messages": []}, headers={"traceparent": f"00-{TID}-{PID}-01"})
    assert echo(r)["headers"]["traceparent"].endswith("-01")
    wait_until(lambda: collector.spans(TID), what="the sampled parent's spans")
    assert all(not collector.spans(t) for t in tids)
    assert {s["traceId"] for s in collector.spans()} == {TID}
    # and an unsampled parent is not exported either
    r = v.post_chat({"model": "m", "messages": []}, headers={"traceparent": f"00-{'1' * 32}-{PID}-00"})
    assert echo(r)["headers"]["traceparent"].startswith(f"00-{'1' * 32}-") and r.status_code == 200


def test_tracing_off_passes_traceparent_through(vsr, fakellm):
    be = fakellm("be")
    port = free_port()
    v = vsr(config_yaml(port, [model_yaml("m", [be.endpoint])], default="m"), port=port)
    tp = f"00-{TID}-{PID}-01"
    r = v.post_chat({"model": "m", "messages": []}, headers={"traceparent": tp, "tracestate": "x=y"})
    assert echo(r)["headers"]["traceparent"] == tp and echo(r)["headers"]["tracestate"] == "x=y"
    text = httpx.get(v.metrics_url).text
    assert "vsr_access_log_dropped_total 0" in text and "vsr_tracing_" not in text


def test_dead_collector_never_fails_requests(vsr, fakellm):
    dead = free_port()                          # nothing listens there
    v = start(vsr, fakellm, f"http://127.0.0.1:{dead}")
    with v.client(timeout=10) as c:
        for _ in range(40):
            assert c.post("/v1/chat/completions", json={"model": "m", "messages": []}).status_code == 200
    wait_until(lambda: metrics(v).get("vsr_tracing_export_failures_total", 0) >= 1, what="an export failure")
    m = metrics(v)
    assert m['vsr_tracing_spans_dropped_total{reason="export_failed"}'] >= 3
    assert m.get("vsr_tracing_spans_exported_total") == 0


def test_hung_collector_never_slows_requests(vsr, fakellm):
    # accepts connections (the backlog) but never answers
    hung = socket.socket()
    hung.bind(("127.0.0.1", 0))
    hung.listen(64)
    try:
        v = start(vsr, fakellm, f"http://127.0.0.1:{hung.getsockname()[1]}")
        t0 = time.monotonic()
        with v.client(timeout=5) as c:
            for _ in range(200):
                assert c.post("/v1/chat/completions", json={"model": "m", "messages": []}).status_code == 200
        assert time.monotonic() - t0 < 60       # generous: a blocked worker would time out the client first
        wait_until(lambda: metrics(v).get("vsr_tracing_export_failures_total", 0) >= 1, timeout=15,
                   what="an export timeout")
    finally:
        hung.close()


def test_secrets_never_in_logs_metrics_or_spans(vsr, fakellm, collector):
    client_key = "sk-client-SECRET-4f1e"
    backend_key = "sk-backend-SECRET-9a2c"
    v = start(vsr, fakellm, f"http://127.0.0.1:{collector.port}",
              listener_extra=f'    api_keys: ["{client_key}"]', backend_extra={"api_key": backend_key})
    ok = v.post_chat({"model": "m", "messages": [{"role": "user", "content": "prompt-text-7781"}]},
                     headers={"authorization": f"Bearer {client_key}", "x-request-id": "rid-1",
                              "traceparent": f"00-{TID}-{PID}-01"})
    assert ok.status_code == 200
    assert echo(ok)["headers"]["authorization"] == f"Bearer {backend_key}"   # the backend's key replaced the client's
    bad = v.post_chat({"model": "m", "messages": []}, headers={"authorization": "Bearer sk-wrong-SECRET-0000"})
    assert bad.status_code == 401 and "SECRET" not in bad.text
    wait_until(lambda: collector.spans(TID), what="spans")
    wait_until(lambda: "rid-1" in v.proc.output(), what="the access-log line")
    texts = {"access log and error log": v.proc.output(), "metrics": httpx.get(v.metrics_url).text,
             "spans": json.dumps(collector.bodies)}
    for where, text in texts.items():
        for secret in (client_key, backend_key, "sk-wrong-SECRET-0000", "prompt-text-7781"):
            assert secret not in text, f"{secret} found in {where}"


def test_h2_requests_are_traced_like_http1(vsr, fakellm, collector):
    """A request over HTTP/2 gets the same spans, the same traceparent to the
    backend, and the configuration version, as one over HTTP/1.1."""
    import subprocess
    v = start(vsr, fakellm, f"http://127.0.0.1:{collector.port}")
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi over h2"}]})
    r = subprocess.run(["curl", "-sS", "--http2-prior-knowledge", "-D", "-", "--max-time", "30",
                        v.url + "/v1/chat/completions", "-H", "content-type: application/json",
                        "-H", f"traceparent: 00-{TID}-{PID}-01", "--data-binary", body],
                       capture_output=True, timeout=40)
    assert r.returncode == 0, r.stderr.decode()
    head, _, payload = r.stdout.decode().partition("\r\n\r\n")
    assert head.startswith("HTTP/2 200")
    fields = {k.strip().lower(): val.strip() for k, _, val in (l.partition(":") for l in head.split("\r\n")[1:])}
    assert fields["x-vsr-config-version"] == "1"
    sent = json.loads(payload)["fakellm"]["request"]["headers"]
    _, tid, parent, _ = sent["traceparent"].split("-")
    assert tid == TID and parent != PID
    wait_until(lambda: len(collector.spans(TID)) >= 3, what="three spans")
    spans = collector.spans(TID)
    (root,) = by_name(spans, "vsr.request")
    (attempt,) = by_name(spans, "vsr.upstream_attempt")
    assert root["parentSpanId"] == PID
    assert attempt["parentSpanId"] == root["spanId"] and attempt["spanId"] == parent


def test_runtime_call_and_graph_call_spans(vsr, fakellm, collector):
    """A request routed on an embeddings signal (the managed runtime, hash
    embedder) whose decision runs a fusion graph: one vsr.runtime_call span
    and one vsr.graph_call span per hop, under the request's root."""
    be = fakellm("be")
    port = free_port()
    doc = f"""version: v0.3
listeners:
  - {{name: l, address: 127.0.0.1, port: {port}}}
providers:
  defaults: {{model: a}}
  models:
    - {{name: a, backend_refs: [{{endpoint: "{be.endpoint}"}}]}}
    - {{name: b, backend_refs: [{{endpoint: "{be.endpoint}"}}]}}
routing:
  signals:
    embeddings:
      - {{name: greet, threshold: 0.5, candidates: ["hello there"]}}
  decisions:
    - name: panel
      rules: {{type: embedding, name: greet, on_error: match}}
      modelRefs: [{{model: a}}, {{model: b}}]
      algorithm: {{type: fusion, fusion: {{analysis_mode: none}}}}
global:
  services:
    management_api: {{port: {free_port()}}}
{tracing_yaml(f"http://127.0.0.1:{collector.port}")}  model_catalog:
    runtime:
      embedder: hash
"""
    v = vsr(doc, workers=1, port=port)
    r = v.post_chat({"model": "auto", "messages": [{"role": "user", "content": "hello there"}]},
                    headers={"traceparent": f"00-{TID}-{PID}-01"})
    assert r.status_code == 200, r.text
    assert r.headers["x-vsr-looper-iterations"] == "3"
    wait_until(lambda: len(by_name(collector.spans(TID), "vsr.graph_call")) == 3, what="three graph call spans")
    spans = collector.spans(TID)
    (root,) = by_name(spans, "vsr.request")
    (rt,) = by_name(spans, "vsr.runtime_call")
    assert attr(rt, "vsr.tasks") in (1, "1") and attr(rt, "vsr.outcome") == "ok"
    calls = sorted(by_name(spans, "vsr.graph_call"), key=lambda s: int(attr(s, "vsr.iteration")))
    assert [attr(c, "vsr.node") for c in calls] == ["panel", "panel", "synthesis"]
    assert attr(calls[2], "vsr.algorithm") == "fusion" and attr(calls[2], "vsr.model") == "a"
    for s in [rt] + calls:
        assert s["parentSpanId"] == root["spanId"]
        assert int(s["startTimeUnixNano"]) <= int(s["endTimeUnixNano"])
