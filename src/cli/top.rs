//! `kiln top`: a live terminal view of a running server's `/stats` (plain ANSI): request rate,
//! generated tokens/s with a sparkline of the last minute, TTFT / inter-token / end-to-end
//! percentiles, the queue and the KV cache. Ctrl-C quits; `--once` prints one frame.

use anyhow::{bail, Context};
use serde_json::Value;
use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
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

/// `http://host:port[/prefix]` -> (host:port, path prefix).
fn split_url(url: &str) -> anyhow::Result<(String, String)> {
    let rest = url
        .strip_prefix("http://")
        .context("kiln top speaks plain HTTP: the URL must start with http://")?;
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], rest[i..].trim_end_matches('/')),
        None => (rest, ""),
    };
    if authority.is_empty() {
        bail!("no host in {url}");
    }
    let authority = if authority.contains(':') {
        authority.to_string()
    } else {
        format!("{authority}:80")
    };
    Ok((authority, path.to_string()))
}

/// GET `path` and parse the JSON body (HTTP/1.1, Connection: close).
fn get_json(authority: &str, path: &str, key: Option<&str>) -> anyhow::Result<Value> {
    let addr = authority
        .to_socket_addrs()
        .with_context(|| format!("resolving {authority}"))?
        .next()
        .with_context(|| format!("no address for {authority}"))?;
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(3))
        .with_context(|| format!("connecting to {authority}"))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    let auth = key
        .map(|k| format!("Authorization: Bearer {k}\r\n"))
        .unwrap_or_default();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {authority}\r\n{auth}Connection: close\r\n\r\n"
    )?;
    let mut buf = Vec::new();
    s.take(4 << 20).read_to_end(&mut buf)?;
    let text = String::from_utf8_lossy(&buf);
    let (head, body) = text
        .split_once("\r\n\r\n")
        .context("malformed HTTP response")?;
    let status = head.split_whitespace().nth(1).unwrap_or("?");
    if status != "200" {
        bail!("GET {path}: HTTP {status}: {}", body.trim());
    }
    if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        bail!("unexpected chunked response from {path}");
    }
    serde_json::from_str(body).with_context(|| format!("GET {path}: not JSON"))
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
    let usage = f(&s["kv_cache_usage"]);
    line(format!(
        "KV cache {} {:>5.1}%  ({} used, {} cached, {} blocks)",
        gauge(usage, 30),
        usage * 100.0,
        s["kv_blocks_used"].as_u64().unwrap_or(0),
        s["kv_blocks_cached"].as_u64().unwrap_or(0),
        s["kv_blocks_total"].as_u64().unwrap_or(0)
    ));
    out
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let (authority, prefix) = split_url(&args.url)?;
    let path = format!("{prefix}/stats");
    let interval = Duration::from_secs_f64(args.interval.clamp(0.1, 3600.0));
    let mut history: Vec<f64> = Vec::new();
    let mut stdout = std::io::stdout();
    loop {
        let stats = get_json(&authority, &path, args.api_key.as_deref());
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
        assert_eq!(
            split_url("http://127.0.0.1:8080").unwrap(),
            ("127.0.0.1:8080".to_string(), String::new())
        );
        assert_eq!(
            split_url("http://host/kiln/").unwrap(),
            ("host:80".to_string(), "/kiln".to_string())
        );
        assert!(split_url("https://x").is_err());
        assert_eq!(sparkline(&[0.0, 5.0, 10.0]), "▁▅█");
        assert_eq!(gauge(0.5, 4), "[##..]");
    }
}
