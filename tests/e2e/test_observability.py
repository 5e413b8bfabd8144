"""Access log lines and Prometheus metrics, end to end."""
import json

import httpx

from conftest import wait_until


def log_lines(v):
    out = []
    for line in v.proc.output().splitlines():
        if line.startswith("{"):
            out.append(json.loads(line))
    return out


def test_access_log_line_per_request(stack):
    r = stack.post_chat({"model": "m2", "messages": [{"role": "user", "content": "secret prompt text"}]},
                        headers={"x-request-id": "req-123", "user-agent": "ua-test", "authorization": "Bearer sk-zzz"})
    assert r.status_code == 200
    httpx.post(stack.url + "/v1/chat/completions", json={"model": "nope", "messages": []})

    def find():
        return [l for l in log_lines(stack) if l.get("x_request_id") == "req-123"]

    def errors():
        return [l for l in log_lines(stack) if l.get("response_code") == 400]
    # lines are written by a writer thread: wait for both
    wait_until(lambda: find() and errors(), what="both access-log lines")
    (line,) = find()
    assert line["method"] == "POST" and line["path"] == "/v1/chat/completions"
    assert line["response_code"] == 200 and line["response_flags"] == "-"
    assert line["selected_model"] == "m2" and line["attempts"] == 1
    assert line["upstream_host"] == stack.backends[2].endpoint
    assert line["user_agent"] == "ua-test"
    assert line["bytes_received"] > 0 and line["bytes_sent"] > 0
    raw = stack.proc.output()
    assert "secret prompt text" not in raw and "sk-zzz" not in raw   # never prompts or credentials
    assert errors()[-1]["response_flags"] == "LR"


def test_metrics_endpoint(stack):
    for _ in range(3):
        stack.post_chat({"model": "m1", "messages": []})
    stack.post_chat({"model": "m1", "messages": []}, headers={"x-fakellm-status": "503"})
    text = httpx.get(stack.metrics_url).text
    assert "# TYPE vsr_requests_total counter" in text
    lines = {l.rsplit(" ", 1)[0]: float(l.rsplit(" ", 1)[1]) for l in text.splitlines() if l and not l.startswith("#")}
    ok = sum(v for k, v in lines.items() if k.startswith("vsr_requests_total{") and 'status_class="2xx"' in k
             and 'model="m1"' in k)
    # (the fixture's /ready polls may have met a 503 before the gateway was ready: model "")
    bad = sum(v for k, v in lines.items() if k.startswith("vsr_requests_total{") and 'status_class="5xx"' in k
              and 'model="m1"' in k)
    assert ok == 3 and bad == 1
    assert any(k.startswith("vsr_request_duration_seconds_bucket") for k in lines)
    assert any(k.startswith("vsr_endpoint_healthy{") for k in lines)
    assert lines.get("vsr_config_version") == 1
    assert httpx.get(stack.metrics_url.replace("/metrics", "/nope")).status_code == 404


def metric_lines(v):
    return {l.rsplit(" ", 1)[0]: float(l.rsplit(" ", 1)[1])
            for l in httpx.get(v.metrics_url).text.splitlines() if l and not l.startswith("#")}


def test_stream_events_and_usage_logged(stack):
    """The SSE relay reads the stream as it passes: the events counted, the
    final usage object's token counts in the access log and in metrics."""
    body = {"model": "m2", "stream": True, "stream_options": {"include_usage": True},
            "messages": [{"role": "user", "content": "count my tokens"}]}
    r = stack.post_chat(body, headers={"x-request-id": "sse-usage", "x-fakellm-chunks": "4"})
    assert r.status_code == 200
    events = [e for e in r.text.split("\n") if e.startswith("data: ")]
    usage = json.loads(events[-2][len("data: "):])["usage"]      # before [DONE]
    # a stream without usage, and a non-streamed answer
    stack.post_chat({**body, "stream_options": {"include_usage": False}}, headers={"x-request-id": "sse-plain"})
    stack.post_chat({"model": "m2", "messages": []}, headers={"x-request-id": "not-sse"})

    def line(rid):
        found = [l for l in log_lines(stack) if l.get("x_request_id") == rid]
        return found[0] if found else None
    wait_until(lambda: line("sse-usage") and line("sse-plain") and line("not-sse"), what="three log lines")
    l = line("sse-usage")
    assert l["stream_events"] == len(events)                     # every data event, [DONE] included
    assert l["prompt_tokens"] == usage["prompt_tokens"] and l["completion_tokens"] == usage["completion_tokens"]
    assert usage["completion_tokens"] > 0
    p = line("sse-plain")
    assert p["stream_events"] > 0 and p["prompt_tokens"] is None and p["completion_tokens"] is None
    n = line("not-sse")
    assert n["stream_events"] is None and n["prompt_tokens"] is None
    m = metric_lines(stack)
    assert m['vsr_tokens_total{model="m2",type="prompt"}'] == usage["prompt_tokens"]
    assert m['vsr_tokens_total{model="m2",type="completion"}'] == usage["completion_tokens"]
    assert m["vsr_access_log_dropped_total"] == 0


