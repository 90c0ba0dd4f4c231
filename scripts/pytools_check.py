#!/usr/bin/env python3
"""Checks that the virtual environment holds every tool tests/py/requirements.txt pins, at the
pinned version, and that the binaries some of them ship (k6, hadolint) run. Prints what is
missing or wrong and exits 1.

    .venv/bin/python scripts/pytools_check.py [--quiet]

`make pytools` runs it before and after installing, so a complete environment costs no pip
call at all, and an incomplete one fails naming what is missing.
"""
import importlib.metadata
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REQUIREMENTS = ROOT / "tests" / "py" / "requirements.txt"


def pins():
    """(name, version) for each `name==version` line."""
    for line in REQUIREMENTS.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            yield name.strip(), version.strip()


def problems():
    found = []
    for name, version in pins():
        try:
            have = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            found.append(f"{name}=={version} is not installed")
            continue
        if have != version:
            found.append(f"{name} is {have}, requirements.txt pins {version}")
    for binary, arg in (("k6", "version"), ("hadolint", "--version")):
        path = Path(sys.executable).parent / binary
        try:
            subprocess.run([str(path), arg], check=True, capture_output=True, timeout=30)
        except (OSError, subprocess.SubprocessError) as e:
            found.append(f"the {binary} binary {path} does not run ({e})")
    return found


def main():
    quiet = "--quiet" in sys.argv[1:]
    found = problems()
    if found and not quiet:
        for p in found:
            print(f"pytools: {p}", file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
