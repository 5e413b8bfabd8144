"""global.services.ratelimit: the local limiter's rules, 429s in the client's protocol, metrics by rule."""
import re
import subprocess


import httpx

from conftest import VSR_BIN, config_yaml, free_port, model_yaml

KEYS = """    api_keys:
      - {key: k-alice, user: alice, groups: [team-a]}
      - {key: k-bob, user: bob, groups: [team-a]}
      - {key: k-carol, user: carol, groups: [team-b]}
"""


def limited(vsr, fakellm, rules, fail_open="false"):
    be = fakellm()
    port = free_port()
    rl = f"""    ratelimit:
      fail_open: {fail_open}
      providers:
        - type: local-limiter
          rules:
{rules}"""
    cfg = config_yaml(port, [model_yaml("m", [be.endpoint]), model_yaml("other", [be.endpoint])],
                      default="m", listener_extra=KEYS, global_extra=rl)
    return vsr(cfg, port=port)


def chat(v, key, model="m", **extra):
    return httpx.post(v.url + "/v1/chat/completions", timeout=30, headers={"authorization": f"Bearer {key}"},
                      json={"model": model, "messages": [{"role": "user", "content": "hi"}], **extra})


def test_per_user_request_limit_refuses_with_openai_headers(vsr, fakellm):
    v = limited(vsr, fakellm, """            - name: per-user
              match: {user: "*"}
              requests_per_unit: 3
              unit: day
""")
    for i in range(3):
        r = chat(v, "k-alice")
        assert r.status_code == 200, (i, r.text)
        # admitted answers carry the room left, in OpenAI's names
        assert r.headers["x-ratelimit-limit-requests"] == "3"
        assert r.headers["x-ratelimit-remaining-requests"] == str(2 - i)
        assert r.headers["x-ratelimit-reset-requests"].endswith("s")
    r = chat(v, "k-alice")
    assert r.status_code == 429
    assert r.json()["error"]["type"] == "rate_limit_error"
    assert r.json()["error"]["code"] == "rate_limit_exceeded"
    assert "per-user" in r.json()["error"]["message"]
    assert r.headers["x-ratelimit-limit-requests"] == "3"
    assert r.headers["x-ratelimit-remaining-requests"] == "0"
    assert r.headers["x-ratelimit-reset-requests"].endswith("s")
    assert 0 < int(r.headers["retry-after"]) <= 86400
    assert r.headers["x-vsr-response-path"] == "rate_limited"
    assert chat(v, "k-bob").status_code == 200          # another user's bucket
    # Anthropic's clients read Anthropic's error shape
    r = httpx.post(v.url + "/v1/messages", timeout=30, headers={"x-api-key": "k-alice"},
                   json={"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]})
    assert r.status_code == 429
    assert r.json()["type"] == "error" and r.json()["error"]["type"] == "rate_limit_error"
    assert r.headers["x-ratelimit-limit-requests"] == "3"
    m = httpx.get(v.metrics_url).text
    assert 'vsr_ratelimit_total{rule="per-user",result="limited"} 2' in m


def test_group_and_model_rules(vsr, fakellm):
    v = limited(vsr, fakellm, """            - name: team-a
              match: {group: team-a}
              requests_per_unit: 2
              unit: hour
            - name: other-model
              match: {model: other}
              requests_per_unit: 1
              unit: hour
""")
    assert chat(v, "k-alice").status_code == 200
    assert chat(v, "k-bob").status_code == 200
    r = chat(v, "k-alice")                                # the group's shared bucket is spent
    assert r.status_code == 429 and "team-a" in r.json()["error"]["message"]
    assert chat(v, "k-carol").status_code == 200          # another group
    assert chat(v, "k-carol", model="other").status_code == 200
    r = chat(v, "k-carol", model="other")
    assert r.status_code == 429 and "other-model" in r.json()["error"]["message"]


def test_streamed_tokens_count(vsr, fakellm):
    v = limited(vsr, fakellm, """            - name: tokens
              match: {user: "*"}
              tokens_per_unit: 5
              unit: day
""")
    with httpx.stream("POST", v.url + "/v1/chat/completions", timeout=30,
                      headers={"authorization": "Bearer k-alice"},
                      json={"model": "m", "stream": True, "stream_options": {"include_usage": True},
                            "messages": [{"role": "user", "content": "hello there, a few words of prompt"}]}) as r:
        assert r.status_code == 200
        body = r.read().decode()
    assert '"usage"' in body
    r = chat(v, "k-alice")
    assert r.status_code == 429
    assert r.headers["x-ratelimit-limit-tokens"] == "5"
    assert r.headers["x-ratelimit-remaining-tokens"] == "0"
    assert chat(v, "k-bob").status_code == 200


def _events(body):
    """A stream's events with what changes from call to call (id, created, fakellm's own fields) left out."""
    body = re.sub(r'"id":"[^"]*"', '"id":""', body)
    body = re.sub(r'"created":\d+', '"created":0', body)
    return re.sub(r',"fakellm":\{.*?\}(?=\}\n)', "", body).split("\n\n")


def test_stream_without_usage_asked_is_charged_and_unchanged(vsr, fakellm):
    be = fakellm()
    port = free_port()
    rl = """    ratelimit:
      providers:
        - type: local-limiter
          rules:
            - name: tokens
              match: {user: "*"}
              tokens_per_unit: 5
              unit: day
"""
    v = vsr(config_yaml(port, [model_yaml("m", [be.endpoint])], default="m", listener_extra=KEYS, global_extra=rl),
            port=port)
    req = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "hello there, a few words"}]}
    users = ("alice", "bob", "carol")
    for user, extra in zip(users, ({}, {"stream_options": {"include_usage": False}}, {"stream_options": {}})):
        direct = httpx.post(be.url + "/v1/chat/completions", timeout=30, json={**req, **extra}).text
        assert '"usage"' not in direct
        with httpx.stream("POST", v.url + "/v1/chat/completions", timeout=30,
                          headers={"authorization": f"Bearer k-{user}"},
                          json={**req, **extra}) as r:
            assert r.status_code == 200
            body = r.read().decode()
        # vsr asked the backend for the usage chunk: the client sees the stream it asked for, byte for byte
        assert _events(body) == _events(direct)
        assert '"usage"' not in body
    # and the tokens were charged
    for user in users:
        r = chat(v, f"k-{user}")
        assert r.status_code == 429
        assert r.headers["x-ratelimit-remaining-tokens"] == "0"


