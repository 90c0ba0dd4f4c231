//! A corpus of hand-made malformed GGUF files, one per published attack pattern
//! (RELIABILITY.md item 21), each asserting the specific named error.

use kiln::engine::hparams::{HParams, HParamsError};
use kiln::gguf::writer::{put_str, put_u32, put_u64, put_value};
use kiln::gguf::{GgufError, GgufFile, GgufWriter, MetaArray, MetaValue};
use kiln::kernels::DType;

/// Builds raw GGUF bytes field by field, so each field can be made wrong.
struct Raw(Vec<u8>);

const F32: u32 = 0;
const Q8_0: u32 = 8;

impl Raw {
    /// Magic, version 3 and the two counts.
    fn new(n_tensors: u64, n_kv: u64) -> Raw {
        let mut b = b"GGUF".to_vec();
        put_u32(&mut b, 3);
        put_u64(&mut b, n_tensors);
        put_u64(&mut b, n_kv);
        Raw(b)
    }
    fn u32(mut self, v: u32) -> Raw {
        put_u32(&mut self.0, v);
        self
    }
    fn u64(mut self, v: u64) -> Raw {
        put_u64(&mut self.0, v);
        self
    }
    fn str(mut self, s: &str) -> Raw {
        put_str(&mut self.0, s);
        self
    }
    fn bytes(mut self, b: &[u8]) -> Raw {
        self.0.extend_from_slice(b);
        self
    }
    /// A well-formed metadata entry.
    fn kv(mut self, key: &str, v: MetaValue) -> Raw {
        put_str(&mut self.0, key);
        put_u32(&mut self.0, v.meta_type().id());
        put_value(&mut self.0, &v);
        self
    }
    /// A tensor info record.
    fn tensor(self, name: &str, dims: &[u64], ty: u32, offset: u64) -> Raw {
        let mut r = self.str(name).u32(dims.len() as u32);
        for &d in dims {
            r = r.u64(d);
        }
        r.u32(ty).u64(offset)
    }
    /// Zero padding up to `align`, then `n` data bytes.
    fn data(mut self, align: usize, n: usize) -> Raw {
        let pad = self.0.len().div_ceil(align) * align;
        self.0.resize(pad + n, 0);
        self
    }
    fn parse(self) -> Result<GgufFile, GgufError> {
        GgufFile::from_bytes(self.0)
    }
}

/// Parses, expects an error, and checks its message names the field and an offset.
fn err(r: Raw, needle: &str) -> GgufError {
    let e = r.parse().expect_err("malformed file must not parse");
    let msg = e.to_string();
    assert!(
        msg.contains(needle),
        "error {msg:?} should mention {needle:?}"
    );
    e
}

#[test]
fn valid_baseline_parses() {
    let f = Raw::new(1, 1)
        .kv("general.alignment", MetaValue::U32(32))
        .tensor("t", &[4], F32, 0)
        .data(32, 16)
        .parse()
        .unwrap();
    assert_eq!(f.tensor("t").unwrap().n_bytes, 16);
}

#[test]
fn bad_magic_and_versions() {
    assert!(matches!(
        GgufFile::from_bytes(vec![]),
        Err(GgufError::BadMagic { .. })
    ));
    assert!(matches!(
        GgufFile::from_bytes(b"GGU".to_vec()),
        Err(GgufError::BadMagic { .. })
    ));
    assert!(matches!(
        GgufFile::from_bytes(b"GGML\x03\0\0\0".to_vec()),
        Err(GgufError::BadMagic { .. })
    ));
    for (v, why) in [
        (1u32, "v1"),
        (3 << 24, "big-endian"),
        (4, "versions 2 and 3"),
    ] {
        let mut b = b"GGUF".to_vec();
        put_u32(&mut b, v);
        let e = GgufFile::from_bytes(b).unwrap_err();
        assert!(matches!(e, GgufError::UnsupportedVersion { .. }), "{e}");
        assert!(e.to_string().contains(why), "{e}");
    }
    // Version 2 has the same layout as 3.
    let mut b = Raw::new(0, 0).0;
    b[4] = 2;
    assert_eq!(GgufFile::from_bytes(b).unwrap().version(), 2);
}

