//! Tokenizer speed on the default model (SmolLM2, byte-level BPE, `smollm` pre-tokenizer):
//! encode throughput on long English text, encode time of a short chat prompt, decode time
//! per token (whole-sequence and streaming).
//!
//! Run: `cargo bench --bench tokenizer` (needs models/SmolLM2-135M-Instruct.Q4_1.gguf).
//!
//! Times are the benchmark thread's CPU time (CLOCK_THREAD_CPUTIME_ID, 64-bit Linux), not wall
//! time: tokenization is single-threaded, so on an idle machine the two agree, and on a
//! shared one CPU time still measures the tokenizer rather than its neighbours.

use criterion::measurement::{Measurement, ValueFormatter, WallTime};
use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use kiln::gguf::GgufFile;
use kiln::tokenizer::Tokenizer;

const PARAGRAPH: &str = "The history of computing is a story of ideas building on ideas. Early \
mechanical calculators, such as those designed by Pascal and Leibniz, could add and multiply \
numbers with gears and wheels. In the nineteenth century, Charles Babbage imagined an \
analytical engine that could be programmed with punched cards, and Ada Lovelace wrote what \
many consider the first algorithm intended for a machine. It's remarkable that they'd \
already seen, in 1843, how such engines might compose music or manipulate symbols! ";

const CHAT: &str = "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by \
Hugging Face<|im_end|>\n<|im_start|>user\nWhat is the capital of France?<|im_end|>\n\
<|im_start|>assistant\n";

fn load() -> Tokenizer {
    let path = std::env::var("KILN_MODEL").unwrap_or_else(|_| {
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/models/SmolLM2-135M-Instruct.Q4_1.gguf"
        )
        .into()
    });
    let f = GgufFile::open(&path)
        .unwrap_or_else(|e| panic!("{path}: {e} (run scripts/fetch-model.sh)"));
    Tokenizer::from_gguf(&f).expect("tokenizer")
}

/// CPU time of the calling thread, in nanoseconds (formatted like wall time).
struct ThreadCpu {
    wall: WallTime,
}

#[repr(C)]
struct Timespec {
    tv_sec: i64,
    tv_nsec: i64,
}

extern "C" {
    fn clock_gettime(clock_id: i32, tp: *mut Timespec) -> i32;
}

/// Linux's CLOCK_THREAD_CPUTIME_ID.
const CLOCK_THREAD_CPUTIME_ID: i32 = 3;

fn thread_cpu_ns() -> u64 {
    let mut ts = Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one `struct timespec` (two 64-bit fields on 64-bit Linux,
    // matching `Timespec`) through the pointer, which points to a live local.
    let rc = unsafe { clock_gettime(CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID) failed");
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

impl Measurement for ThreadCpu {
    type Intermediate = u64;
    type Value = u64;
    fn start(&self) -> u64 {
        thread_cpu_ns()
    }
    fn end(&self, start: u64) -> u64 {
        thread_cpu_ns().saturating_sub(start)
    }
    fn add(&self, a: &u64, b: &u64) -> u64 {
        a + b
    }
    fn zero(&self) -> u64 {
        0
    }
    fn to_f64(&self, v: &u64) -> f64 {
        *v as f64
    }
    fn formatter(&self) -> &dyn ValueFormatter {
        self.wall.formatter()
    }
}

fn golden_long_context() -> String {
    let shared = std::env::var("KILN_SHARED")
        .unwrap_or_else(|_| concat!(env!("CARGO_MANIFEST_DIR"), "/../shared").into());
    let path = format!("{shared}/golden/smollm2-135m-instruct-q4_1/tokenization.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let doc: serde_json::Value = serde_json::from_str(&text).expect("tokenization.json");
    doc["cases"]
        .as_array()
        .and_then(|cases| cases.iter().find(|c| c["name"] == "long_context"))
        .and_then(|c| c["text"].as_str())
        .expect("long_context case")
        .to_string()
}

fn bench(c: &mut Criterion<ThreadCpu>) {
    let tok = load();
    let long: String = PARAGRAPH.repeat(200); // ~100 KB, one paragraph repeated
    let mut g = c.benchmark_group("tokenizer");
    g.throughput(Throughput::Bytes(long.len() as u64));
    g.bench_function("encode_long_english", |b| {
        b.iter(|| tok.encode(black_box(&long), false, false))
    });
    g.throughput(Throughput::Elements(1));
    g.bench_function("encode_short_chat_prompt", |b| {
        b.iter(|| tok.encode(black_box(CHAT), false, true))
    });
    g.bench_function("encode_short_string", |b| {
        b.iter(|| tok.encode(black_box("Hello, world! How are you today?"), false, false))
    });
    // Natural prose without repetition (the golden long_context case, ~5 KB), so the
    // per-call word cache only helps as much as real text lets it.
    let prose = golden_long_context();
    g.throughput(Throughput::Bytes(prose.len() as u64));
    g.bench_function("encode_prose_5k", |b| {
        b.iter(|| tok.encode(black_box(&prose), false, false))
    });
    let ids = tok.encode(&long, false, false);
    let n = ids.len() as u64;
    g.throughput(Throughput::Elements(n));
    g.bench_function("decode_per_token", |b| {
        b.iter(|| tok.decode(black_box(&ids)))
    });
    g.bench_function("stream_decode_per_token", |b| {
        b.iter(|| {
            let mut d = tok.stream_decoder();
            let mut len = 0;
            for &id in black_box(&ids) {
                len += d.push(id).len();
            }
            len + d.flush().len()
        })
    });
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().with_measurement(ThreadCpu { wall: WallTime });
    targets = bench
}
criterion_main!(benches);
