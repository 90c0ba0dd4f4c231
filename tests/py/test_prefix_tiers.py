"""The prefix cache's RAM and disk tiers through a real `kiln serve` and the official openai
client: a reply served from blocks restored from RAM, and from disk after a real restart of
the process, is identical to the one computed from scratch (text, tokens' logprobs and their
alternatives, to the bit as JSON carries them); damaged files are ignored and counted."""
from __future__ import annotations

import re
from pathlib import Path

import httpx2 as httpx

from conftest import client_for
from servers import start_kiln


def tier_config(cache_dir: Path) -> dict:
    # 1,024 positions of KV cache: two of these ~700-token prompts do not fit together.
    return {
        "engine": {"kv_cache": 1024},
        "server": {"max_tokens_default": 32, "max_tokens_cap": 64, "request_timeout": 120, "drain_timeout": 5},
        "cache": {"ram_bytes": "256MiB", "dir": str(cache_dir)},
    }


def long_system(topic: str, rules: int = 40) -> str:
    return "".join(
        f"Rule {i} about {topic}: answer briefly, stay on {topic}, and never invent facts. "
        for i in range(rules)
    )


def ask(client, model_id: str, topic: str, rules: int = 40, max_tokens: int = 16):
    """Greedy chat reply with logprobs: (text, logprobs as plain data, cached tokens, prompt tokens)."""
    r = client.chat.completions.create(
        model=model_id,
        messages=[
            {"role": "system", "content": long_system(topic, rules)},
            {"role": "user", "content": f"What is {topic}?"},
        ],
        max_tokens=max_tokens,
        temperature=0,
        logprobs=True,
        top_logprobs=3,
    )
    c = r.choices[0]
    lps = [
        (t.token, t.logprob, [(a.token, a.logprob) for a in t.top_logprobs])
        for t in c.logprobs.content
    ]
    details = r.usage.prompt_tokens_details
    cached = details.cached_tokens if details else 0
    return c.message.content, lps, cached, r.usage.prompt_tokens


def metric(base_url: str, name: str, labels: str) -> float:
    text = httpx.get(base_url + "/metrics", timeout=10).text
    m = re.search(re.escape(name) + r"\{" + re.escape(labels) + r"[^}]*\} ([0-9.e+]+)", text)
    assert m, f"{name}{{{labels}}} not in /metrics"
    return float(m.group(1))


def block_files(cache_dir: Path) -> list[Path]:
    return sorted(cache_dir.glob("*/*.kvb"))


def wait_files(cache_dir: Path, n: int, timeout: float = 30.0) -> None:
    import time

    deadline = time.monotonic() + timeout
    while len(block_files(cache_dir)) < n:
        assert time.monotonic() < deadline, f"{len(block_files(cache_dir))} of {n} block files"
        time.sleep(0.1)


