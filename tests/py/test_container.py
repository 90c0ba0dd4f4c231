"""The container image's start command and health check, run as the container would run them,
without a Docker engine (none runs in CI).

deploy/Dockerfile is parsed with Docker's own parser (the `dockerfile` package). Its final stage
gives the user (USER), the environment (ENV), the command (ENTRYPOINT + CMD), the health check
(HEALTHCHECK) and the file system (COPY). The test lays that file system out in a directory: what
the image copies from the build context is copied from the repository, what it copies from the
`build` stage is the release binary ($KILN_BIN), from the `model` stage the models directory;
the base image's /usr comes from this Debian host (the image's base is Debian's too, with curl).
kiln then runs chrooted there, in a mount namespace of its own with the whole tree read-only (as
Kubernetes' readOnlyRootFilesystem makes it), as the image's user, with the image's environment
and exactly its command. The only substitution: KILN_HOST=127.0.0.1 and KILN_PORT=0 are added to
the environment (kiln's variables win over its config file), so it listens on a free loopback
port instead of 0.0.0.0:8080; the health check's URL gets that port in place of the config's.

The health check line then runs in kiln's namespace and root, as the same user, until it passes
(within the image's start period); /metrics must export, as gauges, every metric the endpoint
picker (deploy/k8s/gateway/epp-config.yaml) reads; during a drain (SIGTERM with a stream in
flight) the health check must fail, the stream must finish normally, and kiln must exit 0.

Needs root (mount namespaces, chroot), util-linux's unshare and nsenter, and curl: as in CI.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import threading
import time
import tomllib
import urllib.request
from pathlib import Path

import dockerfile
import yaml

from servers import DEFAULT_MODEL, LISTENING, ROOT, Server, kiln_binary

DOCKERFILE = ROOT / "deploy" / "Dockerfile"
EPP_CONFIG = ROOT / "deploy" / "k8s" / "gateway" / "epp-config.yaml"
# What the Dockerfile's other stages leave at a path, here: (stage, path) -> host path.
STAGE_OUTPUTS = {
    ("build", "/out/kiln"): kiln_binary,
    ("model", "/models"): lambda: DEFAULT_MODEL.parent,
}
# The base image's own directories, taken from this Debian host (merged /usr, like the image).
HOST_DIRS = ("usr/bin", "usr/sbin", "usr/lib", "usr/lib64", "usr/share")
HOST_ETC = ("ld.so.cache", "nsswitch.conf", "hosts")
# Docker's PATH for a Debian image.
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def final_stage() -> list:
    commands = dockerfile.parse_file(str(DOCKERFILE))
    start = max(i for i, c in enumerate(commands) if c.cmd.upper() == "FROM")
    return commands[start:]


def one(stage, cmd):
    found = [c for c in stage if c.cmd.upper() == cmd]
    assert len(found) == 1, f"the final stage has {len(found)} {cmd} instructions"
    return found[0]


class Image:
    """The final stage's contract, read from the Dockerfile."""

    def __init__(self):
        stage = final_stage()
        self.uid, self.gid = (int(x) for x in one(stage, "USER").value[0].split(":"))
        env = [v for c in stage if c.cmd.upper() == "ENV" for v in c.value]
        self.env = dict(zip(env[::2], env[1::2]))
        entrypoint, cmd = one(stage, "ENTRYPOINT"), one(stage, "CMD")
        assert entrypoint.json and cmd.json, "ENTRYPOINT and CMD in exec (JSON) form"
        self.argv = list(entrypoint.value) + list(cmd.value)
        health = one(stage, "HEALTHCHECK")
        assert health.value[0] == "CMD" and health.json, "HEALTHCHECK CMD in exec form"
        self.health_argv = list(health.value[1:])
        self.health_flags = dict(f.lstrip("-").split("=", 1) for f in health.flags)
        self.copies = []  # (stage or None, source, destination)
        for c in stage:
            if c.cmd.upper() == "COPY":
                flags = dict(f.lstrip("-").split("=", 1) for f in c.flags)
                *sources, dest = c.value
                self.copies += [(flags.get("from"), s, dest) for s in sources]
        # The account `useradd ... --uid N ... NAME` creates, for /etc/passwd.
        runs = " ".join(" ".join(c.value) for c in stage if c.cmd.upper() == "RUN")
        m = re.search(r"useradd [^&;]*--uid (\d+)[^&;]* ([a-z_][a-z0-9_-]*)\s*(?:$|&&|;)", runs)
        assert m and int(m.group(1)) == self.uid, "the image creates no account for its USER"
        self.user = m.group(2)


