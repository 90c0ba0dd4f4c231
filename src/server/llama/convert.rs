//! llama-server's request fields into kiln's sampling [`Fields`], and its prompt forms into
//! token ids: the one conversion `/completion` and `/infill` share.

use crate::server::error::ApiError;
use crate::server::generation_fields::Fields;
use crate::server::raw_prompt::{check_id, check_text, MAX_PROMPTS};
use crate::server::types::llama::LlamaCompletionRequest;
use crate::server::types::StopSpec;
use crate::tokenizer::Tokenizer;
use serde_json::Value;
use std::collections::HashMap;

/// llama-server's sampling defaults, which a client of `/completion` that sends none expects
/// (kiln's OpenAI routes keep OpenAI's: temperature 1, no top-k, top-p or min-p cut).
pub const DEFAULT_TEMPERATURE: f64 = 0.8;
pub const DEFAULT_TOP_K: i64 = 40;
pub const DEFAULT_TOP_P: f64 = 0.95;
pub const DEFAULT_MIN_P: f64 = 0.05;

/// kiln's sampler chain, in llama-server's names (what `/props` and replies report).
pub const SAMPLERS: [&str; 5] = ["penalties", "top_k", "top_p", "min_p", "temperature"];

/// The request's converted parts, owned (the [`Fields`] borrow them).
pub struct Converted {
    pub stop: Option<StopSpec>,
    pub logit_bias: Option<HashMap<String, f64>>,
    /// `n_predict` (or `max_tokens`): None for -1 or absent (the server's default).
    pub n_predict: Option<i64>,
}

/// Refuses samplers kiln does not have, unless at their neutral value: a request must never
/// silently sample otherwise than it asked.
pub fn refuse_unsupported(r: &LlamaCompletionRequest) -> Result<(), ApiError> {
    let unsupported = |param: &str, what: &str| {
        Err(ApiError::bad(
            param,
            format!(
                "{what} is not supported by kiln; leave `{param}` unset or at its neutral value"
            ),
        ))
    };
    if r.grammar.as_deref().is_some_and(|g| !g.trim().is_empty()) {
        return unsupported(
            "grammar",
            "a GBNF grammar (use `json_schema` for JSON, which kiln enforces)",
        );
    }
    if r.mirostat.is_some_and(|m| m != 0) {
        return unsupported("mirostat", "Mirostat sampling");
    }
    if r.typical_p.is_some_and(|p| p < 1.0) {
        return unsupported("typical_p", "locally typical sampling");
    }
    if r.dynatemp_range.is_some_and(|d| d > 0.0) {
        return unsupported("dynatemp_range", "dynamic temperature");
    }
    if r.dry_multiplier.is_some_and(|d| d > 0.0) {
        return unsupported("dry_multiplier", "DRY sampling");
    }
    if r.xtc_probability.is_some_and(|p| p > 0.0) {
        return unsupported("xtc_probability", "XTC sampling");
    }
    if r.post_sampling_probs == Some(true) {
        return unsupported(
            "post_sampling_probs",
            "probabilities after the sampler chain (n_probs gives the model's)",
        );
    }
    if r.lora.as_ref().is_some_and(|l| !l.is_empty()) {
        return unsupported("lora", "a LoRA adapter");
    }
    Ok(())
}

impl Converted {
    /// The owned parts of `r`; token texts in `logit_bias` are tokenized with `tok`.
    pub fn new(r: &LlamaCompletionRequest, tok: &Tokenizer) -> Result<Converted, ApiError> {
        let n_predict = match r.n_predict.or(r.max_tokens) {
            // llama-server: -1 (any negative) is "until the end"; kiln's default is then
            // the server's, lowered to what the context leaves.
            Some(n) if n < 0 => None,
            other => other,
        };
        Ok(Converted {
            stop: r.stop.clone().map(StopSpec::Many),
            logit_bias: r
                .logit_bias
                .as_ref()
                .map(|v| logit_bias(v, tok))
                .transpose()?,
            n_predict,
        })
    }

