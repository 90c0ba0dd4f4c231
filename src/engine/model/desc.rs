//! The description the one forward pass reads: the model's shape plus every way its family
//! differs from llama (norm placement, activation, RoPE per layer, attention window, scales,
//! softcaps), derived from the file's [`HParams`]. The forward pass branches on these values,
//! never on the architecture's name.

use crate::engine::error::EngineError;
pub use crate::engine::hparams::Arch;
use crate::engine::hparams::{
    Activation, AttnTemperature, Gating, HParams, MoeParams, RopeScaling, RopeScalingKind,
    RopeStyle,
};
use crate::engine::ops::{yarn_corr_dims, RopeKind, RopeTable};
use crate::engine::pooling::PoolingType;
use crate::gguf::GgufFile;

/// Which FFN block a layer runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FfnKind {
    /// One gated FFN of width [`ModelDesc::n_ff`].
    Dense,
    /// The mixture of experts of [`ModelDesc::moe`].
    Moe,
}

/// Which mixer a layer runs: the block that mixes information across positions, before the
/// layer's FFN. Attention keeps every position's K/V in the paged cache; the recurrent mixers
/// (short convolution now; gated DeltaNet and Mamba2 belong here too) keep a fixed-size state
/// per sequence instead (see `kv_cache::state`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MixerKind {
    /// Attention whose K/V live in layer `kv` of the KV cache (the attention layers numbered
    /// in order, skipping the recurrent ones).
    Attention { kv: usize },
    /// LFM2's short convolution (`engine::shortconv`): its last `l_cache - 1` inputs, `(l_cache
    /// - 1) * n_embd` values, live at offset `state` of a sequence's recurrent state.
    ShortConv { state: usize },
    /// Qwen3.5's gated DeltaNet (`model::deltanet`): its convolution window and its value
    /// heads' state matrices ([`GdnDesc::state_floats`] values) live at offset `state` of a
    /// sequence's recurrent state.
    GatedDeltaNet { state: usize },
    /// Attention over the K/V an earlier layer wrote in layer `kv` of the KV cache (gemma4's
    /// shared-K/V layers): the layer projects only its queries and writes nothing, so the
    /// cache holds those K/V once. The writer has the same window and RoPE table, and runs
    /// earlier in the same step, so every position this layer reads is written.
    SharedAttention { kv: usize },
    /// Granite 4.0-H's Mamba2 (`engine::model::mamba2`, shape [`ModelDesc::mamba2`]): its
    /// convolution window, `(d_conv - 1) * conv_dim` values, then its scan state, `n_head *
    /// head_dim * d_state`, live at offset `state` of a sequence's recurrent state.
    Mamba2 { state: usize },
}

/// The gated DeltaNet's shape (`hparams::GatedDeltaNet`): q and k are `n_k_heads` heads,
/// v, the gate z and the output `n_v_heads` heads, all `head_dim` wide.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GdnDesc {
    pub d_conv: usize,
    pub head_dim: usize,
    pub n_k_heads: usize,
    pub n_v_heads: usize,
}

impl GdnDesc {
    pub fn key_dim(&self) -> usize {
        self.n_k_heads * self.head_dim
    }
    pub fn value_dim(&self) -> usize {
        self.n_v_heads * self.head_dim
    }
    /// Channels of the convolution: q, k, then v.
    pub fn conv_dim(&self) -> usize {
        2 * self.key_dim() + self.value_dim()
    }
    /// The convolution window's values: the last `d_conv - 1` inputs.
    pub fn window_floats(&self) -> usize {
        (self.d_conv - 1) * self.conv_dim()
    }
    /// One layer's state: the window, then a `head_dim x head_dim` matrix per value head.
    pub fn state_floats(&self) -> usize {
        self.window_floats() + self.n_v_heads * self.head_dim * self.head_dim
    }
}

/// The shape of the [`MixerKind::Mamba2`] layers (see `hparams::Mamba2`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mamba2Desc {
    pub d_conv: usize,
    pub d_inner: usize,
    pub d_state: usize,
    pub n_group: usize,
    pub n_head: usize,
    pub head_dim: usize,
    /// x, B and C: the convolution's channels.
    pub conv_dim: usize,
    /// z, x, B, C and dt: the input projection's rows.
    pub d_in_proj: usize,
}

