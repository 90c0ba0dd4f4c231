//! The tokenizer: text <-> token ids for the vocabularies GGUF files carry.
//!
//! Two models, chosen by `tokenizer.ggml.model`:
//! - `gpt2`: byte-level BPE with merge ranks and a regex pre-tokenizer picked by
//!   `tokenizer.ggml.pre` ([`bpe`], [`pretok`]).
//! - `llama`: SentencePiece-style BPE by token score with byte fallback ([`spm`]).
//!
//! The reference is llama.cpp (`src/llama-vocab.cpp`, `src/unicode.cpp`); the conformance
//! tests compare with its output exactly.
//!
//! **Why kiln's own BPE/SPM instead of `tokenizers`' `BPE` model:** llama.cpp's behaviour
//! differs from Hugging Face's in details the conformance data checks (SPM's merge order by
//! score with `<0xNN>` fallback, llama.cpp's special-token partitioning and space-prefix
//! rule after special tokens, `ignore_merges`, per-`pre` regex lists applied in sequence),
//! and a GGUF carries no `tokenizer.json` to configure the HF pipeline with. The algorithms
//! are small; owning them makes exactness and speed (merges keyed by id pairs, no string
//! building per merge) straightforward. From `tokenizers` kiln uses its Oniguruma binding
//! (`tokenizers::utils::SysRegex`) for the rarer pre-tokenizer regexes that need lookahead.
//!
//! Control tokens (`<|im_start|>`, `</s>`) are recognised in text only with
//! `parse_special = true`; otherwise they are plain text.

mod bpe;
mod gguf;
mod load;
pub mod pretok;
mod special;
mod split_fast;
mod spm;
mod stream;
pub mod unicode;
mod vocab;

pub use load::TokenizerSpec;
pub use special::Fragment;
pub use stream::{DecodeState, StreamDecoder};
pub use vocab::{attr, TokenType, Vocab};

use special::SpecialMatcher;

/// Errors building a tokenizer. Encoding and decoding cannot fail.
#[derive(Debug, thiserror::Error)]
pub enum TokenizerError {
    #[error("unsupported tokenizer model {0:?} (kiln supports \"llama\" and \"gpt2\")")]
    UnsupportedModel(String),
    #[error("unknown pre-tokenizer {0:?} (tokenizer.ggml.pre); kiln does not guess one")]
    UnknownPreTokenizer(String),
    #[error("GGUF key {0} is missing")]
    MissingKey(&'static str),
    #[error("invalid vocabulary: {0}")]
    BadVocab(String),
    #[error("pre-tokenizer regex failed to compile: {0}")]
    Regex(String),
    #[error(transparent)]
    Gguf(#[from] crate::gguf::GgufError),
}

/// The ids of the tokens with a special role (None when the vocabulary has none).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct SpecialIds {
    pub bos: Option<u32>,
    pub eos: Option<u32>,
    pub eot: Option<u32>,
    pub eom: Option<u32>,
    pub unk: Option<u32>,
}

/// The fill-in-the-middle markers of a vocabulary (from the metadata, else recognised by
/// text as llama.cpp does); None when it has none.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FimIds {
    /// Before the code preceding the hole (`<fim_prefix>`).
    pub pre: Option<u32>,
    /// Before the code following it (`<fim_suffix>`).
    pub suf: Option<u32>,
    /// Where the model writes the middle (`<fim_middle>`).
    pub mid: Option<u32>,
    pub pad: Option<u32>,
    /// Before a repository's name (repo-level prompts).
    pub rep: Option<u32>,
    /// Before each file of a repository-level prompt.
    pub sep: Option<u32>,
}

pub(crate) enum Model {
    Spm { bytes: [Option<u32>; 256] },
    Bpe(bpe::Bpe),
}

/// A ready tokenizer. Immutable after construction: `Send + Sync`, share it in an `Arc`.
pub struct Tokenizer {
    vocab: Vocab,
    model: Model,
    ids: SpecialIds,
    fim: FimIds,
    /// Sorted end-of-generation ids.
    eog: Vec<u32>,
    add_bos: bool,
    add_eos: bool,
    add_space_prefix: bool,
    matcher: SpecialMatcher,
    /// Each token's text as bytes (control tokens as their text).
    pieces: Vec<Box<[u8]>>,
}

// The engine and the HTTP layer share one tokenizer across threads.
const _: () = {
    const fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Tokenizer>();
};

