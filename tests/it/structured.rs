//! Constrained decoding: the token trie built from kiln's tokenizer, masks over random logits
//! (no model: every path through the grammar must give valid JSON), and the scheduler with
//! the real model (schema-valid output at temperature 1, batch invariance for a free request
//! beside constrained ones, seeded reproducibility, `length` when max_tokens cuts it short).

use crate::common::default_model;
use kiln::config::{Config, KvBudget};
use kiln::engine::token_choice::Rng;
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

pub(crate) fn grammars() -> &'static Grammars {
    static G: OnceLock<Grammars> = OnceLock::new();
    G.get_or_init(|| Grammars::new(tokenizer()).expect("token trie builds"))
}

pub(crate) fn person_schema() -> Value {
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
        let mut seq = c.sequence();
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
                .expect("the mask leaves a candidate")
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

/// Samples under `seq` from random logits that favour `favoured` tokens by `bias` (a model
/// stuck on digits or blank space); the text, or None when no end came in `budget` tokens.
fn biased_walk(
    mut seq: SeqConstraint,
    favoured: &dyn Fn(&[u8]) -> bool,
    bias: f32,
    seed: u64,
    budget: usize,
) -> Option<String> {
    let tok = tokenizer();
    let words = kiln::structured::vocab::token_words(&tok);
    let mut rng = Rng::new(seed);
    let mut scratch = SampleScratch::new();
    let mut sampler = Sampler::new(&Default::default(), seed, &[]);
    let mut out = Vec::new();
    while out.len() < budget {
        seq.compute_mask();
        let logits: Vec<f32> = (0..tok.n_vocab())
            .map(|i| rng.next_f64() as f32 * 2.0 + if favoured(&words[i]) { bias } else { 0.0 })
            .collect();
        let id = sampler
            .sample_masked(&logits, seq.allowed(), &mut scratch)
            .expect("the mask leaves a candidate")
            .id;
        if tok.is_eog(id) {
            return Some(tok.decode(&out));
        }
        out.push(id);
        match seq.commit(id) {
            Step::Continue => {}
            Step::Complete => return Some(tok.decode(&out)),
            Step::Failed(e) => panic!("{e}"),
        }
    }
    None
}

/// A reply near its `max_tokens` is steered to close: a walk that favours letters (a string
/// that never ends, keys added forever) still ends valid within its budget, while the same
/// walk without a budget runs past it.
#[test]
fn a_reply_near_max_tokens_closes_its_json() {
    let g = grammars();
    let schema = json!({
        "type": "object",
        "properties": {
            "title": {"type": "string"},
            "tags": {"type": "array", "items": {"type": "string"}},
            "meta": {"type": "object", "additionalProperties": {"type": "string"}}
        },
        "required": ["title", "tags", "meta"]
    });
    let c = Constraint::json_schema(g, &schema, "response_format", "open")
        .unwrap()
        .closing();
    let letters = |w: &[u8]| !w.is_empty() && w.iter().all(u8::is_ascii_alphabetic);
    for seed in 0..4 {
        let budget = 120;
        assert!(
            biased_walk(c.sequence(), &letters, 12.0, seed, budget).is_none(),
            "seed {seed}: ended without closing"
        );
        let text = biased_walk(
            c.sequence().with_budget(budget),
            &letters,
            12.0,
            seed,
            budget,
        )
        .unwrap_or_else(|| panic!("seed {seed}: not closed within {budget} tokens"));
        let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{text}: {e}"));
        for key in ["title", "tags", "meta"] {
            assert!(v.get(key).is_some(), "{key} missing in {text}");
        }
    }
}

/// The numbers of a JSON text as written (outside strings).
fn json_numbers(text: &str) -> Vec<String> {
    let (mut out, mut cur, mut in_str, mut esc) = (Vec::new(), String::new(), false, false);
    for c in text.chars() {
        if in_str {
            (in_str, esc) = match (esc, c) {
                (true, _) => (true, false),
                (false, '\\') => (true, true),
                (false, '"') => (false, false),
                _ => (true, false),
            };
            continue;
        }
        if c.is_ascii_digit() || "-+.eE".contains(c) {
            cur.push(c);
            continue;
        }
        if !cur.is_empty() {
            out.push(std::mem::take(&mut cur));
        }
        in_str = c == '"';
    }
    out.extend((!cur.is_empty()).then_some(cur));
    out
}

/// Issue 21: at temperature 1.0 a reply could run to max_tokens inside one number or one run
/// of blank space. Under the bounds a sampler that prefers digits (or whitespace) still ends
/// within a few dozen tokens, every number round-trips through f64, and the grammar alone
/// (no bounds) shows the runaway the bounds prevent.
#[test]
fn numbers_and_blank_runs_end_under_the_bounds() {
    let g = grammars();
    let schema = json!({
        "type": "object",
        "properties": {
            "x": {"type": "number"},
            "n": {"type": "integer"},
            "note": {"type": "string", "maxLength": 40},
            "xs": {"type": "array", "items": {"type": "number"}, "maxItems": 3}
        },
        "required": ["x", "n", "note", "xs"],
        "additionalProperties": false
    });
    let c = Constraint::json_schema(g, &schema, "response_format", "nums").unwrap();
    let digits = |w: &[u8]| !w.is_empty() && w.iter().all(u8::is_ascii_digit);
    let blank = |w: &[u8]| !w.is_empty() && w.iter().all(|b| matches!(b, b' ' | b'\n' | b'\t'));
    for seed in 0..6 {
        let unbounded = biased_walk(SeqConstraint::new(c.start()), &digits, 12.0, seed, 150);
        assert!(
            unbounded.is_none(),
            "the grammar alone ended: {unbounded:?}"
        );
        for favoured in [&digits as &dyn Fn(&[u8]) -> bool, &blank] {
            let text = biased_walk(c.sequence(), favoured, 12.0, seed, 150)
                .unwrap_or_else(|| panic!("seed {seed}: no end in 150 tokens"));
            let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{text}: {e}"));
            assert!(v.is_object(), "{text}");
            for num in json_numbers(&text) {
                let (mantissa, exp) = num.split_once(['e', 'E']).unwrap_or((num.as_str(), ""));
                let sig = mantissa
                    .chars()
                    .filter(char::is_ascii_digit)
                    .skip_while(|&d| d == '0')
                    .count();
                assert!(sig <= 17, "{num} in {text}");
                assert!(
                    exp.chars().filter(char::is_ascii_digit).count() <= 3,
                    "{num}"
                );
            }
            assert!(
                !text.contains(&" ".repeat(33)) && !text.contains(&"\\n".repeat(33)),
                "{text}"
            );
        }
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
            Event::PromptLogprobs { .. } | Event::Embedding { .. } => {}
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
    let mut seq = c.sequence();
    let ids = tok.encode(text, false, false);
    for (i, &id) in ids.iter().enumerate() {
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
            // Complete: nothing more may follow.
            Step::Complete => return i + 1 == ids.len(),
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
    walk_after_with(tok, c, "", seed)
}

/// Two tools with small argument schemas.
fn weather_tools() -> [kiln::structured::tools::ToolDef; 2] {
    use kiln::structured::tools::ToolDef;
    [
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
    ]
}

/// Checks a parsed call of one of `weather_tools` (`text` is the reply, for messages).
fn check_weather_call(call: &kiln::structured::tools::PartialCall, text: &str) {
    assert!(call.complete, "{text}");
    let args: Value =
        serde_json::from_str(&call.arguments).unwrap_or_else(|e| panic!("{text}: {e}"));
    match call.name.as_deref() {
        Some("get_weather") => {
            assert!(
                ["c", "f"].contains(&args["unit"].as_str().unwrap()),
                "{text}"
            );
            assert!((1..=7).contains(&args["days"].as_i64().unwrap()), "{text}");
        }
        Some("book") => assert!(args["ok"].is_boolean(), "{text}"),
        other => panic!("unknown name {other:?} in {text}"),
    }
}

fn compile(c: kiln::structured::tools::native::ForcedCall) -> Constraint {
    use kiln::structured::tools::native::ForcedCall;
    match c {
        ForcedCall::Schema(s) => Constraint::json_schema(grammars(), &s, "tools", "f").unwrap(),
        ForcedCall::Lark(l) => Constraint::lark(grammars(), &l, "tools", "f", true)
            .unwrap_or_else(|e| panic!("{e}\n{l}")),
    }
}

const NATIVE: [(kiln::structured::tools::ToolFormat, &str); 6] = [
    (kiln::structured::tools::ToolFormat::Hermes, ""),
    (kiln::structured::tools::ToolFormat::Llama3, ""),
    (kiln::structured::tools::ToolFormat::Mistral, ""),
    (kiln::structured::tools::ToolFormat::Mistral, "[ARGS]"),
    (kiln::structured::tools::ToolFormat::Phi4, ""),
    (kiln::structured::tools::ToolFormat::Granite, ""),
];

#[test]
fn forced_calls_in_each_native_syntax_parse_and_validate() {
    use kiln::structured::tools::native::forced_call;
    use kiln::structured::tools::{parse_reply, ToolDef};
    let tok = tokenizer();
    let tools = weather_tools();
    let offered: Vec<&ToolDef> = tools.iter().collect();
    for (format, template) in NATIVE {
        for parallel in [false, true] {
            let c = compile(forced_call(format, &offered, parallel, &tok, template).unwrap());
            for seed in 0..6 {
                let text = random_walk(&c, seed);
                let reply = parse_reply(format, &text, true);
                assert!(!reply.calls.is_empty(), "{format:?}: {text}");
                assert!(parallel || reply.calls.len() == 1, "{format:?}: {text}");
                assert_eq!(reply.content, "", "{format:?}: {text}");
                for call in &reply.calls {
                    check_weather_call(call, &text);
                }
            }
        }
    }
}

/// A valid call of `book` in `format`'s syntax (kiln's JSON layout).
fn book_call(format: kiln::structured::tools::ToolFormat, template: &str) -> &'static str {
    use kiln::structured::tools::ToolFormat;
    match (format, template) {
        (ToolFormat::Hermes, _) => {
            "<tool_call>\n{\"name\": \"book\", \"arguments\": {\"ok\": true}}\n</tool_call>"
        }
        (ToolFormat::Llama3, _) => "{\"name\": \"book\", \"parameters\": {\"ok\": true}}",
        (ToolFormat::Mistral, "") => {
            "[TOOL_CALLS][{\"name\": \"book\", \"arguments\": {\"ok\": true}}]"
        }
        (ToolFormat::Mistral, _) => "[TOOL_CALLS]book[ARGS]{\"ok\": true}",
        (ToolFormat::Phi4, _) => {
            "<|tool_call|>{\"name\": \"book\", \"arguments\": {\"ok\": true}}<|/tool_call|>"
        }
        (ToolFormat::Granite, _) => {
            "<|tool_call|>[{\"name\": \"book\", \"arguments\": {\"ok\": true}}]"
        }
        (ToolFormat::Generic, _) => unreachable!("no native syntax"),
    }
}

/// The text up to and including where a call starts in `call` (its opening tag, or Llama 3's
/// opening brace).
fn call_opening(call: &str) -> &str {
    let end = ["<tool_call>", "[TOOL_CALLS]", "<|tool_call|>"]
        .iter()
        .find_map(|t| call.find(t).map(|i| i + t.len()))
        .unwrap_or(1);
    &call[..end]
}

/// Samples from random logits under `c` after forcing `prefix`'s tokens; the whole text.
fn walk_after(c: &Constraint, prefix: &str, seed: u64) -> String {
    walk_after_with(&tokenizer(), c, prefix, seed)
}

fn walk_after_with(tok: &Tokenizer, c: &Constraint, prefix: &str, seed: u64) -> String {
    let mut rng = Rng::new(seed);
    let mut scratch = SampleScratch::new();
    let mut seq = c.sequence();
    let mut sampler = Sampler::new(&Default::default(), seed, &[]);
    let mut out = tok.encode(prefix, false, false);
    for &id in &out {
        seq.compute_mask();
        assert_eq!(seq.commit(id), Step::Continue, "{prefix:?} is refused");
    }
    loop {
        assert!(out.len() < 600, "no end: {}", tok.decode(&out));
        seq.compute_mask();
        let logits: Vec<f32> = (0..tok.n_vocab())
            .map(|_| rng.next_f64() as f32 * 8.0)
            .collect();
        let id = sampler
            .sample_masked(&logits, seq.allowed(), &mut scratch)
            .expect("the mask leaves a candidate")
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
fn auto_allows_an_answer_or_calls_and_a_started_call_is_valid() {
    use kiln::structured::tools::native::auto_call;
    use kiln::structured::tools::{parse_reply, ToolDef, ToolFormat};
    let tok = tokenizer();
    let tools = weather_tools();
    let offered: Vec<&ToolDef> = tools.iter().collect();
    for (format, template) in NATIVE {
        for parallel in [false, true] {
            let c = compile(auto_call(format, &offered, parallel, &tok, template, None).unwrap());
            let call = book_call(format, template);
            let what = format!("{format:?} {template} parallel={parallel}");
            assert!(accepts(&c, "It is sunny in Paris today."), "{what}");
            assert!(accepts(&c, call), "{what}: {call}");
            assert!(!accepts(&c, &call.replace("true", "\"yes\"")), "{what}");
            assert!(!accepts(&c, &call.replace("book", "boom")), "{what}");
            if format != ToolFormat::Llama3 {
                // Text may come first; the call still has to be valid.
                assert!(accepts(&c, &format!("Let me check. {call}")), "{what}");
                assert!(!accepts(
                    &c,
                    &format!("Let me check. {}", call.replace("true", "1"))
                ));
            }
            assert_eq!(
                accepts(&c, &format!("{call}{call}")),
                parallel
                    && (matches!(format, ToolFormat::Hermes | ToolFormat::Phi4)
                        || !template.is_empty()),
                "{what}"
            );
            // Once a call starts, whatever is sampled is a valid call.
            for seed in 0..4 {
                let text = walk_after(&c, call_opening(call), seed);
                let reply = parse_reply(format, &text, true);
                assert!(!reply.calls.is_empty(), "{what}: {text}");
                assert!(parallel || reply.calls.len() == 1, "{what}: {text}");
                for call in &reply.calls {
                    check_weather_call(call, &text);
                }
            }
        }
    }
}

#[test]
fn auto_with_response_format_answers_in_the_schema_or_calls() {
    use kiln::structured::tools::native::auto_call;
    use kiln::structured::tools::{generic, parse_reply, ToolChoice, ToolDef, ToolFormat};
    let tok = tokenizer();
    let tools = weather_tools();
    let offered: Vec<&ToolDef> = tools.iter().collect();
    let person = person_schema();
    let answer = r#"{"name": "Ann", "age": 30, "role": "user", "tags": ["a"]}"#;
    for (format, template) in NATIVE {
        let c = compile(auto_call(format, &offered, true, &tok, template, Some(&person)).unwrap());
        let what = format!("{format:?} {template}");
        assert!(accepts(&c, answer), "{what}");
        assert!(accepts(&c, book_call(format, template)), "{what}");
        assert!(!accepts(&c, "It is sunny."), "{what}");
        assert!(!accepts(&c, r#"{"name": "Ann"}"#), "{what}");
        let reply = parse_reply(format, answer, true);
        assert_eq!(
            (reply.content.as_str(), reply.calls.len()),
            (answer, 0),
            "{what}"
        );
    }
    // The generic envelope: `response` holds the schema's JSON, which becomes the content.
    let schema = generic::envelope_schema(&tools, &ToolChoice::Auto, true, Some(&person)).unwrap();
    let c = Constraint::json_schema(grammars(), &schema, "tools", "envelope").unwrap();
    assert!(!accepts(&c, r#"{"response": "hello"}"#));
    let mut answers = 0;
    for seed in 0..12 {
        let text = random_walk(&c, seed);
        let reply = parse_reply(ToolFormat::Generic, &text, true);
        if reply.calls.is_empty() {
            answers += 1;
            check_person(
                &serde_json::from_str(&reply.content).unwrap_or_else(|e| panic!("{text}: {e}")),
            );
        } else {
            assert_eq!(reply.content, "", "{text}");
            reply
                .calls
                .iter()
                .for_each(|call| check_weather_call(call, &text));
        }
    }
    // Random logits pick either branch (each is a handful of first tokens).
    assert!(answers > 0, "no answer in 12 walks");
}

#[test]
fn free_text_ends_at_a_control_token_tag() {
    use kiln::structured::tools::native::{tagged_grammar, Tag};
    let tok = tokenizer();
    let open = tok
        .vocab()
        .id(b"<|im_start|>")
        .expect("SmolLM2 has <|im_start|>");
    assert!(tok.is_control(open));
    let grammar = tagged_grammar(&Tag::Control(open), r#""call" "!""#, 2, false, None);
    let c = Constraint::lark(grammars(), &grammar, "tools", "t", false)
        .unwrap_or_else(|e| panic!("{e}\n{grammar}"));
    let accepts_special = |text: &str| {
        let mut seq = SeqConstraint::new(c.start());
        let ids = tok.encode(text, false, true);
        for (i, &id) in ids.iter().enumerate() {
            seq.compute_mask();
            if seq
                .allowed()
                .is_none_or(|b| b[id as usize / 32] & (1 << (id % 32)) == 0)
            {
                return false;
            }
            match seq.commit(id) {
                Step::Continue => {}
                Step::Complete => return i + 1 == ids.len(),
                Step::Failed(_) => return false,
            }
        }
        seq.compute_mask();
        let eog = tok.eog_ids()[0];
        seq.allowed()
            .is_some_and(|b| b[eog as usize / 32] & (1 << (eog % 32)) != 0)
    };
    assert!(accepts_special("plain text"));
    assert!(accepts_special("text first <|im_start|>call!"));
    assert!(accepts_special("<|im_start|>call!<|im_start|>call!"));
    assert!(!accepts_special("<|im_start|>call?"));
    assert!(!accepts_special(
        "<|im_start|>call!<|im_start|>call!<|im_start|>call!"
    ));
}
