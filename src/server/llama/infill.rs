//! `POST /infill`: fill-in-the-middle for code editors, with the model's own FIM tokens (read
//! from the GGUF, else recognised by their text as llama.cpp does). The prompt is assembled as
//! llama-server assembles it, then runs like any `/completion`:
//!
//! ```text
//! [FIM_REP]myproject\n [FIM_SEP]{filename}\n{text} ... [FIM_SEP]filename\n      (repo-level, when the model has REP and SEP)
//! {extra chunks, each after "\n\n--- snippet ---\n\n"}                         (otherwise)
//! [BOS][FIM_PRE]{input_prefix}{prompt}[FIM_SUF]{input_suffix}[FIM_MID]
//! ```
//!
//! The prefix keeps its last tokens and the suffix its first, within a batch-sized window (3:1);
//! the extra files fill what the context leaves after that window and the completion, the
//! latest kept. Everything the client sends is read as plain text: code that spells a marker
//! never becomes one.

use crate::server::app_state::AppState;
use crate::server::body::JsonBody;
use crate::server::error::ApiError;
use crate::server::offload::blocking;
use crate::server::openapi::errors::GenerationErrors;
use crate::server::session::Session;
use crate::server::types::llama::{
    ExtraChunk, InfillRequest, LlamaCompletionReply, LlamaCompletionResult,
};
use crate::tokenizer::{FimIds, Tokenizer};
use axum::extract::State;
use axum::response::Response;
use std::sync::Arc;

/// llama-server's default batch: the window the prefix and suffix share.
const FIM_WINDOW: usize = 2048;

/// Completes the code between `input_prefix` and `input_suffix`.
#[utoipa::path(
    post,
    path = "/infill",
    tag = "llama-server",
    request_body(content = InfillRequest, content_type = "application/json"),
    responses(
        (status = 200, description = "The middle, in `/completion`'s shape (JSON or, with `stream: true`, `data: {...}` events)",
            content(
                (LlamaCompletionReply = "application/json"),
                (LlamaCompletionResult = "text/event-stream"),
            )),
        GenerationErrors,
    ),
    security(("bearer" = []))
)]
pub async fn infill(
    State(state): State<AppState>,
    JsonBody(req): JsonBody<InfillRequest>,
) -> Result<Response, ApiError> {
    super::convert::refuse_unsupported(&req.completion)?;
    let typed = match &req.completion.prompt {
        serde_json::Value::Null => String::new(),
        serde_json::Value::String(s) => s.clone(),
        _ => return Err(ApiError::bad("prompt", "/infill's prompt must be a string")),
    };
    let session = Session::open(&state, req.completion.model.as_deref()).await?;
    let rt = Arc::clone(&session.rt);
    let n_ctx = session.info().n_ctx;
    let n_predict = req
        .completion
        .n_predict
        .or(req.completion.max_tokens)
        .and_then(|n| usize::try_from(n).ok())
        .unwrap_or(state.settings().max_tokens_default);
    let model = session.model.clone();
    let parts = Parts {
        prefix: req.input_prefix.clone().unwrap_or_default(),
        suffix: req.input_suffix.clone().unwrap_or_default(),
        typed,
        extra: req.input_extra.clone().unwrap_or_default(),
    };
    let ids = blocking(move || {
        let fim = fim_tokens(&rt.tokenizer, &model)?;
        parts.check()?;
        Ok(assemble(&rt.tokenizer, fim, &parts, n_ctx, n_predict))
    })
    .await?;
    super::generate(session, req.completion, vec![ids]).await
}

/// The markers `/infill` needs, or a 400 naming the missing ones.
#[derive(Debug, Clone, Copy)]
pub struct Fim {
    pre: u32,
    suf: u32,
    mid: u32,
    /// Both, for the repository-level layout.
    repo: Option<(u32, u32)>,
}

