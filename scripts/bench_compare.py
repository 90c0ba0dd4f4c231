#!/usr/bin/env python3
"""Side-by-side speed of kiln and llama.cpp on the same GGUF files, same thread count.

For each model: prefill (pp512), single-stream decode (tg128) and aggregate decode with B
sequences (128-token prompts, 128 new tokens each). Each figure is the median of --repeat runs;
kiln and llama.cpp alternate so both see the same machine state. Prints a markdown table
(kiln, llama.cpp, ratio, and each side's share of this machine's ceiling: decode against the
memory read bandwidth, prefill and batched decode against the int8 dot-product throughput, both
measured by `kiln bench --ceilings` at the start of the run) and writes the raw figures as JSON.
Bytes and multiply-adds per token are kiln's (`kiln bench --json`: every matmul's weights and
the LM head, i.e. what a decode step streams); llama.cpp runs the same file.

    scripts/bench_compare.py --model models/X.gguf [--model ...] [--threads 2] [--repeat 5]
                             [--sized-model ~/.cache/kiln-models/llama-1b.Q4_K_M.gguf ...]
                             [--sized-batch 16] [--isa avx2] [--depth 4096,16384]
                             [--prompt 512] [--gen 128]

--sized-model files (the real-size random-weight files of scripts/bench_models.py) run the
batched test at --sized-batch only, which keeps a run of 1B-8B files bounded.

After the full table comes one line per file with its architecture (read from the GGUF) and the
three ratios against issue 19's bars (prefill pp512 >= 1.5x, decode tg128 >= 1.2x, 16 sequences
>= 1.5x llama.cpp; 2x for the mixtures of experts, issue 40's). `--summary FILE` prints both tables again from a saved --out JSON.

--prompt and --gen shorten the prefill and decode tests (and the batched test's new tokens)
when a loaded machine makes llama.cpp too slow for 512 and 128; the metrics then say their
lengths (pp128, tg16), and the bars still apply to them.

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
import struct
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# Issue 19's speed bars: (metric prefix, minimum ratio to llama.cpp).
BARS = [("prefill pp512", 1.5), ("decode tg128", 1.2), ("aggregate decode B=16", 1.5)]
# Issue 40's, for the mixtures of experts: 16 sequences >= 2x.
MOE_ARCHS = {"qwen3moe", "gpt-oss", "olmoe", "granitemoe"}
MOE_BARS = [("prefill pp512", 1.5), ("decode tg128", 1.2), ("aggregate decode B=16", 2.0)]


def bars_for(arch: str):
    return MOE_BARS if arch in MOE_ARCHS else BARS


def gguf_arch(path) -> str:
    """`general.architecture` of a GGUF file (read from its header), or "?"."""
    try:
        with open(path, "rb") as f:
            if f.read(4) != b"GGUF":
                return "?"
            _version, _n_tensors, n_kv = struct.unpack("<IQQ", f.read(20))
            sizes = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}

            def text():
                (n,) = struct.unpack("<Q", f.read(8))
                return f.read(n).decode("utf-8", "replace")

            def skip(t):
                if t == 8:
                    text()
                elif t == 9:
                    sub, n = struct.unpack("<IQ", f.read(12))
                    for _ in range(n):
                        skip(sub)
                else:
                    f.seek(sizes[t], 1)

            for _ in range(n_kv):
                key = text()
                (t,) = struct.unpack("<I", f.read(4))
                if key == "general.architecture" and t == 8:
                    return text()
                skip(t)
    except (OSError, struct.error, KeyError):
        pass
    return "?"


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


def kiln_once(kiln, model, threads, batches, isa, depth=0, pp=512, tg=128):
    env = dict(os.environ)
    env.pop("KILN_ISA", None)
    if isa:
        env["KILN_ISA"] = isa
    out = run_json([
        str(kiln), "bench", "--model", str(model), "-p", str(pp), "-n", str(tg), "-d", str(depth),
        "--batch", ",".join(map(str, batches)), "--repeat", "1", "--threads", str(threads), "--json",
    ], env)
    d = json.loads(out)
    return {
        "isa": d["isa"],
        "bytes": d.get("weight_bytes_per_token"),
        "macs": d.get("macs_per_token"),
        "pp": d["prefill_tok_s"],
        "tg": d["decode_tok_s"],
        "batched": {int(b["batch"]): b["tok_s"] for b in d["batched"]},
    }


def llama_once(bin_dir, model, threads, batches, depth=0, pp=512, tg=128):
    env = dict(os.environ, LD_LIBRARY_PATH=str(bin_dir))
    out = run_json([
        str(bin_dir / "llama-bench"), "-m", str(model), "-t", str(threads),
        "-p", str(pp), "-n", str(tg), "-d", str(depth), "-r", "1", "-o", "json",
    ], env)
    pp_ts = tg_ts = None
    for e in json.loads(out):
        if e["n_prompt"] > 0 and e["n_gen"] == 0:
            pp_ts = e["avg_ts"]
        elif e["n_gen"] > 0 and e["n_prompt"] == 0:
            tg_ts = e["avg_ts"]
    if not batches:
        return {"pp": pp_ts, "tg": tg_ts, "batched": {}}
    ctx = max(4096, max(batches) * 256 + 256)
    out = run_json([
        str(bin_dir / "llama-batched-bench"), "-m", str(model), "-t", str(threads),
        "-c", str(ctx), "-npp", "128", "-ntg", str(tg),
        "-npl", ",".join(map(str, batches)), "--output-format", "jsonl",
    ], env)
    batched = {}
    for line in out.splitlines():
        line = line.strip()
        if line.startswith("{"):
            e = json.loads(line)
            batched[int(e["pl"])] = e["speed_tg"]
    return {"pp": pp_ts, "tg": tg_ts, "batched": batched}


def ceilings(kiln, threads, isa):
    env = dict(os.environ)
    env.pop("KILN_ISA", None)
    if isa:
        env["KILN_ISA"] = isa
    return json.loads(run_json([str(kiln), "bench", "--ceilings", "--threads", str(threads),
                                "--json"], env))


def share(tok_s, per_tok, ceiling):
    """tok_s * per_tok as a fraction of ceiling (per second), or None."""
    if not tok_s or not per_tok or not ceiling:
        return None
    return tok_s * per_tok / ceiling


def median_of(runs, key, batch=None):
    vals = [r["batched"].get(batch) if batch else r[key] for r in runs]
    vals = [v for v in vals if v is not None]
    return statistics.median(vals) if vals else None


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", action="append", default=[])
    ap.add_argument("--sized-model", action="append", default=[],
                    help="a real-size file: batched decode at --sized-batch only")
    ap.add_argument("--sized-batch", default="16")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--batch", default="4,8,16,32")
    ap.add_argument("--isa", default=None, choices=["scalar", "avx2", "avxvnni", "avx512"],
                    help="KILN_ISA for kiln; avx2/avxvnni also select llama.cpp's AVX2 build")
    ap.add_argument("--prompt", type=int, default=512,
                    help="prefill test length (the bars are for 512)")
    ap.add_argument("--gen", type=int, default=128,
                    help="decode test length, also the batched test's new tokens (bars: 128)")
    ap.add_argument("--depth", default=None,
                    help="comma-separated context depths: pp512/tg128 after that many tokens")
    ap.add_argument("--kiln", default=str(ROOT / "target/release/kiln"))
    ap.add_argument("--shared", default=os.environ.get("KILN_SHARED", str(ROOT.parent / "shared")))
    ap.add_argument("--out", default=str(ROOT / "target/bench-compare.json"))
    ap.add_argument("--summary", default=None, metavar="JSON",
                    help="print the tables of a saved --out file and exit (no runs)")
    args = ap.parse_args()
    if args.summary:
        doc = json.loads(Path(args.summary).read_text())
        for name, r in doc["models"].items():
            r.setdefault("arch", gguf_arch(r.get("path", "")))
        print_tables(doc)
        return
    if not args.model and not args.sized_model:
        ap.error("give at least one --model or --sized-model")
    depths = [int(d) for d in args.depth.split(",")] if args.depth else [None]
    bin_dir = reference_bin(Path(args.shared), args.isa)
    ceil = ceilings(args.kiln, args.threads, args.isa)
    print(f"bench_compare: ceilings {ceil}", file=sys.stderr)
    bw = ceil["read_gb_s"] * 1e9
    mac = (ceil["int8_gmac_s"] or 0) * 1e9
    results = {}
    runs = [(m, args.batch) for m in args.model] + [(m, args.sized_batch) for m in args.sized_model]
    for model, batch_list in runs:
        table, k_all, l_all = [], {}, {}
        for depth in depths:
            batches = [int(b) for b in batch_list.split(",")]
            # With a depth, kiln's batched test is one cheap B=1 run, not reported.
            kb, lb = (batches, batches) if depth is None else ([1], [])
            k_runs, l_runs = [], []
            for i in range(args.repeat):
                at = f" depth {depth}" if depth is not None else ""
                print(f"bench_compare: {Path(model).name}{at} run {i + 1}/{args.repeat}",
                      file=sys.stderr)
                k_runs.append(kiln_once(args.kiln, model, args.threads, kb, args.isa, depth or 0,
                                        args.prompt, args.gen))
                l_runs.append(llama_once(bin_dir, model, args.threads, lb, depth or 0,
                                         args.prompt, args.gen))
            at = f" @ d{depth}" if depth is not None else ""
            rows = [(f"prefill pp{args.prompt}{at}", "pp", None),
                    (f"decode tg{args.gen}{at}", "tg", None)]
            if depth is None:
                rows += [(f"aggregate decode B={b}", None, b) for b in batches]
            nbytes, macs = k_runs[0]["bytes"], k_runs[0]["macs"]
            for label, key, b in rows:
                kv, lv = median_of(k_runs, key, b), median_of(l_runs, key, b)
                ratio = kv / lv if kv and lv else None
                # Decode streams the weights once per step; the others are compute.
                per, ceiling, bound = (nbytes, bw, "bw") if key == "tg" else (macs, mac, "int8")
                table.append({"metric": label, "kiln": kv, "llama_cpp": lv, "ratio": ratio,
                              "bound": bound, "kiln_share": share(kv, per, ceiling),
                              "llama_share": share(lv, per, ceiling)})
            k_all[str(depth or 0)], l_all[str(depth or 0)] = k_runs, l_runs
        first_runs = k_all[str(depths[0] or 0)]
        results[Path(model).name] = {"isa": first_runs[0]["isa"], "table": table,
                                     "path": str(model), "arch": gguf_arch(model),
                                     "bytes_per_token": first_runs[0]["bytes"],
                                     "macs_per_token": first_runs[0]["macs"],
                                     "kiln_runs": k_all, "llama_runs": l_all}
        # Written after every model, so a long run interrupted keeps what it measured.
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps({"ceilings": ceil, "models": results,
                                              "threads": args.threads, "repeat": args.repeat,
                                              "isa": args.isa}, indent=2))
    print_tables({"ceilings": ceil, "models": results, "threads": args.threads,
                  "repeat": args.repeat, "isa": args.isa})


def bar_row(table, metric):
    """The row a bar applies to: prefill and decode of any test length (a run with --prompt or
    --gen says its lengths in the metric), the batched test by its count; none at a depth."""
    for x in table:
        if " @ d" in x["metric"]:
            continue
        if metric.startswith(("prefill", "decode tg")):
            if x["metric"].split(" pp")[0].split(" tg")[0] == metric.split(" pp")[0].split(" tg")[0]:
                return x
        elif x["metric"] == metric:
            return x
    return None


def print_tables(doc):
    """The full markdown table, then one line per file against issue 19's bars."""
    ceil, results = doc["ceilings"], doc["models"]
    isa = doc.get("isa")
    ref = "AVX2 build" if isa in ("avx2", "avxvnni") else "default build"
    first = next(iter(results.values()))
    repeat = doc.get("repeat") or len(next(iter(first["kiln_runs"].values())))
    print(f"threads={doc.get('threads', ceil.get('threads'))}, kiln isa={first['isa']}, llama.cpp "
          f"{ref}, median of {repeat} runs, tok/s; ceilings (best of 5): memory read "
          f"{ceil['read_gb_s']:.1f} GB/s, int8 {ceil['int8_gmac_s'] or 0:.0f} G MAC/s\n")
    print("| model | GB/token | metric | kiln | llama.cpp | ratio | kiln / ceiling | llama.cpp / ceiling |")
    print("|---|---:|---|---:|---:|---:|---:|---:|")
    for name, r in results.items():
        gb = f"{r['bytes_per_token'] / 1e9:.3f}" if r["bytes_per_token"] else "n/a"
        for row in r["table"]:
            f = lambda v: f"{v:.1f}" if v is not None else "n/a"
            pct = lambda v: f"{100 * v:.0f}% {row['bound']}" if v is not None else "n/a"
            ratio = f"{row['ratio']:.2f}x" if row["ratio"] else "n/a"
            print(f"| {name} | {gb} | {row['metric']} | {f(row['kiln'])} | {f(row['llama_cpp'])} "
                  f"| {ratio} | {pct(row['kiln_share'])} | {pct(row['llama_share'])} |")
    if not any(bar_row(r["table"], m) for r in results.values() for m, _ in BARS):
        return  # --depth runs: the bars are for the figures without context
    print("\n| model | architecture | prefill pp512 (bar 1.5x) | decode tg128 (bar 1.2x) "
          "| 16 sequences (bar 1.5x; mixtures of experts 2x) | bars met |")
    print("|---|---|---:|---:|---:|---|")
    for name, r in results.items():
        cells, met = [], []
        for metric, bar in bars_for(r.get("arch") or "?"):
            row = bar_row(r["table"], metric)
            if not row or not row["ratio"]:
                cells.append("n/a")
                continue
            cells.append(f"{row['kiln']:.1f} / {row['llama_cpp']:.1f} = {row['ratio']:.2f}x")
            met.append(row["ratio"] >= bar)
        verdict = "all" if met and all(met) else f"{sum(met)} of {len(BARS)}"
        arch = r.get("arch") or "?"
        print(f"| {name} | {arch} | {' | '.join(cells)} | {verdict} |")


if __name__ == "__main__":
    main()
