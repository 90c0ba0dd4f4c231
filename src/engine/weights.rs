//! Typed views of a model's weights, borrowed from the GGUF memory map (never copied, except
//! the small f32 norm vectors and biases, and the matrices the ISA multiplies faster in a
//! repacked panel layout: those get one packed copy at load, see [`Weight::packed`]).

use std::sync::{Arc, Mutex};

use crate::engine::error::EngineError;
use crate::engine::team::Team;
use crate::gguf::TensorData;
use crate::kernels::cells::OutCells;
use crate::kernels::packed::{pack, PackedWeights, PanelLayout};
use crate::kernels::table::{kernels, FromF32Fn, PackedKernels, TypeKernels};
use crate::kernels::DType;

/// Row ranges handed to [`Weight::gemm_rows`] start at multiples of this.
pub const ROW_ALIGN: usize = 16;

/// A weight matrix in the file's layout: `n_out` rows of `k` values of `dtype`, rows
/// `row_bytes` apart. `// (n_out, k)` below means this shape; in ggml order it is `[k, n_out]`.
#[derive(Clone, Debug)]
pub struct Weight {
    pub dtype: DType,
    /// The kernel row for `dtype` (on the ISA chosen at start-up).
    pub kern: &'static TypeKernels,
    /// Quantizes f32 activations into `vec_dot_type`.
    pub quantize_act: FromF32Fn,
    /// The activation format its kernels take (`kernels(dtype).vec_dot_type`).
    pub vec_dot_type: DType,
    pub data: TensorData,
    pub n_out: usize,
    pub k: usize,
    pub row_bytes: usize,
    /// Bytes of one activation row of `k` values in `vec_dot_type`.
    pub act_row_bytes: usize,
    /// The rows repacked into panels at load when the ISA has a panel GEMM for `dtype`
    /// (shared by clones: a tied LM head reuses the embedding's copy). `gemm_rows` uses it;
    /// `rows`/`row_to_f32` keep reading the mmap.
    pub packed: Option<(PackedKernels, Arc<PackedWeights>)>,
}

impl Weight {
    /// Wraps tensor `name` after checking it is a `(n_out, k)` matrix kiln can multiply.
    pub fn new(
        name: &str,
        data: TensorData,
        n_out: usize,
        k: usize,
    ) -> Result<Weight, EngineError> {
        let want = [k as u64, n_out as u64];
        // A vector of k values is the one-row matrix ggml's mul_mat makes of it.
        let vector_row = n_out == 1 && data.shape() == [k as u64];
        if data.shape() != want && !vector_row {
            return Err(EngineError::BadShape {
                name: name.to_string(),
                got: data.shape().to_vec(),
                want: want.to_vec(),
            });
        }
        let dtype = data.dtype();
        let unsupported = |what| EngineError::UnsupportedDType {
            name: name.to_string(),
            dtype,
            what,
        };
        let kern = kernels(dtype).map_err(|_| unsupported("matmul"))?;
        let vec_dot_type = kern.vec_dot_type;
        let quantize_act = kernels(vec_dot_type)
            .ok()
            .and_then(|k| k.from_f32)
            .ok_or_else(|| unsupported("activation quantization"))?;
        let row_bytes = dtype
            .bytes_for(k as u64)
            .ok_or_else(|| unsupported("row length"))? as usize;
        let act_row_bytes = vec_dot_type
            .bytes_for(k as u64)
            .ok_or_else(|| unsupported("row length"))? as usize;
        Ok(Weight {
            packed: None,
            dtype,
            kern,
            quantize_act,
            vec_dot_type,
            data,
            n_out,
            k,
            row_bytes,
            act_row_bytes,
        })
    }

    /// Makes the panel copy ([`Weight::packed`]) when the ISA has a panel GEMM for this dtype and
    /// row length; afterwards the file's pages of this matrix are released (the copy serves
    /// every matmul; they are read again only for embedding rows). Idempotent.
    pub fn repack(&mut self) {
        if self.packed.is_some() {
            return;
        }
        self.packed = self.kern.packed.and_then(|pk| {
            let p = pack(self.dtype, self.k, self.data.bytes(), self.n_out)?;
            self.data.release_pages();
            Some((pk, Arc::new(p)))
        });
    }

