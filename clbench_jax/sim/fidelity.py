"""Checks of this project's scenes against LIBERO's own environment (used by tests and benchmarks/libero_fidelity.py).

Each function builds LIBERO's environment for a task (robosuite 1.4 underneath), puts it in a known state and
compares with this project's model in the same state, returning numbers (max |diff| per field, per step), not
verdicts: the tests and the benchmark decide what is close enough.
"""

from __future__ import annotations

import mujoco
import numpy as np

from clbench_jax.paths import init_states_path
from clbench_jax.sim import control, libero_source, robot
from clbench_jax.sim.scene import Scene
from clbench_jax.tasks.spec import TaskSpec

# Model fields compared per named element (MuJoCo's own field names, prefix -> object type).
FIELDS = {
    mujoco.mjtObj.mjOBJ_BODY: ("body", ("pos", "quat", "ipos", "iquat", "mass", "inertia", "gravcomp")),
    mujoco.mjtObj.mjOBJ_JOINT: ("jnt", ("type", "pos", "axis", "range", "limited", "stiffness", "solref",
                                        "solimp", "margin")),
    mujoco.mjtObj.mjOBJ_GEOM: ("geom", ("type", "contype", "conaffinity", "condim", "priority", "size", "pos", "quat",
                                        "friction", "solmix", "solref", "solimp", "margin", "gap", "group",
                                        "rgba")),
    mujoco.mjtObj.mjOBJ_SITE: ("site", ("type", "size", "pos", "quat")),
    mujoco.mjtObj.mjOBJ_ACTUATOR: ("actuator", ("trntype", "dyntype", "gaintype", "biastype", "gainprm",
                                                "biasprm", "ctrlrange", "forcerange", "ctrllimited",
                                                "forcelimited", "gear")),
    mujoco.mjtObj.mjOBJ_CAMERA: ("cam", ("pos", "quat", "fovy", "mode")),
}
DOF_FIELDS = ("damping", "armature", "frictionloss")
OPTION_FIELDS = ("timestep", "iterations", "ls_iterations", "cone", "impratio", "integrator", "solver",
                 "gravity", "density", "viscosity", "tolerance", "ls_tolerance", "noslip_iterations", "wind",
                 "magnetic", "o_margin", "disableflags", "enableflags")


def libero_env(task: TaskSpec, seed: int = 0):
    """LIBERO's environment of `task`, reset with numpy seed `seed`."""
    env = libero_source.make_env(task.file)
    np.random.seed(seed)
    env.reset()
    return env


def placement_mocap(scene: Scene, task: TaskSpec, env) -> np.ndarray:
    """(nmocap, 7) the fixture poses LIBERO's reset wrote into its model, as this model's mocap poses."""
    from clbench_jax.sim.init_states import fixture_placements

    m, lm = scene.model, env.sim.model._model
    out = fixture_placements(scene, task, np.random.default_rng(0))  # parks the fixtures the task lacks
    for name, fx in env.fixtures_dict.items():
        b = lm.body(fx.root_body).id
        out[m.body_mocapid[m.body(fx.root_body).id]] = [*lm.body_pos[b], *lm.body_quat[b]]
    return out


def compare_models(scene: Scene, task: TaskSpec, env) -> dict[str, float]:
    """max |ours - LIBERO's| per model field over LIBERO's named elements (fixture root poses compared after
    LIBERO's reset placement is applied as mocap), plus the physics options and the element counts that differ."""
    from clbench_jax.sim.env import table_region_boxes

    m, lm = scene.model, env.sim.model._model
    fixtures = {scene.info[n].root_body for n in scene.fixtures}
    regions = table_region_boxes(scene, task)  # per-task arrays (a union model's sites are its first task's)
    out: dict[str, float] = {}

    def note(key, a, b):
        a, b = np.asarray(a, float), np.asarray(b, float)
        out[key] = max(out.get(key, 0.0), float(np.abs(a - b).max()) if a.size else 0.0)

    def match(objtype, prefix, i) -> int:
        """Our element for LIBERO's element i: by name, or (unnamed geoms and sites) by its body and its place
        among the body's elements of that type."""
        name = mujoco.mj_id2name(lm, objtype, i)
        if name:
            return mujoco.mj_name2id(m, objtype, name)
        if prefix not in ("geom", "site"):
            return -1
        lb = getattr(lm, f"{prefix}_bodyid")
        b = m.body(lm.body(int(lb[i])).name).id
        k = int(np.sum(lb[:i] == lb[i]))
        ours = np.flatnonzero(getattr(m, f"{prefix}_bodyid") == b)
        return int(ours[k]) if k < len(ours) else -1

    for objtype, (prefix, fields) in FIELDS.items():
        n_l = {mujoco.mjtObj.mjOBJ_BODY: lm.nbody, mujoco.mjtObj.mjOBJ_JOINT: lm.njnt,
               mujoco.mjtObj.mjOBJ_GEOM: lm.ngeom, mujoco.mjtObj.mjOBJ_SITE: lm.nsite,
               mujoco.mjtObj.mjOBJ_ACTUATOR: lm.nu, mujoco.mjtObj.mjOBJ_CAMERA: lm.ncam}[objtype]
        for i in range(n_l):
            name = mujoco.mj_id2name(lm, objtype, i)
            if prefix == "site" and name in regions:  # world frame: the arena body is fixed
                note("table_region_pos", regions[name][0], env.sim.data.site_xpos[i])
                note("table_region_size", regions[name][1], lm.site_size[i])
                continue
            j = match(objtype, prefix, i)
            if j < 0:
                out[f"missing {prefix}"] = out.get(f"missing {prefix}", 0) + 1
                continue
            for f in fields:
                a, b = getattr(m, f"{prefix}_{f}")[j], getattr(lm, f"{prefix}_{f}")[i]
                if prefix == "body" and f in ("pos", "quat") and name in fixtures:
                    continue  # placed per episode (mocap); compared in compare_states
                note(f"{prefix}_{f}", a, b)
            if prefix == "jnt":
                for f in DOF_FIELDS:
                    note(f"dof_{f}", getattr(m, f"dof_{f}")[m.jnt_dofadr[j]], getattr(lm, f"dof_{f}")[lm.jnt_dofadr[i]])
    for f in OPTION_FIELDS:
        note(f"opt.{f}", getattr(m.opt, f), getattr(lm.opt, f))
    return out


