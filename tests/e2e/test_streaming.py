"""SSE relay: chunk by chunk as the backend sends, with backpressure, and a
client that leaves cancels the upstream call."""
import json
import os
import socket
import time

import httpx

from conftest import echo, sse_events, wait_until

STREAM = {"model": "m2", "stream": True, "messages": [{"role": "user", "content": "hi"}]}


def test_stream_round_trip(stack):
    r = stack.post_chat(STREAM, headers={"x-fakellm-chunks": "7"})
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/event-stream")
    events = sse_events(r.text)
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    contents = [c["choices"][0]["delta"].get("content") for c in chunks]
    assert [c for c in contents if c] == [f"tok{i} " for i in range(7)]
    assert json.loads(chunks[0]["fakellm"]["request"]["body"])["model"] == "m2"


def test_stream_is_not_buffered(stack):
    """Events must reach the client spread in time as the backend sends them:
    10 events 150 ms apart; a buffering proxy would deliver them all at once."""
    arrivals = []
    with stack.client() as c:
        with c.stream("POST", "/v1/chat/completions", json=STREAM,
                      headers={"x-fakellm-chunks": "10", "x-fakellm-chunk-delay-ms": "150"}) as r:
            assert r.status_code == 200
            for line in r.iter_lines():
                if line.startswith("data: "):
                    arrivals.append(time.monotonic())
    assert len(arrivals) >= 11
    # generous: the first content event arrives well before the last one
    assert arrivals[-1] - arrivals[0] > 0.9
    # and at least one event arrived clearly apart from the rest
    gaps = [b - a for a, b in zip(arrivals, arrivals[1:])]
    assert sum(1 for g in gaps if g > 0.05) >= 5


def test_client_disconnect_mid_stream_closes_upstream(stack):
    be = stack.backends[2]
    before = be.stats()
    s = socket.create_connection(("127.0.0.1", stack.port))
    body = json.dumps(STREAM).encode()
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
              b"x-fakellm-chunks: 1000\r\nx-fakellm-chunk-delay-ms: 50\r\n"
              b"content-length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    got = b""
    while b"tok1 " not in got:
        got += s.recv(65536)
    assert be.stats()["connections_open"] == before["connections_open"] + 1
    s.close()
    wait_until(lambda: be.stats()["connections_open"] == before["connections_open"],
               what="the backend to see its connection closed")


def test_mid_stream_drop_ends_visibly(stack):
    """A stream the backend drops must not end cleanly: no terminating chunk, no [DONE]."""
    with stack.client() as c:
        try:
            with c.stream("POST", "/v1/chat/completions", json=STREAM,
                          headers={"x-fakellm-chunks": "10", "x-fakellm-drop-after": "3"}) as r:
                text = ""
                for part in r.iter_text():
                    text += part
            raise AssertionError("stream ended cleanly: " + text[-200:])
        except httpx.RemoteProtocolError:
            pass


def test_events_before_a_mid_stream_reset_reach_the_client(stack):
    """The events the backend sent before it reset the stream (all in one
    burst, so read together with the reset) reach the client, in order,
    before the connection is cut: none is lost with the cut."""
    for _ in range(5):
        text = ""
        with stack.client() as c:
            try:
                with c.stream("POST", "/v1/chat/completions", json=STREAM,
                              headers={"x-fakellm-chunks": "10", "x-fakellm-drop-after": "4"}) as r:
                    assert r.status_code == 200
                    for part in r.iter_text():
                        text += part
                raise AssertionError("stream ended cleanly: " + text[-200:])
            except httpx.RemoteProtocolError:
                pass
        contents = [json.loads(e)["choices"][0]["delta"].get("content") for e in sse_events(text)
                    if e != "[DONE]"]
        assert [x for x in contents if x] == [f"tok{i} " for i in range(4)], text


def rss_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def test_slow_client_backpressure_bounds_memory(stack):
    """64 MB streamed to a client that does not read: vsr must stop reading
    the backend instead of buffering it."""
    pid = stack.proc.p.pid
    s = socket.create_connection(("127.0.0.1", stack.port))
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
    body = json.dumps(STREAM).encode()
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
              b"x-fakellm-chunks: 1024\r\nx-fakellm-chunk-size: 65536\r\n"
              b"content-length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    s.recv(1024)
    base = rss_kb(pid)
    time.sleep(2.0)  # the backend could push all 64 MB in this time if nothing held it back
    grown = rss_kb(pid) - base
    assert grown < 16 * 1024, f"vsr grew {grown} KiB while its client was not reading"
    # now read it all: the stream completes
    s.settimeout(30)
    total = 0
    tail = b""
    while True:
        d = s.recv(1 << 20)
        if not d:
            break
        total += len(d)
        tail = (tail + d)[-64:]
        if tail.endswith(b"0\r\n\r\n"):
            break
    s.close()
    assert total > 64 * 1024 * 1024
    assert b"[DONE]" in tail
