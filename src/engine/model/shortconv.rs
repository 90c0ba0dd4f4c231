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
//! f32 values in the same order whatever the chunk or batch (`causal_conv`), so the mixer keeps
//! the engine's batch invariance.

use super::causal_conv::{advance_windows, conv_at, window_of};
use crate::engine::batch::SeqInput;
use crate::engine::kv_cache::KvCache;
use crate::engine::matmul::{matmul_made, warm_next, MatJob};
use crate::engine::model::forward::norm_matmul;
use crate::engine::model::loaded::{add_in_place, for_rows, Model};
use crate::engine::scratch::ForwardScratch;
use crate::engine::weights::ShortConvWeights;

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
            let (window, j) = window_of(cache, seqs, (tok_seq, tok_pos), t, (state, win));
            conv_at(&cw.conv, bx, window, t, j, row);
            let gate = &bcx[t * 3 * d + d..t * 3 * d + 2 * d];
            for (o, &g) in row.iter_mut().zip(gate) {
                *o *= g;
            }
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
        advance_windows(kv, seqs, (state, win), &s.conv_bx, d);
        self.finish_branch(None, None, n_tok, &mut s.proj, &mut s.xn);
        self.trace("attn_proj", lt, &s.proj[..n_tok * d]);
        add_in_place(&mut s.x[..n_tok * d], &s.proj[..n_tok * d]);
        self.trace("ffn_inp", lt, &s.x[..n_tok * d]);
    }
}
