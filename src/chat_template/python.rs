//! Python's `str()` and `repr()` of template values, so output reads as the Python reference's.
//!
//! Jinja2 prints `{{ x }}` with `str(x)`: `None`, `True`, `False`, floats as `repr(float)`
//! (`1.0`, `1e-05`), and containers as their `repr` (`['a', 1]`, `{'k': None}`). Undefined
//! prints as the empty string.

use super::limits::{check_len, size_error};
use minijinja::value::{Enumerator, Object, ObjectRepr, Value, ValueKind};
use minijinja::Error;
use std::sync::Arc;

/// A Python tuple: a sequence that prints as `('a', 1)`. Produced where jinja2 yields tuples
/// (`dict.items()`, `|items`, `|dictsort`); otherwise it behaves like a list.
#[derive(Debug)]
pub struct Tuple(pub Vec<Value>);

impl Object for Tuple {
    fn repr(self: &Arc<Self>) -> ObjectRepr {
        ObjectRepr::Seq
    }

    fn get_value(self: &Arc<Self>, key: &Value) -> Option<Value> {
        let idx = i64::try_from(key.clone()).ok()?;
        let len = self.0.len() as i64;
        let idx = if idx < 0 { idx + len } else { idx };
        usize::try_from(idx)
            .ok()
            .and_then(|i| self.0.get(i).cloned())
    }

    fn enumerate(self: &Arc<Self>) -> Enumerator {
        Enumerator::Seq(self.0.len())
    }
}

/// A 2-tuple `(a, b)` as a template value.
pub fn pair(a: Value, b: Value) -> Value {
    Value::from_object(Tuple(vec![a, b]))
}

/// Turns each 2-item sequence yielded by `value` into a [`Tuple`].
pub fn pairs_to_tuples(value: &Value) -> Result<Value, Error> {
    let mut out = Vec::new();
    for item in value.try_iter()? {
        let parts: Vec<Value> = item.try_iter()?.collect();
        out.push(Value::from_object(Tuple(parts)));
    }
    Ok(Value::from(out))
}

/// `str(value)` as Python would print it; an error once it passes `cap` bytes.
pub fn py_str(value: &Value, cap: usize) -> Result<String, Error> {
    let mut out = String::new();
    write_str(&mut out, value, cap)?;
    Ok(out)
}

/// Appends `str(value)` to `out`; an error once `out` would pass `cap` bytes.
pub fn write_str(out: &mut String, value: &Value, cap: usize) -> Result<(), Error> {
    match value.kind() {
        ValueKind::String => {
            let s = value.as_str().unwrap_or_default();
            check_len(out.len() + s.len(), cap)?;
            out.push_str(s);
        }
        ValueKind::Undefined => {}
        _ => write_repr(out, value, cap)?,
    }
    Ok(())
}

/// Appends `repr(value)` to `out`; an error once `out` passes `cap` bytes.
pub fn write_repr(out: &mut String, value: &Value, cap: usize) -> Result<(), Error> {
    if out.len() > cap {
        return Err(size_error(cap));
    }
    match value.kind() {
        ValueKind::Undefined => {}
        ValueKind::None => out.push_str("None"),
        ValueKind::Bool => out.push_str(if value.is_true() { "True" } else { "False" }),
        ValueKind::Number => write_number(out, value, FloatStyle::Python),
        ValueKind::String => {
            let s = value.as_str().unwrap_or_default();
            check_len(out.len() + s.len(), cap)?;
            write_str_repr(out, s);
        }
        ValueKind::Seq if value.downcast_object_ref::<Tuple>().is_some() => {
            let items = &value
                .downcast_object_ref::<Tuple>()
                .map_or(&[][..], |t| &t.0[..]);
            out.push('(');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_repr(out, item, cap)?;
            }
            if items.len() == 1 {
                out.push(',');
            }
            out.push(')');
        }
        ValueKind::Seq | ValueKind::Iterable => {
            out.push('[');
            if let Ok(iter) = value.try_iter() {
                for (i, item) in iter.enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    write_repr(out, &item, cap)?;
                }
            }
            out.push(']');
        }
        ValueKind::Map => {
            out.push('{');
            if let Ok(iter) = value.try_iter() {
                for (i, key) in iter.enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    write_repr(out, &key, cap)?;
                    out.push_str(": ");
                    let item = value.get_item(&key).unwrap_or_default();
                    write_repr(out, &item, cap)?;
                }
            }
            out.push('}');
        }
        // Bytes, plain objects, invalid values: minijinja's own rendering is the best guess.
        _ => out.push_str(&value.to_string()),
    }
    check_len(out.len(), cap)
}

/// How non-finite floats are spelled: `repr` (`nan`, `inf`) or `json.dumps` (`NaN`, `Infinity`).
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum FloatStyle {
    Python,
    Json,
}

