//! The one place errors become HTTP responses: every failure a client can see is an
//! [`ApiError`], rendered as OpenAI's envelope `{"error": {"message", "type", "param", "code"}}`
//! with the status code that goes with it, or on Anthropic's routes (`/v1/messages`) as
//! Anthropic's `{"type": "error", "error": {"type", "message"}}` ([`reshape`]). Bad input is always a 4xx; a 500 comes only from an
//! engine fault.

use crate::scheduler::state::AdmitError;
use crate::scheduler::SubmitError;
use crate::server::types::messages::{AnthropicErrorBody, AnthropicErrorResponse};
use crate::server::types::{ErrorBody, ErrorResponse};
use axum::extract::Request;
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use std::time::Duration;

/// Why a request failed, as the client sees it.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ApiError {
    /// 400: the request is malformed or asks for something out of range. `param` names the
    /// field at fault; `code` is e.g. `context_length_exceeded`.
    #[error("{message}")]
    BadRequest {
        message: String,
        param: Option<String>,
        code: Option<&'static str>,
    },
    /// 401: no API key, or not one of the configured keys.
    #[error(
        "invalid or missing API key: send `Authorization: Bearer <key>` or `x-api-key: <key>`"
    )]
    Unauthorized,
    /// 404: the request names a model this server does not serve; `available` lists the
    /// ids it does.
    #[error("the model `{model}` does not exist; this server serves: {}", available.join(", "))]
    ModelNotFound {
        model: String,
        available: Vec<String>,
    },
    /// 503: the model is being loaded (or waits for memory to be freed for it) and did not
    /// get ready within `server.models_load_timeout`; retry after the delay.
    #[error("the model `{model}` is loading; retry shortly")]
    ModelLoading {
        model: String,
        retry_after: Duration,
    },
    /// 503: the model cannot be loaded (its file failed to load, or it is larger than the
    /// memory budget); the other models keep serving.
    #[error("the model `{model}` is unavailable: {reason}")]
    ModelUnavailable { model: String, reason: String },
    /// 409: the model cannot be unloaded while requests run on it.
    #[error("the model `{model}` has requests in flight; unload it when they are done")]
    ModelBusy { model: String },
    /// 404: something the request names is not here (a stored response); `code` says what.
    #[error("{message}")]
    NotFound {
        message: String,
        param: Option<String>,
        code: &'static str,
    },
    /// 404: no such route.
    #[error("unknown route: {method} {path}")]
    RouteNotFound { method: String, path: String },
    /// 405: the route exists, not with this method.
    #[error("method {method} is not allowed on {path}")]
    MethodNotAllowed { method: String, path: String },
    /// 413: the body is longer than `server.max_body_bytes`.
    #[error("the request body is larger than the limit of {limit} bytes")]
    PayloadTooLarge { limit: usize },
    /// 415: the body is not declared as JSON.
    #[error("the request body must be JSON (Content-Type: application/json), got {got}")]
    UnsupportedMediaType { got: String },
    /// 429: the waiting queue is full; retry after the delay (sent as `Retry-After`).
    #[error("{message}")]
    Overloaded {
        message: String,
        retry_after: Duration,
    },
    /// 503: the model is loading, the server is draining, or the engine has failed.
    #[error("{0}")]
    Unavailable(String),
    /// 408: the request ran longer than `server.request_timeout` and was aborted.
    #[error("the request took longer than the server's limit of {0:?} and was aborted")]
    Timeout(Duration),
    /// 500: the engine failed while running the request (never caused by input alone).
    #[error("{0}")]
    Internal(String),
    /// 501: a route kiln knows but does not provide; the message says why and what instead.
    #[error("{0}")]
    NotImplemented(String),
}

impl ApiError {
    /// A 400 naming `param`.
    pub fn bad(param: impl Into<String>, message: impl Into<String>) -> ApiError {
        ApiError::BadRequest {
            message: message.into(),
            param: Some(param.into()),
            code: None,
        }
    }

    /// A 400 `context_length_exceeded` naming `param`.
    pub fn context_length(param: &str, message: impl Into<String>) -> ApiError {
        ApiError::BadRequest {
            message: message.into(),
            param: Some(param.to_string()),
            code: Some("context_length_exceeded"),
        }
    }

