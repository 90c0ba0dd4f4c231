//! Tool calling under constraints: formats detected from real templates, forced calls in each
//! native syntax, `auto` (an answer or calls), tools with `response_format`, free text ending
//! at a control-token tag.

use super::structured::{accepts, check_person, grammars, person_schema, tokenizer};
use crate::common::default_model;
use kiln::engine::token_choice::Rng;
use kiln::gguf::GgufFile;
use kiln::scheduler::sampling::{SampleScratch, Sampler};
use kiln::structured::seq::Step;
use kiln::structured::{Constraint, SeqConstraint};
use kiln::tokenizer::Tokenizer;
use serde_json::{json, Value};

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
        ("Qwen3.5-4B", ToolFormat::QwenXml),
        ("Qwen3-Coder", ToolFormat::QwenXml),
        ("meta-llama-Llama-3.2-3B-Instruct", ToolFormat::Llama3),
        ("meta-llama-Llama-3.3-70B-Instruct", ToolFormat::Llama3),
        ("mistralai-Mistral-Nemo-Instruct-2407", ToolFormat::Mistral),
        ("Mistral-Small-3.2-24B-Instruct-2506", ToolFormat::Mistral),
        (
            "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B",
            ToolFormat::Generic,
        ),
        ("openai-gpt-oss-120b", ToolFormat::Harmony),
        ("LFM2-8B-A1B", ToolFormat::Lfm2),
        ("LFM2.5-8B-A1B", ToolFormat::Lfm2),
        ("google-gemma-4-31B-it-interleaved", ToolFormat::Gemma4),
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

pub(crate) fn random_walk_with(tok: &Tokenizer, c: &Constraint, seed: u64) -> String {
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

const NATIVE: [(kiln::structured::tools::ToolFormat, &str); 9] = [
    (kiln::structured::tools::ToolFormat::Hermes, ""),
    (kiln::structured::tools::ToolFormat::QwenXml, ""),
    (kiln::structured::tools::ToolFormat::Llama3, ""),
    (kiln::structured::tools::ToolFormat::Mistral, ""),
    (kiln::structured::tools::ToolFormat::Mistral, "[ARGS]"),
    (kiln::structured::tools::ToolFormat::Phi4, ""),
    (kiln::structured::tools::ToolFormat::Granite, ""),
    (kiln::structured::tools::ToolFormat::Lfm2, ""),
    (kiln::structured::tools::ToolFormat::Gemma4, ""),
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

/// A forced gpt-oss call is one harmony message to `functions.NAME` whose arguments
/// validate, and it reads back (harmony reader, then the tool reader) as that call with no
/// content. The default vocabulary has no harmony control tokens, so the tags are text here
/// (in gpt-oss's own vocabulary the grammar names them by id, as for the other formats).
#[test]
fn a_forced_harmony_call_is_one_valid_call_message() {
    use kiln::structured::reasoning::{split, ThinkStart};
    use kiln::structured::tools::native::forced_call;
    use kiln::structured::tools::{parse_reply, ToolDef, ToolFormat};
    let tok = tokenizer();
    let tools = weather_tools();
    let offered: Vec<&ToolDef> = tools.iter().collect();
    let c = compile(forced_call(ToolFormat::Harmony, &offered, true, &tok, "").unwrap());
    for seed in 0..6 {
        let text = random_walk(&c, seed);
        assert!(
            text.starts_with("<|channel|>commentary to=functions.") && text.ends_with("<|call|>"),
            "{text}"
        );
        let parts = split(ThinkStart::Harmony, &text);
        assert_eq!(parts.reasoning, "", "{text}");
        let reply = parse_reply(ToolFormat::Harmony, &parts.content, true);
        assert_eq!(reply.calls.len(), 1, "{text}");
        assert_eq!(reply.content, "", "{text}");
        check_weather_call(&reply.calls[0], &text);
    }
}

/// gpt-oss's `response_format` reply: the final channel's header, then JSON valid against
/// the schema, read back as content.
#[test]
fn a_harmony_json_answer_is_in_the_final_channel() {
    use kiln::structured::reasoning::{split, ThinkStart};
    use kiln::structured::tools::native::harmony_final;
    let tok = tokenizer();
    let c = Constraint::json_schema_after(
        grammars(),
        &harmony_final(&tok),
        "",
        &person_schema(),
        "response_format",
        "f",
    )
    .unwrap();
    for seed in 0..4 {
        let text = random_walk(&c, seed);
        assert!(text.starts_with("<|channel|>final<|message|>"), "{text}");
        let parts = split(ThinkStart::Harmony, &text);
        assert_eq!(parts.reasoning, "", "{text}");
        let v: Value =
            serde_json::from_str(&parts.content).unwrap_or_else(|e| panic!("{text}: {e}"));
        check_person(&v);
    }
}

/// A valid call of `book` in `format`'s syntax (kiln's JSON layout).
fn book_call(format: kiln::structured::tools::ToolFormat, template: &str) -> &'static str {
    use kiln::structured::tools::ToolFormat;
    match (format, template) {
        (ToolFormat::Hermes, _) => {
            "<tool_call>\n{\"name\": \"book\", \"arguments\": {\"ok\": true}}\n</tool_call>"
        }
        (ToolFormat::QwenXml, _) => {
            "<tool_call>\n<function=book>\n<parameter=ok>\ntrue\n</parameter>\n</function>\n</tool_call>"
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
        (ToolFormat::Lfm2, _) => "<|tool_call_start|>[book(ok=true)]<|tool_call_end|>",
        (ToolFormat::Gemma4, _) => "<|tool_call>call:book{ok:true}<tool_call|>",
        (ToolFormat::Generic, _) => unreachable!("no native syntax"),
        (ToolFormat::Harmony, _) => {
            unreachable!("harmony calls under auto are read, not constrained")
        }
    }
}

/// The text up to and including where a call starts in `call` (its opening tag, or Llama 3's
/// opening brace).
fn call_opening(call: &str) -> &str {
    let end = [
        "<tool_call>",
        "[TOOL_CALLS]",
        "<|tool_call|>",
        "<|tool_call_start|>",
        "<|tool_call>",
    ]
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
                    && (matches!(
                        format,
                        ToolFormat::Hermes
                            | ToolFormat::QwenXml
                            | ToolFormat::Phi4
                            | ToolFormat::Gemma4
                    ) || !template.is_empty()),
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
