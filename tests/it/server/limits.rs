//! API keys, the waiting-queue limit (429 with Retry-After), keep-alive comments while
//! queued, and the probes while the model loads.

use super::harness::{Options, Server};
use super::http::{connect, raw_request, read_response};
use serde_json::json;
use std::io::Write;
use std::time::Duration;

#[test]
fn api_keys_guard_every_route_but_the_probes() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("keys");
    std::fs::write(&file, "# keys\nsk-from-file\n\n").unwrap();
    let s = Server::start(Options {
        config: format!("[server]\napi_keys_file = {:?}\n", file.to_str().unwrap()),
        env: vec![("KILN_API_KEYS".into(), "sk-Env-One, sk-env-two".into())],
        ..Options::default()
    });
    let anon = s.client();
    let chat = json!({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2});
    assert_eq!(anon.get("/health").status, 200);
    assert_eq!(anon.get("/ready").status, 200);
    for key in [
        None,
        Some("sk-wrong"),
        Some("sk-env-one"),
        Some("SK-FROM-FILE"),
        Some(""),
    ] {
        let c = match key {
            None => s.client(),
            Some(k) => s.client_with_key(k),
        };
        for (method, path) in [
            ("POST", "/v1/chat/completions"),
            ("POST", "/v1/completions"),
            ("GET", "/v1/models"),
            ("GET", "/v1/models/x"),
            ("POST", "/tokenize"),
            ("POST", "/detokenize"),
            ("GET", "/metrics"),
            ("GET", "/openapi.json"),
            ("POST", "/cache/clear"),
            ("POST", "/cache/warm"),
            ("GET", "/no/such/route"),
        ] {
            let r = c.request(
                method,
                path,
                &[("Content-Type", "application/json")],
                chat.to_string().as_bytes(),
            );
            assert_eq!(r.status, 401, "{method} {path} with {key:?}: {}", r.text());
            let e = r.error();
            assert_eq!(e["type"], "authentication_error");
        }
    }
    for key in ["sk-Env-One", "sk-env-two", "sk-from-file"] {
        let c = s.client_with_key(key);
        assert_eq!(c.get("/v1/models").status, 200, "{key}");
        c.ok("/v1/chat/completions", &chat);
    }
    // Anthropic's routes: the error in Anthropic's envelope; `x-api-key` works as well.
    let messages = json!({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2});
    let json_ct = ("Content-Type", "application/json");
    for (headers, status) in [
        (vec![json_ct], 401),
        (vec![json_ct, ("x-api-key", "sk-env-one")], 401),
        (vec![json_ct, ("x-api-key", "sk-Env-One")], 200),
    ] {
        let r = anon.request(
            "POST",
            "/v1/messages",
            &headers,
            messages.to_string().as_bytes(),
        );
        assert_eq!(r.status, status, "{headers:?}: {}", r.text());
        if status == 401 {
            let j = r.json();
            assert_eq!(j["type"], "error", "{j}");
            assert_eq!(j["error"]["type"], "authentication_error", "{j}");
        }
    }
    let r = anon.request("GET", "/v1/models", &[("x-api-key", "sk-from-file")], b"");
    assert_eq!(r.status, 200);
}

#[test]
fn a_full_queue_is_a_429_with_retry_after_and_queued_streams_get_keep_alives() {
    let s = Server::start(Options {
        config: "[server]\nsse_keep_alive = 0.2\nmetrics_public = true\n".to_string(),
        args: ["--max-num-seqs", "1", "--max-waiting", "1"]
            .map(String::from)
            .to_vec(),
        ..Options::default()
    });
    let c = s.client();
    // One long request runs; one streaming request waits behind it.
    let long = json!({"prompt": "Once upon a time", "max_tokens": 400, "ignore_eos": true, "temperature": 0});
    let running = {
        let c = c.clone();
        let long = long.clone();
        std::thread::spawn(move || c.post("/v1/completions", &long))
    };
    super::harness::wait_for("the first request to run", Duration::from_secs(30), || {
        c.metric("kiln_requests_running") >= 1.0
    });
    let mut queued = connect(s.addr);
    let mut body = long.clone();
    body["stream"] = json!(true);
    body["max_tokens"] = json!(2);
    let req = raw_request(
        "POST",
        "/v1/completions",
        &[("Content-Type", "application/json")],
        body.to_string().as_bytes(),
    );
    queued.write_all(&req).unwrap();
    super::harness::wait_for(
        "the second request to queue",
        Duration::from_secs(30),
        || c.metric("kiln_requests_waiting") >= 1.0,
    );
    // The queue is full: 429 with Retry-After, in the envelope.
    let r = c.post("/v1/completions", &long);
    assert_eq!(r.status, 429, "{}", r.text());
    // Retry-After comes from the measured drain rate: one request left the queue in the
    // last seconds, so a place frees every several seconds (never the old constant 1 s).
    let retry: u64 = r.header("retry-after").unwrap().parse().unwrap();
    assert!((2..=60).contains(&retry), "Retry-After {retry}");
    assert_eq!(r.error()["type"], "rate_limit_error");
    // The queue is checked before the body is read: headers alone get the 429.
    let mut unread = connect(s.addr);
    unread
        .write_all(
            b"POST /v1/completions HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\
              Content-Type: application/json\r\nContent-Length: 5000000\r\n\r\n",
        )
        .unwrap();
    let r = read_response(&mut unread);
    assert_eq!(r.status, 429, "{}", r.text());
    // Everything accepted completes; the queued stream saw keep-alive comments meanwhile.
    let first = running.join().unwrap();
    assert_eq!(first.status, 200);
    let r = read_response(&mut queued);
    assert_eq!(r.status, 200);
    let events = r.events();
    assert!(
        events
            .iter()
            .any(|e| e.comment.as_deref() == Some("keep-alive")),
        "no keep-alive comment while queued: {events:?}"
    );
    assert_eq!(events.last().unwrap().data, "[DONE]");
}

