#!/usr/bin/env bash
# GPU checks in one command, section by section, each under its own time limit, each writing its JSON as it goes.
# Prepared for a lent NVIDIA H200 without network (docs/PERFORMANCE.md, "GPU checks": the device calls to make).
#
#   bash benchmarks/gpu.sh                         # install sim rgb agree train grid (limits sum to 535 s)
#   bash benchmarks/gpu.sh install sim rgb agree   # the simulator half (325 s at most) ...
#   bash benchmarks/gpu.sh install train grid      # ... then the rest (255 s; the wheels are not installed twice)
#   GPU_SMOKE=1 bash benchmarks/gpu.sh ...         # tiny sizes, 30-minute limits, any machine: a CPU rehearsal
#
# Sections (limit in seconds; each *_LIMIT_S overrides one; sizes too, see below):
#   install  (45)  wheels carried in .whl/ (benchmarks/gpu_wheels.sh made them: split parts `NAME.part-KK-of-NN` in
#                  .whl/1, .whl/2, ... are joined and checked against .whl/1/SHA256SUMS) -> pip install --no-index
#                  --no-deps --target /tmp/site; never jax (the machine's CUDA jax is used); LIBERO's libero_goal
#                  scene from .whl/*/libero_goal_scene.tar.xz -> /tmp/libero_min (no LIBERO packages needed)
#   sim      (130) mjx backend, impl warp, libero_goal, LIBERO's BC-Transformer in the loop, state observations,
#                  batch SIM_BATCHES (16384,4096,1024) x SIM_STEPS (40) -> sim_throughput_gpu.json
#                  (target: >= 100,000 control steps/s)
#   rgb      (100) the same with two 128 px cameras ray-traced on the device (MuJoCo Warp, sim/warp_render.py),
#                  BC-Transformer RGB, batch RGB_BATCHES (2048,512) x RGB_STEPS (20) -> sim_rgb_gpu.json
#                  (target: >= 20,000 control steps/s)
#   agree    (50)  MJX-Warp vs native MuJoCo on the GPU machine: AGREE_WORLDS (256) x AGREE_STEPS (60), same
#                  initial states and actions -> warp_agreement_gpu.json (hand / object divergence, predicates)
#   train    (120) train steps of BC-Transformer, BC-RNN, BC-ViLT, state, batch 32, one step per dispatch and 10
#                  (make_train_steps' lax.scan); then BC-RNN / BC-ViLT RGB batch 32 -> train_throughput_gpu.json;
#                  then SeqFT, L2M, TAIL, IsCiL, DMPEL state batch 32 -> train_throughput_methods_gpu.json
#                  (--resume: the rows of earlier leases are kept, finished rows are not run again); with
#                  .whlpeer/ carried (LIBERO's policies' wheels), LIBERO's BC-RNN / BC-ViLT torch steps on CUDA too
#   grid     (90)  the grid (mjx-warp, LIBERO-size BC-Transformer; state, then RGB rendered on the device), each
#                  row projecting seed 000's full one-suite grid (190M control steps) -> grid_vs_libero_gpu.json
#   evidence       the lifelong evidence runs (benchmarks/gpu_evidence.sh; not in the default list)
#
# Results go to $RESULTS_DIR, else $OUT (the device tool's folder that comes back), else benchmarks/results; the
# whole log to gpu_sh_<sections>.log there. A section that fails or times out prints why and the next one runs.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-python3}
RES=${RESULTS_DIR:-${OUT:-benchmarks/results}}
SECTIONS=${*:-install sim rgb agree train grid}
SMOKE=${GPU_SMOKE:-0}
SITE=/tmp/site            # fixed: the prebuilt native controller in the scene pack names this path
LIBERO_MIN=/tmp/libero_min
mkdir -p "$RES"
LOG="$RES/gpu_sh_$(echo $SECTIONS | tr ' ' '_').log"
: > "$LOG"
export XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1 MUJOCO_GL=disable  # no section renders with OpenGL
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
if [ -d .whl ]; then  # offline: carried wheels and scene pack
  export PYTHONPATH="$PWD:$SITE:$LIBERO_MIN/site" CLBENCH_CACHE=$LIBERO_MIN/cache
fi

say() { echo "$@" | tee -a "$LOG"; }
# run LIMIT_S CMD...: the command under `timeout`, its output to the log; MuJoCo Warp's per-module load lines stay
# in the log only (thousands of them would push everything else out of a short output tail).
run() {
  local limit=$1; shift
  say "+ timeout $limit $*"
  timeout "$limit" "$@" 2>&1 | tee -a "$LOG" | grep --line-buffered -v "^Module .* load on device"
  local rc=${PIPESTATUS[0]}
  [ "$rc" = 124 ] && say "!! timed out after $limit s (rows written so far are kept)"
  [ "$rc" != 0 ] && [ "$rc" != 124 ] && say "!! exit $rc"
  return 0
}
sz() { if [ "$SMOKE" = 1 ]; then echo "$2"; else echo "$1"; fi; }  # sz GPU_VALUE SMOKE_VALUE

