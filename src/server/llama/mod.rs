//! llama-server's native routes, so the tools written for it (editor plugins, scripts, UIs)
//! work against kiln unchanged: `POST /completion`, `POST /infill` ([`infill`]), `GET /props`,
//! `GET /slots` and `POST /apply-template` ([`props`]).
//!
//! Nothing here runs its own path: a request is converted once ([`convert`]: llama-server's
//! fields and prompt forms into kiln's sampling fields and token ids) and goes through the
//! same [`Session`] as the OpenAI routes (model choice, limits, queue, cancellation); the
//! engine's events are written back in llama-server's shapes ([`stream`]: `data: {...}`
//! events, the last with `stop: true` and the totals, no `[DONE]`).

pub mod convert;
pub mod infill;
pub mod props;
mod stream;

use crate::scheduler::{FinishReason, PromptOutput, TokenLogprob, Usage};
use crate::server::app_state::{AppState, Runtime};
use crate::server::body::JsonBody;
use crate::server::error::ApiError;
use crate::server::generation_fields::SamplingPlan;
use crate::server::offload::blocking;
use crate::server::openapi::errors::GenerationErrors;
use crate::server::output_constraint::{compile_json, Shape};
use crate::server::session::{Job, Session};
use crate::server::types::llama::{
    GenerationSettings, LlamaCompletionReply, LlamaCompletionRequest, LlamaCompletionResult,
    LlamaTimings, TokenProbs, TopProb,
};
use crate::server::types::TimingsBody;
use crate::tokenizer::Tokenizer;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use convert::{Converted, SAMPLERS};
use serde_json::Value;
use std::sync::Arc;

/// Generates a completion for each prompt, in llama-server's `/completion` shape (an array
/// when there are several results).
#[utoipa::path(
    post,
    path = "/completion",
    tag = "llama-server",
    request_body(content = LlamaCompletionRequest, content_type = "application/json"),
    responses(
        (status = 200, description = "The result (JSON; an array for several prompts or `n_cmpl`), or with `stream: true` `data: {...}` events, the last with `stop: true`",
            content(
                (LlamaCompletionReply = "application/json"),
                (LlamaCompletionResult = "text/event-stream"),
            )),
        GenerationErrors,
    ),
    security(("bearer" = []))
)]
pub async fn completion(
    State(state): State<AppState>,
    JsonBody(req): JsonBody<LlamaCompletionRequest>,
) -> Result<Response, ApiError> {
    convert::refuse_unsupported(&req)?;
    let pieces = convert::prompts(&req.prompt)?;
    let session = Session::open(&state, req.model.as_deref()).await?;
    let rt = Arc::clone(&session.rt);
    let prompts = blocking(move || {
        pieces
            .iter()
            .map(|p| convert::tokenize(&rt.tokenizer, p, "prompt"))
            .collect::<Result<Vec<_>, _>>()
    })
    .await?;
    generate(session, req, prompts).await
}

/// Runs `prompts` with `req`'s settings and answers in llama-server's shape (`/completion`
/// and `/infill`).
pub(crate) async fn generate(
    session: Session,
    req: LlamaCompletionRequest,
    prompts: Vec<Vec<u32>>,
) -> Result<Response, ApiError> {
    let state = session.state.clone();
    let rt = Arc::clone(&session.rt);
    let converted = {
        let (rt, req) = (Arc::clone(&rt), req.clone());
        blocking(move || Converted::new(&req, &rt.tokenizer)).await?
    };
    let plan = SamplingPlan::new(&converted.fields(&req), state.settings(), session.info())?;
    let constraint = match req.json_schema.clone() {
        Some(schema) => {
            let rt = Arc::clone(&rt);
            blocking(move || {
                compile_json(
                    &rt,
                    &Shape::Json {
                        schema,
                        param: "json_schema",
                        label: "json_schema".to_string(),
                    },
                )
            })
            .await?
        }
        None => None,
    };
    let settings = Arc::new(settings_of(
        &plan,
        &req,
        &session.model,
        rt.engine.info().n_ctx,
    ));
    let prompt_output = if plan.max_tokens == Some(0) {
        PromptOutput::Logprobs { top: 0 }
    } else {
        PromptOutput::None
    };
    let n = plan.n;
    let shared = Shared {
        rt: Arc::clone(&rt),
        model: session.model.clone(),
        settings,
        prompt_lens: prompts.iter().map(Vec::len).collect(),
        prompt_texts: prompts.iter().map(|p| spelled(&rt.tokenizer, p)).collect(),
        n,
        n_probs: plan.params.top_logprobs,
        return_tokens: req.return_tokens.unwrap_or(false),
    };
    let submitted = session.submit(Job {
        plan,
        prompts,
        prompt_param: "prompt",
        constraint,
        chat: false,
        prompt_output,
    })?;
    if req.stream.unwrap_or(false) {
        return Ok(submitted.stream(stream::LlamaWriter::new(shared)));
    }
    let out = submitted.collect().await?;
    let results: Vec<Value> = out
        .choices
        .into_iter()
        .enumerate()
        .map(|(i, o)| {
            let (usage, timings) = &out.per_prompt[i / n];
            let mut r = shared.last(i, o.finish, o.stop, o.ids.len(), *usage, timings);
            r.has_new_line = Some(o.text.contains('\n'));
            r.content = o.text;
            if shared.return_tokens {
                r.tokens = o.ids;
            }
            r.completion_probabilities = shared.probs(&o.logprobs);
            pick_fields(
                serde_json::to_value(r).unwrap_or(Value::Null),
                req.response_fields.as_deref(),
            )
        })
        .collect();
    let body = match <[Value; 1]>::try_from(results) {
        Ok([one]) => one,
        Err(many) => Value::Array(many),
    };
    Ok(Json(body).into_response())
}

