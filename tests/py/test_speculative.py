"""Speculative decoding through the official client: replies are identical with it on (the
default, `[speculative] method = "ngram"`) and off (`--speculative off`), greedy with logprobs
and seeded sampling, streamed or not; the Prometheus counters and the usage count the guesses;
llama-server's per-request `speculative.n_max` is read and checked."""
from __future__ import annotations

import re
import urllib.request

import openai
import pytest

from conftest import client_for, config
from servers import start_kiln

DOCUMENT = (
    "The kiln was fired at dawn. Its walls were brick, its door was iron, and its chimney rose "
    "twelve feet above the yard. Potters loaded bowls, cups and tiles on the shelves, closed the "
    "door, and fed the fire with oak for nine hours."
)
PROMPTS = [
    f"Repeat this text exactly:\n\n{DOCUMENT}",
    "Reformat this JSON with 2 spaces of indentation:\n\n"
    '{"name":"Ada","roles":["admin","dev"],"settings":{"theme":"dark","language":"en"}}',
    "Write a haiku about a kiln.",
]


def counters(base_url: str) -> dict[str, float]:
    """The speculative-decoding counters of /metrics, summed over their labels."""
    text = urllib.request.urlopen(base_url + "/metrics", timeout=10).read().decode()
    out = {}
    for name in ("kiln_spec_draft_tokens_total", "kiln_spec_accepted_tokens_total"):
        values = re.findall(rf"^{name}{{[^}}]*}} (\S+)$", text, re.M)
        assert values, f"{name} missing from /metrics"
        out[name] = sum(float(v) for v in values)
    return out


def replies(client, model_id) -> list:
    """Every prompt greedy with logprobs, then seeded at temperature 0.8 (n=2), then streamed."""
    out = []
    for p in PROMPTS:
        msgs = [{"role": "user", "content": p}]
        r = client.chat.completions.create(model=model_id, messages=msgs, max_tokens=120,
                                           temperature=0, logprobs=True, top_logprobs=2)
        c = r.choices[0]
        out.append((c.message.content, c.finish_reason,
                    [(t.token, t.logprob, [(a.token, a.logprob) for a in t.top_logprobs])
                     for t in c.logprobs.content], r.usage.completion_tokens))
        r = client.chat.completions.create(model=model_id, messages=msgs, max_tokens=100,
                                           temperature=0.8, seed=7, n=2,
                                           frequency_penalty=0.3)
        out.append([(c.message.content, c.finish_reason) for c in r.choices])
        stream = client.chat.completions.create(model=model_id, messages=msgs, max_tokens=80,
                                                temperature=0, stream=True, stop=["oak"])
        out.append("".join(ch.choices[0].delta.content or "" for ch in stream if ch.choices))
    return out


def test_replies_are_identical_with_and_without_speculation(kiln, client, model_id, model_path,
                                                            tmp_path):
    before = counters(kiln.base_url)
    on = replies(client, model_id)
    after = counters(kiln.base_url)
    drafted = after["kiln_spec_draft_tokens_total"] - before["kiln_spec_draft_tokens_total"]
    accepted = after["kiln_spec_accepted_tokens_total"] - before["kiln_spec_accepted_tokens_total"]
    # The copying prompts really are copied from guesses, and some guesses fail.
    assert accepted >= 50, (drafted, accepted)
    assert drafted > accepted, (drafted, accepted)
    with start_kiln(model_path, config(), args=["--speculative", "off"], log_dir=tmp_path) as off:
        off_client = client_for(off.base_url)
        assert replies(off_client, model_id) == on
        assert counters(off.base_url) == {
            "kiln_spec_draft_tokens_total": 0.0, "kiln_spec_accepted_tokens_total": 0.0}


def test_usage_counts_the_guesses_and_a_request_can_turn_them_off(client, model_id):
    msgs = [{"role": "user", "content": PROMPTS[0]}]
    r = client.chat.completions.create(model=model_id, messages=msgs, max_tokens=100,
                                       temperature=0)
    d = r.usage.completion_tokens_details
    assert d is not None and d.accepted_prediction_tokens > 0, r.usage
    assert d.accepted_prediction_tokens < r.usage.completion_tokens
    off = client.chat.completions.create(model=model_id, messages=msgs, max_tokens=100,
                                         temperature=0, extra_body={"speculative.n_max": 0})
    assert off.choices[0].message.content == r.choices[0].message.content
    assert off.usage.completion_tokens_details is None, off.usage
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=model_id, messages=msgs, max_tokens=4,
                                       extra_body={"speculative.n_max": -1})
    assert e.value.body["param"] == "speculative.n_max", e.value.body


def test_a_draft_model_gives_the_same_replies_and_counts_its_guesses(client, model_id,
                                                                     model_path, tmp_path):
    """`--draft-model` (the default model drafting for itself): the replies are the ones of the
    n-gram server, and /metrics counts the guesses under method="draft"."""
    msgs = [{"role": "user", "content": PROMPTS[0]}]

    def ask(c):
        r = c.chat.completions.create(model=model_id, messages=msgs, max_tokens=60,
                                      temperature=0, logprobs=True, top_logprobs=2)
        s = c.chat.completions.create(model=model_id, messages=msgs, max_tokens=40,
                                      temperature=0.8, seed=3)
        lp = [(t.token, t.logprob) for t in r.choices[0].logprobs.content]
        return r.choices[0].message.content, lp, s.choices[0].message.content

    expected = ask(client)
    args = ["--draft-model", str(model_path), "--draft-max", "6"]
    with start_kiln(model_path, config(), args=args, log_dir=tmp_path) as d:
        assert ask(client_for(d.base_url)) == expected
        text = urllib.request.urlopen(d.base_url + "/metrics", timeout=10).read().decode()
        accepted = re.findall(r'^kiln_spec_accepted_tokens_total{[^}]*method="draft"[^}]*} (\S+)$',
                              text, re.M)
        assert accepted and float(accepted[0]) >= 20, accepted
