"""LIBERO's OSC_POSE action interface as a pure-JAX function, the same on every physics backend.

LIBERO action (7,): ``[dx, dy, dz, dax, day, daz, gripper]`` clipped to [-1, 1]; position deltas scaled to
+-0.05 m, rotation deltas to +-0.5 rad (axis-angle, world frame); gripper -1 open, +1 close.

Design (differs from robosuite's OSC on purpose; see `action_to_ctrl`): from the measured arm angles,
forward kinematics (`fk`, the Panda chain of `robot.DH`) gives the EE pose; the goal is that pose moved by the
scaled delta (``p* = p + dp``, ``R* = exp(dw) R``); a few damped-least-squares Gauss-Newton steps on the
geometric Jacobian (`jacobian`) turn the goal into joint targets, after a small null-space pull toward
`robot.INIT_QPOS`; targets are clipped to the joint limits. The arm's position servos then track the targets
during the physics substeps. Everything is jnp on fixed shapes: jit-, vmap- and grad-able, no Python control
flow on values. The environment should carry the previous ``ctrl[:7]`` and pass it as `q_ref` (integrated
reference: no drift from servo lag); the held pose then drifts < 1e-6 m over 600 zero-action steps.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from clbench_jax.sim import robot

POS_SCALE = 0.05          # m per unit action
ROT_SCALE = 0.5           # rad per unit action
DLS_DAMPING = 0.02        # lambda of the damped least squares (J^T (J J^T + lambda^2 I)^-1)
IK_ITERATIONS = 3         # Gauss-Newton refinements per control step
NULLSPACE_GAIN = 0.05     # fraction of the posture error to INIT_QPOS removed per step, in the null space
MAX_JOINT_STEP = 0.6      # rad: cap on one control step's joint change (guards near singularities)
REF_WINDUP = 0.3          # rad: the integrated reference stays this close to the measured joints
LIMIT_MARGIN = 0.01       # rad: targets stay this far inside the joint limits
GRIPPER_OPEN = 2 * robot.FINGER_RANGE[1]   # tendon target (total opening, m) for gripper = -1

_DH = np.asarray(robot.DH)
_LOWER = jnp.asarray(robot.JOINT_LOWER + LIMIT_MARGIN)
_UPPER = jnp.asarray(robot.JOINT_UPPER - LIMIT_MARGIN)
_INIT = jnp.asarray(robot.INIT_QPOS)


# ----------------------------------------------------------------------------------------------- rotations
def quat_to_mat(q):
    """Unit quaternion (w, x, y, z) -> 3x3 rotation matrix."""
    q = q / jnp.linalg.norm(q)
    w, x, y, z = q[0], q[1], q[2], q[3]
    return jnp.array([
        [1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
        [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
        [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)],
    ])


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


def axisangle_to_mat(w):
    """Rodrigues: axis-angle vector (3,) -> rotation matrix; exact and differentiable at 0."""
    theta2 = jnp.dot(w, w)
    theta = jnp.sqrt(jnp.maximum(theta2, 1e-30))
    small = theta2 < 1e-8
    a = jnp.where(small, 1 - theta2 / 6, jnp.sin(theta) / theta)
    b = jnp.where(small, 0.5 - theta2 / 24, (1 - jnp.cos(theta)) / jnp.maximum(theta2, 1e-30))
    k = jnp.array([[0.0, -w[2], w[1]], [w[2], 0.0, -w[0]], [-w[1], w[0], 0.0]])
    return jnp.eye(3) + a * k + b * (k @ k)


def quat_to_axisangle(q):
    """Quaternion (w, x, y, z) -> axis-angle vector with angle in [0, pi] (sign canonicalised to w >= 0)."""
    q = q * jnp.where(q[0] < 0, -1.0, 1.0)
    v = q[1:]
    s = jnp.linalg.norm(v)
    angle = 2 * jnp.arctan2(s, q[0])
    scale = jnp.where(s < 1e-9, 2.0 / jnp.maximum(q[0], 1e-9), angle / jnp.maximum(s, 1e-30))
    return v * scale


def mat_to_axisangle(m):
    """Rotation matrix -> axis-angle vector (angle in [0, pi])."""
    return quat_to_axisangle(mat_to_quat(m))


# -------------------------------------------------------------------------------------- forward kinematics
def _rot_x(c, s):
    return jnp.array([[1.0, 0.0, 0.0], [0.0, c, -s], [0.0, s, c]])


def _rot_z(c, s):
    return jnp.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])


def _frames(q7, base_pos, base_quat):
    """World (origin, z-axis) of joints 1..7 and the grip-site pose."""
    p = jnp.asarray(base_pos, dtype=q7.dtype)
    r = quat_to_mat(jnp.asarray(base_quat, dtype=q7.dtype))
    origins, axes = [], []
    for i in range(8):
        a, d, alpha = _DH[i]
        ca, sa = float(np.cos(alpha)), float(np.sin(alpha))
        p = p + r @ jnp.array([a, -sa * d, ca * d], dtype=q7.dtype)
        r = r @ _rot_x(ca, sa).astype(q7.dtype)
        if i < 7:
            origins.append(p)
            axes.append(r[:, 2])
            r = r @ _rot_z(jnp.cos(q7[i]), jnp.sin(q7[i]))
    r = r @ _rot_z(np.cos(robot.HAND_YAW), np.sin(robot.HAND_YAW)).astype(q7.dtype)
    p = p + r[:, 2] * robot.GRIP_OFFSET
    return jnp.stack(origins), jnp.stack(axes), p, r


def fk(q7, base_pos, base_quat=(1.0, 0.0, 0.0, 0.0)):
    """Grip-site (EE) world position (3,) and rotation matrix (3, 3) for arm angles `q7`."""
    _, _, p, r = _frames(jnp.asarray(q7), base_pos, base_quat)
    return p, r


def jacobian(q7, base_pos, base_quat=(1.0, 0.0, 0.0, 0.0)):
    """Geometric Jacobian (6, 7) of the grip site: rows 0-2 linear velocity, 3-5 angular velocity (world)."""
    origins, axes, p, _ = _frames(jnp.asarray(q7), base_pos, base_quat)
    jv = jnp.cross(axes, p[None, :] - origins)      # (7, 3)
    return jnp.concatenate([jv.T, axes.T], axis=0)


def _dls(j, e):
    jjt = j @ j.T + (DLS_DAMPING ** 2) * jnp.eye(6, dtype=j.dtype)
    return j.T @ jnp.linalg.solve(jjt, e)


# ------------------------------------------------------------------------------------------------- control
def scale_action(action):
    """Clip to [-1, 1]; return (dpos m (3,), daxisangle rad (3,), gripper in [-1, 1])."""
    a = jnp.clip(jnp.asarray(action), -1.0, 1.0)
    return a[:3] * POS_SCALE, a[3:6] * ROT_SCALE, a[6]


def gripper_ctrl(g):
    """Gripper command in [-1, 1] (-1 open, +1 close) -> tendon target = total finger opening (m).

    Linear, so the function stays stateless: -1 -> 0.08 (open), +1 -> 0 (closed), 0 -> half open. LIBERO's
    demonstrations use +-1, where this equals robosuite's end points (robosuite ramps toward them by sign).
    """
    return GRIPPER_OPEN * 0.5 * (1.0 - jnp.clip(g, -1.0, 1.0))


def ik_targets(q_arm, p_goal, r_goal, base_pos, base_quat=(1.0, 0.0, 0.0, 0.0)):
    """Joint targets reaching the EE goal pose from `q_arm` (null-space posture pull, DLS steps, limits)."""
    q = jnp.asarray(q_arm)
    j = jacobian(q, base_pos, base_quat)
    jpinv_j = j.T @ jnp.linalg.solve(j @ j.T + (DLS_DAMPING ** 2) * jnp.eye(6, dtype=j.dtype), j)
    qt = q + (jnp.eye(7, dtype=q.dtype) - jpinv_j) @ (NULLSPACE_GAIN * (_INIT.astype(q.dtype) - q))
    for _ in range(IK_ITERATIONS):
        p, r = fk(qt, base_pos, base_quat)
        e = jnp.concatenate([p_goal - p, mat_to_axisangle(r_goal @ r.T)])
        qt = qt + _dls(jacobian(qt, base_pos, base_quat), e)
    qt = q + jnp.clip(qt - q, -MAX_JOINT_STEP, MAX_JOINT_STEP)
    return jnp.clip(qt, _LOWER.astype(q.dtype), _UPPER.astype(q.dtype))


def action_to_ctrl(q_arm, action, base_pos, base_quat=(1.0, 0.0, 0.0, 0.0), q_ref=None, delta_gain=1.0):
    """LIBERO 7-D action -> ctrl (8,): 7 arm joint targets (rad) + gripper tendon target (m).

    The goal is the reference pose moved by the scaled delta. The reference is `q_ref` when given (pass the
    previous step's ``ctrl[:7]``: the commanded pose is integrated, so servo lag never turns into pose drift),
    its lead over the measured `q_arm` scaled down to at most `REF_WINDUP` rad (pushing against a table cannot
    wind the target up); without `q_ref` it is the measured pose (robosuite's OSC re-bases its goal on the
    measured pose the same way).

    Speed: a constant action ``a`` moves the commanded pose ``0.05 a`` m (``0.5 a`` rad) per step; the servos
    (25 rad/s bandwidth, see `robot.Physics`) follow about one step behind, so with `q_ref` the EE covers ~90%
    of it during the motion and all of it a few steps after the action stops (tests: 10 steps of +x 0.5 ->
    0.224 m during, 0.249 m settled). Without `q_ref` the lag is lost each step (~0.5 of the delta per step).
    robosuite's OSC (kp 150, critical damping, goal re-based every step) covers a steady ~0.27 of the delta
    per step; ``delta_gain=0.27`` approximates that speed for policies trained on LIBERO's own demonstrations.
    `delta_gain` scales the translation and rotation deltas, not the gripper.
    """
    q = jnp.asarray(q_arm)
    if q_ref is None:
        qr = q
    else:   # shrink the whole lead (not per joint, which would bend the path) to at most REF_WINDUP
        lead = jnp.asarray(q_ref, q.dtype) - q
        qr = q + lead * jnp.minimum(1.0, REF_WINDUP / jnp.maximum(jnp.max(jnp.abs(lead)), 1e-9))
    dp, dw, g = scale_action(action)
    dp, dw = dp * delta_gain, dw * delta_gain
    p, r = fk(qr, base_pos, base_quat)
    targets = ik_targets(qr, p + dp.astype(q.dtype), axisangle_to_mat(dw.astype(q.dtype)) @ r, base_pos,
                         base_quat)
    return jnp.concatenate([targets, gripper_ctrl(g)[None].astype(q.dtype)])


def proprio(q_arm, q_fingers, base_pos, base_quat=(1.0, 0.0, 0.0, 0.0)):
    """LIBERO observation keys from joint positions.

    gripper_states follows robosuite's PandaGripper sign convention ``[q1, -q2]`` (open: [0.04, -0.04]);
    ee_ori is the axis-angle of the grip-site frame (angle in [0, pi]); ee_states = [ee_pos, ee_ori].
    """
    q = jnp.asarray(q_arm)
    qf = jnp.asarray(q_fingers)
    p, r = fk(q, base_pos, base_quat)
    ori = mat_to_axisangle(r)
    return {
        "joint_states": q,
        "gripper_states": jnp.stack([qf[0], -qf[1]]),
        "ee_pos": p,
        "ee_ori": ori,
        "ee_states": jnp.concatenate([p, ori]),
    }


action_to_ctrl_jit = jax.jit(action_to_ctrl)
