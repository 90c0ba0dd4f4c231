//! The server's capacity counters (see [`crate::server::admission`] for how requests pass
//! them): HTTP requests in flight against `server.max_in_flight_requests`, with the rate at
//! which they finish (a refusal's `Retry-After`), and the bytes of request bodies being read
//! and parsed against `server.max_body_bytes_in_flight`. All lock-free counters.

use crate::scheduler::drain::RateMeter;
use crate::server::error::ApiError;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Refused connections whose bodies are read and discarded at once; past it one is closed at
/// once.
const MAX_LINGERING: usize = 256;

/// The part of every body the byte budget does not count (see the module docs).
pub const SMALL_BODY: usize = 64 << 10;

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

    /// Takes one of the [`MAX_LINGERING`] places of a refused connection whose body is read
    /// and discarded; false when none is free (the connection is closed at once).
    pub(super) fn start_lingering(&self) -> bool {
        if self.lingering.fetch_add(1, Ordering::AcqRel) >= MAX_LINGERING {
            self.lingering.fetch_sub(1, Ordering::AcqRel);
            return false;
        }
        true
    }

    /// Gives back a place taken by [`Admission::start_lingering`].
    pub(super) fn end_lingering(&self) {
        self.lingering.fetch_sub(1, Ordering::AcqRel);
    }

    /// Takes a place among the requests in flight, or refuses with 429 when all are taken.
    pub(super) fn enter(self: &Arc<Self>) -> Result<Slot, ApiError> {
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
pub(super) struct Slot(Arc<Admission>);

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
        if charge > 0
            && b.used
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |cur| {
                    cur.checked_add(charge).filter(|&v| v <= b.limit)
                })
                .is_err()
        {
            return false;
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