    /// kiln's sampling fields for `r`, with llama-server's defaults where `r` sets none.
    pub fn fields<'a>(&'a self, r: &LlamaCompletionRequest) -> Fields<'a> {
        let n_probs = r.n_probs.unwrap_or(0);
        Fields {
            max_tokens: self.n_predict,
            max_tokens_param: if r.n_predict.is_some() {
                "n_predict"
            } else {
                "max_tokens"
            },
            // llama-server samples greedily at temperature <= 0.
            temperature: Some(r.temperature.unwrap_or(DEFAULT_TEMPERATURE).max(0.0)),
            top_p: Some(r.top_p.unwrap_or(DEFAULT_TOP_P)),
            n: r.n_cmpl,
            stop: self.stop.as_ref(),
            // llama-server's "random" seeds: -1 and u32::MAX.
            seed: r.seed.filter(|&s| s >= 0 && s != u32::MAX as i64),
            presence_penalty: r.presence_penalty,
            frequency_penalty: r.frequency_penalty,
            logit_bias: self.logit_bias.as_ref(),
            logprobs: n_probs > 0,
            top_logprobs: Some(n_probs),
            top_logprobs_param: "n_probs",
            // llama-server: top_k <= 0 is off.
            top_k: Some(r.top_k.unwrap_or(DEFAULT_TOP_K).max(0)),
            min_p: Some(r.min_p.unwrap_or(DEFAULT_MIN_P)),
            repetition_penalty: r.repeat_penalty,
            ignore_eos: r.ignore_eos.unwrap_or(false),
            // n_predict 0 evaluates the prompt only.
            zero_max_tokens: true,
            speculative_n_max: r.speculative_n_max,
            speculative_n_min: r.speculative_n_min,
        }
    }
}

/// `logit_bias` in llama-server's forms: `[[id or text, bias or false], ...]` or
/// `{"id or text": bias or false}`. `false` bans the token (kiln's strongest bias, -100); a
/// text applies the bias to each of its tokens; a later entry for the same id wins.
fn logit_bias(v: &Value, tok: &Tokenizer) -> Result<HashMap<String, f64>, ApiError> {
    let bad = |m: String| ApiError::bad("logit_bias", m);
    let pairs: Vec<(&Value, &Value)> = match v {
        Value::Array(items) => items
            .iter()
            .enumerate()
            .map(|(i, it)| match it.as_array().map(Vec::as_slice) {
                Some([k, b]) => Ok((k, b)),
                _ => Err(bad(format!(
                    "logit_bias[{i}] must be a pair [token id or text, bias or false]"
                ))),
            })
            .collect::<Result<_, _>>()?,
        Value::Object(map) => {
            return map
                .iter()
                .map(|(k, b)| {
                    let key = Value::String(k.clone());
                    entries(&key, b, tok).map_err(bad)
                })
                .collect::<Result<Vec<_>, _>>()
                .map(|v| v.into_iter().flatten().collect())
        }
        Value::Null => Vec::new(),
        _ => {
            return Err(bad(
                "logit_bias must be an array of pairs or an object".into()
            ))
        }
    };
    let mut out = HashMap::new();
    for (k, b) in pairs {
        out.extend(entries(k, b, tok).map_err(bad)?);
    }
    Ok(out)
}

/// One entry's (id, bias) pairs, ids as kiln's `logit_bias` keys.
fn entries(key: &Value, bias: &Value, tok: &Tokenizer) -> Result<Vec<(String, f64)>, String> {
    let b = match bias {
        Value::Bool(false) => -100.0,
        Value::Number(n) => n.as_f64().unwrap_or(f64::NAN),
        other => return Err(format!("a bias must be a number or false, got {other}")),
    };
    let ids: Vec<u32> = match key {
        Value::Number(n) => match n.as_u64().and_then(|i| u32::try_from(i).ok()) {
            Some(id) => vec![id],
            None => return Err(format!("{n} is not a token id")),
        },
        Value::String(s) => match s.parse::<u32>() {
            Ok(id) => vec![id],
            Err(_) => tok.encode(s, false, false),
        },
        other => return Err(format!("a token must be an id or a text, got {other}")),
    };
    Ok(ids.into_iter().map(|id| (id.to_string(), b)).collect())
}

/// One part of a prompt: text, or a token id (checked against the vocabulary later).
#[derive(Debug, Clone, PartialEq)]
pub enum Piece {
    Text(String),
    Id(i64),
}

