#!/usr/bin/env python3
"""Records llama.cpp's reference outputs for the real gemma-3-270m Q4_K_M file into
tests/data/gemma3_270m/golden.json (tests/it/gemma_golden.rs compares kiln against them).

For each prompt, with ref_logits.c (a harness over the reference build's libllama: flash
attention, f16 K/V, 2 threads):
- llama.cpp's token ids for its text (llama-tokenize, BOS added as the file asks);
- its greedy continuation (argmax of the raw logits, up to 32 tokens, stopping after <eos> or
  <end_of_turn>): the prompt fed in chunks of 16, then one token at a time, as llama.cpp
  generates;
- the top-4 next-token log-probabilities at every position of `forced`: the prompt followed by
  that continuation, cut to a multiple of 8 tokens (never shorter than the prompt), teacher-
  forced in chunks of exactly 8. Why 8: on x86 llama.cpp picks its quantized matmul kernel by
  the batch's row count (Q6_K: the tiled K-quant matmul for >= 8 rows, the one-row `vec_dot`
  below; Q4_K: the repacked 4-row GEMM, a batch's last `rows % 4` through the GEMV), and the
  two orders round differently. Chunks of 8 put every recorded row on its prompt path (the
  kernels it runs for any prompt of 8 tokens or more), which is the order kiln computes every
  row in whatever its batch (kiln is batch invariant, so it cannot also take the one-row order
  for small batches). The greedy continuation keeps llama.cpp's own one-row decode path, so the
  test's greedy bar measures what the difference does to free-running generation.
One prompt is longer than the model's 512-position sliding window, so the local layers' window
is exercised.

Needs: the reference build (../shared/tools/llama-cpp-reference.sh, built once per machine),
gcc, and models/gemma-3-270m-Q4_K_M.gguf (scripts/fetch-model.sh gemma-3-270m). CI never runs
this; rerun it only when the reference or the prompts change.
"""
import datetime
import json
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from regen_arch_proofs import ROOT, SHARED, build_harness, git_describe, reference_bin, sha256  # noqa: E402

MODEL = ROOT / "models" / "gemma-3-270m-Q4_K_M.gguf"
OUT = ROOT / "tests" / "data" / "gemma3_270m" / "golden.json"
TOP, CHUNK, FORCED_CHUNK, THREADS, GENERATE = 4, 16, 8, 2, 32
STOP = [1, 106]  # <eos>, <end_of_turn>

PROMPTS = {
    "capitals": "The capital of France is Paris, and the capital of Germany is",
    "code": "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
    "story": "Once upon a time, in a small village by the sea,",
    "colors": "The three primary colors are",
    "boiling": "Water boils at a temperature of",
    "translate": "Translate to French: Good morning, how are you?\nFrench:",
    "counting": "1, 2, 3, 4, 5,",
    "qa": "Q: What is the largest planet in the solar system?\nA:",
    "unicode": "Les élèves ont mangé des crêpes à Noël. 日本の首都は",
}


def long_prompt() -> str:
    """About 700 tokens of plain English prose: past the 512-position window."""
    text = (SHARED / "guide" / "STYLE.md").read_text(encoding="utf-8")
    return text[:2800]


def tokenize(bin_dir: Path, text: str):
    out = subprocess.run([str(bin_dir / "llama-tokenize"), "-m", str(MODEL), "-p", text, "--ids",
                          "--log-disable"], check=True, capture_output=True, text=True,
                         env={"LD_LIBRARY_PATH": str(bin_dir)})
    return json.loads(out.stdout.strip().splitlines()[-1])


def reference(exe: Path, ids, generate: int, chunk: int):
    with tempfile.NamedTemporaryFile("w", suffix=".txt") as f:
        f.write(",".join(map(str, ids)))
        f.flush()
        ctx = ((len(ids) + generate) // 256 + 1) * 256
        out = subprocess.run([str(exe), "--model", str(MODEL), "--tokens-file", f.name,
                              "--top", str(TOP), "--chunk", str(chunk), "--ctx", str(ctx),
                              "--threads", str(THREADS), "--generate", str(generate),
                              "--stop", ",".join(map(str, STOP))],
                             check=True, capture_output=True, text=True)
    doc = json.loads(out.stdout)
    top = [[x for tid, lp in s["top"] for x in (tid, round(lp, 5))] for s in doc["steps"]]
    return top, doc["generated"], ctx


def main():
    if not MODEL.exists():
        sys.exit(f"regen_gemma_golden: {MODEL} missing (scripts/fetch-model.sh gemma-3-270m)")
    bin_dir = reference_bin()
    exe = build_harness(bin_dir)
    prompts = dict(PROMPTS, long_window=long_prompt())
    cases = []
    for name, text in prompts.items():
        ids = tokenize(bin_dir, text)
        gen = 8 if name == "long_window" else GENERATE
        print(f"regen_gemma_golden: {name}: {len(ids)} tokens", file=sys.stderr, flush=True)
        _, generated, _ = reference(exe, ids, gen, CHUNK)
        n = (len(ids) + len(generated)) // FORCED_CHUNK * FORCED_CHUNK
        if n < len(ids):
            sys.exit(f"regen_gemma_golden: {name}: {len(ids)} prompt tokens and a {len(generated)}"
                     f"-token continuation do not fill whole {FORCED_CHUNK}-token chunks")
        forced = (ids + generated)[:n]
        top, _, ctx = reference(exe, forced, 0, FORCED_CHUNK)
        cases.append({"name": name, "text": text, "prompt": ids, "generated": generated,
                      "forced": forced, "ctx": ctx, "top": top})
    doc = {
        "model": "models/gemma-3-270m-Q4_K_M.gguf",
        "model_sha256": sha256(MODEL),
        "reference": {"llama_cpp": f"{git_describe(bin_dir.parents[1])} (llama-cpp-python 0.3.36 sources)",
                      "harness": "scripts/reference/ref_logits.c", "tokenizer": "llama-tokenize",
                      "threads": THREADS, "chunk": CHUNK, "forced_chunk": FORCED_CHUNK, "flash_attn": True, "kv_cache": "f16",
                      "recorded": datetime.date.today().isoformat()},
        "top_k": TOP,
        "stop": STOP,
        "cases": cases,
    }
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(doc, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"regen_gemma_golden: wrote {OUT}", file=sys.stderr)


if __name__ == "__main__":
    main()
