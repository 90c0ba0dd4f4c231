//! `if`/`then`/`else` that switch on one property with a finite set of values, rewritten as
//! the `anyOf` over those values (llguidance 1.9 refuses the conditional keywords).
//!
//! The shape is the one schema stores write for tagged objects:
//!
//! ```json
//! {"properties": {"type": {"enum": ["fixed", "max"]}}, "required": ["type"],
//!  "allOf": [{"if": {"properties": {"type": {"const": "fixed"}}}, "then": {"$ref": "#/F"}},
//!            {"if": {"properties": {"type": {"const": "max"}}}, "then": {"$ref": "#/M"}}]}
//! ```
//!
//! Every condition reads the same property `K`, its `if` lists the values it accepts (`const`,
//! `enum`, an `anyOf` of those, `{"type": "null"}`), and the node's own `properties.K` lists
//! the values `K` may take (its domain). Then each instance either lacks `K` or holds one
//! value of the domain, and for each of those cases every condition is decided: the node is
//! exactly `anyOf` over the cases of `{K is that value (or absent)} ∧ the branches taken`.
//! Chains (`else` holding another condition on `K`) are decided the same way. Anything else
//! (a condition on two properties, on a value set kiln cannot list, no finite domain) is left
//! as it is, and the engine's refusal names the keyword.

use serde_json::{json, Map, Value};

/// At most this many cases (domain values, plus one when `K` may be absent).
const MAX_CASES: usize = 32;

/// Keys that only annotate a schema.
fn annotation(k: &str) -> bool {
    super::annotations::ANNOTATIONS.contains(&k)
}

/// Rewrites the conditions of node `o` (its own `if`/`then`/`else` and `allOf` members that
/// are only a condition) into one `anyOf` appended to its `allOf`. False, and `o` unchanged,
/// when they are not of the shape in the module docs.
pub(super) fn rewrite_conditionals(o: &mut Map<String, Value>) -> bool {
    let own = o.contains_key("if");
    let members: Vec<usize> = match o.get("allOf") {
        Some(Value::Array(a)) => (0..a.len()).filter(|&i| only_condition(&a[i])).collect(),
        _ => Vec::new(),
    };
    if !own && members.is_empty() {
        return false;
    }
    let mut conditions: Vec<Value> = Vec::new();
    if own {
        let mut c = Map::new();
        for k in ["if", "then", "else"] {
            if let Some(v) = o.get(k) {
                c.insert(k.into(), v.clone());
            }
        }
        conditions.push(Value::Object(c));
    }
    if let Some(Value::Array(a)) = o.get("allOf") {
        conditions.extend(members.iter().map(|&i| a[i].clone()));
    }
    let Some(key) = condition_key(&conditions[0]) else {
        return false;
    };
    let Some(domain) = o
        .get("properties")
        .and_then(|p| p.get(&key))
        .and_then(value_set)
    else {
        return false;
    };
    let required = o
        .get("required")
        .and_then(Value::as_array)
        .is_some_and(|r| r.iter().any(|k| k == key.as_str()));
    let mut cases: Vec<Option<Value>> = domain.into_iter().map(Some).collect();
    if !required {
        cases.push(None);
    }
    if cases.len() > MAX_CASES {
        return false;
    }
    let mut branches = Vec::with_capacity(cases.len());
    for case in &cases {
        let mut taken = Vec::new();
        for c in &conditions {
            if !decide(c, &key, case.as_ref(), &mut taken) {
                return false;
            }
        }
        let mut b = match case {
            Some(v) => json!({"required": [key], "properties": {&key: {"const": v}}}),
            None => json!({"properties": {&key: false}}),
        };
        if !taken.is_empty() {
            b["allOf"] = Value::Array(taken);
        }
        branches.push(b);
    }
    for k in ["if", "then", "else"] {
        o.remove(k);
    }
    let all_of = o.entry("allOf").or_insert_with(|| Value::Array(Vec::new()));
    if let Value::Array(a) = all_of {
        let mut i = 0;
        a.retain(|_| {
            i += 1;
            !members.contains(&(i - 1))
        });
        a.push(json!({"anyOf": branches}));
    }
    true
}

