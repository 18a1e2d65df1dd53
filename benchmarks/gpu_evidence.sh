#!/usr/bin/env bash
# The lifelong evidence runs of configs/evidence_libero_goal.yaml (docs/RESULTS.md), one process per method x seed,
# all at once on a GPU machine: the policy trains and acts on the GPU, each process steps its own native MuJoCo
# worlds on a host core. Every run resumes per stage (rerun to continue), so a deadline loses at most a stage.
#
#   EVIDENCE_RUNS="seqft:1 er:1 ewc:1"  EVIDENCE_DEADLINE_S=400  bash benchmarks/gpu_evidence.sh
#
# Demos: runs/demos (a folder of <task>_demo.hdf5), or .carry/demos_v3.tar.xz unpacked into it. Embeddings: through
# the MiniLM cache ($CLBENCH_CACHE), so a machine without MiniLM's weights runs from a carried cache.
# Results: runs/evidence_gpu/train/<method>_s<seed>/ and, when $OUT is set, bundles of them in $OUT
# (evidence_<n>.tgz: config, metrics, plots; a run cut short also brings its latest stage checkpoint to resume from,
# and only that one: the grid cannot evaluate the stages left behind).
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-python3}
CONFIG=${EVIDENCE_CONFIG:-configs/evidence_libero_goal.yaml}
RUN=${EVIDENCE_OUT:-runs/evidence_gpu}
RUNS=${EVIDENCE_RUNS:-"seqft:0 er:0 ewc:0 packnet:0 multitask:0 seqft:1 er:1 ewc:1 packnet:1 multitask:1 seqft:2 er:2 ewc:2 packnet:2 multitask:2"}
DEADLINE=${EVIDENCE_DEADLINE_S:-3000}
export XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1
[ -d .carry/cache ] && export CLBENCH_CACHE=${CLBENCH_CACHE:-$PWD/.carry/cache}
if [ ! -e runs/demos ] && [ -f .carry/demos_v3.tar.xz ]; then
  mkdir -p runs && tar xJf .carry/demos_v3.tar.xz -C runs && ln -s demos_v3 runs/demos
fi
mkdir -p "$RUN/logs"
pids=()
for r in $RUNS; do
  m=${r%%:*}; s=${r##*:}
  timeout -s INT "$DEADLINE" $PY -c "
import sys
from clbench_jax.eval.run import load_run_config, train_config
from clbench_jax.lifelong.loop import run_lifelong
m = run_lifelong(train_config(load_run_config('$CONFIG'), '$m', $s), '$RUN/train/${m}_s$s', progress=False)
print('DONE', '$m', $s, 'FWT %.3f NBT %.3f AUC %.3f' % (m['fwt'], m['nbt'], m['auc']))
" > "$RUN/logs/${m}_s$s.log" 2>&1 &
  pids+=($!)
done
echo "gpu_evidence: ${#pids[@]} runs started $(date -u +%H:%M:%S), deadline ${DEADLINE}s"
wait "${pids[@]}"
echo "gpu_evidence: finished $(date -u +%H:%M:%S)"
grep -h "DONE\|Error\|error" "$RUN"/logs/*.log | tail -40

[ -n "${OUT:-}" ] || exit 0
# Bundle for the trip back: everything but checkpoints; an incomplete run also brings its latest stage.
$PY - "$RUN" "$OUT" <<'EOF'
import json, os, sys, tarfile
run, out = sys.argv[1], sys.argv[2]


def size_of(path):
    if not os.path.isdir(path):
        return os.path.getsize(path)
    return sum(os.path.getsize(os.path.join(p, f)) for p, _, fs in os.walk(path) for f in fs)


bundles, size = [[]], 0
for name in sorted(os.listdir(os.path.join(run, "train"))):
    d = os.path.join(run, "train", name)
    files = [os.path.join(d, f) for f in os.listdir(d) if f != "checkpoints"]
    try:
        complete = json.load(open(os.path.join(d, "metrics.json")))["complete"]
    except (OSError, ValueError, KeyError):
        complete = False
    ck = os.path.join(d, "checkpoints")
    steps = sorted(int(s) for s in os.listdir(ck) if s.isdigit()) if os.path.isdir(ck) else []
    if not complete and steps:
        files.append(os.path.join(ck, str(steps[-1])))
    n = sum(size_of(x) for x in files)
    if size + n > 12e6 and bundles[-1]:
        bundles.append([]); size = 0
    bundles[-1].extend(files); size += n
    print(name, "complete" if complete else f"stopped after stage {steps[-1] if steps else None}", f"{n/1e6:.1f} MB")
for i, files in enumerate(b for b in bundles if b):
    with tarfile.open(os.path.join(out, f"evidence_{i}.tgz"), "w:gz") as t:
        for f in files:
            t.add(f, arcname=os.path.relpath(f, run))
with tarfile.open(os.path.join(out, "evidence_logs.tgz"), "w:gz") as t:
    t.add(os.path.join(run, "logs"), arcname="logs")
EOF
