//! The description each family's keys give, on the synthetic proof models (written in memory
//! with a ten-token vocabulary) and on hand-edited metadata.

use super::*;
use crate::engine::synth::{build, proof_variants, Quant};
use crate::gguf::{GgufWriter, MetaArray, StrArray};

/// A vocab-only file of ten tokens.
fn tiny_vocab() -> GgufFile {
    let mut w = GgufWriter::new();
    let mut tokens = StrArray::new();
    for i in 0..10 {
        tokens.push(&format!("t{i}"));
    }
    w.add_meta(
        "tokenizer.ggml.tokens",
        MetaValue::Array(MetaArray::String(tokens)),
    )
    .unwrap();
    GgufFile::from_bytes(w.to_bytes().unwrap()).unwrap()
}

/// The proof variant `name` with `edit` applied to its metadata.
fn hparams_of(name: &str, edit: impl FnOnce(&mut Vec<(String, MetaValue)>)) -> HParams {
    let mut v = proof_variants()
        .into_iter()
        .find(|v| v.name == name)
        .unwrap();
    edit(&mut v.spec.meta);
    let w = build(&v.spec, name, &tiny_vocab(), Quant::F16, 1).unwrap();
    HParams::from_gguf(&GgufFile::from_bytes(w.to_bytes().unwrap()).unwrap()).unwrap()
}

fn set(meta: &mut Vec<(String, MetaValue)>, key: &str, v: MetaValue) {
    meta.retain(|(k, _)| k != key);
    meta.push((key.to_string(), v));
}

#[test]
fn gemma3_window_pattern_and_scales() {
    let h = hparams_of("gemma3", |_| {});
    let w = h.sliding_window.as_ref().unwrap();
    assert_eq!((w.size, w.rope_freq_base), (64, 10_000.0));
    // The default pattern 6: every sixth layer is global.
    assert_eq!(w.local, vec![true, true, true, true, true, false]);
    assert_eq!(h.q_scale, Some(1.0 / 128f32.sqrt()));
    assert_eq!(h.kq_scale, 1.0);
    assert_eq!(h.embd_scale, Some(16.0));
    assert!(h.qk_norm && h.post_norms && h.activation == Activation::Gelu);
    assert_eq!(h.final_softcap, None);
    assert!(h.variant().contains("sliding window 64 on 5 of 6 layers"));
    // An explicit pattern: a count, or one flag per layer.
    let h = hparams_of("gemma3", |m| {
        set(
            m,
            "gemma3.attention.sliding_window_pattern",
            MetaValue::U32(3),
        )
    });
    let local = &h.sliding_window.unwrap().local;
    assert_eq!(local, &vec![true, true, false, true, true, false]);
    let flags = vec![false, true, false, true, false, true];
    let h = hparams_of("gemma3", |m| {
        set(
            m,
            "gemma3.attention.sliding_window_pattern",
            MetaValue::Array(MetaArray::Bool(flags.clone())),
        )
    });
    assert_eq!(h.sliding_window.unwrap().local, flags);
    // No window key: no sliding window (llama.cpp's gemma3 without SWA).
    let h = hparams_of("gemma3", |m| {
        m.retain(|(k, _)| !k.ends_with("sliding_window"))
    });
    assert!(h.sliding_window.is_none());
}

#[test]
fn gemma_27b_scales_queries_by_the_width_per_head() {
    let q = |arch, n_layer| query_prescale(QueryScale::PreGemma, arch, n_layer, 5376, 32, 128);
    assert_eq!(q(Arch::Gemma3, 62), Some(1.0 / 168f32.sqrt()));
    assert_eq!(q(Arch::Gemma2, 46), Some(1.0 / 168f32.sqrt()));
    assert_eq!(q(Arch::Gemma3, 34), Some(1.0 / 128f32.sqrt()));
    assert_eq!(
        query_prescale(QueryScale::Kernel, Arch::Llama, 62, 5376, 32, 128),
        None
    );
}

