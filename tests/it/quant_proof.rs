//! Proof against llama.cpp for the weight types kiln reads but does not write: IQ4_NL and
//! IQ4_XS (a dense llama-shape file) and MXFP4 (llama-quantize's `MXFP4_MOE` of a qwen3moe
//! file: MXFP4 experts, Q8_0 elsewhere).
//!
//! The source is the architecture proof's F16 file of the variant (`kiln::engine::synth`,
//! regenerated from the seed and checked against the hash in tests/data/arch_proof/): the
//! reference build's `llama-quantize` (../shared/tools/llama-cpp-reference.sh builds it; a
//! missing binary fails the test) makes the quantized copy, whose sha256 must equal the one
//! llama.cpp's log-probabilities were recorded on (tests/data/quant_proof/<variant>.json, by
//! scripts/reference/regen_quant_proofs.py). kiln then runs that file teacher-forced over the
//! same 256 tokens: top-1 identical at every position, mean |Δ logprob| <= 0.03, and batch
//! invariance. `make isa-matrix` runs it under `KILN_ISA=avx2` too.

use crate::arch_proof::{
    all_logits, batch_invariance, compare_with_bar, hex, reference, vocab, LIMITS,
};
use crate::common;
use kiln::engine::runner::Runner;
use kiln::engine::synth::{build_all, proof_variants, Quant};
use kiln::engine::Model;
use kiln::gguf::{DType, GgufFile};
use serde_json::Value;
use std::path::PathBuf;
use std::process::Command;

/// The reference build's `llama-quantize` (same location rules as
/// ../shared/tools/llama-cpp-reference.sh); panics with the command that builds it.
fn llama_quantize() -> PathBuf {
    let root = match std::env::var_os("KILN_REFERENCE_DIR") {
        Some(d) => PathBuf::from(d),
        None => {
            PathBuf::from(std::env::var_os("HOME").expect("HOME")).join(".cache/kiln-reference")
        }
    };
    let bin = root.join("llama_cpp_python-0.3.36/vendor/llama.cpp/build/bin/llama-quantize");
    assert!(
        bin.is_file(),
        "{} is missing: build the reference once with ../shared/tools/llama-cpp-reference.sh",
        bin.display()
    );
    bin
}

/// `llama-quantize` of the F16 bytes to `ftype` (its name, e.g. "IQ4_NL", "MXFP4_MOE").
fn quantize_with_llama(f16: &[u8], ftype: &str) -> Vec<u8> {
    let dir = tempfile::tempdir().expect("temp dir");
    let (src, dst) = (dir.path().join("f16.gguf"), dir.path().join("out.gguf"));
    std::fs::write(&src, f16).expect("write the F16 file");
    let bin = llama_quantize();
    let out = Command::new(&bin)
        .env("LD_LIBRARY_PATH", bin.parent().expect("bin dir"))
        .arg(&src)
        .arg(&dst)
        .arg(ftype)
        .output()
        .expect("run llama-quantize");
    assert!(
        out.status.success(),
        "llama-quantize {ftype} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::read(&dst).expect("read llama-quantize's output")
}

fn prove(variant: &str, ftype: &str, dtype: DType) {
    let v = proof_variants()
        .into_iter()
        .find(|v| v.name == variant)
        .unwrap_or_else(|| panic!("no proof variant {variant}"));
    let r = reference(variant);
    let path = common::repo_root().join(format!("tests/data/quant_proof/{variant}.json"));
    let doc: Value = serde_json::from_str(&common::read_to_string(&path))
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let rec = &doc["files"][ftype];

    let f16 = build_all(&v.spec, v.name, vocab(), &[Quant::F16], r.seed)
        .expect("write the F16 file")
        .remove(0)
        .to_bytes()
        .expect("serialize");
    assert_eq!(
        Some(hex(&f16).as_str()),
        r.doc["files"]["F16"]["sha256"].as_str(),
        "{variant}: the F16 source differs from the architecture proof's"
    );
    let bytes = quantize_with_llama(&f16, ftype);
    assert_eq!(
        Some(hex(&bytes).as_str()),
        rec["sha256"].as_str(),
        "{variant} {ftype}: llama-quantize's file differs from the one the references were \
         recorded on (rerun scripts/reference/regen_quant_proofs.py if intended)"
    );
    let file = GgufFile::from_bytes(bytes).expect("parse llama-quantize's file");
    let n = file.tensors().iter().filter(|t| t.dtype == dtype).count();
    assert!(n > 0, "{variant} {ftype}: no {dtype} tensor in the file");

    let model = Model::from_gguf(&file, 2).expect("load the proof model");
    let mut runner = Runner::new(&model, LIMITS, 1024).expect("runner");
    let rows = all_logits(&mut runner, &r.tokens, 64);
    let top = rec["top"].as_array().expect("top");
    let (mean, _) = compare_with_bar(variant, ftype, 0.03, &rows, top);
    println!("quant_proof: {variant} {ftype}: {n} {dtype} tensors, mean |dlogprob| {mean:.5}");
    drop(runner);
    batch_invariance(variant, &model, &r.tokens);
}

#[test]
fn quant_proof_llama_iq4_nl() {
    prove("llama", "IQ4_NL", DType::IQ4_NL);
}

#[test]
fn quant_proof_llama_iq4_xs() {
    prove("llama", "IQ4_XS", DType::IQ4_XS);
}

#[test]
fn quant_proof_qwen3moe_mxfp4_moe() {
    prove("qwen3moe", "MXFP4_MOE", DType::MXFP4);
}
