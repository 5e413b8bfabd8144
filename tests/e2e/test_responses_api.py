"""The Responses API (global.services.response_api): POST /v1/responses
translated to chat for the backend and back, kept under its id (memory, or a
real redis-server started here), previous_response_id, GET / DELETE
/v1/responses/{id}, input_items; the official openai SDK as the client."""
import json
import os
import subprocess

import httpx
import pytest

from conftest import MODEL_CACHE, ROOT, config_yaml, free_port, model_yaml, require, wait_until
from test_response_cache import redis  # noqa: F401  (the redis-server fixture)

SDK_DIR = MODEL_CACHE / "sdk"
SDK_CLIENT = ROOT / "tests" / "tools" / "sdk_client.js"


def start(vsr, fakellm, extra="", listener_extra=""):
    be = fakellm("a")
    port = free_port()
    v = vsr(config_yaml(port, [model_yaml("m1", [be.endpoint], "m1-up")], default="m1",
                        listener_extra=listener_extra,
                        global_extra="    response_api:\n      enabled: true\n" + extra), port=port)
    v.be = be
    return v


def last_call(v):
    return httpx.get(v.be.url + "/_fakellm/log", timeout=5).json()["entries"][-1]


def test_create_retrieve_continue_delete(vsr, fakellm):
    v = start(vsr, fakellm)
    with v.client() as c:
        r = c.post("/v1/responses", json={"model": "m1", "input": "hello there", "instructions": "Be nice."})
        assert r.status_code == 200, r.text
        first = r.json()
        assert first["object"] == "response" and first["status"] == "completed" and first["id"].startswith("resp_")
        assert first["output"][0]["content"][0]["text"] == "Hello from a"
        assert first["usage"]["output_tokens"] == 3
        call = last_call(v)
        assert call["path"] == "/v1/chat/completions" and call["model"] == "m1-up"
        assert call["body"]["system"] == "Be nice." and call["body"]["last_user"] == "hello there"
        # another worker answers as well: the memory store is the process's
        for _ in range(4):
            g = c.get(f"/v1/responses/{first['id']}")
            assert g.status_code == 200 and g.json() == first
        items = c.get(f"/v1/responses/{first['id']}/input_items").json()
        assert items["object"] == "list" and items["data"][0]["content"][0]["text"] == "hello there"
        # continued: the stored turns come first (instructions are not inherited)
        r2 = c.post("/v1/responses", json={"model": "m1", "input": "and then?", "previous_response_id": first["id"]})
        assert r2.status_code == 200 and r2.json()["previous_response_id"] == first["id"]
        assert last_call(v)["body"]["n_messages"] == 3 and last_call(v)["body"]["system"] is None
        d = c.delete(f"/v1/responses/{first['id']}")
        assert d.json() == {"id": first["id"], "object": "response", "deleted": True}
        assert c.get(f"/v1/responses/{first['id']}").status_code == 404
        assert c.delete(f"/v1/responses/{first['id']}").status_code == 404
        r3 = c.post("/v1/responses", json={"model": "m1", "input": "x", "previous_response_id": first["id"]})
        assert r3.status_code == 400 and r3.json()["error"]["param"] == "previous_response_id"


def test_store_false_is_not_kept_and_errors(vsr, fakellm):
    v = start(vsr, fakellm)
    with v.client() as c:
        r = c.post("/v1/responses", json={"model": "m1", "input": "x", "store": False})
        assert r.status_code == 200
        assert c.get(f"/v1/responses/{r.json()['id']}").status_code == 404
        r = c.post("/v1/responses", json={"model": "m1", "input": "x", "tools": [{"type": "web_search"}]})
        assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error"
        r = c.post("/v1/responses", json={"model": "m1", "input": "x"}, headers={"x-fakellm-status": "429"})
        assert r.status_code == 429 and "error" in r.json()
        assert c.get("/v1/responses/not-a-thing").status_code == 404
        assert c.put("/v1/responses/resp_x").status_code == 405


def test_stream_is_kept(vsr, fakellm):
    v = start(vsr, fakellm)
    with v.client() as c, c.stream("POST", "/v1/responses", json={"model": "m1", "input": "hi", "stream": True}) as r:
        text = r.read().decode()
    events = [json.loads(l[6:]) for l in text.split("\n") if l.startswith("data: ")]
    assert events[0]["type"] == "response.created" and events[-1]["type"] == "response.completed"
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    final = events[-1]["response"]
    with v.client() as c:
        assert c.get(f"/v1/responses/{final['id']}").json()["output"] == final["output"]


def test_redis_store_shared_by_replicas(vsr, fakellm, redis):  # noqa: F811
    extra = f"      store_backend: redis\n      redis: {{address: \"127.0.0.1:{redis.port}\"}}\n"
    a, b = start(vsr, fakellm, extra), start(vsr, fakellm, extra)
    with a.client() as c:
        first = c.post("/v1/responses", json={"model": "m1", "input": "kept in redis"}).json()
    def seen():
        with b.client() as c:
            return c.get(f"/v1/responses/{first['id']}").status_code == 200
    wait_until(seen, what="the other replica reading it")


