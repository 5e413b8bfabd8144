"""The router_replay plugin (ref §2, §4.3, §4.5) end to end: the
x-vsr-replay-id header, records listed and fetched through the management
API, bodies cut at max_body_bytes, a streamed answer captured as sent (and a
cut one recorded as cut), max_records eviction, TTL, two replicas sharing a
real redis-server or PostgreSQL server (each started here on a free loopback
port), the shared store down (the request still succeeds; the failure is
counted; writes resume when it is back), PostgreSQL's table, and the public
listener's 404 for /v1/router_replay."""
import glob
import json
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time

import httpx
import pytest

from conftest import config_yaml, free_port, model_yaml, require, sse_events, wait_until

ID_RE = re.compile(r"^rr_[0-9a-f]{32}$")


def routing(plugin="", fast=False):
    return f"""
routing:
  signals:
    keywords:
      - {{name: replay_kw, operator: OR, keywords: ["replayme"]}}
      - {{name: fast_kw, operator: OR, keywords: ["fastme"]}}
  decisions:
    - name: fast_route
      priority: 20
      rules: {{operator: AND, conditions: [{{type: keyword, name: fast_kw}}]}}
      modelRefs: [{{model: m1}}]
      plugins:
        - type: router_replay
          configuration: {{enabled: true{plugin}}}
        - type: fast_response
          configuration: {{message: "answered by the router"}}
    - name: replay_route
      priority: 10
      rules: {{operator: AND, conditions: [{{type: keyword, name: replay_kw}}]}}
      modelRefs: [{{model: m1}}]
      plugins:
        - type: router_replay
          configuration: {{enabled: true{plugin}}}
"""


def start(vsr, fakellm, plugin="", service="", be=None):
    be = be or fakellm("a")
    port = free_port()
    cfg = config_yaml(port, [model_yaml("m1", [be.endpoint])], default="m1")
    cfg = cfg.replace("\nglobal:", routing(plugin) + "global:", 1)
    if service:
        cfg += "    router_replay:\n" + service
    v = vsr(cfg, port=port)
    v.be = be
    v.mgmt = "http://127.0.0.1:" + re.search(r"management_api:\n\s+port: (\d+)", cfg).group(1)
    return v


def ask(v, text, stream=False, headers=None):
    body = {"model": "auto", "messages": [{"role": "user", "content": text}]}
    if stream:
        body["stream"] = True
    with v.client() as c:
        return c.post("/v1/chat/completions", json=body, headers=headers or {})


def listing(v, **params):
    r = httpx.get(v.mgmt + "/api/v1/router_replay", params=params, timeout=10)
    assert r.status_code == 200, r.text
    return r.json()


def record(v, rid):
    return httpx.get(v.mgmt + "/api/v1/router_replay/" + rid, timeout=10)


def replay_metric(v, backend, result):
    text = httpx.get(v.metrics_url, timeout=5).text
    for line in text.splitlines():
        if (line.startswith("vsr_router_replay_records_total{") and f'backend="{backend}"' in line
                and f'result="{result}"' in line):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_record_of_an_upstream_answer(vsr, fakellm):
    v = start(vsr, fakellm)
    r = ask(v, "replayme: what is two plus two?", headers={"x-request-id": "req-42"})
    assert r.status_code == 200
    rid = r.headers["x-vsr-replay-id"]
    assert ID_RE.match(rid)
    # a request no replay plugin covers gets no header and no record
    plain = ask(v, "plain question")
    assert plain.status_code == 200 and "x-vsr-replay-id" not in plain.headers
    lst = listing(v)
    assert lst["object"] == "list" and lst["total"] == 1 and lst["backend"] == "memory"
    s = lst["data"][0]
    assert s["id"] == rid and "request" not in s and "response" not in s   # a summary: no bodies
    rec = record(v, rid)
    assert rec.status_code == 200
    rec = rec.json()
    assert rec["id"] == rid and rec["request_id"] == "req-42"
    assert rec["method"] == "POST" and rec["path"] == "/v1/chat/completions" and rec["model"] == "auto"
    assert rec["decision"] == "replay_route" and rec["selected_model"] == "m1" and rec["algorithm"] == "static"
    assert {"family": "keywords", "name": "replay_kw"}.items() <= rec["signals"][0].items() or \
        any(sg["name"] == "replay_kw" for sg in rec["signals"])
    assert rec["response_path"] == "upstream" and rec["status"] == 200
    assert rec["streamed"] is False and rec["cut"] is False and rec["completed"] is True
    assert rec["latency_ms"] >= 0
    assert json.loads(rec["request"]["body"])["messages"][0]["content"] == "replayme: what is two plus two?"
    assert rec["request"]["truncated"] is False
    assert json.loads(rec["response"]["body"]) == r.json()   # the bytes the client got
    assert rec["response"]["bytes"] == len(r.content)
    assert replay_metric(v, "memory", "written") == 1
    # unknown ids are 404; DELETE removes
    miss = record(v, "rr_" + "0" * 32)
    assert miss.status_code == 404 and miss.json()["error"]["code"] == "not_found"
    d = httpx.delete(v.mgmt + "/api/v1/router_replay/" + rid, timeout=10)
    assert d.status_code == 200 and d.json()["deleted"] is True
    assert record(v, rid).status_code == 404
    assert httpx.post(v.mgmt + "/api/v1/router_replay", timeout=10).status_code == 405
    assert httpx.get(v.mgmt + "/api/v1/router_replay", params={"limit": "0"}, timeout=10).status_code == 400
    assert httpx.get(v.mgmt + "/api/v1/router_replay", params={"limit": "x"}, timeout=10).status_code == 400


