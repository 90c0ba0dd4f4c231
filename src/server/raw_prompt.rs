//! Prompts a client sends as text or as token ids (completions, embeddings, rerank's
//! llama-server form): how many one request may hold, and their tokens.

use crate::server::error::ApiError;
use crate::server::types::OnePrompt;
use crate::tokenizer::Tokenizer;

/// Most prompts in one request (each is its own engine request).
pub const MAX_PROMPTS: usize = 64;

/// A prompt's token ids and its text (for `echo`).
pub(crate) struct Tokenized {
    pub ids: Vec<u32>,
    pub text: String,
}

/// Tokenizes (text: with BOS as the vocabulary asks and control tokens parsed, since the
/// whole prompt is the client's own) or checks the ids against the vocabulary.
/// `param` names the request field in errors.
pub(crate) fn tokenize(
    tok: &Tokenizer,
    prompts: Vec<OnePrompt>,
    param: &'static str,
) -> Result<Vec<Tokenized>, ApiError> {
    let n_vocab = tok.n_vocab();
    prompts
        .into_iter()
        .enumerate()
        .map(|(i, p)| match p {
            OnePrompt::Text(text) => {
                check_text(&text, param)?;
                Ok(Tokenized {
                    ids: tok.encode(&text, true, true),
                    text,
                })
            }
            OnePrompt::Ids(raw) => {
                let ids = raw
                    .into_iter()
                    .map(|v| {
                        check_id(v, n_vocab)
                            .map_err(|m| ApiError::bad(param, format!("{param} {i}: {m}")))
                    })
                    .collect::<Result<Vec<u32>, ApiError>>()?;
                let bytes: Vec<u8> = ids
                    .iter()
                    .flat_map(|&id| tok.token_to_piece(id).to_vec())
                    .collect();
                Ok(Tokenized {
                    text: String::from_utf8_lossy(&bytes).into_owned(),
                    ids,
                })
            }
        })
        .collect()
}

/// Refuses a client's prompt text that no tokenizer path accepts (NUL characters).
pub(crate) fn check_text(text: &str, param: &str) -> Result<(), ApiError> {
    if text.contains('\0') {
        return Err(ApiError::bad(
            param,
            format!("the {param} must not contain NUL characters"),
        ));
    }
    Ok(())
}

/// A client's token id as a vocabulary index, or the message saying why it is not one.
pub(crate) fn check_id(v: i64, n_vocab: usize) -> Result<u32, String> {
    match u32::try_from(v) {
        Ok(id) if (id as usize) < n_vocab => Ok(id),
        _ => Err(format!(
            "token id {v} is outside the vocabulary of {n_vocab} tokens"
        )),
    }
}
