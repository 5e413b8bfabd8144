#!/usr/bin/env python3
"""A stand-in for `vsr runtime serve` in the supervisor's unit test: serves
GET /health/live on a Unix socket, says hello on stdout and stderr; with
--exit it exits at once (a runtime that cannot start)."""
import http.server
import os
import socketserver
import sys


class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = b'{"status":"live"}' if self.path == "/health/live" else b"{}"
        self.send_response(200 if self.path == "/health/live" else 404)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass

    def address_string(self):
        return "uds"


class Server(socketserver.UnixStreamServer):
    def get_request(self):
        sock, _ = super().get_request()
        return sock, ("uds", 0)


def main():
    args = sys.argv[1:]
    if "--exit" in args:
        print("cannot start", flush=True)
        sys.exit(1)
    path = args[args.index("--socket") + 1]
    if os.path.exists(path):
        os.unlink(path)
    srv = Server(path, Handler)
    print("hello from runtime", flush=True)
    print("a line on stderr", file=sys.stderr, flush=True)
    srv.serve_forever()


if __name__ == "__main__":
    main()
