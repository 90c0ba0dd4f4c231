//! Constrained decoding: the token trie built from kiln's tokenizer, masks over random logits
//! (no model: every path through the grammar must give valid JSON), and the scheduler with
//! the real model (schema-valid output at temperature 1, batch invariance for a free request
//! beside constrained ones, seeded reproducibility, `length` when max_tokens cuts it short).

use crate::common::default_model;
use kiln::config::{Config, KvBudget};
use kiln::engine::sampling::Rng;
use kiln::gguf::GgufFile;
use kiln::scheduler::sampling::{SampleScratch, Sampler};
use kiln::scheduler::setup::{start, Loaded};
use kiln::scheduler::{Event, FinishReason, GenerationRequest, NoopObserver, RequestStream};
use kiln::structured::seq::Step;
use kiln::structured::{Constraint, ConstraintError, Grammars, SeqConstraint};
use kiln::tokenizer::Tokenizer;
use serde_json::{json, Value};
use std::sync::{Arc, OnceLock};

fn tokenizer() -> Arc<Tokenizer> {
    static T: OnceLock<Arc<Tokenizer>> = OnceLock::new();
    T.get_or_init(|| {
        let f = GgufFile::open(default_model()).expect("model opens");
        Arc::new(Tokenizer::from_gguf(&f).expect("tokenizer loads"))
    })
    .clone()
}

fn grammars() -> &'static Grammars {
    static G: OnceLock<Grammars> = OnceLock::new();
    G.get_or_init(|| Grammars::new(tokenizer()).expect("token trie builds"))
}

fn person_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 12},
            "age": {"type": "integer", "minimum": 0, "maximum": 120},
            "role": {"enum": ["admin", "user", "guest"]},
            "tags": {"type": "array", "items": {"type": "string", "maxLength": 6}, "minItems": 1, "maxItems": 3}
        },
        "required": ["name", "age", "role", "tags"],
        "additionalProperties": false
    })
}

/// Checks what `person_schema` asks for (the Python tests use a full validator).
fn check_person(v: &Value) {
    let o = v.as_object().expect("an object");
    assert_eq!(o.len(), 4, "{v}");
    assert!(o["name"].as_str().unwrap().chars().count() <= 12, "{v}");
    let age = o["age"].as_i64().expect("integer age");
    assert!((0..=120).contains(&age), "{v}");
    assert!(["admin", "user", "guest"].contains(&o["role"].as_str().unwrap()));
    let tags = o["tags"].as_array().unwrap();
    assert!((1..=3).contains(&tags.len()), "{v}");
}

#[test]
fn control_tokens_sit_behind_the_special_marker() {
    let tok = tokenizer();
    let words = kiln::structured::vocab::token_words(&tok);
    assert_eq!(words.len(), tok.n_vocab());
    let im_end = tok
        .vocab()
        .id(b"<|im_end|>")
        .expect("SmolLM2 has <|im_end|>");
    assert_eq!(words[im_end as usize][0], 0xff);
    assert_eq!(&words[im_end as usize][1..], b"<|im_end|>");
    let brace = tok.encode("{", false, false);
    assert_eq!(words[brace[0] as usize], b"{");
}

#[test]
fn a_sentencepiece_vocabulary_builds_a_trie_and_a_schema_walks() {
    // Byte tokens (<0x41>) share their bytes with text tokens (A): the trie must cope.
    let f = GgufFile::open(crate::common::shared_file(
        "conformance/tokenizer/ggml-vocab-llama-spm.gguf",
    ))
    .unwrap();
    let tok = Arc::new(Tokenizer::from_gguf(&f).unwrap());
    let g = Grammars::new(Arc::clone(&tok)).expect("trie builds");
    let schema = json!({"type": "object", "properties": {"k": {"enum": ["A b", "é€"]}, "n": {"type": "integer", "minimum": 0, "maximum": 99}}, "required": ["k", "n"], "additionalProperties": false});
    let c = Constraint::json_schema(&g, &schema, "p", "x").unwrap();
    for seed in 0..5 {
        let text = random_walk_with(&tok, &c, seed);
        let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{text}: {e}"));
        assert!(["A b", "é€"].contains(&v["k"].as_str().unwrap()), "{text}");
        assert!((0..=99).contains(&v["n"].as_i64().unwrap()), "{text}");
    }
}

