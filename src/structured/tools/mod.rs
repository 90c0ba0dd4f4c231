//! Tool calling: what a request offers ([`ToolDef`], [`ToolChoice`]), how the model family
//! writes a call ([`ToolFormat`], detected from its chat template), and reading calls out of
//! the generated text, whole or while it streams ([`ToolStream`]).
//!
//! Formats:
//! - **Hermes / Qwen**: `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`, text around
//!   it is content;
//! - **Qwen3.5 / Qwen3-Coder XML**: `<tool_call>\n<function=NAME>\n<parameter=ARG>\nVALUE\n
//!   </parameter>\n</function>\n</tool_call>`, each value raw (a string's text, other values
//!   as JSON); [`reader`] rebuilds the arguments' JSON object;
//! - **Llama 3.x**: the reply is one JSON object `{"name": ..., "parameters": {...}}`
//!   (optionally after `<|python_tag|>`);
//! - **Mistral**: `[TOOL_CALLS]` then a JSON array of `{"name", "arguments"}` (Nemo), or
//!   `[TOOL_CALLS]name[ARGS]{...}` (Small 3.2 and later);
//! - **Phi-4-mini**: `<|tool_call|>{"name": ..., "arguments": {...}}<|/tool_call|>` (a list of
//!   calls inside the tags is read too);
//! - **Granite 3.x**: `<|tool_call|>` then a JSON list of `{"name", "arguments"}`;
//! - **Harmony** (gpt-oss): a message to `functions.NAME` on the commentary channel, its body
//!   the arguments; [`super::harmony`] rewrites it as a Hermes call before this reader sees it
//!   (a forced call is constrained to that message, [`native::harmony_call`]; under "auto"
//!   calls are read, not constrained);
//! - **LFM2**: `<|tool_call_start|>[name(arg="value", n=1), ...]<|tool_call_end|>`, the
//!   values Python literals ([`pythonic`]);
//! - **Gemma 4**: `<|tool_call>call:NAME{arg:<|"|>text<|"|>,n:1}<tool_call|>` ([`gemma4`]);
//! - **Generic** (any template without tool support, the default SmolLM2 among them): kiln
//!   describes the tools in a system message and constrains the reply to a JSON envelope,
//!   `{"tool_calls": [{"name": ..., "arguments": {...}}]}` or `{"response": "..."}`
//!   ([`generic`]).

pub mod call_json;
pub mod gemma4;
pub mod generic;
pub mod json_stream;
pub mod literal;
pub mod native;
pub mod pythonic;
pub mod qwen_xml;
pub mod reader;
pub mod stream;

pub use reader::Reader;
pub use stream::ToolStream;

use serde_json::Value;

/// Most tools one request may offer.
pub const MAX_TOOLS: usize = 128;

/// One function the model may call.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolDef {
    pub name: String,
    pub description: Option<String>,
    /// A JSON Schema for the arguments object (`{"type": "object"}` when absent).
    pub parameters: Value,
}

/// `tool_choice`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolChoice {
    /// No call: the tools are not offered.
    None,
    /// The model chooses between answering and calling.
    Auto,
    /// The reply must be one or more calls.
    Required,
    /// The reply must be a call of this function.
    Named(String),
}

/// The syntax a model family writes calls in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolFormat {
    Generic,
    Hermes,
    /// Qwen3.5's and Qwen3-Coder's XML calls.
    QwenXml,
    Llama3,
    Mistral,
    Phi4,
    Granite,
    Harmony,
    /// LFM2's pythonic calls.
    Lfm2,
    /// Gemma 4's `call:NAME{...}`.
    Gemma4,
}

/// How a reply is read for calls: its syntax, and whether it can only be calls
/// (`tool_choice` "required" or a named function: then nothing in it is content).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallReading {
    pub format: ToolFormat,
    pub forced: bool,
}

/// What a delta adds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolDelta {
    Content(String),
    /// A call begins (index in the reply, function name).
    CallStart {
        index: usize,
        name: String,
    },
    /// More of call `index`'s arguments (raw JSON text).
    Arguments {
        index: usize,
        fragment: String,
    },
}

