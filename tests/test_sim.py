"""Scenes for all 130 tasks, settled initial states, the rollout engine's records, observations, export, CLI."""

import dataclasses

import jax
import mujoco
import numpy as np
import pytest

from clbench_jax.cli import main as cli_main
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
    return rollout.EpisodeBatch(task_ids=ids, goals=goals, state=np.concatenate([b.state for b in banks]),
                                mocap=np.concatenate([b.mocap for b in banks]),
                                keys=np.asarray(jax.random.split(jax.random.PRNGKey(seed), len(ids))))


def test_every_scene_builds_with_bddl_names():
    assert len(scenes()) >= 20
    for key in scenes():
        tasks = scene_tasks(key)
        scene = build_scene(tasks)
        m = scene.model
        for t in tasks:
            for name in list(t.objects) + [f for f, c in t.fixtures.items() if f != scene.arena_name]:
                assert m.body(name).id > 0, (key, name)
            for name in t.objects:
                assert m.jnt_type[m.joint(f"{name}_joint").id] == mujoco.mjtJoint.mjJNT_FREE
            # every region a task names on a fixture or object is a real site of the model
            for r, reg in t.regions.items():
                if reg.target != scene.arena_name:
                    assert m.site(r).id >= 0, (key, r)
        assert scene.mjx_model_host.nq == m.nq and scene.mjx_model_host.nmocap == 0


@pytest.mark.parametrize("suite", ["libero_spatial", "libero_object", "libero_goal", "libero_10", "libero_90"])
def test_init_predicates_hold_after_settling(suite):
    """For every task, >= 95% of raw samples satisfy all :init predicates after settling (20 samples each)."""
    rates = {}
    for t in suite_tasks(suite):
        bank = make_init_bank(scene_of(t), t, 20, seed=0, valid_only=False)
        rates[t.name] = bank.init_ok.mean()
    low = {k: v for k, v in rates.items() if v < 0.95}
    assert not low, low


def test_init_bank_is_deterministic_and_valid_only():
    t = get_task("libero_goal:8")
    scene = scene_of(t)
    a, b = make_init_bank(scene, t, 4, seed=3), make_init_bank(scene, t, 4, seed=3)
    np.testing.assert_array_equal(a.state, b.state)
    c = make_init_bank(scene, t, 4, seed=4)
    assert not np.allclose(a.state, c.state)
    assert a.init_ok.all()


def test_zero_policy_records():
    """Holding still: nothing moves, no success; a goal that already holds is seen at reset and at step 1."""
    t = get_task("libero_goal:8")  # put the bowl on the plate
    scene = scene_of(t)
    st = rollout.task_stack(scene)
    own = jax.tree.map(lambda x: x[scene.task_index(t.name)], st.goal)
    # goal 1: an init predicate of the task (holds at reset)
    held = env.task_arrays(scene, t, goal_atoms=[("on", "akita_black_bowl_1", "main_table_akita_black_bowl_region")]).goal
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


def test_stop_at_success_and_blowup_is_recorded():
    t = get_task("libero_goal:0")
    scene = scene_of(t)
    # goal 0 = an init predicate (holds immediately) so episodes stop at step 1 unless told otherwise
    goal = env.task_arrays(scene, t, goal_atoms=[("on", "wooden_cabinet_1", "main_table_cabinet_region")]).goal
    goals = jax.tree.map(lambda g: np.stack([g] * 2)[:, None], goal)
    batch = batch_for(scene, [t], 2, goals=goals)
    # world 1 starts with an absurd velocity on the bowl: the physics blows up, that episode fails, world 0 goes on
    nq = scene.model.nq
    adr = scene.model.jnt_dofadr[scene.model.joint("akita_black_bowl_1_joint").id]
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
    assert (steps < 0.3).all() and np.median(steps) < 0.06  # ~0.05 sqrt(3) m per step; IK jumps near singularities
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
        seen["mean"] = obs["agentview_rgb"].mean()
        return jax.numpy.zeros((keys.shape[0], 7)), pstate

    rollout.rollout(scene, policy, (), batch, 2, obs_mode="rgb", image_size=32, stop_at_success=False)
    assert seen["shape"] == (2, 32, 32, 3)


def test_export_xml_round_trip(tmp_path):
    t = get_task("libero_goal:3")
    scene = scene_of(t)
    xml = export_xml(scene, t)
    m = mujoco.MjModel.from_xml_string(xml)
    for name in ("akita_black_bowl_1", "wooden_cabinet_1", "flat_stove_1"):
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
    ctrl = np.tile(scene.model.qpos0[:scene.model.nu], (3, 1)) + rng.normal(0, 0.05, (3, scene.model.nu))
    full, part = NativeWorlds(scene.model, 3, 5, nthread=2), NativeWorlds(scene.model, 3, 5, nthread=2)
    for w in (full, part):
        w.set_state(bank.state, bank.mocap)
    before = part.state.copy()
    active = np.array([True, False, True])
    s_full, s_part = full.step(ctrl).copy(), part.step(ctrl, active).copy()
    np.testing.assert_array_equal(part.state[active], full.state[active])
    np.testing.assert_array_equal(s_part[active], s_full[active])
    np.testing.assert_array_equal(part.state[1], before[1])
    assert not np.array_equal(full.state[1], before[1])
    full.close(), part.close()
    r = BatchRenderer(scene.model, 32)
    img_all, img_some = r.render(part.state, part.mocap), r.render(part.state, part.mocap, active)
    r.close()
    np.testing.assert_array_equal(img_some[active], img_all[active])
    assert img_all[1].any() and not img_some[1].any()


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
