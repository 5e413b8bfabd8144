"""fakellm's own test hooks: the call log (/_fakellm/log), per-key fault
budgets (x-fakellm-key + x-fakellm-fail-count) and the mid-stream stall, which
the proxy's retry, fallback and idle-timeout tests build on."""
import base64
import json
import os
import struct
import subprocess
import threading
import time

import httpx
import pytest

from conftest import MODEL_CACHE, ROOT, raw_request, require, sse_events, wait_until

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
STREAM = dict(CHAT, stream=True)


def post(be, headers=None, body=CHAT, path="/v1/chat/completions", timeout=10):
    """One request on a fresh connection, so a fault never leaks into the next."""
    return httpx.post(be.url + path, json=body, headers=headers or {}, timeout=timeout)


def post_fails(be, headers, body=CHAT, timeout=10):
    """A request the backend is expected to cut off (reset, drop, hang)."""
    with pytest.raises(httpx.TransportError):
        with httpx.Client(timeout=timeout) as c:
            with c.stream("POST", be.url + "/v1/chat/completions", json=body, headers=headers) as r:
                for _ in r.iter_raw():
                    pass


def log(be, key=None):
    r = httpx.get(be.url + "/_fakellm/log", params={"key": key} if key is not None else None, timeout=10)
    assert r.status_code == 200, r.text
    return r.json()


def entries(be, key=None):
    return log(be, key)["entries"]


def keyed(key, fail_count=None, **knobs):
    h = {"x-fakellm-key": key}
    if fail_count is not None:
        h["x-fakellm-fail-count"] = str(fail_count)
    for name, value in knobs.items():
        h["x-fakellm-" + name.replace("_", "-")] = str(value)
    return h


def pipeline(port, requests):
    """Send raw requests back to back on one connection (the last one asks
    for the close) and return the number of responses received."""
    data = b"".join(requests)
    got, closed = raw_request(port, data, read_timeout=30)
    assert closed
    return got.count(b"HTTP/1.1 ")


