//! Attention sinks (gpt-oss, llama.cpp's `attn_sinks` passed to `ggml_flash_attn_ext`): a
//! learned logit per query head that joins the softmax's denominator without a value, so a
//! head may attend to "nothing". ggml folds it into the online softmax after the last position
//! (its CPU flash attention, "sinks - apply only on the first kv-chunk"):
//!
//! ```text
//! if s > M { ms = e^(M - s); acc *= ms; M = s } else { vs = e^(s - M) }
//! S = S * ms + vs          (ms, vs = 1 unless set above)
//! out = acc * (1 / S)
//! ```
//!
//! Every attention order of kiln (the one-row order's scalar and SIMD twins, the long order's
//! tiles and its split-K merge) finishes a row through [`fold_sink`], so they agree on it.

/// Folds the sink logit `sink` into a finished online softmax of maximum `m` and sum `l`:
/// returns `(ms, l')`, the factor the (f32) accumulator is multiplied by and the new sum.
/// `ms` is exactly 1 when the sink is not above `m`.
#[inline]
pub(super) fn fold_sink(m: f32, l: f32, sink: f32) -> (f32, f32) {
    if sink > m {
        let ms = (m - sink).exp();
        (ms, l.mul_add(ms, 1.0))
    } else {
        (1.0, l.mul_add(1.0, (sink - m).exp()))
    }
}

/// Finishes one row: `acc = acc * ms * (1 / l')` with the sink, `acc * (1 / l)` without
/// (a zero sum gives zeros, as ggml's `S_inv`).
pub(super) fn finish_row(m: f32, l: f32, sink: Option<f32>, acc: &mut [f32]) {
    let (ms, l) = match sink {
        Some(s) => fold_sink(m, l, s),
        None => (1.0, l),
    };
    let inv = if l == 0.0 { 0.0 } else { 1.0 / l };
    if ms != 1.0 {
        for x in acc.iter_mut() {
            *x *= ms;
        }
    }
    for x in acc.iter_mut() {
        *x *= inv;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sink_joins_the_denominator() {
        // Two positions of score 0 (m = 0, l = 2) and a sink of 0: every weight becomes 1/3.
        let mut acc = [2.0f32, 4.0];
        finish_row(0.0, 2.0, Some(0.0), &mut acc);
        assert!((acc[0] - 2.0 / 3.0).abs() < 1e-6 && (acc[1] - 4.0 / 3.0).abs() < 1e-6);
        // Without a sink: the plain average.
        let mut acc = [2.0f32, 4.0];
        finish_row(0.0, 2.0, None, &mut acc);
        assert_eq!(acc, [1.0, 2.0]);
    }

    #[test]
    fn a_large_sink_rescales_the_accumulator() {
        // m = 0, l = 1, sink 10: ms = e^-10, l' = e^-10 + 1, out = acc * e^-10 / l'.
        let (ms, l) = fold_sink(0.0, 1.0, 10.0);
        assert_eq!(ms, (-10f32).exp());
        assert_eq!(l, (-10f32).exp().mul_add(1.0, 1.0));
        let mut acc = [1.0f32];
        finish_row(0.0, 1.0, Some(10.0), &mut acc);
        let want = 1.0 / (1.0 + 10f64.exp());
        assert!((f64::from(acc[0]) - want).abs() < 1e-7);
        // A sink far below the maximum changes nothing.
        assert_eq!(fold_sink(5.0, 3.0, -200.0), (1.0, 3.0));
    }
}
