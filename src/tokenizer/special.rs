//! Special-token partitioning: cutting the text at special tokens before tokenizing the rest.
//!
//! llama.cpp (`tokenizer_st_partition`) takes the special tokens (CONTROL, USER_DEFINED and
//! UNKNOWN types) longest first and, for each, splits every remaining text fragment at its
//! leftmost non-overlapping occurrences. CONTROL and UNKNOWN tokens take part only when the
//! caller asks (`parse_special`, as chat templates do); USER_DEFINED ones always do. So a
//! user typing `<|im_start|>` gets plain text, never the control token.
//!
//! This gives the same result in one scan: every occurrence of every candidate is found by
//! first byte, then occurrences are accepted in llama.cpp's order (token priority, then
//! position), skipping any that overlap an accepted one.

use super::vocab::{attr, Vocab};
use std::collections::BTreeMap;

/// A piece of partitioned input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fragment<'a> {
    Text(&'a str),
    Token(u32),
}

struct Entry {
    id: u32,
    text: Box<[u8]>,
    /// Only matched when the caller asks for special parsing (CONTROL / UNKNOWN tokens).
    needs_parse_special: bool,
}

/// The special tokens of a vocabulary, in matching priority.
pub struct SpecialMatcher {
    entries: Vec<Entry>,
    /// For each first byte, the indices (into `entries`) of tokens starting with it.
    by_first: Vec<Vec<u32>>,
}

impl SpecialMatcher {
    pub fn new(vocab: &Vocab) -> SpecialMatcher {
        let mut entries: Vec<Entry> = vocab
            .iter()
            .filter(|&(id, _)| {
                vocab.attr(id) & (attr::CONTROL | attr::USER_DEFINED | attr::UNKNOWN) != 0
            })
            .map(|(id, text)| Entry {
                id,
                text: text.as_bytes().into(),
                needs_parse_special: vocab.attr(id) & (attr::CONTROL | attr::UNKNOWN) != 0,
            })
            .collect();
        // Longest first; equal lengths by id (llama.cpp's sort leaves them unspecified).
        entries.sort_by(|a, b| b.text.len().cmp(&a.text.len()).then(a.id.cmp(&b.id)));
        let mut by_first = vec![Vec::new(); 256];
        for (i, e) in entries.iter().enumerate() {
            by_first[e.text[0] as usize].push(i as u32);
        }
        SpecialMatcher { entries, by_first }
    }

    /// Cuts `text` into text fragments and special tokens.
    pub fn partition<'a>(&self, text: &'a str, parse_special: bool) -> Vec<Fragment<'a>> {
        let tb = text.as_bytes();
        // (priority, start) of every candidate occurrence.
        let mut occ: Vec<(u32, usize)> = Vec::new();
        for (p, &b) in tb.iter().enumerate() {
            for &e in &self.by_first[b as usize] {
                let entry = &self.entries[e as usize];
                if (parse_special || !entry.needs_parse_special) && tb[p..].starts_with(&entry.text)
                {
                    occ.push((e, p));
                }
            }
        }
        if occ.is_empty() {
            return if text.is_empty() {
                Vec::new()
            } else {
                vec![Fragment::Text(text)]
            };
        }
        occ.sort_unstable();
        // Accepted matches: start -> (end, token).
        let mut taken: BTreeMap<usize, (usize, u32)> = BTreeMap::new();
        let mut cur = u32::MAX;
        let mut last_end = 0;
        for &(e, p) in &occ {
            if e != cur {
                cur = e;
                last_end = 0;
            }
            let end = p + self.entries[e as usize].text.len();
            if p < last_end {
                continue;
            }
            let before = taken
                .range(..=p)
                .next_back()
                .is_some_and(|(_, &(x, _))| x > p);
            let after = taken.range(p..end).next().is_some();
            if before || after {
                continue;
            }
            taken.insert(p, (end, self.entries[e as usize].id));
            last_end = end;
        }
        let mut out = Vec::with_capacity(taken.len() * 2 + 1);
        let mut pos = 0;
        for (&s, &(e, id)) in &taken {
            if s > pos {
                out.push(Fragment::Text(&text[pos..s]));
            }
            out.push(Fragment::Token(id));
            pos = e;
        }
        if pos < text.len() {
            out.push(Fragment::Text(&text[pos..]));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tokenizer::TokenType;

    fn matcher(specials: &[(&str, TokenType)]) -> SpecialMatcher {
        let mut texts = vec!["x".to_string()];
        let mut types = vec![TokenType::Normal];
        for (t, ty) in specials {
            texts.push(t.to_string());
            types.push(*ty);
        }
        SpecialMatcher::new(&Vocab::new(texts, Vec::new(), types).unwrap())
    }

    #[test]
    fn longer_tokens_win_even_when_a_shorter_one_starts_first() {
        // llama.cpp splits at "ABz" (longer) before looking for "xA".
        let m = matcher(&[
            ("xA", TokenType::UserDefined),
            ("ABz", TokenType::UserDefined),
        ]);
        assert_eq!(
            m.partition("xABz xA", false),
            [
                Fragment::Text("x"),
                Fragment::Token(2),
                Fragment::Text(" "),
                Fragment::Token(1)
            ]
        );
    }

    #[test]
    fn control_tokens_need_parse_special() {
        let m = matcher(&[
            ("<|c|>", TokenType::Control),
            ("<u>", TokenType::UserDefined),
        ]);
        assert_eq!(
            m.partition("a<|c|><u>", false),
            [Fragment::Text("a<|c|>"), Fragment::Token(2)]
        );
        assert_eq!(
            m.partition("a<|c|><u>", true),
            [Fragment::Text("a"), Fragment::Token(1), Fragment::Token(2)]
        );
        assert_eq!(m.partition("", true), []);
    }
}
