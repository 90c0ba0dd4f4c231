#!/usr/bin/env python3
"""Check the kiln Grafana dashboard, offline or against a running Prometheus.

    check_dashboard.py                     list every panel query and check the JSON offline
    check_dashboard.py --promtool promtool also have promtool parse every query (PromQL syntax)
    check_dashboard.py --prometheus http://127.0.0.1:9090 [--range 10m --step 15s]
                                           and run them: every recording rule of rules.yml and
                                           every panel query must return data, no query may fail

Offline it checks that the file is valid JSON, panel ids are unique, every panel has a title, a
grid position and the ${datasource} data source, every graph has a unit, the data source and
the model/instance variables exist and no query uses an undefined one, every `kiln:` series a
query reads is a recording rule of rules.yml, and every `kiln_` family is one kiln exports
(src/metrics/names.rs).

Online it does what Grafana does: resolves the variables in order (label_values through the
Prometheus API, "All" selected, values regex-escaped and joined as (a|b)), substitutes them and
the built-ins ($__rate_interval etc.), runs each panel query over the last --range (tables
instantly), and asserts a successful, non-empty answer. Queries matching --allow-empty (default:
the firing-alerts panel, empty on a healthy server) may be empty. It also asserts that
Prometheus loaded every rule of rules.yml and alerts.yml and evaluates each without error.
Standard library only.
"""

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
DASHBOARD = HERE / "dashboards" / "kiln.json"
RULES = ROOT / "deploy" / "prometheus" / "rules.yml"
ALERTS = ROOT / "deploy" / "prometheus" / "alerts.yml"
NAMES = ROOT / "src" / "metrics" / "names.rs"

UNITS = {"s", "ms", "reqps", "percentunit", "short", "bytes", "none", "ops"}
BUILTINS = {"__rate_interval", "__interval", "__range"}
# Metric families that are not kiln's own but that queries may read.
FOREIGN = {"ALERTS", "up", "probe_success"}
PROCESS = re.compile(r"^process_[a-z_]+$")
VAR = re.compile(r"\$\{?(\w+)\}?")


class Failure(Exception):
    pass


# ---- reading the dashboard and the rules -------------------------------------------------------

def panels(dashboard):
    """Every panel, rows' nested panels included, rows themselves excluded."""
    for p in dashboard.get("panels", []):
        if p.get("type") == "row":
            yield from p.get("panels", [])
        else:
            yield p


def queries(dashboard):
    """(panel, target) for every query of every panel."""
    for p in panels(dashboard):
        for t in p.get("targets", []):
            yield p, t


def recording_rules(path=RULES):
    return re.findall(r"^\s*- record:\s*(\S+)", path.read_text(), re.M)


def alert_names(path=ALERTS):
    return re.findall(r"^\s*- alert:\s*(\S+)", path.read_text(), re.M)


def families(path=NAMES):
    return set(re.findall(r'pub const [A-Z_]+: &str = "(kiln_[a-z_]+)";', path.read_text()))


def metric_names(expr):
    """Series names an expression reads (identifiers followed by a selector or range, or bare)."""
    expr = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # drop string literals
    expr = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", expr)
    names = set(re.findall(r"(?<![\w:$])([a-zA-Z_:][\w:]*)(?=\s*[{\[]|\s*(?:[)\s,]|$))", expr))
    return {n for n in names if not re.fullmatch(
        r"(sum|avg|min|max|count|rate|irate|increase|histogram_quantile|by|on|and|or|unless|"
        r"without|ignoring|group_left|group_right|offset|bool|label_values|vector|round|abs|"
        r"clamp_min|clamp_max|topk|bottomk|absent)", n)}


# ---- offline checks ----------------------------------------------------------------------------

