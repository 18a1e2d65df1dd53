"""Watch the scripted oracle on one task, episode by episode: its jobs and phases over time, with the hand, the job's
object and the joints at each change (how the misses in docs/ORACLE.md were traced).

    python benchmarks/oracle_trace.py libero_90 KITCHEN_SCENE10_put_the_chocolate_pudding --n 10
    python benchmarks/oracle_trace.py libero_10 KITCHEN_SCENE4_put_the_black_bowl --n 50 --failures
    python benchmarks/oracle_trace.py libero_goal turn_on_the_stove --n 2 --npz trace.npz   # every step, for plots

The task is the first of the suite whose name contains TASK; its episodes start from LIBERO's official initial
states 0..n-1 (as benchmarks/oracle_table.py runs them), on the native backend. Steps count from the reset, LIBERO's 5
warm-up steps included (an episode's length does not count them).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import jax  # noqa: E402
import numpy as np  # noqa: E402

from clbench_jax.data import oracle  # noqa: E402
from clbench_jax.sim.scene import build_scene  # noqa: E402
from clbench_jax.tasks.suites import scene_tasks, suite_tasks  # noqa: E402

JOBS = {v: k[2:].lower() for k, v in vars(oracle).items() if k.startswith("J_") and isinstance(v, int)}  # J_PICK -> pick


def trace(suite: str, name: str, n: int, horizon: int = 600, seed: int = 0) -> dict:
    """-> {"task", "success" (n,), "length" (n,), "job"/"phase"/"obj" (steps, n), "target" (steps, n, 3),
    "entities", "joints", and the rollout trace's arrays (n, steps, ...)}."""
    matches = [t for t in suite_tasks(suite) if name in t.name]
    if not matches:
        raise SystemExit(f"no task of {suite} has {name!r} in its name")
    task = matches[0]
    scene = build_scene(scene_tasks(task.scene))
    rows = []

    def wrap(policy):
        def watched(obs, ps, keys):
            act, ps = policy(obs, ps, keys)
            jax.debug.callback(lambda *a: rows.append([np.asarray(x) for x in a]),
                               ps["job"], ps["phase"], ps["a"], ps["target"])
            return act, ps
        return watched

    rec, tr, _ = oracle.run_oracle(scene, [task], n, seed=seed, horizon=horizon, trace=True, wrap=wrap)
    job, phase, obj, target = (np.stack(c) for c in zip(*rows))
    return {"task": task.name, "success": np.asarray(rec.success[:, 0]), "length": np.asarray(rec.length),
            "job": job, "phase": phase, "obj": obj, "target": target, "entities": list(scene.entities),
            "joints": list(scene.joints), **{k: np.asarray(v) for k, v in tr.items()}}


def timeline(t: dict, e: int) -> list[str]:
    """One line per change of (job, phase, object) in episode e."""
    out, prev = [], None
    ents = t["entities"]
    for s in range(t["job"].shape[0]):
        cur = (int(t["job"][s, e]), int(t["phase"][s, e]), int(t["obj"][s, e]))
        if cur != prev:
            who = ents[cur[2]] if cur[2] < len(ents) else f"#{cur[2]}"
            out.append(f"  step {s:3d}  {JOBS[cur[0]]:<12} phase {cur[1]}  {who:<24} hand "
                       f"{np.round(t['ee_pos'][e, s], 3)}  waypoint {np.round(t['target'][s, e], 3)}  "
                       f"q {np.round(t['joint_q'][e, s], 3)}")
            prev = cur
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("suite")
    ap.add_argument("task", help="a part of the task's name")
    ap.add_argument("--n", type=int, default=10, help="initial states (episodes), LIBERO's 0..n-1")
    ap.add_argument("--horizon", type=int, default=600)
    ap.add_argument("--failures", action="store_true", help="print the timelines of failed episodes only")
    ap.add_argument("--npz", default=None, help="also save every step's arrays here")
    a = ap.parse_args(argv)
    if not 1 <= a.n <= 50:
        raise SystemExit("--n must be 1..50 (LIBERO ships 50 initial states per task)")
    t = trace(a.suite, a.task, a.n, a.horizon)
    ok = t["success"]
    print(f"{t['task']}: {int(ok.sum())} of {len(ok)} succeed; lengths {t['length'].tolist()}")
    for e in range(len(ok)):
        if a.failures and ok[e]:
            continue
        print(f"episode {e} (LIBERO state {e}): {'success' if ok[e] else 'failure'} at step {int(t['length'][e])}")
        print("\n".join(timeline(t, e)))
    if a.npz:
        np.savez_compressed(a.npz, **{k: np.asarray(v) for k, v in t.items()})


if __name__ == "__main__":
    main()
