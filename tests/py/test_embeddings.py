"""/v1/embeddings with the official openai client against a real kiln server: OpenAI's shape
(floats and base64, which the client asks for by default), text and token-id inputs, unit
length, the same vector alone and batched, and 4xx errors in OpenAI's envelope."""
from __future__ import annotations

import math

import httpx2 as httpx
import pytest

N_EMBD = 576  # SmolLM2-135M's hidden size


def cos(a, b):
    return sum(x * y for x, y in zip(a, b)) / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))


def test_create_returns_unit_vectors_in_input_order(client, model_id):
    texts = ["The cat sat on the mat.", "A cat was sitting on a mat.", "Quarterly tax filing deadlines."]
    r = client.embeddings.create(model=model_id, input=texts)
    assert r.object == "list" and r.model == model_id
    assert [d.index for d in r.data] == [0, 1, 2]
    for d in r.data:
        assert d.object == "embedding" and len(d.embedding) == N_EMBD
        assert math.sqrt(sum(x * x for x in d.embedding)) == pytest.approx(1.0, abs=1e-4)
    a, b, c = (d.embedding for d in r.data)
    assert cos(a, b) > cos(a, c), "similar sentences are closer than unrelated ones"
    assert r.usage.prompt_tokens == r.usage.total_tokens > 10
    # `dimensions` equal to the model's width is accepted (any other is a 400, below).
    same = client.embeddings.create(model=model_id, input=texts[0], dimensions=N_EMBD)
    assert same.data[0].embedding == pytest.approx(a, abs=2e-3)


def test_float_and_base64_agree_and_batching_changes_nothing(client, kiln, model_id):
    text = "Kilns fire clay at high temperature."
    # The client asks for base64 unless told otherwise, and decodes it.
    b64 = client.embeddings.create(model=model_id, input=text).data[0].embedding
    raw = httpx.post(
        kiln.base_url + "/v1/embeddings",
        json={"input": text, "encoding_format": "float"},
        timeout=60,
    ).json()
    floats = raw["data"][0]["embedding"]
    assert len(b64) == len(floats) == N_EMBD
    assert b64 == pytest.approx(floats, abs=1e-7)
    batched = client.embeddings.create(
        model=model_id, input=["Something else entirely.", text, "And a third one here."]
    ).data[1].embedding
    assert batched == pytest.approx(floats, abs=2e-3)


def test_token_ids_equal_the_text(client, kiln, model_id):
    text = "Token ids or text give the same vector."
    ids = httpx.post(kiln.base_url + "/tokenize", json={"prompt": text}, timeout=30).json()["tokens"]
    by_text = client.embeddings.create(model=model_id, input=text).data[0].embedding
    by_ids = client.embeddings.create(model=model_id, input=[ids, ids[:3]]).data
    assert by_ids[0].embedding == pytest.approx(by_text, abs=1e-5)
    assert by_ids[1].embedding != pytest.approx(by_text, abs=1e-3)


def test_a_long_input_is_pooled_over_several_steps(client, kiln, model_id):
    """Longer than one step's rows (32): every position counts once. Nothing keeps KV after
    (prefill-only: no sequence holds a block once the answer is back)."""
    text = " ".join(f"word{i}" for i in range(80))
    e = client.embeddings.create(model=model_id, input=text).data[0].embedding
    assert math.sqrt(sum(x * x for x in e)) == pytest.approx(1.0, abs=1e-4)
    stats = httpx.get(kiln.base_url + "/stats", timeout=30).json()
    m = stats["models"][0]
    assert (m["running"], m["kv_blocks_used"]) == (0, 0), m


@pytest.mark.parametrize(
    "body,param",
    [
        ({"input": "x", "dimensions": 64}, "dimensions"),
        ({"input": "x", "encoding_format": "int8"}, "encoding_format"),
        ({"input": []}, "input"),
        ({"input": [[1, 2, 99999999]]}, "input"),
        ({"input": ""}, "input"),
    ],
)
def test_bad_input_is_a_400_naming_the_field(kiln, body, param):
    r = httpx.post(kiln.base_url + "/v1/embeddings", json=body, timeout=30)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == param, r.text


def test_vectors_equal_llama_cpps(client, model_id):
    """llama.cpp's llama-server (--embeddings --pooling mean) on the same GGUF, recorded in
    tests/data/embeddings_llama_cpp.json: the same pooled, normalized hidden states."""
    import json
    from pathlib import Path

    golden = json.loads(
        (Path(__file__).resolve().parents[1] / "data" / "embeddings_llama_cpp.json").read_text()
    )
    inputs = golden["inputs"]
    got = client.embeddings.create(model=model_id, input=[i["text"] for i in inputs]).data
    for g, want in zip(got, inputs):
        assert cos(g.embedding, want["embedding"]) > 0.9999
        assert max(abs(a - b) for a, b in zip(g.embedding, want["embedding"])) < 1e-3
