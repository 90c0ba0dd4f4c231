"""Every route is in /openapi.json, the access log and the request metrics by route (issue 20,
section 6), on the shared server: one small request per API route, each with its own
x-request-id, then its access line (route pattern and status) and its
`kiln_requests_total{endpoint=...}` count."""
from __future__ import annotations

import json
import re
import time
import urllib.error
import urllib.request

from conftest import ROOT

ANSI = re.compile(r"\x1b\[[0-9;]*m")
# Routes served under a second name, documented once (llama-server's name for rerank).
ALIASES = {"/rerank": "/v1/rerank"}
HI = [{"role": "user", "content": "Hi"}]


def call(base: str, method: str, path: str, body=None, rid: str | None = None) -> tuple[int, dict]:
    data = None if body is None else json.dumps(body).encode()
    headers = {"Content-Type": "application/json"} if data else {}
    if rid:
        headers["x-request-id"] = rid
    req = urllib.request.Request(base + path, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            text = r.read().decode()
            status = r.status
    except urllib.error.HTTPError as e:
        text, status = e.read().decode(), e.code
    try:
        return status, json.loads(text)
    except json.JSONDecodeError:
        return status, {"text": text}


def router_routes() -> set[str]:
    """The route patterns src/server/mod.rs registers."""
    text = (ROOT / "src" / "server" / "mod.rs").read_text()
    routes = set(re.findall(r'\.route\(\s*"([^"]+)"', text))
    assert "/v1/chat/completions" in routes and len(routes) > 15, routes
    return routes


def test_every_route_is_in_the_openapi_document(kiln):
    status, doc = call(kiln.base_url, "GET", "/openapi.json")
    assert status == 200
    paths = set(doc["paths"])
    for route in router_routes():
        documented = ALIASES.get(route, route).replace("{*", "{")
        assert documented in paths, f"{route} is served but not in /openapi.json"


def test_each_api_route_is_logged_and_counted_by_its_pattern(kiln, model_id):
    base = kiln.base_url
    status, stored = call(base, "POST", "/v1/responses",
                          {"input": "Hi", "max_output_tokens": 2}, rid="routes-responses")
    assert status == 200, stored
    rid = stored["id"]
    # (method, path, body, the route pattern it is logged and counted under)
    cases = [
        ("POST", "/v1/chat/completions", {"messages": HI, "max_tokens": 2}, None),
        ("POST", "/v1/completions",
         {"prompt": "Hi there", "max_tokens": 0, "echo": True, "logprobs": 1}, None),
        ("POST", "/v1/embeddings", {"input": "Hi"}, None),
        ("POST", "/v1/rerank", {"query": "Hi", "documents": ["Hello"]}, None),
        ("POST", "/rerank", {"query": "Hi", "documents": ["Hello"]}, None),
        ("POST", "/v1/messages", {"max_tokens": 2, "messages": HI}, None),
        ("POST", "/v1/messages/count_tokens", {"messages": HI}, None),
        ("GET", f"/v1/responses/{rid}", None, "/v1/responses/{id}"),
        ("GET", f"/v1/responses/{rid}/input_items", None, "/v1/responses/{id}/input_items"),
        ("DELETE", f"/v1/responses/{rid}", None, "/v1/responses/{id}"),
        ("GET", f"/v1/models/{model_id}", None, "/v1/models/{*id}"),
        ("POST", "/tokenize", {"prompt": "Hi"}, None),
        ("POST", "/completion", {"prompt": "Hi", "n_predict": 2}, None),
        ("GET", "/props", None, None),
        ("POST", "/apply-template", {"messages": HI}, None),
    ]
    before = counts(base)
    ids = {}
    for i, (method, path, body, pattern) in enumerate(cases):
        rid_i = f"routes-{i}-{method.lower()}"
        status, answer = call(base, method, path, body, rid=rid_i)
        assert status == 200, (method, path, answer)
        ids[rid_i] = (pattern or path, status)
    ids["routes-responses"] = ("/v1/responses", 200)
    # Access lines: one per request, naming the route pattern (never the raw path).
    deadline = time.monotonic() + 10
    while True:
        lines = [ANSI.sub("", l) for l in kiln.log_path.read_text(errors="replace").splitlines()
                 if "kiln::access" in l]
        found = {rid: next((l for l in lines if f"request_id={rid} " in l), None) for rid in ids}
        if all(found.values()) or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    for rid_i, (pattern, status) in ids.items():
        line = found[rid_i]
        assert line, f"no access line for {rid_i} ({pattern})"
        assert f" route={pattern} " in line and f" status={status} " in line, line
    # Request metrics by route pattern.
    after = counts(base)
    want: dict[str, int] = {}
    for pattern, _ in ids.values():
        want[pattern] = want.get(pattern, 0) + 1
    want["/v1/responses"] -= 1  # created before `before` was read
    for pattern, n in want.items():
        got = after.get(pattern, 0) - before.get(pattern, 0)
        assert got >= n, (pattern, got, n)


def counts(base: str) -> dict[str, float]:
    """kiln_requests_total with status 200, summed over models, by endpoint."""
    with urllib.request.urlopen(base + "/metrics", timeout=30) as r:
        text = r.read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("kiln_requests_total{") and 'status="200"' in line:
            m = re.search(r'endpoint="([^"]*)"', line)
            if m:
                out[m.group(1)] = out.get(m.group(1), 0) + float(line.rsplit(" ", 1)[1])
    return out
