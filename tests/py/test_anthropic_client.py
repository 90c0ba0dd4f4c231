"""The official `anthropic` Python SDK against a real kiln's `/v1/messages` (issue 20, section 5).

Everything goes through the SDK's own types and stream helpers, so a reply or an event that
does not parse as Anthropic's shape fails here as it would for a user of the SDK. Requests are
greedy (temperature 0, sent in `extra_body`: this SDK no longer has sampling parameters) and
short; the session's shared server answers them all.
"""
from __future__ import annotations

import json

import anthropic
import httpx2 as httpx
import pytest

WEATHER = {
    "name": "get_weather",
    "description": "The current weather in a city.",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]
GREEDY = {"temperature": 0}


@pytest.fixture(scope="module")
def claude(kiln):
    """The SDK on the shared server (retries off so every error surfaces once)."""
    return anthropic.Anthropic(base_url=kiln.base_url, api_key="unused", max_retries=0,
                               timeout=60.0)


def create(claude, model_id, **kw):
    kw.setdefault("messages", [{"role": "user", "content": "Name three colors."}])
    kw.setdefault("max_tokens", 16)
    kw.setdefault("extra_body", GREEDY)
    return claude.messages.create(model=model_id, **kw)


def test_create_returns_a_message(claude, model_id):
    m = create(claude, model_id, system="You are terse.")
    assert m.type == "message" and m.role == "assistant"
    assert m.id.startswith("msg_")
    assert m.model == model_id
    assert [b.type for b in m.content] == ["text"] and m.content[0].text
    assert m.stop_reason in ("end_turn", "max_tokens")
    u = m.usage
    assert u.input_tokens + (u.cache_read_input_tokens or 0) > 10
    assert 0 < u.output_tokens <= 16
    # count_tokens sees the same prompt.
    n = claude.messages.count_tokens(
        model=model_id, system="You are terse.",
        messages=[{"role": "user", "content": "Name three colors."}])
    assert n.input_tokens == u.input_tokens + (u.cache_read_input_tokens or 0)


def test_stream_events_in_order_and_text_matches(claude, model_id):
    whole = create(claude, model_id)
    events = list(create(claude, model_id, stream=True))
    kinds = [e.type for e in events]
    assert kinds[0] == "message_start" and kinds[-2:] == ["message_delta", "message_stop"]
    blocks = [k for k in kinds if k.startswith("content_block")]
    assert blocks[0] == "content_block_start" and blocks[-1] == "content_block_stop"
    assert events[0].message.usage.input_tokens > 0
    text = "".join(e.delta.text for e in events if e.type == "content_block_delta")
    assert text == whole.content[0].text
    assert events[-2].delta.stop_reason == whole.stop_reason
    assert events[-2].usage.output_tokens == whole.usage.output_tokens
    # The stream helper accumulates the same message.
    with claude.messages.stream(model=model_id, max_tokens=16, extra_body=GREEDY,
                                messages=[{"role": "user", "content": "Name three colors."}]) as s:
        streamed = "".join(s.text_stream)
        final = s.get_final_message()
    assert streamed == whole.content[0].text == final.content[0].text
    assert final.stop_reason == whole.stop_reason


def test_raw_stream_is_anthropics_event_sequence(kiln, model_id):
    """The wire itself (the SDK drops `ping`): each `event:` name equals its data's `type`, in
    Anthropic's order, with the `ping` after `message_start`."""
    body = {"model": model_id, "max_tokens": 8, "stream": True, "temperature": 0,
            "messages": [{"role": "user", "content": "Name three colors."}]}
    r = httpx.post(kiln.base_url + "/v1/messages", json=body, timeout=60,
                   headers={"x-api-key": "unused", "anthropic-version": "2023-06-01"})
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    events = []
    for block in r.text.split("\n\n"):
        lines = dict(l.split(": ", 1) for l in block.splitlines() if ": " in l)
        if "event" in lines:
            data = json.loads(lines["data"])
            assert data["type"] == lines["event"], block
            events.append(lines["event"])
    assert events[:3] == ["message_start", "ping", "content_block_start"], events
    assert events[-3:] == ["content_block_stop", "message_delta", "message_stop"], events
    middle = events[3:-3]
    assert middle and set(middle) == {"content_block_delta"}, events


