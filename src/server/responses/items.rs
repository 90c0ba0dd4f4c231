//! `GET /v1/responses/{id}/input_items`: a stored response's input, as items again (messages
//! with `input_text` parts, or `output_text` for the assistant's; `function_call` and
//! `function_call_output` items), in pages.
//!
//! The items are rebuilt from the stored turn (what the model read), so an item's `id` is
//! derived from the response's and its position: the same on every call, usable as `after`.

use super::not_stored;
use crate::server::app_state::AppState;
use crate::server::error::ApiError;
use crate::server::query;
use crate::server::types::responses::InputItemList;
use crate::server::types::{ChatMessage, ErrorResponse, Role};
use axum::extract::{Path, RawQuery, State};
use axum::Json;
use serde_json::{json, Value};

/// Most items per page.
const MAX_LIMIT: usize = 100;

/// The page asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Page {
    /// Oldest first.
    asc: bool,
    limit: usize,
    after: Option<String>,
}

/// `order`, `limit` and `after` from the query string (a bad value is a 400 naming it;
/// other parameters are ignored).
fn page(query: Option<&str>) -> Result<Page, ApiError> {
    let mut p = Page {
        asc: false,
        limit: 20,
        after: None,
    };
    for (k, v) in query::pairs(query) {
        match k.as_str() {
            "order" => {
                p.asc = match v.as_str() {
                    "asc" => true,
                    "desc" => false,
                    _ => return Err(ApiError::bad("order", "order must be \"asc\" or \"desc\"")),
                }
            }
            "limit" => {
                p.limit = v
                    .parse::<usize>()
                    .ok()
                    .filter(|l| (1..=MAX_LIMIT).contains(l))
                    .ok_or_else(|| {
                        ApiError::bad("limit", format!("limit must be 1 to {MAX_LIMIT}"))
                    })?
            }
            "after" => p.after = Some(v),
            _ => {}
        }
    }
    Ok(p)
}

/// The items of `messages` (a turn's input), ids made from `base` and the position.
fn items(base: &str, messages: &[ChatMessage]) -> Vec<Value> {
    let mut out = Vec::new();
    for (i, m) in messages.iter().enumerate() {
        let text = m.content.as_ref().map(|c| c.text()).unwrap_or_default();
        match m.role {
            Role::Tool => out.push(json!({
                "id": format!("fco_{base}_{i}"), "type": "function_call_output",
                "call_id": m.tool_call_id, "output": text, "status": "completed"})),
            role => {
                let part = if role == Role::Assistant {
                    "output_text"
                } else {
                    "input_text"
                };
                let calls = m.tool_calls.as_deref().unwrap_or_default();
                if !text.is_empty() || calls.is_empty() {
                    out.push(json!({
                        "id": format!("msg_{base}_{i}"), "type": "message",
                        "role": serde_json::to_value(role).unwrap_or_default(),
                        "content": [{"type": part, "text": text}], "status": "completed"}));
                }
                for (j, c) in calls.iter().enumerate() {
                    out.push(json!({
                        "id": format!("fc_{base}_{i}_{j}"), "type": "function_call",
                        "call_id": c["id"], "name": c["function"]["name"],
                        "arguments": c["function"]["arguments"], "status": "completed"}));
                }
            }
        }
    }
    out
}

/// The input items of a stored response.
#[utoipa::path(
    get,
    path = "/v1/responses/{id}/input_items",
    tag = "openai",
    params(
        ("id" = String, Path, description = "The response's id (`resp_...`)"),
        ("order" = Option<String>, Query, description = "`desc` (newest first, the default) or `asc`"),
        ("limit" = Option<u32>, Query, minimum = 1, maximum = 100, description = "Items per page (default 20)"),
        ("after" = Option<String>, Query, description = "An item id: the page starts after it"),
    ),
    responses(
        (status = 200, description = "A page of the response's input items", body = InputItemList),
        (status = 400, description = "A bad `order` or `limit`", body = ErrorResponse),
        (status = 401, description = "Missing or wrong API key", body = ErrorResponse),
        (status = 404, description = "Not stored", body = ErrorResponse),
    ),
    security(("bearer" = []))
)]
pub async fn list_input_items(
    State(state): State<AppState>,
    Path(id): Path<String>,
    RawQuery(query): RawQuery,
) -> Result<Json<InputItemList>, ApiError> {
    let page = page(query.as_deref())?;
    let stored = state
        .responses()
        .get(&id)
        .await
        .ok_or_else(|| not_stored(&id, None))?;
    let turn = &stored.turn;
    let base = id.strip_prefix("resp_").unwrap_or(&id);
    let mut all = items(
        base,
        &turn.messages[..turn.input_len.min(turn.messages.len())],
    );
    if !page.asc {
        all.reverse();
    }
    let start = match &page.after {
        None => 0,
        Some(a) => all
            .iter()
            .position(|i| i["id"] == a.as_str())
            .map(|p| p + 1)
            .unwrap_or(all.len()),
    };
    let rest = all.len().saturating_sub(start);
    let data: Vec<Value> = all.into_iter().skip(start).take(page.limit).collect();
    let id_of = |v: Option<&Value>| v.and_then(|i| i["id"].as_str()).map(str::to_string);
    Ok(Json(InputItemList {
        object: "list".to_string(),
        first_id: id_of(data.first()),
        last_id: id_of(data.last()),
        has_more: rest > data.len(),
        data,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::responses::convert::tool_call;

    #[test]
    fn query_pages_and_their_errors() {
        assert_eq!(
            page(Some("order=asc&limit=2&after=x&foo=1")).unwrap(),
            Page {
                asc: true,
                limit: 2,
                after: Some("x".to_string())
            }
        );
        assert!(!page(None).unwrap().asc);
        for (q, param) in [
            ("limit=0", "limit"),
            ("limit=x", "limit"),
            ("order=up", "order"),
        ] {
            match page(Some(q)) {
                Err(ApiError::BadRequest { param: p, .. }) => assert_eq!(p.as_deref(), Some(param)),
                other => panic!("{q}: {other:?}"),
            }
        }
    }

    #[test]
    fn messages_become_items_again() {
        let mut call = ChatMessage::text(Role::Assistant, String::new());
        call.tool_calls = Some(vec![tool_call("call_1", "f", "{}")]);
        let mut out = ChatMessage::text(Role::Tool, "sunny".to_string());
        out.tool_call_id = Some("call_1".to_string());
        let got = items(
            "r",
            &[
                ChatMessage::text(Role::Developer, "be brief".to_string()),
                call,
                out,
            ],
        );
        let kinds: Vec<&str> = got.iter().map(|i| i["type"].as_str().unwrap()).collect();
        assert_eq!(kinds, ["message", "function_call", "function_call_output"]);
        assert_eq!(got[0]["role"], "developer");
        assert_eq!(got[0]["content"][0]["type"], "input_text");
        assert_eq!(got[1]["call_id"], "call_1");
        assert_eq!(got[2]["output"], "sunny");
        assert_eq!(got[1]["id"], "fc_r_1_0");
    }
}
