"""`vsr config validate` says where a document stands: errors, then warnings
(accepted keys with no effect, deprecated keys), then keys not supported yet,
each at FILE:LINE:COL; --strict fails on warnings and unsupported keys."""
import re
import subprocess

from conftest import ENV, VSR_BIN

HEAD = """version: v0.3
listeners:
  - {name: http, address: 127.0.0.1, port: 8899}
providers:
  models:
    - name: chat
      backend_refs:
        - endpoint: 127.0.0.1:18000
"""

DECISION = """routing:
  decisions:
    - name: d
      priority: 1
      rules: {operator: AND, conditions: []}
      modelRefs: [{model: chat, reasoning_mode: auto}]
"""

NOTES = DECISION + """global:
  stores:
    semantic_cache: {backend_type: memory}
  services:
    observability:
      profiling: {enabled: true, port: 6060}
"""


def validate(tmp_path, text, *args):
    p = tmp_path / "doc.yaml"
    p.write_text(text)
    return p, subprocess.run([VSR_BIN, "config", "validate", *args, str(p)], capture_output=True, text=True,
                             env=ENV, timeout=60)


def kinds(stderr, path):
    """The category of each stderr line that starts with FILE:LINE:COL."""
    out = []
    for line in stderr.splitlines():
        m = re.match(re.escape(str(path)) + r":(\d+):(\d+): (.*)", line)
        if not m:
            continue
        msg = m.group(3)
        out.append("warning" if msg.startswith("warning: ") else
                   "unsupported" if msg.startswith("not supported yet: ") else "error")
    return out


def test_warnings_then_unsupported_with_positions(tmp_path):
    p, r = validate(tmp_path, HEAD + NOTES)
    assert r.returncode == 0, r.stderr
    assert "valid" in r.stdout
    assert f"{p}:17:5: warning: global.stores.semantic_cache is deprecated" in r.stderr
    assert f"{p}:20:7: warning: global.services.observability.profiling is accepted and has no effect" in r.stderr
    assert f"{p}:14:33: not supported yet: routing.decisions[].modelRefs[].reasoning_mode" in r.stderr
    assert kinds(r.stderr, p) == ["warning", "warning", "unsupported"]


def test_errors_come_first(tmp_path):
    p, r = validate(tmp_path, HEAD + NOTES.replace("      priority: 1\n", "      priorty: 1\n"))
    assert r.returncode == 2
    assert f'{p}:12:7: unknown key "priorty"; did you mean "priority"?' in r.stderr
    assert kinds(r.stderr, p) == ["error", "warning", "warning", "unsupported"]


def test_strict_fails_on_warnings(tmp_path):
    p, r = validate(tmp_path, HEAD + NOTES, "--strict")
    assert r.returncode == 2
    assert "not valid with --strict" in r.stderr
    assert "valid (" not in r.stdout


def test_strict_fails_on_unsupported(tmp_path):
    p, r = validate(tmp_path, HEAD + DECISION, "--strict")
    assert r.returncode == 2, r.stderr
    assert kinds(r.stderr, p) == ["unsupported"]


def test_strict_passes_a_clean_document(tmp_path):
    p, r = validate(tmp_path, HEAD + DECISION.replace(", reasoning_mode: auto", ""), "--strict")
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""
    assert "valid (1 listener, 1 model)" in r.stdout


def test_one_warning_per_key(tmp_path):
    """An inert key repeated in every item of a list is said once."""
    text = HEAD + DECISION.replace(", reasoning_mode: auto", "") + """  modelCards:
    - {name: chat, family: a}
    - {name: other, family: b}
"""
    text = text.replace("    - name: chat\n      backend_refs:", "    - name: other\n      backend_refs:\n"
                        "        - endpoint: 127.0.0.1:18001\n    - name: chat\n      backend_refs:")
    p, r = validate(tmp_path, text)
    assert r.returncode == 0, r.stderr
    assert r.stderr.count("routing.modelCards[].family is accepted") == 1


def test_inert_keys_are_type_checked(tmp_path):
    """An inert key is still checked: a Redis pool size must be an integer."""
    text = HEAD + DECISION.replace(", reasoning_mode: auto", "") + """global:
  services:
    response_api:
      redis: {pool_size: ten}
"""
    p, r = validate(tmp_path, text)
    assert r.returncode == 2
    assert f"{p}:18:26: expected an integer, got a string" in r.stderr


def test_redis_tls_is_refused_not_ignored(tmp_path):
    """TLS to Redis would send the password in clear text if ignored: refused;
    cluster_mode without addresses is an error at its place, not a silent
    single node."""
    text = HEAD + DECISION.replace(", reasoning_mode: auto", "") + """global:
  services:
    response_api:
      redis: {address: "127.0.0.1:6379", cluster_mode: true, tls_enabled: true}
"""
    p, r = validate(tmp_path, text)
    assert r.returncode == 2
    assert "cluster_mode needs cluster_addresses" in r.stderr
    assert "tls_enabled is not supported yet" in r.stderr


def test_endpoint_scheme_and_path_are_said(tmp_path):
    """An endpoint's scheme wins over a protocol that says otherwise, and a
    dropped path is said once, both at their places."""
    text = HEAD.replace("        - endpoint: 127.0.0.1:18000\n",
                        "        - {endpoint: \"https://api.example.com:443/v1\", protocol: http}\n") + DECISION
    p, r = validate(tmp_path, text)
    assert r.returncode == 0, r.stderr
    assert f'{p}:8:22: warning: endpoint "https://api.example.com:443/v1": the path "/v1" is ignored' in r.stderr
    assert f"{p}:8:66: warning: protocol: http is overridden by the endpoint's https:// scheme" in r.stderr
    p, r = validate(tmp_path, text, "--strict")
    assert r.returncode != 0
    p, r = validate(tmp_path, text.replace("https://", "ftp://"))
    assert r.returncode == 2
    assert f'{p}:8:22: invalid endpoint "ftp://api.example.com:443/v1": the scheme must be http:// or https://' \
        in r.stderr


def test_kb_from_source_is_not_supported_yet_at_its_key(tmp_path):
    """The reference's kb read from files (labels.json under source.path):
    said at the source key, not refused as a kb without entries."""
    p, r = validate(tmp_path, HEAD + """global:
  model_catalog:
    kbs:
      - name: privacy_kb
        source:
          path: knowledge_bases/privacy/
          manifest: labels.json
""")
    assert r.returncode == 0, r.stderr
    assert f"{p}:13:9: not supported yet: global.model_catalog.kbs[].source" in r.stderr
    assert "needs entries" not in r.stderr
    assert kinds(r.stderr, p) == ["unsupported"]


def test_https_remote_embeddings_is_said_not_supported_yet_at_its_place(tmp_path):
    """A capability vsr lacks is named as one, with its path and place."""
    p, r = validate(tmp_path, HEAD + """global:
  model_catalog:
    embeddings:
      semantic:
        endpoint:
          base_url: https://api.example.com/v1
          model: text-embedding-3-small
""")
    assert r.returncode == 2, r.stderr
    assert (f"{p}:14:21: global.model_catalog.embeddings.semantic.endpoint.base_url: https is not supported yet "
            "for remote embeddings") in r.stderr, r.stderr
