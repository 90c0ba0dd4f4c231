//! The forward pass proper: one transformer, every family, driven by the model description
//! ([`ModelDesc`](crate::engine::model::desc::ModelDesc)). Per layer, for every new token of every sequence at once:
//!
//! ```text
//! n = rms_norm(x) * attn_norm
//! q, k, v = Wq n (+bq), Wk n (+bk), Wv n (+bv)          [k, v: not on a shared-K/V layer]
//! q, k = rms_norm per head (* q_norm, k_norm)          [qk_norm]
//! v = rms_norm per head                                [v_norm: gemma4]
//! q, k = rope(q), rope(k)   (the layer's table)        [unless NoPE]
//! q *= q_scale; q *= temperature(pos)                  [gemma, phi3; mistral3]
//! a = Wo attn(q, K, V; kq_scale, softcap, window, sinks) (+bo)   sinks: gpt-oss
//! a = rms_norm(a) * post_attention_norm                [post_norms]
//! x += a * residual_scale                              [granite]
//! m = rms_norm(x) * ffn_norm
//! f = Wdown (act(Wgate m (+bg)) * (Wup m (+bu))) (+bd)  act = SiLU or GELU
//!   or, on a mixture-of-experts layer (`engine::moe`):
//! f = sum over the router's top-k experts e of w_e * Wdown_e (silu(Wgate_e m) * Wup_e m)
//!     (+ the shared expert's dense FFN of m)           [granitemoe, granitehybrid]
//!     (+ that times sigmoid(w_gs · m))                  [qwen35moe]
//! f = rms_norm(f) * post_ffw_norm                      [post_norms]
//! x += f * residual_scale
//! x += the per-layer embedding block; x *= out_scale    [gemma4: model::per_layer_embd]
//! ```
//!
//! then `logits = Wout (rms_norm(x) * output_norm) (+bias)`, divided by `logit_scale`, softcapped.
//! The input is `embed(token) * embd_scale`. Each step is llama.cpp's graph op for op (same
//! order, same f32 roundings), so the logits follow the reference's.
//!
//! Every step is per token (norms, RoPE, activation quantization, attention) or a matmul whose
//! outputs are bit-identical per token whatever the batch (see `matmul`), so a sequence's
//! logits never depend on the batch it runs in nor on how its prompt was chunked.

use crate::engine::attention::{attend_batch, AttnBatch, AttnParams};
use crate::engine::batch::SeqInput;
use crate::engine::hparams::Activation;
use crate::engine::kv_cache::{KvCache, KvCacheError};
use crate::engine::matmul::{matmul, matmul_made, warm_next, MatJob, MatmulScratch};
use crate::engine::model::desc::MixerKind;
use crate::engine::model::head_width::{narrow_heads, widen_heads};
use crate::engine::model::loaded::{add_in_place, for_row_pairs, for_rows, Model};
use crate::engine::moe::experts_forward;
use crate::engine::ops::{
    geglu, rms_norm, rms_norm_in_place, rms_norm_unweighted_in_place, scale_in_place,
    softcap_in_place, swiglu, swiglu_oai,
};
use crate::engine::scratch::ForwardScratch;
use crate::engine::team::Team;
use crate::engine::weights::{AttnWeights, DenseFfn, FfnWeights, MixerWeights, MoeFfn};

/// `row = rms_norm(row) * w` per `w.len()`-wide head, in place (llama.cpp's q/k norm on the
/// `[head_dim, n_head]` view; a `w` as wide as the row normalizes it whole, olmoe's).
fn norm_heads(row: &mut [f32], w: &[f32], eps: f32) {
    for head in row.chunks_exact_mut(w.len()) {
        rms_norm_in_place(head, w, eps);
    }
}

