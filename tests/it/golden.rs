//! The forward pass against llama.cpp's reference outputs for the default model
//! (../shared/golden/smollm2-135m-instruct-q4_1/greedy.json). It asserts what the README and
//! docs/architecture.md ("Faithfulness") claim: over the 648 comparable teacher-forced steps a
//! mean logprob deviation below 0.002 and a worst one below 0.20, top-1 agreement at all 621
//! steps whose reference margin is >= 0.05, and free-running greedy generation reproducing 23
//! of the 24 sequences, every one but `text_unicode` (see the data caveat). Those are well
//! inside the engine issue's bars (mean <= 0.03, max <= 0.25, >= 16 sequences). The figures
//! are printed (`--nocapture`).
//!
//! Data caveat: when a generated token ends in the middle of a UTF-8 character, llama.cpp's
//! server reports the merged character on the token that completes it and drops the steps of
//! the tokens before it (text_unicode step 9 reports id 243, byte 0x99, with text "🦙": two
//! ids are missing). From such a step on, `output_ids` is not the sequence llama.cpp fed, so
//! those steps are left out of the teacher-forced figures (detected from the data: a step
//! whose reported text is not its token's own piece), and that case cannot match greedily.
//!
//! STATUS: the bars are met (mean ~0.0016, max ~0.19 on long_context, 621/621, 23/24):
//! kiln's x86 forward pass reproduces llama.cpp's CPU numerics op by op (Q8 activation
//! rounding, Q4_1 dot order, SwiGLU expf, RoPE fused rotation, flash-attention order with an
//! f16 accumulator), bit-identical on short prompts. What remains is llama.cpp's own variation
//! on long prompts (its tiled prefill attention for >= 64 query tokens and split-KV decode
//! attention for >= 512 cached positions, which kiln does not replicate).

use crate::common;
use kiln::engine::kv_cache::KvType;
use kiln::engine::ops::log_softmax_at;
use kiln::engine::runner::Runner;
use kiln::engine::token_choice::argmax;
use kiln::engine::{BatchLimits, LogitsWanted, Model, SeqInput};
use kiln::gguf::GgufFile;
use kiln::tokenizer::Tokenizer;
use serde_json::Value;

struct Step {
    id: u32,
    logprob: f32,
    /// Reference top-1 minus top-2 logprob.
    margin: f32,
    top1: u32,
}

struct Case {
    name: String,
    /// Steps from this index on are not comparable (see the module docs).
    valid_steps: usize,
    prompt: Vec<u32>,
    output: Vec<u32>,
    steps: Vec<Step>,
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .expect("id array")
        .iter()
        .map(|x| x.as_u64().expect("id") as u32)
        .collect()
}

fn load_cases(tok: &Tokenizer) -> Vec<Case> {
    let path = common::shared_file("golden/smollm2-135m-instruct-q4_1/greedy.json");
    let doc: Value = serde_json::from_str(&common::read_to_string(&path)).expect("greedy.json");
    doc["cases"]
        .as_array()
        .expect("cases")
        .iter()
        .map(|c| Case {
            valid_steps: c["steps"]
                .as_array()
                .expect("steps")
                .iter()
                .position(|s| {
                    let id = s["id"].as_u64().expect("id") as u32;
                    let text = s["token"].as_str().expect("token");
                    !tok.is_control(id) && tok.token_to_piece(id) != text.as_bytes()
                })
                .unwrap_or(usize::MAX),
            name: c["name"].as_str().expect("name").to_string(),
            prompt: ids(&c["prompt_ids"]),
            output: ids(&c["output_ids"]),
            steps: c["steps"]
                .as_array()
                .expect("steps")
                .iter()
                .map(|s| {
                    let top = s["top"].as_array().expect("top");
                    let lp = |i: usize| top[i]["logprob"].as_f64().expect("logprob") as f32;
                    Step {
                        id: s["id"].as_u64().expect("id") as u32,
                        logprob: s["logprob"].as_f64().expect("logprob") as f32,
                        margin: lp(0) - lp(1),
                        top1: top[0]["id"].as_u64().expect("id") as u32,
                    }
                })
                .collect(),
        })
        .collect()
}

