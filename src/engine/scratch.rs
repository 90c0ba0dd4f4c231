//! Every buffer the forward pass writes, allocated once for a maximum batch so that a step
//! (prefill chunk or decode) allocates nothing.

use crate::engine::attention::{AttnPlan, AttnScratch};
use crate::engine::error::EngineError;
use crate::engine::kv_cache::KvCacheConfig;
use crate::engine::line_buf::LineBuf;
use crate::engine::matmul::MatmulScratch;
use crate::engine::model::ModelDesc;
use crate::engine::moe::MoeScratch;
use std::sync::Mutex;

/// Size limits of one forward call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchLimits {
    /// New tokens in one call, over all sequences.
    pub max_tokens: usize,
    /// Sequences in one call.
    pub max_seqs: usize,
    /// Logits rows in one call (each is `n_vocab` f32).
    pub max_logit_rows: usize,
}

impl Default for BatchLimits {
    fn default() -> Self {
        BatchLimits {
            max_tokens: 512,
            max_seqs: 64,
            max_logit_rows: 64,
        }
    }
}

/// The forward pass's working memory. Create one per engine (it is reused by every call).
pub struct ForwardScratch {
    pub(crate) limits: BatchLimits,
    // Per token of the batch.
    pub(crate) tok_seq: Vec<u32>,
    pub(crate) tok_pos: Vec<u32>,
    /// Batch token index of each logits row.
    pub(crate) logit_tok: Vec<u32>,
    /// Per sequence: first logits row (`max_seqs + 1` entries).
    pub(crate) row_start: Vec<usize>,
    /// Residual stream `[T][d]`.
    pub(crate) x: LineBuf,
    /// Normed input of the next matmul `[T][max(d, ...)]`.
    pub(crate) xn: LineBuf,
    pub(crate) q: LineBuf,    // [T][n_head * head_dim]
    pub(crate) k: LineBuf,    // [T][n_head_kv * head_dim]
    pub(crate) v: LineBuf,    // [T][n_head_kv * head_dim]
    pub(crate) attn: LineBuf, // [T][n_head * head_dim]
    pub(crate) proj: LineBuf, // [T][d]
    pub(crate) gate: LineBuf, // [T][max_ff]
    pub(crate) up: LineBuf,   // [T][max_ff]
    /// RoPE cos/sin per table and token `[n_tables][T][n_rot]`.
    pub(crate) rope: LineBuf,
    /// Final-normed rows that want logits `[R][d]`.
    pub(crate) out_norm: LineBuf,
    pub(crate) logits: LineBuf, // [R][n_vocab]
    pub(crate) mm: MatmulScratch,
    /// One per team thread (indexed by the worker index `Team::run` passes); locks are uncontended.
    pub(crate) attn_scratch: Vec<Mutex<AttnScratch>>,
    /// Attention's task lists and split-K partials.
    pub(crate) attn_plan: AttnPlan,
    /// A mixture's routing and expert buffers (models with one).
    pub(crate) moe: Option<MoeScratch>,
    /// The experts' sum `[T][d]` while a shared expert runs (models with one).
    pub(crate) moe_out: LineBuf,
    /// A short convolution's B, C, x rows `[T][3d]` and B*x rows `[T][d]` (models with one).
    pub(crate) conv_bcx: LineBuf,
    pub(crate) conv_bx: LineBuf,
    /// A gated q's query-and-gate rows `[T][2 * n_head * head_dim]` (qwen35).
    pub(crate) q_full: LineBuf,
    /// The gated DeltaNet's buffers (models with one, see `model::deltanet`).
    pub(crate) gdn: GdnScratch,
    /// Per-layer embedding inputs `[T][n_layer * p]` and the token rows they start from
    /// (models with them, see `model::per_layer_embd`).
    pub(crate) ple: LineBuf,
    pub(crate) ple_tok: LineBuf,
    /// Mamba2's input projection `[T][d_in_proj]`, its convolution's input `[T][conv_dim]`
    /// and output `[T][conv_dim]`, its scan's output `[T][d_inner]` (models with one).
    pub(crate) ssm_zxbcdt: LineBuf,
    pub(crate) ssm_xbc: LineBuf,
    pub(crate) ssm_conv: LineBuf,
    pub(crate) ssm_y: LineBuf,
}

/// The gated DeltaNet's per-token rows.
pub(crate) struct GdnScratch {
    /// q, k, v projections, the convolution's input `[T][c]`.
    pub(crate) qkv: LineBuf,
    /// The convolved, SiLU'd rows, q and k then L2-normed `[T][c]`.
    pub(crate) conv: LineBuf,
    /// The output gate z `[T][vd]`.
    pub(crate) z: LineBuf,
    /// Beta, then sigmoid(beta) `[T][hv]`.
    pub(crate) beta: LineBuf,
    /// Alpha, then the decay's log `softplus(alpha + dt) * a` `[T][hv]`.
    pub(crate) alpha: LineBuf,
    /// The delta rule's output, per sequence head-major: a sequence of `n` tokens starting
    /// at token `t0` holds head `h`'s rows at `[t0 * vd + h * n * hd ..][n][hd]`.
    pub(crate) out: LineBuf,
}

