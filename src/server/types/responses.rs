//! `POST /v1/responses` bodies: OpenAI's Responses API, as the `openai` SDKs and the Agents
//! SDK send it. Unknown fields are ignored (`include`, `truncation`, `prompt_cache_key`,
//! `service_tier`, ...); a known field of the wrong type is a 400 naming it.

use super::common::text_or_list;
use super::common::ChatTokenLogprob;
use serde::de::{self, Deserializer};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use utoipa::ToSchema;

/// A Responses request.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
pub struct ResponsesRequest {
    /// The model id (see `GET /v1/models`); another model's id is a 404. Optional.
    #[serde(default)]
    pub model: Option<String>,
    /// A string (one user message) or a list of items: messages (`input_text` /
    /// `output_text` parts), `function_call` and `function_call_output` items, `reasoning`
    /// items (dropped: the model does not read earlier reasoning); see `ResponseInput`. (Any
    /// JSON here: a message item may leave out its `type`, which no tagged schema can say.)
    #[serde(default)]
    #[schema(value_type = Option<Value>)]
    pub input: Option<ResponseInput>,
    /// A system message put before the conversation (not carried over by
    /// `previous_response_id`).
    #[serde(default)]
    pub instructions: Option<String>,
    /// Tokens to generate at most (reasoning included); a reply cut by it is `incomplete`.
    #[serde(default)]
    #[schema(minimum = 1)]
    pub max_output_tokens: Option<i64>,
    /// 0 to 2; 0 is greedy. Default 1.
    #[serde(default)]
    #[schema(minimum = 0, maximum = 2)]
    pub temperature: Option<f64>,
    /// Nucleus sampling, in (0, 1]. Default 1.
    #[serde(default)]
    #[schema(exclusive_minimum = 0, maximum = 1)]
    pub top_p: Option<f64>,
    /// Function tools (`{"type": "function", "name", "description", "parameters"}`); at most
    /// 128. Built-in tools (web search, file search, ...) are refused (400).
    #[serde(default)]
    pub tools: Option<Vec<ResponsesTool>>,
    /// `none`, `auto` (the default with tools), `required`, or `{"type": "function", "name"}`.
    #[serde(default)]
    pub tool_choice: Option<ResponsesToolChoice>,
    /// Allow several calls in one reply. Default true.
    #[serde(default)]
    pub parallel_tool_calls: Option<bool>,
    /// `format`: `text` (default), `json_object` or `json_schema` (the output text is valid
    /// JSON for the schema: enforced token by token).
    #[serde(default)]
    pub text: Option<TextConfig>,
    /// Stream the typed events (`response.created` ... `response.completed`).
    #[serde(default)]
    pub stream: Option<bool>,
    /// Continue the conversation of a stored response: its input and output come before
    /// this request's input. An unknown (or expired) id is a 404.
    #[serde(default)]
    pub previous_response_id: Option<String>,
    /// Keep the response (default true) for `previous_response_id` and
    /// `GET /v1/responses/{id}`, in memory, for `server.responses_store_ttl` seconds, at most
    /// `server.responses_store_entries` of them (the oldest go first).
    #[serde(default)]
    pub store: Option<bool>,
    /// Up to 16 string pairs, returned with the response.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub metadata: Option<Map<String, Value>>,
    /// An end-user id (accepted, returned, not used).
    #[serde(default)]
    pub user: Option<String>,
    /// Extension (as on chat): the sampler's seed.
    #[serde(default)]
    pub seed: Option<i64>,
    /// Extension: keep only the `top_k` most likely tokens (0 = off).
    #[serde(default)]
    #[schema(minimum = 0)]
    pub top_k: Option<i64>,
    /// 0 to 20: with each output token's logprob, this many alternatives. Setting it (or
    /// `include: ["message.output_text.logprobs"]`) returns the logprobs of every generated
    /// token in the `output_text` part (and on each `response.output_text.delta`).
    #[serde(default)]
    #[schema(minimum = 0, maximum = 20)]
    pub top_logprobs: Option<i64>,
    /// `message.output_text.logprobs` returns the logprobs; other values are accepted and
    /// ignored.
    #[serde(default)]
    pub include: Option<Vec<String>>,
    /// `effort`: for models whose template can think (Qwen3, SmolLM3, DeepSeek-R1 distills),
    /// `none` sets the template's `enable_thinking` to false and any other effort to true;
    /// absent, the template's default. The reasoning comes back as a `reasoning` item.
    #[serde(default)]
    pub reasoning: Option<ReasoningConfig>,
    /// Extension (as on chat): extra variables for the chat template; `enable_thinking` here
    /// wins over `reasoning.effort`.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub chat_template_kwargs: Option<Map<String, Value>>,
}

/// `reasoning`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize, ToSchema)]
pub struct ReasoningConfig {
    /// `none`, `minimal`, `low`, `medium`, `high` or `xhigh` (only `none` or not matters).
    #[serde(default)]
    pub effort: Option<String>,
    /// Accepted; kiln does not summarize reasoning.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,
}

