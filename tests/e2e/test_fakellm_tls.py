"""fakellm over HTTPS (--tls-cert / --tls-key): the backend that vsr's
upstream-TLS tests talk to.  Certificates are made at test time with the
openssl CLI: a CA, and a server certificate for 127.0.0.1 (IP SAN) and
localhost (DNS SAN) signed by it."""
import json
import os
import socket
import ssl
import subprocess
import threading
import warnings

import httpx
import pytest

from conftest import ENV, FAKELLM_BIN, SANITIZER_MARKS, raw_request, sse_events, wait_until

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
STREAM = dict(CHAT, stream=True)


def openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


@pytest.fixture
def certs(tmp_path):
    d = tmp_path / "pki"
    d.mkdir()
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
            "-subj", "/CN=fakellm test CA",
            "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=d)
    openssl("req", *ec, "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=localhost", cwd=d)
    (d / "server.ext").write_text(
        "subjectAltName=IP:127.0.0.1,DNS:localhost\n"
        "basicConstraints=critical,CA:FALSE\n"
        "keyUsage=critical,digitalSignature,keyEncipherment\n"
        "extendedKeyUsage=serverAuth\n"
        "subjectKeyIdentifier=hash\n"
        "authorityKeyIdentifier=keyid,issuer\n")
    openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
            "-CAcreateserial", "-out", "server.pem", "-days", "2", "-extfile", "server.ext", cwd=d)
    return {"ca": str(d / "ca.pem"), "cert": str(d / "server.pem"), "key": str(d / "server.key"),
            "dir": d}


class TlsBackend:
    def __init__(self, be, ca):
        self.be, self.ca, self.port = be, ca, be.port
        self.url = f"https://127.0.0.1:{be.port}"

    def client(self, **kw):
        return httpx.Client(base_url=self.url, verify=self.ca, timeout=kw.pop("timeout", 10), **kw)

    def post(self, headers=None, body=CHAT, path="/v1/chat/completions"):
        with self.client() as c:
            return c.post(path, json=body, headers=headers or {})

    def stats(self):
        with self.client() as c:
            r = c.get("/stats")
        assert r.status_code == 200
        return r.json()

    def log(self, key=None):
        with self.client() as c:
            r = c.get("/_fakellm/log", params={"key": key} if key is not None else None)
        assert r.status_code == 200, r.text
        return r.json()["entries"]

    def tls_socket(self, alpn=None, context=None):
        ctx = context or ssl.create_default_context(cafile=self.ca)
        # a FIN without close_notify must raise SSLEOFError, not read as the end
        ctx.options &= ~getattr(ssl, "OP_IGNORE_UNEXPECTED_EOF", 0)
        if alpn:
            ctx.set_alpn_protocols(alpn)
        sock = socket.create_connection(("127.0.0.1", self.port), timeout=10)
        try:
            return ctx.wrap_socket(sock, server_hostname="127.0.0.1", suppress_ragged_eofs=False)
        except BaseException:
            sock.close()
            raise


@pytest.fixture
def tls_fakellm(fakellm, certs):
    def start(name=None, args=()):
        be = fakellm(name, ["--tls-cert", certs["cert"], "--tls-key", certs["key"], *args])
        return TlsBackend(be, certs["ca"])
    return start


def read_all(s):
    """Read to the end of an orderly close, which must begin with close_notify."""
    chunks = []
    while True:
        d = s.recv(65536)
        if not d:
            break
        chunks.append(d)
    return b"".join(chunks)


def stream_fails(tb, headers, body=STREAM):
    """A stream the backend is expected to cut off; returns the events seen."""
    events = []
    with pytest.raises(httpx.TransportError):
        with tb.client() as c:
            with c.stream("POST", "/v1/chat/completions", json=body, headers=headers) as r:
                assert r.status_code == 200
                for line in r.iter_lines():
                    if line.startswith("data: "):
                        events.append(line)
    return events


# ---- basics ------------------------------------------------------------------


def test_chat_over_tls_verified_by_ip_and_name(tls_fakellm):
    tb = tls_fakellm("tls-a")
    r = tb.post()
    assert r.status_code == 200
    body = r.json()
    assert body["object"] == "chat.completion"
    assert body["choices"][0]["message"]["content"] == "Hello from tls-a"
    req = body["fakellm"]["request"]
    assert req["method"] == "POST" and req["path"] == "/v1/chat/completions"
    assert json.loads(req["body"]) == CHAT
    # the same certificate serves the DNS name
    with httpx.Client(verify=tb.ca, timeout=10) as c:
        r = c.get(f"https://localhost:{tb.port}/health")
    assert r.status_code == 200 and r.json()["backend"] == "tls-a"
    st = tb.stats()
    assert st["tls"] is True
    assert st["tls_errors"] == 0 and st["tls_last_error"] is None
    assert st["tls_handshakes"] == st["connections_accepted"] == 3


