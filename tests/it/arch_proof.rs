//! Proof against llama.cpp for every architecture and variant kiln runs: a small random-weight
//! GGUF per variant (`kiln::engine::synth`), written by this test from a fixed seed with kiln's
//! GGUF writer, in F16 and in Q8_0, Q4_0 and Q4_K_M copies, with a real vocabulary
//! (../shared/conformance/tokenizer/ggml-vocab-llama-spm.gguf). llama.cpp's next-token
//! log-probabilities for the same 256 token ids, teacher-forced (positions past every sliding
//! window included), were recorded by scripts/reference/regen_arch_proofs.py into
//! tests/data/arch_proof/<variant>.json together with the sha256 of the exact file they were
//! computed on: the test regenerates the file, checks the hash (a drifted generator fails
//! loudly instead of comparing against references of another file), runs kiln on it and holds
//! the bars: top-1 identical at every position, mean |Δ logprob| over the reference's
//! top-4 ids <= 0.01 for F16 and <= 0.03 for the quantized copies.
//!
//! The quantized copies are kiln-written with llama-quantize's type choice per tensor; their
//! Q8_0 and Q4_0 tensors are byte-identical to llama-quantize's, their K-quant tensors are
//! kiln's own quantization (the JSON records which; see the regen script): the proof is of
//! the forward pass on one file, not of the quantizer.
//!
//! Per variant also: batch invariance (the logits of a sequence are bit-identical whatever
//! the prefill chunking and the batch company, at positions past the window) and seeded
//! sampling reproducibility through the scheduler (the same seed draws the same tokens alone
//! and among other requests). The figures are printed (`--nocapture`).

use crate::common;
use kiln::engine::ops::log_softmax_at;
use kiln::engine::runner::Runner;
use kiln::engine::synth::{build_all, proof_variants, Quant, Variant};
use kiln::engine::token_choice::argmax;
use kiln::engine::{BatchLimits, LogitsWanted, Model, SeqInput};
use kiln::gguf::GgufFile;
use kiln::scheduler::state::Limits;
use kiln::scheduler::{EngineConfig, EngineHandle, Event, GenerationRequest, NoopObserver};
use kiln::tokenizer::Tokenizer;
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::sync::{Arc, OnceLock};

const VOCAB: &str = "conformance/tokenizer/ggml-vocab-llama-spm.gguf";

pub(crate) fn vocab() -> &'static GgufFile {
    static V: OnceLock<GgufFile> = OnceLock::new();
    V.get_or_init(|| GgufFile::open(common::shared_file(VOCAB)).expect("open the vocabulary"))
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The recorded reference of one variant.
pub(crate) struct Reference {
    pub seed: u64,
    pub tokens: Vec<u32>,
    pub doc: Value,
}

pub(crate) fn reference(variant: &str) -> Reference {
    let path = common::repo_root().join(format!("tests/data/arch_proof/{variant}.json"));
    let doc: Value = serde_json::from_str(&common::read_to_string(&path)).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (scripts/reference/regen_arch_proofs.py records it)",
            path.display()
        )
    });
    let vocab_sha = hex(&std::fs::read(common::shared_file(VOCAB)).expect("read vocab"));
    assert_eq!(
        doc["vocab_sha256"].as_str(),
        Some(vocab_sha.as_str()),
        "{variant}: the vocabulary file changed since the references were recorded"
    );
    Reference {
        seed: doc["seed"].as_u64().expect("seed"),
        tokens: doc["tokens"]
            .as_array()
            .expect("tokens")
            .iter()
            .map(|t| t.as_u64().expect("id") as u32)
            .collect(),
        doc,
    }
}

/// Writes the variant's files (every weight type), checks each one's hash against the
/// recorded one and opens them.
fn regenerate(v: &Variant, r: &Reference) -> Vec<GgufFile> {
    let writers =
        build_all(&v.spec, v.name, vocab(), &Quant::ALL, r.seed).expect("write the proof models");
    Quant::ALL
        .into_iter()
        .zip(writers)
        .map(|(q, w)| check_hash(v, r, q, w.to_bytes().expect("serialize")))
        .collect()
}