#[test]
fn huge_counts_are_refused_before_allocating() {
    // CVE-2024-21825 family: counts of 2^63 and 2^64-1.
    for n in [u64::MAX, 1 << 63, 1 << 40] {
        let e = err(Raw::new(n, 0), "tensor count at offset 8");
        assert!(matches!(e, GgufError::TooLarge { .. }), "{e}");
        let e = err(Raw::new(0, n), "metadata count at offset 16");
        assert!(matches!(e, GgufError::TooLarge { .. }), "{e}");
    }
    // A count the remaining bytes cannot hold.
    err(Raw::new(0, 2).kv("a", MetaValue::U8(1)), "metadata count");
}

#[test]
fn huge_string_lengths_are_refused() {
    // CVE-2025-49847: a string length of 2^64-1 (key) and a value string past the file.
    let e = err(
        Raw::new(0, 1).u64(u64::MAX).bytes(&[0; 16]),
        "metadata key #0 at offset 24",
    );
    assert!(matches!(e, GgufError::TooLarge { .. }), "{e}");
    let r = Raw::new(0, 1).str("k").u32(8).u64(u64::MAX - 1);
    assert!(matches!(err(r, "offset 37"), GgufError::TooLarge { .. }));
    let r = Raw::new(0, 1).str("k").u32(8).u64(1000).bytes(b"short");
    assert!(matches!(
        err(r, "k at offset 45"),
        GgufError::Truncated { .. }
    ));
    let long = "n".repeat(65);
    let r = Raw::new(1, 0).tensor(&long, &[4], F32, 0).data(32, 16);
    assert!(matches!(
        err(r, "tensor #0 name"),
        GgufError::TooLarge { limit: 64, .. }
    ));
    let r = Raw::new(0, 1)
        .u64(2)
        .bytes(&[0xff, 0xfe])
        .u32(0)
        .bytes(&[0]);
    assert!(matches!(
        err(r, "metadata key #0"),
        GgufError::BadUtf8 { .. }
    ));
}

#[test]
fn array_lengths_and_element_types_are_checked() {
    let arr = |ty: u32, n: u64| Raw::new(0, 1).str("arr").u32(9).u32(ty).u64(n);
    for n in [u64::MAX, 1 << 63, 1 << 32] {
        let e = err(arr(8, n).bytes(&[0; 64]), "array length of arr");
        assert!(matches!(e, GgufError::TooLarge { .. }), "{e}");
    }
    // More u32 elements than the bytes left hold.
    assert!(matches!(
        err(arr(4, 5).bytes(&[0; 16]), "array length of arr"),
        GgufError::TooLarge { limit: 4, .. }
    ));
    // Unknown element type, unknown scalar type.
    assert!(matches!(
        err(arr(13, 1).bytes(&[0; 8]), "array element type of arr"),
        GgufError::UnknownValueType { type_id: 13, .. }
    ));
    let r = Raw::new(0, 1).str("k").u32(99).bytes(&[0; 8]);
    assert!(matches!(
        err(r, "type of k"),
        GgufError::UnknownValueType { type_id: 99, .. }
    ));
    // A bool that is neither 0 nor 1 (element type mismatch inside a bool array).
    assert!(matches!(
        err(arr(7, 2).bytes(&[1, 7]), "arr"),
        GgufError::TooLarge { limit: 1, .. }
    ));
    // Nesting deeper than the limit.
    let mut r = Raw::new(0, 1).str("deep").u32(9);
    for _ in 0..6 {
        r = r.u32(9).u64(1);
    }
    let e = err(r.u32(0).u64(0), "deep");
    assert!(matches!(e, GgufError::ArrayTooDeep { .. }), "{e}");
    // Nested arrays within the limit parse, each inner array with its own type.
    let v = MetaValue::Array(MetaArray::Array(vec![
        MetaArray::U8(vec![1]),
        MetaArray::String(["x"].into_iter().collect()),
    ]));
    let f = Raw::new(0, 1).kv("n", v.clone()).parse().unwrap();
    assert_eq!(f.get("n"), Some(&v));
}

#[test]
fn duplicate_keys_and_tensors() {
    let r = Raw::new(0, 2)
        .kv("a", MetaValue::U8(1))
        .kv("a", MetaValue::U8(2));
    assert!(matches!(
        err(r, "\"a\" at offset 38"),
        GgufError::DuplicateKey { .. }
    ));
    let r = Raw::new(2, 0)
        .tensor("t", &[8], F32, 0)
        .tensor("t", &[8], F32, 32)
        .data(32, 64);
    assert!(matches!(err(r, "\"t\""), GgufError::DuplicateTensor { .. }));
}

