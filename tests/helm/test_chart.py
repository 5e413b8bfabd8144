"""Properties of the rendered deploy/helm/vsr chart (helm template)."""
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

CHART = Path(__file__).resolve().parents[2] / "deploy" / "helm" / "vsr"
HELM = os.environ.get("HELM") or shutil.which("helm")
if not HELM:
    if os.environ.get("CI") == "true":
        raise RuntimeError("helm not found (set HELM or run scripts/fetch-helm); CI must not skip the chart tests")
    pytest.skip("helm not found: set HELM=... (scripts/fetch-helm prints it)", allow_module_level=True)


def render(*sets, values=None):
    args = [HELM, "template", "t", str(CHART), "--namespace", "router"]
    if values:
        args += ["--values", str(values)]
    for s in sets:
        args += ["--set", s]
    out = subprocess.run(args, check=True, capture_output=True, text=True).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def kind(docs, k):
    return [d for d in docs if d["kind"] == k]


def vsr_container(docs):
    dep = [d for d in kind(docs, "Deployment") if not d["metadata"]["name"].endswith("-redis")]
    assert len(dep) == 1
    return dep[0], dep[0]["spec"]["template"]["spec"]["containers"][0]


def test_standalone_defaults():
    docs = render()
    dep, c = vsr_container(docs)
    args = c["args"]
    assert args[args.index("--gateway") + 1] == "standalone"
    assert "--extproc-listen" not in args
    assert args[args.index("--metrics-listen") + 1] == "0.0.0.0:9190"
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert ports == {"http": 8899, "metrics": 9190}
    assert c["readinessProbe"]["httpGet"] == {"path": "/ready", "port": "metrics"}
    assert c["livenessProbe"]["httpGet"] == {"path": "/health", "port": "metrics"}
    sc = c["securityContext"]
    assert sc["runAsUser"] == 65532 and sc["runAsGroup"] == 65532 and sc["runAsNonRoot"] is True
    assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"]["drop"] == ["ALL"] and sc["seccompProfile"]["type"] == "RuntimeDefault"
    assert c["image"].startswith("vsr:") and c["imagePullPolicy"] == "IfNotPresent"
    # the ConfigMap is a directory mount (no subPath), so updates reach the file
    mount = [m for m in c["volumeMounts"] if m["name"] == "config"][0]
    assert mount["mountPath"] == "/etc/vsr" and "subPath" not in mount
    assert args[args.index("--config") + 1] == "/etc/vsr/config.yaml"
    cfg = yaml.safe_load(kind(docs, "ConfigMap")[0]["data"]["config.yaml"])
    assert cfg["listeners"][0]["address"] == "0.0.0.0"
    assert "global" not in cfg or "response_cache" not in cfg["global"].get("stores", {})
    assert not [d for d in docs if d["metadata"]["name"].endswith("-redis")]
    assert kind(docs, "PodDisruptionBudget") and not kind(docs, "HorizontalPodAutoscaler")


def test_extproc_mode():
    docs = render("gateway.mode=extproc", "extproc.networkPolicy.enabled=true")
    _, c = vsr_container(docs)
    args = c["args"]
    assert args[args.index("--gateway") + 1] == "extproc"
    assert args[args.index("--extproc-listen") + 1] == "0.0.0.0:50051"
    svc = kind(docs, "Service")[0]
    assert {p["name"]: p["port"] for p in svc["spec"]["ports"]} == {"extproc": 50051, "metrics": 9190}
    np = kind(docs, "NetworkPolicy")[0]
    assert np["spec"]["ingress"][0]["ports"] == [{"protocol": "TCP", "port": 50051}]


def test_replicas_bring_redis_and_the_shared_store():
    docs = render("replicaCount=3")
    dep, _ = vsr_container(docs)
    assert dep["spec"]["replicas"] == 3
    redis = [d for d in docs if d["metadata"]["name"].endswith("-redis")]
    assert sorted(d["kind"] for d in redis) == ["Deployment", "Service"]
    cfg = yaml.safe_load(kind(docs, "ConfigMap")[0]["data"]["config.yaml"])
    rc = cfg["global"]["stores"]["response_cache"]
    assert rc["backend_type"] == "redis" and rc["redis"]["address"] == "t-vsr-redis:6379"


