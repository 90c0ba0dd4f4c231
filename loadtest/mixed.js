// k6 mixed-API scenario (issue 20, section 6): closed-loop users each sending, at random, one of
// the APIs kiln speaks, all on the same scheduler:
//
//   k6 run -e BASE_URL=http://127.0.0.1:8080 loadtest/mixed.js
//
// Environment (besides lib/common.js's BASE_URL, MODEL, API_KEY, SUMMARY_JSON, THRESHOLD_*):
//   USERS        concurrent users (default 8)
//   DURATION     how long (default 60s)
//   MAX_TOKENS   tokens per answer (default 32)
//   ITERATIONS   when set, each user sends this many requests instead of running DURATION
//
// The mix (each user cycles through MIX below from its own offset): 30% chat completions, 30%
// Responses API (`/v1/responses`, typed events read to `response.completed` or
// `response.incomplete` when streamed), 20% Anthropic Messages (`/v1/messages`), 20%
// embeddings (a batch of 4 inputs); every other request of a user is streamed (chat and
// responses). Each answer is checked in its API's own shape. Recorded: `e2e` (every request),
// `e2e_<api>` per API, `gen_tokens`, `errors`. Thresholds (thresholds.json): e2e p99, error
// rate; and every check passes.

import { check, sleep } from 'k6';
import { Counter, Rate, Trend } from 'k6/metrics';
import {
  BASE_URL, MODEL, chatBody, count, drawMessages, envInt, envStr, f0, loadThresholds, parseSse,
  post, rate, readStream, summaryFiles, thresholdRules, thresholdsHeld, trend,
} from './lib/common.js';

const DATA = JSON.parse(open('./data/prompts.json'));
const T = loadThresholds(open('./thresholds.json'));
const USERS = envInt('USERS', 8);
const DURATION = envStr('DURATION', '60s');
const MAX_TOKENS = envInt('MAX_TOKENS', 32);
const ITERATIONS = envInt('ITERATIONS', 0);
const APIS = ['chat', 'responses', 'messages', 'embeddings'];
// The order each user goes through (from an offset of its own): 30% chat, 30% responses,
// 20% messages, 20% embeddings; every other request of a user is streamed (where the API
// streams).
const MIX = ['chat', 'responses', 'messages', 'chat', 'responses', 'embeddings', 'chat',
  'responses', 'messages', 'embeddings'];

const genTokens = new Counter('gen_tokens');
const e2e = new Trend('e2e', true);
const perApi = Object.fromEntries(APIS.map((a) => [a, new Trend(`e2e_${a}`, true)]));
const errors = new Rate('errors');

export const options = {
  scenarios: {
    mixed: ITERATIONS > 0
      ? { executor: 'per-vu-iterations', vus: USERS, iterations: ITERATIONS, maxDuration: '120s' }
      : { executor: 'constant-vus', vus: USERS, duration: DURATION, gracefulStop: '60s' },
  },
  thresholds: Object.assign({ checks: ['rate==1'] }, thresholdRules(T, ['e2e', 'errors'])),
  summaryTrendStats: ['count', 'avg', 'min', 'med', 'p(90)', 'p(95)', 'p(99)', 'max'],
};

function withModel(b) {
  if (MODEL) b.model = MODEL;
  return b;
}

function json(res) {
  try {
    return res.json();
  } catch (e) {
    return null;
  }
}

function chat(stream) {
  const res = post('/v1/chat/completions', chatBody(DATA, { maxTokens: MAX_TOKENS, stream }),
    { tags: { kind: 'chat' } });
  if (stream) {
    const s = readStream(res);
    const ok = check(res, {
      'chat stream: 200, [DONE], content, usage': (r) => r.status === 200 && s.done
        && s.errors.length === 0 && s.content.length > 0 && s.usage !== null,
    });
    return [ok, s.usage ? s.usage.completion_tokens : 0, res.timings.duration];
  }
  const j = json(res);
  const ok = check(res, {
    'chat: 200 with an answer': (r) => r.status === 200 && j !== null
      && typeof j.choices[0].message.content === 'string' && j.usage.completion_tokens > 0,
  });
  return [ok, ok ? j.usage.completion_tokens : 0, res.timings.duration];
}

