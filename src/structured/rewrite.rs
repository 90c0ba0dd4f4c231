//! Schemas rewritten, before compiling, into equivalent ones the grammar engine accepts:
//! keywords llguidance 1.9 refuses but that have an exact form in what it supports. Every
//! rewrite keeps the set of valid instances (or, where noted, narrows it soundly: every
//! reply still validates against the schema the client sent).
//!
//! - `format` values no JSON Schema draft defines (`url`, `path`, `byte`, ...): annotations
//!   every validator ignores, so dropped. Formats the drafts define stay (llguidance enforces
//!   or refuses them).
//! - `dependencies` / `dependentRequired` / `dependentSchemas`: "if `a` is present then ..."
//!   is `anyOf: [{a absent}, {a present and ...}]`, added to the node's `allOf`.
//! - `not: {"required": [...]}`: "not all of these present" is `anyOf` of each one absent.
//! - `oneOf` whose branches differ only in which properties they require (`{"required":
//!   ["ssn"]}, {"required": ["ein"]}`): each branch also forbids the properties only the
//!   others require, which makes the branches disjoint, so `anyOf` is `oneOf` (narrowed:
//!   an instance with a stray key of another branch is no longer produced).

use serde_json::{json, Map, Value};

/// The formats the JSON Schema drafts define (kept: the engine enforces or refuses them).
const DEFINED_FORMATS: &[&str] = &[
    "date-time",
    "date",
    "time",
    "duration",
    "email",
    "idn-email",
    "hostname",
    "idn-hostname",
    "ipv4",
    "ipv6",
    "uri",
    "uri-reference",
    "iri",
    "iri-reference",
    "uuid",
    "uri-template",
    "json-pointer",
    "relative-json-pointer",
    "regex",
];

/// Keys that only annotate a schema (they never change what validates).
const ANNOTATIONS: &[&str] = &[
    "title",
    "description",
    "$comment",
    "examples",
    "default",
    "deprecated",
    "readOnly",
    "writeOnly",
    "markdownDescription",
];

/// Rewrites `schema` in place (see the module docs); returns how many rewrites it made.
pub fn rewrite(schema: &mut Value) -> usize {
    let mut n = 0;
    walk(schema, &mut n);
    n
}

/// Visits every subschema (only where the keywords hold schemas: a property that happens to
/// be named `dependencies` is a name, not a keyword).
fn walk(v: &mut Value, n: &mut usize) {
    let Value::Object(o) = v else {
        return;
    };
    rewrite_node(o, n);
    for (k, x) in o.iter_mut() {
        match k.as_str() {
            "items"
            | "additionalProperties"
            | "additionalItems"
            | "contains"
            | "not"
            | "if"
            | "then"
            | "else"
            | "propertyNames"
            | "unevaluatedItems"
            | "unevaluatedProperties" => match x {
                Value::Array(a) => a.iter_mut().for_each(|s| walk(s, n)),
                s => walk(s, n),
            },
            "allOf" | "anyOf" | "oneOf" | "prefixItems" => {
                if let Value::Array(a) = x {
                    a.iter_mut().for_each(|s| walk(s, n));
                }
            }
            "properties" | "patternProperties" | "definitions" | "$defs" | "dependentSchemas" => {
                if let Value::Object(m) = x {
                    m.values_mut().for_each(|s| walk(s, n));
                }
            }
            _ => {}
        }
    }
}

fn rewrite_node(o: &mut Map<String, Value>, n: &mut usize) {
    if let Some(Value::String(f)) = o.get("format") {
        if !DEFINED_FORMATS.contains(&f.as_str()) {
            o.remove("format");
            *n += 1;
        }
    }
    let mut all_of: Vec<Value> = Vec::new();
    for key in ["dependencies", "dependentRequired", "dependentSchemas"] {
        let Some(Value::Object(deps)) = o.get(key) else {
            continue;
        };
        let rewritten: Option<Vec<Value>> = deps
            .iter()
            .map(|(prop, dep)| {
                let present = match dep {
                    Value::Array(names) if names.iter().all(Value::is_string) => {
                        let mut req = vec![json!(prop)];
                        req.extend(names.iter().cloned());
                        json!({"required": req})
                    }
                    Value::Object(_) | Value::Bool(_) => {
                        json!({"allOf": [{"required": [prop]}, dep]})
                    }
                    _ => return None,
                };
                Some(json!({"anyOf": [absent(prop), present]}))
            })
            .collect();
        let Some(rewritten) = rewritten else {
            continue;
        };
        o.remove(key);
        all_of.extend(rewritten);
        *n += 1;
    }
    if let Some(Value::Object(not)) = o.get("not") {
        let required = not.get("required").and_then(Value::as_array);
        let only_required = not
            .keys()
            .all(|k| k == "required" || ANNOTATIONS.contains(&k.as_str()));
        if let (true, Some(req)) = (only_required, required) {
            if !req.is_empty() && req.iter().all(Value::is_string) {
                let branches: Vec<Value> =
                    req.iter().filter_map(Value::as_str).map(absent).collect();
                o.remove("not");
                all_of.push(json!({"anyOf": branches}));
                *n += 1;
            }
        }
    }
    if !all_of.is_empty() {
        match o.get_mut("allOf") {
            Some(Value::Array(existing)) => existing.extend(all_of),
            _ => {
                o.insert("allOf".into(), Value::Array(all_of));
            }
        }
    }
    if let Some(Value::Array(branches)) = o.get_mut("oneOf") {
        if disjoin_required(branches) {
            if let Some(b) = o.remove("oneOf") {
                o.insert("anyOf".into(), b);
                *n += 1;
            }
        }
    }
}

