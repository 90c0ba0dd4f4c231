"""Starting and stopping the servers the Python tests and the load comparison talk to.

Every server listens on 127.0.0.1 on a port the OS picks (kiln: `--port 0`, then the port is
read from its `kiln: listening on http://HOST:PORT` line; llama-server cannot pick one, so a
free port is found first). Each is stopped by its own pid: SIGTERM, then SIGKILL after a grace
period. Output goes to a log file (never to a pipe nobody reads, which would fill and block the
server), and the log's tail is shown when a server fails to come up.

Used by tests/py/conftest.py and scripts/serve_compare.py.
"""
from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_MODEL = ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
LISTENING = re.compile(r"kiln: listening on http://([0-9.]+):([0-9]+)")


def kiln_binary() -> Path:
    """The release binary cargo built: $KILN_BIN, else $CARGO_TARGET_DIR/release/kiln, else
    target/release/kiln. A missing binary is an error, never a skip."""
    if os.environ.get("KILN_BIN"):
        path = Path(os.environ["KILN_BIN"])
    else:
        target = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
        path = target / "release" / "kiln"
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist: run `cargo build --release` first")
    return path


def free_port() -> int:
    """A port free on 127.0.0.1 right now (for servers that cannot bind port 0 themselves)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_status(url: str, timeout: float = 2.0) -> int | None:
    """The status of GET `url`, or None when nothing answers."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
    except (urllib.error.URLError, OSError):
        return None


class Server:
    """A server process: its pid, base URL and log file. Stop it with `stop()` (idempotent)."""

    def __init__(self, name: str, cmd: list[str], env: dict | None = None, log_dir: Path | None = None):
        self.name = name
        self.cmd = cmd
        log_dir = Path(log_dir or tempfile.mkdtemp(prefix=f"{name}-"))
        log_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = log_dir / f"{name}.log"
        self._log = open(self.log_path, "wb")
        # A new session: a signal meant for the test runner (Ctrl-C) does not reach the server
        # twice, and the server cannot signal us.
        self.proc = subprocess.Popen(
            cmd, stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT,
            env=env, start_new_session=True,
        )
        self.base_url: str | None = None

    @property
    def pid(self) -> int:
        return self.proc.pid

    def log_tail(self, lines: int = 30) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def _fail(self, why: str):
        tail = self.log_tail()
        self.stop()
        raise RuntimeError(f"{self.name}: {why} (command: {' '.join(self.cmd)})\n--- log tail ---\n{tail}")

    def wait_ready(self, ready_path: str, timeout: float) -> None:
        """Waits (bounded by `timeout` seconds) until GET base_url + ready_path is 200."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self._fail(f"exited with code {self.proc.returncode} before it was ready")
            if self.base_url and http_status(self.base_url + ready_path) == 200:
                return
            time.sleep(0.1)
        self._fail(f"not ready after {timeout:.0f} s")

    def stop(self, grace: float = 10.0) -> int | None:
        """SIGTERM to this pid, SIGKILL after `grace` seconds; returns the exit code."""
        if self.proc.poll() is None:
            try:
                os.kill(self.proc.pid, signal.SIGTERM)
                self.proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=grace)
            except ProcessLookupError:
                pass
        if not self._log.closed:
            self._log.close()
        return self.proc.returncode

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


def write_config(path: Path, sections: dict[str, dict]) -> Path:
    """Writes a kiln config file (TOML) from {"section": {"key": value}} (a list of such
    dicts is an array of tables, `[[section]]`); strings, numbers, booleans and lists of
    strings only."""

    def value(v):
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, (int, float)):
            return repr(v)
        if isinstance(v, str):
            return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
        if isinstance(v, list):
            return "[" + ", ".join(value(x) for x in v) + "]"
        raise TypeError(f"cannot write {v!r} as TOML")

    lines = []
    for section, keys in sections.items():
        # A list of tables is an array of tables: {"models": [{...}, {...}]} -> [[models]].
        for table in keys if isinstance(keys, list) else [keys]:
            lines.append(f"[[{section}]]" if isinstance(keys, list) else f"[{section}]")
            lines += [f"{k} = {value(v)}" for k, v in table.items()]
            lines.append("")
    path.write_text("\n".join(lines))
    return path


def start_kiln(model: Path | None = DEFAULT_MODEL, config: dict[str, dict] | None = None,
               env: dict | None = None, log_dir: Path | None = None, timeout: float = 60.0,
               args: list[str] | None = None) -> Server:
    """Starts `kiln serve` on 127.0.0.1 with a free port and waits until /ready is 200.

    `config` is written to a config file passed with --config (so the repository's
    config/default.toml does not apply); `env` adds environment variables (KILN_API_KEYS...);
    `args` adds flags (another `--model FILE` serves a second model). `model` None passes no
    `--model` (the config's `[[models]]` are served).
    """
    log_dir = Path(log_dir or tempfile.mkdtemp(prefix="kiln-"))
    log_dir.mkdir(parents=True, exist_ok=True)
    cfg = write_config(log_dir / "kiln.toml", config or {})
    cmd = [str(kiln_binary()), "serve", "--config", str(cfg),
           *(["--model", str(model)] if model is not None else []),
           "--host", "127.0.0.1", "--port", "0", *(args or [])]
    full_env = dict(os.environ, **(env or {}))
    full_env.setdefault("KILN_LOG", "info")
    server = Server("kiln", cmd, env=full_env, log_dir=log_dir)
    # The listening line comes first (the model loads after the bind).
    deadline = time.monotonic() + timeout
    while server.base_url is None:
        if server.proc.poll() is not None:
            server._fail(f"exited with code {server.proc.returncode} before listening")
        if time.monotonic() > deadline:
            server._fail(f"no 'kiln: listening on' line after {timeout:.0f} s")
        m = LISTENING.search(server.log_path.read_text(errors="replace"))
        if m:
            server.base_url = f"http://{m.group(1)}:{m.group(2)}"
        else:
            time.sleep(0.05)
    server.wait_ready("/ready", max(1.0, deadline - time.monotonic()))
    return server


def start_llama_server(bin_dir: Path, model: Path, threads: int, slots: int, ctx: int,
                       log_dir: Path | None = None, timeout: float = 120.0,
                       args: list[str] | None = None) -> Server:
    """Starts llama.cpp's llama-server on 127.0.0.1 (a free port) and waits for /health;
    `args` adds flags (e.g. `--spec-type ngram-simple`)."""
    port = free_port()
    cmd = [str(bin_dir / "llama-server"), "-m", str(model), "-t", str(threads),
           "-np", str(slots), "-c", str(ctx), "--host", "127.0.0.1", "--port", str(port),
           *(args or [])]
    env = dict(os.environ, LD_LIBRARY_PATH=str(bin_dir))
    server = Server("llama-server", cmd, env=env, log_dir=log_dir)
    server.base_url = f"http://127.0.0.1:{port}"
    # llama-server's /health is 503 while the model loads, 200 once it can serve.
    server.wait_ready("/health", timeout)
    return server
