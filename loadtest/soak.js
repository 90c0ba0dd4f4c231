// k6 soak scenario: a long steady load with random client aborts; memory stays flat and the
// KV cache comes back to its baseline.
//
//   k6 run -e BASE_URL=http://127.0.0.1:8080 -e DURATION=30m loadtest/soak.js
//
// Environment (besides lib/common.js's BASE_URL, MODEL, API_KEY, SUMMARY_JSON, THRESHOLD_*):
//   USERS         concurrent users (default 8)
//   DURATION      how long (default 10m)
//   MAX_TOKENS    tokens per answer (default 64)
//   ABORT_SHARE   share of requests the client abandons mid-stream (default 0.2): k6 gives
//                 them a timeout of 0.2-1.5 s and closes the connection when it passes
//   SAMPLE_EVERY  seconds between /metrics samples (default 5)
//   MAX_RSS_GROWTH  most the resident memory may grow over the second half of the run
//                 (default 0.05 = 5%; the first half warms the allocator and the KV pages)
//
// Pass/fail: no errors among the requests not abandoned (thresholds.json's error rate); every
// check passes; `rss_growth` (the resident memory of each sample in the second half over the
// first sample after half-time) stays under 1 + MAX_RSS_GROWTH; and at the end, once the load
// stops, kiln returns to its baseline: no request running or waiting and no KV block held
// (`back_to_baseline`, read from /metrics; blocks the prefix cache keeps for reuse are free
// to evict and not counted as used).

import exec from 'k6/execution';
import { check, sleep } from 'k6';
import { Counter, Gauge, Rate, Trend } from 'k6/metrics';
import {
  BASE_URL, chatBody, count, envFloat, envInt, envStr, f0, loadThresholds, post, rate,
  readStream, scrape, summaryFiles, thresholdRules, thresholdsHeld, trend,
} from './lib/common.js';

const DATA = JSON.parse(open('./data/prompts.json'));
const T = loadThresholds(open('./thresholds.json'));
const USERS = envInt('USERS', 8);
const DURATION = envStr('DURATION', '10m');
const MAX_TOKENS = envInt('MAX_TOKENS', 64);
const ABORT_SHARE = envFloat('ABORT_SHARE', 0.2);
const SAMPLE_EVERY = envFloat('SAMPLE_EVERY', 5);
const MAX_RSS_GROWTH = envFloat('MAX_RSS_GROWTH', 0.05);

const genTokens = new Counter('gen_tokens');
const aborted = new Counter('aborted');
const e2e = new Trend('e2e', true);
const ttft = new Trend('ttft', true);
const errors = new Rate('errors');
const rssMb = new Trend('rss_mb');
const kvUsage = new Trend('kv_usage_ratio');
const rssGrowth = new Trend('rss_growth');
const rssEndMb = new Gauge('rss_end_mb');
const backToBaseline = new Rate('back_to_baseline');

export const options = {
  scenarios: {
    users: { executor: 'constant-vus', exec: 'user', vus: USERS, duration: DURATION, gracefulStop: '60s' },
    sampler: { executor: 'constant-vus', exec: 'sampler', vus: 1, duration: DURATION, gracefulStop: '10s' },
  },
  thresholds: Object.assign(
    {
      checks: ['rate==1'],
      rss_growth: [`max<${1 + MAX_RSS_GROWTH}`],
      back_to_baseline: ['rate==1'],
      aborted: ['count>0'],
    },
    thresholdRules(T, ['e2e', 'errors']),
  ),
  summaryTrendStats: ['count', 'avg', 'min', 'med', 'p(95)', 'p(99)', 'max'],
  setupTimeout: '60s',
  teardownTimeout: '90s',
};

function seconds(d) {
  const m = /^(\d+(?:\.\d+)?)(ms|s|m|h)$/.exec(d);
  if (!m) throw new Error(`not a duration: ${d}`);
  const v = parseFloat(m[1]);
  return { ms: v / 1000, s: v, m: v * 60, h: v * 3600 }[m[2]];
}
const DURATION_S = seconds(DURATION);

export function user() {
  const abandon = Math.random() < ABORT_SHARE;
  const params = { tags: { kind: abandon ? 'abandoned' : 'chat_stream' } };
  if (abandon) params.timeout = `${Math.round(200 + Math.random() * 1300)}ms`;
  const res = post('/v1/chat/completions', chatBody(DATA, { maxTokens: MAX_TOKENS, stream: true }), params);
  if (abandon && res.status === 0) {
    // k6 gave up and closed the connection: kiln must notice and free the request.
    aborted.add(1);
    return;
  }
  const s = readStream(res);
  const ok = check(res, {
    'soak: a complete stream': (r) => r.status === 200 && s.done && s.errors.length === 0 && s.usage !== null,
  });
  errors.add(!ok);
  if (!ok) {
    sleep(0.5);
    return;
  }
  genTokens.add(s.usage.completion_tokens);
  e2e.add(res.timings.duration);
  if (s.timings && s.timings.ttft_ms !== null) ttft.add(s.timings.ttft_ms);
}

