"""Control steps per second of the rollout engine, per backend and batch size, against a one-env-at-a-time loop.

Scene: LIBERO-Goal (one shared scene, 10 tasks). Policy: a fixed random jitted MLP over proprio + object tokens, or
(`--policy bc_transformer`) LIBERO's BC-Transformer, random-init, re-reading its 10-step observation window every
step (needed for RGB observations).
The one-env loop steps one environment at a time and calls the policy once per env per step, as LIBERO's per-env
evaluators do; the batched backends call it once per step for the whole batch. Compilation is excluded (each
configuration is warmed up first). Writes JSON (machine, versions, numbers) and prints a table.

    python benchmarks/sim_throughput.py                       # native, batch 1/8/64/512, state obs, + one-env loop
    python benchmarks/sim_throughput.py --rgb-batches 8       # also RGB (two 128x128 cameras)
    python benchmarks/sim_throughput.py --backends mjx --mjx-batches 4096 --mjx-impl warp   # on a GPU
    python benchmarks/sim_throughput.py --backends mjx --loop-envs 0 --batches "" --mjx-batches "" \
        --mjx-rgb-batches 512,2048 --policy bc_transformer      # RGB on the GPU (MuJoCo Warp's ray tracer)
The JSON is rewritten after every row, so a run stopped by a time limit keeps the rows it finished.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import clbench_jax  # noqa: E402,F401
import jax  # noqa: E402
import numpy as np  # noqa: E402
from common import (Timer, add_profile_arg, bc_transformer_policy, machine, maybe_profile, mlp_policy,  # noqa: E402
                    table, write_json)  # noqa: E402

from clbench_jax.sim import rollout  # noqa: E402
from clbench_jax.sim.init_states import make_init_bank  # noqa: E402
from clbench_jax.sim.scene import TOKEN_DIM, build_scene  # noqa: E402
from clbench_jax.tasks.suites import suite_tasks  # noqa: E402


def make_batch(scene, banks, n: int, seed: int = 0) -> rollout.EpisodeBatch:
    T = len(scene.tasks)
    ids = np.arange(n) % T
    per = banks[0].state.shape[0]
    state = np.stack([banks[i].state[(j // T) % per] for j, i in enumerate(ids)])
    mocap = np.stack([banks[i].mocap[(j // T) % per] for j, i in enumerate(ids)])
    q0 = np.stack([banks[i].q0[(j // T) % per] for j, i in enumerate(ids)])
    goals = jax.tree.map(lambda x: x[ids][:, None], rollout.task_stack(scene).goal)
    keys = np.asarray(jax.random.split(jax.random.PRNGKey(seed), n))
    return rollout.EpisodeBatch(task_ids=ids, goals=goals, state=state, mocap=mocap, keys=keys, q0=q0)


def sub(batch: rollout.EpisodeBatch, sl) -> rollout.EpisodeBatch:
    return rollout.EpisodeBatch(task_ids=batch.task_ids[sl], goals=jax.tree.map(lambda x: x[sl], batch.goals),
                                state=batch.state[sl], mocap=batch.mocap[sl], keys=batch.keys[sl], q0=batch.q0[sl])


def measure(scene, policy, pstate_for, batch, steps, **kw) -> tuple[float, float]:
    """-> (control steps/s of the timed rollout, seconds of the first rollout: compile + one run)."""
    n = batch.task_ids.shape[0]
    t0 = time.perf_counter()
    rollout.rollout(scene, policy, pstate_for(n), sub(batch, slice(None)), steps, stop_at_success=False, **kw)
    first = time.perf_counter() - t0
    with Timer() as t:
        rollout.rollout(scene, policy, pstate_for(n), batch, steps, stop_at_success=False, **kw)
    return n * steps / t.s, first


def one_env_loop(scene, policy, pstate_for, batch, steps, n_env, **kw) -> float:
    """Each env on its own, one after the other, the policy called per env per step."""
    rollout.rollout(scene, policy, pstate_for(1), sub(batch, slice(0, 1)), steps, stop_at_success=False, **kw)
    with Timer() as t:
        for i in range(n_env):
            rollout.rollout(scene, policy, pstate_for(1), sub(batch, slice(i, i + 1)), steps, stop_at_success=False,
                            **kw)
    return n_env * steps / t.s


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--backends", default="native", help="comma list of native, mjx")
    p.add_argument("--batches", default="1,8,64,512", help="native batch sizes")
    p.add_argument("--rgb-batches", default="", help="native batch sizes with two 128x128 cameras (slow)")
    p.add_argument("--mjx-batches", default="8", help="mjx batch sizes, state observations (in the order given)")
    p.add_argument("--mjx-rgb-batches", default="", help="mjx batch sizes with two cameras rendered on the device "
                   "(MuJoCo Warp's ray tracer; --mjx-impl warp, --policy bc_transformer)")
    p.add_argument("--mjx-impl", default="warp", help="warp (NVIDIA GPUs; slow on CPU) or jax")
    p.add_argument("--policy", default="mlp", choices=["mlp", "bc_transformer"],
                   help="mlp: a fixed random MLP (state only); bc_transformer: LIBERO's BC-Transformer, random-init")
    p.add_argument("--steps", type=int, default=100, help="control steps per measured rollout")
    p.add_argument("--mjx-steps", type=int, default=20)
    p.add_argument("--mjx-rgb-steps", type=int, default=20)
    p.add_argument("--loop-envs", type=int, default=4, help="envs run by the one-env loop (0: no loop)")
    p.add_argument("--image-size", type=int, default=128)
    p.add_argument("--out", default="benchmarks/results/sim_throughput_cpu.json")
    add_profile_arg(p)
    a = p.parse_args(argv)
    sizes = [int(x) for x in a.batches.split(",") if x] if "native" in a.backends else []
    rgb_sizes = [int(x) for x in a.rgb_batches.split(",") if x] if "native" in a.backends else []
    mjx_sizes = [int(x) for x in a.mjx_batches.split(",") if x] if "mjx" in a.backends else []
    mjx_rgb = [int(x) for x in a.mjx_rgb_batches.split(",") if x] if "mjx" in a.backends else []
    if (rgb_sizes or mjx_rgb) and a.policy == "mlp":
        p.error("RGB rows need an image policy: --policy bc_transformer")

    tasks = suite_tasks("libero_goal")
    with Timer() as tb:
        scene = build_scene(tasks)
        banks = [make_init_bank(scene, t, 8, seed=0) for t in tasks]
    m = scene.model
    policies = {}  # obs mode -> (policy_fn, pstate_for)

    def policy(mode):
        if mode not in policies:
            if a.policy == "mlp":
                fn, _ = mlp_policy(7 + 2 + 3 + len(scene.entities) * TOKEN_DIM)
                policies[mode] = (fn, lambda n: ())
            else:
                policies[mode] = bc_transformer_policy(scene, mode, a.image_size)
        return policies[mode]

    biggest = make_batch(scene, banks, max(sizes + rgb_sizes + mjx_sizes + mjx_rgb + [a.loop_envs, 1]))
    rows = []
    peer = Path(__file__).parent / "results" / "robosuite_peer_cpu.json"
    out = {"benchmark": "sim_throughput", "date": time.strftime("%Y-%m-%d %H:%M:%S"), "machine": machine(),
           "scene": {"key": scene.key, "ngeom": int(m.ngeom), "nbody": int(m.nbody), "nv": int(m.nv),
                     "timestep": float(m.opt.timestep), "build_and_init_s": tb.s},
           "policy": a.policy, "config": vars(a), "results": rows}
    if peer.exists():
        import json

        out["robosuite_peer"] = json.loads(peer.read_text())["results"]

    def add(row):
        rows.append(row)
        print(f"{row['backend']} {row['obs']} batch {row['batch']}: {row['control_steps_per_s']:,.1f} control "
              f"steps/s", flush=True)
        write_json(a.out, out)  # after every row: a run stopped by a time limit keeps what it measured

    loop = None
    with maybe_profile(a.profile):
        if a.loop_envs > 0:
            loop = one_env_loop(scene, *policy("state"), biggest, a.steps, a.loop_envs)
            add({"backend": "one-env loop (native, N=1 each)", "obs": "state", "batch": 1,
                 "control_steps_per_s": loop, "speedup_vs_loop": 1.0})
        vs = lambda r: None if loop is None else r / loop  # noqa: E731
        for b in sizes:
            r, first = measure(scene, *policy("state"), sub(biggest, slice(0, b)), a.steps, backend="native")
            add({"backend": "native", "obs": "state", "batch": b, "control_steps_per_s": r,
                 "speedup_vs_loop": vs(r), "first_run_s": first})
        for b in rgb_sizes:
            r, first = measure(scene, *policy("rgb"), sub(biggest, slice(0, b)), max(a.steps // 5, 5),
                               backend="native", obs_mode="rgb", image_size=a.image_size)
            add({"backend": "native", "obs": f"rgb 2x{a.image_size}", "renderer": "opengl", "batch": b,
                 "control_steps_per_s": r, "speedup_vs_loop": vs(r), "first_run_s": first})
        for obs, bs, steps in (("state", mjx_sizes, a.mjx_steps), ("rgb", mjx_rgb, a.mjx_rgb_steps)):
            for b in bs:
                t0 = time.perf_counter()
                r, first = measure(scene, *policy(obs), sub(biggest, slice(0, b)), steps, backend="mjx",
                                   mjx_impl=a.mjx_impl, obs_mode=obs, image_size=a.image_size)
                row = {"backend": f"mjx ({a.mjx_impl})", "obs": obs if obs == "state" else f"rgb 2x{a.image_size}",
                       "batch": b, "steps": steps, "control_steps_per_s": r, "speedup_vs_loop": vs(r),
                       "first_run_s": first, "wall_incl_compile_s": time.perf_counter() - t0}
                if obs == "rgb":
                    row["renderer"] = "mujoco_warp"
                add(row)
    print(table(rows, ["backend", "obs", "batch", "control_steps_per_s", "speedup_vs_loop", "first_run_s"]))
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
