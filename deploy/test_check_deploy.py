"""check_deploy.py must reject what is wrong: each case breaks one thing in a copy of the
repository's deploy files (a misspelt field, a wrong type or enum value, a selector that misses
the pods, a grace period shorter than the drain, a metric kiln does not export...) and requires
check_deploy.py to fail naming it; the unbroken copy must pass. Custom resources are checked
against kiln's transcribed schemas (deploy/k8s/schemas) always, and against the published CRDs
too when KILN_SCHEMAS holds them: a schema case must then be rejected by both, and the
transcription is compared field by field with the CRD it transcribes. Without them those tests
are skipped, saying so. Run by `make deploy-check` (pytest)."""
from __future__ import annotations

from copy import deepcopy
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
CHECK = ROOT / "deploy" / "check_deploy.py"
_spec = importlib.util.spec_from_file_location("check_deploy", CHECK)
check_deploy = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(check_deploy)
CRDS = check_deploy.CRDS
SCHEMAS = ROOT / check_deploy.SCHEMAS


def published_crds() -> Path | None:
    """KILN_SCHEMAS when it holds every published CRD file check_deploy.py knows, else None."""
    path = os.environ.get("KILN_SCHEMAS")
    if path and all((Path(path) / crd).is_file() for _, _, crd, _ in CRDS.values()):
        return Path(path)
    return None


PUBLISHED = published_crds()
needs_published = pytest.mark.skipif(
    PUBLISHED is None, reason="the published CRDs are not in KILN_SCHEMAS (deploy/k8s/schemas/README.md): "
                              "the transcribed schemas were checked alone")

