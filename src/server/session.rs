//! The one way an HTTP request of any API family reaches the engine. A handler converts its
//! request into kiln's internal [`GenerationRequest`]s and its reply out of the engine's
//! events; everything between is here, once:
//!
//! 1. [`Session::open`]: the request counts as in flight (a drain waits for it), the server
//!    must be ready (503 otherwise), the model is picked by the request's `model` (404
//!    `model_not_found` naming the served ones) and leased (loaded first if need be, see
//!    [`crate::server::registry`]); the request's deadline starts.
//! 2. [`Session::chat_prompt`]: a conversation (chat, Responses and Messages all end up as
//!    chat messages) rendered with the model's template and tokenized on the blocking pool,
//!    with the grammar its `response_format` / tools need.
//! 3. [`Session::submit`]: a [`Job`] (checked sampling [`SamplingPlan`] + prompts) becomes one engine
//!    request per prompt; the limits are checked there (context, KV, queue) and a refusal is a
//!    4xx/429/503 naming the request's field. Requests already queued are aborted if a later
//!    one is refused.
//! 4. [`Submitted::collect`] (a whole reply) or [`Submitted::stream`] (server-sent events in
//!    the API's own shape, see [`crate::server::sse`]). Cancellation is the same for all: a
//!    client that leaves drops the engine streams, which aborts their requests at the next
//!    scheduler step; the deadline (`server.request_timeout`) is a 408.

use crate::random::random_id;
use crate::scheduler::{
    EngineInfo, GenerationRequest, PromptOutput, RequestStream, TokenLogprob, Usage,
};
use crate::server::admission;
use crate::server::app_state::{unix_now, AppState, InFlight, Runtime};
use crate::server::error::ApiError;
use crate::server::generation_fields::{Fields, SamplingPlan};
use crate::server::merged_events::{collect, ChoiceOutput};
use crate::server::offload::blocking;
use crate::server::output_constraint::{self as shapes, Shape};
use crate::server::prompt;
use crate::server::sse::{self, ChunkWriter};
use crate::server::types::{ChatMessage, TimingsBody, UsageBody};
use crate::structured::reasoning::ThinkStart;
use crate::structured::tools::CallReading;
use crate::structured::Constraint;
use axum::response::Response;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// One HTTP request's hold on a model, from its start to its last byte.
pub struct Session {
    pub state: AppState,
    pub rt: Arc<Runtime>,
    /// The model id the reply carries.
    pub model: String,
    in_flight: InFlight,
    /// When the request is aborted, and the limit to report.
    deadline: Option<(Instant, Duration)>,
}

/// What every response and chunk of a request repeats.
#[derive(Debug, Clone)]
pub struct Meta {
    pub id: String,
    pub created: u64,
    pub model: String,
    pub fingerprint: String,
}

/// A conversation ready to run: its prompt tokens, the grammar the reply must follow, and the
/// format the reply is read in for tool calls (None: plain content).
pub struct ChatPrompt {
    pub ids: Vec<u32>,
    pub constraint: Option<Arc<Constraint>>,
    pub read_calls: Option<CallReading>,
    /// Where the reply starts with respect to a `<think>` block (None: the template has none).
    pub think: Option<ThinkStart>,
}

/// What to run: the checked sampling settings and one prompt per engine request.
pub struct Job {
    pub plan: SamplingPlan,
    pub prompts: Vec<Vec<u32>>,
    /// The request field the prompt came from (`messages`, `prompt`, `input`), for errors.
    pub prompt_param: &'static str,
    pub constraint: Option<Arc<Constraint>>,
    /// A chat turn: the template's end-of-turn tokens end a choice (unless `ignore_eos`).
    pub chat: bool,
    /// What each request wants from its prompt itself (prompt logprobs).
    pub prompt_output: PromptOutput,
}

impl Session {
    /// Starts a request on `model` (the first served model when None); see the module docs.
    pub async fn open(state: &AppState, model: Option<&str>) -> Result<Session, ApiError> {
        let mut in_flight = state.begin_request();
        let lease = state.lease(model).await?;
        let rt = Arc::clone(lease.runtime());
        let model = lease.id().to_string();
        in_flight.lease = Some(lease);
        let deadline = state
            .settings()
            .request_timeout
            .map(|t| (Instant::now() + t, t));
        Ok(Session {
            state: state.clone(),
            rt,
            model,
            in_flight,
            deadline,
        })
    }

    pub fn info(&self) -> &EngineInfo {
        self.rt.engine.info()
    }

    /// The ids and timestamps of a new reply whose id starts with `prefix`.
    pub fn meta(&self, prefix: &str) -> Meta {
        Meta {
            id: random_id(prefix),
            created: unix_now(),
            model: self.model.clone(),
            fingerprint: self.rt.fingerprint.clone(),
        }
    }

    /// Renders and tokenizes `messages` for `shape` (tools are described to the model and
    /// their grammar compiled), on the blocking pool. With `prefill`, the reply starts with
    /// that text (Anthropic's last assistant turn): after the generation prompt come its
    /// tokens, as plain text.
    pub async fn chat_prompt(
        &self,
        messages: Vec<ChatMessage>,
        shape: Shape,
        add_generation_prompt: bool,
        prefill: Option<String>,
    ) -> Result<ChatPrompt, ApiError> {
        self.chat_prompt_with(messages, shape, add_generation_prompt, prefill, None)
            .await
    }

