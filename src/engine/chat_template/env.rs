//! The minijinja environment configured like transformers' jinja2 one:
//! `ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, loopcontrols)`, no
//! autoescape, lenient undefined, Python printing, `tojson`, `raise_exception`, `strftime_now`.
//! There is no loader: a template can never read a file (`include`/`import` fail).

use super::datetime::DateTime;
use super::filters;
use super::generation::GENERATION_FN;
use super::methods::call_method;
use super::operators::{concat, markup_add, CONCAT_FN, MARKUP_ADD_FN};
use super::python::{py_str, write_str};
use super::tojson::tojson_filter;
use minijinja::value::{Kwargs, Value, ValueKind};
use minijinja::{AutoEscape, Environment, Error, ErrorKind, State, UndefinedBehavior};

/// The hidden context variable holding the ISO time `strftime_now` formats.
pub const NOW_VAR: &str = "__kiln_now__";

/// The error `raise_exception(msg)` produces, recognisable in the error's source chain.
#[derive(Debug)]
pub struct RaisedException(pub String);

impl std::fmt::Display for RaisedException {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for RaisedException {}

/// Budgets that keep a hostile or buggy template from running away.
#[derive(Clone, Copy, Debug)]
pub struct RenderLimits {
    /// Template VM instructions per render (minijinja fuel).
    pub fuel: u64,
    /// Bytes of output per render.
    pub max_output_bytes: usize,
    /// Nesting depth of macro calls, includes and nested blocks.
    pub max_recursion: usize,
}

impl Default for RenderLimits {
    /// 10M instructions (about half a second; the reference templates use ~100 per message,
    /// so ~30k for a 300-message conversation), 16 MiB of output, recursion depth 64.
    fn default() -> Self {
        RenderLimits {
            fuel: 10_000_000,
            max_output_bytes: 16 << 20,
            max_recursion: 64,
        }
    }
}

/// Builds the environment (without templates).
pub fn build_environment(limits: &RenderLimits) -> Environment<'static> {
    let mut env = Environment::new();
    env.set_trim_blocks(true);
    env.set_lstrip_blocks(true);
    env.set_keep_trailing_newline(false);
    env.set_auto_escape_callback(|_| AutoEscape::None);
    env.set_undefined_behavior(UndefinedBehavior::Lenient);
    env.set_fuel(Some(limits.fuel));
    env.set_recursion_limit(limits.max_recursion);
    env.set_formatter(|out, _state, value| {
        if let Some(s) = value.as_str() {
            out.write_str(s)?;
        } else {
            let mut s = String::new();
            write_str(&mut s, value);
            out.write_str(&s)?;
        }
        Ok(())
    });
    env.set_unknown_method_callback(call_method);

    env.add_filter("tojson", tojson_filter);
    env.add_filter("string", |v: &Value| Value::from(py_str(v)));
    env.add_filter("join", filters::join);
    env.add_filter("int", filters::int);
    env.add_filter("float", filters::float);
    env.add_filter("replace", filters::replace);
    env.add_filter("truncate", filters::truncate);
    env.add_filter("round", filters::round);
    env.add_filter("wordcount", filters::wordcount);

    env.add_test("sequence", |v: &Value| {
        matches!(
            v.kind(),
            ValueKind::String | ValueKind::Seq | ValueKind::Map | ValueKind::Undefined
        )
    });
    env.add_test("iterable", |v: &Value| {
        matches!(
            v.kind(),
            ValueKind::String
                | ValueKind::Seq
                | ValueKind::Map
                | ValueKind::Iterable
                | ValueKind::Undefined
        )
    });
    env.add_test("number", |v: &Value| {
        matches!(v.kind(), ValueKind::Number | ValueKind::Bool)
    });

    env.add_function(
        "raise_exception",
        |msg: Option<Value>| -> Result<Value, Error> {
            let msg = msg.map(|m| py_str(&m)).unwrap_or_default();
            Err(Error::new(ErrorKind::InvalidOperation, msg.clone())
                .with_source(RaisedException(msg)))
        },
    );
    env.add_function("strftime_now", strftime_now);
    env.add_function(
        GENERATION_FN,
        |state: &State, kwargs: Kwargs| -> Result<Value, Error> {
            let caller: Value = kwargs.get("caller")?;
            kwargs.assert_all_used()?;
            caller.call(state, &[])
        },
    );
    env.add_function(MARKUP_ADD_FN, markup_add);
    env.add_function(CONCAT_FN, concat);
    env
}

/// `strftime_now(fmt)`: the render's fixed "now" (or the current UTC time) formatted.
fn strftime_now(state: &State, fmt: String) -> Result<Value, Error> {
    let now = state
        .lookup(NOW_VAR)
        .and_then(|v| v.as_str().and_then(DateTime::parse_iso))
        .unwrap_or_else(DateTime::now_utc);
    Ok(Value::from(now.strftime(&fmt)))
}
