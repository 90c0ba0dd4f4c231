//! Unicode character classes used by the pre-tokenizers: `\p{L}` (letter), `\p{N}` (number)
//! and `\s` (White_Space), plus GPT-2's byte <-> printable-character map.
//!
//! The L and N ranges come from `regex-syntax`'s Unicode tables (the same data the `regex`
//! crate uses), so kiln carries no hand-copied table. Code points below U+10000 are answered
//! from a 64 KiB flag table built once; the rest by binary search over the ranges.

use std::sync::OnceLock;

/// Letter (`\p{L}`).
pub const LETTER: u8 = 1;
/// Number (`\p{N}`: Nd, Nl, No).
pub const NUMBER: u8 = 2;
/// White space (`\s`, the Unicode White_Space property).
pub const SPACE: u8 = 4;

struct Tables {
    bmp: Box<[u8; 0x10000]>,
    letters_astral: Vec<(u32, u32)>,
    numbers_astral: Vec<(u32, u32)>,
}

fn class_ranges(pattern: &str) -> Vec<(u32, u32)> {
    use regex_syntax::hir::{Class, HirKind};
    // The pattern is a constant known to parse; an error here is a build defect, and the
    // fallback (no ranges) only degrades splitting of non-ASCII text.
    let Ok(hir) = regex_syntax::Parser::new().parse(pattern) else {
        return Vec::new();
    };
    match hir.kind() {
        HirKind::Class(Class::Unicode(cls)) => cls
            .ranges()
            .iter()
            .map(|r| (r.start() as u32, r.end() as u32))
            .collect(),
        _ => Vec::new(),
    }
}

fn tables() -> &'static Tables {
    static T: OnceLock<Tables> = OnceLock::new();
    T.get_or_init(|| {
        let letters = class_ranges(r"\p{L}");
        let numbers = class_ranges(r"\p{N}");
        let mut bmp = vec![0u8; 0x10000].into_boxed_slice();
        for (ranges, flag) in [(&letters, LETTER), (&numbers, NUMBER)] {
            for &(a, b) in ranges.iter() {
                for cp in a..=b.min(0xFFFF) {
                    bmp[cp as usize] |= flag;
                }
            }
        }
        for cp in 0..0x10000u32 {
            if char::from_u32(cp).is_some_and(char::is_whitespace) {
                bmp[cp as usize] |= SPACE;
            }
        }
        let astral = |r: &[(u32, u32)]| -> Vec<(u32, u32)> {
            r.iter()
                .filter(|&&(_, b)| b > 0xFFFF)
                .map(|&(a, b)| (a.max(0x10000), b))
                .collect()
        };
        let bmp: Box<[u8; 0x10000]> = match bmp.try_into() {
            Ok(b) => b,
            Err(_) => unreachable!("table has exactly 0x10000 entries"),
        };
        Tables {
            letters_astral: astral(&letters),
            numbers_astral: astral(&numbers),
            bmp,
        }
    })
}

fn in_ranges(ranges: &[(u32, u32)], cp: u32) -> bool {
    ranges
        .binary_search_by(|&(a, b)| {
            if b < cp {
                std::cmp::Ordering::Less
            } else if a > cp {
                std::cmp::Ordering::Greater
            } else {
                std::cmp::Ordering::Equal
            }
        })
        .is_ok()
}

/// The class flags (`LETTER`, `NUMBER`, `SPACE`) of `c`; 0 for anything else.
#[inline]
pub fn class(c: char) -> u8 {
    let cp = c as u32;
    if cp < 0x10000 {
        return tables().bmp[cp as usize];
    }
    let t = tables();
    if in_ranges(&t.letters_astral, cp) {
        LETTER
    } else if in_ranges(&t.numbers_astral, cp) {
        NUMBER
    } else {
        0
    }
}

fn gpt2_printable(b: u8) -> bool {
    matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF)
}

/// GPT-2's byte-level alphabet: byte `b` is written as the returned character, so every
/// byte string becomes printable text (space is `Ġ`, newline `Ċ`).
#[inline]
pub fn byte_to_char(b: u8) -> char {
    static MAP: OnceLock<[char; 256]> = OnceLock::new();
    MAP.get_or_init(|| {
        let mut map = ['\0'; 256];
        // Printable bytes stand for themselves; the others are numbered in order from U+0100.
        let mut next = 0x100u32;
        for b in 0..=255u8 {
            map[b as usize] = if gpt2_printable(b) {
                char::from(b)
            } else {
                next += 1;
                char::from_u32(next - 1).unwrap_or('\u{FFFD}')
            };
        }
        map
    })[b as usize]
}

/// The inverse of [`byte_to_char`]: `None` for characters outside GPT-2's alphabet.
pub fn char_to_byte(c: char) -> Option<u8> {
    static INV: OnceLock<std::collections::HashMap<char, u8>> = OnceLock::new();
    INV.get_or_init(|| (0..=255u8).map(|b| (byte_to_char(b), b)).collect())
        .get(&c)
        .copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes() {
        assert_eq!(class('a'), LETTER);
        assert_eq!(class('é'), LETTER);
        assert_eq!(class('東'), LETTER);
        assert_eq!(class('7'), NUMBER);
        assert_eq!(class('½'), NUMBER);
        assert_eq!(class(' '), SPACE);
        assert_eq!(class('\u{3000}'), SPACE);
        assert_eq!(class('\u{a0}'), SPACE);
        assert_eq!(class('!'), 0);
        assert_eq!(class('🦙'), 0);
        assert_eq!(class('𝐀'), LETTER);
        assert_eq!(class('𝟎'), NUMBER);
    }

    #[test]
    fn byte_map_roundtrip() {
        assert_eq!(byte_to_char(b' '), 'Ġ');
        assert_eq!(byte_to_char(b'\n'), 'Ċ');
        for b in 0..=255u8 {
            assert_eq!(char_to_byte(byte_to_char(b)), Some(b));
        }
    }
}