function responses(stream) {
  const msgs = drawMessages(DATA);
  const body = withModel({
    instructions: msgs[0].content,
    input: msgs.slice(1).map((m) => ({ role: m.role, content: m.content })),
    max_output_tokens: MAX_TOKENS,
    temperature: 0.7,
    stream,
    store: false,
  });
  const res = post('/v1/responses', body, { tags: { kind: 'responses' } });
  if (stream) {
    const s = parseSse(res.body);
    const types = s.chunks.map((c) => c.type);
    const last = s.chunks[s.chunks.length - 1];
    const text = s.chunks.filter((c) => c.type === 'response.output_text.delta')
      .map((c) => c.delta).join('');
    const ordered = s.chunks.every((c, i) => c.sequence_number === i);
    const ok = check(res, {
      'responses stream: 200, created first, completed last, in sequence': (r) => r.status === 200
        && types[0] === 'response.created' && last !== undefined
        && (last.type === 'response.completed' || last.type === 'response.incomplete')
        && ordered && s.errors.length === 0,
      'responses stream: the deltas are the output text': () => last !== undefined
        && last.response && last.response.output.some((o) => o.type === 'message'
          && o.content[0].text === text),
    });
    return [ok, last && last.response && last.response.usage ? last.response.usage.output_tokens : 0,
      res.timings.duration];
  }
  const j = json(res);
  const ok = check(res, {
    'responses: 200 with output text and usage': (r) => r.status === 200 && j !== null
      && j.object === 'response' && j.output.length > 0 && j.usage.output_tokens > 0,
  });
  return [ok, ok ? j.usage.output_tokens : 0, res.timings.duration];
}

function messages() {
  const msgs = drawMessages(DATA);
  const body = withModel({
    system: msgs[0].content,
    messages: msgs.slice(1),
    max_tokens: MAX_TOKENS,
    temperature: 0.7,
  });
  const res = post('/v1/messages', body, { tags: { kind: 'messages' } });
  const j = json(res);
  const ok = check(res, {
    'messages: 200 with a text block': (r) => r.status === 200 && j !== null
      && j.type === 'message' && j.content.length > 0 && j.usage.output_tokens > 0,
  });
  return [ok, ok ? j.usage.output_tokens : 0, res.timings.duration];
}

function embeddings() {
  const input = [0, 1, 2, 3].map(() => DATA.prompts[Math.floor(Math.random() * DATA.prompts.length)]);
  const res = post('/v1/embeddings', withModel({ input }), { tags: { kind: 'embeddings' } });
  const j = json(res);
  const ok = check(res, {
    'embeddings: 200, one vector per input': (r) => r.status === 200 && j !== null
      && j.data.length === 4 && j.data[0].embedding.length > 0,
  });
  return [ok, 0, res.timings.duration];
}

export default function () {
  const api = MIX[(__ITER + __VU) % MIX.length];
  const stream = __ITER % 2 === 1;
  const result = {
    chat: () => chat(stream),
    responses: () => responses(stream),
    messages,
    embeddings,
  }[api]();
  const [ok, tokens, ms] = result;
  errors.add(!ok, { api });
  if (!ok) {
    sleep(0.5); // a failing server is not hammered in a tight loop
    return;
  }
  genTokens.add(tokens);
  e2e.add(ms);
  perApi[api].add(ms);
}

// The figures, overall and per API (answered requests only).
export function handleSummary(data) {
  const seconds = data.state.testRunDurationMs / 1000;
  const kinds = Object.fromEntries(APIS.map((a) => [a, trend(data, `e2e_${a}`)]));
  const checks = data.metrics.checks ? data.metrics.checks.values : { passes: 0, fails: 0 };
  const out = {
    base_url: BASE_URL,
    users: USERS,
    duration_s: seconds,
    requests: count(data, 'http_reqs'),
    by_api: kinds,
    gen_tokens: count(data, 'gen_tokens'),
    error_rate: rate(data, 'errors'),
    checks_passed: checks.passes,
    checks_failed: checks.fails,
    e2e_ms: trend(data, 'e2e'),
    thresholds_crossed: thresholdsHeld(data),
  };
  const lines = [
    `mixed.js: ${BASE_URL}, ${USERS} users, ${seconds.toFixed(1)} s, ${out.requests} requests`,
    ...APIS.map((a) => `  ${a}: ${kinds[a].count} requests, p50 ${f0(kinds[a].p50)} ms, p99 ${f0(kinds[a].p99)} ms`),
    `  errors: ${(out.error_rate * 100).toFixed(2)}%, checks: ${checks.passes} passed, ${checks.fails} failed`,
  ];
  return summaryFiles(out, lines);
}
