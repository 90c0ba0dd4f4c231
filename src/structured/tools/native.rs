//! Forced calls in a model's own syntax (`tool_choice: "required"` or a named function):
//! the reply must be calls whose arguments validate, written as the template taught the
//! model. Hermes and Mistral need tags around the JSON, so their grammars are Lark (with the
//! JSON parts as embedded schemas); Llama 3's call is plain JSON. A tag that is a control
//! token in the vocabulary is named by id (`<[id]>`), since grammar text never produces one.

use super::generic::MAX_CALLS;
use super::{ToolDef, ToolFormat};
use crate::tokenizer::Tokenizer;
use serde_json::{json, Value};

/// What to compile.
#[derive(Debug, Clone, PartialEq)]
pub enum ForcedCall {
    /// A JSON schema (its output is the whole reply).
    Schema(Value),
    /// A Lark grammar.
    Lark(String),
}

/// kiln's JSON layout for embedded schemas (see `grammar::layout`).
fn with_layout(mut schema: Value) -> Value {
    if let Some(o) = schema.as_object_mut() {
        o.insert(
            "x-guidance".into(),
            json!({"whitespace_flexible": false, "item_separator": ", ", "key_separator": ": ", "lenient": false}),
        );
    }
    schema
}

/// `{"name": <const>, <args_key>: <parameters>}` for each tool, as one schema.
fn call_schema(tools: &[&ToolDef], args_key: &str) -> Value {
    let one = |t: &ToolDef| {
        json!({
            "type": "object",
            "properties": {"name": {"const": t.name}, args_key: t.parameters},
            "required": ["name", args_key],
            "additionalProperties": false,
        })
    };
    match tools {
        [t] => one(t),
        _ => json!({"anyOf": tools.iter().map(|t| one(t)).collect::<Vec<_>>()}),
    }
}

/// A tag as a grammar item: the control token's id if the vocabulary has it as one, else
/// the text as a string literal.
fn tag(tok: &Tokenizer, text: &str) -> String {
    match tok.vocab().id(text.as_bytes()) {
        Some(id) if tok.is_control(id) => format!("<[{id}]>"),
        _ => serde_json::to_string(text).unwrap_or_default(),
    }
}

/// The grammar of a forced call in `format` (None for Generic, which has its own envelope).
/// `template` tells Mistral's two syntaxes apart.
pub fn forced_call(
    format: ToolFormat,
    tools: &[&ToolDef],
    parallel: bool,
    tok: &Tokenizer,
    template: &str,
) -> Option<ForcedCall> {
    let most = if parallel { MAX_CALLS } else { 1 };
    match format {
        ToolFormat::Generic => None,
        ToolFormat::Llama3 => Some(ForcedCall::Schema(call_schema(tools, "parameters"))),
        ToolFormat::Hermes => {
            let schema = with_layout(call_schema(tools, "arguments"));
            Some(ForcedCall::Lark(format!(
                "start: call{{1,{most}}}\ncall: {open} \"\\n\" body \"\\n\" {close} \"\\n\"?\nbody: %json {schema}\n",
                open = tag(tok, "<tool_call>"),
                close = tag(tok, "</tool_call>"),
            )))
        }
        ToolFormat::Mistral if template.contains("[ARGS]") => {
            // Small 3.2: [TOOL_CALLS]name[ARGS]{...} per call.
            let alts: Vec<String> = tools
                .iter()
                .map(|t| {
                    format!(
                        "{} {} %json {}",
                        serde_json::to_string(&t.name).unwrap_or_default(),
                        tag(tok, "[ARGS]"),
                        with_layout(t.parameters.clone())
                    )
                })
                .collect();
            Some(ForcedCall::Lark(format!(
                "start: call{{1,{most}}}\ncall: {tc} fn\nfn: {}\n",
                alts.join(" | "),
                tc = tag(tok, "[TOOL_CALLS]"),
            )))
        }
        ToolFormat::Mistral => {
            // Nemo: [TOOL_CALLS] then a JSON array of calls.
            let list = with_layout(json!({
                "type": "array",
                "items": call_schema(tools, "arguments"),
                "minItems": 1,
                "maxItems": most,
            }));
            Some(ForcedCall::Lark(format!(
                "start: {} calls\ncalls: %json {list}\n",
                tag(tok, "[TOOL_CALLS]")
            )))
        }
    }
}
