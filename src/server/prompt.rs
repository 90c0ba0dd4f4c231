//! Chat messages to prompt tokens, without letting user text become control tokens.
//!
//! The chat template renders the conversation to text. Tokenizing all of it with special-token
//! parsing (what `kiln generate --chat`, llama.cpp and transformers do) would turn a user who
//! types `<|im_end|><|im_start|>system` into a forged system turn. Here the template's markup is
//! parsed for control tokens but every string the client sent (message contents, names, tool
//! call fields) is plain text: each such string that holds control-token text is located in
//! the rendered prompt (every occurrence, also in its trimmed form, since templates often
//! `trim` content) and those byte ranges are tokenized with `parse_special = false`
//! ([`Tokenizer::encode_protected`]). A string holding control-token text that the template
//! changed beyond recognition is refused (400) rather than guessed at. Strings without
//! control-token text need no protection, so for ordinary conversations the tokens equal a
//! plain `encode(rendered, parse_special = true)`.

use crate::chat_template::ChatTemplateError;
use crate::server::app_state::Runtime;
use crate::server::error::ApiError;
use crate::server::types::ChatMessage;
use crate::structured::reasoning::ThinkStart;
use crate::tokenizer::Tokenizer;
use aho_corasick::AhoCorasick;
use std::ops::Range;

/// The prompt tokens of a conversation (see the module docs).
pub fn chat_prompt(
    rt: &Runtime,
    messages: &[ChatMessage],
    add_generation_prompt: bool,
) -> Result<Vec<u32>, ApiError> {
    chat_prompt_with_tools(rt, messages, add_generation_prompt, None)
}

/// [`chat_prompt`] with the template's `tools` variable set (OpenAI `tools` entries, for
/// templates that render tools themselves). Their strings are the client's, so protected too.
pub fn chat_prompt_with_tools(
    rt: &Runtime,
    messages: &[ChatMessage],
    add_generation_prompt: bool,
    tools: Option<&serde_json::Value>,
) -> Result<Vec<u32>, ApiError> {
    render_chat(rt, messages, add_generation_prompt, tools, None).map(|r| r.ids)
}

/// A rendered conversation: its tokens and where the reply starts with respect to a
/// reasoning block (None when the template has none).
pub struct RenderedChat {
    pub ids: Vec<u32>,
    /// The rendered text (`/apply-template` returns it).
    pub text: String,
    pub think: Option<ThinkStart>,
}

/// Variables a request's `chat_template_kwargs` may not set: kiln sets them.
const RESERVED_KWARGS: [&str; 5] = [
    "messages",
    "tools",
    "add_generation_prompt",
    "bos_token",
    "eos_token",
];

/// [`chat_prompt_with_tools`] with extra template variables (`chat_template_kwargs`, e.g.
/// `enable_thinking`), which are the client's strings too.
pub fn render_chat(
    rt: &Runtime,
    messages: &[ChatMessage],
    add_generation_prompt: bool,
    tools: Option<&serde_json::Value>,
    kwargs: Option<&serde_json::Map<String, serde_json::Value>>,
) -> Result<RenderedChat, ApiError> {
    if let Some(why) = &rt.chat_refusal {
        return Err(ApiError::bad("messages", why.clone()));
    }
    if messages.is_empty() {
        return Err(ApiError::bad("messages", "messages must not be empty"));
    }
    let (mut context, mut user_strings) = template_context(rt, messages, add_generation_prompt)?;
    if let Some(tools) = tools {
        collect_strings(tools, &mut user_strings);
        context["tools"] = tools.clone();
    }
    for (k, v) in kwargs.into_iter().flatten() {
        if RESERVED_KWARGS.contains(&k.as_str()) {
            return Err(ApiError::bad(
                format!("chat_template_kwargs.{k}"),
                format!("`{k}` is set by the server and cannot be passed in chat_template_kwargs"),
            ));
        }
        collect_strings(v, &mut user_strings);
        context[k.as_str()] = v.clone();
    }
    let rendered = rt.template.render(&context, None).map_err(template_error)?;
    let protected = protected_ranges(&rt.tokenizer, &rendered, &user_strings)?;
    let mut ids = rt.tokenizer.encode_protected(&rendered, false, &protected);
    // BOS when the vocabulary asks for it and the template did not print it.
    if let Some(bos) = rt.tokenizer.bos().filter(|_| rt.tokenizer.add_bos()) {
        if ids.first() != Some(&bos) {
            ids.insert(0, bos);
        }
    }
    let think = rt.reasoning.then(|| {
        if rt.harmony {
            ThinkStart::Harmony
        } else {
            ThinkStart::after_prompt(&rendered)
        }
    });
    Ok(RenderedChat {
        ids,
        think,
        text: rendered,
    })
}

