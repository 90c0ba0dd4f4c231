"""Several models in one server (issue 20, section 1), through the official `openai` client.

One server serves the default model and gemma-3-270m (`--model` twice, both loaded at start)
plus a models directory (`server.models_dir`) holding a second name for the default model's
file (loaded on first use) and a broken file. KV caches are 16 MiB each, so each model takes
its file's size plus 16 MiB, and the memory budget holds the two configured models and half
of a third: loading the directory's model must unload the least recently used idle one.
The tests run in file order (a story: route, list, refuse, lazy load, LRU unload, unload and
load by hand); each request is a few tokens. A second small server (the default model, an
API key, a half-second keep-alive, `pooling = "last"`) checks the idle unload, that the admin
routes need the key, and a configured embedding pooling against the shared server's mean.
"""
from __future__ import annotations

import json
import math
import re
import time
import urllib.error
import urllib.request

import openai
import pytest

from conftest import ROOT, client_for, config, start_kiln

GEMMA = ROOT / "models" / "gemma-3-270m-Q4_K_M.gguf"
KV = 16 << 20
LAZY = "lazy-smol"
BROKEN = "broken"


def post(base_url: str, path: str, body, key: str | None = None) -> tuple[int, dict, dict]:
    """POSTs JSON (a dict, or raw bytes); returns status, parsed body and headers."""
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    req = urllib.request.Request(base_url + path, data=data, method="POST", headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.loads(r.read()), dict(r.headers)
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read()), dict(e.headers)


def get(base_url: str, path: str):
    with urllib.request.urlopen(base_url + path, timeout=30) as r:
        body = r.read().decode()
        return json.loads(body) if path != "/metrics" else body


@pytest.fixture(scope="module")
def multi(model_path, tmp_path_factory):
    assert GEMMA.is_file(), f"{GEMMA} is missing: run `scripts/fetch-model.sh gemma-3-270m` (make test does)"
    models_dir = tmp_path_factory.mktemp("models-dir")
    (models_dir / f"{LAZY}.gguf").symlink_to(model_path.resolve())
    (models_dir / f"{BROKEN}.gguf").write_bytes(b"GGUF" + b"\0" * 60)
    smol, gemma = model_path.stat().st_size + KV, GEMMA.stat().st_size + KV
    budget = smol + gemma + smol // 2
    cfg = config(engine={"kv_cache": "16MiB", "threads": 1},
                 server={"models_dir": str(models_dir), "models_memory_budget": budget})
    with start_kiln(model_path, cfg, args=["--model", str(GEMMA)],
                    log_dir=tmp_path_factory.mktemp("kiln-multi")) as server:
        yield server


@pytest.fixture(scope="module")
def mc(multi):
    return client_for(multi.base_url)


def statuses(mc) -> dict[str, str]:
    return {m.id: m.status for m in mc.models.list().data}


def test_models_lists_every_model_with_its_status(mc, model_path):
    smol = model_path.stem
    models = mc.models.list().data
    assert [m.id for m in models] == [smol, GEMMA.stem, BROKEN, LAZY]
    assert [m.loaded for m in models] == [True, True, False, False]
    assert models[0].owned_by == "kiln"
    one = mc.models.retrieve(GEMMA.stem)
    assert (one.id, one.loaded, one.status) == (GEMMA.stem, True, "loaded")


def test_requests_are_routed_by_model(mc, multi, model_path):
    smol = model_path.stem
    chat = mc.chat.completions.create(model=smol, max_tokens=4,
                                      messages=[{"role": "user", "content": "Hi"}])
    assert chat.model == smol and chat.usage.completion_tokens >= 1
    # gemma-3-270m is a base model: completions only.
    comp = mc.completions.create(model=GEMMA.stem, prompt="The capital of France is",
                                 max_tokens=4, temperature=0)
    assert comp.model == GEMMA.stem and comp.usage.completion_tokens >= 1
    # No model: the default (first) one.
    s, body, _ = post(multi.base_url, "/v1/completions", {"prompt": "Hello", "max_tokens": 2})
    assert s == 200 and body["model"] == smol
    # Two vocabularies: the same text is different tokens.
    toks = {m: post(multi.base_url, "/tokenize", {"model": m, "prompt": "Hello world, kiln!"})[1]
            for m in (smol, GEMMA.stem)}
    assert toks[smol]["tokens"] != toks[GEMMA.stem]["tokens"]
    # Each model's metrics carry its label.
    text = get(multi.base_url, "/metrics")
    m = re.search(r'kiln_generation_tokens_total\{model="%s"\} (\d+)' % re.escape(GEMMA.stem), text)
    assert m and int(m.group(1)) >= 1, text[:2000]
    routed = [l for l in text.splitlines() if l.startswith("kiln_requests_total{")
              and 'endpoint="/v1/completions"' in l and f'model="{GEMMA.stem}"' in l]
    assert routed and all(float(l.rsplit(" ", 1)[1]) >= 1 for l in routed), routed
    assert text.count("# TYPE kiln_generation_tokens_total ") == 1
    stats = get(multi.base_url, "/stats")
    assert [x["model"] for x in stats["models"]] == [smol, GEMMA.stem, BROKEN, LAZY]
    assert stats["memory_budget_bytes"] > stats["memory_bytes"] > 0


