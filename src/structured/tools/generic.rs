//! The generic tool format, for templates that know nothing of tools: kiln describes the
//! tools in a system message and constrains the reply to a JSON envelope (as llama.cpp's
//! generic format does):
//!
//! ```text
//! {"tool_calls": [{"name": "<function>", "arguments": {<its parameters>}}, ...]}
//! {"response": "<a plain answer>"}
//! ```
//!
//! `tool_choice: "auto"` allows both shapes, `"required"` only calls, a named function only
//! calls of it; `parallel_tool_calls: false` allows one call. Arguments always validate
//! against the function's `parameters` schema. With `response_format`, the answer's
//! `response` is JSON valid against its schema instead of a string (and becomes the
//! message's content as JSON text).

use super::{ToolChoice, ToolDef};
use serde_json::{json, Map, Value};

/// The schema of a call of `t`: its name, then its arguments.
fn call_schema(t: &ToolDef) -> Value {
    json!({
        "type": "object",
        "properties": {
            "name": {"const": t.name},
            "arguments": t.parameters,
        },
        "required": ["name", "arguments"],
        "additionalProperties": false,
    })
}

/// Most calls in one reply: a small model sampling at a high temperature can otherwise repeat
/// calls until its token budget runs out.
pub const MAX_CALLS: usize = 8;

/// The schema of a list of calls of `tools` (at most one when not `parallel`, else at most
/// [`MAX_CALLS`]).
pub fn calls_schema(tools: &[&ToolDef], parallel: bool) -> Value {
    let items: Vec<Value> = tools.iter().map(|t| call_schema(t)).collect();
    let item = if items.len() == 1 {
        items.into_iter().next().unwrap_or(Value::Null)
    } else {
        json!({"anyOf": items})
    };
    let mut list = Map::new();
    list.insert("type".into(), json!("array"));
    list.insert("items".into(), item);
    list.insert("minItems".into(), json!(1));
    list.insert(
        "maxItems".into(),
        json!(if parallel { MAX_CALLS } else { 1 }),
    );
    json!({
        "type": "object",
        "properties": {"tool_calls": Value::Object(list)},
        "required": ["tool_calls"],
        "additionalProperties": false,
    })
}

const ANSWER: &str = r#"{"type": "object", "properties": {"response": {"type": "string"}}, "required": ["response"], "additionalProperties": false}"#;

/// The envelope schema the reply is constrained to, or None for `tool_choice: "none"`.
/// `tools` must hold the named function for `Named` (the caller checks); `answer` is
/// `response_format`'s schema for the answer's `response`, if any.
pub fn envelope_schema(
    tools: &[ToolDef],
    choice: &ToolChoice,
    parallel: bool,
    answer: Option<&Value>,
) -> Option<Value> {
    let offered: Vec<&ToolDef> = match choice {
        ToolChoice::None => return None,
        ToolChoice::Named(n) => tools.iter().filter(|t| &t.name == n).collect(),
        ToolChoice::Auto | ToolChoice::Required => tools.iter().collect(),
    };
    let calls = calls_schema(&offered, parallel);
    Some(match choice {
        ToolChoice::Auto => {
            let mut envelope: Value = serde_json::from_str(ANSWER).unwrap_or(Value::Null);
            if let Some(schema) = answer {
                envelope["properties"]["response"] = schema.clone();
            }
            json!({"anyOf": [calls, envelope]})
        }
        _ => calls,
    })
}

/// The system message text describing the tools and the envelope (`answer`: the schema a
/// `response` must follow, when `response_format` gives one).
pub fn system_prompt(
    tools: &[ToolDef],
    choice: &ToolChoice,
    parallel: bool,
    answer: Option<&Value>,
) -> String {
    let listed: Vec<Value> = tools
        .iter()
        .filter(|t| match choice {
            ToolChoice::Named(n) => &t.name == n,
            _ => true,
        })
        .map(|t| {
            let mut o = Map::new();
            o.insert("name".into(), json!(t.name));
            if let Some(d) = &t.description {
                o.insert("description".into(), json!(d));
            }
            o.insert("parameters".into(), t.parameters.clone());
            Value::Object(o)
        })
        .collect();
    let list = serde_json::to_string_pretty(&listed).unwrap_or_default();
    let many = if parallel {
        "one or more calls"
    } else {
        "exactly one call"
    };
    let mut out = format!(
        "You can call the following tools:\n{list}\n\nTo call tools, reply with JSON only, {many}:\n{{\"tool_calls\": [{{\"name\": \"<tool name>\", \"arguments\": {{<arguments>}}}}]}}\n"
    );
    match choice {
        ToolChoice::Auto => match answer {
            None => out.push_str(
                "To answer without a tool (for example once a tool's result is known), reply with JSON only:\n{\"response\": \"<your answer>\"}\n",
            ),
            Some(schema) => out.push_str(&format!(
                "To answer without a tool (for example once a tool's result is known), reply with JSON only:\n{{\"response\": <your answer>}}\nwhere the answer is JSON following this schema:\n{}\n",
                serde_json::to_string(schema).unwrap_or_default()
            )),
        },
        ToolChoice::Named(n) => out.push_str(&format!("You must call the tool {n:?}.\n")),
        ToolChoice::Required => out.push_str("You must call a tool.\n"),
        ToolChoice::None => {}
    }
    out
}

/// How an earlier assistant message with calls is shown to the model: the envelope it would
/// have written. `calls` are OpenAI `tool_calls` entries.
pub fn render_calls(calls: &[Value]) -> String {
    let list: Vec<Value> = calls
        .iter()
        .map(|c| {
            let f = c.get("function").cloned().unwrap_or(Value::Null);
            let name = f.get("name").cloned().unwrap_or(Value::Null);
            // Arguments arrive as a JSON string; shown as the object when they parse.
            let args = match f.get("arguments") {
                Some(Value::String(s)) => {
                    serde_json::from_str(s).unwrap_or(Value::String(s.clone()))
                }
                Some(v) => v.clone(),
                None => json!({}),
            };
            json!({"name": name, "arguments": args})
        })
        .collect();
    json!({ "tool_calls": list }).to_string()
}

/// How an earlier plain assistant answer is shown when tools are in play: as the envelope,
/// so the model sees its own format in the history.
pub fn render_answer(text: &str) -> String {
    json!({ "response": text }).to_string()
}