#[test]
fn alignment_must_be_a_u32_power_of_two() {
    for a in [0u32, 3, 48] {
        let r = Raw::new(0, 1).kv("general.alignment", MetaValue::U32(a));
        let e = err(r, "general.alignment at offset 24");
        assert!(matches!(e, GgufError::BadAlignment { .. }), "{e}");
    }
    let r = Raw::new(0, 1).kv("general.alignment", MetaValue::U64(32));
    assert!(matches!(
        err(r, "general.alignment"),
        GgufError::WrongType { .. }
    ));
}

#[test]
fn tensor_shapes_are_checked() {
    let one = |dims: &[u64], ty: u32| Raw::new(1, 0).tensor("w", dims, ty, 0).data(32, 64);
    let shape_err = |dims: &[u64], ty: u32, needle: &str| {
        let e = err(one(dims, ty), needle);
        assert!(matches!(e, GgufError::BadShape { .. }), "{e}");
        assert!(e.to_string().contains("\"w\" (info at offset 24)"), "{e}");
    };
    shape_err(&[1, 1, 1, 1, 1], F32, "n_dims is 5");
    shape_err(&[], F32, "n_dims is 0");
    shape_err(&[4, 0], F32, "dimension 1 is 0");
    shape_err(&[1 << 63], F32, "dimension 0 is");
    // Dimension products that overflow (CVE-2025-53630 family).
    shape_err(&[1 << 32, 1 << 32], F32, "overflows");
    shape_err(&[1 << 62, 2], F32, "overflows");
    // The product fits in i64 but the byte size does not.
    shape_err(&[1 << 61, 2], F32, "byte size overflows");
    // Row length not a whole number of blocks.
    shape_err(&[48, 2], Q8_0, "not a multiple of the Q8_0 block size 32");
    // The non-linear formats (issue 40): IQ4_XS's 256-value super-blocks, MXFP4's 32.
    shape_err(&[128, 2], 23, "not a multiple of the IQ4_XS block size 256");
    shape_err(&[48, 2], 39, "not a multiple of the MXFP4 block size 32");
    // An n_dims of 2^32-1 is refused before reading any dimension.
    let r = Raw::new(1, 0).str("w").u32(u32::MAX).bytes(&[0; 64]);
    assert!(matches!(err(r, "n_dims"), GgufError::BadShape { .. }));
}

#[test]
fn unsupported_tensor_types_are_named() {
    let r = Raw::new(1, 0).tensor("w", &[256], 16, 0).data(32, 256);
    let e = err(r, "IQ2_XXS");
    assert!(
        matches!(e, GgufError::UnsupportedDType { type_id: 16, .. }),
        "{e}"
    );
    let r = Raw::new(1, 0).tensor("w", &[256], 1234, 0).data(32, 256);
    err(r, "unknown ggml type 1234");
}

#[test]
fn tensor_data_ranges_are_checked() {
    // Offset + size past the end of the file (Ollama CVE-2026-7482).
    let r = Raw::new(1, 0).tensor("w", &[8], F32, 0).data(32, 31);
    let e = err(r, "outside the file");
    assert!(matches!(e, GgufError::OutOfBounds { .. }), "{e}");
    let r = Raw::new(1, 0).tensor("w", &[8], F32, 64).data(32, 64);
    assert!(matches!(err(r, "w"), GgufError::OutOfBounds { .. }));
    // Blocks of 17 (MXFP4) and 136 (IQ4_XS) bytes: one block short of the declared size.
    let r = Raw::new(1, 0).tensor("w", &[64], 39, 0).data(32, 17);
    assert!(matches!(
        err(r, "outside the file"),
        GgufError::OutOfBounds { .. }
    ));
    let r = Raw::new(1, 0).tensor("w", &[512], 23, 0).data(32, 136);
    assert!(matches!(
        err(r, "outside the file"),
        GgufError::OutOfBounds { .. }
    ));
    // Offsets chosen so start + size wraps around u64 (CVE-2026-27940 family).
    let off = u64::MAX - 31;
    let r = Raw::new(1, 0).tensor("w", &[8], F32, off).data(32, 32);
    assert!(matches!(err(r, "w"), GgufError::OutOfBounds { .. }));
    // Misaligned offset.
    let r = Raw::new(1, 0).tensor("w", &[8], F32, 4).data(32, 64);
    let e = err(r, "not a multiple of the alignment 32");
    assert!(matches!(e, GgufError::Misaligned { .. }), "{e}");
    // Two tensors sharing bytes.
    let r = Raw::new(2, 0)
        .tensor("a", &[16], F32, 0)
        .tensor("b", &[8], F32, 32)
        .data(32, 64);
    assert!(matches!(err(r, "overlap"), GgufError::Overlap { .. }));
    // Tensors declared but the file ends inside the header padding.
    let mut r = Raw::new(1, 0).tensor("w", &[8], F32, 0);
    let len = r.0.len();
    if !len.is_multiple_of(32) {
        let e = err(r, "data section padding");
        assert!(matches!(e, GgufError::Truncated { .. }), "{e}");
    } else {
        r.0.pop();
        err(r, "truncated");
    }
}

