"""Trained policies in both simulators: each learnability run's kept checkpoint rolled out from the same N initial
states with the same policy-noise keys, on the native backend and in LIBERO's own environment (`backend="libero"`,
rollout.py), as `learnability.py --held-out` does (init-bank seed 1: states the checkpoint was never selected on).

    python benchmarks/learnability.py --demos demos --out runs/learnability        # the checkpoints
    python benchmarks/libero_policy_check.py --runs runs/learnability/state --n 20

Writes benchmarks/results/libero_policy_check_<suite>_<obs>.json after every task; a rerun keeps the tasks already
there with the same N. The target (issue 17): LIBERO's success within 10 points of the native backend's, per task.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import machine, write_json  # noqa: E402
from learnability import HELD_OUT_SEED, held_out_success  # noqa: E402

from clbench_jax.errors import ClbenchError  # noqa: E402
from clbench_jax.lifelong.config import load_config  # noqa: E402

TARGET_POINTS = 10


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", required=True, help="folder of learnability runs, one finished run folder per task")
    ap.add_argument("--n", type=int, default=20, help="initial states (episodes) per task and simulator")
    ap.add_argument("--json", default=None, help="default benchmarks/results/libero_policy_check_<suite>_<obs>.json")
    a = ap.parse_args(argv)
    if a.n < 1:
        raise SystemExit("--n must be at least 1")
    runs = sorted(p.parent for p in Path(a.runs).glob("*/metrics.json")
                  if json.loads(p.read_text()).get("complete"))
    if not runs:
        raise SystemExit(f"no finished run folders (with a complete metrics.json) under {a.runs}")
    first = load_config(runs[0] / "config.yaml")
    path = Path(a.json or Path(__file__).parent / "results" / f"libero_policy_check_{first.suite}_{first.obs}.json")
    old = json.loads(path.read_text()) if path.exists() else {}
    rows = {r["task"]: r for r in old.get("rows", []) if r.get("n") == a.n and r.get("error") is None}
    for run in runs:
        cfg = load_config(run / "config.yaml")
        task = cfg.tasks[0]
        if task in rows:
            continue
        row, t0 = {"task": task, "n": a.n}, time.perf_counter()
        try:
            for backend in ("native", "libero"):
                row[backend] = held_out_success(cfg, str(run), a.n, backend=backend)
            row["gap_points"] = 100 * (row["native"] - row["libero"])
        except ClbenchError as e:  # a failed row; the other tasks go on
            row["error"] = str(e)
        row["seconds"] = time.perf_counter() - t0
        rows[task] = row
        print(json.dumps(row), flush=True)
        done = [r for r in rows.values() if r.get("error") is None]
        write_json(path, {"benchmark": "libero_policy_check", "machine": machine(), "suite": cfg.suite,
                          "obs": cfg.obs, "n": a.n, "init_bank_seed": HELD_OUT_SEED, "target_points": TARGET_POINTS,
                          "rows": list(rows.values()),
                          "native_mean": sum(r["native"] for r in done) / max(len(done), 1),
                          "libero_mean": sum(r["libero"] for r in done) / max(len(done), 1),
                          "tasks_within_target": sum(abs(r["gap_points"]) <= TARGET_POINTS for r in done),
                          "tasks": len(done)})


if __name__ == "__main__":
    main()