fn check_hash(v: &Variant, r: &Reference, q: Quant, bytes: Vec<u8>) -> GgufFile {
    let want = r.doc["files"][q.name()]["sha256"]
        .as_str()
        .unwrap_or_else(|| panic!("{} {}: no recorded sha256", v.name, q.name()));
    assert_eq!(
        hex(&bytes),
        want,
        "{} {}: the regenerated file differs from the one llama.cpp's references were recorded \
         on; rerun scripts/reference/regen_arch_proofs.py if the change is intended",
        v.name,
        q.name()
    );
    GgufFile::from_bytes(bytes).expect("parse the proof model")
}

pub(crate) const LIMITS: BatchLimits = BatchLimits {
    max_tokens: 64,
    max_seqs: 4,
    max_logit_rows: 64,
};

/// Logits at every position of `tokens`, fed from 0 in chunks of `chunk`.
pub(crate) fn all_logits(runner: &mut Runner<'_>, tokens: &[u32], chunk: usize) -> Vec<Vec<f32>> {
    let mut table = runner.new_seq();
    let mut rows = Vec::new();
    runner
        .feed(&mut table, 0, tokens, chunk, LogitsWanted::All, |_, r| {
            rows.push(r.to_vec())
        })
        .expect("feed");
    rows
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// The bars for one file; returns (mean, max) |Δ logprob| for the report.
fn compare(name: &str, q: Quant, rows: &[Vec<f32>], top: &[Value]) -> (f64, f64) {
    let bar = if q == Quant::F16 { 0.01 } else { 0.03 };
    compare_with_bar(name, q.name(), bar, rows, top)
}

/// Top-1 identical at every position and mean |Δ logprob| over the reference's top ids at
/// most `bar`, for the file of weight type `label`; returns (mean, max) |Δ logprob|.
pub(crate) fn compare_with_bar(
    name: &str,
    label: &str,
    bar: f64,
    rows: &[Vec<f32>],
    top: &[Value],
) -> (f64, f64) {
    assert_eq!(rows.len(), top.len(), "{name}: positions");
    let (mut n, mut sum, mut max) = (0usize, 0f64, 0f64);
    let mut misses = Vec::new();
    for (p, (row, t)) in rows.iter().zip(top).enumerate() {
        let flat = t.as_array().expect("top");
        let id0 = flat[0].as_u64().expect("id") as u32;
        if argmax(row) != id0 {
            misses.push(p);
        }
        for pair in flat.chunks(2) {
            let id = pair[0].as_u64().expect("id") as usize;
            let lp = pair[1].as_f64().expect("logprob");
            let d = (f64::from(log_softmax_at(row, id)) - lp).abs();
            n += 1;
            sum += d;
            max = max.max(d);
        }
    }
    let mean = sum / n as f64;
    println!(
        "arch_proof: {name} {label}: top-1 {}/{}, |dlogprob| mean {mean:.5} max {max:.4} (bar {bar})",
        rows.len() - misses.len(),
        rows.len()
    );
    assert!(
        misses.is_empty(),
        "{name} {label}: top-1 differs from llama.cpp at positions {misses:?}"
    );
    assert!(
        mean <= bar,
        "{name} {label}: mean |dlogprob| {mean} above {bar}"
    );
    (mean, max)
}

/// A sequence's logits are bit-identical whatever the chunking and the batch company, at
/// positions past the sliding window too.
pub(crate) fn batch_invariance(name: &str, model: &Model, tokens: &[u32]) {
    let mut runner = Runner::new(model, LIMITS, 1024).expect("runner");
    let n = 100;
    let whole = all_logits(&mut runner, &tokens[..n], 64);
    let parts = all_logits(&mut runner, &tokens[..n], 13);
    for (p, (a, b)) in whole.iter().zip(&parts).enumerate() {
        assert!(bits(a) == bits(b), "{name}: chunk 13 vs 64 differ at {p}");
    }
    // Positions 90..100 in one ragged batch beside a fresh prefill of another sequence.
    let mut t1 = runner.new_seq();
    runner
        .feed(&mut t1, 0, &tokens[..90], 64, LogitsWanted::None, |_, _| {})
        .expect("prefill");
    t1.reserve(n).expect("reserve");
    let other: Vec<u32> = tokens[150..170].to_vec();
    let mut t2 = runner.new_seq();
    t2.reserve(other.len()).expect("reserve");
    let batch = [
        SeqInput {
            tokens: &other,
            start_pos: 0,
            table: &t2,
            logits: LogitsWanted::Last,
        },
        SeqInput {
            tokens: &tokens[90..n],
            start_pos: 90,
            table: &t1,
            logits: LogitsWanted::All,
        },
    ];
    let out = runner.forward(&batch).expect("batch");
    for (i, row) in out.seq_rows(1).enumerate() {
        assert!(
            bits(row) == bits(&whole[90 + i]),
            "{name}: batched row at {} differs from the sequence alone",
            90 + i
        );
    }
}

/// The same seed draws the same tokens alone and among three other requests.
fn seeded_reproducibility(name: &str, file: &GgufFile, tokens: &[u32]) {
    let tok = Arc::new(Tokenizer::from_gguf(file).expect("tokenizer"));
    let model = Model::from_gguf(file, 1).expect("model");
    let cfg = EngineConfig {
        workers: 1,
        threads: 1,
        kv_positions: 2048,
        block_size: 16,
        kv_type: kiln::engine::kv_cache::KvType::F16,
        limits: Limits {
            max_num_seqs: 4,
            max_batch_tokens: 128,
            max_prefill_while_decoding: 64,
            attn_positions_per_token: 0,
            max_preemptions: 4,
            n_ctx: 0,
            prefix_cache: true,
            max_waiting: 16,
        },
        faults: Vec::new(),
        max_unread_events: kiln::scheduler::MAX_UNREAD_EVENTS,
        pooling: None,
        tiers: Default::default(),
        speculative: kiln::scheduler::speculative::SpecConfig::off(),
    };
    let e = EngineHandle::start(model, tok, cfg, Arc::new(NoopObserver)).expect("engine");
    let sampled = |prompt: &[u32], seed: u64| {
        let mut r = GenerationRequest::new(prompt.to_vec(), 16);
        r.params.temperature = 1.5;
        r.params.seed = Some(seed);
        r
    };
    let run = |s: kiln::scheduler::RequestStream| {
        let mut s = s;
        let mut ids = Vec::new();
        loop {
            match s.blocking_recv().expect("stream ended without Done") {
                Event::Delta { ids: d, .. } => ids.extend(d),
                Event::Done { .. } => return ids,
                Event::Error { message } => panic!("{name}: engine error: {message}"),
                _ => {}
            }
        }
    };
    let prompt = &tokens[..80];
    let alone = run(e.submit(sampled(prompt, 42)).expect("submit"));
    let streams: Vec<_> = (0..4u64)
        .map(|i| {
            let p = if i == 2 {
                prompt
            } else {
                &tokens[10 * i as usize..][..70]
            };
            let seed = if i == 2 { 42 } else { 7 + i };
            e.submit(sampled(p, seed)).expect("submit")
        })
        .collect();
    let outs: Vec<Vec<u32>> = streams.into_iter().map(run).collect();
    assert_eq!(alone.len(), 16, "{name}: 16 tokens sampled");
    assert_eq!(
        outs[2], alone,
        "{name}: the same seed drew other tokens among other requests"
    );
    e.shutdown();
}

fn prove(variant: &str) {
    let v = proof_variants()
        .into_iter()
        .find(|v| v.name == variant)
        .unwrap_or_else(|| panic!("no proof variant {variant}"));
    let r = reference(variant);
    for (q, file) in Quant::ALL.into_iter().zip(regenerate(&v, &r)) {
        let model = Model::from_gguf(&file, 2).expect("load the proof model");
        let mut runner = Runner::new(&model, LIMITS, 1024).expect("runner");
        let rows = all_logits(&mut runner, &r.tokens, 64);
        let top = r.doc["files"][q.name()]["top"].as_array().expect("top");
        compare(variant, q, &rows, top);
        if q == Quant::Q4KM {
            drop(runner);
            batch_invariance(variant, &model, &r.tokens);
            seeded_reproducibility(variant, &file, &r.tokens);
        }
    }
}

macro_rules! proofs {
    ($($test:ident => $variant:literal,)*) => {
        $(
            #[test]
            fn $test() {
                prove($variant);
            }
        )*

        /// Every proof variant has its test above.
        #[test]
        fn every_variant_is_proven() {
            let tested = [$($variant),*];
            for v in proof_variants() {
                assert!(tested.contains(&v.name), "variant {} has no proof test", v.name);
            }
        }
    };
}

proofs! {
    llama => "llama",
    qwen2 => "qwen2",
    qwen2_yarn => "qwen2-yarn",
    qwen3 => "qwen3",
    gemma2 => "gemma2",
    gemma3 => "gemma3",
    phi3 => "phi3",
    phi3_long => "phi3-long",
    smollm3 => "smollm3",
    granite => "granite",
    mistral3 => "mistral3",
    qwen3moe => "qwen3moe",
    olmoe => "olmoe",
    granitemoe => "granitemoe",
    gpt_oss => "gpt-oss",
    lfm2 => "lfm2",
    qwen35 => "qwen35",
    gemma4 => "gemma4",
    granitehybrid => "granitehybrid",
    qwen35moe => "qwen35moe",
    granitehybrid_moe => "granitehybrid-moe",
}

/// A recurrent model's state stands for exactly the positions computed: a batch resuming it
/// elsewhere (a rollback, a fork or a prefix shared from pages) is refused with a named error
/// before anything is computed, and a sequence restarted at 0 (a preemption's recompute)
/// reproduces its logits bit for bit in a reused slot.
#[test]
fn lfm2_state_is_never_resumed_elsewhere() {
    let v = proof_variants()
        .into_iter()
        .find(|v| v.name == "lfm2")
        .expect("lfm2 variant");
    let r = reference("lfm2");
    let writer = build_all(&v.spec, v.name, vocab(), &[Quant::Q8_0], r.seed)
        .expect("write")
        .remove(0);
    let file = GgufFile::from_bytes(writer.to_bytes().expect("serialize")).expect("parse");
    let model = Model::from_gguf(&file, 1).expect("load");
    assert!(model.desc().has_recurrent());
    let mut runner = Runner::new(&model, LIMITS, 256).expect("runner");
    let first = all_logits(&mut runner, &r.tokens[..24], 64);
    let mut t = runner.new_seq();
    runner
        .feed(&mut t, 0, &r.tokens[..20], 8, LogitsWanted::None, |_, _| {})
        .expect("prefill");
    let resume =
        |runner: &mut Runner<'_>, table: &kiln::engine::kv_cache::BlockTable, at: usize| {
            let batch = [SeqInput {
                tokens: &r.tokens[at..at + 1],
                start_pos: at,
                table,
                logits: LogitsWanted::Last,
            }];
            runner.forward(&batch).err().map(|e| e.to_string())
        };
    let err = resume(&mut runner, &t, 10).expect("a rollback is refused");
    assert!(err.contains("covers positions 0..20"), "{err}");
    let mut f = t.fork();
    f.reserve(24).expect("reserve");
    let err = resume(&mut runner, &f, 20).expect("a fork cannot resume");
    assert!(err.contains("covers positions 0..0"), "{err}");
    drop((t, f));
    // A recompute from 0 in a reused slot gives the same logits.
    let again = all_logits(&mut runner, &r.tokens[..24], 5);
    for (p, (a, b)) in first.iter().zip(&again).enumerate() {
        assert!(bits(a) == bits(b), "lfm2: recompute differs at {p}");
    }
}
