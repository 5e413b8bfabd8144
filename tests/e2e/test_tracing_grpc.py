"""Tracing over OTLP/gRPC end to end: spans to a collector stand-in (a Python
gRPC server decoding the TraceService protos compiled from proto/), in
plaintext HTTP/2 and over TLS; a collector that is down, answers UNAVAILABLE
or never answers costs spans, counted, never a request."""
import pathlib
import socket
import subprocess
import sys
import time
from concurrent import futures

import grpc  # python3-grpcio (scripts/setup-deps)
import pytest
from grpc_tools import protoc  # python3-grpc-tools

from conftest import config_yaml, free_port, model_yaml, wait_until, echo
from test_tracing import TID, PID, metrics

PROTO = pathlib.Path(__file__).resolve().parents[2] / "proto"
FILES = ["opentelemetry/proto/collector/trace/v1/trace_service.proto", "opentelemetry/proto/trace/v1/trace.proto",
         "opentelemetry/proto/common/v1/common.proto", "opentelemetry/proto/resource/v1/resource.proto"]


@pytest.fixture(scope="module")
def pb(tmp_path_factory):
    out = tmp_path_factory.mktemp("otlp_pb")
    rc = protoc.main(["protoc", f"-I{PROTO}", f"--python_out={out}", *FILES])
    assert rc == 0
    sys.path.insert(0, str(out))
    try:
        from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
        yield trace_service_pb2
    finally:
        sys.path.remove(str(out))
        for name in [m for m in sys.modules if m.startswith("opentelemetry")]:
            del sys.modules[name]


class Collector:
    """An OTLP/gRPC TraceService: keeps each ExportTraceServiceRequest and
    the call's metadata; `fail` makes it answer with that status code."""

    def __init__(self, pb, creds=None):
        self.requests, self.metadata, self.fail, self.delay = [], [], None, 0
        outer = self

        def export(req, ctx):
            outer.metadata.append(dict(ctx.invocation_metadata()))
            time.sleep(outer.delay)
            if outer.fail is not None:
                outer.requests.append(None)
                ctx.abort(outer.fail, "collector is shedding load")
            outer.requests.append(req)
            return pb.ExportTraceServiceResponse()

        handler = grpc.method_handlers_generic_handler("opentelemetry.proto.collector.trace.v1.TraceService", {
            "Export": grpc.unary_unary_rpc_method_handler(
                export, request_deserializer=pb.ExportTraceServiceRequest.FromString,
                response_serializer=pb.ExportTraceServiceResponse.SerializeToString)})
        self.srv = grpc.server(futures.ThreadPoolExecutor(max_workers=4), handlers=[handler])
        self.port = (self.srv.add_secure_port("127.0.0.1:0", creds) if creds
                     else self.srv.add_insecure_port("127.0.0.1:0"))
        self.srv.start()

    def spans(self, trace_id=None):
        out = []
        for req in [r for r in list(self.requests) if r is not None]:
            for rs in req.resource_spans:
                for ss in rs.scope_spans:
                    out += [s for s in ss.spans if trace_id is None or s.trace_id.hex() == trace_id]
        return out

    def resources(self):
        return [{a.key: a.value.string_value for a in rs.resource.attributes}
                for r in self.requests if r is not None for rs in r.resource_spans]

    def close(self):
        self.srv.stop(0).wait(5)


@pytest.fixture
def collector(pb):
    c = Collector(pb)
    yield c
    c.close()


def tracing_yaml(exporter):
    return f"""    observability:
      tracing:
        enabled: true
        exporter:
{exporter}        sampling:
          type: always_on
        resource:
          service_name: vsr-grpc-test
          deployment_environment: e2e
"""


def start(vsr, fakellm, exporter, env=None):
    be = fakellm("be")
    port = free_port()
    v = vsr(config_yaml(port, [model_yaml("m", [be.endpoint])], default="m", global_extra=tracing_yaml(exporter)),
            port=port, env=env)
    v.backend = be
    return v


def attr(span, key):
    for a in span.attributes:
        if a.key == key:
            kind = a.value.WhichOneof("value")
            return getattr(a.value, kind)
    return None