impl Tokenizer {
    /// Encodes `text`. `add_special` adds BOS/EOS as the vocabulary asks
    /// (`tokenizer.ggml.add_bos_token`...); `parse_special` recognises control tokens written
    /// in the text (for rendered chat templates, never for raw user input).
    pub fn encode(&self, text: &str, add_special: bool, parse_special: bool) -> Vec<u32> {
        let frags = self.matcher.partition(text, parse_special);
        self.encode_fragments(&frags, text.len(), add_special)
    }

    /// Encodes `text` recognising control tokens (`<|im_start|>`) everywhere except inside the
    /// `protected` byte ranges, whose text is always plain text (as with
    /// `parse_special = false`), and never as part of a control token that straddles a range's
    /// edge. This is how a rendered chat prompt is tokenized: the template's markup is parsed,
    /// the users' text is not. With no protected range this equals
    /// `encode(text, add_special, true)`; plain text on both sides of a range edge is encoded
    /// as one piece, so a protected range holding no control-token text changes nothing.
    ///
    /// Ranges must be sorted, non-overlapping and on character boundaries; ranges that are not
    /// (a caller bug) are clipped or skipped, never a panic.
    pub fn encode_protected(
        &self,
        text: &str,
        add_special: bool,
        protected: &[std::ops::Range<usize>],
    ) -> Vec<u32> {
        // Text pieces as byte ranges of `text`, adjacent ones merged.
        enum Piece {
            Text(std::ops::Range<usize>),
            Token(u32),
        }
        let mut pieces: Vec<Piece> = Vec::new();
        let add = |pieces: &mut Vec<Piece>, start: usize, end: usize, parse: bool| {
            for f in self.matcher.partition(&text[start..end], parse) {
                match f {
                    Fragment::Text(t) => {
                        let at = t.as_ptr() as usize - text.as_ptr() as usize;
                        match pieces.last_mut() {
                            Some(Piece::Text(prev)) if prev.end == at => prev.end = at + t.len(),
                            _ => pieces.push(Piece::Text(at..at + t.len())),
                        }
                    }
                    Fragment::Token(id) => pieces.push(Piece::Token(id)),
                }
            }
        };
        let mut pos = 0;
        for r in protected {
            let (start, end) = (r.start.max(pos), r.end.min(text.len()));
            if start >= end || !text.is_char_boundary(start) || !text.is_char_boundary(end) {
                continue;
            }
            add(&mut pieces, pos, start, true);
            add(&mut pieces, start, end, false);
            pos = end;
        }
        add(&mut pieces, pos, text.len(), true);
        let frags: Vec<Fragment<'_>> = pieces
            .into_iter()
            .map(|p| match p {
                Piece::Text(r) => Fragment::Text(&text[r]),
                Piece::Token(id) => Fragment::Token(id),
            })
            .collect();
        self.encode_fragments(&frags, text.len(), add_special)
    }

    /// Whether `text` holds the text of a control token (`<|im_end|>`) that
    /// `encode(text, _, true)` would turn into that token.
    pub fn contains_control_text(&self, text: &str) -> bool {
        self.matcher
            .partition(text, true)
            .iter()
            .any(|f| matches!(f, Fragment::Token(id) if self.vocab.attr(*id) & (attr::CONTROL | attr::UNKNOWN) != 0))
    }

