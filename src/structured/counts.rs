//! `minProperties`/`maxProperties` on objects whose listed properties are not all required,
//! rewritten as an `anyOf` over which optional properties are present (llguidance 1.9 takes
//! the counts only when every listed property is required).
//!
//! With `R` the required properties and `O` the other listed ones, an object of the node
//! holds `R`, some subset of `O` and, unless `additionalProperties` is `false`, unlisted keys.
//! - Only a minimum: `anyOf` of "these `min - |R|` optional ones are present" over the subsets
//!   of that size. Narrowed: an object reaching the count with unlisted keys is no longer
//!   produced.
//! - A maximum: `additionalProperties` becomes `false` (narrowed: no unlisted keys) and the
//!   `anyOf` lists each allowed subset of `O` exactly (present ones required, the others
//!   `false`).
//!
//! Left as they are (the engine's refusal names them): required properties not listed,
//! `patternProperties` beside a maximum, or more than [`MAX_BRANCHES`] subsets.

use serde_json::{json, Map, Value};

/// At most this many `anyOf` branches.
const MAX_BRANCHES: usize = 64;

/// Rewrites the property counts of node `o` (see the module docs); false, and `o` unchanged,
/// when there are none, the engine takes them as they are, or the shape is not handled.
pub(super) fn rewrite_counts(o: &mut Map<String, Value>) -> bool {
    let min = o.get("minProperties").and_then(Value::as_u64);
    let max = o.get("maxProperties").and_then(Value::as_u64);
    if min.is_none() && max.is_none() {
        return false;
    }
    let listed: Vec<String> = match o.get("properties") {
        Some(Value::Object(p)) => p.keys().cloned().collect(),
        None => Vec::new(),
        _ => return false,
    };
    let required: Vec<String> = match o.get("required") {
        Some(Value::Array(r)) => r
            .iter()
            .filter_map(Value::as_str)
            .map(String::from)
            .collect(),
        None => Vec::new(),
        _ => return false,
    };
    let optional: Vec<&String> = listed.iter().filter(|k| !required.contains(k)).collect();
    if optional.is_empty() || required.iter().any(|k| !listed.contains(k)) {
        return false;
    }
    let lo = (min.unwrap_or(0) as usize).saturating_sub(required.len());
    let hi = match max {
        Some(m) if (m as usize) < required.len() => return false,
        Some(m) => Some((m as usize - required.len()).min(optional.len())),
        None => None,
    };
    if hi.is_some() && o.contains_key("patternProperties") {
        return false;
    }
    let sizes: Vec<usize> = match hi {
        None => vec![lo],
        Some(h) if lo > h => return false,
        Some(h) => (lo..=h).collect(),
    };
    let count: usize = sizes.iter().map(|&k| choose(optional.len(), k)).sum();
    if count > MAX_BRANCHES {
        return false;
    }
    let mut branches = Vec::with_capacity(count);
    for &k in &sizes {
        for subset in subsets(optional.len(), k) {
            let present: Vec<&String> = subset.iter().map(|&i| optional[i]).collect();
            let mut b = if present.is_empty() {
                json!({})
            } else {
                json!({"required": present})
            };
            if hi.is_some() {
                let absent: Map<String, Value> = (0..optional.len())
                    .filter(|i| !subset.contains(i))
                    .map(|i| (optional[i].clone(), Value::Bool(false)))
                    .collect();
                if !absent.is_empty() {
                    b["properties"] = Value::Object(absent);
                }
            }
            branches.push(b);
        }
    }
    o.remove("minProperties");
    o.remove("maxProperties");
    if hi.is_some() {
        o.insert("additionalProperties".into(), Value::Bool(false));
    }
    // `lo == 0` without a maximum: the required properties already reach the count.
    let trivial = hi.is_none() && lo == 0;
    if !trivial {
        let all_of = o.entry("allOf").or_insert_with(|| Value::Array(Vec::new()));
        if let Value::Array(a) = all_of {
            a.push(json!({"anyOf": branches}));
        }
    }
    true
}

/// n choose k (saturating).
fn choose(n: usize, k: usize) -> usize {
    if k > n {
        return 0;
    }
    (0..k).fold(1usize, |acc, i| acc.saturating_mul(n - i) / (i + 1))
}

/// Every k-element subset of 0..n, as ascending index lists, in lexicographic order.
fn subsets(n: usize, k: usize) -> Vec<Vec<usize>> {
    fn go(start: usize, n: usize, k: usize, cur: &mut Vec<usize>, out: &mut Vec<Vec<usize>>) {
        if cur.len() == k {
            out.push(cur.clone());
            return;
        }
        for i in start..n {
            cur.push(i);
            go(i + 1, n, k, cur, out);
            cur.pop();
        }
    }
    let mut out = Vec::new();
    go(0, n, k, &mut Vec::new(), &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn at_least_one_optional_property() {
        let mut s = json!({"properties": {"a": {}, "b": {}}, "additionalProperties": false, "minProperties": 1});
        assert!(rewrite_counts(s.as_object_mut().unwrap()));
        assert!(s.get("minProperties").is_none());
        assert_eq!(
            s["allOf"],
            json!([{"anyOf": [{"required": ["a"]}, {"required": ["b"]}]}])
        );
    }

    #[test]
    fn exactly_one_of_the_listed_properties() {
        let mut s = json!({"properties": {"a": {}, "b": {}, "c": {}}, "minProperties": 1, "maxProperties": 1});
        assert!(rewrite_counts(s.as_object_mut().unwrap()));
        assert_eq!(s["additionalProperties"], json!(false));
        assert_eq!(
            s["allOf"][0]["anyOf"],
            json!([
                {"required": ["a"], "properties": {"b": false, "c": false}},
                {"required": ["b"], "properties": {"a": false, "c": false}},
                {"required": ["c"], "properties": {"a": false, "b": false}}
            ])
        );
    }

    #[test]
    fn required_properties_count_toward_the_bounds() {
        // The required one already reaches the minimum: the keyword just goes.
        let mut s =
            json!({"properties": {"v": {}, "a": {}}, "required": ["v"], "minProperties": 1});
        assert!(rewrite_counts(s.as_object_mut().unwrap()));
        assert!(s.get("minProperties").is_none() && s.get("allOf").is_none());
        // At most two with one required: zero or one of the two optional ones.
        let mut s = json!({"properties": {"v": {}, "a": {}, "b": {}}, "required": ["v"], "maxProperties": 2});
        assert!(rewrite_counts(s.as_object_mut().unwrap()));
        assert_eq!(
            s["allOf"][0]["anyOf"],
            json!([
                {"properties": {"a": false, "b": false}},
                {"required": ["a"], "properties": {"b": false}},
                {"required": ["b"], "properties": {"a": false}}
            ])
        );
    }

    #[test]
    fn shapes_it_does_not_handle_are_left_alone() {
        for mut s in [
            json!({"properties": {"a": {}}, "required": ["a"], "minProperties": 1}),
            json!({"additionalProperties": {"type": "string"}, "minProperties": 1}),
            json!({"properties": {"a": {}}, "patternProperties": {"x": {}}, "maxProperties": 1}),
            json!({"properties": {"a": {}}, "required": ["a", "b"], "minProperties": 3}),
        ] {
            let before = s.clone();
            assert!(!rewrite_counts(s.as_object_mut().unwrap()));
            assert_eq!(s, before);
        }
    }
}
