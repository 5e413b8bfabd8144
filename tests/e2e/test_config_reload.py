"""Configuration versions end to end: the management API's /api/v1/config*
endpoints (ACK/NACK with reject codes and LINE:COL, If-Match, history,
rollback), the file watch (in-place writes and rename-over), the version in
every response and in metrics, the audit log, live api_keys, pools kept
across unrelated changes, and the CLI's print --redact."""
import json
import os
import subprocess

import httpx

from conftest import VSR_BIN, free_port, wait_until


def doc(port, mport, backend, tag="one", extra_listener="", model2=""):
    """A document whose default recipe's decision stamps x-doc: TAG on the
    upstream request (the backend echoes it back)."""
    return f"""version: v0.3
listeners:
  - name: main
    address: 127.0.0.1
    port: {port}
{extra_listener}
providers:
  defaults:
    model: m1
  models:
    - name: m1
      backend_refs:
        - name: b0
          endpoint: {backend.endpoint}
{model2}
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
"""


class Api:
    def __init__(self, mport):
        self.url = f"http://127.0.0.1:{mport}"

    def get(self, path, **kw):
        return httpx.get(self.url + path, timeout=30, **kw)

    def post(self, path, **kw):
        return httpx.post(self.url + path, timeout=30, **kw)

    def put_yaml(self, text, headers=None):
        h = {"content-type": "application/yaml"}
        h.update(headers or {})
        return httpx.put(self.url + "/api/v1/config", content=text.encode(), headers=h, timeout=30)


def chat(v, **kw):
    r = v.post_chat({"model": "auto", "messages": [{"role": "user", "content": "hi"}]}, **kw)
    return r


def served(v, **kw):
    """(status, version header, the x-doc the backend saw)"""
    r = chat(v, **kw)
    tag = None
    if r.status_code == 200:
        tag = r.json()["fakellm"]["request"]["headers"].get("x-doc")
    return r.status_code, int(r.headers["x-vsr-config-version"]), tag


def start(vsr, fakellm, tmp_path, **doc_kw):
    b = fakellm("a")
    port, mport = free_port(), free_port()
    audit = tmp_path / "audit.jsonl"
    v = vsr(doc(port, mport, b, **doc_kw), port=port, workers=1,
            extra_args=("--config-audit-log", str(audit)))
    v.api, v.backend, v.mport, v.audit = Api(mport), b, mport, audit
    return v


def audit_lines(v):
    return [json.loads(line) for line in v.audit.read_text().splitlines()]