    /// The bytes of rows `r0..r1`.
    pub fn rows(&self, r0: usize, r1: usize) -> &[u8] {
        &self.data.bytes()[r0 * self.row_bytes..r1 * self.row_bytes]
    }

    /// `out[t * os + (r - r0)] = dot(row r, activation row t)` for `r` in `r0..r1`, `t < n_tok`;
    /// `a` holds `n_tok` rows of `act_row_bytes` in `vec_dot_type`. `r0` must be a multiple of
    /// [`ROW_ALIGN`] (matmul splits rows that way; a packed copy is addressed by panel). Each
    /// output is bit-identical to the kernel's `vec_dot` of that row and token, whatever
    /// `r0..r1` and `n_tok` are; the packed GEMM equals the plain `gemm` bit for bit.
    pub fn gemm_rows(
        &self,
        r0: usize,
        r1: usize,
        a: &[u8],
        n_tok: usize,
        out: &mut [f32],
        os: usize,
    ) {
        if self.is_packed() {
            return self.gemm_rows_cells(r0, r1, a, n_tok, out.into(), os);
        }
        invariant!(r0.is_multiple_of(ROW_ALIGN) && r0 <= r1 && r1 <= self.n_out);
        (self.kern.gemm)(self.k, self.rows(r0, r1), r1 - r0, a, n_tok, out, os);
    }

    /// Whether this weight multiplies from a packed copy, whose GEMM writes through
    /// [`OutCells`] ([`Weight::gemm_rows_cells`]).
    pub fn is_packed(&self) -> bool {
        self.packed.is_some()
    }

    /// [`Weight::gemm_rows`] into an extent whose other cells other threads may write
    /// meanwhile (a team's row ranges of the same token rows). Only for a weight with a
    /// packed copy ([`Weight::is_packed`]): panics otherwise (a caller bug).
    pub fn gemm_rows_cells(
        &self,
        r0: usize,
        r1: usize,
        a: &[u8],
        n_tok: usize,
        out: OutCells<'_>,
        os: usize,
    ) {
        invariant!(r0.is_multiple_of(ROW_ALIGN) && r0 <= r1 && r1 <= self.n_out);
        let (pk, p) = self
            .packed
            .as_ref()
            .expect("gemm_rows_cells needs a packed copy");
        (pk.gemm)(self.k, p.from_row(r0), r1 - r0, a, n_tok, out, os);
    }

    /// The bytes [`Weight::gemm_rows`] over rows `r0..r1` streams, in the order it reads them
    /// (the panels holding those rows when there is a packed copy). `r0` as for `gemm_rows`.
    pub fn stream(&self, r0: usize, r1: usize) -> &[u8] {
        match &self.packed {
            Some((_, p)) => {
                let n = PanelLayout::panels(r1 - r0) * p.layout.panel_bytes;
                let from = p.from_row(r0);
                &from[..n.min(from.len())]
            }
            None => self.rows(r0, r1),
        }
    }

    /// Bytes a matmul over all rows reads (the packed copy when there is one).
    pub fn matmul_bytes(&self) -> u64 {
        match &self.packed {
            Some((_, p)) => p.bytes().len() as u64,
            None => (self.n_out * self.row_bytes) as u64,
        }
    }

    /// Multiply-adds of one token through this matrix.
    pub fn macs(&self) -> u64 {
        (self.n_out * self.k) as u64
    }

    /// Dequantizes row `r` into `out` (`k` values): embedding lookups.
    pub fn row_to_f32(&self, r: usize, out: &mut [f32]) {
        (self.kern.to_f32)(self.rows(r, r + 1), out);
    }
}

/// A 1-D tensor of `n` values (norm weights, biases), dequantized to f32 at load.
pub fn vector(name: &str, data: &TensorData, n: usize) -> Result<Vec<f32>, EngineError> {
    values(name, data, &[n as u64])
}

