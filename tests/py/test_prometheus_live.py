"""A real Prometheus (Debian's `prometheus`, on a loopback port, with kiln's recording rules and
alerts) scrapes a running kiln under a short real load; then every recording rule and every
Grafana panel query must return data with no query error (deploy/grafana/check_dashboard.py
does what Grafana does: resolves the variables, substitutes them, runs each query)."""
from __future__ import annotations

import shutil
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path

from servers import ROOT, Server, free_port

PROM_DIR = ROOT / "deploy" / "prometheus"


def test_every_rule_and_panel_query_returns_data(kiln, client, model_id, tmp_path):
    prometheus = shutil.which("prometheus")
    assert prometheus, "prometheus is missing: `make tools` installs Debian's prometheus package"
    target = kiln.base_url.removeprefix("http://")
    config = tmp_path / "prometheus.yml"
    config.write_text(f"""
global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files:
  - {PROM_DIR / 'rules.yml'}
  - {PROM_DIR / 'alerts.yml'}
scrape_configs:
  - job_name: kiln
    static_configs:
      - targets: ['{target}']
""")
    port = free_port()
    server = Server("prometheus", [
        prometheus, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'data'}",
        f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn",
    ], log_dir=tmp_path)
    server.base_url = f"http://127.0.0.1:{port}"
    try:
        server.wait_ready("/-/ready", timeout=60)
        # A short real load: a few users for ~12 s, bounded in count and time.
        stop = time.monotonic() + 12
        errors: list[BaseException] = []

        def user(i: int) -> None:
            try:
                n = 0
                while time.monotonic() < stop and n < 40:
                    client.chat.completions.create(
                        model=model_id, max_tokens=12, temperature=0.7, seed=i * 100 + n,
                        messages=[{"role": "system", "content": "You are brief."},
                                  {"role": "user", "content": f"Name a color ({n})."}],
                    )
                    n += 1
            except BaseException as e:  # surfaced below
                errors.append(e)

        users = [threading.Thread(target=user, args=(i,)) for i in range(3)]
        for t in users:
            t.start()
        for t in users:
            t.join(timeout=60)
        assert not errors, errors
        # Let Prometheus scrape the last of it and evaluate the rules a few times: on a fast
        # machine the load can end within seconds of Prometheus starting, before its rule
        # groups first ran, so wait (bounded) until a recording rule of each kind answers.
        time.sleep(5)
        deadline = time.monotonic() + 60
        for rule in ("kiln:requests:rate5m", "kiln:time_to_first_token_seconds:p50_5m"):
            while True:
                q = urllib.parse.quote(rule)
                body = urllib.request.urlopen(
                    f"{server.base_url}/api/v1/query?query={q}", timeout=10
                ).read().decode()
                if '"result":[]' not in body.replace(" ", ""):
                    break
                assert time.monotonic() < deadline, f"{rule} still has no data after 60 s: {body}"
                time.sleep(1)
        time.sleep(3)
        up = urllib.request.urlopen(
            f"{server.base_url}/api/v1/query?query=up%7Bjob%3D%22kiln%22%7D", timeout=10
        ).read().decode()
        assert '"1"' in up, up
        out = subprocess.run(
            ["python3", str(ROOT / "deploy" / "grafana" / "check_dashboard.py"),
             "--prometheus", server.base_url, "--range", "2m", "--step", "2s",
             "--rate-interval", "30s"],
            capture_output=True, text=True, timeout=180,
        )
        print(out.stdout[-1500:])
        assert out.returncode == 0, f"{out.stdout}\n{out.stderr}\n--- prometheus ---\n{server.log_tail()}"
    finally:
        server.stop()
