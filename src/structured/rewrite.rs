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
//! - `not: {"required": [...]}`: "not all of these present" is `anyOf` of each one absent
//!   (narrowed when `properties` or `type: object` stand beside the list: an instance that
//!   has them all but fails one of those no longer is produced).
//! - `minProperties`/`maxProperties` over optional properties: [`super::counts`].
//! - `if`/`then`/`else` switching on one property with listed values: [`super::conditional`].
//! - `oneOf` whose branches differ only in which properties they require (`{"required":
//!   ["ssn"]}, {"required": ["ein"]}`): each branch also forbids the properties only the
//!   others require, which makes the branches disjoint, so `anyOf` is `oneOf` (narrowed:
//!   an instance with a stray key of another branch is no longer produced).
//! - `oneOf` whose branches provably share no instance (types that do not meet, disjoint
//!   `const`/`enum` sets, a discriminator property both require: [`super::disjoint`]): at
//!   most one branch matches any instance, so `anyOf` is `oneOf`.
//! - `oneOf` whose branches give one property disjoint `const`/`enum` sets (a discriminator
//!   such as `"type": {"enum": ["name"]}` / `["link"]`) but do not require it: each branch
//!   is narrowed to objects that have it, which makes them disjoint, so `anyOf` is `oneOf`
//!   (narrowed: non-objects and objects without the discriminator are no longer produced).
//! - Keys beside a `$ref` that say nothing the target does not: annotations (and `$schema`),
//!   and a `type` equal to the target's (the engine refuses siblings on recursive references).
//! - Beside `anyOf`/`oneOf`: a `type` every branch already implies, and
//!   `additionalProperties: {}` (the default) anywhere (the engine intersects siblings into
//!   each branch, which it cannot do through a recursive reference).
//! - A property whose schema is the one a match-everything `patternProperties` entry (`.*`)
//!   gives: that entry applies to it anyway, so the `properties` entry goes (the engine would
//!   intersect the two, which it cannot do through a recursive reference).
//! - A schema with `not: {}` (or `not: true`) matches nothing: `false` (a property that must
//!   be absent).

use super::annotations::ANNOTATIONS;
use super::conditional::rewrite_conditionals;
use super::counts::rewrite_counts;
use super::disjoint::{discriminator, disjoint, only_types, pointer};
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

/// Rewrites `schema` in place (see the module docs); returns how many rewrites it made.
pub fn rewrite(schema: &mut Value) -> usize {
    let mut n = 0;
    // References resolve in the document as sent (no rewrite changes what a type admits).
    let root = schema.clone();
    walk(schema, &root, &mut n);
    n
}

/// Visits every subschema (only where the keywords hold schemas: a property that happens to
/// be named `dependencies` is a name, not a keyword).
fn walk(v: &mut Value, root: &Value, n: &mut usize) {
    if v.get("not").is_some_and(always_true) {
        *v = Value::Bool(false);
        *n += 1;
        return;
    }
    let Value::Object(o) = v else {
        return;
    };
    rewrite_node(o, root, n);
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
                Value::Array(a) => a.iter_mut().for_each(|s| walk(s, root, n)),
                s => walk(s, root, n),
            },
            "allOf" | "anyOf" | "oneOf" | "prefixItems" => {
                if let Value::Array(a) = x {
                    a.iter_mut().for_each(|s| walk(s, root, n));
                }
            }
            "properties" | "patternProperties" | "definitions" | "$defs" | "dependentSchemas" => {
                if let Value::Object(m) = x {
                    m.values_mut().for_each(|s| walk(s, root, n));
                }
            }
            _ => {}
        }
    }
}

/// Whether `s` is a schema every instance matches (`true`, or only annotations).
fn always_true(s: &Value) -> bool {
    match s {
        Value::Bool(b) => *b,
        Value::Object(o) => o.keys().all(|k| ANNOTATIONS.contains(&k.as_str())),
        _ => false,
    }
}

