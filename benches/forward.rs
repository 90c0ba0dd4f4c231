//! Forward-pass speed on the default model: one decode step (1 and 16 sequences) and a
//! 64-token prefill chunk. `cargo bench --bench forward`.

use criterion::{criterion_group, criterion_main, Criterion};
use kiln::engine::runner::Runner;
use kiln::engine::{BatchLimits, LogitsWanted, Model, SeqInput};
use std::path::PathBuf;

fn model_path() -> PathBuf {
    let p = std::env::var_os("KILN_MODEL").map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("models/SmolLM2-135M-Instruct.Q4_1.gguf"),
        PathBuf::from,
    );
    assert!(
        p.is_file(),
        "model {} is missing: run scripts/fetch-model.sh",
        p.display()
    );
    p
}

fn forward(c: &mut Criterion) {
    let model = Model::load(model_path(), 0).expect("load model");
    let limits = BatchLimits {
        max_tokens: 64,
        max_seqs: 16,
        max_logit_rows: 16,
    };
    let mut runner = Runner::new(&model, limits, 16 * 256).expect("runner");
    let prompt: Vec<u32> = (0..64).map(|i| 300 + i * 13).collect();

    c.bench_function("prefill 64 tokens", |b| {
        b.iter(|| {
            let mut t = runner.new_seq();
            runner
                .feed(&mut t, 0, &prompt, 64, LogitsWanted::Last, |_, _| {})
                .expect("prefill");
        })
    });

    for n_seq in [1usize, 16] {
        let mut tables: Vec<_> = (0..n_seq).map(|_| runner.new_seq()).collect();
        for t in tables.iter_mut() {
            runner
                .feed(t, 0, &prompt[..32], 64, LogitsWanted::None, |_, _| {})
                .expect("prefill");
            t.reserve(33).expect("reserve");
        }
        let tok = [42u32];
        c.bench_function(
            &format!("decode step, {n_seq} sequences at position 32"),
            |b| {
                b.iter(|| {
                    // Rewrites position 32 each time: the same work per iteration.
                    let seqs: Vec<SeqInput<'_>> = tables
                        .iter()
                        .map(|t| SeqInput {
                            tokens: &tok,
                            start_pos: 32,
                            table: t,
                            logits: LogitsWanted::Last,
                        })
                        .collect();
                    runner.forward(&seqs).expect("decode");
                })
            },
        );
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(10);
    targets = forward
}
criterion_main!(benches);
