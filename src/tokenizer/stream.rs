//! Incremental detokenization for streamed generation.
//!
//! Token pieces are raw bytes: a byte-fallback token (`<0xE6>`) or a byte-level BPE token can
//! end in the middle of a UTF-8 character. The decoder holds such an unfinished tail until
//! the tokens that complete it arrive, so `push` only ever returns whole characters. A byte
//! sequence that can never become valid UTF-8 is replaced by U+FFFD exactly where
//! `String::from_utf8_lossy` would put it, so the concatenation of every `push` and the final
//! `flush` equals [`Tokenizer::decode`](super::Tokenizer::decode) of the same ids.

use super::Tokenizer;

/// Streams text out of token ids; see the module documentation.
pub struct StreamDecoder<'a> {
    tok: &'a Tokenizer,
    state: DecodeState,
}

impl<'a> StreamDecoder<'a> {
    pub(crate) fn new(tok: &'a Tokenizer, strip_space: bool) -> StreamDecoder<'a> {
        StreamDecoder {
            tok,
            state: DecodeState::new(strip_space),
        }
    }

    /// Adds one token; returns the text that is now complete (possibly empty).
    pub fn push(&mut self, id: u32) -> String {
        self.state.push(self.tok, id)
    }

    /// Ends the stream: an unfinished UTF-8 tail becomes U+FFFD.
    pub fn flush(&mut self) -> String {
        self.state.flush()
    }

    /// Bytes held back waiting for the rest of a UTF-8 character.
    pub fn pending_len(&self) -> usize {
        self.state.pending.len()
    }
}

/// The state of a [`StreamDecoder`] without the borrow of its tokenizer, for a caller that
/// keeps many streams next to one shared tokenizer (the scheduler's sequences). Pass the same
/// tokenizer to every call.
#[derive(Debug, Clone, Default)]
pub struct DecodeState {
    pending: Vec<u8>,
    /// SentencePiece's leading-space rule: drop one leading space of the first piece.
    strip_space: bool,
}

impl DecodeState {
    /// `strip_space`: the text starts at its first token (see [`Tokenizer::stream_decoder`]);
    /// false for tokens that continue a prompt.
    pub fn new(strip_space: bool) -> DecodeState {
        DecodeState {
            pending: Vec::new(),
            strip_space,
        }
    }

    /// Adds one token; returns the text that is now complete (whole characters, possibly
    /// empty). Control tokens add nothing.
    pub fn push(&mut self, tok: &Tokenizer, id: u32) -> String {
        let mut piece = tok.piece(id, false);
        if std::mem::take(&mut self.strip_space) {
            piece = piece.strip_prefix(b" ").unwrap_or(piece);
        }
        self.pending.extend_from_slice(piece);
        let mut out = String::new();
        let used = drain_complete(&self.pending, &mut out);
        self.pending.drain(..used);
        out
    }

    /// Ends the stream: an unfinished UTF-8 tail becomes U+FFFD.
    pub fn flush(&mut self) -> String {
        let out = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending.clear();
        out
    }

    /// Ends the stream where it was cut short (a length limit): an unfinished UTF-8 tail is
    /// dropped, so the text never ends in half a character or a replacement character.
    pub fn discard_partial(&mut self) {
        self.pending.clear();
    }
}

/// Appends the decodable prefix of `bytes` to `out` (invalid sequences as U+FFFD) and returns
/// how many bytes were used; an incomplete character at the end is left unused.
fn drain_complete(bytes: &[u8], out: &mut String) -> usize {
    let mut pos = 0;
    loop {
        match std::str::from_utf8(&bytes[pos..]) {
            Ok(s) => {
                out.push_str(s);
                return bytes.len();
            }
            Err(e) => {
                let valid = pos + e.valid_up_to();
                // The prefix up to `valid` was just checked to be UTF-8.
                out.push_str(&String::from_utf8_lossy(&bytes[pos..valid]));
                match e.error_len() {
                    Some(n) => {
                        out.push('\u{FFFD}');
                        pos = valid + n;
                    }
                    None => return valid,
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::drain_complete;

    #[test]
    fn holds_incomplete_tail() {
        let mut s = String::new();
        let used = drain_complete("a東".as_bytes()[..3].as_ref(), &mut s);
        assert_eq!((s.as_str(), used), ("a", 1));
    }

    #[test]
    fn replaces_invalid_like_lossy() {
        let bytes = b"a\xff\xe6\x9db";
        let mut s = String::new();
        let used = drain_complete(bytes, &mut s);
        assert_eq!(used, bytes.len());
        assert_eq!(s, String::from_utf8_lossy(bytes));
    }
}
