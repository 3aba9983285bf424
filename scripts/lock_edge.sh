#!/usr/bin/env bash
# Regenerate requirements-edge.lock: the [edge] extra resolved for CPython 3.10 (the Jetson's), every
# release file's sha256. Needs the package index; pip-tools runs in a throwaway venv.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=$(scripts/find_python.sh 3.10)
TMP=$(mktemp -d); trap 'rm -rf "$TMP"' EXIT
"$PY" -m venv "$TMP/venv" && "$TMP/venv/bin/pip" install --quiet pip-tools
"$TMP/venv/bin/pip-compile" --quiet --generate-hashes --extra edge --strip-extras --no-emit-index-url --no-emit-find-links \
  -o "$TMP/lock" pyproject.toml
{ sed -n '1,4p' requirements-edge.lock; awk 'body || !/^#/ { body = 1; print }' "$TMP/lock"; } > requirements-edge.lock.tmp
mv requirements-edge.lock.tmp requirements-edge.lock
