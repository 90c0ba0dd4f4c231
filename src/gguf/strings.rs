//! A compact array of strings: one buffer and end offsets instead of one heap allocation per
//! string. The tokenizer's ~50k tokens and merges are most of a model's metadata; stored this
//! way they cost about their byte length plus 8 bytes each, not ~56 bytes each.

use std::fmt;
use std::ops::Index;

/// Strings stored back to back. Index with `a[i]` (panics out of range, like a slice) or
/// `a.get(i)`; iterate with `a.iter()` or `for s in &a` (items are `&str`).
#[derive(Clone, Default, PartialEq, Eq)]
pub struct StrArray {
    data: String,
    /// `ends[i]` is the end of string `i` in `data`; string `i` starts at `ends[i - 1]` (or 0).
    ends: Vec<usize>,
}

impl StrArray {
    pub fn new() -> StrArray {
        StrArray::default()
    }

    /// An empty array with room for `n` strings of `bytes` bytes in total.
    pub fn with_capacity(n: usize, bytes: usize) -> StrArray {
        StrArray {
            data: String::with_capacity(bytes),
            ends: Vec::with_capacity(n),
        }
    }

    pub fn push(&mut self, s: &str) {
        self.data.push_str(s);
        self.ends.push(self.data.len());
    }

    pub fn len(&self) -> usize {
        self.ends.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// String `i`, if `i < len()`.
    pub fn get(&self, i: usize) -> Option<&str> {
        let end = *self.ends.get(i)?;
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        Some(&self.data[start..end])
    }

    pub fn iter(&self) -> impl ExactSizeIterator<Item = &str> + '_ {
        (0..self.len()).map(move |i| &self[i])
    }

    /// The strings as owned `String`s.
    pub fn to_vec(&self) -> Vec<String> {
        self.iter().map(str::to_string).collect()
    }

    /// Total bytes of all strings.
    pub fn total_bytes(&self) -> usize {
        self.data.len()
    }
}

impl Index<usize> for StrArray {
    type Output = str;
    fn index(&self, i: usize) -> &str {
        match self.get(i) {
            Some(s) => s,
            None => panic!("StrArray index {i} out of range (len {})", self.len()),
        }
    }
}

impl<'a> IntoIterator for &'a StrArray {
    type Item = &'a str;
    type IntoIter = Box<dyn ExactSizeIterator<Item = &'a str> + 'a>;
    fn into_iter(self) -> Self::IntoIter {
        Box::new(self.iter())
    }
}

impl<S: AsRef<str>> FromIterator<S> for StrArray {
    fn from_iter<I: IntoIterator<Item = S>>(iter: I) -> StrArray {
        let mut a = StrArray::new();
        for s in iter {
            a.push(s.as_ref());
        }
        a
    }
}

impl From<Vec<String>> for StrArray {
    fn from(v: Vec<String>) -> StrArray {
        v.iter().collect()
    }
}

impl<S: AsRef<str>> From<&[S]> for StrArray {
    fn from(v: &[S]) -> StrArray {
        v.iter().collect()
    }
}

impl fmt::Debug for StrArray {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stores_and_indexes() {
        let a: StrArray = ["a", "", "héllo"].into_iter().collect();
        assert_eq!(a.len(), 3);
        assert_eq!(&a[0], "a");
        assert_eq!(&a[1], "");
        assert_eq!(a.get(2), Some("héllo"));
        assert_eq!(a.get(3), None);
        assert_eq!(a.iter().collect::<Vec<_>>(), vec!["a", "", "héllo"]);
        assert_eq!(a.to_vec(), vec!["a", "", "héllo"]);
        assert_eq!(format!("{a:?}"), r#"["a", "", "héllo"]"#);
    }
}
