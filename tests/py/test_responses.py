"""The official `openai` client's Responses API against a real kiln's `/v1/responses` (issue 20,
section 4), and one agents framework built on it: the OpenAI Agents SDK (`openai-agents`).

Everything goes through the SDK's own types and helpers (`responses.create`, `.stream`,
`.parse`, `.retrieve`, `.delete`), so a response or an event that does not parse as the API's
shape fails here as it would for a user. Requests are greedy and short; the session's shared
server answers them all. Function calls use tool_choice "required" (constrained decoding), so
the round trips do not depend on what a 135M model would choose.
"""
from __future__ import annotations

import asyncio
import json

import httpx2 as httpx
import openai
import pytest
from pydantic import BaseModel, Field

WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "The current weather in a city.",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string", "maxLength": 20}},
        "required": ["city"],
        "additionalProperties": False,
    },
}
ASK = "What is the weather in Paris?"


def create(client, model_id, **kw):
    kw.setdefault("input", "Name three colors.")
    kw.setdefault("max_output_tokens", 16)
    kw.setdefault("temperature", 0)
    return client.responses.create(model=model_id, **kw)


def test_create_with_string_and_items(client, model_id):
    r = create(client, model_id, instructions="You are terse.")
    assert r.object == "response" and r.id.startswith("resp_") and r.model == model_id
    assert r.status in ("completed", "incomplete")
    assert r.output_text and r.output[-1].type == "message"
    assert r.instructions == "You are terse." and r.max_output_tokens == 16
    u = r.usage
    assert u.input_tokens > 10 and 0 < u.output_tokens <= 16
    assert u.total_tokens == u.input_tokens + u.output_tokens
    assert u.output_tokens_details.reasoning_tokens == 0
    # The same conversation as items (an input_text part, the instructions as a developer
    # message) is the same prompt, so the same greedy answer.
    items = create(client, model_id, input=[
        {"role": "developer", "content": "You are terse."},
        {"type": "message", "role": "user",
         "content": [{"type": "input_text", "text": "Name three colors."}]},
    ])
    assert items.usage.input_tokens == u.input_tokens
    assert items.output_text == r.output_text


def test_max_output_tokens_makes_it_incomplete(client, model_id):
    r = create(client, model_id, max_output_tokens=3,
               input="Write a long story about a kiln.")
    assert r.status == "incomplete"
    assert r.incomplete_details.reason == "max_output_tokens"
    assert r.usage.output_tokens == 3
    assert r.output[-1].status == "incomplete"


def test_stream_events_in_order_and_deltas_join_to_the_text(client, model_id):
    whole = create(client, model_id)
    with client.responses.stream(model=model_id, input="Name three colors.",
                                 max_output_tokens=16, temperature=0) as s:
        events = list(s)
        final = s.get_final_response()
    kinds = [e.type for e in events]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert kinds[:4] == ["response.created", "response.in_progress",
                         "response.output_item.added", "response.content_part.added"]
    assert kinds[-4:] == ["response.output_text.done", "response.content_part.done",
                          "response.output_item.done",
                          "response.completed" if whole.status == "completed"
                          else "response.incomplete"]
    assert set(kinds[4:-4]) == {"response.output_text.delta"}
    assert events[0].response.status == "in_progress" and events[0].response.output == []
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == whole.output_text == final.output_text
    done = events[-1].response
    assert done.usage.output_tokens == whole.usage.output_tokens
    assert done.output[0].id == events[2].item.id == events[-4].item_id
    # A streamed response is stored like a whole one.
    assert client.responses.retrieve(done.id).output_text == text


class Color(BaseModel):
    name: str = Field(max_length=12)
    warm: bool


def test_parse_with_a_pydantic_model(client, model_id):
    r = client.responses.parse(model=model_id, input="Name a color and say if it is warm.",
                               text_format=Color, max_output_tokens=48, temperature=0)
    assert r.status == "completed"
    assert isinstance(r.output_parsed, Color)
    assert json.loads(r.output_text) == r.output_parsed.model_dump()


