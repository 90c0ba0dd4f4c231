//! Request ids and the access log. Every request gets an id: the client's `x-request-id` when
//! it is a plain token (at most 64 characters of `A-Z a-z 0-9 . _ : -`, so it can never inject
//! a line break or markup into logs), else a new one. The id comes back in the response's
//! `x-request-id` header, names a tracing span around the request (so every log line written
//! while handling it carries `request_id`), and one access-log line (`target: kiln::access`) is
//! written when the response body ends: method, route pattern, status, duration, bytes and,
//! for a generation, its token counts (prompt, cached, generated), queue time, time to first
//! token and finish reason(s) (recorded through [`access`]).

use crate::random::random_id;
use crate::server::access::{self, Note};
use axum::body::{Body, Bytes, HttpBody};
use axum::extract::{MatchedPath, Request};
use axum::http::HeaderValue;
use axum::middleware::Next;
use axum::response::Response;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Instant;
use tracing::Instrument;

pub const HEADER: &str = "x-request-id";

/// Whether a client-supplied id is safe to log and echo.
fn acceptable(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 64
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'))
}

/// The middleware: see the module docs.
pub async fn track(req: Request, next: Next) -> Response {
    let id = req
        .headers()
        .get(HEADER)
        .and_then(|v| v.to_str().ok())
        .filter(|v| acceptable(v))
        .map(str::to_string)
        .unwrap_or_else(|| random_id("req-"));
    let method = req.method().to_string();
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map(|p| p.as_str().to_string())
        .unwrap_or_else(|| "other".to_string());
    let span = tracing::info_span!("request", request_id = %id);
    let start = Instant::now();
    let note = Note::default();
    let mut resp = access::scope(note.clone(), next.run(req))
        .instrument(span.clone())
        .await;
    if let Ok(v) = HeaderValue::from_str(&id) {
        resp.headers_mut().insert(HEADER, v);
    }
    let (parts, body) = resp.into_parts();
    let log = AccessLog {
        span,
        id,
        method,
        route,
        status: parts.status.as_u16(),
        start,
        bytes: 0,
        note,
    };
    Response::from_parts(parts, Body::new(Logged { inner: body, log }))
}

/// Written once, when the response body is finished or dropped (client gone).
struct AccessLog {
    span: tracing::Span,
    /// Also a field of the line itself: it names the request even when a filter drops spans.
    id: String,
    method: String,
    route: String,
    status: u16,
    start: Instant,
    bytes: u64,
    note: Note,
}

impl Drop for AccessLog {
    fn drop(&mut self) {
        // A request that generated nothing has no generation fields (None records nothing).
        let g = self.note.take();
        let g = g.as_ref();
        tracing::info!(
            target: "kiln::access",
            parent: &self.span,
            request_id = %self.id,
            method = %self.method,
            route = %self.route,
            status = self.status,
            duration_ms = self.start.elapsed().as_secs_f64() * 1e3,
            bytes = self.bytes,
            prompt_tokens = g.map(|g| g.usage.prompt_tokens),
            cached_tokens = g.map(|g| g.usage.prompt_tokens_details.cached_tokens),
            generated_tokens = g.map(|g| g.usage.completion_tokens),
            queue_ms = g.map(|g| g.timings.queue_ms),
            ttft_ms = g.map(|g| g.timings.ttft_ms.unwrap_or(-1.0)),
            finish_reason = g.map(|g| tracing::field::display(g.finish_str())),
            "request"
        );
    }
}

/// A response body that counts its bytes and logs the access line when it ends.
struct Logged {
    inner: Body,
    log: AccessLog,
}

impl HttpBody for Logged {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, axum::Error>>> {
        let this = &mut *self;
        let frame = Pin::new(&mut this.inner).poll_frame(cx);
        if let Poll::Ready(Some(Ok(f))) = &frame {
            if let Some(d) = f.data_ref() {
                this.log.bytes += d.len() as u64;
            }
        }
        frame
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::acceptable;

    #[test]
    fn only_plain_ids_are_taken() {
        assert!(acceptable("abc-123_x.y:z"));
        assert!(!acceptable(""));
        assert!(!acceptable("a\r\nforged: line"));
        assert!(!acceptable("<script>"));
        assert!(!acceptable(&"a".repeat(65)));
    }
}
