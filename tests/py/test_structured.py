"""Structured output and tool calling (issue 11) through the official `openai` client.

Every reply sampled at temperature 1.0 under a schema must parse and validate (Python
`jsonschema`), whatever the model would have liked to say: tokens that would break the
schema are masked before sampling. Tools on the default model (SmolLM2, whose template knows
nothing of tools) go through kiln's generic JSON envelope; `tool_choice` "required" and a
named function must give calls whose arguments validate; a full round trip (call, `tool`
message, final answer) works streamed and whole. Malformed requests are 400s naming `param`.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Literal, Optional

import jsonschema
import openai
import pytest
from pydantic import BaseModel, Field

ASK = [
    {"role": "system", "content": "You are a helpful assistant. Answer in JSON."},
    {"role": "user", "content": "Describe a pottery studio and one of its members."},
]

SCHEMAS = {
    "nested": {
        "type": "object",
        "properties": {
            "studio": {
                "type": "object",
                "properties": {
                    "name": {"type": "string", "maxLength": 20},
                    "address": {
                        "type": "object",
                        "properties": {
                            "city": {"type": "string", "maxLength": 16},
                            "zip": {"type": "string", "pattern": "^[0-9]{5}$"},
                        },
                        "required": ["city", "zip"],
                        "additionalProperties": False,
                    },
                },
                "required": ["name", "address"],
                "additionalProperties": False,
            }
        },
        "required": ["studio"],
        "additionalProperties": False,
    },
    "arrays": {
        "type": "object",
        "properties": {
            "glazes": {
                "type": "array",
                "items": {"type": "string", "maxLength": 12},
                "minItems": 2,
                "maxItems": 4,
            },
            "cones": {"type": "array", "items": {"type": "integer", "minimum": 1, "maximum": 12}, "maxItems": 3},
        },
        "required": ["glazes", "cones"],
        "additionalProperties": False,
    },
    "enums": {
        "type": "object",
        "properties": {
            "clay": {"enum": ["stoneware", "porcelain", "earthenware"]},
            "firing": {"type": "string", "enum": ["oxidation", "reduction"]},
            "ready": {"type": "boolean"},
        },
        "required": ["clay", "firing", "ready"],
        "additionalProperties": False,
    },
    "numbers": {
        "type": "object",
        "properties": {
            "temperature_c": {"type": "integer", "minimum": 900, "maximum": 1300},
            "hours": {"type": "number", "minimum": 0.5, "maximum": 24},
            "shrinkage": {"type": "number", "minimum": 0.01, "exclusiveMaximum": 1},
        },
        "required": ["temperature_c", "hours", "shrinkage"],
        "additionalProperties": False,
    },
    "optional": {
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 16},
            "nickname": {"type": "string", "maxLength": 10},
            "age": {"type": "integer", "minimum": 18, "maximum": 99},
        },
        "required": ["name"],
        "additionalProperties": False,
    },
    "any_of": {
        "type": "object",
        "properties": {
            "item": {
                "anyOf": [
                    {
                        "type": "object",
                        "properties": {"kind": {"const": "mug"}, "handle": {"type": "boolean"}},
                        "required": ["kind", "handle"],
                        "additionalProperties": False,
                    },
                    {
                        "type": "object",
                        "properties": {"kind": {"const": "bowl"}, "diameter_cm": {"type": "integer", "minimum": 5, "maximum": 40}},
                        "required": ["kind", "diameter_cm"],
                        "additionalProperties": False,
                    },
                    {"type": "null"},
                ]
            }
        },
        "required": ["item"],
        "additionalProperties": False,
    },
}

SAMPLES = 12  # per schema: 3 requests of n = 4


def schema_format(name, schema):
    return {"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": True}}


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_every_sample_at_temperature_one_parses_and_validates(client, model_id, name):
    schema = SCHEMAS[name]
    jsonschema.Draft202012Validator.check_schema(schema)
    texts = []
    for seed in range(SAMPLES // 4):
        r = client.chat.completions.create(
            model=model_id,
            messages=ASK,
            temperature=1.0,
            n=4,
            seed=seed,
            max_tokens=256,
            response_format=schema_format(name, schema),
        )
        for c in r.choices:
            assert c.finish_reason == "stop", (c.finish_reason, c.message.content)
            texts.append(c.message.content)
    assert len(texts) == SAMPLES
    for t in texts:
        jsonschema.validate(json.loads(t), schema)
    # Sampling at temperature 1 explores: not every reply is the same.
    if name != "enums":
        assert len(set(texts)) > 1, texts


def test_json_object_and_completions(client, model_id):
    r = client.chat.completions.create(
        model=model_id, messages=ASK, temperature=1.0, seed=3, max_tokens=200,
        response_format={"type": "json_object"},
    )
    c = r.choices[0]
    if c.finish_reason == "stop":
        assert isinstance(json.loads(c.message.content), dict)
    else:
        assert c.finish_reason == "length"
    schema = SCHEMAS["enums"]
    r = client.completions.create(
        model=model_id, prompt="A kiln log entry in JSON:", temperature=1.0, seed=1,
        max_tokens=64, extra_body={"response_format": schema_format("e", schema)},
    )
    assert r.choices[0].finish_reason == "stop"
    jsonschema.validate(json.loads(r.choices[0].text), schema)


def test_streamed_schema_output_equals_the_whole_one(client, model_id):
    kw = dict(model=model_id, messages=ASK, temperature=1.0, seed=9, max_tokens=200,
              response_format=schema_format("n", SCHEMAS["nested"]))
    whole = client.chat.completions.create(**kw).choices[0].message.content
    streamed = "".join(
        ch.choices[0].delta.content or ""
        for ch in client.chat.completions.create(stream=True, **kw)
        if ch.choices
    )
    assert streamed == whole
    jsonschema.validate(json.loads(whole), SCHEMAS["nested"])


def test_max_tokens_cuts_short_with_length(client, model_id):
    r = client.chat.completions.create(
        model=model_id, messages=ASK, temperature=1.0, seed=1, max_tokens=5,
        response_format=schema_format("n", SCHEMAS["nested"]),
    )
    assert r.choices[0].finish_reason == "length"


class Address(BaseModel):
    city: str = Field(max_length=16)
    zip_code: str = Field(pattern=r"^[0-9]{5}$")


class Member(BaseModel):
    name: str = Field(max_length=20)
    role: Literal["owner", "teacher", "student"]
    years: int = Field(ge=0, le=50)
    address: Address
    nickname: Optional[str] = Field(max_length=10)
    skills: list[Annotated[str, Field(max_length=12)]] = Field(max_length=3)


def test_parse_with_a_pydantic_model(client, model_id):
    for seed in range(3):
        r = client.chat.completions.parse(
            model=model_id, messages=ASK, temperature=1.0, seed=seed, max_tokens=256,
            response_format=Member,
        )
        m = r.choices[0].message.parsed
        assert isinstance(m, Member), r.choices[0].message.content
        assert 0 <= m.years <= 50 and len(m.skills) <= 3


WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "maxLength": 24},
                "unit": {"enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city", "unit"],
            "additionalProperties": False,
        },
    },
}
FIRING = {
    "type": "function",
    "function": {
        "name": "schedule_firing",
        "description": "Book the kiln.",
        "parameters": {
            "type": "object",
            "properties": {
                "cone": {"type": "integer", "minimum": 1, "maximum": 12},
                "hours": {"type": "integer", "minimum": 1, "maximum": 24},
            },
            "required": ["cone", "hours"],
            "additionalProperties": False,
        },
    },
}
TOOLS = [WEATHER, FIRING]
ASK_WEATHER = [{"role": "user", "content": "What is the weather like in Paris today?"}]
SCHEMA_OF = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}


def check_calls(calls, names, cut=False):
    """Calls of `names` whose arguments validate; `cut` (finish_reason "length"): the last
    one may be partial, as far as max_tokens let it get."""
    assert calls, "no tool calls"
    for i, c in enumerate(calls):
        assert c.type == "function" and c.id.startswith("call_")
        assert c.function.name in names
        if cut and i == len(calls) - 1:
            continue
        jsonschema.validate(json.loads(c.function.arguments), SCHEMA_OF[c.function.name])


@pytest.mark.parametrize("choice", ["required", "named"])
def test_required_and_named_tool_choice_give_valid_calls(client, model_id, choice):
    tool_choice = "required" if choice == "required" else {"type": "function", "function": {"name": "schedule_firing"}}
    names = {"get_weather", "schedule_firing"} if choice == "required" else {"schedule_firing"}
    for seed in range(4):
        r = client.chat.completions.create(
            model=model_id, messages=ASK_WEATHER, tools=TOOLS, tool_choice=tool_choice,
            temperature=1.0, seed=seed, max_tokens=256,
        )
        c = r.choices[0]
        assert c.finish_reason == "tool_calls", c.message
        assert c.message.content is None
        check_calls(c.message.tool_calls, names)


def test_parallel_tool_calls_false_gives_one_call(client, model_id):
    for seed in range(3):
        r = client.chat.completions.create(
            model=model_id, messages=ASK_WEATHER, tools=TOOLS, tool_choice="required",
            parallel_tool_calls=False, temperature=1.0, seed=seed, max_tokens=200,
        )
        assert len(r.choices[0].message.tool_calls) == 1


def stream_reply(client, **kw):
    """A streamed reply accumulated as clients do: content, and calls joined by index. Checks
    OpenAI's delta shapes on the way."""
    content, calls, finish = "", {}, None
    for ch in client.chat.completions.create(stream=True, **kw):
        if not ch.choices:
            continue
        ch0 = ch.choices[0]
        d = ch0.delta
        content += d.content or ""
        for tc in d.tool_calls or []:
            if tc.index not in calls:
                # The header: id, type and name, with empty arguments.
                assert tc.id and tc.id.startswith("call_") and tc.type == "function"
                assert tc.function.name and tc.function.arguments == ""
                calls[tc.index] = {"id": tc.id, "name": tc.function.name, "arguments": ""}
            else:
                assert tc.id is None and tc.function.name is None
                calls[tc.index]["arguments"] += tc.function.arguments or ""
        if ch0.finish_reason:
            assert not d.content and not d.tool_calls
            finish = ch0.finish_reason
    return content, [calls[i] for i in sorted(calls)], finish


