"""Robot model (native MuJoCo physics) and the JAX OSC-style controller."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest

from clbench_jax.sim import control as C
from clbench_jax.sim import robot as R

BASE = np.array([-0.66, 0.0, 0.912])
TABLE_TOP = 0.9
CUBE_HALF = 0.025


def _scene(cube: bool = False, base_quat=(1.0, 0.0, 0.0, 0.0)):
    spec = mujoco.MjSpec()
    R.apply_physics_options(spec)
    w = spec.worldbody
    w.add_geom(name="floor", type=mujoco.mjtGeom.mjGEOM_PLANE, size=[3, 3, 0.1])
    w.add_geom(name="table", type=mujoco.mjtGeom.mjGEOM_BOX, size=[0.5, 0.6, TABLE_TOP / 2],
               pos=[0, 0, TABLE_TOP / 2])
    R.add_robot(spec, BASE, base_quat)
    if cube:
        b = w.add_body(name="cube", pos=[-0.2, 0.0, TABLE_TOP + CUBE_HALF])
        b.add_freejoint()
        b.add_geom(name="cube", type=mujoco.mjtGeom.mjGEOM_BOX, size=[CUBE_HALF] * 3, mass=0.15)
    model = spec.compile()
    data = mujoco.MjData(model)
    R.set_init_qpos(model, data)
    return model, data


_a2c = jax.jit(C.action_to_ctrl)


class _Env:
    """Minimal native loop: ctrl from the JAX controller (integrated reference), then substeps."""

    def __init__(self, model, data, base_quat=(1.0, 0.0, 0.0, 0.0)):
        self.m, self.d, self.base_quat = model, data, jnp.asarray(base_quat, jnp.float32)
        self.arm, self.fingers = R.robot_qpos_adr(model)
        self.act = R.robot_ctrl_adr(model)
        self.site = model.site(R.GRIP_SITE).id

    def step(self, action):
        q = jnp.asarray(self.d.qpos[self.arm], jnp.float32)
        q_ref = jnp.asarray(self.d.ctrl[self.act[:7]], jnp.float32)
        ctrl = _a2c(q, jnp.asarray(action, jnp.float32), jnp.asarray(BASE, jnp.float32), self.base_quat, q_ref)
        self.d.ctrl[self.act] = np.asarray(ctrl)
        mujoco.mj_step(self.m, self.d, nstep=R.PHYSICS.substeps)

    def ee(self):
        return self.d.site_xpos[self.site].copy()

    def ee_mat(self):
        return self.d.site_xmat[self.site].reshape(3, 3).copy()


def _act(dpos=(0, 0, 0), drot=(0, 0, 0), grip=-1.0):
    return np.r_[dpos, drot, grip].astype(np.float32)


# ------------------------------------------------------------------------------------------- model structure
def test_names_and_structure():
    m, d = _scene()
    for i in range(8):
        m.body(f"robot0_link{i}")
    for n in ("robot0_hand", "robot0_finger_left", "robot0_finger_right"):
        m.body(n)
    for n in (*R.ARM_JOINTS, *R.FINGER_JOINTS):
        m.joint(n)
    for n in (*R.ARM_ACTUATORS, R.GRIPPER_ACTUATOR):
        m.actuator(n)
    m.site(R.GRIP_SITE)
    m.camera(R.EYE_IN_HAND)
    arm, fingers = R.robot_qpos_adr(m)
    np.testing.assert_allclose(d.qpos[arm], R.INIT_QPOS)
    np.testing.assert_allclose(d.qpos[fingers], [0.04, 0.04])
    np.testing.assert_allclose(m.jnt_range[[m.joint(n).id for n in R.ARM_JOINTS]],
                               np.stack([R.JOINT_LOWER, R.JOINT_UPPER], 1))
    # only hand and finger geoms collide, and never with each other
    robot_geoms = [g for g in range(m.ngeom) if m.geom(g).name.startswith("robot0_")]
    colliding = [m.geom(g).name for g in robot_geoms if m.geom_contype[g] or m.geom_conaffinity[g]]
    assert colliding and all(("hand" in n or "finger" in n) for n in colliding)
    for g1 in robot_geoms:
        for g2 in robot_geoms:
            assert not (m.geom_contype[g1] & m.geom_conaffinity[g2])
    # open fingers are 8 cm apart
    gap = d.geom("robot0_finger_left_pad").xpos - d.geom("robot0_finger_right_pad").xpos
    assert abs(np.linalg.norm(gap) - 2 * 0.006 - 0.08) < 1e-6


# ------------------------------------------------------------------------------------------------ kinematics
@pytest.mark.parametrize("base_quat", [(1.0, 0.0, 0.0, 0.0), (np.cos(0.4), 0.0, 0.0, np.sin(0.4))])
def test_fk_and_jacobian_match_mujoco(base_quat):
    m, d = _scene(base_quat=base_quat)
    arm, _ = R.robot_qpos_adr(m)
    dofs = [m.jnt_dofadr[m.joint(n).id] for n in R.ARM_JOINTS]
    sid = m.site(R.GRIP_SITE).id
    fk = jax.jit(C.fk)
    jac = jax.jit(C.jacobian)
    rng = np.random.default_rng(0)
    for _ in range(5):
        q = rng.uniform(R.JOINT_LOWER, R.JOINT_UPPER)
        d.qpos[arm] = q
        mujoco.mj_forward(m, d)
        p, r = fk(jnp.asarray(q, jnp.float32), jnp.asarray(BASE, jnp.float32), jnp.asarray(base_quat, jnp.float32))
        np.testing.assert_allclose(p, d.site_xpos[sid], atol=1e-5)
        np.testing.assert_allclose(np.asarray(r).ravel(), d.site_xmat[sid], atol=1e-5)
        jp, jr = np.zeros((3, m.nv)), np.zeros((3, m.nv))
        mujoco.mj_jacSite(m, d, jp, jr, sid)
        j = jac(jnp.asarray(q, jnp.float32), jnp.asarray(BASE, jnp.float32), jnp.asarray(base_quat, jnp.float32))
        np.testing.assert_allclose(j, np.vstack([jp, jr])[:, dofs], atol=1e-5)


def test_rotation_helpers():
    rng = np.random.default_rng(1)
    for w in [np.zeros(3), np.array([np.pi - 1e-4, 0, 0]), np.array([0.0, 0.0, 3.1]), rng.normal(size=3)]:
        w = w.astype(np.float32)
        r = C.axisangle_to_mat(jnp.asarray(w))
        q = np.zeros(4)
        mujoco.mju_mat2Quat(q, np.asarray(r, np.float64).ravel())
        np.testing.assert_allclose(C.mat_to_quat(r) * np.sign(q[0] or 1), q, atol=1e-5)
        back = C.axisangle_to_mat(C.mat_to_axisangle(r))
        np.testing.assert_allclose(back, r, atol=1e-5)


def test_proprio_and_vmap():
    q = jnp.asarray(R.INIT_QPOS, jnp.float32)
    obs = C.proprio(q, jnp.array([0.04, 0.04]), BASE)
    assert obs["joint_states"].shape == (7,) and obs["gripper_states"].shape == (2,)
    np.testing.assert_allclose(obs["gripper_states"], [0.04, -0.04])
    assert obs["ee_states"].shape == (6,)
    np.testing.assert_allclose(obs["ee_states"], jnp.concatenate([obs["ee_pos"], obs["ee_ori"]]))
    # gripper pointing down: rotation close to pi about a horizontal axis
    assert abs(float(jnp.linalg.norm(obs["ee_ori"])) - np.pi) < 0.1
    qs = jnp.tile(q, (4, 1))
    acts = jnp.asarray(np.random.default_rng(0).uniform(-1, 1, (4, 7)), jnp.float32)
    ctrl = jax.jit(jax.vmap(C.action_to_ctrl, in_axes=(0, 0, None)))(qs, acts, jnp.asarray(BASE, jnp.float32))
    assert ctrl.shape == (4, 8) and bool(jnp.all(jnp.isfinite(ctrl)))
    lo, hi = R.JOINT_LOWER, R.JOINT_UPPER
    assert bool(jnp.all((ctrl[:, :7] >= lo) & (ctrl[:, :7] <= hi)))
    np.testing.assert_allclose(C.gripper_ctrl(jnp.array([-1.0, 1.0, 5.0])), [0.08, 0.0, 0.0])


def test_ik_targets_reach_goal():
    q = jnp.asarray(R.INIT_QPOS, jnp.float32)
    base = jnp.asarray(BASE, jnp.float32)
    ctrl = C.action_to_ctrl(q, jnp.array([0.4, -0.3, 0.2, 0.2, -0.1, 0.3, -1.0]), base)
    p0, r0 = C.fk(q, base)
    p1, r1 = C.fk(ctrl[:7], base)
    np.testing.assert_allclose(p1 - p0, [0.02, -0.015, 0.01], atol=5e-4)
    np.testing.assert_allclose(C.mat_to_axisangle(r1 @ r0.T), [0.1, -0.05, 0.15], atol=5e-3)


# -------------------------------------------------------------------------------------------------- physics
def test_held_pose_drift():
    m, d = _scene()
    env = _Env(m, d)
    p0 = env.ee()
    for _ in range(600):
        env.step(_act())
    drift = np.linalg.norm(env.ee() - p0)
    assert drift < 2e-3, drift


def test_translation_and_rotation_tracking():
    m, d = _scene()
    env = _Env(m, d)
    p0 = env.ee()
    for _ in range(10):
        env.step(_act(dpos=(0.5, 0, 0)))
    for _ in range(5):          # let the servos catch up with the integrated reference
        env.step(_act())
    dp = env.ee() - p0
    assert abs(dp[0] - 0.25) < 0.2 * 0.25, dp
    assert abs(dp[1]) < 0.01 and abs(dp[2]) < 0.01, dp
    for axis in range(3):
        r0 = env.ee_mat()
        drot = np.zeros(3)
        drot[axis] = 0.4        # 0.2 rad per step
        for _ in range(3):
            env.step(_act(drot=drot))
        for _ in range(5):
            env.step(_act())
        w = np.asarray(C.mat_to_axisangle(jnp.asarray(env.ee_mat() @ r0.T)))
        assert abs(w[axis] - 0.6) < 0.12, (axis, w)
        assert np.linalg.norm(np.delete(w, axis)) < 0.05, (axis, w)


def test_grasp_and_lift_without_slip():
    m, d = _scene(cube=True)
    env = _Env(m, d)
    cid = m.body("cube").id

    def tips():
        return 0.5 * (d.geom("robot0_finger_left_pad").xpos + d.geom("robot0_finger_right_pad").xpos)

    def go(target, grip, steps):
        for _ in range(steps):
            env.step(_act(dpos=np.clip((target - env.ee()) / C.POS_SCALE, -0.5, 0.5), grip=grip))

    c0 = d.xpos[cid].copy()
    go(c0 + [0, 0, 0.1], -1.0, 20)
    go(c0, -1.0, 25)
    for _ in range(10):
        env.step(_act(grip=1.0))
    z0 = d.xpos[cid][2]
    off0 = d.xpos[cid] - tips()
    goal = env.ee() + [0, 0, 0.3]
    slip = 0.0
    for _ in range(40):
        env.step(_act(dpos=np.clip((goal - env.ee()) / C.POS_SCALE, -0.5, 0.5), grip=1.0))
        slip = max(slip, float(np.linalg.norm(d.xpos[cid] - tips() - off0)))
    rise = d.xpos[cid][2] - z0
    assert rise >= 0.29, rise
    assert slip < 0.01, slip


def test_mjx_put_model():
    from mujoco import mjx

    spec = mujoco.MjSpec()
    R.apply_physics_options(spec)
    R.add_robot(spec, BASE)
    model = spec.compile()
    mx = mjx.put_model(model)
    assert mx.nu == 8 and mx.nq == 9


@pytest.mark.parametrize("half", [(0.02, 0.003, 0.03), (0.03, 0.0175, 0.03)], ids=["wall_6mm", "box_35mm"])
def test_grasp_thin_wall_and_box(half):
    """A closed gripper squeezes with the full GRIPPER_FORCE_LIMIT whatever the width: a 6 mm wall (a bowl's) and
    a 3.5 cm box (the cream cheese) are pinched without the pads sinking through them and lifted 0.2 m."""
    spec = mujoco.MjSpec()
    R.apply_physics_options(spec)
    w = spec.worldbody
    w.add_geom(name="table", type=mujoco.mjtGeom.mjGEOM_BOX, size=[0.5, 0.6, TABLE_TOP / 2], pos=[0, 0, TABLE_TOP / 2])
    R.add_robot(spec, BASE)
    b = w.add_body(name="obj", pos=[-0.2, 0.0, TABLE_TOP + half[2]])
    b.add_freejoint()
    b.add_geom(type=mujoco.mjtGeom.mjGEOM_BOX, size=list(half), mass=0.15)
    m = spec.compile()
    d = mujoco.MjData(m)
    R.set_init_qpos(m, d)
    env = _Env(m, d)
    oid = m.body("obj").id
    assert abs(env.ee_mat()[1, 1]) > 0.99  # the fingers close along world y, across the object's 2 * half[1]

    def go(target, grip, steps, lim=0.5):
        for _ in range(steps):
            env.step(_act(dpos=np.clip((target - env.ee()) / C.POS_SCALE, -lim, lim), grip=grip))

    top = d.xpos[oid] + [0, 0, half[2] - 0.015]
    go(top + [0, 0, 0.1], -1.0, 20)
    go(top, -1.0, 25)
    for _ in range(12):
        env.step(_act(grip=1.0))
    width = 2 * half[1]
    opening = d.qpos[env.fingers].sum()
    assert width - 0.002 < opening <= width + 0.001, opening  # pads sink < 1 mm each, not through the wall
    assert abs(d.actuator_force[m.actuator(R.GRIPPER_ACTUATOR).id] + R.GRIPPER_FORCE_LIMIT) < 1.0
    z0 = d.xpos[oid][2]
    go(env.ee() + [0, 0, 0.2], 1.0, 25, 0.4)
    assert d.xpos[oid][2] - z0 > 0.18