def test_api_ack_nack_history_rollback(vsr, fakellm, tmp_path):
    v = start(vsr, fakellm, tmp_path)
    api = v.api
    assert served(v) == (200, 1, "one")

    g = api.get("/api/v1/config")
    assert g.status_code == 200 and g.headers["etag"] == '"1"'
    body = g.json()
    assert body["config_version"] == 1 and body["hash"].startswith("sha256:") and len(body["hash"]) == 71
    assert body["source"] == "file"
    assert body["document"]["listeners"][0]["port"] == v.port
    h1 = body["hash"]
    assert api.get("/api/v1/config/hash").json()["active_config_hash"] == h1

    # PUT YAML, honouring If-Match
    two = doc(v.port, v.mport, v.backend, tag="two")
    r = api.put_yaml(two, {"if-match": '"7"'})
    assert r.status_code == 412 and r.json()["error"]["code"] == "precondition_failed"
    r = api.put_yaml(two, {"if-match": '"1"'})
    assert r.status_code == 200, r.text
    ack = r.json()
    assert ack["status"] == "ACK" and ack["config_version"] == 2 and ack["previous_version"] == 1
    assert r.headers["etag"] == '"2"'
    assert served(v) == (200, 2, "two")

    # the same content again (reformatted) is no new version
    r = api.put_yaml("# same\n" + two)
    assert r.status_code == 200 and r.json()["changed"] is False and r.json()["config_version"] == 2

    # PUT JSON: the same document as JSON
    as_json = api.get("/api/v1/config").json()["document"]
    as_json["routing"]["decisions"][0]["plugins"][0]["configuration"]["add"][0]["value"] = "three"
    r = httpx.put(api.url + "/api/v1/config", json=as_json, timeout=30)
    assert r.status_code == 200 and r.json()["config_version"] == 3, r.text
    assert served(v) == (200, 3, "three")

    # NACKs: reject code, every error with its line and column; version 3 keeps serving
    bad = two.replace("modelRefs: [{model: m1}]", "modelRefs: [{model: nope}]")
    r = api.put_yaml(bad)
    assert r.status_code == 422
    nack = r.json()
    assert nack["status"] == "NACK" and nack["reject_code"] == "unresolved_reference"
    assert nack["error"]["code"] == "unresolved_reference"
    assert nack["errors"][0]["line"] == bad.splitlines().index("      modelRefs: [{model: nope}]") + 1
    assert nack["errors"][0]["column"] > 0
    dup = two.replace("    - name: m1\n", "    - name: m1\n      backend_refs: [{endpoint: 127.0.0.1:1}]\n    - name: m1\n", 1)
    assert api.put_yaml(dup).json()["reject_code"] == "duplicate_name"
    r = api.put_yaml("version: v0.3\nlisteners: [\n")
    assert r.status_code == 400 and r.json()["reject_code"] == "invalid_document"
    assert r.json()["errors"][0]["line"] == 3
    r = api.put_yaml(doc(free_port(), v.mport, v.backend, tag="x"))
    assert r.status_code == 409 and r.json()["reject_code"] == "restart_required"
    assert "port changed" in r.json()["error"]["message"]
    r = httpx.put(api.url + "/api/v1/config", content=b"x", headers={"content-type": "text/plain"}, timeout=30)
    assert r.status_code == 415
    assert served(v) == (200, 3, "three")

    # validate: a dry run
    r = api.post("/api/v1/config/validate", content=two.encode(), headers={"content-type": "application/yaml"})
    assert r.status_code == 200 and r.json()["valid"] is True
    r = api.post("/api/v1/config/validate", content=bad.encode(), headers={"content-type": "application/yaml"})
    assert r.status_code == 422 and r.json()["reject_code"] == "unresolved_reference"
    assert api.get("/api/v1/config").json()["config_version"] == 3

    # rollback: If-Match required; a NEW version with the old content
    r = api.post("/api/v1/config/rollback", json={"config_version": 1})
    assert r.status_code == 428
    r = api.post("/api/v1/config/rollback", json={"config_version": 1}, headers={"if-match": '"2"'})
    assert r.status_code == 412
    r = api.post("/api/v1/config/rollback", json={"config_version": 42}, headers={"if-match": '"3"'})
    assert r.status_code == 404
    r = api.post("/api/v1/config/rollback", json={"config_version": "1"}, headers={"if-match": '"3"'})
    assert r.status_code == 400
    r = api.post("/api/v1/config/rollback", json={"config_version": 1}, headers={"if-match": '"3"'})
    assert r.status_code == 200, r.text
    assert r.json()["config_version"] == 4 and r.json()["hash"] == h1 and r.json()["rolled_back_to"] == 1
    assert served(v) == (200, 4, "one")

    vs = api.get("/api/v1/config/versions").json()
    assert vs["active_version"] == 4
    assert [x["config_version"] for x in vs["versions"]] == [4, 3, 2, 1]
    assert [x["source"] for x in vs["versions"]] == ["rollback", "api", "api", "file"]
    assert vs["versions"][0]["hash"] == vs["versions"][3]["hash"] == h1
    assert all(x["activated_at"].endswith("Z") for x in vs["versions"])

    # the version in metrics, the outcomes counted
    m = httpx.get(v.metrics_url, timeout=10).text
    assert "vsr_config_version 4\n" in m
    assert 'vsr_config_updates_total{result="ack"} 4' in m
    assert 'vsr_config_updates_total{result="nack"} 4' in m

    # the audit log: every activation, rejection and rollback
    lines = audit_lines(v)
    assert [(x["source"], x["result"]) for x in lines] == [
        ("file", "ACK"), ("api", "ACK"), ("api", "ACK"), ("api", "NACK"), ("api", "NACK"), ("api", "NACK"),
        ("api", "NACK"), ("rollback", "ACK")]
    assert lines[3]["reason"].startswith("unresolved_reference: ") and lines[3]["version"] == 3
    assert lines[7]["version"] == 4 and lines[7]["hash"] == h1 and "rollback to version 1" in lines[7]["reason"]
    assert all({"time", "source", "version", "hash", "result", "reason"} <= set(x) for x in lines)

    # method checks
    assert httpx.delete(api.url + "/api/v1/config", timeout=10).status_code == 405
    assert api.get("/api/v1/config/rollback").status_code == 405