@pytest.mark.parametrize("stream", [False, True])
def test_tool_round_trip(client, model_id, stream):
    base = dict(model=model_id, tools=TOOLS, temperature=0.0, max_tokens=200)
    messages = list(ASK_WEATHER)
    if stream:
        content, calls, finish = stream_reply(client, messages=messages, tool_choice="required", **base)
        assert finish == "tool_calls" and calls
        for c in calls:
            jsonschema.validate(json.loads(c["arguments"]), SCHEMA_OF[c["name"]])
        whole = client.chat.completions.create(messages=messages, tool_choice="required", **base)
        got = [(c.function.name, c.function.arguments) for c in whole.choices[0].message.tool_calls]
        assert got == [(c["name"], c["arguments"]) for c in calls]
        call_msgs = [{"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}} for c in calls]
    else:
        r = client.chat.completions.create(messages=messages, tool_choice="required", **base)
        assert r.choices[0].finish_reason == "tool_calls"
        check_calls(r.choices[0].message.tool_calls, set(SCHEMA_OF))
        call_msgs = [c.model_dump() for c in r.choices[0].message.tool_calls]
    messages.append({"role": "assistant", "content": None, "tool_calls": call_msgs})
    for c in call_msgs:
        messages.append({"role": "tool", "tool_call_id": c["id"], "content": json.dumps({"temperature": 18, "sky": "sunny"})})
    # The final answer: tool_choice "none" answers in plain text; "auto" lets the model
    # choose, and either way the reply is well formed.
    if stream:
        content, calls, finish = stream_reply(client, messages=messages, tool_choice="none", **base)
        assert finish in ("stop", "length") and content and not calls
        content, calls, finish = stream_reply(client, messages=messages, tool_choice="auto", **base)
        assert finish in ("stop", "tool_calls")
        assert bool(calls) == (finish == "tool_calls") and (content or calls)
    else:
        r = client.chat.completions.create(messages=messages, tool_choice="none", **base)
        assert r.choices[0].message.content and not r.choices[0].message.tool_calls
        r = client.chat.completions.create(messages=messages, tool_choice="auto", **base)
        c = r.choices[0]
        if c.finish_reason == "tool_calls":
            check_calls(c.message.tool_calls, set(SCHEMA_OF))
        else:
            assert c.finish_reason == "stop" and c.message.content and not c.message.tool_calls


def test_auto_answers_or_calls_validly(client, model_id):
    kinds = set()
    for seed in range(6):
        q = ["What is the weather in Rome?", "Say hello."][seed % 2]
        r = client.chat.completions.create(
            model=model_id, messages=[{"role": "user", "content": q}], tools=TOOLS,
            temperature=1.0, seed=seed, max_tokens=256,
        )
        c = r.choices[0]
        # At temperature 1 a reply may run to max_tokens (a long answer, or up to 8 calls):
        # every call returned is still whole and valid.
        assert c.finish_reason in ("tool_calls", "stop", "length"), c
        if c.message.tool_calls:
            check_calls(c.message.tool_calls, set(SCHEMA_OF), cut=c.finish_reason == "length")
            assert c.finish_reason in ("tool_calls", "length")
            kinds.add("call")
        else:
            assert c.finish_reason in ("stop", "length")
            assert isinstance(c.message.content, str)
            kinds.add("answer")
    assert kinds


ANSWER_SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string", "maxLength": 20}, "sunny": {"type": "boolean"}},
    "required": ["city", "sunny"],
    "additionalProperties": False,
}


def check_answer_or_calls(content, calls, finish):
    """With tools and response_format: calls that validate, or content that is JSON valid
    against ANSWER_SCHEMA (unless max_tokens cut it short)."""
    if calls:
        for name, arguments in calls:
            jsonschema.validate(json.loads(arguments), SCHEMA_OF[name])
        assert finish in ("tool_calls", "length")
        return "call"
    assert finish in ("stop", "length")
    if finish == "stop":
        jsonschema.validate(json.loads(content), ANSWER_SCHEMA)
    return "answer"


@pytest.mark.parametrize("stream", [False, True])
def test_tools_with_response_format(client, model_id, stream):
    kinds = set()
    for seed in range(6):
        kw = dict(model=model_id, messages=ASK_WEATHER, tools=TOOLS, temperature=1.0, seed=seed,
                  max_tokens=200, response_format=schema_format("answer", ANSWER_SCHEMA))
        if stream:
            content, calls, finish = stream_reply(client, **kw)
            calls = [(c["name"], c["arguments"]) for c in calls]
        else:
            c = client.chat.completions.create(**kw).choices[0]
            content, finish = c.message.content, c.finish_reason
            calls = [(t.function.name, t.function.arguments) for t in c.message.tool_calls or []]
        kinds.add(check_answer_or_calls(content, calls, finish))
    assert kinds
    # tool_choice "none": the answer alone, in the schema.
    r = client.chat.completions.create(
        model=model_id, messages=ASK_WEATHER, tools=TOOLS, tool_choice="none", temperature=1.0,
        seed=1, max_tokens=200, response_format=schema_format("answer", ANSWER_SCHEMA))
    assert r.choices[0].finish_reason == "stop" and not r.choices[0].message.tool_calls
    jsonschema.validate(json.loads(r.choices[0].message.content), ANSWER_SCHEMA)
    # The format's schema is checked with the tools, and a fault names its field.
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(
            model=model_id, messages=ASK_WEATHER, tools=TOOLS, max_tokens=8,
            response_format=schema_format("x", {"type": "object", "if": {"required": ["a"]},
                                                "then": {"required": ["b"]}}))
    assert e.value.body["param"] == "response_format.json_schema.schema"


def bad(client, model_id, **kw):
    kw.setdefault("messages", ASK)
    kw.setdefault("max_tokens", 8)
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=model_id, **kw)
    err = e.value.body
    assert isinstance(err, dict) and err.get("param"), e.value.body
    return err


