//! Byte-level BPE (`tokenizer.ggml.model = "gpt2"`), as llama.cpp's `llm_tokenizer_bpe_session`.
//!
//! Each pre-tokenizer piece starts as one symbol per byte (the token of that byte's GPT-2
//! character); the adjacent pair with the lowest merge rank is merged first (ties: leftmost),
//! until no pair has a merge. Merges are kept by token ids, so a merge step is one hash
//! lookup of a `u64`, with no string building. With `ignore_merges` (llama3-style
//! vocabularies) a piece that is itself a token is emitted whole.

use super::pretok::PreTokenizer;
use super::unicode::byte_to_char;
use super::vocab::{FxMap, Vocab};
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// The merge table and the pre-tokenizer of one vocabulary.
pub struct Bpe {
    /// `(left << 32) | right` -> (rank, merged token).
    merges: FxMap<u64, (u32, u32)>,
    /// The token of each byte's GPT-2 character, if the vocabulary has it.
    byte_ids: [Option<u32>; 256],
    pub(crate) pre: PreTokenizer,
}

const NONE: u32 = u32::MAX;

#[derive(Clone, Copy)]
struct Sym {
    id: u32,
    prev: u32,
    next: u32,
}

impl Bpe {
    /// Builds the merge table from GGUF merge strings `"left right"` (rank = position).
    /// Merges whose parts or result are not tokens can never fire on token symbols and are
    /// dropped; a repeated pair keeps its first (best) rank.
    pub fn new(vocab: &Vocab, merges: &[String], pre: PreTokenizer) -> Bpe {
        let mut table = FxMap::default();
        table.reserve(merges.len());
        let mut joined = String::new();
        for (rank, m) in merges.iter().enumerate() {
            // llama.cpp splits at the first space after the first byte.
            let bytes = m.as_bytes();
            let Some(pos) = bytes.iter().skip(1).position(|&b| b == b' ').map(|p| p + 1) else {
                continue;
            };
            let (a, b) = (&m[..pos], &m[pos + 1..]);
            joined.clear();
            joined.push_str(a);
            joined.push_str(b);
            let (Some(l), Some(r), Some(j)) = (
                vocab.id(a.as_bytes()),
                vocab.id(b.as_bytes()),
                vocab.id(joined.as_bytes()),
            ) else {
                continue;
            };
            table
                .entry(((l as u64) << 32) | r as u64)
                .or_insert((rank as u32, j));
        }
        let mut byte_ids = [None; 256];
        let mut buf = [0u8; 4];
        for (b, slot) in byte_ids.iter_mut().enumerate() {
            *slot = vocab.id(byte_to_char(b as u8).encode_utf8(&mut buf).as_bytes());
        }
        Bpe {
            merges: table,
            byte_ids,
            pre,
        }
    }

    #[inline]
    fn merge(&self, l: u32, r: u32) -> Option<(u32, u32)> {
        if l == NONE || r == NONE {
            return None;
        }
        self.merges.get(&(((l as u64) << 32) | r as u64)).copied()
    }

    /// Appends the tokens of `text` (pre-tokenized, then merged piece by piece) to `out`.
    pub fn encode(&self, vocab: &Vocab, text: &str, out: &mut Vec<u32>) {
        let mut syms: Vec<Sym> = Vec::new();
        let mut heap: BinaryHeap<Reverse<(u32, u32, u32)>> = BinaryHeap::new();
        let mut encoded = String::new();
        for r in self.pre.split(text) {
            let word = &text.as_bytes()[r];
            if self.pre.ignore_merges {
                encoded.clear();
                encoded.extend(word.iter().map(|&b| byte_to_char(b)));
                if let Some(id) = vocab.id(encoded.as_bytes()) {
                    out.push(id);
                    continue;
                }
            }
            if let [b] = word {
                out.extend(self.byte_ids[*b as usize]);
                continue;
            }
            self.merge_word(word, &mut syms, &mut heap);
            let mut i = 0u32;
            while i != NONE {
                let s = syms[i as usize];
                if s.id != NONE {
                    out.push(s.id);
                }
                i = s.next;
            }
        }
    }

    /// Runs the merges over one piece, leaving the surviving symbols linked from index 0.
    fn merge_word(
        &self,
        word: &[u8],
        syms: &mut Vec<Sym>,
        heap: &mut BinaryHeap<Reverse<(u32, u32, u32)>>,
    ) {
        syms.clear();
        heap.clear();
        let n = word.len() as u32;
        syms.extend(word.iter().enumerate().map(|(i, &b)| Sym {
            id: self.byte_ids[b as usize].unwrap_or(NONE),
            prev: if i == 0 { NONE } else { i as u32 - 1 },
            next: if i as u32 + 1 == n {
                NONE
            } else {
                i as u32 + 1
            },
        }));
        // Heap entries: (rank, left index, merged id); stale entries are skipped on pop.
        for i in 0..n.saturating_sub(1) {
            if let Some((rank, j)) = self.merge(syms[i as usize].id, syms[i as usize + 1].id) {
                heap.push(Reverse((rank, i, j)));
            }
        }
        while let Some(Reverse((rank, left, merged))) = heap.pop() {
            let l = syms[left as usize];
            if l.id == NONE || l.next == NONE {
                continue;
            }
            let right = l.next;
            let r = syms[right as usize];
            // Still valid only if this pair still merges with this rank into this token.
            match self.merge(l.id, r.id) {
                Some((rk, j)) if rk == rank && j == merged => {}
                _ => continue,
            }
            syms[left as usize].id = merged;
            syms[left as usize].next = r.next;
            syms[right as usize].id = NONE;
            syms[right as usize].next = NONE;
            if r.next != NONE {
                syms[r.next as usize].prev = left;
            }
            if l.prev != NONE {
                if let Some((rk, j)) = self.merge(syms[l.prev as usize].id, merged) {
                    heap.push(Reverse((rk, l.prev, j)));
                }
            }
            if r.next != NONE {
                if let Some((rk, j)) = self.merge(merged, syms[r.next as usize].id) {
                    heap.push(Reverse((rk, left, j)));
                }
            }
        }
    }
}
