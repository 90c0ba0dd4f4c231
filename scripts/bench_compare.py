#!/usr/bin/env python3
"""Side-by-side speed of kiln and llama.cpp on the same GGUF files, same thread count.

For each model: prefill (pp512), single-stream decode (tg128) and aggregate decode with B
sequences (128-token prompts, 128 new tokens each). Each figure is the median of --repeat runs;
kiln and llama.cpp alternate so both see the same machine state. Prints a markdown table
(kiln, llama.cpp, ratio) and writes the raw figures as JSON.

    scripts/bench_compare.py --model models/X.gguf [--model ...] [--threads 2] [--repeat 5]
                             [--isa avx2] [--depth 4096,16384]

With --depth, each figure is instead prefill pp512 and decode tg128 after that many tokens
already in the context (llama-bench's -d; kiln bench's --depth), one pair per depth, and no
batched decode.

llama.cpp comes from ../shared/tools/llama-cpp-reference.sh (built once per machine). With
--isa avx2 (or avxvnni) kiln runs with KILN_ISA set to it and llama.cpp is its AVX2-only build
(KILN_REFERENCE_ISA=avx2: no AVX-512, no AVX-VNNI), so both sides use the instructions an
AVX2 machine has; the default is each side's best path on this CPU.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def reference_bin(shared: Path, isa) -> Path:
    env = dict(os.environ)
    if isa in ("avx2", "avxvnni"):
        env["KILN_REFERENCE_ISA"] = "avx2"
    out = subprocess.run(
        ["bash", str(shared / "tools/llama-cpp-reference.sh")],
        check=True, capture_output=True, text=True, env=env,
    )
    return Path(out.stdout.strip().splitlines()[-1])


def run_json(cmd, env=None):
    res = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if res.returncode != 0:
        sys.exit(f"bench_compare: {' '.join(map(str, cmd))} failed:\n{res.stderr[-2000:]}")
    return res.stdout


def kiln_once(kiln, model, threads, batches, isa, depth=0):
    env = dict(os.environ)
    env.pop("KILN_ISA", None)
    if isa:
        env["KILN_ISA"] = isa
    out = run_json([
        str(kiln), "bench", "--model", str(model), "-p", "512", "-n", "128", "-d", str(depth),
        "--batch", ",".join(map(str, batches)), "--repeat", "1", "--threads", str(threads), "--json",
    ], env)
    d = json.loads(out)
    return {
        "isa": d["isa"],
        "pp": d["prefill_tok_s"],
        "tg": d["decode_tok_s"],
        "batched": {int(b["batch"]): b["tok_s"] for b in d["batched"]},
    }


def llama_once(bin_dir, model, threads, batches, depth=0):
    env = dict(os.environ, LD_LIBRARY_PATH=str(bin_dir))
    out = run_json([
        str(bin_dir / "llama-bench"), "-m", str(model), "-t", str(threads),
        "-p", "512", "-n", "128", "-d", str(depth), "-r", "1", "-o", "json",
    ], env)
    pp = tg = None
    for e in json.loads(out):
        if e["n_prompt"] > 0 and e["n_gen"] == 0:
            pp = e["avg_ts"]
        elif e["n_gen"] > 0 and e["n_prompt"] == 0:
            tg = e["avg_ts"]
    if not batches:
        return {"pp": pp, "tg": tg, "batched": {}}
    ctx = max(4096, max(batches) * 256 + 256)
    out = run_json([
        str(bin_dir / "llama-batched-bench"), "-m", str(model), "-t", str(threads),
        "-c", str(ctx), "-npp", "128", "-ntg", "128",
        "-npl", ",".join(map(str, batches)), "--output-format", "jsonl",
    ], env)
    batched = {}
    for line in out.splitlines():
        line = line.strip()
        if line.startswith("{"):
            e = json.loads(line)
            batched[int(e["pl"])] = e["speed_tg"]
    return {"pp": pp, "tg": tg, "batched": batched}


def median_of(runs, key, batch=None):
    vals = [r["batched"].get(batch) if batch else r[key] for r in runs]
    vals = [v for v in vals if v is not None]
    return statistics.median(vals) if vals else None


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", action="append", required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--batch", default="4,8,16,32")
    ap.add_argument("--isa", default=None, choices=["scalar", "avx2", "avxvnni", "avx512"],
                    help="KILN_ISA for kiln; avx2/avxvnni also select llama.cpp's AVX2 build")
    ap.add_argument("--depth", default=None,
                    help="comma-separated context depths: pp512/tg128 after that many tokens")
    ap.add_argument("--kiln", default=str(ROOT / "target/release/kiln"))
    ap.add_argument("--shared", default=os.environ.get("KILN_SHARED", str(ROOT.parent / "shared")))
    ap.add_argument("--out", default=str(ROOT / "target/bench-compare.json"))
    args = ap.parse_args()
    batches = [int(b) for b in args.batch.split(",")]
    depths = [int(d) for d in args.depth.split(",")] if args.depth else [None]
    bin_dir = reference_bin(Path(args.shared), args.isa)
    results = {}
    for model in args.model:
        table, k_all, l_all = [], {}, {}
        for depth in depths:
            k_runs, l_runs = [], []
            # With a depth, kiln's batched test is reduced to one cheap B=1 run and not reported.
            kb, lb = (batches, batches) if depth is None else ([1], [])
            for i in range(args.repeat):
                at = f" depth {depth}" if depth is not None else ""
                print(f"bench_compare: {Path(model).name}{at} run {i + 1}/{args.repeat}",
                      file=sys.stderr)
                k_runs.append(kiln_once(args.kiln, model, args.threads, kb, args.isa, depth or 0))
                l_runs.append(llama_once(bin_dir, model, args.threads, lb, depth or 0))
            at = f" @ d{depth}" if depth is not None else ""
            rows = [(f"prefill pp512{at}", "pp", None), (f"decode tg128{at}", "tg", None)]
            if depth is None:
                rows += [(f"aggregate decode B={b}", None, b) for b in batches]
            for label, key, b in rows:
                kv, lv = median_of(k_runs, key, b), median_of(l_runs, key, b)
                ratio = kv / lv if kv and lv else None
                table.append({"metric": label, "kiln": kv, "llama_cpp": lv, "ratio": ratio})
            k_all[str(depth or 0)], l_all[str(depth or 0)] = k_runs, l_runs
        results[Path(model).name] = {"isa": k_all[str(depths[0] or 0)][0]["isa"], "table": table,
                                     "kiln_runs": k_all, "llama_runs": l_all}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=2))
    ref = "AVX2 build" if args.isa in ("avx2", "avxvnni") else "default build"
    print(f"threads={args.threads}, kiln isa={results[Path(args.model[0]).name]['isa']}, "
          f"llama.cpp {ref}, median of {args.repeat} runs, tok/s\n")
    print("| model | metric | kiln | llama.cpp | ratio |")
    print("|---|---|---:|---:|---:|")
    for name, r in results.items():
        for row in r["table"]:
            f = lambda v: f"{v:.1f}" if v is not None else "n/a"
            ratio = f"{row['ratio']:.2f}x" if row["ratio"] else "n/a"
            print(f"| {name} | {row['metric']} | {f(row['kiln'])} | {f(row['llama_cpp'])} | {ratio} |")


if __name__ == "__main__":
    main()
