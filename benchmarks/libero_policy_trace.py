"""Where a trained policy's episodes part between the two simulators: one learnability run's kept checkpoint
rolled out with traces from the same N initial states (as libero_policy_check.py), natively and in LIBERO's own
environment; per episode the outcome in each, the first step the hands are more than 5 mm apart, and at the step
before it the robot's contacts and the articulated joints as each simulator's state gives them (read on this
project's model, which equals LIBERO's compiled one: docs/RESULTS.md).

    python benchmarks/libero_policy_trace.py --run runs/learnability/state/open_the_middle_drawer_of_the_cabinet

Writes benchmarks/results/libero_policy_trace_<task>.json.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import mujoco  # noqa: E402
import numpy as np  # noqa: E402
from common import machine, write_json  # noqa: E402
from learnability import held_out_evaluator  # noqa: E402

from clbench_jax.lifelong.config import load_config  # noqa: E402
from clbench_jax.lifelong.loop import init_bank, scene_for  # noqa: E402
from clbench_jax.sim.libero_backend import fixture_placement  # noqa: E402
from clbench_jax.sim.libero_source import make_env  # noqa: E402

APART_MM = 5.0


def contacts_and_joints(m, d, state, mocap) -> dict:
    """The robot's contacts (geom names, depth mm) and the non-robot hinge/slide joints in one state."""
    mujoco.mj_setState(m, d, state, mujoco.mjtState.mjSTATE_FULLPHYSICS)
    d.mocap_pos[:], d.mocap_quat[:] = mocap[:, :3], mocap[:, 3:]
    mujoco.mj_forward(m, d)
    name = lambda g: m.geom(g).name or f"{m.body(m.geom_bodyid[g]).name}/{g}"  # noqa: E731
    robot = [f"{name(c.geom1)} | {name(c.geom2)} | {1000 * c.dist:.2f}" for c in d.contact[:d.ncon]
             if "robot0" in name(c.geom1) + name(c.geom2) or "gripper0" in name(c.geom1) + name(c.geom2)]
    joints = {m.joint(j).name: round(float(d.qpos[m.jnt_qposadr[j]]), 5) for j in range(m.njnt)
              if int(m.jnt_type[j]) in (int(mujoco.mjtJoint.mjJNT_SLIDE), int(mujoco.mjtJoint.mjJNT_HINGE))
              and not m.joint(j).name.startswith(("robot0", "gripper0"))}
    return {"robot_contacts": robot, "joints": joints}


def libero_articulation_contacts(env, task, scene, states: np.ndarray, mocap: np.ndarray) -> list | None:
    """The contacts of the articulated fixture parts in LIBERO's own compiled model (`env`: LIBERO's environment of
    the task, reset) at the given states, this project's state layout (equal to LIBERO's when the sizes match; else
    None): contacts that model has and this project's model filters show here only."""
    m, d = env.sim.model._model, env.sim.data._data
    if m.nq + m.nv + 1 != states.shape[-1]:
        return None
    for name, pose in fixture_placement(scene, task, mocap).items():  # as the libero backend's workers place them
        b = m.body(scene.info[name].root_body).id
        m.body_pos[b], m.body_quat[b] = pose[:3], pose[3:]
    moving = {m.jnt_bodyid[j] for j in range(m.njnt) if not m.joint(j).name.startswith(("robot0", "gripper0"))
              and int(m.jnt_type[j]) in (int(mujoco.mjtJoint.mjJNT_SLIDE), int(mujoco.mjtJoint.mjJNT_HINGE))}
    name = lambda g: m.geom(g).name or f"{m.body(m.geom_bodyid[g]).name}/{g}"  # noqa: E731
    out = []
    for st in states:
        mujoco.mj_setState(m, d, st, mujoco.mjtState.mjSTATE_FULLPHYSICS)
        mujoco.mj_forward(m, d)
        out.append([f"{name(c.geom1)} | {name(c.geom2)} | {1000 * c.dist:.2f}" for c in d.contact[:d.ncon]
                    if {m.geom_bodyid[c.geom1], m.geom_bodyid[c.geom2]} & moving])
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run", required=True, help="a finished learnability run folder (one task)")
    ap.add_argument("--n", type=int, default=20, help="initial states (episodes)")
    ap.add_argument("--json", default=None, help="default benchmarks/results/libero_policy_trace_<task>.json")
    a = ap.parse_args(argv)
    if a.n < 1:
        raise SystemExit("--n must be at least 1")
    cfg = load_config(Path(a.run) / "config.yaml")
    task = cfg.tasks[0]
    got = {}
    for backend in ("native", "libero"):
        ev, params = held_out_evaluator(cfg, a.run, a.n, backend)
        rec, tr = ev.episodes(params, None, [0], trace=True)
        got[backend] = (np.asarray(rec.success[:, 0]), np.asarray(rec.length), np.asarray(tr["ee_pos"]),
                        np.asarray(tr["physics_state"]))
    scene = scene_for(ev.tasks[0].scene)

    mocap = np.asarray(init_bank(scene, ev.tasks[0], a.n, ev.cfg.eval_seed).mocap)
    m = scene.model
    d = mujoco.MjData(m)
    (sn, ln, en, pn), (sl, ll, el, pl) = got["native"], got["libero"]
    apart = 1000 * np.linalg.norm(en - el, axis=-1)
    stask = scene.tasks[scene.task_index(task)]
    env = None  # LIBERO's environment, built once if an episode fails there
    episodes = []
    for i in range(a.n):
        over = np.flatnonzero(apart[i] > APART_MM)
        row = {"episode": i, "native_success": bool(sn[i]), "libero_success": bool(sl[i]),
               "native_length": int(ln[i]), "libero_length": int(ll[i]),
               "first_step_apart": int(over[0]) if len(over) else None,
               "hand_mm_at_step": {str(t): round(float(apart[i, t]), 3) for t in (cfg.warmup, 25, 50) if t < apart.shape[1]}}
        if len(over) and over[0] > 0:
            t = int(over[0]) - 1
            row["before_apart"] = {"step": t, "native": contacts_and_joints(m, d, pn[i, t], mocap[i]),
                                   "libero": contacts_and_joints(m, d, pl[i, t], mocap[i])}
            row["at_apart"] = {"step": t + 1, "native": contacts_and_joints(m, d, pn[i, t + 1], mocap[i]),
                               "libero": contacts_and_joints(m, d, pl[i, t + 1], mocap[i])}
            if not sl[i]:
                if env is None:
                    env = make_env(str(stask.file))
                    env.reset()
                got_c = libero_articulation_contacts(env, stask, scene, pl[i, t:t + 2], mocap[i]) or []
                row["libero_model_contacts_of_articulated_parts"] = dict(zip((f"{t}", f"{t + 1}"), got_c))
        episodes.append(row)
    if env is not None:
        env.close()
    path = a.json or str(Path(__file__).parent / "results" / f"libero_policy_trace_{task}.json")
    write_json(path, {"benchmark": "libero_policy_trace", "machine": machine(), "task": task, "n": a.n,
                      "apart_mm": APART_MM, "native_success": float(sn.mean()), "libero_success": float(sl.mean()),
                      "episodes": episodes})
    print(f"{task}: native {sn.mean():.2f}, LIBERO {sl.mean():.2f} -> {path}")


if __name__ == "__main__":
    main()
