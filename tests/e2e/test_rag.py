"""The rag plugin (docs/plugins.md "rag"): the decision's backend is asked with the current user message before
the request goes upstream, and what it finds is injected (tool_role or system_prompt) into the body fakellm
echoes.  The backends are rag_server.py's stand-ins (Elasticsearch, OpenAI vector store, MCP streamable HTTP,
custom) on ephemeral ports."""
import json
import subprocess

import pytest

from conftest import VSR_BIN, config_yaml, echo, free_port, model_yaml
from rag_server import RagServer

DOCS = ["Paris is the capital of France.", "The Seine flows through Paris."]
JOINED = DOCS[0] + "\n\n---\n\n" + DOCS[1]


def routing(srv, dead):
    return f"""
routing:
  signals:
    keywords:
      - {{name: elastic, operator: OR, keywords: ["elastic"]}}
      - {{name: vectors, operator: OR, keywords: ["vectors"]}}
      - {{name: mcptool, operator: OR, keywords: ["mcptool"]}}
      - {{name: hybrid, operator: OR, keywords: ["hybrid"]}}
      - {{name: parallel, operator: OR, keywords: ["parallel"]}}
      - {{name: cached, operator: OR, keywords: ["cached"]}}
      - {{name: skipfail, operator: OR, keywords: ["skipfail"]}}
      - {{name: custom, operator: OR, keywords: ["customfmt"]}}
      - {{name: gated, operator: OR, keywords: ["gated"]}}
      - {{name: small, operator: OR, keywords: ["smallbound"]}}
  decisions:
    - name: rag_es
      priority: 80
      rules: {{operator: OR, conditions: [{{type: keyword, name: elastic}}]}}
      modelRefs: [{{model: m1}}]
      plugins:
        - type: rag
          configuration:
            enabled: true
            backend: external_api
            top_k: 3
            on_failure: block
            backend_config:
              endpoint: "{srv}/docs/_search"
              request_format: elasticsearch
              api_key: sekrit
              headers: {{X-Tenant: t1}}
    - name: rag_openai
      priority: 70
      rules: {{operator: OR, conditions: [{{type: keyword, name: vectors}}]}}
      modelRefs: [{{model: m1}}]
      plugins:
        - type: rag
          configuration:
            backend: openai
            injection_mode: system_prompt
            max_context_length: 20
            backend_config: {{vector_store_id: vs_1, base_url: "{srv}/v1", api_key: k2, max_num_results: 4}}
    - name: rag_mcp
      priority: 60
      rules: {{operator: OR, conditions: [{{type: keyword, name: mcptool}}]}}
      modelRefs: [{{model: m1}}]
      plugins:
        - type: rag
          configuration:
            backend: mcp
            on_failure: warn
            backend_config:
              endpoint: "{srv}/mcp"
              server_name: docs
              tool_name: search_docs
              tool_arguments: {{query: "${{user_content}}", decision: "${{decision_name}}", limit: 2}}
    - name: rag_hybrid
      priority: 50
      rules: {{operator: OR, conditions: [{{type: keyword, name: hybrid}}]}}
      modelRefs: [{{model: m1}}]
      plugins:
        - type: rag
          configuration:
            backend: hybrid
            on_failure: block
            backend_config:
              primary: external_api
              primary_config: {{endpoint: "{dead}/docs/_search", request_format: elasticsearch, timeout_seconds: 2}}
              fallback: openai
              fallback_config: {{vector_store_id: vs_2, base_url: "{srv}"}}
    - name: rag_parallel
      priority: 45
      rules: {{operator: OR, conditions: [{{type: keyword, name: parallel}}]}}
      modelRefs: [{{model: m1}}]
      plugins:
        - type: rag
          configuration:
            backend: hybrid
            backend_config:
              primary: mcp
              primary_config: {{endpoint: "{srv}/mcp", tool_name: search_docs}}
              fallback: external_api
              fallback_config: {{endpoint: "{srv}/docs/_search", request_format: elasticsearch}}
              strategy: parallel
    - name: rag_cached
      priority: 40
      rules: {{operator: OR, conditions: [{{type: keyword, name: cached}}]}}
      modelRefs: [{{model: m1}}]
      plugins:
        - type: rag
          configuration:
            backend: external_api
            cache_results: true
            cache_ttl_seconds: 60
            backend_config: {{endpoint: "{srv}/docs/_search", request_format: elasticsearch}}
    - name: rag_skip
      priority: 30
      rules: {{operator: OR, conditions: [{{type: keyword, name: skipfail}}]}}
      modelRefs: [{{model: m1}}]
      plugins:
        - type: rag
          configuration:
            backend: external_api
            backend_config: {{endpoint: "{dead}/docs/_search", request_format: elasticsearch, timeout_seconds: 2}}
    - name: rag_custom
      priority: 20
      rules: {{operator: OR, conditions: [{{type: keyword, name: custom}}]}}
      modelRefs: [{{model: m1}}]
      plugins:
        - type: rag
          configuration:
            backend: external_api
            top_k: 7
            similarity_threshold: 0.5
            backend_config:
              endpoint: "{srv}/search"
              request_format: custom
              request_template: '{{"q": "{{{{.Query}}}}", "k": {{{{.TopK}}}}, "min": ${{threshold}}}}'
    - name: rag_gated
      priority: 15
      rules: {{operator: OR, conditions: [{{type: keyword, name: gated}}]}}
      modelRefs: [{{model: m1}}]
      plugins:
        - type: rag
          configuration:
            backend: external_api
            min_confidence_threshold: 0.5
            backend_config: {{endpoint: "{srv}/docs/_search", request_format: elasticsearch}}
    - name: rag_small
      priority: 10
      rules: {{operator: OR, conditions: [{{type: keyword, name: small}}]}}
      modelRefs: [{{model: m1}}]
      plugins:
        - type: rag
          configuration:
            backend: external_api
            on_failure: block
            backend_config: {{endpoint: "{srv}/docs/_search", request_format: elasticsearch, max_response_bytes: 2048}}
"""