#[test]
fn truncated_tensor_infos_name_the_field() {
    let name = "wwwwwwwwww";
    let r = Raw::new(1, 0).str(name).u32(3).u64(8).u64(8);
    let e = err(r, "dimension 2 of wwwwwwwwww at offset 62");
    assert!(matches!(e, GgufError::Truncated { .. }), "{e}");
}

type Kv = Vec<(String, MetaValue)>;

/// A minimal llama file whose metadata can be edited per test.
fn llama(edit: impl FnOnce(&mut Kv)) -> GgufFile {
    tiny_model("llama", false, edit)
}

/// A tiny model file of architecture `arch` (1 block, width 32, 4 heads, 2 kv heads, vocab
/// 10), with q/k/v biases when `bias`; `edit` changes the metadata before writing.
fn tiny_model(arch: &str, bias: bool, edit: impl FnOnce(&mut Kv)) -> GgufFile {
    let mut kv: Kv = vec![
        (
            "general.architecture".into(),
            MetaValue::String(arch.into()),
        ),
        (format!("{arch}.block_count"), MetaValue::U32(1)),
        (format!("{arch}.embedding_length"), MetaValue::U32(32)),
        (format!("{arch}.feed_forward_length"), MetaValue::U32(64)),
        (format!("{arch}.attention.head_count"), MetaValue::U32(4)),
        (format!("{arch}.attention.head_count_kv"), MetaValue::U32(2)),
        (
            format!("{arch}.attention.layer_norm_rms_epsilon"),
            MetaValue::F32(1e-5),
        ),
        (format!("{arch}.context_length"), MetaValue::U32(128)),
        (format!("{arch}.vocab_size"), MetaValue::U32(10)),
    ];
    edit(&mut kv);
    let mut w = GgufWriter::new();
    for (k, v) in kv {
        w.add_meta(&k, v).unwrap();
    }
    let mut tensors = vec![
        ("token_embd.weight", vec![32, 10]),
        ("output_norm.weight", vec![32]),
        ("blk.0.attn_norm.weight", vec![32]),
        ("blk.0.attn_q.weight", vec![32, 32]),
        ("blk.0.attn_k.weight", vec![32, 16]),
        ("blk.0.attn_v.weight", vec![32, 16]),
        ("blk.0.attn_output.weight", vec![32, 32]),
        ("blk.0.ffn_gate.weight", vec![32, 64]),
        ("blk.0.ffn_up.weight", vec![32, 64]),
        ("blk.0.ffn_down.weight", vec![64, 32]),
        ("blk.0.ffn_norm.weight", vec![32]),
    ];
    if bias {
        tensors.push(("blk.0.attn_q.bias", vec![32]));
        tensors.push(("blk.0.attn_k.bias", vec![16]));
        tensors.push(("blk.0.attn_v.bias", vec![16]));
    }
    for (name, shape) in tensors {
        let data = vec![0u8; shape.iter().product::<u64>() as usize * 4];
        w.add_tensor(name, DType::F32, &shape, data).unwrap();
    }
    GgufFile::from_bytes(w.to_bytes().unwrap()).unwrap()
}

fn set(kv: &mut Kv, key: &str, v: Option<MetaValue>) {
    kv.retain(|(k, _)| k != key);
    if let Some(v) = v {
        kv.push((key.to_string(), v));
    }
}

fn hp_err(edit: impl FnOnce(&mut Kv), needle: &str) -> HParamsError {
    let e = HParams::from_gguf(&llama(edit)).expect_err("must be refused");
    assert!(
        e.to_string().contains(needle),
        "{e} should mention {needle}"
    );
    e
}

