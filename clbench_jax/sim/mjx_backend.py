"""The `mjx` backend: MuJoCo XLA, the whole episode on device (`impl="warp"` on NVIDIA GPUs, CPU for tests;
`impl="jax"` anywhere).

Same model as the native backend (MuJoCo Warp: box-box pairs on its primitive collider, as MuJoCo's C collider
does): fixtures are mocap bodies placed per world. robosuite's OSC runs at every
physics substep inside the jitted loop: its inputs (the arm's mass matrix, the grip site's Jacobian, the bias
forces) come from a robot-only copy of the model (the arm, the gripper and the mount: nothing else moves with the
arm's joints, so those quantities equal the full model's; tests/test_backends.py checks them) run with MJX's JAX
kinematics, CRB and RNE, so `mjx.step` then needs no second forward pass. Contact flags: warp evaluates the
model's contact sensors; the JAX impl has no subtree contact sensors, so it reduces its contact list to the same
(P,) flags.

MuJoCo Warp's buffers are fixed at `make_data`: contacts for all worlds together (`naconmax`, sized here per batch:
CONTACTS_PER_WORLD x worlds) and constraint rows per world (`njmax`). What does not fit is dropped and flagged in
the world's sticky `overflow` bitmask; `read` turns those flags into a failed episode (rollout.FAIL_OVERFLOW), so a
result never silently rests on dropped contacts. A contact overflow flags every world (the buffer is shared).
Solver iteration limits (also flagged there) are not failures. MuJoCo Warp's printed warnings are masked (with
LIBERO's Newton settings they would print every substep of thousands of worlds): the records say which episodes
lost contacts.
"""

from __future__ import annotations

import copy
import functools

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
from mujoco import mjx

from clbench_jax.errors import ConfigError
from clbench_jax.sim import control, robot
from clbench_jax.sim.rollout import FAIL_OVERFLOW, FAIL_VELOCITY, QVEL_LIMIT  # Records.fail_reason codes
from clbench_jax.sim.scene import Scene, _base_spec, _build_spec

CONTACTS_PER_WORLD = 256  # a resting libero_goal world has ~37 contacts (measured on warp); a grasp adds a few dozen
ROWS_PER_WORLD = 1024  # a resting libero_goal world uses ~120 rows (elliptic cones: 3 rows per contact here)


def capacity_bits() -> int:
    """MuJoCo Warp's overflow flags that mean dropped work (contacts, constraint rows, collision candidates): all
    but the solver's iteration limits."""
    from mujoco.mjx.third_party.mujoco_warp import OverflowType as O

    return int(O.ALL) & ~int(O.ITERATIONS | O.LS_ITERATIONS)


def robot_model(scene: Scene) -> mujoco.MjModel:
    """LIBERO's robot alone (arm, gripper, mount; same bodies, joints and actuators), for the controller's
    dynamics only: its geoms collide with nothing (MJX's JAX impl cannot collide the mount's cylinder anyway)."""
    spec = _base_spec(scene)
    for b in list(spec.worldbody.bodies):
        if b.name != robot.BASE_BODY:
            spec.delete(b)
    for s in list(spec.sensors):
        spec.delete(s)
    for g in spec.geoms:
        g.contype = g.conaffinity = 0
    return spec.compile()


def host_model(scene: Scene, impl: str) -> mujoco.MjModel:
    """The model MJX runs. warp: the native one, with box-box pairs on MuJoCo Warp's primitive collider (its
    default is general convex collision; MuJoCo's C collider uses the box-box primitive, and LIBERO's scenes are
    mostly boxes). jax: without the contact sensors (unsupported there)."""
    if impl != "warp":
        return _build_spec(scene, contact_sensors=False).compile()
    m = copy.copy(scene.model)
    m.opt.disableflags |= mujoco.mjtDisableBit.mjDSBL_NATIVECCD  # MuJoCo Warp: box-box -> primitive
    return m


def world_data_shape(scene: Scene, impl: str):
    """Shapes of one world's mjx.Data as the backend allocates it (warp: its share of the contact buffer and its
    constraint rows), for memory estimates."""
    kw = {} if impl == "jax" else {"naconmax": CONTACTS_PER_WORLD, "njmax": ROWS_PER_WORLD}
    return jax.eval_shape(lambda: mjx.make_data(host_model(scene, impl), impl=impl, **kw))


