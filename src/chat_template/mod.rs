//! Chat templates: a model's `tokenizer.chat_template` (Jinja) rendered the way Hugging Face
//! transformers renders it in Python, byte for byte, inside a sandbox with budgets.
//!
//! The reference is jinja2 3.1.6's `ImmutableSandboxedEnvironment(trim_blocks=True,
//! lstrip_blocks=True, extensions=[loopcontrols])` plus transformers' `{% generation %}` block,
//! `tojson` (= `json.dumps`), `raise_exception(msg)` and `strftime_now(fmt)`. Values print as
//! Python prints them (`None`, `True`, `1.0`, `['a']`). Rendering cannot touch the filesystem,
//! stops after [`RenderLimits::fuel`] VM instructions and [`RenderLimits::max_output_bytes`].

mod datetime;
mod env;
mod filters;
mod format;
mod generation;
mod limits;
mod methods;
mod operators;
mod python;
mod tojson;

pub use datetime::DateTime;
pub use limits::RenderLimits;

use env::{build_environment, RaisedException, NOW_VAR};
use limits::SizeExceeded;
use minijinja::{Environment, ErrorKind};
use std::io;
use std::path::{Path, PathBuf};

/// The name the single template is stored under (shows in error locations).
const TEMPLATE_NAME: &str = "chat_template";

