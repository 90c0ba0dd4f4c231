//! `POST /v1/chat/completions`: render the conversation, generate, answer as one JSON
//! object or as a stream of `chat.completion.chunk`s (see [`crate::server::sse`]).

use crate::scheduler::{FinishReason, PromptOutput, TokenLogprob};
use crate::server::app_state::{AppState, Runtime};
use crate::server::body::JsonBody;
use crate::server::error::ApiError;
use crate::server::generation_fields::{Fields, SamplingPlan};
use crate::server::logprobs::chat_entries;
use crate::server::openapi::errors::GenerationErrors;
use crate::server::output_constraint::{self as shapes, Shape};
use crate::server::reply::{call_id, reply_parts, reply_syntax};
use crate::server::session::{Job, Meta, Session};
use crate::server::sse::{json_event, ChunkWriter};
use crate::server::types::{
    ChatChoice, ChatChunkChoice, ChatCompletionChunk, ChatCompletionRequest,
    ChatCompletionResponse, ChatDelta, ChatLogprobs, ChatResponseMessage, FunctionCallDelta,
    TimingsBody, ToolCallDelta, UsageBody,
};
use crate::structured::reasoning::ReasoningSplit;
use crate::structured::syntax::SyntaxTokens;
use crate::structured::tools::{ToolDelta, ToolFormat, ToolStream};
use axum::extract::State;
use axum::response::sse::Event as SseEvent;
use axum::response::{IntoResponse, Response};
use axum::Json;
use std::sync::Arc;

pub(crate) fn fields(r: &ChatCompletionRequest) -> Fields<'_> {
    let mut f = Fields::shared(&r.sampling);
    if let Some(v) = r.max_completion_tokens {
        f.max_tokens = Some(v);
        f.max_tokens_param = "max_completion_tokens";
    }
    f.logprobs = r.logprobs.unwrap_or(false);
    f.top_logprobs = r.top_logprobs;
    f
}

/// Creates a chat completion.
#[utoipa::path(
    post,
    path = "/v1/chat/completions",
    tag = "openai",
    request_body(content = ChatCompletionRequest, content_type = "application/json"),
    responses(
        (status = 200, description = "The completion (JSON), or with `stream: true` a stream of `chat.completion.chunk` events ending with `data: [DONE]`",
            content(
                (ChatCompletionResponse = "application/json"),
                (ChatCompletionChunk = "text/event-stream"),
            )),
        GenerationErrors,
    ),
    security(("bearer" = []))
)]
pub async fn chat_completions(
    State(state): State<AppState>,
    JsonBody(mut req): JsonBody<ChatCompletionRequest>,
) -> Result<Response, ApiError> {
    let session = Session::open(&state, req.model.as_deref()).await?;
    let plan = SamplingPlan::new(&fields(&req), state.settings(), session.info())?;
    let shape = request_shape(&req)?;
    let messages = std::mem::take(&mut req.messages);
    let add_generation_prompt = req.add_generation_prompt.unwrap_or(true);
    let kwargs = req.chat_template_kwargs.take();
    let prompt = session
        .chat_prompt_with(messages, shape, add_generation_prompt, None, kwargs)
        .await?;
    let read_calls = prompt.read_calls;
    let think = prompt.think;
    let (n, logprobs) = (plan.n, plan.logprobs);
    let meta = session.meta("chatcmpl-");
    let rt = Arc::clone(&session.rt);
    let submitted = session.submit(Job {
        plan,
        prompts: vec![prompt.ids],
        prompt_param: "messages",
        constraint: prompt.constraint,
        chat: true,
        prompt_output: PromptOutput::None,
    })?;
    if req.sampling.streams() {
        let readers = (0..n)
            .map(|_| {
                read_calls.map(|r| ToolStream::new(r.format, r.forced, Arc::clone(&rt.tokenizer)))
            })
            .collect();
        let thinkers = (0..n).map(|_| think.map(ReasoningSplit::new)).collect();
        let syntax = reply_syntax(&rt, read_calls);
        return Ok(submitted.stream(ChatWriter {
            meta,
            rt,
            n,
            include_usage: req.sampling.include_usage(),
            readers,
            thinkers,
            syntax,
        }));
    }
    let out = submitted.collect().await?;
    let choices = out
        .choices
        .into_iter()
        .enumerate()
        .map(|(index, o)| {
            let finish = o.finish.unwrap_or(FinishReason::Abort);
            let (reasoning_content, content, tool_calls) =
                reply_parts(&rt, read_calls, think, &o.ids, o.text);
            ChatChoice {
                index,
                finish_reason: finish_reason(finish, tool_calls.is_some()),
                message: ChatResponseMessage {
                    role: "assistant".to_string(),
                    content,
                    reasoning_content,
                    refusal: None,
                    tool_calls,
                },
                logprobs: logprobs.then(|| ChatLogprobs {
                    content: chat_entries(&rt.tokenizer, &o.logprobs),
                    refusal: None,
                }),
            }
        })
        .collect();
    Ok(Json(ChatCompletionResponse {
        id: meta.id,
        object: "chat.completion".to_string(),
        created: meta.created,
        model: meta.model,
        system_fingerprint: meta.fingerprint,
        choices,
        usage: out.usage,
    })
    .into_response())
}