def test_stop_sequences_and_assistant_prefill(claude, model_id):
    m = create(claude, model_id, max_tokens=24,
               messages=[{"role": "user", "content": "Count from 1 to 10, separated by commas."},
                         {"role": "assistant", "content": "1, 2, 3,"}])
    # The reply continues the assistant's turn.
    assert m.content[0].text.lstrip().startswith("4")
    stopped = create(claude, model_id, max_tokens=24, stop_sequences=["6"],
                     messages=[{"role": "user", "content": "Count from 1 to 10, separated by commas."},
                               {"role": "assistant", "content": "1, 2, 3,"}])
    assert "6" not in stopped.content[0].text
    assert stopped.stop_reason == "stop_sequence" and stopped.stop_sequence == "6"


def test_tool_use_round_trip(claude, model_id):
    m = create(claude, model_id, max_tokens=48, tools=[WEATHER], messages=ASK,
               tool_choice={"type": "any"})
    assert m.stop_reason == "tool_use"
    calls = [b for b in m.content if b.type == "tool_use"]
    assert len(calls) >= 1
    call = calls[0]
    assert call.name == "get_weather" and call.id.startswith("toolu_")
    assert isinstance(call.input, dict) and isinstance(call.input["city"], str)
    # The answer goes back as a tool_result; the model replies in text.
    reply = create(claude, model_id, max_tokens=24, tools=[WEATHER], messages=ASK + [
        {"role": "assistant", "content": m.content},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": call.id, "content": "Sunny, 21 C"}]},
    ], tool_choice={"type": "none"})
    assert reply.stop_reason in ("end_turn", "max_tokens")
    assert [b.type for b in reply.content] == ["text"]


def test_streamed_tool_use_accumulates_its_input(claude, model_id):
    with claude.messages.stream(model=model_id, max_tokens=48, extra_body=GREEDY, tools=[WEATHER],
                                messages=ASK, tool_choice={"type": "tool",
                                                           "name": "get_weather"}) as s:
        events = list(s)
        final = s.get_final_message()
    deltas = [e for e in events if e.type == "content_block_delta"]
    assert any(d.delta.type == "input_json_delta" for d in deltas)
    call = next(b for b in final.content if b.type == "tool_use")
    assert call.name == "get_weather" and isinstance(call.input.get("city"), str)
    assert final.stop_reason == "tool_use"


def test_errors_use_anthropics_envelope(claude, kiln, model_id):
    # A 404 in Anthropic's envelope (an unknown model on a strict server):
    # test_llama_server_compat.py.
    with pytest.raises(anthropic.BadRequestError) as e:
        create(claude, model_id, max_tokens=0)
    assert e.value.body["error"]["type"] == "invalid_request_error"
    # Raw bodies the SDK would never send: still Anthropic's envelope, and a 4xx.
    for body, status in [("{", 400), ('{"messages": []}', 400), ("[1]", 400),
                         ('{"max_tokens": 5, "messages": [{"role": "user", "content": '
                          '[{"type": "image", "source": {}}]}]}', 400)]:
        r = httpx.post(kiln.base_url + "/v1/messages", content=body,
                       headers={"content-type": "application/json"}, timeout=30)
        assert r.status_code == status, (body, r.text)
        j = r.json()
        assert j["type"] == "error" and j["error"]["type"] == "invalid_request_error", j
        assert isinstance(j["error"]["message"], str) and j["error"]["message"]
    r = httpx.post(kiln.base_url + "/v1/messages", content="x",
                   headers={"content-type": "text/plain"}, timeout=30)
    assert r.status_code == 415 and r.json()["type"] == "error"


def test_output_format_json_schema(claude, model_id):
    schema = {"type": "object", "properties": {"color": {"type": "string", "maxLength": 12}},
              "required": ["color"], "additionalProperties": False}
    m = create(claude, model_id, max_tokens=32,
               messages=[{"role": "user", "content": "Name a color, as JSON."}],
               output_config={"format": {"type": "json_schema", "schema": schema}})
    assert m.stop_reason == "end_turn"
    assert isinstance(json.loads(m.content[0].text)["color"], str)