def test_upstream_error_and_fast_response_are_recorded(vsr, fakellm):
    v = start(vsr, fakellm)
    r = ask(v, "replayme: fail please", headers={"x-fakellm-status": "503"})
    assert r.status_code == 503
    rid = r.headers["x-vsr-replay-id"]
    rec = record(v, rid).json()
    assert rec["status"] == 503 and rec["response_path"] == "upstream"
    assert rec["request_id"] == r.headers["x-request-id"] and len(rec["request_id"]) == 36   # the one vsr made
    f = ask(v, "fastme now")
    assert f.status_code == 200 and f.headers["x-vsr-response-path"] == "fast_response"
    frec = record(v, f.headers["x-vsr-replay-id"]).json()
    assert frec["response_path"] == "fast_response" and frec["decision"] == "fast_route"
    assert "answered by the router" in frec["response"]["body"]
    assert v.be.stats()["requests"] == 1   # fast_response never called the model
    ids = [s["id"] for s in listing(v)["data"]]
    assert ids == [f.headers["x-vsr-replay-id"], rid]   # newest first


def test_bodies_truncated_at_max_body_bytes(vsr, fakellm):
    v = start(vsr, fakellm, plugin=", max_body_bytes: 100")
    long_q = "replayme " + "x" * 5000
    r = ask(v, long_q, headers={"x-fakellm-text": "y" * 3000})
    assert r.status_code == 200 and len(r.content) > 3000
    rec = record(v, r.headers["x-vsr-replay-id"]).json()
    assert rec["request"]["truncated"] is True and len(rec["request"]["body"]) == 100
    assert rec["request"]["bytes"] > 5000
    assert rec["response"]["truncated"] is True and len(rec["response"]["body"]) == 100
    assert rec["response"]["bytes"] == len(r.content)
    assert r.content.decode().startswith(rec["response"]["body"])


def test_capture_switches(vsr, fakellm):
    v = start(vsr, fakellm, plugin=", capture_request_body: false, capture_response_body: false")
    r = ask(v, "replayme quietly")
    rec = record(v, r.headers["x-vsr-replay-id"]).json()
    assert "request" not in rec and "response" not in rec and rec["status"] == 200
    assert rec["completed"] is True and rec["cut"] is False   # the end is still seen


def test_streamed_answer_captured_as_sent(vsr, fakellm):
    v = start(vsr, fakellm)
    r = ask(v, "replayme: stream it", stream=True, headers={"x-fakellm-chunks": "5"})
    assert r.status_code == 200
    rec = record(v, r.headers["x-vsr-replay-id"]).json()
    assert rec["streamed"] is True and rec["cut"] is False
    assert rec["response"]["body"] == r.text
    assert sse_events(rec["response"]["body"])[-1] == "[DONE]"


