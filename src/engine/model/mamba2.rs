//! Granite 4.0-H's Mamba2 mixer (llama.cpp `src/models/mamba-base.cpp`, `build_mamba2_layer`,
//! with ggml-cpu's `ssm_conv` and `ssm_scan`), for every new token of every sequence at once:
//!
//! ```text
//! n = rms_norm(x) * attn_norm
//! z, xBC, dt = split3(Win n)                 in_proj: [inner + conv_dim + n_head, d]
//! xBC = silu(conv(xBC) + conv_bias)          depthwise, causal, d_conv taps
//! x, B, C = split3(xBC)                      x: [n_head][head_dim], B, C: [n_group][d_state]
//! per head h (group g = h / (n_head / n_group)), token after token:
//!   dt' = softplus(dt[h] + dt_bias[h]);  dA = exp(dt' A[h])
//!   S[h][i][k] = S[h][i][k] dA + B[g][k] (x[h][i] dt')     S: the scan state
//!   y[h][i] = sum_k S[h][i][k] C[g][k]
//! y = (y + x * D[h]) * silu(z)
//! y = rms_norm per group of inner / n_group values * ssm_norm
//! x += Wout y                                out_proj: [d, inner]
//! ```
//!
//! The convolution's last `d_conv - 1` input rows and the scan state S live in the sequence's
//! recurrent state (`kv_cache::state`, zero before position 0) and are carried from one chunk
//! to the next exactly: the scan runs token after token (as ggml's does), so each output is
//! the same f32 operations in the same order whatever the batch or the chunking, and the
//! engine's batch invariance holds.

use super::causal_conv::{advance_windows, assert_distinct_slots, conv_at, window_of};
use crate::engine::batch::SeqInput;
use crate::engine::kv_cache::KvCache;
use crate::engine::matmul::{matmul_made, warm_next, MatJob};
use crate::engine::model::desc::Mamba2Desc;
use crate::engine::model::forward::norm_matmul;
use crate::engine::model::loaded::{add_in_place, for_rows, Model};
use crate::engine::ops::rms_norm_in_place;
use crate::engine::ops::silu::{mul_silu_in_place, silu_in_place};
use crate::engine::scratch::ForwardScratch;
use crate::engine::team::SendPtr;
use crate::engine::weights::Mamba2Weights;
use crate::kernels::recurrent::{recurrent, ScanFn};

/// ggml's `ggml_compute_softplus_f32`: `ln(1 + e^x)`, `x` itself above 20.
pub(crate) fn softplus(x: f32) -> f32 {
    if x > 20.0 {
        x
    } else {
        (1.0 + x.exp()).ln()
    }
}

/// One token of one head's scan (ggml_ssm_scan_f32, Mamba-2's scalar decay): `dt' =
/// softplus(dt)` and `dA = exp(dt' * a)`, then `scan` (`kernels::recurrent::ScanFn`) over
/// the head's `head_dim` rows of `state` (`d_state` wide): `state[i] = state[i] * dA + b *
/// (x[i] * dt')` and `y[i] = sum_k state[i][k] * c[k]`.
pub(crate) fn scan_head(
    scan: ScanFn,
    state: &mut [f32],
    (x, dt, a): (&[f32], f32, f32),
    b: &[f32],
    c: &[f32],
    y: &mut [f32],
) {
    let dt_sp = softplus(dt);
    let da = (dt_sp * a).exp();
    scan(state, x, dt_sp, da, b, c, y);
}

/// `row = rms_norm((y + x * D[h]) * silu(z)) * norm`, the norm over each group of
/// `inner / n_group` values: what the output projection reads for one token (`row`, `y`, `x`
/// and `z` are `inner` wide).
fn gate_norm_row(
    m: &Mamba2Desc,
    (y, x, z): (&[f32], &[f32], &[f32]),
    w: &Mamba2Weights,
    eps: f32,
    row: &mut [f32],
) {
    let hd = m.head_dim;
    for (h, &dh) in w.d.iter().enumerate() {
        let r = h * hd..(h + 1) * hd;
        for ((o, &yi), &xi) in row[r.clone()].iter_mut().zip(&y[r.clone()]).zip(&x[r]) {
            *o = yi + xi * dh;
        }
    }
    mul_silu_in_place(row, z);
    let gs = m.d_inner / m.n_group;
    for (g, nw) in row.chunks_exact_mut(gs).zip(w.norm.chunks_exact(gs)) {
        rms_norm_in_place(g, nw, eps);
    }
}

