use super::*;
use crate::structured::tools::json_stream::bytes_scanned;
use crate::structured::tools::parse_reply;

fn call(name: &str, args: &str) -> PartialCall {
    PartialCall {
        name: Some(name.to_string()),
        arguments: args.to_string(),
        complete: true,
    }
}

fn cut(name: &str, args: &str) -> PartialCall {
    PartialCall {
        complete: false,
        ..call(name, args)
    }
}

/// Reads `text` delta by delta (cut at every `step` characters), returning the deltas' sum
/// (content, and per call its header and arguments) next to the reader's reply.
fn streamed(format: ToolFormat, forced: bool, text: &str, step: usize) -> (Reply, Reply) {
    let mut r = Reader::new(format, forced);
    let mut deltas = Vec::new();
    let chars: Vec<char> = text.chars().collect();
    for piece in chars.chunks(step.max(1)) {
        deltas.extend(r.push(&piece.iter().collect::<String>()));
    }
    deltas.extend(r.finish());
    let mut sum = Reply::default();
    for d in deltas {
        match d {
            ToolDelta::Content(t) => sum.content.push_str(&t),
            ToolDelta::CallStart { index, name } => {
                assert_eq!(index, sum.calls.len(), "headers come in order");
                sum.calls.push(PartialCall {
                    name: Some(name),
                    ..Default::default()
                });
            }
            ToolDelta::Arguments { index, fragment } => {
                sum.calls[index].arguments.push_str(&fragment)
            }
        }
    }
    let reply = r.reply();
    for (a, b) in sum.calls.iter_mut().zip(&reply.calls) {
        a.complete = b.complete;
    }
    (sum, reply)
}

/// The reply, checked to be the same whole and in deltas of every size up to 7.
fn read(format: ToolFormat, forced: bool, text: &str) -> Reply {
    let (_, whole) = streamed(format, forced, text, usize::MAX);
    for step in 1..8 {
        let (sum, reply) = streamed(format, forced, text, step);
        assert_eq!(sum, reply, "{format:?} step {step}: deltas vs reply");
        assert_eq!(reply, whole, "{format:?} step {step}: {text:?}");
    }
    whole
}