impl Mamba2Desc {
    /// f32 of the convolution window: the last `d_conv - 1` rows of x, B and C.
    pub fn conv_floats(&self) -> usize {
        (self.d_conv - 1) * self.conv_dim
    }

    /// f32 of one layer's recurrent state: the window, then the scan state.
    pub fn state_floats(&self) -> usize {
        self.conv_floats() + self.d_inner * self.d_state
    }
}

/// Per layer: its mixer, which RoPE table applies, how far back attention sees, which FFN runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LayerDesc {
    pub mixer: MixerKind,
    /// Index into [`ModelDesc::ropes`]; `None` on a layer without RoPE (NoPE).
    pub rope: Option<usize>,
    /// Sliding window: a query at position `p` attends to `p - w + 1 ..= p`; `None` = all.
    pub window: Option<usize>,
    pub ffn: FfnKind,
}

/// A mixture-of-experts FFN (llama.cpp's `build_moe_ffn`): per token, router logits
/// `Wr m (+ br)` (f32), probabilities by `gating`, the `n_expert_used` most probable experts
/// (their weights divided by their sum when `norm_weights`), then the sum over the chosen
/// experts, in order of probability, of `weight * (down(act(gate m (+ bg), up m (+ bu)))
/// (+ bd))` (the biases when `biases`); plus a shared expert's output when `n_ff_shexp` is set
/// (times `sigmoid(w_gs · m)` per token when `shared_gate`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MoeDesc {
    pub n_expert: usize,
    pub n_expert_used: usize,
    /// Hidden width of one expert.
    pub n_ff_exp: usize,
    pub gating: Gating,
    pub norm_weights: bool,
    pub n_ff_shexp: Option<usize>,
    /// The shared expert's output is scaled by the sigmoid of its one-row router.
    pub shared_gate: bool,
    /// The router and every expert matrix have a bias.
    pub biases: bool,
    /// The experts' gated activation.
    pub act: Activation,
}

impl From<&MoeParams> for MoeDesc {
    fn from(m: &MoeParams) -> MoeDesc {
        MoeDesc {
            n_expert: m.n_expert as usize,
            n_expert_used: m.n_expert_used as usize,
            n_ff_exp: m.n_ff_exp as usize,
            gating: m.gating,
            norm_weights: m.norm_weights,
            n_ff_shexp: m.n_ff_shexp.map(|w| w as usize),
            shared_gate: m.shared_gate,
            biases: m.biases,
            act: m.act,
        }
    }
}

