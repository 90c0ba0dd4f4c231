//! Building a [`Tokenizer`] from a plain description of the vocabulary, with llama.cpp's
//! defaults and its detection of end-of-generation tokens (`llama_vocab::impl::load`).

use super::bpe::Bpe;
use super::pretok::PreTokenizer;
use super::special::SpecialMatcher;
use super::unicode::char_to_byte;
use super::vocab::{attr, TokenType, Vocab};
use super::{spm, FimIds, Model, SpecialIds, Tokenizer, TokenizerError};

/// Everything a tokenizer is built from: the GGUF `tokenizer.ggml.*` keys as plain values.
/// `None` means the key is absent (llama.cpp's default applies).
#[derive(Debug, Clone, Default)]
pub struct TokenizerSpec {
    /// `tokenizer.ggml.model`: `"llama"` or `"gpt2"`.
    pub model: String,
    /// `tokenizer.ggml.pre` (BPE only).
    pub pre: Option<String>,
    pub tokens: Vec<String>,
    /// Empty: all scores 0.
    pub scores: Vec<f32>,
    /// Empty: all tokens normal.
    pub types: Vec<TokenType>,
    /// `"left right"` strings, best first (BPE only).
    pub merges: Vec<String>,
    pub bos: Option<u32>,
    pub eos: Option<u32>,
    pub eot: Option<u32>,
    pub eom: Option<u32>,
    pub unk: Option<u32>,
    pub pad: Option<u32>,
    /// Fill-in-the-middle: `fim_pre_token_id` (older files: `prefix_token_id`), `fim_suf`
    /// (`suffix`), `fim_mid` (`middle`), `fim_pad`, `fim_rep`, `fim_sep`.
    pub fim_pre: Option<u32>,
    pub fim_suf: Option<u32>,
    pub fim_mid: Option<u32>,
    pub fim_pad: Option<u32>,
    pub fim_rep: Option<u32>,
    pub fim_sep: Option<u32>,
    pub add_bos: Option<bool>,
    pub add_eos: Option<bool>,
    pub add_space_prefix: Option<bool>,
}

/// Texts llama.cpp takes as end-of-turn when `eot_token_id` is absent, in preference order.
const EOT_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<|end_of_text|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "<｜end▁of▁sentence｜>",
    "<end_of_utterance>",
];
// The fill-in-the-middle markers llama.cpp recognises by text when the metadata names none
// (Qwen, StarCoder, DeepSeek, CodeLlama, GLM spellings).
const FIM_PRE_TEXTS: &[&str] = &[
    "<|fim_prefix|>",
    "<fim-prefix>",
    "<fim_prefix>",
    "<｜fim▁begin｜>",
    "<PRE>",
    "▁<PRE>",
    "<|code_prefix|>",
];
const FIM_SUF_TEXTS: &[&str] = &[
    "<|fim_suffix|>",
    "<fim-suffix>",
    "<fim_suffix>",
    "<｜fim▁hole｜>",
    "<SUF>",
    "▁<SUF>",
    "<|code_suffix|>",
];
const FIM_MID_TEXTS: &[&str] = &[
    "<|fim_middle|>",
    "<fim-middle>",
    "<fim_middle>",
    "<｜fim▁end｜>",
    "<MID>",
    "▁<MID>",
    "<|code_middle|>",
];
const FIM_PAD_TEXTS: &[&str] = &["<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"];
const FIM_REP_TEXTS: &[&str] = &[
    "<|fim_repo|>",
    "<|repo_name|>",
    "<fim-repo>",
    "<REPO>",
    "<reponame>",
];
const FIM_SEP_TEXTS: &[&str] = &["<|file_sep|>"];
/// Texts that end generation whatever the metadata says.
const EOG_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<|return|>",
    "<|call|>",
    "<|flush|>",
    "<|calls|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "</s>",
    "<|eom_id|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "[EOS]",
    "<|end_of_text|>",
    "<end_of_utterance>",
    "<eos>",
    "<turn|>",
    "<|tool_response>",
    "<｜end▁of▁sentence｜>",
    "[e~[",
];

fn find_text(vocab: &Vocab, texts: &[&str]) -> Option<u32> {
    texts.iter().find_map(|t| vocab.id(t.as_bytes()))
}