/// A tensor of shape `shape` (ggml order; a mixture's 2-D expert biases), all its values in
/// order, dequantized to f32 at load.
pub fn values(name: &str, data: &TensorData, shape: &[u64]) -> Result<Vec<f32>, EngineError> {
    if !crate::gguf::same_dims(data.shape(), shape) {
        return Err(EngineError::BadShape {
            name: name.to_string(),
            got: data.shape().to_vec(),
            want: shape.to_vec(),
        });
    }
    let n = shape.iter().product::<u64>() as usize;
    let dtype = data.dtype();
    if dtype.bytes_for(n as u64) != Some(data.bytes().len() as u64) {
        return Err(EngineError::UnsupportedDType {
            name: name.to_string(),
            dtype,
            what: "vector",
        });
    }
    let kern = kernels(dtype).map_err(|_| EngineError::UnsupportedDType {
        name: name.to_string(),
        dtype,
        what: "dequantization",
    })?;
    let mut out = vec![0f32; n];
    (kern.to_f32)(data.bytes(), &mut out);
    Ok(out)
}

/// A gated FFN: `down(act(gate m (+ bg)) * (up m (+ bu))) (+ bd)`. `d` = n_embd, `f` = its
/// hidden width (a dense layer's `n_ff`, or a shared expert's).
#[derive(Clone, Debug)]
pub struct DenseFfn {
    pub w_gate: Weight,           // (f, d)
    pub w_up: Weight,             // (f, d)
    pub b_gate: Option<Vec<f32>>, // (f)
    pub b_up: Option<Vec<f32>>,   // (f)
    pub w_down: Weight,           // (d, f)
    pub b_down: Option<Vec<f32>>, // (d)
}

/// One expert of a mixture: a gated FFN of width `fe` = n_ff_exp, each matrix a view of its
/// slice of the file's 3-D expert tensor (an expert's rows are contiguous there), and its
/// slices of the 2-D bias tensors when the family has them (gpt-oss).
#[derive(Clone, Debug)]
pub struct Expert {
    pub gate: Weight,             // (fe, d)
    pub up: Weight,               // (fe, d)
    pub down: Weight,             // (d, fe)
    pub b_gate: Option<Vec<f32>>, // (fe)
    pub b_up: Option<Vec<f32>>,   // (fe)
    pub b_down: Option<Vec<f32>>, // (d)
}

/// A mixture-of-experts FFN: the router and every expert, plus the shared expert when the
/// family has one. The experts stay in the file's map (never repacked: a step reads only the
/// chosen experts' pages).
#[derive(Clone, Debug)]
pub struct MoeFfn {
    /// `ffn_gate_inp.weight`: router logits per expert.
    pub router: Weight, // (n_expert, d)
    /// `ffn_gate_inp.bias`, added to the router logits (gpt-oss).
    pub router_bias: Option<Vec<f32>>, // (n_expert)
    pub experts: Vec<Expert>,
    pub shared: Option<DenseFfn>,
    /// `ffn_gate_inp_shexp.weight`: the shared expert's gate logit, its output scaled by the
    /// logit's sigmoid (qwen35moe).
    pub shared_gate: Option<Box<Weight>>, // (1, d)
}

/// A layer's FFN (see [`crate::engine::model::desc::FfnKind`]).
#[derive(Clone, Debug)]
pub enum FfnWeights {
    Dense(DenseFfn),
    Moe(MoeFfn),
}

impl FfnWeights {
    /// The first matrix the FFN block multiplies (what the team prefetches before it).
    pub fn first(&self) -> &Weight {
        match self {
            FfnWeights::Dense(f) => &f.w_gate,
            FfnWeights::Moe(m) => &m.router,
        }
    }

    /// The matrices every token reads (all of a dense FFN; a mixture's router and shared
    /// expert), mutably for the load-time repacking.
    fn every_token_mut(&mut self) -> Vec<&mut Weight> {
        match self {
            FfnWeights::Dense(f) => vec![&mut f.w_gate, &mut f.w_up, &mut f.w_down],
            FfnWeights::Moe(m) => {
                let mut v = vec![&mut m.router];
                if let Some(s) = &mut m.shared {
                    v.extend([&mut s.w_gate, &mut s.w_up, &mut s.w_down]);
                }
                v.extend(m.shared_gate.as_deref_mut());
                v
            }
        }
    }

    /// [`FfnWeights::every_token_mut`], shared.
    fn every_token(&self) -> Vec<&Weight> {
        match self {
            FfnWeights::Dense(f) => vec![&f.w_gate, &f.w_up, &f.w_down],
            FfnWeights::Moe(m) => {
                let mut v = vec![&m.router];
                if let Some(s) = &m.shared {
                    v.extend([&s.w_gate, &s.w_up, &s.w_down]);
                }
                v.extend(m.shared_gate.as_deref());
                v
            }
        }
    }

