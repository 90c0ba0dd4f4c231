//! Speculative decoding with a draft model (`method = "draft"`): the default model drafting
//! for itself (a second copy, loaded like any draft) leaves every reply the same, bit for bit
//! (greedy with logprobs, seeded sampling with n > 1), its guesses are really verified and
//! kept, and a draft with another vocabulary is a named start-up error.

use crate::common::default_model;
use crate::speculative::{copy_prompts, engine_on, greedy, replies, Guesses, Replies};
use kiln::config::Config;
use kiln::engine::Model;
use kiln::scheduler::setup::{self, SetupError};
use kiln::scheduler::speculative::{SpecConfig, SpecMethod};
use kiln::scheduler::GenerationRequest;
use std::sync::Arc;

fn draft_spec() -> SpecConfig {
    SpecConfig {
        method: SpecMethod::Draft,
        max_draft: 6,
        ..SpecConfig::default()
    }
}

/// Runs `reqs` one after another, with the default model as its own draft when `draft`; the
/// replies and the guesses verified and kept.
fn run_all(draft: bool, reqs: &[GenerationRequest]) -> (Vec<Replies>, (usize, usize)) {
    let g = Arc::new(Guesses::default());
    let (spec, d) = if draft {
        (draft_spec(), Some(Model::load(default_model(), 1).unwrap()))
    } else {
        (SpecConfig::off(), None)
    };
    let (e, _) = engine_on(&default_model(), d, spec, Arc::clone(&g));
    let out = reqs
        .iter()
        .map(|r| replies(e.submit(r.clone()).unwrap(), r.n))
        .collect();
    crate::scheduler::wait_for("the KV cache to be released", || {
        let l = e.load();
        l.running == 0 && l.kv_blocks_used == 0
    });
    e.shutdown();
    (out, g.get())
}

#[test]
fn greedy_replies_are_bit_identical_with_a_draft_model() {
    let tok = crate::structured::tokenizer();
    let mut prompts = copy_prompts(&tok);
    prompts.truncate(2);
    let reqs: Vec<GenerationRequest> = prompts.into_iter().map(|p| greedy(p, 48)).collect();
    let (plain, _) = run_all(false, &reqs);
    let (spec, (drafted, accepted)) = run_all(true, &reqs);
    assert_eq!(plain, spec);
    // The draft computes the target's own logits (bit for bit, whatever the chunking): its
    // greedy guesses are the target's greedy tokens, all kept but where the reply ends.
    assert!(accepted >= 60, "only {accepted} of {drafted} guesses kept");
    assert!(accepted * 10 >= drafted * 9, "{accepted} of {drafted} kept");
}

#[test]
fn seeded_sampling_is_the_same_with_a_draft_model_and_rejections_roll_back() {
    let tok = crate::structured::tokenizer();
    let reqs: Vec<GenerationRequest> = copy_prompts(&tok)
        .into_iter()
        .take(2)
        .enumerate()
        .map(|(i, p)| {
            let mut r = GenerationRequest::new(p, 40);
            r.params.temperature = 0.9;
            r.params.seed = Some(5 + i as u64);
            r.logprobs = true;
            r.n = 2;
            r
        })
        .collect();
    let (plain, _) = run_all(false, &reqs);
    let (spec, (drafted, accepted)) = run_all(true, &reqs);
    // Sampling rejects some greedy guesses: both caches roll back, the replies stay the same.
    assert_eq!(plain, spec);
    assert!(
        accepted > 0 && drafted > accepted,
        "{accepted} of {drafted} kept"
    );
}

#[test]
fn a_draft_with_another_vocabulary_is_a_named_start_up_error() {
    let root = default_model();
    let gemma = root.with_file_name("gemma-3-270m-Q4_K_M.gguf");
    assert!(gemma.is_file(), "{} is missing", gemma.display());
    let text = format!(
        "[model]\npath = {:?}\n[engine]\nthreads = 1\nkv_cache = \"8MiB\"\n[speculative]\ndraft_model = {:?}\n",
        root.display().to_string(),
        gemma.display().to_string()
    );
    let cfg = Config::parse(&text).unwrap();
    let observer = Arc::new(Guesses::default());
    match setup::start(&cfg, None, observer) {
        Err(e @ SetupError::DraftVocab { .. }) => {
            let m = e.to_string();
            assert!(
                m.contains("gemma-3-270m") && m.contains("vocabulary"),
                "{m}"
            );
        }
        Err(e) => panic!("another error: {e}"),
        Ok(_) => panic!("a draft with another vocabulary was accepted"),
    }
}