def compare_states(scene: Scene, task: TaskSpec, env, k: int) -> float:
    """Load LIBERO's initial state k in LIBERO's environment and in this model (with LIBERO's fixture placement):
    max |diff| over every LIBERO body's world position and orientation quaternion (sign-aligned)."""
    from clbench_jax.sim.init_states import libero_states

    raw = np.load(init_states_path(task.suite, task.name))["states"]
    env.sim.set_state_from_flattened(raw[k])
    env.sim.forward()
    m, lm, ld = scene.model, env.sim.model._model, env.sim.data._data
    d = mujoco.MjData(m)
    mujoco.mj_setState(m, d, libero_states(scene, task)[k], mujoco.mjtState.mjSTATE_FULLPHYSICS)
    mocap = placement_mocap(scene, task, env)
    d.mocap_pos[:], d.mocap_quat[:] = mocap[:, :3], mocap[:, 3:]
    mujoco.mj_forward(m, d)
    worst = 0.0
    for b in range(1, lm.nbody):
        j = m.body(lm.body(b).name).id
        dq = min(np.abs(d.xquat[j] - ld.xquat[b]).max(), np.abs(d.xquat[j] + ld.xquat[b]).max())
        worst = max(worst, float(np.abs(d.xpos[j] - ld.xpos[b]).max()), float(dq))
    return worst


def copy_libero_state(scene: Scene, task: TaskSpec, env, d: mujoco.MjData) -> None:
    """LIBERO's current physics state (qpos, qvel by joint name, time, fixture placement) into `d`; mj_forward."""
    m, lm, ld = scene.model, env.sim.model._model, env.sim.data._data
    widths = {0: (7, 6), 1: (4, 3)}
    for i in range(lm.njnt):
        j = m.joint(lm.joint(i).name)
        nq, nv = widths.get(int(lm.jnt_type[i]), (1, 1))
        d.qpos[j.qposadr[0]:j.qposadr[0] + nq] = ld.qpos[lm.jnt_qposadr[i]:lm.jnt_qposadr[i] + nq]
        d.qvel[j.dofadr[0]:j.dofadr[0] + nv] = ld.qvel[lm.jnt_dofadr[i]:lm.jnt_dofadr[i] + nv]
    d.time = ld.time
    mocap = placement_mocap(scene, task, env)
    d.mocap_pos[:], d.mocap_quat[:] = mocap[:, :3], mocap[:, 3:]
    mujoco.mj_forward(m, d)


def load_initial_state(scene: Scene, task: TaskSpec, env, k: int) -> mujoco.MjData:
    """LIBERO's initial state k loaded in LIBERO's environment, and a copy of it in this model (returned)."""
    raw = np.load(init_states_path(task.suite, task.name))["states"]
    env.sim.set_state_from_flattened(raw[k])
    env.sim.forward()
    d = mujoco.MjData(scene.model)
    copy_libero_state(scene, task, env, d)
    return d