def get_req(path, *headers, close=False):
    lines = [f"GET {path} HTTP/1.1", "Host: x", *headers]
    if close:
        lines.append("Connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


# ---- the log --------------------------------------------------------------


def test_log_records_every_request_in_order(fakellm):
    be = fakellm("a")
    assert post(be, {"x-request-id": "r1"}).status_code == 200
    assert httpx.get(be.url + "/health").status_code == 200
    assert httpx.get(be.url + "/stats").status_code == 200                  # not logged
    assert post(be, keyed("k", status=429)).status_code == 429
    post_fails(be, {"x-fakellm-drop-after": "1"}, body=STREAM)
    post_fails(be, {"x-fakellm-reset": "before-headers"})
    post_fails(be, {"x-fakellm-reset": "after-headers"})
    assert post(be, keyed("k", delay_ms=20)).status_code == 200
    r = post(be, {"x-fakellm-stall-after": "1", "x-fakellm-stall-ms": "10"}, body=STREAM)
    assert sse_events(r.text)[-1] == "[DONE]"
    post_fails(be, {"x-fakellm-hang": "1"}, timeout=0.5)
    assert httpx.get(be.url + "/v1/models").status_code == 200
    assert httpx.put(be.url + "/_fakellm/health-status", content="503").status_code == 200  # not logged
    assert httpx.get(be.url + "/health").status_code == 503
    assert httpx.get(be.url + "/_fakellm/log").status_code == 200           # not logged
    assert httpx.get(be.url + "/_fakellm/nope").status_code == 404          # not logged
    assert post(be, body="{oops").status_code == 400                        # malformed JSON
    assert post(be, {"x-fakellm-chunkz": "1"}).status_code == 400           # unknown knob
    assert post(be, {"x-fakellm-status": "503", "x-fakellm-delay-ms": "5"},
                path="/v1/completions").status_code == 503
    assert post(be, {"x-fakellm-status": "500"}, path="/anything?q=1").status_code == 500
    got, closed = raw_request(be.port, b"POST /v1/bad HTTP/1.1\r\nHost: x\r\nBad : y\r\n\r\n")
    assert closed and got.startswith(b"HTTP/1.1 400 ")

    d = log(be)
    assert d["backend"] == "a" and d["capacity"] == 10000 and d["overwritten"] == 0
    got = d["entries"]
    CC = "/v1/chat/completions"
    want = [
        # method, path, model, request_id, key, attempt, outcome, health
        ("POST", CC, "m", "r1", None, None, "ok", False),
        ("GET", "/health", None, None, None, None, "health", True),
        ("POST", CC, "m", None, "k", 1, "status:429", False),
        ("POST", CC, "m", None, None, None, "drop", False),
        ("POST", CC, "m", None, None, None, "reset", False),
        ("POST", CC, "m", None, None, None, "reset", False),
        ("POST", CC, "m", None, "k", 2, "delay", False),
        ("POST", CC, "m", None, None, None, "stall", False),
        ("POST", CC, "m", None, None, None, "hang", False),
        ("GET", "/v1/models", None, None, None, None, "ok", False),
        ("GET", "/health", None, None, None, None, "health", True),
        ("POST", CC, None, None, None, None, "status:400", False),
        ("POST", CC, "m", None, None, None, "status:400", False),
        ("POST", "/v1/completions", "m", None, None, None, "status:503", False),
        ("POST", "/anything?q=1", None, None, None, None, "status:500", False),
        ("POST", "/v1/bad", None, None, None, None, "status:400", False),
    ]
    fields = ("method", "path", "model", "request_id", "key", "attempt", "outcome", "health")
    assert [tuple(e[f] for f in fields) for e in got] == want
    assert [e["seq"] for e in got] == list(range(1, len(want) + 1))
    assert all(e["backend"] == "a" and e["thread"] == 0 for e in got)
    times = [e["time_ms"] for e in got]
    assert times == sorted(times) and times[0] >= 0
    stats = be.stats()
    assert stats["requests"] + stats["health"] == len(want)


def test_log_filter_and_clear(fakellm):
    be = fakellm()
    for key in ("a", "b", "a", "a b/c+d%", "b", "a"):
        assert post(be, keyed(key)).status_code == 200
    assert post(be).status_code == 200
    assert len(entries(be)) == 7
    assert [(e["seq"], e["attempt"]) for e in entries(be, "a")] == [(1, 1), (3, 2), (6, 3)]
    assert [(e["seq"], e["attempt"]) for e in entries(be, "b")] == [(2, 1), (5, 2)]
    # httpx encodes the space as "+" and the rest with %XX
    assert [e["seq"] for e in entries(be, "a b/c+d%")] == [4]
    r = httpx.get(be.url + "/_fakellm/log?key=a%20b%2Fc%2Bd%25")
    assert [e["seq"] for e in r.json()["entries"]] == [4]
    assert entries(be, "zzz") == []
    for bad in ("?kee=a", "?key=", "?key=%zz", "?key=%4", "?key=a&x=1", "?key=" + "k" * 129):
        got, _ = raw_request(be.port, get_req("/_fakellm/log" + bad, close=True))
        assert got.startswith(b"HTTP/1.1 400 "), bad
        assert b'"invalid_request_error"' in got

    r = httpx.delete(be.url + "/_fakellm/log")
    assert r.json() == {"cleared": 7, "backend": be.name}
    assert log(be)["entries"] == []
    # seq keeps counting; clearing the log does not reset the keys ...
    assert post(be, keyed("a")).status_code == 200
    assert [(e["seq"], e["attempt"]) for e in entries(be)] == [(8, 4)]
    # ... forgetting the keys does
    r = httpx.delete(be.url + "/_fakellm/keys")
    assert r.json() == {"cleared": 3, "backend": be.name}
    assert post(be, keyed("a")).status_code == 200
    assert [(e["seq"], e["attempt"]) for e in entries(be, "a")] == [(8, 4), (9, 1)]

    # the control paths
    assert httpx.post(be.url + "/_fakellm/log").status_code == 405
    assert httpx.get(be.url + "/_fakellm/keys").status_code == 405
    assert httpx.get(be.url + "/_fakellm/other").status_code == 404
    assert be.stats()["requests"] == 9


def test_log_keeps_the_last_10000_entries(fakellm):
    be = fakellm()
    n = 10050
    reqs = [get_req(f"/r{i}") for i in range(1, n)] + [get_req(f"/r{n}", close=True)]
    assert pipeline(be.port, reqs) == n
    d = log(be)
    assert d["overwritten"] == n - 10000
    got = d["entries"]
    assert len(got) == 10000
    assert [e["seq"] for e in got] == list(range(n - 9999, n + 1))
    assert [e["path"] for e in got] == [f"/r{i}" for i in range(n - 9999, n + 1)]
    assert httpx.delete(be.url + "/_fakellm/log").json()["cleared"] == 10000
    assert log(be)["overwritten"] == 0


def test_log_field_limits(fakellm):
    be = fakellm()
    long_path = "/v1/chat/completions?q=" + "p" * 300
    model = "a" + "é" * 100  # byte 128 is inside a character: cut before it
    assert post(be, {"x-request-id": "i" * 200}, body={"model": model}, path=long_path).status_code == 200
    e = entries(be)[0]
    assert e["path"] == long_path[:256]
    assert e["model"] == "a" + "é" * 63
    assert e["request_id"] == "i" * 128
    # keys are never truncated: a longer one is refused
    r = post(be, {"x-fakellm-key": "k" * 129})
    assert r.status_code == 400 and "'key'" in r.json()["error"]["message"]
    assert post(be, {"x-fakellm-key": "k" * 128}).status_code == 200
    assert entries(be)[-1]["key"] == "k" * 128


# ---- per-key fault budgets ------------------------------------------------


def test_fail_count_budget(fakellm):
    be = fakellm()
    codes = [post(be, keyed("k1", 2, status=503, retry_after=7)) for _ in range(3)]
    assert [r.status_code for r in codes] == [503, 503, 200]
    assert [r.headers.get("retry-after") for r in codes] == ["7", "7", None]
    assert codes[2].json()["object"] == "chat.completion"
    got = entries(be, "k1")
    assert [(e["attempt"], e["outcome"]) for e in got] == [(1, "status:503"), (2, "status:503"), (3, "ok")]
    # the budget stays spent
    assert post(be, keyed("k1", 2, status=503)).status_code == 200


def test_fail_count_per_fault(fakellm):
    be = fakellm()
    # reset, then normal
    post_fails(be, keyed("r", 1, reset="before-headers"))
    assert post(be, keyed("r", 1, reset="before-headers")).status_code == 200
    # a dropped stream, then a complete one with the same content knobs
    post_fails(be, keyed("d", 1, drop_after=1, chunks=3), body=STREAM)
    r = post(be, keyed("d", 1, drop_after=1, chunks=3), body=STREAM)
    ev = sse_events(r.text)
    assert ev[-1] == "[DONE]" and len(ev) == 3 + 2
    # hang, then normal
    post_fails(be, keyed("h", 1, hang=1), timeout=0.5)
    assert post(be, keyed("h", 1, hang=1)).status_code == 200
    # an injected body is a fault too
    r = post(be, keyed("b", 1, body="garbage"))
    assert r.text == "garbage"
    assert post(be, keyed("b", 1, body="garbage")).json()["object"] == "chat.completion"
    # delay, then none
    assert post(be, keyed("w", 1, delay_ms=10)).status_code == 200
    assert post(be, keyed("w", 1, delay_ms=10)).status_code == 200
    # fail-count 0: never
    assert post(be, keyed("z", 0, status=500)).status_code == 200
    # without fail-count the knobs apply every time, and attempts still count
    assert [post(be, keyed("n", status=502)).status_code for _ in range(3)] == [502] * 3

    outcomes = {}
    for e in entries(be):
        outcomes.setdefault(e["key"], []).append((e["attempt"], e["outcome"]))
    assert outcomes == {
        "r": [(1, "reset"), (2, "ok")],
        "d": [(1, "drop"), (2, "ok")],
        "h": [(1, "hang"), (2, "ok")],
        "b": [(1, "ok"), (2, "ok")],
        "w": [(1, "delay"), (2, "ok")],
        "z": [(1, "ok")],
        "n": [(1, "status:502"), (2, "status:502"), (3, "status:502")],
    }


def test_fail_count_interleaved_keys_and_body_knobs(fakellm):
    be = fakellm()
    body = dict(CHAT, fakellm={"key": "x", "fail-count": 1, "status": 500})
    seq = [post(be, keyed("y", 2, status=429)).status_code,
           post(be, body=body).status_code,
           post(be, keyed("y", 2, status=429)).status_code,
           post(be, body=body).status_code,
           post(be, keyed("y", 2, status=429)).status_code]
    assert seq == [429, 500, 429, 200, 200]
    # a header key overrides the body's: a fresh budget
    assert post(be, keyed("x2"), body=body).status_code == 500
    got = [(e["key"], e["attempt"]) for e in entries(be)]
    assert got == [("y", 1), ("x", 1), ("y", 2), ("x", 2), ("y", 3), ("x2", 1)]


def test_fail_count_overrides_process_wide_faults(fakellm):
    be = fakellm(args=["--status", "500"])
    assert post(be).status_code == 500
    assert [post(be, keyed("k", 1)).status_code for _ in range(2)] == [500, 200]
    assert [e["outcome"] for e in entries(be)] == ["status:500", "status:500", "ok"]


def test_fail_count_needs_key_and_bad_values(fakellm):
    be = fakellm()
    for h in ({"x-fakellm-fail-count": "1"}, keyed("k", "x"), keyed("k", -1), {"x-fakellm-key": ""}):
        r = post(be, h)
        assert r.status_code == 400, h
    # a refused request is logged but is not an attempt of its key
    assert post(be, keyed("k", 1, status=503)).status_code == 503
    assert [(e["key"], e["attempt"], e["outcome"]) for e in entries(be, "k")] == [
        ("k", 0, "status:400"), ("k", 0, "status:400"), ("k", 1, "status:503")]


def test_keys_are_bounded_lru(fakellm):
    be = fakellm()
    reqs = [get_req("/k", "x-fakellm-key: k0")]
    reqs += [get_req("/k", f"x-fakellm-key: k{i}") for i in range(1, 4097)]  # evicts k0
    reqs += [get_req("/k", "x-fakellm-key: k0"),                             # evicts k1
             get_req("/k", "x-fakellm-key: k4096"),
             get_req("/k", "x-fakellm-key: k1", close=True)]
    assert pipeline(be.port, reqs) == len(reqs)
    assert [e["attempt"] for e in entries(be, "k0")] == [1, 1]
    assert [e["attempt"] for e in entries(be, "k4096")] == [1, 2]
    assert [e["attempt"] for e in entries(be, "k1")] == [1, 1]


# ---- the stall ------------------------------------------------------------


def stream_times(be, headers, chunks):
    """Arrival time of the response head and of each SSE data event."""
    t0 = time.monotonic()
    times, events = [], []
    with httpx.Client(timeout=30) as c:
        with c.stream("POST", be.url + "/v1/chat/completions", json=STREAM,
                      headers=dict(headers, **{"x-fakellm-chunks": str(chunks)})) as r:
            assert r.status_code == 200
            head = time.monotonic() - t0
            for line in r.iter_lines():
                if line.startswith("data: "):
                    times.append(time.monotonic() - t0)
                    events.append(line[6:].rstrip("\r\n"))
    assert events[-1] == "[DONE]"
    return head, times, events


def test_stall_mid_stream(fakellm):
    be = fakellm()
    stall = 1.5
    head, t, ev = stream_times(be, {"x-fakellm-stall-after": "2", "x-fakellm-stall-ms": "1500"}, 4)
    assert [json.loads(e)["fakellm"]["chunk"] for e in ev[:-1]] == [0, 1, 2, 3, 4]
    # events 0 and 1 come at once, then nothing for the stall, then the rest
    assert t[2] - t[1] >= stall * 0.95
    assert t[1] < t[2] - t[1]
    assert t[-1] - t[0] < 30


def test_stall_after_zero_holds_the_first_event(fakellm):
    be = fakellm()
    head, t, ev = stream_times(be, {"x-fakellm-stall-after": "0", "x-fakellm-stall-ms": "1200"}, 2)
    assert len(ev) == 2 + 2
    assert t[0] - head >= 1.2 * 0.95   # the head alone, then the stall


def test_stall_past_the_end_delays_the_tail(fakellm):
    be = fakellm()
    head, t, ev = stream_times(be, {"x-fakellm-stall-after": "99", "x-fakellm-stall-ms": "1200"}, 3)
    assert len(ev) == 3 + 2
    assert t[3] - t[2] >= 1.2 * 0.95   # all content, then the stall, then finish + [DONE]


def test_stall_then_drop(fakellm):
    be = fakellm()
    t0 = time.monotonic()
    with pytest.raises(httpx.TransportError):
        with httpx.Client(timeout=30) as c:
            with c.stream("POST", be.url + "/v1/chat/completions", json=STREAM,
                          headers={"x-fakellm-stall-after": "1", "x-fakellm-stall-ms": "1000",
                                   "x-fakellm-drop-after": "1"}) as r:
                for _ in r.iter_raw():
                    pass
    assert time.monotonic() - t0 >= 1.0 * 0.95
    assert [e["outcome"] for e in entries(be)] == ["drop"]


def test_stall_knob_validation(fakellm):
    be = fakellm()
    for h in ({"x-fakellm-stall-after": "1"}, {"x-fakellm-stall-after": "x", "x-fakellm-stall-ms": "1"},
              {"x-fakellm-stall-after": "1", "x-fakellm-stall-ms": "3600001"}):
        r = post(be, h, body=STREAM)
        assert r.status_code == 400, h
    r = post(be, {"x-fakellm-stall-after": "none", "x-fakellm-stall-ms": "5000"}, body=STREAM)
    assert r.status_code == 200 and sse_events(r.text)[-1] == "[DONE]"
    # in the body, like every knob
    r = post(be, body=dict(STREAM, fakellm={"stall-after": 1, "stall_ms": 10}))
    assert r.status_code == 200
    assert entries(be)[-1]["outcome"] == "stall"


# ---- threads ----------------------------------------------------------------


def test_log_consistent_across_threads(fakellm):
    be = fakellm(args=["--threads", "2"])
    budget, workers, per_worker = 7, 8, 10
    results, errors = {}, []

    def run(w):
        try:
            for i in range(per_worker):
                rid = f"w{w}-{i}"
                # a new connection each time, so the kernel spreads them over both loops
                r = post(be, dict(keyed("shared", budget, status=503), **{"x-request-id": rid,
                                                                         "connection": "close"}))
                results[rid] = r.status_code
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(w,)) for w in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    total = workers * per_worker
    assert sorted(results.values()) == [200] * (total - budget) + [503] * budget

    got = entries(be)
    assert [e["seq"] for e in got] == list(range(1, total + 1))
    times = [e["time_ms"] for e in got]
    assert times == sorted(times)
    assert {e["thread"] for e in got} == {0, 1}
    # attempts follow seq order, and the budget went to exactly the first ones
    assert [e["attempt"] for e in got] == list(range(1, total + 1))
    assert [e["outcome"] for e in got] == ["status:503"] * budget + ["ok"] * (total - budget)
    assert {e["request_id"]: (503 if e["outcome"] == "status:503" else 200) for e in got} == results


