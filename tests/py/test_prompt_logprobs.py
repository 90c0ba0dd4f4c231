"""Prompt logprobs on /v1/completions (`echo` + `logprobs`), with the official openai client
against a real kiln server: OpenAI's legacy shape (the first prompt token's logprob null),
the request shapes lm-evaluation-harness's `local-completions` sends for loglikelihood tasks,
streaming, and agreement with the logprobs the engine reports when it generates the same
tokens (teacher forcing scores the same logits rows)."""
from __future__ import annotations

import math

import httpx2 as httpx
import pytest

PROMPT = "The capital of France is Paris. The capital of Italy is"


def tokenize(kiln, text: str) -> list[int]:
    r = httpx.post(kiln.base_url + "/tokenize", json={"prompt": text}, timeout=30)
    r.raise_for_status()
    return r.json()["tokens"]


def test_echo_scores_the_prompt_without_generating(client, kiln, model_id):
    ids = tokenize(kiln, PROMPT)
    r = client.completions.create(
        model=model_id, prompt=PROMPT, echo=True, logprobs=3, max_tokens=0, temperature=0
    )
    c = r.choices[0]
    assert c.text == PROMPT
    assert c.finish_reason == "length"
    lp = c.logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == len(ids)
    assert lp.token_logprobs[0] is None and lp.top_logprobs[0] is None
    assert "".join(lp.tokens) == PROMPT
    assert lp.text_offset[0] == 0
    assert lp.text_offset == sorted(lp.text_offset)
    for i, (l, top) in enumerate(zip(lp.token_logprobs[1:], lp.top_logprobs[1:]), 1):
        assert l <= 0.0 and math.isfinite(l), (i, l)
        assert 1 <= len(top) <= 3
        # The token's own logprob never beats the most likely one.
        assert l <= max(top.values()) + 1e-6
    # " Paris" after "The capital of France is" is what a language model expects.
    paris = lp.tokens.index(" Paris")
    assert lp.token_logprobs[paris] == max(lp.top_logprobs[paris].values())
    assert r.usage.prompt_tokens == len(ids) and r.usage.completion_tokens == 0


def test_lm_eval_loglikelihood_request_shape(client, kiln, model_id):
    """What lm-eval's local-completions sends for loglikelihood: token-id prompts in one batch,
    echo, max_tokens 1, logprobs 1, temperature 0; it reads token_logprobs[ctxlen:-1] and
    compares each with the best of top_logprobs for is_greedy."""
    ctx = tokenize(kiln, "The capital of France is")
    conts = [tokenize(kiln, " Paris."), tokenize(kiln, " a banana.")]
    r = client.completions.create(
        model=model_id,
        prompt=[ctx + c for c in conts],
        echo=True,
        max_tokens=1,
        logprobs=1,
        temperature=0,
        seed=1234,
    )
    assert len(r.choices) == 2
    scores = []
    for choice, cont in zip(sorted(r.choices, key=lambda c: c.index), conts):
        lp = choice.logprobs
        assert len(lp.token_logprobs) == len(ctx) + len(cont) + 1
        part = lp.token_logprobs[len(ctx) : -1]
        tops = lp.top_logprobs[len(ctx) : -1]
        assert all(isinstance(l, float) for l in part)
        scores.append(sum(part))
        greedy = all(l == max(t.values()) for l, t in zip(part, tops))
        scores.append(greedy)
        # The generated token's entry follows the prompt's.
        assert lp.tokens[-1] and lp.token_logprobs[-1] <= 0
    paris, paris_greedy, banana, banana_greedy = scores
    assert paris > banana
    # lm-eval compares the numbers exactly: a token that is the top one must read back equal.
    assert paris_greedy
    assert not banana_greedy