    /// What the experts chosen for one token read and compute: `(bytes, multiply-adds)` of
    /// `n_used` experts (they all have one shape); zero for a dense FFN.
    fn active_experts(&self, n_used: usize) -> (u64, u64) {
        match self {
            FfnWeights::Moe(m) => m.experts.first().map_or((0, 0), |e| {
                let mats = [&e.gate, &e.up, &e.down];
                let b: u64 = mats.iter().map(|w| w.matmul_bytes()).sum();
                let c: u64 = mats.iter().map(|w| w.macs()).sum();
                (b * n_used as u64, c * n_used as u64)
            }),
            FfnWeights::Dense(_) => (0, 0),
        }
    }
}

/// A layer's attention mixer. `d` = n_embd, `q` = n_head * head_dim, `kv` = n_head_kv *
/// head_dim, `h` = head_dim. Optional parts are there when the file has them (biases) or the
/// family uses them (norms of the model description). A fused file matrix (phi3's `attn_qkv`)
/// is split into its row ranges here, views of the same mapped bytes.
#[derive(Clone, Debug)]
pub struct AttnWeights {
    pub wq: Weight, // (q, d)
    /// K and V projections; `None` on a layer that reads an earlier layer's K/V
    /// (`MixerKind::SharedAttention`).
    pub wk: Option<Weight>, // (kv, d)
    pub wv: Option<Weight>, // (kv, d)
    pub bq: Option<Vec<f32>>, // (q)   qwen2
    pub bk: Option<Vec<f32>>, // (kv)  qwen2
    pub bv: Option<Vec<f32>>, // (kv)  qwen2
    /// Per-head RMSNorm weights of q and k (qwen3, gemma3), or whole-row ones (olmoe: q, kv).
    pub q_norm: Option<Vec<f32>>, // (h)
    pub k_norm: Option<Vec<f32>>, // (h)
    pub wo: Weight, // (d, q)
    pub bo: Option<Vec<f32>>, // (d)
    /// RMSNorm of the attention output before its residual add (gemma).
    pub post_attn_norm: Option<Vec<f32>>, // (d)
    /// Each query head's learned sink logit (`attn_sinks.weight`, gpt-oss).
    pub attn_sinks: Option<Vec<f32>>, // (n_head)
}

/// LFM2's short-convolution mixer (llama.cpp's `shortconv` block, see `engine::shortconv`).
#[derive(Clone, Debug)]
pub struct ShortConvWeights {
    /// B, C and x rows of the input, in that order.
    pub in_proj: Weight, // (3d, d)
    /// The depthwise taps, tap by tap: tap `k` (oldest position first) of channel `c` is
    /// `conv[k * d + c]` (the file holds them channel by channel; f32 as ggml_ssm_conv reads
    /// them).
    pub conv: Vec<f32>, // (l_cache, d)
    pub out_proj: Weight, // (d, d)
}

/// Qwen3.5's gated DeltaNet mixer (llama.cpp's `build_layer_attn_linear`, see
/// `model::deltanet`). `c` = conv channels (q, k, v), `vd` = value width, `hv` = value heads,
/// `h` = head width.
#[derive(Clone, Debug)]
pub struct GdnWeights {
    /// q, k and v rows of the input, in that order (`attn_qkv`).
    pub wqkv: Weight, // (c, d)
    /// The output gate z (`attn_gate`).
    pub wgate: Weight, // (vd, d)
    /// Per-head update strength before its sigmoid (`ssm_beta`).
    pub wbeta: Weight, // (hv, d)
    /// Per-head decay input before its softplus (`ssm_alpha`).
    pub walpha: Weight, // (hv, d)
    /// The depthwise taps, tap by tap (oldest position first): tap `k` of channel `i` is
    /// `conv[k * c + i]` (f32, as ggml_ssm_conv reads them).
    pub conv: Vec<f32>, // (d_conv, c)
    /// `ssm_dt.bias`, added to alpha before the softplus.
    pub dt_bias: Vec<f32>, // (hv)
    /// `ssm_a` (`-exp(A_log)`): the decay's per-head factor.
    pub a: Vec<f32>, // (hv)
    /// RMSNorm weight of each output head before its gate (`ssm_norm`).
    pub norm: Vec<f32>, // (h)
    pub out: Weight, // (d, vd)
}

