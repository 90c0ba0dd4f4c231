//! Faults inside an engine step, with a real `kiln serve` (issue 21 §1, RELIABILITY 12): a
//! panic in the forward pass, in sampling, in output processing or in a grammar commit ends
//! the requests in flight with a 500 (OpenAI's envelope) or an SSE error event and
//! `[DONE]`, is counted in `kiln_engine_faults_total`, turns `/ready` 503 while the worker is
//! rebuilt, and the server then serves again without a restart; a grammar error fails its
//! request (never `finish_reason: "stop"` on text that does not validate); a failed rebuild
//! turns `/health` 503. Faults come from the hidden `--inject-fault STAGE@STEP`.

use super::harness::{wait_for, Options, Server};
use super::http::{connect, raw_request, read_response, Client, Response};
use serde_json::{json, Value};
use std::io::Write;
use std::time::Duration;

fn server(faults: &[&str]) -> Server {
    let mut args = Vec::new();
    for f in faults {
        args.push("--inject-fault".to_string());
        args.push(f.to_string());
    }
    Server::start(Options {
        args,
        config: "[server]\nmetrics_public = true\n".to_string(),
        ..Options::default()
    })
}

fn completion(c: &Client, body: Value) -> Response {
    let mut s = connect(c.addr);
    let req = raw_request(
        "POST",
        "/v1/completions",
        &[("Content-Type", "application/json")],
        body.to_string().as_bytes(),
    );
    s.write_all(&req).unwrap();
    read_response(&mut s)
}

fn chat_json(c: &Client) -> Response {
    c.post(
        "/v1/chat/completions",
        &json!({
            "messages": [{"role": "user", "content": "Give me a JSON object about a cat."}],
            "response_format": {"type": "json_object"},
            "max_tokens": 24,
        }),
    )
}

/// A 500 with OpenAI's envelope, type `server_error`, whose message contains `says`.
fn assert_500(r: &Response, says: &str) {
    assert_eq!(r.status, 500, "{}", r.text());
    let e = r.error();
    assert_eq!(e["type"], "server_error", "{e}");
    assert!(e["message"].as_str().unwrap().contains(says), "{e}");
}

#[test]
fn a_fault_at_each_stage_fails_its_requests_and_the_server_heals() {
    // Each injection fires the first time its stage is reached, so consecutive requests meet
    // them in turn: forward, sample, emit, commit (panics), then a grammar error.
    let s = server(&[
        "forward@1",
        "slow-rebuild@1",
        "sample@1",
        "emit@1",
        "commit@1",
        "grammar@1",
    ]);
    let c = s.client();
    let plain = json!({"prompt": "The sky is", "max_tokens": 8, "ignore_eos": true});

    // Forward pass: a 500; the worker then rebuilds slowly: not ready, still alive, and a
    // request sent meanwhile waits for the rebuilt worker instead of failing.
    assert_500(&completion(&c, plain.clone()), "engine failed");
    assert_eq!(c.get("/ready").status, 503, "{}", s.log());
    assert_eq!(c.get("/stats").json()["status"], "recovering");
    assert_eq!(c.get("/health").status, 200);
    // Sampling, streamed: an error event, then [DONE].
    let mut streamed = plain.clone();
    streamed["stream"] = json!(true);
    let r = completion(&c, streamed);
    assert_eq!(r.status, 200, "{}", r.text());
    let events = r.events();
    let n = events.len();
    assert!(n >= 2, "{events:?}");
    assert_eq!(events[n - 2].event.as_deref(), Some("error"), "{events:?}");
    assert_eq!(events[n - 2].json()["error"]["type"], "server_error");
    assert_eq!(events[n - 1].data, "[DONE]");
    wait_for("ready after the rebuild", Duration::from_secs(20), || {
        c.get("/ready").status == 200
    });
    // Output processing.
    assert_500(&completion(&c, plain.clone()), "engine failed");
    // Grammar commit (a constrained request).
    assert_500(&chat_json(&c), "engine failed");
    // A grammar error is that request's error, not a "stop" on invalid JSON.
    assert_500(&chat_json(&c), "output constraint failed");

    // Healed: ready, healthy, and both kinds of request complete.
    wait_for("ready", Duration::from_secs(20), || {
        c.get("/ready").status == 200
    });
    assert_eq!(c.get("/health").status, 200);
    let r = chat_json(&c);
    assert_eq!(r.status, 200, "{}", r.text());
    let r = completion(&c, plain);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["choices"][0]["finish_reason"], "length");
    assert_eq!(c.metric("kiln_engine_faults_total"), 4.0);
    assert_eq!(
        c.metric("kiln_requests_finished_total{finish_reason=\"error\"}"),
        5.0
    );
    assert!(s.log().contains("engine worker rebuilt"), "{}", s.log());
}

#[test]
fn a_failed_rebuild_turns_health_503_and_refuses_requests() {
    let s = server(&["forward@1", "rebuild@1"]);
    let c = s.client();
    let r = completion(&c, json!({"prompt": "a", "max_tokens": 4}));
    assert_500(&r, "engine failed");
    wait_for("health 503", Duration::from_secs(20), || {
        c.get("/health").status == 503
    });
    assert_eq!(c.get("/ready").status, 503);
    let r = c.post("/v1/completions", &json!({"prompt": "a", "max_tokens": 2}));
    assert_eq!(r.status, 503, "{}", r.text());
    assert_eq!(c.metric("kiln_engine_faults_total"), 1.0);
}
