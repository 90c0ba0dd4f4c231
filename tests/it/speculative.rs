//! Speculative decoding with the real default model: replies are the same, bit for bit, with
//! and without guesses (greedy and seeded sampling, logprobs, penalties, bias, stop strings
//! and length limits cut inside a run of accepted guesses, grammars, n > 1), guesses are
//! really verified and kept, and rejected guesses leave no KV behind.

use crate::common::default_model;
use crate::scheduler::{chat, wait_for, QUESTIONS};
use crate::structured::{grammars, person_schema};
use kiln::engine::Model;
use kiln::gguf::GgufFile;
use kiln::scheduler::speculative::{SpecConfig, SpecRequest};
use kiln::scheduler::state::Limits;
use kiln::scheduler::{
    EngineConfig, EngineHandle, Event, FinishReason, GenerationRequest, Observer, RequestStream,
    StepStats, TokenLogprob,
};
use kiln::structured::Constraint;
use kiln::tokenizer::Tokenizer;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// Counts the guesses steps verified and kept.
#[derive(Default)]
pub(crate) struct Guesses {
    drafted: AtomicUsize,
    accepted: AtomicUsize,
}

impl Observer for Guesses {
    fn on_step(&self, s: &StepStats) {
        self.drafted.fetch_add(s.drafted, Ordering::Relaxed);
        self.accepted.fetch_add(s.accepted, Ordering::Relaxed);
    }
}

impl Guesses {
    pub(crate) fn get(&self) -> (usize, usize) {
        (
            self.drafted.load(Ordering::Relaxed),
            self.accepted.load(Ordering::Relaxed),
        )
    }
}

/// An engine on the default model (one worker, one thread) guessing as `spec` says.
fn engine(spec: SpecConfig, guesses: Arc<Guesses>) -> (EngineHandle, Arc<Tokenizer>) {
    engine_on(&default_model(), None, spec, guesses)
}

/// An engine on `path` (one worker, one thread) guessing as `spec` says, with `draft`.
pub(crate) fn engine_on(
    path: &std::path::Path,
    draft: Option<Model>,
    spec: SpecConfig,
    guesses: Arc<Guesses>,
) -> (EngineHandle, Arc<Tokenizer>) {
    let file = GgufFile::open(path).unwrap();
    let tok = Arc::new(Tokenizer::from_gguf(&file).unwrap());
    let model = Model::from_gguf(&file, 1).unwrap();
    let cfg = EngineConfig {
        workers: 1,
        threads: 1,
        kv_positions: 8192,
        block_size: 16,
        kv_type: kiln::engine::kv_cache::KvType::F16,
        limits: Limits {
            max_num_seqs: 8,
            max_batch_tokens: 256,
            max_prefill_while_decoding: 64,
            attn_positions_per_token: 0,
            max_preemptions: 4,
            n_ctx: 0,
            prefix_cache: true,
            max_waiting: 64,
        },
        faults: Vec::new(),
        max_unread_events: kiln::scheduler::MAX_UNREAD_EVENTS,
        pooling: None,
        speculative: spec,
        tiers: Default::default(),
    };
    let e = EngineHandle::start_with_draft(model, draft, Arc::clone(&tok), cfg, guesses).unwrap();
    (e, tok)
}

/// A token's logprob as bits, with its alternatives' (compared exactly).
type LogprobBits = (u32, u32, Vec<(u32, u32)>);

/// A request's replies (one per choice) and the completion tokens counted.
pub(crate) type Replies = (Vec<Reply>, usize);

/// Everything a choice produced, logprobs as bits (compared exactly).
#[derive(Debug, Default, Clone, PartialEq)]
pub(crate) struct Reply {
    ids: Vec<u32>,
    text: String,
    logprobs: Vec<LogprobBits>,
    finish: Option<FinishReason>,
    stop: Option<String>,
}

fn bits(lp: &TokenLogprob) -> LogprobBits {
    let top = lp.top.iter().map(|&(i, p)| (i, p.to_bits())).collect();
    (lp.id, lp.logprob.to_bits(), top)
}

/// Reads a stream to its end: each choice's reply and the completion tokens counted.
pub(crate) fn replies(mut s: RequestStream, n: usize) -> Replies {
    let mut out = vec![Reply::default(); n];
    loop {
        match s.blocking_recv().expect("stream ended without Done") {
            Event::Delta {
                choice,
                ids,
                text,
                logprobs,
            } => {
                out[choice].ids.extend(ids);
                out[choice].text.push_str(&text);
                out[choice].logprobs.extend(logprobs.iter().map(bits));
            }
            Event::Finished {
                choice,
                reason,
                stop,
            } => {
                out[choice].finish = Some(reason);
                out[choice].stop = stop;
            }
            Event::Done { usage, .. } => return (out, usage.completion_tokens),
            Event::PromptLogprobs { .. } | Event::Embedding { .. } => {}
            Event::Error { message } => panic!("engine error: {message}"),
        }
    }
}

