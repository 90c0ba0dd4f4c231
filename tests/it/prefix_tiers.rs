//! The prefix cache's RAM and disk tiers with the real default model: a reply served from
//! restored blocks is bit-identical to one computed from scratch (tokens, text, logprobs).

use crate::common::default_model;
use crate::scheduler::{chat, greedy};
use kiln::config::{CacheSettings, Config, KvBudget};
use kiln::scheduler::setup::{start, Loaded};
use kiln::scheduler::{Event, NoopObserver};
use std::sync::Arc;

/// An engine on the default model (one thread) with `kv_positions` of KV cache and `cache`'s
/// tiers.
pub(crate) fn tier_engine(kv_positions: u64, cache: CacheSettings) -> Loaded {
    let mut cfg = Config {
        model_path: default_model(),
        threads: 1,
        kv_cache: KvBudget::Positions(kv_positions),
        cache,
        ..Config::default()
    };
    cfg.scheduler.max_num_seqs = 2;
    start(&cfg, None, Arc::new(NoopObserver)).expect("engine starts")
}

/// One generated token's logprob and alternatives, as f32 bits.
type BitLogprob = (u32, u32, Vec<(u32, u32)>);

/// A reply, to the bit: token ids, text, and every logprob (with 3 alternatives) as f32 bits.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Reply {
    pub ids: Vec<u32>,
    pub text: String,
    pub logprobs: Vec<BitLogprob>,
}

/// Runs `prompt` greedily for 12 tokens; the reply and the prompt tokens served from cache.
pub(crate) fn run(l: &Loaded, prompt: &[u32]) -> (Reply, usize) {
    let mut g = greedy(prompt.to_vec(), 12);
    g.logprobs = true;
    g.params.top_logprobs = 3;
    let mut s = l.engine.submit(g).unwrap();
    let mut r = Reply {
        ids: Vec::new(),
        text: String::new(),
        logprobs: Vec::new(),
    };
    loop {
        match s.blocking_recv().expect("stream ended without Done") {
            Event::Delta {
                ids,
                text,
                logprobs,
                ..
            } => {
                r.ids.extend(ids);
                r.text.push_str(&text);
                r.logprobs.extend(logprobs.iter().map(|t| {
                    let top = t.top.iter().map(|a| (a.0, a.1.to_bits())).collect();
                    (t.id, t.logprob.to_bits(), top)
                }));
            }
            Event::Done { usage, .. } => return (r, usage.cached_tokens),
            Event::Error { message } => panic!("engine error: {message}"),
            _ => {}
        }
    }
}

/// A long prompt (about 440 tokens) of its own for each `topic`.
pub(crate) fn long_prompt(l: &Loaded, topic: &str) -> Vec<u32> {
    let rules: String = (0..30)
        .map(|i| format!("Rule {i} about {topic}: answer briefly and stay on {topic}. "))
        .collect();
    chat(&l.tokenizer, &format!("{rules}\nWhat is {topic}?"))
}

#[test]
fn a_prompt_evicted_to_ram_comes_back_bit_identical() {
    // 640 positions: two ~420-token prompts do not fit together, so the second evicts the
    // first's blocks.
    let with = |ram_bytes| {
        tier_engine(
            640,
            CacheSettings {
                ram_bytes,
                ..CacheSettings::default()
            },
        )
    };
    let off = with(0);
    let on = with(64 << 20);
    let a = long_prompt(&on, "rivers");
    let b = long_prompt(&on, "mountains");
    assert!(a.len() > 400 && b.len() > 400, "{} {}", a.len(), b.len());
    let mut cached = Vec::new();
    for l in [&off, &on] {
        let (cold, c0) = run(l, &a);
        assert_eq!(c0, 0);
        run(l, &b);
        let (again, c1) = run(l, &a);
        assert_eq!(again, cold, "a reply from restored blocks differs");
        cached.push(c1);
    }
    // Without the tier most of the prompt was recomputed; with it nearly all came back.
    assert!(cached[1] >= a.len() - 16, "{cached:?} of {}", a.len());
    assert!(cached[0] < cached[1] / 2, "{cached:?}");
    off.engine.shutdown();
    on.engine.shutdown();
}