def bump_until(v, want_version, what):
    def ok():
        try:
            return v.api.get("/api/v1/config/hash").json()["config_version"] >= want_version
        except httpx.TransportError:
            return False
    wait_until(ok, timeout=15, what=what)


def test_file_watch_in_place_rename_and_rejected(vsr, fakellm, tmp_path):
    v = start(vsr, fakellm, tmp_path)
    path = v.config_path
    base = path.read_text()

    # an editor writing in place
    with open(path, "w") as f:
        f.write(base.replace('value: "one"', 'value: "two"'))
    bump_until(v, 2, "the in-place write to activate")
    assert served(v) == (200, 2, "two")

    # a tool writing a new file and renaming it over the old one
    tmp = path.with_suffix(".new")
    tmp.write_text(base.replace('value: "one"', 'value: "three"'))
    os.rename(tmp, path)
    bump_until(v, 3, "the rename to activate")
    assert served(v) == (200, 3, "three")

    # the watch follows the new file: in place again
    with open(path, "w") as f:
        f.write(base.replace('value: "one"', 'value: "four"'))
    bump_until(v, 4, "the write after the rename to activate")
    assert served(v) == (200, 4, "four")

    # a rejected document: the old version keeps serving, the status says so
    path.write_text(base.replace("version: v0.3", "version: v0.3\nbogus_key: 1"))

    def rejected():
        return v.api.get("/api/v1/config/hash").json()["activation_status"] == "rejected"
    wait_until(rejected, timeout=15, what="the rejection")
    h = v.api.get("/api/v1/config/hash").json()
    assert h["config_version"] == 4 and h["reject_code"] == "invalid_resource"
    assert h["source_config_hash"] != h["active_config_hash"]
    assert served(v) == (200, 4, "four")
    assert any(x["source"] == "file" and x["result"] == "NACK" and "bogus_key" in x["reason"]
               for x in audit_lines(v))

    # a rollback while the file holds a rejected document succeeds
    r = v.api.post("/api/v1/config/rollback", json={"config_version": 2}, headers={"if-match": '"4"'})
    assert r.status_code == 200 and r.json()["config_version"] == 5
    assert served(v) == (200, 5, "two")
    assert v.api.get("/api/v1/config/hash").json()["activation_status"] == "active"


def test_api_keys_change_live_and_pools_survive(vsr, fakellm, tmp_path):
    v = start(vsr, fakellm, tmp_path, extra_listener="    api_keys: [k1]")
    ok = {"authorization": "Bearer k1"}
    assert served(v, headers=ok) == (200, 1, "one")
    assert chat(v, headers={"authorization": "Bearer k2"}).status_code == 401
    accepted = v.backend.stats()["connections_accepted"]

    # a recipe change and a new model: m1's endpoints are untouched, so its pool is kept
    other = fakellm("b")
    model2 = f"    - name: m2\n      backend_refs: [{{endpoint: '{other.endpoint}'}}]"
    text = doc(v.port, v.mport, v.backend, tag="two", extra_listener="    api_keys: [k2]", model2=model2)
    assert v.api.put_yaml(text).status_code == 200
    assert chat(v, headers=ok).status_code == 401          # the old key is gone at once
    assert served(v, headers={"authorization": "Bearer k2"}) == (200, 2, "two")
    # the warm connection was reused: the only new one is this /stats query's own
    assert v.backend.stats()["connections_accepted"] == accepted + 1

    # moving m1 to another endpoint builds a new pool there
    text = text.replace(f"endpoint: {v.backend.endpoint}", f"endpoint: {other.endpoint}")
    assert v.api.put_yaml(text).status_code == 200
    r = chat(v, headers={"authorization": "Bearer k2"})
    assert r.status_code == 200 and r.json()["fakellm"]["backend"] == "b"


