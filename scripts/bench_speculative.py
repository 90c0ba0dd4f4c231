#!/usr/bin/env python3
"""Speculative decoding over HTTP: kiln against llama.cpp's llama-server, one stream.

Servers (each started once on a free 127.0.0.1 port with --threads threads and stopped by its
pid): kiln (`[speculative] method = "ngram"`, its default; its "off" figures are the same
server with each request's `speculative.n_max` set to 0), llama-server without speculation,
with `--spec-type ngram-simple` and with `--spec-type ngram-mod`. Prompts: the "repeat" and
"chat" workloads of benches/speculative/prompts.json (also what `kiln bench --speculative`
runs), each rendered by the server's own POST /apply-template and sent to POST /completion,
greedy, n_predict tokens at most. The figure per request is llama-server's own
`timings.predicted_n / predicted_ms` (both servers report it: decode only, prompt excluded);
per run, a workload's tokens over its time. Runs alternate between the servers (the order
rotates each round) and each figure is the median of --rounds rounds. The load average is
printed before and after: other work on the machine slows every server.

    scripts/bench_speculative.py [--model models/X.gguf] [--threads 2] [--rounds 3]
                                 [--n-predict 256] [--workloads repeat,chat]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from servers import DEFAULT_MODEL, ROOT, start_kiln, start_llama_server  # noqa: E402
from serve_compare import llama_bin_dir  # noqa: E402

PROMPTS = ROOT / "benches" / "speculative" / "prompts.json"


def post(url: str, body: dict, timeout: float = 600.0) -> dict:
    req = urllib.request.Request(url, json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def render(base_url: str, system: str, user: str) -> str:
    messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
    return post(base_url + "/apply-template", {"messages": messages})["prompt"]


def run(base_url: str, prompts: list[str], n_predict: int, extra: dict) -> tuple[float, str]:
    """Decode tokens/s over `prompts` (their tokens over their time) and the replies' text."""
    tokens, ms, text = 0, 0.0, []
    for p in prompts:
        r = post(base_url + "/completion", {"prompt": p, "n_predict": n_predict,
                                            "temperature": 0, "cache_prompt": False, **extra})
        tokens += r["timings"]["predicted_n"]
        ms += r["timings"]["predicted_ms"]
        text.append(r["content"])
    return tokens / (ms / 1000.0), "\n".join(text)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", type=Path, default=DEFAULT_MODEL)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--n-predict", type=int, default=256)
    ap.add_argument("--workloads", default="repeat,chat",
                    help="comma-separated workloads of prompts.json (default: repeat,chat)")
    ap.add_argument("--out", type=Path, default=ROOT / "target" / "bench-speculative")
    args = ap.parse_args()
    set_ = json.loads(PROMPTS.read_text())
    args.out.mkdir(parents=True, exist_ok=True)
    print(f"load average before: {os.getloadavg()}", flush=True)
    bin_dir = llama_bin_dir()
    servers = {}
    try:
        servers["kiln"] = start_kiln(args.model, {"engine": {"threads": args.threads}},
                                     log_dir=args.out / "kiln")
        for spec in ["none", "ngram-simple", "ngram-mod"]:
            servers[f"llama {spec}"] = start_llama_server(
                bin_dir, args.model, args.threads, 1, 4096, log_dir=args.out / spec,
                args=["--spec-type", spec])
        # (name, server, extra request fields)
        modes = [("kiln off", "kiln", {"speculative.n_max": 0}), ("kiln ngram", "kiln", {})]
        modes += [(name, name, {}) for name in servers if name != "kiln"]
        report = {}
        for workload in args.workloads.split(","):
            prompts = {name: [render(s.base_url, set_["system"], u) for u in set_[workload]]
                       for name, s in servers.items()}
            rates = {m[0]: [] for m in modes}
            texts = {}
            for name, srv, extra in modes:  # warm-up
                run(servers[srv].base_url, prompts[srv][:1], 16, extra)
            for r in range(args.rounds):
                order = modes[r % len(modes):] + modes[:r % len(modes)]
                for name, srv, extra in order:
                    rate, text = run(servers[srv].base_url, prompts[srv], args.n_predict, extra)
                    rates[name].append(rate)
                    texts.setdefault(name, text)
            assert texts["kiln off"] == texts["kiln ngram"], "kiln's replies differ with guesses"
            report[workload] = {m: statistics.median(v) for m, v in rates.items()}
            print(f"\n{workload} (median of {args.rounds}, decode tokens/s, one stream):")
            base = report[workload]
            for m, v in base.items():
                print(f"  {m:<20} {v:8.1f}   x{v / base['kiln off']:.2f} of kiln off", flush=True)
            best = max(base["llama ngram-simple"], base["llama ngram-mod"])
            print(f"  kiln ngram / llama-server's best n-gram mode: x{base['kiln ngram'] / best:.2f}")
        (args.out / "report.json").write_text(json.dumps(report, indent=1))
    finally:
        for s in servers.values():
            s.stop()
    print(f"\nload average after: {os.getloadavg()}  ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())})")


if __name__ == "__main__":
    main()
