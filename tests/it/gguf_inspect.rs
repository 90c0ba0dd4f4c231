//! `kiln inspect` on the real model: the report's facts, the JSON form, and the zero-copy
//! load (resident memory grows by the header, not by the 96 MB of weights).

use crate::common::default_model;
use std::process::Command;

fn inspect(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_kiln"))
        .arg("inspect")
        .args(args)
        .arg(default_model())
        .output()
        .expect("run kiln inspect");
    assert!(
        out.status.success(),
        "kiln inspect failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8 report")
}

#[test]
fn text_report_has_metadata_tensors_and_model() {
    let s = inspect(&[]);
    for needle in [
        "gguf        v3",
        "tokenizer.ggml.tokens",
        "[string; 49152]",
        "token_embd.weight",
        "Q8_0",
        "tensors (272)",
        "parameters  134515008",
        "Q4_1   210 tensors",
        "blocks            30",
        "heads             9 query, 3 kv, head dim 64",
        "tied embeddings   true",
    ] {
        assert!(s.contains(needle), "report lacks {needle:?}:\n{s}");
    }
}

#[test]
fn json_report_and_zero_copy_load() {
    let v: serde_json::Value =
        serde_json::from_str(&inspect(&["--json"])).expect("one JSON object");
    assert_eq!(v["model"]["n_layer"], 30);
    assert_eq!(v["model"]["n_vocab"], 49152);
    assert_eq!(v["tensors"].as_array().unwrap().len(), 272);
    assert_eq!(
        v["metadata"]["tokenizer.ggml.merges"]["value"]["len"],
        48900
    );
    assert_eq!(v["bytes_per_type"]["Q8_0"]["bytes"], 30_081_024);
    // Weights are mapped, not read: file-backed residency grows by about the 1.7 MB header
    // (plus fault-around), far below the 96.6 MB data section; the heap by the tokenizer.
    let after = &v["load"]["rss"];
    let before = &v["load"]["rss_before_open"];
    let grew = |k: &str| after[k].as_u64().unwrap() - before[k].as_u64().unwrap();
    assert!(
        grew("file_kib") < 16 * 1024,
        "file-backed RSS grew {} KiB",
        grew("file_kib")
    );
    assert!(
        grew("anon_kib") < 16 * 1024,
        "heap RSS grew {} KiB",
        grew("anon_kib")
    );
}

fn inspect_isa(isa: Option<&str>) -> std::process::Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_kiln"));
    cmd.args(["inspect", "--isa", "--json"]);
    match isa {
        Some(v) => cmd.env("KILN_ISA", v),
        None => cmd.env_remove("KILN_ISA"),
    };
    cmd.output().expect("run kiln inspect --isa")
}

#[test]
fn isa_report_follows_kiln_isa() {
    let out = inspect_isa(None);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let supported: Vec<&str> = v["supported"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap())
        .collect();
    assert!(supported.contains(&"scalar"));
    assert_eq!(v["selected"], v["detected"]);
    assert!(supported.contains(&v["selected"].as_str().unwrap()));

    let out = inspect_isa(Some("scalar"));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["selected"], "scalar");
    assert_eq!(v["forced"], "scalar");

    let out = inspect_isa(Some("sse9"));
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("KILN_ISA"));
}

/// The architecture and the variant kiln will run are named, in text and JSON, for the real
/// gemma-3-270m file (`scripts/fetch-model.sh gemma-3-270m`, which make test runs).
#[test]
fn inspect_names_the_architecture_and_variant() {
    let gemma = crate::common::repo_root().join("models/gemma-3-270m-Q4_K_M.gguf");
    assert!(
        gemma.is_file(),
        "{} is missing: run `scripts/fetch-model.sh gemma-3-270m` (make test does)",
        gemma.display()
    );
    let run = |json: bool| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_kiln"));
        cmd.args(["inspect", "--no-tensors"]);
        if json {
            cmd.arg("--json");
        }
        let out = cmd.arg(&gemma).output().expect("run kiln inspect");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).expect("utf-8 report")
    };
    let variant = "gemma3: sliding window 512 on 15 of 18 layers (RoPE base 10000 local, \
                   1000000 global), q/k norm, post-norms, GELU";
    let text = run(false);
    assert!(text.contains("architecture      gemma3"), "{text}");
    assert!(
        text.contains(&format!("variant           {variant}")),
        "{text}"
    );
    let v: serde_json::Value = serde_json::from_str(&run(true)).expect("one JSON object");
    assert!(
        v["model"]["variant"]
            .as_str()
            .is_some_and(|s| s.starts_with(variant)),
        "{}",
        v["model"]
    );
}

/// A mixture-of-experts file's total and active parameters: on the gpt-oss proof model (F16,
/// 12 experts of which 4 run per token), the active count takes a third of every expert
/// tensor, its 3-D weights and its 2-D biases alike, and everything else whole; the variant
/// names the sinks, the router and the clamped SwiGLU.
#[test]
fn inspect_counts_gpt_oss_active_parameters() {
    use kiln::engine::synth::{build, proof_variants, Quant};
    use kiln::gguf::GgufFile;
    let v = proof_variants()
        .into_iter()
        .find(|v| v.name == "gpt-oss")
        .expect("the gpt-oss proof variant");
    let vocab = GgufFile::open(crate::common::shared_file(
        "conformance/tokenizer/ggml-vocab-llama-spm.gguf",
    ))
    .expect("open the vocabulary");
    let bytes = build(&v.spec, v.name, &vocab, Quant::F16, 1)
        .expect("write")
        .to_bytes()
        .expect("serialize");
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("gpt-oss.gguf");
    std::fs::write(&path, &bytes).expect("write the file");
    let file = GgufFile::from_bytes(bytes).expect("parse");
    let (mut total, mut active) = (0u64, 0u64);
    for t in file.tensors() {
        let n = t.n_elems();
        total += n;
        if t.name == "token_embd.weight" {
            continue; // untied: the embedding is a lookup
        }
        active += if t.name.contains("_exps.") {
            n / 12 * 4
        } else {
            n
        };
    }
    let out = Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args(["inspect", "--no-tensors", "--json"])
        .arg(&path)
        .output()
        .expect("run kiln inspect");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    assert_eq!(j["parameters"], total);
    assert_eq!(j["active_parameters"], active);
    let variant = j["model"]["variant"].as_str().expect("variant");
    for part in [
        "gpt-oss: mixture of 12 experts (4 used per token, width 256",
        "router and expert biases",
        "clamped SwiGLU",
        "sliding window 64 on 2 of 4 layers",
        "attention sinks",
        "yarn RoPE scaling x4",
    ] {
        assert!(variant.contains(part), "{part:?} not in {variant}");
    }
}
