"""The management API as an attacker sees it: documents bounded in size and
nesting (and the control thread never stuck behind one), redacted secrets that
survive a GET -> PUT round trip without ever becoming keys, the bearer token,
the Host/Origin check against DNS rebinding, the refusal to expose the API
without a token, and the environment variables a PUT may name."""
import json
import signal
import socket
import subprocess
import time

import httpx

from conftest import VSR_BIN, free_port, wait_until

TOKEN = "mgmt-token-0123456789abcdef"


def doc(port, mport, backend, tag="one", listener_extra="", backend_extra="", mgmt_extra=""):
    return f"""version: v0.3
listeners:
  - name: main
    address: 127.0.0.1
    port: {port}
{listener_extra}
providers:
  defaults:
    model: m1
  models:
    - name: m1
      backend_refs:
        - name: b0
          endpoint: {backend.endpoint}
{backend_extra}
routing:
  decisions:
    - name: stamp
      modelRefs: [{{model: m1}}]
      plugins:
        - type: header_mutation
          configuration:
            add: [{{name: x-doc, value: "{tag}"}}]
global:
  services:
    management_api:
      port: {mport}
{mgmt_extra}
"""


class Api:
    def __init__(self, mport, token=None):
        self.url = f"http://127.0.0.1:{mport}"
        self.h = {"authorization": f"Bearer {token}"} if token else {}

    def get(self, path, headers=None, **kw):
        return httpx.get(self.url + path, headers=dict(self.h, **(headers or {})), timeout=30, **kw)

    def put(self, text, ctype="application/yaml", headers=None, timeout=30):
        h = dict(self.h, **{"content-type": ctype})
        h.update(headers or {})
        return httpx.put(self.url + "/api/v1/config", content=text.encode() if isinstance(text, str) else text,
                         headers=h, timeout=timeout)

    def post(self, path, headers=None, **kw):
        return httpx.post(self.url + path, headers=dict(self.h, **(headers or {})), timeout=30, **kw)


def chat(v, key=None):
    h = {"authorization": f"Bearer {key}"} if key else {}
    return v.post_chat({"model": "auto", "messages": [{"role": "user", "content": "hi"}]}, headers=h)


def start(vsr, fakellm, token=None, extra_args=(), env=None, **doc_kw):
    b = fakellm("a")
    port, mport = free_port(), free_port()
    args = tuple(extra_args)
    v = vsr(doc(port, mport, b, **doc_kw), port=port, workers=1, extra_args=args, env=env)
    v.api, v.backend, v.mport = Api(mport, token), b, mport
    return v


# ---- document bounds --------------------------------------------------------------------

def test_deep_nesting_is_refused_at_once_and_nothing_wedges(vsr, fakellm):
    v = start(vsr, fakellm)
    deep = "version: v0.3\nx: " + "{a: " * (1 << 18)  # 1 MiB of unclosed nesting
    t0 = time.monotonic()
    r = v.api.put(deep, timeout=60)
    took = time.monotonic() - t0
    assert r.status_code == 400, r.text
    body = r.json()
    assert body["reject_code"] == "invalid_document"
    assert "nesting deeper than 128 levels" in body["error"]["message"]
    assert body["errors"][0]["line"] == 2 and body["errors"][0]["column"] > 0
    assert took < 20  # on the unbounded parser this document takes minutes
    # validate, GET and an ordinary PUT still answer; traffic is served
    r = v.api.post("/api/v1/config/validate", content=deep.encode(), headers={"content-type": "application/yaml"})
    assert r.status_code == 400
    assert v.api.get("/api/v1/config").status_code == 200
    assert v.api.put(doc(v.port, v.mport, v.backend, tag="two")).status_code == 200
    assert chat(v).status_code == 200
    # the file source is held to the same bound, and the watch does not block the control thread
    v.config_path.write_text(deep)

    def rejected():
        return v.api.get("/api/v1/config/hash").json()["activation_status"] == "rejected"
    wait_until(rejected, timeout=30, what="the file's rejection")
    assert v.api.get("/api/v1/config/hash").json()["reject_code"] == "invalid_document"
    t0 = time.monotonic()
    assert v.proc.stop() == 0
    assert time.monotonic() - t0 < 15
    v.proc.assert_clean_exit()


