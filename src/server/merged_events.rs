//! Reading the engine's event streams for one HTTP request: a completions request with a
//! list of prompts has one engine request per prompt, merged into one stream of
//! `(prompt index, event)`. Choice `c` of prompt `p` is choice `p * n + c` of the response.
//! Dropping the merged stream (client gone, error, timeout) drops every engine stream, which
//! aborts their requests at the next scheduler step.

use crate::scheduler::{Event, FinishReason, RequestStream, TokenLogprob, Usage};
use crate::server::access;
use crate::server::error::ApiError;
use crate::server::types::{TimingsBody, UsageBody};
use futures_util::stream::{self, BoxStream, SelectAll, StreamExt};
use tokio::time::Instant;

/// The merged events of an HTTP request's engine requests.
pub type Merged = SelectAll<BoxStream<'static, (usize, Event)>>;

/// Merges `streams` (in prompt order).
pub fn merge(streams: Vec<RequestStream>) -> Merged {
    stream::select_all(streams.into_iter().enumerate().map(|(p, s)| {
        stream::unfold(s, move |mut s| async move {
            s.recv().await.map(|ev| ((p, ev), s))
        })
        .boxed()
    }))
}

/// The next event, or the timeout error once `deadline` passes.
pub async fn next_event(
    merged: &mut Merged,
    deadline: Option<(Instant, std::time::Duration)>,
) -> Result<Option<(usize, Event)>, ApiError> {
    match deadline {
        None => Ok(merged.next().await),
        Some((at, limit)) => tokio::time::timeout_at(at, merged.next())
            .await
            .map_err(|_| ApiError::Timeout(limit)),
    }
}

/// Everything one choice produced.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ChoiceOutput {
    pub text: String,
    /// The generated ids (end-of-generation tokens excluded).
    pub ids: Vec<u32>,
    pub logprobs: Vec<TokenLogprob>,
    pub finish: Option<FinishReason>,
    /// The stop string that ended the choice, if one did.
    pub stop: Option<String>,
}

/// Everything an HTTP request's engine requests produced.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Outputs {
    /// Choice `p * n + c` is choice `c` of prompt `p`.
    pub choices: Vec<ChoiceOutput>,
    /// Per prompt, its prompt logprobs when asked (entry `i` is token `i + 1`'s).
    pub prompt_logprobs: Vec<Vec<TokenLogprob>>,
    /// Per prompt, its embedding when asked.
    pub embeddings: Vec<Vec<f32>>,
    pub usage: UsageBody,
    /// Per prompt, its own counts and timings.
    pub per_prompt: Vec<(Usage, TimingsBody)>,
}

/// Reads `streams` to their end: the outputs of the `streams.len() * n` choices and the usage.
/// An engine fault is a 500; the deadline a 408 (the requests are aborted either way).
pub async fn collect(
    streams: Vec<RequestStream>,
    n: usize,
    deadline: Option<(Instant, std::time::Duration)>,
) -> Result<Outputs, ApiError> {
    let mut remaining = streams.len();
    let mut outs = vec![ChoiceOutput::default(); remaining * n];
    let mut prompt_logprobs = vec![Vec::new(); remaining];
    let mut embeddings = vec![Vec::new(); remaining];
    let mut usage = UsageBody::default();
    let mut per_prompt = vec![(Usage::default(), TimingsBody::default()); remaining];
    let mut merged = merge(streams);
    let note = access::current();
    while remaining > 0 {
        let Some((p, ev)) = next_event(&mut merged, deadline).await? else {
            return Err(ApiError::Internal(
                "the engine stopped before the request finished".to_string(),
            ));
        };
        match ev {
            Event::Delta {
                choice,
                ids,
                text,
                logprobs,
            } => {
                if let Some(o) = outs.get_mut(p * n + choice) {
                    o.ids.extend(ids);
                    o.text.push_str(&text);
                    o.logprobs.extend(logprobs);
                }
            }
            Event::Finished {
                choice,
                reason,
                stop,
            } => {
                note.finished(reason);
                if let Some(o) = outs.get_mut(p * n + choice) {
                    o.finish = Some(reason);
                    o.stop = stop;
                }
            }
            Event::Done { usage: u, timings } => {
                note.done(u, &timings);
                usage.add(u);
                if let Some(slot) = per_prompt.get_mut(p) {
                    slot.0 = u;
                    slot.1.add(&timings);
                }
                remaining -= 1;
            }
            Event::PromptLogprobs { logprobs } => {
                if let Some(slot) = prompt_logprobs.get_mut(p) {
                    *slot = logprobs;
                }
            }
            Event::Embedding { embedding } => {
                if let Some(slot) = embeddings.get_mut(p) {
                    *slot = embedding;
                }
            }
            Event::Error { message } => return Err(ApiError::Internal(message)),
        }
    }
    Ok(Outputs {
        choices: outs,
        prompt_logprobs,
        embeddings,
        usage,
        per_prompt,
    })
}
