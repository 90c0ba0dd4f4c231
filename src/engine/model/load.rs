//! Building [`ModelWeights`] from a GGUF file: every tensor looked up by its llama.cpp name,
//! its shape checked against the description, its type checked against the kernel table. Fused
//! matrices (phi3's `attn_qkv.weight`, and `ffn_up.weight` holding gate then up) are split into
//! row ranges of the same mapped bytes: no copy of the weights.

use crate::engine::error::EngineError;
use crate::engine::model::desc::{FfnKind, MixerKind, MoeDesc};
use crate::engine::model::ModelDesc;
use crate::engine::weights::{
    values, vector, AttnWeights, DenseFfn, Expert, FfnWeights, GdnWeights, LayerPle, LayerWeights,
    Mamba2Weights, MixerWeights, ModelWeights, MoeFfn, PleWeights, ShortConvWeights, Weight,
};
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

/// Splits the `(sum of parts, k)` matrix `name` into consecutive row ranges of `parts` rows.
fn split_matrix<const N: usize>(
    file: &GgufFile,
    name: &str,
    parts: [usize; N],
    k: usize,
) -> Result<[Weight; N], EngineError> {
    let t = tensor(file, name)?;
    let total: usize = parts.iter().sum();
    let want = [k as u64, total as u64];
    if t.shape() != want {
        return Err(EngineError::BadShape {
            name: name.to_string(),
            got: t.shape().to_vec(),
            want: want.to_vec(),
        });
    }
    let mut r0 = 0;
    let mut out = Vec::with_capacity(N);
    for n in parts {
        let part = t.rows(r0, r0 + n).ok_or_else(|| EngineError::BadShape {
            name: name.to_string(),
            got: t.shape().to_vec(),
            want: want.to_vec(),
        })?;
        out.push(Weight::new(name, part, n, k)?);
        r0 += n;
    }
    Ok(out
        .try_into()
        .unwrap_or_else(|_| unreachable!("N parts were pushed")))
}

/// Splits the vector `name` of `sum(parts)` values into consecutive parts.
fn split_vec<const N: usize>(
    file: &GgufFile,
    name: &str,
    parts: [usize; N],
) -> Result<Option<[Vec<f32>; N]>, EngineError> {
    let Some(all) = opt_vec(file, name, parts.iter().sum())? else {
        return Ok(None);
    };
    let mut r0 = 0;
    let v: Vec<Vec<f32>> = parts
        .iter()
        .map(|&n| {
            r0 += n;
            all[r0 - n..r0].to_vec()
        })
        .collect();
    Ok(v.try_into().ok())
}

/// The `n` experts of the 3-D tensor `name` (`[k, n_out, n]` in ggml order), one `(n_out, k)`
/// view per expert.
fn experts_of(
    file: &GgufFile,
    name: &str,
    n: usize,
    n_out: usize,
    k: usize,
) -> Result<Vec<Weight>, EngineError> {
    let t = tensor(file, name)?;
    let want = [k as u64, n_out as u64, n as u64];
    let bad = || EngineError::BadShape {
        name: name.to_string(),
        got: t.shape().to_vec(),
        want: want.to_vec(),
    };
    if t.shape() != want {
        return Err(bad());
    }
    (0..n)
        .map(|e| Weight::new(name, t.matrix(e).ok_or_else(bad)?, n_out, k))
        .collect()
}

/// The `n` experts' biases of the 2-D tensor `name` (`[width, n]` in ggml order), one
/// `width`-long vector per expert; `n` `None`s when the family has none (`used` false).
fn expert_biases(
    file: &GgufFile,
    name: &str,
    n: usize,
    width: usize,
    used: bool,
) -> Result<Vec<Option<Vec<f32>>>, EngineError> {
    if !used {
        return Ok(vec![None; n]);
    }
    let all = values(name, &tensor(file, name)?, &[width as u64, n as u64])?;
    Ok(all.chunks_exact(width).map(|b| Some(b.to_vec())).collect())
}

