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

ARM_JOINTS = tuple(f"robot0_joint{i}" for i in range(1, 8))
FINGER_JOINTS = ("gripper0_finger_joint1", "gripper0_finger_joint2")
ARM_ACTUATORS = tuple(f"robot0_torq_j{i}" for i in range(1, 8))
GRIPPER_ACTUATORS = ("gripper0_gripper_finger_joint1", "gripper0_gripper_finger_joint2")
GRIP_SITE = "gripper0_grip_site"  # robosuite's OSC end-effector frame (the gripper's grip_site)
FINGER_BODIES = ("gripper0_leftfinger", "gripper0_rightfinger")  # subtrees: finger and its pad (tip) body
BASE_BODY = "robot0_base"
EYE_IN_HAND = "robot0_eye_in_hand"

CONTROL_DT = 0.05  # LIBERO's control_freq 20 Hz


def substeps(m: mujoco.MjModel) -> int:
    """Physics steps per 20 Hz action (LIBERO: 0.05 / 0.002 = 25)."""
    return int(round(CONTROL_DT / m.opt.timestep))


# Per-world slots of mjData.userdata read by the native OSC controller (native_osc.c; keep the two in step).
U_MAGIC, U_SITE, U_DOF, U_QPOS, U_ACT, U_GOAL_POS, U_GOAL_ORI, U_QINIT, U_KP, U_KD, U_NULL_KP = (
    0, 1, 2, 9, 16, 23, 26, 35, 42, 43, 44)
NUSERDATA = 45
USERDATA_MAGIC = 1234567.0  # exact in float32


@dataclass(frozen=True)
class Chain:
    """The kinematic chain world -> grip site, one row per body on the path. Hashable and static: `fk` sees these
    numbers as constants (XLA folds them; traced, the chain's many tiny ops ran ~1000x slower on CPU)."""

    body_pos: tuple  # (B,) (x, y, z) body offsets in the parent frame
    body_mat: tuple  # (B,) 9-tuples: body rotations in the parent frame (row-major)
    joint: tuple  # (B,) arm joint index 0..6 of the body's hinge, -1: none
    jnt_pos: tuple  # (B,) hinge anchors in the body frame
    jnt_axis: tuple  # (B,) hinge axes in the body frame
    site_pos: tuple  # grip site in the last body's frame
    site_mat: tuple


def _tup(a) -> tuple:
    return tuple(tuple(float(v) for v in np.ravel(r)) for r in a)


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
        mats = np.zeros((len(path), 9))
        for k, body in enumerate(path):
            mujoco.mju_quat2Mat(mats[k], m.body_quat[body])
        site_mat = np.zeros(9)
        mujoco.mju_quat2Mat(site_mat, m.site_quat[site])
        chain = Chain(body_pos=_tup(m.body_pos[path]), body_mat=_tup(mats), joint=tuple(int(j) for j in joint),
                      jnt_pos=_tup(jpos), jnt_axis=_tup(jaxis), site_pos=tuple(map(float, m.site_pos[site])),
                      site_mat=tuple(map(float, site_mat)))
        gact = np.array([m.actuator(n).id for n in GRIPPER_ACTUATORS])
        return cls(arm_qpos=m.jnt_qposadr[jid], arm_dof=m.jnt_dofadr[jid], finger_qpos=m.jnt_qposadr[fid],
                   finger_dof=m.jnt_dofadr[fid], arm_act=np.array([m.actuator(n).id for n in ARM_ACTUATORS]),
                   gripper_act=gact, gripper_ctrlrange=m.actuator_ctrlrange[gact].copy(), grip_site=site,
                   base_pos=m.body_pos[m.body(BASE_BODY).id].copy(), chain=chain,
                   init_qpos=np.asarray(source.robot_init_qpos), init_noise=source.robot_init_noise)


def fk(chain: Chain, q7):
    """Grip-site world position (3,) and rotation matrix (3, 3) for arm angles `q7` (MuJoCo's kinematics on the
    chain: body offset and rotation, then the hinge's rotation about its anchor)."""
    q7 = jnp.asarray(q7)
    dt = q7.dtype
    pos = jnp.zeros(3, dt)
    rot = jnp.eye(3, dtype=dt)
    for k in range(len(chain.body_pos)):
        pos = pos + rot @ np.asarray(chain.body_pos[k], dt)
        rot = rot @ np.asarray(chain.body_mat[k], dt).reshape(3, 3)
        j = chain.joint[k]
        if j >= 0:
            a = np.asarray(chain.jnt_axis[k], dt)
            kx = np.array([[0.0, -a[2], a[1]], [a[2], 0.0, -a[0]], [-a[1], a[0], 0.0]], dt)
            rj = np.eye(3, dtype=dt) + jnp.sin(q7[j]) * kx + (1.0 - jnp.cos(q7[j])) * (kx @ kx)
            anchor = np.asarray(chain.jnt_pos[k], dt)
            pos = pos + rot @ anchor - (rot @ rj) @ anchor
            rot = rot @ rj
    return pos + rot @ np.asarray(chain.site_pos, dt), rot @ np.asarray(chain.site_mat, dt).reshape(3, 3)
