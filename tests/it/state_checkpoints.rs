//! The prefix cache on a model with recurrent layers (the lfm2 proof model): a prompt sharing
//! a cached prefix resumes from the recurrent-state checkpoint at the prefix's last block
//! boundary, and its reply (tokens and every logprob, to the bit) is the one computed from
//! scratch by an engine without the cache.

use crate::arch_proof::{reference, vocab};
use kiln::engine::synth::{build_all, proof_variants, Quant};
use kiln::engine::Model;
use kiln::gguf::GgufFile;
use kiln::scheduler::state::Limits;
use kiln::scheduler::{EngineConfig, EngineHandle, Event, GenerationRequest, NoopObserver};
use kiln::tokenizer::Tokenizer;
use std::sync::Arc;

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
    let tok = Arc::new(Tokenizer::from_gguf(file).expect("tokenizer"));
    let model = Model::from_gguf(file, 1).expect("model");
    assert!(model.desc().has_recurrent());
    let cfg = EngineConfig {
        workers: 1,
        threads: 1,
        kv_positions: 1024,
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
        tiers: Default::default(),
        speculative: kiln::scheduler::speculative::SpecConfig::off(),
    };
    EngineHandle::start(model, tok, cfg, Arc::new(NoopObserver)).expect("engine")
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
