//! Random-weight models of every supported architecture, written deterministically from a seed:
//! the small files the proof against llama.cpp runs on (`tests/it/arch_proof.rs`,
//! `scripts/reference/regen_arch_proofs.py`), with a real vocabulary copied from a vocab-only
//! GGUF. The same seed gives the same bytes on every machine: values come from a fixed integer
//! generator and exact f64 arithmetic (no libm), and the quantized copies use the scalar
//! quantizers (the SIMD ones are bit-identical to them anyway). Q8_0 and Q4_0 tensors are
//! byte-identical to what `llama-quantize` makes of the F16 file; K-quant tensors are kiln's
//! own quantization in `llama-quantize`'s type mix (the same types, not the same bytes).
//!
//! Weights are scaled so the next-token distribution is peaked: the LM head is the token
//! embedding (or correlated with it) and each block adds a fraction of the residual's size, so
//! the current token dominates and every layer still moves every logit.

mod deltanet;
mod rng;
mod variants;

pub use variants::{proof_variants, Variant};

use crate::gguf::{GgufFile, GgufWriter, MetaValue, WriteError};
use crate::kernels::isa::Isa;
use crate::kernels::table::kernels_for;
use crate::kernels::DType;
use half::f16;
use rng::Rng;

/// How a tensor's values are drawn.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Init {
    /// Normal-like, mean 0, standard deviation `sigma`.
    Normal(f32),
    /// `center + uniform(-spread, spread)` (norm weights).
    Around(f32, f32),
    /// Increasing from `lo` to `hi` over the values (RoPE frequency factors).
    Ramp(f32, f32),
    /// `a * token_embd + normal(b)`: an untied LM head correlated with the embedding.
    LikeEmbedding(f32, f32),
}

/// One tensor of a synthetic model: ggml shape (row length first) and its values' law.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorSpec {
    pub name: String,
    pub shape: Vec<u64>,
    pub init: Init,
}

impl TensorSpec {
    /// A weight matrix (2-D or more, named `*weight`): stored in the file's type, its values
    /// rounded through f16 first. Vectors and the 2-D expert biases (`*_exps.bias`, gpt-oss)
    /// are F32 as llama.cpp's converter writes them.
    fn is_matrix(&self) -> bool {
        self.shape.len() >= 2 && self.name.ends_with("weight")
    }
}

/// The weight types of a synthetic file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Quant {
    /// Matrices in F16, vectors in F32 (what llama.cpp's converter writes).
    F16,
    /// `llama-quantize Q8_0`'s type choice.
    Q8_0,
    /// `llama-quantize Q4_0`'s (Q6_K for the LM head).
    Q4_0,
    /// `llama-quantize Q4_K_M`'s mix: Q4_K, Q6_K for the LM head and for the `attn_v` (or
    /// fused `attn_qkv`, which llama.cpp files under attn_v) and `ffn_down` of the layers
    /// `use_more_bits` picks.
    Q4KM,
    /// `llama-quantize IQ4_NL`'s choice: IQ4_NL, Q6_K for the LM head (kiln's quantizers).
    Iq4Nl,
    /// `llama-quantize IQ4_XS`'s: IQ4_XS, Q6_K for the LM head.
    Iq4Xs,
    /// `llama-quantize MXFP4_MOE`'s: MXFP4 for the expert (3-D) tensors, Q8_0 for every other
    /// matrix, the LM head included.
    Mxfp4Moe,
}

impl Quant {
    /// The architecture proof's types (every variant is written in each).
    pub const ALL: [Quant; 4] = [Quant::F16, Quant::Q8_0, Quant::Q4_0, Quant::Q4KM];
    /// The quant proof's (tests/it/quant_proof.rs), written for some variants only.
    pub const NONLINEAR: [Quant; 3] = [Quant::Iq4Nl, Quant::Iq4Xs, Quant::Mxfp4Moe];

    /// The name `llama-quantize` takes ("F16", "Q8_0", "Q4_0", "Q4_K_M").
    pub fn name(self) -> &'static str {
        match self {
            Quant::F16 => "F16",
            Quant::Q8_0 => "Q8_0",
            Quant::Q4_0 => "Q4_0",
            Quant::Q4KM => "Q4_K_M",
            Quant::Iq4Nl => "IQ4_NL",
            Quant::Iq4Xs => "IQ4_XS",
            Quant::Mxfp4Moe => "MXFP4_MOE",
        }
    }

    /// llama.cpp's `general.file_type`.
    fn file_type(self) -> u32 {
        match self {
            Quant::F16 => 1,
            Quant::Q8_0 => 7,
            Quant::Q4_0 => 2,
            Quant::Q4KM => 15,
            Quant::Iq4Nl => 25,
            Quant::Iq4Xs => 30,
            Quant::Mxfp4Moe => 38,
        }
    }
}

