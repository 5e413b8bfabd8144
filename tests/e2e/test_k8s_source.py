"""global.router.config_source: kubernetes against a stand-in API server
(k8sapi.py): the file is the base, the namespace's IntelligentPool and
IntelligentRoute complete it; each new generation becomes a configuration
version (or is NACKed while the active one keeps serving), the outcome is
patched into the resources' status, and the list/watch survives a dropped
watch and a 410 Gone."""
import time

import httpx
import pytest

from conftest import SANITIZER_MARKS, VSR_BIN, Proc, free_port, wait_until
from k8sapi import Server

POOLS, ROUTES = "intelligentpools", "intelligentroutes"


def base_doc(port, mport, a, b, max_doc=None):
    limit = f"\n      max_document_bytes: {max_doc}" if max_doc else ""
    return f"""version: v0.3
listeners:
  - name: main
    address: 127.0.0.1
    port: {port}
providers:
  defaults:
    model: m1
  models:
    - name: m1
      backend_refs: [{{name: a, endpoint: {a.endpoint}}}]
    - name: m2
      backend_refs: [{{name: b, endpoint: {b.endpoint}}}]
routing:
  decisions:
    - name: from-file
      modelRefs: [{{model: m1}}]
global:
  router:
    config_source: kubernetes
  services:
    management_api:
      port: {mport}{limit}
"""


POOL = {"defaultModel": "m1", "models": [{"name": "m1"}, {"name": "m2", "loras": [{"name": "fix"}]}]}


def route(tag, model="m2"):
    return {
        "signals": {"keywords": [{"name": "urgent", "operator": "OR", "keywords": ["urgent"],
                                  "caseSensitive": False}]},
        "decisions": [{
            "name": "urgent-route", "priority": 10,
            "signals": {"operator": "AND", "conditions": [{"type": "keyword", "name": "urgent"}]},
            "modelRefs": [{"model": model, "loraName": "fix"} if model == "m2" else {"model": model}],
            "plugins": [{"type": "header_mutation", "configuration": {"add": [{"name": "x-doc", "value": tag}]}}],
        }],
    }


@pytest.fixture
def api(tmp_path):
    s = Server(tmp_path)
    yield s
    s.close()


def start_vsr(tmp_path, api, fakellm, **kw):
    a, b = fakellm("a"), fakellm("b")
    port, mport, metrics = free_port(), free_port(), free_port()
    path = tmp_path / "config.yaml"
    path.write_text(base_doc(port, mport, a, b, **kw))
    proc = Proc([VSR_BIN, "serve", "--config", str(path), "--workers", "1",
                 "--metrics-listen", f"127.0.0.1:{metrics}"], tmp_path, "vsr", env=api.env())

    def ready():
        assert proc.p.poll() is None, proc.output()
        try:
            return httpx.get(f"http://127.0.0.1:{port}/ready", timeout=1).status_code == 200
        except httpx.TransportError:
            return False
    wait_until(ready, what="vsr /ready")
    return proc, port


def served(port):
    """(backend name, x-doc the backend saw, configuration version)"""
    r = httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions", timeout=30,
                   json={"model": "auto", "messages": [{"role": "user", "content": "urgent: help"}]})
    assert r.status_code == 200, r.text
    fl = r.json()["fakellm"]
    return fl["backend"], fl["request"]["headers"].get("x-doc"), int(r.headers["x-vsr-config-version"])


def ready_condition(api, plural, name):
    st = api.state.status(plural, name) or {}
    for c in st.get("conditions", []):
        if c["type"] == "Ready":
            return st.get("observedGeneration"), c["status"], c["reason"], c["message"]
    return None


def wait_status(api, gen, status, what):
    def seen():
        r = ready_condition(api, ROUTES, "main")
        p = ready_condition(api, POOLS, "pool")
        return r is not None and r[0] == gen and r[1] == status and p is not None and p[1] == status
    wait_until(seen, timeout=20, what=what)
    return ready_condition(api, ROUTES, "main")