#[test]
fn gemma2_caps_and_default_window() {
    let h = hparams_of("gemma2", |m| {
        m.retain(|(k, _)| !k.ends_with("sliding_window"))
    });
    let w = h.sliding_window.unwrap();
    assert_eq!(w.size, 4096);
    assert_eq!(w.local, vec![true, false, true, false]);
    assert_eq!(w.rope_freq_base, h.rope_freq_base);
    assert_eq!((h.attn_softcap, h.final_softcap), (Some(8.0), Some(30.0)));
    let h = hparams_of("gemma2", |m| {
        m.retain(|(k, _)| !k.contains("softcapping"));
    });
    assert_eq!((h.attn_softcap, h.final_softcap), (Some(50.0), Some(30.0)));
    assert!(h.tied_embeddings);
}

#[test]
fn smollm3_skips_rope_on_every_fourth_layer() {
    let h = hparams_of("smollm3", |_| {});
    assert_eq!(h.rope_layers, vec![true, true, true, false]);
}

#[test]
fn granite_multipliers_and_required_logit_scale() {
    let h = hparams_of("granite", |_| {});
    assert_eq!(h.embd_scale, Some(12.0));
    assert_eq!(h.residual_scale, Some(0.22));
    assert_eq!(h.logit_scale, Some(8.0));
    assert_eq!(h.kq_scale, 0.02);
    let mut v = proof_variants()
        .into_iter()
        .find(|v| v.name == "granite")
        .unwrap();
    v.spec.meta.retain(|(k, _)| !k.ends_with("logit_scale"));
    let w = build(&v.spec, "granite", &tiny_vocab(), Quant::F16, 1).unwrap();
    let e = HParams::from_gguf(&GgufFile::from_bytes(w.to_bytes().unwrap()).unwrap());
    assert!(matches!(e, Err(HParamsError::Missing { key }) if key == "granite.logit_scale"));
}

#[test]
fn phi3_is_fused_with_partial_rope() {
    let h = hparams_of("phi3", |_| {});
    assert!(h.fused_qkv && h.fused_gate_up && !h.tied_embeddings);
    assert_eq!((h.rope_dim, h.head_dim), (96, 128));
    assert_eq!(h.rope_scaling.attn_factor, 1.19);
    assert_eq!(h.q_scale, Some(1.0 / 128f32.sqrt()));
}

#[test]
fn yarn_and_temperature_of_mistral3() {
    let h = hparams_of("mistral3", |_| {});
    let s = h.rope_scaling;
    assert_eq!(
        (s.kind, s.factor, s.original_ctx),
        (RopeScalingKind::Yarn, 4.0, Some(64))
    );
    assert_eq!(s.yarn_log_mul, 1.0);
    let t = h.attn_temperature.unwrap();
    assert_eq!((t.scale, t.floor_len), (0.1, 64));
    // qwen2 does not read the mistral3 YaRN keys: the defaults stay.
    let h = hparams_of("qwen2-yarn", |m| {
        set(m, "qwen2.rope.scaling.yarn_beta_fast", MetaValue::F32(8.0))
    });
    assert_eq!(h.rope_scaling.yarn_beta_fast, 32.0);
}

#[test]
fn unsupported_architecture_lists_the_supported_ones() {
    let mut w = GgufWriter::new();
    w.add_meta("general.architecture", MetaValue::String("mamba".into()))
        .unwrap();
    let e = HParams::from_gguf(&GgufFile::from_bytes(w.to_bytes().unwrap()).unwrap())
        .unwrap_err()
        .to_string();
    assert!(e.contains("\"mamba\""), "{e}");
    for (_, name) in ARCHS {
        assert!(e.contains(name), "{e} lacks {name}");
    }
}