def accumulate(chunks):
    """What the OpenAI SDK's stream helper does with chat chunks: the first
    delta of a choice must name its role ("missing role for choice 0")."""
    snapshot = {}
    for ch in chunks:
        for c in ch["choices"]:
            d = c["delta"]
            if c["index"] not in snapshot:
                if "role" not in d:
                    raise AssertionError(f"missing role for choice {c['index']}")
                snapshot[c["index"]] = {"role": d["role"], "content": ""}
            snapshot[c["index"]]["content"] += d.get("content") or ""
            assert "logprobs" in c and "finish_reason" in c
    return snapshot


def test_chat_stream_chunks_are_shaped_as_openai_sends_them(fakellm):
    be = fakellm()
    for n in (3, 0):
        r = post(be, {"x-fakellm-chunks": str(n)}, body=STREAM)
        chunks = [json.loads(e) for e in sse_events(r.text) if e != "[DONE]"]
        assert all(ch["object"] == "chat.completion.chunk" and ch["system_fingerprint"] for ch in chunks)
        assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
        assert all("role" not in ch["choices"][0]["delta"] for ch in chunks[1:])
        assert accumulate(chunks) == {0: {"role": "assistant", "content": "".join(f"tok{i} " for i in range(n))}}
        assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
    body = post(be).json()
    assert body["system_fingerprint"] and body["choices"][0]["logprobs"] is None
    assert body["choices"][0]["message"]["refusal"] is None


