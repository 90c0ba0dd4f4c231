//! The `tojson` filter as transformers defines it: Python's
//! `json.dumps(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False)`.
//!
//! Output matches Python byte for byte: `", "` and `": "` separators (`","` when indenting),
//! floats as `repr(float)`, `NaN`/`Infinity`, keys in insertion order unless `sort_keys`.

use super::limits::check_len;
use super::python::{write_float, write_number, FloatStyle};
use minijinja::value::{Kwargs, Value, ValueKind};
use minijinja::{Error, ErrorKind};

/// Formatting options of `json.dumps`.
struct Options {
    ensure_ascii: bool,
    /// `None`: one line; `Some(s)`: newline and `s` repeated per level.
    indent: Option<String>,
    item_sep: String,
    key_sep: String,
    sort_keys: bool,
    /// Most bytes the result may have.
    cap: usize,
}

/// The `tojson` filter: `ensure_ascii` and `indent` positional or keyword, `separators` and
/// `sort_keys` keyword.
/// The result is capped at `cap` bytes.
pub fn tojson_filter(
    value: &Value,
    ensure_ascii: Option<Value>,
    indent: Option<Value>,
    kwargs: Kwargs,
    cap: usize,
) -> Result<Value, Error> {
    let pick = |pos: Option<Value>, name: &str| -> Result<Option<Value>, Error> {
        let kw: Option<Value> = kwargs.get(name)?;
        Ok(kw.or(pos).filter(|v| !v.is_none() && !v.is_undefined()))
    };
    let ensure_ascii = pick(ensure_ascii, "ensure_ascii")?.is_some_and(|v| v.is_true());
    let sort_keys = pick(None, "sort_keys")?.is_some_and(|v| v.is_true());
    let indent = match pick(indent, "indent")? {
        None => None,
        Some(v) if v.kind() == ValueKind::String => Some(v.as_str().unwrap_or("").to_string()),
        Some(v) => match v.as_i64() {
            Some(n) => Some(" ".repeat(n.clamp(0, 64) as usize)),
            None => return Err(invalid("tojson: indent must be an integer or a string")),
        },
    };
    let (item_sep, key_sep) = match pick(None, "separators")? {
        Some(v) => {
            let parts: Vec<Value> = v.try_iter()?.collect();
            match parts.as_slice() {
                [a, b] if a.as_str().is_some() && b.as_str().is_some() => (
                    a.as_str().unwrap_or_default().to_string(),
                    b.as_str().unwrap_or_default().to_string(),
                ),
                _ => return Err(invalid("tojson: separators must be two strings")),
            }
        }
        None if indent.is_some() => (",".to_string(), ": ".to_string()),
        None => (", ".to_string(), ": ".to_string()),
    };
    kwargs.assert_all_used()?;
    let opts = Options {
        ensure_ascii,
        indent,
        item_sep,
        key_sep,
        sort_keys,
        cap,
    };
    let mut out = String::new();
    dump(&mut out, value, &opts, 0)?;
    Ok(Value::from(out))
}

/// `json.dumps(value)` with default Python options except `ensure_ascii=False`.
#[cfg(test)]
pub fn dumps(value: &Value) -> Result<String, Error> {
    let opts = Options {
        ensure_ascii: false,
        indent: None,
        item_sep: ", ".into(),
        key_sep: ": ".into(),
        sort_keys: false,
        cap: usize::MAX,
    };
    let mut out = String::new();
    dump(&mut out, value, &opts, 0)?;
    Ok(out)
}

fn invalid(msg: &str) -> Error {
    Error::new(ErrorKind::InvalidOperation, msg.to_string())
}

/// Depth past which nesting is refused (Python's recursion limit would trip near here too).
const MAX_DEPTH: usize = 512;

