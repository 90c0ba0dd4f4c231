//! Sliding-window statistics for `GET /stats`: latency percentiles and token rates over the
//! last 1 and 5 minutes, for people and scripts without Prometheus.
//!
//! Time is cut into 10-second slots kept in a ring of 30 (5 minutes); each slot holds one
//! HdrHistogram per latency (microseconds, 3 significant digits: exact to 0.1%) and token
//! counters. A query merges the slots of its window.
//!
//! The engine thread never waits for a query: its reports go to a pending list (a push under a
//! lock that a query holds only to swap the list out), and are folded into the slots by the
//! next query, or by the engine thread itself when the list grows long and the slots are free
//! (`try_lock`: never blocking).

use crate::scheduler::{Observer, RequestStats, StepStats};
use hdrhistogram::Histogram;
use std::sync::Mutex;
use std::time::{Duration, Instant};

const SLOT: Duration = Duration::from_secs(10);
const SLOTS: usize = 30;
/// Largest latency recorded: 1 hour, in microseconds (longer values are clamped).
const MAX_US: u64 = 3_600_000_000;

/// The latencies tracked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Latency {
    EndToEnd = 0,
    TimeToFirstToken = 1,
    InterToken = 2,
    Queue = 3,
}

const N_LAT: usize = 4;

struct Slot {
    /// Which 10-second interval since start this slot holds.
    epoch: u64,
    hist: [Histogram<u64>; N_LAT],
    requests: u64,
    prompt_tokens: u64,
    generated_tokens: u64,
    prefix_queries: u64,
    prefix_hits: u64,
    spec_drafted: u64,
    spec_accepted: u64,
}

fn new_hist() -> Histogram<u64> {
    // 1 us .. 1 h at 3 significant digits is always a valid range.
    Histogram::new_with_bounds(1, MAX_US, 3).expect("valid histogram bounds")
}

impl Slot {
    fn new(epoch: u64) -> Slot {
        Slot {
            epoch,
            hist: std::array::from_fn(|_| new_hist()),
            requests: 0,
            prompt_tokens: 0,
            generated_tokens: 0,
            prefix_queries: 0,
            prefix_hits: 0,
            spec_drafted: 0,
            spec_accepted: 0,
        }
    }
}

/// Percentiles of one latency over a window, in milliseconds (0 when nothing was recorded).
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct Percentiles {
    pub p50: f64,
    pub p95: f64,
    pub p99: f64,
    pub count: u64,
}

/// Everything `/stats` reports for one window.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct WindowStats {
    pub window_seconds: f64,
    pub requests_per_s: f64,
    pub generated_tokens_per_s: f64,
    pub prompt_tokens_per_s: f64,
    pub e2e_ms: Percentiles,
    pub ttft_ms: Percentiles,
    pub itl_ms: Percentiles,
    pub queue_ms: Percentiles,
    /// Prefix-cache lookups that reused blocks, over all lookups (0 when none).
    pub prefix_cache_hit_ratio: f64,
    /// Speculative decoding: guessed tokens verified per second, and the share of them kept
    /// (0 when none were verified).
    pub spec_draft_tokens_per_s: f64,
    pub spec_acceptance_ratio: f64,
}

/// A report waiting to be folded into the slots, stamped with when it happened.
enum Report {
    Request(Instant, Box<RequestStats>),
    Step {
        at: Instant,
        prefix_queries: u64,
        prefix_hits: u64,
        drafted: u64,
        accepted: u64,
    },
}

/// Pending reports past which the reporting thread folds them itself (when it can without
/// waiting).
const FOLD_AT: usize = 256;

/// The sliding window; see the module docs. Implements [`Observer`].
pub struct StatsWindow {
    start: Instant,
    /// Reports not yet in the slots.
    pending: Mutex<Vec<Report>>,
    slots: Mutex<Vec<Slot>>,
}

impl Default for StatsWindow {
    fn default() -> Self {
        StatsWindow::new()
    }
}

impl StatsWindow {
    pub fn new() -> StatsWindow {
        StatsWindow {
            start: Instant::now(),
            pending: Mutex::new(Vec::new()),
            slots: Mutex::new((0..SLOTS).map(|_| Slot::new(u64::MAX)).collect()),
        }
    }

    /// Queues a report; folds the queue when it is long and the slots are free.
    fn report(&self, r: Report) {
        let batch = {
            let mut p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
            p.push(r);
            if p.len() < FOLD_AT {
                return;
            }
            std::mem::take(&mut *p)
        };
        match self.slots.try_lock() {
            Ok(mut slots) => self.fold(&mut slots, batch),
            // A query is merging: put the batch back; the query or a later report folds it.
            Err(_) => {
                let mut p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
                let newer = std::mem::replace(&mut *p, batch);
                p.extend(newer);
            }
        }
    }

