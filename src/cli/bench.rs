//! `kiln bench`: prefill, single-stream decode and batched decode speed, in the spirit of
//! llama-bench. Each figure is the median of `--repeat` runs.

use crate::cli::generate::load_config;
use anyhow::Context;
use kiln::engine::runner::Runner;
use kiln::engine::token_choice::Rng;
use kiln::engine::{BatchLimits, LogitsWanted, Model, SeqInput};
use std::path::{Path, PathBuf};
use std::time::Instant;

#[derive(clap::Args)]
pub struct Args {
    /// GGUF model file (default: the config's model.path).
    #[arg(long)]
    model: Option<PathBuf>,
    /// Prompt tokens of the prefill test.
    #[arg(short = 'p', long = "prompt", default_value_t = 512)]
    n_prompt: usize,
    /// Generated tokens of the decode tests.
    #[arg(short = 'n', long = "gen", default_value_t = 128)]
    n_gen: usize,
    /// Context depth of the prefill and decode tests, as llama-bench's `-d`: each run starts
    /// after this many tokens already in the cache (prefilled once, untimed, and shared by
    /// every run). A multiple of the KV block size (16).
    #[arg(short = 'd', long = "depth", default_value_t = 0)]
    depth: usize,
    /// Sequence counts of the batched decode test (each with a 128-token prompt).
    #[arg(long, value_delimiter = ',', default_value = "1,4,16,32")]
    batch: Vec<usize>,
    /// Runs per figure (the median is reported).
    #[arg(long, default_value_t = 5)]
    repeat: usize,
    /// Worker threads (default: the config's engine.threads; 0 = the usable physical cores).
    #[arg(long)]
    threads: Option<usize>,
    /// How the KV cache stores K and V: "f16" or "q8_0" (default: the config's
    /// engine.kv_type).
    #[arg(long)]
    kv_type: Option<String>,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
    /// Serve through the scheduler instead: closed-loop chat users at each of these
    /// concurrencies (e.g. 1,4,16,32), then the long-prompt interference run.
    #[arg(long, value_delimiter = ',')]
    concurrency: Option<Vec<usize>>,
    /// With --concurrency: measured requests per user (after one warm-up request).
    #[arg(long, default_value_t = 3)]
    requests_per_user: usize,
    /// With --concurrency: constrain every request's output to this JSON Schema (a file), and
    /// report the grammar mask time per token.
    #[arg(long)]
    json_schema: Option<std::path::PathBuf>,
    /// Measure this machine's ceilings instead: memory read bandwidth and int8 dot-product
    /// throughput with --threads threads (default 2).
    #[arg(long)]
    ceilings: bool,
    /// Speculative decoding against plain decoding instead: a copying workload and free chat,
    /// one stream, then --users concurrent streams (benches/speculative/prompts.json).
    #[arg(long)]
    speculative: bool,
    /// With --speculative: concurrent streams of the load run (0 skips it).
    #[arg(long, default_value_t = 16)]
    users: usize,
    /// With --speculative: guess with this draft model (same vocabulary) instead of n-gram
    /// lookup (speculative.method = "draft").
    #[arg(long)]
    draft_model: Option<std::path::PathBuf>,
    /// With --speculative: most tokens guessed per step (speculative.max_draft).
    #[arg(long)]
    draft_max: Option<usize>,
    /// With --concurrency: record into the Prometheus metrics and the /stats window as
    /// `kiln serve` does (run with and without it to measure what recording costs).
    #[arg(long)]
    metrics: bool,
}

/// Prompt length of each sequence in the batched decode test.
const BATCH_PROMPT: usize = 128;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Deterministic ordinary token ids.
fn tokens(rng: &mut Rng, n: usize, n_vocab: usize) -> Vec<u32> {
    (0..n)
        .map(|_| 100 + rng.next_u32() % (n_vocab as u32 - 100))
        .collect()
}