def test_unsupported_schema_features_and_malformed_tools_are_400s(client, model_id):
    err = bad(client, model_id, response_format=schema_format("x", {
        "type": "object", "properties": {"a": {"type": "string"}},
        "if": {"required": ["a"]}, "then": {"required": ["b"]}}))
    assert err["param"] == "response_format.json_schema.schema"
    assert "if" in err["message"] and "then" in err["message"]
    # A range llguidance 1.9 cannot enforce exactly is refused, not loosened.
    err = bad(client, model_id, response_format=schema_format("x", {
        "type": "object", "properties": {"s": {"type": "number", "exclusiveMinimum": 0, "maximum": 0.5}}}))
    assert err["param"] == "response_format.json_schema.schema" and "/properties/s" in err["message"]
    err = bad(client, model_id, response_format={"type": "json_schema", "json_schema": {"name": "x"}})
    assert err["param"] == "response_format.json_schema.schema"
    err = bad(client, model_id, response_format={"type": "xml"})
    assert err["param"].startswith("response_format")
    err = bad(client, model_id, tools=[{"type": "retrieval", "function": {"name": "f"}}])
    assert err["param"] == "tools[0].type"
    err = bad(client, model_id, tools=[{"type": "function", "function": {"name": "bad name!"}}])
    assert err["param"] == "tools[0].function.name"
    err = bad(client, model_id, tools=[WEATHER, {"type": "function", "function": {"name": "f", "parameters": "nope"}}])
    assert err["param"] == "tools[1].function.parameters"
    err = bad(client, model_id, tools=[{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"a": {"type": "array", "uniqueItems": True}}}}}])
    assert err["param"] == "tools[0].function.parameters"
    err = bad(client, model_id, tools=TOOLS, tool_choice={"type": "function", "function": {"name": "nope"}})
    assert err["param"] == "tool_choice.function.name"
    err = bad(client, model_id, tools=TOOLS, tool_choice="sometimes")
    assert err["param"] == "tool_choice"
    err = bad(client, model_id, tool_choice="required")
    assert err["param"] == "tool_choice"
    err = bad(client, model_id, tools=[{"type": "function"}])
    assert err["param"].startswith("tools")


