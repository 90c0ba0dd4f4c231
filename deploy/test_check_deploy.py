"""check_deploy.py must reject what is wrong: each case breaks one thing in a copy of the
repository's deploy files (a misspelt field, a wrong type or enum value, a selector that misses
the pods, a grace period shorter than the drain, a metric kiln does not export...) and requires
check_deploy.py to fail naming it; the unbroken copy must pass. Run by `make deploy-check`
(pytest, with KILN_SCHEMAS naming the vendored CRDs)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CHECK = ROOT / "deploy" / "check_deploy.py"

# (file under deploy/, text to replace (exactly once), replacement, what the failure must say)
CASES = [
    ("k8s/gateway/inferencepool.yaml", "endpointPickerRef:", "endpointPickRef:", "'endpointPickRef' was unexpected"),
    ("k8s/gateway/inferencepool.yaml", "failureMode: FailOpen", "failureMode: Open", "'Open' is not one of"),
    ("k8s/gateway/inferencepool.yaml", "- number: 8080", "- number: 9000", "target port 9000 is no kiln port"),
    ("k8s/gateway/httproute.yaml", "request: 600s", "request: 10 minutes", "timeouts.request"),
    ("k8s/gateway/epp-config.yaml", "dataLayer:", "data:", "'data' was unexpected"),
    ("k8s/gateway/epp-config.yaml", "- type: max-score-picker", "- type: max-score-pickr", "'max-score-pickr' is not one of"),
    ("k8s/gateway/epp-config.yaml", "kvUsageSpec: kiln_kv_cache_usage_ratio", "kvUsageSpec: vllm:kv_cache_usage_perc",
     "kvUsageSpec 'vllm:kv_cache_usage_perc' is not a metric family kiln exports"),
    ("k8s/gateway/epp-config.yaml", "path: /metrics", "paht: /metrics", "'paht' was unexpected"),
    ("k8s/deployment.yaml", "terminationGracePeriodSeconds: 45", "terminationGracePeriodSeconds: 20",
     "terminationGracePeriodSeconds 20 < preStop 10 + drain_timeout 30"),
    ("k8s/deployment.yaml", "periodSeconds: 5", "periodSecs: 5", "periodSecs"),
    ("k8s/deployment.yaml", "memory: 1Gi\n            limits", "memory: lots\n            limits",
     "container kiln: 'lots' is not a resource quantity"),
    ("k8s/deployment.yaml", "limits:\n              cpu: \"2\"", "limits:\n              cpu: \"1\"",
     "container kiln: the cpu request exceeds its limit"),
    ("k8s/deployment.yaml", "path: /ready", "path: /readyz", "readinessProbe must GET /ready"),
    ("k8s/deployment.yaml", "containerPort: 8080", "containerPort: 8081", "the container's port `http` is 8081"),
    ("k8s/service.yaml", "app.kubernetes.io/component: server", "app.kubernetes.io/component: api",
     "Service kiln selects no kiln pod"),
    ("k8s/pdb.yaml", "maxUnavailable: 1", "maxUnavailable: [1]", "PodDisruptionBudget (Kubernetes"),
    ("k8s/servicemonitor.yaml", "interval: 15s", "interval: 15 seconds", "ServiceMonitor: spec.endpoints.0.interval"),
    ("k8s/servicemonitor.yaml", "port: http", "port: metrics", "is not kiln's /metrics"),
    ("k8s/scaledobject.yaml", "minReplicaCount: 2", 'minReplicaCount: "two"', "ScaledObject: spec.minReplicaCount"),
    ("k8s/scaledobject.yaml", "sum(kiln_requests_waiting{", "sum(kiln_queue_length{",
     "reads kiln_queue_length, which kiln does not export"),
    ("k8s/scaledobject.yaml", 'namespace="kiln"})', 'namespace="kiln"}', "promtool cannot parse the ScaledObject's query"),
    ("k8s/kustomization.yaml", "- pdb.yaml", "- pdbs.yaml", "kustomize failed"),
    ("compose.yaml", "stop_grace_period: 35s", "stop_grace: 35s", "'stop_grace' was unexpected"),
    ("compose.yaml", "stop_grace_period: 35s", "stop_grace_period: 20s", "does not exceed drain_timeout"),
    ("compose.yaml", "  blackbox:", "  blackbox-exporter:", "blackbox:9115 (Prometheus or Grafana configuration) names no service"),
    ("prometheus/prometheus.yml", '"alertmanager:9093"', '"alertmanagr:9093"', "alertmanagr:9093 (Prometheus or Grafana"),
    ("compose.yaml", "./grafana/dashboards:", "./grafana/dashboard:", "./grafana/dashboard does not exist"),
]


def schemas() -> Path:
    path = os.environ.get("KILN_SCHEMAS")
    if not path or not Path(path).is_dir():
        raise FileNotFoundError(f"KILN_SCHEMAS ({path}) is not a directory: the vendored CRDs "
                                "(deploy/k8s/schemas/README.md); `make deploy-check` sets it")
    return Path(path)


@pytest.fixture
def copy(tmp_path) -> Path:
    """The files check_deploy.py reads, copied: deploy/, config/, names.rs, an empty models/."""
    shutil.copytree(ROOT / "deploy", tmp_path / "deploy",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "config", tmp_path / "config")
    (tmp_path / "src" / "metrics").mkdir(parents=True)
    shutil.copy(ROOT / "src" / "metrics" / "names.rs", tmp_path / "src" / "metrics")
    (tmp_path / "models").mkdir()
    return tmp_path


def run_check(root: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(CHECK), "--root", str(root), "--schemas", str(schemas())],
                          capture_output=True, text=True, timeout=300)


def test_the_unbroken_copy_passes(copy):
    out = run_check(copy)
    assert out.returncode == 0, out.stderr


@pytest.mark.parametrize("name,old,new,message", CASES, ids=[f"{c[0]}:{c[2]}" for c in CASES])
def test_a_broken_copy_is_rejected(copy, name, old, new, message):
    path = copy / "deploy" / name
    text = path.read_text()
    assert text.count(old) == 1, f"{name}: {old!r} occurs {text.count(old)} times"
    path.write_text(text.replace(old, new))
    out = run_check(copy)
    assert out.returncode == 1, f"accepted with {new!r}:\n{out.stdout}{out.stderr}"
    assert message in out.stderr, out.stderr