# ---- logprobs -------------------------------------------------------------


def lp_body(top=None, **extra):
    b = dict(CHAT, logprobs=True, **extra)
    if top is not None:
        b["top_logprobs"] = top
    return b


def test_logprobs_shape_and_defaults(fakellm):
    be = fakellm("a", args=["--text", "one two  three"])
    r = post(be, body=lp_body(top=3))
    assert r.status_code == 200, r.text
    lp = r.json()["choices"][0]["logprobs"]
    toks = [e["token"] for e in lp["content"]]
    assert toks == ["one ", "two  ", "three"]            # the words with the spaces the text has
    assert "".join(toks) == r.json()["choices"][0]["message"]["content"]
    for e in lp["content"]:
        assert e["logprob"] == pytest.approx(-0.1)
        assert e["bytes"] == list(e["token"].encode())
        assert len(e["top_logprobs"]) == 3
        assert e["top_logprobs"][0]["token"] == e["token"]
        assert [t["logprob"] for t in e["top_logprobs"]] == pytest.approx([-0.1, -1.1, -2.1])
        assert all(t["bytes"] == list(t["token"].encode()) for t in e["top_logprobs"])
        assert len({t["token"] for t in e["top_logprobs"]}) == 3
    # not asked, or asked false: null as before
    assert post(be).json()["choices"][0]["logprobs"] is None
    assert post(be, body=dict(CHAT, logprobs=False)).json()["choices"][0]["logprobs"] is None
    # top_logprobs absent = 0 alternatives
    assert all(e["top_logprobs"] == [] for e in post(be, body=lp_body()).json()["choices"][0]["logprobs"]["content"])


