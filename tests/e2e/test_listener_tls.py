"""Downstream TLS (listeners[].tls): real clients (curl, h2load, httpx)
against a certificate from a test CA made here, ALPN h2 and http/1.1 on the
same port, TLS 1.2 as the floor, and the PEM files checked at load."""
import json
import socket
import subprocess

import httpx
import pytest

from conftest import VSR_BIN, config_yaml, free_port, model_yaml, sse_events
from test_upstream_tls import make_certs

BODY = {"model": "m1", "messages": [{"role": "user", "content": "hi"}]}


@pytest.fixture
def tls_vsr(vsr, fakellm, tmp_path):
    ca, cert, key = make_certs(tmp_path)
    be = fakellm()
    port = free_port()
    cfg = config_yaml(port, [model_yaml("m1", [be.endpoint])],
                      listener_extra=f"    tls:\n      cert_file: {cert}\n      key_file: {key}\n")
    v = vsr(cfg, port=port, wait_ready=False)
    v.ca, v.backend = ca, be
    v.https = f"https://localhost:{port}"

    def ready():
        assert v.proc.p.poll() is None, v.proc.output()
        try:
            return httpx.get(v.https + "/ready", verify=str(ca), timeout=1).status_code == 200
        except httpx.TransportError:
            return False
    from conftest import wait_until
    wait_until(ready, what="vsr /ready over TLS")
    return v


def curl_v(v, *args):
    r = subprocess.run(["curl", "-sS", "-v", "--max-time", "30", "--cacert", str(v.ca), *args],
                       capture_output=True, timeout=40)
    return r.returncode, r.stdout.decode(errors="replace"), r.stderr.decode(errors="replace")


def test_https_alpn_h2_and_http11(tls_vsr):
    v = tls_vsr
    rc, out, err = curl_v(v, "--http2", v.https + "/health")
    assert rc == 0, err
    assert "ALPN: server accepted h2" in err and "< HTTP/2 200" in err
    assert json.loads(out) == {"status": "ok"}
    rc, out, err = curl_v(v, "--http1.1", v.https + "/health")
    assert rc == 0, err
    assert "ALPN: server accepted http/1.1" in err and "< HTTP/1.1 200" in err
    # a proxied chat and an SSE stream over h2 + TLS
    rc, out, err = curl_v(v, "--http2", v.https + "/v1/chat/completions", "-H", "content-type: application/json",
                          "--data-binary", json.dumps(BODY))
    assert rc == 0 and "< HTTP/2 200" in err, err
    assert json.loads(out)["choices"][0]["message"]["content"]
    rc, out, err = curl_v(v, "--http2", "-N", v.https + "/v1/chat/completions", "-H", "content-type: application/json",
                          "-H", "x-fakellm-chunks: 5", "--data-binary", json.dumps({**BODY, "stream": True}))
    assert rc == 0, err
    assert sse_events(out)[-1] == "[DONE]" and len(sse_events(out)) == 7
    # httpx (HTTP/1.1 over TLS) with a body
    r = httpx.post(v.https + "/v1/chat/completions", json=BODY, verify=str(v.ca), timeout=10)
    assert r.status_code == 200 and r.json()["fakellm"]["request"]["method"] == "POST"


def test_tls_floor_is_1_2(tls_vsr):
    v = tls_vsr
    for ver in ("1.2", "1.3"):
        rc, _, err = curl_v(v, "--http1.1", "--tlsv" + ver, "--tls-max", ver, v.https + "/health")
        assert rc == 0, (ver, err)
    r = subprocess.run(["openssl", "s_client", "-connect", f"127.0.0.1:{v.port}", "-tls1_1", "-cipher",
                        "DEFAULT:@SECLEVEL=0"], input=b"", capture_output=True, timeout=20)
    assert r.returncode != 0
    assert b"alert protocol version" in r.stderr     # refused by vsr, not by the client


def test_h2load_over_tls(tls_vsr):
    v = tls_vsr
    r = subprocess.run(["h2load", "-c", "4", "-m", "8", "-n", "1000", f"https://127.0.0.1:{v.port}/health"],
                       capture_output=True, text=True, timeout=60)
    assert "1000 succeeded, 0 failed, 0 errored" in r.stdout, r.stdout
    assert "TLS Protocol: TLSv1.3" in r.stdout and "Application protocol: h2" in r.stdout


def test_plaintext_to_a_tls_port_is_closed_not_served(tls_vsr):
    v = tls_vsr
    s = socket.create_connection(("127.0.0.1", v.port))
    s.settimeout(10)
    s.sendall(b"GET /health HTTP/1.1\r\nhost: x\r\n\r\n")
    got = b""
    try:
        while True:
            d = s.recv(4096)
            if not d:
                break
            got += d
    except ConnectionResetError:
        pass
    s.close()
    assert b"HTTP/1.1" not in got          # at most a TLS alert, never a plaintext answer
    rc, _, err = curl_v(v, v.https + "/health")
    assert rc == 0, err                    # and the listener goes on serving


def run_validate(tmp_path, tls_block):
    path = tmp_path / "bad-tls.yaml"
    path.write_text(config_yaml(free_port(), [model_yaml("m", ["127.0.0.1:9"])], listener_extra=tls_block))
    return path, subprocess.run([VSR_BIN, "serve", "--config", str(path)], capture_output=True, text=True, timeout=20)


def test_tls_files_checked_at_load(tmp_path):
    ca, cert, key = make_certs(tmp_path)
    # a key that is not the certificate's (the CA's key)
    path, r = run_validate(tmp_path, f"    tls:\n      cert_file: {cert}\n      key_file: {tmp_path / 'ca.key'}\n")
    assert r.returncode == 2
    assert f"{path}:8:17: key_file" in r.stderr and "does not match the certificate" in r.stderr
    path, r = run_validate(tmp_path, f"    tls:\n      cert_file: {tmp_path / 'nope.pem'}\n      key_file: {key}\n")
    assert r.returncode == 2
    assert f"{path}:7:18: cannot read cert_file" in r.stderr