#[test]
fn pooling_type_is_read_with_llama_cpp_s_codes() {
    use crate::engine::pooling::PoolingType;
    assert_eq!(hparams_of("llama", |_| {}).pooling, None);
    for (code, want) in [
        (0, PoolingType::None),
        (1, PoolingType::Mean),
        (2, PoolingType::Cls),
        (3, PoolingType::Last),
        (4, PoolingType::Rank),
    ] {
        let h = hparams_of("llama", |m| {
            set(m, "llama.pooling_type", MetaValue::U32(code))
        });
        assert_eq!(h.pooling, Some(want));
        assert!(
            h.to_string()
                .ends_with(&format!("pooling           {} (pooling_type)", want.name())),
            "{h}"
        );
    }
    // llama.cpp's "unspecified" (-1, as a signed value) is not set.
    let h = hparams_of("llama", |m| {
        set(m, "llama.pooling_type", MetaValue::I32(-1))
    });
    assert_eq!(h.pooling, None);
    assert!(h.to_string().ends_with("not set (kiln embeds with mean)"));
    // Another code is an error naming the key.
    let mut v = proof_variants()
        .into_iter()
        .find(|v| v.name == "llama")
        .unwrap();
    set(&mut v.spec.meta, "llama.pooling_type", MetaValue::U32(7));
    let w = build(&v.spec, "llama", &tiny_vocab(), Quant::F16, 1).unwrap();
    let e = HParams::from_gguf(&GgufFile::from_bytes(w.to_bytes().unwrap()).unwrap())
        .unwrap_err()
        .to_string();
    assert!(e.contains("llama.pooling_type = 7"), "{e}");
}

#[test]
fn qwen3moe_reads_its_experts() {
    let h = hparams_of("qwen3moe", |_| {});
    let m = h.moe.unwrap();
    assert_eq!((m.n_expert, m.n_expert_used, m.n_ff_exp), (6, 2, 256));
    assert!(m.norm_weights && m.gating == Gating::Softmax && m.n_ff_shexp.is_none());
    assert!(h.qk_norm);
    assert!(h
        .variant()
        .contains("mixture of 6 experts (2 used per token, width 256"));
    // Without expert_feed_forward_length: n_ff / n_expert_used, as llama.cpp.
    let h = hparams_of("qwen3moe", |m| {
        m.retain(|(k, _)| k != "qwen3moe.expert_feed_forward_length")
    });
    assert_eq!(h.moe.unwrap().n_ff_exp, 512 / 2);
}

#[test]
fn granitemoe_has_a_shared_expert_and_granite_scales() {
    let h = hparams_of("granitemoe", |_| {});
    let m = h.moe.unwrap();
    assert_eq!((m.n_expert, m.n_ff_exp, m.n_ff_shexp), (6, 256, Some(512)));
    assert!(m.norm_weights);
    assert_eq!(h.residual_scale, Some(0.22));
}

#[test]
fn bad_expert_counts_are_named_errors() {
    let err = |edit: fn(&mut Vec<(String, MetaValue)>)| {
        let mut v = proof_variants()
            .into_iter()
            .find(|v| v.name == "qwen3moe")
            .unwrap();
        edit(&mut v.spec.meta);
        let w = build(&v.spec, "qwen3moe", &tiny_vocab(), Quant::F16, 1).unwrap();
        HParams::from_gguf(&GgufFile::from_bytes(w.to_bytes().unwrap()).unwrap()).unwrap_err()
    };
    let e = err(|m| set(m, "qwen3moe.expert_used_count", MetaValue::U32(7)));
    assert!(matches!(e, HParamsError::Inconsistent(_)), "{e}");
    let e = err(|m| set(m, "qwen3moe.expert_count", MetaValue::U32(0)));
    assert!(matches!(e, HParamsError::Invalid { .. }), "{e}");
    let e = err(|m| m.retain(|(k, _)| k != "qwen3moe.expert_count"));
    assert!(matches!(e, HParamsError::Missing { .. }), "{e}");
    // The experts' tensors must have the shapes the keys imply.
    let e = err(|m| set(m, "qwen3moe.expert_count", MetaValue::U32(5)));
    assert!(e.to_string().contains("ffn_gate_inp.weight"), "{e}");
}

#[test]
fn olmoe_norms_q_and_k_whole_and_keeps_its_weights() {
    let h = hparams_of("olmoe", |_| {});
    let m = h.moe.unwrap();
    assert_eq!((m.n_expert, m.n_expert_used, m.n_ff_exp), (6, 2, 256));
    assert!(!m.norm_weights);
    assert!(h.qk_norm && h.qk_norm_full && h.rope_style == RopeStyle::NeoX);
}