def test_kubernetes_source_list_watch_ack_nack_resume(tmp_path, api, fakellm):
    st = api.state
    st.put(POOLS, "pool", POOL)
    st.put(ROUTES, "main", route("gen1"))
    other = {"type": "Accepted", "status": "True", "reason": "ByAnotherController", "message": "",
             "lastTransitionTime": "2026-01-01T00:00:00Z"}
    with st.cv:
        st.objects[ROUTES]["main"]["status"] = {"conditions": [other]}
    proc, port = start_vsr(tmp_path, api, fakellm)
    try:
        # initial load: the resources' decision serves, ACK in both statuses
        wait_status(api, 1, "True", "generation 1 ACKed")
        assert ready_condition(api, ROUTES, "main")[2] == "Ready"
        assert other in st.status(ROUTES, "main")["conditions"]  # another writer's condition is kept
        name, tag, v1 = served(port)
        assert (name, tag) == ("b", "gen1")
        rs = st.status(ROUTES, "main")
        assert rs["statistics"] == {"decisions": 1, "keywords": 1, "embeddings": 0, "domains": 0}
        assert st.status(POOLS, "pool")["modelCount"] == 2
        assert all(ct == "application/merge-patch+json" for _, _, ct, _ in st.patches)
        assert st.unauthorized == 0

        # a new generation, live
        st.put(ROUTES, "main", route("gen2"))
        wait_status(api, 2, "True", "generation 2 ACKed")
        name, tag, v2 = served(port)
        assert (name, tag) == ("b", "gen2") and v2 == v1 + 1

        # a bad generation: NACK in the status, the old version keeps serving
        st.put(ROUTES, "main", route("gen3", model="nope"))
        gen, status, reason, msg = wait_status(api, 3, "False", "generation 3 NACKed")
        assert reason == "ValidationFailed" and "nope" in msg, msg
        assert served(port) == ("b", "gen2", v2)

        # the watch drops: it is resumed from its resourceVersion, no relist
        lists, watches = dict(st.lists), dict(st.watches)
        st.drop_watches()
        st.put(ROUTES, "main", route("gen4"))
        wait_status(api, 4, "True", "generation 4 ACKed after the watch dropped")
        assert served(port)[:2] == ("b", "gen4")
        assert st.watches[ROUTES] > watches[ROUTES]
        assert st.lists == lists

        # 410 Gone (an ERROR event, then the response status): relisted
        for gen, as_status in ((5, False), (6, True)):
            lists = dict(st.lists)
            st.compact(as_status=as_status)
            st.put(ROUTES, "main", route(f"gen{gen}"))
            wait_status(api, gen, "True", f"generation {gen} ACKed after 410 Gone")
            assert served(port)[:2] == ("b", f"gen{gen}")
            assert st.lists[ROUTES] > lists[ROUTES]

        # a pool's new generation applies too (the default model moves)
        st.put(POOLS, "pool", dict(POOL, defaultModel="m2"))
        wait_until(lambda: (ready_condition(api, POOLS, "pool") or (0,))[0] == 2, timeout=20, what="pool gen 2")
        assert ready_condition(api, POOLS, "pool")[1] == "True"

        # two routes are a conflict, reported in both
        st.put(ROUTES, "other", route("x"))
        wait_until(lambda: (ready_condition(api, ROUTES, "other") or (0, 0, ""))[2] == "Conflict", timeout=20,
                   what="conflict reported")
        assert ready_condition(api, ROUTES, "main")[2] == "Conflict"
        assert served(port)[:2] == ("b", "gen6")
        patches = len(st.patches)
        st.put(POOLS, "pool", dict(POOL, defaultModel="m1"))  # an event meanwhile: the conflict is not re-reported
        time.sleep(1.5)
        assert len(st.patches) == patches
        st.delete(ROUTES, "other")
        wait_until(lambda: ready_condition(api, ROUTES, "main")[1:3] == ("True", "Ready"), timeout=20,
                   what="the conflict resolved")
        assert ready_condition(api, POOLS, "pool")[:2] == (3, "True")
    finally:
        proc.stop()
    proc.assert_clean_exit()


@pytest.mark.parametrize("missing,says", [("host", "KUBERNETES_SERVICE_HOST is not set"),
                                           ("namespace", "no valid namespace in"),
                                           ("ca.crt", "cannot load the cluster's CA from")])
