//! Python methods on template values (`s.strip()`, `d.items()`, ...), as jinja2 exposes them.
//!
//! minijinja-contrib's `pycompat` covers most; this adds the ones chat templates use that it
//! lacks or gets subtly different from Python. Mutating methods (`list.append`, `dict.update`)
//! are refused, as jinja2's ImmutableSandboxedEnvironment refuses them.

use super::filters::replace_str;
use super::format::check_format_bound;
use super::limits::check_len;
use super::python::{pair, py_str, write_str};
use minijinja::value::{from_args, Value, ValueKind};
use minijinja::{Error, ErrorKind, State};

/// The unknown-method callback installed on the environment; strings it builds are capped at
/// `cap` bytes.
pub fn call_method(
    state: &State,
    value: &Value,
    method: &str,
    args: &[Value],
    cap: usize,
) -> Result<Value, Error> {
    let rv = dispatch(state, value, method, args, cap)?;
    // `Markup` methods that only transform the text return `Markup` again.
    let keeps_markup = matches!(
        method,
        "upper"
            | "lower"
            | "title"
            | "capitalize"
            | "strip"
            | "lstrip"
            | "rstrip"
            | "center"
            | "ljust"
            | "rjust"
            | "removeprefix"
            | "removesuffix"
    );
    if keeps_markup && value.kind() == ValueKind::String && value.is_safe() {
        if let Some(s) = rv.as_str() {
            return Ok(Value::from_safe_string(s.to_string()));
        }
    }
    Ok(rv)
}

fn dispatch(
    state: &State,
    value: &Value,
    method: &str,
    args: &[Value],
    cap: usize,
) -> Result<Value, Error> {
    match (value.kind(), method) {
        (ValueKind::String, "join") => {
            let sep = value.as_str().unwrap_or_default();
            let (items,): (Value,) = from_args(args)?;
            let mut out = String::new();
            for (i, item) in items.try_iter()?.enumerate() {
                if i > 0 {
                    check_len(out.len() + sep.len(), cap)?;
                    out.push_str(sep);
                }
                write_str(&mut out, &item, cap)?;
            }
            Ok(Value::from(out))
        }
        (ValueKind::String, "replace") => {
            let (old, new, count): (&str, &str, Option<i64>) = from_args(args)?;
            replace_str(value.as_str().unwrap_or_default(), old, new, count, cap).map(Value::from)
        }
        (ValueKind::String, "format") => {
            check_format_bound(value.as_str().unwrap_or_default(), args, cap)?;
            minijinja_contrib::pycompat::unknown_method_callback(state, value, method, args)
        }
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
        (ValueKind::String, "rsplit") => rsplit(value.as_str().unwrap_or_default(), args),
        (ValueKind::String, "center" | "ljust" | "rjust") => {
            pad(value.as_str().unwrap_or_default(), method, args, cap)
        }
        (ValueKind::String, "removeprefix") => {
            let (p,): (&str,) = from_args(args)?;
            let s = value.as_str().unwrap_or_default();
            Ok(Value::from(s.strip_prefix(p).unwrap_or(s)))
        }
        (ValueKind::String, "removesuffix") => {
            let (p,): (&str,) = from_args(args)?;
            let s = value.as_str().unwrap_or_default();
            Ok(Value::from(s.strip_suffix(p).unwrap_or(s)))
        }
        (ValueKind::Map, "items") => {
            let () = from_args(args)?;
            let mut out = Vec::new();
            for key in value.try_iter()? {
                let item = value.get_item(&key)?;
                out.push(pair(key, item));
            }
            Ok(Value::from(out))
        }
        (_, "__str__") => py_str(value, cap).map(Value::from),
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

/// `str.rsplit(sep=None, maxsplit=-1)`.
fn rsplit(s: &str, args: &[Value]) -> Result<Value, Error> {
    let (sep, maxsplit): (Option<&str>, Option<i64>) = from_args(args)?;
    let max = maxsplit.filter(|m| *m >= 0).map(|m| m as usize);
    let mut parts: Vec<Value> = match (sep, max) {
        (Some(""), _) => return Err(Error::new(ErrorKind::InvalidOperation, "empty separator")),
        (Some(sep), Some(n)) => s.rsplitn(n + 1, sep).map(Value::from).collect(),
        (Some(sep), None) => s.rsplit(sep).map(Value::from).collect(),
        (None, max) => {
            // Whitespace runs; with maxsplit the leftmost remainder keeps its inner spacing.
            let mut rest = s.trim_end();
            let mut out = Vec::new();
            while !rest.is_empty() {
                if max.is_some_and(|n| out.len() == n) {
                    out.push(Value::from(rest.trim_start()));
                    break;
                }
                match rest.rfind(char::is_whitespace) {
                    Some(i) => {
                        let ws_len = rest[i..].chars().next().map_or(1, char::len_utf8);
                        out.push(Value::from(&rest[i + ws_len..]));
                        rest = rest[..i].trim_end();
                    }
                    None => {
                        out.push(Value::from(rest));
                        rest = "";
                    }
                }
            }
            out
        }
    };
    parts.reverse();
    Ok(Value::from(parts))
}

/// `str.center` / `str.ljust` / `str.rjust` (width counted in characters, like Python).
fn pad(s: &str, method: &str, args: &[Value], cap: usize) -> Result<Value, Error> {
    let (width, fill): (usize, Option<&str>) = from_args(args)?;
    let fill = match fill {
        None => ' ',
        Some(f) if f.chars().count() == 1 => f.chars().next().unwrap_or(' '),
        Some(_) => {
            return Err(Error::new(
                ErrorKind::InvalidOperation,
                "the fill character must be exactly one character long",
            ))
        }
    };
    let len = s.chars().count();
    let total = width.saturating_sub(len);
    check_len(
        s.len()
            .saturating_add(total.saturating_mul(fill.len_utf8())),
        cap,
    )?;
    let (left, right) = match method {
        "ljust" => (0, total),
        "rjust" => (total, 0),
        // CPython's centering: the extra character goes left when both counts are odd.
        _ => {
            let left = total / 2 + (total & width & 1);
            (left, total - left)
        }
    };
    let mut out = String::with_capacity(s.len() + total);
    out.extend(std::iter::repeat_n(fill, left));
    out.push_str(s);
    out.extend(std::iter::repeat_n(fill, right));
    Ok(Value::from(out))
}