def template_server(tmp_path_factory, template_name):
    """A kiln serving the default model under a conformance chat template (its tool syntax):
    the tiny model does not know the syntax, so only forced calls are meaningful there."""
    from conftest import ROOT, TEST_CONFIG, client_for, start_kiln  # noqa: F401
    import os
    shared = Path(os.environ.get("KILN_SHARED", ROOT.parent / "shared"))
    template = shared / "conformance/chat-templates" / template_name
    assert template.is_file(), f"{template} is missing (set KILN_SHARED)"
    cfg = {section: dict(keys) for section, keys in TEST_CONFIG.items()}
    cfg["model"] = {"chat_template": str(template)}
    server = start_kiln(config=cfg, log_dir=tmp_path_factory.mktemp("kiln-template"))
    return server, client_for(server.base_url)


@pytest.fixture(scope="module")
def hermes_client(tmp_path_factory):
    """Qwen2.5's chat template: the Hermes syntax (`<tool_call>...</tool_call>`)."""
    server, client = template_server(tmp_path_factory, "Qwen-Qwen2.5-7B-Instruct.jinja")
    yield client
    assert server.stop() == 0, server.log_tail()


@pytest.fixture(scope="module")
def llama3_client(tmp_path_factory):
    """Llama 3.3's chat template: a call is the reply's one JSON object."""
    server, client = template_server(tmp_path_factory, "meta-llama-Llama-3.3-70B-Instruct.jinja")
    yield client
    assert server.stop() == 0, server.log_tail()


