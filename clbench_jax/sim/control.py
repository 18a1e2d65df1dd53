"""LIBERO's action interface: robosuite 1.4's OSC_POSE (its default config, as LIBERO uses it) and the
PandaGripper, as pure jnp functions.

Action (7,): ``[dx, dy, dz, dax, day, daz, gripper]`` in [-1, 1] (clipped); deltas scaled to 0.05 m and 0.5 rad.
Per 20 Hz action (robosuite `OperationalSpaceController.set_goal`, from the state at the action's first substep):
    goal_pos = ee_pos + 0.05 a[:3]
    goal_ori = exp(0.5 a[3:6]) @ ee_ori   -- only if a rotation delta is non-zero; else the previous goal_ori stays
Per physics substep (`run_controller`, 25 per action; on the native backend in C, `native_osc.c`):
    F   = kp (goal_pos - ee_pos) - kd v_ee                 kp 150, kd = 2 sqrt(kp) (damping ratio 1)
    Tq  = kp * 0.5 sum_c (R[:, c] x R_goal[:, c]) - kd w_ee
    tau = J^T [Lpos F ; Lori Tq] + qfrc_bias + N^T M (10 (q0 - q) - 2 sqrt(10) qd),   L* = (J* M^-1 J*^T)^-1,
          N = I - M^-1 J^T Lfull J,  q0 the controller's initial joints; clipped to the motors' ctrlrange.
Gripper (PandaGripper.format_action, every substep): s <- clip(s + 0.01 sign(g), -1, 1) and the two finger servos
get ctrl = mid + half * (-s, s) of their ctrlranges: -1 opens, +1 closes, 8 actions from open to closed.
The controller state carried per world is (goal_ori, s, q0, ...): robosuite creates the controller at reset from
the (noised) reset joints q0 with goal_ori = their end-effector orientation, and s = 0. LIBERO then loads an initial
state, which robosuite's controller does not see: its cached end-effector pose stays the reset one until its first
`run_controller`, so the FIRST action's goal is taken from the reset pose, not from the initial state (2-3 cm away).
`set_goal` reproduces that; robosuite's first substep also uses the reset pose's Jacobian and mass matrix, which
this does not (one 2 ms substep per episode; its effect is in the open-loop comparison).
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from flax import struct

from clbench_jax.sim import robot

POS_SCALE = 0.05  # m per unit action (OSC_POSE output_max)
ROT_SCALE = 0.5  # rad per unit action
KP = 150.0
KD = 2.0 * float(np.sqrt(KP))  # damping ratio 1
NULL_KP = 10.0  # robosuite's nullspace_torques joint_kp
GRIPPER_SPEED = 0.01  # PandaGripper.speed: per substep


@struct.dataclass
class OscState:
    """Per-world controller state (robosuite keeps it in the controller and the gripper objects)."""

    goal_ori: jnp.ndarray  # (3, 3)
    gripper: jnp.ndarray  # () PandaGripper current_action[1] (s): -1 open .. +1 closed
    q0: jnp.ndarray  # (7,) the controller's initial joints (null-space target)
    reset_pos: jnp.ndarray  # (3,) end-effector pose at q0: what robosuite's controller holds until its first run
    reset_mat: jnp.ndarray  # (3, 3)
    fresh: jnp.ndarray  # () bool: the controller has run (its cached pose follows the state)


def reset_state(chain: robot.Chain, q0) -> OscState:
    """The controller as robosuite creates it at reset, from the reset joints q0."""
    p, r = robot.fk(chain, q0)
    return OscState(goal_ori=r, gripper=jnp.zeros((), r.dtype), q0=jnp.asarray(q0, r.dtype), reset_pos=p,
                    reset_mat=r, fresh=jnp.zeros((), bool))


def axisangle_to_mat(w):
    """Rodrigues: axis-angle vector (3,) -> rotation matrix; exact and differentiable at 0."""
    theta2 = jnp.dot(w, w)
    theta = jnp.sqrt(jnp.maximum(theta2, 1e-30))
    small = theta2 < 1e-8
    a = jnp.where(small, 1 - theta2 / 6, jnp.sin(theta) / theta)
    b = jnp.where(small, 0.5 - theta2 / 24, (1 - jnp.cos(theta)) / jnp.maximum(theta2, 1e-30))
    k = jnp.array([[0.0, -w[2], w[1]], [w[2], 0.0, -w[0]], [-w[1], w[0], 0.0]], w.dtype)
    return jnp.eye(3, dtype=w.dtype) + a * k + b * (k @ k)


def mat_to_quat(m):
    """3x3 rotation matrix -> unit quaternion (w, x, y, z) with w >= 0 (robust near 180 deg; branch-free)."""
    t = jnp.trace(m)
    cands = jnp.stack([
        jnp.array([1 + t, m[2, 1] - m[1, 2], m[0, 2] - m[2, 0], m[1, 0] - m[0, 1]]),
        jnp.array([m[2, 1] - m[1, 2], 1 + m[0, 0] - m[1, 1] - m[2, 2], m[0, 1] + m[1, 0], m[0, 2] + m[2, 0]]),
        jnp.array([m[0, 2] - m[2, 0], m[0, 1] + m[1, 0], 1 - m[0, 0] + m[1, 1] - m[2, 2], m[1, 2] + m[2, 1]]),
        jnp.array([m[1, 0] - m[0, 1], m[0, 2] + m[2, 0], m[1, 2] + m[2, 1], 1 - m[0, 0] - m[1, 1] + m[2, 2]]),
    ])
    diag = jnp.array([1 + t, 1 + m[0, 0] - m[1, 1] - m[2, 2], 1 - m[0, 0] + m[1, 1] - m[2, 2],
                      1 - m[0, 0] - m[1, 1] + m[2, 2]])
    q = cands[jnp.argmax(diag)]
    q = q / jnp.linalg.norm(q)
    return q * jnp.where(q[0] < 0, -1.0, 1.0)


def quat_to_axisangle(q):
    """Quaternion (w, x, y, z) -> axis-angle vector with angle in [0, pi] (sign canonicalised to w >= 0)."""
    q = q * jnp.where(q[0] < 0, -1.0, 1.0)
    v = q[1:]
    s = jnp.linalg.norm(v)
    angle = 2 * jnp.arctan2(s, q[0])
    scale = jnp.where(s < 1e-9, 2.0 / jnp.maximum(q[0], 1e-9), angle / jnp.maximum(s, 1e-30))
    return v * scale


def mat_to_axisangle(m):
    return quat_to_axisangle(mat_to_quat(m))


def set_goal(state: OscState, ee_pos, ee_mat, action):
    """robosuite's set_goal for one world: (goal_pos (3,), new state). `ee_*` from the action's first substep."""
    a = jnp.clip(jnp.asarray(action, ee_pos.dtype), -1.0, 1.0)
    dpos, drot = a[:3] * POS_SCALE, a[3:6] * ROT_SCALE
    ee_pos = jnp.where(state.fresh, ee_pos, state.reset_pos)
    ee_mat = jnp.where(state.fresh, ee_mat, state.reset_mat)
    goal_ori = jnp.where(jnp.any(drot != 0), axisangle_to_mat(drot) @ ee_mat, state.goal_ori)
    return ee_pos + dpos, state.replace(goal_ori=goal_ori, fresh=jnp.ones((), bool))


def gripper_ctrl(state: OscState, g, ctrlrange, n_substeps: int):
    """PandaGripper over one action: (ctrl (n_substeps, 2) for the two finger servos, new state)."""
    step = GRIPPER_SPEED * jnp.sign(jnp.asarray(g, state.gripper.dtype))
    s = jnp.clip(state.gripper + step * jnp.arange(1, n_substeps + 1, dtype=state.gripper.dtype), -1.0, 1.0)
    mid, half = ctrlrange.mean(-1), 0.5 * (ctrlrange[:, 1] - ctrlrange[:, 0])
    current = jnp.stack([-s, s], -1)  # robosuite's current_action = [-s, s]
    return mid + half * current, state.replace(gripper=s[-1])


def osc_torques(mass, jac, bias, q, qd, ee_pos, ee_mat, ee_vel, goal_pos, goal_ori, q0):
    """run_controller for one world: arm torques (7,) before the ctrlrange clip.
    mass (7, 7) arm block of the full mass matrix; jac (6, 7) [jacp; jacr] of the grip site on the arm dofs;
    bias (7,) qfrc_bias; ee_vel (6,) [linear; angular] site velocity (full Jacobian times full qvel)."""
    force = KP * (goal_pos - ee_pos) - KD * ee_vel[:3]
    ori_err = 0.5 * jnp.sum(jnp.cross(ee_mat.T, goal_ori.T), axis=0)
    torque = KP * ori_err - KD * ee_vel[3:]
    minv = jnp.linalg.inv(mass)
    lam = lambda j: jnp.linalg.inv(j @ minv @ j.T)  # noqa: E731
    wrench = jnp.concatenate([lam(jac[:3]) @ force, lam(jac[3:]) @ torque])
    jbar = minv @ jac.T @ lam(jac)
    null = jnp.eye(7, dtype=mass.dtype) - jbar @ jac
    pose = mass @ (NULL_KP * (q0 - q) - 2.0 * jnp.sqrt(NULL_KP) * qd)
    return jac.T @ wrench + bias + null.T @ pose


def userdata_static(rm: robot.RobotModel) -> np.ndarray:
    """(NUSERDATA,) the native controller's per-model slots (robot.U_* layout; native_osc.c reads them)."""
    static = np.zeros(robot.NUSERDATA)
    static[robot.U_MAGIC] = robot.USERDATA_MAGIC
    static[robot.U_SITE] = rm.grip_site
    static[robot.U_DOF:robot.U_DOF + 7] = rm.arm_dof
    static[robot.U_QPOS:robot.U_QPOS + 7] = rm.arm_qpos
    static[robot.U_ACT:robot.U_ACT + 7] = rm.arm_act
    static[robot.U_KP], static[robot.U_KD], static[robot.U_NULL_KP] = KP, KD, NULL_KP
    return static