def test_openai_sdk_responses(vsr, fakellm):
    require([SDK_DIR / "node_modules" / "openai"], ["node"], what="client SDKs")
    v = start(vsr, fakellm)
    def sdk(cmd):
        out = subprocess.run(["node", str(SDK_CLIENT), json.dumps(cmd)], capture_output=True, text=True, timeout=60,
                             env=dict(os.environ, VSR_SDK_DIR=str(SDK_DIR)))
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout.strip().splitlines()[-1])
    out = sdk({"sdk": "openai", "base": v.url + "/v1", "op": "responses", "params": {"model": "m1", "input": "hi"}})
    assert "error" not in out, out
    assert out["first"]["output_text"] if "output_text" in out["first"] else True
    assert out["got"]["id"] == out["first"]["id"]
    assert out["next"]["previous_response_id"] == out["first"]["id"]
    assert out["items"][0]["content"][0]["text"] == "hi"
    assert out["after_delete_status"] == 404
    out = sdk({"sdk": "openai", "base": v.url + "/v1", "op": "responses_stream",
               "params": {"model": "m1", "input": "stream please"}})
    assert "error" not in out, out
    assert out["types"][0] == "response.created" and out["types"][-1] == "response.completed"
    assert out["text"] == "tok0 tok1 tok2 tok3 tok4 "
    assert out["got"]["id"] == out["final"]["id"]


KEY_A, KEY_B = "sk-owner-a-0123456789", "sk-owner-b-9876543210"


def cross_owner(v):
    """A stores a response; B, with another key of the same listener, can
    neither read it, nor its input items, nor continue it, nor delete it, and
    every answer B gets is the one a missing id gets.  A still can."""
    a = {"authorization": f"Bearer {KEY_A}"}
    b = {"authorization": f"Bearer {KEY_B}"}
    with v.client() as c:
        r = c.post("/v1/responses", headers=a, json={"model": "m1", "input": "a secret of A's"})
        assert r.status_code == 200, r.text
        rid = r.json()["id"]
        missing = "resp_" + "0" * 32
        def same_as_missing(got, want):
            assert got.status_code == want.status_code, got.text
            assert got.text.replace(rid, "ID") == want.text.replace(missing, "ID")
        same_as_missing(c.get(f"/v1/responses/{rid}", headers=b), c.get(f"/v1/responses/{missing}", headers=b))
        same_as_missing(c.get(f"/v1/responses/{rid}/input_items", headers=b),
                        c.get(f"/v1/responses/{missing}/input_items", headers=b))
        calls = len(httpx.get(v.be.url + "/_fakellm/log", timeout=5).json()["entries"])
        same_as_missing(c.post("/v1/responses", headers=b,
                               json={"model": "m1", "input": "go on", "previous_response_id": rid}),
                        c.post("/v1/responses", headers=b,
                               json={"model": "m1", "input": "go on", "previous_response_id": missing}))
        assert len(httpx.get(v.be.url + "/_fakellm/log", timeout=5).json()["entries"]) == calls  # nothing went on
        same_as_missing(c.delete(f"/v1/responses/{rid}", headers=b), c.delete(f"/v1/responses/{missing}", headers=b))
        # the same key in another field is the same owner
        assert c.get(f"/v1/responses/{rid}", headers={"api-key": KEY_A}).status_code == 200
        items = c.get(f"/v1/responses/{rid}/input_items", headers=a).json()
        assert items["data"][0]["content"][0]["text"] == "a secret of A's"
        r2 = c.post("/v1/responses", headers=a, json={"model": "m1", "input": "go on", "previous_response_id": rid})
        assert r2.status_code == 200 and last_call(v)["body"]["n_messages"] == 3
        # B's own responses are B's
        rb = c.post("/v1/responses", headers=b, json={"model": "m1", "input": "B's"}).json()["id"]
        assert c.get(f"/v1/responses/{rb}", headers=b).status_code == 200
        assert c.get(f"/v1/responses/{rb}", headers=a).status_code == 404
        assert c.delete(f"/v1/responses/{rid}", headers=a).json()["deleted"] is True
        assert c.get(f"/v1/responses/{rid}", headers=a).status_code == 404
    return rid, rb


def test_responses_belong_to_their_key(vsr, fakellm):
    v = start(vsr, fakellm, listener_extra=f"    api_keys: [{KEY_A}, {KEY_B}]")
    cross_owner(v)


def test_responses_belong_to_their_key_in_redis(vsr, fakellm, redis):  # noqa: F811
    extra = f"      store_backend: redis\n      redis: {{address: \"127.0.0.1:{redis.port}\"}}\n"
    v = start(vsr, fakellm, extra, listener_extra=f"    api_keys: [{KEY_A}, {KEY_B}]")
    _, rb = cross_owner(v)
    # what redis holds names the owner by a digest, never by the key
    def cli(*args):
        out = subprocess.run(["redis-cli", "-p", str(redis.port), "--no-raw", *args], capture_output=True,
                             text=True, timeout=10)
        assert out.returncode == 0, out.stderr
        return out.stdout
    keys = [k for k in cli("--scan").split("\n") if rb in k]
    assert len(keys) == 1, cli("--scan")
    held = keys[0] + cli("GET", keys[0].strip().strip('"'))
    assert "B's" in held and KEY_B not in held and KEY_A not in held
    assert "sk-owner" not in cli("--scan")


def test_listener_without_keys_shares_one_owner(vsr, fakellm):
    v = start(vsr, fakellm)
    with v.client() as c:
        rid = c.post("/v1/responses", json={"model": "m1", "input": "shared"}).json()["id"]
        # a key no listener checks is no owner: the listener's clients share what they keep
        assert c.get(f"/v1/responses/{rid}", headers={"authorization": "Bearer anything"}).status_code == 200