#[test]
fn hparams_accept_the_minimal_llama() {
    let h = HParams::from_gguf(&llama(|_| {})).unwrap();
    assert_eq!(
        (h.n_layer, h.head_dim, h.rope_dim, h.n_vocab),
        (1, 8, 8, 10)
    );
    assert_eq!(h.rope_freq_base, 10_000.0);
    assert!(h.tied_embeddings);
}

#[test]
fn hparams_missing_invalid_and_inconsistent_keys_are_named() {
    let e = hp_err(|kv| set(kv, "llama.block_count", None), "llama.block_count");
    assert!(matches!(e, HParamsError::Missing { .. }));
    let e = hp_err(
        |kv| set(kv, "llama.block_count", Some(MetaValue::U32(1 << 20))),
        "above 1024",
    );
    assert!(matches!(e, HParamsError::Invalid { .. }));
    let e = hp_err(
        |kv| set(kv, "llama.block_count", Some(MetaValue::U32(2))),
        "blk.1.attn_norm.weight",
    );
    assert!(matches!(e, HParamsError::MissingTensor(_)));
    hp_err(
        |kv| set(kv, "llama.attention.head_count_kv", Some(MetaValue::U32(3))),
        "not a multiple of 3 kv heads",
    );
    hp_err(
        |kv| set(kv, "llama.embedding_length", Some(MetaValue::U32(33))),
        "not a multiple of 4 heads",
    );
    hp_err(
        |kv| set(kv, "llama.vocab_size", Some(MetaValue::U32(11))),
        "token_embd.weight has shape [32, 10]",
    );
    hp_err(
        |kv| {
            set(
                kv,
                "llama.attention.layer_norm_rms_epsilon",
                Some(MetaValue::F32(f32::NAN)),
            )
        },
        "positive finite",
    );
    let e = hp_err(
        |kv| {
            set(
                kv,
                "llama.context_length",
                Some(MetaValue::String("x".into())),
            )
        },
        "llama.context_length",
    );
    assert!(matches!(e, HParamsError::Gguf(GgufError::WrongType { .. })));
    hp_err(
        |kv| {
            set(
                kv,
                "general.architecture",
                Some(MetaValue::String("gpt2".into())),
            )
        },
        "unsupported architecture \"gpt2\" (kiln runs llama, qwen2, qwen3, gemma2, gemma3, phi3, \
         smollm3, granite, mistral3, qwen3moe, olmoe, granitemoe, gpt-oss, lfm2, qwen35, gemma4, granitehybrid, qwen35moe)",
    );
    hp_err(
        |kv| set(kv, "llama.rope.dimension_count", Some(MetaValue::U32(9))),
        "llama.rope.dimension_count",
    );
    hp_err(
        |kv| {
            set(
                kv,
                "llama.rope.scaling.type",
                Some(MetaValue::String("ntk".into())),
            )
        },
        "llama.rope.scaling.type",
    );
}

#[test]
fn hparams_rope_scaling() {
    let f = llama(|kv| {
        set(
            kv,
            "llama.rope.scaling.type",
            Some(MetaValue::String("linear".into())),
        );
        set(kv, "llama.rope.scaling.factor", Some(MetaValue::F32(4.0)));
    });
    let h = HParams::from_gguf(&f).unwrap();
    assert_eq!(h.rope_scaling.factor, 4.0);
    let f = llama(|kv| set(kv, "llama.rope.scale_linear", Some(MetaValue::F32(2.0))));
    let s = HParams::from_gguf(&f).unwrap().rope_scaling;
    assert_eq!(
        (format!("{:?}", s.kind), s.factor),
        ("Linear".to_string(), 2.0)
    );
}

#[test]
fn hparams_qwen2_has_biases_and_neox_rope() {
    let f = tiny_model("qwen2", true, |_| {});
    let h = HParams::from_gguf(&f).unwrap();
    assert_eq!(h.arch, kiln::engine::hparams::Arch::Qwen2);
    assert!(h.has_qkv_bias);
    assert_eq!(h.rope_style, kiln::engine::hparams::RopeStyle::NeoX);
    // Biases whose shapes disagree with the heads are refused.
    let f = tiny_model("qwen2", true, |kv| {
        set(kv, "qwen2.attention.key_length", Some(MetaValue::U32(4)));
        set(kv, "qwen2.rope.dimension_count", Some(MetaValue::U32(4)));
    });
    let e = HParams::from_gguf(&f).unwrap_err().to_string();
    assert!(e.contains("blk.0.attn_q.weight"), "{e}");
}