def seconds(duration: str) -> float:
    m = re.fullmatch(r"(\d+)(s|m)", duration)
    return int(m.group(1)) * (60 if m.group(2) == "m" else 1)


def lay_out(image: Image, root: Path) -> tuple[list[tuple[Path, Path]], Path]:
    """The image's tree under `root`: files copied, directories to bind-mount returned as
    (host path, path in root) pairs. Returns them and the config the command reads."""
    mounts = []
    for d in HOST_DIRS:
        (root / d).mkdir(parents=True)
        mounts.append((Path("/") / d, root / d))
    for link, target in (("bin", "usr/bin"), ("sbin", "usr/sbin"), ("lib", "usr/lib"), ("lib64", "usr/lib64")):
        (root / link).symlink_to(target)
    for d in ("proc", "sys", "dev", "etc"):
        (root / d).mkdir()
    for name in HOST_ETC:
        shutil.copy(Path("/etc") / name, root / "etc" / name)
    (root / "etc" / "passwd").write_text(
        f"root:x:0:0:root:/root:/bin/sh\n{image.user}:x:{image.uid}:{image.gid}::/nonexistent:/usr/sbin/nologin\n")
    (root / "etc" / "group").write_text(f"root:x:0:\n{image.user}:x:{image.gid}:\n")
    for stage, source, dest in image.copies:
        if stage is None:
            host = ROOT / source
        else:
            assert (stage, source) in STAGE_OUTPUTS, f"what does stage {stage}'s {source} hold?"
            host = Path(STAGE_OUTPUTS[(stage, source)]())
        target = root / dest.lstrip("/")
        assert host.exists(), f"{host} (the image's {dest}) is missing"
        if host.is_dir():
            target.mkdir(parents=True, exist_ok=True)
            mounts.append((host.resolve(), target))
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(host, target)
    config = next(Path(a) for a in image.argv if a.endswith(".toml"))
    assert (root / config.relative_to("/")).is_file(), f"the command's {config} is not in the image"
    return mounts, config


def start_in_root(image: Image, root: Path, mounts, log_dir: Path) -> Server:
    """kiln started by the image's command, chrooted in `root` as the image's user; the process
    (unshare -> sh -> chroot -> kiln, each exec'ing the next) keeps one pid: kiln's."""
    for tool in ("unshare", "nsenter", "chroot", "mount"):
        assert shutil.which(tool), f"{tool} is missing (util-linux / coreutils)"
    assert os.geteuid() == 0, "this test needs root (mount namespace, chroot), as CI runs"
    # The tree's own mount first: a bind is not recursive, so mounts made before it would vanish.
    script = ["set -e", f"mount --bind '{root}' '{root}'"]
    for host, target in mounts:
        script += [f"mount --bind '{host}' '{target}'", f"mount -o remount,bind,ro '{target}'"]
    script += [
        f"mount -t proc proc '{root}/proc'",
        f"mount --rbind /sys '{root}/sys'",
        f"mount --rbind /dev '{root}/dev'",
        # The whole tree read-only, as readOnlyRootFilesystem makes it: kiln must write nothing.
        f"mount -o remount,bind,ro '{root}'",
        f'exec chroot --userspec={image.uid}:{image.gid} \'{root}\' "$@"',
    ]
    env = {"PATH": PATH, "HOME": "/nonexistent", **image.env,
           # The substitution: a free loopback port instead of 0.0.0.0:8080.
           "KILN_HOST": "127.0.0.1", "KILN_PORT": "0"}
    cmd = ["unshare", "--mount", "--propagation", "private", "sh", "-c", "\n".join(script), "sh", *image.argv]
    return Server("kiln-container", cmd, env=env, log_dir=log_dir)


def health_check(image: Image, pid: int, port: int, config_port: int) -> subprocess.CompletedProcess:
    """The HEALTHCHECK command in kiln's mount namespace and root, as the image's user."""
    argv = [a.replace(f"127.0.0.1:{config_port}", f"127.0.0.1:{port}") for a in image.health_argv]
    assert argv != image.health_argv, f"the health check {image.health_argv} names no 127.0.0.1:{config_port}"
    env = {"PATH": PATH, "HOME": "/nonexistent", **image.env}
    return subprocess.run(
        ["nsenter", "--target", str(pid), "--mount", "--root", "--wd",
         "--setuid", str(image.uid), "--setgid", str(image.gid), *argv],
        env=env, capture_output=True, text=True, timeout=seconds(image.health_flags["timeout"]))