/// llama.cpp's `use_more_bits`: the first and last eighth of the layers and every third one
/// between get more bits in the `_M` mixes.
fn use_more_bits(i: usize, n: usize) -> bool {
    i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2
}

/// The layer index in a `blk.N.` tensor name.
fn layer_of(name: &str) -> Option<usize> {
    name.strip_prefix("blk.")?.split('.').next()?.parse().ok()
}

/// The type `llama-quantize` gives tensor `t` for `quant` (only what these files need: every
/// row length here is a multiple of 256; no IQ4 variant has `n_gqa >= 4`, which would make
/// `attn_v` Q5_K).
fn quant_type(quant: Quant, t: &TensorSpec, tied: bool, n_layer: usize, wv: WvIndex) -> DType {
    // Vectors, routers (llama.cpp's converter keeps `ffn_gate_inp` in F32 and llama-quantize
    // never quantizes it), the convolution taps of LFM2, the DeltaNet and Mamba2
    // (ggml_ssm_conv reads f32; llama-quantize skips `shortconv.conv.weight` and `ssm_conv1d`)
    // and Mamba2's grouped norm (llama-quantize never quantizes a `*_norm.weight`).
    if !t.is_matrix()
        || t.name.ends_with("ffn_gate_inp.weight")
        || t.name.ends_with("shortconv.conv.weight")
        || t.name.contains("ssm_conv1d")
        || t.name.ends_with("_norm.weight")
    {
        return DType::F32;
    }
    // llama-quantize never quantizes gemma4's per-layer projection (kept as written, F16).
    if t.name == "per_layer_model_proj.weight" {
        return DType::F16;
    }
    // Gemma 4's per-layer token table is a token embedding: with a tied head, typed as the head.
    let is_head = t.name == "output.weight"
        || (tied && (t.name == "token_embd.weight" || t.name == "per_layer_token_embd.weight"));
    // llama-quantize counts attn_v (attn_qkv) tensors among themselves (`i_attention_wv` of
    // `n_attention_wv`: the attention layers only, in a hybrid model), ffn_down by layer.
    let more_bits = || match wv {
        Some((i, n)) => use_more_bits(i, n),
        None => layer_of(&t.name).is_some_and(|i| use_more_bits(i, n_layer)),
    };
    match quant {
        Quant::F16 => DType::F16,
        Quant::Q8_0 => DType::Q8_0,
        Quant::Q4_0 if is_head => DType::Q6_K,
        Quant::Q4_0 => DType::Q4_0,
        Quant::Q4KM if is_head => DType::Q6_K,
        Quant::Q4KM
            if (t.name.ends_with("attn_v.weight")
                || t.name.ends_with("attn_qkv.weight")
                || t.name.contains("ffn_down"))
                && more_bits() =>
        {
            DType::Q6_K
        }
        Quant::Q4KM => DType::Q4_K,
        Quant::Mxfp4Moe if t.shape.len() == 3 => DType::MXFP4,
        Quant::Mxfp4Moe => DType::Q8_0,
        Quant::Iq4Nl if is_head => DType::Q6_K,
        Quant::Iq4Nl => DType::IQ4_NL,
        Quant::Iq4Xs if is_head => DType::Q6_K,
        Quant::Iq4Xs => DType::IQ4_XS,
    }
}

/// A tensor's place among the attn_v (or fused attn_qkv) tensors, `(index, count)`.
type WvIndex = Option<(usize, usize)>;

fn is_attn_v(name: &str) -> bool {
    name.ends_with("attn_v.weight") || name.ends_with("attn_qkv.weight")
}

/// A synthetic model: its architecture, metadata keys (full names) and tensors.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelSpec {
    pub arch: &'static str,
    pub meta: Vec<(String, MetaValue)>,
    pub tensors: Vec<TensorSpec>,
    pub n_layer: usize,
}

impl ModelSpec {
    /// Whether the LM head is the token embedding (no `output.weight`).
    fn tied(&self) -> bool {
        !self.tensors.iter().any(|t| t.name == "output.weight")
    }
}