/// What every result of a request shares.
pub(crate) struct Shared {
    rt: Arc<Runtime>,
    model: String,
    settings: Arc<GenerationSettings>,
    /// Per prompt: its token count and its text as the model read it.
    prompt_lens: Vec<usize>,
    prompt_texts: Vec<String>,
    /// Results per prompt.
    n: usize,
    n_probs: usize,
    return_tokens: bool,
}

impl Shared {
    /// The final result of choice `index` (content and tokens set by the caller).
    fn last(
        &self,
        index: usize,
        finish: Option<FinishReason>,
        stop: Option<String>,
        predicted: usize,
        usage: Usage,
        timings: &TimingsBody,
    ) -> LlamaCompletionResult {
        let p = index / self.n.max(1);
        let evaluated = self.prompt_lens.get(p).copied().unwrap_or(0);
        let stop_type = match (finish, &stop) {
            (Some(FinishReason::Stop), Some(_)) => "word",
            (Some(FinishReason::Stop), None) => "eos",
            (Some(FinishReason::Length), _) => "limit",
            _ => "none",
        };
        LlamaCompletionResult {
            index,
            id_slot: -1,
            stop: true,
            model: Some(self.model.clone()),
            tokens_predicted: Some(predicted),
            tokens_evaluated: Some(evaluated),
            generation_settings: Some((*self.settings).clone()),
            prompt: self.prompt_texts.get(p).cloned(),
            has_new_line: Some(false),
            // kiln refuses a prompt that does not fit rather than cutting it; a completion
            // that ran into the end of the context is reported as llama-server does.
            truncated: Some(
                finish == Some(FinishReason::Length)
                    && evaluated + predicted >= self.settings.n_ctx,
            ),
            stop_type: Some(stop_type.to_string()),
            stopping_word: Some(stop.unwrap_or_default()),
            tokens_cached: Some(usage.cached_tokens),
            timings: Some(llama_timings(usage, predicted, timings)),
            ..LlamaCompletionResult::default()
        }
    }

    /// `completion_probabilities` for `lps` (None without `n_probs`).
    fn probs(&self, lps: &[TokenLogprob]) -> Option<Vec<TokenProbs>> {
        (self.n_probs > 0).then(|| token_probs(&self.rt.tokenizer, lps))
    }
}