impl Tokenizer {
    /// Builds a tokenizer from `spec` (see [`TokenizerSpec`]).
    pub fn from_spec(spec: TokenizerSpec) -> Result<Tokenizer, TokenizerError> {
        let mut vocab = Vocab::new(spec.tokens, spec.scores, spec.types)?;
        let n = vocab.len() as u32;
        let in_range = |id: Option<u32>| id.filter(|&i| i < n);
        // Per-model defaults, then the metadata (an out-of-range id keeps the default).
        let (mut ids, mut add_bos, mut add_space_prefix, model) = match spec.model.as_str() {
            "llama" => {
                let ids = SpecialIds {
                    bos: in_range(Some(1)),
                    eos: in_range(Some(2)),
                    unk: in_range(Some(0)),
                    ..SpecialIds::default()
                };
                let bytes = spm::byte_tokens(&vocab);
                (ids, true, true, Model::Spm { bytes })
            }
            "gpt2" => {
                let pre = match spec.pre.as_deref() {
                    Some(p) if !p.is_empty() => p,
                    _ => {
                        tracing::warn!(
                            "tokenizer.ggml.pre is missing: using 'default' as llama.cpp does"
                        );
                        "default"
                    }
                };
                let pre = PreTokenizer::new(pre)?;
                let add_bos = pre.default_add_bos;
                let ids = SpecialIds {
                    bos: in_range(Some(11)),
                    eos: in_range(Some(11)),
                    ..SpecialIds::default()
                };
                let bpe = Bpe::new(&vocab, &spec.merges, pre);
                (ids, add_bos, false, Model::Bpe(bpe))
            }
            other => return Err(TokenizerError::UnsupportedModel(other.to_string())),
        };
        let pick = |meta: Option<u32>, default: Option<u32>| in_range(meta).or(default);
        ids.bos = pick(spec.bos, ids.bos);
        ids.eos = pick(spec.eos, ids.eos);
        ids.unk = pick(spec.unk, ids.unk);
        ids.eot = in_range(spec.eot);
        ids.eom = in_range(spec.eom);
        add_bos = spec.add_bos.unwrap_or(add_bos);
        let add_eos = spec.add_eos.unwrap_or(false);
        add_space_prefix = spec.add_space_prefix.unwrap_or(add_space_prefix);
        if add_bos && ids.bos.is_none() {
            return Err(TokenizerError::BadVocab(
                "add_bos_token is true but there is no BOS token".into(),
            ));
        }
        if add_eos && ids.eos.is_none() {
            return Err(TokenizerError::BadVocab(
                "add_eos_token is true but there is no EOS token".into(),
            ));
        }

        // Tokens recognised by text become control tokens (llama.cpp does the same).
        let mut detected = Vec::new();
        if ids.eot.is_none() {
            ids.eot = find_text(&vocab, EOT_TEXTS);
            detected.extend(ids.eot);
        }
        if ids.eom.is_none() {
            ids.eom = find_text(&vocab, &["<|eom_id|>"]);
            detected.extend(ids.eom);
        }
        let fim_id =
            |meta: Option<u32>, texts: &[&str]| in_range(meta).or_else(|| find_text(&vocab, texts));
        let fim = FimIds {
            pre: fim_id(spec.fim_pre, FIM_PRE_TEXTS),
            suf: fim_id(spec.fim_suf, FIM_SUF_TEXTS),
            mid: fim_id(spec.fim_mid, FIM_MID_TEXTS),
            pad: fim_id(spec.fim_pad, FIM_PAD_TEXTS),
            rep: fim_id(spec.fim_rep, FIM_REP_TEXTS),
            sep: fim_id(spec.fim_sep, FIM_SEP_TEXTS),
        };
        detected.extend([fim.pre, fim.suf, fim.mid].into_iter().flatten());
        // The pad, repository and file-separator markers also end generation (llama.cpp).
        let mut eog: Vec<u32> = [fim.pad, fim.rep, fim.sep].into_iter().flatten().collect();
        detected.extend(&eog);
        eog.extend(EOG_TEXTS.iter().filter_map(|t| vocab.id(t.as_bytes())));
        detected.extend(&eog);
        for id in detected {
            vocab.add_attr(id, attr::CONTROL);
        }
        eog.extend(ids.eos);
        eog.extend(ids.eot);
        eog.extend(ids.eom);
        eog.sort_unstable();
        eog.dedup();
        // Control tokens named "unused" are unused.
        let unused: Vec<u32> = vocab
            .iter()
            .filter(|&(id, t)| vocab.attr(id) & attr::CONTROL != 0 && t.contains("unused"))
            .map(|(id, _)| id)
            .collect();
        for id in unused {
            vocab.add_attr(id, attr::UNUSED);
        }
        // With both <|return|> and <|call|> (or <|calls|> and <|flush|>), <|end|> is not EOG.
        let has = |t: &str| vocab.id(t.as_bytes()).is_some_and(|i| eog.contains(&i));
        if (has("<|return|>") || has("<|flush|>"))
            && (has("<|call|>") || has("<|calls|>"))
            && has("<|end|>")
        {
            if let Some(end) = vocab.id(b"<|end|>") {
                eog.retain(|&i| i != end);
            }
        }

        let pieces = build_pieces(&vocab, &model);
        let matcher = SpecialMatcher::new(&vocab);
        Ok(Tokenizer {
            vocab,
            model,
            ids,
            fim,
            eog,
            add_bos,
            add_eos,
            add_space_prefix,
            matcher,
            pieces,
        })
    }
}

/// Each token's bytes (llama.cpp's `token_to_piece` with `special = true`).
fn build_pieces(vocab: &Vocab, model: &Model) -> Vec<Box<[u8]>> {
    vocab
        .iter()
        .map(|(id, text)| {
            let a = vocab.attr(id);
            let bytes: Vec<u8> = if a & (attr::CONTROL | attr::UNKNOWN | attr::USER_DEFINED) != 0 {
                text.as_bytes().to_vec()
            } else if a & attr::NORMAL != 0 {
                match model {
                    Model::Spm { .. } => text.replace('▁', " ").into_bytes(),
                    Model::Bpe(_) => {
                        let mut out = Vec::with_capacity(text.len());
                        for c in text.chars() {
                            match char_to_byte(c) {
                                Some(b) => out.push(b),
                                // Outside GPT-2's alphabet: keep the character itself.
                                None => {
                                    out.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes())
                                }
                            }
                        }
                        out
                    }
                }
            } else if a & attr::BYTE != 0 {
                parse_byte_token(text).map_or_else(|| text.as_bytes().to_vec(), |b| vec![b])
            } else {
                Vec::new()
            };
            bytes.into_boxed_slice()
        })
        .collect()
}

/// `<0xNN>` -> the byte NN.
fn parse_byte_token(text: &str) -> Option<u8> {
    let hex = text.strip_prefix("<0x")?.strip_suffix('>')?;
    if hex.len() != 2 {
        return None;
    }
    u8::from_str_radix(hex, 16).ok()
}
