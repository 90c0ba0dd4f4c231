"""The official `openai` Python client against a real kiln (issue 8, section 5).

Everything goes through the client's own types, so a response that does not parse as
OpenAI's shape fails here exactly as it would for a user of the client. Greedy requests
(temperature 0) are deterministic, which the stop-string and stream-vs-whole tests rely on.
"""
from __future__ import annotations

import concurrent.futures
import re
import time

import openai
import pytest

from conftest import client_for, config, start_kiln

CHAT = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "Tell me a short story about a potter and a kiln."},
]
PROMPT = "The potter opened the kiln and saw"


def chat(client, model_id, **kw):
    kw.setdefault("messages", CHAT)
    kw.setdefault("max_tokens", 24)
    return client.chat.completions.create(model=model_id, **kw)


def stream_chunks(client, model_id, **kw):
    """Every chunk of a streamed chat completion, as a list."""
    return list(chat(client, model_id, stream=True, **kw))


# --- success paths ------------------------------------------------------------------------


def test_models_list_the_served_model(client, model_id):
    assert model_id == "SmolLM2-135M-Instruct.Q4_1"
    assert client.models.retrieve(model_id).id == model_id


def test_chat_completion(client, model_id):
    r = chat(client, model_id, temperature=0)
    assert r.object == "chat.completion"
    assert r.id.startswith("chatcmpl-")
    assert r.model == model_id
    assert r.system_fingerprint
    assert len(r.choices) == 1
    c = r.choices[0]
    assert c.index == 0
    assert c.message.role == "assistant"
    assert isinstance(c.message.content, str) and c.message.content
    assert c.finish_reason in ("stop", "length")
    u = r.usage
    assert u.prompt_tokens > 0 and 0 < u.completion_tokens <= 24
    assert u.total_tokens == u.prompt_tokens + u.completion_tokens


def test_completion(client, model_id):
    r = client.completions.create(model=model_id, prompt=PROMPT, max_tokens=16, temperature=0)
    assert r.object == "text_completion"
    assert r.id.startswith("cmpl-")
    assert len(r.choices) == 1 and r.choices[0].text
    assert r.choices[0].finish_reason in ("stop", "length")
    assert r.usage.completion_tokens <= 16


def test_chat_stream_shape_and_text_match_non_stream(client, model_id):
    whole = chat(client, model_id, temperature=0).choices[0]
    chunks = stream_chunks(client, model_id, temperature=0)
    assert chunks, "no chunk"
    # The first chunk carries the role; every chunk the same id and object.
    assert chunks[0].choices[0].delta.role == "assistant"
    assert {c.id for c in chunks} == {chunks[0].id}
    assert chunks[0].id.startswith("chatcmpl-")
    assert all(c.object == "chat.completion.chunk" for c in chunks)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes == [whole.finish_reason], "exactly one chunk ends the choice"
    assert chunks[-1].choices[0].finish_reason, "the finish chunk is the last without usage"
    assert text == whole.message.content


def test_completion_stream_matches_non_stream(client, model_id):
    kw = dict(model=model_id, prompt=PROMPT, max_tokens=16, temperature=0)
    whole = client.completions.create(**kw).choices[0].text
    chunks = list(client.completions.create(stream=True, **kw))
    assert {c.id for c in chunks} == {chunks[0].id}
    assert "".join(c.choices[0].text for c in chunks if c.choices) == whole


def test_n_2(client, model_id):
    r = chat(client, model_id, n=2, temperature=1.0, seed=7)
    assert [c.index for c in r.choices] == [0, 1]
    assert all(c.message.content for c in r.choices)
    # usage counts both choices.
    assert r.usage.completion_tokens <= 2 * 24
    # Streamed, both indices appear and each gets its own finish chunk.
    chunks = stream_chunks(client, model_id, n=2, temperature=1.0, seed=7)
    finished = sorted(c.choices[0].index for c in chunks if c.choices and c.choices[0].finish_reason)
    assert finished == [0, 1]


def test_chat_logprobs_shape(client, model_id):
    r = chat(client, model_id, temperature=0, logprobs=True, top_logprobs=3)
    c = r.choices[0]
    content = c.logprobs.content
    assert content, "no logprob entries"
    # An end-of-generation token is counted in usage but not shown.
    assert len(content) in (r.usage.completion_tokens, r.usage.completion_tokens - 1)
    assert "".join(e.token for e in content) == c.message.content
    for e in content:
        assert e.logprob <= 0.0
        assert e.bytes is not None and bytes(e.bytes).decode("utf-8", "replace")
        assert len(e.top_logprobs) == 3
        tops = [t.logprob for t in e.top_logprobs]
        assert all(t <= 0.0 for t in tops)
        assert tops == sorted(tops, reverse=True), "top_logprobs most likely first"
        assert all(t.bytes is not None for t in e.top_logprobs)
        # Greedy: the chosen token is the most likely one.
        assert e.logprob == pytest.approx(tops[0], abs=1e-4)


def test_completion_logprobs_shape(client, model_id):
    r = client.completions.create(model=model_id, prompt=PROMPT, max_tokens=8, temperature=0, logprobs=2)
    lp = r.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == len(lp.text_offset)
    assert "".join(lp.tokens) == r.choices[0].text
    assert all(x <= 0.0 for x in lp.token_logprobs)
    assert all(len(t) <= 2 and all(v <= 0.0 for v in t.values()) for t in lp.top_logprobs)


