//! LFM2's calls: `<|tool_call_start|>[name(arg=value, ...), ...]<|tool_call_end|>`, each value
//! a Python literal (a string in single or double quotes, a number, `True`/`False`/`None`, a
//! list, a tuple, a dict), JSON's `true`/`false`/`null` accepted too, as llama.cpp's LFM2
//! parser does. The template lists the tools as JSON in the system prompt and renders no
//! earlier call itself: the assistant's content carries the call text ([`render_calls`]).
//!
//! The forced-call grammar ([`call_after`]) writes each value as JSON valid against its
//! parameter's schema (a JSON string, number, list or object is a Python literal too), a
//! boolean or null parameter in Python's spelling or JSON's.

use super::literal::{arguments, BodyCalls, Cursor, Stop};
use super::ToolDef;
use serde_json::{Map, Value};

pub const OPEN: &str = "<|tool_call_start|>";
pub const CLOSE: &str = "<|tool_call_end|>";

/// Reads the text between the tags: a list of calls, or one call without the brackets.
/// Each call is pushed on `calls` once its name and `(` are read, its arguments set when its
/// `)` is; [`Stop::Incomplete`] when the text ends inside a call.
pub fn parse_calls(body: &str, calls: &mut BodyCalls) -> Result<(), Stop> {
    let mut c = Cursor::new(body);
    c.ws();
    if c.peek()? == b'[' {
        c.bump();
        loop {
            c.ws();
            if c.peek()? == b']' && !calls.is_empty() {
                c.bump();
                break;
            }
            call(&mut c, calls)?;
            c.ws();
            match c.peek()? {
                b',' => c.bump(),
                b']' => {
                    c.bump();
                    break;
                }
                _ => return Err(Stop::Bad),
            }
        }
    } else {
        call(&mut c, calls)?;
    }
    c.ws();
    c.end()
}

/// `name(arg=value, ...)`.
fn call(c: &mut Cursor<'_>, calls: &mut BodyCalls) -> Result<(), Stop> {
    let name = c.ident()?.to_string();
    c.ws();
    c.expect(b'(')?;
    calls.push((name, None));
    let mut args = Map::new();
    loop {
        c.ws();
        if c.peek()? == b')' {
            c.bump();
            break;
        }
        let key = c.ident()?.to_string();
        c.ws();
        c.expect(b'=')?;
        c.ws();
        args.insert(key, value(c)?);
        c.ws();
        match c.peek()? {
            b',' => c.bump(),
            b')' => {}
            _ => return Err(Stop::Bad),
        }
    }
    if let Some(last) = calls.last_mut() {
        last.1 = Some(Value::Object(args));
    }
    Ok(())
}

/// One Python (or JSON) literal.
fn value(c: &mut Cursor<'_>) -> Result<Value, Stop> {
    match c.peek()? {
        q @ (b'"' | b'\'') => c.quoted(q).map(Value::String),
        open @ (b'[' | b'(') => {
            c.bump();
            let close = if open == b'[' { b']' } else { b')' };
            let mut items = Vec::new();
            loop {
                c.ws();
                if c.peek()? == close {
                    c.bump();
                    return Ok(Value::Array(items));
                }
                items.push(value(c)?);
                c.ws();
                match c.peek()? {
                    b',' => c.bump(),
                    b if b == close => {}
                    _ => return Err(Stop::Bad),
                }
            }
        }
        b'{' => {
            c.bump();
            let mut members = Map::new();
            loop {
                c.ws();
                if c.peek()? == b'}' {
                    c.bump();
                    return Ok(Value::Object(members));
                }
                let key = match value(c)? {
                    Value::String(s) => s,
                    other => other.to_string(),
                };
                c.ws();
                c.expect(b':')?;
                c.ws();
                members.insert(key, value(c)?);
                c.ws();
                match c.peek()? {
                    b',' => c.bump(),
                    b'}' => {}
                    _ => return Err(Stop::Bad),
                }
            }
        }
        b'-' | b'+' | b'.' | b'0'..=b'9' => c.number(),
        _ => match c.ident()? {
            "True" | "true" => Ok(Value::Bool(true)),
            "False" | "false" => Ok(Value::Bool(false)),
            "None" | "null" => Ok(Value::Null),
            _ => Err(Stop::Bad),
        },
    }
}

/// A value as a Python literal (strings in double quotes with JSON's escapes, which Python
/// reads the same).
pub fn python_literal(v: &Value) -> String {
    match v {
        Value::Null => "None".into(),
        Value::Bool(true) => "True".into(),
        Value::Bool(false) => "False".into(),
        Value::Number(n) => n.to_string(),
        Value::String(_) => v.to_string(),
        Value::Array(items) => {
            let items: Vec<String> = items.iter().map(python_literal).collect();
            format!("[{}]", items.join(", "))
        }
        Value::Object(members) => {
            let members: Vec<String> = members
                .iter()
                .map(|(k, v)| format!("{}: {}", Value::String(k.clone()), python_literal(v)))
                .collect();
            format!("{{{}}}", members.join(", "))
        }
    }
}

/// An assistant message's earlier calls (OpenAI `tool_calls` entries, their arguments an
/// object or its JSON text) as LFM2 writes them: one tagged list.
pub fn render_calls(calls: &[Value]) -> String {
    let one: Vec<String> = calls
        .iter()
        .map(|c| {
            let f = c.get("function").unwrap_or(c);
            let name = f.get("name").and_then(Value::as_str).unwrap_or_default();
            let args = match f.get("arguments") {
                Some(Value::String(s)) => serde_json::from_str(s).unwrap_or(Value::Null),
                Some(v) => v.clone(),
                None => Value::Null,
            };
            let args: Vec<String> = args
                .as_object()
                .map(|o| {
                    o.iter()
                        .map(|(k, v)| format!("{k}={}", python_literal(v)))
                        .collect()
                })
                .unwrap_or_default();
            format!("{name}({})", args.join(", "))
        })
        .collect();
    format!("{OPEN}[{}]{CLOSE}", one.join(", "))
}

