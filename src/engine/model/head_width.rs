//! Heads of different widths in one KV cache: a layer whose heads are narrower than the
//! cache's (gemma4's local layers) widens its Q, K and V rows with zeros before writing and
//! attending, and narrows the attention output back. A zero dimension adds an exact 0 to every
//! score and contributes 0 to every output value, so the scores and outputs are those of the
//! narrow heads.

/// Spreads `n_rows` rows of `heads` heads `from` wide, packed at the front of `buf`, to heads
/// `to` wide (`to >= from`), zero-filling each head's tail. In place, last head first.
pub(super) fn widen_heads(buf: &mut [f32], n_rows: usize, heads: usize, from: usize, to: usize) {
    debug_assert!(to >= from && buf.len() >= n_rows * heads * to);
    if to == from {
        return;
    }
    for i in (0..n_rows * heads).rev() {
        let (src, dst) = (i * from, i * to);
        buf.copy_within(src..src + from, dst);
        buf[dst + from..dst + to].fill(0.0);
    }
}

/// The inverse of [`widen_heads`]: keeps the first `to` values of each `from`-wide head of
/// `n_rows` rows, packed at the front of `buf`. In place, first head first.
pub(super) fn narrow_heads(buf: &mut [f32], n_rows: usize, heads: usize, from: usize, to: usize) {
    debug_assert!(to <= from && buf.len() >= n_rows * heads * from);
    if to == from {
        return;
    }
    for i in 0..n_rows * heads {
        let (src, dst) = (i * from, i * to);
        buf.copy_within(src..src + to, dst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn widen_then_narrow_round_trips_with_zero_tails() {
        // 2 rows of 3 heads of 2 values, widened to 4.
        let packed: Vec<f32> = (1..=12).map(|x| x as f32).collect();
        let mut buf = packed.clone();
        buf.resize(24, f32::NAN);
        widen_heads(&mut buf, 2, 3, 2, 4);
        for (i, head) in buf.chunks_exact(4).enumerate() {
            assert_eq!(head, &[packed[2 * i], packed[2 * i + 1], 0.0, 0.0]);
        }
        narrow_heads(&mut buf, 2, 3, 4, 2);
        assert_eq!(&buf[..12], &packed[..]);
    }
}