const EOS: u32 = 2;

/// What one run against the reference measured.
pub(crate) struct Figures {
    pub n_steps: usize,
    pub mean_dev: f64,
    pub max_dev: f32,
    pub worst: String,
    /// Top-1 agreement at reference margin >= 0.05: (agreeing, confident steps).
    pub agree: usize,
    pub confident: usize,
    pub disagreements: Vec<String>,
    /// Cases whose free-running greedy sequence differs from the reference's.
    pub missed: Vec<String>,
}

#[test]
fn golden_teacher_forced_and_greedy() {
    let f = run(KvType::F16);
    // What the README and docs/architecture.md claim (change them together).
    assert_eq!(f.n_steps, 648, "comparable teacher-forced steps");
    assert!(f.mean_dev < 0.002, "mean logprob deviation {}", f.mean_dev);
    assert!(
        f.max_dev < 0.20,
        "max logprob deviation {} at {}",
        f.max_dev,
        f.worst
    );
    assert_eq!(
        (f.agree, f.confident),
        (621, 621),
        "top-1 agreement at margin >= 0.05: {:?}",
        f.disagreements
    );
    assert_eq!(
        f.missed,
        ["text_unicode"],
        "greedy sequences not reproduced ({}/24 were)",
        24 - f.missed.len()
    );
}