def test_grpc_spans_tree_and_resource(vsr, fakellm, collector):
    # the reference's form: type otlp with a bare host:port, insecure by default
    v = start(vsr, fakellm, f"          type: otlp\n          endpoint: 127.0.0.1:{collector.port}\n")
    r = v.post_chat({"model": "m", "messages": [{"role": "user", "content": "hello-grpc-prompt"}]},
                    headers={"traceparent": f"00-{TID}-{PID}-01"})
    assert r.status_code == 200
    _, tid, parent, flags = echo(r)["headers"]["traceparent"].split("-")
    assert (tid, flags) == (TID, "01") and parent != PID

    wait_until(lambda: len(collector.spans(TID)) >= 3, what="three spans over gRPC")
    spans = collector.spans(TID)
    (root,) = [s for s in spans if s.name == "vsr.request"]
    (attempt,) = [s for s in spans if s.name == "vsr.upstream_attempt"]
    (routing,) = [s for s in spans if s.name == "vsr.routing"]
    assert root.parent_span_id.hex() == PID and root.kind == 2
    assert routing.parent_span_id == root.span_id and attempt.parent_span_id == root.span_id
    assert attempt.span_id.hex() == parent and attempt.kind == 3
    assert attr(root, "http.response.status_code") == 200 and attr(root, "url.path") == "/v1/chat/completions"
    assert attr(routing, "vsr.selected_model") == "m"
    assert attr(attempt, "server.address") == v.backend.endpoint
    for s in spans:
        assert s.start_time_unix_nano <= s.end_time_unix_nano
        assert abs(s.start_time_unix_nano / 1e9 - time.time()) < 60
        assert len(s.trace_id) == 16 and len(s.span_id) == 8
    res = collector.resources()[0]
    assert res["service.name"] == "vsr-grpc-test" and res["deployment.environment"] == "e2e"
    md = collector.metadata[0]
    assert md.get("user-agent", "").startswith("vsr")
    assert all(b"hello-grpc-prompt" not in r.SerializeToString() for r in collector.requests)
    assert metrics(v).get("vsr_tracing_spans_exported_total", 0) >= 3


def test_otlp_grpc_type_and_grpc_scheme(vsr, fakellm, collector):
    v = start(vsr, fakellm, f"          type: otlp-grpc\n          endpoint: grpc://127.0.0.1:{collector.port}\n")
    for _ in range(3):
        assert v.post_chat({"model": "m", "messages": []}).status_code == 200
    wait_until(lambda: len(collector.spans()) >= 9, what="nine spans")
    assert len({s.trace_id for s in collector.spans()}) == 3
    m = metrics(v)
    assert m.get("vsr_tracing_export_failures_total") == 0


def test_large_batches_cross_flow_control_windows(vsr, fakellm, collector):
    """Batches bigger than HTTP/2's initial 64 KiB window: the request body
    waits for the collector's WINDOW_UPDATEs, every span arrives."""
    collector.delay = 1.5                       # spans pile up while a call is in flight (under its 2 s)
    v = start(vsr, fakellm, f"          endpoint: 127.0.0.1:{collector.port}\n")
    n = 300
    rid = "r" * 250                             # vsr.request_id: about 250 bytes more per root span

    with v.client() as c, futures.ThreadPoolExecutor(16) as pool:
        codes = list(pool.map(lambda i: c.post("/v1/chat/completions", json={"model": "m", "messages": []},
                                               headers={"x-request-id": f"{rid}-{i}"}).status_code, range(n)))
    assert codes == [200] * n
    wait_until(lambda: len(collector.spans()) >= 3 * n, timeout=60, what="every span")
    sizes = [r.ByteSize() for r in collector.requests if r is not None]
    assert max(sizes) > 65535, sizes            # at least one batch crossed the window
    m = metrics(v)
    assert m.get("vsr_tracing_export_failures_total") == 0 and m.get("vsr_tracing_spans_exported_total") == 3 * n


def test_collector_unavailable_counts_failures(vsr, fakellm, collector):
    collector.fail = grpc.StatusCode.UNAVAILABLE
    v = start(vsr, fakellm, f"          endpoint: 127.0.0.1:{collector.port}\n")
    with v.client(timeout=10) as c:
        for _ in range(10):
            assert c.post("/v1/chat/completions", json={"model": "m", "messages": []}).status_code == 200
    wait_until(lambda: metrics(v).get("vsr_tracing_export_failures_total", 0) >= 1, what="a refused export")
    m = metrics(v)
    assert m['vsr_tracing_spans_dropped_total{reason="export_failed"}'] >= 3
    assert m.get("vsr_tracing_spans_exported_total") == 0
    assert collector.requests and collector.spans() == []   # it was asked, and said no
    wait_until(lambda: "grpc-status 14" in v.proc.output(), what="the warning naming the status")
    # the collector recovers: later batches go through on the same exporter
    collector.fail = None
    assert v.post_chat({"model": "m", "messages": []}, headers={"traceparent": f"00-{TID}-{PID}-01"}).status_code == 200
    wait_until(lambda: collector.spans(TID), what="spans after recovery")


