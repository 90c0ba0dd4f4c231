//! The order every ranking in sampling uses (top-k, top-p, the `top_logprobs` list).

use std::cmp::Ordering;

/// Largest value first, then the lower token id (as greedy's first index on ties). Total on
/// the candidates, which never hold NaN.
pub fn by_rank(a: &(f32, u32), b: &(f32, u32)) -> Ordering {
    b.0.partial_cmp(&a.0)
        .unwrap_or(Ordering::Equal)
        .then(a.1.cmp(&b.1))
}
