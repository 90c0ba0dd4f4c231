//! `POST /v1/chat/completions` bodies.

use super::common::{ChatLogprobs, TimingsBody, UsageBody};
use super::sampling::SamplingFields;
use super::tools::{Tool, ToolCall, ToolCallDelta, ToolChoiceSpec};
use serde::de::{self, Deserializer, SeqAccess, Visitor};
use serde::{Deserialize, Serialize};
use std::fmt;
use utoipa::ToSchema;

/// A chat completion request.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
pub struct ChatCompletionRequest {
    /// The model id (see `GET /v1/models`); another model's id is a 404. Optional.
    #[serde(default)]
    pub model: Option<String>,
    /// The conversation so far, oldest first.
    #[schema(min_items = 1)]
    pub messages: Vec<ChatMessage>,
    /// Tokens to generate at most per choice; wins over `max_tokens` when both are given.
    #[serde(default)]
    #[schema(minimum = 1)]
    pub max_completion_tokens: Option<i64>,
    /// Return each generated token's logprob.
    #[serde(default)]
    pub logprobs: Option<bool>,
    /// With `logprobs`: how many alternatives per token, 0 to 20.
    #[serde(default)]
    #[schema(minimum = 0, maximum = 20)]
    pub top_logprobs: Option<i64>,
    /// Sampling, stopping, streaming and `response_format` (shared with completions).
    #[serde(flatten)]
    pub sampling: SamplingFields,
    /// Extension: end the rendered prompt where the assistant's reply starts. Default true.
    #[serde(default)]
    pub add_generation_prompt: Option<bool>,
    /// Functions the model may call (at most 128).
    #[serde(default)]
    pub tools: Option<Vec<Tool>>,
    /// `none`, `auto` (the default with tools), `required`, or a named function.
    #[serde(default)]
    pub tool_choice: Option<ToolChoiceSpec>,
    /// Allow several calls in one reply. Default true.
    #[serde(default)]
    pub parallel_tool_calls: Option<bool>,
    /// Extension (vLLM, llama-server): extra variables for the chat template, e.g.
    /// `{"enable_thinking": false}` for Qwen3 and SmolLM3. `messages`, `tools`,
    /// `add_generation_prompt`, `bos_token` and `eos_token` are the server's (400).
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub chat_template_kwargs: Option<serde_json::Map<String, serde_json::Value>>,
}

/// Who wrote a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    System,
    /// OpenAI's newer name for `system`; rendered as `system` for the model's template.
    Developer,
    User,
    Assistant,
    Tool,
}

impl Role {
    /// The role name the chat template sees.
    pub fn template_name(self) -> &'static str {
        match self {
            Role::System | Role::Developer => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool",
        }
    }
}

/// One message of the conversation.
#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct ChatMessage {
    pub role: Role,
    /// A string or a list of text parts; may be null for an assistant message with tool calls.
    #[serde(default)]
    pub content: Option<MessageContent>,
    #[serde(default)]
    pub name: Option<String>,
    /// For `tool` messages: the call this answers.
    #[serde(default)]
    pub tool_call_id: Option<String>,
    /// For `assistant` messages: calls made earlier (passed to the template as they are);
    /// each must be an object, as documented (anything else is a 400 naming it).
    #[serde(default, deserialize_with = "tool_call_objects")]
    #[schema(value_type = Option<Vec<Object>>)]
    pub tool_calls: Option<Vec<serde_json::Value>>,
    /// Results of this message's calls, for templates that render them inside the assistant
    /// turn (Gemma 4: `{name, response}` each); kiln fills it from the `tool` messages that
    /// follow the calls (`server::history`), a client never sends it.
    #[serde(skip)]
    #[schema(ignore)]
    pub tool_responses: Option<Vec<serde_json::Value>>,
}

fn tool_call_objects<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<Vec<serde_json::Value>>, D::Error> {
    let calls: Option<Vec<serde_json::Map<String, serde_json::Value>>> = Option::deserialize(d)?;
    Ok(calls.map(|c| c.into_iter().map(serde_json::Value::Object).collect()))
}

impl ChatMessage {
    /// A message of `role` whose content is `text`.
    pub fn text(role: Role, text: String) -> ChatMessage {
        ChatMessage {
            role,
            content: Some(MessageContent::Text(text)),
            name: None,
            tool_call_id: None,
            tool_calls: None,
            tool_responses: None,
        }
    }
}

/// Message content: a string, or a list of content parts (only text parts are supported).
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
#[serde(untagged)]
pub enum MessageContent {
    Text(String),
    Parts(Vec<ContentPart>),
}

