#!/usr/bin/env bash
# What only a GPU can show about training (benchmarks/gpu_check.py): PPO, SAC and ppo_lstm on the GPU next to
# the CPU on the same seed, --compile, TF32, TensorFlow's XLA on the GPU, --nproc 2 when there are two GPUs.
# Under 10 minutes on one GPU; writes benchmarks/results/gpu_check.{json,md,png}.
#
#   scripts/gpu_check.sh                   # on a GPU machine, after `make install`
#   scripts/gpu_check.sh --device cpu      # dry mode: the same commands on tiny budgets, on the CPU
#   scripts/gpu_check.sh --out DIR         # results elsewhere
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-.venv/bin/python}"
if [ ! -x "$PY" ]; then
  echo "gpu_check: $PY not found; run \`make install\` first (or set PYTHON)" >&2
  exit 2
fi
exec "$PY" benchmarks/gpu_check.py "$@"
