"""`kiln top` in a real terminal (tmux): it shows the running server's /stats live, and
Ctrl-C ends it. Also `--once`, the frame scripts can read."""
from __future__ import annotations

import os
import shutil
import subprocess
import time

from servers import kiln_binary


def test_top_once_prints_a_frame(kiln, client, model_id):
    client.chat.completions.create(
        model=model_id, messages=[{"role": "user", "content": "Hello!"}], max_tokens=8
    )
    out = subprocess.run(
        [str(kiln_binary()), "top", "--url", kiln.base_url, "--once"],
        capture_output=True, text=True, timeout=30, check=True,
    ).stdout
    assert "kiln top" in out and "ready" in out, out
    assert "gen tok/s" in out and "KV cache" in out and "TTFT" in out, out
    # The request above shows in the last minute's percentiles.
    ttft = next(line for line in out.splitlines() if "TTFT" in line)
    assert "(n=0)" not in ttft, out


def test_top_runs_live_in_a_terminal_and_quits_on_ctrl_c(kiln, client, model_id):
    tmux = shutil.which("tmux")
    assert tmux, "tmux is missing: `make tools` installs it (Debian's tmux)"
    session = f"kiln-top-{os.getpid()}"
    cmd = f"{kiln_binary()} top --url {kiln.base_url} --interval 0.3"
    subprocess.run([tmux, "new-session", "-d", "-s", session, "-x", "110", "-y", "30", cmd],
                   check=True, timeout=10)
    try:
        def screen() -> str:
            return subprocess.run([tmux, "capture-pane", "-p", "-t", session],
                                  capture_output=True, text=True, timeout=10).stdout

        deadline = time.time() + 15
        while "KV cache" not in screen() and time.time() < deadline:
            time.sleep(0.2)
        first = screen()
        assert "kiln top" in first and "KV cache" in first, first
        # Traffic moves the numbers on the live view.
        for _ in range(3):
            client.chat.completions.create(
                model=model_id, messages=[{"role": "user", "content": "Count to five."}],
                max_tokens=16,
            )
        deadline = time.time() + 15
        while time.time() < deadline:
            now = screen()
            line = next((l for l in now.splitlines() if l.startswith("requests/s")), "")
            if line and line != next((l for l in first.splitlines() if l.startswith("requests/s")), ""):
                break
            time.sleep(0.3)
        else:
            raise AssertionError(f"the view did not change:\n{first}\n---\n{screen()}")
        subprocess.run([tmux, "send-keys", "-t", session, "C-c"], check=True, timeout=10)
        deadline = time.time() + 10
        while time.time() < deadline:
            alive = subprocess.run([tmux, "has-session", "-t", session],
                                   capture_output=True, timeout=10).returncode == 0
            if not alive:
                break
            time.sleep(0.2)
        else:
            raise AssertionError("kiln top did not quit on Ctrl-C")
    finally:
        subprocess.run([tmux, "kill-session", "-t", session], capture_output=True, timeout=10)
