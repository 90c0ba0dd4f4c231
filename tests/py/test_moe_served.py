"""A mixture-of-experts model served (issue 40 §6): `kiln serve` on the random-weight qwen3moe
proof model (kiln's synth writer: `cargo build --release --example proof_models`, the file
tests/it/arch_proof.rs holds against llama.cpp; 6 experts of width 256, 2 used per token),
written at test time in Q4_K_M with the default model's vocabulary and Qwen3's own chat
template. Random weights write no sense, so these tests hold the plumbing: the architecture
loads and serves through the official `openai` client (chat, a streamed reply equal to the
whole one, tools accepted), and the Anthropic Messages and OpenAI Responses routes answer it.
"""
from __future__ import annotations

from pathlib import Path

import anthropic
import pytest

from conftest import WEATHER, client_for, serve_proof_model

ROOT = Path(__file__).resolve().parents[2]
VOCAB = ROOT / "models/SmolLM2-135M-Instruct.Q4_1.gguf"
TEMPLATE = ROOT / "tests/data/chat-templates/Qwen-Qwen3-0.6B.jinja"
ASK = [{"role": "user", "content": "Name three rivers."}]


@pytest.fixture(scope="module")
def qwen3moe(tmp_path_factory):
    """A kiln server on the qwen3moe proof model (Q4_K_M) with Qwen3's template."""
    server = serve_proof_model(tmp_path_factory, "qwen3moe", "qwen3moe.Q4_K_M.gguf", VOCAB,
                               "`make model`", TEMPLATE, 4001)
    yield server
    assert server.stop() == 0, server.log_tail()


def test_the_architecture_is_served_as_qwen3moe(qwen3moe):
    client = client_for(qwen3moe.base_url)
    models = client.models.list().data
    assert len(models) == 1
    r = client.chat.completions.create(model=models[0].id, messages=ASK, max_tokens=6,
                                       temperature=0)
    assert r.choices[0].finish_reason in ("length", "stop")
    assert r.usage.completion_tokens >= 1
    assert r.usage.prompt_tokens > 5


def test_whole_and_streamed_chat_replies_agree(qwen3moe):
    client = client_for(qwen3moe.base_url)
    model = client.models.list().data[0].id
    kw = dict(model=model, messages=ASK, max_tokens=10, temperature=0, seed=3)
    whole = client.chat.completions.create(**kw).choices[0]
    text, reasoning, finish = "", "", None
    for chunk in client.chat.completions.create(stream=True, **kw):
        for c in chunk.choices:
            text += c.delta.content or ""
            reasoning += (c.delta.model_extra or {}).get("reasoning_content") or ""
            finish = c.finish_reason or finish
    assert finish == whole.finish_reason
    assert text == (whole.message.content or "")
    assert reasoning == ((whole.message.model_extra or {}).get("reasoning_content") or "")
    assert text or reasoning, "the greedy reply of 10 tokens is empty"


def test_a_request_offering_tools_is_answered(qwen3moe):
    client = client_for(qwen3moe.base_url)
    model = client.models.list().data[0].id
    plain = client.chat.completions.create(model=model, messages=ASK, max_tokens=2,
                                           temperature=0)
    r = client.chat.completions.create(model=model, messages=ASK, tools=[WEATHER],
                                       max_tokens=4, temperature=0)
    assert r.choices[0].finish_reason in ("length", "stop", "tool_calls")
    # Qwen3's template writes the tools into the system turn.
    assert r.usage.prompt_tokens > plain.usage.prompt_tokens


def test_the_anthropic_messages_route_answers(qwen3moe):
    client = client_for(qwen3moe.base_url)
    model = client.models.list().data[0].id
    claude = anthropic.Anthropic(base_url=qwen3moe.base_url, api_key="unused", max_retries=0,
                                 timeout=60)
    m = claude.messages.create(model=model, max_tokens=6, messages=ASK)
    assert m.type == "message" and m.role == "assistant"
    assert m.stop_reason in ("max_tokens", "end_turn")
    assert m.usage.output_tokens >= 1 and m.usage.input_tokens > 5


def test_the_responses_route_answers(qwen3moe):
    client = client_for(qwen3moe.base_url)
    model = client.models.list().data[0].id
    r = client.responses.create(model=model, input="Name three rivers.", max_output_tokens=6,
                                temperature=0)
    assert r.status in ("completed", "incomplete")
    assert r.usage.output_tokens >= 1 and r.usage.input_tokens > 5
