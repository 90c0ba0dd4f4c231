"""Fixtures for the real-client tests: kiln servers started from the release binary.

`kiln` (session scope) is the server most tests share: the default model on 127.0.0.1 with a
free port, modest limits so no request runs long (a request without max_tokens gets 32; at
most 256), and a KV cache of 256 MiB so several test servers fit in memory side by side.
Tests that need another configuration (API keys, a tiny queue) start their own with
`start_kiln` and stop it themselves. Every server is stopped by pid (SIGTERM, then SIGKILL).

Nothing here skips: a missing binary, model or tool is an error.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from openai import OpenAI

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))

from servers import DEFAULT_MODEL, start_kiln  # noqa: E402

# The limits of the shared test server (a kiln config, section by section).
TEST_CONFIG = {
    "engine": {"kv_cache": "256MiB"},
    "server": {
        "max_tokens_default": 32,
        "max_tokens_cap": 256,
        "request_timeout": 60,
        "drain_timeout": 5,
    },
}


def config(**server) -> dict:
    """TEST_CONFIG with some `[server]` or `[scheduler]` keys changed: pass
    scheduler={"max_waiting": 1} or server={...}."""
    cfg = {section: dict(keys) for section, keys in TEST_CONFIG.items()}
    for section, keys in server.items():
        cfg.setdefault(section, {}).update(keys)
    return cfg


def client_for(base_url: str, api_key: str = "unused", timeout: float = 60.0) -> OpenAI:
    """The official client on kiln's /v1, with retries off so every error surfaces once."""
    return OpenAI(base_url=base_url + "/v1", api_key=api_key, max_retries=0, timeout=timeout)


@pytest.fixture(scope="session")
def model_path() -> Path:
    if not DEFAULT_MODEL.is_file():
        raise FileNotFoundError(f"{DEFAULT_MODEL} is missing: run `make model` first")
    return DEFAULT_MODEL


@pytest.fixture(scope="session")
def kiln(model_path, tmp_path_factory):
    """The shared kiln server (a servers.Server: base_url, pid, log_path)."""
    server = start_kiln(model_path, TEST_CONFIG, log_dir=tmp_path_factory.mktemp("kiln"))
    yield server
    code = server.stop()
    # SIGTERM drains and exits 0; anything else is a bug worth failing on.
    assert code == 0, f"kiln exited with {code} on SIGTERM\n{server.log_tail()}"


@pytest.fixture(scope="session")
def client(kiln) -> OpenAI:
    return client_for(kiln.base_url)


@pytest.fixture(scope="session")
def model_id(client) -> str:
    """The id the server reports (the model file's stem)."""
    models = client.models.list().data
    assert len(models) >= 1
    return models[0].id


PROOF_MODELS = ROOT / "target/release/examples/proof_models"

# The tools offer the served-family tests make (one function, as clients send it).
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}


def serve_proof_model(tmp_path_factory, arch: str, file: str, vocab: Path, vocab_how: str,
                      template: Path, seed: int):
    """A kiln server (from `start_kiln`; the caller stops it) on architecture `arch`'s
    random-weight proof model, which `proof_models` (kiln's synth writer, the files
    tests/it/arch_proof.rs holds against llama.cpp) writes at test time with `vocab`'s
    vocabulary from `seed`, in the one type `file` names (ARCH.TYPE.gguf) and with a context
    of 2048 (the proofs' 256 holds no tool prompt); `template` is the chat template. A missing
    input is an error naming how to get it."""
    for need, how in [(vocab, vocab_how), (template, "the repository"),
                      (PROOF_MODELS, "`cargo build --release --example proof_models`")]:
        assert need.is_file(), f"{need} is missing ({how})"
    out = tmp_path_factory.mktemp(f"{arch}-model")
    quant = file.removeprefix(f"{arch}.").removesuffix(".gguf")
    subprocess.run([str(PROOF_MODELS), "--context", "2048", "--quant", quant, str(vocab),
                    str(out), str(seed), arch], check=True, capture_output=True)
    model = out / file
    assert model.is_file(), f"proof_models wrote no {model}"
    cfg = config()
    cfg["model"] = {"chat_template": str(template)}
    return start_kiln(model, cfg, log_dir=tmp_path_factory.mktemp(arch))