def test_untrusted_client_fails_verification(tls_fakellm, certs):
    tb = tls_fakellm()
    # the system trust store does not know the test CA
    with pytest.raises(httpx.ConnectError):
        httpx.get(tb.url + "/health", timeout=10)
    st = tb.stats()
    assert st["tls_errors"] == 1
    assert "unknown ca" in st["tls_last_error"]


def test_plain_backend_reports_tls_false(fakellm):
    be = fakellm()
    assert be.stats()["tls"] is False


def test_alpn_and_protocol_versions(tls_fakellm):
    tb = tls_fakellm()
    with tb.tls_socket(alpn=["h2", "http/1.1"]) as s:
        assert s.selected_alpn_protocol() == "h2"   # HTTP/2 when offered (test_fakellm_h2.py)
        assert s.version() in ("TLSv1.2", "TLSv1.3")
    with tb.tls_socket(alpn=["http/1.1"]) as s:
        assert s.selected_alpn_protocol() == "http/1.1"
    # TLS 1.2 is accepted
    ctx = ssl.create_default_context(cafile=tb.ca)
    ctx.maximum_version = ssl.TLSVersion.TLSv1_2
    with tb.tls_socket(context=ctx) as s:
        assert s.version() == "TLSv1.2"
        s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        assert read_all(s).startswith(b"HTTP/1.1 200 ")
    # a client speaking neither is refused rather than silently given HTTP/1.1
    with pytest.raises(ssl.SSLError, match="NO_APPLICATION_PROTOCOL|no application protocol"):
        tb.tls_socket(alpn=["spdy/3"])
    # TLS 1.1 is refused (the client is told to allow it, so the refusal is the server's)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.load_verify_locations(tb.ca)
        ctx.set_ciphers("DEFAULT:@SECLEVEL=0")
        ctx.minimum_version = ssl.TLSVersion.TLSv1
        ctx.maximum_version = ssl.TLSVersion.TLSv1_1
    with pytest.raises(ssl.SSLError):
        tb.tls_socket(context=ctx)
    st = tb.stats()
    assert st["tls_errors"] == 2
    assert st["tls_last_error"] == "handshake: unsupported protocol"


def test_plain_http_to_tls_port_fails_cleanly(tls_fakellm):
    tb = tls_fakellm()
    with pytest.raises(httpx.TransportError):
        httpx.get(f"http://127.0.0.1:{tb.port}/stats", timeout=10)
    got, closed = raw_request(tb.port, b"GET /stats HTTP/1.1\r\nHost: x\r\n\r\n")
    assert closed
    assert b"HTTP/1." not in got
    # still up, still serving TLS
    st = tb.stats()
    assert st["tls_errors"] == 2
    assert st["tls_last_error"] == "handshake: http request"
    assert st["requests"] == 0
    assert tb.post().status_code == 200
    wait_until(lambda: tb.stats()["connections_open"] == 1, what="plain connections closed")


def corrupt_record(s):
    """Write an application-data record that cannot decrypt straight to the
    TCP socket under the TLS session."""
    os.write(s.fileno(), b"\x17\x03\x03\x00\x20" + b"\xa5" * 32)


def test_corrupted_record_ends_the_connection_with_an_alert(tls_fakellm):
    tb = tls_fakellm()
    with tb.tls_socket() as s:
        s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        assert s.recv(65536).startswith(b"HTTP/1.1 200 ")
        corrupt_record(s)
        with pytest.raises(ssl.SSLError, match="BAD_RECORD_MAC|bad record mac"):
            while s.recv(65536):
                pass
    # the same in the middle of a paced stream: its timer must not fire again
    with tb.tls_socket() as s:
        body = json.dumps(STREAM).encode()
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"x-fakellm-chunks: 50\r\nx-fakellm-chunk-delay-ms: 20\r\n"
                  b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        got = b""
        while b"data: " not in got:
            got += s.recv(65536)
        corrupt_record(s)
        with pytest.raises(ssl.SSLError):
            while s.recv(65536):
                pass
    wait_until(lambda: tb.stats()["connections_open"] == 1, what="connections closed")
    st = tb.stats()
    assert st["tls_errors"] == 2
    assert st["tls_last_error"] == "decryption failed or bad record mac"
    assert tb.post().status_code == 200


# ---- keep-alive, pipelining, bodies --------------------------------------------


