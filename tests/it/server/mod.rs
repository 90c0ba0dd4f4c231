//! `kiln serve` as a process, over real TCP: the OpenAI API's shapes (chat, completions,
//! streaming, logprobs, stop strings, n), every bad input of ../shared/guide/RELIABILITY.md
//! items 1-9 as a table, auth, limits, disconnects, draining on SIGTERM and an engine fault.

mod admission;
mod api;
mod faults;
mod gemma;
mod harness;
mod http;
mod lifecycle;
mod limits;
mod observability;
mod prompt;
mod reliability;
