//! Reading the `tokenizer.ggml.*` metadata of a GGUF file into a [`TokenizerSpec`].

use super::vocab::TokenType;
use super::{Tokenizer, TokenizerError, TokenizerSpec};
use crate::gguf::GgufFile;

const KEY_MODEL: &str = "tokenizer.ggml.model";
const KEY_TOKENS: &str = "tokenizer.ggml.tokens";
const KEY_SCORES: &str = "tokenizer.ggml.scores";

impl TokenizerSpec {
    /// The tokenizer description stored in `f`'s metadata.
    pub fn from_gguf(f: &GgufFile) -> Result<TokenizerSpec, TokenizerError> {
        let model = f
            .get_str(KEY_MODEL)?
            .ok_or(TokenizerError::MissingKey(KEY_MODEL))?
            .to_string();
        let tokens = f
            .get_str_array(KEY_TOKENS)?
            .ok_or(TokenizerError::MissingKey(KEY_TOKENS))?
            .to_vec();
        let n = tokens.len();
        // Scores are f32 (some converters wrote i32); longer arrays are cut to the vocabulary.
        let scores: Vec<f32> = match f.get_f32_array(KEY_SCORES) {
            Ok(Some(s)) => s.to_vec(),
            Ok(None) => Vec::new(),
            Err(e) => match f.get_i32_array(KEY_SCORES) {
                Ok(Some(s)) => s.iter().map(|&x| x as f32).collect(),
                _ => return Err(e.into()),
            },
        };
        let types: Vec<TokenType> = f
            .get_i32_array("tokenizer.ggml.token_type")?
            .map(|t| t.iter().map(|&c| TokenType::from_gguf(c)).collect())
            .unwrap_or_default();
        let cut = |what: &str, len: usize| -> Result<usize, TokenizerError> {
            if len != 0 && len < n {
                return Err(TokenizerError::BadVocab(format!(
                    "{len} {what} for {n} tokens"
                )));
            }
            Ok(len.min(n))
        };
        let scores_len = cut("scores", scores.len())?;
        let types_len = cut("token types", types.len())?;
        let merges = f
            .get_str_array("tokenizer.ggml.merges")?
            .map(|a| a.to_vec())
            .unwrap_or_default();
        if model == "gpt2" && merges.is_empty() {
            return Err(TokenizerError::MissingKey("tokenizer.ggml.merges"));
        }
        let id = |k: &str| f.get_u32(&format!("tokenizer.ggml.{k}"));
        let flag = |k: &str| f.get_bool(&format!("tokenizer.ggml.{k}"));
        Ok(TokenizerSpec {
            model,
            pre: f.get_str("tokenizer.ggml.pre")?.map(str::to_string),
            scores: scores[..scores_len].to_vec(),
            types: types[..types_len].to_vec(),
            tokens,
            merges,
            bos: id("bos_token_id")?,
            eos: id("eos_token_id")?,
            eot: id("eot_token_id")?,
            eom: id("eom_token_id")?,
            unk: id("unknown_token_id")?,
            pad: id("padding_token_id")?,
            fim_pre: id("fim_pre_token_id")?.or(id("prefix_token_id")?),
            fim_suf: id("fim_suf_token_id")?.or(id("suffix_token_id")?),
            fim_mid: id("fim_mid_token_id")?.or(id("middle_token_id")?),
            fim_pad: id("fim_pad_token_id")?,
            fim_rep: id("fim_rep_token_id")?,
            fim_sep: id("fim_sep_token_id")?,
            add_bos: flag("add_bos_token")?,
            add_eos: flag("add_eos_token")?,
            add_space_prefix: flag("add_space_prefix")?,
        })
    }
}

impl Tokenizer {
    /// The tokenizer of a GGUF model (or vocabulary-only) file.
    pub fn from_gguf(f: &GgufFile) -> Result<Tokenizer, TokenizerError> {
        Tokenizer::from_spec(TokenizerSpec::from_gguf(f)?)
    }
}
