//! Forward-pass properties on the real model: batch invariance (a sequence's logits are
//! bit-identical alone, in a ragged batch with other sequences, and whatever the prefill chunk
//! size) and named errors for bad batches.

use crate::common;
use kiln::engine::runner::Runner;
use kiln::engine::{BatchLimits, EngineError, LogitsWanted, Model, SeqInput};
use std::sync::OnceLock;

fn model() -> &'static Model {
    static M: OnceLock<Model> = OnceLock::new();
    M.get_or_init(|| Model::load(common::default_model(), 2).expect("load model"))
}

const LIMITS: BatchLimits = BatchLimits {
    max_tokens: 128,
    max_seqs: 8,
    max_logit_rows: 128,
};

/// A deterministic pseudo-prompt of `n` ordinary token ids.
fn prompt(n: usize, salt: u32) -> Vec<u32> {
    (0..n as u32)
        .map(|i| 200 + (i.wrapping_mul(7919).wrapping_add(salt * 104_729)) % 40_000)
        .collect()
}

/// Logits at every position of `tokens` fed from position 0 in chunks of `chunk`.
fn all_logits(runner: &mut Runner<'_>, tokens: &[u32], chunk: usize) -> Vec<Vec<f32>> {
    let mut table = runner.new_seq();
    let mut rows = Vec::new();
    runner
        .feed(&mut table, 0, tokens, chunk, LogitsWanted::All, |_, r| {
            rows.push(r.to_vec())
        })
        .expect("feed");
    rows
}

fn assert_bits_eq(a: &[f32], b: &[f32], what: &str) {
    assert_eq!(a.len(), b.len(), "{what}: lengths");
    let diff = a
        .iter()
        .zip(b)
        .filter(|(x, y)| x.to_bits() != y.to_bits())
        .count();
    assert_eq!(diff, 0, "{what}: {diff} logits differ in bits");
}

#[test]
fn prefill_chunk_size_does_not_change_logits() {
    let mut runner = Runner::new(model(), LIMITS, 1024).expect("runner");
    let tokens = prompt(100, 1);
    let whole = all_logits(&mut runner, &tokens, 128);
    for chunk in [1, 7, 64] {
        let parts = all_logits(&mut runner, &tokens, chunk);
        assert_eq!(parts.len(), whole.len());
        for (p, (a, b)) in whole.iter().zip(&parts).enumerate() {
            assert_bits_eq(a, b, &format!("chunk {chunk}, position {p}"));
        }
    }
}

/// Long chunks take the matmul's token-group split (at least 2 x 64 tokens per team thread);
/// short ones the row split. Both must give the same bits.
#[test]
fn long_prefill_chunks_match_short_ones() {
    let limits = BatchLimits {
        max_tokens: 320,
        max_seqs: 1,
        max_logit_rows: 320,
    };
    let mut runner = Runner::new(model(), limits, 1024).expect("runner");
    let tokens = prompt(300, 9);
    let whole = all_logits(&mut runner, &tokens, 300);
    let parts = all_logits(&mut runner, &tokens, 37);
    assert_eq!(parts.len(), whole.len());
    for (p, (a, b)) in whole.iter().zip(&parts).enumerate() {
        assert_bits_eq(a, b, &format!("chunk 37 vs 300, position {p}"));
    }
}

#[test]
fn batch_company_does_not_change_logits() {
    let mut runner = Runner::new(model(), LIMITS, 2048).expect("runner");
    let target = prompt(23, 2);
    let alone = all_logits(&mut runner, &target, 128);

    // The same prompt in one ragged batch with four others: two prefills of other lengths and
    // two decoding sequences with some context already cached.
    let others: Vec<Vec<u32>> = vec![prompt(5, 3), prompt(40, 4)];
    let ctx: Vec<Vec<u32>> = vec![prompt(17, 5), prompt(3, 6)];
    let mut ctx_tables = Vec::new();
    for c in &ctx {
        let mut t = runner.new_seq();
        runner
            .feed(
                &mut t,
                0,
                &c[..c.len() - 1],
                128,
                LogitsWanted::None,
                |_, _| {},
            )
            .expect("context");
        t.reserve(c.len()).expect("reserve");
        ctx_tables.push(t);
    }
    let mut t_target = runner.new_seq();
    t_target.reserve(target.len()).expect("reserve");
    let mut t_others: Vec<_> = others.iter().map(|_| runner.new_seq()).collect();
    for (t, o) in t_others.iter_mut().zip(&others) {
        t.reserve(o.len()).expect("reserve");
    }
    let batch = [
        SeqInput {
            tokens: &others[0],
            start_pos: 0,
            table: &t_others[0],
            logits: LogitsWanted::Last,
        },
        SeqInput {
            tokens: &ctx[0][ctx[0].len() - 1..],
            start_pos: ctx[0].len() - 1,
            table: &ctx_tables[0],
            logits: LogitsWanted::Last,
        },
        SeqInput {
            tokens: &target,
            start_pos: 0,
            table: &t_target,
            logits: LogitsWanted::All,
        },
        SeqInput {
            tokens: &others[1],
            start_pos: 0,
            table: &t_others[1],
            logits: LogitsWanted::None,
        },
        SeqInput {
            tokens: &ctx[1][ctx[1].len() - 1..],
            start_pos: ctx[1].len() - 1,
            table: &ctx_tables[1],
            logits: LogitsWanted::Last,
        },
    ];
    let logits = runner.forward(&batch).expect("batch");
    assert_eq!(logits.n_rows(), 1 + 1 + target.len() + 1);
    let rows: Vec<&[f32]> = logits.seq_rows(2).collect();
    assert_eq!(rows.len(), alone.len());
    for (p, (a, b)) in alone.iter().zip(rows).enumerate() {
        assert_bits_eq(a, b, &format!("batched prefill, position {p}"));
    }
    let ctx0_batched = logits.last(1).expect("row").to_vec();
    let ctx1_batched = logits.last(4).expect("row").to_vec();
    assert!(logits.last(3).is_none());

    // The decoding sequences' rows equal their own full prefill's last row.
    for (c, batched) in ctx.iter().zip([ctx0_batched, ctx1_batched]) {
        let solo = all_logits(&mut runner, c, 128);
        assert_bits_eq(solo.last().expect("row"), &batched, "batched decode");
    }
}

