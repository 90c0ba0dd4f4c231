//! Calls in a model's own syntax, written as the template taught the model:
//! - [`forced_call`] (`tool_choice: "required"` or a named function): the reply must be calls
//!   whose arguments validate;
//! - [`auto_call`] (`tool_choice: "auto"`): the reply is an answer (free text, or JSON valid
//!   against `response_format`'s schema) or calls; a call the model starts is constrained
//!   from its opening tag on, so its arguments validate too.
//!
//! Hermes, Qwen3.5's XML ([`super::qwen_xml`]), LFM2's pythonic calls ([`super::pythonic`]),
//! Gemma 4's ([`super::gemma4`]), Mistral, Phi-4-mini and Granite need tags around the
//! arguments, so their grammars are Lark (with the JSON parts as embedded schemas); Llama 3's
//! call is plain JSON. A tag that is a control token in the vocabulary is named by id
//! (`<[id]>`), since grammar text never produces one.

use super::generic::MAX_CALLS;
use super::{ToolDef, ToolFormat};
use crate::structured::regex_text::regex_literal;
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
    Tag::of(tok, text).item()
}

/// A syntax tag and how the vocabulary holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Tag {
    /// A control token: text can never produce it, so free text needs no guard against it.
    Control(u32),
    /// Plain text: free text must be kept from writing it except as the tag.
    Text(String),
}

impl Tag {
    pub fn of(tok: &Tokenizer, text: &str) -> Tag {
        match tok.vocab().id(text.as_bytes()) {
            Some(id) if tok.is_control(id) => Tag::Control(id),
            _ => Tag::Text(text.to_string()),
        }
    }

    /// The tag as a grammar item.
    pub(crate) fn item(&self) -> String {
        match self {
            Tag::Control(id) => format!("<[{id}]>"),
            Tag::Text(t) => serde_json::to_string(t).unwrap_or_default(),
        }
    }
}

/// The answer branch of an `auto` reply under `response_format`.
const ANSWER_JSON: &str = "answer: %json ";

/// What follows the opening tag in one call, per tagged format, and how many such tagged
/// calls a reply may hold (Mistral Nemo puts all its calls in one tagged list).
fn tagged_call(
    format: ToolFormat,
    tools: &[&ToolDef],
    most: usize,
    tok: &Tokenizer,
    template: &str,
) -> Option<(Tag, String, usize, String)> {
    let plain = |(open, after, most): (Tag, String, usize)| (open, after, most, String::new());
    let call = match format {
        // Harmony: a forced call is [`harmony_call`]; under "auto" the reply is free (its
        // analysis and final messages open with the same control tokens a call does), and
        // calls are read from it.
        ToolFormat::Generic | ToolFormat::Llama3 | ToolFormat::Harmony => None,
        ToolFormat::Lfm2 => {
            // One tagged list holds all the calls.
            let close = tag(tok, super::pythonic::CLOSE);
            let (after, rules) = super::pythonic::call_after(tools, most, &close, &with_layout);
            return Some((Tag::of(tok, super::pythonic::OPEN), after, 1, rules));
        }
        ToolFormat::Gemma4 => {
            let quote = Tag::of(tok, super::gemma4::QUOTE);
            let (after, rules) = super::gemma4::call_after(
                tools,
                &tag(tok, super::gemma4::CLOSE),
                &quote.item(),
                matches!(quote, Tag::Text(_)),
                &with_layout,
            );
            return Some((Tag::of(tok, super::gemma4::OPEN), after, most, rules));
        }
        ToolFormat::QwenXml => {
            let (after, rules) =
                super::qwen_xml::call_after(tools, &tag(tok, "</tool_call>"), &with_layout);
            return Some((Tag::of(tok, "<tool_call>"), after, most, rules));
        }
        ToolFormat::Hermes => {
            let body = with_layout(call_schema(tools, "arguments"));
            let after = format!(
                "\"\\n\" %json {body} \"\\n\" {} \"\\n\"?",
                tag(tok, "</tool_call>")
            );
            Some((Tag::of(tok, "<tool_call>"), after, most))
        }
        ToolFormat::Phi4 => {
            let body = with_layout(call_schema(tools, "arguments"));
            let after = format!("%json {body} {}", tag(tok, "<|/tool_call|>"));
            Some((Tag::of(tok, "<|tool_call|>"), after, most))
        }
        ToolFormat::Granite => {
            // One tagged JSON list holds all the calls.
            let list = with_layout(json!({
                "type": "array",
                "items": call_schema(tools, "arguments"),
                "minItems": 1,
                "maxItems": most,
            }));
            Some((Tag::of(tok, "<|tool_call|>"), format!("%json {list}"), 1))
        }
        ToolFormat::Mistral if template.contains("[ARGS]") => {
            // Small 3.2: [TOOL_CALLS]name[ARGS]{...} per call.
            let alts: Vec<String> = tools
                .iter()
                .map(|t| {
                    format!(
                        "({} {} %json {})",
                        serde_json::to_string(&t.name).unwrap_or_default(),
                        tag(tok, "[ARGS]"),
                        with_layout(t.parameters.clone())
                    )
                })
                .collect();
            let after = format!("({})", alts.join(" | "));
            Some((Tag::of(tok, "[TOOL_CALLS]"), after, most))
        }
        ToolFormat::Mistral => {
            // Nemo: [TOOL_CALLS] then a JSON array of calls.
            let list = with_layout(json!({
                "type": "array",
                "items": call_schema(tools, "arguments"),
                "minItems": 1,
                "maxItems": most,
            }));
            Some((Tag::of(tok, "[TOOL_CALLS]"), format!("%json {list}"), 1))
        }
    };
    call.map(plain)
}

