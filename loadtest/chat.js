// k6 closed-loop chat scenario (issue 8, section 6): USERS clients against an OpenAI-compatible
// server (kiln or llama.cpp's llama-server), for DURATION.
//
//   k6 run -e BASE_URL=http://127.0.0.1:8080 -e MODEL=SmolLM2-135M-Instruct.Q4_1 loadtest/chat.js
//
// Environment:
//   BASE_URL      server root (default http://127.0.0.1:8080); only loopback is ever targeted
//   MODEL         the `model` field; empty = omitted (kiln then uses its only model)
//   USERS         clients in the closed loop (default 16): USERS-1 chat users + 1 TTFT probe
//                 (with USERS=1, a single chat user and no probe)
//   DURATION      how long the loop runs (default 60s)
//   MAX_TOKENS    tokens per answer (default 64)
//   IGNORE_EOS    "1" (default): every answer is MAX_TOKENS long on both servers, so the two
//                 do the same work; "0": answers may end early at the end-of-generation token
//   SUMMARY_JSON  also write the figures as JSON to this path (scripts/serve_compare.py)
//   THRESHOLD_*   override one bar of thresholds.json (p95 TTFT, p99 end-to-end, tokens/s);
//                 THRESHOLDS=0 keeps only "every check passes, no request fails"
//
// Each chat user sends a chat completion (a shared ~50-token system prompt, a user prompt
// drawn from data/prompts.json, temperature 0.7, non-streaming), waits for the answer, and
// sends the next one at once. What is recorded:
//   gen_tokens     Counter: usage.completion_tokens of each answered chat request
//   chat_e2e       Trend: a chat request's end-to-end time (request sent -> whole answer read)
//   ttft           Trend: time to first token, from the probe (see below)
//   failed         Counter: requests that did not come back 200 with an answer
//
// TTFT: k6 reads a response body whole, so it cannot see when the first SSE chunk of a
// stream arrives, and the first byte is no proxy for the first token (kiln sends the
// headers and the role chunk as soon as a request is admitted). So one of the USERS clients
// is a probe: the same kind of request (same system prompt, a drawn user prompt) with
// max_tokens 1, one every PROBE_PAUSE seconds (default 1). Its whole latency is queueing +
// prefill + the first token: the TTFT a user sees on a server busy with the other clients.
// Keeping the probe inside USERS means the server never has more than USERS requests, so
// llama-server with USERS slots never queues it behind the others.

import http from 'k6/http';
import { check, sleep } from 'k6';
import { Counter, Trend } from 'k6/metrics';
import { loadThresholds } from './lib/common.js';

const BASE_URL = (__ENV.BASE_URL || 'http://127.0.0.1:8080').replace(/\/$/, '');
const MODEL = __ENV.MODEL || '';
const USERS = parseInt(__ENV.USERS || '16', 10);
const DURATION = __ENV.DURATION || '60s';
const MAX_TOKENS = parseInt(__ENV.MAX_TOKENS || '64', 10);
const IGNORE_EOS = (__ENV.IGNORE_EOS || '1') !== '0';
const PROBE_PAUSE = parseFloat(__ENV.PROBE_PAUSE || '1');
const PROBE = USERS > 1;

// Loaded once, shared read-only by every VU.
const DATA = JSON.parse(open('./data/prompts.json'));
// thresholds.json (THRESHOLD_* overrides); THRESHOLDS=0 drops them (serve_compare.py runs
// other servers that may be far slower, and compares figures instead).
const T = loadThresholds(open('./thresholds.json'));
const USE_THRESHOLDS = (__ENV.THRESHOLDS || '1') !== '0';

const genTokens = new Counter('gen_tokens');
const chatE2e = new Trend('chat_e2e', true);
const ttft = new Trend('ttft', true);
const failed = new Counter('failed');

const scenarios = {
  chat: {
    executor: 'constant-vus',
    exec: 'chatUser',
    vus: PROBE ? USERS - 1 : USERS,
    duration: DURATION,
    gracefulStop: '60s',
  },
};
if (PROBE) {
  scenarios.ttft_probe = {
    executor: 'constant-vus',
    exec: 'probeUser',
    vus: 1,
    duration: DURATION,
    gracefulStop: '60s',
  };
}

export const options = {
  scenarios,
  // Every check passes and no request fails, or the run exits non-zero (k6: 99).
  thresholds: Object.assign(
    {
      checks: ['rate==1'],
      failed: ['count==0'],
    },
    USE_THRESHOLDS
      ? {
        ttft: [`p(95)<${T.ttft_p95_ms}`],
        chat_e2e: [`p(99)<${T.e2e_p99_ms}`],
        gen_tokens: [`rate>=${T.min_gen_tokens_per_s}`],
      }
      : {},
  ),
  summaryTrendStats: ['count', 'avg', 'min', 'med', 'p(90)', 'p(95)', 'p(99)', 'max'],
};

