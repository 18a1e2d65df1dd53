"""The native (MuJoCo C) and mjx (MJX) backends agree on LIBERO's real scene.

The mjx backend's controller reads the arm's dynamics from a robot-only MJX model: those equal MuJoCo's on the
full model (mass matrix, grip-site Jacobian, bias forces, site velocity). Then MJX-Warp, which runs on the CPU
here (slow: ~1 s per control step per world plus a ~2 min first compile), steps 2 worlds of libero_goal from
LIBERO's initial states with the same actions as native MuJoCo: MJX runs in float32 with its own collision
routines, so the tolerance is 1 mm over the 12 steps (a wrong mass, frame, gain or controller term moves the
hand by centimetres within a step or two); the predicates must agree at every step.
"""

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest

from clbench_jax.sim import fidelity, rollout
from clbench_jax.sim.init_states import make_init_bank
from clbench_jax.sim.mjx_backend import MjxBackend
from clbench_jax.sim.scene import build_scene
from clbench_jax.tasks.suites import suite_tasks


@pytest.fixture(scope="module")
def scene():
    return build_scene(suite_tasks("libero_goal"))


def test_robot_only_dynamics_equal_mujoco(scene):
    be = MjxBackend(scene, impl="warp")
    bank = make_init_bank(scene, scene.tasks[0], 2)
    m, rm = scene.model, scene.robot
    d = mujoco.MjData(m)
    f = jax.jit(be.arm_dynamics)
    rng = np.random.default_rng(0)
    for i in range(2):
        mujoco.mj_setState(m, d, bank.state[i], mujoco.mjtState.mjSTATE_FULLPHYSICS)
        d.qpos[rm.arm_qpos] += rng.normal(0, 0.3, 7)
        d.qvel[rm.arm_dof] = rng.normal(0, 0.5, 7)
        mujoco.mj_forward(m, d)
        want = fidelity.arm_jacobians(m, d, rm)
        mass, jac, bias, p, r, vel = f(jnp.asarray(d.qpos), jnp.asarray(d.qvel))
        for got, ref in zip((mass, jac, bias, vel), want):
            assert np.abs(np.asarray(got) - ref).max() <= 1e-5 * max(1.0, np.abs(ref).max())
        np.testing.assert_allclose(np.asarray(p), d.site_xpos[rm.grip_site], atol=1e-6)
        np.testing.assert_allclose(np.asarray(r).ravel(), d.site_xmat[rm.grip_site], atol=1e-6)


@pytest.mark.slow
def test_warp_steps_like_native(scene):
    tasks = scene.tasks
    banks = [make_init_bank(scene, t, 1, seed=2) for t in (tasks[6], tasks[0])]
    ids = np.array([6, 0])
    goals = jax.tree.map(lambda x: x[ids][:, None], rollout.task_stack(scene).goal)
    batch = rollout.EpisodeBatch.of(banks, ids, goals, jax.random.split(jax.random.PRNGKey(0), 2))
    rng = np.random.default_rng(1)
    acts = rng.uniform(-1, 1, (2, 10, 7)) * np.array([0.6, 0.6, 0.6, 0.2, 0.2, 0.2, 1.0])
    pol, p0 = rollout.replay_policy(acts)
    out = {b: rollout.rollout(scene, pol, p0, batch, 10, backend=b, warmup=2, stop_at_success=False, trace=True,
                              mjx_impl="warp") for b in ("native", "mjx")}
    (rn, tn), (rw, tw) = out["native"], out["mjx"]
    assert (rn.fail_reason == 0).all() and (rw.fail_reason == 0).all()
    moved = np.abs(np.diff(tn["ee_pos"], axis=1)).sum()
    assert moved > 0.05  # the hand went somewhere
    assert np.abs(tn["ee_pos"] - tw["ee_pos"]).max() < 1e-3
    assert np.abs(tn["entity_pos"] - tw["entity_pos"]).max() < 1e-3
    assert np.abs(tn["fingers"] - tw["fingers"]).max() < 1e-3
    assert (tn["holds"] == tw["holds"]).all()
