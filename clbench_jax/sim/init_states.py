"""Initial states: sample placements from the BDDL regions, reject overlaps, let the scene settle.

Like LIBERO's `init_files`, a task's initial states are a bank of settled full-physics states (plus mocap poses for
the fixtures) made once per (task, seed) on the CPU with native MuJoCo and then shared by every backend, so the
backends start from bit-identical states. Placement follows LIBERO's samplers:
- fixtures and objects `On` an arena region: uniform in the central 70% of the region's first range box, yaw uniform
  in its :yaw_rotation (fixtures without one: 0; objects: a small jitter);
- objects `On`/`In` a site of a fixture or object: at the site (with in-site jitter), dropped from its centre;
- objects `On` another object: on top of it;
- articulated init atoms (Open/Close/Turnon/Turnoff): joints sampled in the stand-in's open/close/on/off ranges;
- objects absent from the task stay parked out of reach.
Overlaps between table-placed things are rejected by yawed footprint rectangles (up to 100 tries per object).
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import jax
import mujoco
import numpy as np

from clbench_jax.sim import assets, control, robot
from clbench_jax.sim.native import FULL, NativeWorlds
from clbench_jax.sim.scene import Scene
from clbench_jax.tasks.spec import TaskSpec

SETTLE_SECONDS = 0.5
OBJECT_YAW_JITTER = 0.15
DROP_CLEARANCE = 0.003
# Sample in the central 70% of a region box: settling nudges objects by up to ~1 cm, and LIBERO's own :init
# (which this project checks after settling) must still hold.
REGION_INNER = 0.7


@dataclass(frozen=True)
class InitBank:
    """Settled initial states of one task: (n, nstate) full physics states and (n, nmocap, 7) mocap poses."""

    task: str
    state: np.ndarray
    mocap: np.ndarray
    init_ok: np.ndarray  # (n,) bool: every :init predicate held after settling
    inits: tuple = ()  # with a `variant` sampler: the :init atoms each state was placed (and checked) by


def _yaw_quat(yaw: float) -> np.ndarray:
    return np.array([np.cos(yaw / 2), 0.0, 0.0, np.sin(yaw / 2)])


def _half_xy(category: str) -> tuple[float, float]:
    sx, sy, _ = assets.standin(category).size
    return sx / 2, sy / 2


def _overlap(a, b) -> bool:
    """Do two yawed footprint rectangles (x, y, yaw, hx, hy) overlap? (separating-axis test)"""
    d = np.array([b[0] - a[0], b[1] - a[1]])
    axes = []
    for _, _, yaw, _, _ in (a, b):
        c, s = np.cos(yaw), np.sin(yaw)
        axes += [np.array([c, s]), np.array([-s, c])]

    def radius(r, axis):
        c, s = np.cos(r[2]), np.sin(r[2])
        return r[3] * abs(axis @ [c, s]) + r[4] * abs(axis @ [-s, c])

    return all(abs(d @ ax) < radius(a, ax) + radius(b, ax) for ax in axes)


def _sample_range(region, rng) -> tuple[float, float, float]:
    x0, y0, x1, y1 = region.ranges[0]
    cx, cy, hx, hy = (x0 + x1) / 2, (y0 + y1) / 2, (x1 - x0) / 2 * REGION_INNER, (y1 - y0) / 2 * REGION_INNER
    x, y = rng.uniform(cx - hx, cx + hx), rng.uniform(cy - hy, cy + hy)
    if region.yaw_ranges:
        lo, hi = region.yaw_ranges[rng.integers(len(region.yaw_ranges))]
        return x, y, rng.uniform(lo, hi)
    return x, y, np.nan


def robot_hold_ctrl(scene: Scene) -> np.ndarray:
    """Controls that hold LIBERO's initial arm pose with the gripper open."""
    q = np.asarray(robot.INIT_QPOS)
    act = np.zeros(7)
    act[6] = -1.0
    return np.asarray(control.action_to_ctrl(q, act, np.asarray(scene.arena.robot_base)))


