//! LFM2's short-convolution mixer (llama.cpp `src/models/lfm2.cpp`, `build_shortconv_block`),
//! for every new token of every sequence at once:
//!
//! ```text
//! n = rms_norm(x) * attn_norm
//! B, C, v = split3(Win n)                 in_proj: [3d, d]
//! u = B * v                               per channel
//! y[p] = sum_k taps[k] * u[p - (L-1) + k] depthwise, causal, L = shortconv.l_cache taps
//! x += Wout (C * y)                       out_proj: [d, d]
//! ```
//!
//! `u` at positions before a batch's first token come from the sequence's recurrent state
//! (`kv_cache::state`: its last `L - 1` rows of `u`, zero before position 0), which is
//! updated to the batch's last `L - 1` rows afterwards. Each output is a function of the same
//! f32 values in the same order whatever the chunk or batch (`conv_row`), so the mixer keeps
//! the engine's batch invariance.

use crate::engine::batch::SeqInput;
use crate::engine::kv_cache::KvCache;
use crate::engine::matmul::{matmul_made, warm_next, MatJob};
use crate::engine::model::forward::norm_matmul;
use crate::engine::model::loaded::{add_in_place, for_rows, Model};
use crate::engine::scratch::ForwardScratch;
use crate::engine::weights::ShortConvWeights;

/// One position's convolution, gated: `out[c] = gate[c] * sum_k taps[k*d + c] * src(k)[c]`,
/// the sum taken in tap order from 0 (ggml_ssm_conv's order, f32), where `src(k)` is the row of
/// the input `L - 1 - k` positions back. Scalar reference (the taps loop runs over contiguous
/// channels, which the compiler vectorizes).
pub(crate) fn conv_row<'a>(
    taps: &[f32],
    src: impl Fn(usize) -> &'a [f32],
    gate: &[f32],
    out: &mut [f32],
) {
    let d = out.len();
    out.fill(0.0);
    for k in 0..taps.len() / d {
        let (w, u) = (&taps[k * d..(k + 1) * d], src(k));
        for ((o, &w), &u) in out.iter_mut().zip(w).zip(&u[..d]) {
            *o += u * w;
        }
    }
    for (o, &g) in out.iter_mut().zip(gate) {
        *o *= g;
    }
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

impl Model {
    /// Layer `l`'s short-convolution block: `s.x += Wout (C * conv(B * v))` of the normed
    /// `s.x`, reading and then advancing each sequence's window at offset `state` of its
    /// recurrent state in `kv`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn shortconv_block(
        &self,
        l: usize,
        cw: &ShortConvWeights,
        state: usize,
        seqs: &[SeqInput<'_>],
        n_tok: usize,
        kv: &mut KvCache,
        s: &mut ForwardScratch,
    ) {
        let c = self.desc();
        let lw = &self.weights().layers[l];
        let d = c.n_embd;
        let taps = c.conv_l_cache;
        let win = (taps - 1) * d;
        let lt = Some(l);
        warm_next(&self.team, n_tok, &cw.out_proj);
        norm_matmul(
            &self.team,
            (&s.x, d, &lw.attn_norm, c.rms_eps),
            &|t| t,
            &mut s.xn,
            n_tok,
            &mut [MatJob {
                w: &cw.in_proj,
                out: &mut s.conv_bcx,
            }],
            &mut s.mm,
        );
        self.trace("attn_norm", lt, &s.xn[..n_tok * d]);
        self.trace("conv_in_proj", lt, &s.conv_bcx[..n_tok * 3 * d]);
        let bcx = &s.conv_bcx;
        for_rows(&self.team, &mut s.conv_bx, d, n_tok, |t, row| {
            let r = &bcx[t * 3 * d..(t + 1) * 3 * d];
            for ((o, &b), &v) in row.iter_mut().zip(&r[..d]).zip(&r[2 * d..]) {
                *o = b * v;
            }
        });
        self.trace("conv_bx", lt, &s.conv_bx[..n_tok * d]);
        // The first batch row of each token's sequence (tokens lie sequence after sequence).
        let (tok_seq, tok_pos) = (&s.tok_seq[..n_tok], &s.tok_pos[..n_tok]);
        let bx = &s.conv_bx;
        let cache: &KvCache = kv;
        let gated = |t: usize, row: &mut [f32]| {
            let q = &seqs[tok_seq[t] as usize];
            let j = tok_pos[t] as usize - q.start_pos; // rows of this batch before t
            let slot = q.table.state_slot().unwrap_or(0);
            let window = &cache.state(slot)[state..state + win];
            let src = |k: usize| {
                let back = taps - 1 - k;
                if back <= j {
                    &bx[(t - back) * d..(t - back + 1) * d]
                } else {
                    // `back - j` rows before the batch: window row (taps-1) - (back-j).
                    let r = taps - 1 - (back - j);
                    &window[r * d..(r + 1) * d]
                }
            };
            let gate = &bcx[t * 3 * d + d..t * 3 * d + 2 * d];
            conv_row(&cw.conv, src, gate, row);
        };
        matmul_made(
            &self.team,
            &mut s.xn,
            &gated,
            n_tok,
            &mut [MatJob {
                w: &cw.out_proj,
                out: &mut s.proj,
            }],
            &mut s.mm,
        );
        self.trace("conv_y", lt, &s.xn[..n_tok * d]);
        let mut t0 = 0;
        for q in seqs {
            let n = q.tokens.len();
            if let Some(slot) = q.table.state_slot() {
                let window = &mut kv.state_mut(slot)[state..state + win];
                advance_window(window, &s.conv_bx[t0 * d..(t0 + n) * d], d);
            }
            t0 += n;
        }
        self.finish_branch(None, None, n_tok, &mut s.proj, &mut s.xn);
        self.trace("attn_proj", lt, &s.proj[..n_tok * d]);
        add_in_place(&mut s.x[..n_tok * d], &s.proj[..n_tok * d]);
        self.trace("ffn_inp", lt, &s.x[..n_tok * d]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conv_row_sums_taps_in_order_and_gates() {
        // d = 2, 3 taps; rows oldest first.
        let taps = [1.0, 10.0, 2.0, 20.0, 3.0, 30.0];
        let rows = [[1.0f32, 1.0], [2.0, 0.5], [3.0, 0.25]];
        let mut out = [0.0; 2];
        conv_row(&taps, |k| &rows[k][..], &[2.0, -1.0], &mut out);
        assert_eq!(out, [2.0 * (1.0 + 4.0 + 9.0), -(10.0 + 10.0 + 7.5)]);
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