def test_native_hermes_syntax_forced_calls_whole_and_streamed(hermes_client):
    kw = dict(model="SmolLM2-135M-Instruct.Q4_1", messages=ASK_WEATHER, tools=TOOLS,
              temperature=1.0, max_tokens=256)
    for seed in range(3):
        one = dict(tool_choice="required", parallel_tool_calls=False, seed=seed)
        r = hermes_client.chat.completions.create(**one, **kw)
        c = r.choices[0]
        assert c.finish_reason == "tool_calls", c
        assert not c.message.content  # the <tool_call> tags never show
        check_calls(c.message.tool_calls, set(SCHEMA_OF))
        content, calls, finish = stream_reply(hermes_client, **one, **kw)
        assert finish == "tool_calls" and not content.strip()
        assert [(x["name"], x["arguments"]) for x in calls] == [
            (t.function.name, t.function.arguments) for t in c.message.tool_calls]
    r = hermes_client.chat.completions.create(
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
        parallel_tool_calls=False, seed=1, **kw)
    assert [t.function.name for t in r.choices[0].message.tool_calls] == ["get_weather"]
    # Parallel calls (up to 8): a small model at temperature 1 may use them all and run into
    # max_tokens; every call returned is whole and valid either way.
    r = hermes_client.chat.completions.create(tool_choice="required", seed=4, **kw)
    assert r.choices[0].finish_reason in ("tool_calls", "length")
    check_calls(r.choices[0].message.tool_calls, set(SCHEMA_OF),
                cut=r.choices[0].finish_reason == "length")