def test_stream_from_messages_backend_without_usage_asked_is_charged(vsr, fakellm):
    be = fakellm()
    port = free_port()
    rl = """    ratelimit:
      providers:
        - type: local-limiter
          rules:
            - name: tokens
              match: {user: "*"}
              tokens_per_unit: 5
              unit: day
"""
    m = model_yaml("m", [be.endpoint]).replace("      backend_refs:", "      api_format: anthropic\n      backend_refs:", 1)
    v = vsr(config_yaml(port, [m], default="m", listener_extra=KEYS, global_extra=rl), port=port)
    with httpx.stream("POST", v.url + "/v1/chat/completions", timeout=30, headers={"authorization": "Bearer k-alice"},
                      json={"model": "m", "stream": True,
                            "messages": [{"role": "user", "content": "hello there, a few words"}]}) as r:
        assert r.status_code == 200
        body = r.read().decode()
    assert "chat.completion.chunk" in body and '"usage"' not in body
    r = chat(v, "k-alice")
    assert r.status_code == 429
    assert r.headers["x-ratelimit-remaining-tokens"] == "0"


def test_non_streamed_tokens_count(vsr, fakellm):
    v = limited(vsr, fakellm, """            - name: tokens
              match: {user: "*"}
              tokens_per_unit: 5
              unit: day
""")
    r = chat(v, "k-alice")
    assert r.status_code == 200 and r.json()["usage"]["total_tokens"] >= 5
    r = chat(v, "k-alice")
    assert r.status_code == 429
    assert r.headers["x-ratelimit-remaining-tokens"] == "0"
    # Anthropic's answer names them input_tokens / output_tokens
    r = httpx.post(v.url + "/v1/messages", timeout=30, headers={"x-api-key": "k-bob"},
                   json={"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "hello there"}]})
    assert r.status_code == 200
    assert chat(v, "k-bob").status_code == 429


def test_ratelimit_document_errors(tmp_path):
    base = """    ratelimit:
      providers:
"""
    for providers, why in (
            ("        - {type: envoy-ratelimit, address: 127.0.0.1}\n", "needs address (host:port) and domain"),
            ("        - {type: local-limiter}\n", "needs rules"),
            ("        - {type: local-limiter, rules: [{name: a, requests_per_unit: 1}]}\n", "needs a unit"),
            ("        - {type: local-limiter, rules: [{name: a, unit: day}]}\n", "requests_per_unit or tokens"),
            ("        - {type: local-limiter, rules: [{name: a, unit: week, requests_per_unit: 1}]}\n", "unit"),
            ("        - {type: local-limiter, rules: [{name: a, unit: day, requests_per_unit: 1},"
             " {name: a, unit: day, requests_per_unit: 2}]}\n", "used twice")):
        p = tmp_path / "c.yaml"
        p.write_text(config_yaml(free_port(), [model_yaml("m", ["127.0.0.1:9"])], global_extra=base + providers))
        r = subprocess.run([VSR_BIN, "config", "validate", str(p)], capture_output=True, text=True, timeout=60)
        assert r.returncode != 0, providers
        assert why in r.stdout + r.stderr, (providers, r.stdout + r.stderr)


# ---- buckets shared through Redis (vsr extension) ---------------------------------------

from test_response_cache import redis  # noqa: E402,F401  (a real redis-server on loopback)


def shared(vsr, fakellm, address, fail_open="false", limit=5, timeout="100ms"):
    return limited(vsr, fakellm, f"""            - name: shared-user
              match: {{user: "*"}}
              requests_per_unit: {limit}
              unit: day
          redis: {{address: "{address}", timeout: {timeout}}}
""", fail_open)


def test_two_replicas_share_one_limit_through_redis(vsr, fakellm, redis):
    a = shared(vsr, fakellm, f"127.0.0.1:{redis.port}")
    b = shared(vsr, fakellm, f"127.0.0.1:{redis.port}")
    got = [chat(v, "k-alice") for v in (a, b, a, b, a)]
    assert [r.status_code for r in got] == [200] * 5
    assert [r.headers["x-ratelimit-remaining-requests"] for r in got] == ["4", "3", "2", "1", "0"]
    r = chat(b, "k-alice")                        # the sixth, on either replica, is over the shared limit
    assert r.status_code == 429
    assert r.headers["x-ratelimit-limit-requests"] == "5"
    assert r.headers["x-ratelimit-remaining-requests"] == "0"
    assert chat(a, "k-alice").status_code == 429
    assert chat(a, "k-bob").status_code == 200
    # Redis forgets the script (a restart, SCRIPT FLUSH): EVALSHA's NOSCRIPT falls back to EVAL
    subprocess.run(["redis-cli", "-p", str(redis.port), "script", "flush"], check=True, capture_output=True)
    assert chat(b, "k-bob").status_code == 200
    assert chat(a, "k-alice").status_code == 429


def fire(v, n):
    import time
    out = []
    for _ in range(n):
        t0 = time.monotonic()
        out.append((chat(v, "k-carol").status_code, time.monotonic() - t0))
    return out


def test_redis_killed_mid_load_fail_open(vsr, fakellm, redis):
    v = shared(vsr, fakellm, f"127.0.0.1:{redis.port}", fail_open="true", limit=1000)
    assert {c for c, _ in fire(v, 5)} == {200}
    redis.kill()
    redis.wait(timeout=10)
    got = fire(v, 10)
    assert {c for c, _ in got} == {200}           # admitted without the check
    m = httpx.get(v.metrics_url).text
    assert 'vsr_ratelimit_total{rule="shared-user",result="error_open"} 10' in m


def test_redis_killed_mid_load_fail_closed(vsr, fakellm, redis):
    v = shared(vsr, fakellm, f"127.0.0.1:{redis.port}", limit=1000)
    assert {c for c, _ in fire(v, 5)} == {200}
    redis.kill()
    redis.wait(timeout=10)
    got = fire(v, 5)
    assert {c for c, _ in got} == {503}
    r = chat(v, "k-carol")
    assert r.json()["error"]["code"] == "rate_limit_unavailable"
    m = httpx.get(v.metrics_url).text
    assert 'vsr_ratelimit_total{rule="shared-user",result="error_closed"} 6' in m


def test_a_hung_redis_bounds_the_check(vsr, fakellm):
    import socket
    import time
    hung = socket.socket()
    hung.bind(("127.0.0.1", 0))
    hung.listen(64)                               # accepts (the kernel does), never answers
    try:
        v = shared(vsr, fakellm, f"127.0.0.1:{hung.getsockname()[1]}", timeout="200ms")
        t0 = time.monotonic()
        r = chat(v, "k-carol")
        took = time.monotonic() - t0
        assert r.status_code == 503
        assert 0.15 <= took < 2.0, took            # waited for its bound, and not much longer
    finally:
        hung.close()


# ---- Envoy's rate limit service (a stand-in speaking envoy.service.ratelimit.v3 over gRPC) ----

def _varint(b, i):
    v = shift = 0
    while True:
        c = b[i]
        i += 1
        v |= (c & 0x7F) << shift
        shift += 7
        if not c & 0x80:
            return v, i


def _fields(b):
    i, out = 0, []
    while i < len(b):
        key, i = _varint(b, i)
        if key & 7 == 0:
            v, i = _varint(b, i)
        else:
            n, i = _varint(b, i)
            v, i = bytes(b[i:i + n]), i + n
        out.append((key >> 3, v))
    return out


def _enc_varint(v):
    out = bytearray()
    while True:
        out.append((v & 0x7F) | (0x80 if v > 0x7F else 0))
        v >>= 7
        if not v:
            return bytes(out)


def _len(field, payload):
    return _enc_varint(field << 3 | 2) + _enc_varint(len(payload)) + payload


def _int(field, v):
    return _enc_varint(field << 3) + _enc_varint(v)


class RateLimitService:
    """Counts hits per (domain, descriptor entries); over `limit` answers OVER_LIMIT."""

    def __init__(self, limit, delay=0.0):
        import grpc  # python3-grpcio (scripts/setup-deps)
        from concurrent import futures
        self.limit, self.delay, self.seen, self.hits = limit, delay, [], {}
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        handler = grpc.method_handlers_generic_handler("envoy.service.ratelimit.v3.RateLimitService", {
            "ShouldRateLimit": grpc.unary_unary_rpc_method_handler(self.call)})
        self.server.add_generic_rpc_handlers((handler,))
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()

    def call(self, request, context):
        import time
        time.sleep(self.delay)
        f = _fields(request)
        domain = dict(f)[1].decode()
        entries = tuple((dict(_fields(e))[1].decode(), dict(_fields(e))[2].decode())
                        for _, d in f if _ == 2 for n, e in _fields(d) if n == 1)
        hits = dict(f).get(3, 1)
        self.seen.append((domain, entries, hits))
        k = (domain, entries)
        self.hits[k] = self.hits.get(k, 0) + hits
        over = self.hits[k] > self.limit
        status = (_int(1, 2 if over else 1) + _len(2, _int(1, self.limit) + _int(2, 2)) +
                  _int(3, max(0, self.limit - self.hits[k])) + _len(4, _int(1, 42)))
        return _int(1, 2 if over else 1) + _len(2, status)

    def stop(self):
        self.server.stop(0)


def envoy_limited(vsr, fakellm, address, fail_open="false", timeout=""):
    be = fakellm()
    port = free_port()
    rl = f"""    ratelimit:
      fail_open: {fail_open}
      providers:
        - type: envoy-ratelimit
          address: "{address}"
          domain: llm
{timeout}"""
    cfg = config_yaml(port, [model_yaml("m", [be.endpoint])], default="m", listener_extra=KEYS, global_extra=rl)
    return vsr(cfg, port=port)


def test_envoy_rate_limit_service(vsr, fakellm):
    svc = RateLimitService(limit=2)
    try:
        v = envoy_limited(vsr, fakellm, f"127.0.0.1:{svc.port}")
        r = chat(v, "k-alice")
        assert r.status_code == 200
        assert r.headers["x-ratelimit-limit-requests"] == "2" and r.headers["x-ratelimit-remaining-requests"] == "1"
        assert chat(v, "k-alice").status_code == 200
        r = chat(v, "k-alice")
        assert r.status_code == 429
        assert r.json()["error"]["type"] == "rate_limit_error"
        assert r.headers["retry-after"] == "42" and r.headers["x-ratelimit-remaining-requests"] == "0"
        assert chat(v, "k-carol").status_code == 200           # another descriptor
        assert svc.seen[0] == ("llm", (("user", "alice"), ("group", "team-a"), ("model", "m")), 1)
        m = httpx.get(v.metrics_url).text
        assert 'vsr_ratelimit_total{rule="envoy-ratelimit",result="limited"} 1' in m
    finally:
        svc.stop()


def test_envoy_rate_limit_service_down_or_slow(vsr, fakellm):
    import time
    dead = free_port()                                        # nothing listens there
    v = envoy_limited(vsr, fakellm, f"127.0.0.1:{dead}", fail_open="true")
    assert chat(v, "k-alice").status_code == 200
    v = envoy_limited(vsr, fakellm, f"127.0.0.1:{dead}")
    r = chat(v, "k-alice")
    assert r.status_code == 503 and r.json()["error"]["code"] == "rate_limit_unavailable"
    svc = RateLimitService(limit=100, delay=2.0)              # answers after the check's bound
    try:
        v = envoy_limited(vsr, fakellm, f"127.0.0.1:{svc.port}", timeout="          timeout: 200ms\n")
        t0 = time.monotonic()
        r = chat(v, "k-alice")
        took = time.monotonic() - t0
        assert r.status_code == 503
        assert 0.15 <= took < 1.5, took
    finally:
        svc.stop()
