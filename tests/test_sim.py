"""Scenes for all 130 tasks, LIBERO's initial states, the rollout engine's records, observations, export, CLI."""

import dataclasses
import os
import signal

import jax
import mujoco
import numpy as np
import pytest

from clbench_jax.cli import main as cli_main
from clbench_jax.errors import ClbenchError
from clbench_jax.sim import env, rollout
from clbench_jax.sim.init_states import make_init_bank
from clbench_jax.sim.scene import build_scene, export_xml
from clbench_jax.tasks.suites import get_task, scene_tasks, scenes, suite_tasks

SCENES: dict = {}


def scene_of(task):
    if task.scene not in SCENES:
        SCENES[task.scene] = build_scene(scene_tasks(task.scene))
    return SCENES[task.scene]


def batch_for(scene, tasks, n, seed=0, goals=None):
    banks = [make_init_bank(scene, t, n, seed=seed) for t in tasks]
    ids = np.concatenate([[scene.task_index(t.name)] * n for t in tasks])
    if goals is None:
        goals = jax.tree.map(lambda x: x[ids][:, None], rollout.task_stack(scene).goal)
    return rollout.EpisodeBatch.of(banks, ids, goals, jax.random.split(jax.random.PRNGKey(seed), len(ids)))


@pytest.mark.slow
def test_every_scene_builds_and_loads_libero_states():
    """All 130 tasks: LIBERO's MJCF compiles in its scene, every BDDL entity is a body of it, objects are free,
    region sites exist, and LIBERO's 50 official states load (finite, objects where LIBERO put them: on or above
    the arena, not parked)."""
    from clbench_jax.sim import libero_source
    from clbench_jax.sim.init_states import libero_states

    assert len(scenes()) >= 20
    libero_source.prepare([t for key in scenes() for t in scene_tasks(key)], workers=2)  # one pool for all 130
    for key in scenes():
        tasks = scene_tasks(key)
        scene = build_scene(tasks)
        m = scene.model
        d = mujoco.MjData(m)
        for t in tasks:
            for name in list(t.objects) + [f for f, c in t.fixtures.items() if f != scene.arena_name]:
                assert m.body(scene.info[name].root_body).id > 0, (key, name)
            for name in t.objects:
                assert m.jnt_type[m.joint(scene.info[name].joints[0]).id] == mujoco.mjtJoint.mjJNT_FREE
            for r, reg in t.regions.items():  # every region on a fixture or object is a site of the model
                if reg.target != scene.arena_name:
                    assert m.site(r).id >= 0, (key, r)
            states = libero_states(scene, t)
            assert states.shape[0] == 50 and np.isfinite(states).all()
            mujoco.mj_setState(m, d, states[0], mujoco.mjtState.mjSTATE_FULLPHYSICS)
            mujoco.mj_kinematics(m, d)
            for name in t.objects:
                p = d.xpos[m.body(scene.info[name].root_body).id]
                # libero_object's floor scene rests objects on z = 0 (body origins down to -5 mm: the butter);
                # parked objects would stand 4 m away
                assert np.abs(p[:2]).max() < 1.0 and p[2] > -0.02, (t.name, name, p)


def test_init_bank_is_deterministic_per_index():
    """State i of a task's stream depends on (task, seed, i) only: LIBERO's official state i, with the fixture
    placement and controller reset joints drawn for (seed, i)."""
    from clbench_jax.sim.init_states import libero_states

    t = get_task("libero_goal:8")
    scene = scene_of(t)
    a, b = make_init_bank(scene, t, 4, seed=3), make_init_bank(scene, t, 4, seed=3)
    np.testing.assert_array_equal(a.state, b.state)
    np.testing.assert_array_equal(a.mocap, b.mocap)
    np.testing.assert_array_equal(a.q0, b.q0)
    np.testing.assert_array_equal(a.state, libero_states(scene, t)[:4])  # LIBERO's, unchanged
    tail = make_init_bank(scene, t, 2, seed=3, start=2)
    for f in ("state", "mocap", "q0"):
        np.testing.assert_array_equal(getattr(tail, f), getattr(a, f)[2:])
    c = make_init_bank(scene, t, 4, seed=4)
    np.testing.assert_array_equal(a.state, c.state)
    assert not np.allclose(a.mocap, c.mocap) and not np.allclose(a.q0, c.q0)
    assert np.abs(a.q0 - scene.robot.init_qpos).max() < 0.1  # robosuite's reset noise, std 0.02


