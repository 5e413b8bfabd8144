"""`vsr serve --gateway extproc`: vsr as Envoy's ext_proc server.  A gRPC
client compiled from proto/ plays Envoy's part: it opens one Process stream
per request, sends each part of the request and of the upstream's answer,
and applies vsr's answers as Envoy does (removals, then sets from
raw_value; a replaced body; an immediate response), calling the backend
(fakellm) itself with the mutated request.  The tests assert the answers
and the client's result."""
import json
import queue
import socket
import subprocess
import sys
import threading
import time

import grpc  # python3-grpcio (scripts/setup-deps)
import httpx
import pytest

from conftest import ROOT, VSR_BIN, config_yaml, free_port, model_yaml, wait_until


PROCESS = "/envoy.service.ext_proc.v3.ExternalProcessor/Process"


@pytest.fixture(scope="module")
def pb(tmp_path_factory):
    """The ext_proc messages for Python, compiled from proto/ (Envoy's
    packages; the google.protobuf types are protobuf's own)."""
    out = tmp_path_factory.mktemp("pb")
    protos = [str(p.relative_to(ROOT / "proto")) for p in (ROOT / "proto" / "envoy").rglob("*.proto")]
    subprocess.run([sys.executable, "-m", "grpc_tools.protoc", "-I", str(ROOT / "proto"), f"--python_out={out}",
                    f"--grpc_python_out={out}", *protos], check=True)
    sys.path.insert(0, str(out))
    from envoy.service.ext_proc.v3 import external_processor_pb2 as m
    from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as g
    yield m, g
    sys.path.remove(str(out))


def serve_extproc(vsr, doc, port):
    """vsr --gateway extproc on doc, its gRPC listener on a free port
    (v.xport), once /ready answers on its metrics listener.  Drains in 5 s,
    so that a stream a failed test left open does not outlast the teardown."""
    xport = free_port()
    v = vsr(doc, port=port, wait_ready=False, extra_args=("--gateway", "extproc",
                                                          "--extproc-listen", f"127.0.0.1:{xport}",
                                                          "--drain-timeout", "5s"))
    ready_url = v.metrics_url.replace("/metrics", "/ready")

    def ready():
        assert v.proc.p.poll() is None, v.proc.output()
        try:
            return httpx.get(ready_url, timeout=1).status_code == 200
        except httpx.TransportError:
            return False
    wait_until(ready, what="vsr /ready on the metrics listener")
    v.xport = xport
    return v


def start_extproc(vsr, fakellm, extra_models=(), global_extra="", listener_extra=""):
    be = fakellm()
    port = free_port()
    cfg = config_yaml(port, [model_yaml("m", [be.endpoint], "up-m"), *extra_models], default="m",
                      global_extra=global_extra, listener_extra=listener_extra)
    return serve_extproc(vsr, cfg, port), be


class Envoy:
    """One Process stream, driven message by message."""

    def __init__(self, pb, port):
        self.m, g = pb
        self.chan = grpc.insecure_channel(f"127.0.0.1:{port}")
        self.q = queue.Queue()
        self.calls = g.ExternalProcessorStub(self.chan).Process(iter(self.q.get, None), timeout=30)

    def send(self, **part):
        self.q.put(self.m.ProcessingRequest(**part))
        return next(self.calls)

    def headers(self, pairs, eos=False, response=False):
        hm = self.m.HttpHeaders(end_of_stream=eos)
        for k, v in pairs:
            hm.headers.headers.add(key=k, raw_value=v.encode())
        return self.send(**{"response_headers" if response else "request_headers": hm})

    def body(self, data, eos=True, response=False):
        return self.send(**{"response_body" if response else "request_body":
                            self.m.HttpBody(body=data, end_of_stream=eos)})

    def end(self):
        self.q.put(None)
        rest = list(self.calls)
        self.chan.close()
        return rest


def common(answer):
    kind = answer.WhichOneof("response")
    assert kind in ("request_headers", "response_headers", "request_body", "response_body"), answer
    return getattr(answer, kind).response


def apply_headers(fields, mutation):
    """Envoy's rules: removals first, then sets (append false: overwrite) from raw_value."""
    out = [(k, v) for k, v in fields if k not in set(mutation.remove_headers)]
    for o in mutation.set_headers:
        assert o.header.value == "", "values go in raw_value"
        assert o.HasField("append") and not o.append.value
        out = [(k, v) for k, v in out if k != o.header.key] + [(o.header.key, o.header.raw_value.decode())]
    return out