def test_native_hermes_auto_answers_or_calls_validly(hermes_client):
    """`auto` in Hermes syntax: free text, or calls whose arguments validate from the
    `<tool_call>` tag on (the tiny model rarely starts one unprompted, so response_format,
    which leaves it only JSON or calls, is exercised too)."""
    kw = dict(model="SmolLM2-135M-Instruct.Q4_1", messages=ASK_WEATHER, tools=TOOLS,
              temperature=1.0, max_tokens=160)
    for seed in range(4):
        c = hermes_client.chat.completions.create(seed=seed, **kw).choices[0]
        assert c.finish_reason in ("stop", "length", "tool_calls"), c
        assert "<tool_call>" not in (c.message.content or "")
        if c.message.tool_calls:
            check_calls(c.message.tool_calls, set(SCHEMA_OF))
        content, calls, finish = stream_reply(
            hermes_client, seed=seed, response_format=schema_format("a", ANSWER_SCHEMA), **kw)
        check_answer_or_calls(content, [(x["name"], x["arguments"]) for x in calls], finish)


# Cases ported from llama.cpp's server tests (tools/server/tests/unit/test_tool_call.py: its
# PYTHON_TOOL and TEST_TOOL, the coding-assistant prompt, tool_choice "required" with
# parallel_tool_calls false), pointed at kiln with max_tokens cutting the call short.
PYTHON_TOOL = {
    "type": "function",
    "function": {
        "name": "python",
        "description": "Runs code in an ipython interpreter and returns the result of the execution after 60 seconds.",
        "parameters": {
            "type": "object",
            "properties": {"code": {"type": "string", "description": "The code to run in the ipython interpreter."}},
            "required": ["code"],
        },
    },
}
TEST_TOOL = {
    "type": "function",
    "function": {
        "name": "test",
        "description": "",
        "parameters": {
            "type": "object",
            "properties": {"success": {"type": "boolean", "const": True}},
            "required": ["success"],
        },
    },
}
CODING = [
    {"role": "system", "content": "You are a coding assistant."},
    {"role": "user", "content": "Write an example"},
]
FORMAT_CLIENTS = {"generic": "client", "hermes": "hermes_client", "llama3": "llama3_client"}


