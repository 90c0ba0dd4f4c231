// What the k6 scenarios share: settings from the environment, request bodies drawn from
// data/prompts.json, SSE parsing, the thresholds of ../thresholds.json, and the summary files.
//
// Every scenario reads these variables (each has a default that suits a 2-core machine):
//   BASE_URL     server root (default http://127.0.0.1:8080); a loopback address unless
//                ALLOW_REMOTE=1 (load goes nowhere else by accident)
//   MODEL        the `model` field; empty = omitted (kiln then serves its only model)
//   API_KEY      sent as `Authorization: Bearer ...` when set
//   MAX_TOKENS   tokens per answer (each scenario has its own default)
//   SUMMARY_JSON also write the scenario's figures as JSON to this path
//   THRESHOLD_<NAME> overrides one threshold of thresholds.json (THRESHOLD_TTFT_P95_MS=3000)

import http from 'k6/http';

export const BASE_URL = (__ENV.BASE_URL || 'http://127.0.0.1:8080').replace(/\/$/, '');
const LOOPBACK = /^https?:\/\/(127\.\d+\.\d+\.\d+|localhost|\[::1\])(:\d+)?(\/|$)/;
if (!LOOPBACK.test(BASE_URL) && __ENV.ALLOW_REMOTE !== '1') {
  throw new Error(`BASE_URL ${BASE_URL} is not a loopback address; set ALLOW_REMOTE=1 to load it anyway`);
}
export const MODEL = __ENV.MODEL || '';
export const API_KEY = __ENV.API_KEY || '';

/// An integer or float setting with a default.
export function envInt(name, dflt) {
  const v = __ENV[name];
  return v === undefined || v === '' ? dflt : parseInt(v, 10);
}
export function envFloat(name, dflt) {
  const v = __ENV[name];
  return v === undefined || v === '' ? dflt : parseFloat(v);
}
export function envStr(name, dflt) {
  const v = __ENV[name];
  return v === undefined || v === '' ? dflt : v;
}

/// The request headers (JSON, and the key when one is set).
export function headers() {
  const h = { 'Content-Type': 'application/json' };
  if (API_KEY) h.Authorization = `Bearer ${API_KEY}`;
  return h;
}

/// The thresholds file (`raw`, the text of thresholds.json) with THRESHOLD_* overrides
/// applied: { ttft_p95_ms: 2500, ... }.
export function loadThresholds(raw) {
  const file = JSON.parse(raw);
  const out = {};
  for (const [name, entry] of Object.entries(file.thresholds)) {
    const env = __ENV[`THRESHOLD_${name.toUpperCase()}`];
    out[name] = env !== undefined && env !== '' ? parseFloat(env) : entry.value;
  }
  return out;
}

/// k6 threshold expressions for the shared metrics, from loadThresholds' numbers. `which`
/// picks the ones a scenario records (e.g. ['ttft', 'e2e', 'errors', 'tokens']).
export function thresholdRules(t, which) {
  const rules = {};
  if (which.includes('ttft')) rules.ttft = [`p(95)<${t.ttft_p95_ms}`];
  if (which.includes('e2e')) rules.e2e = [`p(99)<${t.e2e_p99_ms}`];
  if (which.includes('itl')) rules.itl = [`p(99)<${t.itl_p99_ms}`];
  if (which.includes('errors')) rules.errors = [`rate<=${t.error_rate}`];
  if (which.includes('tokens')) rules.gen_tokens = [`rate>=${t.min_gen_tokens_per_s}`];
  return rules;
}

/// A user turn drawn from the prompt set: mostly short questions, some long ones with
/// context, some multi-turn conversations (the last turn is the user's).
export function drawMessages(data) {
  const r = Math.random();
  let turns;
  if (r < 0.6) {
    turns = [{ role: 'user', content: pick(data.prompts) }];
  } else if (r < 0.85) {
    turns = [{ role: 'user', content: pick(data.long_prompts) }];
  } else {
    turns = pick(data.conversations);
  }
  return [{ role: 'system', content: data.system }].concat(turns);
}

function pick(list) {
  return list[Math.floor(Math.random() * list.length)];
}

/// A chat completion body.
export function chatBody(data, opts) {
  const b = {
    messages: drawMessages(data),
    max_tokens: opts.maxTokens,
    temperature: opts.temperature === undefined ? 0.7 : opts.temperature,
    stream: !!opts.stream,
  };
  if (opts.stream) b.stream_options = { include_usage: true };
  if (MODEL) b.model = MODEL;
  return b;
}