/// Layer `i`'s mixture: router (and its bias), experts (views of the 3-D tensors, with their
/// biases) and shared expert.
fn moe_ffn(file: &GgufFile, i: usize, m: &MoeDesc, d: usize) -> Result<MoeFfn, EngineError> {
    let n = |s: &str| format!("blk.{i}.{s}");
    let (ne, fe) = (m.n_expert, m.n_ff_exp);
    let gates = experts_of(file, &n("ffn_gate_exps.weight"), ne, fe, d)?;
    let ups = experts_of(file, &n("ffn_up_exps.weight"), ne, fe, d)?;
    let downs = experts_of(file, &n("ffn_down_exps.weight"), ne, d, fe)?;
    let b_gates = expert_biases(file, &n("ffn_gate_exps.bias"), ne, fe, m.biases)?;
    let b_ups = expert_biases(file, &n("ffn_up_exps.bias"), ne, fe, m.biases)?;
    let b_downs = expert_biases(file, &n("ffn_down_exps.bias"), ne, d, m.biases)?;
    let experts = gates
        .into_iter()
        .zip(ups)
        .zip(downs)
        .zip(b_gates.into_iter().zip(b_ups).zip(b_downs))
        .map(|(((gate, up), down), ((b_gate, b_up), b_down))| Expert {
            gate,
            up,
            down,
            b_gate,
            b_up,
            b_down,
        })
        .collect();
    let shared = match m.n_ff_shexp {
        Some(fs) => Some(DenseFfn {
            w_gate: matrix(file, &n("ffn_gate_shexp.weight"), fs, d)?,
            w_up: matrix(file, &n("ffn_up_shexp.weight"), fs, d)?,
            b_gate: None,
            b_up: None,
            w_down: matrix(file, &n("ffn_down_shexp.weight"), d, fs)?,
            b_down: None,
        }),
        None => None,
    };
    Ok(MoeFfn {
        router: matrix(file, &n("ffn_gate_inp.weight"), ne, d)?,
        router_bias: if m.biases {
            Some(vec_of(file, &n("ffn_gate_inp.bias"), ne)?)
        } else {
            None
        },
        experts,
        shared,
        shared_gate: if m.shared_gate {
            Some(Box::new(matrix(
                file,
                &n("ffn_gate_inp_shexp.weight"),
                1,
                d,
            )?))
        } else {
            None
        },
    })
}

/// Layer `i`'s dense FFN (`f` wide; gate and up split from a fused `ffn_up` when the family
/// fuses them).
fn dense_ffn(
    file: &GgufFile,
    i: usize,
    fused_gate_up: bool,
    f: usize,
    d: usize,
) -> Result<DenseFfn, EngineError> {
    let n = |s: &str| format!("blk.{i}.{s}");
    let [w_gate, w_up] = if fused_gate_up {
        split_matrix(file, &n("ffn_up.weight"), [f, f], d)?
    } else {
        [
            matrix(file, &n("ffn_gate.weight"), f, d)?,
            matrix(file, &n("ffn_up.weight"), f, d)?,
        ]
    };
    Ok(DenseFfn {
        w_gate,
        w_up,
        b_gate: opt_vec(file, &n("ffn_gate.bias"), f)?,
        b_up: opt_vec(file, &n("ffn_up.bias"), f)?,
        w_down: matrix(file, &n("ffn_down.weight"), d, f)?,
        b_down: opt_vec(file, &n("ffn_down.bias"), d)?,
    })
}

