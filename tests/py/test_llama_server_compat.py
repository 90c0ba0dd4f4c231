"""kiln as a drop-in for llama-server (issue 44), through real HTTP against a real `kiln serve`.

- Model names: clients that send their own `model` ("gpt-4.1", "claude-...", "test") reach the
  one served model through the official openai and anthropic SDKs, and replies carry the
  served id; `server.strict_model_names` keeps the 404 (in each family's envelope);
  `server.default_model` routes unknown names when several models are served.
"""
from __future__ import annotations

import anthropic
import httpx2 as httpx
import openai
import pytest

from conftest import client_for, config, start_kiln

FOREIGN = ["gpt-4.1", "claude-opus-4-5", "test"]
CHAT = [{"role": "user", "content": "Say hi."}]


@pytest.fixture(scope="module")
def claude(kiln):
    return anthropic.Anthropic(base_url=kiln.base_url, api_key="unused", max_retries=0,
                               timeout=60)


@pytest.fixture(scope="module")
def strict(model_path, tmp_path_factory):
    """A server of the default model with server.strict_model_names (the flag form)."""
    server = start_kiln(model_path, config(), args=["--strict-model-names"],
                        log_dir=tmp_path_factory.mktemp("strict"))
    yield server
    assert server.stop() == 0, server.log_tail()


@pytest.mark.parametrize("name", FOREIGN)
def test_any_model_name_reaches_the_one_served_model(client, claude, kiln, model_id, name):
    chat = client.chat.completions.create(model=name, messages=CHAT, max_tokens=2)
    assert chat.model == model_id
    cmpl = client.completions.create(model=name, prompt="Hello", max_tokens=2)
    assert cmpl.model == model_id
    emb = client.embeddings.create(model=name, input="x")
    assert emb.model == model_id and len(emb.data[0].embedding) > 0
    resp = client.responses.create(model=name, input="Say hi.", max_output_tokens=2)
    assert resp.model == model_id
    msg = claude.messages.create(model=name, max_tokens=2, messages=CHAT)
    assert msg.model == model_id
    assert claude.messages.count_tokens(model=name, messages=CHAT).input_tokens > 0
    # The model card of a foreign name is the served model's.
    assert client.models.retrieve(name).id == model_id
    r = httpx.post(kiln.base_url + "/v1/rerank", timeout=60,
                   json={"model": name, "query": "q", "documents": ["a", "b"]})
    assert r.status_code == 200, r.text
    assert r.json()["model"] == model_id
    # The list names only what is served.
    assert [m.id for m in client.models.list().data] == [model_id]


def test_strict_model_names_keep_the_404_in_each_familys_envelope(strict, model_path):
    served = model_path.stem
    client = client_for(strict.base_url)
    with pytest.raises(openai.NotFoundError) as e:
        client.chat.completions.create(model="gpt-4.1", messages=CHAT, max_tokens=2)
    assert e.value.code == "model_not_found"
    assert served in e.value.body["message"]
    with pytest.raises(openai.NotFoundError):
        client.embeddings.create(model="gpt-4.1", input="x")
    with pytest.raises(openai.NotFoundError) as e:
        client.responses.create(model="gpt-4.1", input="x", max_output_tokens=2)
    assert e.value.body["code"] == "model_not_found"
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("gpt-4.1")
    claude = anthropic.Anthropic(base_url=strict.base_url, api_key="unused", max_retries=0)
    with pytest.raises(anthropic.NotFoundError) as e:
        claude.messages.create(model="claude-opus-4-5", max_tokens=2, messages=CHAT)
    assert e.value.body["type"] == "error"
    assert e.value.body["error"]["type"] == "not_found_error"
    assert served in e.value.body["error"]["message"]
    # The served id still works, and no model means the default.
    assert client.chat.completions.create(model=served, messages=CHAT,
                                          max_tokens=2).model == served
    r = httpx.post(strict.base_url + "/v1/completions", json={"prompt": "a", "max_tokens": 1},
                   timeout=60)
    assert r.status_code == 200 and r.json()["model"] == served


def test_default_model_takes_unknown_names_when_several_are_served(model_path, tmp_path):
    second = tmp_path / "second.gguf"
    second.symlink_to(model_path.resolve())
    cfg = config(engine={"kv_cache": "16MiB"})
    # Without server.default_model: several models, an unknown name is a 404.
    with start_kiln(model_path, cfg, args=["--model", str(second)],
                    log_dir=tmp_path / "a") as server:
        with pytest.raises(openai.NotFoundError):
            client_for(server.base_url).chat.completions.create(
                model="gpt-4.1", messages=CHAT, max_tokens=2)
    with start_kiln(model_path, cfg, args=["--model", str(second)],
                    env={"KILN_DEFAULT_MODEL": "second"}, log_dir=tmp_path / "b") as server:
        client = client_for(server.base_url)
        for name in ("gpt-4.1", None):
            kw = {"model": name} if name else {"model": "second"}
            assert client.chat.completions.create(messages=CHAT, max_tokens=2,
                                                  **kw).model == "second"
        r = httpx.post(server.base_url + "/v1/chat/completions", timeout=60,
                       json={"messages": CHAT, "max_tokens": 2})
        assert r.json()["model"] == "second", r.text
        assert client.chat.completions.create(model=model_path.stem, messages=CHAT,
                                              max_tokens=2).model == model_path.stem


def test_a_default_model_that_is_not_served_stops_the_server(model_path, tmp_path):
    with pytest.raises(Exception) as e:
        start_kiln(model_path, config(server={"default_model": "nope"}), log_dir=tmp_path,
                   timeout=30)
    assert "server.default_model" in str(e.value)
