//! `POST /v1/completions`: raw prompts (text or token ids, one or many), generate, answer as
//! one JSON object or as a stream of `text_completion` chunks.

use crate::scheduler::{FinishReason, PromptOutput, TokenLogprob};
use crate::server::app_state::{AppState, Runtime};
use crate::server::body::JsonBody;
use crate::server::error::ApiError;
use crate::server::generation_fields::{Fields, SamplingPlan};
use crate::server::logprobs::CompletionLogprobBuilder;
use crate::server::offload::blocking;
use crate::server::openapi::errors::GenerationErrors;
use crate::server::raw_prompt::{tokenize, MAX_PROMPTS};
use crate::server::session::{Job, Meta, Session};
use crate::server::sse::{json_event, ChunkWriter};
use crate::server::types::{
    CompletionChoice, CompletionRequest, CompletionResponse, TimingsBody, UsageBody,
};
use axum::extract::State;
use axum::response::sse::Event as SseEvent;
use axum::response::{IntoResponse, Response};
use axum::Json;
use std::sync::Arc;

pub(crate) fn fields(r: &CompletionRequest) -> Fields<'_> {
    let mut f = Fields::shared(&r.sampling);
    f.zero_max_tokens = r.echo.unwrap_or(false);
    f.logprobs = r.logprobs.is_some();
    f.top_logprobs = r.logprobs;
    f.top_logprobs_param = "logprobs";
    f
}

/// Creates a completion for each prompt.
#[utoipa::path(
    post,
    path = "/v1/completions",
    tag = "openai",
    request_body(content = CompletionRequest, content_type = "application/json"),
    responses(
        (status = 200, description = "The completion (JSON), or with `stream: true` a stream of `text_completion` chunks ending with `data: [DONE]`",
            content(
                (CompletionResponse = "application/json"),
                (CompletionResponse = "text/event-stream"),
            )),
        GenerationErrors,
    ),
    security(("bearer" = []))
)]
pub async fn completions(
    State(state): State<AppState>,
    JsonBody(mut req): JsonBody<CompletionRequest>,
) -> Result<Response, ApiError> {
    let session = Session::open(&state, req.model.as_deref()).await?;
    if req.suffix.as_deref().is_some_and(|s| !s.is_empty()) {
        return Err(ApiError::bad(
            "suffix",
            "suffix is not supported by this model",
        ));
    }
    let plan = SamplingPlan::new(&fields(&req), state.settings(), session.info())?;
    if let Some(b) = req.best_of.filter(|&b| b != plan.n as i64) {
        return Err(ApiError::bad(
            "best_of",
            format!(
                "best_of must equal n ({}), got {b}: kiln does not rank candidates",
                plan.n
            ),
        ));
    }
    let echo = req.echo.unwrap_or(false);
    // With `echo`, `logprobs` covers the prompt too (computed in the same prefill), and
    // `max_tokens` 0 scores the prompt without generating.
    let prompt_logprobs = echo && plan.logprobs;
    let prompt_output = if prompt_logprobs || plan.max_tokens == Some(0) {
        PromptOutput::Logprobs {
            top: plan.params.top_logprobs,
        }
    } else {
        PromptOutput::None
    };
    let prompts = std::mem::take(&mut req.prompt).into_prompts();
    if prompts.len() > MAX_PROMPTS {
        return Err(ApiError::bad(
            "prompt",
            format!(
                "at most {MAX_PROMPTS} prompts per request, got {}",
                prompts.len()
            ),
        ));
    }
    let shape =
        crate::server::output_constraint::response_format(req.sampling.response_format.as_ref())?;
    let (tokenized, constraint) = {
        let rt = Arc::clone(&session.rt);
        blocking(move || {
            let c = crate::server::output_constraint::compile_json(&rt, &shape)?;
            Ok((tokenize(&rt.tokenizer, prompts, "prompt")?, c))
        })
        .await?
    };
    let (n, logprobs) = (plan.n, plan.logprobs);
    let echoes: Vec<String> = tokenized
        .iter()
        .map(|t| if echo { t.text.clone() } else { String::new() })
        .collect();
    let meta = session.meta("cmpl-");
    let rt = Arc::clone(&session.rt);
    let first_ids: Vec<Option<u32>> = tokenized.iter().map(|t| t.ids.first().copied()).collect();
    let submitted = session.submit(Job {
        plan,
        prompts: tokenized.into_iter().map(|t| t.ids).collect(),
        prompt_param: "prompt",
        constraint,
        chat: false,
        prompt_output,
    })?;
    if req.sampling.streams() {
        let choices = echoes.len() * n;
        return Ok(submitted.stream(CompletionWriter {
            meta,
            rt,
            n,
            include_usage: req.sampling.include_usage(),
            echoes,
            first_ids,
            prompt_logprobs,
            logprobs: (0..choices)
                .map(|_| logprobs.then(|| CompletionLogprobBuilder::new(0)))
                .collect(),
        }));
    }
    let out = submitted.collect().await?;
    let choices = out
        .choices
        .into_iter()
        .enumerate()
        .map(|(index, o)| {
            let echo = &echoes[index / n];
            let logprobs = logprobs.then(|| {
                let mut b = CompletionLogprobBuilder::new(0);
                if prompt_logprobs {
                    let scores = &out.prompt_logprobs[index / n];
                    b.push_prompt(&rt.tokenizer, first_ids[index / n], scores);
                }
                b.continue_at(echo.chars().count());
                b.push(&rt.tokenizer, &o.logprobs);
                b.out
            });
            CompletionChoice {
                index,
                text: format!("{echo}{}", o.text),
                logprobs,
                finish_reason: Some(o.finish.unwrap_or(FinishReason::Abort).as_str().to_string()),
            }
        })
        .collect();
    Ok(Json(CompletionResponse {
        id: meta.id,
        object: "text_completion".to_string(),
        created: meta.created,
        model: meta.model,
        system_fingerprint: meta.fingerprint,
        choices,
        usage: Some(out.usage),
        timings: None,
    })
    .into_response())
}

