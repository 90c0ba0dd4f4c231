//! jinja2 filters whose minijinja versions differ from Python's behaviour.

use super::limits::{check_len, items_error, MAX_SEQ_ITEMS};
use super::operators::push_html_escaped;
use super::python::{py_str, write_str};
use minijinja::value::{Kwargs, Value, ValueKind};
use minijinja::{Error, ErrorKind, State};

/// `join(value, d='', attribute=None)`: items printed with `str()` (`None`, `True`, `1.0`);
/// at most `cap` bytes.
pub fn join(
    value: &Value,
    joiner: Option<String>,
    attribute: Option<Value>,
    cap: usize,
) -> Result<Value, Error> {
    if value.is_undefined() {
        return Ok(Value::from(""));
    }
    let joiner = joiner.unwrap_or_default();
    let mut out = String::new();
    for (i, item) in value.try_iter()?.enumerate() {
        if i > 0 {
            check_len(out.len() + joiner.len(), cap)?;
            out.push_str(&joiner);
        }
        let item = match &attribute {
            Some(attr) => match attr.as_str() {
                Some(path) => attr_path(&item, path)?,
                None => item.get_item(attr)?,
            },
            None => item,
        };
        write_str(&mut out, &item, cap)?;
    }
    Ok(Value::from(out))
}

/// jinja2's attribute getter: `a.b.0` looks up `a`, then `b`, then index 0.
fn attr_path(value: &Value, path: &str) -> Result<Value, Error> {
    let mut cur = value.clone();
    for part in path.split('.') {
        cur = match part.parse::<usize>() {
            Ok(idx) => cur.get_item_by_index(idx)?,
            Err(_) => cur.get_attr(part)?,
        };
    }
    Ok(cur)
}

/// `int(value, default=0, base=10)`: numbers truncate, numeric strings parse (also `"3.7"`),
/// anything else gives `default`.
pub fn int(value: &Value, default: Option<Value>, kwargs: Kwargs) -> Result<Value, Error> {
    let default = match kwargs.get::<Option<Value>>("default")? {
        Some(d) => d,
        None => default.unwrap_or(Value::from(0)),
    };
    let base: Option<u32> = kwargs.get("base")?;
    kwargs.assert_all_used()?;
    Ok(match value.kind() {
        ValueKind::Bool => Value::from(i64::from(value.is_true())),
        ValueKind::Number if value.is_integer() => value.clone(),
        ValueKind::Number => match f64::try_from(value.clone()) {
            Ok(f) if f.is_finite() => Value::from(f.trunc() as i128),
            _ => default,
        },
        ValueKind::String => {
            let s = value.as_str().unwrap_or_default().trim().replace('_', "");
            let base = base.unwrap_or(10);
            if let Ok(n) = i128::from_str_radix(&s, base.clamp(2, 36)) {
                Value::from(n)
            } else {
                match s.parse::<f64>() {
                    Ok(f) if f.is_finite() && base == 10 => Value::from(f.trunc() as i128),
                    _ => default,
                }
            }
        }
        _ => default,
    })
}

/// `float(value, default=0.0)`.
pub fn float(value: &Value, default: Option<Value>, kwargs: Kwargs) -> Result<Value, Error> {
    let default = match kwargs.get::<Option<Value>>("default")? {
        Some(d) => d,
        None => default.unwrap_or(Value::from(0.0)),
    };
    kwargs.assert_all_used()?;
    Ok(match value.kind() {
        ValueKind::Bool => Value::from(if value.is_true() { 1.0 } else { 0.0 }),
        ValueKind::Number => Value::from(f64::try_from(value.clone())?),
        ValueKind::String => {
            let s = value
                .as_str()
                .unwrap_or_default()
                .trim()
                .to_ascii_lowercase();
            match s.as_str() {
                "inf" | "+inf" | "infinity" => Value::from(f64::INFINITY),
                "-inf" | "-infinity" => Value::from(f64::NEG_INFINITY),
                "nan" | "+nan" | "-nan" => Value::from(f64::NAN),
                s => s
                    .replace('_', "")
                    .parse::<f64>()
                    .map(Value::from)
                    .unwrap_or(default),
            }
        }
        _ => default,
    })
}

