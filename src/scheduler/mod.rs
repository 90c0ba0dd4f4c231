//! Continuous batching: requests in, token streams out. See `state` for the scheduling policy
//! and `worker` for the engine thread that carries it out.

pub mod prefix_cache;
pub mod state;
pub mod stop;
