"""The one rollout function everything else uses.

    rollout(scene, policy, tasks, goals, init, keys, horizon, backend=...) -> Records

A batch of N episodes: world i runs task `task_ids[i]` from initial state i, under goal set `goals[i]` (a padded
stack of K goal tables: K = 1 for a task's own goal, more for contrasts), with policy noise from `keys[i]`.
Goal 0 is the episode's goal: episodes stop once it holds, as in LIBERO (unless `stop_at_success=False`).

Per control step the pure, jitted `advance` function reads every world's sensors and exact robot joints, updates
the records, asks the policy for actions and turns them into robosuite's controller commands (the OSC goal and the
gripper servos' per-substep controls, `control.command`); the backend then steps the physics, recomputing the OSC
torques at every substep. On `native` the physics step is a threaded MuJoCo rollout on the host; on `mjx` the
whole episode is one `jax.lax.while_loop`; on `libero` LIBERO's own environment steps in worker processes
(sim/libero_backend.py) and this project's sensors are read in LIBERO's states.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from clbench_jax.sim import control, env
from clbench_jax.sim.predicates import GoalTable
from clbench_jax.sim.scene import Scene

# Why an episode failed (Records.fail_reason).
OK, FAIL_NAN, FAIL_VELOCITY, FAIL_WORKER, FAIL_LIBERO, FAIL_OVERFLOW = 0, 1, 2, 3, 4, 5
FAIL_REASONS = {OK: "ok", FAIL_NAN: "non-finite physics state", FAIL_VELOCITY: "velocity blow-up",
                FAIL_WORKER: "LIBERO worker process lost", FAIL_LIBERO: "LIBERO's environment raised an error",
                FAIL_OVERFLOW: "MuJoCo Warp dropped contacts or constraints (raise the mjx backend's capacities)"}
QVEL_LIMIT = 1e3
MOVE_THRESHOLD = 0.01  # action initiation: EE moved > 1 cm or a finger joint changed > 0.01
REACH_RADIUS = 0.05  # first_reach: grip site within 5 cm of an object's body origin (not already so at reset)


@struct.dataclass
class Records:
    """Per-episode outcomes, (N, ...) arrays."""

    success: jnp.ndarray  # (N, K) goal k held at some step after reset
    first_success: jnp.ndarray  # (N, K) int32 first policy step at which goal k held, -1 if never
    held_at_reset: jnp.ndarray  # (N, K) goal k already held after reset and warm-up
    ee_disp_max: jnp.ndarray  # (N,) max end-effector displacement from the post-reset position (m)
    gripper_change_max: jnp.ndarray  # (N,) max |finger joint change| from the post-reset state
    first_grasp: jnp.ndarray  # (N,) int32 entity index both fingers first closed on, -1 if none
    first_reach: jnp.ndarray  # (N,) int32 first task object the hand came within REACH_RADIUS of, -1 if none
    length: jnp.ndarray  # (N,) int32 policy steps run
    done: jnp.ndarray  # (N,) bool
    fail_reason: jnp.ndarray  # (N,) int32 (FAIL_REASONS)

    @property
    def action_initiated(self) -> jnp.ndarray:
        return (self.ee_disp_max > MOVE_THRESHOLD) | (self.gripper_change_max > MOVE_THRESHOLD)


@struct.dataclass
class Carry:
    rec: Records
    pstate: Any
    key: jnp.ndarray  # (N, 2)
    ee0: jnp.ndarray  # (N, 3)
    finger0: jnp.ndarray  # (N, 2)
    near0: jnp.ndarray  # (N, E) objects within REACH_RADIUS of the hand at reset (not counted as reached)
    osc: control.OscState  # (N, ...) robosuite's controller state per world
    trace: Any  # None, or per-step arrays (N, steps + 1, ...) when tracing
    t: jnp.ndarray  # scalar int32: control steps run (warm-up included)


# A batched policy: (obs: dict of (N, ...) arrays, pstate, keys (N, 2)) -> (actions (N, 7), pstate)
PolicyFn = Callable[[dict, Any, jnp.ndarray], tuple[jnp.ndarray, Any]]


@dataclass(frozen=True)
class EpisodeBatch:
    """The static inputs of a batch."""

    task_ids: np.ndarray  # (N,) index into scene.tasks
    goals: GoalTable  # leaves (N, K, ...)
    state: np.ndarray  # (N, nstate) initial full-physics states
    mocap: np.ndarray  # (N, nmocap, 7)
    keys: np.ndarray  # (N, 2) uint32
    active: np.ndarray | None = None  # (N,) bool; False: a padding row, done from the start (never run or recorded)
    q0: np.ndarray | None = None  # (N, 7) the controller's reset joints (InitBank.q0); None: init_qpos, no noise

    @classmethod
    def of(cls, banks, task_ids, goals, keys, active=None) -> "EpisodeBatch":
        """Episodes from init banks (their states, fixture placements and controller reset joints, in order)."""
        cat = lambda f: np.concatenate([getattr(b, f) for b in banks])  # noqa: E731
        return cls(task_ids=np.asarray(task_ids), goals=goals, state=cat("state"), mocap=cat("mocap"),
                   keys=np.asarray(keys), active=active, q0=cat("q0"))


def random_policy(scale: float = 1.0) -> tuple[PolicyFn, Any]:
    """Uniform random actions in [-scale, scale] (the throughput benchmark's policy)."""

    def policy(obs, pstate, keys):
        a = jax.vmap(lambda k: jax.random.uniform(k, (7,), minval=-scale, maxval=scale))(keys)
        return a, pstate

    return policy, ()


def zero_policy() -> tuple[PolicyFn, Any]:
    """Hold still with the gripper open (LIBERO's dummy warm-up action)."""

    def policy(obs, pstate, keys):
        n = keys.shape[0]
        return jnp.zeros((n, 7)).at[:, 6].set(-1.0), pstate

    return policy, ()


def replay_policy(actions: np.ndarray) -> tuple[PolicyFn, Any]:
    """Play fixed action sequences (N, T, 7); past T the last action repeats. pstate is the step counter."""
    acts = jnp.asarray(actions)

    def policy(obs, i, keys):
        return acts[:, jnp.minimum(i, acts.shape[1] - 1)], i + 1

    return policy, jnp.asarray(0, jnp.int32)


def _init_records(n: int, k: int) -> Records:
    return Records(success=jnp.zeros((n, k), bool), first_success=jnp.full((n, k), -1, jnp.int32),
                   held_at_reset=jnp.zeros((n, k), bool), ee_disp_max=jnp.zeros(n), gripper_change_max=jnp.zeros(n),
                   first_grasp=jnp.full(n, -1, jnp.int32), first_reach=jnp.full(n, -1, jnp.int32),
                   length=jnp.zeros(n, jnp.int32),
                   done=jnp.zeros(n, bool), fail_reason=jnp.zeros(n, jnp.int32))


def make_advance(c: env.SceneConsts, policy: PolicyFn, warmup: int, horizon: int, stop_at_success: bool,
                 n_substeps: int, with_images: bool = False):
    """The per-control-step function shared by every backend:
    (carry, tasks, goals, sensordata (N, ns), found (N, P), robot_q (N, 9), bad (N,), images)
        -> (carry, gripper ctrl (N, n_substeps, 2), controller userdata (N, NUSERDATA)).

    `bad`: bool (a physics blow-up, recorded as FAIL_VELOCITY) or int32 fail codes (0: fine).

    `robot_q` are the exact arm and finger joints now (sensor readings come from the last substep's forward pass,
    as robosuite's body positions do). The policy sees LIBERO's proprio keys, object tokens (and images), and --
    for scripted experts only -- the privileged `sensordata`, `found`, `goals` and `tasks` of its world (a
    learned policy must not read them)."""
    dummy = jnp.zeros(7).at[6].set(-1.0)

    def advance(carry: Carry, tasks: env.TaskArrays, goals: GoalTable, sens, found, robot_q, bad, images=None):
        rec, t = carry.rec, carry.t
        holds = jax.vmap(lambda s, f, ta, g: env.goals_hold(c, s, f, ta, g))(sens, found, tasks, goals)  # (N, K)
        prop = jax.vmap(lambda q: env.proprio(c, q))(robot_q)
        fingers = robot_q[:, 7:9]
        at_reset = t == warmup
        ee0 = jnp.where(at_reset, prop["ee_pos"], carry.ee0)
        finger0 = jnp.where(at_reset, fingers, carry.finger0)
        live = ~rec.done & (t > warmup)  # worlds whose step just ran under the policy
        step = t - warmup
        bad_nan = ~(jnp.all(jnp.isfinite(sens), axis=1) & jnp.all(jnp.isfinite(robot_q), axis=1))
        code = jnp.where(bad, FAIL_VELOCITY, OK) if bad.dtype == jnp.bool_ else bad
        code = jnp.where(bad_nan, FAIL_NAN, code)
        failed = live & (code != OK)
        ok = live & ~failed
        new_succ = ok[:, None] & holds
        grasp = jax.vmap(lambda f: env.finger_contacts(c, f))(found)  # (N, E)
        grasp_idx = jnp.where(grasp.any(1), jnp.argmax(grasp, 1), -1)
        dist = jnp.linalg.norm(sens[:, c.sens_entity_pos] - prop["ee_pos"][:, None], axis=-1)  # (N, E)
        near = (dist < REACH_RADIUS) & c.is_object & tasks.present
        near0 = jnp.where(at_reset, near, carry.near0)
        reach = near & ~near0
        reach_idx = jnp.where(reach.any(1), jnp.argmin(jnp.where(reach, dist, jnp.inf), 1), -1)
        rec = rec.replace(
            held_at_reset=jnp.where(at_reset, holds, rec.held_at_reset),
            success=rec.success | new_succ,
            first_success=jnp.where(new_succ & (rec.first_success < 0), step, rec.first_success),
            ee_disp_max=jnp.where(ok, jnp.maximum(rec.ee_disp_max, jnp.linalg.norm(prop["ee_pos"] - ee0, axis=1)),
                                  rec.ee_disp_max),
            gripper_change_max=jnp.where(ok, jnp.maximum(rec.gripper_change_max,
                                                         jnp.abs(fingers - finger0).max(1)), rec.gripper_change_max),
            first_grasp=jnp.where(ok & (rec.first_grasp < 0), grasp_idx, rec.first_grasp),
            first_reach=jnp.where(ok & (rec.first_reach < 0), reach_idx, rec.first_reach),
            length=jnp.where(live, step, rec.length),
            fail_reason=jnp.where(failed, code, rec.fail_reason),
        )
        stop = failed | (step >= horizon)
        if stop_at_success:
            stop = stop | (ok & holds[:, 0])
        rec = rec.replace(done=rec.done | (live & stop))
        # Next action.
        key, sub = jax.vmap(lambda k: tuple(jax.random.split(k)))(carry.key)
        tok, mask = jax.vmap(lambda s, ta, k: env.object_tokens(c, s, ta, k))(
            sens, tasks, jax.vmap(lambda k: jax.random.fold_in(k, 7))(sub))
        obs = dict(prop, tokens=tok, token_mask=mask, sensordata=sens, found=found, goals=goals, tasks=tasks)
        if images is not None:
            obs["agentview_rgb"], obs["eye_in_hand_rgb"] = images[:, 0], images[:, 1]
        act, pstate = policy(obs, carry.pstate, sub)
        act = jnp.where((t < warmup) | rec.done[:, None], dummy, act)
        g_ctrl, udata, _, osc = jax.vmap(
            lambda st, p, r, a: control.command(c.ud_static, c.gripper_range, st, p, r, a, n_substeps))(
            carry.osc, prop["ee_pos"], prop["ee_mat"], act)
        trace = carry.trace
        if trace is not None:
            row = {"ee_pos": prop["ee_pos"], "entity_pos": sens[:, c.sens_entity_pos], "holds": holds,
                   "joint_q": sens[:, c.sens_joint_q], "fingers": fingers, "action": act}
            trace = {k: v.at[:, t].set(row[k]) for k, v in trace.items()}
        carry = carry.replace(rec=rec, pstate=pstate, key=key, ee0=ee0, finger0=finger0, near0=near0, osc=osc,
                              trace=trace, t=t + 1)
        return carry, g_ctrl, udata

    return advance


def initial_osc(scene: Scene, q0: np.ndarray | None, n: int) -> control.OscState:
    """(N, ...) robosuite's controller as created at reset from the reset joints q0 (N, 7)."""
    rm = scene.robot
    q0 = np.broadcast_to(rm.init_qpos, (n, 7)) if q0 is None else np.asarray(q0)
    _SCENES[id(scene)] = scene
    fn = _cached(("osc0", id(scene)), lambda: jax.jit(jax.vmap(lambda q: control.reset_state(rm.chain, q))))
    return fn(jnp.asarray(q0, jnp.float32))


def _new_carry(scene: Scene, batch: EpisodeBatch, pstate0, k: int, c: env.SceneConsts | None = None,
               steps: int | None = None) -> Carry:
    """Fresh carry; with `c` and `steps`, per-step trace arrays for steps + 1 readings (reset included)."""
    n = batch.task_ids.shape[0]
    trace = None
    if steps is not None:
        E, J = c.sens_entity_pos.shape[0], c.sens_joint_q.shape[0]
        shapes = {"ee_pos": (3,), "entity_pos": (E, 3), "holds": (k,), "joint_q": (J,), "fingers": (2,),
                  "action": (7,)}
        trace = {name: jnp.zeros((n, steps + 1) + s, bool if name == "holds" else jnp.float32)
                 for name, s in shapes.items()}
    rec = _init_records(n, k)
    if batch.active is not None:
        rec = rec.replace(done=~jnp.asarray(batch.active, bool))
    return Carry(rec=rec, pstate=pstate0, key=jnp.asarray(batch.keys), ee0=jnp.zeros((n, 3)),
                 finger0=jnp.zeros((n, 2)), near0=jnp.zeros((n, len(scene.entities)), bool),
                 osc=initial_osc(scene, batch.q0, n), trace=trace,
                 t=jnp.asarray(0, jnp.int32))


def rollout(scene: Scene, policy: PolicyFn, pstate0, batch: EpisodeBatch, horizon: int, *, backend: str = "native",
            warmup: int = 0, stop_at_success: bool = True, obs_mode: str = "state", image_size: int = 128,
            nthread: int | None = None, mjx_impl: str = "warp", progress: bool = False, trace: bool = False,
            libero_workers: int | None = None, libero_report: bool = False):
    """Run N episodes to success or `horizon` policy steps (after `warmup` zero-action steps) -> Records, or
    (Records, trace) with `trace=True`: per-step arrays (N, warmup + horizon + 1, ...) of the EE position, entity
    positions, goal truths, articulated joints, finger joints and actions (rows after an early stop stay 0); on the
    native and libero backends also `physics_state`, the full MuJoCo state (mjSTATE_FULLPHYSICS) before each step's
    action, and `sensordata`, the sensor readings the policy saw then (MuJoCo's, from the last substep's forward
    pass). `backend="libero"`: `libero_workers` processes (default 2); with `libero_report=True` the result is
    (result, libero_backend.LiberoReport): LIBERO's own verdicts against this project's predicates."""
    if libero_report and backend != "libero":
        raise ValueError("libero_report=True needs backend='libero' (LIBERO's own verdicts come from its simulator)")
    if backend == "libero":
        from clbench_jax.sim import libero_backend

        libero_backend.require_libero()  # before any long work
    c = _consts(scene)
    tasks = jax.tree.map(lambda x: jnp.asarray(x[batch.task_ids]), task_stack(scene))
    goals = jax.tree.map(jnp.asarray, batch.goals)
    if backend == "native":
        out = _rollout_native(scene, c, policy, pstate0, batch, tasks, goals, horizon, warmup, stop_at_success,
                              obs_mode, image_size, nthread, progress, trace)
    elif backend == "mjx":
        if obs_mode != "state" and mjx_impl != "warp":
            raise ValueError("the mjx backend renders only with impl='warp' (MuJoCo Warp's ray tracer); use "
                             "obs_mode='state' or the native backend for RGB observations")
        out = _rollout_mjx(scene, c, policy, pstate0, batch, tasks, goals, horizon, warmup, stop_at_success,
                           mjx_impl, trace, obs_mode == "rgb", image_size)
    elif backend == "libero":
        out, report = libero_backend.run(scene, c, policy, pstate0, batch, tasks, goals, horizon, warmup,
                                         stop_at_success, obs_mode, image_size, libero_workers, progress, trace)
    else:
        raise ValueError(f"unknown backend {backend!r} (native | mjx | libero)")
    carry = jax.tree.map(np.asarray, out)
    result = (carry.rec, carry.trace) if trace else carry.rec
    return (result, report) if libero_report else result


_TASK_STACKS: dict[int, env.TaskArrays] = {}
_CONSTS: dict[int, tuple] = {}
_JITTED: dict[tuple, Callable] = {}
# Caches are keyed by id(scene) and every entry holds the scene itself (`_SCENES`), so a cached scene is never
# freed and its id never reused by another scene while the entry lives (conftest clears them per test module).
_SCENES: dict[int, Scene] = {}


def _consts(scene: Scene) -> env.SceneConsts:
    _SCENES[id(scene)] = scene
    if id(scene) not in _CONSTS:
        _CONSTS[id(scene)] = env.scene_consts(scene)
    return _CONSTS[id(scene)]


def _cached(key: tuple, build: Callable) -> Callable:
    """One compiled function per (scene, policy, settings): repeated rollouts never re-trace."""
    if key not in _JITTED:
        _JITTED[key] = build()
    return _JITTED[key]


def task_stack(scene: Scene) -> env.TaskArrays:
    """TaskArrays of all the scene's tasks, stacked (cached per scene object)."""
    key = id(scene)
    _SCENES[key] = scene
    if key not in _TASK_STACKS:
        _TASK_STACKS[key] = env.stack([env.task_arrays(scene, t) for t in scene.tasks])
    return _TASK_STACKS[key]


def _rollout_native(scene, c, policy, pstate0, batch, tasks, goals, horizon, warmup, stop_at_success, obs_mode,
                    image_size, nthread, progress, trace):
    from clbench_jax.sim import robot
    from clbench_jax.sim.native import NativeWorlds

    n = batch.task_ids.shape[0]
    nsub = robot.substeps(scene.model)
    rm = scene.robot
    rq = np.concatenate([rm.arm_qpos, rm.finger_qpos])
    worlds = NativeWorlds(scene.model, n, nsub, nthread)
    renderer = None
    with_images = obs_mode == "rgb"
    if with_images:
        from clbench_jax.sim.render import BatchRenderer
        renderer = BatchRenderer(scene.model, image_size)
    advance = _cached(("native", id(scene), policy, warmup, horizon, stop_at_success, with_images),
                      lambda: jax.jit(make_advance(c, policy, warmup, horizon, stop_at_success, nsub, with_images)))
    pf = scene.sensors.pair_found
    ctrl = np.zeros((n, nsub, scene.model.nu))
    try:
        sens = worlds.set_state(batch.state, batch.mocap)
        total = warmup + horizon
        carry = _new_carry(scene, batch, pstate0, goals.pred.shape[1], c, total if trace else None)
        # Tracing on the host also keeps the full physics state each action was chosen in and the sensor readings
        # the policy saw (the demonstration collector records observations from them, images from the states).
        host = {"physics_state": np.zeros((n, total + 1, worlds.nstate)),
                "sensordata": np.zeros((n, total + 1, sens.shape[1]))} if trace else None
        bar = _bar(total, progress, "rollout (native)")
        # Finished episodes are neither rendered nor stepped (their records are final; the policy's action for
        # them is ignored), so a chunk's cost follows its live episodes.
        live = ~np.asarray(carry.rec.done)
        for step in range(total + 1):
            if host is not None:
                host["physics_state"][:, step], host["sensordata"][:, step] = worlds.state, sens
            bad = (worlds.qvel_max() > QVEL_LIMIT) | worlds.diverged
            imgs = renderer.render(worlds.state, worlds.mocap, live) if renderer is not None else None
            carry, g_ctrl, udata = advance(carry, tasks, goals, jnp.asarray(sens), jnp.asarray(sens[:, pf]),
                                           jnp.asarray(worlds.qpos()[:, rq]), jnp.asarray(bad), imgs)
            live = ~np.asarray(carry.rec.done)
            if int(carry.t) > total or not live.any():
                break
            ctrl[:, :, rm.gripper_act] = np.asarray(g_ctrl)
            sens = worlds.step(ctrl, np.asarray(udata, np.float64), live)
            bar.update(1)
        bar.close()
    finally:
        worlds.close()
        if renderer is not None:
            renderer.close()
    if host is not None:
        carry = carry.replace(trace={**carry.trace, **host})
    return carry


def _rollout_mjx(scene, c, policy, pstate0, batch, tasks, goals, horizon, warmup, stop_at_success, impl, trace,
                 with_images=False, image_size=128):
    from clbench_jax.sim.mjx_backend import MjxBackend

    n = batch.task_ids.shape[0]
    be = _cached(("mjx-backend", id(scene), impl), lambda: MjxBackend(scene, impl=impl))
    cams = None
    if with_images:  # MuJoCo Warp's render buffers are sized for n worlds: one context per batch size
        from clbench_jax.sim.warp_render import WarpCameras

        cams = _cached(("mjx-cameras", id(scene), impl, n, image_size),
                       lambda: WarpCameras(be.m_host, be.mx, n, image_size))
    run = _cached(("mjx", id(scene), policy, warmup, horizon, stop_at_success, impl, id(cams)),
                  lambda: _mjx_runner(be, make_advance(c, policy, warmup, horizon, stop_at_success, be.nsub,
                                                       with_images), warmup + horizon, cams))
    d = be.init_data(batch.state, batch.mocap)
    carry = _new_carry(scene, batch, pstate0, goals.pred.shape[1], c, warmup + horizon if trace else None)
    out = run(d, carry, tasks, goals)
    if cams is not None:  # the ray tracer's buffers are freed with `cams` (caches.release): finish before that
        jax.block_until_ready(out)
    return out


def _mjx_runner(be, advance, total: int, cams=None):
    """The whole episode as one jitted while loop: per control step the physics (25 substeps with the OSC), the
    cameras (with `cams`), the sensors, predicates, records and the policy, for all worlds; nothing returns to the
    host until every episode is done (tests/test_backends.py checks the program has no host callback)."""

    def observe(d):
        sens, found, robot_q, bad = jax.vmap(be.read)(d)
        imgs = None
        if cams is not None:
            imgs, d = jax.vmap(cams.render)(d)
        return d, (sens, found, robot_q, bad, imgs)

    @jax.jit
    def run(d, carry, tasks, goals):
        # Same order as the native loop: advance on the reset reading, then (step, advance) until done.
        d, obs = observe(d)
        carry, g_ctrl, udata = advance(carry, tasks, goals, *obs)

        def body(state):
            d, carry, g_ctrl, udata = state
            # finished worlds (records final) are held in place: they cannot drift, blow up or flood the contacts
            d = be.hold(jax.vmap(be.step)(d, g_ctrl, udata), d, carry.rec.done)
            d, obs = observe(d)
            carry, g_ctrl, udata = advance(carry, tasks, goals, *obs)
            return d, carry, g_ctrl, udata

        def cond(state):
            _, carry, _, _ = state
            return (carry.t <= total) & ~jnp.all(carry.rec.done)

        _, carry, _, _ = jax.lax.while_loop(cond, body, (d, carry, g_ctrl, udata))
        return carry

    return run


def _bar(total: int, enabled: bool, desc: str):
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, disable=not enabled, leave=False)