def test_prompt_logprobs_match_the_generated_ones(client, kiln, model_id):
    """Greedy generation reports each token's logprob from the logits row that predicted it;
    scoring the prompt + those tokens with echo must give the same numbers."""
    ids = tokenize(kiln, PROMPT)
    gen = client.completions.create(
        model=model_id, prompt=ids, max_tokens=6, temperature=0, logprobs=2
    )
    g = gen.choices[0].logprobs
    echoed = client.completions.create(
        model=model_id,
        prompt=ids + tokenize_ids(kiln, g.tokens, gen.choices[0].text),
        echo=True,
        logprobs=2,
        max_tokens=0,
    )
    e = echoed.choices[0].logprobs
    tail = e.token_logprobs[len(ids) :]
    assert len(tail) == len(g.token_logprobs)
    for a, b in zip(tail, g.token_logprobs):
        assert a == pytest.approx(b, abs=2e-3)
    for a, b in zip(e.top_logprobs[len(ids) :], g.top_logprobs):
        assert list(a) == list(b)


def tokenize_ids(kiln, tokens: list[str], text: str) -> list[int]:
    """The ids of the generated tokens: the text re-tokenized after the prompt must split the
    same way (checked)."""
    ids = tokenize(kiln, PROMPT + text)[len(tokenize(kiln, PROMPT)) :]
    r = httpx.post(kiln.base_url + "/detokenize", json={"tokens": ids}, timeout=30)
    assert r.json()["prompt"] == text
    assert len(ids) == len(tokens)
    return ids


def test_streamed_echo_carries_the_prompt_logprobs(client, model_id):
    whole = client.completions.create(
        model=model_id, prompt=PROMPT, echo=True, logprobs=1, max_tokens=4, temperature=0
    )
    chunks = list(
        client.completions.create(
            model=model_id,
            prompt=PROMPT,
            echo=True,
            logprobs=1,
            max_tokens=4,
            temperature=0,
            stream=True,
        )
    )
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    tokens, lps = [], []
    for c in chunks:
        if c.choices and c.choices[0].logprobs:
            tokens += c.choices[0].logprobs.tokens
            lps += c.choices[0].logprobs.token_logprobs
    assert chunks[0].choices[0].text == PROMPT
    assert text == whole.choices[0].text
    assert tokens == whole.choices[0].logprobs.tokens
    assert lps[0] is None
    assert lps == pytest.approx(whole.choices[0].logprobs.token_logprobs, abs=2e-3) or all(
        (a is None and b is None) or abs(a - b) < 2e-3
        for a, b in zip(lps, whole.choices[0].logprobs.token_logprobs)
    )


def test_max_tokens_zero_needs_echo(client, model_id):
    import openai

    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model=model_id, prompt=PROMPT, max_tokens=0)
    assert e.value.body["param"] == "max_tokens"
    # echo without logprobs and max_tokens 0: the prompt back, nothing generated.
    r = client.completions.create(model=model_id, prompt=PROMPT, max_tokens=0, echo=True)
    assert r.choices[0].text == PROMPT and r.choices[0].logprobs is None
    assert r.usage.completion_tokens == 0


def test_long_prompt_is_scored_over_several_steps(client, kiln, model_id):
    """A prompt longer than one step's logits rows (32) is scored chunk by chunk; the scores
    of its first part equal those of the first part alone."""
    text = " ".join(f"item {i}," for i in range(60))
    ids = tokenize(kiln, text)
    assert len(ids) > 100
    full = client.completions.create(
        model=model_id, prompt=ids, echo=True, logprobs=0, max_tokens=0
    ).choices[0].logprobs.token_logprobs
    head = client.completions.create(
        model=model_id, prompt=ids[:40], echo=True, logprobs=0, max_tokens=0
    ).choices[0].logprobs.token_logprobs
    assert len(full) == len(ids) and full[0] is None
    assert all(isinstance(l, float) for l in full[1:])
    for a, b in zip(full[1:40], head[1:]):
        assert a == pytest.approx(b, abs=2e-3)
