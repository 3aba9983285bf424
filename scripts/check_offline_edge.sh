#!/usr/bin/env bash
# The offline install recipe of docs/jetson.md, checked for the Jetson (CPython 3.10, aarch64): download
# every wheel of requirements-edge.lock for that platform (hashes enforced), then resolve the rl2edge
# wheel's [edge] install from those files alone (--no-index, dry run: aarch64 wheels do not install here;
# scripts/check_arm64.sh installs them for real under qemu).
#   scripts/check_offline_edge.sh [PYTHON_VERSION] [WHEELHOUSE]
set -euo pipefail
cd "$(dirname "$0")/.."
PYV=${1:-3.10}
WH=${2:-$(mktemp -d /tmp/rl2edge-wheelhouse-XXXXXX)}
PIP=${PIP:-.venv/bin/python -m pip}
# ai-edge-litert's aarch64 wheels are tagged manylinux_2_27/2_28 only: manylinux2014 alone finds none.
PLATFORM=(--platform manylinux_2_17_aarch64 --platform manylinux2014_aarch64 --platform manylinux_2_27_aarch64
          --platform manylinux_2_28_aarch64 --python-version "$PYV" --implementation cp --only-binary=:all:)
[[ -f $(ls dist/rl2edge-*-py3-none-any.whl 2>/dev/null | head -1) ]] || make wheel >/dev/null
WHEEL=$(ls dist/rl2edge-*-py3-none-any.whl | head -1)
$PIP download --quiet --disable-pip-version-check "${PLATFORM[@]}" --require-hashes -r requirements-edge.lock -d "$WH"
cp "$WHEEL" "$WH/"
echo "wheelhouse $WH: $(ls "$WH" | wc -l) files, $(du -sm "$WH" | cut -f1) MB"
# Two steps, as on the device: the hashed lock, then the rl2edge wheel, whose [edge] needs must all be in
# the wheelhouse (pip refuses to mix hashed and unhashed requirements in one call).
DRY=(install --dry-run --ignore-installed --quiet --disable-pip-version-check --no-index --find-links "$WH"
     "${PLATFORM[@]}" --target "$(mktemp -d)")
$PIP "${DRY[@]}" --require-hashes -r requirements-edge.lock
$PIP "${DRY[@]}" --report "$WH/report.json" "$WH/$(basename "$WHEEL")[edge]"
python3 - "$WH/report.json" "$PYV" <<'PY'
import json, sys
names = sorted(f"{i['metadata']['name']}=={i['metadata']['version']}" for i in json.load(open(sys.argv[1]))["install"])
print(f"offline: rl2edge[edge] for CPython {sys.argv[2]} aarch64 resolves {len(names)} packages from the wheelhouse alone:")
print("  " + ", ".join(names))
PY