fn dump(out: &mut String, value: &Value, opts: &Options, level: usize) -> Result<(), Error> {
    if level > MAX_DEPTH {
        return Err(invalid("tojson: value nested too deeply"));
    }
    check_len(out.len(), opts.cap)?;
    match value.kind() {
        ValueKind::Undefined => {
            return Err(invalid("Object of type Undefined is not JSON serializable"))
        }
        ValueKind::None => out.push_str("null"),
        ValueKind::Bool => out.push_str(if value.is_true() { "true" } else { "false" }),
        ValueKind::Number => write_number(out, value, FloatStyle::Json),
        ValueKind::String => write_json_str(out, value.as_str().unwrap_or_default(), opts),
        ValueKind::Seq | ValueKind::Iterable => {
            let items: Vec<Value> = value.try_iter()?.collect();
            if items.is_empty() {
                out.push_str("[]");
                return Ok(());
            }
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(&opts.item_sep);
                }
                newline(out, opts, level + 1);
                dump(out, item, opts, level + 1)?;
            }
            newline(out, opts, level);
            out.push(']');
        }
        ValueKind::Map => {
            let mut entries: Vec<(String, Value)> = Vec::new();
            for key in value.try_iter()? {
                let item = value.get_item(&key)?;
                entries.push((key_string(&key)?, item));
            }
            if entries.is_empty() {
                out.push_str("{}");
                return Ok(());
            }
            if opts.sort_keys {
                entries.sort_by(|a, b| a.0.cmp(&b.0));
            }
            out.push('{');
            for (i, (key, item)) in entries.iter().enumerate() {
                if i > 0 {
                    out.push_str(&opts.item_sep);
                }
                newline(out, opts, level + 1);
                write_json_str(out, key, opts);
                out.push_str(&opts.key_sep);
                dump(out, item, opts, level + 1)?;
            }
            newline(out, opts, level);
            out.push('}');
        }
        kind => {
            return Err(invalid(&format!(
                "Object of type {kind} is not JSON serializable"
            )))
        }
    }
    Ok(())
}

fn newline(out: &mut String, opts: &Options, level: usize) {
    if let Some(indent) = &opts.indent {
        out.push('\n');
        for _ in 0..level {
            out.push_str(indent);
        }
    }
}

/// A dict key as `json.dumps` turns it into a string (`True` -> `"true"`, `1` -> `"1"`).
fn key_string(key: &Value) -> Result<String, Error> {
    Ok(match key.kind() {
        ValueKind::String => key.as_str().unwrap_or_default().to_string(),
        ValueKind::None => "null".into(),
        ValueKind::Bool => if key.is_true() { "true" } else { "false" }.into(),
        ValueKind::Number if key.is_integer() => key.to_string(),
        ValueKind::Number => {
            let mut s = String::new();
            write_float(&mut s, f64::try_from(key.clone())?, FloatStyle::Json);
            s
        }
        kind => {
            return Err(invalid(&format!(
                "keys must be str, int, float, bool or None, not {kind}"
            )))
        }
    })
}

/// A JSON string literal the way Python's encoder writes it (lowercase `\u00XX` escapes).
fn write_json_str(out: &mut String, s: &str, opts: &Options) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c if opts.ensure_ascii && (c as u32) > 0x7e => {
                let mut buf = [0u16; 2];
                for unit in c.encode_utf16(&mut buf) {
                    out.push_str(&format!("\\u{:04x}", unit));
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn py(v: serde_json::Value) -> String {
        dumps(&Value::from_serialize(v)).unwrap()
    }

    #[test]
    fn dumps_matches_python_json() {
        assert_eq!(
            py(json!({"b": 1, "a": [1.0, 2.5, null, true], "c": "é\"\n\u{1}"})),
            r#"{"b": 1, "a": [1.0, 2.5, null, true], "c": "é\"\n\u0001"}"#
        );
        assert_eq!(py(json!([])), "[]");
        assert_eq!(py(json!({})), "{}");
        assert_eq!(py(json!(1e-7)), "1e-07");
    }
}