def sample_placement(scene: Scene, task: TaskSpec, rng: np.random.Generator, d: mujoco.MjData):
    """One unsettled placement -> (qpos, mocap (nmocap, 7)). `d` is scratch MjData of scene.model."""
    m = scene.model
    mujoco.mj_resetData(m, d)
    arm_adr = [m.jnt_qposadr[m.joint(f"robot0_joint{i}").id] for i in range(1, 8)]
    d.qpos[arm_adr] = robot.INIT_QPOS
    surf = scene.arena.surface_z
    placed: list[tuple[float, float, float, float, float]] = []  # footprints: x, y, yaw, half x, half y
    on_arena = {a.args[0]: task.regions[a.args[1]] for a in task.init
                if a.pred == "on" and a.args[1] in task.regions and task.regions[a.args[1]].target == scene.arena_name}

    def place_on_region(name: str, cat: str):
        fixture = assets.standin(cat).kind == "fixture"
        hx, hy = _half_xy(cat)
        if fixture:  # LIBERO's fixture regions hug the fixture: only keep objects off its inner core
            hx, hy = 0.5 * hx, 0.5 * hy
        for _ in range(100):
            x, y, yaw = _sample_range(on_arena[name], rng)
            if np.isnan(yaw):
                yaw = 0.0 if fixture else rng.uniform(-OBJECT_YAW_JITTER, OBJECT_YAW_JITTER)
            fp = (x, y, yaw, hx, hy)
            if not any(_overlap(fp, other) for other in placed):
                break
        placed.append(fp)
        return x, y, yaw

    # Fixtures: mocap bodies; absent ones parked far away.
    for k, name in enumerate(scene.fixtures):
        bid = m.body(name).id
        mid = m.body_mocapid[bid]
        if name in task.fixtures and name in on_arena:
            x, y, yaw = place_on_region(name, scene.categories[name])
            d.mocap_pos[mid] = [x, y, surf]
            d.mocap_quat[mid] = _yaw_quat(yaw)
        else:
            d.mocap_pos[mid] = [-6.0, 6.0 + 2.0 * k, 0.0]
            d.mocap_quat[mid] = [1, 0, 0, 0]
    # Articulated init states.
    for a in task.init:
        if a.pred not in ("open", "close", "turnon", "turnoff"):
            continue
        x = a.args[0]
        idx = scene.layout.index(x)
        E = len(scene.entities)
        mask = scene.layout.entity_joints[idx] if idx < E else scene.layout.site_joints[idx - E]
        owner = x if idx < E else scene.entities[_site_owner(scene, x)]
        art = assets.standin(scene.categories[owner]).articulation
        rng_attr = {"open": "open_range", "close": "close_range", "turnon": "on_range", "turnoff": "off_range"}[a.pred]
        lo, hi = getattr(art, rng_attr)
        for j in np.flatnonzero(mask):
            d.qpos[m.jnt_qposadr[m.joint(scene.joints[j]).id]] = rng.uniform(lo, hi)
    mujoco.mj_kinematics(m, d)
    # Objects: regions first, then sites, then on other objects.
    def set_free(name, pos, yaw):
        adr = m.jnt_qposadr[m.joint(f"{name}_joint").id]
        d.qpos[adr:adr + 3] = pos
        d.qpos[adr + 3:adr + 7] = _yaw_quat(yaw)

    pending = []
    for name in scene.objects:
        if name not in task.objects:
            continue
        cat = scene.categories[name]
        if name in on_arena:
            x, y, yaw = place_on_region(name, cat)
            set_free(name, [x, y, surf + DROP_CLEARANCE], yaw)
        else:
            pending.append(name)
    mujoco.mj_kinematics(m, d)
    for _ in range(3):  # objects on objects may chain
        rest = []
        for name in pending:
            atom = next((a for a in task.init if a.args and a.args[0] == name and a.pred in ("on", "in")), None)
            yaw = rng.uniform(-OBJECT_YAW_JITTER, OBJECT_YAW_JITTER)
            if atom is None:
                continue  # an object with no placement predicate stays parked
            target = atom.args[1]
            if target in scene.layout.sites and target not in scene.table_regions:
                sid = m.site(target).id
                p, R, half = d.site_xpos[sid].copy(), d.site_xmat[sid].reshape(3, 3), m.site_size[sid]
                hx, hy = _half_xy(scene.categories[name])
                jit = np.array([rng.uniform(-1, 1) * max(half[0] - hx, 0) * 0.5,
                                rng.uniform(-1, 1) * max(half[1] - hy, 0) * 0.5, 0.0])
                p = p + R @ jit
                z = p[2] + (half[2] + DROP_CLEARANCE if atom.pred == "on" else 0.0)
                set_free(name, [p[0], p[1], z], yaw)
            elif target in task.objects:
                if target in pending:
                    rest.append(name)
                    continue
                tb = d.xpos[m.body(target).id]
                h = assets.standin(scene.categories[target]).size[2]
                set_free(name, [tb[0], tb[1], tb[2] + h + DROP_CLEARANCE], yaw)
            mujoco.mj_kinematics(m, d)
        pending = rest
    mocap = np.concatenate([d.mocap_pos, d.mocap_quat], axis=1).copy()
    return d.qpos.copy(), mocap