impl ForwardScratch {
    /// Buffers for `desc` and `limits`, with one attention scratch per thread of a `threads`
    /// team attending over a cache shaped `kv`.
    pub fn new(
        desc: &ModelDesc,
        limits: BatchLimits,
        kv: &KvCacheConfig,
        threads: usize,
    ) -> Result<ForwardScratch, EngineError> {
        let BatchLimits {
            max_tokens: t,
            max_seqs,
            max_logit_rows: r,
        } = limits;
        if t == 0 || max_seqs == 0 {
            return Err(EngineError::BadHParam {
                key: "batch limits",
                message: "max_tokens and max_seqs must be at least 1".to_string(),
            });
        }
        let d = desc.n_embd;
        let nq = desc.n_head * desc.head_dim;
        let nkv = desc.n_head_kv * desc.head_dim;
        let f = desc.max_ff().max(desc.n_embd_per_layer);
        let ple = desc.n_layer * desc.n_embd_per_layer;
        let n_expert = desc.moe.map_or(0, |m| m.n_expert);
        let gdn = desc.deltanet;
        let (gdn_c, gdn_vd) = gdn.map_or((0, 0), |g| (g.conv_dim(), g.value_dim()));
        let nq_full = if desc.attn_out_gate { 2 * nq } else { 0 };
        let ssm = desc.mamba2;
        let (ssm_in, ssm_conv, ssm_inner) =
            ssm.map_or((0, 0, 0), |m| (m.d_in_proj, m.conv_dim, m.d_inner));
        let max_k = d.max(nq).max(f).max(gdn_vd).max(ssm_inner);
        let conv = desc.conv_l_cache > 0;
        // Largest quantized activation row: Q8_1 (36 bytes per 32) or f32 rows, whichever.
        let max_act_row = (max_k * 4).max(max_k.div_ceil(32) * 36);
        let max_tmp = (t * (nq + 2 * nkv))
            .max(t * 2 * f)
            .max(t * d)
            .max(t * n_expert)
            .max(t * ple)
            .max(r * desc.n_vocab)
            .max(if conv { t * 3 * d } else { 0 })
            .max(t * (nq_full + 2 * nkv))
            .max(t * (gdn_c + gdn_vd))
            .max(t * ssm_in);
        Ok(ForwardScratch {
            limits,
            tok_seq: vec![0; t],
            tok_pos: vec![0; t],
            logit_tok: vec![0; r],
            row_start: vec![0; max_seqs + 1],
            x: LineBuf::zeroed(t * d),
            xn: LineBuf::zeroed(t * max_k),
            q: LineBuf::zeroed(t * nq),
            k: LineBuf::zeroed(t * nkv),
            v: LineBuf::zeroed(t * nkv),
            attn: LineBuf::zeroed(t * nq),
            proj: LineBuf::zeroed(t * d),
            gate: LineBuf::zeroed(t * f),
            up: LineBuf::zeroed(t * f),
            rope: LineBuf::zeroed(t * desc.rope_stride() * desc.ropes.len()),
            out_norm: LineBuf::zeroed(r * d),
            logits: LineBuf::zeroed(r * desc.n_vocab),
            mm: MatmulScratch::new(t.max(r), max_act_row, max_tmp),
            attn_scratch: (0..threads.max(1))
                .map(|_| Mutex::new(AttnScratch::new(kv)))
                .collect(),
            attn_plan: AttnPlan::new(kv, desc.n_head, t, max_seqs),
            moe: desc.moe.map(|m| MoeScratch::new(&m, d, t)),
            moe_out: LineBuf::zeroed(match desc.moe {
                Some(m) if m.n_ff_shexp.is_some() => t * d,
                _ => 0,
            }),
            conv_bcx: LineBuf::zeroed(if conv { t * 3 * d } else { 0 }),
            conv_bx: LineBuf::zeroed(if conv { t * d } else { 0 }),
            q_full: LineBuf::zeroed(t * nq_full),
            gdn: {
                let hv = gdn.map_or(0, |g| g.n_v_heads);
                GdnScratch {
                    qkv: LineBuf::zeroed(t * gdn_c),
                    conv: LineBuf::zeroed(t * gdn_c),
                    z: LineBuf::zeroed(t * gdn_vd),
                    beta: LineBuf::zeroed(t * hv),
                    alpha: LineBuf::zeroed(t * hv),
                    out: LineBuf::zeroed(t * gdn_vd),
                }
            },
            ple: LineBuf::zeroed(t * ple),
            ple_tok: LineBuf::zeroed(t * ple),
            ssm_zxbcdt: LineBuf::zeroed(t * ssm_in),
            ssm_xbc: LineBuf::zeroed(t * ssm_conv),
            ssm_conv: LineBuf::zeroed(t * ssm_conv),
            ssm_y: LineBuf::zeroed(t * ssm_inner),
        })
    }

    pub fn limits(&self) -> BatchLimits {
        self.limits
    }
}
