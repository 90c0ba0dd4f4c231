#!/usr/bin/env python3
"""Records llama.cpp's outputs for the architecture proofs (tests/it/arch_proof.rs).

For every proof variant (kiln::engine::synth::proof_variants: one small random-weight model per
architecture and variant) and every weight type (F16, Q8_0, Q4_0, Q4_K_M), kiln writes the GGUF
from a fixed seed (`cargo run --example proof_models`), and llama.cpp's reference build
(../shared/tools/llama-cpp-reference.sh) runs it through ref_logits.c (this directory: a small
harness over libllama) teacher-forced over 256 token ids. The top-4 log-probabilities at every
position go to tests/data/arch_proof/<variant>.json with the sha256 of the file they were
computed on; the test regenerates the file bit-identically from the seed and refuses to compare
if the hash differs.

The quantized files are kiln's: its writer with llama-quantize's type choice per tensor
(checked here against llama-quantize's own output of the same F16 file: the types must match).
Whether llama-quantize's bytes are identical is recorded per file ("llama_quantize"): Q8_0 and
Q4_0 tensors are (synth writes ggml's reference rounding), K-quant tensors are not (kiln's
K-quant quantizer is its own), which is why the references are computed on kiln's files.

    .venv/bin/python scripts/reference/regen_arch_proofs.py [VARIANT ...]

Needs: the reference build (built once per machine, ~15 minutes), gcc, cargo, the `gguf`
package (.venv). CI never runs this: it only reads the recorded JSON.
"""
import datetime
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SHARED = Path(os.environ.get("KILN_SHARED", ROOT.parent / "shared"))
VOCAB_REL = "conformance/tokenizer/ggml-vocab-llama-spm.gguf"
SEED = 1801
TOP = 4
CHUNK = 16
CTX = 256
THREADS = 2
OUT = ROOT / "tests" / "data" / "arch_proof"
QUANTS = ["F16", "Q8_0", "Q4_0", "Q4_K_M"]


def log(msg):
    print(f"regen_arch_proofs: {msg}", file=sys.stderr, flush=True)


def reference_bin() -> Path:
    out = subprocess.run(["bash", str(SHARED / "tools/llama-cpp-reference.sh")],
                         check=True, capture_output=True, text=True)
    return Path(out.stdout.strip().splitlines()[-1])


def build_harness(bin_dir: Path) -> Path:
    """Compiles ref_logits.c against the reference tree's headers and libllama."""
    src_tree = bin_dir.parents[1]
    exe = ROOT / "target" / "reference" / "ref_logits"
    exe.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["gcc", "-O2", "-Wall", "-o", str(exe), str(Path(__file__).parent / "ref_logits.c"),
                    f"-I{src_tree / 'include'}", f"-I{src_tree / 'ggml' / 'include'}",
                    f"-L{bin_dir}", "-lllama", "-lggml", "-lggml-base", "-lm",
                    f"-Wl,-rpath,{bin_dir}"], check=True)
    return exe


def git_describe(src_tree: Path) -> str:
    try:
        return subprocess.run(["git", "-C", str(src_tree), "rev-parse", "--short", "HEAD"],
                              check=True, capture_output=True, text=True).stdout.strip()
    except (subprocess.CalledProcessError, FileNotFoundError):
        return "unknown"


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def write_models(workdir: Path, variants):
    """Runs the proof_models example: returns ({(variant, quant): info}, tokens)."""
    cmd = ["cargo", "run", "--release", "-q", "--example", "proof_models", "--",
           str(SHARED / VOCAB_REL), str(workdir), str(SEED), *variants]
    out = subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True, text=True).stdout
    files, tokens = {}, None
    for line in out.splitlines():
        rec = json.loads(line)
        if "tokens" in rec:
            tokens = rec["tokens"]
        else:
            files[(rec["variant"], rec["quant"])] = rec
    return files, tokens


