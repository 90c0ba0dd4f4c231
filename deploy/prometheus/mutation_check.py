#!/usr/bin/env python3
"""Prove the alert unit tests can fail: move each threshold and duration, expect promtool to notice.

For every number in thresholds.toml the alerts are rendered with it x1.5 and /1.5, for every
duration (`*_for`) with it x2 and /2; each mutant is tested with `promtool test rules` on a copy
of rules.yml and tests/. A mutant the tests still pass is a threshold no test pins down: this
script then fails. Annotations keep the true values (gen_alerts.render's `shown`), so a mutant is
caught by what fires and when, never by the text of a description. It also checks that every
alert has a test expecting it to fire and one expecting it silent.

    mutation_check.py [--promtool PATH] [-v]
"""

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.dont_write_bytecode = True  # no __pycache__ left beside the rules
import gen_alerts  # noqa: E402

HERE = Path(__file__).resolve().parent
DURATION = re.compile(r"^(\d+)([smh])$")
UNIT = {"s": 1, "m": 60, "h": 3600}


def mutants(values):
    """(name, new value) pairs: numbers x1.5 and /1.5, durations x2 and /2; names are skipped."""
    for name, value in values.items():
        if isinstance(value, (int, float)):
            yield name, value * 1.5
            yield name, value / 1.5
        elif isinstance(value, str) and (m := DURATION.match(value)):
            seconds = int(m.group(1)) * UNIT[m.group(2)]
            yield name, f"{seconds * 2}s"
            yield name, f"{seconds // 2}s"


def run_tests(promtool, alerts_text, workdir):
    """promtool test rules on rules.yml, the given alerts.yml and a copy of tests/."""
    shutil.rmtree(workdir, ignore_errors=True)
    (workdir / "tests").mkdir(parents=True)
    shutil.copy(HERE / "rules.yml", workdir / "rules.yml")
    (workdir / "alerts.yml").write_text(alerts_text)
    # Only the test files that load the alerts (rules_test.yml pins the recording rules alone).
    tests = [t for t in sorted((HERE / "tests").glob("*.yml")) if "alerts.yml" in t.read_text()]
    for t in tests:
        shutil.copy(t, workdir / "tests" / t.name)
    cmd = [promtool, "test", "rules", *[str(workdir / "tests" / t.name) for t in tests]]
    return subprocess.run(cmd, capture_output=True, text=True)


def alert_coverage():
    """Alerts lacking a test that expects them firing, or one that expects them silent."""
    names = re.findall(r"^\s*- alert: (\S+)", (HERE / "alerts.yml").read_text(), re.M)
    seen = {n: set() for n in names}
    for t in sorted((HERE / "tests").glob("*.yml")):
        current = None
        for line in t.read_text().splitlines():
            if m := re.match(r"\s*alertname: (\S+)", line):
                current = m.group(1)
            elif (m := re.match(r"\s*exp_alerts:\s*(\S*)", line)) and current:
                seen.setdefault(current, set()).add("silent" if m.group(1) == "[]" else "firing")
                current = None
    return [f"{n}: no test expects it {kind}" for n in names for kind in ("firing", "silent")
            if kind not in seen[n]]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--promtool", default=shutil.which("promtool") or "promtool")
    ap.add_argument("-v", "--verbose", action="store_true", help="list the caught mutants too")
    args = ap.parse_args()

    gaps = alert_coverage()
    for g in gaps:
        print(f"mutation check: {g}", file=sys.stderr)

    values = gen_alerts.load_thresholds()
    template = gen_alerts.TEMPLATE.read_text()
    survivors = []
    with tempfile.TemporaryDirectory(prefix="kiln-alerts-") as tmp:
        work = Path(tmp) / "prometheus"
        base = run_tests(args.promtool, gen_alerts.render(template, values), work)
        if base.returncode != 0:
            sys.exit(f"mutation check: the unmutated tests fail:\n{base.stdout}{base.stderr}")
        count = 0
        for name, new in mutants(values):
            count += 1
            mutated = dict(values, **{name: new})
            rendered = gen_alerts.render(template, mutated, shown=values)
            result = run_tests(args.promtool, rendered, work)
            label = f"{name} = {gen_alerts.text(values[name])} -> {gen_alerts.text(new)}"
            if result.returncode == 0:
                survivors.append(label)
                print(f"  SURVIVED {label}")
            elif "FAILED" not in result.stdout + result.stderr:
                sys.exit(f"mutation check: promtool failed oddly on {label}:\n{result.stderr}")
            elif args.verbose:
                print(f"  caught   {label}")
    print(f"mutation check: {count - len(survivors)} of {count} threshold mutations caught, "
          f"{len(survivors)} survived")
    if survivors or gaps:
        sys.exit(1)


if __name__ == "__main__":
    main()
