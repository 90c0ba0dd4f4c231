//! A ragged batch: many sequences in one forward call, each with its own new tokens (a prefill
//! chunk or one decode token), start position and KV block table. Tokens are laid out one after
//! another; no padding is ever computed.

use crate::engine::kv_cache::BlockTable;

/// Which positions of a sequence's new tokens need logits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogitsWanted {
    /// None (a prefill chunk that is not the last one).
    None,
    /// The last new token only (the normal case: the next token's distribution).
    Last,
    /// Every new token (prompt logprobs, teacher forcing).
    All,
}

/// One sequence's part of a batch.
#[derive(Clone, Copy)]
pub struct SeqInput<'a> {
    /// The new tokens, at positions `start_pos..start_pos + tokens.len()`. Not empty.
    pub tokens: &'a [u32],
    /// Position of `tokens[0]`; positions `0..start_pos` are already in the KV cache.
    pub start_pos: usize,
    /// The sequence's KV blocks, with room for every new position (`capacity() >=
    /// start_pos + tokens.len()`).
    pub table: &'a BlockTable,
    pub logits: LogitsWanted,
}

impl SeqInput<'_> {
    /// Number of logits rows this sequence produces.
    pub fn logit_rows(&self) -> usize {
        match self.logits {
            LogitsWanted::None => 0,
            LogitsWanted::Last => usize::from(!self.tokens.is_empty()),
            LogitsWanted::All => self.tokens.len(),
        }
    }
}

/// The logits a forward call produced: rows in batch order (sequence by sequence, positions
/// ascending), each `n_vocab` long. Borrowed from the engine's scratch space.
pub struct Logits<'s> {
    pub(crate) data: &'s [f32],
    /// `row_start[i]..row_start[i + 1]` are sequence i's rows.
    pub(crate) row_start: &'s [usize],
    pub(crate) n_vocab: usize,
    /// The same rows' hidden states after the final norm (what the LM head reads), each
    /// `n_embd` long: the embeddings pooling reads them.
    pub(crate) hidden: &'s [f32],
    pub(crate) n_embd: usize,
}

impl<'s> Logits<'s> {
    pub fn n_vocab(&self) -> usize {
        self.n_vocab
    }

    /// Total rows.
    pub fn n_rows(&self) -> usize {
        self.data.len() / self.n_vocab.max(1)
    }

    /// Row `r` of the whole batch.
    pub fn row(&self, r: usize) -> &'s [f32] {
        &self.data[r * self.n_vocab..(r + 1) * self.n_vocab]
    }

    /// Sequence `seq`'s rows (empty for `LogitsWanted::None`), in position order.
    pub fn seq_rows(&self, seq: usize) -> impl Iterator<Item = &'s [f32]> + '_ {
        (self.row_start[seq]..self.row_start[seq + 1]).map(|r| self.row(r))
    }

    /// Sequence `seq`'s last row, if it asked for any.
    pub fn last(&self, seq: usize) -> Option<&'s [f32]> {
        let (a, b) = (self.row_start[seq], self.row_start[seq + 1]);
        (b > a).then(|| self.row(b - 1))
    }

    /// All rows, contiguous.
    pub fn as_slice(&self) -> &'s [f32] {
        self.data
    }

    pub fn n_embd(&self) -> usize {
        self.n_embd
    }

    /// The rows' final hidden states (after the output norm), contiguous, in the same order
    /// as the logits rows.
    pub fn hidden(&self) -> &'s [f32] {
        self.hidden
    }
}
