#!/usr/bin/env bash
# The edge install as the device gets it: the wheel with [edge] into a venv of CPython 3.10 (JetPack 6's
# Python), no torch, no TensorFlow, no source tree on sys.path. Runs the runtime and bridge tests there:
# artifacts are made beforehand by the workstation venv, plc-sim (which needs gymnasium) runs from the
# workstation venv, serve and the runtime from the edge venv.
#
#   scripts/test_edge.sh [PYTHON]     # default: CPython 3.10 found by scripts/find_python.sh
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
MAIN_PY=${MAIN_PY:-$ROOT/.venv/bin/python}
EDGE_PY=${1:-$(scripts/find_python.sh 3.10)}
VENV=${EDGE_VENV:-$ROOT/.venv-edge}
WORK=$(mktemp -d /tmp/rl2edge-edge-XXXXXX)
trap 'rm -rf "$WORK"' EXIT

echo "== edge venv: $("$EDGE_PY" -c 'import sys; print(sys.version.split()[0])') ($EDGE_PY) -> $VENV"
rm -rf dist && "$MAIN_PY" -m pip wheel --quiet --no-deps --no-build-isolation -w dist . >/dev/null
WHEEL=$(ls dist/rl2edge-*-py3-none-any.whl)
rm -rf "$VENV" && "$EDGE_PY" -m venv "$VENV"
t0=$(date +%s)
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "$WHEEL[edge]"
echo "== $WHEEL[edge] installed in $(( $(date +%s) - t0 )) s; $(du -sm "$VENV" | cut -f1) MB"
# What the device install must not have pulled in:
"$VENV/bin/python" - <<'EOF'
import importlib.util, sys
leaked = [m for m in ("torch", "tensorflow", "gymnasium", "onnxruntime") if importlib.util.find_spec(m)]
sys.exit(f"the edge install pulled in {leaked}") if leaked else print("== no torch, tensorflow, gymnasium, onnxruntime")
EOF
# Test-only additions: pytest, and gymnasium for `evaluate` parity and the in-process plc-sims.
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check pytest pytest-timeout pytest-xdist "gymnasium>=1.0,<1.3"

echo "== artifacts from the workstation venv"
"$MAIN_PY" -c "import sys; from pathlib import Path; sys.path.insert(0, '.'); from testkit.runs import build_artifacts; build_artifacts(Path('$WORK/artifacts'))" >"$WORK/artifacts.log" 2>&1 \
  || { tail -20 "$WORK/artifacts.log"; exit 1; }

# The tests, copied away from the source tree, so that `import runtime` finds the wheel's.
cp -r tests "$WORK/tests" && cp -r testkit "$WORK/testkit" && mkdir -p "$WORK/docs" && cp -r docs/examples "$WORK/docs/"
cp -r examples "$WORK/examples"  # the AGV plant, which plc-sim and evaluate run
cat >"$WORK/pytest.ini" <<'EOF'
[pytest]
addopts = --strict-markers -m "not slow and not integration" -ra -p no:cacheprovider
markers =
    slow: long-running
    integration: Ray clusters and benchmark scripts end to end
    serial(reason): runs alone (it measures time, or owns system state)
filterwarnings = ignore::DeprecationWarning
EOF
cd "$WORK"
# Two files at a time as `make test` runs them, then the `serial` ones alone; junit XML where .ci/run collects
# its stage table.
EDGE_TESTS=(tests/test_runtime.py tests/test_plc_types.py tests/test_serve_loop.py
  tests/test_reconnect.py tests/test_security.py tests/test_real_plc.py tests/test_model_check.py
  tests/test_nodemap_fuzz.py tests/test_serve_service.py tests/test_slot_timer.py tests/test_model_process.py
  tests/test_metrics_port.py tests/test_dict_plc.py tests/test_staleness.py tests/test_fault_response.py
  tests/test_realtime.py tests/test_model_fuzz.py tests/test_nodemap_roles.py tests/test_startup_signals.py
  tests/test_fleet_package.py "${@:2}")
edge_pytest() {  # NAME ARGS...: pytest in the edge venv; exit 5 (nothing selected) is no failure
  local name=$1 rc=0
  shift
  local junit=()
  [ -n "${RL2EDGE_JUNIT_DIR:-}" ] && junit=(--junitxml "$RL2EDGE_JUNIT_DIR/$name.xml")
  RL2EDGE_TEST_ARTIFACTS="$WORK/artifacts" RL2EDGE_PLC_SIM_EXE="$(dirname "$MAIN_PY")/rl2edge" \
    "$VENV/bin/python" -m pytest "${junit[@]}" "$@" "${EDGE_TESTS[@]}" || rc=$?
  [ "$rc" -eq 0 ] || [ "$rc" -eq 5 ] || exit "$rc"
}
edge_pytest edge -n 2 --dist loadfile -m "not slow and not integration and not serial"
edge_pytest edge-serial -m "serial and not slow and not integration"