/// A schema under which `prop` is absent.
fn absent(prop: &str) -> Value {
    json!({"properties": {prop: false}})
}

/// For `oneOf` branches that differ only in their `required` lists: makes each forbid the
/// properties only the others require, so they are disjoint. False (and nothing changed)
/// when the branches are not of that shape or one's list is part of another's (then some
/// instances would satisfy two branches however they are narrowed).
fn disjoin_required(branches: &mut [Value]) -> bool {
    let mut lists: Vec<Vec<String>> = Vec::new();
    for b in branches.iter() {
        let Some(o) = b.as_object() else {
            return false;
        };
        let shape_ok = o.keys().all(|k| {
            matches!(k.as_str(), "required" | "properties" | "type")
                || ANNOTATIONS.contains(&k.as_str())
        });
        let req: Option<Vec<String>> = o.get("required").and_then(Value::as_array).map(|r| {
            r.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        });
        match (shape_ok, req) {
            (true, Some(r)) if !r.is_empty() && o.get("type").is_none_or(|t| t == "object") => {
                lists.push(r)
            }
            _ => return false,
        }
    }
    if lists.len() < 2 {
        return false;
    }
    for (i, a) in lists.iter().enumerate() {
        for (j, b) in lists.iter().enumerate() {
            if i != j && a.iter().all(|k| b.contains(k)) {
                return false;
            }
        }
    }
    for (i, b) in branches.iter_mut().enumerate() {
        let Some(o) = b.as_object_mut() else {
            return false;
        };
        let others: Vec<&String> = lists
            .iter()
            .enumerate()
            .filter(|(j, _)| *j != i)
            .flat_map(|(_, l)| l)
            .filter(|k| !lists[i].contains(k))
            .collect();
        let props = o
            .entry("properties")
            .or_insert_with(|| Value::Object(Map::new()));
        let Some(props) = props.as_object_mut() else {
            return false;
        };
        for k in others {
            props.insert(k.clone(), Value::Bool(false));
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn undefined_formats_go_and_defined_ones_stay() {
        let mut s = json!({"properties": {"a": {"type": "string", "format": "url"}, "b": {"type": "string", "format": "uri"}, "c": {"const": {"format": "path"}}, "dependencies": {"type": "object"}}});
        assert_eq!(rewrite(&mut s), 1);
        assert_eq!(s["properties"]["dependencies"], json!({"type": "object"}));
        assert_eq!(s["properties"]["a"], json!({"type": "string"}));
        assert_eq!(s["properties"]["b"]["format"], "uri");
        assert_eq!(s["properties"]["c"]["const"]["format"], "path");
    }

    #[test]
    fn dependencies_become_any_of() {
        let mut s = json!({"type": "object", "dependencies": {"a": ["b"], "w": {"properties": {"t": {"enum": ["x"]}}}}, "allOf": [{"required": ["z"]}]});
        assert_eq!(rewrite(&mut s), 1);
        assert!(s.get("dependencies").is_none());
        assert_eq!(
            s["allOf"],
            json!([
                {"required": ["z"]},
                {"anyOf": [{"properties": {"a": false}}, {"required": ["a", "b"]}]},
                {"anyOf": [{"properties": {"w": false}}, {"allOf": [{"required": ["w"]}, {"properties": {"t": {"enum": ["x"]}}}]}]}
            ])
        );
    }

    #[test]
    fn not_required_and_one_of_required() {
        let mut s = json!({"not": {"required": ["a", "b"]}});
        rewrite(&mut s);
        assert_eq!(
            s,
            json!({"allOf": [{"anyOf": [{"properties": {"a": false}}, {"properties": {"b": false}}]}]})
        );
        let mut s = json!({"oneOf": [{"required": ["ssn"]}, {"required": ["base", "height"], "title": "t"}]});
        rewrite(&mut s);
        assert_eq!(
            s,
            json!({"anyOf": [
                {"required": ["ssn"], "properties": {"base": false, "height": false}},
                {"required": ["base", "height"], "title": "t", "properties": {"ssn": false}}
            ]})
        );
        // One list inside another: some instance satisfies both branches, left alone.
        let mut s = json!({"oneOf": [{"required": ["a"]}, {"required": ["a", "b"]}]});
        assert_eq!(rewrite(&mut s), 0);
        let mut s = json!({"oneOf": [{"required": ["a"]}, {"type": "string"}]});
        assert_eq!(rewrite(&mut s), 0);
    }
}
