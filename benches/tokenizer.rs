//! Tokenizer speed on the default model (SmolLM2, byte-level BPE, `smollm` pre-tokenizer):
//! encode throughput on long English text, encode time of a short chat prompt, decode time
//! per token (whole-sequence and streaming).
//!
//! Run: `cargo bench --bench tokenizer` (needs models/SmolLM2-135M-Instruct.Q4_1.gguf).

use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use kiln::engine::gguf::GgufFile;
use kiln::engine::tokenizer::Tokenizer;

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

fn bench(c: &mut Criterion) {
    let tok = load();
    let long: String = PARAGRAPH.repeat(200); // ~100 KB
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

criterion_group!(benches, bench);
criterion_main!(benches);
