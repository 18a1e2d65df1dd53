"""The same evaluation workload two ways: LIBERO's evaluation loop and the grid (clbench_jax.eval.grid).

Workload: C checkpoints (random-init BC-Transformers) x T libero_goal tasks x V instruction variants (the original
and a paraphrase from configs/variants) x R rollouts, horizon H, LIBERO's 5 warm-up steps, episodes stopping on
success. Both ways run the same episodes: the same parameters, language embeddings (MiniLM), initial states and
policy-noise keys, on the same MuJoCo model.

(a) LIBERO's way (libero/lifelong/metric.py + SubprocVectorEnv): one (checkpoint, task, variant) at a time; a pool
    of `--envs` (20) per-env worker processes, each holding one MuJoCo world (and, for RGB, its own renderer),
    stepping in lock-step with one batched policy call per control step in the main process. The pool is started
    once and reused (LIBERO starts one per task, which would only slow (a) down).
(b) the grid: every (checkpoint, task, variant) group at once in chunks of `--chunk` episodes, stacked parameters,
    threaded native physics.

Compilation is excluded on both sides (each is run once before it is timed). Writes JSON (after every row) + prints
a table. Each row projects seed 000's full one-suite grid (FULL_GRID_STEPS control steps) at its measured rate.

    python benchmarks/grid_vs_libero.py                          # CPU defaults (~5 minutes on 2 busy cores)
    python benchmarks/grid_vs_libero.py --checkpoints 8 --rollouts 20 --chunk 1024 --backend mjx   # accelerator
    python benchmarks/grid_vs_libero.py --ways grid --backend mjx --mjx-impl warp --rgb-backend mjx \
        --policy-size libero          # the grid alone on a GPU, RGB rendered there, LIBERO's BC-Transformer size
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import clbench_jax  # noqa: E402,F401
import jax  # noqa: E402
import mujoco  # noqa: E402
import numpy as np  # noqa: E402
from common import Timer, add_profile_arg, machine, maybe_profile, table, write_json  # noqa: E402

from clbench_jax.sim.native import FULL  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
# Seed 000's full grid for one suite: 8 methods x 3 seeds x 55 (stage, seen task) cells x 12 variants x 20 rollouts
# x 600 steps = 190M control steps (an upper bound: episodes stop on success).
FULL_GRID_STEPS = 8 * 3 * 55 * 12 * 20 * 600
SMALL = {"state": dict(embed_dim=32, num_layers=1, num_heads=2, head_dim=16, mlp_dim=64, seq_len=4, gmm_hidden=(64,)),
         "rgb": dict(embed_dim=32, num_layers=1, num_heads=2, head_dim=16, mlp_dim=64, seq_len=4, gmm_hidden=(64,),
                     resnet_widths=(8, 16), num_kp=8)}


# ------------------------------------------------------------------------------------ (a) per-env worker pool
def _worker(conn, model, nsub: int, image_size: int):
    """One environment in its own process: reset, step (n substeps of one control, the OSC callback computing the
    arm's torques at each), render on request."""
    from clbench_jax.sim.native import install_controller

    install_controller()
    d = mujoco.MjData(model)
    renderer = None
    while True:
        cmd, arg = conn.recv()
        if cmd == "reset":
            state, mocap = arg
            mujoco.mj_setState(model, d, state, FULL)
            d.mocap_pos[:], d.mocap_quat[:] = mocap[:, :3], mocap[:, 3:]
            mujoco.mj_forward(model, d)
        elif cmd == "step":
            ctrl, udata = arg
            if udata is not None:
                d.userdata[:] = udata
            for k in range(nsub):
                d.ctrl[:] = ctrl[k]
                mujoco.mj_step(model, d)
        elif cmd == "render":
            if renderer is None:
                from clbench_jax.sim.render import BatchRenderer
                renderer = BatchRenderer(model, image_size, workers=1)  # this env process is the worker
            st = np.zeros(mujoco.mj_stateSize(model, FULL))
            mujoco.mj_getState(model, d, st, FULL)
            mocap = np.concatenate([d.mocap_pos, d.mocap_quat], 1)
            conn.send(renderer.render(st[None], mocap[None])[0])
            continue
        elif cmd == "close":
            return
        st = np.zeros(mujoco.mj_stateSize(model, FULL))
        mujoco.mj_getState(model, d, st, FULL)
        conn.send((d.sensordata.copy(), st))


class WorkerPool:
    """`n` env processes (forked before any JAX computation, like SubprocVectorEnv's workers)."""

    def __init__(self, model, n: int, nsub: int, image_size: int):
        ctx = mp.get_context("fork")
        self.conns, self.procs = [], []
        for _ in range(n):
            a, b = ctx.Pipe()
            p = ctx.Process(target=_worker, args=(b, model, nsub, image_size), daemon=True)
            p.start()
            self.conns.append(a)
            self.procs.append(p)

    def close(self):
        for c in self.conns:
            c.send(("close", None))
        for p in self.procs:
            p.join()


POOL: WorkerPool | None = None


class PoolWorlds:
    """NativeWorlds' interface over the first n workers of POOL (swapped in for NativeWorlds during (a))."""

    def __init__(self, model, n, n_substeps, nthread=None):
        self.m, self.n, self.conns = model, n, POOL.conns[:n]
        self.nstate, self.nsub = mujoco.mj_stateSize(model, FULL), n_substeps
        self.state, self.mocap = np.zeros((n, self.nstate)), np.zeros((n, model.nmocap, 7))
        self.diverged = np.zeros(n, bool)

    def _gather(self):
        out = [c.recv() for c in self.conns]
        self.state[:] = [o[1] for o in out]
        return np.stack([o[0] for o in out])

    def set_state(self, state, mocap):
        self.mocap[:] = mocap
        for c, s, m in zip(self.conns, state, mocap):
            c.send(("reset", (s, m)))
        return self._gather()

    def step(self, ctrl, userdata=None, active=None):  # LIBERO's loop steps every env until all are done
        ctrl = np.asarray(ctrl, np.float64)
        ctrl = np.repeat(ctrl[:, None], self.nsub, 1) if ctrl.ndim == 2 else ctrl
        for i, c in enumerate(self.conns):
            c.send(("step", (ctrl[i], None if userdata is None else np.asarray(userdata[i], np.float64))))
        return self._gather()

    def qpos(self):
        return self.state[:, 1:1 + self.m.nq]

    def qvel_max(self):
        nq = self.m.nq
        return np.abs(self.state[:, 1 + nq:1 + nq + self.m.nv]).max(axis=1)

    def close(self):
        pass


class PoolRenderer:
    """BatchRenderer's interface: every worker renders its own world (in parallel, as LIBERO's envs do)."""

    def __init__(self, model, size=128):
        pass

    def render(self, state, mocap, active=None):  # every env renders, as in LIBERO
        conns = POOL.conns[:state.shape[0]]
        for c in conns:
            c.send(("render", None))
        return np.stack([c.recv() for c in conns])

    def close(self):
        pass


def libero_way(spec, checkpoints, policy, embeddings, n_envs: int):
    """One (checkpoint, task, variant) at a time in batches of n_envs worker envs -> (Records list, seconds)."""
    from clbench_jax.lifelong.loop import derive_key, init_bank, scene_for
    from clbench_jax.policies.act import initial_pstate, make_policy_fn, obs_spec
    from clbench_jax.sim import native, render, rollout

    fn = make_policy_fn(policy, warmup=spec.warmup)
    seq_len = policy.cfg.seq_len
    saved = native.NativeWorlds, render.BatchRenderer
    native.NativeWorlds, render.BatchRenderer = PoolWorlds, PoolRenderer
    try:
        def group(ck, j, v):
            task = spec.tasks[j]
            scene = scene_for(task.scene)
            bank = init_bank(scene, task, spec.n_rollouts, spec.seed)
            keys = np.asarray(jax.random.split(derive_key(jax.random.PRNGKey(spec.seed), "grid", task.name),
                                               spec.n_rollouts))
            goal = jax.tree.map(lambda x: np.asarray(x)[scene.task_index(task.name)], rollout.task_stack(scene).goal)
            recs = []
            for s in range(0, spec.n_rollouts, n_envs):
                sl = slice(s, min(s + n_envs, spec.n_rollouts))
                n = sl.stop - sl.start
                batch = rollout.EpisodeBatch(task_ids=np.full(n, scene.task_index(task.name)),
                                             goals=jax.tree.map(lambda x: np.stack([x[None]] * n), goal),
                                             state=bank.state[sl], mocap=bank.mocap[sl], keys=keys[sl],
                                             q0=bank.q0[sl])
                lang = np.repeat(embeddings[j][v][None], n, 0)
                p0 = initial_pstate(ck.load(j), lang, obs_spec(scene, spec.obs, spec.image_size), seq_len)
                recs.append(rollout.rollout(scene, fn, p0, batch, spec.horizon, warmup=spec.warmup,
                                            obs_mode=spec.obs, image_size=spec.image_size))
            return recs

        group(checkpoints[0], 0, 0)  # compile
        with Timer() as t:
            recs = [r for ck in checkpoints for j in range(len(spec.tasks)) if j <= ck.stage
                    for v in range(len(spec.variants[j])) for r in group(ck, j, v)]
    finally:
        native.NativeWorlds, render.BatchRenderer = saved
    return recs, t.s


# ------------------------------------------------------------------------------------ (b) the grid
def grid_way(spec, checkpoints, policy, embeddings):
    from clbench_jax.eval.grid_runner import run_grid

    with tempfile.TemporaryDirectory() as tmp:
        run_grid(spec, checkpoints, policy, f"{tmp}/warm", embeddings=embeddings, progress=False)  # compile
        with Timer() as t:
            cols = run_grid(spec, checkpoints, policy, f"{tmp}/timed", embeddings=embeddings, progress=False)
    return cols, t.s


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--checkpoints", type=int, default=2)
    ap.add_argument("--tasks", type=int, default=2)
    ap.add_argument("--rollouts", type=int, default=20)
    ap.add_argument("--horizon", type=int, default=60, help="state observations")
    ap.add_argument("--rgb-horizon", type=int, default=15, help="RGB observations (0: skip RGB)")
    ap.add_argument("--rgb-checkpoints", type=int, default=1)
    ap.add_argument("--envs", type=int, default=20, help="LIBERO's SubprocVectorEnv size")
    ap.add_argument("--chunk", type=lambda s: s if s == "auto" else int(s), default="auto",
                    help="grid episodes per chunk, or auto (sized from free memory, docs/GRID.md)")
    ap.add_argument("--backend", default="native", choices=["native", "mjx"], help="grid backend, state obs")
    ap.add_argument("--rgb-backend", default="native", choices=["native", "mjx"],
                    help="grid backend with RGB observations (mjx: --mjx-impl warp, MuJoCo Warp's ray tracer)")
    ap.add_argument("--mjx-impl", default="jax", choices=["jax", "warp"])
    ap.add_argument("--ways", default="libero,grid", help="comma list, run in this order: libero (LIBERO's "
                    "evaluation loop), grid")
    ap.add_argument("--policy-size", default="small", choices=["small", "libero"],
                    help="small: a 1-layer BC-Transformer (SMALL); libero: LIBERO's default size")
    ap.add_argument("--out", default=str(REPO / "benchmarks/results/grid_vs_libero_cpu.json"))
    add_profile_arg(ap)
    a = ap.parse_args(argv)

    global POOL
    # imported before libero_way swaps its stand-ins into sim.native: init_states binds NativeWorlds at import
    import clbench_jax.sim.init_states  # noqa: F401
    from clbench_jax.eval import grid as G
    from clbench_jax.lifelong.loop import scene_for
    from clbench_jax.policies import make_bc_transformer
    from clbench_jax.policies.act import obs_spec
    from clbench_jax.sim import robot
    from clbench_jax.tasks.suites import suite_tasks

    tasks = tuple(suite_tasks("libero_goal")[:a.tasks])
    scene = scene_for(tasks[0].scene)
    ways = [w for w in a.ways.split(",") if w]
    if "libero" in ways:
        POOL = WorkerPool(scene.model, a.envs, robot.substeps(scene.model), 128)  # fork before JAX computes anything
    allv = G.variants_from_file(REPO / "configs/variants/libero_goal.offline.json", tasks)
    variants = tuple((vs[0], next(v for v in vs if v.condition == "paraphrase")) for vs in allv)
    rows = []
    result = {"benchmark": "grid_vs_libero", "machine": machine(), "args": vars(a),
              "workload": {"suite": "libero_goal", "tasks": [t.name for t in tasks], "variants": 2,
                           "policy": ({k: dict(v) for k, v in SMALL.items()} if a.policy_size == "small"
                                      else "LIBERO's BC-Transformer (default size)"), "warmup": 5},
              "full_grid_control_steps": FULL_GRID_STEPS, "rows": rows}
    try:
        with maybe_profile(a.profile):
            for obs, horizon, n_ck in (("state", a.horizon, a.checkpoints),
                                       ("rgb", a.rgb_horizon, a.rgb_checkpoints)):
                if horizon <= 0:
                    continue
                policy = make_bc_transformer(obs, **(SMALL[obs] if a.policy_size == "small" else {}))
                backend = a.backend if obs == "state" else a.rgb_backend
                spec = G.GridSpec(tasks=tasks, variants=variants, n_rollouts=a.rollouts, horizon=horizon, obs=obs,
                                  backend=backend, mjx_impl=a.mjx_impl, chunk=a.chunk)
                emb = G.embed_variants(spec, "minilm")
                ex = {"obs": {k: np.zeros((1, policy.cfg.seq_len) + s, d)
                              for k, (s, d) in obs_spec(scene, obs).items()},
                      "lang": np.zeros((1, 384), np.float32)}
                params = [policy.init(jax.random.PRNGKey(i), ex) for i in range(n_ck)]
                # Every checkpoint is the last stage, so all T tasks are evaluated under each.
                cks = [G.Checkpoint("random-init", i, len(tasks) - 1, lambda j, p=p: p)
                       for i, p in enumerate(params)]
                for way in ways:
                    if way == "grid":
                        cols, secs = grid_way(spec, cks, policy, emb)
                        n_ep = len(cols["method"])
                        steps = int(cols["length"].sum()) + n_ep * spec.warmup
                        succ = float(np.mean(cols["success"][:, 0]))
                        name = f"grid (chunk {a.chunk}, {backend}{'-' + a.mjx_impl if backend == 'mjx' else ''})"
                    else:
                        recs, secs = libero_way(spec, cks, policy, emb, a.envs)
                        n_ep = sum(len(r.length) for r in recs)
                        steps = int(sum(r.length.sum() for r in recs)) + n_ep * spec.warmup
                        succ = float(np.mean(np.concatenate([r.success[:, 0] for r in recs])))
                        name = f"libero ({a.envs} env workers)"
                    rows.append({"observations": obs, "way": name, "episodes": n_ep, "horizon": horizon,
                                 "control_steps": steps, "seconds": secs, "episodes_per_hour": n_ep / secs * 3600,
                                 "control_steps_per_s": steps / secs, "success_rate": succ,
                                 "full_grid_hours_projected": FULL_GRID_STEPS / (steps / secs) / 3600})
                    if obs == "rgb":
                        rows[-1]["renderer"] = G.renderer(spec) if way == "grid" else "opengl"
                    write_json(a.out, result)  # after every row: a time limit keeps the finished rows
                if len(ways) == 2:
                    lib, grid = (next(r for r in rows[-2:] if r["way"].startswith(w)) for w in ("libero", "grid"))
                    grid["speedup"] = lib["seconds"] / grid["seconds"]
                print(table(rows[-len(ways):], ["observations", "way", "episodes", "control_steps", "seconds",
                                                "episodes_per_hour", "speedup", "full_grid_hours_projected"]),
                      flush=True)
    finally:
        if POOL is not None:
            POOL.close()
    result["load_average_1_5_15min_at_end"] = list(os.getloadavg())  # other jobs sharing the cores
    write_json(a.out, result)
    print(table(rows, ["observations", "way", "episodes", "control_steps", "seconds", "episodes_per_hour",
                       "control_steps_per_s", "success_rate", "speedup", "full_grid_hours_projected"]))
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
