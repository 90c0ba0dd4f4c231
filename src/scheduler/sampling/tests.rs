//! The sampler end to end, against naive references (full sorts, f64 softmax).

use super::*;
use crate::engine::ops::softmax::log_sum_exp;

/// Reference log-softmax (f64 sum), for comparing reported logprobs.
fn log_softmax_into(x: &[f32], out: &mut [f32]) {
    let lse = log_sum_exp(x);
    for (o, &v) in out.iter_mut().zip(x) {
        *o = (f64::from(v) - lse) as f32;
    }
}
use crate::engine::token_choice::argmax;
use proptest::prelude::*;
use std::collections::BTreeSet;

const NEG_INF: f32 = f32::NEG_INFINITY;

fn d() -> SamplingParams {
    SamplingParams::default()
}

/// The processed row, computed the obvious way over the whole vocabulary.
fn reference_row(
    p: &SamplingParams,
    prompt: &[u32],
    generated: &[u32],
    logits: &[f32],
) -> Vec<f32> {
    let mut r = logits.to_vec();
    for &(id, b) in &p.logit_bias {
        r[id as usize] = if b <= -100.0 {
            NEG_INF
        } else {
            r[id as usize] + b
        };
    }
    for (i, v) in r.iter_mut().enumerate() {
        let id = i as u32;
        if p.repetition_penalty != 1.0 && (prompt.contains(&id) || generated.contains(&id)) {
            *v = if *v > 0.0 {
                *v / p.repetition_penalty
            } else {
                *v * p.repetition_penalty
            };
        }
        let c = generated.iter().filter(|&&g| g == id).count();
        if c > 0 {
            *v -= p.presence_penalty + c as f32 * p.frequency_penalty;
        }
    }
    r
}

/// Ids ranked by logit (largest first, lower id on ties), NaN left out.
fn ranked(row: &[f32]) -> Vec<usize> {
    let mut ids: Vec<usize> = (0..row.len()).filter(|&i| !row[i].is_nan()).collect();
    ids.sort_by(|&a, &b| row[b].partial_cmp(&row[a]).unwrap().then(a.cmp(&b)));
    ids
}

/// The tokens `p` may draw from `row` (processed), by full sort in f64. `slack` widens the
/// top-p and min-p cut-offs a little to absorb f32 rounding at the boundary.
fn allowed(p: &SamplingParams, row: &[f32], slack: f64) -> BTreeSet<usize> {
    let ids = ranked(row);
    let t = f64::from(p.temperature);
    let max = f64::from(row[ids[0]]);
    let k = if p.top_k > 0 {
        p.top_k.min(ids.len())
    } else {
        ids.len()
    };
    let w: Vec<f64> = ids[..k]
        .iter()
        .map(|&i| ((f64::from(row[i]) - max) / t).exp())
        .collect();
    let z: f64 = w.iter().sum();
    let mut m = k;
    if p.top_p < 1.0 {
        let target = (f64::from(p.top_p) + slack).min(1.0) * z;
        let mut acc = 0.0;
        m = w
            .iter()
            .position(|&x| {
                acc += x;
                acc >= target * (1.0 - 1e-12)
            })
            .map_or(k, |i| i + 1);
    }
    let min_w = f64::from(p.min_p) * (1.0 - slack);
    ids[..m]
        .iter()
        .zip(&w)
        .filter(|&(_, &x)| x > 0.0 && x >= min_w)
        .map(|(&i, _)| i)
        .collect()
}

/// How often each token comes out of `n` draws.
fn histogram(p: &SamplingParams, seed: u64, row: &[f32], n: usize) -> Vec<usize> {
    let mut s = Sampler::new(p, seed, &[]);
    let mut scratch = SampleScratch::new();
    let mut counts = vec![0usize; row.len()];
    for _ in 0..n {
        counts[s.sample(row, &mut scratch).unwrap().id as usize] += 1;
    }
    counts
}

