// k6 ramp scenario: an open-model arrival rate ramped past the server's capacity.
//
//   k6 run -e BASE_URL=http://127.0.0.1:8080 loadtest/ramp.js
//
// Environment (besides lib/common.js's BASE_URL, MODEL, API_KEY, SUMMARY_JSON, THRESHOLD_*):
//   START_RATE   requests/s at the start (default 1)
//   PEAK_RATE    requests/s at the top of the ramp (default 48; about 2x what 2 quiet cores serve)
//   RAMP         time to go from START_RATE to PEAK_RATE (default 60s)
//   HOLD         time held at PEAK_RATE (default 20s)
//   MAX_TOKENS   tokens per answer (default 32)
//   MAX_VUS      most requests in flight from k6 (default 300)
//
// Requests arrive at the set rate whether or not earlier ones finished (ramping-arrival-rate),
// each a streamed chat completion. What must hold past capacity: kiln refuses the excess at once
// with 429 and a Retry-After header (its waiting queue is bounded: run kiln with a small
// scheduler.max_waiting, as `make loadtest SCENARIO=ramp` does) instead of letting requests
// time out, and the requests it accepts keep the latency thresholds (ttft p95, e2e p99 of
// thresholds.json, over accepted requests only). Anything but a 200 stream or a 429 is an
// error. The knee: the offered rate at which the first 429s came (`rejected_at_rate` trend:
// min = the first refusal, p50 = where half of the refusals had begun).

import exec from 'k6/execution';
import { check } from 'k6';
import { Counter, Rate, Trend } from 'k6/metrics';
import {
  BASE_URL, chatBody, count, envFloat, envInt, envStr, f0, loadThresholds, post, rate,
  readStream, summaryFiles, thresholdRules, thresholdsHeld, trend,
} from './lib/common.js';

const DATA = JSON.parse(open('./data/prompts.json'));
const T = loadThresholds(open('./thresholds.json'));
const START_RATE = envFloat('START_RATE', 1);
const PEAK_RATE = envFloat('PEAK_RATE', 48);
const RAMP = envStr('RAMP', '60s');
const HOLD = envStr('HOLD', '20s');
const MAX_TOKENS = envInt('MAX_TOKENS', 32);
const MAX_VUS = envInt('MAX_VUS', 300);

const genTokens = new Counter('gen_tokens');
const accepted = new Counter('accepted');
const rejected = new Counter('rejected');
const ttft = new Trend('ttft', true);
const e2e = new Trend('e2e', true);
const rejectedAt = new Trend('rejected_at_rate');
const errors = new Rate('errors');

function seconds(d) {
  const m = /^(\d+(?:\.\d+)?)(ms|s|m)$/.exec(d);
  if (!m) throw new Error(`not a duration: ${d}`);
  const v = parseFloat(m[1]);
  return m[2] === 'ms' ? v / 1000 : m[2] === 'm' ? v * 60 : v;
}
const RAMP_S = seconds(RAMP);

export const options = {
  scenarios: {
    ramp: {
      executor: 'ramping-arrival-rate',
      startRate: START_RATE,
      timeUnit: '1s',
      preAllocatedVUs: Math.min(64, MAX_VUS),
      maxVUs: MAX_VUS,
      stages: [
        { target: PEAK_RATE, duration: RAMP },
        { target: PEAK_RATE, duration: HOLD },
      ],
      gracefulStop: '60s',
    },
  },
  thresholds: Object.assign(
    {
      checks: ['rate==1'],
      // The ramp must reach past capacity, or it showed nothing: raise PEAK_RATE.
      rejected: ['count>0'],
    },
    thresholdRules(T, ['ttft', 'e2e', 'errors']),
  ),
  summaryTrendStats: ['count', 'avg', 'min', 'med', 'p(90)', 'p(95)', 'p(99)', 'max'],
};

