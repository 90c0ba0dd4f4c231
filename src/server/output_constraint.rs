//! A request's output constraint, the handlers' side of [`crate::structured`]:
//! `response_format` and tools checked (a 400 naming
//! the field for anything malformed or unsupported), the conversation prepared for the
//! model's tool format, and the grammar compiled (off the async runtime: a schema takes
//! milliseconds).

use crate::server::app_state::Runtime;
use crate::server::error::ApiError;
use crate::server::history::history;
use crate::server::types::{
    ChatMessage, MessageContent, ResponseFormat, Role, Tool, ToolChoiceSpec,
};
use crate::structured::reasoning::ThinkStart;
use crate::structured::think::ThinkFrame;
use crate::structured::tools::native::{auto_call, forced_call, harmony_final, ForcedCall};
use crate::structured::tools::{generic, CallReading, ToolChoice, ToolDef, ToolFormat, MAX_TOOLS};
use crate::structured::{Constraint, ConstraintError, Grammars};
use serde_json::{json, Value};
use std::sync::Arc;

/// The tools a chat request offers, checked.
#[derive(Debug, Clone)]
pub struct ToolRequest {
    pub tools: Vec<ToolDef>,
    pub choice: ToolChoice,
    pub parallel: bool,
    /// `response_format`'s schema for an answer that is not a call (with `auto`), and the
    /// request field it came from.
    pub answer: Option<(Value, &'static str)>,
}

/// What the output must be: a schema (with the field it came from, for errors) or a tool
/// request.
#[derive(Debug, Clone)]
pub enum Shape {
    Free,
    Json {
        schema: Value,
        param: &'static str,
        label: String,
    },
    Tools(ToolRequest),
}

/// What the handler runs: the messages as the template sees them, the template's `tools`,
/// the grammar (compiled once the prompt is rendered: [`Pending::compile`]), and how replies
/// are read for calls (None: plain content).
pub struct Prepared {
    pub messages: Vec<ChatMessage>,
    pub template_tools: Option<Value>,
    pub grammar: Option<Pending>,
    pub read_calls: Option<CallReading>,
}

/// A chat reply's grammar, checked but not yet compiled: where the rendered prompt leaves
/// the reply (inside an open `<think>`, or free to open one) decides whether a think part
/// goes in front of it ([`ThinkFrame`]).
#[derive(Debug, Clone)]
pub enum Pending {
    /// `response_format`'s JSON, closing near `max_tokens` (a harmony model frames it in
    /// its final channel).
    Answer {
        schema: Value,
        param: &'static str,
        label: String,
    },
    /// JSON valid against a schema (kiln's tool envelope, a Llama 3 call).
    Schema {
        schema: Value,
        label: &'static str,
        forced: bool,
    },
    /// Calls in the model's own syntax (a Lark grammar whose first rule is `start:`);
    /// `forced`: calls only, their JSON bounded.
    Lark { grammar: String, forced: bool },
}

impl Pending {
    /// Compiles the grammar for a reply that starts as `think` says: with a think part in
    /// front when the reply may reason first (its close forced near the end of the budget
    /// when the structured part is required).
    pub fn compile(
        self,
        rt: &Runtime,
        think: Option<ThinkStart>,
    ) -> Result<Arc<Constraint>, ApiError> {
        let g = grammars(rt)?;
        let forced = match &self {
            Pending::Answer { .. } => true,
            Pending::Schema { forced, .. } | Pending::Lark { forced, .. } => *forced,
        };
        let frame = think
            .and_then(|t| ThinkFrame::new(t, &rt.tokenizer, Arc::clone(g.token_bytes()), forced))
            .map(Arc::new);
        let (prefix, rules) = frame.as_ref().map(|f| f.prefix()).unzip();
        let compiled = match self {
            Pending::Answer {
                schema,
                param,
                label,
            } => {
                let c = match &prefix {
                    _ if rt.harmony => Constraint::json_schema_after(
                        g,
                        &harmony_final(&rt.tokenizer),
                        "",
                        &schema,
                        param,
                        &label,
                    ),
                    Some(p) => Constraint::json_schema_after(
                        g,
                        p,
                        rules.as_deref().unwrap_or_default(),
                        &schema,
                        param,
                        &label,
                    ),
                    None => Constraint::json_schema(g, &schema, param, &label),
                };
                c.map(Constraint::closing)
            }
            Pending::Schema { schema, label, .. } => match &prefix {
                Some(p) => Constraint::json_schema_after(
                    g,
                    p,
                    rules.as_deref().unwrap_or_default(),
                    &schema,
                    "tools",
                    label,
                ),
                None => Constraint::json_schema(g, &schema, "tools", label),
            },
            Pending::Lark { grammar, forced } => {
                let grammar = match &frame {
                    Some(f) => f.wrap(&grammar),
                    None => grammar,
                };
                // Calls only (forced): their JSON is bounded; beside free text it is not.
                Constraint::lark(g, &grammar, "tools", "tool_call", forced)
            }
        }
        .map_err(constraint_error)?;
        Ok(Arc::new(match frame {
            Some(f) => compiled.thinking(f),
            None => compiled,
        }))
    }
}

fn constraint_error(e: ConstraintError) -> ApiError {
    match e.param() {
        Some(p) => ApiError::bad(p.to_string(), e.to_string()),
        None => ApiError::Unavailable(e.to_string()),
    }
}

/// `response_format` as a schema to enforce (None for text or absent).
pub fn response_format(rf: Option<&ResponseFormat>) -> Result<Shape, ApiError> {
    Ok(match rf {
        None | Some(ResponseFormat::Text) => Shape::Free,
        Some(ResponseFormat::JsonObject) => Shape::Json {
            schema: json!({"type": "object"}),
            param: "response_format",
            label: "json_object".to_string(),
        },
        Some(ResponseFormat::JsonSchema { json_schema }) => {
            let Some(schema) = json_schema.schema.clone() else {
                return Err(ApiError::bad(
                    "response_format.json_schema.schema",
                    "response_format.json_schema needs a `schema`",
                ));
            };
            Shape::Json {
                schema,
                param: "response_format.json_schema.schema",
                label: format!("json_schema:{}", json_schema.name),
            }
        }
    })
}

fn valid_name(n: &str) -> bool {
    (1..=64).contains(&n.len())
        && n.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// Checks `tools`, `tool_choice` and `parallel_tool_calls` (cheap: no schema is compiled).
/// None when no tools are offered (and none are required).
pub fn tool_request(
    tools: Option<&[Tool]>,
    choice: Option<&ToolChoiceSpec>,
    parallel: Option<bool>,
) -> Result<Option<ToolRequest>, ApiError> {
    let tools = tools.unwrap_or_default();
    if tools.len() > MAX_TOOLS {
        return Err(ApiError::bad(
            "tools",
            format!("at most {MAX_TOOLS} tools are allowed, got {}", tools.len()),
        ));
    }
    let mut defs: Vec<ToolDef> = Vec::with_capacity(tools.len());
    for (i, t) in tools.iter().enumerate() {
        if t.kind != "function" {
            return Err(ApiError::bad(
                format!("tools[{i}].type"),
                format!(
                    "only tools of type \"function\" are supported, got {:?}",
                    t.kind
                ),
            ));
        }
        let name = &t.function.name;
        if !valid_name(name) {
            return Err(ApiError::bad(
                format!("tools[{i}].function.name"),
                "a function name must be 1 to 64 characters of a-z, A-Z, 0-9, _ and -",
            ));
        }
        if defs.iter().any(|d| &d.name == name) {
            return Err(ApiError::bad(
                format!("tools[{i}].function.name"),
                format!("two tools are named {name:?}"),
            ));
        }
        let parameters = match &t.function.parameters {
            None => json!({"type": "object", "properties": {}}),
            Some(p @ Value::Object(_)) => p.clone(),
            Some(_) => {
                return Err(ApiError::bad(
                    format!("tools[{i}].function.parameters"),
                    "parameters must be a JSON Schema object",
                ))
            }
        };
        defs.push(ToolDef {
            name: name.clone(),
            description: t.function.description.clone(),
            parameters,
        });
    }
    let choice = match choice {
        None => ToolChoice::Auto,
        Some(ToolChoiceSpec::Mode(m)) => match m.as_str() {
            "none" => ToolChoice::None,
            "auto" => ToolChoice::Auto,
            "required" => ToolChoice::Required,
            other => {
                return Err(ApiError::bad(
                    "tool_choice",
                    format!("tool_choice must be \"none\", \"auto\", \"required\" or a named function, got {other:?}"),
                ))
            }
        },
        Some(ToolChoiceSpec::Named(n)) => {
            if n.kind != "function" {
                return Err(ApiError::bad(
                    "tool_choice.type",
                    format!("tool_choice.type must be \"function\", got {:?}", n.kind),
                ));
            }
            if !defs.iter().any(|d| d.name == n.function.name) {
                return Err(ApiError::bad(
                    "tool_choice.function.name",
                    format!("tool_choice names {:?}, which is not among the tools", n.function.name),
                ));
            }
            ToolChoice::Named(n.function.name.clone())
        }
    };
    if defs.is_empty() {
        return match choice {
            ToolChoice::Required => Err(ApiError::bad(
                "tool_choice",
                "tool_choice \"required\" needs at least one tool",
            )),
            _ => Ok(None),
        };
    }
    Ok(Some(ToolRequest {
        tools: defs,
        choice,
        parallel: parallel.unwrap_or(true),
        answer: None,
    }))
}

/// The grammar compiler, or a 503 naming why there is none.
fn grammars(rt: &Runtime) -> Result<&Grammars, ApiError> {
    rt.grammars.as_deref().ok_or_else(|| {
        ApiError::Unavailable("structured output is unavailable for this model".to_string())
    })
}

/// Compiles a `response_format` shape (for completions, which have no tools).
pub fn compile_json(rt: &Runtime, shape: &Shape) -> Result<Option<Arc<Constraint>>, ApiError> {
    match shape {
        Shape::Json {
            schema,
            param,
            label,
        } => Constraint::json_schema(grammars(rt)?, schema, param, label)
            .map(|c| Some(Arc::new(c.closing())))
            .map_err(constraint_error),
        _ => Ok(None),
    }
}

/// A chat reply's `response_format` shape, to compile once the prompt is rendered.
fn chat_json(shape: &Shape) -> Option<Pending> {
    match shape {
        Shape::Json {
            schema,
            param,
            label,
        } => Some(Pending::Answer {
            schema: schema.clone(),
            param,
            label: label.clone(),
        }),
        _ => None,
    }
}

/// Prepares a chat request (run on the blocking pool).
pub fn prepare_chat(
    rt: &Runtime,
    messages: Vec<ChatMessage>,
    shape: &Shape,
) -> Result<Prepared, ApiError> {
    let format = rt.tool_format;
    let tools = match shape {
        Shape::Tools(t) => t,
        _ => {
            return Ok(Prepared {
                messages: history(messages, format),
                template_tools: None,
                grammar: chat_json(shape),
                read_calls: None,
            })
        }
    };
    let g = grammars(rt)?;
    // Every parameters schema must be enforceable, whatever the choice.
    for (i, t) in tools.tools.iter().enumerate() {
        Constraint::json_schema(
            g,
            &t.parameters,
            &format!("tools[{i}].function.parameters"),
            &t.name,
        )
        .map_err(constraint_error)?;
    }
    // `response_format`'s schema, compiled on its own (so an unsupported feature names its
    // own field): the whole constraint under "none", checked only under the others.
    if let Some((schema, param)) = &tools.answer {
        Constraint::json_schema(g, schema, param, "response_format").map_err(constraint_error)?;
    }
    let answer = tools.answer.as_ref().map(|(schema, _)| schema);
    let calls_only = matches!(tools.choice, ToolChoice::Required | ToolChoice::Named(_));
    if tools.choice == ToolChoice::None {
        // The answer alone, as a request without tools has it.
        return Ok(Prepared {
            messages: history(messages, format),
            template_tools: None,
            grammar: tools
                .answer
                .as_ref()
                .map(|(schema, param)| Pending::Answer {
                    schema: schema.clone(),
                    param,
                    label: "response_format".to_string(),
                }),
            read_calls: None,
        });
    }
    if format.template_renders_tools() {
        let listed: Vec<Value> = tools
            .tools
            .iter()
            .map(|t| {
                json!({"type": "function", "function": {
                    "name": t.name, "description": t.description, "parameters": t.parameters}})
            })
            .collect();
        // "required" and a named function force a call in the model's own syntax; "auto"
        // leaves the choice to the model, but a call it starts must be valid.
        let offered: Vec<&ToolDef> = match &tools.choice {
            ToolChoice::Named(n) => tools.tools.iter().filter(|t| &t.name == n).collect(),
            _ => tools.tools.iter().collect(),
        };
        let forced = match tools.choice {
            ToolChoice::Required | ToolChoice::Named(_) => forced_call(
                format,
                &offered,
                tools.parallel,
                &rt.tokenizer,
                &rt.template_text,
            ),
            ToolChoice::Auto => auto_call(
                format,
                &offered,
                tools.parallel,
                &rt.tokenizer,
                &rt.template_text,
                answer,
            ),
            ToolChoice::None => None,
        };
        let grammar = forced.map(|f| match f {
            ForcedCall::Schema(schema) => Pending::Schema {
                schema,
                label: "tool_call",
                forced: calls_only,
            },
            ForcedCall::Lark(grammar) => Pending::Lark {
                grammar,
                forced: calls_only,
            },
        });
        return Ok(Prepared {
            messages: history(messages, format),
            template_tools: Some(Value::Array(listed)),
            grammar,
            read_calls: Some(CallReading {
                format,
                forced: calls_only,
            }),
        });
    }
    let schema = generic::envelope_schema(&tools.tools, &tools.choice, tools.parallel, answer)
        .unwrap_or_else(|| json!({}));
    // Checked now (errors before the prompt is rendered), compiled with the prompt.
    Constraint::json_schema(g, &schema, "tools", "tool_envelope").map_err(constraint_error)?;
    let prompt = generic::system_prompt(&tools.tools, &tools.choice, tools.parallel, answer);
    let mut messages = history(messages, format);
    match messages.first_mut() {
        Some(m) if matches!(m.role, Role::System | Role::Developer) => {
            let text = m.content.as_ref().map(|c| c.text()).unwrap_or_default();
            m.content = Some(MessageContent::Text(format!("{text}\n\n{prompt}")));
        }
        _ => messages.insert(
            0,
            ChatMessage {
                role: Role::System,
                content: Some(MessageContent::Text(prompt)),
                name: None,
                tool_call_id: None,
                tool_calls: None,
                tool_responses: None,
            },
        ),
    }
    Ok(Prepared {
        messages,
        template_tools: None,
        grammar: Some(Pending::Schema {
            schema,
            label: "tool_envelope",
            // The envelope is JSON whatever the choice: its think part must close.
            forced: true,
        }),
        read_calls: Some(CallReading {
            format: ToolFormat::Generic,
            forced: calls_only,
        }),
    })
}