/// `jobs` on `xn[r] = rms_norm(x[row_of(r)]) * norm` for `n` rows (`x` rows `d` wide): the
/// norm runs in the region that quantizes its rows for the jobs ([`matmul_made`]), and `xn`
/// holds the normed rows afterwards.
pub(super) fn norm_matmul(
    team: &Team,
    (x, d, norm, eps): (&[f32], usize, &[f32], f32),
    row_of: &(dyn Fn(usize) -> usize + Sync),
    xn: &mut [f32],
    n: usize,
    jobs: &mut [MatJob<'_>],
    mm: &mut MatmulScratch,
) {
    let make = |r: usize, row: &mut [f32]| {
        let t = row_of(r);
        rms_norm(&x[t * d..(t + 1) * d], norm, eps, row)
    };
    matmul_made(team, xn, &make, n, jobs, mm);
}

/// Mistral3's query temperature at `pos` (llama.cpp computes it in double, stores an f32).
fn temperature(scale: f32, floor_len: u32, pos: u32) -> f32 {
    let steps = f64::from((pos as f32 / floor_len as f32).floor());
    (steps + 1.0).ln().mul_add(f64::from(scale), 1.0) as f32
}

impl Model {
    /// The forward pass proper, on the team: the embeddings, then per layer its attention
    /// block and its FFN block, then the LM head for the `n_rows` rows asked for.
    pub(super) fn run(
        &self,
        seqs: &[SeqInput<'_>],
        n_tok: usize,
        n_rows: usize,
        kv: &mut KvCache,
        s: &mut ForwardScratch,
    ) -> Result<(), KvCacheError> {
        self.embed(seqs, n_tok, s);
        self.per_layer_inputs(seqs, n_tok, s);
        for (l, lw) in self.weights().layers.iter().enumerate() {
            match (&lw.mixer, self.desc().layers[l].mixer) {
                (
                    MixerWeights::Attention(a),
                    MixerKind::Attention { kv: kl } | MixerKind::SharedAttention { kv: kl },
                ) => self.attention_block(l, a, kl, seqs, n_tok, kv, s)?,
                (MixerWeights::ShortConv(c), MixerKind::ShortConv { state }) => {
                    self.shortconv_block(l, c, state, seqs, n_tok, kv, s)
                }
                (MixerWeights::GatedDeltaNet(g), MixerKind::GatedDeltaNet { state }) => {
                    self.deltanet_block(l, g, state, seqs, n_tok, kv, s)
                }
                (MixerWeights::Mamba2(m), MixerKind::Mamba2 { state }) => {
                    self.mamba2_block(l, m, state, seqs, n_tok, kv, s)
                }
                _ => unreachable!("layer weights are loaded for the description's mixer"),
            }
            match &lw.ffn {
                FfnWeights::Dense(f) => self.ffn_block(l, f, n_tok, n_rows, s),
                FfnWeights::Moe(m) => self.moe_block(l, m, n_tok, n_rows, s),
            }
            self.per_layer_block(l, n_tok, s);
        }
        if n_rows > 0 {
            self.lm_head(n_rows, s);
        }
        Ok(())
    }

    /// `s.x` = the token embeddings (the dequantized rows of token_embd, times the family's
    /// scale); `s.rope` = the RoPE angles, once per token and table for all layers.
    fn embed(&self, seqs: &[SeqInput<'_>], n_tok: usize, s: &mut ForwardScratch) {
        let c = self.desc();
        let w = self.weights();
        let d = c.n_embd;
        let n_rot = c.rope_stride();
        let (tok_seq, tok_pos) = (&s.tok_seq[..n_tok], &s.tok_pos[..n_tok]);
        let mut tok_ids = tok_seq.iter().zip(tok_pos).map(|(&sq, &p)| {
            let q = &seqs[sq as usize];
            q.tokens[p as usize - q.start_pos]
        });
        for row in s.x[..n_tok * d].chunks_mut(d) {
            let id = tok_ids.next().unwrap_or(0);
            w.token_embd.row_to_f32(id as usize, row);
            if let Some(e) = c.embd_scale {
                scale_in_place(row, e);
            }
        }
        self.trace("inp_embd", None, &s.x[..n_tok * d]);
        for (ri, rope) in c.ropes.iter().enumerate() {
            let nd = rope.n_dims;
            let buf = &mut s.rope[ri * n_tok * n_rot..ri * n_tok * n_rot + n_tok * nd];
            for_rows(&self.team, buf, nd, n_tok, |t, row| {
                rope.fill(tok_pos[t] as usize, row)
            });
        }
    }

    /// Layer `l`'s attention block: `s.x += Wo attn(norm(s.x))` with the family's biases,
    /// head norms, RoPE, scales and post-norm; this step's K and V go into `kv`'s layer `kl`
    /// first (a shared-K/V layer only reads layer `kl`). Heads narrower than the cache's are
    /// zero-padded to its width (`head_width`).
    #[allow(clippy::too_many_arguments)]
    fn attention_block(
        &self,
        l: usize,
        aw: &AttnWeights,
        kl: usize,
        seqs: &[SeqInput<'_>],
        n_tok: usize,
        kv: &mut KvCache,
        s: &mut ForwardScratch,
    ) -> Result<(), KvCacheError> {
        let c = self.desc();
        let lw = &self.weights().layers[l];
        let (d, hd, hdc) = (c.n_embd, c.head_dim_of(l), c.head_dim);
        let nq = c.n_head * hd;
        let nkv = c.n_head_kv * hd;
        let n_rot = c.rope_stride();
        let eps = c.rms_eps;
        let lt = Some(l);
        let lc = c.layers[l];
        let own_kv = matches!(lc.mixer, MixerKind::Attention { .. });
        let (tok_seq, tok_pos) = (&s.tok_seq[..n_tok], &s.tok_pos[..n_tok]);
        // Each matmul below first names the one after it: the idle threads prefetch its
        // first bytes meanwhile (attention and the serial work leave the bus idle).
        warm_next(&self.team, n_tok, &aw.wo);
        let q_job = MatJob {
            w: &aw.wq,
            out: if c.attn_out_gate {
                &mut s.q_full
            } else {
                &mut s.q
            },
        };
        let v_is_k = own_kv && aw.wv.is_none();
        // Q, and K and V when the layer has its own (V may be K's, gemma4); no allocation in
        // the decode step (tests/alloc.rs).
        let (wk, wv) = match (own_kv, aw.wk.as_ref()) {
            (true, Some(wk)) => (Some(wk), aw.wv.as_ref()),
            _ => (None, None),
        };
        let x_norm = (&s.x[..], d, &lw.attn_norm[..], eps);
        match (wk, wv) {
            (Some(wk), Some(wv)) => norm_matmul(
                &self.team,
                x_norm,
                &|t| t,
                &mut s.xn,
                n_tok,
                &mut [
                    q_job,
                    MatJob {
                        w: wk,
                        out: &mut s.k,
                    },
                    MatJob {
                        w: wv,
                        out: &mut s.v,
                    },
                ],
                &mut s.mm,
            ),
            (Some(wk), None) => norm_matmul(
                &self.team,
                x_norm,
                &|t| t,
                &mut s.xn,
                n_tok,
                &mut [
                    q_job,
                    MatJob {
                        w: wk,
                        out: &mut s.k,
                    },
                ],
                &mut s.mm,
            ),
            _ => norm_matmul(
                &self.team,
                x_norm,
                &|t| t,
                &mut s.xn,
                n_tok,
                &mut [q_job],
                &mut s.mm,
            ),
        }
        if v_is_k {
            // No V projection (gemma4's attention_k_eq_v): V is K's projection.
            s.v[..n_tok * nkv].copy_from_slice(&s.k[..n_tok * nkv]);
        }
        self.trace("attn_norm", lt, &s.xn[..n_tok * d]);
        if c.attn_out_gate {
            // Each head's query then its gate (llama.cpp's Qcur_full views).
            let full = &s.q_full;
            for_rows(&self.team, &mut s.q, nq, n_tok, |t, row| {
                let src = &full[t * 2 * nq..(t + 1) * 2 * nq];
                for (dst, head) in row.chunks_mut(hd).zip(src.chunks(2 * hd)) {
                    dst.copy_from_slice(&head[..hd]);
                }
            });
        }
        self.trace("q_mm", lt, &s.q[..n_tok * nq]);
        let rope = lc.rope.map(|ri| {
            let nd = c.ropes[ri].n_dims;
            (
                &c.ropes[ri],
                nd,
                &s.rope[ri * n_tok * n_rot..ri * n_tok * n_rot + n_tok * nd],
            )
        });
        // Bias, head norm and RoPE, the same for a q row and a k row.
        let shared = |t: usize, x: &mut [f32], bias: &Option<Vec<f32>>, norm: &Option<Vec<f32>>| {
            if let Some(b) = bias {
                add_in_place(x, b);
            }
            if let Some(nw) = norm {
                norm_heads(x, nw, eps);
            }
            if let Some((table, nd, cache)) = rope {
                table.apply(&cache[t * nd..(t + 1) * nd], x, hd);
            }
        };
        let q_row = |t: usize, row: &mut [f32]| {
            shared(t, row, &aw.bq, &aw.q_norm);
            if let Some(qs) = c.q_scale {
                scale_in_place(row, qs);
            }
            if let Some(tmp) = c.attn_temperature {
                scale_in_place(row, temperature(tmp.scale, tmp.floor_len, tok_pos[t]));
            }
        };
        if own_kv {
            self.trace("k_mm", lt, &s.k[..n_tok * nkv]);
            // Q's and K's bias, head norm and RoPE: one region for both.
            for_row_pairs(
                &self.team,
                (&mut s.q, nq),
                (&mut s.k, nkv),
                n_tok,
                |t, row, krow| {
                    q_row(t, row);
                    shared(t, krow, &aw.bk, &aw.k_norm);
                },
            );
            if aw.bv.is_some() || c.v_norm {
                for_rows(&self.team, &mut s.v, nkv, n_tok, |_, row| {
                    if let Some(b) = &aw.bv {
                        add_in_place(row, b)
                    }
                    if c.v_norm {
                        // Gemma 4's value norm has no weight.
                        for head in row.chunks_exact_mut(hd) {
                            rms_norm_unweighted_in_place(head, eps);
                        }
                    }
                });
            }
            self.trace("k", lt, &s.k[..n_tok * nkv]);
            self.trace("v", lt, &s.v[..n_tok * nkv]);
        } else {
            for_rows(&self.team, &mut s.q, nq, n_tok, q_row);
        }
        self.trace("q", lt, &s.q[..n_tok * nq]);
        widen_heads(&mut s.q, n_tok, c.n_head, hd, hdc);
        if own_kv {
            widen_heads(&mut s.k, n_tok, c.n_head_kv, hd, hdc);
            widen_heads(&mut s.v, n_tok, c.n_head_kv, hd, hdc);
            let nkc = c.n_head_kv * hdc;
            for t in 0..n_tok {
                let q = &seqs[tok_seq[t] as usize];
                let (kr, vr) = (&s.k[t * nkc..(t + 1) * nkc], &s.v[t * nkc..(t + 1) * nkc]);
                kv.write(kl, q.table, tok_pos[t] as usize, kr, vr)?;
            }
        }
        let params = AttnParams {
            scale: c.kq_scale,
            softcap: c.attn_softcap,
            window: lc.window,
            sinks: aw.attn_sinks.as_deref(),
        };
        let table_of = |i: usize| seqs[i].table;
        let batch = AttnBatch {
            tok_seq,
            tok_pos,
            table: &table_of,
            q: &s.q,
            params: &params,
        };
        attend_batch(
            &self.team,
            kv,
            kl,
            &batch,
            &mut s.attn[..n_tok * c.n_head * hdc],
            &s.attn_scratch,
            &mut s.attn_plan,
        )?;
        narrow_heads(&mut s.attn, n_tok, c.n_head, hdc, hd);
        if c.attn_out_gate {
            let full = &s.q_full;
            for_rows(&self.team, &mut s.attn, nq, n_tok, |t, row| {
                let src = &full[t * 2 * nq..(t + 1) * 2 * nq];
                for (o, head) in row.chunks_mut(hd).zip(src.chunks(2 * hd)) {
                    for (x, &g) in o.iter_mut().zip(&head[hd..]) {
                        *x *= 1.0 / (1.0 + (-g).exp());
                    }
                }
            });
            self.trace("attn_gated", lt, &s.attn[..n_tok * nq]);
        }
        self.trace("attn_out", lt, &s.attn[..n_tok * nq]);
        warm_next(&self.team, n_tok, lw.ffn.first());
        matmul(
            &self.team,
            &s.attn,
            n_tok,
            &mut [MatJob {
                w: &aw.wo,
                out: &mut s.proj,
            }],
            &mut s.mm,
        );
        self.finish_branch(
            aw.bo.as_deref(),
            aw.post_attn_norm.as_deref(),
            n_tok,
            &mut s.proj,
            &mut s.xn,
        );
        self.trace("attn_proj", lt, &s.proj[..n_tok * d]);
        add_in_place(&mut s.x[..n_tok * d], &s.proj[..n_tok * d]);
        self.trace("ffn_inp", lt, &s.x[..n_tok * d]);
        Ok(())
    }

    /// Layer `l`'s dense FFN block: `s.x += Wdown act(Wgate m, Wup m)`, `m = norm(s.x)`, with
    /// the family's biases and post-norm. Names the next layer's first matmul (or the LM
    /// head's) for the idle threads to prefetch.
    fn ffn_block(
        &self,
        l: usize,
        f: &DenseFfn,
        n_tok: usize,
        n_rows: usize,
        s: &mut ForwardScratch,
    ) {
        let c = self.desc();
        let lw = &self.weights().layers[l];
        let d = c.n_embd;
        let lt = Some(l);
        warm_next(&self.team, n_tok, &f.w_down);
        norm_matmul(
            &self.team,
            (&s.x, d, &lw.ffn_norm, c.rms_eps),
            &|t| t,
            &mut s.xn,
            n_tok,
            &mut [
                MatJob {
                    w: &f.w_gate,
                    out: &mut s.gate,
                },
                MatJob {
                    w: &f.w_up,
                    out: &mut s.up,
                },
            ],
            &mut s.mm,
        );
        self.trace("ffn_norm", lt, &s.xn[..n_tok * d]);
        self.warm_after(l, n_tok, n_rows);
        self.gated_down(l, f, c.activation, n_tok, s);
        self.finish_ffn(l, n_tok, s);
    }

    /// Layer `l`'s mixture-of-experts FFN block: `s.x += moe(m)` (plus the shared expert's
    /// FFN of `m` when the family has one), `m = norm(s.x)`; see `engine::moe`.
    fn moe_block(&self, l: usize, m: &MoeFfn, n_tok: usize, n_rows: usize, s: &mut ForwardScratch) {
        let c = self.desc();
        let lw = &self.weights().layers[l];
        let d = c.n_embd;
        let lt = Some(l);
        let (Some(md), Some(ms)) = (c.moe.as_ref(), s.moe.as_mut()) else {
            unreachable!("a mixture layer's model has a mixture description and its scratch");
        };
        // The shared expert's gate logit (qwen35moe) is a one-row matmul of the same input:
        // it joins the router's group.
        let mut jobs_buf = [
            MatJob {
                w: &m.router,
                out: &mut ms.logits,
            },
            MatJob {
                w: m.shared_gate.as_deref().unwrap_or(&m.router),
                out: &mut ms.shexp_gate,
            },
        ];
        let jobs = if m.shared_gate.is_some() {
            &mut jobs_buf[..]
        } else {
            &mut jobs_buf[..1]
        };
        norm_matmul(
            &self.team,
            (&s.x, d, &lw.ffn_norm, c.rms_eps),
            &|t| t,
            &mut s.xn,
            n_tok,
            jobs,
            &mut s.mm,
        );
        self.trace("ffn_norm", lt, &s.xn[..n_tok * d]);
        self.trace("ffn_moe_logits", lt, &ms.logits[..n_tok * md.n_expert]);
        match &m.shared {
            Some(sh) => warm_next(&self.team, n_tok, &sh.w_gate),
            None => self.warm_after(l, n_tok, n_rows),
        }
        // With a shared expert the experts' sum goes aside and the shared FFN into s.proj.
        let moe_out = match m.shared {
            Some(_) => &mut s.moe_out,
            None => &mut s.proj,
        };
        experts_forward(&self.team, md, m, (&s.xn, d), n_tok, ms, moe_out);
        self.trace("ffn_moe_out", lt, &moe_out[..n_tok * d]);
        if let Some(sh) = &m.shared {
            // The shared expert reads the same normed rows; its output and the experts' are
            // added (ggml_add(moe_out, ffn_shexp)).
            warm_next(&self.team, n_tok, &sh.w_down);
            matmul(
                &self.team,
                &s.xn,
                n_tok,
                &mut [
                    MatJob {
                        w: &sh.w_gate,
                        out: &mut s.gate,
                    },
                    MatJob {
                        w: &sh.w_up,
                        out: &mut s.up,
                    },
                ],
                &mut s.mm,
            );
            self.warm_after(l, n_tok, n_rows);
            self.gated_down(l, sh, Activation::Silu, n_tok, s);
            self.trace("ffn_shexp", lt, &s.proj[..n_tok * d]);
            if let (Some(_), Some(ms)) = (&m.shared_gate, s.moe.as_ref()) {
                // ffn_shexp * sigmoid(gate logit), per token (ggml_sigmoid, ggml_mul).
                let g = &ms.shexp_gate;
                for_rows(&self.team, &mut s.proj, d, n_tok, |t, row| {
                    let w = 1.0 / (1.0 + (-g[t]).exp());
                    row.iter_mut().for_each(|x| *x *= w);
                });
                self.trace("ffn_shexp_gated", lt, &s.proj[..n_tok * d]);
            }
            add_in_place(&mut s.proj[..n_tok * d], &s.moe_out[..n_tok * d]);
        }
        self.finish_ffn(l, n_tok, s);
    }

    /// Names what the team multiplies after layer `l`'s FFN: the next layer's Q, or the LM
    /// head after the last layer.
    fn warm_after(&self, l: usize, n_tok: usize, n_rows: usize) {
        let w = self.weights();
        match w.layers.get(l + 1) {
            Some(next) => warm_next(&self.team, n_tok, next.mixer.first()),
            None if n_rows > 0 => warm_next(&self.team, n_rows, &w.output),
            None => self.team.warm().clear(),
        }
    }

    /// `s.proj = Wdown (act(s.gate + bg) * (s.up + bu)) + ...`: the biases, then the
    /// activation in the region that quantizes its rows for down (`s.xn` holds them after).
    fn gated_down(
        &self,
        l: usize,
        f: &DenseFfn,
        act: Activation,
        n_tok: usize,
        s: &mut ForwardScratch,
    ) {
        let lt = Some(l);
        let nf = f.w_gate.n_out;
        for (bias, buf) in [(&f.b_up, &mut s.up), (&f.b_gate, &mut s.gate)] {
            if let Some(b) = bias {
                for_rows(&self.team, buf, nf, n_tok, |_, row| add_in_place(row, b));
            }
        }
        self.trace("ffn_gate", lt, &s.gate[..n_tok * nf]);
        self.trace("ffn_up", lt, &s.up[..n_tok * nf]);
        let (gate, up) = (&s.gate, &s.up);
        let activate = |t: usize, row: &mut [f32]| {
            let (g, u) = (&gate[t * nf..(t + 1) * nf], &up[t * nf..(t + 1) * nf]);
            match act {
                Activation::Silu => swiglu(g, u, row),
                Activation::Gelu => geglu(g, u, row),
                Activation::SwigluOai => swiglu_oai(g, u, row),
            }
        };
        matmul_made(
            &self.team,
            &mut s.xn,
            &activate,
            n_tok,
            &mut [MatJob {
                w: &f.w_down,
                out: &mut s.proj,
            }],
            &mut s.mm,
        );
        self.trace("ffn_act", lt, &s.xn[..n_tok * nf]);
        if let Some(b) = &f.b_down {
            let d = f.w_down.n_out;
            for_rows(&self.team, &mut s.proj, d, n_tok, |_, row| {
                add_in_place(row, b)
            });
        }
    }

    /// The end of layer `l`'s FFN branch in `s.proj`: post-norm and residual scale, then the
    /// residual add into `s.x`.
    fn finish_ffn(&self, l: usize, n_tok: usize, s: &mut ForwardScratch) {
        let d = self.desc().n_embd;
        let lw = &self.weights().layers[l];
        self.finish_branch(
            None,
            lw.post_ffn_norm.as_deref(),
            n_tok,
            &mut s.proj,
            &mut s.xn,
        );
        self.trace("ffn_out", Some(l), &s.proj[..n_tok * d]);
        add_in_place(&mut s.x[..n_tok * d], &s.proj[..n_tok * d]);
        self.trace("l_out", Some(l), &s.x[..n_tok * d]);
    }

    /// The final norm and the LM head for the `n_rows` rows asked for (`s.logit_tok` names
    /// their tokens), then the output bias, logit scale and final softcap.
    fn lm_head(&self, n_rows: usize, s: &mut ForwardScratch) {
        let c = self.desc();
        let w = self.weights();
        let d = c.n_embd;
        // The next step starts with the first layer's Q (its embedding lookup and norm run on
        // the caller).
        if let Some(first) = w.layers.first() {
            warm_next(&self.team, n_rows, first.mixer.first());
        }
        let logit_tok = &s.logit_tok;
        norm_matmul(
            &self.team,
            (&s.x, d, &w.output_norm, c.rms_eps),
            &|r| logit_tok[r] as usize,
            &mut s.out_norm,
            n_rows,
            &mut [MatJob {
                w: &w.output,
                out: &mut s.logits,
            }],
            &mut s.mm,
        );
        self.trace("result_norm", None, &s.out_norm[..n_rows * d]);
        let nv = c.n_vocab;
        if w.output_bias.is_some() || c.logit_scale.is_some() || c.final_softcap.is_some() {
            let bias = w.output_bias.as_deref();
            for_rows(&self.team, &mut s.logits, nv, n_rows, |_, row| {
                if let Some(b) = bias {
                    add_in_place(row, b);
                }
                if let Some(ls) = c.logit_scale {
                    scale_in_place(row, 1.0 / ls);
                }
                if let Some(cap) = c.final_softcap {
                    softcap_in_place(row, cap);
                }
            });
        }
        self.trace("result_output", None, &s.logits[..n_rows * nv]);
    }

    /// The end of an attention or FFN branch in `s.proj`: its output bias, its post-norm
    /// (through `s.xn`) and the residual scale, before the residual add.
    pub(super) fn finish_branch(
        &self,
        bias: Option<&[f32]>,
        post_norm: Option<&[f32]>,
        n_tok: usize,
        proj: &mut [f32],
        xn: &mut [f32],
    ) {
        let c = self.desc();
        let d = c.n_embd;
        if let Some(b) = bias {
            for_rows(&self.team, proj, d, n_tok, |_, row| add_in_place(row, b));
        }
        if let Some(nw) = post_norm {
            let p = &*proj;
            for_rows(&self.team, xn, d, n_tok, |t, row| {
                rms_norm(&p[t * d..(t + 1) * d], nw, c.rms_eps, row)
            });
            proj[..n_tok * d].copy_from_slice(&xn[..n_tok * d]);
        }
        if let Some(r) = c.residual_scale {
            for_rows(&self.team, proj, d, n_tok, |_, row| scale_in_place(row, r));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn temperature_follows_llama_cpp() {
        // log(floor(p / 8192) + 1) * 0.1 + 1
        assert_eq!(temperature(0.1, 8192, 0), 1.0);
        assert_eq!(temperature(0.1, 8192, 8191), 1.0);
        let t = temperature(0.1, 8192, 8192);
        assert!((t - (1.0 + 0.1 * 2f32.ln())).abs() < 1e-6);
    }

    #[test]
    fn head_norm_normalizes_each_head() {
        let mut row = vec![1.0, 1.0, 2.0, 2.0];
        norm_heads(&mut row, &[1.0, 1.0], 0.0);
        assert_eq!(row, vec![1.0, 1.0, 1.0, 1.0]);
    }
}
