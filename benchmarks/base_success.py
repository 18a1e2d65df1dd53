"""The pretrained base's own success: a `clbench pretrain` folder (default: the committed LIBERO-90 state base) rolled
out on every task of its suite with the lifelong loop's evaluation (the same initial-state bank and keys as a
run's periodic success, deterministic GMM mode), under each task's original instruction. Tasks the oracle never
solved have no demos, so the base never trained on them: their rows say so (`trained`: false).

    python benchmarks/base_success.py                      # docs/results/libero_90_state_base, 10 rollouts, 600 steps
    python benchmarks/base_success.py --base runs/pretrained/libero_90_state --n 20

Writes benchmarks/results/base_success_<suite>_<obs>.json atomically after every scene; a rerun keeps the rows of
the scenes already there (same base, n and horizon) and runs the rest.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import machine, write_json  # noqa: E402

DEFAULT_BASE = "docs/results/libero_90_state_base"


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", default=DEFAULT_BASE, help=f"a finished `clbench pretrain` folder (default {DEFAULT_BASE})")
    ap.add_argument("--n", type=int, default=10, help="rollouts per task (initial states 0..n-1 of the eval bank)")
    ap.add_argument("--horizon", type=int, default=600, help="policy steps per episode (LIBERO's evaluation: 600)")
    ap.add_argument("--tasks", nargs="*", default=None, help="task names (default: every task of the base's suite)")
    ap.add_argument("--json", default=None, help="default benchmarks/results/base_success_<suite>_<obs>.json")
    a = ap.parse_args(argv)
    run(a)


def base_evaluator(base: str, n: int, horizon: int, names=None):
    """-> (cfg, tasks, evaluator, params, trained task names): the base's parameters and the loop's Evaluator over its
    suite."""
    import jax
    import numpy as np

    from clbench_jax.algos import make_algorithm
    from clbench_jax.eval.chunk_size import param_shapes
    from clbench_jax.language import EMBED_DIM
    from clbench_jax.lifelong.config import load_config
    from clbench_jax.lifelong.loop import (DEFAULT_SEQ_LEN, Evaluator, derive_key, make_policy, run_tasks,
                                           task_embeddings)
    from clbench_jax.lifelong.pretrain import load_pretrained

    cfg = load_config(os.path.join(base, "config.yaml"))
    cfg = dataclasses.replace(cfg, algo="seqft", pretrained=base, n_eval=n, horizon=horizon, eval_seed=0)
    tasks = [t for t in run_tasks(cfg) if names is None or t.name in names]
    if names is not None and len(tasks) != len(set(names)):
        known = {t.name for t in run_tasks(cfg)}
        raise SystemExit(f"unknown task(s) for suite {cfg.suite}: {sorted(set(names) - known)}")
    policy = make_policy(cfg)
    shapes = param_shapes(policy, tasks[0].scene, cfg.obs, cfg.image_size, getattr(policy.cfg, "seq_len",
                                                                                 DEFAULT_SEQ_LEN), EMBED_DIM)
    params = load_pretrained(cfg, policy, jax.tree.map(lambda s: np.zeros(s.shape, s.dtype), shapes))
    ev = Evaluator(cfg, policy, make_algorithm("seqft"), tasks, task_embeddings(tasks, cfg),
                   derive_key(jax.random.PRNGKey(cfg.seed), "base_success"), progress=True)
    record = json.loads(Path(base, "pretrain.json").read_text())
    return cfg, tasks, ev, params, set(record["tasks"])


def run(a) -> None:
    cfg, tasks, ev, params, trained = base_evaluator(a.base, a.n, a.horizon, a.tasks)
    path = Path(a.json or Path(__file__).parent / "results" / f"base_success_{cfg.suite}_{cfg.obs}.json")
    setting = {"base": a.base, "n": a.n, "horizon": a.horizon}
    rows = []
    if path.exists():
        old = json.loads(path.read_text())
        if {k: old.get(k) for k in setting} == setting:
            rows = old["rows"]
    done = {r["task"] for r in rows}
    by_scene: dict[str, list[int]] = {}
    for j, t in enumerate(tasks):
        if t.name not in done:
            by_scene.setdefault(t.scene, []).append(j)
    t_all = time.perf_counter()
    for scene, js in by_scene.items():
        t0 = time.perf_counter()
        success = ev(params, None, js)
        for j, s in zip(js, success):
            rows.append({"task": tasks[j].name, "scene": scene, "trained": tasks[j].name in trained,
                         "success": float(s), "seconds": (time.perf_counter() - t0) / len(js)})
            print(json.dumps(rows[-1]), flush=True)
        seen = [r["success"] for r in rows if r["trained"]]
        write_json(path, {"benchmark": "base_success", "machine": machine(), **setting, "suite": cfg.suite,
                          "obs": cfg.obs, "policy": cfg.policy, "rows": rows,
                          "tasks_run": len(rows), "trained_tasks_run": len(seen),
                          "mean_success_trained": sum(seen) / max(len(seen), 1),
                          "mean_success_all": sum(r["success"] for r in rows) / max(len(rows), 1),
                          "wall_seconds_this_call": time.perf_counter() - t_all})


if __name__ == "__main__":
    main()
