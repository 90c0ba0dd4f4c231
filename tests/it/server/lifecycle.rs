//! Clients that hang up (streaming or not, queued or running) and SIGTERM with requests in
//! flight (faults inside an engine step: [`super::faults`]).

use super::harness::{wait_for, Options, Server};
use super::http::{connect, raw_request, read_response, Client};
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

fn send(c: &Client, path: &str, body: &Value) -> TcpStream {
    let mut s = connect(c.addr);
    let req = raw_request(
        "POST",
        path,
        &[("Content-Type", "application/json")],
        body.to_string().as_bytes(),
    );
    s.write_all(&req).unwrap();
    s
}

fn idle(c: &Client) -> bool {
    c.metric("kiln_kv_cache_blocks{state=\"used\"}") == 0.0
        && c.metric("kiln_requests_running") == 0.0
        && c.metric("kiln_requests_waiting") == 0.0
}

#[test]
fn abandoned_requests_are_aborted_and_free_their_kv() {
    let s = Server::start(Options {
        args: ["--max-waiting", "512"].map(String::from).to_vec(),
        ..Options::default()
    });
    let c = s.client();
    assert!(idle(&c));
    let long = |stream: bool| {
        json!({"messages": [{"role": "user", "content": "Tell me a long story."}],
               "max_tokens": 2000, "ignore_eos": true, "stream": stream})
    };
    // A stream abandoned after its first chunk, and a non-streaming request while running.
    let mut first = send(&c, "/v1/chat/completions", &long(true));
    let mut buf = [0u8; 4096];
    let n = first.read(&mut buf).unwrap();
    assert!(String::from_utf8_lossy(&buf[..n]).contains("200 OK"));
    let running = send(&c, "/v1/chat/completions", &long(false));
    wait_for("both running", Duration::from_secs(30), || {
        c.metric("kiln_requests_running") >= 2.0
    });
    drop(first);
    drop(running);
    wait_for(
        "KV back to baseline after 2 disconnects",
        Duration::from_secs(10),
        || idle(&c),
    );

    // vLLM's cancellation test: 200 requests (streaming and not; most of them queued)
    // abandoned after 0.5 s.
    let socks: Vec<TcpStream> = (0..200)
        .map(|i| {
            let path = if i % 3 == 0 { "/v1/completions" } else { "/v1/chat/completions" };
            let body = if i % 3 == 0 {
                json!({"prompt": format!("Story {i}:"), "max_tokens": 2000, "ignore_eos": true, "stream": i % 2 == 0})
            } else {
                long(i % 2 == 0)
            };
            send(&c, path, &body)
        })
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    assert!(c.metric("kiln_requests_running") + c.metric("kiln_requests_waiting") > 0.0);
    drop(socks);
    wait_for(
        "KV back to baseline after 200 disconnects",
        Duration::from_secs(20),
        || idle(&c),
    );
    // A fresh request completes promptly.
    let t0 = Instant::now();
    c.ok(
        "/v1/chat/completions",
        &json!({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 8}),
    );
    assert!(t0.elapsed() < Duration::from_secs(10), "{:?}", t0.elapsed());
    assert_eq!(c.metric("kiln_http_requests_in_flight"), 0.0);
}

#[test]
fn sigterm_drains_then_aborts_and_exits_zero() {
    let mut s = Server::start(Options {
        config: "[server]\ndrain_timeout = 1.5\n".to_string(),
        ..Options::default()
    });
    let c = s.client();
    // A stream too long for the drain window, and a short request that fits in it.
    let mut long = send(
        &c,
        "/v1/completions",
        &json!({"prompt": "Once", "max_tokens": 5000, "ignore_eos": true, "stream": true}),
    );
    let short = send(
        &c,
        "/v1/completions",
        &json!({"prompt": "Hello", "max_tokens": 4}),
    );
    wait_for("the long stream to run", Duration::from_secs(30), || {
        c.metric("kiln_requests_running") >= 1.0
    });
    s.signal(libc::SIGTERM);
    // At once: not ready, and new requests are refused with 503.
    wait_for("/ready to turn 503", Duration::from_secs(2), || {
        c.get("/ready").status == 503
    });
    let r = c.post(
        "/v1/completions",
        &json!({"prompt": "Hello", "max_tokens": 4}),
    );
    assert_eq!(r.status, 503, "{}", r.text());
    assert_eq!(r.error()["type"], "server_error");
    // The short one completed normally; the long one ends with finish_reason "abort".
    let mut short = short;
    let r = read_response(&mut short);
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(["stop", "length"].contains(&r.json()["choices"][0]["finish_reason"].as_str().unwrap()));
    let r = read_response(&mut long);
    let events = r.events();
    assert_eq!(events.last().unwrap().data, "[DONE]");
    let finish: Vec<String> = events
        .iter()
        .filter(|e| e.comment.is_none() && e.data != "[DONE]")
        .filter_map(|e| {
            e.json()["choices"][0]["finish_reason"]
                .as_str()
                .map(str::to_string)
        })
        .collect();
    assert_eq!(finish, ["abort"], "{events:?}");
    let status = s
        .wait_exit(Duration::from_secs(15))
        .expect("exited after the drain");
    assert_eq!(status.code(), Some(0), "{}", s.log());
    assert!(s.log().contains("draining"), "{}", s.log());
}
