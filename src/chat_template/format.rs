//! Printf-style and `str.format` formatting, bounded so a template cannot build a string
//! past the render's output cap (used by the `format` filter, the `%` operator and the
//! `str.format` method).

use super::limits::check_len;
use super::python::py_str;
use minijinja::value::{Rest, Value, ValueKind};
use minijinja::{Error, State};

/// Refuses a `%`-format or `str.format` call whose result could pass `cap` bytes: every field
/// (`%` or `{`) may insert all arguments padded to the widest width written in the format or
/// passed as a number.
pub fn check_format_bound(fmt: &str, args: &[Value], cap: usize) -> Result<(), Error> {
    let mut arg_bytes = 0usize;
    let mut width = 0usize;
    for a in args {
        if a.kind() == ValueKind::Number {
            let n = i128::try_from(a.clone()).unwrap_or(0).unsigned_abs();
            width = width.max(usize::try_from(n).unwrap_or(usize::MAX));
        }
        arg_bytes = arg_bytes.saturating_add(py_str(a, cap)?.len());
    }
    for run in fmt.split(|c: char| !c.is_ascii_digit()) {
        if !run.is_empty() {
            width = width.max(run.parse::<usize>().unwrap_or(usize::MAX));
        }
    }
    let fields = fmt.matches(['%', '{']).count();
    let bound = fields.saturating_mul(arg_bytes.saturating_add(width));
    check_len(fmt.len().saturating_add(bound), cap)
}

/// The `format` filter (printf style), bounded by [`check_format_bound`].
pub fn format(state: &State, value: &Value, args: Rest<Value>, cap: usize) -> Result<Value, Error> {
    check_format_bound(value.as_str().unwrap_or_default(), &args, cap)?;
    minijinja::filters::format(state, value, args)
}