function body(maxTokens) {
  const prompts = DATA.prompts;
  const user = prompts[Math.floor(Math.random() * prompts.length)];
  const b = {
    messages: [
      { role: 'system', content: DATA.system },
      { role: 'user', content: user },
    ],
    max_tokens: maxTokens,
    temperature: 0.7,
    stream: false,
  };
  if (MODEL) b.model = MODEL;
  if (IGNORE_EOS) b.ignore_eos = true; // an extension both kiln and llama-server accept
  return JSON.stringify(b);
}

function post(maxTokens, tag) {
  return http.post(`${BASE_URL}/v1/chat/completions`, body(maxTokens), {
    headers: { 'Content-Type': 'application/json' },
    timeout: '180s',
    tags: { kind: tag },
  });
}

// The completion's usage, or null when the response is not a completion.
function usageOf(res) {
  if (res.status !== 200) return null;
  try {
    const j = res.json();
    const text = j.choices && j.choices[0] && j.choices[0].message && j.choices[0].message.content;
    return typeof text === 'string' && j.usage ? j.usage : null;
  } catch (e) {
    return null;
  }
}

export function chatUser() {
  const res = post(MAX_TOKENS, 'chat');
  const usage = usageOf(res);
  const ok = check(res, {
    'chat: status 200': (r) => r.status === 200,
    'chat: an answer with usage': () => usage !== null && usage.completion_tokens > 0,
  });
  if (!ok) {
    failed.add(1, { kind: 'chat' });
    sleep(0.5); // a failing server is not hammered in a tight loop
    return;
  }
  genTokens.add(usage.completion_tokens);
  chatE2e.add(res.timings.duration);
}

export function probeUser() {
  const res = post(1, 'probe');
  const usage = usageOf(res);
  const ok = check(res, {
    'probe: status 200': (r) => r.status === 200,
    'probe: one token': () => usage !== null && usage.completion_tokens === 1,
  });
  if (ok) {
    genTokens.add(usage.completion_tokens);
    ttft.add(res.timings.duration);
  } else {
    failed.add(1, { kind: 'probe' });
  }
  sleep(PROBE_PAUSE);
}

// The figures serve_compare.py reads, and a short text summary. (k6's own text summary
// needs a jslib fetched from the network, which is not reached from here.)
export function handleSummary(data) {
  const m = data.metrics;
  const trend = (name) => {
    const v = (m[name] && m[name].values) || {};
    return { count: v.count || 0, p50: v.med, p95: v['p(95)'], p99: v['p(99)'], avg: v.avg, max: v.max };
  };
  const seconds = data.state.testRunDurationMs / 1000;
  const tokens = (m.gen_tokens && m.gen_tokens.values.count) || 0;
  const chatCount = trend('chat_e2e').count;
  const checks = m.checks ? m.checks.values : { passes: 0, fails: 0 };
  const out = {
    base_url: BASE_URL,
    users: USERS,
    duration_s: seconds,
    max_tokens: MAX_TOKENS,
    gen_tokens: tokens,
    // Over the whole run, including the graceful stop where the last requests finish.
    tokens_per_s: seconds > 0 ? tokens / seconds : 0,
    chat_requests: chatCount,
    failed: (m.failed && m.failed.values.count) || 0,
    checks_passed: checks.passes,
    checks_failed: checks.fails,
    e2e_ms: trend('chat_e2e'),
    ttft_ms: trend('ttft'),
  };
  const f = (x) => (x === undefined || x === null ? '-' : x.toFixed(0));
  const text = [
    `chat.js: ${BASE_URL}, ${USERS} users, ${seconds.toFixed(1)} s`,
    `  generated tokens: ${tokens} (${out.tokens_per_s.toFixed(1)} tok/s), chat requests: ${chatCount}, failed: ${out.failed}`,
    `  checks: ${checks.passes} passed, ${checks.fails} failed`,
    `  end-to-end ms: p50 ${f(out.e2e_ms.p50)} p95 ${f(out.e2e_ms.p95)} p99 ${f(out.e2e_ms.p99)}`,
    `  TTFT ms (probe): p50 ${f(out.ttft_ms.p50)} p95 ${f(out.ttft_ms.p95)} p99 ${f(out.ttft_ms.p99)}`,
    '',
  ].join('\n');
  const files = { stdout: text };
  if (__ENV.SUMMARY_JSON) files[__ENV.SUMMARY_JSON] = JSON.stringify(out, null, 2);
  return files;
}
