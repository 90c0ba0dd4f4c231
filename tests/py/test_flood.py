"""Refuse before working (issue 21 section 2), against a real kiln over loopback.

- A flood: 200 clients each send an 8 MiB chat body while 500 more hold connections open
  (half a request line and headers, never finished). Memory stays bounded (large bodies are
  read and parsed only as far as `server.max_body_bytes_in_flight` allows; the rest are
  refused with 429 before they are read), `/health` and small chat requests keep answering
  with 200 throughout, nothing is answered 5xx, and every request gets exactly one answer
  (the server counts as many responses as the clients read).
- A client that keeps sending a 64 MiB body reads its 413 (the server reads and discards the
  rest for a while, as nginx's lingering close does), instead of a connection reset.
- A full waiting queue is a 429 whose Retry-After comes from the measured drain rate.

Bounded in time: the flood takes a few seconds on 2 shared cores.
"""
from __future__ import annotations

import concurrent.futures
import http.client
import json
import re
import socket
import threading
import time
from urllib.parse import urlparse

import pytest

from conftest import config, start_kiln

MIB = 1 << 20
# What the whole flood may add to the server's peak resident memory: the bodies the byte budget
# lets in at once (server.max_body_bytes_in_flight = 16 MiB: two 8 MiB chat bodies, each ~170 MB
# while parsed, rendered and tokenized), 500 idle connections, refused bodies being drained,
# allocator slack.
RSS_GROWTH_BOUND = 512 * MIB


def rss(pid: int, field: str = "VmRSS") -> int:
    """A memory figure of process `pid` from /proc, in bytes."""
    for line in open(f"/proc/{pid}/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"{field} missing from /proc/{pid}/status")


def metrics(base: str) -> dict[str, float]:
    """`name{labels}` -> value from /metrics (labels without `model`)."""
    host, port = urlparse(base).hostname, urlparse(base).port
    c = http.client.HTTPConnection(host, port, timeout=10)
    c.request("GET", "/metrics")
    text = c.getresponse().read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        series, value = line.rsplit(" ", 1)
        series = re.sub(r'model="[^"]*",?', "", series).replace(",}", "}").replace("{}", "")
        out[series] = out.get(series, 0.0) + float(value)
    return out


def post(base: str, path: str, body: bytes, timeout: float = 60.0) -> tuple[int, dict, bytes]:
    """POST `body` (sent whole, then the answer read, as most HTTP clients do)."""
    u = urlparse(base)
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)
    try:
        c.request("POST", path, body=body, headers={"Content-Type": "application/json"})
        r = c.getresponse()
        return r.status, dict(r.getheaders()), r.read()
    finally:
        c.close()


def get(base: str, path: str, timeout: float = 10.0) -> int:
    u = urlparse(base)
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)
    try:
        c.request("GET", path)
        r = c.getresponse()
        r.read()
        return r.status
    finally:
        c.close()


SMALL_CHAT = json.dumps({
    "messages": [{"role": "user", "content": "Say hi."}],
    "max_tokens": 4,
}).encode()