    /// Records `batch` into `slots`.
    fn fold(&self, slots: &mut [Slot], batch: Vec<Report>) {
        for r in batch {
            match r {
                Report::Request(at, stats) => self.request_into(slots, at, &stats),
                Report::Step {
                    at,
                    prefix_queries,
                    prefix_hits,
                    drafted,
                    accepted,
                } => {
                    let s = self.slot(slots, at);
                    s.prefix_queries += prefix_queries;
                    s.prefix_hits += prefix_hits;
                    s.spec_drafted += drafted;
                    s.spec_accepted += accepted;
                }
            }
        }
    }

    /// The slots with every pending report folded in.
    fn folded(&self) -> std::sync::MutexGuard<'_, Vec<Slot>> {
        let batch = std::mem::take(&mut *self.pending.lock().unwrap_or_else(|e| e.into_inner()));
        let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        self.fold(&mut slots, batch);
        slots
    }

    fn epoch(&self, now: Instant) -> u64 {
        (now.saturating_duration_since(self.start).as_millis() / SLOT.as_millis()) as u64
    }

    /// The slot of `at`, cleared first if it holds an older interval.
    fn slot<'a>(&self, slots: &'a mut [Slot], at: Instant) -> &'a mut Slot {
        let e = self.epoch(at);
        let s = &mut slots[(e % SLOTS as u64) as usize];
        if s.epoch != e {
            *s = Slot::new(e);
        }
        s
    }

    /// Statistics over the last `window` (at most 5 minutes), as of `now`.
    pub fn query_at(&self, now: Instant, window: Duration) -> WindowStats {
        let n = (window.as_secs_f64() / SLOT.as_secs_f64())
            .ceil()
            .clamp(1.0, SLOTS as f64) as u64;
        let e = self.epoch(now);
        let slots = self.folded();
        let mut hist: [Histogram<u64>; N_LAT] = std::array::from_fn(|_| new_hist());
        let mut out = WindowStats::default();
        let (mut req, mut gen, mut prm, mut q, mut h) = (0u64, 0u64, 0u64, 0u64, 0u64);
        let (mut drafted, mut accepted) = (0u64, 0u64);
        for s in slots.iter().filter(|s| s.epoch <= e && e - s.epoch < n) {
            for (acc, x) in hist.iter_mut().zip(&s.hist) {
                let _ = acc.add(x);
            }
            req += s.requests;
            gen += s.generated_tokens;
            prm += s.prompt_tokens;
            q += s.prefix_queries;
            h += s.prefix_hits;
            drafted += s.spec_drafted;
            accepted += s.spec_accepted;
        }
        // The current slot is partly elapsed; so is the first 10 s of the process.
        let covered = (now.saturating_duration_since(self.start).as_secs_f64())
            .min(n as f64 * SLOT.as_secs_f64())
            .max(1e-3);
        let pct = |h: &Histogram<u64>| Percentiles {
            p50: h.value_at_quantile(0.50) as f64 / 1e3,
            p95: h.value_at_quantile(0.95) as f64 / 1e3,
            p99: h.value_at_quantile(0.99) as f64 / 1e3,
            count: h.len(),
        };
        out.window_seconds = covered;
        out.requests_per_s = req as f64 / covered;
        out.generated_tokens_per_s = gen as f64 / covered;
        out.prompt_tokens_per_s = prm as f64 / covered;
        out.e2e_ms = pct(&hist[Latency::EndToEnd as usize]);
        out.ttft_ms = pct(&hist[Latency::TimeToFirstToken as usize]);
        out.itl_ms = pct(&hist[Latency::InterToken as usize]);
        out.queue_ms = pct(&hist[Latency::Queue as usize]);
        out.prefix_cache_hit_ratio = if q == 0 { 0.0 } else { h as f64 / q as f64 };
        out.spec_draft_tokens_per_s = drafted as f64 / covered;
        out.spec_acceptance_ratio = if drafted == 0 {
            0.0
        } else {
            accepted as f64 / drafted as f64
        };
        out
    }

    /// Statistics over the last `window` as of now.
    pub fn query(&self, window: Duration) -> WindowStats {
        self.query_at(Instant::now(), window)
    }

    fn request_at(&self, now: Instant, r: &RequestStats) {
        self.report(Report::Request(now, Box::new(r.clone())));
    }

    fn request_into(&self, slots: &mut [Slot], at: Instant, r: &RequestStats) {
        let us = |d: Duration| (d.as_micros() as u64).clamp(1, MAX_US);
        let s = self.slot(slots, at);
        let _ = s.hist[Latency::EndToEnd as usize].record(us(r.duration));
        let _ = s.hist[Latency::Queue as usize].record(us(r.queue));
        if let Some(t) = r.ttft {
            let _ = s.hist[Latency::TimeToFirstToken as usize].record(us(t));
        }
        for &g in &r.itl {
            let _ = s.hist[Latency::InterToken as usize].record(us(g));
        }
        s.requests += 1;
        s.prompt_tokens += r.prompt_tokens as u64;
        s.generated_tokens += r.generated_tokens as u64;
    }
}

