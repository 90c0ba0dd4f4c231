//! Reading a JSON request body safely: the content type must be JSON (415), the body must
//! fit `server.max_body_bytes` (413, decided from `Content-Length` before reading when it is
//! given, else as soon as the limit is passed) and what is left of
//! `server.max_body_bytes_in_flight` (429 before reading; the bytes stay held until the
//! handler returns, see [`crate::server::admission`]), and a body that is not the expected
//! shape is a 400 naming the field at fault (`messages[0].role`), never a panic: serde_json
//! refuses invalid UTF-8, lone surrogates and nesting deeper than 128 levels. A body refused
//! unread is read and discarded for a while after the refusal, so the client, still sending,
//! reads the 413 or 429 instead of a connection reset.

use crate::server::admission;
use crate::server::app_state::AppState;
use crate::server::error::ApiError;
use crate::server::types::sampling::split_field_error;
use axum::body::Body;
use axum::extract::{FromRef, FromRequest, Request};
use axum::http::header;
use futures_util::StreamExt;
use serde::de::DeserializeOwned;

/// A request body deserialized from JSON, with the checks of the module docs.
pub struct JsonBody<T>(pub T);

impl<T, S> FromRequest<S> for JsonBody<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
    AppState: FromRef<S>,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        let state = AppState::from_ref(state);
        let limit = state.settings().max_body_bytes;
        let declared = req
            .headers()
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        let content_type = req.headers().get(header::CONTENT_TYPE).cloned();
        let body = req.into_body();
        let refuse = |body: Body, e: ApiError| {
            admission::linger(&state, body);
            Err(e)
        };
        if let Err(e) = check_content_type(content_type.as_ref()) {
            return refuse(body, e);
        }
        let mut held = match declared {
            Some(n) if n > limit as u64 => {
                return refuse(body, ApiError::PayloadTooLarge { limit });
            }
            // The declared length is taken whole before reading; a body without one is
            // taken as it arrives.
            n => match state.admission().bytes().take(n.unwrap_or(0) as usize) {
                Some(h) => h,
                None => return refuse(body, body_budget_full(&state)),
            },
        };
        let mut counted = declared.unwrap_or(0) as usize;
        let mut data = body.into_data_stream();
        let mut buf: Vec<u8> = Vec::with_capacity(counted);
        while let Some(chunk) = data.next().await {
            let chunk = chunk.map_err(|e| ApiError::BadRequest {
                message: format!("could not read the request body: {e}"),
                param: None,
                code: None,
            })?;
            if buf.len() + chunk.len() > limit {
                return refuse(Body::from_stream(data), ApiError::PayloadTooLarge { limit });
            }
            let need = buf.len() + chunk.len();
            if need > counted {
                if !held.grow(need - counted) {
                    return refuse(Body::from_stream(data), body_budget_full(&state));
                }
                counted = need;
            }
            buf.extend_from_slice(&chunk);
        }
        let parsed = parse_json(&buf).map(JsonBody);
        // The parsed request can be as large as its body: the bytes stay counted until the
        // handler returns.
        drop(buf);
        admission::hold(held);
        parsed
    }
}

/// 429: the bytes of the bodies being read leave no room for this one.
fn body_budget_full(state: &AppState) -> ApiError {
    let adm = state.admission();
    ApiError::Overloaded {
        message: format!(
            "the server is reading {} bytes of request bodies, its limit \
             (server.max_body_bytes_in_flight); retry later",
            adm.bytes_in_flight()
        ),
        retry_after: adm.retry_after(1),
    }
}

/// 415 unless the content type is `application/json` or `application/<something>+json`.
fn check_content_type(value: Option<&header::HeaderValue>) -> Result<(), ApiError> {
    let Some(value) = value else {
        return Err(ApiError::UnsupportedMediaType {
            got: "no Content-Type".to_string(),
        });
    };
    let text = value.to_str().unwrap_or("");
    let essence = text
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    let json = essence == "application/json"
        || (essence.starts_with("application/") && essence.ends_with("+json"));
    if json {
        Ok(())
    } else {
        Err(ApiError::UnsupportedMediaType {
            got: format!("{:?}", text.chars().take(100).collect::<String>()),
        })
    }
}

/// Deserializes `bytes` into `T`; see the module docs for the errors.
pub fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    // Every request body is an object; serde would also read a struct from an array.
    let first = bytes.iter().find(|b| !b.is_ascii_whitespace());
    if first != Some(&b'{') {
        let got = match first {
            None => "an empty body",
            Some(b'[') => "an array",
            Some(b'"') => "a string",
            Some(b'n') => "null",
            Some(b't' | b'f') => "a boolean",
            Some(b'-' | b'0'..=b'9') => "a number",
            Some(_) => "something that is not JSON",
        };
        return Err(ApiError::BadRequest {
            message: format!("the request body must be a JSON object, got {got}"),
            param: None,
            code: None,
        });
    }
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let value: T = serde_path_to_error::deserialize(&mut de).map_err(json_error)?;
    de.end().map_err(|e| ApiError::BadRequest {
        message: format!("invalid JSON body: {e}"),
        param: None,
        code: None,
    })?;
    Ok(value)
}