#[test]
fn each_format_reads_its_calls() {
    let r = read(
        ToolFormat::Generic,
        false,
        r#"{"tool_calls": [{"name": "f", "arguments": {"x": 1}}, {"name": "g", "arguments": {}}]}"#,
    );
    assert_eq!(r.calls, vec![call("f", r#"{"x": 1}"#), call("g", "{}")]);
    assert_eq!(r.content, "");
    let r = read(ToolFormat::Generic, false, r#"{"response": "hi \"you\""}"#);
    assert_eq!((r.content.as_str(), r.calls.len()), ("hi \"you\"", 0));
    let r = read(ToolFormat::Generic, false, r#"{"response": {"a": [1, 2]}}"#);
    assert_eq!(r.content, r#"{"a": [1, 2]}"#);
    let r = read(
        ToolFormat::Hermes,
        false,
        "Let me look.\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": 1}}\n</tool_call>\n<tool_call>\n{\"arguments\": {}, \"name\": \"g\"}\n</tool_call>",
    );
    assert_eq!(r.content, "Let me look.");
    assert_eq!(r.calls, vec![call("f", r#"{"x": 1}"#), call("g", "{}")]);
    let r = read(
        ToolFormat::Llama3,
        false,
        r#"<|python_tag|>{"name": "f", "parameters": {"x": 1}}"#,
    );
    assert_eq!(r.calls, vec![call("f", r#"{"x": 1}"#)]);
    let r = read(ToolFormat::Llama3, false, "The answer is 4.");
    assert_eq!((r.content.as_str(), r.calls.len()), ("The answer is 4.", 0));
    let r = read(ToolFormat::Llama3, false, r#"{"name": "Ann", "age": 3}"#);
    assert_eq!(
        (r.content.as_str(), r.calls.len()),
        (r#"{"name": "Ann", "age": 3}"#, 0)
    );
    let r = read(
        ToolFormat::Mistral,
        false,
        r#"[TOOL_CALLS][{"name": "f", "arguments": {"x": 1}}]"#,
    );
    assert_eq!(r.calls, vec![call("f", r#"{"x": 1}"#)]);
    let r = read(
        ToolFormat::Mistral,
        false,
        r#"[TOOL_CALLS]f[ARGS]{"x": 1}[TOOL_CALLS]g[ARGS]{}"#,
    );
    assert_eq!(r.calls, vec![call("f", r#"{"x": 1}"#), call("g", "{}")]);
    let r = read(
        ToolFormat::Phi4,
        false,
        r#"Sure.<|tool_call|>{"name": "f", "arguments": {"x": 1}}<|/tool_call|><|tool_call|>[{"name": "g", "arguments": {}}]<|/tool_call|>"#,
    );
    assert_eq!(r.content, "Sure.");
    assert_eq!(r.calls, vec![call("f", r#"{"x": 1}"#), call("g", "{}")]);
    let r = read(
        ToolFormat::Granite,
        false,
        r#"<|tool_call|>[{"name": "f", "arguments": {"x": 1}}, {"name": "g", "arguments": {}}]"#,
    );
    assert_eq!(r.calls, vec![call("f", r#"{"x": 1}"#), call("g", "{}")]);
}

#[test]
fn a_closing_tag_inside_a_string_is_part_of_the_string() {
    let args = r#"{"code": "print('</tool_call>')", "note": "<|/tool_call|> [TOOL_CALLS]"}"#;
    let r = read(
        ToolFormat::Hermes,
        false,
        &format!(
            "<tool_call>\n{{\"name\": \"python\", \"arguments\": {args}}}\n</tool_call>\nDone."
        ),
    );
    assert_eq!(r.calls, vec![call("python", args)]);
    assert_eq!(r.content, "Done.");
    let r = read(
        ToolFormat::Phi4,
        false,
        &format!("<|tool_call|>{{\"name\": \"python\", \"arguments\": {args}}}<|/tool_call|>"),
    );
    assert_eq!(
        (r.calls, r.content.as_str()),
        (vec![call("python", args)], "")
    );
    let r = read(
        ToolFormat::Mistral,
        false,
        &format!("[TOOL_CALLS]python[ARGS]{args}"),
    );
    assert_eq!(r.calls, vec![call("python", args)]);
}

/// Replies `max_tokens` cut inside a call: the partial call is a call, never content, in every
/// format, forced or not.
#[test]
fn a_call_cut_short_stays_a_call() {
    let cases = [
        (
            ToolFormat::Generic,
            r#"{"tool_calls": [{"name": "python", "arguments": {"code": "print(1)\nfor i in"#,
        ),
        (
            ToolFormat::Hermes,
            "<tool_call>\n{\"name\": \"python\", \"arguments\": {\"code\": \"print(1)\\nfor i in",
        ),
        (
            ToolFormat::Llama3,
            r#"{"name": "python", "parameters": {"code": "print(1)\nfor i in"#,
        ),
        (
            ToolFormat::Mistral,
            r#"[TOOL_CALLS][{"name": "python", "arguments": {"code": "print(1)\nfor i in"#,
        ),
        (
            ToolFormat::Mistral,
            r#"[TOOL_CALLS]python[ARGS]{"code": "print(1)\nfor i in"#,
        ),
        (
            ToolFormat::Phi4,
            r#"<|tool_call|>{"name": "python", "arguments": {"code": "print(1)\nfor i in"#,
        ),
        (
            ToolFormat::Granite,
            r#"<|tool_call|>[{"name": "python", "arguments": {"code": "print(1)\nfor i in"#,
        ),
    ];
    for (format, text) in cases {
        for forced in [false, true] {
            let r = read(format, forced, text);
            assert_eq!(
                r.calls,
                vec![cut("python", r#"{"code": "print(1)\nfor i in"#)],
                "{format:?} forced={forced}"
            );
            assert_eq!(r.content, "", "{format:?} forced={forced}");
        }
    }
    // Cut before the name is complete: no call to show, and still no call syntax as content.
    for (format, text) in [
        (ToolFormat::Generic, r#"{"tool_calls": [{"name": "pyt"#),
        (ToolFormat::Hermes, "<tool_call>\n{\"name\": \"pyt"),
        (ToolFormat::Llama3, r#"{"name": "pyt"#),
        (ToolFormat::Llama3, r#"{"na"#),
    ] {
        for forced in [false, true] {
            let r = read(format, forced, text);
            assert_eq!(r, Reply::default(), "{format:?} forced={forced} {text:?}");
        }
    }
    // Forced: the name alone already makes a call.
    let r = read(ToolFormat::Llama3, true, r#"{"name": "python", "param"#);
    assert_eq!(r.calls, vec![cut("python", "")]);
}

#[test]
fn whitespace_around_calls_is_layout_and_text_is_kept() {
    let r = read(
        ToolFormat::Hermes,
        false,
        "A  \n<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>\n\nB \n",
    );
    assert_eq!(r.content, "A\n\nB");
    let r = read(
        ToolFormat::Hermes,
        false,
        "Plain text with < and <tool but no call.\n",
    );
    assert_eq!(r.content, "Plain text with < and <tool but no call.\n");
    let r = read(ToolFormat::Hermes, false, "Half a tag at the end <tool_ca");
    assert_eq!(r.content, "Half a tag at the end <tool_ca");
    // Text that is not call syntax after an opening tag is dropped, not shown.
    let r = read(
        ToolFormat::Hermes,
        false,
        "x<tool_call>oops</tool_call>y<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>",
    );
    assert_eq!((r.content.as_str(), r.calls.len()), ("xy", 1));
}

#[test]
fn prefixes_give_prefixes() {
    let cases = [
        (
            ToolFormat::Generic,
            r#"{"tool_calls": [{"name": "f", "arguments": {"x": "a\"}"}}, {"name": "g", "arguments": {}}]}"#,
        ),
        (ToolFormat::Generic, r#"{"response": "Tea \u00e9 \n done"}"#),
        (
            ToolFormat::Hermes,
            "Sure <tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": 1}}\n</tool_call>",
        ),
        (
            ToolFormat::Llama3,
            r#"{"name": "f", "parameters": {"x": [1, 2]}}"#,
        ),
        (
            ToolFormat::Mistral,
            r#"[TOOL_CALLS][{"name": "f", "arguments": {"x": 1}}]"#,
        ),
    ];
    for (f, text) in cases {
        let whole = parse_reply(f, text, true);
        let mut prev = Reply::default();
        for cut in (0..=text.len()).filter(|&c| text.is_char_boundary(c)) {
            let r = parse_reply(f, &text[..cut], false);
            assert!(
                r.content.starts_with(&prev.content),
                "{f:?} at {cut}: {r:?}"
            );
            assert!(
                whole.content.starts_with(&r.content),
                "{f:?} at {cut}: {r:?}"
            );
            assert!(r.calls.len() >= prev.calls.len(), "{f:?} at {cut}");
            for (a, b) in prev.calls.iter().zip(&r.calls) {
                assert!(
                    b.arguments.starts_with(&a.arguments),
                    "{f:?} at {cut}: {r:?}"
                );
                assert_eq!(a.name, b.name);
            }
            prev = r;
        }
    }
}

/// A 4,000-token call streamed token by token is read in linear time: the bytes the reader
/// looks at stay within a small multiple of the reply's length (re-reading the reply at each
/// delta, as kiln once did, looks at ~n²/2: 40 million bytes here).
#[test]
fn a_long_call_streamed_costs_linear_work() {
    let body: String = (0..4000).map(|i| format!("x{} ", i % 10)).collect();
    for (format, text) in [
        (
            ToolFormat::Hermes,
            format!("<tool_call>\n{{\"name\": \"python\", \"arguments\": {{\"code\": \"{body}\"}}}}\n</tool_call>"),
        ),
        (
            ToolFormat::Generic,
            format!("{{\"tool_calls\": [{{\"name\": \"python\", \"arguments\": {{\"code\": \"{body}\"}}}}]}}"),
        ),
        (
            ToolFormat::Llama3,
            format!("{{\"name\": \"python\", \"parameters\": {{\"code\": \"{body}\"}}}}"),
        ),
        (ToolFormat::Mistral, format!("[TOOL_CALLS]python[ARGS]{{\"code\": \"{body}\"}}")),
        (ToolFormat::Generic, format!("{{\"response\": \"{body}\"}}")),
        (
            ToolFormat::Lfm2,
            format!("<|tool_call_start|>[python(code=\"{body}\")]<|tool_call_end|>"),
        ),
        (
            ToolFormat::Gemma4,
            format!("<|tool_call>call:python{{code:<|\"|>{body}<|\"|>}}<tool_call|>"),
        ),
        (ToolFormat::Hermes, body.clone()),
    ] {
        let tokens: Vec<&str> = text.split_inclusive(' ').collect();
        assert!(tokens.len() >= 4000);
        let before = bytes_scanned();
        let mut r = Reader::new(format, false);
        let mut sent = 0;
        for t in &tokens {
            sent += r.push(t).len();
        }
        r.finish();
        let work = bytes_scanned() - before;
        // LFM2's and Gemma 4's calls are read whole at their closing tag (their syntax is
        // not JSON, so arguments are not sent as they grow).
        let whole_calls = matches!(format, ToolFormat::Lfm2 | ToolFormat::Gemma4);
        assert!(
            sent >= 4000 || whole_calls,
            "{format:?}: a delta per token ({sent})"
        );
        assert!(
            work <= 3 * text.len() as u64,
            "{format:?}: {work} bytes looked at for a {}-byte reply",
            text.len()
        );
    }
}

/// Pieces a reply is made of, good and broken: every sequence of them must read without a
/// panic, the same whole and in deltas, with content and calls that only grow.
fn pieces() -> impl proptest::strategy::Strategy<Value = Vec<&'static str>> {
    let p = proptest::sample::select(vec![
        "{",
        "}",
        "[",
        "]",
        "\"",
        ":",
        ", ",
        "name",
        "arguments",
        "parameters",
        "response",
        "tool_calls",
        "<tool_call>",
        "</tool_call>",
        "<|tool_call|>",
        "<|/tool_call|>",
        "[TOOL_CALLS]",
        "[ARGS]",
        "<|python_tag|>",
        "\\u00e9",
        "\\ud83d",
        "\\",
        "1",
        "-2.5e3",
        "true",
        "null",
        "é",
        " ",
        "\n",
        "<",
        "tool",
        "<function=",
        "book>",
        "</function>",
        "<parameter=",
        "ok>",
        "</parameter>",
        "<|tool_call_start|>",
        "<|tool_call_end|>",
        "f(x=",
        "'",
        ")",
        "<|tool_call>",
        "<tool_call|>",
        "call:f",
        "<|\"|>",
    ]);
    proptest::collection::vec(p, 0..40)
}

proptest::proptest! {
    #[test]
    fn any_text_reads_without_panic_the_same_in_deltas(ps in pieces()) {
        let text: String = ps.concat();
        for f in [ToolFormat::Generic, ToolFormat::Hermes, ToolFormat::QwenXml, ToolFormat::Llama3, ToolFormat::Mistral, ToolFormat::Phi4, ToolFormat::Granite, ToolFormat::Lfm2, ToolFormat::Gemma4] {
            for forced in [false, true] {
                let (_, whole) = streamed(f, forced, &text, usize::MAX);
                for step in [1, 2, 5] {
                    let (sum, reply) = streamed(f, forced, &text, step);
                    proptest::prop_assert_eq!(&sum, &reply);
                    proptest::prop_assert_eq!(&reply, &whole, "{:?} {:?} step {}", f, text, step);
                }
            }
        }
    }
}

#[test]
fn qwen_xml_calls_become_json_arguments() {
    let one = "<tool_call>\n<function=get_weather>\n<parameter=city>\nNew York\n</parameter>\n\
               <parameter=days>\n3\n</parameter>\n<parameter=opts>\n{\"a\": [1, true]}\n</parameter>\n\
               </function>\n</tool_call>";
    let want = call(
        "get_weather",
        r#"{"city": "New York", "days": 3, "opts": {"a":[1,true]}}"#,
    );
    for forced in [false, true] {
        let r = read(ToolFormat::QwenXml, forced, one);
        assert_eq!(r.content, "");
        assert_eq!(r.calls, vec![want.clone()]);
    }
    // Text before a call is content; two calls; a call without parameters; a multi-line
    // string and one that looks like JSON but is not.
    let two =
        format!("Let me look.\n\n{one}\n<tool_call>\n<function=now>\n</function>\n</tool_call>");
    let r = read(ToolFormat::QwenXml, false, &two);
    assert_eq!(r.content, "Let me look.");
    assert_eq!(r.calls, vec![want, call("now", "{}")]);
    let text = "<tool_call>\n<function=note>\n<parameter=body>\nline 1\n{line 2\n</parameter>\n</function>\n</tool_call>";
    let r = read(ToolFormat::QwenXml, true, text);
    assert_eq!(
        r.calls,
        vec![call("note", r#"{"body": "line 1\n{line 2"}"#)]
    );
    // Cut short inside a value: the call so far, partial.
    let r = read(
        ToolFormat::QwenXml,
        false,
        "<tool_call>\n<function=f>\n<parameter=a>\n1\n</parameter>\n<parameter=b>\nx",
    );
    assert_eq!(r.calls, vec![cut("f", r#"{"a": 1"#)]);
    // Not a function: skipped as junk, the text after it is content (as Hermes keeps it).
    let r = read(
        ToolFormat::QwenXml,
        false,
        "<tool_call>oops</tool_call> fine",
    );
    assert_eq!((r.content.as_str(), r.calls.len()), (" fine", 0));
}

#[test]
fn qwen_xml_is_told_from_hermes_by_its_function_tags() {
    let xml = "{% if tools %}<tool_call>\n<function=example>\n<parameter=a>\n1\n</parameter>\n</function>\n</tool_call>{% endif %}";
    assert_eq!(ToolFormat::detect(xml), ToolFormat::QwenXml);
    assert_eq!(
        ToolFormat::detect("{{ tools }} <tool_call>{{ tool_call | tojson }}</tool_call>"),
        ToolFormat::Hermes
    );
}

/// gpt-oss: the reasoning splitter reads the harmony reply first, the tool reader its calls.
#[test]
fn reasoning_content_and_calls_come_out_of_a_harmony_reply() {
    use crate::structured::reasoning::{split, ThinkStart};
    use crate::structured::tools::{parse_reply, ToolFormat};
    let reply = "<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant \
        to=functions.get_weather<|channel|>commentary json<|message|>{\"city\": \"Paris\"}";
    let parts = split(ThinkStart::Harmony, reply);
    assert_eq!(parts.reasoning, "Need weather.");
    let r = parse_reply(ToolFormat::Harmony, &parts.content, true);
    assert_eq!(r.content, "");
    assert_eq!(r.calls.len(), 1);
    assert_eq!(r.calls[0].name.as_deref(), Some("get_weather"));
    assert_eq!(r.calls[0].arguments, "{\"city\": \"Paris\"}");
    assert!(r.calls[0].complete);
    // Reasoning then a final answer.
    let parts = split(
        ThinkStart::Harmony,
        "<|channel|>analysis<|message|>The user greets.<|end|><|start|>assistant<|channel|>final<|message|>Hello!",
    );
    assert_eq!(
        (parts.reasoning.as_str(), parts.content.as_str()),
        ("The user greets.", "Hello!")
    );
}

#[test]
fn lfm2_pythonic_calls_become_json_arguments() {
    let one = r#"<|tool_call_start|>[get_weather(city="New York", days=3, hot=True), now()]<|tool_call_end|>"#;
    let want = vec![
        call("get_weather", r#"{"city":"New York","days":3,"hot":true}"#),
        call("now", "{}"),
    ];
    for forced in [false, true] {
        let r = read(ToolFormat::Lfm2, forced, one);
        assert_eq!(
            (r.content.as_str(), &r.calls),
            ("", &want),
            "forced={forced}"
        );
    }
    // Text around the call is content; a closing tag inside a string is part of it.
    let r = read(
        ToolFormat::Lfm2,
        false,
        "Checking.\n<|tool_call_start|>[say(text='<|tool_call_end|> ok')]<|tool_call_end|>\nDone.",
    );
    assert_eq!(r.content, "Checking.\nDone.");
    assert_eq!(
        r.calls,
        vec![call("say", r#"{"text":"<|tool_call_end|> ok"}"#)]
    );
    // A call that does not parse is content, tags and all.
    let bad = "<|tool_call_start|>[get_weather(Paris)]<|tool_call_end|> sorry";
    let r = read(ToolFormat::Lfm2, false, bad);
    assert_eq!((r.content.as_str(), r.calls.len()), (bad, 0));
    // Cut short: the calls so far stay calls, nothing becomes content.
    for forced in [false, true] {
        let r = read(
            ToolFormat::Lfm2,
            forced,
            "<|tool_call_start|>[a(x=1), get_weather(city=\"Par",
        );
        assert_eq!(r.content, "");
        assert_eq!(
            r.calls,
            vec![call("a", r#"{"x":1}"#), cut("get_weather", "")]
        );
    }
    // The closing tag left out at the very end: the calls written still count.
    let r = read(ToolFormat::Lfm2, false, "<|tool_call_start|>[a(x=1)]");
    assert_eq!(r.calls, vec![call("a", r#"{"x":1}"#)]);
    let r = read(ToolFormat::Lfm2, false, "Half a tag <|tool_call_st");
    assert_eq!(r.content, "Half a tag <|tool_call_st");
}

#[test]
fn gemma4_calls_become_json_arguments() {
    let q = "<|\"|>";
    let text = format!(
        "<|tool_call>call:get_weather{{city:{q}Paris, FR{q},days:3}}<tool_call|><|tool_call>call:now{{}}<tool_call|>"
    );
    let want = vec![
        call("get_weather", r#"{"city":"Paris, FR","days":3}"#),
        call("now", "{}"),
    ];
    for forced in [false, true] {
        let r = read(ToolFormat::Gemma4, forced, &text);
        assert_eq!(
            (r.content.as_str(), &r.calls),
            ("", &want),
            "forced={forced}"
        );
    }
    let r = read(
        ToolFormat::Gemma4,
        false,
        &format!("Sure. <|tool_call>call:note{{body:{q}a <tool_call|> b{q}}}<tool_call|>"),
    );
    assert_eq!(r.content, "Sure.");
    assert_eq!(
        r.calls,
        vec![call("note", r#"{"body":"a <tool_call|> b"}"#)]
    );
    let bad = "<|tool_call>get_weather(Paris)<tool_call|> after";
    let r = read(ToolFormat::Gemma4, false, bad);
    assert_eq!((r.content.as_str(), r.calls.len()), (bad, 0));
    let r = read(
        ToolFormat::Gemma4,
        true,
        &format!("<|tool_call>call:f{{s:{q}abc"),
    );
    assert_eq!((r.content.as_str(), &r.calls), ("", &vec![cut("f", "")]));
}

#[test]
fn lfm2_and_gemma4_templates_are_detected() {
    assert_eq!(
        ToolFormat::detect("{% if tools %}List of tools: <|tool_list_start|>[{{ tools }}]<|tool_list_end|>{% endif %}"),
        ToolFormat::Lfm2
    );
    assert_eq!(
        ToolFormat::detect("{% if tools %}List of tools: [{{ tools }}]{% endif %}"),
        ToolFormat::Lfm2
    );
    assert_eq!(
        ToolFormat::detect("{{ tools }}{{- '<|tool_call>call:' + function['name'] + '{' -}}"),
        ToolFormat::Gemma4
    );
}