#[test]
fn bad_batches_are_named_errors() {
    let mut runner = Runner::new(model(), LIMITS, 256).expect("runner");
    let mut t = runner.new_seq();
    t.reserve(4).expect("reserve");
    let bad_token = [SeqInput {
        tokens: &[1, 999_999],
        start_pos: 0,
        table: &t,
        logits: LogitsWanted::Last,
    }];
    assert!(matches!(
        runner.forward(&bad_token),
        Err(EngineError::BadToken { id: 999_999, .. })
    ));
    let unreserved = [SeqInput {
        tokens: &[1, 2, 3],
        start_pos: 30,
        table: &t,
        logits: LogitsWanted::Last,
    }];
    assert!(matches!(
        runner.forward(&unreserved),
        Err(EngineError::KvNotReserved { .. })
    ));
    let too_many = vec![5u32; LIMITS.max_tokens + 1];
    let mut big = runner.new_seq();
    big.reserve(too_many.len()).expect("reserve");
    let over = [SeqInput {
        tokens: &too_many,
        start_pos: 0,
        table: &big,
        logits: LogitsWanted::Last,
    }];
    assert!(matches!(
        runner.forward(&over),
        Err(EngineError::BatchTooLarge { .. })
    ));
    assert!(matches!(runner.forward(&[]), Err(EngineError::EmptyInput)));
}

/// From `LONG_FROM` on, attention runs the long-context order: tiled over a prefill chunk's
/// tokens, split over KV for a lone decode token. The logits of a long sequence stay
/// bit-identical whatever the chunking.
#[test]
fn long_context_logits_ignore_chunking() {
    use kiln::engine::attention::LONG_FROM;
    let limits = BatchLimits {
        max_tokens: 512,
        max_seqs: 1,
        max_logit_rows: 64,
    };
    let n = LONG_FROM + 24;
    let tail = 40;
    let mut runner = Runner::new(model(), limits, n + 16).expect("runner");
    let tokens = prompt(n, 11);
    let mut run = |head_chunk: usize, tail_chunk: usize| {
        let mut t = runner.new_seq();
        let head = &tokens[..n - tail];
        runner
            .feed(&mut t, 0, head, head_chunk, LogitsWanted::None, |_, _| {})
            .expect("head");
        let mut rows = Vec::new();
        runner
            .feed(
                &mut t,
                n - tail,
                &tokens[n - tail..],
                tail_chunk,
                LogitsWanted::All,
                |_, r| rows.push(r.to_vec()),
            )
            .expect("tail");
        rows
    };
    // A 40-token chunk across LONG_FROM (short tokens, then tiles), against the same positions
    // one token at a time (split-K decode) after a differently chunked head.
    let tiled = run(512, tail);
    let single = run(300, 1);
    assert_eq!(tiled.len(), tail);
    for (i, (a, b)) in tiled.iter().zip(&single).enumerate() {
        assert_bits_eq(a, b, &format!("position {}", n - tail + i));
    }
}

/// Load repacks every matrix whose kernel has a panel GEMM (on the team's threads, largest
/// first), once: a tied LM head shares the embedding's copy rather than packing a second one.
#[test]
fn load_packs_every_panel_matrix_once() {
    use kiln::kernels::table::kernels;
    let w = model().weights();
    let mut mats = vec![&w.token_embd, &w.output];
    for l in &w.layers {
        mats.extend(l.matrices());
    }
    for m in mats {
        let has_panel = kernels(m.dtype).expect("kernel row").packed.is_some();
        assert_eq!(
            m.packed.is_some(),
            has_panel,
            "{:?} {}x{}",
            m.dtype,
            m.n_out,
            m.k
        );
    }
    assert!(w.tied_output, "SmolLM2 ties its LM head to the embedding");
    if let (Some((_, a)), Some((_, b))) = (&w.token_embd.packed, &w.output.packed) {
        assert!(
            std::sync::Arc::ptr_eq(a, b),
            "the tied LM head has its own packed copy"
        );
    }
}