/// Why a synthetic model could not be written.
#[derive(Debug, thiserror::Error)]
pub enum SynthError {
    #[error("vocabulary file: {0}")]
    Vocab(String),
    #[error(transparent)]
    Write(#[from] WriteError),
    #[error("tensor {0}: no quantizer for its type")]
    NoQuantizer(String),
}

/// The values of tensor `t` (f32, before any rounding to the file's type), `n_vocab` rows for
/// embedding-shaped tensors.
fn values(t: &TensorSpec, seed: u64, embd: Option<&[f32]>) -> Vec<f32> {
    let n: u64 = t.shape.iter().product();
    let mut rng = Rng::for_tensor(seed, &t.name);
    let n = n as usize;
    match t.init {
        Init::Normal(s) => (0..n).map(|_| rng.normal(s)).collect(),
        Init::Around(c, w) => (0..n).map(|_| c + rng.uniform(w)).collect(),
        Init::Ramp(lo, hi) => (0..n)
            .map(|i| lo + (hi - lo) * i as f32 / (n.max(2) - 1) as f32)
            .collect(),
        Init::LikeEmbedding(a, b) => {
            let e = embd.expect("the embedding is generated first");
            e.iter().map(|&x| a * x + rng.normal(b)).collect()
        }
    }
}

/// Rounds `v` to f16 and back: the values an F16 file holds, which the quantized copies start
/// from (as `llama-quantize` does when it reads the F16 file).
fn through_f16(v: &mut [f32]) {
    for x in v {
        *x = f16::from_f32(*x).to_f32();
    }
}

/// ggml's `quantize_row_q8_0_ref` (what `llama-quantize` writes): `d = amax / 127` rounded to
/// f16, values `round(x / d)` half away from zero. kiln's Q8_0 `from_f32` follows ggml's x86
/// *activation* quantizer instead (`127 / amax`, ties to even), whose bytes differ slightly.
fn q8_0_ref(v: &[f32]) -> Vec<u8> {
    let mut out = Vec::with_capacity(v.len() / 32 * 34);
    for block in v.chunks_exact(32) {
        let amax = block.iter().fold(0.0f32, |m, x| m.max(x.abs()));
        let d = amax / 127.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        out.extend_from_slice(&f16::from_f32(d).to_le_bytes());
        out.extend(block.iter().map(|&x| (x * id).round() as i8 as u8));
    }
    out
}

/// The bytes of `v` (rows of `row_len`) in `dtype`: floats as they are, Q8_0 as `llama-quantize`
/// writes it, other types with kiln's scalar quantizer.
fn encode(name: &str, v: &[f32], row_len: usize, dtype: DType) -> Result<Vec<u8>, SynthError> {
    match dtype {
        DType::Q8_0 => return Ok(q8_0_ref(v)),
        DType::F32 => return Ok(v.iter().flat_map(|x| x.to_le_bytes()).collect()),
        DType::F16 => {
            return Ok(v
                .iter()
                .flat_map(|x| f16::from_f32(*x).to_le_bytes())
                .collect())
        }
        _ => {}
    }
    let q = kernels_for(dtype, Isa::Scalar)
        .ok()
        .and_then(|k| k.from_f32)
        .ok_or_else(|| SynthError::NoQuantizer(name.to_string()))?;
    let row_bytes = dtype
        .bytes_for(row_len as u64)
        .ok_or_else(|| SynthError::NoQuantizer(name.to_string()))? as usize;
    let mut out = vec![0u8; v.len() / row_len * row_bytes];
    for (src, dst) in v.chunks_exact(row_len).zip(out.chunks_exact_mut(row_bytes)) {
        q(src, dst);
    }
    Ok(out)
}

/// Writes `spec` in `quant` from `seed`, with the `tokenizer.*` keys of `vocab` (a vocab-only
/// GGUF). Deterministic: the same arguments give the same bytes.
pub fn build(
    spec: &ModelSpec,
    name: &str,
    vocab: &GgufFile,
    quant: Quant,
    seed: u64,
) -> Result<GgufWriter, SynthError> {
    let mut all = build_all(spec, name, vocab, &[quant], seed)?;
    Ok(all.remove(0))
}

/// [`build`] for several weight types at once: each tensor's values are drawn once and written
/// in every type (the bytes of each file are those [`build`] gives).
pub fn build_all(
    spec: &ModelSpec,
    name: &str,
    vocab: &GgufFile,
    quants: &[Quant],
    seed: u64,
) -> Result<Vec<GgufWriter>, SynthError> {
    let mut n_tok = 0;
    let mut tokenizer = Vec::new();
    for (k, v) in vocab.metadata() {
        if k.starts_with("tokenizer.") {
            if let (true, MetaValue::Array(a)) = (k == "tokenizer.ggml.tokens", v) {
                n_tok = a.len();
            }
            tokenizer.push((k, v));
        }
    }
    if n_tok == 0 {
        return Err(SynthError::Vocab("no tokenizer.ggml.tokens".into()));
    }
    let mut writers = Vec::with_capacity(quants.len());
    for &quant in quants {
        let mut w = GgufWriter::new();
        w.add_meta("general.architecture", MetaValue::String(spec.arch.into()))?;
        // Not in general.name: llama.cpp applies per-model vocabulary quirks by name ("phi3").
        w.add_meta(
            "general.name",
            MetaValue::String(format!("kiln synthetic (random weights, seed {seed})")),
        )?;
        w.add_meta("kiln.synth.variant", MetaValue::String(name.into()))?;
        w.add_meta("general.file_type", MetaValue::U32(quant.file_type()))?;
        if quant != Quant::F16 {
            w.add_meta("general.quantization_version", MetaValue::U32(2))?;
        }
        for (k, v) in &spec.meta {
            w.add_meta(k, v.clone())?;
        }
        for (k, v) in &tokenizer {
            w.add_meta(k, (*v).clone())?;
        }
        writers.push(w);
    }
    let tied = spec.tied();
    let mut embd: Option<Vec<f32>> = None;
    let n_wv = spec.tensors.iter().filter(|t| is_attn_v(&t.name)).count();
    let mut wv_seen = 0;
    for t in &spec.tensors {
        let mut shape = t.shape.clone();
        // A dimension of 0 stands for the vocabulary's size.
        for dim in shape.iter_mut().filter(|d| **d == 0) {
            *dim = n_tok as u64;
        }
        let t = TensorSpec { shape, ..t.clone() };
        let mut v = values(&t, seed, embd.as_deref());
        if t.is_matrix() {
            through_f16(&mut v);
        }
        let wv = is_attn_v(&t.name).then(|| {
            wv_seen += 1;
            (wv_seen - 1, n_wv)
        });
        for (w, &quant) in writers.iter_mut().zip(quants) {
            let dtype = quant_type(quant, &t, tied, spec.n_layer, wv);
            let bytes = encode(&t.name, &v, t.shape[0] as usize, dtype)?;
            w.add_tensor(&t.name, dtype, &t.shape, bytes)?;
        }
        if t.name == "token_embd.weight" {
            embd = Some(v);
        }
    }
    Ok(writers)
}

/// The token ids a proof feeds: `n` ids drawn from `seed` among `3..n_vocab` (past the
/// unknown, BOS and EOS ids of the llama vocabularies).
pub fn proof_tokens(seed: u64, n: usize, n_vocab: usize) -> Vec<u32> {
    let mut rng = Rng::for_tensor(seed, "proof tokens");
    let span = n_vocab.saturating_sub(3).max(1) as u64;
    (0..n).map(|_| (3 + rng.next_u64() % span) as u32).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn more_bits_follows_llama_cpp() {
        // 4 layers: n/8 = 0, 7n/8 = 3 -> layers 2 ((2 - 0) % 3 == 2) and 3.
        let picked: Vec<usize> = (0..4).filter(|&i| use_more_bits(i, 4)).collect();
        assert_eq!(picked, vec![2, 3]);
        let picked: Vec<usize> = (0..16).filter(|&i| use_more_bits(i, 16)).collect();
        assert_eq!(picked, vec![0, 1, 4, 7, 10, 13, 14, 15]);
    }

    #[test]
    fn types_follow_the_mixes() {
        let t = |name: &str| TensorSpec {
            name: name.into(),
            shape: vec![256, 256],
            init: Init::Normal(1.0),
        };
        assert_eq!(
            quant_type(Quant::Q4_0, &t("token_embd.weight"), true, 4, None),
            DType::Q6_K
        );
        assert_eq!(
            quant_type(Quant::Q4_0, &t("token_embd.weight"), false, 4, None),
            DType::Q4_0
        );
        assert_eq!(
            quant_type(Quant::Q4KM, &t("blk.3.attn_v.weight"), true, 4, None),
            DType::Q6_K
        );
        assert_eq!(
            quant_type(Quant::Q4KM, &t("blk.1.attn_v.weight"), true, 4, None),
            DType::Q4_K
        );
        assert_eq!(
            quant_type(Quant::Q4KM, &t("blk.0.attn_qkv.weight"), true, 4, None),
            DType::Q4_K
        );
        assert_eq!(
            quant_type(Quant::Q4KM, &t("blk.2.attn_qkv.weight"), true, 4, None),
            DType::Q6_K
        );
        assert_eq!(
            quant_type(Quant::Q8_0, &t("output.weight"), false, 4, None),
            DType::Q8_0
        );
    }
}
