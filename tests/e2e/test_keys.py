"""listeners[].api_keys entries with identity: the key names the user and groups routing reads."""
import hashlib
import os
import subprocess

import httpx

from conftest import VSR_BIN, config_yaml, echo, free_port, model_yaml

BODY = {"model": "MoM", "messages": [{"role": "user", "content": "hi"}]}

ROUTING = """
routing:
  signals:
    role_bindings:
      - name: premium-binding
        role: premium_user
        subjects:
          - {kind: Group, name: premium}
  decisions:
    - name: premium
      priority: 20
      rules: {operator: OR, conditions: [{type: authz, name: premium_user}]}
      modelRefs: [{model: large}]
"""

KEYS = """    api_keys:
      - plain-key
      - {key: k-alice, user: alice, groups: [premium, staff], name: alice-laptop}
      - {key_env: BOB_KEY, user: bob}
      - {key_sha256: %s, user: carol, groups: [premium]}
      - {key: k-old, user: dave, groups: [premium], expires: "2001-01-01"}
""" % hashlib.sha256(b"k-carol").hexdigest()


def keyed(vsr, fakellm, extra=""):
    small, large = fakellm("small"), fakellm("large")
    port = free_port()
    cfg = config_yaml(port, [model_yaml("small", [small.endpoint]), model_yaml("large", [large.endpoint])],
                      default="small", listener_extra=KEYS + extra) + ROUTING
    return vsr(cfg, port=port, env={"BOB_KEY": "k-bob"})


def post(v, key, headers=None):
    return httpx.post(v.url + "/v1/chat/completions", json=BODY,
                      headers={"authorization": f"Bearer {key}", **(headers or {})}, timeout=30)


def test_key_identity_routes_and_reaches_the_backend(vsr, fakellm):
    v = keyed(vsr, fakellm)
    r = post(v, "k-alice")
    assert r.status_code == 200, r.text
    h = echo(r)["headers"]
    assert r.json()["fakellm"]["backend"] == "large"       # the premium group's decision
    assert h["x-authz-user-id"] == "alice" and h["x-authz-user-groups"] == "premium,staff"
    assert "authorization" not in h
    r = post(v, "k-carol")                                  # matched by its SHA-256 alone
    assert r.status_code == 200 and r.json()["fakellm"]["backend"] == "large"
    assert echo(r)["headers"]["x-authz-user-id"] == "carol"
    r = post(v, "k-bob")                                    # key_env, a user without groups
    assert r.status_code == 200 and r.json()["fakellm"]["backend"] == "small"
    h = echo(r)["headers"]
    assert h["x-authz-user-id"] == "bob" and "x-authz-user-groups" not in h
    r = post(v, "plain-key")         # the list-of-strings form: no identity, so the authz signal refuses (ref)
    assert r.status_code == 403, r.text


def test_client_identity_fields_never_override_the_keys(vsr, fakellm):
    # even on a listener that trusts identity fields, a key's identity wins
    v = keyed(vsr, fakellm, "    identity:\n      trust_headers: true\n")
    r = post(v, "k-bob", {"x-authz-user-id": "mallory", "x-authz-user-groups": "premium"})
    assert r.status_code == 200
    assert r.json()["fakellm"]["backend"] == "small"
    h = echo(r)["headers"]
    assert h["x-authz-user-id"] == "bob" and "x-authz-user-groups" not in h


def test_wrong_and_expired_keys_are_refused(vsr, fakellm):
    v = keyed(vsr, fakellm)
    for key in ("k-dave", "k-old", "k-alice2", "0" * 64, hashlib.sha256(b"k-carol").hexdigest()):
        r = post(v, key)
        assert r.status_code == 401, key
        assert r.json()["error"]["code"] == "invalid_api_key"


def test_entry_needs_exactly_one_key(tmp_path):
    for entry, why in (("{user: x}", "exactly one of key, key_env and key_sha256"),
                       ("{key: a, key_sha256: \"%s\"}" % ("0" * 64), "exactly one of key"),
                       ("{key_sha256: abc}", "64 hexadecimal digits"),
                       ("{key: a, expires: tomorrow}", "expires must be a UTC date"),
                       ("{key: a, groups: [\"a,b\"]}", "must not contain a comma"),
                       ("{key_env: VSR_TEST_UNSET_KEY}", "not set in the environment")):
        p = tmp_path / "c.yaml"
        p.write_text(config_yaml(free_port(), [model_yaml("m", ["127.0.0.1:9"])],
                                 listener_extra=f"    api_keys:\n      - {entry}\n"))
        r = subprocess.run([VSR_BIN, "config", "validate", str(p)], capture_output=True, text=True, timeout=60)
        assert r.returncode != 0, entry
        assert why in r.stdout + r.stderr, (entry, r.stdout + r.stderr)