/// The template used when a model has none: ChatML (`<|im_start|>role\ncontent<|im_end|>\n`,
/// then `<|im_start|>assistant\n` when `add_generation_prompt`). String content is written as
/// is; list content (OpenAI content parts) contributes its `text` parts in order.
pub const CHATML_TEMPLATE: &str = "\
{%- for message in messages -%}
{{- '<|im_start|>' + message['role'] + '\\n' -}}
{%- if message['content'] is string -%}
{{- message['content'] -}}
{%- elif message['content'] is iterable -%}
{%- for part in message['content'] -%}
{%- if part['type'] == 'text' -%}{{- part['text'] -}}{%- endif -%}
{%- endfor -%}
{%- endif -%}
{{- '<|im_end|>\\n' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}
";

/// Why a template could not be compiled or rendered.
#[derive(Debug, thiserror::Error)]
pub enum ChatTemplateError {
    /// The template source does not parse.
    #[error("chat template syntax error: {detail}")]
    Syntax { detail: String },
    /// The template called `raise_exception(msg)`: it refuses this conversation.
    #[error("chat template raised an exception: {0}")]
    Raised(String),
    /// Rendering failed (unknown filter, bad operand types, recursion too deep, ...).
    #[error("chat template render error: {detail}")]
    Render { detail: String },
    /// The template ran past its instruction budget (an endless or exploding loop).
    #[error("chat template exceeded its budget of {fuel} instructions (runaway loop?)")]
    FuelExhausted { fuel: u64 },
    /// The rendering, or a string or list the template built, grew past its cap.
    #[error("chat template output or a value it built exceeded its limit of {limit}")]
    OutputTooLarge { limit: usize },
    /// The `--chat-template` override file could not be read.
    #[error("cannot read chat template {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// The render context was not a JSON object.
    #[error("chat template context must be a JSON object, got {kind}")]
    InvalidContext { kind: &'static str },
}

/// Where [`ChatTemplate::for_model`] took the template from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TemplateSource {
    /// The `--chat-template` file.
    Override,
    /// The model's `tokenizer.chat_template`.
    Model,
    /// The built-in [`CHATML_TEMPLATE`] (the model has none).
    ChatmlDefault,
}

/// A compiled chat template; compile once, render many times from any thread.
pub struct ChatTemplate {
    env: Environment<'static>,
    limits: RenderLimits,
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTemplate")
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

impl ChatTemplate {
    /// Compiles `source` with the default [`RenderLimits`]; a syntax error names its line.
    pub fn new(source: &str) -> Result<ChatTemplate, ChatTemplateError> {
        Self::with_limits(source, RenderLimits::default())
    }

    /// Compiles `source` with explicit budgets.
    pub fn with_limits(
        source: &str,
        limits: RenderLimits,
    ) -> Result<ChatTemplate, ChatTemplateError> {
        let mut env = build_environment(&limits);
        let source = generation::rewrite_generation_tags(source);
        let ws = minijinja::machinery::WhitespaceConfig {
            keep_trailing_newline: false,
            lstrip_blocks: true,
            trim_blocks: true,
        };
        let source = operators::rewrite_operators(&source, ws).unwrap_or(source);
        env.add_template_owned(TEMPLATE_NAME, source)
            .map_err(|e| ChatTemplateError::Syntax {
                detail: describe(&e),
            })?;
        Ok(ChatTemplate { env, limits })
    }

    /// The documented ChatML default ([`CHATML_TEMPLATE`]).
    pub fn chatml_default() -> ChatTemplate {
        // The constant is tested to compile; a failure here is a bug in this file.
        Self::new(CHATML_TEMPLATE).expect("the built-in ChatML template compiles")
    }

    /// The template to use for a model: the override file if given (`--chat-template`), else
    /// the model's own `tokenizer.chat_template`, else the ChatML default. Which one was
    /// chosen is returned too, for logging.
    pub fn for_model(
        model_template: Option<&str>,
        override_file: Option<&Path>,
    ) -> Result<(ChatTemplate, TemplateSource), ChatTemplateError> {
        if let Some(path) = override_file {
            let source = std::fs::read_to_string(path).map_err(|source| ChatTemplateError::Io {
                path: path.to_path_buf(),
                source,
            })?;
            return Ok((Self::new(&source)?, TemplateSource::Override));
        }
        match model_template {
            Some(source) if !source.trim().is_empty() => {
                Ok((Self::new(source)?, TemplateSource::Model))
            }
            _ => Ok((Self::chatml_default(), TemplateSource::ChatmlDefault)),
        }
    }

    /// The budgets this template renders under.
    pub fn limits(&self) -> RenderLimits {
        self.limits
    }

    /// Renders with `context`'s variables (messages, add_generation_prompt, bos_token,
    /// eos_token, tools, anything else). `tools` is `none` when absent. `strftime_now` formats
    /// `now`, or the current UTC time when `None`.
    pub fn render(
        &self,
        context: &serde_json::Value,
        now: Option<DateTime>,
    ) -> Result<String, ChatTemplateError> {
        let serde_json::Value::Object(vars) = context else {
            return Err(ChatTemplateError::InvalidContext {
                kind: json_kind(context),
            });
        };
        let mut vars = vars.clone();
        vars.entry("tools").or_insert(serde_json::Value::Null);
        let now = now.unwrap_or_else(DateTime::now_utc);
        vars.insert(
            NOW_VAR.to_string(),
            serde_json::Value::String(format!(
                "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}",
                now.year, now.month, now.day, now.hour, now.minute, now.second
            )),
        );
        let ctx = minijinja::Value::from_serialize(&vars);

        let template =
            self.env
                .get_template(TEMPLATE_NAME)
                .map_err(|e| ChatTemplateError::Render {
                    detail: describe(&e),
                })?;
        let mut out = CappedWriter {
            buf: Vec::new(),
            limit: self.limits.max_output_bytes,
            exceeded: false,
        };
        match template.render_captured_to(ctx, &mut out) {
            Ok(_) => String::from_utf8(out.buf).map_err(|e| ChatTemplateError::Render {
                detail: format!("output is not UTF-8: {e}"),
            }),
            Err(_) if out.exceeded => Err(ChatTemplateError::OutputTooLarge {
                limit: self.limits.max_output_bytes,
            }),
            Err(e) => Err(self.classify(e)),
        }
    }

    fn classify(&self, e: minijinja::Error) -> ChatTemplateError {
        if let Some(raised) = find_source::<RaisedException>(&e) {
            return ChatTemplateError::Raised(raised.0.clone());
        }
        if let Some(size) = find_source::<SizeExceeded>(&e) {
            return ChatTemplateError::OutputTooLarge { limit: size.limit };
        }
        if e.kind() == ErrorKind::OutOfFuel {
            return ChatTemplateError::FuelExhausted {
                fuel: self.limits.fuel,
            };
        }
        ChatTemplateError::Render {
            detail: describe(&e),
        }
    }
}

/// The error of type `T` somewhere in `e`'s source chain, if any.
fn find_source<T: std::error::Error + 'static>(e: &minijinja::Error) -> Option<&T> {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cur {
        if let Some(r) = err.downcast_ref::<T>() {
            return Some(r);
        }
        cur = err.source();
    }
    None
}

/// A minijinja error with its location and causes, on one line.
fn describe(e: &minijinja::Error) -> String {
    let mut s = e.to_string();
    let mut cur = std::error::Error::source(e);
    while let Some(err) = cur {
        s.push_str(": ");
        s.push_str(&err.to_string());
        cur = err.source();
    }
    s
}

fn json_kind(v: &serde_json::Value) -> &'static str {
    match v {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "an array",
        serde_json::Value::Object(_) => "an object",
    }
}

/// Collects output, failing the render once it passes `limit` bytes.
struct CappedWriter {
    buf: Vec<u8>,
    limit: usize,
    exceeded: bool,
}

impl io::Write for CappedWriter {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        if self.buf.len() + data.len() > self.limit {
            self.exceeded = true;
            return Err(io::Error::other("chat template output limit reached"));
        }
        self.buf.extend_from_slice(data);
        Ok(data.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests;
