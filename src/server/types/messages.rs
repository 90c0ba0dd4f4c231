//! `POST /v1/messages` bodies: Anthropic's Messages API, as its SDKs and coding agents send
//! it. Unknown fields are ignored (`metadata`, `service_tier`, `cache_control` on blocks).

use super::common::text_or_list;
use serde::de::Deserializer;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// A Messages request.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
pub struct MessagesRequest {
    /// The model id (see `GET /v1/models`); another model's id is a 404. Optional.
    #[serde(default)]
    pub model: Option<String>,
    /// The conversation: `user` and `assistant` turns. A last `assistant` turn is continued.
    #[schema(min_items = 1)]
    pub messages: Vec<AnthropicMessage>,
    /// Tokens to generate at most (required, at least 1).
    #[schema(minimum = 1)]
    pub max_tokens: i64,
    /// A system prompt: a string or text blocks.
    #[serde(default)]
    pub system: Option<BlockText>,
    /// Text that ends the reply (`stop_reason: "stop_sequence"`).
    #[serde(default)]
    pub stop_sequences: Option<Vec<String>>,
    /// 0 to 1 in Anthropic's API (kiln accepts up to 2). Default 1.
    #[serde(default)]
    #[schema(minimum = 0, maximum = 2)]
    pub temperature: Option<f64>,
    #[serde(default)]
    #[schema(exclusive_minimum = 0, maximum = 1)]
    pub top_p: Option<f64>,
    #[serde(default)]
    #[schema(minimum = 0)]
    pub top_k: Option<i64>,
    /// Stream Anthropic's typed events.
    #[serde(default)]
    pub stream: Option<bool>,
    /// Client tools (`name`, `description`, `input_schema`); at most 128.
    #[serde(default)]
    pub tools: Option<Vec<AnthropicTool>>,
    #[serde(default)]
    pub tool_choice: Option<AnthropicToolChoice>,
    /// `{"type": "enabled", "budget_tokens": N}` or `{"type": "disabled"}`: extended
    /// thinking, for models that reason.
    #[serde(default)]
    pub thinking: Option<ThinkingConfig>,
    /// `format`: `{"type": "json_schema", "schema": {...}}` makes the reply's text valid JSON
    /// for the schema (structured outputs); `effort` is accepted and ignored.
    #[serde(default)]
    pub output_config: Option<OutputConfig>,
    /// Extension (as on chat): the sampler's seed.
    #[serde(default)]
    pub seed: Option<i64>,
}

/// `output_config`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, ToSchema)]
pub struct OutputConfig {
    #[serde(default)]
    pub format: Option<OutputFormat>,
    #[serde(default)]
    pub effort: Option<String>,
}

/// `output_config.format`: a JSON Schema the reply follows.
#[derive(Debug, Clone, PartialEq, Deserialize, ToSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum OutputFormat {
    JsonSchema {
        #[schema(value_type = Object)]
        schema: serde_json::Value,
    },
}

/// `system`, or a `tool_result`'s `content`: a string or text blocks.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
#[serde(untagged)]
pub enum BlockText {
    Text(String),
    Blocks(Vec<TextBlock>),
}

impl BlockText {
    /// The text: blocks joined by newlines.
    pub fn text(&self) -> String {
        match self {
            BlockText::Text(s) => s.clone(),
            BlockText::Blocks(b) => b
                .iter()
                .map(|t| t.text.as_str())
                .collect::<Vec<_>>()
                .join("\n"),
        }
    }
}

/// A text block (`{"type": "text", "text": ...}`).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, ToSchema)]
pub struct TextBlock {
    /// Always `text`.
    #[serde(rename = "type")]
    pub kind: TextKind,
    pub text: String,
}

/// The only block type text may come in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum TextKind {
    Text,
}

/// Who wrote a turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum AnthropicRole {
    User,
    Assistant,
}

/// One turn.
#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct AnthropicMessage {
    pub role: AnthropicRole,
    /// A string or content blocks.
    pub content: AnthropicContent,
}

/// A turn's content.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
#[serde(untagged)]
pub enum AnthropicContent {
    Text(String),
    Blocks(Vec<ContentBlockParam>),
}

/// A content block of a request. Images, documents and server tools are refused (400).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, ToSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ContentBlockParam {
    Text {
        text: String,
    },
    /// A call the assistant made earlier.
    ToolUse {
        id: String,
        name: String,
        #[schema(value_type = Object)]
        input: serde_json::Value,
    },
    /// The answer to a call (in a `user` turn).
    ToolResult {
        tool_use_id: String,
        #[serde(default)]
        content: Option<BlockText>,
        #[serde(default)]
        is_error: Option<bool>,
    },
    /// Earlier reasoning: dropped (templates leave out earlier turns' reasoning).
    Thinking {
        thinking: String,
        #[serde(default)]
        signature: Option<String>,
    },
    /// Earlier reasoning the client cannot read: dropped.
    RedactedThinking {
        #[serde(default)]
        data: Option<String>,
    },
}