def test_kubernetes_source_needs_the_api_server(tmp_path, fakellm, missing, says):
    """Without the API server's address, the namespace or the CA vsr says
    which and does not start."""
    a, b = fakellm("a"), fakellm("b")
    path = tmp_path / "config.yaml"
    path.write_text(base_doc(free_port(), free_port(), a, b))
    sa = tmp_path / "sa"
    sa.mkdir()
    for f in ("token", "namespace", "ca.crt"):
        if f != missing:
            (sa / f).write_text("router\n" if f == "namespace" else "x")
    env = {"KUBERNETES_SERVICE_HOST": "" if missing == "host" else "127.0.0.1", "KUBERNETES_SERVICE_PORT": "1",
           "VSR_K8S_SERVICEACCOUNT_DIR": str(sa)}
    proc = Proc([VSR_BIN, "serve", "--config", str(path), "--workers", "1",
                 "--metrics-listen", f"127.0.0.1:{free_port()}"], tmp_path, "vsr", env=env)
    proc.p.wait(30)
    assert proc.p.returncode != 0
    out = proc.output()
    assert says in out, out
    assert not [m for m in SANITIZER_MARKS if m in out], out
    proc.log.close()


def test_kubernetes_source_verifies_the_api_server(tmp_path, api, fakellm):
    """A CA that did not sign the server's certificate: nothing is read."""
    other = tmp_path / "other"
    other.mkdir()
    from k8sapi import make_pki
    ca, _, _ = make_pki(other)
    (api.sa_dir / "ca.crt").write_bytes(ca.read_bytes())
    api.state.put(POOLS, "pool", POOL)
    api.state.put(ROUTES, "main", route("gen1"))
    proc, port = start_vsr(tmp_path, api, fakellm)
    try:
        wait_until(lambda: "TLS with the API server" in proc.output(), timeout=20, what="TLS failure logged")
        assert api.state.lists[ROUTES] == 0 and api.state.patches == []
        assert served(port)[:2] == ("a", None)  # the file's own decision
    finally:
        proc.stop()
    proc.assert_clean_exit()


def test_kubernetes_source_bounds_what_it_reads(tmp_path, api, fakellm):
    """A watch event or a list larger than management_api.max_document_bytes
    is refused (the active version keeps serving); once the resource is small
    again it is read and applied."""
    st = api.state
    st.put(POOLS, "pool", POOL)
    st.put(ROUTES, "main", route("gen1"))
    proc, port = start_vsr(tmp_path, api, fakellm, max_doc=8192)
    try:
        wait_status(api, 1, "True", "generation 1 ACKed")
        big = route("gen2")
        big["decisions"][0]["description"] = "x" * 20000
        st.put(ROUTES, "main", big)
        wait_until(lambda: "a IntelligentRoute watch event is larger than 8192 bytes" in proc.output(), timeout=20,
                   what="the large event refused")
        wait_until(lambda: "the IntelligentRoute list is larger than 8192 bytes" in proc.output(), timeout=20,
                   what="the large list refused")
        assert served(port)[:2] == ("b", "gen1")
        assert ready_condition(api, ROUTES, "main")[0] == 1
        st.put(ROUTES, "main", route("gen3"))
        wait_status(api, 3, "True", "generation 3 ACKed once it is small again")
        assert served(port)[:2] == ("b", "gen3")
    finally:
        proc.stop()
    proc.assert_clean_exit()


def test_base_without_provider_models_takes_the_pools(tmp_path, api, fakellm):
    # the reference's own base (pkg/k8s/testdata/base-config.yaml) names no provider models: the pool's
    # become providers.models (without backends: Envoy routes them in extproc mode)
    st = api.state
    st.put(POOLS, "pool", POOL)
    st.put(ROUTES, "main", route("gen1", model="m1"))
    port, mport = free_port(), free_port()
    path = tmp_path / "config.yaml"
    path.write_text(f"""version: v0.3
listeners: [{{name: main, address: 127.0.0.1, port: {port}}}]
providers:
  defaults: {{reasoning_effort: high}}
routing:
  signals: {{}}
global:
  router: {{config_source: kubernetes}}
  services: {{management_api: {{port: {mport}}}}}
""")
    proc = Proc([VSR_BIN, "serve", "--config", str(path), "--workers", "1"], tmp_path, "vsr", env=api.env())
    try:
        wait_status(api, 1, "True", "generation 1 ACKed")
        r = httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions", timeout=30,
                       json={"model": "auto", "messages": [{"role": "user", "content": "urgent: help"}]})
        assert r.status_code == 503, r.text             # m1 has no backend of its own
        assert r.headers["x-vsr-config-version"] == "2"   # the resources' document
        assert "m1" in r.text, r.text
    finally:
        proc.stop()
