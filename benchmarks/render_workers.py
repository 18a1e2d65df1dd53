"""Wall-clock cost of one control step's camera images on LIBERO's libero_goal scene, by render processes.

BatchRenderer splits the worlds over renderer worker processes (one GL context each). This renders the same batch
of worlds (libero_goal's initial states, both cameras) with 1, 2, ... workers, checks that every worker count gives
the first one's images bit for bit, and records wall seconds per batch, and CPU seconds of this process and its
workers. Workers cut wall-clock time, not CPU time: the per-CPU-second speed targets (benchmarks/libero_speed.py)
do not move. Needs MUJOCO_GL=osmesa (or egl).

    MUJOCO_GL=osmesa PYOPENGL_PLATFORM=osmesa python benchmarks/render_workers.py   # results/render_workers_cpu.json
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402
from common import Clock, goal_worlds, machine, table, write_json  # noqa: E402

from clbench_jax.sim.render import BatchRenderer  # noqa: E402


def workers_cpu(r: BatchRenderer) -> float:
    """CPU seconds (user + system) used so far by the renderer's live worker processes (Linux /proc)."""
    pids = list(r._pool._processes) if r._pool is not None else []
    ticks = sum(sum(map(int, Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()[11:13])) for p in pids)
    return ticks / os.sysconf("SC_CLK_TCK")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--worlds", type=int, default=10, help="worlds per batch (one initial state of each task)")
    p.add_argument("--sizes", type=int, nargs="+", default=[64, 128], help="image sizes in px")
    p.add_argument("--workers", type=int, nargs="+", default=None, help="worker counts; default: 1 .. the usable cores")
    p.add_argument("--repeats", type=int, default=5, help="timed batches per setting (after one untimed)")
    p.add_argument("--out", default="benchmarks/results/render_workers_cpu.json")
    a = p.parse_args(argv)
    workers = a.workers or list(range(1, len(os.sched_getaffinity(0)) + 1))
    scene, state, mocap = goal_worlds(a.worlds)
    rows = []
    for size in a.sizes:
        reference = None
        for k in workers:
            r = BatchRenderer(scene.model, size, workers=k)
            try:
                img = r.render(state, mocap)  # untimed: contexts and meshes are made on first use
                w0 = workers_cpu(r)
                with Clock() as c:
                    for _ in range(a.repeats):
                        r.render(state, mocap)
                c.cpu += workers_cpu(r) - w0
            finally:
                r.close()
            if reference is None:
                reference, base_wall = img, c.wall
            rows.append({"size_px": size, "workers": k, "worlds": a.worlds, "cameras": len(r.cameras),
                         "wall_s_per_batch": c.wall / a.repeats, "cpu_s_per_batch": c.cpu / a.repeats,  # this process and its workers,
                         "speedup_vs_first": base_wall / c.wall,
                         "same_images_as_first": bool(np.array_equal(img, reference))})
            print(rows[-1], flush=True)
    print(table(rows, ["size_px", "workers", "wall_s_per_batch", "cpu_s_per_batch", "speedup_vs_first",
                       "same_images_as_first"]))
    write_json(a.out, {"benchmark": "render_workers", "machine": machine(), "scene": "libero_goal",
                       "mujoco_gl": os.environ.get("MUJOCO_GL"), "load_average": os.getloadavg(),
                       "config": vars(a), "rows": rows})


if __name__ == "__main__":
    main()
