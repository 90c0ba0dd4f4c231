//! Prometheus metrics: one registry, every family defined in [`names`]. The scheduler hands
//! plain numbers to [`Metrics`] through the [`Observer`] trait; the HTTP layer counts requests
//! by endpoint and status and refreshes the load gauges at each scrape. Only this module knows
//! Prometheus.

pub mod names;
mod tiers;
pub mod window;

use crate::scheduler::speculative::SpecMethod;
use crate::scheduler::{CacheTier, Load, Observer, RequestStats, StepStats, TierStats};
use names::*;
use prometheus::{
    Encoder, Gauge, GaugeVec, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec,
    IntGauge, IntGaugeVec, Opts, Registry, TextEncoder,
};
use std::collections::HashMap;
use std::time::Duration;

/// A metrics setup problem (a duplicate or malformed family: a programming error).
#[derive(Debug, thiserror::Error)]
#[error("metrics: {0}")]
pub struct MetricsError(#[from] prometheus::Error);

/// What `kiln_build_info` reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BuildInfo {
    pub version: String,
    pub isa: String,
    pub threads: usize,
    pub workers: usize,
    pub model: String,
    pub quant: String,
}

/// Every metric family of one server. Cheap to share (`Arc`); recording is lock-free atomics.
pub struct Metrics {
    registry: Registry,
    request_duration: Histogram,
    ttft: Histogram,
    itl: Histogram,
    tpot: Histogram,
    queue: Histogram,
    prompt_tokens_hist: Histogram,
    generation_tokens_hist: Histogram,
    step: HistogramVec,
    batch_sequences: Histogram,
    batch_tokens: Histogram,
    requests: IntCounterVec,
    finished: IntCounterVec,
    prompt_tokens: IntCounter,
    generation_tokens: IntCounter,
    preemptions: IntCounter,
    prefix_queries: IntCounter,
    prefix_hits: IntCounter,
    engine_faults: IntCounter,
    spec_drafted: IntCounterVec,
    spec_accepted: IntCounterVec,
    rejected: IntCounterVec,
    running: IntGauge,
    waiting: IntGauge,
    kv_usage: Gauge,
    kv_blocks: IntGaugeVec,
    model_load: Gauge,
    build_info: GaugeVec,
    ready: IntGauge,
    in_flight: IntGauge,
    tiers: tiers::TierMetrics,
}

fn histogram(name: &str, help: &str, buckets: &[f64]) -> Result<Histogram, prometheus::Error> {
    Histogram::with_opts(HistogramOpts::new(name, help).buckets(buckets.to_vec()))
}

impl Metrics {
    /// A registry whose every series carries the constant label `model`, with the process
    /// metrics (`process_*`).
    pub fn new(model: &str) -> Result<Metrics, MetricsError> {
        Metrics::build(model, true)
    }

    /// [`Metrics::new`] without the process metrics: another model of the same server.
    pub fn without_process(model: &str) -> Result<Metrics, MetricsError> {
        Metrics::build(model, false)
    }

