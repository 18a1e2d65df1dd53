"""Which of LIBERO's official initial states are still moving when a policy starts: per task, the objects' motion at
the first policy step after LIBERO's 5 warm-up steps (and nine steps later), on the native backend, holding still;
then, for the tasks named with --libero, the same zero-action steps in LIBERO's own environment from state 0, object
heights side by side (is it LIBERO's state or this simulator?).

    python benchmarks/initial_motion.py                               # -> benchmarks/results/initial_motion_cpu.json
    python benchmarks/initial_motion.py --suites libero_10 --libero LIVING_ROOM_SCENE2_put_both_the_cream_cheese_box_and_the_butter_in_the_basket

The scripted oracle waits for a moving scene to settle before it plans (data/oracle.py, SETTLE_*; docs/ORACLE.md).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import jax  # noqa: E402
import numpy as np  # noqa: E402
from common import machine, scene_jobs, write_json  # noqa: E402
from tqdm.auto import tqdm  # noqa: E402

from clbench_jax import caches  # noqa: E402
from clbench_jax.data.oracle import SETTLE_MOVE, WARMUP  # noqa: E402
from clbench_jax.sim import rollout  # noqa: E402
from clbench_jax.sim.init_states import make_init_bank  # noqa: E402
from clbench_jax.sim.scene import build_scene  # noqa: E402
from clbench_jax.tasks.suites import scene_tasks, suite_tasks  # noqa: E402

SUITES = ("libero_spatial", "libero_object", "libero_goal", "libero_10", "libero_90")
LATE = 9  # policy steps after the first one


def motion(key, tasks, n: int) -> dict:
    """{task: {"moving_first": states moving > SETTLE_MOVE per step at the first policy step, "max_first": m,
    "moving_late": ... LATE steps later}} for the first n official states of each task."""
    scene = build_scene(scene_tasks(key))
    banks = [make_init_bank(scene, t, n, seed=0) for t in tasks]
    ids = np.concatenate([np.full(n, scene.task_index(t.name)) for t in tasks])
    goals = jax.tree.map(lambda x: np.asarray(x)[ids][:, None], rollout.task_stack(scene).goal)
    batch = rollout.EpisodeBatch(task_ids=ids, goals=goals, state=np.concatenate([b.state for b in banks]),
                                 mocap=np.concatenate([b.mocap for b in banks]),
                                 keys=np.asarray(jax.random.split(jax.random.PRNGKey(0), len(ids))),
                                 q0=np.concatenate([b.q0 for b in banks]))
    policy, p0 = rollout.zero_policy()
    _, tr = rollout.rollout(scene, policy, p0, batch, LATE + 1, backend="native", trace=True, warmup=WARMUP,
                            stop_at_success=False)
    pos = np.asarray(tr["entity_pos"])  # (N, WARMUP + LATE + 2, E, 3): readings before each step

    def step_move(k):  # largest displacement of any object over the step into reading k
        return np.abs(pos[:, k] - pos[:, k - 1]).max(axis=(1, 2))

    first, late = step_move(WARMUP + 1), step_move(WARMUP + 1 + LATE)
    out = {}
    for t in tasks:
        m = ids == scene.task_index(t.name)
        out[t.name] = {"n": n, "moving_first": int((first[m] > SETTLE_MOVE).sum()),
                       "max_first": float(first[m].max()), "moving_late": int((late[m] > SETTLE_MOVE).sum())}
    del scene
    caches.release()
    return out


def libero_side_by_side(name: str, steps: int = 8) -> dict:
    """Object heights over `steps` zero-action steps from state 0, here (native, the project's OSC) and in LIBERO's
    environment: {"bodies": [...], "ours": [[z...] per step], "libero": [...], "max_abs_diff": m}."""
    from clbench_jax.sim import fidelity

    task = next(t for s in SUITES for t in suite_tasks(s) if t.name == name)
    scene = build_scene(scene_tasks(task.scene))
    m = scene.model
    env = fidelity.libero_env(task)
    lm = env.sim.model._model
    bodies = [lm.body(b).name for b in range(lm.nbody) if lm.body(b).name.endswith("_main")]
    ours, libero = [], []
    for d, ld in fidelity.play_both(scene, task, env, np.tile([0, 0, 0, 0, 0, 0, -1.0], (steps, 1))):
        ours.append([round(float(d.xpos[m.body(b).id][2]), 4) for b in bodies])
        libero.append([round(float(ld.xpos[lm.body(b).id][2]), 4) for b in bodies])
    env.close()
    return {"bodies": bodies, "ours": ours, "libero": libero,
            "max_abs_diff": float(np.abs(np.array(ours) - np.array(libero)).max())}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--suites", default=",".join(SUITES))
    p.add_argument("--n", type=int, default=50, help="official initial states per task")
    p.add_argument("--libero", action="append", default=[], metavar="TASK",
                   help="also replay state 0 of this task in LIBERO's environment (repeatable)")
    p.add_argument("--out", default="benchmarks/results/initial_motion_cpu.json")
    a = p.parse_args(argv)
    t0 = time.perf_counter()
    jobs = scene_jobs([s for s in a.suites.split(",") if s])
    result = {"benchmark": "initial_motion", "machine": machine(), "n": a.n, "threshold_m_per_step": SETTLE_MOVE,
              "warmup": WARMUP, "late_step": LATE, "suites": {}}
    for suite, key, tasks in tqdm(jobs, desc="scenes"):
        result["suites"].setdefault(suite, {}).update(motion(key, tasks, a.n))
    result["libero"] = {name: libero_side_by_side(name) for name in a.libero}
    moving = {s: sorted(k for k, r in rows.items() if r["moving_first"]) for s, rows in result["suites"].items()}
    result["tasks_moving_first"] = moving
    result["seconds"] = time.perf_counter() - t0
    write_json(a.out, result)
    for s, names in moving.items():
        print(f"{s}: {len(names)} of {len(result['suites'][s])} tasks with objects moving at the first policy step")
    for name, r in result["libero"].items():
        print(f"{name}: max |ours - LIBERO| object height over 8 steps {r['max_abs_diff']:.4f} m")
    print(f"-> {a.out}")


if __name__ == "__main__":
    main()
