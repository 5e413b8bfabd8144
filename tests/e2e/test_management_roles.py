"""management_api.auth mode bearer: tokens read from environment variables, each bound to a role; the roles'
permissions decide which management route a token may use (the reference's modes and roles)."""
import subprocess

import httpx

from conftest import VSR_BIN, free_port, wait_until
from test_management_security import Api, doc

VIEWER = "viewer-token-0123456789abcdef"
OPERATOR = "operator-token-0123456789abcdef"
ADMIN = "admin-token-0123456789abcdef"
READER = "reader-token-0123456789abcdef"
ENV = {"VSR_T_VIEWER": VIEWER, "VSR_T_OPERATOR": OPERATOR, "VSR_T_ADMIN": ADMIN, "VSR_T_READER": READER}

AUTH = """      auth:
        mode: bearer
        tokens:
          - {env: VSR_T_VIEWER, role: viewer}
          - {env: VSR_T_OPERATOR, role: operator}
          - {env: VSR_T_ADMIN, role: admin}"""

PREVIEW = {"model": "auto", "text": "hi"}


def start(vsr, fakellm, auth=AUTH, env=ENV, tag="one"):
    b = fakellm("a")
    port, mport = free_port(), free_port()
    v = vsr(doc(port, mport, b, tag=tag, mgmt_extra=auth), port=port, workers=1, env=env)
    v.backend, v.mport = b, mport
    v.as_ = {name: Api(mport, tok) for name, tok in (("viewer", VIEWER), ("operator", OPERATOR),
                                                      ("admin", ADMIN), ("reader", READER), ("none", None))}
    return v


def test_default_roles_guard_each_route(vsr, fakellm):
    v = start(vsr, fakellm)
    none, viewer, operator, admin = (v.as_[k] for k in ("none", "viewer", "operator", "admin"))
    # health is public; everything else needs a known token
    assert none.get("/health").status_code == 200
    for r in (none.get("/ready"), none.get("/api/v1/config"), none.post("/api/v1/routing/preview", json=PREVIEW),
              Api(v.mport, "wrong-token-0123456789abcdef").get("/api/v1/config")):
        assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_management_token", r.text
        assert r.headers["www-authenticate"].startswith("Bearer")
    # viewer: reads, previews, never writes
    assert viewer.get("/ready").status_code == 200
    assert viewer.get("/api/v1/config").status_code == 200
    assert viewer.get("/api/v1/config/hash").status_code == 200
    assert viewer.post("/api/v1/routing/preview", json=PREVIEW).status_code == 200
    same = v.config_path.read_text().replace('value: "one"', 'value: "two"')
    r = viewer.put(same)
    assert r.status_code == 403 and r.json()["error"]["code"] == "forbidden", r.text
    assert "viewer" in r.json()["error"]["message"] and "config.write" in r.json()["error"]["message"]
    r = viewer.post("/api/v1/config/rollback", json={"version": 1})
    assert r.status_code == 403
    # operator and admin write
    assert operator.put(same).status_code == 200
    assert admin.put(same.replace('value: "two"', 'value: "three"')).status_code == 200
    assert VIEWER not in v.proc.output() and OPERATOR not in v.proc.output()


def test_custom_roles_and_no_widening_through_the_api(vsr, fakellm):
    auth = """      auth:
        mode: bearer
        tokens:
          - {env: VSR_T_READER, role: reader}
          - {env: VSR_T_ADMIN, role: root}
        roles:
          reader: [config.read]
          root: ["*"]"""
    v = start(vsr, fakellm, auth=auth)
    reader, admin = v.as_["reader"], v.as_["admin"]
    assert reader.get("/api/v1/config").status_code == 200
    r = reader.post("/api/v1/routing/preview", json=PREVIEW)
    assert r.status_code == 403 and "classify.invoke" in r.json()["error"]["message"]
    assert reader.get("/ready").status_code == 403
    assert admin.post("/api/v1/routing/preview", json=PREVIEW).status_code == 200
    # a document that would grant the reader more is not activated by the API
    wider = v.config_path.read_text().replace("reader: [config.read]", 'reader: ["*"]')
    r = admin.put(wider)
    assert r.status_code == 409 and r.json()["reject_code"] == "restart_required", r.text
    assert "management_api.auth changed" in r.json()["error"]["message"]
    assert reader.post("/api/v1/routing/preview", json=PREVIEW).status_code == 403


def test_bearer_without_tokens_refuses_all_but_health(vsr, fakellm):
    v = start(vsr, fakellm, auth="      auth: {mode: bearer}")
    assert v.as_["none"].get("/health").status_code == 200
    r = v.as_["admin"].get("/api/v1/config")
    assert r.status_code == 401 and r.json()["error"]["code"] == "management_auth_not_configured"


def test_the_management_token_has_the_admin_role(vsr, fakellm, tmp_path):
    tf = tmp_path / "token"
    tf.write_text(ADMIN + "\n")
    b = fakellm("a")
    port, mport = free_port(), free_port()
    auth = """      auth:
        mode: bearer
        tokens:
          - {env: VSR_T_VIEWER, role: viewer}"""
    vsr(doc(port, mport, b, mgmt_extra=auth), port=port, workers=1, env=ENV,
        extra_args=("--management-token-file", str(tf)))
    # past the access check: the rollback itself wants its precondition
    assert Api(mport, ADMIN).post("/api/v1/config/rollback", json={"version": 99}).status_code == 428
    assert Api(mport, VIEWER).post("/api/v1/config/rollback", json={"version": 99}).status_code == 403


def test_load_errors(tmp_path):
    def validate(auth):
        path = tmp_path / "c.yaml"
        path.write_text(f"""version: v0.3
listeners: [{{name: main, address: 127.0.0.1, port: {free_port()}}}]
providers:
  models: [{{name: m1, backend_refs: [{{name: b, endpoint: "127.0.0.1:9"}}]}}]
global:
  services:
    management_api:
      port: {free_port()}
{auth}
""")
        return subprocess.run([VSR_BIN, "config", "validate", str(path)], capture_output=True, text=True, timeout=20)

    r = validate("      auth: {mode: bearer, tokens: [{env: T, role: nobody}]}")
    assert r.returncode == 2 and 'tokens[0].role "nobody" is not one of the roles' in r.stderr, r.stderr
    r = validate("      auth: {mode: basic}")
    assert r.returncode == 2 and "mode" in r.stderr
    r = validate("      auth: {mode: bearer, tokens: [{env: T, role: viewer}, {env: T, role: admin}]}")
    assert r.returncode == 2 and "named twice" in r.stderr
    r = validate("      auth: {mode: disabled}")
    assert r.returncode == 0, r.stderr
    r = validate("      auth: {mode: bearer, tokens: [{env: T, role: viewer}], roles: {viewer: [config.read]}}")
    assert r.returncode == 0, r.stderr


def test_an_unset_token_variable_stops_the_start(tmp_path):
    b_port, port, mport = free_port(), free_port(), free_port()
    path = tmp_path / "c.yaml"

    class B:
        endpoint = f"127.0.0.1:{b_port}"
    path.write_text(doc(port, mport, B, mgmt_extra=AUTH))
    env = {"VSR_T_VIEWER": VIEWER, "VSR_T_OPERATOR": "short"}
    r = subprocess.run([VSR_BIN, "serve", "--config", str(path), "--metrics-listen", "off"], capture_output=True,
                       text=True, timeout=60, env=env)
    assert r.returncode == 2, r.stderr
    assert "tokens[1]: environment variable VSR_T_OPERATOR must hold 16 to 4096" in r.stderr
    assert "short" not in r.stderr and VIEWER not in r.stderr
