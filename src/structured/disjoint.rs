//! Proofs that two JSON schemas share no instance, so a `oneOf` over them is the `anyOf` the
//! grammar engine accepts (an instance matches at most one branch either way).
//!
//! The proof is conservative: `false` means "not shown", never "they overlap". Two schemas
//! are disjoint when
//! - their possible JSON types do not meet (`integer` meets `number`), or
//! - their `const`/`enum` value sets share no value, or
//! - both may be objects and some property both require has disjoint schemas (a discriminator such as `"type": {"enum": ["name"]}` against `["link"]`).
//!
//! Local references (`#/definitions/x`, `#/$defs/x`, any JSON pointer into the document) are
//! followed, to a bounded depth so recursive schemas end.

use serde_json::{Map, Value};

/// How deep references and nested properties are followed before giving up.
const MAX_DEPTH: usize = 12;

/// The JSON types a value or schema can have.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
struct Types(u8);

impl Types {
    const NULL: u8 = 1;
    const BOOLEAN: u8 = 2;
    const INTEGER: u8 = 4;
    const NUMBER: u8 = 8;
    const STRING: u8 = 16;
    const ARRAY: u8 = 32;
    const OBJECT: u8 = 64;

    fn named(name: &str) -> Option<Types> {
        Some(Types(match name {
            "null" => Self::NULL,
            "boolean" => Self::BOOLEAN,
            "integer" => Self::INTEGER,
            "number" => Self::NUMBER,
            "string" => Self::STRING,
            "array" => Self::ARRAY,
            "object" => Self::OBJECT,
            _ => return None,
        }))
    }

    fn of_value(v: &Value) -> Types {
        Types(match v {
            Value::Null => Self::NULL,
            Value::Bool(_) => Self::BOOLEAN,
            // An integral number is an instance of both `integer` and `number`.
            Value::Number(n) if n.is_i64() || n.is_u64() => Self::INTEGER | Self::NUMBER,
            Value::Number(n) if n.as_f64().is_some_and(|f| f.fract() == 0.0) => {
                Self::INTEGER | Self::NUMBER
            }
            Value::Number(_) => Self::NUMBER,
            Value::String(_) => Self::STRING,
            Value::Array(_) => Self::ARRAY,
            Value::Object(_) => Self::OBJECT,
        })
    }

    /// Whether some instance has a type in both sets (`integer` is a kind of `number`).
    fn meets(self, other: Types) -> bool {
        let (a, b) = (self.0, other.0);
        let number_meets_integer = |x: u8, y: u8| x & Self::NUMBER != 0 && y & Self::INTEGER != 0;
        a & b != 0 || number_meets_integer(a, b) || number_meets_integer(b, a)
    }

    fn may_be_object(self) -> bool {
        self.0 & Self::OBJECT != 0
    }
}

/// Whether `a` and `b` (subschemas of the document `root`) provably share no instance.
pub fn disjoint(a: &Value, b: &Value, root: &Value) -> bool {
    disjoint_at(a, b, root, 0)
}

fn disjoint_at(a: &Value, b: &Value, root: &Value, depth: usize) -> bool {
    if depth > MAX_DEPTH {
        return false;
    }
    let (Some(a), Some(b)) = (resolve(a, root, depth), resolve(b, root, depth)) else {
        return false;
    };
    if a == &Value::Bool(false) || b == &Value::Bool(false) {
        return true;
    }
    let (ta, tb) = (types(a, root, depth), types(b, root, depth));
    if let (Some(ta), Some(tb)) = (ta, tb) {
        if !ta.meets(tb) {
            return true;
        }
    }
    if let (Some(va), Some(vb)) = (values(a), values(b)) {
        if !va.iter().any(|x| vb.contains(x)) {
            return true;
        }
    }
    // A value set against a type set: covered by `types`, which reads `const`/`enum`.
    if ta.is_some_and(|t| !t.may_be_object()) || tb.is_some_and(|t| !t.may_be_object()) {
        return false;
    }
    let (ra, rb) = (required(a, root, depth), required(b, root, depth));
    ra.iter().filter(|p| rb.contains(p)).any(|p| {
        match (property(a, p, root, depth), property(b, p, root, depth)) {
            (Some(pa), Some(pb)) => disjoint_at(pa, pb, root, depth + 1),
            _ => false,
        }
    })
}