def test_logprob_knobs_header_body_flag(fakellm):
    be = fakellm("a", args=["--logprob", "-0.5", "--logprob-margin", "0.25"])

    def first(r):
        assert r.status_code == 200, r.text
        return r.json()["choices"][0]["logprobs"]["content"][0]

    e = first(post(be, body=lp_body(top=2)))
    assert [t["logprob"] for t in e["top_logprobs"]] == pytest.approx([-0.5, -0.75])
    e = first(post(be, {"x-fakellm-logprob": "-2", "x-fakellm-logprob-margin": "0"}, body=lp_body(top=2)))
    assert [t["logprob"] for t in e["top_logprobs"]] == pytest.approx([-2.0, -2.0])
    e = first(post(be, body=lp_body(top=2, fakellm={"logprob": -3.5, "logprob_margin": 2})))
    assert e["logprob"] == pytest.approx(-3.5)
    assert [t["logprob"] for t in e["top_logprobs"]] == pytest.approx([-3.5, -5.5])
    # header wins over body
    e = first(post(be, {"x-fakellm-logprob": "-1"}, body=lp_body(top=1, fakellm={"logprob": -3})))
    assert e["logprob"] == pytest.approx(-1.0)


def test_logprobs_missing(fakellm):
    be = fakellm("a")
    r = post(be, {"x-fakellm-logprobs-missing": "1"}, body=lp_body(top=2))
    assert r.status_code == 200 and r.json()["choices"][0]["logprobs"] is None
    r = post(be, body=lp_body(top=2, fakellm={"logprobs-missing": True}))
    assert r.json()["choices"][0]["logprobs"] is None
    be2 = fakellm("b", args=["--logprobs-missing"])
    assert post(be2, body=lp_body(top=2)).json()["choices"][0]["logprobs"] is None
    r = post(be2, {"x-fakellm-logprobs-missing": "0"}, body=lp_body(top=2))
    assert r.json()["choices"][0]["logprobs"] is not None


def test_logprob_bad_values(fakellm):
    be = fakellm("a")
    for name, value in [("logprob", "0.5"), ("logprob", "abc"), ("logprob", "-1001"), ("logprob", "nan"),
                        ("logprob-margin", "-1"), ("logprob-margin", "1e9"), ("logprobs-missing", "maybe")]:
        r = post(be, {"x-fakellm-" + name: value}, body=lp_body(top=1))
        assert r.status_code == 400, (name, value)
        assert f"'{name}'" in r.json()["error"]["message"]
    for top in (-1, 21, "2", 1.5):
        r = post(be, body=lp_body(top=top))
        assert r.status_code == 400, top
        assert "top_logprobs" in r.json()["error"]["message"]
        assert r.json()["error"]["type"] == "invalid_request_error"
    assert post(be, body=lp_body(top=20)).status_code == 200
    assert post(be, body=lp_body(top=0)).status_code == 200


def test_logprobs_in_stream_chunks(fakellm):
    be = fakellm("a")
    r = post(be, {"x-fakellm-text": "alpha beta", "x-fakellm-logprob": "-0.3"}, body=dict(lp_body(top=2), stream=True))
    chunks = [json.loads(d) for d in sse_events(r.text) if d != "[DONE]"]
    content = [c for c in chunks if c["choices"] and c["choices"][0]["delta"].get("content")]
    assert [c["choices"][0]["delta"]["content"] for c in content] == ["alpha ", "beta"]
    for c in content:
        lc = c["choices"][0]["logprobs"]["content"]
        assert len(lc) == 1 and lc[0]["token"] == c["choices"][0]["delta"]["content"]
        assert [t["logprob"] for t in lc[0]["top_logprobs"]] == pytest.approx([-0.3, -1.3])
    # without logprobs the chunks keep null
    r = post(be, body=STREAM)
    chunks = [json.loads(d) for d in sse_events(r.text) if d != "[DONE]"]
    assert all(c["choices"][0]["logprobs"] is None for c in chunks if c["choices"])


# ---- per-model answers ----------------------------------------------------


MODEL_ARGS = ["--model-text", "m-small=small says hi", "--model-text", "m-large=large says more here",
              "--model-logprob", "m-small=-2.5", "--model-delay-ms", "m-slow=400",
              "--model-status", "m-bad=503", "--model-text", "m-slow=slow",
              "--model-logprob-margin", "m-large=2.5", "--model-logprobs-missing", "m-slow=1"]


def test_model_flags_answer_per_model(fakellm):
    be = fakellm("a", args=MODEL_ARGS)

    def ask(model, headers=None, **extra):
        return post(be, headers, body=dict(CHAT, model=model, **extra))

    assert ask("m-small").json()["choices"][0]["message"]["content"] == "small says hi"
    assert ask("m-large").json()["choices"][0]["message"]["content"] == "large says more here"
    assert ask("m-large").json()["usage"]["completion_tokens"] == 4
    assert ask("other").json()["choices"][0]["message"]["content"] == "Hello from a"
    assert ask("m-small", logprobs=True).json()["choices"][0]["logprobs"]["content"][0]["logprob"] == pytest.approx(-2.5)
    large = ask("m-large", logprobs=True, top_logprobs=2).json()["choices"][0]["logprobs"]["content"][0]
    assert [t["logprob"] for t in large["top_logprobs"]] == pytest.approx([-0.1, -2.6])
    assert ask("m-small", logprobs=True, top_logprobs=2).json()["choices"][0]["logprobs"]["content"][0][
        "top_logprobs"][1]["logprob"] == pytest.approx(-3.5)
    assert ask("m-slow", logprobs=True).json()["choices"][0]["logprobs"] is None
    assert ask("m-slow", {"x-fakellm-logprobs-missing": "0"}, logprobs=True).json()["choices"][0]["logprobs"] is not None
    r = ask("m-bad")
    assert r.status_code == 503 and r.json()["error"]["code"] == 503
    t0 = time.monotonic()
    assert ask("m-slow").json()["choices"][0]["message"]["content"] == "slow"
    assert time.monotonic() - t0 >= 0.35
    # per-request knobs still win
    assert ask("m-small", {"x-fakellm-text": "mine"}).json()["choices"][0]["message"]["content"] == "mine"
    assert ask("m-bad", {"x-fakellm-status": "0"}).status_code == 200
    assert ask("m-small", {"x-fakellm-logprob": "-0.2"}, logprobs=True).json()[
        "choices"][0]["logprobs"]["content"][0]["logprob"] == pytest.approx(-0.2)
    outcomes = [(e["model"], e["outcome"]) for e in entries(be)]
    assert ("m-bad", "status:503") in outcomes and ("m-slow", "delay") in outcomes
    # a spent fault budget cancels the per-model fault too
    assert [ask("m-bad", keyed("mb", fail_count=1)).status_code for _ in range(2)] == [503, 200]


