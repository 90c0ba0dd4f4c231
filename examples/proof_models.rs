//! Writes the random-weight proof models (`kiln::engine::synth`) to a directory, for the
//! script that records llama.cpp's reference outputs (scripts/reference/regen_arch_proofs.py).
//! The proof test writes the same files in memory from the same seed and checks their sha256
//! against the one recorded with the references.
//!
//!   cargo run --release --example proof_models -- VOCAB.gguf OUT_DIR SEED [VARIANT...]
//!   cargo run --release --example proof_models -- --nonlinear VOCAB.gguf OUT_DIR SEED [VARIANT...]
//!   cargo run --release --example proof_models -- [--context N] --quant Q8_0 VOCAB.gguf OUT_DIR SEED [VARIANT...]
//!   cargo run --release --example proof_models -- --covers   (what each variant exercises)
//!
//! `--nonlinear` writes the quant proof's IQ4_NL, IQ4_XS and MXFP4_MOE copies
//! (scripts/reference/regen_quant_proofs.py) instead of the architecture proof's types;
//! `--quant NAME` (one of the architecture proof's: F16, Q8_0, Q4_0, Q4_K_M) writes that type
//! only (what the served tests need, a quarter of the work); `--context N` writes N as the
//! context length instead of the proofs' 256 (room for the prompts the served tests send:
//! tool descriptions; the weights are the same).
//!
//! Prints one JSON object per file: {"variant", "quant", "path", "sha256", "bytes"}, then
//! {"tokens": [...]} (the 256 ids a proof feeds).

use kiln::engine::synth::{build_all, proof_tokens, proof_variants, Quant};
use kiln::gguf::{GgufFile, MetaValue};
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
    let mut context: Option<u32> = None;
    if args.first().map(String::as_str) == Some("--context") {
        anyhow::ensure!(args.len() > 1, "--context needs a number");
        context = Some(args.remove(1).parse()?);
        args.remove(0);
    }
    let quants: Vec<Quant> = match args.first().map(String::as_str) {
        Some("--nonlinear") => {
            args.remove(0);
            Quant::NONLINEAR.to_vec()
        }
        Some("--quant") => {
            anyhow::ensure!(args.len() > 1, "--quant needs a type name");
            let name = args.remove(1);
            args.remove(0);
            let q = Quant::ALL.into_iter().find(|q| q.name() == name);
            vec![q.ok_or_else(|| {
                anyhow::anyhow!("--quant {name}: not one of F16, Q8_0, Q4_0, Q4_K_M")
            })?]
        }
        _ => Quant::ALL.to_vec(),
    };
    anyhow::ensure!(
        args.len() >= 3,
        "usage: proof_models [--context N] [--nonlinear | --quant NAME] VOCAB.gguf OUT_DIR SEED [VARIANT...]"
    );
    let vocab = GgufFile::open(&args[0])?;
    let out = PathBuf::from(&args[1]);
    let seed: u64 = args[2].parse()?;
    let only = &args[3..];
    std::fs::create_dir_all(&out)?;
    for mut v in proof_variants() {
        if !only.is_empty() && !only.iter().any(|o| o == v.name) {
            continue;
        }
        if let Some(n) = context {
            let key = format!("{}.context_length", v.spec.arch);
            for (k, value) in &mut v.spec.meta {
                if *k == key {
                    *value = MetaValue::U32(n);
                }
            }
        }
        let writers = build_all(&v.spec, v.name, &vocab, &quants, seed)?;
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
