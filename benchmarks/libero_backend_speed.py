"""Throughput of the `libero` backend (LIBERO's own environment in worker processes, through `rollout.rollout`)
next to the native backend on the same episodes: episodes per hour and control steps per second, state and two
128 px cameras, for each worker count asked. The peer figure for every speed claim against LIBERO.

Each run: `episodes` libero_goal episodes (LIBERO's official initial states) of `horizon` control steps under a
fixed random MLP policy (no early stop), after one warm-up rollout that starts the workers and compiles the step
(so the figures are steady-state: workers up, environments built once per worker and task). An episode's cost in
LIBERO includes its reset (LIBERO's hard reset rebuilds the model). Writes JSON and prints a table.

    python benchmarks/libero_backend_speed.py                     # benchmarks/results/libero_backend_speed_cpu.json
    python benchmarks/libero_backend_speed.py --workers 1,2,4 --episodes 8
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import clbench_jax  # noqa: E402,F401
import jax  # noqa: E402
import numpy as np  # noqa: E402
from common import machine, mlp_policy, table, write_json  # noqa: E402

from clbench_jax.sim import libero_backend, rollout  # noqa: E402
from clbench_jax.sim.init_states import make_init_bank  # noqa: E402
from clbench_jax.sim.scene import build_scene  # noqa: E402
from clbench_jax.tasks.suites import suite_tasks  # noqa: E402


def batch_of(scene, n: int, task: int):
    t = scene.tasks[task]
    bank = make_init_bank(scene, t, n)
    ids = np.full(n, task)
    goals = jax.tree.map(lambda x: np.asarray(x)[ids][:, None], rollout.task_stack(scene).goal)
    return rollout.EpisodeBatch.of([bank], ids, goals, np.asarray(jax.random.split(jax.random.PRNGKey(0), n)))


def timed(fn):
    c0, w0 = time.process_time(), time.perf_counter()
    fn()
    return time.process_time() - c0, time.perf_counter() - w0


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workers", default="1,2", help="comma-separated worker counts")
    p.add_argument("--episodes", type=int, default=4)
    p.add_argument("--horizon", type=int, default=100)
    p.add_argument("--rgb-horizon", type=int, default=30)
    p.add_argument("--task", type=int, default=8, help="libero_goal task index")
    p.add_argument("--out", default="benchmarks/results/libero_backend_speed_cpu.json")
    a = p.parse_args(argv)
    scene = build_scene(suite_tasks("libero_goal"))
    batch = batch_of(scene, a.episodes, a.task)
    obs_dim = 7 + 2 + 3 + scene_tokens(scene)
    policy, p0 = mlp_policy(obs_dim)
    rows = []
    for mode, horizon in (("state", a.horizon), ("rgb", a.rgb_horizon)):
        kw = dict(stop_at_success=False, obs_mode=mode, image_size=128)
        rollout.rollout(scene, policy, p0, batch, horizon, backend="native", **kw)  # compile
        cpu, wall = timed(lambda: rollout.rollout(scene, policy, p0, batch, horizon, backend="native", **kw))
        rows.append(row("native", mode, 0, a.episodes, horizon, cpu, wall))
        for w in [int(x) for x in a.workers.split(",")]:
            kw_l = dict(kw, backend="libero", libero_workers=w)
            rollout.rollout(scene, policy, p0, batch, horizon, **kw_l)  # workers up, environments built, compiled
            cpu, wall = timed(lambda: rollout.rollout(scene, policy, p0, batch, horizon, **kw_l))
            rows.append(row("libero", mode, w, a.episodes, horizon, cpu, wall))
            print(table(rows[-1:], COLS), flush=True)
        libero_backend.close_pool()
    doc = {"benchmark": "libero_backend_speed", "date": time.strftime("%Y-%m-%d %H:%M:%S"), "machine": machine(),
           "load_average": list(os.getloadavg()), "config": vars(a), "results": rows}
    write_json(a.out, doc)
    print(table(rows, COLS))
    print(f"wrote {a.out}")


COLS = ["backend", "obs", "workers", "episodes", "horizon", "wall_s", "episodes_per_hour", "steps_per_wall_s"]


def row(backend, mode, workers, n, horizon, cpu, wall) -> dict:
    """One measurement; cpu_s is this process's CPU time (the workers' own time is not in it)."""
    return {"backend": backend, "obs": mode, "workers": workers, "episodes": n, "horizon": horizon,
            "wall_s": round(wall, 2), "cpu_s": round(cpu, 2), "episodes_per_hour": round(3600 * n / wall, 1),
            "steps_per_wall_s": round(n * horizon / wall, 1)}


def scene_tokens(scene) -> int:
    from clbench_jax.sim.scene import TOKEN_DIM

    return len(scene.entities) * TOKEN_DIM


if __name__ == "__main__":
    main()