    fn build(model: &str, process: bool) -> Result<Metrics, MetricsError> {
        let labels = HashMap::from([("model".to_string(), model.to_string())]);
        let registry = Registry::new_custom(None, Some(labels))?;
        let step = HistogramVec::new(
            HistogramOpts::new(ENGINE_STEP, "Duration of one engine step (forward pass and sampling), by phase: prefill, decode or mixed.")
                .buckets(LATENCY_BUCKETS.to_vec()),
            &["phase"],
        )?;
        let m = Metrics {
            request_duration: histogram(REQUEST_DURATION, "End-to-end request duration, from arrival to the last token.", LATENCY_BUCKETS)?,
            ttft: histogram(TIME_TO_FIRST_TOKEN, "Time from arrival to the first generated token.", LATENCY_BUCKETS)?,
            itl: histogram(INTER_TOKEN_LATENCY, "Every gap between two consecutive generated tokens of a choice.", LATENCY_BUCKETS)?,
            tpot: histogram(TIME_PER_OUTPUT_TOKEN, "Per request: (duration - time to first token) / (generated tokens - 1).", LATENCY_BUCKETS)?,
            queue: histogram(REQUEST_QUEUE, "Time from arrival to the request's first scheduled step.", LATENCY_BUCKETS)?,
            prompt_tokens_hist: histogram(REQUEST_PROMPT_TOKENS, "Prompt tokens per request.", TOKEN_BUCKETS)?,
            generation_tokens_hist: histogram(REQUEST_GENERATION_TOKENS, "Generated tokens per request (all choices).", TOKEN_BUCKETS)?,
            step,
            batch_sequences: histogram(BATCH_SEQUENCES, "Sequences in one engine step.", BATCH_SEQ_BUCKETS)?,
            batch_tokens: histogram(BATCH_TOKENS, "New tokens (prefill + decode) in one engine step.", TOKEN_BUCKETS)?,
            requests: IntCounterVec::new(Opts::new(REQUESTS, "HTTP requests by endpoint and status code."), &["endpoint", "status"])?,
            finished: IntCounterVec::new(Opts::new(REQUESTS_FINISHED, "Finished choices by finish reason (stop, length, abort, error)."), &["finish_reason"])?,
            prompt_tokens: IntCounter::new(PROMPT_TOKENS, "Prompt tokens of finished requests.")?,
            generation_tokens: IntCounter::new(GENERATION_TOKENS, "Generated tokens of finished requests.")?,
            preemptions: IntCounter::new(PREEMPTIONS, "Sequences preempted (KV cache full) and requeued for recomputation.")?,
            prefix_queries: IntCounter::new(PREFIX_CACHE_QUERIES, "Prefix-cache lookups (one per admitted sequence).")?,
            prefix_hits: IntCounter::new(PREFIX_CACHE_HITS, "Prefix-cache lookups that reused at least one block.")?,
            engine_faults: IntCounter::new(ENGINE_FAULTS, "Faults caught in engine steps (a panic or an error anywhere in a step): each ended its worker's requests with an error and rebuilt the worker.")?,
            spec_drafted: IntCounterVec::new(Opts::new(SPEC_DRAFT_TOKENS, "Speculative decoding: guessed tokens verified, by method (ngram, draft)."), &["method"])?,
            spec_accepted: IntCounterVec::new(Opts::new(SPEC_ACCEPTED_TOKENS, "Speculative decoding: guessed tokens kept (each one a token without a step of its own), by method."), &["method"])?,
            rejected: IntCounterVec::new(Opts::new(REJECTED, "Requests refused before running, by reason (overloaded, invalid, unavailable, ...)."), &["reason"])?,
            running: IntGauge::new(REQUESTS_RUNNING, "Sequences running in the engine.")?,
            waiting: IntGauge::new(REQUESTS_WAITING, "Requests accepted and waiting to run.")?,
            kv_usage: Gauge::new(KV_CACHE_USAGE, "Fraction of KV cache blocks held by sequences (cached-only blocks count as free).")?,
            kv_blocks: IntGaugeVec::new(Opts::new(KV_CACHE_BLOCKS, "KV cache blocks by state: used (by sequences), cached (prefix cache only, evictable), free."), &["state"])?,
            model_load: Gauge::new(MODEL_LOAD, "Seconds it took to load the model and start the engine.")?,
            ready: IntGauge::new(READY, "1 when /ready answers 200 (model loaded, engine healthy, not draining).")?,
            in_flight: IntGauge::new(HTTP_IN_FLIGHT, "Generation requests whose response is not complete.")?,
            tiers: tiers::TierMetrics::new(&registry)?,
            build_info: GaugeVec::new(Opts::new(BUILD_INFO, "Build, instruction set, threads, workers and model of this server (always 1)."), &["version", "isa", "threads", "workers", "quant"])?,
            registry,
        };
        m.register_all(process)?;
        Ok(m)
    }

    fn register_all(&self, process: bool) -> Result<(), prometheus::Error> {
        let r = &self.registry;
        for h in [
            &self.request_duration,
            &self.ttft,
            &self.itl,
            &self.tpot,
            &self.queue,
            &self.prompt_tokens_hist,
            &self.generation_tokens_hist,
            &self.batch_sequences,
            &self.batch_tokens,
        ] {
            r.register(Box::new(h.clone()))?;
        }
        r.register(Box::new(self.step.clone()))?;
        for c in [
            &self.requests,
            &self.finished,
            &self.rejected,
            &self.spec_drafted,
            &self.spec_accepted,
        ] {
            r.register(Box::new(c.clone()))?;
        }
        for c in [
            &self.prompt_tokens,
            &self.generation_tokens,
            &self.preemptions,
            &self.prefix_queries,
            &self.prefix_hits,
            &self.engine_faults,
        ] {
            r.register(Box::new(c.clone()))?;
        }
        r.register(Box::new(self.running.clone()))?;
        r.register(Box::new(self.waiting.clone()))?;
        r.register(Box::new(self.kv_usage.clone()))?;
        r.register(Box::new(self.kv_blocks.clone()))?;
        r.register(Box::new(self.model_load.clone()))?;
        r.register(Box::new(self.build_info.clone()))?;
        r.register(Box::new(self.ready.clone()))?;
        r.register(Box::new(self.in_flight.clone()))?;
        #[cfg(target_os = "linux")]
        if process {
            r.register(Box::new(
                prometheus::process_collector::ProcessCollector::for_self(),
            ))?;
        }
        #[cfg(not(target_os = "linux"))]
        let _ = process;
        // Series that exist from the start, so dashboards and rules never see "no data".
        for reason in ["stop", "length", "abort", "error"] {
            self.finished.with_label_values(&[reason]);
        }
        for phase in ["prefill", "decode", "mixed"] {
            self.step.with_label_values(&[phase]);
        }
        for c in [&self.spec_drafted, &self.spec_accepted] {
            c.with_label_values(&[SpecMethod::Ngram.as_str()]);
        }
        for state in ["used", "cached", "free"] {
            self.kv_blocks.with_label_values(&[state]);
        }
        Ok(())
    }

