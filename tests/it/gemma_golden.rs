//! The real gemma-3-270m Q4_K_M file (models/gemma-3-270m-Q4_K_M.gguf, fetched by
//! `scripts/fetch-model.sh gemma-3-270m`, which `make test` runs) against llama.cpp's outputs on
//! the same file, recorded by scripts/reference/regen_gemma_golden.py into
//! tests/data/gemma3_270m/golden.json: for ten prompts (one, 742 tokens, longer than the
//! 512-position sliding window of the local layers), llama.cpp's token ids for the text, its
//! greedy continuation of up to 32 tokens (the prompt in 16-token chunks, then one token at a
//! time, as it generates), and its top-4 next-token log-probabilities at every position of
//! `forced` (the prompt followed by that continuation, cut to whole 8-token chunks: 1112
//! positions), teacher-forced in chunks of 8.
//!
//! Why chunks of 8: on x86 llama.cpp picks a quantized matmul kernel by the batch's row count
//! (Q6_K: its tiled K-quant matmul for >= 8 rows, the one-row `vec_dot` below; Q4_K: the
//! repacked 4-row GEMM, a batch's last `rows % 4` rows through the GEMV), and the orders round
//! differently, so llama.cpp's logits for a token depend on its batch. kiln's kernels follow the
//! prompt-path orders (Q4_K's 4-row GEMM, Q6_K's tiled matmul, Q5_0/Q8_0's eight-lane order,
//! which tinyBLAS and `vec_dot` share) for every row in any batch: a sequence's logits must not
//! depend on its company (tests/it/engine.rs), so kiln cannot also take the one-row orders for
//! small batches. Chunks of 8 put every recorded row on llama.cpp's prompt path, the one it
//! takes for any prompt of 8 tokens or more.
//!
//! Asserted (what docs/architecture.md "Faithfulness" claims): kiln's tokenizer gives llama.cpp's
//! ids for every text; over the 4448 teacher-forced logprobs (the reference's top-4 at each
//! position) the mean |Δ logprob| is <= 1e-3 and the worst <= 1e-2 (measured 2026-11-26: 2.5e-6
//! and 5.6e-6, the 5-decimal rounding of the recording: bit-identical, on the default ISA and
//! forced to avx2 or avxvnni); the top-1 id agrees wherever the reference's top-1/top-2 margin
//! is >= 0.05 (1065/1065); kiln's greedy continuation equals llama.cpp's for at least
//! [`MIN_GREEDY`] of the ten cases (8 measured). The two that differ (`colors` at its 3rd
//! generated token, `unicode` at its 6th) are llama.cpp's batch dependence, not kiln's: its
//! one-row decode step chose 7070 and 234712 there, while its own prompt path, fed the same
//! tokens, ranks 3730 (by 0.19) and 237053 (by 0.08) first, as kiln does. The figures are
//! printed (`--nocapture`); the test costs ~20 s.

use crate::common;
use kiln::engine::ops::log_softmax_at;
use kiln::engine::runner::Runner;
use kiln::engine::token_choice::argmax;
use kiln::engine::{BatchLimits, LogitsWanted, Model};
use kiln::gguf::GgufFile;
use kiln::tokenizer::Tokenizer;
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::path::PathBuf;

/// Greedy continuations that must equal llama.cpp's (of the ten cases).
const MIN_GREEDY: usize = 8;

fn model_path() -> PathBuf {
    let p = common::repo_root().join("models/gemma-3-270m-Q4_K_M.gguf");
    assert!(
        p.is_file(),
        "{} is missing: run `scripts/fetch-model.sh gemma-3-270m` (make test does)",
        p.display()
    );
    p
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .expect("id array")
        .iter()
        .map(|x| x.as_u64().expect("id") as u32)
        .collect()
}

