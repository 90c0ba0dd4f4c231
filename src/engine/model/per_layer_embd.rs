//! Gemma 4's per-layer embeddings, as llama.cpp's `gemma4.cpp` computes them.
//!
//! Once per step, for every token `t` (`p` = `n_embd_per_layer`, `x0` = the scaled token
//! embedding the first layer reads, `L` = layers):
//!
//! ```text
//! proj[t]    = (per_layer_model_proj x0[t]) * (1/sqrt(n_embd))         [L * p]
//! proj[t][l] = rms_norm(proj[t][l]) * per_layer_proj_norm              per p-wide slice
//! ple[t]     = (proj[t] + per_layer_token_embd[token] * sqrt(p)) * (1/sqrt(2))
//! ```
//!
//! then at the end of layer `l`, after its FFN's residual add (and before the layer's output
//! scale):
//!
//! ```text
//! x += rms_norm(proj_l (gelu(inp_gate_l x) * ple[t][l])) * post_norm_l
//! ```
//!
//! Every step is per token (a row lookup, matmuls whose outputs are bit-identical per token
//! whatever the batch, per-row norms and scales), so batch invariance holds.

use crate::engine::batch::SeqInput;
use crate::engine::matmul::{matmul, matmul_made, MatJob};
use crate::engine::model::loaded::{add_in_place, for_rows, Model};
use crate::engine::ops::{geglu, rms_norm, rms_norm_in_place, scale_in_place};
use crate::engine::scratch::ForwardScratch;

impl Model {
    /// `s.ple` = every token's per-layer inputs `[T][L * p]` from the scaled token embeddings
    /// in `s.x` (call right after the embedding, before the first layer).
    pub(super) fn per_layer_inputs(
        &self,
        seqs: &[SeqInput<'_>],
        n_tok: usize,
        s: &mut ForwardScratch,
    ) {
        let c = self.desc();
        let Some(pw) = &self.weights().ple else {
            return;
        };
        let (d, p) = (c.n_embd, c.n_embd_per_layer);
        let w = c.n_layer * p;
        matmul(
            &self.team,
            &s.x,
            n_tok,
            &mut [MatJob {
                w: &pw.model_proj,
                out: &mut s.ple,
            }],
            &mut s.mm,
        );
        let (tok_seq, tok_pos) = (&s.tok_seq[..n_tok], &s.tok_pos[..n_tok]);
        let token = |t: usize| {
            let q = &seqs[tok_seq[t] as usize];
            q.tokens[tok_pos[t] as usize - q.start_pos] as usize
        };
        for_rows(&self.team, &mut s.ple_tok, w, n_tok, |t, row| {
            pw.tok_embd.row_to_f32(token(t), row)
        });
        let proj_scale = 1.0 / (d as f32).sqrt();
        let tok_scale = (p as f32).sqrt();
        let input_scale = 1.0 / 2f32.sqrt();
        let (eps, tok_rows) = (c.rms_eps, &s.ple_tok);
        for_rows(&self.team, &mut s.ple, w, n_tok, |t, row| {
            scale_in_place(row, proj_scale);
            let tok = &tok_rows[t * w..(t + 1) * w];
            for (slice, tok) in row.chunks_exact_mut(p).zip(tok.chunks_exact(p)) {
                rms_norm_in_place(slice, &pw.proj_norm, eps);
                for (v, &e) in slice.iter_mut().zip(tok) {
                    *v = (*v + e * tok_scale) * input_scale;
                }
            }
        });
        self.trace("inp_per_layer", None, &s.ple[..n_tok * w]);
    }

    /// Layer `l`'s per-layer embedding block and output scale on `s.x` (after its FFN).
    pub(super) fn per_layer_block(&self, l: usize, n_tok: usize, s: &mut ForwardScratch) {
        let c = self.desc();
        let lw = &self.weights().layers[l];
        let d = c.n_embd;
        if let Some(pl) = &lw.ple {
            let p = c.n_embd_per_layer;
            let w = c.n_layer * p;
            matmul(
                &self.team,
                &s.x,
                n_tok,
                &mut [MatJob {
                    w: &pl.inp_gate,
                    out: &mut s.gate,
                }],
                &mut s.mm,
            );
            let (gate, ple) = (&s.gate, &s.ple);
            let activate = |t: usize, row: &mut [f32]| {
                let inp = &ple[t * w + l * p..t * w + (l + 1) * p];
                geglu(&gate[t * p..(t + 1) * p], inp, row)
            };
            matmul_made(
                &self.team,
                &mut s.xn,
                &activate,
                n_tok,
                &mut [MatJob {
                    w: &pl.proj,
                    out: &mut s.proj,
                }],
                &mut s.mm,
            );
            let (proj, eps) = (&s.proj, c.rms_eps);
            for_rows(&self.team, &mut s.xn, d, n_tok, |t, row| {
                rms_norm(&proj[t * d..(t + 1) * d], &pl.post_norm, eps, row)
            });
            self.trace("per_layer_embd_out", Some(l), &s.xn[..n_tok * d]);
            add_in_place(&mut s.x[..n_tok * d], &s.xn[..n_tok * d]);
        }
        if let Some(k) = lw.out_scale {
            for_rows(&self.team, &mut s.x, d, n_tok, |_, row| {
                scale_in_place(row, k)
            });
            self.trace("out_scaled", Some(l), &s.x[..n_tok * d]);
        }
    }
}
