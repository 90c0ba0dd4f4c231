#!/usr/bin/env python3
"""Validates deploy/ without a Docker engine or a cluster; run by `make deploy-check`.

- compose.yaml against the compose specification's JSON schema (the copy check-jsonschema
  ships), every bind-mount source and the build's Dockerfile present, every address of the
  Prometheus and Grafana configurations a service, and a stop grace period longer than kiln's
  drain_timeout;
- deploy/k8s and deploy/k8s/gateway rendered by kustomize (`kubectl kustomize`), then every
  object: core kinds by kubernetes-validate in strict mode (unknown fields rejected) against
  Kubernetes 1.30 and 1.37; custom resources against kiln's JSON Schemas of their CRDs,
  transcribed from the projects' published CRDs and committed in deploy/k8s/schemas (always),
  and against the published CRD files themselves when --schemas (or KILN_SCHEMAS) holds them
  (the served version's openAPIV3Schema, unknown fields rejected as the API server's strict
  field validation does; CEL rules are not evaluated). One line says which were used;
  deploy/k8s/schemas/README.md says why the published files are not committed;
- the endpoint picker's configuration against endpointpickerconfig.schema.json, and its plugin
  references;
- what no schema sees: the selectors match the kiln pods, the probes and ports name the port
  kiln listens on (kiln.toml's server.port), the grace period covers preStop + drain_timeout, the
  ScaledObject scales the Deployment with a query promtool parses, and every metric the picker
  and the autoscaler read is a metric family kiln exports (src/metrics/names.rs).

    check_deploy.py [--root DIR] [--schemas DIR] [--kubectl CMD] [--promtool CMD]

--root is the repository (a copy, for the negative tests of deploy/test_check_deploy.py).
Prints every problem and exits 1 if there is one; a missing tool is a problem too, and so is a
published CRD file in --schemas that is not the one deploy/k8s/schemas/README.md names.
"""

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

import jsonschema
import kubernetes_validate
import yaml
from check_jsonschema.builtin_schemas import get_builtin_schema

ROOT = Path(__file__).resolve().parent.parent
K8S_VERSIONS = ("1.30.0", "1.37.0")
SCHEMAS = Path("deploy") / "k8s" / "schemas"
# (group, kind) -> the version deploy/k8s uses and kiln's JSON Schema of it, transcribed from the
# published CRD (in SCHEMAS, committed); then the published CRD file and its sha256, the exact
# upstream file of deploy/k8s/schemas/README.md, so another version cannot pass for it unnoticed
# (optional: found in --schemas when present, never committed).
CRDS = {
    ("inference.networking.k8s.io", "InferencePool"): (
        "v1", "inferencepool.v1.schema.json",
        "inference.networking.k8s.io_inferencepools.yaml",
        "55e0dbf39c50c4bbdd60106493a4573df4bb44479f9ce46762f1af718883e5cd"),
    ("gateway.networking.k8s.io", "HTTPRoute"): (
        "v1", "httproute.v1.schema.json",
        "gateway.networking.k8s.io_httproutes.yaml",
        "a424a0d6c953b162e71d1d97bb7e75012d8f1ac264e7274f2763d1b96ab39852"),
    ("monitoring.coreos.com", "ServiceMonitor"): (
        "v1", "servicemonitor.v1.schema.json",
        "monitoring.coreos.com_servicemonitors.yaml",
        "a99047972c9dd7679ce2050b9968e8a08773492e671b3e17abd476d42aa78a32"),
    ("monitoring.coreos.com", "PrometheusRule"): (
        "v1", "prometheusrule.v1.schema.json",
        "monitoring.coreos.com_prometheusrules.yaml",
        "78be98554b9c8506ab2b4f4feb91c5f3a56e536a0a510f3a8e876a459970d56d"),
    ("keda.sh", "ScaledObject"): (
        "v1alpha1", "scaledobject.v1alpha1.schema.json",
        "keda.sh_scaledobjects.yaml",
        "af35555862a83933b074af14ad439c4b4ceabaf4daa3e9338e9b23e36d308d80"),
}
TRANSCRIBED = "transcribed schema"
PUBLISHED = "published CRD"
# Seconds between the end of preStop + drain_timeout and the kubelet's SIGKILL.
GRACE_MARGIN = 5


