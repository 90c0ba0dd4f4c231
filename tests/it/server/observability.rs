//! `/metrics` and `/stats` after real requests: every family is exported, and the numbers add
//! up with what the API returned (finished choices = the sum over finish reasons; generated
//! and prompt tokens = the sums of the usage).

use super::harness::Server;
use kiln::metrics::names;
use serde_json::json;

#[test]
fn metrics_families_are_there_and_numbers_add_up() {
    let s = Server::default_server();
    let c = s.client();
    let (mut prompt, mut completion, mut choices) = (0.0, 0.0, 0.0);
    for (i, n) in [(0, 1), (1, 2), (2, 1)] {
        let r = c.post(
            "/v1/chat/completions",
            &json!({
                "messages": [{"role": "user", "content": format!("Say something about {i}.")}],
                "max_tokens": 6, "n": n, "temperature": 0.5, "seed": i,
            }),
        );
        assert_eq!(r.status, 200, "{}", r.text());
        let u = &r.json()["usage"];
        prompt += u["prompt_tokens"].as_f64().unwrap();
        completion += u["completion_tokens"].as_f64().unwrap();
        choices += n as f64;
    }
    let bad = c.post("/v1/chat/completions", &json!({"messages": []}));
    assert_eq!(bad.status, 400);

    let text = c.get("/metrics").text();
    for name in names::ALL {
        assert!(
            text.contains(&format!("# TYPE {name} ")),
            "{name} missing:\n{text}"
        );
    }
    for name in [
        "process_resident_memory_bytes",
        "process_cpu_seconds_total",
        "process_open_fds",
    ] {
        assert!(text.contains(name), "{name} missing");
    }
    assert_eq!(c.metric("kiln_requests_finished_total"), choices);
    assert_eq!(c.metric("kiln_generation_tokens_total"), completion);
    assert_eq!(c.metric("kiln_prompt_tokens_total"), prompt);
    assert_eq!(c.metric("kiln_request_generation_tokens_count"), 3.0);
    assert_eq!(
        c.metric("kiln_requests_total{endpoint=\"/v1/chat/completions\",status=\"200\"}"),
        3.0
    );
    assert_eq!(c.metric("kiln_rejected_total{reason=\"invalid\"}"), 1.0);
    assert_eq!(c.metric("kiln_time_to_first_token_seconds_count"), 3.0);
    assert!(c.metric("kiln_engine_step_seconds_count") >= 6.0);
    assert!(c.metric("kiln_prefix_cache_queries_total") >= 3.0);
    assert_eq!(c.metric("kiln_ready"), 1.0);
    assert!(text.contains("kiln_build_info{"), "{text}");

    let st = c.get("/stats").json();
    assert_eq!(st["status"], "ready");
    assert_eq!(st["last_1m"]["ttft_ms"]["count"], 3);
    assert!(st["last_5m"]["generated_tokens_per_s"].as_f64().unwrap() > 0.0);
    assert_eq!(st["running"], 0);
}