@pytest.fixture
def rag(vsr, fakellm):
    srv = RagServer(DOCS)
    a = fakellm("a")
    port = free_port()
    dead = f"http://127.0.0.1:{free_port()}"
    cfg = config_yaml(port, [model_yaml("m1", [a.endpoint])], default="m1",
                      global_extra="    response_api:\n      enabled: true\n") + routing(srv.url, dead)
    v = vsr(cfg, port=port)
    v.srv = srv
    v.fake = a
    yield v
    srv.close()


def chat(v, messages, debug=True):
    return v.post_chat({"model": "auto", "messages": messages}, headers={"x-vsr-debug": "true"} if debug else {})


def sent(r):
    assert r.status_code == 200, r.text
    return json.loads(echo(r)["body"])


def test_tool_role_after_last_user_message_elasticsearch(rag):
    msgs = [{"role": "system", "content": "Be brief."},
            {"role": "user", "content": "hello"},
            {"role": "assistant", "content": "hi"},
            {"role": "user", "content": "elastic: what is the capital of France?"}]
    r = chat(rag, msgs)
    assert r.headers["x-vsr-selected-decision"] == "rag_es"
    assert r.headers["x-vsr-rag"] == "injected"
    assert r.headers["x-vsr-rag-backend"] == "external_api"
    got = sent(r)["messages"]
    assert got[:4] == msgs
    call, tool = got[4], got[5]
    assert len(got) == 6
    # the tool message answers a tool call, so that providers that check the pairing accept it
    assert call["role"] == "assistant" and call["tool_calls"][0]["function"]["name"] == "rag_retrieval"
    assert tool == {"role": "tool", "tool_call_id": call["tool_calls"][0]["id"], "content": JOINED}
    assert tool["tool_call_id"].startswith("rag_")
    # the Elasticsearch request: the current user message, top_k as size, the credentials and headers
    req = rag.srv.requests[-1]
    assert req["path"] == "/docs/_search"
    assert req["body"] == {"query": {"match": {"content": "elastic: what is the capital of France?"}}, "size": 3}
    assert req["headers"]["authorization"] == "Bearer sekrit"
    assert req["headers"]["x-tenant"] == "t1"


def test_tool_role_goes_after_the_last_user_message_not_at_the_end(rag):
    msgs = [{"role": "user", "content": "elastic: first"},
            {"role": "assistant", "content": "answer"},
            {"role": "user", "content": "elastic: second"},
            {"role": "assistant", "content": "prefill"}]
    got = sent(chat(rag, msgs))["messages"]
    assert [m["role"] for m in got] == ["user", "assistant", "user", "assistant", "tool", "assistant"]
    assert got[4]["content"] == JOINED and got[5] == msgs[3]
    assert rag.srv.requests[-1]["body"]["query"]["match"]["content"] == "elastic: second"