/// A call as far as it has arrived.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PartialCall {
    /// Known once its string is complete.
    pub name: Option<String>,
    /// The arguments' JSON text so far (raw, as the model wrote it).
    pub arguments: String,
    /// Its object (and its syntax around it) is complete.
    pub complete: bool,
}

/// What a reply holds so far.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reply {
    /// Text for `message.content` (text that may still turn into call syntax is held back
    /// until it is known; call syntax never is content).
    pub content: String,
    pub calls: Vec<PartialCall>,
}

/// Reads a whole reply (or, with `done` false, a reply still arriving) in `format`: what a
/// [`Reader`] fed the text at once has sent.
pub fn parse_reply(format: ToolFormat, text: &str, done: bool) -> Reply {
    let mut r = Reader::new(format, false);
    r.push(text);
    if done {
        r.finish();
    }
    r.reply()
}

impl ToolFormat {
    /// The format a chat template's source shows (it renders past calls and describes the
    /// syntax): Generic when the template has no tool support kiln knows.
    pub fn detect(template: &str) -> ToolFormat {
        if !template.contains("tools") && !template.contains("tool_calls") {
            return ToolFormat::Generic;
        }
        if crate::structured::harmony::is_harmony_template(template) {
            ToolFormat::Harmony
        } else if template.contains("<|tool_list_start|>") || template.contains("List of tools: [")
        {
            // LFM2 (and LFM2.5, whose list has no tags): the template lists the tools and
            // the model calls in its own syntax, which the template never shows.
            ToolFormat::Lfm2
        } else if template.contains("<|tool_call>call:") {
            ToolFormat::Gemma4
        } else if template.contains("<|tool_call|>") {
            // Phi-4-mini closes its calls; Granite writes one list after the tag.
            if template.contains("<|/tool_call|>") {
                ToolFormat::Phi4
            } else {
                ToolFormat::Granite
            }
        } else if template.contains("<tool_call>")
            && template.contains("<function=")
            && template.contains("<parameter=")
        {
            ToolFormat::QwenXml
        } else if template.contains("<tool_call>") {
            ToolFormat::Hermes
        } else if template.contains("[TOOL_CALLS]") {
            ToolFormat::Mistral
        } else if template.contains("<|start_header_id|>")
            && (template.contains("\"parameters\"") || template.contains("<|python_tag|>"))
        {
            ToolFormat::Llama3
        } else {
            ToolFormat::Generic
        }
    }

    /// Whether the model's own template receives `tools` (the native formats) or kiln
    /// describes them itself (Generic).
    pub fn template_renders_tools(self) -> bool {
        self != ToolFormat::Generic
    }

    /// Control tokens that belong to the call syntax: decoded text drops control tokens, so
    /// the parser is fed their text explicitly.
    pub fn trigger_texts(self) -> &'static [&'static str] {
        match self {
            ToolFormat::Mistral => &["[TOOL_CALLS]", "[ARGS]", "[CALL_ID]"],
            ToolFormat::Llama3 => &["<|python_tag|>"],
            ToolFormat::Hermes | ToolFormat::QwenXml => &["<tool_call>", "</tool_call>"],
            ToolFormat::Phi4 => &["<|tool_call|>", "<|/tool_call|>"],
            ToolFormat::Granite => &["<|tool_call|>"],
            ToolFormat::Harmony => &crate::structured::harmony::CONTROL,
            ToolFormat::Lfm2 => &[pythonic::OPEN, pythonic::CLOSE],
            ToolFormat::Gemma4 => &[gemma4::OPEN, gemma4::CLOSE, gemma4::QUOTE],
            ToolFormat::Generic => &[],
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            ToolFormat::Generic => "generic",
            ToolFormat::Hermes => "hermes",
            ToolFormat::QwenXml => "qwen-xml",
            ToolFormat::Llama3 => "llama3",
            ToolFormat::Mistral => "mistral",
            ToolFormat::Phi4 => "phi4",
            ToolFormat::Granite => "granite",
            ToolFormat::Harmony => "harmony",
            ToolFormat::Lfm2 => "lfm2",
            ToolFormat::Gemma4 => "gemma4",
        }
    }
}