/// `prompt` in llama-server's forms: a string; token ids, possibly mixed with strings (one
/// prompt); or an array of such prompts. Each prompt is its pieces.
pub fn prompts(v: &Value) -> Result<Vec<Vec<Piece>>, ApiError> {
    let bad = |m: &str| ApiError::bad("prompt", m);
    let list = match v {
        Value::String(s) => return Ok(vec![vec![Piece::Text(s.clone())]]),
        Value::Null => return Err(bad("prompt is required")),
        Value::Array(items) if items.is_empty() => return Err(bad("prompt must not be empty")),
        Value::Array(items) => items,
        Value::Object(_) => return one_object(v).map(|p| vec![p]),
        _ => {
            return Err(bad(
                "prompt must be a string, token ids, or an array of prompts",
            ))
        }
    };
    // Numbers anywhere at the top level: one prompt of ids and strings.
    if list.iter().any(Value::is_number) {
        return Ok(vec![mixed(list, "prompt")?]);
    }
    if list.len() > MAX_PROMPTS {
        return Err(ApiError::bad(
            "prompt",
            format!(
                "at most {MAX_PROMPTS} prompts per request, got {}",
                list.len()
            ),
        ));
    }
    list.iter()
        .enumerate()
        .map(|(i, item)| match item {
            Value::String(s) => Ok(vec![Piece::Text(s.clone())]),
            Value::Array(parts) if !parts.is_empty() => mixed(parts, &format!("prompt[{i}]")),
            Value::Object(_) => one_object(item),
            _ => Err(ApiError::bad(
                format!("prompt[{i}]"),
                "each prompt must be a string, a non-empty array of token ids and strings, or an object with prompt_string",
            )),
        })
        .collect()
}

/// Token ids mixed with strings.
fn mixed(parts: &[Value], param: &str) -> Result<Vec<Piece>, ApiError> {
    parts
        .iter()
        .enumerate()
        .map(|(j, p)| match p {
            Value::Number(n) => n.as_i64().map(Piece::Id).ok_or_else(|| {
                ApiError::bad(format!("{param}[{j}]"), format!("{n} is not a token id"))
            }),
            Value::String(s) => Ok(Piece::Text(s.clone())),
            _ => Err(ApiError::bad(
                format!("{param}[{j}]"),
                "must be a token id or a string",
            )),
        })
        .collect()
}

/// `{"prompt_string": "...", "multimodal_data": [...]}`: text only (kiln runs text models).
fn one_object(v: &Value) -> Result<Vec<Piece>, ApiError> {
    if v.get("multimodal_data")
        .and_then(Value::as_array)
        .is_some_and(|a| !a.is_empty())
    {
        return Err(ApiError::bad(
            "prompt",
            "multimodal_data is not supported: kiln serves text models",
        ));
    }
    match v.get("prompt_string") {
        Some(Value::String(s)) => Ok(vec![Piece::Text(s.clone())]),
        _ => Err(ApiError::bad(
            "prompt",
            "a prompt object needs a string prompt_string",
        )),
    }
}

