"""Per-task arrays and the pure functions that turn one world's sensor readings into predicates and observations.

Every backend produces the same `sensordata` vector (frame and joint sensors of the model) plus the found flag of
each contact pair (native: contact sensors; MJX: computed from its contact list), and everything downstream --
success predicates, observations, episode records -- is computed here from those arrays, in jnp.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
from flax import struct

from clbench_jax.errors import MissingEntityError, UnknownPredicateError
from clbench_jax.sim import control, entities, libero_source, robot
from clbench_jax.sim.predicates import OPS, GoalTable, JointTests, SimView, compile_goal, goal_holds, quat_to_mat
from clbench_jax.sim.scene import (ARENA_CATEGORIES, GOAL_ROWS, INIT_ROWS, MAX_TOKEN_JOINTS, TOKEN_DIM, TOKEN_SHAPES,
                                   Scene)
from clbench_jax.tasks.spec import TaskSpec


@struct.dataclass
class TaskArrays:
    """One task of a scene as arrays (stack them for a task axis)."""

    present: jnp.ndarray  # (E,) bool: entity is part of the task (absent objects are parked)
    region_pos: jnp.ndarray  # (R, 3) table-region centres (zeros where the task lacks the region)
    region_size: jnp.ndarray  # (R, 3) half sizes (zeros: never satisfied)
    goal: GoalTable  # the task's own goal
    init: GoalTable  # the task's :init predicates, checked after settling


@struct.dataclass
class SceneConsts:
    """Static per-scene arrays the jnp functions need."""

    sens_arm_q: jnp.ndarray
    sens_finger_q: jnp.ndarray
    sens_entity_pos: jnp.ndarray
    sens_entity_quat: jnp.ndarray
    sens_site_pos: jnp.ndarray
    sens_site_quat: jnp.ndarray
    sens_joint_q: jnp.ndarray
    body_site_size: jnp.ndarray  # (S_body, 3)
    site_parent: jnp.ndarray  # (S_body + R,) entity index or -1
    pairs: jnp.ndarray  # (P, 2)
    joint_tests: JointTests
    robot_base: jnp.ndarray  # (3,)
    chain: robot.Chain = struct.field(pytree_node=False)  # world -> grip site (static: folded by XLA)
    ud_static: jnp.ndarray  # (NUSERDATA,) the native controller's per-model userdata slots
    gripper_range: jnp.ndarray  # (2, 2) the finger servos' ctrlrange
    token_static: jnp.ndarray  # (E, 3 + 3 + TOKEN_SHAPES) size, colour, shape one-hot
    token_joints: jnp.ndarray  # (E, MAX_TOKEN_JOINTS) joint index per entity, -1 for none
    is_object: jnp.ndarray  # (E,) bool: a movable object (not a fixture)


def scene_consts(scene: Scene) -> SceneConsts:
    m, sm = scene.model, scene.sensors
    E = len(scene.entities)
    body_site_size = np.array([m.site_size[m.site(n).id] for n in scene.body_sites]).reshape(-1, 3)
    parents = {}
    for src in scene.sources:
        parents.update({n: v["parent"] for n, v in src.sites.items()})
    site_parent = np.full(len(scene.layout.sites), -1, np.int32)
    for i, n in enumerate(scene.body_sites):
        site_parent[i] = scene.entities.index(parents[n])
    J = len(scene.joints)
    op, thr = np.zeros((4, J), np.int32), np.zeros((4, J), np.float32)
    for name in scene.entities:
        tests = entities.joint_tests(scene.info[name].cls, scene.info[name].articulation)
        for jn in scene.info[name].joints:
            if jn not in scene.joints:
                continue
            for k, pred in enumerate(entities.PREDICATES):
                if pred in tests:
                    op[k, scene.joints.index(jn)], thr[k, scene.joints.index(jn)] = OPS[tests[pred][0]], tests[pred][1]
    d = mujoco.MjData(m)
    mujoco.mj_kinematics(m, d)
    static = np.zeros((E, 3 + 3 + TOKEN_SHAPES), np.float32)
    tj = np.full((E, MAX_TOKEN_JOINTS), -1, np.int32)
    for e, name in enumerate(scene.entities):
        root = m.body(scene.info[name].root_body).id
        lo, hi = entities.extents(m, d, root)
        static[e, :3] = hi - lo
        static[e, 3:6] = entities.mean_colour(m, root)
        static[e, 6 + min(entities.shape_class(scene.info[name].category), TOKEN_SHAPES - 1)] = 1.0
        own = [scene.joints.index(j) for j in scene.info[name].joints if j in scene.joints][:MAX_TOKEN_JOINTS]
        tj[e, :len(own)] = own
    rm = scene.robot
    return SceneConsts(
        sens_arm_q=jnp.asarray(sm.arm_q), sens_finger_q=jnp.asarray(sm.finger_q),
        sens_entity_pos=jnp.asarray(sm.entity_pos), sens_entity_quat=jnp.asarray(sm.entity_quat),
        sens_site_pos=jnp.asarray(sm.site_pos), sens_site_quat=jnp.asarray(sm.site_quat),
        sens_joint_q=jnp.asarray(sm.joint_q), body_site_size=jnp.asarray(body_site_size, jnp.float32),
        site_parent=jnp.asarray(site_parent), pairs=jnp.asarray(scene.pairs),
        joint_tests=JointTests(op=jnp.asarray(op), thr=jnp.asarray(thr)),
        robot_base=jnp.asarray(rm.base_pos, jnp.float32), chain=rm.chain,
        ud_static=jnp.asarray(control.userdata_static(rm), jnp.float32),
        gripper_range=jnp.asarray(rm.gripper_ctrlrange, jnp.float32), token_static=jnp.asarray(static),
        token_joints=jnp.asarray(tj), is_object=jnp.asarray([n in scene.objects for n in scene.entities]))


def task_arrays(scene: Scene, task: TaskSpec, goal_atoms=None) -> TaskArrays:
    """A task (optionally with another goal over the scene's entities) -> TaskArrays (numpy leaves)."""
    present = np.array([e in task.objects or e in task.fixtures for e in scene.entities])
    R = len(scene.table_regions)
    rpos, rsize = np.zeros((R, 3), np.float32), np.zeros((R, 3), np.float32)
    boxes = table_region_boxes(scene, task)
    for i, r in enumerate(scene.table_regions):
        if r in boxes:
            rpos[i], rsize[i] = boxes[r]
    goal = compile_goal(scene.layout, task.goal if goal_atoms is None else goal_atoms, GOAL_ROWS,
                        task=task.name, file=task.file)
    init_atoms = [a for a in task.init if a.pred in ("on", "in", "open", "close", "turnon", "turnoff", "up")
                  and not (a.pred == "on" and a.args[1] in task.fixtures
                           and task.fixtures[a.args[1]] in ARENA_CATEGORIES)]
    init = compile_goal(scene.layout, init_atoms, max(INIT_ROWS, len(init_atoms)), task=task.name, file=task.file)
    if init.pred.shape[0] > INIT_ROWS:
        raise UnknownPredicateError(f"task has {len(init_atoms)} init atoms, more than {INIT_ROWS}",
                                    file=task.file, task=task.name, field=":init")
    return TaskArrays(present=present, region_pos=rpos, region_size=rsize, goal=goal, init=init)


@functools.lru_cache(maxsize=64)
def _compiled_source(xml: str) -> mujoco.MjModel:
    return mujoco.MjModel.from_xml_string(libero_source.resolve_paths(xml))


def table_region_boxes(scene: Scene, task: TaskSpec) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """The task's table regions as LIBERO's model of the task places them: name -> (world centre, half sizes).
    (LIBERO turns each BDDL :ranges box into an axis-aligned site on the arena.)"""
    m = _compiled_source(scene.task_source(task).xml)
    d = mujoco.MjData(m)
    mujoco.mj_kinematics(m, d)
    out = {}
    for r in scene.table_regions:
        if r not in task.regions:
            continue
        sid = m.site(r).id
        if not np.allclose(d.site_xmat[sid], np.eye(3).ravel()):
            raise MissingEntityError("a table region site is rotated (expected axis-aligned)", file=task.file,
                                     task=task.name, token=r)
        out[r] = (d.site_xpos[sid].copy(), m.site_size[sid].copy())
    return out


def stack(trees):
    return jax.tree.map(lambda *x: np.stack(x), *trees)


def pair_matrix(found: jnp.ndarray, pairs: jnp.ndarray, n: int) -> jnp.ndarray:
    """(P,) found flags over (i, j) pairs -> symmetric (n + 2, n + 2) bool matrix (rows n, n + 1: the fingers)."""
    m = jnp.zeros((n + 2, n + 2), bool).at[pairs[:, 0], pairs[:, 1]].set(found > 0)
    m = m | m.T
    return m


def sim_view(c: SceneConsts, sensordata: jnp.ndarray, found: jnp.ndarray, task: TaskArrays) -> SimView:
    E = c.sens_entity_pos.shape[0]
    site_pos = jnp.concatenate([sensordata[c.sens_site_pos], task.region_pos], 0)
    R = task.region_pos.shape[0]
    site_mat = jnp.concatenate([quat_to_mat(sensordata[c.sens_site_quat]),
                                jnp.broadcast_to(jnp.eye(3), (R, 3, 3))], 0)
    site_size = jnp.concatenate([c.body_site_size, task.region_size], 0)
    contact = pair_matrix(found, c.pairs, E)[:E, :E]
    return SimView(body_pos=sensordata[c.sens_entity_pos], site_pos=site_pos, site_mat=site_mat,
                   site_size=site_size, site_parent=c.site_parent, joint_q=sensordata[c.sens_joint_q],
                   contact=contact)


def finger_contacts(c: SceneConsts, found: jnp.ndarray) -> jnp.ndarray:
    """(E,) bool: both fingers touch entity e."""
    E = c.sens_entity_pos.shape[0]
    m = pair_matrix(found, c.pairs, E)
    return m[E, :E] & m[E + 1, :E]


def goals_hold(c: SceneConsts, sensordata, found, task: TaskArrays, goals: GoalTable) -> jnp.ndarray:
    """(K,) bool for a stack of K goal tables evaluated in one world."""
    view = sim_view(c, sensordata, found, task)
    return jax.vmap(lambda g: goal_holds(view, g, c.joint_tests))(goals)


def proprio(c: SceneConsts, robot_q) -> dict:
    """LIBERO's proprio keys from the robot's exact joint positions (9,): 7 arm joints, 2 fingers."""
    return control.proprio(c.chain, robot_q[:7], robot_q[7:9])


def object_tokens(c: SceneConsts, sensordata, task: TaskArrays, key) -> tuple[jnp.ndarray, jnp.ndarray]:
    """Object-centric state: one token per present entity (pose, size, colour, shape class, joint values) in a
    per-episode random order, so neither a name nor an index in the task is visible. -> (E, TOKEN_DIM), (E,) mask."""
    pos = sensordata[c.sens_entity_pos] - c.robot_base
    quat = sensordata[c.sens_entity_quat]
    q = sensordata[c.sens_joint_q]
    joints = jnp.where(c.token_joints >= 0, q[jnp.clip(c.token_joints, 0)] if q.shape[0] else 0.0, 0.0)
    tok = jnp.concatenate([pos, quat, c.token_static, joints], -1)
    perm = jax.random.permutation(key, tok.shape[0])
    mask = task.present[perm]
    return jnp.where(mask[:, None], tok[perm], 0.0), mask


assert TOKEN_DIM == 3 + 4 + 3 + 3 + TOKEN_SHAPES + MAX_TOKEN_JOINTS
