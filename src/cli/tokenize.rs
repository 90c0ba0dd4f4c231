//! `kiln tokenize MODEL "text" [--special] [--add-special] [--json]`: the ids and pieces of a
//! text under a model's tokenizer.

use anyhow::Context;
use kiln::gguf::GgufFile;
use kiln::tokenizer::Tokenizer;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// GGUF model (or vocabulary-only) file.
    model: PathBuf,
    /// The text to tokenize.
    text: String,
    /// Recognise control tokens written in the text (`<|im_start|>`); without this flag they
    /// are plain text.
    #[arg(long)]
    special: bool,
    /// Add BOS/EOS as the model's metadata asks (off by default).
    #[arg(long)]
    add_special: bool,
    /// Print one JSON object `{"ids": [...], "pieces": [...]}`.
    #[arg(long)]
    json: bool,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let f =
        GgufFile::open(&args.model).with_context(|| format!("opening {}", args.model.display()))?;
    let tok = Tokenizer::from_gguf(&f)
        .with_context(|| format!("reading the tokenizer of {}", args.model.display()))?;
    let ids = tok.encode(&args.text, args.add_special, args.special);
    // A piece may be part of a UTF-8 character (byte tokens); such bytes show as U+FFFD.
    let pieces: Vec<String> = ids
        .iter()
        .map(|&id| String::from_utf8_lossy(tok.token_to_piece(id)).into_owned())
        .collect();
    if args.json {
        let v = serde_json::json!({ "ids": ids, "pieces": pieces });
        println!("{v}");
    } else {
        for &id in &ids {
            // Bytes that are not whole UTF-8 (part of a character) are shown escaped.
            let bytes = tok.token_to_piece(id);
            match std::str::from_utf8(bytes) {
                Ok(s) => println!("{id:>7} {s:?}"),
                Err(_) => println!("{id:>7} b\"{}\"", bytes.escape_ascii()),
            }
        }
    }
    Ok(())
}
