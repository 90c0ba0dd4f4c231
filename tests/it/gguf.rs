//! The GGUF loader on the real default model, plus property tests that truncate and mutate
//! real and synthetic headers and require `Err` or `Ok`, never a panic.

use crate::common::default_model;
use kiln::engine::hparams::{Arch, HParams, RopeScalingKind, RopeStyle};
use kiln::gguf::{GgufFile, GgufWriter, MetaArray, MetaValue};
use kiln::kernels::DType;
use proptest::prelude::*;
use std::sync::OnceLock;

fn model() -> &'static GgufFile {
    static F: OnceLock<GgufFile> = OnceLock::new();
    F.get_or_init(|| GgufFile::open(default_model()).expect("default model loads"))
}

#[test]
fn default_model_header() {
    let f = model();
    assert_eq!(f.version(), 3);
    assert_eq!(f.alignment(), 32);
    assert_eq!(f.tensors().len(), 272);
    assert_eq!(f.metadata().len(), 33);
    assert_eq!(f.get_str("general.architecture").unwrap(), Some("llama"));
    assert_eq!(f.get_u32("llama.block_count").unwrap(), Some(30));
    assert_eq!(
        &f.get_str_array("tokenizer.ggml.tokens").unwrap().unwrap()[1],
        "<|im_start|>"
    );
    assert_eq!(
        f.get_i32_array("tokenizer.ggml.token_type")
            .unwrap()
            .unwrap()
            .len(),
        49152
    );
    assert_eq!(
        f.get_str_array("tokenizer.ggml.merges")
            .unwrap()
            .unwrap()
            .len(),
        48900
    );
    assert!(f
        .get_str("tokenizer.chat_template")
        .unwrap()
        .unwrap()
        .contains("<|im_start|>"));
    // Wrong-type access is a named error, not a panic or a silent None.
    let e = f.get_str("llama.block_count").unwrap_err().to_string();
    assert!(e.contains("llama.block_count") && e.contains("u32"), "{e}");
    assert!(f.get_u32("no.such.key").unwrap().is_none());

    let embd = f.tensor("token_embd.weight").unwrap();
    assert_eq!(embd.dtype, DType::Q8_0);
    assert_eq!(embd.shape, vec![576, 49152]);
    assert_eq!(embd.n_bytes, 49152 * 576 / 32 * 34);
    assert_eq!(f.tensor("blk.0.ffn_up.weight").unwrap().dtype, DType::Q4_1);
    let params: u64 = f.tensors().iter().map(|t| t.n_elems()).sum();
    assert_eq!(params, 134_515_008);
}

#[test]
fn default_model_tensor_views_are_zero_copy() {
    let f = model();
    let t = f.tensor("output_norm.weight").unwrap();
    let borrowed = f.tensor_bytes(t);
    let owned = f.tensor_data("output_norm.weight").unwrap();
    assert_eq!(
        borrowed.as_ptr(),
        owned.as_ptr(),
        "both views point into the map"
    );
    assert_eq!(owned.len(), 576 * 4);
    let w = owned.as_f32().expect("F32 tensor is 4-byte aligned");
    assert!(w.iter().all(|x| x.is_finite()));
    assert!(w.iter().any(|&x| x != 0.0));
    // A view outlives the file handle and stays valid.
    let q = f.tensor_data("blk.29.ffn_down.weight").unwrap();
    assert_eq!(q.dtype(), DType::Q4_1);
    assert_eq!(q.shape(), &[1536, 576]);
    assert_eq!(q.len() as u64, 1536 * 576 / 32 * 20);
    assert!(f.tensor_data("missing").is_none());
}

#[test]
fn default_model_hparams() {
    let h = HParams::from_gguf(model()).unwrap();
    assert_eq!(h.arch, Arch::Llama);
    assert_eq!(h.n_layer, 30);
    assert_eq!(h.n_embd, 576);
    assert_eq!(h.n_ff, 1536);
    assert_eq!((h.n_head, h.n_head_kv, h.head_dim), (9, 3, 64));
    assert_eq!(h.rope_freq_base, 100_000.0);
    assert_eq!(h.rope_dim, 64);
    assert_eq!(h.rope_scaling.kind, RopeScalingKind::None);
    assert_eq!(h.rope_style, RopeStyle::Normal);
    assert_eq!(h.rms_eps, 1e-5);
    assert_eq!(h.n_ctx_train, 8192);
    assert_eq!(h.n_vocab, 49152);
    assert!(h.tied_embeddings);
    assert!(!h.has_qkv_bias);
}

/// The real model's header bytes (metadata and tensor infos, no data).
fn real_header() -> &'static [u8] {
    static H: OnceLock<Vec<u8>> = OnceLock::new();
    H.get_or_init(|| {
        let f = model();
        let path = default_model();
        let bytes = std::fs::read(&path).expect("read model");
        bytes[..f.data_start() as usize].to_vec()
    })
}

