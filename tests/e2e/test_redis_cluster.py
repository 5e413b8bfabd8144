"""Redis Cluster behind every Redis-backed store, end to end: a three-node
cluster (redis-server --cluster-enabled yes on free loopback ports, joined by
redis-cli --cluster create with no replicas, stopped at teardown); vsr is
given one node's address in cluster_addresses and finds the others.  The
response cache stores on and replays from every node, and a node killed
leaves requests served (its keys are misses, counted as errors; the others
still hit); the Responses API store is shared by two replicas; router_replay
keeps its records in one slot.  Slot migration (ASK, MOVED) is tested in
tests/unit/test_store.c."""
import subprocess
import time

import pytest

from conftest import free_port, require, wait_until
from test_response_cache import ask, cache_metric, start, upstream_calls


def cli(port, *args):
    return subprocess.run(["redis-cli", "-p", str(port), *args], capture_output=True, text=True,
                          timeout=20).stdout.strip()


@pytest.fixture
def cluster(tmp_path):
    require(commands=["redis-server", "redis-cli"], what="redis-server and redis-cli")
    ports = [free_port() for _ in range(3)]
    procs = []
    for i, port in enumerate(ports):
        procs.append(subprocess.Popen(
            ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--cluster-enabled", "yes",
             "--cluster-port", str(free_port()), "--cluster-config-file", f"nodes-{i}.conf",
             "--cluster-node-timeout", "1000", "--cluster-require-full-coverage", "no",
             "--save", "", "--appendonly", "no", "--dir", str(tmp_path)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    try:
        for port in ports:
            wait_until(lambda: cli(port, "ping") == "PONG", what="a cluster node")
        out = subprocess.run(["redis-cli", "--cluster", "create", *[f"127.0.0.1:{p}" for p in ports],
                              "--cluster-replicas", "0", "--cluster-yes"], capture_output=True, text=True,
                             timeout=60)
        assert out.returncode == 0, out.stdout + out.stderr
        wait_until(lambda: all("cluster_state:ok" in cli(p, "cluster", "info") for p in ports),
                   what="the cluster")
        yield type("Cluster", (), {"ports": ports, "procs": procs})
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(timeout=10)


def cluster_store(port):
    return ("      backend_type: redis\n"
            f"      redis: {{cluster_mode: true, cluster_addresses: [\"127.0.0.1:{port}\"], key_prefix: \"c:\"}}\n")


def holder(cluster, raw):
    slot = cli(cluster.ports[0], "cluster", "keyslot", raw)
    for i, p in enumerate(cluster.ports):
        if cluster.procs[i].poll() is None and raw in cli(p, "cluster", "getkeysinslot", slot, "1000").split():
            return i
    return -1


def stored_keys(cluster, i):
    return [k for k in cli(cluster.ports[i], "keys", "c:k:*").split() if k]


def test_cache_on_a_cluster_hits_and_survives_a_dead_node(vsr, fakellm, cluster):
    v = start(vsr, fakellm, store=cluster_store(cluster.ports[0]))
    questions = [f"cacheme: question {i}" for i in range(24)]
    for n, q in enumerate(questions, 1):
        r = ask(v, q)
        assert r.status_code == 200 and r.headers["x-vsr-cache-hit"] == "false"
        wait_until(lambda: cache_metric(v, "store", "stored") == n, what="the store's put")
    on = [stored_keys(cluster, i) for i in range(3)]
    assert all(on), on   # answers on every node
    assert sum(len(k) for k in on) == len(questions)
    for q in questions:
        assert ask(v, q).headers["x-vsr-cache-hit"] == "true"
    assert upstream_calls(v) == len(questions)

    cluster.procs[2].kill()
    cluster.procs[2].wait(timeout=10)
    errors = cache_metric(v, "lookup", "error")
    hits = misses = 0
    t0 = time.monotonic()
    for q in questions:
        r = ask(v, q)
        assert r.status_code == 200
        if r.headers["x-vsr-cache-hit"] == "true":
            hits += 1
        else:
            misses += 1
    assert time.monotonic() - t0 < 20
    assert hits == len(on[0]) + len(on[1])   # the live nodes still answer
    assert misses == len(on[2])              # the dead node's keys are misses, not failed requests
    assert cache_metric(v, "lookup", "error") >= errors + len(on[2])


def test_responses_api_on_a_cluster_shared_by_replicas(vsr, fakellm, cluster):
    from test_responses_api import start as start_responses
    extra = ("      store_backend: redis\n"
             f"      redis: {{cluster_mode: true, cluster_addresses: [\"127.0.0.1:{cluster.ports[1]}\"]}}\n")
    a, b = start_responses(vsr, fakellm, extra), start_responses(vsr, fakellm, extra)
    ids = []
    with a.client() as c:
        for i in range(6):
            r = c.post("/v1/responses", json={"model": "m1", "input": f"kept in the cluster {i}"})
            assert r.status_code == 200, r.text
            ids.append(r.json()["id"])

    def seen():
        with b.client() as c:
            return all(c.get(f"/v1/responses/{i}").status_code == 200 for i in ids)
    wait_until(seen, what="the other replica reading them")
    with b.client() as c:
        r = c.post("/v1/responses", json={"model": "m1", "input": "and then", "previous_response_id": ids[0]})
        assert r.status_code == 200, r.text
        assert c.delete(f"/v1/responses/{ids[1]}").status_code == 200

    def gone():
        with a.client() as c:
            return c.get(f"/v1/responses/{ids[1]}").status_code == 404
    wait_until(gone, what="the delete seen")


def test_router_replay_on_a_cluster(vsr, fakellm, cluster):
    import test_router_replay as rr
    service = ("      store_backend: redis\n"
               f"      redis: {{cluster_mode: true, cluster_addresses: [\"127.0.0.1:{cluster.ports[2]}\"]}}\n")
    a = rr.start(vsr, fakellm, service=service)
    b = rr.start(vsr, fakellm, service=service)
    ids = [rr.ask(a, f"replayme on a cluster {i}").headers["x-vsr-replay-id"] for i in range(3)]
    wait_until(lambda: rr.replay_metric(a, "redis", "written") == 3, what="the writer's puts")
    assert [s["id"] for s in rr.listing(b)["data"]] == ids[::-1]
    assert rr.record(b, ids[0]).status_code == 200
    # one slot: every key of the store on one node, under the hash-tagged prefix
    holders = {holder(cluster, raw) for raw in ("{vsr:replay:}index", "{vsr:replay:}r:" + ids[0])}
    assert len(holders) == 1 and -1 not in holders