def test_model_text_streams_word_by_word(fakellm):
    be = fakellm("a", args=MODEL_ARGS)
    r = post(be, body=dict(STREAM, model="m-large"))
    chunks = [json.loads(d) for d in sse_events(r.text) if d != "[DONE]"]
    words = [c["choices"][0]["delta"].get("content") for c in chunks if c["choices"]]
    assert words[:-1] == ["large ", "says ", "more ", "here"] and words[-1] is None
    # a text knob per request streams its words too
    r = post(be, {"x-fakellm-text": "x y"}, body=STREAM)
    assert [json.loads(d)["choices"][0]["delta"].get("content")
            for d in sse_events(r.text)[:-1] if json.loads(d)["choices"]][:-1] == ["x ", "y"]
    # no text per model or per request: tok<i> as before, also with --text
    r = post(be, body=dict(STREAM, model="other"))
    assert [json.loads(d)["choices"][0]["delta"].get("content")
            for d in sse_events(r.text)[:-1]][:5] == [f"tok{i} " for i in range(5)]
    be2 = fakellm("b", args=["--text", "process wide"])
    r = post(be2, body=STREAM)
    assert json.loads(sse_events(r.text)[0])["choices"][0]["delta"]["content"] == "tok0 "
    # the Responses stream carries the same words and the full text at the end
    r = post(be, body={"model": "m-small", "input": "hi", "stream": True}, path="/v1/responses")
    datas = [json.loads(d) for d in sse_events(r.text)]
    assert [d["delta"] for d in datas if d["type"] == "response.output_text.delta"] == ["small ", "says ", "hi"]
    assert datas[-1]["response"]["output"][0]["content"][0]["text"] == "small says hi"


@pytest.mark.parametrize("args", [
    ["--model-text", "noequals"], ["--model-text", "=text"], ["--model-delay-ms", "m=-1"],
    ["--model-delay-ms", "m=abc"], ["--model-logprob", "m=1"], ["--model-status", "m=99"],
    ["--model-status", "m=600"], ["--logprob", "0.1"], ["--logprob-margin", "-2"], ["--logprob", "x"],
    ["--model-logprob", "m"], ["--model-logprob-margin", "m=-1"], ["--model-logprobs-missing", "m=2"],
])
def test_model_flags_bad_values_exit_2(args):
    import subprocess
    from conftest import FAKELLM_BIN
    p = subprocess.run([FAKELLM_BIN, "--port", "0", *args], capture_output=True, timeout=10)
    assert p.returncode == 2, (args, p.stderr)
    assert b"usage" in p.stderr


# ---- the log's body essentials and times ----------------------------------


def test_log_body_essentials(fakellm):
    be = fakellm("a")
    long_user = "u" * 600 + "é"
    body = {"model": "m", "stream": False, "logprobs": True, "top_logprobs": 2, "temperature": 0.25,
            "max_completion_tokens": 64, "max_tokens": 32,
            "messages": [{"role": "system", "content": "be brief"},
                         {"role": "user", "content": "first"},
                         {"role": "assistant", "content": "ok"},
                         {"role": "user", "content": [{"type": "text", "text": "part one "},
                                                      {"type": "text", "text": "part two"}]}],
            "tools": [{"type": "function", "function": {"name": "f"}}]}
    assert post(be, body=body).status_code == 200
    assert post(be, body=dict(body, tools=[])).status_code == 200
    assert post(be, body={"model": "m", "messages": [{"role": "user", "content": long_user}], "stream": True}).status_code == 200
    assert post(be, body={"model": "m", "prompt": "p"}, path="/v1/completions").status_code == 200
    assert post(be, body="{oops").status_code == 400
    assert httpx.get(be.url + "/health").status_code == 200
    got = entries(be)
    b0 = got[0]["body"]
    assert b0 == {"stream": False, "logprobs": True, "top_logprobs": 2, "temperature": 0.25,
                  "max_completion_tokens": 64, "max_tokens": 32, "n_messages": 4,
                  "last_user": "part one part two", "system": "be brief", "has_tools": True,
                  "messages_sha": b0["messages_sha"]}
    assert len(b0["messages_sha"]) == 16 and int(b0["messages_sha"], 16) >= 0
    b1 = got[1]["body"]
    assert b1["has_tools"] is False and b1["messages_sha"] == b0["messages_sha"]   # same messages, same hash
    b2 = got[2]["body"]
    assert b2["stream"] is True and b2["logprobs"] is None and b2["system"] is None
    assert b2["last_user"] == "u" * 512 and b2["messages_sha"] != b0["messages_sha"]
    assert b2["temperature"] is None and b2["max_tokens"] is None and b2["n_messages"] == 1
    b3 = got[3]["body"]
    assert b3["n_messages"] is None and b3["last_user"] is None and b3["messages_sha"] is None
    assert got[4]["body"] is None and got[5]["body"] is None
    # the hash is of the messages, not of their spelling; a change in them changes it
    msgs = [{"role": "user", "content": "first"}]
    spaced = '{ "model" : "m",\n  "messages" : [ { "role" : "user" , "content" : "first" } ] }'
    assert httpx.post(be.url + "/v1/chat/completions", content=spaced, timeout=10).status_code == 200
    assert post(be, body={"model": "other", "messages": msgs}).status_code == 200
    assert post(be, body={"model": "m", "messages": [{"role": "user", "content": "firsT"}]}).status_code == 200
    a, b, c = (e["body"]["messages_sha"] for e in entries(be)[-3:])
    assert a == b != c


