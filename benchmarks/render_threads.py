"""Wall-clock cost of one control step's camera images on LIBERO's libero_goal scene, by render threads.

BatchRenderer splits the worlds over one renderer per thread (MuJoCo's renderer releases the GIL). This renders
the same batch of worlds (libero_goal's initial states, both cameras) with 1, 2, ... threads, checks that every
thread count gives the first one's images bit for bit, and records wall and CPU seconds per batch. Threads cut
wall-clock time, not CPU time: the per-CPU-second speed targets (benchmarks/libero_speed.py) do not move.
Needs MUJOCO_GL=osmesa (or egl).

    MUJOCO_GL=osmesa PYOPENGL_PLATFORM=osmesa python benchmarks/render_threads.py   # results/render_threads_cpu.json
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402
from common import Clock, machine, table, write_json  # noqa: E402

from clbench_jax.sim.init_states import make_init_bank  # noqa: E402
from clbench_jax.sim.render import BatchRenderer  # noqa: E402
from clbench_jax.sim.scene import build_scene  # noqa: E402
from clbench_jax.tasks.suites import suite_tasks  # noqa: E402


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--worlds", type=int, default=10, help="worlds per batch (one initial state of each task)")
    p.add_argument("--sizes", type=int, nargs="+", default=[64, 128], help="image sizes in px")
    p.add_argument("--threads", type=int, nargs="+", default=None, help="default: 1 .. the usable cores")
    p.add_argument("--repeats", type=int, default=5, help="timed batches per setting (after one untimed)")
    p.add_argument("--out", default="benchmarks/results/render_threads_cpu.json")
    a = p.parse_args(argv)
    threads = a.threads or list(range(1, len(os.sched_getaffinity(0)) + 1))
    tasks = suite_tasks("libero_goal")
    scene = build_scene(tasks)
    banks = [make_init_bank(scene, t, 1, seed=0) for t in tasks]
    pick = [i % len(tasks) for i in range(a.worlds)]
    state = np.stack([banks[i].state[0] for i in pick])
    mocap = np.stack([banks[i].mocap[0] for i in pick])
    rows = []
    for size in a.sizes:
        reference = None
        for k in threads:
            r = BatchRenderer(scene.model, size, threads=k)
            try:
                img = r.render(state, mocap)  # untimed: contexts and meshes are made on first use
                with Clock() as c:
                    for _ in range(a.repeats):
                        r.render(state, mocap)
            finally:
                r.close()
            if reference is None:
                reference, base_wall = img, c.wall
            rows.append({"size_px": size, "threads": k, "worlds": a.worlds, "cameras": len(r.cameras),
                         "wall_s_per_batch": c.wall / a.repeats, "cpu_s_per_batch": c.cpu / a.repeats,
                         "speedup_vs_first": base_wall / c.wall,
                         "same_images_as_first": bool(np.array_equal(img, reference))})
            print(rows[-1], flush=True)
    print(table(rows, ["size_px", "threads", "wall_s_per_batch", "cpu_s_per_batch", "speedup_vs_first",
                       "same_images_as_first"]))
    write_json(a.out, {"benchmark": "render_threads", "machine": machine(), "scene": "libero_goal",
                       "mujoco_gl": os.environ.get("MUJOCO_GL"), "load_average": os.getloadavg(),
                       "config": vars(a), "rows": rows})


if __name__ == "__main__":
    main()