/// The arrival rate the executor is set to `elapsed` seconds into the scenario.
function offeredRate(elapsed) {
  if (elapsed >= RAMP_S) return PEAK_RATE;
  return START_RATE + (PEAK_RATE - START_RATE) * (elapsed / RAMP_S);
}

export default function () {
  const elapsed = (Date.now() - exec.scenario.startTime) / 1000;
  const res = post('/v1/chat/completions', chatBody(DATA, { maxTokens: MAX_TOKENS, stream: true }),
    { tags: { kind: 'chat_stream' } });
  if (res.status === 429) {
    rejected.add(1);
    rejectedAt.add(offeredRate(elapsed));
    const ok = check(res, {
      '429: Retry-After in whole seconds': (r) => /^\d+$/.test(String(r.headers['Retry-After'])),
      '429: OpenAI error envelope': (r) => r.json('error.type') === 'rate_limit_error',
    });
    errors.add(!ok);
    return;
  }
  const s = readStream(res);
  const ok = check(res, {
    'accepted or refused (200 or 429), never a timeout or 5xx': (r) => r.status === 200,
    'accepted: a complete stream with timings': () => s.done && s.errors.length === 0
      && s.usage !== null && s.timings !== null,
  });
  errors.add(!ok);
  if (!ok) return;
  accepted.add(1);
  genTokens.add(s.usage.completion_tokens);
  e2e.add(res.timings.duration);
  if (s.timings.ttft_ms !== null) ttft.add(s.timings.ttft_ms);
}

export function handleSummary(data) {
  const secs = data.state.testRunDurationMs / 1000;
  const tokens = count(data, 'gen_tokens');
  const knee = trend(data, 'rejected_at_rate');
  const out = {
    scenario: 'ramp',
    base_url: BASE_URL,
    start_rate: START_RATE,
    peak_rate: PEAK_RATE,
    ramp: RAMP,
    hold: HOLD,
    duration_s: secs,
    accepted: count(data, 'accepted'),
    rejected: count(data, 'rejected'),
    dropped_by_k6: count(data, 'dropped_iterations'),
    gen_tokens: tokens,
    tokens_per_s: secs > 0 ? tokens / secs : 0,
    accepted_per_s: secs > 0 ? count(data, 'accepted') / secs : 0,
    error_rate: rate(data, 'errors'),
    knee_first_429_rate: knee.count ? data.metrics.rejected_at_rate.values.min : null,
    knee_median_429_rate: knee.p50 === undefined ? null : knee.p50,
    ttft_ms: trend(data, 'ttft'),
    e2e_ms: trend(data, 'e2e'),
    thresholds: T,
    thresholds_crossed: thresholdsHeld(data),
  };
  const r1 = (x) => (x === null || x === undefined ? '-' : x.toFixed(1));
  return summaryFiles(out, [
    `ramp.js: ${BASE_URL}, ${START_RATE} -> ${PEAK_RATE} req/s over ${RAMP}, held ${HOLD}; ${secs.toFixed(1)} s`,
    `  accepted ${out.accepted} (${out.accepted_per_s.toFixed(2)}/s), refused with 429: ${out.rejected}, dropped by k6: ${out.dropped_by_k6}, error rate ${out.error_rate}`,
    `  knee: first 429 at ${r1(out.knee_first_429_rate)} req/s offered; median refusal at ${r1(out.knee_median_429_rate)} req/s`,
    `  generated tokens: ${tokens} (${out.tokens_per_s.toFixed(1)} tok/s)`,
    `  accepted TTFT ms: p50 ${f0(out.ttft_ms.p50)} p95 ${f0(out.ttft_ms.p95)} p99 ${f0(out.ttft_ms.p99)}`,
    `  accepted e2e ms:  p50 ${f0(out.e2e_ms.p50)} p95 ${f0(out.e2e_ms.p95)} p99 ${f0(out.e2e_ms.p99)}`,
    `  thresholds crossed: ${out.thresholds_crossed.length ? out.thresholds_crossed.join('; ') : 'none'}`,
  ]);
}
