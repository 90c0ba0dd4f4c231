//! The causal depthwise convolution the recurrent mixers share (LFM2's short convolution, the
//! gated DeltaNet's and Mamba2's input convolutions, as ggml_ssm_conv computes them), and the
//! window of a sequence's last inputs it keeps in its recurrent state.
//!
//! A batch's input rows lie sequence after sequence; rows before a sequence's first one in
//! the batch come from its window (`kv_cache::state`: its last `L - 1` inputs, oldest first,
//! zero before position 0), which is moved past the batch's rows afterwards. Each output is a
//! function of the same f32 values in the same order whatever the chunk or batch, so the
//! mixers keep the engine's batch invariance.

use crate::engine::batch::SeqInput;
use crate::engine::kv_cache::KvCache;

/// Batch row `t`'s convolution: `out[c] = sum_k taps[k * n + c] * x(t - (L - 1 - k))[c]`, `n =
/// out.len()`, `L = taps.len() / n`, the sum in tap order from 0 (ggml_ssm_conv's order, f32,
/// no fused multiply-add). `x(i)` is batch row `i` of `rows` (`n` wide) when the sequence has
/// it in the batch (`j` = its rows before `t`), else a row of its `window` (`(L - 1) * n`).
pub(crate) fn conv_at(
    taps: &[f32],
    rows: &[f32],
    window: &[f32],
    t: usize,
    j: usize,
    out: &mut [f32],
) {
    let n = out.len();
    let l = taps.len() / n;
    out.fill(0.0);
    for k in 0..l {
        let back = l - 1 - k;
        let src = if back <= j {
            &rows[(t - back) * n..(t - back + 1) * n]
        } else {
            // `back - j` rows before the batch: window row (L - 1) - (back - j).
            let r = l - 1 - (back - j);
            &window[r * n..(r + 1) * n]
        };
        let w = &taps[k * n..(k + 1) * n];
        for ((o, &w), &u) in out.iter_mut().zip(w).zip(src) {
            *o += u * w;
        }
    }
}

/// Batch token `t`'s window (`win` values at offset `at` of its sequence's recurrent state)
/// and how many of its sequence's rows precede it in the batch.
pub(crate) fn window_of<'a>(
    cache: &'a KvCache,
    seqs: &[SeqInput<'_>],
    (tok_seq, tok_pos): (&[u32], &[u32]),
    t: usize,
    (at, win): (usize, usize),
) -> (&'a [f32], usize) {
    let q = &seqs[tok_seq[t] as usize];
    let j = tok_pos[t] as usize - q.start_pos;
    let slot = q.table.state_slot().unwrap_or(0);
    (&cache.state(slot)[at..at + win], j)
}

/// Moves a sequence's state window forward past `n` new rows: `window` holds the `w` rows
/// before the batch, `new_rows` the batch's `n` rows (`d` wide); afterwards `window` holds
/// the last `w` rows of both, in order.
pub(crate) fn advance_window(window: &mut [f32], new_rows: &[f32], d: usize) {
    let w = window.len() / d;
    let n = new_rows.len() / d;
    if n >= w {
        window.copy_from_slice(&new_rows[(n - w) * d..]);
    } else {
        window.copy_within(n * d.., 0);
        window[(w - n) * d..].copy_from_slice(new_rows);
    }
}

/// Moves every sequence's window (`win` values at offset `at` of its state) past its rows of
/// `rows` (`d` wide, sequence after sequence).
pub(crate) fn advance_windows(
    kv: &mut KvCache,
    seqs: &[SeqInput<'_>],
    (at, win): (usize, usize),
    rows: &[f32],
    d: usize,
) {
    let mut t0 = 0;
    for q in seqs {
        let n = q.tokens.len();
        if let Some(slot) = q.table.state_slot() {
            let window = &mut kv.state_mut(slot)[at..at + win];
            advance_window(window, &rows[t0 * d..(t0 + n) * d], d);
        }
        t0 += n;
    }
}

/// Panics when two sequences of the batch share a recurrent-state slot: the recurrent mixers
/// give each (sequence, head) task its slot's memory, which is sound only when slots are
/// distinct. A check over pairs, cheap for the batch's few dozen sequences (no allocation).
pub(crate) fn assert_distinct_slots(seqs: &[SeqInput<'_>]) {
    for (i, q) in seqs.iter().enumerate() {
        let slot = q.table.state_slot();
        assert!(
            slot.is_none() || seqs[..i].iter().all(|p| p.table.state_slot() != slot),
            "two sequences of one batch share a recurrent-state slot"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conv_sums_taps_in_order_reading_the_window_before_the_batch() {
        // n = 2, 3 taps; the window holds two rows, the batch one (j = 0).
        let taps = [1.0, 10.0, 2.0, 20.0, 3.0, 30.0];
        let window = [1.0f32, 1.0, 2.0, 0.5];
        let rows = [3.0f32, 0.25];
        let mut out = [0.0; 2];
        conv_at(&taps, &rows, &window, 0, 0, &mut out);
        assert_eq!(out, [1.0 + 4.0 + 9.0, 10.0 + 10.0 + 7.5]);
        // The same inputs all in the batch (row 2, two rows before it).
        let rows = [1.0f32, 1.0, 2.0, 0.5, 3.0, 0.25];
        let mut again = [0.0; 2];
        conv_at(&taps, &rows, &[0.0; 4], 2, 2, &mut again);
        assert_eq!(again, out);
    }

    #[test]
    fn window_keeps_the_last_rows() {
        let d = 2;
        let mut w = vec![1.0, 1.0, 2.0, 2.0];
        advance_window(&mut w, &[3.0, 3.0], d);
        assert_eq!(w, [2.0, 2.0, 3.0, 3.0]);
        advance_window(&mut w, &[4.0, 4.0, 5.0, 5.0, 6.0, 6.0], d);
        assert_eq!(w, [5.0, 5.0, 6.0, 6.0]);
    }
}