/// Appends a number: integers in decimal, floats as Python's shortest `repr`.
pub fn write_number(out: &mut String, value: &Value, style: FloatStyle) {
    if value.is_integer() {
        out.push_str(&value.to_string());
    } else {
        match f64::try_from(value.clone()) {
            Ok(f) => write_float(out, f, style),
            Err(_) => out.push_str(&value.to_string()),
        }
    }
}

/// Appends `repr(f)` (Python's shortest round-trip form, exponent when `e < -4` or `e >= 16`).
pub fn write_float(out: &mut String, f: f64, style: FloatStyle) {
    if f.is_nan() {
        out.push_str(if style == FloatStyle::Json {
            "NaN"
        } else {
            "nan"
        });
        return;
    }
    if f.is_infinite() {
        let s = match (style, f > 0.0) {
            (FloatStyle::Json, true) => "Infinity",
            (FloatStyle::Json, false) => "-Infinity",
            (FloatStyle::Python, true) => "inf",
            (FloatStyle::Python, false) => "-inf",
        };
        out.push_str(s);
        return;
    }
    // Rust's `{:e}` gives the shortest round-trip digits: "-1.2345e-5", "1e16", "0e0".
    let sci = format!("{:e}", f.abs());
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    if f.is_sign_negative() {
        out.push('-');
    }
    if !(-5 < exp && exp < 16) {
        out.push_str(&digits[..1]);
        if digits.len() > 1 {
            out.push('.');
            out.push_str(&digits[1..]);
        }
        out.push('e');
        out.push(if exp < 0 { '-' } else { '+' });
        out.push_str(&format!("{:02}", exp.abs()));
    } else if exp < 0 {
        out.push_str("0.");
        for _ in 0..(-exp - 1) {
            out.push('0');
        }
        out.push_str(&digits);
    } else {
        let int_len = exp as usize + 1;
        if digits.len() <= int_len {
            out.push_str(&digits);
            for _ in digits.len()..int_len {
                out.push('0');
            }
            out.push_str(".0");
        } else {
            out.push_str(&digits[..int_len]);
            out.push('.');
            out.push_str(&digits[int_len..]);
        }
    }
}

/// Appends `repr(s)` for a string: single quotes unless the text has `'` and no `"`.
fn write_str_repr(out: &mut String, s: &str) {
    let quote = if s.contains('\'') && !s.contains('"') {
        '"'
    } else {
        '\''
    };
    out.push(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if is_py_printable(c) => out.push(c),
            c if (c as u32) < 0x100 => out.push_str(&format!("\\x{:02x}", c as u32)),
            c if (c as u32) < 0x10000 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push_str(&format!("\\U{:08x}", c as u32)),
        }
    }
    out.push(quote);
}

/// An approximation of Python's `str.isprintable` for one character: control characters,
/// separators other than the ASCII space, and format characters are escaped by `repr`.
fn is_py_printable(c: char) -> bool {
    let u = c as u32;
    if c == ' ' {
        return true;
    }
    if u < 0x20 || (0x7f..0xa0).contains(&u) || u == 0xad {
        return false;
    }
    if c.is_whitespace() {
        return false; // Zs/Zl/Zp other than ' ' are not printable
    }
    !matches!(u, 0x200b..=0x200f | 0x2028..=0x202e | 0x2060..=0x2064 | 0xfeff | 0xd800..=0xdfff)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn float(f: f64) -> String {
        let mut s = String::new();
        write_float(&mut s, f, FloatStyle::Python);
        s
    }

    #[test]
    fn floats_print_like_python_repr() {
        assert_eq!(float(1.0), "1.0");
        assert_eq!(float(-0.0), "-0.0");
        assert_eq!(float(0.5), "0.5");
        assert_eq!(float(0.1 + 0.2), "0.30000000000000004");
        assert_eq!(float(1e-5), "1e-05");
        assert_eq!(float(0.0001), "0.0001");
        assert_eq!(float(1e16), "1e+16");
        assert_eq!(float(1e15), "1000000000000000.0");
        assert_eq!(float(123.456), "123.456");
        assert_eq!(float(1.5e300), "1.5e+300");
        assert_eq!(float(f64::NAN), "nan");
    }

    #[test]
    fn containers_print_like_python_repr() {
        let v = Value::from_serialize(serde_json::json!(
            {"a": [1, 2.0, null, true], "b": "it's", "c": "x\n"}
        ));
        assert_eq!(
            py_str(&v, 1000).unwrap(),
            r#"{'a': [1, 2.0, None, True], 'b': "it's", 'c': 'x\n'}"#
        );
        assert_eq!(py_str(&Value::from(false), 100).unwrap(), "False");
        assert_eq!(py_str(&Value::UNDEFINED, 100).unwrap(), "");
        let t = pair(Value::from("a"), Value::from(1));
        assert_eq!(py_str(&t, 100).unwrap(), "('a', 1)");
        assert_eq!(py_str(&Value::from(vec![t]), 100).unwrap(), "[('a', 1)]");
        let big = Value::from(vec![Value::from("x".repeat(100)); 1000]);
        assert!(py_str(&big, 1000).is_err());
    }
}