#[test]
fn health_answers_while_the_model_loads() {
    let s = Server::start(Options {
        wait_ready: false,
        ..Options::default()
    });
    let c = s.client();
    assert_eq!(c.get("/health").status, 200);
    let ready = c.get("/ready");
    if ready.status == 503 {
        // Still loading: generation is refused with 503 too.
        assert_eq!(ready.error()["type"], "server_error");
        let r = c.post("/v1/completions", &json!({"prompt": "a", "max_tokens": 1}));
        assert!([503, 200].contains(&r.status), "{}", r.text());
    } else {
        assert_eq!(ready.status, 200);
    }
    s.wait_ready();
    assert_eq!(c.get("/v1/models").status, 200);
}

#[test]
fn requests_past_the_timeout_are_aborted() {
    let s = Server::start(Options {
        config: "[server]\nrequest_timeout = 0.5\nmetrics_public = true\n".to_string(),
        ..Options::default()
    });
    let c = s.client();
    let long = json!({"prompt": "Once", "max_tokens": 4000, "ignore_eos": true});
    let r = c.post("/v1/completions", &long);
    assert_eq!(r.status, 408, "{}", r.text());
    assert_eq!(r.error()["code"], "request_timeout");
    let mut body = long.clone();
    body["stream"] = json!(true);
    let r = c.post("/v1/completions", &body);
    assert_eq!(r.status, 200);
    let events: Vec<_> = r
        .events()
        .into_iter()
        .filter(|e| e.comment.is_none())
        .collect();
    let n = events.len();
    assert_eq!(events[n - 2].event.as_deref(), Some("error"), "{events:?}");
    assert_eq!(events[n - 2].json()["error"]["code"], "request_timeout");
    assert_eq!(events[n - 1].data, "[DONE]");
    // The Responses API's stream: an `error` event, then `response.failed` (no `[DONE]`).
    let story = json!({"input": "Write a very long story about a kiln.", "stream": true,
                       "max_output_tokens": 4000});
    let r = c.post("/v1/responses", &story);
    assert_eq!(r.status, 200);
    let events: Vec<_> = r
        .events()
        .into_iter()
        .filter(|e| e.comment.is_none())
        .collect();
    let n = events.len();
    assert_eq!(events[n - 2].event.as_deref(), Some("error"), "{events:?}");
    assert_eq!(events[n - 2].json()["code"], "request_timeout");
    let failed = events[n - 1].json();
    assert_eq!(failed["type"], "response.failed", "{failed}");
    assert_eq!(failed["response"]["status"], "failed");
    assert_eq!(failed["sequence_number"], n - 1);
    super::harness::wait_for(
        "the aborted requests to free their KV",
        Duration::from_secs(10),
        || {
            c.metric("kiln_kv_cache_blocks{state=\"used\"}") == 0.0
                && c.metric("kiln_requests_running") == 0.0
        },
    );
}

#[test]
fn a_model_that_cannot_load_stops_the_server_with_an_error() {
    let mut s = Server::start(Options {
        args: ["--model", "/nonexistent/model.gguf"]
            .map(String::from)
            .to_vec(),
        wait_ready: false,
        ..Options::default()
    });
    let status = s.wait_exit(Duration::from_secs(20)).expect("exits");
    assert_eq!(status.code(), Some(1));
    assert!(s.log().contains("cannot load the model"), "{}", s.log());
}
