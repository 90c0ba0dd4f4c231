"""Reasoning replies and `chat_template_kwargs` (issue 19 §3) through the official `openai`
client, against real `kiln serve` processes whose chat template writes `<think>` blocks.

The default model with the DeepSeek-R1 distill template of ../shared/conformance: its
generation prompt opens `<think>` and, unless `enable_thinking` is set, closes it at once. So
`chat_template_kwargs: {"enable_thinking": true}` makes the whole (short) reply reasoning:
`message.reasoning_content` (and `delta.reasoning_content` when streaming) carries it and
`content` does not, while without the kwarg the same request answers in `content` only. The
streamed and whole replies of a greedy request agree. With Qwen3's template (the model writes
`<think>` itself) a reply that does not open a block is all content. Reserved variables in
`chat_template_kwargs` are a 400 naming the field.
"""
from __future__ import annotations

import os
from pathlib import Path

import openai
import pytest

from conftest import client_for, config, start_kiln  # noqa: F401

ROOT = Path(__file__).resolve().parents[2]
SHARED = Path(os.environ.get("KILN_SHARED", ROOT.parent / "shared"))
R1 = SHARED / "conformance/chat-templates/deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja"
QWEN3 = ROOT / "tests/data/chat-templates/Qwen-Qwen3-0.6B.jinja"
ASK = [{"role": "user", "content": "Name three colours."}]


def server_with(template: Path, model_path, tmp_path):
    assert template.is_file(), f"{template} is missing"
    cfg = config()
    cfg["model"] = {"chat_template": str(template)}
    return start_kiln(model_path, cfg, log_dir=tmp_path)


@pytest.fixture(scope="module")
def r1(model_path, tmp_path_factory):
    server = server_with(R1, model_path, tmp_path_factory.mktemp("r1"))
    yield server
    assert server.stop() == 0, server.log_tail()


def ask(client, stream=False, **extra):
    return client.chat.completions.create(
        model=client.models.list().data[0].id, messages=ASK, max_tokens=12, temperature=0, seed=1, stream=stream,
        extra_body=extra or None)


def test_thinking_on_goes_to_reasoning_content_not_content(r1):
    client = client_for(r1.base_url)
    on = ask(client, chat_template_kwargs={"enable_thinking": True})
    msg = on.choices[0].message
    reasoning = (msg.model_extra or {}).get("reasoning_content")
    assert reasoning, f"no reasoning_content: {msg}"
    assert not msg.content, f"the open block's text leaked into content: {msg.content!r}"
    assert on.choices[0].finish_reason == "length"

    off = ask(client).choices[0].message
    assert off.content, off
    assert "reasoning_content" not in (off.model_extra or {}), off


def test_streamed_reasoning_agrees_with_the_whole_reply(r1):
    client = client_for(r1.base_url)
    whole = ask(client, chat_template_kwargs={"enable_thinking": True}).choices[0].message
    reasoning, content = "", ""
    for chunk in ask(client, stream=True, chat_template_kwargs={"enable_thinking": True}):
        for c in chunk.choices:
            reasoning += (c.delta.model_extra or {}).get("reasoning_content") or ""
            content += c.delta.content or ""
    assert reasoning == whole.model_extra["reasoning_content"]
    assert content == (whole.content or "")


def test_reserved_template_variables_are_refused(r1):
    client = client_for(r1.base_url)
    with pytest.raises(openai.BadRequestError) as e:
        ask(client, chat_template_kwargs={"messages": []})
    assert e.value.body["param"] == "chat_template_kwargs.messages"


def test_a_reply_without_a_block_is_content(model_path, tmp_path):
    server = server_with(QWEN3, model_path, tmp_path)
    try:
        msg = ask(client_for(server.base_url)).choices[0].message
        assert msg.content, msg
        assert "reasoning_content" not in (msg.model_extra or {}), msg
    finally:
        assert server.stop() == 0, server.log_tail()


def test_responses_api_returns_reasoning_items(r1):
    """The Responses API on the same server: `reasoning.effort` turns the template's thinking on,
    and the reply comes back as a `reasoning` item (streamed as `response.reasoning_text.*`
    events that join to it), counted in `output_tokens_details.reasoning_tokens`; effort
    "none" turns it off."""
    client = client_for(r1.base_url)
    model = client.models.list().data[0].id
    kw = dict(model=model, input=ASK[0]["content"], max_output_tokens=12, temperature=0)
    on = client.responses.create(reasoning={"effort": "low"}, **kw)
    assert on.output[0].type == "reasoning", on.output
    thought = on.output[0].content[0].text
    assert thought and on.output_text == ""
    assert 0 < on.usage.output_tokens_details.reasoning_tokens <= on.usage.output_tokens
    with client.responses.stream(reasoning={"effort": "low"}, **kw) as s:
        events = list(s)
    deltas = "".join(e.delta for e in events if e.type == "response.reasoning_text.delta")
    assert deltas == thought
    assert [e.sequence_number for e in events] == list(range(len(events)))
    off = client.responses.create(reasoning={"effort": "none"}, **kw)
    assert [o.type for o in off.output] == ["message"] and off.output_text


def test_messages_api_returns_thinking_blocks(r1):
    """The Anthropic Messages API on the same server, through the `anthropic` SDK: `thinking`
    enabled turns the template's thinking on and the reasoning comes back as a `thinking`
    block (streamed as `thinking_delta`s that join to it), never inside the text; disabled,
    the reply is text only; count_tokens counts the prompt `thinking` renders."""
    import anthropic

    claude = anthropic.Anthropic(base_url=r1.base_url, api_key="unused", max_retries=0,
                                 timeout=60.0)
    model = client_for(r1.base_url).models.list().data[0].id
    kw = dict(model=model, messages=ASK, max_tokens=12, extra_body={"temperature": 0})
    on = claude.messages.create(thinking={"type": "enabled", "budget_tokens": 1024}, **kw)
    assert [b.type for b in on.content] == ["thinking"], on.content
    thought = on.content[0].thinking
    assert thought and "<think>" not in thought and on.stop_reason == "max_tokens"
    with claude.messages.stream(thinking={"type": "enabled", "budget_tokens": 1024}, **kw) as s:
        events = list(s)
        final = s.get_final_message()
    deltas = [e.delta for e in events if e.type == "content_block_delta"]
    assert all(d.type == "thinking_delta" for d in deltas), deltas
    assert "".join(d.thinking for d in deltas) == thought
    assert final.content[0].type == "thinking" and final.content[0].thinking == thought
    off = claude.messages.create(thinking={"type": "disabled"}, **kw)
    assert [b.type for b in off.content] == ["text"] and off.content[0].text, off.content
    counted = [claude.messages.count_tokens(model=model, messages=ASK, thinking=t).input_tokens
               for t in ({"type": "enabled", "budget_tokens": 1024}, {"type": "disabled"})]
    assert counted[0] == on.usage.input_tokens + (on.usage.cache_read_input_tokens or 0)
    assert counted[1] == off.usage.input_tokens + (off.usage.cache_read_input_tokens or 0)
    assert counted[0] != counted[1]
