//! Qwen3.5's gated DeltaNet mixer (llama.cpp `src/models/qwen35.cpp`,
//! `build_layer_attn_linear`, and ggml-cpu's `ggml_compute_forward_gated_delta_net`), for
//! every new token of every sequence at once:
//!
//! ```text
//! n = rms_norm(x) * attn_norm
//! qkv = Wqkv n;  z = Wgate n                     attn_qkv: [c, d], attn_gate: [vd, d]
//! beta = sigmoid(Wbeta n)                         per value head
//! g = softplus(Walpha n + dt_bias) * a            per value head (the decay's log)
//! u = silu(conv(qkv))                             depthwise, causal, d_conv taps (ssm_conv)
//! q, k = l2_norm(u[q]), l2_norm(u[k]) per head;  v = u[v]
//! per value head h (key head h % n_k_heads), token by token:
//!     S = exp(g) S
//!     delta = (v - S^T k) beta
//!     S += k delta^T
//!     o = S^T q / sqrt(head_dim)
//! x += Wout (rms_norm(o) * ssm_norm * silu(z))     per head; ssm_out: [d, vd]
//! ```
//!
//! The recurrence (per token and head, `kernels::recurrent`'s delta rule: SIMD twins of a
//! scalar one, bit-identical) runs token by token for a prefill as for a decode step, which is what
//! llama.cpp's CPU backend computes (its graph uses the fused `ggml_gated_delta_net` op by
//! default, a per-token loop over each head's state; the chunked graph of
//! `build_delta_net_chunking` is only its fallback). So a sequence's outputs are the same f32
//! operations in the same order whatever the batch and however its prompt is chunked: the
//! mixer keeps the engine's batch invariance. The state (the convolution's last `d_conv - 1`
//! inputs, then one `head_dim x head_dim` matrix per value head, `S[i][j]` stored at
//! `[j * head_dim + i]` as ggml keeps it) lives in the sequence's recurrent-state slot.

use super::causal_conv::{advance_windows, assert_distinct_slots, conv_at, window_of};
use crate::engine::batch::SeqInput;
use crate::engine::kv_cache::KvCache;
use crate::engine::matmul::{matmul_made, warm_next, MatJob};
use crate::engine::model::desc::GdnDesc;
use crate::engine::model::forward::norm_matmul;
use crate::engine::model::loaded::{add_in_place, for_row_pairs, for_rows, Model};
use crate::engine::ops::rms_norm_in_place;
use crate::engine::ops::silu::{mul_silu_in_place, silu_in_place};
use crate::engine::scratch::ForwardScratch;
use crate::engine::team::SendPtr;
use crate::engine::weights::GdnWeights;
use crate::kernels::recurrent::recurrent;

/// Head widths up to this many floats take the L2 norm's unit weights from [`ONES`] (Qwen3.5's
/// are 128); wider ones allocate them once per layer.
const STACK_HEAD: usize = 256;
/// The L2 norm's unit weights for heads up to `STACK_HEAD` wide.
static ONES: [f32; STACK_HEAD] = [1.0; STACK_HEAD];

/// ggml's softplus: `x` above 20, else `ln(1 + e^x)`.
fn softplus(x: f32) -> f32 {
    if x > 20.0 {
        x
    } else {
        (1.0 + x.exp()).ln()
    }
}

/// llama.cpp's `build_gdn_l2_norm`: `rms_norm(x, eps / n) / sqrt(n)` (so `x / sqrt(sum x^2 +
/// eps)`, in rms_norm's arithmetic); `ones` is `n` ones.
fn l2_norm(x: &mut [f32], ones: &[f32], eps: f32) {
    let n = x.len() as f32;
    rms_norm_in_place(x, ones, eps / n);
    let s = 1.0 / n.sqrt();
    for v in x.iter_mut() {
        *v *= s;
    }
}

