"""Learnability: single-task BC (one stage of the lifelong loop, algo seqft) on each task of a suite from its oracle
demos; success from the loop's own evaluation (fixed initial-state bank, best checkpoint as LIBERO selects it).

    clbench demos collect --suite libero_goal --n 50 --no-images --out demos
    python benchmarks/learnability.py --demos demos --out runs/learnability     # resumes per task

Writes benchmarks/results/learnability_<obs>_cpu.json (atomically, after every task).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import add_profile_arg, machine, maybe_profile, write_json  # noqa: E402

from clbench_jax.data import hdf5  # noqa: E402
from clbench_jax.errors import ClbenchError  # noqa: E402
from clbench_jax.lifelong.config import load_config  # noqa: E402
from clbench_jax.lifelong.data import demo_path  # noqa: E402
from clbench_jax.lifelong.loop import run_lifelong  # noqa: E402
from clbench_jax.tasks.suites import suite_tasks  # noqa: E402

TARGET = 0.8


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--suite", default="libero_goal")
    ap.add_argument("--obs", default="state", choices=["state", "rgb"])
    ap.add_argument("--demos", required=True, help="folder written by `clbench demos collect --out`")
    ap.add_argument("--out", default="runs/learnability", help="one lifelong results folder per task")
    ap.add_argument("--config", default="configs/learnability.yaml", help="training config (flags below override)")
    ap.add_argument("--epochs", type=int, default=None)
    ap.add_argument("--tasks", nargs="*", default=None, help="task names (default: the whole suite)")
    ap.add_argument("--json", default=None, help="default benchmarks/results/learnability_<obs>_cpu.json")
    add_profile_arg(ap)
    a = ap.parse_args(argv)
    with maybe_profile(a.profile):
        run(a)


def run(a) -> None:
    path = a.json or str(Path(__file__).parent / "results" / f"learnability_{a.obs}_cpu.json")
    names = a.tasks or [t.name for t in suite_tasks(a.suite)]
    rows, t_all = [], time.perf_counter()
    for name in names:
        cfg = load_config(a.config, suite=a.suite, obs=a.obs, algo="seqft", tasks=[name], demos_dir=a.demos,
                          epochs=a.epochs)
        task = next(t for t in suite_tasks(a.suite) if t.name == name)
        f = demo_path(a.demos, task)
        n_demos = int(hdf5.read_meta(f)["num_demos"]) if os.path.exists(f) else 0
        row = {"task": name, "n_demos": n_demos}
        try:
            m = run_lifelong(cfg, os.path.join(a.out, a.obs, name), progress=True)
            row.update(success=m["success_matrix"][0][0], curve=m["curves"][0], curve_epochs=m["curve_epochs"][0],
                       best_epoch=m["best_epoch"][0], final_loss=m["losses"][0][-1] if m["losses"][0] else None,
                       seconds=sum(m["seconds"]))
        except ClbenchError as e:  # e.g. no demos for a task the oracle cannot solve: a failed row, the rest goes on
            row.update(success=None, error=str(e))
        rows.append(row)
        print(json.dumps(row), flush=True)
        done = [r["success"] for r in rows if r["success"] is not None]
        write_json(path, {"benchmark": "learnability", "machine": machine(), "suite": a.suite, "obs": a.obs,
                          "config": {k: v for k, v in cfg.to_dict().items() if k not in ("tasks", "demos_dir")},
                          "target": TARGET, "rows": rows,
                          "tasks_at_target": sum(s >= TARGET for s in done), "tasks_run": len(done),
                          "mean_success": sum(done) / max(len(done), 1),
                          "wall_seconds": time.perf_counter() - t_all})


if __name__ == "__main__":
    main()