def test_replies_from_ram_and_disk_tiers_equal_cold_ones(tmp_path):
    cache_dir = tmp_path / "cache"
    s1 = start_kiln(config=tier_config(cache_dir), log_dir=tmp_path / "s1")
    try:
        c1 = client_for(s1.base_url, timeout=120)
        model_id = c1.models.list().data[0].id
        cold = ask(c1, model_id, "rivers")
        assert cold[2] == 0
        prompt_tokens = cold[3]
        assert prompt_tokens > 600
        # Warmed by POST /cache/warm after a clear: the first real request hits, same reply.
        assert httpx.post(s1.base_url + "/cache/clear", timeout=30).status_code == 200
        w = httpx.post(s1.base_url + "/cache/warm", json={"model": model_id, "messages": [
            {"role": "system", "content": long_system("rivers")},
            {"role": "user", "content": "What is rivers?"}]}, timeout=120).json()
        assert w["prompt_tokens"] == prompt_tokens and w["cached_blocks"] == prompt_tokens // 16, w
        warmed = ask(c1, model_id, "rivers")
        assert warmed[:2] == cold[:2] and warmed[2] > 0, "a warmed prompt missed or differs"
        ask(c1, model_id, "mountains")  # evicts the first prompt's blocks to RAM
        warm = ask(c1, model_id, "rivers")
        assert warm[:2] == cold[:2], "a reply from RAM-tier blocks differs"
        assert warm[2] >= prompt_tokens - 32
        assert metric(s1.base_url, "kiln_prefix_cache_tier_lookups_total", 'result="hit",tier="ram"') >= 1
        wait_files(cache_dir, 2 * ((prompt_tokens - 1) // 16))
    finally:
        assert s1.stop() == 0, s1.log_tail()

    # A real restart: a new process on the same directory.
    s2 = start_kiln(config=tier_config(cache_dir), log_dir=tmp_path / "s2")
    try:
        c2 = client_for(s2.base_url, timeout=120)
        resumed = ask(c2, model_id, "rivers")
        assert resumed[:2] == cold[:2], "a reply from disk-tier blocks differs"
        assert resumed[2] >= prompt_tokens - 32
        assert metric(s2.base_url, "kiln_prefix_cache_tier_lookups_total", 'result="hit",tier="disk"') == 1
    finally:
        assert s2.stop() == 0, s2.log_tail()

    # Every file damaged (a flipped byte, or cut short): nothing is loaded, each refusal counted,
    # and the reply is computed again, identical.
    files = block_files(cache_dir)
    for i, f in enumerate(files):
        b = bytearray(f.read_bytes())
        if i % 2:
            f.write_bytes(bytes(b[: len(b) // 2]))
        else:
            b[len(b) // 2] ^= 0x01
            f.write_bytes(bytes(b))
    s3 = start_kiln(config=tier_config(cache_dir), log_dir=tmp_path / "s3")
    try:
        c3 = client_for(s3.base_url, timeout=120)
        again = ask(c3, model_id, "rivers")
        assert again[:2] == cold[:2]
        assert again[2] == 0
        assert metric(s3.base_url, "kiln_prefix_cache_disk_blocks_total", 'outcome="rejected"') == 1
    finally:
        assert s3.stop() == 0, s3.log_tail()


def test_namespace_by_key_keeps_each_keys_prompts_apart(tmp_path):
    """Two API keys, cache.namespace_by_key on: the same prompt is reused within a key (the
    OpenAI client's bearer header, the Anthropic client's x-api-key alike), never across keys."""
    import anthropic

    cfg = {
        "engine": {"kv_cache": 1024},
        "server": {"api_keys": ["sk-tenant-a", "sk-tenant-b"], "request_timeout": 60, "drain_timeout": 5},
        "cache": {"ram_bytes": "64MiB", "namespace_by_key": True},
    }
    s = start_kiln(config=cfg, log_dir=tmp_path / "s")
    try:
        a = client_for(s.base_url, api_key="sk-tenant-a", timeout=120)
        b = client_for(s.base_url, api_key="sk-tenant-b", timeout=120)
        model_id = a.models.list().data[0].id
        first = ask(a, model_id, "harbours", rules=8, max_tokens=4)
        assert first[2] == 0 and first[3] > 100
        assert ask(b, model_id, "harbours", rules=8, max_tokens=4)[2] == 0, "key b reused key a's prompt"
        again = ask(a, model_id, "harbours", rules=8, max_tokens=4)
        assert again[2] >= first[3] - 16 and again[:2] == first[:2]
        # The same key through the Anthropic client (x-api-key) is the same namespace.
        msg = anthropic.Anthropic(base_url=s.base_url, api_key="sk-tenant-b", max_retries=0).messages.create(
            model=model_id,
            max_tokens=4,
            system=long_system("harbours", 8),
            messages=[{"role": "user", "content": "What is harbours?"}],
        )
        assert msg.usage.cache_read_input_tokens > 0, msg.usage
    finally:
        assert s.stop() == 0, s.log_tail()
