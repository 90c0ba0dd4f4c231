//! `kiln generate`: run the model on one prompt and stream the continuation.

use anyhow::{bail, Context};
use kiln::chat_template::{ChatTemplate, TemplateSource};
use kiln::config::Config;
use kiln::engine::kv_cache::KvType;
use kiln::engine::runner::Runner;
use kiln::engine::{BatchLimits, LogitsWanted, Model, SeqInput};
use kiln::gguf::GgufFile;
use kiln::scheduler::sampling::{SampleScratch, Sampler, SamplingParams};
use kiln::tokenizer::Tokenizer;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

#[derive(clap::Args)]
pub struct Args {
    /// GGUF model file (default: the config's model.path).
    #[arg(long)]
    model: Option<PathBuf>,
    /// The prompt text (special tokens such as <|im_start|> are parsed).
    #[arg(
        long,
        conflicts_with = "prompt_ids",
        required_unless_present = "prompt_ids"
    )]
    prompt: Option<String>,
    /// The prompt as comma-separated token ids instead of text.
    #[arg(long, value_delimiter = ',')]
    prompt_ids: Option<Vec<u32>>,
    /// Render the prompt as one user turn with the chat template, ending where the assistant's
    /// reply starts.
    #[arg(long)]
    chat: bool,
    /// Chat template (Jinja) overriding the model's `tokenizer.chat_template` (default: the
    /// config's model.chat_template; without either, the model's own, else ChatML).
    #[arg(long, requires = "chat")]
    chat_template: Option<PathBuf>,
    /// Tokens to generate at most (stops earlier at an end-of-generation token).
    #[arg(long, default_value_t = 128)]
    max_tokens: usize,
    /// Sampling temperature; 0 is greedy.
    #[arg(long, default_value_t = 0.0)]
    temperature: f32,
    /// Seed of the sampler's generator.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Worker threads (default: the config's engine.threads; 0 = the usable physical cores).
    #[arg(long)]
    threads: Option<usize>,
    /// How the KV cache stores K and V: "f16" or "q8_0" (default: the config's
    /// engine.kv_type).
    #[arg(long)]
    kv_type: Option<String>,
    /// Print one JSON object at the end instead of streaming text.
    #[arg(long)]
    json: bool,
}

/// The configuration: `--config`, else config/default.toml when present, else defaults.
pub fn load_config(path: Option<&Path>) -> anyhow::Result<Config> {
    Ok(Config::load(kiln::config::config_file(path), &[])?)
}

/// The KV cache type of a `--kv-type` flag, else the configuration's `engine.kv_type`.
pub fn kv_type(cfg: &Config, flag: Option<&str>) -> anyhow::Result<KvType> {
    match flag {
        None => Ok(cfg.kv_type),
        Some(t) => KvType::parse(t).with_context(|| {
            let names: Vec<&str> = KvType::ALL.iter().map(|k| k.name()).collect();
            format!(
                "--kv-type {t:?}: not a KV cache type ({})",
                names.join(", ")
            )
        }),
    }
}

/// Prefill chunk size (tokens per forward call).
const CHUNK: usize = 512;