#[test]
fn random_logits_under_the_mask_always_give_valid_json() {
    let g = grammars();
    let tok = tokenizer();
    let c = Constraint::json_schema(g, &person_schema(), "response_format", "person").unwrap();
    let mut rng = Rng::new(7);
    let mut scratch = SampleScratch::new();
    for sample in 0..20 {
        let mut seq = SeqConstraint::new(c.start());
        let mut sampler = Sampler::new(&Default::default(), sample, &[]);
        let mut out = Vec::new();
        let done = loop {
            assert!(
                out.len() < 400,
                "no end after 400 tokens: {}",
                tok.decode(&out)
            );
            seq.compute_mask();
            let logits: Vec<f32> = (0..tok.n_vocab())
                .map(|_| rng.next_f64() as f32 * 8.0)
                .collect();
            let id = sampler
                .sample_masked(&logits, seq.allowed(), &mut scratch)
                .id;
            if tok.is_eog(id) {
                break true;
            }
            out.push(id);
            match seq.commit(id) {
                Step::Continue => {}
                Step::Complete => break true,
                Step::Failed(e) => panic!("{e}"),
            }
        };
        assert!(done);
        let text = tok.decode(&out);
        let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{text}: {e}"));
        check_person(&v);
    }
}

#[test]
fn unsupported_schema_features_are_named() {
    let g = grammars();
    let schema = json!({"type": "object", "properties": {"a": {"type": "string"}}, "if": {"required": ["a"]}, "then": {"required": ["b"]}});
    match Constraint::json_schema(g, &schema, "response_format.json_schema.schema", "x") {
        Err(e @ ConstraintError::Unsupported { .. }) => {
            assert_eq!(e.param(), Some("response_format.json_schema.schema"));
            assert!(e.to_string().contains("if"), "{e}");
        }
        other => panic!("expected Unsupported, got {other:?}"),
    }
    assert!(matches!(
        Constraint::json_schema(g, &json!(42), "p", "x"),
        Err(ConstraintError::Invalid { .. })
    ));
}

fn engine() -> Loaded {
    let mut cfg = Config {
        model_path: default_model(),
        threads: 1,
        kv_cache: KvBudget::Positions(8192),
        ..Config::default()
    };
    cfg.scheduler.max_num_seqs = 8;
    start(&cfg, None, Arc::new(NoopObserver)).expect("engine starts")
}

fn chat(tok: &Tokenizer, user: &str) -> Vec<u32> {
    let text = format!(
        "<|im_start|>system\nYou are a helpful assistant. Answer in JSON.<|im_end|>\n<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n"
    );
    tok.encode(&text, false, true)
}

fn events(mut s: RequestStream) -> impl Iterator<Item = Event> {
    std::iter::from_fn(move || s.blocking_recv())
}

fn run(s: RequestStream) -> (String, Vec<u32>, FinishReason) {
    let (mut text, mut ids, mut reason) = (String::new(), Vec::new(), None);
    for ev in events(s) {
        match ev {
            Event::Delta {
                text: t, ids: i, ..
            } => {
                text.push_str(&t);
                ids.extend(i);
            }
            Event::Finished { reason: r, .. } => reason = Some(r),
            Event::Done { .. } => break,
            Event::Error { message } => panic!("{message}"),
        }
    }
    (text, ids, reason.expect("finished"))
}

fn constrained(prompt: Vec<u32>, seed: u64, c: &Arc<Constraint>) -> GenerationRequest {
    let mut r = GenerationRequest::new(prompt, 200);
    r.params.temperature = 1.0;
    r.params.seed = Some(seed);
    r.constraint = Some(Arc::clone(c));
    r
}

#[test]
fn scheduler_constrained_sampling_is_valid_invariant_and_reproducible() {
    let l = engine();
    let g = Grammars::new(Arc::clone(&l.tokenizer)).unwrap();
    let c =
        Arc::new(Constraint::json_schema(&g, &person_schema(), "response_format", "p").unwrap());
    let prompt = chat(&l.tokenizer, "Describe a user of a web site.");
    // A free greedy request, alone and beside constrained ones.
    let free_prompt = chat(&l.tokenizer, "Write a haiku about a kiln.");
    let mut free = GenerationRequest::new(free_prompt, 40);
    free.params.temperature = 0.0;
    let solo = run(l.engine.submit(free.clone()).unwrap());
    let streams: Vec<RequestStream> = (0..6)
        .map(|s| l.engine.submit(constrained(prompt.clone(), s, &c)).unwrap())
        .collect();
    let beside = run(l.engine.submit(free).unwrap());
    assert_eq!(
        solo, beside,
        "a constrained neighbour changed a free request"
    );
    let outs: Vec<_> = streams.into_iter().map(run).collect();
    for (text, _, reason) in &outs {
        assert_eq!(*reason, FinishReason::Stop, "{text}");
        let v: Value = serde_json::from_str(text).unwrap_or_else(|e| panic!("{text}: {e}"));
        check_person(&v);
    }
    // The same seed alone gives the same tokens as in the batch.
    let again = run(l.engine.submit(constrained(prompt.clone(), 3, &c)).unwrap());
    assert_eq!(again, outs[3]);
    // n = 3 choices follow the grammar each.
    let mut multi = constrained(prompt.clone(), 11, &c);
    multi.n = 3;
    let mut texts = vec![String::new(); 3];
    for ev in events(l.engine.submit(multi).unwrap()) {
        match ev {
            Event::Delta { choice, text, .. } => texts[choice].push_str(&text),
            Event::Done { .. } => break,
            Event::Error { message } => panic!("{message}"),
            _ => {}
        }
    }
    for t in &texts {
        check_person(&serde_json::from_str(t).unwrap_or_else(|e| panic!("{t}: {e}")));
    }
    // Cut short by max_tokens: finish reason `length`.
    let mut short = constrained(prompt, 5, &c);
    short.max_tokens = 4;
    let (text, _, reason) = run(l.engine.submit(short).unwrap());
    assert_eq!(reason, FinishReason::Length, "{text}");
    assert!(serde_json::from_str::<Value>(&text).is_err());
}

