//! RMSNorm: `y = x / sqrt(mean(x^2) + eps) * w`, as llama.cpp computes it (squares summed in
//! f64, the scale rounded to f32, then the scaled row multiplied by the weight).

/// Writes `rms_norm(x) * w` into `out`. All three have the same length.
pub fn rms_norm(x: &[f32], w: &[f32], eps: f32, out: &mut [f32]) {
    assert!(
        x.len() == w.len() && x.len() == out.len(),
        "rms_norm lengths"
    );
    let scale = rms_scale(x, eps);
    for ((o, &xi), &wi) in out.iter_mut().zip(x).zip(w) {
        *o = (xi * scale) * wi;
    }
}

/// `x = rms_norm(x) * w` in place (the same arithmetic as [`rms_norm`]).
pub fn rms_norm_in_place(x: &mut [f32], w: &[f32], eps: f32) {
    assert!(x.len() == w.len(), "rms_norm lengths");
    let scale = rms_scale(x, eps);
    for (xi, &wi) in x.iter_mut().zip(w) {
        *xi = (*xi * scale) * wi;
    }
}

/// `x = rms_norm(x)` in place, with no weight: the same bits as [`rms_norm_in_place`] with a
/// weight of ones (a product with 1.0 is exact), without needing such a weight.
pub fn rms_norm_unweighted_in_place(x: &mut [f32], eps: f32) {
    let scale = rms_scale(x, eps);
    for xi in x.iter_mut() {
        *xi *= scale;
    }
}

/// `1 / sqrt(mean(x^2) + eps)`. Eight f64 partial sums (a fixed order, so the result is
/// deterministic and the loop vectorizes), combined pairwise.
fn rms_scale(x: &[f32], eps: f32) -> f32 {
    let mut acc = [0f64; 8];
    let mut chunks = x.chunks_exact(8);
    for c in &mut chunks {
        for (a, &v) in acc.iter_mut().zip(c) {
            *a += f64::from(v * v);
        }
    }
    for (a, &v) in acc.iter_mut().zip(chunks.remainder()) {
        *a += f64::from(v * v);
    }
    let sum = ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]));
    let mean = (sum / x.len().max(1) as f64) as f32;
    1.0 / (mean + eps).sqrt()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_naive_formula() {
        let x: Vec<f32> = (0..37).map(|i| (i as f32 * 0.37).sin() * 3.0).collect();
        let w: Vec<f32> = (0..37).map(|i| 0.5 + i as f32 / 37.0).collect();
        let mut out = vec![0.0; 37];
        rms_norm(&x, &w, 1e-5, &mut out);
        let ms: f64 = x.iter().map(|&v| f64::from(v) * f64::from(v)).sum::<f64>() / 37.0;
        let s = 1.0 / (ms + 1e-5).sqrt();
        for i in 0..37 {
            let want = f64::from(x[i]) * s * f64::from(w[i]);
            assert!((f64::from(out[i]) - want).abs() < 1e-5, "{i}");
        }
    }

    #[test]
    fn unweighted_equals_a_weight_of_ones_bit_for_bit() {
        let x: Vec<f32> = (0..41).map(|i| (i as f32 * 0.73).cos() * 1e3).collect();
        let mut a = x.clone();
        let mut b = x;
        rms_norm_in_place(&mut a, &[1.0; 41], 1e-6);
        rms_norm_unweighted_in_place(&mut b, 1e-6);
        assert_eq!(
            a.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            b.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
        );
    }
}