/// Teacher-forced and free-running greedy runs of the 24 cases with a cache of `kv_type`,
/// printing the figures (`--nocapture`).
pub(crate) fn run(kv_type: KvType) -> Figures {
    let file = GgufFile::open(common::default_model()).expect("open model");
    let tok = Tokenizer::from_gguf(&file).expect("tokenizer");
    let model = Model::from_gguf(&file, 2).expect("load model");
    let cases = load_cases(&tok);
    assert_eq!(cases.len(), 24);
    let limits = BatchLimits {
        max_tokens: 256,
        max_seqs: 32,
        max_logit_rows: 64,
    };
    let mut runner = Runner::with_kv_type(&model, limits, 4096, kv_type).expect("runner");

    // Teacher forcing: the prompt without logits, then the prompt's last token and the
    // reference outputs with logits at every step.
    let (mut n_steps, mut sum_dev, mut max_dev, mut worst) = (0usize, 0f64, 0f32, String::new());
    let (mut confident, mut agree, mut disagreements) = (0usize, 0usize, Vec::new());
    // Per case: does kiln's argmax equal the reference token at every step?
    let mut tf_match = Vec::new();
    for c in &cases {
        let mut table = runner.new_seq();
        let p = c.prompt.len();
        runner
            .feed(
                &mut table,
                0,
                &c.prompt[..p - 1],
                64,
                LogitsWanted::None,
                |_, _| {},
            )
            .expect("prefill");
        let mut tail = vec![c.prompt[p - 1]];
        tail.extend_from_slice(&c.output[..c.output.len() - 1]);
        let mut rows: Vec<(f32, u32)> = Vec::new();
        runner
            .feed(&mut table, p - 1, &tail, 64, LogitsWanted::All, |_, row| {
                rows.push((0.0, argmax(row)));
                let i = rows.len() - 1;
                rows[i].0 = log_softmax_at(row, c.steps[i].id as usize);
            })
            .expect("teacher forcing");
        assert_eq!(rows.len(), c.steps.len());
        let mut all_match = true;
        for (i, (st, &(lp, top))) in c.steps.iter().zip(&rows).enumerate() {
            if i >= c.valid_steps {
                all_match = false;
                break;
            }
            let dev = (lp - st.logprob).abs();
            n_steps += 1;
            sum_dev += f64::from(dev);
            if dev > max_dev {
                max_dev = dev;
                worst = format!("{} step {i}", c.name);
            }
            if st.margin >= 0.05 {
                confident += 1;
                if top == st.top1 {
                    agree += 1;
                } else {
                    disagreements.push(format!("{} step {i}", c.name));
                }
            }
            all_match &= top == c.output[i];
        }
        tf_match.push(all_match);
    }
    let mean_dev = sum_dev / n_steps as f64;

    // Free-running greedy: every prompt prefilled, then all 24 decode together.
    let mut tables: Vec<_> = cases.iter().map(|_| runner.new_seq()).collect();
    let mut gen: Vec<Vec<u32>> = vec![Vec::new(); cases.len()];
    for (i, c) in cases.iter().enumerate() {
        let mut first = 0;
        runner
            .feed(
                &mut tables[i],
                0,
                &c.prompt,
                64,
                LogitsWanted::Last,
                |_, row| first = argmax(row),
            )
            .expect("prefill");
        gen[i].push(first);
    }
    let done = |g: &Vec<u32>| g.len() >= 32 || g.last() == Some(&EOS);
    loop {
        let active: Vec<usize> = (0..cases.len()).filter(|&i| !done(&gen[i])).collect();
        if active.is_empty() {
            break;
        }
        let mut inputs = Vec::new();
        for &i in &active {
            let pos = cases[i].prompt.len() + gen[i].len() - 1;
            tables[i].reserve(pos + 1).expect("reserve");
        }
        for &i in &active {
            let pos = cases[i].prompt.len() + gen[i].len() - 1;
            inputs.push(SeqInput {
                tokens: std::slice::from_ref(gen[i].last().expect("token")),
                start_pos: pos,
                table: &tables[i],
                logits: LogitsWanted::Last,
            });
        }
        let logits = runner.forward(&inputs).expect("decode");
        let next: Vec<u32> = (0..active.len())
            .map(|j| argmax(logits.last(j).expect("row")))
            .collect();
        drop(inputs);
        for (&i, t) in active.iter().zip(next) {
            gen[i].push(t);
        }
    }
    let mut matched = 0;
    for (i, c) in cases.iter().enumerate() {
        let ok = gen[i] == c.output;
        matched += usize::from(ok);
        assert_eq!(
            ok, tf_match[i],
            "{}: free-running and teacher-forced greedy disagree (batch invariance)",
            c.name
        );
        if !ok {
            let diverge = gen[i]
                .iter()
                .zip(&c.output)
                .take_while(|(a, b)| a == b)
                .count();
            println!(
                "golden ({kv_type} KV): {} diverges at step {diverge}",
                c.name
            );
        }
    }

    println!(
        "golden ({kv_type} KV): {n_steps} steps, logprob deviation mean {mean_dev:.4} max {max_dev:.4} ({worst}); \
         top-1 agreement {agree}/{confident} at margin >= 0.05; greedy sequences matched {matched}/{}",
        cases.len()
    );
    if !disagreements.is_empty() {
        println!("golden ({kv_type} KV): top-1 disagreements: {disagreements:?}");
    }
    let bar = |ok: bool| if ok { "MET" } else { "NOT MET" };
    println!(
        "golden ({kv_type} KV): issue bars: mean <= 0.03 {}; max <= 0.25 {}; top-1 agreement {}; >= 16 sequences {}",
        bar(mean_dev <= 0.03),
        bar(max_dev <= 0.25),
        bar(agree == confident),
        bar(matched >= 16)
    );
    let missed = cases
        .iter()
        .zip(&gen)
        .filter(|(c, g)| **g != c.output)
        .map(|(c, _)| c.name.clone())
        .collect();
    Figures {
        n_steps,
        mean_dev,
        max_dev,
        worst,
        agree,
        confident,
        disagreements,
        missed,
    }
}
