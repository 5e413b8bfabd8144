"""`vsr envoy render`: the Envoy bootstrap for extproc mode, parsed and
checked for what the template must carry (ref §5.4): the document's
listeners, one route per model on x-selected-model plus the default route,
the ext_proc filter before the router with its processing mode, mode
override and the five-header mutation rule, and clusters with vsr's
upstream policy (load balancing, outlier detection, health checks, circuit
breakers, TLS with SNI, DNS for host names)."""
import re
import subprocess

import yaml

from conftest import VSR_BIN

DOC = """version: v0.3
listeners:
  - {name: main, address: 0.0.0.0, port: 8899, timeout: 120s}
  - {name: internal, address: 127.0.0.1, port: 8898}
providers:
  defaults: {model: small}
  models:
    - name: small
      backend_refs:
        - {endpoint: "10.0.0.5:8000", weight: 3}
        - {endpoint: "10.0.0.6:8000"}
      reliability:
        lb_policy: least_request
        retry_count: 2
        retry_on: "5xx,reset"
        retriable_status_codes: [503]
        per_try_timeout: 20s
        consecutive_5xx: 3
        health_check_path: /health
    - name: org/large-v2
      backend_refs:
        - {base_url: "https://llm.example.com/openai/v1", api_key: sk-test}
    - name: claude
      api_format: anthropic
      backend_refs:
        - {base_url: "https://api.anthropic.com/v1", api_key: sk-ant}
"""


def render(tmp_path, doc, *args):
    p = tmp_path / "c.yaml"
    p.write_text(doc)
    return subprocess.run([VSR_BIN, "envoy", "render", str(p), *args], capture_output=True, text=True, timeout=30)


def hcm_of(listener):
    f = listener["filter_chains"][0]["filters"][0]
    assert f["name"] == "envoy.filters.network.http_connection_manager"
    return f["typed_config"]


def test_bootstrap_shape(tmp_path):
    r = render(tmp_path, DOC, "--extproc", "10.1.2.3:50099", "--admin-port", "9911")
    assert r.returncode == 0, r.stderr
    d = yaml.safe_load(r.stdout)
    assert d["admin"]["address"]["socket_address"]["port_value"] == 9911
    listeners = d["static_resources"]["listeners"]
    assert [(l["name"], l["address"]["socket_address"]["port_value"]) for l in listeners] == [
        ("main", 8899), ("internal", 8898)]
    hcm = hcm_of(listeners[0])
    assert hcm["stream_idle_timeout"] == "120s"
    rc = hcm["route_config"]
    assert "x-vsr-looper-secret" in rc["request_headers_to_remove"]
    routes = rc["virtual_hosts"][0]["routes"]
    by_model = {r["match"]["headers"][0]["string_match"]["exact"]: r["route"] for r in routes if "headers" in r["match"]}
    assert set(by_model) == {"small", "org/large-v2", "claude"}
    assert by_model["org/large-v2"]["cluster"] == "org_large_v2_cluster"
    assert by_model["small"]["timeout"] == "120s"
    # the last route is the default model's, for what vsr does not route
    assert "headers" not in routes[-1]["match"] and routes[-1]["route"]["cluster"] == "small_cluster"
    # retries as the model's reliability says
    rp = by_model["small"]["retry_policy"]
    assert rp["num_retries"] == 2 and rp["retry_on"] == "5xx,reset" and rp["retriable_status_codes"] == [503]
    assert rp["per_try_timeout"] == "20s"
    assert "retry_policy" not in by_model["claude"]
    # base_url: the host and the /v1 prefix rewritten
    lg = by_model["org/large-v2"]
    assert lg["host_rewrite_literal"] == "llm.example.com"
    rw = lg["regex_rewrite"]
    assert re.sub(rw["pattern"]["regex"], rw["substitution"].replace("\\1", r"\1"), "/v1/chat/completions") == \
        "/openai/v1/chat/completions"
    # the filters: ext_proc, then the router
    filters = hcm["http_filters"]
    assert [f["name"] for f in filters] == ["envoy.filters.http.ext_proc", "envoy.filters.http.router"]
    xp = filters[0]["typed_config"]
    assert xp["grpc_service"]["envoy_grpc"]["cluster_name"] == "vsr_extproc"
    assert xp["allow_mode_override"] is True
    assert xp["processing_mode"]["request_body_mode"] == "BUFFERED"
    assert xp["processing_mode"]["request_header_mode"] == "SEND"
    assert xp["processing_mode"]["response_header_mode"] == "SEND"
    allow = re.compile(xp["mutation_rules"]["allow_expression"]["regex"])
    five = ["x-envoy-upstream-rq-timeout-ms", "x-envoy-upstream-rq-per-try-timeout-ms", "x-envoy-max-retries",
            "x-envoy-retry-on", "x-envoy-retriable-status-codes"]
    assert all(allow.fullmatch(h) for h in five)
    assert not any(allow.fullmatch(h) for h in ["x-envoy-internal", "x-envoy-original-path", "x-envoy-force-trace"])
    # clusters
    clusters = {c["name"]: c for c in d["static_resources"]["clusters"]}
    x = clusters["vsr_extproc"]
    ep = x["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]["address"]["socket_address"]
    assert (ep["address"], ep["port_value"]) == ("10.1.2.3", 50099)
    assert "http2_protocol_options" in x["typed_extension_protocol_options"][
        "envoy.extensions.upstreams.http.v3.HttpProtocolOptions"]["explicit_http_config"]
    small = clusters["small_cluster"]
    assert small["type"] == "STATIC"
    assert small["lb_policy"] == "LEAST_REQUEST"
    assert small["outlier_detection"]["consecutive_5xx"] == 3
    assert small["health_checks"][0]["http_health_check"]["path"] == "/health"
    assert small["circuit_breakers"]["thresholds"][0]["max_requests"] == 4096
    eps = small["load_assignment"]["endpoints"][0]["lb_endpoints"]
    assert [(e["endpoint"]["address"]["socket_address"]["address"], e["load_balancing_weight"]) for e in eps] == [
        ("10.0.0.5", 3), ("10.0.0.6", 1)]
    large = clusters["org_large_v2_cluster"]
    assert large["type"] == "LOGICAL_DNS" and large["dns_lookup_family"] == "V4_ONLY"
    tls = large["transport_socket"]
    assert tls["name"] == "envoy.transport_sockets.tls" and tls["typed_config"]["sni"] == "llm.example.com"
    assert large["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]["address"]["socket_address"][
        "port_value"] == 443
    assert "transport_socket" not in small
    # no secret in the bootstrap: credentials are vsr's to send per request
    assert "sk-test" not in r.stdout and "sk-ant" not in r.stdout


def test_a_document_envoy_cannot_carry_is_refused(tmp_path):
    doc = DOC + """routing:
  signals: {keywords: [{name: k, keywords: [x]}]}
  decisions:
    - name: d
      rules: {type: keyword, name: k}
      modelRefs: [{model: small}]
      reliability: {first_byte_timeout: 5s}
"""
    r = render(tmp_path, doc)
    assert r.returncode == 2
    assert 'decision "d": reliability.first_byte_timeout' in r.stderr
    assert r.stdout == ""


def test_usage_errors(tmp_path):
    assert render(tmp_path, DOC, "--extproc", "nope").returncode == 64
    assert subprocess.run([VSR_BIN, "envoy"], capture_output=True).returncode == 64