/// A JSON value already read (by [`JsonBody`]) as `T`, with the same 400s naming the field
/// at fault.
pub(crate) fn from_value<T: DeserializeOwned>(v: serde_json::Value) -> Result<T, ApiError> {
    serde_path_to_error::deserialize(v).map_err(json_error)
}

fn json_error(e: serde_path_to_error::Error<serde_json::Error>) -> ApiError {
    let path = e.path().to_string();
    let inner = e.into_inner();
    if !inner.is_data() {
        return ApiError::BadRequest {
            message: format!("invalid JSON body: {inner}"),
            param: None,
            code: None,
        };
    }
    let mut text = inner.to_string();
    let mut path = path;
    // An error inside a flattened struct has lost its path but names its field.
    if let Some((field, rest)) = split_field_error(&text) {
        path = if path == "." {
            field.to_string()
        } else {
            format!("{path}.{field}")
        };
        text = rest.to_string();
    }
    // "missing field `messages`" at the top level: the missing field is the param.
    let param = if path == "." {
        text.strip_prefix("missing field `")
            .and_then(|r| r.split('`').next())
            .map(str::to_string)
    } else {
        Some(path.clone())
    };
    let message = match &param {
        Some(p) if path != "." => format!("invalid value for `{p}`: {text}"),
        Some(_) => text,
        None => format!("the request body must be a JSON object: {text}"),
    };
    ApiError::BadRequest {
        message,
        param,
        code: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::types::{ChatCompletionRequest, CompletionRequest};

    fn param(body: &str) -> Option<String> {
        match parse_json::<ChatCompletionRequest>(body.as_bytes()) {
            Err(ApiError::BadRequest { param, .. }) => param,
            other => panic!("{body}: expected a 400, got {other:?}"),
        }
    }

    #[test]
    fn type_errors_name_the_field() {
        let m = r#""messages":[{"role":"user","content":"hi"}]"#;
        assert_eq!(
            param(&format!(r#"{{{m},"max_tokens":"10"}}"#)).as_deref(),
            Some("max_tokens")
        );
        assert_eq!(param(r#"{"messages":{}}"#).as_deref(), Some("messages"));
        assert_eq!(
            param(r#"{"messages":[{"role":"wizard","content":"x"}]}"#).as_deref(),
            Some("messages[0].role")
        );
        assert_eq!(
            param(
                r#"{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{}}]}]}"#
            )
            .as_deref(),
            Some("messages[0].content[0].type")
        );
        assert_eq!(param(r#"{"model":"x"}"#).as_deref(), Some("messages"));
        assert_eq!(
            param(&format!(r#"{{{m},"max_tokens":9223372036854775808}}"#)).as_deref(),
            Some("max_tokens")
        );
        for body in [
            "\"text\"",
            "[1,2]",
            "3",
            "null",
            "{\"messages\": [",
            "{\"messages\":[]} x",
            "",
        ] {
            assert_eq!(param(body), None, "{body}");
        }
        // Lone surrogates and deep nesting are refused, not a panic or a stack overflow.
        assert_eq!(
            param(r#"{"messages":[{"role":"user","content":"\ud800"}]}"#),
            None
        );
        for key in ["x", "messages", "stop"] {
            let deep = format!("{{\"{key}\":{}{}}}", "[".repeat(10_000), "]".repeat(10_000));
            param(&deep);
        }
        // Unknown fields are ignored; nulls are accepted for optional fields.
        let ok = format!(r#"{{{m},"frobnicate":1,"temperature":null}}"#);
        assert!(parse_json::<ChatCompletionRequest>(ok.as_bytes()).is_ok());
    }

    #[test]
    fn prompt_forms() {
        use crate::server::types::PromptInput;
        let p = |s: &str| parse_json::<CompletionRequest>(s.as_bytes()).map(|r| r.prompt);
        assert_eq!(
            p(r#"{"prompt":"a"}"#).unwrap(),
            PromptInput::Text("a".into())
        );
        assert_eq!(
            p(r#"{"prompt":["a","b"]}"#).unwrap(),
            PromptInput::Texts(vec!["a".into(), "b".into()])
        );
        assert_eq!(
            p(r#"{"prompt":[1,2]}"#).unwrap(),
            PromptInput::Ids(vec![1, 2])
        );
        assert_eq!(
            p(r#"{"prompt":[[1],[2,3]]}"#).unwrap(),
            PromptInput::IdLists(vec![vec![1], vec![2, 3]])
        );
        let Err(ApiError::BadRequest { param, .. }) = p(r#"{"prompt":["a",2]}"#) else {
            panic!()
        };
        assert_eq!(param.as_deref(), Some("prompt[1]"));
        assert!(p(r#"{"prompt":[]}"#).is_err());
        assert!(p(r#"{"prompt":{}}"#).is_err());
    }

    #[test]
    fn content_types() {
        let v = |s: &'static str| header::HeaderValue::from_static(s);
        assert!(check_content_type(Some(&v("application/json"))).is_ok());
        assert!(check_content_type(Some(&v("Application/JSON; charset=utf-8"))).is_ok());
        assert!(check_content_type(Some(&v("application/vnd.api+json"))).is_ok());
        assert!(check_content_type(Some(&v("text/plain"))).is_err());
        assert!(check_content_type(None).is_err());
    }
}
