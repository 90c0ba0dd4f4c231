//! API keys: with keys configured, every route but `/health`, `/ready` (and `/metrics` and
//! `/stats` when `server.metrics_public`) needs `Authorization: Bearer <key>` or (as
//! Anthropic's clients send it) `x-api-key: <key>`. Keys are compared in
//! constant time over every configured key, and exactly (a key with another case is wrong).

use crate::server::app_state::AppState;
use crate::server::error::ApiError;
use axum::extract::{Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use subtle::ConstantTimeEq;

/// Whether `path` is served without a key.
pub fn is_public(path: &str, metrics_public: bool) -> bool {
    matches!(path, "/health" | "/ready")
        || (metrics_public && matches!(path, "/metrics" | "/stats"))
}

/// Whether `header_value` carries one of `keys`.
pub fn authorized(header_value: Option<&[u8]>, keys: &[String]) -> bool {
    let Some(value) = header_value else {
        return false;
    };
    // The scheme is case-insensitive (RFC 7235); the key is not.
    let Some(token) = value
        .get(..7)
        .filter(|s| s.eq_ignore_ascii_case(b"bearer "))
        .map(|_| value[7..].trim_ascii())
    else {
        return false;
    };
    key_matches(token, keys)
}

/// Whether `token` is one of `keys` (constant time over every key).
fn key_matches(token: &[u8], keys: &[String]) -> bool {
    let mut ok = 0u8;
    for k in keys {
        ok |= token.ct_eq(k.as_bytes()).unwrap_u8();
    }
    ok == 1
}

/// The middleware.
pub async fn require_key(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let keys = state.api_keys();
    if keys.is_empty() || is_public(req.uri().path(), state.settings().metrics_public) {
        return next.run(req).await;
    }
    let value = req
        .headers()
        .get(header::AUTHORIZATION)
        .map(|v| v.as_bytes());
    let api_key = req.headers().get("x-api-key").map(|v| v.as_bytes());
    if authorized(value, keys) || api_key.is_some_and(|k| key_matches(k.trim_ascii(), keys)) {
        next.run(req).await
    } else {
        ApiError::Unauthorized.into_response()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_match_exactly() {
        let keys = vec!["sk-Alpha".to_string(), "sk-beta".to_string()];
        assert!(authorized(Some(b"Bearer sk-Alpha"), &keys));
        assert!(authorized(Some(b"bearer sk-beta"), &keys));
        assert!(!authorized(Some(b"Bearer sk-alpha"), &keys));
        assert!(!authorized(Some(b"Bearer sk-Alph"), &keys));
        assert!(!authorized(Some(b"Bearer "), &keys));
        assert!(!authorized(Some(b"Basic sk-Alpha"), &keys));
        assert!(!authorized(Some(b"sk-Alpha"), &keys));
        assert!(!authorized(None, &keys));
        assert!(key_matches(b"sk-beta", &keys) && !key_matches(b"sk-Beta", &keys));
        assert!(is_public("/health", false) && is_public("/ready", false));
        assert!(!is_public("/metrics", false) && is_public("/metrics", true));
        assert!(!is_public("/health/", false) && !is_public("/v1/models", false));
    }
}
