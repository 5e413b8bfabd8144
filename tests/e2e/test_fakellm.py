"""fakellm's own test hooks: the call log (/_fakellm/log), per-key fault
budgets (x-fakellm-key + x-fakellm-fail-count) and the mid-stream stall, which
the proxy's retry, fallback and idle-timeout tests build on."""
import json
import threading
import time

import httpx
import pytest

from conftest import raw_request, sse_events

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