/// Follows `$ref` chains to the schema they name. Keys beside a `$ref` are dropped: the
/// target then says less than the node, which keeps every proof sound.
fn resolve<'a>(mut s: &'a Value, root: &'a Value, depth: usize) -> Option<&'a Value> {
    for _ in depth..=MAX_DEPTH {
        let Some(r) = s.get("$ref").and_then(Value::as_str) else {
            return Some(s);
        };
        s = pointer(root, r)?;
    }
    None
}

/// The subschema a local reference (`#` or `#/json/pointer`) names.
pub(super) fn pointer<'a>(root: &'a Value, reference: &str) -> Option<&'a Value> {
    let path = reference.strip_prefix('#')?;
    if path.is_empty() {
        return Some(root);
    }
    // JSON pointer tokens inside a URI fragment may be percent-encoded.
    let decoded = percent_decode(path)?;
    root.pointer(&decoded)
}

fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// The types every instance of `s` has, when the schema says (None: not known).
fn types(s: &Value, root: &Value, depth: usize) -> Option<Types> {
    if depth > MAX_DEPTH {
        return None;
    }
    let s = resolve(s, root, depth)?;
    let o = s.as_object()?;
    let mut known: Option<Types> = None;
    let mut narrow = |t: Types| {
        known = Some(match known {
            Some(k) => Types(k.0 & t.0),
            None => t,
        })
    };
    match o.get("type") {
        Some(Value::String(t)) => narrow(Types::named(t)?),
        Some(Value::Array(ts)) => {
            let mut all = 0;
            for t in ts {
                all |= Types::named(t.as_str()?)?.0;
            }
            narrow(Types(all));
        }
        _ => {}
    }
    if let Some(vs) = values(s) {
        narrow(Types(
            vs.iter().fold(0, |acc, v| acc | Types::of_value(v).0),
        ));
    }
    if let Some(Value::Array(parts)) = o.get("allOf") {
        for p in parts {
            if let Some(t) = types(p, root, depth + 1) {
                narrow(t);
            }
        }
    }
    for key in ["anyOf", "oneOf"] {
        if let Some(Value::Array(branches)) = o.get(key) {
            let mut union = 0;
            let mut all_known = true;
            for b in branches {
                match types(b, root, depth + 1) {
                    Some(t) => union |= t.0,
                    None => all_known = false,
                }
            }
            if all_known {
                narrow(Types(union));
            }
        }
    }
    if let Some(r) = o.get("$ref") {
        if let Some(t) = r
            .as_str()
            .and_then(|r| pointer(root, r))
            .and_then(|t| types(t, root, depth + 1))
        {
            narrow(t);
        }
    }
    known
}

/// A property every branch gives a `const`/`enum` value set, the sets pairwise disjoint: the
/// branches' discriminator (the first such name, in the first branch's order).
pub(super) fn discriminator(branches: &[Value], root: &Value) -> Option<String> {
    let first = resolve(branches.first()?, root, 0)?;
    let mut names: Vec<&String> = Vec::new();
    let mut ps = Vec::new();
    parts(first, root, 0, &mut ps);
    for o in ps {
        if let Some(Value::Object(props)) = o.get("properties") {
            names.extend(props.keys());
        }
    }
    names
        .into_iter()
        .find(|name| {
            let sets: Option<Vec<Vec<&Value>>> = branches
                .iter()
                .map(|b| {
                    let b = resolve(b, root, 0)?;
                    values(resolve(property(b, name, root, 0)?, root, 0)?)
                })
                .collect();
            sets.is_some_and(|sets| {
                sets.iter().enumerate().all(|(i, a)| {
                    sets[i + 1..]
                        .iter()
                        .all(|b| !a.iter().any(|x| b.contains(x)))
                })
            })
        })
        .cloned()
}

/// Whether every instance of `s` has one of the types `named` (a `type` keyword's value)
/// lists: false when `s` does not say, or says otherwise.
pub(super) fn only_types(s: &Value, named: &Value, root: &Value) -> bool {
    let allowed = match named {
        Value::String(t) => Types::named(t),
        Value::Array(ts) => ts.iter().try_fold(Types(0), |acc, t| {
            Some(Types(acc.0 | Types::named(t.as_str()?)?.0))
        }),
        _ => None,
    };
    let (Some(allowed), Some(has)) = (allowed, types(s, root, 0)) else {
        return false;
    };
    // An `integer` instance is a `number` one too.
    let allowed = if allowed.0 & Types::NUMBER != 0 {
        allowed.0 | Types::INTEGER
    } else {
        allowed.0
    };
    has.0 & !allowed == 0
}

