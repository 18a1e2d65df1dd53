"""`clbench train`: one lifelong run (train, evaluate, checkpoint per stage, resume) into a results folder."""

from __future__ import annotations

import os


def cmd_train(a):
    from clbench_jax.lifelong.config import load_config
    from clbench_jax.lifelong.loop import run_lifelong

    cfg = load_config(a.config, suite=a.suite, algo=a.algo, policy=a.policy, obs=a.obs, order=a.order, seed=a.seed,
                      n_tasks=a.n_tasks, epochs=a.epochs, eval_every=a.eval_every, n_eval=a.n_eval,
                      horizon=a.horizon, batch_size=a.batch_size, max_batches=a.max_batches, demos_dir=a.demos,
                      lang=a.lang, backend=a.backend, pretrained=a.pretrained)
    out = a.out or os.path.join("runs", f"{cfg.suite}_{cfg.algo}_{cfg.policy}_{cfg.obs}_o{cfg.order}_s{cfg.seed}")
    m = run_lifelong(cfg, out, progress=not a.quiet)
    print(f"results in {out}: config.yaml, metrics.json, success_matrix.png, learning_curves.png, checkpoints/")
    if m.get("fwt") is not None:
        nbt = "n/a" if m["nbt"] is None else f"{m['nbt']:.3f}"
        print(f"FWT {m['fwt']:.3f}  NBT {nbt} (last task excluded)  AUC {m['auc']:.3f}")
    print(f"final mean success over tasks: {m['final_mean_success']:.3f}")


def cmd_pretrain(a):
    from clbench_jax.lifelong.config import load_config, read_yaml_mapping
    from clbench_jax.lifelong.pretrain import pretrain

    suite = a.suite
    if suite is None and (a.config is None or "suite" not in read_yaml_mapping(a.config)):
        suite = "libero_90"
    cfg = load_config(a.config, suite=suite, policy=a.policy, obs=a.obs, seed=a.seed, n_tasks=a.n_tasks,
                      epochs=a.epochs, batch_size=a.batch_size, max_batches=a.max_batches, demos_dir=a.demos,
                      lang=a.lang)
    out = a.out or os.path.join("runs", "pretrained", f"{cfg.suite}_{cfg.policy}_{cfg.obs}_s{cfg.seed}")
    rec = pretrain(cfg, out, progress=not a.quiet)
    print(f"pretrained base in {out} ({len(rec['tasks'])} tasks, {rec['epochs']} epochs, final loss "
          f"{rec['losses'][-1] if rec['losses'] else float('nan'):.3f}); use it with --pretrained {out}")


def register(sub) -> None:
    t = sub.add_parser("train", help="a lifelong run: tasks in a LIBERO order, an algorithm, a policy; resumable",
                       description="Train one policy on a suite's tasks one after another (LIBERO's protocol), "
                                   "evaluate success by batched rollouts, write config.yaml, metrics.json "
                                   "(success matrix, curves, FWT/NBT/AUC) and plots; rerun to resume.")
    t.add_argument("--config", default=None, help="YAML config (configs/train_*.yaml); flags override its keys")
    t.add_argument("--suite", default=None, help="libero_spatial | libero_object | libero_goal | libero_10 | libero_90")
    t.add_argument("--algo", default=None, help="seqft | er | ewc | packnet | multitask | l2m | tail | iscil | dmpel")
    t.add_argument("--policy", default=None, help="bc_transformer | bc_rnn | bc_vilt")
    t.add_argument("--obs", default=None, choices=["state", "rgb"])
    t.add_argument("--order", type=int, default=None, help="LIBERO task order 0..20")
    t.add_argument("--seed", type=int, default=None)
    t.add_argument("--n-tasks", dest="n_tasks", type=int, default=None, help="only the first N tasks of the order")
    t.add_argument("--epochs", type=int, default=None, help="epochs per task (LIBERO 50)")
    t.add_argument("--eval-every", dest="eval_every", type=int, default=None, help="epochs between evaluations (5)")
    t.add_argument("--n-eval", dest="n_eval", type=int, default=None, help="rollouts per task per evaluation (20)")
    t.add_argument("--horizon", type=int, default=None, help="max policy steps per rollout (600)")
    t.add_argument("--batch-size", dest="batch_size", type=int, default=None, help="(32)")
    t.add_argument("--max-batches", dest="max_batches", type=int, default=None, help="cap batches per epoch")
    t.add_argument("--demos", default=None, help="folder of <task>_demo.hdf5 files (clbench demos collect --out)")
    t.add_argument("--lang", default=None, choices=["minilm", "onehot"])
    t.add_argument("--backend", default=None, choices=["native", "mjx"])
    t.add_argument("--pretrained", default=None,
                   help="folder of a `clbench pretrain` run, or of a finished multitask run without adapters "
                        "(RUN/train/multitask_s0): the policy starts from its base (frozen for l2m, tail, iscil, "
                        "dmpel and multitask with adapters)")
    t.add_argument("--out", default=None, help="results folder (default runs/<suite>_<algo>_...)")
    t.add_argument("--quiet", action="store_true", help="no progress bars")
    t.set_defaults(fn=cmd_train)

    p = sub.add_parser("pretrain", help="a pretrained base: multitask BC on every task of a suite (LIBERO-90)",
                       description="Train the configured policy on the demos of every task of a suite at once "
                                   "(default libero_90) and save the last epoch's parameters with orbax; runs "
                                   "name the folder as `pretrained`. Rerun the same line to resume.")
    p.add_argument("--config", default=None, help="YAML config (policy, obs, policy_kwargs, epochs, lr, ...)")
    p.add_argument("--suite", default=None, help="suite whose tasks to pretrain on (default libero_90)")
    p.add_argument("--policy", default=None, help="bc_transformer | bc_rnn | bc_vilt")
    p.add_argument("--obs", default=None, choices=["state", "rgb"])
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--n-tasks", dest="n_tasks", type=int, default=None, help="only the first N tasks")
    p.add_argument("--epochs", type=int, default=None)
    p.add_argument("--batch-size", dest="batch_size", type=int, default=None)
    p.add_argument("--max-batches", dest="max_batches", type=int, default=None, help="cap batches per epoch")
    p.add_argument("--demos", default=None, help="folder of <task>_demo.hdf5 files")
    p.add_argument("--lang", default=None, choices=["minilm", "onehot"])
    p.add_argument("--out", default=None, help="output folder (default runs/pretrained/<suite>_<policy>_<obs>_s<seed>)")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.set_defaults(fn=cmd_pretrain)