def gauges(text: str) -> dict[str, str]:
    """{family: the labels of its first sample} for each gauge family of a /metrics text."""
    found = {}
    for family in re.findall(r"^# TYPE (\S+) gauge$", text, re.M):
        m = re.search(rf"^{re.escape(family)}(\{{[^}}]*\}})? ", text, re.M)
        if m:
            found[family] = m.group(1) or ""
    return found


def test_image_command_and_health_check(tmp_path):
    image = Image()
    root = tmp_path / "root"
    root.mkdir()
    mounts, config_path = lay_out(image, root)
    config = tomllib.loads((root / config_path.relative_to("/")).read_text())
    server = start_in_root(image, root, mounts, tmp_path)
    try:
        deadline = time.monotonic() + 30
        while server.base_url is None:
            assert server.proc.poll() is None, f"kiln exited: {server.log_tail()}"
            assert time.monotonic() < deadline, f"kiln never listened: {server.log_tail()}"
            m = LISTENING.search(server.log_path.read_text(errors="replace"))
            if m:
                server.base_url = f"http://{m.group(1)}:{m.group(2)}"
            time.sleep(0.05)
        port = int(server.base_url.rsplit(":", 1)[1])
        # The pid is kiln itself, chrooted, as the image's user.
        status = Path(f"/proc/{server.pid}/status").read_text()
        assert re.search(rf"^Uid:\s+{image.uid}\s", status, re.M), status
        assert os.readlink(f"/proc/{server.pid}/root") == str(root)
        assert Path(os.readlink(f"/proc/{server.pid}/exe")).name == "kiln"
        # Its / is read-only (mountinfo's 5th field is the mount point, 6th its options).
        mountinfo = [line.split() for line in Path(f"/proc/{server.pid}/mountinfo").read_text().splitlines()]
        assert "ro" in next(f for f in mountinfo if f[4] == "/")[5].split(","), "the root is writable"

        # The health check, every second as Docker would (faster than its interval), must pass
        # within the start period.
        deadline = time.monotonic() + seconds(image.health_flags["start-period"])
        while True:
            check = health_check(image, server.pid, port, config["server"]["port"])
            if check.returncode == 0:
                break
            assert server.proc.poll() is None, f"kiln exited: {server.log_tail()}"
            assert time.monotonic() < deadline, f"never healthy: {check.stderr}\n{server.log_tail()}"
            time.sleep(1)

        # The endpoint picker's gauges, live.
        with urllib.request.urlopen(server.base_url + "/metrics", timeout=10) as r:
            exported = gauges(r.read().decode())
        epp = yaml.safe_load(EPP_CONFIG.read_text())
        extractor = next(p for p in epp["plugins"] if p["type"] == "core-metrics-extractor")
        engine = extractor["parameters"]["engineConfigs"][0]
        for field in ("queuedRequestsSpec", "runningRequestsSpec", "kvUsageSpec"):
            assert engine[field] in exported, f"{field}: kiln exports no gauge {engine[field]}"
            assert "model=" in exported[engine[field]], exported[engine[field]]

        # A drain: a stream in flight, SIGTERM; the health check fails while the stream is
        # still in flight, the stream ends normally, kiln exits 0. The signal reaches kiln's
        # runtime a moment after kill() returns (a check started at once can win that race on
        # a busy machine), so the check may take up to a second to fail; the stream (256
        # tokens) outlasts that, so a failing check means draining, not exited.
        body = json.dumps({"messages": [{"role": "user", "content": "Tell a long story."}],
                           "max_tokens": 256, "ignore_eos": True, "stream": True}).encode()
        request = urllib.request.Request(server.base_url + "/v1/chat/completions", data=body,
                                         headers={"Content-Type": "application/json"})
        stream = urllib.request.urlopen(request, timeout=60)
        first = stream.readline()
        assert first.startswith(b"data: "), first
        rest: list[bytes] = []
        reader = threading.Thread(target=lambda: rest.append(stream.read()))
        reader.start()
        os.kill(server.pid, 15)
        deadline = time.monotonic() + 1.0
        while health_check(image, server.pid, port, config["server"]["port"]).returncode == 0:
            assert time.monotonic() < deadline, "healthy 1 s into the drain"
            time.sleep(0.05)
        assert reader.is_alive(), "the stream ended before the health check failed: not a drain"
        reader.join(timeout=60)
        text = (first + b"".join(rest)).decode()
        assert '"finish_reason":"length"' in text and "data: [DONE]" in text, text[-500:]
        assert server.proc.wait(timeout=config["server"]["drain_timeout"] + 10) == 0, server.log_tail()
    finally:
        code = server.stop()
    assert code == 0, f"kiln exited with {code}\n{server.log_tail()}"
