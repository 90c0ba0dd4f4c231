"""The mixture-of-experts and hybrid families served (issues 40 §6 and 41 §5): ONE `kiln serve`
holding nine random-weight proof models (kiln's synth writer: `cargo build --release
--example proof_models`, the files tests/it/arch_proof.rs holds against llama.cpp), each
written at test time in Q8_0 (the cheapest type to write) with the default model's vocabulary
and a context of 2048 (the proofs' 256 holds no tool prompt) and served under its family's
real chat template through `[[models]]`:

  olmoe, granitemoe, qwen3moe (mixtures of experts); lfm2 (short convolutions), qwen35 (gated
  DeltaNet, a thinking template), gemma4, granitehybrid (Mamba2); qwen35moe and
  granitehybrid-moe (those hybrids with a mixture of experts).

Random weights write no sense, so these tests hold the plumbing and what constrained decoding
guarantees, for every family through the official clients: a greedy whole and streamed chat
reply agree; tools offered reach the prompt; `response_format` json_schema gives JSON valid
against the schema;
`tool_choice` "required" and a named function give a parsed call with valid arguments (in the
family's own call syntax where kiln knows it: Qwen3.5's XML, LFM2's pythonic list, Gemma 4's
`call:NAME{...}`; else kiln's JSON envelope); earlier calls and their results go back to
LFM2's and Gemma 4's templates in those syntaxes; the Anthropic
Messages and OpenAI Responses routes answer. Qwen3.5's generation prompt opens `<think>`, so
its reply is `reasoning_content` unless `enable_thinking` is false; its JSON and forced tool
requests are asked with thinking on and off: on, the reply reasons freely, `</think>` comes
(forced once half of `max_tokens` is spent) and the JSON or the call (in Qwen3.5's XML call
syntax) follows. On lfm2 a system prompt shared by several
conversations is computed once (up to the last prefill chunk end within it, where the
recurrent state is kept): the prefix cache's hit counter rises and the repeats report
`cached_tokens`.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import urllib.request
from pathlib import Path

import anthropic
import jsonschema
import pytest

from conftest import PROOF_MODELS, TEST_CONFIG, client_for, start_kiln

ROOT = Path(__file__).resolve().parents[2]
SHARED = Path(os.environ.get("KILN_SHARED", ROOT.parent / "shared"))
VOCAB = ROOT / "models/SmolLM2-135M-Instruct.Q4_1.gguf"
OURS = ROOT / "tests/data/chat-templates"
CONFORMANCE = SHARED / "conformance/chat-templates"

# Each family's proof variant and its chat template.
FAMILIES = {
    "olmoe": OURS / "allenai-OLMoE-1B-7B-0125-Instruct.jinja",
    "granitemoe": OURS / "ibm-granite-granite-3.3-2B-Instruct.jinja",
    "qwen3moe": OURS / "Qwen-Qwen3-0.6B.jinja",
    "lfm2": CONFORMANCE / "LFM2-8B-A1B.jinja",
    "qwen35": CONFORMANCE / "Qwen3.5-4B.jinja",
    "gemma4": CONFORMANCE / "google-gemma-4-31B-it-interleaved.jinja",
    "granitehybrid": CONFORMANCE / "ibm-granite-granite-4.0.jinja",
    "qwen35moe": CONFORMANCE / "Qwen3.5-4B.jinja",
    "granitehybrid-moe": CONFORMANCE / "ibm-granite-granite-4.0.jinja",
}
# Families whose template opens `<think>` in the generation prompt.
THINKING = {"qwen35", "qwen35moe"}
NAMES = list(FAMILIES)
ASK = [{"role": "user", "content": "Name three rivers."}]
# Small, bounded schemas, so a reply of a few dozen tokens always closes.
CITY = {"type": "object",
        "properties": {"city": {"enum": ["Paris", "Oslo", "Lima"]},
                       "days": {"type": "integer", "minimum": 1, "maximum": 7}},
        "required": ["city", "days"], "additionalProperties": False}
ANSWER = {"type": "object",
          "properties": {"river": {"type": "string", "maxLength": 10},
                         "long": {"type": "boolean"}},
          "required": ["river", "long"], "additionalProperties": False}
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
                                      "parameters": CITY}},
    {"type": "function", "function": {"name": "book", "description": "Book a table",
                                      "parameters": {"type": "object",
                                                     "properties": {"ok": {"type": "boolean"}},
                                                     "required": ["ok"],
                                                     "additionalProperties": False}}},
]


def thinking_off(name: str) -> dict:
    """Extra body of a request with thinking turned off (for a thinking template)."""
    return {"extra_body": {"chat_template_kwargs": {"enable_thinking": False}}}


def reasoning_of(message) -> str:
    return (message.model_extra or {}).get("reasoning_content") or ""


def streamed(client, **kw) -> tuple[str, str, dict, str]:
    """A streamed reply's content, reasoning, calls (index -> [name, arguments]) and
    finish reason."""
    text, reasoning, calls, finish = "", "", {}, None
    for chunk in client.chat.completions.create(stream=True, **kw):
        for c in chunk.choices:
            text += c.delta.content or ""
            reasoning += (c.delta.model_extra or {}).get("reasoning_content") or ""
            for t in c.delta.tool_calls or []:
                call = calls.setdefault(t.index, ["", ""])
                call[0] += (t.function.name or "") if t.function else ""
                call[1] += (t.function.arguments or "") if t.function else ""
            finish = c.finish_reason or finish
    return text, reasoning, calls, finish


@pytest.fixture(scope="module")
def families(tmp_path_factory):
    """One kiln server holding every family's proof model (ids: the family names)."""
    for need, how in [(VOCAB, "`make model`"),
                      (PROOF_MODELS, "`cargo build --release --example proof_models`"),
                      *((t, "the repository or the shared conformance corpus")
                        for t in FAMILIES.values())]:
        assert need.is_file(), f"{need} is missing ({how})"
    out = tmp_path_factory.mktemp("families")
    subprocess.run([str(PROOF_MODELS), "--context", "2048", "--quant", "Q8_0", str(VOCAB),
                    str(out), "4001", *NAMES], check=True, capture_output=True)
    cfg = {section: dict(keys) for section, keys in TEST_CONFIG.items()}
    # Prompts read in chunks of 64: a model with recurrent layers keeps its state for the
    # prefix cache at each chunk's end (see test_a_shared_prefix_is_computed_once_on_a_hybrid).
    cfg["scheduler"] = {"max_batch_tokens": 64}
    cfg["models"] = []
    for name, template in FAMILIES.items():
        model = out / f"{name}.Q8_0.gguf"
        assert model.is_file(), f"proof_models wrote no {model}"
        cfg["models"].append({"path": str(model), "name": name, "chat_template": str(template),
                              "kv_cache": "32MiB"})
    server = start_kiln(None, cfg, log_dir=tmp_path_factory.mktemp("kiln-families"))
    yield server
    assert server.stop() == 0, server.log_tail()


