// k6 streaming scenario: closed-loop users streaming chat completions.
//
//   k6 run -e BASE_URL=http://127.0.0.1:8080 loadtest/stream.js
//
// Environment (besides lib/common.js's BASE_URL, MODEL, API_KEY, SUMMARY_JSON, THRESHOLD_*):
//   USERS        concurrent streaming users (default 16)
//   DURATION     how long (default 60s)
//   MAX_TOKENS   tokens per answer (default 64)
//
// Each user streams a chat completion (`stream_options.include_usage`), reads it to [DONE],
// and sends the next at once. Prompts come from data/prompts.json (short questions, long ones
// with context, multi-turn conversations).
//
// Time to first token and inter-token latency: k6 reads a response body whole, so it cannot
// time chunk arrivals itself. kiln's usage chunk carries `timings` measured by the engine
// (`ttft_ms`: acceptance to first token; `itl_ms`: every gap between consecutive tokens),
// recorded here as the `ttft` and `itl` trends. `e2e` is k6's own request time.
// Thresholds (thresholds.json): ttft p95, itl p99, e2e p99, error rate, generated tokens/s.

import { check, sleep } from 'k6';
import { Counter, Rate, Trend } from 'k6/metrics';
import {
  BASE_URL, chatBody, count, envInt, envStr, f0, loadThresholds, post, rate, readStream,
  summaryFiles, thresholdRules, thresholdsHeld, trend,
} from './lib/common.js';

const DATA = JSON.parse(open('./data/prompts.json'));
const T = loadThresholds(open('./thresholds.json'));
const USERS = envInt('USERS', 16);
const DURATION = envStr('DURATION', '60s');
const MAX_TOKENS = envInt('MAX_TOKENS', 64);

const genTokens = new Counter('gen_tokens');
const ttft = new Trend('ttft', true);
const itl = new Trend('itl', true);
const e2e = new Trend('e2e', true);
const errors = new Rate('errors');

export const options = {
  scenarios: {
    stream: { executor: 'constant-vus', vus: USERS, duration: DURATION, gracefulStop: '60s' },
  },
  thresholds: Object.assign(
    { checks: ['rate==1'] },
    thresholdRules(T, ['ttft', 'itl', 'e2e', 'errors', 'tokens']),
  ),
  summaryTrendStats: ['count', 'avg', 'min', 'med', 'p(90)', 'p(95)', 'p(99)', 'max'],
};

export default function () {
  const res = post('/v1/chat/completions', chatBody(DATA, { maxTokens: MAX_TOKENS, stream: true }),
    { tags: { kind: 'chat_stream' } });
  const s = readStream(res);
  const ok = check(res, {
    'stream: 200': (r) => r.status === 200,
    'stream: [DONE] and no error event': () => s.done && s.errors.length === 0,
    'stream: content and a finish reason': () => s.content.length > 0 && s.finish !== null,
    'stream: usage with timings': () => s.usage !== null && s.timings !== null,
  });
  errors.add(!ok);
  if (!ok) {
    sleep(0.5); // a failing server is not hammered in a tight loop
    return;
  }
  genTokens.add(s.usage.completion_tokens);
  e2e.add(res.timings.duration);
  if (s.timings.ttft_ms !== null) ttft.add(s.timings.ttft_ms);
  for (const g of s.timings.itl_ms) itl.add(g);
}

export function handleSummary(data) {
  const seconds = data.state.testRunDurationMs / 1000;
  const tokens = count(data, 'gen_tokens');
  const out = {
    scenario: 'stream',
    base_url: BASE_URL,
    users: USERS,
    duration_s: seconds,
    max_tokens: MAX_TOKENS,
    requests: trend(data, 'e2e').count,
    gen_tokens: tokens,
    tokens_per_s: seconds > 0 ? tokens / seconds : 0,
    error_rate: rate(data, 'errors'),
    ttft_ms: trend(data, 'ttft'),
    itl_ms: trend(data, 'itl'),
    e2e_ms: trend(data, 'e2e'),
    thresholds: T,
    thresholds_crossed: thresholdsHeld(data),
  };
  return summaryFiles(out, [
    `stream.js: ${BASE_URL}, ${USERS} users, ${seconds.toFixed(1)} s`,
    `  generated tokens: ${tokens} (${out.tokens_per_s.toFixed(1)} tok/s), streams: ${out.requests}, error rate ${out.error_rate}`,
    `  TTFT ms: p50 ${f0(out.ttft_ms.p50)} p95 ${f0(out.ttft_ms.p95)} p99 ${f0(out.ttft_ms.p99)}`,
    `  ITL ms:  p50 ${f0(out.itl_ms.p50)} p95 ${f0(out.itl_ms.p95)} p99 ${f0(out.itl_ms.p99)}`,
    `  e2e ms:  p50 ${f0(out.e2e_ms.p50)} p95 ${f0(out.e2e_ms.p95)} p99 ${f0(out.e2e_ms.p99)}`,
    `  thresholds crossed: ${out.thresholds_crossed.length ? out.thresholds_crossed.join('; ') : 'none'}`,
  ]);
}