def check_offline(dashboard):
    problems = []
    ids = [p.get("id") for p in dashboard.get("panels", [])] + [
        q.get("id") for r in dashboard.get("panels", []) if r.get("type") == "row"
        for q in r.get("panels", [])]
    if len(ids) != len(set(ids)):
        problems.append(f"panel ids are not unique: {ids}")
    variables = {v["name"]: v for v in dashboard.get("templating", {}).get("list", [])}
    if not any(v.get("type") == "datasource" for v in variables.values()):
        problems.append("no data source variable")
    for name in ("model", "instance"):
        if variables.get(name, {}).get("type") != "query":
            problems.append(f"no query variable ${name}")
    rules, fams = set(recording_rules()), families()
    for p in panels(dashboard):
        title = p.get("title") or f"panel {p.get('id')}"
        if not p.get("title") or "gridPos" not in p:
            problems.append(f"{title}: needs a title and a gridPos")
        if p.get("datasource", {}).get("uid") != "${datasource}":
            problems.append(f"{title}: data source is not ${{datasource}}")
        unit = p.get("fieldConfig", {}).get("defaults", {}).get("unit")
        if p.get("type") in ("timeseries", "stat", "gauge") and unit not in UNITS:
            problems.append(f"{title}: unit {unit!r} is not one of {sorted(UNITS)}")
        if not p.get("targets"):
            problems.append(f"{title}: no query")
    for p, t in queries(dashboard):
        where = f"{p['title']} [{t.get('refId')}]"
        expr = t.get("expr", "")
        if not expr.strip():
            problems.append(f"{where}: empty expression")
        if t.get("datasource", {}).get("uid") != "${datasource}":
            problems.append(f"{where}: data source is not ${{datasource}}")
        for v in VAR.findall(expr):
            if v not in variables and v not in BUILTINS:
                problems.append(f"{where}: undefined variable ${v}")
        for name in metric_names(expr):
            base = re.sub(r"_(bucket|sum|count)$", "", name)
            if name.startswith("kiln:") and name not in rules:
                problems.append(f"{where}: {name} is not a recording rule of rules.yml")
            elif name.startswith("kiln_") and name not in fams and base not in fams:
                problems.append(f"{where}: {name} is not a family of src/metrics/names.rs")
            elif not name.startswith("kiln") and name not in FOREIGN and not PROCESS.match(name):
                problems.append(f"{where}: {name} is neither kiln's nor a known foreign series")
    for v in variables.values():
        for used in VAR.findall(v.get("query", "") if isinstance(v.get("query"), str) else ""):
            if used not in variables:
                problems.append(f"variable ${v['name']}: undefined variable ${used}")
    return problems


def offline_substitute(expr, rate_interval="1m"):
    expr = re.sub(r"\$\{?__(rate_interval|interval|range)\}?", rate_interval, expr)
    return VAR.sub(".*", expr)


def check_syntax(dashboard, promtool):
    """promtool parses every query, written as a recording rule (JSON is YAML)."""
    rules = [{"record": f"check:panel_{p['id']}_{t['refId']}", "expr": offline_substitute(t["expr"])}
             for p, t in queries(dashboard)]
    with tempfile.NamedTemporaryFile("w", suffix=".yml") as f:
        json.dump({"groups": [{"name": "dashboard-queries", "rules": rules}]}, f)
        f.flush()
        r = subprocess.run([promtool, "check", "rules", f.name], capture_output=True, text=True)
    if r.returncode != 0:
        return [f"promtool cannot parse a dashboard query:\n{r.stdout}{r.stderr}"]
    return []


# ---- online checks -----------------------------------------------------------------------------

class Prometheus:
    def __init__(self, url, timeout=30):
        self.url = url.rstrip("/")
        self.timeout = timeout

    def get(self, path, **params):
        query = urllib.parse.urlencode(params, doseq=True)
        try:
            with urllib.request.urlopen(f"{self.url}{path}?{query}", timeout=self.timeout) as r:
                body = json.load(r)
        except urllib.error.HTTPError as e:
            body = json.load(e)
        except (urllib.error.URLError, OSError) as e:
            raise Failure(f"cannot reach Prometheus at {self.url}: {e}") from e
        if body.get("status") != "success":
            raise Failure(f"{body.get('errorType')}: {body.get('error')}")
        return body["data"]


def regex_value(values):
    """Grafana's "All" for a multi-value variable in a Prometheus query: (a|b), regex-escaped,
    backslashes doubled for the PromQL string literal."""
    esc = [re.sub(r"([\\^$.|?*+()\[\]{}])", r"\\\\\1", v) for v in values]
    return "(" + "|".join(esc) + ")"


def resolve_variables(prom, dashboard, start, end):
    resolved = {}
    for v in dashboard.get("templating", {}).get("list", []):
        if v.get("type") != "query":
            continue
        query = v["query"] if isinstance(v["query"], str) else v["query"].get("query", "")
        query = VAR.sub(lambda m: resolved.get(m.group(1), m.group(0)), query)
        m = re.fullmatch(r"\s*label_values\(\s*(?:(.+),\s*)?(\w+)\s*\)\s*", query)
        if not m:
            raise Failure(f"variable ${v['name']}: cannot evaluate {query!r} (only label_values)")
        selector, label = m.group(1), m.group(2)
        params = {"start": start, "end": end}
        if selector:
            params["match[]"] = selector
        values = sorted(prom.get(f"/api/v1/label/{label}/values", **params))
        if not values:
            raise Failure(f"variable ${v['name']}: {query} has no values")
        resolved[v["name"]] = regex_value(values)
        print(f"  ${v['name']} = {', '.join(values)}")
    return resolved


