"""HTTP/1.1 on the wire: keep-alive, pipelining, and request smuggling
inputs rejected with 400 and the connection closed."""
import json
import socket
import time

import pytest

from conftest import raw_request

SMUGGLING = {
    "cl+te": b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n"
             b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    "duplicate cl": b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n"
                    b"Content-Length: 2\r\n\r\n{}",
    "cl list": b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2, 2\r\n\r\n{}",
    "bad cl": b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: +2\r\n\r\n{}",
    "bare lf": b"POST /v1/chat/completions HTTP/1.1\nHost: x\r\nContent-Length: 2\r\n\r\n{}",
    "bare cr": b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\rX: y\r\nContent-Length: 2\r\n\r\n{}",
    "obs-fold": b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-A: a\r\n b\r\nContent-Length: 2\r\n\r\n{}",
    "space before colon": b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length : 2\r\n\r\n{}",
    "bad token": b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX(y): 1\r\nContent-Length: 2\r\n\r\n{}",
    "bad method": b"PO[ST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n\r\n",
    "bad chunk size": b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                      b"zz\r\n{}\r\n0\r\n\r\n",
    "no host": b"GET /v1/models HTTP/1.1\r\n\r\n",
}


@pytest.mark.parametrize("name", list(SMUGGLING))
def test_smuggling_inputs_rejected_and_closed(stack, name):
    data, closed = raw_request(stack.port, SMUGGLING[name])
    assert data.startswith(b"HTTP/1.1 400 "), (name, data[:200])
    assert closed, name
    assert b"connection: close" in data.lower()
    body = json.loads(data.partition(b"\r\n\r\n")[2])
    assert body["error"]["code"] is None
    assert b"\r\nx-vsr-config-version: 1\r\n" in data      # a codec error names the version too
    for be in stack.backends:
        assert be.stats()["requests"] == 0


def test_unknown_transfer_coding_is_501(stack):
    data, closed = raw_request(stack.port, b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                                           b"Transfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n")
    assert data.startswith(b"HTTP/1.1 501 ") and closed


def test_header_section_too_large_is_431(stack):
    big = b"X-Big: " + b"a" * (70 * 1024) + b"\r\n"
    data, closed = raw_request(stack.port, b"GET /v1/models HTTP/1.1\r\nHost: x\r\n" + big + b"\r\n")
    assert data.startswith(b"HTTP/1.1 431 ") and closed


def test_pipelined_requests_answered_in_order(stack):
    reqs = b""
    for i, model in enumerate(["m2", "m1", "m2"]):
        body = json.dumps({"model": model, "messages": [], "n": i}).encode()
        reqs += (b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\ncontent-length: "
                 + str(len(body)).encode() + b"\r\n\r\n" + body)
    reqs += b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    data, closed = raw_request(stack.port, reqs)
    assert closed
    parts = data.split(b"HTTP/1.1 ")[1:]
    assert len(parts) == 4
    ns = []
    for p in parts[:3]:
        head, _, rest = p.partition(b"\r\n\r\n")
        length = int([l for l in head.split(b"\r\n") if l.lower().startswith(b"content-length:")][0].split(b":")[1])
        ns.append(json.loads(json.loads(rest[:length])["fakellm"]["request"]["body"])["n"])
    assert ns == [0, 1, 2]
    assert parts[3].startswith(b"200")


def test_keep_alive_reuses_connection_and_http10_closes(stack):
    s = socket.create_connection(("127.0.0.1", stack.port))
    s.settimeout(5)
    for _ in range(3):
        s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        d = s.recv(4096)
        assert d.startswith(b"HTTP/1.1 200")
    s.close()
    data, closed = raw_request(stack.port, b"GET /health HTTP/1.0\r\n\r\n")
    assert data.startswith(b"HTTP/1.1 200") and closed


def test_keep_alive_connection_idle_past_parser_release(stack):
    """A keep-alive connection gives its request parser back between
    requests; the next request on it, after an idle period or with its head
    arriving in pieces around one, is answered as on a fresh connection."""
    s = socket.create_connection(("127.0.0.1", stack.port))
    s.settimeout(5)
    body = json.dumps({"model": "m1", "messages": [{"role": "user", "content": "hi"}]}).encode()
    req = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
           b"content-length: " + str(len(body)).encode() + b"\r\n\r\n" + body)

    def answer():
        got = b""
        while b"\r\n\r\n" not in got:
            got += s.recv(65536)
        head, _, rest = got.partition(b"\r\n\r\n")
        length = int([l for l in head.split(b"\r\n") if l.lower().startswith(b"content-length:")][0].split(b":")[1])
        while len(rest) < length:
            rest += s.recv(65536)
        assert head.startswith(b"HTTP/1.1 200"), head[:100]
        return json.loads(rest[:length])

    for split in (None, 20):
        if split is None:
            s.sendall(req)
        else:
            s.sendall(req[:split])
            time.sleep(1.5)  # a partial head: the parser holds it across the idle second
            s.sendall(req[split:])
        assert json.loads(answer()["fakellm"]["request"]["body"])["messages"][0]["content"] == "hi"
        time.sleep(1.5)
    s.sendall(req)
    answer()
    s.close()


def test_expect_100_continue(stack):
    s = socket.create_connection(("127.0.0.1", stack.port))
    s.settimeout(5)
    body = b'{"model":"m2","messages":[]}'
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
              b"content-length: " + str(len(body)).encode() + b"\r\n\r\n")
    assert s.recv(4096).startswith(b"HTTP/1.1 100 Continue\r\n\r\n")
    s.sendall(body)
    d = b""
    while b"\r\n\r\n" not in d:
        d += s.recv(65536)
    assert d.startswith(b"HTTP/1.1 200")
    s.close()


def test_http10_client_gets_stream_until_close(stack):
    body = json.dumps({"model": "m2", "stream": True, "messages": []}).encode()
    data, closed = raw_request(stack.port, b"POST /v1/chat/completions HTTP/1.0\r\n"
                                           b"content-length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    head, _, rest = data.partition(b"\r\n\r\n")
    assert closed
    assert b"transfer-encoding" not in head.lower()
    assert rest.rstrip().endswith(b"data: [DONE]")