fn drawn(counts: &[usize]) -> BTreeSet<usize> {
    (0..counts.len()).filter(|&i| counts[i] > 0).collect()
}

fn ln(p: &[f64]) -> Vec<f32> {
    p.iter().map(|&x| x.ln() as f32).collect()
}

/// A 49,152-entry row: noise around 0 and a few large logits.
fn vocab_row(seed: u64, spread: f32) -> Vec<f32> {
    let mut rng = crate::engine::token_choice::Rng::new(seed);
    let mut row: Vec<f32> = (0..49_152)
        .map(|_| (0..4).map(|_| rng.next_f64() as f32 - 0.5).sum::<f32>() * spread)
        .collect();
    for (j, i) in [17usize, 4_000, 31_337, 49_151].iter().enumerate() {
        row[*i] = 9.0 - j as f32;
    }
    row
}

#[test]
fn greedy_is_argmax_on_a_vocabulary_row() {
    let row = vocab_row(1, 4.0);
    for t in [0.0, 1e-6] {
        let p = SamplingParams {
            temperature: t,
            ..d()
        };
        let got = Sampler::new(&p, 0, &[])
            .sample(&row, &mut SampleScratch::new())
            .unwrap();
        assert_eq!(got.id, argmax(&row));
        assert_eq!(got.id, 17);
    }
}

#[test]
fn seeded_draws_repeat_and_scratch_carries_nothing_over() {
    let big = vocab_row(2, 6.0);
    let small = ln(&[0.1, 0.2, 0.3, 0.4]);
    let configs = [
        d(),
        SamplingParams {
            temperature: 0.7,
            top_k: 40,
            ..d()
        },
        SamplingParams {
            temperature: 1.3,
            top_p: 0.9,
            min_p: 0.02,
            ..d()
        },
        SamplingParams {
            top_p: 0.95,
            top_k: 100,
            frequency_penalty: 0.4,
            repetition_penalty: 1.2,
            ..d()
        },
    ];
    for p in &configs {
        let run = |seed: u64, shared: &mut SampleScratch| -> Vec<u32> {
            let mut a = Sampler::new(p, seed, &[17, 4_000]);
            let mut other = Sampler::new(p, seed ^ 1, &[]);
            (0..50)
                .map(|i| {
                    // Another sequence with another vocabulary size uses the scratch between.
                    other.sample(&small, shared).unwrap();
                    a.sample(if i % 3 == 0 { &small } else { &big }, shared)
                        .unwrap()
                        .id
                })
                .collect()
        };
        let first = run(7, &mut SampleScratch::new());
        assert_eq!(first, run(7, &mut SampleScratch::new()), "{p:?}");
        let mut warm = SampleScratch::new();
        run(99, &mut warm);
        assert_eq!(first, run(7, &mut warm), "{p:?}");
        assert_ne!(first, run(8, &mut SampleScratch::new()), "{p:?}");
    }
}

#[test]
fn a_clone_continues_the_same_stream() {
    let row = vocab_row(3, 8.0);
    let mut a = Sampler::new(
        &SamplingParams {
            frequency_penalty: 1.0,
            ..d()
        },
        5,
        &[],
    );
    let mut scratch = SampleScratch::new();
    for _ in 0..5 {
        a.sample(&row, &mut scratch).unwrap();
    }
    let mut b = a.clone();
    for _ in 0..20 {
        assert_eq!(
            a.sample(&row, &mut scratch).unwrap(),
            b.sample(&row, &mut scratch).unwrap()
        );
    }
}

#[test]
fn temperature_sampling_follows_the_probabilities() {
    let row = [0.0f32, 3f32.ln(), NEG_INF];
    for (t, want) in [
        (1.0, 0.75),
        (0.5, 0.9),
        (2.0, 3f64.sqrt() / (1.0 + 3f64.sqrt())),
    ] {
        let p = SamplingParams {
            temperature: t,
            ..d()
        };
        let counts = histogram(&p, 42, &row, 4000);
        assert_eq!(counts[2], 0);
        let frac = counts[1] as f64 / 4000.0;
        assert!((frac - want).abs() < 0.03, "T={t}: {frac} vs {want}");
    }
}