    /// Counts one HTTP request answered on `endpoint` (a route pattern, never a raw path).
    pub fn http_request(&self, endpoint: &str, status: u16) {
        self.requests
            .with_label_values(&[endpoint, &status.to_string()])
            .inc();
    }

    /// Counts a request refused before it ran (`reason`: a short fixed word).
    pub fn rejected(&self, reason: &str) {
        self.rejected.with_label_values(&[reason]).inc();
    }

    pub fn set_build_info(&self, b: &BuildInfo) {
        self.build_info.reset();
        self.build_info
            .with_label_values(&[
                &b.version,
                &b.isa,
                &b.threads.to_string(),
                &b.workers.to_string(),
                &b.quant,
            ])
            .set(1.0);
    }

    pub fn set_model_load_seconds(&self, secs: f64) {
        self.model_load.set(secs);
    }

    /// Whether the server is ready, and its generation requests in flight (set at each scrape).
    pub fn set_ready(&self, ready: bool, in_flight: usize) {
        self.ready.set(i64::from(ready));
        self.in_flight.set(in_flight as i64);
    }

    /// Refreshes the load gauges (called at each scrape).
    pub fn set_load(&self, l: &Load) {
        self.running.set(l.running as i64);
        self.waiting.set(l.waiting as i64);
        let total = l.kv_blocks_total.max(1);
        self.kv_usage.set(l.kv_blocks_used as f64 / total as f64);
        let free = l
            .kv_blocks_total
            .saturating_sub(l.kv_blocks_used + l.kv_blocks_cached);
        self.kv_blocks
            .with_label_values(&["used"])
            .set(l.kv_blocks_used as i64);
        self.kv_blocks
            .with_label_values(&["cached"])
            .set(l.kv_blocks_cached as i64);
        self.kv_blocks.with_label_values(&["free"]).set(free as i64);
    }

    /// The prefix cache's tiers as last reported, over all workers (since each worker's
    /// start).
    pub fn tiers_now(&self) -> TierStats {
        self.tiers.now()
    }

    /// The Prometheus text exposition of every family.
    pub fn render(&self) -> String {
        render_all(&[self])
    }
}

/// The Prometheus text exposition of several registries (one per model): each family once,
/// holding the series of every registry (they differ by their `model` label).
pub fn render_all(all: &[&Metrics]) -> String {
    let mut families: Vec<prometheus::proto::MetricFamily> = Vec::new();
    for m in all {
        for mut f in m.registry.gather() {
            match families.iter_mut().find(|g| g.name() == f.name()) {
                Some(g) => g.mut_metric().append(f.mut_metric()),
                None => families.push(f),
            }
        }
    }
    let mut buf = Vec::new();
    if TextEncoder::new().encode(&families, &mut buf).is_err() {
        return String::new();
    }
    String::from_utf8(buf).unwrap_or_default()
}

impl Metrics {}

impl Observer for Metrics {
    fn on_step(&self, s: &StepStats) {
        self.step
            .with_label_values(&[s.phase.as_str()])
            .observe(s.duration.as_secs_f64());
        self.batch_sequences.observe(s.seqs as f64);
        self.batch_tokens.observe(s.tokens as f64);
        self.preemptions.inc_by(s.preemptions as u64);
        self.prefix_queries.inc_by(s.prefix_queries);
        self.prefix_hits.inc_by(s.prefix_hits);
        if s.drafted > 0 {
            let method = [s.spec_method.as_str()];
            self.spec_drafted
                .with_label_values(&method)
                .inc_by(s.drafted as u64);
            self.spec_accepted
                .with_label_values(&method)
                .inc_by(s.accepted as u64);
        }
    }