def test_dead_collector_never_fails_requests(vsr, fakellm):
    dead = free_port()                          # nothing listens there
    v = start(vsr, fakellm, f"          endpoint: 127.0.0.1:{dead}\n")
    with v.client(timeout=10) as c:
        for _ in range(40):
            assert c.post("/v1/chat/completions", json={"model": "m", "messages": []}).status_code == 200
    wait_until(lambda: metrics(v).get("vsr_tracing_export_failures_total", 0) >= 1, what="an export failure")
    m = metrics(v)
    assert m['vsr_tracing_spans_dropped_total{reason="export_failed"}'] >= 3
    assert m.get("vsr_tracing_spans_exported_total") == 0


def test_hung_collector_never_slows_requests(vsr, fakellm):
    # accepts connections (the backlog) but never answers, not even the HTTP/2 preface
    hung = socket.socket()
    hung.bind(("127.0.0.1", 0))
    hung.listen(64)
    try:
        v = start(vsr, fakellm, f"          endpoint: grpc://127.0.0.1:{hung.getsockname()[1]}\n")
        t0 = time.monotonic()
        with v.client(timeout=5) as c:
            for _ in range(100):
                assert c.post("/v1/chat/completions", json={"model": "m", "messages": []}).status_code == 200
        assert time.monotonic() - t0 < 60
        wait_until(lambda: metrics(v).get("vsr_tracing_export_failures_total", 0) >= 1, timeout=15,
                   what="an export timeout")
        assert "deadline exceeded" in v.proc.output()
    finally:
        hung.close()


def make_pki(d):
    def openssl(*args):
        subprocess.run(["openssl", *args], cwd=d, check=True, capture_output=True)
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "2", "-subj", "/CN=otlp test CA",
            "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign")
    openssl("req", *ec, "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=localhost")
    (d / "server.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=critical,CA:FALSE\n"
                                  "keyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n")
    openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
            "-out", "server.pem", "-days", "2", "-extfile", "server.ext")
    return d / "ca.pem", (d / "server.pem").read_bytes(), (d / "server.key").read_bytes()


def test_tls_collector(vsr, fakellm, pb, tmp_path):
    ca, cert, key = make_pki(tmp_path)
    c = Collector(pb, grpc.ssl_server_credentials([(key, cert)]))
    try:
        # a bare host:port with insecure: false is TLS, verified against SSL_CERT_FILE's CA
        v = start(vsr, fakellm, f"          endpoint: 127.0.0.1:{c.port}\n          insecure: false\n",
                  env={"SSL_CERT_FILE": str(ca)})
        assert v.post_chat({"model": "m", "messages": []},
                           headers={"traceparent": f"00-{TID}-{PID}-01"}).status_code == 200
        wait_until(lambda: len(c.spans(TID)) >= 3, what="spans over TLS")
        # grpcs:// to the same collector without its CA: verification fails, the spans are lost and counted
        w = start(vsr, fakellm, f"          endpoint: grpcs://127.0.0.1:{c.port}\n")
        assert w.post_chat({"model": "m", "messages": []}).status_code == 200
        wait_until(lambda: metrics(w).get("vsr_tracing_export_failures_total", 0) >= 1, what="a TLS failure")
        assert metrics(w).get("vsr_tracing_spans_exported_total") == 0
        assert "certificate verify failed" in w.proc.output()
    finally:
        c.close()


def test_reference_document_exports_over_grpc(vsr, fakellm, collector):
    """The reference's tracing block as its deployments write it (the
    refdocs corpus), switched on and pointed at the stand-in: it serves,
    routes, and the spans arrive over gRPC."""
    text = (pathlib.Path(__file__).resolve().parent / "corpus" / "refdocs" / "tracing-otlp-grpc.yaml").read_text()
    be = fakellm("be")
    port = free_port()
    text = (text.replace("enabled: false", "enabled: true")
            .replace("jaeger.observability.svc.cluster.local:4317", f"127.0.0.1:{collector.port}")
            .replace("127.0.0.1:18000", be.endpoint).replace("port: 8899", f"port: {port}"))
    v = vsr(text, port=port)
    r = v.post_chat({"model": "llama-8b", "messages": [{"role": "user", "content": "hi"}]},
                    headers={"traceparent": f"00-{TID}-{PID}-01"})
    assert r.status_code == 200, r.text
    wait_until(lambda: len(collector.spans(TID)) >= 3, what="the document's spans")
    res = collector.resources()[0]
    assert res["service.name"] == "vllm-sr" and res["deployment.environment"] == "production"
