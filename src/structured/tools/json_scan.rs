//! Reading JSON that may still be arriving: strings decoded as far as they go, values found
//! with their end when they are complete, objects and arrays walked member by member. Never
//! panics on any input; what cannot be read yet is simply not returned.

/// Skips JSON whitespace from `i`.
pub fn skip_ws(s: &[u8], mut i: usize) -> usize {
    while i < s.len() && matches!(s[i], b' ' | b'\n' | b'\r' | b'\t') {
        i += 1;
    }
    i
}

/// A JSON string starting at `s[i] == '"'`: the text decoded so far (an escape not yet
/// complete is left out) and the index after the closing quote once it has arrived.
pub fn string(s: &[u8], i: usize) -> (String, Option<usize>) {
    let mut out: Vec<u8> = Vec::new();
    if s.get(i) != Some(&b'"') {
        return (String::new(), None);
    }
    let mut j = i + 1;
    while j < s.len() {
        match s[j] {
            b'"' => return (lossy(out), Some(j + 1)),
            b'\\' => {
                let Some(&e) = s.get(j + 1) else { break };
                let simple = match e {
                    b'"' => Some(b'"'),
                    b'\\' => Some(b'\\'),
                    b'/' => Some(b'/'),
                    b'b' => Some(8),
                    b'f' => Some(12),
                    b'n' => Some(b'\n'),
                    b'r' => Some(b'\r'),
                    b't' => Some(b'\t'),
                    _ => None,
                };
                if let Some(c) = simple {
                    out.push(c);
                    j += 2;
                    continue;
                }
                if e != b'u' {
                    // Invalid escape: keep it as it is.
                    out.extend_from_slice(&s[j..j + 2]);
                    j += 2;
                    continue;
                }
                let Some(hi) = hex4(s, j + 2) else { break };
                let (c, used) = if (0xD800..0xDC00).contains(&hi) {
                    // A high surrogate needs its low half before it means anything.
                    if s.len() < j + 12 {
                        break;
                    }
                    match (s.get(j + 6..j + 8), hex4(s, j + 8)) {
                        (Some(b"\\u"), Some(lo)) if (0xDC00..0xE000).contains(&lo) => {
                            let cp = 0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00);
                            (char::from_u32(cp), 12)
                        }
                        _ => (None, 6),
                    }
                } else {
                    (char::from_u32(hi), 6)
                };
                let c = c.unwrap_or(char::REPLACEMENT_CHARACTER);
                out.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes());
                j += used;
            }
            b => {
                out.push(b);
                j += 1;
            }
        }
    }
    // Unfinished: drop a trailing partial UTF-8 character.
    let valid = match std::str::from_utf8(&out) {
        Ok(_) => out.len(),
        Err(e) => e.valid_up_to(),
    };
    out.truncate(valid);
    (lossy(out), None)
}

fn lossy(v: Vec<u8>) -> String {
    String::from_utf8(v).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

fn hex4(s: &[u8], i: usize) -> Option<u32> {
    let h = s.get(i..i + 4)?;
    let t = std::str::from_utf8(h).ok()?;
    u32::from_str_radix(t, 16).ok()
}

/// The end (exclusive) of the JSON value starting at `i`, once all of it has arrived. A bare
/// number or literal counts as complete only when something follows it.
pub fn value_end(s: &[u8], i: usize) -> Option<usize> {
    match s.get(i)? {
        b'"' => string(s, i).1,
        b'{' | b'[' => {
            let mut depth = 0usize;
            let mut j = i;
            while j < s.len() {
                match s[j] {
                    b'"' => {
                        j = string(s, j).1?;
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth = depth.saturating_sub(1);
                        if depth == 0 {
                            return Some(j + 1);
                        }
                    }
                    _ => {}
                }
                j += 1;
            }
            None
        }
        _ => {
            let j = (i..s.len())
                .find(|&j| matches!(s[j], b',' | b'}' | b']' | b' ' | b'\n' | b'\r' | b'\t'))?;
            (j > i).then_some(j)
        }
    }
}

/// One member of an object being read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    pub key: String,
    /// Where the value starts, and where it ends once complete.
    pub start: usize,
    pub end: Option<usize>,
}

