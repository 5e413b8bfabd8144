"""Stand-in retrieval backends for the rag plugin's e2e tests: one HTTP/1.1 server (keep-alive) on an ephemeral
loopback port that answers in the shape of the path it is called on,

    POST /<index>/_search                    Elasticsearch  {"query":{"match":{"content":Q}},"size":K}
                                                            -> {"hits":{"hits":[{"_source":{"content":...}}]}}
    POST /v1/vector_stores/<id>/search       OpenAI vector store search {"query":Q,"max_num_results":N}
                                                            -> {"data":[{"content":[{"type":"text","text":...}]}]}
    POST /mcp                                MCP streamable HTTP, JSON-RPC tools/call
                                                            -> {"jsonrpc":"2.0","id":1,"result":{"content":[...]}}
                                                               as JSON, or as one SSE event when `mcp_sse`
    POST /query                              Pinecone {"vector":E,"topK":K,...} -> {"matches":[{"metadata":{"text":...}}]}
    POST /v1/graphql                         Weaviate {"query":"{ Get { Document(nearVector: ...) ... } }"}
                                                            -> {"data":{"Get":{"Document":[{"content":...}]}}}
    POST anything else                       custom: {"results":[{"content":...}]}

Every request is recorded (path, lower-cased headers, JSON body).  `docs` are the texts it finds (all of them,
for any query); `status` (not 200: that status with a small error body), `delay` (seconds before answering)
and `docs` can be changed by the test between requests."""
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class RagServer:
    def __init__(self, docs=("vsr keeps one snapshot per request.",), mcp_sse=False):
        self.docs = list(docs)
        self.mcp_sse = mcp_sse
        self.status = 200
        self.delay = 0.0
        self.requests = []
        self.lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # the head and the body in one write, sent at once: no delayed-ACK stall on keep-alive connections
            wbufsize = 1 << 16
            disable_nagle_algorithm = True

            def log_message(self, *args):
                pass

            def do_POST(self):
                n = int(self.headers.get("content-length", "0"))
                raw = self.rfile.read(n)
                body = json.loads(raw)  # a request that is not JSON fails the test (500)
                with outer.lock:
                    outer.requests.append({"path": self.path,
                                           "headers": {k.lower(): v for k, v in self.headers.items()},
                                           "body": body})
                if outer.delay:
                    time.sleep(outer.delay)
                ctype = "application/json"
                if outer.status != 200:
                    status, data = outer.status, b'{"error":"backend trouble"}'
                else:
                    status, value = 200, outer.answer(self.path, body)
                    data = json.dumps(value).encode()
                    if self.path.startswith("/mcp") and outer.mcp_sse:
                        ctype = "text/event-stream"
                        data = b"event: message\r\ndata: " + data + b"\r\n\r\n"
                try:
                    self.send_response(status)
                    self.send_header("content-type", ctype)
                    self.send_header("content-length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def answer(self, path, body):
        if path.endswith("/_search"):
            return {"took": 1, "hits": {"total": {"value": len(self.docs)},
                                        "hits": [{"_id": str(i), "_score": 1.0, "_source": {"content": d}}
                                                 for i, d in enumerate(self.docs)]}}
        if path.startswith("/v1/vector_stores/"):
            return {"object": "vector_store.search_results.page", "search_query": body.get("query"),
                    "data": [{"file_id": f"file-{i}", "filename": f"f{i}.txt", "score": 0.9,
                              "attributes": {}, "content": [{"type": "text", "text": d}]}
                             for i, d in enumerate(self.docs)],
                    "has_more": False, "next_page": None}
        if path == "/query":
            return {"matches": [{"id": str(i), "score": 0.9, "metadata": {"text": d}} for i, d in enumerate(self.docs)]}
        if path == "/v1/graphql":
            return {"data": {"Get": {"Document": [{"content": d, "_additional": {"distance": 0.1}}
                                                  for d in self.docs]}}}
        if path.startswith("/mcp"):
            return {"jsonrpc": "2.0", "id": body.get("id"),
                    "result": {"content": [{"type": "text", "text": d} for d in self.docs], "isError": False}}
        return {"results": [{"content": d} for d in self.docs]}

    def close(self):
        self.server.shutdown()
        self.server.server_close()
