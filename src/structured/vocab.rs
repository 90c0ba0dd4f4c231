//! kiln's tokenizer seen through llguidance's `toktrie`: the token trie and the tokenizer
//! environment one [`Grammars`] factory shares among all requests of a model.

use super::bounds::TokenBytes;
use crate::tokenizer::{attr, Tokenizer};
use llguidance::toktrie::{TokEnv, TokRxInfo, TokTrie, TokenId, TokenizerEnv};
use llguidance::ParserFactory;
use std::sync::Arc;

/// llguidance's tokenizer interface over kiln's [`Tokenizer`].
struct KilnTokEnv {
    tok: Arc<Tokenizer>,
    trie: TokTrie,
}

impl TokenizerEnv for KilnTokEnv {
    fn tok_trie(&self) -> &TokTrie {
        &self.trie
    }

    /// Plain text only: user-visible grammar text never becomes a control token. The tokens'
    /// bytes must be exactly `s` (llguidance forces them): where kiln's encoding differs
    /// (SentencePiece adds a leading space) or `s` is not UTF-8, the trie's greedy split.
    fn tokenize_bytes(&self, s: &[u8]) -> Vec<TokenId> {
        if let Ok(text) = std::str::from_utf8(s) {
            let ids = self.tok.encode(text, false, false);
            let mut at = 0;
            let exact = ids.iter().all(|&id| {
                let w = self.trie.token(id);
                let ok = s.get(at..at + w.len()) == Some(w);
                at += w.len();
                ok
            }) && at == s.len();
            if exact {
                return ids;
            }
        }
        self.trie.greedy_tokenize(s)
    }
}

/// Each token's bytes as the grammar sees them: its text, or for a control or unknown token
/// the special marker byte followed by its text (so no grammar string can produce it).
/// Tokens with no bytes (unused slots) stay empty and can never be allowed.
pub fn token_words(tok: &Tokenizer) -> Vec<Vec<u8>> {
    let vocab = tok.vocab();
    (0..tok.n_vocab() as u32)
        .map(|id| {
            let piece = tok.token_to_piece(id);
            if vocab.attr(id) & (attr::CONTROL | attr::UNKNOWN) != 0 {
                let mut w = Vec::with_capacity(piece.len() + 1);
                w.push(TokTrie::SPECIAL_TOKEN_MARKER);
                w.extend_from_slice(piece);
                w
            } else {
                piece.to_vec()
            }
        })
        .collect()
}

/// The grammar compiler of one model: its token trie and llguidance's parser factory (slices
/// of the vocabulary precomputed once). Build once per model, share in an `Arc`.
pub struct Grammars {
    factory: ParserFactory,
    /// Each token's bytes, for the bounds on JSON runs.
    bytes: Arc<TokenBytes>,
    n_vocab: usize,
    /// The ids ending a generation (a grammar allows them only where it may end).
    eog: Vec<u32>,
}

impl Grammars {
    /// Builds the trie and the factory (a few hundred milliseconds for a 50k vocabulary: call
    /// it at start-up, off the async runtime).
    pub fn new(tok: Arc<Tokenizer>) -> Result<Grammars, super::error::ConstraintError> {
        let words = token_words(&tok);
        let eog: Vec<u32> = tok.eog_ids().to_vec();
        let eos = tok.eos().or_else(|| eog.first().copied()).unwrap_or(0);
        let mut info = TokRxInfo::new(words.len() as u32, eos);
        info.tok_bos = tok.bos();
        info.tok_end_of_turn = tok.eot();
        let mut trie = TokTrie::from(&info, &words);
        if !eog.is_empty() {
            trie = trie.with_eos_tokens(&eog);
        }
        let n_vocab = words.len();
        let bytes = Arc::new(TokenBytes::new(words.clone()));
        let env: TokEnv = Arc::new(KilnTokEnv { tok, trie });
        let mut factory = ParserFactory::new_simple(&env)
            .map_err(|e| super::error::ConstraintError::Setup(e.to_string()))?;
        factory.quiet();
        Ok(Grammars {
            factory,
            bytes,
            n_vocab,
            eog,
        })
    }

    pub(crate) fn factory(&self) -> &ParserFactory {
        &self.factory
    }

    pub(crate) fn token_bytes(&self) -> &Arc<TokenBytes> {
        &self.bytes
    }

    pub fn n_vocab(&self) -> usize {
        self.n_vocab
    }

    /// The end-of-generation ids the masks allow only where the grammar may end.
    pub fn eog(&self) -> &[u32] {
        &self.eog
    }
}