@pytest.mark.parametrize("fmt", sorted(FORMAT_CLIENTS))
def test_a_required_call_cut_short_is_a_partial_call_whole_and_streamed(request, fmt):
    """Issue 21: a reply max_tokens cuts inside a required call is the partial call in
    `tool_calls` with finish_reason "length", never call syntax in `content`, and the streamed
    reply says exactly what the whole one says (greedy, so each cut is a prefix of the full
    call)."""
    cl = request.getfixturevalue(FORMAT_CLIENTS[fmt])
    kw = dict(model="SmolLM2-135M-Instruct.Q4_1", messages=CODING, tool_choice="required",
              parallel_tool_calls=False, temperature=0.0)
    full = cl.chat.completions.create(tools=[TEST_TOOL], max_tokens=64, **kw).choices[0]
    assert full.finish_reason == "tool_calls" and not full.message.content, full
    # TEST_TOOL allows other keys beside `success` (it does not forbid them).
    assert [(t.function.name, json.loads(t.function.arguments)["success"])
            for t in full.message.tool_calls] == [("test", True)]
    r = cl.chat.completions.create(tools=[PYTHON_TOOL], max_tokens=256, **kw)
    whole_args = r.choices[0].message.tool_calls[0].function.arguments if r.choices[0].message.tool_calls else ""
    n = r.usage.completion_tokens
    partial = 0
    for max_tokens in sorted({1, 2, 4, 8, 12, 16, 20, 24, 32, 48, 64, n - 1} - {0}):
        if max_tokens >= n:
            continue
        c = cl.chat.completions.create(tools=[PYTHON_TOOL], max_tokens=max_tokens, **kw).choices[0]
        assert c.finish_reason == "length", c
        assert not c.message.content, f"call syntax as content at max_tokens={max_tokens}: {c.message}"
        got = [(t.function.name, t.function.arguments) for t in c.message.tool_calls or []]
        content, calls, finish = stream_reply(cl, tools=[PYTHON_TOOL], max_tokens=max_tokens, **kw)
        assert (finish, content) == ("length", ""), (max_tokens, content)
        assert [(x["name"], x["arguments"]) for x in calls] == got, max_tokens
        if got:
            assert len(got) == 1 and got[0][0] == "python"
            assert whole_args.startswith(got[0][1]), (got, whole_args)
            partial += 1
    assert partial >= 3, "max_tokens never cut inside the call's arguments"


def test_hermes_closing_tag_inside_a_string_is_part_of_the_string(hermes_client):
    code = "print('</tool_call>')\n# done"
    tool = {"type": "function", "function": {"name": "python", "parameters": {
        "type": "object", "properties": {"code": {"const": code}}, "required": ["code"],
        "additionalProperties": False}}}
    kw = dict(model="SmolLM2-135M-Instruct.Q4_1", messages=CODING, tools=[tool],
              tool_choice="required", parallel_tool_calls=False, temperature=1.0, seed=3,
              max_tokens=128)
    c = hermes_client.chat.completions.create(**kw).choices[0]
    assert c.finish_reason == "tool_calls" and not c.message.content, c
    assert json.loads(c.message.tool_calls[0].function.arguments) == {"code": code}
    content, calls, finish = stream_reply(hermes_client, **kw)
    assert (finish, content) == ("tool_calls", "")
    assert [(x["name"], json.loads(x["arguments"])) for x in calls] == [("python", {"code": code})]