#[test]
fn full_row_draw_finds_tokens_across_blocks() {
    let mut row = vec![-40.0f32; 1000];
    for (i, p) in [(5usize, 0.2f64), (300, 0.3), (999, 0.5)] {
        row[i] = p.ln() as f32;
    }
    let counts = histogram(&d(), 9, &row, 6000);
    assert_eq!(drawn(&counts), BTreeSet::from([5, 300, 999]));
    for (i, p) in [(5usize, 0.2f64), (300, 0.3), (999, 0.5)] {
        let frac = counts[i] as f64 / 6000.0;
        assert!((frac - p).abs() < 0.025, "{i}: {frac}");
    }
}

#[test]
fn top_k_keeps_the_k_most_likely() {
    let row = ln(&[0.1, 0.4, 0.05, 0.3, 0.15]);
    let p = SamplingParams { top_k: 2, ..d() };
    let counts = histogram(&p, 1, &row, 4000);
    assert_eq!(drawn(&counts), BTreeSet::from([1, 3]));
    let frac = counts[1] as f64 / 4000.0;
    assert!((frac - 4.0 / 7.0).abs() < 0.03, "{frac}");
    for k in [5, 6, usize::MAX] {
        let p = SamplingParams { top_k: k, ..d() };
        assert_eq!(histogram(&p, 1, &row, 300), histogram(&d(), 1, &row, 300));
    }
}

#[test]
fn top_p_keeps_the_smallest_prefix_reaching_p() {
    // Sorted: 1 (0.5), 3 (0.3), 2 (0.15), 0 (0.05).
    let row = ln(&[0.05, 0.5, 0.15, 0.3]);
    for (top_p, want) in [
        (0.45, vec![1]),
        (0.75, vec![1, 3]),
        (0.85, vec![1, 3, 2]),
        (0.96, vec![0, 1, 2, 3]),
    ] {
        let p = SamplingParams { top_p, ..d() };
        let counts = histogram(&p, 3, &row, 3000);
        assert_eq!(drawn(&counts), want.into_iter().collect(), "top_p {top_p}");
    }
    // Within the nucleus {1, 3} the odds are renormalized: 0.5 / 0.8.
    let counts = histogram(&SamplingParams { top_p: 0.75, ..d() }, 4, &row, 4000);
    let frac = counts[1] as f64 / 4000.0;
    assert!((frac - 0.625).abs() < 0.03, "{frac}");
    // After top-k = 2 the nucleus is taken over {1: 0.625, 3: 0.375}.
    let p = SamplingParams {
        top_k: 2,
        top_p: 0.6,
        ..d()
    };
    assert_eq!(drawn(&histogram(&p, 5, &row, 2000)), BTreeSet::from([1]));
    let p = SamplingParams {
        top_k: 2,
        top_p: 0.7,
        ..d()
    };
    assert_eq!(drawn(&histogram(&p, 5, &row, 2000)), BTreeSet::from([1, 3]));
}

#[test]
fn min_p_is_relative_to_the_most_likely_after_temperature() {
    let row = ln(&[0.5, 0.3, 0.15, 0.05]);
    let cases = [
        (1.0, 0, 0.5, vec![0, 1]),
        (1.0, 0, 0.7, vec![0]),
        (1.0, 0, 0.25, vec![0, 1, 2]),
        // At T = 2 the ratios to the top are sqrt(0.6), sqrt(0.3), sqrt(0.1).
        (2.0, 0, 0.5, vec![0, 1, 2]),
        (1.0, 3, 0.5, vec![0, 1]),
        (1.0, 0, 1.0, vec![0]),
    ];
    for (temperature, top_k, min_p, want) in cases {
        let p = SamplingParams {
            temperature,
            top_k,
            min_p,
            ..d()
        };
        let counts = histogram(&p, 6, &row, 3000);
        assert_eq!(drawn(&counts), want.into_iter().collect(), "{p:?}");
    }
}

