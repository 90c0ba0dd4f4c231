//! `GET /props` (the model, its context, chat template and default settings), `GET /slots`
//! (501: kiln has no slots) and `POST /apply-template` (a conversation rendered with the
//! model's chat template, not run), as llama-server answers them.

use super::convert::{DEFAULT_MIN_P, DEFAULT_TEMPERATURE, DEFAULT_TOP_K, DEFAULT_TOP_P, SAMPLERS};
use crate::server::app_state::AppState;
use crate::server::body::JsonBody;
use crate::server::error::ApiError;
use crate::server::offload::blocking;
use crate::server::prompt;
use crate::server::query;
use crate::server::types::llama::{
    ApplyTemplateRequest, ApplyTemplateResponse, DefaultSettings, GenerationSettings, Modalities,
    PropsResponse,
};
use crate::server::types::ErrorResponse;
use axum::extract::State;
use axum::http::Uri;
use axum::Json;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::sync::Arc;

/// `?model=`: which model (llama-server's router mode); none: the default one.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ModelQuery {
    /// A model id or alias (routed like a request's `model`).
    pub model: Option<String>,
}

impl ModelQuery {
    /// The `model` parameter of `uri`'s query (percent-decoded; `+` is a space).
    fn from_uri(uri: &Uri) -> ModelQuery {
        let model = query::pairs(uri.query()).find_map(|(k, v)| (k == "model").then_some(v));
        ModelQuery { model }
    }
}

/// The served model's properties (the model is loaded first if it is not).
#[utoipa::path(
    get,
    path = "/props",
    tag = "llama-server",
    params(ModelQuery),
    responses(
        (status = 200, description = "The model's path, context, chat template and the defaults of /completion", body = PropsResponse),
        (status = 401, description = "Missing or wrong API key", body = ErrorResponse),
        (status = 404, description = "No such model", body = ErrorResponse),
        (status = 503, description = "Loading or draining", body = ErrorResponse),
    ),
    security(("bearer" = []))
)]
pub async fn props(
    State(state): State<AppState>,
    uri: Uri,
) -> Result<Json<PropsResponse>, ApiError> {
    let q = ModelQuery::from_uri(&uri);
    let lease = state.lease(q.model.as_deref()).await?;
    let rt = lease.runtime();
    let info = rt.engine.info();
    let spec = &state.registry().model(lease.index()).spec;
    let params = GenerationSettings {
        n_ctx: info.n_ctx,
        n_predict: -1,
        model: lease.id().to_string(),
        seed: -1,
        temperature: DEFAULT_TEMPERATURE as f32,
        top_k: DEFAULT_TOP_K as usize,
        top_p: DEFAULT_TOP_P as f32,
        min_p: DEFAULT_MIN_P as f32,
        typical_p: 1.0,
        repeat_penalty: 1.0,
        presence_penalty: 0.0,
        frequency_penalty: 0.0,
        mirostat: 0,
        stop: Vec::new(),
        ignore_eos: false,
        stream: false,
        n_probs: 0,
        samplers: SAMPLERS.iter().map(|s| s.to_string()).collect(),
    };
    let fim = rt.tokenizer.fim();
    let caps = BTreeMap::from([
        ("supports_tools".to_string(), rt.chat_refusal.is_none()),
        ("supports_reasoning".to_string(), rt.reasoning),
        (
            "supports_infill".to_string(),
            fim.pre.is_some() && fim.suf.is_some() && fim.mid.is_some(),
        ),
    ]);
    Ok(Json(PropsResponse {
        default_generation_settings: DefaultSettings {
            n_ctx: info.n_ctx,
            params,
        },
        total_slots: info.max_num_seqs,
        model_path: spec.path.display().to_string(),
        model_alias: lease.id().to_string(),
        chat_template: rt.template_text.clone(),
        chat_template_caps: caps,
        bos_token: rt.bos_text.clone(),
        eos_token: rt.eos_text.clone(),
        modalities: Modalities::default(),
        build_info: format!("kiln {}", env!("CARGO_PKG_VERSION")),
        is_sleeping: false,
    }))
}

/// llama-server's per-slot state. kiln has no slots: it batches every running sequence in
/// each engine step, so a 501 says where the same information is.
#[utoipa::path(
    get,
    path = "/slots",
    tag = "llama-server",
    responses(
        (status = 401, description = "Missing or wrong API key", body = ErrorResponse),
        (status = 501, description = "kiln has no slots; /stats and /metrics give the running and waiting sequences and the KV cache use", body = ErrorResponse),
    ),
    security(("bearer" = []))
)]
pub async fn slots() -> ApiError {
    ApiError::NotImplemented(
        "kiln has no slots: it batches every running sequence in each engine step \
         (continuous batching), so there is no per-slot state to show. GET /stats gives the \
         running and waiting sequences and the KV cache use per model; /metrics the same for \
         Prometheus"
            .to_string(),
    )
}

/// Renders `messages` with the model's chat template (with the generation prompt) without
/// running it: the text `/completion` would then take as its prompt.
#[utoipa::path(
    post,
    path = "/apply-template",
    tag = "llama-server",
    request_body(content = ApplyTemplateRequest, content_type = "application/json"),
    responses(
        (status = 200, description = "The rendered prompt", body = ApplyTemplateResponse),
        (status = 400, description = "Invalid messages, or the model has no chat template", body = ErrorResponse),
        (status = 401, description = "Missing or wrong API key", body = ErrorResponse),
        (status = 404, description = "No such model", body = ErrorResponse),
        (status = 413, description = "Body too large", body = ErrorResponse),
        (status = 415, description = "Body is not JSON", body = ErrorResponse),
        (status = 503, description = "Loading or draining", body = ErrorResponse),
    ),
    security(("bearer" = []))
)]
pub async fn apply_template(
    State(state): State<AppState>,
    JsonBody(req): JsonBody<ApplyTemplateRequest>,
) -> Result<Json<ApplyTemplateResponse>, ApiError> {
    let lease = state.lease(req.model.as_deref()).await?;
    let rt = Arc::clone(lease.runtime());
    let rendered = blocking(move || {
        // Earlier calls and results as a chat request hands them to the template.
        let messages = crate::server::history::history(req.messages, rt.tool_format);
        prompt::render_chat(
            &rt,
            &messages,
            true,
            None,
            req.chat_template_kwargs.as_ref(),
        )
    })
    .await?;
    Ok(Json(ApplyTemplateResponse {
        prompt: rendered.text,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_model_query_parameter_is_decoded() {
        let q = |s: &str| ModelQuery::from_uri(&s.parse::<Uri>().unwrap()).model;
        assert_eq!(q("/props"), None);
        assert_eq!(q("/props?model=org%2Fm+1&x=2"), Some("org/m 1".into()));
        assert_eq!(q("/props?a=b&model=x%zz%"), Some("x%zz%".into()));
    }
}
