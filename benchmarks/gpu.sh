#!/usr/bin/env bash
# GPU checks in one command (< 8 minutes on an H200, plus <= 9 for the train-throughput part at the end): the mjx
# backend's throughput on the LIBERO-Goal scene with MJX-Warp, batch 1,024 to 16,384, state observations. Writes
# benchmarks/results/sim_throughput_gpu.json.
# Usage (on an NVIDIA machine, from the repo root):  bash benchmarks/gpu.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-python3}
$PY -m pip install -q -e ".[gpu]" && $PY -m pip install -q --no-deps libero==0.1.1
export MUJOCO_GL=egl PYOPENGL_PLATFORM=egl XLA_PYTHON_CLIENT_PREALLOCATE=false
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
timeout 420 $PY benchmarks/sim_throughput.py --backends mjx --mjx-impl warp --batches "" --loop-envs 1 \
  --mjx-batches 1024,4096,16384 --mjx-steps 50 --out benchmarks/results/sim_throughput_gpu.json

# Train-step throughput (issue 4): BC-RNN / BC-Transformer / BC-ViLT, state and RGB, batch 32 and 256, with LIBERO's
# PyTorch policies on CUDA as the peer where its venv can be built (benchmarks/libero_train_peer.sh; skipped if not).
# Writes benchmarks/results/train_throughput_gpu.json.
PEER=""
if LIBERO_PEER_VENV=${LIBERO_PEER_VENV:-/tmp/torchpeer} bash benchmarks/libero_train_peer.sh --params-only >/dev/null 2>&1; then
  PEER=${LIBERO_PEER_VENV:-/tmp/torchpeer}/bin/python
fi
timeout 540 $PY benchmarks/train_throughput.py --batches 32,256 --steps 10 --warmup 2 --timeout 240 \
  --peer-python "$PEER" --peer-device cuda --peer-policies transformer,vilt,rnn --peer-batches 32,256 \
  --out benchmarks/results/train_throughput_gpu.json || echo "train_throughput: timed out or failed (see above)"

# The evaluation grid against LIBERO's evaluation loop (20 env workers, one batched policy call per step) on the
# same workload: 8 checkpoints x 2 tasks x 2 variants x 20 rollouts, 600 steps with state observations (grid on
# mjx-warp, the whole episode on the GPU); 2 checkpoints, 100 steps with RGB (native physics + rendering on the host
# cores, the policy on the GPU). The JSON's full_grid_hours_projected is seed 000's full one-suite grid (190M control steps)
# at the measured rate; the target is < 2 hours with RGB. Not yet run on a GPU.
timeout 600 $PY benchmarks/grid_vs_libero.py --backend mjx --mjx-impl warp --checkpoints 8 --rollouts 20 \
  --horizon 600 --rgb-checkpoints 2 --rgb-horizon 100 --chunk 640 --out benchmarks/results/grid_vs_libero_gpu.json \
  || echo "grid_vs_libero: timed out or failed (see above)"
