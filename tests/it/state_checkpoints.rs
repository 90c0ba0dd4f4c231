//! The prefix cache on a model with recurrent layers (the lfm2 proof model): a prompt sharing
//! a cached prefix resumes from the recurrent-state checkpoint at the prefix's last block
//! boundary, from the KV pool, the RAM tier (evicted with its blocks) or the disk tier (after
//! a restart), and its reply (tokens and every logprob, to the bit) is the one computed from
//! scratch by an engine without the cache.

use crate::arch_proof::{reference, vocab};
use kiln::engine::synth::{build_all, proof_variants, Quant};
use kiln::engine::Model;
use kiln::gguf::GgufFile;
use kiln::scheduler::engine_config::CacheTiers;
use kiln::scheduler::state::Limits;
use kiln::scheduler::{
    EngineConfig, EngineHandle, Event, GenerationRequest, NoopObserver, Observer, TierStats,
};
use kiln::tokenizer::Tokenizer;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

fn lfm2_file() -> GgufFile {
    let v = proof_variants()
        .into_iter()
        .find(|v| v.name == "lfm2")
        .expect("lfm2 variant");
    let r = reference("lfm2");
    let writer = build_all(&v.spec, v.name, vocab(), &[Quant::Q8_0], r.seed)
        .expect("write")
        .remove(0);
    GgufFile::from_bytes(writer.to_bytes().expect("serialize")).expect("parse")
}

fn engine(file: &GgufFile, prefix_cache: bool) -> EngineHandle {
    engine_with(
        file,
        prefix_cache,
        1024,
        Default::default(),
        Arc::new(NoopObserver),
    )
}

fn engine_with(
    file: &GgufFile,
    prefix_cache: bool,
    kv_positions: usize,
    tiers: CacheTiers,
    observer: Arc<dyn Observer>,
) -> EngineHandle {
    let tok = Arc::new(Tokenizer::from_gguf(file).expect("tokenizer"));
    let model = Model::from_gguf(file, 1).expect("model");
    assert!(model.desc().has_recurrent());
    let cfg = EngineConfig {
        workers: 1,
        threads: 1,
        kv_positions,
        block_size: 16,
        kv_type: kiln::engine::kv_cache::KvType::F16,
        limits: Limits {
            max_num_seqs: 4,
            max_batch_tokens: 128,
            max_prefill_while_decoding: 64,
            attn_positions_per_token: 0,
            max_preemptions: 4,
            n_ctx: 0,
            prefix_cache,
            max_waiting: 16,
        },
        faults: Vec::new(),
        max_unread_events: kiln::scheduler::MAX_UNREAD_EVENTS,
        pooling: None,
        tiers,
        speculative: kiln::scheduler::speculative::SpecConfig::off(),
    };
    EngineHandle::start(model, tok, cfg, observer).expect("engine")
}

/// Greedy reply to `prompt`: (token ids, every logprob as f32 bits, prompt tokens cached).
fn reply(e: &EngineHandle, prompt: &[u32]) -> (Vec<u32>, Vec<u32>, usize) {
    let mut r = GenerationRequest::new(prompt.to_vec(), 12);
    r.params.temperature = 0.0;
    r.logprobs = true;
    let mut s = e.submit(r).expect("submit");
    let (mut ids, mut lps) = (Vec::new(), Vec::new());
    loop {
        match s.blocking_recv().expect("stream ended without Done") {
            Event::Delta {
                ids: d, logprobs, ..
            } => {
                ids.extend(d);
                lps.extend(logprobs.iter().map(|t| t.logprob.to_bits()));
            }
            Event::Done { usage, .. } => return (ids, lps, usage.cached_tokens),
            Event::Error { message } => panic!("engine error: {message}"),
            _ => {}
        }
    }
}

#[test]
fn a_recurrent_model_resumes_a_shared_prefix_bit_identically() {
    let file = lfm2_file();
    let tokens = reference("lfm2").tokens;
    let (system, question) = (&tokens[..50], &tokens[50..90]);
    let prompt: Vec<u32> = system.iter().chain(question).copied().collect();
    let cold = engine(&file, false);
    let want = reply(&cold, &prompt);
    cold.shutdown();
    assert_eq!(want.2, 0);

    let warm = engine(&file, true);
    // The shared prefix first: its prefill stops at the boundary at 48, whose state is saved.
    reply(&warm, system);
    let got = reply(&warm, &prompt);
    assert_eq!(
        got.2, 48,
        "resumed from the checkpoint at the last boundary of the prefix"
    );
    assert_eq!(got.0, want.0, "tokens");
    assert!(
        got.1 == want.1,
        "logprobs differ from the computed-from-scratch reply"
    );
    // Its own prompt's checkpoint (at 80) serves it again, and nothing was lost or leaked.
    let again = reply(&warm, &prompt);
    assert_eq!(again.2, 80);
    assert_eq!((again.0, again.1), (want.0, want.1));
    warm.shutdown();
}