/// A Lark grammar for a tagged call syntax: each call is `open` followed by `after` (a
/// grammar expression), at most `most` calls. `answer: None` with `forced`: calls only.
/// Without `forced` (`auto`): with `answer`, the reply is that JSON or calls; without,
/// free text may precede the calls (or be the whole reply) and never contains a text `open`
/// tag except as the start of a call: there a lazy lexeme ends the text at the tag, and
/// from the tag on the call is constrained.
pub fn tagged_grammar(
    open: &Tag,
    after: &str,
    most: usize,
    forced: bool,
    answer: Option<&Value>,
) -> String {
    let call = format!("call: {} {after}\n", open.item());
    if forced {
        return format!("start: call{{1,{most}}}\n{call}");
    }
    if let Some(schema) = answer {
        return format!(
            "start: answer | call{{1,{most}}}\n{call}{ANSWER_JSON}{}\n",
            with_layout(schema.clone())
        );
    }
    match open {
        // The tag is a token of its own: text ends where it is drawn.
        Tag::Control(_) => format!("start: TEXT? call{{0,{most}}}\n{call}TEXT: /(?s:.+)/\n"),
        Tag::Text(t) => {
            let lit = regex_literal(t);
            let rest = if most > 1 {
                format!(" call{{0,{}}}", most - 1)
            } else {
                String::new()
            };
            format!(
                "start: TEXT? | lead {after}{rest}\n{call}\
                 lead[lazy]: /(?s:.*){lit}/\n\
                 TEXT: /(?s:.+)/ & ~/(?s:.*{lit}.*)/\n"
            )
        }
    }
}

/// The grammar of a reply under `tool_choice: "auto"` in `format` (None for Generic, whose
/// envelope has its own answer branch). `answer` is `response_format`'s schema, if any.
pub fn auto_call(
    format: ToolFormat,
    tools: &[&ToolDef],
    parallel: bool,
    tok: &Tokenizer,
    template: &str,
    answer: Option<&Value>,
) -> Option<ForcedCall> {
    let most = if parallel { MAX_CALLS } else { 1 };
    if format == ToolFormat::Llama3 {
        // A reply starting with `{` (or the python tag) is a call; any other is text.
        let py = Tag::of(tok, "<|python_tag|>");
        let call = with_layout(call_schema(tools, "parameters"));
        let answer_rule = match answer {
            Some(schema) => format!("{ANSWER_JSON}{}\n", with_layout(schema.clone())),
            None => {
                let mut text = "answer: TEXT\nTEXT: /(?s:.+)/ & ~/\\s*\\{(?s:.*)/".to_string();
                if let Tag::Text(t) = &py {
                    text.push_str(&format!(" & ~/\\s*{}(?s:.*)/", regex_literal(t)));
                }
                text.push('\n');
                text
            }
        };
        let opt = if answer.is_none() { "?" } else { "" };
        return Some(ForcedCall::Lark(format!(
            "start: answer{opt} | {}? call\ncall: %json {call}\n{answer_rule}",
            py.item()
        )));
    }
    let (open, after, most, rules) = tagged_call(format, tools, most, tok, template)?;
    let grammar = tagged_grammar(&open, &after, most, false, answer);
    Some(ForcedCall::Lark(format!("{grammar}{rules}")))
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
        ToolFormat::Llama3 => return Some(ForcedCall::Schema(call_schema(tools, "parameters"))),
        ToolFormat::Harmony => return Some(ForcedCall::Lark(harmony_call(tools, tok))),
        _ => {}
    }
    let (open, after, most, rules) = tagged_call(format, tools, most, tok, template)?;
    let grammar = tagged_grammar(&open, &after, most, true, None);
    Some(ForcedCall::Lark(format!("{grammar}{rules}")))
}

/// The Lark grammar of a forced harmony call (gpt-oss), one message after the prompt's
/// `<|start|>assistant`:
/// `<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{ARGS}<|call|>`,
/// ARGS valid against NAME's parameters. `<|call|>` ends the reply (the model stops there
/// and the client runs the call), so a reply holds one call whatever
/// `parallel_tool_calls` says. The message goes straight to the call, without an
/// analysis message first: the reply is the call.
pub fn harmony_call(tools: &[&ToolDef], tok: &Tokenizer) -> String {
    let alts: Vec<String> = tools
        .iter()
        .map(|t| {
            format!(
                "({} \" \" {} \"json\" {} %json {})",
                serde_json::to_string(&t.name).unwrap_or_default(),
                tag(tok, "<|constrain|>"),
                tag(tok, "<|message|>"),
                with_layout(t.parameters.clone())
            )
        })
        .collect();
    format!(
        "start: {} \"commentary to=functions.\" ({}) {}\n",
        tag(tok, "<|channel|>"),
        alts.join(" | "),
        tag(tok, "<|call|>")
    )
}

/// The header of a harmony answer in the final channel, as Lark items:
/// `<|channel|>final<|message|>` (what a `response_format` reply of gpt-oss opens with, the
/// answer's JSON following it).
pub fn harmony_final(tok: &Tokenizer) -> String {
    format!(
        "{} \"final\" {}",
        tag(tok, "<|channel|>"),
        tag(tok, "<|message|>")
    )
}