def test_zero_policy_records():
    """Holding still: nothing moves, no success; a goal that already holds is seen at reset and at step 1."""
    t = get_task("libero_goal:8")  # put the bowl on the plate
    scene = scene_of(t)
    st = rollout.task_stack(scene)
    own = jax.tree.map(lambda x: x[scene.task_index(t.name)], st.goal)
    # goal 1: an init predicate of the task that holds at reset (the cabinet in its region)
    held = env.task_arrays(scene, t, goal_atoms=[("on", "wooden_cabinet_1", "main_table_cabinet_region")]).goal
    goals = jax.tree.map(lambda a, b: np.stack([a, b])[None].repeat(3, 0), own, held)
    batch = batch_for(scene, [t], 3, goals=goals)
    pol, p0 = rollout.zero_policy()
    rec = rollout.rollout(scene, pol, p0, batch, 30, stop_at_success=False, warmup=5)
    assert rec.success.shape == (3, 2)
    assert not rec.success[:, 0].any() and (rec.first_success[:, 0] == -1).all()
    assert rec.held_at_reset[:, 1].all() and not rec.held_at_reset[:, 0].any()
    assert (rec.first_success[:, 1] == 1).all()
    assert not rec.action_initiated.any()
    assert (rec.ee_disp_max < 0.005).all()
    assert (rec.length == 30).all() and (rec.fail_reason == 0).all() and (rec.first_grasp == -1).all()
    assert (rec.first_reach == -1).all()


def test_stop_at_success_and_blowup_is_recorded():
    t = get_task("libero_goal:0")
    scene = scene_of(t)
    # goal 0 = an init predicate (holds immediately) so episodes stop at step 1 unless told otherwise
    goal = env.task_arrays(scene, t, goal_atoms=[("on", "wooden_cabinet_1", "main_table_cabinet_region")]).goal
    goals = jax.tree.map(lambda g: np.stack([g] * 2)[:, None], goal)
    batch = batch_for(scene, [t], 2, goals=goals)
    # world 1 starts with an absurd velocity on the bowl: the physics blows up, that episode fails, world 0 goes on
    nq = scene.model.nq
    adr = scene.model.jnt_dofadr[scene.model.joint("akita_black_bowl_1_joint0").id]
    batch.state[1, 1 + nq + adr:1 + nq + adr + 3] = 1e5
    pol, p0 = rollout.zero_policy()
    rec = rollout.rollout(scene, pol, p0, batch, 20)
    assert rec.success[0, 0] and rec.length[0] == 1 and rec.done[0]
    assert rec.fail_reason[1] in (rollout.FAIL_NAN, rollout.FAIL_VELOCITY) and rec.done[1]
    assert not rec.success[1, 0]
    rec2 = rollout.rollout(scene, pol, p0, batch, 20, stop_at_success=False)
    assert rec2.length[0] == 20 and rec2.success[0, 0]


def test_random_rollout_moves_and_traces():
    tasks = suite_tasks("libero_goal")[:2]
    scene = scene_of(tasks[0])
    batch = batch_for(scene, tasks, 2)
    pol, p0 = rollout.random_policy()
    rec, tr = rollout.rollout(scene, pol, p0, batch, 25, stop_at_success=False, trace=True)
    assert rec.action_initiated.all()
    assert tr["ee_pos"].shape == (4, 26, 3) and tr["entity_pos"].shape[:2] == (4, 26)
    steps = np.linalg.norm(np.diff(tr["ee_pos"], axis=1), axis=-1)
    # the OSC is compliant: a full action moves the hand ~1.2 cm per step, never the 0.05 m its goal asks
    assert (steps < 0.05).all() and np.median(steps) > 0.002
    assert np.abs(tr["action"][:, :25]).max() <= 1.0


def test_object_tokens_hide_identity():
    t = get_task("libero_goal:8")
    scene = scene_of(t)
    c = env.scene_consts(scene)
    bank = make_init_bank(scene, t, 1)
    from clbench_jax.sim.native import NativeWorlds

    w = NativeWorlds(scene.model, 1, 1, nthread=1)
    sens = w.set_state(bank.state, bank.mocap)[0]
    w.close()
    ta = env.task_arrays(scene, t)
    tok1, m1 = env.object_tokens(c, sens, ta, jax.random.PRNGKey(0))
    tok2, m2 = env.object_tokens(c, sens, ta, jax.random.PRNGKey(1))
    assert int(m1.sum()) == len(t.objects) + len([f for f in t.fixtures if f != scene.arena_name])
    # same set of tokens, different order
    s1 = np.sort(np.asarray(tok1)[np.asarray(m1)], axis=0)
    s2 = np.sort(np.asarray(tok2)[np.asarray(m2)], axis=0)
    np.testing.assert_allclose(s1, s2)
    assert not np.allclose(np.asarray(tok1), np.asarray(tok2))


def test_rgb_observations_native():
    t = get_task("libero_goal:8")
    scene = scene_of(t)
    batch = batch_for(scene, [t], 2)
    seen = {}

    def policy(obs, pstate, keys):
        seen["shape"] = obs["agentview_rgb"].shape
        jax.debug.callback(lambda m: seen.__setitem__("mean", float(m)), obs["agentview_rgb"].mean())
        return jax.numpy.zeros((keys.shape[0], 7)), pstate

    rollout.rollout(scene, policy, (), batch, 2, obs_mode="rgb", image_size=32, stop_at_success=False)
    assert seen["shape"] == (2, 32, 32, 3)
    assert 40 < seen["mean"] < 220  # a lit scene, not a black or blank frame


