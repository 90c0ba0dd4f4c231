#!/usr/bin/env python3
"""Regression tracking for kiln's benchmarks: save a baseline, then flag any figure more than
5% worse than it.

    scripts/bench_regress.py save   [--kiln target/release/kiln] [--repeat 3]
                                    [--sized llama-1b,llama-3b --types Q4_K_M]
    scripts/bench_regress.py check  [--kiln target/release/kiln] [--repeat 3] [--tolerance 0.05]
                                    [--sized ... --types ...]

Figures: `kiln bench --json` (prefill, decode, batched decode at B=16), `kiln bench
--concurrency 1,16 --json` (served tokens/s, TTFT p95, ITL p99, interference gap) and the
criterion benches (`cargo bench -- --save-baseline kiln` / `--baseline kiln`, read back from
target/criterion/*/change/estimates.json). Each kiln figure is the median of --repeat runs.
With --sized, `kiln bench` also runs on the real-size random-weight files of
scripts/bench_models.py (pp128, tg32, 16 sequences): figures `<file>:prefill_tok_s` etc.
The baseline lives in target/bench-baseline.json (machine-specific, never committed).
`check` exits 1 when anything regressed, so it can gate a change before it lands.
"""
import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BASELINE = ROOT / "target" / "bench-baseline.json"
CRITERION_NAME = "kiln"

# name -> True when higher is better
DIRECTION = {
    "prefill_tok_s": True,
    "decode_tok_s": True,
    "batched16_tok_s": True,
    "served1_tok_s": True,
    "served16_tok_s": True,
    "served16_ttft_p95_ms": False,
    "served16_itl_p99_ms": False,
    "interference_max_gap_ms": False,
}


def run(cmd):
    res = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    if res.returncode != 0:
        sys.exit(f"bench_regress: {' '.join(map(str, cmd))} failed:\n{res.stderr[-3000:]}")
    return res.stdout


def kiln_figures(kiln, repeat):
    runs = []
    for _ in range(repeat):
        eng = json.loads(run([kiln, "bench", "-p", "512", "-n", "128", "--batch", "16",
                              "--repeat", "1", "--json"]))
        srv = json.loads(run([kiln, "bench", "--concurrency", "1,16", "--requests-per-user", "2",
                              "--json"]))
        c = {row["users"]: row for row in srv["concurrency"]}
        runs.append({
            "prefill_tok_s": eng["prefill_tok_s"],
            "decode_tok_s": eng["decode_tok_s"],
            "batched16_tok_s": eng["batched"][0]["tok_s"],
            "served1_tok_s": c[1]["gen_tok_s"],
            "served16_tok_s": c[16]["gen_tok_s"],
            "served16_ttft_p95_ms": c[16]["ttft_ms"]["p95"],
            "served16_itl_p99_ms": c[16]["itl_ms"]["p99"],
            "interference_max_gap_ms": srv["interference"]["max_gap_ms"],
        })
    return {k: statistics.median(r[k] for r in runs) for k in DIRECTION}


def sized_figures(kiln, repeat, sizes, types):
    if not sizes:
        return {}
    paths = run([sys.executable, str(ROOT / "scripts" / "bench_models.py"), "paths",
                 "--sizes", sizes, "--types", types]).split()
    out = {}
    for path in paths:
        name = Path(path).name.removesuffix(".gguf")
        runs = [json.loads(run([kiln, "bench", "--model", path, "-p", "128", "-n", "32",
                                "--batch", "16", "--repeat", "1", "--json"]))
                for _ in range(repeat)]
        out[f"{name}:prefill_tok_s"] = statistics.median(r["prefill_tok_s"] for r in runs)
        out[f"{name}:decode_tok_s"] = statistics.median(r["decode_tok_s"] for r in runs)
        out[f"{name}:batched16_tok_s"] = statistics.median(
            r["batched"][0]["tok_s"] for r in runs)
    return out


def criterion(mode):
    flag = "--save-baseline" if mode == "save" else "--baseline"
    run(["cargo", "bench", "--bench", "kernels", "--bench", "attention", "--bench", "sampling",
         "--", flag, CRITERION_NAME])
    changes = {}
    if mode == "check":
        for est in (ROOT / "target" / "criterion").glob("**/change/estimates.json"):
            bench = str(est.parent.parent.relative_to(ROOT / "target" / "criterion"))
            mean = json.loads(est.read_text())["mean"]["point_estimate"]
            changes[bench] = mean  # relative change of the mean time (+0.05 = 5% slower)
    return changes


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["save", "check"])
    ap.add_argument("--kiln", default=str(ROOT / "target/release/kiln"))
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--tolerance", type=float, default=0.05)
    ap.add_argument("--no-criterion", action="store_true")
    ap.add_argument("--sized", default="", help="bench_models.py sizes (comma-separated)")
    ap.add_argument("--types", default="Q4_K_M")
    a = ap.parse_args()

    figures = kiln_figures(a.kiln, a.repeat)
    figures.update(sized_figures(a.kiln, a.repeat, a.sized, a.types))
    if a.mode == "save":
        if not a.no_criterion:
            criterion("save")
        BASELINE.parent.mkdir(parents=True, exist_ok=True)
        BASELINE.write_text(json.dumps(figures, indent=1))
        print(f"bench_regress: baseline saved to {BASELINE}")
        for k, v in figures.items():
            print(f"  {k}: {v:.1f}")
        return
    if not BASELINE.is_file():
        sys.exit(f"bench_regress: no baseline at {BASELINE}: run `scripts/bench_regress.py save` first")
    base = json.loads(BASELINE.read_text())
    bad = []
    print("| figure | baseline | now | change |")
    print("|---|---:|---:|---:|")
    for k, n in figures.items():
        higher = DIRECTION.get(k, True)
        b = base.get(k)
        if not b:
            continue
        change = (n - b) / b
        worse = -change if higher else change
        flag = " REGRESSED" if worse > a.tolerance else ""
        print(f"| {k} | {b:.1f} | {n:.1f} | {change:+.1%}{flag} |")
        if flag:
            bad.append(k)
    if not a.no_criterion:
        for bench, change in sorted(criterion("check").items()):
            if change > a.tolerance:
                print(f"| criterion {bench} | | | {change:+.1%} time REGRESSED |")
                bad.append(bench)
    if bad:
        sys.exit(f"bench_regress: {len(bad)} figures more than {a.tolerance:.0%} worse: {', '.join(bad)}")
    print("bench_regress: no figure regressed")


if __name__ == "__main__":
    main()
