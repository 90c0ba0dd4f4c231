"""kiln as a drop-in for llama-server (issue 44), through real HTTP against a real `kiln serve`.

- Model names: clients that send their own `model` ("gpt-4.1", "claude-...", "test") reach the
  one served model through the official openai and anthropic SDKs, and replies carry the
  served id; `server.strict_model_names` keeps the 404 (in each family's envelope);
  `server.default_model` routes unknown names when several models are served.
- llama-server's native routes: `/completion` (text, token-id and mixed prompts, several
  prompts, `n_probs`, stop words, `return_tokens`, `response_fields`, streamed and not),
  `/infill` with a request shaped like llama.vim's (the editor plugin) against a copy of the
  default model whose GGUF names FIM tokens (written here: the model itself has none, so on the
  shared server `/infill` is the clear 400), `/props`, `/slots` (501), `/apply-template`.
- llama-server's command line: a launch line with its common flags starts kiln; the flags kiln
  does not take are named in one error line with kiln's alternative.
"""
from __future__ import annotations

import json
import struct
from pathlib import Path

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


# --- llama-server's native routes -----------------------------------------------------------


def post(base: str, path: str, body: dict) -> httpx.Response:
    return httpx.post(base + path, json=body, timeout=120)


def stream_events(base: str, path: str, body: dict) -> list:
    """The `data:` payloads of a stream, parsed (every non-comment line must be one)."""
    events = []
    with httpx.stream("POST", base + path, json=dict(body, stream=True), timeout=120) as r:
        assert r.status_code == 200, r.read()
        assert r.headers["content-type"].startswith("text/event-stream")
        for line in r.iter_lines():
            if not line or line.startswith(":"):
                continue
            assert line.startswith("data: "), line
            events.append(json.loads(line[len("data: "):]))
    return events


def test_completion_answers_in_llama_servers_shape(kiln, model_id):
    r = post(kiln.base_url, "/completion",
             {"prompt": "The capital of France is", "n_predict": 8, "temperature": 0,
              "model": "whatever-the-client-sends"})
    assert r.status_code == 200, r.text
    b = r.json()
    assert isinstance(b["content"], str) and b["stop"] is True
    assert b["model"] == model_id and b["id_slot"] == -1 and b["tokens"] == []
    assert b["stop_type"] in ("eos", "limit") and b["stopping_word"] == ""
    assert 1 <= b["tokens_predicted"] <= 8
    assert b["tokens_evaluated"] > 3 and b["truncated"] is False
    assert b["prompt"].endswith("The capital of France is")
    gs = b["generation_settings"]
    assert gs["n_predict"] == 8 and gs["temperature"] == 0 and gs["n_ctx"] > 0
    t = b["timings"]
    assert t["predicted_n"] == b["tokens_predicted"] and t["prompt_n"] + t["cache_n"] == b["tokens_evaluated"]
    assert t["predicted_ms"] >= 0 and t["prompt_ms"] >= 0
    # A long prompt again: the prefix cache serves its whole blocks (cache_prompt's effect,
    # always on in kiln).
    long = {"prompt": "Count with me: " + ", ".join(str(i) for i in range(60)),
            "n_predict": 4, "temperature": 0, "cache_prompt": True}
    first = post(kiln.base_url, "/completion", long).json()
    again = post(kiln.base_url, "/completion", long).json()
    assert again["content"] == first["content"] and again["tokens_cached"] > 0
    assert again["timings"]["cache_n"] == again["tokens_cached"]