/// Loads all weights, and the RoPE frequency factors into `desc` when the file has them
/// (`rope_freqs.weight`, else LongRoPE's long or short factors as `desc` chose).
pub(crate) fn load_weights(
    file: &GgufFile,
    desc: &mut ModelDesc,
) -> Result<ModelWeights, EngineError> {
    let d = desc.n_embd;
    let token_embd = matrix(file, "token_embd.weight", desc.n_vocab, d)?;
    let tied = desc.arch.rules().always_tied || file.tensor_data("output.weight").is_none();
    let (output, tied_output) = if tied {
        (token_embd.clone(), true)
    } else {
        (matrix(file, "output.weight", desc.n_vocab, d)?, false)
    };
    let n_factors = desc.rope.n_dims / 2;
    let long_short = if desc.long_rope_factors {
        "rope_factors_long.weight"
    } else {
        "rope_factors_short.weight"
    };
    let factors = match opt_vec(file, "rope_freqs.weight", n_factors)? {
        Some(v) => Some(v),
        None => opt_vec(file, long_short, n_factors)?,
    };
    // Gemma 4's factors (its proportional RoPE) belong to the global layers only.
    let n_tables = if desc.arch.rules().gemma4_keys {
        1
    } else {
        desc.ropes.len()
    };
    for r in desc.ropes.iter_mut().take(n_tables) {
        r.freq_factors = factors.clone();
    }
    desc.rope.freq_factors = factors;
    let mut layers = Vec::with_capacity(desc.n_layer);
    for i in 0..desc.n_layer {
        let n = |s: &str| format!("blk.{i}.{s}");
        let mixer = match desc.layers[i].mixer {
            MixerKind::Attention { .. } | MixerKind::SharedAttention { .. } => {
                MixerWeights::Attention(attention(file, i, desc)?)
            }
            MixerKind::ShortConv { .. } => {
                let l = desc.conv_l_cache;
                MixerWeights::ShortConv(ShortConvWeights {
                    in_proj: matrix(file, &n("shortconv.in_proj.weight"), 3 * d, d)?,
                    conv: taps_by_tap(
                        &values(
                            &n("shortconv.conv.weight"),
                            &tensor(file, &n("shortconv.conv.weight"))?,
                            &[l as u64, d as u64],
                        )?,
                        l,
                    ),
                    out_proj: matrix(file, &n("shortconv.out_proj.weight"), d, d)?,
                })
            }
            MixerKind::GatedDeltaNet { .. } => {
                let g = desc.deltanet.ok_or(EngineError::BadHParam {
                    key: "ssm.state_size",
                    message: format!("layer {i} is a gated DeltaNet without its shape"),
                })?;
                let (c, vd, hv) = (g.conv_dim(), g.value_dim(), g.n_v_heads);
                let conv_name = n("ssm_conv1d.weight");
                MixerWeights::GatedDeltaNet(GdnWeights {
                    wqkv: matrix(file, &n("attn_qkv.weight"), c, d)?,
                    wgate: matrix(file, &n("attn_gate.weight"), vd, d)?,
                    wbeta: matrix(file, &n("ssm_beta.weight"), hv, d)?,
                    walpha: matrix(file, &n("ssm_alpha.weight"), hv, d)?,
                    conv: taps_by_tap(
                        &values(
                            &conv_name,
                            &tensor(file, &conv_name)?,
                            &[g.d_conv as u64, c as u64],
                        )?,
                        g.d_conv,
                    ),
                    dt_bias: vec_of(file, &n("ssm_dt.bias"), hv)?,
                    a: vec_of(file, &n("ssm_a"), hv)?,
                    norm: vec_of(file, &n("ssm_norm.weight"), g.head_dim)?,
                    out: matrix(file, &n("ssm_out.weight"), d, vd)?,
                })
            }
            MixerKind::Mamba2 { .. } => MixerWeights::Mamba2(mamba2(file, i, desc)?),
        };
        let ffn = match (desc.layers[i].ffn, &desc.moe) {
            (FfnKind::Moe, Some(m)) => FfnWeights::Moe(moe_ffn(file, i, m, d)?),
            (FfnKind::Moe, None) => {
                return Err(EngineError::BadHParam {
                    key: "expert_count",
                    message: format!("layer {i} is a mixture of experts without experts"),
                })
            }
            (FfnKind::Dense, _) => FfnWeights::Dense(dense_ffn(
                file,
                i,
                desc.arch.rules().fused_gate_up,
                desc.n_ff_layers[i],
                d,
            )?),
        };
        let post_ffn_norm = if desc.post_norms {
            Some(vec_of(file, &n("post_ffw_norm.weight"), d)?)
        } else {
            None
        };
        layers.push(LayerWeights {
            attn_norm: vec_of(file, &n("attn_norm.weight"), d)?,
            mixer,
            ffn_norm: vec_of(file, &n(desc.arch.rules().ffn_norm_tensor), d)?,
            ffn,
            post_ffn_norm,
            ple: layer_ple(file, i, desc)?,
            out_scale: opt_vec(file, &n("layer_output_scale.weight"), 1)?.map(|v| v[0]),
        });
    }
    Ok(ModelWeights {
        token_embd,
        layers,
        output_norm: vec_of(file, desc.arch.rules().output_norm_tensor, d)?,
        output,
        output_bias: opt_vec(file, "output.bias", desc.n_vocab)?,
        tied_output,
        ple: ple_weights(file, desc)?,
    })
}