CHAT = {"model": "m", "messages": [{"role": "user", "content": "hello there"}]}


def run_chat(pb, v, be, body, path="/v1/chat/completions", extra=()):
    """A whole request through Envoy's side: vsr's answers applied, the
    backend called with the result; returns (client status, headers, body)."""
    env = Envoy(pb, v.xport)
    data = json.dumps(body).encode()
    req = [(":method", "POST"), (":path", path), (":authority", "vsr"), ("content-type", "application/json"),
           ("content-length", str(len(data))), ("authorization", "Bearer client-key"), *extra]
    a = env.headers(req)
    assert a.WhichOneof("response") == "request_headers"
    req = apply_headers(req, common(a).header_mutation)
    a = env.body(data)
    if a.WhichOneof("response") == "immediate_response":
        im = a.immediate_response
        env.end()
        return im.status.code, {h.header.key: h.header.raw_value.decode() for h in im.headers.set_headers}, im.body, None
    c = common(a)
    req = apply_headers(req, c.header_mutation)
    if c.HasField("body_mutation"):
        data = c.body_mutation.body
    h = dict(req)
    assert h.get("content-length", str(len(data))) == str(len(data)), "Envoy fails a body whose length disagrees"
    assert "authorization" not in h, "the client's key reaches no provider"
    up = httpx.post(f"http://{be.endpoint}{h[':path']}", content=data, timeout=30,
                    headers={k: v for k, v in req if not k.startswith(":") and k != "content-length"})
    resp = [(":status", str(up.status_code))] + [(k, v) for k, v in up.headers.items()]
    a = env.headers(resp, response=True)
    c = common(a)
    resp = apply_headers(resp, c.header_mutation)
    mode = a.mode_override.response_body_mode
    out = up.content
    if mode:   # STREAMED (1) or BUFFERED (2): the body goes to vsr
        a = env.body(up.content, eos=True, response=True)
        if a.WhichOneof("response") == "immediate_response":
            out = a.immediate_response.body
        else:
            c = common(a)
            resp = apply_headers(resp, c.header_mutation)
            if c.HasField("body_mutation"):
                out = c.body_mutation.body if c.body_mutation.WhichOneof("mutation") == "body" else b""
    assert env.end() == []
    hd = dict(resp)
    return int(hd.pop(":status")), hd, out, h


def test_chat_routed_through_extproc(vsr, fakellm, pb):
    v, be = start_extproc(vsr, fakellm)
    status, headers, body, upstream = run_chat(pb, v, be, CHAT)
    assert status == 200
    assert upstream["x-selected-model"] == "m"
    assert headers["x-vsr-selected-model"] == "m"
    assert headers["x-vsr-response-path"] == "upstream"
    got = json.loads(body)
    assert json.loads(got["fakellm"]["request"]["body"])["model"] == "up-m"   # the provider's id, as vsr rewrote it
    assert got["model"] == "up-m"
    assert be.stats()["requests"] == 1


def test_messages_ingress_translated_over_extproc(vsr, fakellm, pb):
    v, be = start_extproc(vsr, fakellm)
    msgs = {"model": "m", "max_tokens": 32, "messages": [{"role": "user", "content": "write a python function"}]}
    status, headers, body, upstream = run_chat(pb, v, be, msgs, path="/v1/messages")
    assert upstream[":path"] == "/v1/chat/completions"   # the backend speaks chat
    assert status == 200
    out = json.loads(body)
    assert out["type"] == "message" and out["role"] == "assistant"
    assert out["content"][0]["type"] == "text" and out["content"][0]["text"]
    assert headers["content-length"] == str(len(body))   # the length of the body written anew


def test_immediate_answers_and_errors(vsr, fakellm, pb):
    v, be = start_extproc(vsr, fakellm)
    env = Envoy(pb, v.xport)
    a = env.headers([(":method", "GET"), (":path", "/v1/models"), (":authority", "vsr")], eos=True)
    assert a.WhichOneof("response") == "immediate_response"
    assert a.immediate_response.status.code == 200
    assert json.loads(a.immediate_response.body)["object"] == "list"
    env.end()
    status, headers, body, _ = run_chat(pb, v, be, {"model": "nope", "messages": [{"role": "user", "content": "x"}]})
    assert status == 400
    assert "is not available" in json.loads(body)["error"]["message"]
    assert be.stats()["requests"] == 0