/// `replace(s, old, new, count=None)` on `str(s)`; at most `cap` bytes.
pub fn replace(
    value: &Value,
    old: &str,
    new: &str,
    count: Option<i64>,
    cap: usize,
) -> Result<Value, Error> {
    let s = py_str(value, cap)?;
    replace_str(&s, old, new, count, cap).map(Value::from)
}

/// Python's `str.replace(old, new, count)`, refusing results over `cap` bytes up front.
pub fn replace_str(
    s: &str,
    old: &str,
    new: &str,
    count: Option<i64>,
    cap: usize,
) -> Result<String, Error> {
    let limit = count.filter(|n| *n >= 0).map(|n| n as usize);
    let occurrences = if old.is_empty() {
        s.chars().count() + 1
    } else {
        s.matches(old).count()
    };
    let n = limit.map_or(occurrences, |l| l.min(occurrences));
    let grown = n.saturating_mul(new.len());
    check_len(s.len().saturating_add(grown), cap)?;
    Ok(match limit {
        Some(l) => s.replacen(old, new, l),
        None => s.replace(old, new),
    })
}

/// jinja2's `indent(s, width=4, first=False, blank=False)`; `width` may be a string. Lines
/// split like Python's `str.splitlines`. The result is capped at `cap` bytes.
pub fn indent(
    value: &Value,
    width: Option<Value>,
    first: Option<bool>,
    blank: Option<bool>,
    kwargs: Kwargs,
    cap: usize,
) -> Result<Value, Error> {
    let width = match width {
        Some(w) => Some(w),
        None => kwargs.get::<Option<Value>>("width")?,
    };
    let first = first
        .or(kwargs.get::<Option<bool>>("first")?)
        .unwrap_or(false);
    let blank = blank
        .or(kwargs.get::<Option<bool>>("blank")?)
        .unwrap_or(false);
    kwargs.assert_all_used()?;
    let s = py_str(value, cap)?;
    let prefix = match &width {
        None => "    ".to_string(),
        Some(w) if w.kind() == ValueKind::String => w.as_str().unwrap_or("").to_string(),
        Some(w) => {
            let n = w.as_usize().ok_or_else(|| {
                Error::new(
                    ErrorKind::InvalidOperation,
                    "indent width must be a count or a string",
                )
            })?;
            check_len(n, cap)?;
            " ".repeat(n)
        }
    };
    let lines = splitlines(&s);
    check_len(
        s.len()
            .saturating_add(lines.len().saturating_add(1).saturating_mul(prefix.len())),
        cap,
    )?;
    let mut out = String::new();
    if first {
        out.push_str(&prefix);
    }
    for (i, line) in lines.iter().enumerate() {
        if i > 0 {
            out.push('\n');
            if blank || !line.is_empty() {
                out.push_str(&prefix);
            }
        }
        out.push_str(line);
    }
    Ok(Value::from(out))
}

/// Python's `(s + "\n").splitlines()`: the line boundaries Python recognises, and always at
/// least one (possibly empty) line.
fn splitlines(s: &str) -> Vec<&str> {
    let mut lines = Vec::new();
    let mut start = 0;
    let mut chars = s.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        let is_break = matches!(
            c,
            '\n' | '\r'
                | '\u{b}'
                | '\u{c}'
                | '\u{1c}'
                | '\u{1d}'
                | '\u{1e}'
                | '\u{85}'
                | '\u{2028}'
                | '\u{2029}'
        );
        if is_break {
            lines.push(&s[start..i]);
            let mut end = i + c.len_utf8();
            if c == '\r' {
                if let Some((j, '\n')) = chars.peek().copied() {
                    chars.next();
                    end = j + 1;
                }
            }
            start = end;
        }
    }
    // The appended "\n" of jinja2's quirk ends the last line.
    lines.push(&s[start..]);
    lines
}

/// `batch(value, count, fill_with=None)` refusing counts over [`MAX_SEQ_ITEMS`].
pub fn batch(
    state: &State,
    value: Value,
    count: usize,
    fill_with: Option<Value>,
) -> Result<Value, Error> {
    if count > MAX_SEQ_ITEMS {
        return Err(items_error());
    }
    minijinja::filters::batch(state, value, count, fill_with)
}

/// `slice(value, count, fill_with=None)` refusing counts over [`MAX_SEQ_ITEMS`].
pub fn slice(
    state: &State,
    value: Value,
    count: usize,
    fill_with: Option<Value>,
) -> Result<Value, Error> {
    if count > MAX_SEQ_ITEMS {
        return Err(items_error());
    }
    minijinja::filters::slice(state, value, count, fill_with)
}

