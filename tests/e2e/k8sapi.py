"""A stand-in Kubernetes API server for the config_source: kubernetes tests.

It serves the vllm.ai/v1alpha1 IntelligentPool and IntelligentRoute
resources of one namespace over HTTPS (a CA and a server certificate for
127.0.0.1 made with the openssl command), the way the real API server does:
list (with the collection's resourceVersion), watch (?watch=1&resourceVersion=
RV: the events after RV, then new ones as they happen, as chunked
newline-delimited JSON), merge-patches on the status subresource (a status
write is a MODIFIED event that leaves metadata.generation alone, as with a
status subresource), and 410 Gone for a resourceVersion older than the last
compaction (as an ERROR event in the stream, or as the response's status).
Every request needs the service account's bearer token.
"""
import copy
import json
import ssl
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

GROUP = "/apis/vllm.ai/v1alpha1/namespaces/"
KINDS = {"intelligentpools": "IntelligentPool", "intelligentroutes": "IntelligentRoute"}
TOKEN = "stand-in-token"


def make_pki(d):
    """ca.crt, and server.crt/server.key for IP 127.0.0.1 signed by it."""
    def run(*args):
        subprocess.run(["openssl", *args], check=True, cwd=d, capture_output=True)
    run("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
        "-keyout", "ca.key", "-out", "ca.crt", "-subj", "/CN=stand-in cluster CA", "-days", "2")
    run("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
        "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=kube-apiserver")
    (d / "san.cnf").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    run("x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
        "-out", "server.crt", "-days", "2", "-extfile", "san.cnf")
    return d / "ca.crt", d / "server.crt", d / "server.key"


