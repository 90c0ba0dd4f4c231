//! Unit tests: Python printing, tojson, raise_exception, budgets, sandboxing, the ChatML default.
//! Expected strings were produced by jinja2 3.1.6 configured as transformers configures it.

use super::*;
use serde_json::json;
use std::time::{Duration, Instant};

fn render(src: &str, ctx: serde_json::Value) -> Result<String, ChatTemplateError> {
    ChatTemplate::new(src)?.render(&ctx, DateTime::parse_iso("2025-01-01T00:00:00"))
}

#[test]
fn values_print_like_python() {
    let out = render(
        "{{ a }} {{ b }} {{ c }} {{ d }} {{ e }} {{ f }}|{{ missing }}|{{ a|string }}",
        json!({"a": null, "b": true, "c": false, "d": 1.0, "e": [1, "x"], "f": {"k": null}}),
    )
    .unwrap();
    assert_eq!(out, "None True False 1.0 [1, 'x'] {'k': None}||None");
    let out = render(
        "{{ 10000000000000000 }} {{ 1.0e15 }} {{ 0.1 + 0.2 }} {{ -0.0 }} {{ 3 / 0.5 }} {{ 7 // 2 }} \
         {{ 1e20 }} {{ 0.00001 }}|{{ [none, true]|join }}|{{ 1 ~ none ~ true }}",
        json!({}),
    )
    .unwrap();
    assert_eq!(
        out,
        "10000000000000000 1000000000000000.0 0.30000000000000004 -0.0 6.0 3 1e+20 1e-05\
         |NoneTrue|1NoneTrue"
    );
}

#[test]
fn tojson_matches_json_dumps() {
    let out = render(
        "{{ x|tojson }}|{{ x|tojson(indent=2) }}|\
         {{ x|tojson(sort_keys=true, separators=(',', ':')) }}|{{ 'é'|tojson(ensure_ascii=true) }}",
        json!({"x": {"b": [1, 2.5, null], "a": {}, "c": "é\"<"}}),
    )
    .unwrap();
    assert_eq!(
        out,
        "{\"b\": [1, 2.5, null], \"a\": {}, \"c\": \"é\\\"<\"}|\
         {\n  \"b\": [\n    1,\n    2.5,\n    null\n  ],\n  \"a\": {},\n  \"c\": \"é\\\"<\"\n}|\
         {\"a\":{},\"b\":[1,2.5,null],\"c\":\"é\\\"<\"}|\"\\u00e9\""
    );
    assert!(matches!(
        render("{{ nothing|tojson }}", json!({})),
        Err(ChatTemplateError::Render { .. })
    ));
}

#[test]
fn raise_exception_is_a_named_refusal() {
    let src = "{% macro check(m) %}{% if m.role == 'system' %}\
               {{ raise_exception('System role not supported') }}{% endif %}{% endmacro %}\
               {% for m in messages %}{{ check(m) }}{{ m.content }}{% endfor %}";
    match render(
        src,
        json!({"messages": [{"role": "system", "content": "x"}]}),
    ) {
        Err(ChatTemplateError::Raised(msg)) => assert_eq!(msg, "System role not supported"),
        other => panic!("expected Raised, got {other:?}"),
    }
    assert_eq!(
        render(src, json!({"messages": [{"role": "user", "content": "x"}]})).unwrap(),
        "x"
    );
}