impl Model {
    /// Layer `l`'s Mamba2 block: `s.x += Wout mamba2(norm(s.x))`, reading and then advancing
    /// each sequence's convolution window and scan state at offset `state` of its recurrent
    /// state in `kv`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn mamba2_block(
        &self,
        l: usize,
        mw: &Mamba2Weights,
        state: usize,
        seqs: &[SeqInput<'_>],
        n_tok: usize,
        kv: &mut KvCache,
        s: &mut ForwardScratch,
    ) {
        let c = self.desc();
        let Some(m) = c.mamba2 else {
            unreachable!("a Mamba2 layer's model has a Mamba2 shape");
        };
        let lw = &self.weights().layers[l];
        let d = c.n_embd;
        let (np, cd, inner) = (m.d_in_proj, m.conv_dim, m.d_inner);
        let win = m.conv_floats();
        let lt = Some(l);
        warm_next(&self.team, n_tok, &mw.out_proj);
        norm_matmul(
            &self.team,
            (&s.x, d, &lw.attn_norm, c.rms_eps),
            &|t| t,
            &mut s.xn,
            n_tok,
            &mut [MatJob {
                w: &mw.in_proj,
                out: &mut s.ssm_zxbcdt,
            }],
            &mut s.mm,
        );
        self.trace("attn_norm", lt, &s.xn[..n_tok * d]);
        let zx = &s.ssm_zxbcdt;
        for_rows(&self.team, &mut s.ssm_xbc, cd, n_tok, |t, row| {
            row.copy_from_slice(&zx[t * np + inner..t * np + inner + cd]);
        });
        // The convolution: rows before a batch's first come from the sequence's window.
        let (tok_seq, tok_pos) = (&s.tok_seq[..n_tok], &s.tok_pos[..n_tok]);
        let xbc = &s.ssm_xbc;
        let cache: &KvCache = kv;
        for_rows(&self.team, &mut s.ssm_conv, cd, n_tok, |t, row| {
            let (window, j) = window_of(cache, seqs, (tok_seq, tok_pos), t, (state, win));
            conv_at(&mw.conv, xbc, window, t, j, row);
            // The bias (ggml_add), then SiLU.
            for (o, &b) in row.iter_mut().zip(&mw.conv_bias) {
                *o += b;
            }
            silu_in_place(row);
        });
        self.trace("ssm_conv", lt, &s.ssm_conv[..n_tok * cd]);
        advance_windows(kv, seqs, (state, win), &s.ssm_xbc, cd);
        self.scan(&m, mw, state + win, seqs, kv, s);
        self.trace("ssm_y", lt, &s.ssm_y[..n_tok * inner]);
        let (y, xc, zx) = (&s.ssm_y, &s.ssm_conv, &s.ssm_zxbcdt);
        let eps = c.rms_eps;
        let make = |t: usize, row: &mut [f32]| {
            let ins = (
                &y[t * inner..(t + 1) * inner],
                &xc[t * cd..t * cd + inner],
                &zx[t * np..t * np + inner],
            );
            gate_norm_row(&m, ins, mw, eps, row);
        };
        matmul_made(
            &self.team,
            &mut s.xn,
            &make,
            n_tok,
            &mut [MatJob {
                w: &mw.out_proj,
                out: &mut s.proj,
            }],
            &mut s.mm,
        );
        self.trace("ssm_norm", lt, &s.xn[..n_tok * inner]);
        self.finish_branch(None, None, n_tok, &mut s.proj, &mut s.xn);
        self.trace("attn_proj", lt, &s.proj[..n_tok * d]);
        add_in_place(&mut s.x[..n_tok * d], &s.proj[..n_tok * d]);
        self.trace("ffn_inp", lt, &s.x[..n_tok * d]);
    }