def test_document_size_limit(vsr, fakellm):
    v = start(vsr, fakellm, mgmt_extra="      max_document_bytes: 4096")
    base = doc(v.port, v.mport, v.backend, tag="two", mgmt_extra="      max_document_bytes: 4096")
    big = base + "# " + "x" * 5000 + "\n"
    r = v.api.put(big)
    assert r.status_code == 413, r.text
    assert v.api.put(base).status_code == 200
    # the file is held to the same limit
    v.config_path.write_text(big)

    def rejected():
        return v.api.get("/api/v1/config/hash").json()["activation_status"] == "rejected"
    wait_until(rejected, timeout=30, what="the file's rejection")
    assert v.api.get("/api/v1/config/hash").json()["reject_code"] == "invalid_document"
    assert v.api.get("/api/v1/config").json()["config_version"] == 2


def test_stop_during_a_put_does_not_wait_for_it(vsr, fakellm):
    """Management calls run on threads of their own: a SIGTERM while PUTs
    are in progress drains and exits; the sanitizers check what is left."""
    v = start(vsr, fakellm)
    many = "\n".join(f"    - name: x{i}\n      backend_refs: [{{endpoint: '127.0.0.1:{1000 + i}'}}]"
                     for i in range(300))
    text = doc(v.port, v.mport, v.backend, tag="two").replace("routing:\n", many + "\nrouting:\n", 1).encode()
    socks = []
    for _ in range(4):
        s = socket.create_connection(("127.0.0.1", v.mport))
        s.sendall(b"PUT /api/v1/config HTTP/1.1\r\nhost: 127.0.0.1:" + str(v.mport).encode() +
                  b"\r\ncontent-type: application/yaml\r\ncontent-length: " + str(len(text)).encode() +
                  b"\r\n\r\n" + text)
        socks.append(s)
    t0 = time.monotonic()
    assert v.proc.stop(signal.SIGTERM, timeout=40) == 0
    assert time.monotonic() - t0 < 35
    v.proc.assert_clean_exit()
    for s in socks:
        s.close()


# ---- redacted secrets ---------------------------------------------------------------------

SECRET_LISTENER = "    api_keys: [client-key-one, client-key-two]"
SECRET_BACKEND = """          api_key: sk-backend-secret
          extra_headers:
            Ocp-Apim-Subscription-Key: sub-secret
            X-Auth: xauth-secret
            X-Signature: sig-secret
            x-team: blue"""
SECRETS = ("client-key-one", "client-key-two", "sk-backend-secret", "sub-secret", "xauth-secret", "sig-secret")


def test_get_put_round_trip_keeps_the_secrets(vsr, fakellm):
    v = start(vsr, fakellm, listener_extra=SECRET_LISTENER, backend_extra=SECRET_BACKEND)
    g = v.api.get("/api/v1/config")
    assert g.status_code == 200
    for s in SECRETS:
        assert s not in g.text
    got = g.json()["document"]
    be = got["providers"]["models"][0]["backend_refs"][0]
    assert be["api_key"] == "<redacted>"
    assert be["extra_headers"]["Ocp-Apim-Subscription-Key"] == "<redacted>"
    assert be["extra_headers"]["X-Auth"] == "<redacted>" and be["extra_headers"]["X-Signature"] == "<redacted>"
    assert be["extra_headers"]["x-team"] == "blue"
    assert got["listeners"][0]["api_keys"] == ["<redacted>", "<redacted>"]
    # a header_mutation value is a header value too
    assert got["routing"]["decisions"][0]["plugins"][0]["configuration"]["add"][0]["value"] == "<redacted>"

    # the same document back: nothing changes
    r = httpx.put(v.api.url + "/api/v1/config", json=got, timeout=30)
    assert r.status_code == 200 and r.json()["changed"] is False, r.text
    # a real change beside the placeholders: the secrets are kept
    got["routing"]["decisions"][0]["plugins"][0]["configuration"]["add"][0]["value"] = "two"
    r = httpx.put(v.api.url + "/api/v1/config", json=got, timeout=30)
    assert r.status_code == 200 and r.json()["changed"] is True, r.text
    assert chat(v, "<redacted>").status_code == 401
    r = chat(v, "client-key-two")
    assert r.status_code == 200
    seen = r.json()["fakellm"]["request"]["headers"]
    assert seen.get("x-doc") == "two"
    assert seen.get("authorization") == "Bearer sk-backend-secret"
    assert seen.get("ocp-apim-subscription-key") == "sub-secret" and seen.get("x-signature") == "sig-secret"
    assert chat(v, "client-key-one").status_code == 200

    # a placeholder with nothing to stand for is refused, whatever the position
    bad = json.loads(json.dumps(got))
    bad["listeners"][0]["api_keys"].append("<redacted>")
    r = httpx.put(v.api.url + "/api/v1/config", json=bad, timeout=30)
    assert r.status_code == 400 and r.json()["reject_code"] == "invalid_document", r.text
    assert "listeners[0].api_keys[2]" in r.json()["error"]["message"]
    bad = json.loads(json.dumps(got))
    bad["providers"]["models"][0]["backend_refs"][0]["extra_headers"]["X-New-Secret"] = "<redacted>"
    r = httpx.put(v.api.url + "/api/v1/config", json=bad, timeout=30)
    assert r.status_code == 400 and "X-New-Secret" in r.json()["error"]["message"]
    assert chat(v, "<redacted>").status_code == 401
    assert chat(v, "client-key-one").status_code == 200


