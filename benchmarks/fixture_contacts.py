"""Articulated fixtures against their frames, here and in LIBERO (docs/SIM.md, "Fixture frames").

This project's fixtures are mocap bodies; MuJoCo's parent filter would drop the contacts between a fixture's frame
and its moving parts, which LIBERO's welded root keeps, so sim/scene.py adds them back as explicit pairs
(`scene.frame_pairs`). For the first task of every scene with such pairs, and for every slide or hinge joint of its
fixtures: load LIBERO's initial state 0 in LIBERO's environment and here, push the part along its joint both ways
for one second (20 N on a slide, 0.5 N m on a hinge; no control) and compare where it goes. The same run on the
model without the pairs (the bug) is a row of its own, so the file shows what the pairs change. Last, the cost: native
physics steps per second on libero_goal from LIBERO's initial state 0, with and without its pairs.

    python benchmarks/fixture_contacts.py     # -> benchmarks/results/fixture_contacts.json
"""

from __future__ import annotations

import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import time  # noqa: E402

import mujoco  # noqa: E402
import numpy as np  # noqa: E402
from common import machine, write_json  # noqa: E402

from clbench_jax.sim import fidelity  # noqa: E402
from clbench_jax.sim.scene import build_scene  # noqa: E402
from clbench_jax.tasks.suites import suite_tasks  # noqa: E402

SUITES = ("libero_goal", "libero_spatial", "libero_object", "libero_10", "libero_90")
PUSH = {int(mujoco.mjtJoint.mjJNT_SLIDE): 20.0, int(mujoco.mjtJoint.mjJNT_HINGE): 0.5}


def scene_of(tasks, pairs: bool):
    """The scene of `tasks`; without its frame pairs (the model as it was built before them) when `pairs` is False."""
    scene = build_scene(tasks)
    if not pairs:
        scene.__dict__["frame_pairs"] = ()  # set before `model` is first built, which reads it
    return scene


def main() -> None:
    by_scene = {}  # scene key -> its tasks in the first suite that has it
    for suite in SUITES:
        here = defaultdict(list)
        for t in suite_tasks(suite):
            here[t.scene].append(t)
        by_scene.update({k: v for k, v in here.items() if k not in by_scene})
    rows = []
    for key, tasks in sorted(by_scene.items()):
        scene = build_scene(tasks)
        if not scene.frame_pairs:
            continue
        bare = scene_of(tasks, pairs=False)
        task = tasks[0]
        env = fidelity.libero_env(task)
        m = scene.model
        for joint in scene.joints:
            jt = int(m.jnt_type[m.joint(joint).id])
            for sign in (1.0, -1.0):
                force = sign * PUSH[jt]
                ours, libero = fidelity.push_joint(scene, task, env, joint, force, 500)
                without, _ = fidelity.push_joint(bare, task, env, joint, force, 500)
                rows.append({"scene": key, "task": task.name, "joint": joint, "push": force,
                             "pairs": len(scene.frame_pairs), "libero_q": float(libero[-1]),
                             "ours_q": float(ours[-1]), "max_abs_diff": float(np.abs(ours - libero).max()),
                             "without_pairs_q": float(without[-1]),
                             "without_pairs_max_abs_diff": float(np.abs(without - libero).max())})
                print(rows[-1])
        env.close()
    step_us = {}
    tasks = suite_tasks("libero_goal")
    env = fidelity.libero_env(tasks[0])
    for label, pairs in (("with_pairs", True), ("without_pairs", False)):
        scene = scene_of(tasks, pairs)
        d = fidelity.load_initial_state(scene, tasks[0], env, 0)
        t0 = time.perf_counter()
        for _ in range(2000):
            mujoco.mj_step(scene.model, d)
        step_us[label] = 1e6 * (time.perf_counter() - t0) / 2000
    env.close()
    print(step_us)
    write_json(Path(__file__).parent / "results" / "fixture_contacts.json",
               {"benchmark": "fixture_contacts", "machine": machine(), "seconds": 1.0, "init_state": 0,
                "libero_goal_native_us_per_physics_step": step_us,
                "worst_max_abs_diff": max(r["max_abs_diff"] for r in rows),
                "worst_without_pairs": max(r["without_pairs_max_abs_diff"] for r in rows), "rows": rows})


if __name__ == "__main__":
    main()
