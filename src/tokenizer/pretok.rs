//! Pre-tokenizers for byte-level BPE, chosen by the GGUF key `tokenizer.ggml.pre`.
//!
//! A pre-tokenizer is a list of regexes applied in turn, as llama.cpp does
//! (`llm_tokenizer_bpe` in llama-vocab.cpp): each regex splits every piece produced by the
//! previous one, keeping both its matches and the text between them. The regexes are the
//! ones llama.cpp uses for each `pre` value. The three that nearly every model uses (GPT-2,
//! llama3/qwen2, and single-digit isolation) run as hand-written splitters
//! (`split_fast.rs`), several times faster than a backtracking engine; the others run on
//! Oniguruma through `tokenizers::utils::SysRegex` (the regexes need lookahead, which the
//! `regex` crate lacks). Unknown `pre` values are an error, never a guess.

use super::split_fast;
use super::TokenizerError;
use std::ops::Range;
use tokenizers::utils::SysRegex;

/// The GPT-2 regex (hand-written in [`split_fast::gpt2`]).
pub const GPT2_RE: &str = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)";
/// The llama3 regex (hand-written in [`split_fast::llama3`] with 3 digits).
pub const LLAMA3_RE: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// The qwen2 regex: llama3's with single digits ([`split_fast::llama3`] with 1 digit).
pub const QWEN2_RE: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// Every number character alone ([`split_fast::digits`]).
pub const DIGIT_RE: &str = r"\p{N}";

/// deepseek-llm's letter class. Six code points are written as escapes because they are
/// canonical singletons (U+1F7D, U+1FBE, U+1FD3, U+1FDB, U+2126, U+212A) that text tools
/// silently normalise to other characters.
const DEEPSEEK_LLM_LETTERS: &str = r"\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-\x{1F7D}ᾀ-ᾴᾶ-ᾼ\x{1FBE}ῂ-ῄῆ-ῌῐ-\x{1FD3}ῖ-\x{1FDB}ῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤ\x{2126}ℨ\x{212A}-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃]+";
const GPT4O_RE: &str = r"[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const BLOOM_RE: &str = r" ?[^(\s|.,!?…。，、।۔،)]+";

/// One splitting step.
enum Stage {
    Gpt2,
    Llama3 { max_digits: usize },
    Digits,
    Regex(SysRegex),
}

/// A `tokenizer.ggml.pre` pre-tokenizer with the flags llama.cpp attaches to it.
pub struct PreTokenizer {
    name: String,
    stages: Vec<Stage>,
    /// Whole pieces found in the vocabulary skip the merges (llama3-style vocabularies).
    pub ignore_merges: bool,
    /// The BOS default when the GGUF has no `tokenizer.ggml.add_bos_token`.
    pub default_add_bos: bool,
}

impl std::fmt::Debug for PreTokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PreTokenizer({})", self.name)
    }
}

fn regex(pattern: &str) -> Result<Stage, TokenizerError> {
    // std::regex's `$` is end of input; Oniguruma's (Ruby syntax) is end of line.
    let pattern = pattern.replace(r"+$", r"+\z");
    SysRegex::new(&pattern)
        .map(Stage::Regex)
        .map_err(|e| TokenizerError::Regex(format!("{pattern}: {e}")))
}

impl PreTokenizer {
    /// The pre-tokenizer llama.cpp uses for `pre` (the `tokenizer.ggml.pre` value).
    pub fn new(pre: &str) -> Result<PreTokenizer, TokenizerError> {
        let mut ignore_merges = false;
        let mut default_add_bos = false;
        let stages = match pre {
            "default" => vec![
                regex(r"[\p{P}\$\+<=>\^~\|]+")?,
                Stage::Gpt2,
                regex(r"\p{N}+")?,
                regex(r"[0-9][0-9][0-9]")?,
            ],
            "llama3" | "llama-v3" | "llama-bpe" | "falcon3" | "falcon-h1" | "pixtral"
            | "midm-2.0" | "lfm2" => {
                ignore_merges = true;
                default_add_bos = true;
                vec![Stage::Llama3 { max_digits: 3 }]
            }
            "dbrx" | "smaug-bpe" | "glm4" | "chatglm-bpe" => vec![Stage::Llama3 { max_digits: 3 }],
            "deepseek-llm" => vec![
                regex(r"[\r\n]")?,
                regex(DEEPSEEK_LLM_LETTERS)?,
                regex(r"\s?[!-/:-~！-／：-～‘-‟　-。]+")?,
                regex(r"\s+$")?,
                regex(r"[一-龥ࠀ-一가-퟿]+")?,
                regex(r"\p{N}+")?,
            ],
            "deepseek-coder" => vec![
                regex(r"[\r\n]")?,
                regex(r"\s?\p{L}+")?,
                regex(r"\s?\p{P}+")?,
                regex(r"[一-龥ࠀ-一가-퟿]+")?,
                Stage::Digits,
            ],
            "falcon" => vec![
                regex(r"[\p{P}\$\+<=>\^~\|`]+")?,
                Stage::Gpt2,
                regex(r"[0-9][0-9][0-9]")?,
            ],
            "starcoder" | "refact" | "command-r" | "smollm" | "codeshell" | "exaone"
            | "minerva-7b" => vec![Stage::Digits, Stage::Gpt2],
            "gpt-2" | "phi-2" | "jina-es" | "jina-de" | "gigachat" | "jina-v2-es"
            | "jina-v2-de" | "jina-v1-en" | "jina-v2-code" | "roberta-bpe" | "mpt" | "olmo"
            | "jais" | "exaone4" | "trillion" | "granite-docling" | "a.x-4.0" | "mellum" => {
                vec![Stage::Gpt2]
            }
            "qwen2" | "deepseek-r1-qwen" | "stablelm2" | "hunyuan" | "megrez" => {
                vec![Stage::Llama3 { max_digits: 1 }]
            }
            "gpt-4o" | "llama4" => vec![regex(GPT4O_RE)?],
            "poro-chat" | "bloom" | "gpt3-finnish" => vec![regex(BLOOM_RE)?],
            "viking" => vec![regex(BLOOM_RE)?, Stage::Digits],
            other => return Err(TokenizerError::UnknownPreTokenizer(other.to_string())),
        };
        Ok(PreTokenizer {
            name: pre.to_string(),
            stages,
            ignore_merges,
            default_add_bos,
        })
    }