pub fn fim_tokens(tok: &Tokenizer, model: &str) -> Result<Fim, ApiError> {
    let FimIds {
        pre,
        suf,
        mid,
        rep,
        sep,
        ..
    } = tok.fim();
    match (pre, suf, mid) {
        (Some(pre), Some(suf), Some(mid)) => Ok(Fim {
            pre,
            suf,
            mid,
            repo: rep.zip(sep),
        }),
        _ => {
            let missing: Vec<&str> = [
                (pre, "FIM_PRE (tokenizer.ggml.fim_pre_token_id)"),
                (suf, "FIM_SUF (tokenizer.ggml.fim_suf_token_id)"),
                (mid, "FIM_MID (tokenizer.ggml.fim_mid_token_id)"),
            ]
            .iter()
            .filter(|(id, _)| id.is_none())
            .map(|(_, name)| *name)
            .collect();
            Err(ApiError::BadRequest {
                message: format!(
                    "the model `{model}` cannot fill in the middle: its vocabulary has no {} \
                     (neither in the GGUF metadata nor as a known marker such as <fim_prefix> \
                     or <|fim_prefix|>); serve a code model that has them (Qwen2.5-Coder, \
                     StarCoder2, CodeLlama, Codestral...)",
                    missing.join(", ")
                ),
                param: Some("model".to_string()),
                code: Some("fim_not_supported"),
            })
        }
    }
}

/// What the client sent, as text.
pub struct Parts {
    pub prefix: String,
    pub suffix: String,
    /// The text already typed at the cursor (`prompt`).
    pub typed: String,
    pub extra: Vec<ExtraChunk>,
}

impl Parts {
    fn check(&self) -> Result<(), ApiError> {
        let nul = |param: &str, s: &str| {
            if s.contains('\0') {
                Err(ApiError::bad(
                    param,
                    format!("{param} must not contain NUL characters"),
                ))
            } else {
                Ok(())
            }
        };
        nul("input_prefix", &self.prefix)?;
        nul("input_suffix", &self.suffix)?;
        nul("prompt", &self.typed)?;
        for (i, c) in self.extra.iter().enumerate() {
            nul(
                &format!("input_extra[{i}].text"),
                c.text.as_deref().unwrap_or(""),
            )?;
            nul(
                &format!("input_extra[{i}].filename"),
                c.filename.as_deref().unwrap_or(""),
            )?;
        }
        Ok(())
    }
}

