"""Demonstration-collection throughput: successful demos per minute of the batched native collector
(`clbench_jax.data.collect`) against a one-env-at-a-time loop (the same collector with batch 1), state-only and
with two 128x128 cameras; plus the target run: 50 state-only demos of every libero_goal task.

    python benchmarks/demo_throughput.py                    # comparison on a few libero_goal tasks + target run
    python benchmarks/demo_throughput.py --no-target        # comparison only (a few minutes)

Compile time is measured once per configuration and reported apart (a warm-up round before timing). Writes JSON
atomically (default benchmarks/results/demo_throughput_cpu.json), with the machine and its load average.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import add_profile_arg, machine, maybe_profile, table, write_json  # noqa: E402

from clbench_jax.data.collect import CollectConfig, collect_task, collect_tasks, scene_of  # noqa: E402
from clbench_jax.tasks.suites import get_task, suite_tasks  # noqa: E402


def measure(tasks, cfg: CollectConfig, label: str) -> dict:
    """Collect cfg.n demos of each task (files not written); demos/minute after one warm-up (compile) round."""
    scene = scene_of(tasks[0])
    t0 = time.perf_counter()
    collect_task(scene, tasks[0], dataclasses.replace(cfg, n=1, seed=99), None, progress=False)  # compile
    compile_s = time.perf_counter() - t0
    kept = attempts = successes = failures = steps = 0
    t0 = time.perf_counter()
    for t in tasks:
        demos, st = collect_task(scene, t, cfg, None, progress=False)
        kept += st["kept"]
        attempts += st["attempts"]
        successes += st["successes"]
        failures += st["failures"]
        steps += sum(len(d["actions"]) for d in demos)
    s = time.perf_counter() - t0
    row = {"config": label, "batch": cfg.batch, "images": cfg.images, "tasks": len(tasks), "demos": kept,
           "attempts": attempts, "successes": successes, "failures": failures, "demo_steps": steps,
           "seconds": round(s, 1),
           "compile_s": round(compile_s, 1), "demos_per_min": round(60 * kept / s, 2),
           "demo_steps_per_s": round(steps / s, 1), "load_avg_1min": round(os.getloadavg()[0], 2)}
    print(row, flush=True)
    return row


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tasks", default="libero_goal:2,libero_goal:7,libero_goal:9",
                   help="tasks of the comparison (the oracle succeeds on them most of the time)")
    p.add_argument("--n", type=int, default=32, help="demos per task, batched, state-only")
    p.add_argument("--images-n", type=int, default=8, help="demos per task, batched, with images")
    p.add_argument("--loop-n", type=int, default=4, help="demos per task, one env at a time, state-only")
    p.add_argument("--loop-images-n", type=int, default=2, help="demos per task, one env at a time, with images")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--horizon", type=int, default=500)
    p.add_argument("--target-n", type=int, default=50)
    p.add_argument("--no-target", action="store_true", help="skip the 50-demos-per-libero_goal-task run")
    p.add_argument("--out", default="benchmarks/results/demo_throughput_cpu.json")
    add_profile_arg(p)
    a = p.parse_args(argv)
    with maybe_profile(a.profile):
        run(a)


def run(a) -> None:
    tasks = [get_task(k) for k in a.tasks.split(",")]
    load0 = os.getloadavg()
    base = dict(horizon=a.horizon, seed=0, generator="confounded")
    rows = [
        measure(tasks, CollectConfig(n=a.n, batch=a.batch, images=False, **base), "batched, state-only"),
        measure(tasks, CollectConfig(n=a.images_n, batch=a.batch, images=True, **base), "batched, 128px images"),
        measure(tasks, CollectConfig(n=a.loop_n, batch=1, images=False, **base), "one env at a time, state-only"),
        measure(tasks, CollectConfig(n=a.loop_images_n, batch=1, images=True, **base),
                "one env at a time, 128px images"),
    ]
    print(table(rows, ["config", "batch", "demos", "attempts", "seconds", "compile_s", "demos_per_min",
                       "load_avg_1min"]))
    result = {"benchmark": "demo_throughput", "date": time.strftime("%Y-%m-%d %H:%M:%S"), "machine": machine(),
              "load_avg_start": [round(x, 2) for x in load0], "tasks": [t.name for t in tasks],
              "horizon": a.horizon, "comparison": rows,
              "note": "shared 2-core machine: other processes ran during the measurement (see load averages)"}
    if not a.no_target:
        cfg = CollectConfig(n=a.target_n, batch=a.batch, images=False, **base)
        with tempfile.TemporaryDirectory() as out:
            t0 = time.perf_counter()
            per_task = collect_tasks(suite_tasks("libero_goal"), out, cfg)
            s = time.perf_counter() - t0
        kept = sum(r["kept"] for r in per_task)
        result["target"] = {
            "what": f"{a.target_n} state-only demos of every libero_goal task (the batch-{a.batch} oracle was already "
                    "compiled by the comparison above, in this process: add its compile_s for a cold start)",
            "seconds": round(s, 1), "minutes": round(s / 60, 2), "demos": kept, "demos_per_min": round(60 * kept / s, 1),
            "tasks_complete": sum(r["kept"] >= a.target_n for r in per_task), "per_task": [
                {k: r.get(k) for k in ("task", "kept", "attempts", "successes", "failures", "surplus",
                                       "gave_up", "seconds")}
                for r in per_task]}
        print(result["target"])
    result["load_avg_end"] = [round(x, 2) for x in os.getloadavg()]
    write_json(a.out, result)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
