//! `kiln top`: a live terminal view of a running server's `/stats` (plain ANSI): request rate,
//! generated tokens/s with a sparkline of the last minute, TTFT / inter-token / end-to-end
//! percentiles, the queue and the KV cache (of the default model), then a line per model when
//! the server serves several. Ctrl-C quits; `--once` prints one frame.

use anyhow::{bail, Context};
use http_body_util::{BodyExt, Empty, Limited};
use hyper::body::Bytes;
use hyper::header::AUTHORIZATION;
use hyper::{Request, StatusCode, Uri};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::Value;
use std::io::Write;
use std::time::Duration;

#[derive(clap::Args)]
pub struct Args {
    /// The server's base URL (plain HTTP).
    #[arg(long, default_value = "http://127.0.0.1:8080", env = "KILN_URL")]
    url: String,
    /// API key, when the server requires one for /stats.
    #[arg(long, env = "KILN_API_KEY", hide_env_values = true)]
    api_key: Option<String>,
    /// Seconds between refreshes.
    #[arg(long, default_value_t = 1.0)]
    interval: f64,
    /// Print one frame (no screen clearing) and exit.
    #[arg(long)]
    once: bool,
}

/// Largest `/stats` body read (it is a few KB).
const MAX_BODY: usize = 4 << 20;
/// How long one poll may take, connecting included.
const TIMEOUT: Duration = Duration::from_secs(5);

/// `http://host[:port][/prefix]` -> the URI of `/stats` under it.
fn stats_uri(url: &str) -> anyhow::Result<Uri> {
    let base: Uri = url.parse().with_context(|| format!("{url} is not a URL"))?;
    if base.scheme_str() != Some("http") {
        bail!("kiln top speaks plain HTTP: the URL must start with http://");
    }
    let authority = base
        .authority()
        .with_context(|| format!("no host in {url}"))?;
    if authority.host().is_empty() {
        bail!("no host in {url}");
    }
    let prefix = base.path().trim_end_matches('/');
    format!("http://{authority}{prefix}/stats")
        .parse()
        .with_context(|| format!("{url} is not a URL"))
}

/// A blocking HTTP client for `/stats`: hyper's, driven by a current-thread runtime, so the
/// server may answer with any framing (content-length, chunked, keep-alive).
struct StatsClient {
    rt: tokio::runtime::Runtime,
    http: Client<HttpConnector, Empty<Bytes>>,
    uri: Uri,
    key: Option<String>,
}

impl StatsClient {
    fn new(uri: Uri, key: Option<String>) -> anyhow::Result<StatsClient> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("starting the HTTP client's runtime")?;
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(Duration::from_secs(3)));
        let http = Client::builder(TokioExecutor::new()).build(connector);
        Ok(StatsClient { rt, http, uri, key })
    }

    /// GET `/stats` and parse the JSON body; a non-200 status is an error carrying the body.
    fn get(&self) -> anyhow::Result<Value> {
        let uri = &self.uri;
        let mut req = Request::get(uri.clone());
        if let Some(k) = &self.key {
            req = req.header(AUTHORIZATION, format!("Bearer {k}"));
        }
        let req = req.body(Empty::new()).context("building the request")?;
        let body = self.rt.block_on(async {
            tokio::time::timeout(TIMEOUT, async {
                let resp = self
                    .http
                    .request(req)
                    .await
                    .with_context(|| format!("GET {uri}"))?;
                let status = resp.status();
                let body = Limited::new(resp.into_body(), MAX_BODY)
                    .collect()
                    .await
                    .map_err(|e| anyhow::anyhow!("GET {uri}: reading the body: {e}"))?
                    .to_bytes();
                anyhow::Ok((status, body))
            })
            .await
            .map_err(|_| anyhow::anyhow!("GET {uri}: no answer within {TIMEOUT:?}"))?
        });
        let (status, body) = body?;
        if status != StatusCode::OK {
            bail!(
                "GET {uri}: HTTP {status}: {}",
                String::from_utf8_lossy(&body).trim()
            );
        }
        serde_json::from_slice(&body).with_context(|| format!("GET {uri}: not JSON"))
    }
}