#[test]
fn python_methods_and_tests() {
    let out = render(
        "{{ ' xxhixx '.strip(' x') }}|{{ 'a b  c'.split() }}|{{ 'a,b,c'.split(',', 1) }}|\
         {{ 'abc'.startswith(('x', 'a')) }}|{{ 'hello world'.title() }}|{{ '{} and {}'.format(1, 'x') }}|\
         {{ d.get('k') }}|{{ d.get('z', 3) }}|{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}|\
         {{ 'aXbXc'.rsplit('X', 1) }}|{{ 'ab'.center(6, '*') }}",
        json!({"d": {"k": 1}}),
    )
    .unwrap();
    assert_eq!(
        out,
        "hi|['a', 'b', 'c']|['a', 'b,c']|True|Hello World|1 and x|1|3|k=1;|['aXb', 'c']|**ab**"
    );
    let out = render(
        "{{ 'abc' is sequence }}{{ {} is sequence }}{{ none is iterable }}{{ 'a' is iterable }}\
         {{ true is number }}{{ 1 is integer }}{{ true is integer }}{{ 1.0 is float }}\
         {{ {} is mapping }}{{ [] is mapping }}{{ x is iterable }}",
        json!({}),
    )
    .unwrap();
    assert_eq!(out, "TrueTrueFalseTrueTrueTrueFalseTrueTrueFalseTrue");
    let out = render(
        "{{ d.items()|list }} {{ d|dictsort(reverse=true) }} {{ (d|items|first)[-1] }}",
        json!({"d": {"b": 1, "a": [2]}}),
    )
    .unwrap();
    assert_eq!(out, "[('b', 1), ('a', [2])] [('b', 1), ('a', [2])] 1");
    let out = render(
        "{{ (1, 2) }}{{ ('a',) }}{{ () }}{% for (a, b) in [(3, 4)] %}{{ a }}{% endfor %}\
         {{ (1, 2)|tojson }}{{ '%s' % [1, 2] }}",
        json!({}),
    )
    .unwrap();
    assert_eq!(out, "(1, 2)('a',)()3[1, 2][1, 2]");
    // The immutable sandbox refuses mutation.
    assert!(render("{{ [1, 2].append(3) }}", json!({})).is_err());
}

#[test]
fn markup_concatenation_escapes_like_jinja2() {
    let out = render(
        "{{ '<'|safe + '\"' }}|{{ '\"' + '<'|safe }}|{{ ('a'|safe + 'b')|length }}|{{ 1 + 2 }}",
        json!({}),
    )
    .unwrap();
    assert_eq!(out, "<&#34;|&#34;<|2|3");
    let out = render(
        "{{ '<a>'|e }}|{{ x|escape }}|{{ ('<'|e) + '>' }}|{{ '\"'|safe|trim + '<' }}|\
         {{ ('a'|safe).upper() + '&' }}|{{ 'a'|safe ~ '&' }}",
        json!({"x": "a'b"}),
    )
    .unwrap();
    assert_eq!(out, "&lt;a&gt;|a&#39;b|&lt;&gt;|\"&lt;|A&amp;|a&");
}

#[test]
fn generation_block_renders_its_body() {
    let out = render(
        "a\n  {% generation %}\nX{{ 1 }}\n  {% endgeneration %}\nb{%- generation -%}  Y  \
         {%- endgeneration -%} c|{% for m in [1,2] %}{% generation %}{% set z = 5 %}\
         {{ loop.index }}{% endgeneration %}{% endfor %}{{ z }}",
        json!({}),
    )
    .unwrap();
    assert_eq!(out, "a\nX1\nbYc|12");
}

#[test]
fn strftime_now_uses_the_given_time() {
    let out = render(
        "{{ strftime_now('%d %b %Y') }} {{ strftime_now('%B %d, %Y %A %j %H:%M %p') }}",
        json!({}),
    )
    .unwrap();
    assert_eq!(out, "01 Jan 2025 January 01, 2025 Wednesday 001 00:00 AM");
}

#[test]
fn tools_is_none_when_absent() {
    let out = render(
        "{% if tools is not none %}T{% endif %}{{ tools }}{{ tools is none }}",
        json!({}),
    )
    .unwrap();
    assert_eq!(out, "NoneTrue");
}

/// A runaway loop must stop on the instruction budget, quickly, with a named error.
fn assert_fuel_stops(src: &str) {
    let start = Instant::now();
    let err = render(src, json!({})).unwrap_err();
    let took = start.elapsed();
    assert!(
        matches!(err, ChatTemplateError::FuelExhausted { .. }),
        "expected FuelExhausted, got {err:?}"
    );
    assert!(err.to_string().contains("budget"), "{err}");
    println!("fuel ran out after {took:?}");
    assert!(took < Duration::from_secs(5), "took {took:?}");
}