class Problems(list):
    def add(self, where, what):
        self.append(f"{where}: {what}")


# --- custom resources ---------------------------------------------------------------------

def strict_schema(node):
    """An OpenAPI v3 CRD schema as JSON Schema (draft 4): objects with `properties` reject other
    fields unless the CRD keeps unknown fields; `nullable` admits null; int-or-string is either."""
    if isinstance(node, list):
        return [strict_schema(n) for n in node]
    if not isinstance(node, dict):
        return node
    out = {k: strict_schema(v) for k, v in node.items()}
    if node.get("x-kubernetes-int-or-string") and "type" not in node:
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if node.get("nullable") and "type" in node:
        out["type"] = [node["type"], "null"]
    if ("properties" in node and "additionalProperties" not in node
            and not node.get("x-kubernetes-preserve-unknown-fields")):
        out["additionalProperties"] = False
    return out


def transcribed_validators(root: Path, problems: Problems):
    """(group, kind, version) -> a validator of kiln's transcribed schema, for each CRD kind."""
    validators = {}
    for (group, kind), (version, name, _, _) in CRDS.items():
        path = root / SCHEMAS / name
        try:
            schema = json.loads(path.read_text())
            jsonschema.Draft202012Validator.check_schema(schema)
        except (OSError, ValueError, jsonschema.SchemaError) as e:
            problems.add(SCHEMAS / name, f"not a usable JSON Schema: {e}")
            continue
        validators[(group, kind, version)] = jsonschema.Draft202012Validator(schema)
    return validators


def published_validators(schemas: Path | None, problems: Problems):
    """The published CRD files found in `schemas`: (group, kind) -> {served version: validator},
    and the names of the files that are not there. A file that is there must be the one
    deploy/k8s/schemas/README.md names."""
    validators, missing = {}, []
    for (group, kind), (_, _, name, sha256) in CRDS.items():
        path = schemas / name if schemas else None
        if path is None or not path.is_file():
            missing.append(name)
            continue
        data = path.read_bytes()
        if hashlib.sha256(data).hexdigest() != sha256:
            problems.add(path, f"is not the file deploy/k8s/schemas/README.md names (sha256 {sha256})")
            continue
        crd = yaml.safe_load(data)
        if (crd["spec"]["group"], crd["spec"]["names"]["kind"]) != (group, kind):
            problems.add(path, f"defines {crd['spec']['names']['kind']}, not {kind}")
            continue
        validators[(group, kind)] = {
            version["name"]: jsonschema.Draft4Validator(strict_schema(version["schema"]["openAPIV3Schema"]))
            for version in crd["spec"]["versions"] if version.get("served")}
    return validators, missing


def published_note(schemas: Path | None, published, missing) -> str:
    """The line saying which schemas the custom resources were validated against."""
    if not published:
        where = schemas if schemas else "no --schemas or KILN_SCHEMAS given"
        return (f"published CRDs not available ({where}): custom resources validated against the "
                f"transcribed schemas in {SCHEMAS} only (its README.md says how to add them)")
    line = (f"published CRDs: {len(published)} of {len(CRDS)} found in {schemas} (sha256 checked): "
            f"custom resources validated against them and against the transcribed schemas in {SCHEMAS}")
    if missing:
        line += f"; not available, so transcribed schema only: {', '.join(missing)}"
    return line


def report(validator, obj, where, kind, source, problems: Problems):
    for error in validator.iter_errors(obj):
        path = ".".join(str(p) for p in error.absolute_path)
        problems.add(where, f"{kind} ({source}): {path}: {error.message}")


def validate_object(obj, where, transcribed, published, problems: Problems):
    group, _, version = obj.get("apiVersion", "").rpartition("/")
    kind = obj.get("kind")
    if (group, kind) in CRDS:
        validator = transcribed.get((group, kind, version))
        if validator is None:
            problems.add(where, f"{kind} {version}: {SCHEMAS} transcribes {kind} "
                                f"{CRDS[(group, kind)][0]} only")
        else:
            report(validator, obj, where, kind, TRANSCRIBED, problems)
        if (group, kind) in published:
            validator = published[(group, kind)].get(version)
            if validator is None:
                problems.add(where, f"{kind} {version} is not a served version of its published CRD")
            else:
                report(validator, obj, where, kind, PUBLISHED, problems)
        return
    for k8s in K8S_VERSIONS:
        try:
            kubernetes_validate.validate(obj, k8s, strict=True)
        except kubernetes_validate.ValidationError as e:
            path = ".".join(str(p) for p in e.path)
            problems.add(where, f"{kind} (Kubernetes {k8s}): {path}: {e.message}")
        except kubernetes_validate.SchemaNotFoundError:
            problems.add(where, f"{obj.get('apiVersion')} {kind} is not a Kubernetes {k8s} kind "
                                "nor a CRD kind of deploy/k8s/schemas")


