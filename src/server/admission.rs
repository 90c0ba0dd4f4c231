//! Refusing before working: a request the server cannot take is refused before its body is
//! read, its prompt rendered or tokenized, with a 429 whose `Retry-After` comes from the
//! measured drain rate. In order:
//!
//! 1. [`limit`] (every route but the probes and monitoring): at most
//!    `server.max_in_flight_requests` HTTP requests are handled at once (a request counts until
//!    its response body ends).
//! 2. [`reserve`] (the generating routes only): the model's engine must be serving and have a
//!    free place in its waiting queue (`scheduler.max_waiting`); the place is taken there and
//!    then ([`crate::scheduler::handle::Reservation`]), so the work that follows is never
//!    refused for capacity. [`take_reservation`] hands it to the submission.
//! 3. [`ByteBudget`] (in the JSON body reader): the body's bytes beyond its first
//!    [`SMALL_BODY`] must fit what is left of `server.max_body_bytes_in_flight` (all bodies
//!    being read and parsed); they are held until the handler returns. Ordinary requests are
//!    smaller than that: a flood of large bodies never crowds them out (their memory is bounded
//!    by the in-flight limit instead: 512 x 64 KiB = 32 MiB by default).
//!
//! A refusal sent while the client is still sending its body would otherwise be lost: closing
//! a socket with unread data makes the kernel answer with a reset, and a client still writing
//! never reads the response. So a refused request's body is read and thrown away for a bounded
//! time after the response ([`linger`], as nginx's `lingering_close`), and the connection is
//! then closed.

use crate::scheduler::drain::RateMeter;
use crate::scheduler::handle::Reservation;
use crate::server::error::ApiError;
use crate::server::state::AppState;
use axum::body::{Body, Bytes, HttpBody};
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

/// How long a refused request's body is read and discarded at most, and the longest silence
/// from the client while doing so.
const LINGER_TIME: Duration = Duration::from_secs(10);
const LINGER_IDLE: Duration = Duration::from_secs(2);
/// Connections lingering at once; past it a refused connection is closed at once.
const MAX_LINGERING: usize = 256;

/// The part of every body the byte budget does not count (see the module docs).
pub const SMALL_BODY: usize = 64 << 10;

/// Routes outside the limits: probes and monitoring must answer under any load.
fn exempt(path: &str) -> bool {
    matches!(path, "/health" | "/ready" | "/metrics" | "/stats")
}

/// The server's capacity counters; see the module docs.
#[derive(Debug)]
pub struct Admission {
    max_in_flight: usize,
    in_flight: AtomicUsize,
    /// HTTP requests finished per second: when a refused one should retry.
    finished: RateMeter,
    bytes: Arc<ByteBudget>,
    lingering: AtomicUsize,
}

impl Admission {
    pub fn new(max_in_flight: usize, max_body_bytes_in_flight: usize) -> Admission {
        Admission {
            max_in_flight,
            in_flight: AtomicUsize::new(0),
            finished: RateMeter::new(),
            bytes: Arc::new(ByteBudget {
                limit: max_body_bytes_in_flight,
                used: AtomicUsize::new(0),
            }),
            lingering: AtomicUsize::new(0),
        }
    }

    /// Requests being handled now.
    pub fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Acquire)
    }

    pub fn bytes(&self) -> &Arc<ByteBudget> {
        &self.bytes
    }

    /// Body bytes being read or parsed now.
    pub fn bytes_in_flight(&self) -> usize {
        self.bytes.used.load(Ordering::Acquire)
    }

    /// When a request refused for capacity should retry: when `ahead` more requests have
    /// finished, at the measured rate.
    pub fn retry_after(&self, ahead: usize) -> Duration {
        self.finished.retry_after(ahead)
    }

    fn enter(self: &Arc<Self>) -> Result<Slot, ApiError> {
        let mut cur = self.in_flight.load(Ordering::Acquire);
        loop {
            if cur >= self.max_in_flight {
                return Err(ApiError::Overloaded {
                    message: format!(
                        "the server is handling {cur} requests, its limit \
                         (server.max_in_flight_requests); retry later"
                    ),
                    retry_after: self.retry_after(cur + 1 - self.max_in_flight),
                });
            }
            match self.in_flight.compare_exchange_weak(
                cur,
                cur + 1,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return Ok(Slot(Arc::clone(self))),
                Err(now) => cur = now,
            }
        }
    }
}

/// One request's place among those in flight; given back when its response body ends.
#[derive(Debug)]
struct Slot(Arc<Admission>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
        self.0.finished.record(1);
    }
}

/// Body bytes being read and parsed, over all requests, bounded by
/// `server.max_body_bytes_in_flight`.
#[derive(Debug)]
pub struct ByteBudget {
    limit: usize,
    used: AtomicUsize,
}

impl ByteBudget {
    /// Takes a body of `n` bytes (its part beyond [`SMALL_BODY`] counts), or None when it
    /// does not fit.
    pub fn take(self: &Arc<Self>, n: usize) -> Option<BytesHeld> {
        let mut held = BytesHeld {
            budget: Arc::clone(self),
            len: 0,
            counted: 0,
        };
        held.grow(n).then_some(held)
    }
}

/// A body's bytes in the [`ByteBudget`], given back on drop.
#[derive(Debug)]
pub struct BytesHeld {
    budget: Arc<ByteBudget>,
    /// The body's length so far, and the part of it the budget counts.
    len: usize,
    counted: usize,
}

