//! Writes the random-weight proof models (`kiln::engine::synth`) to a directory, for the
//! script that records llama.cpp's reference outputs (scripts/reference/regen_arch_proofs.py).
//! The proof test writes the same files in memory from the same seed and checks their sha256
//! against the one recorded with the references.
//!
//!   cargo run --release --example proof_models -- VOCAB.gguf OUT_DIR SEED [VARIANT...]
//!   cargo run --release --example proof_models -- --nonlinear VOCAB.gguf OUT_DIR SEED [VARIANT...]
//!   cargo run --release --example proof_models -- --covers   (what each variant exercises)
//!
//! `--nonlinear` writes the quant proof's IQ4_NL, IQ4_XS and MXFP4_MOE copies
//! (scripts/reference/regen_quant_proofs.py) instead of the architecture proof's types.
//!
//! Prints one JSON object per file: {"variant", "quant", "path", "sha256", "bytes"}, then
//! {"tokens": [...]} (the 256 ids a proof feeds).

use kiln::engine::synth::{build_all, proof_tokens, proof_variants, Quant};
use kiln::gguf::GgufFile;
use sha2::{Digest, Sha256};
use std::path::PathBuf;

fn main() -> anyhow::Result<()> {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--covers") {
        let m: serde_json::Map<String, serde_json::Value> = proof_variants()
            .into_iter()
            .map(|v| (v.name.to_string(), v.covers.into()))
            .collect();
        println!("{}", serde_json::Value::Object(m));
        return Ok(());
    }
    let quants: &[Quant] = if args.first().map(String::as_str) == Some("--nonlinear") {
        args.remove(0);
        &Quant::NONLINEAR
    } else {
        &Quant::ALL
    };
    anyhow::ensure!(
        args.len() >= 3,
        "usage: proof_models [--nonlinear] VOCAB.gguf OUT_DIR SEED [VARIANT...]"
    );
    let vocab = GgufFile::open(&args[0])?;
    let out = PathBuf::from(&args[1]);
    let seed: u64 = args[2].parse()?;
    let only = &args[3..];
    std::fs::create_dir_all(&out)?;
    for v in proof_variants() {
        if !only.is_empty() && !only.iter().any(|o| o == v.name) {
            continue;
        }
        let writers = build_all(&v.spec, v.name, &vocab, quants, seed)?;
        for (&q, w) in quants.iter().zip(writers) {
            let bytes = w.to_bytes()?;
            let path = out.join(format!("{}.{}.gguf", v.name, q.name()));
            std::fs::write(&path, &bytes)?;
            let sha: String = Sha256::digest(&bytes)
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect();
            println!(
                "{}",
                serde_json::json!({"variant": v.name, "quant": q.name(), "path": path,
                    "sha256": sha, "bytes": bytes.len()})
            );
        }
    }
    let n_vocab = vocab
        .get_str_array("tokenizer.ggml.tokens")?
        .map_or(0, |t| t.len());
    println!(
        "{}",
        serde_json::json!({"tokens": proof_tokens(seed, 256, n_vocab)})
    );
    Ok(())
}