def test_function_call_round_trip_with_previous_response_id(client, model_id):
    first = create(client, model_id, input=ASK, tools=[WEATHER], tool_choice="required",
                   parallel_tool_calls=False, max_output_tokens=48)
    calls = [o for o in first.output if o.type == "function_call"]
    assert first.status == "completed" and len(calls) == 1
    call = calls[0]
    assert call.name == "get_weather" and call.call_id.startswith("call_")
    assert isinstance(json.loads(call.arguments)["city"], str)
    # The answer goes back as a function_call_output item; the stored conversation (the
    # question and the call) comes first, so the prompt is longer than the first one.
    reply = create(client, model_id, previous_response_id=first.id, tools=[WEATHER],
                   tool_choice="none", max_output_tokens=24,
                   input=[{"type": "function_call_output", "call_id": call.call_id,
                           "output": "Sunny, 21 C"}])
    assert reply.previous_response_id == first.id
    assert reply.status in ("completed", "incomplete") and reply.output_text
    assert all(o.type == "message" for o in reply.output)
    # The stored conversation is exactly the items: the same three sent at once render the
    # same prompt and get the same greedy answer.
    alone = create(client, model_id, tools=[WEATHER], tool_choice="none", max_output_tokens=24,
                   input=[{"role": "user", "content": ASK},
                          {"type": "function_call", "call_id": call.call_id,
                           "name": call.name, "arguments": call.arguments},
                          {"type": "function_call_output", "call_id": call.call_id,
                           "output": "Sunny, 21 C"}])
    assert alone.usage.input_tokens == reply.usage.input_tokens
    assert alone.output_text == reply.output_text
    # The stored input comes back as items (newest first by default), each with an id.
    items = client.responses.input_items.list(alone.id, order="asc").data
    assert [i.type for i in items] == ["message", "function_call", "function_call_output"]
    assert items[1].call_id == items[2].call_id == call.call_id
    assert items[2].output == "Sunny, 21 C" and items[0].content[0].text == ASK
    assert [i.id for i in client.responses.input_items.list(alone.id).data] == \
        [i.id for i in reversed(items)]
    page = client.responses.input_items.list(alone.id, order="asc", limit=1, after=items[0].id)
    assert [i.id for i in page.data] == [items[1].id] and page.has_more
    # A continued response's input is its own items only.
    assert [i.type for i in client.responses.input_items.list(reply.id).data] == \
        ["function_call_output"]


def test_streamed_function_call(client, model_id):
    with client.responses.stream(model=model_id, input=ASK, tools=[WEATHER],
                                 tool_choice={"type": "function", "name": "get_weather"},
                                 parallel_tool_calls=False, max_output_tokens=48,
                                 temperature=0) as s:
        events = list(s)
        final = s.get_final_response()
    kinds = [e.type for e in events]
    assert "response.function_call_arguments.delta" in kinds
    done = next(e for e in events if e.type == "response.function_call_arguments.done")
    call = next(o for o in final.output if o.type == "function_call")
    assert done.arguments == call.arguments and done.item_id == call.id
    assert isinstance(json.loads(call.arguments)["city"], str)
    assert kinds[-1] == "response.completed"