/// One argument's value as a Lark expression: JSON valid against `schema`, a boolean or null
/// also in Python's spelling.
fn argument(schema: &Value, with_layout: &dyn Fn(Value) -> Value) -> String {
    let words = |w: &[&str]| {
        let alts: Vec<String> = w.iter().map(|w| format!("\"{w}\"")).collect();
        format!("({})", alts.join(" | "))
    };
    match schema.get("type").and_then(Value::as_str) {
        Some("boolean") if schema.get("enum").is_none() && schema.get("const").is_none() => {
            words(&["True", "False", "true", "false"])
        }
        Some("null") => words(&["None", "null"]),
        _ => format!("%json {}", with_layout(schema.clone())),
    }
}

/// What follows `<|tool_call_start|>` in a reply of up to `most` calls of `tools` (a Lark
/// expression; all the calls go in one list). `close` is the `<|tool_call_end|>` item.
/// Arguments come in the order the schema lists them, the required ones always.
pub fn call_after(
    tools: &[&ToolDef],
    most: usize,
    close: &str,
    with_layout: &dyn Fn(Value) -> Value,
) -> (String, String) {
    let functions: Vec<String> = tools
        .iter()
        .map(|t| {
            let required: Vec<&str> = t
                .parameters
                .get("required")
                .and_then(Value::as_array)
                .map(|r| r.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            let props: Vec<(&String, &Value)> = t
                .parameters
                .get("properties")
                .and_then(Value::as_object)
                .map(|p| p.iter().collect())
                .unwrap_or_default();
            let items: Vec<(String, bool)> = props
                .into_iter()
                .map(|(name, schema)| {
                    let item = format!(
                        "{} {}",
                        serde_json::to_string(&format!("{name}=")).unwrap_or_default(),
                        argument(schema, with_layout)
                    );
                    (item, required.contains(&name.as_str()))
                })
                .collect();
            let args = arguments(&items, "\", \"");
            format!(
                "({} \"(\" {args} \")\")",
                serde_json::to_string(&t.name).unwrap_or_default()
            )
        })
        .collect();
    let one = format!("({})", functions.join(" | "));
    let rest = if most > 1 {
        format!(" lfm2_more{{0,{}}}", most - 1)
    } else {
        String::new()
    };
    let after = format!("\"[\" lfm2_call{rest} \"]\" {close}");
    (
        after,
        format!("lfm2_call: {one}\nlfm2_more: \", \" lfm2_call\n"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(body: &str) -> Result<BodyCalls, Stop> {
        let mut calls = Vec::new();
        parse_calls(body, &mut calls).map(|()| calls)
    }

    #[test]
    fn python_literals_become_json() {
        let calls = parsed(
            r#"[f(s="a\"b", t='it\'s', n=-2, x=1.5e3, b=True, c=false, z=None, l=[1, (2, 3)], d={'k': "v", 1: 2})]"#,
        )
        .unwrap();
        assert_eq!(calls.len(), 1);
        assert_eq!(calls[0].0, "f");
        assert_eq!(
            calls[0].1.as_ref().unwrap(),
            &serde_json::json!({"s": "a\"b", "t": "it's", "n": -2, "x": 1500.0, "b": true,
                "c": false, "z": null, "l": [1, [2, 3]], "d": {"k": "v", "1": 2}})
        );
        let two = parsed("[a(), b(x='y')]").unwrap();
        assert_eq!(two.len(), 2);
        assert_eq!(parsed("a(x=1)").unwrap().len(), 1);
    }

    #[test]
    fn cut_and_broken_calls_are_told_apart() {
        assert_eq!(parsed("[f(x=\"abc"), Err(Stop::Incomplete));
        assert_eq!(parsed("[f(x=1), g("), Err(Stop::Incomplete));
        assert_eq!(parsed("[f(1)]"), Err(Stop::Bad));
        assert_eq!(parsed("[f(x=yes)]"), Err(Stop::Bad));
        assert_eq!(parsed("[f(x=1)] trailing"), Err(Stop::Bad));
        assert_eq!(parsed("[]"), Err(Stop::Bad));
        let mut calls = Vec::new();
        assert_eq!(
            parse_calls("[f(x=1), g(y=", &mut calls),
            Err(Stop::Incomplete)
        );
        assert_eq!(calls.len(), 2);
        assert!(calls[0].1.is_some() && calls[1].1.is_none());
    }

    #[test]
    fn earlier_calls_render_as_the_model_writes_them() {
        let calls = serde_json::json!([
            {"id": "1", "type": "function", "function": {"name": "get_weather",
                "arguments": "{\"city\": \"Paris\", \"days\": 3, \"ok\": true, \"x\": null}"}},
            {"function": {"name": "book", "arguments": {"tags": ["a"], "d": {"k": 1.5}}}},
        ]);
        let text = render_calls(calls.as_array().unwrap());
        assert_eq!(
            text,
            "<|tool_call_start|>[get_weather(city=\"Paris\", days=3, ok=True, x=None), book(tags=[\"a\"], d={\"k\": 1.5})]<|tool_call_end|>"
        );
        // And it reads back as those calls.
        let body = &text[OPEN.len()..text.len() - CLOSE.len()];
        let back = parsed(body).unwrap();
        assert_eq!(back[0].1.as_ref().unwrap()["city"], "Paris");
        assert_eq!(back[1].1.as_ref().unwrap()["d"]["k"], 1.5);
    }
}
