//! Structured output: decoding constrained by a grammar (JSON schemas through llguidance), and
//! the tool-calling formats built on it.
//!
//! - [`vocab`]: the token trie llguidance needs, built from kiln's own tokenizer (each token's
//!   bytes; control tokens behind llguidance's special marker byte, so grammar text can never
//!   match them), and the shared [`Grammars`] factory;
//! - [`rewrite`]: schema keywords the engine refuses, rewritten into equivalent ones it
//!   accepts (`dependencies`, `not: {required}`, `not: {}`, `oneOf` over required lists or
//!   provably disjoint branches ([`disjoint`]), undefined formats, property counts
//!   ([`counts`]), conditions on a tag property ([`conditional`]));
//! - [`grammar`]: a request's constraint (`response_format`, a tool envelope) compiled into a
//!   [`Constraint`], with typed errors naming the unsupported feature;
//! - [`seq`]: one sequence's matcher in the scheduler: mask, accept, end-of-generation rule;
//! - [`bounds`]: what JSON allows but no client wants (endless numbers and whitespace),
//!   narrowed out of each mask, and near `max_tokens` the mask narrowed to what closes;
//! - [`lookahead`]: near `max_tokens`, a string whose pattern does not let it close yet
//!   steered toward the shortest way to its quote;
//! - [`completion`]: near `max_tokens`, the reply steered along the shortest completion
//!   once the budget left comes within what it costs (required keys still to write);
//! - [`phrases`]: the literal text of the schema's patterns, which the steering tries;
//! - [`think`]: thinking before structure: the free `<think>` part in front of a grammar,
//!   and its close forced once the tokens left come within the answer's reserve;
//! - [`tools`]: tool definitions, the model family's tool-call syntax, and parsers that keep
//!   calls out of the content (whole replies and streams).
//!
//! Like `tokenizer` and `chat_template`, this module sits beside the layers: the scheduler
//! runs a [`Constraint`] per sequence, the server builds them; it imports neither.

mod annotations;
pub mod bounds;
pub mod completion;
mod conditional;
mod counts;
mod disjoint;
pub mod error;
pub mod grammar;
pub mod harmony;
pub mod lookahead;
pub mod phrases;
pub mod reasoning;
mod regex_text;
pub mod rewrite;
pub mod seq;
pub mod syntax;
#[cfg(test)]
mod testkit;
pub mod think;
#[cfg(test)]
mod think_tests;
pub mod tools;
pub mod vocab;

pub use error::ConstraintError;
pub use grammar::Constraint;
pub use seq::{MaskStats, SeqConstraint};
pub use vocab::Grammars;
