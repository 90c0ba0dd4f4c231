//! Fuzzes the tokenizer of the default model: encoding any text (special tokens parsed or
//! not) must not panic, every id must be in the vocabulary, and the streaming decoder must
//! give exactly the text of decoding all at once, in whole UTF-8 characters.
//! Needs `../models/SmolLM2-135M-Instruct.Q4_1.gguf` (`scripts/fetch-model.sh`) or KILN_MODEL.
#![no_main]

use kiln::gguf::GgufFile;
use kiln::tokenizer::Tokenizer;
use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;

fn tokenizer() -> &'static Tokenizer {
    static TOK: OnceLock<Tokenizer> = OnceLock::new();
    TOK.get_or_init(|| {
        let path = std::env::var("KILN_MODEL")
            .unwrap_or_else(|_| "../models/SmolLM2-135M-Instruct.Q4_1.gguf".into());
        let f = GgufFile::open(&path).unwrap_or_else(|e| panic!("open {path}: {e}"));
        Tokenizer::from_gguf(&f).expect("tokenizer")
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((&flags, rest)) = data.split_first() else { return };
    let tok = tokenizer();
    let text = String::from_utf8_lossy(rest);
    let ids = tok.encode(&text, flags & 1 != 0, flags & 2 != 0);
    assert!(ids.iter().all(|&id| (id as usize) < tok.n_vocab()));
    let whole = tok.decode(&ids);
    let mut dec = tok.stream_decoder();
    let mut streamed = String::new();
    for &id in &ids {
        streamed.push_str(&dec.push(id));
    }
    streamed.push_str(&dec.flush());
    assert_eq!(streamed, whole);
});