# ---- keys in the store, managed through the management API ----

def stored(vsr, fakellm):
    from test_management_roles import AUTH, ENV
    from test_management_security import Api, doc
    b = fakellm("a")
    port, mport = free_port(), free_port()
    v = vsr(doc(port, mport, b, listener_extra="    api_keys: [plain-key]", mgmt_extra=AUTH), port=port,
            workers=2, env=ENV)
    v.viewer, v.operator = Api(mport, ENV["VSR_T_VIEWER"]), Api(mport, ENV["VSR_T_OPERATOR"])
    v.none = Api(mport)
    return v


def test_stored_key_create_list_use_rotate_revoke(vsr, fakellm):
    v = stored(vsr, fakellm)
    r = v.operator.post("/api/v1/keys", json={"user": "erin", "groups": ["premium", "staff"], "name": "erin-ci"})
    assert r.status_code == 201, r.text
    made = r.json()
    key, kid = made["key"], made["id"]
    assert key.startswith("sk-vsr-") and len(key) == 71 and len(kid) == 16
    assert made["user"] == "erin" and made["groups"] == "premium,staff" and made["name"] == "erin-ci"
    assert r.headers["cache-control"] == "no-store"
    # listed without the secret (nor its digest)
    listing = v.viewer.get("/api/v1/keys")
    assert listing.status_code == 200
    assert [k["id"] for k in listing.json()["data"]] == [kid]
    assert key not in listing.text and key[7:] not in listing.text
    assert hashlib.sha256(key.encode()).hexdigest() not in listing.text
    # the listener accepts it, with its identity
    r = post(v, key)
    assert r.status_code == 200, r.text
    h = echo(r)["headers"]
    assert h["x-authz-user-id"] == "erin" and h["x-authz-user-groups"] == "premium,staff"
    assert post(v, "plain-key").status_code == 200
    # rotate: a new secret, the old one stops working
    r = v.operator.post("/api/v1/keys/rotate", json={"id": kid})
    assert r.status_code == 200, r.text
    key2 = r.json()["key"]
    assert key2 != key and r.json()["id"] == kid
    assert post(v, key2).status_code == 200
    wrong = post(v, "sk-vsr-" + "0" * 64)
    old = post(v, key)
    assert old.status_code == wrong.status_code == 401
    assert old.json() == wrong.json()
    # revoke: the same 401 as a wrong key, and gone from the list
    assert v.operator.post("/api/v1/keys/revoke", json={"id": kid}).status_code == 200
    r = post(v, key2)
    assert r.status_code == 401 and r.json() == wrong.json()
    assert v.viewer.get("/api/v1/keys").json()["data"] == []
    assert v.operator.post("/api/v1/keys/revoke", json={"id": kid}).status_code == 404
    assert v.operator.post("/api/v1/keys/rotate", json={"id": "nope"}).status_code == 404


def test_stored_keys_need_the_management_roles(vsr, fakellm):
    v = stored(vsr, fakellm)
    r = v.none.post("/api/v1/keys", json={"user": "x"})
    assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_management_token"
    assert v.none.get("/api/v1/keys").status_code == 401
    r = v.viewer.post("/api/v1/keys", json={"user": "x"})
    assert r.status_code == 403 and "config.write" in r.json()["error"]["message"]
    kid = v.operator.post("/api/v1/keys", json={"user": "x"}).json()["id"]
    assert v.viewer.post("/api/v1/keys/revoke", json={"id": kid}).status_code == 403
    assert v.viewer.post("/api/v1/keys/rotate", json={"id": kid}).status_code == 403
    assert len(v.viewer.get("/api/v1/keys").json()["data"]) == 1
    # malformed requests
    assert v.operator.post("/api/v1/keys", json={"groups": "premium"}).status_code == 400
    assert v.operator.post("/api/v1/keys", json={"user": "a,b"}).status_code == 400
    assert v.operator.post("/api/v1/keys", content=b"{").status_code == 400