def test_cli_print_redacts(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("""version: v0.3
listeners:
  - {name: main, port: 8899, api_keys: [listener-key-1]}
providers:
  models:
    - name: m1
      backend_refs:
        - endpoint: 127.0.0.1:9
          api_key: sk-very-secret
          extra_headers: {x-api-key: hdr-secret, x-team: blue}
""")
    r = subprocess.run([VSR_BIN, "config", "print", str(path), "--redact"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    for secret in ("listener-key-1", "sk-very-secret", "hdr-secret"):
        assert secret not in out
    assert "blue" in out
    eff = json.loads(out)
    assert eff["listeners"][0]["address"] == "0.0.0.0" and eff["listeners"][0]["timeout"] == "300s"
    assert eff["providers"]["models"][0]["provider_model_id"] == "m1"
    # without --redact the effective document validates as is
    r = subprocess.run([VSR_BIN, "config", "print", str(path)], capture_output=True, text=True)
    assert "sk-very-secret" in r.stdout
    printed = tmp_path / "printed.yaml"
    printed.write_text(r.stdout)
    r = subprocess.run([VSR_BIN, "config", "validate", str(printed)], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    bad = tmp_path / "bad.yaml"
    bad.write_text("version: v0.3\nnope: 1\n")
    r = subprocess.run([VSR_BIN, "config", "print", str(bad)], capture_output=True, text=True)
    assert r.returncode == 2 and "bad.yaml:2:1" in r.stderr


def test_ejection_survives_an_unrelated_change(vsr, fakellm, tmp_path):
    """A model's outlier ejection lives in its cluster, which a change that
    leaves its endpoints alone keeps: the bad endpoint stays out."""
    bad, good = fakellm("bad", args=("--status", "500")), fakellm("good")
    port, mport = free_port(), free_port()

    def text(tag):
        return f"""version: v0.3
listeners:
  - {{name: main, address: 127.0.0.1, port: {port}}}
providers:
  models:
    - name: m1
      reliability: {{consecutive_5xx: 1, base_ejection_time: 60s}}
      backend_refs:
        - {{name: bad, endpoint: '{bad.endpoint}'}}
        - {{name: good, endpoint: '{good.endpoint}'}}
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
    management_api: {{port: {mport}}}
"""
    v = vsr(text("one"), port=port, workers=1)
    statuses = [chat(v).status_code for _ in range(4)]
    assert 500 in statuses  # the bad endpoint answered once, then was ejected
    before = bad.stats()["requests"]
    assert 'vsr_endpoint_ejected{model="m1",endpoint="bad"} 1' in httpx.get(v.metrics_url, timeout=10).text

    assert Api(mport).put_yaml(text("two")).status_code == 200
    for _ in range(6):
        assert served(v) == (200, 2, "two")
    assert bad.stats()["requests"] == before  # still ejected under the new version
    assert 'vsr_endpoint_ejected{model="m1",endpoint="bad"} 1' in httpx.get(v.metrics_url, timeout=10).text


def test_unresolvable_host_activates_but_is_not_ready(vsr, fakellm, tmp_path):
    """A backend host that does not resolve yet (a service name of another
    network) does not fail the warm-up: the version activates, its endpoint
    stays out of rotation and /ready says which; a version whose names
    resolve makes it ready again."""
    v = start(vsr, fakellm, tmp_path)
    text = doc(v.port, v.mport, v.backend, tag="two").replace(v.backend.endpoint, "no-such-host.invalid:80")
    r = v.api.put_yaml(text)
    assert r.status_code == 200, r.text
    ready = httpx.get(v.url + "/ready", timeout=10)
    assert ready.status_code == 503 and ready.json()["unresolved"] == ["m1/b0 (no-such-host.invalid)"]
    r = chat(v)
    assert r.status_code == 503 and int(r.headers["x-vsr-config-version"]) == 2
    assert v.api.put_yaml(doc(v.port, v.mport, v.backend, tag="three")).status_code == 200
    assert httpx.get(v.url + "/ready", timeout=10).status_code == 200
    assert served(v) == (200, 3, "three")


def test_client_gone_during_a_put(vsr, fakellm, tmp_path):
    """The call runs on the thread pool; a client that leaves meanwhile
    leaves nothing dangling (the sanitizers check the exit)."""
    import socket
    v = start(vsr, fakellm, tmp_path)
    many = "\n".join(f"    - name: x{i}\n      backend_refs: [{{endpoint: '127.0.0.1:{1000 + i}'}}]" for i in range(300))
    text = doc(v.port, v.mport, v.backend, tag="two", model2=many).encode()
    for _ in range(5):
        s = socket.create_connection(("127.0.0.1", v.mport))
        s.sendall(b"PUT /api/v1/config HTTP/1.1\r\nhost: 127.0.0.1:" + str(v.mport).encode() + b"\r\ncontent-type: application/yaml\r\n"
                  b"content-length: " + str(len(text)).encode() + b"\r\n\r\n" + text)
        s.close()
    wait_until(lambda: v.api.get("/api/v1/config/hash").json()["config_version"] == 2, what="the PUT applied")
    assert served(v) == (200, 2, "two")


def test_stop_while_puts_compile(vsr, fakellm, tmp_path):
    """SIGTERM while management calls are still compiling on their threads:
    the process waits for them (bounded) before its exit handlers unload the
    libraries they are inside, and exits 0 with no sanitizer report."""
    import socket
    v = start(vsr, fakellm, tmp_path)
    many = "\n".join(f"    - name: x{i}\n      backend_refs: [{{endpoint: '127.0.0.1:{1000 + i}'}}]" for i in range(300))
    for round_ in range(3):
        text = doc(v.port, v.mport, v.backend, tag=f"stop-{round_}", model2=many).encode()
        socks = []
        for _ in range(4):
            s = socket.create_connection(("127.0.0.1", v.mport))
            s.sendall(b"PUT /api/v1/config HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/yaml\r\n"
                      b"content-length: " + str(len(text)).encode() + b"\r\n\r\n" + text)
            socks.append(s)
        if round_ < 2:
            for s in socks:
                s.close()
            continue
        v.proc.stop()
        for s in socks:
            s.close()
        v.proc.assert_clean_exit()
        assert "stopped" in v.proc.log_path.read_text(errors="replace")


def test_put_with_a_generic_content_type_is_yaml(vsr, fakellm, tmp_path):
    """`curl --data-binary @file` sends a form type; octet-stream is the
    other generic one: both bodies are read as YAML.  A real other type is
    still 415."""
    v = start(vsr, fakellm, tmp_path)
    for i, ct in enumerate(("application/x-www-form-urlencoded", "application/octet-stream")):
        text = doc(v.port, v.mport, v.backend, tag=f"generic-{i}")
        r = httpx.put(v.api.url + "/api/v1/config", content=text.encode(), headers={"content-type": ct}, timeout=30)
        assert r.status_code == 200, r.text
        assert served(v) == (200, 2 + i, f"generic-{i}")
    r = httpx.put(v.api.url + "/api/v1/config", content=b"x", headers={"content-type": "multipart/form-data"},
                  timeout=30)
    assert r.status_code == 415 and r.json()["error"]["code"] == "unsupported_media_type"


def test_put_of_several_documents_applies_the_first(vsr, fakellm, tmp_path):
    """A body with a second YAML document is the first document, as a file
    is: the rest is not read (not even parsed), its hash is the first's, and
    the log says where the ignored part starts."""
    v = start(vsr, fakellm, tmp_path)
    first = doc(v.port, v.mport, v.backend, tag="first")
    r = v.api.put_yaml(first + "---\n" + doc(v.port, v.mport, v.backend, tag="second") + "---\nbroken: [\n")
    assert r.status_code == 200, r.text
    assert r.json()["config_version"] == 2
    assert served(v) == (200, 2, "first")
    r = v.api.put_yaml(first)
    assert r.status_code == 200 and r.json()["changed"] is False and r.json()["config_version"] == 2
    line = first.count("\n") + 1
    wait_until(lambda: f"request:{line}:1: a second YAML document starts here" in v.proc.output(),
               what="the warning in the log")