def test_protocol_errors_get_grpc_statuses(vsr, fakellm, pb):
    v, be = start_extproc(vsr, fakellm)
    m, g = pb
    chan = grpc.insecure_channel(f"127.0.0.1:{v.xport}")
    # a message out of order: FAILED_PRECONDITION
    calls = g.ExternalProcessorStub(chan).Process(
        iter([m.ProcessingRequest(response_body=m.HttpBody(body=b"x"))]), timeout=10)
    with pytest.raises(grpc.RpcError) as e:
        list(calls)
    assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    # another method on the listener: UNIMPLEMENTED
    other = chan.unary_unary("/envoy.service.ext_proc.v3.ExternalProcessor/Other",
                             request_serializer=lambda x: x, response_deserializer=lambda x: x)
    with pytest.raises(grpc.RpcError) as e:
        other(b"", timeout=10)
    assert e.value.code() == grpc.StatusCode.UNIMPLEMENTED
    chan.close()
    # HTTP/1.1 is not served here: the connection is closed
    s = socket.create_connection(("127.0.0.1", v.xport))
    s.sendall(b"GET /health HTTP/1.1\r\nhost: x\r\n\r\n")
    s.settimeout(10)
    assert s.recv(1024) == b""
    s.close()
    # and the listener still serves
    status, headers, body, upstream = run_chat(pb, v, be, CHAT)
    assert status == 200


def test_standalone_listeners_are_not_served_in_extproc_mode(vsr, fakellm, pb):
    v, be = start_extproc(vsr, fakellm)
    with pytest.raises(httpx.TransportError):
        httpx.get(v.url + "/health", timeout=2)


def test_extproc_listen_needs_extproc_mode(vsr, fakellm):
    be = fakellm()
    port = free_port()
    v = vsr(config_yaml(port, [model_yaml("m", [be.endpoint])]), port=port, wait_ready=False,
            extra_args=("--extproc-listen", "127.0.0.1:1"))
    assert v.proc.p.wait(timeout=10) == 64
    assert "--extproc-listen applies to --gateway extproc only" in v.proc.output()