#[test]
fn wide_nuclei_on_a_vocabulary_row() {
    // Flat rows make the nucleus span hundreds or thousands of tokens, so the ranked prefix
    // has to widen past 64 and 512, or to the whole row.
    for (spread, top_p, temperature) in [(0.5, 0.3, 1.0), (2.0, 0.9, 1.5), (0.1, 0.99, 0.8)] {
        let row = vocab_row(11, spread);
        let p = SamplingParams {
            top_p,
            temperature,
            ..d()
        };
        let ok = allowed(&p, &row, 1e-4);
        assert!(ok.len() > 64, "nucleus of {}", ok.len());
        let mut s = Sampler::new(&p, 12, &[]);
        let mut scratch = SampleScratch::new();
        for _ in 0..40 {
            let id = s.sample(&row, &mut scratch).unwrap().id as usize;
            assert!(ok.contains(&id), "{id} outside a nucleus of {}", ok.len());
        }
    }
}

#[test]
fn a_wide_nucleus_is_exact_on_equal_logits() {
    // 2000 equal logits rank by id: top_p = 0.5 keeps exactly ids 0..1000, evenly.
    let row = vec![0.25f32; 2000];
    let p = SamplingParams { top_p: 0.5, ..d() };
    let counts = histogram(&p, 13, &row, 20_000);
    assert!(counts[1000..].iter().all(|&c| c == 0));
    let low: usize = counts[..500].iter().sum();
    assert!((low as f64 / 20_000.0 - 0.5).abs() < 0.02, "{low}");
}

#[test]
fn penalties_steer_the_greedy_choice() {
    let logits = [2.0f32, 1.9, 1.0];
    let greedy = SamplingParams {
        temperature: 0.0,
        ..d()
    };
    let mut scratch = SampleScratch::new();

    let p = SamplingParams {
        frequency_penalty: 0.06,
        ..greedy.clone()
    };
    let mut s = Sampler::new(&p, 0, &[]);
    // Token 0 keeps winning until its count times 0.06 exceeds the 0.1 gap.
    let ids: Vec<u32> = (0..4)
        .map(|_| s.sample(&logits, &mut scratch).unwrap().id)
        .collect();
    assert_eq!(ids, [0, 0, 1, 0]);

    let p = SamplingParams {
        presence_penalty: 0.5,
        ..greedy.clone()
    };
    let mut s = Sampler::new(&p, 0, &[0]);
    assert_eq!(
        s.sample(&logits, &mut scratch).unwrap().id,
        0,
        "the prompt is not counted"
    );
    assert_eq!(s.sample(&logits, &mut scratch).unwrap().id, 1);
    let mut s = Sampler::new(&p, 0, &[]);
    s.observe(0);
    s.observe(1);
    assert_eq!(
        s.sample(&logits, &mut scratch).unwrap().id,
        0,
        "observed tokens are counted"
    );

    let p = SamplingParams {
        repetition_penalty: 1.5,
        ..greedy.clone()
    };
    let mut s = Sampler::new(&p, 0, &[0]);
    // 2.0 / 1.5 = 1.33 < 1.9: the prompt's token loses at once.
    assert_eq!(s.sample(&logits, &mut scratch).unwrap().id, 1);
}

#[test]
fn a_banned_token_is_never_drawn() {
    let row = [10.0f32, 0.0, 0.0, -5.0];
    let p = SamplingParams {
        temperature: 2.0,
        logit_bias: vec![(0, -100.0)],
        top_logprobs: 4,
        ..d()
    };
    let mut s = Sampler::new(&p, 8, &[]);
    let mut scratch = SampleScratch::new();
    for _ in 0..5000 {
        let got = s.sample(&row, &mut scratch).unwrap();
        assert_ne!(got.id, 0);
        assert_eq!(got.top.last(), Some(&(0, NEG_INF)));
    }
    for params in [
        SamplingParams {
            temperature: 0.0,
            ..p.clone()
        },
        SamplingParams {
            top_k: 2,
            ..p.clone()
        },
        SamplingParams {
            top_p: 0.999,
            ..p.clone()
        },
    ] {
        assert!(histogram(&params, 9, &row, 500)[0] == 0, "{params:?}");
    }
}