/// Whether the grammar accepts exactly `text` (its tokens one by one under the masks, then
/// an end-of-generation token allowed).
fn accepts(c: &Constraint, text: &str) -> bool {
    let tok = tokenizer();
    let mut seq = SeqConstraint::new(c.start());
    for id in tok.encode(text, false, false) {
        seq.compute_mask();
        match seq.allowed() {
            Some(bits)
                if bits
                    .get(id as usize / 32)
                    .is_some_and(|w| w & (1 << (id % 32)) != 0) => {}
            _ => return false,
        }
        match seq.commit(id) {
            Step::Continue => {}
            Step::Complete => return true,
            Step::Failed(_) => return false,
        }
    }
    seq.compute_mask();
    let eog = tok.eog_ids()[0];
    seq.allowed().is_some_and(|b| {
        b.get(eog as usize / 32)
            .is_some_and(|w| w & (1 << (eog % 32)) != 0)
    })
}

#[test]
fn number_ranges_are_exact_or_refused() {
    let g = grammars();
    let c = Constraint::json_schema(
        g,
        &json!({"type": "number", "minimum": 0.5, "exclusiveMaximum": 24}),
        "p",
        "x",
    )
    .unwrap();
    for t in ["0.5", "1", "23.99", "7.25"] {
        assert!(accepts(&c, t), "{t}");
    }
    for t in ["0.4", "24", "24.0", "-1", "0", "1e3"] {
        assert!(!accepts(&c, t), "{t}");
    }
    assert!(Constraint::json_schema(
        g,
        &json!({"type": "number", "minimum": 0.01, "exclusiveMaximum": 1}),
        "p",
        "x"
    )
    .is_ok());
    // llguidance 1.9 would let 0 through here: refused, naming where.
    let bad = json!({"type": "object", "properties": {"s": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 0.2}}});
    match Constraint::json_schema(g, &bad, "p", "x") {
        Err(ConstraintError::Unsupported { detail, .. }) => {
            assert!(detail.contains("/properties/s"), "{detail}")
        }
        other => panic!("expected Unsupported, got {other:?}"),
    }
}

#[test]
fn tool_formats_are_detected_from_real_templates() {
    use kiln::structured::tools::ToolFormat;
    let dir = crate::common::shared_dir().join("conformance/chat-templates");
    let cases = [
        (
            "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use",
            ToolFormat::Hermes,
        ),
        ("Qwen-Qwen2.5-7B-Instruct", ToolFormat::Hermes),
        ("Qwen-QwQ-32B", ToolFormat::Hermes),
        ("meta-llama-Llama-3.2-3B-Instruct", ToolFormat::Llama3),
        ("meta-llama-Llama-3.3-70B-Instruct", ToolFormat::Llama3),
        ("mistralai-Mistral-Nemo-Instruct-2407", ToolFormat::Mistral),
        ("Mistral-Small-3.2-24B-Instruct-2506", ToolFormat::Mistral),
        (
            "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B",
            ToolFormat::Generic,
        ),
    ];
    for (name, want) in cases {
        let src = crate::common::read_to_string(&dir.join(format!("{name}.jinja")));
        assert_eq!(ToolFormat::detect(&src), want, "{name}");
    }
    // The default model's own template knows nothing of tools.
    let f = GgufFile::open(default_model()).unwrap();
    let tpl = f
        .get_str("tokenizer.chat_template")
        .unwrap()
        .expect("SmolLM2 has a chat template");
    assert_eq!(ToolFormat::detect(tpl), ToolFormat::Generic);
}

