//! The wire types of structured output and tool calling: `response_format`, `tools`, `tool_choice`, and the
//! tool calls of a reply (whole, and as stream deltas).

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// `response_format`.
#[derive(Debug, Clone, PartialEq, Deserialize, ToSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ResponseFormat {
    /// Free text (the default).
    Text,
    /// Any JSON object.
    JsonObject,
    /// JSON valid against a schema: every reply parses and validates (tokens that would
    /// break it are masked before sampling). An unsupported schema feature is a 400 naming it.
    JsonSchema { json_schema: JsonSchemaFormat },
}

/// `response_format.json_schema`.
#[derive(Debug, Clone, PartialEq, Deserialize, ToSchema)]
pub struct JsonSchemaFormat {
    pub name: String,
    #[serde(default)]
    pub description: Option<String>,
    /// A JSON Schema (draft 2020-12 subset: the keywords llguidance enforces).
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub schema: Option<serde_json::Value>,
    /// Accepted; kiln always enforces the schema.
    #[serde(default)]
    pub strict: Option<bool>,
}

/// A tool the model may call.
#[derive(Debug, Clone, PartialEq, Deserialize, ToSchema)]
pub struct Tool {
    /// Only `function`.
    #[serde(rename = "type")]
    pub kind: String,
    pub function: FunctionDef,
}

/// A function's definition.
#[derive(Debug, Clone, PartialEq, Deserialize, ToSchema)]
pub struct FunctionDef {
    /// `^[a-zA-Z0-9_-]{1,64}$`.
    pub name: String,
    #[serde(default)]
    pub description: Option<String>,
    /// A JSON Schema for the arguments object; the arguments of every call validate against it.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub parameters: Option<serde_json::Value>,
    /// Accepted; kiln always enforces the parameters schema.
    #[serde(default)]
    pub strict: Option<bool>,
}

/// `tool_choice`: `"none"`, `"auto"`, `"required"`, or `{"type": "function", "function":
/// {"name": ...}}`.
#[derive(Debug, Clone, PartialEq, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum ToolChoiceSpec {
    Mode(String),
    Named(NamedToolChoice),
}

/// A named function for `tool_choice`.
#[derive(Debug, Clone, PartialEq, Deserialize, ToSchema)]
pub struct NamedToolChoice {
    #[serde(rename = "type")]
    pub kind: String,
    pub function: FunctionName,
}

/// A function's name.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, ToSchema)]
pub struct FunctionName {
    pub name: String,
}

/// A call in a reply.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct ToolCall {
    /// `call_...`; a `tool` message answers it with this `tool_call_id`.
    pub id: String,
    /// Always `function`.
    #[serde(rename = "type")]
    pub kind: String,
    pub function: FunctionCall,
}

/// The function called.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct FunctionCall {
    pub name: String,
    /// The arguments as a JSON string.
    pub arguments: String,
}

/// A call's part of a stream chunk: the first carries `id`, `type` and the name with
/// `arguments: ""`; the next ones argument fragments. Clients join them by `index`.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct ToolCallDelta {
    pub index: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    pub function: FunctionCallDelta,
}

/// Part of a function call.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct FunctionCallDelta {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub arguments: Option<String>,
}