class State:
    def __init__(self, namespace):
        self.ns = namespace
        self.cv = threading.Condition()
        self.rv = 100
        self.objects = {k: {} for k in KINDS}     # plural -> name -> object
        self.events = []                          # (rv, plural, type, object)
        self.compacted = 0                        # watches from an rv below this get 410
        self.gone_as_status = False               # 410 as the response status instead of an ERROR event
        self.epoch = 0                            # bumped to end every open watch
        self.lists = {k: 0 for k in KINDS}
        self.watches = {k: 0 for k in KINDS}
        self.patches = []                         # (plural, name, content type, body)
        self.unauthorized = 0

    def _event(self, plural, typ, obj):
        self.rv += 1
        obj["metadata"]["resourceVersion"] = str(self.rv)
        self.events.append((self.rv, plural, typ, copy.deepcopy(obj)))
        self.cv.notify_all()

    def put(self, plural, name, spec):
        """Creates or updates a resource's spec (a new generation)."""
        with self.cv:
            obj = self.objects[plural].get(name)
            if obj is None:
                obj = {"apiVersion": "vllm.ai/v1alpha1", "kind": KINDS[plural],
                       "metadata": {"name": name, "namespace": self.ns, "generation": 1}, "spec": spec}
                self.objects[plural][name] = obj
                self._event(plural, "ADDED", obj)
            else:
                obj["spec"] = spec
                obj["metadata"]["generation"] += 1
                self._event(plural, "MODIFIED", obj)
            return obj["metadata"]["generation"]

    def delete(self, plural, name):
        with self.cv:
            obj = self.objects[plural].pop(name)
            self._event(plural, "DELETED", obj)

    def status(self, plural, name):
        with self.cv:
            return copy.deepcopy(self.objects[plural][name].get("status"))

    def drop_watches(self):
        with self.cv:
            self.epoch += 1
            self.cv.notify_all()

    def compact(self, as_status=False):
        """Forgets the history: every resourceVersion so far is too old to watch from."""
        with self.cv:
            self.compacted = self.rv + 1
            self.gone_as_status = as_status
            self.epoch += 1
            self.cv.notify_all()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        pass

    def _route(self):
        u = urlparse(self.path)
        st = self.server.state
        if not u.path.startswith(GROUP + st.ns + "/"):
            return None, None, None, u
        rest = u.path[len(GROUP + st.ns + "/"):].split("/")
        if rest[0] not in KINDS:
            return None, None, None, u
        return rest[0], rest[1] if len(rest) > 1 else None, rest[2] if len(rest) > 2 else None, u

    def _send(self, code, obj):
        body = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _authorized(self):
        if self.headers.get("authorization") == f"Bearer {TOKEN}":
            return True
        with self.server.state.cv:
            self.server.state.unauthorized += 1
        self._send(401, {"kind": "Status", "code": 401, "reason": "Unauthorized"})
        return False

    def _chunk(self, data):
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def do_GET(self):
        if not self._authorized():
            return
        plural, name, sub, u = self._route()
        st = self.server.state
        if plural is None or name is not None:
            return self._send(404, {"kind": "Status", "code": 404})
        q = parse_qs(u.query)
        if q.get("watch", ["0"])[0] in ("1", "true"):
            return self._watch(plural, int(q.get("resourceVersion", ["0"])[0] or 0))
        with st.cv:
            st.lists[plural] += 1
            items = [copy.deepcopy(o) for o in st.objects[plural].values()]
            rv = st.rv
        self._send(200, {"apiVersion": "vllm.ai/v1alpha1", "kind": KINDS[plural] + "List",
                         "metadata": {"resourceVersion": str(rv)}, "items": items})

    def _watch(self, plural, since):
        st = self.server.state
        with st.cv:
            st.watches[plural] += 1
            epoch = st.epoch
            gone = since < st.compacted
            as_status = st.gone_as_status
        if gone and as_status:
            return self._send(410, {"kind": "Status", "code": 410, "reason": "Expired"})
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        if gone:
            self._chunk(json.dumps({"type": "ERROR", "object": {"kind": "Status", "code": 410,
                                                                "reason": "Expired"}}).encode() + b"\n")
            self.wfile.write(b"0\r\n\r\n")
            return
        sent = since
        while True:
            with st.cv:
                pending = [e for e in st.events if e[0] > sent and e[1] == plural]
                if not pending and st.epoch == epoch:
                    st.cv.wait(0.2)
                    continue
                if st.epoch != epoch:
                    break
            for rv, _, typ, obj in pending:
                self._chunk(json.dumps({"type": typ, "object": obj}).encode() + b"\n")
                sent = rv
        # dropped: the connection goes away without the last chunk
        self.close_connection = True

    def do_PATCH(self):
        if not self._authorized():
            return
        plural, name, sub, _ = self._route()
        st = self.server.state
        n = int(self.headers.get("content-length", "0"))
        body = self.rfile.read(n)
        if plural is None or sub != "status":
            return self._send(404, {"kind": "Status", "code": 404})
        with st.cv:
            obj = st.objects[plural].get(name)
            if obj is None:
                return self._send(404, {"kind": "Status", "code": 404})
            patch = json.loads(body)
            st.patches.append((plural, name, self.headers.get("content-type"), patch))
            status = obj.setdefault("status", {})
            status.update(patch.get("status", {}))
            st._event(plural, "MODIFIED", obj)
            out = copy.deepcopy(obj)
        self._send(200, out)


class Server:
    def __init__(self, tmp_path, namespace="router"):
        d = tmp_path / "pki"
        d.mkdir()
        self.ca, crt, key = make_pki(d)
        self.state = State(namespace)
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.httpd.state = self.state
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(crt, key)
        self.httpd.socket = ctx.wrap_socket(self.httpd.socket, server_side=True)
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()
        # the service account's files, as the kubelet mounts them
        self.sa_dir = tmp_path / "serviceaccount"
        self.sa_dir.mkdir()
        (self.sa_dir / "token").write_text(TOKEN)
        (self.sa_dir / "namespace").write_text(namespace)
        (self.sa_dir / "ca.crt").write_bytes(self.ca.read_bytes())

    def env(self):
        return {"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": str(self.port),
                "VSR_K8S_SERVICEACCOUNT_DIR": str(self.sa_dir)}

    def close(self):
        self.state.drop_watches()
        self.httpd.shutdown()
        self.httpd.server_close()