def test_completion_prompt_forms_probs_stops_and_fields(kiln):
    base = kiln.base_url
    ids = post(base, "/tokenize", {"prompt": "Once upon a time"}).json()["tokens"]
    by_ids = post(base, "/completion", {"prompt": ids, "n_predict": 4, "temperature": 0,
                                        "return_tokens": True}).json()
    by_text = post(base, "/completion", {"prompt": "Once upon a time", "n_predict": 4,
                                         "temperature": 0}).json()
    assert by_ids["content"] == by_text["content"]
    assert len(by_ids["tokens"]) == by_ids["tokens_predicted"]
    mixed = post(base, "/completion", {"prompt": ids[:2] + [" upon a time"], "n_predict": 1})
    assert mixed.status_code == 200, mixed.text
    many = post(base, "/completion", {"prompt": ["Hello", [ids[0], ids[1]]], "n_predict": 2})
    assert many.status_code == 200 and [x["index"] for x in many.json()] == [0, 1]
    probs = post(base, "/completion", {"prompt": "One, two,", "n_predict": 3, "n_probs": 2,
                                       "temperature": 0}).json()
    cp = probs["completion_probabilities"]
    assert len(cp) == probs["tokens_predicted"]
    assert "".join(p["token"] for p in cp) == probs["content"]
    for p in cp:
        assert p["logprob"] <= 0 and len(p["top_logprobs"]) == 2
        assert bytes(p["bytes"]).decode(errors="replace") == p["token"]
        assert p["top_logprobs"][0]["logprob"] >= p["top_logprobs"][1]["logprob"]
    word = post(base, "/completion", {"prompt": "1, 2, 3, 4,", "n_predict": 16,
                                      "temperature": 0, "stop": [","]}).json()
    assert word["stop_type"] == "word" and word["stopping_word"] == ","
    assert "," not in word["content"]
    # An editor's response_fields: "a/b" lifts a nested field under that name.
    picked = post(base, "/completion", {"prompt": "Hi", "n_predict": 2, "response_fields": [
        "content", "timings/predicted_n", "generation_settings/n_predict", "no_such"]}).json()
    assert set(picked) == {"content", "timings/predicted_n", "generation_settings/n_predict"}
    assert picked["generation_settings/n_predict"] == 2
    only_prompt = post(base, "/completion", {"prompt": "Hi there", "n_predict": 0}).json()
    assert only_prompt["content"] == "" and only_prompt["tokens_evaluated"] > 0
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    js = post(base, "/completion", {"prompt": "JSON:", "n_predict": 32, "json_schema": schema,
                                    "temperature": 0}).json()
    assert js["content"].startswith("{"), js


@pytest.mark.parametrize("body, param", [
    ({"prompt": "x", "mirostat": 2}, "mirostat"),
    ({"prompt": "x", "grammar": "root ::= \"a\""}, "grammar"),
    ({"prompt": "x", "n_probs": 99}, "n_probs"),
    ({"prompt": [99999999]}, "prompt"),
    ({"prompt": None}, "prompt"),
    ({"prompt": "x", "n_predict": 10**9}, "n_predict"),
    ({"prompt": "x", "logit_bias": [[1]]}, "logit_bias"),
])
def test_completion_refuses_what_it_cannot_honour_with_a_400_naming_the_field(kiln, body, param):
    r = post(kiln.base_url, "/completion", body)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == param, r.text


def test_completion_streams_llama_servers_events(kiln, model_id):
    body = {"prompt": "The capital of France is", "n_predict": 8, "temperature": 0,
            "n_probs": 1}
    whole = post(kiln.base_url, "/completion", body).json()
    events = stream_events(kiln.base_url, "/completion", body)
    *deltas, last = events
    assert deltas and all(e["stop"] is False for e in deltas)
    assert all(len(e["tokens"]) >= 1 and e["index"] == 0 for e in deltas)
    assert all(len(e["completion_probabilities"]) == len(e["tokens"]) for e in deltas)
    assert "".join(e["content"] for e in deltas) == whole["content"]
    assert last["stop"] is True and last["content"] == "" and last["model"] == model_id
    assert last["stop_type"] == whole["stop_type"]
    assert last["tokens_predicted"] == whole["tokens_predicted"]
    assert last["timings"]["predicted_n"] == whole["tokens_predicted"]
    # Two prompts: each result ends with its own stop event.
    events = stream_events(kiln.base_url, "/completion", {"prompt": ["a", "b"], "n_predict": 2})
    assert sorted(e["index"] for e in events if e["stop"]) == [0, 1]


def test_props_slots_and_apply_template(kiln, model_id, model_path):
    props = httpx.get(kiln.base_url + "/props", timeout=30).json()
    assert props["model_path"].endswith(model_path.name)
    assert props["model_alias"] == model_id
    assert props["default_generation_settings"]["n_ctx"] > 0
    assert props["default_generation_settings"]["params"]["temperature"] == pytest.approx(0.8)
    assert props["total_slots"] >= 1 and props["build_info"].startswith("kiln ")
    assert "im_start" in props["chat_template"]
    assert props["chat_template_caps"]["supports_infill"] is False
    slots = httpx.get(kiln.base_url + "/slots", timeout=30)
    assert slots.status_code == 501 and "/stats" in slots.json()["error"]["message"]
    tpl = post(kiln.base_url, "/apply-template",
               {"messages": [{"role": "user", "content": "Hi"}]}).json()
    assert "<|im_start|>user\nHi<|im_end|>" in tpl["prompt"]
    assert tpl["prompt"].endswith("<|im_start|>assistant\n")
    # The documented workflow: the rendered prompt, edited, completed by /completion.
    r = post(kiln.base_url, "/completion", {"prompt": tpl["prompt"] + "Sure!", "n_predict": 4})
    assert r.status_code == 200, r.text