    /// A 400 `context_length_exceeded` in OpenAI's words (LiteLLM and LangChain recognize
    /// the error by this text, not only by `code`): the prompt alone (`completion` None) or
    /// the prompt plus `completion` tokens are over the `n_ctx` tokens of the context.
    /// `prompt_param` (`messages`, `prompt`, `input`) names the prompt in the message.
    pub fn context_overflow(
        prompt_param: &str,
        n_ctx: usize,
        prompt: usize,
        completion: Option<usize>,
    ) -> ApiError {
        let message = match completion {
            None => format!(
                "This model's maximum context length is {n_ctx} tokens. However, your \
                 {prompt_param} resulted in {prompt} tokens. Please reduce the length of the \
                 {prompt_param}."
            ),
            Some(c) => format!(
                "This model's maximum context length is {n_ctx} tokens. However, you requested \
                 {} tokens ({prompt} in the {prompt_param}, {c} in the completion). Please \
                 reduce the length of the {prompt_param} or completion.",
                prompt.saturating_add(c)
            ),
        };
        ApiError::context_length(prompt_param, message)
    }

    /// Maps an engine refusal. `prompt_param` names the prompt field of the endpoint
    /// (`messages` or `prompt`), `max_tokens_param` the field the limit came from.
    pub fn from_submit(e: SubmitError, prompt_param: &str, max_tokens_param: &str) -> ApiError {
        let message = e.to_string();
        match e {
            SubmitError::ContextLength(AdmitError::ContextLength {
                prompt,
                max_tokens,
                n_ctx,
            }) => ApiError::context_overflow(prompt_param, n_ctx, prompt, Some(max_tokens)),
            SubmitError::ContextLength(_) | SubmitError::KvCapacity(_) => {
                ApiError::context_length(prompt_param, message)
            }
            SubmitError::EmptyPrompt | SubmitError::BadToken { .. } => {
                ApiError::bad(prompt_param, message)
            }
            SubmitError::ZeroMaxTokens => ApiError::bad(max_tokens_param, message),
            SubmitError::Overloaded { retry_after, .. } => ApiError::Overloaded {
                message,
                retry_after,
            },
            SubmitError::Unavailable(_) => ApiError::Unavailable(message),
            other => ApiError::BadRequest {
                param: other.param().map(str::to_string),
                message,
                code: None,
            },
        }
    }

    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::BadRequest { .. } => StatusCode::BAD_REQUEST,
            ApiError::Unauthorized => StatusCode::UNAUTHORIZED,
            ApiError::ModelNotFound { .. }
            | ApiError::RouteNotFound { .. }
            | ApiError::NotFound { .. } => StatusCode::NOT_FOUND,
            ApiError::MethodNotAllowed { .. } => StatusCode::METHOD_NOT_ALLOWED,
            ApiError::ModelLoading { .. } | ApiError::ModelUnavailable { .. } => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            ApiError::ModelBusy { .. } => StatusCode::CONFLICT,
            ApiError::PayloadTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::UnsupportedMediaType { .. } => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ApiError::Overloaded { .. } => StatusCode::TOO_MANY_REQUESTS,
            ApiError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::Timeout(_) => StatusCode::REQUEST_TIMEOUT,
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
            ApiError::NotImplemented(_) => StatusCode::NOT_IMPLEMENTED,
        }
    }

    /// OpenAI's error `type`.
    fn kind(&self) -> &'static str {
        match self {
            ApiError::Unauthorized => "authentication_error",
            ApiError::Overloaded { .. } => "rate_limit_error",
            ApiError::Timeout(_) => "timeout_error",
            ApiError::Unavailable(_)
            | ApiError::Internal(_)
            | ApiError::ModelLoading { .. }
            | ApiError::ModelUnavailable { .. } => "server_error",
            _ => "invalid_request_error",
        }
    }

    fn code(&self) -> Option<&'static str> {
        match self {
            ApiError::BadRequest { code, .. } => *code,
            ApiError::Unauthorized => Some("invalid_api_key"),
            ApiError::ModelNotFound { .. } => Some("model_not_found"),
            ApiError::ModelLoading { .. } => Some("model_loading"),
            ApiError::ModelUnavailable { .. } => Some("model_unavailable"),
            ApiError::ModelBusy { .. } => Some("model_busy"),
            ApiError::NotFound { code, .. } => Some(*code),
            ApiError::RouteNotFound { .. } => Some("unknown_route"),
            ApiError::MethodNotAllowed { .. } => Some("method_not_allowed"),
            ApiError::PayloadTooLarge { .. } => Some("request_too_large"),
            ApiError::UnsupportedMediaType { .. } => Some("unsupported_media_type"),
            ApiError::Overloaded { .. } => Some("rate_limit_exceeded"),
            ApiError::Unavailable(_) => Some("service_unavailable"),
            ApiError::Timeout(_) => Some("request_timeout"),
            ApiError::Internal(_) => Some("internal_error"),
            ApiError::NotImplemented(_) => Some("not_implemented"),
        }
    }

    fn param(&self) -> Option<String> {
        match self {
            ApiError::BadRequest { param, .. } => param.clone(),
            ApiError::ModelNotFound { .. }
            | ApiError::ModelLoading { .. }
            | ApiError::ModelUnavailable { .. }
            | ApiError::ModelBusy { .. } => Some("model".to_string()),
            ApiError::NotFound { param, .. } => param.clone(),
            _ => None,
        }
    }

    /// The envelope, as sent in a response body or an SSE `error` event.
    pub fn envelope(&self) -> ErrorResponse {
        ErrorResponse {
            error: ErrorBody {
                message: self.to_string(),
                kind: self.kind().to_string(),
                param: self.param(),
                code: self.code().map(str::to_string),
            },
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status();
        // Debug formatting escapes CR/LF: messages can quote client input (log injection).
        let message = self.to_string();
        if status.is_server_error() {
            tracing::warn!(status = status.as_u16(), error = ?message, "request failed");
        } else {
            tracing::debug!(status = status.as_u16(), error = ?message, "request refused");
        }
        let mut resp = (status, axum::Json(self.envelope())).into_response();
        if let ApiError::Overloaded { retry_after, .. }
        | ApiError::ModelLoading { retry_after, .. } = &self
        {
            let secs = retry_after.as_secs_f64().ceil().max(1.0) as u64;
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        // For routes whose API has another error shape (see `reshape`).
        resp.extensions_mut().insert(self);
        resp
    }
}

/// The routes whose errors use Anthropic's envelope.
pub fn is_anthropic_route(path: &str) -> bool {
    path == "/v1/messages" || path.starts_with("/v1/messages/")
}

impl ApiError {
    /// Anthropic's error `type` (the status code stays the same).
    fn anthropic_kind(&self) -> &'static str {
        match self {
            ApiError::Unauthorized => "authentication_error",
            ApiError::ModelNotFound { .. }
            | ApiError::RouteNotFound { .. }
            | ApiError::NotFound { .. } => "not_found_error",
            ApiError::PayloadTooLarge { .. } => "request_too_large",
            ApiError::Overloaded { .. } => "rate_limit_error",
            ApiError::Timeout(_) => "timeout_error",
            ApiError::Unavailable(_) | ApiError::ModelLoading { .. } => "overloaded_error",
            ApiError::Internal(_) | ApiError::ModelUnavailable { .. } => "api_error",
            _ => "invalid_request_error",
        }
    }

    /// Anthropic's status code: its own where it documents one (529 overloaded, 504 timeout),
    /// else the OpenAI routes' code.
    pub fn anthropic_status(&self) -> StatusCode {
        match self.anthropic_kind() {
            "overloaded_error" => StatusCode::from_u16(529).unwrap_or(self.status()),
            "timeout_error" => StatusCode::GATEWAY_TIMEOUT,
            _ => self.status(),
        }
    }

    /// Anthropic's envelope: `{"type": "error", "error": {"type", "message"}}`.
    pub fn anthropic_envelope(&self) -> AnthropicErrorResponse {
        AnthropicErrorResponse {
            kind: "error".to_string(),
            error: AnthropicErrorBody {
                kind: self.anthropic_kind().to_string(),
                message: self.to_string(),
            },
        }
    }
}