def test_cut_stream_recorded_as_cut(vsr, fakellm):
    v = start(vsr, fakellm)
    rid = None
    with v.client() as c:
        body = {"model": "auto", "stream": True, "messages": [{"role": "user", "content": "replayme: cut"}]}
        with c.stream("POST", "/v1/chat/completions", json=body,
                      headers={"x-fakellm-chunks": "10", "x-fakellm-drop-after": "3"}) as r:
            rid = r.headers["x-vsr-replay-id"]
            try:
                for _ in r.iter_bytes():
                    pass
            except httpx.HTTPError:
                pass

    def cut():
        rr = record(v, rid)
        return rr.status_code == 200 and rr.json()["cut"] is True
    wait_until(cut, what="the cut stream's record")
    assert "[DONE]" not in record(v, rid).json()["response"]["body"]


def test_max_records_evicts_the_oldest(vsr, fakellm):
    v = start(vsr, fakellm, plugin=", max_records: 3")
    ids = [ask(v, f"replayme {i}").headers["x-vsr-replay-id"] for i in range(5)]
    lst = listing(v)
    assert lst["total"] == 3
    assert [s["id"] for s in lst["data"]] == ids[:1:-1]
    assert record(v, ids[0]).status_code == 404 and record(v, ids[4]).status_code == 200
    assert replay_metric(v, "memory", "evicted") == 2
    assert [s["id"] for s in listing(v, limit=2)["data"]] == [ids[4], ids[3]]


def test_ttl(vsr, fakellm):
    v = start(vsr, fakellm, service="      ttl_seconds: 1\n")
    rid = ask(v, "replayme soon gone").headers["x-vsr-replay-id"]
    assert record(v, rid).status_code == 200
    time.sleep(1.3)
    assert record(v, rid).status_code == 404
    assert listing(v)["total"] == 0


def test_service_disabled_records_nothing(vsr, fakellm):
    v = start(vsr, fakellm, service="      enabled: false\n")
    r = ask(v, "replayme not recorded")
    assert r.status_code == 200 and "x-vsr-replay-id" not in r.headers
    assert listing(v)["total"] == 0


def test_public_listener_does_not_serve_replay(vsr, fakellm):
    v = start(vsr, fakellm)
    rid = ask(v, "replayme").headers["x-vsr-replay-id"]
    with v.client() as c:
        for path in ("/v1/router_replay", "/v1/router_replay/" + rid, "/api/v1/router_replay"):
            r = c.get(path)
            if path.startswith("/v1/"):
                assert r.status_code == 404 and r.json()["error"]["message"] == "endpoint not found", path
            else:
                assert "x-vsr-replay-id" not in r.headers and "rr_" not in r.text, path


