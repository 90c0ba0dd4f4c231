#!/usr/bin/env python3
"""Records the expected renders of the chat templates in tests/data/chat-templates/.

For each `X.jinja` there, every conversation below is rendered by the Python reference the
shared conformance corpus uses (../shared/conformance/README.md): jinja2 3.1.6 configured as
Hugging Face transformers does (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks,
loopcontrols, `tojson` = json.dumps, `raise_exception`, `strftime_now` at a fixed time), into
`X.cases.json` with the same layout (`{template, now, cases: [{name, context, output|error}]}`).
A conversation the template refuses through `raise_exception` is recorded as an error; one the
reference fails on for Python-specific reasons is left out. Contexts carry the request's
`chat_template_kwargs` (e.g. `enable_thinking`) as plain variables, as kiln passes them.

    .venv/bin/python scripts/reference/chat_template_cases.py

Needs jinja2 (tests/py/requirements.txt). tests/it/chat_templates.rs reads the result.
"""
import datetime
import json
from pathlib import Path

import jinja2
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

ROOT = Path(__file__).resolve().parents[2]
DIR = ROOT / "tests" / "data" / "chat-templates"
NOW = "2025-01-01T00:00:00"

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}
CALL = {"id": "call_1", "type": "function",
        "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}

BASE = {"bos_token": "<s>", "eos_token": "</s>"}


def conversations():
    user = [{"role": "user", "content": "Hello! What is 2+2?"}]
    system = [{"role": "system", "content": "You are terse."}] + user
    multi = system + [{"role": "assistant", "content": "4."},
                      {"role": "user", "content": "And 3+3?"}]
    thought = user + [{"role": "assistant", "content": "<think>\nAdd them.\n</think>\n\n4."},
                      {"role": "user", "content": "Thanks"}]
    tools = [{"role": "user", "content": "Weather in Paris?"},
             {"role": "assistant", "content": "", "tool_calls": [CALL]},
             {"role": "tool", "tool_call_id": "call_1", "content": "18C, sunny"}]
    phi_tools = [{"role": "system", "content": "You can call tools.",
                  "tools": json.dumps([WEATHER["function"]])}] + user
    yield "user_only", {"messages": user, "add_generation_prompt": True}
    yield "system_user", {"messages": system, "add_generation_prompt": True}
    yield "multi_turn", {"messages": multi, "add_generation_prompt": True}
    yield "no_generation_prompt", {"messages": multi, "add_generation_prompt": False}
    yield "assistant_thought", {"messages": thought, "add_generation_prompt": True}
    yield "thinking_off", {"messages": user, "add_generation_prompt": True,
                           "enable_thinking": False}
    yield "thinking_on", {"messages": user, "add_generation_prompt": True,
                          "enable_thinking": True}
    yield "thinking_flag", {"messages": user, "add_generation_prompt": True, "thinking": True}
    yield "tools", {"messages": tools, "add_generation_prompt": True, "tools": [WEATHER]}
    yield "system_tools_field", {"messages": phi_tools, "add_generation_prompt": True}
    yield "roles_not_alternating", {"messages": user + user, "add_generation_prompt": True}


def harmony_conversations():
    """gpt-oss's own fields: the analysis channel (`thinking`) beside calls and answers, its
    kwargs (`reasoning_effort`, `model_identity`), developer instructions."""
    user = [{"role": "user", "content": "Weather in Paris?"}]
    called = user + [{"role": "assistant", "content": "", "thinking": "Need the weather.",
                      "tool_calls": [CALL]},
                     {"role": "tool", "tool_call_id": "call_1", "content": "18C, sunny"}]
    answered = called + [{"role": "assistant", "content": "18C and sunny.",
                          "thinking": "Report it."},
                         {"role": "user", "content": "Thanks"}]
    yield "harmony_thinking_then_call", {"messages": called, "add_generation_prompt": True,
                                         "tools": [WEATHER]}
    yield "harmony_past_turns_drop_thinking", {"messages": answered,
                                               "add_generation_prompt": True,
                                               "tools": [WEATHER]}
    yield "harmony_training_turn", {"messages": user + [
        {"role": "assistant", "content": "Sunny.", "thinking": "Guess."}],
        "add_generation_prompt": False}
    yield "harmony_effort_and_identity", {"messages": user, "add_generation_prompt": True,
                                          "reasoning_effort": "high",
                                          "model_identity": "You are kiln's test model."}
    yield "harmony_developer", {"messages": [{"role": "developer", "content": "Be brief."}]
                                + user, "add_generation_prompt": True}


class Refused(Exception):
    pass


def environment():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[loopcontrols])

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def raise_exception(msg):
        raise Refused(msg)

    now = datetime.datetime.fromisoformat(NOW)
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: now.strftime(fmt)
    return env


def main():
    env = environment()
    for path in sorted(DIR.glob("*.jinja")):
        template = env.from_string(path.read_text())
        cases = []
        extra = harmony_conversations() if "gpt-oss" in path.name else ()
        for name, ctx in [*conversations(), *extra]:
            context = {**ctx, **BASE}
            context.setdefault("tools", None)
            try:
                cases.append({"name": name, "context": context,
                              "output": template.render(**context)})
            except Refused as e:
                cases.append({"name": name, "context": context, "error": str(e)})
            except (TypeError, jinja2.UndefinedError, AttributeError, KeyError) as e:
                print(f"{path.name} / {name}: left out ({type(e).__name__}: {e})")
        out = path.with_name(path.name.removesuffix(".jinja") + ".cases.json")
        out.write_text(json.dumps({"template": path.name, "now": NOW, "cases": cases},
                                  ensure_ascii=False, indent=1) + "\n")
        print(f"{out.name}: {len(cases)} cases")


if __name__ == "__main__":
    main()