/// `truncate(s, length=255, killwords=False, end='...', leeway=5)`, counted in characters.
pub fn truncate(
    value: &Value,
    length: Option<usize>,
    killwords: Option<bool>,
    end: Option<String>,
    kwargs: Kwargs,
    cap: usize,
) -> Result<Value, Error> {
    let length = kwargs
        .get::<Option<usize>>("length")?
        .or(length)
        .unwrap_or(255);
    let killwords = kwargs
        .get::<Option<bool>>("killwords")?
        .or(killwords)
        .unwrap_or(false);
    let end = kwargs
        .get::<Option<String>>("end")?
        .or(end)
        .unwrap_or_else(|| "...".to_string());
    let leeway = kwargs.get::<Option<usize>>("leeway")?.unwrap_or(5);
    kwargs.assert_all_used()?;
    let end_len = end.chars().count();
    if length < end_len {
        return Err(Error::new(
            ErrorKind::InvalidOperation,
            format!("expected length >= {end_len}, got {length}"),
        ));
    }
    let s = py_str(value, cap)?;
    if s.chars().count() <= length.saturating_add(leeway) {
        return Ok(Value::from(s));
    }
    let head: String = s.chars().take(length - end_len).collect();
    let kept = if killwords {
        head.as_str()
    } else {
        head.rsplit_once(' ').map_or(head.as_str(), |(a, _)| a)
    };
    Ok(Value::from(format!("{kept}{end}")))
}

/// `round(value, precision=0, method='common')`: `common` is Python's `round` (ties to even on
/// the exact binary value), `floor` and `ceil` round down and up. The result is a float.
pub fn round(
    value: &Value,
    precision: Option<i32>,
    method: Option<String>,
) -> Result<Value, Error> {
    let p = precision.unwrap_or(0).clamp(-300, 300);
    let common = method.as_deref().is_none_or(|m| m == "common");
    if common && value.kind() == ValueKind::Number && value.is_integer() {
        // Python's round() of an int stays an int (ties to even at negative precision).
        let n = i128::try_from(value.clone())?;
        if p >= 0 {
            return Ok(value.clone());
        }
        if p < -38 {
            return Ok(Value::from(0));
        }
        let unit = 10i128.pow((-p) as u32);
        let (q, r) = (n.div_euclid(unit), n.rem_euclid(unit));
        let up = 2 * r > unit || (2 * r == unit && q % 2 != 0);
        return Ok(Value::from((q + i128::from(up)) * unit));
    }
    let f = f64::try_from(value.clone())?;
    let rounded = match method.as_deref().unwrap_or("common") {
        "common" if p >= 0 => format!("{:.*}", p as usize, f).parse::<f64>().unwrap_or(f),
        "common" => {
            let scale = 10f64.powi(-p);
            (f / scale).round_ties_even() * scale
        }
        "floor" => (f * 10f64.powi(p)).floor() / 10f64.powi(p),
        "ceil" => (f * 10f64.powi(p)).ceil() / 10f64.powi(p),
        _ => {
            return Err(Error::new(
                ErrorKind::InvalidOperation,
                "method must be 'common', 'ceil' or 'floor'",
            ))
        }
    };
    Ok(Value::from(rounded))
}

/// `wordcount(s)`: the number of `\w+` runs in `str(s)`.
pub fn wordcount(value: &Value, cap: usize) -> Result<Value, Error> {
    let s = py_str(value, cap)?;
    let words = s
        .split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .filter(|w| !w.is_empty())
        .count();
    Ok(Value::from(words))
}

/// jinja2's `escape`/`e` (markupsafe: `& < > ' "`): a Markup string; already-Markup input is
/// returned as is unless `force` (`forceescape`). The result is capped at `cap` bytes.
pub fn escape(value: &Value, force: bool, cap: usize) -> Result<Value, Error> {
    if !force && value.kind() == ValueKind::String && value.is_safe() {
        return Ok(value.clone());
    }
    let s = py_str(value, cap)?;
    let mut out = String::with_capacity(s.len());
    push_html_escaped(&mut out, &s);
    check_len(out.len(), cap)?;
    Ok(Value::from_safe_string(out))
}