def test_keep_alive_reuses_one_tls_connection(tls_fakellm):
    tb = tls_fakellm()
    with tb.client() as c:
        first = c.get("/stats").json()
        for i in range(5):
            r = c.post("/v1/chat/completions", json=dict(CHAT, model=f"m{i}"))
            assert r.status_code == 200
            assert r.json()["model"] == f"m{i}"
        last = c.get("/stats").json()
    assert last["connections_accepted"] == first["connections_accepted"] == 1
    assert last["tls_handshakes"] == first["tls_handshakes"] == 1
    assert last["requests"] == 5


def test_pipelined_requests_in_one_record_and_split_over_many(tls_fakellm):
    tb = tls_fakellm()
    reqs = b"".join(b"GET /v1/models?i=%d HTTP/1.1\r\nHost: x\r\n\r\n" % i for i in range(3))
    last = b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    with tb.tls_socket() as s:
        s.sendall(reqs + last)  # one TLS record carries four requests
        got = read_all(s)
    assert got.count(b"HTTP/1.1 200 ") == 4
    assert got.index(b"?i=0") < got.index(b"?i=1") < got.index(b"?i=2")
    assert b"connection: close" in got.lower()
    # the same requests cut into 7-byte records
    with tb.tls_socket() as s:
        data = reqs + last
        for i in range(0, len(data), 7):
            s.sendall(data[i:i + 7])
        got = read_all(s)
    assert got.count(b"HTTP/1.1 200 ") == 4


