"""`clbench run` (the main job: demos -> training -> evaluation grid -> report) and `clbench report RUN`."""

from __future__ import annotations

import os


def cmd_run(a):
    from clbench_jax.eval.run import load_run_config, run

    from clbench_jax.errors import ConfigError

    try:
        seeds = [int(s) for s in a.seeds.split(",")] if a.seeds else None
    except ValueError:
        raise ConfigError(f"must be comma-separated integers, not {a.seeds!r}", field="--seeds") from None
    cfg = load_run_config(a.config, suite=a.suite, n_tasks=a.n_tasks,
                          methods=a.methods.split(",") if a.methods else None, seeds=seeds, pretrained=a.pretrained)
    out = a.out or os.path.join("runs", os.path.splitext(os.path.basename(a.config))[0])
    doc = run(cfg, out, progress=not a.quiet)
    print(f"results in {out}: report.md, metrics.json, grid/episodes.h5, train/, *.png")
    for m, res in doc["metrics"].items():
        o = res.get("original", {})
        f = lambda k: "n/a" if not o.get(k) or o[k]["mean"] is None else f"{o[k]['mean']:.3f}"  # noqa: E731
        print(f"  {m:10s} FWT {f('fwt')}  NBT {f('nbt')}  AUC {f('auc')}  final {f('final')}")


def cmd_report(a):
    from clbench_jax.eval.report import merge_runs
    from clbench_jax.eval.run import report

    if a.merge:
        merge_runs(a.run_dir, a.merge)
    report(a.run_dir)
    print(f"wrote {os.path.join(a.run_dir, 'report.md')}, metrics.json and plots")


def register(sub) -> None:
    r = sub.add_parser("run", help="the main job: demos, lifelong training of each method x seed, the evaluation "
                                   "grid, the report (resumable)",
                       description="Collect (or reuse) demonstrations, train every configured method and seed over "
                                   "the suite's task order, evaluate the grid (checkpoint x task x instruction "
                                   "variant x rollout) and write report.md, metrics.json and plots. Rerun the "
                                   "same command to resume. configs/quickstart.yaml runs in under 20 minutes on "
                                   "2 CPU cores; configs/full_*.yaml are LIBERO's protocol.")
    r.add_argument("config", help="run config YAML (configs/quickstart.yaml, configs/full_libero_goal.yaml, ...)")
    r.add_argument("--out", default=None, help="run folder (default runs/<config name>)")
    r.add_argument("--suite", default=None)
    r.add_argument("--n-tasks", dest="n_tasks", type=int, default=None)
    r.add_argument("--methods", default=None, help="comma-separated, e.g. seqft,er")
    r.add_argument("--seeds", default=None, help="comma-separated, e.g. 0,1,2")
    r.add_argument("--pretrained", default=None,
                   help="start every method from this base (sets train.pretrained; a `clbench pretrain` folder, "
                        "e.g. LIBERO's pretraining experiment: configs/pretraining_libero_10.yaml with and without it)")
    r.add_argument("--quiet", action="store_true", help="no progress bars")
    r.set_defaults(fn=cmd_run)
    p = sub.add_parser("report", help="rebuild a run's report.md, metrics.json and plots from its files",
                       description="Rebuild RUN_DIR's report.md, metrics.json and plots from its files (the grid's "
                                   "episodes, the training runs' curves, the variant file). With --merge, first "
                                   "merge the finished grids of run folders that evaluated different methods or "
                                   "seeds of one grid (e.g. seeds run on different machines) into RUN_DIR: "
                                   "clbench report runs/all --merge runs/seed0 runs/seed1 runs/seed2")
    p.add_argument("run_dir", help="run folder (written with --merge)")
    p.add_argument("--merge", nargs="+", metavar="RUN", default=None,
                   help="run folders with finished grids over disjoint (method, seed) runs: same tasks, "
                        "variants, grid settings and run config apart from methods and seeds")
    p.set_defaults(fn=cmd_report)