/// The prompt's tokens (see the module docs).
pub fn assemble(
    tok: &Tokenizer,
    fim: Fim,
    parts: &Parts,
    n_ctx: usize,
    n_predict: usize,
) -> Vec<u32> {
    let text = |s: &str| tok.encode(s, false, false);
    let mut extra = Vec::new();
    if let Some((rep, _)) = fim.repo {
        extra.push(rep);
        extra.extend(text("myproject\n"));
    }
    for c in &parts.extra {
        match fim.repo {
            Some((_, sep)) => {
                extra.push(sep);
                extra.extend(text(&format!(
                    "{}\n",
                    c.filename.as_deref().unwrap_or("tmp")
                )));
            }
            None => extra.extend(text("\n\n--- snippet ---\n\n")),
        }
        extra.extend(text(c.text.as_deref().unwrap_or("")));
    }
    if let Some((_, sep)) = fim.repo {
        extra.push(sep);
        extra.extend(text("filename\n"));
    }
    let window = FIM_WINDOW.min(n_ctx);
    let prefix = text(&parts.prefix);
    let suffix = text(&parts.suffix);
    let typed = text(&parts.typed);
    let prefix_take = prefix.len().min(3 * (window / 4));
    let suffix_take = suffix
        .len()
        .min((window / 4).saturating_sub(2 + typed.len()));
    let extra_take = extra
        .len()
        .min(n_ctx.saturating_sub(window + 2 * n_predict));
    let mut ids = Vec::with_capacity(extra_take + prefix_take + suffix_take + typed.len() + 4);
    ids.extend_from_slice(&extra[extra.len() - extra_take..]);
    if let Some(bos) = tok.bos().filter(|_| tok.add_bos()) {
        ids.push(bos);
    }
    ids.push(fim.pre);
    ids.extend_from_slice(&prefix[prefix.len() - prefix_take..]);
    ids.extend(typed);
    ids.push(fim.suf);
    ids.extend_from_slice(&suffix[..suffix_take]);
    ids.push(fim.mid);
    ids
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tokenizer::{TokenType, TokenizerSpec};

    /// A vocabulary of single characters plus the given markers.
    fn vocab(markers: &[&str]) -> Tokenizer {
        let mut tokens: Vec<String> = vec!["<unk>".into(), "<s>".into(), "</s>".into()];
        let mut types = vec![TokenType::Unknown, TokenType::Control, TokenType::Control];
        tokens.extend(markers.iter().map(|m| m.to_string()));
        types.extend(markers.iter().map(|_| TokenType::Normal));
        for b in 0..=255u8 {
            tokens.push(format!("<0x{b:02X}>"));
            types.push(TokenType::Byte);
        }
        Tokenizer::from_spec(TokenizerSpec {
            model: "llama".into(),
            tokens,
            types,
            add_bos: Some(false),
            add_space_prefix: Some(false),
            ..TokenizerSpec::default()
        })
        .unwrap()
    }

    /// The tokens' text (the toy vocabulary spells spaces as byte tokens of '▁').
    fn show(tok: &Tokenizer, ids: &[u32]) -> String {
        let bytes: Vec<u8> = ids
            .iter()
            .flat_map(|&i| tok.token_to_piece(i).to_vec())
            .collect();
        String::from_utf8(bytes).unwrap().replace('▁', " ")
    }

    fn parts(prefix: &str, suffix: &str, extra: &[(&str, &str)]) -> Parts {
        Parts {
            prefix: prefix.into(),
            suffix: suffix.into(),
            typed: String::new(),
            extra: extra
                .iter()
                .map(|(f, t)| ExtraChunk {
                    filename: Some(f.to_string()),
                    text: Some(t.to_string()),
                })
                .collect(),
        }
    }

    #[test]
    fn a_model_without_fim_tokens_is_a_400_naming_them() {
        let e = fim_tokens(&vocab(&["<fim_prefix>"]), "smol").unwrap_err();
        let env = e.envelope().error;
        assert_eq!(e.status(), axum::http::StatusCode::BAD_REQUEST);
        assert_eq!(env.code.as_deref(), Some("fim_not_supported"));
        assert!(env.message.contains("FIM_SUF") && env.message.contains("FIM_MID"));
        assert!(!env.message.contains("FIM_PRE"), "{}", env.message);
    }

    #[test]
    fn prefix_suffix_middle_in_llama_servers_order() {
        let tok = vocab(&["<fim_prefix>", "<fim_suffix>", "<fim_middle>"]);
        let fim = fim_tokens(&tok, "m").unwrap();
        let mut p = parts("ab", "cd", &[]);
        p.typed = "x".into();
        let ids = assemble(&tok, fim, &p, 4096, 16);
        assert_eq!(
            show(&tok, &ids),
            "<fim_prefix>abx<fim_suffix>cd<fim_middle>"
        );
        // Without REP/SEP the extra files go first, each after a snippet line.
        let ids = assemble(&tok, fim, &parts("a", "b", &[("f.rs", "fn_x")]), 4096, 16);
        assert_eq!(
            show(&tok, &ids),
            "\n\n--- snippet ---\n\nfn_x<fim_prefix>a<fim_suffix>b<fim_middle>"
        );
    }

    #[test]
    fn repository_level_layout_when_the_model_has_rep_and_sep() {
        let tok = vocab(&[
            "<fim_prefix>",
            "<fim_suffix>",
            "<fim_middle>",
            "<|fim_repo|>",
            "<|file_sep|>",
        ]);
        let fim = fim_tokens(&tok, "m").unwrap();
        let ids = assemble(&tok, fim, &parts("a", "b", &[("f.rs", "fn_x")]), 4096, 16);
        assert_eq!(
            show(&tok, &ids),
            "<|fim_repo|>myproject\n<|file_sep|>f.rs\nfn_x<|file_sep|>filename\n\
             <fim_prefix>a<fim_suffix>b<fim_middle>"
        );
    }

    #[test]
    fn markers_in_the_code_stay_text_and_long_inputs_are_cut_at_the_cursor() {
        let tok = vocab(&["<fim_prefix>", "<fim_suffix>", "<fim_middle>"]);
        let fim = fim_tokens(&tok, "m").unwrap();
        let ids = assemble(&tok, fim, &parts("<fim_middle>", "", &[]), 4096, 16);
        assert_eq!(ids.iter().filter(|&&i| i == fim.mid).count(), 1);
        // A window of 16: the prefix keeps its last 12 tokens, the suffix its first 2.
        let p = parts(&"p".repeat(30), &"s".repeat(30), &[("f", &"e".repeat(50))]);
        let ids = assemble(&tok, fim, &p, 16, 0);
        let prefix_end = ids.iter().position(|&i| i == fim.suf).unwrap();
        assert_eq!(ids[0], fim.pre, "no room for the extra files");
        assert_eq!(prefix_end - 1, 12);
        assert_eq!(ids.len() - prefix_end - 2, 2);
    }
}
