//! The literal text a schema's string `pattern`s spell out (`wifi` in `"pattern": "wifi"`,
//! `.json` in `^[a-z]+\.json$`): candidates the closing steering tries when a string may not
//! close yet and the grammar gives no sign of what it waits for. An unanchored pattern
//! (`wifi`, matched anywhere in the string) keeps every byte allowed until the whole word is
//! written, so a search over single bytes sees no state change to follow; the word itself,
//! taken from the pattern, is the way out. Candidates are only tried (each validated against
//! the sequence's matcher), never trusted: a run that is not required just fails its check.

use serde_json::Value;

/// Runs shorter than this are left to the byte search.
const MIN_LEN: usize = 2;
/// Bytes of one run, at most (longer runs are cut: a prefix is still a candidate).
const MAX_LEN: usize = 48;
/// Runs kept per schema, at most (the first found, in document order).
pub const MAX_PHRASES: usize = 32;

/// The literal runs of every string `pattern` in `schema`, each at least two bytes of
/// printable ASCII without `"` or `\`, deduplicated, at most [`MAX_PHRASES`].
pub fn pattern_phrases(schema: &Value) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    collect(schema, &mut out);
    out
}

fn collect(v: &Value, out: &mut Vec<Vec<u8>>) {
    match v {
        Value::Object(o) => {
            if let Some(Value::String(p)) = o.get("pattern") {
                for run in literal_runs(p) {
                    if out.len() < MAX_PHRASES && !out.contains(&run) {
                        out.push(run);
                    }
                }
            }
            // `patternProperties` keys are patterns over property names, not string values:
            // only the values (schemas) are searched.
            o.values().for_each(|x| collect(x, out));
        }
        Value::Array(a) => a.iter().for_each(|x| collect(x, out)),
        _ => {}
    }
}

/// The maximal runs of literal characters in a regular expression (escaped punctuation read
/// as itself; a character a `*`, `?` or `{` makes optional or repeatable left out).
pub fn literal_runs(pattern: &str) -> Vec<Vec<u8>> {
    let mut runs = Vec::new();
    let mut run: Vec<u8> = Vec::new();
    let mut end = |run: &mut Vec<u8>| {
        if run.len() >= MIN_LEN {
            runs.push(run.iter().copied().take(MAX_LEN).collect());
        }
        run.clear();
    };
    let mut chars = pattern.bytes().peekable();
    while let Some(c) = chars.next() {
        match c {
            b'\\' => match chars.next() {
                Some(e) if e.is_ascii_punctuation() && e != b'"' && e != b'\\' => run.push(e),
                _ => end(&mut run),
            },
            b'[' => {
                end(&mut run);
                // A class: skip to its closing bracket (escapes inside included).
                let mut first = true;
                while let Some(x) = chars.next() {
                    match x {
                        b'\\' => {
                            chars.next();
                        }
                        b']' if !first => break,
                        _ => {}
                    }
                    first = false;
                }
            }
            b'*' | b'?' | b'{' => {
                run.pop();
                end(&mut run);
                if c == b'{' {
                    for x in chars.by_ref() {
                        if x == b'}' {
                            break;
                        }
                    }
                }
            }
            b'+' => end(&mut run),
            b'.' | b'(' | b')' | b'|' | b'^' | b'$' => end(&mut run),
            b' '..=b'~' if c != b'"' => run.push(c),
            _ => end(&mut run),
        }
    }
    end(&mut run);
    runs
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn runs(p: &str) -> Vec<String> {
        literal_runs(p)
            .into_iter()
            .map(|r| String::from_utf8(r).unwrap())
            .collect()
    }

    #[test]
    fn literal_runs_are_the_text_a_pattern_spells() {
        assert_eq!(runs("wifi"), ["wifi"]);
        assert_eq!(runs(r"^[a-z]+\.json$"), [".json"]);
        assert_eq!(runs("^iglu:[a-zA-Z0-9_.-]+/[0-9]+$"), ["iglu:"]);
        // An optional or repeated last character is not part of the run.
        assert_eq!(runs("abcd?ef"), ["abc", "ef"]);
        assert_eq!(runs(r"x\d{2}yz"), ["yz"]);
        assert_eq!(runs("(cat|dog)s"), ["cat", "dog"]);
        assert!(runs(r"^\d+$").is_empty());
    }

    #[test]
    fn phrases_come_from_every_string_pattern_once() {
        let schema = json!({
            "properties": {
                "a": {"type": "string", "pattern": "wifi"},
                "b": {"items": {"pattern": "^v[0-9]+\\.x$"}},
                "c": {"pattern": "wifi"}
            },
            "patternProperties": {"^key": {"type": "string"}}
        });
        let got: Vec<String> = pattern_phrases(&schema)
            .into_iter()
            .map(|r| String::from_utf8(r).unwrap())
            .collect();
        assert_eq!(got, ["wifi", ".x"]);
    }
}