/// The golden cases, after checking the model file is the one they were recorded on.
fn golden() -> Value {
    let path = model_path();
    let bytes = std::fs::read(&path).expect("read the model");
    let sha: String = Sha256::digest(&bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    drop(bytes);
    let golden = common::repo_root().join("tests/data/gemma3_270m/golden.json");
    let doc: Value = serde_json::from_str(&common::read_to_string(&golden)).expect("golden.json");
    assert_eq!(
        doc["model_sha256"].as_str(),
        Some(sha.as_str()),
        "{} is not the file the references were recorded on",
        path.display()
    );
    doc
}

#[test]
fn gemma3_270m_tokenizes_as_llama_cpp() {
    let doc = golden();
    let file = GgufFile::open(model_path()).expect("open the model");
    let tok = Tokenizer::from_gguf(&file).expect("tokenizer");
    let cases = doc["cases"].as_array().expect("cases");
    assert_eq!(cases.len(), 10, "cases");
    for c in cases {
        let name = c["name"].as_str().expect("name");
        assert_eq!(
            tok.encode(c["text"].as_str().expect("text"), true, false),
            ids(&c["prompt"]),
            "{name}: kiln's token ids differ from llama.cpp's"
        );
    }
}

#[test]
fn gemma3_270m_matches_llama_cpp() {
    let doc = golden();
    let file = GgufFile::open(model_path()).expect("open the model");
    let tok = Tokenizer::from_gguf(&file).expect("tokenizer");
    let model = Model::from_gguf(&file, 2).expect("load the model");
    let stop = ids(&doc["stop"]);
    let cases = doc["cases"].as_array().expect("cases");
    assert_eq!(cases.len(), 10, "cases");
    let limits = BatchLimits {
        max_tokens: 64,
        max_seqs: 1,
        max_logit_rows: 64,
    };
    let mut runner = Runner::new(&model, limits, 2048).expect("runner");

    let (mut n, mut sum, mut max, mut worst) = (0usize, 0f64, 0f64, String::new());
    let (mut confident, mut disagree) = (0usize, Vec::new());
    let mut greedy_ok = Vec::new();
    for c in cases {
        let name = c["name"].as_str().expect("name");
        let text = c["text"].as_str().expect("text");
        let prompt = ids(&c["prompt"]);
        let want_gen = ids(&c["generated"]);
        let top = c["top"].as_array().expect("top");
        assert_eq!(
            tok.encode(text, true, false),
            prompt,
            "{name}: kiln's token ids differ from llama.cpp's"
        );

        // Teacher forcing over the prompt and llama.cpp's continuation (`forced`).
        let forced = ids(&c["forced"]);
        assert!(
            forced.len() >= prompt.len()
                && forced[..prompt.len()] == prompt[..]
                && forced[prompt.len()..] == want_gen[..forced.len() - prompt.len()],
            "{name}: `forced` is not the prompt followed by the continuation"
        );
        let mut table = runner.new_seq();
        let mut rows = Vec::new();
        runner
            .feed(&mut table, 0, &forced, 64, LogitsWanted::All, |_, r| {
                rows.push(r.to_vec())
            })
            .expect("teacher forcing");
        assert_eq!(rows.len(), top.len(), "{name}: positions");
        for (p, (row, t)) in rows.iter().zip(top).enumerate() {
            let flat = t.as_array().expect("top");
            let lp = |i: usize| flat[2 * i + 1].as_f64().expect("logprob");
            if lp(0) - lp(1) >= 0.05 {
                confident += 1;
                if argmax(row) as u64 != flat[0].as_u64().expect("id") {
                    disagree.push(format!("{name}@{p}"));
                }
            }
            for pair in flat.chunks(2) {
                let id = pair[0].as_u64().expect("id") as usize;
                let d = (f64::from(log_softmax_at(row, id)) - pair[1].as_f64().expect("lp")).abs();
                n += 1;
                sum += d;
                if d > max {
                    max = d;
                    worst = format!("{name}@{p}");
                }
            }
        }
        drop(table);

        // Greedy continuation from the prompt alone, one token at a time, as the reference
        // generated it.
        let mut table = runner.new_seq();
        let mut last = Vec::new();
        runner
            .feed(&mut table, 0, &prompt, 64, LogitsWanted::Last, |_, r| {
                last = r.to_vec()
            })
            .expect("prefill");
        let mut gen = vec![argmax(&last)];
        while gen.len() < want_gen.len().max(1) && !stop.contains(gen.last().expect("gen")) {
            let pos = prompt.len() + gen.len() - 1;
            let mut next = 0;
            runner
                .feed(
                    &mut table,
                    pos,
                    &gen[gen.len() - 1..],
                    1,
                    LogitsWanted::Last,
                    |_, r| next = argmax(r),
                )
                .expect("decode");
            gen.push(next);
        }
        let same = gen == want_gen;
        println!(
            "gemma_golden: {name}: {} prompt tokens, greedy {}",
            prompt.len(),
            if same { "identical" } else { "differs" }
        );
        if !same {
            println!("  kiln:      {gen:?}\n  llama.cpp: {want_gen:?}");
        }
        greedy_ok.push(same);
    }
    let mean = sum / n as f64;
    let greedy = greedy_ok.iter().filter(|&&b| b).count();
    println!(
        "gemma_golden: {n} compared logprobs, mean |dlogprob| {mean:.2e}, max {max:.2e} ({worst}); \
         top-1 {}/{confident} confident positions; greedy {greedy}/{}",
        confident - disagree.len(),
        greedy_ok.len()
    );
    assert!(mean <= 1e-3, "mean |dlogprob| {mean} above 1e-3");
    assert!(max <= 1e-2, "worst |dlogprob| {max} at {worst} above 1e-2");
    assert!(
        disagree.is_empty(),
        "top-1 differs from llama.cpp at {disagree:?}"
    );
    assert!(
        greedy >= MIN_GREEDY,
        "greedy continuations equal to llama.cpp's: {greedy}, want >= {MIN_GREEDY}"
    );
}

/// KV bytes one 8192-token sequence of gemma-3-270m holds, fed in 256-token steps as the
/// scheduler feeds it: the 15 local layers keep a 512-position window (plus a step), the 3
/// global ones every position; against the full-attention layout of the same shape (every
/// layer every position). The figures are docs/performance-history.md's.
#[test]
fn gemma3_holds_a_window_of_kv_on_local_layers() {
    use kiln::engine::kv_cache::{KvCache, KvCacheConfig, LayerWindows};
    let file = GgufFile::open(model_path()).expect("open the model");
    let model = Model::from_gguf(&file, 1).expect("load the model");
    let (n, step, bs) = (8192usize, 256usize, 16usize);
    let windowed = model.kv_config(n * 6, bs);
    assert_eq!(windowed.windows.size, 512, "gemma-3-270m's window");
    let cache = KvCache::new(windowed).expect("cache");
    let mut table = cache.new_table();
    let mut peak = 0;
    for start in (0..n).step_by(step) {
        table.forget_before(start);
        table.reserve(start + step).expect("reserve");
        peak = peak.max(table.pages_held());
    }
    let held = peak * windowed.bytes_per_block();
    let admitted = windowed.bytes_for_positions(n, step);
    assert!(
        held <= admitted,
        "admission counts {admitted} bytes, the sequence held {held}"
    );
    let full = KvCacheConfig {
        windows: LayerWindows::NONE,
        kv_type: kiln::engine::kv_cache::KvType::F16,
        ..windowed
    };
    let full_bytes = n.div_ceil(bs) * full.bytes_per_block();
    println!(
        "gemma_golden: KV of one {n}-token sequence: {:.1} MiB with sliding windows (admission \
         counts {:.1}), {:.1} MiB with full attention ({:.1}x less)",
        held as f64 / (1 << 20) as f64,
        admitted as f64 / (1 << 20) as f64,
        full_bytes as f64 / (1 << 20) as f64,
        full_bytes as f64 / held as f64
    );
    assert!(held * 4 < full_bytes, "windows should save > 4x here");
}

/// `kiln generate` runs the file (its KV pool holds every layer group's pages) and continues
/// the `capitals` prompt as llama.cpp does; `--chat` without a template is a named error.
#[test]
fn kiln_generate_continues_as_llama_cpp() {
    let doc = golden();
    let case = &doc["cases"][0];
    let prompt = ids(&case["prompt"]);
    let want = ids(&case["generated"]);
    let n = 8.min(want.len());
    let list = prompt
        .iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(",");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args(["generate", "--model"])
        .arg(model_path())
        .args([
            "--prompt-ids",
            &list,
            "--max-tokens",
            &n.to_string(),
            "--json",
        ])
        .output()
        .expect("run kiln generate");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    assert_eq!(ids(&v["output_ids"]), want[..n], "{v}");

    let out = std::process::Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args(["generate", "--model"])
        .arg(model_path())
        .args(["--prompt", "Hi", "--chat", "--max-tokens", "2"])
        .output()
        .expect("run kiln generate");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("no chat template"),
        "{err}"
    );
}