#[test]
fn native_templates_render_the_tools_kiln_passes() {
    use kiln::chat_template::ChatTemplate;
    let dir = crate::common::shared_dir().join("conformance/chat-templates");
    let tools = json!([{"type": "function", "function": {"name": "get_weather", "description": "Weather now.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]);
    for name in [
        "Qwen-Qwen2.5-7B-Instruct",
        "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use",
        "meta-llama-Llama-3.3-70B-Instruct",
        "mistralai-Mistral-Nemo-Instruct-2407",
    ] {
        let src = crate::common::read_to_string(&dir.join(format!("{name}.jinja")));
        let t = ChatTemplate::new(&src).unwrap_or_else(|e| panic!("{name}: {e}"));
        // A call made earlier, with arguments as the object kiln hands templates.
        let ctx = json!({
            "messages": [
                {"role": "user", "content": "Weather in Paris?"},
                {"role": "assistant", "content": null, "tool_calls": [{"id": "abc123def", "type": "function",
                    "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
                {"role": "tool", "tool_call_id": "abc123def", "content": "18 C, sunny"},
            ],
            "tools": tools, "add_generation_prompt": true, "bos_token": "<s>", "eos_token": "</s>",
        });
        let out = t
            .render(&ctx, None)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(out.contains("get_weather"), "{name}: {out}");
        assert!(out.contains("18 C, sunny"), "{name}: {out}");
        assert!(out.contains("Paris"), "{name}: {out}");
    }
}

/// Samples from random logits under `c` until the grammar ends; the decoded text.
fn random_walk(c: &Constraint, seed: u64) -> String {
    random_walk_with(&tokenizer(), c, seed)
}

fn random_walk_with(tok: &Tokenizer, c: &Constraint, seed: u64) -> String {
    let mut rng = Rng::new(seed);
    let mut scratch = SampleScratch::new();
    let mut seq = SeqConstraint::new(c.start());
    let mut sampler = Sampler::new(&Default::default(), seed, &[]);
    let mut out = Vec::new();
    loop {
        assert!(out.len() < 600, "no end: {}", tok.decode(&out));
        seq.compute_mask();
        let logits: Vec<f32> = (0..tok.n_vocab())
            .map(|_| rng.next_f64() as f32 * 8.0)
            .collect();
        let id = sampler
            .sample_masked(&logits, seq.allowed(), &mut scratch)
            .id;
        if tok.is_eog(id) {
            break;
        }
        out.push(id);
        match seq.commit(id) {
            Step::Continue => {}
            Step::Complete => break,
            Step::Failed(e) => panic!("{e}"),
        }
    }
    tok.decode(&out)
}

#[test]
fn forced_calls_in_each_native_syntax_parse_and_validate() {
    use kiln::structured::tools::native::{forced_call, ForcedCall};
    use kiln::structured::tools::{parse_reply, ToolDef, ToolFormat};
    let g = grammars();
    let tok = tokenizer();
    let tools = [
        ToolDef {
            name: "get_weather".into(),
            description: None,
            parameters: json!({"type": "object", "properties": {"unit": {"enum": ["c", "f"]}, "days": {"type": "integer", "minimum": 1, "maximum": 7}}, "required": ["unit", "days"], "additionalProperties": false}),
        },
        ToolDef {
            name: "book".into(),
            description: None,
            parameters: json!({"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"], "additionalProperties": false}),
        },
    ];
    let offered: Vec<&ToolDef> = tools.iter().collect();
    for (format, template) in [
        (ToolFormat::Hermes, ""),
        (ToolFormat::Llama3, ""),
        (ToolFormat::Mistral, ""),
        (ToolFormat::Mistral, "[ARGS]"),
    ] {
        for parallel in [false, true] {
            let c = match forced_call(format, &offered, parallel, &tok, template).unwrap() {
                ForcedCall::Schema(s) => Constraint::json_schema(g, &s, "tools", "f").unwrap(),
                ForcedCall::Lark(l) => Constraint::lark(g, &l, "tools", "f")
                    .unwrap_or_else(|e| panic!("{format:?}: {e}\n{l}")),
            };
            for seed in 0..6 {
                let text = random_walk(&c, seed);
                let reply = parse_reply(format, &text, true);
                assert!(!reply.calls.is_empty(), "{format:?}: {text}");
                assert!(parallel || reply.calls.len() == 1, "{format:?}: {text}");
                assert_eq!(reply.content, "", "{format:?}: {text}");
                for call in &reply.calls {
                    assert!(call.complete, "{format:?}: {text}");
                    let args: Value = serde_json::from_str(&call.arguments)
                        .unwrap_or_else(|e| panic!("{format:?}: {text}: {e}"));
                    match call.name.as_deref() {
                        Some("get_weather") => {
                            assert!(["c", "f"].contains(&args["unit"].as_str().unwrap()));
                            assert!((1..=7).contains(&args["days"].as_i64().unwrap()));
                        }
                        Some("book") => assert!(args["ok"].is_boolean()),
                        other => panic!("{format:?}: unknown name {other:?} in {text}"),
                    }
                }
            }
        }
    }
}
