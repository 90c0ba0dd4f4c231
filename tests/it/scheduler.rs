//! The scheduler with the real default model: batched outputs equal solo outputs, seeded
//! sampling is reproducible in any company, stop strings, cancellation, the prefix cache.

use crate::common::default_model;
use kiln::config::{Config, KvBudget};
use kiln::scheduler::setup::{start, Loaded};
use kiln::scheduler::{
    EngineHandle, Event, FinishReason, GenerationRequest, NoopObserver, RequestStream,
    SamplingParams,
};
use kiln::tokenizer::Tokenizer;
use std::sync::Arc;
use std::time::{Duration, Instant};

fn engine(max_num_seqs: usize, kv_positions: u64) -> Loaded {
    let mut cfg = Config {
        model_path: default_model(),
        threads: 1,
        kv_cache: KvBudget::Positions(kv_positions),
        ..Config::default()
    };
    cfg.scheduler.max_num_seqs = max_num_seqs;
    cfg.scheduler.max_batch_tokens = 256.max(max_num_seqs);
    start(&cfg, None, Arc::new(NoopObserver)).expect("engine starts")
}

pub(crate) fn chat(tok: &Tokenizer, user: &str) -> Vec<u32> {
    let text = format!(
        "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n"
    );
    tok.encode(&text, false, true)
}

/// Everything one choice produced.
#[derive(Debug, Default, Clone, PartialEq)]
pub(crate) struct Out {
    pub ids: Vec<u32>,
    pub text: String,
    pub finish: Option<FinishReason>,
}

/// Reads a stream to its end: per-choice outputs and the usage.
pub(crate) fn collect(mut s: RequestStream, n: usize) -> (Vec<Out>, kiln::scheduler::Usage) {
    let mut outs = vec![Out::default(); n];
    loop {
        match s.blocking_recv().expect("stream ended without Done") {
            Event::Delta {
                choice, ids, text, ..
            } => {
                outs[choice].ids.extend(ids);
                outs[choice].text.push_str(&text);
            }
            Event::Finished { choice, reason, .. } => outs[choice].finish = Some(reason),
            Event::Done { usage, .. } => return (outs, usage),
            Event::PromptLogprobs { .. } | Event::Embedding { .. } => {}
            Event::Error { message } => panic!("engine error: {message}"),
        }
    }
}

pub(crate) fn greedy(prompt: Vec<u32>, max_tokens: usize) -> GenerationRequest {
    let mut r = GenerationRequest::new(prompt, max_tokens);
    r.params.temperature = 0.0;
    r
}