impl Observer for StatsWindow {
    fn on_step(&self, s: &StepStats) {
        if s.prefix_queries > 0 || s.prefix_hits > 0 || s.drafted > 0 {
            self.report(Report::Step {
                at: Instant::now(),
                prefix_queries: s.prefix_queries,
                prefix_hits: s.prefix_hits,
                drafted: s.drafted as u64,
                accepted: s.accepted as u64,
            });
        }
    }

    fn on_request(&self, r: &RequestStats) {
        self.request_at(Instant::now(), r);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduler::FinishReason;

    fn req(ttft_ms: u64, gen: usize) -> RequestStats {
        RequestStats {
            queue: Duration::from_millis(1),
            ttft: Some(Duration::from_millis(ttft_ms)),
            itl: vec![Duration::from_millis(10); gen.saturating_sub(1)],
            duration: Duration::from_millis(ttft_ms + 10 * gen as u64),
            prompt_tokens: 100,
            cached_tokens: 0,
            generated_tokens: gen,
            finish_reasons: vec![FinishReason::Length],
            preemptions: 0,
        }
    }

    #[test]
    fn speculative_acceptance_over_the_window() {
        let w = StatsWindow::new();
        assert_eq!(w.query(Duration::from_secs(60)).spec_acceptance_ratio, 0.0);
        for (drafted, accepted) in [(8, 6), (4, 0), (8, 8)] {
            w.report(Report::Step {
                at: Instant::now(),
                prefix_queries: 0,
                prefix_hits: 0,
                drafted,
                accepted,
            });
        }
        let q = w.query(Duration::from_secs(60));
        assert_eq!(q.spec_acceptance_ratio, 14.0 / 20.0);
        assert!(q.spec_draft_tokens_per_s > 0.0);
    }

    #[test]
    fn percentiles_and_rates_over_windows() {
        let w = StatsWindow::new();
        let t0 = w.start;
        // 100 requests in the first minute with TTFT 1..=100 ms.
        for i in 1..=100u64 {
            w.request_at(t0 + Duration::from_millis(i * 500), &req(i, 11));
        }
        // One slow request four minutes later.
        let late = t0 + Duration::from_secs(240);
        w.request_at(late, &req(5000, 11));
        let now = t0 + Duration::from_secs(245);
        let one = w.query_at(now, Duration::from_secs(60));
        assert_eq!(
            one.ttft_ms.count, 1,
            "only the late request in the last minute"
        );
        assert!((one.ttft_ms.p50 - 5000.0).abs() < 5.0);
        let five = w.query_at(now, Duration::from_secs(300));
        assert_eq!(five.ttft_ms.count, 101);
        assert!((five.ttft_ms.p50 - 51.0).abs() < 1.0, "{:?}", five.ttft_ms);
        assert!((five.ttft_ms.p95 - 96.0).abs() < 1.0, "{:?}", five.ttft_ms);
        assert_eq!(five.itl_ms.count, 101 * 10);
        assert!((five.generated_tokens_per_s - 101.0 * 11.0 / 245.0).abs() < 0.01);
        // Six minutes on, the first minute has slid out of every window.
        let later = w.query_at(t0 + Duration::from_secs(600), Duration::from_secs(300));
        assert_eq!(later.ttft_ms.count, 0);
        assert_eq!(later.generated_tokens_per_s, 0.0);
    }

    /// The engine thread reports while /stats merges: it must not wait for the merge.
    #[test]
    fn reports_never_wait_for_a_query() {
        let w = std::sync::Arc::new(StatsWindow::new());
        // A query merging the slots (held as long as the test likes).
        let merging = w.slots.lock().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let w2 = std::sync::Arc::clone(&w);
        std::thread::spawn(move || {
            for i in 0..2 * FOLD_AT as u64 {
                w2.on_request(&req(i, 3));
            }
            tx.send(()).unwrap();
        });
        rx.recv_timeout(Duration::from_secs(10))
            .expect("the reports waited for the query's lock");
        drop(merging);
        let got = w.query(Duration::from_secs(60));
        assert_eq!(got.ttft_ms.count, 2 * FOLD_AT as u64, "no report lost");
    }
}