/// `▁▂▃▄▅▆▇█` scaled to the largest value.
fn sparkline(v: &[f64]) -> String {
    const BARS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
    let max = v.iter().copied().fold(0.0, f64::max);
    v.iter()
        .map(|&x| {
            if max <= 0.0 {
                BARS[0]
            } else {
                BARS[((x / max) * 7.0).round().clamp(0.0, 7.0) as usize]
            }
        })
        .collect()
}

/// A bar of `width` cells filled to `ratio`.
fn gauge(ratio: f64, width: usize) -> String {
    let filled = (ratio.clamp(0.0, 1.0) * width as f64).round() as usize;
    format!("[{}{}]", "#".repeat(filled), ".".repeat(width - filled))
}

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or(0.0)
}

fn pct_line(name: &str, w: &Value) -> String {
    format!(
        "{name:<12} p50 {:>8.1}  p95 {:>8.1}  p99 {:>8.1} ms   (n={})",
        f(&w["p50"]),
        f(&w["p95"]),
        f(&w["p99"]),
        w["count"].as_u64().unwrap_or(0)
    )
}

/// One frame of the view.
fn frame(url: &str, s: &Value, history: &[f64]) -> String {
    let m1 = &s["last_1m"];
    let m5 = &s["last_5m"];
    let mut out = String::new();
    let mut line = |l: String| {
        out.push_str(&l);
        out.push('\n');
    };
    line(format!(
        "kiln top — {url} — {}",
        s["status"].as_str().unwrap_or("?")
    ));
    line(String::new());
    line(format!(
        "requests/s   {:>8.2} (1m)  {:>8.2} (5m)",
        f(&m1["requests_per_s"]),
        f(&m5["requests_per_s"])
    ));
    line(format!(
        "gen tok/s    {:>8.1} (1m)  {:>8.1} (5m)   {}",
        f(&m1["generated_tokens_per_s"]),
        f(&m5["generated_tokens_per_s"]),
        sparkline(history)
    ));
    line(format!(
        "prompt tok/s {:>8.1} (1m)  {:>8.1} (5m)",
        f(&m1["prompt_tokens_per_s"]),
        f(&m5["prompt_tokens_per_s"])
    ));
    line(String::new());
    line("last minute:".to_string());
    line(pct_line("  TTFT", &m1["ttft_ms"]));
    line(pct_line("  inter-token", &m1["itl_ms"]));
    line(pct_line("  end-to-end", &m1["e2e_ms"]));
    line(pct_line("  queue", &m1["queue_ms"]));
    line(String::new());
    line(format!(
        "running {:>4}   waiting {:>4}   prefix-cache hits {:>5.1}% (5m)",
        s["running"].as_u64().unwrap_or(0),
        s["waiting"].as_u64().unwrap_or(0),
        f(&m5["prefix_cache_hit_ratio"]) * 100.0
    ));
    line(format!(
        "speculative  guesses kept {:>5.1}% (5m)   {:>8.1} guessed tok/s (5m)",
        f(&m5["spec_acceptance_ratio"]) * 100.0,
        f(&m5["spec_draft_tokens_per_s"])
    ));
    let usage = f(&s["kv_cache_usage"]);
    line(format!(
        "KV cache {} {:>5.1}%  ({} used, {} cached, {} blocks)",
        gauge(usage, 30),
        usage * 100.0,
        s["kv_blocks_used"].as_u64().unwrap_or(0),
        s["kv_blocks_cached"].as_u64().unwrap_or(0),
        s["kv_blocks_total"].as_u64().unwrap_or(0)
    ));
    let pc = &s["prefix_cache"];
    let n = |k: &str| pc[k].as_u64().unwrap_or(0);
    if !pc.is_null() {
        line(format!(
            "prefix tiers: RAM {} blocks {} MiB ({}/{} hit)   disk {} blocks {} MiB ({}/{} hit){}{}",
            n("ram_blocks"),
            n("ram_bytes") >> 20,
            n("ram_hits"),
            n("ram_hits") + n("ram_misses"),
            n("disk_blocks"),
            n("disk_bytes") >> 20,
            n("disk_hits"),
            n("disk_hits") + n("disk_misses"),
            match n("disk_reads_waiting") {
                0 => String::new(),
                w => format!(", {w} waiting for reads"),
            },
            if pc["disk_degraded"].as_bool() == Some(true) {
                "  DISK DEGRADED (RAM only)"
            } else {
                ""
            }
        ));
    }
    if let Some(models) = s["models"].as_array().filter(|m| m.len() > 1) {
        out.push_str(&models_table(s, models));
    }
    out
}