def test_export_xml_round_trip(tmp_path):
    t = get_task("libero_goal:3")
    scene = scene_of(t)
    xml = export_xml(scene, t)
    m = mujoco.MjModel.from_xml_string(xml)
    for name in ("akita_black_bowl_1_main", "wooden_cabinet_1_main", "flat_stove_1_main"):
        assert m.body(name).id > 0
    for site in ("wooden_cabinet_1_top_region", "flat_stove_1_cook_region", "main_table_plate_region"):
        assert m.site(site).id >= 0
    assert m.nq == scene.model.nq
    out = tmp_path / "scene.xml"
    assert cli_main(["sim", "export", "libero_goal:3", "--out", str(out)]) == 0
    assert out.read_text().startswith("<mujoco")


def test_cli_tasks_and_bad_task(capsys):
    assert cli_main(["tasks", "list", "--suite", "libero_goal"]) == 0
    assert "put_the_bowl_on_the_plate" in capsys.readouterr().out
    assert cli_main(["tasks", "show", "libero_10:0"]) == 0
    assert cli_main(["tasks", "show", "libero_goal:put_the_bowl_on_the_plat"]) == 2
    assert "libero_goal" in capsys.readouterr().err


def test_native_step_and_render_only_active_worlds():
    """Stepping / rendering a subset of worlds gives those worlds exactly what a full step gives them and leaves the
    others as they were (finished episodes cost nothing)."""
    from clbench_jax.sim.native import NativeWorlds
    from clbench_jax.sim.render import BatchRenderer

    t = get_task("libero_goal:8")
    scene = scene_of(t)
    bank = make_init_bank(scene, t, 3)
    rng = np.random.default_rng(0)
    ctrl = rng.normal(0, 1.0, (3, scene.model.nu))  # raw motor torques (no controller userdata)
    full, part = NativeWorlds(scene.model, 3, 5, nthread=2), NativeWorlds(scene.model, 3, 5, nthread=2)
    for w in (full, part):
        w.set_state(bank.state, bank.mocap)
    before = part.state.copy()
    active = np.array([True, False, True])
    s_full, s_part = full.step(ctrl).copy(), part.step(ctrl, active=active).copy()
    np.testing.assert_array_equal(part.state[active], full.state[active])
    np.testing.assert_array_equal(s_part[active], s_full[active])
    np.testing.assert_array_equal(part.state[1], before[1])
    assert not np.array_equal(full.state[1], before[1])
    full.close(), part.close()
    r = BatchRenderer(scene.model, 32, workers=1)
    img_all, img_some = r.render(part.state, part.mocap), r.render(part.state, part.mocap, active)
    r.close()
    np.testing.assert_array_equal(img_some[active], img_all[active])
    assert img_all[1].any() and not img_some[1].any()
    # Two renderer processes draw every world exactly as one renderer here does (each world lands on either).
    pool = BatchRenderer(scene.model, 32, workers=2)
    img_pool, img_pool_some = pool.render(part.state, part.mocap), pool.render(part.state, part.mocap, active)
    assert pool.workers == 2 and pool._pool is not None
    victim = next(iter(pool._pool._processes.values()))  # a worker that dies: a clear error, no hang
    os.kill(victim.pid, signal.SIGKILL)
    victim.join()
    with pytest.raises(ClbenchError, match="render worker process died"):
        pool.render(part.state, part.mocap)
    pool.close()
    np.testing.assert_array_equal(img_pool, img_all)
    np.testing.assert_array_equal(img_pool_some, img_some)
    assert not np.array_equal(img_all[0], img_all[1])  # different states, different pictures


def test_inactive_rows_are_done_from_the_start():
    """EpisodeBatch.active=False rows (the grid's padding) never run: length 0, no success, no motion; the active
    rows' records are what they are without the padding."""
    tasks = suite_tasks("libero_goal")[:1]
    scene = scene_of(tasks[0])
    batch = batch_for(scene, tasks, 3)
    pol, p0 = rollout.random_policy()
    full = rollout.rollout(scene, pol, p0, batch, 12, stop_at_success=False)
    padded = rollout.rollout(scene, pol, p0, dataclasses.replace(batch, active=np.array([True, False, True])), 12,
                             stop_at_success=False)
    for name in ("length", "ee_disp_max", "success", "fail_reason"):
        a, b = np.asarray(getattr(full, name)), np.asarray(getattr(padded, name))
        np.testing.assert_array_equal(b[[0, 2]], a[[0, 2]])
    assert padded.length[1] == 0 and padded.done[1] and padded.ee_disp_max[1] == 0 and full.length[1] == 12