def test_seed_reproduces_sampled_text(client, model_id):
    kw = dict(temperature=0.9, max_tokens=32)
    a = chat(client, model_id, seed=1234, **kw).choices[0].message.content
    b = chat(client, model_id, seed=1234, **kw).choices[0].message.content
    assert a == b, "the same seed must give the same text"
    # ...and the seed matters: over a few other seeds at least one text differs.
    others = {chat(client, model_id, seed=s, **kw).choices[0].message.content for s in (1, 2, 3)}
    assert others != {a}


def test_multi_token_stop_string_while_streaming(client, model_id):
    # Greedy text, with its tokens; take three consecutive tokens from its middle as the stop
    # string, so the stop string spans several tokens and has to be held back while it matches.
    r = chat(client, model_id, temperature=0, max_tokens=40, logprobs=True)
    tokens = [e.token for e in r.choices[0].logprobs.content]
    full = r.choices[0].message.content
    assert len(tokens) >= 12, f"too short a text to cut: {full!r}"
    stop = "".join(tokens[8:11])
    assert len(stop.strip()) >= 2, f"stop string {stop!r} too thin"
    expected = full[: full.find(stop)]
    chunks = stream_chunks(client, model_id, temperature=0, max_tokens=40, stop=[stop, "never-seen-xyz"])
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == expected
    assert stop not in text
    assert chunks[-1].choices[0].finish_reason == "stop"


def test_stream_include_usage(client, model_id):
    chunks = stream_chunks(client, model_id, temperature=0, stream_options={"include_usage": True})
    last = chunks[-1]
    assert last.choices == []
    assert last.usage is not None and last.usage.completion_tokens > 0
    assert last.usage.total_tokens == last.usage.prompt_tokens + last.usage.completion_tokens
    assert all(c.usage is None for c in chunks[:-1])
    # Without the option, no chunk has usage.
    assert all(c.usage is None for c in stream_chunks(client, model_id, temperature=0))


# --- errors as the client's exception classes ---------------------------------------------


def test_bad_parameter_is_bad_request_naming_the_param(client, model_id):
    with pytest.raises(openai.BadRequestError) as e:
        chat(client, model_id, temperature=5)
    assert e.value.status_code == 400
    assert e.value.param == "temperature"
    assert e.value.type == "invalid_request_error"
    with pytest.raises(openai.BadRequestError) as e:
        chat(client, model_id, top_logprobs=21, logprobs=True)
    assert e.value.param == "top_logprobs"


def test_context_length_exceeded(client, model_id):
    # Far more tokens than the model's context (8192 for the default model).
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model=model_id, prompt="kiln " * 20000, max_tokens=4)
    assert e.value.code == "context_length_exceeded"
    assert e.value.param == "prompt"
    # OpenAI's words: LiteLLM and LangChain classify the error by this text.
    assert re.fullmatch(
        r"This model's maximum context length is 8192 tokens\. However, your prompt resulted "
        r"in \d+ tokens\. Please reduce the length of the prompt\.",
        e.value.body["message"],
    ), e.value.body
    # A prompt that fits, with a completion that does not.
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model=model_id, prompt=[1] * 8000, max_tokens=200)
    assert e.value.code == "context_length_exceeded"
    assert e.value.body["message"] == (
        "This model's maximum context length is 8192 tokens. However, you requested 8200 "
        "tokens (8000 in the prompt, 200 in the completion). Please reduce the length of the "
        "prompt or completion."
    ), e.value.body


def test_api_key(model_path, model_id, tmp_path):
    with start_kiln(model_path, config(), env={"KILN_API_KEYS": "sk-test-1,sk-test-2"},
                    log_dir=tmp_path) as server:
        with pytest.raises(openai.AuthenticationError) as e:
            client_for(server.base_url, api_key="sk-wrong").models.list()
        assert e.value.status_code == 401
        good = client_for(server.base_url, api_key="sk-test-2")
        assert good.models.list().data
        assert chat(good, model_id, max_tokens=2).choices[0].message.content is not None


def test_queue_full_is_rate_limit_error(model_path, model_id, tmp_path):
    # One sequence running, one waiting: of 10 simultaneous requests most must get 429 at once.
    cfg = config(scheduler={"max_num_seqs": 1, "max_waiting": 1})
    with start_kiln(model_path, cfg, log_dir=tmp_path) as server:
        client = client_for(server.base_url, timeout=60)

        def one(_):
            try:
                chat(client, model_id, max_tokens=48, temperature=0.7, extra_body={"ignore_eos": True})
                return "ok"
            except openai.RateLimitError as e:
                assert e.status_code == 429
                assert e.response.headers.get("retry-after"), "429 without Retry-After"
                return "429"

        t0 = time.monotonic()
        with concurrent.futures.ThreadPoolExecutor(max_workers=10) as pool:
            results = list(pool.map(one, range(10)))
        assert time.monotonic() - t0 < 60
        assert results.count("429") >= 1, results
        assert results.count("ok") >= 1, results
