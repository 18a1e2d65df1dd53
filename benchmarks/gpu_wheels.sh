#!/usr/bin/env bash
# Run HERE, on a machine with network and this project's venv (LIBERO installed), before a GPU lease: prepares what
# benchmarks/gpu.sh needs on a lent NVIDIA H200, which has no network and no mujoco / warp, and prints the device
# calls to make. Nothing it writes is committed (.whl/ is ignored).
#
#   bash benchmarks/gpu_wheels.sh            # ~6 minutes on 2 cores (recompressing warp-lang is most of it)
#
# What the H200 image lacks (docs/.../KINDS.md lists its packages: python 3.12, jax 0.11.2 with CUDA 13, flax,
# optax, orbax, chex, scipy, etils, h5py, ...): mujoco 3.17.0, mujoco-mjx 3.17.0 (ships MuJoCo Warp), warp-lang
# 1.18.0, trimesh (mjx imports it); and LIBERO's libero_goal scene. jax is never carried: the machine's is the CUDA
# build. glfw / pyopengl are not needed (gpu.sh runs with MUJOCO_GL=disable: nothing renders with OpenGL).
#
# A call carries at most 64 MiB including the repository's own files, so:
#  - wheels are recompressed with LZMA (benchmarks/gpu_pack.py repack: same files; warp-lang 149 -> 105 MB);
#  - LIBERO's packages (~1.2 GB installed) are replaced by a scene pack (~25 MB): the libero_goal scene captures
#    that clbench_jax.sim.libero_source caches under ~/.cache/clbench_jax/libero_scenes, the 96 asset files their
#    MJCF names, libero_goal's BDDL and init-state files, the packages' METADATA and the MiniLM embedding cache;
#  - everything is dealt into carry folders .whl/1, .whl/2, ... each within what one call can take beside the
#    repository (large files in parts, `NAME.part-KK-of-NN`, joined and checked by gpu.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
[ -x "$PY" ] || PY=python3
W=.whl
mkdir -p "$W/download" "$W/pack"
exclude=$(git rev-parse --git-path info/exclude)
mkdir -p "$(dirname "$exclude")" && { grep -qxF '/.whl/' "$exclude" 2>/dev/null || echo '/.whl/' >> "$exclude"; }
git check-ignore -q "$W/1/x" || { echo "$W/ is not ignored by git: fix .gitignore"; exit 1; }

# 1. wheels for python 3.12, manylinux x86_64 (the H200 image's python)
plat=""
for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux1_x86_64; do
  plat="$plat --platform $p"
done
$PY -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp $plat -d "$W/download" \
  mujoco==3.17.0 mujoco-mjx==3.17.0 warp-lang==1.18.0 trimesh==5.2.0
ls "$W/download"/*.whl | grep -E '/(jax|jaxlib)-' && { echo "no jax wheels: the H200's jax is its CUDA build"; exit 1; }

# 2. LZMA recompression (skipped when done before)
for w in "$W"/download/*.whl; do
  out="$W/pack/$(basename "$w")"
  [ "$out" -nt "$w" ] || $PY benchmarks/gpu_pack.py repack "$w" "$out"
done

# 3. the libero_goal scene pack (its captures are made here first if missing: LIBERO must be installed here)
PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" $PY benchmarks/gpu_pack.py scenes "$W/pack/libero_goal_scene.tar.xz"

# 4. carry folders: 64 MiB per call, less what travels anyway (tracked and untracked-not-ignored files, shared/),
#    less 2 MiB of margin
repo=$( (git ls-files -z; git ls-files -z -o --exclude-standard) | xargs -0 -r stat -c %s 2>/dev/null \
        | awk '{s += $1} END {print s + 0}')
shared=$( [ -d shared ] && du -sb shared | cut -f1 || echo 0)
budget=$(awk -v r="$repo" -v s="$shared" 'BEGIN {printf "%.1f", (64 * 2^20 - r - s - 2 * 2^20) / 1e6}')
echo "the repository sends $(awk -v r="$repo" 'BEGIN {printf "%.1f", r / 1e6}') MB with every call: $budget MB left per call"
echo "carry folders:"
n=$($PY benchmarks/gpu_pack.py groups "$W/pack" "$W" "$budget" | tee /dev/stderr | grep -c '^  ')

# 5. the device calls (tool `run`), back to back: a machine is given back ~30 s after a call
last=$n
echo
echo "Device calls, back to back (the machine is held only ~30 s after each; .whl/K carried earlier stays there):"
k=1
echo "  $k. run carry=[\".whl/1\"] timeout_s=120 command: nvidia-smi -L; python3 -c 'import jax; print(jax.__version__, jax.devices())'; command -v cc gcc; ls -la .whl/*"
while [ $((k + 1)) -lt "$last" ]; do
  k=$((k + 1))
  echo "  $k. run carry=[\".whl/$k\"] timeout_s=60 command: ls -la .whl/*"
done
if [ "$last" -gt 1 ]; then k=$((k + 1)); carry="[\".whl/$last\"]"; else carry="[]"; fi
echo "  $k. run carry=$carry timeout_s=400 command: bash benchmarks/gpu.sh install sim rgb agree"
echo "  $((k + 1)). run carry=[] timeout_s=300 command: bash benchmarks/gpu.sh install train grid"
echo "  then give_back, and copy the returned *_gpu.json (and gpu_sh_*.log) from files_at into benchmarks/results/."
echo "  (One call instead of the last two: bash benchmarks/gpu.sh, timeout_s=600: the sections' limits sum to 535 s.)"
