//! Gemma 4's calls, as its template renders them and llama.cpp's `gemma4` parser reads them:
//!
//! ```text
//! <|tool_call>call:NAME{key:VALUE,key:VALUE}<tool_call|>
//! ```
//!
//! one call per pair of tags. A value is a string between `<|"|>` quotes (raw text, no
//! escapes), a number, `true`/`false`/`null`, a list `[v,v]` or a dict `{key:v}` whose keys
//! are bare (or quoted the same way). [`parse_call`] turns one into its name and a JSON
//! arguments object; [`call_after`] is the forced-call grammar, each value written in that
//! syntax and valid against its parameter's schema.
//!
//! Results of earlier calls go back to the template in the assistant message's
//! `tool_responses` (`{name, response}`), as llama.cpp hands them to this template
//! (`server::history`).

use super::literal::{arguments, BodyCalls, Cursor, Stop};
use super::ToolDef;
use serde_json::{Map, Value};

pub const OPEN: &str = "<|tool_call>";
pub const CLOSE: &str = "<tool_call|>";
/// The string quote (a control token in Gemma 4's vocabulary).
pub const QUOTE: &str = "<|\"|>";

/// Reads the text between one call's tags: `call:NAME{...}`, pushed on `calls` once its name
/// is read, its arguments set once the dict closes.
pub fn parse_call(body: &str, calls: &mut BodyCalls) -> Result<(), Stop> {
    let mut c = Cursor::new(body);
    c.ws();
    c.literal("call:")?;
    let name = c.ident()?.to_string();
    if c.peek()? != b'{' {
        return Err(Stop::Bad);
    }
    calls.push((name, None));
    let args = value(&mut c)?;
    if let Some(last) = calls.last_mut() {
        last.1 = Some(args);
    }
    c.ws();
    c.end()
}

