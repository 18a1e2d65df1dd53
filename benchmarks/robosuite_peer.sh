#!/usr/bin/env bash
# Peer baseline: robosuite (LIBERO's simulator) throughput on this machine.
#
# robosuite 1.5.2 needs mujoco==3.3.7 (mujoco 4 breaks it), so it lives in its
# own virtual environment, never the project's main one:
#   ${ROBOSUITE_VENV:-.venv-robosuite}   (relative to the repository root)
# The venv is created and filled on first use; later runs reuse it.
#
# Offscreen camera rendering uses OSMesa (software GL), which needs the system
# package libosmesa6:   apt-get install -y libosmesa6
# This script does not install system packages; without OSMesa it runs the
# no-camera part only (or pass --no-cameras-only yourself).
#
# Usage: benchmarks/robosuite_peer.sh [robosuite_peer.py arguments...]
#        benchmarks/robosuite_peer.sh --help
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
VENV="${ROBOSUITE_VENV:-.venv-robosuite}"
PY="${PYTHON:-python3}"

# Pinned set that was used for benchmarks/results/robosuite_peer_cpu.json
# (robosuite 1.5.2 pulls in the rest; numpy < 2 as robosuite 1.5 expects).
PINS=(
  "robosuite==1.5.2"
  "mujoco==3.3.7"
  "numpy==1.26.4"
  "scipy==1.17.1"
  "numba==0.68.1"
  "llvmlite==0.50.0"
  "PyOpenGL==3.1.10"
  "opencv-python==4.11.0.86"
  "pillow==13.0.0"
)

if [ ! -x "$VENV/bin/python" ]; then
  echo "robosuite_peer: creating venv $VENV" >&2
  "$PY" -m venv "$VENV"
fi
if ! "$VENV/bin/python" - <<'EOF' 2>/dev/null
import importlib.metadata as m, sys
ok = m.version("robosuite") == "1.5.2" and m.version("mujoco") == "3.3.7"
sys.exit(0 if ok else 1)
EOF
then
  echo "robosuite_peer: installing ${PINS[*]} into $VENV" >&2
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "${PINS[@]}"
fi

export MUJOCO_GL="${MUJOCO_GL:-osmesa}"
export PYOPENGL_PLATFORM="${PYOPENGL_PLATFORM:-osmesa}"

EXTRA=()
# (read ldconfig's whole output first: `ldconfig -p | grep -q` under pipefail
# fails at random when grep exits early and ldconfig gets SIGPIPE)
LDCACHE="$(ldconfig -p 2>/dev/null || true)"
if [ "$MUJOCO_GL" = "osmesa" ] && ! grep -q 'libOSMesa\.so' <<<"$LDCACHE"; then
  case " $* " in
    *" --help "*|*" -h "*|*" --no-cameras-only "*) ;;
    *)
      echo "robosuite_peer: libOSMesa not found; camera runs need it:" >&2
      echo "    apt-get install -y libosmesa6" >&2
      echo "robosuite_peer: running the no-camera part only." >&2
      EXTRA+=(--no-cameras-only)
      ;;
  esac
fi

exec "$VENV/bin/python" benchmarks/robosuite_peer.py "$@" ${EXTRA[@]+"${EXTRA[@]}"}
