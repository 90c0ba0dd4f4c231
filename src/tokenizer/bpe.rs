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

/// Texts at least this long cache each distinct word's tokens for the rest of the call.
const CACHE_MIN_LEN: usize = 1024;

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
    /// `scratch` carries buffers between calls so a long encode allocates once.
    pub fn encode(&self, vocab: &Vocab, text: &str, scratch: &mut BpeScratch, out: &mut Vec<u32>) {
        // Long texts repeat words: remember where each word's tokens were first written.
        let mut seen: Option<FxMap<&[u8], (usize, usize)>> =
            (text.len() >= CACHE_MIN_LEN).then(FxMap::default);
        for r in self.pre.split(text) {
            let word = &text.as_bytes()[r];
            if let Some(seen) = seen.as_mut() {
                if let Some(&(start, end)) = seen.get(word) {
                    out.extend_from_within(start..end);
                    continue;
                }
                let start = out.len();
                self.encode_word(vocab, word, scratch, out);
                seen.insert(word, (start, out.len()));
            } else {
                self.encode_word(vocab, word, scratch, out);
            }
        }
    }

    /// Appends the tokens of one pre-tokenizer piece.
    fn encode_word(
        &self,
        vocab: &Vocab,
        word: &[u8],
        scratch: &mut BpeScratch,
        out: &mut Vec<u32>,
    ) {
        if self.pre.ignore_merges {
            scratch.encoded.clear();
            scratch
                .encoded
                .extend(word.iter().map(|&b| byte_to_char(b)));
            if let Some(id) = vocab.id(scratch.encoded.as_bytes()) {
                out.push(id);
                return;
            }
        }
        if let [b] = word {
            out.extend(self.byte_ids[*b as usize]);
            return;
        }
        self.merge_word(word, scratch);
        let syms = &scratch.syms;
        let mut i = 0u32;
        while i != NONE {
            let s = syms[i as usize];
            if s.id != NONE {
                out.push(s.id);
            }
            i = s.next;
        }
    }

    /// Runs the merges over one piece, leaving the surviving symbols linked from index 0.
    fn merge_word(&self, word: &[u8], scratch: &mut BpeScratch) {
        let BpeScratch { syms, heap, .. } = scratch;
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
        let push = |heap: &mut BinaryHeap<Reverse<Pair>>, syms: &[Sym], left: u32, right: u32| {
            let (lid, rid) = (syms[left as usize].id, syms[right as usize].id);
            if let Some((rank, merged)) = self.merge(lid, rid) {
                heap.push(Reverse(Pair {
                    rank,
                    left,
                    right,
                    lid,
                    rid,
                    merged,
                }));
            }
        };
        for i in 0..n.saturating_sub(1) {
            push(heap, syms, i, i + 1);
        }
        while let Some(Reverse(p)) = heap.pop() {
            let l = syms[p.left as usize];
            let r = syms[p.right as usize];
            // Stale unless both symbols are unchanged and still neighbours.
            if l.id != p.lid || r.id != p.rid || l.next != p.right || l.id == NONE {
                continue;
            }
            syms[p.left as usize].id = p.merged;
            syms[p.left as usize].next = r.next;
            syms[p.right as usize].id = NONE;
            syms[p.right as usize].next = NONE;
            if r.next != NONE {
                syms[r.next as usize].prev = p.left;
                push(heap, syms, p.left, r.next);
            }
            if l.prev != NONE {
                push(heap, syms, l.prev, p.left);
            }
        }
    }
}

/// A queued merge of the neighbours `left` and `right` (ids `lid`, `rid` when queued).
/// Ordered by rank, then position: the leftmost best merge goes first.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Pair {
    rank: u32,
    left: u32,
    right: u32,
    lid: u32,
    rid: u32,
    merged: u32,
}

/// Reusable buffers for [`Bpe::encode`].
#[derive(Default)]
pub struct BpeScratch {
    syms: Vec<Sym>,
    heap: BinaryHeap<Reverse<Pair>>,
    encoded: String,
}