def big_chat(size: int) -> bytes:
    """A chat request of exactly `size` bytes: one user message of filler words."""
    head = b'{"max_tokens": 4, "messages": [{"role": "user", "content": "'
    tail = b'"}]}'
    words = b"kiln clay glaze fire "
    n = size - len(head) - len(tail)
    return head + (words * (n // len(words) + 1))[:n] + tail


@pytest.fixture
def flood_server(model_path, tmp_path):
    server = start_kiln(model_path, config(), log_dir=tmp_path)
    yield server
    assert server.stop() == 0, server.log_tail()


def test_a_flood_of_large_bodies_and_idle_connections(flood_server):
    base = flood_server.base_url
    u = urlparse(base)
    pid = flood_server.pid
    # Warm up (the first request allocates what every request reuses), then the baseline.
    assert post(base, "/v1/chat/completions", SMALL_CHAT)[0] == 200
    baseline = rss(pid)
    before = metrics(base)

    # 500 connections held open, each with an unfinished request.
    idle = []
    for _ in range(500):
        s = socket.create_connection((u.hostname, u.port))
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: kiln\r\n")
        idle.append(s)

    body = big_chat(8 * MIB)
    stop = threading.Event()
    # (kind, status, started, took)
    probes: list[tuple[str, int, float, float]] = []

    def probe():
        # /health and a small chat, over and over while the flood lasts.
        while not stop.is_set():
            t0 = time.monotonic()
            probes.append(("health", get(base, "/health"), t0, time.monotonic() - t0))
            t0 = time.monotonic()
            status, _, _ = post(base, "/v1/chat/completions", SMALL_CHAT)
            probes.append(("chat", status, t0, time.monotonic() - t0))
            time.sleep(0.05)

    prober = threading.Thread(target=probe)
    prober.start()
    t0 = time.monotonic()
    peak = [baseline]

    def watch():
        while not stop.is_set():
            peak[0] = max(peak[0], rss(pid))
            time.sleep(0.02)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        with concurrent.futures.ThreadPoolExecutor(200) as pool:
            answers = list(pool.map(lambda _: post(base, "/v1/chat/completions", body),
                                    range(200)))
    finally:
        stop.set()
        prober.join()
        watcher.join()
    flood_end = time.monotonic()
    flood_seconds = flood_end - t0

    # Every large body got an answer: a 400 naming the context overflow when it was read, or
    # a 429 with Retry-After when it was refused unread. Never a 5xx or a reset.
    statuses = [a[0] for a in answers]
    assert set(statuses) <= {400, 429}, statuses
    for status, headers, payload in answers:
        err = json.loads(payload)["error"]
        if status == 400:
            assert err["code"] == "context_length_exceeded", err
            assert err["message"].startswith("This model's maximum context length is"), err
        else:
            assert int(headers["retry-after"]) >= 1, headers
    assert statuses.count(400) >= 1, "some large bodies are read"
    assert statuses.count(429) >= 1, "the flood went past the byte budget"
    # /health and the small chat answered 200 all along, promptly.
    during = [p for p in probes if p[2] < flood_end]
    assert {kind for kind, *_ in during} == {"health", "chat"}, probes
    assert all(status == 200 for _, status, _, _ in probes), probes
    assert max(t for kind, _, _, t in probes if kind == "health") < 5.0, probes
    # Memory stayed bounded.
    growth = max(peak[0], rss(pid, "VmHWM")) - baseline
    print(f"flood: {flood_seconds:.1f} s, {statuses.count(400)} read, {statuses.count(429)} "
          f"refused, {len(during)} probes during it, RSS {baseline / MIB:.0f} MiB -> peak "
          f"+{growth / MIB:.0f} MiB")
    assert growth < RSS_GROWTH_BOUND, f"RSS grew by {growth / MIB:.0f} MiB"

    # The idle connections did not stop anything; let them go.
    for s in idle:
        s.close()
    # Nothing accepted is lost: the server answered exactly what the clients read, with no
    # 5xx, and nothing is left waiting, running or in flight.
    deadline = time.monotonic() + 20
    while True:
        after = metrics(base)
        if after.get("kiln_http_requests_in_flight", 0) == 0 or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    answered = {
        k: after[k] - before.get(k, 0.0)
        for k in after
        if k.startswith('kiln_requests_total{endpoint="/v1/chat/completions"')
    }
    assert sum(answered.values()) == len(answers) + sum(1 for p in probes if p[0] == "chat"), answered
    assert not any(re.search(r'status="5', k) and v for k, v in answered.items()), answered
    assert after["kiln_requests_waiting"] == 0 and after["kiln_requests_running"] == 0
    assert after["kiln_http_requests_in_flight"] == 0


def test_an_oversized_body_gets_a_413_the_client_can_read(flood_server):
    # The client sends all 64 MiB before it reads anything (http.client does): the server
    # must keep reading (and discarding) instead of closing with unread data, which would
    # reset the connection under the client.
    status, headers, payload = post(flood_server.base_url, "/v1/chat/completions",
                                    b"x" * (64 * MIB))
    assert status == 413, payload
    assert json.loads(payload)["error"]["code"] == "request_too_large"
    # The same without Content-Length (chunked): refused once past the limit, still readable.
    u = urlparse(flood_server.base_url)
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
    chunks = (b"x" * MIB for _ in range(64))
    c.request("POST", "/v1/completions", body=chunks,
              headers={"Content-Type": "application/json"}, encode_chunked=True)
    r = c.getresponse()
    assert r.status == 413, r.read()
    c.close()
    assert get(flood_server.base_url, "/health") == 200


def test_a_full_queue_is_a_429_with_retry_after_from_the_drain_rate(model_path, tmp_path):
    # One place in the queue, one sequence at a time: a burst overflows at once.
    server = start_kiln(model_path, config(scheduler={"max_waiting": 1, "max_num_seqs": 1,
                                                      "max_batch_tokens": 64}),
                        log_dir=tmp_path)
    try:
        body = json.dumps({"prompt": "Once upon a time", "max_tokens": 24,
                           "ignore_eos": True}).encode()
        with concurrent.futures.ThreadPoolExecutor(12) as pool:
            answers = list(pool.map(
                lambda _: post(server.base_url, "/v1/completions", body), range(12)))
        statuses = [a[0] for a in answers]
        assert 200 in statuses and 429 in statuses, statuses
        assert set(statuses) <= {200, 429}, statuses
        for status, headers, payload in answers:
            if status == 429:
                err = json.loads(payload)["error"]
                assert err["type"] == "rate_limit_error", err
                assert 1 <= int(headers["retry-after"]) <= 60, headers
    finally:
        assert server.stop() == 0, server.log_tail()