/// Everything the forward pass needs to know about a model.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelDesc {
    pub arch: Arch,
    /// The architecture and its variant in words (`HParams::variant`).
    pub variant: String,
    pub n_layer: usize,
    pub n_embd: usize,
    pub n_head: usize,
    pub n_head_kv: usize,
    /// Head width of the global layers, and of the KV cache's rows.
    pub head_dim: usize,
    /// Head width of the local (windowed) layers, at most `head_dim` (gemma4's
    /// `key_length_swa`; `head_dim` otherwise). Their K/V rows are zero-padded to `head_dim`
    /// in the cache, which leaves every score and weighted sum unchanged.
    pub head_dim_swa: usize,
    /// The widest dense FFN.
    pub n_ff: usize,
    /// Each layer's dense FFN width.
    pub n_ff_layers: Vec<usize>,
    /// Width of one layer's per-layer embedding (gemma4's `per_layer_token_embd`); 0 without
    /// (see `model::per_layer_embd`).
    pub n_embd_per_layer: usize,
    /// V is RMS-normed per head without a weight before it is cached (gemma4).
    pub v_norm: bool,
    /// The experts of the layers whose FFN is [`FfnKind::Moe`].
    pub moe: Option<MoeDesc>,
    pub n_vocab: usize,
    /// Training context length: positions at or beyond it are refused.
    pub n_ctx_train: usize,
    pub rms_eps: f32,
    /// Whether Q, K and V have bias vectors (qwen2).
    pub qkv_bias: bool,
    /// The RoPE of the global layers; `ropes[0]`, kept for callers sizing buffers.
    pub rope: RopeTable,
    /// The distinct RoPE tables: `[global]` or `[global, local]` (gemma's local layers).
    pub ropes: Vec<RopeTable>,
    pub layers: Vec<LayerDesc>,
    /// The LongRoPE factors (`rope_factors_long` when true, else `_short`) if the file has them:
    /// chosen, as llama.cpp does, by whether the served context exceeds the original one.
    pub long_rope_factors: bool,
    pub qk_norm: bool,
    /// The q/k norm weights span the whole q and k rows (olmoe), not one head.
    pub qk_norm_full: bool,
    pub post_norms: bool,
    pub activation: Activation,
    pub embd_scale: Option<f32>,
    pub q_scale: Option<f32>,
    pub kq_scale: f32,
    pub attn_softcap: Option<f32>,
    pub final_softcap: Option<f32>,
    pub residual_scale: Option<f32>,
    pub logit_scale: Option<f32>,
    pub attn_temperature: Option<AttnTemperature>,
    /// The file's pooling type for embeddings (`HParams::pooling`).
    pub pooling: Option<PoolingType>,
    /// Taps of the short convolution of [`MixerKind::ShortConv`] layers (0 without).
    pub conv_l_cache: usize,
    /// The shape of the [`MixerKind::Mamba2`] layers (none without).
    pub mamba2: Option<Mamba2Desc>,
    /// f32 values of one sequence's recurrent state: every recurrent layer's, one after
    /// another (0 for a model of attention layers only).
    pub state_floats: usize,
    /// The shape of the [`MixerKind::GatedDeltaNet`] layers (qwen35).
    pub deltanet: Option<GdnDesc>,
    /// Attention's q carries each head's output gate (`out * sigmoid(gate)`; qwen35).
    pub attn_out_gate: bool,
}

/// One RoPE table with llama.cpp's context-time parameters (`llama-context.cpp`): the
/// frequency scale, YaRN's extrapolation factor and magnitude (`yarn_attn_factor`), times the
/// file's `rope.scaling.attn_factor`.
fn rope_table(
    kind: RopeKind,
    n_dims: usize,
    freq_base: f32,
    freq_scale: f32,
    s: &RopeScaling,
    n_ctx_orig: u32,
) -> RopeTable {
    let yarn = s.kind == RopeScalingKind::Yarn;
    let mut attn_factor = 1.0f32;
    if yarn {
        let mscale = |scale: f32, m: f32| {
            if scale <= 1.0 {
                1.0
            } else {
                (0.1 * m).mul_add(scale.ln(), 1.0)
            }
        };
        let factor = 1.0 / freq_scale;
        attn_factor = if s.yarn_log_mul != 0.0 {
            mscale(factor, 1.0) / mscale(factor, s.yarn_log_mul)
        } else {
            mscale(factor, 1.0)
        };
        // llama.cpp cancels the magnitude its rope kernel applies for YaRN.
        attn_factor *= 1.0 / 0.1f32.mul_add(factor.ln(), 1.0);
    }
    attn_factor *= s.attn_factor;
    RopeTable {
        kind,
        n_dims,
        freq_base,
        freq_scale,
        freq_factors: None,
        ext_factor: if yarn { 1.0 } else { 0.0 },
        attn_factor,
        corr_dims: yarn_corr_dims(
            n_dims,
            n_ctx_orig,
            freq_base,
            s.yarn_beta_fast,
            s.yarn_beta_slow,
        ),
    }
}