/// Granite 4.0-H's Mamba2 mixer (llama.cpp's `build_mamba2_layer`, see `engine::model::mamba2`).
/// `c` = conv_dim (x, B, C), `nh` = its heads, `inner` = d_inner.
#[derive(Clone, Debug)]
pub struct Mamba2Weights {
    /// z, x, B, C and dt rows of the input, in that order.
    pub in_proj: Weight, // (inner + c + nh, d)
    /// The depthwise taps, tap by tap as [`ShortConvWeights::conv`]'s.
    pub conv: Vec<f32>, // (d_conv, c)
    /// Added after the convolution (zeros when the file has none).
    pub conv_bias: Vec<f32>, // (c)
    pub dt_bias: Vec<f32>, // (nh)
    /// The heads' decay rates (`ssm_a`, negative: `-exp(A_log)` as the converter wrote it).
    pub a: Vec<f32>, // (nh)
    /// The heads' skip factors (`ssm_d`).
    pub d: Vec<f32>, // (nh)
    /// The grouped RMSNorm's weights (`ssm_norm`, group after group).
    pub norm: Vec<f32>, // (inner)
    pub out_proj: Weight,  // (d, inner)
}

/// A layer's mixer: what it computes across positions (see
/// [`crate::engine::model::desc::MixerKind`]).
// One per layer, built once at load: not boxed, so the forward pass reads its matrices with
// no extra indirection.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug)]
pub enum MixerWeights {
    Attention(AttnWeights),
    ShortConv(ShortConvWeights),
    GatedDeltaNet(GdnWeights),
    Mamba2(Mamba2Weights),
}

impl MixerWeights {
    /// The first matrix the mixer multiplies (what the team prefetches before it).
    pub fn first(&self) -> &Weight {
        match self {
            MixerWeights::Attention(a) => &a.wq,
            MixerWeights::ShortConv(c) => &c.in_proj,
            MixerWeights::GatedDeltaNet(g) => &g.wqkv,
            MixerWeights::Mamba2(m) => &m.in_proj,
        }
    }

    /// Every matrix of the mixer, mutably (for the load-time repacking).
    fn matrices_mut(&mut self) -> Vec<&mut Weight> {
        match self {
            MixerWeights::Attention(a) => [Some(&mut a.wq), a.wk.as_mut(), a.wv.as_mut()]
                .into_iter()
                .flatten()
                .chain([&mut a.wo])
                .collect(),
            MixerWeights::ShortConv(c) => vec![&mut c.in_proj, &mut c.out_proj],
            MixerWeights::GatedDeltaNet(g) => vec![
                &mut g.wqkv,
                &mut g.wgate,
                &mut g.wbeta,
                &mut g.walpha,
                &mut g.out,
            ],
            MixerWeights::Mamba2(m) => vec![&mut m.in_proj, &mut m.out_proj],
        }
    }

    /// Every matrix of the mixer.
    fn matrices(&self) -> Vec<&Weight> {
        match self {
            MixerWeights::Attention(a) => [Some(&a.wq), a.wk.as_ref(), a.wv.as_ref()]
                .into_iter()
                .flatten()
                .chain([&a.wo])
                .collect(),
            MixerWeights::ShortConv(c) => vec![&c.in_proj, &c.out_proj],
            MixerWeights::GatedDeltaNet(g) => vec![&g.wqkv, &g.wgate, &g.wbeta, &g.walpha, &g.out],
            MixerWeights::Mamba2(m) => vec![&m.in_proj, &m.out_proj],
        }
    }
}

/// One block's weights: its input norm and mixer, then its FFN's norm and FFN.
#[derive(Clone, Debug)]
pub struct LayerWeights {
    /// The mixer's input RMSNorm (`attn_norm.weight`, whatever the mixer).
    pub attn_norm: Vec<f32>, // (d)
    pub mixer: MixerWeights,
    pub ffn_norm: Vec<f32>, // (d)
    pub ffn: FfnWeights,
    /// RMSNorm of the FFN output before its residual add (gemma).
    pub post_ffn_norm: Option<Vec<f32>>, // (d)
    /// The per-layer embedding block after the FFN (gemma4).
    pub ple: Option<LayerPle>,
    /// The layer's output is multiplied by this (gemma4's `layer_output_scale`).
    pub out_scale: Option<f32>,
}