def substitute(expr, resolved, rate_interval, step, range_):
    builtins = {"__rate_interval": rate_interval, "__interval": step, "__range": range_}
    return VAR.sub(lambda m: builtins.get(m.group(1), resolved.get(m.group(1), m.group(0))), expr)


def check_online(prom, dashboard, args):
    problems = []
    end = time.time()
    start = end - parse_seconds(args.range)
    print(f"variables at {prom.url}:")
    try:
        resolved = resolve_variables(prom, dashboard, start, end)
    except Failure as e:
        return [str(e)]
    allow_empty = re.compile(args.allow_empty)

    def run(label, expr, instant=False):
        try:
            if instant:
                data = prom.get("/api/v1/query", query=expr, time=end)
            else:
                data = prom.get("/api/v1/query_range", query=expr, start=start, end=end, step=args.step)
        except Failure as e:
            problems.append(f"{label}: query failed: {e}\n    {expr}")
            return
        series = len(data.get("result", []))
        if series == 0 and not allow_empty.search(expr):
            problems.append(f"{label}: no data\n    {expr}")
        print(f"  {'ok   ' if series else 'EMPTY'} {series:3d} series  {label}")

    print("recording rules:")
    for rule in recording_rules():
        run(rule, rule)
    print("panel queries:")
    for p, t in queries(dashboard):
        expr = substitute(t["expr"], resolved, args.rate_interval, args.step, args.range)
        run(f"{p['title']} [{t['refId']}]", expr, instant=t.get("instant", False) and not t.get("range"))

    print("rules loaded by Prometheus:")
    loaded = {}
    for g in prom.get("/api/v1/rules").get("groups", []):
        for r in g.get("rules", []):
            loaded[r["name"]] = r
    for name in recording_rules() + alert_names():
        r = loaded.get(name)
        if r is None:
            problems.append(f"rule {name} is not loaded by Prometheus (rules.yml and alerts.yml?)")
        elif r.get("health") != "ok":
            problems.append(f"rule {name}: health {r.get('health')}: {r.get('lastError')}")
    print(f"  {len([n for n in recording_rules() + alert_names() if n in loaded])} of "
          f"{len(recording_rules()) + len(alert_names())} rules loaded")
    return problems


def parse_seconds(d):
    m = re.fullmatch(r"(\d+)([smh])", d)
    if not m:
        raise SystemExit(f"bad duration {d!r} (e.g. 30s, 10m, 1h)")
    return int(m.group(1)) * {"s": 1, "m": 60, "h": 3600}[m.group(2)]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dashboard", type=Path, default=DASHBOARD)
    ap.add_argument("--promtool", help="promtool to parse every query with")
    ap.add_argument("--prometheus", metavar="URL", help="run every query against this Prometheus")
    ap.add_argument("--range", default="10m", help="time range of the panel queries (default 10m)")
    ap.add_argument("--step", default="15s", help="resolution, and $__interval (default 15s)")
    ap.add_argument("--rate-interval", default="1m", help="$__rate_interval (default 1m)")
    ap.add_argument("--allow-empty", default=r"^ALERTS\b",
                    help="regex of queries that may return nothing (default: the firing alerts)")
    ap.add_argument("-q", "--quiet", action="store_true", help="do not list the queries")
    args = ap.parse_args()

    try:
        dashboard = json.loads(args.dashboard.read_text())
    except json.JSONDecodeError as e:
        sys.exit(f"{args.dashboard}: not valid JSON: {e}")
    if not args.quiet:
        for p, t in queries(dashboard):
            print(f"{p['title']} [{t['refId']}]: {t['expr']}")
    problems = check_offline(dashboard)
    if args.promtool:
        problems += check_syntax(dashboard, args.promtool)
    if args.prometheus:
        problems += check_online(Prometheus(args.prometheus), dashboard, args)
    n = sum(1 for _ in queries(dashboard))
    for p in problems:
        print(f"check_dashboard: {p}", file=sys.stderr)
    print(f"check_dashboard: {len(list(panels(dashboard)))} panels, {n} queries, "
          f"{len(problems)} problems")
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