#[test]
fn logprobs_are_those_of_the_processed_row_at_temperature_one() {
    let logits = vocab_row(4, 3.0);
    let prompt = [17u32, 5, 5, 900];
    let base = SamplingParams {
        presence_penalty: 0.3,
        frequency_penalty: 0.2,
        repetition_penalty: 1.3,
        logit_bias: vec![(4_000, -100.0), (123, 7.5), (17, 0.25)],
        top_logprobs: 20,
        ..d()
    };
    let configs = [
        SamplingParams {
            temperature: 0.0,
            ..base.clone()
        },
        SamplingParams {
            temperature: 0.6,
            top_k: 40,
            ..base.clone()
        },
        SamplingParams {
            temperature: 1.0,
            top_p: 0.9,
            min_p: 0.05,
            ..base.clone()
        },
        SamplingParams {
            temperature: 1.7,
            ..base.clone()
        },
        SamplingParams {
            temperature: 1.0,
            ..base.clone()
        },
    ];
    for p in configs {
        let mut s = Sampler::new(&p, 21, &prompt);
        let mut scratch = SampleScratch::new();
        let mut generated = Vec::new();
        for _ in 0..6 {
            let row = reference_row(&p, &prompt, &generated, &logits);
            let mut lsm = vec![0.0; row.len()];
            log_softmax_into(&row, &mut lsm);
            let got = s.sample(&logits, &mut scratch).unwrap();
            let id = got.id as usize;
            assert!(
                (got.logprob - lsm[id]).abs() < 1e-5,
                "{p:?}: {} vs {}",
                got.logprob,
                lsm[id]
            );
            let want: Vec<usize> = ranked(&row).into_iter().take(20).collect();
            assert_eq!(
                got.top.iter().map(|e| e.0 as usize).collect::<Vec<_>>(),
                want
            );
            for &(t, lp) in &got.top {
                assert!((lp - lsm[t as usize]).abs() < 1e-5);
            }
            assert!(got.top.windows(2).all(|w| w[0].1 >= w[1].1));
            assert!(p.temperature == 0.0 || allowed(&p, &row, 1e-4).contains(&id));
            generated.push(got.id);
        }
    }
}

#[test]
fn degenerate_rows_do_not_panic() {
    let mut scratch = SampleScratch::new();
    let p = SamplingParams {
        top_logprobs: 3,
        top_p: 0.5,
        ..d()
    };
    let mut s = Sampler::new(&p, 0, &[]);
    // No candidate (an empty row, nothing finite): no token, never token 0.
    assert_eq!(s.sample(&[], &mut scratch), None);
    assert_eq!(s.sample(&[NEG_INF, f32::NAN, NEG_INF], &mut scratch), None);
    // A mask that leaves only -inf logits: no token either.
    let bits = [0b10u32];
    assert_eq!(
        s.sample_masked(&[0.0, NEG_INF, 0.0], Some(&bits), &mut scratch),
        None
    );
    let got = s
        .sample(&[1.0, f32::INFINITY, f32::INFINITY], &mut scratch)
        .unwrap();
    assert_eq!((got.id, got.logprob), (1, 0.0));
    assert_eq!(got.top, [(1, 0.0), (2, 0.0), (0, NEG_INF)]);
    // NaN logits are never drawn and never listed.
    let row = [f32::NAN, 0.0, f32::NAN, 0.0];
    let counts = histogram(
        &SamplingParams {
            top_logprobs: 4,
            ..d()
        },
        2,
        &row,
        400,
    );
    assert_eq!(drawn(&counts), BTreeSet::from([1, 3]));
    let got = Sampler::new(
        &SamplingParams {
            top_logprobs: 4,
            ..d()
        },
        0,
        &[],
    )
    .sample(&row, &mut scratch)
    .unwrap();
    assert_eq!(got.top.len(), 2);
    assert!((got.top[0].1 - 0.5f32.ln()).abs() < 1e-6);
}