def test_responses_stream_usage_logged(stack):
    """The responses API reports usage inside response.completed."""
    r = httpx.post(stack.url + "/v1/responses", json={"model": "m2", "stream": True, "input": "hello there"},
                   headers={"x-request-id": "resp-usage", "x-fakellm-chunks": "3"}, timeout=30)
    assert r.status_code == 200
    done = [json.loads(l[len("data: "):]) for l in r.text.split("\n")
            if l.startswith("data: ") and "response.completed" in l]
    usage = done[0]["response"]["usage"]

    def line():
        found = [l for l in log_lines(stack) if l.get("x_request_id") == "resp-usage"]
        return found[0] if found else None
    wait_until(line, what="the log line")
    assert line()["prompt_tokens"] == usage["input_tokens"]
    assert line()["completion_tokens"] == usage["output_tokens"] == 3


def test_request_id_returned_and_logged(stack):
    """The id the backend got is the one logged and returned: the client's
    own when it sent one, else the UUIDv4 vsr made; local replies carry it too."""
    import re
    r = stack.post_chat({"model": "m2", "messages": []}, headers={"x-request-id": "client-id-7"})
    assert r.status_code == 200 and r.headers["x-request-id"] == "client-id-7"
    assert r.headers.get_list("x-request-id") == ["client-id-7"]
    r = stack.post_chat({"model": "m2", "messages": [], "user": "made-id"})
    made = r.headers["x-request-id"]
    assert re.fullmatch(r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}", made)
    assert r.json()["fakellm"]["request"]["headers"]["x-request-id"] == made
    wait_until(lambda: any(l.get("x_request_id") == made for l in log_lines(stack)), what="the made id logged")
    # a local reply (an unknown model) and a probe
    r = httpx.post(stack.url + "/v1/chat/completions", json={"model": "nope", "messages": []},
                   headers={"x-request-id": "local-1"})
    assert r.status_code == 400 and r.headers["x-request-id"] == "local-1"
    r = httpx.get(stack.url + "/v1/models")
    assert len(r.headers["x-request-id"]) == 36
    wait_until(lambda: any(l.get("x_request_id") == "local-1" for l in log_lines(stack)), what="local-1 logged")


def test_metrics_listener_serves_probes_too(stack):
    """As documented: /metrics, /health and /ready; any other path 404."""
    base = stack.metrics_url.rsplit("/", 1)[0]
    assert httpx.get(base + "/health").json() == {"status": "ok"}
    assert httpx.get(base + "/ready").status_code == 200
    assert httpx.get(base + "/v1/models").status_code == 404


def test_signal_family_time_logged_and_measured(vsr, fakellm):
    """Each signal family a request evaluated: its time in the access log's
    signal_families_us and in vsr_signal_family_seconds{family}."""
    from conftest import free_port
    be = fakellm("be")
    port = free_port()
    v = vsr(f"""version: v0.3
listeners:
  - {{name: l, address: 127.0.0.1, port: {port}}}
providers:
  defaults: {{model: general}}
  models:
    - {{name: general, backend_refs: [{{endpoint: "{be.endpoint}"}}]}}
    - {{name: coder, backend_refs: [{{endpoint: "{be.endpoint}"}}]}}
routing:
  signals:
    keywords: [{{name: code, keywords: [python, rust]}}, {{name: sql, keywords: [select]}}]
    context: [{{name: long, min_tokens: 5000}}]
  decisions:
    - name: code
      rules: {{operator: OR, conditions: [{{type: keyword, name: code}}, {{type: keyword, name: sql}},
                                          {{type: context, name: long}}]}}
      modelRefs: [{{model: coder}}]
global:
  services:
    management_api: {{port: {free_port()}}}
""", port=port, workers=1)
    for rid in ("fam-1", "fam-2"):
        r = v.post_chat({"model": "auto", "messages": [{"role": "user", "content": "write python"}]},
                        headers={"x-request-id": rid})
        assert r.status_code == 200
    r = v.post_chat({"model": "general", "messages": []}, headers={"x-request-id": "fam-none"})

    def line(rid):
        found = [l for l in log_lines(v) if l.get("x_request_id") == rid]
        return found[0] if found else None
    wait_until(lambda: line("fam-1") and line("fam-2") and line("fam-none"), what="three log lines")
    fam = line("fam-1")["signal_families_us"]
    assert set(fam) == {"keywords", "context"}, fam
    assert all(isinstance(us, int) and 0 <= us < 10_000_000 for us in fam.values()), fam
    assert line("fam-none")["signal_families_us"] is None   # a passthrough evaluates no signal
    lines = metric_lines(v)
    assert lines.get('vsr_signal_family_seconds_count{family="keywords"}') == 2, lines
    assert lines.get('vsr_signal_family_seconds_count{family="context"}') == 2
    assert 'vsr_signal_family_seconds_bucket{family="keywords",le="+Inf"}' in lines


def test_instant_answers_have_a_duration(stack):
    """An answer vsr makes itself (an unknown model's 400) still takes time:
    the worker's cached clock is ticked between callbacks, so a request that
    ends after its write completes is not given a duration of zero."""
    for _ in range(20):
        r = httpx.post(stack.url + "/v1/chat/completions", json={"model": "nope", "messages": []})
        assert r.status_code == 400
    lines = metric_lines(stack)
    # no model was chosen: the series without one (the fixture's /ready polls may be in it too)
    assert lines['vsr_request_duration_seconds_count{model=""}'] >= 20
    assert lines['vsr_request_duration_seconds_sum{model=""}'] > 0