def test_stored_responses_get_delete_and_misses(client, model_id):
    r = create(client, model_id, max_output_tokens=4)
    got = client.responses.retrieve(r.id)
    assert got.id == r.id and got.output_text == r.output_text and got.usage == r.usage
    client.responses.delete(r.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(r.id)
    with pytest.raises(openai.NotFoundError) as e:
        create(client, model_id, previous_response_id=r.id, input="and then?")
    assert e.value.body["code"] == "previous_response_not_found"
    assert e.value.body["param"] == "previous_response_id"
    assert e.value.body["type"] == "invalid_request_error"
    unstored = create(client, model_id, max_output_tokens=4, store=False)
    assert unstored.store is False
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(unstored.id)


def test_bad_requests_are_4xx_in_openais_envelope(kiln, client, model_id):
    # Unknown model names (404 only with server.strict_model_names on one model):
    # test_llama_server_compat.py.
    with pytest.raises(openai.BadRequestError) as e:
        create(client, model_id, tools=[{"type": "web_search"}])
    assert e.value.body["param"] == "tools[0].type"
    for body, param in [
        ("{", None),
        ('{"input": []}', "input"),
        ('{"input": "x", "max_output_tokens": 0}', "max_output_tokens"),
        ('{"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]}',
         "input[0]"),
        ('{"input": "x", "text": {"format": {"type": "json_schema", "name": "a", '
         '"schema": {"type": "object", "properties": {"a": {"type": "strang"}}}}}}', None),
    ]:
        r = httpx.post(kiln.base_url + "/v1/responses", content=body,
                       headers={"content-type": "application/json"}, timeout=30)
        assert r.status_code == 400, (body, r.text)
        err = r.json()["error"]
        assert err["type"] == "invalid_request_error" and err["message"], (body, err)
        if param is not None:
            assert err["param"] == param, (body, err)


def test_openai_agents_sdk_runs_an_agent_with_a_function_tool(kiln, model_id):
    """An Agent with a function tool, run by the Agents SDK's Runner over kiln's Responses API.
    First stopping at the tool's result (one model call); then the full loop, streamed: the
    model calls the tool (tool_choice required), the SDK runs it and sends its output back (a
    function_call_output item after the call), and the model answers in text. A 135M model
    left to choose would call again, so an agent hook turns tool_choice to "none" once the
    tool has run: every turn is deterministic."""
    from agents import (Agent, AgentHooks, ModelSettings, OpenAIResponsesModel, Runner,
                        function_tool, set_tracing_disabled)

    set_tracing_disabled(True)
    seen = []

    @function_tool
    def get_weather(city: str) -> str:
        """The current weather in a city."""
        seen.append(city)
        return f"Sunny, 21 C in {city}"

    class AnswerAfterTheTool(AgentHooks):
        async def on_tool_end(self, context, agent, tool, result):
            agent.model_settings.tool_choice = "none"

    def settings():
        return ModelSettings(tool_choice="required", parallel_tool_calls=False, temperature=0,
                             max_tokens=48)

    async def run():
        client = openai.AsyncOpenAI(base_url=kiln.base_url + "/v1", api_key="unused",
                                    max_retries=0, timeout=60)
        model = OpenAIResponsesModel(model=model_id, openai_client=client)
        stop = Agent(name="weather", instructions="Answer questions about the weather.",
                     tools=[get_weather], model=model, model_settings=settings(),
                     tool_use_behavior="stop_on_first_tool")
        first = await Runner.run(stop, ASK)
        def loop():
            return stop.clone(tool_use_behavior="run_llm_again", model_settings=settings(),
                              reset_tool_choice=False, hooks=AnswerAfterTheTool())

        streamed = Runner.run_streamed(loop(), ASK, max_turns=3)
        kinds = [e.type async for e in streamed.stream_events()]
        # Chained through kiln's stored responses: the second call sends only the tool's
        # output, with previous_response_id.
        chained = await Runner.run(loop(), ASK, max_turns=3, auto_previous_response_id=True)
        second = await client.responses.retrieve(chained.raw_responses[1].response_id)
        await client.close()
        return first, streamed, kinds, chained, second

    first, streamed, kinds, chained, second = asyncio.run(run())
    assert len(seen) == 3 and first.final_output == f"Sunny, 21 C in {seen[0]}"
    items = [i.type for i in streamed.new_items]
    assert items == ["tool_call_item", "tool_call_output_item", "message_output_item"], items
    assert isinstance(streamed.final_output, str) and streamed.final_output
    assert "raw_response_event" in kinds
    # Both of the loop's model calls went through kiln's /v1/responses.
    assert len(streamed.raw_responses) == 2
    assert all(r.response_id.startswith("resp_") for r in streamed.raw_responses)
    # The chained run's second call continued the first through the store, and read the
    # same conversation (the same prompt) as the run that sent it whole.
    assert second.previous_response_id == chained.raw_responses[0].response_id
    assert (chained.raw_responses[1].usage.input_tokens
            == streamed.raw_responses[1].usage.input_tokens)
    assert chained.final_output == streamed.final_output


def test_logprobs_on_the_text_and_its_deltas(client, model_id):
    kw = dict(input="Write a long story about a kiln.", max_output_tokens=6, top_logprobs=2,
              include=["message.output_text.logprobs"])
    r = create(client, model_id, **kw)
    part = r.output[-1].content[0]
    assert r.status == "incomplete" and len(part.logprobs) == r.usage.output_tokens == 6
    assert "".join(lp.token for lp in part.logprobs) == part.text
    for lp in part.logprobs:
        assert lp.logprob <= 0 and len(lp.top_logprobs) == 2
        assert lp.top_logprobs[0].logprob >= lp.top_logprobs[1].logprob
    events = list(create(client, model_id, stream=True, **kw))
    deltas = [lp for e in events if e.type == "response.output_text.delta" for lp in e.logprobs]
    done = next(e for e in events if e.type == "response.output_text.done")
    assert [lp.token for lp in deltas] == [lp.token for lp in done.logprobs]
    assert [lp.token for lp in done.logprobs] == [lp.token for lp in part.logprobs]
    # Without asking, none.
    assert create(client, model_id, max_output_tokens=2).output[-1].content[0].logprobs == []