/// The values `s` allows, when it lists them (`const` or `enum`).
fn values(s: &Value) -> Option<Vec<&Value>> {
    let o = s.as_object()?;
    if let Some(c) = o.get("const") {
        return Some(vec![c]);
    }
    match o.get("enum") {
        Some(Value::Array(vs)) => Some(vs.iter().collect()),
        _ => None,
    }
}

/// The object-level parts of `s`: itself, its `allOf` members and its reference's target.
fn parts<'a>(s: &'a Value, root: &'a Value, depth: usize, out: &mut Vec<&'a Map<String, Value>>) {
    if depth > MAX_DEPTH {
        return;
    }
    let Some(o) = s.as_object() else {
        return;
    };
    out.push(o);
    if let Some(t) = o
        .get("$ref")
        .and_then(Value::as_str)
        .and_then(|r| pointer(root, r))
    {
        parts(t, root, depth + 1, out);
    }
    if let Some(Value::Array(members)) = o.get("allOf") {
        for m in members {
            parts(m, root, depth + 1, out);
        }
    }
}

/// The properties an object instance of `s` must have.
fn required<'a>(s: &'a Value, root: &'a Value, depth: usize) -> Vec<&'a str> {
    let mut ps = Vec::new();
    parts(s, root, depth, &mut ps);
    ps.iter()
        .filter_map(|o| o.get("required").and_then(Value::as_array))
        .flatten()
        .filter_map(Value::as_str)
        .collect()
}

/// The schema `s` gives property `name` (the first part that names it).
fn property<'a>(s: &'a Value, name: &str, root: &'a Value, depth: usize) -> Option<&'a Value> {
    let mut ps = Vec::new();
    parts(s, root, depth, &mut ps);
    ps.iter()
        .find_map(|o| o.get("properties").and_then(|p| p.get(name)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn d(a: Value, b: Value) -> bool {
        let root = json!({});
        disjoint(&a, &b, &root)
    }

    #[test]
    fn by_type() {
        assert!(d(json!({"type": "string"}), json!({"type": "null"})));
        assert!(d(
            json!({"type": "array"}),
            json!({"type": ["null", "object"]})
        ));
        assert!(!d(json!({"type": "integer"}), json!({"type": "number"})));
        assert!(!d(json!({"type": "number"}), json!({"enum": [1, "a"]})));
        assert!(d(json!({"type": "integer"}), json!({"type": "string"})));
        assert!(!d(json!({"type": "string"}), json!({"minLength": 2})));
        // Conservative: 1.5 is no integer, but `number` against `integer` is not proven.
        assert!(!d(json!({"const": 1.5}), json!({"type": "integer"})));
    }

    #[test]
    fn by_values_and_false() {
        assert!(d(json!({"enum": ["a", "b"]}), json!({"const": "c"})));
        assert!(!d(json!({"enum": ["a", "b"]}), json!({"const": "b"})));
        assert!(d(json!(false), json!({})));
        assert!(!d(json!(true), json!({})));
    }

    #[test]
    fn by_discriminator_through_references() {
        let root = json!({
            "definitions": {
                "named": {"properties": {"type": {"enum": ["name"]}}, "required": ["type"]},
                "linked": {"allOf": [{"required": ["type"]}, {"properties": {"type": {"const": "link"}}}]},
                "other": {"properties": {"type": {"type": "string"}}, "required": ["type"]},
                "obj": {"type": "object"},
                "loop": {"$ref": "#/definitions/loop"}
            }
        });
        let r = |p: &str| json!({"$ref": format!("#/definitions/{p}")});
        assert!(disjoint(&r("named"), &r("linked"), &root));
        assert!(!disjoint(&r("named"), &r("other"), &root));
        assert!(disjoint(&r("obj"), &json!({"type": "null"}), &root));
        assert!(!disjoint(&r("loop"), &json!({"type": "null"}), &root));
        assert!(!disjoint(&r("missing"), &json!({"type": "null"}), &root));
        // A discriminator both do not require proves nothing (the key may be absent).
        let a = json!({"properties": {"t": {"const": "a"}}});
        let b = json!({"properties": {"t": {"const": "b"}}});
        assert!(!disjoint(&a, &b, &root));
    }

    #[test]
    fn percent_encoded_pointers() {
        let root = json!({"definitions": {"a b": {"type": "string"}}});
        assert!(disjoint(
            &json!({"$ref": "#/definitions/a%20b"}),
            &json!({"type": "null"}),
            &root
        ));
    }
}
