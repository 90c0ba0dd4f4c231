"""JSONSchemaBench's smoke subset against the shared kiln server (issue 21 §3).

The fixed subset of scripts/jsonschemabench.py (`SMOKE`: one short schema from several
datasets of ../shared/conformance/jsonschemabench) is sent as scripts/jsonschemabench.py sends
it, at temperature 1.0 with several seeded samples each: every schema but the one kiln must refuse
(a 400 naming the feature) is accepted, and every sample finishes with `stop` and validates against its schema with Python `jsonschema`. The full
239-schema run (coverage and compliance figures) is `make bench-jsonschema`.
"""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))

import jsonschemabench  # noqa: E402


class Args:
    samples = 4
    max_tokens = 256  # the shared server's cap
    seed = 1
    timeout = 120.0


def test_smoke_subset_is_accepted_and_every_sample_finishes_and_validates(kiln):
    paths = jsonschemabench.schemas("smoke")
    assert paths, "the smoke subset is empty"
    for p in paths:
        assert p.is_file(), f"{p} is missing (set KILN_SHARED)"
    results = [jsonschemabench.one_schema(p, kiln.base_url, Args) for p in paths]
    summary = jsonschemabench.summarize(results)
    refusals = {r["schema"]: r for r in results if r["refused"]}
    assert sorted(refusals) == sorted(jsonschemabench.SMOKE_REFUSED), refusals
    for r in refusals.values():
        assert r["named"], f"not a 400 naming the feature: {r}"
    bad = [(r["schema"], s) for r in results if not r["refused"] for s in r["samples"]
           if not s["ok"]]
    assert not bad, f"samples that did not finish and validate: {bad}"
    assert summary["samples"] == Args.samples * len(jsonschemabench.SMOKE)
    assert summary["compliance"] == 1.0
