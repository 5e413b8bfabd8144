"""A stand-in remote classifier for the e2e tests: an HTTP/1.1 server (keep-alive) on an ephemeral port that
speaks the reference's http_classify contract,

    POST /classify  {"inputs": "<text>"}  ->  [{"label": L, "score": P}, ...]

and a runtime's POST /v1/classify ({"model": M, "text": T} -> {"labels": [...]} or {"entities": [...]}).
It decodes and records every request (path, headers, JSON body) and counts the connections it accepted; what
it answers is decided by `answer(path, body)`, a function the test gives, returning (status, JSON value or raw
bytes, delay in seconds)."""
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class RemoteClassifier:
    def __init__(self, answer):
        self.answer = answer
        self.requests = []
        self.connections = 0
        self.lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self):
                super().setup()
                with outer.lock:
                    outer.connections += 1

            def log_message(self, *args):
                pass

            def do_POST(self):
                n = int(self.headers.get("content-length", "0"))
                raw = self.rfile.read(n)
                body = json.loads(raw)          # a request that is not JSON fails the test (500)
                with outer.lock:
                    outer.requests.append({"path": self.path, "headers": {k.lower(): v for k, v in self.headers.items()}, "body": body})
                status, value, delay = outer.answer(self.path, body)
                if delay:
                    time.sleep(delay)
                data = value if isinstance(value, bytes) else json.dumps(value).encode()
                try:
                    self.send_response(status)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def texts(self):
        with self.lock:
            return [r["body"].get("inputs", r["body"].get("text")) for r in self.requests]

    def close(self):
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)