pub fn run(args: Args, config: Option<&Path>) -> anyhow::Result<()> {
    let cfg = load_config(config)?;
    let model_path = args.model.clone().unwrap_or(cfg.model_path.clone());
    let file = GgufFile::open(&model_path)
        .with_context(|| format!("opening model {}", model_path.display()))?;
    let tokenizer = Tokenizer::from_gguf(&file).context("loading the tokenizer")?;
    let chat_prompt = match (&args.prompt, args.chat) {
        (Some(text), true) => {
            let override_file = args
                .chat_template
                .as_deref()
                .or(cfg.chat_template.as_deref());
            Some(render_user_turn(&file, &tokenizer, override_file, text)?)
        }
        _ => None,
    };
    let model = Model::from_gguf(&file, args.threads.unwrap_or(cfg.threads))
        .context("loading the model")?;
    drop(file);

    let prompt_ids = match (&args.prompt_ids, &args.prompt) {
        (Some(ids), _) => ids.clone(),
        (None, Some(text)) => {
            let text = chat_prompt.as_deref().unwrap_or(text);
            tokenizer.encode(text, tokenizer.add_bos(), true)
        }
        (None, None) => bail!("give --prompt or --prompt-ids"),
    };
    if prompt_ids.is_empty() {
        bail!("the prompt is empty");
    }
    let n_ctx = model.desc().n_ctx_train;
    let total = prompt_ids.len() + args.max_tokens;
    if total > n_ctx {
        bail!(
            "prompt ({}) + max tokens ({}) exceed the model's context of {n_ctx}",
            prompt_ids.len(),
            args.max_tokens
        );
    }
    let limits = BatchLimits {
        max_tokens: CHUNK,
        max_seqs: 1,
        max_logit_rows: 1,
    };
    let kv_type = kv_type(&cfg, args.kv_type.as_deref())?;
    let mut runner = Runner::with_kv_type(&model, limits, total + 1, kv_type)?;
    let mut table = runner.new_seq();
    let params = SamplingParams {
        temperature: args.temperature,
        ..SamplingParams::default()
    };
    params.validate(model.desc().n_vocab)?;
    let mut sampler = Sampler::new(&params, args.seed, &prompt_ids);
    let mut scratch = SampleScratch::new();
    let mut output_ids = Vec::new();
    let mut logprobs = Vec::new();
    let mut decoder = tokenizer.stream_decoder_continuing();
    let mut stdout = std::io::stdout().lock();

    let t0 = Instant::now();
    let mut next = None;
    runner.feed(
        &mut table,
        0,
        &prompt_ids,
        CHUNK,
        LogitsWanted::Last,
        |_, row| {
            next = sampler.sample(row, &mut scratch).map(|s| {
                logprobs.push(s.logprob);
                s.id
            });
        },
    )?;
    let mut next = next.context("the logits row has no finite value: no token to sample")?;
    let prompt_secs = t0.elapsed().as_secs_f64();
    let t1 = Instant::now();
    table.reserve(total)?;
    loop {
        output_ids.push(next);
        if !args.json {
            write!(stdout, "{}", decoder.push(next))?;
            stdout.flush()?;
        }
        if tokenizer.is_eog(next) || output_ids.len() >= args.max_tokens {
            break;
        }
        let pos = prompt_ids.len() + output_ids.len() - 1;
        let seq = [SeqInput {
            tokens: std::slice::from_ref(&next),
            start_pos: pos,
            table: &table,
            logits: LogitsWanted::Last,
        }];
        let logits = runner.forward(&seq)?;
        let row = logits.last(0).context("no logits")?;
        let s = sampler
            .sample(row, &mut scratch)
            .context("the logits row has no finite value: no token to sample")?;
        next = s.id;
        logprobs.push(s.logprob);
    }
    let gen_secs = t1.elapsed().as_secs_f64();
    if args.json {
        let obj = serde_json::json!({
            "prompt_ids": prompt_ids,
            "output_ids": output_ids,
            "logprobs": logprobs,
            "text": tokenizer.decode(&output_ids),
        });
        writeln!(stdout, "{obj}")?;
    } else {
        writeln!(stdout, "{}", decoder.flush())?;
        // The first output token comes from the prefill; the rest are decode steps.
        let n_decode = output_ids.len().saturating_sub(1);
        eprintln!(
            "prompt: {} tokens, {:.1} tok/s; generation: {} tokens, {:.1} tok/s",
            prompt_ids.len(),
            prompt_ids.len() as f64 / prompt_secs.max(1e-9),
            output_ids.len(),
            n_decode as f64 / gen_secs.max(1e-9),
        );
    }
    Ok(())
}

/// One user turn rendered with the chosen chat template (override file, else the model's
/// `tokenizer.chat_template`, else ChatML), with the generation prompt appended.
fn render_user_turn(
    file: &GgufFile,
    tokenizer: &Tokenizer,
    override_file: Option<&Path>,
    text: &str,
) -> anyhow::Result<String> {
    let model_template = file.get_str("tokenizer.chat_template")?;
    let (template, source) = ChatTemplate::for_model(model_template, override_file)
        .context("loading the chat template")?;
    tracing::info!(?source, "chat template");
    if source == TemplateSource::ChatmlDefault
        && !kiln::server::app_state::has_chatml_markers(tokenizer)
    {
        bail!(
            "this model has no chat template (tokenizer.chat_template) and its vocabulary has no \
             ChatML markers: drop --chat, or give one with --chat-template"
        );
    }
    let piece = |id: Option<u32>| {
        id.map(|i| String::from_utf8_lossy(tokenizer.token_to_piece(i)).into_owned())
            .unwrap_or_default()
    };
    let context = serde_json::json!({
        "messages": [{"role": "user", "content": text}],
        "add_generation_prompt": true,
        "bos_token": piece(tokenizer.bos()),
        "eos_token": piece(tokenizer.eos()),
    });
    template
        .render(&context, None)
        .context("rendering the chat template")
}
