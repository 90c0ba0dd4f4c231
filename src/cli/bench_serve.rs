//! `kiln bench --concurrency 1,4,16,32`: the scheduler served in process. Closed-loop users
//! send chat prompts of 60-160 tokens sharing a ~50-token system prompt and read 128 generated
//! tokens each; reported: aggregate generated tokens/s, time to first token (TTFT) and
//! inter-token latency (ITL) percentiles. Then one interference run: 15 streams decoding while
//! a 2,000-token prompt arrives, with the worst gap the streams saw.
//!
//! With `--json-schema FILE` every request's output is constrained to that schema (the
//! grammar masks run beside each forward pass) and the mask time per token is reported.

use crate::cli::bench_observer::TimedObserver;
use anyhow::{bail, Context};
use kiln::chat_template::ChatTemplate;
use kiln::config::Config;
use kiln::engine::token_choice::Rng;
use kiln::metrics::{window::StatsWindow, Metrics};
use kiln::scheduler::observer::Fanout;
use kiln::scheduler::setup::{start, Loaded};
use kiln::scheduler::{
    EngineHandle, Event, GenerationRequest, NoopObserver, Observer, SamplingParams, StepStats,
};
use kiln::structured::{Constraint, Grammars};
use kiln::tokenizer::Tokenizer;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

/// What the serving benchmark needs from the command line.
pub struct ServeBench<'a> {
    pub cfg: Config,
    pub model: Option<&'a Path>,
    pub concurrency: Vec<usize>,
    /// Requests each user sends (after one warm-up request).
    pub requests_per_user: usize,
    pub gen_tokens: usize,
    pub json: bool,
    /// Constrain every request to this JSON Schema file.
    pub json_schema: Option<&'a Path>,
    /// Record into the server's observers (Prometheus metrics, the /stats window).
    pub metrics: bool,
}

const SYSTEM: &str = "You are Kiln, a friendly assistant for a pottery studio. You answer \
questions about clay, glazes and firing schedules clearly and briefly, and you always mention \
safety when kilns are involved.";

const WORDS: &[&str] = &[
    "glaze",
    "stoneware",
    "porcelain",
    "firing",
    "cone",
    "temperature",
    "bisque",
    "wheel",
    "studio",
    "crack",
    "bubble",
    "color",
    "reduction",
    "oxidation",
    "kiln",
    "shelf",
    "pot",
    "bowl",
    "mug",
    "handle",
    "trim",
    "dry",
    "slow",
    "fast",
    "why",
    "how",
    "does",
    "my",
    "the",
    "a",
    "after",
    "before",
    "should",
    "I",
    "use",
    "could",
    "which",
    "best",
];

/// A chat prompt of roughly `target` tokens: the shared system prompt plus a user question.
fn prompt(tok: &Tokenizer, tpl: &ChatTemplate, rng: &mut Rng, target: usize) -> Vec<u32> {
    let mut user = String::from("Question:");
    loop {
        let ctx = serde_json::json!({
            "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}],
            "add_generation_prompt": true,
        });
        let text = tpl.render(&ctx, None).unwrap_or_default();
        let ids = tok.encode(&text, tok.add_bos(), true);
        if ids.len() >= target {
            return ids;
        }
        user.push(' ');
        user.push_str(WORDS[rng.next_u32() as usize % WORDS.len()]);
    }
}

/// One request's client-side timings.
struct Timed {
    ttft: Duration,
    gaps: Vec<Duration>,
    tokens: usize,
    /// When each token arrived.
    times: Vec<Instant>,
}

/// Sends one request and reads it to the end, timing what the client sees.
fn run_one(engine: &EngineHandle, req: GenerationRequest) -> anyhow::Result<Timed> {
    let t0 = Instant::now();
    let mut s = engine.submit(req).map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut last: Option<Instant> = None;
    let mut out = Timed {
        ttft: Duration::ZERO,
        gaps: Vec::new(),
        tokens: 0,
        times: Vec::new(),
    };
    loop {
        match s.blocking_recv() {
            Some(Event::Delta { ids, .. }) if !ids.is_empty() => {
                let now = Instant::now();
                match last {
                    None => out.ttft = now - t0,
                    Some(p) => out.gaps.push(now - p),
                }
                last = Some(now);
                out.tokens += ids.len();
                out.times.push(now);
            }
            Some(Event::Done { .. }) => return Ok(out),
            Some(Event::Error { message }) => bail!("engine error: {message}"),
            Some(_) => {}
            None => bail!("stream ended early"),
        }
    }
}

