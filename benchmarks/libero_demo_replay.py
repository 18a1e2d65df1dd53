"""Demonstrations written by this project, replayed in LIBERO's own environment: each demo's stored actions played
open-loop from its stored initial state (and fixture placement), once on the native backend (which recorded them:
every replay must succeed there, at the demo's last step) and once in LIBERO's `OffScreenRenderEnv`
(`backend="libero"`). Do the files a user trains on describe episodes that succeed in real LIBERO?

    clbench demos collect --suite libero_goal --n 50 --no-images --out demos
    python benchmarks/libero_demo_replay.py --demos demos --n 10

Writes benchmarks/results/libero_demo_replay_<suite>.json after every task; a rerun keeps the tasks already there
with the same N. Open-loop replay in another simulator is a hard test: contact differences under a millimetre grow
over hundreds of steps (docs/RESULTS.md, the LIBERO check's replay column), so a drop here is expected on
contact-rich tasks and measures how far a demo's success depends on this simulator's exact contacts.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import jax  # noqa: E402
import numpy as np  # noqa: E402
from common import machine, write_json  # noqa: E402

from clbench_jax.data import hdf5  # noqa: E402
from clbench_jax.data.collect import scene_of, task_file  # noqa: E402
from clbench_jax.sim import rollout  # noqa: E402
from clbench_jax.tasks.suites import suite_tasks  # noqa: E402


def replay(task, path: Path, n: int, workers: int) -> dict:
    """Replay the first n demos of a task file in both simulators -> the task's row."""
    scene = scene_of(task)
    demos = hdf5.read_demos(path, keys=[])[:n]
    T = max(len(d["actions"]) for d in demos)
    acts = np.stack([np.pad(d["actions"], ((0, T - len(d["actions"])), (0, 0)), mode="edge") for d in demos])
    ids = np.full(len(demos), scene.task_index(task.name))
    goals = jax.tree.map(lambda x: np.asarray(x)[ids][:, None], rollout.task_stack(scene).goal)
    attr = lambda k: np.stack([d["attrs"][k] for d in demos])  # noqa: E731
    batch = rollout.EpisodeBatch(task_ids=ids, goals=goals, state=attr("init_state"), mocap=attr("mocap"),
                                 q0=attr("controller_q0"), keys=np.zeros((len(demos), 2), np.uint32))
    pol, p0 = rollout.replay_policy(acts.astype(np.float32))
    lengths = np.array([len(d["actions"]) for d in demos])
    native = rollout.rollout(scene, pol, p0, batch, T + 5)
    lib, rep = rollout.rollout(scene, pol, p0, batch, T + 5, backend="libero", libero_workers=workers,
                               libero_report=True)
    return {"task": task.name, "n": len(demos), "mean_demo_length": float(lengths.mean()),
            "native_success": float(native.success[:, 0].mean()),
            "native_at_demo_end": float((native.success[:, 0] & (native.length == lengths)).mean()),
            "libero_success": float(lib.success[:, 0].mean()),
            "libero_own_success": float(rep.libero_success.mean()),
            "libero_errors": {str(k): v for k, v in rep.errors.items()}}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--demos", required=True, help="folder written by `clbench demos collect --out`")
    ap.add_argument("--suite", default="libero_goal")
    ap.add_argument("--n", type=int, default=10, help="demos replayed per task (the file's first N)")
    ap.add_argument("--workers", type=int, default=2, help="LIBERO worker processes")
    ap.add_argument("--json", default=None, help="default benchmarks/results/libero_demo_replay_<suite>.json")
    a = ap.parse_args(argv)
    if a.n < 1 or a.workers < 1:
        raise SystemExit("--n and --workers must be at least 1")
    tasks = [t for t in suite_tasks(a.suite) if task_file(a.demos, t).exists()]
    if not tasks:
        raise SystemExit(f"no demo files of {a.suite} under {a.demos}")
    path = Path(a.json or Path(__file__).parent / "results" / f"libero_demo_replay_{a.suite}.json")
    old = json.loads(path.read_text()) if path.exists() else {}
    rows = {r["task"]: r for r in old.get("rows", []) if r.get("n_asked") == a.n}
    for task in tasks:
        if task.name in rows:
            continue
        t0 = time.perf_counter()
        row = replay(task, task_file(a.demos, task), a.n, a.workers)
        row.update(n_asked=a.n, seconds=time.perf_counter() - t0)
        rows[task.name] = row
        print(json.dumps(row), flush=True)
        done = list(rows.values())
        write_json(path, {"benchmark": "libero_demo_replay", "machine": machine(), "suite": a.suite,
                          "demos": str(a.demos), "rows": done,
                          "native_success": float(np.mean([r["native_success"] for r in done])),
                          "libero_success": float(np.mean([r["libero_success"] for r in done])),
                          "libero_own_success": float(np.mean([r["libero_own_success"] for r in done]))})


if __name__ == "__main__":
    main()
