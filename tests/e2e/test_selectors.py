"""Single-call selectors end to end (ref §3.8): latency_aware and
multi_factor choose among a decision's candidates from vsr's live per-model
statistics, which /metrics and the management API expose.  One fakellm
plays three models of different speed (--model-delay-ms, keyed by
provider_model_id) and the document prices them differently."""
import json
import subprocess

import httpx
import pytest

from conftest import VSR_BIN, free_port

# logical name -> (provider_model_id, delay before the head in ms, prompt price per 1M, quality)
MODELS = {
    "m-fast": ("fast-v1", 5, 10.0, 0.9),
    "m-mid": ("mid-v1", 120, 1.0, 0.7),
    "m-slow": ("slow-v1", 400, 0.1, 0.5),
}
CC = "/v1/chat/completions"
ASK = {"model": "auto", "messages": [{"role": "user", "content": "pick one for me"}]}


def doc(port, admin, endpoint, refs, algorithm):
    models = "\n".join(
        f'    - {{name: {n}, provider_model_id: {pid}, backend_refs: [{{name: b, endpoint: "{endpoint}"}}],'
        f' pricing: {{currency: USD, prompt_per_1m: {price}, completion_per_1m: {price * 2}}}}}'
        for n, (pid, _, price, _) in MODELS.items())
    cards = "\n".join(f"    - {{name: {n}, quality_score: {q}}}" for n, (_, _, _, q) in MODELS.items())
    ref_list = ", ".join(f"{{model: {r}}}" for r in refs)
    return f"""version: v0.3
listeners:
  - {{name: l, address: 127.0.0.1, port: {port}, timeout: 60s}}
providers:
  defaults: {{model: m-mid}}
  models:
{models}
routing:
  modelCards:
{cards}
  decisions:
    - name: pick
      modelRefs: [{ref_list}]
      algorithm: {json.dumps(algorithm)}
global:
  services:
    management_api: {{port: {admin}}}
"""


@pytest.fixture
def selector(vsr, fakellm):
    def make(refs, algorithm, workers=2):
        args = []
        for pid, delay, _, _ in MODELS.values():
            args += ["--model-delay-ms", f"{pid}={delay}", "--model-text", f"{pid}=answer from {pid}"]
        be = fakellm("llm", args=args)
        port, admin = free_port(), free_port()
        v = vsr(doc(port, admin, be.endpoint, refs, algorithm), port=port, workers=workers)
        v.admin = f"http://127.0.0.1:{admin}"
        return v
    return make


def chat(v, body=None, headers=None):
    r = httpx.post(v.url + CC, json=body or ASK, headers=headers or {}, timeout=60)
    assert r.status_code == 200, r.text
    return r


def warm(v, n=4, stream=True):
    """Requests by model name: they feed the statistics of each model."""
    for name in MODELS:
        for _ in range(n):
            r = httpx.post(v.url + CC, json={"model": name, "stream": stream,
                                             "stream_options": {"include_usage": True},
                                             "messages": [{"role": "user", "content": "warm up"}]}, timeout=60)
            assert r.status_code == 200, r.text


def preview(v):
    r = httpx.post(v.admin + "/api/v1/routing/preview", json={"model": "auto", "text": "pick one"}, timeout=30)
    assert r.status_code == 200, r.text
    return r.json()


LATENCY = {"type": "latency_aware", "latency_aware": {"ttft_percentile": 95}}


def test_latency_aware_without_statistics_takes_the_first_candidate(selector):
    v = selector(["m-slow", "m-mid", "m-fast"], LATENCY)
    r = chat(v)
    assert r.headers["x-vsr-selected-model"] == "m-slow"
    assert r.headers["x-vsr-selected-algorithm"] == "latency_aware"
    assert "no latency statistics" in r.headers["x-vsr-selection-warning"]


def test_latency_aware_picks_the_lowest_ttft_and_reports_every_score(selector):
    v = selector(["m-slow", "m-mid", "m-fast"], LATENCY)
    warm(v)
    r = chat(v, headers={"x-vsr-debug": "true"})
    assert r.headers["x-vsr-selected-model"] == "m-fast"
    assert "x-vsr-selection-warning" not in r.headers
    scores = dict(kv.split("=") for kv in r.headers["x-vsr-selection-scores"].split(","))
    assert set(scores) == set(MODELS)
    assert float(scores["m-fast"]) == 1.0  # relative to the best
    assert float(scores["m-slow"]) > float(scores["m-mid"]) > 1.0
    sel = preview(v)["decision_result"]["selection"]
    assert sel["algorithm"] == "latency_aware" and sel["selected_model"] == "m-fast" and sel["warning"] is None
    got = {c["model"]: c["score"] for c in sel["candidates"]}
    assert got["m-fast"] == 1.0 and got["m-slow"] > got["m-mid"] > 1.0, sel


