//! kiln's integration tests, built as one binary. They use the real default model and the
//! reference data in ../shared (override with KILN_SHARED); a missing file fails loudly.

mod arch_proof;
mod chat_templates;
mod common;
mod engine;
mod engine_faults;
mod gemma_golden;
mod gguf;
mod gguf_inspect;
mod gguf_malformed;
mod golden;
mod kv_cache;
mod kv_q8_fidelity;
mod mask_thread;
mod prefix_tiers;
mod quant_proof;
mod quantize;
mod scheduler;
mod server;
mod spec_draft;
mod speculative;
mod state_checkpoints;
mod structured;
mod structured_tools;
mod tokenizer;