fn request(
    prompt: Vec<u32>,
    gen: usize,
    seed: u64,
    constraint: Option<&Arc<Constraint>>,
) -> GenerationRequest {
    let mut r = GenerationRequest::new(prompt, gen);
    r.constraint = constraint.cloned();
    r.ignore_eos = true;
    r.params = SamplingParams {
        temperature: 0.7,
        seed: Some(seed),
        ..SamplingParams::default()
    };
    r
}

fn pct(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn pcts(mut v: Vec<f64>) -> serde_json::Value {
    v.sort_by(f64::total_cmp);
    serde_json::json!({"p50": pct(&v, 50.0), "p95": pct(&v, 95.0), "p99": pct(&v, 99.0)})
}

/// Closed-loop users: each sends a warm-up request of random length, then `per_user` measured
/// ones back to back. Throughput is measured from the first measured request to the last.
fn closed_loop(
    l: &Loaded,
    tpl: &ChatTemplate,
    users: usize,
    per_user: usize,
    gen: usize,
    constraint: Option<&Arc<Constraint>>,
    masks: &MaskCounter,
) -> anyhow::Result<serde_json::Value> {
    masks.reset();
    let barrier = Arc::new(Barrier::new(users));
    let results = std::thread::scope(|sc| {
        let handles: Vec<_> = (0..users)
            .map(|u| {
                let engine = l.engine.clone();
                let tok = Arc::clone(&l.tokenizer);
                let barrier = Arc::clone(&barrier);
                sc.spawn(move || -> anyhow::Result<(Vec<Timed>, Instant, Instant)> {
                    let mut rng = Rng::new(1000 + u as u64);
                    let next = |rng: &mut Rng| {
                        let target = 60 + rng.next_u32() as usize % 101;
                        prompt(&tok, tpl, rng, target)
                    };
                    // Warm-up, not measured: every user sends one request (its system
                    // prompt lands in the prefix cache). Its random length spreads the users
                    // out, as real users are, instead of all arriving in one burst.
                    barrier.wait();
                    let warm = 8 + rng.next_u32() as usize % gen.max(1);
                    run_one(&engine, request(next(&mut rng), warm, u as u64, constraint))?;
                    let t0 = Instant::now();
                    let mut timed = Vec::new();
                    for i in 0..per_user {
                        let p = next(&mut rng);
                        let seed = (u * 1000 + i) as u64;
                        timed.push(run_one(&engine, request(p, gen, seed, constraint))?);
                    }
                    Ok((timed, t0, Instant::now()))
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("user thread"))
            .collect::<anyhow::Result<Vec<_>>>()
    })?;
    // Throughput over the steady window: from the moment every user is measuring to the
    // moment the first one is done (all users active throughout).
    let from = results.iter().map(|r| r.1).max().context("no users")?;
    let to = results.iter().map(|r| r.2).min().context("no users")?;
    let all: Vec<&Timed> = results.iter().flat_map(|r| r.0.iter()).collect();
    let in_window = all
        .iter()
        .flat_map(|t| t.times.iter())
        .filter(|&&at| at >= from && at <= to)
        .count();
    let window = to.saturating_duration_since(from).as_secs_f64();
    let ms = |d: &Duration| d.as_secs_f64() * 1e3;
    Ok(serde_json::json!({
        "users": users,
        "gen_tok_s": in_window as f64 / window.max(1e-9),
        "ttft_ms": pcts(all.iter().map(|t| ms(&t.ttft)).collect()),
        "itl_ms": pcts(all.iter().flat_map(|t| t.gaps.iter().map(ms)).collect()),
        "requests": all.len(),
        "tokens_per_request": all.iter().map(|t| t.tokens).sum::<usize>() as f64 / all.len().max(1) as f64,
        "masks": masks.snapshot(),
    }))
}

/// Sums the steps' grammar mask work (the bench's observer).
#[derive(Default)]
struct MaskCounter {
    masks: AtomicU64,
    compute_ns: AtomicU64,
    wait_ns: AtomicU64,
    steps: AtomicU64,
}

impl MaskCounter {
    fn reset(&self) {
        for a in [&self.masks, &self.compute_ns, &self.wait_ns, &self.steps] {
            a.store(0, Ordering::Relaxed);
        }
    }

    /// Masks computed, mean mask time per token (one mask per constrained token), and mean
    /// wait per step for masks that outlasted the forward pass.
    fn snapshot(&self) -> serde_json::Value {
        let masks = self.masks.load(Ordering::Relaxed);
        let steps = self.steps.load(Ordering::Relaxed).max(1);
        let us = |ns: u64, per: u64| ns as f64 / 1e3 / per.max(1) as f64;
        serde_json::json!({
            "count": masks,
            "us_per_token": us(self.compute_ns.load(Ordering::Relaxed), masks),
            "wait_us_per_step": us(self.wait_ns.load(Ordering::Relaxed), steps),
        })
    }
}

impl Observer for MaskCounter {
    fn on_step(&self, s: &StepStats) {
        self.steps.fetch_add(1, Ordering::Relaxed);
        self.masks.fetch_add(s.masks as u64, Ordering::Relaxed);
        self.compute_ns
            .fetch_add(s.mask_time.as_nanos() as u64, Ordering::Relaxed);
        self.wait_ns
            .fetch_add(s.mask_wait.as_nanos() as u64, Ordering::Relaxed);
    }
}

/// 15 streams decode; once they are going, a 2,000-token prompt arrives. Returns the worst
/// gap any stream saw between its tokens while the long prompt was read in.
fn interference(l: &Loaded, tpl: &ChatTemplate) -> anyhow::Result<serde_json::Value> {
    const STREAMS: usize = 15;
    const LONG: usize = 2000;
    let mut rng = Rng::new(7);
    let long_prompt = prompt(&l.tokenizer, tpl, &mut rng, LONG);
    let prompts: Vec<Vec<u32>> = (0..STREAMS)
        .map(|_| prompt(&l.tokenizer, tpl, &mut rng, 80))
        .collect();
    let started = Arc::new(Barrier::new(STREAMS + 1));
    let (window_tx, window_rx) = std::sync::mpsc::channel::<(Instant, Instant)>();
    let gaps = std::thread::scope(|sc| -> anyhow::Result<Vec<Vec<(Instant, Duration)>>> {
        let handles: Vec<_> = prompts
            .into_iter()
            .enumerate()
            .map(|(i, p)| {
                let engine = l.engine.clone();
                let started = Arc::clone(&started);
                sc.spawn(move || -> anyhow::Result<Vec<(Instant, Duration)>> {
                    let mut s = engine
                        .submit(request(p, 400, i as u64, None))
                        .map_err(|e| anyhow::anyhow!("{e}"))?;
                    let mut last = None;
                    let mut gaps = Vec::new();
                    let mut n = 0;
                    loop {
                        match s.blocking_recv() {
                            Some(Event::Delta { ids, .. }) if !ids.is_empty() => {
                                let now = Instant::now();
                                if let Some(p) = last {
                                    gaps.push((now, now - p));
                                }
                                last = Some(now);
                                n += 1;
                                if n == 20 {
                                    started.wait();
                                }
                            }
                            Some(Event::Done { .. }) => return Ok(gaps),
                            Some(Event::Error { message }) => bail!("engine error: {message}"),
                            Some(_) => {}
                            None => bail!("stream ended early"),
                        }
                    }
                })
            })
            .collect();
        started.wait();
        let t0 = Instant::now();
        let long = run_one(&l.engine, request(long_prompt.clone(), 1, 99, None))?;
        window_tx.send((t0, t0 + long.ttft)).ok();
        handles
            .into_iter()
            .map(|h| h.join().expect("stream thread"))
            .collect()
    })?;
    let (from, to) = window_rx.recv().context("interference window")?;
    let max_gap = gaps
        .iter()
        .flatten()
        .filter(|(at, _)| *at >= from && *at <= to + Duration::from_millis(200))
        .map(|(_, g)| g.as_secs_f64() * 1e3)
        .fold(0.0, f64::max);
    Ok(serde_json::json!({
        "prompt_tokens": long_prompt.len(),
        "running": STREAMS,
        "max_gap_ms": max_gap,
        "prompt_ttft_ms": (to - from).as_secs_f64() * 1e3,
    }))
}

pub fn run(b: ServeBench<'_>) -> anyhow::Result<()> {
    let slow: Arc<dyn kiln::scheduler::Observer> =
        if std::env::var_os("KILN_BENCH_SLOW_STEPS").is_some() {
            Arc::new(SlowSteps)
        } else if b.metrics {
            Arc::new(Fanout(vec![
                Arc::new(Metrics::new("bench").context("creating the metrics")?),
                Arc::new(StatsWindow::new()),
            ]))
        } else {
            Arc::new(NoopObserver)
        };
    let timed = Arc::new(TimedObserver::new(slow));
    let masks = Arc::new(MaskCounter::default());
    let observer: Arc<dyn Observer> = Arc::new(Fanout(vec![timed.clone(), masks.clone()]));
    let l = start(&b.cfg, b.model, observer).context("starting the engine")?;
    let (tpl, _) = ChatTemplate::for_model(l.chat_template.as_deref(), None)
        .context("loading the chat template")?;
    let constraint = match b.json_schema {
        None => None,
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading {}", path.display()))?;
            let schema: serde_json::Value = serde_json::from_str(&text)
                .with_context(|| format!("{} is not JSON", path.display()))?;
            let g = Grammars::new(Arc::clone(&l.tokenizer))?;
            let label = path.display().to_string();
            Some(Arc::new(Constraint::json_schema(
                &g,
                &schema,
                "--json-schema",
                &label,
            )?))
        }
    };
    let mut rows = Vec::new();
    for &users in &b.concurrency {
        let row = closed_loop(
            &l,
            &tpl,
            users.max(1),
            b.requests_per_user.max(1),
            b.gen_tokens,
            constraint.as_ref(),
            &masks,
        )?;
        if !b.json {
            eprintln!("bench: {row}");
        }
        rows.push(row);
    }
    let interference = interference(&l, &tpl)?;
    let info = l.engine.info().clone();
    l.engine.shutdown();
    let obj = serde_json::json!({
        "model": l.model_stem,
        "isa": kiln::kernels::isa().to_string(),
        "threads": info.threads_per_worker,
        "workers": info.workers,
        "max_num_seqs": info.max_num_seqs,
        "max_batch_tokens": info.max_batch_tokens,
        "gen_tokens": b.gen_tokens,
        "json_schema": b.json_schema.map(|p| p.display().to_string()),
        "concurrency": rows,
        "interference": interference,
        "metrics": b.metrics,
        "observer": timed.report(),
    });
    if b.json {
        println!("{obj}");
        return Ok(());
    }
    println!(
        "model: {}  isa: {}  threads: {}  max_num_seqs: {}  max_batch_tokens: {}",
        l.model_stem,
        kiln::kernels::isa(),
        info.threads_per_worker,
        info.max_num_seqs,
        info.max_batch_tokens
    );
    println!("| users | gen tok/s | TTFT p50 / p95 / p99 ms | ITL p50 / p95 / p99 ms | tokens/request | mask us/token | mask wait us/step |");
    println!("|---:|---:|---|---|---:|---:|---:|");
    for r in &obj["concurrency"].as_array().cloned().unwrap_or_default() {
        let p = |k: &str| {
            format!(
                "{:.0} / {:.0} / {:.0}",
                r[k]["p50"].as_f64().unwrap_or(0.0),
                r[k]["p95"].as_f64().unwrap_or(0.0),
                r[k]["p99"].as_f64().unwrap_or(0.0)
            )
        };
        println!(
            "| {} | {:.1} | {} | {} | {:.0} | {:.0} | {:.0} |",
            r["users"],
            r["gen_tok_s"].as_f64().unwrap_or(0.0),
            p("ttft_ms"),
            p("itl_ms"),
            r["tokens_per_request"].as_f64().unwrap_or(0.0),
            r["masks"]["us_per_token"].as_f64().unwrap_or(0.0),
            r["masks"]["wait_us_per_step"].as_f64().unwrap_or(0.0),
        );
    }
    let i = &obj["interference"];
    println!(
        "interference: {} streams decoding, a {}-token prompt arrives: worst gap {:.0} ms (prompt's TTFT {:.0} ms)",
        i["running"],
        i["prompt_tokens"],
        i["max_gap_ms"].as_f64().unwrap_or(0.0),
        i["prompt_ttft_ms"].as_f64().unwrap_or(0.0)
    );
    Ok(())
}

/// Prints steps slower than 60 ms (KILN_BENCH_SLOW_STEPS=1), to see what makes a gap.
struct SlowSteps;

impl kiln::scheduler::Observer for SlowSteps {
    fn on_step(&self, s: &kiln::scheduler::StepStats) {
        if s.duration > Duration::from_millis(60) {
            eprintln!(
                "slow step: {:?} {} seqs {} tokens ({} prefill) {:.1} ms",
                s.phase,
                s.seqs,
                s.tokens,
                s.prefill_tokens,
                s.duration.as_secs_f64() * 1e3
            );
        }
    }
}
