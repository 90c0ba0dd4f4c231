//! Work that must not run on the async runtime (prompt rendering, tokenization, grammar
//! compilation), moved to tokio's blocking pool with its failure mapped to an API error.

use crate::server::error::ApiError;

/// Runs `f` on the blocking pool (prompt rendering and tokenization).
pub(crate) async fn blocking<T, F>(f: F) -> Result<T, ApiError>
where
    F: FnOnce() -> Result<T, ApiError> + Send + 'static,
    T: Send + 'static,
{
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ApiError::Internal(format!("request processing failed: {e}")))?
}
