//! Compares kiln's teacher-forced log-probabilities on a model with llama.cpp's (the JSON that
//! scripts/reference/ref_logits prints): top-1 agreement, mean and max |logprob difference| over
//! the reference's top ids at every position.
//!
//!   cargo run --release --example proof_compare -- MODEL.gguf REF.json

use kiln::engine::ops::log_softmax_at;
use kiln::engine::runner::Runner;
use kiln::engine::token_choice::argmax;
use kiln::engine::{BatchLimits, LogitsWanted, Model};
use serde_json::Value;

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    anyhow::ensure!(args.len() == 2, "usage: proof_compare MODEL.gguf REF.json");
    let model = Model::load(&args[0], 2)?;
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(&args[1])?)?;
    let steps = doc["steps"].as_array().expect("steps");
    let tokens: Vec<u32> = steps
        .iter()
        .map(|s| s["input"].as_u64().unwrap() as u32)
        .collect();
    let limits = BatchLimits {
        max_tokens: 64,
        max_seqs: 1,
        max_logit_rows: 64,
    };
    let mut runner = Runner::new(&model, limits, 1024)?;
    let mut table = runner.new_seq();
    let mut rows = Vec::new();
    runner.feed(&mut table, 0, &tokens, 16, LogitsWanted::All, |_, r| {
        rows.push(r.to_vec())
    })?;
    let (mut n, mut sum, mut max, mut worst, mut agree) = (0usize, 0f64, 0f64, 0usize, 0usize);
    let mut min_margin = f64::MAX;
    for (p, (s, row)) in steps.iter().zip(&rows).enumerate() {
        let top = s["top"].as_array().unwrap();
        let id0 = top[0][0].as_u64().unwrap() as u32;
        let margin = top[0][1].as_f64().unwrap() - top[1][1].as_f64().unwrap();
        min_margin = min_margin.min(margin);
        agree += usize::from(argmax(row) == id0);
        if std::env::var_os("PROOF_VERBOSE").is_some() {
            let d0 = f64::from(log_softmax_at(row, id0 as usize)) - top[0][1].as_f64().unwrap();
            println!(
                "pos {p}: top-1 dlogprob {d0:+.4}, kiln argmax {}",
                argmax(row)
            );
        }
        for e in top {
            let id = e[0].as_u64().unwrap() as usize;
            let d = (f64::from(log_softmax_at(row, id)) - e[1].as_f64().unwrap()).abs();
            n += 1;
            sum += d;
            if d > max {
                max = d;
                worst = p;
            }
        }
    }
    println!(
        "{}: top-1 {agree}/{} (min ref margin {min_margin:.3}), |dlogprob| mean {:.5} max {max:.4} at {worst}; {}",
        args[0],
        steps.len(),
        sum / n as f64,
        model.desc().variant
    );
    Ok(())
}
