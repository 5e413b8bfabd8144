"""Many clients at once, start-up and shut-down."""
import http.client
import json
import signal
import socket
import subprocess
import threading

import httpx

from conftest import VSR_BIN, config_yaml, free_port, model_yaml


def test_200_concurrent_keepalive_clients(stack):
    failures = []
    body = json.dumps({"model": "m1", "messages": [{"role": "user", "content": "x"}]})

    def client():
        try:
            c = http.client.HTTPConnection("127.0.0.1", stack.port, timeout=60)
            for _ in range(50):
                c.request("POST", "/v1/chat/completions", body, {"content-type": "application/json"})
                r = c.getresponse()
                data = r.read()
                if r.status != 200 or b"chat.completion" not in data:
                    failures.append((r.status, data[:100]))
            c.close()
        except Exception as e:  # noqa: BLE001 - every failure counts
            failures.append(repr(e))

    threads = [threading.Thread(target=client) for _ in range(200)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []
    a, b, _ = stack.backends
    assert a.stats()["requests"] + b.stats()["requests"] == 200 * 50


def test_sigterm_exits_zero_without_sanitizer_report(stack):
    # traffic first, including an open idle connection, then SIGTERM
    c = http.client.HTTPConnection("127.0.0.1", stack.port, timeout=10)
    c.request("GET", "/v1/models")
    c.getresponse().read()
    rc = stack.proc.stop(signal.SIGTERM)
    stack.proc.assert_clean_exit()
    assert rc == 0
    c.close()


def test_sigint_exits_zero(stack):
    assert stack.proc.stop(signal.SIGINT) == 0
    stack.proc.assert_clean_exit()


def run_vsr(*args, timeout=20):
    return subprocess.run([VSR_BIN, *args], capture_output=True, text=True, timeout=timeout)


def test_config_validate(tmp_path):
    good = tmp_path / "good.yaml"
    good.write_text(config_yaml(free_port(), [model_yaml("m", ["127.0.0.1:9"])]))
    r = run_vsr("config", "validate", str(good))
    assert r.returncode == 0, r.stderr
    bad = tmp_path / "bad.yaml"
    bad.write_text("version: v0.3\nlisteners:\n  - name: x\n    port: nope\nproviders:\n  models: []\n")
    r = run_vsr("config", "validate", str(bad))
    assert r.returncode == 2
    assert f"{bad}:4:11:" in r.stderr


def test_bad_config_fails_before_any_port_opens(tmp_path):
    port = free_port()
    bad = tmp_path / "bad.yaml"
    bad.write_text(config_yaml(port, [model_yaml("m", ["127.0.0.1:9"])]) + "surprise: 1\n")
    r = run_vsr("serve", "--config", str(bad))
    assert r.returncode == 2
    assert "surprise" in r.stderr and f"{bad}:" in r.stderr


def test_unimplemented_keys_warned_once(vsr, fakellm):
    be = fakellm()
    port = free_port()
    cfg = config_yaml(port, [model_yaml("m", [be.endpoint])]) + \
        "evaluation:\n  records:\n    - {model: m, benchmark: mmlu, metrics: {score: 0.5}}\n"
    v = vsr(cfg, port=port)
    out = v.proc.output()
    assert out.count("not implemented yet") == 1
    assert "evaluation" in out
    warning = [l for l in out.splitlines() if "not implemented yet" in l][0]
    assert f"{v.config_path}: accepted but not implemented yet" in warning and "<string>" not in out


def test_cli_help_usage_and_exit_codes(tmp_path):
    """--help on every command, and an exit status per kind of failure:
    64 usage, 2 invalid configuration (see also the address tests: 3)."""
    for args in (["--help"], ["serve", "--help"], ["serve", "-h"], ["config", "--help"],
                 ["config", "validate", "--help"], ["config", "print", "--help"]):
        r = run_vsr(*args)
        assert r.returncode == 0 and "usage: vsr" in r.stdout and "exit codes" in r.stdout, (args, r.stderr)
    for args in (["serve", "--bogus"], ["serve", "--workers", "0"], ["config", "validate"], ["frobnicate"],
                 ["serve", "--drain-timeout", "soon"], ["config", "print"], []):
        r = run_vsr(*args)
        assert r.returncode == 64, (args, r.returncode, r.stderr)
    bad = tmp_path / "bad.yaml"
    bad.write_text("version: v0.3\nlisteners: 3\n")
    assert run_vsr("config", "validate", str(bad)).returncode == 2
    assert run_vsr("serve", "--config", str(bad)).returncode == 2
    # no --config and no file at the default path: say so, and name the option
    r = subprocess.run([VSR_BIN, "serve"], capture_output=True, text=True, timeout=20, cwd=tmp_path)
    assert r.returncode == 64 and "config/config.yaml does not exist" in r.stderr and "--config" in r.stderr


def test_cli_failed_start_says_nothing_serves(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(config_yaml(free_port(), [model_yaml("m", ["127.0.0.1:9"])]) + "surprise: 1\n")
    r = run_vsr("serve", "--config", str(bad))
    assert r.returncode == 2 and "nothing was started" in r.stderr and "keeps serving" not in r.stderr


def test_start_prints_every_address_and_takes_duration_drain(vsr, fakellm):
    be = fakellm()
    port = free_port()
    text = config_yaml(port, [model_yaml("m", [be.endpoint])])
    v = vsr(text, port=port, extra_args=("--drain-timeout", "5s"))
    out = v.proc.output()
    mgmt = text.split("management_api:\n      port: ")[1].split()[0]
    metrics = v.metrics_url.split("//")[1].split("/")[0]
    assert f"listener main on 127.0.0.1:{port}" in out
    assert f"management API on 127.0.0.1:{mgmt}" in out
    assert f"metrics on http://{metrics}/metrics" in out
    v.proc.p.send_signal(signal.SIGTERM)
    v.proc.p.wait(20)
    assert "draining (up to 5000 ms" in v.proc.output()
    v.proc.rc = v.proc.p.returncode
    v.proc.assert_clean_exit()


def test_port_in_use_exits_3(tmp_path):
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen()
    port = s.getsockname()[1]
    cfg = tmp_path / "c.yaml"
    cfg.write_text(config_yaml(port, [model_yaml("m", ["127.0.0.1:9"])]))
    r = run_vsr("serve", "--config", str(cfg), "--workers", "2", "--metrics-listen", f"127.0.0.1:{free_port()}")
    s.close()
    assert r.returncode == 3
    assert f"listener main: cannot listen on 127.0.0.1:{port}: another process already listens there" in r.stderr


def test_second_vsr_refuses_every_shared_address(vsr, tmp_path):
    """The listening sockets use SO_REUSEPORT, which would let a second vsr
    join the first one's sockets and split the traffic between two
    configurations: it refuses to start instead, whichever address it shares
    (traffic listener, management API or metrics), and the first serves on."""
    import re
    first_port = free_port()
    text = config_yaml(first_port, [model_yaml("m", ["127.0.0.1:9"])])
    v = vsr(text, port=first_port)
    mgmt = int(re.search(r"management_api:\n      port: (\d+)", text).group(1))
    metrics = int(v.metrics_url.split(":")[2].split("/")[0])
    cases = [  # (listener port, management port, metrics port, the address named)
        (first_port, free_port(), free_port(), f"listener main: cannot listen on 127.0.0.1:{first_port}"),
        (free_port(), mgmt, free_port(), f"listener management: cannot listen on 127.0.0.1:{mgmt}"),
        (free_port(), free_port(), metrics, f"listener metrics: cannot listen on 127.0.0.1:{metrics}"),
    ]
    for i, (lport, mport, xport, named) in enumerate(cases):
        second = tmp_path / f"second-{i}.yaml"
        t = config_yaml(lport, [model_yaml("m", ["127.0.0.1:9"])])
        t = re.sub(r"(management_api:\n      port: )\d+", lambda m: m.group(1) + str(mport), t)
        second.write_text(t)
        r = run_vsr("serve", "--config", str(second), "--workers", "2", "--metrics-listen", f"127.0.0.1:{xport}")
        assert r.returncode == 3, r.stderr
        assert named in r.stderr and "another process already listens there" in r.stderr
    assert httpx.get(v.url + "/ready", timeout=5).status_code == 200
    with socket.create_connection(("127.0.0.1", first_port), timeout=5):
        pass


def test_two_listeners_on_one_port_exit_1(tmp_path):
    """Listening sockets use SO_REUSEPORT, so a second listener on a port
    would silently share it: vsr refuses to start instead."""
    port = free_port()
    cfg = tmp_path / "c.yaml"
    cfg.write_text(config_yaml(port, [model_yaml("m", ["127.0.0.1:9"])]))
    r = run_vsr("serve", "--config", str(cfg), "--metrics-listen", f"127.0.0.1:{port}")
    assert r.returncode == 1
    assert f"listeners main and metrics both use port {port}" in r.stderr
    text = config_yaml(port, [model_yaml("m", ["127.0.0.1:9"])])
    mline = [l for l in text.splitlines() if l.startswith("      port: ")][0]
    cfg.write_text(text.replace(mline, f"      bind_address: 0.0.0.0\n      port: {port}"))
    r = run_vsr("serve", "--config", str(cfg), "--metrics-listen", f"127.0.0.1:{free_port()}")
    assert r.returncode == 2   # the document itself is refused, at the management port's line
    assert f"management_api port {port} is also used by listener \"main\"" in r.stderr


def test_sigterm_drains_in_flight_streams(stack):
    """SIGTERM: /ready turns 503 at once, new connections are refused, the
    stream in flight completes, then the process exits 0."""
    import json as _json
    import socket as _socket
    import time as _time
    idle = http.client.HTTPConnection("127.0.0.1", stack.port, timeout=10)
    idle.request("GET", "/health")
    idle.getresponse().read()
    s = _socket.create_connection(("127.0.0.1", stack.port))
    body = _json.dumps({"model": "m2", "stream": True, "messages": []}).encode()
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nx-fakellm-chunks: 10\r\n"
              b"x-fakellm-chunk-delay-ms: 150\r\ncontent-length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    got = s.recv(65536)
    assert got.startswith(b"HTTP/1.1 200")
    stack.proc.p.send_signal(signal.SIGTERM)
    _time.sleep(0.3)
    idle.request("GET", "/ready")          # an open keep-alive connection still gets an answer
    r = idle.getresponse()
    assert r.status == 503
    assert r.getheader("connection") == "close"
    r.read()
    try:                                   # a new connection is refused
        _socket.create_connection(("127.0.0.1", stack.port), timeout=2).close()
        refused = False
    except OSError:
        refused = True
    assert refused
    s.settimeout(10)
    while not got.endswith(b"0\r\n\r\n"):  # the stream runs to its end
        d = s.recv(65536)
        assert d, "stream cut during drain"
        got += d
    assert b"data: [DONE]" in got
    s.close()
    stack.proc.p.wait(10)
    stack.proc.stop()
    stack.proc.assert_clean_exit()


def test_second_signal_stops_at_once(stack):
    import json as _json
    import socket as _socket
    import time as _time
    s = _socket.create_connection(("127.0.0.1", stack.port))
    body = _json.dumps({"model": "m2", "stream": True, "messages": []}).encode()
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nx-fakellm-chunks: 1000\r\n"
              b"x-fakellm-chunk-delay-ms: 100\r\ncontent-length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    s.recv(65536)
    stack.proc.p.send_signal(signal.SIGTERM)
    _time.sleep(0.3)
    assert stack.proc.p.poll() is None     # draining: the long stream holds it
    t0 = _time.monotonic()
    stack.proc.p.send_signal(signal.SIGTERM)
    stack.proc.p.wait(10)
    assert _time.monotonic() - t0 < 5
    s.close()
    stack.proc.stop()
    stack.proc.assert_clean_exit()
