//! Refusing before working (issue 21 §2): the in-flight request limit, and CORS (preflights
//! answered before the key check, the real request still needing its key). The flood, the
//! 413 a client still sending can read and the queue's Retry-After are in
//! tests/py/test_flood.py.

use super::harness::{wait_for, Options, Server};
use super::http::{connect, raw_request, read_response, Response};
use serde_json::json;
use std::io::Write;
use std::time::Duration;

/// A browser's preflight for a POST of JSON with an API key.
fn preflight(s: &Server, path: &str, origin: &str) -> Response {
    s.client().request(
        "OPTIONS",
        path,
        &[
            ("Origin", origin),
            ("Access-Control-Request-Method", "POST"),
            (
                "Access-Control-Request-Headers",
                "authorization,content-type",
            ),
        ],
        b"",
    )
}

#[test]
fn cors_preflights_pass_before_the_key_and_real_requests_still_need_it() {
    let s = Server::start(Options {
        config: "[server]\ncors_allowed_origins = [\"https://app.example\"]\n".to_string(),
        env: vec![("KILN_API_KEYS".into(), "sk-cors".into())],
        ..Options::default()
    });
    let origin = "https://app.example";
    for path in ["/v1/chat/completions", "/v1/completions", "/v1/models"] {
        let r = preflight(&s, path, origin);
        assert!(
            r.status == 200 || r.status == 204,
            "{path}: {} {}",
            r.status,
            r.text()
        );
        assert_eq!(
            r.header("access-control-allow-origin"),
            Some(origin),
            "{path}"
        );
        let methods = r.header("access-control-allow-methods").unwrap_or("");
        assert!(methods.contains("POST"), "{path}: {methods}");
        let headers = r
            .header("access-control-allow-headers")
            .unwrap_or("")
            .to_ascii_lowercase();
        assert!(
            headers.contains("authorization") && headers.contains("content-type"),
            "{path}: {headers}"
        );
    }
    // Another origin gets no permission.
    let r = preflight(&s, "/v1/chat/completions", "https://evil.example");
    assert_eq!(r.header("access-control-allow-origin"), None);

    // The real request still needs its key; the page can read the 401 (and the 200).
    let chat = json!({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2});
    let body = chat.to_string();
    let json_from_origin = [("Content-Type", "application/json"), ("Origin", origin)];
    let r = s.client().request(
        "POST",
        "/v1/chat/completions",
        &json_from_origin,
        body.as_bytes(),
    );
    assert_eq!(r.status, 401, "{}", r.text());
    assert_eq!(r.header("access-control-allow-origin"), Some(origin));
    let r = s.client_with_key("sk-cors").request(
        "POST",
        "/v1/chat/completions",
        &json_from_origin,
        body.as_bytes(),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("access-control-allow-origin"), Some(origin));
    let exposed = r
        .header("access-control-expose-headers")
        .unwrap_or("")
        .to_ascii_lowercase();
    assert!(exposed.contains("retry-after"), "{exposed}");
}

#[test]
fn cors_is_off_by_default_and_star_allows_any_origin() {
    // Default: no CORS headers; a preflight is an ordinary unauthenticated request.
    let s = Server::start(Options {
        env: vec![("KILN_API_KEYS".into(), "sk-cors".into())],
        ..Options::default()
    });
    let r = preflight(&s, "/v1/chat/completions", "https://app.example");
    assert_eq!(r.status, 401, "{}", r.text());
    assert_eq!(r.header("access-control-allow-origin"), None);
    drop(s);

    let s = Server::start(Options {
        config: "[server]\ncors_allowed_origins = [\"*\"]\n".to_string(),
        env: vec![("KILN_API_KEYS".into(), "sk-cors".into())],
        ..Options::default()
    });
    let r = preflight(&s, "/v1/chat/completions", "http://localhost:3000");
    assert!(
        r.status == 200 || r.status == 204,
        "{} {}",
        r.status,
        r.text()
    );
    assert_eq!(r.header("access-control-allow-origin"), Some("*"));
    let r = s.client_with_key("sk-cors").request(
        "GET",
        "/v1/models",
        &[("Origin", "http://localhost:3000")],
        b"",
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("access-control-allow-origin"), Some("*"));
}

#[test]
fn requests_past_the_in_flight_limit_are_refused_before_their_body() {
    let s = Server::start(Options {
        config: "[server]\nmax_in_flight_requests = 2\nmetrics_public = true\n".to_string(),
        args: ["--max-num-seqs", "1"].map(String::from).to_vec(),
        ..Options::default()
    });
    let c = s.client();
    // Two streams hold the two places until they end.
    let long = json!({"prompt": "Once upon a time", "max_tokens": 300, "ignore_eos": true,
                      "temperature": 0, "stream": true});
    let held: Vec<_> = (0..2)
        .map(|_| {
            let mut conn = connect(s.addr);
            let req = raw_request(
                "POST",
                "/v1/completions",
                &[("Content-Type", "application/json")],
                long.to_string().as_bytes(),
            );
            conn.write_all(&req).unwrap();
            conn
        })
        .collect();
    wait_for("two requests in flight", Duration::from_secs(30), || {
        c.metric("kiln_requests_running") + c.metric("kiln_requests_waiting") >= 2.0
    });
    // A third is refused at once, its body unread: only its headers are sent, and the 429
    // comes back without the body ever arriving.
    let mut third = connect(s.addr);
    third
        .write_all(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\
              Content-Type: application/json\r\nContent-Length: 1000000\r\n\r\n",
        )
        .unwrap();
    let r = read_response(&mut third);
    assert_eq!(r.status, 429, "{}", r.text());
    assert_eq!(r.error()["type"], "rate_limit_error");
    assert!(
        r.error()["message"]
            .as_str()
            .unwrap()
            .contains("server.max_in_flight_requests"),
        "{}",
        r.text()
    );
    let retry: u64 = r.header("retry-after").unwrap().parse().unwrap();
    assert!((1..=60).contains(&retry), "{retry}");
    // The probes and monitoring are outside the limit.
    assert_eq!(c.get("/health").status, 200);
    assert_eq!(c.get("/ready").status, 200);
    assert_eq!(c.get("/stats").status, 200);
    // What was accepted completes.
    for mut conn in held {
        let r = read_response(&mut conn);
        assert_eq!(r.status, 200);
        assert_eq!(r.events().last().unwrap().data, "[DONE]");
    }
    // The places are given back when the streams end.
    wait_for("the places given back", Duration::from_secs(10), || {
        c.metric("kiln_http_requests_in_flight") == 0.0
    });
    let chat = json!({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2});
    c.ok("/v1/chat/completions", &chat);
}