class RedisServer:
    """A redis-server of the test's own on a free loopback port; stop() and
    start() take it away and bring it back on the same port."""
    name = "redis"

    def __init__(self, tmp_path):
        require(commands=["redis-server"], what="redis-server")
        self.port = free_port()
        self.dir = tmp_path
        self.p = None
        self.start()

    def start(self):
        self.p = subprocess.Popen(["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                                   "--appendonly", "no", "--dir", str(self.dir)],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

        def up():
            try:
                s = socket.create_connection(("127.0.0.1", self.port), timeout=0.5)
                s.sendall(b"PING\r\n")
                ok = s.recv(16).startswith(b"+PONG")
                s.close()
                return ok
            except OSError:
                return False
        wait_until(up, what="redis-server")

    def stop(self):
        if self.p and self.p.poll() is None:
            self.p.terminate()
            self.p.wait(timeout=10)

    def service(self, extra=""):
        return (f"      store_backend: redis\n      redis: {{address: \"127.0.0.1:{self.port}\", key_prefix: \"rt:\"}}\n"
                + extra)


def pg_bindir():
    """Debian keeps the server's programs out of PATH: its newest version's."""
    for d in sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(p.split("/")[-2]), reverse=True):
        if os.path.exists(os.path.join(d, "postgres")):
            return d
    found = shutil.which("postgres") or shutil.which("initdb")
    return os.path.dirname(found) if found else None


class PostgresServer:
    """A PostgreSQL cluster of the test's own: initdb into a fresh directory,
    the server on a free loopback port with password (SCRAM) authentication,
    a database "replay" for user "vsr".  The server refuses to run as root:
    then it runs as the postgres user Debian's package creates.  stop() is a
    fast shutdown (sessions cut, as a crash or a restart does to vsr)."""
    name = "postgres"
    user, password, database = "vsr", "replay-pw-1", "replay"

    def __init__(self):
        self.bin = pg_bindir()
        if self.bin is None or not os.path.exists(os.path.join(self.bin, "psql")):
            require(commands=["postgres", "psql"], what="PostgreSQL (the postgresql package)")
        self.as_user = {}
        if os.geteuid() == 0:
            pw = pwd.getpwnam("postgres")
            self.as_user = {"user": pw.pw_uid, "group": pw.pw_gid}
        self.base = tempfile.mkdtemp(prefix="vsr-pg-")
        self.data = os.path.join(self.base, "data")
        pwfile = os.path.join(self.base, "pw")
        with open(pwfile, "w") as f:
            f.write(self.password + "\n")
        if self.as_user:
            for path in (self.base, pwfile):
                os.chown(path, self.as_user["user"], self.as_user["group"])
        subprocess.run([os.path.join(self.bin, "initdb"), "-D", self.data, "-U", self.user, "--pwfile", pwfile,
                        "--auth", "scram-sha-256", "-E", "UTF8", "--no-locale", "--no-sync"],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=self.base,
                       **self.as_user)
        self.port = free_port()
        self.p = None
        self.start()
        self.psql(f"CREATE DATABASE {self.database}", database="postgres")

    def start(self):
        self.log = open(os.path.join(self.base, "server.log"), "ab")
        self.p = subprocess.Popen([os.path.join(self.bin, "postgres"), "-D", self.data, "-p", str(self.port),
                                   "-k", self.base, "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off",
                                   "-c", "full_page_writes=off", "-c", "max_connections=50"],
                                  stdout=self.log, stderr=self.log, cwd=self.base, **self.as_user)
        isready = [os.path.join(self.bin, "pg_isready"), "-q", "-h", "127.0.0.1", "-p", str(self.port)]
        wait_until(lambda: self.p.poll() is None and subprocess.run(isready).returncode == 0, timeout=30,
                   what="postgres")

    def stop(self):
        if self.p and self.p.poll() is None:
            self.p.send_signal(signal.SIGINT)
            self.p.wait(timeout=30)
        self.log.close()

    def close(self):
        self.stop()
        shutil.rmtree(self.base, ignore_errors=True)

    def psql(self, sql, database=None):
        r = subprocess.run([os.path.join(self.bin, "psql"), "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1",
                            "-h", "127.0.0.1", "-p", str(self.port), "-U", self.user,
                            "-d", database or self.database, "-c", sql],
                           env=dict(os.environ, PGPASSWORD=self.password), capture_output=True, text=True,
                           timeout=30)
        assert r.returncode == 0, r.stderr
        return r.stdout.strip()

    def service(self, extra="", table="router_replay_records"):
        return ("      store_backend: postgres\n"
                f"      postgres: {{host: 127.0.0.1, port: {self.port}, database: {self.database}, "
                f"user: {self.user}, password: {self.password}, table_name: {table}}}\n" + extra)


@pytest.fixture
def redis(tmp_path):
    r = RedisServer(tmp_path)
    yield r
    r.stop()


@pytest.fixture
def postgres():
    pg = PostgresServer()
    yield pg
    pg.close()


@pytest.fixture(params=["redis", "postgres"])
def shared(request):
    """The stores every replica shares, each run through the same assertions."""
    return request.getfixturevalue(request.param)


def test_shared_by_two_replicas(vsr, fakellm, shared):
    be = shared.name
    a = start(vsr, fakellm, service=shared.service(), plugin=", max_records: 3")
    b = start(vsr, fakellm, service=shared.service(), plugin=", max_records: 3")
    ra = ask(a, "replayme on a")
    rb = ask(b, "replayme on b", stream=True)
    wait_until(lambda: replay_metric(a, be, "written") == 1 and replay_metric(b, be, "written") == 1,
               what="the writers' puts")
    # each replica reads the other's record
    rec = record(a, rb.headers["x-vsr-replay-id"])
    assert rec.status_code == 200 and rec.json()["streamed"] is True and rec.json()["response"]["body"] == rb.text
    assert record(b, ra.headers["x-vsr-replay-id"]).json()["response_path"] == "upstream"
    lst = listing(b)
    assert lst["backend"] == be and lst["total"] == 2
    assert [s["id"] for s in lst["data"]] == [rb.headers["x-vsr-replay-id"], ra.headers["x-vsr-replay-id"]]
    # the shared index keeps max_records
    more = [ask(a, f"replayme more {i}").headers["x-vsr-replay-id"] for i in range(3)]
    wait_until(lambda: replay_metric(a, be, "written") == 4, what="the writer's puts")
    assert [s["id"] for s in listing(b)["data"]] == more[::-1]
    assert record(b, ra.headers["x-vsr-replay-id"]).status_code == 404
    assert replay_metric(a, be, "evicted") >= 1
    assert httpx.delete(b.mgmt + "/api/v1/router_replay/" + more[0], timeout=10).status_code == 200
    assert record(a, more[0]).status_code == 404
    assert httpx.delete(b.mgmt + "/api/v1/router_replay/" + more[0], timeout=10).status_code == 404


def test_store_down_requests_still_succeed_then_resume(vsr, fakellm, shared):
    be = shared.name
    v = start(vsr, fakellm, service=shared.service())
    first = ask(v, "replayme before the outage").headers["x-vsr-replay-id"]
    wait_until(lambda: replay_metric(v, be, "written") == 1, what="the writer's put")
    shared.stop()
    for _ in range(3):
        t0 = time.monotonic()
        r = ask(v, f"replayme: {be} is gone")
        assert r.status_code == 200 and ID_RE.match(r.headers["x-vsr-replay-id"])
        assert time.monotonic() - t0 < 2.0
    wait_until(lambda: replay_metric(v, be, "failed") == 3, what="the failures counted")
    assert replay_metric(v, be, "written") == 1
    r = httpx.get(v.mgmt + "/api/v1/router_replay", timeout=10)
    assert r.status_code == 503 and r.json()["error"]["code"] == "store_unavailable"
    # back: the writer reconnects on its own (after its back-off) and writes again
    shared.start()
    back = []
    wait_until(lambda: back.append(ask(v, "replayme after the outage").headers["x-vsr-replay-id"])
               or replay_metric(v, be, "written") >= 2, timeout=20, what="writes resumed")
    ids = [s["id"] for s in listing(v, limit=1000)["data"]]
    assert any(i in ids for i in back)
    if be == "postgres":   # durable; this redis-server keeps nothing across a restart (--save "")
        assert first in ids


def test_shared_store_ttl(vsr, fakellm, shared):
    be = shared.name
    v = start(vsr, fakellm, service=shared.service("      ttl_seconds: 1\n"))
    rid = ask(v, "replayme briefly").headers["x-vsr-replay-id"]
    wait_until(lambda: replay_metric(v, be, "written") == 1, what="the writer's put")
    assert record(v, rid).status_code == 200
    time.sleep(2.2)   # past the keys' EX 1 (redis expires within its second)
    assert record(v, rid).status_code == 404
    assert listing(v)["total"] == 0


def test_postgres_table_created_and_kept(vsr, fakellm, postgres):
    assert postgres.psql("SELECT to_regclass('router_replay_records')") == ""
    v = start(vsr, fakellm, service=postgres.service(), plugin=", max_records: 2")
    ids = [ask(v, f"replayme row {i}").headers["x-vsr-replay-id"] for i in range(3)]
    wait_until(lambda: replay_metric(v, "postgres", "written") == 3, what="the writer's puts")
    cols = postgres.psql("SELECT column_name || ':' || data_type FROM information_schema.columns "
                         "WHERE table_name = 'router_replay_records' ORDER BY ordinal_position").split("\n")
    assert cols == ["id:character varying", "timestamp:timestamp without time zone", "summary:text", "record:text",
                    "created_at:timestamp without time zone"]
    # the row holds what the API answers, byte for byte; max_records held in the table
    assert postgres.psql(f"SELECT record FROM router_replay_records WHERE id = '{ids[2]}'") == record(v, ids[2]).text
    assert postgres.psql("SELECT string_agg(id, ',' ORDER BY timestamp) FROM router_replay_records") == \
        ",".join(ids[1:])
    assert replay_metric(v, "postgres", "evicted") == 1
    ts = postgres.psql(f"SELECT (extract(epoch FROM timestamp) * 1000)::bigint FROM router_replay_records "
                       f"WHERE id = '{ids[2]}'")
    assert int(ts) == record(v, ids[2]).json()["timestamp_ms"]


def test_postgres_table_of_the_reference_reused(vsr, fakellm, postgres):
    """A table the reference made (its own columns, its own rows) gains
    vsr's two columns; its rows are neither listed nor evicted by vsr."""
    postgres.psql("CREATE TABLE replays (id VARCHAR(255) PRIMARY KEY, timestamp TIMESTAMP NOT NULL, "
                  "decision VARCHAR(255), lifecycle_state VARCHAR(32) NOT NULL DEFAULT 'unknown', "
                  "created_at TIMESTAMP DEFAULT NOW()); "
                  "INSERT INTO replays (id, timestamp, decision) VALUES ('ref-1', NOW(), 'math')")
    v = start(vsr, fakellm, service=postgres.service(table="Replays"), plugin=", max_records: 1")
    ids = [ask(v, f"replayme beside the reference {i}").headers["x-vsr-replay-id"] for i in range(2)]
    wait_until(lambda: replay_metric(v, "postgres", "written") == 2, what="the writer's puts")
    lst = listing(v)
    assert lst["total"] == 1 and [s["id"] for s in lst["data"]] == [ids[1]]
    assert record(v, "ref-1").status_code == 404
    assert postgres.psql("SELECT decision FROM replays WHERE id = 'ref-1'") == "math"
    assert httpx.delete(v.mgmt + "/api/v1/router_replay/ref-1", timeout=10).status_code == 404
    assert postgres.psql("SELECT count(*) FROM replays") == "2"


def test_postgres_restart_between_records_loses_none(vsr, fakellm, postgres):
    """The writer's connection died with the server; the next record finds
    it broken and goes over a new one instead of failing."""
    v = start(vsr, fakellm, service=postgres.service())
    ask(v, "replayme before the restart")
    wait_until(lambda: replay_metric(v, "postgres", "written") == 1, what="the writer's put")
    postgres.stop()
    postgres.start()
    rid = ask(v, "replayme after the restart").headers["x-vsr-replay-id"]
    wait_until(lambda: replay_metric(v, "postgres", "written") == 2, what="the record after the restart")
    assert replay_metric(v, "postgres", "failed") == 0
    assert record(v, rid).status_code == 200


def test_postgres_table_name_scopes_records(vsr, fakellm, postgres):
    a = start(vsr, fakellm, service=postgres.service(table="replay_a"))
    b = start(vsr, fakellm, service=postgres.service(table="replay_b"))
    ra = ask(a, "replayme in a").headers["x-vsr-replay-id"]
    wait_until(lambda: replay_metric(a, "postgres", "written") == 1, what="the writer's put")
    assert record(a, ra).status_code == 200
    assert record(b, ra).status_code == 404 and listing(b)["total"] == 0
    assert httpx.delete(b.mgmt + "/api/v1/router_replay/" + ra, timeout=10).status_code == 404
    assert record(a, ra).status_code == 200


def test_postgres_stalled_stalls_no_request(vsr, fakellm, postgres):
    """A table locked by another session: the writer's insert and a
    management read wait on it (bounded by the statement timeout), the
    requests do not; the queued record is written once the lock goes."""
    v = start(vsr, fakellm, service=postgres.service())
    ask(v, "replayme to create the table")
    wait_until(lambda: replay_metric(v, "postgres", "written") == 1, what="the writer's put")
    locker = subprocess.Popen(
        [os.path.join(postgres.bin, "psql"), "-X", "-q", "-h", "127.0.0.1", "-p", str(postgres.port),
         "-U", postgres.user, "-d", postgres.database, "-c",
         "BEGIN; LOCK TABLE router_replay_records IN ACCESS EXCLUSIVE MODE; SELECT pg_sleep(3); COMMIT;"],
        env=dict(os.environ, PGPASSWORD=postgres.password), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: postgres.psql("SELECT count(*) FROM pg_locks WHERE mode = 'AccessExclusiveLock' "
                                         "AND relation = 'router_replay_records'::regclass") == "1",
                   what="the lock")
        read = {}
        reader = threading.Thread(target=lambda: read.update(r=httpx.get(v.mgmt + "/api/v1/router_replay",
                                                                         timeout=20)))
        reader.start()
        rids = [ask(v, f"replayme while locked {i}").headers["x-vsr-replay-id"] for i in range(5)]
        # answered while the lock (3 s) still holds the writer and the read
        assert replay_metric(v, "postgres", "written") == 1 and reader.is_alive()
        reader.join(timeout=20)
        assert read["r"].status_code == 200
    finally:
        locker.wait(timeout=20)
    wait_until(lambda: replay_metric(v, "postgres", "written") == 6, what="the queued records")
    assert replay_metric(v, "postgres", "failed") == 0
    assert {s["id"] for s in listing(v)["data"]} >= set(rids)


def test_cache_hit_carries_the_replay_id(vsr, fakellm):
    be = fakellm("a")
    port = free_port()
    cfg = config_yaml(port, [model_yaml("m1", [be.endpoint])], default="m1")
    cfg = cfg.replace("\nglobal:", routing().replace(
        "        - type: router_replay\n          configuration: {enabled: true}\n",
        "        - type: router_replay\n          configuration: {enabled: true}\n"
        "        - type: response_cache\n          configuration: {mode: exact, ttl_seconds: 60}\n") + "global:", 1)
    cfg += "  stores:\n    response_cache:\n      backend_type: memory\n"
    v = vsr(cfg, port=port)
    v.be = be
    v.mgmt = "http://127.0.0.1:" + re.search(r"management_api:\n\s+port: (\d+)", cfg).group(1)
    r1 = ask(v, "replayme: cached?")
    r2 = ask(v, "replayme: cached?")
    assert r2.headers["x-vsr-cache-hit"] == "true"
    id1, id2 = r1.headers["x-vsr-replay-id"], r2.headers["x-vsr-replay-id"]
    assert id1 != id2
    rec = record(v, id2).json()
    assert rec["response_path"] == "cache" and rec["status"] == 200
    assert json.loads(rec["response"]["body"])["choices"][0]["message"]["content"] == \
        r1.json()["choices"][0]["message"]["content"]
    assert be.stats()["requests"] == 1


def test_messages_client_and_tool_trace(vsr, fakellm):
    v = start(vsr, fakellm)
    body = {"model": "auto", "max_tokens": 50, "messages": [{"role": "user", "content": "replayme in messages"}]}
    with v.client() as c:
        r = c.post("/v1/messages", json=body)
    assert r.status_code == 200 and r.json()["type"] == "message"
    rec = record(v, r.headers["x-vsr-replay-id"]).json()
    assert rec["path"] == "/v1/messages"
    assert json.loads(rec["request"]["body"]) == body            # what the client sent
    assert json.loads(rec["response"]["body"])["type"] == "message"  # what the client got, translated
    # the assistant's tool calls of the request
    chat = {"model": "auto", "messages": [
        {"role": "user", "content": "replayme with tools"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "lookup", "arguments": "{\"q\":1}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "42"}]}
    r = v.post_chat(chat)
    assert r.status_code == 200
    tr = record(v, r.headers["x-vsr-replay-id"]).json()["tool_trace"]
    assert tr["truncated"] is False
    assert tr["steps"] == [{"source": "request", "call": chat["messages"][1]["tool_calls"][0]}]


def test_management_token_guards_replay(vsr, fakellm, tmp_path):
    token = "replay-token-0123456789abcdef"
    tf = tmp_path / "token"
    tf.write_text(token + "\n")
    be = fakellm("a")
    port = free_port()
    cfg = config_yaml(port, [model_yaml("m1", [be.endpoint])], default="m1")
    cfg = cfg.replace("\nglobal:", routing() + "global:", 1)
    v = vsr(cfg, port=port, extra_args=("--management-token-file", str(tf)))
    mgmt = "http://127.0.0.1:" + re.search(r"management_api:\n\s+port: (\d+)", cfg).group(1)
    rid = ask(v, "replayme secretly").headers["x-vsr-replay-id"]
    for path in ("/api/v1/router_replay", "/api/v1/router_replay/" + rid):
        assert httpx.get(mgmt + path, timeout=10).status_code == 401
        assert httpx.get(mgmt + path, headers={"authorization": "Bearer nope-0123456789abcdef"},
                         timeout=10).status_code == 401
        ok = httpx.get(mgmt + path, headers={"authorization": "Bearer " + token}, timeout=10)
        assert ok.status_code == 200 and rid in ok.text
    assert httpx.delete(mgmt + "/api/v1/router_replay/" + rid, timeout=10).status_code == 401
    h = httpx.head(mgmt + "/api/v1/router_replay/" + rid, headers={"authorization": "Bearer " + token}, timeout=10)
    assert h.status_code == 200 and h.content == b""


def test_local_reply_when_no_backend_answers(vsr, fakellm):
    port = free_port()
    dead = f"127.0.0.1:{free_port()}"   # nothing listens there
    cfg = config_yaml(port, [model_yaml("m1", [dead])], default="m1")
    cfg = cfg.replace("\nglobal:", routing() + "global:", 1)
    v = vsr(cfg, port=port)
    mgmt = "http://127.0.0.1:" + re.search(r"management_api:\n\s+port: (\d+)", cfg).group(1)
    r = ask(v, "replayme: nobody home")
    assert r.status_code in (502, 503)
    rid = r.headers["x-vsr-replay-id"]
    rec = httpx.get(mgmt + "/api/v1/router_replay/" + rid, timeout=10).json()
    assert rec["status"] == r.status_code and rec["response_path"] == "error" and rec["completed"] is True
    assert rec["response"]["body"] == r.text


@pytest.mark.parametrize("backend", ["redis", "postgres"])
def test_config_change_moves_to_a_new_store(vsr, fakellm, request, backend):
    store = request.getfixturevalue(backend)
    be = fakellm("a")
    port = free_port()
    cfg = config_yaml(port, [model_yaml("m1", [be.endpoint])], default="m1")
    cfg = cfg.replace("\nglobal:", routing() + "global:", 1)
    v = vsr(cfg, port=port)
    v.mgmt = "http://127.0.0.1:" + re.search(r"management_api:\n\s+port: (\d+)", cfg).group(1)
    first = ask(v, "replayme in memory").headers["x-vsr-replay-id"]
    assert listing(v)["backend"] == "memory"
    # the same document with the records in Redis: activated live, no restart
    two = cfg + "    router_replay:\n" + store.service()
    r = httpx.put(v.mgmt + "/api/v1/config", content=two.encode(), headers={"content-type": "application/yaml"},
                  timeout=30)
    assert r.status_code == 200 and r.json()["status"] == "ACK", r.text
    second = ask(v, f"replayme in {backend}").headers["x-vsr-replay-id"]
    wait_until(lambda: replay_metric(v, backend, "written") == 1, what="the writer's put")
    lst = listing(v)
    assert lst["backend"] == backend and [s["id"] for s in lst["data"]] == [second]
    assert record(v, first).status_code == 404   # the memory store went with its block


def test_a_large_stream_costs_max_body_bytes(vsr, fakellm):
    v = start(vsr, fakellm, plugin=", max_body_bytes: 4096")
    pid = v.proc.p.pid

    def rss_kb():
        with open(f"/proc/{pid}/status") as f:
            return int(next(l for l in f if l.startswith("VmRSS:")).split()[1])
    base = rss_kb()
    body = {"model": "auto", "stream": True, "messages": [{"role": "user", "content": "replayme big"}]}
    total = 0
    with v.client(timeout=60) as c:
        with c.stream("POST", "/v1/chat/completions", json=body,
                      headers={"x-fakellm-chunks": "512", "x-fakellm-chunk-size": "65536"}) as r:
            rid = r.headers["x-vsr-replay-id"]
            for chunk in r.iter_bytes():
                total += len(chunk)
    assert total > 32 << 20
    rec = record(v, rid).json()
    assert rec["response"]["bytes"] == total and rec["response"]["truncated"] is True
    assert len(rec["response"]["body"]) == 4096 and rec["cut"] is False and rec["completed"] is True
    grown = rss_kb() - base
    assert grown < 24 * 1024   # 32 MB went through; the record kept 4 KiB of it