/// `input`: a string or a list of items.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
#[serde(untagged)]
pub enum ResponseInput {
    Text(String),
    Items(Vec<InputItem>),
}

/// An input item. `type` may be left out of a message (`{"role", "content"}`).
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum InputItem {
    Message(InputMessage),
    /// A call the model made earlier (as a response's output gave it).
    FunctionCall(FunctionCallItem),
    /// The answer to a call.
    FunctionCallOutput(FunctionCallOutputItem),
    /// Earlier reasoning: accepted and dropped.
    Reasoning(ReasoningInput),
}

/// A message of the conversation.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, ToSchema)]
pub struct InputMessage {
    pub role: InputRole,
    /// A string or content parts.
    pub content: InputContent,
}

/// Who wrote a message (`developer` is rendered as `system`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum InputRole {
    User,
    Assistant,
    System,
    Developer,
}

/// A message's content.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
#[serde(untagged)]
pub enum InputContent {
    Text(String),
    Parts(Vec<InputPart>),
}

impl InputContent {
    /// The text: parts joined by newlines.
    pub fn text(&self) -> String {
        match self {
            InputContent::Text(s) => s.clone(),
            InputContent::Parts(p) => p.iter().map(InputPart::text).collect::<Vec<_>>().join("\n"),
        }
    }
}

/// A content part. Images, files and audio are refused (400 naming the part).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, ToSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum InputPart {
    InputText {
        text: String,
    },
    /// An earlier reply's text, passed back.
    OutputText {
        text: String,
    },
    Refusal {
        refusal: String,
    },
}

impl InputPart {
    fn text(&self) -> &str {
        match self {
            InputPart::InputText { text } | InputPart::OutputText { text } => text,
            InputPart::Refusal { refusal } => refusal,
        }
    }
}

/// A `function_call` item.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, ToSchema)]
pub struct FunctionCallItem {
    /// The id the `function_call_output` answers with.
    pub call_id: String,
    pub name: String,
    /// The arguments' JSON text.
    pub arguments: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
}

/// A `function_call_output` item.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, ToSchema)]
pub struct FunctionCallOutputItem {
    pub call_id: String,
    /// A string, or content parts (their text is joined).
    pub output: InputContent,
}

/// A `reasoning` item (dropped).
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize, ToSchema)]
pub struct ReasoningInput {
    #[serde(default)]
    pub id: Option<String>,
}

/// A function tool.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, ToSchema)]
pub struct ResponsesTool {
    /// Only `function`.
    #[serde(rename = "type")]
    pub kind: String,
    /// `^[a-zA-Z0-9_-]{1,64}$`.
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// A JSON Schema for the arguments object; every call's arguments validate against it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub parameters: Option<Value>,
    /// Accepted; kiln always enforces the parameters schema.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strict: Option<bool>,
}

/// `tool_choice`.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
#[serde(untagged)]
pub enum ResponsesToolChoice {
    /// `none`, `auto` or `required`.
    Mode(String),
    /// `{"type": "function", "name": ...}`.
    Function(NamedFunction),
}

/// A named function for `tool_choice`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, ToSchema)]
pub struct NamedFunction {
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default)]
    pub name: Option<String>,
}

/// `text`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize, ToSchema)]
pub struct TextConfig {
    #[serde(default)]
    pub format: Option<TextFormat>,
    /// Accepted and returned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verbosity: Option<String>,
}

/// `text.format`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, ToSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum TextFormat {
    Text,
    JsonObject,
    JsonSchema {
        name: String,
        #[schema(value_type = Object)]
        schema: Value,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        description: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        strict: Option<bool>,
    },
}

/// A response: what `POST /v1/responses` answers (and the stream's events carry), and what
/// `GET /v1/responses/{id}` returns.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct ResponseObject {
    /// `resp_...`
    pub id: String,
    /// Always `response`.
    pub object: String,
    /// Unix seconds.
    pub created_at: u64,
    /// `in_progress` (while streaming), `completed`, `incomplete` or `failed`.
    pub status: String,
    /// Set when `status` is `failed`.
    pub error: Option<ResponseError>,
    /// Set when `status` is `incomplete`: `{"reason": "max_output_tokens"}` (or a null
    /// reason when the server aborted the request).
    pub incomplete_details: Option<IncompleteDetails>,
    pub instructions: Option<String>,
    pub max_output_tokens: Option<i64>,
    pub model: String,
    /// Reasoning, message and function-call items, in the order the model wrote them.
    pub output: Vec<OutputItem>,
    pub parallel_tool_calls: bool,
    pub previous_response_id: Option<String>,
    pub store: bool,
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    /// As requested (`auto` when not).
    pub tool_choice: ResponsesToolChoice,
    pub tools: Vec<ResponsesTool>,
    pub text: TextConfig,
    /// Always `disabled`.
    pub truncation: String,
    #[schema(value_type = Object)]
    pub metadata: Map<String, Value>,
    pub user: Option<String>,
    /// Null until the response is done.
    pub usage: Option<ResponseUsage>,
    /// As requested.
    pub reasoning: Option<ReasoningConfig>,
}

