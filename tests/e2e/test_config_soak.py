"""Correctness under configuration churn: at least 100,000 requests from 32
keep-alive, pipelining clients while the configuration changes at least ten
times (plus a rejected document and two rollbacks), with 30 SSE streams of
which some span a change.

Each version's document stamps its own x-doc value on the upstream request
(a header_mutation plugin) and the backend echoes it, so a response shows
both the version that served it (x-vsr-config-version) and the document
that version ran.  Asserts: no request failed; no client saw the version go
back; each version served exactly one document; every stream completed on
the version it started on (the access log's config_version, written at the
request's finish, equals the version in the stream's response head)."""
import json
import re
import socket
import threading
import time

import httpx

from conftest import free_port
from test_config_reload import doc as document  # the same stamping document

CLIENTS = 32
TOTAL = 100_000
PIPELINE = 16
STREAMS = 30

VERSION_RE = re.compile(rb"\r\nx-vsr-config-version: (\d+)\r\n", re.I)
LENGTH_RE = re.compile(rb"\r\ncontent-length: (\d+)\r\n", re.I)
TAG_RE = re.compile(rb'"x-doc":"([^"]*)"')


BODY = b'{"model":"auto","messages":[{"role":"user","content":"hi"}]}'
REQUEST = (b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
           b"content-length: " + str(len(BODY)).encode() + b"\r\n\r\n" + BODY)


class Client(threading.Thread):
    """One keep-alive connection; sends PIPELINE requests at a time and reads
    their answers in order."""

    def __init__(self, port, quota, errors):
        super().__init__(daemon=True)
        self.port, self.quota, self.errors = port, quota, errors
        self.done = 0
        self.pairs = set()       # (version, tag)
        self.went_back = None

    def run(self):
        try:
            self._run()
        except Exception as e:  # reported by the test
            self.errors.append(f"client: {e!r}")

    def _run(self):
        s = socket.create_connection(("127.0.0.1", self.port))
        s.settimeout(60)
        buf = b""
        last = 0
        while self.done < self.quota:
            n = min(PIPELINE, self.quota - self.done)
            s.sendall(REQUEST * n)
            got = 0
            while got < n:
                end = buf.find(b"\r\n\r\n")
                if end < 0:
                    chunk = s.recv(1 << 20)
                    if not chunk:
                        raise RuntimeError("connection closed by the server")
                    buf += chunk
                    continue
                head = buf[:end + 2]
                m = LENGTH_RE.search(head)
                if not m:
                    raise RuntimeError(f"no content-length: {head[:200]!r}")
                total = end + 4 + int(m.group(1))
                while len(buf) < total:
                    chunk = s.recv(1 << 20)
                    if not chunk:
                        raise RuntimeError("connection closed mid-body")
                    buf += chunk
                body = buf[end + 4:total]
                buf = buf[total:]
                if not head.startswith(b"HTTP/1.1 200 "):
                    self.errors.append(head.split(b"\r\n")[0].decode() + " " + body[:200].decode(errors="replace"))
                    got += 1
                    continue
                version = int(VERSION_RE.search(head).group(1))
                tag = TAG_RE.search(body).group(1).decode()
                if version < last and self.went_back is None:
                    self.went_back = (last, version)
                last = max(last, version)
                self.pairs.add((version, tag))
                got += 1
            self.done += n
        s.close()


class Stream(threading.Thread):
    def __init__(self, url, index, errors):
        super().__init__(daemon=True)
        self.url, self.index, self.errors = url, index, errors
        self.version = None
        self.request_id = f"soak-stream-{index}"
        self.completed = False
        self.t_head = self.t_end = None

    def run(self):
        body = {"model": "auto", "stream": True, "messages": [{"role": "user", "content": "hi"}],
                "fakellm": {"chunks": 20, "chunk-delay-ms": 200}}
        try:
            with httpx.stream("POST", self.url + "/v1/chat/completions", json=body, timeout=60,
                              headers={"x-request-id": self.request_id}) as r:
                if r.status_code != 200:
                    self.errors.append(f"stream {self.index}: status {r.status_code}")
                    return
                self.version = int(r.headers["x-vsr-config-version"])
                self.t_head = time.monotonic()
                text = "".join(r.iter_text())
                self.t_end = time.monotonic()
            self.completed = "data: [DONE]" in text
            if not self.completed:
                self.errors.append(f"stream {self.index}: no [DONE]")
        except Exception as e:
            self.errors.append(f"stream {self.index}: {e!r}")