def test_unknown_model_is_404_in_each_api_envelope(mc, multi, model_path):
    with pytest.raises(openai.NotFoundError) as e:
        mc.chat.completions.create(model="no-such-model", max_tokens=2,
                                   messages=[{"role": "user", "content": "Hi"}])
    assert e.value.code == "model_not_found"
    assert model_path.stem in e.value.message and LAZY in e.value.message
    with pytest.raises(openai.NotFoundError):
        mc.models.retrieve("no-such-model")
    s, body, _ = post(multi.base_url, "/v1/messages",
                      {"model": "no-such-model", "max_tokens": 2,
                       "messages": [{"role": "user", "content": "Hi"}]})
    assert s == 404 and body["type"] == "error" and body["error"]["type"] == "not_found_error"
    s, body, _ = post(multi.base_url, "/v1/embeddings", {"model": "nope", "input": "x"})
    assert s == 404 and body["error"]["code"] == "model_not_found"


def test_a_model_that_fails_to_load_is_a_clear_error_and_the_others_serve(mc, multi, model_path):
    with pytest.raises(openai.APIStatusError) as e:
        mc.completions.create(model=BROKEN, prompt="x", max_tokens=2)
    assert e.value.status_code == 503 and e.value.code == "model_unavailable"
    assert BROKEN in e.value.message
    assert statuses(mc)[BROKEN] == "failed"
    assert mc.completions.create(model=model_path.stem, prompt="x", max_tokens=2).choices
    assert "the model failed to load" in multi.log_path.read_text()


def test_first_use_loads_a_model_and_the_budget_unloads_the_least_recently_used(mc, multi, model_path):
    smol = model_path.stem
    # gemma used, then the default model: gemma is the least recently used.
    mc.completions.create(model=GEMMA.stem, prompt="One", max_tokens=1)
    mc.completions.create(model=smol, prompt="Two", max_tokens=1)
    assert statuses(mc)[LAZY] == "unloaded"
    # The request waits for the load (never an immediate error).
    r = mc.chat.completions.create(model=LAZY, max_tokens=3,
                                   messages=[{"role": "user", "content": "Hi"}])
    assert r.model == LAZY
    st = statuses(mc)
    assert (st[LAZY], st[smol], st[GEMMA.stem]) == ("loaded", "loaded", "unloaded"), st
    assert "unloading the least recently used idle model" in multi.log_path.read_text()
    # An unloaded model's next request loads it again (unloading the now oldest: LAZY is
    # newer than the default model, which goes).
    assert mc.completions.create(model=GEMMA.stem, prompt="x", max_tokens=1).model == GEMMA.stem
    st = statuses(mc)
    assert (st[GEMMA.stem], st[LAZY], st[smol]) == ("loaded", "loaded", "unloaded"), st


def test_load_and_unload_by_hand(mc, multi):
    base = multi.base_url
    s, body, _ = post(base, "/models/unload", {"model": LAZY})
    assert s == 200 and body == {"model": LAZY, "status": "unloaded", "changed": True}
    assert statuses(mc)[LAZY] == "unloaded"
    s, body, _ = post(base, "/models/unload", {"model": LAZY})
    assert s == 200 and body["changed"] is False
    s, body, _ = post(base, "/models/load", {"model": LAZY})
    assert s == 200 and body == {"model": LAZY, "status": "loaded", "changed": True}
    assert statuses(mc)[LAZY] == "loaded"
    # Bad input: 4xx in OpenAI's envelope.
    s, body, _ = post(base, "/models/load", {"model": "no-such-model"})
    assert s == 404 and body["error"]["code"] == "model_not_found"
    for bad in ({}, {"model": 3}, {"model": LAZY, "extra": 1}, b"{not json"):
        s, body, _ = post(base, "/models/unload", bad)
        assert s == 400 and "error" in body, (bad, s, body)
    # A model with a request in flight is not unloaded under it.
    stream = mc.chat.completions.create(model=LAZY, max_tokens=200, stream=True,
                                        messages=[{"role": "user", "content": "Tell a long story"}])
    try:
        next(iter(stream))
        s, body, _ = post(base, "/models/unload", {"model": LAZY})
        assert s == 409 and body["error"]["code"] == "model_busy"
    finally:
        stream.close()
    # A failed model is tried again by /models/load (and fails again, clearly).
    s, body, _ = post(base, "/models/load", {"model": BROKEN})
    assert s == 503 and body["error"]["code"] == "model_unavailable"


KEY = "sk-admin"


@pytest.fixture(scope="module")
def single(model_path, tmp_path_factory):
    """The second small server: the default model, an API key, a half-second keep-alive, and
    `[model] pooling = "last"` (the GGUF names no pooling_type: the shared server pools mean)."""
    cfg = config(engine={"kv_cache": "16MiB", "threads": 1}, model={"pooling": "last"})
    with start_kiln(model_path, cfg, env={"KILN_API_KEYS": KEY},
                    args=["--models-keep-alive", "0.5"],
                    log_dir=tmp_path_factory.mktemp("kiln-keep-alive")) as server:
        yield server