/// The members of the object starting at `s[i] == '{'` that have arrived (the last one may
/// be incomplete), and the index after its `}` once it is closed. Malformed input ends the
/// walk where it goes wrong.
pub fn members(s: &[u8], i: usize) -> (Vec<Member>, Option<usize>) {
    let mut out = Vec::new();
    if s.get(i) != Some(&b'{') {
        return (out, None);
    }
    let mut j = skip_ws(s, i + 1);
    loop {
        match s.get(j) {
            Some(b'}') => return (out, Some(j + 1)),
            Some(b'"') => {}
            _ => return (out, None),
        }
        let (key, after) = string(s, j);
        let Some(after) = after else {
            return (out, None);
        };
        j = skip_ws(s, after);
        if s.get(j) != Some(&b':') {
            return (out, None);
        }
        let start = skip_ws(s, j + 1);
        if start >= s.len() {
            return (out, None);
        }
        let end = value_end(s, start);
        out.push(Member { key, start, end });
        let Some(end) = end else {
            return (out, None);
        };
        j = skip_ws(s, end);
        match s.get(j) {
            Some(b',') => j = skip_ws(s, j + 1),
            Some(b'}') => return (out, Some(j + 1)),
            _ => return (out, None),
        }
    }
}

/// The elements of the array starting at `s[i] == '['` as (start, end once complete), and the
/// index after its `]` once it is closed.
pub fn elements(s: &[u8], i: usize) -> (Vec<(usize, Option<usize>)>, Option<usize>) {
    let mut out = Vec::new();
    if s.get(i) != Some(&b'[') {
        return (out, None);
    }
    let mut j = skip_ws(s, i + 1);
    loop {
        match s.get(j) {
            Some(b']') => return (out, Some(j + 1)),
            None => return (out, None),
            Some(_) => {}
        }
        let end = value_end(s, j);
        out.push((j, end));
        let Some(end) = end else {
            return (out, None);
        };
        j = skip_ws(s, end);
        match s.get(j) {
            Some(b',') => j = skip_ws(s, j + 1),
            Some(b']') => return (out, Some(j + 1)),
            _ => return (out, None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_decode_as_far_as_they_have_arrived() {
        let full = br#""a\"b\n\u00e9\ud83d\ude00c" rest"#;
        assert_eq!(string(full, 0), ("a\"b\né😀c".to_string(), Some(27)));
        for cut in 0..full.len() {
            let (t, end) = string(&full[..cut], 0);
            assert!("a\"b\né😀c".starts_with(&t), "{cut}: {t:?}");
            assert!(end.is_none() || cut >= 27);
        }
    }

    #[test]
    fn values_and_members_wait_for_their_end() {
        let s = br#"{"name": "f", "arguments": {"x": [1, "}"], "y": null}}"#;
        let (m, end) = members(s, 0);
        assert_eq!(end, Some(s.len()));
        assert_eq!(m[0].key, "name");
        assert_eq!(
            &s[m[1].start..m[1].end.unwrap()],
            br#"{"x": [1, "}"], "y": null}"#
        );
        let (m, end) = members(&s[..40], 0);
        assert_eq!(end, None);
        assert_eq!(m.len(), 2);
        assert_eq!(m[1].end, None);
        assert_eq!(value_end(b"12", 0), None);
        assert_eq!(value_end(b"12,", 0), Some(2));
        let (e, end) = elements(b"[{}, [1], \"x\"]", 0);
        assert_eq!(e.len(), 3);
        assert_eq!(end, Some(14));
    }

    #[test]
    fn garbage_never_panics() {
        for s in [
            &b"{\"a\\u12"[..],
            b"[[[",
            b"{\"a\":",
            b"\"\\ud800\\u",
            b"{]",
            b"\xff\xfe",
        ] {
            for cut in 0..=s.len() {
                let _ = members(&s[..cut], 0);
                let _ = elements(&s[..cut], 0);
                let _ = string(&s[..cut], 0);
                let _ = value_end(&s[..cut], 0);
            }
        }
    }
}