def test_close_notify_after_requests_is_a_half_close(tls_fakellm):
    """A client that sends its requests and then close_notify still gets
    every answer, then the connection closes (as a TCP half-close would)."""
    tb = tls_fakellm()
    sock = socket.create_connection(("127.0.0.1", tb.port), timeout=10)
    inc, out = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = ssl.create_default_context(cafile=tb.ca).wrap_bio(inc, out, server_hostname="localhost")

    def send_out():
        data = out.read()
        if data:
            sock.sendall(data)

    with sock:
        while True:
            try:
                tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                send_out()
                inc.write(sock.recv(65536))
        send_out()
        tls.write(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\nGET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n")
        with pytest.raises(ssl.SSLWantReadError):
            tls.unwrap()  # queues our close_notify; the server's is not awaited
        send_out()
        got = b""
        while True:
            data = sock.recv(65536)
            if not data:
                break
            inc.write(data)
            try:
                while True:
                    piece = tls.read(65536)
                    if not piece:
                        break
                    got += piece
            except ssl.SSLWantReadError:
                pass
    assert got.count(b"HTTP/1.1 200 ") == 2
    assert b'"object":"list"' in got
    st = tb.stats()
    assert st["tls_errors"] == 0 and st["health"] == 1 and st["requests"] == 1


def test_large_request_and_response_bodies(tls_fakellm):
    tb = tls_fakellm()
    big = "x" * (3 << 20)
    r = tb.post(body=dict(CHAT, pad=big))
    assert r.status_code == 200
    assert json.loads(r.json()["fakellm"]["request"]["body"])["pad"] == big
    # a 4 MB stream: the writer waits for the client between batches
    with tb.client() as c:
        with c.stream("POST", "/v1/chat/completions", json=STREAM,
                      headers={"x-fakellm-chunks": "20", "x-fakellm-chunk-size": "200000"}) as r:
            text = r.read().decode()
    events = sse_events(text)
    assert events[-1] == "[DONE]"
    contents = [json.loads(e)["choices"][0]["delta"].get("content", "") for e in events[:-1]]
    assert len(contents) == 21
    assert all(len(x) == len(f"tok{i} ") + 200000 for i, x in enumerate(contents[:20]))


# ---- streams -----------------------------------------------------------------------


def test_stream_with_delays(tls_fakellm):
    tb = tls_fakellm()
    with tb.client() as c:
        with c.stream("POST", "/v1/chat/completions", json=STREAM,
                      headers={"x-fakellm-chunks": "4", "x-fakellm-chunk-delay-ms": "40"}) as r:
            assert r.status_code == 200
            assert r.headers["transfer-encoding"] == "chunked"
            events = [line[6:].rstrip("\n") for line in r.iter_lines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert [ch["fakellm"]["chunk"] for ch in chunks] == [0, 1, 2, 3, 4]
    assert "".join(ch["choices"][0]["delta"].get("content", "") for ch in chunks) == "tok0 tok1 tok2 tok3 "
    assert chunks[0]["fakellm"]["request"]["path"] == "/v1/chat/completions"


def test_stream_events_are_sent_as_produced(tls_fakellm):
    """The first event must reach the client while the next one is still a
    minute away: each event is encrypted and written when it is produced,
    not held until the stream ends.  Leaving early cancels the stream."""
    tb = tls_fakellm()
    with tb.client() as c:
        with c.stream("POST", "/v1/chat/completions", json=STREAM,
                      headers={"x-fakellm-chunks": "3", "x-fakellm-chunk-delay-ms": "60000"}) as r:
            lines = r.iter_lines()
            first = next(line for line in lines if line.startswith("data: "))
            assert json.loads(first[6:])["fakellm"]["chunk"] == 0
    wait_until(lambda: tb.stats()["connections_open"] == 1, what="stream cancelled")


def test_stall_then_drop(tls_fakellm):
    tb = tls_fakellm()
    events = stream_fails(tb, {"x-fakellm-chunks": "5", "x-fakellm-stall-after": "2",
                               "x-fakellm-stall-ms": "50", "x-fakellm-drop-after": "2"})
    assert len(events) == 2
    assert [e["outcome"] for e in tb.log()][-1] == "drop"


# ---- faults and bookkeeping ---------------------------------------------------------


def test_reset_before_and_after_headers(tls_fakellm):
    tb = tls_fakellm()
    with pytest.raises(httpx.TransportError):
        tb.post({"x-fakellm-reset": "before-headers"})
    with pytest.raises(httpx.TransportError):
        with tb.client() as c:
            with c.stream("POST", "/v1/chat/completions", json=CHAT,
                          headers={"x-fakellm-reset": "after-headers"}) as r:
                assert r.status_code == 200  # the head arrives, then the reset
                r.read()
    assert [e["outcome"] for e in tb.log()] == ["reset", "reset"]
    # an abrupt close is not a TLS error: no alert, no close_notify
    st = tb.stats()
    assert st["tls_errors"] == 0
    assert tb.post().status_code == 200


def test_hang_is_cancelled_when_the_client_leaves(tls_fakellm):
    tb = tls_fakellm()
    with pytest.raises(httpx.ReadTimeout):
        with tb.client(timeout=httpx.Timeout(10, read=0.3)) as c:
            c.post("/v1/chat/completions", json=CHAT, headers={"x-fakellm-hang": "1"})
    wait_until(lambda: tb.stats()["connections_open"] == 1, what="hanging connection closed")
    assert tb.log()[-1]["outcome"] == "hang"


def test_key_budget_and_call_log(tls_fakellm):
    tb = tls_fakellm("tls-log")
    h = {"x-fakellm-key": "tls-k1", "x-fakellm-fail-count": "2", "x-fakellm-status": "503",
         "x-request-id": "rid-1"}
    assert [tb.post(h).status_code for _ in range(3)] == [503, 503, 200]
    entries = tb.log("tls-k1")
    assert [(e["attempt"], e["outcome"]) for e in entries] == [(1, "status:503"), (2, "status:503"),
                                                               (3, "ok")]
    assert all(e["backend"] == "tls-log" and e["request_id"] == "rid-1" and e["model"] == "m"
               for e in entries)


def test_threads_share_the_certificate(tls_fakellm):
    tb = tls_fakellm(args=["--threads", "2"])
    errors = []

    def worker(n):
        try:
            with tb.client() as c:
                for i in range(4):
                    r = c.post("/v1/chat/completions", json=CHAT, headers={"x-n": f"{n}-{i}"})
                    assert r.status_code == 200
                    assert r.json()["fakellm"]["request"]["headers"]["x-n"] == f"{n}-{i}"
        except Exception as e:  # reported below, in the test's thread
            errors.append(e)

    ts = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors, errors
    st = tb.stats()
    assert st["requests"] == 32
    assert st["tls_handshakes"] == st["connections_accepted"] == 9
    assert st["tls_errors"] == 0
    assert {e["thread"] for e in tb.log()} <= {0, 1}


# ---- command line --------------------------------------------------------------------


def run_fakellm(*args):
    r = subprocess.run([FAKELLM_BIN, "--port", "0", *args], env=ENV, capture_output=True,
                       text=True, timeout=20)
    for mark in SANITIZER_MARKS:
        assert mark not in r.stderr, r.stderr
    return r


def test_bad_tls_arguments(certs):
    r = run_fakellm("--tls-cert", certs["cert"])
    assert r.returncode == 2 and "--tls-key" in r.stderr
    r = run_fakellm("--tls-cert", str(certs["dir"] / "missing.pem"), "--tls-key", certs["key"])
    assert r.returncode == 1 and "cannot load certificate" in r.stderr
    r = run_fakellm("--tls-cert", certs["cert"], "--tls-key", str(certs["dir"] / "ca.key"))
    assert r.returncode == 1 and "key values mismatch" in r.stderr