/// A prompt's tokens: BOS (as the vocabulary asks) when it starts with text, control tokens
/// written in the text parsed (the whole prompt is the client's own, as llama-server reads
/// it); ids checked against the vocabulary.
pub fn tokenize(tok: &Tokenizer, pieces: &[Piece], param: &str) -> Result<Vec<u32>, ApiError> {
    let n_vocab = tok.n_vocab();
    let mut ids = Vec::new();
    for (i, p) in pieces.iter().enumerate() {
        match p {
            Piece::Text(t) => {
                check_text(t, param)?;
                ids.extend(tok.encode(t, i == 0, true));
            }
            Piece::Id(v) => ids.push(check_id(*v, n_vocab).map_err(|m| ApiError::bad(param, m))?),
        }
    }
    Ok(ids)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn prompt_forms() {
        let t = |s: &str| Piece::Text(s.into());
        assert_eq!(prompts(&json!("hi")).unwrap(), vec![vec![t("hi")]]);
        assert_eq!(
            prompts(&json!([1, 2, "x", 3])).unwrap(),
            vec![vec![Piece::Id(1), Piece::Id(2), t("x"), Piece::Id(3)]]
        );
        assert_eq!(
            prompts(&json!(["a", [1, "b"], {"prompt_string": "c"}])).unwrap(),
            vec![vec![t("a")], vec![Piece::Id(1), t("b")], vec![t("c")]]
        );
        for (bad, param) in [
            (json!(null), "prompt"),
            (json!([]), "prompt"),
            (json!(true), "prompt"),
            (json!([[]]), "prompt[0]"),
            (json!([1.5]), "prompt[0]"),
            (
                json!([{"prompt_string": "x", "multimodal_data": ["AAAA"]}]),
                "prompt",
            ),
        ] {
            let e = prompts(&bad).unwrap_err();
            assert_eq!(e.envelope().error.param.as_deref(), Some(param), "{bad}");
        }
    }

    #[test]
    fn unsupported_samplers_are_refused_unless_neutral() {
        let neutral: LlamaCompletionRequest = serde_json::from_value(json!({
            "prompt": "x", "mirostat": 0, "typical_p": 1.0, "grammar": "",
            "dry_multiplier": 0.0, "xtc_probability": 0.0, "lora": [],
            "samplers": ["top_k"], "cache_prompt": true, "id_slot": -1
        }))
        .unwrap();
        assert!(refuse_unsupported(&neutral).is_ok());
        for (field, value) in [
            ("mirostat", json!(2)),
            ("typical_p", json!(0.5)),
            ("grammar", json!("root ::= \"a\"")),
            ("dry_multiplier", json!(0.8)),
            ("xtc_probability", json!(0.5)),
            ("post_sampling_probs", json!(true)),
            ("lora", json!([{"id": 0, "scale": 1.0}])),
        ] {
            let r: LlamaCompletionRequest =
                serde_json::from_value(json!({"prompt": "x", field: value})).unwrap();
            let e = refuse_unsupported(&r).unwrap_err();
            assert_eq!(e.envelope().error.param.as_deref(), Some(field));
        }
    }

    #[test]
    fn defaults_and_seeds_follow_llama_server() {
        let tok = crate::tokenizer::tests::tiny_spm();
        let r: LlamaCompletionRequest =
            serde_json::from_value(json!({"prompt": "x", "n_predict": -1, "seed": -1})).unwrap();
        let c = Converted::new(&r, &tok).unwrap();
        let f = c.fields(&r);
        assert_eq!(f.max_tokens, None);
        assert_eq!(f.seed, None);
        assert_eq!(f.temperature, Some(DEFAULT_TEMPERATURE));
        assert_eq!(f.top_k, Some(DEFAULT_TOP_K));
        let r: LlamaCompletionRequest = serde_json::from_value(json!({
            "prompt": "x", "max_tokens": 5, "seed": 7, "temperature": -1, "top_k": -1,
            "n_probs": 3, "logit_bias": [[5, false], ["7", 1.5]]
        }))
        .unwrap();
        let c = Converted::new(&r, &tok).unwrap();
        let f = c.fields(&r);
        assert_eq!((f.max_tokens, f.max_tokens_param), (Some(5), "max_tokens"));
        assert_eq!(
            (f.seed, f.temperature, f.top_k),
            (Some(7), Some(0.0), Some(0))
        );
        assert!(f.logprobs && f.top_logprobs == Some(3));
        let bias = f.logit_bias.unwrap();
        assert_eq!(bias["5"], -100.0);
        assert_eq!(bias["7"], 1.5);
        let r: LlamaCompletionRequest =
            serde_json::from_value(json!({"prompt": "x", "logit_bias": {"9": false}})).unwrap();
        assert_eq!(
            Converted::new(&r, &tok).unwrap().logit_bias.unwrap()["9"],
            -100.0
        );
        let r: LlamaCompletionRequest =
            serde_json::from_value(json!({"prompt": "x", "logit_bias": [[1]]})).unwrap();
        assert!(Converted::new(&r, &tok).is_err());
    }

    #[test]
    fn token_ids_are_checked_against_the_vocabulary() {
        let tok = crate::tokenizer::tests::tiny_spm();
        let n = tok.n_vocab() as i64;
        assert_eq!(tokenize(&tok, &[Piece::Id(3)], "prompt").unwrap(), vec![3]);
        assert!(tokenize(&tok, &[Piece::Id(n)], "prompt").is_err());
        assert!(tokenize(&tok, &[Piece::Id(-1)], "prompt").is_err());
        assert!(tokenize(&tok, &[Piece::Text("a\0".into())], "prompt").is_err());
    }
}
