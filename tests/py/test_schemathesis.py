"""Schemathesis against kiln's own /openapi.json (issue 8, section 5): a bounded property-based
run over every operation, with zero 5xx and every response matching the document.

The server here has an API key (so the document's bearer scheme is real and schemathesis can
check that a missing or wrong key is refused) and small generation limits (max_tokens at most
16, n at most 4), so the thousands of generated requests each finish in milliseconds; the
limits are configuration, and schema conformance is what is tested.

Checks that gate the run: no 5xx; status codes, content types, headers and bodies as
documented; schema-violating requests refused; auth enforced. Not gated:
`positive_data_acceptance` (a schema-valid request must be accepted), because the document
cannot say every cross-field rule the server enforces (see the report the run writes).
"""
from __future__ import annotations

import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from conftest import config, start_kiln

VENV_BIN = Path(sys.executable).parent
KEY = "sk-schemathesis"
# Seconds of generation, and examples per operation and phase; the whole test stays under
# about two minutes. SCHEMATHESIS_MAX_TIME / SCHEMATHESIS_MAX_EXAMPLES override.
MAX_TIME = os.environ.get("SCHEMATHESIS_MAX_TIME", "90")
MAX_EXAMPLES = os.environ.get("SCHEMATHESIS_MAX_EXAMPLES", "50")
# CPython 3.11's AST validator can crash while hypothesis describes a strategy deep in a
# recursion (python/cpython gh-106905); the run then reports a "Runtime Error" and no finding.
TOOL_CRASH = "AST constructor recursion depth mismatch"
CHECKS = ",".join([
    "not_a_server_error",
    "status_code_conformance",
    "content_type_conformance",
    "response_headers_conformance",
    "response_schema_conformance",
    "negative_data_rejection",
    "missing_required_header",
    "ignored_auth",
])


@pytest.fixture(scope="module")
def fuzz_server(model_path, tmp_path_factory):
    cfg = config(server={"max_tokens_cap": 16, "max_tokens_default": 8, "max_n": 4,
                         "request_timeout": 20})
    with start_kiln(model_path, cfg, env={"KILN_API_KEYS": KEY},
                    log_dir=tmp_path_factory.mktemp("kiln-schemathesis")) as server:
        yield server


def test_openapi_document_holds_under_schemathesis(fuzz_server, tmp_path):
    st = VENV_BIN / "schemathesis"
    assert st.is_file(), f"{st} missing: run `make pytools`"
    cmd = [
        str(st), "run", fuzz_server.base_url + "/openapi.json",
        "--header", f"Authorization: Bearer {KEY}",
        "--checks", CHECKS,
        "--max-examples", MAX_EXAMPLES,
        "--max-time", MAX_TIME,
        "--request-timeout", "30",
        "--workers", "2",
        "--seed", "20251123",
        "--generation-database", "none",
        "--no-color",
        # Its one answer is a documented 501 (kiln has no slots; llama-server's route):
        # not_a_server_error would flag it whatever the request.
        "--exclude-path", "/slots",
    ]
    # Run in a scratch directory: schemathesis and hypothesis write files where they run.
    def run():
        res = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True,
                             timeout=int(MAX_TIME) + 120)
        return res, res.stdout + res.stderr

    res, out = run()
    if res.returncode != 0 and TOOL_CRASH in out and "Failures:" not in out:
        # The fuzzer itself crashed (not a finding about kiln): run it once more, openly.
        (tmp_path / "schemathesis-crashed.log").write_text(out)
        warnings.warn(f"schemathesis crashed inside CPython ({TOOL_CRASH}); ran it again")
        res, out = run()
    (tmp_path / "schemathesis.log").write_text(out)
    assert res.returncode == 0, f"schemathesis found problems:\n{out[-12000:]}"
    # A run that tested nothing must not pass.
    assert "Tested: 0" not in out, out[-3000:]
    # The server stayed up through it.
    assert fuzz_server.proc.poll() is None, fuzz_server.log_tail()