def geom_groups(scene: Scene, m: mujoco.MjModel) -> np.ndarray:
    """(ngeom,) contact group of each geom: entity index (its whole subtree), E / E+1 for the left / right finger
    subtrees, -1 for everything else."""
    E = len(scene.entities)
    roots = {m.body(scene.info[n].root_body).id: i for i, n in enumerate(scene.entities)}
    roots.update({m.body(f).id: E + k for k, f in enumerate(robot.FINGER_BODIES)})
    out = np.full(m.ngeom, -1, np.int32)
    for g in range(m.ngeom):
        b = int(m.geom_bodyid[g])
        while b != 0 and b not in roots:
            b = int(m.body_parentid[b])
        out[g] = roots.get(b, -1)
    return out


class MjxBackend:
    def __init__(self, scene: Scene, impl: str = "warp", contacts_per_world: int = CONTACTS_PER_WORLD,
                 rows_per_world: int = ROWS_PER_WORLD):
        self.scene, self.impl = scene, impl
        self.contacts_per_world, self.rows_per_world = contacts_per_world, rows_per_world
        if impl == "warp":
            # MuJoCo Warp's FFI calls name per-process launch records (a counter in the HLO, the launch's static
            # arguments only in this process): a persisted executable loaded by another process could replay the wrong
            # record. So this process writes nothing more to JAX's persistent compilation cache (none of its warp
            # programs can be found there by anyone).
            jax.config.update("jax_enable_compilation_cache", False)
        self.m_host = host_model(scene, impl)
        try:
            self.mx = mjx.put_model(self.m_host, impl=impl)
        except NotImplementedError as e:  # MJX's JAX collider lacks robosuite's mount cylinder against meshes
            raise ConfigError(f"MJX impl {impl!r} cannot simulate this scene ({e}); use mjx_impl warp",
                              task=scene.tasks[0].name, field="mjx_impl", token=impl) from e
        self.capacity_bits = 0
        if impl == "warp":
            self.capacity_bits = capacity_bits()
            self.mx = self.mx.tree_replace({"opt._impl.warn_overflow": 0})
        self.nsub = robot.substeps(self.m_host)
        rm = scene.robot
        self.rm = rm
        rmod = robot_model(scene)
        self.r_mx = mjx.put_model(rmod, impl="jax")
        self.r_d0 = mjx.make_data(rmod, impl="jax")
        names = robot.ARM_JOINTS + robot.FINGER_JOINTS
        self.r_qpos = np.array([rmod.jnt_qposadr[rmod.joint(n).id] for n in names])
        self.r_dof = np.array([rmod.jnt_dofadr[rmod.joint(n).id] for n in names])
        self.r_site_body = int(rmod.site_bodyid[rmod.site(robot.GRIP_SITE).id])
        self.r_site = rmod.site(robot.GRIP_SITE).id
        self.q_adr = np.concatenate([rm.arm_qpos, rm.finger_qpos])
        self.v_adr = np.concatenate([rm.arm_dof, np.array([self.m_host.jnt_dofadr[self.m_host.joint(n).id]
                                                           for n in robot.FINGER_JOINTS])])
        self.lo, self.hi = (jnp.asarray(self.m_host.actuator_ctrlrange[rm.arm_act, k]) for k in (0, 1))
        self.groups = jnp.asarray(geom_groups(scene, self.m_host))
        self.pairs = jnp.asarray(scene.pairs)
        self.ngroup = len(scene.entities) + 2
        self.pair_found = scene.sensors.pair_found if impl == "warp" else None

    def init_data(self, state: np.ndarray, mocap: np.ndarray) -> mjx.Data:
        """Batched mjx.Data from full-physics states (n, nstate) of the native model and mocap poses."""
        return self._init(state.shape[0])(jnp.asarray(state), jnp.asarray(mocap))

    @functools.lru_cache(maxsize=8)
    def _init(self, n: int):
        m = self.m_host
        nq, nv = m.nq, m.nv
        # warp's contact buffer is shared by all worlds; its constraint rows are per world
        kw = {} if self.impl == "jax" else {"naconmax": self.contacts_per_world * n, "njmax": self.rows_per_world}
        d0 = mjx.make_data(m, impl=self.impl, **kw)

        def one(s, mocap):
            d = d0.replace(time=s[0], qpos=s[1:1 + nq], qvel=s[1 + nq:1 + nq + nv], mocap_pos=mocap[:, :3],
                           mocap_quat=mocap[:, 3:])
            return mjx.forward(self.mx, d)

        return jax.jit(jax.vmap(one))

    def arm_dynamics(self, qpos, qvel):
        """(mass (7, 7), jac (6, 7), bias (7,), ee_pos, ee_mat, ee_vel (6,)) of one world's arm, as robosuite's
        controller reads them (robot-only model; MJX's JAX smooth dynamics)."""
        rm, d = self.r_mx, self.r_d0
        d = d.replace(qpos=d.qpos.at[self.r_qpos].set(qpos[self.q_adr]),
                      qvel=d.qvel.at[self.r_dof].set(qvel[self.v_adr]))
        d = mjx.kinematics(rm, d)
        d = mjx.com_pos(rm, d)
        d = mjx.crb(rm, d)
        d = mjx.com_vel(rm, d)
        d = mjx.rne(rm, d)
        full = mjx.full_m(rm, d)
        arm = self.r_dof[:7]
        jp, jr = mjx.jac(rm, d, d.site_xpos[self.r_site], self.r_site_body)  # (nv, 3) each
        jac = jnp.concatenate([jp.T, jr.T], 0)
        vel = jac @ d.qvel
        return (full[jnp.ix_(arm, arm)], jac[:, arm], d.qfrc_bias[arm], d.site_xpos[self.r_site],
                d.site_xmat[self.r_site].reshape(3, 3), vel)

    def step(self, d: mjx.Data, gripper_ctrl: jnp.ndarray, udata: jnp.ndarray) -> mjx.Data:
        """One 20 Hz control step of one world: per substep, robosuite's OSC torques (goal and null-space target
        from the controller's userdata slots) and the gripper servos' ramp, then mjx.step."""
        rm = self.rm
        goal_pos = udata[robot.U_GOAL_POS:robot.U_GOAL_POS + 3]
        goal_ori = udata[robot.U_GOAL_ORI:robot.U_GOAL_ORI + 9].reshape(3, 3)
        q0 = udata[robot.U_QINIT:robot.U_QINIT + 7]

        def sub(k, d):
            mass, jac, bias, p, r, vel = self.arm_dynamics(d.qpos, d.qvel)
            tau = control.osc_torques(mass, jac, bias, d.qpos[rm.arm_qpos], d.qvel[rm.arm_dof], p, r, vel,
                                      goal_pos, goal_ori, q0)
            ctrl = d.ctrl.at[rm.arm_act].set(jnp.clip(tau, self.lo, self.hi)).at[rm.gripper_act].set(gripper_ctrl[k])
            return mjx.step(self.mx, d.replace(ctrl=ctrl))

        return jax.lax.fori_loop(0, self.nsub, sub, d)

    def found(self, d: mjx.Data) -> jnp.ndarray:
        """(P,) contact found flags of one world's data (the native contact sensors' pairs)."""
        if self.pair_found is not None:
            return d.sensordata[self.pair_found]
        con = d._impl.contact
        g = self.groups[con.geom]  # (C, 2)
        g = jnp.where(g < 0, self.ngroup, g)
        active = con.dist < 0
        mat = jnp.zeros((self.ngroup + 1, self.ngroup + 1), bool).at[g[:, 0], g[:, 1]].max(active)
        mat = mat | mat.T
        return mat[self.pairs[:, 0], self.pairs[:, 1]].astype(jnp.float32)

    def read(self, d: mjx.Data) -> tuple[jnp.ndarray, jnp.ndarray, jnp.ndarray, jnp.ndarray]:
        """-> (sensordata, found, robot joints (9,), fail) for one world; fail: 0, FAIL_VELOCITY (NaN or exploding
        velocities) or FAIL_OVERFLOW (MuJoCo Warp dropped contacts or constraint rows of this world)."""
        blown = ~jnp.all(jnp.isfinite(d.qpos)) | (jnp.max(jnp.abs(d.qvel)) > QVEL_LIMIT)
        fail = jnp.where(blown, FAIL_VELOCITY, 0)
        if self.capacity_bits:
            fail = jnp.where((d._impl.overflow & self.capacity_bits) != 0, FAIL_OVERFLOW, fail)
        return d.sensordata, self.found(d), d.qpos[self.q_adr], fail.astype(jnp.int32)

    @staticmethod
    def hold(new: mjx.Data, old: mjx.Data, done: jnp.ndarray) -> mjx.Data:
        """Batched data after a step with the finished worlds (done (N,)) put back where they were. Only the state
        (qpos, qvel, act) is selected, not the whole tree: warp's contact arrays are shared by all worlds, and its
        per-world constraint arrays are large. A held world re-simulates the same step from the same state, so it
        never drifts or blows up and keeps its few contacts in the shared buffer."""
        keep = lambda a, b: jnp.where(done.reshape((-1,) + (1,) * (a.ndim - 1)), b, a)  # noqa: E731
        return new.replace(qpos=keep(new.qpos, old.qpos), qvel=keep(new.qvel, old.qvel), act=keep(new.act, old.act))