#[test]
fn endless_loops_exhaust_fuel_fast() {
    assert_fuel_stops(
        "{% for a in range(100000) %}{% for b in range(100000) %}x{% endfor %}{% endfor %}",
    );
    // The short nested-loop kind (three ranges of 100000, under 120 bytes, nothing printed).
    let tiny = "{%for a in range(99999)%}{%for b in range(99999)%}{%for c in range(99999)%}\
                {%endfor%}{%endfor%}{%endfor%}";
    assert!(tiny.len() <= 116);
    assert_fuel_stops(tiny);
}

#[test]
fn output_is_capped() {
    let t = ChatTemplate::with_limits(
        "{% for a in range(100000) %}{{ 'x' * 1000 }}{% endfor %}",
        RenderLimits {
            max_output_bytes: 1 << 20,
            ..RenderLimits::default()
        },
    )
    .unwrap();
    assert!(matches!(
        t.render(&json!({}), None),
        Err(ChatTemplateError::OutputTooLarge { limit }) if limit == 1 << 20
    ));
}

#[test]
fn deep_recursion_is_an_error_not_a_crash() {
    let err = render(
        "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
        json!({}),
    )
    .unwrap_err();
    assert!(matches!(err, ChatTemplateError::Render { .. }), "{err:?}");
}

#[test]
fn no_filesystem_access() {
    for src in [
        "{% include '/etc/passwd' %}",
        "{% import '/etc/passwd' as x %}",
        "{% extends 'base.html' %}",
    ] {
        assert!(render(src, json!({})).is_err(), "{src} should fail");
    }
}

#[test]
fn syntax_errors_are_named_with_a_line() {
    match ChatTemplate::new("ok\n{% if %}") {
        Err(ChatTemplateError::Syntax { detail }) => assert!(detail.contains(":2"), "{detail}"),
        other => panic!("expected a syntax error, got {other:?}"),
    }
}

#[test]
fn context_must_be_an_object() {
    let t = ChatTemplate::chatml_default();
    assert!(matches!(
        t.render(&json!([1]), None),
        Err(ChatTemplateError::InvalidContext { .. })
    ));
}

#[test]
fn chatml_default_renders_chatml() {
    let t = ChatTemplate::chatml_default();
    let ctx = json!({
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": [{"type": "text", "text": "Hi"}, {"type": "image"}]},
        ],
        "add_generation_prompt": true,
    });
    assert_eq!(
        t.render(&ctx, None).unwrap(),
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n\
         <|im_start|>assistant\n"
    );
}

#[test]
fn chat_template_is_send_and_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<ChatTemplate>();
}

#[test]
fn concat_uses_python_str() {
    let out = render("{{ 'a' ~ 1.0 ~ [1] ~ {'b': none} ~ 1e20 ~ x }}", json!({})).unwrap();
    assert_eq!(out, "a1.0[1]{'b': None}1e+20");
}

#[test]
fn filters_follow_jinja2() {
    let out = render(
        "{{ 3.7|int }} {{ '42'|int }} {{ 'x'|int }} {{ 3|float }} {{ 2.567|round(1) }} \
         {{ 2.5|round }} {{ 3.5|round }} {{ 0.125|round(2) }} {{ 2.675|round(2) }} \
         {{ 1234|round(-2) }} {{ 2.1|round(0, 'ceil') }}|{{ 'a b, c_d'|wordcount }} \
         {{ 'hello world foo'|truncate(9) }} {{ 'hello world foo bar baz qux'|truncate(12, true) }} \
         {{ 'Hello'|replace('l', 'L', 1) }}",
        json!({}),
    )
    .unwrap();
    assert_eq!(
        out,
        "3 42 0 3.0 2.6 2.0 4.0 0.12 2.67 1200 3.0|3 hello... hello wor... HeLlo"
    );
}

