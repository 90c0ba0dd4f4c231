//! The vocabulary size of a file, from the first of the places llama.cpp's converter puts it.

use super::{inconsistent, invalid, HParamsError, Keys};

/// `{arch}.vocab_size`, else the token list's length, else the embedding's row count.
pub(super) fn vocab_size(k: &Keys<'_>) -> Result<u32, HParamsError> {
    let key = k.key("vocab_size");
    if let Some(v) = k.f.get_u32(&key)? {
        return if v == 0 {
            Err(invalid(key, 0, "must be positive"))
        } else {
            Ok(v)
        };
    }
    if let Some(tokens) = k.f.get_str_array("tokenizer.ggml.tokens")? {
        return u32::try_from(tokens.len())
            .ok()
            .filter(|&n| n > 0)
            .ok_or_else(|| invalid("tokenizer.ggml.tokens".into(), tokens.len(), "bad length"));
    }
    let t =
        k.f.tensor("token_embd.weight")
            .ok_or_else(|| HParamsError::MissingTensor("token_embd.weight".into()))?;
    t.shape
        .get(1)
        .and_then(|&n| u32::try_from(n).ok())
        .ok_or_else(|| inconsistent(format!("token_embd.weight has shape {:?}", t.shape)))
}
