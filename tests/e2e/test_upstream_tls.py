"""Upstream TLS: vsr -> fakellm over HTTPS with verification on (SNI, the
system CA bundle: here a test CA through SSL_CERT_FILE, host names checked)."""
import json
import subprocess
import time

import httpx
import pytest

from conftest import config_yaml, echo, free_port, model_yaml, sse_events


def make_certs(d, names=("127.0.0.1", "localhost")):
    def run(*args):
        subprocess.run(["openssl", *args], check=True, capture_output=True, cwd=d)
    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=vsr test CA",
        "-keyout", "ca.key", "-out", "ca.pem")
    san = ",".join(("IP:" if n[0].isdigit() else "DNS:") + n for n in names)
    (d / "ext.cnf").write_text(f"subjectAltName={san}\nbasicConstraints=CA:FALSE\n")
    run("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={names[0]}", "-keyout", "srv.key", "-out", "srv.csr")
    run("x509", "-req", "-in", "srv.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial", "-days", "2",
        "-extfile", "ext.cnf", "-out", "srv.pem")
    return d / "ca.pem", d / "srv.pem", d / "srv.key"


@pytest.fixture
def tls_backend(fakellm, tmp_path):
    ca, cert, key = make_certs(tmp_path)
    be = fakellm("tls-be", args=("--tls-cert", str(cert), "--tls-key", str(key)))
    be.ca = ca
    return be


def tls_requests(be, ca):
    return httpx.get(f"https://127.0.0.1:{be.port}/stats", verify=str(ca), timeout=5).json()["requests"]


def tls_config(port, be):
    return config_yaml(port, [
        model_yaml("by-ip", [{"base_url": f"https://127.0.0.1:{be.port}/v1"}]),
        model_yaml("by-name", [{"endpoint": f"localhost:{be.port}", "protocol": "https"}]),
    ])


def test_chat_and_stream_over_tls(vsr, tls_backend):
    port = free_port()
    v = vsr(tls_config(port, tls_backend), port=port, env={"SSL_CERT_FILE": str(tls_backend.ca)})
    for model in ("by-ip", "by-name"):
        r = v.post_chat({"model": model, "messages": [{"role": "user", "content": "hi"}]})
        assert r.status_code == 200, r.text
        assert echo(r)["path"] == "/v1/chat/completions"
    with v.client() as c:   # keep-alive over one TLS connection, and a stream spread in time
        arrivals = []
        with c.stream("POST", "/v1/chat/completions", headers={"x-fakellm-chunks": "5", "x-fakellm-chunk-delay-ms": "150"},
                      json={"model": "by-name", "stream": True, "messages": []}) as r:
            assert r.status_code == 200
            for line in r.iter_lines():
                if line.startswith("data: "):
                    arrivals.append(time.monotonic())
        assert arrivals[-1] - arrivals[0] > 0.4
        r = c.post("/v1/chat/completions", json={"model": "by-ip", "messages": []})
        assert r.status_code == 200


def test_untrusted_certificate_is_refused(vsr, tls_backend):
    port = free_port()
    v = vsr(tls_config(port, tls_backend), port=port)   # no test CA: verification must fail
    r = v.post_chat({"model": "by-ip", "messages": []})
    assert r.status_code == 503
    assert "connection failure" in r.json()["error"]["message"]
    assert tls_requests(tls_backend, tls_backend.ca) == 0
    assert "certificate verify failed" in v.proc.output()


def test_host_name_mismatch_is_refused(vsr, fakellm, tmp_path):
    ca, cert, key = make_certs(tmp_path, names=("other.example",))
    be = fakellm("tls-other", args=("--tls-cert", str(cert), "--tls-key", str(key)))
    port = free_port()
    v = vsr(tls_config(port, be), port=port, env={"SSL_CERT_FILE": str(ca)})
    r = v.post_chat({"model": "by-name", "messages": []})
    assert r.status_code == 503
    assert "hostname mismatch" in v.proc.output()
    r = v.post_chat({"model": "by-ip", "messages": []})   # the certificate names neither
    assert r.status_code == 503


def test_health_checks_speak_tls(vsr, fakellm, tls_backend):
    plain = fakellm("plain-be")
    port = free_port()
    cfg = config_yaml(port, [
        "    - name: mixed\n"
        "      reliability: {health_check_path: /health, health_check_interval: 100ms, health_check_timeout: 500ms}\n"
        "      backend_refs:\n"
        f"        - {{name: secure, base_url: 'https://127.0.0.1:{tls_backend.port}/v1'}}\n"
        f"        - {{name: plain, endpoint: '{plain.endpoint}'}}"])
    v = vsr(cfg, port=port, env={"SSL_CERT_FILE": str(tls_backend.ca)})
    time.sleep(0.8)  # several checks: a failing one would have marked `secure` down after three
    log = httpx.get(f"https://127.0.0.1:{tls_backend.port}/_fakellm/log", verify=str(tls_backend.ca)).json()
    assert sum(1 for e in log["entries"] if e["outcome"] == "health") >= 3
    with v.client() as c:
        seen = {c.post("/v1/chat/completions", json={"model": "mixed", "messages": []}).headers["x-fakellm-backend"]
                for _ in range(6)}
    assert seen == {"tls-be", "plain-be"}
