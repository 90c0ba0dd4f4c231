//! `POST /v1/completions` bodies.

use super::common::{CompletionLogprobs, TimingsBody, UsageBody};
use super::sampling::SamplingFields;
use serde::de::{self, Deserializer, SeqAccess, Visitor};
use serde::{Deserialize, Serialize};
use std::fmt;
use utoipa::ToSchema;

/// A (legacy) completion request.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
pub struct CompletionRequest {
    #[serde(default)]
    pub model: Option<String>,
    /// A string, a list of strings, a list of token ids, or a list of such lists; each prompt
    /// gets its own `n` choices (choice index = prompt index * n + choice).
    pub prompt: PromptInput,
    /// Text after the completion: not supported (400 when non-empty).
    #[serde(default)]
    pub suffix: Option<String>,
    /// Return the prompt in front of the completion's text.
    #[serde(default)]
    pub echo: Option<bool>,
    /// Return the logprobs of each token and of this many alternatives (0 to 20).
    #[serde(default)]
    #[schema(minimum = 0, maximum = 20)]
    pub logprobs: Option<i64>,
    /// Accepted for compatibility; must equal `n` (kiln returns the `n` choices).
    #[serde(default)]
    pub best_of: Option<i64>,
    /// Sampling, stopping, streaming and `response_format` (shared with chat).
    #[serde(flatten)]
    pub sampling: SamplingFields,
}

/// `prompt` in its four forms. Token ids are checked against the vocabulary later.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
#[serde(untagged)]
pub enum PromptInput {
    Text(String),
    Texts(Vec<String>),
    Ids(Vec<i64>),
    IdLists(Vec<Vec<i64>>),
}

impl Default for PromptInput {
    fn default() -> Self {
        PromptInput::Text(String::new())
    }
}

/// One prompt of a request.
#[derive(Debug, Clone, PartialEq)]
pub enum OnePrompt {
    Text(String),
    Ids(Vec<i64>),
}

impl PromptInput {
    /// The prompts, in order.
    pub fn into_prompts(self) -> Vec<OnePrompt> {
        match self {
            PromptInput::Text(s) => vec![OnePrompt::Text(s)],
            PromptInput::Texts(v) => v.into_iter().map(OnePrompt::Text).collect(),
            PromptInput::Ids(ids) => vec![OnePrompt::Ids(ids)],
            PromptInput::IdLists(v) => v.into_iter().map(OnePrompt::Ids).collect(),
        }
    }
}

// A visitor that decides the form from the first element, so that a wrong element names its
// position (`prompt[3]`) instead of "did not match any variant".
impl<'de> Deserialize<'de> for PromptInput {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = PromptInput;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(
                    "a string, an array of strings, an array of token ids or an array of such arrays",
                )
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<PromptInput, E> {
                Ok(PromptInput::Text(s.to_string()))
            }
            fn visit_string<E: de::Error>(self, s: String) -> Result<PromptInput, E> {
                Ok(PromptInput::Text(s))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<PromptInput, A::Error> {
                let Some(first) = seq.next_element::<Element>()? else {
                    return Err(de::Error::invalid_length(0, &"at least one prompt"));
                };
                Ok(match first {
                    Element::Text(s) => {
                        let mut v = vec![s];
                        while let Some(s) = seq.next_element::<String>()? {
                            v.push(s);
                        }
                        PromptInput::Texts(v)
                    }
                    Element::Id(id) => {
                        let mut v = vec![id];
                        while let Some(id) = seq.next_element::<i64>()? {
                            v.push(id);
                        }
                        PromptInput::Ids(v)
                    }
                    Element::Ids(ids) => {
                        let mut v = vec![ids];
                        while let Some(ids) = seq.next_element::<Vec<i64>>()? {
                            v.push(ids);
                        }
                        PromptInput::IdLists(v)
                    }
                })
            }
        }
        d.deserialize_any(V)
    }
}

/// The first element of a `prompt` array.
enum Element {
    Text(String),
    Id(i64),
    Ids(Vec<i64>),
}

impl<'de> Deserialize<'de> for Element {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Element;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string, a token id or an array of token ids")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Element, E> {
                Ok(Element::Text(s.to_string()))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Element, E> {
                Ok(Element::Id(v))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Element, E> {
                i64::try_from(v)
                    .map(Element::Id)
                    .map_err(|_| E::invalid_value(de::Unexpected::Unsigned(v), &"a token id"))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Element, A::Error> {
                let mut v = Vec::new();
                while let Some(id) = seq.next_element::<i64>()? {
                    v.push(id);
                }
                Ok(Element::Ids(v))
            }
        }
        d.deserialize_any(V)
    }
}

/// A completion (also each streamed chunk, as OpenAI does: `object` is `text_completion`).
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct CompletionResponse {
    /// `cmpl-...`, the same on every chunk of a stream.
    pub id: String,
    /// Always `text_completion`.
    pub object: String,
    pub created: u64,
    pub model: String,
    pub system_fingerprint: String,
    pub choices: Vec<CompletionChoice>,
    /// Always on a complete response; on a stream only the last chunk's (when
    /// `stream_options.include_usage`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<UsageBody>,
    /// kiln's timings of the request, on the usage chunk of a stream only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timings: Option<TimingsBody>,
}

/// One choice of a completion.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct CompletionChoice {
    pub index: usize,
    pub text: String,
    pub logprobs: Option<CompletionLogprobs>,
    /// `stop`, `length` or `abort`; null on a stream's chunks until the choice's last.
    pub finish_reason: Option<String>,
}