pub fn run(args: Args, config: Option<&Path>) -> anyhow::Result<()> {
    if args.ceilings {
        return crate::cli::bench_ceilings::run(args.threads.unwrap_or(2), args.json);
    }
    let mut cfg = load_config(config)?;
    cfg.kv_type = crate::cli::generate::kv_type(&cfg, args.kv_type.as_deref())?;
    if args.speculative {
        if let Some(t) = args.threads {
            cfg.threads = t;
        }
        if let Some(d) = &args.draft_model {
            cfg.speculative.method = kiln::config::SpeculativeMethod::Draft;
            cfg.speculative.draft_model = Some(d.clone());
        }
        if let Some(k) = args.draft_max {
            cfg.speculative.max_draft = k.min(kiln::config::MAX_DRAFT);
        }
        return crate::cli::bench_spec::run(crate::cli::bench_spec::SpecBench {
            cfg,
            model: args.model.as_deref(),
            gen_tokens: args.n_gen,
            repeat: args.repeat,
            users: args.users,
            json: args.json,
        });
    }
    if let Some(concurrency) = args.concurrency.clone() {
        if let Some(t) = args.threads {
            cfg.threads = t;
        }
        return crate::cli::bench_serve::run(crate::cli::bench_serve::ServeBench {
            cfg,
            model: args.model.as_deref(),
            concurrency,
            requests_per_user: args.requests_per_user,
            gen_tokens: args.n_gen,
            json: args.json,
            json_schema: args.json_schema.as_deref(),
            metrics: args.metrics,
        });
    }
    let model_path = args.model.clone().unwrap_or(cfg.model_path.clone());
    let model = Model::load(&model_path, args.threads.unwrap_or(cfg.threads))
        .with_context(|| format!("loading {}", model_path.display()))?;
    let n_vocab = model.desc().n_vocab;
    let max_batch = args.batch.iter().copied().max().unwrap_or(1).max(1);
    let repeat = args.repeat.max(1);
    let limits = BatchLimits {
        max_tokens: args.n_prompt.max(BATCH_PROMPT).max(max_batch),
        max_seqs: max_batch,
        max_logit_rows: max_batch,
    };
    let block = kiln::engine::kv_cache::DEFAULT_BLOCK_SIZE;
    anyhow::ensure!(
        args.depth.is_multiple_of(block),
        "--depth {} is not a multiple of the KV block size {block}",
        args.depth
    );
    let positions = args.depth
        + (args.n_prompt + 16)
            .max(args.n_gen + 16)
            .max(max_batch * (BATCH_PROMPT + args.n_gen + 16));
    let mut runner = Runner::with_kv_type(&model, limits, positions, cfg.kv_type)?;
    let mut rng = Rng::new(1);
    // The shared context of `--depth`: its blocks are read-only to the runs, which fork it.
    let mut context = runner.new_seq();
    if args.depth > 0 {
        let toks = tokens(&mut rng, args.depth, n_vocab);
        let start = Instant::now();
        runner.feed(
            &mut context,
            0,
            &toks,
            limits.max_tokens,
            LogitsWanted::None,
            |_, _| {},
        )?;
        if !args.json {
            eprintln!(
                "depth {}: prefilled in {:.1} s",
                args.depth,
                start.elapsed().as_secs_f64()
            );
        }
    }
    let depth = args.depth;

    // Prefill: one call of n_prompt tokens.
    let mut pp = Vec::new();
    for _ in 0..repeat {
        let prompt = tokens(&mut rng, args.n_prompt, n_vocab);
        let mut t = context.fork();
        let start = Instant::now();
        runner.feed(
            &mut t,
            depth,
            &prompt,
            args.n_prompt,
            LogitsWanted::Last,
            |_, _| {},
        )?;
        pp.push(args.n_prompt as f64 / start.elapsed().as_secs_f64());
    }
    // Single-stream decode: n_gen one-token calls from an empty context.
    let mut tg = Vec::new();
    for _ in 0..repeat {
        let toks = tokens(&mut rng, args.n_gen, n_vocab);
        let mut t = context.fork();
        t.reserve(depth + args.n_gen)?;
        let start = Instant::now();
        for (i, tok) in toks.iter().enumerate() {
            let seq = [SeqInput {
                tokens: std::slice::from_ref(tok),
                start_pos: depth + i,
                table: &t,
                logits: LogitsWanted::Last,
            }];
            runner.forward(&seq)?;
        }
        tg.push(args.n_gen as f64 / start.elapsed().as_secs_f64());
    }
    // Batched decode: B sequences with 128-token prompts decode n_gen steps together.
    let mut batched = Vec::new();
    for &b in &args.batch {
        let mut runs = Vec::new();
        for _ in 0..repeat {
            let mut tables = Vec::new();
            for _ in 0..b.max(1) {
                let mut t = runner.new_seq();
                let prompt = tokens(&mut rng, BATCH_PROMPT, n_vocab);
                runner.feed(
                    &mut t,
                    0,
                    &prompt,
                    BATCH_PROMPT,
                    LogitsWanted::None,
                    |_, _| {},
                )?;
                t.reserve(BATCH_PROMPT + args.n_gen)?;
                tables.push(t);
            }
            let toks = tokens(&mut rng, args.n_gen * tables.len(), n_vocab);
            let start = Instant::now();
            for step in 0..args.n_gen {
                let seqs: Vec<SeqInput<'_>> = tables
                    .iter()
                    .enumerate()
                    .map(|(i, t)| SeqInput {
                        tokens: std::slice::from_ref(&toks[step * tables.len() + i]),
                        start_pos: BATCH_PROMPT + step,
                        table: t,
                        logits: LogitsWanted::Last,
                    })
                    .collect();
                runner.forward(&seqs)?;
            }
            runs.push((tables.len() * args.n_gen) as f64 / start.elapsed().as_secs_f64());
        }
        batched.push((b, median(runs)));
    }

    let isa = kiln::kernels::isa().to_string();
    let threads = model.team().threads();
    let (pp, tg) = (median(pp), median(tg));
    let n_used = model.desc().moe.map_or(0, |m| m.n_expert_used);
    let footprint = model.weights().decode_footprint(n_used);
    if args.json {
        let obj = serde_json::json!({
            "model": model_path.display().to_string(),
            "isa": isa,
            "threads": threads,
            "depth": depth,
            "kv_type": cfg.kv_type.name(),
            "weight_bytes_per_token": footprint.0,
            "macs_per_token": footprint.1,
            "prefill_tok_s": pp,
            "decode_tok_s": tg,
            "batched": batched
                .iter()
                .map(|&(b, x)| serde_json::json!({"batch": b, "tok_s": x}))
                .collect::<Vec<_>>(),
        });
        println!("{obj}");
    } else {
        println!(
            "model: {}  isa: {isa}  threads: {threads}  depth: {depth}  kv: {}  (median of {repeat})",
            model_path.display(),
            cfg.kv_type
        );
        println!("| test | tok/s |");
        println!("|---|---:|");
        let at = if depth > 0 {
            format!(" @ d{depth}")
        } else {
            String::new()
        };
        println!("| pp{}{at} | {pp:.1} |", args.n_prompt);
        println!("| tg{}{at} | {tg:.1} |", args.n_gen);
        for (b, x) in batched {
            println!("| tg{} x {b} seqs (aggregate) | {x:.1} |", args.n_gen);
        }
    }
    Ok(())
}