    /// Encodes partitioned text with the vocabulary's model.
    fn encode_fragments(
        &self,
        frags: &[Fragment<'_>],
        text_len: usize,
        add_special: bool,
    ) -> Vec<u32> {
        let mut out = Vec::with_capacity(text_len / 3 + 2);
        if add_special && self.add_bos {
            out.extend(self.ids.bos);
        }
        match &self.model {
            Model::Spm { bytes } => {
                let mut prev_special = true;
                let mut buf = String::new();
                for f in frags {
                    match *f {
                        Fragment::Text(t) => {
                            buf.clear();
                            if self.add_space_prefix && prev_special {
                                buf.push('▁');
                            }
                            for c in t.chars() {
                                buf.push(if c == ' ' { '▁' } else { c });
                            }
                            spm::encode(&self.vocab, bytes, self.ids.unk, &buf, &mut out);
                            prev_special = false;
                        }
                        Fragment::Token(id) => {
                            out.push(id);
                            prev_special = true;
                        }
                    }
                }
            }
            Model::Bpe(bpe) => {
                let mut scratch = bpe::BpeScratch::default();
                for f in frags {
                    match *f {
                        Fragment::Text(t) => bpe.encode(&self.vocab, t, &mut scratch, &mut out),
                        Fragment::Token(id) => out.push(id),
                    }
                }
            }
        }
        if add_special && self.add_eos {
            out.extend(self.ids.eos);
        }
        out
    }

    /// The bytes token `id` stands for. With `special`, control and unknown tokens render as
    /// their text; without, as nothing. Out-of-range ids render as nothing.
    fn piece(&self, id: u32, special: bool) -> &[u8] {
        match self.pieces.get(id as usize) {
            Some(p) if special || self.vocab.attr(id) & (attr::CONTROL | attr::UNKNOWN) == 0 => p,
            _ => &[],
        }
    }

    /// The bytes of token `id`, control tokens shown as their text (`<|im_start|>`). Empty for
    /// an out-of-range id. May be part of a UTF-8 character (byte tokens).
    pub fn token_to_piece(&self, id: u32) -> &[u8] {
        self.piece(id, true)
    }

    /// Decodes ids to text as a server shows generated text: control tokens render as
    /// nothing, and (SentencePiece vocabularies) the first token's leading space is dropped.
    /// Invalid UTF-8 becomes U+FFFD (only possible for byte tokens that do not form a
    /// character). Equal to pushing the ids one by one through [`Self::stream_decoder`].
    pub fn decode(&self, ids: &[u32]) -> String {
        let mut bytes = Vec::with_capacity(ids.len() * 4);
        for (i, &id) in ids.iter().enumerate() {
            let mut p = self.piece(id, false);
            if i == 0 && self.add_space_prefix {
                p = p.strip_prefix(b" ").unwrap_or(p);
            }
            bytes.extend_from_slice(p);
        }
        match String::from_utf8(bytes) {
            Ok(s) => s,
            Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
        }
    }

    /// A streaming decoder for text that starts at its first token (same output as
    /// [`Self::decode`]).
    pub fn stream_decoder(&self) -> StreamDecoder<'_> {
        StreamDecoder::new(self, self.add_space_prefix)
    }

    /// A streaming decoder for tokens that continue a prompt: no leading space is dropped.
    pub fn stream_decoder_continuing(&self) -> StreamDecoder<'_> {
        StreamDecoder::new(self, false)
    }

    pub fn n_vocab(&self) -> usize {
        self.vocab.len()
    }

    pub fn vocab(&self) -> &Vocab {
        &self.vocab
    }

    pub fn bos(&self) -> Option<u32> {
        self.ids.bos
    }

    pub fn eos(&self) -> Option<u32> {
        self.ids.eos
    }

    pub fn eot(&self) -> Option<u32> {
        self.ids.eot
    }

    /// The fill-in-the-middle markers.
    pub fn fim(&self) -> FimIds {
        self.fim
    }

    /// End of generation: eos, eot, eom and the end-of-turn tokens llama.cpp recognises by
    /// text (`<|im_end|>`, `<|endoftext|>`, `<end_of_turn>`...).
    pub fn is_eog(&self, id: u32) -> bool {
        self.eog.binary_search(&id).is_ok()
    }

    /// All end-of-generation ids, sorted.
    pub fn eog_ids(&self) -> &[u32] {
        &self.eog
    }

    pub fn add_bos(&self) -> bool {
        self.add_bos
    }

    pub fn add_eos(&self) -> bool {
        self.add_eos
    }

    /// Whether the token is a control token (rendered only on request).
    pub fn is_control(&self, id: u32) -> bool {
        (id as usize) < self.vocab.len() && self.vocab.attr(id) & attr::CONTROL != 0
    }

    /// `"llama"` or `"gpt2"`.
    pub fn model_name(&self) -> &'static str {
        match self.model {
            Model::Spm { .. } => "llama",
            Model::Bpe(_) => "gpt2",
        }
    }

    /// The pre-tokenizer name (`tokenizer.ggml.pre`); None for SentencePiece vocabularies.
    pub fn pre_name(&self) -> Option<&str> {
        match &self.model {
            Model::Spm { .. } => None,
            Model::Bpe(b) => Some(b.pre.name()),
        }
    }
}

#[cfg(test)]
pub(crate) mod tests;