    /// The scan of every sequence's tokens into `s.ssm_y`, one task per sequence and head
    /// (token after token inside it), on the scan state at offset `at` of each sequence's
    /// recurrent state.
    fn scan(
        &self,
        m: &Mamba2Desc,
        mw: &Mamba2Weights,
        at: usize,
        seqs: &[SeqInput<'_>],
        kv: &mut KvCache,
        s: &mut ForwardScratch,
    ) {
        let (np, cd, inner, ds) = (m.d_in_proj, m.conv_dim, m.d_inner, m.d_state);
        let (nh, hd) = (m.n_head, m.head_dim);
        let per_group = nh / m.n_group;
        let per_head = hd * ds;
        let floats = kv.state_shape().floats_per_seq;
        // Each task writes its own sequence's slot: no two sequences of a batch may share one.
        assert_distinct_slots(seqs);
        let states = SendPtr(kv.states_mut().as_mut_ptr());
        let n_states = kv.state_shape().n_slots * floats;
        let ys = SendPtr(s.ssm_y.as_mut_ptr());
        let (zx, xbc) = (&s.ssm_zxbcdt, &s.ssm_conv);
        let kern = recurrent().ssm_scan;
        self.team.run(seqs.len() * nh, &|task, _| {
            let (qi, h) = (task / nh, task % nh);
            let q = &seqs[qi];
            let Some(slot) = q.table.state_slot() else {
                return; // plan() refuses a recurrent model's sequence without a slot
            };
            let t0: usize = seqs[..qi].iter().map(|p| p.tokens.len()).sum();
            let off = slot as usize * floats + at + h * per_head;
            assert!(off + per_head <= n_states, "scan state out of range");
            // SAFETY: `off..off + per_head` lies inside the state buffer (checked above); it is
            // head h's state in this sequence's slot, which no other task touches (one task per
            // sequence and head, and slots are distinct across the batch, checked above).
            let st = unsafe { std::slice::from_raw_parts_mut(states.get().add(off), per_head) };
            let g = h / per_group;
            for t in t0..t0 + q.tokens.len() {
                let row = &xbc[t * cd..(t + 1) * cd];
                let x = &row[h * hd..(h + 1) * hd];
                let b = &row[inner + g * ds..inner + (g + 1) * ds];
                let c = &row[inner + (m.n_group + g) * ds..inner + (m.n_group + g + 1) * ds];
                let dt = zx[t * np + inner + cd + h] + mw.dt_bias[h];
                // SAFETY: token t's head h of y, inside ssm_y (`t < n_tok`, which sized it at
                // least `n_tok * inner`), written by this task alone (one per sequence and head).
                let y =
                    unsafe { std::slice::from_raw_parts_mut(ys.get().add(t * inner + h * hd), hd) };
                scan_head(kern, st, (x, dt, mw.a[h]), b, c, y);
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scan_decays_and_accumulates() {
        // One head of 1 row, d_state 2: dt large enough that softplus(dt) = dt.
        let mut st = [1.0f32, 2.0];
        let mut y = [0.0];
        let (dt, a) = (21.0f32, -0.01f32);
        scan_head(
            recurrent().ssm_scan,
            &mut st,
            (&[0.5], dt, a),
            &[1.0, 2.0],
            &[1.0, -1.0],
            &mut y,
        );
        let da = (21.0f32 * -0.01).exp();
        let s0 = 1.0 * da + 1.0 * (0.5 * 21.0);
        let s1 = 2.0 * da + 2.0 * (0.5 * 21.0);
        assert_eq!(st, [s0, s1]);
        assert_eq!(y, [s0 - s1]);
        assert_eq!(softplus(0.0), 2f32.ln());
    }
}
