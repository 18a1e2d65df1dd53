"""Which of LIBERO-PRO's perturbed suites build in this project: for every suite the installed package ships with
initial states, parse its BDDL files, capture LIBERO's scene of each task, build the scene(s), map LIBERO-PRO's
initial states into it (and check the :init predicates), and run a few zero-action control steps on the native
backend. One scene at a time (caches cleared after each). Writes JSON (resumable: suites already in the file are
kept) and prints a table.

    python benchmarks/pro_suites_build.py                        # benchmarks/results/pro_suites_build.json
    python benchmarks/pro_suites_build.py --suites libero_goal_lan,libero_10_swap --n 2
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import clbench_jax  # noqa: E402,F401
import jax  # noqa: E402
import numpy as np  # noqa: E402
from common import machine, table, write_json  # noqa: E402

from clbench_jax.sim import env, libero_source, rollout  # noqa: E402
from clbench_jax.sim.init_states import make_init_bank  # noqa: E402
from clbench_jax.sim.scene import build_scene  # noqa: E402
from clbench_jax.tasks.suites import pro_kind, pro_suites, scene_tasks, suite_tasks  # noqa: E402


def check_suite(suite: str, n: int, steps: int, workers: int) -> dict:
    t0 = time.perf_counter()
    try:
        tasks = suite_tasks(suite)
    except Exception as e:  # noqa: BLE001  (recorded per suite)
        return {"stage": "parse", "error": f"{type(e).__name__}: {e}"}
    try:
        libero_source.prepare(tasks, workers=workers)
    except Exception as e:  # noqa: BLE001
        return {"stage": "capture", "error": f"{type(e).__name__}: {e}"}
    out = {"tasks": len(tasks), "scenes": len({t.scene for t in tasks}), "init_ok": 0, "episodes": 0,
           "physics_failures": 0, "errors": []}
    for key in dict.fromkeys(t.scene for t in tasks):
        try:
            scene = build_scene(scene_tasks(key))
            for t in scene.tasks:
                bank = make_init_bank(scene, t, n)
                ids = np.full(n, scene.task_index(t.name))
                goals = jax.tree.map(lambda x: np.asarray(x)[ids][:, None], rollout.task_stack(scene).goal)
                batch = rollout.EpisodeBatch.of([bank], ids, goals, np.zeros((n, 2), np.uint32))
                pol, p0 = rollout.zero_policy()
                rec = rollout.rollout(scene, pol, p0, batch, steps, stop_at_success=False)
                out["init_ok"] += int(bank.init_ok.sum())
                out["episodes"] += n
                out["physics_failures"] += int((rec.fail_reason != 0).sum())
        except Exception as e:  # noqa: BLE001
            out["errors"].append(f"{key}: {type(e).__name__}: {str(e)[:300]}")
        finally:
            scene = None
            for cache in (rollout._JITTED, rollout._CONSTS, rollout._TASK_STACKS, rollout._SCENES):
                cache.clear()
            env._compiled_source.cache_clear()
            jax.clear_caches()
            gc.collect()
    out["builds"] = not out["errors"] and out["physics_failures"] == 0
    out["seconds"] = round(time.perf_counter() - t0, 1)
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--suites", default=None, help="comma-separated LIBERO-PRO suites (default: all installed)")
    p.add_argument("--n", type=int, default=2, help="initial states per task")
    p.add_argument("--steps", type=int, default=5, help="zero-action control steps per episode")
    p.add_argument("--workers", type=int, default=2, help="LIBERO processes capturing scenes")
    p.add_argument("--out", default="benchmarks/results/pro_suites_build.json")
    a = p.parse_args(argv)
    suites = a.suites.split(",") if a.suites else list(pro_suites())
    out = Path(a.out)
    doc = json.loads(out.read_text()) if out.is_file() else {"suites": {}}
    doc.update(benchmark="pro_suites_build", machine=machine(), config=vars(a), versions=libero_source.versions())
    for s in suites:
        if s in doc["suites"]:
            continue
        print(f"{s} ...", flush=True)
        doc["suites"][s] = {"base": pro_suites().get(s), "kind": pro_kind(s) if s in pro_suites() else None,
                            **check_suite(s, a.n, a.steps, a.workers)}
        doc["date"] = time.strftime("%Y-%m-%d %H:%M:%S")
        write_json(out, doc)
    rows = [{"suite": s, "builds": r.get("builds", False), "tasks": r.get("tasks"), "scenes": r.get("scenes"),
             "init_ok": f"{r['init_ok']}/{r['episodes']}" if "init_ok" in r else "-",
             "problem": (r.get("error") or "; ".join(r.get("errors", [])) or "")[:90]}
            for s, r in doc["suites"].items()]
    print(table(rows, ["suite", "builds", "tasks", "scenes", "init_ok", "problem"]))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