def test_multi_factor_sends_traffic_to_the_cheapest_model_within_the_slo(selector):
    algo = {"type": "multi_factor",
            "multi_factor": {"weights": {"cost": 0.8, "latency": 0.2}, "slo": {"max_ttft_ms": 300}}}
    v = selector(["m-fast", "m-mid", "m-slow"], algo)
    warm(v)
    r = chat(v)
    assert r.headers["x-vsr-selected-model"] == "m-mid"  # m-slow is cheaper but over the SLO
    sel = preview(v)["decision_result"]["selection"]
    cands = {c["model"]: c for c in sel["candidates"]}
    assert cands["m-slow"]["score"] is None and "max_ttft_ms" in cands["m-slow"]["excluded"], sel
    assert cands["m-mid"]["score"] > cands["m-fast"]["score"], sel


def test_multi_factor_on_no_candidates_and_on_error(selector):
    slo = {"max_ttft_ms": 1}  # nobody meets it once measured
    v = selector(["m-mid", "m-slow"], {"type": "multi_factor", "on_error": "fail",
                                       "multi_factor": {"slo": slo, "on_no_candidates": "fail"}})
    warm(v, n=3)
    r = httpx.post(v.url + CC, json=ASK, timeout=60)
    assert r.status_code == 503, r.text
    assert r.json()["error"]["code"] == "selection_failed"


def test_multi_factor_selector_failure_falls_back_to_the_first_candidate(selector):
    slo = {"max_ttft_ms": 1}
    v = selector(["m-mid", "m-slow"], {"type": "multi_factor",
                                       "multi_factor": {"slo": slo, "on_no_candidates": "fail"}})
    warm(v, n=3)
    r = chat(v)
    assert r.headers["x-vsr-selected-model"] == "m-mid"
    assert "the first candidate" in r.headers["x-vsr-selection-warning"]


def test_multi_factor_cheapest_when_every_candidate_is_over_the_slo(selector):
    v = selector(["m-fast", "m-mid", "m-slow"], {"type": "multi_factor", "multi_factor": {"slo": {"max_ttft_ms": 1}}})
    warm(v, n=3)
    r = chat(v)
    assert r.headers["x-vsr-selected-model"] == "m-slow"
    assert "cheapest" in r.headers["x-vsr-selection-warning"]


def test_latency_aware_tries_a_candidate_without_statistics(selector):
    v = selector(["m-slow", "m-mid", "m-fast"], LATENCY)
    for _ in range(3):  # only m-slow has statistics
        chat(v, body={"model": "m-slow", "messages": ASK["messages"]})
    got = [chat(v).headers["x-vsr-selected-model"] for _ in range(4)]
    assert got[:2] == ["m-mid", "m-fast"]  # each tried once, then ranked
    assert got[2:] == ["m-fast", "m-fast"]


def test_minimum_candidates(selector):
    v = selector(["m-slow", "m-mid", "m-fast"], {"type": "multi_factor", "minimum_candidates": 3,
                                                 "multi_factor": {"slo": {"max_ttft_ms": 300}}})
    warm(v, n=3)  # m-slow is over the SLO: two candidates left
    r = chat(v)
    assert r.headers["x-vsr-selected-model"] == "m-slow"
    assert "minimum_candidates" in r.headers["x-vsr-selection-warning"]


def test_statistics_in_metrics_and_the_management_api(selector):
    v = selector(["m-slow", "m-fast"], LATENCY)
    warm(v, n=3)
    stats = httpx.get(v.admin + "/api/v1/models/stats", timeout=10).json()
    by = {m["model"]: m for m in stats["models"]}
    assert set(by) == set(MODELS)
    assert by["m-slow"]["window_requests"] == 3 and by["m-slow"]["inflight"] == 0
    assert by["m-slow"]["ttft_ms"]["p50"] > 300 > by["m-fast"]["ttft_ms"]["p95"]
    assert by["m-fast"]["tpot_ms"] is not None
    assert by["m-fast"]["completion_tokens"] > 0
    # cost = tokens x the model's pricing
    fast = by["m-fast"]
    expect = (fast["prompt_tokens"] * 10.0 + fast["completion_tokens"] * 20.0) / 1e6
    assert abs(fast["cost"] - expect) < 1e-9, fast
    text = httpx.get(v.metrics_url, timeout=10).text
    assert 'vsr_model_ttft_seconds{model="m-slow",quantile="0.95"}' in text
    assert 'vsr_model_inflight{model="m-fast"} 0' in text
    assert 'vsr_model_observed_tokens_total{model="m-fast",type="completion"}' in text


def test_selector_blocks_refuse_bad_values(tmp_path):
    bad = doc(free_port(), free_port(), "127.0.0.1:1", ["m-fast", "m-mid"],
              {"type": "latency_aware", "latency_aware": {"ttft_percentile": 101}})
    p = tmp_path / "bad.yaml"
    p.write_text(bad)
    r = subprocess.run([VSR_BIN, "config", "validate", str(p)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "ttft_percentile" in r.stdout + r.stderr, r.stdout + r.stderr
    p.write_text(bad.replace('"ttft_percentile": 101', '"ttft_percentile": 90'))
    r = subprocess.run([VSR_BIN, "config", "validate", str(p)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