impl MessageContent {
    /// The text: a string as it is, text parts joined by newlines.
    pub fn text(&self) -> String {
        match self {
            MessageContent::Text(s) => s.clone(),
            MessageContent::Parts(parts) => parts
                .iter()
                .map(|p| match p {
                    ContentPart::Text { text } => text.as_str(),
                })
                .collect::<Vec<_>>()
                .join("\n"),
        }
    }
}

/// A content part. Any other `type` (image_url, input_audio, ...) is a 400 naming it.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, ToSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ContentPart {
    Text { text: String },
}

// A visitor rather than `#[serde(untagged)]`, so that an error inside a part (an unknown part
// type) keeps its path and message instead of "did not match any variant".
impl<'de> Deserialize<'de> for MessageContent {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = MessageContent;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string or an array of content parts")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<MessageContent, E> {
                Ok(MessageContent::Text(s.to_string()))
            }
            fn visit_string<E: de::Error>(self, s: String) -> Result<MessageContent, E> {
                Ok(MessageContent::Text(s))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<MessageContent, A::Error> {
                let mut parts = Vec::new();
                while let Some(p) = seq.next_element::<ContentPart>()? {
                    parts.push(p);
                }
                Ok(MessageContent::Parts(parts))
            }
        }
        d.deserialize_any(V)
    }
}

/// A chat completion (non-streaming response).
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct ChatCompletionResponse {
    /// `chatcmpl-...`
    pub id: String,
    /// Always `chat.completion`.
    pub object: String,
    /// Unix seconds.
    pub created: u64,
    pub model: String,
    /// Changes when the model, kiln's build or the instruction set does.
    pub system_fingerprint: String,
    pub choices: Vec<ChatChoice>,
    pub usage: UsageBody,
}

/// One choice of a chat completion.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct ChatChoice {
    pub index: usize,
    pub message: ChatResponseMessage,
    pub logprobs: Option<ChatLogprobs>,
    /// `stop`, `length`, `tool_calls`, or `abort` (cancelled, e.g. at shutdown past the drain
    /// deadline).
    pub finish_reason: String,
}

/// The assistant's message.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct ChatResponseMessage {
    /// Always `assistant`.
    pub role: String,
    pub content: Option<String>,
    /// Extension (vLLM, llama-server): the reply's `<think>` block, for models whose template
    /// writes one (Qwen3, SmolLM3, DeepSeek-R1 distills); absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
    /// Always null.
    pub refusal: Option<String>,
    /// The calls the model made (then `finish_reason` is `tool_calls`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<ToolCall>>,
}

/// One server-sent event of a streamed chat completion.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct ChatCompletionChunk {
    /// The same on every chunk of a stream.
    pub id: String,
    /// Always `chat.completion.chunk`.
    pub object: String,
    pub created: u64,
    pub model: String,
    pub system_fingerprint: String,
    /// Empty on the usage chunk.
    pub choices: Vec<ChatChunkChoice>,
    /// Only on the last chunk, when `stream_options.include_usage` is set.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<UsageBody>,
    /// kiln's timings of the request, on the usage chunk of a stream only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timings: Option<TimingsBody>,
}

/// A choice's part of a chunk.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct ChatChunkChoice {
    pub index: usize,
    pub delta: ChatDelta,
    pub logprobs: Option<ChatLogprobs>,
    /// Null until the choice's last chunk, whose delta is empty.
    pub finish_reason: Option<String>,
}

/// What a chunk adds to the message: the role on the first chunk, then content.
#[derive(Debug, Clone, Default, PartialEq, Serialize, ToSchema)]
pub struct ChatDelta {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    /// More of the reply's `<think>` block (see [`ChatResponseMessage::reasoning_content`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<ToolCallDelta>>,
}

#[cfg(test)]
mod tool_call_tests {
    use super::*;

    #[test]
    fn earlier_tool_calls_must_be_objects() {
        let ok: ChatMessage = serde_json::from_str(
            r#"{"role": "assistant", "tool_calls": [{"id": "c", "type": "function"}]}"#,
        )
        .unwrap();
        assert_eq!(ok.tool_calls.unwrap()[0]["id"], "c");
        let none: ChatMessage = serde_json::from_str(r#"{"role": "assistant"}"#).unwrap();
        assert!(none.tool_calls.is_none());
        for bad in [r#"[[null, null]]"#, r#"[null]"#, r#"["call"]"#] {
            let text = format!(r#"{{"role": "system", "tool_calls": {bad}}}"#);
            assert!(serde_json::from_str::<ChatMessage>(&text).is_err(), "{bad}");
        }
    }
}