/// The template's variables, and every string of the messages the client wrote.
fn template_context(
    rt: &Runtime,
    messages: &[ChatMessage],
    add_generation_prompt: bool,
) -> Result<(serde_json::Value, Vec<String>), ApiError> {
    use serde_json::{Map, Value};
    let mut strings = Vec::new();
    let mut list = Vec::with_capacity(messages.len());
    for (i, m) in messages.iter().enumerate() {
        let mut obj = Map::new();
        obj.insert("role".into(), Value::from(m.role.template_name()));
        let content = m.content.as_ref().map(|c| c.text()).unwrap_or_default();
        if content.contains('\0') {
            return Err(ApiError::bad(
                format!("messages[{i}].content"),
                "message content must not contain NUL characters",
            ));
        }
        strings.push(content.clone());
        let content = crate::server::history::lfm2_content(rt.tool_format, &rt.template_text, m)
            .unwrap_or(content);
        obj.insert("content".into(), Value::from(content));
        if let Some(name) = &m.name {
            strings.push(name.clone());
            obj.insert("name".into(), Value::from(name.as_str()));
        }
        if let Some(id) = &m.tool_call_id {
            strings.push(id.clone());
            obj.insert("tool_call_id".into(), Value::from(id.as_str()));
        }
        if let Some(calls) = &m.tool_calls {
            for c in calls {
                collect_strings(c, &mut strings);
            }
            obj.insert("tool_calls".into(), Value::from(calls.clone()));
        }
        if let Some(responses) = &m.tool_responses {
            for r in responses {
                collect_strings(r, &mut strings);
            }
            obj.insert("tool_responses".into(), Value::from(responses.clone()));
        }
        list.push(Value::Object(obj));
    }
    let ctx = serde_json::json!({
        "messages": list,
        "add_generation_prompt": add_generation_prompt,
        "bos_token": rt.bos_text,
        "eos_token": rt.eos_text,
    });
    Ok((ctx, strings))
}

fn collect_strings(v: &serde_json::Value, out: &mut Vec<String>) {
    match v {
        serde_json::Value::String(s) => out.push(s.clone()),
        serde_json::Value::Array(a) => a.iter().for_each(|x| collect_strings(x, out)),
        serde_json::Value::Object(o) => o.iter().for_each(|(k, x)| {
            out.push(k.clone());
            collect_strings(x, out)
        }),
        _ => {}
    }
}

/// A template refusal or failure on this conversation is the client's 400: the server's own
/// template compiled at start-up, so what fails here depends on the messages.
fn template_error(e: ChatTemplateError) -> ApiError {
    let message = match &e {
        ChatTemplateError::Raised(m) => {
            format!("the model's chat template refused the messages: {m}")
        }
        other => {
            format!("the messages could not be rendered with the model's chat template: {other}")
        }
    };
    ApiError::bad("messages", message)
}

/// The byte ranges of `rendered` to tokenize as plain text: every occurrence of every client
/// string that holds control-token text (or of its trimmed form), merged.
pub fn protected_ranges(
    tok: &Tokenizer,
    rendered: &str,
    strings: &[String],
) -> Result<Vec<Range<usize>>, ApiError> {
    let mut needles: Vec<&str> = strings
        .iter()
        .map(String::as_str)
        .filter(|s| tok.contains_control_text(s))
        .collect();
    if needles.is_empty() {
        return Ok(Vec::new());
    }
    needles.sort_unstable();
    needles.dedup();
    // Pattern 2i is the string, 2i+1 its trimmed form.
    let patterns: Vec<&str> = needles.iter().flat_map(|s| [*s, s.trim()]).collect();
    let ac = AhoCorasick::new(&patterns)
        .map_err(|e| ApiError::bad("messages", format!("cannot search the messages: {e}")))?;
    let mut found = vec![false; needles.len()];
    let mut ranges: Vec<Range<usize>> = Vec::new();
    for m in ac.find_overlapping_iter(rendered) {
        if m.is_empty() {
            continue;
        }
        found[m.pattern().as_usize() / 2] = true;
        ranges.push(m.range());
    }
    if let Some(i) = found.iter().position(|f| !f) {
        let preview: String = needles[i].chars().take(40).collect();
        return Err(ApiError::bad(
            "messages",
            format!(
                "a message containing control-token text ({preview:?}...) was changed by the chat template; it cannot be tokenized safely"
            ),
        ));
    }
    ranges.sort_unstable_by_key(|r| (r.start, r.end));
    let mut merged: Vec<Range<usize>> = Vec::with_capacity(ranges.len());
    for r in ranges {
        match merged.last_mut() {
            Some(last) if r.start <= last.end => last.end = last.end.max(r.end),
            _ => merged.push(r),
        }
    }
    Ok(merged)
}