impl ModelDesc {
    /// The forward-pass description of `hp`.
    pub fn from_hparams(hp: &HParams) -> Result<ModelDesc, EngineError> {
        let rope_dim = hp.rope_dim as usize;
        if rope_dim == 0 || !rope_dim.is_multiple_of(2) || rope_dim > hp.head_dim as usize {
            return Err(EngineError::BadHParam {
                key: "rope.dimension_count",
                message: format!(
                    "{rope_dim} must be even and at most head_dim {}",
                    hp.head_dim
                ),
            });
        }
        let s = &hp.rope_scaling;
        // llama.cpp: the scale is 1/factor unless the type is "none".
        let freq_scale = match s.kind {
            RopeScalingKind::None => 1.0,
            _ => 1.0 / s.factor,
        };
        let kind = match hp.rope_style {
            RopeStyle::Normal => RopeKind::Normal,
            RopeStyle::NeoX => RopeKind::NeoX,
        };
        let n_ctx_orig = s.original_ctx.unwrap_or(hp.n_ctx_train);
        let global = rope_table(kind, rope_dim, hp.rope_freq_base, freq_scale, s, n_ctx_orig);
        let mut ropes = vec![global.clone()];
        if let Some(w) = &hp.sliding_window {
            let rope_dim = hp
                .gemma4
                .as_ref()
                .map_or(rope_dim, |g| g.rope_dim_swa as usize);
            // Local layers: their own base, no frequency scaling (llama.cpp's
            // `rope_freq_scale_train_swa` is 1) unless the family keeps the global one
            // (gpt-oss), the same YaRN/magnitude parameters.
            ropes.push(rope_table(
                kind,
                rope_dim,
                w.rope_freq_base,
                if w.rope_scaled { freq_scale } else { 1.0 },
                s,
                n_ctx_orig,
            ));
        }
        // Attention layers number their K/V places in order; recurrent ones their states.
        let (mut n_kv, mut n_state) = (0, 0);
        let mut mixers: Vec<MixerKind> = Vec::with_capacity(hp.n_layer as usize);
        let deltanet = hp.deltanet.as_ref().map(|g| GdnDesc {
            d_conv: g.d_conv as usize,
            head_dim: g.head_dim as usize,
            n_k_heads: g.n_k_heads as usize,
            n_v_heads: g.n_v_heads as usize,
        });
        let mamba2 = hp.mamba2.as_ref().map(|m| Mamba2Desc {
            d_conv: m.d_conv as usize,
            d_inner: m.d_inner as usize,
            d_state: m.d_state as usize,
            n_group: m.n_group as usize,
            n_head: m.n_head as usize,
            head_dim: m.head_dim() as usize,
            conv_dim: m.conv_dim() as usize,
            d_in_proj: m.d_in_proj() as usize,
        });
        for il in 0..hp.n_layer as usize {
            let local = hp.sliding_window.as_ref().is_some_and(|w| w.local[il]);
            if let Some(src) = hp.gemma4.as_ref().and_then(|g| g.kv_source(il, local)) {
                let MixerKind::Attention { kv } = mixers[src] else {
                    unreachable!("gemma4's layers are attention layers");
                };
                mixers.push(MixerKind::SharedAttention { kv });
                continue;
            }
            match (&hp.shortconv, &hp.deltanet, deltanet) {
                (Some(c), _, _) if c.is_conv(il) => {
                    mixers.push(MixerKind::ShortConv { state: n_state });
                    n_state += (c.l_cache as usize - 1) * hp.n_embd as usize;
                }
                (_, Some(g), Some(gd)) if g.is_recurrent(il) => {
                    mixers.push(MixerKind::GatedDeltaNet { state: n_state });
                    n_state += gd.state_floats();
                }
                _ if hp.mamba2.as_ref().is_some_and(|m| m.is_ssm(il)) => {
                    mixers.push(MixerKind::Mamba2 { state: n_state });
                    n_state += mamba2.map_or(0, |m| m.state_floats());
                }
                _ => {
                    mixers.push(MixerKind::Attention { kv: n_kv });
                    n_kv += 1;
                }
            }
        }
        let layers = (0..hp.n_layer as usize)
            .map(|il| {
                let local = hp.sliding_window.as_ref().is_some_and(|w| w.local[il]);
                LayerDesc {
                    mixer: mixers[il],
                    rope: hp.rope_layers[il].then_some(usize::from(local)),
                    window: hp
                        .sliding_window
                        .as_ref()
                        .filter(|_| local)
                        .map(|w| w.size as usize),
                    ffn: if hp.moe.is_some() {
                        FfnKind::Moe
                    } else {
                        FfnKind::Dense
                    },
                }
            })
            .collect();
        Ok(ModelDesc {
            arch: hp.arch,
            variant: hp.variant(),
            n_layer: hp.n_layer as usize,
            n_embd: hp.n_embd as usize,
            n_head: hp.n_head as usize,
            n_head_kv: hp.n_head_kv as usize,
            head_dim: hp.head_dim as usize,
            head_dim_swa: hp.gemma4.as_ref().map_or(hp.head_dim, |g| g.head_dim_swa) as usize,
            n_ff: hp.n_ff as usize,
            n_ff_layers: hp.n_ff_layers.iter().map(|&f| f as usize).collect(),
            n_embd_per_layer: hp.gemma4.as_ref().map_or(0, |g| g.n_embd_per_layer) as usize,
            v_norm: hp.arch.rules().gemma4_keys,
            moe: hp.moe.as_ref().map(MoeDesc::from),
            n_vocab: hp.n_vocab as usize,
            n_ctx_train: hp.n_ctx_train as usize,
            rms_eps: hp.rms_eps,
            qkv_bias: hp.has_qkv_bias,
            rope: global,
            ropes,
            layers,
            long_rope_factors: hp.n_ctx_train > n_ctx_orig,
            qk_norm: hp.qk_norm,
            qk_norm_full: hp.qk_norm_full,
            post_norms: hp.post_norms,
            activation: hp.activation,
            embd_scale: hp.embd_scale,
            q_scale: hp.q_scale,
            kq_scale: hp.kq_scale,
            attn_softcap: hp.attn_softcap,
            final_softcap: hp.final_softcap,
            residual_scale: hp.residual_scale,
            logit_scale: hp.logit_scale,
            attn_temperature: hp.attn_temperature,
            pooling: hp.pooling,
            conv_l_cache: hp.shortconv.as_ref().map_or(0, |c| c.l_cache as usize),
            mamba2,
            state_floats: n_state,
            deltanet,
            attn_out_gate: hp.arch.rules().attn_out_gate,
        })
    }