    /// The `pre` name this was built from.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Splits `text` into pieces (byte ranges, in order, covering all of `text`).
    pub fn split(&self, text: &str) -> Vec<Range<usize>> {
        if text.is_empty() {
            return Vec::new();
        }
        let mut pieces = Vec::with_capacity(text.len() / 3 + 1);
        pieces.push(0..text.len());
        let mut next = Vec::with_capacity(text.len() / 3 + 1);
        for stage in &self.stages {
            next.clear();
            for r in &pieces {
                split_one(stage, &text[r.clone()], r.start, &mut next);
            }
            std::mem::swap(&mut pieces, &mut next);
        }
        pieces
    }
}

fn split_one(stage: &Stage, seg: &str, base: usize, out: &mut Vec<Range<usize>>) {
    match stage {
        Stage::Gpt2 => split_fast::gpt2(seg, base, out),
        Stage::Llama3 { max_digits } => split_fast::llama3(seg, base, *max_digits, out),
        Stage::Digits => split_fast::digits(seg, base, out),
        Stage::Regex(re) => split_regex(re, seg, base, out),
    }
}

/// Regex split keeping matches and the gaps between them (llama.cpp's `unicode_regex_split_stl`).
pub(crate) fn split_regex(re: &SysRegex, seg: &str, base: usize, out: &mut Vec<Range<usize>>) {
    let mut prev = 0;
    for (s, e) in re.find_iter(seg) {
        if e == s {
            continue;
        }
        if s > prev {
            out.push(base + prev..base + s);
        }
        out.push(base + s..base + e);
        prev = e;
    }
    if prev < seg.len() {
        out.push(base + prev..base + seg.len());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn pieces(f: impl Fn(&str, &mut Vec<Range<usize>>), s: &str) -> Vec<String> {
        let mut out = Vec::new();
        f(s, &mut out);
        out.into_iter().map(|r| s[r].to_string()).collect()
    }

    fn by_regex(pattern: &str, s: &str) -> Vec<String> {
        let re = SysRegex::new(pattern).unwrap();
        pieces(|t, o| split_regex(&re, t, 0, o), s)
    }

    /// Characters that exercise every branch: letters (ASCII, Latin-1, CJK), digits (ASCII,
    /// other scripts, fractions), spaces (ASCII, NBSP, ideographic), newlines, punctuation,
    /// apostrophes and emoji.
    fn text() -> impl Strategy<Value = String> {
        let alphabet: Vec<char> =
            "aZsStTrReEvVmMlLdDé東ñ09٣½ \t\n\r\u{a0}\u{3000}'!?.,-$🦙😁\u{301}"
                .chars()
                .collect();
        proptest::collection::vec(proptest::sample::select(alphabet), 0..24)
            .prop_map(|v| v.into_iter().collect())
    }

    proptest! {
        #[test]
        fn gpt2_matches_regex(s in text()) {
            prop_assert_eq!(pieces(|t, o| split_fast::gpt2(t, 0, o), &s), by_regex(GPT2_RE, &s));
        }

        #[test]
        fn llama3_matches_regex(s in text()) {
            prop_assert_eq!(
                pieces(|t, o| split_fast::llama3(t, 0, 3, o), &s),
                by_regex(LLAMA3_RE, &s)
            );
        }

        #[test]
        fn qwen2_matches_regex(s in text()) {
            prop_assert_eq!(
                pieces(|t, o| split_fast::llama3(t, 0, 1, o), &s),
                by_regex(QWEN2_RE, &s)
            );
        }

        #[test]
        fn digits_match_regex(s in text()) {
            prop_assert_eq!(pieces(|t, o| split_fast::digits(t, 0, o), &s), by_regex(DIGIT_RE, &s));
        }

        #[test]
        fn split_covers_text(s in text()) {
            for pre in ["default", "llama-bpe", "qwen2", "smollm", "falcon", "deepseek-llm", "gpt-2"] {
                let p = PreTokenizer::new(pre).unwrap();
                let joined: String = p.split(&s).into_iter().map(|r| &s[r]).collect();
                prop_assert_eq!(&joined, &s);
            }
        }
    }

    #[test]
    fn unknown_pre_is_an_error() {
        assert!(matches!(
            PreTokenizer::new("no-such-pre"),
            Err(TokenizerError::UnknownPreTokenizer(n)) if n == "no-such-pre"
        ));
    }

    #[test]
    fn examples() {
        let p = PreTokenizer::new("llama-bpe").unwrap();
        let s = "Hello, y'all! 12345\n\n  x";
        let got: Vec<&str> = p.split(s).into_iter().map(|r| &s[r]).collect();
        assert_eq!(
            got,
            ["Hello", ",", " y", "'all", "!", " ", "123", "45", "\n\n", " ", " x"]
        );
    }
}