    fn on_request(&self, r: &RequestStats) {
        self.request_duration.observe(r.duration.as_secs_f64());
        self.queue.observe(r.queue.as_secs_f64());
        if let Some(ttft) = r.ttft {
            self.ttft.observe(ttft.as_secs_f64());
            if r.generated_tokens > 1 {
                let per =
                    r.duration.saturating_sub(ttft).as_secs_f64() / (r.generated_tokens - 1) as f64;
                self.tpot.observe(per);
            }
        }
        for gap in &r.itl {
            self.itl.observe(gap.as_secs_f64());
        }
        self.prompt_tokens_hist.observe(r.prompt_tokens as f64);
        self.generation_tokens_hist
            .observe(r.generated_tokens as f64);
        self.prompt_tokens.inc_by(r.prompt_tokens as u64);
        self.generation_tokens.inc_by(r.generated_tokens as u64);
        for f in &r.finish_reasons {
            self.finished.with_label_values(&[f.as_str()]).inc();
        }
    }

    fn on_fault(&self, _worker: usize) {
        self.engine_faults.inc();
    }

    fn on_tiers(&self, t: &TierStats) {
        self.tiers.on_tiers(t);
    }

    fn on_tier_restore(&self, tier: CacheTier, _blocks: usize, took: Duration) {
        self.tiers.on_restore(tier, took);
    }

    fn on_disk_write(&self, took: Duration, _since_queued: Duration) {
        self.tiers.on_disk_write(took);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduler::{FinishReason, StepKind};

    #[test]
    fn every_family_is_exported_and_numbers_add_up() {
        let m = Metrics::new("m").unwrap();
        m.http_request("/v1/chat/completions", 200);
        m.rejected("overloaded");
        m.set_build_info(&BuildInfo {
            version: "0".into(),
            isa: "avx512".into(),
            threads: 2,
            workers: 1,
            model: "m".into(),
            quant: "Q4_1".into(),
        });
        m.set_load(&Load {
            waiting: 1,
            running: 2,
            kv_blocks_used: 3,
            kv_blocks_cached: 1,
            kv_blocks_total: 10,
        });
        m.on_step(&StepStats {
            worker: 0,
            phase: StepKind::Mixed,
            seqs: 2,
            tokens: 20,
            prefill_tokens: 18,
            decode_tokens: 2,
            duration: Duration::from_millis(30),
            running: 2,
            waiting: 0,
            kv_blocks_used: 3,
            kv_blocks_cached: 1,
            kv_blocks_total: 10,
            preemptions: 1,
            prefix_queries: 1,
            prefix_hits: 1,
            masks: 0,
            mask_time: Duration::ZERO,
            mask_wait: Duration::ZERO,
            spec_method: SpecMethod::Ngram,
            drafted: 5,
            accepted: 3,
        });
        m.on_request(&RequestStats {
            queue: Duration::from_millis(5),
            ttft: Some(Duration::from_millis(50)),
            itl: vec![Duration::from_millis(10); 3],
            duration: Duration::from_millis(80),
            prompt_tokens: 18,
            cached_tokens: 0,
            generated_tokens: 4,
            finish_reasons: vec![FinishReason::Length],
            preemptions: 0,
        });
        let tiers = TierStats {
            ram_hits: 2,
            ram_blocks: 5,
            ram_bytes: 500,
            ..TierStats::default()
        };
        m.on_tiers(&tiers);
        m.on_tiers(&TierStats {
            ram_hits: 3,
            ..tiers
        });
        m.on_tier_restore(CacheTier::Disk, 4, Duration::from_millis(3));
        let text = m.render();
        assert!(
            text.contains(
                "kiln_prefix_cache_tier_lookups_total{result=\"hit\",tier=\"ram\",model=\"m\"} 3"
            ),
            "{text}"
        );
        assert!(text.contains("kiln_prefix_cache_tier_bytes{tier=\"ram\",model=\"m\"} 500"));
        assert!(
            text.contains("kiln_prefix_cache_restore_seconds_count{tier=\"disk\",model=\"m\"} 1")
        );
        for name in ALL {
            assert!(text.contains(&format!("# TYPE {name} ")), "{name} missing");
        }
        assert!(
            text.contains("kiln_requests_finished_total{finish_reason=\"length\",model=\"m\"} 1")
        );
        assert!(text.contains("kiln_generation_tokens_total{model=\"m\"} 4"));
        assert!(text.contains("kiln_spec_draft_tokens_total{method=\"ngram\",model=\"m\"} 5"));
        assert!(text.contains("kiln_spec_accepted_tokens_total{method=\"ngram\",model=\"m\"} 3"));
        assert!(text.contains("kiln_inter_token_latency_seconds_count{model=\"m\"} 3"));
        assert!(text.contains("kiln_kv_cache_blocks{state=\"free\",model=\"m\"} 6"));
        assert!(text.contains("kiln_kv_cache_usage_ratio{model=\"m\"} 0.3"));
        assert!(text.contains("process_resident_memory_bytes"));
    }
}
