//! `POST /v1/rerank` (also `/rerank`, as llama-server): documents ranked by relevance to a
//! query, in the Jina / Cohere shape.
//!
//! Scoring is a reranker-style prompt on the served model (the prompt Qwen3-Reranker is
//! trained on): a system message asking whether the document meets the query's needs,
//! answered only "yes" or "no", then the query and the document as the user's turn, rendered
//! with the model's chat template. Each document is one prefill-only engine request whose
//! prompt ends with the "yes" token; its prompt logprobs (with the top 20 alternatives) give
//! log P(yes) and log P(no) at the answer position, and the score is
//! P(yes) / (P(yes) + P(no)). When "no" is not among the 20 alternatives its probability is
//! taken as the 20th's (an upper bound, so the score errs low). A dedicated reranker GGUF
//! (Qwen3-Reranker, qwen3 architecture) is scored as it was trained; a general chat model
//! answers the same question less sharply.

use crate::random::random_id;
use crate::scheduler::{PromptOutput, TokenLogprob};
use crate::server::app_state::{AppState, Runtime};
use crate::server::body::JsonBody;
use crate::server::error::ApiError;
use crate::server::offload::blocking;
use crate::server::openapi::errors::GenerationErrors;
use crate::server::prompt::render_chat;
use crate::server::session::Session;
use crate::server::types::rerank::*;
use crate::server::types::{ChatMessage, Role};
use crate::structured::reasoning::ThinkStart;
use axum::extract::State;
use axum::Json;
use std::sync::Arc;

/// Most documents per request.
pub const MAX_DOCUMENTS: usize = 64;

const JUDGE: &str = "Judge whether the Document meets the requirements based on the Query and \
                     the Instruct provided. Note that the answer can only be \"yes\" or \"no\".";
const DEFAULT_INSTRUCTION: &str =
    "Given a web search query, retrieve relevant passages that answer the query";
/// Alternatives read at the answer position.
const TOP: usize = 20;

/// The first token of `word` (without a leading space: the answer starts the reply).
fn answer_token(rt: &Runtime, word: &str) -> Result<u32, ApiError> {
    rt.tokenizer
        .encode(word, false, false)
        .first()
        .copied()
        .ok_or_else(|| ApiError::Unavailable(format!("the vocabulary cannot spell {word:?}")))
}

/// One document's prompt, ending with the "yes" token.
fn prompt(
    rt: &Runtime,
    instruction: &str,
    query: &str,
    doc: &str,
    yes: u32,
) -> Result<Vec<u32>, ApiError> {
    let messages = [
        ChatMessage::text(Role::System, JUDGE.to_string()),
        ChatMessage::text(
            Role::User,
            format!("<Instruct>: {instruction}\n<Query>: {query}\n<Document>: {doc}"),
        ),
    ];
    let rendered = render_chat(rt, &messages, true, None, None).map_err(|e| match e {
        ApiError::BadRequest { message, code, .. } => ApiError::BadRequest {
            message,
            param: Some("documents".to_string()),
            code,
        },
        other => other,
    })?;
    let mut ids = rendered.ids;
    // A reasoning template: the answer comes after an empty thought, as Qwen3-Reranker reads.
    if rendered.think == Some(ThinkStart::Detect) {
        ids.extend(rt.tokenizer.encode("<think>\n\n</think>\n\n", false, true));
    }
    ids.push(yes);
    Ok(ids)
}

/// P(yes) / (P(yes) + P(no)) from the answer position's logprob entry.
fn score(entry: Option<&TokenLogprob>, no: u32) -> f64 {
    let Some(e) = entry else {
        return 0.0;
    };
    let yes = f64::from(e.logprob);
    let no = e
        .top
        .iter()
        .find(|(id, _)| *id == no)
        .or(e.top.last())
        .map(|&(_, lp)| f64::from(lp))
        .unwrap_or(f64::NEG_INFINITY);
    let s = 1.0 / (1.0 + (no - yes).exp());
    if s.is_finite() {
        s
    } else {
        0.0
    }
}

/// Ranks documents by relevance to a query.
#[utoipa::path(
    post,
    path = "/v1/rerank",
    tag = "kiln",
    request_body(content = RerankRequest, content_type = "application/json"),
    responses(
        (status = 200, description = "The documents' scores, most relevant first", body = RerankResponse),
        GenerationErrors,
    ),
    security(("bearer" = []))
)]
pub async fn rerank(
    State(state): State<AppState>,
    JsonBody(req): JsonBody<RerankRequest>,
) -> Result<Json<RerankResponse>, ApiError> {
    let session = Session::open(&state, req.model.as_deref()).await?;
    let n = req.documents.len();
    if n == 0 || n > MAX_DOCUMENTS {
        return Err(ApiError::bad(
            "documents",
            format!("documents must hold 1 to {MAX_DOCUMENTS} items, got {n}"),
        ));
    }
    let top_n = match req.top_n {
        None => n,
        Some(k) if k >= 1 => (k as u64).min(n as u64) as usize,
        Some(k) => {
            return Err(ApiError::bad(
                "top_n",
                format!("top_n must be at least 1, got {k}"),
            ))
        }
    };
    let rt = Arc::clone(&session.rt);
    let texts: Vec<String> = req.documents.iter().map(|d| d.text().to_string()).collect();
    let query = req.query.clone();
    let instruction = req
        .instruction
        .clone()
        .filter(|i| !i.is_empty())
        .unwrap_or_else(|| DEFAULT_INSTRUCTION.to_string());
    let (prompts, no) = blocking(move || {
        let (yes, no) = (answer_token(&rt, "yes")?, answer_token(&rt, "no")?);
        let prompts = texts
            .iter()
            .map(|d| prompt(&rt, &instruction, &query, d, yes))
            .collect::<Result<Vec<_>, _>>()?;
        Ok((prompts, no))
    })
    .await?;
    let out = session
        .score(prompts, "documents", PromptOutput::Logprobs { top: TOP })
        .await?;
    let mut results: Vec<RerankResult> = out
        .prompt_logprobs
        .iter()
        .enumerate()
        .map(|(index, lps)| RerankResult {
            index,
            relevance_score: score(lps.last(), no),
            document: req.return_documents.unwrap_or(false).then(|| RerankText {
                text: req.documents[index].text().to_string(),
            }),
        })
        .collect();
    results.sort_by(|a, b| {
        b.relevance_score
            .total_cmp(&a.relevance_score)
            .then(a.index.cmp(&b.index))
    });
    results.truncate(top_n);
    let prompt_tokens = out.usage.prompt_tokens;
    Ok(Json(RerankResponse {
        id: random_id("rerank-"),
        object: "list".to_string(),
        model: out.session.model.clone(),
        results,
        usage: RerankUsage {
            prompt_tokens,
            total_tokens: prompt_tokens,
        },
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn score_is_yes_over_yes_and_no() {
        let e = TokenLogprob {
            id: 1,
            logprob: (0.6f32).ln(),
            top: vec![(1, (0.6f32).ln()), (2, (0.2f32).ln()), (3, (0.1f32).ln())],
        };
        assert!((score(Some(&e), 2) - 0.75).abs() < 1e-6);
        // "no" not among the alternatives: the last one's probability bounds it.
        assert!((score(Some(&e), 9) - 0.6 / 0.7).abs() < 1e-6);
        assert_eq!(score(None, 2), 0.0);
        let sure = TokenLogprob {
            id: 1,
            logprob: 0.0,
            top: Vec::new(),
        };
        assert_eq!(score(Some(&sure), 2), 1.0);
    }
}
