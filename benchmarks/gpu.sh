#!/usr/bin/env bash
# GPU checks in one command (< 8 minutes on an H200): the mjx backend's throughput on the LIBERO-Goal scene with
# MJX-Warp, batch 1,024 to 16,384, state observations. Writes benchmarks/results/sim_throughput_gpu.json.
# Usage (on an NVIDIA machine, from the repo root):  bash benchmarks/gpu.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-python3}
$PY -m pip install -q -e ".[gpu]" && $PY -m pip install -q --no-deps libero==0.1.1
export MUJOCO_GL=egl PYOPENGL_PLATFORM=egl XLA_PYTHON_CLIENT_PREALLOCATE=false
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
timeout 420 $PY benchmarks/sim_throughput.py --backends mjx --mjx-impl warp --batches "" --loop-envs 1 \
  --mjx-batches 1024,4096,16384 --mjx-steps 50 --out benchmarks/results/sim_throughput_gpu.json