# (file under deploy/, text to replace (exactly once), replacement, what the failure must say).
# {src} in the message: a schema error, which the transcribed schema must report and, when
# KILN_SCHEMAS holds the published CRDs, the published CRD too.
CASES = [
    ("k8s/gateway/inferencepool.yaml", "endpointPickerRef:", "endpointPickRef:",
     "InferencePool ({src}): spec: Additional properties are not allowed ('endpointPickRef' was unexpected)"),
    ("k8s/gateway/inferencepool.yaml", "  appProtocol: http", "  appProtocol: http\n  loadBalancing: least-queue",
     "InferencePool ({src}): spec: Additional properties are not allowed ('loadBalancing' was unexpected)"),
    ("k8s/gateway/inferencepool.yaml", "failureMode: FailOpen", "failureMode: Open",
     "InferencePool ({src}): spec.endpointPickerRef.failureMode: 'Open' is not one of"),
    ("k8s/gateway/inferencepool.yaml", "- number: 8080", "- number: 9000", "target port 9000 is no kiln port"),
    # The CRD's CEL rules, which the API server evaluates: only the transcription states them.
    ("k8s/gateway/inferencepool.yaml", "- number: 8080", "- number: 8080\n    - number: 8080",
     "InferencePool (transcribed schema): spec.targetPorts: [{'number': 8080}, {'number': 8080}] has non-unique elements"),
    ("k8s/gateway/inferencepool.yaml", "    port:\n      number: 9002\n", "",
     "InferencePool (transcribed schema): spec.endpointPickerRef: 'port' is a required property"),
    ("k8s/gateway/httproute.yaml", "request: 600s", "request: 10 minutes",
     "HTTPRoute ({src}): spec.rules.0.timeouts.request: '10 minutes' does not match"),
    ("k8s/gateway/httproute.yaml", "          kind: InferencePool\n          name: kiln\n", "          kind: InferencePool\n",
     "HTTPRoute ({src}): spec.rules.0.backendRefs.0: 'name' is a required property"),
    ("k8s/gateway/httproute.yaml", "            value: /v1", "            value: v1",
     "HTTPRoute (transcribed schema): spec.rules.0.matches.0.path.value: 'v1' does not match '^/'"),
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
    ("k8s/servicemonitor.yaml", "interval: 15s", "interval: 15 seconds",
     "ServiceMonitor ({src}): spec.endpoints.0.interval: '15 seconds' does not match"),
    ("k8s/servicemonitor.yaml", "port: http", "port: metrics", "is not kiln's /metrics"),
    ("k8s/servicemonitor.yaml", "port: http", "port: 8080",
     "ServiceMonitor ({src}): spec.endpoints.0.port: 8080 is not of type 'string'"),
    ("k8s/scaledobject.yaml", "minReplicaCount: 2", 'minReplicaCount: "two"',
     "ScaledObject ({src}): spec.minReplicaCount: 'two' is not of type 'integer'"),
    ("k8s/scaledobject.yaml", "    - type: prometheus\n      metadata:", "    - metadata:",
     "ScaledObject ({src}): spec.triggers.0: 'type' is a required property"),
    ("k8s/scaledobject.yaml", "  minReplicaCount: 2", "  minReplicaCount: 2\n  minReplicas: 2",
     "ScaledObject ({src}): spec: Additional properties are not allowed ('minReplicas' was unexpected)"),
    # No PrometheusRule case for a rule with neither record nor alert: the published CRD requires
    # only expr and cannot say "one of record and alert", so neither does its transcription.
    # Prometheus' rule parser does: `make monitoring-check` runs promtool on rules.yml and
    # alerts.yml, from which prometheusrule.yaml is generated (and gen_manifests.py --check
    # fails when the two differ).
    ("k8s/prometheusrule.yaml", "  - name: kiln-traffic\n", "  - nmae: kiln-traffic\n",
     "PrometheusRule ({src}): spec.groups.1: 'name' is a required property"),
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


def run_check(root: Path, schemas: Path | None = PUBLISHED) -> subprocess.CompletedProcess:
    """check_deploy.py on `root`, with the published CRDs of `schemas` or none."""
    env = {k: v for k, v in os.environ.items() if k != "KILN_SCHEMAS"}
    args = ["--schemas", str(schemas)] if schemas else []
    return subprocess.run([sys.executable, str(CHECK), "--root", str(root), *args],
                          capture_output=True, text=True, timeout=300, env=env)


def test_the_unbroken_copy_passes_the_transcribed_schemas_alone(copy):
    """What a clean clone runs: no published CRDs, and the check says so."""
    out = run_check(copy, schemas=None)
    assert out.returncode == 0, out.stderr
    assert "published CRDs not available" in out.stdout
    assert "transcribed schemas in deploy/k8s/schemas only" in out.stdout


@needs_published
def test_the_unbroken_copy_passes_the_published_crds_too(copy):
    out = run_check(copy, schemas=PUBLISHED)
    assert out.returncode == 0, out.stderr
    assert f"published CRDs: {len(CRDS)} of {len(CRDS)} found in {PUBLISHED} (sha256 checked)" in out.stdout


def test_a_published_crd_of_another_version_is_refused(copy, tmp_path):
    """A file in --schemas must be the one the README names: another version of it fails."""
    schemas = tmp_path / "schemas"
    schemas.mkdir()
    name = CRDS[("keda.sh", "ScaledObject")][2]
    (schemas / name).write_text("apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\n")
    out = run_check(copy, schemas=schemas)
    assert out.returncode == 1
    assert f"{name}: is not the file deploy/k8s/schemas/README.md names" in out.stderr
    assert "published CRDs not available" in out.stdout


@pytest.mark.parametrize("name,old,new,message", CASES, ids=[f"{c[0]}:{c[2]}" for c in CASES])
def test_a_broken_copy_is_rejected(copy, name, old, new, message):
    path = copy / "deploy" / name
    text = path.read_text()
    assert text.count(old) == 1, f"{name}: {old!r} occurs {text.count(old)} times"
    path.write_text(text.replace(old, new))
    out = run_check(copy)
    assert out.returncode == 1, f"accepted with {new!r}:\n{out.stdout}{out.stderr}"
    sources = [check_deploy.TRANSCRIBED] + ([check_deploy.PUBLISHED] if PUBLISHED else [])
    for source in sources if "{src}" in message else [None]:
        assert message.replace("{src}", source or "") in out.stderr, out.stderr


# --- the transcribed schemas --------------------------------------------------------------

def rendered_custom_resources() -> dict:
    """kind -> the objects of that kind kustomize renders from deploy/k8s and deploy/k8s/gateway."""
    problems = check_deploy.Problems()
    objects = [o for d in ("deploy/k8s", "deploy/k8s/gateway")
               for o in check_deploy.kustomize("kubectl", ROOT / d, problems)]
    assert not problems, problems
    kinds = {kind for _, kind in CRDS}
    return {kind: [o for o in objects if o["kind"] == kind] for kind in kinds}


def errors(validator, obj) -> list[str]:
    return [f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(obj)]


def test_the_manifests_validate_against_the_transcribed_schemas():
    problems = check_deploy.Problems()
    validators = check_deploy.transcribed_validators(ROOT, problems)
    assert not problems, problems
    rendered = rendered_custom_resources()
    for (group, kind), (version, *_) in CRDS.items():
        assert rendered[kind], f"deploy/k8s renders no {kind}: this test would prove nothing"
        for obj in rendered[kind]:
            assert obj["apiVersion"] == f"{group}/{version}"
            assert errors(validators[(group, kind, version)], obj) == [], kind


@needs_published
def test_the_manifests_validate_against_the_published_crds():
    """The transcription accepts what the real CRD accepts, for our files: both accept them."""
    problems = check_deploy.Problems()
    validators, missing = check_deploy.published_validators(PUBLISHED, problems)
    assert not problems and not missing, (problems, missing)
    rendered = rendered_custom_resources()
    for (group, kind), (version, *_) in CRDS.items():
        assert rendered[kind], f"deploy/k8s renders no {kind}: this test would prove nothing"
        for obj in rendered[kind]:
            assert errors(validators[(group, kind)][version], obj) == [], kind


def test_the_transcribed_schemas_are_schemas_naming_their_source():
    metas = []
    for (group, kind), (version, name, crd, _) in CRDS.items():
        schema = json.loads((SCHEMAS / name).read_text())
        jsonschema.Draft202012Validator.check_schema(schema)
        assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
        assert schema["properties"]["apiVersion"] == {"const": f"{group}/{version}"}
        assert schema["properties"]["kind"] == {"const": kind}
        assert re.search(r"tag v[0-9.]+ \(commit [0-9a-f]{40}\)", schema["$comment"]), name
        assert crd.removesuffix(".yaml") in schema["$comment"], name
        metas.append(schema["$defs"]["objectMeta"])
    # metadata is Kubernetes' ObjectMeta in each, the same text in all five.
    assert all(m == metas[0] for m in metas), "the objectMeta definitions differ"


def resolve(schema: dict, node):
    """node with its $ref replaced by what it names (recursively); node's own keywords win."""
    if not isinstance(node, dict) or "$ref" not in node:
        return node
    target = schema
    for part in node["$ref"].removeprefix("#/").split("/"):
        target = target[part]
    return {**resolve(schema, target), **{k: v for k, v in node.items() if k != "$ref"}}


# The keywords of the CRDs' OpenAPI schemas a transcription must repeat exactly ("format" is
# left out: int32, int64 and date-time annotate, they do not constrain in JSON Schema).
SAME = ("enum", "minimum", "maximum", "minLength", "maxLength", "minItems", "maxItems",
        "maxProperties", "pattern", "default")
# Where a transcription differs on purpose: (kind, path, keyword) -> why.
DIFFERENT = {
    ("PrometheusRule", "spec.groups[].partial_response_strategy", "pattern"):
        "the CRD's ^(?i)(abort|warn)?$ spelt without the inline flag (ECMA-262 has none)",
}


def differences(kind, schema, crd, ours, path) -> list[str]:
    """How `ours` (kiln's schema) differs from `crd` (the published OpenAPI schema) at `path`:
    types, SAME keywords, required fields, set lists, the property names at every level, and
    which objects are closed. CEL rules and what the transcription adds are not compared."""
    ours = resolve(schema, ours)
    found = []
    want = ["integer", "string"] if crd.get("x-kubernetes-int-or-string") else crd.get("type")
    if want is not None and ours.get("type") != want:
        found.append(f"{path}: type {ours.get('type')!r}, the CRD's {want!r}")
    for key in SAME:
        if (kind, path, key) in DIFFERENT or (key == "minLength" and crd.get(key) == 0 and key not in ours):
            continue
        if crd.get(key) != ours.get(key):
            found.append(f"{path}: {key} {ours.get(key)!r}, the CRD's {crd.get(key)!r}")
    if sorted(crd.get("required", [])) != sorted(ours.get("required", [])):
        found.append(f"{path}: required {ours.get('required')}, the CRD's {crd.get('required')}")
    if crd.get("x-kubernetes-list-type") == "set" and ours.get("uniqueItems") is not True:
        found.append(f"{path}: a set list without uniqueItems")
    if "properties" in crd:
        names = set(ours.get("properties", {}))
        if names != set(crd["properties"]):
            found.append(f"{path}: properties {sorted(names ^ set(crd['properties']))} differ")
        if not crd.get("x-kubernetes-preserve-unknown-fields") and ours.get("additionalProperties") is not False:
            found.append(f"{path}: open, the CRD's object is closed")
        for name in sorted(names & set(crd["properties"])):
            found += differences(kind, schema, crd["properties"][name], ours["properties"][name], f"{path}.{name}")
    elif crd.get("type") == "object" and ours.get("additionalProperties") is False:
        found.append(f"{path}: closed, the CRD's object is open")
    if isinstance(crd.get("additionalProperties"), dict):
        found += differences(kind, schema, crd["additionalProperties"], ours.get("additionalProperties", {}), f"{path}{{}}")
    if "items" in crd:
        found += differences(kind, schema, crd["items"], ours.get("items", {}), f"{path}[]")
    return found


@needs_published
@pytest.mark.parametrize("group,kind", list(CRDS), ids=[k for _, k in CRDS])
def test_the_transcription_matches_the_published_crd(group, kind):
    """Field by field, the spec of the served version: a field added, dropped, retyped or
    re-bounded upstream (or mistyped here) shows as a difference."""
    version, name, crd_file, _ = CRDS[(group, kind)]
    schema = json.loads((SCHEMAS / name).read_text())
    crd = yaml.safe_load((PUBLISHED / crd_file).read_text())
    published = next(v for v in crd["spec"]["versions"] if v["name"] == version)["schema"]["openAPIV3Schema"]
    assert set(published["properties"]) <= set(schema["properties"])
    assert set(published.get("required", [])) <= set(schema["required"])
    assert differences(kind, schema, published["properties"]["spec"], schema["properties"]["spec"], "spec") == []


@needs_published
def test_the_comparison_sees_a_mistranscription():
    """differences() is not vacuous: each kind of mistake in a copy of a transcription shows."""
    version, name, crd_file, _ = CRDS[("monitoring.coreos.com", "ServiceMonitor")]
    schema = json.loads((SCHEMAS / name).read_text())
    crd = yaml.safe_load((PUBLISHED / crd_file).read_text())
    spec = next(v for v in crd["spec"]["versions"] if v["name"] == version)["schema"]["openAPIV3Schema"]["properties"]["spec"]
    mistakes = {
        "properties ['noProxy'] differ": lambda s: s["$defs"]["endpoint"]["properties"].pop("noProxy"),
        "maxVersion: enum": lambda s: s["$defs"]["tlsVersion"]["enum"].pop(),
        "open, the CRD's object is closed": lambda s: s["$defs"]["keySelector"].pop("additionalProperties"),
        "port: type 'integer'": lambda s: s["$defs"]["endpoint"]["properties"]["port"].update(type="integer"),
        "oauth2: required": lambda s: s["$defs"]["oauth2"]["required"].remove("tokenUrl"),
        "sampleLimit: minimum None": lambda s: s["properties"]["spec"]["properties"]["sampleLimit"].pop("minimum"),
    }
    for expected, mistake in mistakes.items():
        broken = deepcopy(schema)
        mistake(broken)
        found = differences("ServiceMonitor", broken, spec, broken["properties"]["spec"], "spec")
        assert any(expected in d for d in found), (expected, found)


def test_the_prometheusrule_pattern_means_the_crds():
    ours = json.loads((SCHEMAS / "prometheusrule.v1.schema.json").read_text())
    pattern = ours["$defs"]["ruleGroup"]["properties"]["partial_response_strategy"]["pattern"]
    for value in ("", "abort", "warn", "Abort", "WARN", "x", "aborts", "warn abort"):
        assert bool(re.search(pattern, value)) == bool(re.fullmatch(r"(?i)(abort|warn)?", value)), value
