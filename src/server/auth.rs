//! API keys: with keys configured, every route but `/health`, `/ready` (and `/metrics` and
//! `/stats` when `server.metrics_public`) needs `Authorization: Bearer <key>` or (as
//! Anthropic's clients send it) `x-api-key: <key>`. Keys are compared in
//! constant time over every configured key, and exactly (a key with another case is wrong).
//!
//! An authorized request runs with its key's id ([`caller_key_id`]: the first 8 bytes of a
//! SHA-256 of the key, never the key) so the engine can keep each key's cached prompts apart
//! (`cache.namespace_by_key`).

use crate::server::app_state::AppState;
use crate::server::error::ApiError;
use axum::extract::{Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

tokio::task_local! {
    /// The id of the key the current request was authorized with.
    static KEY_ID: u64;
}

/// The id of the API key the request being handled was authorized with (None: keys are off,
/// or outside a request): a SHA-256 of the key under a fixed prefix, its first 8 bytes. The
/// same in every run, so a persisted cache stays with its key across restarts.
pub fn caller_key_id() -> Option<u64> {
    KEY_ID.try_with(|id| *id).ok()
}

/// The id of `key` (see [`caller_key_id`]).
pub fn key_id(key: &[u8]) -> u64 {
    let mut h = Sha256::new();
    h.update(b"kiln prefix-cache namespace\0");
    h.update(key);
    let d = h.finalize();
    u64::from_le_bytes(d[..8].try_into().expect("8 bytes"))
}

/// The key `Authorization: Bearer <key>` carries (trimmed), if it has that form.
fn bearer(value: &[u8]) -> Option<&[u8]> {
    // The scheme is case-insensitive (RFC 7235); the key is not.
    value
        .get(..7)
        .filter(|s| s.eq_ignore_ascii_case(b"bearer "))
        .map(|_| value[7..].trim_ascii())
}

/// Whether `path` is served without a key.
pub fn is_public(path: &str, metrics_public: bool) -> bool {
    matches!(path, "/health" | "/ready")
        || (metrics_public && matches!(path, "/metrics" | "/stats"))
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
    let headers = req.headers();
    let from_bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| bearer(v.as_bytes()))
        .filter(|k| key_matches(k, keys));
    let from_x_api_key = || {
        headers
            .get("x-api-key")
            .map(|v| v.as_bytes().trim_ascii())
            .filter(|k| key_matches(k, keys))
    };
    match from_bearer.or_else(from_x_api_key).map(key_id) {
        Some(id) => KEY_ID.scope(id, next.run(req)).await,
        None => ApiError::Unauthorized.into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether `header_value` carries one of `keys`.
    fn authorized(header_value: Option<&[u8]>, keys: &[String]) -> bool {
        header_value
            .and_then(bearer)
            .is_some_and(|token| key_matches(token, keys))
    }

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

    #[test]
    fn key_ids_are_stable_distinct_and_not_the_key() {
        let a = key_id(b"sk-Alpha");
        assert_eq!(a, key_id(b"sk-Alpha"));
        assert_ne!(a, key_id(b"sk-alpha"));
        assert_ne!(a.to_le_bytes()[..], b"sk-Alpha"[..]);
        // Pinned (SHA-256 of the prefix and the key, first 8 bytes little-endian): a persisted
        // cache stays with its key across restarts and builds.
        assert_eq!(a, 0x47b8_1021_7305_8854);
        assert_eq!(caller_key_id(), None, "outside a request");
    }
}
