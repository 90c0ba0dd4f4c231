"""gpt-oss served (issue 40 §6) through the official `openai` client: `kiln serve` on the
random-weight gpt-oss proof model (kiln's synth writer: `cargo build --release --example
proof_models`, the file tests/it/arch_proof.rs holds against llama.cpp) with gpt-oss's own
harmony chat template. Random weights over a llama vocabulary write no harmony, so these tests
hold the plumbing, not the text: the architecture loads and serves; the rendered prompt is
harmony's; the prompt the chat route feeds is that rendering; a whole and a streamed greedy
reply agree; a request offering tools is accepted and its prompt grows by the tools' `functions`
namespace; /v1/completions continues a raw harmony prompt; the Anthropic Messages and OpenAI
Responses routes answer. What the server controls holds
whatever the weights: `tool_choice` "required" or a named function forces one harmony call
message (`<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{args}<|call|>`),
returned as a parsed call with schema-valid arguments; `response_format` json_schema forces the
final channel with JSON valid against the schema, returned as content. How a harmony reply is
read (analysis channel -> `reasoning_content`, final -> `content`, `to=functions.NAME` -> a tool
call) is tested on the text itself in src/structured/harmony.rs and the tool reader's tests.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import anthropic
import httpx2 as httpx
import jsonschema
import pytest

from conftest import WEATHER, client_for, serve_proof_model

ROOT = Path(__file__).resolve().parents[2]
SHARED = Path(os.environ.get("KILN_SHARED", ROOT.parent / "shared"))
VOCAB = SHARED / "conformance/tokenizer/ggml-vocab-llama-spm.gguf"
TEMPLATE = ROOT / "tests/data/chat-templates/openai-gpt-oss-120b.jinja"
ASK = [{"role": "user", "content": "Weather in Paris?"}]


@pytest.fixture(scope="module")
def gpt_oss(tmp_path_factory):
    """A kiln server on the gpt-oss proof model (F16) with the harmony template."""
    server = serve_proof_model(tmp_path_factory, "gpt-oss", "gpt-oss.F16.gguf", VOCAB,
                               "the shared conformance corpus", TEMPLATE, 1801)
    yield server
    assert server.stop() == 0, server.log_tail()


def post(base: str, path: str, body: dict) -> dict:
    r = httpx.post(base + path, json=body, timeout=60)
    assert r.status_code == 200, r.text
    return r.json()


def test_the_prompt_is_harmony_and_the_chat_route_feeds_it(gpt_oss):
    rendered = post(gpt_oss.base_url, "/apply-template", {"messages": ASK})["prompt"]
    assert rendered.startswith("<|start|>system<|message|>"), rendered
    assert "Reasoning: medium" in rendered
    assert rendered.endswith("<|start|>user<|message|>Weather in Paris?<|end|><|start|>assistant")
    # The chat route's prompt is that rendering, token for token.
    want = post(gpt_oss.base_url, "/tokenize", {"messages": ASK})["count"]
    text = post(gpt_oss.base_url, "/tokenize", {"prompt": rendered})["count"]
    assert want == text, (want, text)
    client = client_for(gpt_oss.base_url)
    r = client.chat.completions.create(model=client.models.list().data[0].id, messages=ASK,
                                       max_tokens=4, temperature=0)
    assert r.usage.prompt_tokens == want


def test_whole_and_streamed_replies_agree(gpt_oss):
    client = client_for(gpt_oss.base_url)
    model = client.models.list().data[0].id
    kw = dict(model=model, messages=ASK, max_tokens=12, temperature=0, seed=1)
    whole = client.chat.completions.create(**kw).choices[0]
    assert whole.finish_reason in ("length", "stop")
    content, reasoning = "", ""
    for chunk in client.chat.completions.create(stream=True, **kw):
        for c in chunk.choices:
            content += c.delta.content or ""
            reasoning += (c.delta.model_extra or {}).get("reasoning_content") or ""
    assert content == (whole.message.content or "")
    assert reasoning == ((whole.message.model_extra or {}).get("reasoning_content") or "")


def test_a_request_offering_tools_is_answered(gpt_oss):
    client = client_for(gpt_oss.base_url)
    r = client.chat.completions.create(model=client.models.list().data[0].id, messages=ASK,
                                       tools=[WEATHER], max_tokens=8, temperature=0)
    choice = r.choices[0]
    assert choice.finish_reason in ("length", "stop", "tool_calls"), choice
    assert r.usage.prompt_tokens > post(gpt_oss.base_url, "/tokenize",
                                        {"messages": ASK})["count"]


def test_completions_continue_a_raw_harmony_prompt(gpt_oss):
    client = client_for(gpt_oss.base_url)
    rendered = post(gpt_oss.base_url, "/apply-template", {"messages": ASK})["prompt"]
    r = client.completions.create(model=client.models.list().data[0].id,
                                  prompt=rendered + "<|channel|>final<|message|>",
                                  max_tokens=6, temperature=0)
    assert r.choices[0].finish_reason in ("length", "stop")
    assert r.usage.completion_tokens >= 1


CITY = {"type": "object",
        "properties": {"city": {"enum": ["Paris", "Oslo"]},
                       "days": {"type": "integer", "minimum": 1, "maximum": 7}},
        "required": ["city", "days"], "additionalProperties": False}
TOOLS = [WEATHER, {"type": "function", "function": {"name": "forecast", "parameters": CITY,
                                                     "description": "Forecast for a city"}}]


@pytest.mark.parametrize("choice", ["required", "forecast"])
def test_a_forced_tool_call_is_a_parsed_harmony_call(gpt_oss, choice):
    client = client_for(gpt_oss.base_url)
    tool_choice = choice if choice == "required" else {"type": "function",
                                                        "function": {"name": choice}}
    r = client.chat.completions.create(model=client.models.list().data[0].id, messages=ASK,
                                       tools=TOOLS, tool_choice=tool_choice, max_tokens=80,
                                       temperature=0, seed=2)
    c = r.choices[0]
    assert c.finish_reason == "tool_calls", c
    assert not c.message.content, c.message
    assert len(c.message.tool_calls) == 1, c.message
    call = c.message.tool_calls[0].function
    if choice != "required":
        assert call.name == choice
    schema = next(t["function"]["parameters"] for t in TOOLS if t["function"]["name"] == call.name)
    jsonschema.validate(json.loads(call.arguments), schema)


def test_json_schema_answers_in_the_final_channel(gpt_oss):
    client = client_for(gpt_oss.base_url)
    kw = dict(model=client.models.list().data[0].id, messages=ASK, max_tokens=60,
              temperature=0, seed=4,
              response_format={"type": "json_schema",
                               "json_schema": {"name": "city", "schema": CITY}})
    msg = client.chat.completions.create(**kw).choices[0].message
    assert not (msg.model_extra or {}).get("reasoning_content"), msg
    jsonschema.validate(json.loads(msg.content), CITY)
    # Streamed, the same answer arrives as content.
    text = "".join(c.delta.content or "" for chunk in client.chat.completions.create(
        stream=True, **kw) for c in chunk.choices)
    assert text == msg.content


def test_the_anthropic_messages_and_responses_routes_answer(gpt_oss):
    client = client_for(gpt_oss.base_url)
    model = client.models.list().data[0].id
    claude = anthropic.Anthropic(base_url=gpt_oss.base_url, api_key="unused", max_retries=0,
                                 timeout=60)
    m = claude.messages.create(model=model, max_tokens=6, messages=ASK)
    assert m.type == "message" and m.role == "assistant"
    assert m.stop_reason in ("max_tokens", "end_turn")
    # Anthropic's input_tokens leaves out what the prompt cache read.
    assert m.usage.output_tokens >= 1
    assert m.usage.input_tokens + (m.usage.cache_read_input_tokens or 0) > 5
    r = client.responses.create(model=model, input="Weather in Paris?", max_output_tokens=6,
                                temperature=0)
    assert r.status in ("completed", "incomplete")
    assert r.usage.output_tokens >= 1 and r.usage.input_tokens > 5
