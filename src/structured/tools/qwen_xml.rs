//! The grammar of Qwen3.5's and Qwen3-Coder's XML calls (read by `reader::xml`): one call is
//!
//! ```text
//! <tool_call>
//! <function=NAME>
//! <parameter=ARG>
//! VALUE
//! </parameter>
//! </function>
//! </tool_call>
//! ```
//!
//! with the parameters in the order the schema lists them (the required ones always, the
//! others optional), as llama.cpp's Qwen3-Coder grammar writes them. A value follows its
//! parameter's schema: a string is raw text up to `\n</parameter>` (one of the literals when
//! the schema is an enum or const of strings), any other value JSON valid against it.

use super::ToolDef;
use serde_json::Value;

/// The rule of a raw string value, ending with its closing tag.
const STRING_RULE: &str = "xml_string";

/// Whether a parameter's values are strings only, and the literals when they are listed.
fn string_kind(schema: &Value) -> Option<Option<Vec<String>>> {
    let listed = schema
        .get("enum")
        .and_then(Value::as_array)
        .cloned()
        .or_else(|| schema.get("const").map(|c| vec![c.clone()]));
    if let Some(values) = listed {
        let strings: Option<Vec<String>> = values
            .iter()
            .map(|v| v.as_str().map(str::to_string))
            .collect();
        return strings.map(Some);
    }
    (schema.get("type").and_then(Value::as_str) == Some("string")).then_some(None)
}

/// One parameter: its tag, value and closing tag, as a Lark expression.
fn parameter(name: &str, schema: &Value, with_layout: &dyn Fn(Value) -> Value) -> String {
    let open = lit(&format!("<parameter={name}>\n"));
    let close = lit("\n</parameter>\n");
    match string_kind(schema) {
        Some(Some(values)) => {
            let alts: Vec<String> = values.iter().map(|v| lit(v)).collect();
            format!("{open} ({}) {close}", alts.join(" | "))
        }
        Some(None) => format!("{open} {STRING_RULE}"),
        None => format!("{open} %json {} {close}", with_layout(schema.clone())),
    }
}

fn lit(text: &str) -> String {
    serde_json::to_string(text).unwrap_or_default()
}

/// What follows `<tool_call>` in one call of one of `tools` (a Lark expression), and the
/// rules it uses (to append to the grammar). `close` is the `</tool_call>` item.
pub fn call_after(
    tools: &[&ToolDef],
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
            let params: Vec<String> = t
                .parameters
                .get("properties")
                .and_then(Value::as_object)
                .map(|props| {
                    props
                        .iter()
                        .map(|(name, schema)| {
                            let p = parameter(name, schema, with_layout);
                            if required.contains(&name.as_str()) {
                                p
                            } else {
                                format!("({p})?")
                            }
                        })
                        .collect()
                })
                .unwrap_or_default();
            format!(
                "({} {} {})",
                lit(&format!("<function={}>\n", t.name)),
                params.join(" "),
                lit("</function>\n")
            )
        })
        .collect();
    let after = format!("\"\\n\" ({}) {close} \"\\n\"?", functions.join(" | "));
    let rules = format!("{STRING_RULE}[lazy]: /(?s:.*)\\n<\\/parameter>\\n/\n");
    (after, rules)
}
