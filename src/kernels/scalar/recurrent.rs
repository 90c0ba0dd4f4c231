//! Scalar twins of the recurrent mixers' kernels (`kernels::recurrent`): the order every
//! vector version follows.

use crate::kernels::recurrent_scan::{check_delta, check_scan, SCAN_LANES};

/// [`crate::kernels::recurrent_scan::ScanFn`]: the scan row by row, each row's dot as
/// [`SCAN_LANES`] partial sums combined by [`reduce_lanes`], then the tail ([`scan_tail`]).
pub fn ssm_scan(
    state: &mut [f32],
    x: &[f32],
    dt_sp: f32,
    da: f32,
    b: &[f32],
    c: &[f32],
    y: &mut [f32],
) {
    let (_, ds) = check_scan(state, x, b, c, y);
    if ds == 0 {
        y.fill(0.0);
        return;
    }
    let main = ds - ds % SCAN_LANES;
    for ((row, &xi), yi) in state.chunks_exact_mut(ds).zip(x).zip(y.iter_mut()) {
        let x_dt = xi * dt_sp;
        let mut acc = [0.0f32; SCAN_LANES];
        for ((s, bs), cs) in row[..main]
            .chunks_exact_mut(SCAN_LANES)
            .zip(b.chunks_exact(SCAN_LANES))
            .zip(c.chunks_exact(SCAN_LANES))
        {
            for l in 0..SCAN_LANES {
                let v = (s[l] * da) + (bs[l] * x_dt);
                s[l] = v;
                acc[l] += v * cs[l];
            }
        }
        *yi = scan_tail(row, main, (da, x_dt), b, c, reduce_lanes(acc));
    }
}

/// The partial sums combined by halves: lane `j` + lane `j + 8` for `j < 8`, then `j + 4`,
/// `j + 2`, `j + 1`.
#[inline]
pub fn reduce_lanes(mut w: [f32; SCAN_LANES]) -> f32 {
    let mut half = SCAN_LANES / 2;
    while half > 0 {
        for j in 0..half {
            w[j] += w[j + half];
        }
        half /= 2;
    }
    w[0]
}

/// The scan of a row's values `from..` (the `d_state % 16` past the lanes), added to `sum`
/// in order: shared by every ISA's version.
#[inline]
pub(crate) fn scan_tail(
    row: &mut [f32],
    from: usize,
    (da, x_dt): (f32, f32),
    b: &[f32],
    c: &[f32],
    mut sum: f32,
) -> f32 {
    for k in from..row.len() {
        let v = (row[k] * da) + (b[k] * x_dt);
        row[k] = v;
        sum += v * c[k];
    }
    sum
}

/// [`crate::kernels::recurrent_scan::DeltaFn`]: the delta rule row by row, each row decayed
/// and dotted with `k` in one pass, then updated and dotted with `q` in a second, each dot as
/// [`SCAN_LANES`] partial sums combined by [`reduce_lanes`], then its tail in order
/// ([`decay_tail`], [`update_tail`]).
pub fn delta_rule(
    state: &mut [f32],
    q: &[f32],
    k: &[f32],
    v: &[f32],
    (decay, beta, scale): (f32, f32, f32),
    out: &mut [f32],
) {
    let n = check_delta(state, q, k, v, out);
    if n == 0 {
        return;
    }
    let main = n - n % SCAN_LANES;
    for ((row, &vj), oj) in state.chunks_exact_mut(n).zip(v).zip(out.iter_mut()) {
        let mut acc = [0.0f32; SCAN_LANES];
        for (r, kc) in row[..main]
            .chunks_exact_mut(SCAN_LANES)
            .zip(k.chunks_exact(SCAN_LANES))
        {
            for l in 0..SCAN_LANES {
                let x = r[l] * decay;
                r[l] = x;
                acc[l] += x * kc[l];
            }
        }
        let delta = (vj - decay_tail(row, main, decay, k, reduce_lanes(acc))) * beta;
        let mut acc = [0.0f32; SCAN_LANES];
        for ((r, kc), qc) in row[..main]
            .chunks_exact_mut(SCAN_LANES)
            .zip(k.chunks_exact(SCAN_LANES))
            .zip(q.chunks_exact(SCAN_LANES))
        {
            for l in 0..SCAN_LANES {
                let x = r[l] + kc[l] * delta;
                r[l] = x;
                acc[l] += x * qc[l];
            }
        }
        *oj = update_tail(row, main, (k, delta), q, reduce_lanes(acc)) * scale;
    }
}

/// The delta rule's first pass over a row's values `from..` (the `n % 16` past the lanes):
/// each decayed, then `value * k` added to `sum` in order. Shared by every ISA's version.
#[inline]
pub(crate) fn decay_tail(row: &mut [f32], from: usize, decay: f32, k: &[f32], mut sum: f32) -> f32 {
    for i in from..row.len() {
        let x = row[i] * decay;
        row[i] = x;
        sum += x * k[i];
    }
    sum
}

/// The delta rule's second pass over a row's values `from..`: each `value + k * delta`, then
/// `value * q` added to `sum` in order. Shared by every ISA's version.
#[inline]
pub(crate) fn update_tail(
    row: &mut [f32],
    from: usize,
    (k, delta): (&[f32], f32),
    q: &[f32],
    mut sum: f32,
) -> f32 {
    for i in from..row.len() {
        let x = row[i] + k[i] * delta;
        row[i] = x;
        sum += x * q[i];
    }
    sum
}
