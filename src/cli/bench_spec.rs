//! `kiln bench --speculative`: speculative decoding against plain decoding in one engine, on
//! the prompts of `benches/speculative/prompts.json`: a "repeat" workload whose replies copy
//! their input (quote a document, rename a function, reformat JSON) and a free "chat"
//! workload, one stream at a time, then `--users` concurrent chat streams. Every request is
//! greedy, so both modes generate the very same tokens; "off" runs the same requests with
//! `speculative.n_max = 0`. Runs alternate (off, on, on, off, ...) and each figure is the
//! median of `--repeat` runs. Reported: decode tokens/s (from each reply's first token to its
//! last), the ratio on/off, and the acceptance rate (guesses kept / guesses verified).

use anyhow::{bail, Context};
use kiln::chat_template::ChatTemplate;
use kiln::config::{Config, SpeculativeMethod};
use kiln::scheduler::setup::{start, Loaded};
use kiln::scheduler::speculative::SpecRequest;
use kiln::scheduler::{Event, GenerationRequest, NoopObserver, RequestStream};
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

/// The prompts (shared with scripts/bench_speculative.py, which runs them against
/// llama-server too).
const PROMPTS: &str = include_str!("../../benches/speculative/prompts.json");

/// What the benchmark needs from the command line.
pub struct SpecBench<'a> {
    pub cfg: Config,
    pub model: Option<&'a Path>,
    pub gen_tokens: usize,
    pub repeat: usize,
    /// Concurrent chat streams of the load run (0 skips it).
    pub users: usize,
    pub json: bool,
}

/// One mode's run over a workload.
#[derive(Debug, Clone, Copy, Default)]
struct Run {
    tokens: usize,
    /// Single stream: the time between each reply's first and last token, summed. Several
    /// users: the wall time of the whole run.
    secs: f64,
    /// Single stream: the time to each reply's first token, summed (a draft model's prefill
    /// of the prompt counts here).
    ttft: f64,
    /// Replies.
    replies: usize,
    drafted: usize,
    accepted: usize,
}

impl Run {
    fn add(&mut self, o: Run) {
        self.tokens += o.tokens;
        self.secs += o.secs;
        self.ttft += o.ttft;
        self.replies += o.replies;
        self.drafted += o.drafted;
        self.accepted += o.accepted;
    }