/// Whether `s` holds a condition and nothing but annotations beside it.
fn only_condition(s: &Value) -> bool {
    s.as_object().is_some_and(|o| {
        o.contains_key("if")
            && o.keys()
                .all(|k| matches!(k.as_str(), "if" | "then" | "else") || annotation(k))
    })
}

/// The one property an `if` reads: `{"properties": {K: ...}}`, optionally `"required": [K]`
/// and `"type": "object"`.
fn condition_key(c: &Value) -> Option<String> {
    let cond = c.get("if")?.as_object()?;
    let props = cond.get("properties")?.as_object()?;
    if props.len() != 1 {
        return None;
    }
    let key = props.keys().next()?.clone();
    let shape_ok = cond.iter().all(|(k, v)| match k.as_str() {
        "properties" => true,
        "required" => v.as_array().is_some_and(|r| r.len() == 1 && r[0] == key),
        "type" => v == "object",
        k => annotation(k),
    });
    shape_ok.then_some(key)
}

/// Decides condition `c` for the case `K = value` (`None`: `K` absent) and appends the
/// schemas of the branch taken to `taken`. False when `c` is not of the module's shape.
fn decide(c: &Value, key: &str, value: Option<&Value>, taken: &mut Vec<Value>) -> bool {
    if condition_key(c).as_deref() != Some(key) {
        return false;
    }
    let cond = &c["if"];
    let holds = match value {
        // `properties` says nothing about an absent key: the `if` holds unless it requires K.
        None => cond.get("required").is_none(),
        Some(v) => match value_set(&cond["properties"][key]) {
            Some(set) => set.contains(v),
            None => return false,
        },
    };
    let Some(branch) = c.get(if holds { "then" } else { "else" }) else {
        return true;
    };
    if branch.get("if").is_none() {
        taken.push(branch.clone());
        return true;
    }
    // A chain: the branch is itself a condition on K, with perhaps other keywords beside it.
    let Some(o) = branch.as_object() else {
        return false;
    };
    let rest: Map<String, Value> = o
        .iter()
        .filter(|(k, _)| !matches!(k.as_str(), "if" | "then" | "else"))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    if rest.keys().any(|k| !annotation(k)) {
        taken.push(Value::Object(rest));
    }
    decide(branch, key, value, taken)
}

/// The values `s` allows when it lists them: `const`, `enum` (less the values its `type`
/// excludes), `{"type": "null"}`, `{"type": "boolean"}`, an `anyOf` of such schemas, `false`.
fn value_set(s: &Value) -> Option<Vec<Value>> {
    let o = match s {
        Value::Bool(false) => return Some(Vec::new()),
        Value::Object(o) => o,
        _ => return None,
    };
    let listed: Vec<Value> = if let Some(c) = o.get("const") {
        vec![c.clone()]
    } else if let Some(Value::Array(e)) = o.get("enum") {
        e.clone()
    } else if let Some(Value::Array(bs)) = o.get("anyOf") {
        let mut all = Vec::new();
        for b in bs {
            for v in value_set(b)? {
                if !all.contains(&v) {
                    all.push(v);
                }
            }
        }
        all
    } else {
        match o.get("type").and_then(Value::as_str) {
            Some("null") => vec![Value::Null],
            Some("boolean") => vec![json!(false), json!(true)],
            _ => return None,
        }
    };
    let known = |k: &str| matches!(k, "const" | "enum" | "anyOf" | "type") || annotation(k);
    if !o.keys().all(|k| known(k)) {
        return None;
    }
    Some(match o.get("type") {
        Some(t) => listed.into_iter().filter(|v| has_type(v, t)).collect(),
        None => listed,
    })
}

