//! A small blocking HTTP/1.1 client over `std::net::TcpStream`: enough for JSON and SSE
//! responses, and raw enough to send what real clients would not (bad UTF-8, huge headers,
//! lies in Content-Length) and to hang up mid-request.

use serde_json::Value;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// A complete response.
#[derive(Debug, Clone)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Response {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "status {}: body is not JSON ({e}): {}",
                self.status,
                self.text()
            )
        })
    }

    /// The OpenAI error envelope's `error` object; panics if the body is not one.
    pub fn error(&self) -> Value {
        let v = self.json();
        let e = v["error"].clone();
        assert!(
            e["message"].is_string() && e["type"].is_string(),
            "not an OpenAI error envelope: {v}"
        );
        assert!(e.get("param").is_some() && e.get("code").is_some(), "{v}");
        e
    }

    /// The server-sent events of the body.
    pub fn events(&self) -> Vec<SseEvent> {
        parse_sse(&self.body)
    }
}

/// One server-sent event (or comment).
#[derive(Debug, Clone, PartialEq)]
pub struct SseEvent {
    pub event: Option<String>,
    pub data: String,
    pub comment: Option<String>,
}

impl SseEvent {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.data)
            .unwrap_or_else(|e| panic!("event data is not JSON ({e}): {}", self.data))
    }
}

/// Splits an SSE body into events. Every event must be valid UTF-8 (panics otherwise).
pub fn parse_sse(body: &[u8]) -> Vec<SseEvent> {
    let mut out = Vec::new();
    for block in body
        .split_inclusive(|&b| b == b'\n')
        .collect::<Vec<_>>()
        .split(|l| *l == b"\n")
    {
        if block.is_empty() {
            continue;
        }
        let raw: Vec<u8> = block.concat();
        let text = std::str::from_utf8(&raw)
            .unwrap_or_else(|e| panic!("an SSE event is not valid UTF-8 ({e}): {raw:?}"));
        let mut ev = SseEvent {
            event: None,
            data: String::new(),
            comment: None,
        };
        for line in text.lines() {
            if let Some(c) = line.strip_prefix(':') {
                ev.comment = Some(c.trim().to_string());
            } else if let Some(d) = line.strip_prefix("data:") {
                if !ev.data.is_empty() {
                    ev.data.push('\n');
                }
                ev.data.push_str(d.strip_prefix(' ').unwrap_or(d));
            } else if let Some(e) = line.strip_prefix("event:") {
                ev.event = Some(e.trim().to_string());
            }
        }
        out.push(ev);
    }
    out
}

/// The request bytes.
pub fn raw_request(method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Vec<u8> {
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n");
    if !body.is_empty() || method == "POST" {
        req.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    let mut bytes = req.into_bytes();
    bytes.extend_from_slice(body);
    bytes
}

/// Connects with a generous read timeout.
pub fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    s.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
    s.set_nodelay(true).unwrap();
    s
}

/// Sends `bytes` and reads the whole response (the server closes: `Connection: close`).
pub fn send_raw(addr: SocketAddr, bytes: &[u8]) -> Response {
    let mut s = connect(addr);
    // The server may answer (413) and close before reading everything: ignore write errors.
    let _ = s.write_all(bytes);
    read_response(&mut s)
}

/// Reads a response to the end of the connection.
pub fn read_response(s: &mut TcpStream) -> Response {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 16384];
    loop {
        match s.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            // A reset after the full response (the server closed with unread input).
            Err(e) if !buf.is_empty() && e.kind() == std::io::ErrorKind::ConnectionReset => break,
            Err(e) => panic!("reading the response: {e} (got {} bytes)", buf.len()),
        }
    }
    parse_response(&buf)
}

/// Parses status, headers and (de-chunked) body.
pub fn parse_response(buf: &[u8]) -> Response {
    let split = buf
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("no end of headers in {:?}", String::from_utf8_lossy(buf)));
    let head = String::from_utf8_lossy(&buf[..split]).into_owned();
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or("");
    let status: u16 = status_line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("bad status line {status_line:?}"));
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    let raw = &buf[split + 4..];
    let chunked = headers
        .iter()
        .any(|(k, v)| k.eq_ignore_ascii_case("transfer-encoding") && v.contains("chunked"));
    let body = if chunked { dechunk(raw) } else { raw.to_vec() };
    Response {
        status,
        headers,
        body,
    }
}

fn dechunk(mut raw: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(eol) = raw.windows(2).position(|w| w == b"\r\n") {
        let size_text = String::from_utf8_lossy(&raw[..eol]);
        let size = usize::from_str_radix(size_text.split(';').next().unwrap_or("").trim(), 16)
            .unwrap_or(0);
        raw = &raw[eol + 2..];
        if size == 0 || raw.len() < size {
            out.extend_from_slice(&raw[..size.min(raw.len())]);
            break;
        }
        out.extend_from_slice(&raw[..size]);
        raw = raw.get(size + 2..).unwrap_or(&[]);
    }
    out
}

/// A client bound to one server, with an optional API key.
#[derive(Debug, Clone)]
pub struct Client {
    pub addr: SocketAddr,
    pub key: Option<String>,
}

impl Client {
    pub fn request(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Response {
        let auth = self.key.as_ref().map(|k| format!("Bearer {k}"));
        let mut h: Vec<(&str, &str)> = headers.to_vec();
        if let Some(a) = &auth {
            h.push(("Authorization", a));
        }
        send_raw(self.addr, &raw_request(method, path, &h, body))
    }

    pub fn get(&self, path: &str) -> Response {
        self.request("GET", path, &[], b"")
    }

    pub fn post(&self, path: &str, body: &Value) -> Response {
        self.post_bytes(path, body.to_string().as_bytes())
    }

    pub fn post_bytes(&self, path: &str, body: &[u8]) -> Response {
        self.request("POST", path, &[("Content-Type", "application/json")], body)
    }

    /// Posts and asserts a 200.
    pub fn ok(&self, path: &str, body: &Value) -> Value {
        let r = self.post(path, body);
        assert_eq!(r.status, 200, "{path} {body}: {}", r.text());
        r.json()
    }

    /// A Prometheus gauge's value from /metrics.
    /// The sum of the series of `sel` in `/metrics`: a family name, optionally with label
    /// filters (`kiln_kv_cache_blocks{state="used"}`); other labels (e.g. `model`) are ignored.
    pub fn metric(&self, sel: &str) -> f64 {
        let text = self.get("/metrics").text();
        let (name, wanted) = match sel.split_once('{') {
            Some((n, rest)) => (n, rest.trim_end_matches('}').split(',').collect::<Vec<_>>()),
            None => (sel, Vec::new()),
        };
        let mut found = None;
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let (series, value) = match line.rsplit_once(' ') {
                Some(x) => x,
                None => continue,
            };
            let (n, labels) = match series.split_once('{') {
                Some((n, l)) => (n, l),
                None => (series, ""),
            };
            if n == name && wanted.iter().all(|w| labels.contains(w)) {
                let v: f64 = value.trim().parse().unwrap_or(f64::NAN);
                *found.get_or_insert(0.0) += v;
            }
        }
        found.unwrap_or_else(|| panic!("metric {sel} missing in:\n{text}"))
    }
}