// One VU's state across its iterations: the resident memory at half-time.
let rssAtHalf = null;

export function sampler() {
  const m = scrape();
  if (m !== null) {
    const rss = m.process_resident_memory_bytes / (1 << 20);
    rssMb.add(rss);
    kvUsage.add(m.kiln_kv_cache_usage_ratio);
    const elapsed = (Date.now() - exec.scenario.startTime) / 1000;
    if (elapsed >= DURATION_S / 2) {
      if (rssAtHalf === null) rssAtHalf = rss;
      rssGrowth.add(rss / rssAtHalf);
    }
  }
  sleep(SAMPLE_EVERY);
}

export function setup() {
  const m = scrape();
  if (m === null) throw new Error(`cannot read ${BASE_URL}/metrics`);
  return { rssStartMb: m.process_resident_memory_bytes / (1 << 20) };
}

export function teardown(data) {
  // The load has stopped: wait for kiln to finish what it still runs, then compare.
  let m = null;
  for (let i = 0; i < 60; i++) {
    m = scrape();
    if (m !== null && m.kiln_requests_running === 0 && m.kiln_requests_waiting === 0
        && m.kiln_kv_cache_usage_ratio === 0) break;
    sleep(1);
  }
  const ok = m !== null && m.kiln_requests_running === 0 && m.kiln_requests_waiting === 0
    && m.kiln_kv_cache_usage_ratio === 0;
  backToBaseline.add(ok);
  if (m !== null) rssEndMb.add(m.process_resident_memory_bytes / (1 << 20));
  check(m, { 'soak: back to baseline (nothing running or waiting, no KV block held)': () => ok });
  return data;
}

export function handleSummary(data) {
  const secs = data.state.testRunDurationMs / 1000;
  const tokens = count(data, 'gen_tokens');
  const g = data.metrics.rss_growth && data.metrics.rss_growth.values;
  const out = {
    scenario: 'soak',
    base_url: BASE_URL,
    users: USERS,
    duration_s: secs,
    requests: trend(data, 'e2e').count,
    aborted: count(data, 'aborted'),
    gen_tokens: tokens,
    tokens_per_s: secs > 0 ? tokens / secs : 0,
    error_rate: rate(data, 'errors'),
    rss_mb: trend(data, 'rss_mb'),
    rss_growth_max: g ? g.max : null,
    rss_end_mb: data.metrics.rss_end_mb ? data.metrics.rss_end_mb.values.value : null,
    kv_usage_ratio: trend(data, 'kv_usage_ratio'),
    back_to_baseline: rate(data, 'back_to_baseline') === 1,
    ttft_ms: trend(data, 'ttft'),
    e2e_ms: trend(data, 'e2e'),
    thresholds: T,
    thresholds_crossed: thresholdsHeld(data),
  };
  return summaryFiles(out, [
    `soak.js: ${BASE_URL}, ${USERS} users, ${secs.toFixed(1)} s, ${ABORT_SHARE * 100}% abandoned`,
    `  streams ${out.requests}, abandoned ${out.aborted}, error rate ${out.error_rate}; ${tokens} tokens (${out.tokens_per_s.toFixed(1)} tok/s)`,
    `  RSS MiB: min ${f0(out.rss_mb.p50 === undefined ? null : data.metrics.rss_mb.values.min)} max ${f0(out.rss_mb.max)} end ${f0(out.rss_end_mb)}; second-half growth ${out.rss_growth_max === null ? '-' : ((out.rss_growth_max - 1) * 100).toFixed(1) + '%'}`,
    `  KV usage: p50 ${out.kv_usage_ratio.p50 === undefined ? '-' : out.kv_usage_ratio.p50.toFixed(3)} max ${out.kv_usage_ratio.max === undefined ? '-' : out.kv_usage_ratio.max.toFixed(3)}; back to baseline at the end: ${out.back_to_baseline}`,
    `  TTFT ms p50 ${f0(out.ttft_ms.p50)} p95 ${f0(out.ttft_ms.p95)}; e2e ms p50 ${f0(out.e2e_ms.p50)} p99 ${f0(out.e2e_ms.p99)}`,
    `  thresholds crossed: ${out.thresholds_crossed.length ? out.thresholds_crossed.join('; ') : 'none'}`,
  ]);
}
