//! The recurrent kernels (`kernels::recurrent`): every ISA this CPU runs gives the scalar
//! twin's bits, and the scalar twin computes the scan (close to an f64 evaluation).

use super::util::cos_data;
use crate::kernels::recurrent::recurrent_for;
use crate::kernels::scalar::recurrent::reduce_lanes;
use crate::kernels::Isa;

fn bits(x: &[f32]) -> Vec<u32> {
    x.iter().map(|v| v.to_bits()).collect()
}

/// One scan step on `rows` x `ds` inputs with the kernels of `isa`: (state after, y).
fn run(isa: Isa, rows: usize, ds: usize, seed: f32) -> (Vec<f32>, Vec<f32>) {
    let mut state = cos_data(seed, rows * ds);
    let x = cos_data(seed + 0.5, rows);
    let b = cos_data(seed + 1.5, ds);
    let c = cos_data(seed + 2.5, ds);
    let mut y = vec![f32::NAN; rows];
    let (dt_sp, da) = (0.37 + seed * 0.01, 0.93);
    // Two tokens, so the second reads a state the first wrote.
    for _ in 0..2 {
        (recurrent_for(isa).ssm_scan)(&mut state, &x, dt_sp, da, &b, &c, &mut y);
    }
    (state, y)
}

#[test]
fn ssm_scan_every_isa_is_bit_identical_to_scalar() {
    // d_state: none, shorter than the lanes, a whole number of them, with a tail, Granite's
    // 128 and 128 + 2; rows: below, at and past the four-row groups.
    for ds in [0, 1, 5, 16, 17, 33, 128, 130] {
        for rows in [1, 3, 4, 5, 9] {
            let (ws, wy) = run(Isa::Scalar, rows, ds, ds as f32 + rows as f32);
            for isa in Isa::tested() {
                let (gs, gy) = run(isa, rows, ds, ds as f32 + rows as f32);
                assert_eq!(
                    bits(&ws),
                    bits(&gs),
                    "{isa} state, d_state {ds} rows {rows}"
                );
                assert_eq!(bits(&wy), bits(&gy), "{isa} y, d_state {ds} rows {rows}");
            }
        }
    }
}

#[test]
fn ssm_scan_scalar_is_the_scan() {
    let (rows, ds) = (3, 37);
    let mut state = cos_data(1.0, rows * ds);
    let want_prev: Vec<f64> = state.iter().map(|&v| f64::from(v)).collect();
    let x = cos_data(2.0, rows);
    let b = cos_data(3.0, ds);
    let c = cos_data(4.0, ds);
    let mut y = vec![0.0; rows];
    let (dt_sp, da) = (0.25f32, 0.9f32);
    (recurrent_for(Isa::Scalar).ssm_scan)(&mut state, &x, dt_sp, da, &b, &c, &mut y);
    for i in 0..rows {
        let mut sum = 0.0f64;
        for k in 0..ds {
            let v = want_prev[i * ds + k] * f64::from(da)
                + f64::from(b[k]) * f64::from(x[i]) * f64::from(dt_sp);
            assert!(
                (f64::from(state[i * ds + k]) - v).abs() < 1e-5,
                "state {i} {k}"
            );
            sum += v * f64::from(c[k]);
        }
        assert!(
            (f64::from(y[i]) - sum).abs() < 1e-4,
            "y {i}: {} vs {sum}",
            y[i]
        );
    }
    // The lanes combine by halves: with 1e8 in lane 0 (ulp 8) and 1 in the others, lane 0
    // absorbs 1, 2 and 4 (a tie, to even) and then takes 8 exactly: 1e8 + 8, where a sum in
    // order gives 1e8 and the exact sum is 1e8 + 15.
    let w: [f32; 16] = std::array::from_fn(|j| if j == 0 { 1e8 } else { 1.0 });
    assert_eq!(reduce_lanes(w), 1e8 + 8.0);
}

/// Three delta-rule tokens on an `n`-wide head with the kernels of `isa`: (state after, the
/// outputs of every token).
fn run_delta(isa: Isa, n: usize, seed: f32) -> (Vec<f32>, Vec<f32>) {
    let mut state = cos_data(seed, n * n);
    let mut outs = Vec::new();
    for t in 0..3 {
        let s = seed + 10.0 * t as f32;
        let (q, k, v) = (
            cos_data(s + 0.5, n),
            cos_data(s + 1.5, n),
            cos_data(s + 2.5, n),
        );
        let mut o = vec![f32::NAN; n];
        let coef = (0.9 - 0.05 * t as f32, 0.3 + 0.2 * t as f32, 0.125);
        (recurrent_for(isa).delta_rule)(&mut state, &q, &k, &v, coef, &mut o);
        outs.extend(o);
    }
    (state, outs)
}

#[test]
fn delta_rule_every_isa_is_bit_identical_to_scalar() {
    // Head widths: none, shorter than the lanes, whole lanes, with a tail, rows past the
    // four-row groups, and Qwen3.5's 128.
    for n in [0, 1, 3, 5, 16, 17, 33, 64, 128, 130] {
        let (ws, wo) = run_delta(Isa::Scalar, n, n as f32);
        for isa in Isa::tested() {
            let (gs, go) = run_delta(isa, n, n as f32);
            assert_eq!(bits(&ws), bits(&gs), "{isa} state, head width {n}");
            assert_eq!(bits(&wo), bits(&go), "{isa} out, head width {n}");
        }
    }
}

#[test]
fn delta_rule_scalar_is_the_rule() {
    let n = 37;
    let mut state = cos_data(1.0, n * n);
    let mut want: Vec<f64> = state.iter().map(|&v| f64::from(v)).collect();
    let (q, k, v) = (cos_data(2.0, n), cos_data(3.0, n), cos_data(4.0, n));
    let (decay, beta, scale) = (0.8f32, 0.6f32, 0.25f32);
    let mut o = vec![0.0; n];
    (recurrent_for(Isa::Scalar).delta_rule)(&mut state, &q, &k, &v, (decay, beta, scale), &mut o);
    for j in 0..n {
        let row = &mut want[j * n..(j + 1) * n];
        row.iter_mut().for_each(|x| *x *= f64::from(decay));
        let sk: f64 = row.iter().zip(&k).map(|(x, &y)| x * f64::from(y)).sum();
        let delta = (f64::from(v[j]) - sk) * f64::from(beta);
        row.iter_mut()
            .zip(&k)
            .for_each(|(x, &y)| *x += f64::from(y) * delta);
        let sq: f64 = row.iter().zip(&q).map(|(x, &y)| x * f64::from(y)).sum();
        assert!(
            (f64::from(o[j]) - sq * f64::from(scale)).abs() < 1e-4,
            "out {j}"
        );
    }
    for (i, (&g, w)) in state.iter().zip(&want).enumerate() {
        assert!((f64::from(g) - w).abs() < 1e-4, "state {i}");
    }
}
