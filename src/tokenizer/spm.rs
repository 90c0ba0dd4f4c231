//! SentencePiece-style BPE (`tokenizer.ggml.model = "llama"`), as llama.cpp's
//! `llm_tokenizer_spm_session`.
//!
//! The text (spaces already written as `▁`) starts as one symbol per UTF-8 character. Every
//! adjacent pair whose concatenation is a token is queued by that token's score; the best
//! score merges first (ties: leftmost), and new neighbours are queued, until the queue is
//! empty. A final symbol that is not a token (a character missing from the vocabulary) is
//! written as byte tokens `<0xNN>` (byte fallback).

use super::vocab::Vocab;
use std::cmp::Ordering;
use std::collections::BinaryHeap;

const NONE: u32 = u32::MAX;

#[derive(Clone, Copy)]
struct Sym {
    start: u32,
    len: u32,
    prev: u32,
    next: u32,
}

struct Bigram {
    score: f32,
    left: u32,
    right: u32,
    size: u32,
}

impl PartialEq for Bigram {
    fn eq(&self, o: &Self) -> bool {
        self.cmp(o) == Ordering::Equal
    }
}
impl Eq for Bigram {}
impl PartialOrd for Bigram {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Bigram {
    /// Max-heap order: higher score first, then the leftmost pair.
    fn cmp(&self, o: &Self) -> Ordering {
        self.score
            .total_cmp(&o.score)
            .then_with(|| o.left.cmp(&self.left))
    }
}

/// Byte-fallback tokens: for each byte, `<0xNN>` or else the one-byte token (llama.cpp's
/// `byte_to_token` for SPM).
pub fn byte_tokens(vocab: &Vocab) -> [Option<u32>; 256] {
    let mut t = [None; 256];
    for (b, slot) in t.iter_mut().enumerate() {
        *slot = vocab
            .id(format!("<0x{b:02X}>").as_bytes())
            .or_else(|| vocab.id(&[b as u8]));
    }
    t
}

/// Appends the tokens of `text` to `out`. `bytes` is from [`byte_tokens`]; `unk` stands in
/// for a byte that has no token at all.
pub fn encode(
    vocab: &Vocab,
    bytes: &[Option<u32>; 256],
    unk: Option<u32>,
    text: &str,
    out: &mut Vec<u32>,
) {
    if text.is_empty() {
        return;
    }
    let tb = text.as_bytes();
    let mut syms: Vec<Sym> = Vec::with_capacity(text.len());
    for (i, c) in text.char_indices() {
        let k = syms.len() as u32;
        syms.push(Sym {
            start: i as u32,
            len: c.len_utf8() as u32,
            prev: if k == 0 { NONE } else { k - 1 },
            next: k + 1,
        });
    }
    if let Some(last) = syms.last_mut() {
        last.next = NONE;
    }
    let mut heap = BinaryHeap::new();
    let try_add = |syms: &[Sym], heap: &mut BinaryHeap<Bigram>, left: u32, right: u32| {
        if left == NONE || right == NONE {
            return;
        }
        let (l, r) = (syms[left as usize], syms[right as usize]);
        let size = l.len + r.len;
        let piece = &tb[l.start as usize..(l.start + size) as usize];
        if let Some(id) = vocab.id(piece) {
            heap.push(Bigram {
                score: vocab.score(id),
                left,
                right,
                size,
            });
        }
    };
    for i in 1..syms.len() as u32 {
        try_add(&syms, &mut heap, i - 1, i);
    }
    while let Some(bg) = heap.pop() {
        let (l, r) = (syms[bg.left as usize], syms[bg.right as usize]);
        // Skip pairs where either side has since been merged into something else.
        if l.len == 0 || r.len == 0 || l.len + r.len != bg.size || l.next != bg.right {
            continue;
        }
        syms[bg.left as usize].len += r.len;
        syms[bg.right as usize].len = 0;
        syms[bg.left as usize].next = r.next;
        if r.next != NONE {
            syms[r.next as usize].prev = bg.left;
        }
        try_add(&syms, &mut heap, l.prev, bg.left);
        try_add(&syms, &mut heap, bg.left, r.next);
    }
    let mut i = 0u32;
    while i != NONE {
        let s = syms[i as usize];
        let piece = &tb[s.start as usize..(s.start + s.len) as usize];
        match vocab.id(piece) {
            Some(id) => out.push(id),
            None => out.extend(piece.iter().filter_map(|&b| bytes[b as usize].or(unk))),
        }
        i = s.next;
    }
}
