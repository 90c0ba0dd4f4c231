//! How fast something drains, measured: events per second over the last few seconds, and
//! from it how long a client refused for capacity should wait before retrying (the
//! `Retry-After` of a 429). Recording is a few atomic operations, cheap enough for the engine
//! thread.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Seconds of history; the rate is taken over the full seconds of this window.
const WINDOW: usize = 10;

/// The shortest and longest delay advised.
const MIN_RETRY: Duration = Duration::from_secs(1);
const MAX_RETRY: Duration = Duration::from_secs(60);

/// Events per one-second bucket, in a ring; see the module docs.
#[derive(Debug)]
pub struct RateMeter {
    start: Instant,
    /// Which second (since `start`) each bucket counts, and its count.
    second: [AtomicU64; WINDOW + 1],
    count: [AtomicU64; WINDOW + 1],
}

impl Default for RateMeter {
    fn default() -> Self {
        RateMeter::new()
    }
}

impl RateMeter {
    pub fn new() -> RateMeter {
        RateMeter {
            start: Instant::now(),
            second: std::array::from_fn(|_| AtomicU64::new(u64::MAX)),
            count: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }

    fn now_second(&self, now: Instant) -> u64 {
        now.saturating_duration_since(self.start).as_secs()
    }

    /// `n` events happened now.
    pub fn record(&self, n: u64) {
        self.record_at(Instant::now(), n);
    }

    fn record_at(&self, now: Instant, n: u64) {
        let s = self.now_second(now);
        let i = (s % (WINDOW as u64 + 1)) as usize;
        let seen = self.second[i].load(Ordering::Acquire);
        if seen != s
            && self.second[i]
                .compare_exchange(seen, s, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
        {
            // This thread claimed the bucket for the new second.
            self.count[i].store(0, Ordering::Release);
        }
        self.count[i].fetch_add(n, Ordering::AcqRel);
    }

    /// Events per second over the last [`WINDOW`] full seconds (seconds before the meter
    /// started count as empty, so a young meter errs toward a low rate and a long wait); None
    /// before the first full second.
    pub fn rate(&self) -> Option<f64> {
        self.rate_at(Instant::now())
    }

    fn rate_at(&self, now: Instant) -> Option<f64> {
        let cur = self.now_second(now);
        if cur == 0 {
            return None;
        }
        let total: u64 = (1..=cur.min(WINDOW as u64))
            .map(|back| {
                let s = cur - back;
                let i = (s % (WINDOW as u64 + 1)) as usize;
                if self.second[i].load(Ordering::Acquire) == s {
                    self.count[i].load(Ordering::Acquire)
                } else {
                    0
                }
            })
            .sum();
        Some(total as f64 / WINDOW as f64)
    }

    /// How long until `ahead` more events have happened at the measured rate, between 1 s and
    /// 60 s: the `Retry-After` for a client `ahead` places past the capacity. Nothing drained
    /// in the window (or nothing measured yet) advises the whole window.
    pub fn retry_after(&self, ahead: usize) -> Duration {
        self.retry_after_at(Instant::now(), ahead)
    }

    fn retry_after_at(&self, now: Instant, ahead: usize) -> Duration {
        match self.rate_at(now) {
            Some(r) if r > 0.0 => {
                Duration::from_secs_f64(ahead.max(1) as f64 / r).clamp(MIN_RETRY, MAX_RETRY)
            }
            _ => Duration::from_secs(WINDOW as u64),
        }
    }
}

/// The requests accepted and not yet running, over every worker, and how fast they leave:
/// the queue bound `scheduler.max_waiting` is checked against it, and a refusal's
/// `Retry-After` comes from its drain rate.
#[derive(Debug, Default)]
pub struct WaitQueue {
    waiting: std::sync::atomic::AtomicUsize,
    drained: RateMeter,
}

impl WaitQueue {
    /// Requests waiting (reservations included).
    pub fn len(&self) -> usize {
        self.waiting.load(Ordering::Acquire)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Takes a place if fewer than `max` are taken; Err(places taken) otherwise.
    pub fn try_enter(&self, max: usize) -> Result<(), usize> {
        let mut cur = self.waiting.load(Ordering::Acquire);
        loop {
            if cur >= max {
                return Err(cur);
            }
            match self.waiting.compare_exchange_weak(
                cur,
                cur + 1,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return Ok(()),
                Err(now) => cur = now,
            }
        }
    }

    /// A request left the queue: it started running, or it ended (or its reservation was
    /// dropped) before it did. Counts toward the drain rate.
    pub fn leave(&self) {
        self.waiting.fetch_sub(1, Ordering::AcqRel);
        self.drained.record(1);
    }

    /// A place taken by [`WaitQueue::try_enter`] given back unused (not a drain).
    pub fn give_back(&self) {
        self.waiting.fetch_sub(1, Ordering::AcqRel);
    }

    /// When a request refused with `taken` places taken out of `max` should retry: when the
    /// queue, at its measured drain rate, has room for it.
    pub fn retry_after(&self, taken: usize, max: usize) -> Duration {
        self.drained.retry_after(taken + 1 - max.min(taken))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rate_and_retry_after_follow_what_drained() {
        let m = RateMeter::new();
        let t0 = m.start;
        let at = |s: f64| t0 + Duration::from_secs_f64(s);
        // Nothing measured yet: the whole window.
        assert_eq!(m.retry_after_at(at(0.5), 1), Duration::from_secs(10));
        // 4 events a second for 5 seconds: 20 over the 10-second window.
        for s in 0..5 {
            for k in 0..4 {
                m.record_at(at(s as f64 + 0.1 * k as f64), 1);
            }
        }
        assert_eq!(m.rate_at(at(5.5)), Some(2.0));
        // 10 places ahead at 2/s: 5 s.
        assert_eq!(m.retry_after_at(at(5.5), 10), Duration::from_secs(5));
        // One place ahead: the floor of 1 s.
        assert_eq!(m.retry_after_at(at(5.5), 1), Duration::from_secs(1));
        // 1000 places: the ceiling.
        assert_eq!(m.retry_after_at(at(5.5), 1000), Duration::from_secs(60));
        // The window slides: at 12.5 s only seconds 2..=4 remain in it (12 events over 10 s).
        assert_eq!(m.rate_at(at(12.5)), Some(1.2));
        // One event in the window: a place frees every 10 s.
        let one = RateMeter::new();
        one.record_at(one.start + Duration::from_millis(300), 1);
        assert_eq!(
            one.retry_after_at(one.start + Duration::from_millis(1500), 1),
            Duration::from_secs(10)
        );
        // Long after, nothing drains: the whole window again.
        assert_eq!(m.retry_after_at(at(100.0), 1), Duration::from_secs(10));
    }
}