/// What the reply must be: free, JSON (`response_format`), or tools. With both tools and
/// `response_format`, an answer that is not a call follows the format's schema.
pub(crate) fn request_shape(req: &ChatCompletionRequest) -> Result<Shape, ApiError> {
    let json = shapes::response_format(req.sampling.response_format.as_ref())?;
    let tools = shapes::tool_request(
        req.tools.as_deref(),
        req.tool_choice.as_ref(),
        req.parallel_tool_calls,
    )?;
    match (json, tools) {
        (json, None) => Ok(json),
        (Shape::Json { schema, param, .. }, Some(mut t)) => {
            t.answer = Some((schema, param));
            Ok(Shape::Tools(t))
        }
        (_, Some(t)) => Ok(Shape::Tools(t)),
    }
}

/// `finish_reason`: a reply that made calls and ended by itself is `tool_calls`.
fn finish_reason(reason: FinishReason, called: bool) -> String {
    match reason {
        FinishReason::Stop if called => "tool_calls".to_string(),
        other => other.as_str().to_string(),
    }
}

/// Chat's chunks.
struct ChatWriter {
    meta: Meta,
    rt: Arc<Runtime>,
    n: usize,
    /// End with a usage chunk (`stream_options.include_usage`).
    include_usage: bool,
    /// Per choice, the tool-call reader when the request offers tools.
    readers: Vec<Option<ToolStream>>,
    /// Per choice, the reasoning splitter when the template writes `<think>` blocks.
    thinkers: Vec<Option<ReasoningSplit>>,
    /// What the readers need put back into the shown text.
    syntax: SyntaxTokens,
}

impl ChatWriter {
    /// A chunk; the usage chunk carries `tail`.
    fn chunk(
        &self,
        choices: Vec<ChatChunkChoice>,
        tail: Option<(UsageBody, TimingsBody)>,
    ) -> SseEvent {
        let (usage, timings) = tail.unzip();
        json_event(&ChatCompletionChunk {
            id: self.meta.id.clone(),
            object: "chat.completion.chunk".to_string(),
            created: self.meta.created,
            model: self.meta.model.clone(),
            system_fingerprint: self.meta.fingerprint.clone(),
            choices,
            usage,
            timings,
        })
    }
}