impl BytesHeld {
    /// The body grew by `more` bytes; false (nothing taken) when they do not fit.
    pub fn grow(&mut self, more: usize) -> bool {
        let len = self.len.saturating_add(more);
        let charge = len.saturating_sub(SMALL_BODY) - self.counted;
        let b = &self.budget;
        let mut cur = b.used.load(Ordering::Acquire);
        while charge > 0 {
            let Some(next) = cur.checked_add(charge).filter(|&v| v <= b.limit) else {
                return false;
            };
            match b
                .used
                .compare_exchange_weak(cur, next, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => break,
                Err(now) => cur = now,
            }
        }
        self.len = len;
        self.counted += charge;
        true
    }
}

impl Drop for BytesHeld {
    fn drop(&mut self) {
        self.budget.used.fetch_sub(self.counted, Ordering::AcqRel);
    }
}

/// What a request holds while its handler runs: its queue place until it is submitted, and
/// the bytes of its body until the handler returns.
#[derive(Default)]
struct Held {
    reservation: Option<Reservation>,
    bytes: Vec<BytesHeld>,
}

tokio::task_local! {
    static HELD: Arc<Mutex<Held>>;
}

fn with_held<R>(f: impl FnOnce(&mut Held) -> R) -> Option<R> {
    HELD.try_with(|h| f(&mut h.lock().unwrap_or_else(PoisonError::into_inner)))
        .ok()
}

/// The queue place [`reserve`] took for this request, if any (each is taken once).
pub fn take_reservation() -> Option<Reservation> {
    with_held(|h| h.reservation.take()).flatten()
}

/// Keeps `bytes` held until this request's handler returns (dropped now outside a request).
pub fn hold(bytes: BytesHeld) {
    with_held(move |h| h.bytes.push(bytes));
}

/// The in-flight limit; see the module docs.
pub async fn limit(State(state): State<AppState>, req: Request, next: Next) -> Response {
    if exempt(req.uri().path()) {
        return next.run(req).await;
    }
    let adm = state.admission();
    let slot = match adm.enter() {
        Ok(s) => s,
        Err(e) => return refuse(&state, req, e),
    };
    let held = Arc::new(Mutex::new(Held::default()));
    let resp = HELD.scope(Arc::clone(&held), next.run(req)).await;
    // The handler returned: its body bytes and an unused queue place are given back.
    drop(held);
    let (parts, body) = resp.into_parts();
    Response::from_parts(
        parts,
        Body::new(WithSlot {
            inner: body,
            _slot: slot,
        }),
    )
}

/// The queue place of a generating route; see the module docs.
pub async fn reserve(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let rt = match state.runtime() {
        Ok(rt) => rt,
        Err(e) => return refuse(&state, req, e),
    };
    match rt.engine.reserve() {
        Ok(r) => {
            with_held(move |h| h.reservation = Some(r));
            next.run(req).await
        }
        Err(e) => refuse(
            &state,
            req,
            ApiError::from_submit(e, "messages", "max_tokens"),
        ),
    }
}

/// `e` as the response to `req`, whose body is read and discarded for a while after it when
/// the client may still be sending it (see [`linger`]).
pub fn refuse(state: &AppState, req: Request, e: ApiError) -> Response {
    let body = req.into_body();
    let mut resp = e.into_response();
    if !body.is_end_stream() {
        linger(state, body);
        resp.headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    resp
}

/// Reads and discards what is left of a refused request's `body` for up to [`LINGER_TIME`]
/// (or until the client is silent for [`LINGER_IDLE`]), so the client, still sending, gets to
/// read the refusal instead of a connection reset; the connection then closes.
pub fn linger(state: &AppState, body: Body) {
    let adm = Arc::clone(state.admission());
    if adm.lingering.fetch_add(1, Ordering::AcqRel) >= MAX_LINGERING {
        adm.lingering.fetch_sub(1, Ordering::AcqRel);
        return;
    }
    tokio::spawn(async move {
        let mut data = body.into_data_stream();
        let _ = tokio::time::timeout(LINGER_TIME, async {
            while let Ok(Some(Ok(_))) = tokio::time::timeout(LINGER_IDLE, data.next()).await {}
        })
        .await;
        adm.lingering.fetch_sub(1, Ordering::AcqRel);
    });
}

/// A response body that holds its request's in-flight place until it ends.
struct WithSlot {
    inner: Body,
    _slot: Slot,
}

impl HttpBody for WithSlot {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
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
    use super::*;

    #[test]
    fn the_byte_budget_bounds_what_is_held() {
        let adm = Arc::new(Admission::new(2, 100));
        let b = adm.bytes();
        let big = |n: usize| SMALL_BODY + n;
        let a = b.take(big(60)).unwrap();
        assert!(b.take(big(50)).is_none(), "60 + 50 > 100");
        let mut c = b.take(big(40)).unwrap();
        assert!(!c.grow(1));
        assert_eq!(adm.bytes_in_flight(), 100);
        // Small bodies are not counted: they pass a full budget.
        let mut small = b.take(SMALL_BODY).unwrap();
        assert!(!small.grow(1), "past SMALL_BODY it counts");
        drop(a);
        assert!(c.grow(60));
        // A body read in chunks counts from its first byte past SMALL_BODY.
        let mut d = b.take(0).unwrap();
        assert!(d.grow(SMALL_BODY));
        assert_eq!(adm.bytes_in_flight(), 100);
        drop((c, d, small));
        assert_eq!(adm.bytes_in_flight(), 0);
    }

    #[test]
    fn in_flight_places_are_bounded_and_given_back() {
        let adm = Arc::new(Admission::new(2, 100));
        let s1 = adm.enter().unwrap();
        let _s2 = adm.enter().unwrap();
        let e = adm.enter().unwrap_err();
        assert!(matches!(e, ApiError::Overloaded { .. }), "{e:?}");
        drop(s1);
        assert_eq!(adm.in_flight(), 1);
        assert!(adm.enter().is_ok());
    }
}
