//! `POST /v1/embeddings`: each input (text or token ids) runs as a prefill-only engine
//! request in the same batches as generation ([`PromptOutput::Embedding`]: the final hidden
//! states of its positions, pooled as the model's [`EngineInfo::pooling`] says and
//! L2-normalized; no KV kept after), answered in OpenAI's shape, floats or base64.
//!
//! [`EngineInfo::pooling`]: crate::scheduler::EngineInfo::pooling

use crate::scheduler::{Pooling, PoolingType, PromptOutput};
use crate::server::app_state::AppState;
use crate::server::body::JsonBody;
use crate::server::error::ApiError;
use crate::server::offload::blocking;
use crate::server::openapi::errors::GenerationErrors;
use crate::server::raw_prompt::{tokenize, MAX_PROMPTS};
use crate::server::session::Session;
use crate::server::types::{
    EmbeddingData, EmbeddingRequest, EmbeddingResponse, EmbeddingUsage, EmbeddingVector,
};
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use std::sync::Arc;

/// How `model`'s embeddings pool, or the 400 for a pooling type that gives no one vector per
/// input (`none`: per position, which llama-server refuses on this route too; `rank`: a
/// reranker, served by `/v1/rerank`).
fn pooling_of(model: &str, t: PoolingType) -> Result<Pooling, ApiError> {
    t.pooling().ok_or_else(|| {
        let what = match t {
            PoolingType::Rank => "rank (a reranker: score documents with /v1/rerank)",
            _ => "none (one vector per position, which this route cannot return)",
        };
        ApiError::bad(
            "model",
            format!(
                "model {model:?} pools embeddings as {what}; to embed with it, set its \
                 `pooling` to \"mean\", \"cls\" or \"last\" in the server's configuration"
            ),
        )
    })
}

/// Creates an embedding for each input.
#[utoipa::path(
    post,
    path = "/v1/embeddings",
    tag = "openai",
    request_body(content = EmbeddingRequest, content_type = "application/json"),
    responses(
        (status = 200, description = "One embedding per input, in input order", body = EmbeddingResponse),
        GenerationErrors,
    ),
    security(("bearer" = []))
)]
pub async fn embeddings(
    State(state): State<AppState>,
    JsonBody(req): JsonBody<EmbeddingRequest>,
) -> Result<Response, ApiError> {
    let session = Session::open(&state, req.model.as_deref()).await?;
    let pooling = pooling_of(&session.model, session.info().pooling)?;
    let base64 = match req.encoding_format.as_deref() {
        None | Some("float") => false,
        Some("base64") => true,
        Some(other) => {
            return Err(ApiError::bad(
                "encoding_format",
                format!("encoding_format must be \"float\" or \"base64\", got {other:?}"),
            ))
        }
    };
    let n_embd = session.info().n_embd;
    if let Some(d) = req.dimensions.filter(|&d| d != n_embd as i64) {
        return Err(ApiError::bad(
            "dimensions",
            format!(
                "this model's embeddings have {n_embd} dimensions and cannot be shortened, got {d}"
            ),
        ));
    }
    let prompts = req.input.into_prompts();
    if prompts.is_empty() || prompts.len() > MAX_PROMPTS {
        return Err(ApiError::bad(
            "input",
            format!(
                "input must hold 1 to {MAX_PROMPTS} items, got {}",
                prompts.len()
            ),
        ));
    }
    let rt = Arc::clone(&session.rt);
    let ids: Vec<Vec<u32>> = blocking(move || tokenize(&rt.tokenizer, prompts, "input"))
        .await?
        .into_iter()
        .map(|t| t.ids)
        .collect();
    let out = session
        .score(ids, "input", PromptOutput::Embedding { pooling })
        .await?;
    let data = out
        .embeddings
        .into_iter()
        .enumerate()
        .map(|(index, e)| {
            if e.len() != n_embd {
                return Err(ApiError::Internal(format!(
                    "input {index}: the engine returned no embedding"
                )));
            }
            let embedding = if base64 {
                EmbeddingVector::Base64(encode_base64(&e))
            } else {
                EmbeddingVector::Float(e)
            };
            Ok(EmbeddingData {
                object: "embedding".to_string(),
                index,
                embedding,
            })
        })
        .collect::<Result<Vec<_>, ApiError>>()?;
    let prompt_tokens = out.usage.prompt_tokens;
    Ok(Json(EmbeddingResponse {
        object: "list".to_string(),
        data,
        model: out.session.model.clone(),
        usage: EmbeddingUsage {
            prompt_tokens,
            total_tokens: prompt_tokens,
        },
    })
    .into_response())
}

/// The vector's little-endian f32 bytes in standard base64 with padding (what OpenAI's
/// clients decode for `encoding_format: "base64"`).
fn encode_base64(v: &[f32]) -> String {
    const ABC: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for c in bytes.chunks(3) {
        let n = (u32::from(c[0]) << 16)
            | (u32::from(*c.get(1).unwrap_or(&0)) << 8)
            | u32::from(*c.get(2).unwrap_or(&0));
        for (k, shift) in [18, 12, 6, 0].into_iter().enumerate() {
            if k <= c.len() {
                out.push(char::from(ABC[(n >> shift) as usize & 63]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pooling_none_and_rank_are_a_400_naming_the_fix() {
        assert_eq!(pooling_of("m", PoolingType::Last).unwrap(), Pooling::Last);
        assert_eq!(pooling_of("m", PoolingType::Mean).unwrap(), Pooling::Mean);
        for t in [PoolingType::None, PoolingType::Rank] {
            match pooling_of("m", t).unwrap_err() {
                ApiError::BadRequest { message, param, .. } => {
                    assert_eq!(param.as_deref(), Some("model"));
                    assert!(message.contains(t.name()) && message.contains("`pooling`"));
                }
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn base64_matches_the_standard_alphabet_and_padding() {
        // 1.0f32 = 00 00 80 3f; two floats = 8 bytes (one padding character).
        assert_eq!(encode_base64(&[1.0]), "AACAPw==");
        assert_eq!(encode_base64(&[1.0, -2.0]), "AACAPwAAAMA=");
        assert_eq!(encode_base64(&[]), "");
    }
}