fn any_logit() -> impl Strategy<Value = f32> {
    prop_oneof![
        10 => -30.0f32..30.0,
        1 => Just(f32::NAN),
        1 => Just(NEG_INF),
        1 => Just(f32::INFINITY),
        2 => Just(0.0f32),
        1 => Just(-0.0f32),
        2 => (0i32..3).prop_map(|x| x as f32),
    ]
}

fn finite_logit() -> impl Strategy<Value = f32> {
    prop_oneof![
        10 => -30.0f32..30.0,
        2 => Just(0.0f32),
        1 => Just(-0.0f32),
        2 => (0i32..3).prop_map(|x| x as f32),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn greedy_and_top_k_1_equal_argmax(
        row in prop::collection::vec(any_logit(), 0..300),
        t in 0.0f32..2.0,
    ) {
        let mut scratch = SampleScratch::new();
        // No token where no logit is finite or +inf, never a made-up token 0.
        let want = row
            .iter()
            .any(|v| !v.is_nan() && *v != NEG_INF)
            .then(|| argmax(&row));
        let greedy = SamplingParams { temperature: 0.0, ..d() };
        let id = |s: Option<Sampled>| s.map(|s| s.id);
        prop_assert_eq!(id(Sampler::new(&greedy, 1, &[]).sample(&row, &mut scratch)), want);
        let top1 = SamplingParams { temperature: t.max(0.01), top_k: 1, ..d() };
        prop_assert_eq!(id(Sampler::new(&top1, 1, &[]).sample(&row, &mut scratch)), want);
    }

    #[test]
    fn draws_stay_inside_the_reference_nucleus(
        row in prop::collection::vec(-12.0f32..12.0, 1..3000),
        temperature in 0.05f32..2.0,
        top_k in prop_oneof![Just(0usize), 1usize..80],
        top_p in prop_oneof![Just(1.0f32), 0.01f32..1.0],
        min_p in prop_oneof![Just(0.0f32), 0.0f32..0.5],
        seed in any::<u64>(),
    ) {
        let p = SamplingParams { temperature, top_k, top_p, min_p, ..d() };
        let ok = allowed(&p, &row, 1e-4);
        let mut s = Sampler::new(&p, seed, &[]);
        let mut scratch = SampleScratch::new();
        for _ in 0..8 {
            let id = s.sample(&row, &mut scratch).unwrap().id as usize;
            prop_assert!(ok.contains(&id), "{} not in {:?}", id, ok);
        }
    }

    #[test]
    fn draws_stay_inside_wide_reference_nuclei(
        row in prop::collection::vec(-1.5f32..1.5, 600..3000),
        temperature in 0.5f32..2.0,
        top_p in 0.3f32..0.99,
        min_p in prop_oneof![Just(0.0f32), 0.0f32..0.3],
        seed in any::<u64>(),
    ) {
        let p = SamplingParams { temperature, top_p, min_p, ..d() };
        let ok = allowed(&p, &row, 1e-4);
        let mut s = Sampler::new(&p, seed, &[]);
        let mut scratch = SampleScratch::new();
        for _ in 0..8 {
            let id = s.sample(&row, &mut scratch).unwrap().id as usize;
            prop_assert!(ok.contains(&id), "{} outside a nucleus of {}", id, ok.len());
        }
    }

    #[test]
    fn top_logprobs_match_a_full_sort(
        row in prop::collection::vec(finite_logit(), 1..500),
        k in 1usize..=20,
        temperature in prop_oneof![Just(0.0f32), 0.1f32..2.0],
    ) {
        let p = SamplingParams { temperature, top_logprobs: k, ..d() };
        let got = Sampler::new(&p, 3, &[]).sample(&row, &mut SampleScratch::new()).unwrap();
        let mut lsm = vec![0.0; row.len()];
        log_softmax_into(&row, &mut lsm);
        let want: Vec<usize> = ranked(&row).into_iter().take(k).collect();
        prop_assert_eq!(got.top.iter().map(|e| e.0 as usize).collect::<Vec<_>>(), want);
        for &(t, lp) in &got.top {
            prop_assert!((lp - lsm[t as usize]).abs() < 1e-5);
        }
        prop_assert!((got.logprob - lsm[got.id as usize]).abs() < 1e-5);
    }

    #[test]
    fn unvalidated_params_never_panic(
        row in prop::collection::vec(any_logit(), 0..200),
        temperature in any::<f32>(),
        top_k in any::<usize>(),
        top_p in any::<f32>(),
        min_p in any::<f32>(),
        pen in (any::<f32>(), any::<f32>(), any::<f32>()),
        bias in prop::collection::vec((0u32..300, any::<f32>()), 0..4),
        top_logprobs in 0usize..40,
    ) {
        let p = SamplingParams {
            temperature, top_k, top_p, min_p,
            presence_penalty: pen.0, frequency_penalty: pen.1, repetition_penalty: pen.2,
            logit_bias: bias, top_logprobs, seed: None,
        };
        let mut s = Sampler::new(&p, 0, &[1, 2, 3, 500]);
        let mut scratch = SampleScratch::new();
        for _ in 0..3 {
            // Penalties and biases of any value may leave no candidate: then no token.
            if let Some(got) = s.sample(&row, &mut scratch) {
                prop_assert!((got.id as usize) < row.len());
            }
        }
    }
}

#[test]
fn skipping_the_logprob_draws_the_same_tokens() {
    // Greedy, plain temperature (1 and not), top-k, top-p, min-p, penalties: the same seed
    // draws the same tokens with and without the temperature-1 normalizer.
    let cases = [
        SamplingParams {
            temperature: 0.0,
            ..SamplingParams::default()
        },
        SamplingParams {
            temperature: 0.7,
            ..SamplingParams::default()
        },
        SamplingParams {
            temperature: 1.0,
            ..SamplingParams::default()
        },
        SamplingParams {
            temperature: 0.8,
            top_k: 40,
            ..SamplingParams::default()
        },
        SamplingParams {
            temperature: 1.3,
            top_p: 0.9,
            min_p: 0.01,
            frequency_penalty: 0.5,
            ..SamplingParams::default()
        },
    ];
    let rows: Vec<Vec<f32>> = (0..6).map(|i| vocab_row(40 + i, 2.0)).collect();
    for p in &cases {
        for seed in [0u64, 7, 1234] {
            let mut with = Sampler::new(p, seed, &[3]);
            let mut without = Sampler::new(p, seed, &[3]).with_logprob(false);
            let (mut a, mut b) = (SampleScratch::new(), SampleScratch::new());
            for row in &rows {
                let x = with.sample(row, &mut a).unwrap();
                let y = without.sample(row, &mut b).unwrap();
                assert_eq!(x.id, y.id, "{p:?} seed {seed}");
                assert!(x.logprob.is_finite() && y.logprob.is_nan());
                assert!(y.top.is_empty());
            }
        }
    }
    // top_logprobs still gets its log-probabilities.
    let p = SamplingParams {
        temperature: 0.7,
        top_logprobs: 2,
        ..SamplingParams::default()
    };
    let (mut with, mut without) = (
        Sampler::new(&p, 5, &[]),
        Sampler::new(&p, 5, &[]).with_logprob(false),
    );
    let mut sc = SampleScratch::new();
    assert_eq!(
        with.sample(&rows[0], &mut sc),
        without.sample(&rows[0], &mut sc)
    );
}