/// Whether `v` is of JSON Schema type `t` (a name or a list of names).
fn has_type(v: &Value, t: &Value) -> bool {
    match t {
        Value::Array(ts) => ts.iter().any(|t| has_type(v, t)),
        Value::String(t) => match t.as_str() {
            "null" => v.is_null(),
            "boolean" => v.is_boolean(),
            "string" => v.is_string(),
            "object" => v.is_object(),
            "array" => v.is_array(),
            "number" => v.is_number(),
            "integer" => v.as_f64().is_some_and(|x| x.fract() == 0.0),
            _ => false,
        },
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_switch_on_a_required_tag_becomes_any_of() {
        let mut s = json!({
            "properties": {"type": {"enum": ["fixed", "max"]}},
            "required": ["type"],
            "allOf": [
                {"if": {"properties": {"type": {"const": "fixed"}}}, "then": {"$ref": "#/F"}},
                {"if": {"properties": {"type": {"const": "max"}}}, "then": {"$ref": "#/M"}},
                {"minimum": 1}
            ]
        });
        assert!(rewrite_conditionals(s.as_object_mut().unwrap()));
        assert_eq!(
            s["allOf"],
            json!([
                {"minimum": 1},
                {"anyOf": [
                    {"required": ["type"], "properties": {"type": {"const": "fixed"}}, "allOf": [{"$ref": "#/F"}]},
                    {"required": ["type"], "properties": {"type": {"const": "max"}}, "allOf": [{"$ref": "#/M"}]}
                ]}
            ])
        );
    }

    #[test]
    fn an_else_chain_and_an_optional_tag_are_decided_per_value() {
        let mut s = json!({
            "properties": {"type": {"type": "string", "enum": [null, "run", "push", "load"]}},
            "if": {"properties": {"type": {"anyOf": [{"const": "run"}, {"type": "null"}]}}},
            "then": {"required": ["command"]},
            "else": {
                "if": {"properties": {"type": {"const": "push"}}},
                "then": {"required": ["image"]}
            }
        });
        assert!(rewrite_conditionals(s.as_object_mut().unwrap()));
        assert!(s.get("if").is_none() && s.get("then").is_none() && s.get("else").is_none());
        let case = |v: Value, taken: Option<Value>| {
            let mut b = json!({"required": ["type"], "properties": {"type": {"const": v}}});
            if let Some(t) = taken {
                b["allOf"] = json!([t]);
            }
            b
        };
        assert_eq!(
            s["allOf"][0]["anyOf"],
            json!([
                // null is not a string: not in the domain.
                case(json!("run"), Some(json!({"required": ["command"]}))),
                case(json!("push"), Some(json!({"required": ["image"]}))),
                case(json!("load"), None),
                // Absent: `properties` holds vacuously, so the first `then` applies.
                {"properties": {"type": false}, "allOf": [{"required": ["command"]}]}
            ])
        );
    }

    #[test]
    fn shapes_it_cannot_decide_are_left_alone() {
        for mut s in [
            // No finite domain for the tag.
            json!({"properties": {"t": {"type": "string"}}, "if": {"properties": {"t": {"const": "a"}}}, "then": {"required": ["x"]}}),
            // The condition reads two properties.
            json!({"properties": {"t": {"enum": ["a"]}, "u": {"enum": ["b"]}}, "if": {"properties": {"t": {"const": "a"}, "u": {"const": "b"}}}, "then": {"required": ["x"]}}),
            // The condition's values are a pattern, not a list.
            json!({"properties": {"t": {"enum": ["a"]}}, "if": {"properties": {"t": {"pattern": "a"}}}, "then": {"required": ["x"]}}),
            // Two conditions on different properties.
            json!({"properties": {"t": {"enum": ["a"]}, "u": {"enum": ["b"]}}, "allOf": [
                {"if": {"properties": {"t": {"const": "a"}}}, "then": {"required": ["x"]}},
                {"if": {"properties": {"u": {"const": "b"}}}, "then": {"required": ["y"]}}
            ]}),
        ] {
            let before = s.clone();
            assert!(!rewrite_conditionals(s.as_object_mut().unwrap()));
            assert_eq!(s, before);
        }
    }

    #[test]
    fn a_required_if_fails_for_an_absent_tag() {
        let mut s = json!({
            "properties": {"t": {"const": "a"}},
            "if": {"properties": {"t": {"const": "a"}}, "required": ["t"]},
            "then": {"required": ["x"]},
            "else": {"required": ["y"]}
        });
        assert!(rewrite_conditionals(s.as_object_mut().unwrap()));
        assert_eq!(
            s["allOf"][0]["anyOf"][1],
            json!({"properties": {"t": false}, "allOf": [{"required": ["y"]}]})
        );
    }
}
