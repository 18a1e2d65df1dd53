"""Learnability: single-task BC (one stage of the lifelong loop, algo seqft) on each task of a suite from its oracle
demos; success from the loop's own evaluation (fixed initial-state bank, best checkpoint as LIBERO selects it).

    clbench demos collect --suite libero_goal --n 50 --no-images --out demos
    python benchmarks/learnability.py --demos demos --held-out 50 --out runs/learnability   # resumes per task

Writes benchmarks/results/learnability_<obs>_cpu.json (atomically, after every task).

`success` is LIBERO's number: the best of the periodic evaluations, all on the same initial states, so it is the
maximum of several noisy estimates and reads high. `--held-out N` also rolls the kept checkpoint out from N initial
states it was never selected on (another init-bank seed, other keys): an unbiased estimate.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import add_profile_arg, machine, maybe_profile, write_json  # noqa: E402

from clbench_jax.data import hdf5  # noqa: E402
from clbench_jax.errors import ClbenchError  # noqa: E402
from clbench_jax.lifelong.config import load_config  # noqa: E402
from clbench_jax.lifelong.data import demo_path  # noqa: E402
from clbench_jax.lifelong.loop import run_lifelong  # noqa: E402
from clbench_jax.tasks.suites import suite_tasks  # noqa: E402

TARGET = 0.8


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--suite", default="libero_goal")
    ap.add_argument("--obs", default=None, choices=["state", "rgb"], help="default: the config's (state)")
    ap.add_argument("--demos", required=True, help="folder written by `clbench demos collect --out`")
    ap.add_argument("--out", default="runs/learnability", help="one lifelong results folder per task")
    ap.add_argument("--config", default="configs/learnability_libero_protocol.yaml",
                    help="training config (flags below override); default: LIBERO's evaluation protocol with the "
                         "mid-size model, the setting behind docs/RESULTS.md's current table")
    ap.add_argument("--epochs", type=int, default=None)
    ap.add_argument("--tasks", nargs="*", default=None, help="task names (default: the whole suite)")
    ap.add_argument("--held-out", type=int, default=0, metavar="N",
                    help="also evaluate the kept checkpoint on N fresh initial states (0: skip)")
    ap.add_argument("--json", default=None, help="default benchmarks/results/learnability_<obs>_cpu.json")
    add_profile_arg(ap)
    a = ap.parse_args(argv)
    with maybe_profile(a.profile):
        run(a)


def run(a) -> None:
    a.obs = a.obs or load_config(a.config).obs
    path = a.json or str(Path(__file__).parent / "results" / f"learnability_{a.obs}_cpu.json")
    names = a.tasks or [t.name for t in suite_tasks(a.suite)]
    rows, t_all = [], time.perf_counter()
    for name in names:
        cfg = load_config(a.config, suite=a.suite, obs=a.obs, algo="seqft", tasks=[name], demos_dir=a.demos,
                          epochs=a.epochs)
        task = next(t for t in suite_tasks(a.suite) if t.name == name)
        f = demo_path(a.demos, task)
        n_demos = int(hdf5.read_meta(f)["num_demos"]) if os.path.exists(f) else 0
        row = {"task": name, "n_demos": n_demos}
        try:
            out = os.path.join(a.out, a.obs, name)
            m = run_lifelong(cfg, out, progress=True)
            row.update(success=m["success_matrix"][0][0], curve=m["curves"][0], curve_epochs=m["curve_epochs"][0],
                       best_epoch=m["best_epoch"][0], final_loss=m["losses"][0][-1] if m["losses"][0] else None,
                       seconds=sum(m["seconds"]))
            if a.held_out:
                row.update(held_out=held_out_success(cfg, out, a.held_out), n_held_out=a.held_out)
        except ClbenchError as e:  # e.g. no demos for a task the oracle cannot solve: a failed row, the rest goes on
            row.update(success=None, error=str(e))
        rows.append(row)
        print(json.dumps(row), flush=True)
        done = [r["success"] for r in rows if r["success"] is not None]
        write_json(path, {"benchmark": "learnability", "machine": machine(), "suite": a.suite, "obs": a.obs,
                          "config": {k: v for k, v in cfg.to_dict().items() if k not in ("tasks", "demos_dir")},
                          "target": TARGET, "rows": rows,
                          "tasks_at_target": sum(s >= TARGET for s in done), "tasks_run": len(done),
                          "mean_success": sum(done) / max(len(done), 1),
                          **held_out_summary(rows),
                          "wall_seconds": time.perf_counter() - t_all})


HELD_OUT_SEED = 1  # the training loop's own evaluations use eval_seed 0


def held_out_success(cfg, out_dir: str, n: int, backend: str = "native") -> float:
    """Success of the run's kept (best) checkpoint from n initial states of init-bank seed HELD_OUT_SEED, in the
    given simulator (native | mjx | libero: LIBERO's own environment, benchmarks/libero_policy_check.py)."""
    ev, params = held_out_evaluator(cfg, out_dir, n, backend)
    return float(ev(params, None, [0])[0])


def held_out_evaluator(cfg, out_dir: str, n: int, backend: str = "native"):
    """(the loop's Evaluator on n initial states of init-bank seed HELD_OUT_SEED, the run's kept parameters)."""
    import dataclasses

    import jax

    from clbench_jax.algos import make_algorithm
    from clbench_jax.eval.run import stage_checkpoints
    from clbench_jax.lifelong.loop import Evaluator, derive_key, make_policy, run_tasks, task_embeddings

    tasks = run_tasks(cfg)
    params = stage_checkpoints(out_dir, cfg, len(tasks), cfg.algo)[-1].load(0)
    ecfg = dataclasses.replace(cfg, n_eval=n, eval_seed=HELD_OUT_SEED, backend=backend)
    # load(0) already applied the algorithm's per-task parameter selection: evaluate them as they are
    ev = Evaluator(ecfg, make_policy(cfg), make_algorithm("seqft"), tasks,
                   task_embeddings(tasks, cfg), derive_key(jax.random.PRNGKey(cfg.seed), "held_out"), progress=True)
    return ev, params


def held_out_summary(rows) -> dict:
    h = [r["held_out"] for r in rows if r.get("held_out") is not None]
    return {"held_out_at_target": sum(s >= TARGET for s in h), "held_out_mean": sum(h) / len(h)} if h else {}


if __name__ == "__main__":
    main()
