#!/usr/bin/env python3
"""Records llama.cpp's outputs for the quant-type proofs (tests/it/quant_proof.rs, issue 40).

The files are kiln-written, as the architecture proof's: `cargo run --example proof_models --
--nonlinear` writes each variant (the same seed as regen_arch_proofs.py) with kiln's own
IQ4_NL / IQ4_XS / MXFP4 quantizers and llama-quantize's per-tensor type choice for the ftype
(kiln::engine::synth). This script checks that choice against the reference build's
llama-quantize run on the variant's F16 file (same tensor types; the bytes differ, kiln's
quantizers being its own), and llama.cpp runs the kiln-written file through ref_logits.c
teacher-forced over the variant's 256 tokens. The sha256 of each file and the top-4
log-probabilities at every position go to tests/data/quant_proof/<variant>.json; the test
writes the same file in memory, refuses to compare if the hash differs, and needs no
llama-quantize.

    .venv/bin/python scripts/reference/regen_quant_proofs.py [VARIANT...]

With variant names, only those are recorded (the other JSON files are left as they are).

Needs what regen_arch_proofs.py needs. CI never runs this: it only reads the recorded JSON.
"""
import datetime
import json
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from regen_arch_proofs import (CHUNK, CTX, ROOT, SEED, SHARED, THREADS, TOP,  # noqa: E402
                               VOCAB_REL, build_harness, compare_with_llama_quantize,
                               git_describe, log, reference_bin, reference_top, sha256,
                               write_models)

# (variant, llama-quantize ftype): a dense llama-shape file and two mixture-of-experts ones
# (gpt-oss's native format being MXFP4_MOE).
PROOFS = {"llama": ["IQ4_NL", "IQ4_XS"], "qwen3moe": ["MXFP4_MOE"], "gpt-oss": ["MXFP4_MOE"]}
OUT = ROOT / "tests" / "data" / "quant_proof"


def write_nonlinear(workdir: Path, variants):
    """proof_models --nonlinear: {(variant, ftype): info}."""
    cmd = ["cargo", "run", "--release", "-q", "--example", "proof_models", "--", "--nonlinear",
           str(SHARED / VOCAB_REL), str(workdir), str(SEED), *variants]
    out = subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True, text=True).stdout
    recs = [json.loads(line) for line in out.splitlines()]
    return {(r["variant"], r["quant"]): r for r in recs if "variant" in r}


def main():
    wanted = sys.argv[1:] or list(PROOFS)
    unknown = [v for v in wanted if v not in PROOFS]
    if unknown:
        raise SystemExit(f"no quant proof for {unknown}; known: {list(PROOFS)}")
    proofs = {v: PROOFS[v] for v in wanted}
    bin_dir = reference_bin()
    exe = build_harness(bin_dir)
    OUT.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="kiln-quant-proof-") as tmp:
        work = Path(tmp)
        files, tokens = write_models(work, list(proofs))
        kiln_files = write_nonlinear(work / "nonlinear", list(proofs))
        tokens_file = work / "tokens.txt"
        tokens_file.write_text(",".join(map(str, tokens)))
        for variant, ftypes in proofs.items():
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
                    "quantizer": "kiln (proof_models --nonlinear); tensor types as llama-quantize's",
                    "threads": THREADS, "chunk": CHUNK, "ctx": CTX, "flash_attn": True,
                    "kv_cache": "f16", "recorded": datetime.date.today().isoformat(),
                },
                "top_k": TOP,
                "files": {},
            }
            for ftype in ftypes:
                rec = kiln_files[(variant, ftype)]
                out = Path(rec["path"])
                if sha256(out) != rec["sha256"]:
                    raise SystemExit(f"{out}: hash differs from what proof_models printed")
                vs = compare_with_llama_quantize(bin_dir, Path(f16["path"]), out, ftype)
                log(f"{variant} {ftype}: types as llama-quantize's; llama.cpp teacher-forced "
                    f"over {len(tokens)} positions")
                doc["files"][ftype] = {"sha256": rec["sha256"], "bytes": rec["bytes"],
                                       "vs_llama_quantize": vs,
                                       "top": reference_top(exe, out, tokens_file)}
            path = OUT / f"{variant}.json"
            path.write_text(json.dumps(doc, separators=(",", ":")) + "\n")
            log(f"wrote {path} ({path.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
