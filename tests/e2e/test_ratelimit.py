"""global.services.ratelimit: the local limiter's rules, 429s in the client's protocol, metrics by rule."""
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


def test_ratelimit_document_errors(tmp_path):
    base = """    ratelimit:
      providers:
"""
    for providers, why in (
            ("        - {type: envoy-ratelimit, address: 127.0.0.1:8081, domain: d}\n", "envoy-ratelimit"),
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