def test_system_prompt_openai_vector_store_truncated(rag):
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "vectors: where is Paris?"}]
    r = chat(rag, msgs)
    assert r.headers["x-vsr-rag"] == "injected" and r.headers["x-vsr-rag-backend"] == "openai"
    got = sent(r)["messages"]
    assert len(got) == 2
    # max_context_length 20 runes, then "..."
    assert got[0] == {"role": "system",
                      "content": "Context from knowledge base:\n\n" + JOINED[:20] + "...\n\nBe brief."}
    req = rag.srv.requests[-1]
    assert req["path"] == "/v1/vector_stores/vs_1/search"
    assert req["body"] == {"query": "vectors: where is Paris?", "max_num_results": 4}
    assert req["headers"]["authorization"] == "Bearer k2"


def test_system_prompt_without_a_system_message_inserts_one_first(rag):
    got = sent(chat(rag, [{"role": "user", "content": "vectors: hi"}]))["messages"]
    assert got[0] == {"role": "system", "content": "Context from knowledge base:\n\n" + JOINED[:20] + "...\n\n"}
    assert got[1] == {"role": "user", "content": "vectors: hi"}


@pytest.mark.parametrize("sse", [False, True])
def test_mcp_tool_call_over_streamable_http(rag, sse):
    rag.srv.mcp_sse = sse
    r = chat(rag, [{"role": "user", "content": 'mcptool: say "hi"'}])
    assert r.headers["x-vsr-rag"] == "injected" and r.headers["x-vsr-rag-backend"] == "mcp"
    assert sent(r)["messages"][-1]["content"] == JOINED
    req = rag.srv.requests[-1]
    assert req["path"] == "/mcp"
    assert req["body"] == {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                           "params": {"name": "search_docs",
                                      "arguments": {"query": 'mcptool: say "hi"', "decision": "rag_mcp", "limit": 2}}}
    assert "text/event-stream" in req["headers"]["accept"] and "application/json" in req["headers"]["accept"]


def test_on_failure_block_answers_503_and_calls_no_model(rag):
    rag.srv.status = 500
    before = rag.fake.stats()["requests"]
    r = chat(rag, [{"role": "user", "content": "elastic: anything"}])
    assert r.status_code == 503, r.text
    msg = r.json()["error"]["message"]
    assert msg.startswith("RAG retrieval failed: ") and "status 500" in msg, msg
    assert r.headers["x-vsr-response-path"] == "error"
    assert r.headers["x-vsr-selected-decision"] == "rag_es"
    assert rag.fake.stats()["requests"] == before


def test_on_failure_warn_and_skip_go_on_without_context(rag):
    rag.srv.status = 502
    r = chat(rag, [{"role": "user", "content": "mcptool: anything"}])
    assert r.headers["x-vsr-rag"] == "failed"
    assert sent(r)["messages"] == [{"role": "user", "content": "mcptool: anything"}]
    r = chat(rag, [{"role": "user", "content": "skipfail: anything"}])   # nobody listens there
    assert r.headers["x-vsr-rag"] == "failed"
    assert sent(r)["messages"] == [{"role": "user", "content": "skipfail: anything"}]


def test_hybrid_sequential_falls_back_when_primary_fails(rag):
    r = chat(rag, [{"role": "user", "content": "hybrid: where?"}])
    assert r.headers["x-vsr-rag"] == "injected" and r.headers["x-vsr-rag-backend"] == "openai"
    assert sent(r)["messages"][-1]["content"] == JOINED
    assert rag.srv.requests[-1]["path"] == "/v1/vector_stores/vs_2/search"


def test_hybrid_parallel_asks_both_and_prefers_primary(rag):
    r = chat(rag, [{"role": "user", "content": "parallel: where?"}])
    assert r.headers["x-vsr-rag-backend"] == "mcp"
    assert sorted(q["path"] for q in rag.srv.requests) == ["/docs/_search", "/mcp"]