def reference_top(exe: Path, model: Path, tokens_file: Path):
    out = subprocess.run([str(exe), "--model", str(model), "--tokens-file", str(tokens_file),
                          "--top", str(TOP), "--chunk", str(CHUNK), "--ctx", str(CTX),
                          "--threads", str(THREADS)], check=True, capture_output=True, text=True)
    doc = json.loads(out.stdout)
    rows = []
    for step in doc["steps"]:
        flat = []
        for tid, lp in step["top"]:
            flat += [tid, round(lp, 5)]
        rows.append(flat)
    return rows


def compare_with_llama_quantize(bin_dir: Path, f16: Path, kiln_file: Path, quant: str):
    """llama-quantize's output of the F16 file against kiln's copy, tensor by tensor."""
    import gguf
    with tempfile.TemporaryDirectory() as tmp:
        theirs = Path(tmp) / "lq.gguf"
        env = dict(os.environ, LD_LIBRARY_PATH=str(bin_dir))
        subprocess.run([str(bin_dir / "llama-quantize"), str(f16), str(theirs), quant],
                       check=True, capture_output=True, env=env)
        a = {t.name: t for t in gguf.GGUFReader(str(kiln_file)).tensors}
        b = {t.name: t for t in gguf.GGUFReader(str(theirs)).tensors}
        if set(a) != set(b):
            raise SystemExit(f"{kiln_file}: tensor names differ from llama-quantize's")
        types = [n for n in a if a[n].tensor_type != b[n].tensor_type]
        if types:
            raise SystemExit(f"{kiln_file}: types differ from llama-quantize's for {types}")
        differ = sorted(n for n in a if a[n].data.tobytes() != b[n].data.tobytes())
        kinds = sorted({a[n].tensor_type.name for n in differ})
        return {"types_identical": True, "bytes_identical": not differ,
                "tensors_differing": len(differ), "types_differing": kinds}


def main():
    wanted = sys.argv[1:]
    bin_dir = reference_bin()
    exe = build_harness(bin_dir)
    src_tree = bin_dir.parents[1]
    OUT.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="kiln-proof-") as tmp:
        work = Path(tmp)
        log("writing the proof models")
        files, tokens = write_models(work, wanted)
        tokens_file = work / "tokens.txt"
        tokens_file.write_text(",".join(map(str, tokens)))
        variants = sorted({v for v, _ in files}, key=lambda v: list(files).index((v, "F16")))
        covers = json.loads(subprocess.run(
            ["cargo", "run", "--release", "-q", "--example", "proof_models", "--", "--covers"],
            cwd=ROOT, check=True, capture_output=True, text=True).stdout)
        for v in variants:
            doc = {
                "variant": v,
                "covers": covers.get(v, ""),
                "seed": SEED,
                "vocab": VOCAB_REL,
                "vocab_sha256": sha256(SHARED / VOCAB_REL),
                "reference": {
                    "llama_cpp": f"{git_describe(src_tree)} (llama-cpp-python 0.3.36 sources)",
                    "build": bin_dir.parent.name,
                    "harness": "scripts/reference/ref_logits.c",
                    "threads": THREADS, "chunk": CHUNK, "ctx": CTX, "flash_attn": True,
                    "kv_cache": "f16", "recorded": datetime.date.today().isoformat(),
                },
                "top_k": TOP,
                "tokens": tokens,
                "files": {},
            }
            for q in QUANTS:
                rec = files[(v, q)]
                path = Path(rec["path"])
                log(f"{v} {q}: llama.cpp teacher-forced over {len(tokens)} positions")
                entry = {"sha256": rec["sha256"], "bytes": rec["bytes"]}
                if q != "F16":
                    entry["llama_quantize"] = compare_with_llama_quantize(
                        bin_dir, Path(files[(v, "F16")]["path"]), path, q)
                entry["top"] = reference_top(exe, path, tokens_file)
                doc["files"][q] = entry
            out = OUT / f"{v}.json"
            out.write_text(json.dumps(doc, separators=(",", ":")) + "\n")
            log(f"wrote {out} ({out.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