def test_an_idle_model_unloads_after_the_keep_alive_and_admin_routes_need_the_key(
        single, model_path):
    server, key = single, KEY
    c = client_for(server.base_url, api_key=key)
    smol = model_path.stem
    s, body, _ = post(server.base_url, "/models/unload", {"model": smol})
    assert s == 401 and body["error"]["code"] == "invalid_api_key"
    deadline = time.monotonic() + 20
    while statuses(c)[smol] != "unloaded":
        assert time.monotonic() < deadline, "not unloaded after its keep-alive"
        time.sleep(0.1)
    assert "unloading an idle model" in server.log_path.read_text()
    # Its next request loads it again; the server stayed ready all along.
    r = c.completions.create(model=smol, prompt="Hi", max_tokens=2)
    assert r.model == smol
    assert urllib.request.urlopen(server.base_url + "/ready", timeout=10).status == 200
    s, body, _ = post(server.base_url, "/models/load", {"model": smol}, key=key)
    assert s == 200 and body["status"] == "loaded"


def test_a_configured_pooling_overrides_the_file_per_model(single, kiln, client, model_id):
    """`pooling = "last"` embeds with the last position's hidden state: one position pools
    alike either way; over three, the shared server's mean (h0 + h1 + h2) lies in the plane
    of the mean of the first two (h0 + h1) and this server's last (h2), and not in the plane
    of the first two means (which a wrong position would give)."""
    ids = post(kiln.base_url, "/tokenize", {"prompt": "The capital of France is"})[1]["tokens"]
    assert len(ids) >= 3
    c = client_for(single.base_url, api_key=KEY)
    last = [d.embedding for d in c.embeddings.create(model=model_id, input=[ids[:1], ids[:3]]).data]
    mean = [d.embedding for d in client.embeddings.create(
        model=model_id, input=[ids[:1], ids[:2], ids[:3]]).data]
    assert last[0] == pytest.approx(mean[0], abs=1e-4)
    assert last[1] != pytest.approx(mean[2], abs=1e-2)

    def residual(v, u, w):
        """|v - (a u + b w)| for the least-squares a, b."""
        dot = lambda x, y: sum(p * q for p, q in zip(x, y))
        uu, uw, ww, vu, vw = dot(u, u), dot(u, w), dot(w, w), dot(v, u), dot(v, w)
        det = uu * ww - uw * uw
        a, b = (vu * ww - vw * uw) / det, (vw * uu - vu * uw) / det
        return math.sqrt(sum((x - a * p - b * q) ** 2 for x, p, q in zip(v, u, w))), a, b

    r, a, b = residual(mean[2], mean[1], last[1])
    assert r < 1e-3 and a > 0 and b > 0, (r, a, b)
    assert residual(mean[2], mean[1], mean[0])[0] > 0.05


def test_a_load_that_busy_models_block_is_a_bounded_wait_then_503(model_path, tmp_path_factory):
    """A model whose load needs the memory of a model with a request in flight waits for it,
    at most `server.models_load_timeout` (half a second here), then gets 503 `model_loading`
    with Retry-After; the busy request is not cut, and once it ends the model loads."""
    d = tmp_path_factory.mktemp("budget-dir")
    (d / "other.gguf").symlink_to(model_path.resolve())
    smol_bytes = model_path.stat().st_size + KV
    cfg = config(engine={"kv_cache": "16MiB", "threads": 1},
                 server={"models_dir": str(d), "models_memory_budget": smol_bytes * 3 // 2,
                         "models_load_timeout": 0.5})
    with start_kiln(model_path, cfg, log_dir=tmp_path_factory.mktemp("kiln-budget")) as server:
        c = client_for(server.base_url)
        stream = c.chat.completions.create(
            model=model_path.stem, max_tokens=256, stream=True, extra_body={"ignore_eos": True},
            messages=[{"role": "user", "content": "Tell a long story"}])
        chunks = iter(stream)
        try:
            next(chunks)
            t0 = time.monotonic()
            s, body, headers = post(server.base_url, "/v1/completions",
                                    {"model": "other", "prompt": "x", "max_tokens": 1})
            waited = time.monotonic() - t0
            assert s == 503 and body["error"]["code"] == "model_loading", body
            retry = {k.lower(): v for k, v in headers.items()}["retry-after"]
            assert int(retry) >= 1 and waited >= 0.45, (retry, waited)
            # The request in flight went on.
            assert next(chunks).choices is not None
        finally:
            stream.close()
        deadline = time.monotonic() + 30
        while True:
            s, body, _ = post(server.base_url, "/v1/completions",
                              {"model": "other", "prompt": "x", "max_tokens": 1})
            if s == 200 or time.monotonic() > deadline:
                break
            assert body["error"]["code"] == "model_loading", body
            time.sleep(0.2)
        assert s == 200 and body["model"] == "other", body
        assert statuses(c)[model_path.stem] == "unloaded"
