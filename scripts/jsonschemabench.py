#!/usr/bin/env python3
"""Structured output measured as JSONSchemaBench measures it, against a real `kiln serve`.

For each schema of ../shared/conformance/jsonschemabench (239 real-world schemas, see its
README) one chat request with `response_format: {"type": "json_schema", ...}` asks for `n`
samples at temperature 1.0 (seeded). Two figures:

- coverage: the share of schemas kiln compiles. A refusal must be a 400 whose `param` is the
  schema's field and whose message names the feature (`the schema uses a feature kiln cannot
  enforce: ...` or `invalid schema: ...`); any other answer to a schema is a failure.
- compliance: of the samples of accepted schemas, the share that finish with `stop` and whose
  content parses and validates against the schema (Python `jsonschema`, the validator the
  schema's `$schema` names; formats are not asserted, as in JSONSchemaBench).

Every sample that does not finish and validate is listed with why (`length`, invalid JSON,
the validation error), so a regression shows what broke.

  scripts/jsonschemabench.py                     # the full run (make bench)
  scripts/jsonschemabench.py --subset smoke      # the fixed subset tests/py runs
  scripts/jsonschemabench.py --only o12605       # named schemas only (repeatable)

Exit status: 0 when the targets hold (coverage >= --min-coverage, compliance >=
--min-compliance), 1 otherwise, 2 when a refusal is not a 400 naming the feature.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import jsonschema

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
from servers import DEFAULT_MODEL, start_kiln  # noqa: E402

SHARED = Path(os.environ.get("KILN_SHARED", ROOT.parent / "shared"))
CORPUS = SHARED / "conformance" / "jsonschemabench"
PARAM = "response_format.json_schema.schema"

# A fixed subset for `make test` (tests/py/test_jsonschemabench.py): the four datasets'
# quickest schemas whose samples all finished and validated in the full run of 2026-11-25
# (seconds on the default model), and one kiln must refuse with a 400 naming the feature.
SMOKE = [
    "Github_trivial/o63996.json",
    "Github_easy/o90248.json",
    "Snowplow/sp_69_Normalized.json",
    "WashingtonPost/wp_39_Normalized.json",
]
SMOKE_REFUSED = ["WashingtonPost/wp_8_Normalized.json"]

# The schema as the model sees it in the prompt: at most this many characters (a 135M model
# with an 8k context; the grammar, not the prompt, makes the reply valid).
PROMPT_SCHEMA_CHARS = 1500


def schemas(subset: str | None, only: list[str] | None = None) -> list[Path]:
    if not CORPUS.is_dir():
        raise FileNotFoundError(f"{CORPUS} is missing (set KILN_SHARED)")
    if only:
        # Named schemas (`Github_medium/o12605.json`, or a bare stem such as `o12605`).
        every = sorted(CORPUS.glob("*/*.json"))
        picked = [p for p in every
                  if any(str(p.relative_to(CORPUS)) == o or p.stem == o for o in only)]
        if len(picked) < len(only):
            raise FileNotFoundError(f"not every schema of {only} is in {CORPUS}")
        return picked
    if subset == "smoke":
        return [CORPUS / p for p in SMOKE + SMOKE_REFUSED]
    return sorted(CORPUS.glob("*/*.json"))


def post(base_url: str, body: dict, timeout: float) -> tuple[int, dict]:
    req = urllib.request.Request(
        base_url + "/v1/chat/completions", data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"}, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        try:
            return e.code, json.loads(e.read())
        except ValueError:
            return e.code, {}


def request_body(schema: dict, name: str, samples: int, max_tokens: int, seed: int) -> dict:
    text = json.dumps(schema, separators=(",", ":"))
    if len(text) > PROMPT_SCHEMA_CHARS:
        text = text[:PROMPT_SCHEMA_CHARS] + " ..."
    return {
        "messages": [
            {"role": "system", "content": "You answer with JSON only."},
            {"role": "user", "content": f"Give an example JSON value for this JSON schema:\n{text}"},
        ],
        "response_format": {"type": "json_schema",
                            "json_schema": {"name": name[:64], "schema": schema}},
        "temperature": 1.0,
        "max_tokens": max_tokens,
        "n": samples,
        "seed": seed,
    }


def validator(schema: dict):
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    return cls(schema)


def refusal_names_feature(status: int, body: dict) -> bool:
    err = body.get("error") or {}
    msg = err.get("message") or ""
    return (status == 400 and err.get("param") == PARAM
            and ("cannot enforce" in msg or "invalid schema" in msg) and len(msg) > 40)


def one_schema(path: Path, base_url: str, args) -> dict:
    rel = str(path.relative_to(CORPUS))
    schema = json.loads(path.read_text())
    t0 = time.monotonic()
    status, body = post(base_url, request_body(schema, path.stem, args.samples, args.max_tokens,
                                               args.seed), args.timeout)
    out = {"schema": rel, "status": status, "seconds": round(time.monotonic() - t0, 2)}
    if status != 200:
        out["refused"] = True
        out["named"] = refusal_names_feature(status, body)
        out["message"] = ((body.get("error") or {}).get("message") or "")[:300]
        return out
    out["refused"] = False
    try:
        v = validator(schema)
    except Exception as e:  # a schema the Python validator itself cannot load
        v = None
        out["validator_error"] = str(e)[:200]
    samples = []
    for c in body.get("choices", []):
        content = c["message"].get("content") or ""
        s = {"finish": c.get("finish_reason"), "chars": len(content)}
        ok = s["finish"] == "stop"
        if not ok:
            s["why"] = f"finish_reason {s['finish']}"
            s["tail"] = content[-80:]
        else:
            try:
                value = json.loads(content)
                if v is not None:
                    err = jsonschema.exceptions.best_match(v.iter_errors(value))
                    if err is not None:
                        ok = False
                        s["why"] = f"invalid: {err.message[:200]} at {list(err.absolute_path)}"
            except ValueError as e:
                ok = False
                s["why"] = f"not JSON: {e}"
                s["tail"] = content[-80:]
        s["ok"] = ok
        samples.append(s)
    out["samples"] = samples
    out["completion_tokens"] = (body.get("usage") or {}).get("completion_tokens")
    return out


def summarize(results: list[dict]) -> dict:
    n = len(results)
    accepted = [r for r in results if not r["refused"]]
    refused = [r for r in results if r["refused"]]
    samples = [s for r in accepted for s in r["samples"]]
    good = sum(s["ok"] for s in samples)
    by_dataset: dict[str, dict] = {}
    for r in results:
        d = by_dataset.setdefault(r["schema"].split("/")[0], {"schemas": 0, "accepted": 0,
                                                               "samples": 0, "ok": 0})
        d["schemas"] += 1
        if not r["refused"]:
            d["accepted"] += 1
            d["samples"] += len(r["samples"])
            d["ok"] += sum(s["ok"] for s in r["samples"])
    return {
        "schemas": n,
        "accepted": len(accepted),
        "coverage": len(accepted) / n if n else 0.0,
        "refusals_named": sum(r["named"] for r in refused),
        "refusals_unnamed": [r["schema"] for r in refused if not r["named"]],
        "samples": len(samples),
        "samples_ok": good,
        "compliance": good / len(samples) if samples else 0.0,
        "finish_length": sum(s["finish"] == "length" for s in samples),
        "by_dataset": by_dataset,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--subset", choices=["smoke"], help="a fixed small subset")
    ap.add_argument("--only", action="append", metavar="SCHEMA",
                    help="run this schema only (dataset/file.json or its stem; repeatable)")
    ap.add_argument("--samples", type=int, default=4, help="samples per schema (n)")
    ap.add_argument("--max-tokens", type=int, default=1024)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--concurrency", type=int, default=8, help="schemas in flight")
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds per request")
    ap.add_argument("--base-url", help="a running kiln (else one is started and stopped)")
    ap.add_argument("--model", type=Path, default=DEFAULT_MODEL)
    ap.add_argument("--out", type=Path, help="write every result and the summary here (JSON)")
    ap.add_argument("--min-coverage", type=float, default=0.90)
    ap.add_argument("--min-compliance", type=float, default=0.99)
    args = ap.parse_args()

    paths = schemas(args.subset, args.only)
    server = None
    if args.base_url:
        base_url = args.base_url
    else:
        config = {
            "engine": {"kv_cache": "1GiB"},
            "scheduler": {"max_num_seqs": 32},
            "server": {"max_tokens_cap": args.max_tokens,
                       "max_tokens_default": min(args.max_tokens, 1024), "max_n": max(16, args.samples),
                       "request_timeout": int(args.timeout)},
        }
        server = start_kiln(args.model, config)
        base_url = server.base_url
    def run(p: Path) -> dict:
        r = one_schema(p, base_url, args)
        # One line per schema as it finishes (stderr), so a run cut short still says something.
        samples = r.get("samples") or []
        print(json.dumps({"schema": r["schema"], "refused": r["refused"],
                          "ok": sum(s["ok"] for s in samples), "samples": len(samples),
                          "why": [s["why"] for s in samples if not s["ok"]]}),
              file=sys.stderr, flush=True)
        return r

    t0 = time.monotonic()
    try:
        with ThreadPoolExecutor(args.concurrency) as pool:
            results = list(pool.map(run, paths))
    finally:
        if server is not None:
            server.stop()
    wall = time.monotonic() - t0
    summary = summarize(results)
    summary["wall_seconds"] = round(wall, 1)
    summary["settings"] = {"samples": args.samples, "max_tokens": args.max_tokens,
                           "seed": args.seed, "temperature": 1.0, "subset": args.subset}
    for r in results:
        if r["refused"]:
            mark = "" if r["named"] else "  <-- NOT A 400 NAMING THE FEATURE"
            print(f"refused  {r['schema']}: {r['status']} {r['message'][:160]}{mark}")
        else:
            for i, s in enumerate(r["samples"]):
                if not s["ok"]:
                    print(f"failed   {r['schema']} #{i}: {s['why']} {s.get('tail', '')!r}")
    print(f"\n{'dataset':<16} {'schemas':>7} {'accepted':>8} {'samples':>7} {'ok':>5}")
    for d, x in sorted(summary["by_dataset"].items()):
        print(f"{d:<16} {x['schemas']:>7} {x['accepted']:>8} {x['samples']:>7} {x['ok']:>5}")
    print(f"\ncoverage   {summary['accepted']}/{summary['schemas']} = {summary['coverage']:.1%}"
          f" (refusals naming the feature: {summary['refusals_named']}/"
          f"{summary['schemas'] - summary['accepted']})")
    print(f"compliance {summary['samples_ok']}/{summary['samples']} = {summary['compliance']:.1%}"
          f" (cut by max_tokens: {summary['finish_length']}); {wall:.0f} s")
    if args.out:
        args.out.write_text(json.dumps({"summary": summary, "results": results}, indent=1))
    if summary["refusals_unnamed"]:
        return 2
    ok = (summary["coverage"] >= args.min_coverage
          and summary["compliance"] >= args.min_compliance)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
