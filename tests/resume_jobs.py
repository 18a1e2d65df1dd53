"""The jobs test_resume.py interrupts, built the same way in the test process and in the child process it kills
(`python -c "import resume_jobs; resume_jobs.main(...)"` with tests/ on the path)."""

from __future__ import annotations

import os
import signal
import sys

TASKS = ("libero_goal:7", "libero_goal:0")  # turn on the stove, open the middle drawer: the oracle's shortest
KILL_AT = {"collect": "demo_000003.hdf5", "train": 5, "grid": 3}


def collect_config():
    from clbench_jax.data.collect import CollectConfig

    return CollectConfig(n=8, generator="confounded", seed=0, horizon=200, batch=8, images=False)


def tasks():
    from clbench_jax.tasks.suites import get_task

    return [get_task(t) for t in TASKS]


def train_config(demos_dir: str):
    """ER (a replay buffer to carry across the kill) on the two tasks: after 60 epochs at lr 3e-3 the first task
    succeeds (LIBERO's scenes; measured S = [[1.0], [1.0, 0.0]])."""
    from clbench_jax.lifelong.config import make_config

    return make_config(dict(suite="libero_goal", tasks=[t.name for t in tasks()], algo="er", epochs=60,
                            eval_every=60, n_eval=2, horizon=150, warmup=1, batch_size=32, lr=3e-3, lang="onehot",
                            seed=1, demos_dir=demos_dir,
                            policy_kwargs=dict(embed_dim=32, num_layers=1, num_heads=2, head_dim=16, mlp_dim=64,
                                               gmm_hidden=[64], gmm_modes=2, seq_len=4)))


def grid_setup():
    """Two stage checkpoints of a tiny random-init policy over two libero_goal tasks; task 0 also has a contrast
    whose goal holds from reset (its episodes succeed at once: the success column is not all zero)."""
    import jax
    import numpy as np

    from clbench_jax.eval import grid as G
    from clbench_jax.lifelong.loop import scene_for
    from clbench_jax.policies import make_bc_transformer
    from clbench_jax.policies.act import obs_spec
    from clbench_jax.tasks.suites import suite_tasks

    policy = make_bc_transformer("state", embed_dim=16, num_layers=1, num_heads=2, head_dim=8, mlp_dim=32, seq_len=4,
                                 gmm_hidden=(32,), gmm_modes=3)
    ts = tuple(suite_tasks("libero_goal")[:2])
    ex = {"obs": {k: np.zeros((1, 4) + s, d) for k, (s, d) in obs_spec(scene_for(ts[0].scene), "state").items()},
          "lang": np.zeros((1, 384), np.float32)}
    ps = [policy.init(jax.random.PRNGKey(i), ex) for i in range(2)]
    cks = [G.Checkpoint("m", 0, 0, lambda j: ps[0]), G.Checkpoint("m", 0, 1, lambda j: ps[1])]
    held = (("on", "wooden_cabinet_1", "main_table_cabinet_region"),)
    variants = ((G.original_variant(ts[0]), G.Variant("c", "contrast", "leave the bowl", held, "action")),
                (G.original_variant(ts[1]),))
    spec = G.GridSpec(tasks=ts, variants=variants, n_rollouts=2, horizon=12, chunk=4)
    emb = [np.random.default_rng(j).normal(size=(len(vs), 384)).astype(np.float32) for j, vs in enumerate(variants)]
    return spec, cks, policy, emb


def _die():
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)


def main(job: str, folder: str, demos: str = "") -> None:
    """Run `job` into `folder` and SIGKILL this process part-way (KILL_AT): collect dies in the middle of writing a
    demo file (its temporary file written, not yet renamed), train in the middle of stage 1 (after its 60 epochs,
    before its checkpoint), grid in the middle of chunk 2 (chunks 0 and 1 written)."""
    if job == "collect":
        from clbench_jax.data.collect import collect_tasks

        real = os.replace

        def replace(src, dst):
            if str(dst).endswith(KILL_AT["collect"]):
                _die()
            return real(src, dst)

        os.replace = replace
        collect_tasks(tasks(), folder, collect_config(), progress=False, log=lambda *a: None)
    elif job == "train":
        from clbench_jax.lifelong import loop

        calls, real = [0], loop.Evaluator.__call__

        def evaluate(self, *a, **kw):
            calls[0] += 1
            if calls[0] == KILL_AT["train"]:  # stage 0: epochs 0, 60, seen tasks; stage 1: epoch 0, then here
                _die()
            return real(self, *a, **kw)

        loop.Evaluator.__call__ = evaluate
        loop.run_lifelong(train_config(demos), folder, progress=False)
    elif job == "grid":
        from clbench_jax.eval.grid_runner import run_grid
        from clbench_jax.sim import rollout

        calls, real = [0], rollout.rollout

        def run(*a, **k):
            calls[0] += 1
            if calls[0] == KILL_AT["grid"]:
                _die()
            return real(*a, **k)

        rollout.rollout = run
        spec, cks, policy, emb = grid_setup()
        run_grid(spec, cks, policy, folder, embeddings=emb, progress=False)
    raise SystemExit("the job finished: it should have been killed")
