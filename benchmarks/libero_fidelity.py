"""This project's scenes against LIBERO's own environment, for every task: compiled model fields (max |diff| per
field), initial states (max body pose diff after loading LIBERO's state), and open-loop action replay (hand and
body divergence per step, median and 95th percentile over steps and episodes).

    python benchmarks/libero_fidelity.py                          # all 130 tasks; open loop on libero_goal
    python benchmarks/libero_fidelity.py --suites libero_goal --open-loop-tasks 10

Writes benchmarks/results/libero_fidelity_cpu.json. Open loop: random actions (uniform, position deltas halved)
from LIBERO's initial state 0 of each task: the hand sweeps through the scene and touches things, so contacts
are part of it; the divergence where contacts happen is recorded, not asserted (tests/test_libero_scene.py
asserts the contact-free case).
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import clbench_jax  # noqa: E402,F401
import numpy as np  # noqa: E402
from common import machine, write_json  # noqa: E402
from tqdm.auto import tqdm  # noqa: E402

from clbench_jax.sim import fidelity  # noqa: E402
from clbench_jax.sim.scene import build_scene  # noqa: E402
from clbench_jax.tasks.spec import SUITES  # noqa: E402
from clbench_jax.tasks.suites import scene_tasks, suite_tasks  # noqa: E402


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--suites", default=",".join(SUITES))
    p.add_argument("--open-loop-suite", default="libero_goal")
    p.add_argument("--open-loop-tasks", type=int, default=10)
    p.add_argument("--open-loop-steps", type=int, default=100)
    p.add_argument("--out", default="benchmarks/results/libero_fidelity_cpu.json")
    a = p.parse_args(argv)
    tasks = sorted((t for s in a.suites.split(",") for t in suite_tasks(s)), key=lambda t: t.scene)
    scenes: dict = {}
    rows = []
    t0 = time.perf_counter()
    for t in tqdm(tasks, desc="model + initial state"):
        if t.scene not in scenes:
            scenes.clear()  # one scene in memory at a time (tasks are sorted by scene)
            gc.collect()
            scenes[t.scene] = build_scene(scene_tasks(t.scene))
        scene = scenes[t.scene]
        env = fidelity.libero_env(t, seed=0)
        try:
            diffs = fidelity.compare_models(scene, t, env)
            state = max(fidelity.compare_states(scene, t, env, k) for k in (0, 25, 49))
        finally:
            env.close()
        rows.append({"suite": t.suite, "task": t.name, "scene": t.scene, "max_field_diff": max(diffs.values()),
                     "nonzero_fields": {k: v for k, v in diffs.items() if v}, "initial_state_max_diff": state})
    open_loop = []
    rng = np.random.default_rng(0)
    scenes.clear()
    gc.collect()
    for t in tqdm(suite_tasks(a.open_loop_suite)[:a.open_loop_tasks], desc="open loop"):
        if t.scene not in scenes:
            scenes[t.scene] = build_scene(scene_tasks(t.scene))
        scene = scenes[t.scene]
        acts = rng.uniform(-1, 1, (a.open_loop_steps, 7)) * np.array([0.5, 0.5, 0.5, 0.3, 0.3, 0.3, 1.0])
        env = fidelity.libero_env(t, seed=0)
        try:
            out = fidelity.open_loop(scene, t, env, acts, k=0)
        finally:
            env.close()
        open_loop.append({"task": t.name, "hand_m": out["hand"].tolist(), "bodies_m": out["bodies"].tolist()})
    hand = np.concatenate([r["hand_m"] for r in open_loop]) if open_loop else np.zeros(1)
    bodies = np.concatenate([r["bodies_m"] for r in open_loop]) if open_loop else np.zeros(1)
    summary = {"tasks": len(rows), "tasks_all_fields_equal": sum(r["max_field_diff"] == 0 for r in rows),
               "max_field_diff": max(r["max_field_diff"] for r in rows),
               "initial_state_max_diff": max(r["initial_state_max_diff"] for r in rows),
               "open_loop": {"episodes": len(open_loop), "steps": a.open_loop_steps,
                             "hand_median_m": float(np.median(hand)), "hand_p95_m": float(np.percentile(hand, 95)),
                             "hand_max_m": float(hand.max()), "bodies_median_m": float(np.median(bodies)),
                             "bodies_p95_m": float(np.percentile(bodies, 95)), "bodies_max_m": float(bodies.max())}}
    write_json(a.out, {"benchmark": "libero_fidelity", "date": time.strftime("%Y-%m-%d %H:%M:%S"),
                       "machine": machine(), "seconds": round(time.perf_counter() - t0, 1), "config": vars(a),
                       "summary": summary, "tasks": rows, "open_loop": open_loop})
    print(summary)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