/// Gemma 4's per-layer embedding table and projection, when the model has them.
fn ple_weights(file: &GgufFile, desc: &ModelDesc) -> Result<Option<PleWeights>, EngineError> {
    let (p, d) = (desc.n_embd_per_layer, desc.n_embd);
    if p == 0 {
        return Ok(None);
    }
    let w = desc.n_layer * p;
    Ok(Some(PleWeights {
        tok_embd: matrix(file, "per_layer_token_embd.weight", desc.n_vocab, w)?,
        model_proj: matrix(file, "per_layer_model_proj.weight", w, d)?,
        proj_norm: vec_of(file, "per_layer_proj_norm.weight", p)?,
    }))
}

/// Layer `i`'s per-layer embedding block, when the model has them.
fn layer_ple(file: &GgufFile, i: usize, desc: &ModelDesc) -> Result<Option<LayerPle>, EngineError> {
    let (p, d) = (desc.n_embd_per_layer, desc.n_embd);
    if p == 0 {
        return Ok(None);
    }
    let n = |s: &str| format!("blk.{i}.{s}");
    Ok(Some(LayerPle {
        inp_gate: matrix(file, &n("inp_gate.weight"), p, d)?,
        proj: matrix(file, &n("proj.weight"), d, p)?,
        post_norm: vec_of(file, &n("post_norm.weight"), d)?,
    }))
}

/// The file's convolution taps, channel by channel (`[d][l]`, ggml's `[l, d]`), regrouped tap
/// by tap (`[l][d]`) so a tap runs over contiguous channels.
fn taps_by_tap(by_channel: &[f32], l: usize) -> Vec<f32> {
    let d = by_channel.len() / l;
    (0..l * d)
        .map(|i| by_channel[(i % d) * l + i / d])
        .collect()
}

/// Layer `i`'s Mamba2 mixer (llama.cpp `llama_model_granite_hybrid::load_arch_tensors`).
fn mamba2(file: &GgufFile, i: usize, desc: &ModelDesc) -> Result<Mamba2Weights, EngineError> {
    let n = |s: &str| format!("blk.{i}.{s}");
    let m = desc.mamba2.ok_or(EngineError::BadHParam {
        key: "ssm.inner_size",
        message: format!("layer {i} is a Mamba2 layer without a Mamba2 shape"),
    })?;
    let (c, nh) = (m.conv_dim, m.n_head as u64);
    let of = |name: String, shape: &[u64]| values(&name, &tensor(file, &name)?, shape);
    Ok(Mamba2Weights {
        in_proj: matrix(file, &n("ssm_in.weight"), m.d_in_proj, desc.n_embd)?,
        conv: taps_by_tap(
            &of(n("ssm_conv1d.weight"), &[m.d_conv as u64, c as u64])?,
            m.d_conv,
        ),
        conv_bias: opt_vec(file, &n("ssm_conv1d.bias"), c)?.unwrap_or_else(|| vec![0.0; c]),
        dt_bias: vec_of(file, &n("ssm_dt.bias"), m.n_head)?,
        a: of(n("ssm_a"), &[1, nh])?,
        d: of(n("ssm_d"), &[1, nh])?,
        norm: of(
            n("ssm_norm.weight"),
            &[(m.d_inner / m.n_group) as u64, m.n_group as u64],
        )?,
        out_proj: matrix(file, &n("ssm_out.weight"), desc.n_embd, m.d_inner)?,
    })
}