impl ChunkWriter for ChatWriter {
    fn opening(&mut self) -> Vec<SseEvent> {
        (0..self.n)
            .map(|index| {
                self.chunk(
                    vec![ChatChunkChoice {
                        index,
                        delta: ChatDelta {
                            role: Some("assistant".to_string()),
                            content: Some(String::new()),
                            reasoning_content: None,
                            tool_calls: None,
                        },
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
        let logprobs = (!lps.is_empty()).then(|| ChatLogprobs {
            content: chat_entries(&self.rt.tokenizer, lps),
            refusal: None,
        });
        Some(self.chunk(
            vec![ChatChunkChoice {
                index: choice,
                delta: ChatDelta {
                    role: None,
                    content: Some(text),
                    reasoning_content: None,
                    tool_calls: None,
                },
                logprobs,
                finish_reason: None,
            }],
            None,
        ))
    }

    fn finished(&mut self, choice: usize, reason: FinishReason) -> SseEvent {
        self.chunk(
            vec![ChatChunkChoice {
                index: choice,
                delta: ChatDelta::default(),
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

    fn deltas(
        &mut self,
        choice: usize,
        ids: &[u32],
        text: String,
        lps: &[TokenLogprob],
    ) -> Vec<SseEvent> {
        let Some(thinker) = self.thinkers.get_mut(choice).and_then(Option::as_mut) else {
            if self.readers.get(choice).is_some_and(Option::is_some) {
                let full = self.syntax.text(ids, &text).into_owned();
                return self.content_chunks(choice, full);
            }
            return self.delta(choice, text, lps).into_iter().collect();
        };
        let full = self.syntax.text(ids, &text);
        let parts = thinker.push(&full);
        let mut out = Vec::new();
        if !parts.reasoning.is_empty() || !lps.is_empty() {
            out.push(self.reasoning_chunk(choice, parts.reasoning, lps));
        }
        out.extend(self.content_chunks(choice, parts.content));
        out
    }

    fn finish_chunks(&mut self, choice: usize, reason: FinishReason) -> Vec<SseEvent> {
        let mut out = Vec::new();
        if let Some(thinker) = self.thinkers.get_mut(choice).and_then(Option::as_mut) {
            let rest = thinker.finish();
            if !rest.reasoning.is_empty() {
                out.push(self.reasoning_chunk(choice, rest.reasoning, &[]));
            }
            out.extend(self.content_chunks(choice, rest.content));
        }
        let Some(reader) = self.readers.get_mut(choice).and_then(Option::as_mut) else {
            out.push(self.finished(choice, reason));
            return out;
        };
        let (rest, _) = reader.finish();
        let called = reader.calls_started() > 0;
        let format = reader.format();
        out.extend(rest.into_iter().map(|d| self.tool_chunk(choice, format, d)));
        out.push(self.chunk(
            vec![ChatChunkChoice {
                index: choice,
                delta: ChatDelta::default(),
                logprobs: None,
                finish_reason: Some(finish_reason(reason, called)),
            }],
            None,
        ));
        out
    }
}

impl ChatWriter {
    /// A chunk of the reply's reasoning (carrying the delta's logprobs when there are any).
    fn reasoning_chunk(&self, choice: usize, text: String, lps: &[TokenLogprob]) -> SseEvent {
        let logprobs = (!lps.is_empty()).then(|| ChatLogprobs {
            content: chat_entries(&self.rt.tokenizer, lps),
            refusal: None,
        });
        self.chunk(
            vec![ChatChunkChoice {
                index: choice,
                delta: ChatDelta {
                    role: None,
                    content: None,
                    reasoning_content: (!text.is_empty()).then_some(text),
                    tool_calls: None,
                },
                logprobs,
                finish_reason: None,
            }],
            None,
        )
    }

    /// Chunks for content that came out of the reasoning splitter: read for tool calls when
    /// the request offers tools (the text has the format's tokens in place already).
    fn content_chunks(&mut self, choice: usize, text: String) -> Vec<SseEvent> {
        if text.is_empty() {
            return Vec::new();
        }
        match self.readers.get_mut(choice).and_then(Option::as_mut) {
            None => self.delta(choice, text, &[]).into_iter().collect(),
            Some(reader) => {
                let parts = reader.push_text(&text);
                let format = reader.format();
                parts
                    .into_iter()
                    .map(|d| self.tool_chunk(choice, format, d))
                    .collect()
            }
        }
    }

    /// One chunk for a piece of a reply read for tool calls: content, a call's header (id,
    /// type and name with empty arguments), or an argument fragment.
    fn tool_chunk(&self, choice: usize, format: ToolFormat, d: ToolDelta) -> SseEvent {
        let (content, call) = match d {
            ToolDelta::Content(t) => (Some(t), None),
            ToolDelta::CallStart { index, name } => (
                None,
                Some(ToolCallDelta {
                    index,
                    id: Some(call_id(format)),
                    kind: Some("function".to_string()),
                    function: FunctionCallDelta {
                        name: Some(name),
                        arguments: Some(String::new()),
                    },
                }),
            ),
            ToolDelta::Arguments { index, fragment } => (
                None,
                Some(ToolCallDelta {
                    index,
                    id: None,
                    kind: None,
                    function: FunctionCallDelta {
                        name: None,
                        arguments: Some(fragment),
                    },
                }),
            ),
        };
        self.chunk(
            vec![ChatChunkChoice {
                index: choice,
                delta: ChatDelta {
                    role: None,
                    content,
                    reasoning_content: None,
                    tool_calls: call.map(|c| vec![c]),
                },
                logprobs: None,
                finish_reason: None,
            }],
            None,
        )
    }
}
