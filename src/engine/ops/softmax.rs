//! Log-softmax over a row of logits (for logprobs and sampling).

/// `log(sum(exp(x - max))) + max`: the log of the softmax denominator, summed in f64.
pub fn log_sum_exp(x: &[f32]) -> f64 {
    let max = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    if max == f32::NEG_INFINITY {
        return f64::NEG_INFINITY;
    }
    let sum: f64 = x.iter().map(|&v| f64::from(v - max).exp()).sum();
    sum.ln() + f64::from(max)
}

/// The log-softmax of `x` at index `i`.
pub fn log_softmax_at(x: &[f32], i: usize) -> f32 {
    (f64::from(x[i]) - log_sum_exp(x)) as f32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_to_one() {
        let x = [1.0f32, 2.0, 3.0, -1.0];
        let out: Vec<f32> = (0..x.len()).map(|i| log_softmax_at(&x, i)).collect();
        let s: f64 = out.iter().map(|&v| f64::from(v).exp()).sum();
        assert!((s - 1.0).abs() < 1e-6);
        // Shift invariance.
        let y: Vec<f32> = x.iter().map(|v| v + 100.0).collect();
        assert!((log_softmax_at(&y, 2) - out[2]).abs() < 1e-5);
    }
}