def test_result_cache_answers_the_same_query_without_the_backend(rag):
    msgs = [{"role": "user", "content": "cached: the same question"}]
    r1 = chat(rag, msgs)
    assert r1.headers["x-vsr-rag"] == "injected"
    n = len(rag.srv.requests)
    rag.srv.docs = ["changed"]
    r2 = chat(rag, msgs)
    assert r2.headers["x-vsr-rag"] == "cached"
    assert len(rag.srv.requests) == n
    assert sent(r2)["messages"][-1]["content"] == JOINED
    # another question is another entry
    r3 = chat(rag, [{"role": "user", "content": "cached: another question"}])
    assert r3.headers["x-vsr-rag"] == "injected" and sent(r3)["messages"][-1]["content"] == "changed"
    import httpx
    m = httpx.get(rag.metrics_url, timeout=5).text
    assert 'vsr_rag_retrievals_total{backend="external_api",result="injected"} 2' in m, m
    assert 'vsr_rag_retrievals_total{backend="external_api",result="cached"} 1' in m, m


def test_custom_template_escapes_the_query(rag):
    r = chat(rag, [{"role": "user", "content": 'customfmt: a "quoted" {{.TopK}} word'}])
    assert r.headers["x-vsr-rag"] == "injected"
    body = rag.srv.requests[-1]["body"]   # the server parsed it: the quotes did not break the JSON
    assert body == {"q": 'customfmt: a "quoted" {{.TopK}} word', "k": 7, "min": 0.5}


def test_min_confidence_threshold_needs_a_fact_check_signal(rag):
    r = chat(rag, [{"role": "user", "content": "gated: q"}])
    assert r.headers["x-vsr-selected-decision"] == "rag_gated"
    assert "x-vsr-rag" not in r.headers and rag.srv.requests == []
    assert sent(r)["messages"] == [{"role": "user", "content": "gated: q"}]


def test_an_answer_over_max_response_bytes_fails_the_retrieval(rag):
    rag.srv.docs = ["x" * 4096]
    r = chat(rag, [{"role": "user", "content": "smallbound: q"}])
    assert r.status_code == 503 and "over max_response_bytes" in r.json()["error"]["message"], r.text
    rag.srv.docs = ["short"]
    assert sent(chat(rag, [{"role": "user", "content": "smallbound: q"}]))["messages"][-1]["content"] == "short"


def test_without_debug_no_rag_headers_but_the_context_is_injected(rag):
    r = chat(rag, [{"role": "user", "content": "elastic: q"}], debug=False)
    assert "x-vsr-rag" not in r.headers
    assert sent(r)["messages"][-1]["content"] == JOINED


@pytest.mark.parametrize("backend,config,needle", [
    ("milvus", "{collection: docs}", "backend milvus is not supported yet"),
    ("qdrant", "{collection: docs}", "backend qdrant is not supported yet"),
    ("vectorstore", "{vector_store_id: vs_1}", "backend vectorstore is not supported yet"),
    ("mcp", "{server_name: docs, tool_name: search}", "mcp needs endpoint"),
    ("external_api", "{endpoint: 'http://127.0.0.1:9/x', request_format: custom}", "needs a request_template"),
])
def test_refused_backends(tmp_path, backend, config, needle):
    doc = config_yaml(free_port(), [model_yaml("m1", ["127.0.0.1:9"])], default="m1") + f"""
routing:
  signals:
    keywords: [{{name: k, operator: OR, keywords: ["x"]}}]
  decisions:
    - name: d
      priority: 1
      rules: {{operator: OR, conditions: [{{type: keyword, name: k}}]}}
      modelRefs: [{{model: m1}}]
      plugins:
        - type: rag
          configuration: {{backend: {backend}, backend_config: {config}}}
"""
    p = tmp_path / "c.yaml"
    p.write_text(doc)
    out = subprocess.run([VSR_BIN, "config", "validate", str(p)], capture_output=True, text=True)
    assert out.returncode != 0
    assert needle in out.stdout + out.stderr, out.stdout + out.stderr


