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
