// k6 smoke scenario: one user, a few requests of every kind, every check must pass.
//
//   k6 run -e BASE_URL=http://127.0.0.1:8080 loadtest/smoke.js
//
// Environment (besides lib/common.js's BASE_URL, MODEL, API_KEY, SUMMARY_JSON):
//   ITERATIONS   rounds of the request set (default 3)
//   MAX_TOKENS   tokens per answer (default 16)
//   PAUSE        seconds between rounds (default 0; k6's HTML report needs a run of a few
//                dashboard periods to have anything to plot)
//
// One round: GET /v1/models; a chat completion; a streamed chat completion (role first, one id,
// a finish reason, the usage chunk with kiln's timings, [DONE]); a text completion; a streamed
// text completion. Recorded: ttft, itl (from the stream's timings), e2e, gen_tokens, errors.
// The run fails (k6 exit 99) on any failed check or request.

import http from 'k6/http';
import { check, sleep } from 'k6';
import { Counter, Rate, Trend } from 'k6/metrics';
import {
  BASE_URL, MODEL, chatBody, count, envFloat, envInt, f0, headers, post, rate, readStream, summaryFiles,
  thresholdsHeld, trend,
} from './lib/common.js';

const DATA = JSON.parse(open('./data/prompts.json'));
const ITERATIONS = envInt('ITERATIONS', 3);
const MAX_TOKENS = envInt('MAX_TOKENS', 16);
const PAUSE = envFloat('PAUSE', 0);

const genTokens = new Counter('gen_tokens');
const ttft = new Trend('ttft', true);
const itl = new Trend('itl', true);
const e2e = new Trend('e2e', true);
const errors = new Rate('errors');

export const options = {
  scenarios: {
    smoke: { executor: 'per-vu-iterations', vus: 1, iterations: ITERATIONS, maxDuration: '2m' },
  },
  thresholds: {
    checks: ['rate==1'],
    errors: ['rate==0'],
  },
  summaryTrendStats: ['count', 'avg', 'min', 'med', 'p(90)', 'p(95)', 'p(99)', 'max'],
};

function completionBody(stream) {
  const b = {
    prompt: 'The three stages of firing clay are',
    max_tokens: MAX_TOKENS,
    temperature: 0.7,
    stream,
  };
  if (stream) b.stream_options = { include_usage: true };
  if (MODEL) b.model = MODEL;
  return b;
}

function recordStream(s, res) {
  e2e.add(res.timings.duration);
  if (s.usage) genTokens.add(s.usage.completion_tokens);
  if (s.timings) {
    if (s.timings.ttft_ms !== null) ttft.add(s.timings.ttft_ms);
    for (const g of s.timings.itl_ms) itl.add(g);
  }
}

export default function () {
  const models = http.get(`${BASE_URL}/v1/models`, { headers: headers(), tags: { kind: 'models' } });
  errors.add(!check(models, {
    'models: 200 with a model': (r) => r.status === 200 && r.json('data.0.id') !== undefined,
  }));

  const chat = post('/v1/chat/completions', chatBody(DATA, { maxTokens: MAX_TOKENS }), { tags: { kind: 'chat' } });
  const chatOk = check(chat, {
    'chat: 200': (r) => r.status === 200,
    'chat: an answer': (r) => r.status === 200 && typeof r.json('choices.0.message.content') === 'string',
    'chat: usage': (r) => r.status === 200 && r.json('usage.completion_tokens') > 0,
  });
  errors.add(!chatOk);
  if (chatOk) {
    genTokens.add(chat.json('usage.completion_tokens'));
    e2e.add(chat.timings.duration);
  }

  const sc = post('/v1/chat/completions', chatBody(DATA, { maxTokens: MAX_TOKENS, stream: true }),
    { tags: { kind: 'chat_stream' } });
  const s = readStream(sc);
  const streamOk = check(sc, {
    'chat stream: 200 event-stream': (r) => r.status === 200
      && String(r.headers['Content-Type']).startsWith('text/event-stream'),
    'chat stream: ends with [DONE], no error event': () => s.done && s.errors.length === 0,
    'chat stream: one id on every chunk': () => s.sameId,
    'chat stream: a finish reason': () => s.finish === 'stop' || s.finish === 'length',
    'chat stream: usage and timings on the last chunk': () => s.usage !== null && s.timings !== null
      && s.timings.itl_ms.length === Math.max(0, s.usage.completion_tokens - 1),
  });
  errors.add(!streamOk);
  if (streamOk) recordStream(s, sc);

  const cmpl = post('/v1/completions', completionBody(false), { tags: { kind: 'completion' } });
  const cmplOk = check(cmpl, {
    'completion: 200 with text': (r) => r.status === 200 && typeof r.json('choices.0.text') === 'string',
  });
  errors.add(!cmplOk);
  if (cmplOk) {
    genTokens.add(cmpl.json('usage.completion_tokens'));
    e2e.add(cmpl.timings.duration);
  }

  const cs = post('/v1/completions', completionBody(true), { tags: { kind: 'completion_stream' } });
  const t = readStream(cs);
  const cStreamOk = check(cs, {
    'completion stream: 200, [DONE], text': (r) => r.status === 200 && t.done && t.errors.length === 0
      && t.content.length > 0,
    'completion stream: usage and timings': () => t.usage !== null && t.timings !== null,
  });
  errors.add(!cStreamOk);
  if (cStreamOk) recordStream(t, cs);
  if (PAUSE > 0) sleep(PAUSE);
}

export function handleSummary(data) {
  const checks = data.metrics.checks ? data.metrics.checks.values : { passes: 0, fails: 0 };
  const out = {
    scenario: 'smoke',
    base_url: BASE_URL,
    duration_s: data.state.testRunDurationMs / 1000,
    gen_tokens: count(data, 'gen_tokens'),
    error_rate: rate(data, 'errors'),
    checks_passed: checks.passes,
    checks_failed: checks.fails,
    ttft_ms: trend(data, 'ttft'),
    itl_ms: trend(data, 'itl'),
    e2e_ms: trend(data, 'e2e'),
    thresholds_crossed: thresholdsHeld(data),
  };
  return summaryFiles(out, [
    `smoke.js: ${BASE_URL}, ${ITERATIONS} rounds, ${out.duration_s.toFixed(1)} s`,
    `  checks: ${checks.passes} passed, ${checks.fails} failed; generated tokens: ${out.gen_tokens}`,
    `  TTFT ms p50 ${f0(out.ttft_ms.p50)}, ITL ms p50 ${f0(out.itl_ms.p50)}, e2e ms p50 ${f0(out.e2e_ms.p50)}`,
  ]);
}
