//! ../shared/guide/RELIABILITY.md items 1-9 as a table: each bad input gets its 4xx in the
//! OpenAI envelope (with `param` where one field is at fault), never a 5xx, and the server
//! stays healthy and serving afterwards.

use super::harness::{Options, Server};
use super::http::{connect, raw_request, read_response, send_raw};
use serde_json::{json, Value};
use std::io::Write;
use std::time::{Duration, Instant};

struct Case {
    name: &'static str,
    path: &'static str,
    content_type: Option<&'static str>,
    body: Vec<u8>,
    status: u16,
    /// Expected `param` (None: not checked), and `code`.
    param: Option<&'static str>,
    code: Option<&'static str>,
}

fn case(
    name: &'static str,
    path: &'static str,
    body: impl Into<Vec<u8>>,
    status: u16,
    param: Option<&'static str>,
) -> Case {
    Case {
        name,
        path,
        content_type: Some("application/json"),
        body: body.into(),
        status,
        param,
        code: None,
    }
}

fn chat(extra: Value) -> Vec<u8> {
    let mut b = json!({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4});
    for (k, v) in extra.as_object().unwrap() {
        b[k] = v.clone();
    }
    b.to_string().into_bytes()
}

#[test]
fn bad_input_gets_a_clear_4xx_and_the_server_stays_healthy() {
    let s = Server::start(Options {
        // A small KV cache (1024 positions) so "fits the context, not the KV cache" exists.
        config: "[server]\nmax_body_bytes = \"1MiB\"\n".to_string(),
        args: vec!["--kv-cache".into(), "1024".into()],
        ..Options::default()
    });
    let c = s.client();
    let long_prompt = "hello ".repeat(9000);
    let mid_prompt = "hello ".repeat(700);
    let deep = format!(
        "{{\"messages\":{}{}}}",
        "[".repeat(10_000),
        "]".repeat(10_000)
    );
    let stops: Vec<String> = (0..100_000).map(|i| format!("s{i}")).collect();
    let mut invalid_utf8 = br#"{"messages":[{"role":"user","content":"a"#.to_vec();
    invalid_utf8.extend_from_slice(&[0xff, 0xfe, 0xc3]);
    invalid_utf8.extend_from_slice(br#""}]}"#);
    let mut raw_nul = br#"{"messages":[{"role":"user","content":"a"#.to_vec();
    raw_nul.push(0);
    raw_nul.extend_from_slice(br#""}]}"#);
    let ctx = Some("context_length_exceeded");
    let cases = vec![
        // 1. Not a JSON object, or not JSON at all.
        case(
            "json string",
            "/v1/chat/completions",
            "\"hello\"",
            400,
            None,
        ),
        case("json array", "/v1/chat/completions", "[1,2]", 400, None),
        case("json number", "/v1/chat/completions", "42", 400, None),
        case("json null", "/v1/chat/completions", "null", 400, None),
        case(
            "truncated json",
            "/v1/chat/completions",
            "{\"messages\": [",
            400,
            None,
        ),
        case("empty body", "/v1/chat/completions", "", 400, None),
        case(
            "trailing garbage",
            "/v1/chat/completions",
            "{\"messages\":[]} x",
            400,
            None,
        ),
        Case {
            content_type: Some("text/plain"),
            ..case(
                "text/plain",
                "/v1/chat/completions",
                chat(json!({})),
                415,
                None,
            )
        },
        Case {
            content_type: None,
            ..case(
                "no content type",
                "/v1/completions",
                "{\"prompt\":\"a\"}",
                415,
                None,
            )
        },
        // 2. Wrong types.
        case(
            "max_tokens string",
            "/v1/chat/completions",
            chat(json!({"max_tokens": "10"})),
            400,
            Some("max_tokens"),
        ),
        case(
            "messages object",
            "/v1/chat/completions",
            "{\"messages\":{}}",
            400,
            Some("messages"),
        ),
        case(
            "messages missing",
            "/v1/chat/completions",
            "{\"model\":\"x\"}",
            400,
            Some("messages"),
        ),
        case(
            "messages empty",
            "/v1/chat/completions",
            "{\"messages\":[]}",
            400,
            Some("messages"),
        ),
        case(
            "unknown role",
            "/v1/chat/completions",
            r#"{"messages":[{"role":"wizard","content":"x"}]}"#,
            400,
            Some("messages[0].role"),
        ),
        case(
            "unknown content part",
            "/v1/chat/completions",
            r#"{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}]}"#,
            400,
            Some("messages[0].content[0].type"),
        ),
        case(
            "content number",
            "/v1/chat/completions",
            r#"{"messages":[{"role":"user","content":5}]}"#,
            400,
            Some("messages[0].content"),
        ),
        case(
            "temperature string",
            "/v1/chat/completions",
            chat(json!({"temperature": "hot"})),
            400,
            Some("temperature"),
        ),
        case(
            "temperature 5",
            "/v1/chat/completions",
            chat(json!({"temperature": 5})),
            400,
            Some("temperature"),
        ),
        case(
            "stop number",
            "/v1/chat/completions",
            chat(json!({"stop": 5})),
            400,
            Some("stop"),
        ),
        case(
            "stream string",
            "/v1/chat/completions",
            chat(json!({"stream": "yes"})),
            400,
            Some("stream"),
        ),
        case(
            "prompt object",
            "/v1/completions",
            "{\"prompt\":{}}",
            400,
            Some("prompt"),
        ),
        // 3. Context exceeded (prompt alone; prompt + max_tokens; context fits, KV does not).
        Case {
            code: ctx,
            ..case(
                "prompt over context",
                "/v1/completions",
                json!({"prompt": long_prompt}).to_string(),
                400,
                Some("prompt"),
            )
        },
        Case {
            code: ctx,
            ..case(
                "prompt + max_tokens over context",
                "/v1/chat/completions",
                chat(json!({"max_tokens": 8190})),
                400,
                Some("messages"),
            )
        },
        Case {
            code: ctx,
            ..case(
                "over the KV cache",
                "/v1/completions",
                json!({"prompt": mid_prompt, "max_tokens": 400}).to_string(),
                400,
                Some("prompt"),
            )
        },
        // 4. max_tokens out of range.
        case(
            "max_tokens 0",
            "/v1/chat/completions",
            chat(json!({"max_tokens": 0})),
            400,
            Some("max_tokens"),
        ),
        case(
            "max_tokens -1",
            "/v1/chat/completions",
            chat(json!({"max_tokens": -1})),
            400,
            Some("max_tokens"),
        ),
        case(
            "max_tokens 2^63",
            "/v1/completions",
            "{\"prompt\":\"a\",\"max_tokens\":9223372036854775808}",
            400,
            Some("max_tokens"),
        ),
        case(
            "max_completion_tokens 0",
            "/v1/chat/completions",
            chat(json!({"max_completion_tokens": 0})),
            400,
            Some("max_completion_tokens"),
        ),
        // 5. Counts.
        case(
            "n 10^9",
            "/v1/chat/completions",
            chat(json!({"n": 1_000_000_000})),
            400,
            Some("n"),
        ),
        case(
            "top_logprobs 10^6",
            "/v1/chat/completions",
            chat(json!({"logprobs": true, "top_logprobs": 1_000_000})),
            400,
            Some("top_logprobs"),
        ),
        case(
            "top_logprobs -1",
            "/v1/chat/completions",
            chat(json!({"logprobs": true, "top_logprobs": -1})),
            400,
            Some("top_logprobs"),
        ),
        case(
            "completions logprobs 10^6",
            "/v1/completions",
            "{\"prompt\":\"a\",\"logprobs\":1000000}",
            400,
            Some("logprobs"),
        ),
        case(
            "10^5 stop strings",
            "/v1/chat/completions",
            chat(json!({"stop": stops})),
            400,
            Some("stop"),
        ),
        case(
            "logit_bias out of vocabulary",
            "/v1/chat/completions",
            chat(json!({"logit_bias": {"99999999": 5}})),
            400,
            Some("logit_bias"),
        ),
        case(
            "logit_bias not an id",
            "/v1/chat/completions",
            chat(json!({"logit_bias": {"hello": 5}})),
            400,
            Some("logit_bias"),
        ),
        case(
            "logit_bias value 1000",
            "/v1/chat/completions",
            chat(json!({"logit_bias": {"5": 1000}})),
            400,
            Some("logit_bias"),
        ),
        // 6. Token ids out of range.
        case(
            "negative token id",
            "/v1/completions",
            "{\"prompt\":[1,-1]}",
            400,
            Some("prompt"),
        ),
        case(
            "token id past the vocabulary",
            "/v1/completions",
            "{\"prompt\":[[1],[1000000000]]}",
            400,
            Some("prompt"),
        ),
        case(
            "token id 2^64",
            "/v1/completions",
            "{\"prompt\":[18446744073709551616]}",
            400,
            None,
        ),
        // 7. Invalid UTF-8, lone surrogates, NUL.
        case(
            "invalid utf-8",
            "/v1/chat/completions",
            invalid_utf8,
            400,
            None,
        ),
        case(
            "lone surrogate",
            "/v1/chat/completions",
            r#"{"messages":[{"role":"user","content":"\ud800"}]}"#,
            400,
            None,
        ),
        case("raw NUL", "/v1/chat/completions", raw_nul, 400, None),
        case(
            "escaped NUL",
            "/v1/chat/completions",
            r#"{"messages":[{"role":"user","content":"a\u0000b"}]}"#,
            400,
            Some("messages[0].content"),
        ),
        case(
            "escaped NUL in prompt",
            "/v1/completions",
            r#"{"prompt":"a\u0000b"}"#,
            400,
            Some("prompt"),
        ),
        // 8. Nesting.
        case("nested 10k deep", "/v1/chat/completions", deep, 400, None),
        // Other refusals.
        // A model name that is not a string (any string reaches a server of one model, as
        // llama-server's does: tests/py/test_llama_server_compat.py).
        case(
            "model not a string",
            "/v1/chat/completions",
            chat(json!({"model": 5})),
            400,
            Some("model"),
        ),
        case(
            "unknown route",
            "/v1/no-such-route",
            chat(json!({})),
            404,
            None,
        ),
        case(
            "embeddings without input",
            "/v1/embeddings",
            r#"{"model": null}"#,
            400,
            Some("input"),
        ),
        case("tokenize neither", "/tokenize", "{}", 400, Some("prompt")),
    ];
    for k in &cases {
        let mut headers = Vec::new();
        if let Some(ct) = k.content_type {
            headers.push(("Content-Type", ct));
        }
        let r = send_raw(s.addr, &raw_request("POST", k.path, &headers, &k.body));
        assert_eq!(r.status, k.status, "{}: {}", k.name, r.text());
        let e = r.error();
        if let Some(p) = k.param {
            assert_eq!(e["param"], p, "{}: {e}", k.name);
        }
        if let Some(code) = k.code {
            assert_eq!(e["code"], code, "{}: {e}", k.name);
            let m = e["message"].as_str().unwrap();
            assert!(
                m.chars().any(|ch| ch.is_ascii_digit()),
                "{}: counts in {m:?}",
                k.name
            );
        }
        if k.status == 400 {
            assert_eq!(e["type"], "invalid_request_error", "{}", k.name);
        }
    }

    // Wrong method: 405 in the envelope.
    let r = c.get("/v1/chat/completions");
    assert_eq!(r.status, 405, "{}", r.text());
    r.error();

    // 8. A huge body: 413 from the declared length, without the server reading it all (we
    // send 1 KiB of the 100 MB announced), and from a chunked body past the limit.
    let mut sock = connect(s.addr);
    let head = "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100000000\r\nConnection: close\r\n\r\n";
    sock.write_all(head.as_bytes()).unwrap();
    sock.write_all(&[b' '; 1024]).unwrap();
    let t0 = Instant::now();
    let r = read_response(&mut sock);
    assert_eq!(r.status, 413, "{}", r.text());
    assert!(t0.elapsed() < Duration::from_secs(5));
    assert_eq!(r.error()["code"], "request_too_large");
    let mut sock = connect(s.addr);
    let head = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n";
    sock.write_all(head.as_bytes()).unwrap();
    let chunk = vec![b' '; 64 * 1024];
    // 17 chunks of 64 KiB pass the 1 MiB limit with the last one, so the server has read
    // everything sent when it answers.
    for _ in 0..17 {
        let mut piece = format!("{:x}\r\n", chunk.len()).into_bytes();
        piece.extend_from_slice(&chunk);
        piece.extend_from_slice(b"\r\n");
        if sock.write_all(&piece).is_err() {
            break;
        }
    }
    let r = read_response(&mut sock);
    assert_eq!(r.status, 413, "{}", r.text());

    // A huge header: 431 (hyper refuses it before any handler runs).
    let big = "x".repeat(1 << 20);
    let r = send_raw(
        s.addr,
        &raw_request("GET", "/health", &[("X-Big", &big)], b""),
    );
    assert_eq!(r.status, 431, "{}", r.text());

    // 9. Streams cut by max_tokens in the middle of multi-byte characters: every chunk is
    // valid UTF-8 JSON (parse_sse panics otherwise).
    for max_tokens in 1..=6 {
        let body = json!({
            "prompt": "日本語の文章：猫は🐱、犬は🐶。東京は",
            "max_tokens": max_tokens, "temperature": 0, "stream": true,
        });
        let r = c.post("/v1/completions", &body);
        assert_eq!(r.status, 200);
        for e in r
            .events()
            .iter()
            .filter(|e| e.comment.is_none() && e.data != "[DONE]")
        {
            e.json();
        }
    }
    let body = json!({"messages": [{"role": "user", "content": "Écris « café » en japonais : カフェ"}],
                      "stop": ["é", "カ"], "max_tokens": 12, "temperature": 0, "stream": true});
    let r = c.post("/v1/chat/completions", &body);
    assert_eq!(r.status, 200);
    for e in r
        .events()
        .iter()
        .filter(|e| e.comment.is_none() && e.data != "[DONE]")
    {
        let text = e.json()["choices"][0]["delta"]["content"]
            .as_str()
            .unwrap_or("")
            .to_string();
        assert!(!text.contains('é') && !text.contains('カ'), "{text}");
    }

    // Still healthy and serving.
    assert_eq!(c.get("/health").status, 200);
    assert_eq!(c.get("/ready").status, 200);
    let r = c.ok(
        "/v1/chat/completions",
        &json!({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3}),
    );
    assert_eq!(r["choices"][0]["message"]["role"], "assistant");
    assert!(!s.log().contains("panicked"), "{}", s.log());
}
