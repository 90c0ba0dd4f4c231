#!/usr/bin/env python3
"""Records llama.cpp's teacher-forced log-probabilities for the default model's golden cases
with a Q8_0 KV cache (llama.cpp's `-ctk q8_0 -ctv q8_0`), for tests/it/golden.rs's
`golden_with_a_q8_0_kv_cache`: kiln's Q8_0 cache is held to llama.cpp's own Q8_0 cache on the
same tokens, since neither can stay within the f16 golden bars (a Q8_0 cache moves llama.cpp's
own greedy outputs off its f16 ones on 14 of the 24 cases).

For each case of ../shared/golden/smollm2-135m-instruct-q4_1/greedy.json, the prompt then the
reference's f16 greedy output are fed through scripts/reference/ref_logits.c (chunks of 16,
2 threads, --kv-type q8_0); the top-8 log-probabilities of every output step go to
tests/data/golden_q8_0_kv.json with the model's sha256.

    .venv/bin/python scripts/reference/regen_q8_kv_golden.py

Needs the reference build (../shared/tools/llama-cpp-reference.sh) and gcc; CI never runs this.
"""
import datetime
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from regen_arch_proofs import build_harness, git_describe, reference_bin  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
SHARED = Path(os.environ.get("KILN_SHARED", ROOT.parent / "shared"))
MODEL = ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
GOLDEN = SHARED / "golden" / "smollm2-135m-instruct-q4_1" / "greedy.json"
OUT = ROOT / "tests" / "data" / "golden_q8_0_kv.json"
TOP = 8


def main():
    bin_dir = reference_bin()
    exe = build_harness(bin_dir)
    cases = json.loads(GOLDEN.read_text())["cases"]
    out = []
    for c in cases:
        prompt, output = c["prompt_ids"], c["output_ids"]
        # Step i of the reference is the distribution after prompt + output[:i].
        fed = prompt + output[:-1] if output else prompt
        ctx = (len(fed) + 255) // 256 * 256
        r = subprocess.run([str(exe), "--model", str(MODEL), "--tokens", ",".join(map(str, fed)),
                            "--threads", "2", "--chunk", "16", "--top", str(TOP), "--ctx", str(ctx),
                            "--kv-type", "q8_0"], check=True, capture_output=True, text=True)
        steps = json.loads(r.stdout)["steps"][len(prompt) - 1:]
        out.append({"name": c["name"], "steps": [s["top"] for s in steps]})
        print(f"regen_q8_kv_golden: {c['name']}: {len(steps)} steps", file=sys.stderr)
    doc = {
        "what": "llama.cpp teacher-forced top-8 logprobs, Q8_0 K and V cache, over the f16 golden outputs",
        "model_sha256": hashlib.sha256(MODEL.read_bytes()).hexdigest(),
        "llama_cpp": git_describe(bin_dir.parents[1]),
        "harness": "scripts/reference/ref_logits.c --kv-type q8_0 --chunk 16 --threads 2",
        "date": datetime.date.today().isoformat(),
        "cases": out,
    }
    OUT.write_text(json.dumps(doc, indent=None, separators=(",", ":")) + "\n")
    print(f"regen_q8_kv_golden: wrote {OUT}", file=sys.stderr)


if __name__ == "__main__":
    main()
