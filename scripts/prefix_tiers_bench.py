"""Measures the prefix cache's RAM and disk tiers against a real `kiln serve` (issue 43).

With a KV cache that holds only two long prompts, the workload rotates over 8 distinct
~3,000-token system prompts, each followed by a short question:

1. cold: each prompt once (nothing cached);
2. revisited: two more rounds over the 8 prompts with new questions (the KV cache holds two of
   them, so the others come back from the RAM tier);
3. after a restart: a new process on the same disk-tier directory, each prompt once;
4. 16 users at once, each with its own prompt (no repeats), tiers on and off, alternated.

Time to first token (TTFT) is measured on the client, streaming, as the time to the first
content chunk. Prints a JSON report; `--markdown` also prints the table docs/performance.md
shows. Run from the repository root with the release binary built:

    python scripts/prefix_tiers_bench.py [--model models/SmolLM2-135M-Instruct.Q4_1.gguf]
    python scripts/prefix_tiers_bench.py --size llama-1b --ram 2GiB

`--size` takes a random-weight file of a real model's shape from scripts/bench_models.py
(Llama-3.2-1B's for `llama-1b`, Q4_K_M, the default model's vocabulary and chat template),
written and quantized once into KILN_MODELS_CACHE (outside the repository) when missing.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import threading
import time
from pathlib import Path

import httpx2 as httpx

from servers import DEFAULT_MODEL, start_kiln

ROOT = Path(__file__).resolve().parent.parent

TOPICS = ["rivers", "volcanoes", "libraries", "bridges", "glaciers", "orchards", "lighthouses", "deserts"]
QUESTIONS = ["Give one example.", "Why does it matter?", "Name a risk.", "Say it in five words."]


def system_prompt(topic: str, words: int) -> str:
    """About `words` words (~1.3 tokens each) of rules about `topic`, distinct per topic."""
    out, i = [], 0
    while sum(len(s.split()) for s in out) < words:
        out.append(f"Rule {i} for the {topic} desk: answer about {topic} only, cite rule {i}, be brief.")
        i += 1
    return " ".join(out)


def ttft(base_url: str, system: str, question: str, max_tokens: int = 8) -> tuple[float, int, int]:
    """Streams one greedy chat request; (seconds to the first content chunk, cached tokens,
    prompt tokens)."""
    body = {
        "messages": [{"role": "system", "content": system}, {"role": "user", "content": question}],
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    t0 = time.perf_counter()
    first = None
    usage = {}
    with httpx.stream("POST", base_url + "/v1/chat/completions", json=body, timeout=600) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            ev = json.loads(line[6:])
            if first is None and ev.get("choices") and ev["choices"][0]["delta"].get("content"):
                first = time.perf_counter() - t0
            if ev.get("usage"):
                usage = ev["usage"]
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
    return (first if first is not None else time.perf_counter() - t0), cached, usage.get("prompt_tokens", 0)


def config(kv_positions: int, cache_dir: Path | None, ram: str) -> dict:
    cache = {"ram_bytes": ram}
    if cache_dir is not None:
        cache["dir"] = str(cache_dir)
    return {
        "engine": {"kv_cache": kv_positions},
        "scheduler": {"max_num_seqs": 16},
        "server": {"max_tokens_default": 32, "max_tokens_cap": 64, "request_timeout": 900, "drain_timeout": 5},
        "cache": cache,
    }


def rotation(args, prompts, workdir: Path) -> dict:
    cache_dir = workdir / "cache"
    cfg = config(args.kv_positions, cache_dir, args.ram)
    s = start_kiln(Path(args.model), cfg, log_dir=workdir / "rotation-1", timeout=300)
    try:
        cold = [ttft(s.base_url, p, QUESTIONS[0]) for p in prompts]
        revisit = [ttft(s.base_url, p, q) for q in QUESTIONS[1:3] for p in prompts]
        # Let the background writer finish before the restart.
        time.sleep(args.settle)
    finally:
        s.stop()
    s = start_kiln(Path(args.model), cfg, log_dir=workdir / "rotation-2", timeout=300)
    try:
        restart = [ttft(s.base_url, p, QUESTIONS[3]) for p in prompts]
    finally:
        s.stop()
    med = lambda xs: statistics.median(x[0] for x in xs)  # noqa: E731
    return {
        "prompt_tokens": [c[2] for c in cold],
        "cold_ttft_s": [round(c[0], 4) for c in cold],
        "revisit_ttft_s": [round(c[0], 4) for c in revisit],
        "revisit_cached": [c[1] for c in revisit],
        "restart_ttft_s": [round(c[0], 4) for c in restart],
        "restart_cached": [c[1] for c in restart],
        "median_cold_s": round(med(cold), 4),
        "median_revisit_s": round(med(revisit), 4),
        "median_restart_s": round(med(restart), 4),
        "revisit_ratio": round(med(revisit) / med(cold), 4),
        "restart_ratio": round(med(restart) / med(cold), 4),
    }


def thread_cpu(pid: int) -> dict[str, float]:
    """CPU seconds (user + system) each of process `pid`'s threads has used, summed by thread
    name (Linux /proc; empty elsewhere)."""
    tck = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    out: dict[str, float] = {}
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for t in tasks:
        try:
            s = Path(f"/proc/{pid}/task/{t}/stat").read_text()
        except OSError:
            continue
        name = s[s.index("(") + 1:s.rindex(")")]
        f = s[s.rindex(")") + 2:].split()
        out[name] = out.get(name, 0.0) + (int(f[11]) + int(f[12])) / tck
    return out


def users(args, workdir: Path, tiers_on: bool, run: int) -> dict:
    """16 users at once, each with its own prompt (no repeats): wall time, median TTFT and the
    CPU time each server thread used meanwhile (the engine's, the disk tier's writer
    `kiln-disk-tier` and reader `kiln-disk-read`)."""
    cache_dir = workdir / f"users-cache-{run}" if tiers_on else None
    cfg = config(args.kv_positions, cache_dir, args.ram if tiers_on else "0")
    s = start_kiln(Path(args.model), cfg, log_dir=workdir / f"users-{run}-{tiers_on}", timeout=300)
    results = [None] * args.users
    try:
        def one(i):
            p = system_prompt(f"user {run}-{i}", args.user_words)
            results[i] = ttft(s.base_url, p, QUESTIONS[i % 4], max_tokens=16)

        cpu0 = thread_cpu(s.pid)
        t0 = time.perf_counter()
        threads = [threading.Thread(target=one, args=(i,)) for i in range(args.users)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.perf_counter() - t0
        cpu = {k: round(v - cpu0.get(k, 0.0), 2) for k, v in thread_cpu(s.pid).items()}
    finally:
        s.stop()
    return {
        "tiers": "on" if tiers_on else "off",
        "wall_s": round(wall, 3),
        "median_ttft_s": round(statistics.median(r[0] for r in results), 4),
        "cached": sum(r[1] for r in results),
        "thread_cpu_s": {k: v for k, v in sorted(cpu.items()) if v > 0},
    }


def shape_file(size: str, qtype: str) -> Path:
    """The random-weight file of `size` in `qtype` (made by scripts/bench_models.py if missing)."""
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "bench_models.py"), "paths", "--sizes", size, "--types", qtype],
        check=True, capture_output=True, text=True,
    ).stdout.split()
    return Path(out[-1])


def ratio(a: float, b: float) -> float:
    return round(a / b, 4) if b else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=str(DEFAULT_MODEL))
    ap.add_argument("--size", help="a real model's shape with random weights (bench_models.py): llama-1b, ...")
    ap.add_argument("--type", default="Q4_K_M", help="the --size file's weight type")
    ap.add_argument("--words", type=int, default=2250, help="words per system prompt (~3,000 tokens)")
    ap.add_argument("--kv-positions", type=int, default=6400, help="KV cache: two long prompts")
    ap.add_argument("--ram", default="1GiB", help="cache.ram_bytes")
    ap.add_argument("--users", type=int, default=16)
    ap.add_argument("--user-words", type=int, default=300)
    ap.add_argument("--user-runs", type=int, default=2, help="on/off pairs, alternated")
    ap.add_argument("--settle", type=float, default=5.0, help="seconds for disk writes before the restart")
    ap.add_argument("--no-rotation", action="store_true", help="only the 16-user runs")
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args()
    if args.size:
        args.model = str(shape_file(args.size, args.type))
    prompts = [system_prompt(t, args.words) for t in TOPICS]
    with tempfile.TemporaryDirectory(prefix="kiln-tiers-") as d:
        workdir = Path(d)
        report = {
            "model": args.model,
            "load_before": os.getloadavg(),
            "rotation": None if args.no_rotation else rotation(args, prompts, workdir),
            "users": [users(args, workdir, on, r) for r in range(args.user_runs) for on in (True, False)],
            "load_after": os.getloadavg(),
        }
    u = report["users"]
    pairs = [ratio(off["wall_s"], on["wall_s"]) for on, off in zip(u[0::2], u[1::2])]
    # Throughput with the tiers on over off, per alternated pair (>= 1.0: no slower).
    report["users_on_over_off"] = pairs
    report["users_on_over_off_median"] = statistics.median(pairs)
    print(json.dumps(report, indent=1))
    if args.markdown and report["rotation"]:
        r = report["rotation"]
        print(f"| cold TTFT (median) | {r['median_cold_s']:.3f} s |")
        print(f"| revisited, RAM tier | {r['median_revisit_s']:.3f} s ({100 * r['revisit_ratio']:.1f}% of cold) |")
        print(f"| after a restart, disk tier | {r['median_restart_s']:.3f} s ({100 * r['restart_ratio']:.1f}% of cold) |")
    if args.markdown:
        for u in report["users"]:
            print(f"| {args.users} users, no repeats, tiers {u['tiers']} | wall {u['wall_s']:.2f} s, median TTFT {u['median_ttft_s']:.3f} s |")
        print(f"| {args.users} users, throughput tiers on / off | {report['users_on_over_off_median']:.3f}x (pairs {report['users_on_over_off']}) |")


if __name__ == "__main__":
    main()
