//! Continuous batching: requests in, token streams out.
//!
//! - [`handle`]: the cloneable [`EngineHandle`] the async side holds (validate, route, submit)
//!   and the [`RequestStream`] of [`Event`]s each request gets back;
//! - [`engine_config`]: how the engine is laid out ([`EngineConfig`]);
//! - [`worker`]: one OS thread per engine worker that plans and runs steps;
//! - [`state`]: the scheduling policy as a pure state machine (budgets, chunked prefill, FCFS
//!   admission, preemption, forks), tested without a model;
//! - [`prefix_cache`], [`stop`], [`sampling`]: the parts a step uses per sequence;
//! - [`observer`]: the plain numbers handed to monitoring;
//! - [`setup`]: builds the engine from the configuration.

pub mod constrain;
pub mod drain;
pub mod engine_config;
pub mod fault;
pub mod handle;
pub mod observer;
pub mod prefix_cache;
pub mod request;
pub mod sampling;
pub mod setup;
pub mod speculative;
pub mod state;
pub mod stop;
mod worker;

pub use engine_config::{EngineConfig, MAX_UNREAD_EVENTS};
pub use handle::{EngineHandle, EngineInfo, Load, RequestStream};
pub use observer::{
    CacheTier, NoopObserver, Observer, RequestStats, StepKind, StepStats, TierStats,
};
pub use request::{
    Event, FinishReason, GenerationRequest, Pooling, PoolingType, PromptOutput, SubmitError,
    Timings, TokenLogprob, Usage,
};
pub use sampling::SamplingParams;