def test_every_family_is_served(families):
    ids = {m.id for m in client_for(families.base_url).models.list().data}
    assert set(NAMES) <= ids, ids


@pytest.mark.parametrize("name", NAMES)
def test_whole_and_streamed_chat_replies_agree(families, name):
    client = client_for(families.base_url)
    kw = dict(model=name, messages=ASK, max_tokens=8, temperature=0, seed=3)
    whole = client.chat.completions.create(**kw)
    assert whole.model == name
    assert whole.usage.prompt_tokens > 5 and whole.usage.completion_tokens >= 1
    choice = whole.choices[0]
    text, reasoning, finish = "", "", None
    for chunk in client.chat.completions.create(stream=True, **kw):
        for c in chunk.choices:
            text += c.delta.content or ""
            reasoning += (c.delta.model_extra or {}).get("reasoning_content") or ""
            finish = c.finish_reason or finish
    assert finish == choice.finish_reason
    assert text == (choice.message.content or "")
    assert reasoning == ((choice.message.model_extra or {}).get("reasoning_content") or "")
    assert text or reasoning, "the greedy reply of 8 tokens is empty"


@pytest.mark.parametrize("name", NAMES)
def test_a_request_offering_tools_is_answered(families, name):
    """`tool_choice` auto: answered, and the tools reach the prompt (the family's template
    writes them, or kiln's system message describes them)."""
    client = client_for(families.base_url)
    plain = client.chat.completions.create(model=name, messages=ASK, max_tokens=2,
                                           temperature=0)
    r = client.chat.completions.create(model=name, messages=ASK, tools=TOOLS, max_tokens=4,
                                       temperature=0)
    assert r.choices[0].finish_reason in ("length", "stop", "tool_calls")
    assert r.usage.prompt_tokens > plain.usage.prompt_tokens


# Thinking families are asked with thinking on (their default) and once with it off.
STRUCTURED = [(n, True) for n in NAMES] + [(n, False) for n in sorted(THINKING)]