#[test]
fn doubling_strings_hits_the_size_cap() {
    let limits = RenderLimits {
        max_output_bytes: 1 << 16,
        ..RenderLimits::default()
    };
    for body in [
        "{% set ns.s = ns.s + ns.s %}",
        "{% set ns.s = ns.s ~ ns.s %}",
        "{% set ns.s = [ns.s, ns.s]|join %}",
        "{% set ns.s = ''.join([ns.s, ns.s]) %}",
        "{% set ns.s = '{0}{0}'.format(ns.s) %}",
        "{% set ns.s = '%s%s'|format(ns.s, ns.s) %}",
        "{% set ns.s = ns.s|replace('x', 'xx') %}",
        "{% set ns.s = ns.s * 2 %}",
        "{% set t %}{{ ns.s }}{{ ns.s }}{% endset %}{% set ns.s = t %}",
    ] {
        let src = format!(
            "{{% set ns = namespace(s='xxxxxxxx') %}}{{% for i in range(60) %}}{body}\
             {{% endfor %}}{{{{ ns.s|length }}}}"
        );
        let err = ChatTemplate::with_limits(&src, limits)
            .unwrap()
            .render(&json!({}), None)
            .unwrap_err();
        assert!(
            matches!(err, ChatTemplateError::OutputTooLarge { .. }),
            "{body}: {err:?}"
        );
    }
    for src in [
        "{{ 'a\nb'|indent(1000000000) }}",
        "{{ [1]|batch(1000000000, 'x')|list|length }}",
        "{{ '%1000000000s'|format('x') }}",
        "{{ '{:>1000000000}'.format('x') }}",
        "{{ 'x'.center(1000000000) }}",
    ] {
        let err = ChatTemplate::with_limits(src, limits)
            .unwrap()
            .render(&json!({}), None)
            .unwrap_err();
        assert!(
            matches!(err, ChatTemplateError::OutputTooLarge { .. }),
            "{src}: {err:?}"
        );
    }
}

#[test]
fn percent_formats_and_modulo_like_python() {
    let out = render(
        "{{ '%s-%d' % ('a', 3) }}|{{ '%s' % none }}|{{ '%5.2f|%-4s|%x|%%' % (3.14159, 'ab', 255) }}|\
         {{ -7 % 3 }} {{ 7 % -3 }} {{ -7.5 % 2 }} {{ 7 % 3 }}|{{ '%(a)s' % {'a': 1} }}",
        json!({}),
    )
    .unwrap();
    assert_eq!(out, "a-3|None| 3.14|ab  |ff|%|2 -2 0.5 1|1");
}

#[test]
fn for_model_prefers_override_then_model_then_chatml() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("t.jinja");
    std::fs::write(&file, "override").unwrap();
    let ctx = json!({"messages": []});
    let (t, src) = ChatTemplate::for_model(Some("model"), Some(&file)).unwrap();
    assert_eq!(
        (t.render(&ctx, None).unwrap().as_str(), src),
        ("override", TemplateSource::Override)
    );
    let (t, src) = ChatTemplate::for_model(Some("model"), None).unwrap();
    assert_eq!(
        (t.render(&ctx, None).unwrap().as_str(), src),
        ("model", TemplateSource::Model)
    );
    let (_, src) = ChatTemplate::for_model(None, None).unwrap();
    assert_eq!(src, TemplateSource::ChatmlDefault);
    assert!(matches!(
        ChatTemplate::for_model(None, Some(&dir.path().join("missing.jinja"))),
        Err(ChatTemplateError::Io { .. })
    ));
}

#[test]
fn recursion_limit_fits_a_small_thread_stack() {
    // The HTTP layer may render on a 2 MiB blocking-pool thread: hitting the limit must be an
    // error there, not a stack overflow. Legit recursive macros (JSON schemas) nest ~10 deep.
    let handle = std::thread::Builder::new()
        .stack_size(2 << 20)
        .spawn(|| {
            let deep = render(
                "{% macro f(n) %}{% for i in [n] %}{% if n < 30 %}{{ f(n + 1) }}{% else %}\
                 {{ n }}{% endif %}{% endfor %}{% endmacro %}{{ f(0) }}",
                json!({}),
            );
            let endless = render(
                "{% macro f(n) %}{% for i in [n] %}{{ f(n + 1) }}{% endfor %}{% endmacro %}\
                 {{ f(0) }}",
                json!({}),
            );
            (deep, endless)
        })
        .unwrap();
    let (deep, endless) = handle.join().expect("no stack overflow");
    assert_eq!(deep.unwrap(), "30");
    assert!(matches!(endless, Err(ChatTemplateError::Render { .. })));
}