def _site_owner(scene: Scene, site: str) -> int:
    return scene.entities.index(max((e for e in scene.entities if site.startswith(e + "_")), key=len))


def settle(scene: Scene, qpos: np.ndarray, mocap: np.ndarray, seconds: float = SETTLE_SECONDS) -> np.ndarray:
    """Step placements (n, nq) with the arm held, until the scene rests -> settled full states (n, nstate)."""
    m = scene.model
    n = qpos.shape[0]
    d = mujoco.MjData(m)
    state0 = np.zeros((n, mujoco.mj_stateSize(m, FULL)))
    for i in range(n):
        mujoco.mj_resetData(m, d)
        d.qpos[:] = qpos[i]
        mujoco.mj_getState(m, d, state0[i], FULL)
    steps = int(round(seconds / m.opt.timestep))
    worlds = NativeWorlds(m, n, steps)
    worlds.set_state(state0, mocap)
    worlds.step(np.tile(robot_hold_ctrl(scene), (n, 1)))
    state = worlds.state.copy()
    state[:, 0] = 0.0  # episodes start at t = 0
    worlds.close()
    return state


def make_init_bank(scene: Scene, task: TaskSpec, n: int, seed: int = 0, valid_only: bool = True,
                   max_rounds: int = 5, variant: Callable[[np.random.Generator], TaskSpec] | None = None
                   ) -> InitBank:
    """`n` settled initial states of `task`, deterministic in (task, seed). With `valid_only`, samples whose
    :init predicates fail after settling are replaced by fresh ones (up to `max_rounds` rounds); `init_ok` then
    says which of the returned states are valid (all, unless the rounds ran out).

    `variant(rng)`, if given, draws per sample a version of `task` with other :init atoms (the deconfounded
    generator permutes placements this way); each sample is placed and checked by its own atoms, which the bank
    returns in `inits`."""
    digest = int(hashlib.sha256(f"{task.name}:{seed}".encode()).hexdigest()[:8], 16)
    rng = np.random.default_rng(digest)
    d = mujoco.MjData(scene.model)
    states, mocaps, oks, inits = [], [], [], []
    for _ in range(max_rounds if valid_only else 1):
        variants = [variant(rng) for _ in range(n)] if variant is not None else [task] * n
        placements = [sample_placement(scene, v, rng, d) for v in variants]
        mocap = np.stack([p[1] for p in placements])
        state = settle(scene, np.stack([p[0] for p in placements]), mocap)
        ok = init_predicates_hold(scene, task, state, mocap, variants if variant is not None else None)
        states.append(state), mocaps.append(mocap), oks.append(ok), inits.extend(v.init for v in variants)
        if not valid_only or sum(o.sum() for o in oks) >= n:
            break
    state, mocap, ok = np.concatenate(states), np.concatenate(mocaps), np.concatenate(oks)
    order = np.argsort(~ok, kind="stable")[:n] if valid_only else np.arange(n)  # valid ones first, in order
    return InitBank(task=task.name, state=state[order], mocap=mocap[order], init_ok=ok[order],
                    inits=tuple(inits[i] for i in order) if variant is not None else ())


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


def cache_dir() -> Path:
    return Path(os.environ.get("CLBENCH_CACHE", Path.home() / ".cache" / "clbench_jax"))
