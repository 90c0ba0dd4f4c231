//! The vocabulary: token texts, scores, types, and the text -> id map.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// A token's type as GGUF stores it (`tokenizer.ggml.token_type`, llama.cpp's
/// `llama_token_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TokenType {
    Undefined,
    Normal,
    Unknown,
    Control,
    UserDefined,
    Unused,
    Byte,
}

impl TokenType {
    /// The type for GGUF's integer code; out-of-range codes are `Undefined` (as llama.cpp).
    pub fn from_gguf(code: i32) -> TokenType {
        match code {
            1 => TokenType::Normal,
            2 => TokenType::Unknown,
            3 => TokenType::Control,
            4 => TokenType::UserDefined,
            5 => TokenType::Unused,
            6 => TokenType::Byte,
            _ => TokenType::Undefined,
        }
    }
}

/// Token attribute bits (llama.cpp's `llama_token_attr`): a token can be CONTROL and UNUSED.
pub mod attr {
    pub const NORMAL: u8 = 1;
    pub const UNKNOWN: u8 = 2;
    pub const CONTROL: u8 = 4;
    pub const USER_DEFINED: u8 = 8;
    pub const UNUSED: u8 = 16;
    pub const BYTE: u8 = 32;
}

impl TokenType {
    pub(crate) fn attr(self) -> u8 {
        match self {
            TokenType::Undefined => 0,
            TokenType::Normal => attr::NORMAL,
            TokenType::Unknown => attr::UNKNOWN,
            TokenType::Control => attr::CONTROL,
            TokenType::UserDefined => attr::USER_DEFINED,
            TokenType::Unused => attr::UNUSED,
            TokenType::Byte => attr::BYTE,
        }
    }
}

/// FxHash (rustc's hasher): a multiply-rotate hash, several times faster than SipHash on the
/// short keys a tokenizer looks up. Keys are vocabulary text, not attacker-chosen table sizes.
#[derive(Default, Clone, Copy)]
pub struct FxHasher {
    hash: u64,
}

const SEED: u64 = 0x51_7c_c1_b7_27_22_0a_95;

impl FxHasher {
    #[inline]
    fn add(&mut self, w: u64) {
        self.hash = (self.hash.rotate_left(5) ^ w).wrapping_mul(SEED);
    }
}

impl Hasher for FxHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let mut w = [0u8; 8];
            w.copy_from_slice(c);
            self.add(u64::from_le_bytes(w));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut w = [0u8; 8];
            w[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(w) ^ ((rest.len() as u64) << 59));
        }
    }
    #[inline]
    fn write_u8(&mut self, i: u8) {
        self.add(i as u64);
    }
    #[inline]
    fn write_u32(&mut self, i: u32) {
        self.add(i as u64);
    }
    #[inline]
    fn write_u64(&mut self, i: u64) {
        self.add(i);
    }
    #[inline]
    fn write_usize(&mut self, i: usize) {
        self.add(i as u64);
    }
    #[inline]
    fn finish(&self) -> u64 {
        self.hash
    }
}

pub type FxMap<K, V> = HashMap<K, V, BuildHasherDefault<FxHasher>>;

/// Token texts (as stored: byte-level BPE texts are GPT-2-alphabet strings, SentencePiece
/// texts use `▁` for space), scores, attributes and the reverse map.
pub struct Vocab {
    texts: Vec<Box<str>>,
    scores: Vec<f32>,
    attrs: Vec<u8>,
    ids: FxMap<Box<[u8]>, u32>,
}

impl Vocab {
    /// Builds the vocabulary. `scores`/`types` may be empty (all 0 / all normal); otherwise
    /// they must have one entry per token. Empty texts get a placeholder (as llama.cpp); a
    /// duplicate text keeps its first id.
    pub fn new(
        texts: Vec<String>,
        scores: Vec<f32>,
        types: Vec<TokenType>,
    ) -> Result<Vocab, super::TokenizerError> {
        use super::TokenizerError::BadVocab;
        let n = texts.len();
        if n == 0 {
            return Err(BadVocab("the vocabulary is empty".into()));
        }
        if n > u32::MAX as usize {
            return Err(BadVocab("more than 2^32 tokens".into()));
        }
        if !scores.is_empty() && scores.len() != n {
            return Err(BadVocab(format!("{} scores for {n} tokens", scores.len())));
        }
        if !types.is_empty() && types.len() != n {
            return Err(BadVocab(format!(
                "{} token types for {n} tokens",
                types.len()
            )));
        }
        let scores = if scores.is_empty() {
            vec![0.0; n]
        } else {
            scores
        };
        let attrs = if types.is_empty() {
            vec![attr::NORMAL; n]
        } else {
            types.iter().map(|t| t.attr()).collect()
        };
        let mut ids = FxMap::default();
        ids.reserve(n);
        let texts: Vec<Box<str>> = texts
            .into_iter()
            .enumerate()
            .map(|(i, t)| {
                let t = if t.is_empty() {
                    format!("[EMPTY_{i}]")
                } else {
                    t
                };
                ids.entry(t.as_bytes().into()).or_insert(i as u32);
                t.into_boxed_str()
            })
            .collect();
        Ok(Vocab {
            texts,
            scores,
            attrs,
            ids,
        })
    }

    pub fn len(&self) -> usize {
        self.texts.len()
    }

    /// Never true: a vocabulary has at least one token.
    pub fn is_empty(&self) -> bool {
        self.texts.is_empty()
    }

    /// The id of the token whose text is exactly `text`.
    #[inline]
    pub fn id(&self, text: &[u8]) -> Option<u32> {
        self.ids.get(text).copied()
    }

    /// The stored text of `id` (panics on an out-of-range id: callers check `len`).
    pub fn text(&self, id: u32) -> &str {
        &self.texts[id as usize]
    }

    pub fn score(&self, id: u32) -> f32 {
        self.scores[id as usize]
    }

    pub fn attr(&self, id: u32) -> u8 {
        self.attrs[id as usize]
    }

    pub(crate) fn add_attr(&mut self, id: u32, bits: u8) {
        self.attrs[id as usize] |= bits;
    }

    /// Every (text, id) pair, in id order.
    pub fn iter(&self) -> impl Iterator<Item = (u32, &str)> {
        self.texts.iter().enumerate().map(|(i, t)| (i as u32, &**t))
    }
}
