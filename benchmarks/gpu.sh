#!/usr/bin/env bash
# GPU checks in one command, section by section, each under its own time limit, each writing its JSON as it goes.
#
#   bash benchmarks/gpu.sh                  # every section (about 25 minutes on an H200)
#   bash benchmarks/gpu.sh train            # only the train-step throughput (about 3 minutes)
#   bash benchmarks/gpu.sh train evidence   # ... then the lifelong evidence runs (benchmarks/gpu_evidence.sh)
#
# Sections:
#   sim       the mjx backend (MJX-Warp) on the LIBERO-Goal scene, batch 1,024 to 16,384, state observations
#             -> benchmarks/results/sim_throughput_gpu.json (< 7 min)
#   train     train-step throughput (issue 4; TRAIN_POLICIES, TRAIN_LIMIT_S, TRAIN_ARGS="--resume" to add rows): BC-RNN / BC-Transformer / BC-ViLT, state and RGB, batch 32 and 256,
#             LIBERO's PyTorch policies on CUDA as the peer -> benchmarks/results/train_throughput_gpu.json
#   grid      the evaluation grid against LIBERO's evaluation loop on the same workload (grid on mjx-warp with
#             state observations; native physics + rendering on the host cores with RGB)
#             -> benchmarks/results/grid_vs_libero_gpu.json (< 10 min)
#   evidence  the lifelong evidence runs of configs/evidence_libero_goal.yaml in parallel, one process each
#             (benchmarks/gpu_evidence.sh; set EVIDENCE_RUNS and EVIDENCE_DEADLINE_S)
#
# Installation: with network, `pip install -e .[gpu]`. A machine without network (a lent accelerator) gets the
# wheels carried in .whl/ (mujoco, libero's data) and, for the peer, .whlpeer/ (robomimic, rlinf-libero, easydict,
# termcolor); torch, jax, flax, optax and orbax are taken from that machine's python.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-python3}
RES=${RESULTS_DIR:-benchmarks/results}
SECTIONS=${*:-sim train grid}
mkdir -p "$RES"
export MUJOCO_GL=${MUJOCO_GL:-egl} PYOPENGL_PLATFORM=${PYOPENGL_PLATFORM:-egl} XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1

if [ -d .whl ]; then
  $PY -m pip install -q --no-index --no-deps --no-compile --target /tmp/clbench_site .whl/*.whl || exit 1
  export PYTHONPATH="$PWD:/tmp/clbench_site${PYTHONPATH:+:$PYTHONPATH}"
else
  $PY -m pip install -q -e ".[gpu]" && $PY -m pip install -q --no-deps libero==0.1.1 || exit 1
fi
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
$PY -c "import jax, flax, optax, orbax.checkpoint as o, mujoco; print('jax', jax.__version__, jax.devices(), 'flax', flax.__version__, 'optax', optax.__version__, 'orbax', o.__version__, 'mujoco', mujoco.__version__)"

# LIBERO's policies for the peer: its own venv where pip can reach PyPI, else the carried wheels on this python.
peer_python() {
  if [ -d .whlpeer ]; then
    $PY -m pip install -q --no-index --no-deps --no-compile --target /tmp/torchpeer_site .whlpeer/*.whl >&2 || return 1
    printf '#!/bin/sh\nPYTHONPATH=/tmp/torchpeer_site exec %s "$@"\n' "$(command -v $PY)" > /tmp/torchpeer_python
    chmod +x /tmp/torchpeer_python && /tmp/torchpeer_python -c "import libero.lifelong.models" >&2 && echo /tmp/torchpeer_python
  elif LIBERO_PEER_VENV=${LIBERO_PEER_VENV:-/tmp/torchpeer} bash benchmarks/libero_train_peer.sh --params-only >/dev/null 2>&1; then
    echo "${LIBERO_PEER_VENV:-/tmp/torchpeer}/bin/python"
  fi
}

for s in $SECTIONS; do
  echo "=== gpu.sh: $s ($(date -u +%H:%M:%S))"
  case $s in
    sim)
      timeout 420 $PY benchmarks/sim_throughput.py --backends mjx --mjx-impl warp --batches "" --loop-envs 1 \
        --mjx-batches 1024,4096,16384 --mjx-steps 50 --out "$RES/sim_throughput_gpu.json" \
        || echo "sim_throughput: timed out or failed (see above)" ;;
    train)
      PEER=$(peer_python || true)
      echo "peer python: ${PEER:-none}"
      timeout ${TRAIN_LIMIT_S:-540} $PY benchmarks/train_throughput.py --policies ${TRAIN_POLICIES:-transformer,rnn,vilt} \
        --batches 32,256 --steps 10 --warmup 2 --timeout 120 \
        --peer-python "$PEER" --peer-device cuda --peer-policies ${TRAIN_POLICIES:-transformer,vilt,rnn} --peer-batches 32,256 \
        --out "$RES/train_throughput_gpu.json" ${TRAIN_ARGS:-} || echo "train_throughput: timed out or failed (rows so far are kept)" ;;
    grid)
      timeout 600 $PY benchmarks/grid_vs_libero.py --backend mjx --mjx-impl warp --checkpoints 8 --rollouts 20 \
        --horizon 600 --rgb-checkpoints 2 --rgb-horizon 100 --chunk 640 --out "$RES/grid_vs_libero_gpu.json" \
        || echo "grid_vs_libero: timed out or failed (see above)" ;;
    evidence)
      PY=$PY bash benchmarks/gpu_evidence.sh ;;
    *) echo "gpu.sh: unknown section $s (sim | train | grid | evidence)"; exit 2 ;;
  esac
done