    /// [`Session::chat_prompt`] with the request's `chat_template_kwargs`.
    pub async fn chat_prompt_with(
        &self,
        messages: Vec<ChatMessage>,
        shape: Shape,
        add_generation_prompt: bool,
        prefill: Option<String>,
        kwargs: Option<serde_json::Map<String, serde_json::Value>>,
    ) -> Result<ChatPrompt, ApiError> {
        let rt = Arc::clone(&self.rt);
        blocking(move || {
            let p = shapes::prepare_chat(&rt, messages, &shape)?;
            let rendered = prompt::render_chat(
                &rt,
                &p.messages,
                add_generation_prompt,
                p.template_tools.as_ref(),
                kwargs.as_ref(),
            )?;
            let mut ids = rendered.ids;
            if let Some(text) = prefill.filter(|t| !t.is_empty()) {
                if text.contains('\0') {
                    return Err(ApiError::bad(
                        "messages",
                        "message content must not contain NUL characters",
                    ));
                }
                ids.extend(rt.tokenizer.encode(&text, false, false));
            }
            let constraint = p
                .grammar
                .map(|g| g.compile(&rt, rendered.think))
                .transpose()?;
            Ok(ChatPrompt {
                ids,
                constraint,
                read_calls: p.read_calls,
                think: rendered.think,
            })
        })
        .await
    }

    /// The engine request for one prompt of `job`.
    fn request(&self, job: &Job, prompt: Vec<u32>) -> Result<GenerationRequest, ApiError> {
        let settings = self.state.settings();
        let mut gen = job
            .plan
            .request(prompt, job.prompt_param, settings, self.info())?;
        gen.constraint = job.constraint.clone();
        gen.prompt_output = job.prompt_output;
        if job.chat && !job.plan.ignore_eos {
            gen.stop_token_ids = self.rt.end_of_turn.clone();
        }
        Ok(gen)
    }

    /// Queues every prompt of `job`; see the module docs.
    /// Runs `prompts` prefill-only (nothing generated, no KV kept after) for what `output`
    /// asks of them (an embedding, prompt logprobs) and collects it; `param` is the request
    /// field the prompts came from.
    pub async fn score(
        self,
        prompts: Vec<Vec<u32>>,
        param: &'static str,
        output: PromptOutput,
    ) -> Result<Collected, ApiError> {
        let fields = Fields {
            max_tokens: Some(0),
            max_tokens_param: param,
            zero_max_tokens: true,
            ..Fields::default()
        };
        let plan = SamplingPlan::new(&fields, self.state.settings(), self.info())?;
        self.submit(Job {
            plan,
            prompts,
            prompt_param: param,
            constraint: None,
            chat: false,
            prompt_output: output,
        })?
        .collect()
        .await
    }

    pub fn submit(self, job: Job) -> Result<Submitted, ApiError> {
        let mut streams = Vec::with_capacity(job.prompts.len());
        // The queue place taken before the body was read goes to the first prompt.
        let mut reserved = admission::take_reservation();
        for prompt in &job.prompts {
            let gen = self.request(&job, prompt.clone())?;
            // On a refusal the streams already queued are dropped, which aborts them.
            let stream = self
                .rt
                .engine
                .submit_reserved(gen, reserved.take())
                .map_err(|e| {
                    ApiError::from_submit(e, job.prompt_param, job.plan.max_tokens_param)
                })?;
            streams.push(stream);
        }
        Ok(Submitted {
            session: self,
            streams,
            n: job.plan.n,
        })
    }
}

/// Engine requests on their way: read them whole or stream them.
pub struct Submitted {
    pub session: Session,
    streams: Vec<RequestStream>,
    /// Choices per prompt.
    n: usize,
}

/// A whole reply: choice `p * n + c` is choice `c` of prompt `p`. The session is held until
/// the response is built.
pub struct Collected {
    pub session: Session,
    pub choices: Vec<ChoiceOutput>,
    /// Per prompt, its prompt logprobs when the job asked ([`Job::prompt_output`]).
    pub prompt_logprobs: Vec<Vec<TokenLogprob>>,
    /// Per prompt, its embedding when the job asked.
    pub embeddings: Vec<Vec<f32>>,
    pub usage: UsageBody,
    /// Per prompt, its own counts and timings.
    pub per_prompt: Vec<(Usage, TimingsBody)>,
}

impl Submitted {
    /// Reads every choice to its end. An engine fault is a 500, the deadline a 408.
    pub async fn collect(self) -> Result<Collected, ApiError> {
        let out = collect(self.streams, self.n, self.session.deadline).await?;
        Ok(Collected {
            session: self.session,
            choices: out.choices,
            prompt_logprobs: out.prompt_logprobs,
            embeddings: out.embeddings,
            usage: out.usage,
            per_prompt: out.per_prompt,
        })
    }

    /// Streams the reply as server-sent events shaped by `writer`.
    pub fn stream<W: ChunkWriter>(self, writer: W) -> Response {
        let Session {
            state,
            in_flight,
            deadline,
            ..
        } = self.session;
        sse::respond(
            self.streams,
            writer,
            sse::StreamSettings {
                n: self.n,
                deadline,
                keep_alive: state.settings().sse_keep_alive,
            },
            in_flight,
        )
    }
}