pub(crate) fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !f() {
        assert!(t0.elapsed() < Duration::from_secs(30), "timed out: {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

pub(crate) fn idle(e: &EngineHandle) -> bool {
    let l = e.load();
    l.waiting == 0 && l.running == 0 && l.kv_blocks_used == 0
}

pub(crate) const QUESTIONS: [&str; 16] = [
    "What is the capital of France?",
    "Write a haiku about a kiln.",
    "Name three primary colors.",
    "How many legs does a spider have?",
    "Explain photosynthesis in one sentence.",
    "What is 12 times 12?",
    "Give me a synonym for happy.",
    "Who wrote Romeo and Juliet?",
    "What is the boiling point of water?",
    "Translate 'good morning' to Spanish.",
    "List two planets in our solar system.",
    "What does a baker do?",
    "Why is the sky blue?",
    "Suggest a name for a cat.",
    "What is the opposite of cold?",
    "Describe a rainbow briefly.",
];

#[test]
fn sixteen_concurrent_greedy_requests_equal_their_solo_runs() {
    let l = engine(16, 16384);
    let prompts: Vec<Vec<u32>> = QUESTIONS.iter().map(|q| chat(&l.tokenizer, q)).collect();
    let solo: Vec<Out> = prompts
        .iter()
        .map(|p| collect(l.engine.submit(greedy(p.clone(), 24)).unwrap(), 1).0[0].clone())
        .collect();
    let streams: Vec<RequestStream> = prompts
        .iter()
        .map(|p| l.engine.submit(greedy(p.clone(), 24)).unwrap())
        .collect();
    let together: Vec<Out> = streams
        .into_iter()
        .map(|s| collect(s, 1).0[0].clone())
        .collect();
    for (i, (a, b)) in solo.iter().zip(&together).enumerate() {
        assert_eq!(a, b, "request {i} differs when batched");
        assert!(!a.ids.is_empty());
    }
    assert_eq!(
        l.tokenizer.decode(&solo[0].ids).trim_end(),
        solo[0].text.trim_end()
    );
    l.engine.shutdown();
}

#[test]
fn seeded_sampling_is_the_same_alone_and_among_31_others() {
    let l = engine(32, 32768);
    let sampled = |prompt: Vec<u32>, seed: u64| {
        let mut r = GenerationRequest::new(prompt, 32);
        r.params = SamplingParams {
            temperature: 0.9,
            top_p: 0.95,
            top_k: 50,
            seed: Some(seed),
            ..SamplingParams::default()
        };
        r
    };
    let prompt = chat(&l.tokenizer, "Tell me a short story about a dragon.");
    let alone = collect(l.engine.submit(sampled(prompt.clone(), 42)).unwrap(), 1).0;
    let mut streams = Vec::new();
    for i in 0..31u64 {
        let q = chat(&l.tokenizer, QUESTIONS[i as usize % 16]);
        streams.push(l.engine.submit(sampled(q, 1000 + i)).unwrap());
        if i == 15 {
            streams.push(l.engine.submit(sampled(prompt.clone(), 42)).unwrap());
        }
    }
    let outs: Vec<Vec<Out>> = streams.into_iter().map(|s| collect(s, 1).0).collect();
    assert_eq!(outs[16], alone, "same seed, same text, whatever the batch");
    let other = collect(l.engine.submit(sampled(prompt, 43)).unwrap(), 1).0;
    assert_ne!(
        other[0].ids, alone[0].ids,
        "another seed draws other tokens"
    );
    l.engine.shutdown();
}

#[test]
fn stop_strings_across_tokens_end_the_choice_without_the_stop_text() {
    let l = engine(4, 8192);
    let prompt = chat(&l.tokenizer, "Count from 1 to 20, separated by commas.");
    let (full, _) = collect(l.engine.submit(greedy(prompt.clone(), 64)).unwrap(), 1);
    let text = &full[0].text;
    // A stop string spanning several tokens, chosen from the actual output.
    let at = text.find("5").expect("the model counts");
    let stop = text[at..].chars().take(4).collect::<String>();
    assert!(stop.len() >= 3, "{text:?}");
    let mut r = greedy(prompt, 64);
    r.stop = vec!["never appears".to_string(), stop.clone()];
    let (outs, usage) = collect(l.engine.submit(r).unwrap(), 1);
    assert_eq!(outs[0].finish, Some(FinishReason::Stop));
    assert_eq!(
        outs[0].text,
        text[..at],
        "text up to the stop string, without it"
    );
    assert!(usage.completion_tokens < full[0].ids.len());
    l.engine.shutdown();
}

#[test]
fn length_limit_and_n_choices() {
    let l = engine(8, 8192);
    let prompt = chat(&l.tokenizer, "Write a long poem about the sea.");
    let mut r = GenerationRequest::new(prompt.clone(), 12);
    r.n = 3;
    r.params.temperature = 1.0;
    r.params.seed = Some(7);
    let (outs, usage) = collect(l.engine.submit(r).unwrap(), 3);
    assert_eq!(usage.prompt_tokens, prompt.len());
    assert_eq!(
        usage.completion_tokens,
        outs.iter().map(|o| o.ids.len()).sum::<usize>()
    );
    for o in &outs {
        assert!(o.finish.is_some());
        if o.finish == Some(FinishReason::Length) {
            assert_eq!(o.ids.len(), 12);
        }
    }
    assert!(
        outs[0].ids != outs[1].ids || outs[1].ids != outs[2].ids,
        "choices differ"
    );
    // Choice 0 of n with seed 7 is the same as the single choice with seed 7.
    let mut one = GenerationRequest::new(prompt, 12);
    one.params.temperature = 1.0;
    one.params.seed = Some(7);
    let (single, _) = collect(l.engine.submit(one).unwrap(), 1);
    assert_eq!(single[0], outs[0]);
    wait_for("blocks back", || idle(&l.engine));
    l.engine.shutdown();
}

#[test]
fn cancelling_fifty_running_and_waiting_requests_frees_their_kv() {
    let l = engine(8, 16384);
    assert!(idle(&l.engine));
    let mut streams = Vec::new();
    for i in 0..50 {
        let p = chat(&l.tokenizer, QUESTIONS[i % 16]);
        streams.push(l.engine.submit(greedy(p, 400)).unwrap());
    }
    // Let some run (8 at a time), the rest wait; then drop every stream.
    wait_for("requests running", || l.engine.load().running == 8);
    let mut first = streams.remove(0);
    assert!(matches!(first.blocking_recv(), Some(Event::Delta { .. })));
    drop(first);
    drop(streams);
    wait_for("KV usage back to baseline", || idle(&l.engine));
    // A fresh request completes promptly.
    let t0 = Instant::now();
    let (outs, _) = collect(
        l.engine
            .submit(greedy(chat(&l.tokenizer, "Hi!"), 8))
            .unwrap(),
        1,
    );
    assert!(!outs[0].ids.is_empty());
    assert!(t0.elapsed() < Duration::from_secs(10));
    l.engine.shutdown();
}

#[test]
fn shared_system_prompt_is_served_from_the_prefix_cache() {
    let l = engine(4, 8192);
    let p1 = chat(&l.tokenizer, "What is the capital of France?");
    let p2 = chat(&l.tokenizer, "What is the capital of Italy?");
    let (_, u1) = collect(l.engine.submit(greedy(p1.clone(), 4)).unwrap(), 1);
    assert_eq!(u1.cached_tokens, 0);
    let (_, u2) = collect(l.engine.submit(greedy(p2.clone(), 4)).unwrap(), 1);
    let common = p1.iter().zip(&p2).take_while(|(a, b)| a == b).count();
    assert_eq!(
        u2.cached_tokens,
        common / 16 * 16,
        "whole shared blocks reused"
    );
    assert!(u2.cached_tokens >= 16);
    // The same prompt again: everything but the last token comes from the cache.
    let (_, u3) = collect(l.engine.submit(greedy(p1.clone(), 4)).unwrap(), 1);
    assert_eq!(u3.cached_tokens, (p1.len() - 1) / 16 * 16);
    l.engine.shutdown();
}

#[test]
fn refusals_are_immediate_and_named() {
    let l = engine(4, 2048);
    let tok = &l.tokenizer;
    let e = &l.engine;
    let long = vec![1u32; 3000];
    assert!(matches!(
        e.submit(greedy(long, 10)),
        Err(kiln::scheduler::SubmitError::KvCapacity(_))
    ));
    let n_ctx = e.info().n_ctx;
    assert!(matches!(
        e.submit(greedy(vec![1; 10], n_ctx)),
        Err(kiln::scheduler::SubmitError::ContextLength(_))
    ));
    let mut bad = greedy(chat(tok, "x"), 4);
    bad.params.top_p = 2.0;
    let err = e.submit(bad).err().expect("refused");
    assert_eq!(err.param(), Some("top_p"));
    assert!(matches!(
        e.submit(greedy(vec![tok.n_vocab() as u32], 4)),
        Err(kiln::scheduler::SubmitError::BadToken { .. })
    ));
    l.engine.shutdown();
}

#[test]
fn two_workers_share_the_model_and_split_the_load() {
    let cfg = Config {
        model_path: default_model(),
        threads: 1,
        workers: 2,
        kv_cache: KvBudget::Positions(8192),
        ..Config::default()
    };
    let l = start(&cfg, None, Arc::new(NoopObserver)).expect("engine starts");
    assert_eq!(l.engine.info().workers, 2);
    assert_eq!(
        l.engine.load().kv_blocks_total,
        2 * (4096 / 16),
        "the budget is split"
    );
    let prompts: Vec<Vec<u32>> = QUESTIONS[..6]
        .iter()
        .map(|q| chat(&l.tokenizer, q))
        .collect();
    let solo: Vec<Out> = prompts
        .iter()
        .map(|p| collect(l.engine.submit(greedy(p.clone(), 12)).unwrap(), 1).0[0].clone())
        .collect();
    let streams: Vec<RequestStream> = prompts
        .iter()
        .map(|p| l.engine.submit(greedy(p.clone(), 12)).unwrap())
        .collect();
    let together: Vec<Out> = streams
        .into_iter()
        .map(|s| collect(s, 1).0[0].clone())
        .collect();
    assert_eq!(solo, together);
    // Least-loaded routing: long requests keep both workers busy at once (long enough to be
    // seen however loaded the machine is); dropping them frees both workers' KV.
    let long: Vec<RequestStream> = prompts[..4]
        .iter()
        .map(|p| {
            let mut r = greedy(p.clone(), 1500);
            r.ignore_eos = true;
            l.engine.submit(r).unwrap()
        })
        .collect();
    wait_for("both workers running", || {
        l.engine.worker_loads().iter().all(|w| w.running > 0)
    });
    drop(long);
    wait_for("idle", || idle(&l.engine));
    l.engine.shutdown();
}

/// An engine on the default model with one worker and one thread, `faults` injected
/// (`STAGE@STEP`), at most `max_unread_events` unread events per stream, reporting to
/// `observer`.
pub(crate) fn small_engine_with(
    faults: &[&str],
    max_unread_events: usize,
    observer: Arc<dyn kiln::scheduler::Observer>,
) -> (EngineHandle, Arc<Tokenizer>) {
    use kiln::engine::Model;
    use kiln::gguf::GgufFile;
    use kiln::scheduler::state::Limits;
    use kiln::scheduler::EngineConfig;
    let file = GgufFile::open(default_model()).unwrap();
    let tok = Arc::new(Tokenizer::from_gguf(&file).unwrap());
    let model = Model::from_gguf(&file, 1).unwrap();
    let cfg = EngineConfig {
        workers: 1,
        threads: 1,
        kv_positions: 4096,
        block_size: 16,
        kv_type: kiln::engine::kv_cache::KvType::F16,
        limits: Limits {
            max_num_seqs: 4,
            max_batch_tokens: 256,
            max_prefill_while_decoding: 64,
            attn_positions_per_token: 0,
            max_preemptions: 4,
            n_ctx: 0,
            prefix_cache: true,
            max_waiting: 16,
        },
        faults: faults.iter().map(|f| f.parse().unwrap()).collect(),
        max_unread_events,
        pooling: None,
        tiers: Default::default(),
        speculative: kiln::scheduler::speculative::SpecConfig::off(),
    };
    let e = EngineHandle::start(model, Arc::clone(&tok), cfg, observer).unwrap();
    (e, tok)
}

fn small_engine(max_unread_events: usize) -> (EngineHandle, Arc<Tokenizer>) {
    small_engine_with(&[], max_unread_events, Arc::new(NoopObserver))
}

#[test]
fn a_stream_nobody_reads_is_aborted_at_the_unread_limit() {
    // RELIABILITY 14: a client that never reads must not grow the server's memory: once its
    // stream holds the limit of unread events, the request is aborted and its KV freed.
    let (e, tok) = small_engine(24);
    let mut req = greedy(chat(&tok, QUESTIONS[0]), 400);
    req.ignore_eos = true;
    let mut s = e.submit(req).unwrap();
    wait_for("the request to run", || e.load().running == 1);
    wait_for("the unread request to be aborted", || idle(&e));
    let events: Vec<Event> = std::iter::from_fn(|| s.blocking_recv()).collect();
    assert!(events.len() <= 24, "{} events buffered", events.len());
    let tokens: usize = events
        .iter()
        .map(|ev| match ev {
            Event::Delta { ids, .. } => ids.len(),
            _ => 0,
        })
        .sum();
    assert!(tokens < 400, "generation went on: {tokens} tokens");
    // The engine still serves.
    let (outs, _) = collect(e.submit(greedy(chat(&tok, "hi"), 4)).unwrap(), 1);
    assert!(outs[0].finish.is_some());
    e.shutdown();
}

#[test]
fn abort_all_and_shutdown_end_requests_with_abort() {
    let l = engine(4, 8192);
    let s1 = l
        .engine
        .submit(greedy(chat(&l.tokenizer, QUESTIONS[0]), 400))
        .unwrap();
    wait_for("running", || l.engine.load().running == 1);
    l.engine.abort_all();
    let (outs, _) = collect(s1, 1);
    assert_eq!(outs[0].finish, Some(FinishReason::Abort));
    let s2 = l
        .engine
        .submit(greedy(chat(&l.tokenizer, QUESTIONS[1]), 400))
        .unwrap();
    wait_for("running", || l.engine.load().running == 1);
    l.engine.shutdown();
    let (outs, _) = collect(s2, 1);
    assert_eq!(outs[0].finish, Some(FinishReason::Abort));
    assert!(matches!(
        l.engine.submit(greedy(vec![1, 2, 3], 4)),
        Err(kiln::scheduler::SubmitError::Unavailable(_))
    ));
}

/// Prompt logprobs (teacher forcing): scoring prompt + greedily generated tokens gives, for
/// those tokens, the logprobs (and top alternatives) the engine reported while generating
/// them, each generated token is the top-1 of its row, and this holds while the scored
/// prompt shares its batches with generating requests.
#[test]
fn prompt_logprobs_equal_the_logprobs_of_generation() {
    use kiln::scheduler::{PromptOutput, TokenLogprob};
    let l = engine(8, 8192);
    let prompt = chat(&l.tokenizer, "Name three colors.");
    let mut g = greedy(prompt.clone(), 8);
    g.logprobs = true;
    g.params.top_logprobs = 3;
    let mut s = l.engine.submit(g).unwrap();
    let mut gen: Vec<TokenLogprob> = Vec::new();
    loop {
        match s.blocking_recv().expect("Done") {
            Event::Delta { logprobs, .. } => gen.extend(logprobs),
            Event::Done { .. } => break,
            Event::Error { message } => panic!("{message}"),
            _ => {}
        }
    }
    assert_eq!(gen.len(), 8);
    let mut full = prompt.clone();
    full.extend(gen.iter().map(|t| t.id));
    let others: Vec<RequestStream> = QUESTIONS[..4]
        .iter()
        .map(|q| l.engine.submit(greedy(chat(&l.tokenizer, q), 16)).unwrap())
        .collect();
    let mut r = GenerationRequest::new(full.clone(), 0);
    r.prompt_output = PromptOutput::Logprobs { top: 3 };
    let mut s = l.engine.submit(r).unwrap();
    let (mut scores, mut finish) = (None, None);
    loop {
        match s.blocking_recv().expect("Done") {
            Event::PromptLogprobs { logprobs } => scores = Some(logprobs),
            Event::Delta { .. } | Event::Embedding { .. } => {
                panic!("max_tokens 0 scoring generates nothing")
            }
            Event::Finished { reason, .. } => finish = Some(reason),
            Event::Done { usage, .. } => {
                assert_eq!(usage.completion_tokens, 0);
                break;
            }
            Event::Error { message } => panic!("{message}"),
        }
    }
    assert_eq!(finish, Some(FinishReason::Length));
    let scores = scores.expect("prompt logprobs sent");
    assert_eq!(scores.len(), full.len() - 1);
    for (i, sc) in scores.iter().enumerate() {
        assert_eq!(
            sc.id,
            full[i + 1],
            "entry {i} scores prompt token {}",
            i + 1
        );
        assert!(sc.logprob <= 0.0 && sc.top.len() == 3);
    }
    for (k, (a, b)) in scores[prompt.len() - 1..].iter().zip(&gen).enumerate() {
        assert!(
            (a.logprob - b.logprob).abs() < 2e-3,
            "token {k}: {a:?} vs {b:?}"
        );
        let ids = |t: &TokenLogprob| t.top.iter().map(|p| p.0).collect::<Vec<_>>();
        assert_eq!(ids(a), ids(b), "token {k}");
        assert_eq!(a.top[0].0, a.id, "greedy token {k} is its row's top-1");
    }
    for o in others {
        collect(o, 1);
    }
    l.engine.shutdown();
}
