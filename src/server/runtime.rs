//! A loaded model as the handlers use it: its engine, tokenizer and chat template, and what
//! is derived from them once (fingerprint, end-of-turn tokens, tool-call format, whether chat
//! is refused).

use crate::chat_template::{ChatTemplate, TemplateSource};
use crate::scheduler::setup::Loaded;
use crate::scheduler::EngineHandle;
use crate::structured::tools::ToolFormat;
use crate::structured::Grammars;
use crate::tokenizer::Tokenizer;
use std::path::Path;
use std::sync::Arc;

/// The loaded model and what the handlers derive from it once.
pub struct Runtime {
    pub engine: EngineHandle,
    pub tokenizer: Arc<Tokenizer>,
    pub template: ChatTemplate,
    pub template_source: TemplateSource,
    /// `fp_` + a hash of the model, kiln's version and the instruction set.
    pub fingerprint: String,
    /// Tokens that end an assistant turn in this template (e.g. `<|im_end|>`) plus the
    /// vocabulary's end-of-generation tokens: chat requests stop on them.
    pub end_of_turn: Vec<u32>,
    /// The BOS / EOS token texts, for templates that print them.
    pub bos_text: String,
    pub eos_text: String,
    /// The grammar compiler for `response_format` and tools (None if the vocabulary could not
    /// be turned into a token trie: such requests are then refused).
    pub grammars: Option<Arc<Grammars>>,
    /// How this model writes tool calls (from its chat template), and the template's source
    /// (it tells variants of a format apart).
    pub tool_format: ToolFormat,
    pub template_text: String,
    /// The template writes `<think>` blocks (or harmony's analysis channel): replies are split
    /// into `reasoning_content` and `content` ([`crate::structured::reasoning`]).
    pub reasoning: bool,
    /// The template writes gpt-oss's harmony format: replies are read by
    /// [`crate::structured::harmony`] (channels, calls to `functions.NAME`).
    pub harmony: bool,
    /// Why chat requests are refused (a 400), when they are: the model has no chat template,
    /// none is configured, and its vocabulary has no ChatML markers for kiln's default (a
    /// base model such as gemma-3-270m serves completions only).
    pub chat_refusal: Option<String>,
}

/// Why a model could not be made ready to serve.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error(transparent)]
    Setup(#[from] crate::scheduler::setup::SetupError),
    #[error("chat template: {0}")]
    Template(#[from] crate::chat_template::ChatTemplateError),
}

/// True when `<|im_start|>` and `<|im_end|>` are each one control token of the vocabulary
/// (kiln's ChatML default renders into tokens the model knows).
pub fn has_chatml_markers(tok: &Tokenizer) -> bool {
    ["<|im_start|>", "<|im_end|>"].iter().all(|m| {
        let ids = tok.encode(m, false, true);
        ids.len() == 1 && tok.is_control(ids[0])
    })
}

impl Runtime {
    /// Wraps a started engine: compiles the chat template (`template_override`, else the
    /// model's, else ChatML) and derives the fingerprint and end-of-turn tokens.
    pub fn new(loaded: Loaded, template_override: Option<&Path>) -> Result<Runtime, RuntimeError> {
        let (template, template_source) =
            ChatTemplate::for_model(loaded.chat_template.as_deref(), template_override)?;
        let tok = &loaded.tokenizer;
        let text = |id: Option<u32>| {
            id.map(|i| String::from_utf8_lossy(tok.token_to_piece(i)).into_owned())
                .unwrap_or_default()
        };
        let (bos_text, eos_text) = (text(tok.bos()), text(tok.eos()));
        let fingerprint = fingerprint(&[
            &loaded.model_stem,
            &loaded.quant,
            &tok.n_vocab().to_string(),
            env!("CARGO_PKG_VERSION"),
            crate::kernels::isa::isa().name(),
        ]);
        let mut end_of_turn = turn_end_tokens(&template, tok, &bos_text, &eos_text);
        end_of_turn.extend_from_slice(tok.eog_ids());
        end_of_turn.sort_unstable();
        end_of_turn.dedup();
        end_of_turn.truncate(crate::scheduler::request::MAX_STOPS);
        let template_text = match template_override {
            Some(p) => std::fs::read_to_string(p).unwrap_or_default(),
            None => loaded.chat_template.clone().unwrap_or_default(),
        };
        let tool_format = ToolFormat::detect(&template_text);
        let grammars = match Grammars::new(Arc::clone(&loaded.tokenizer)) {
            Ok(g) => Some(Arc::new(g)),
            Err(e) => {
                tracing::warn!(error = %e, "structured output disabled");
                None
            }
        };
        tracing::info!(tool_format = tool_format.as_str(), "tool calling");
        let harmony = crate::structured::harmony::is_harmony_template(&template_text);
        let reasoning = harmony
            || (template_text.contains(crate::structured::reasoning::OPEN)
                && template_text.contains(crate::structured::reasoning::CLOSE));
        let chat_refusal = (template_source == TemplateSource::ChatmlDefault
            && !has_chatml_markers(tok))
        .then(|| {
            "this model has no chat template (tokenizer.chat_template) and its vocabulary has no \
             ChatML markers: use /v1/completions, or configure a template (model.chat_template \
             in the config, --chat-template)"
                .to_string()
        });
        if let Some(why) = &chat_refusal {
            tracing::warn!("chat completions refused: {why}");
        }
        Ok(Runtime {
            engine: loaded.engine,
            tokenizer: loaded.tokenizer,
            template,
            template_source,
            fingerprint,
            end_of_turn,
            bos_text,
            eos_text,
            grammars,
            tool_format,
            template_text,
            reasoning,
            harmony,
            chat_refusal,
        })
    }
}

/// `fp_` and 10 hex digits of FNV-1a over `parts` (stable across runs and machines).
fn fingerprint(parts: &[&str]) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for p in parts {
        for b in p.bytes().chain([0u8]) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    format!("fp_{:010x}", h >> 24)
}

/// The control token the template writes right after an assistant message's content (found
/// by rendering a probe conversation), if any.
fn turn_end_tokens(t: &ChatTemplate, tok: &Tokenizer, bos: &str, eos: &str) -> Vec<u32> {
    const PROBE: &str = "kiln-probe-reply";
    let ctx = serde_json::json!({
        "messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": PROBE},
        ],
        "add_generation_prompt": false,
        "bos_token": bos,
        "eos_token": eos,
    });
    let Ok(rendered) = t.render(&ctx, None) else {
        return Vec::new();
    };
    let Some(at) = rendered.find(PROBE) else {
        return Vec::new();
    };
    let after = &rendered[at + PROBE.len()..];
    tok.encode(after, false, true)
        .first()
        .copied()
        .filter(|&id| tok.is_control(id))
        .into_iter()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fingerprint_changes_with_each_part() {
        let a = fingerprint(&["m", "Q4_1", "v1", "avx2"]);
        assert!(a.starts_with("fp_") && a.len() == 13, "{a}");
        assert_eq!(a, fingerprint(&["m", "Q4_1", "v1", "avx2"]));
        assert_ne!(a, fingerprint(&["m", "Q4_1", "v1", "avx512"]));
        assert_ne!(a, fingerprint(&["m", "Q4_0", "v1", "avx2"]));
        assert_ne!(a, fingerprint(&["m", "Q4_1", "v2", "avx2"]));
    }
}