    /// Reads the hyper-parameters of `file` and derives the description.
    pub fn from_gguf(file: &GgufFile) -> Result<ModelDesc, EngineError> {
        ModelDesc::from_hparams(&HParams::from_gguf(file)?)
    }

    /// The widest FFN hidden row a step computes: the dense FFN's, an expert's or the shared
    /// expert's.
    pub fn max_ff(&self) -> usize {
        let dense = if self.layers.iter().any(|l| l.ffn == FfnKind::Dense) {
            self.n_ff
        } else {
            0
        };
        self.moe.map_or(dense, |m| {
            dense.max(m.n_ff_exp).max(m.n_ff_shexp.unwrap_or(0))
        })
    }

    /// The attention layers' K/V places, in order: `(layer, kv layer, window)`.
    pub fn kv_layers(&self) -> impl Iterator<Item = (usize, usize, Option<usize>)> + '_ {
        self.layers
            .iter()
            .enumerate()
            .filter_map(|(l, d)| match d.mixer {
                MixerKind::Attention { kv } => Some((l, kv, d.window)),
                MixerKind::ShortConv { .. }
                | MixerKind::GatedDeltaNet { .. }
                | MixerKind::SharedAttention { .. }
                | MixerKind::Mamba2 { .. } => None,
            })
    }

    /// Width of one token's cos/sin row of a RoPE table in the step's buffer: the widest
    /// table's `n_dims` (each table uses the first `n_dims` of it).
    pub fn rope_stride(&self) -> usize {
        self.ropes.iter().map(|r| r.n_dims).max().unwrap_or(0)
    }

    /// Layer `l`'s head width: [`ModelDesc::head_dim_swa`] on a windowed layer, else
    /// [`ModelDesc::head_dim`].
    pub fn head_dim_of(&self, l: usize) -> usize {
        if self.layers[l].window.is_some() {
            self.head_dim_swa
        } else {
            self.head_dim
        }
    }

    /// True when some layer keeps a recurrent state per sequence (its prefix cannot be
    /// resumed from K/V blocks alone, nor rolled back).
    pub fn has_recurrent(&self) -> bool {
        self.state_floats > 0
    }

    /// How many layers keep K/V in the cache.
    pub fn n_kv_layers(&self) -> usize {
        self.kv_layers().count()
    }

    /// The largest sliding window of any layer, `None` when every layer attends to everything.
    pub fn max_window(&self) -> Option<usize> {
        self.layers.iter().filter_map(|l| l.window).max()
    }
}
