//! Building [`LlamaWeights`] from a GGUF file: every tensor looked up by its llama.cpp name,
//! its shape checked against the config, its type checked against the kernel table.

use crate::engine::error::EngineError;
use crate::engine::model::LlamaConfig;
use crate::engine::weights::{vector, LayerWeights, LlamaWeights, Weight};
use crate::gguf::{GgufFile, TensorData};

fn tensor(file: &GgufFile, name: &str) -> Result<TensorData, EngineError> {
    file.tensor_data(name)
        .ok_or_else(|| EngineError::MissingTensor(name.to_string()))
}

fn matrix(file: &GgufFile, name: &str, n_out: usize, k: usize) -> Result<Weight, EngineError> {
    Weight::new(name, tensor(file, name)?, n_out, k)
}

fn vec_of(file: &GgufFile, name: &str, n: usize) -> Result<Vec<f32>, EngineError> {
    vector(name, &tensor(file, name)?, n)
}

fn opt_vec(file: &GgufFile, name: &str, n: usize) -> Result<Option<Vec<f32>>, EngineError> {
    match file.tensor_data(name) {
        Some(t) => vector(name, &t, n).map(Some),
        None => Ok(None),
    }
}

/// Loads all weights, and the RoPE frequency factors into `cfg` when the file has them.
pub(crate) fn load_weights(
    file: &GgufFile,
    cfg: &mut LlamaConfig,
) -> Result<LlamaWeights, EngineError> {
    let d = cfg.n_embd;
    let nq = cfg.n_head * cfg.head_dim;
    let nkv = cfg.n_head_kv * cfg.head_dim;
    let f = cfg.n_ff;
    let token_embd = matrix(file, "token_embd.weight", cfg.n_vocab, d)?;
    let (output, tied_output) = match file.tensor_data("output.weight") {
        Some(t) => (Weight::new("output.weight", t, cfg.n_vocab, d)?, false),
        None => (token_embd.clone(), true),
    };
    cfg.rope.freq_factors = opt_vec(file, "rope_freqs.weight", cfg.rope.n_dims / 2)?;
    let mut layers = Vec::with_capacity(cfg.n_layer);
    for i in 0..cfg.n_layer {
        let n = |s: &str| format!("blk.{i}.{s}");
        let bias = |s: &str, len| {
            if cfg.qkv_bias {
                vec_of(file, &n(s), len).map(Some)
            } else {
                opt_vec(file, &n(s), len)
            }
        };
        layers.push(LayerWeights {
            attn_norm: vec_of(file, &n("attn_norm.weight"), d)?,
            wq: matrix(file, &n("attn_q.weight"), nq, d)?,
            wk: matrix(file, &n("attn_k.weight"), nkv, d)?,
            wv: matrix(file, &n("attn_v.weight"), nkv, d)?,
            bq: bias("attn_q.bias", nq)?,
            bk: bias("attn_k.bias", nkv)?,
            bv: bias("attn_v.bias", nkv)?,
            wo: matrix(file, &n("attn_output.weight"), d, nq)?,
            ffn_norm: vec_of(file, &n("ffn_norm.weight"), d)?,
            w_gate: matrix(file, &n("ffn_gate.weight"), f, d)?,
            w_up: matrix(file, &n("ffn_up.weight"), f, d)?,
            w_down: matrix(file, &n("ffn_down.weight"), d, f)?,
        });
    }
    Ok(LlamaWeights {
        token_embd,
        layers,
        output_norm: vec_of(file, "output_norm.weight", d)?,
        output,
        tied_output,
    })
}
