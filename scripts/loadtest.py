#!/usr/bin/env python3
"""`make loadtest SCENARIO=...`: one k6 scenario of loadtest/ against a kiln started for it.

kiln is started from the release binary on a free 127.0.0.1 port with the default model (ramp:
with a small waiting queue, `scheduler.max_waiting` = RAMP_MAX_WAITING, default 8, so the
excess is refused with 429 rather than queued for long), warmed with a few requests, loaded with
loadtest/<scenario>.js, and stopped by its pid. The scenario's settings come from the
environment (USERS, DURATION, PEAK_RATE, THRESHOLD_*...: see each script's header).

Written to --results (default loadtest/results/, git-ignored), named <scenario>-<time>:
  .summary.json  the scenario's own figures (its handleSummary)
  .k6.json       k6's summary export (every metric)
  .html          k6's web dashboard report (K6_WEB_DASHBOARD_EXPORT), then opened in headless
                 Chromium by check_report.py, which fails unless its charts render
  .k6.log        k6's log; kiln's log is in <scenario>-<time>-kiln/

Exit status: k6's (0 = every threshold held, 99 = one was crossed), or 1 when the report does
not render.

    scripts/loadtest.py --scenario stream [--model models/X.gguf] [--no-report-check]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from servers import DEFAULT_MODEL, ROOT, start_kiln  # noqa: E402
from serve_compare import machine_cpu, model_id, our_cpu, warm_up  # noqa: E402

SCENARIOS = ("smoke", "chat", "stream", "mixed", "ramp", "soak")
K6 = Path(sys.executable).parent / "k6"


def kiln_config(scenario: str) -> dict:
    """The server's settings for a scenario (the rest are kiln's defaults)."""
    if scenario == "ramp":
        return {"scheduler": {"max_waiting": int(os.environ.get("RAMP_MAX_WAITING", "8"))}}
    return {}


def run(scenario: str, model: Path, results: Path, check_report: bool) -> int:
    if not K6.is_file():
        sys.exit(f"loadtest: {K6} missing: run `make pytools`")
    results.mkdir(parents=True, exist_ok=True)
    stem = results / f"{scenario}-{time.strftime('%Y%m%d-%H%M%S')}"
    html = stem.with_suffix(".html")
    server = start_kiln(model, kiln_config(scenario), log_dir=Path(f"{stem}-kiln"))
    try:
        mid = model_id(server.base_url)
        warm_up(server.base_url, mid)
        env = dict(
            os.environ,
            BASE_URL=server.base_url,
            MODEL=mid,
            SUMMARY_JSON=str(stem.with_suffix(".summary.json")),
            K6_NO_USAGE_REPORT="true",
            K6_WEB_DASHBOARD="true",
            # -1: no dashboard server (no port to bind), only the exported report.
            K6_WEB_DASHBOARD_PORT="-1",
            K6_WEB_DASHBOARD_PERIOD=os.environ.get("K6_WEB_DASHBOARD_PERIOD", "2s"),
            K6_WEB_DASHBOARD_EXPORT=str(html),
        )
        cmd = [str(K6), "run", "--quiet", "--summary-export", str(stem.with_suffix(".k6.json")),
               str(ROOT / "loadtest" / f"{scenario}.js")]
        print(f"loadtest: {scenario} against kiln at {server.base_url} (pid {server.pid})", flush=True)
        busy0, total0 = machine_cpu()
        ours0 = our_cpu(server.pid)
        with open(stem.with_suffix(".k6.log"), "w") as log:
            res = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=log, text=True)
        busy1, total1 = machine_cpu()
        others = max(0.0, (busy1 - busy0) - (our_cpu(server.pid) - ours0)) / max(1e-9, total1 - total0)
        print(res.stdout, end="", flush=True)
        # What this run competed with: 0% = the machine was kiln's and k6's alone.
        print(f"loadtest: other work took {others:.0%} of the CPU during the run", flush=True)
    finally:
        code = server.stop()
    if code != 0:
        print(f"loadtest: kiln exited with {code} on SIGTERM; see {server.log_path}", file=sys.stderr)
        return 1
    if res.returncode not in (0, 99):
        print(f"loadtest: k6 failed (exit {res.returncode}); see {stem.with_suffix('.k6.log')}",
              file=sys.stderr)
        return res.returncode
    if check_report:
        rc = subprocess.run([sys.executable, str(ROOT / "scripts" / "check_report.py"), str(html)]).returncode
        if rc != 0:
            return 1
    summary = json.loads(stem.with_suffix(".summary.json").read_text())
    summary["cpu_others_during"] = others
    stem.with_suffix(".summary.json").write_text(json.dumps(summary, indent=2))
    crossed = summary.get("thresholds_crossed", [])
    print(f"loadtest: results in {stem}.*; thresholds crossed: {', '.join(crossed) or 'none'}")
    return res.returncode


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scenario", choices=SCENARIOS, default="chat")
    ap.add_argument("--model", type=Path, default=DEFAULT_MODEL)
    ap.add_argument("--results", type=Path, default=ROOT / "loadtest" / "results")
    ap.add_argument("--no-report-check", action="store_true", help="skip opening the HTML report")
    args = ap.parse_args()
    if not args.model.is_file():
        sys.exit(f"loadtest: {args.model} missing: run `make model`")
    return run(args.scenario, args.model, args.results, not args.no_report_check)


if __name__ == "__main__":
    sys.exit(main())