def test_placeholder_at_start_is_refused(tmp_path, fakellm):
    b = fakellm("a")
    path = tmp_path / "c.yaml"
    path.write_text(doc(free_port(), free_port(), b, listener_extra='    api_keys: ["<redacted>"]'))
    r = subprocess.run([VSR_BIN, "serve", "--config", str(path), "--metrics-listen", "off"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 2
    assert "listeners[0].api_keys[0]" in r.stderr and "send the secret itself" in r.stderr


def test_cli_print_redacts_every_header_not_known_harmless(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("""version: v0.3
listeners:
  - {name: main, port: 8899}
providers:
  models:
    - name: m1
      backend_refs:
        - endpoint: 127.0.0.1:9
          extra_headers:
            Ocp-Apim-Subscription-Key: sub-secret
            X-Auth: xauth-secret
            X-Signature: sig-secret
            Content-Type: application/json
            User-Agent: vsr-test
""")
    r = subprocess.run([VSR_BIN, "config", "print", str(path), "--redact"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    for s in ("sub-secret", "xauth-secret", "sig-secret"):
        assert s not in r.stdout
    hdrs = json.loads(r.stdout)["providers"]["models"][0]["backend_refs"][0]["extra_headers"]
    assert hdrs["Content-Type"] == "application/json" and hdrs["User-Agent"] == "vsr-test"
    assert hdrs["X-Auth"] == "<redacted>"


# ---- authentication, Host and Origin ----------------------------------------------------

def test_token_guards_every_management_endpoint(vsr, fakellm, tmp_path):
    tf = tmp_path / "token"
    tf.write_text(TOKEN + "\n")
    v = start(vsr, fakellm, token=TOKEN, extra_args=("--management-token-file", str(tf)))
    url = v.api.url
    preview = {"model": "auto", "text": "hi"}
    for bad in ({}, {"authorization": "Bearer wrong-token-0123456789"}, {"authorization": "Bearer " + TOKEN[:-1]},
                {"authorization": TOKEN}, {"authorization": "Basic " + TOKEN}):
        assert httpx.get(url + "/api/v1/config", headers=bad, timeout=10).status_code == 401
        assert httpx.get(url + "/health", headers=bad, timeout=10).status_code == 401
        assert httpx.get(url + "/ready", headers=bad, timeout=10).status_code == 401
        assert httpx.post(url + "/api/v1/routing/preview", json=preview, headers=bad, timeout=10).status_code == 401
        assert httpx.get(url + "/api/v1/models/stats", headers=bad, timeout=10).status_code == 401
        r = httpx.put(url + "/api/v1/config", content=b"version: v0.3\n", headers=bad, timeout=10)
        assert r.status_code == 401
        assert r.json()["error"]["type"] == "authentication_error" and TOKEN not in r.text
        assert r.headers["www-authenticate"].startswith("Bearer")
    assert v.api.get("/api/v1/config").status_code == 200
    assert v.api.get("/health").status_code == 200 and v.api.get("/ready").status_code == 200
    assert v.api.post("/api/v1/routing/preview", json=preview).status_code == 200
    assert v.api.get("/api/v1/models/stats").status_code == 200
    assert v.api.put(doc(v.port, v.mport, v.backend, tag="two")).status_code == 200
    # the traffic listener's probes need no management token
    assert httpx.get(v.url + "/health", timeout=10).status_code == 200
    assert TOKEN not in v.proc.output()


def test_token_from_the_document_env(vsr, fakellm):
    v = start(vsr, fakellm, token=TOKEN, env={"VSR_TEST_MGMT_TOKEN": TOKEN},
              mgmt_extra="      token_env: VSR_TEST_MGMT_TOKEN")
    assert httpx.get(v.api.url + "/api/v1/config", timeout=10).status_code == 401
    assert v.api.get("/api/v1/config").status_code == 200
    # the token's source is fixed for the process (and a PUT names no new variable)
    r = v.api.put(doc(v.port, v.mport, v.backend, mgmt_extra="      token_env: OTHER_VAR"))
    assert r.status_code == 400 and "OTHER_VAR" in r.json()["error"]["message"]
    r = v.api.put(doc(v.port, v.mport, v.backend, mgmt_extra="      token_file: /nonexistent"))
    assert r.status_code == 409 and r.json()["reject_code"] == "restart_required"


def test_host_and_origin_checked_on_loopback(vsr, fakellm):
    v = start(vsr, fakellm)
    mp = v.mport

    def get(host=None, origin=None, path="/api/v1/config/hash"):
        h = {}
        if host is not None:
            h["host"] = host
        if origin is not None:
            h["origin"] = origin
        return httpx.get(f"http://127.0.0.1:{mp}{path}", headers=h, timeout=10).status_code

    for host in (f"evil.example:{mp}", "evil.example", f"127.0.0.1:{mp + 1}", "127.0.0.1", f"10.0.0.1:{mp}",
                 f"localhost.evil.example:{mp}", ""):
        assert get(host=host) == 403, host
        assert get(host=host, path="/health") == 403, host
    for host in (f"127.0.0.1:{mp}", f"localhost:{mp}", f"LOCALHOST:{mp}", f"[::1]:{mp}", f"127.1.2.3:{mp}"):
        assert get(host=host) == 200, host
    for origin in ("http://evil.example", f"http://evil.example:{mp}", "null", f"http://127.0.0.1:{mp + 1}",
                   f"https://127.0.0.1:{mp}"):
        assert get(origin=origin) == 403, origin
    assert get(origin=f"http://127.0.0.1:{mp}") == 200
    assert get(origin=f"http://localhost:{mp}") == 200
    # a request without Host (HTTP/1.0) passes
    with socket.create_connection(("127.0.0.1", mp), timeout=10) as s:
        s.sendall(b"GET /api/v1/config/hash HTTP/1.0\r\n\r\n")
        data = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    assert data.startswith(b"HTTP/1.1 200"), data[:200]


def test_non_loopback_bind_needs_a_token(tmp_path, fakellm):
    b = fakellm("a")
    path = tmp_path / "c.yaml"
    path.write_text(doc(free_port(), free_port(), b,
                        mgmt_extra="      bind_address: 0.0.0.0\n      remote_exposure: true"))
    r = subprocess.run([VSR_BIN, "serve", "--config", str(path), "--metrics-listen", "off"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 2
    assert "needs a token" in r.stderr
    # an unusable token is refused too, without printing it
    tf = tmp_path / "short"
    tf.write_text("short-secret\n")
    r = subprocess.run([VSR_BIN, "serve", "--config", str(path), "--metrics-listen", "off",
                        "--management-token-file", str(tf)], capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "16 to 4096" in r.stderr and "short-secret" not in r.stderr
    r = subprocess.run([VSR_BIN, "serve", "--config", str(path), "--metrics-listen", "off",
                        "--management-token-env", "VSR_TEST_UNSET_VAR"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "VSR_TEST_UNSET_VAR is not set" in r.stderr


def test_a_put_may_name_only_the_files_variables(vsr, fakellm):
    env = {"VSR_TEST_BACKEND_KEY": "sk-from-env", "VSR_TEST_OTHER_SECRET": "must-not-leave"}
    v = start(vsr, fakellm, env=env, backend_extra="          api_key_env: VSR_TEST_BACKEND_KEY")
    r = chat(v)
    assert r.json()["fakellm"]["request"]["headers"]["authorization"] == "Bearer sk-from-env"
    other = doc(v.port, v.mport, v.backend, tag="two", backend_extra="          api_key_env: VSR_TEST_OTHER_SECRET")
    r = v.api.put(other)
    assert r.status_code == 400 and r.json()["reject_code"] == "invalid_document", r.text
    assert "VSR_TEST_OTHER_SECRET" in r.json()["error"]["message"]
    assert "must-not-leave" not in r.text
    r = chat(v)
    assert r.json()["fakellm"]["request"]["headers"]["authorization"] == "Bearer sk-from-env"
    # a variable the file names stays usable
    same = doc(v.port, v.mport, v.backend, tag="two", backend_extra="          api_key_env: VSR_TEST_BACKEND_KEY")
    assert v.api.put(same).status_code == 200
    # the file itself may name new ones (the operator's)
    v.config_path.write_text(other.replace('value: "two"', 'value: "three"'))

    def moved():
        return v.api.get("/api/v1/config/hash").json()["config_version"] == 3
    wait_until(moved, timeout=30, what="the file's activation")
    r = chat(v)
    assert r.json()["fakellm"]["request"]["headers"]["authorization"] == "Bearer must-not-leave"