def test_pinecone_and_weaviate_send_the_query_embedding(vsr, fakellm):
    """pinecone and weaviate search by vector: the runtime (its hash embedder here) embeds the query first."""
    srv = RagServer(DOCS)
    try:
        a = fakellm("a")
        port = free_port()
        cfg = config_yaml(port, [model_yaml("m1", [a.endpoint])], default="m1",
                          global_extra="  model_catalog:\n    runtime:\n      embedder: hash\n") + f"""
routing:
  signals:
    keywords:
      - {{name: pc, operator: OR, keywords: ["pine"]}}
      - {{name: wv, operator: OR, keywords: ["weav"]}}
  decisions:
    - name: pine
      priority: 2
      rules: {{operator: OR, conditions: [{{type: keyword, name: pc}}]}}
      modelRefs: [{{model: m1}}]
      plugins:
        - type: rag
          configuration:
            backend: external_api
            top_k: 4
            on_failure: block
            backend_config: {{endpoint: "{srv.url}/query", request_format: pinecone, api_key: pk, auth_header: Api-Key}}
    - name: weav
      priority: 1
      rules: {{operator: OR, conditions: [{{type: keyword, name: wv}}]}}
      modelRefs: [{{model: m1}}]
      plugins:
        - type: rag
          configuration:
            backend: external_api
            on_failure: block
            backend_config: {{endpoint: "{srv.url}/v1/graphql", request_format: weaviate}}
"""
        v = vsr(cfg, port=port)
        r = chat(v, [{"role": "user", "content": "pine: where is the Seine"}])
        assert r.headers.get("x-vsr-rag") == "injected", r.text
        assert sent(r)["messages"][-1]["content"] == JOINED
        body = srv.requests[-1]["body"]
        assert body["topK"] == 4 and body["includeMetadata"] is True and body["filter"] == {}
        assert len(body["vector"]) == 512 and all(isinstance(x, (int, float)) for x in body["vector"])
        assert any(x != 0 for x in body["vector"])
        assert srv.requests[-1]["headers"]["api-key"] == "Bearer pk"
        r = chat(v, [{"role": "user", "content": "weav: where is the Seine"}])
        assert sent(r)["messages"][-1]["content"] == JOINED
        q = srv.requests[-1]["body"]["query"]
        assert q.startswith("{ Get { Document(nearVector: {vector: [") and "} limit: 5) { content" in q, q
    finally:
        srv.close()


def test_a_client_that_leaves_during_retrieval(rag):
    """The retrieval is cancelled with the request: vsr goes on serving (and exits clean, which the fixture checks)."""
    import httpx
    rag.srv.delay = 1.5
    with pytest.raises(httpx.TimeoutException):
        with rag.client(timeout=0.3) as c:
            c.post("/v1/chat/completions", json={"model": "auto",
                                                 "messages": [{"role": "user", "content": "elastic: slow"}]})
    rag.srv.delay = 0
    assert sent(chat(rag, [{"role": "user", "content": "elastic: fast"}]))["messages"][-1]["content"] == JOINED


@pytest.mark.parametrize("path,body", [
    ("/v1/messages", {"model": "auto", "max_tokens": 16, "messages": [{"role": "user", "content": "elastic: via messages"}]}),
    ("/v1/responses", {"model": "auto", "input": "elastic: via responses"}),
])
def test_messages_and_responses_clients_retrieve_too(rag, path, body):
    with rag.client() as c:
        r = c.post(path, json=body, headers={"x-vsr-debug": "true"})
    assert r.status_code == 200, r.text
    assert r.headers["x-vsr-rag"] == "injected"
    assert rag.srv.requests[-1]["body"]["query"]["match"]["content"].startswith("elastic: via")


def test_a_reload_moves_the_retrieval_to_the_new_endpoint(rag):
    """The backend's endpoint is a cluster of the snapshot: a new document's endpoint is called after a reload."""
    from conftest import wait_until
    other = RagServer(["from the other index"])
    try:
        text = rag.config_path.read_text()
        rag.config_path.write_text(text.replace(f'"{rag.srv.url}/docs/_search"\n', f'"{other.url}/docs/_search"\n', 1))

        def moved():
            r = chat(rag, [{"role": "user", "content": "elastic: after the reload"}])
            return r.status_code == 200 and int(r.headers["x-vsr-config-version"]) >= 2 and \
                sent(r)["messages"][-1]["content"] == "from the other index"
        wait_until(moved, timeout=15, what="the reload to move the retrieval")
        assert other.requests and other.requests[-1]["path"] == "/docs/_search"
    finally:
        other.close()
