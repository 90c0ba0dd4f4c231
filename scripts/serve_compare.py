#!/usr/bin/env python3
"""Served speed over HTTP: kiln against llama.cpp's llama-server under the same k6 load.

For each user count (default 16, then 32) and each server in turn (kiln, then llama-server),
the server is started fresh on a free 127.0.0.1 port with 2 threads, warmed up with a few
requests, loaded with loadtest/chat.js (closed loop, 64-token answers, temperature 0.7) for
--duration, and stopped by its pid. Then a table: generated tokens/s, TTFT and end-to-end
p50/p95/p99, failed requests, and kiln's tokens/s over llama.cpp's, with the bars of issue 8:

  16 users: kiln >= 2x llama.cpp's tokens/s, a lower p99 end-to-end, no failed request;
  32 users: no starvation, kiln's end-to-end p99 < 2.5x its p50.

The machine's load average is printed before each run (other work on the machine slows both
servers; compare runs made under the same load).

    scripts/serve_compare.py [--model models/X.gguf] [--users 16,32] [--duration 60s]
    scripts/serve_compare.py --only kiln --users 16          (make loadtest)

llama-server comes from ../shared/tools/llama-cpp-reference.sh (built once per machine; the
first build takes several minutes). k6 is the one `make pytools` put beside this Python.
Raw k6 figures and server logs go to --out (default target/serve-compare/).
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from servers import DEFAULT_MODEL, ROOT, start_kiln, start_llama_server  # noqa: E402

CHAT_JS = ROOT / "loadtest" / "chat.js"
K6 = Path(sys.executable).parent / "k6"
SHARED = Path(os.environ.get("KILN_SHARED", ROOT.parent / "shared"))


def llama_bin_dir() -> Path:
    """llama.cpp's bin directory, built by the shared script if it is not yet."""
    script = SHARED / "tools" / "llama-cpp-reference.sh"
    if not script.is_file():
        sys.exit(f"serve_compare: {script} not found (set KILN_SHARED)")
    print("serve_compare: llama.cpp reference (builds once, may take minutes)...", flush=True)
    out = subprocess.run(["bash", str(script)], check=True, capture_output=True, text=True)
    return Path(out.stdout.strip().splitlines()[-1])