/// A tool the model may call.
#[derive(Debug, Clone, PartialEq, Deserialize, ToSchema)]
pub struct AnthropicTool {
    /// `^[a-zA-Z0-9_-]{1,64}$`.
    pub name: String,
    #[serde(default)]
    pub description: Option<String>,
    /// A JSON Schema for the call's `input` (an object).
    #[schema(value_type = Object)]
    pub input_schema: serde_json::Value,
    /// Server tools (`web_search_...`, `bash_...`) have a type; client tools none or
    /// `custom`. Only client tools are supported.
    #[serde(default, rename = "type")]
    pub kind: Option<String>,
}

/// `tool_choice`.
#[derive(Debug, Clone, PartialEq, Deserialize, ToSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum AnthropicToolChoice {
    /// The model decides.
    Auto {
        #[serde(default)]
        disable_parallel_tool_use: Option<bool>,
    },
    /// The model must call one of the tools.
    Any {
        #[serde(default)]
        disable_parallel_tool_use: Option<bool>,
    },
    /// The model must call this tool.
    Tool {
        name: String,
        #[serde(default)]
        disable_parallel_tool_use: Option<bool>,
    },
    /// No calls.
    None,
}

/// `thinking`.
#[derive(Debug, Clone, PartialEq, Deserialize, ToSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ThinkingConfig {
    Enabled {
        #[serde(default)]
        budget_tokens: Option<i64>,
    },
    Disabled,
    Adaptive,
}

/// A Messages reply.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct MessagesResponse {
    /// `msg_...`
    pub id: String,
    /// Always `message`.
    #[serde(rename = "type")]
    pub kind: String,
    /// Always `assistant`.
    pub role: String,
    pub model: String,
    pub content: Vec<ContentBlock>,
    /// `end_turn`, `max_tokens`, `stop_sequence` or `tool_use` (null in `message_start`).
    pub stop_reason: Option<String>,
    /// The stop sequence that ended the reply, if one did.
    pub stop_sequence: Option<String>,
    pub usage: AnthropicUsage,
}

/// A content block of a reply.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ContentBlock {
    Text {
        text: String,
    },
    /// A call: `input` is the arguments object.
    ToolUse {
        /// `toolu_...`; the next turn's `tool_result` answers it with this `tool_use_id`.
        id: String,
        name: String,
        #[schema(value_type = Object)]
        input: serde_json::Value,
    },
    /// The model's reasoning (when `thinking` is enabled and the model reasons).
    Thinking {
        thinking: String,
        signature: String,
    },
}

/// Token counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, ToSchema)]
pub struct AnthropicUsage {
    /// Prompt tokens not read from the prefix cache.
    pub input_tokens: usize,
    pub output_tokens: usize,
    /// Prompt tokens whose KV came from kiln's prefix cache.
    pub cache_read_input_tokens: usize,
    /// Always 0 (kiln's prefix cache is automatic).
    pub cache_creation_input_tokens: usize,
}

/// `POST /v1/messages/count_tokens`: the fields that make the prompt.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
pub struct CountTokensRequest {
    #[serde(default)]
    pub model: Option<String>,
    #[schema(min_items = 1)]
    pub messages: Vec<AnthropicMessage>,
    #[serde(default)]
    pub system: Option<BlockText>,
    #[serde(default)]
    pub tools: Option<Vec<AnthropicTool>>,
    #[serde(default)]
    pub tool_choice: Option<AnthropicToolChoice>,
    #[serde(default)]
    pub thinking: Option<ThinkingConfig>,
}

/// The prompt's size.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct CountTokensResponse {
    pub input_tokens: usize,
}

/// Anthropic's error envelope: `{"type": "error", "error": {"type", "message"}}`.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct AnthropicErrorResponse {
    /// Always `error`.
    #[serde(rename = "type")]
    pub kind: String,
    pub error: AnthropicErrorBody,
}

/// The error itself.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct AnthropicErrorBody {
    /// `invalid_request_error`, `authentication_error`, `not_found_error`,
    /// `request_too_large`, `rate_limit_error`, `timeout_error`, `api_error` or
    /// `overloaded_error`.
    #[serde(rename = "type")]
    pub kind: String,
    pub message: String,
}

impl<'de> Deserialize<'de> for BlockText {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        text_or_list(
            d,
            BlockText::Text,
            BlockText::Blocks,
            "a string or an array of text blocks",
        )
    }
}

impl<'de> Deserialize<'de> for AnthropicContent {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        text_or_list(
            d,
            AnthropicContent::Text,
            AnthropicContent::Blocks,
            "a string or an array of content blocks",
        )
    }
}