def test_many_concurrent_streams_on_one_connection(vsr, fakellm, pb):
    v, be = start_extproc(vsr, fakellm)
    results, errors = [], []

    def one(i):
        try:
            body = {"model": "m", "messages": [{"role": "user", "content": f"request {i}"}]}
            results.append(run_chat(pb, v, be, body)[0])
        except Exception as exc:   # reported below
            errors.append(repr(exc))
    threads = [threading.Thread(target=one, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors[:3]
    assert results == [200] * 16


def test_stream_translated_event_by_event(vsr, fakellm, pb):
    """A Messages client's stream from a chat backend: vsr asks for the body
    STREAMED and answers each chunk with its translation, as it comes."""
    v, be = start_extproc(vsr, fakellm)
    env = Envoy(pb, v.xport)
    data = json.dumps({"model": "m", "max_tokens": 32, "stream": True,
                       "messages": [{"role": "user", "content": "hi"}]}).encode()
    req = [(":method", "POST"), (":path", "/v1/messages"), (":authority", "vsr"),
           ("content-type", "application/json")]
    req = apply_headers(req, common(env.headers(req)).header_mutation)
    c = common(env.body(data))
    req = apply_headers(req, c.header_mutation)
    h = dict(req)
    chunks = []
    with httpx.stream("POST", f"http://{be.endpoint}{h[':path']}", content=c.body_mutation.body, timeout=30,
                      headers={**{k: x for k, x in req if not k.startswith(":") and k != "content-length"},
                               "x-fakellm-chunks": "5"}) as up:
        a = env.headers([(":status", "200")] + list(up.headers.items()), response=True)
        assert a.mode_override.response_body_mode == 1   # STREAMED
        assert "content-length" in common(a).header_mutation.remove_headers
        for piece in up.iter_raw():
            chunks.append(piece)
    out = b""
    for i, piece in enumerate(chunks):
        a = env.body(piece, eos=(i == len(chunks) - 1), response=True)
        bm = common(a).body_mutation
        out += bm.body if bm.WhichOneof("mutation") == "body" else b""
    assert env.end() == []
    events = [line[len("event: "):] for line in out.decode().splitlines() if line.startswith("event: ")]
    assert events[0] == "message_start" and events[-1] == "message_stop"
    assert "content_block_delta" in events
    assert b"[DONE]" not in out


ROUTED = """
routing:
  signals:
    keywords: [{name: urgent, keywords: [urgent]}]
  decisions:
    - name: urgent_route
      rules: {type: keyword, name: urgent}
      modelRefs: [{model: m}]
      reliability: {total_timeout: 7s, per_try_timeout: 2s, retry_count: 2, retry_on: "5xx,reset",
                    retriable_status_codes: [503, 429]}
"""


def test_credentials_and_the_five_headers_go_to_envoy(vsr, fakellm, pb):
    """Envoy calls the backend: the provider's key and the decision's
    reliability override are in vsr's answer, as Envoy's per-request headers."""
    be = fakellm()
    port, xport = free_port(), free_port()
    model = model_yaml("m", [{"endpoint": be.endpoint, "api_key": "sk-provider"}], "up-m")
    cfg = config_yaml(port, [model], default="m",
                      global_extra="  router:\n    clear_route_cache: true\n").replace(
        "global:\n  router:\n    include_config_models_in_list: true\n", "global:\n") + ROUTED
    v = vsr(cfg, port=port, wait_ready=False,
            extra_args=("--gateway", "extproc", "--extproc-listen", f"127.0.0.1:{xport}"))
    wait_until(lambda: _ready(v), what="vsr /ready")
    v.xport = xport
    env = Envoy(pb, xport)
    data = json.dumps({"model": "auto", "messages": [{"role": "user", "content": "urgent: the build is red"}]}).encode()
    req = [(":method", "POST"), (":path", "/v1/chat/completions"), (":authority", "vsr"),
           ("content-type", "application/json"), ("authorization", "Bearer client-key"),
           ("x-envoy-max-retries", "9")]
    env.headers(req)
    c = common(env.body(data))
    h = dict(apply_headers(req, c.header_mutation))
    assert c.clear_route_cache
    assert h["x-selected-model"] == "m"
    assert h["authorization"] == "Bearer sk-provider"   # the client's key replaced by the provider's
    assert h["x-envoy-upstream-rq-timeout-ms"] == "7000"
    assert h["x-envoy-upstream-rq-per-try-timeout-ms"] == "2000"
    assert h["x-envoy-max-retries"] == "2"
    assert h["x-envoy-retry-on"] == "5xx,reset"
    assert h["x-envoy-retriable-status-codes"] == "503,429"
    env.end()


def _ready(v):
    assert v.proc.p.poll() is None, v.proc.output()
    try:
        return httpx.get(v.metrics_url.replace("/metrics", "/ready"), timeout=1).status_code == 200
    except httpx.TransportError:
        return False


def test_reliability_envoy_cannot_carry_is_refused(vsr, fakellm, tmp_path):
    be = fakellm()
    port = free_port()
    cfg = config_yaml(port, [model_yaml("m", [be.endpoint])], default="m") + ROUTED.replace(
        "retry_count: 2,", "retry_count: 2, idle_timeout: 30s, retry_back_off_base: 50ms,")
    path = tmp_path / "c.yaml"
    path.write_text(cfg)
    ok = subprocess.run([VSR_BIN, "config", "validate", str(path)], capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    bad = subprocess.run([VSR_BIN, "config", "validate", str(path), "--gateway", "extproc"], capture_output=True,
                         text=True)
    assert bad.returncode == 2
    assert 'decision "urgent_route": reliability.idle_timeout' in bad.stderr
    assert "reliability.retry_back_off_base" in bad.stderr
    v = vsr(cfg, port=port, wait_ready=False,
            extra_args=("--gateway", "extproc", "--extproc-listen", f"127.0.0.1:{free_port()}"))
    assert v.proc.p.wait(timeout=20) == 2
    assert "reliability.idle_timeout" in v.proc.output()


def test_access_log_and_metrics_of_extproc_calls(vsr, fakellm, pb):
    v, be = start_extproc(vsr, fakellm)
    status, headers, body, upstream = run_chat(pb, v, be, CHAT, extra=(("x-request-id", "xp-req-1"),
                                                                       ("user-agent", "envoy-sim")))
    assert status == 200
    status, headers, body, _ = run_chat(pb, v, be, {"model": "nope", "messages": [{"role": "user", "content": "x"}]})
    assert status == 400

    def lines():
        return [json.loads(ln) for ln in v.proc.output().splitlines() if ln.startswith("{")]
    wait_until(lambda: len(lines()) >= 2, what="two access-log lines")
    ok = [ln for ln in lines() if ln.get("x_request_id") == "xp-req-1"]
    assert len(ok) == 1
    ln = ok[0]
    assert ln["protocol"] == "ext_proc" and ln["method"] == "POST" and ln["path"] == "/v1/chat/completions"
    assert ln["response_code"] == 200 and ln["response_flags"] == "-"
    assert ln["selected_model"] == "m" and ln["user_agent"] == "envoy-sim"
    assert ln["bytes_received"] == len(json.dumps(CHAT))
    assert any(l["response_code"] == 400 for l in lines())
    m = httpx.get(v.metrics_url, timeout=5).text
    assert 'vsr_requests_total{status_class="2xx",model="m",decision=""} 1' in m
    assert "vsr_active_requests 0" in m


def test_a_silent_stream_ends_with_deadline_exceeded(vsr, fakellm, pb):
    """Envoy opens a Process call, sends the request's headers and then
    nothing: past the listener's timeout (here 3 s) the call ends with
    DEADLINE_EXCEEDED and its stream is closed, so a peer that stalls holds
    nothing; a stream that keeps talking is not cut."""
    v, be = start_extproc(vsr, fakellm, listener_extra="    timeout: 3s")
    data = json.dumps(CHAT).encode()
    req = [(":method", "POST"), (":path", "/v1/chat/completions"), (":authority", "vsr"),
           ("content-type", "application/json"), ("content-length", str(len(data)))]
    env = Envoy(pb, v.xport)
    assert env.headers(req).WhichOneof("response") == "request_headers"
    with pytest.raises(grpc.RpcError) as e:
        next(env.calls)  # the client's own deadline is 30 s: this is vsr's
    assert e.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert "no message on the stream for 3000 ms" in e.value.details()
    env.chan.close()

    def freed():
        m = httpx.get(v.metrics_url, timeout=5).text
        return "vsr_active_requests 0" in m and 'vsr_edge_refusals_total{reason="extproc_stream_idle"} 1' in m
    wait_until(freed, what="the silent call counted and freed")
    # a call whose messages come 1 s apart, over 3 s in all, completes (2 s to spare each time)
    env = Envoy(pb, v.xport)
    assert env.headers(req).WhichOneof("response") == "request_headers"
    time.sleep(1)
    a = env.body(data)
    assert a.WhichOneof("response") == "request_body"
    time.sleep(1)
    up = json.dumps({"id": "x", "object": "chat.completion", "choices": []}).encode()
    assert env.headers([(":status", "200"), ("content-type", "application/json")],
                       response=True).WhichOneof("response") == "response_headers"
    time.sleep(1)
    assert env.body(up, response=True).WhichOneof("response") == "response_body"
    assert env.end() == []
    m = httpx.get(v.metrics_url, timeout=5).text
    assert 'vsr_edge_refusals_total{reason="extproc_stream_idle"} 1' in m


def test_request_graph_in_extproc_mode(vsr, fakellm, pb):
    """A decision's request graph in extproc mode: vsr makes the hops
    itself, through its upstream layer, and answers with the assembled result
    (or, streaming, hands the final hop to Envoy)."""
    from test_looper import CHAT as LCHAT, TEXT, backend_args, looper_doc, models_of, NAME_OF  # noqa: F401
    be = fakellm("llm", args=backend_args(logprob={"m-small": -2.5}))
    port, xport = free_port(), free_port()
    doc = looper_doc(port, be.endpoint, ["m-small", "m-mid", "m-large"],
                     {"type": "confidence", "confidence": {"threshold": 0.5}})
    v = vsr(doc, port=port, wait_ready=False,
            extra_args=("--gateway", "extproc", "--extproc-listen", f"127.0.0.1:{xport}"))
    wait_until(lambda: _ready(v), what="vsr /ready")
    v.xport = xport
    env = Envoy(pb, xport)
    data = json.dumps(LCHAT).encode()
    req = [(":method", "POST"), (":path", "/v1/chat/completions"), ("content-type", "application/json")]
    env.headers(req)
    a = env.body(data)
    assert a.WhichOneof("response") == "immediate_response", a
    im = a.immediate_response
    assert im.status.code == 200
    out = json.loads(im.body)
    assert out["choices"][0]["message"]["content"] == TEXT["m-mid"]
    hdrs = {h.header.key: h.header.raw_value.decode() for h in im.headers.set_headers}
    assert hdrs["x-vsr-response-path"] == "looper"
    env.end()
    log = httpx.get(be.url + "/_fakellm/log", timeout=5).json()["entries"]
    assert models_of([e for e in log if e["path"] == "/v1/chat/completions"]) == ["m-small", "m-mid"]