/// Where the tensor infos begin in the real header.
fn real_tensor_infos_start() -> usize {
    model()
        .tensors()
        .iter()
        .map(|t| t.info_offset)
        .min()
        .unwrap() as usize
}

/// A small valid file with arrays, strings and a few tensors: mutations of it can parse.
fn synthetic() -> &'static [u8] {
    static S: OnceLock<Vec<u8>> = OnceLock::new();
    S.get_or_init(|| {
        let mut w = GgufWriter::new();
        w.add_meta("general.architecture", MetaValue::String("llama".into()))
            .unwrap();
        w.add_meta("general.alignment", MetaValue::U32(16)).unwrap();
        w.add_meta(
            "tok",
            MetaValue::Array(MetaArray::String(["a", "bc", ""].into_iter().collect())),
        )
        .unwrap();
        w.add_meta(
            "nested",
            MetaValue::Array(MetaArray::Array(vec![MetaArray::U16(vec![1, 2])])),
        )
        .unwrap();
        w.add_meta("f", MetaValue::F64(0.5)).unwrap();
        w.add_tensor("a", DType::F32, &[4, 2], vec![0; 32]).unwrap();
        w.add_tensor("b", DType::Q8_0, &[32], vec![0; 34]).unwrap();
        w.add_tensor("c", DType::Q4_K, &[256, 1, 1, 1], vec![0; 144])
            .unwrap();
        w.to_bytes().unwrap()
    })
}

#[test]
fn synthetic_file_parses_and_every_truncation_fails_cleanly() {
    let full = synthetic();
    let f = GgufFile::from_bytes(full.to_vec()).unwrap();
    assert_eq!(f.tensors().len(), 3);
    for len in 0..full.len() {
        assert!(
            GgufFile::from_bytes(full[..len].to_vec()).is_err(),
            "truncated to {len} bytes"
        );
    }
}

#[test]
fn real_header_without_data_is_out_of_bounds() {
    let e = GgufFile::from_bytes(real_header().to_vec()).unwrap_err();
    assert!(e.to_string().contains("token_embd.weight"), "{e}");
}

/// One edit of a byte buffer.
#[derive(Clone, Debug)]
enum Edit {
    Truncate(usize),
    Byte(usize, u8),
    Word(usize, u64),
}

fn apply(base: &[u8], edits: &[Edit]) -> Vec<u8> {
    let mut b = base.to_vec();
    for e in edits {
        match *e {
            Edit::Truncate(n) => b.truncate(n % (b.len() + 1)),
            Edit::Byte(i, v) if !b.is_empty() => {
                let n = b.len();
                b[i % n] = v;
            }
            Edit::Word(i, v) if b.len() >= 8 => {
                let i = i % (b.len() - 7);
                b[i..i + 8].copy_from_slice(&v.to_le_bytes());
            }
            _ => {}
        }
    }
    b
}

/// Edits aimed at `base`: anywhere, in the first 64 bytes (counts, first key) or in
/// `hot` (e.g. the tensor infos); words are often extreme (0, 2^63, 2^64-1, ...).
fn edits(len: usize, hot: std::ops::Range<usize>) -> impl Strategy<Value = Vec<Edit>> {
    let pos = prop_oneof![0..len, 0..64usize.min(len), hot];
    let word = prop_oneof![
        Just(0u64),
        Just(1),
        Just(u64::MAX),
        Just(1 << 63),
        Just(u32::MAX as u64),
        Just(1 << 32),
        any::<u64>(),
        0u64..64,
    ];
    let edit = prop_oneof![
        (0..len + 1).prop_map(Edit::Truncate),
        (pos.clone(), any::<u8>()).prop_map(|(i, v)| Edit::Byte(i, v)),
        (pos, word).prop_map(|(i, v)| Edit::Word(i, v)),
    ];
    proptest::collection::vec(edit, 1..4)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn mutated_real_header_never_panics(e in edits(real_header().len(), real_tensor_infos_start()..real_header().len())) {
        let bytes = apply(real_header(), &e);
        let _ = GgufFile::from_bytes(bytes);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 10000, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn mutated_synthetic_file_never_panics(e in edits(synthetic().len(), 0..synthetic().len())) {
        let bytes = apply(synthetic(), &e);
        if let Ok(f) = GgufFile::from_bytes(bytes) {
            // Whatever parsed is internally consistent: every view is in bounds.
            for t in f.tensors() {
                prop_assert_eq!(f.tensor_bytes(t).len() as u64, t.n_bytes);
            }
            let _ = HParams::from_gguf(&f);
        }
    }
}