def test_external_redis_and_hpa():
    docs = render("redis.enabled=true", "redis.external.address=redis.example:6379", "autoscaling.enabled=true")
    assert not [d for d in docs if d["metadata"]["name"].endswith("-redis")]
    cfg = yaml.safe_load(kind(docs, "ConfigMap")[0]["data"]["config.yaml"])
    assert cfg["global"]["stores"]["response_cache"]["redis"]["address"] == "redis.example:6379"
    hpa = kind(docs, "HorizontalPodAutoscaler")[0]
    assert hpa["apiVersion"] == "autoscaling/v2"
    dep, _ = vsr_container(docs)
    assert "replicas" not in dep["spec"]


@pytest.mark.parametrize("sets,mode", [((), "standalone"), (("gateway.mode=extproc",), "extproc"),
                                       (("replicaCount=3",), "standalone")])
def test_rendered_config_is_valid(sets, mode, tmp_path):
    vsr = os.environ.get("VSR_BIN")
    if not vsr:
        pytest.skip("VSR_BIN not set")
    cfg = tmp_path / "config.yaml"
    cfg.write_text(kind(render(*sets), "ConfigMap")[0]["data"]["config.yaml"])
    r = subprocess.run([vsr, "config", "validate", str(cfg), "--gateway", mode], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_management_port_only_when_asked():
    assert "management" not in {p["name"] for p in kind(render(), "Service")[0]["spec"]["ports"]}
    docs = render("service.managementPort=8080")
    assert {p["name"]: p["port"] for p in kind(docs, "Service")[0]["spec"]["ports"]}["management"] == 8080
    _, c = vsr_container(docs)
    assert {p["name"]: p["containerPort"] for p in c["ports"]}["management"] == 8080


K8S_SOURCE_VALUES = Path(__file__).resolve().parent / "k8s-source-values.yaml"


def test_kubernetes_source_gets_its_rbac(tmp_path):
    """config_source: kubernetes: a service account of its own with get/list/
    watch on the reference's resources and patch on their status, in the
    release's namespace; nothing of the kind otherwise."""
    docs = render()
    assert not kind(docs, "Role") and not kind(docs, "RoleBinding") and not kind(docs, "ServiceAccount")
    dep, _ = vsr_container(docs)
    assert "serviceAccountName" not in dep["spec"]["template"]["spec"]

    docs = render(values=K8S_SOURCE_VALUES)
    dep, _ = vsr_container(docs)
    pod = dep["spec"]["template"]["spec"]
    sa = kind(docs, "ServiceAccount")
    assert [a["metadata"]["name"] for a in sa] == ["t-vsr"]
    assert pod["serviceAccountName"] == "t-vsr" and pod["automountServiceAccountToken"] is True
    role, = kind(docs, "Role")
    rules = {(tuple(r["apiGroups"]), tuple(sorted(r["resources"]))): sorted(r["verbs"]) for r in role["rules"]}
    assert rules == {
        (("vllm.ai",), ("intelligentpools", "intelligentroutes")): ["get", "list", "watch"],
        (("vllm.ai",), ("intelligentpools/status", "intelligentroutes/status")): ["get", "patch"],
    }
    rb, = kind(docs, "RoleBinding")
    assert rb["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "t-vsr"}
    assert rb["subjects"] == [{"kind": "ServiceAccount", "name": "t-vsr", "namespace": "router"}]
    assert not kind(docs, "ClusterRole")
    vsr = os.environ.get("VSR_BIN")
    if vsr:
        cfg = tmp_path / "config.yaml"
        cfg.write_text(kind(docs, "ConfigMap")[0]["data"]["config.yaml"])
        r = subprocess.run([vsr, "config", "validate", str(cfg)], capture_output=True, text=True)
        assert r.returncode == 0, r.stdout + r.stderr