fn rewrite_node(o: &mut Map<String, Value>, root: &Value, n: &mut usize) {
    if let Some(target) = o
        .get("$ref")
        .and_then(Value::as_str)
        .and_then(|r| pointer(root, r))
    {
        let same_type = o.get("type").is_some_and(|t| target.get("type") == Some(t));
        let before = o.len();
        o.retain(|k, _| {
            !(ANNOTATIONS.contains(&k.as_str()) || k == "$schema" || (k == "type" && same_type))
        });
        if o.len() < before {
            *n += 1;
        }
    }
    if let Some(Value::String(f)) = o.get("format") {
        if !DEFINED_FORMATS.contains(&f.as_str()) {
            o.remove("format");
            *n += 1;
        }
    }
    if o.get("additionalProperties").is_some_and(always_true) {
        o.remove("additionalProperties");
        *n += 1;
    }
    if let (Some(t), None) = (o.get("type"), o.get("$ref")) {
        let implied = ["anyOf", "oneOf"].iter().any(|k| {
            o.get(*k)
                .and_then(Value::as_array)
                .is_some_and(|bs| !bs.is_empty() && bs.iter().all(|b| only_types(b, t, root)))
        });
        if implied {
            o.remove("type");
            *n += 1;
        }
    }
    *n += drop_repeated_by_match_all(o);
    if rewrite_counts(o) {
        *n += 1;
    }
    if rewrite_conditionals(o) {
        *n += 1;
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
        // `properties`/`type: object` beside the list only add ways to fail it: an object
        // lacking one listed property still fails `not`'s schema (narrowed).
        let only_required = not.iter().all(|(k, v)| match k.as_str() {
            "required" | "properties" => true,
            "type" => v == "object",
            k => ANNOTATIONS.contains(&k),
        });
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
        let pairwise_disjoint = |bs: &[Value]| {
            bs.iter()
                .enumerate()
                .all(|(i, a)| bs[i + 1..].iter().all(|b| disjoint(a, b, root)))
        };
        if pairwise_disjoint(branches)
            || disjoin_required(branches)
            || require_discriminator(branches, root)
        {
            if let Some(b) = o.remove("oneOf") {
                o.insert("anyOf".into(), b);
                *n += 1;
            }
        }
    }
}

/// Patterns that match every property name.
const MATCH_ALL: &[&str] = &[".*", "^.*$", "^.*", ".*$", ""];

