//! jinja2 filters whose minijinja versions differ from Python's behaviour.

use super::python::write_str;
use minijinja::value::{Kwargs, Value, ValueKind};
use minijinja::{Error, ErrorKind};

/// `join(value, d='', attribute=None)`: items printed with `str()` (`None`, `True`, `1.0`).
pub fn join(
    value: &Value,
    joiner: Option<String>,
    attribute: Option<Value>,
) -> Result<Value, Error> {
    if value.is_undefined() {
        return Ok(Value::from(""));
    }
    let joiner = joiner.unwrap_or_default();
    let mut out = String::new();
    for (i, item) in value.try_iter()?.enumerate() {
        if i > 0 {
            out.push_str(&joiner);
        }
        let item = match &attribute {
            Some(attr) => match attr.as_str() {
                Some(path) => attr_path(&item, path)?,
                None => item.get_item(attr)?,
            },
            None => item,
        };
        write_str(&mut out, &item);
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

/// `replace(s, old, new, count=None)` on `str(s)`.
pub fn replace(value: &Value, old: &str, new: &str, count: Option<i64>) -> Value {
    let mut s = String::new();
    write_str(&mut s, value);
    Value::from(match count {
        Some(n) if n >= 0 => s.replacen(old, new, n as usize),
        _ => s.replace(old, new),
    })
}

/// `truncate(s, length=255, killwords=False, end='...', leeway=5)`, counted in characters.
pub fn truncate(
    value: &Value,
    length: Option<usize>,
    killwords: Option<bool>,
    end: Option<String>,
    kwargs: Kwargs,
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
    let mut s = String::new();
    write_str(&mut s, value);
    if s.chars().count() <= length + leeway {
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
pub fn wordcount(value: &Value) -> Value {
    let mut s = String::new();
    write_str(&mut s, value);
    let words = s
        .split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .filter(|w| !w.is_empty())
        .count();
    Value::from(words)
}
