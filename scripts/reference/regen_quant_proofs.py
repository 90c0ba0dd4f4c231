#!/usr/bin/env python3
"""Records llama.cpp's outputs for the quant-type proofs (tests/it/quant_proof.rs, issue 40).

kiln reads IQ4_NL, IQ4_XS and MXFP4 but does not write them, so these files are
llama-quantize's: the architecture proof's F16 file of a variant (`cargo run --example
proof_models`, the same seed as regen_arch_proofs.py, its hash checked against
tests/data/arch_proof/<variant>.json) goes through the reference build's llama-quantize, and
llama.cpp runs the result through ref_logits.c teacher-forced over the variant's 256 tokens.
The sha256 of each quantized file and the top-4 log-probabilities at every position go to
tests/data/quant_proof/<variant>.json; the test regenerates the F16 file, re-runs
llama-quantize (deterministic) and refuses to compare if the hash differs.

    .venv/bin/python scripts/reference/regen_quant_proofs.py

Needs what regen_arch_proofs.py needs. CI never runs this: it only reads the recorded JSON.
"""
import datetime
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from regen_arch_proofs import (CHUNK, CTX, ROOT, SEED, THREADS, TOP, build_harness,  # noqa: E402
                               git_describe, log, reference_bin, reference_top, sha256,
                               write_models)

# (variant, llama-quantize ftype): a dense llama-shape file and a mixture-of-experts one.
PROOFS = {"llama": ["IQ4_NL", "IQ4_XS"], "qwen3moe": ["MXFP4_MOE"]}
OUT = ROOT / "tests" / "data" / "quant_proof"


def main():
    bin_dir = reference_bin()
    exe = build_harness(bin_dir)
    OUT.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="kiln-quant-proof-") as tmp:
        work = Path(tmp)
        files, tokens = write_models(work, list(PROOFS))
        tokens_file = work / "tokens.txt"
        tokens_file.write_text(",".join(map(str, tokens)))
        env = dict(os.environ, LD_LIBRARY_PATH=str(bin_dir))
        for variant, ftypes in PROOFS.items():
            f16 = files[(variant, "F16")]
            recorded = json.loads((ROOT / "tests/data/arch_proof" / f"{variant}.json").read_text())
            if recorded["files"]["F16"]["sha256"] != f16["sha256"]:
                raise SystemExit(f"{variant}: the F16 file differs from the architecture proof's")
            doc = {
                "variant": variant,
                "source": {"F16_sha256": f16["sha256"], "seed": SEED,
                           "tokens": f"tests/data/arch_proof/{variant}.json"},
                "reference": {
                    "llama_cpp": f"{git_describe(bin_dir.parents[1])} (llama-cpp-python 0.3.36 sources)",
                    "build": bin_dir.parent.name, "harness": "scripts/reference/ref_logits.c",
                    "quantizer": "llama-quantize F16 OUT FTYPE (no imatrix)",
                    "threads": THREADS, "chunk": CHUNK, "ctx": CTX, "flash_attn": True,
                    "kv_cache": "f16", "recorded": datetime.date.today().isoformat(),
                },
                "top_k": TOP,
                "files": {},
            }
            for ftype in ftypes:
                out = work / f"{variant}.{ftype}.gguf"
                subprocess.run([str(bin_dir / "llama-quantize"), f16["path"], str(out), ftype],
                               check=True, capture_output=True, env=env)
                log(f"{variant} {ftype}: llama.cpp teacher-forced over {len(tokens)} positions")
                doc["files"][ftype] = {"sha256": sha256(out), "bytes": out.stat().st_size,
                                       "top": reference_top(exe, out, tokens_file)}
            path = OUT / f"{variant}.json"
            path.write_text(json.dumps(doc, separators=(",", ":")) + "\n")
            log(f"wrote {path} ({path.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
