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
//!    refused for capacity. [`take_reservation`] hands it to the submission. A server of
//!    several models cannot tell which queue before the body is read: its requests are
//!    checked against their model's queue at submission.
//! 3. [`ByteBudget`](crate::server::capacity::ByteBudget) (in the JSON body reader): the body's bytes beyond its first
//!    [`SMALL_BODY`](crate::server::capacity::SMALL_BODY) must fit what is left of `server.max_body_bytes_in_flight` (all bodies
//!    being read and parsed); they are held until the handler returns. Ordinary requests are
//!    smaller than that: a flood of large bodies never crowds them out (their memory is bounded
//!    by the in-flight limit instead: 512 x 64 KiB = 32 MiB by default).
//!
//! A refusal sent while the client is still sending its body would otherwise be lost: closing
//! a socket with unread data makes the kernel answer with a reset, and a client still writing
//! never reads the response. So a refused request's body is read and thrown away for a bounded
//! time after the response ([`linger`], as nginx's `lingering_close`), and the connection is
//! then closed.

use crate::scheduler::handle::Reservation;
use crate::server::app_state::AppState;
use crate::server::capacity::{BytesHeld, Slot};
use crate::server::error::ApiError;
use axum::body::{Body, Bytes, HttpBody};
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

/// How long a refused request's body is read and discarded at most, and the longest silence
/// from the client while doing so.
const LINGER_TIME: Duration = Duration::from_secs(10);
const LINGER_IDLE: Duration = Duration::from_secs(2);

/// Routes outside the limits: probes and monitoring must answer under any load.
fn exempt(path: &str) -> bool {
    matches!(path, "/health" | "/ready" | "/metrics" | "/stats")
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
    let rt = match state.single_runtime() {
        Ok(Some(rt)) => rt,
        // Several models: which one is known once the body is read; the submission checks
        // that model's queue.
        Ok(None) => return next.run(req).await,
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
    if !adm.start_lingering() {
        return;
    }
    tokio::spawn(async move {
        let mut data = body.into_data_stream();
        let _ = tokio::time::timeout(LINGER_TIME, async {
            while let Ok(Some(Ok(_))) = tokio::time::timeout(LINGER_IDLE, data.next()).await {}
        })
        .await;
        adm.end_lingering();
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
