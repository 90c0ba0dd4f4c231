//! The minijinja environment configured like transformers' jinja2 one:
//! `ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, loopcontrols)`, no
//! autoescape, lenient undefined, Python printing, `tojson`, `raise_exception`, `strftime_now`.
//! There is no loader: a template can never read a file (`include`/`import` fail).

use super::datetime::DateTime;
use super::filters;
use super::format;
use super::generation::GENERATION_FN;
use super::limits::{size_error, RenderLimits};
use super::methods::call_method;
use super::operators::{self, ADD_FN, CONCAT_FN, MOD_FN, MUL_FN, TUPLE_FN};
use super::python::{pairs_to_tuples, py_str, write_repr, Tuple};
use super::tojson::tojson_filter;
use minijinja::value::{Kwargs, Object, Rest, Value, ValueKind};
use minijinja::{AutoEscape, Environment, Error, ErrorKind, State, UndefinedBehavior};
use std::sync::atomic::{AtomicUsize, Ordering};

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

/// Bytes `{{ }}` may print per render (output and captures), as a multiple of the output cap.
const PRINT_BUDGET_FACTOR: usize = 4;
/// The render-state slot counting printed bytes.
const PRINTED_TEMP: &str = "kiln_printed_bytes";

/// Bytes printed so far in one render.
#[derive(Debug, Default)]
struct PrintedBytes(AtomicUsize);

impl Object for PrintedBytes {}

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
    // Everything `{{ }}` prints, into the output or into `{% set %}` captures, counts against
    // one per-render budget, so doubling a captured string in a loop stops early.
    let print_cap = limits.max_output_bytes.saturating_mul(PRINT_BUDGET_FACTOR);
    env.set_formatter(move |out, state, value| {
        let owned;
        let text = match value.as_str() {
            Some(s) => s,
            None => {
                owned = py_str(value, print_cap)?;
                &owned
            }
        };
        let printed = state.get_or_set_temp_object(PRINTED_TEMP, PrintedBytes::default);
        let total = printed.0.fetch_add(text.len(), Ordering::Relaxed) + text.len();
        if total > print_cap {
            return Err(size_error(print_cap));
        }
        out.write_str(text)?;
        Ok(())
    });
    let cap = limits.max_output_bytes;
    env.set_unknown_method_callback(move |state, value, method, args| {
        call_method(state, value, method, args, cap)
    });

    env.add_filter(
        "tojson",
        move |v: &Value, a: Option<Value>, i: Option<Value>, kw: Kwargs| {
            tojson_filter(v, a, i, kw, cap)
        },
    );
    env.add_filter("string", move |v: &Value| py_str(v, cap).map(Value::from));
    env.add_filter("pprint", move |v: &Value| {
        let mut s = String::new();
        write_repr(&mut s, v, cap)?;
        Ok::<_, Error>(Value::from(s))
    });
    env.add_filter(
        "join",
        move |v: &Value, j: Option<String>, attr: Option<Value>| filters::join(v, j, attr, cap),
    );
    env.add_filter("int", filters::int);
    env.add_filter("float", filters::float);
    env.add_filter(
        "replace",
        move |v: &Value, old: &str, new: &str, n: Option<i64>| {
            filters::replace(v, old, new, n, cap)
        },
    );
    env.add_filter(
        "truncate",
        move |v: &Value, l: Option<usize>, k: Option<bool>, e: Option<String>, kw: Kwargs| {
            filters::truncate(v, l, k, e, kw, cap)
        },
    );
    env.add_filter(
        "indent",
        move |v: &Value, w: Option<Value>, f: Option<bool>, b: Option<bool>, kw: Kwargs| {
            filters::indent(v, w, f, b, kw, cap)
        },
    );
    env.add_filter(
        "format",
        move |state: &State, v: &Value, args: Rest<Value>| format::format(state, v, args, cap),
    );
    env.add_filter("escape", move |v: &Value| filters::escape(v, false, cap));
    env.add_filter("e", move |v: &Value| filters::escape(v, false, cap));
    env.add_filter("forceescape", move |v: &Value| {
        filters::escape(v, true, cap)
    });
    env.add_filter("items", |v: &Value| -> Result<Value, Error> {
        if v.is_undefined() {
            return Ok(Value::from(Vec::<Value>::new()));
        }
        pairs_to_tuples(&minijinja::filters::items(v)?)
    });
    env.add_filter("dictsort", |v: &Value, kwargs: Kwargs| {
        pairs_to_tuples(&minijinja::filters::dictsort(v, kwargs)?)
    });
    env.add_filter("batch", filters::batch);
    env.add_filter("slice", filters::slice);
    env.add_filter("round", filters::round);
    env.add_filter("wordcount", move |v: &Value| filters::wordcount(v, cap));

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
            let msg = match msg {
                Some(m) => py_str(&m, 1 << 16)?,
                None => String::new(),
            };
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
    env.add_function(ADD_FN, move |a: &Value, b: &Value| {
        operators::add(a, b, cap)
    });
    env.add_function(CONCAT_FN, move |a: &Value, b: &Value| {
        operators::concat(a, b, cap)
    });
    env.add_function(MUL_FN, move |a: &Value, b: &Value| {
        operators::mul(a, b, cap)
    });
    env.add_function(TUPLE_FN, |items: &Value| -> Result<Value, Error> {
        Ok(Value::from_object(Tuple(items.try_iter()?.collect())))
    });
    env.add_function(MOD_FN, move |state: &State, a: &Value, b: &Value| {
        operators::rem(state, a, b, cap)
    });
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
