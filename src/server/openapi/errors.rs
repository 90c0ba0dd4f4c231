//! The error responses the handlers' `#[utoipa::path]` share, each set once per envelope
//! (OpenAI's [`ErrorResponse`], Anthropic's [`AnthropicErrorResponse`]), so every route of a
//! kind documents the same statuses with the same words.

use crate::server::types::messages::AnthropicErrorResponse;
use crate::server::types::ErrorResponse;

/// An enum of error responses, one variant per `(Variant, status, description)`, each with
/// the body `$body`.
macro_rules! error_set {
    ($(#[$doc:meta])* $name:ident, $body:ty, [$(($variant:ident, $status:literal, $desc:expr)),* $(,)?]) => {
        $(#[$doc])*
        #[derive(utoipa::IntoResponses)]
        #[allow(dead_code)]
        pub enum $name {
            $(
                #[response(status = $status, description = $desc)]
                $variant($body),
            )*
        }
    };
}

/// The errors of a route that generates: refused before any work (400, 401, 404, 413, 415,
/// 429, and the envelope's "unavailable" rows) or failed while running (timeout, 500).
/// OpenAI's and Anthropic's sets differ only in the timeout status and those rows.
macro_rules! generation_errors {
    ($(#[$doc:meta])* $name:ident, $body:ty, $bad:literal, $auth:literal, $not_found:literal,
     $timeout:literal, [$($unavailable:tt)*]) => {
        error_set!($(#[$doc])* $name, $body, [
            (BadRequest, 400, $bad),
            (Unauthorized, 401, $auth),
            (NotFound, 404, $not_found),
            (Timeout, $timeout, "The request ran past the server's time limit"),
            (TooLarge, 413, "Body too large"),
            (NotJson, 415, "Body is not JSON"),
            (Overloaded, 429, "Queue full; see Retry-After"),
            (Fault, 500, "Engine fault"),
            $($unavailable)*
        ]);
    };
}

/// The errors of a route that renders a prompt without running it.
macro_rules! prompt_errors {
    ($(#[$doc:meta])* $name:ident, $body:ty, $bad:literal, $auth:literal, [$($unavailable:tt)*]) => {
        error_set!($(#[$doc])* $name, $body, [
            (BadRequest, 400, $bad),
            (Unauthorized, 401, $auth),
            (NotFound, 404, "Unknown model"),
            (TooLarge, 413, "Body too large"),
            (NotJson, 415, "Body is not JSON"),
            $($unavailable)*
        ]);
    };
}

generation_errors!(
    /// Chat, completions, embeddings, rerank and responses.
    GenerationErrors,
    ErrorResponse,
    "Invalid request (`param` names the field)",
    "Missing or wrong API key",
    "Unknown model (on /v1/responses also: `previous_response_id` not stored)",
    408,
    [(Unavailable, 503, "Loading, draining or engine down"),]
);
generation_errors!(
    /// Messages: Anthropic's codes for a timeout (504) and an overloaded server (529).
    AnthropicGenerationErrors,
    AnthropicErrorResponse,
    "Invalid request",
    "Missing or wrong API key (`x-api-key` or Bearer)",
    "Unknown model",
    504,
    [
        (ModelFailed, 503, "The model failed to load"),
        (Unavailable, 529, "Loading or draining (`overloaded_error`)"),
    ]
);
prompt_errors!(
    /// Tokenize and detokenize.
    PromptErrors,
    ErrorResponse,
    "Invalid request",
    "Missing or wrong API key",
    [(Unavailable, 503, "Loading, draining or engine down"),]
);
prompt_errors!(
    /// Messages' count_tokens.
    AnthropicPromptErrors,
    AnthropicErrorResponse,
    "Invalid request",
    "Missing or wrong API key (`x-api-key` or Bearer)",
    [
        (ModelFailed, 503, "The model failed to load"),
        (Unavailable, 529, "Loading or draining (`overloaded_error`)"),
    ]
);