/// Keeps the last tier numbers a worker published.
#[derive(Default)]
struct Tiers(Mutex<TierStats>);

impl Observer for Tiers {
    fn on_tiers(&self, t: &TierStats) {
        *self.0.lock().unwrap() = *t;
    }
}

impl Tiers {
    /// Waits until `ok` holds of the numbers (a step publishes them after its replies are sent;
    /// an idle worker publishes the disk writes that end after its last step).
    fn wait(&self, what: &str, ok: impl Fn(&TierStats) -> bool) {
        let t0 = Instant::now();
        loop {
            let t = *self.0.lock().unwrap();
            if ok(&t) {
                return;
            }
            assert!(t0.elapsed() < Duration::from_secs(30), "{what}: {t:?}");
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

fn tiers(dir: Option<PathBuf>) -> CacheTiers {
    CacheTiers {
        ram_bytes: 64 << 20,
        dir,
        disk_bytes: 64 << 20,
        identity: 0x6c66_6d32,
        ..Default::default()
    }
}

#[test]
fn checkpoints_resume_from_the_ram_tier_and_from_disk_after_a_restart_bit_identically() {
    let file = lfm2_file();
    let tokens = reference("lfm2").tokens;
    let (system, question) = (&tokens[..50], &tokens[50..90]);
    let prompt: Vec<u32> = system.iter().chain(question).copied().collect();
    // Another prompt as long, sharing nothing: it pushes the first one's blocks out of a pool
    // of 10 blocks.
    let other: Vec<u32> = prompt.iter().rev().copied().collect();
    let cold = engine(&file, false);
    let want = reply(&cold, &prompt);
    cold.shutdown();

    let dir = std::env::temp_dir().join(format!("kiln-state-tiers-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let obs = Arc::new(Tiers::default());
    let e = engine_with(&file, true, 160, tiers(Some(dir.clone())), obs.clone());
    reply(&e, system);
    assert_eq!(reply(&e, &prompt).2, 48);
    reply(&e, &other);
    obs.wait("the first prompt's blocks spilled", |t| t.spilled >= 3);
    let got = reply(&e, &prompt);
    obs.wait("a RAM-tier hit", |t| t.ram_hits >= 1);
    assert_eq!(
        got.2, 80,
        "resumed from the checkpoint spilled with its block"
    );
    assert_eq!(got.0, want.0, "tokens from the RAM tier");
    assert!(got.1 == want.1, "logprobs from the RAM tier differ");
    obs.wait("blocks written with their states", |t| t.disk_written >= 6);
    e.shutdown();

    // A restart on the same directory: the blocks and their states come back from disk (read
    // off the engine thread).
    let obs = Arc::new(Tiers::default());
    let e = engine_with(&file, true, 160, tiers(Some(dir.clone())), obs.clone());
    let got = reply(&e, &prompt);
    obs.wait("a disk-tier hit", |t| t.disk_hits == 1);
    assert_eq!(got.2, 80, "resumed from the checkpoint read from disk");
    assert_eq!((got.0, got.1), (want.0.clone(), want.1.clone()));
    e.shutdown();

    // The file of the block ending at 80 damaged: the read stops there, the state at 48 serves
    // (the damaged file counted and removed), and the reply is the same.
    let mut keys = Vec::new();
    let mut parent = kiln::scheduler::prefix_cache::ROOT;
    for chunk in prompt.chunks_exact(16).take(5) {
        parent = kiln::scheduler::prefix_cache::block_key(parent, chunk);
        keys.push(parent);
    }
    let sub = std::fs::read_dir(&dir)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let f = sub.join(format!("{:016x}.kvb", keys[4]));
    let mut b = std::fs::read(&f).expect("the block file at 80");
    let mid = b.len() / 2;
    b[mid] ^= 1;
    std::fs::write(&f, &b).unwrap();
    let obs = Arc::new(Tiers::default());
    let e = engine_with(&file, true, 160, tiers(Some(dir.clone())), obs.clone());
    let got = reply(&e, &prompt);
    obs.wait("the damaged file refused", |t| t.disk_rejected == 1);
    assert_eq!(
        got.2, 48,
        "resumed from the last state before the damaged file"
    );
    assert_eq!((got.0, got.1), (want.0, want.1));
    // Removed; the writer may since have written the recomputed block (with its state) again.
    assert!(
        std::fs::read(&f).map_or(true, |now| now != b),
        "the damaged file is removed"
    );
    e.shutdown();
    let _ = std::fs::remove_dir_all(&dir);
}