def test_log_start_and_end_times_show_overlap(fakellm):
    be = fakellm("a", args=["--threads", "1"])
    results = []

    def call(delay):
        results.append(post(be, {"x-fakellm-delay-ms": str(delay)}).status_code)

    ts = [threading.Thread(target=call, args=(d,)) for d in (600, 600)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(30)
    assert results == [200, 200]
    post_fails(be, {"x-fakellm-hang": "1"}, timeout=0.3)
    r = post(be, body=STREAM, headers={"x-fakellm-chunk-delay-ms": "100", "x-fakellm-chunks": "3"})
    assert r.status_code == 200
    a, b, hang, stream = entries(be)
    for e in (a, b):
        assert e["start_ms"] == e["time_ms"] and e["end_ms"] - e["start_ms"] >= 550
    # both were answered after both had started: they overlapped
    assert max(a["start_ms"], b["start_ms"]) < min(a["end_ms"], b["end_ms"])
    assert hang["end_ms"] is None
    assert stream["end_ms"] - stream["start_ms"] >= 250   # two gaps and the tail's, 100 ms each


def test_log_end_ms_over_h2(fakellm):
    import subprocess
    be = fakellm("a")
    p = subprocess.run(["curl", "-sS", "--http2-prior-knowledge", "--max-time", "20", "-H", "x-fakellm-delay-ms: 200",
                        "-H", "content-type: application/json", "--data-binary", json.dumps(dict(CHAT, model="hm")),
                        be.url + "/v1/chat/completions"], capture_output=True, timeout=30)
    assert p.returncode == 0 and json.loads(p.stdout)["model"] == "hm", p.stderr
    wait_until(lambda: entries(be)[0]["end_ms"] is not None, timeout=5, what="end_ms")
    e = entries(be)[0]
    assert e["protocol"] == "h2" and e["model"] == "hm" and e["body"]["n_messages"] == 1
    assert e["end_ms"] - e["start_ms"] >= 150


def test_log_client_left_ms(fakellm):
    """A client that goes away while its answer is pending (a delay, a paused
    stream; over HTTP/2 also a RST_STREAM) is logged with when fakellm saw
    it, on the clock whose CLOCK_MONOTONIC zero the log gives; answered
    calls have null."""
    import socket
    from h2raw import DATA, END_HEADERS, END_STREAM, HEADERS, H2Conn, encode_headers, frame
    be = fakellm("a")
    assert post(be).status_code == 200
    body = json.dumps(STREAM).encode()
    req = (b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
           b"x-fakellm-stall-after: 1\r\nx-fakellm-stall-ms: 5000\r\ncontent-length: %d\r\n\r\n" % len(body)) + body
    s = socket.create_connection(("127.0.0.1", be.port))
    s.sendall(req)
    s.settimeout(5)
    got = b""
    while b"tok0 " not in got:
        got += s.recv(65536)
    t_close = time.monotonic_ns()
    s.close()
    c = H2Conn(be.port)
    fields = [(":method", "POST"), (":scheme", "http"), (":path", "/v1/chat/completions"), (":authority", "x"),
              ("x-fakellm-delay-ms", "5000")]
    c.s.sendall(frame(HEADERS, END_HEADERS, 1, encode_headers(fields)) + frame(DATA, END_STREAM, 1, body))
    wait_until(lambda: len(entries(be)) == 3, timeout=5, what="the HTTP/2 call")
    t_reset = time.monotonic_ns()
    c.reset(1)
    wait_until(lambda: all(e["client_left_ms"] is not None for e in entries(be)[1:]), timeout=4,
               what="both clients seen leaving")
    zero = log(be)["clock_zero_ns"]
    done, h1, h2 = entries(be)
    assert done["client_left_ms"] is None and done["end_ms"] is not None
    for e, t in ((h1, t_close), (h2, t_reset)):
        assert e["end_ms"] is None
        seen = (zero + e["client_left_ms"] * 1_000_000 - t) / 1e6
        assert -1 <= seen < 1000, (e, seen)
    c.close()


# ---- POST /v1/messages (Anthropic's shapes) --------------------------------

MESSAGES = {"model": "claude-x", "max_tokens": 64, "messages": [{"role": "user", "content": "hi"}]}


def anthropic_events(text):
    """(event name, data object) of each SSE event, as Anthropic's SDK reads them."""
    out = []
    for block in text.split("\n\n"):
        if not block.strip():
            continue
        name = data = None
        for line in block.split("\n"):
            if line.startswith("event: "):
                name = line[len("event: "):]
            elif line.startswith("data: "):
                data = json.loads(line[len("data: "):])
        assert name is not None and data is not None, block
        assert data["type"] == name, block
        out.append((name, data))
    return out


def test_messages_answer_in_anthropic_shape(fakellm):
    be = fakellm("claude")
    r = post(be, {"x-fakellm-text": "Rivers carve the land."}, body=MESSAGES, path="/v1/messages")
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["id"].startswith("msg_fakellm_")
    assert (body["type"], body["role"], body["model"]) == ("message", "assistant", "claude-x")
    assert body["content"] == [{"type": "text", "text": "Rivers carve the land."}]
    assert (body["stop_reason"], body["stop_sequence"]) == ("end_turn", None)
    assert body["usage"]["output_tokens"] == 4 and body["usage"]["input_tokens"] > 0
    assert body["fakellm"]["request"]["path"] == "/v1/messages"


def test_messages_errors_in_anthropic_shape(fakellm):
    be = fakellm()
    no_max = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    r = post(be, body=no_max, path="/v1/messages")
    assert r.status_code == 400
    assert r.json() == {"type": "error", "error": {"type": "invalid_request_error",
                                                   "message": "max_tokens: Field required"}}
    r = post(be, body={"model": "m", "max_tokens": 1}, path="/v1/messages")
    assert r.status_code == 400 and r.json()["error"]["message"] == "messages: Field required"
    for status, kind in ((429, "rate_limit_error"), (529, "overloaded_error"), (503, "api_error"),
                         (401, "authentication_error")):
        r = post(be, {"x-fakellm-status": str(status)}, body=MESSAGES, path="/v1/messages")
        assert r.status_code == status
        assert r.json() == {"type": "error", "error": {"type": kind, "message": f"fakellm injected {status}"}}
    # the chat endpoint keeps OpenAI's shape
    r = post(be, {"x-fakellm-status": "429"})
    assert r.json()["error"]["code"] == 429


def test_messages_stream_events(fakellm):
    be = fakellm()
    for n in (3, 0):
        r = post(be, {"x-fakellm-chunks": str(n)}, body=dict(MESSAGES, stream=True), path="/v1/messages")
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        assert "[DONE]" not in r.text
        ev = anthropic_events(r.text)
        names = [e[0] for e in ev]
        assert names == (["message_start", "content_block_start", "ping"] + ["content_block_delta"] * n +
                         ["content_block_stop", "message_delta", "message_stop"])
        start = ev[0][1]["message"]
        assert start["id"].startswith("msg_fakellm_") and start["model"] == "claude-x" and start["content"] == []
        assert ev[0][1]["fakellm"]["request"]["path"] == "/v1/messages"
        assert ev[1][1]["content_block"] == {"type": "text", "text": ""}
        text = "".join(d["delta"]["text"] for name, d in ev if name == "content_block_delta")
        assert text == "".join(f"tok{i} " for i in range(n))
        assert all(d["delta"]["type"] == "text_delta" and d["index"] == 0 for name, d in ev if name == "content_block_delta")
        delta = ev[-2][1]
        assert delta["delta"] == {"stop_reason": "end_turn", "stop_sequence": None}
        assert delta["usage"]["output_tokens"] == n


# ---- embeddings ----

def embed(be, **body):
    return httpx.post(be.url + "/v1/embeddings", json={"input": ["hello there", "bye"], **body}, timeout=10)


def test_embeddings_base64_is_the_float32_vector(fakellm):
    be = fakellm()
    floats = embed(be, dimensions=8).json()
    assert [len(d["embedding"]) for d in floats["data"]] == [8, 8]
    assert floats == embed(be, dimensions=8, encoding_format="float").json()  # float is the default
    r = embed(be, dimensions=8, encoding_format="base64")
    assert r.status_code == 200, r.text
    b64 = r.json()
    assert b64["object"] == "list" and b64["usage"] == floats["usage"] and b64["model"] == floats["model"]
    for d, f in zip(b64["data"], floats["data"]):
        assert d["index"] == f["index"] and d["object"] == "embedding"
        raw = base64.b64decode(d["embedding"], validate=True)
        assert len(raw) == 8 * 4  # float32 each ...
        vec = struct.unpack("<8f", raw)  # ... little-endian
        assert vec == pytest.approx(f["embedding"], abs=1e-6)
        assert sum(x * x for x in vec) == pytest.approx(1.0, abs=1e-5)
    assert b64["data"][0]["embedding"] != b64["data"][1]["embedding"]
    for bad in ("hex", 3, ["base64"]):
        r = embed(be, encoding_format=bad)
        assert r.status_code == 400 and "encoding_format" in r.text, r.text


def test_openai_sdk_embeddings_decode_the_right_vector(fakellm):
    """The openai SDK asks for base64 unless told otherwise and decodes it:
    it gets the same vector as a float request."""
    sdk_dir = MODEL_CACHE / "sdk"
    require([sdk_dir / "node_modules" / "openai"], ["node"], what="the openai SDK")
    be = fakellm()
    params = {"model": "e", "input": ["hello there", "bye"], "dimensions": 12}
    out = subprocess.run(["node", str(ROOT / "tests" / "tools" / "sdk_client.js"),
                          json.dumps({"sdk": "openai", "base": be.url + "/v1", "op": "embeddings", "params": params})],
                         capture_output=True, text=True, timeout=60, env=dict(os.environ, VSR_SDK_DIR=str(sdk_dir)))
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert "error" not in got, got
    want = httpx.post(be.url + "/v1/embeddings", json=params, timeout=10).json()
    assert [len(d["embedding"]) for d in got["embeddings"]["data"]] == [12, 12]
    for d, w in zip(got["embeddings"]["data"], want["data"]):
        assert d["embedding"] == pytest.approx(w["embedding"], abs=1e-6)
    assert entries(be)[-2]["path"] == "/v1/embeddings"