    fn rate(&self) -> f64 {
        self.tokens as f64 / self.secs.max(1e-9)
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Reads a stream to its end: decode tokens (after the first) and their time, guesses.
fn read(mut s: RequestStream) -> anyhow::Result<Run> {
    loop {
        match s.blocking_recv() {
            Some(Event::Done { usage, timings }) => {
                let first = timings.ttft.unwrap_or(timings.duration);
                return Ok(Run {
                    tokens: usage.completion_tokens.saturating_sub(1),
                    secs: timings.duration.saturating_sub(first).as_secs_f64(),
                    ttft: first.as_secs_f64(),
                    replies: 1,
                    drafted: usage.draft_tokens,
                    accepted: usage.accepted_tokens,
                });
            }
            Some(Event::Error { message }) => bail!("engine error: {message}"),
            Some(_) => {}
            None => bail!("stream ended early"),
        }
    }
}

fn request(prompt: &[u32], gen: usize, spec: bool) -> GenerationRequest {
    let mut r = GenerationRequest::new(prompt.to_vec(), gen);
    r.params.temperature = 0.0;
    if !spec {
        r.speculative = SpecRequest {
            n_max: Some(0),
            n_min: None,
        };
    }
    r
}

/// Each prompt in turn, one stream.
fn one_stream(l: &Loaded, prompts: &[Vec<u32>], gen: usize, spec: bool) -> anyhow::Result<Run> {
    let mut total = Run::default();
    for p in prompts {
        total.add(read(l.engine.submit(request(p, gen, spec))?)?);
    }
    Ok(total)
}

/// `users` streams at once, each prompt of `prompts` in turn (cycling); aggregate rate.
fn concurrent(
    l: &Loaded,
    prompts: &[Vec<u32>],
    users: usize,
    gen: usize,
    spec: bool,
) -> anyhow::Result<Run> {
    let t0 = Instant::now();
    let streams = (0..users)
        .map(|u| {
            l.engine
                .submit(request(&prompts[u % prompts.len()], gen, spec))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let mut total = Run::default();
    for s in streams {
        let r = read(s)?;
        total.tokens += r.tokens + 1;
        total.ttft += r.ttft;
        total.replies += 1;
        total.drafted += r.drafted;
        total.accepted += r.accepted;
    }
    total.secs = t0.elapsed().as_secs_f64();
    Ok(total)
}

/// Medians of alternating off/on runs of `f`.
fn compare(
    repeat: usize,
    mut f: impl FnMut(bool) -> anyhow::Result<Run>,
) -> anyhow::Result<serde_json::Value> {
    let (mut off, mut on, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    let mut ttft = [Vec::new(), Vec::new()];
    let mut guesses = Run::default();
    for r in 0..repeat {
        let order = if r % 2 == 0 {
            [false, true]
        } else {
            [true, false]
        };
        let mut pair = [0.0; 2];
        for spec in order {
            let run = f(spec)?;
            pair[usize::from(spec)] = run.rate();
            ttft[usize::from(spec)].push(run.ttft / run.replies.max(1) as f64);
            if spec {
                guesses.add(run);
            }
        }
        off.push(pair[0]);
        on.push(pair[1]);
        ratios.push(pair[1] / pair[0].max(1e-9));
    }
    let [ttft_off, ttft_on] = ttft.map(median);
    let acceptance = guesses.accepted as f64 / (guesses.drafted.max(1)) as f64;
    Ok(serde_json::json!({
        "off_tokens_per_s": median(off),
        "on_tokens_per_s": median(on),
        "ratio": median(ratios),
        "acceptance": acceptance,
        "off_ttft_ms": ttft_off * 1e3,
        "on_ttft_ms": ttft_on * 1e3,
        "accepted_per_token": guesses.accepted as f64 / guesses.tokens.max(1) as f64,
    }))
}

pub fn run(b: SpecBench<'_>) -> anyhow::Result<()> {
    let mut cfg = b.cfg;
    if cfg.speculative.method == SpeculativeMethod::Off {
        cfg.speculative.method = SpeculativeMethod::Ngram;
    }
    let l = start(&cfg, b.model, Arc::new(NoopObserver)).context("starting the engine")?;
    let (tpl, _) = ChatTemplate::for_model(l.chat_template.as_deref(), None)
        .context("loading the chat template")?;
    let set: serde_json::Value = serde_json::from_str(PROMPTS).context("reading the prompts")?;
    let encode = |key: &str| -> anyhow::Result<Vec<Vec<u32>>> {
        let list = set[key].as_array().context("a list of prompts")?;
        list.iter()
            .map(|u| {
                let ctx = serde_json::json!({
                    "messages": [{"role": "system", "content": set["system"]},
                                 {"role": "user", "content": u}],
                    "add_generation_prompt": true,
                });
                let text = tpl.render(&ctx, None).context("rendering a prompt")?;
                Ok(l.tokenizer.encode(&text, l.tokenizer.add_bos(), true))
            })
            .collect()
    };
    let (repeat, chat) = (encode("repeat")?, encode("chat")?);
    let gen = b.gen_tokens;
    let n = b.repeat.max(1);
    // Warm-up: page the weights in, grow the buffers.
    one_stream(&l, &chat[..1], 16, true)?;
    let t0 = Instant::now();
    let mut report = serde_json::json!({
        "threads": l.engine.info().threads_per_worker,
        "gen_tokens": gen,
        "repeat": n,
        "method": format!("{:?}", cfg.speculative.method).to_lowercase(),
        "draft_model": cfg.speculative.draft_model.as_ref().map(|p| p.display().to_string()),
        "max_draft": cfg.speculative.max_draft,
        "ngram": [cfg.speculative.ngram_min, cfg.speculative.ngram_max],
        "max_seqs": cfg.speculative.max_seqs,
    });
    report["repeat_workload"] = compare(n, |spec| one_stream(&l, &repeat, gen, spec))?;
    report["chat_workload"] = compare(n, |spec| one_stream(&l, &chat, gen, spec))?;
    if b.users > 0 {
        let mixed: Vec<Vec<u32>> = chat.iter().chain(&repeat).cloned().collect();
        report["users"] = serde_json::json!(b.users);
        report["concurrent_workload"] =
            compare(n, |spec| concurrent(&l, &mixed, b.users, gen, spec))?;
    }
    report["seconds"] = serde_json::json!(t0.elapsed().as_secs_f64());
    l.engine.shutdown();
    if b.json {
        println!("{report}");
        return Ok(());
    }
    let method = match &cfg.speculative.draft_model {
        Some(d) if cfg.speculative.method == SpeculativeMethod::Draft => {
            format!("draft model {}", d.display())
        }
        _ => format!(
            "ngram {}..{}",
            cfg.speculative.ngram_min, cfg.speculative.ngram_max
        ),
    };
    println!(
        "speculative decoding ({method}, max_draft {}), {} threads, greedy, {gen} tokens max, median of {n}",
        cfg.speculative.max_draft,
        l.engine.info().threads_per_worker
    );
    let mut rows = vec![
        ("repeat, 1 stream", "repeat_workload"),
        ("chat, 1 stream", "chat_workload"),
    ];
    let users = format!("chat+repeat, {} users", b.users);
    if b.users > 0 {
        rows.push((users.as_str(), "concurrent_workload"));
    }
    println!(
        "{:<28} {:>10} {:>10} {:>7} {:>11} {:>14}",
        "workload", "off tok/s", "on tok/s", "ratio", "acceptance", "ttft off/on ms"
    );
    for (name, key) in rows {
        let w = &report[key];
        println!(
            "{name:<28} {:>10.1} {:>10.1} {:>6.2}x {:>10.0}% {:>6.1} /{:>6.1}",
            w["off_tokens_per_s"].as_f64().unwrap_or(0.0),
            w["on_tokens_per_s"].as_f64().unwrap_or(0.0),
            w["ratio"].as_f64().unwrap_or(0.0),
            w["acceptance"].as_f64().unwrap_or(0.0) * 100.0,
            w["off_ttft_ms"].as_f64().unwrap_or(0.0),
            w["on_ttft_ms"].as_f64().unwrap_or(0.0),
        );
    }
    Ok(())
}
