"""robosuite's MountedPanda with the PandaGripper, as LIBERO builds it.

The robot is part of LIBERO's MJCF (robosuite 1.4.0's panda and panda_gripper models, all 7 links, the hand and
both fingers colliding; torque motors on the arm, two position servos on the fingers). This module names its parts
and extracts, from the compiled model, what the controller and the observations need: qpos / dof / actuator
addresses and the kinematic chain from the world to the grip site, for a forward kinematics in jnp (`fk`) that
equals MuJoCo's (tests/test_libero_scene.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import jax.numpy as jnp
import mujoco
import numpy as np
from flax import struct

ARM_JOINTS = tuple(f"robot0_joint{i}" for i in range(1, 8))
FINGER_JOINTS = ("gripper0_finger_joint1", "gripper0_finger_joint2")
ARM_ACTUATORS = tuple(f"robot0_torq_j{i}" for i in range(1, 8))
GRIPPER_ACTUATORS = ("gripper0_gripper_finger_joint1", "gripper0_gripper_finger_joint2")
GRIP_SITE = "gripper0_grip_site"  # robosuite's OSC end-effector frame (the gripper's grip_site)
FINGER_BODIES = ("gripper0_leftfinger", "gripper0_rightfinger")  # subtrees: finger and its pad (tip) body
BASE_BODY = "robot0_base"
EYE_IN_HAND = "robot0_eye_in_hand"

# Per-world slots of mjData.userdata read by the native OSC controller (native_osc.c; keep the two in step).
U_MAGIC, U_SITE, U_DOF, U_QPOS, U_ACT, U_GOAL_POS, U_GOAL_ORI, U_QINIT, U_KP, U_KD, U_NULL_KP = (
    0, 1, 2, 9, 16, 23, 26, 35, 42, 43, 44)
NUSERDATA = 45
USERDATA_MAGIC = 20241201.0


@struct.dataclass
class Chain:
    """The kinematic chain world -> grip site as arrays (one row per body on the path; jnp pytree)."""

    body_pos: jnp.ndarray  # (B, 3) body offsets in the parent frame
    body_quat: jnp.ndarray  # (B, 4)
    joint: tuple = struct.field(pytree_node=False)  # (B,) arm joint index 0..6 of the body's hinge, -1: none
    jnt_pos: jnp.ndarray  # (B, 3) hinge anchor in the body frame
    jnt_axis: jnp.ndarray  # (B, 3) hinge axis in the body frame
    site_pos: jnp.ndarray  # (3,) grip site in the last body's frame
    site_quat: jnp.ndarray  # (4,)


@dataclass(frozen=True)
class RobotModel:
    """Static facts about the robot in one compiled model."""

    arm_qpos: np.ndarray  # (7,) qpos addresses
    arm_dof: np.ndarray  # (7,) dof addresses
    finger_qpos: np.ndarray  # (2,)
    finger_dof: np.ndarray  # (2,)
    arm_act: np.ndarray  # (7,) actuator ids (torque motors)
    gripper_act: np.ndarray  # (2,) actuator ids (finger position servos)
    gripper_ctrlrange: np.ndarray  # (2, 2)
    grip_site: int
    base_pos: np.ndarray  # (3,) robot0_base in the world
    chain: Chain
    init_qpos: np.ndarray  # (7,) robosuite's MountedPanda init_qpos (before reset noise)
    init_noise: float  # std of robosuite's gaussian reset noise (rad)

    @classmethod
    def from_model(cls, m: mujoco.MjModel, source) -> "RobotModel":
        jid = [m.joint(n).id for n in ARM_JOINTS]
        fid = [m.joint(n).id for n in FINGER_JOINTS]
        site = m.site(GRIP_SITE).id
        path, b = [], int(m.site_bodyid[site])
        while b != 0:
            path.append(b)
            b = int(m.body_parentid[b])
        path.reverse()
        joint = np.full(len(path), -1, np.int32)
        jpos, jaxis = np.zeros((len(path), 3)), np.zeros((len(path), 3))
        for k, body in enumerate(path):
            hinges = [j for j in range(m.body_jntadr[body], m.body_jntadr[body] + m.body_jntnum[body])]
            if hinges:
                if len(hinges) != 1 or hinges[0] not in jid:
                    raise ValueError(f"unexpected joints on the arm chain body {m.body(body).name}")
                joint[k] = jid.index(hinges[0])
                jpos[k], jaxis[k] = m.jnt_pos[hinges[0]], m.jnt_axis[hinges[0]]
        chain = Chain(body_pos=jnp.asarray(m.body_pos[path]), body_quat=jnp.asarray(m.body_quat[path]),
                      joint=tuple(int(j) for j in joint), jnt_pos=jnp.asarray(jpos), jnt_axis=jnp.asarray(jaxis),
                      site_pos=jnp.asarray(m.site_pos[site]), site_quat=jnp.asarray(m.site_quat[site]))
        gact = np.array([m.actuator(n).id for n in GRIPPER_ACTUATORS])
        return cls(arm_qpos=m.jnt_qposadr[jid], arm_dof=m.jnt_dofadr[jid], finger_qpos=m.jnt_qposadr[fid],
                   finger_dof=m.jnt_dofadr[fid], arm_act=np.array([m.actuator(n).id for n in ARM_ACTUATORS]),
                   gripper_act=gact, gripper_ctrlrange=m.actuator_ctrlrange[gact].copy(), grip_site=site,
                   base_pos=m.body_pos[m.body(BASE_BODY).id].copy(), chain=chain,
                   init_qpos=np.asarray(source.robot_init_qpos), init_noise=source.robot_init_noise)


def quat_mul(a, b):
    """Hamilton product of (w, x, y, z) quaternions."""
    aw, ax, ay, az = a[..., 0], a[..., 1], a[..., 2], a[..., 3]
    bw, bx, by, bz = b[..., 0], b[..., 1], b[..., 2], b[..., 3]
    return jnp.stack([aw * bw - ax * bx - ay * by - az * bz, aw * bx + ax * bw + ay * bz - az * by,
                      aw * by - ax * bz + ay * bw + az * bx, aw * bz + ax * by - ay * bx + az * bw], -1)


def quat_to_mat(q):
    """Unit quaternion (w, x, y, z) -> rotation matrix (normalised first)."""
    q = q / jnp.linalg.norm(q)
    w, x, y, z = q[0], q[1], q[2], q[3]
    return jnp.array([
        [1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
        [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
        [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)],
    ])


def _axis_quat(axis, angle):
    h = 0.5 * angle
    return jnp.concatenate([jnp.cos(h)[None], jnp.sin(h) * axis])


def fk(chain: Chain, q7):
    """Grip-site world position (3,) and rotation matrix (3, 3) for arm angles `q7` (MuJoCo's kinematics on
    the chain: body offset, then the hinge's rotation about its anchor)."""
    q7 = jnp.asarray(q7)
    dt = q7.dtype
    pos = jnp.zeros(3, dt)
    quat = jnp.array([1.0, 0.0, 0.0, 0.0], dt)
    for k in range(chain.body_pos.shape[0]):
        pos = pos + quat_to_mat(quat) @ chain.body_pos[k].astype(dt)
        quat = quat_mul(quat, chain.body_quat[k].astype(dt))
        j = chain.joint[k]
        if j >= 0:
            anchor = pos + quat_to_mat(quat) @ chain.jnt_pos[k].astype(dt)
            quat = quat_mul(quat, _axis_quat(chain.jnt_axis[k].astype(dt), q7[j]))
            pos = anchor - quat_to_mat(quat) @ chain.jnt_pos[k].astype(dt)
    r = quat_to_mat(quat)
    return pos + r @ chain.site_pos.astype(dt), r @ quat_to_mat(chain.site_quat.astype(dt))