#[test]
fn request_ids_come_back_and_name_the_json_access_line() {
    use super::harness::{wait_for, Options};
    use std::time::Duration;
    // The config's [log] section: JSON lines, warnings plus the access lines only.
    let s = Server::start(Options {
        config: "[log]\nformat = \"json\"\nlevel = \"warn,kiln::access=info\"\n".to_string(),
        ..Options::default()
    });
    let c = s.client();
    let body = json!({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4});
    let r = c.request(
        "POST",
        "/v1/chat/completions",
        &[
            ("Content-Type", "application/json"),
            ("x-request-id", "trace-42"),
        ],
        body.to_string().as_bytes(),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("x-request-id"), Some("trace-42"));
    let answer = r.json();
    // A stream's usage chunk carries kiln's timings: one gap per token after the first.
    let body = json!({"messages": [{"role": "user", "content": "Hello"}], "max_tokens": 6,
                      "stream": true, "stream_options": {"include_usage": true}});
    let r = c.request(
        "POST",
        "/v1/chat/completions",
        &[("Content-Type", "application/json")],
        body.to_string().as_bytes(),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let last: serde_json::Value = r
        .text()
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .rfind(|d| *d != "[DONE]")
        .map(|d| serde_json::from_str(d).expect("a JSON chunk"))
        .expect("chunks");
    let t = &last["timings"];
    let generated = last["usage"]["completion_tokens"].as_u64().unwrap();
    assert_eq!(
        t["itl_ms"].as_array().unwrap().len() as u64,
        generated - 1,
        "{last}"
    );
    let (queue, ttft, total) = (
        t["queue_ms"].as_f64().unwrap(),
        t["ttft_ms"].as_f64().unwrap(),
        t["duration_ms"].as_f64().unwrap(),
    );
    assert!(0.0 <= queue && queue <= ttft && ttft <= total, "{t}");
    // An id that could forge a log line is replaced by a fresh one.
    let r = c.request("GET", "/v1/models", &[("x-request-id", "a\"b<c>")], b"");
    let fresh = r.header("x-request-id").unwrap().to_string();
    assert!(fresh.starts_with("req-"), "{fresh}");
    wait_for("access lines", Duration::from_secs(10), || {
        s.log().contains("trace-42") && s.log().contains(&fresh)
    });
    let log = s.log();
    let line = log
        .lines()
        .find(|l| l.contains("trace-42") && l.contains("kiln::access"))
        .unwrap_or_else(|| panic!("no access line for trace-42 in:\n{log}"));
    let v: serde_json::Value = serde_json::from_str(line).expect("a JSON log line");
    assert_eq!(v["route"], "/v1/chat/completions");
    assert_eq!(v["status"], 200);
    assert_eq!(v["request_id"], "trace-42");
    // The generation's numbers, as the response reported them.
    let usage = &answer["usage"];
    assert_eq!(v["prompt_tokens"], usage["prompt_tokens"], "{line}");
    assert_eq!(v["generated_tokens"], usage["completion_tokens"], "{line}");
    assert_eq!(
        v["cached_tokens"],
        usage["prompt_tokens_details"]["cached_tokens"]
    );
    assert_eq!(v["finish_reason"], answer["choices"][0]["finish_reason"]);
    let (queue, ttft) = (
        v["queue_ms"].as_f64().unwrap(),
        v["ttft_ms"].as_f64().unwrap(),
    );
    assert!(0.0 <= queue && queue <= ttft, "{line}");
    // Routes that generate nothing have no generation fields.
    let models = log
        .lines()
        .find(|l| l.contains(&fresh) && l.contains("kiln::access"))
        .unwrap();
    assert!(!models.contains("prompt_tokens"), "{models}");
    assert!(
        !log.contains("model loaded"),
        "info lines are filtered out:\n{log}"
    );
}

#[test]
fn stats_show_the_prefix_tiers_and_the_cache_clears_over_http() {
    let s = Server::default_server();
    let c = s.client();
    let system: String = (0..12)
        .map(|i| format!("Rule {i}: answer in one short sentence. "))
        .collect();
    let body = json!({
        "messages": [{"role": "system", "content": system}, {"role": "user", "content": "Hi"}],
        "max_tokens": 2, "temperature": 0,
    });
    let cached = |c: &super::http::Client| {
        let r = c.post("/v1/chat/completions", &body);
        assert_eq!(r.status, 200, "{}", r.text());
        r.json()["usage"]["prompt_tokens_details"]["cached_tokens"]
            .as_u64()
            .unwrap_or(0)
    };
    assert_eq!(cached(&c), 0);
    assert!(cached(&c) >= 64);
    let st = c.get("/stats").json();
    assert!(
        st["prefix_cache"]["pool_hits"].as_u64().unwrap() >= 1,
        "{st}"
    );
    assert_eq!(st["prefix_cache"]["disk_degraded"], false);
    assert_eq!(st["prefix_cache"]["disk_reads_waiting"], 0, "{st}");
    let r = c.post("/cache/clear", &json!({}));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["models"].as_array().unwrap().len(), 1);
    assert_eq!(cached(&c), 0, "the cleared cache still served the prompt");
}

#[test]
fn a_warmed_prompt_is_served_from_cache_with_the_same_reply() {
    let s = Server::default_server();
    let c = s.client();
    let system: String = (0..12)
        .map(|i| format!("Rule {i}: answer in one short sentence. "))
        .collect();
    let messages =
        json!([{"role": "system", "content": system}, {"role": "user", "content": "Hi"}]);
    let body = json!({
        "messages": messages, "max_tokens": 6, "temperature": 0,
        "logprobs": true, "top_logprobs": 2,
    });
    let ask = |c: &super::http::Client| {
        let r = c.post("/v1/chat/completions", &body);
        assert_eq!(r.status, 200, "{}", r.text());
        let v = r.json();
        let cached = v["usage"]["prompt_tokens_details"]["cached_tokens"]
            .as_u64()
            .unwrap_or(0);
        (v["choices"][0].clone(), cached)
    };
    let (cold, c0) = ask(&c);
    assert_eq!(c0, 0);
    assert_eq!(c.post("/cache/clear", &json!({})).status, 200);
    let r = c.post("/cache/warm", &json!({"messages": messages}));
    assert_eq!(r.status, 200, "{}", r.text());
    let w = r.json();
    let bs = w["block_size"].as_u64().unwrap();
    assert!(w["prompt_tokens"].as_u64().unwrap() >= 64, "{w}");
    assert_eq!(w["cached_tokens"], 0, "{w}");
    assert_eq!(
        w["cached_blocks"].as_u64().unwrap(),
        w["prompt_tokens"].as_u64().unwrap() / bs
    );
    let (warm, c1) = ask(&c);
    assert!(c1 > 0, "the warmed prompt was not served from cache");
    assert_eq!(warm, cold, "a reply after warming differs");
    // A completions body warms too; a bad body is a 400 in the OpenAI envelope.
    let r = c.post("/cache/warm", &json!({"prompt": system}));
    assert_eq!(r.status, 200, "{}", r.text());
    for bad in [json!({"messages": 5}), json!({"prompt": [[-1]]}), json!([])] {
        let r = c.post("/cache/warm", &bad);
        assert_eq!(r.status, 400, "{bad}: {}", r.text());
        assert_eq!(r.error()["type"], "invalid_request_error", "{bad}");
    }
}