install() {
  set -o pipefail
  local t0=$SECONDS
  if [ ! -d .whl ]; then
    say "no .whl/: using this python's packages (needs mujoco, mujoco-mjx[warp] 3.17.0 and LIBERO: pip install -e '.[warp]')"
  else
    local stage=/tmp/gpu_wheels groups
    rm -rf "$stage" && mkdir -p "$stage"
    groups=$(ls -d .whl/[0-9]* 2>/dev/null)
    [ -n "$groups" ] || { say "!! no carry folders .whl/1, .whl/2, ... (run benchmarks/gpu_wheels.sh here first)"; return 1; }
    say "carried: $(echo $groups)"
    # whole files, then parts joined in order; a missing part means the machine was not the same between calls
    find $groups -maxdepth 1 -type f ! -name '*.part-*' ! -name SHA256SUMS -exec cp {} "$stage"/ \;
    local first name n k p
    for first in $(find $groups -maxdepth 1 -name '*.part-00-of-*' | sort); do
      name=$(basename "$first"); n=${name##*-of-}; name=${name%.part-00-of-*}
      for k in $(seq -f %02g 0 $((10#$n - 1))); do
        p=$(find $groups -maxdepth 1 -name "$name.part-$k-of-$n" | head -1)
        if [ -z "$p" ]; then
          say "!! $name: part $k of $n missing: carry the .whl folder holding it (the machine was given back between calls?)"
          return 1
        fi
        cat "$p" >> "$stage/$name"
      done
    done
    local sums
    sums=$(find $groups -maxdepth 1 -name SHA256SUMS | head -1)
    [ -n "$sums" ] || { say "!! no SHA256SUMS: carry .whl/1"; return 1; }
    sums="$PWD/$sums"
    (cd "$stage" && sha256sum -c --quiet "$sums") || { say "!! checksums differ (parts of another packing?)"; return 1; }
    local mark="$SITE/.clbench-$(sha256sum "$sums" | cut -c1-16)"
    if [ -f "$mark" ]; then
      say "wheels already installed in $SITE"
    else
      local wheels jaxre='/(jax|jaxlib|jax_cuda[0-9]*_(plugin|pjrt))-[0-9]'
      wheels=$(ls "$stage"/*.whl)
      # a jax wheel never replaces a CUDA jax already there (the H200's: jax-cuda13-plugin)
      if echo "$wheels" | grep -q -E "$jaxre" && $PY -c "import jax, sys; sys.exit(jax.default_backend() != 'gpu')"; then
        say "this machine's jax runs on the GPU: the carried jax wheels are not installed"
        wheels=$(echo "$wheels" | grep -v -E "$jaxre")
      fi
      $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" $wheels \
        2>&1 | tee -a "$LOG" || { say "!! pip install failed"; return 1; }
      touch "$mark"
    fi
    if ls "$stage"/*_scene.tar.xz >/dev/null 2>&1; then
      rm -rf "$LIBERO_MIN"
      $PY -c "import sys, tarfile; tarfile.open(sys.argv[1]).extractall('/tmp', filter='data')" "$stage"/*_scene.tar.xz \
        || { say "!! scene pack"; return 1; }
      # the native backend compiles a small C controller; a machine without a C compiler gets the prebuilt one
      if ! command -v cc >/dev/null && ! command -v gcc >/dev/null; then
        mkdir -p "$CLBENCH_CACHE/native_osc" && cp "$LIBERO_MIN"/prebuilt/*.so "$CLBENCH_CACHE/native_osc/"
        say "no C compiler: using the prebuilt native controller"
      fi
    fi
  fi
  command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee -a "$LOG"
  $PY - <<'EOF' 2>&1 | tee -a "$LOG"
import importlib.metadata as md, json, os, sys
import jax, mujoco, warp
from mujoco import mjx
from clbench_jax.sim import libero_source
from clbench_jax.tasks.suites import suite_tasks
print("python", sys.version.split()[0], "jax", jax.__version__, jax.devices(), "mujoco", mujoco.__version__,
      "mujoco-mjx", md.version("mujoco-mjx"), "warp", warp.config.version)
print("scene cache", libero_source.cache_root(), "tasks", len(suite_tasks("libero_goal")))
pack = os.path.join(os.environ.get("CLBENCH_CACHE", ""), "..", "PACK.json")
if os.path.exists(pack) and json.load(open(pack))["cache_tag"] != libero_source.cache_root().name:
    sys.exit("scene pack made for other LIBERO package versions")
if os.environ.get("SMOKE") != "1" and jax.default_backend() != "gpu":
    sys.exit(f"jax runs on {jax.default_backend()}, not a GPU")
EOF
  local rc=${PIPESTATUS[0]}
  say "install: $((SECONDS - t0)) s"
  return "$rc"
}

# LIBERO's PyTorch policies as the train peer, only where their wheels were carried in .whlpeer/ (robomimic,
# rlinf-libero, easydict, termcolor; the machine's torch): a python that sees them, else nothing.
peer_python() {
  [ -d .whlpeer ] || return 1
  $PY -m pip install -q --no-index --no-deps --no-compile --target /tmp/torchpeer_site .whlpeer/*.whl >&2 || return 1
  printf '#!/bin/sh\nPYTHONPATH=/tmp/torchpeer_site exec %s "$@"\n' "$(command -v $PY)" > /tmp/torchpeer_python
  chmod +x /tmp/torchpeer_python && /tmp/torchpeer_python -c "import libero.lifelong.models" >&2 && echo /tmp/torchpeer_python
}

export -f say install  # the install section runs in a child shell under `timeout`
export PY SMOKE SITE LIBERO_MIN LOG
for s in $SECTIONS; do
  say "=== gpu.sh: $s ($(date -u +%H:%M:%S))"
  case $s in
    install)
      timeout "${INSTALL_LIMIT_S:-$(sz 45 1800)}" bash -c install || { say "!! install failed or timed out: no section can run"; exit 1; } ;;
    sim)
      run "${SIM_LIMIT_S:-$(sz 130 1800)}" $PY benchmarks/sim_throughput.py --backends mjx --mjx-impl warp --policy bc_transformer \
        --loop-envs 0 --batches "" --mjx-batches "${SIM_BATCHES:-$(sz 16384,4096,1024 2)}" \
        --mjx-steps "${SIM_STEPS:-$(sz 40 3)}" --out "$RES/sim_throughput_gpu.json" ;;
    rgb)
      run "${RGB_LIMIT_S:-$(sz 100 1800)}" $PY benchmarks/sim_throughput.py --backends mjx --mjx-impl warp --policy bc_transformer \
        --loop-envs 0 --batches "" --mjx-batches "" --mjx-rgb-batches "${RGB_BATCHES:-$(sz 2048,512 2)}" \
        --mjx-rgb-steps "${RGB_STEPS:-$(sz 20 2)}" --out "$RES/sim_rgb_gpu.json" ;;
    agree)
      run "${AGREE_LIMIT_S:-$(sz 50 1800)}" $PY benchmarks/warp_agreement.py --worlds "${AGREE_WORLDS:-$(sz 256 2)}" \
        --steps "${AGREE_STEPS:-$(sz 60 3)}" --out "$RES/warp_agreement_gpu.json" ;;
    train)
      # keep the rows of earlier leases: start from the committed file
      [ -f "$RES/train_throughput_gpu.json" ] || [ "$SMOKE" = 1 ] \
        || cp benchmarks/results/train_throughput_gpu.json "$RES/" 2>/dev/null
      tsz="--steps $(sz 10 1) --warmup $(sz 2 0) --seq-len $(sz 10 2) --img $(sz 128 32)"
      end=$((SECONDS + ${TRAIN_LIMIT_S:-$(sz 120 1800)}))
      run "${TRAIN_LIMIT_S:-$(sz 120 1800)}" $PY benchmarks/train_throughput.py --policies transformer,rnn,vilt --modes state \
        --batches "$(sz 32 2)" --scan 1,$(sz 10 2) $tsz --timeout 75 --peer-python "" --resume \
        --out "$RES/train_throughput_gpu.json"
      left=$((end - SECONDS))
      if [ "$left" -gt 20 ]; then
        run "$left" $PY benchmarks/train_throughput.py --policies rnn,vilt --modes rgb --batches "$(sz 32 2)" $tsz \
          --timeout 75 --peer-python "" --resume --out "$RES/train_throughput_gpu.json"
      fi
      left=$((end - SECONDS))
      if [ "$left" -gt 20 ]; then  # issue 21: the frozen-base methods' step, SeqFT beside them
        run "$left" $PY benchmarks/train_throughput.py --policies transformer --modes state --batches "$(sz 32 2)" \
          $tsz --timeout 75 --peer-python "" --algos seqft,l2m,tail,iscil,dmpel --resume \
          --out "$RES/train_throughput_methods_gpu.json"
      fi
      left=$((end - SECONDS))
      if [ "$left" -gt 20 ] && PEER=$(peer_python); then  # LIBERO's own BC-RNN / BC-ViLT steps on CUDA
        run "$left" $PY benchmarks/train_throughput.py --policies "" $tsz --timeout 75 --peer-python "$PEER" \
          --peer-device cuda --peer-policies rnn,vilt --peer-batches "$(sz 32 2)" --resume \
          --out "$RES/train_throughput_gpu.json"
      fi ;;
    grid)
      run "${GRID_LIMIT_S:-$(sz 90 1800)}" $PY benchmarks/grid_vs_libero.py --ways grid --backend mjx --mjx-impl warp \
        --rgb-backend mjx --policy-size "$(sz libero small)" --checkpoints "$(sz 8 1)" --tasks "$(sz 2 1)" \
        --rollouts "$(sz 20 2)" --horizon "$(sz 100 2)" --rgb-checkpoints "$(sz 2 1)" --rgb-horizon "$(sz 40 2)" \
        --out "$RES/grid_vs_libero_gpu.json" ;;
    evidence)
      PY=$PY bash benchmarks/gpu_evidence.sh ;;
    *) say "gpu.sh: unknown section $s (install | sim | rgb | agree | train | grid | evidence)"; exit 2 ;;
  esac
done
say "=== gpu.sh: done ($(date -u +%H:%M:%S)); results in $RES"