# --- Kubernetes ---------------------------------------------------------------------------

QUANTITY = re.compile(r"^([0-9]+(?:\.[0-9]+)?)(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$")
SUFFIX = {None: 1, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18,
          "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}


def quantity(value) -> float:
    """A Kubernetes resource quantity ("2", "500m", "1Gi") as a number; ValueError otherwise.
    The OpenAPI schemas type quantities as int-or-string only, so they check none of this."""
    m = QUANTITY.match(str(value))
    if not m:
        raise ValueError(f"{value!r} is not a resource quantity")
    return float(m.group(1)) * SUFFIX[m.group(2)]


def check_resources(objects, where, problems: Problems):
    """Every container's requests and limits are quantities, and no request exceeds its limit."""
    for obj in objects:
        pod = obj.get("spec", {}).get("template", {}).get("spec", {})
        for c in pod.get("containers", []) + pod.get("initContainers", []):
            res = c.get("resources", {})
            try:
                requests = {k: quantity(v) for k, v in res.get("requests", {}).items()}
                limits = {k: quantity(v) for k, v in res.get("limits", {}).items()}
            except ValueError as e:
                problems.add(where, f"{obj['kind']} {obj['metadata']['name']}, container {c['name']}: {e}")
                continue
            for k, v in requests.items():
                if k in limits and v > limits[k]:
                    problems.add(where, f"container {c['name']}: the {k} request exceeds its limit")


def kustomize(kubectl: str, directory: Path, problems: Problems):
    """The objects `kubectl kustomize DIR` renders (kustomize itself), or [] on failure."""
    try:
        out = subprocess.run([kubectl, "kustomize", str(directory)], capture_output=True,
                             text=True, timeout=120)
    except OSError as e:
        problems.add(directory, f"cannot run kustomize ({kubectl}: {e})")
        return []
    if out.returncode != 0:
        problems.add(directory, f"kustomize failed: {out.stderr.strip()}")
        return []
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def by_kind(objects, kind):
    return [o for o in objects if o.get("kind") == kind]


def selects(selector: dict, labels: dict) -> bool:
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def metric_families(root: Path) -> set[str]:
    names = (root / "src" / "metrics" / "names.rs").read_text()
    return set(re.findall(r'pub const [A-Z_]+: &str = "(kiln_[a-z_]+)";', names))


def check_promql(query: str, promtool: str) -> str | None:
    """promtool's complaint about a PromQL query (parsed as a recording rule), or None."""
    rules = {"groups": [{"name": "check", "rules": [{"record": "check:query", "expr": query}]}]}
    with tempfile.NamedTemporaryFile("w", suffix=".yml") as f:
        json.dump(rules, f)
        f.flush()
        try:
            r = subprocess.run([promtool, "check", "rules", f.name], capture_output=True, text=True)
        except OSError as e:
            return f"cannot run {promtool}: {e}"
    return None if r.returncode == 0 else (r.stdout + r.stderr).strip()


def check_kiln(objects, config, families, promtool, problems: Problems):
    where = "deploy/k8s"
    deployments = [d for d in by_kind(objects, "Deployment") if d["metadata"]["name"] == "kiln"]
    if len(deployments) != 1:
        problems.add(where, "no Deployment named kiln")
        return
    deployment = deployments[0]
    pod = deployment["spec"]["template"]
    labels = pod["metadata"].get("labels", {})
    container = next((c for c in pod["spec"]["containers"] if c["name"] == "kiln"), None)
    if container is None:
        problems.add(where, "the kiln Deployment has no container named kiln")
        return
    port = config["server"]["port"]
    ports = {p.get("name"): p["containerPort"] for p in container.get("ports", [])}
    if ports.get("http") != port:
        problems.add(where, f"the container's port `http` is {ports.get('http')}, kiln listens on {port}")
    if not selects(deployment["spec"]["selector"]["matchLabels"], labels):
        problems.add(where, "the Deployment's selector does not match its pods")
    for probe, path in (("readinessProbe", "/ready"), ("livenessProbe", "/health")):
        get = container.get(probe, {}).get("httpGet", {})
        if get.get("path") != path or get.get("port") not in ("http", port):
            problems.add(where, f"{probe} must GET {path} on the http port, not {get}")
    # preStop, then SIGTERM and drain_timeout seconds of draining, must end before SIGKILL.
    sleep = container.get("lifecycle", {}).get("preStop", {}).get("exec", {}).get("command", [])
    pre_stop = int(sleep[-1]) if len(sleep) == 2 and sleep[0].endswith("sleep") else 0
    grace = pod["spec"].get("terminationGracePeriodSeconds", 30)
    need = pre_stop + config["server"]["drain_timeout"] + GRACE_MARGIN
    if grace < need:
        problems.add(where, f"terminationGracePeriodSeconds {grace} < preStop {pre_stop} + "
                            f"drain_timeout {config['server']['drain_timeout']} + {GRACE_MARGIN}")
    volumes = {v["name"]: v for v in pod["spec"].get("volumes", [])}
    mounts = {m["mountPath"]: m["name"] for m in container.get("volumeMounts", [])}
    config_maps = {c["metadata"]["name"] for c in by_kind(objects, "ConfigMap")}
    cm = volumes.get(mounts.get("/etc/kiln"), {}).get("configMap", {}).get("name")
    if cm not in config_maps:
        problems.add(where, f"/etc/kiln is not the generated kiln ConfigMap (mounts {cm})")
    for kind in ("Service", "PodDisruptionBudget"):
        for obj in by_kind(objects, kind):
            selector = obj["spec"]["selector"]
            selector = selector.get("matchLabels", selector) if kind != "Service" else selector
            if not selects(selector, labels):
                problems.add(where, f"{kind} {obj['metadata']['name']} selects no kiln pod")
    services = by_kind(objects, "Service")
    service_ports = {p.get("name") for s in services for p in s["spec"]["ports"]
                     if p.get("targetPort") in ("http", port)}
    for monitor in by_kind(objects, "ServiceMonitor"):
        if not any(selects(monitor["spec"]["selector"]["matchLabels"], s["metadata"].get("labels", {}))
                   for s in services):
            problems.add(where, "the ServiceMonitor selects no Service")
        for endpoint in monitor["spec"]["endpoints"]:
            if endpoint.get("port") not in service_ports or endpoint.get("path") != "/metrics":
                problems.add(where, f"the ServiceMonitor endpoint {endpoint} is not kiln's /metrics")
    for scaled in by_kind(objects, "ScaledObject"):
        target = scaled["spec"]["scaleTargetRef"]
        if target.get("name") != "kiln" or target.get("kind", "Deployment") != "Deployment":
            problems.add(where, f"the ScaledObject scales {target}, not the kiln Deployment")
        namespace = deployment["metadata"].get("namespace")
        for trigger in scaled["spec"]["triggers"]:
            query = trigger["metadata"].get("query", "")
            complaint = check_promql(query, promtool)
            if complaint:
                problems.add(where, f"promtool cannot parse the ScaledObject's query: {complaint}")
            for name in re.findall(r"\bkiln_[a-z_]+", query):
                if name not in families:
                    problems.add(where, f"the ScaledObject's query reads {name}, which kiln does not export")
            ns = re.search(r'namespace="([^"]*)"', query)
            if ns and ns.group(1) != namespace:
                problems.add(where, f"the ScaledObject's query reads namespace {ns.group(1)}, "
                                    f"kiln runs in {namespace}")


def plugin_names(cfg):
    return {p.get("name") or p["type"] for p in cfg.get("plugins", [])}


def check_epp_config(cfg, where, schema, families, problems: Problems):
    for error in jsonschema.Draft202012Validator(schema).iter_errors(cfg):
        path = ".".join(str(p) for p in error.absolute_path)
        problems.add(where, f"{path}: {error.message}")
    names = plugin_names(cfg)
    refs = [p.get("pluginRef") for prof in cfg.get("schedulingProfiles", []) for p in prof.get("plugins", [])]
    for source in (cfg.get("dataLayer") or {}).get("sources", []):
        refs.append(source.get("pluginRef"))
        refs += [e.get("pluginRef") for e in source.get("extractors", [])]
    for ref in refs:
        if ref not in names:
            problems.add(where, f"pluginRef {ref} names no plugin")
    for plugin in cfg.get("plugins", []):
        if plugin.get("type") != "core-metrics-extractor":
            continue
        params = plugin.get("parameters", {})
        engines = {e["name"]: e for e in params.get("engineConfigs", [])}
        kiln = engines.get(params.get("defaultEngine"))
        if kiln is None:
            problems.add(where, "defaultEngine names no engineConfigs entry")
            continue
        for field in ("queuedRequestsSpec", "runningRequestsSpec", "kvUsageSpec"):
            name = re.sub(r"\{.*", "", kiln.get(field, ""))
            if name not in families:
                problems.add(where, f"{field} {name!r} is not a metric family kiln exports")


def check_gateway(objects, kiln_objects, schema, families, problems: Problems):
    where = "deploy/k8s/gateway"
    deployment = next((d for d in by_kind(kiln_objects, "Deployment") if d["metadata"]["name"] == "kiln"), None)
    if deployment is None:
        return  # check_kiln reported it
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    ports = {p["containerPort"] for c in deployment["spec"]["template"]["spec"]["containers"]
             for p in c.get("ports", [])}
    services = {s["metadata"]["name"]: s for s in by_kind(objects, "Service")}
    pools = by_kind(objects, "InferencePool")
    if not pools:
        problems.add(where, "no InferencePool")
    for pool in pools:
        spec = pool["spec"]
        if not selects(spec["selector"]["matchLabels"], labels):
            problems.add(where, "the InferencePool selects no kiln pod")
        for target in spec["targetPorts"]:
            if target["number"] not in ports:
                problems.add(where, f"the InferencePool's target port {target['number']} is no kiln port")
        ref = spec.get("endpointPickerRef", {})
        epp = services.get(ref.get("name"))
        if epp is None or ref.get("port", {}).get("number") not in {p["port"] for p in epp["spec"]["ports"]}:
            problems.add(where, f"endpointPickerRef {ref} is no port of a Service here")
    for route in by_kind(objects, "HTTPRoute"):
        pool_names = {p["metadata"]["name"] for p in pools}
        for rule in route["spec"].get("rules", []):
            for backend in rule.get("backendRefs", []):
                if backend.get("kind") == "InferencePool" and backend.get("name") not in pool_names:
                    problems.add(where, f"the HTTPRoute sends to InferencePool {backend.get('name')}, not here")
    found = False
    for cm in by_kind(objects, "ConfigMap"):
        for key, text in cm.get("data", {}).items():
            doc = yaml.safe_load(text)
            if isinstance(doc, dict) and doc.get("kind") == "EndpointPickerConfig":
                found = True
                check_epp_config(doc, f"{where} ConfigMap {cm['metadata']['name']}/{key}",
                                 schema, families, problems)
    if not found:
        problems.add(where, "no ConfigMap holds an EndpointPickerConfig")


# --- compose ------------------------------------------------------------------------------

def seconds(duration: str) -> float:
    units = {"ms": 0.001, "s": 1, "m": 60, "h": 3600}
    parts = re.findall(r"(\d+(?:\.\d+)?)(ms|s|m|h)", duration)
    if not parts or "".join(n + u for n, u in parts) != duration:
        raise ValueError(f"not a compose duration: {duration!r}")
    return sum(float(n) * units[u] for n, u in parts)


def check_compose(root: Path, config, problems: Problems):
    path = root / "deploy" / "compose.yaml"
    where = path.relative_to(root)
    compose = yaml.safe_load(path.read_text())
    schema = get_builtin_schema("vendor.compose-spec")
    validator = jsonschema.validators.validator_for(schema)(schema)
    for error in validator.iter_errors(compose):
        problems.add(where, f"{'.'.join(str(p) for p in error.absolute_path)}: {error.message}")
    services = compose.get("services", {})
    for name, service in services.items():
        for volume in service.get("volumes", []):
            source = volume.split(":", 1)[0] if isinstance(volume, str) else volume.get("source", "")
            if source.startswith((".", "/")) and not (path.parent / source).exists():
                problems.add(where, f"{name}: bind-mount source {source} does not exist")
        build = service.get("build")
        if isinstance(build, dict):
            dockerfile = path.parent / build.get("context", ".") / build.get("dockerfile", "Dockerfile")
            if not dockerfile.is_file():
                problems.add(where, f"{name}: no Dockerfile at {dockerfile}")
    # The stack reaches its parts by service name: Prometheus' targets and Alertmanager, the
    # Grafana data source.
    prom = yaml.safe_load((root / "deploy" / "prometheus" / "prometheus.yml").read_text())
    addresses = [t for job in prom["scrape_configs"] for sc in job.get("static_configs", [])
                 for t in sc["targets"]]
    addresses += [r["replacement"] for job in prom["scrape_configs"]
                  for r in job.get("relabel_configs", []) if r.get("target_label") == "__address__"]
    addresses += [t for am in prom["alerting"]["alertmanagers"] for sc in am["static_configs"]
                  for t in sc["targets"]]
    datasources = yaml.safe_load(
        (root / "deploy" / "grafana" / "provisioning" / "datasources" / "prometheus.yml").read_text())
    addresses += [re.sub(r"^https?://", "", d["url"]) for d in datasources["datasources"]]
    for address in addresses:
        host = address.rsplit(":", 1)[0]
        if host != "localhost" and host not in services:
            problems.add(where, f"{address} (Prometheus or Grafana configuration) names no service")
    kiln = services.get("kiln", {})
    try:
        grace = seconds(kiln.get("stop_grace_period", "10s"))
    except ValueError as e:
        problems.add(where, f"kiln: {e}")
    else:
        if grace <= config["server"]["drain_timeout"]:
            problems.add(where, f"kiln: stop_grace_period {grace:g}s does not exceed "
                                f"drain_timeout {config['server']['drain_timeout']}s")


# ------------------------------------------------------------------------------------------

def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", type=Path, default=ROOT)
    ap.add_argument("--schemas", type=Path, default=os.environ.get("KILN_SCHEMAS") or None,
                    help="a directory holding the published CRD files of deploy/k8s/schemas/README.md "
                         "(optional; default $KILN_SCHEMAS): custom resources are validated against "
                         "them too")
    ap.add_argument("--kubectl", default="kubectl", help="kubectl, for `kubectl kustomize`")
    ap.add_argument("--promtool", default="promtool", help="promtool, to parse PromQL")
    args = ap.parse_args()
    root = args.root.resolve()
    problems = Problems()
    if shutil.which(args.kubectl) is None:
        problems.add(args.kubectl, "not found: kustomize runs as `kubectl kustomize` (make tools-deploy)")
    config = tomllib.loads((root / "deploy" / "k8s" / "kiln.toml").read_text())
    families = metric_families(root)
    epp_schema = json.loads((root / "deploy/k8s/schemas/endpointpickerconfig.schema.json").read_text())

    check_compose(root, config, problems)
    transcribed = transcribed_validators(root, problems)
    published, missing = published_validators(args.schemas, problems)
    print(f"check_deploy: {published_note(args.schemas, published, missing)}")
    rendered = {}
    for directory in ("deploy/k8s", "deploy/k8s/gateway"):
        objects = kustomize(args.kubectl, root / directory, problems)
        if not objects:
            problems.add(directory, "kustomize rendered nothing")
        for obj in objects:
            where = f"{directory}: {obj.get('kind')} {obj.get('metadata', {}).get('name')}"
            validate_object(obj, where, transcribed, published, problems)
        check_resources(objects, directory, problems)
        rendered[directory] = objects
    if rendered["deploy/k8s"]:
        check_kiln(rendered["deploy/k8s"], config, families, args.promtool, problems)
        if rendered["deploy/k8s/gateway"]:
            check_gateway(rendered["deploy/k8s/gateway"], rendered["deploy/k8s"], epp_schema,
                          families, problems)

    for p in problems:
        print(f"check_deploy: {p}", file=sys.stderr)
    if not problems:
        counts = {d: len(o) for d, o in rendered.items()}
        print(f"check_deploy: compose.yaml and {sum(counts.values())} Kubernetes objects "
              f"({', '.join(f'{d}: {n}' for d, n in counts.items())}) valid")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