def warm_up(base_url: str, model: str, requests: int = 3) -> None:
    """A few sequential requests, so page faults of the first weight pass are not measured."""
    body = {"messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 16}
    if model:
        body["model"] = model
    for _ in range(requests):
        req = urllib.request.Request(base_url + "/v1/chat/completions", json.dumps(body).encode(),
                                     {"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=60) as r:
            r.read()


def model_id(base_url: str) -> str:
    with urllib.request.urlopen(base_url + "/v1/models", timeout=10) as r:
        return json.load(r)["data"][0]["id"]


def run_k6(base_url: str, model: str, users: int, duration: str, out: Path) -> dict:
    """loadtest/chat.js against base_url; returns its summary (see handleSummary there)."""
    summary = out.with_suffix(".json")
    env = dict(os.environ, BASE_URL=base_url, MODEL=model, USERS=str(users), DURATION=duration,
               SUMMARY_JSON=str(summary), K6_NO_USAGE_REPORT="true")
    with open(out.with_suffix(".k6.log"), "w") as log:
        res = subprocess.run([str(K6), "run", "--quiet", str(CHAT_JS)], env=env, stdout=subprocess.PIPE,
                             stderr=log, text=True)
    print(res.stdout, end="", flush=True)
    # 99: a threshold was crossed (a failed request or check); the figures still count.
    if res.returncode not in (0, 99) or not summary.is_file():
        sys.exit(f"serve_compare: k6 failed (exit {res.returncode}); see {out.with_suffix('.k6.log')}")
    return json.loads(summary.read_text())


TICK = os.sysconf("SC_CLK_TCK")


def machine_cpu() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine so far, all cores (/proc/stat)."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return (sum(fields) - idle) / TICK, sum(fields) / TICK


def our_cpu(server_pid: int) -> float:
    """CPU seconds used so far by this script, its waited-for children (k6) and the server."""
    with open(f"/proc/{server_pid}/stat") as f:
        # Fields after the parenthesized command name; utime and stime are the 12th and 13th.
        rest = f.read().rsplit(")", 1)[1].split()
    server = (int(rest[11]) + int(rest[12])) / TICK
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return server + me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def cpu_idle(seconds: float = 3.0) -> float:
    """The machine's idle share of CPU time over `seconds`, measured while none of ours runs."""
    busy0, total0 = machine_cpu()
    time.sleep(seconds)
    busy1, total1 = machine_cpu()
    return 1 - (busy1 - busy0) / max(1e-9, total1 - total0)


def measure(name: str, start, users: int, duration: str, out_dir: Path) -> dict:
    """Starts a server, warms it, runs k6 once, stops it; the k6 summary plus the load."""
    load = os.getloadavg()
    idle = cpu_idle()
    print(f"\n== {name}, {users} users, {duration} (before: CPU {idle:.0%} idle, "
          f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f})", flush=True)
    server = start(out_dir / f"{name}-{users}")
    try:
        model = model_id(server.base_url) if name == "kiln" else ""
        warm_up(server.base_url, model)
        busy0, total0 = machine_cpu()
        ours0 = our_cpu(server.pid)
        result = run_k6(server.base_url, model, users, duration, out_dir / f"{name}-{users}")
        busy1, total1 = machine_cpu()
        ours1 = our_cpu(server.pid)
    finally:
        server.stop()
    # The share of the machine's CPU time that other work took while k6 ran: what this run
    # competed with (0% = the machine was ours alone).
    others = max(0.0, (busy1 - busy0) - (ours1 - ours0)) / max(1e-9, total1 - total0)
    print(f"   other work took {others:.0%} of the CPU during the run", flush=True)
    result["cpu_others_during"] = others
    result["server"] = name
    result["loadavg_before"] = load
    result["cpu_idle_before"] = idle
    result["loadavg_after"] = os.getloadavg()
    return result


def fmt_ms(x) -> str:
    return "-" if x is None else f"{x:,.0f}"


def table(results: list[dict]) -> str:
    """The markdown table of every run, then kiln/llama.cpp per user count."""
    lines = [
        "| users | server | gen tok/s | TTFT p50 | TTFT p95 | TTFT p99 | e2e p50 | e2e p95 | e2e p99 | requests | failed | other load |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        t, e = r["ttft_ms"], r["e2e_ms"]
        lines.append(
            f"| {r['users']} | {r['server']} | {r['tokens_per_s']:.1f} | {fmt_ms(t['p50'])} | {fmt_ms(t['p95'])} "
            f"| {fmt_ms(t['p99'])} | {fmt_ms(e['p50'])} | {fmt_ms(e['p95'])} | {fmt_ms(e['p99'])} "
            f"| {r['chat_requests']} | {r['failed']} | {r['cpu_others_during']:.0%} |"
        )
    lines.append("")
    lines.append("Latencies in ms. TTFT from the probe client (max_tokens 1, see loadtest/README.md). "
                 "Other load: the share of the machine's CPU time other processes took during the run.")
    return "\n".join(lines)


def verdicts(results: list[dict]) -> list[str]:
    """The bars of issue 8, each with the numbers it was judged on."""
    by = {(r["server"], r["users"]): r for r in results}
    out = []
    for users in sorted({r["users"] for r in results}):
        k, l = by.get(("kiln", users)), by.get(("llama.cpp", users))
        if k and l:
            ratio = k["tokens_per_s"] / l["tokens_per_s"] if l["tokens_per_s"] else float("inf")
            out.append(f"{users} users: kiln/llama.cpp tokens/s = {ratio:.2f}x")
            if users == 16:
                ok = ratio >= 2.0 and k["e2e_ms"]["p99"] < l["e2e_ms"]["p99"] and k["failed"] == 0
                out.append(
                    f"  bar (>= 2x tokens/s, lower p99 e2e, no failure): {'met' if ok else 'NOT met'} "
                    f"({ratio:.2f}x; p99 {fmt_ms(k['e2e_ms']['p99'])} vs {fmt_ms(l['e2e_ms']['p99'])} ms; "
                    f"{k['failed']} failed)")
        for name, r in (("kiln", k), ("llama.cpp", l)):
            if r and users >= 32:
                spread = r["e2e_ms"]["p99"] / r["e2e_ms"]["p50"]
                mark = ("met" if spread < 2.5 else "NOT met") if name == "kiln" else "for reference"
                out.append(f"  {name} at {users} users: e2e p99/p50 = {spread:.2f} (bar < 2.5: {mark})")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", type=Path, default=DEFAULT_MODEL)
    ap.add_argument("--users", default="16,32", help="comma-separated user counts")
    ap.add_argument("--duration", default="60s", help="k6 duration of each run")
    ap.add_argument("--threads", type=int, default=2, help="threads of each server")
    ap.add_argument("--slots", type=int, default=16, help="llama-server -np")
    ap.add_argument("--ctx", type=int, default=32768, help="llama-server -c")
    ap.add_argument("--only", choices=["kiln", "llama.cpp"], help="load one server only")
    ap.add_argument("--out", type=Path, default=ROOT / "target" / "serve-compare")
    args = ap.parse_args()

    for path, what in ((K6, "k6 (make pytools)"), (CHAT_JS, "the k6 scenario"), (args.model, "the model")):
        if not path.is_file():
            sys.exit(f"serve_compare: {what} missing: {path}")
    args.out.mkdir(parents=True, exist_ok=True)
    users = [int(u) for u in args.users.split(",")]

    servers = []
    if args.only in (None, "kiln"):
        servers.append(("kiln", lambda d: start_kiln(
            args.model, {"engine": {"threads": args.threads}}, log_dir=d)))
    if args.only in (None, "llama.cpp"):
        bin_dir = llama_bin_dir()
        servers.append(("llama.cpp", lambda d: start_llama_server(
            bin_dir, args.model, args.threads, args.slots, args.ctx, log_dir=d)))

    started = time.time()
    results = [measure(name, start, u, args.duration, args.out) for u in users for name, start in servers]
    report = table(results)
    lines = verdicts(results)
    print("\n" + report + "\n")
    print("\n".join(lines))
    (args.out / "results.json").write_text(json.dumps(results, indent=2))
    (args.out / "table.md").write_text(report + "\n\n" + "\n".join(lines) + "\n")
    print(f"\nserve_compare: {time.time() - started:.0f} s; figures in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
