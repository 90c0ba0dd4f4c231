//! The decode step allocates nothing once warmed up: a counting global allocator wraps the
//! system one (its own test binary, so no other test's allocations interfere).

use kiln::engine::runner::Runner;
use kiln::engine::token_choice::argmax;
use kiln::engine::{BatchLimits, LogitsWanted, Model, SeqInput};
use std::alloc::{GlobalAlloc, Layout, System};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

struct Counting;

static ALLOCS: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards every call to the system allocator unchanged; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// The counter is global, so this binary's tests run one at a time (each holds the lock).
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn model_path() -> PathBuf {
    let p = match std::env::var_os("KILN_MODEL") {
        Some(m) => PathBuf::from(m),
        None => {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("models/SmolLM2-135M-Instruct.Q4_1.gguf")
        }
    };
    assert!(
        p.is_file(),
        "default model {} is missing: run `scripts/fetch-model.sh`",
        p.display()
    );
    p
}

#[test]
fn decode_step_allocates_nothing_after_warm_up() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let model = Model::load(model_path(), 2).expect("load model");
    let counted = decode_allocs(&model);
    assert_eq!(counted, 0, "the decode step allocated");
}

/// The hybrid families' recurrent mixers (the gated DeltaNet, Mamba2, the short convolution)
/// on their tiny proof models (kiln's synth writer, F16, the llama vocabulary of
/// ../shared/conformance): their decode steps allocate nothing either.
#[test]
fn hybrid_decode_steps_allocate_nothing_after_warm_up() {
    use kiln::engine::synth::{build, proof_variants, Quant};
    use kiln::gguf::GgufFile;
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let shared = std::env::var_os("KILN_SHARED")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared"));
    let vocab_path = shared.join("conformance/tokenizer/ggml-vocab-llama-spm.gguf");
    assert!(
        vocab_path.is_file(),
        "{} is missing (set KILN_SHARED)",
        vocab_path.display()
    );
    let vocab = GgufFile::open(&vocab_path).expect("open the vocabulary");
    for name in ["qwen35", "granitehybrid", "lfm2"] {
        let v = proof_variants()
            .into_iter()
            .find(|v| v.name == name)
            .expect("the proof variant");
        let bytes = build(&v.spec, v.name, &vocab, Quant::F16, 1)
            .expect("write")
            .to_bytes()
            .expect("serialize");
        let file = GgufFile::from_bytes(bytes).expect("parse");
        let model = Model::from_gguf(&file, 2).expect("load the proof model");
        let counted = decode_allocs(&model);
        assert_eq!(counted, 0, "{name}: the decode step allocated");
    }
}

/// Allocations over 20 decode steps of two sequences (after 4 steps of warm-up).
fn decode_allocs(model: &Model) -> usize {
    let limits = BatchLimits {
        max_tokens: 64,
        max_seqs: 4,
        max_logit_rows: 4,
    };
    let mut runner = Runner::new(model, limits, 512).expect("runner");
    let prompt: Vec<u32> = (0..20).map(|i| 300 + i * 11).collect();
    let steps = 24;
    // Two sequences decoding together; all KV room reserved up front.
    let mut tables = [runner.new_seq(), runner.new_seq()];
    let mut last = [0u32; 2];
    for (t, l) in tables.iter_mut().zip(last.iter_mut()) {
        runner
            .feed(t, 0, &prompt, 64, LogitsWanted::Last, |_, row| {
                *l = argmax(row)
            })
            .expect("prefill");
        t.reserve(prompt.len() + steps + 1).expect("reserve");
    }
    // The calling thread is the team's worker 0; the other workers spin or park between steps.
    let counted = {
        let mut counted = 0;
        for step in 0..steps {
            let pos = prompt.len() + step;
            let before = ALLOCS.load(Ordering::Relaxed);
            let batch = [
                SeqInput {
                    tokens: std::slice::from_ref(&last[0]),
                    start_pos: pos,
                    table: &tables[0],
                    logits: LogitsWanted::Last,
                },
                SeqInput {
                    tokens: std::slice::from_ref(&last[1]),
                    start_pos: pos,
                    table: &tables[1],
                    logits: LogitsWanted::Last,
                },
            ];
            let logits = runner.forward(&batch).expect("decode");
            let next = [
                argmax(logits.last(0).expect("row")),
                argmax(logits.last(1).expect("row")),
            ];
            let after = ALLOCS.load(Ordering::Relaxed);
            last = next;
            // The first steps warm up (lazy statics, per-thread state).
            if step >= 4 {
                counted += after - before;
            }
        }
        counted
    };
    println!("alloc: {counted} allocations in {} decode steps", steps - 4);
    counted
}