/// Completions' chunks.
struct CompletionWriter {
    meta: Meta,
    rt: Arc<Runtime>,
    n: usize,
    /// End with a usage chunk (`stream_options.include_usage`).
    include_usage: bool,
    /// Per prompt: the text echoed before the first token (empty without `echo`).
    echoes: Vec<String>,
    /// Per prompt: its first token (the echoed prompt's logprobs start with it).
    first_ids: Vec<Option<u32>>,
    /// The echo goes out with the prompt's logprobs, once the engine has them.
    prompt_logprobs: bool,
    /// Per choice, with `logprobs`.
    logprobs: Vec<Option<CompletionLogprobBuilder>>,
}

impl CompletionWriter {
    /// A chunk; the usage chunk carries `tail`.
    fn chunk(
        &self,
        choices: Vec<CompletionChoice>,
        tail: Option<(UsageBody, TimingsBody)>,
    ) -> SseEvent {
        let (usage, timings) = tail.unzip();
        json_event(&CompletionResponse {
            id: self.meta.id.clone(),
            object: "text_completion".to_string(),
            created: self.meta.created,
            model: self.meta.model.clone(),
            system_fingerprint: self.meta.fingerprint.clone(),
            choices,
            usage,
            timings,
        })
    }
}

impl ChunkWriter for CompletionWriter {
    fn opening(&mut self) -> Vec<SseEvent> {
        let n = self.n;
        if self.prompt_logprobs {
            return Vec::new();
        }
        (0..self.echoes.len() * n)
            .filter(|&c| !self.echoes[c / n].is_empty())
            .map(|index| {
                self.chunk(
                    vec![CompletionChoice {
                        index,
                        text: self.echoes[index / n].clone(),
                        logprobs: None,
                        finish_reason: None,
                    }],
                    None,
                )
            })
            .collect()
    }

    fn delta(&mut self, choice: usize, text: String, lps: &[TokenLogprob]) -> Option<SseEvent> {
        if text.is_empty() && lps.is_empty() {
            return None;
        }
        let tok = Arc::clone(&self.rt.tokenizer);
        let logprobs = self
            .logprobs
            .get_mut(choice)
            .and_then(Option::as_mut)
            .map(|b| {
                b.push(&tok, lps);
                b.take()
            });
        Some(self.chunk(
            vec![CompletionChoice {
                index: choice,
                text,
                logprobs,
                finish_reason: None,
            }],
            None,
        ))
    }

    fn prompt_logprobs(&mut self, prompt: usize, scores: &[TokenLogprob]) -> Vec<SseEvent> {
        if !self.prompt_logprobs {
            return Vec::new();
        }
        let tok = Arc::clone(&self.rt.tokenizer);
        let echo = self.echoes.get(prompt).cloned().unwrap_or_default();
        let first = self.first_ids.get(prompt).copied().flatten();
        (prompt * self.n..(prompt + 1) * self.n)
            .map(|index| {
                let logprobs = self
                    .logprobs
                    .get_mut(index)
                    .and_then(Option::as_mut)
                    .map(|b| {
                        b.push_prompt(&tok, first, scores);
                        b.continue_at(echo.chars().count());
                        b.take()
                    });
                self.chunk(
                    vec![CompletionChoice {
                        index,
                        text: echo.clone(),
                        logprobs,
                        finish_reason: None,
                    }],
                    None,
                )
            })
            .collect()
    }

    fn finished(&mut self, choice: usize, reason: FinishReason) -> SseEvent {
        self.chunk(
            vec![CompletionChoice {
                index: choice,
                text: String::new(),
                logprobs: None,
                finish_reason: Some(reason.as_str().to_string()),
            }],
            None,
        )
    }

    fn closing(&mut self, usage: UsageBody, timings: TimingsBody) -> Vec<SseEvent> {
        if !self.include_usage {
            return Vec::new();
        }
        vec![self.chunk(Vec::new(), Some((usage, timings)))]
    }
}