/// POST a JSON body to `path`.
export function post(path, body, params) {
  const p = Object.assign({ headers: headers(), timeout: '180s' }, params || {});
  return http.post(`${BASE_URL}${path}`, JSON.stringify(body), p);
}

/// A streamed response's events: { chunks: [parsed JSON], done: saw [DONE], errors: [the
/// data of `event: error` frames], comments: count of `:` lines }.
export function parseSse(text) {
  const out = { chunks: [], done: false, errors: [], comments: 0 };
  if (typeof text !== 'string') return out;
  for (const frame of text.split('\n\n')) {
    let event = 'message';
    const data = [];
    for (const line of frame.split('\n')) {
      if (line.startsWith(':')) out.comments += 1;
      else if (line.startsWith('event:')) event = line.slice(6).trim();
      else if (line.startsWith('data:')) data.push(line.slice(5).replace(/^ /, ''));
    }
    if (data.length === 0) continue;
    const payload = data.join('\n');
    if (payload === '[DONE]') {
      out.done = true;
      continue;
    }
    let parsed;
    try {
      parsed = JSON.parse(payload);
    } catch (e) {
      out.errors.push(`unparsable chunk: ${payload.slice(0, 80)}`);
      continue;
    }
    if (event === 'error') out.errors.push(parsed);
    else out.chunks.push(parsed);
  }
  return out;
}

/// What a finished stream said: the content of choice 0, its finish reason, the usage and
/// kiln's timings (from the usage chunk), and whether every chunk had the same id.
export function readStream(res) {
  const sse = parseSse(res.body);
  let content = '';
  let finish = null;
  let usage = null;
  let timings = null;
  const ids = new Set();
  for (const c of sse.chunks) {
    ids.add(c.id);
    for (const ch of c.choices || []) {
      if (ch.index !== 0) continue;
      const d = ch.delta || {};
      if (typeof d.content === 'string') content += d.content;
      if (typeof ch.text === 'string') content += ch.text;
      if (ch.finish_reason) finish = ch.finish_reason;
    }
    if (c.usage) usage = c.usage;
    if (c.timings) timings = c.timings;
  }
  return { content, finish, usage, timings, sameId: ids.size === 1, done: sse.done, errors: sse.errors };
}

/// The numbers of a Prometheus text exposition: { 'name{labels}': value } plus, for each
/// family, the sum of its series under the bare name.
export function parseMetrics(text) {
  const out = {};
  if (typeof text !== 'string') return out;
  for (const line of text.split('\n')) {
    if (line === '' || line.startsWith('#')) continue;
    const sp = line.lastIndexOf(' ');
    const key = line.slice(0, sp);
    const value = parseFloat(line.slice(sp + 1));
    out[key] = value;
    const bare = key.split('{')[0];
    if (bare !== key) out[bare] = (out[bare] || 0) + value;
  }
  return out;
}

/// GET /metrics, parsed (null when it fails).
export function scrape() {
  const res = http.get(`${BASE_URL}/metrics`, { headers: headers(), timeout: '10s', tags: { kind: 'scrape' } });
  return res.status === 200 ? parseMetrics(res.body) : null;
}

/// A trend's p50/p95/p99 from k6's summary data.
export function trend(data, name) {
  const m = data.metrics[name];
  const v = (m && m.values) || {};
  return { count: v.count || 0, p50: v.med, p95: v['p(95)'], p99: v['p(99)'], avg: v.avg, max: v.max };
}

/// A counter's total.
export function count(data, name) {
  const m = data.metrics[name];
  return (m && m.values && m.values.count) || 0;
}

/// A rate's share of true values.
export function rate(data, name) {
  const m = data.metrics[name];
  return m && m.values ? m.values.rate : 0;
}

/// Whether every threshold held, and which did not.
export function thresholdsHeld(data) {
  const crossed = [];
  for (const [name, m] of Object.entries(data.metrics)) {
    for (const [expr, t] of Object.entries(m.thresholds || {})) {
      if (!t.ok) crossed.push(`${name}: ${expr}`);
    }
  }
  return crossed;
}

/// handleSummary's files: a short text on stdout and the figures as JSON at SUMMARY_JSON.
/// (k6's own text summary needs a jslib fetched from the network, which is not reached.)
export function summaryFiles(out, lines) {
  const files = { stdout: lines.concat(['']).join('\n') };
  if (__ENV.SUMMARY_JSON) files[__ENV.SUMMARY_JSON] = JSON.stringify(out, null, 2);
  return files;
}

/// A number for the text summary.
export function f0(x) {
  return x === undefined || x === null ? '-' : x.toFixed(0);
}