/// A text the model copies when asked to.
const DOCUMENT: &str = "The kiln was fired at dawn. Its walls were brick, its door was iron, \
and its chimney rose twelve feet above the yard. Potters loaded bowls, cups and tiles on \
the shelves, closed the door, and fed the fire with oak for nine hours.";

const FUNCTION: &str = "fn total(items: &[Item]) -> u64 {\n    let mut sum = 0;\n    for item in items {\n        sum += item.price * item.count;\n    }\n    sum\n}";

pub(crate) fn copy_prompts(tok: &Tokenizer) -> Vec<Vec<u32>> {
    vec![
        chat(tok, &format!("Repeat this text exactly:\n\n{DOCUMENT}")),
        chat(
            tok,
            &format!("Rename `total` to `order_total` in this function and show it:\n\n{FUNCTION}"),
        ),
        chat(tok, QUESTIONS[4]),
    ]
}

/// Runs `reqs` one after another on a fresh engine guessing as `spec` says; the replies and
/// the guesses verified and kept.
fn run_all(spec: SpecConfig, reqs: &[GenerationRequest]) -> (Vec<Replies>, (usize, usize)) {
    let g = Arc::new(Guesses::default());
    let (e, _) = engine(spec, Arc::clone(&g));
    let out = reqs
        .iter()
        .map(|r| replies(e.submit(r.clone()).unwrap(), r.n))
        .collect();
    wait_for("the KV cache to be released", || {
        let l = e.load();
        l.running == 0 && l.kv_blocks_used == 0
    });
    e.shutdown();
    (out, g.get())
}

pub(crate) fn greedy(prompt: Vec<u32>, max_tokens: usize) -> GenerationRequest {
    let mut r = GenerationRequest::new(prompt, max_tokens);
    r.params.temperature = 0.0;
    r.logprobs = true;
    r.params.top_logprobs = 3;
    r
}

#[test]
fn greedy_replies_are_bit_identical_with_and_without_guesses() {
    let tok = crate::structured::tokenizer();
    let reqs: Vec<GenerationRequest> = copy_prompts(&tok)
        .into_iter()
        .map(|p| greedy(p, 120))
        .collect();
    let (plain, none) = run_all(SpecConfig::off(), &reqs);
    assert_eq!(none, (0, 0), "no guesses without speculation");
    let (spec, (drafted, accepted)) = run_all(SpecConfig::default(), &reqs);
    assert_eq!(plain, spec);
    // The copy prompts really copy: most guesses are kept, so the test verified real runs.
    assert!(accepted >= 40, "only {accepted} of {drafted} guesses kept");
    assert!(drafted > accepted, "no guess was ever rejected ({drafted})");
    eprintln!("greedy: {accepted} of {drafted} guesses kept");
}

#[test]
fn seeded_sampling_with_penalties_bias_and_n_is_the_same_with_guesses() {
    let tok = crate::structured::tokenizer();
    let reqs: Vec<GenerationRequest> = copy_prompts(&tok)
        .into_iter()
        .enumerate()
        .map(|(i, p)| {
            let mut r = GenerationRequest::new(p, 100);
            r.params.temperature = 0.7;
            r.params.top_p = 0.95;
            r.params.seed = Some(11 + i as u64);
            r.params.repetition_penalty = 1.05;
            r.params.presence_penalty = 0.2;
            // "The" banned, "," favoured.
            r.params.logit_bias = vec![(tok.encode("The", false, false)[0], -100.0)];
            r.params
                .logit_bias
                .push((tok.encode(",", false, false)[0], 1.5));
            r.logprobs = true;
            r.n = 2;
            r
        })
        .collect();
    let (plain, _) = run_all(SpecConfig::off(), &reqs);
    let (spec, (drafted, accepted)) = run_all(SpecConfig::default(), &reqs);
    assert_eq!(plain, spec);
    assert!(accepted >= 20, "only {accepted} of {drafted} guesses kept");
}

