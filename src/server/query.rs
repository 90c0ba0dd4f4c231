//! A URL query string as its `key=value` pairs, for the few routes whose parameters are read
//! by hand (those that must accept unknown parameters, or a query on a route axum's `Query`
//! extractor would reject).

/// The `key=value` pairs of `query` in order, each side percent-decoded (`+` is a space);
/// empty pairs skipped, a pair without `=` has an empty value. Invalid UTF-8 after decoding
/// is replaced (U+FFFD), never an error.
pub fn pairs(query: Option<&str>) -> impl Iterator<Item = (String, String)> + '_ {
    query
        .unwrap_or("")
        .split('&')
        .filter(|kv| !kv.is_empty())
        .map(|kv| {
            let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
            (percent_decode(k), percent_decode(v))
        })
}

/// `s` with `%XX` escapes and `+` decoded; a malformed escape stays as written.
pub fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        match b[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < b.len() => match (hex(b[i + 1]), hex(b[i + 2])) {
                (Some(h), Some(l)) => {
                    out.push((h * 16 + l) as u8);
                    i += 2;
                }
                _ => out.push(b'%'),
            },
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_in_order_decoded() {
        let got: Vec<_> = pairs(Some("model=a%20b&&limit=5&flag&x=1+2")).collect();
        let want = [("model", "a b"), ("limit", "5"), ("flag", ""), ("x", "1 2")];
        assert_eq!(got.len(), want.len());
        for ((k, v), (wk, wv)) in got.iter().zip(want) {
            assert_eq!((k.as_str(), v.as_str()), (wk, wv));
        }
        assert_eq!(pairs(None).count(), 0);
    }

    #[test]
    fn malformed_escapes_stay() {
        assert_eq!(percent_decode("100%"), "100%");
        assert_eq!(percent_decode("%zz%4"), "%zz%4");
        assert_eq!(percent_decode("%E2%82%AC"), "\u{20ac}");
        assert_eq!(percent_decode("%FF"), "\u{fffd}");
    }
}
