//! Test fixtures for the closing steering: a small byte-level vocabulary (the 256 bytes and a
//! few merges) and a stubborn chooser standing in for a model that keeps writing the same
//! kind of text.

use crate::structured::seq::{SeqConstraint, Step};
use crate::structured::vocab::token_words;
use crate::structured::Grammars;
use crate::tokenizer::unicode::byte_to_char;
use crate::tokenizer::{TokenType, Tokenizer, TokenizerSpec};
use std::sync::{Arc, OnceLock};

const MERGES: &[&str] = &["1 2", "1 3", "a b", "ab c"];

pub fn tokenizer() -> Arc<Tokenizer> {
    static T: OnceLock<Arc<Tokenizer>> = OnceLock::new();
    T.get_or_init(|| {
        let mut tokens: Vec<String> = vec!["<|im_start|>".into(), "<|im_end|>".into()];
        tokens.extend((0..=255u8).map(|b| byte_to_char(b).to_string()));
        tokens.extend(MERGES.iter().map(|m| m.replace(' ', "")));
        let mut types = vec![TokenType::Normal; tokens.len()];
        types[..2].fill(TokenType::Control);
        let spec = TokenizerSpec {
            model: "gpt2".into(),
            pre: Some("smollm".into()),
            tokens,
            types,
            merges: MERGES.iter().map(|s| s.to_string()).collect(),
            bos: Some(0),
            eos: Some(1),
            add_bos: Some(false),
            ..TokenizerSpec::default()
        };
        Arc::new(Tokenizer::from_spec(spec).unwrap())
    })
    .clone()
}

pub fn grammars() -> &'static Grammars {
    static G: OnceLock<Grammars> = OnceLock::new();
    G.get_or_init(|| Grammars::new(tokenizer()).unwrap())
}

/// The reply `seq` lets a chooser write in `budget` tokens, token by token, always drawing
/// the allowed token it scores highest (the lowest id among equals); None when the budget
/// ends it unfinished.
pub fn drive(
    mut seq: SeqConstraint,
    budget: usize,
    score: &dyn Fn(&[u8]) -> u32,
) -> Option<Vec<String>> {
    let words = token_words(&tokenizer());
    let mut out = Vec::new();
    for _ in 0..budget {
        seq.compute_mask();
        assert_eq!(seq.failure(), None);
        let bits = seq.allowed().unwrap();
        let allowed =
            (0..words.len() as u32).filter(|&i| bits[i as usize / 32] >> (i % 32) & 1 == 1);
        let id = allowed
            .max_by_key(|&i| (score(&words[i as usize]), std::cmp::Reverse(i)))
            .unwrap();
        if tokenizer().is_eog(id) {
            return Some(out);
        }
        out.push(String::from_utf8(words[id as usize].clone()).unwrap());
        match seq.commit(id) {
            Step::Continue => {}
            Step::Complete => return Some(out),
            Step::Failed(e) => panic!("{e}"),
        }
    }
    None
}
