//! llama-server's command line, read by `kiln serve` so a launch script can swap the binary.
//!
//! Its common flags are aliases of kiln's own (declared on [`super::serve::Args`]): `-m`,
//! `-c`/`--ctx-size`, `-np`/`--parallel`, `--host`, `--port`, `-t`/`--threads`, `--api-key`,
//! `--api-key-file`, `--alias`, `--chat-template-file`, `--jinja`, `-n`/`--n-predict`,
//! `--timeout`. This module only rewrites the one spelling clap cannot declare (`-np`, a
//! two-letter short flag) and refuses, in one line, the llama-server flags kiln does not take,
//! each with what kiln offers instead; a flag neither program knows is clap's usual error.

use std::ffi::OsString;

/// llama-server flags kiln does not take: their spellings, whether a value follows, and what
/// kiln offers instead.
const REFUSED: &[(&[&str], bool, &str)] = &[
    (
        &["-ngl", "--gpu-layers", "--n-gpu-layers", "-dev", "--device", "-sm", "--split-mode", "-ts", "--tensor-split", "-mg", "--main-gpu"],
        true,
        "kiln runs on the CPU only: drop it",
    ),
    (
        &["-fa", "--flash-attn"],
        true,
        "kiln's attention is always one fused pass: drop it",
    ),
    (
        &["-b", "--batch-size", "-ub", "--ubatch-size"],
        true,
        "--max-batch-tokens (tokens per engine step)",
    ),
    (
        &["-cb", "--cont-batching", "-nocb", "--no-cont-batching"],
        false,
        "continuous batching is always on: drop it",
    ),
    (
        &["-ctk", "--cache-type-k", "-ctv", "--cache-type-v"],
        true,
        "--kv-type f16|q8_0 (K and V together)",
    ),
    (
        &["--mlock", "--no-mmap", "--numa"],
        false,
        "kiln always memory-maps the weights and places its own threads (--threads, --workers)",
    ),
    (
        &["-hf", "-hfr", "--hf-repo", "-hff", "--hf-file", "-mu", "--model-url"],
        true,
        "download the GGUF first (scripts/fetch-model.sh) and pass -m FILE",
    ),
    (
        &["--metrics", "--slots", "--no-slots", "--props", "--embedding", "--embeddings", "--rerank", "--reranking"],
        false,
        "kiln always serves /metrics, /props, /v1/embeddings and /v1/rerank (/slots answers 501): drop it",
    ),
    (
        &["--cache-reuse"],
        true,
        "the prefix cache (scheduler.prefix_cache) always reuses seen prompt prefixes: drop it",
    ),
    (
        &["--temp", "--temperature", "--top-k", "--top-p", "--min-p", "--repeat-penalty", "-s", "--seed"],
        true,
        "send sampling settings in each request (/completion uses llama-server's defaults)",
    ),
    (
        &["--lora", "--lora-scaled", "-md", "--model-draft", "--mmproj"],
        true,
        "kiln serves text models without adapters or draft models (--speculative ngram needs none)",
    ),
    (
        &["-tb", "--threads-batch"],
        true,
        "-t/--threads covers prompt processing and generation",
    ),
    (
        &["--log-file", "-lv", "--verbosity", "--log-verbosity"],
        true,
        "kiln logs to stderr; KILN_LOG sets the level",
    ),
    (
        &["--log-disable", "-v", "--verbose", "--no-webui"],
        false,
        "kiln logs to stderr (KILN_LOG sets the level) and serves no web UI",
    ),
];

/// `args` (a whole command line) with `-np` spelled `--parallel` after `serve`, or the one
/// line naming every llama-server flag kiln does not take.
pub fn rewrite(args: Vec<OsString>) -> Result<Vec<OsString>, String> {
    // The subcommand: the first word after the program that is neither a global option nor
    // the value of one (`--config FILE`, `--log-format text`).
    let mut i = 1;
    while let Some(a) = args.get(i).and_then(|a| a.to_str()) {
        match a {
            "--config" | "--log-format" => i += 2,
            _ if a.starts_with('-') => i += 1,
            _ => break,
        }
    }
    if args.get(i).is_none_or(|a| a != "serve") {
        return Ok(args);
    }
    let serve = i;
    let mut out = args[..=serve].to_vec();
    let mut refused: Vec<String> = Vec::new();
    let mut rest = args[serve + 1..].iter();
    while let Some(arg) = rest.next() {
        let Some(text) = arg.to_str() else {
            out.push(arg.clone());
            continue;
        };
        if text == "--" {
            out.push(arg.clone());
            out.extend(rest.cloned());
            break;
        }
        let (flag, inline_value) = match text.split_once('=') {
            Some((f, _)) if f.starts_with('-') => (f, true),
            _ => (text, false),
        };
        if flag == "-np" {
            out.push(OsString::from(text.replacen("-np", "--parallel", 1)));
            continue;
        }
        if let Some((_, takes_value, instead)) =
            REFUSED.iter().find(|(names, _, _)| names.contains(&flag))
        {
            if *takes_value && !inline_value {
                // Its value (a number, or a word that is not a flag), unless the flag was
                // written last or its optional value is absent (`-fa` alone).
                let mut peek = rest.clone();
                if peek.next().is_some_and(|v| {
                    let v = v.to_string_lossy();
                    !v.starts_with('-') || v.parse::<f64>().is_ok()
                }) {
                    rest.next();
                }
            }
            refused.push(format!("{flag} ({instead})"));
            continue;
        }
        out.push(arg.clone());
    }
    if refused.is_empty() {
        Ok(out)
    } else {
        Err(format!(
            "llama-server flags kiln does not take: {}; `kiln serve --help` lists kiln's own",
            refused.join(", ")
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<OsString> {
        s.split_whitespace().map(OsString::from).collect()
    }

    #[test]
    fn np_becomes_parallel_and_the_rest_passes_through() {
        let got = rewrite(args("kiln serve -m a.gguf -np 4 -c 2048 --port 8080")).unwrap();
        assert_eq!(
            got,
            args("kiln serve -m a.gguf --parallel 4 -c 2048 --port 8080")
        );
        assert_eq!(
            rewrite(args("kiln serve -np=2")).unwrap(),
            args("kiln serve --parallel=2")
        );
        // Other commands and anything after `--` are left alone.
        assert_eq!(
            rewrite(args("kiln bench -np 4")).unwrap(),
            args("kiln bench -np 4")
        );
        assert_eq!(
            rewrite(args("kiln tokenize serve -np")).unwrap(),
            args("kiln tokenize serve -np")
        );
        assert_eq!(
            rewrite(args("kiln --config k.toml serve -np 2")).unwrap(),
            args("kiln --config k.toml serve --parallel 2")
        );
        assert_eq!(
            rewrite(args("kiln serve -- -ngl")).unwrap(),
            args("kiln serve -- -ngl")
        );
    }

    #[test]
    fn refused_flags_are_named_in_one_line_with_kiln_s_alternative() {
        let e = rewrite(args(
            "kiln serve -m a.gguf -ngl 99 --metrics -fa -ctk q8_0 -s -1 -t 2",
        ))
        .unwrap_err();
        assert!(!e.contains('\n'));
        for part in [
            "-ngl (kiln runs on the CPU only",
            "--metrics (",
            "-fa (",
            "-ctk (--kv-type",
        ] {
            assert!(e.contains(part), "{part}: {e}");
        }
        assert!(
            !e.contains("99") && !e.contains("-t ") && !e.contains("-1"),
            "{e}"
        );
        assert!(e.contains("-s ("), "{e}");
    }
}
