//! Proof against llama.cpp for the weight types IQ4_NL and IQ4_XS (a dense llama-shape file)
//! and MXFP4 (qwen3moe and gpt-oss files in `MXFP4_MOE`'s mix: MXFP4 experts, Q8_0 for the
//! other matrices, F32 for vectors, routers, gpt-oss's sinks and expert biases).
//!
//! As in the architecture proof, the files are kiln-written: `kiln::engine::synth` writes the
//! variant from its seed with kiln's own quantizers and llama-quantize's per-tensor type
//! choice for the ftype (`Quant::Iq4Nl`, `Iq4Xs`, `Mxfp4Moe`). Its sha256 must equal the one
//! llama.cpp's log-probabilities were recorded on (tests/data/quant_proof/<variant>.json, by
//! scripts/reference/regen_quant_proofs.py, which also checks the type choice against the
//! reference build's llama-quantize); no llama-quantize runs here. kiln then runs that file
//! teacher-forced over the same 256 tokens: top-1 identical at every position, mean
//! |Δ logprob| <= 0.03, and batch invariance. `make isa-matrix` runs it under
//! `KILN_ISA=avx2` too.

use crate::arch_proof::{
    all_logits, batch_invariance, compare_with_bar, hex, reference, vocab, LIMITS,
};
use crate::common;
use kiln::engine::runner::Runner;
use kiln::engine::synth::{build_all, proof_variants, Quant};
use kiln::engine::Model;
use kiln::gguf::{DType, GgufFile};
use serde_json::Value;

fn prove(variant: &str, quant: Quant, dtype: DType) {
    let ftype = quant.name();
    let v = proof_variants()
        .into_iter()
        .find(|v| v.name == variant)
        .unwrap_or_else(|| panic!("no proof variant {variant}"));
    let r = reference(variant);
    let path = common::repo_root().join(format!("tests/data/quant_proof/{variant}.json"));
    let doc: Value = serde_json::from_str(&common::read_to_string(&path))
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let rec = &doc["files"][ftype];

    let bytes = build_all(&v.spec, v.name, vocab(), &[quant], r.seed)
        .expect("write the proof model")
        .remove(0)
        .to_bytes()
        .expect("serialize");
    assert_eq!(
        Some(hex(&bytes).as_str()),
        rec["sha256"].as_str(),
        "{variant} {ftype}: kiln's file differs from the one the references were recorded on \
         (rerun scripts/reference/regen_quant_proofs.py if intended)"
    );
    let file = GgufFile::from_bytes(bytes).expect("parse the proof model");
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
    prove("llama", Quant::Iq4Nl, DType::IQ4_NL);
}

#[test]
fn quant_proof_llama_iq4_xs() {
    prove("llama", Quant::Iq4Xs, DType::IQ4_XS);
}

#[test]
fn quant_proof_qwen3moe_mxfp4_moe() {
    prove("qwen3moe", Quant::Mxfp4Moe, DType::MXFP4);
}

#[test]
fn quant_proof_gpt_oss_mxfp4_moe() {
    prove("gpt-oss", Quant::Mxfp4Moe, DType::MXFP4);
}