def userdata(static, goal_pos, goal_ori, q0) -> jnp.ndarray:
    """(NUSERDATA,) one world's userdata: the static slots with its goal and null-space target."""
    u = jnp.asarray(static, goal_pos.dtype)
    u = u.at[robot.U_GOAL_POS:robot.U_GOAL_POS + 3].set(goal_pos)
    u = u.at[robot.U_GOAL_ORI:robot.U_GOAL_ORI + 9].set(goal_ori.reshape(9))
    return u.at[robot.U_QINIT:robot.U_QINIT + 7].set(q0)


def proprio(chain: robot.Chain, q_arm, q_fingers):
    """LIBERO's observation keys from exact joint positions (joint_states, gripper_states = the two finger
    joints as robosuite reports them, ee_pos / ee_ori / ee_states of the grip site, ee_ori as axis-angle)."""
    p, r = robot.fk(chain, q_arm)
    ori = mat_to_axisangle(r)
    return {"joint_states": jnp.asarray(q_arm), "gripper_states": jnp.asarray(q_fingers), "ee_pos": p,
            "ee_ori": ori, "ee_mat": r, "ee_states": jnp.concatenate([p, ori])}


def command(ud_static, gripper_range, state: OscState, ee_pos, ee_mat, action, n_substeps: int):
    """One world's 20 Hz action, from the end-effector pose at its first substep -> (gripper ctrl (n_substeps, 2),
    userdata (NUSERDATA,), goal_pos, new state)."""
    goal_pos, state = set_goal(state, ee_pos, ee_mat, action)
    g_ctrl, state = gripper_ctrl(state, jnp.asarray(action)[6], jnp.asarray(gripper_range, ee_pos.dtype),
                                 n_substeps)
    return g_ctrl, userdata(ud_static, goal_pos, state.goal_ori, state.q0), goal_pos, state