/// One line per model of a server that serves several (the lines above are the default
/// model's).
fn models_table(s: &Value, models: &[Value]) -> String {
    let mut out = String::new();
    let budget = s["memory_budget_bytes"]
        .as_u64()
        .map(|b| format!(" of {} MiB", b >> 20))
        .unwrap_or_default();
    out.push_str(&format!(
        "\nmodels ({} MiB loaded{budget})\n",
        s["memory_bytes"].as_u64().unwrap_or(0) >> 20
    ));
    out.push_str(&format!(
        "  {:<32} {:<9} {:>8} {:>8} {:>4} {:>4} {:>6}\n",
        "model", "status", "req/s", "tok/s", "run", "wait", "KV"
    ));
    for m in models {
        let w = &m["last_1m"];
        let mut name = m["model"].as_str().unwrap_or("?").to_string();
        if name.chars().count() > 32 {
            name = name.chars().take(31).collect::<String>() + "~";
        }
        out.push_str(&format!(
            "  {:<32} {:<9} {:>8.2} {:>8.1} {:>4} {:>4} {:>5.1}%\n",
            name,
            m["status"].as_str().unwrap_or("?"),
            f(&w["requests_per_s"]),
            f(&w["generated_tokens_per_s"]),
            m["running"].as_u64().unwrap_or(0),
            m["waiting"].as_u64().unwrap_or(0),
            f(&m["kv_cache_usage"]) * 100.0
        ));
    }
    out
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let client = StatsClient::new(stats_uri(&args.url)?, args.api_key.clone())?;
    let interval = Duration::from_secs_f64(args.interval.clamp(0.1, 3600.0));
    let mut history: Vec<f64> = Vec::new();
    let mut stdout = std::io::stdout();
    loop {
        let stats = client.get();
        match stats {
            Ok(s) => {
                history.push(f(&s["last_1m"]["generated_tokens_per_s"]));
                if history.len() > 60 {
                    history.remove(0);
                }
                let text = frame(&args.url, &s, &history);
                if args.once {
                    write!(stdout, "{text}")?;
                    return Ok(());
                }
                // Home, clear, then the frame.
                write!(stdout, "\x1b[H\x1b[2J{text}")?;
            }
            Err(e) if args.once => return Err(e),
            Err(e) => writeln!(stdout, "\x1b[H\x1b[2Jkiln top — {}: {e:#}", args.url)?,
        }
        stdout.flush()?;
        std::thread::sleep(interval);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_and_bars() {
        let uri = |u: &str| stats_uri(u).map(|u| u.to_string());
        assert_eq!(
            uri("http://127.0.0.1:8080").unwrap(),
            "http://127.0.0.1:8080/stats"
        );
        assert_eq!(uri("http://host/kiln/").unwrap(), "http://host/kiln/stats");
        assert!(uri("https://x").is_err());
        assert!(uri("127.0.0.1:8080").is_err());
        assert_eq!(sparkline(&[0.0, 5.0, 10.0]), "▁▅█");
        assert_eq!(gauge(0.5, 4), "[##..]");
    }

    #[test]
    fn the_prefix_tiers_line_shows_sizes_hits_and_a_degraded_disk() {
        let s = serde_json::json!({"status": "ready", "prefix_cache": {
            "ram_blocks": 12, "ram_bytes": 5u64 << 20, "ram_hits": 3, "ram_misses": 1,
            "disk_blocks": 40, "disk_bytes": 20u64 << 20, "disk_hits": 1, "disk_misses": 0,
            "disk_degraded": true, "disk_reads_waiting": 2}});
        let text = frame("u", &s, &[]);
        let l = text
            .lines()
            .find(|l| l.starts_with("prefix tiers"))
            .expect(&text);
        assert!(l.contains("RAM 12 blocks 5 MiB (3/4 hit)"), "{l}");
        assert!(
            l.contains("disk 40 blocks 20 MiB (1/1 hit), 2 waiting for reads")
                && l.contains("DEGRADED"),
            "{l}"
        );
    }

    #[test]
    fn several_models_get_a_line_each() {
        let one = serde_json::json!({"status": "ready", "models": [{"model": "a"}]});
        assert!(!frame("u", &one, &[]).contains("models ("));
        let two = serde_json::json!({
            "status": "ready",
            "memory_bytes": 300u64 << 20,
            "memory_budget_bytes": 1u64 << 30,
            "models": [
                {"model": "a", "status": "loaded", "running": 2, "waiting": 1,
                 "kv_cache_usage": 0.25, "last_1m": {"requests_per_s": 1.5}},
                {"model": "b", "status": "unloaded"},
            ],
        });
        let text = frame("u", &two, &[]);
        assert!(
            text.contains("models (300 MiB loaded of 1024 MiB)"),
            "{text}"
        );
        let line_a = text
            .lines()
            .find(|l| l.trim_start().starts_with("a "))
            .unwrap();
        assert!(
            line_a.contains("loaded") && line_a.contains("1.50") && line_a.contains("25.0%"),
            "{line_a}"
        );
        assert!(text
            .lines()
            .any(|l| l.trim_start().starts_with("b ") && l.contains("unloaded")));
    }

    /// Serves `responses` in turn on a loopback port (one per connection, read until the
    /// request's blank line) and returns the base URL.
    fn serve(responses: Vec<Vec<u8>>) -> (String, std::thread::JoinHandle<()>) {
        use std::io::{BufRead, BufReader};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        let handle = std::thread::spawn(move || {
            for resp in responses {
                let (mut conn, _) = listener.accept().expect("accept");
                let mut reader = BufReader::new(conn.try_clone().expect("clone"));
                let mut line = String::new();
                while reader.read_line(&mut line).expect("read") > 2 {
                    line.clear();
                }
                conn.write_all(&resp).expect("write");
            }
        });
        (url, handle)
    }

    #[test]
    fn reads_chunked_and_sized_bodies_and_reports_errors() {
        let chunked = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\
            Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n\
            7\r\n{\"statu\r\nc\r\ns\": \"ready\"}\r\n0\r\n\r\n"
            .to_vec();
        let sized =
            b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\nConnection: close\r\n\r\n{\"ok\": 42}"
                .to_vec();
        let denied =
            b"HTTP/1.1 401 Unauthorized\r\nContent-Length: 7\r\nConnection: close\r\n\r\nno key!"
                .to_vec();
        let (url, server) = serve(vec![chunked, sized, denied]);
        let client = StatsClient::new(stats_uri(&url).unwrap(), Some("k".into())).unwrap();
        assert_eq!(client.get().unwrap()["status"], "ready");
        assert_eq!(client.get().unwrap()["ok"], 42);
        let err = format!("{:#}", client.get().unwrap_err());
        assert!(err.contains("401") && err.contains("no key!"), "{err}");
        server.join().unwrap();
    }
}