def test_infill_without_fim_tokens_is_a_clear_400(kiln):
    r = post(kiln.base_url, "/infill", {"input_prefix": "def f(", "input_suffix": ")\n"})
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["code"] == "fim_not_supported" and err["param"] == "model"
    for name in ("FIM_PRE", "FIM_SUF", "FIM_MID", "tokenizer.ggml.fim_pre_token_id"):
        assert name in err["message"], err["message"]


def gguf_with_metadata(src: Path, dst: Path, extra: dict[str, int]) -> None:
    """Copies a GGUF v3 file with `extra` u32 metadata keys added after its own (the tensor
    data is re-aligned; nothing else changes)."""
    data = src.read_bytes()
    magic, version, n_tensors, n_kv = struct.unpack_from("<4sIQQ", data, 0)
    assert magic == b"GGUF" and version == 3
    pos = 24
    sizes = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
    alignment = 32

    def string(p):
        (n,) = struct.unpack_from("<Q", data, p)
        return data[p + 8:p + 8 + n], p + 8 + n

    def value(p, t):
        if t in sizes:
            return p + sizes[t]
        if t == 8:
            return string(p)[1]
        assert t == 9, t
        et, count = struct.unpack_from("<IQ", data, p)
        p += 12
        for _ in range(count):
            p = value(p, et)
        return p

    for _ in range(n_kv):
        key, pos = string(pos)
        (t,) = struct.unpack_from("<I", data, pos)
        if key == b"general.alignment":
            (alignment,) = struct.unpack_from("<I", data, pos + 4)
        pos = value(pos + 4, t)
    kv_end = pos
    for _ in range(n_tensors):
        _, pos = string(pos)
        (n_dims,) = struct.unpack_from("<I", data, pos)
        pos += 4 + 8 * n_dims + 4 + 8
    infos_end = pos
    data_start = -(-infos_end // alignment) * alignment
    added = b"".join(struct.pack("<Q", len(k)) + k.encode() + struct.pack("<II", 4, v)
                     for k, v in extra.items())
    head = struct.pack("<4sIQQ", magic, version, n_tensors, n_kv + len(extra))
    body = head + data[24:kv_end] + added + data[kv_end:infos_end]
    body += b"\0" * (-len(body) % alignment)
    dst.write_bytes(body + data[data_start:])


# Control tokens of the default model's vocabulary, named FIM markers in the test copy
# (SmolLM2 has <repo_name> and <file_sep> but no prefix/suffix/middle markers).
FIM_IDS = {"fim_pre": 6, "fim_suf": 7, "fim_mid": 8, "fim_rep": 3, "fim_sep": 5}


@pytest.fixture(scope="module")
def fim_server(model_path, tmp_path_factory):
    d = tmp_path_factory.mktemp("fim")
    model = d / "smol-fim.gguf"
    gguf_with_metadata(model_path, model,
                       {f"tokenizer.ggml.{k}_token_id": v for k, v in FIM_IDS.items()})
    server = start_kiln(model, config(), log_dir=d)
    yield server
    assert server.stop() == 0, server.log_tail()


# What llama.vim (ggml-org/llama.vim) sends to /infill, field for field.
def vim_request(**over) -> dict:
    body = {
        "input_prefix": "def add(a, b):\n",
        "input_suffix": "\n\nprint(add(1, 2))\n",
        "input_extra": [{"filename": "util.py", "text": "def sub(a, b):\n    return a - b\n"}],
        "prompt": "    return",
        "n_predict": 8,
        "n_indent": 4,
        "top_k": 40,
        "top_p": 0.99,
        "stream": False,
        "samplers": ["top_k", "top_p", "infill"],
        "cache_prompt": True,
        "t_max_prompt_ms": 500,
        "t_max_predict_ms": 1000,
        "response_fields": ["content", "timings/prompt_n", "timings/prompt_ms",
                            "timings/prompt_per_second", "timings/predicted_n",
                            "timings/predicted_ms", "timings/predicted_per_second",
                            "truncated", "tokens_cached"],
    }
    body.update(over)
    return body


def test_infill_with_an_editor_plugins_request(fim_server, model_path):
    base = fim_server.base_url
    marks = {k: post(base, "/completion", {"prompt": [v], "n_predict": 0}).json()["prompt"]
             for k, v in FIM_IDS.items()}
    assert marks["fim_rep"] == "<repo_name>" and marks["fim_sep"] == "<file_sep>", marks
    r = post(base, "/infill", vim_request())
    assert r.status_code == 200, r.text
    b = r.json()
    assert set(b) == {"content", "timings/prompt_n", "timings/prompt_ms",
                      "timings/prompt_per_second", "timings/predicted_n",
                      "timings/predicted_ms", "timings/predicted_per_second", "truncated",
                      "tokens_cached"}
    assert isinstance(b["content"], str) and b["timings/predicted_n"] <= 8
    # The prompt as the model read it: llama-server's repo-level layout with the GGUF's markers.
    full = post(base, "/infill", vim_request(response_fields=None, temperature=0)).json()
    want = (f"{marks['fim_rep']}myproject\n{marks['fim_sep']}util.py\n"
            f"def sub(a, b):\n    return a - b\n{marks['fim_sep']}filename\n"
            f"{marks['fim_pre']}def add(a, b):\n    return{marks['fim_suf']}\n\nprint(add(1, 2))\n"
            f"{marks['fim_mid']}")
    assert full["prompt"].endswith(want), full["prompt"]
    assert full["model"] == "smol-fim" and full["stop"] is True
    # Streamed, greedy: the same middle.
    events = stream_events(base, "/infill", vim_request(response_fields=None, temperature=0))
    assert "".join(e["content"] for e in events if not e["stop"]) == full["content"]
    assert events[-1]["stop"] is True and events[-1]["tokens_predicted"] == full["tokens_predicted"]
    # Code that spells a marker is read as text (the unit tests check its tokens).
    spelled = post(base, "/infill", vim_request(input_prefix=marks["fim_mid"]))
    assert spelled.status_code == 200, spelled.text
    props = httpx.get(base + "/props", timeout=30).json()
    assert props["chat_template_caps"]["supports_infill"] is True
    bad = post(base, "/infill", vim_request(input_extra=[{"filename": 3}]))
    assert bad.status_code == 400, bad.text


# --- llama-server's command line ------------------------------------------------------------


def test_a_llama_server_launch_line_starts_kiln(model_path, tmp_path):
    from servers import Server, free_port, kiln_binary, write_config
    template = tmp_path / "tpl.jinja"
    template.write_text("{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}"
                        "{% if add_generation_prompt %}[assistant] {% endif %}")
    port = free_port()
    cfg = write_config(tmp_path / "kiln.toml", config())
    # Exactly how a llama-server launch script spells it, binary swapped.
    cmd = [str(kiln_binary()), "serve", "--config", str(cfg), "-m", str(model_path),
           "-c", "4096", "-np", "2", "--host", "127.0.0.1", "--port", str(port), "-t", "1",
           "--api-key", "sk-llama", "--alias", "my-model", "--chat-template-file",
           str(template), "--jinja", "-n", "6"]
    with Server("kiln", cmd, env=dict(__import__("os").environ, KILN_LOG="info"),
                log_dir=tmp_path) as server:
        server.base_url = f"http://127.0.0.1:{port}"
        server.wait_ready("/ready", 60)
        auth = {"Authorization": "Bearer sk-llama"}
        assert httpx.get(server.base_url + "/props", timeout=30).status_code == 401
        props = httpx.get(server.base_url + "/props", headers=auth, timeout=30).json()
        assert props["model_alias"] == "my-model" and props["total_slots"] == 2
        assert props["chat_template"] == template.read_text()
        tpl = httpx.post(server.base_url + "/apply-template", headers=auth, timeout=30,
                         json={"messages": [{"role": "user", "content": "Hi"}]}).json()
        assert tpl["prompt"] == "[user] Hi\n[assistant] "
        # -n: the default number of tokens to predict.
        r = httpx.post(server.base_url + "/completion", headers=auth, timeout=60,
                       json={"prompt": "Once upon a time", "ignore_eos": True}).json()
        assert r["tokens_predicted"] == 6 and r["model"] == "my-model"
        # -c: the KV cache holds 4096 positions (the effective configuration says so).
        log = server.log_path.read_text(errors="replace")
        assert "Positions(4096)" in log, log[-2000:]


def test_llama_server_flags_kiln_does_not_take_are_named_in_one_line(model_path):
    import subprocess
    from servers import kiln_binary
    p = subprocess.run([str(kiln_binary()), "serve", "-m", str(model_path), "-ngl", "99",
                        "--metrics", "-fa", "-ctk", "q8_0", "--port", "0"],
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 2
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, p.stderr
    for part in ("-ngl (kiln runs on the CPU only", "--metrics (", "-fa (", "-ctk (--kv-type"):
        assert part in lines[0], lines[0]
