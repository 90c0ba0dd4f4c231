//! Python methods on template values (`s.strip()`, `d.items()`, ...), as jinja2 exposes them.
//!
//! minijinja-contrib's `pycompat` covers most; this adds the ones chat templates use that it
//! lacks or gets subtly different from Python. Mutating methods (`list.append`, `dict.update`)
//! are refused, as jinja2's ImmutableSandboxedEnvironment refuses them.

use super::python::py_str;
use minijinja::value::{Value, ValueKind};
use minijinja::{Error, ErrorKind, State};

/// The unknown-method callback installed on the environment.
pub fn call_method(
    state: &State,
    value: &Value,
    method: &str,
    args: &[Value],
) -> Result<Value, Error> {
    match (value.kind(), method) {
        (ValueKind::String, "__str__") | (ValueKind::String, "__repr__") => Ok(value.clone()),
        (ValueKind::String, "startswith") | (ValueKind::String, "endswith") => affix_test(
            value.as_str().unwrap_or_default(),
            method == "startswith",
            args,
        ),
        (
            ValueKind::Map | ValueKind::Seq,
            "append" | "pop" | "extend" | "insert" | "remove" | "update" | "clear" | "setdefault"
            | "popitem" | "sort" | "reverse",
        ) => Err(Error::new(
            ErrorKind::InvalidOperation,
            format!(
                "access to attribute '{method}' of a {} is unsafe (immutable sandbox)",
                value.kind()
            ),
        )),
        (_, "__str__") => Ok(Value::from(py_str(value))),
        _ => minijinja_contrib::pycompat::unknown_method_callback(state, value, method, args),
    }
}

/// `str.startswith` / `str.endswith` with a string or a tuple/list of strings.
fn affix_test(s: &str, prefix: bool, args: &[Value]) -> Result<Value, Error> {
    let Some(needle) = args.first() else {
        return Err(Error::from(ErrorKind::MissingArgument));
    };
    if args.len() > 1 {
        return Err(Error::new(
            ErrorKind::TooManyArguments,
            "startswith/endswith: start/end arguments are not supported",
        ));
    }
    let check = |n: &Value| -> Result<bool, Error> {
        let n = n.as_str().ok_or_else(|| {
            Error::new(
                ErrorKind::InvalidOperation,
                "startswith/endswith expects a string or a tuple of strings",
            )
        })?;
        Ok(if prefix {
            s.starts_with(n)
        } else {
            s.ends_with(n)
        })
    };
    if needle.kind() == ValueKind::Seq {
        for n in needle.try_iter()? {
            if check(&n)? {
                return Ok(Value::from(true));
            }
        }
        Ok(Value::from(false))
    } else {
        check(needle).map(Value::from)
    }
}