/// One value in Gemma 4's syntax.
fn value(c: &mut Cursor<'_>) -> Result<Value, Stop> {
    if c.rest().starts_with(QUOTE) || (QUOTE.starts_with(c.rest()) && !c.rest().is_empty()) {
        return quoted(c).map(Value::String);
    }
    match c.peek()? {
        b'"' => c.quoted(b'"').map(Value::String),
        b'{' => {
            c.bump();
            let mut members = Map::new();
            loop {
                c.ws();
                if c.peek()? == b'}' {
                    c.bump();
                    return Ok(Value::Object(members));
                }
                let key = key(c)?;
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
        b'[' => {
            c.bump();
            let mut items = Vec::new();
            loop {
                c.ws();
                if c.peek()? == b']' {
                    c.bump();
                    return Ok(Value::Array(items));
                }
                items.push(value(c)?);
                c.ws();
                match c.peek()? {
                    b',' => c.bump(),
                    b']' => {}
                    _ => return Err(Stop::Bad),
                }
            }
        }
        b'-' | b'0'..=b'9' => c.number(),
        _ => match c.ident()? {
            "true" | "True" => Ok(Value::Bool(true)),
            "false" | "False" => Ok(Value::Bool(false)),
            "null" | "None" => Ok(Value::Null),
            _ => Err(Stop::Bad),
        },
    }
}

/// `<|"|>text<|"|>`.
fn quoted(c: &mut Cursor<'_>) -> Result<String, Stop> {
    c.literal(QUOTE)?;
    let rest = c.rest();
    let end = rest.find(QUOTE).ok_or(Stop::Incomplete)?;
    c.advance(end + QUOTE.len());
    Ok(rest[..end].to_string())
}

/// A dict key and its `:`: quoted, or bare text up to the `:`.
fn key(c: &mut Cursor<'_>) -> Result<String, Stop> {
    if c.rest().starts_with(QUOTE) {
        let k = quoted(c)?;
        c.ws();
        c.expect(b':')?;
        return Ok(k);
    }
    let rest = c.rest();
    let Some(end) = rest.find([':', '}', ',', '{', '[']) else {
        return Err(Stop::Incomplete);
    };
    let k = rest[..end].trim();
    if !rest[end..].starts_with(':') || k.is_empty() {
        return Err(Stop::Bad);
    }
    let k = k.to_string();
    c.advance(end + 1);
    Ok(k)
}

/// Grammar rules a Gemma 4 call uses, given the quote's grammar item.
fn rules(quote: &str, quote_is_text: bool) -> String {
    let string = if quote_is_text {
        // A lazy lexeme ends the string at the first closing quote.
        format!(
            "gemma_str[lazy]: /(?s:.*){}/\n",
            crate::structured::regex_text::regex_literal(QUOTE)
        )
    } else {
        format!("gemma_str: GEMMA_TEXT? {quote}\nGEMMA_TEXT: /(?s:.+)/\n")
    };
    format!(
        "{string}gemma_any: {quote} gemma_str | \"{{\" (gemma_kv (\",\" gemma_kv)*)? \"}}\" \
         | \"[\" (gemma_any (\",\" gemma_any)*)? \"]\" \
         | %json {{\"type\": [\"number\", \"boolean\", \"null\"]}}\n\
         gemma_kv: /[A-Za-z_][A-Za-z0-9_]*/ \":\" gemma_any\n"
    )
}

/// A literal value (of an enum or const) as Lark items.
fn literal_item(v: &Value, quote: &str) -> String {
    match v {
        Value::String(s) => format!("{quote} {} {quote}", lit(s)),
        Value::Array(items) => {
            let items: Vec<String> = items.iter().map(|i| literal_item(i, quote)).collect();
            format!("\"[\" {} \"]\"", items.join(" \",\" "))
        }
        Value::Object(members) => {
            let members: Vec<String> = members
                .iter()
                .map(|(k, v)| format!("{} {}", lit(&format!("{k}:")), literal_item(v, quote)))
                .collect();
            format!("\"{{\" {} \"}}\"", members.join(" \",\" "))
        }
        other => lit(&other.to_string()),
    }
}

fn lit(text: &str) -> String {
    serde_json::to_string(text).unwrap_or_default()
}

/// A value valid against `schema`, as a Lark expression in Gemma 4's syntax.
fn value_expr(schema: &Value, quote: &str, with_layout: &dyn Fn(Value) -> Value) -> String {
    let listed = schema
        .get("enum")
        .and_then(Value::as_array)
        .cloned()
        .or_else(|| schema.get("const").map(|c| vec![c.clone()]));
    if let Some(values) = listed {
        let alts: Vec<String> = values.iter().map(|v| literal_item(v, quote)).collect();
        return format!("({})", alts.join(" | "));
    }
    match schema.get("type").and_then(Value::as_str) {
        Some("string") => format!("{quote} gemma_str"),
        Some("integer" | "number" | "boolean" | "null") => {
            format!("%json {}", with_layout(schema.clone()))
        }
        Some("array") => {
            let Some(items) = schema.get("items").filter(|i| i.is_object()) else {
                return "\"[\" (gemma_any (\",\" gemma_any)*)? \"]\"".into();
            };
            let v = value_expr(items, quote, with_layout);
            let min = schema.get("minItems").and_then(Value::as_u64).unwrap_or(0);
            let max = schema.get("maxItems").and_then(Value::as_u64);
            if max == Some(0) {
                return "\"[\" \"]\"".into();
            }
            let more = |after_first: u64| -> String {
                let at_least = min.saturating_sub(1);
                match max {
                    Some(m) => format!("(\",\" {v}){{{at_least},{}}}", m - after_first),
                    None => {
                        let mut s = format!("(\",\" {v})*");
                        for _ in 0..at_least {
                            s = format!("\",\" {v} {s}");
                        }
                        s
                    }
                }
            };
            let body = format!("{v} {}", more(1));
            if min == 0 {
                format!("\"[\" ({body})? \"]\"")
            } else {
                format!("\"[\" {body} \"]\"")
            }
        }
        Some("object") if schema.get("properties").is_some_and(Value::is_object) => {
            format!("\"{{\" {} \"}}\"", object_args(schema, quote, with_layout))
        }
        _ => "gemma_any".into(),
    }
}

/// An object's members (sorted by name, as the template's `dictsort` writes them), the
/// required ones always.
fn object_args(schema: &Value, quote: &str, with_layout: &dyn Fn(Value) -> Value) -> String {
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let mut props: Vec<(&String, &Value)> = schema
        .get("properties")
        .and_then(Value::as_object)
        .map(|p| p.iter().collect())
        .unwrap_or_default();
    props.sort_by(|a, b| a.0.cmp(b.0));
    let items: Vec<(String, bool)> = props
        .into_iter()
        .map(|(name, s)| {
            let item = format!(
                "{} {}",
                lit(&format!("{name}:")),
                value_expr(s, quote, with_layout)
            );
            (item, required.contains(&name.as_str()))
        })
        .collect();
    arguments(&items, "\",\"")
}

/// What follows `<|tool_call>` in one call of one of `tools` (a Lark expression), and the
/// rules it uses. `close` is the `<tool_call|>` item, `quote` the `<|"|>` one.
pub fn call_after(
    tools: &[&ToolDef],
    close: &str,
    quote: &str,
    quote_is_text: bool,
    with_layout: &dyn Fn(Value) -> Value,
) -> (String, String) {
    let functions: Vec<String> = tools
        .iter()
        .map(|t| {
            format!(
                "({} \"{{\" {} \"}}\")",
                lit(&t.name),
                object_args(&t.parameters, quote, with_layout)
            )
        })
        .collect();
    let after = format!("\"call:\" ({}) {close}", functions.join(" | "));
    (after, rules(quote, quote_is_text))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(body: &str) -> Result<BodyCalls, Stop> {
        let mut calls = Vec::new();
        parse_call(body, &mut calls).map(|()| calls)
    }

    #[test]
    fn gemma_values_become_json() {
        let calls = parsed(
            "call:get_weather{city:<|\"|>Paris, \"FR\"<|\"|>,days:3,hot:true,x:null,l:[1,<|\"|>a<|\"|>],d:{k:-1.5,<|\"|>q<|\"|>:false}}",
        )
        .unwrap();
        assert_eq!(calls[0].0, "get_weather");
        assert_eq!(
            calls[0].1.as_ref().unwrap(),
            &serde_json::json!({"city": "Paris, \"FR\"", "days": 3, "hot": true, "x": null,
                "l": [1, "a"], "d": {"k": -1.5, "q": false}})
        );
        assert_eq!(
            parsed("call:f{}").unwrap()[0].1,
            Some(serde_json::json!({}))
        );
    }

    #[test]
    fn cut_and_broken_calls_are_told_apart() {
        assert_eq!(parsed("call:f{s:<|\"|>abc"), Err(Stop::Incomplete));
        assert_eq!(parsed("call:f{s:<|\""), Err(Stop::Incomplete));
        assert_eq!(parsed("cal"), Err(Stop::Incomplete));
        assert_eq!(parsed("call:f{n:1"), Err(Stop::Incomplete));
        assert_eq!(parsed("call:f(n=1)"), Err(Stop::Bad));
        assert_eq!(parsed("hello"), Err(Stop::Bad));
        assert_eq!(parsed("call:f{n:yes}"), Err(Stop::Bad));
        assert_eq!(parsed("call:f{n:1} more"), Err(Stop::Bad));
        let mut calls = Vec::new();
        assert_eq!(parse_call("call:f{n:", &mut calls), Err(Stop::Incomplete));
        assert_eq!(calls, vec![("f".to_string(), None)]);
    }
}