/// Where token `t` lies in its sequence: `(first batch token of the sequence, tokens of the
/// sequence in this batch, index of t among them)`.
fn seq_place(
    seqs: &[SeqInput<'_>],
    tok_seq: &[u32],
    tok_pos: &[u32],
    t: usize,
) -> (usize, usize, usize) {
    let q = &seqs[tok_seq[t] as usize];
    let j = tok_pos[t] as usize - q.start_pos;
    (t - j, q.tokens.len(), j)
}

impl Model {
    /// Layer `l`'s gated DeltaNet block: `s.x += Wout gated_norm(delta_rule(conv(...)))` of
    /// the normed `s.x`, reading and then advancing each sequence's convolution window and
    /// head states at offset `state` of its recurrent state in `kv`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn deltanet_block(
        &self,
        l: usize,
        gw: &GdnWeights,
        state: usize,
        seqs: &[SeqInput<'_>],
        n_tok: usize,
        kv: &mut KvCache,
        s: &mut ForwardScratch,
    ) {
        let c = self.desc();
        let Some(g) = c.deltanet else {
            unreachable!("a DeltaNet layer's model has the DeltaNet's shape");
        };
        let GdnDesc {
            d_conv: _,
            head_dim: hd,
            n_k_heads: hk,
            n_v_heads: hv,
        } = g;
        let lw = &self.weights().layers[l];
        let (d, eps) = (c.n_embd, c.rms_eps);
        let (cd, kd, vd) = (g.conv_dim(), g.key_dim(), g.value_dim());
        let win = g.window_floats();
        let lt = Some(l);
        warm_next(&self.team, n_tok, &gw.out);
        norm_matmul(
            &self.team,
            (&s.x, d, &lw.attn_norm, eps),
            &|t| t,
            &mut s.xn,
            n_tok,
            &mut [
                MatJob {
                    w: &gw.wqkv,
                    out: &mut s.gdn.qkv,
                },
                MatJob {
                    w: &gw.wgate,
                    out: &mut s.gdn.z,
                },
                MatJob {
                    w: &gw.wbeta,
                    out: &mut s.gdn.beta,
                },
                MatJob {
                    w: &gw.walpha,
                    out: &mut s.gdn.alpha,
                },
            ],
            &mut s.mm,
        );
        self.trace("attn_norm", lt, &s.xn[..n_tok * d]);
        self.trace("linear_attn_qkv_mixed", lt, &s.gdn.qkv[..n_tok * cd]);
        // The per-head gates: sigmoid(beta); softplus(alpha + dt_bias) * a.
        for_row_pairs(
            &self.team,
            (&mut s.gdn.beta, hv),
            (&mut s.gdn.alpha, hv),
            n_tok,
            |_, b, a| {
                for x in b.iter_mut() {
                    *x = 1.0 / (1.0 + (-*x).exp());
                }
                for ((x, &dt), &ah) in a.iter_mut().zip(&gw.dt_bias).zip(&gw.a) {
                    *x = softplus(*x + dt) * ah;
                }
            },
        );
        // The causal convolution over q, k, v (earlier inputs from the state's window), SiLU,
        // then q and k L2-normed per head.
        let (tok_seq, tok_pos) = (&s.tok_seq[..n_tok], &s.tok_pos[..n_tok]);
        let cache: &KvCache = kv;
        let qkv = &s.gdn.qkv;
        let mut heap = Vec::new();
        let ones: &[f32] = if hd <= STACK_HEAD {
            &ONES[..hd]
        } else {
            heap.resize(hd, 1.0f32);
            &heap
        };
        for_rows(&self.team, &mut s.gdn.conv, cd, n_tok, |t, row| {
            let (window, j) = window_of(cache, seqs, (tok_seq, tok_pos), t, (state, win));
            conv_at(&gw.conv, qkv, window, t, j, row);
            silu_in_place(row);
            for head in row[..2 * kd].chunks_exact_mut(hd) {
                l2_norm(head, ones, eps);
            }
        });
        self.trace("conv_output_silu", lt, &s.gdn.conv[..n_tok * cd]);
        // The delta rule: one task per sequence and value head (token after token inside
        // it), one team launch for the whole batch.
        advance_windows(kv, seqs, (state, win), &s.gdn.qkv, cd);
        assert_distinct_slots(seqs);
        let scale = 1.0 / (hd as f32).sqrt();
        let (conv, beta, alpha) = (&s.gdn.conv, &s.gdn.beta, &s.gdn.alpha);
        let floats = kv.state_shape().floats_per_seq;
        let n_states = kv.state_shape().n_slots * floats;
        let states = SendPtr(kv.states_mut().as_mut_ptr());
        let n_out = s.gdn.out.len();
        let outs = SendPtr(s.gdn.out.as_mut_ptr());
        let per_head = hd * hd;
        let delta_rule = recurrent().delta_rule;
        self.team.run(seqs.len() * hv, &|task, _| {
            let (qi, h) = (task / hv, task % hv);
            let q = &seqs[qi];
            let Some(slot) = q.table.state_slot() else {
                return; // plan() refuses a recurrent model's sequence without a slot
            };
            let (t0, n) = (
                seqs[..qi].iter().map(|p| p.tokens.len()).sum::<usize>(),
                q.tokens.len(),
            );
            let off = slot as usize * floats + state + win + h * per_head;
            assert!(off + per_head <= n_states, "DeltaNet state out of range");
            assert!((t0 + n) * vd <= n_out, "DeltaNet output out of range");
            // SAFETY: `off..off + per_head` lies inside the state buffer (checked above); it is
            // head h's matrix in this sequence's slot, which no other task touches (one task
            // per sequence and head, slots distinct across the batch: checked above).
            let m = unsafe { std::slice::from_raw_parts_mut(states.get().add(off), per_head) };
            // SAFETY: head h's `n * hd` outputs of this sequence: its block of `n * vd` starts at
            // `t0 * vd` and lies inside gdn.out (checked above); head h's part of it is written
            // by this task alone.
            let o = unsafe {
                std::slice::from_raw_parts_mut(outs.get().add(t0 * vd + h * n * hd), n * hd)
            };
            let kh = h % hk;
            for j in 0..n {
                let t = t0 + j;
                let row = &conv[t * cd..(t + 1) * cd];
                // The decay exp(g) as ggml computes it, then the kernel in its order.
                let coef = (alpha[t * hv + h].exp(), beta[t * hv + h], scale);
                delta_rule(
                    m,
                    &row[kh * hd..(kh + 1) * hd],
                    &row[kd + kh * hd..kd + (kh + 1) * hd],
                    &row[2 * kd + h * hd..2 * kd + (h + 1) * hd],
                    coef,
                    &mut o[j * hd..(j + 1) * hd],
                );
            }
        });
        // rms_norm(o) * ssm_norm * silu(z) per head, quantized for ssm_out in one region.
        let (out, z) = (&s.gdn.out, &s.gdn.z);
        let gated = |t: usize, row: &mut [f32]| {
            let (t0, n, j) = seq_place(seqs, tok_seq, tok_pos, t);
            for h in 0..hv {
                let src = t0 * vd + h * n * hd + j * hd;
                let dst = &mut row[h * hd..(h + 1) * hd];
                dst.copy_from_slice(&out[src..src + hd]);
                rms_norm_in_place(dst, &gw.norm, eps);
                mul_silu_in_place(dst, &z[t * vd + h * hd..t * vd + (h + 1) * hd]);
            }
        };
        matmul_made(
            &self.team,
            &mut s.xn,
            &gated,
            n_tok,
            &mut [MatJob {
                w: &gw.out,
                out: &mut s.proj,
            }],
            &mut s.mm,
        );
        self.trace("final_output", lt, &s.xn[..n_tok * vd]);
        self.finish_branch(None, None, n_tok, &mut s.proj, &mut s.xn);
        self.trace("attn_proj", lt, &s.proj[..n_tok * d]);
        add_in_place(&mut s.x[..n_tok * d], &s.proj[..n_tok * d]);
        self.trace("ffn_inp", lt, &s.x[..n_tok * d]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The delta rule (the scalar twin: every ISA's kernel gives its bits,
    /// `kernels::tests::recurrent`) against its definition in f64 on a 2-wide head over three
    /// tokens.
    #[test]
    fn delta_rule_follows_the_rule() {
        let rule = crate::kernels::recurrent::recurrent_for(crate::kernels::Isa::Scalar).delta_rule;
        let n = 2;
        let mut m = vec![0f32; n * n];
        let mut s = [[0f64; 2]; 2]; // s[i][j]
        let toks = [
            (
                [0.6f32, 0.8],
                [1.0f32, 0.0],
                [0.5f32, -1.0],
                -0.1f32,
                0.7f32,
            ),
            ([0.0, 1.0], [0.6, 0.8], [2.0, 0.25], -0.5, 0.2),
            ([0.8, -0.6], [0.0, 1.0], [-1.0, 1.5], -0.01, 0.9),
        ];
        for (q, k, v, g, b) in toks {
            let mut o = [0f32; 2];
            rule(&mut m, &q, &k, &v, (g.exp(), b, 0.5), &mut o);
            let e = f64::from(g).exp();
            for row in s.iter_mut() {
                for x in row.iter_mut() {
                    *x *= e;
                }
            }
            let d: Vec<f64> = (0..n)
                .map(|j| {
                    let sk: f64 = (0..n).map(|i| s[i][j] * f64::from(k[i])).sum();
                    (f64::from(v[j]) - sk) * f64::from(b)
                })
                .collect();
            for i in 0..n {
                for j in 0..n {
                    s[i][j] += f64::from(k[i]) * d[j];
                }
            }
            for j in 0..n {
                let want: f64 = (0..n).map(|i| s[i][j] * f64::from(q[i])).sum::<f64>() * 0.5;
                assert!((f64::from(o[j]) - want).abs() < 1e-5, "{} vs {want}", o[j]);
            }
        }
    }

    #[test]
    fn l2_norm_gives_unit_rows_and_softplus_follows_ggml() {
        let mut x = vec![3.0f32, 4.0];
        l2_norm(&mut x, &[1.0, 1.0], 1e-6);
        assert!((x[0] - 0.6).abs() < 1e-6 && (x[1] - 0.8).abs() < 1e-6);
        assert_eq!(softplus(25.0), 25.0);
        assert!((softplus(0.0) - 2f32.ln()).abs() < 1e-7);
    }
}