impl LayerWeights {
    /// The matrices every token reads (the mixer's and the FFN's, not a mixture's experts),
    /// mutably (for the load-time repacking).
    pub fn matrices_mut(&mut self) -> Vec<&mut Weight> {
        let mut v = self.mixer.matrices_mut();
        v.extend(self.ffn.every_token_mut());
        v.extend(
            self.ple
                .iter_mut()
                .flat_map(|p| [&mut p.inp_gate, &mut p.proj]),
        );
        v
    }

    /// The matrices every token reads.
    pub fn matrices(&self) -> Vec<&Weight> {
        let mut v = self.mixer.matrices();
        v.extend(self.ffn.every_token());
        v.extend(self.ple.iter().flat_map(|p| [&p.inp_gate, &p.proj]));
        v
    }
}

/// All weights of a model.
#[derive(Clone, Debug)]
pub struct ModelWeights {
    pub token_embd: Weight, // (n_vocab, d)
    pub layers: Vec<LayerWeights>,
    pub output_norm: Vec<f32>, // (d)
    /// The LM head: `output.weight`, or `token_embd` when the model ties them.
    pub output: Weight, // (n_vocab, d)
    /// `output.bias` (qwen2), added to the logits.
    pub output_bias: Option<Vec<f32>>, // (n_vocab)
    pub tied_output: bool,
    /// The per-layer embedding table and its projection (gemma4).
    pub ple: Option<PleWeights>,
}

impl ModelWeights {
    /// Repacks every matrix into its panel copy ([`Weight::repack`]) on `team`'s threads, the
    /// largest first so the team finishes together; a tied LM head then shares the embedding's
    /// copy. Load time is mostly this pass: page faults on the new copy and the file's reads.
    pub fn repack(&mut self, team: &Team) {
        let mut mats: Vec<&mut Weight> = vec![&mut self.token_embd];
        if !self.tied_output {
            mats.push(&mut self.output);
        }
        for l in &mut self.layers {
            mats.extend(l.matrices_mut());
        }
        mats.extend(self.ple.as_mut().map(|p| &mut p.model_proj));
        mats.sort_by_key(|w| std::cmp::Reverse(w.data.bytes().len()));
        let slots: Vec<Mutex<&mut Weight>> = mats.into_iter().map(Mutex::new).collect();
        team.run(slots.len(), &|i, _| {
            slots[i].lock().unwrap_or_else(|e| e.into_inner()).repack()
        });
        if self.tied_output {
            self.output = self.token_embd.clone();
        }
    }

    /// What one decode step reads and computes in its matmuls (every layer's matrices, the
    /// `n_expert_used` experts a token runs in a mixture, and the LM head): `(bytes,
    /// multiply-adds)` per token. The figures speed is stated against.
    pub fn decode_footprint(&self, n_expert_used: usize) -> (u64, u64) {
        let mats = self.layers.iter().flat_map(|l| l.matrices());
        let (b, m) = mats.fold((0, 0), |(b, m), w| (b + w.matmul_bytes(), m + w.macs()));
        let (eb, em) = self.layers.iter().fold((0, 0), |(b, m), l| {
            let (x, y) = l.ffn.active_experts(n_expert_used);
            (b + x, m + y)
        });
        (
            b + eb + self.output.matmul_bytes(),
            m + em + self.output.macs(),
        )
    }
}

/// Gemma 4's per-layer embeddings (computed in `model::per_layer_embd`): the model-level
/// tensors.
#[derive(Clone, Debug)]
pub struct PleWeights {
    /// Each token's `L * p` per-layer values (`per_layer_token_embd`), read by row only.
    pub tok_embd: Weight, // (n_vocab, L * p)
    /// The projection of the token embedding onto every layer's slice.
    pub model_proj: Weight, // (L * p, d)
    /// The RMSNorm weight of each projected slice.
    pub proj_norm: Vec<f32>, // (p)
}

/// One layer's per-layer embedding block.
#[derive(Clone, Debug)]
pub struct LayerPle {
    pub inp_gate: Weight,    // (p, d)
    pub proj: Weight,        // (d, p)
    pub post_norm: Vec<f32>, // (d)
}
