//! Tokenizer conformance against llama.cpp: the six vocabularies of
//! ../shared/conformance/tokenizer (add_special = false, parse_special = false, as
//! llama.cpp's test-tokenizer-0 does) and the default model's golden tokenization
//! (parse_special = true). Every case must match exactly.

use crate::common;
use kiln::gguf::GgufFile;
use kiln::tokenizer::Tokenizer;
use proptest::prelude::*;
use std::sync::OnceLock;

const VOCABS: &[&str] = &[
    "llama-spm",
    "llama-bpe",
    "gpt-2",
    "qwen2",
    "deepseek-llm",
    "falcon",
];

fn load(path: &std::path::Path) -> Tokenizer {
    let f = GgufFile::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    Tokenizer::from_gguf(&f).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn default_tokenizer() -> &'static Tokenizer {
    static T: OnceLock<Tokenizer> = OnceLock::new();
    T.get_or_init(|| load(&common::default_model()))
}

fn spm_tokenizer() -> &'static Tokenizer {
    static T: OnceLock<Tokenizer> = OnceLock::new();
    T.get_or_init(|| {
        load(&common::shared_file(
            "conformance/tokenizer/ggml-vocab-llama-spm.gguf",
        ))
    })
}

/// The strings of a `.inp` file: each is followed by a line `__ggml_vocab_test__`.
fn read_inputs(text: &str) -> Vec<String> {
    let mut parts: Vec<String> = text
        .split("\n__ggml_vocab_test__\n")
        .map(str::to_string)
        .collect();
    if parts.last().is_some_and(|p| p.is_empty()) {
        parts.pop();
    }
    parts
}

fn read_outputs(text: &str) -> Vec<Vec<u32>> {
    text.lines()
        .map(|l| {
            l.split_whitespace()
                .map(|x| x.parse().expect("token id"))
                .collect()
        })
        .collect()
}

#[test]
fn conformance_vocabularies() {
    let mut failures = Vec::new();
    for name in VOCABS {
        let base = format!("conformance/tokenizer/ggml-vocab-{name}.gguf");
        let tok = load(&common::shared_file(&base));
        let inputs = read_inputs(&common::read_to_string(&common::shared_file(&format!(
            "{base}.inp"
        ))));
        let outputs = read_outputs(&common::read_to_string(&common::shared_file(&format!(
            "{base}.out"
        ))));
        assert_eq!(
            inputs.len(),
            outputs.len(),
            "{name}: .inp and .out disagree on the case count"
        );
        let mut pass = 0;
        for (text, want) in inputs.iter().zip(&outputs) {
            let got = tok.encode(text, false, false);
            if &got == want {
                pass += 1;
            } else {
                failures.push(format!("{name}: {text:?}\n  want {want:?}\n  got  {got:?}"));
            }
        }
        println!(
            "tokenizer conformance {name}: {pass}/{} passed",
            inputs.len()
        );
    }
    assert!(
        failures.is_empty(),
        "{} cases differ:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn golden_default_model_tokenization() {
    let tok = default_tokenizer();
    let path = common::shared_file("golden/smollm2-135m-instruct-q4_1/tokenization.json");
    let doc: serde_json::Value = serde_json::from_str(&common::read_to_string(&path)).unwrap();
    let cases = doc["cases"].as_array().expect("cases");
    let mut failures = Vec::new();
    for c in cases {
        let name = c["name"].as_str().unwrap_or("?");
        let text = c["text"].as_str().expect("text");
        let parse_special = c["parse_special"].as_bool().unwrap_or(false);
        let want: Vec<u32> = c["ids"]
            .as_array()
            .expect("ids")
            .iter()
            .map(|v| v.as_u64().expect("id") as u32)
            .collect();
        let got = tok.encode(text, false, parse_special);
        if got != want {
            failures.push(format!("{name}: want {want:?}\n  got {got:?}"));
        }
    }
    println!(
        "tokenizer golden smollm2-135m-instruct-q4_1/tokenization.json: {}/{} passed",
        cases.len() - failures.len(),
        cases.len()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn default_model_special_tokens() {
    let tok = default_tokenizer();
    let im_start = tok.encode("<|im_start|>", false, true);
    assert_eq!(im_start, [1]);
    // In user content the same characters are plain text.
    let plain = tok.encode("<|im_start|>", false, false);
    assert!(!plain.contains(&1) && plain.len() > 1, "{plain:?}");
    assert_eq!(tok.decode(&plain), "<|im_start|>");
    assert!(tok.is_eog(2), "<|im_end|> ends generation");
    assert!(tok.is_eog(0), "<|endoftext|> ends generation");
    assert!(!tok.is_eog(1));
    assert!(!tok.add_bos());
}

/// Ids drawn from the whole vocabulary, including control and byte tokens.
fn check_stream(tok: &Tokenizer, ids: &[u32]) -> Result<(), TestCaseError> {
    let mut dec = tok.stream_decoder();
    let mut streamed = String::new();
    for &id in ids {
        let part = dec.push(id);
        // `part` is a String, so it is whole UTF-8 by construction; it must also never hold
        // a replacement char unless the whole decode has one at the same place.
        streamed.push_str(&part);
    }
    streamed.push_str(&dec.flush());
    prop_assert_eq!(streamed, tok.decode(ids));
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn stream_equals_decode_default_model(ids in proptest::collection::vec(0u32..49152, 0..40)) {
        check_stream(default_tokenizer(), &ids)?;
    }

    #[test]
    fn stream_equals_decode_spm(ids in proptest::collection::vec(0u32..32000, 0..40)) {
        check_stream(spm_tokenizer(), &ids)?;
    }

    /// Byte tokens alone (the hard case for UTF-8 assembly): 3..=258 are <0x00>..<0xFF>.
    #[test]
    fn stream_equals_decode_spm_bytes(ids in proptest::collection::vec(3u32..259, 0..40)) {
        check_stream(spm_tokenizer(), &ids)?;
    }

    /// Text round-trips through encode and decode.
    #[test]
    fn roundtrip_text(s in "\\PC{0,40}") {
        // SentencePiece writes spaces as U+2581, so that character decodes as a space.
        prop_assume!(!s.contains('\u{2581}'));
        let tok = default_tokenizer();
        prop_assert_eq!(tok.decode(&tok.encode(&s, false, false)), s.clone());
        let spm = spm_tokenizer();
        prop_assert_eq!(spm.decode(&spm.encode(&s, false, false)), s);
    }
}