/// The middleware that gives each route its API's error shape: a response made from an
/// [`ApiError`] (by a handler, a body extractor, the key check or a fallback) on an Anthropic
/// route is rendered again in Anthropic's envelope and status code
/// ([`ApiError::anthropic_status`]), keeping its headers.
pub async fn reshape(req: Request, next: Next) -> Response {
    let anthropic = is_anthropic_route(req.uri().path());
    let resp = next.run(req).await;
    if !anthropic {
        return resp;
    }
    let Some(e) = resp.extensions().get::<ApiError>().cloned() else {
        return resp;
    };
    let (mut parts, _) = resp.into_parts();
    parts.status = e.anthropic_status();
    let body = serde_json::to_vec(&e.anthropic_envelope()).unwrap_or_default();
    parts.headers.remove(header::CONTENT_LENGTH);
    parts.headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    Response::from_parts(parts, axum::body::Body::from(body))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Through the real middleware: the same error is OpenAI's status on an OpenAI route and
    /// Anthropic's (529, 504) on `/v1/messages`.
    #[tokio::test]
    async fn anthropic_routes_get_anthropic_status_codes() {
        use axum::routing::post;
        use tower::ServiceExt;
        let failing = |e: ApiError| move || async move { e.into_response() };
        for (e, openai, anthropic) in [
            (ApiError::Unavailable("draining".into()), 503, 529),
            (
                ApiError::Timeout(std::time::Duration::from_secs(1)),
                408,
                504,
            ),
            (ApiError::Unauthorized, 401, 401),
        ] {
            let app = axum::Router::new()
                .route("/v1/messages", post(failing(e.clone())))
                .route("/v1/chat/completions", post(failing(e)))
                .layer(axum::middleware::from_fn(reshape));
            for (path, want) in [
                ("/v1/chat/completions", openai),
                ("/v1/messages", anthropic),
            ] {
                let req = axum::http::Request::post(path)
                    .body(axum::body::Body::empty())
                    .unwrap();
                let resp = app.clone().oneshot(req).await.unwrap();
                assert_eq!(resp.status().as_u16(), want, "{path}");
                let body = axum::body::to_bytes(resp.into_body(), 1 << 16)
                    .await
                    .unwrap();
                let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
                let is_anthropic = v.get("type").is_some_and(|t| t == "error");
                assert_eq!(is_anthropic, path == "/v1/messages", "{v}");
            }
        }
    }

    #[test]
    fn submit_errors_map_to_statuses_and_params() {
        let ctx = SubmitError::ContextLength(AdmitError::ContextLength {
            prompt: 9000,
            max_tokens: 10,
            n_ctx: 8192,
        });
        let e = ApiError::from_submit(ctx, "prompt", "max_tokens");
        assert_eq!(e.status(), StatusCode::BAD_REQUEST);
        let env = e.envelope().error;
        assert_eq!(env.code.as_deref(), Some("context_length_exceeded"));
        assert_eq!(env.param.as_deref(), Some("prompt"));
        // OpenAI's words, which LiteLLM and LangChain match on.
        assert_eq!(
            env.message,
            "This model's maximum context length is 8192 tokens. However, you requested 9010 \
             tokens (9000 in the prompt, 10 in the completion). Please reduce the length of the \
             prompt or completion."
        );
        let env = ApiError::context_overflow("messages", 8192, 9000, None)
            .envelope()
            .error;
        assert_eq!(
            env.message,
            "This model's maximum context length is 8192 tokens. However, your messages \
             resulted in 9000 tokens. Please reduce the length of the messages."
        );
        let e = ApiError::from_submit(
            SubmitError::Overloaded {
                waiting: 3,
                retry_after: Duration::from_millis(1500),
            },
            "messages",
            "max_tokens",
        );
        let resp = e.into_response();
        assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(resp.headers()[header::RETRY_AFTER], "2");
        let e = ApiError::from_submit(SubmitError::BadN { got: 99, max: 16 }, "messages", "");
        assert_eq!(e.envelope().error.param.as_deref(), Some("n"));
        let e = ApiError::from_submit(SubmitError::Unavailable("x"), "messages", "");
        assert_eq!(e.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(
            ApiError::Unauthorized.envelope().error.kind,
            "authentication_error"
        );
    }
}
