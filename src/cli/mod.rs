//! One file per subcommand: argument struct (clap) and `run`; `logging` sets up tracing;
//! `llama_flags` reads llama-server's command line for `kiln serve`.

pub mod bench;
pub mod bench_ceilings;
pub mod bench_observer;
pub mod bench_serve;
pub mod bench_spec;
pub mod generate;
pub mod inspect;
pub mod llama_flags;
pub mod logging;
pub mod quantize;
pub mod render_template;
pub mod serve;
pub mod tokenize;
pub mod top;