@pytest.mark.parametrize("name,thinking", STRUCTURED)
def test_json_schema_gives_valid_json(families, name, thinking):
    """With thinking on, the reply reasons freely (its `</think>` forced once half of
    max_tokens is spent) and the JSON follows: reasoning_content, then valid content, the
    same whole and streamed."""
    client = client_for(families.base_url)
    kw = dict(model=name, messages=ASK, max_tokens=60, temperature=0, seed=5,
              response_format={"type": "json_schema",
                               "json_schema": {"name": "river", "schema": ANSWER,
                                               "strict": True}},
              **({} if thinking else thinking_off(name)))
    r = client.chat.completions.create(**kw)
    msg = r.choices[0].message
    assert bool(reasoning_of(msg)) == (name in THINKING and thinking), msg
    jsonschema.validate(json.loads(msg.content), ANSWER)
    if name in THINKING:
        text, reasoning, _, finish = streamed(client, **kw)
        assert (text, reasoning, finish) == (msg.content, reasoning_of(msg),
                                             r.choices[0].finish_reason)


@pytest.mark.parametrize("name,thinking", STRUCTURED)
@pytest.mark.parametrize("choice", ["required", "book"])
def test_a_forced_tool_call_is_parsed_with_valid_arguments(families, name, thinking, choice):
    """A forced call in the family's own syntax (Qwen3.5: XML, LFM2: a pythonic list, Gemma 4:
    `call:NAME{...}`, their values typed by the schema), after free reasoning when thinking
    is on; the same whole and streamed."""
    client = client_for(families.base_url)
    tool_choice = choice if choice == "required" else {"type": "function",
                                                        "function": {"name": choice}}
    kw = dict(model=name, messages=[{"role": "user", "content": "Weather in Paris?"}],
              tools=TOOLS, tool_choice=tool_choice, parallel_tool_calls=False,
              max_tokens=120 if name in THINKING else 80, temperature=0, seed=7,
              **({} if thinking else thinking_off(name)))
    r = client.chat.completions.create(**kw)
    c = r.choices[0]
    assert c.finish_reason == "tool_calls", c
    assert len(c.message.tool_calls) == 1, c.message
    assert bool(reasoning_of(c.message)) == (name in THINKING and thinking), c.message
    call = c.message.tool_calls[0].function
    if choice != "required":
        assert call.name == choice
    schema = next(t["function"]["parameters"] for t in TOOLS if t["function"]["name"] == call.name)
    jsonschema.validate(json.loads(call.arguments), schema)
    if name in THINKING and choice == "book":
        _, reasoning, calls, finish = streamed(client, **kw)
        assert (reasoning, finish) == (reasoning_of(c.message), "tool_calls")
        assert calls == {0: [call.name, call.arguments]}


def test_earlier_calls_and_results_go_back_in_the_family_syntax(families):
    """An assistant's earlier call and its result, rendered as the model would have written
    and read them: LFM2's template shows no calls, so kiln writes the call into the
    assistant's text; Gemma 4's renders the result inside the calling turn (`tool_responses`,
    folded from the `tool` message as llama.cpp does). A chat request on that history is
    answered."""
    client = client_for(families.base_url)
    earlier = [{"role": "user", "content": "Weather in Paris?"},
               {"role": "assistant", "content": None, "tool_calls": [
                   {"id": "call_1", "type": "function", "function": {
                       "name": "get_weather", "arguments": json.dumps({"city": "Paris", "days": 2})}}]},
               {"role": "tool", "tool_call_id": "call_1", "content": json.dumps({"temp": 18})}]
    want = {
        "lfm2": ['<|im_start|>assistant\n<|tool_call_start|>[get_weather(city="Paris", days=2)]'
                 '<|tool_call_end|><|im_end|>',
                 '<|im_start|>tool\n<|tool_response_start|>{"temp": 18}<|tool_response_end|>'],
        "gemma4": ['<|turn>model\n<|tool_call>call:get_weather{city:<|"|>Paris<|"|>,days:2}'
                   '<tool_call|><|tool_response>response:get_weather{temp:18}<tool_response|>'],
    }
    for name, parts in want.items():
        with urllib.request.urlopen(urllib.request.Request(
                families.base_url + "/apply-template", method="POST",
                headers={"Content-Type": "application/json"},
                data=json.dumps({"model": name, "messages": earlier}).encode()), timeout=30) as r:
            rendered = json.loads(r.read())["prompt"]
        for part in parts:
            assert part in rendered, (name, rendered)
        assert "tool_calls" not in rendered and '"arguments"' not in rendered, rendered
        c = client.chat.completions.create(model=name, messages=earlier, tools=TOOLS,
                                           max_tokens=3, temperature=0).choices[0]
        assert c.finish_reason in ("length", "stop", "tool_calls"), c