/// Removes the optional `properties` entries equal to the schema a match-everything
/// `patternProperties` entry gives them; returns how many went.
fn drop_repeated_by_match_all(o: &mut Map<String, Value>) -> usize {
    let Some(Value::Object(patterns)) = o.get("patternProperties") else {
        return 0;
    };
    let all: Vec<Value> = MATCH_ALL
        .iter()
        .filter_map(|p| patterns.get(*p).cloned())
        .collect();
    if all.is_empty() {
        return 0;
    }
    let required: Vec<String> = o
        .get("required")
        .and_then(Value::as_array)
        .map(|r| {
            r.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    let Some(Value::Object(props)) = o.get_mut("properties") else {
        return 0;
    };
    let before = props.len();
    props.retain(|name, schema| required.contains(name) || !all.contains(schema));
    before - props.len()
}

/// Narrows each branch to objects holding the branches' discriminator (see the module
/// docs); false (and nothing changed) when they have none or a branch is typed otherwise.
fn require_discriminator(branches: &mut [Value], root: &Value) -> bool {
    let Some(name) = discriminator(branches, root) else {
        return false;
    };
    let object_or_untyped = |b: &Value| b.get("type").is_none_or(|t| t == "object");
    if branches.len() < 2 || !branches.iter().all(object_or_untyped) {
        return false;
    }
    for b in branches.iter_mut() {
        *b = json!({"allOf": [b.take(), {"type": "object", "required": [name]}]});
    }
    true
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

    #[test]
    fn one_of_disjoint_branches_and_not_anything() {
        let mut s = json!({
            "definitions": {"obj": {"type": "object"}},
            "properties": {
                "a": {"oneOf": [{"$ref": "#/definitions/obj"}, {"type": "null"}]},
                "b": {"oneOf": [{"type": "string"}, {"type": "integer"}]},
                "c": {"oneOf": [{"type": "number"}, {"type": "integer"}]},
                "gone": {"not": {}, "description": "must be absent"}
            }
        });
        assert_eq!(rewrite(&mut s), 3);
        let p = &s["properties"];
        assert_eq!(
            p["a"],
            json!({"anyOf": [{"$ref": "#/definitions/obj"}, {"type": "null"}]})
        );
        assert_eq!(
            p["b"],
            json!({"anyOf": [{"type": "string"}, {"type": "integer"}]})
        );
        // 1 is a number and an integer: both branches match it, so it stays oneOf (refused).
        assert_eq!(
            p["c"],
            json!({"oneOf": [{"type": "number"}, {"type": "integer"}]})
        );
        assert_eq!(p["gone"], json!(false));
        let mut s = json!({"not": {"type": "string"}});
        assert_eq!(rewrite(&mut s), 0);
    }

    #[test]
    fn ref_siblings_that_add_nothing_go() {
        let mut s = json!({
            "definitions": {"d": {"type": "object"}},
            "properties": {
                "a": {"$ref": "#/definitions/d", "type": "object", "title": "t", "$schema": "x"},
                "b": {"$ref": "#/definitions/d", "type": "string"},
                "c": {"$ref": "#/definitions/d"}
            }
        });
        assert_eq!(rewrite(&mut s), 1);
        let p = &s["properties"];
        assert_eq!(p["a"], json!({"$ref": "#/definitions/d"}));
        assert_eq!(p["b"], json!({"$ref": "#/definitions/d", "type": "string"}));
    }

    #[test]
    fn siblings_of_branches_that_add_nothing_go() {
        let mut s = json!({
            "definitions": {"l": {"type": "object", "properties": {"items": {"items": {"$ref": "#"}}}}},
            "type": "object",
            "additionalProperties": {},
            "anyOf": [{"$ref": "#/definitions/l"}, {"type": "object"}]
        });
        assert_eq!(rewrite(&mut s), 2);
        assert!(s.get("type").is_none() && s.get("additionalProperties").is_none());
        // A branch that may be a string: the type is a real constraint and stays.
        let mut s = json!({"type": "object", "anyOf": [{"type": "object"}, {"minLength": 1}]});
        assert_eq!(rewrite(&mut s), 0);
        let mut s = json!({"type": "number", "anyOf": [{"type": "integer"}]});
        assert_eq!(rewrite(&mut s), 1);
    }

    #[test]
    fn a_property_the_match_all_pattern_repeats_goes() {
        let x = json!({"oneOf": [{"type": "string"}, {"type": "null"}]});
        let mut s = json!({
            "patternProperties": {".*": x},
            "properties": {"basic": x, "kept": {"type": "string"}, "req": x},
            "required": ["req"]
        });
        rewrite(&mut s);
        let props = s["properties"].as_object().unwrap();
        assert!(!props.contains_key("basic"));
        assert!(props.contains_key("kept") && props.contains_key("req"));
    }

    #[test]
    fn one_of_with_a_discriminator_no_branch_requires() {
        let mut s = json!({
            "definitions": {"named": {"properties": {"type": {"enum": ["name"]}}}},
            "oneOf": [{"$ref": "#/definitions/named"}, {"properties": {"type": {"const": "link"}}}]
        });
        assert_eq!(rewrite(&mut s), 1);
        let narrowed = |b: Value| json!({"allOf": [b, {"type": "object", "required": ["type"]}]});
        assert_eq!(
            s["anyOf"],
            json!([
                narrowed(json!({"$ref": "#/definitions/named"})),
                narrowed(json!({"properties": {"type": {"const": "link"}}}))
            ])
        );
        // Overlapping sets: no discriminator, left as it is (refused).
        let mut s = json!({"oneOf": [
            {"properties": {"k": {"enum": ["a", "b"]}}},
            {"properties": {"k": {"enum": ["b"]}}}
        ]});
        assert_eq!(rewrite(&mut s), 0);
    }
}