def test_soak_under_configuration_churn(vsr, fakellm, tmp_path):
    backend = fakellm("a")
    port, mport = free_port(), free_port()
    access = tmp_path / "access.jsonl"
    v = vsr(document(port, mport, backend, "doc-0"), port=port, workers=2,
            extra_args=("--access-log", str(access), "--config-audit-log", str(tmp_path / "audit.jsonl")))
    api = f"http://127.0.0.1:{mport}"
    errors = []
    clients = [Client(port, TOTAL // CLIENTS + 1, errors) for _ in range(CLIENTS)]
    streams = [Stream(v.url, i, errors) for i in range(STREAMS)]
    acks = {1: "doc-0"}     # version -> the tag its document stamps
    activated_at = []       # when each change was acknowledged

    for c in clients:
        c.start()

    def progress():
        return sum(c.done for c in clients)

    def put(tag):
        r = httpx.put(api + "/api/v1/config", content=document(port, mport, backend, tag).encode(),
                      headers={"content-type": "application/yaml"}, timeout=60)
        return r

    def rollback(to, current):
        r = httpx.post(api + "/api/v1/config/rollback", json={"config_version": to},
                       headers={"if-match": f'"{current}"'}, timeout=60)
        assert r.status_code == 200, r.text
        acks[r.json()["config_version"]] = acks[to]
        return r.json()["config_version"]

    # the changes, spread over the run; streams start in three waves so that
    # some of them span a change
    current = 1
    step = TOTAL // 16
    plan = [("put", f"doc-{i}") for i in range(1, 6)] + [("reject", None), ("rollback", 2)] + \
           [("put", f"doc-{i}") for i in range(6, 11)] + [("rollback", 4), ("put", "doc-11")]
    for i, (what, arg) in enumerate(plan):
        if i % 5 == 0:
            for s in streams[(i // 5) * 10:(i // 5) * 10 + 10]:
                s.start()
        deadline = time.monotonic() + 60
        while progress() < (i + 1) * step and time.monotonic() < deadline and any(c.is_alive() for c in clients):
            time.sleep(0.02)
        if what == "put":
            r = put(arg)
            assert r.status_code == 200, r.text
            current = r.json()["config_version"]
            acks[current] = arg
            activated_at.append(time.monotonic())
        elif what == "reject":
            bad = document(port, mport, backend, "bad").replace("modelRefs: [{model: m1}]",
                                                                 "modelRefs: [{model: missing}]")
            r = httpx.put(api + "/api/v1/config", content=bad.encode(),
                          headers={"content-type": "application/yaml"}, timeout=60)
            assert r.status_code == 422 and r.json()["config_version"] == current
        else:
            current = rollback(arg, current)
            activated_at.append(time.monotonic())
    for c in clients:
        c.join(120)
    for s in streams:
        s.join(120)

    assert not errors, errors[:10]
    assert all(not c.is_alive() for c in clients)
    total = sum(c.done for c in clients)
    assert total >= TOTAL
    assert current >= 14 and len(acks) >= 14   # 11 puts + 2 rollbacks after version 1
    assert [c.went_back for c in clients if c.went_back] == []

    # each version served exactly one document: the one it was activated with
    seen = {}
    for c in clients:
        for version, tag in c.pairs:
            seen.setdefault(version, set()).add(tag)
    assert all(len(tags) == 1 for tags in seen.values()), seen
    assert all(acks[version] in tags for version, tags in seen.items()), (seen, acks)
    assert len(seen) >= 10, seen   # the clients really ran across the changes

    # every stream completed on the version it started on
    assert all(s.completed for s in streams)
    started_on = {s.request_id: s.version for s in streams}
    v.proc.stop()
    finished_on = {}
    for line in access.read_text().splitlines():
        e = json.loads(line)
        if e.get("x_request_id") in started_on:
            finished_on[e["x_request_id"]] = e["config_version"]
    assert finished_on == started_on
    # and some streams spanned a change: a newer version was activated while they ran
    spanning = [s for s in streams if any(s.t_head < t < s.t_end for t in activated_at)]
    assert len(spanning) >= 3, (len(spanning), activated_at)
    print(f"soak: {total} requests on {len(seen)} versions {sorted(seen)}, {len(spanning)} streams spanned a change")
    v.proc.assert_clean_exit()