mod never_panics {
    use super::*;
    use proptest::prelude::*;

    /// Template-ish text: fragments of Jinja syntax glued together at random.
    fn template_text() -> impl Strategy<Value = String> {
        let pieces = prop::sample::select(vec![
            "{%",
            "%}",
            "{{",
            "}}",
            "{#",
            "#}",
            "-",
            "+",
            "~",
            "*",
            "%",
            " ",
            "\n",
            "'",
            "\"",
            "(",
            ")",
            "[",
            "]",
            "generation",
            "endgeneration",
            "raw",
            "endraw",
            "if",
            "for",
            "x",
            "in",
            "messages",
            "|",
            "safe",
            "tojson",
            "1",
            "é",
            "endfor",
            "endif",
            ",",
        ]);
        prop::collection::vec(pieces, 0..40).prop_map(|v| v.concat())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]
        #[test]
        fn compile_and_render_never_panic(src in template_text()) {
            if let Ok(t) = ChatTemplate::new(&src) {
                let _ = t.render(&json!({"messages": [{"role": "user", "content": "hi"}]}), None);
            }
        }

        #[test]
        fn operator_rewrite_keeps_precedence(e in expr()) {
            let out = render(&format!("{{{{ {} }}}}|{{{{ ({}) ~ '' }}}}", e.text(0, false), e.text(0, false)), json!({}));
            let v = e.eval().to_string();
            prop_assert_eq!(out.unwrap(), format!("{v}|{v}"));
        }

        #[test]
        fn generation_rewrite_keeps_other_text(src in template_text()) {
            let out = generation::rewrite_generation_tags(&src);
            if !src.contains("generation") {
                prop_assert_eq!(out, src);
            }
        }
    }
}

/// Integer expressions over `+ - *` with as few parentheses as precedence allows (plus some
/// redundant ones), to check the operator rewrite keeps the parse.
#[derive(Clone, Debug)]
enum Expr {
    Lit(i64),
    Bin(Box<Expr>, char, Box<Expr>, bool),
}

impl Expr {
    fn prec(&self) -> u8 {
        match self {
            Expr::Lit(_) => 3,
            Expr::Bin(_, '*', _, _) => 2,
            Expr::Bin(..) => 1,
        }
    }

    fn text(&self, parent: u8, right: bool) -> String {
        match self {
            Expr::Lit(n) => n.to_string(),
            Expr::Bin(a, op, b, extra) => {
                let p = self.prec();
                let inner = format!("{} {op} {}", a.text(p, false), b.text(p, true));
                if *extra || p < parent || (p == parent && right) {
                    format!("({inner})")
                } else {
                    inner
                }
            }
        }
    }

    fn eval(&self) -> i128 {
        match self {
            Expr::Lit(n) => i128::from(*n),
            Expr::Bin(a, op, b, _) => {
                let (x, y) = (a.eval(), b.eval());
                match op {
                    '+' => x + y,
                    '-' => x - y,
                    _ => x * y,
                }
            }
        }
    }
}

fn expr() -> impl proptest::strategy::Strategy<Value = Expr> {
    use proptest::prelude::*;
    let leaf = (0i64..20).prop_map(Expr::Lit);
    leaf.prop_recursive(4, 16, 2, |inner| {
        (
            inner.clone(),
            prop::sample::select(vec!['+', '-', '*']),
            inner,
            any::<bool>(),
        )
            .prop_map(|(a, op, b, extra)| Expr::Bin(Box::new(a), op, Box::new(b), extra))
    })
}
