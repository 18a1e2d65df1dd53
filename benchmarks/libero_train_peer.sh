#!/usr/bin/env bash
# Peer baseline for benchmarks/train_throughput.py: LIBERO's own PyTorch policies, training step timed on CPU.
#
# LIBERO's model code needs torch + torchvision + robomimic 0.2.0 + einops + easydict, never the project's env, so it
# lives in its own virtual environment:  ${LIBERO_PEER_VENV:-/tmp/torchpeer}. Created and filled on first use.
#
# Which package: the official PyPI `libero==0.1.1` (wheel and sdist) lacks libero/lifelong/models/modules/ (no
# __init__.py there, so setuptools left it out) and `import libero.lifelong.models` fails. `rlinf-libero==0.1.3`
# (MIT, the RLinf distribution of LIBERO) ships the same libero/lifelong/models/*.py byte for byte plus the missing
# modules/ (rgb, language, transformer, data_augmentation); it installs the same `libero` import package. Only the
# model code is imported (no robosuite, no simulator), so both are installed with --no-deps.
# torch comes from PyPI (its CUDA build runs on CPU; set TORCH_INDEX to e.g. PyTorch's CPU wheel index to use a
# CPU-only build instead).
#
# Usage: benchmarks/libero_train_peer.sh [libero_train_peer.py arguments...]
#   benchmarks/libero_train_peer.sh --policies bc_transformer --batches 32 --steps 3
#   benchmarks/libero_train_peer.sh --params-only --policies bc_transformer,bc_rnn,bc_vilt --lang-dim 384
# benchmarks/train_throughput.py calls the venv's python itself (--peer-python, default /tmp/torchpeer/bin/python).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
VENV="${LIBERO_PEER_VENV:-/tmp/torchpeer}"
PY="${PYTHON:-python3}"

# The set used for benchmarks/results/train_throughput_cpu.json.
PINS=("torch==2.14.1" "torchvision==0.29.1" "numpy" "einops==0.8.2" "easydict==1.14" "tqdm" "termcolor" "matplotlib")
NODEPS=("robomimic==0.2.0" "rlinf-libero==0.1.3")

if [ ! -x "$VENV/bin/python" ]; then
  echo "libero_train_peer: creating venv $VENV" >&2
  "$PY" -m venv "$VENV"
fi
if ! "$VENV/bin/python" -c "import libero.lifelong.models" 2>/dev/null; then
  echo "libero_train_peer: installing ${PINS[*]} + --no-deps ${NODEPS[*]} into $VENV" >&2
  IDX=()
  if [ -n "${TORCH_INDEX:-}" ]; then IDX=(--extra-index-url "$TORCH_INDEX"); fi
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check ${IDX[@]+"${IDX[@]}"} "${PINS[@]}"
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps "${NODEPS[@]}"
fi

exec "$VENV/bin/python" benchmarks/libero_train_peer.py "$@"