/// Layer `i`'s attention: Q, K, V (split from a fused `attn_qkv` when the file has one), their
/// biases and head norms, the output projection and the family's post-norm and sinks.
fn attention(file: &GgufFile, i: usize, desc: &ModelDesc) -> Result<AttnWeights, EngineError> {
    let d = desc.n_embd;
    let hd = desc.head_dim_of(i);
    let own_kv = matches!(desc.layers[i].mixer, MixerKind::Attention { .. });
    let nq = desc.n_head * hd;
    let nkv = desc.n_head_kv * hd;
    let (qn_width, kn_width) = if desc.qk_norm_full {
        (nq, nkv)
    } else {
        (hd, hd)
    };
    let rules = desc.arch.rules();
    let n = |s: &str| format!("blk.{i}.{s}");
    let norm = |s: &str, len, used: bool| {
        if used {
            vec_of(file, &n(s), len).map(Some)
        } else {
            Ok(None)
        }
    };
    let (wq, wk, wv, fused_bias) = if file.tensor(&n("attn_qkv.weight")).is_some() {
        let [q, k, v] = split_matrix(file, &n("attn_qkv.weight"), [nq, nkv, nkv], d)?;
        (
            q,
            Some(k),
            Some(v),
            split_vec(file, &n("attn_qkv.bias"), [nq, nkv, nkv])?,
        )
    } else {
        // A shared-K/V layer has no K/V of its own; gemma4 takes V = K without attn_v.
        let v_optional = desc.arch.rules().gemma4_keys;
        let kv_matrix = |s: &str, required: bool| {
            if !own_kv || (!required && file.tensor(&n(s)).is_none()) {
                Ok(None)
            } else {
                matrix(file, &n(s), nkv, d).map(Some)
            }
        };
        (
            // A gated q (qwen35) holds each head's query then its output gate.
            matrix(
                file,
                &n("attn_q.weight"),
                nq * (1 + usize::from(desc.attn_out_gate)),
                d,
            )?,
            kv_matrix("attn_k.weight", true)?,
            kv_matrix("attn_v.weight", !v_optional)?,
            None,
        )
    };
    let [bq, bk, bv] = match fused_bias {
        Some([q, k, v]) => [Some(q), Some(k), Some(v)],
        None => [
            opt_vec(file, &n("attn_q.bias"), nq)?,
            opt_vec(file, &n("attn_k.bias"), nkv)?,
            opt_vec(file, &n("attn_v.bias"), nkv)?,
        ],
    };
    Ok(AttnWeights {
        wq,
        wk,
        wv,
        bq,
        bk,
        bv,
        q_norm: norm("attn_q_norm.weight", qn_width, desc.qk_norm)?,
        k_norm: norm("attn_k_norm.weight", kn_width, desc.qk_norm && own_kv)?,
        wo: matrix(file, &n("attn_output.weight"), d, nq)?,
        bo: opt_vec(file, &n("attn_output.bias"), d)?,
        post_attn_norm: norm("post_attention_norm.weight", d, desc.post_norms)?,
        attn_sinks: norm("attn_sinks.weight", desc.n_head, rules.attn_sinks)?,
    })
}