#[test]
fn gpt_oss_reads_its_sinks_window_router_and_yarn() {
    let h = hparams_of("gpt-oss", |_| {});
    let m = h.moe.unwrap();
    assert_eq!((m.n_expert, m.n_expert_used, m.n_ff_exp), (12, 4, 256));
    assert!(m.gating == Gating::SoftmaxWeight && !m.norm_weights);
    assert!(m.biases && m.act == Activation::SwigluOai);
    assert!(h.attn_sinks && h.has_qkv_bias && h.rope_style == RopeStyle::NeoX);
    // llama.cpp's pattern 2: the even layers are windowed; they keep the global YaRN scale.
    let w = h.sliding_window.as_ref().unwrap();
    assert_eq!(w.size, 64);
    assert_eq!(w.local, vec![true, false, true, false]);
    assert!(w.rope_scaled && w.rope_freq_base == h.rope_freq_base);
    assert_eq!(h.rope_scaling.kind, RopeScalingKind::Yarn);
    let v = h.variant();
    assert!(
        v.contains("attention sinks") && v.contains("router and expert biases"),
        "{v}"
    );
    assert!(v.contains("clamped SwiGLU"), "{v}");
}

#[test]
fn gpt_oss_without_sinks_or_expert_biases_is_a_missing_tensor() {
    for missing in ["blk.1.attn_sinks.weight", "blk.2.ffn_up_exps.bias"] {
        let mut v = proof_variants()
            .into_iter()
            .find(|v| v.name == "gpt-oss")
            .unwrap();
        v.spec.tensors.retain(|t| t.name != missing);
        let w = build(&v.spec, "gpt-oss", &tiny_vocab(), Quant::F16, 1).unwrap();
        let e =
            HParams::from_gguf(&GgufFile::from_bytes(w.to_bytes().unwrap()).unwrap()).unwrap_err();
        assert!(
            matches!(&e, HParamsError::MissingTensor(n) if n == missing),
            "{e}"
        );
    }
}

#[test]
fn qwen35moe_reads_its_experts_and_gated_shared_expert() {
    let h = hparams_of("qwen35moe", |_| {});
    let m = h.moe.unwrap();
    assert_eq!(
        (m.n_expert, m.n_expert_used, m.n_ff_exp, m.n_ff_shexp),
        (4, 2, 256, Some(256))
    );
    assert!(m.norm_weights && m.shared_gate && m.gating == Gating::Softmax);
    assert!(h.deltanet.is_some() && h.qk_norm);
    assert!(h
        .variant()
        .contains("shared expert width 256 with a sigmoid gate"));
    // As llama.cpp: feed_forward_length is optional, the shared width defaults to it.
    let h = hparams_of("qwen35moe", |m| {
        m.retain(|(k, _)| k != "qwen35moe.feed_forward_length")
    });
    assert_eq!(h.moe.unwrap().n_ff_exp, 256);
    let h = hparams_of("qwen35moe", |m| {
        m.retain(|(k, _)| k != "qwen35moe.expert_shared_feed_forward_length");
        set(m, "qwen35moe.feed_forward_length", MetaValue::U32(256));
    });
    assert_eq!(h.moe.unwrap().n_ff_shexp, Some(256));
}

#[test]
fn qwen35moe_without_its_shared_gate_is_a_missing_tensor() {
    let mut v = proof_variants()
        .into_iter()
        .find(|v| v.name == "qwen35moe")
        .unwrap();
    let missing = "blk.3.ffn_gate_inp_shexp.weight";
    v.spec.tensors.retain(|t| t.name != missing);
    let w = build(&v.spec, "qwen35moe", &tiny_vocab(), Quant::F16, 1).unwrap();
    let e = HParams::from_gguf(&GgufFile::from_bytes(w.to_bytes().unwrap()).unwrap()).unwrap_err();
    assert!(
        matches!(&e, HParamsError::MissingTensor(n) if n == missing),
        "{e}"
    );
}

#[test]
fn granitehybrid_is_a_mixture_only_with_experts() {
    assert!(hparams_of("granitehybrid", |_| {}).moe.is_none());
    let h = hparams_of("granitehybrid-moe", |_| {});
    let m = h.moe.unwrap();
    assert_eq!(
        (m.n_expert, m.n_expert_used, m.n_ff_exp, m.n_ff_shexp),
        (4, 2, 256, Some(256))
    );
    assert!(m.norm_weights && !m.shared_gate);
    assert!(h.mamba2.is_some() && h.residual_scale == Some(0.22));
}