/// Tokens as text, control tokens spelled out (llama-server's `prompt`: what the model read).
fn spelled(tok: &Tokenizer, ids: &[u32]) -> String {
    let bytes: Vec<u8> = ids
        .iter()
        .flat_map(|&i| tok.token_to_piece(i).to_vec())
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

fn piece(tok: &Tokenizer, id: u32) -> (String, Vec<u8>) {
    let bytes = tok.token_to_piece(id).to_vec();
    (String::from_utf8_lossy(&bytes).into_owned(), bytes)
}

/// llama-server's `completion_probabilities`.
fn token_probs(tok: &Tokenizer, lps: &[TokenLogprob]) -> Vec<TokenProbs> {
    lps.iter()
        .map(|lp| {
            let (token, bytes) = piece(tok, lp.id);
            TokenProbs {
                id: lp.id,
                token,
                bytes,
                logprob: lp.logprob,
                top_logprobs: lp
                    .top
                    .iter()
                    .map(|&(id, logprob)| {
                        let (token, bytes) = piece(tok, id);
                        TopProb {
                            id,
                            token,
                            bytes,
                            logprob,
                        }
                    })
                    .collect(),
            }
        })
        .collect()
}

/// llama-server's timings from kiln's: the prompt phase runs from the first engine step to
/// the first token, the generation phase from there to the end.
fn llama_timings(usage: Usage, predicted: usize, t: &TimingsBody) -> LlamaTimings {
    let first = t.ttft_ms.unwrap_or(t.duration_ms);
    let prompt_ms = (first - t.queue_ms).max(0.0);
    let predicted_ms = (t.duration_ms - first).max(0.0);
    let prompt_n = usage.prompt_tokens.saturating_sub(usage.cached_tokens);
    let per = |ms: f64, n: usize| if n > 0 { ms / n as f64 } else { 0.0 };
    let rate = |ms: f64, n: usize| if ms > 0.0 { n as f64 * 1e3 / ms } else { 0.0 };
    LlamaTimings {
        cache_n: usage.cached_tokens,
        prompt_n,
        prompt_ms,
        prompt_per_token_ms: per(prompt_ms, prompt_n),
        prompt_per_second: rate(prompt_ms, prompt_n),
        predicted_n: predicted,
        predicted_ms,
        predicted_per_token_ms: per(predicted_ms, predicted),
        predicted_per_second: rate(predicted_ms, predicted),
    }
}

/// The settings a request runs with, in llama-server's names.
fn settings_of(
    plan: &SamplingPlan,
    req: &LlamaCompletionRequest,
    model: &str,
    n_ctx: usize,
) -> GenerationSettings {
    let p = &plan.params;
    GenerationSettings {
        n_ctx,
        n_predict: plan.max_tokens.map_or(-1, |m| m as i64),
        model: model.to_string(),
        seed: p.seed.map_or(-1, |s| s as i64),
        temperature: p.temperature,
        top_k: p.top_k,
        top_p: p.top_p,
        min_p: p.min_p,
        typical_p: 1.0,
        repeat_penalty: p.repetition_penalty,
        presence_penalty: p.presence_penalty,
        frequency_penalty: p.frequency_penalty,
        mirostat: 0,
        stop: plan.stop.clone(),
        ignore_eos: plan.ignore_eos,
        stream: req.stream.unwrap_or(false),
        n_probs: p.top_logprobs,
        samplers: SAMPLERS.iter().map(|s| s.to_string()).collect(),
    }
}

/// llama-server's `response_fields`: only the named fields; `a/b` lifts a nested field to
/// the top under the name `a/b`; a field the result lacks is left out.
fn pick_fields(result: Value, fields: Option<&[String]>) -> Value {
    let Some(fields) = fields.filter(|f| !f.is_empty()) else {
        return result;
    };
    let mut out = serde_json::Map::new();
    for f in fields {
        let found = f.split('/').try_fold(&result, |v, key| v.get(key));
        if let Some(v) = found {
            out.insert(f.clone(), v.clone());
        }
    }
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn response_fields_pick_and_lift() {
        let r = json!({"content": "x", "timings": {"predicted_n": 3}, "stop": true});
        let picked = pick_fields(
            r.clone(),
            Some(&[
                "content".into(),
                "timings/predicted_n".into(),
                "nope".into(),
            ]),
        );
        assert_eq!(picked, json!({"content": "x", "timings/predicted_n": 3}));
        assert_eq!(pick_fields(r.clone(), None), r);
        assert_eq!(pick_fields(r.clone(), Some(&[])), r);
    }

    #[test]
    fn timings_split_at_the_first_token() {
        let usage = Usage {
            prompt_tokens: 10,
            cached_tokens: 4,
            completion_tokens: 5,
            ..Usage::default()
        };
        let t = TimingsBody {
            queue_ms: 1.0,
            ttft_ms: Some(13.0),
            duration_ms: 63.0,
            itl_ms: Vec::new(),
        };
        let l = llama_timings(usage, 5, &t);
        assert_eq!((l.cache_n, l.prompt_n, l.predicted_n), (4, 6, 5));
        assert_eq!((l.prompt_ms, l.predicted_ms), (12.0, 50.0));
        assert_eq!(l.predicted_per_second, 100.0);
        assert_eq!(l.prompt_per_token_ms, 2.0);
    }
}