def arm_jacobians(m: mujoco.MjModel, d: mujoco.MjData, rm: robot.RobotModel):
    """(mass (7, 7), jac (6, 7), bias (7,), ee_vel (6,)) of the arm in `d`, as robosuite's controller reads them."""
    jp, jr = np.zeros((3, m.nv)), np.zeros((3, m.nv))
    mujoco.mj_jacSite(m, d, jp, jr, rm.grip_site)
    full = np.zeros((m.nv, m.nv))
    mujoco.mj_fullM(m, d, full)
    dof = rm.arm_dof
    return (full[np.ix_(dof, dof)], np.vstack([jp[:, dof], jr[:, dof]]), d.qfrc_bias[dof].copy(),
            np.concatenate([jp @ d.qvel, jr @ d.qvel]))


def play_both(scene: Scene, task: TaskSpec, env, actions: np.ndarray, k: int = 0, seed: int = 0):
    """Reset LIBERO's environment (numpy seed `seed`), load initial state k, and play `actions` (T, 7) there and on
    the native backend (same fixture placement, same controller reset joints); after each action yield (d, ld):
    this model's MjData (kinematics computed) and LIBERO's."""
    import jax.numpy as jnp

    from clbench_jax.sim.native import FULL, NativeWorlds

    np.random.seed(seed)
    env.reset()
    d = load_initial_state(scene, task, env, k)
    m, lm, ld = scene.model, env.sim.model._model, env.sim.data._data
    rm = scene.robot
    nsub = robot.substeps(m)
    worlds = NativeWorlds(m, 1, nsub, nthread=1)
    state = np.zeros((1, mujoco.mj_stateSize(m, FULL)))
    mujoco.mj_getState(m, d, state[0], FULL)
    worlds.set_state(state, placement_mocap(scene, task, env)[None])
    chain = rm.chain
    st = control.reset_state(chain, jnp.asarray(env.robots[0].controller.initial_joint))
    static = control.userdata_static(rm)
    ctrl = np.zeros((1, nsub, m.nu))
    try:
        for a in np.asarray(actions, float):
            q = worlds.qpos()[0]
            p, r = robot.fk(chain, jnp.asarray(q[rm.arm_qpos]))
            g, ud, _, st = control.command(static, rm.gripper_ctrlrange, st, p, r, jnp.asarray(a), nsub)
            ctrl[0][:, rm.gripper_act] = np.asarray(g)
            worlds.step(ctrl, np.asarray(ud)[None])
            env.step(a)
            mujoco.mj_setState(m, d, worlds.state[0], FULL)
            mujoco.mj_kinematics(m, d)
            mujoco.mj_kinematics(lm, ld)
            yield d, ld
    finally:
        worlds.close()


def open_loop(scene: Scene, task: TaskSpec, env, actions: np.ndarray, k: int = 0, seed: int = 0
              ) -> dict[str, np.ndarray]:
    """`play_both`: per-step max |diff| of the grip site and of every body position, (T,) each."""
    m, lm = scene.model, env.sim.model._model
    site_l = lm.site(robot.GRIP_SITE).id
    hand, bodies = [], []
    for d, ld in play_both(scene, task, env, actions, k, seed):
        hand.append(float(np.abs(d.site_xpos[scene.robot.grip_site] - ld.site_xpos[site_l]).max()))
        bodies.append(max(float(np.abs(d.xpos[m.body(lm.body(b).name).id] - ld.xpos[b]).max())
                          for b in range(1, lm.nbody)))
    return {"hand": np.array(hand), "bodies": np.array(bodies)}


def push_joint(scene: Scene, task: TaskSpec, env, joint: str, force: float, steps: int, k: int = 0
               ) -> tuple[np.ndarray, np.ndarray]:
    """Load initial state k in LIBERO's environment and in this model, then push the body of the fixture joint
    `joint` along its axis for `steps` physics steps in both, with a steady `force` (slide: N; hinge: N m of torque;
    positive: towards the joint's upper limit) and no control (the arm sags alike). The joint's position per step,
    (steps,) ours and LIBERO's. Where a drawer pushed shut stops shows whether the fixture's frame holds it."""
    d = load_initial_state(scene, task, env, k)
    m, lm = scene.model, env.sim.model._model
    ld = mujoco.MjData(lm)  # a copy: LIBERO's own data stays as its env left it
    ld.qpos[:], ld.qvel[:], ld.time = env.sim.data._data.qpos, env.sim.data._data.qvel, env.sim.data._data.time
    mujoco.mj_forward(lm, ld)
    out = np.zeros((2, steps))
    for model, data, row in ((m, d, 0), (lm, ld, 1)):
        j = model.joint(joint).id
        b = int(model.jnt_bodyid[j])
        part = slice(3, 6) if model.jnt_type[j] == mujoco.mjtJoint.mjJNT_HINGE else slice(0, 3)
        for t in range(steps):
            data.xfrc_applied[b, part] = force * data.xmat[b].reshape(3, 3) @ model.jnt_axis[j]
            mujoco.mj_step(model, data)
            out[row, t] = data.qpos[model.jnt_qposadr[j]]
    return out[0], out[1]