/// An output item.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum OutputItem {
    /// The reply's `<think>` block (models whose template writes one).
    Reasoning {
        /// `rs_...`
        id: String,
        /// Always empty (kiln does not summarize).
        #[schema(value_type = Vec<Object>)]
        summary: Vec<Value>,
        content: Vec<OutputContent>,
        status: String,
    },
    /// The reply's text.
    Message {
        /// `msg_...`
        id: String,
        /// Always `assistant`.
        role: String,
        content: Vec<OutputContent>,
        status: String,
    },
    /// A call: answer it with a `function_call_output` item carrying its `call_id`.
    FunctionCall {
        /// `fc_...`
        id: String,
        /// `call_...`
        call_id: String,
        name: String,
        /// The arguments' JSON text.
        arguments: String,
        status: String,
    },
}

/// A part of an output item.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum OutputContent {
    OutputText {
        text: String,
        /// Always empty.
        #[schema(value_type = Vec<Object>)]
        annotations: Vec<Value>,
        /// Every generated token's logprob (reasoning and call tokens included), when asked
        /// (`top_logprobs` or `include`); else empty.
        logprobs: Vec<ChatTokenLogprob>,
    },
    ReasoningText {
        text: String,
    },
}

/// `error` of a failed response.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct ResponseError {
    /// `server_error` or `rate_limit_exceeded`.
    pub code: String,
    pub message: String,
}

/// `incomplete_details`.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct IncompleteDetails {
    pub reason: Option<String>,
}

/// Token counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, ToSchema)]
pub struct ResponseUsage {
    pub input_tokens: usize,
    pub input_tokens_details: InputTokensDetails,
    pub output_tokens: usize,
    pub output_tokens_details: OutputTokensDetails,
    pub total_tokens: usize,
}

/// `usage.input_tokens_details`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, ToSchema)]
pub struct InputTokensDetails {
    /// Prompt tokens whose KV came from kiln's prefix cache.
    pub cached_tokens: usize,
}

/// `usage.output_tokens_details`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, ToSchema)]
pub struct OutputTokensDetails {
    /// Tokens of the reasoning item (the reasoning text tokenized again).
    pub reasoning_tokens: usize,
}

/// `DELETE /v1/responses/{id}`.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct ResponseDeleted {
    pub id: String,
    /// Always `response`.
    pub object: String,
    /// Always true.
    pub deleted: bool,
}

impl<'de> Deserialize<'de> for ResponseInput {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        text_or_list(
            d,
            ResponseInput::Text,
            ResponseInput::Items,
            "a string or an array of input items",
        )
    }
}

impl<'de> Deserialize<'de> for InputContent {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        text_or_list(
            d,
            InputContent::Text,
            InputContent::Parts,
            "a string or an array of content parts",
        )
    }
}

impl<'de> Deserialize<'de> for ResponsesToolChoice {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match Value::deserialize(d)? {
            Value::String(s) => Ok(ResponsesToolChoice::Mode(s)),
            v @ Value::Object(_) => serde_json::from_value(v)
                .map(ResponsesToolChoice::Function)
                .map_err(de::Error::custom),
            _ => Err(de::Error::custom(
                "expected \"none\", \"auto\", \"required\" or {\"type\": \"function\", \"name\": ...}",
            )),
        }
    }
}

/// Item kinds by `type`; a message may leave `type` out.
impl<'de> Deserialize<'de> for InputItem {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let Value::Object(map) = Value::deserialize(d)? else {
            return Err(de::Error::custom("an input item must be an object"));
        };
        let kind = match map.get("type") {
            None | Some(Value::Null) if map.contains_key("role") => "message".to_string(),
            Some(Value::String(s)) => s.clone(),
            _ => return Err(de::Error::custom("an input item needs a string `type`")),
        };
        let v = Value::Object(map);
        let item = match kind.as_str() {
            "message" => serde_json::from_value(v).map(InputItem::Message),
            "function_call" => serde_json::from_value(v).map(InputItem::FunctionCall),
            "function_call_output" => serde_json::from_value(v).map(InputItem::FunctionCallOutput),
            "reasoning" => serde_json::from_value(v).map(InputItem::Reasoning),
            other => {
                return Err(de::Error::custom(format!(
                    "input items of type {other:?} are not supported; use message, \
                     function_call, function_call_output or reasoning"
                )))
            }
        };
        item.map_err(|e| de::Error::custom(format!("{kind} item: {e}")))
    }
}

/// A page of a stored response's input items (`GET /v1/responses/{id}/input_items`).
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct InputItemList {
    /// Always `list`.
    pub object: String,
    /// Items as the input gave them (`message`, `function_call`, `function_call_output`),
    /// each with an `id`.
    #[schema(value_type = Vec<Object>)]
    pub data: Vec<Value>,
    pub first_id: Option<String>,
    pub last_id: Option<String>,
    pub has_more: bool,
}