#[test]
fn stop_strings_and_length_limits_cut_inside_accepted_runs() {
    let tok = crate::structured::tokenizer();
    let prompt = copy_prompts(&tok).swap_remove(0);
    let (full, _) = run_all(SpecConfig::off(), &[greedy(prompt.clone(), 80)]);
    let text = &full[0].0[0].text;
    // Every length from 1 to 60: most of them end in the middle of a run of kept guesses.
    let mut reqs: Vec<GenerationRequest> = (1..=60).map(|m| greedy(prompt.clone(), m)).collect();
    // Stop strings taken from the reply's copied part (each ends the reply there).
    for stop in ["iron", "twelve feet", "tiles", "oak for"] {
        assert!(text.contains(stop), "{stop:?} not in {text:?}");
        let mut r = greedy(prompt.clone(), 80);
        r.stop = vec![stop.to_string()];
        reqs.push(r);
    }
    let (plain, _) = run_all(SpecConfig::off(), &reqs);
    let (spec, (drafted, accepted)) = run_all(SpecConfig::default(), &reqs);
    for (i, (a, b)) in plain.iter().zip(&spec).enumerate() {
        assert_eq!(a, b, "request {i}");
    }
    for r in &spec[60..] {
        assert_eq!(r.0[0].finish, Some(FinishReason::Stop));
        assert!(r.0[0].stop.is_some());
    }
    // The reply ends by itself after `natural` tokens.
    let natural = full[0].1;
    assert!(natural > 40, "the copy is only {natural} tokens");
    for (m, r) in spec[..60].iter().enumerate() {
        assert_eq!(r.1, (m + 1).min(natural), "max_tokens {}", m + 1);
    }
    assert!(accepted > 200, "only {accepted} of {drafted} guesses kept");
}

#[test]
fn a_grammar_rejecting_guesses_ends_their_run_and_the_reply_is_the_same() {
    let tok = crate::structured::tokenizer();
    let c = Arc::new(
        Constraint::json_schema(grammars(), &person_schema(), "response_format", "p").unwrap(),
    );
    // The prompt is full of JSON-looking text the guesses copy, much of it outside the schema.
    let example = r#"{"name": "Ada Lovelace", "age": 36, "role": "admin", "tags": ["math", "poetry"], "city": "London"}"#;
    let prompt = chat(
        &tok,
        &format!("Here is a person: {example}\nWrite this person again as JSON."),
    );
    let reqs: Vec<GenerationRequest> = (0..3)
        .map(|seed| {
            let mut r = GenerationRequest::new(prompt.clone(), 120);
            r.params.temperature = if seed == 0 { 0.0 } else { 0.8 };
            r.params.seed = Some(seed);
            r.constraint = Some(Arc::clone(&c));
            r.logprobs = true;
            r
        })
        .collect();
    let (plain, _) = run_all(SpecConfig::off(), &reqs);
    let (spec, (drafted, accepted)) = run_all(SpecConfig::default(), &reqs);
    assert_eq!(plain, spec);
    for r in &spec {
        let v: serde_json::Value = serde_json::from_str(&r.0[0].text).expect("valid JSON");
        crate::structured::check_person(&v);
    }
    assert!(
        accepted > 0 && drafted > accepted,
        "{accepted} of {drafted} kept"
    );
}

#[test]
fn a_request_can_turn_guessing_off_or_narrow_it() {
    let tok = crate::structured::tokenizer();
    let prompt = copy_prompts(&tok).swap_remove(0);
    let mut off = greedy(prompt.clone(), 60);
    off.speculative = SpecRequest {
        n_max: Some(0),
        n_min: None,
    };
    let (_, (drafted, _)) = run_all(SpecConfig::default(), &[off]);
    assert_eq!(drafted, 0, "n_max 0 still guessed");
    let mut narrow = greedy(prompt.clone(), 60);
    narrow.speculative = SpecRequest {
        n_max: Some(2),
        n_min: Some(2),
    };
    let (a, (drafted, accepted)) = run_all(SpecConfig::default(), &[narrow]);
    let (b, _) = run_all(SpecConfig::off(), &[greedy(prompt, 60)]);
    assert_eq!(a, b);
    assert!(
        drafted > 0 && drafted % 2 == 0,
        "{drafted} guesses, not in pairs"
    );
    assert!(accepted > 0);
}

#[test]
fn concurrent_requests_with_guesses_equal_their_solo_runs() {
    let tok = crate::structured::tokenizer();
    let prompts = copy_prompts(&tok);
    let reqs: Vec<GenerationRequest> = (0..6)
        .map(|i| greedy(prompts[i % prompts.len()].clone(), 50 + 10 * i))
        .collect();
    let (solo, _) = run_all(SpecConfig::off(), &reqs);
    let g = Arc::new(Guesses::default());
    let (e, _) = engine(SpecConfig::default(), Arc::clone(&g));
    let streams: Vec<RequestStream> = reqs.iter().map(|r| e.submit(r.clone()).unwrap()).collect();
    let together: Vec<Replies> = streams.into_iter().map(|s| replies(s, 1)).collect();
    wait_for("the KV cache to be released", || {
        let l = e.load();
        l.running == 0 && l.kv_blocks_used == 0
    });
    e.shutdown();
    assert_eq!(solo, together);
    assert!(g.get().1 > 0, "no guess kept with a few streams");
}