@pytest.mark.parametrize("name", ["lfm2", "gemma4"])
def test_an_anthropic_tool_use_comes_from_the_family_syntax(families, name):
    """`tool_choice` {"type": "tool"} through the Anthropic client: the forced call, written in
    LFM2's or Gemma 4's syntax, comes back as a tool_use block whose input validates."""
    claude = anthropic.Anthropic(base_url=families.base_url, api_key="unused", max_retries=0,
                                 timeout=60)
    m = claude.messages.create(
        model=name, max_tokens=80, messages=[{"role": "user", "content": "Weather in Paris?"}],
        tools=[{"name": t["function"]["name"], "description": t["function"]["description"],
                "input_schema": t["function"]["parameters"]} for t in TOOLS],
        tool_choice={"type": "tool", "name": "get_weather", "disable_parallel_tool_use": True})
    assert m.stop_reason == "tool_use", m
    uses = [b for b in m.content if b.type == "tool_use"]
    assert len(uses) == 1 and uses[0].name == "get_weather", m
    jsonschema.validate(uses[0].input, CITY)


@pytest.mark.parametrize("name", NAMES)
def test_the_anthropic_messages_route_answers(families, name):
    claude = anthropic.Anthropic(base_url=families.base_url, api_key="unused", max_retries=0,
                                 timeout=60)
    m = claude.messages.create(model=name, max_tokens=6, messages=ASK)
    assert m.type == "message" and m.role == "assistant" and m.model == name
    assert m.stop_reason in ("max_tokens", "end_turn")
    # Anthropic's input_tokens leaves out what the prompt cache read.
    assert m.usage.output_tokens >= 1
    assert m.usage.input_tokens + (m.usage.cache_read_input_tokens or 0) > 5


@pytest.mark.parametrize("name", NAMES)
def test_the_responses_route_answers(families, name):
    client = client_for(families.base_url)
    r = client.responses.create(model=name, input="Name three rivers.", max_output_tokens=6,
                                temperature=0)
    assert r.status in ("completed", "incomplete")
    assert r.usage.output_tokens >= 1 and r.usage.input_tokens > 5


def test_qwen35_thinking_goes_to_reasoning_content(families):
    """The template opens `<think>`: the reply (cut by max_tokens) is reasoning; with
    `enable_thinking: false` the template closes the block and the reply is content."""
    client = client_for(families.base_url)
    kw = dict(model="qwen35", messages=ASK, max_tokens=8, temperature=0, seed=1)
    on = client.chat.completions.create(**kw).choices[0]
    assert (on.message.model_extra or {}).get("reasoning_content"), on.message
    assert not on.message.content, on.message
    off = client.chat.completions.create(
        extra_body={"chat_template_kwargs": {"enable_thinking": False}}, **kw).choices[0]
    assert off.message.content, off.message
    assert not (off.message.model_extra or {}).get("reasoning_content"), off.message


def prefix_hits(base_url: str, model: str) -> float:
    with urllib.request.urlopen(base_url + "/metrics", timeout=10) as r:
        text = r.read().decode()
    pattern = rf'^kiln_prefix_cache_hits_total\{{[^}}]*model="{model}"[^}}]*\}} (\S+)$'
    found = re.findall(pattern, text, re.M)
    assert found, f"no kiln_prefix_cache_hits_total for {model}"
    return sum(float(v) for v in found)


def test_a_shared_prefix_is_computed_once_on_a_hybrid(families):
    """lfm2 (short convolutions beside attention): a resumed prefix needs the recurrent
    state at its end as well as its K/V. The scheduler saves that state where a prefill
    chunk ends (at a block boundary), so a system prompt of ~170 tokens read in chunks of 64
    is resumed by the next conversations from its last chunk end within it (128)."""
    client = client_for(families.base_url)
    system = ("You answer questions about rivers, lakes and seas of every continent. "
              "Answer briefly, name your sources, and say when you are unsure. ") * 6
    before = prefix_hits(families.base_url, "lfm2")
    cached = []
    for q in ["Which river is longest?", "Which lake is deepest?", "Which sea is saltiest?"]:
        r = client.chat.completions.create(
            model="lfm2", messages=[{"role": "system", "content": system},
                                    {"role": "user", "content": q}],
            max_tokens=2, temperature=0)
        details = r.usage.prompt_tokens_details
        cached.append(details.cached_tokens if details else 0)
    assert all(c > 0 for c in cached[1:]), cached
    assert prefix_hits(families.base_url, "lfm2") >= before + 2
